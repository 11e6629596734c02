//! Buffers that know their memory space.

use std::ops::Range;

use crate::element::Element;
use crate::space::{MemSpace, SpaceError};

#[cfg(feature = "cuda")]
use crate::cuda::{dbuf::DeviceBuffer, CudaError, Device, DeviceAlloc};
#[cfg(feature = "cuda")]
use std::sync::Arc;

/// A fixed-length array of `T` in one memory space.
///
/// The length is set at creation and never changes, so raw addresses handed to MPI stay valid
/// for the buffer's life. Host buffers expose their elements as slices; device buffers
/// (memory space [`MemSpace::Cuda`], feature `cuda`) are read and written with
/// [`Buffer::upload`], [`Buffer::download`], [`Buffer::fill`] and the device's kernels.
///
/// ```
/// use starhalo_exec::{Buffer, MemSpace};
/// let mut b = Buffer::<u32>::zeroed(MemSpace::Host, 4).unwrap();
/// b.host_mut().unwrap()[2] = 7;
/// assert_eq!(b.host().unwrap(), &[0, 0, 7, 0]);
/// assert_eq!(b.space(), MemSpace::Host);
/// assert_eq!(b.to_vec().unwrap(), [0, 0, 7, 0]);
/// ```
#[derive(Debug)]
pub struct Buffer<T> {
    repr: Repr<T>,
}

#[derive(Debug)]
enum Repr<T> {
    Host(Box<[T]>),
    #[cfg(feature = "cuda")]
    Cuda(DeviceBuffer<T>),
}

#[cfg(feature = "cuda")]
impl From<CudaError> for SpaceError {
    fn from(e: CudaError) -> Self {
        if let CudaError::TooLarge { len } = e {
            SpaceError::TooLarge(len as u128)
        } else if e.is_unavailable() {
            SpaceError::Unavailable {
                space: MemSpace::Cuda,
                why: e.to_string(),
            }
        } else {
            SpaceError::Device(e.to_string())
        }
    }
}

/// The bytes of `len` elements of `T` (at least one), where an allocation can hold them.
pub(crate) fn byte_len<T>(len: usize) -> Option<usize> {
    len.max(1)
        .checked_mul(size_of::<T>().max(1))
        .filter(|&b| b <= isize::MAX as usize)
}

fn out_of_range(what: &str, off: usize, n: usize, len: usize) -> SpaceError {
    SpaceError::Range(format!(
        "{what} of {n} values at {off} of a buffer of {len}"
    ))
}

impl<T: Element> Clone for Buffer<T> {
    /// Copies the elements into a new buffer in the same space.
    ///
    /// # Panics
    /// When a device copy cannot be allocated (as `Vec::clone` aborts when the host is out of
    /// memory); use [`Buffer::try_clone`] to get the error instead.
    fn clone(&self) -> Self {
        match self.try_clone() {
            Ok(b) => b,
            Err(e) => panic!("cloning a device buffer failed: {e}"),
        }
    }
}

impl<T: Element> Buffer<T> {
    /// A buffer of `len` default values (zero bits) in `space`; [`MemSpace::Cuda`] uses
    /// the process's default device
    /// (`cuda::Device::process_default`).
    ///
    /// Without the `cuda` feature, or on a machine without a usable GPU, asking for
    /// [`MemSpace::Cuda`] is [`SpaceError::Unavailable`] saying why.
    pub fn zeroed(space: MemSpace, len: usize) -> Result<Self, SpaceError> {
        // A size no allocation can hold is an error, not a capacity-overflow panic (host) or
        // a byte count that wraps to a small allocation (device).
        if byte_len::<T>(len).is_none() {
            return Err(SpaceError::TooLarge(len as u128));
        }
        match space {
            // `vec!` of zeros takes zeroed pages from the allocator, untouched.
            MemSpace::Host => Ok(Self::host_repr(vec![T::default(); len].into_boxed_slice())),
            #[cfg(feature = "cuda")]
            MemSpace::Cuda => {
                let dev = Device::process_default()?;
                Ok(Self::zeroed_on(&dev, len)?)
            }
            #[cfg(not(feature = "cuda"))]
            MemSpace::Cuda => Err(SpaceError::Unavailable {
                space,
                why: crate::cuda::CudaError::NotBuilt.to_string(),
            }),
        }
    }

    /// A host buffer holding a copy of `values`.
    pub fn from_host(values: &[T]) -> Self {
        Self::host_repr(values.into())
    }

    /// A copy of `values` in `space`.
    pub fn from_slice(space: MemSpace, values: &[T]) -> Result<Self, SpaceError> {
        let mut b = Self::zeroed(space, values.len())?;
        b.upload(values)?;
        Ok(b)
    }

    fn host_repr(data: Box<[T]>) -> Self {
        Self {
            repr: Repr::Host(data),
        }
    }

    /// A copy in a new buffer of the same space, or the device's error.
    pub fn try_clone(&self) -> Result<Self, SpaceError> {
        match &self.repr {
            Repr::Host(d) => Ok(Self::host_repr(d.clone())),
            #[cfg(feature = "cuda")]
            Repr::Cuda(d) => Ok(Self {
                repr: Repr::Cuda(d.try_clone()?),
            }),
        }
    }

    /// Overwrites every element with `src` (same length), from host memory.
    pub fn upload(&mut self, src: &[T]) -> Result<(), SpaceError> {
        if src.len() != self.len() {
            return Err(SpaceError::Length {
                expected: self.len(),
                got: src.len(),
            });
        }
        match &mut self.repr {
            Repr::Host(d) => d.copy_from_slice(src),
            #[cfg(feature = "cuda")]
            Repr::Cuda(d) => d.upload(src)?,
        }
        Ok(())
    }

    /// Copies every element into `dst` (same length) in host memory; returns once they are
    /// there (after all work queued on the buffer's device).
    pub fn download(&self, dst: &mut [T]) -> Result<(), SpaceError> {
        if dst.len() != self.len() {
            return Err(SpaceError::Length {
                expected: self.len(),
                got: dst.len(),
            });
        }
        match &self.repr {
            Repr::Host(d) => dst.copy_from_slice(d),
            #[cfg(feature = "cuda")]
            Repr::Cuda(d) => d.download(dst)?,
        }
        Ok(())
    }

    /// Overwrites every element with those of `src` (same length), in whichever spaces the
    /// two live: a plain copy, an upload, a download, or a copy on the device.
    pub fn copy_from(&mut self, src: &Self) -> Result<(), SpaceError> {
        if let Some(s) = src.host() {
            return self.upload(s);
        }
        if let Some(d) = self.host_mut() {
            return src.download(d);
        }
        if src.len() != self.len() {
            return Err(SpaceError::Length {
                expected: self.len(),
                got: src.len(),
            });
        }
        #[cfg(feature = "cuda")]
        if let (Repr::Cuda(d), Repr::Cuda(s)) = (&mut self.repr, &src.repr) {
            d.copy_from(0, s, 0, s.len())?;
        }
        Ok(())
    }

    /// The elements, copied to a host vector.
    pub fn to_vec(&self) -> Result<Vec<T>, SpaceError> {
        let mut v = vec![T::default(); self.len()];
        self.download(&mut v)?;
        Ok(v)
    }

    /// A buffer of `len` default values in the same space (on the same device) as this one.
    pub fn zeroed_like(&self, len: usize) -> Result<Self, SpaceError> {
        match &self.repr {
            Repr::Host(_) => Self::zeroed(MemSpace::Host, len),
            #[cfg(feature = "cuda")]
            Repr::Cuda(d) => Ok(Self::zeroed_in(d.device(), len, d.alloc())?),
        }
    }

    /// Overwrites the `src.len()` elements from `off` with `src`, from host memory.
    pub fn write_at(&mut self, off: usize, src: &[T]) -> Result<(), SpaceError> {
        let n = self.len();
        match &mut self.repr {
            Repr::Host(d) => d
                .get_mut(off..off.saturating_add(src.len()))
                .ok_or_else(|| out_of_range("write", off, src.len(), n))?
                .copy_from_slice(src),
            #[cfg(feature = "cuda")]
            Repr::Cuda(d) => d.upload_at(off, src)?,
        }
        Ok(())
    }

    /// Copies the `dst.len()` elements from `off` into `dst` in host memory; returns once
    /// they are there.
    pub fn read_at(&self, off: usize, dst: &mut [T]) -> Result<(), SpaceError> {
        let n = self.len();
        match &self.repr {
            Repr::Host(d) => dst.copy_from_slice(
                d.get(off..off.saturating_add(dst.len()))
                    .ok_or_else(|| out_of_range("read", off, dst.len(), n))?,
            ),
            #[cfg(feature = "cuda")]
            Repr::Cuda(d) => d.download_at(off, dst)?,
        }
        Ok(())
    }

    /// Copies `len` elements of `src` from `src_off` to `dst_off` of this buffer: both in
    /// host memory, or both on one device (a copy on its stream).
    pub fn copy_range_from(
        &mut self,
        dst_off: usize,
        src: &Self,
        src_off: usize,
        len: usize,
    ) -> Result<(), SpaceError> {
        let n = self.len();
        match (&mut self.repr, &src.repr) {
            (Repr::Host(d), Repr::Host(s)) => {
                let from = s
                    .get(src_off..src_off.saturating_add(len))
                    .ok_or_else(|| out_of_range("copy", src_off, len, s.len()))?;
                d.get_mut(dst_off..dst_off.saturating_add(len))
                    .ok_or_else(|| out_of_range("copy", dst_off, len, n))?
                    .copy_from_slice(from);
            }
            #[cfg(feature = "cuda")]
            (Repr::Cuda(d), Repr::Cuda(s)) => d.copy_from(dst_off, s, src_off, len)?,
            #[cfg(feature = "cuda")]
            _ => {
                return Err(SpaceError::Device(
                    "a range copy between host and device buffers".into(),
                ))
            }
        }
        Ok(())
    }

    /// Copies the elements of `range` to start at `dst`, within this buffer; the two may
    /// overlap.
    pub fn copy_within(&mut self, range: Range<usize>, dst: usize) -> Result<(), SpaceError> {
        let n = self.len();
        let len = range.len();
        if range.start > range.end || range.end > n || dst.saturating_add(len) > n {
            return Err(out_of_range("copy", range.start.max(dst), len, n));
        }
        match &mut self.repr {
            Repr::Host(d) => d.copy_within(range, dst),
            #[cfg(feature = "cuda")]
            Repr::Cuda(d) => d.copy_within(range, dst)?,
        }
        Ok(())
    }

    /// The address of the first element (host memory, or the device's own address), for
    /// a library that reads and writes the memory itself (MPI, which must then support
    /// device memory for a device buffer).
    pub fn address(&self) -> usize {
        match &self.repr {
            Repr::Host(d) => d.as_ptr() as usize,
            #[cfg(feature = "cuda")]
            Repr::Cuda(d) => d.address() as usize,
        }
    }

    /// Returns once all work queued on the buffer's device has finished (at once for host
    /// memory): before a library reads or writes the memory outside that device's stream.
    pub fn wait(&self) -> Result<(), SpaceError> {
        match &self.repr {
            Repr::Host(_) => Ok(()),
            #[cfg(feature = "cuda")]
            Repr::Cuda(d) => Ok(d.device().synchronize()?),
        }
    }

    /// Sets every element to `v`.
    pub fn fill(&mut self, v: T) -> Result<(), SpaceError> {
        match &mut self.repr {
            Repr::Host(d) => d.fill(v),
            #[cfg(feature = "cuda")]
            Repr::Cuda(d) => d.fill(v)?,
        }
        Ok(())
    }
}

#[cfg(feature = "cuda")]
impl<T: Element> Buffer<T> {
    fn zeroed_in(dev: &Arc<Device>, len: usize, alloc: DeviceAlloc) -> Result<Self, CudaError> {
        if byte_len::<T>(len).is_none() {
            return Err(CudaError::TooLarge { len });
        }
        Ok(Self {
            repr: Repr::Cuda(DeviceBuffer::zeroed(dev, len, alloc)?),
        })
    }

    /// A buffer of `len` zero values on `dev`.
    pub fn zeroed_on(dev: &Arc<Device>, len: usize) -> Result<Self, CudaError> {
        Self::zeroed_in(dev, len, DeviceAlloc::Pool)
    }

    /// A buffer of `len` zero values on `dev` that a CUDA-aware MPI may read and write: its
    /// memory is outside the device's stream-ordered pool, which such an MPI cannot share
    /// with the other processes of a node. Buffers made [`like`](Self::zeroed_like) it, or
    /// cloned from it, are of the same kind.
    pub fn zeroed_for_mpi(dev: &Arc<Device>, len: usize) -> Result<Self, CudaError> {
        Self::zeroed_in(dev, len, DeviceAlloc::Mpi)
    }

    /// A copy of `values` on `dev`.
    pub fn from_host_to(dev: &Arc<Device>, values: &[T]) -> Result<Self, CudaError> {
        Ok(Self {
            repr: Repr::Cuda(DeviceBuffer::from_host(dev, values)?),
        })
    }

    /// The device holding the elements, for a device buffer.
    pub fn device(&self) -> Option<&Arc<Device>> {
        match &self.repr {
            Repr::Cuda(d) => Some(d.device()),
            Repr::Host(_) => None,
        }
    }

    /// The raw device address of the first element, for handing the memory to a library that
    /// reads device memory itself (an MPI with CUDA support); `None` for host memory.
    pub fn device_address(&self) -> Option<u64> {
        match &self.repr {
            Repr::Cuda(d) => Some(d.address()),
            Repr::Host(_) => None,
        }
    }

    pub(crate) fn on_device(&self, dev: &Device) -> Result<&DeviceBuffer<T>, CudaError> {
        match &self.repr {
            Repr::Cuda(d) if std::ptr::eq(&**d.device(), dev) => Ok(d),
            _ => Err(crate::cuda::ops::wrong_space(self.space())),
        }
    }

    pub(crate) fn on_device_mut(
        &mut self,
        dev: &Device,
    ) -> Result<&mut DeviceBuffer<T>, CudaError> {
        let space = self.space();
        match &mut self.repr {
            Repr::Cuda(d) if std::ptr::eq(&**d.device(), dev) => Ok(d),
            _ => Err(crate::cuda::ops::wrong_space(space)),
        }
    }
}

impl<T> Buffer<T> {
    /// The memory space of the data.
    pub fn space(&self) -> MemSpace {
        match &self.repr {
            Repr::Host(_) => MemSpace::Host,
            #[cfg(feature = "cuda")]
            Repr::Cuda(_) => MemSpace::Cuda,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Host(d) => d.len(),
            #[cfg(feature = "cuda")]
            Repr::Cuda(d) => d.len(),
        }
    }

    /// True when the buffer holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements, when they are in host memory.
    pub fn host(&self) -> Option<&[T]> {
        match &self.repr {
            Repr::Host(d) => Some(d),
            #[cfg(feature = "cuda")]
            Repr::Cuda(_) => None,
        }
    }

    /// The elements, mutably, when they are in host memory.
    pub fn host_mut(&mut self) -> Option<&mut [T]> {
        match &mut self.repr {
            Repr::Host(d) => Some(d),
            #[cfg(feature = "cuda")]
            Repr::Cuda(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(feature = "cuda")]
    fn device_buffers_no_allocation_can_hold_are_errors_on_a_device() {
        // Where a device (or the emulated driver) is: before, the byte count wrapped to 8.
        let Some(dev) = Device::for_test() else {
            return;
        };
        let len = usize::MAX / 8 + 2;
        for got in [
            Buffer::<f64>::zeroed_on(&dev, len),
            Buffer::<f64>::zeroed_for_mpi(&dev, len),
        ] {
            assert!(matches!(got, Err(CudaError::TooLarge { len: n }) if n == len));
        }
        let small = Buffer::<f64>::zeroed_on(&dev, 4).unwrap();
        let like = small.zeroed_like(len);
        assert!(matches!(like, Err(SpaceError::TooLarge(n)) if n == len as u128));
    }

    #[test]
    fn a_buffer_no_allocation_can_hold_is_an_error() {
        // usize::MAX / 8 + 2 doubles wrap to 8 bytes: a device buffer that long got them.
        for space in [MemSpace::Host, MemSpace::Cuda] {
            for len in [usize::MAX / 8 + 2, usize::MAX / 4, usize::MAX] {
                let got = Buffer::<f64>::zeroed(space, len);
                assert!(
                    matches!(got, Err(SpaceError::TooLarge(n)) if n == len as u128),
                    "{space} {len}"
                );
            }
        }
    }

    #[test]
    fn cuda_without_backend_is_an_error_not_a_panic() {
        // No feature, or no driver on this machine: a clear error. With a GPU: a buffer.
        match Buffer::<f64>::zeroed(MemSpace::Cuda, 8) {
            Ok(b) => assert_eq!(
                (b.space(), b.to_vec().unwrap()),
                (MemSpace::Cuda, vec![0.0; 8])
            ),
            Err(err) => {
                assert!(
                    matches!(
                        err,
                        SpaceError::Unavailable {
                            space: MemSpace::Cuda,
                            ..
                        }
                    ),
                    "{err}"
                );
                let s = err.to_string();
                assert!(
                    s.contains("cuda") && (s.contains("feature") || s.contains("driver")),
                    "{s}"
                );
            }
        }
        assert!(
            Buffer::<f64>::from_slice(MemSpace::Cuda, &[1.0]).is_err() || cfg!(feature = "cuda")
        );
    }

    #[test]
    fn from_host_copies() {
        let b = Buffer::from_host(&[1u8, 2, 3]);
        assert_eq!(b.len(), 3);
        assert_eq!(b.host(), Some(&[1u8, 2, 3][..]));
    }

    #[test]
    fn host_upload_download_fill_clone() {
        let mut b = Buffer::from_slice(MemSpace::Host, &[1.0f64, 2.0]).unwrap();
        assert!(matches!(
            b.upload(&[1.0]),
            Err(SpaceError::Length {
                expected: 2,
                got: 1
            })
        ));
        b.fill(-3.5).unwrap();
        let c = b.clone();
        b.upload(&[4.0, 5.0]).unwrap();
        let mut out = [0.0; 2];
        b.download(&mut out).unwrap();
        assert_eq!(out, [4.0, 5.0]);
        assert_eq!(c.to_vec().unwrap(), [-3.5, -3.5]);
    }

    #[test]
    fn ranges_copy_read_and_write_within_bounds() {
        let mut b = Buffer::from_slice(MemSpace::Host, &[1.0f64, 2.0, 3.0, 4.0, 5.0]).unwrap();
        // Overlapping moves both ways.
        b.copy_within(0..3, 1).unwrap();
        assert_eq!(b.to_vec().unwrap(), [1.0, 1.0, 2.0, 3.0, 5.0]);
        b.copy_within(2..5, 0).unwrap();
        assert_eq!(b.to_vec().unwrap(), [2.0, 3.0, 5.0, 3.0, 5.0]);
        b.write_at(3, &[9.0, 8.0]).unwrap();
        let mut two = [0.0; 2];
        b.read_at(2, &mut two).unwrap();
        assert_eq!(two, [5.0, 9.0]);
        let mut c = b.zeroed_like(3).unwrap();
        assert_eq!((c.space(), c.len()), (MemSpace::Host, 3));
        c.copy_range_from(1, &b, 3, 2).unwrap();
        assert_eq!(c.to_vec().unwrap(), [0.0, 9.0, 8.0]);
        // Nothing is written out of bounds.
        assert!(matches!(
            b.write_at(4, &[1.0, 1.0]),
            Err(SpaceError::Range(_))
        ));
        assert!(b.read_at(5, &mut [0.0]).is_err());
        assert!(b.copy_within(3..6, 0).is_err());
        assert!(b.copy_within(0..2, 4).is_err());
        assert!(c.copy_range_from(2, &b, 0, 2).is_err());
        assert_eq!(c.to_vec().unwrap(), [0.0, 9.0, 8.0]);
        assert_eq!(b.to_vec().unwrap(), [2.0, 3.0, 5.0, 9.0, 8.0]);
        assert_eq!(b.address(), b.host().unwrap().as_ptr() as usize);
        b.wait().unwrap();
    }

    #[test]
    fn copy_from_overwrites_and_checks_the_length() {
        let mut b = Buffer::from_slice(MemSpace::Host, &[1.0f64, 2.0]).unwrap();
        b.copy_from(&Buffer::from_host(&[7.0, 8.0])).unwrap();
        assert_eq!(b.to_vec().unwrap(), [7.0, 8.0]);
        assert!(matches!(
            b.copy_from(&Buffer::from_host(&[1.0])),
            Err(SpaceError::Length {
                expected: 2,
                got: 1
            })
        ));
        assert_eq!(b.to_vec().unwrap(), [7.0, 8.0]);
    }
}
