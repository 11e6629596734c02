//! Pack plans on a CUDA device (feature `cuda`): each [`Plan`](crate::plan::Plan) becomes the device index set
//! the gather/scatter kernels of `starhalo_exec::cuda` walk. A contiguous plan is a plain
//! device copy (or nothing, when MPI reads the array in place), a strided plan one 3-D box
//! kernel, a list one kernel over indices uploaded once; unpacking a list with duplicates
//! uses atomics. [`DeviceStaged`] runs a forest's bcast and reduce on device arrays, staged
//! through the host ([`Staged`](crate::Staged)): gather kernels into a packed device array,
//! one download (the one stream synchronisation before MPI), the packed forest's MPI traffic
//! in place, one upload, scatter kernels with the op.

use std::str::FromStr;

use starhalo_exec::cuda::ReduceOp;

use crate::unit::Op;

/// How device data crosses MPI: `staged` through host copies (any MPI), `aware` as device
/// pointers handed to MPI (an MPI with CUDA support), `auto` the latter where the MPI reports
/// CUDA support ([`mpi_cuda_support`](crate::mpi_cuda_support)), else the former.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GpuMpi {
    #[default]
    Auto,
    Staged,
    Aware,
}

impl GpuMpi {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            GpuMpi::Auto => "auto",
            GpuMpi::Staged => "staged",
            GpuMpi::Aware => "aware",
        }
    }

    /// `Staged` or `Aware` for this MPI, given whether it reports CUDA support; forcing
    /// `Aware` on one that does not is an error.
    pub fn resolve(self, cuda_support: bool) -> Result<Self, String> {
        match (self, cuda_support) {
            (GpuMpi::Auto, true) | (GpuMpi::Aware, true) => Ok(GpuMpi::Aware),
            (GpuMpi::Auto, false) | (GpuMpi::Staged, _) => Ok(GpuMpi::Staged),
            (GpuMpi::Aware, false) => Err("GPU-aware MPI was asked for, but this MPI does not \
                 report CUDA support (MPIX_Query_cuda_support)"
                .into()),
        }
    }
}

impl FromStr for GpuMpi {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        [GpuMpi::Auto, GpuMpi::Staged, GpuMpi::Aware]
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| format!("unknown GPU MPI path `{s}` (expected auto, staged or aware)"))
    }
}

/// The device kernels' code of `op`.
pub fn reduce_op(op: Op) -> ReduceOp {
    match op {
        Op::Replace => ReduceOp::Replace,
        Op::Sum => ReduceOp::Sum,
        Op::Prod => ReduceOp::Prod,
        Op::Min => ReduceOp::Min,
        Op::Max => ReduceOp::Max,
        Op::Land => ReduceOp::Land,
        Op::Lor => ReduceOp::Lor,
        Op::Band => ReduceOp::Band,
        Op::Bor => ReduceOp::Bor,
        Op::Bxor => ReduceOp::Bxor,
    }
}

#[cfg(feature = "cuda")]
pub use on_device::{DevicePlan, DeviceSfError, DeviceStaged};

#[cfg(feature = "cuda")]
mod on_device {
    use std::sync::Arc;

    use starhalo_exec::cuda::{CudaError, Device, DeviceIndices, IndexList};
    use starhalo_exec::{Buffer, Element, SpaceError};

    use super::{reduce_op, GpuMpi};
    use crate::error::SfError;
    use crate::forest::StarForest;
    use crate::plan::{PackPlan, Plan};
    use crate::staged::{Segment, Staged};
    use crate::unit::{reducer, Op, Unit};

    /// A pack plan with its indices on a device.
    #[derive(Debug)]
    pub struct DevicePlan {
        kind: PackPlan,
        list: Option<IndexList>,
    }

    /// The device index set of a contiguous or strided plan (lists need their device copy).
    pub(super) fn pattern(kind: &PackPlan) -> Option<DeviceIndices<'static>> {
        match *kind {
            PackPlan::Contiguous { start, len } => Some(DeviceIndices::Range { start, len }),
            PackPlan::Strided {
                start,
                dx,
                dy,
                dz,
                sx,
                sy,
            } => Some(DeviceIndices::Box {
                start,
                dx,
                dy,
                dz,
                sx,
                sy,
            }),
            PackPlan::List(_) => None,
        }
    }

    impl DevicePlan {
        /// Prepares `plan` on `dev` (uploads a list's indices).
        pub fn new(dev: &Arc<Device>, plan: &Plan) -> Result<Self, CudaError> {
            let list = match &plan.kind {
                PackPlan::List(idx) => Some(IndexList::new(dev, idx)?),
                _ => None,
            };
            Ok(Self {
                kind: match plan.kind {
                    PackPlan::List(_) => PackPlan::List(Vec::new()),
                    ref k => k.clone(),
                },
                list,
            })
        }

        /// The device index set.
        pub fn indices(&self) -> DeviceIndices<'_> {
            match &self.list {
                Some(l) => DeviceIndices::List(l),
                None => pattern(&self.kind).unwrap_or(DeviceIndices::Range { start: 0, len: 0 }),
            }
        }

        /// `dst[dst_off..]` = the plan's units of `src`, `lanes` scalars per unit.
        pub fn pack<T: Element>(
            &self,
            dev: &Device,
            src: &Buffer<T>,
            lanes: usize,
            dst: &mut Buffer<T>,
            dst_off: usize,
        ) -> Result<(), CudaError> {
            dev.gather(src, &self.indices(), lanes, dst, dst_off)
        }

        /// The plan's units of `dst` combine with `src[src_off..]` by `op`.
        pub fn unpack<T: Element>(
            &self,
            dev: &Device,
            src: &Buffer<T>,
            src_off: usize,
            lanes: usize,
            op: Op,
            dst: &mut Buffer<T>,
        ) -> Result<(), CudaError> {
            dev.scatter(src, src_off, &self.indices(), lanes, reduce_op(op), dst)
        }
    }

    /// What a staged device operation can fail on: the forest (bad lengths, an op the unit
    /// type lacks), or the device.
    #[derive(Debug, thiserror::Error)]
    pub enum DeviceSfError {
        #[error(transparent)]
        Sf(#[from] SfError),
        #[error(transparent)]
        Cuda(#[from] CudaError),
        #[error(transparent)]
        Space(#[from] SpaceError),
        #[error("{0}")]
        Unsupported(String),
    }

    /// A star forest's bcast and reduce on device arrays of scalars `T`: gather kernels into
    /// a packed device array, then either (staged) one download, the packed forest's MPI on
    /// the host copy and one upload, or (GPU-aware) MPI reading and writing the packed device
    /// arrays in place, and scatter kernels with the op. The packed arrays are allocated once.
    ///
    /// Results equal the host forest's, except a reduce onto roots that several leaves of one
    /// rank share: their segment unpacks with atomics, so `Replace` keeps one of those leaves,
    /// not necessarily the last, and floating-point sums and products may round in another
    /// order.
    #[derive(Debug)]
    pub struct DeviceStaged<T: Element> {
        staged: Staged,
        roots: Vec<(DevicePlan, usize)>,
        leaves: Vec<(DevicePlan, usize)>,
        /// Packed roots and leaves on the device (at least one unit each), and their host
        /// copies on the staged path (none GPU-aware).
        device: [Buffer<T>; 2],
        host: [Vec<T>; 2],
        mpi: GpuMpi,
    }

    fn plans(dev: &Arc<Device>, segs: &[Segment]) -> Result<Vec<(DevicePlan, usize)>, CudaError> {
        segs.iter()
            .filter(|s| !s.plan.is_empty())
            .map(|s| Ok((DevicePlan::new(dev, &s.plan)?, s.offset)))
            .collect()
    }

    impl<T: Element + Unit> DeviceStaged<T> {
        /// Prepares `sf` for arrays on `dev`, crossing MPI as `mpi` resolves for this MPI.
        /// Collective over the forest's communicator.
        pub fn new(dev: &Arc<Device>, sf: &StarForest, mpi: GpuMpi) -> Result<Self, DeviceSfError> {
            let mpi = mpi
                .resolve(crate::mpi_cuda_support())
                .map_err(DeviceSfError::Unsupported)?;
            let staged = Staged::new(sf)?;
            let n = [staged.packed_roots().max(1), staged.packed_leaves().max(1)];
            // The packed arrays are what a GPU-aware MPI reads and writes.
            let packed = |n| match mpi {
                GpuMpi::Aware => Buffer::zeroed_for_mpi(dev, n),
                _ => Buffer::zeroed_on(dev, n),
            };
            Ok(Self {
                roots: plans(dev, staged.root_segments())?,
                leaves: plans(dev, staged.leaf_segments())?,
                device: [packed(n[0])?, packed(n[1])?],
                // Only the staged path copies through the host.
                host: match mpi {
                    GpuMpi::Staged => n.map(|n| vec![T::zeroed(); n]),
                    _ => Default::default(),
                },
                staged,
                mpi,
            })
        }

        /// How this forest's traffic crosses MPI: `Staged` or `Aware`.
        pub fn mpi(&self) -> GpuMpi {
            self.mpi
        }

        /// Moves the packed arrays: through host copies, or in place by a GPU-aware MPI
        /// (this rank's own segment copied on the device).
        fn move_packed(&mut self, dev: &Device, reduce: bool) -> Result<(), DeviceSfError> {
            let (nr, nl) = (self.staged.packed_roots(), self.staged.packed_leaves());
            let [proots, pleaves] = &mut self.device;
            let [hroots, hleaves] = &mut self.host;
            let addr = |b: &Buffer<T>| b.device_address().unwrap_or(0) as usize as *mut u8;
            let (root_addr, leaf_addr) = (addr(proots), addr(pleaves));
            // Source and destination of this direction: device array, host copy, length.
            let ((src, hsrc, ns), (dst, hdst, nd)) = match reduce {
                false => ((proots, hroots, nr), (pleaves, hleaves, nl)),
                true => ((pleaves, hleaves, nl), (proots, hroots, nr)),
            };
            if self.mpi == GpuMpi::Aware {
                // The gathers must be done before MPI reads device memory.
                dev.synchronize()?;
                if let Some((r, l, n)) = self.staged.self_segment() {
                    let (from, to) = if reduce { (l, r) } else { (r, l) };
                    dst.copy_range_from(to, src, from, n)?;
                }
                // SAFETY: both are device buffers of at least the packed lengths, alive and
                // untouched by other work until the move returns; the MPI reports CUDA
                // support, so it reads and writes device memory itself.
                unsafe {
                    self.staged
                        .move_raw(root_addr, leaf_addr, std::mem::size_of::<T>(), reduce)?
                };
                return Ok(());
            }
            if ns > 0 {
                src.download(hsrc)?;
            }
            let packed = self.staged.packed();
            match reduce {
                false => packed.bcast(&hsrc[..ns], &mut hdst[..nd], Op::Replace)?,
                true => packed.reduce(&hsrc[..ns], &mut hdst[..nd], Op::Replace)?,
            }
            if nd > 0 {
                dst.upload(hdst)?;
            }
            Ok(())
        }

        /// `leaf = leaf op root`, both arrays on `dev`.
        pub fn bcast(
            &mut self,
            dev: &Device,
            root: &Buffer<T>,
            leaf: &mut Buffer<T>,
            op: Op,
        ) -> Result<(), DeviceSfError> {
            self.run(dev, root, leaf, op, false)
        }

        /// `root = root op leaf`, both arrays on `dev`.
        pub fn reduce(
            &mut self,
            dev: &Device,
            leaf: &Buffer<T>,
            root: &mut Buffer<T>,
            op: Op,
        ) -> Result<(), DeviceSfError> {
            self.run(dev, leaf, root, op, true)
        }

        /// Gathers `from` into its packed array, moves it to the other and scatters it into
        /// `to` with `op`: roots to leaves, or leaves to roots with `reduce`.
        fn run(
            &mut self,
            dev: &Device,
            from: &Buffer<T>,
            to: &mut Buffer<T>,
            op: Op,
            reduce: bool,
        ) -> Result<(), DeviceSfError> {
            let (nroot, nleaf) = if reduce {
                (to.len(), from.len())
            } else {
                (from.len(), to.len())
            };
            self.staged.check(nroot, nleaf)?;
            reducer::<T>(op)?;
            let (src, gathers) = match reduce {
                false => (0, &self.roots),
                true => (1, &self.leaves),
            };
            // A device failure before the move leaves this rank's peers sending for it, as a
            // failed check does: the forest goes out of step (see `SfError::OutOfStep`).
            for (p, off) in gathers {
                p.pack(dev, from, 1, &mut self.device[src], *off)
                    .inspect_err(|_| self.staged.set_out_of_step())?;
            }
            self.move_packed(dev, reduce)
                .inspect_err(|_| self.staged.set_out_of_step())?;
            let scatters = if reduce { &self.roots } else { &self.leaves };
            for (p, off) in scatters {
                p.unpack(dev, &self.device[1 - src], *off, 1, op, to)?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_mpi_paths_resolve_against_what_the_mpi_reports() {
        for m in [GpuMpi::Auto, GpuMpi::Staged, GpuMpi::Aware] {
            assert_eq!(m.name().parse::<GpuMpi>(), Ok(m));
        }
        assert!("gpu"
            .parse::<GpuMpi>()
            .unwrap_err()
            .contains("auto, staged or aware"));
        assert_eq!(GpuMpi::Auto.resolve(false), Ok(GpuMpi::Staged));
        assert_eq!(GpuMpi::Auto.resolve(true), Ok(GpuMpi::Aware));
        assert_eq!(GpuMpi::Staged.resolve(true), Ok(GpuMpi::Staged));
        assert_eq!(GpuMpi::Aware.resolve(true), Ok(GpuMpi::Aware));
        let e = GpuMpi::Aware.resolve(false).unwrap_err();
        assert!(e.contains("MPIX_Query_cuda_support"), "{e}");
    }

    #[test]
    fn every_op_maps_to_the_kernel_code_of_the_same_name() {
        for op in Op::ALL {
            let k = reduce_op(op);
            assert_eq!(format!("{k:?}").to_lowercase(), op.name());
            assert_eq!(k.integer_only(), op.integer_only(), "{op}");
        }
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn plans_become_the_same_index_sets_on_the_device() {
        use crate::plan::Plan;
        use starhalo_exec::cuda::DeviceIndices;
        let p = Plan::new(&[21, 22, 25, 26, 37, 38, 41, 42]);
        let d = on_device::pattern(&p.kind).unwrap();
        assert!(matches!(
            d,
            DeviceIndices::Box {
                start: 21,
                dx: 2,
                dy: 2,
                dz: 2,
                sx: 4,
                sy: 16
            }
        ));
        assert_eq!(d.len(), p.len());
        let c = on_device::pattern(&Plan::new(&[4, 5, 6]).kind).unwrap();
        assert!(matches!(c, DeviceIndices::Range { start: 4, len: 3 }));
        assert!(on_device::pattern(&Plan::new(&[3, 1, 3]).kind).is_none());
    }
}
