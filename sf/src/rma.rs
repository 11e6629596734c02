//! The one-sided implementation ([`SfType::Rma`](crate::SfType::Rma)): put + signal over
//! MPI-3 RMA, in the manner of OpenSHMEM's `put_signal`. No message is matched by MPI:
//!
//! - the receiver of each message exposes the memory it will land in (a dynamic window) and
//!   adds its address into an empty word of the sender's mailbox, one atomic operation that is
//!   both the address and the signal;
//! - the sender, once it sees the word filled, empties it, puts the bytes straight there,
//!   flushes, and raises the receiver's "arrived" signal; the receiver's wait polls its own
//!   signals.
//!
//! Each (direction, pair of ranks) has a ring of [`RING`] mailbox words and [`RING`] arrival
//! words, one per operation in flight; operations are numbered per direction in the order
//! they are begun, the same on every rank. An arrival word holds `seq + 1` once the operation
//! numbered `seq` has arrived: senders add `RING`, and the words start `RING` below their
//! first value. An operation is refused when its slot still holds one in flight, so no two
//! operations in flight on a rank share a slot, and a slot is refilled only after the
//! operation that used it has ended on both ranks. Sends whose mailbox is still empty wait in
//! the forest's outgoing list, moved on by every start and wait of the forest's operations:
//! unlike MPI's own sends, they do not move while their rank is in another MPI call.

use crate::error::SfError;
use crate::raw::{RawComm, Window};
use crate::transport::{Bound, Dir, Side, Transport};
use mpi::point_to_point::{Destination, Source};
use mpi::topology::{Communicator, SimpleCommunicator};
use std::cell::{Cell, RefCell};
use std::rc::Rc;

/// Slots per direction and pair: operations of one direction a rank may have in flight.
pub(crate) const RING: u64 = 64;
/// Set-up message tags (the forest's operations use 1 to 4).
const TAG_FROM_ROOTS: i32 = 5;
const TAG_FROM_LEAVES: i32 = 6;

/// One peer of a direction: its rank and the first word of two rings (word displacements
/// in the control windows).
#[derive(Clone, Copy, Debug, Default)]
struct Pair {
    rank: i32,
    /// Receiving: my arrival ring. Sending: my mailbox ring.
    local: u64,
    /// Receiving: the sender's mailbox ring. Sending: the receiver's arrival ring.
    remote: u64,
}

/// A send waiting for its receiver's mailbox.
struct Outgoing {
    dir: usize,
    seq: u64,
    peer: usize,
    addr: *const u8,
    bytes: usize,
}

/// The windows and rings of one forest, shared by its links.
pub(crate) struct RmaShared {
    rank: i32,
    ctl: Window,
    data: Window,
    /// Per direction: the pairs this rank sends to and receives from.
    send: [Vec<Pair>; 2],
    recv: [Vec<Pair>; 2],
    /// Per direction: the number the next operation begun gets.
    next: Cell<[u64; 2]>,
    /// Per direction: the ring slots of the operations in flight on this rank, one bit each.
    busy: Cell<[u64; 2]>,
    outgoing: RefCell<Vec<Outgoing>>,
}

impl RmaShared {
    /// Collective over `comm`: the control window of every ring, the dynamic data window, and
    /// the exchange of ring positions with every peer.
    pub(crate) fn new(
        comm: &SimpleCommunicator,
        raw: RawComm,
        leaf_ranks: &[i32],
        root_ranks: &[i32],
    ) -> Self {
        // Bcast: roots send to leaf ranks, leaves receive from root ranks; reduce the reverse.
        let sends = [leaf_ranks, root_ranks];
        let recvs = [root_ranks, leaf_ranks];
        let mut words = Vec::new();
        let mut ring = |init: bool| {
            let at = words.len() as u64;
            words.extend((1..=RING).map(|s| if init { s.wrapping_sub(RING) } else { 0 }));
            at
        };
        let mut send: [Vec<Pair>; 2] = Default::default();
        let mut recv: [Vec<Pair>; 2] = Default::default();
        for d in 0..2 {
            for &rank in sends[d] {
                let local = ring(false);
                send[d].push(Pair {
                    rank,
                    local,
                    remote: 0,
                });
            }
            for &rank in recvs[d] {
                let local = ring(true);
                recv[d].push(Pair {
                    rank,
                    local,
                    remote: 0,
                });
            }
        }
        exchange_rings(comm, &mut send, &mut recv);
        Self {
            rank: comm.rank(),
            ctl: Window::over_words(raw, words.into_boxed_slice()),
            data: Window::dynamic(raw),
            send,
            recv,
            next: Cell::new([0; 2]),
            busy: Cell::new([0; 2]),
            outgoing: RefCell::new(Vec::new()),
        }
    }

    /// Refuses an operation whose ring slot, in either direction, still holds one in flight
    /// (begun 64 or more operations earlier and not ended).
    pub(crate) fn check_slots(&self) -> Result<(), SfError> {
        let (next, busy) = (self.next.get(), self.busy.get());
        match (0..2).any(|d| busy[d] & (1 << (next[d] % RING)) != 0) {
            true => Err(SfError::TooManyInFlight(RING)),
            false => Ok(()),
        }
    }

    fn number(&self, dir: usize) -> u64 {
        let (mut next, mut busy) = (self.next.get(), self.busy.get());
        let seq = next[dir];
        next[dir] += 1;
        busy[dir] |= 1 << (seq % RING);
        self.next.set(next);
        self.busy.set(busy);
        seq
    }

    fn release(&self, dir: usize, seq: u64) {
        let mut busy = self.busy.get();
        busy[dir] &= !(1 << (seq % RING));
        self.busy.set(busy);
    }

    /// Puts every outgoing message whose mailbox word is filled, and signals its arrival.
    fn progress(&self) {
        self.outgoing.borrow_mut().retain(|o| {
            let pair = &self.send[o.dir][o.peer];
            let word = pair.local + o.seq % RING;
            let target = self.ctl.read_word(word);
            if target == 0 {
                return true;
            }
            // Emptied before the arrival signal, so the receiver never refills it too early.
            self.ctl.add_word(self.rank, word, target.wrapping_neg());
            // SAFETY: `o.addr` is the sender's bound message, valid until its wait, which
            // does not return while the message is outgoing; the receiver attached `target`
            // for `o.bytes` bytes before posting it.
            unsafe { self.data.put(o.addr, o.bytes, pair.rank, target) };
            self.data.flush(pair.rank);
            self.ctl
                .add_word(pair.rank, pair.remote + o.seq % RING, RING);
            false
        });
    }

    fn sending(&self, dir: usize, seq: u64) -> bool {
        let out = self.outgoing.borrow();
        out.iter().any(|o| o.dir == dir && o.seq == seq)
    }
}

/// Tells each peer where this rank's rings for it are, and learns where its rings for this
/// rank are. A root-side peer (in `leaf_ranks`) is sent to in bcast and received from in
/// reduce; a leaf-side peer the reverse.
fn exchange_rings(comm: &SimpleCommunicator, send: &mut [Vec<Pair>; 2], recv: &mut [Vec<Pair>; 2]) {
    const B: usize = Dir::Bcast as usize;
    const R: usize = Dir::Reduce as usize;
    // To my leaf ranks (bcast send pairs = reduce recv pairs, same order) and my root ranks.
    let to_leaves: Vec<[u64; 2]> = (send[B].iter().zip(&recv[R]))
        .map(|(s, r)| [s.local, r.local])
        .collect();
    let to_roots: Vec<[u64; 2]> = (send[R].iter().zip(&recv[B]))
        .map(|(s, r)| [s.local, r.local])
        .collect();
    mpi::request::multiple_scope(to_leaves.len() + to_roots.len(), |scope, reqs| {
        for (pair, msg) in send[B].iter().zip(&to_leaves) {
            let p = comm.process_at_rank(pair.rank);
            reqs.add(p.immediate_send_with_tag(scope, &msg[..], TAG_FROM_ROOTS));
        }
        for (pair, msg) in send[R].iter().zip(&to_roots) {
            let p = comm.process_at_rank(pair.rank);
            reqs.add(p.immediate_send_with_tag(scope, &msg[..], TAG_FROM_LEAVES));
        }
        // From my root ranks (they sent to their leaf ranks), then from my leaf ranks.
        for i in 0..recv[B].len() {
            let mut msg = [0u64; 2];
            let p = comm.process_at_rank(recv[B][i].rank);
            p.receive_into_with_tag(&mut msg[..], TAG_FROM_ROOTS);
            recv[B][i].remote = msg[0];
            send[R][i].remote = msg[1];
        }
        for j in 0..recv[R].len() {
            let mut msg = [0u64; 2];
            let p = comm.process_at_rank(recv[R][j].rank);
            p.receive_into_with_tag(&mut msg[..], TAG_FROM_LEAVES);
            recv[R][j].remote = msg[0];
            send[B][j].remote = msg[1];
        }
        reqs.wait_all(&mut Vec::new());
    });
}

/// One link's messages over the forest's windows.
pub(crate) struct Rma {
    shared: Rc<RmaShared>,
    msgs: Bound,
    /// The number of the operation in flight per direction, taken when its first side starts.
    seq: [Option<u64>; 2],
    started: [[bool; 2]; 2],
}

impl Rma {
    pub(crate) fn new(shared: Rc<RmaShared>) -> Self {
        // Root-side peers are the leaf ranks: bcast's send pairs.
        let msgs = Bound::new(
            shared.send[Dir::Bcast as usize].len(),
            shared.recv[Dir::Bcast as usize].len(),
        );
        Self {
            shared,
            msgs,
            seq: [None; 2],
            started: [[false; 2]; 2],
        }
    }
}

impl Transport for Rma {
    unsafe fn bind(&mut self, side: Side, dir: Dir, i: usize, addr: *const u8, bytes: usize) {
        self.msgs.set(side, dir, i, addr, bytes);
    }

    fn start(&mut self, side: Side, dir: Dir) {
        let (s, d) = (side as usize, dir as usize);
        let sh = &*self.shared;
        let seq = *self.seq[d].get_or_insert_with(|| sh.number(d));
        let slot = seq % RING;
        self.started[s][d] = true;
        if !side.sends(dir) {
            for (pair, &(addr, bytes)) in sh.recv[d].iter().zip(self.msgs.get(side, dir)) {
                // SAFETY: bound under `bind`'s contract: valid and unaliased until the wait,
                // which detaches it.
                unsafe { sh.data.attach(addr, bytes) };
                sh.data.sync();
                let at = Window::address(addr);
                sh.ctl.add_word(pair.rank, pair.remote + slot, at);
            }
        } else {
            let mut out = sh.outgoing.borrow_mut();
            for (peer, &(addr, bytes)) in self.msgs.get(side, dir).iter().enumerate() {
                out.push(Outgoing {
                    dir: d,
                    seq,
                    peer,
                    addr,
                    bytes,
                });
            }
            drop(out);
            sh.progress();
        }
    }

    fn wait(&mut self, side: Side, dir: Dir) {
        let (s, d) = (side as usize, dir as usize);
        if !self.started[s][d] {
            return;
        }
        let sh = &*self.shared;
        let seq = self.seq[d].expect("a started direction has a number");
        let slot = seq % RING;
        if !side.sends(dir) {
            for pair in &sh.recv[d] {
                while sh.ctl.read_word(pair.local + slot) != seq + 1 {
                    sh.progress();
                    std::thread::yield_now();
                }
            }
            sh.data.sync();
            for &(addr, _) in self.msgs.get(side, dir) {
                sh.data.detach(addr);
            }
        } else {
            while sh.sending(d, seq) {
                sh.progress();
                std::thread::yield_now();
            }
        }
        self.started[s][d] = false;
        if !self.started[0][d] && !self.started[1][d] {
            self.seq[d] = None;
            sh.release(d, seq);
        }
    }
}
