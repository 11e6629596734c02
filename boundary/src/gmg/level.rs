//! The blocks and storage of each multigrid level.

use starhalo_mesh::field::{Fields, IndexShape};
use starhalo_mesh::multigrid::{GmgLevel, Multigrid};
use starhalo_mesh::{BlockNeighbors, BoundaryCondition, Mesh, MeshError};

use crate::block_set::BlockSet;
use crate::error::BoundaryError;
use crate::storage::BlockData;

/// One multigrid level as a block set for the ghost exchange (`gmg_same`): each rank's blocks
/// of the level form one mesh-data partition.
#[derive(Debug, Clone, Copy)]
pub struct LevelBlocks<'a> {
    /// The mesh (its boundary conditions).
    pub mesh: &'a Mesh,
    /// The level.
    pub level: &'a GmgLevel,
}

impl BlockSet for LevelBlocks<'_> {
    fn nblocks(&self) -> usize {
        self.level.forest.len()
    }
    fn neighbors(&self) -> Result<Vec<BlockNeighbors>, MeshError> {
        self.level.neighbors()
    }
    fn pack_partitions(&self, rank: usize) -> Vec<Vec<usize>> {
        let mine = level_blocks_of(self.level, rank);
        if mine.is_empty() {
            Vec::new()
        } else {
            vec![mine]
        }
    }
    fn face_boundary(&self, gid: usize, dir: usize, side: usize) -> Option<BoundaryCondition> {
        let forest = &self.level.forest;
        let l = forest.loc(gid)?;
        if dir >= forest.ndim() || side > 1 {
            return None;
        }
        let n = forest.grid().extent(l.level());
        let edge = if side == 0 { 0 } else { n[dir] - 1 };
        (l.lx_dir(dir) == edge).then_some(self.mesh.config().bc[dir][side])
    }
}

/// The gids of `rank`'s blocks on `level`, ascending.
pub fn level_blocks_of(level: &GmgLevel, rank: usize) -> Vec<usize> {
    (0..level.ranks.len())
        .filter(|&g| level.ranks[g] == rank)
        .collect()
}

/// The index shape of a level's blocks, and of their coarse buffers when the level mixes
/// refinement levels (a two-level composite, whose level jumps fill ghosts through them).
pub fn level_shapes(
    level: &GmgLevel,
    nghost: usize,
) -> Result<(IndexShape, Option<IndexShape>), BoundaryError> {
    let shape = IndexShape::new(level.block_nx, nghost, level.forest.ndim())?;
    let leaves = level.forest.leaves();
    let mixed = leaves.iter().any(|l| l.level() != leaves[0].level());
    let coarse = if mixed { Some(shape.coarse()?) } else { None };
    Ok((shape, coarse))
}

/// The field values of one rank's blocks on every multigrid level, finest first.
///
/// Every variable is allocated on every level: multigrid levels carry no sparse allocation
/// state (a sparse variable is stored dense there; its ghost channels still send null below
/// the threshold, filling the default).
#[derive(Debug, Clone)]
pub struct GmgData {
    multigrid: Multigrid,
    levels: Vec<BlockData>,
}

impl GmgData {
    /// Storage for `rank`'s blocks on every level of `mesh`'s multigrid hierarchy, zero.
    pub fn new(mesh: &Mesh, fields: &Fields, rank: usize) -> Result<Self, BoundaryError> {
        let multigrid = mesh.multigrid()?;
        let nghost = mesh.config().nghost;
        let mut levels = Vec::with_capacity(multigrid.levels().len());
        for l in multigrid.levels() {
            let (shape, coarse) = level_shapes(l, nghost)?;
            let mut data = BlockData::for_blocks(fields, level_blocks_of(l, rank), shape, coarse)?;
            for b in 0..data.gids().len() {
                for v in 0..data.vars().len() {
                    data.set_allocated(b, v, true);
                }
            }
            levels.push(data);
        }
        Ok(Self { multigrid, levels })
    }

    /// The hierarchy the storage was built for.
    pub fn multigrid(&self) -> &Multigrid {
        &self.multigrid
    }

    /// Number of levels.
    pub fn len(&self) -> usize {
        self.levels.len()
    }

    /// True if there are no levels (never, for a mesh with blocks).
    pub fn is_empty(&self) -> bool {
        self.levels.is_empty()
    }

    /// The storage of level `i` (0 is the finest, the leaf grid).
    pub fn level(&self, i: usize) -> Result<&BlockData, BoundaryError> {
        let n = self.levels.len();
        self.levels.get(i).ok_or(missing(i, n))
    }

    /// The storage of level `i`, for writing.
    pub fn level_mut(&mut self, i: usize) -> Result<&mut BlockData, BoundaryError> {
        let n = self.levels.len();
        self.levels.get_mut(i).ok_or(missing(i, n))
    }

    /// Copies the block arrays of `leaves` (the leaf storage of the same rank) into the
    /// finest level, which holds the same blocks.
    pub fn load_leaves(&mut self, leaves: &BlockData) -> Result<(), BoundaryError> {
        let finest = self.level_mut(0)?;
        same_blocks(leaves, finest)?;
        for b in 0..leaves.gids().len() {
            for s in 0..leaves.slot_defaults().len() {
                finest.fine_mut(b, s).copy_from_slice(leaves.fine(b, s));
            }
        }
        Ok(())
    }

    /// Copies the finest level's block arrays back into `leaves`.
    pub fn store_leaves(&self, leaves: &mut BlockData) -> Result<(), BoundaryError> {
        let finest = self.level(0)?;
        same_blocks(finest, leaves)?;
        for b in 0..finest.gids().len() {
            for s in 0..finest.slot_defaults().len() {
                leaves.fine_mut(b, s).copy_from_slice(finest.fine(b, s));
            }
        }
        Ok(())
    }
}

pub(crate) fn missing(level: usize, levels: usize) -> BoundaryError {
    BoundaryError::GmgLevel {
        level,
        levels,
        why: "no such level",
    }
}

fn same_blocks(a: &BlockData, b: &BlockData) -> Result<(), BoundaryError> {
    if a.gids() != b.gids() || a.shape() != b.shape() || a.vars() != b.vars() {
        return Err(BoundaryError::Mismatch(
            "the leaf storage and the finest multigrid level hold different blocks, shapes \
             or variables"
                .into(),
        ));
    }
    Ok(())
}
