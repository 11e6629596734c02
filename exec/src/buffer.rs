//! Buffers that know their memory space.

use crate::space::{MemSpace, SpaceError};

/// A fixed-length array of `T` in one memory space.
///
/// The length is set at creation and never changes, so raw addresses handed to MPI stay valid
/// for the buffer's life.
///
/// ```
/// use starhalo_exec::{Buffer, MemSpace};
/// let mut b = Buffer::<u32>::zeroed(MemSpace::Host, 4).unwrap();
/// b.host_mut().unwrap()[2] = 7;
/// assert_eq!(b.host().unwrap(), &[0, 0, 7, 0]);
/// assert_eq!(b.space(), MemSpace::Host);
/// ```
#[derive(Debug, Clone)]
pub struct Buffer<T> {
    data: Box<[T]>,
    space: MemSpace,
}

impl<T: Copy + Default> Buffer<T> {
    /// A buffer of `len` default values in `space`.
    pub fn zeroed(space: MemSpace, len: usize) -> Result<Self, SpaceError> {
        match space {
            MemSpace::Host => Ok(Self {
                data: vec![T::default(); len].into_boxed_slice(),
                space,
            }),
            MemSpace::Cuda => Err(SpaceError::Unavailable {
                space,
                why: "this build has no CUDA backend".into(),
            }),
        }
    }

    /// A host buffer holding a copy of `values`.
    pub fn from_host(values: &[T]) -> Self {
        Self {
            data: values.into(),
            space: MemSpace::Host,
        }
    }
}

impl<T> Buffer<T> {
    /// The memory space of the data.
    pub fn space(&self) -> MemSpace {
        self.space
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// True when the buffer holds no element.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The elements, when they are in host memory.
    pub fn host(&self) -> Option<&[T]> {
        (self.space == MemSpace::Host).then_some(&self.data[..])
    }

    /// The elements, mutably, when they are in host memory.
    pub fn host_mut(&mut self) -> Option<&mut [T]> {
        (self.space == MemSpace::Host).then_some(&mut self.data[..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_without_backend_is_an_error_not_a_panic() {
        let err = Buffer::<f64>::zeroed(MemSpace::Cuda, 8).unwrap_err();
        assert!(matches!(
            err,
            SpaceError::Unavailable {
                space: MemSpace::Cuda,
                ..
            }
        ));
    }

    #[test]
    fn from_host_copies() {
        let b = Buffer::from_host(&[1u8, 2, 3]);
        assert_eq!(b.len(), 3);
        assert_eq!(b.host(), Some(&[1u8, 2, 3][..]));
    }
}
