//! The blocks an [`Exchange`](crate::Exchange) runs on: the leaves of a [`Mesh`], or the
//! blocks of one multigrid level ([`LevelBlocks`](crate::gmg::LevelBlocks)).
//!
//! The exchange needs only four facts about its block set, so the ghost fill of a multigrid
//! level (`gmg_same`) is the same machinery as the leaf fill, built on another block set.

use std::sync::Arc;

use starhalo_mesh::{BlockNeighbors, BoundaryCondition, Mesh, MeshError};

/// What an exchange needs to know about the blocks it fills.
pub trait BlockSet {
    /// Number of blocks (gids are `0..nblocks()`).
    fn nblocks(&self) -> usize;
    /// Neighbour records of every block, with ranks.
    fn neighbors(&self) -> Result<Arc<[BlockNeighbors]>, MeshError>;
    /// Mesh-data partitions of `rank`'s blocks (gids, ascending).
    fn pack_partitions(&self, rank: usize) -> Vec<Vec<usize>>;
    /// Physical boundary condition of face `side` (0 inner, 1 outer) of direction `dir` of
    /// block `gid`, `None` inside the domain.
    fn face_boundary(&self, gid: usize, dir: usize, side: usize) -> Option<BoundaryCondition>;
}

impl BlockSet for Mesh {
    fn nblocks(&self) -> usize {
        self.forest().len()
    }
    fn neighbors(&self) -> Result<Arc<[BlockNeighbors]>, MeshError> {
        Mesh::neighbors(self)
    }
    fn pack_partitions(&self, rank: usize) -> Vec<Vec<usize>> {
        Mesh::pack_partitions(self, rank)
    }
    fn face_boundary(&self, gid: usize, dir: usize, side: usize) -> Option<BoundaryCondition> {
        Mesh::face_boundary(self, gid, dir, side)
    }
}
