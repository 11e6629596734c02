//! A forest whose buffer check failed on one rank takes no more operations there: its peers
//! ran their halves of the failed operation and sent for it, and a later operation on that
//! rank would otherwise take those messages for its own and return their stale values. The
//! other ranks' results stay exact. On 1, 2 and 4 ranks, under the basic implementation
//! (whose sends complete without the receiver, so the peers carry on).

mod common;

use starhalo_sf::mpi::topology::Communicator;
use starhalo_sf::{Graph, Op, RootRef, SfError, SfOptions, StarForest};

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
    drop(sf);
}
