//! Object pools of value buffers, keyed by size: the one place message and channel storage
//! comes from ([`MsgArena`](crate::p2p::MsgArena) draws its buffer here, and so, through it,
//! does every exchange built on it).
//!
//! [`BufferPool::get`] hands out an [`Owned`] buffer of the requested length, reusing one
//! returned earlier when there is one (then nothing is allocated). Dropping the owner puts
//! the storage back on the free list of its size. A [`WeakHandle`] names a buffer without
//! keeping it: it becomes invalid when the owner is dropped, even if the storage is later
//! handed out again.
//!
//! Every buffer starts on a cache line (64 bytes), as the arenas of Kokkos and AMReX hand
//! out: the sub-halos packed into it are then line-aligned wherever their sizes are whole
//! lines, and a run of 8 values is one line to write rather than two (on 8^3 blocks with
//! 2 ghosts, every sub-halo is).

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Debug, Default)]
struct Inner {
    /// Size -> returned buffers, each with its resource id.
    free: HashMap<usize, Vec<(usize, Lines)>>,
    /// Per resource id, bumped on every return: weak handles compare against it.
    generation: Vec<u64>,
}

/// A pool of `f64` buffers keyed by length; cheap to clone (clones share the pool).
#[derive(Debug, Clone, Default)]
pub struct BufferPool {
    inner: Arc<Mutex<Inner>>,
}

fn lock(m: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    // A panic while holding the lock leaves the free lists consistent (every mutation is a
    // single push or pop), so a poisoned lock is still usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl BufferPool {
    /// An empty pool.
    pub fn new() -> Self {
        Self::default()
    }

    /// A zeroed buffer of `len` values: a returned one when available, else a new one.
    ///
    /// ```
    /// use starhalo_sf::pool::BufferPool;
    /// let pool = BufferPool::new();
    /// let a = pool.get(4);
    /// let weak = a.downgrade();
    /// assert!(weak.is_valid());
    /// drop(a);
    /// assert!(!weak.is_valid());
    /// assert_eq!((pool.available(4), pool.created()), (1, 1));
    /// let b = pool.get(4);
    /// assert_eq!((&*b, pool.created()), (&[0.0; 4][..], 1));
    /// ```
    pub fn get(&self, len: usize) -> Owned {
        match self.try_get(len) {
            Ok(o) => o,
            Err(_) => std::alloc::handle_alloc_error(Lines::layout(len)),
        }
    }

    /// As [`get`](Self::get), or an error (not the allocator's abort) where a new buffer of
    /// `len` values does not fit in memory: for the large buffers of an exchange.
    pub fn try_get(&self, len: usize) -> Result<Owned, std::collections::TryReserveError> {
        let mut g = lock(&self.inner);
        let reused = g.free.get_mut(&len).and_then(Vec::pop);
        let (id, mut data) = match reused {
            Some(r) => r,
            None => {
                let data = Lines::try_zeroed(len)?;
                let id = g.generation.len();
                g.generation.push(0);
                (id, data)
            }
        };
        let generation = g.generation[id];
        drop(g);
        data.values_mut().fill(0.0);
        Ok(Owned {
            pool: Arc::clone(&self.inner),
            id,
            generation,
            data,
        })
    }

    /// Reserves free-list room for `n` more returned buffers of `len` values, so returns do
    /// not allocate either.
    pub fn reserve(&self, len: usize, n: usize) {
        lock(&self.inner).free.entry(len).or_default().reserve(n);
    }

    /// Buffers of `len` values waiting for reuse.
    pub fn available(&self, len: usize) -> usize {
        lock(&self.inner).free.get(&len).map_or(0, Vec::len)
    }

    /// Buffers created so far (all sizes).
    pub fn created(&self) -> usize {
        lock(&self.inner).generation.len()
    }
}

/// The owning handle of a pooled buffer; dereferences to its values and returns the storage
/// to the pool when dropped.
#[derive(Debug)]
pub struct Owned {
    pool: Arc<Mutex<Inner>>,
    id: usize,
    generation: u64,
    data: Lines,
}

impl Owned {
    /// A handle that does not keep the buffer.
    pub fn downgrade(&self) -> WeakHandle {
        WeakHandle {
            pool: Arc::clone(&self.pool),
            id: self.id,
            generation: self.generation,
            len: self.len(),
        }
    }
}

impl Deref for Owned {
    type Target = [f64];
    fn deref(&self) -> &[f64] {
        self.data.values()
    }
}

impl Owned {
    /// Makes this buffer `len` values long, keeping the first values (new ones zero): the
    /// storage is swapped for one of the new length from the same pool, and the old one goes
    /// back to it (a no-op when the length is unchanged).
    ///
    /// ```
    /// use starhalo_sf::pool::BufferPool;
    /// let pool = BufferPool::new();
    /// let mut a = pool.get(2);
    /// a.copy_from_slice(&[1.0, 2.0]);
    /// a.resize(3).unwrap();
    /// assert_eq!((&a[..], pool.available(2)), (&[1.0, 2.0, 0.0][..], 1));
    /// ```
    ///
    /// A length that does not fit in memory is an error, and the storage is left as it was.
    pub fn resize(&mut self, len: usize) -> Result<(), std::collections::TryReserveError> {
        if len == self.len() {
            return Ok(());
        }
        let mut next = BufferPool {
            inner: Arc::clone(&self.pool),
        }
        .try_get(len)?;
        let n = len.min(self.len());
        next[..n].copy_from_slice(&self[..n]);
        std::mem::swap(self, &mut next);
        // `next` now holds the old storage and returns it to the pool as it drops.
        Ok(())
    }
}

impl DerefMut for Owned {
    fn deref_mut(&mut self) -> &mut [f64] {
        self.data.values_mut()
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        let data = std::mem::take(&mut self.data);
        let mut g = lock(&self.pool);
        if let Some(gen) = g.generation.get_mut(self.id) {
            *gen += 1;
        }
        g.free.entry(data.len).or_default().push((self.id, data));
    }
}

/// Values per cache line.
const LINE: usize = 8;

/// `len` values starting on a cache line: the vector holds up to `LINE - 1` values more, and
/// the buffer starts at the first of them on a 64-byte boundary (the vector never moves).
#[derive(Debug, Default)]
struct Lines {
    store: Vec<f64>,
    start: usize,
    len: usize,
}

impl Lines {
    fn try_zeroed(len: usize) -> Result<Self, std::collections::TryReserveError> {
        if len == 0 {
            return Ok(Self::default());
        }
        let mut store = Vec::new();
        starhalo_exec::alloc_count::try_reserve_exact(&mut store, len.saturating_add(LINE - 1))?;
        store.resize(len + LINE - 1, 0.0);
        // At most LINE - 1 for an 8-byte-aligned pointer; the `min` only keeps the slice
        // in bounds should the offset ever be unknown (`usize::MAX`).
        let start = store.as_ptr().align_offset(LINE * 8).min(LINE - 1);
        Ok(Self { store, start, len })
    }

    /// The layout of the store of `len` values (for the allocator's error).
    fn layout(len: usize) -> std::alloc::Layout {
        std::alloc::Layout::array::<f64>(len.saturating_add(LINE - 1))
            .unwrap_or(std::alloc::Layout::new::<f64>())
    }

    fn values(&self) -> &[f64] {
        &self.store[self.start..self.start + self.len]
    }

    fn values_mut(&mut self) -> &mut [f64] {
        &mut self.store[self.start..self.start + self.len]
    }
}

/// A non-owning handle: says whether the buffer it names is still held by its owner.
#[derive(Debug, Clone)]
pub struct WeakHandle {
    pool: Arc<Mutex<Inner>>,
    id: usize,
    generation: u64,
    len: usize,
}

impl WeakHandle {
    /// True while the owner it came from is alive.
    pub fn is_valid(&self) -> bool {
        lock(&self.pool).generation.get(self.id) == Some(&self.generation)
    }

    /// Length of the buffer it names.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length buffer.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A buffer too large for memory is an error (an exchange reports it), not an abort, and
    /// the pool is unchanged by it.
    #[test]
    fn a_buffer_that_does_not_fit_is_an_error() {
        let pool = BufferPool::new();
        assert!(pool.try_get(usize::MAX / 16).is_err());
        assert_eq!(pool.created(), 0);
        assert_eq!(&*pool.try_get(3).unwrap(), &[0.0; 3][..]);
        let e = crate::p2p::MsgArena::with_len_in(&pool, usize::MAX / 16).unwrap_err();
        assert!(matches!(e, crate::p2p::P2pError::OutOfMemory(_)), "{e}");
    }

    #[test]
    fn sizes_are_kept_apart_and_reused_zeroed() {
        let pool = BufferPool::new();
        let mut a = pool.get(3);
        a.copy_from_slice(&[1.0, 2.0, 3.0]);
        let b = pool.get(5);
        drop(a);
        drop(b);
        assert_eq!((pool.available(3), pool.available(5)), (1, 1));
        let c = pool.get(3);
        assert_eq!(&*c, &[0.0; 3]);
        assert_eq!(pool.created(), 2);
        let d = pool.get(3);
        assert_eq!(pool.created(), 3);
        assert_eq!(d.len(), 3);
    }

    #[test]
    fn buffers_start_on_a_cache_line() {
        let pool = BufferPool::new();
        for len in [1, 7, 8, 100, 4096, 100_003] {
            let mut a = pool.get(len);
            assert_eq!(
                (a.len(), a.as_ptr() as usize % 64),
                (len, 0),
                "{len} values"
            );
            a.resize(len + 5).unwrap();
            assert_eq!((a.len(), a.as_ptr() as usize % 64), (len + 5, 0));
        }
        assert!(pool.get(0).is_empty());
    }

    #[test]
    fn weak_handle_is_invalid_after_reuse_by_another_owner() {
        let pool = BufferPool::new();
        let a = pool.get(2);
        let w = a.downgrade();
        assert_eq!(w.len(), 2);
        drop(a);
        let b = pool.get(2);
        assert_eq!(pool.created(), 1, "same storage reused");
        assert!(!w.is_valid());
        assert!(b.downgrade().is_valid());
        let pool2 = pool.clone();
        drop(pool);
        drop(b);
        assert_eq!(pool2.available(2), 1);
    }
}
