//! Neighbour records: for every leaf, every block it touches through a face, edge or corner.
//!
//! The search is geometric. For each element offset `o` of a block at level `l`, the
//! same-level location `T = loc + o` (wrapped through periodic boundaries) is looked up:
//!
//! - `T` is a leaf: a same-level neighbour.
//! - A coarser leaf `A` contains `T`: `A` is a neighbour through `o` only if it really touches
//!   the block there, i.e. along every direction where `o` is non-zero, `A` starts (or ends)
//!   exactly at the block's boundary. Otherwise `A` touches the block through a smaller
//!   element (a face instead of an edge) and is recorded there.
//! - `T` is refined: its descendants that touch the block's element are finer neighbours, one
//!   record each (four across a 3-D face, two along a 3-D edge, one at a corner).
//!
//! Two blocks that touch through several elements (small periodic grids) get one record per
//! element; a block can be its own neighbour through a periodic boundary.
//!
//! Whatever the levels, the neighbour touches the block through the opposite element
//! ([`Element::opposite`]) as seen from its own side.
//!
//! Ownership of shared elements follows Parthenon's rule: a block owns one of its elements
//! unless some block touching that element is finer, or on the same level and later in Morton
//! order. Face-, edge- and node-centred data on shared elements are authoritative on the owner.
//! Unlike Parthenon, a block that is its own neighbour through a periodic boundary does not own
//! both copies of the shared element: its image shifted by a lexicographically positive number
//! of domain lengths outranks it, so every shared position has exactly one owner.

use crate::element::Element;
use crate::error::MeshError;
use crate::forest::Forest;
use crate::loc::LogicalLocation;

/// For each of a block's 27 elements, whether the block owns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ownership([bool; 27]);

impl Ownership {
    /// Ownership of every element.
    pub const ALL: Ownership = Ownership([true; 27]);

    /// Whether the block owns element `e`.
    pub fn owns(&self, e: Element) -> bool {
        self.0[e.index()]
    }

    /// The 27 flags in element-index order.
    pub fn as_array(&self) -> &[bool; 27] {
        &self.0
    }
}

/// One neighbour of a block, through one of the block's elements.
#[derive(Debug, Clone, PartialEq)]
pub struct NeighborBlock {
    /// The neighbour's global id.
    pub gid: usize,
    /// The rank that owns the neighbour.
    pub rank: usize,
    /// The neighbour's logical location (in the domain, not shifted by periodicity).
    pub loc: LogicalLocation,
    /// Neighbour level minus this block's level: -1 coarser, 0 same, +1 finer.
    pub level_diff: i32,
    /// The element of this block that touches the neighbour (all of it, or part of it when
    /// the neighbour is finer).
    pub element: Element,
    /// The element of the neighbour that touches this block, from the neighbour's side.
    /// Always `element.opposite()`.
    pub neighbor_element: Element,
    /// Sub-element indices (Parthenon's `fi1`, `fi2`) along the directions where `element`'s
    /// offset is zero, taken in increasing direction order among active directions.
    /// Finer neighbour: which half it covers along each such direction (0 lower, 1 upper).
    /// Coarser neighbour: which half of the neighbour's element this block covers (this is
    /// more than Parthenon stores: its `fi1`/`fi2` are 0 for a coarser neighbour, and the
    /// position is recomputed from the block's own location; here both records of a
    /// fine-coarse pair carry the same `fi`). Same level: `[0, 0]`.
    pub fi: [u8; 2],
    /// Per direction, the periodic boundaries crossed to reach the neighbour: `+1` when the
    /// neighbour's image touching this block lies one domain length above its stored
    /// location, `-1` below, `0` when no boundary is crossed.
    pub periodic_shift: [i32; 3],
    /// Whether this block owns its `element`.
    pub this_owns: bool,
    /// Whether the neighbour owns its `neighbor_element`.
    pub neighbor_owns: bool,
    /// The neighbour's ownership of all its elements.
    pub neighbor_ownership: Ownership,
}

impl NeighborBlock {
    /// True if the connection crosses a periodic boundary.
    pub fn is_periodic(&self) -> bool {
        self.periodic_shift != [0, 0, 0]
    }
}

/// The neighbours of one leaf.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockNeighbors {
    /// The block's gid.
    pub gid: usize,
    /// The block's rank.
    pub rank: usize,
    /// The block's location.
    pub loc: LogicalLocation,
    /// Which of its elements the block owns.
    pub ownership: Ownership,
    /// One record per (neighbour, element) pair, ordered by element then Morton order.
    pub neighbors: Vec<NeighborBlock>,
}

/// Find the neighbours of every leaf of `forest`; `ranks[gid]` is the rank of each leaf.
///
/// ```
/// use starhalo_mesh::{find_neighbors, Forest, RootGrid};
/// // A periodic 1-D grid of one block: it is its own neighbour on both sides.
/// let grid = RootGrid::new(1, [1, 1, 1], [true, false, false]).unwrap();
/// let f = Forest::uniform(grid, 0);
/// let nb = find_neighbors(&f, &[0]).unwrap();
/// assert_eq!(nb[0].neighbors.len(), 2);
/// assert!(nb[0].neighbors.iter().all(|n| n.gid == 0 && n.is_periodic()));
/// ```
pub fn find_neighbors(forest: &Forest, ranks: &[usize]) -> Result<Vec<BlockNeighbors>, MeshError> {
    if ranks.len() != forest.len() {
        return Err(MeshError::Length {
            what: "ranks per block",
            expected: forest.len(),
            got: ranks.len(),
        });
    }
    let mut out: Vec<BlockNeighbors> = forest
        .leaves()
        .iter()
        .enumerate()
        .map(|(gid, loc)| {
            let neighbors = neighbors_of(forest, *loc, ranks);
            BlockNeighbors {
                gid,
                rank: ranks[gid],
                loc: *loc,
                ownership: ownership(forest.ndim(), *loc, &neighbors),
                neighbors,
            }
        })
        .collect();
    let owns: Vec<Ownership> = out.iter().map(|b| b.ownership).collect();
    for b in &mut out {
        let own = b.ownership;
        for n in &mut b.neighbors {
            n.this_owns = own.owns(n.element);
            n.neighbor_ownership = owns[n.gid];
            n.neighbor_owns = owns[n.gid].owns(n.neighbor_element);
        }
    }
    Ok(out)
}

/// The directions along which `e` has a zero offset, among the active ones.
fn free_dirs(ndim: usize, e: Element) -> impl Iterator<Item = usize> {
    let o = e.offset();
    (0..ndim).filter(move |&d| o[d] == 0)
}

fn record(
    forest: &Forest,
    ranks: &[usize],
    me: LogicalLocation,
    gid: usize,
    e: Element,
    shift: [i32; 3],
) -> NeighborBlock {
    let loc = forest.leaves()[gid];
    let level_diff = loc.level() as i32 - me.level() as i32;
    let mut fi = [0u8; 2];
    for (slot, d) in free_dirs(forest.ndim(), e).take(2).enumerate() {
        fi[slot] = match level_diff {
            dl if dl > 0 => ((loc.lx_dir(d) >> (dl - 1)) - 2 * me.lx_dir(d)) as u8 & 1,
            dl if dl < 0 => ((me.lx_dir(d) >> (-dl - 1)) & 1) as u8,
            _ => 0,
        };
    }
    NeighborBlock {
        gid,
        rank: ranks[gid],
        loc,
        level_diff,
        element: e,
        neighbor_element: e.opposite(),
        fi,
        periodic_shift: shift,
        this_owns: true,
        neighbor_owns: true,
        neighbor_ownership: Ownership::ALL,
    }
}

fn neighbors_of(forest: &Forest, me: LogicalLocation, ranks: &[usize]) -> Vec<NeighborBlock> {
    let ndim = forest.ndim();
    let grid = forest.grid();
    let mut out = Vec::new();
    for e in Element::neighbors(ndim) {
        let o = e.offset();
        let unwrapped = [0, 1, 2].map(|d| me.lx_dir(d) + o[d] as i64);
        let Some((t, shift)) = grid.wrap(me.level(), unwrapped) else {
            continue;
        };
        if let Some(g) = forest.covering_leaf(&t) {
            let k = me.level() - forest.leaves()[g].level();
            let span = 1i64 << k;
            let touches = (0..ndim).all(|d| match o[d] {
                1 => unwrapped[d].rem_euclid(span) == 0,
                -1 => unwrapped[d].rem_euclid(span) == span - 1,
                _ => true,
            });
            if touches {
                out.push(record(forest, ranks, me, g, e, shift));
            }
        } else if forest.is_internal(&t) {
            let mut stack = vec![t];
            let mut found = Vec::new();
            while let Some(n) = stack.pop() {
                for c in n.children(ndim) {
                    let pos = c.position_in_parent();
                    let adjacent = (0..ndim).all(|d| match o[d] {
                        1 => pos[d] == 0,
                        -1 => pos[d] == 1,
                        _ => true,
                    });
                    if !adjacent {
                        continue;
                    }
                    if let Some(g) = forest.gid(&c) {
                        found.push(g);
                    } else if forest.is_internal(&c) {
                        stack.push(c);
                    }
                }
            }
            found.sort_unstable();
            out.extend(
                found
                    .into_iter()
                    .map(|g| record(forest, ranks, me, g, e, shift)),
            );
        }
    }
    out
}

/// Does the neighbour of record `n` touch element `e` of block `me`?
fn touches_element(ndim: usize, me: LogicalLocation, n: &NeighborBlock, e: Element) -> bool {
    let (o, eo) = (n.element.offset(), e.offset());
    (0..ndim).all(|d| {
        if o[d] != 0 {
            return eo[d] == o[d];
        }
        if n.level_diff <= 0 || eo[d] == 0 {
            return true;
        }
        let dl = n.level_diff as u32;
        let rel = n.loc.lx_dir(d) - (me.lx_dir(d) << dl);
        if eo[d] < 0 {
            rel == 0
        } else {
            rel == (1i64 << dl) - 1
        }
    })
}

/// Does the neighbour image of record `n` outrank block `me` for ownership? Finer first, then
/// later in Morton order. A block that touches itself through a periodic boundary competes with
/// its own images: the image shifted by a lexicographically positive number of domain lengths
/// outranks the block. Lexicographic order on shift vectors is translation invariant, so every
/// copy of a shared position agrees on which copy is the greatest and exactly one owns it.
fn outranked_by(me: &LogicalLocation, n: &NeighborBlock) -> bool {
    if n.loc == *me {
        n.periodic_shift > [0, 0, 0]
    } else {
        (me.level(), *me) < (n.loc.level(), n.loc)
    }
}

fn ownership(ndim: usize, me: LogicalLocation, neighbors: &[NeighborBlock]) -> Ownership {
    let mut own = [true; 27];
    for e in Element::all() {
        // Directions a mesh lacks do not split elements: project onto the active ones.
        let mut po = e.offset();
        for c in po.iter_mut().skip(ndim) {
            *c = 0;
        }
        let Some(pe) = Element::from_offset(po) else {
            continue;
        };
        own[e.index()] = !neighbors
            .iter()
            .any(|n| outranked_by(&me, n) && touches_element(ndim, me, n, pe));
    }
    Ownership(own)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forest::RootGrid;
    use hashbrown::HashMap;

    fn loc(level: u32, x: i64, y: i64) -> LogicalLocation {
        LogicalLocation::new(level, [x, y, 0])
    }

    /// 2x2 root grid, block (0,0) refined: the canonical two-level picture.
    fn two_level(periodic: bool) -> Forest {
        let g = RootGrid::new(2, [2, 2, 1], [periodic, periodic, false]).unwrap();
        let mut leaves = vec![loc(0, 1, 0), loc(0, 0, 1), loc(0, 1, 1)];
        leaves.extend(loc(0, 0, 0).children(2));
        Forest::from_leaves(g, leaves).unwrap()
    }

    #[test]
    fn coarse_block_sees_two_fine_face_neighbours_with_fi() {
        let f = two_level(false);
        let nb = find_neighbors(&f, &vec![0; f.len()]).unwrap();
        let right = f.gid(&loc(0, 1, 0)).unwrap();
        let xm = Element::from_offset([-1, 0, 0]).unwrap();
        let mut fine: Vec<_> = nb[right]
            .neighbors
            .iter()
            .filter(|n| n.element == xm)
            .map(|n| (n.loc, n.level_diff, n.fi[0], n.neighbor_element.offset()))
            .collect();
        fine.sort_by_key(|x| x.0);
        assert_eq!(
            fine,
            vec![
                (loc(1, 1, 0), 1, 0, [1, 0, 0]),
                (loc(1, 1, 1), 1, 1, [1, 0, 0])
            ]
        );
        // Fine block (1,1) at level 1: its upper-right corner touches the coarse (1,1) block,
        // its +x face touches coarse (1,0) through half of that block's face (fi = 1).
        let fb = f.gid(&loc(1, 1, 1)).unwrap();
        let by_elem: HashMap<_, _> = nb[fb]
            .neighbors
            .iter()
            .map(|n| (n.element.offset(), n))
            .collect();
        let face = by_elem[&[1, 0, 0]];
        assert_eq!(
            (face.loc, face.level_diff, face.fi[0]),
            (loc(0, 1, 0), -1, 1)
        );
        assert_eq!(by_elem[&[1, 1, 0]].loc, loc(0, 1, 1));
        assert_eq!(by_elem[&[0, 1, 0]].loc, loc(0, 0, 1));
        // Fine block (1,0): its (+1,+1) corner lies inside the coarse block's face, so no
        // corner record; it has (+1,0), (0,+1), (-1,..) none (outflow), (+1,-1) none.
        let fb0 = f.gid(&loc(1, 1, 0)).unwrap();
        let elems: Vec<_> = nb[fb0]
            .neighbors
            .iter()
            .map(|n| n.element.offset())
            .collect();
        assert!(!elems.contains(&[1, 1, 0]));
        assert!(
            elems.contains(&[1, 0, 0]) && elems.contains(&[0, 1, 0]) && elems.contains(&[-1, 1, 0])
        );
    }

    #[test]
    fn two_blocks_share_two_faces_through_periodicity() {
        let g = RootGrid::new(1, [2, 1, 1], [true, false, false]).unwrap();
        let f = Forest::uniform(g, 0);
        let nb = find_neighbors(&f, &[0, 1]).unwrap();
        let n0: Vec<_> = nb[0]
            .neighbors
            .iter()
            .map(|n| (n.gid, n.element.offset()[0], n.periodic_shift[0], n.rank))
            .collect();
        assert_eq!(n0, vec![(1, -1, -1, 1), (1, 1, 0, 1)]);
        // Ownership: later Morton block owns shared faces.
        assert!(!nb[0].neighbors[0].this_owns && nb[0].neighbors[0].neighbor_owns);
        assert!(nb[1]
            .ownership
            .owns(Element::from_offset([1, 0, 0]).unwrap()));
        assert!(nb[1]
            .ownership
            .owns(Element::from_offset([-1, 0, 0]).unwrap()));
    }

    #[test]
    fn finer_blocks_own_shared_elements_and_each_uniform_element_has_one_owner() {
        let f = two_level(true);
        let nb = find_neighbors(&f, &vec![0; f.len()]).unwrap();
        let right = f.gid(&loc(0, 1, 0)).unwrap();
        assert!(!nb[right]
            .ownership
            .owns(Element::from_offset([-1, 0, 0]).unwrap()));
        let fine = f.gid(&loc(1, 1, 0)).unwrap();
        assert!(nb[fine]
            .ownership
            .owns(Element::from_offset([1, 0, 0]).unwrap()));

        // Uniform periodic 3x2 grid: every physical face/edge/node has exactly one owner.
        let g = RootGrid::new(2, [3, 2, 1], [true, true, false]).unwrap();
        let f = Forest::uniform(g, 0);
        let nb = find_neighbors(&f, &vec![0; f.len()]).unwrap();
        let mut owners: HashMap<[i64; 2], usize> = HashMap::new();
        for b in &nb {
            for e in Element::neighbors(2) {
                let o = e.offset();
                let key = [
                    (2 * b.loc.lx_dir(0) + 1 + o[0] as i64).rem_euclid(6),
                    (2 * b.loc.lx_dir(1) + 1 + o[1] as i64).rem_euclid(4),
                ];
                *owners.entry(key).or_default() += b.ownership.owns(e) as usize;
            }
        }
        assert_eq!(owners.len(), 6 * 4 - 6);
        assert!(owners.values().all(|&c| c == 1), "{owners:?}");
    }

    #[test]
    fn ranks_must_match_blocks() {
        let f = two_level(false);
        assert!(matches!(
            find_neighbors(&f, &[0]),
            Err(MeshError::Length { .. })
        ));
    }
}
