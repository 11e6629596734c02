//! Agreement between ranks: every rank reaches the same verdict, one rank speaks.

use crate::exit::{self, BadInput};
use anyhow::Result;
use mpi::collective::SystemOperation;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::{CommunicatorCollectives, Root};
use std::process::ExitCode;

/// The error of a rank that stops because another rank failed: it exits with the agreed
/// code and prints nothing, since the failing rank has said what went wrong.
#[derive(Debug, thiserror::Error)]
#[error("rank {rank} failed")]
pub struct Quiet {
    /// The lowest rank that failed (the one that reports).
    pub rank: i32,
    /// The agreed exit code.
    pub code: u8,
}

fn code_of(e: &anyhow::Error) -> i32 {
    if e.chain()
        .any(|c| c.is::<BadInput>() || c.is::<crate::deck::DeckError>())
    {
        2
    } else {
        1
    }
}

/// Collective: if any rank failed, every rank returns an error. The lowest failing rank
/// keeps its own error (it reports); the others get [`Quiet`]. The exit code is the highest
/// any rank asked for (bad input, 2, wins over a run-time failure, 1).
pub fn agree<T>(world: &SimpleCommunicator, mine: Result<T>) -> Result<T> {
    let rank = world.rank();
    let code = mine.as_ref().err().map_or(0, code_of);
    // One reduction: the highest code and, negated, the lowest failing rank.
    let send = [code, if code > 0 { -rank } else { i32::MIN }];
    let mut got = [0i32; 2];
    world.all_reduce_into(&send[..], &mut got[..], SystemOperation::max());
    let agreed = got[0];
    if agreed == 0 {
        return mine;
    }
    let reporter = -got[1];
    match mine {
        Err(e) if rank == reporter => {
            if agreed == 2 && code == 1 {
                Err(e.context(BadInput("another rank rejected its input".into())))
            } else {
                Err(e)
            }
        }
        _ => Err(anyhow::Error::new(Quiet {
            rank: reporter,
            code: agreed as u8,
        })),
    }
}

/// Collective: `Ok` when every rank was given the same arguments as rank 0 (the program's
/// path aside); otherwise bad input on every rank, rank 0 reporting which rank differs first.
/// Ranks given different command lines (an MPMD launch) would set up different runs and wait
/// on each other forever.
pub fn same_command_line(world: &SimpleCommunicator) -> Result<()> {
    let mut crc = crc32fast::Hasher::new();
    for arg in std::env::args_os().skip(1) {
        crc.update(arg.as_encoded_bytes());
        crc.update(&[0]);
    }
    match first_other_than_rank_0(world, crc.finalize()) {
        None => Ok(()),
        Some(rank) => agree(
            world,
            Err(exit::bad_input!(
                "rank {rank} was given other arguments than rank 0: every rank must run the same command"
            )),
        ),
    }
}

/// Collective: `Ok` when every rank read the same contents from the files each reads for
/// itself ([`crate::input_file::note_read`]) as rank 0; otherwise bad input on every rank,
/// rank 0 naming the lowest rank that differs and the first file where it does.
pub fn same_inputs(world: &SimpleCommunicator) -> Result<()> {
    let read = crate::input_file::read_so_far();
    let sums: Vec<u32> = read
        .iter()
        .map(|(path, sum)| {
            let mut crc = crc32fast::Hasher::new();
            crc.update(path.as_os_str().as_encoded_bytes());
            crc.update(&sum.to_le_bytes());
            crc.finalize()
        })
        .collect();
    let mine: Vec<u8> = sums.iter().flat_map(|s| s.to_le_bytes()).collect();
    let first = broadcast_bytes(world, mine.clone());
    // The first file (by its place in the order read) where this rank differs.
    let at = match mine
        .chunks(4)
        .zip(first.chunks(4))
        .position(|(a, b)| a != b)
    {
        Some(i) => Some(i),
        None => (mine.len() != first.len()).then(|| mine.len().min(first.len()) / 4),
    };
    let key = at.map_or(i64::MAX, |i| (i64::from(world.rank()) << 32) | i as i64);
    let mut lowest = 0i64;
    world.all_reduce_into(&key, &mut lowest, SystemOperation::min());
    if lowest == i64::MAX {
        return Ok(());
    }
    let (rank, at) = (lowest >> 32, (lowest & 0xffff_ffff) as usize);
    let what = match read.get(at) {
        Some((path, _)) => format!("read other contents than rank 0 from {}", path.display()),
        None => "read more files than rank 0".to_string(),
    };
    agree(
        world,
        Err(exit::bad_input!(
            "rank {rank} {what}: every rank must read the same files"
        )),
    )
}

/// Collective: the lowest rank whose `fingerprint` is not rank 0's, if any.
fn first_other_than_rank_0(world: &SimpleCommunicator, fingerprint: u32) -> Option<i32> {
    let mut first = fingerprint;
    world.process_at_rank(0).broadcast_into(&mut first);
    let differs = if first == fingerprint {
        i32::MAX
    } else {
        world.rank()
    };
    let mut lowest = 0;
    world.all_reduce_into(&differs, &mut lowest, SystemOperation::min());
    (lowest != i32::MAX).then_some(lowest)
}

/// Rank 0's bytes on every rank.
pub fn broadcast_bytes(world: &SimpleCommunicator, mine: Vec<u8>) -> Vec<u8> {
    let root = world.process_at_rank(0);
    let mut len = mine.len() as u64;
    root.broadcast_into(&mut len);
    let mut buf = if world.rank() == 0 {
        mine
    } else {
        vec![0u8; len as usize]
    };
    root.broadcast_into(&mut buf[..]);
    buf
}

/// Sum over ranks.
pub fn sum_f64(world: &SimpleCommunicator, x: f64) -> f64 {
    let mut out = 0.0;
    world.all_reduce_into(&x, &mut out, SystemOperation::sum());
    out
}

/// Maximum over ranks.
pub fn max_f64(world: &SimpleCommunicator, x: f64) -> f64 {
    let mut out = 0.0;
    world.all_reduce_into(&x, &mut out, SystemOperation::max());
    out
}

/// Exit code and message of every command: [`Quiet`] ranks exit silently with the agreed
/// code; everything else is reported as by [`exit::report`], deck errors as bad input.
pub fn report(world: &SimpleCommunicator, result: Result<()>) -> ExitCode {
    match result {
        Err(e) => match e.downcast_ref::<Quiet>() {
            Some(q) => ExitCode::from(q.code),
            None if code_of(&e) == 2 && !e.chain().any(|c| c.is::<BadInput>()) => {
                exit::report(world, Err(anyhow::Error::new(BadInput(format!("{e:#}")))))
            }
            None => exit::report(world, Err(e)),
        },
        ok => exit::report(world, ok),
    }
}
