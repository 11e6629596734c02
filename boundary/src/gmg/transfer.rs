//! Moving block interiors between two adjacent multigrid levels: restriction (finer to
//! coarser, `gmg_restrict_*`) and prolongation (coarser to finer, `gmg_prolongate_*`).
//!
//! Every block of the finer level has one link to the block containing it on the coarser
//! level. The rank that owns the link's source block computes what the destination needs
//! (restricted values, or the widened coarse box) into its send buffer; all links towards one
//! peer rank travel as one message, in finer-gid order, so both ends know its length. Links
//! whose two blocks share a rank are read straight from the send buffer.

use hashbrown::HashMap;
use std::ops::Range;

use starhalo_mesh::field::IndexShape;
use starhalo_mesh::multigrid::GmgLevel;
use starhalo_sf::mpi::topology::SimpleCommunicator;
use starhalo_sf::p2p::MsgArena;

use super::ops::{gather_coarse, prolongate_block, restrict_block, store_restricted, Placement};
use crate::error::BoundaryError;
use crate::exchange::{TaskStatus, Traffic};
use crate::prolong_restrict::Prolongation;
use crate::storage::BlockData;

/// Which way a transfer moves data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Restrict,
    Prolongate,
}

/// One link seen from one of its ends on this rank.
#[derive(Debug, Clone)]
struct Item {
    pl: Placement,
    /// Local index of this rank's block at this end.
    block: usize,
    /// Where its values lie: in the send buffer (send side, and same-rank receives) or in the
    /// receive buffer.
    buf: Range<usize>,
    local: bool,
}

/// One message: a peer rank and its range (send side) or segment (receive side).
#[derive(Debug, Clone)]
struct Message {
    peer: i32,
    range: Range<usize>,
}

impl Message {
    /// Adds `range` (which follows the last one) to the messages: the last message grows
    /// when it goes to `peer` as well, else a new one starts.
    fn append(msgs: &mut Vec<Message>, peer: i32, range: Range<usize>) {
        match msgs.last_mut() {
            Some(m) if m.peer == peer => m.range.end = range.end,
            _ => msgs.push(Message { peer, range }),
        }
    }
}

/// The transfer between levels `i` and `i + 1` in one direction.
#[derive(Debug)]
pub(crate) struct Transfer {
    kind: Kind,
    tag: i32,
    src_shape: IndexShape,
    dst_shape: IndexShape,
    nslot: usize,
    send: Vec<Item>,
    recv: Vec<Item>,
    send_msgs: Vec<Message>,
    recv_msgs: Vec<Message>,
    send_buf: MsgArena,
    recv_buf: MsgArena,
    /// Receives are posted.
    posted: bool,
    /// Every message of this round has arrived.
    arrived: bool,
    /// Same-rank links were packed and not yet unpacked.
    local_pending: bool,
    has_local: bool,
    traffic: Traffic,
}

impl Transfer {
    /// The transfer of `kind` between `fine` and `coarse` (adjacent levels) on `rank`, whose
    /// storage of the two levels is `fine_data` and `coarse_data`; messages carry `tag`.
    pub fn new(
        kind: Kind,
        tag: i32,
        rank: usize,
        (fine, fine_data): (&GmgLevel, &BlockData),
        (coarse, coarse_data): (&GmgLevel, &BlockData),
    ) -> Result<Self, BoundaryError> {
        let ndim = fine.forest.ndim();
        let nslot = fine_data.slot_defaults().len();
        let (src_data, dst_data) = match kind {
            Kind::Restrict => (fine_data, coarse_data),
            Kind::Prolongate => (coarse_data, fine_data),
        };
        // (peer rank, finer gid, placement, local block) of each end on this rank.
        let mut send = Vec::new();
        let mut recv = Vec::new();
        let floc = fine.forest.leaves();
        let cloc = coarse.forest.leaves();
        for (f, link) in fine.coarser.iter().enumerate() {
            let c = link.ok_or_else(|| {
                BoundaryError::Geometry(format!(
                    "block {f} of multigrid level {} has no coarser block",
                    fine.level
                ))
            })?;
            let (fr, cr) = (fine.ranks[f], coarse.ranks[c]);
            let ((src, sr), (dst, dr)) = match kind {
                Kind::Restrict => ((f, fr), (c, cr)),
                Kind::Prolongate => ((c, cr), (f, fr)),
            };
            if sr != rank && dr != rank {
                continue;
            }
            let pl = Placement::new(&floc[f], fine.block_nx, &cloc[c], coarse.block_nx, ndim)?;
            let local = |data: &BlockData, gid: usize| {
                data.local(gid).ok_or_else(|| {
                    BoundaryError::Geometry(format!("block {gid} is not on rank {rank}"))
                })
            };
            if sr == rank {
                send.push((dr, f, pl, local(src_data, src)?));
            }
            if dr == rank {
                recv.push((sr, f, pl, local(dst_data, dst)?));
            }
        }
        send.sort_by_key(|x| (x.0, x.1));
        recv.sort_by_key(|x| (x.0, x.1));
        let len = |pl: &Placement| {
            nslot
                * match kind {
                    Kind::Restrict => pl.restrict_len(),
                    Kind::Prolongate => pl.prolong_len(),
                }
        };
        let peer = |r: usize| {
            i32::try_from(r).map_err(|_| BoundaryError::Geometry(format!("rank {r} exceeds i32")))
        };

        // Send side: items back to back, one message per remote peer.
        let mut items = Vec::with_capacity(send.len());
        let mut send_msgs: Vec<Message> = Vec::new();
        let mut local_at = HashMap::new();
        let mut off = 0;
        for &(dr, f, pl, block) in &send {
            let n = len(&pl);
            if dr == rank {
                local_at.insert(f, off..off + n);
            } else {
                Message::append(&mut send_msgs, peer(dr)?, off..off + n);
            }
            items.push(Item {
                pl,
                block,
                buf: off..off + n,
                local: dr == rank,
            });
            off += n;
        }
        let send_buf = MsgArena::with_len(off)?;

        // Receive side: remote items back to back, one segment per peer; same-rank items
        // point into the send buffer.
        let mut recv_items = Vec::with_capacity(recv.len());
        let mut recv_msgs: Vec<Message> = Vec::new();
        let mut off = 0;
        for &(sr, f, pl, block) in &recv {
            let n = len(&pl);
            let (buf, local) = if sr == rank {
                let r = local_at.get(&f).cloned().ok_or_else(|| {
                    BoundaryError::Mismatch(format!("no same-rank sender for block {f}"))
                })?;
                (r, true)
            } else {
                Message::append(&mut recv_msgs, peer(sr)?, off..off + n);
                off += n;
                (off - n..off, false)
            };
            recv_items.push(Item {
                pl,
                block,
                buf,
                local,
            });
        }
        let recv_buf = MsgArena::new(recv_msgs.iter().map(|m| m.range.clone()).collect())?;
        let has_local = items.iter().any(|i| i.local);
        Ok(Self {
            kind,
            tag,
            src_shape: *src_data.shape(),
            dst_shape: *dst_data.shape(),
            nslot,
            send: items,
            recv: recv_items,
            send_msgs,
            recv_msgs,
            send_buf,
            recv_buf,
            posted: false,
            arrived: false,
            local_pending: false,
            has_local,
            traffic: Traffic::default(),
        })
    }

    /// Messages and bytes sent so far.
    pub fn traffic(&self) -> Traffic {
        self.traffic
    }

    /// Posts the receives of this round (once).
    pub fn start_receive(&mut self, comm: &SimpleCommunicator) -> Result<(), BoundaryError> {
        if self.posted {
            return Ok(());
        }
        for (seg, m) in self.recv_msgs.iter().enumerate() {
            self.recv_buf
                .recv(comm, seg, m.range.len(), m.peer, self.tag)?;
        }
        self.posted = true;
        Ok(())
    }

    /// Computes and sends what the destination blocks need from `src` (the source level's
    /// storage); `Incomplete` while same-rank receivers have not consumed the last round or
    /// its messages are still on their way (the buffer is reused), so a task list never blocks
    /// here.
    pub fn send(
        &mut self,
        comm: &SimpleCommunicator,
        src: &BlockData,
    ) -> Result<TaskStatus, BoundaryError> {
        if self.local_pending || !self.send_buf.test() {
            return Ok(TaskStatus::Incomplete);
        }
        let buf = self.send_buf.buf_mut()?;
        for it in &self.send {
            let per = it.buf.len() / self.nslot.max(1);
            for s in 0..self.nslot {
                let out = &mut buf[it.buf.start + s * per..it.buf.start + (s + 1) * per];
                let arr = src.fine(it.block, s);
                match self.kind {
                    Kind::Restrict => restrict_block(&it.pl, &self.src_shape, arr, out)?,
                    Kind::Prolongate => gather_coarse(&it.pl, &self.src_shape, arr, out)?,
                }
            }
        }
        for m in &self.send_msgs {
            self.send_buf
                .send(comm, m.range.clone(), m.peer, self.tag)?;
            self.traffic.messages += 1;
            self.traffic.bytes += (m.range.len() * 8) as u64;
        }
        self.local_pending = self.has_local;
        Ok(TaskStatus::Complete)
    }

    /// Polls: `Incomplete` until every message of this round has arrived and same-rank
    /// senders have packed.
    pub fn receive(&mut self, comm: &SimpleCommunicator) -> Result<TaskStatus, BoundaryError> {
        self.start_receive(comm)?;
        let local_ready = self.local_pending || !self.recv.iter().any(|i| i.local);
        if !self.arrived && local_ready && self.recv_buf.test() {
            self.arrived = true;
        }
        Ok(if self.arrived {
            TaskStatus::Complete
        } else {
            TaskStatus::Incomplete
        })
    }

    /// Writes what arrived into `dst` (the destination level's storage), prolongating slot
    /// `s` with `ops[s]`; `Incomplete` until [`receive`](Self::receive) has reported all.
    pub fn set_bounds(
        &mut self,
        dst: &mut BlockData,
        ops: &[Prolongation],
    ) -> Result<TaskStatus, BoundaryError> {
        if !self.arrived {
            return Ok(TaskStatus::Incomplete);
        }
        let (remote, local) = (self.recv_buf.buf()?, self.send_buf.buf()?);
        for it in &self.recv {
            let vals = if it.local {
                &local[it.buf.clone()]
            } else {
                &remote[it.buf.clone()]
            };
            let per = vals.len() / self.nslot.max(1);
            for s in 0..self.nslot {
                let v = &vals[s * per..(s + 1) * per];
                let arr = dst.fine_mut(it.block, s);
                match self.kind {
                    Kind::Restrict => store_restricted(&it.pl, &self.dst_shape, v, arr)?,
                    Kind::Prolongate => {
                        let op = ops.get(s).copied().unwrap_or_default();
                        prolongate_block(&it.pl, op, v, &self.dst_shape, arr)?
                    }
                }
            }
        }
        self.posted = false;
        self.arrived = false;
        self.local_pending = false;
        Ok(TaskStatus::Complete)
    }
}
