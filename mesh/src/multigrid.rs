//! The geometric multigrid hierarchy below the leaf grid.
//!
//! Levels run from the finest leaf level down to the root grid and then below it:
//!
//! - At a tree level `g >= 0`, the blocks are the forest cut at `g` ([`Forest::truncated`]):
//!   every tree node at level `g` (leaf or refined) plus the leaves coarser than `g` (a
//!   two-level composite, so every level tiles the whole domain and its neighbour records are
//!   complete). Blocks keep the leaf block size.
//! - Below the root grid (levels `-1, -2, ...`) the blocks are the root blocks with half as many
//!   cells per direction at each level, as long as every active block size stays even and the
//!   halved size is at least `nghost` (so a block can still fill its neighbours' ghosts).
//!
//! Each block of a level knows the block of the next coarser level that contains it (the
//! restriction target; the prolongation source is the same pair read backwards) and its rank:
//! a refined node lives on the rank of its first leaf in Morton order.

use crate::error::MeshError;
use crate::forest::Forest;
use crate::neighbor::{find_neighbors, BlockNeighbors};
use hashbrown::HashMap;

/// One level of the multigrid hierarchy.
#[derive(Debug, Clone)]
pub struct GmgLevel {
    /// Logical level: tree level for `>= 0`, negative below the root grid.
    pub level: i32,
    /// Interior cells per block on this level.
    pub block_nx: [usize; 3],
    /// The blocks of this level (gids are positions in `forest.leaves()`).
    pub forest: Forest,
    /// Rank of each block.
    pub ranks: Vec<usize>,
    /// For each block, the gid of the block containing it on the next coarser level
    /// (`None` on the coarsest level).
    pub coarser: Vec<Option<usize>>,
}

impl GmgLevel {
    /// Neighbour records of this level's blocks (`gmg_same` exchange).
    pub fn neighbors(&self) -> Result<Vec<BlockNeighbors>, MeshError> {
        find_neighbors(&self.forest, &self.ranks)
    }

    /// True if block `gid` is a leaf coarser than this level, carried along as part of the
    /// two-level composite (it is not restricted into from the finer level).
    pub fn is_composite_copy(&self, gid: usize) -> bool {
        self.level > 0 && self.forest.leaves()[gid].level() < self.level as u32
    }
}

/// The whole hierarchy, finest level first.
///
/// ```
/// use starhalo_mesh::{Forest, RootGrid, multigrid::Multigrid};
/// let grid = RootGrid::new(2, [2, 2, 1], [true, true, false]).unwrap();
/// let f = Forest::uniform(grid, 1);
/// let mg = Multigrid::build(&f, &vec![0; f.len()], [16, 16, 1], 2).unwrap();
/// // Levels 1 and 0 of the tree, then blocks of 8, 4 and 2 cells below the root grid.
/// let levels: Vec<_> = mg.levels().iter().map(|l| (l.level, l.block_nx[0], l.forest.len())).collect();
/// assert_eq!(levels, vec![(1, 16, 16), (0, 16, 4), (-1, 8, 4), (-2, 4, 4), (-3, 2, 4)]);
/// ```
#[derive(Debug, Clone)]
pub struct Multigrid {
    levels: Vec<GmgLevel>,
}

impl Multigrid {
    /// Build the hierarchy under `forest` (leaf ranks `ranks`, leaf block size `block_nx`).
    pub fn build(
        forest: &Forest,
        ranks: &[usize],
        block_nx: [usize; 3],
        nghost: usize,
    ) -> Result<Self, MeshError> {
        if ranks.len() != forest.len() {
            return Err(MeshError::Length {
                what: "ranks per block",
                expected: forest.len(),
                got: ranks.len(),
            });
        }
        let ndim = forest.ndim();
        let mut levels: Vec<GmgLevel> = Vec::new();
        for g in (0..=forest.max_level()).rev() {
            let cut = forest.truncated(g);
            // Rank of a node: the rank of its first leaf in Morton order.
            let mut first: HashMap<_, usize> = HashMap::new();
            for (gid, l) in forest.leaves().iter().enumerate() {
                let a = l.ancestor_at(g.min(l.level())).unwrap_or(*l);
                first.entry(a).or_insert(ranks[gid]);
            }
            let lranks = cut
                .leaves()
                .iter()
                .map(|l| first.get(l).copied().unwrap_or(0))
                .collect();
            levels.push(GmgLevel {
                level: g as i32,
                block_nx,
                coarser: vec![None; cut.len()],
                forest: cut,
                ranks: lranks,
            });
        }
        let mut nx = block_nx;
        let mut level = 0i32;
        loop {
            let ok = (0..ndim).all(|d| nx[d].is_multiple_of(2) && nx[d] / 2 >= nghost.max(1));
            if !ok {
                break;
            }
            for n in nx.iter_mut().take(ndim) {
                *n /= 2;
            }
            level -= 1;
            let Some(root) = levels.last() else { break };
            levels.push(GmgLevel {
                level,
                block_nx: nx,
                forest: root.forest.clone(),
                ranks: root.ranks.clone(),
                coarser: vec![None; root.forest.len()],
            });
        }
        // Link each level to the next coarser one.
        for i in 0..levels.len().saturating_sub(1) {
            let coarse = &levels[i + 1].forest;
            let links: Vec<Option<usize>> = levels[i]
                .forest
                .leaves()
                .iter()
                .map(|l| coarse.covering_leaf(l))
                .collect();
            levels[i].coarser = links;
        }
        Ok(Self { levels })
    }

    /// The levels, finest first.
    pub fn levels(&self) -> &[GmgLevel] {
        &self.levels
    }

    /// The coarsest level.
    pub fn coarsest(&self) -> Option<&GmgLevel> {
        self.levels.last()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forest::RootGrid;
    use crate::loc::LogicalLocation;
    use crate::refine::{remesh, RefinementFlag, RefinementRules};

    #[test]
    fn levels_tile_the_domain_and_link_to_containing_blocks() {
        let grid = RootGrid::new(2, [2, 1, 1], [false; 3]).unwrap();
        let f = Forest::uniform(grid, 0);
        let mut flags = vec![RefinementFlag::Same; 2];
        flags[0] = RefinementFlag::Refine;
        let f = remesh(&f, &flags, &RefinementRules::adaptive(2))
            .unwrap()
            .forest;
        let mut flags = vec![RefinementFlag::Same; f.len()];
        flags[0] = RefinementFlag::Refine;
        let f = remesh(&f, &flags, &RefinementRules::adaptive(2))
            .unwrap()
            .forest;
        assert_eq!(f.max_level(), 2);
        let ranks: Vec<usize> = (0..f.len()).map(|g| g % 3 + 1).collect();
        let mg = Multigrid::build(&f, &ranks, [8, 8, 1], 2).unwrap();
        let lv = mg.levels();
        // 2, 1, 0, then 4 cells and 2 cells below the root.
        assert_eq!(
            lv.iter().map(|l| l.level).collect::<Vec<_>>(),
            vec![2, 1, 0, -1, -2]
        );
        assert_eq!(lv[0].forest.leaves(), f.leaves());
        assert_eq!(lv[2].forest.len(), 2);
        for (i, l) in lv.iter().enumerate() {
            let parent = lv.get(i + 1);
            for (gid, loc) in l.forest.leaves().iter().enumerate() {
                match (parent, l.coarser[gid]) {
                    (Some(p), Some(c)) => assert!(p.forest.leaves()[c].contains(loc)),
                    (None, None) => {}
                    other => panic!("bad link {other:?}"),
                }
            }
            assert!(l.neighbors().is_ok());
        }
        // Level 1: the refined root block 0 as 4 nodes (one of them refined at level 2), plus
        // root block 1 as a composite copy.
        let b1 = lv[1]
            .forest
            .gid(&LogicalLocation::new(0, [1, 0, 0]))
            .unwrap();
        assert!(lv[1].is_composite_copy(b1));
        let node = lv[1]
            .forest
            .gid(&LogicalLocation::new(1, [0, 0, 0]))
            .unwrap();
        assert!(!lv[1].is_composite_copy(node));
        // Its rank is that of its first leaf.
        let first_leaf = f.gid(&LogicalLocation::new(2, [0, 0, 0])).unwrap();
        assert_eq!(lv[1].forest.len(), 5);
        assert_eq!(lv[1].ranks[node], ranks[first_leaf]);
    }

    #[test]
    fn odd_block_sizes_stop_the_sub_root_levels() {
        let grid = RootGrid::new(1, [3, 1, 1], [false; 3]).unwrap();
        let f = Forest::uniform(grid, 0);
        let mg = Multigrid::build(&f, &[0, 0, 0], [12, 1, 1], 2).unwrap();
        let nx: Vec<_> = mg.levels().iter().map(|l| l.block_nx[0]).collect();
        assert_eq!(nx, vec![12, 6, 3]);
        assert_eq!(mg.coarsest().map(|l| l.level), Some(-2));
    }
}
