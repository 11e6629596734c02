//! The 27 geometric elements of a block: its volume, 6 faces, 12 edges and 8 corners (nodes).
//!
//! Each element is named by the offset vector `(ox1, ox2, ox3)`, each component in `{-1, 0, 1}`,
//! that points from the block's centre to the element's centre: `(0,0,0)` is the volume,
//! `(0,0,1)` the upper x3 face, `(0,1,-1)` an edge, `(1,1,1)` a corner. The flat index is
//! `(ox1 + 1) + 3 (ox2 + 1) + 9 (ox3 + 1)`, which gives 27 distinct values `0..=26`.
//!
//! When two blocks touch through an element of the first (or a part of it, across levels), the
//! second sees them touching through the opposite element, `-offset`, whose index is
//! `26 - index`.

/// What kind of geometric element an offset names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElementKind {
    /// The block itself, offset `(0,0,0)`.
    Volume,
    /// One non-zero component.
    Face,
    /// Two non-zero components.
    Edge,
    /// Three non-zero components (a node).
    Corner,
}

/// One of the 27 geometric elements of a block.
///
/// ```
/// use starhalo_mesh::{Element, ElementKind};
/// let e = Element::from_offset([0, 1, -1]).unwrap();
/// assert_eq!(e.index(), 1 + 3 * 2 + 9 * 0);
/// assert_eq!(e.kind(), ElementKind::Edge);
/// assert_eq!(e.opposite().offset(), [0, -1, 1]);
/// assert_eq!(e.opposite().index(), 26 - e.index());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Element(u8);

impl Element {
    /// The volume element `(0,0,0)`, index 13.
    pub const VOLUME: Element = Element(13);

    /// The element with flat index `index`, if `index < 27`.
    pub fn new(index: usize) -> Option<Self> {
        (index < 27).then_some(Self(index as u8))
    }

    /// The element with offset `o`, if every component is in `{-1, 0, 1}`.
    pub fn from_offset(o: [i32; 3]) -> Option<Self> {
        if o.iter().all(|c| (-1..=1).contains(c)) {
            Some(Self(((o[0] + 1) + 3 * (o[1] + 1) + 9 * (o[2] + 1)) as u8))
        } else {
            None
        }
    }

    /// Flat index in `0..27`.
    pub const fn index(self) -> usize {
        self.0 as usize
    }

    /// Offset vector `(ox1, ox2, ox3)`.
    pub const fn offset(self) -> [i32; 3] {
        let i = self.0 as i32;
        [i % 3 - 1, (i / 3) % 3 - 1, i / 9 - 1]
    }

    /// The element the other block sees: `-offset`.
    pub const fn opposite(self) -> Self {
        Self(26 - self.0)
    }

    /// Number of non-zero offset components (0 volume, 1 face, 2 edge, 3 corner).
    pub fn codimension(self) -> usize {
        self.offset().iter().filter(|&&c| c != 0).count()
    }

    /// Volume, face, edge or corner.
    pub fn kind(self) -> ElementKind {
        match self.codimension() {
            0 => ElementKind::Volume,
            1 => ElementKind::Face,
            2 => ElementKind::Edge,
            _ => ElementKind::Corner,
        }
    }

    /// True if the offset is zero along every direction a `ndim`-dimensional mesh lacks.
    pub fn is_active(self, ndim: usize) -> bool {
        self.offset()
            .iter()
            .enumerate()
            .all(|(d, &c)| d < ndim || c == 0)
    }

    /// True if `self` lies in the closure of `other` (a corner lies on its three edges and faces).
    ///
    /// ```
    /// use starhalo_mesh::Element;
    /// let face = Element::from_offset([1, 0, 0]).unwrap();
    /// let corner = Element::from_offset([1, -1, 1]).unwrap();
    /// assert!(corner.lies_on(face) && !face.lies_on(corner));
    /// ```
    pub fn lies_on(self, other: Self) -> bool {
        let (a, b) = (self.offset(), other.offset());
        (0..3).all(|d| b[d] == 0 || a[d] == b[d])
    }

    /// All 27 elements in index order.
    pub fn all() -> impl Iterator<Item = Element> {
        (0..27u8).map(Element)
    }

    /// The elements other than the volume that exist in `ndim` dimensions
    /// (2 in 1-D, 8 in 2-D, 26 in 3-D), in index order.
    pub fn neighbors(ndim: usize) -> impl Iterator<Item = Element> {
        Self::all().filter(move |e| *e != Self::VOLUME && e.is_active(ndim))
    }
}

impl std::fmt::Display for Element {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let o = self.offset();
        write!(f, "({},{},{})", o[0], o[1], o[2])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn flattening_is_a_bijection_onto_0_26() {
        let mut seen = HashSet::new();
        for o1 in -1..=1 {
            for o2 in -1..=1 {
                for o3 in -1..=1 {
                    let e = Element::from_offset([o1, o2, o3]).unwrap();
                    assert_eq!(e.offset(), [o1, o2, o3]);
                    assert!(e.index() < 27);
                    assert!(seen.insert(e.index()));
                }
            }
        }
        assert_eq!(seen.len(), 27);
        assert_eq!(Element::from_offset([2, 0, 0]), None);
        assert_eq!(Element::new(27), None);
        assert_eq!(Element::VOLUME.offset(), [0, 0, 0]);
    }

    #[test]
    fn opposite_negates_and_counts_match() {
        for e in Element::all() {
            assert_eq!(e.opposite().offset(), e.offset().map(|c| -c));
            assert_eq!(e.opposite().opposite(), e);
        }
        let count = |k| Element::all().filter(|e| e.kind() == k).count();
        assert_eq!(count(ElementKind::Face), 6);
        assert_eq!(count(ElementKind::Edge), 12);
        assert_eq!(count(ElementKind::Corner), 8);
        assert_eq!(Element::neighbors(1).count(), 2);
        assert_eq!(Element::neighbors(2).count(), 8);
        assert_eq!(Element::neighbors(3).count(), 26);
    }
}
