//! Point-to-point messages over a buffer the messaging object owns, for callers (the boundary
//! exchange) whose messages live longer than one function call.
//!
//! rsmpi ties a request to a borrow that must end inside a scope; an exchange that posts its
//! receives in one task and polls them in another cannot keep such a borrow. A [`MsgArena`]
//! owns its buffer instead and hands it out only while no request is in flight, so the MPI
//! rule (do not touch a buffer while MPI may read or write it) is kept by the type.
//!
//! The buffer comes from a [`BufferPool`] (a private one unless the caller shares one, as the
//! boundary exchange does), and goes back to it when the arena is dropped; growing swaps it
//! for a larger one from the same pool.
//!
//! Sends may read any range of the buffer, overlapping or not. Receives write into fixed
//! segments (ordered and disjoint), each carrying at most one message at a time, so any
//! posting order is safe. While receives are in flight the buffer is not readable; while
//! sends are in flight it is readable but not writable.

use std::ops::Range;

use mpi::topology::SimpleCommunicator;

use crate::pool::{BufferPool, Owned};
use crate::raw;

/// Why a message could not be posted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum P2pError {
    /// The segment list overlaps or is out of order.
    #[error("segments must be ordered and disjoint: {0:?} follows {1:?}")]
    Segments(Range<usize>, Range<usize>),
    /// No such segment, or the message does not fit in it.
    #[error("message of {len} values does not fit segment {seg} ({cap} values)")]
    TooLong { seg: usize, len: usize, cap: usize },
    /// A send range outside the buffer.
    #[error("send range {0:?} outside a buffer of {1} values")]
    OutOfRange(Range<usize>, usize),
    /// The segment already carries a message.
    #[error("segment {0} already carries a message")]
    Busy(usize),
    /// The buffer was asked for while messages are in flight.
    #[error("the buffer is in use by {0} messages in flight")]
    InFlight(usize),
}

/// A buffer of `f64` cut into segments, with at most one message in flight per segment.
#[derive(Debug)]
pub struct MsgArena {
    buf: Owned,
    segs: Vec<Range<usize>>,
    busy: Vec<bool>,
    receiving: usize,
    reqs: raw::Requests,
}

impl MsgArena {
    /// An arena over `segs` (ordered, disjoint), with a zeroed buffer that covers them.
    ///
    /// ```
    /// use starhalo_sf::p2p::MsgArena;
    /// let a = MsgArena::new(vec![0..4, 4..6]).unwrap();
    /// assert_eq!(a.segment(1), Some(4..6));
    /// assert!(MsgArena::new(vec![0..4, 3..6]).is_err());
    /// ```
    pub fn new(segs: Vec<Range<usize>>) -> Result<Self, P2pError> {
        Self::new_in(&BufferPool::new(), segs)
    }

    /// As [`new`](Self::new), with the buffer drawn from `pool`.
    ///
    /// ```
    /// use starhalo_sf::{p2p::MsgArena, pool::BufferPool};
    /// let pool = BufferPool::new();
    /// drop(MsgArena::new_in(&pool, vec![0..4, 4..6]).unwrap());
    /// assert_eq!(pool.available(6), 1);
    /// let _again = MsgArena::new_in(&pool, vec![0..6]).unwrap();
    /// assert_eq!((pool.available(6), pool.created()), (0, 1));
    /// ```
    pub fn new_in(pool: &BufferPool, segs: Vec<Range<usize>>) -> Result<Self, P2pError> {
        let mut a = Self::empty(pool, segs.last().map_or(0, |s| s.end));
        a.reshape(segs)?;
        Ok(a)
    }

    /// An arena of one segment of `len` values (a send buffer).
    pub fn with_len(len: usize) -> Self {
        Self::with_len_in(&BufferPool::new(), len)
    }

    /// As [`with_len`](Self::with_len), with the buffer drawn from `pool`.
    pub fn with_len_in(pool: &BufferPool, len: usize) -> Self {
        let mut a = Self::empty(pool, len);
        a.segs = std::iter::once(0..len).collect();
        a.busy = vec![false];
        a
    }

    fn empty(pool: &BufferPool, len: usize) -> Self {
        Self {
            buf: pool.get(len),
            segs: Vec::new(),
            busy: Vec::new(),
            receiving: 0,
            reqs: raw::Requests::default(),
        }
    }

    /// Replaces the segments (the buffer grows to cover them, keeping its capacity); only
    /// while nothing is in flight.
    pub fn reshape(&mut self, segs: Vec<Range<usize>>) -> Result<(), P2pError> {
        self.idle()?;
        for w in segs.windows(2) {
            if w[1].start < w[0].end || w[1].start > w[1].end {
                return Err(P2pError::Segments(w[1].clone(), w[0].clone()));
            }
        }
        let end = segs.last().map_or(0, |s| s.end);
        if self.buf.len() < end {
            self.buf.resize(end);
        }
        self.busy.clear();
        self.busy.resize(segs.len(), false);
        // Each segment receives at most one message at a time: receives in flight never
        // outgrow this, however they are posted and polled.
        self.reqs.reserve(segs.len());
        self.segs = segs;
        Ok(())
    }

    /// Grows segment `seg` to at least `len` values by doubling its capacity, moving the
    /// segments after it with their contents; only while nothing is in flight. Returns
    /// whether it grew.
    ///
    /// ```
    /// use starhalo_sf::p2p::MsgArena;
    /// let mut a = MsgArena::new(vec![0..1, 1..3]).unwrap();
    /// a.buf_mut().unwrap()[1..3].copy_from_slice(&[7.0, 8.0]);
    /// assert!(a.grow(0, 3).unwrap());
    /// assert_eq!(a.segment(0), Some(0..4));
    /// assert_eq!(a.segment(1), Some(4..6));
    /// assert_eq!(&a.buf().unwrap()[4..6], &[7.0, 8.0]);
    /// ```
    pub fn grow(&mut self, seg: usize, len: usize) -> Result<bool, P2pError> {
        self.idle()?;
        let Some(s) = self.segs.get(seg).cloned() else {
            return Err(P2pError::TooLong { seg, len, cap: 0 });
        };
        if s.len() >= len {
            return Ok(false);
        }
        let mut cap = s.len().max(1);
        while cap < len {
            cap *= 2;
        }
        let shift = cap - s.len();
        let tail = s.end..self.segs.last().map_or(s.end, |l| l.end);
        self.segs[seg].end += shift;
        for r in &mut self.segs[seg + 1..] {
            r.start += shift;
            r.end += shift;
        }
        let end = self.segs.last().map_or(0, |s| s.end);
        self.buf.resize(end);
        // The later segments keep what they hold (a message received earlier).
        self.buf.copy_within(tail.clone(), tail.start + shift);
        Ok(true)
    }

    /// Segment `seg`'s range in the buffer.
    pub fn segment(&self, seg: usize) -> Option<Range<usize>> {
        self.segs.get(seg).cloned()
    }

    /// Number of segments.
    pub fn segments(&self) -> usize {
        self.segs.len()
    }

    /// Messages in flight.
    pub fn in_flight(&self) -> usize {
        self.reqs.len()
    }

    fn idle(&self) -> Result<(), P2pError> {
        match self.reqs.len() {
            0 => Ok(()),
            n => Err(P2pError::InFlight(n)),
        }
    }

    /// The whole buffer, while no receive is in flight.
    pub fn buf(&self) -> Result<&[f64], P2pError> {
        match self.receiving {
            0 => Ok(&self.buf),
            n => Err(P2pError::InFlight(n)),
        }
    }

    /// Segment `seg` for writing, while no send is in flight and the segment receives nothing.
    pub fn segment_mut(&mut self, seg: usize) -> Result<&mut [f64], P2pError> {
        let sending = self.reqs.len() - self.receiving;
        if sending > 0 {
            return Err(P2pError::InFlight(sending));
        }
        let Some(r) = self.segs.get(seg).cloned() else {
            return Err(P2pError::TooLong {
                seg,
                len: 0,
                cap: 0,
            });
        };
        if self.busy[seg] {
            return Err(P2pError::Busy(seg));
        }
        // Writing through a subslice leaves the other segments to the receives in flight.
        let base = self.buf.as_mut_ptr();
        // SAFETY: `r` lies inside the buffer (`reshape`/`grow` keep it covered); no request
        // touches it (it is not busy and no sends are in flight), and the returned borrow of
        // `self` keeps the buffer from moving while the slice lives.
        Ok(unsafe { std::slice::from_raw_parts_mut(base.add(r.start), r.len()) })
    }

    /// The whole buffer for writing, while nothing is in flight.
    pub fn buf_mut(&mut self) -> Result<&mut [f64], P2pError> {
        self.idle()?;
        Ok(&mut self.buf)
    }

    fn claim(&mut self, seg: usize, len: usize) -> Result<Range<usize>, P2pError> {
        let cap = self.segs.get(seg).map_or(0, |s| s.len());
        if seg >= self.segs.len() || len > cap {
            return Err(P2pError::TooLong { seg, len, cap });
        }
        if self.busy[seg] {
            return Err(P2pError::Busy(seg));
        }
        self.busy[seg] = true;
        let s = self.segs[seg].start;
        Ok(s..s + len)
    }

    /// Sends the values at `range` of the buffer to `dest` with `tag`.
    pub fn send(
        &mut self,
        comm: &SimpleCommunicator,
        range: Range<usize>,
        dest: i32,
        tag: i32,
    ) -> Result<(), P2pError> {
        if range.start > range.end || range.end > self.buf.len() || self.receiving > 0 {
            return Err(P2pError::OutOfRange(range, self.buf.len()));
        }
        let data = &self.buf[range];
        // SAFETY: `data` lies in `self.buf`, whose storage moves only in `Owned::resize`,
        // called by `reshape`/`grow` once nothing is in flight; it is neither resized nor
        // handed out while the request is in flight (`idle` guards every access), and `Drop`
        // completes the request before the storage goes back to its pool.
        unsafe { self.reqs.isend(raw::raw_comm(comm), data, dest, tag) };
        Ok(())
    }

    /// Receives at most `len` values from `src` with `tag` into the start of segment `seg`.
    pub fn recv(
        &mut self,
        comm: &SimpleCommunicator,
        seg: usize,
        len: usize,
        src: i32,
        tag: i32,
    ) -> Result<(), P2pError> {
        let r = self.claim(seg, len)?;
        self.receiving += 1;
        let base = self.buf.as_mut_ptr();
        // SAFETY: `r` lies inside the buffer; see `segment_mut` for why a raw subslice.
        let data = unsafe { std::slice::from_raw_parts_mut(base.add(r.start), r.len()) };
        // SAFETY: as in `send`; segments are disjoint (`reshape` checks) and each carries at
        // most one message (`claim` checks), so no two receives write the same values.
        unsafe { self.reqs.irecv(raw::raw_comm(comm), data, src, tag) };
        Ok(())
    }

    /// True once every message has completed (the buffer is then free again).
    pub fn test(&mut self) -> bool {
        let done = self.reqs.test_all();
        if done {
            self.busy.iter_mut().for_each(|b| *b = false);
            self.receiving = 0;
        }
        done
    }

    /// Waits for every message.
    pub fn wait(&mut self) {
        self.reqs.wait_all();
        self.busy.iter_mut().for_each(|b| *b = false);
        self.receiving = 0;
    }
}

impl Drop for MsgArena {
    fn drop(&mut self) {
        // Receives that no sender will match would block forever: cancel them first.
        self.reqs.cancel_receives();
        self.reqs.wait_all();
    }
}

/// The length, in `f64`s, of a message from `src` with `tag` that has arrived and not yet
/// been received, if there is one.
pub fn probe(comm: &SimpleCommunicator, src: i32, tag: i32) -> Option<usize> {
    raw::probe(raw::raw_comm(comm), Some(src), tag, false)
        .map(|m| m.bytes / std::mem::size_of::<f64>())
}

/// The largest tag `comm` accepts (`MPI_TAG_UB`).
pub fn tag_ub(comm: &SimpleCommunicator) -> usize {
    raw::tag_ub(raw::raw_comm(comm))
}
