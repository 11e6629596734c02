//! [`Mesh`]: configuration, forest, partition and derefinement counters in one place.

use std::sync::{Arc, OnceLock};

use crate::config::{block_range, BoundaryCondition, MeshConfig, RefinementKind};
use crate::error::MeshError;
use crate::field::{pack_partitions, IndexShape};
use crate::forest::{Forest, RootGrid};
use crate::loc::LogicalLocation;
use crate::multigrid::Multigrid;
use crate::neighbor::{find_neighbors, BlockNeighbors};
use crate::partition::{plan_moves, BlockMove, Partition};
use crate::refine::{
    initial_forest, is_balanced, remesh, BlockOrigin, DerefineCounter, RefinementFlag,
    RefinementRules, RemeshMap,
};

/// What a remesh did.
#[derive(Debug, Clone)]
pub struct RemeshOutcome {
    /// Old blocks to new blocks.
    pub map: RemeshMap,
    /// The data transfers, with source and destination ranks.
    pub moves: Vec<BlockMove>,
    /// Cost of each new block (inherited from the old blocks).
    pub costs: Vec<f64>,
}

/// A mesh: every rank holds all of it, as in Parthenon, and asks [`Mesh::partition`] which
/// blocks are its own.
///
/// ```
/// use starhalo_mesh::{Mesh, MeshConfig, RefinementFlag, RefinementKind};
/// let mut c = MeshConfig::new([32, 32, 1], [8, 8, 1]);
/// c.refinement = RefinementKind::Adaptive;
/// c.numlevel = 3;
/// c.derefine_count = 1;
/// let mut mesh = Mesh::new(c, 2).unwrap();
/// assert_eq!(mesh.forest().len(), 16);
/// let mut flags = vec![RefinementFlag::Same; 16];
/// flags[5] = RefinementFlag::Refine;
/// let out = mesh.remesh(&flags, None).unwrap();
/// assert_eq!(mesh.forest().len(), 19);
/// assert_eq!(out.map.origin.len(), 19);
/// assert_eq!(mesh.partition().blocks_of(0), 0..9);
/// ```
#[derive(Debug, Clone)]
pub struct Mesh {
    config: MeshConfig,
    rules: RefinementRules,
    forest: Forest,
    partition: Partition,
    counter: DerefineCounter,
    /// The neighbour records of the forest and partition, found once for the exchanges and
    /// flux corrections built on them; cleared when either changes.
    neighbors: OnceLock<Arc<[BlockNeighbors]>>,
}

impl Mesh {
    /// Validate `config`, build the root grid refined by its static regions, and split it over
    /// `nranks` ranks with equal costs.
    pub fn new(config: MeshConfig, nranks: usize) -> Result<Self, MeshError> {
        config.validate()?;
        let grid = RootGrid::new(config.ndim(), config.nrb(), config.periodic())?;
        let rules = RefinementRules::from_config(&config);
        let forest = initial_forest(grid, &rules)?;
        let partition = Partition::uniform(forest.len(), nranks)?;
        Ok(Self {
            counter: DerefineCounter::new(config.derefine_count),
            config,
            rules,
            forest,
            partition,
            neighbors: OnceLock::new(),
        })
    }

    /// Rebuild a mesh from stored state (a restart): the leaves in gid order, as
    /// [`Mesh::forest`] listed them, and each leaf's derefinement count, as
    /// [`Mesh::derefine_counts`] returned them, split over `nranks` ranks with equal costs.
    ///
    /// The leaves must tile the root grid of `config` exactly once, in Morton order, be 2:1
    /// balanced and respect its refinement: no leaf beyond the finest level or coarser than a
    /// static region it overlaps, and without adaptive refinement exactly the forest
    /// [`Mesh::new`] builds. Anything else is an error naming what is wrong.
    ///
    /// ```
    /// use starhalo_mesh::{Mesh, MeshConfig, RefinementFlag, RefinementKind};
    /// let mut c = MeshConfig::new([32, 32, 1], [8, 8, 1]);
    /// c.refinement = RefinementKind::Adaptive;
    /// c.numlevel = 2;
    /// c.derefine_count = 3;
    /// let mut mesh = Mesh::new(c.clone(), 2).unwrap();
    /// let mut flags = vec![RefinementFlag::Same; 16];
    /// flags[0] = RefinementFlag::Refine;
    /// mesh.remesh(&flags, None).unwrap();
    /// let flags = vec![RefinementFlag::Derefine; mesh.forest().len()];
    /// mesh.remesh(&flags, None).unwrap();
    /// let back = Mesh::restore(c, mesh.forest().leaves().to_vec(), 2, &mesh.derefine_counts())
    ///     .unwrap();
    /// assert_eq!(back.forest().leaves(), mesh.forest().leaves());
    /// assert_eq!(back.derefine_counts(), mesh.derefine_counts());
    /// assert_eq!(back.partition(), mesh.partition());
    /// ```
    pub fn restore(
        config: MeshConfig,
        leaves: Vec<LogicalLocation>,
        nranks: usize,
        derefine_counts: &[u32],
    ) -> Result<Self, MeshError> {
        config.validate()?;
        let grid = RootGrid::new(config.ndim(), config.nrb(), config.periodic())?;
        let rules = RefinementRules::from_config(&config);
        if leaves.len() > rules.max_blocks {
            return Err(MeshError::TooManyBlocks {
                limit: rules.max_blocks,
            });
        }
        let forest = Forest::from_leaves(grid, leaves.clone())?;
        if forest.leaves() != &leaves[..] {
            return Err(MeshError::ForestMismatch(
                "the leaves are not listed in Morton (gid) order".into(),
            ));
        }
        if !is_balanced(&forest) {
            return Err(MeshError::ForestMismatch(
                "two touching leaves differ by more than one level (not 2:1 balanced)".into(),
            ));
        }
        if let Some(l) = forest.leaves().iter().find(|l| l.level() > rules.max_level) {
            return Err(MeshError::ForestMismatch(format!(
                "{l} is finer than the finest level {} of the configuration",
                rules.max_level
            )));
        }
        if let Some(l) = forest
            .leaves()
            .iter()
            .find(|l| l.level() < rules.static_min_level(&grid, l).min(rules.max_level))
        {
            return Err(MeshError::ForestMismatch(format!(
                "{l} is coarser than a static refinement region it overlaps"
            )));
        }
        if config.refinement != RefinementKind::Adaptive
            && initial_forest(grid, &rules)?.leaves() != forest.leaves()
        {
            return Err(MeshError::ForestMismatch(
                "without adaptive refinement the forest is the one the configuration builds, \
                 and these leaves differ from it"
                    .into(),
            ));
        }
        let counter =
            DerefineCounter::with_counts(config.derefine_count, &forest, derefine_counts)?;
        let partition = Partition::uniform(forest.len(), nranks)?;
        Ok(Self {
            config,
            rules,
            forest,
            partition,
            counter,
            neighbors: OnceLock::new(),
        })
    }

    /// Each leaf's derefinement count (consecutive remeshes that asked it to derefine), in gid
    /// order: the state [`Mesh::restore`] takes back.
    pub fn derefine_counts(&self) -> Vec<u32> {
        self.counter.counts_of(&self.forest)
    }

    /// The configuration.
    pub fn config(&self) -> &MeshConfig {
        &self.config
    }

    /// Sets [`MeshConfig::max_blocks`] for the remeshes to come (say, from the memory left
    /// now). A mesh already larger stays; it may not grow.
    pub fn set_max_blocks(&mut self, max_blocks: usize) {
        self.config.max_blocks = max_blocks;
        self.rules.max_blocks = max_blocks;
    }

    /// The leaves.
    pub fn forest(&self) -> &Forest {
        &self.forest
    }

    /// Which rank holds which block.
    pub fn partition(&self) -> &Partition {
        &self.partition
    }

    /// Number of dimensions.
    pub fn ndim(&self) -> usize {
        self.forest.ndim()
    }

    /// Neighbour records of every block, found at the first call after the blocks or their
    /// ranks change and shared after that.
    pub fn neighbors(&self) -> Result<Arc<[BlockNeighbors]>, MeshError> {
        if let Some(n) = self.neighbors.get() {
            return Ok(n.clone());
        }
        let found = find_neighbors(&self.forest, &self.partition.ranks())?;
        Ok(self.neighbors.get_or_init(|| found.into()).clone())
    }

    /// Index ranges of every block.
    pub fn index_shape(&self) -> Result<IndexShape, MeshError> {
        IndexShape::new(self.config.block_nx, self.config.nghost, self.ndim())
    }

    /// Index ranges of each block's coarse buffer, on a multilevel mesh.
    pub fn coarse_shape(&self) -> Result<Option<IndexShape>, MeshError> {
        if self.config.is_multilevel() {
            self.index_shape()?.coarse().map(Some)
        } else {
            Ok(None)
        }
    }

    /// Physical bounds `(xmin, xmax)` of block `gid`.
    pub fn bounds(&self, gid: usize) -> Option<([f64; 3], [f64; 3])> {
        let l = self.forest.loc(gid)?;
        let n = self.forest.grid().extent(l.level());
        let (mut lo, mut hi) = (self.config.xmin, self.config.xmax);
        for d in 0..self.ndim() {
            let c = &self.config;
            (lo[d], hi[d]) = block_range(c.xmin[d], c.xmax[d], l.lx_dir(d), n[d]);
        }
        Some((lo, hi))
    }

    /// Volume of one cell of block `gid`: across each active direction the mesh's extent over
    /// the cells of the block's level, across an inactive one the extent itself. Blocks of one
    /// level share it bit for bit, whatever their size.
    pub fn cell_volume(&self, gid: usize) -> Option<f64> {
        let n = self.forest.grid().extent(self.forest.loc(gid)?.level());
        let c = &self.config;
        Some(
            (0..3)
                .map(|d| {
                    let width = c.xmax[d] - c.xmin[d];
                    if d < self.ndim() {
                        width / (n[d] as f64 * c.block_nx[d] as f64)
                    } else {
                        width
                    }
                })
                .product(),
        )
    }

    /// The physical boundary condition on face `side` (0 inner, 1 outer) of direction `dir` of
    /// block `gid`, or `None` if that face lies inside the domain (or `dir` is inactive).
    /// Periodic faces report [`BoundaryCondition::Periodic`].
    pub fn face_boundary(&self, gid: usize, dir: usize, side: usize) -> Option<BoundaryCondition> {
        let l = self.forest.loc(gid)?;
        if dir >= self.ndim() || side > 1 {
            return None;
        }
        let n = self.forest.grid().extent(l.level());
        let on_edge = if side == 0 {
            l.lx_dir(dir) == 0
        } else {
            l.lx_dir(dir) == n[dir] - 1
        };
        on_edge.then_some(self.config.bc[dir][side])
    }

    /// Mesh-data partitions of `rank`'s blocks (`pack_size` from the configuration).
    pub fn pack_partitions(&self, rank: usize) -> Vec<Vec<usize>> {
        pack_partitions(self.partition.blocks_of(rank), self.config.pack_size)
    }

    /// Apply refinement flags (one per block, in gid order), counting derefinement requests
    /// against `derefine_count`, and repartition with the old blocks' `costs` (default 1 each;
    /// children inherit their parent's cost, a merged block the mean of its children's).
    pub fn remesh(
        &mut self,
        flags: &[RefinementFlag],
        costs: Option<&[f64]>,
    ) -> Result<RemeshOutcome, MeshError> {
        if flags.len() != self.forest.len() {
            return Err(MeshError::Length {
                what: "refinement flags",
                expected: self.forest.len(),
                got: flags.len(),
            });
        }
        let old_costs = match costs {
            Some(c) if c.len() != self.forest.len() => {
                return Err(MeshError::Length {
                    what: "block costs",
                    expected: self.forest.len(),
                    got: c.len(),
                })
            }
            Some(c) => c.to_vec(),
            None => vec![1.0; self.forest.len()],
        };
        // Static and no refinement fix the forest at start (a restart checks that it is the
        // one the configuration builds); only the partition may change.
        let refinement = self.config.refinement;
        if refinement != RefinementKind::Adaptive
            && flags.iter().any(|&f| f != RefinementFlag::Same)
        {
            return Err(MeshError::invalid(
                "parthenon/mesh/refinement",
                refinement,
                "fixes the blocks at start: only adaptive refinement takes refine or derefine flags",
            ));
        }
        // Check the costs before anything changes, and update the derefinement counts only
        // once the remesh has succeeded: a failed remesh leaves the mesh as it was.
        Partition::balanced(&old_costs, self.partition.nranks())?;
        let mut counter = self.counter.clone();
        let flags = counter.filter(&self.forest, flags);
        let r = remesh(&self.forest, &flags, &self.rules)?;
        let new_costs: Vec<f64> = r
            .map
            .origin
            .iter()
            .map(|o| match o {
                BlockOrigin::Kept { old } | BlockOrigin::Refined { old } => old_costs[*old],
                BlockOrigin::Merged { old } => {
                    old.iter().map(|&g| old_costs[g]).sum::<f64>() / old.len().max(1) as f64
                }
            })
            .collect();
        let partition = Partition::balanced(&new_costs, self.partition.nranks())?;
        let moves = plan_moves(&r.map, &self.partition, &partition)?;
        self.forest = r.forest;
        self.partition = partition;
        self.neighbors = OnceLock::new();
        self.counter = counter;
        Ok(RemeshOutcome {
            map: r.map,
            moves,
            costs: new_costs,
        })
    }

    /// Repartition the current blocks by `costs`; returns the blocks that change rank.
    pub fn repartition(&mut self, costs: &[f64]) -> Result<Vec<BlockMove>, MeshError> {
        if costs.len() != self.forest.len() {
            return Err(MeshError::Length {
                what: "block costs",
                expected: self.forest.len(),
                got: costs.len(),
            });
        }
        let partition = Partition::balanced(costs, self.partition.nranks())?;
        let map = RemeshMap::identity(self.forest.len());
        let moves = plan_moves(&map, &self.partition, &partition)?
            .into_iter()
            .filter(|m| !m.is_local())
            .collect();
        self.partition = partition;
        self.neighbors = OnceLock::new();
        Ok(moves)
    }

    /// The multigrid hierarchy below the current leaves.
    pub fn multigrid(&self) -> Result<Multigrid, MeshError> {
        Multigrid::build(
            &self.forest,
            &self.partition.ranks(),
            self.config.block_nx,
            self.config.nghost,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StaticRegion;
    use std::collections::BTreeMap;

    fn deck(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn neighbors_are_found_once_and_again_after_a_change() {
        let mut c = MeshConfig::new([32, 32, 1], [8, 8, 1]);
        c.refinement = RefinementKind::Adaptive;
        c.numlevel = 2;
        let mut m = Mesh::new(c, 2).unwrap();
        let fresh = |m: &Mesh| find_neighbors(m.forest(), &m.partition().ranks()).unwrap();
        let first = m.neighbors().unwrap();
        assert!(Arc::ptr_eq(&first, &m.neighbors().unwrap()));
        assert_eq!(*first, *fresh(&m));
        // A remesh changes the blocks, a repartition their ranks: found anew each time.
        let mut flags = vec![RefinementFlag::Same; 16];
        flags[5] = RefinementFlag::Refine;
        m.remesh(&flags, None).unwrap();
        let refined = m.neighbors().unwrap();
        assert_eq!(refined.len(), 19);
        assert_eq!(*refined, *fresh(&m));
        let mut costs = vec![1.0; 19];
        costs[0] = 30.0;
        assert!(!m.repartition(&costs).unwrap().is_empty());
        let moved = m.neighbors().unwrap();
        assert_ne!(*moved, *refined);
        assert_eq!(*moved, *fresh(&m));
        // A copy shares them until it changes.
        let copy = m.clone();
        assert!(Arc::ptr_eq(&moved, &copy.neighbors().unwrap()));
    }

    #[test]
    fn no_mesh_grows_beyond_max_blocks_and_a_refused_remesh_changes_nothing() {
        let mut c = MeshConfig::new([64, 64, 1], [8, 8, 1]);
        c.max_blocks = 63;
        assert_eq!(
            Mesh::new(c.clone(), 1).unwrap_err(),
            MeshError::TooManyBlocks { limit: 63 }
        );
        // A static region over everything: 64 roots become 256 blocks at level 1.
        c.max_blocks = 255;
        c.numlevel = 2;
        c.refinement = RefinementKind::Static;
        c.static_regions.push(StaticRegion {
            xmin: [0.0; 3],
            xmax: [1.0; 3],
            level: 1,
            id: 0,
        });
        assert_eq!(
            Mesh::new(c.clone(), 1).unwrap_err(),
            MeshError::TooManyBlocks { limit: 255 }
        );
        c.max_blocks = 256;
        let m = Mesh::new(c.clone(), 2).unwrap();
        let leaves = m.forest().leaves().to_vec();
        c.max_blocks = 255;
        let counts = vec![0; leaves.len()];
        assert_eq!(
            Mesh::restore(c, leaves, 2, &counts).unwrap_err(),
            MeshError::TooManyBlocks { limit: 255 }
        );

        // Adaptive: refining one block of 64 gives 67; refining all but one gives more than 200.
        let mut c = MeshConfig::new([64, 64, 1], [8, 8, 1]);
        c.refinement = RefinementKind::Adaptive;
        c.numlevel = 3;
        c.max_blocks = 200;
        let mut m = Mesh::new(c, 2).unwrap();
        let mut flags = vec![RefinementFlag::Same; 64];
        flags[9] = RefinementFlag::Refine;
        m.remesh(&flags, None).unwrap();
        assert_eq!(m.forest().len(), 67);
        let before = m.forest().clone();
        let flags = vec![RefinementFlag::Refine; 67];
        assert_eq!(
            m.remesh(&flags, None).unwrap_err(),
            MeshError::TooManyBlocks { limit: 200 }
        );
        assert_eq!(m.forest().leaves(), before.leaves());
    }

    #[test]
    fn static_deck_builds_refined_mesh_with_physical_bounds() {
        let c = MeshConfig::from_map(&deck(&[
            ("parthenon/mesh/nx1", "64"),
            ("parthenon/mesh/nx2", "64"),
            ("parthenon/mesh/x1min", "-1"),
            ("parthenon/mesh/x1max", "1"),
            ("parthenon/mesh/ix1_bc", "reflecting"),
            ("parthenon/mesh/ox2_bc", "user"),
            ("parthenon/meshblock/nx1", "16"),
            ("parthenon/meshblock/nx2", "16"),
            ("parthenon/mesh/numlevel", "3"),
            ("parthenon/static_refinement0/x1min", "-0.1"),
            ("parthenon/static_refinement0/x1max", "0.1"),
            ("parthenon/static_refinement0/x2min", "0.4"),
            ("parthenon/static_refinement0/x2max", "0.6"),
            ("parthenon/static_refinement0/level", "2"),
            ("parthenon/mesh/pack_size", "3"),
        ]))
        .unwrap();
        assert_eq!(c.refinement, RefinementKind::Static);
        let mesh = Mesh::new(c, 3).unwrap();
        assert_eq!(mesh.forest().max_level(), 2);
        assert!(crate::refine::is_balanced(mesh.forest()));
        // Every block overlapping the region is at level 2; the others are coarser.
        let mut in_region = 0;
        for g in 0..mesh.forest().len() {
            let (lo, hi) = mesh.bounds(g).unwrap();
            assert!(lo[0] >= -1.0 && hi[0] <= 1.0 && lo[0] < hi[0]);
            let overlaps = lo[0] < 0.1 && hi[0] > -0.1 && lo[1] < 0.6 && hi[1] > 0.4;
            if overlaps {
                in_region += 1;
                assert_eq!(mesh.forest().leaves()[g].level(), 2);
            }
        }
        // x: 2 level-2 blocks of width 0.125 each side of 0; y: (0.375, 0.625) in 4 of 1/16.
        assert_eq!(in_region, 2 * 4);
        assert_eq!(
            mesh.face_boundary(0, 0, 0),
            Some(BoundaryCondition::Reflecting)
        );
        assert_eq!(mesh.face_boundary(0, 0, 1), None);
        let last = mesh.forest().len() - 1;
        assert_eq!(
            mesh.face_boundary(last, 1, 1),
            Some(BoundaryCondition::User)
        );
        let shape = mesh.index_shape().unwrap();
        assert_eq!(shape.nx(), [16, 16, 1]);
        assert_eq!(
            mesh.coarse_shape().unwrap().map(|s| s.nx()),
            Some([8, 8, 1])
        );
        let packs = mesh.pack_partitions(1);
        assert!(packs.iter().all(|p| p.len() <= 3));
        assert_eq!(
            packs.concat(),
            mesh.partition().blocks_of(1).collect::<Vec<_>>()
        );
        let mg = mesh.multigrid().unwrap();
        assert_eq!(mg.levels()[0].forest.len(), mesh.forest().len());
        assert_eq!(mg.coarsest().map(|l| l.block_nx), Some([2, 2, 1]));
    }

    #[test]
    fn a_static_mesh_takes_no_refinement_flags_but_repartitions() {
        let c = MeshConfig::from_map(&deck(&[
            ("parthenon/mesh/nx1", "32"),
            ("parthenon/mesh/nx2", "32"),
            ("parthenon/meshblock/nx1", "8"),
            ("parthenon/meshblock/nx2", "8"),
            ("parthenon/mesh/numlevel", "3"),
            ("parthenon/static_refinement0/x1min", "0.4"),
            ("parthenon/static_refinement0/x1max", "0.6"),
            ("parthenon/static_refinement0/x2min", "0.4"),
            ("parthenon/static_refinement0/x2max", "0.6"),
            ("parthenon/static_refinement0/level", "2"),
        ]))
        .unwrap();
        let mut mesh = Mesh::new(c, 2).unwrap();
        let n = mesh.forest().len();
        let before = mesh.forest().leaves().to_vec();
        for f in [RefinementFlag::Refine, RefinementFlag::Derefine] {
            let e = mesh.remesh(&vec![f; n], None).unwrap_err();
            assert_eq!(e.key(), Some("parthenon/mesh/refinement"), "{e}");
        }
        let mut costs = vec![1.0; n];
        costs[0] = n as f64;
        let out = mesh.remesh(&vec![RefinementFlag::Same; n], Some(&costs));
        assert!(out.unwrap().map.is_identity());
        assert_eq!(mesh.forest().leaves(), &before[..]);
        assert_eq!(mesh.partition().blocks_of(0), 0..1, "block 0 costs half");
    }

    #[test]
    fn a_plane_on_the_upper_domain_edge_refines_the_last_block() {
        // 0.6 + 0.9 / 3 rounds to 0.8999999999999999: the last block must still end at x1max.
        let c = MeshConfig::from_map(&deck(&[
            ("parthenon/mesh/nx1", "24"),
            ("parthenon/mesh/x1max", "0.9"),
            ("parthenon/meshblock/nx1", "8"),
            ("parthenon/mesh/numlevel", "2"),
            ("parthenon/static_refinement0/x1min", "0.9"),
            ("parthenon/static_refinement0/x1max", "0.9"),
            ("parthenon/static_refinement0/level", "1"),
        ]))
        .unwrap();
        let mesh = Mesh::new(c, 1).unwrap();
        let levels: Vec<u32> = mesh.forest().leaves().iter().map(|l| l.level()).collect();
        assert_eq!(levels, [0, 0, 1, 1]);
        assert_eq!(mesh.bounds(3).unwrap().1[0], 0.9);
    }

    #[test]
    fn the_finest_level_the_config_allows_restarts_and_counts_saturate() {
        let mut c = MeshConfig::new([8, 1, 1], [8, 1, 1]);
        c.refinement = RefinementKind::Adaptive;
        c.numlevel = crate::loc::MAX_COORD_BITS + 1;
        c.validate().unwrap();
        let mut mesh = Mesh::new(c.clone(), 1).unwrap();
        for _ in 0..c.numlevel {
            let mut flags = vec![RefinementFlag::Same; mesh.forest().len()];
            flags[0] = RefinementFlag::Refine;
            mesh.remesh(&flags, None).unwrap();
        }
        assert_eq!(mesh.forest().max_level(), crate::loc::MAX_COORD_BITS);
        let leaves = mesh.forest().leaves().to_vec();
        let n = leaves.len();
        let mut back = Mesh::restore(c, leaves, 1, &vec![u32::MAX; n]).unwrap();
        back.remesh(&vec![RefinementFlag::Derefine; n], None)
            .unwrap();
        assert!(back.derefine_counts().contains(&u32::MAX));
    }

    #[test]
    fn derefine_count_delays_merging_and_costs_drive_partition() {
        let mut c = MeshConfig::new([16, 1, 1], [4, 1, 1]);
        c.refinement = RefinementKind::Adaptive;
        c.numlevel = 2;
        c.derefine_count = 2;
        let mut mesh = Mesh::new(c, 2).unwrap();
        let mut flags = vec![RefinementFlag::Same; 4];
        flags[0] = RefinementFlag::Refine;
        mesh.remesh(&flags, None).unwrap();
        assert_eq!(mesh.forest().len(), 5);
        let mut d = vec![RefinementFlag::Same; 5];
        d[0] = RefinementFlag::Derefine;
        d[1] = RefinementFlag::Derefine;
        let out = mesh.remesh(&d, None).unwrap();
        assert!(out.map.is_identity());
        let out = mesh.remesh(&d, Some(&[1.0, 1.0, 4.0, 1.0, 1.0])).unwrap();
        assert_eq!(mesh.forest().len(), 4);
        assert_eq!(out.costs, vec![1.0, 4.0, 1.0, 1.0]);
        assert_eq!(mesh.partition().blocks_of(0), 0..2);
        assert!(out.moves.iter().any(|m| m.old_gid == 0 && m.new_gid == 0));
        let moved = mesh.repartition(&[1.0, 1.0, 1.0, 1.0]).unwrap();
        assert!(moved.is_empty());
        let moved = mesh.repartition(&[5.0, 1.0, 1.0, 1.0]).unwrap();
        assert_eq!(moved.len(), 1);
        assert_eq!(
            (moved[0].old_gid, moved[0].from_rank, moved[0].to_rank),
            (1, 0, 1)
        );
        assert!(mesh.remesh(&[RefinementFlag::Same], None).is_err());
        // Bad costs are an error that leaves the mesh and its derefinement counts unchanged.
        let n = mesh.forest().len();
        let before = mesh.forest().leaves().to_vec();
        let d = vec![RefinementFlag::Derefine; n];
        assert!(mesh.remesh(&d, Some(&vec![f64::NAN; n])).is_err());
        assert_eq!(mesh.forest().leaves(), &before[..]);
        assert_eq!(mesh.counter.count(&before[0]), 0);
    }

    #[test]
    fn restore_continues_derefinement_and_rejects_forests_the_config_cannot_have() {
        let mut c = MeshConfig::new([16, 16, 1], [4, 4, 1]);
        c.refinement = RefinementKind::Adaptive;
        c.numlevel = 3;
        c.derefine_count = 3;
        let mut mesh = Mesh::new(c.clone(), 3).unwrap();
        let mut flags = vec![RefinementFlag::Same; 16];
        flags[0] = RefinementFlag::Refine;
        mesh.remesh(&flags, None).unwrap();
        let leaves = mesh.forest().leaves().to_vec();
        assert_eq!(leaves.len(), 19);
        // Two derefinement requests of the four children: one short of the threshold.
        let mut d = vec![RefinementFlag::Same; 19];
        d[..4].fill(RefinementFlag::Derefine);
        mesh.remesh(&d, None).unwrap();
        mesh.remesh(&d, None).unwrap();
        assert_eq!(mesh.forest().len(), 19);
        let counts = mesh.derefine_counts();
        assert_eq!(&counts[..5], &[2, 2, 2, 2, 0]);
        let mut back = Mesh::restore(c.clone(), leaves.clone(), 3, &counts).unwrap();
        assert_eq!(back.partition(), mesh.partition());
        assert_eq!(back.derefine_counts(), counts);
        // The third request merges on both; a counter restarted from zero does not.
        let mut fresh = Mesh::restore(c.clone(), leaves.clone(), 3, &[0; 19]).unwrap();
        mesh.remesh(&d, None).unwrap();
        back.remesh(&d, None).unwrap();
        fresh.remesh(&d, None).unwrap();
        assert_eq!(back.forest().len(), 16);
        assert_eq!(back.forest().leaves(), mesh.forest().leaves());
        assert_eq!(fresh.forest().len(), 19);

        let bad = |c: &MeshConfig, leaves: Vec<LogicalLocation>| {
            let n = leaves.len();
            match Mesh::restore(c.clone(), leaves, 3, &vec![0; n]) {
                Err(MeshError::BadLeaves(m) | MeshError::ForestMismatch(m)) => m,
                other => panic!("expected a rejected forest, got {other:?}"),
            }
        };
        let mut swapped = leaves.clone();
        swapped.swap(0, 1);
        assert!(bad(&c, swapped).contains("Morton"));
        assert!(bad(&c, leaves[1..].to_vec()).contains("cover"));
        // Refine the inner child once more, alone: it touches level-0 blocks.
        let mut c4 = c.clone();
        c4.numlevel = 4;
        let inner = LogicalLocation::new(1, [1, 1, 0]);
        let mut deep = leaves.clone();
        deep.retain(|l| *l != inner);
        deep.extend(inner.children(2));
        deep.sort_unstable();
        assert!(bad(&c4, deep).contains("2:1"));
        // Level 1 is too fine for a configuration with one level.
        let mut c1 = c.clone();
        c1.numlevel = 1;
        assert!(bad(&c1, leaves.clone()).contains("finest level"));
        assert!(matches!(
            Mesh::restore(c.clone(), leaves.clone(), 3, &[0; 5]),
            Err(MeshError::Length { .. })
        ));
        // Static refinement: the region must stay refined, and nothing else may be.
        let mut s = c.clone();
        s.refinement = RefinementKind::Static;
        s.static_regions = vec![crate::config::StaticRegion {
            xmin: [0.9, 0.9, 0.0],
            xmax: [1.0, 1.0, 1.0],
            level: 1,
            id: 0,
        }];
        let configured = Mesh::new(s.clone(), 2).unwrap();
        let ok = configured.forest().leaves().to_vec();
        assert!(Mesh::restore(s.clone(), ok.clone(), 2, &vec![0; ok.len()]).is_ok());
        assert!(bad(
            &s,
            Forest::uniform(*configured.forest().grid(), 0)
                .leaves()
                .to_vec()
        )
        .contains("static"));
        let mut extra = ok.clone();
        extra.retain(|l| l.level() == 1 || l.lx() != [0, 0, 0]);
        extra.extend(LogicalLocation::new(0, [0, 0, 0]).children(2));
        extra.sort_unstable();
        assert!(bad(&s, extra).contains("configuration"));
    }
}
