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
use std::borrow::Cow;

/// The blocks of all ranks on rank 0, in gid order.
#[derive(Debug, Clone, PartialEq)]
pub struct Gathered<'a> {
    /// Number of blocks of the mesh.
    pub nblocks: usize,
    /// `nblocks * payload_len` values: block `g`'s payload at `g * payload_len` (on one rank,
    /// the snapshot's own storage where that has this layout).
    pub payload: Cow<'a, [f64]>,
    /// Values per block.
    pub payload_len: usize,
    /// `nblocks * nvars` allocation flags, as in [`Snapshot::allocated`].
    pub allocated: Vec<bool>,
    /// Blocks held by each rank.
    pub blocks_per_rank: Vec<usize>,
}

impl Gathered<'_> {
    /// The payload of block `gid`.
    pub fn block(&self, gid: usize) -> &[f64] {
        &self.payload[gid * self.payload_len..(gid + 1) * self.payload_len]
    }
}

/// Every rank learns whether all ranks passed `local`; a rank that failed gets its own error
/// back, the others a [`OutputError::Peer`].
pub fn agree<C: Communicator, T>(
    comm: &C,
    local: Result<T, OutputError>,
) -> Result<T, OutputError> {
    let mine = i32::from(local.is_err());
    let mut any = 0i32;
    comm.all_reduce_into(&mine, &mut any, SystemOperation::max());
    match local {
        Ok(_) if any != 0 => Err(OutputError::Peer(
            "another rank rejected its part of the output".into(),
        )),
        result => result,
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
    if snap.stride < snap.layout.block_len()
        || Some(snap.data.len()) != snap.gids.len().checked_mul(snap.stride)
    {
        return bad(format!(
            "{} values for {} blocks of {} every {}",
            snap.data.len(),
            snap.gids.len(),
            snap.layout.block_len(),
            snap.stride
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

/// This rank's blocks as a payload of `layout.block_len()` values each: the snapshot's own
/// storage where that has no gaps, else a copy without them.
pub fn stored<'s>(snap: &Snapshot<'s>) -> Result<Cow<'s, [f64]>, OutputError> {
    let len = snap.layout.block_len();
    if snap.stride == len {
        return Ok(Cow::Borrowed(snap.data));
    }
    let n = snap.gids.len();
    let mut v = OutputError::try_vec(n * len, || format!("a copy of the fields of {n} blocks"))?;
    for b in 0..n {
        v.extend_from_slice(snap.block(b));
    }
    Ok(Cow::Owned(v))
}

/// This rank's blocks as a payload of `len` values each, computed per block by `payload(b)`
/// (padded with NaN or cut to `len`).
pub fn per_block(
    snap: &Snapshot,
    len: usize,
    payload: impl Fn(usize) -> Vec<f64>,
) -> Result<Cow<'static, [f64]>, OutputError> {
    let n = snap.gids.len();
    let mut v = OutputError::try_vec(n.saturating_mul(len), || {
        format!("the output values of {n} blocks")
    })?;
    for b in 0..n {
        // Exactly `len` per block whatever the closure returns: the counts of the gather
        // are agreed from that length.
        let p = payload(b);
        v.extend(p.into_iter().chain(std::iter::repeat(f64::NAN)).take(len));
    }
    Ok(Cow::Owned(v))
}

/// Gathers `local()` (this rank's payload, `payload_len` values per block, from [`stored`] or
/// [`per_block`]) with the allocation flags of every block of every rank to rank 0. Returns
/// `Some` on rank 0, `None` elsewhere; its errors (a bad snapshot, a payload that did not fit
/// in memory here or on rank 0, too much data for MPI counts) are agreed by all ranks. Rank 0
/// then calls [`Raw::assemble`].
pub fn gather_blocks<'s, C: Communicator>(
    comm: &C,
    snap: &Snapshot,
    payload_len: usize,
    local: impl FnOnce() -> Result<Cow<'s, [f64]>, OutputError>,
) -> Result<Option<Raw<'s>>, OutputError> {
    // The payload is made only from a snapshot found consistent.
    let local = agree(comm, check_snapshot(snap).and_then(|()| local()))?;
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
    if local.len() != snap.gids.len() * payload_len {
        // The same on every rank: the payload's length is the caller's (a driver bug).
        return Err(OutputError::Snapshot(format!(
            "a payload of {} values for {} blocks of {payload_len}",
            local.len(),
            snap.gids.len()
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
    let raw = |meta, values| Raw {
        meta,
        values,
        nblocks,
        nvars,
        payload_len,
        blocks_per_rank: counts.iter().map(|&n| n as usize).collect(),
    };
    if nranks == 1 {
        return Ok(Some(raw(meta, local)));
    }
    // Rank 0 makes room for every rank's blocks, or every rank learns that it could not.
    let room = if comm.rank() == 0 {
        let what = || format!("gathering {nblocks} blocks of {payload_len} values on rank 0");
        OutputError::try_vec::<f64>(nblocks * payload_len, what).map(Some)
    } else {
        Ok(None)
    };
    let room = agree(comm, room)?;
    let root = comm.process_at_rank(0);
    let Some(mut all_values) = room else {
        root.gather_varcount_into(&meta[..]);
        root.gather_varcount_into(&local[..]);
        return Ok(None);
    };
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
    all_values.resize(nblocks * payload_len, 0.0);
    drop(meta);
    let (c, d) = layout(payload_len);
    root.gather_varcount_into_root(
        &local[..],
        &mut PartitionMut::new(&mut all_values[..], c, d),
    );
    Ok(Some(raw(all_meta, Cow::Owned(all_values))))
}

/// What rank 0 receives, in rank order, before it is checked and sorted.
#[derive(Debug)]
pub struct Raw<'s> {
    meta: Vec<u64>,
    values: Cow<'s, [f64]>,
    nblocks: usize,
    nvars: usize,
    payload_len: usize,
    blocks_per_rank: Vec<usize>,
}

impl<'s> Raw<'s> {
    /// Puts the blocks in gid order, in place, checking each appears exactly once (rank 0
    /// only: its error must reach the others through [`verdict`]).
    pub fn assemble(self) -> Result<Gathered<'s>, OutputError> {
        let Raw {
            meta,
            mut values,
            nblocks,
            nvars,
            payload_len,
            blocks_per_rank,
        } = self;
        let mut allocated = vec![false; nblocks * nvars];
        // The gid of the block at each position, in rank order.
        let mut gid_at = Vec::with_capacity(nblocks);
        let mut seen = vec![false; nblocks];
        for rec in meta.chunks_exact(nvars + 1) {
            let gid = usize::try_from(rec[0]).unwrap_or(usize::MAX);
            if gid >= nblocks || std::mem::replace(&mut seen[gid], true) {
                return Err(OutputError::Snapshot(format!(
                    "block {gid} held by two ranks or out of range"
                )));
            }
            for v in 0..nvars {
                allocated[gid * nvars + v] = rec[1 + v] != 0;
            }
            gid_at.push(gid);
        }
        // Ranks that hold ascending runs of gids (every partition here) arrive in order; any
        // other order is permuted in place, cycle by cycle, through one block of room.
        if gid_at.iter().enumerate().any(|(pos, &g)| pos != g) {
            let v = values.to_mut();
            let mut held = vec![0.0; payload_len];
            let mut done = vec![false; nblocks];
            for start in 0..nblocks {
                if std::mem::replace(&mut done[start], true) || gid_at[start] == start {
                    continue;
                }
                held.copy_from_slice(&v[start * payload_len..][..payload_len]);
                let mut to = gid_at[start];
                while to != start {
                    v[to * payload_len..][..payload_len].swap_with_slice(&mut held);
                    done[to] = true;
                    to = gid_at[to];
                }
                v[start * payload_len..][..payload_len].copy_from_slice(&held);
            }
        }
        Ok(Gathered {
            nblocks,
            payload: values,
            payload_len,
            allocated,
            blocks_per_rank,
        })
    }
}

/// Gathers the blocks, runs `work` on rank 0, and broadcasts its verdict: the collective frame
/// of every file writer. Returns `Some` on rank 0.
pub fn on_root<'s, C: Communicator, T>(
    comm: &C,
    snap: &Snapshot,
    payload_len: usize,
    local: impl FnOnce() -> Result<Cow<'s, [f64]>, OutputError>,
    work: impl FnOnce(Gathered<'s>) -> Result<T, OutputError>,
) -> Result<Option<T>, OutputError> {
    // Errors up to here are agreed by every rank, so all return together.
    let raw = gather_blocks(comm, snap, payload_len, local)?;
    let root_result = raw.map(|r| r.assemble().and_then(work));
    verdict(comm, root_result)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(gids: &[u64], payload_len: usize) -> Raw<'static> {
        // Two variables; block g's flags are (g even, true), its values g*10 + i.
        let meta = gids
            .iter()
            .flat_map(|&g| [g, u64::from(g % 2 == 0), 1])
            .collect();
        let values = gids
            .iter()
            .flat_map(|&g| (0..payload_len).map(move |i| (g * 10 + i as u64) as f64))
            .collect::<Vec<_>>();
        Raw {
            meta,
            values: Cow::Owned(values),
            nblocks: gids.len(),
            nvars: 2,
            payload_len,
            blocks_per_rank: vec![gids.len()],
        }
    }

    /// Blocks arriving in any order (ranks holding gids apart) come out in gid order, moved
    /// in place along the permutation's cycles; blocks already in order are left alone.
    #[test]
    fn assemble_puts_blocks_in_gid_order() {
        for gids in [
            vec![0, 1, 2, 3, 4, 5, 6],
            vec![3, 0, 1, 2, 6, 5, 4],
            vec![1, 0, 3, 2, 5, 4, 6],
            vec![6, 5, 4, 3, 2, 1, 0],
            vec![2, 4, 6, 0, 1, 3, 5],
        ] {
            let g = raw(&gids, 3).assemble().unwrap();
            for gid in 0..7 {
                let want: Vec<f64> = (0..3).map(|i| (gid * 10 + i) as f64).collect();
                assert_eq!(g.block(gid), want, "block {gid} of order {gids:?}");
                assert_eq!(g.allocated[gid * 2..gid * 2 + 2], [gid % 2 == 0, true]);
            }
        }
    }

    /// A buffer too large for memory is an error naming it, not an allocation abort.
    #[test]
    fn a_buffer_that_does_not_fit_is_an_error() {
        let e = OutputError::try_vec::<f64>(usize::MAX / 16, || "the blocks".into()).unwrap_err();
        assert!(matches!(e, OutputError::OutOfMemory { .. }), "{e}");
        let want = format!(
            "the blocks: {} bytes do not fit in memory",
            usize::MAX / 16 * 8
        );
        assert_eq!(e.to_string(), want);
        assert_eq!(
            OutputError::try_vec::<f64>(10, String::new)
                .unwrap()
                .capacity(),
            10
        );
    }

    #[test]
    fn assemble_refuses_a_block_held_twice_or_out_of_range() {
        for gids in [vec![0, 1, 1], vec![0, 1, 3]] {
            let e = raw(&gids, 2).assemble().unwrap_err();
            assert!(matches!(e, OutputError::Snapshot(_)), "{e}");
        }
    }
}
