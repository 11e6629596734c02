//! A message of more than 2 GiB (beyond a C `int` count of bytes) crosses ranks intact: the
//! MPI calls use MPI-4's large counts; while it is in flight its buffer takes no receive.
//! 2 ranks, about 2 GiB of memory each.

mod common;

use starhalo_sf::mpi::topology::Communicator;
use starhalo_sf::p2p::{MsgArena, P2pError};

/// Values sent: 2^28 + 3 f64, 24 bytes past 2 GiB.
const LEN: usize = (1 << 28) + 3;

fn main() {
    if std::env::var_os(common::CHILD_ENV).is_some() {
        child();
    } else {
        eprintln!("sf_large_message: one message of {} bytes", LEN * 8);
        common::relaunch_self(&[2], 300);
    }
}

fn child() {
    let universe = starhalo_sf::mpi::initialize().expect("MPI init");
    let world = universe.world();
    let mut arena = MsgArena::with_len(LEN).unwrap();
    let ok = if world.rank() == 0 {
        let values = arena.buf_mut().expect("idle buffer");
        for (i, v) in values.iter_mut().enumerate() {
            *v = i as f64;
        }
        arena.send(&world, 0..LEN, 1, 7).expect("send");
        // MPI may still be reading any of it: no receive may be posted into it meanwhile.
        let refused = arena.recv(&world, 0, 1, 1, 8);
        arena.wait();
        let ok = matches!(refused, Err(P2pError::InFlight(1)));
        if !ok {
            eprintln!("a receive beside a send in flight gave {refused:?}");
        }
        ok
    } else {
        arena.recv(&world, 0, LEN, 0, 7).expect("receive");
        arena.wait();
        let got = arena.buf().expect("received buffer");
        let bad = got.iter().enumerate().position(|(i, &v)| v != i as f64);
        if let Some(i) = bad {
            eprintln!("value {i} is {}, want {i}", got[i]);
        }
        bad.is_none()
    };
    drop(universe);
    std::process::exit(i32::from(!ok));
}
