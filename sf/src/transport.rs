//! Transports: how packed remote data moves between ranks. Packing, local scatter and the
//! order of reductions live in the forest; a transport only moves bytes, so each
//! implementation (persistent two-sided, neighbourhood collectives here; one-sided put +
//! signal in `rma`) plugs in here and is picked per forest by [`SfType`].

use crate::error::SfError;
use crate::raw::{GraphComm, NeighborAlltoall, Persistent, RawComm};
use std::str::FromStr;

/// Which end of the edges a rank acts for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Root = 0,
    Leaf = 1,
}

/// Which way data flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dir {
    /// Root to leaf.
    Bcast = 0,
    /// Leaf to root.
    Reduce = 1,
}

impl Side {
    /// Whether this side sends in `dir`.
    pub(crate) fn sends(self, dir: Dir) -> bool {
        self == dir.sender()
    }
}

impl Dir {
    /// The side that sends in this direction (the other receives).
    pub(crate) fn sender(self) -> Side {
        match self {
            Dir::Bcast => Side::Root,
            Dir::Reduce => Side::Leaf,
        }
    }

    /// The side that receives in this direction.
    pub(crate) fn receiver(self) -> Side {
        match self {
            Dir::Bcast => Side::Leaf,
            Dir::Reduce => Side::Root,
        }
    }
}

/// Each peer's bound message (address, bytes) per side and direction, indexed
/// `[side][dir][peer]`: what the transports that start whole directions at once hold until
/// then.
pub(crate) struct Bound([[Vec<(*const u8, usize)>; 2]; 2]);

impl Bound {
    /// Unbound messages for `leaf_ranks` root-side peers and `root_ranks` leaf-side ones.
    pub(crate) fn new(leaf_ranks: usize, root_ranks: usize) -> Self {
        let unbound = |n| vec![(std::ptr::null(), 0); n];
        Self([
            [unbound(leaf_ranks), unbound(leaf_ranks)],
            [unbound(root_ranks), unbound(root_ranks)],
        ])
    }

    pub(crate) fn set(&mut self, side: Side, dir: Dir, i: usize, addr: *const u8, bytes: usize) {
        self.0[side as usize][dir as usize][i] = (addr, bytes);
    }

    pub(crate) fn get(&self, side: Side, dir: Dir) -> &[(*const u8, usize)] {
        &self.0[side as usize][dir as usize]
    }
}

/// The implementation of a star forest's remote traffic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SfType {
    /// Persistent two-sided sends and receives, one per peer rank (PETSc's "basic").
    #[default]
    Basic,
    /// One non-blocking neighbourhood all-to-all per operation and direction over a
    /// distributed-graph communicator of the peer ranks (PETSc's "neighbor"). Every rank of
    /// the forest's communicator takes part in each operation, peers or not.
    Neighbor,
    /// One-sided: each receiver posts where its message goes, and the sender puts the bytes
    /// there and raises a signal (put + signal over MPI-3 RMA windows, in the manner of
    /// OpenSHMEM). Operations in flight on a rank may be at most 64 apart in begin order
    /// (the next is refused with [`SfError::TooManyInFlight`] on that rank: on every rank
    /// alike where all begin and end operations in the same order, else a fatal error, as
    /// its peers go on with an operation it refused). A send whose
    /// receiver had not yet begun moves only inside a later start or wait of this forest's
    /// operations, so a rank must not block in another MPI call (a barrier, another forest)
    /// between begin and end while others wait for its data.
    Rma,
}

impl SfType {
    /// The name used in options.
    pub fn name(self) -> &'static str {
        match self {
            SfType::Basic => "basic",
            SfType::Neighbor => "neighbor",
            SfType::Rma => "rma",
        }
    }
}

impl FromStr for SfType {
    type Err = SfError;
    fn from_str(s: &str) -> Result<Self, SfError> {
        match s {
            "basic" => Ok(SfType::Basic),
            "neighbor" => Ok(SfType::Neighbor),
            "rma" => Ok(SfType::Rma),
            _ => Err(SfError::UnknownName {
                what: "star-forest type",
                got: s.to_string(),
                expected: "basic, neighbor, rma",
            }),
        }
    }
}

/// Moves one in-flight operation's remote bytes. Each peer of a (side, direction) has one
/// message; its memory is bound before the start and must stay valid until the wait.
pub(crate) trait Transport {
    /// Binds peer `i`'s message of `(side, dir)` to `bytes` bytes at `addr`.
    ///
    /// # Safety
    /// The memory must stay valid (and unaliased, for receives) until [`Transport::wait`].
    unsafe fn bind(&mut self, side: Side, dir: Dir, i: usize, addr: *const u8, bytes: usize);
    /// Starts every message of `(side, dir)`.
    fn start(&mut self, side: Side, dir: Dir);
    /// Waits for every message of `(side, dir)`.
    fn wait(&mut self, side: Side, dir: Dir);
}

/// Persistent requests, created once per bound address and restarted on every operation.
pub(crate) struct Basic {
    reqs: [[Persistent; 2]; 2],
}

impl Basic {
    /// Requests to `leaf_ranks` (for the root side) and `root_ranks` (for the leaf side), with
    /// tags `tags[dir]`.
    pub(crate) fn new(
        comm: RawComm,
        leaf_ranks: &[i32],
        root_ranks: &[i32],
        tags: [i32; 2],
    ) -> Self {
        let make = |side: Side, dir: Dir| {
            let peers = if side == Side::Root {
                leaf_ranks
            } else {
                root_ranks
            };
            Persistent::new(comm, peers, tags[dir as usize], side.sends(dir))
        };
        Basic {
            reqs: [
                [make(Side::Root, Dir::Bcast), make(Side::Root, Dir::Reduce)],
                [make(Side::Leaf, Dir::Bcast), make(Side::Leaf, Dir::Reduce)],
            ],
        }
    }
}

impl Transport for Basic {
    unsafe fn bind(&mut self, side: Side, dir: Dir, i: usize, addr: *const u8, bytes: usize) {
        // SAFETY: forwarded from the caller's contract.
        unsafe { self.reqs[side as usize][dir as usize].bind(i, addr, bytes) }
    }

    fn start(&mut self, side: Side, dir: Dir) {
        self.reqs[side as usize][dir as usize].start_all();
    }

    fn wait(&mut self, side: Side, dir: Dir) {
        self.reqs[side as usize][dir as usize].wait_all();
    }
}

/// The distributed-graph communicators of a [`SfType::Neighbor`] forest, one per direction,
/// created once at set-up (a collective call) and shared by its links.
pub(crate) struct NeighborGraphs {
    /// Indexed by [`Dir`]: bcast sources are the root ranks, reduce sources the leaf ranks.
    graphs: [GraphComm; 2],
    /// Root to leaf again, for the replies of fetch-and-ops: those start at the operation's
    /// end, so on the bcast communicator they could pair with another rank's next bcast
    /// (collectives match in the order they start, and ends need not keep begin order).
    replies: GraphComm,
}

impl NeighborGraphs {
    /// Collective over `comm`.
    pub(crate) fn new(comm: RawComm, leaf_ranks: &[i32], root_ranks: &[i32]) -> Self {
        Self {
            graphs: [
                GraphComm::new(comm, root_ranks, leaf_ranks),
                GraphComm::new(comm, leaf_ranks, root_ranks),
            ],
            replies: GraphComm::new(comm, root_ranks, leaf_ranks),
        }
    }
}

/// A neighbourhood all-to-all per direction. Each side's messages are bound peer by peer;
/// the collective starts once both sides of the direction have started (the receiving side
/// first, in the forest's order), and one wait completes both.
pub(crate) struct Neighbor {
    graphs: [RawComm; 2],
    msgs: Bound,
    started: [[bool; 2]; 2],
    exchanges: [NeighborAlltoall; 2],
}

impl Neighbor {
    /// The transport of one link (of a fetch-and-op when `replies`); `graphs` must outlive it
    /// (the forest owns both).
    pub(crate) fn new(
        graphs: &NeighborGraphs,
        replies: bool,
        leaf_ranks: usize,
        root_ranks: usize,
    ) -> Self {
        let bcast = if replies {
            &graphs.replies
        } else {
            &graphs.graphs[0]
        };
        Self {
            graphs: [bcast.raw(), graphs.graphs[1].raw()],
            msgs: Bound::new(leaf_ranks, root_ranks),
            started: [[false; 2]; 2],
            exchanges: Default::default(),
        }
    }
}

impl Transport for Neighbor {
    unsafe fn bind(&mut self, side: Side, dir: Dir, i: usize, addr: *const u8, bytes: usize) {
        self.msgs.set(side, dir, i, addr, bytes);
    }

    fn start(&mut self, side: Side, dir: Dir) {
        let d = dir as usize;
        self.started[side as usize][d] = true;
        if self.started[0][d] && self.started[1][d] {
            let (sends, recvs) = (
                self.msgs.get(dir.sender(), dir),
                self.msgs.get(dir.receiver(), dir),
            );
            // SAFETY: every message was bound under `bind`'s contract: valid until the wait.
            unsafe { self.exchanges[d].start(self.graphs[d], sends, recvs) };
        }
    }

    fn wait(&mut self, side: Side, dir: Dir) {
        let d = dir as usize;
        if !self.started[side as usize][d] {
            return; // already completed by the other side's wait
        }
        assert!(
            self.started[0][d] && self.started[1][d],
            "a neighbourhood exchange was waited for before both sides started"
        );
        self.exchanges[d].wait();
        self.started[0][d] = false;
        self.started[1][d] = false;
    }
}
