//! Why a CUDA request failed.

/// A CUDA request that failed, with the reason in words.
///
/// The first four variants say the backend is not usable on this build or machine
/// ([`CudaError::is_unavailable`]); the others are failures of a working backend.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum CudaError {
    /// Built without the `cuda` feature.
    #[error("this build has no CUDA backend (build starhalo-exec with the `cuda` feature)")]
    NotBuilt,
    /// No CUDA driver library could be loaded.
    #[error(
        "no CUDA driver library could be loaded (tried {tried}): this machine has no NVIDIA \
         driver, or it is not on the loader's path (LD_LIBRARY_PATH)"
    )]
    NoDriver {
        /// The library names tried.
        tried: String,
    },
    /// The driver loaded but reports no usable device.
    #[error("the CUDA driver reports no usable device: {why}")]
    NoDevice {
        /// What the driver said.
        why: String,
    },
    /// The run-time compiler library (NVRTC) could not be loaded.
    #[error(
        "the CUDA run-time compiler NVRTC could not be loaded (tried {tried}): install the CUDA \
         toolkit's NVRTC library (libnvrtc) and put it on LD_LIBRARY_PATH"
    )]
    NoNvrtc {
        /// The library names tried.
        tried: String,
    },
    /// A driver call failed.
    #[error("CUDA driver call `{call}` failed: {why}")]
    Driver {
        /// The operation.
        call: &'static str,
        /// The driver's error.
        why: String,
    },
    /// NVRTC rejected a kernel source.
    #[error("NVRTC could not compile the `{kernels}` kernels ({why}); compiler log:\n{log}")]
    Compile {
        /// Which kernel set.
        kernels: &'static str,
        /// The compiler's status.
        why: String,
        /// The compiler's log.
        log: String,
    },
    /// A buffer whose bytes no allocation can hold.
    #[error("a device buffer of {len} values does not fit in memory")]
    TooLarge {
        /// The values asked for.
        len: usize,
    },
    /// Arguments that do not fit the kernel or the buffers (a caller bug or bad descriptors).
    #[error("invalid CUDA request: {0}")]
    Invalid(String),
}

impl CudaError {
    /// True when the backend is absent (not built, no driver, no device, no NVRTC), as opposed
    /// to a failure of a working backend.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            CudaError::NotBuilt
                | CudaError::NoDriver { .. }
                | CudaError::NoDevice { .. }
                | CudaError::NoNvrtc { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_say_why_and_what_to_do() {
        let e = CudaError::NoDriver {
            tried: "libcuda.so, libcuda.so.1".into(),
        };
        assert!(e.is_unavailable());
        let s = e.to_string();
        assert!(s.contains("libcuda.so.1") && s.contains("driver"), "{s}");
        assert!(CudaError::NotBuilt.to_string().contains("`cuda` feature"));
        let c = CudaError::Compile {
            kernels: "halo",
            why: "NVRTC_ERROR_COMPILATION".into(),
            log: "line 3: error: expected a \";\"".into(),
        };
        assert!(!c.is_unavailable());
        assert!(c.to_string().contains("line 3"));
    }
}
