//! starhalo-exec: where data lives and how loops over it run.
//!
//! Two ideas carry the whole crate:
//! - a [`Buffer`] knows its [`MemSpace`]: host memory, or CUDA device memory with the
//!   [`cuda`] backend (feature `cuda`, loaded at run time: see the module for the GPU checks),
//! - a hierarchical loop ([`for_each_segment`], [`hier_for`]) runs an outer index (sub-halos, blocks,
//!   peer ranks) and an inner index (cells, units) as **one** dispatch, serially or on rayon's pool.
//!
//! ```
//! use starhalo_exec::{for_each_segment, Policy};
//! // Two sub-halos of 3 and 2 cells packed in one dispatch.
//! let mut buf = vec![0.0; 5];
//! let offsets = [0, 3, 5];
//! for_each_segment(Policy::Serial, &mut buf, &offsets, |halo, cells| {
//!     for (i, c) in cells.iter_mut().enumerate() {
//!         *c = (10 * halo + i) as f64;
//!     }
//! });
//! assert_eq!(buf, [0.0, 1.0, 2.0, 10.0, 11.0]);
//! ```

#![deny(unsafe_code)]

pub mod alloc_count;
mod buffer;
pub mod cuda;
mod element;
mod fnv;
mod hier;
mod space;
pub mod tasks;

pub use buffer::Buffer;
pub use element::{Element, ScalarKind};
pub use fnv::Fnv;
pub use hier::{for_each_segment, hier_for, Policy};
pub use space::{MemSpace, SpaceError};
pub use tasks::{TaskError, TaskId, TaskList, TaskRegion, TaskStatus};
