//! The kernels as methods of [`Device`](super::Device): star-forest gather/scatter over index
//! sets (`sf`), and the boundary kernels in one over descriptor arrays (`halo`). Every method
//! checks its index ranges against the buffers on the host before it launches, and returns once
//! the work is queued.

use super::error::CudaError;
use crate::space::MemSpace;

mod halo;
mod sf;

pub use halo::DeviceHalos;
pub use sf::{DeviceIndices, IndexList};

fn invalid<T>(why: String) -> Result<T, CudaError> {
    Err(CudaError::Invalid(why))
}

pub(crate) fn need(what: &str, want: usize, got: usize) -> Result<(), CudaError> {
    if want == got {
        Ok(())
    } else {
        invalid(format!("{what}: {got} values, expected {want}"))
    }
}

/// Where a buffer must be for a kernel: on this device.
pub(crate) fn wrong_space(space: MemSpace) -> CudaError {
    CudaError::Invalid(format!(
        "a kernel argument is in {space} memory, not on this device"
    ))
}

#[cfg(test)]
mod tests {
    use super::halo::{flux_args, pack_args, physical_args, refine_args, unpack_args};
    use super::sf::{fits, gather_args, kernel_name, scatter_args};
    use super::*;
    use crate::cuda::desc::{FieldDims, FluxGeom, ReduceOp, RefineGeom};
    use crate::cuda::ffi::Arg;
    use crate::cuda::kernels::{signatures, ArgKind, KernelSet};
    use crate::element::ScalarKind;

    fn declared(set: KernelSet, name: &str) -> Vec<ArgKind> {
        let sigs = signatures(set.source()).unwrap();
        sigs.into_iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("{name}"))
            .1
    }

    fn kinds(a: &[Arg]) -> Vec<ArgKind> {
        a.iter().map(Arg::kind).collect()
    }

    /// What the host passes equals what each kernel declares, for every kernel it launches.
    #[test]
    fn host_arguments_match_every_launched_kernel() {
        let b = DeviceIndices::Box {
            start: 1,
            dx: 2,
            dy: 3,
            dz: 4,
            sx: 5,
            sy: 20,
        };
        let r = DeviceIndices::Range { start: 3, len: 7 };
        for kind in ScalarKind::ALL {
            for (idx, list) in [(&b, None), (&r, None)] {
                let (n, a) = gather_args(kind, 1, 2, 0, idx, 3, list);
                assert_eq!(kinds(&a), declared(KernelSet::Sf, n), "{n}");
                let (n, a) = scatter_args(kind, 1, 0, 2, idx, 3, ReduceOp::Sum, list);
                assert_eq!(kinds(&a), declared(KernelSet::Sf, n), "{n}");
            }
        }
        let f = FieldDims {
            dims: [4, 4, 1],
            nvar: 1,
            nblocks: 1,
        };
        let a = pack_args([1, 2, 4], 3, 5, [&f, &f], [6, 0]);
        assert_eq!(kinds(&a), declared(KernelSet::Halo, "sh_halo_pack"));
        let a = unpack_args([1, 2], [3, 4], 5, [&f, &f], 0.5);
        assert_eq!(kinds(&a), declared(KernelSet::Halo, "sh_halo_unpack"));
        let g = RefineGeom {
            ndim: 2,
            nghost: 2,
            coarse_nghost: 2,
            fine: f,
            coarse: f,
        };
        let a = refine_args([1, 2], 3, 5, &g);
        assert_eq!(kinds(&a), declared(KernelSet::Halo, "sh_restrict"));
        let mut p = kinds(&a);
        p.push(ArgKind::I32);
        assert_eq!(p, declared(KernelSet::Halo, "sh_prolongate"));
        let a = physical_args(1, 2, 5, &f, [2; 3], [3; 3]);
        assert_eq!(kinds(&a), declared(KernelSet::Halo, "sh_physical"));
        let g = FluxGeom {
            ndim: 2,
            n: [4, 4, 1],
            nslots: 1,
            nblocks: 1,
        };
        let a = flux_args(1, 2, [3, 4, 0], 5, true, &g);
        assert_eq!(kinds(&a), declared(KernelSet::Halo, "sh_flux_restrict"));
        let a = flux_args(1, 2, [3, 4, 0], 5, false, &g);
        assert_eq!(kinds(&a), declared(KernelSet::Halo, "sh_flux_set"));
        for (name, k) in [("sh_fill_b32", ArgKind::U32), ("sh_fill_b64", ArgKind::U64)] {
            assert_eq!(
                declared(KernelSet::Sf, name),
                [ArgKind::Ptr, ArgKind::U64, k]
            );
        }
    }

    /// Each SF kernel's name, from a table rather than formatted at each launch, is its
    /// family's instance for the element kind, and declared.
    #[test]
    fn sf_kernel_names_follow_family_and_kind() {
        let families = [
            "gather_box",
            "gather_list",
            "scatter_box",
            "scatter_list",
            "scatter_list_atomic",
        ];
        for family in families {
            for kind in ScalarKind::ALL {
                let name = kernel_name(family, kind);
                assert_eq!(name, format!("sh_{family}_{}", kind.suffix()));
                assert!(!declared(KernelSet::Sf, name).is_empty(), "{name}");
            }
        }
    }

    #[test]
    fn index_sets_report_their_extent_and_refuse_overlap() {
        let b = DeviceIndices::Box {
            start: 1,
            dx: 2,
            dy: 3,
            dz: 2,
            sx: 5,
            sy: 20,
        };
        // Last unit: 1 + 20 + 2 * 5 + 1 = 32, so one past is 33.
        assert_eq!((b.len(), b.end().unwrap()), (12, 33));
        let overlap = DeviceIndices::Box {
            start: 0,
            dx: 3,
            dy: 2,
            dz: 1,
            sx: 2,
            sy: 6,
        };
        assert!(overlap.end().is_err());
        let huge = DeviceIndices::Range {
            start: usize::MAX,
            len: 2,
        };
        assert!(huge.end().is_err());
        assert!(fits("x", 4, 3, 12).is_ok() && fits("x", 4, 3, 11).is_err());
        assert!(fits("x", usize::MAX, 2, usize::MAX).is_err());
    }
}
