//! Bad and degenerate mesh input is an error that names the key, never a panic.

use starhalo_mesh::{Mesh, MeshConfig};
use std::collections::BTreeMap;

fn deck(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut m: BTreeMap<String, String> = [
        ("parthenon/mesh/nx1", "32"),
        ("parthenon/mesh/nx2", "32"),
        ("parthenon/meshblock/nx1", "8"),
        ("parthenon/meshblock/nx2", "8"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (k, v) in pairs {
        m.insert(format!("parthenon/{k}"), v.to_string());
    }
    m
}

/// The deck is rejected (by the parser or by `Mesh::new`) with an error naming `key`.
fn rejected(pairs: &[(&str, &str)], key: &str) {
    let m = deck(pairs);
    let err = match MeshConfig::from_map(&m) {
        Err(e) => e,
        Ok(c) => match Mesh::new(c, 4) {
            Err(e) => e,
            Ok(_) => panic!("{pairs:?} was accepted"),
        },
    };
    assert_eq!(err.key(), Some(key), "{pairs:?}: {err}");
}

#[test]
fn degenerate_decks_are_errors_naming_the_key() {
    rejected(&[("mesh/nx1", "0")], "parthenon/mesh/nx1");
    rejected(&[("mesh/nx1", "-8")], "parthenon/mesh/nx1");
    rejected(&[("meshblock/nx1", "0")], "parthenon/meshblock/nx1");
    rejected(&[("meshblock/nx1", "5")], "parthenon/meshblock/nx1");
    rejected(&[("mesh/ix2_bc", "wrap")], "parthenon/mesh/ix2_bc");
    rejected(&[("mesh/x1max", "-1")], "parthenon/mesh/x1max");
    rejected(&[("mesh/x1min", "NaN")], "parthenon/mesh/x1min");
    rejected(&[("mesh/x1max", "inf")], "parthenon/mesh/x1max");
    rejected(&[("mesh/x1min", "-inf")], "parthenon/mesh/x1min");
    rejected(&[("mesh/numlevel", "0")], "parthenon/mesh/numlevel");
    rejected(&[("mesh/pack_size", "0")], "parthenon/mesh/pack_size");
    rejected(&[("mesh/pack_size", "-7")], "parthenon/mesh/pack_size");
    rejected(&[("mesh/nghost", "0")], "parthenon/mesh/nghost");
    rejected(
        &[("mesh/refinement", "sometimes")],
        "parthenon/mesh/refinement",
    );
    rejected(&[("mesh/multigrid", "maybe")], "parthenon/mesh/multigrid");
    // The extent of an inactive direction is still the cells' depth.
    rejected(&[("mesh/x3min", "2")], "parthenon/mesh/x3max");
    // Static regions with refinement explicitly off.
    rejected(
        &[
            ("mesh/refinement", "none"),
            ("mesh/numlevel", "2"),
            ("static_refinement0/level", "1"),
        ],
        "parthenon/mesh/refinement",
    );
    // Blocks too small for the coarse buffers of a multilevel mesh (n/2 < nghost).
    rejected(
        &[
            ("mesh/refinement", "adaptive"),
            ("mesh/numlevel", "2"),
            ("meshblock/nx1", "2"),
        ],
        "parthenon/meshblock/nx1",
    );
    rejected(
        &[
            ("mesh/refinement", "static"),
            ("mesh/numlevel", "2"),
            ("mesh/nghost", "4"),
            ("meshblock/nx2", "4"),
        ],
        "parthenon/meshblock/nx2",
    );
    // Odd ghost layers cannot be prolongated in pairs.
    rejected(
        &[
            ("mesh/refinement", "adaptive"),
            ("mesh/numlevel", "2"),
            ("mesh/nghost", "3"),
        ],
        "parthenon/mesh/nghost",
    );
    // More levels than the block sizes allow.
    rejected(
        &[
            ("mesh/refinement", "adaptive"),
            ("mesh/numlevel", "4294967295"),
        ],
        "parthenon/mesh/numlevel",
    );
    rejected(
        &[("mesh/refinement", "adaptive"), ("mesh/numlevel", "40")],
        "parthenon/mesh/numlevel",
    );
    // Huge numbers.
    for v in [
        "18446744073709551615",
        "9223372036854775807",
        "1099511627776000",
    ] {
        rejected(
            &[
                ("mesh/nx1", v),
                ("meshblock/nx1", "1"),
                ("mesh/nghost", "1"),
            ],
            "parthenon/mesh/nx1",
        );
    }
    rejected(
        &[("mesh/nx1", "99999999999999999999999")],
        "parthenon/mesh/nx1",
    );
    rejected(
        &[
            ("mesh/nx1", "1048576"),
            ("mesh/nx2", "1048576"),
            ("mesh/nx3", "1048576"),
            ("meshblock/nx1", "2"),
            ("meshblock/nx2", "2"),
            ("meshblock/nx3", "2"),
        ],
        "parthenon/mesh/nx2",
    );
    rejected(
        &[
            ("mesh/nx1", "18446744073709551614"),
            ("meshblock/nx1", "18446744073709551614"),
        ],
        "parthenon/meshblock/nx1",
    );
    rejected(
        &[("mesh/nghost", "18446744073709551615")],
        "parthenon/meshblock/nx1",
    );
    rejected(
        &[("mesh/derefine_count", "-1")],
        "parthenon/mesh/derefine_count",
    );
    rejected(
        &[("static_refinement0/level", "1")],
        "parthenon/static_refinement0/level",
    );
    rejected(
        &[
            ("mesh/refinement", "static"),
            ("mesh/numlevel", "2"),
            ("static_refinement0/level", "1"),
            ("static_refinement0/x1min", "NaN"),
        ],
        "parthenon/static_refinement0/x1min",
    );
    rejected(
        &[
            ("mesh/refinement", "static"),
            ("mesh/numlevel", "2"),
            ("static_refinementX/level", "1"),
        ],
        "parthenon/static_refinementX/level",
    );
}

#[test]
fn largest_allowed_sizes_are_accepted() {
    // The limits themselves are fine: 2^24 root blocks in 1-D is rejected only past the cap.
    let mut c = MeshConfig::new([1 << 24, 1, 1], [1, 1, 1]);
    c.nghost = 1;
    assert!(c.validate().is_ok());
    c.nx[0] = (1 << 24) + 1;
    assert_eq!(c.validate().unwrap_err().key(), Some("parthenon/mesh/nx1"));
    // A direct config with pack_size Some(0) is rejected like the deck's 0.
    let mut c = MeshConfig::new([8, 1, 1], [4, 1, 1]);
    c.pack_size = Some(0);
    assert_eq!(
        c.validate().unwrap_err().key(),
        Some("parthenon/mesh/pack_size")
    );
}

#[test]
fn zero_ranks_is_an_error() {
    let c = MeshConfig::from_map(&deck(&[])).unwrap();
    assert!(Mesh::new(c, 0).is_err());
}
