//! Errors of the output writers and the restart reader.

use std::path::PathBuf;

/// Why an output could not be written or a restart file read.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// A key of an output block has a bad value (bad input: the driver exits with code 2).
    #[error("{key}: `{value}`: {reason}")]
    Invalid {
        /// The deck key, e.g. `parthenon/output1/file_type`.
        key: String,
        /// The value found.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The snapshot handed to a writer is inconsistent (a driver bug, not user input).
    #[error("inconsistent snapshot: {0}")]
    Snapshot(String),
    /// Another rank failed (its own error is reported there); this rank stops too.
    #[error("output abandoned: {0}")]
    Peer(String),
    /// The HDF5 library refused an operation.
    #[error("{path}: HDF5: {message}")]
    Hdf5 {
        /// The file.
        path: PathBuf,
        /// The library's message.
        message: String,
    },
    /// A file could not be read or written.
    #[error("{path}: {cause}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause, shown in the message (not chained as a source, which would show it
        /// twice).
        cause: std::io::Error,
    },
    /// Something other than a regular file (a directory, a fifo) where a file is to be read:
    /// bad input, not a failure to read.
    #[error("{path}: not a regular file")]
    NotAFile {
        /// The path.
        path: PathBuf,
    },
    /// A restart file lacks something the reader needs or holds something inconsistent.
    #[error("{path}: not a usable restart file: {reason}")]
    BadRestart {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// An output buffer larger than this process can allocate (a run-time failure: the mesh
    /// fits, but gathering it for a writer does not).
    #[error("{what}: {bytes} bytes do not fit in memory")]
    OutOfMemory {
        /// What was being allocated.
        what: String,
        /// Its size.
        bytes: u128,
    },
    /// Rendering a PNG failed.
    #[error("{path}: PNG: {message}")]
    Png {
        /// The file.
        path: PathBuf,
        /// The renderer's message.
        message: String,
    },
}

impl OutputError {
    /// A vector of `len` values, or [`OutputError::OutOfMemory`] naming `what` where it does
    /// not fit.
    pub(crate) fn try_vec<T>(len: usize, what: impl FnOnce() -> String) -> Result<Vec<T>, Self> {
        let mut v = Vec::new();
        starhalo_exec::alloc_count::try_reserve_exact(&mut v, len).map_err(|_| {
            Self::OutOfMemory {
                what: what(),
                bytes: len as u128 * size_of::<T>() as u128,
            }
        })?;
        Ok(v)
    }

    pub(crate) fn hdf5(path: &std::path::Path, e: hdf5::Error) -> Self {
        Self::Hdf5 {
            path: path.to_path_buf(),
            message: e.to_string(),
        }
    }
}
