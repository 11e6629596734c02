//! A forest whose buffer check failed on one rank takes no more operations there: its peers
//! ran their halves of the failed operation and sent for it, and a later operation on that
//! rank would otherwise take those messages for its own and return their stale values. The
//! other ranks' results stay exact. On 1, 2 and 4 ranks, under the basic implementation
//! (whose sends complete without the receiver, so the peers carry on).

mod common;

use starhalo_sf::mpi::topology::{Communicator, SimpleCommunicator};
use starhalo_sf::{
    Graph, NodeAwareSf, Nodes, Op, RootRef, SfError, SfOptions, Staged, StarForest, Strategy,
};

fn main() {
    if std::env::var_os(common::CHILD_ENV).is_some() {
        child();
    } else {
        eprintln!("sf_out_of_step: a failed check on one rank, then more operations");
        common::relaunch_self(&[1, 2, 4], 60);
    }
}

fn child() {
    let universe = starhalo_sf::mpi::initialize().expect("MPI init");
    let world = universe.world();
    let (rank, n) = (world.rank() as usize, world.size() as usize);
    // Every rank owns one root; rank 0 has a leaf on each, its own first.
    let leaves = match rank {
        0 => (0..n)
            .map(|q| RootRef {
                rank: q as i64,
                offset: 0,
            })
            .collect(),
        _ => Vec::new(),
    };
    let sf = StarForest::new(&world, &Graph::new(1, None, leaves), SfOptions::default()).unwrap();
    // Units of zero bytes are refused alike on every rank (they depend on the type only),
    // and do not put the forest out of step.
    let none: [[f64; 0]; 1] = [[]];
    let mut leaf0 = vec![[0.0f64; 0]; sf.leaf_space()];
    let got = sf.bcast(&none, &mut leaf0, Op::Replace);
    assert_eq!(got, Err(SfError::Unsupported("units of zero bytes")));
    let bad = n - 1;
    let leaf: Vec<f64> = (0..sf.leaf_space()).map(|q| (q + 1) as f64).collect();
    for call in 0..3 {
        let scale = f64::from(10 * (call + 1));
        let values: Vec<f64> = leaf.iter().map(|v| v * scale).collect();
        let mut root = vec![0.0; if rank == bad && call == 0 { 0 } else { 1 }];
        let got = sf.reduce(&values, &mut root, Op::Sum);
        match (rank == bad, call) {
            (true, 0) => assert!(
                matches!(got, Err(SfError::BufferTooShort { .. })),
                "rank {rank}: {got:?}"
            ),
            (true, _) => assert!(
                matches!(got, Err(SfError::OutOfStep)),
                "rank {rank} call {call}: a stale message taken for this call's: {got:?} {root:?}"
            ),
            (false, _) => {
                got.unwrap();
                assert_eq!(root, [(rank + 1) as f64 * scale], "rank {rank} call {call}");
            }
        }
    }
    if rank == bad {
        let mut leaf = vec![0.0; sf.leaf_space()];
        let got = sf.bcast(&[1.0], &mut leaf, Op::Replace);
        assert!(matches!(got, Err(SfError::OutOfStep)), "{got:?}");
        let msg = SfError::OutOfStep.to_string();
        assert!(
            msg.contains("out of step") && msg.contains("fatal"),
            "{msg}"
        );
    }
    staged(&world, &sf);
    routed(&world, &sf);
    drop(sf);
}

/// The same through a staged forest, whose packed forest moves the messages.
fn staged(world: &SimpleCommunicator, sf: &StarForest) {
    let (rank, n) = (world.rank() as usize, world.size() as usize);
    let staged = Staged::new(sf).unwrap();
    let bad = n - 1;
    let leaf: Vec<f64> = (0..sf.leaf_space()).map(|q| (q + 1) as f64).collect();
    for call in 0..2 {
        let mut root = vec![0.0; if rank == bad && call == 0 { 0 } else { 1 }];
        let got = staged.reduce(&leaf, &mut root, Op::Sum);
        match (rank == bad, call) {
            (true, 0) => assert!(
                matches!(got, Err(SfError::BufferTooShort { .. })),
                "{got:?}"
            ),
            (true, _) => assert_eq!(got, Err(SfError::OutOfStep), "staged, {root:?}"),
            (false, _) => {
                got.unwrap();
                assert_eq!(root, [(rank + 1) as f64], "staged, rank {rank} call {call}");
            }
        }
    }
}

/// A node-aware route whose bcast check failed on rank 0 (a short leaf array: the only rank
/// with leaves, so no peer waits on it) refuses its reduces, fetch-and-ops and bcasts there:
/// every forest of the route is out of step, the relays' too.
fn routed(world: &SimpleCommunicator, sf: &StarForest) {
    let (rank, n) = (world.rank() as usize, world.size() as usize);
    let nodes = Nodes::blocks(n, 2);
    for strategy in [Strategy::TwoStep, Strategy::ThreeStep] {
        let routed =
            NodeAwareSf::new(world, sf.graph(), SfOptions::default(), &nodes, strategy).unwrap();
        let root = [rank as f64];
        let mut leaf = vec![0.0; if rank == 0 { n - 1 } else { 0 }];
        let got = routed.bcast(&root, &mut leaf, Op::Replace);
        if rank != 0 {
            got.unwrap();
            continue;
        }
        assert!(
            matches!(got, Err(SfError::BufferTooShort { .. })),
            "{strategy:?}: {got:?}"
        );
        let (mut root, mut leaf) = ([0.0], vec![0.0; n]);
        let ones = vec![1.0; n];
        let refused = [
            routed.reduce(&ones, &mut root, Op::Sum),
            routed.reduce(&ones, &mut root, Op::Replace),
            routed.fetch_and_op(&mut root, &ones, &mut leaf, Op::Sum),
            routed.bcast(&[1.0], &mut leaf, Op::Replace),
        ];
        for got in refused {
            assert_eq!(got, Err(SfError::OutOfStep), "{strategy:?}");
        }
        for (i, f) in routed.forests().enumerate() {
            let got = f.bcast(&[1.0], &mut vec![0.0; f.leaf_space()], Op::Replace);
            assert_eq!(got, Err(SfError::OutOfStep), "{strategy:?}: forest {i}");
        }
    }
}
