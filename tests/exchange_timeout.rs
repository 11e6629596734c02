//! A receive whose message never comes stops the task region with an error naming the
//! channels still pending, instead of hanging: on 2 ranks, rank 1 starts its ghost fill
//! only after rank 0's receive timeout has passed. Rank 0 must report exactly the channels
//! from rank 1's blocks into its own, then both ranks finish (rank 1's fill completes, since
//! rank 0 had sent before it gave up). The same for the whole-fill call with a timeout.

mod common;

use std::cell::RefCell;
use std::time::Duration;

use starhalo_boundary::tasks::add_exchange;
use starhalo_boundary::{BlockData, BoundaryError, BoundaryType, Exchange, ExchangeOptions};
use starhalo_exec::tasks::{TaskError, TaskList, TaskRegion};
use starhalo_mesh::config::BoundaryCondition;
use starhalo_mesh::field::{Centering, Fields, Metadata};
use starhalo_mesh::{Mesh, MeshConfig};
use starhalo_sf::mpi::topology::Communicator;
use starhalo_sf::mpi::traits::CommunicatorCollectives;

fn main() {
    if std::env::var_os(common::CHILD_ENV).is_some() {
        child();
        return;
    }
    eprintln!("exchange_timeout: a lost message is reported, not waited for");
    common::relaunch_self(&[2], 60);
}

fn child() {
    let universe = starhalo_sf::mpi::initialize().expect("MPI initialises once");
    let world = universe.world();
    let rank = world.rank() as usize;
    // A periodic 2-D mesh of 2x2 blocks: blocks 0, 1 on rank 0 and 2, 3 on rank 1.
    let mut c = MeshConfig::new([8, 8, 1], [4, 4, 1]);
    for d in 0..2 {
        c.bc[d] = [BoundaryCondition::Periodic; 2];
    }
    let mesh = Mesh::new(c, 2).unwrap();
    let mut fields = Fields::default();
    fields
        .add("q", Metadata::new(Centering::Cell).fill_ghost())
        .unwrap();
    let data = RefCell::new(BlockData::new(&mesh, &fields, rank).unwrap());
    let exchange = RefCell::new(
        Exchange::new(&world, &mesh, &data.borrow(), ExchangeOptions::default()).unwrap(),
    );

    let timeout = if rank == 0 { 0.2 } else { 30.0 };
    let mut region = TaskRegion::new(Duration::from_secs_f64(timeout));
    let mut list = TaskList::new("partition 0");
    add_exchange(&mut list, &[], &exchange, &data, 0, &[BoundaryType::Any]);
    region.push(list);
    if rank == 1 {
        std::thread::sleep(Duration::from_secs(2));
        region.execute().expect("rank 1's fill completes");
    } else {
        let err = region.execute().unwrap_err();
        let TaskError::Timeout { task, pending, .. } = &err else {
            panic!("expected a timeout, got {err}");
        };
        assert_eq!(task, "partition 0/receive_any");
        let msg = err.to_string();
        // Every block of rank 1 touches both blocks of rank 0 in the periodic 2x2 mesh.
        for from in [2, 3] {
            for to in [0, 1] {
                let ch = format!("block {from} (rank 1) -> block {to} (rank 0), variable 0");
                assert!(msg.contains(&ch), "{ch} missing from: {msg}");
            }
        }
        assert!(!msg.contains("(rank 0) -> block"), "{msg}");
        assert!(
            pending
                .iter()
                .any(|p| p.starts_with("partition 0/set_bounds_any")),
            "{pending:?}"
        );
        println!("rank 0: {msg}");
    }
    world.barrier();

    // The whole-fill call (the GPU path's) waits no longer than its own timeout either, and
    // names the same channels.
    let mut ex = Exchange::new(&world, &mesh, &data.borrow(), ExchangeOptions::default()).unwrap();
    ex.set_timeout(Duration::from_secs_f64(timeout));
    if rank == 1 {
        std::thread::sleep(Duration::from_secs(2));
        ex.fill_ghosts(&mut data.borrow_mut())
            .expect("rank 1's fill completes");
    } else {
        let err = ex.fill_ghosts(&mut data.borrow_mut()).unwrap_err();
        let BoundaryError::Timeout { what, after } = &err else {
            panic!("expected a timeout, got {err}");
        };
        assert_eq!(*after, Duration::from_secs_f64(timeout));
        assert!(
            what.starts_with("ghost fill `any` of partition 0, from "),
            "{what}"
        );
        // The 12 channels from rank 1's blocks, the first 8 named (in order: from block 2
        // to both of rank 0's, then from block 3 to block 0).
        for (from, to) in [(2, 0), (2, 1), (3, 0)] {
            let ch = format!("block {from} (rank 1) -> block {to} (rank 0), variable 0");
            assert!(what.contains(&ch), "{ch} missing from: {what}");
        }
        assert!(what.ends_with(" and 4 more"), "{what}");
        assert!(!what.contains("(rank 0) -> block"), "{what}");
        println!("rank 0: {err}");
    }
    world.barrier();
}
