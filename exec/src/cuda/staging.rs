//! Device copies of host message buffers, allocated on first use.

use std::sync::Arc;

use super::device::Device;
use super::error::CudaError;
use crate::buffer::Buffer;
use crate::element::Element;

/// The device side of a message buffer that crosses MPI through host memory (the staged
/// path): kernels pack into it and unpack from it, and it is copied to and from the host
/// message. It is allocated the first time it is used, so that where the messages live in
/// device memory themselves (GPU-aware) it costs no device memory.
#[derive(Debug)]
pub struct Staging<T> {
    len: usize,
    buf: Option<Buffer<T>>,
}

impl<T: Element> Staging<T> {
    /// A staging buffer of `len` values, not yet allocated.
    pub fn new(len: usize) -> Self {
        Self { len, buf: None }
    }

    /// Its length in values.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no values.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether its device memory has been allocated.
    pub fn is_allocated(&self) -> bool {
        self.buf.is_some()
    }

    /// Allocates it now, where an allocation failing later would leave other ranks waiting
    /// on this one's messages.
    pub fn allocate(&mut self, dev: &Arc<Device>) -> Result<(), CudaError> {
        self.get(dev).map(|_| ())
    }

    /// The buffer on `dev`, zeroed when first allocated.
    pub fn get(&mut self, dev: &Arc<Device>) -> Result<&mut Buffer<T>, CudaError> {
        match &mut self.buf {
            Some(b) => Ok(b),
            slot => Ok(slot.insert(Buffer::zeroed_on(dev, self.len)?)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_allocated_before_first_use() {
        let s = Staging::<f64>::new(12);
        assert_eq!(
            (s.len(), s.is_empty(), s.is_allocated()),
            (12, false, false)
        );
        assert!(Staging::<u32>::new(0).is_empty());
    }
}
