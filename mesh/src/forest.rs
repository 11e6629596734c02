//! The root grid of trees and the set of leaf blocks that tiles the domain.
//!
//! A [`Forest`] is a hyper-rectangular [`RootGrid`] of root blocks, each the root of a tree of
//! refinement, together with its leaves: the blocks that exist, listed in Morton order. The
//! position of a leaf in that list is its global id (gid).

use crate::error::MeshError;
use crate::loc::{LogicalLocation, MAX_COORD_BITS};
use hashbrown::{HashMap, HashSet};

/// The root grid: dimensionality, root blocks per direction and periodicity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RootGrid {
    ndim: usize,
    nrb: [i64; 3],
    periodic: [bool; 3],
}

/// The finest level whose coordinates stay below `2^MAX_COORD_BITS` on a root grid of `nrb`
/// blocks per direction: the bits left beside those the root blocks take.
pub(crate) fn finest_level(nrb: [i64; 3]) -> u32 {
    let bits = nrb.map(|n| 64 - (n.max(1) as u64 - 1).leading_zeros());
    MAX_COORD_BITS.saturating_sub(bits.into_iter().max().unwrap_or(0))
}

impl RootGrid {
    /// A root grid of `nrb` blocks in `ndim` dimensions. Entries of `nrb` beyond `ndim` must be 1
    /// and periodicity beyond `ndim` is ignored.
    pub fn new(ndim: usize, nrb: [i64; 3], periodic: [bool; 3]) -> Result<Self, MeshError> {
        if !(1..=3).contains(&ndim) {
            return Err(MeshError::BadLeaves(format!(
                "ndim must be 1, 2 or 3, not {ndim}"
            )));
        }
        for d in 0..3 {
            let ok = if d < ndim {
                nrb[d] >= 1 && nrb[d] < (1 << MAX_COORD_BITS)
            } else {
                nrb[d] == 1
            };
            if !ok {
                return Err(MeshError::BadLeaves(format!(
                    "bad root grid {nrb:?} for ndim {ndim}"
                )));
            }
        }
        // Trees are counted and numbered in usize (and i64): their number must fit.
        let trees = nrb.iter().try_fold(1i64, |n, &k| n.checked_mul(k));
        if trees.is_none_or(|n| usize::try_from(n).is_err()) {
            return Err(MeshError::BadLeaves(format!(
                "root grid {nrb:?} has more blocks than can be counted"
            )));
        }
        Ok(Self {
            ndim,
            nrb,
            periodic: [0, 1, 2].map(|d| d < ndim && periodic[d]),
        })
    }

    /// Number of dimensions.
    pub fn ndim(&self) -> usize {
        self.ndim
    }

    /// Root blocks per direction.
    pub fn nrb(&self) -> [i64; 3] {
        self.nrb
    }

    /// Periodicity per direction.
    pub fn periodic(&self) -> [bool; 3] {
        self.periodic
    }

    /// Number of root blocks (trees).
    pub fn num_trees(&self) -> usize {
        self.nrb.iter().product::<i64>() as usize
    }

    /// Blocks per direction at `level` (1 along inactive directions).
    pub fn extent(&self, level: u32) -> [i64; 3] {
        [0, 1, 2].map(|d| {
            if d < self.ndim {
                self.nrb[d].checked_shl(level).unwrap_or(i64::MAX)
            } else {
                1
            }
        })
    }

    /// True if every coordinate at `level` stays below `2^MAX_COORD_BITS`: the levels the
    /// config allows for this root grid.
    pub fn holds_level(&self, level: u32) -> bool {
        level <= finest_level(self.nrb)
    }

    /// True if `loc` lies inside the domain and is 0 along inactive directions.
    pub fn contains(&self, loc: &LogicalLocation) -> bool {
        let n = self.extent(loc.level());
        (0..3).all(|d| (0..n[d]).contains(&loc.lx_dir(d)))
    }

    /// Bring the unwrapped coordinates `lx` at `level` into the domain through periodic
    /// boundaries. Returns the location and, per direction, how many domain lengths were
    /// crossed (`+1`: the image lies beyond the upper boundary, `-1`: below the lower one), or
    /// `None` if `lx` lies outside a non-periodic boundary.
    pub fn wrap(&self, level: u32, lx: [i64; 3]) -> Option<(LogicalLocation, [i32; 3])> {
        let n = self.extent(level);
        let mut w = [0i64; 3];
        let mut shift = [0i32; 3];
        for d in 0..3 {
            if (0..n[d]).contains(&lx[d]) {
                w[d] = lx[d];
            } else if self.periodic[d] {
                w[d] = lx[d].rem_euclid(n[d]);
                shift[d] = ((lx[d] - w[d]) / n[d]) as i32;
            } else {
                return None;
            }
        }
        Some((LogicalLocation::new(level, w), shift))
    }

    /// Index of the tree containing `loc`, x1 fastest.
    pub fn tree_index(&self, loc: &LogicalLocation) -> usize {
        let t = loc.tree_coords();
        (t[0] + self.nrb[0] * (t[1] + self.nrb[1] * t[2])) as usize
    }
}

/// A root grid and the leaves that tile it, in Morton order.
///
/// ```
/// use starhalo_mesh::{Forest, LogicalLocation, RootGrid};
/// let grid = RootGrid::new(2, [2, 1, 1], [true, false, false]).unwrap();
/// let mut leaves: Vec<_> = LogicalLocation::new(0, [0, 0, 0]).children(2);
/// leaves.push(LogicalLocation::new(0, [1, 0, 0]));
/// let f = Forest::from_leaves(grid, leaves).unwrap();
/// assert_eq!(f.len(), 5);
/// assert_eq!(f.covering_leaf(&LogicalLocation::new(2, [5, 1, 0])), Some(4));
/// assert!(f.is_internal(&LogicalLocation::new(0, [0, 0, 0])));
/// ```
#[derive(Debug, Clone)]
pub struct Forest {
    grid: RootGrid,
    leaves: Vec<LogicalLocation>,
    index: HashMap<LogicalLocation, usize>,
    internal: HashSet<LogicalLocation>,
}

impl Forest {
    /// Every block of the domain at `level`.
    pub fn uniform(grid: RootGrid, level: u32) -> Self {
        let n = grid.extent(level);
        let mut leaves = Vec::with_capacity((n[0] * n[1] * n[2]) as usize);
        for k in 0..n[2] {
            for j in 0..n[1] {
                for i in 0..n[0] {
                    leaves.push(LogicalLocation::new(level, [i, j, k]));
                }
            }
        }
        Self::build(grid, leaves)
    }

    /// A forest from an explicit leaf list (any order). Fails unless the leaves lie in the
    /// domain, are distinct, none contains another, and together they cover the domain.
    pub fn from_leaves(grid: RootGrid, leaves: Vec<LogicalLocation>) -> Result<Self, MeshError> {
        let set: HashSet<LogicalLocation> = leaves.iter().copied().collect();
        if set.len() != leaves.len() {
            return Err(MeshError::BadLeaves("a leaf is listed twice".into()));
        }
        let max_level = leaves.iter().map(|l| l.level()).max().unwrap_or(0);
        let mut volume: u128 = 0;
        for l in &leaves {
            if !grid.holds_level(l.level()) {
                return Err(MeshError::BadLeaves(format!(
                    "{l} is finer than a root grid of {:?} blocks allows",
                    grid.nrb
                )));
            }
            if !grid.contains(l) {
                return Err(MeshError::BadLeaves(format!("{l} lies outside the domain")));
            }
            let mut a = *l;
            while let Some(p) = a.parent() {
                if set.contains(&p) {
                    return Err(MeshError::BadLeaves(format!(
                        "{p} and its descendant {l} are both leaves"
                    )));
                }
                a = p;
            }
            let v = 1u128
                .checked_shl(((max_level - l.level()) as usize * grid.ndim()) as u32)
                .ok_or_else(|| MeshError::BadLeaves("levels too deep".into()))?;
            volume = volume
                .checked_add(v)
                .ok_or_else(|| MeshError::BadLeaves("levels too deep".into()))?;
        }
        let full = (grid.num_trees() as u128)
            .checked_shl(max_level * grid.ndim() as u32)
            .ok_or_else(|| MeshError::BadLeaves("levels too deep".into()))?;
        if volume != full {
            return Err(MeshError::BadLeaves(
                "the leaves do not cover the domain".into(),
            ));
        }
        Ok(Self::build(grid, leaves))
    }

    /// Sort, index and record internal nodes; the caller guarantees a valid tiling.
    pub(crate) fn build(grid: RootGrid, mut leaves: Vec<LogicalLocation>) -> Self {
        leaves.sort_unstable();
        let index = leaves.iter().enumerate().map(|(i, l)| (*l, i)).collect();
        let mut internal = HashSet::new();
        for l in &leaves {
            let mut a = *l;
            while let Some(p) = a.parent() {
                if !internal.insert(p) {
                    break;
                }
                a = p;
            }
        }
        Self {
            grid,
            leaves,
            index,
            internal,
        }
    }

    /// The root grid.
    pub fn grid(&self) -> &RootGrid {
        &self.grid
    }

    /// Number of dimensions.
    pub fn ndim(&self) -> usize {
        self.grid.ndim
    }

    /// The leaves in Morton order; the position is the gid.
    pub fn leaves(&self) -> &[LogicalLocation] {
        &self.leaves
    }

    /// Number of leaves.
    pub fn len(&self) -> usize {
        self.leaves.len()
    }

    /// True if there is no leaf (never the case for a built forest).
    pub fn is_empty(&self) -> bool {
        self.leaves.is_empty()
    }

    /// The location of leaf `gid`.
    pub fn loc(&self, gid: usize) -> Option<LogicalLocation> {
        self.leaves.get(gid).copied()
    }

    /// The gid of the leaf at `loc`, if `loc` is a leaf.
    pub fn gid(&self, loc: &LogicalLocation) -> Option<usize> {
        self.index.get(loc).copied()
    }

    /// True if `loc` has been refined (some leaf lies strictly inside it).
    pub fn is_internal(&self, loc: &LogicalLocation) -> bool {
        self.internal.contains(loc)
    }

    /// The finest leaf level.
    pub fn max_level(&self) -> u32 {
        self.leaves.iter().map(|l| l.level()).max().unwrap_or(0)
    }

    /// The gid of the leaf equal to `loc` or containing it (an ancestor), if there is one.
    /// `None` when `loc` is internal (refined further) or outside the domain.
    pub fn covering_leaf(&self, loc: &LogicalLocation) -> Option<usize> {
        let mut a = *loc;
        loop {
            if let Some(&g) = self.index.get(&a) {
                return Some(g);
            }
            a = a.parent()?;
        }
    }

    /// The forest cut at `level`: leaves finer than `level` are replaced by their ancestors at
    /// `level`. Used for the multigrid levels; 2:1 balance is preserved.
    pub fn truncated(&self, level: u32) -> Self {
        let set: HashSet<LogicalLocation> = self
            .leaves
            .iter()
            .map(|l| l.ancestor_at(level.min(l.level())).unwrap_or(*l))
            .collect();
        Self::build(self.grid, set.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid2() -> RootGrid {
        RootGrid::new(2, [2, 2, 1], [true, false, false]).unwrap()
    }

    #[test]
    fn wrap_crosses_only_periodic_boundaries() {
        let g = grid2();
        let (l, s) = g.wrap(1, [4, 1, 0]).unwrap();
        assert_eq!((l.lx(), s), ([0, 1, 0], [1, 0, 0]));
        let (l, s) = g.wrap(1, [-1, 3, 0]).unwrap();
        assert_eq!((l.lx(), s), ([3, 3, 0], [-1, 0, 0]));
        assert!(g.wrap(1, [0, 4, 0]).is_none());
        assert!(g.wrap(1, [0, 0, 1]).is_none());
    }

    #[test]
    fn from_leaves_rejects_bad_tilings() {
        let g = grid2();
        let root = LogicalLocation::new(0, [0, 0, 0]);
        let mut leaves = vec![
            LogicalLocation::new(0, [1, 0, 0]),
            LogicalLocation::new(0, [0, 1, 0]),
            LogicalLocation::new(0, [1, 1, 0]),
        ];
        // Missing the first root block.
        assert!(Forest::from_leaves(g, leaves.clone()).is_err());
        // Overlap: a block and its child.
        let mut overlap = leaves.clone();
        overlap.push(root);
        overlap.push(root.child([0, 0, 0]));
        assert!(Forest::from_leaves(g, overlap).is_err());
        // Absurd levels and negative coordinates are errors, not panics.
        assert!(Forest::from_leaves(g, vec![LogicalLocation::new(100, [0, 0, 0])]).is_err());
        for level in [u32::MAX - 1, u32::MAX] {
            let deep = vec![LogicalLocation::new(level, [0, 0, 0])];
            assert!(Forest::from_leaves(g, deep).is_err(), "level {level}");
        }
        // A root grid whose number of trees overflows is refused when it is made.
        let e = RootGrid::new(3, [1 << 39; 3], [false; 3]).unwrap_err();
        assert!(
            e.to_string().contains("more blocks than can be counted"),
            "{e}"
        );
        assert!(Forest::from_leaves(g, vec![LogicalLocation::new(1, [-1, 0, 0])]).is_err());
        leaves.extend(root.children(2));
        let f = Forest::from_leaves(g, leaves).unwrap();
        assert_eq!(f.len(), 7);
        assert!(f.leaves().windows(2).all(|w| w[0] < w[1]));
        assert_eq!(f.gid(&root.child([0, 0, 0])), Some(0));
        assert_eq!(f.covering_leaf(&root), None);
        assert_eq!(g.tree_index(&LogicalLocation::new(1, [3, 2, 0])), 3);
    }

    /// The leaves of one root block refined down its left edge to `level` (1-D).
    fn left_chain(tree: i64, level: u32) -> Vec<LogicalLocation> {
        let mut leaves = vec![LogicalLocation::new(level, [tree << level, 0, 0])];
        leaves.extend((1..=level).map(|l| LogicalLocation::new(l, [(tree << l) + 1, 0, 0])));
        leaves
    }

    #[test]
    fn leaves_may_be_as_fine_as_the_config_allows_and_no_finer() {
        // One root block: levels up to MAX_COORD_BITS, as `MeshConfig::validate` allows.
        let one = RootGrid::new(1, [1, 1, 1], [false; 3]).unwrap();
        let deepest = Forest::from_leaves(one, left_chain(0, MAX_COORD_BITS)).unwrap();
        assert_eq!(deepest.max_level(), MAX_COORD_BITS);
        let e = Forest::from_leaves(one, left_chain(0, MAX_COORD_BITS + 1)).unwrap_err();
        assert!(e.to_string().contains("finer than a root grid"), "{e}");
        // 16385 root blocks take 15 bits: 25 levels at most. Deeper leaves that tile only the
        // first tree once passed the coverage check (the shifted volume overflowed).
        let wide = RootGrid::new(1, [16385, 1, 1], [false; 3]).unwrap();
        assert!(Forest::from_leaves(wide, left_chain(0, 38)).is_err());
        let mut leaves = left_chain(0, 25);
        leaves.extend((1..16385).map(|t| LogicalLocation::new(0, [t, 0, 0])));
        assert_eq!(
            Forest::from_leaves(wide, leaves.clone()).unwrap().len(),
            16384 + 26
        );
        leaves.pop();
        assert!(
            Forest::from_leaves(wide, leaves).is_err(),
            "a tree is missing"
        );
    }

    #[test]
    fn truncation_replaces_fine_leaves_by_ancestors() {
        let g = grid2();
        let mut leaves: Vec<_> = vec![
            LogicalLocation::new(0, [1, 0, 0]),
            LogicalLocation::new(0, [0, 1, 0]),
            LogicalLocation::new(0, [1, 1, 0]),
        ];
        let c = LogicalLocation::new(0, [0, 0, 0]).children(2);
        leaves.extend_from_slice(&c[1..]);
        leaves.extend(c[0].children(2));
        let f = Forest::from_leaves(g, leaves).unwrap();
        assert_eq!(f.len(), 10);
        assert_eq!(f.max_level(), 2);
        assert_eq!(f.truncated(1).len(), 7);
        assert_eq!(f.truncated(0).len(), 4);
        assert_eq!(Forest::uniform(g, 1).len(), 16);
    }
}
