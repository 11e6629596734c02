//! Refinement: flags, static regions, 2:1 balance, derefinement counting and remeshing.
//!
//! A remesh takes one [`RefinementFlag`] per leaf and produces a new forest:
//!
//! 1. Leaves flagged [`RefinementFlag::Refine`] (below the finest level) and leaves coarser than
//!    a static region they overlap are split into their children.
//! 2. Every split ripples: a leaf touching the split block (through a face, edge or corner,
//!    across periodic boundaries) that is coarser than the split block is split too, so that
//!    touching leaves never differ by more than one level (2:1 balance).
//! 3. A complete family of siblings, all flagged [`RefinementFlag::Derefine`] and all still
//!    leaves, merges into its parent unless the parent would break a static region or 2:1
//!    balance (some sibling has a finer neighbour).
//!
//! The [`RemeshMap`] says, for every new block, where its data comes from, and for every old
//! block, where its data goes.

use crate::config::{block_range, MeshConfig, StaticRegion};
use crate::element::Element;
use crate::error::MeshError;
use crate::forest::{Forest, RootGrid};
use crate::loc::LogicalLocation;
use hashbrown::{HashMap, HashSet};

/// What a block asks of the next remesh.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RefinementFlag {
    /// Split into 2^ndim children.
    Refine,
    /// Merge with its siblings into the parent (all siblings must agree).
    Derefine,
    /// Stay as is.
    #[default]
    Same,
}

/// The limits a remesh works within: the finest level, the static regions and the number of
/// blocks.
#[derive(Debug, Clone, PartialEq)]
pub struct RefinementRules {
    /// The finest level a block may reach.
    pub max_level: u32,
    /// Lower domain corner (to place static regions).
    pub xmin: [f64; 3],
    /// Upper domain corner.
    pub xmax: [f64; 3],
    /// Regions that must stay refined to at least their level.
    pub static_regions: Vec<StaticRegion>,
    /// The most leaves a forest may have.
    pub max_blocks: usize,
}

impl RefinementRules {
    /// The rules a validated configuration implies.
    pub fn from_config(c: &MeshConfig) -> Self {
        Self {
            max_level: c.max_level(),
            xmin: c.xmin,
            xmax: c.xmax,
            static_regions: c.static_regions.clone(),
            max_blocks: c.max_blocks,
        }
    }

    /// Rules with no static region.
    pub fn adaptive(max_level: u32) -> Self {
        Self {
            max_level,
            xmin: [0.0; 3],
            xmax: [1.0; 3],
            static_regions: Vec::new(),
            max_blocks: usize::MAX,
        }
    }

    /// The lowest level `loc` may have: the largest level of the static regions it overlaps
    /// (0 if none). A region of positive width overlaps a block when their interiors meet; a
    /// region of zero width along a direction (a plane or a point) overlaps the blocks whose
    /// closed range contains it.
    pub fn static_min_level(&self, grid: &RootGrid, loc: &LogicalLocation) -> u32 {
        let n = grid.extent(loc.level());
        let mut level = 0;
        for r in &self.static_regions {
            let overlaps = (0..grid.ndim()).all(|d| {
                let (lo, hi) = block_range(self.xmin[d], self.xmax[d], loc.lx_dir(d), n[d]);
                if r.xmin[d] < r.xmax[d] {
                    lo < r.xmax[d] && r.xmin[d] < hi
                } else {
                    lo <= r.xmax[d] && r.xmin[d] <= hi
                }
            });
            if overlaps {
                level = level.max(r.level);
            }
        }
        level
    }
}

/// Where a block of the new forest gets its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlockOrigin {
    /// Same location as old block `old`.
    Kept {
        /// The old gid.
        old: usize,
    },
    /// Lies inside old block `old` (prolongate from it).
    Refined {
        /// The old gid.
        old: usize,
    },
    /// Covers old blocks `old`, in Morton order (restrict from them).
    Merged {
        /// The old gids.
        old: Vec<usize>,
    },
}

/// Where the data of an old block goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlockFate {
    /// Same location as new block `new`.
    Kept {
        /// The new gid.
        new: usize,
    },
    /// Split into new blocks `new`, in Morton order.
    Refined {
        /// The new gids.
        new: Vec<usize>,
    },
    /// Merged into new block `new`.
    Merged {
        /// The new gid.
        new: usize,
    },
}

/// The correspondence between the blocks before and after a remesh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemeshMap {
    /// Indexed by new gid.
    pub origin: Vec<BlockOrigin>,
    /// Indexed by old gid.
    pub fate: Vec<BlockFate>,
}

impl RemeshMap {
    /// The map between two forests over the same root grid.
    pub fn between(old: &Forest, new: &Forest) -> Self {
        let mut fate: Vec<BlockFate> = old
            .leaves()
            .iter()
            .map(|l| match (new.gid(l), new.covering_leaf(l)) {
                (Some(n), _) => BlockFate::Kept { new: n },
                (None, Some(n)) => BlockFate::Merged { new: n },
                (None, None) => BlockFate::Refined { new: Vec::new() },
            })
            .collect();
        let mut merged: HashMap<usize, Vec<usize>> = HashMap::new();
        for (o, f) in fate.iter().enumerate() {
            if let BlockFate::Merged { new } = f {
                merged.entry(*new).or_default().push(o);
            }
        }
        let origin = new
            .leaves()
            .iter()
            .enumerate()
            .map(|(n, l)| match (old.gid(l), old.covering_leaf(l)) {
                (Some(o), _) => BlockOrigin::Kept { old: o },
                (None, Some(o)) => {
                    if let BlockFate::Refined { new } = &mut fate[o] {
                        new.push(n);
                    }
                    BlockOrigin::Refined { old: o }
                }
                (None, None) => BlockOrigin::Merged {
                    old: merged.remove(&n).unwrap_or_default(),
                },
            })
            .collect();
        Self { origin, fate }
    }

    /// The map of a remesh that changed nothing: each of `n` blocks kept under its gid.
    pub fn identity(n: usize) -> Self {
        Self {
            origin: (0..n).map(|old| BlockOrigin::Kept { old }).collect(),
            fate: (0..n).map(|new| BlockFate::Kept { new }).collect(),
        }
    }

    /// True if no block changed.
    pub fn is_identity(&self) -> bool {
        self.origin
            .iter()
            .enumerate()
            .all(|(n, o)| *o == BlockOrigin::Kept { old: n })
            && self.origin.len() == self.fate.len()
    }
}

/// Counts, per leaf, how many consecutive remeshes asked it to derefine; a derefine request
/// only counts once the block has asked `threshold` times in a row (Parthenon's
/// `derefine_count`).
#[derive(Debug, Clone, Default)]
pub struct DerefineCounter {
    threshold: u32,
    counts: HashMap<LogicalLocation, u32>,
}

impl DerefineCounter {
    /// A counter with `threshold` (0 or 1: derefine at the first request).
    pub fn new(threshold: u32) -> Self {
        Self {
            threshold,
            counts: HashMap::new(),
        }
    }

    /// Record this step's flags and return them with premature derefine requests replaced by
    /// [`RefinementFlag::Same`].
    pub fn filter(&mut self, forest: &Forest, flags: &[RefinementFlag]) -> Vec<RefinementFlag> {
        let mut counts = HashMap::new();
        let out = forest
            .leaves()
            .iter()
            .zip(flags)
            .map(|(l, &f)| {
                if f != RefinementFlag::Derefine {
                    return f;
                }
                let c = self.counts.get(l).copied().unwrap_or(0).saturating_add(1);
                counts.insert(*l, c);
                if c >= self.threshold {
                    f
                } else {
                    RefinementFlag::Same
                }
            })
            .collect();
        self.counts = counts;
        out
    }

    /// The current count of `loc`.
    pub fn count(&self, loc: &LogicalLocation) -> u32 {
        self.counts.get(loc).copied().unwrap_or(0)
    }

    /// The count of every leaf of `forest`, in gid order: all a restart needs, since
    /// [`DerefineCounter::filter`] only ever reads the counts of the current leaves.
    pub fn counts_of(&self, forest: &Forest) -> Vec<u32> {
        forest.leaves().iter().map(|l| self.count(l)).collect()
    }

    /// A counter with `threshold` holding `counts` for the leaves of `forest` (gid order), as
    /// [`DerefineCounter::counts_of`] exported them.
    pub fn with_counts(threshold: u32, forest: &Forest, counts: &[u32]) -> Result<Self, MeshError> {
        if counts.len() != forest.len() {
            return Err(MeshError::Length {
                what: "derefinement counts",
                expected: forest.len(),
                got: counts.len(),
            });
        }
        let counts = forest
            .leaves()
            .iter()
            .zip(counts)
            .filter(|(_, &c)| c > 0)
            .map(|(l, &c)| (*l, c))
            .collect();
        Ok(Self { threshold, counts })
    }
}

/// The result of a remesh.
#[derive(Debug, Clone)]
pub struct Remesh {
    /// The new forest.
    pub forest: Forest,
    /// Old blocks to new blocks.
    pub map: RemeshMap,
}

fn covering(set: &HashSet<LogicalLocation>, loc: &LogicalLocation) -> Option<LogicalLocation> {
    let mut a = *loc;
    loop {
        if set.contains(&a) {
            return Some(a);
        }
        a = a.parent()?;
    }
}

/// The locations at the same level that touch `loc`, wrapped through periodic boundaries.
fn touching(grid: &RootGrid, loc: &LogicalLocation) -> impl Iterator<Item = LogicalLocation> {
    let (l, grid) = (*loc, *grid);
    Element::neighbors(grid.ndim()).filter_map(move |e| {
        let o = e.offset();
        grid.wrap(l.level(), [0, 1, 2].map(|d| l.lx_dir(d) + o[d] as i64))
            .map(|(t, _)| t)
    })
}

/// Apply `flags` (one per leaf of `forest`) under `rules`; see the module documentation.
///
/// ```
/// use starhalo_mesh::{remesh, Forest, RefinementFlag, RefinementRules, RootGrid};
/// let grid = RootGrid::new(2, [2, 2, 1], [false; 3]).unwrap();
/// let f = Forest::uniform(grid, 1); // 16 blocks at level 1
/// let mut flags = vec![RefinementFlag::Same; f.len()];
/// flags[0] = RefinementFlag::Refine;
/// let r = remesh(&f, &flags, &RefinementRules::adaptive(3)).unwrap();
/// assert_eq!(r.forest.len(), 16 - 1 + 4);
/// ```
pub fn remesh(
    forest: &Forest,
    flags: &[RefinementFlag],
    rules: &RefinementRules,
) -> Result<Remesh, MeshError> {
    if flags.len() != forest.len() {
        return Err(MeshError::Length {
            what: "refinement flags",
            expected: forest.len(),
            got: flags.len(),
        });
    }
    let grid = *forest.grid();
    let ndim = grid.ndim();
    let mut set: HashSet<LogicalLocation> = forest.leaves().iter().copied().collect();

    // 1 and 2: refinement with ripple balancing, repeated until static regions are satisfied.
    let mut queue: Vec<LogicalLocation> = forest
        .leaves()
        .iter()
        .zip(flags)
        .filter(|(l, &f)| f == RefinementFlag::Refine && l.level() < rules.max_level)
        .map(|(l, _)| *l)
        .collect();
    let mut refined = false;
    loop {
        while let Some(b) = queue.pop() {
            if !set.remove(&b) {
                continue;
            }
            refined = true;
            set.extend(b.children(ndim));
            if set.len() > rules.max_blocks {
                return Err(MeshError::TooManyBlocks {
                    limit: rules.max_blocks,
                });
            }
            for t in touching(&grid, &b) {
                if let Some(c) = covering(&set, &t) {
                    if c.level() < b.level() {
                        queue.push(c);
                    }
                }
            }
        }
        queue.extend(
            set.iter()
                .filter(|l| l.level() < rules.static_min_level(&grid, l).min(rules.max_level))
                .copied(),
        );
        if queue.is_empty() {
            break;
        }
    }

    // 3: derefinement of complete, unanimous sibling families.
    let mut votes: HashMap<LogicalLocation, usize> = HashMap::new();
    for (l, &f) in forest.leaves().iter().zip(flags) {
        if f == RefinementFlag::Derefine && set.contains(l) {
            if let Some(p) = l.parent() {
                *votes.entry(p).or_default() += 1;
            }
        }
    }
    let family = 1usize << ndim;
    let mut merges: Vec<LogicalLocation> = votes
        .into_iter()
        .filter(|&(p, n)| n == family && rules.static_min_level(&grid, &p) <= p.level())
        .map(|(p, _)| p)
        .filter(|p| {
            p.children(ndim)
                .iter()
                .all(|c| touching(&grid, c).all(|t| covering(&set, &t).is_some()))
        })
        .collect();
    if !refined && merges.is_empty() {
        // The leaves are the old ones, and forests are built in one order: the same forest.
        return Ok(Remesh {
            forest: forest.clone(),
            map: RemeshMap::identity(forest.len()),
        });
    }
    merges.sort_unstable();
    for p in merges {
        for c in p.children(ndim) {
            set.remove(&c);
        }
        set.insert(p);
    }

    let new = Forest::build(grid, set.into_iter().collect());
    let map = RemeshMap::between(forest, &new);
    Ok(Remesh { forest: new, map })
}

/// The forest a configuration starts with: the root grid refined as its static regions require.
/// Fails only when it would have more than `rules.max_blocks` leaves.
pub fn initial_forest(grid: RootGrid, rules: &RefinementRules) -> Result<Forest, MeshError> {
    if grid.num_trees() > rules.max_blocks {
        return Err(MeshError::TooManyBlocks {
            limit: rules.max_blocks,
        });
    }
    let f = Forest::uniform(grid, 0);
    let flags = vec![RefinementFlag::Same; f.len()];
    remesh(&f, &flags, rules).map(|r| r.forest)
}

/// True if no two touching leaves (through faces, edges, corners or periodic boundaries)
/// differ by more than one level.
pub fn is_balanced(forest: &Forest) -> bool {
    let ranks = vec![0; forest.len()];
    match crate::neighbor::find_neighbors(forest, &ranks) {
        Ok(all) => all
            .iter()
            .all(|b| b.neighbors.iter().all(|n| n.level_diff.abs() <= 1)),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags_for(
        f: &Forest,
        pick: impl Fn(&LogicalLocation) -> RefinementFlag,
    ) -> Vec<RefinementFlag> {
        f.leaves().iter().map(pick).collect()
    }

    #[test]
    fn a_remesh_that_changes_nothing_gives_the_same_forest_and_an_identity_map() {
        // A two-level forest: one family refined in a 2x2 root grid.
        let grid = RootGrid::new(2, [2, 2, 1], [true, false, false]).unwrap();
        let rules = RefinementRules::adaptive(2);
        let mut f = Forest::uniform(grid, 1);
        let mut flags = vec![RefinementFlag::Same; f.len()];
        flags[5] = RefinementFlag::Refine;
        f = remesh(&f, &flags, &rules).unwrap().forest;
        assert_eq!(f.max_level(), 2);
        // Nothing to do: all the same; refinement asked past max_level; merges asked by three
        // of a family of four.
        let unchanged = [
            flags_for(&f, |_| RefinementFlag::Same),
            flags_for(&f, |l| match l.level() {
                2 => RefinementFlag::Refine,
                _ => RefinementFlag::Same,
            }),
            flags_for(&f, |l| match (l.level(), l.lx()) {
                (2, [x, _, _]) if x % 2 == 0 => RefinementFlag::Derefine,
                (2, [_, y, _]) if y % 2 == 0 => RefinementFlag::Derefine,
                _ => RefinementFlag::Same,
            }),
        ];
        for flags in unchanged {
            let r = remesh(&f, &flags, &rules).unwrap();
            assert_eq!(r.forest.leaves(), f.leaves());
            assert!(r.map.is_identity());
            assert_eq!(r.map, RemeshMap::between(&f, &r.forest));
        }
        // A change still changes: the whole fine family merges.
        let merge = flags_for(&f, |l| match l.level() {
            2 => RefinementFlag::Derefine,
            _ => RefinementFlag::Same,
        });
        let r = remesh(&f, &merge, &rules).unwrap();
        assert_eq!(r.forest.len(), f.len() - 3);
        assert!(!r.map.is_identity());
        assert_eq!(RemeshMap::identity(f.len()), RemeshMap::between(&f, &f));
    }

    #[test]
    fn refinement_ripples_to_keep_2_to_1_balance_through_corners() {
        // 1 root block in 2-D; repeatedly refine the finest block touching the centre from
        // the lower left. Its diagonal neighbour across the centre must follow.
        let grid = RootGrid::new(2, [1, 1, 1], [false; 3]).unwrap();
        let rules = RefinementRules::adaptive(4);
        let mut f = Forest::uniform(grid, 0);
        for _ in 0..4 {
            let flags = flags_for(&f, |l| {
                let t = ((1i64 << l.level()) / 2 - 1).max(0);
                if l.lx() == [t, t, 0] {
                    RefinementFlag::Refine
                } else {
                    RefinementFlag::Same
                }
            });
            f = remesh(&f, &flags, &rules).unwrap().forest;
            assert!(is_balanced(&f));
        }
        assert_eq!(f.max_level(), 4);
        // Without balancing there would be 4*3 + 1 = 13 leaves.
        assert!(f.len() > 13);
        let g = f
            .covering_leaf(&LogicalLocation::new(4, [8, 8, 0]))
            .unwrap();
        assert_eq!(f.leaves()[g].level(), 3);
    }

    #[test]
    fn balance_crosses_periodic_boundaries() {
        let grid = RootGrid::new(1, [4, 1, 1], [true, false, false]).unwrap();
        let rules = RefinementRules::adaptive(3);
        let mut f = Forest::uniform(grid, 0);
        for _ in 0..3 {
            let flags = flags_for(&f, |l| {
                if l.lx()[0] == 0 {
                    RefinementFlag::Refine
                } else {
                    RefinementFlag::Same
                }
            });
            f = remesh(&f, &flags, &rules).unwrap().forest;
        }
        // The last root block (x = 3) touches block 0 through the periodic boundary.
        let last = f
            .covering_leaf(&LogicalLocation::new(3, [31, 0, 0]))
            .unwrap();
        assert_eq!(f.leaves()[last].level(), 2);
        assert!(is_balanced(&f));
    }

    #[test]
    fn derefine_needs_the_whole_family_and_respects_balance() {
        let grid = RootGrid::new(2, [1, 1, 1], [false; 3]).unwrap();
        let rules = RefinementRules::adaptive(3);
        let f = Forest::uniform(grid, 2);
        // Three of four siblings: nothing merges.
        let flags = flags_for(&f, |l| {
            if l.parent() == Some(LogicalLocation::new(1, [0, 0, 0])) && l.lx() != [1, 1, 0] {
                RefinementFlag::Derefine
            } else {
                RefinementFlag::Same
            }
        });
        let r = remesh(&f, &flags, &rules).unwrap();
        assert!(r.map.is_identity());
        // Whole family merges.
        let flags = flags_for(&f, |l| {
            if l.parent() == Some(LogicalLocation::new(1, [0, 0, 0])) {
                RefinementFlag::Derefine
            } else {
                RefinementFlag::Same
            }
        });
        let r = remesh(&f, &flags, &rules).unwrap();
        assert_eq!(r.forest.len(), 13);
        assert_eq!(
            r.map.origin[0],
            BlockOrigin::Merged {
                old: vec![0, 1, 2, 3]
            }
        );
        assert_eq!(r.map.fate[2], BlockFate::Merged { new: 0 });
        // A family next to a block being refined cannot merge (it would be 2 levels coarser).
        let flags = flags_for(&f, |l| match l.lx() {
            [2, 0, 0] => RefinementFlag::Refine,
            _ if l.parent() == Some(LogicalLocation::new(1, [0, 0, 0])) => RefinementFlag::Derefine,
            _ => RefinementFlag::Same,
        });
        let r = remesh(&f, &flags, &rules).unwrap();
        assert_eq!(r.forest.len(), 16 + 3);
        assert!(is_balanced(&r.forest));
        assert_eq!(
            r.map.fate[f.gid(&LogicalLocation::new(2, [2, 0, 0])).unwrap()],
            BlockFate::Refined {
                new: vec![4, 5, 6, 7]
            }
        );
    }

    #[test]
    fn static_regions_refine_at_start_and_block_derefinement() {
        let grid = RootGrid::new(2, [2, 2, 1], [false; 3]).unwrap();
        let rules = RefinementRules {
            max_level: 3,
            xmin: [0.0; 3],
            xmax: [1.0; 3],
            static_regions: vec![StaticRegion {
                xmin: [0.1, 0.1, 0.0],
                xmax: [0.2, 0.2, 1.0],
                level: 2,
                id: 0,
            }],
            max_blocks: usize::MAX,
        };
        let f = initial_forest(grid, &rules).unwrap();
        assert!(is_balanced(&f));
        let g = f
            .covering_leaf(&LogicalLocation::new(3, [1, 1, 0]))
            .unwrap();
        assert_eq!(f.leaves()[g].level(), 2);
        // A level-2 block in the region cannot merge even if flagged.
        let flags = vec![RefinementFlag::Derefine; f.len()];
        let r = remesh(&f, &flags, &rules).unwrap();
        let g = r
            .forest
            .covering_leaf(&LogicalLocation::new(3, [1, 1, 0]))
            .unwrap();
        assert_eq!(r.forest.leaves()[g].level(), 2);
    }

    #[test]
    fn derefine_counter_delays_and_resets() {
        let grid = RootGrid::new(1, [1, 1, 1], [false; 3]).unwrap();
        let f = Forest::uniform(grid, 1);
        let mut c = DerefineCounter::new(3);
        let d = vec![RefinementFlag::Derefine; 2];
        assert_eq!(c.filter(&f, &d), vec![RefinementFlag::Same; 2]);
        assert_eq!(c.filter(&f, &d), vec![RefinementFlag::Same; 2]);
        assert_eq!(c.filter(&f, &d), d);
        assert_eq!(c.count(&f.leaves()[0]), 3);
        let mixed = vec![RefinementFlag::Same, RefinementFlag::Derefine];
        assert_eq!(c.filter(&f, &mixed)[1], RefinementFlag::Derefine);
        assert_eq!(c.count(&f.leaves()[0]), 0);
    }
}
