//! The errors of the mesh crate.
//!
//! Every error that comes from user input names the Parthenon input key it concerns
//! (`parthenon/meshblock/nx1`, `parthenon/mesh/ix1_bc`, `parthenon/static_refinement0/level`),
//! so the driver can report it as bad input (exit code 2) without guessing.

use thiserror::Error;

/// Everything that can go wrong while building or changing a mesh.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum MeshError {
    /// A required key is absent.
    #[error("missing input `{key}`")]
    Missing {
        /// The Parthenon key, e.g. `parthenon/mesh/nx1`.
        key: String,
    },
    /// A key is present but its value is unusable.
    #[error("bad input `{key}` = `{value}`: {reason}")]
    Invalid {
        /// The Parthenon key, e.g. `parthenon/meshblock/nx1`.
        key: String,
        /// The offending value, as given (or as computed from the given values).
        value: String,
        /// Why it is rejected.
        reason: String,
    },
    /// A list handed to the mesh has the wrong length (flags, costs, ranks per block).
    #[error("{what}: expected {expected} entries, got {got}")]
    Length {
        /// What the list holds.
        what: &'static str,
        /// The number of blocks (or ranks) it must match.
        expected: usize,
        /// The length that was given.
        got: usize,
    },
    /// A set of leaves does not tile the domain exactly once.
    #[error("leaves do not tile the domain: {0}")]
    BadLeaves(String),
    /// A stored forest (a restart) that this configuration cannot have produced.
    #[error("the stored forest does not fit the mesh configuration: {0}")]
    ForestMismatch(String),
    /// Block costs or rank counts that no partition can use.
    #[error("bad partition input: {0}")]
    Partition(String),
    /// The mesh would grow beyond [`MeshConfig::max_blocks`](crate::MeshConfig::max_blocks).
    #[error("the mesh would have more than {limit} blocks, the most it may have")]
    TooManyBlocks {
        /// The limit.
        limit: usize,
    },
    /// A field definition that cannot be honoured.
    #[error("variable `{name}`: {reason}")]
    Field {
        /// The variable's name.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl MeshError {
    /// An [`MeshError::Invalid`] for `key`.
    pub(crate) fn invalid(
        key: impl Into<String>,
        value: impl ToString,
        reason: impl Into<String>,
    ) -> Self {
        Self::Invalid {
            key: key.into(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }

    /// The Parthenon key this error names, if it names one.
    ///
    /// ```
    /// use starhalo_mesh::MeshError;
    /// let e = MeshError::Missing { key: "parthenon/mesh/nx1".into() };
    /// assert_eq!(e.key(), Some("parthenon/mesh/nx1"));
    /// ```
    pub fn key(&self) -> Option<&str> {
        match self {
            Self::Missing { key } | Self::Invalid { key, .. } => Some(key),
            _ => None,
        }
    }
}
