//! The graph a rank contributes to a star forest: its roots and its leaves' roots.

use crate::error::SfError;

/// The address of a root: the owning rank and the root's offset there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RootRef {
    /// Owning rank in the forest's communicator.
    pub rank: i64,
    /// Index among that rank's roots.
    pub offset: u64,
}

/// One rank's part of a star forest.
///
/// Leaves are given by the rank that owns them: leaf `i` lives at local index `ilocal[i]`
/// (or `i` when `ilocal` is `None`: a contiguous leaf space) and connects to root `iremote[i]`.
/// Leaf indices not listed are isolated leaves: holes that take no part in communication.
///
/// ```
/// use starhalo_sf::{Graph, RootRef};
/// // Two roots here; leaves 0 and 2 read root 1 of rank 0 and root 0 of rank 1.
/// let g = Graph::new(2, Some(vec![0, 2]), vec![
///     RootRef { rank: 0, offset: 1 },
///     RootRef { rank: 1, offset: 0 },
/// ]);
/// assert_eq!(g.leaf_space(), 3);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Graph {
    /// Number of roots owned by this rank.
    pub nroots: usize,
    /// Local leaf indices (`None` = `0..iremote.len()`).
    pub ilocal: Option<Vec<usize>>,
    /// Root of each leaf.
    pub iremote: Vec<RootRef>,
}

impl Graph {
    /// A rank's graph from its parts.
    pub fn new(nroots: usize, ilocal: Option<Vec<usize>>, iremote: Vec<RootRef>) -> Self {
        Self {
            nroots,
            ilocal,
            iremote,
        }
    }

    /// Number of connected leaves.
    pub fn nleaves(&self) -> usize {
        self.iremote.len()
    }

    /// Local index of connected leaf `i`.
    pub fn leaf_index(&self, i: usize) -> usize {
        self.ilocal.as_ref().map_or(i, |l| l[i])
    }

    /// Length a leaf array must have: one past the largest leaf index.
    pub fn leaf_space(&self) -> usize {
        match &self.ilocal {
            None => self.iremote.len(),
            Some(l) => l.iter().max().map_or(0, |m| m.saturating_add(1)),
        }
    }

    /// Checks what this rank can check alone: `ilocal`'s length, root ranks in `0..size`,
    /// leaf indices given once, and offsets of self-owned roots below `nroots`.
    pub(crate) fn check_local(&self, rank: i32, size: usize) -> Result<(), SfError> {
        if let Some(l) = &self.ilocal {
            if l.len() != self.iremote.len() {
                return Err(SfError::IlocalLength {
                    ilocal: l.len(),
                    iremote: self.iremote.len(),
                });
            }
            // A leaf array must be indexable: at most isize::MAX units of at least a byte.
            let room = isize::MAX as usize;
            if let Some(&index) = l.iter().find(|&&i| i >= room) {
                return Err(SfError::IndexOutOfRange {
                    what: "leaf",
                    index,
                    len: room,
                });
            }
            // Sorted, not a bitmap of the leaf space: sparse leaf indices may be huge.
            let mut sorted = l.clone();
            sorted.sort_unstable();
            if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
                return Err(SfError::DuplicateLeaf(w[0]));
            }
        }
        for (i, r) in self.iremote.iter().enumerate() {
            if r.rank < 0 || r.rank >= size as i64 {
                return Err(SfError::RankOutOfRange {
                    leaf: self.leaf_index(i),
                    rank: r.rank,
                    size,
                });
            }
            if r.rank == i64::from(rank) && r.offset >= self.nroots as u64 {
                return Err(SfError::OffsetOutOfRange {
                    leaf_rank: rank,
                    rank,
                    offset: r.offset,
                    nroots: self.nroots,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(rank: i64, offset: u64) -> RootRef {
        RootRef { rank, offset }
    }

    #[test]
    fn local_checks_name_the_fault() {
        let g = Graph::new(1, Some(vec![usize::MAX]), vec![r(0, 0)]);
        assert!(matches!(
            g.check_local(0, 1),
            Err(SfError::IndexOutOfRange { what: "leaf", .. })
        ));
        let g = Graph::new(1, Some(vec![0, 1]), vec![r(0, 0)]);
        let e = g.check_local(0, 1).unwrap_err().to_string();
        assert_eq!(e, "ilocal lists 2 leaves but iremote lists 1");
        let g = Graph::new(1, Some(vec![3, 1, 3]), vec![r(0, 0); 3]);
        assert_eq!(g.check_local(0, 2), Err(SfError::DuplicateLeaf(3)));
        let g = Graph::new(1, None, vec![r(0, 0), r(2, 0)]);
        assert_eq!(
            g.check_local(0, 2),
            Err(SfError::RankOutOfRange {
                leaf: 1,
                rank: 2,
                size: 2
            })
        );
        let g = Graph::new(1, None, vec![r(0, 1)]);
        assert!(matches!(
            g.check_local(0, 1),
            Err(SfError::OffsetOutOfRange { offset: 1, .. })
        ));
        // A remote offset cannot be checked here; that is the root rank's job.
        assert_eq!(
            Graph::new(0, None, vec![r(1, 99)]).check_local(0, 2),
            Ok(())
        );
    }

    #[test]
    fn leaf_space_covers_isolated_leaves() {
        assert_eq!(Graph::new(0, Some(vec![5]), vec![r(0, 0)]).leaf_space(), 6);
        assert_eq!(Graph::new(0, None, vec![r(0, 0); 4]).leaf_space(), 4);
        assert_eq!(Graph::default().leaf_space(), 0);
    }
}
