//! The seeded random AMR meshes the multi-rank tests run on.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use starhalo_mesh::config::{BoundaryCondition, RefinementKind};
use starhalo_mesh::{Mesh, MeshConfig, RefinementFlag};

/// A random adaptive mesh on `nranks` ranks: 2-D (16x16 cells in 4x4 blocks) or 3-D (8^3
/// cells in 4^3 blocks) over `[-1, 1] x [-0.5, 0.5] x [0, 1]`, up to 3 levels after two rounds
/// of random refinement flags, one mesh-data partition per rank or partitions of 3 blocks.
/// Each direction is periodic, or (with even odds, drawn first from `rng`) has both faces of
/// one of `walls`, drawn at random where there are several; periodic everywhere without
/// `walls`.
pub fn random_amr_mesh(
    rng: &mut ChaCha8Rng,
    ndim: usize,
    nranks: usize,
    walls: &[BoundaryCondition],
) -> Mesh {
    let (nx, bnx) = if ndim == 2 {
        ([16, 16, 1], [4, 4, 1])
    } else {
        ([8, 8, 8], [4, 4, 4])
    };
    let mut c = MeshConfig::new(nx, bnx);
    c.xmin = [-1.0, -0.5, 0.0];
    c.xmax = [1.0, 0.5, 1.0];
    for d in 0..ndim {
        let bc = match walls {
            [] => BoundaryCondition::Periodic,
            _ if rng.gen_bool(0.5) => BoundaryCondition::Periodic,
            [one] => *one,
            _ => walls[rng.gen_range(0..walls.len())],
        };
        c.bc[d] = [bc, bc];
    }
    c.refinement = RefinementKind::Adaptive;
    c.numlevel = 3;
    c.pack_size = if rng.gen_bool(0.5) { None } else { Some(3) };
    c.validate().expect("test mesh configuration");
    let mut mesh = Mesh::new(c, nranks).expect("test mesh");
    for round in 0..2 {
        let p = if round == 0 { 0.4 } else { 0.25 };
        let flags: Vec<RefinementFlag> = (0..mesh.forest().len())
            .map(|_| {
                if rng.gen_bool(p) {
                    RefinementFlag::Refine
                } else {
                    RefinementFlag::Same
                }
            })
            .collect();
        mesh.remesh(&flags, None).expect("remesh");
    }
    mesh
}
