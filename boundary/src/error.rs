//! The errors of the boundary crate.

use thiserror::Error;

/// Everything that can go wrong while setting up or running a boundary exchange.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum BoundaryError {
    /// A dense tag would not fit under the communicator's tag upper bound.
    #[error(
        "rank {rank} needs tag {tag} for peer rank {peer} ({channels} channels), \
         but the tag upper bound is {tag_ub}"
    )]
    TagOverflow {
        /// The rank computing the tags.
        rank: usize,
        /// The peer rank whose channel list is too long.
        peer: usize,
        /// The largest tag needed.
        tag: usize,
        /// Number of channel pairs between the two ranks in that direction.
        channels: usize,
        /// The largest tag allowed (`MPI_TAG_UB`).
        tag_ub: usize,
    },
    /// A buffer operation was called in a state where it is not allowed.
    #[error("illegal buffer operation `{op}` in state {state}")]
    IllegalTransition {
        /// The operation (`send`, `try_receive`, ...).
        op: &'static str,
        /// The state the buffer was in.
        state: &'static str,
    },
    /// Sizes that must agree do not.
    #[error("{what}: expected {expected}, got {got}")]
    Size {
        /// What was measured.
        what: &'static str,
        /// The size required.
        expected: usize,
        /// The size found.
        got: usize,
    },
    /// A channel or block geometry that the operation does not support.
    #[error("unsupported geometry: {0}")]
    Geometry(String),
    /// A message could not be posted (a bug in the exchange's bookkeeping, or a peer that
    /// sent more than the channel holds).
    #[error(transparent)]
    Messaging(#[from] starhalo_sf::p2p::P2pError),
    /// An argument that does not fit what it is given to (data of another form than the
    /// exchange was built for, a variable it does not have, a mesh for other ranks).
    #[error("{0}")]
    Invalid(String),
    /// Two ranks disagree about what a channel or message carries.
    #[error("ranks disagree: {0}")]
    Mismatch(String),
    /// A boundary type this exchange does not serve.
    #[error("boundary type `{0}` is not served by this exchange")]
    Unsupported(&'static str),
    /// A multigrid level that does not exist, or has no level to move data to or from.
    #[error("multigrid level {level} (of {levels}, 0 the finest): {why}")]
    GmgLevel {
        /// The level asked for.
        level: usize,
        /// Number of levels.
        levels: usize,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A blocking call (a whole ghost fill, flux correction or multigrid round) whose
    /// messages had not all arrived when its timeout ran out: a peer is stuck or gone. The
    /// ranks cannot agree on it (the peers may never answer).
    #[error("{what}: still waiting for messages after {} s", .after.as_secs_f64())]
    Timeout {
        /// What was awaited (the call, and the channels where it knows them).
        what: String,
        /// How long it waited.
        after: std::time::Duration,
    },
    /// An error from the mesh layer.
    #[error(transparent)]
    Mesh(#[from] starhalo_mesh::MeshError),
    /// A device (GPU) operation failed; the message says which and why.
    #[error("device: {0}")]
    Device(String),
    /// Storage larger than this process can allocate.
    #[error("{what}: {bytes} bytes do not fit in memory")]
    OutOfMemory {
        /// What was being allocated.
        what: String,
        /// Its size.
        bytes: u128,
    },
}

impl BoundaryError {
    /// `Ok` when `got` is `expected`, else a [`Size`](Self::Size) error naming `what`.
    pub(crate) fn check_size(what: &'static str, expected: usize, got: usize) -> Result<(), Self> {
        if got == expected {
            Ok(())
        } else {
            Err(Self::Size {
                what,
                expected,
                got,
            })
        }
    }

    /// A [`Device`](Self::Device) error saying what the device (or its memory) reported.
    #[cfg(feature = "cuda")]
    pub(crate) fn device(e: impl std::fmt::Display) -> Self {
        Self::Device(e.to_string())
    }
}
