//! Plain data the kernels read: the sub-halo descriptor, operation codes, array geometry, and
//! the host-side checks that keep every launch inside its buffers.

use super::error::CudaError;

/// Flag of [`HaloDesc::flags`]: the box indexes a coarse buffer.
pub const FLAG_COARSE: u32 = 1;
/// Flag of [`HaloDesc::flags`]: the sub-halo carries data (clear: unpack writes the default).
pub const FLAG_ALLOCATED: u32 = 2;
/// Flag of [`HaloDesc::flags`] for a physical fill: `FLAG_MIRROR0 << d` mirrors the box across
/// the face along direction `d` (reflecting) instead of clamping onto it (outflow).
pub const FLAG_MIRROR0: u32 = 4;
/// Flag of [`HaloDesc::flags`] for a flux face: `FLAG_NORMAL0 << d` marks the face normal `d`
/// ([`FluxGeom`]).
pub const FLAG_NORMAL0: u32 = 32;

/// One sub-halo (or coarse box) as the boundary kernels read it: `struct sh_bnd_info` of
/// [`HALO_SRC`](super::kernels::HALO_SRC), field for field. Boxes are inclusive (`s..=e`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct HaloDesc {
    /// Block index within the field storage.
    pub block: u64,
    /// Variable index within the block.
    pub var: u64,
    /// First index per direction (inclusive).
    pub s: [u64; 3],
    /// Last index per direction (inclusive).
    pub e: [u64; 3],
    /// Where the sub-halo starts in the communication buffer.
    pub buf_offset: u64,
    /// [`FLAG_COARSE`], [`FLAG_ALLOCATED`].
    pub flags: u32,
    /// Padding, zero.
    pub pad: u32,
}

impl HaloDesc {
    /// Points along direction `d`.
    pub fn extent(&self, d: usize) -> u64 {
        (self.e[d] + 1).saturating_sub(self.s[d])
    }

    /// Points in the box.
    pub fn len(&self) -> u64 {
        (0..3).map(|d| self.extent(d)).product()
    }

    /// True for an empty box.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The points in kernel order (x1 fastest).
    pub fn points(&self) -> impl Iterator<Item = [u64; 3]> + '_ {
        let (s, e) = (self.s, self.e);
        (s[2]..=e[2]).flat_map(move |k| {
            (s[1]..=e[1]).flat_map(move |j| (s[0]..=e[0]).map(move |i| [i, j, k]))
        })
    }
}

/// How a received value combines with the one at the destination: the codes of
/// `SH_OP_*` in [`SF_SRC`](super::kernels::SF_SRC), in the order of the MPI standard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum ReduceOp {
    /// Overwrite.
    Replace = 0,
    /// Add (wrapping for integers).
    Sum = 1,
    /// Multiply (wrapping for integers).
    Prod = 2,
    /// Keep the smaller.
    Min = 3,
    /// Keep the larger.
    Max = 4,
    /// Logical and (integers).
    Land = 5,
    /// Logical or (integers).
    Lor = 6,
    /// Bitwise and (integers).
    Band = 7,
    /// Bitwise or (integers).
    Bor = 8,
    /// Bitwise exclusive or (integers).
    Bxor = 9,
}

impl ReduceOp {
    /// Every operation, by code.
    pub const ALL: [ReduceOp; 10] = [
        ReduceOp::Replace,
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Land,
        ReduceOp::Lor,
        ReduceOp::Band,
        ReduceOp::Bor,
        ReduceOp::Bxor,
    ];

    /// True for the operations only integers have.
    pub fn integer_only(self) -> bool {
        self as i32 >= ReduceOp::Land as i32
    }
}

/// Prolongation operator: the codes of `SH_PROLONG_*` in [`HALO_SRC`](super::kernels::HALO_SRC).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum ProlongOp {
    /// Every child takes the coarse value.
    Constant = 0,
    /// Centred slopes.
    Linear = 1,
    /// Minmod-limited slopes.
    MinmodLinear = 2,
}

/// Field storage as the boundary kernels see it: for each block, for each variable, a
/// row-major array of `dims` points (x1 fastest).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FieldDims {
    /// Points per direction.
    pub dims: [usize; 3],
    /// Variables per block.
    pub nvar: usize,
    /// Blocks.
    pub nblocks: usize,
}

impl FieldDims {
    /// Values in the whole storage.
    pub fn len(&self) -> usize {
        self.dims.iter().product::<usize>() * self.nvar * self.nblocks
    }

    /// True when the storage holds no value.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Flat index of point `p` of variable `var` of `block`.
    pub fn index(&self, block: usize, var: usize, p: [usize; 3]) -> usize {
        (((block * self.nvar + var) * self.dims[2] + p[2]) * self.dims[1] + p[1]) * self.dims[0]
            + p[0]
    }

    fn check_desc(&self, h: usize, d: &HaloDesc) -> Result<(), CudaError> {
        let fits = (0..3).all(|k| d.extent(k) == 0 || d.e[k] < self.dims[k] as u64);
        if d.block >= self.nblocks as u64 || d.var >= self.nvar as u64 || !fits {
            return Err(CudaError::Invalid(format!(
                "descriptor {h} ({d:?}) outside {} blocks of {} variables of {:?} points",
                self.nblocks, self.nvar, self.dims
            )));
        }
        Ok(())
    }
}

/// Checks pack/unpack descriptors against the storage (`coarse` for descriptors with
/// [`FLAG_COARSE`], `f` for the others) and a buffer of `buf_len` values.
///
/// Unlike [`check_physical`], it lets unpack boxes overlap: the boundary exchange's receive
/// boxes image the same cells, at the same level, as their senders' interior boxes (a
/// `bnd_info` test checks this on meshes of all three level cases), and each cell at a level
/// has one source (the interior of the one block at that level that holds it, or the
/// restriction of the one finer block that covers it), so two boxes that write one cell
/// would write the same value, in whichever order the GPU runs them. They do not meet in
/// practice (the `exchange_random` test checks that no two receive boxes share a cell on
/// random meshes), which also keeps a null channel's default from racing another's data.
pub fn check_halos(
    descs: &[HaloDesc],
    f: &FieldDims,
    coarse: Option<&FieldDims>,
    buf_len: usize,
) -> Result<(), CudaError> {
    for (h, d) in descs.iter().enumerate() {
        match (d.flags & FLAG_COARSE != 0, coarse) {
            (false, _) => f.check_desc(h, d)?,
            (true, Some(c)) => c.check_desc(h, d)?,
            (true, None) => {
                return Err(CudaError::Invalid(format!(
                    "descriptor {h} ({d:?}) is coarse, but there are no coarse buffers"
                )))
            }
        }
        if d.buf_offset.saturating_add(d.len()) > buf_len as u64 {
            return Err(CudaError::Invalid(format!(
                "descriptor {h} ends past the buffer of {buf_len} values"
            )));
        }
    }
    Ok(())
}

/// Checks physical fill descriptors: each box lies wholly outside `[lo, hi]` along one
/// direction at least, its sources are in the storage, and no box writes a cell that another
/// box of the same block and variable writes or reads (its sources: its cells clamped onto
/// `[lo, hi]`, or mirrored across the face with [`FLAG_MIRROR0`]` << d`, along the directions
/// it lies outside), so the cells of one launch can be filled in any order.
pub fn check_physical(
    descs: &[HaloDesc],
    f: &FieldDims,
    lo: [usize; 3],
    hi: [usize; 3],
) -> Result<(), CudaError> {
    if (0..3).any(|k| lo[k] > hi[k] || hi[k] >= f.dims[k]) {
        return Err(CudaError::Invalid(format!(
            "physical fill interior {lo:?}..={hi:?} outside {:?} points",
            f.dims
        )));
    }
    let (lo, hi) = (lo.map(|v| v as u64), hi.map(|v| v as u64));
    let outside = |d: &HaloDesc| [0, 1, 2].map(|k| d.e[k] < lo[k] || d.s[k] > hi[k]);
    // Inclusive ranges of the cells a box reads, per direction (a mirror of the high side
    // can reach below 0: `None`).
    let sources = |d: &HaloDesc| {
        let out = outside(d);
        let mirror = |k: usize| d.flags & (FLAG_MIRROR0 << k) != 0;
        [0, 1, 2].map(|k| match (out[k], d.e[k] < lo[k], mirror(k)) {
            (true, true, false) => Some((lo[k], lo[k])),
            (true, false, false) => Some((hi[k], hi[k])),
            (true, true, true) => Some((2 * lo[k] - 1 - d.e[k], 2 * lo[k] - 1 - d.s[k])),
            (true, false, true) => (2 * hi[k] + 1)
                .checked_sub(d.e[k])
                .map(|s| (s, 2 * hi[k] + 1 - d.s[k])),
            (false, _, _) => Some((d.s[k], d.e[k])),
        })
    };
    let meets =
        |a: [(u64, u64); 3], b: &HaloDesc| (0..3).all(|k| a[k].0 <= b.e[k] && b.s[k] <= a[k].1);
    let cells = |d: &HaloDesc| [0, 1, 2].map(|k| (d.s[k], d.e[k]));
    let mut order: Vec<usize> = Vec::with_capacity(descs.len());
    let mut read = vec![[(0, 0); 3]; descs.len()];
    for (h, d) in descs.iter().enumerate() {
        f.check_desc(h, d)?;
        if d.is_empty() {
            continue;
        }
        if outside(d) == [false; 3] {
            return Err(CudaError::Invalid(format!(
                "physical fill descriptor {h} ({d:?}) is not a ghost box (interior \
                 {lo:?}..={hi:?})"
            )));
        }
        let src = sources(d);
        if (0..3).any(|k| src[k].is_none_or(|(_, e)| e >= f.dims[k] as u64)) {
            return Err(CudaError::Invalid(format!(
                "physical fill descriptor {h} ({d:?}) reads outside {:?} points",
                f.dims
            )));
        }
        read[h] = src.map(|r| r.unwrap_or_default());
        order.push(h);
    }
    order.sort_by_key(|&h| (descs[h].block, descs[h].var));
    for group in
        order.chunk_by(|&a, &b| (descs[a].block, descs[a].var) == (descs[b].block, descs[b].var))
    {
        for &a in group {
            for &b in group {
                let (da, db) = (&descs[a], &descs[b]);
                if meets(read[a], db) || (a != b && meets(cells(da), db)) {
                    return Err(CudaError::Invalid(format!(
                        "physical fill descriptor {b} ({db:?}) overlaps the cells descriptor \
                         {a} ({da:?}) writes or reads"
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Face fluxes, as the flux correction kernels see them: per active normal direction `d` one
/// array of `nblocks` blocks of `nslots` slots, each the `n` interior cells widened by one
/// face along `d` (first direction fastest).
///
/// A flux face descriptor ([`HaloDesc`]) has `FLAG_NORMAL0 << d` for its normal `d`,
/// `s[d] == e[d]` its face layer, and along the other directions a box of coarse faces:
/// restriction reads the fine faces `2q` and `2q + 1` under each coarse face `q`, setting
/// writes the box itself (where [`FLAG_ALLOCATED`] is set).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FluxGeom {
    /// Active dimensions (1 to 3).
    pub ndim: usize,
    /// Interior cells per block (1 along inactive directions).
    pub n: [usize; 3],
    /// Slots per block.
    pub nslots: usize,
    /// Blocks.
    pub nblocks: usize,
}

impl FluxGeom {
    /// Points of one slot's face array along `d` (`[0; 3]` for an inactive direction).
    pub fn face_dims(&self, d: usize) -> [usize; 3] {
        if d >= self.ndim.min(3) {
            return [0; 3];
        }
        let mut m = self.n;
        m[d] += 1;
        m
    }

    /// Values of the array along `d`.
    pub fn len(&self, d: usize) -> usize {
        self.nblocks * self.nslots * self.face_dims(d).iter().product::<usize>()
    }

    /// The normal of a flux face descriptor.
    pub fn normal(d: &HaloDesc) -> Option<usize> {
        let bits = (d.flags / FLAG_NORMAL0) & 7;
        match bits {
            1 => Some(0),
            2 => Some(1),
            4 => Some(2),
            _ => None,
        }
    }

    /// Checks flux face descriptors against the arrays and a buffer of `buf_len` values;
    /// `restrict` checks the fine faces under each coarse face instead of the box itself.
    pub fn check(
        &self,
        descs: &[HaloDesc],
        restrict: bool,
        buf_len: usize,
    ) -> Result<(), CudaError> {
        let shape_ok = (1..=3).contains(&self.ndim)
            && (0..3).all(|d| self.n[d] >= 1 && (d < self.ndim || self.n[d] == 1));
        if !shape_ok {
            return Err(CudaError::Invalid(format!("flux geometry {self:?}")));
        }
        for (h, desc) in descs.iter().enumerate() {
            let bad = |why: &str| {
                Err(CudaError::Invalid(format!(
                    "flux face descriptor {h} ({desc:?}) {why} ({self:?})"
                )))
            };
            let Some(d) = Self::normal(desc).filter(|&d| d < self.ndim) else {
                return bad("has no active normal");
            };
            if desc.block >= self.nblocks as u64 || desc.var >= self.nslots as u64 {
                return bad("is outside the blocks or slots");
            }
            let m = self.face_dims(d);
            for (k, &mk) in m.iter().enumerate() {
                if desc.extent(k) == 0 {
                    return bad("is empty");
                }
                let last = if restrict && k != d && k < self.ndim {
                    desc.e[k].checked_mul(2).and_then(|x| x.checked_add(1))
                } else {
                    Some(desc.e[k])
                };
                let outside = last.is_none_or(|l| l >= mk as u64);
                if outside || (k == d && desc.s[k] != desc.e[k]) {
                    return bad("is not one face layer inside its array");
                }
            }
            if desc.buf_offset.saturating_add(desc.len()) > buf_len as u64 {
                return bad(&format!("ends past the buffer of {buf_len} values"));
            }
        }
        Ok(())
    }
}

/// Fine block arrays and their coarse buffers, for restriction and prolongation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RefineGeom {
    /// Active dimensions (1 to 3).
    pub ndim: usize,
    /// Ghost layers of the fine arrays.
    pub nghost: usize,
    /// Ghost layers of the coarse buffers.
    pub coarse_nghost: usize,
    /// The fine storage.
    pub fine: FieldDims,
    /// The coarse storage (same blocks and variables).
    pub coarse: FieldDims,
}

impl RefineGeom {
    /// First fine index under coarse index `c` along `d`, if inside the fine array.
    pub fn first_child(&self, d: usize, c: usize) -> Option<usize> {
        if d >= self.ndim {
            return (c == 0).then_some(0);
        }
        let f = (self.nghost + 2 * c).checked_sub(2 * self.coarse_nghost)?;
        (f + 1 < self.fine.dims[d]).then_some(f)
    }

    /// Checks coarse boxes; `halo` also asks for the face neighbours of every coarse cell
    /// (slopes of prolongation).
    pub fn check(&self, descs: &[HaloDesc], halo: bool) -> Result<(), CudaError> {
        let same = self.fine.nvar == self.coarse.nvar && self.fine.nblocks == self.coarse.nblocks;
        if !(1..=3).contains(&self.ndim) || !same {
            return Err(CudaError::Invalid(format!("refinement geometry {self:?}")));
        }
        for (h, d) in descs.iter().enumerate() {
            self.coarse.check_desc(h, d)?;
            for k in 0..3 {
                if d.extent(k) == 0 {
                    continue;
                }
                let m = u64::from(halo && k < self.ndim);
                let (s, e) = (d.s[k] as usize, d.e[k] as usize);
                let ok = d.s[k] >= m
                    && d.e[k] + m < self.coarse.dims[k] as u64
                    && self.first_child(k, s).is_some()
                    && self.first_child(k, e).is_some();
                if !ok {
                    return Err(CudaError::Invalid(format!(
                        "coarse box {h} ({d:?}) does not map into the fine arrays along x{}",
                        k + 1
                    )));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::kernels::{c_layout, define, struct_fields, HALO_SRC, SF_SRC};
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    #[test]
    fn halo_desc_has_the_layout_of_the_cuda_struct() {
        let fields = struct_fields(HALO_SRC, "sh_bnd_info").unwrap();
        let (offsets, size) = c_layout(&fields);
        let rust = [
            ("block", offset_of!(HaloDesc, block)),
            ("var", offset_of!(HaloDesc, var)),
            ("s", offset_of!(HaloDesc, s)),
            ("e", offset_of!(HaloDesc, e)),
            ("buf_offset", offset_of!(HaloDesc, buf_offset)),
            ("flags", offset_of!(HaloDesc, flags)),
            ("pad", offset_of!(HaloDesc, pad)),
        ];
        let cuda: Vec<(&str, usize)> = offsets.iter().map(|(n, o)| (n.as_str(), *o)).collect();
        assert_eq!(cuda, rust);
        assert_eq!(size, size_of::<HaloDesc>());
        assert_eq!((size, align_of::<HaloDesc>()), (80, 8));
        assert_eq!(
            define(HALO_SRC, "SH_FLAG_COARSE"),
            Some(u64::from(FLAG_COARSE))
        );
        assert_eq!(
            define(HALO_SRC, "SH_FLAG_ALLOCATED"),
            Some(u64::from(FLAG_ALLOCATED))
        );
        assert_eq!(
            define(HALO_SRC, "SH_FLAG_MIRROR0"),
            Some(u64::from(FLAG_MIRROR0))
        );
        assert_eq!(
            define(HALO_SRC, "SH_FLAG_NORMAL0"),
            Some(u64::from(FLAG_NORMAL0))
        );
    }

    #[test]
    fn flux_faces_are_checked_against_their_arrays() {
        // 2-D, 4x2 cells: faces along x1 are 5x2, along x2 4x3.
        let g = FluxGeom {
            ndim: 2,
            n: [4, 2, 1],
            nslots: 2,
            nblocks: 1,
        };
        assert_eq!((g.len(0), g.len(1)), (20, 24));
        let face = |d: usize, s: [u64; 3], e: [u64; 3]| HaloDesc {
            block: 0,
            var: 1,
            s,
            e,
            buf_offset: 0,
            flags: FLAG_NORMAL0 << d,
            pad: 0,
        };
        // The upper x1 face of the fine block, one coarse face along x2 (fine faces 0, 1).
        let up = face(0, [4, 0, 0], [4, 0, 0]);
        assert_eq!(FluxGeom::normal(&up), Some(0));
        g.check(&[up], true, 1).unwrap();
        assert!(g.check(&[up], true, 0).is_err(), "buffer too short");
        // Along x2 the coarse faces 0..=1 restrict fine faces up to 3 of 4: fine; 0..=2 not.
        g.check(&[face(1, [0, 2, 0], [1, 2, 0])], true, 2).unwrap();
        assert!(g.check(&[face(1, [0, 2, 0], [2, 2, 0])], true, 3).is_err());
        // A box whose fine faces overflow the index arithmetic is refused, not wrapped.
        let huge = face(1, [(1 << 63) - 1, 2, 0], [1 << 63, 2, 0]);
        assert!(g.check(&[huge], true, 9).is_err());
        g.check(&[face(1, [0, 2, 0], [2, 2, 0])], false, 3).unwrap();
        // Two layers along the normal, a normal out of the mesh, or none.
        assert!(g.check(&[face(0, [3, 0, 0], [4, 0, 0])], false, 9).is_err());
        assert!(g.check(&[face(2, [0, 0, 0], [0, 0, 0])], false, 9).is_err());
        let mut none = up;
        none.flags = FLAG_ALLOCATED;
        assert!(g.check(&[none], false, 9).is_err());
        let mut slot = up;
        slot.var = 2;
        assert!(g.check(&[slot], false, 9).is_err());
    }

    #[test]
    fn operation_codes_match_the_cuda_defines() {
        let names = [
            "REPLACE", "SUM", "PROD", "MIN", "MAX", "LAND", "LOR", "BAND", "BOR", "BXOR",
        ];
        for (op, n) in ReduceOp::ALL.iter().zip(names) {
            assert_eq!(
                define(SF_SRC, &format!("SH_OP_{n}")),
                Some(*op as u64),
                "{n}"
            );
            assert_eq!(op.integer_only(), *op as i32 >= 5);
        }
        for (op, n) in [
            (ProlongOp::Constant, "CONSTANT"),
            (ProlongOp::Linear, "LINEAR"),
            (ProlongOp::MinmodLinear, "MINMOD"),
        ] {
            assert_eq!(
                define(HALO_SRC, &format!("SH_PROLONG_{n}")),
                Some(op as u64)
            );
        }
    }

    fn desc(block: u64, s: [u64; 3], e: [u64; 3], buf_offset: u64) -> HaloDesc {
        HaloDesc {
            block,
            s,
            e,
            buf_offset,
            ..Default::default()
        }
    }

    #[test]
    fn descriptors_outside_storage_or_buffer_are_refused() {
        let f = FieldDims {
            dims: [4, 3, 1],
            nvar: 2,
            nblocks: 2,
        };
        assert_eq!(f.len(), 48);
        assert_eq!(f.index(1, 1, [3, 2, 0]), 47);
        let ok = desc(1, [1, 0, 0], [3, 2, 0], 5);
        assert_eq!(ok.len(), 9);
        assert_eq!(ok.points().next(), Some([1, 0, 0]));
        assert_eq!(ok.points().nth(3), Some([1, 1, 0]));
        assert!(check_halos(&[ok], &f, None, 14).is_ok());
        assert!(check_halos(&[ok], &f, None, 13).is_err());
        assert!(check_halos(&[desc(2, [0; 3], [0; 3], 0)], &f, None, 1).is_err());
        assert!(check_halos(&[desc(0, [0; 3], [4, 0, 0], 0)], &f, None, 9).is_err());
        // Coarse descriptors are checked against the coarse buffers, which must exist.
        let c = FieldDims {
            dims: [2, 2, 1],
            ..f
        };
        let co = HaloDesc {
            flags: FLAG_COARSE,
            ..desc(0, [0; 3], [1, 1, 0], 0)
        };
        assert!(check_halos(&[co], &f, Some(&c), 4).is_ok());
        assert!(check_halos(&[co], &f, None, 4).is_err());
        let wide = HaloDesc {
            flags: FLAG_COARSE,
            ..desc(0, [0; 3], [2, 0, 0], 0)
        };
        assert!(check_halos(&[wide], &f, Some(&c), 4).is_err());
        let var = HaloDesc {
            var: 2,
            ..desc(0, [0; 3], [0; 3], 0)
        };
        assert!(check_halos(&[var], &f, None, 1).is_err());
        // Empty boxes (e < s) are fine anywhere in range.
        assert!(check_halos(&[desc(0, [3, 0, 0], [2, 0, 0], 0)], &f, None, 0).is_ok());
    }

    #[test]
    fn physical_boxes_must_not_touch_what_others_write_or_read() {
        let f = FieldDims {
            dims: [6, 6, 1],
            nvar: 1,
            nblocks: 1,
        };
        let (lo, hi) = ([2, 2, 0], [3, 3, 0]);
        let left = desc(0, [0, 0, 0], [1, 5, 0], 0);
        let right = desc(0, [4, 0, 0], [5, 5, 0], 0);
        let bottom = desc(0, [0, 0, 0], [5, 1, 0], 0);
        assert!(check_physical(&[left, right], &f, lo, hi).is_ok());
        // Both write the corner (0..=1, 0..=1).
        assert!(check_physical(&[left, bottom], &f, lo, hi).is_err());
        // Disjoint, but the edge strip reads (2, 0..=1), which the corner-free bottom writes.
        let bottom_strip = desc(0, [2, 0, 0], [5, 1, 0], 0);
        let left_rows = desc(0, [0, 0, 0], [1, 5, 0], 0);
        assert!(check_physical(&[left_rows, bottom_strip], &f, lo, hi).is_err());
        // The element split: a corner, the two edges next to it, each clamped on its own.
        let corner = desc(0, [0, 0, 0], [1, 1, 0], 0);
        let x_edge = desc(0, [0, 2, 0], [1, 5, 0], 0);
        let y_edge = desc(0, [2, 0, 0], [5, 1, 0], 0);
        assert!(check_physical(&[corner, x_edge, y_edge], &f, lo, hi).is_ok());
        // Other blocks never conflict.
        let other = HaloDesc { block: 1, ..left };
        let f2 = FieldDims { nblocks: 2, ..f };
        assert!(check_physical(&[left, bottom_strip, other], &f2, lo, hi).is_err());
        assert!(check_physical(&[x_edge, HaloDesc { block: 1, ..bottom }], &f2, lo, hi).is_ok());
        assert!(check_physical(&[desc(0, [2, 2, 0], [3, 3, 0], 0)], &f, lo, hi).is_err());
        // One interior column (x1 = 2): the mirror of the left ghosts reads columns 2..=3, so
        // it meets the right ghosts, which clamping (column 2 only) does not; the mirror of the
        // right ghosts reads columns 0..=2.
        let mirror = |d: HaloDesc, k: u32| HaloDesc {
            flags: FLAG_MIRROR0 << k,
            ..d
        };
        let (lo2, hi2) = ([2, 2, 0], [2, 3, 0]);
        let right3 = desc(0, [3, 0, 0], [5, 5, 0], 0);
        assert!(check_physical(&[left, right3], &f, lo2, hi2).is_ok());
        assert!(check_physical(&[mirror(left, 0), right3], &f, lo2, hi2).is_err());
        assert!(check_physical(&[left, mirror(right3, 0)], &f, lo2, hi2).is_err());
        assert!(check_physical(&[mirror(left, 1), right3], &f, lo2, hi2).is_ok());
        // A mirror that leaves the storage: interior 1..=1 of 6 points, ghosts 2..=5.
        let wide = desc(0, [2, 0, 0], [5, 0, 0], 0);
        let (lo1, hi1) = ([1, 0, 0], [1, 0, 0]);
        assert!(check_physical(&[wide], &f, lo1, hi1).is_ok());
        assert!(check_physical(&[mirror(wide, 0)], &f, lo1, hi1).is_err());
    }

    #[test]
    fn refine_boxes_map_into_the_fine_arrays() {
        // 1-D: 4 interior cells, 2 ghosts (8 points); coarse 2 cells, 2 ghosts (6 points).
        let geo = RefineGeom {
            ndim: 1,
            nghost: 2,
            coarse_nghost: 2,
            fine: FieldDims {
                dims: [8, 1, 1],
                nvar: 1,
                nblocks: 1,
            },
            coarse: FieldDims {
                dims: [6, 1, 1],
                nvar: 1,
                nblocks: 1,
            },
        };
        assert_eq!(geo.first_child(0, 2), Some(2));
        assert_eq!(geo.first_child(0, 0), None);
        assert_eq!(geo.first_child(1, 0), Some(0));
        let interior = desc(0, [2, 0, 0], [3, 0, 0], 0);
        assert!(geo.check(&[interior], true).is_ok());
        assert!(geo
            .check(&[desc(0, [1, 0, 0], [3, 0, 0], 0)], false)
            .is_ok());
        assert!(geo
            .check(&[desc(0, [0, 0, 0], [3, 0, 0], 0)], false)
            .is_err());
        assert!(geo
            .check(&[desc(0, [1, 0, 0], [4, 0, 0], 0)], false)
            .is_ok());
        assert!(geo
            .check(&[desc(0, [1, 0, 0], [5, 0, 0], 0)], true)
            .is_err());
        assert!(geo
            .check(&[desc(0, [2, 0, 0], [3, 1, 0], 0)], false)
            .is_err());
    }
}
