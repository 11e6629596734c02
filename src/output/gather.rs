//! The collective part of every writer: agree on local errors, gather per-block payloads to
//! rank 0 in gid order, let rank 0 work, and broadcast its verdict.
//!
//! Every function here is called by every rank of the communicator in the same order; each
//! ends with all ranks holding the same `Ok`/`Err` outcome, so an error on one rank never
//! leaves another waiting in a later collective.

use super::error::OutputError;
use super::Snapshot;
use mpi::collective::{CommunicatorCollectives, Root, SystemOperation};
use mpi::datatype::PartitionMut;
use mpi::topology::Communicator;
use mpi::Count;

/// The blocks of all ranks on rank 0, in gid order.
#[derive(Debug, Clone, PartialEq)]
pub struct Gathered {
    /// Number of blocks of the mesh.
    pub nblocks: usize,
    /// `nblocks * payload` values: block `g`'s payload at `g * payload`.
    pub payload: Vec<f64>,
    /// Values per block.
    pub payload_len: usize,
    /// `nblocks * nvars` allocation flags, as in [`Snapshot::allocated`].
    pub allocated: Vec<bool>,
    /// Blocks held by each rank.
    pub blocks_per_rank: Vec<usize>,
}

impl Gathered {
    /// The payload of block `gid`.
    pub fn block(&self, gid: usize) -> &[f64] {
        &self.payload[gid * self.payload_len..(gid + 1) * self.payload_len]
    }
}

/// Every rank learns whether all ranks passed `local`; a rank that failed gets its own error
/// back, the others a [`OutputError::Peer`].
pub fn agree<C: Communicator>(comm: &C, local: Result<(), OutputError>) -> Result<(), OutputError> {
    let mine = i32::from(local.is_err());
    let mut any = 0i32;
    comm.all_reduce_into(&mine, &mut any, SystemOperation::max());
    match local {
        Err(e) => Err(e),
        Ok(()) if any != 0 => Err(OutputError::Peer(
            "another rank rejected its part of the output".into(),
        )),
        Ok(()) => Ok(()),
    }
}

/// Rank 0 broadcasts whether `root_result` succeeded (with its message); every rank returns
/// `Ok` or an error. Other ranks pass `None` for the root's result.
pub fn verdict<C: Communicator, T>(
    comm: &C,
    root_result: Option<Result<T, OutputError>>,
) -> Result<Option<T>, OutputError> {
    let root = comm.process_at_rank(0);
    let (mut failed, mut msg, value) = match root_result {
        Some(Ok(v)) => (0u8, Vec::new(), Ok(Some(v))),
        Some(Err(e)) => (1u8, e.to_string().into_bytes(), Err(e)),
        None => (0u8, Vec::new(), Ok(None)),
    };
    root.broadcast_into(&mut failed);
    if failed == 0 {
        return value;
    }
    let mut len = msg.len() as u64;
    root.broadcast_into(&mut len);
    msg.resize(usize::try_from(len).unwrap_or(0), 0);
    root.broadcast_into(&mut msg[..]);
    match value {
        Err(e) => Err(e),
        Ok(_) => Err(OutputError::Peer(format!(
            "rank 0 failed: {}",
            String::from_utf8_lossy(&msg)
        ))),
    }
}

/// Checks that `snap` is internally consistent (lengths, layout, ascending gids); the driver's
/// bug, reported as [`OutputError::Snapshot`].
pub fn check_snapshot(snap: &Snapshot) -> Result<(), OutputError> {
    let bad = |m: String| Err(OutputError::Snapshot(m));
    let nb_total = snap.mesh.forest().len();
    let nvars = snap.fields.iter().count();
    let slots: usize = super::select::cell_vars(snap.fields)
        .iter()
        .map(|v| v.ncomp)
        .sum();
    let cfg = snap.mesh.config();
    let ndim = snap.mesh.ndim();
    let dims: [usize; 3] =
        std::array::from_fn(|d| cfg.block_nx[d] + if d < ndim { 2 * snap.nghost } else { 0 });
    if snap.layout.nvar != slots {
        return bad(format!(
            "layout has {} slots, the cell-centred variables {slots} components",
            snap.layout.nvar
        ));
    }
    if snap.layout.dims != dims {
        return bad(format!(
            "layout dims {:?}, expected {dims:?} for blocks of {:?} with {} ghosts",
            snap.layout.dims, cfg.block_nx, snap.nghost
        ));
    }
    if snap.data.len() != snap.gids.len() * snap.layout.block_len() {
        return bad(format!(
            "{} values for {} blocks of {}",
            snap.data.len(),
            snap.gids.len(),
            snap.layout.block_len()
        ));
    }
    if snap.allocated.len() != snap.gids.len() * nvars {
        return bad(format!(
            "{} allocation flags for {} blocks of {nvars} variables",
            snap.allocated.len(),
            snap.gids.len()
        ));
    }
    if snap.gids.windows(2).any(|w| w[0] >= w[1]) || snap.gids.iter().any(|&g| g >= nb_total) {
        return bad(format!(
            "gids {:?} not ascending below {nb_total}",
            snap.gids
        ));
    }
    Ok(())
}

/// Gathers, for every block of every rank, `payload_len` values computed by `payload(b)` from
/// local block `b`, with the allocation flags, to rank 0. Returns `Some` on rank 0, `None`
/// elsewhere; its errors (a bad snapshot, too much data for MPI counts) are agreed by all
/// ranks. Rank 0 then calls [`Raw::assemble`].
pub fn gather_blocks<C: Communicator>(
    comm: &C,
    snap: &Snapshot,
    payload_len: usize,
    payload: impl Fn(usize) -> Vec<f64>,
) -> Result<Option<Raw>, OutputError> {
    agree(comm, check_snapshot(snap))?;
    let nvars = snap.fields.iter().count();
    let nranks = comm.size() as usize;
    let mine = snap.gids.len() as u64;
    let mut counts = vec![0u64; nranks];
    comm.all_gather_into(&mine, &mut counts[..]);
    let total: u64 = counts.iter().sum();
    let nblocks = snap.mesh.forest().len();
    // Every rank sees the same counts, so every rank reaches the same verdict here.
    let fits = |per_block: usize| {
        total
            .checked_mul(per_block as u64)
            .is_some_and(|n| n <= Count::MAX as u64)
    };
    if total != nblocks as u64 {
        return Err(OutputError::Snapshot(format!(
            "ranks hold {total} blocks, the mesh has {nblocks}"
        )));
    }
    if !fits(payload_len.max(1)) || !fits(nvars + 1) {
        return Err(OutputError::Snapshot(format!(
            "{total} blocks of {payload_len} values exceed one MPI gather"
        )));
    }
    // Block ids and allocation flags travel as u64, the payload as f64.
    let mut meta = Vec::with_capacity(snap.gids.len() * (nvars + 1));
    for (b, &g) in snap.gids.iter().enumerate() {
        meta.push(g as u64);
        meta.extend(
            snap.allocated[b * nvars..(b + 1) * nvars]
                .iter()
                .map(|&a| u64::from(a)),
        );
    }
    let mut values = Vec::with_capacity(snap.gids.len() * payload_len);
    for b in 0..snap.gids.len() {
        // Exactly payload_len per block whatever the closure returns: the counts of the
        // gather below were agreed from that length.
        let p = payload(b);
        values.extend(
            p.into_iter()
                .chain(std::iter::repeat(f64::NAN))
                .take(payload_len),
        );
    }
    let root = comm.process_at_rank(0);
    if comm.rank() != 0 {
        root.gather_varcount_into(&meta[..]);
        root.gather_varcount_into(&values[..]);
        return Ok(None);
    }
    let layout = |per: usize| -> (Vec<Count>, Vec<Count>) {
        let c: Vec<Count> = counts
            .iter()
            .map(|&n| (n as usize * per) as Count)
            .collect();
        let d = c
            .iter()
            .scan(0, |acc, &x| {
                let s = *acc;
                *acc += x;
                Some(s)
            })
            .collect();
        (c, d)
    };
    let mut all_meta = vec![0u64; nblocks * (nvars + 1)];
    let (c, d) = layout(nvars + 1);
    root.gather_varcount_into_root(&meta[..], &mut PartitionMut::new(&mut all_meta[..], c, d));
    let mut all_values = vec![0f64; nblocks * payload_len];
    let (c, d) = layout(payload_len);
    root.gather_varcount_into_root(
        &values[..],
        &mut PartitionMut::new(&mut all_values[..], c, d),
    );
    Ok(Some(Raw {
        meta: all_meta,
        values: all_values,
        nblocks,
        nvars,
        payload_len,
        blocks_per_rank: counts.iter().map(|&n| n as usize).collect(),
    }))
}

/// What rank 0 receives, in rank order, before it is checked and sorted.
#[derive(Debug)]
pub struct Raw {
    meta: Vec<u64>,
    values: Vec<f64>,
    nblocks: usize,
    nvars: usize,
    payload_len: usize,
    blocks_per_rank: Vec<usize>,
}

impl Raw {
    /// Puts the blocks in gid order, checking each appears exactly once (rank 0 only: its
    /// error must reach the others through [`verdict`]).
    pub fn assemble(self) -> Result<Gathered, OutputError> {
        let Raw {
            meta,
            values,
            nblocks,
            nvars,
            payload_len,
            blocks_per_rank,
        } = self;
        let mut g = Gathered {
            nblocks,
            payload: vec![0.0; nblocks * payload_len],
            payload_len,
            allocated: vec![false; nblocks * nvars],
            blocks_per_rank,
        };
        let mut seen = vec![false; nblocks];
        for (pos, rec) in meta.chunks_exact(nvars + 1).enumerate() {
            let gid = usize::try_from(rec[0]).unwrap_or(usize::MAX);
            if gid >= nblocks || std::mem::replace(&mut seen[gid], true) {
                return Err(OutputError::Snapshot(format!(
                    "block {gid} held by two ranks or out of range"
                )));
            }
            for v in 0..nvars {
                g.allocated[gid * nvars + v] = rec[1 + v] != 0;
            }
            g.payload[gid * payload_len..(gid + 1) * payload_len]
                .copy_from_slice(&values[pos * payload_len..(pos + 1) * payload_len]);
        }
        Ok(g)
    }
}

/// Gathers the blocks, runs `work` on rank 0, and broadcasts its verdict: the collective frame
/// of every file writer. Returns `Some` on rank 0.
pub fn on_root<C: Communicator, T>(
    comm: &C,
    snap: &Snapshot,
    payload_len: usize,
    payload: impl Fn(usize) -> Vec<f64>,
    work: impl FnOnce(Gathered) -> Result<T, OutputError>,
) -> Result<Option<T>, OutputError> {
    // Errors up to here are agreed by every rank, so all return together.
    let raw = gather_blocks(comm, snap, payload_len, payload)?;
    let root_result = raw.map(|r| r.assemble().and_then(work));
    verdict(comm, root_result)
}
