//! Star-forest gather and scatter over index sets: ranges, 3-D boxes and explicit lists.

use std::sync::Arc;

use super::invalid;
use crate::buffer::Buffer;
use crate::cuda::desc::ReduceOp;
use crate::cuda::device::{grid_for, Device};
use crate::cuda::error::CudaError;
use smallvec::smallvec;

use crate::cuda::ffi::{Arg, Args};
use crate::cuda::kernels::KernelSet;
use crate::element::{Element, ScalarKind};

const BLOCK: u32 = 256;

/// An explicit list of unit indices held on a device, with what the host learnt of it.
#[derive(Debug)]
pub struct IndexList {
    idx: Buffer<u64>,
    max: Option<u64>,
    duplicates: bool,
}

impl IndexList {
    /// Uploads `idx` to `dev`.
    pub fn new(dev: &Arc<Device>, idx: &[usize]) -> Result<Self, CudaError> {
        let v: Vec<u64> = idx.iter().map(|&i| i as u64).collect();
        let mut sorted = v.clone();
        sorted.sort_unstable();
        Ok(Self {
            duplicates: sorted.windows(2).any(|w| w[0] == w[1]),
            max: sorted.last().copied(),
            idx: Buffer::from_host_to(dev, &v)?,
        })
    }

    /// Number of indices.
    pub fn len(&self) -> usize {
        self.idx.len()
    }

    /// True when the list is empty.
    pub fn is_empty(&self) -> bool {
        self.idx.is_empty()
    }

    /// True when some index occurs twice (unpacking then uses atomics).
    pub fn duplicates(&self) -> bool {
        self.duplicates
    }
}

/// Which units a gather reads or a scatter writes (the device form of a pack plan).
#[derive(Debug, Clone, Copy)]
pub enum DeviceIndices<'a> {
    /// `start..start + len`: a plain device copy when no operation is involved.
    Range {
        /// First unit.
        start: usize,
        /// Units.
        len: usize,
    },
    /// `start + sy * k + sx * j + i` for `i < dx, j < dy, k < dz`, with `sx >= dx` and
    /// `sy >= dy * sx` (rows and planes do not overlap).
    Box {
        /// First unit.
        start: usize,
        /// Units per row.
        dx: usize,
        /// Rows per plane.
        dy: usize,
        /// Planes.
        dz: usize,
        /// Row stride.
        sx: usize,
        /// Plane stride.
        sy: usize,
    },
    /// An explicit list.
    List(&'a IndexList),
}

impl DeviceIndices<'_> {
    /// Number of units.
    pub fn len(&self) -> usize {
        match self {
            DeviceIndices::Range { len, .. } => *len,
            DeviceIndices::Box { dx, dy, dz, .. } => dx * dy * dz,
            DeviceIndices::List(l) => l.len(),
        }
    }

    /// True when there is no unit.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One past the largest unit index, checked for overflow; a box whose rows or planes
    /// overlap is refused.
    pub(super) fn end(&self) -> Result<usize, CudaError> {
        let over = || CudaError::Invalid(format!("index set {self:?} overflows"));
        match *self {
            DeviceIndices::Range { start, len } => start.checked_add(len).ok_or_else(over),
            DeviceIndices::Box {
                start,
                dx,
                dy,
                dz,
                sx,
                sy,
            } => {
                // Tested one factor at a time: the product may overflow. Once the last unit is
                // in range, so is the product (rows and planes do not overlap: it is at most
                // the end), and `len` may be taken.
                if dx == 0 || dy == 0 || dz == 0 {
                    return Ok(0);
                }
                if sx < dx || sy < dy.checked_mul(sx).ok_or_else(over)? {
                    return invalid(format!("box {self:?} has overlapping rows or planes"));
                }
                let last = (dz - 1)
                    .checked_mul(sy)
                    .and_then(|a| (dy - 1).checked_mul(sx).and_then(|b| a.checked_add(b)))
                    .and_then(|a| a.checked_add(start.checked_add(dx)?))
                    .ok_or_else(over)?;
                Ok(last)
            }
            DeviceIndices::List(l) => Ok(l.max.map_or(0, |m| m as usize + 1)),
        }
    }
}

fn scalar<T: Element>() -> Result<ScalarKind, CudaError> {
    T::SCALAR.ok_or_else(|| {
        CudaError::Invalid(format!(
            "no device kernels for {} (f32, f64, i32, u32, i64, u64 only)",
            std::any::type_name::<T>()
        ))
    })
}

pub(super) fn fits(
    what: &str,
    end_units: usize,
    lanes: usize,
    len: usize,
) -> Result<(), CudaError> {
    match end_units.checked_mul(lanes) {
        Some(e) if e <= len => Ok(()),
        _ => invalid(format!(
            "{what}: {end_units} units of {lanes} lanes do not fit {len} values"
        )),
    }
}

/// Checks that `n` units of `lanes` values from `off` fit a buffer of `len` values; returns
/// how many values they are.
fn packed(what: &str, off: usize, n: usize, lanes: usize, len: usize) -> Result<usize, CudaError> {
    match n.checked_mul(lanes).map(|c| (c, off.checked_add(c))) {
        Some((c, Some(end))) if end <= len => Ok(c),
        _ => invalid(format!(
            "{what} of {n} units of {lanes} lanes at {off} past {len} values"
        )),
    }
}

fn box_args(i: &DeviceIndices<'_>) -> [Arg; 5] {
    let (start, dx, dy, sx, sy) = match *i {
        DeviceIndices::Box {
            start,
            dx,
            dy,
            sx,
            sy,
            ..
        } => (start, dx, dy, sx, sy),
        DeviceIndices::Range { start, len } => (start, len.max(1), 1, len.max(1), len.max(1)),
        DeviceIndices::List(_) => (0, 1, 1, 1, 1), // not read: lists launch the list kernels
    };
    [start, dx, dy, sx, sy].map(|v| Arg::U64(v as u64))
}

impl Device {
    /// Packs: `dst[dst_off + p * lanes + l] = src[idx(p) * lanes + l]` for every unit `p` of
    /// `idx` and lane `l`. A range is a device copy; boxes and lists are one kernel.
    pub fn gather<T: Element>(
        &self,
        src: &Buffer<T>,
        idx: &DeviceIndices<'_>,
        lanes: usize,
        dst: &mut Buffer<T>,
        dst_off: usize,
    ) -> Result<(), CudaError> {
        let kind = scalar::<T>()?;
        // The end first: it refuses a box whose unit count would overflow.
        fits("gather source", idx.end()?, lanes, src.len())?;
        let n = idx.len();
        let count = packed("gather", dst_off, n, lanes, dst.len())?;
        if count == 0 {
            return Ok(());
        }
        let s = src.on_device(self)?;
        if let DeviceIndices::Range { start, len } = *idx {
            return dst
                .on_device_mut(self)?
                .copy_from(dst_off, s, start * lanes, len * lanes);
        }
        let list = match idx {
            DeviceIndices::List(l) => Some(l.idx.on_device(self)?.address()),
            _ => None,
        };
        let d = dst.on_device_mut(self)?;
        let (name, args) = gather_args(kind, s.address(), d.address(), dst_off, idx, lanes, list);
        self.launch(KernelSet::Sf, name, grid_for(count, BLOCK), BLOCK, &args)
    }

    /// Unpacks: `dst[idx(p) * lanes + l] = dst[..] op src[src_off + p * lanes + l]`. A range
    /// with [`ReduceOp::Replace`] is a device copy; a list that repeats an index uses atomics
    /// (so floating-point sums and products may round in another order than on the host).
    #[allow(clippy::too_many_arguments)]
    pub fn scatter<T: Element>(
        &self,
        src: &Buffer<T>,
        src_off: usize,
        idx: &DeviceIndices<'_>,
        lanes: usize,
        op: ReduceOp,
        dst: &mut Buffer<T>,
    ) -> Result<(), CudaError> {
        let kind = scalar::<T>()?;
        if kind.is_float() && op.integer_only() {
            return invalid(format!("{op:?} is not defined for {}", kind.suffix()));
        }
        fits("scatter destination", idx.end()?, lanes, dst.len())?;
        let n = idx.len();
        let count = packed("scatter", src_off, n, lanes, src.len())?;
        if count == 0 {
            return Ok(());
        }
        let s = src.on_device(self)?;
        if let (DeviceIndices::Range { start, len }, ReduceOp::Replace) = (*idx, op) {
            return dst
                .on_device_mut(self)?
                .copy_from(start * lanes, s, src_off, len * lanes);
        }
        let list = match idx {
            DeviceIndices::List(l) => Some(l.idx.on_device(self)?.address()),
            _ => None,
        };
        let d = dst.on_device_mut(self)?;
        let (name, args) = scatter_args(
            kind,
            s.address(),
            src_off,
            d.address(),
            idx,
            lanes,
            op,
            list,
        );
        self.launch(KernelSet::Sf, name, grid_for(count, BLOCK), BLOCK, &args)
    }
}

/// Kernel name and arguments of a gather (`list`: the device address of a list's indices).
pub(super) fn gather_args(
    kind: ScalarKind,
    src: u64,
    dst: u64,
    dst_off: usize,
    idx: &DeviceIndices<'_>,
    lanes: usize,
    list: Option<u64>,
) -> (&'static str, Args) {
    let mut args = smallvec![
        Arg::Ptr(src),
        Arg::Ptr(dst),
        Arg::U64(dst_off as u64),
        Arg::U64(idx.len() as u64),
        Arg::U64(lanes as u64),
    ];
    let family = match list {
        Some(l) => {
            args.push(Arg::Ptr(l));
            "gather_list"
        }
        None => {
            args.extend(box_args(idx));
            "gather_box"
        }
    };
    (kernel_name(family, kind), args)
}

/// `sh_{family}_{suffix}` of the SF kernels, without formatting a name at each launch.
pub(super) fn kernel_name(family: &str, kind: ScalarKind) -> &'static str {
    macro_rules! of {
        ($f:literal) => {
            [
                concat!("sh_", $f, "_f32"),
                concat!("sh_", $f, "_f64"),
                concat!("sh_", $f, "_i32"),
                concat!("sh_", $f, "_u32"),
                concat!("sh_", $f, "_i64"),
                concat!("sh_", $f, "_u64"),
            ]
        };
    }
    // In the order of ScalarKind::ALL.
    let names = match family {
        "gather_box" => of!("gather_box"),
        "gather_list" => of!("gather_list"),
        "scatter_box" => of!("scatter_box"),
        "scatter_list" => of!("scatter_list"),
        // "scatter_list_atomic", the one family left.
        _ => of!("scatter_list_atomic"),
    };
    names[kind as usize]
}

/// Kernel name and arguments of a scatter.
#[allow(clippy::too_many_arguments)]
pub(super) fn scatter_args(
    kind: ScalarKind,
    src: u64,
    src_off: usize,
    dst: u64,
    idx: &DeviceIndices<'_>,
    lanes: usize,
    op: ReduceOp,
    list: Option<u64>,
) -> (&'static str, Args) {
    let mut args = smallvec![
        Arg::Ptr(src),
        Arg::U64(src_off as u64),
        Arg::Ptr(dst),
        Arg::U64(idx.len() as u64),
        Arg::U64(lanes as u64),
        Arg::I32(op as i32),
    ];
    let family = match (list, idx) {
        (Some(l), DeviceIndices::List(il)) => {
            args.push(Arg::Ptr(l));
            if il.duplicates {
                "scatter_list_atomic"
            } else {
                "scatter_list"
            }
        }
        _ => {
            args.extend(box_args(idx));
            "scatter_box"
        }
    };
    (kernel_name(family, kind), args)
}
