//! Every `unsafe` of the CUDA backend: loading the driver and NVRTC libraries, telling
//! cudarc that this crate orders its streams itself, the plain-data marker of the
//! descriptor, device allocations, raw device addresses, and kernel launches.

#![allow(unsafe_code)]

use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DeviceRepr, LaunchConfig,
    ValidAsZeroBits,
};

use super::desc::HaloDesc;
use super::error::CudaError;
use super::kernels::MAX_ARGS;

// SAFETY: HaloDesc is #[repr(C)], made of u64 and u32 fields with no padding bytes (a test
// checks its layout against `struct sh_bnd_info`), so its bytes are a valid kernel argument
// and device value.
unsafe impl DeviceRepr for HaloDesc {}
// SAFETY: every field is an integer, for which all-zero bits are a valid value.
unsafe impl ValidAsZeroBits for HaloDesc {}

fn candidates(lib: &str) -> String {
    let mut names: Vec<String> = Vec::new();
    for n in cudarc::get_lib_name_candidates(lib) {
        if !names.contains(&n) {
            names.push(n);
        }
    }
    names.join(", ")
}

/// Ok when the CUDA driver library can be loaded, so that cudarc (which panics when it
/// cannot) may be called.
pub(crate) fn driver_present() -> Result<(), CudaError> {
    // SAFETY: loading the NVIDIA driver library runs its initialisers, which have no
    // precondition; the handle is closed again at once and cudarc reloads it by the same names.
    let present = unsafe { cudarc::driver::sys::is_culib_present() };
    if present {
        Ok(())
    } else {
        Err(CudaError::NoDriver {
            tried: candidates("cuda"),
        })
    }
}

/// Ok when the NVRTC library can be loaded.
pub(crate) fn nvrtc_present() -> Result<(), CudaError> {
    // SAFETY: as for the driver: loading libnvrtc has no precondition.
    let present = unsafe { cudarc::nvrtc::sys::is_culib_present() };
    if present {
        Ok(())
    } else {
        Err(CudaError::NoNvrtc {
            tried: candidates("nvrtc"),
        })
    }
}

/// The (major, minor) version of the NVRTC library that is loaded.
pub(crate) fn nvrtc_version() -> Result<(i32, i32), CudaError> {
    nvrtc_present()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the library is present (checked above); both pointers are to live integers.
    unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| CudaError::Invalid(format!("nvrtcVersion: {e:?}")))?;
    Ok((major, minor))
}

/// Compiles `src` with NVRTC into a CUBIN for the real architecture `options` names
/// (`--gpu-architecture=sm_XX`). Machine code loads on any driver of the toolkit's major
/// version, whereas PTX carries the NVRTC release's ISA version, which an older driver
/// rejects. On failure: NVRTC's status and its log.
pub(crate) fn compile_cubin(
    src: &str,
    name: &str,
    options: &[String],
) -> Result<Vec<u8>, (cudarc::nvrtc::sys::nvrtcResult, String)> {
    use cudarc::nvrtc::{result, sys};
    use std::ffi::CString;
    let bad = |what: &str| {
        (
            sys::nvrtcResult::NVRTC_ERROR_INVALID_INPUT,
            format!("{what} holds a NUL byte"),
        )
    };
    let src = CString::new(src).map_err(|_| bad("kernel source"))?;
    let name = CString::new(name).map_err(|_| bad("program name"))?;
    if let Some(o) = options.iter().find(|o| o.contains('\0')) {
        return Err(bad(o));
    }
    let prog = result::create_program(&src, Some(&name)).map_err(|e| (e.0, String::new()))?;
    // SAFETY: `prog` comes from create_program above, is used only here and destroyed once at
    // the end; `src` and `name` outlive it; the CUBIN buffer holds the size NVRTC reported.
    unsafe {
        let out = match result::compile_program(prog, options) {
            Err(e) => {
                let log = result::get_program_log(prog).unwrap_or_default();
                let log: Vec<u8> = log
                    .iter()
                    .map(|&c| c as u8)
                    .take_while(|&c| c != 0)
                    .collect();
                Err((e.0, String::from_utf8_lossy(&log).into_owned()))
            }
            Ok(()) => {
                let mut n = 0usize;
                let got = sys::nvrtcGetCUBINSize(prog, &mut n)
                    .result()
                    .and_then(|()| {
                        let mut bin = vec![0u8; n];
                        sys::nvrtcGetCUBIN(prog, bin.as_mut_ptr().cast())
                            .result()
                            .map(|()| bin)
                    });
                got.map_err(|e| (e.0, String::new()))
            }
        };
        let _ = result::destroy_program(prog);
        out
    }
}

/// Turns off cudarc's per-buffer event tracking for `ctx`: each [`super::Device`] issues all
/// its work on its one stream, and orders other streams with explicit events.
pub(crate) fn manual_stream_ordering(ctx: &CudaContext) {
    // SAFETY: called right after the context is created, before any buffer exists on it; all
    // buffers of this context are allocated, used and freed on the device's single stream,
    // so stream order alone keeps every use before the free and every write before a read.
    unsafe { ctx.disable_event_tracking() }
}

/// Where a device buffer's memory comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DeviceAlloc {
    /// The device's stream-ordered pool (`cuMemAllocAsync` where the device has one): cheap
    /// to allocate and to free in stream order.
    Pool,
    /// `cuMemAlloc`, for memory a CUDA-aware MPI reads and writes: it maps buffers into the
    /// other processes of a node by CUDA IPC, which pool memory does not support. Freeing it
    /// waits for the device's stream.
    Mpi,
}

/// Device memory for `len` values (one when `len` is 0: the driver refuses zero bytes),
/// freed when dropped by the call matching how it was allocated.
pub(crate) struct DeviceMemory<T> {
    slice: ManuallyDrop<CudaSlice<T>>,
    alloc: DeviceAlloc,
}

impl<T> DeviceMemory<T> {
    pub(crate) fn alloc(&self) -> DeviceAlloc {
        self.alloc
    }
}

impl<T: DeviceRepr> DeviceMemory<T> {
    /// Uninitialised memory, to be overwritten before it is read.
    pub(crate) fn uninit(
        stream: &Arc<CudaStream>,
        len: usize,
        alloc: DeviceAlloc,
    ) -> Result<Self, cudarc::driver::DriverError> {
        let n = len.max(1);
        // The byte count must not wrap (cudarc multiplies unchecked): a small allocation
        // behind a long buffer would let bounds-checked writes land in other memory.
        let Some(bytes) = crate::buffer::byte_len::<T>(len) else {
            return Err(cudarc::driver::DriverError(
                cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY,
            ));
        };
        let slice = match alloc {
            // SAFETY: `n` elements are `bytes`, checked above not to wrap; callers write every
            // element of their `len` (copy from the host or from another buffer, or zero it)
            // on the same stream before any read is issued, and never read the spare one.
            DeviceAlloc::Pool => unsafe { stream.alloc(n) }?,
            DeviceAlloc::Mpi => {
                stream.context().bind_to_thread()?;
                // SAFETY: `bytes` holds the `n` elements (checked above); the context is
                // current on this thread; `Drop` frees the pointer
                // with cuMemFree, never through the slice's own (stream-ordered) drop, and
                // callers overwrite the values before reading them, as above.
                unsafe {
                    let ptr = cudarc::driver::result::malloc_sync(bytes)?;
                    stream.upgrade_device_ptr(ptr, n)
                }
            }
        };
        Ok(Self {
            slice: ManuallyDrop::new(slice),
            alloc,
        })
    }
}

impl<T> Deref for DeviceMemory<T> {
    type Target = CudaSlice<T>;
    fn deref(&self) -> &CudaSlice<T> {
        &self.slice
    }
}

impl<T> DerefMut for DeviceMemory<T> {
    fn deref_mut(&mut self) -> &mut CudaSlice<T> {
        &mut self.slice
    }
}

impl<T> Drop for DeviceMemory<T> {
    fn drop(&mut self) {
        // SAFETY: the slice is taken once, here, and `self` is not used after.
        let slice = unsafe { ManuallyDrop::take(&mut self.slice) };
        if self.alloc == DeviceAlloc::Pool {
            // cudarc's drop frees without making the context current, and a thread that
            // has not called the driver yet has none: the free would fail, and the failure
            // would be returned by the next call, on any thread.
            let ctx = slice.stream().context().clone();
            ctx.record_err(ctx.bind_to_thread());
            return drop(slice);
        }
        let stream = slice.stream().clone();
        let ptr = slice.leak();
        // A failure here cannot be returned; it leaks the memory, as cudarc's own drop does.
        let _ = stream.synchronize().and_then(|()| {
            stream.context().bind_to_thread()?;
            // SAFETY: `ptr` came from cuMemAlloc in `uninit` and is freed only here, after
            // the stream (the only one that uses it) has finished all work on it.
            unsafe { cudarc::driver::result::free_sync(ptr) }
        });
    }
}

/// The raw device address of `s`, to pass to a kernel.
pub(crate) fn address<T>(s: &CudaSlice<T>, stream: &CudaStream) -> u64 {
    let (ptr, _no_sync) = s.device_ptr(stream);
    ptr
}

/// A kernel's arguments, on the stack: building them allocates nothing.
pub(crate) type Args = smallvec::SmallVec<[Arg; MAX_ARGS]>;

/// One kernel argument as the host passes it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Arg {
    Ptr(u64),
    U64(u64),
    U32(u32),
    I32(i32),
    F64(f64),
}

impl Arg {
    pub(crate) fn kind(&self) -> super::kernels::ArgKind {
        use super::kernels::ArgKind as K;
        match self {
            Arg::Ptr(_) => K::Ptr,
            Arg::U64(_) => K::U64,
            Arg::U32(_) => K::U32,
            Arg::I32(_) => K::I32,
            Arg::F64(_) => K::F64,
        }
    }
}

/// Launches `f` on `stream` with `args`, whose kinds the caller has checked against the
/// kernel's declared parameters, and which are at most [`MAX_ARGS`]. The values and the parameter pointers live on the stack (the
/// driver copies them at launch), so a launch allocates nothing.
pub(crate) fn launch(
    stream: &CudaStream,
    f: &CudaFunction,
    cfg: LaunchConfig,
    args: &[Arg],
) -> Result<(), cudarc::driver::DriverError> {
    use std::ffi::c_void;
    let n = args.len();
    // `Device::launch` refuses longer lists.
    debug_assert!(n <= MAX_ARGS);
    // One aligned 8-byte slot per value; a 4-byte parameter takes the slot's first bytes.
    let mut values = [0u64; MAX_ARGS];
    for (v, a) in values.iter_mut().zip(args) {
        let mut b = [0u8; 8];
        match *a {
            Arg::Ptr(x) | Arg::U64(x) => b = x.to_ne_bytes(),
            Arg::F64(x) => b = x.to_ne_bytes(),
            Arg::U32(x) => b[..4].copy_from_slice(&x.to_ne_bytes()),
            Arg::I32(x) => b[..4].copy_from_slice(&x.to_ne_bytes()),
        }
        *v = u64::from_ne_bytes(b);
    }
    let mut params = [std::ptr::null_mut::<c_void>(); MAX_ARGS];
    for (p, v) in params.iter_mut().zip(values.iter_mut()) {
        *p = std::ptr::from_mut(v).cast();
    }
    stream.context().bind_to_thread()?;
    // SAFETY: the argument kinds equal the kernel's parameter list parsed from its source
    // (checked by the caller, `Device::launch`), and each of the first `n` parameter pointers
    // points at an 8-byte-aligned slot holding its value in the parameter's size, alive until
    // the call returns (the driver copies them); every pointer argument is the address of a
    // live buffer of this device whose extent the caller checked against the index ranges in
    // the other arguments (descriptors are validated on the host before upload); the buffers
    // outlive the kernel because frees are ordered after it on this same stream.
    unsafe {
        cudarc::driver::result::launch_kernel(
            f.cu_function(),
            cfg.grid_dim,
            cfg.block_dim,
            cfg.shared_mem_bytes,
            stream.cu_stream(),
            &mut params[..n],
        )
    }
}
