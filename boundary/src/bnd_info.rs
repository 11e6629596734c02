//! Index boxes of each channel, `#[repr(C)]` sub-halo descriptors, and pack/unpack in one.
//!
//! All boxes are **inclusive** index ranges per direction (`s..=e`, as [`IndexRange`] and
//! Parthenon write them), in the index space of either a block's own array (interior plus
//! `nghost` ghost layers) or its coarse buffer (half the interior, `nghost / 2 + 1` ghost
//! layers), for cell-centred variables. Arrays are row-major with x1 fastest.
//!
//! With `n` interior cells and `g` ghosts along a direction, `cn = n / 2`, `cg = g / 2 + 1`,
//! `o` the sender's element offset along it and `f` the channel's `fi` there (free directions
//! only):
//!
//! | case | sender box (space) | receiver box (space) |
//! |---|---|---|
//! | same level | last/first `g` interior cells, or all `n` (block) | `g` ghosts, or all `n` (block) |
//! | receiver coarser | `g` cells of the restricted interior, or all `cn` (coarse) | `g` ghosts, or half `f` of the interior (block) |
//! | receiver finer | `cg` interior cells, or half `f` widened by `cg` inwards (block) | `cg` coarse ghosts, or its `cn` widened by `cg` towards the sender's other half (coarse) |
//!
//! The finer receiver prolongates from its coarse buffer afterwards; a finer sender restricts
//! into its coarse buffer before packing. Boxes of both ends have the same shape and are
//! walked in the same order, so the buffer needs no index of its own.

use std::sync::atomic::{AtomicU64, Ordering};

use starhalo_exec::{for_each_segment, Policy};
use starhalo_mesh::field::{IndexRange, IndexShape};
use starhalo_sf::{PackPlan, Plan};

use crate::channel::Channel;
use crate::error::BoundaryError;
use crate::rows::{Rows, RunList};

/// A 3-D box of indices: one inclusive range per direction (x1, x2, x3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IndexBox(pub [IndexRange; 3]);

impl IndexBox {
    /// Points per direction.
    pub fn dims(&self) -> [usize; 3] {
        self.0.map(|r| r.len())
    }

    /// Number of points.
    pub fn len(&self) -> usize {
        self.dims().iter().product()
    }

    /// True when some direction is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when the box lies inside an array of `dims` points.
    pub fn fits(&self, dims: [usize; 3]) -> bool {
        (0..3).all(|d| self.0[d].is_empty() || self.0[d].e < dims[d])
    }

    /// The points in pack order (x1 fastest).
    pub fn points(&self) -> impl Iterator<Item = [usize; 3]> + '_ {
        let [ri, rj, rk] = self.0;
        rk.as_range().flat_map(move |k| {
            rj.as_range()
                .flat_map(move |j| ri.as_range().map(move |i| [i, j, k]))
        })
    }

    /// The pack plan of this box inside a row-major array of `dims` points starting at
    /// `base`: contiguous or strided, never a list.
    ///
    /// ```
    /// use starhalo_boundary::bnd_info::IndexBox;
    /// use starhalo_mesh::field::IndexRange;
    /// use starhalo_sf::PackPlan;
    /// let r = |s, e| IndexRange { s, e };
    /// // A 2-wide x1 face strip of an 8x8 array: 2 values per row, 4 rows.
    /// let b = IndexBox([r(0, 1), r(2, 5), r(0, 0)]);
    /// let p = b.plan([8, 8, 1], 100).unwrap();
    /// assert!(matches!(p.kind, PackPlan::Strided { start: 116, dx: 2, dy: 4, sx: 8, .. }));
    /// // Whole rows are contiguous.
    /// let rows = IndexBox([r(0, 7), r(2, 5), r(0, 0)]);
    /// assert!(matches!(rows.plan([8, 8, 1], 0).unwrap().kind, PackPlan::Contiguous { start: 16, len: 32 }));
    /// ```
    pub fn plan(&self, dims: [usize; 3], base: usize) -> Result<Plan, BoundaryError> {
        if !self.fits(dims) {
            return Err(BoundaryError::Geometry(format!(
                "box {:?} outside an array of {dims:?}",
                self.0
            )));
        }
        let idx: Vec<usize> = self
            .points()
            .map(|[i, j, k]| base + (k * dims[1] + j) * dims[0] + i)
            .collect();
        let plan = Plan::new(&idx);
        if matches!(plan.kind, PackPlan::List(_)) {
            return Err(BoundaryError::Geometry(format!(
                "box {:?} did not reduce to a strided plan",
                self.0
            )));
        }
        Ok(plan)
    }
}

/// Which array of a block a box indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Space {
    /// The block's own array (interior and ghosts).
    Block,
    /// The block's coarse buffer.
    Coarse,
}

fn range(s: usize, len: usize) -> IndexRange {
    IndexRange { s, e: s + len - 1 }
}

/// The slot of `fi` that direction `d` uses: its rank among the free active directions.
fn fi_along(ch: &Channel, ndim: usize, d: usize) -> usize {
    let o = ch.key.element.offset();
    let slot = (0..d).filter(|&x| x < ndim && o[x] == 0).count();
    ch.fi.get(slot).map_or(0, |&f| usize::from(f & 1))
}

struct Dims {
    n: usize,
    g: usize,
    cn: usize,
    cg: usize,
}

fn dims_of(shape: &IndexShape, d: usize, need_coarse: bool) -> Result<Dims, BoundaryError> {
    let n = shape.nx()[d];
    let g = shape.ghosts(d);
    let (cn, cg) = (n / 2, g / 2 + 1);
    let ok = n >= g && (!need_coarse || (n.is_multiple_of(2) && cn >= g && cn >= cg));
    if !ok {
        return Err(BoundaryError::Geometry(format!(
            "block of {n} cells with {g} ghosts along x{} is too small for this exchange",
            d + 1
        )));
    }
    Ok(Dims { n, g, cn, cg })
}

/// The sender's box of channel `ch` on blocks of `shape`, and which array it indexes.
pub fn send_box(ch: &Channel, shape: &IndexShape) -> Result<(IndexBox, Space), BoundaryError> {
    let ndim = shape.ndim();
    let o = ch.key.element.offset();
    let space = if ch.level_diff < 0 {
        Space::Coarse
    } else {
        Space::Block
    };
    let mut r = [range(0, 1); 3];
    for d in 0..ndim {
        let Dims { n, g, cn, cg } = dims_of(shape, d, ch.level_diff != 0)?;
        let f = fi_along(ch, ndim, d);
        r[d] = match (ch.level_diff, o[d]) {
            (0, 1) => range(n, g),
            (0, -1) => range(g, g),
            (0, _) => range(g, n),
            (l, 1) if l < 0 => range(cg + cn - g, g),
            (l, -1) if l < 0 => range(cg, g),
            (l, _) if l < 0 => range(cg, cn),
            (_, 1) => range(g + n - cg, cg),
            (_, -1) => range(g, cg),
            _ => range(if f == 0 { g } else { g + cn - cg }, cn + cg),
        };
    }
    Ok((IndexBox(r), space))
}

/// The receiver's box of channel `ch` on blocks of `shape`, and which array it indexes.
pub fn recv_box(ch: &Channel, shape: &IndexShape) -> Result<(IndexBox, Space), BoundaryError> {
    let ndim = shape.ndim();
    let p = ch.receiver_element().offset();
    let space = if ch.level_diff > 0 {
        Space::Coarse
    } else {
        Space::Block
    };
    let mut r = [range(0, 1); 3];
    for d in 0..ndim {
        let Dims { n, g, cn, cg } = dims_of(shape, d, ch.level_diff != 0)?;
        let f = fi_along(ch, ndim, d);
        r[d] = match (ch.level_diff, p[d]) {
            (l, 1) if l <= 0 => range(g + n, g),
            (l, -1) if l <= 0 => range(0, g),
            (0, _) => range(g, n),
            (l, _) if l < 0 => range(g + f * cn, cn),
            (_, 1) => range(cg + cn, cg),
            (_, -1) => range(0, cg),
            _ => range(if f == 0 { cg } else { 0 }, cn + cg),
        };
    }
    Ok((IndexBox(r), space))
}

/// Flag of [`BndInfo::flags`]: the box indexes the coarse buffer.
pub const FLAG_COARSE: u32 = 1;
/// Flag of [`BndInfo::flags`]: the channel carries data (clear: fill with the default).
pub const FLAG_ALLOCATED: u32 = 2;
/// Flag of a physical fill box: `FLAG_MIRROR0 << d` mirrors it across the face along
/// direction `d` (reflecting) instead of clamping it onto the face (outflow).
pub const FLAG_MIRROR0: u32 = 4;

/// One sub-halo as the pack and unpack loops see it: plain data, `#[repr(C)]` so that an
/// array of them can be copied to a device as is.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BndInfo {
    /// Block index within the field storage.
    pub block: usize,
    /// Variable index within the field storage.
    pub var: usize,
    /// First index per direction (inclusive).
    pub s: [usize; 3],
    /// Last index per direction (inclusive).
    pub e: [usize; 3],
    /// Where the sub-halo starts in the communication buffer.
    pub buf_offset: usize,
    /// [`FLAG_COARSE`], [`FLAG_ALLOCATED`], [`FLAG_MIRROR0`].
    pub flags: u32,
    /// Padding, zero.
    pub pad: u32,
}

impl BndInfo {
    /// A descriptor of `bx` in `block`/`var`, starting at `buf_offset`.
    pub fn new(block: usize, var: usize, bx: &IndexBox, buf_offset: usize, flags: u32) -> Self {
        Self {
            block,
            var,
            s: bx.0.map(|r| r.s),
            e: bx.0.map(|r| r.e),
            buf_offset,
            flags,
            pad: 0,
        }
    }

    /// Its box.
    pub fn index_box(&self) -> IndexBox {
        IndexBox([0, 1, 2].map(|d| IndexRange {
            s: self.s[d],
            e: self.e[d],
        }))
    }

    /// Values it packs.
    pub fn len(&self) -> usize {
        self.index_box().len()
    }

    /// True for an empty box.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// How fields are stored for pack and unpack: for each block, for each variable, one
/// row-major array of `dims` points.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FieldLayout {
    /// Points per direction of one variable of one block.
    pub dims: [usize; 3],
    /// Variables per block.
    pub nvar: usize,
}

impl FieldLayout {
    /// The layout of `nvar` variables on blocks of `shape` (whole arrays, ghosts included).
    pub fn of_shape(shape: &IndexShape, nvar: usize) -> Self {
        let c = starhalo_mesh::field::TopologicalElement::CC;
        let e = starhalo_mesh::field::IndexDomain::Entire;
        Self {
            dims: [0, 1, 2].map(|d| shape.range(d, e, c).len()),
            nvar,
        }
    }

    /// Values per variable array.
    pub fn var_len(&self) -> usize {
        self.dims.iter().product()
    }

    /// Values per block.
    pub fn block_len(&self) -> usize {
        self.var_len() * self.nvar
    }

    /// Flat index of point `p` of variable `var` within its block.
    pub fn index_in_block(&self, var: usize, p: [usize; 3]) -> usize {
        ((var * self.dims[2] + p[2]) * self.dims[1] + p[1]) * self.dims[0] + p[0]
    }
}

/// How one block's storage is laid out: the block arrays of every variable slot, then (on a
/// multilevel mesh) the coarse-buffer arrays, so that one block is one contiguous segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockLayout {
    /// The block arrays.
    pub fine: FieldLayout,
    /// The coarse buffers, if the mesh is multilevel.
    pub coarse: Option<FieldLayout>,
}

impl From<FieldLayout> for BlockLayout {
    fn from(fine: FieldLayout) -> Self {
        Self { fine, coarse: None }
    }
}

impl BlockLayout {
    /// Values per block (both kinds of array).
    pub fn block_len(&self) -> usize {
        self.fine.block_len() + self.coarse.map_or(0, |c| c.block_len())
    }

    /// Where the coarse arrays start within a block.
    pub fn coarse_start(&self) -> usize {
        self.fine.block_len()
    }

    /// The array kind a descriptor indexes.
    fn of(&self, b: &BndInfo) -> Option<FieldLayout> {
        if b.flags & FLAG_COARSE != 0 {
            self.coarse
        } else {
            Some(self.fine)
        }
    }

    /// Flat index within its block of point `p` of descriptor `b` (checked by `BndCache::new`).
    fn index(&self, b: &BndInfo, p: [usize; 3]) -> usize {
        if b.flags & FLAG_COARSE != 0 {
            let c = self.coarse.unwrap_or(self.fine);
            self.coarse_start() + c.index_in_block(b.var, p)
        } else {
            self.fine.index_in_block(b.var, p)
        }
    }
}

/// A list of sub-halos prepared for pack-in-one or unpack-in-one over a buffer that holds
/// them back to back, built once and reused every exchange (pack and unpack allocate
/// nothing). A descriptor with [`FLAG_COARSE`] indexes its block's coarse buffer.
#[derive(Debug, Clone)]
pub struct BndCache {
    layout: BlockLayout,
    infos: Vec<BndInfo>,
    /// Per descriptor, its box as runs within its block's segment of the field storage.
    rows: Vec<Rows>,
    /// The same runs for the serial pack and unpack, in the order that visits each array
    /// once.
    runs: RunList,
    /// Descriptors without [`FLAG_ALLOCATED`].
    unallocated: usize,
    /// See [`version`](Self::version).
    version: u64,
    /// Buffer segment bounds: sub-halo `h` is `buf[seg[h]..seg[h + 1]]`.
    seg: Vec<usize>,
    /// Sub-halos sorted by block, and per block the range into `by_block`.
    by_block: Vec<usize>,
    block_start: Vec<usize>,
    /// Field storage segment bounds: block `b` is `data[blocks[b]..blocks[b + 1]]`.
    blocks: Vec<usize>,
    nblocks: usize,
}

impl BndCache {
    /// Checks `infos` against `layout` and `nblocks` blocks, lays their buffer segments back
    /// to back in the given order (overwriting `buf_offset`), and groups them by block.
    pub fn new(
        layout: impl Into<BlockLayout>,
        nblocks: usize,
        mut infos: Vec<BndInfo>,
    ) -> Result<Self, BoundaryError> {
        let layout = layout.into();
        let mut seg = Vec::with_capacity(infos.len() + 1);
        let mut rows = Vec::with_capacity(infos.len());
        let mut off = 0;
        seg.push(0);
        for b in &mut infos {
            let array = layout
                .of(b)
                .filter(|l| b.var < l.nvar && b.index_box().fits(l.dims));
            let Some(array) = array.filter(|_| b.block < nblocks) else {
                return Err(BoundaryError::Geometry(format!(
                    "sub-halo {b:?} outside {nblocks} blocks of {layout:?}"
                )));
            };
            let r = Rows::of_box(layout.index(b, b.s), b.index_box().dims(), array.dims);
            debug_assert!(r.end() <= layout.block_len() && r.values() == b.len());
            rows.push(r);
            b.buf_offset = off;
            off += b.len();
            seg.push(off);
        }
        let mut by_block: Vec<usize> = (0..infos.len()).collect();
        by_block.sort_by_key(|&h| infos[h].block);
        let runs = RunList::new(infos.iter().zip(&rows).zip(&seg).map(|((b, r), &at)| {
            // Grouped by array: the block's base plus where the variable's array starts.
            let array = layout.index(b, [0; 3]);
            let base = b.block * layout.block_len() + array;
            (
                base,
                Rows {
                    start: r.start - array,
                    ..*r
                },
                at,
            )
        }))
        .ok_or_else(|| {
            BoundaryError::Geometry(format!(
                "a buffer of {off} values, or arrays of {layout:?}, exceed 2^32 values"
            ))
        })?;
        let mut block_start = vec![0; nblocks + 1];
        for b in &infos {
            block_start[b.block + 1] += 1;
        }
        for i in 0..nblocks {
            block_start[i + 1] += block_start[i];
        }
        Ok(Self {
            layout,
            unallocated: infos
                .iter()
                .filter(|b| b.flags & FLAG_ALLOCATED == 0)
                .count(),
            version: next_version(),
            infos,
            rows,
            runs,
            seg,
            by_block,
            block_start,
            blocks: (0..=nblocks).map(|b| b * layout.block_len()).collect(),
            nblocks,
        })
    }

    /// The descriptors, with their buffer offsets.
    pub fn infos(&self) -> &[BndInfo] {
        &self.infos
    }

    /// A number taken anew, unique in the process, whenever the descriptors change (at
    /// [`new`](Self::new) and when [`set_allocated`](Self::set_allocated) flips a flag), so
    /// that a copy of them elsewhere (on a device) knows it is current by comparing one
    /// number rather than every descriptor. A clone keeps it, and its descriptors.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Sets or clears [`FLAG_ALLOCATED`] on descriptors `range` (a channel's sub-halos).
    pub fn set_allocated(&mut self, range: std::ops::Range<usize>, on: bool) {
        let mut flipped = false;
        for b in &mut self.infos[range] {
            if (b.flags & FLAG_ALLOCATED != 0) != on {
                b.flags ^= FLAG_ALLOCATED;
                if on {
                    self.unallocated -= 1;
                } else {
                    self.unallocated += 1;
                }
                flipped = true;
            }
        }
        if flipped {
            self.version = next_version();
        }
    }

    /// Buffer range of descriptors `range`.
    pub fn buffer_range(&self, range: std::ops::Range<usize>) -> std::ops::Range<usize> {
        self.seg[range.start]..self.seg[range.end]
    }

    /// Total buffer length.
    pub fn buffer_len(&self) -> usize {
        self.seg.last().copied().unwrap_or(0)
    }

    fn check(&self, data: usize, buf: usize) -> Result<(), BoundaryError> {
        let want = self.nblocks * self.layout.block_len();
        if data != want {
            return Err(BoundaryError::Size {
                what: "field storage",
                expected: want,
                got: data,
            });
        }
        if buf < self.buffer_len() {
            return Err(BoundaryError::Size {
                what: "communication buffer",
                expected: self.buffer_len(),
                got: buf,
            });
        }
        Ok(())
    }

    /// Packs every sub-halo from `data` into `buf` in one dispatch. Serial: one loop of
    /// fixed-size moves per array and run length over the precomputed runs; threaded: outer
    /// sub-halos, inner their rows. Flags are not consulted: every listed sub-halo is packed.
    pub fn pack(&self, policy: Policy, data: &[f64], buf: &mut [f64]) -> Result<(), BoundaryError> {
        self.check(data.len(), buf.len())?;
        let n = self.layout.block_len();
        let buf = &mut buf[..self.buffer_len()];
        if policy == Policy::Serial {
            self.runs.gather(data, buf);
            return Ok(());
        }
        for_each_segment(policy, buf, &self.seg, |h, out| {
            let block = self.infos[h].block;
            self.rows[h].gather(&data[block * n..(block + 1) * n], out);
        });
        Ok(())
    }

    /// Unpacks every sub-halo from `buf` into `data` in one dispatch (serial: the pack's runs
    /// array by array; threaded, or where sub-halos overlap: outer blocks, inner their
    /// sub-halos, row by row). A sub-halo without [`FLAG_ALLOCATED`] is filled with its
    /// variable slot's default (`defaults[var]`, 0 where not given) instead.
    pub fn unpack(
        &self,
        policy: Policy,
        buf: &[f64],
        data: &mut [f64],
        defaults: &[f64],
    ) -> Result<(), BoundaryError> {
        self.check(data.len(), buf.len())?;
        // Serial: every run array by array, then the defaults over the (few) unallocated.
        if policy == Policy::Serial && self.runs.is_disjoint() {
            self.runs.scatter(buf, data);
            if self.unallocated > 0 {
                let n = self.layout.block_len();
                for (b, r) in self.infos.iter().zip(&self.rows) {
                    if b.flags & FLAG_ALLOCATED == 0 {
                        let d = defaults.get(b.var).copied().unwrap_or(0.0);
                        r.fill(d, &mut data[b.block * n..(b.block + 1) * n]);
                    }
                }
            }
            return Ok(());
        }
        for_each_segment(policy, data, &self.blocks, |blk, cells| {
            for &h in &self.by_block[self.block_start[blk]..self.block_start[blk + 1]] {
                let b = &self.infos[h];
                if b.flags & FLAG_ALLOCATED != 0 {
                    self.rows[h].scatter(&buf[self.seg[h]..self.seg[h + 1]], cells);
                } else {
                    let d = defaults.get(b.var).copied().unwrap_or(0.0);
                    self.rows[h].fill(d, cells);
                }
            }
        });
        Ok(())
    }
}

/// Two caches are equal when built alike with the same flags (whatever their versions).
impl PartialEq for BndCache {
    fn eq(&self, other: &Self) -> bool {
        // The rest is derived from these.
        (self.layout, self.nblocks, &self.infos) == (other.layout, other.nblocks, &other.infos)
    }
}

/// The next [`BndCache::version`].
fn next_version() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The sparse-allocation flags of a packed buffer: `over[h]` becomes 1 when some |value| of
/// sub-halo `h`'s segment of `buf` exceeds the threshold of its variable slot
/// (`thresholds[var]`; none where missing), else 0. The device's pack kernel computes the
/// same flags as it packs.
pub fn threshold_flags(infos: &[BndInfo], buf: &[f64], thresholds: &[f64], over: &mut [u32]) {
    for (b, o) in infos.iter().zip(over) {
        let t = thresholds.get(b.var).copied().unwrap_or(f64::INFINITY);
        if t == f64::INFINITY {
            // No value exceeds it (a variable without a threshold): nothing to scan.
            *o = 0;
            continue;
        }
        let (s, e) = (b.buf_offset, b.buf_offset + b.len());
        let seg = &buf[s.min(buf.len())..e.min(buf.len())];
        *o = u32::from(seg.iter().any(|v| v.abs() > t));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::all_channels;
    use starhalo_mesh::{find_neighbors, Forest, LogicalLocation, RootGrid};

    fn two_level(ndim: usize) -> Forest {
        let nrb = if ndim == 3 { [2, 2, 2] } else { [2, 2, 1] };
        let g = RootGrid::new(ndim, nrb, [true, true, ndim == 3]).unwrap();
        let mut leaves: Vec<_> = Forest::uniform(g, 0).leaves().to_vec();
        leaves.retain(|l| *l != LogicalLocation::new(0, [0, 0, 0]));
        leaves.extend(LogicalLocation::new(0, [0, 0, 0]).children(ndim));
        Forest::from_leaves(g, leaves).unwrap()
    }

    /// Global cell coordinate (at the level of the array's cells) of point `c` along `d`.
    fn global(
        loc: &LogicalLocation,
        space: Space,
        shape: &IndexShape,
        d: usize,
        c: usize,
    ) -> (u32, i64) {
        let (n, g) = (shape.nx()[d] as i64, shape.ghosts(d) as i64);
        match space {
            Space::Block => (loc.level(), loc.lx_dir(d) * n + c as i64 - g),
            Space::Coarse => (
                loc.level() - 1,
                loc.lx_dir(d) * (n / 2) + c as i64 - (g / 2 + 1),
            ),
        }
    }

    /// Every sender point and the receiver point it lands on are the same physical cell
    /// (modulo the periodic domain), at the same level, for all three level cases.
    #[test]
    fn sender_and_receiver_boxes_image_the_same_cells_across_levels() {
        for (ndim, nx, ng) in [(2, [8, 8, 1], 2), (3, [4, 4, 4], 2), (2, [8, 6, 1], 3)] {
            let f = two_level(ndim);
            let nb = find_neighbors(&f, &vec![0; f.len()]).unwrap();
            let shape = IndexShape::new(nx, ng, ndim).unwrap();
            let cshape = shape.coarse().unwrap();
            let mut cases = [0usize; 3];
            for ch in all_channels(&nb, &[0]) {
                let (sb, ss) = send_box(&ch, &shape).unwrap();
                let (rb, rs) = recv_box(&ch, &shape).unwrap();
                assert_eq!(sb.dims(), rb.dims(), "{ch:?}");
                let arr = |s| {
                    FieldLayout::of_shape(if s == Space::Coarse { &cshape } else { &shape }, 1).dims
                };
                assert!(sb.fits(arr(ss)) && rb.fits(arr(rs)), "{ch:?}");
                let (sl, rl) = (f.leaves()[ch.key.sender], f.leaves()[ch.key.receiver]);
                for (ps, pr) in sb.points().zip(rb.points()) {
                    for d in 0..ndim {
                        let (ls, xs) = global(&sl, ss, &shape, d, ps[d]);
                        let (lr, xr) = global(&rl, rs, &shape, d, pr[d]);
                        assert_eq!(ls, lr);
                        let period = f.grid().nrb()[d] * nx[d] as i64 * (1 << ls);
                        assert_eq!(xs.rem_euclid(period), xr.rem_euclid(period), "{ch:?} d{d}");
                    }
                }
                // The receiver's box is ghosts only, and the sender's interior only.
                let (rn, rg) = if rs == Space::Coarse {
                    (cshape.nx(), cshape.nghost())
                } else {
                    (nx, ng)
                };
                assert!(rb
                    .points()
                    .all(|p| (0..ndim).any(|d| p[d] < rg || p[d] >= rg + rn[d])));
                let (sn, sg) = if ss == Space::Coarse {
                    (cshape.nx(), cshape.nghost())
                } else {
                    (nx, ng)
                };
                assert!(sb
                    .points()
                    .all(|p| (0..ndim).all(|d| p[d] >= sg && p[d] < sg + sn[d])));
                cases[(ch.level_diff + 1) as usize] += 1;
            }
            assert!(cases.iter().all(|&c| c > 0), "{cases:?}");
        }
    }

    #[test]
    fn every_channel_box_is_strided_or_contiguous() {
        let f = two_level(3);
        let nb = find_neighbors(&f, &vec![0; f.len()]).unwrap();
        let shape = IndexShape::new([4, 4, 4], 2, 3).unwrap();
        let l = FieldLayout::of_shape(&shape, 1);
        let cl = FieldLayout::of_shape(&shape.coarse().unwrap(), 1);
        for ch in all_channels(&nb, &[0]) {
            for (b, s) in [
                send_box(&ch, &shape).unwrap(),
                recv_box(&ch, &shape).unwrap(),
            ] {
                let dims = if s == Space::Coarse { cl.dims } else { l.dims };
                let p = b.plan(dims, 7).unwrap();
                let want: Vec<usize> = b
                    .points()
                    .map(|[i, j, k]| 7 + (k * dims[1] + j) * dims[0] + i)
                    .collect();
                assert_eq!(p.iter().collect::<Vec<_>>(), want);
                assert!(!p.duplicates);
            }
        }
    }

    #[test]
    fn too_small_blocks_and_bad_descriptors_are_errors() {
        let f = two_level(2);
        let nb = find_neighbors(&f, &vec![0; f.len()]).unwrap();
        let shape = IndexShape::new([2, 2, 1], 2, 2).unwrap();
        let ch = all_channels(&nb, &[0]);
        assert!(ch.iter().any(|c| send_box(c, &shape).is_err()));
        let l = FieldLayout {
            dims: [4, 4, 1],
            nvar: 1,
        };
        let r = |s, e| IndexRange { s, e };
        let bad = BndInfo::new(0, 0, &IndexBox([r(0, 4), r(0, 0), r(0, 0)]), 0, 0);
        assert!(BndCache::new(l, 1, vec![bad]).is_err());
        let ok = BndInfo::new(0, 0, &IndexBox([r(0, 3), r(0, 0), r(0, 0)]), 0, 0);
        let c = BndCache::new(l, 1, vec![ok]).unwrap();
        let mut buf = vec![0.0; 3];
        assert!(matches!(
            c.pack(Policy::Serial, &[0.0; 16], &mut buf),
            Err(BoundaryError::Size { .. })
        ));
    }

    /// Row-copy pack gives exactly the point-by-point gather, for block and coarse boxes of
    /// every channel, with several variables and blocks.
    #[test]
    fn pack_matches_the_point_by_point_gather() {
        let f = two_level(3);
        let nb = find_neighbors(&f, &vec![0; f.len()]).unwrap();
        let shape = IndexShape::new([4, 4, 4], 2, 3).unwrap();
        let layout = BlockLayout {
            fine: FieldLayout::of_shape(&shape, 2),
            coarse: Some(FieldLayout::of_shape(&shape.coarse().unwrap(), 2)),
        };
        let nblocks = 3;
        let mut infos = Vec::new();
        for (n, ch) in all_channels(&nb, &[0]).iter().enumerate() {
            for (bx, space) in [send_box(ch, &shape).unwrap(), recv_box(ch, &shape).unwrap()] {
                let flags = if space == Space::Coarse {
                    FLAG_COARSE
                } else {
                    0
                };
                infos.push(BndInfo::new(n % nblocks, n % 2, &bx, 0, flags));
            }
        }
        let c = BndCache::new(layout, nblocks, infos).unwrap();
        let owned: Vec<f64> = (0..nblocks * layout.block_len())
            .map(|i| i as f64)
            .collect();
        let data = &owned[..];
        let mut buf = vec![-1.0; c.buffer_len() + 3];
        c.pack(Policy::Serial, data, &mut buf).unwrap();
        let want: Vec<f64> = c
            .infos()
            .iter()
            .flat_map(|b| {
                let base = b.block * layout.block_len();
                b.index_box()
                    .points()
                    .map(move |p| data[base + layout.index(b, p)])
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(&buf[..c.buffer_len()], &want[..]);
        assert_eq!(&buf[c.buffer_len()..], &[-1.0; 3]);
        let mut threaded = vec![0.0; c.buffer_len()];
        c.pack(Policy::Threaded, data, &mut threaded).unwrap();
        assert_eq!(threaded, want);
    }

    /// Serial (the run list) and threaded (block by block) unpacks write the same values:
    /// every sub-halo of every channel, with some descriptors unallocated (their default),
    /// switched back and forth between unpacks.
    #[test]
    fn unpack_writes_the_buffer_or_the_default_under_either_policy() {
        let shape = IndexShape::new([8, 8, 8], 2, 3).unwrap();
        let f = two_level(3);
        let nb = find_neighbors(&f, &vec![0; f.len()]).unwrap();
        let layout = BlockLayout {
            fine: FieldLayout::of_shape(&shape, 2),
            coarse: Some(FieldLayout::of_shape(&shape.coarse().unwrap(), 2)),
        };
        let nblocks = nb.len();
        let mut infos = Vec::new();
        for ch in all_channels(&nb, &[0, 1]) {
            let (bx, space) = recv_box(&ch, &shape).unwrap();
            let flags = FLAG_ALLOCATED
                | if space == Space::Coarse {
                    FLAG_COARSE
                } else {
                    0
                };
            infos.push(BndInfo::new(ch.key.receiver, ch.key.var, &bx, 0, flags));
        }
        let mut c = BndCache::new(layout, nblocks, infos).unwrap();
        assert!(c.runs.is_disjoint(), "the serial unpack takes the run list");
        let buf: Vec<f64> = (0..c.buffer_len()).map(|i| 1.0 + i as f64).collect();
        let n = c.infos().len();
        for off in [vec![], vec![0, 5, n - 1], (0..n).step_by(2).collect()] {
            for h in 0..n {
                c.set_allocated(h..h + 1, !off.contains(&h));
            }
            let mut want = vec![0.0; nblocks * layout.block_len()];
            for (h, b) in c.infos().iter().enumerate() {
                let base = b.block * layout.block_len();
                for (k, p) in b.index_box().points().enumerate() {
                    want[base + layout.index(b, p)] = if off.contains(&h) {
                        [-1.0, -2.0][b.var]
                    } else {
                        buf[b.buf_offset + k]
                    };
                }
            }
            for policy in [Policy::Serial, Policy::Threaded] {
                let mut data = vec![0.0; want.len()];
                c.unpack(policy, &buf, &mut data, &[-1.0, -2.0]).unwrap();
                assert!(data == want, "{policy:?} with {} unallocated", off.len());
            }
        }
    }

    /// A cache's version changes exactly when its flags do; a clone keeps it, and caches built
    /// alike are equal whatever their versions.
    #[test]
    fn the_version_follows_the_flags() {
        let l = FieldLayout {
            dims: [3, 1, 1],
            nvar: 1,
        };
        let r = |s, e| IndexRange { s, e };
        let infos = vec![
            BndInfo::new(
                0,
                0,
                &IndexBox([r(0, 0), r(0, 0), r(0, 0)]),
                0,
                FLAG_ALLOCATED,
            ),
            BndInfo::new(
                1,
                0,
                &IndexBox([r(2, 2), r(0, 0), r(0, 0)]),
                0,
                FLAG_ALLOCATED,
            ),
        ];
        let mut a = BndCache::new(l, 2, infos.clone()).unwrap();
        let b = BndCache::new(l, 2, infos).unwrap();
        assert!(a == b && a.version() != b.version());
        let v = a.version();
        a.set_allocated(0..2, true);
        assert_eq!(a.version(), v, "no flag flipped");
        a.set_allocated(1..2, false);
        let w = a.version();
        assert!(w != v && a != b);
        let c = a.clone();
        assert_eq!((c.version(), &c), (w, &a));
        a.set_allocated(1..2, true);
        assert!(a.version() != w && a.version() != v && a == b);
    }

    /// Overlapping sub-halos of one array unpack in their order under either policy: the one
    /// listed later wins, with its values or, unallocated, its default. (The later one comes
    /// first in the array, so that copying in array order would get it wrong.)
    #[test]
    fn overlapping_sub_halos_unpack_in_order() {
        let l = FieldLayout {
            dims: [3, 1, 1],
            nvar: 1,
        };
        let r = |s, e| IndexRange { s, e };
        let b = |s, e, flags| BndInfo::new(0, 0, &IndexBox([r(s, e), r(0, 0), r(0, 0)]), 0, flags);
        for (second, want) in [(FLAG_ALLOCATED, [7.0, 8.0, 6.0]), (0, [-1.0, -1.0, 6.0])] {
            let c = BndCache::new(l, 2, vec![b(1, 2, FLAG_ALLOCATED), b(0, 1, second)]).unwrap();
            assert!(!c.runs.is_disjoint());
            for policy in [Policy::Serial, Policy::Threaded] {
                let mut data = vec![0.0; 6];
                c.unpack(policy, &[5.0, 6.0, 7.0, 8.0], &mut data, &[-1.0])
                    .unwrap();
                assert_eq!(data[..3], want, "{policy:?}");
                assert_eq!(data[3..], [0.0; 3]);
            }
        }
    }
}
