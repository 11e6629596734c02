//! Memory spaces.

use std::fmt;
use std::str::FromStr;

/// Where a buffer's bytes live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MemSpace {
    /// Ordinary host memory.
    #[default]
    Host,
    /// NVIDIA device memory (the CUDA backend).
    Cuda,
}

/// A memory space that could not be named or used.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum SpaceError {
    /// The name is not a memory space.
    #[error("unknown memory space `{0}` (expected `host` or `cuda`)")]
    Unknown(String),
    /// The space exists but this build or machine cannot provide it.
    #[error("memory space `{space}` is not available: {why}")]
    Unavailable { space: MemSpace, why: String },
    /// A host slice of the wrong length for a buffer.
    #[error("a buffer of {expected} values was given {got}")]
    Length { expected: usize, got: usize },
    /// A buffer larger than this process can hold.
    #[error("a buffer of {0} values does not fit in memory")]
    TooLarge(u128),
    /// A range outside a buffer.
    #[error("out of range: {0}")]
    Range(String),
    /// A device operation failed (the message says which call and why).
    #[error("device error: {0}")]
    Device(String),
}

impl fmt::Display for MemSpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MemSpace::Host => "host",
            MemSpace::Cuda => "cuda",
        })
    }
}

impl FromStr for MemSpace {
    type Err = SpaceError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "host" => Ok(MemSpace::Host),
            "cuda" => Ok(MemSpace::Cuda),
            other => Err(SpaceError::Unknown(other.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_is_named() {
        for s in [MemSpace::Host, MemSpace::Cuda] {
            assert_eq!(s.to_string().parse::<MemSpace>(), Ok(s));
        }
        let err = "gpu".parse::<MemSpace>().unwrap_err();
        assert!(err.to_string().contains("`gpu`"));
    }
}
