//! starhalo-boundary: boundary exchange for mesh blocks.
//!
//! Read top to bottom; the first six modules are MPI-free foundations:
//!
//! - [`channel`]: one channel per (sender block, receiver block, variable, sender element),
//!   built from the mesh's neighbour records;
//! - [`tags`]: dense MPI tags per peer rank, computed identically on both ends;
//! - [`comm_buffer`]: the five-state buffer of one channel, with the transport behind a trait;
//! - [`pool`] (from starhalo-sf): storage pools keyed by size, with owning and weak handles;
//!   every message buffer of an exchange comes from one;
//! - [`bnd_info`]: the index boxes of each channel, `#[repr(C)]` descriptors, and
//!   pack-in-one / unpack-in-one over all sub-halos;
//! - [`prolong_restrict`]: restriction and prolongation operators for cell-centred data;
//! - [`storage`]: the blocks' field data ([`BlockData`]), and [`bounds`]:
//!   physical boundary conditions;
//! - [`exchange`]: the MPI ghost exchange ([`Exchange`]), per channel or coalesced into one
//!   message per peer rank, with fields on the host or (through [`device_pack`] and
//!   [`device_flux`]) on a CUDA device; [`error`]: what its operations return;
//! - [`flux_correction`]: face-flux storage and the fine→coarse flux correction;
//! - [`tasks`]: the whole ghost fill and the whole flux correction added to a task list;
//! - [`remesh`]: block data moved, prolongated and restricted onto a remeshed mesh;
//! - [`block_set`]: the blocks an exchange runs on (the leaves, or a multigrid level);
//! - [`gmg`]: the multigrid exchange: ghost fill per level, restriction and prolongation
//!   between levels (the five `gmg_*` boundary types).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod block_set;
pub mod bnd_info;
pub mod bounds;
pub mod channel;
mod coalesce;
mod collective;
pub mod comm_buffer;
mod copy_run;
pub mod device_flux;
pub mod device_pack;
pub mod error;
pub mod exchange;
pub mod flux_correction;
pub mod gmg;
mod patience;
pub use starhalo_sf::pool;
pub mod prolong_restrict;
pub mod remesh;
mod rows;
pub mod storage;
pub mod tags;
pub mod tasks;

pub use block_set::BlockSet;
pub use bnd_info::{BlockLayout, BndCache, BndInfo, FieldLayout, IndexBox, Space};
pub use channel::{Channel, ChannelKey, RankChannels};
pub use comm_buffer::{
    same_rank_pair, Arrival, BufferState, ChannelState, CommBuffer, Role, SameRank, Transport,
};
pub use error::BoundaryError;
pub use exchange::{
    BoundaryType, Exchange, ExchangeOptions, FieldSpace, HostFields, Ordering, TaskStatus, Traffic,
};
pub use flux_correction::{FluxCorrection, FluxData, FluxFace, FluxSpace};
pub use gmg::{GmgData, GmgExchange, LevelBlocks};
pub use pool::{BufferPool, Owned, WeakHandle};
pub use prolong_restrict::{prolongate, restrict, Prolongation, Resampler};
pub use remesh::redistribute;
pub use storage::BlockData;
pub use tags::TagMap;
