//! The blocks and storage of each multigrid level.

use starhalo_mesh::field::{Fields, IndexShape};
use starhalo_mesh::multigrid::{GmgLevel, Multigrid};
use std::sync::Arc;

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
    fn neighbors(&self) -> Result<Arc<[BlockNeighbors]>, MeshError> {
        self.level.neighbors().map(Arc::from)
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

/// The field values of one rank's blocks on every multigrid level, finest first. Built from
/// the mesh as it is: rebuild it (and the [`GmgExchange`](super::GmgExchange)) after a remesh.
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
        copy_blocks(leaves, self.level_mut(0)?)
    }

    /// Copies the finest level's block arrays back into `leaves`.
    pub fn store_leaves(&self, leaves: &mut BlockData) -> Result<(), BoundaryError> {
        copy_blocks(self.level(0)?, leaves)
    }
}

/// Copies every block array of `from` into `to`, which must hold the same blocks.
fn copy_blocks(from: &BlockData, to: &mut BlockData) -> Result<(), BoundaryError> {
    same_blocks(from, to)?;
    for b in 0..from.gids().len() {
        for s in 0..from.slot_defaults().len() {
            to.fine_mut(b, s).copy_from_slice(from.fine(b, s));
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use starhalo_mesh::config::RefinementKind;
    use starhalo_mesh::field::{Centering, Metadata};
    use starhalo_mesh::{LogicalLocation, MeshConfig, RefinementFlag};

    /// 4x2 root blocks of 8x8 cells, x1 periodic, x2 outflow; block 0 refined; 3 ranks.
    fn mesh() -> Mesh {
        let mut c = MeshConfig::new([32, 16, 1], [8, 8, 1]);
        c.refinement = RefinementKind::Adaptive;
        c.numlevel = 2;
        c.bc[0] = [BoundaryCondition::Periodic; 2];
        let mut m = Mesh::new(c, 3).unwrap();
        let mut flags = vec![RefinementFlag::Same; 8];
        flags[0] = RefinementFlag::Refine;
        m.remesh(&flags, None).unwrap();
        m
    }

    fn fields() -> Fields {
        let mut f = Fields::default();
        f.add(
            "u",
            Metadata::new(Centering::Cell).fill_ghost().components(2),
        )
        .unwrap();
        f
    }

    #[test]
    fn levels_split_over_ranks_with_their_shapes() {
        let m = mesh();
        let f = fields();
        let per_rank: Vec<GmgData> = (0..3).map(|r| GmgData::new(&m, &f, r).unwrap()).collect();
        let mg = m.multigrid().unwrap();
        // Levels: 1 (composite), 0, then 4x4, 2x2 cells below the root grid.
        let nx: Vec<usize> = mg.levels().iter().map(|l| l.block_nx[0]).collect();
        assert_eq!(nx, vec![8, 8, 4, 2]);
        for (i, l) in mg.levels().iter().enumerate() {
            let mut all: Vec<usize> = per_rank
                .iter()
                .flat_map(|d| d.level(i).unwrap().gids().to_vec())
                .collect();
            all.sort_unstable();
            assert_eq!(all, (0..l.forest.len()).collect::<Vec<_>>(), "level {i}");
            let d = per_rank[0].level(i).unwrap();
            assert_eq!(d.shape().nx()[0], l.block_nx[0]);
            // Only the composite level has level jumps, so only it keeps coarse buffers.
            assert_eq!(d.coarse_shape().is_some(), i == 0);
        }
        // The finest level is the leaf grid, block for block.
        assert_eq!(
            per_rank[1].level(0).unwrap().gids(),
            m.partition().blocks_of(1).collect::<Vec<_>>()
        );
        assert!(matches!(
            per_rank[0].level(4),
            Err(BoundaryError::GmgLevel {
                level: 4,
                levels: 4,
                ..
            })
        ));
    }

    #[test]
    fn leaves_load_and_store_through_the_finest_level() {
        let m = mesh();
        let f = fields();
        let mut leaves = BlockData::new(&m, &f, 2).unwrap();
        for (i, x) in leaves.data_mut().iter_mut().enumerate() {
            *x = i as f64;
        }
        let mut gmg = GmgData::new(&m, &f, 2).unwrap();
        gmg.load_leaves(&leaves).unwrap();
        let mut back = BlockData::new(&m, &f, 2).unwrap();
        gmg.store_leaves(&mut back).unwrap();
        for b in 0..leaves.gids().len() {
            for s in 0..2 {
                assert_eq!(back.fine(b, s), leaves.fine(b, s));
                assert_eq!(gmg.level(0).unwrap().fine(b, s), leaves.fine(b, s));
            }
        }
        // Another rank's leaves are not this level's blocks.
        let other = BlockData::new(&m, &f, 0).unwrap();
        assert!(matches!(
            gmg.load_leaves(&other),
            Err(BoundaryError::Mismatch(_))
        ));
    }

    #[test]
    fn level_faces_follow_the_mesh_boundaries() {
        let m = mesh();
        let mg = m.multigrid().unwrap();
        // Level 0 is the root grid: the same blocks as the mesh before refinement.
        let root = &mg.levels()[1];
        let blocks = LevelBlocks {
            mesh: &m,
            level: root,
        };
        assert_eq!(blocks.nblocks(), 8);
        let g = |x: i64, y: i64| {
            root.forest
                .gid(&LogicalLocation::new(0, [x, y, 0]))
                .unwrap()
        };
        assert_eq!(
            blocks.face_boundary(g(0, 0), 0, 0),
            Some(BoundaryCondition::Periodic)
        );
        assert_eq!(
            blocks.face_boundary(g(0, 0), 1, 0),
            Some(BoundaryCondition::Outflow)
        );
        assert_eq!(blocks.face_boundary(g(1, 0), 0, 0), None);
        assert_eq!(
            blocks.face_boundary(g(3, 1), 1, 1),
            Some(BoundaryCondition::Outflow)
        );
        assert_eq!(blocks.face_boundary(g(3, 1), 2, 1), None);
        // One partition per rank that holds blocks of the level: all of them.
        let mut seen = 0;
        for r in 0..3 {
            let mine = level_blocks_of(root, r);
            let parts = blocks.pack_partitions(r);
            assert_eq!(parts.len(), usize::from(!mine.is_empty()));
            assert!(parts.iter().all(|p| *p == mine));
            seen += mine.len();
        }
        assert_eq!(seen, 8);
        assert!(blocks.neighbors().is_ok());
    }
}
