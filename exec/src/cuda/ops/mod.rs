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
        // A box whose first row ends past the last index, or whose unit count overflows, is
        // refused, not wrapped into a small range that passes the buffer checks.
        let wraps = DeviceIndices::Box {
            start: usize::MAX - 1,
            dx: 4,
            dy: 1,
            dz: 1,
            sx: 4,
            sy: 4,
        };
        assert!(wraps.end().is_err());
        let many = DeviceIndices::Box {
            start: 0,
            dx: 2,
            dy: 1,
            dz: usize::MAX,
            sx: 2,
            sy: 2,
        };
        assert!(many.end().is_err());
        assert!(fits("x", 4, 3, 12).is_ok() && fits("x", 4, 3, 11).is_err());
        assert!(fits("x", usize::MAX, 2, usize::MAX).is_err());
    }

    /// Two unpack boxes that write one cell from different values race on a GPU (the
    /// descriptor checks let receive boxes overlap, as they image the same values in a valid
    /// exchange). Under the emulated driver, which runs each launch's blocks in two orders,
    /// such a launch stops the process naming the kernel: checked in a child process. Nothing
    /// to check where no device opens, or on a real GPU.
    #[test]
    fn the_emulation_stops_a_launch_whose_blocks_race() {
        const CHILD: &str = "STARHALO_RACE_CHILD";
        let Ok(dev) = crate::cuda::Device::process_default() else {
            return;
        };
        if std::env::var_os(CHILD).is_some() {
            let f = FieldDims {
                dims: [4, 1, 1],
                nvar: 1,
                nblocks: 1,
            };
            let at = |buf_offset| crate::cuda::HaloDesc {
                e: [1, 0, 0],
                buf_offset,
                flags: crate::cuda::FLAG_ALLOCATED,
                ..Default::default()
            };
            let h = DeviceHalos::for_pack(&dev, &[at(0), at(2)], f, None, 4).unwrap();
            let buf = crate::Buffer::from_host_to(&dev, &[1.0, 2.0, 3.0, 4.0]).unwrap();
            let mut data = crate::Buffer::from_host_to(&dev, &[0.0; 4]).unwrap();
            dev.halo_unpack(&h, &buf, &mut data, None, 0.0).unwrap();
            println!("unpacked {:?}", data.to_vec().unwrap());
            return;
        }
        let emulated = dev.name().contains("host emulation");
        if !emulated || std::env::var("STARHALO_EMU_ORDER").as_deref() == Ok("0") {
            return;
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "cuda::ops::tests::the_emulation_stops_a_launch_whose_blocks_race",
            ])
            .args(["--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(
            err.contains("`sh_halo_unpack`") && err.contains("race"),
            "{err}"
        );
    }
}
