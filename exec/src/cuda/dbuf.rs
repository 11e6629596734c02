//! Device memory of one [`Device`], typed.

use std::ops::Range;
use std::sync::Arc;

use super::device::{driver, grid_for, Device};
use super::error::CudaError;
use super::ffi::{self, Arg, DeviceAlloc, DeviceMemory};
use super::kernels::KernelSet;
use crate::element::Element;

/// `len` values of `T` in the memory of one device. All transfers and kernels touching it
/// run on that device's stream, in issue order. An empty buffer still holds one value of
/// memory: the driver refuses to allocate zero bytes.
pub(crate) struct DeviceBuffer<T> {
    slice: DeviceMemory<T>,
    len: usize,
    dev: Arc<Device>,
}

impl<T> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceBuffer({} values on {:?})", self.len, self.dev)
    }
}

impl<T> DeviceBuffer<T> {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn device(&self) -> &Arc<Device> {
        &self.dev
    }

    pub(crate) fn alloc(&self) -> DeviceAlloc {
        self.slice.alloc()
    }

    pub(crate) fn address(&self) -> u64 {
        ffi::address(&self.slice, self.dev.stream())
    }
}

impl<T: Element> DeviceBuffer<T> {
    pub(crate) fn zeroed(
        dev: &Arc<Device>,
        len: usize,
        alloc: DeviceAlloc,
    ) -> Result<Self, CudaError> {
        let mut slice =
            DeviceMemory::uninit(dev.stream(), len, alloc).map_err(driver("cuMemAlloc"))?;
        dev.stream()
            .memset_zeros(&mut *slice)
            .map_err(driver("cuMemsetD8"))?;
        Ok(Self {
            slice,
            len,
            dev: dev.clone(),
        })
    }

    pub(crate) fn from_host(dev: &Arc<Device>, values: &[T]) -> Result<Self, CudaError> {
        let mut slice = DeviceMemory::uninit(dev.stream(), values.len(), DeviceAlloc::Pool)
            .map_err(driver("cuMemAlloc"))?;
        if !values.is_empty() {
            dev.copy_stream()
                .memcpy_htod(values, &mut *slice)
                .map_err(driver("cuMemcpyHtoD"))?;
        }
        Ok(Self {
            slice,
            len: values.len(),
            dev: dev.clone(),
        })
    }

    fn same_len(&self, other: usize, what: &str) -> Result<(), CudaError> {
        if other == self.len() {
            Ok(())
        } else {
            Err(CudaError::Invalid(format!(
                "{what} of {other} values for a device buffer of {}",
                self.len()
            )))
        }
    }

    pub(crate) fn upload(&mut self, src: &[T]) -> Result<(), CudaError> {
        self.same_len(src.len(), "upload")?;
        if src.is_empty() {
            return Ok(());
        }
        self.dev
            .copy_stream()
            .memcpy_htod(src, &mut *self.slice)
            .map_err(driver("cuMemcpyHtoD"))
    }

    /// Copies to the host; returns once the values are there.
    pub(crate) fn download(&self, dst: &mut [T]) -> Result<(), CudaError> {
        self.same_len(dst.len(), "download")?;
        if dst.is_empty() {
            return Ok(());
        }
        let s = self.dev.copy_stream();
        s.memcpy_dtoh(&*self.slice, dst)
            .map_err(driver("cuMemcpyDtoH"))?;
        // A pinned destination would make the copy asynchronous: wait for it either way.
        s.synchronize().map_err(driver("cuStreamSynchronize"))
    }

    fn fits(&self, off: usize, n: usize, what: &str) -> Result<(), CudaError> {
        if off.checked_add(n).is_some_and(|e| e <= self.len()) {
            return Ok(());
        }
        Err(CudaError::Invalid(format!(
            "{what} of {n} values at {off} of a device buffer of {}",
            self.len()
        )))
    }

    /// Copies `src` into `self[off..]` from the host.
    pub(crate) fn upload_at(&mut self, off: usize, src: &[T]) -> Result<(), CudaError> {
        self.fits(off, src.len(), "upload")?;
        if src.is_empty() {
            return Ok(());
        }
        let mut to = self.slice.slice_mut(off..off + src.len());
        self.dev
            .copy_stream()
            .memcpy_htod(src, &mut to)
            .map_err(driver("cuMemcpyHtoD"))
    }

    /// Copies `self[off..]` into `dst` on the host; returns once the values are there.
    pub(crate) fn download_at(&self, off: usize, dst: &mut [T]) -> Result<(), CudaError> {
        self.fits(off, dst.len(), "download")?;
        if dst.is_empty() {
            return Ok(());
        }
        let s = self.dev.copy_stream();
        let from = self.slice.slice(off..off + dst.len());
        s.memcpy_dtoh(&from, dst).map_err(driver("cuMemcpyDtoH"))?;
        s.synchronize().map_err(driver("cuStreamSynchronize"))
    }

    pub(crate) fn fill(&mut self, v: T) -> Result<(), CudaError> {
        let n = self.len();
        if n == 0 {
            return Ok(());
        }
        let bits = v.bits();
        let (name, arg) = match (std::mem::size_of::<T>(), bits) {
            (4, Some(b)) => ("sh_fill_b32", Arg::U32(b as u32)),
            (8, Some(b)) => ("sh_fill_b64", Arg::U64(b)),
            _ => return self.upload(&vec![v; n]),
        };
        let args = [Arg::Ptr(self.address()), Arg::U64(n as u64), arg];
        self.dev
            .launch(KernelSet::Sf, name, grid_for(n, 256), 256, &args)
    }

    /// Copies `len` values from `src[src_off..]` into `self[dst_off..]` on the device.
    pub(crate) fn copy_from(
        &mut self,
        dst_off: usize,
        src: &DeviceBuffer<T>,
        src_off: usize,
        len: usize,
    ) -> Result<(), CudaError> {
        let fits = |off: usize, total: usize| off.checked_add(len).is_some_and(|e| e <= total);
        if !fits(dst_off, self.len()) || !fits(src_off, src.len()) {
            return Err(CudaError::Invalid(format!(
                "device copy of {len} values from {src_off} (of {}) to {dst_off} (of {})",
                src.len(),
                self.len()
            )));
        }
        if !Arc::ptr_eq(&self.dev, &src.dev) {
            return Err(CudaError::Invalid("device copy between two devices".into()));
        }
        if len == 0 {
            return Ok(());
        }
        let s = self.dev.copy_stream().clone();
        let from = src.slice.slice(src_off..src_off + len);
        let mut to = self.slice.slice_mut(dst_off..dst_off + len);
        s.memcpy_dtod(&from, &mut to)
            .map_err(driver("cuMemcpyDtoD"))
    }

    /// Copies the values of `range` to start at `dst` on the device; the two may overlap
    /// (then through a scratch copy: a device copy may not overlap itself).
    pub(crate) fn copy_within(&mut self, range: Range<usize>, dst: usize) -> Result<(), CudaError> {
        let len = range.len();
        if range.start > range.end || range.end > self.len() {
            return Err(CudaError::Invalid(format!("device copy from {range:?}")));
        }
        self.fits(dst, len, "device copy")?;
        if len == 0 || range.start == dst {
            return Ok(());
        }
        if range.end > dst && dst + len > range.start {
            let mut tmp = Self::zeroed(&self.dev, len, DeviceAlloc::Pool)?;
            tmp.copy_from(0, self, range.start, len)?;
            return self.copy_from(dst, &tmp, 0, len);
        }
        let s = self.dev.copy_stream().clone();
        let copy = if dst + len <= range.start {
            let (mut lo, hi) = self.slice.split_at_mut(range.start);
            s.memcpy_dtod(&hi.slice(..len), &mut lo.slice_mut(dst..dst + len))
        } else {
            let (lo, mut hi) = self.slice.split_at_mut(dst);
            s.memcpy_dtod(&lo.slice(range), &mut hi.slice_mut(..len))
        };
        copy.map_err(driver("cuMemcpyDtoD"))
    }

    pub(crate) fn try_clone(&self) -> Result<Self, CudaError> {
        let mut out = Self {
            slice: DeviceMemory::uninit(self.dev.stream(), self.len(), self.alloc())
                .map_err(driver("cuMemAlloc"))?,
            len: self.len,
            dev: self.dev.clone(),
        };
        out.copy_from(0, self, 0, self.len())?;
        Ok(out)
    }
}
