//! Errors of the star forest.

use crate::unit::Op;

/// What can go wrong building or using a star forest.
///
/// Graph errors are agreed on collectively: when any rank finds one, every rank's `build`
/// returns an error (the finding rank its own, the others [`SfError::PeerInvalid`]).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum SfError {
    /// A leaf names a root rank outside the communicator.
    #[error("leaf {leaf} names root rank {rank}, but the communicator has {size} ranks")]
    RankOutOfRange { leaf: usize, rank: i64, size: usize },
    /// A leaf names a root offset at or beyond its owner's `nroots`.
    #[error("rank {leaf_rank} has a leaf on root ({rank}, {offset}), but rank {rank} has only {nroots} roots")]
    OffsetOutOfRange {
        leaf_rank: i32,
        rank: i32,
        offset: u64,
        nroots: usize,
    },
    /// The same leaf index appears twice.
    #[error("leaf index {0} is given twice")]
    DuplicateLeaf(usize),
    /// An in-place move on a forest whose remote indices are not contiguous.
    #[error("the forest's remote indices are not contiguous, so MPI cannot move them in place")]
    NotInPlace,
    /// Another rank found its part of the graph, or its argument to a collective, invalid.
    #[error(
        "rank {0} reported invalid input (an invalid graph, or a bad argument to a collective)"
    )]
    PeerInvalid(i32),
    /// A data slice is shorter than the graph needs.
    #[error("{what} holds {got} units but the graph needs {need}")]
    BufferTooShort {
        what: &'static str,
        got: usize,
        need: usize,
    },
    /// An operation whose buffer check failed on this rank did not start here, though its
    /// peers may have sent for it: a later operation could take those messages for its own,
    /// so the forest refuses every operation after that.
    #[error("an earlier operation on this forest failed its checks on this rank, out of step with the other ranks, so the forest takes no more operations (treat that first error as fatal)")]
    OutOfStep,
    /// A node map of another number of ranks than the communicator has.
    #[error("the node map places {ranks} ranks, but the communicator has {size}")]
    NodeMapSize { ranks: usize, size: usize },
    /// A graph's `ilocal` and `iremote` differ in length.
    #[error("ilocal lists {ilocal} leaves but iremote lists {iremote}")]
    IlocalLength { ilocal: usize, iremote: usize },
    /// The unit type has no such reduction (e.g. a bitwise op on floats).
    #[error("operation `{op}` is not defined for unit type {unit}")]
    UnsupportedOp { op: Op, unit: &'static str },
    /// A one-sided (`rma`) forest whose signal ring slot for the next operation still holds
    /// one in flight on this rank (an error on this rank only: end operations sooner).
    #[error("an rma forest keeps operations in flight at most {0} apart in begin order; one begun {0} operations ago has not ended")]
    TooManyInFlight(u64),
    /// An inverse asked of a forest with a root that has more than one leaf.
    #[error("root {root} has {degree} leaves, so the forest has no inverse (each root needs at most one leaf)")]
    NotInvertible { root: usize, degree: usize },
    /// An index given to the graph algebra outside the space it indexes.
    #[error("{what} index {index} is out of range (the space has {len})")]
    IndexOutOfRange {
        what: &'static str,
        index: usize,
        len: usize,
    },
    /// A collective call given different arguments on different ranks.
    #[error("ranks gave different {0}")]
    Disagree(&'static str),
    /// An option value that names nothing.
    #[error("unknown {what} `{got}` (expected one of: {expected})")]
    UnknownName {
        what: &'static str,
        got: String,
        expected: &'static str,
    },
    /// A PE number outside the heap's (or team's) PEs.
    #[error("PE {pe} is out of range (there are {npes} PEs)")]
    PeOutOfRange { pe: usize, npes: usize },
    /// A symmetric allocation larger than any free block of the heap.
    #[error("the symmetric heap has no free block of {bytes} bytes (the largest is {largest}); build the Shmem with a larger heap")]
    HeapFull { bytes: usize, largest: usize },
    /// A put-with-signal whose data and signal objects belong to different heaps.
    #[error("the data and signal objects belong to different symmetric heaps")]
    OtherHeap,
    /// A strided put or get with a stride of 0.
    #[error("strided puts and gets need strides of at least 1")]
    ZeroStride,
    /// A team triplet that names PEs outside the heap.
    #[error("the team of {size} PEs from PE {start} with stride 2^{log_stride} does not fit in {npes} PEs")]
    BadTeam {
        start: usize,
        log_stride: u32,
        size: usize,
        npes: usize,
    },
    /// A team asked for by a PE that is not in it.
    #[error("PE {pe} is not a member of the team it asked for")]
    NotInTeam { pe: usize },
    /// Something the layer needs that this MPI library, or this type, does not give.
    #[error("not supported: {0}")]
    Unsupported(&'static str),
}
