//! Pack plans on a CUDA device (feature `cuda`): each [`Plan`] becomes the device index set
//! the gather/scatter kernels of `starhalo_exec::cuda` walk. A contiguous plan is a plain
//! device copy (or nothing, when MPI reads the array in place), a strided plan one 3-D box
//! kernel, a list one kernel over indices uploaded once; unpacking a list with duplicates
//! uses atomics.

use starhalo_exec::cuda::ReduceOp;

use crate::unit::Op;

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
pub use on_device::DevicePlan;

#[cfg(feature = "cuda")]
mod on_device {
    use std::sync::Arc;

    use starhalo_exec::cuda::{CudaError, Device, DeviceIndices, IndexList};
    use starhalo_exec::{Buffer, Element};

    use super::reduce_op;
    use crate::plan::{PackPlan, Plan};
    use crate::unit::Op;

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
}

#[cfg(test)]
mod tests {
    use super::*;

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
