//! Partitioning: blocks in Morton order split over ranks by cost, and the plan of moves after a
//! remesh.
//!
//! Blocks are listed in Morton order (their gid). Each rank gets one contiguous run of gids, so
//! a block's local id (lid) on its rank is `gid - first gid of the rank`. A block goes to the
//! rank whose share of the total cost contains the midpoint of the block's own cost interval;
//! every rank's load is then within one block's cost of the ideal (`total / nranks`).

use crate::error::MeshError;
use crate::refine::{BlockOrigin, RemeshMap};
use std::ops::Range;

/// Which rank holds which blocks.
///
/// ```
/// use starhalo_mesh::Partition;
/// let p = Partition::balanced(&[1.0; 10], 3).unwrap();
/// assert_eq!(p.blocks_of(0), 0..3);
/// assert_eq!(p.blocks_of(1), 3..7);
/// assert_eq!(p.rank_of(5), Some(1));
/// assert_eq!(p.lid_of(5), Some(2));
/// assert_eq!(p.gid_of(2, 1), Some(8));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    /// `starts[r]..starts[r + 1]` are the gids of rank `r`.
    starts: Vec<usize>,
}

impl Partition {
    /// Split blocks with `costs` (in gid order) over `nranks` ranks. Costs must be finite and
    /// positive.
    pub fn balanced(costs: &[f64], nranks: usize) -> Result<Self, MeshError> {
        if nranks == 0 {
            return Err(MeshError::Partition("need at least one rank".into()));
        }
        if nranks > i32::MAX as usize {
            return Err(MeshError::Partition(format!(
                "{nranks} ranks: an MPI communicator has at most {} ranks",
                i32::MAX
            )));
        }
        if let Some((g, c)) = costs
            .iter()
            .enumerate()
            .find(|(_, c)| !(c.is_finite() && **c > 0.0))
        {
            return Err(MeshError::Partition(format!(
                "block {g} has cost {c}; costs must be finite and positive"
            )));
        }
        let total: f64 = costs.iter().sum();
        if !total.is_finite() {
            return Err(MeshError::Partition(
                "the total cost overflows; scale the costs down".into(),
            ));
        }
        let ideal = total / nranks as f64;
        let mut starts = vec![0usize; nranks + 1];
        let mut before = 0.0;
        let mut rank_of = Vec::with_capacity(costs.len());
        for &c in costs {
            let mid = before + 0.5 * c;
            let r = ((mid / ideal) as usize).min(nranks - 1);
            rank_of.push(r);
            before += c;
        }
        // rank_of is non-decreasing; record the first gid of each rank.
        let mut g = 0;
        for (r, s) in starts.iter_mut().enumerate().skip(1) {
            while g < rank_of.len() && rank_of[g] < r {
                g += 1;
            }
            *s = g;
        }
        starts[nranks] = costs.len();
        Ok(Self { starts })
    }

    /// `nblocks` blocks of equal cost over `nranks` ranks.
    pub fn uniform(nblocks: usize, nranks: usize) -> Result<Self, MeshError> {
        Self::balanced(&vec![1.0; nblocks], nranks)
    }

    /// A partition from explicit first gids per rank (`starts.len() = nranks + 1`,
    /// non-decreasing, starting at 0).
    pub fn from_starts(starts: Vec<usize>) -> Result<Self, MeshError> {
        if starts.len() < 2 || starts[0] != 0 || starts.windows(2).any(|w| w[0] > w[1]) {
            return Err(MeshError::Partition(format!("bad rank starts {starts:?}")));
        }
        Ok(Self { starts })
    }

    /// Number of ranks.
    pub fn nranks(&self) -> usize {
        self.starts.len() - 1
    }

    /// Number of blocks.
    pub fn nblocks(&self) -> usize {
        self.starts.last().copied().unwrap_or(0)
    }

    /// The gids of `rank` (empty for a rank out of range).
    pub fn blocks_of(&self, rank: usize) -> Range<usize> {
        match (self.starts.get(rank), self.starts.get(rank + 1)) {
            (Some(&a), Some(&b)) => a..b,
            _ => 0..0,
        }
    }

    /// The rank holding `gid`.
    pub fn rank_of(&self, gid: usize) -> Option<usize> {
        if gid >= self.nblocks() {
            return None;
        }
        // The last rank whose first gid is <= gid (empty ranks share a start).
        Some(self.starts.partition_point(|&s| s <= gid) - 1)
    }

    /// The local id of `gid` on its rank.
    pub fn lid_of(&self, gid: usize) -> Option<usize> {
        self.rank_of(gid).map(|r| gid - self.starts[r])
    }

    /// The gid of local block `lid` of `rank`.
    pub fn gid_of(&self, rank: usize, lid: usize) -> Option<usize> {
        let r = self.blocks_of(rank);
        (lid < r.len()).then(|| r.start + lid)
    }

    /// Rank of every gid, in gid order.
    pub fn ranks(&self) -> Vec<usize> {
        (0..self.nranks())
            .flat_map(|r| self.blocks_of(r).map(move |_| r))
            .collect()
    }

    /// Total cost per rank.
    pub fn loads(&self, costs: &[f64]) -> Vec<f64> {
        (0..self.nranks())
            .map(|r| self.blocks_of(r).filter_map(|g| costs.get(g)).sum())
            .collect()
    }
}

/// How a new block's data is produced from an old one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MoveKind {
    /// Copied unchanged.
    Same,
    /// Prolongated from a coarser old block.
    Prolongate,
    /// Restricted from a finer old block (one of several).
    Restrict,
}

/// One transfer of block data after a remesh.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockMove {
    /// The old block's gid.
    pub old_gid: usize,
    /// The new block's gid.
    pub new_gid: usize,
    /// The rank holding the old block.
    pub from_rank: usize,
    /// The rank that will hold the new block.
    pub to_rank: usize,
    /// What to do with the data.
    pub kind: MoveKind,
}

impl BlockMove {
    /// True if the data stays on one rank.
    pub fn is_local(&self) -> bool {
        self.from_rank == self.to_rank
    }
}

/// Every transfer a remesh needs, in new-gid order: one per (old block, new block) pair that
/// share cells.
pub fn plan_moves(
    map: &RemeshMap,
    old: &Partition,
    new: &Partition,
) -> Result<Vec<BlockMove>, MeshError> {
    for (what, p, expected) in [
        (
            "blocks in the partition before a remesh",
            old,
            map.fate.len(),
        ),
        (
            "blocks in the partition after a remesh",
            new,
            map.origin.len(),
        ),
    ] {
        if p.nblocks() != expected {
            return Err(MeshError::Length {
                what,
                expected,
                got: p.nblocks(),
            });
        }
    }
    let rank = |p: &Partition, g: usize| {
        p.rank_of(g)
            .ok_or_else(|| MeshError::Partition(format!("gid {g} is in no rank")))
    };
    let mut out = Vec::new();
    for (n, origin) in map.origin.iter().enumerate() {
        let to_rank = rank(new, n)?;
        let mut push = |o: usize, kind| -> Result<(), MeshError> {
            out.push(BlockMove {
                old_gid: o,
                new_gid: n,
                from_rank: rank(old, o)?,
                to_rank,
                kind,
            });
            Ok(())
        };
        match origin {
            BlockOrigin::Kept { old: o } => push(*o, MoveKind::Same)?,
            BlockOrigin::Refined { old: o } => push(*o, MoveKind::Prolongate)?,
            BlockOrigin::Merged { old: os } => {
                for o in os {
                    push(*o, MoveKind::Restrict)?;
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::refine::BlockFate;

    fn check(costs: &[f64], nranks: usize) {
        let p = Partition::balanced(costs, nranks).unwrap();
        assert_eq!(p.nranks(), nranks);
        assert_eq!(p.nblocks(), costs.len());
        let ideal = costs.iter().sum::<f64>() / nranks as f64;
        let cmax = costs.iter().cloned().fold(0.0, f64::max);
        for (r, load) in p.loads(costs).iter().enumerate() {
            assert!(
                (load - ideal).abs() <= cmax + 1e-9,
                "rank {r} load {load} ideal {ideal} cmax {cmax}"
            );
        }
        // Contiguous and covering: ranks() is non-decreasing and lid/gid round-trip.
        let ranks = p.ranks();
        assert_eq!(ranks.len(), costs.len());
        assert!(ranks.windows(2).all(|w| w[0] <= w[1]));
        for g in 0..costs.len() {
            let (r, l) = (p.rank_of(g).unwrap(), p.lid_of(g).unwrap());
            assert_eq!(r, ranks[g]);
            assert_eq!(p.gid_of(r, l), Some(g));
        }
        if costs.iter().all(|&c| c == costs[0]) && costs.len() >= nranks {
            assert!((0..nranks).all(|r| !p.blocks_of(r).is_empty()));
        }
    }

    #[test]
    fn splits_are_contiguous_and_within_one_block_of_ideal() {
        let mut x = 12345u64;
        for n in [1usize, 2, 7, 31, 100] {
            for nranks in [1usize, 2, 3, 8, 64] {
                check(&vec![1.0; n], nranks);
                let costs: Vec<f64> = (0..n)
                    .map(|_| {
                        x = x
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        0.1 + (x >> 40) as f64 / (1u64 << 24) as f64 * 5.0
                    })
                    .collect();
                check(&costs, nranks);
            }
        }
        // One heavy block: it sits alone, the rest share the other rank.
        let p = Partition::balanced(&[1.0, 1.0, 10.0, 1.0], 2).unwrap();
        assert_eq!(p.blocks_of(0), 0..2);
        assert_eq!(p.loads(&[1.0, 1.0, 10.0, 1.0]), vec![2.0, 11.0]);
    }

    #[test]
    fn bad_costs_are_errors() {
        assert!(Partition::balanced(&[1.0, 0.0], 2).is_err());
        assert!(Partition::balanced(&[1.0, f64::NAN], 2).is_err());
        assert!(Partition::balanced(&[1.0], 0).is_err());
        assert!(Partition::from_starts(vec![0, 3, 2]).is_err());
        assert!(Partition::balanced(&[f64::MAX, f64::MAX], 2).is_err());
        assert!(Partition::balanced(&[1.0], usize::MAX).is_err());
    }

    #[test]
    fn random_costs_give_contiguous_partitions_within_one_block_of_ideal() {
        // SplitMix64, so the test needs no extra crate.
        let mut state = 12345u64;
        let mut next = move || {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        for _ in 0..500 {
            let n = (next() % 200) as usize;
            let nranks = 1 + (next() % 40) as usize;
            // Costs spanning several orders of magnitude.
            let costs: Vec<f64> = (0..n)
                .map(|_| 10f64.powi((next() % 5) as i32 - 2) * (1 + next() % 9) as f64)
                .collect();
            let p = Partition::balanced(&costs, nranks).unwrap();
            assert_eq!((p.nranks(), p.nblocks()), (nranks, n));
            // Contiguous, in gid (Morton) order, covering every block once.
            let mut next_gid = 0;
            for r in 0..nranks {
                let b = p.blocks_of(r);
                assert_eq!(b.start, next_gid);
                next_gid = b.end;
                for g in b.clone() {
                    assert_eq!(p.rank_of(g), Some(r));
                    assert_eq!(p.gid_of(r, g - b.start), Some(g));
                }
            }
            assert_eq!(next_gid, n);
            let ideal = costs.iter().sum::<f64>() / nranks as f64;
            let cmax = costs.iter().cloned().fold(0.0, f64::max);
            for (r, load) in p.loads(&costs).iter().enumerate() {
                assert!(
                    (load - ideal).abs() <= cmax * (1.0 + 1e-12),
                    "rank {r}: load {load}, ideal {ideal}, largest block {cmax}"
                );
            }
        }
    }

    #[test]
    fn move_plan_follows_the_remesh_map() {
        // Old: 4 blocks on 2 ranks; new: block 0 kept, 1 refined into 4, 2+3 merged.
        let map = RemeshMap {
            origin: vec![
                BlockOrigin::Kept { old: 0 },
                BlockOrigin::Refined { old: 1 },
                BlockOrigin::Refined { old: 1 },
                BlockOrigin::Refined { old: 1 },
                BlockOrigin::Refined { old: 1 },
                BlockOrigin::Merged { old: vec![2, 3] },
            ],
            fate: vec![
                BlockFate::Kept { new: 0 },
                BlockFate::Refined {
                    new: vec![1, 2, 3, 4],
                },
                BlockFate::Merged { new: 5 },
                BlockFate::Merged { new: 5 },
            ],
        };
        let old = Partition::uniform(4, 2).unwrap();
        let new = Partition::uniform(6, 2).unwrap();
        let moves = plan_moves(&map, &old, &new).unwrap();
        assert_eq!(moves.len(), 7);
        let remote: Vec<_> = moves
            .iter()
            .filter(|m| !m.is_local())
            .map(|m| (m.old_gid, m.new_gid))
            .collect();
        assert_eq!(remote, vec![(1, 3), (1, 4)]);
        assert!(moves
            .iter()
            .filter(|m| m.new_gid == 5)
            .all(|m| m.kind == MoveKind::Restrict));
        assert!(plan_moves(&map, &new, &old).is_err());
    }
}
