//! The CUDA backend: device memory, one stream per device, events, and kernels compiled at run
//! time by NVRTC.
//!
//! Everything here is built on [`cudarc`](https://docs.rs/cudarc) with dynamic loading (feature
//! `cuda` of this crate): the driver (`libcuda.so`) and NVRTC (`libnvrtc.so`) are opened when a
//! device is first asked for, so every build compiles the backend with no CUDA toolkit, and a
//! machine without a driver gets a [`CudaError`] saying why (never a panic): the libraries are
//! probed before cudarc is called, because cudarc panics when they are missing.
//!
//! The pieces:
//! - [`Device`]: one GPU (device = node-local rank mod device count), its primary context and
//!   the one stream all starhalo work on it goes to; kernels are compiled once per kernel set,
//!   per device, per process, to machine code for the device (`sm_XX`, which loads on any
//!   driver of the toolkit's major version; PTX only for a GPU this NVRTC does not know),
//!   and that machine code is kept on disk for the next process (`STARHALO_KERNEL_CACHE`,
//!   default `$XDG_CACHE_HOME/starhalo/kernels` or `~/.cache/starhalo/kernels`; empty turns
//!   it off);
//!   [`Device::record`]/[`Device::wait`] order streams without a device-wide
//!   synchronisation, and [`Device::synchronize`] is the one stream synchronisation before a
//!   device buffer is handed to MPI.
//! - [`Buffer`](crate::Buffer) in [`MemSpace::Cuda`](crate::MemSpace::Cuda): device memory
//!   with upload, download and fill.
//! - Star-forest kernels ([`Device::gather`], [`Device::scatter`]) over the device forms of the
//!   pack plans ([`DeviceIndices`]: a range is a plain device copy, a 3-D box or a list one
//!   kernel; unpacking a list that repeats an index uses atomics).
//! - Boundary kernels "in one" over an array of [`HaloDesc`] (the layout of
//!   `starhalo_boundary::BndInfo`): [`Device::halo_pack`] (with the per-sub-halo sparse
//!   threshold flags), [`Device::halo_unpack`], [`Device::restrict`], [`Device::prolongate`]
//!   and [`Device::physical_fill`], one launch each, CUDA blocks over sub-halos and threads over
//!   cells, x1 fastest; the flux correction's [`Device::flux_restrict`] and
//!   [`Device::flux_set`] over flux faces ([`FluxGeom`]) likewise. Floating-point kernels are
//!   compiled with `--fmad=false` and written in the host's expression order, so their
//!   results equal the host's bit for bit.
//! - Advection kernels ([`Device::advect_flux`], [`Device::advect_update`]): the face fluxes
//!   and the conservative update of the advection problem over every block in one launch each,
//!   in the host's expression order too.
//!
//! The kernel sources ([`kernels`]) and the descriptor types ([`HaloDesc`], [`ReduceOp`],
//! [`ProlongOp`], [`FieldDims`], [`RefineGeom`], [`FluxGeom`]) exist in every build, so host
//! tests check the entry points, the parameter lists the host passes and the descriptor
//! layout without a GPU.
//!
//! # Without a GPU
//!
//! `scripts/emulated-gpu` (part of `make test`) runs the GPU branches of the tests against
//! `kernels/host_driver.cpp`, a host emulation of the driver and NVRTC loaded in their place:
//! device memory is host memory, kernels are these sources built by the host's compiler,
//! and stream work runs only when the host must see it, so a missing synchronisation gives
//! wrong values; each launch also runs with its blocks in two orders, and stops the process
//! where the results differ (threads that race for one address). It checks this crate and
//! everything above it, not a GPU.
//!
//! # Running the GPU checks
//!
//! On a machine with an NVIDIA GPU, its driver, and NVRTC on `LD_LIBRARY_PATH` (the first
//! found of `libnvrtc.so`, from a CUDA 12 or 13 toolkit, and `libnvrtc.so.12`):
//!
//! ```text
//! # the unit tests of the backend (they use the GPU when one is there)
//! cargo test -p starhalo-exec --features cuda
//! # every kernel against the host implementation: prints PASS/FAIL and the largest difference
//! # per check, exits 0 when all pass, 1 on any failure or when no GPU can be used
//! cargo run --release -p starhalo-boundary --features cuda --example gpu_selftest
//! ```
//!
//! The self-test needs no CUDA toolkit to build, only to run: build it on any machine with
//! `make gpu-selftest-build` and copy `target/release/examples/gpu_selftest` to the GPU
//! machine. `make gpu-check` runs the self-test, the device-against-host tests and the GPU
//! benchmarks in one go. `STARHALO_CUDA_DEVICE=N` picks device `N`; otherwise the node-local
//! rank (from the MPI launcher's environment) mod the device count is used. Without a driver
//! the self-test prints the reason and exits 1.

// Without the feature the device items the docs link to do not exist.
#![cfg_attr(not(feature = "cuda"), allow(rustdoc::broken_intra_doc_links))]

pub mod desc;
pub mod emulate;
mod error;
pub mod kernels;

#[cfg(feature = "cuda")]
mod advect;
#[cfg(feature = "cuda")]
mod cache;
#[cfg(feature = "cuda")]
pub(crate) mod dbuf;
#[cfg(feature = "cuda")]
mod device;
#[cfg(feature = "cuda")]
mod ffi;
#[cfg(feature = "cuda")]
pub(crate) use ffi::DeviceAlloc;
#[cfg(feature = "cuda")]
pub(crate) mod ops;
#[cfg(feature = "cuda")]
mod staging;

pub use desc::{
    FieldDims, FluxGeom, HaloDesc, ProlongOp, ReduceOp, RefineGeom, FLAG_ALLOCATED, FLAG_COARSE,
    FLAG_MIRROR0, FLAG_NORMAL0,
};
pub use error::CudaError;

#[cfg(feature = "cuda")]
pub use advect::{criteria_codes, AdvectGeom, MeasureArrays, MeasureKind, SlopeLimiter};
#[cfg(feature = "cuda")]
pub use device::{local_rank_from_env, Device, Event};
#[cfg(feature = "cuda")]
pub use ops::{DeviceHalos, DeviceIndices, IndexList};
#[cfg(feature = "cuda")]
pub use staging::Staging;

/// Whether this build has the CUDA backend (feature `cuda`).
pub const BUILT: bool = cfg!(feature = "cuda");
