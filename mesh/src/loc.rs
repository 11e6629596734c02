//! Logical locations of blocks and their Morton (Z-curve) order.
//!
//! A [`LogicalLocation`] is a refinement `level` and integer coordinates `lx` on the global grid
//! of blocks at that level. Level 0 is the root grid: `nrb[d]` blocks along active direction `d`;
//! every level doubles that count along each active direction. Coordinates along an inactive
//! direction (x2 in 1-D, x3 in 1-D and 2-D) are always 0. The root block (tree) a location
//! belongs to is `lx >> level`.

use std::cmp::Ordering;

/// Coordinates at any level must stay below `2^MAX_COORD_BITS`; the config enforces it, so the
/// Morton key of every location fits in a `u128`.
pub const MAX_COORD_BITS: u32 = 40;

/// A block's place in the forest: level and global integer coordinates at that level.
///
/// Equality and hashing use the fields; [`Ord`] is the Morton order: locations are compared by
/// the Z-curve key of their lower corner on the finest grid, and a parent sorts before its first
/// child (which shares its corner).
///
/// ```
/// use starhalo_mesh::LogicalLocation;
/// let a = LogicalLocation::new(1, [1, 0, 0]);
/// let b = LogicalLocation::new(1, [0, 1, 0]);
/// assert!(a < b); // Z-curve: x varies fastest
/// assert_eq!(a.parent(), Some(LogicalLocation::new(0, [0, 0, 0])));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LogicalLocation {
    level: u32,
    lx: [i64; 3],
}

impl LogicalLocation {
    /// The location at `level` with global coordinates `lx`.
    pub const fn new(level: u32, lx: [i64; 3]) -> Self {
        Self { level, lx }
    }

    /// Refinement level; 0 is the root grid.
    pub const fn level(&self) -> u32 {
        self.level
    }

    /// Global integer coordinates at this level.
    pub const fn lx(&self) -> [i64; 3] {
        self.lx
    }

    /// Coordinate along direction `d` (0, 1 or 2).
    pub const fn lx_dir(&self, d: usize) -> i64 {
        self.lx[d]
    }

    /// Coordinates of the root block (tree) this location lies in.
    pub fn tree_coords(&self) -> [i64; 3] {
        // Shifts of 63 and more give the same sign-filled result (and may not panic).
        self.lx.map(|x| x >> self.level.min(63))
    }

    /// Coordinates inside its tree (in `0..2^level` along each active direction).
    pub fn in_tree_coords(&self) -> [i64; 3] {
        let mask = ((1u64 << self.level.min(63)) - 1) as i64;
        self.lx.map(|x| x & mask)
    }

    /// The parent one level coarser, or `None` for a root block.
    pub fn parent(&self) -> Option<Self> {
        (self.level > 0).then(|| Self::new(self.level - 1, self.lx.map(|x| x >> 1)))
    }

    /// The ancestor (or self) at `level`, or `None` if `level` is finer than this location.
    pub fn ancestor_at(&self, level: u32) -> Option<Self> {
        (level <= self.level).then(|| {
            let s = (self.level - level).min(63);
            Self::new(level, self.lx.map(|x| x >> s))
        })
    }

    /// True if `self` is `other` or one of its ancestors.
    pub fn contains(&self, other: &Self) -> bool {
        other.ancestor_at(self.level) == Some(*self)
    }

    /// The child at position `pos` (each entry 0 or 1; entries for inactive directions must be 0).
    pub fn child(&self, pos: [i64; 3]) -> Self {
        Self::new(
            self.level + 1,
            [0, 1, 2].map(|d| 2 * self.lx[d] + (pos[d] & 1)),
        )
    }

    /// The 2^ndim children, in Morton order.
    ///
    /// ```
    /// use starhalo_mesh::LogicalLocation;
    /// let kids = LogicalLocation::new(0, [1, 0, 0]).children(2);
    /// assert_eq!(kids.len(), 4);
    /// assert_eq!(kids[1], LogicalLocation::new(1, [3, 0, 0]));
    /// ```
    pub fn children(&self, ndim: usize) -> Vec<Self> {
        let n = 1usize << ndim;
        (0..n)
            .map(|i| {
                let i = i as i64;
                self.child([i & 1, (i >> 1) & 1, (i >> 2) & 1])
            })
            .collect()
    }

    /// Position (0 or 1 per direction) of this location inside its parent.
    pub fn position_in_parent(&self) -> [i64; 3] {
        self.lx.map(|x| x & 1)
    }

    /// Compare the Z-curve positions of the lower corners of `self` and `other` (x fastest),
    /// ignoring levels. Exact for all coordinates below `2^MAX_COORD_BITS` at the finer level.
    pub fn morton_cmp(&self, other: &Self) -> Ordering {
        let l = self.level.max(other.level);
        // Beyond the documented limits the order is unspecified, but nothing panics.
        let up = |x: i64, s: u32| x.checked_shl(s).unwrap_or(i64::MAX);
        let a = self.lx.map(|x| up(x, l - self.level));
        let b = other.lx.map(|x| up(x, l - other.level));
        // The direction whose coordinates differ at the most significant bit decides; at equal
        // bit positions the later direction (x3) is the more significant in the interleaving.
        let mut best: Option<usize> = None;
        let mut best_x = 0u64;
        for d in 0..3 {
            let x = (a[d] ^ b[d]) as u64;
            if x != 0 && !(x < best_x && x < (x ^ best_x)) {
                best = Some(d);
                best_x = x;
            }
        }
        match best {
            Some(d) => a[d].cmp(&b[d]),
            None => Ordering::Equal,
        }
    }
}

impl Ord for LogicalLocation {
    fn cmp(&self, other: &Self) -> Ordering {
        self.morton_cmp(other).then(self.level.cmp(&other.level))
    }
}

impl PartialOrd for LogicalLocation {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Display for LogicalLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "L{}({},{},{})",
            self.level, self.lx[0], self.lx[1], self.lx[2]
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn morton_orders_children_inside_parent_and_parent_first() {
        let p = LogicalLocation::new(2, [1, 2, 3]);
        let kids = p.children(3);
        assert!(kids.windows(2).all(|w| w[0] < w[1]));
        assert!(p < kids[0]);
        // The last child of p sorts before p's next Morton sibling.
        let next = LogicalLocation::new(2, [0, 3, 3]);
        assert!(p < next && kids[7] < next);
    }

    fn interleave(c: [i64; 3]) -> u128 {
        let mut key = 0u128;
        for bit in 0..20 {
            for (d, &x) in c.iter().enumerate() {
                key |= (((x >> bit) & 1) as u128) << (3 * bit + d);
            }
        }
        key
    }

    #[test]
    fn morton_cmp_matches_bit_interleaving() {
        // Against an explicit interleaved key on a 5x3x6 grid (non power of two) at mixed levels.
        let mut locs = Vec::new();
        for level in 0..3u32 {
            for z in 0..(6i64 << level).min(9) {
                for y in 0..(3i64 << level).min(7) {
                    for x in 0..(5i64 << level).min(11) {
                        locs.push(LogicalLocation::new(level, [x, y, z]));
                    }
                }
            }
        }
        let key =
            |l: &LogicalLocation| (interleave(l.lx().map(|x| x << (2 - l.level()))), l.level());
        let mut a = locs.clone();
        a.sort();
        let mut b = locs;
        b.sort_by_key(key);
        assert_eq!(a, b);
        let l = |x, y, z| LogicalLocation::new(MAX_COORD_BITS, [x, y, z]);
        assert!(l(1, 0, 0) < l(0, 1, 0) && l(0, 1, 0) < l(1, 1, 0) && l(1, 1, 0) < l(0, 0, 1));
        assert!(l(1, 1, 1) < l(2, 0, 0));
        let half = 1i64 << (MAX_COORD_BITS - 1);
        assert!(LogicalLocation::new(1, [1, 0, 0]) > l(half - 1, half - 1, 0));
        assert!(LogicalLocation::new(1, [0, 1, 0]) > l(half - 1, 0, half - 1));
    }

    #[test]
    fn ancestors_and_containment() {
        let a = LogicalLocation::new(3, [5, 6, 0]);
        assert_eq!(a.ancestor_at(1), Some(LogicalLocation::new(1, [1, 1, 0])));
        assert_eq!(a.ancestor_at(4), None);
        assert!(LogicalLocation::new(1, [1, 1, 0]).contains(&a));
        assert!(!LogicalLocation::new(1, [0, 1, 0]).contains(&a));
        assert_eq!(a.tree_coords(), [0, 0, 0]);
        assert_eq!(LogicalLocation::new(1, [5, 2, 0]).tree_coords(), [2, 1, 0]);
        assert_eq!(a.in_tree_coords(), [5, 6, 0]);
        assert_eq!(a.position_in_parent(), [1, 0, 0]);
        // Levels past the coordinates' width answer without panicking.
        for level in [62, 63, 64, u32::MAX] {
            let deep = LogicalLocation::new(level, [5, i64::MAX, 0]);
            assert_eq!(
                deep.tree_coords(),
                [0, (level == 62) as i64, 0],
                "level {level}"
            );
            let low = [5, if level == 62 { i64::MAX >> 1 } else { i64::MAX }, 0];
            assert_eq!(deep.in_tree_coords(), low, "level {level}");
        }
    }
}
