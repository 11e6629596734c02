//! The ghost exchange draws every message buffer from a [`BufferPool`], on 1 and 3 ranks,
//! coalesced and per channel, on a two-level 2-D mesh with a dense and a sparse variable
//! (allocated on some blocks only, so null messages travel too). Checked:
//!
//! - building and warming an exchange creates its buffers in the pool it is given;
//! - an exchange rebuilt on the same pool after the first is dropped (a remesh that changed
//!   nothing) reuses its buffers: per channel it creates none; coalesced, at most one per
//!   route, since a coalesced receive arena grows through sizes that follow the arrival
//!   order of the peers' messages; and once warm it creates none;
//! - the rebuilt exchange, on reused (previously written) storage, fills exactly the same
//!   ghosts as the first.

mod common;

use starhalo_boundary::pool::BufferPool;
use starhalo_boundary::{BlockData, Exchange, ExchangeOptions};
use starhalo_mesh::config::{BoundaryCondition, RefinementKind};
use starhalo_mesh::field::{Centering, Fields, Metadata, SparseThresholds};
use starhalo_mesh::{Mesh, MeshConfig, RefinementFlag};
use starhalo_sf::mpi::topology::Communicator;

fn main() {
    if std::env::var_os(common::CHILD_ENV).is_some() {
        child();
        return;
    }
    eprintln!("exchange_pool: exchange buffers come from, and go back to, a pool");
    common::relaunch_self(&[1, 3], 120);
}

fn mesh(nranks: usize) -> Mesh {
    let mut c = MeshConfig::new([16, 16, 1], [4, 4, 1]);
    c.bc[0] = [BoundaryCondition::Periodic; 2];
    c.bc[1] = [BoundaryCondition::Periodic; 2];
    c.refinement = RefinementKind::Adaptive;
    c.numlevel = 2;
    c.validate().expect("test mesh configuration");
    let mut mesh = Mesh::new(c, nranks).expect("test mesh");
    let flags: Vec<RefinementFlag> = (0..mesh.forest().len())
        .map(|g| {
            if g % 5 == 0 {
                RefinementFlag::Refine
            } else {
                RefinementFlag::Same
            }
        })
        .collect();
    mesh.remesh(&flags, None).expect("remesh");
    mesh
}

fn initial(mesh: &Mesh, rank: usize) -> BlockData {
    let mut f = Fields::default();
    let cell = || Metadata::new(Centering::Cell).fill_ghost();
    f.add("u", cell()).unwrap();
    f.add("s", cell().sparse(SparseThresholds::default()))
        .unwrap();
    let mut data = BlockData::new(mesh, &f, rank).unwrap();
    for (b, gid) in data.gids().to_vec().into_iter().enumerate() {
        data.set_allocated(b, 1, gid % 2 == 0);
        for v in 0..2 {
            if !data.is_allocated(b, v) {
                continue;
            }
            for (i, x) in data.fine_mut(b, v).iter_mut().enumerate() {
                *x = 1.0 + (gid * 1000 + v * 100_000 + i) as f64;
            }
        }
    }
    data
}

fn child() {
    let universe = starhalo_sf::mpi::initialize().unwrap();
    let world = universe.world();
    let mesh = mesh(world.size() as usize);
    let data = initial(&mesh, world.rank() as usize);
    for coalesced in [true, false] {
        let opts = ExchangeOptions {
            coalesced,
            ..ExchangeOptions::default()
        };
        let pool = BufferPool::new();
        let mut first = data.clone();
        let mut ex = Exchange::new_in(&world, &mesh, &first, opts, &pool).unwrap();
        for _ in 0..3 {
            ex.fill_ghosts(&mut first).unwrap();
        }
        let created = pool.created();
        // Per route: a send, a receive and a coalesced-receive arena.
        assert!(
            created >= 3,
            "coalesced {coalesced}: {created} pooled buffers"
        );
        assert_eq!(
            ex.pool().created(),
            created,
            "the exchange keeps the pool it was given"
        );
        drop(ex);

        let mut again = data.clone();
        let mut ex = Exchange::new_in(&world, &mesh, &again, opts, &pool).unwrap();
        for _ in 0..3 {
            ex.fill_ghosts(&mut again).unwrap();
        }
        // A coalesced receive arena grows as each peer's message arrives, so the sizes it
        // passes through follow the arrival order: each of its three routes (any, local,
        // nonlocal) may need one size the first exchange never asked for. Everything else
        // comes back from the pool.
        let slack = if coalesced { 3 * ex.partitions() } else { 0 };
        let extra = pool.created() - created;
        assert!(
            extra <= slack,
            "coalesced {coalesced}: the rebuilt exchange created {extra} new buffers of {created}"
        );
        let warm = pool.created();
        ex.fill_ghosts(&mut again).unwrap();
        assert_eq!(pool.created(), warm, "a warm fill creates no buffer");
        assert_ne!(first.data(), data.data(), "the fill changed nothing");
        assert_eq!(first.data(), again.data(), "coalesced {coalesced}");
    }
}
