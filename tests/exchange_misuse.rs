//! An exchange set up from inputs that differ across ranks, or used with other data than it
//! was built for, fails with an error on every rank naming what differs: never a hang, an MPI
//! abort or a panic. Each case makes the last rank differ; on one rank nothing differs, and
//! the same set-up must succeed (the checks must not refuse agreeing inputs).

mod common;

#[global_allocator]
static GLOBAL: starhalo_exec::alloc_count::Counting = starhalo_exec::alloc_count::Counting;

use starhalo_boundary::{
    BlockData, BoundaryError, BoundaryType, Exchange, ExchangeOptions, Prolongation,
};
use starhalo_mesh::config::{BoundaryCondition, MeshConfig, RefinementKind, StaticRegion};
use starhalo_mesh::field::{Centering, Fields, IndexShape, Metadata};
use starhalo_mesh::Mesh;
use starhalo_sf::mpi::topology::{Communicator, SimpleCommunicator};

fn main() {
    if std::env::var_os(common::CHILD_ENV).is_some() {
        child();
    } else {
        eprintln!("exchange_misuse: set-ups that differ across ranks, data of another form");
        common::relaunch_self(&[1, 2, 3], 120);
    }
}

fn mesh(nranks: usize, pack_size: Option<usize>) -> Mesh {
    let mut c = MeshConfig::new([32, 32, 1], [8, 8, 1]);
    c.bc = [[BoundaryCondition::Periodic; 2]; 3];
    c.pack_size = pack_size;
    Mesh::new(c, nranks).unwrap()
}

fn fields(vars: &[(&str, usize)]) -> Fields {
    let mut f = Fields::default();
    for &(name, n) in vars {
        let md = Metadata::new(Centering::Cell).fill_ghost().components(n);
        f.add(name, md).unwrap();
    }
    f
}

/// `Exchange::new` on every rank: `Ok` where `agree`, else an error containing `want`.
fn expect(
    world: &SimpleCommunicator,
    case: &str,
    mesh: &Mesh,
    data: &BlockData,
    coalesced: bool,
    agree: bool,
    want: &str,
) {
    let opts = ExchangeOptions {
        coalesced,
        ..ExchangeOptions::default()
    };
    let got = Exchange::new(world, mesh, data, opts).map(drop);
    let rank = world.rank();
    match (agree, got) {
        (true, Ok(())) => {}
        (false, Err(e)) => assert!(
            e.to_string().contains(want),
            "{case} (coalesced {coalesced}) on rank {rank}: {e}"
        ),
        (_, got) => panic!("{case} (coalesced {coalesced}) on rank {rank}: {got:?}"),
    }
}

fn child() {
    let universe = starhalo_sf::mpi::initialize().expect("MPI init");
    let world = universe.world();
    let (me, n) = (world.rank() as usize, world.size() as usize);
    let odd = me == n - 1;
    let agree = n == 1;
    let m = mesh(n, None);
    let u = fields(&[("u", 1)]);
    for coalesced in [true, false] {
        // One more fill-ghost variable on one rank (this hung in set-up: each variable has
        // a communicator of its own, duplicated collectively).
        let f = if odd {
            fields(&[("u", 1), ("v", 1)])
        } else {
            u.clone()
        };
        let data = BlockData::new(&m, &f, me).unwrap();
        let vars = "the ranks hold different variables";
        expect(&world, "a variable more", &m, &data, coalesced, agree, vars);

        // Two components instead of one (this aborted MPI at the first fill, uncoalesced).
        let f = if odd { fields(&[("u", 2)]) } else { u.clone() };
        let data = BlockData::new(&m, &f, me).unwrap();
        expect(&world, "more components", &m, &data, coalesced, agree, vars);

        // Another pack_size on one rank: other partitions, other messages (this hung).
        let p = mesh(n, odd.then_some(1));
        let data = BlockData::new(&p, &u, me).unwrap();
        let parts = "the ranks hold different mesh-data partitions";
        expect(&world, "pack_size", &p, &data, coalesced, agree, parts);

        // Another boundary condition on one rank: other neighbours across the faces.
        let mut c = MeshConfig::new([32, 32, 1], [8, 8, 1]);
        c.bc = [[BoundaryCondition::Outflow; 2]; 3];
        let outflow = Mesh::new(c, n).unwrap();
        let on = if odd { &outflow } else { &m };
        let data = BlockData::new(on, &u, me).unwrap();
        let meshes = "the ranks hold different meshes";
        expect(
            &world,
            "boundary conditions",
            on,
            &data,
            coalesced,
            agree,
            meshes,
        );

        // Coalesced on all but one rank.
        let data = BlockData::new(&m, &u, me).unwrap();
        let options = "the ranks hold different exchange options";
        let mixed = coalesced != odd;
        expect(
            &world,
            "coalesced on some",
            &m,
            &data,
            mixed,
            agree,
            options,
        );

        // Another ghost width.
        let shape = IndexShape::new([8, 8, 1], if odd { 3 } else { 2 }, 2).unwrap();
        let gids = m.partition().blocks_of(me).collect();
        let data = BlockData::for_blocks(&u, gids, shape, None).unwrap();
        let shapes = "the ranks hold different block shapes";
        expect(&world, "nghost", &m, &data, coalesced, agree, shapes);

        // A mesh partitioned for one rank more than there are (this aborted MPI): refused
        // alike on every rank, one rank too.
        let more = mesh(n + 1, None);
        let data = BlockData::new(&more, &u, me).unwrap();
        let want = format!("but the communicator has {n} ranks");
        expect(
            &world,
            "too many ranks",
            &more,
            &data,
            coalesced,
            false,
            &want,
        );
    }

    // A multilevel mesh with data made without coarse buffers: named as such, on every rank
    // (was a sub-halo "outside" the layout).
    let mut c = MeshConfig::new([32, 32, 1], [8, 8, 1]);
    c.bc = [[BoundaryCondition::Periodic; 2]; 3];
    c.refinement = RefinementKind::Static;
    c.numlevel = 2;
    c.static_regions.push(StaticRegion {
        xmin: [0.375, 0.375, 0.0],
        xmax: [0.625, 0.625, 1.0],
        level: 1,
        id: 0,
    });
    let two = Mesh::new(c, n).unwrap();
    let gids = two.partition().blocks_of(me).collect();
    let data = BlockData::for_blocks(&u, gids, two.index_shape().unwrap(), None).unwrap();
    for coalesced in [true, false] {
        let want = "the data needs coarse buffers";
        expect(
            &world,
            "no coarse buffers",
            &two,
            &data,
            coalesced,
            false,
            want,
        );
    }

    // Data of another form than the exchange was built for (these panicked).
    let data = BlockData::new(&m, &fields(&[("a", 1), ("b", 1)]), me).unwrap();
    let mut ex = Exchange::new(&world, &m, &data, ExchangeOptions::default()).unwrap();
    let mut other = BlockData::new(&m, &fields(&[("u", 2)]), me).unwrap();
    let got = ex.fill_ghosts(&mut other);
    let want = "not the form the exchange was built for: 2 variables, not 1";
    assert!(
        matches!(&got, Err(BoundaryError::Invalid(e)) if e.contains(want)),
        "rank {me}: {got:?}"
    );
    assert!(
        ex.set_prolongation(2, Prolongation::Constant).is_err(),
        "a third variable"
    );
    ex.set_prolongation(1, Prolongation::Constant).unwrap();
    let first = data.gids()[..1].to_vec();
    let mut fewer = BlockData::for_blocks(&u, first, *data.shape(), None).unwrap();
    let got = ex.fill_ghosts(&mut fewer);
    let want = format!("{} blocks, not 1", data.gids().len());
    let named = |e: Option<&BoundaryError>| matches!(e, Some(BoundaryError::Invalid(m)) if m.contains(&want));
    assert!(named(got.as_ref().err()), "{got:?}");
    // Each phase checks, not only the first send.
    let set = ex.set_bounds(0, BoundaryType::Any, &mut fewer);
    let finish = ex.finish(0, &mut fewer);
    assert!(named(set.as_ref().err()), "{set:?}");
    assert!(named(finish.as_ref().err()), "{finish:?}");
    // The right data still fills (the refusals happened before anything moved), and a warm
    // fill, checks included, allocates nothing.
    let mut data = data;
    ex.fill_ghosts(&mut data).unwrap();
    let before = starhalo_exec::alloc_count::allocations();
    ex.fill_ghosts(&mut data).unwrap();
    let allocs = starhalo_exec::alloc_count::allocations() - before;
    assert_eq!(
        allocs, 0,
        "rank {me}: a warm fill_ghosts allocated {allocs} times"
    );
}
