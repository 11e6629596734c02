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
//!
//! An arena can also be [placed](MsgArena::place) in a [`Buffer`] of any memory space: MPI
//! then reads and writes that memory in place (device memory needs an MPI with CUDA
//! support: the GPU-aware path), and the values are reached through the space's own
//! operations ([`MsgArena::values_mut`], [`MsgArena::copy_to_segments`], ...) rather than as
//! host slices. Before MPI touches a placed buffer, the arena waits for the work queued on
//! its device since it handed the buffer out.

use std::cell::Cell;
use std::ops::Range;

use mpi::topology::{Communicator, SimpleCommunicator};
use starhalo_exec::{Buffer, SpaceError};

use crate::pool::{BufferPool, Owned};
use crate::raw;

/// Why a message could not be posted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum P2pError {
    /// The segment list overlaps or is out of order.
    #[error("segments must be ordered and disjoint: {0:?} follows {1:?}")]
    Segments(Range<usize>, Range<usize>),
    /// A segment that ends before it starts.
    #[error("segment {0:?} ends before it starts")]
    Reversed(Range<usize>),
    /// A peer rank outside the communicator.
    #[error("rank {rank} is outside the communicator ({size} ranks)")]
    Rank { rank: i32, size: i32 },
    /// A tag outside `0..=MPI_TAG_UB`.
    #[error("tag {tag} is outside the communicator's tags (0 to {ub})")]
    Tag { tag: i32, ub: usize },
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
    /// A message buffer larger than this process can allocate.
    #[error("a message buffer of {0} values does not fit in memory")]
    OutOfMemory(usize),
    /// Host slices of a buffer placed in device memory were asked for.
    #[error("the message buffer is in device memory, not readable as host values")]
    NotHost,
    /// The placed buffer's memory space failed.
    #[error(transparent)]
    Space(#[from] SpaceError),
}

/// An arena's values, to write: host values, or a placed buffer of some memory space.
#[derive(Debug)]
pub enum ValuesMut<'a> {
    Host(&'a mut [f64]),
    Space(&'a mut Buffer<f64>),
}

/// An arena's values, to read.
#[derive(Debug, Clone, Copy)]
pub enum Values<'a> {
    Host(&'a [f64]),
    Space(&'a Buffer<f64>),
}

impl<'a> ValuesMut<'a> {
    /// The values as a host slice, where they are in host memory.
    pub fn host(self) -> Option<&'a mut [f64]> {
        match self {
            Self::Host(v) => Some(v),
            Self::Space(b) => b.host_mut(),
        }
    }
}

impl<'a> Values<'a> {
    /// The values as a host slice, where they are in host memory.
    pub fn host(self) -> Option<&'a [f64]> {
        match self {
            Self::Host(v) => Some(v),
            Self::Space(b) => b.host(),
        }
    }
}

/// Where an arena's values live: a pooled host buffer, or a buffer placed in a memory space.
#[derive(Debug)]
enum Store {
    Pool(Owned),
    Placed(Buffer<f64>),
}

impl Store {
    fn len(&self) -> usize {
        match self {
            Self::Pool(o) => o.len(),
            Self::Placed(b) => b.len(),
        }
    }

    fn host(&self) -> Option<&[f64]> {
        match self {
            Self::Pool(o) => Some(o),
            Self::Placed(b) => b.host(),
        }
    }

    fn host_mut(&mut self) -> Option<&mut [f64]> {
        match self {
            Self::Pool(o) => Some(o),
            Self::Placed(b) => b.host_mut(),
        }
    }

    fn address(&self) -> usize {
        match self {
            Self::Pool(o) => o.as_ptr() as usize,
            Self::Placed(b) => b.address(),
        }
    }

    /// Makes the store at least `len` values long, keeping its values.
    fn grow_to(&mut self, len: usize) -> Result<(), P2pError> {
        if self.len() >= len {
            return Ok(());
        }
        match self {
            Self::Pool(o) => o.resize(len).map_err(|_| P2pError::OutOfMemory(len))?,
            Self::Placed(b) => {
                let mut next = b.zeroed_like(len)?;
                next.copy_range_from(0, b, 0, b.len())?;
                *b = next;
            }
        }
        Ok(())
    }

    fn copy_within(&mut self, range: Range<usize>, dst: usize) -> Result<(), P2pError> {
        match self {
            Self::Pool(o) => o.copy_within(range, dst),
            Self::Placed(b) => b.copy_within(range, dst)?,
        }
        Ok(())
    }
}

/// Values `r` of a host store, for writing while receives may be in flight into other parts
/// of it: a slice of `r` alone, never of the whole buffer. The caller has checked that `r`
/// lies inside the store and that no request touches it (`MsgArena::writable`).
fn host_values_mut(buf: &mut Store, r: Range<usize>) -> Result<&mut [f64], P2pError> {
    let base = buf.host_mut().ok_or(P2pError::NotHost)?.as_mut_ptr();
    // SAFETY: `r` lies inside the buffer and no request touches it (the caller's checks),
    // and the returned borrow of the store keeps the buffer from moving while it lives.
    Ok(unsafe { std::slice::from_raw_parts_mut(base.add(r.start), r.len()) })
}

/// A buffer of `f64` cut into segments, with at most one message in flight per segment.
#[derive(Debug)]
pub struct MsgArena {
    buf: Store,
    segs: Vec<Range<usize>>,
    busy: Vec<bool>,
    receiving: usize,
    reqs: raw::Requests,
    /// A placed buffer was handed out, copied into or copied from since MPI last touched
    /// it: device work may be queued on it (a `Cell`: copying from an arena reads it).
    queued: Cell<bool>,
}

/// A peer must be a rank of the communicator, and a tag in `0..=MPI_TAG_UB`: MPI aborts the
/// job on any other.
fn check_peer(comm: &SimpleCommunicator, rank: i32, tag: i32) -> Result<(), P2pError> {
    let size = comm.size();
    if !(0..size).contains(&rank) {
        return Err(P2pError::Rank { rank, size });
    }
    let ub = tag_ub(comm);
    match usize::try_from(tag).is_ok_and(|t| t <= ub) {
        true => Ok(()),
        false => Err(P2pError::Tag { tag, ub }),
    }
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
        let mut a = Self::empty(pool, segs.last().map_or(0, |s| s.end))?;
        a.reshape(segs)?;
        Ok(a)
    }

    /// An arena of one segment of `len` values (a send buffer).
    pub fn with_len(len: usize) -> Result<Self, P2pError> {
        Self::with_len_in(&BufferPool::new(), len)
    }

    /// As [`with_len`](Self::with_len), with the buffer drawn from `pool`.
    pub fn with_len_in(pool: &BufferPool, len: usize) -> Result<Self, P2pError> {
        let mut a = Self::empty(pool, len)?;
        a.segs = std::iter::once(0..len).collect();
        a.busy = vec![false];
        Ok(a)
    }

    /// An arena without segments over a buffer of `len` values, or
    /// [`P2pError::OutOfMemory`] (not an abort) where the buffer does not fit.
    fn empty(pool: &BufferPool, len: usize) -> Result<Self, P2pError> {
        let buf = pool.try_get(len).map_err(|_| P2pError::OutOfMemory(len))?;
        Ok(Self {
            buf: Store::Pool(buf),
            segs: Vec::new(),
            busy: Vec::new(),
            receiving: 0,
            reqs: raw::Requests::default(),
            queued: Cell::new(false),
        })
    }

    /// Moves the values into a new buffer in the memory space (and on the device) of
    /// `like`, which MPI then reads and writes in place; only while nothing is in flight.
    ///
    /// ```
    /// use starhalo_exec::{Buffer, MemSpace};
    /// use starhalo_sf::p2p::{MsgArena, P2pError};
    /// let mut a = MsgArena::new(vec![0..2]).unwrap();
    /// a.buf_mut().unwrap().copy_from_slice(&[1.0, 2.0]);
    /// a.place(&Buffer::zeroed(MemSpace::Host, 0).unwrap()).unwrap();
    /// assert_eq!(a.buf().unwrap(), &[1.0, 2.0]);
    /// ```
    pub fn place(&mut self, like: &Buffer<f64>) -> Result<(), P2pError> {
        self.idle()?;
        let n = self.buf.len();
        let mut b = like.zeroed_like(n)?;
        match &self.buf {
            Store::Pool(o) => b.write_at(0, o)?,
            Store::Placed(old) => b.copy_range_from(0, old, 0, n)?,
        }
        self.buf = Store::Placed(b);
        self.queued.set(true);
        Ok(())
    }

    /// Whether the arena is [placed](Self::place) in a buffer of its own.
    pub fn is_placed(&self) -> bool {
        matches!(self.buf, Store::Placed(_))
    }

    /// Replaces the segments (the buffer grows to cover them, keeping its capacity); only
    /// while nothing is in flight.
    pub fn reshape(&mut self, segs: Vec<Range<usize>>) -> Result<(), P2pError> {
        self.idle()?;
        if let Some(r) = segs.iter().find(|r| r.start > r.end) {
            return Err(P2pError::Reversed(r.clone()));
        }
        for w in segs.windows(2) {
            if w[1].start < w[0].end {
                return Err(P2pError::Segments(w[1].clone(), w[0].clone()));
            }
        }
        self.buf.grow_to(segs.last().map_or(0, |s| s.end))?;
        self.touched();
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
            cap = cap.checked_mul(2).ok_or(P2pError::OutOfMemory(len))?;
        }
        let shift = cap - s.len();
        let tail = s.end..self.segs.last().map_or(s.end, |l| l.end);
        let end = tail
            .end
            .checked_add(shift)
            .ok_or(P2pError::OutOfMemory(len))?;
        // The storage first: should it fail, the segments still lie inside it.
        self.buf.grow_to(end)?;
        self.segs[seg].end += shift;
        for r in &mut self.segs[seg + 1..] {
            r.start += shift;
            r.end += shift;
        }
        // The later segments keep what they hold (a message received earlier).
        if !tail.is_empty() {
            self.buf.copy_within(tail.clone(), tail.start + shift)?;
        }
        // A placed buffer was copied into its larger successor on the device.
        self.touched();
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

    /// A send in flight may be reading any part of the buffer.
    #[inline]
    fn no_sends(&self) -> Result<(), P2pError> {
        match self.reqs.len() - self.receiving {
            0 => Ok(()),
            n => Err(P2pError::InFlight(n)),
        }
    }

    #[inline]
    fn readable(&self) -> Result<(), P2pError> {
        match self.receiving {
            0 => Ok(()),
            n => Err(P2pError::InFlight(n)),
        }
    }

    /// The whole buffer, while no receive is in flight; host memory only.
    pub fn buf(&self) -> Result<&[f64], P2pError> {
        self.readable()?;
        self.buf.host().ok_or(P2pError::NotHost)
    }

    /// The values where they are, while no receive is in flight (device work reading a
    /// placed buffer must be queued before the arena next posts a message).
    pub fn values(&mut self) -> Result<Values<'_>, P2pError> {
        self.readable()?;
        Ok(match &self.buf {
            Store::Pool(o) => Values::Host(o),
            Store::Placed(b) => {
                self.queued.set(true);
                Values::Space(b)
            }
        })
    }

    /// The values where they are, to write, while nothing is in flight.
    pub fn values_mut(&mut self) -> Result<ValuesMut<'_>, P2pError> {
        self.idle()?;
        Ok(match &mut self.buf {
            Store::Pool(o) => ValuesMut::Host(o),
            Store::Placed(b) => {
                self.queued.set(true);
                ValuesMut::Space(b)
            }
        })
    }

    /// Checks that segment `seg` may be written (no send in flight, no receive into it) and
    /// gives its range.
    #[inline]
    fn writable(&self, seg: usize) -> Result<Range<usize>, P2pError> {
        self.no_sends()?;
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
        // A placed buffer handed out for writing may have been swapped for a shorter one.
        if r.end > self.buf.len() {
            return Err(P2pError::OutOfRange(r, self.buf.len()));
        }
        Ok(r)
    }

    /// Segment `seg` for writing, while no send is in flight and the segment receives
    /// nothing; host memory only.
    pub fn segment_mut(&mut self, seg: usize) -> Result<&mut [f64], P2pError> {
        let r = self.writable(seg)?;
        host_values_mut(&mut self.buf, r)
    }

    /// Copies `range` of `src`'s buffer (no receive in flight there) to the start of
    /// segments `segs`, which lie back to back (each as [`segment_mut`](Self::segment_mut)
    /// allows), in whichever memory the two live: one copy for a run of messages that lie
    /// back to back in both buffers.
    #[inline]
    pub fn copy_to_segments(
        &mut self,
        segs: Range<usize>,
        src: &MsgArena,
        range: Range<usize>,
    ) -> Result<(), P2pError> {
        let mut r = self.writable(segs.start)?;
        for seg in segs.start + 1..segs.end {
            let next = self.writable(seg)?;
            if next.start != r.end {
                return Err(P2pError::Segments(next, r));
            }
            r.end = next.end;
        }
        src.readable()?;
        let n = range.len();
        if n > r.len() {
            return Err(P2pError::TooLong {
                seg: segs.start,
                len: n,
                cap: r.len(),
            });
        }
        if range.start > range.end || range.end > src.buf.len() {
            return Err(P2pError::OutOfRange(range, src.buf.len()));
        }
        let at = r.start;
        match (&mut self.buf, &src.buf) {
            (to @ Store::Pool(_), Store::Pool(from)) => {
                host_values_mut(to, at..at + n)?.copy_from_slice(&from[range]);
            }
            (to @ Store::Pool(_), Store::Placed(from)) => {
                from.read_at(range.start, host_values_mut(to, at..at + n)?)?;
            }
            (Store::Placed(to), Store::Pool(from)) => {
                to.write_at(at, &from[range])?;
                self.queued.set(true);
            }
            (Store::Placed(to), Store::Placed(from)) => {
                to.copy_range_from(at, from, range.start, n)?;
                // The copy reads `src` on the device: its next message waits for it too.
                self.queued.set(true);
                src.queued.set(true);
            }
        }
        Ok(())
    }

    /// Writes host `values` at `at`, while nothing is in flight.
    pub fn write(&mut self, at: usize, values: &[f64]) -> Result<(), P2pError> {
        self.idle()?;
        let (end, n) = (at.saturating_add(values.len()), self.buf.len());
        match &mut self.buf {
            Store::Pool(o) => o
                .get_mut(at..end)
                .ok_or(P2pError::OutOfRange(at..end, n))?
                .copy_from_slice(values),
            Store::Placed(b) => {
                b.write_at(at, values)?;
                self.queued.set(true);
            }
        }
        Ok(())
    }

    /// Reads the values from `at` into host `out`, while no receive is in flight.
    pub fn read(&self, at: usize, out: &mut [f64]) -> Result<(), P2pError> {
        self.readable()?;
        let end = at.saturating_add(out.len());
        match &self.buf {
            Store::Pool(o) => out.copy_from_slice(
                o.get(at..end)
                    .ok_or(P2pError::OutOfRange(at..end, o.len()))?,
            ),
            Store::Placed(b) => b.read_at(at, out)?,
        }
        Ok(())
    }

    /// Copies the values of `range` to start at `dst` (the two may overlap), while nothing
    /// is in flight.
    pub fn copy_within(&mut self, range: Range<usize>, dst: usize) -> Result<(), P2pError> {
        self.idle()?;
        let n = self.buf.len();
        if range.start > range.end || range.end > n || dst.saturating_add(range.len()) > n {
            return Err(P2pError::OutOfRange(range, n));
        }
        self.buf.copy_within(range, dst)?;
        self.touched();
        Ok(())
    }

    /// The whole buffer for writing, while nothing is in flight; host memory only.
    pub fn buf_mut(&mut self) -> Result<&mut [f64], P2pError> {
        self.idle()?;
        self.buf.host_mut().ok_or(P2pError::NotHost)
    }

    /// Notes that device work may now touch a placed buffer.
    fn touched(&self) {
        if self.is_placed() {
            self.queued.set(true);
        }
    }

    /// Before MPI touches a placed buffer: the device work queued on it must be done.
    fn settle(&mut self) -> Result<(), P2pError> {
        if let (true, Store::Placed(b)) = (self.queued.get(), &self.buf) {
            b.wait()?;
            self.queued.set(false);
        }
        Ok(())
    }

    fn claim(&mut self, seg: usize, len: usize) -> Result<Range<usize>, P2pError> {
        let cap = self.segs.get(seg).map_or(0, |s| s.len());
        if seg >= self.segs.len() || len > cap {
            return Err(P2pError::TooLong { seg, len, cap });
        }
        if self.busy[seg] {
            return Err(P2pError::Busy(seg));
        }
        if self.segs[seg].end > self.buf.len() {
            return Err(P2pError::OutOfRange(self.segs[seg].clone(), self.buf.len()));
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
        let n = self.buf.len();
        if range.start > range.end || range.end > n || self.receiving > 0 {
            return Err(P2pError::OutOfRange(range, n));
        }
        check_peer(comm, dest, tag)?;
        self.settle()?;
        let addr = self.buf.address() + range.start * 8;
        // SAFETY: `range` lies in the buffer (checked), whose storage is replaced only while
        // nothing is in flight (`grow`, `reshape`, `place`, and a caller of `values_mut`);
        // it is neither resized nor handed out for writing while the request is in flight
        // (`idle` guards every such access), the device work on a placed buffer is done
        // (`settle`), and `Drop` completes the request before the storage is freed or goes
        // back to its pool.
        unsafe {
            self.reqs.isend(
                raw::raw_comm(comm),
                addr as *const u8,
                range.len() * 8,
                dest,
                tag,
            )
        };
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
        check_peer(comm, src, tag)?;
        self.no_sends()?;
        let r = self.claim(seg, len)?;
        if let Err(e) = self.settle() {
            self.busy[seg] = false;
            return Err(e);
        }
        self.receiving += 1;
        let addr = self.buf.address() + r.start * 8;
        // SAFETY: as in `send` (`claim` checks that the segment lies in the buffer);
        // segments are disjoint (`reshape` checks) and each carries at most one message
        // (`claim` checks), so no two receives write the same values, and nothing reads the
        // segment until the receive completes.
        unsafe {
            self.reqs
                .irecv(raw::raw_comm(comm), addr as *mut u8, r.len() * 8, src, tag)
        };
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
pub fn probe(comm: &SimpleCommunicator, src: i32, tag: i32) -> Result<Option<usize>, P2pError> {
    check_peer(comm, src, tag)?;
    let got = raw::probe(raw::raw_comm(comm), Some(src), tag, false);
    Ok(got.map(|m| m.bytes / std::mem::size_of::<f64>()))
}

/// The largest tag `comm` accepts (`MPI_TAG_UB`).
pub fn tag_ub(comm: &SimpleCommunicator) -> usize {
    raw::tag_ub(raw::raw_comm(comm))
}

#[cfg(test)]
mod tests {
    use super::*;
    use starhalo_exec::MemSpace;

    fn host_like() -> Buffer<f64> {
        Buffer::zeroed(MemSpace::Host, 0).unwrap()
    }

    /// Segment lists and growth that no buffer can hold are errors, not out-of-bounds
    /// pointers or overflowing arithmetic.
    #[test]
    fn impossible_segments_and_growth_are_refused() {
        let reversed = Range { start: 5, end: 2 };
        assert!(matches!(
            MsgArena::new(Vec::from([reversed.clone()])),
            Err(P2pError::Reversed(r)) if r == reversed
        ));
        assert!(matches!(
            MsgArena::new(vec![0..1, reversed]),
            Err(P2pError::Reversed(_))
        ));
        let mut a = MsgArena::new(vec![0..0, 0..2]).unwrap();
        for len in [1 << 60, usize::MAX / 2 + 2, usize::MAX] {
            assert!(
                matches!(a.grow(0, len), Err(P2pError::OutOfMemory(_))),
                "{len}"
            );
        }
        // Nothing moved: the arena is as it was.
        assert_eq!((a.segment(0), a.segment(1)), (Some(0..0), Some(0..2)));
    }

    /// A placed arena reaches its values through the buffer's own operations, and they
    /// give what a pooled arena's slices give.
    #[test]
    fn placed_arenas_copy_grow_read_and_write_as_pooled_ones_do() {
        let mut pooled = MsgArena::new(vec![0..3, 3..3, 3..5]).unwrap();
        pooled
            .buf_mut()
            .unwrap()
            .copy_from_slice(&[1.0, 2.0, 3.0, 4.0, 5.0]);
        let mut placed = MsgArena::new(vec![0..3, 3..3, 3..5]).unwrap();
        placed.place(&host_like()).unwrap();
        assert!(placed.is_placed() && !pooled.is_placed());
        match placed.values_mut().unwrap() {
            ValuesMut::Space(b) => b.write_at(0, &[1.0, 2.0, 3.0, 4.0, 5.0]).unwrap(),
            ValuesMut::Host(_) => panic!("a placed arena hands out its buffer"),
        }
        for a in [&mut pooled, &mut placed] {
            // Growing the empty segment moves the last one with its values.
            assert!(a.grow(1, 3).unwrap());
            assert_eq!(a.segment(2), Some(7..9));
            let mut last = [0.0; 2];
            a.read(7, &mut last).unwrap();
            assert_eq!(last, [4.0, 5.0]);
            // Overlapping move down, then a write.
            a.copy_within(1..3, 0).unwrap();
            a.write(3, &[9.0, 8.0]).unwrap();
            assert!(a.write(8, &[0.0, 0.0]).is_err());
            assert!(a.read(8, &mut [0.0, 0.0]).is_err());
        }
        let (p, q) = (
            pooled.buf().unwrap().to_vec(),
            placed.buf().unwrap().to_vec(),
        );
        assert_eq!(p, [2.0, 3.0, 3.0, 9.0, 8.0, 0.0, 0.0, 4.0, 5.0]);
        assert_eq!(p, q);
        // Copies into a segment, between every pair of stores.
        let mut into_pooled = MsgArena::new(vec![0..2, 2..4]).unwrap();
        let mut into_placed = MsgArena::new(vec![0..2, 2..4]).unwrap();
        into_placed.place(&host_like()).unwrap();
        for to in [&mut into_pooled, &mut into_placed] {
            to.copy_to_segments(1..2, &pooled, 3..5).unwrap();
            to.copy_to_segments(0..1, &placed, 7..9).unwrap();
            assert_eq!(to.buf().unwrap(), &[4.0, 5.0, 9.0, 8.0]);
            // Longer than the segment, or outside the source: refused, nothing written.
            assert!(to.copy_to_segments(0..1, &placed, 0..3).is_err());
            assert!(to.copy_to_segments(0..1, &placed, 8..10).is_err());
            assert_eq!(to.buf().unwrap(), &[4.0, 5.0, 9.0, 8.0]);
            // Both segments in one copy; three values start the run and leave the rest.
            to.copy_to_segments(0..2, &pooled, 1..5).unwrap();
            assert_eq!(to.buf().unwrap(), &[3.0, 3.0, 9.0, 8.0]);
            to.copy_to_segments(0..2, &placed, 0..3).unwrap();
            assert_eq!(to.buf().unwrap(), &[2.0, 3.0, 3.0, 8.0]);
            assert!(to.copy_to_segments(0..2, &placed, 0..5).is_err());
        }
        match into_placed.values().unwrap() {
            Values::Space(b) => assert_eq!(b.to_vec().unwrap(), [2.0, 3.0, 3.0, 8.0]),
            Values::Host(_) => panic!("a placed arena hands out its buffer"),
        }
    }
}
