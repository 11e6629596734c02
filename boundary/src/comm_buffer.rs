//! `CommBuffer`: one channel's storage and its five-state protocol.
//!
//! States, and who moves between them:
//!
//! | from | operation | to | side |
//! |---|---|---|---|
//! | `Stale` | [`CommBuffer::allocate`] | `Stale` | either |
//! | `Stale` | [`CommBuffer::send`] | `Sending` | sender |
//! | `Stale` | [`CommBuffer::send_null`] | `SendingNull` | sender |
//! | `Sending`, `SendingNull` | [`CommBuffer::stale`] | `Stale` | sender |
//! | `Stale` | [`CommBuffer::try_start_receive`] | `Stale` (receive posted) | receiver |
//! | `Stale` | [`CommBuffer::try_receive`] (message there) | `Received` / `ReceivedNull` | receiver |
//! | `Received`, `ReceivedNull` | [`CommBuffer::try_receive`] | unchanged, `true` | receiver |
//! | `Received`, `ReceivedNull` | [`CommBuffer::stale`] | `Stale` | receiver |
//!
//! Everything else is an error ([`BoundaryError::IllegalTransition`]): sending twice without
//! staling, sending from a receiver, receiving on a sender, sending from unallocated storage,
//! staling a buffer that is already stale.
//!
//! The transitions themselves live in [`ChannelState`], which the exchange's channel ends
//! keep as well; a `CommBuffer` adds storage (from a [`BufferPool`]) and a transport.
//!
//! How bytes move is a [`Transport`]; [`same_rank_pair`] gives the same-rank one, where a send
//! makes the values visible to the paired receiver. The MPI transport plugs in the same way,
//! so callers never see the difference.

use std::sync::{Arc, Mutex};

use starhalo_sf::pool::{BufferPool, Owned};

use crate::error::BoundaryError;

/// The state of a channel's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BufferState {
    /// Nothing in flight; the receiver no longer needs the contents.
    Stale,
    /// The sender has sent real data.
    Sending,
    /// The sender has sent "nothing to send" (unallocated or below the sparse threshold).
    SendingNull,
    /// The receiver holds real data.
    Received,
    /// The receiver learnt that the sender sent nothing: use default values.
    ReceivedNull,
}

impl BufferState {
    /// Lower-case name, as in the seed.
    pub fn name(self) -> &'static str {
        match self {
            Self::Stale => "stale",
            Self::Sending => "sending",
            Self::SendingNull => "sending_null",
            Self::Received => "received",
            Self::ReceivedNull => "received_null",
        }
    }
}

/// Which end of the channel a buffer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Packs and sends.
    Sender,
    /// Receives and unpacks.
    Receiver,
}

/// What a receive found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arrival {
    /// Data, now in the buffer.
    Data,
    /// A null message: the sender had nothing to send.
    Null,
}

/// The five-state protocol of one channel end, apart from storage and transport: the one
/// place that decides which transitions are legal. A [`CommBuffer`] keeps its state in one,
/// and so does every channel end of an [`Exchange`](crate::Exchange), whose coalesced and
/// per-channel messages carry the bytes.
///
/// ```
/// use starhalo_boundary::comm_buffer::{Arrival, BufferState, ChannelState, Role};
/// let mut rx = ChannelState::new(Role::Receiver);
/// assert!(rx.sent(true).is_err());
/// rx.arrived(Arrival::Null).unwrap();
/// assert!(rx.has_arrived() && rx.arrived(Arrival::Data).is_err());
/// rx.stale().unwrap();
/// assert_eq!(rx.state(), BufferState::Stale);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChannelState {
    role: Role,
    state: BufferState,
}

impl ChannelState {
    /// A stale end.
    pub fn new(role: Role) -> Self {
        Self {
            role,
            state: BufferState::Stale,
        }
    }

    /// Current state.
    pub fn state(&self) -> BufferState {
        self.state
    }

    /// Which end it is.
    pub fn role(&self) -> Role {
        self.role
    }

    /// True once a receiver holds data or a null message.
    pub fn has_arrived(&self) -> bool {
        matches!(
            self.state,
            BufferState::Received | BufferState::ReceivedNull
        )
    }

    /// Succeeds when this is a `role` end and `ok`; else names the wrong role or the state.
    pub(crate) fn require(
        &self,
        op: &'static str,
        role: Role,
        ok: bool,
    ) -> Result<(), BoundaryError> {
        if self.role != role {
            let state = match self.role {
                Role::Sender => "sender",
                Role::Receiver => "receiver",
            };
            return Err(BoundaryError::IllegalTransition { op, state });
        }
        if !ok {
            return Err(BoundaryError::IllegalTransition {
                op,
                state: self.state.name(),
            });
        }
        Ok(())
    }

    /// Succeeds while stale (storage may change only then).
    pub fn require_stale(&self, op: &'static str) -> Result<(), BoundaryError> {
        self.require(op, self.role, self.state == BufferState::Stale)
    }

    /// Succeeds when a sender may send now (it is stale).
    pub fn can_send(&self, op: &'static str) -> Result<(), BoundaryError> {
        self.require(op, Role::Sender, self.state == BufferState::Stale)
    }

    /// A sender sent data (`live`) or a null message: `Stale -> Sending / SendingNull`.
    pub fn sent(&mut self, live: bool) -> Result<(), BoundaryError> {
        let op = if live { "send" } else { "send_null" };
        self.can_send(op)?;
        self.state = if live {
            BufferState::Sending
        } else {
            BufferState::SendingNull
        };
        Ok(())
    }

    /// Succeeds when a receiver may wait for a message (stale, or already arrived).
    pub fn can_receive(&self, op: &'static str) -> Result<(), BoundaryError> {
        let ok = self.state == BufferState::Stale || self.has_arrived();
        self.require(op, Role::Receiver, ok)
    }

    /// A receiver's message arrived: `Stale -> Received / ReceivedNull`.
    pub fn arrived(&mut self, a: Arrival) -> Result<(), BoundaryError> {
        self.require("receive", Role::Receiver, self.state == BufferState::Stale)?;
        self.state = match a {
            Arrival::Data => BufferState::Received,
            Arrival::Null => BufferState::ReceivedNull,
        };
        Ok(())
    }

    /// The contents are no longer needed: `Sending / SendingNull` (sender) or `Received /
    /// ReceivedNull` (receiver) to `Stale`.
    pub fn stale(&mut self) -> Result<(), BoundaryError> {
        let ok = match self.role {
            Role::Sender => matches!(self.state, BufferState::Sending | BufferState::SendingNull),
            Role::Receiver => self.has_arrived(),
        };
        if !ok {
            return Err(BoundaryError::IllegalTransition {
                op: "stale",
                state: self.state.name(),
            });
        }
        self.state = BufferState::Stale;
        Ok(())
    }
}

/// How a buffer's values reach the other end (same rank, MPI, ...).
pub trait Transport {
    /// Starts sending `payload` (`None`: a null message). The payload may be reused once this
    /// returns for a same-rank transport; an MPI one keeps its own copy or request.
    fn send(&mut self, payload: Option<&[f64]>) -> Result<(), BoundaryError>;
    /// Posts the receive if that is possible yet; returns whether it is posted.
    fn start_receive(&mut self) -> Result<bool, BoundaryError>;
    /// Completes the receive if the message has arrived, writing data into `into` (the
    /// receiver's storage, of the channel's size); `None` when nothing has arrived yet.
    fn poll_receive(&mut self, into: &mut [f64]) -> Result<Option<Arrival>, BoundaryError>;
}

/// One channel's storage and state: the storage comes from a [`BufferPool`] (allocated on
/// [`allocate`](Self::allocate), or on the first receive; returned on [`free`](Self::free)
/// or drop), the state is a [`ChannelState`].
#[derive(Debug)]
pub struct CommBuffer<T> {
    st: ChannelState,
    size: usize,
    pool: BufferPool,
    data: Option<Owned>,
    posted: bool,
    transport: T,
}

impl<T: Transport> CommBuffer<T> {
    /// A stale, unallocated buffer of `size` values at `role` end of `transport`, with
    /// storage from a pool of its own.
    pub fn new(role: Role, size: usize, transport: T) -> Self {
        Self::new_in(&BufferPool::new(), role, size, transport)
    }

    /// As [`new`](Self::new), with storage from `pool`.
    pub fn new_in(pool: &BufferPool, role: Role, size: usize, transport: T) -> Self {
        Self {
            st: ChannelState::new(role),
            size,
            pool: pool.clone(),
            data: None,
            posted: false,
            transport,
        }
    }

    /// Current state.
    pub fn state(&self) -> BufferState {
        self.st.state()
    }

    /// Which end this is.
    pub fn role(&self) -> Role {
        self.st.role()
    }

    /// Values the channel carries when it carries data.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Whether storage is allocated.
    pub fn is_allocated(&self) -> bool {
        self.data.is_some()
    }

    /// The values (empty while unallocated).
    pub fn data(&self) -> &[f64] {
        self.data.as_deref().unwrap_or_default()
    }

    /// The values, for packing.
    pub fn data_mut(&mut self) -> &mut [f64] {
        self.data.as_deref_mut().unwrap_or_default()
    }

    /// Allocates storage of [`size`](Self::size) values (zeroed) from the pool; only while
    /// stale.
    pub fn allocate(&mut self) -> Result<(), BoundaryError> {
        self.st.require_stale("allocate")?;
        match &mut self.data {
            Some(d) => d.fill(0.0),
            None => self.data = Some(self.pool.get(self.size)),
        }
        Ok(())
    }

    /// Returns the storage to the pool; only while stale.
    pub fn free(&mut self) -> Result<(), BoundaryError> {
        self.st.require_stale("free")?;
        self.data = None;
        Ok(())
    }

    /// Sends the packed values: `Stale -> Sending`. Needs allocated storage.
    pub fn send(&mut self) -> Result<(), BoundaryError> {
        self.st.can_send("send")?;
        let Some(d) = &self.data else {
            return Err(BoundaryError::IllegalTransition {
                op: "send",
                state: "unallocated",
            });
        };
        self.transport.send(Some(d))?;
        self.st.sent(true)
    }

    /// Sends a null message: `Stale -> SendingNull`.
    pub fn send_null(&mut self) -> Result<(), BoundaryError> {
        self.st.can_send("send_null")?;
        self.transport.send(None)?;
        self.st.sent(false)
    }

    /// Posts the receive if possible; returns whether it is posted. Only while stale.
    pub fn try_start_receive(&mut self) -> Result<bool, BoundaryError> {
        let ok = self.st.state() == BufferState::Stale;
        self.st.require("try_start_receive", Role::Receiver, ok)?;
        if !self.posted {
            self.posted = self.transport.start_receive()?;
        }
        Ok(self.posted)
    }

    /// Completes the receive if the message is there: `Stale -> Received` (data) or
    /// `ReceivedNull`; returns `true` once received (again `true`, unchanged, when called on
    /// a buffer already received).
    pub fn try_receive(&mut self) -> Result<bool, BoundaryError> {
        self.st.can_receive("try_receive")?;
        if self.st.has_arrived() {
            return Ok(true);
        }
        if !self.try_start_receive()? {
            return Ok(false);
        }
        let size = self.size;
        let into = self.data.get_or_insert_with(|| self.pool.get(size));
        match self.transport.poll_receive(into)? {
            None => Ok(false),
            Some(a) => {
                self.posted = false;
                self.st.arrived(a)?;
                Ok(true)
            }
        }
    }

    /// Marks the contents as no longer needed: from `Sending`/`SendingNull` (sender) or
    /// `Received`/`ReceivedNull` (receiver) to `Stale`.
    pub fn stale(&mut self) -> Result<(), BoundaryError> {
        self.st.stale()
    }
}

#[derive(Debug, Default)]
struct Slot {
    pending: Option<Arrival>,
    values: Vec<f64>,
}

/// The same-rank transport: sender and receiver share one slot.
#[derive(Debug, Clone, Default)]
pub struct SameRank {
    slot: Arc<Mutex<Slot>>,
}

impl SameRank {
    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Slot>, BoundaryError> {
        self.slot
            .lock()
            .map_err(|_| BoundaryError::Geometry("same-rank slot poisoned".into()))
    }
}

impl Transport for SameRank {
    fn send(&mut self, payload: Option<&[f64]>) -> Result<(), BoundaryError> {
        let mut s = self.lock()?;
        if s.pending.is_some() {
            return Err(BoundaryError::IllegalTransition {
                op: "send",
                state: "previous message not yet received",
            });
        }
        s.values.clear();
        s.pending = Some(match payload {
            Some(p) => {
                s.values.extend_from_slice(p);
                Arrival::Data
            }
            None => Arrival::Null,
        });
        Ok(())
    }

    fn start_receive(&mut self) -> Result<bool, BoundaryError> {
        Ok(true)
    }

    fn poll_receive(&mut self, into: &mut [f64]) -> Result<Option<Arrival>, BoundaryError> {
        let mut s = self.lock()?;
        if s.pending == Some(Arrival::Data) {
            BoundaryError::check_size("same-rank message", into.len(), s.values.len())?;
            into.copy_from_slice(&s.values);
        }
        Ok(s.pending.take())
    }
}

/// A same-rank channel of `size` values: the sender's buffer and the receiver's.
///
/// ```
/// use starhalo_boundary::comm_buffer::{same_rank_pair, BufferState};
/// let (mut tx, mut rx) = same_rank_pair(3);
/// tx.allocate().unwrap();
/// tx.data_mut().copy_from_slice(&[1.0, 2.0, 3.0]);
/// assert!(!rx.try_receive().unwrap());
/// tx.send().unwrap();
/// assert!(rx.try_receive().unwrap());
/// assert_eq!((rx.state(), rx.data()), (BufferState::Received, &[1.0, 2.0, 3.0][..]));
/// rx.stale().unwrap();
/// tx.stale().unwrap();
/// ```
pub fn same_rank_pair(size: usize) -> (CommBuffer<SameRank>, CommBuffer<SameRank>) {
    let t = SameRank::default();
    (
        CommBuffer::new(Role::Sender, size, t.clone()),
        CommBuffer::new(Role::Receiver, size, t),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use BufferState::*;

    type Buf = CommBuffer<SameRank>;

    /// A pair whose sender is in `s` and receiver in `r` (reachable states only).
    fn in_states(s: BufferState, r: BufferState) -> (Buf, Buf) {
        let (mut tx, mut rx) = same_rank_pair(2);
        tx.allocate().unwrap();
        match r {
            Received => {
                tx.send().unwrap();
                assert!(rx.try_receive().unwrap());
                tx.stale().unwrap();
            }
            ReceivedNull => {
                tx.send_null().unwrap();
                assert!(rx.try_receive().unwrap());
                tx.stale().unwrap();
            }
            _ => {}
        }
        match s {
            Sending => tx.send().unwrap(),
            SendingNull => tx.send_null().unwrap(),
            _ => {}
        }
        assert_eq!((tx.state(), rx.state()), (s, r));
        (tx, rx)
    }

    fn is_illegal<R: std::fmt::Debug>(r: Result<R, BoundaryError>) -> bool {
        matches!(r, Err(BoundaryError::IllegalTransition { .. }))
    }

    #[test]
    fn data_and_null_round_trips() {
        let (mut tx, mut rx) = same_rank_pair(2);
        assert!(rx.try_start_receive().unwrap());
        assert!(!rx.try_receive().unwrap());
        assert_eq!(rx.state(), Stale);
        tx.allocate().unwrap();
        tx.data_mut().copy_from_slice(&[4.0, 5.0]);
        tx.send().unwrap();
        assert_eq!(tx.state(), Sending);
        assert!(rx.try_receive().unwrap());
        assert_eq!((rx.state(), rx.data()), (Received, &[4.0, 5.0][..]));
        assert!(rx.is_allocated());
        // Idempotent once received.
        assert!(rx.try_receive().unwrap());
        assert_eq!(rx.state(), Received);
        rx.stale().unwrap();
        tx.stale().unwrap();
        tx.send_null().unwrap();
        assert_eq!(tx.state(), SendingNull);
        assert!(rx.try_receive().unwrap());
        assert_eq!(rx.state(), ReceivedNull);
        rx.stale().unwrap();
        assert_eq!(rx.state(), Stale);
    }

    #[test]
    fn every_illegal_sender_operation_is_rejected() {
        let (mut tx, _) = same_rank_pair(2);
        assert!(is_illegal(tx.send()), "send before allocate");
        assert!(is_illegal(tx.stale()), "stale while stale");
        for s in [Sending, SendingNull] {
            let (mut tx, _rx) = in_states(s, Stale);
            assert!(is_illegal(tx.send()), "send from {s:?}");
            assert!(is_illegal(tx.send_null()), "send_null from {s:?}");
            assert!(is_illegal(tx.allocate()), "allocate from {s:?}");
            assert!(is_illegal(tx.free()), "free from {s:?}");
            assert_eq!(tx.state(), s);
        }
        let (mut tx, _rx) = in_states(Stale, Stale);
        assert!(is_illegal(tx.try_receive()), "receive on a sender");
        assert!(is_illegal(tx.try_start_receive()), "post on a sender");
    }

    #[test]
    fn every_illegal_receiver_operation_is_rejected() {
        let (_, mut rx) = same_rank_pair(2);
        rx.allocate().unwrap();
        assert!(is_illegal(rx.send()), "send from a receiver");
        assert!(is_illegal(rx.send_null()), "send_null from a receiver");
        assert!(is_illegal(rx.stale()), "stale while stale");
        for r in [Received, ReceivedNull] {
            let (_tx, mut rx) = in_states(Stale, r);
            assert!(is_illegal(rx.try_start_receive()), "post from {r:?}");
            assert!(is_illegal(rx.allocate()), "allocate from {r:?}");
            assert!(is_illegal(rx.send()), "send from {r:?}");
            assert_eq!(rx.state(), r);
        }
    }

    #[test]
    fn a_second_send_before_the_receive_is_rejected_by_the_transport() {
        let (mut tx, mut rx) = same_rank_pair(1);
        tx.allocate().unwrap();
        tx.send().unwrap();
        tx.stale().unwrap();
        assert!(is_illegal(tx.send()));
        // The failed send left the sender stale; the first message still arrives.
        assert_eq!(tx.state(), Stale);
        assert!(rx.try_receive().unwrap());
        tx.send().unwrap();
    }

    #[test]
    fn free_and_reallocate_only_while_stale() {
        let (mut tx, _rx) = same_rank_pair(3);
        tx.allocate().unwrap();
        assert_eq!(tx.data().len(), 3);
        tx.free().unwrap();
        assert!(!tx.is_allocated() && tx.data().is_empty());
        assert!(is_illegal(tx.send()));
        tx.send_null().unwrap();
    }
}
