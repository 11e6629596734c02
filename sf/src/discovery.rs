//! Building two-sided information: every rank knows which root ranks its leaves read; set-up
//! finds the reverse, which leaf ranks read its roots, and which roots each of them reads.

use crate::error::SfError;
use crate::raw::{self, RawComm, SyncSend};
use mpi::collective::SystemOperation;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::CommunicatorCollectives;
use std::str::FromStr;

/// The reverse-discovery algorithm.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Discovery {
    /// Allreduce below [`NBX_FROM_RANKS`] ranks, the non-blocking barrier from there on.
    #[default]
    Auto,
    /// `MPI_Allreduce` of a per-rank count array: robust, but memory and time grow with the
    /// communicator size.
    Allreduce,
    /// Synchronous sends, probes and a non-blocking barrier (NBX): cost grows with the number
    /// of neighbours only.
    Nbx,
}

/// Communicator size from which [`Discovery::Auto`] picks the non-blocking barrier.
pub const NBX_FROM_RANKS: usize = 64;

impl FromStr for Discovery {
    type Err = SfError;
    fn from_str(s: &str) -> Result<Self, SfError> {
        match s {
            "auto" => Ok(Self::Auto),
            "allreduce" => Ok(Self::Allreduce),
            "nbx" => Ok(Self::Nbx),
            _ => Err(SfError::UnknownName {
                what: "discovery",
                got: s.to_string(),
                expected: "auto, allreduce, nbx",
            }),
        }
    }
}

const TAG: i32 = 0;

/// Sends `outgoing[i].1` to rank `outgoing[i].0` (never self, each rank once) and returns what
/// every rank sent here, sorted by source rank.
pub(crate) fn exchange(
    comm: &SimpleCommunicator,
    raw_comm: RawComm,
    method: Discovery,
    outgoing: &[(i32, Vec<u64>)],
) -> Vec<(i32, Vec<u64>)> {
    let method = match method {
        Discovery::Auto if comm.size() as usize >= NBX_FROM_RANKS => Discovery::Nbx,
        Discovery::Auto => Discovery::Allreduce,
        m => m,
    };
    let sync = method == Discovery::Nbx;
    // SAFETY: `outgoing` outlives every send: all are completed before this function returns.
    let mut sends: Vec<SyncSend> = outgoing
        .iter()
        .map(|(dest, data)| unsafe { SyncSend::start(raw_comm, data, *dest, TAG, sync) })
        .collect();
    let mut incoming = Vec::new();
    if sync {
        let mut barrier: Option<raw::Ibarrier> = None;
        loop {
            if let Some(msg) = raw::probe(raw_comm, None, TAG, false) {
                incoming.push((msg.source, raw::recv_u64s(raw_comm, &msg, TAG)));
            }
            match &mut barrier {
                None => {
                    if sends.iter_mut().all(SyncSend::test) {
                        barrier = Some(raw::Ibarrier::start(raw_comm));
                    }
                }
                Some(b) => {
                    if b.test() {
                        break;
                    }
                }
            }
        }
    } else {
        let size = comm.size() as usize;
        let mut mine = vec![0i32; size];
        for (dest, _) in outgoing {
            mine[*dest as usize] = 1;
        }
        let mut total = vec![0i32; size];
        comm.all_reduce_into(&mine[..], &mut total[..], SystemOperation::sum());
        for _ in 0..total[comm.rank() as usize] {
            let msg =
                raw::probe(raw_comm, None, TAG, true).expect("blocking probe returns a message");
            incoming.push((msg.source, raw::recv_u64s(raw_comm, &msg, TAG)));
        }
        while !sends.iter_mut().all(SyncSend::test) {}
    }
    incoming.sort_unstable_by_key(|(src, _)| *src);
    incoming
}

/// Agrees on an error: every rank learns the lowest rank that failed. Returns this rank's
/// own error, [`SfError::PeerInvalid`] naming the failing rank, or `Ok` when none failed.
pub(crate) fn agree(comm: &SimpleCommunicator, mine: Result<(), SfError>) -> Result<(), SfError> {
    let flag = if mine.is_err() { comm.rank() } else { i32::MAX };
    let mut first = i32::MAX;
    comm.all_reduce_into(&flag, &mut first, SystemOperation::min());
    match (mine, first) {
        (Err(e), _) => Err(e),
        (Ok(()), i32::MAX) => Ok(()),
        (Ok(()), r) => Err(SfError::PeerInvalid(r)),
    }
}

/// `Err(Disagree(what))` unless `value` is the same on every rank.
pub(crate) fn same_everywhere(
    comm: &SimpleCommunicator,
    value: u64,
    what: &'static str,
) -> Result<(), SfError> {
    let (mut lo, mut hi) = (0u64, 0u64);
    comm.all_reduce_into(&value, &mut lo, SystemOperation::min());
    comm.all_reduce_into(&value, &mut hi, SystemOperation::max());
    match lo == hi {
        true => Ok(()),
        false => Err(SfError::Disagree(what)),
    }
}

/// A cheap fingerprint of `values` (FNV-1a), for checking that ranks agree.
pub(crate) fn fingerprint(values: impl IntoIterator<Item = u64>) -> u64 {
    values.into_iter().fold(0xcbf2_9ce4_8422_2325u64, |h, v| {
        (h ^ v).wrapping_mul(0x0100_0000_01b3)
    })
}
