//! Every static region the configuration accepts refines some block to its level, whatever
//! the rounding of the domain's block edges (a plane on the upper edge of a domain whose
//! width does not divide evenly once refined nothing).

use proptest::prelude::*;
use starhalo_mesh::{Mesh, MeshConfig};
use std::collections::BTreeMap;

/// A coordinate of the region along one direction: a fraction of the domain, or one of its
/// edges exactly (the edge values are where rounding bites).
fn coord(lo: f64, hi: f64, pick: u8, f: f64) -> f64 {
    match pick {
        0 => lo,
        1 => hi,
        _ => lo + f * (hi - lo),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn accepted_static_regions_refine_some_block(
        ndim in 1usize..=2,
        nrb in prop::array::uniform2(1usize..=5),
        xmin in prop::sample::select(vec![-1.0, 0.0, 0.1, 1.0 / 3.0, 7.7]),
        width in prop::sample::select(vec![0.9, 1.0, 0.7, 1e-3, 3.3, 0.3]),
        picks in prop::array::uniform4(0u8..4),
        fracs in prop::array::uniform4(0.0f64..1.0),
        level in 1u32..=2,
    ) {
        let mut m = BTreeMap::new();
        let mut put = |k: String, v: String| {
            m.insert(format!("parthenon/{k}"), v);
        };
        put("mesh/numlevel".into(), "3".into());
        put("static_refinement0/level".into(), level.to_string());
        for d in 0..ndim {
            let n = d + 1;
            let (lo, hi) = (xmin, xmin + width);
            put(format!("mesh/nx{n}"), (4 * nrb[d]).to_string());
            put(format!("meshblock/nx{n}"), "4".into());
            put(format!("mesh/x{n}min"), format!("{lo:?}"));
            put(format!("mesh/x{n}max"), format!("{hi:?}"));
            let a = coord(lo, hi, picks[2 * d], fracs[2 * d]);
            let b = coord(lo, hi, picks[2 * d + 1], fracs[2 * d + 1]);
            put(format!("static_refinement0/x{n}min"), format!("{:?}", a.min(b)));
            put(format!("static_refinement0/x{n}max"), format!("{:?}", a.max(b)));
        }
        if let Ok(c) = MeshConfig::from_map(&m) {
            let mesh = Mesh::new(c, 1).unwrap();
            let finest = mesh.forest().leaves().iter().map(|l| l.level()).max();
            prop_assert!(finest >= Some(level), "{m:?}: refined nothing");
        }
    }
}
