//! starhalo-mesh: the block-structured mesh that boundary exchange runs on.
//!
//! - [`loc`]: logical locations and Morton order;
//! - [`element`]: the 27 geometric elements of a block;
//! - [`config`]: mesh configuration from Parthenon's keys, validated;
//! - [`field`]: variable metadata, index shapes, coarse buffers, mesh-data partitions;
//! - [`forest`]: the root grid of trees and its leaves;
//! - [`mesh`]: [`Mesh`], which holds all of the above for a running simulation;
//! - [`multigrid`]: the geometric multigrid levels below the leaf grid;
//! - [`neighbor`]: neighbour records across levels and periodic boundaries, with ownership;
//! - [`partition`]: cost-weighted Morton split over ranks, gid/lid, move plans;
//! - [`refine`]: refinement flags, static regions, 2:1 balance, remesh maps;
//!
//! The crate knows nothing of MPI: ranks are plain numbers, and every rank holds the whole
//! tree, as in Parthenon.
//!
//! ```
//! use starhalo_mesh::{Element, Mesh, MeshConfig, RefinementFlag, RefinementKind};
//! use std::collections::BTreeMap;
//! let deck: BTreeMap<String, String> = [
//!     ("parthenon/mesh/nx1", "32"), ("parthenon/mesh/nx2", "32"),
//!     ("parthenon/meshblock/nx1", "8"), ("parthenon/meshblock/nx2", "8"),
//!     ("parthenon/mesh/ix1_bc", "periodic"), ("parthenon/mesh/ox1_bc", "periodic"),
//!     ("parthenon/mesh/refinement", "adaptive"), ("parthenon/mesh/numlevel", "3"),
//! ]
//! .into_iter()
//! .map(|(k, v)| (k.to_string(), v.to_string()))
//! .collect();
//! let mut mesh = Mesh::new(MeshConfig::from_map(&deck).unwrap(), 4).unwrap();
//! let mut flags = vec![RefinementFlag::Same; mesh.forest().len()];
//! flags[0] = RefinementFlag::Refine;
//! let outcome = mesh.remesh(&flags, None).unwrap();
//! assert_eq!(outcome.map.origin.len(), mesh.forest().len());
//! // Block 0 (a child of the refined corner) has a coarser neighbour across the periodic x1
//! // boundary, seen from that neighbour through the opposite face.
//! let nb = mesh.neighbors().unwrap();
//! let across = nb[0].neighbors.iter()
//!     .find(|n| n.element == Element::from_offset([-1, 0, 0]).unwrap())
//!     .unwrap();
//! assert_eq!((across.level_diff, across.periodic_shift), (-1, [-1, 0, 0]));
//! assert_eq!(across.neighbor_element.offset(), [1, 0, 0]);
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]
// Geometry code indexes several per-direction arrays with one direction index.
#![allow(clippy::needless_range_loop)]

pub mod config;
pub mod element;
pub mod error;
pub mod field;
pub mod forest;
pub mod loc;
pub mod mesh;
pub mod multigrid;
pub mod neighbor;
pub mod partition;
pub mod refine;

pub use config::{BoundaryCondition, MeshConfig, RefinementKind, StaticRegion};
pub use element::{Element, ElementKind};
pub use error::MeshError;
pub use forest::{Forest, RootGrid};
pub use loc::LogicalLocation;
pub use mesh::{Mesh, RemeshOutcome};
pub use neighbor::{find_neighbors, BlockNeighbors, NeighborBlock, Ownership};
pub use partition::{plan_moves, BlockMove, MoveKind, Partition};
pub use refine::{
    initial_forest, is_balanced, remesh, BlockFate, BlockOrigin, DerefineCounter, RefinementFlag,
    RefinementRules, Remesh, RemeshMap,
};
