//! `inputs/parthenon_advection.in`: a deck in Parthenon's `.in` format laid out as its
//! advection example (`<Advection>`, a `variables` list continued over lines with `&`,
//! `use_pack_in_one = false`, the derived fields in the outputs), on 2 ranks. Checked:
//!
//! - every hdf5 output holds the advected field and Parthenon's four derived fields, each
//!   equal to its formula of the advected field, cell for cell, and the `_12`/`_37` pair
//!   listed as one sparse pool;
//! - with pack-in-one (one partition per rank) the fields are bit-identical;
//! - `fill_derived = false` makes the list bad input, as does `use_pack_in_one = false`
//!   beside a `pack_size` of more than one block; exit 2 on every rank.

mod common;

use std::path::{Path, PathBuf};

const LIMIT_S: u64 = 120;
const DERIVED: [&str; 4] = [
    "one_minus_advected",
    "one_minus_advected_sq",
    "one_minus_sqrt_one_minus_advected_sq_12",
    "one_minus_sqrt_one_minus_advected_sq_37",
];

fn deck() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("inputs/parthenon_advection.in")
        .to_str()
        .unwrap()
        .to_string()
}

fn scratch(name: &str) -> PathBuf {
    common::scratch("pin", name)
}

fn run(name: &str, overrides: &[&str]) -> PathBuf {
    let dir = scratch(name);
    let deck = deck();
    let mut args = vec![deck.as_str(), "-d", dir.to_str().unwrap()];
    args.extend_from_slice(overrides);
    let out = common::starhalo_run(2, LIMIT_S, &args);
    common::assert_ok(&format!("{name} {overrides:?}"), &out);
    dir
}

fn read(file: &hdf5::File, name: &str) -> Vec<f64> {
    file.dataset(name)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .read_raw()
        .unwrap()
}

/// The `SparseInfo` dataset (allocation flags) and the sparse variables it names.
fn sparse_info(file: &hdf5::File) -> (hdf5::Dataset, Vec<String>) {
    let info = file.dataset("SparseInfo").unwrap();
    let names = (info.attr("SparseFields"))
        .and_then(|a| a.read_raw::<hdf5::types::VarLenUnicode>())
        .unwrap()
        .iter()
        .map(|s| s.to_string())
        .collect();
    (info, names)
}

#[test]
fn parthenons_advection_deck_writes_its_derived_fields() {
    let dir = run("derived", &[]);
    let names = [
        "advection.out0.00000.phdf",
        "advection.out0.00001.phdf",
        "advection.out0.final.phdf",
    ];
    for name in names {
        let f = hdf5::File::open(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let q = read(&f, "advected");
        // The hard sphere: both values present, so every formula is exercised.
        assert!(q.iter().any(|&x| x > 0.9) && q.iter().any(|&x| x.abs() < 1e-3));
        let want: [fn(f64) -> f64; 4] = [
            |q| 1.0 - q,
            |q| (1.0 - q) * (1.0 - q),
            |q| 1.0 - ((1.0 - q) * (1.0 - q)).sqrt(),
            |q| 1.0 - (1.0 - ((1.0 - q) * (1.0 - q)).sqrt()),
        ];
        for (d, f_of) in DERIVED.iter().zip(want) {
            let got = read(&f, d);
            assert_eq!(got.len(), q.len(), "{name} {d}");
            for (i, (&g, &x)) in got.iter().zip(&q).enumerate() {
                assert_eq!(g.to_bits(), f_of(x).to_bits(), "{name} {d}[{i}] of q = {x}");
            }
        }
        let (info, sparse) = sparse_info(&f);
        assert_eq!(sparse, DERIVED[2..], "{name}");
        let allocated: Vec<bool> = info.read_raw().unwrap();
        assert!(
            allocated.iter().all(|&a| a),
            "{name}: the pool is allocated everywhere"
        );
    }
    // The example's own refinement test: after the initial refinement the family of each
    // finest block (level 2) holds the sphere's edge (radius 0.15, Parthenon's, around the box centre),
    // give or take the ghosts a block also tests.
    let f = hdf5::File::open(dir.join("advection.out0.00000.phdf")).unwrap();
    // The package's parameters, as Parthenon's example names them in /Params.
    let params = f.group("Params").unwrap();
    let real = |k: &str| -> f64 { params.attr(k).unwrap().read_scalar().unwrap() };
    assert_eq!(real("advection_package/cfl"), 0.45);
    assert_eq!(real("advection_package/vel"), 3f64.sqrt());
    let profile: hdf5::types::VarLenUnicode = params
        .attr("advection_package/profile")
        .unwrap()
        .read_scalar()
        .unwrap();
    assert_eq!(profile.as_str(), "hard_sphere");
    let levels: Vec<i64> = f.dataset("Levels").unwrap().read_raw().unwrap();
    let (x, y) = (read(&f, "Locations/x"), read(&f, "Locations/y"));
    let (nx, ny) = (x.len() / levels.len(), y.len() / levels.len());
    let mut finest = 0;
    for (b, &level) in levels.iter().enumerate() {
        // The block's family (its parent's box): refinement splits a block into all of it.
        let (lo, hi) = (
            [x[b * nx], y[b * ny]],
            [x[(b + 1) * nx - 1], y[(b + 1) * ny - 1]],
        );
        let w = 2.0 * (hi[0] - lo[0]);
        let lo = lo.map(|l| -0.5 + ((l + 0.5) / w).floor() * w);
        let hi = lo.map(|l| l + w);
        // Nearest and farthest points of the family from the centre, on the periodic box.
        let (mut near, mut far) = (f64::INFINITY, 0.0f64);
        for sx in [-1.0, 0.0, 1.0] {
            for sy in [-1.0, 0.0, 1.0] {
                let c = [sx, sy];
                let d = |p: [f64; 2]| (p[0] - c[0]).hypot(p[1] - c[1]);
                let clamp = |d: usize| c[d].clamp(lo[d], hi[d]);
                near = near.min(d([clamp(0), clamp(1)]));
                let corners = [lo, hi, [lo[0], hi[1]], [hi[0], lo[1]]];
                let nearest_corner = corners.iter().map(|&p| d(p)).fold(f64::INFINITY, f64::min);
                if nearest_corner < 0.8 {
                    far = far.max(corners.iter().map(|&p| d(p)).fold(0.0, f64::max));
                }
            }
        }
        if level == 2 {
            finest += 1;
            assert!(
                near < 0.15 + 0.04 && far > 0.15 - 0.04,
                "finest block {b}'s family [{lo:?}, {hi:?}] is {near} to {far} from the centre"
            );
        }
    }
    assert!(finest > 0);
    // Restart files hold what a continuation needs: the advected field alone.
    let rst = hdf5::File::open(dir.join("advection.out1.final.rhdf")).unwrap();
    assert!(rst.dataset("advected").is_ok());
    assert!(rst.dataset(DERIVED[0]).is_err());

    // Pack-in-one changes how ghosts travel, never what arrives.
    let one = run("in-one", &["Advection/use_pack_in_one=true"]);
    for name in names {
        let a = hdf5::File::open(dir.join(name)).unwrap();
        let b = hdf5::File::open(one.join(name)).unwrap();
        let (qa, qb) = (read(&a, "advected"), read(&b, "advected"));
        assert!(
            qa.iter().zip(&qb).all(|(x, y)| x.to_bits() == y.to_bits()) && qa.len() == qb.len(),
            "{name}: per-block and pack-in-one exchanges differ"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&one);
}

/// Two sparse advected fields: the derived fields have a component per field and are
/// allocated on every block, as Parthenon's are; where a field is not allocated (written as
/// NaN here) they derive from its default, 0.
#[test]
fn derived_fields_of_two_sparse_fields() {
    let dir = run(
        "sparse",
        &[
            "Advection/num_vars=2",
            "advection/sparse=true",
            "parthenon/output0/sparse_seed_nans=true",
            "parthenon/output0/variables=advected,advected_1,one_minus_advected,one_minus_sqrt_one_minus_advected_sq",
        ],
    );
    let f = hdf5::File::open(dir.join("advection.out0.final.phdf")).unwrap();
    let (q0, q1) = (read(&f, "advected"), read(&f, "advected_1"));
    let (one, pool) = (read(&f, DERIVED[0]), read(&f, DERIVED[3]));
    let (info, names) = sparse_info(&f);
    assert_eq!(names, ["advected", "advected_1", DERIVED[2], DERIVED[3]]);
    let flags: Vec<bool> = info.read_raw().unwrap();
    let nb = flags.len() / names.len();
    let n = q0.len() / nb;
    assert_eq!(one.len(), 2 * q0.len(), "a component per field");
    let mut unallocated = 0;
    for b in 0..nb {
        let fl = &flags[b * names.len()..][..names.len()];
        assert!(fl[2] && fl[3], "block {b}: {fl:?}");
        for (c, q) in [&q0, &q1].into_iter().enumerate() {
            unallocated += usize::from(!fl[c]);
            for i in 0..n {
                let at = (2 * b + c) * n + i;
                let x = if fl[c] { q[b * n + i] } else { 0.0 };
                assert_eq!(fl[c], !q[b * n + i].is_nan(), "block {b} field {c}");
                let want = [1.0 - x, 1.0 - (1.0 - ((1.0 - x) * (1.0 - x)).sqrt())];
                assert_eq!(
                    [one[at].to_bits(), pool[at].to_bits()],
                    want.map(f64::to_bits),
                    "block {b} field {c} cell {i}"
                );
            }
        }
    }
    assert!(
        unallocated > 0,
        "every field allocated everywhere: nothing tested"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn parthenon_deck_keys_that_contradict_are_bad_input() {
    let deck = deck();
    let dir = scratch("bad");
    let d = dir.to_str().unwrap();
    for (overrides, needle) in [
        (
            &["advection/fill_derived=false"][..],
            "parthenon/output0/variables at ",
        ),
        (
            &["parthenon/mesh/pack_size=4"][..],
            "advection/use_pack_in_one",
        ),
    ] {
        let mut args = vec![deck.as_str(), "-d", d];
        args.extend_from_slice(overrides);
        let out = common::starhalo_run(2, LIMIT_S, &args);
        common::assert_bad_input(&format!("{overrides:?}"), &out, needle);
        if overrides[0].contains("fill_derived") {
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("`one_minus_advected`: no such variable"),
                "{err}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
