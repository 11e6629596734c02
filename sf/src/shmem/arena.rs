//! Where symmetric objects sit in the heap: a first-fit list of free byte ranges. Every PE
//! runs the same allocations in the same order, so the same object lands at the same offset
//! everywhere (and `Shmem::malloc` checks that it did).

/// Objects start on this boundary: a cache line, and more than any scalar needs.
pub(crate) const ALIGN: usize = 64;

#[derive(Debug)]
pub(crate) struct Arena {
    /// Free ranges `(offset, bytes)`, sorted by offset, never adjacent (merged on release).
    free: Vec<(usize, usize)>,
}

impl Arena {
    pub(crate) fn new(bytes: usize) -> Self {
        let bytes = bytes / ALIGN * ALIGN;
        let free = if bytes > 0 { vec![(0, bytes)] } else { vec![] };
        Self { free }
    }

    /// The offset of a new block of `bytes` bytes (at least one [`ALIGN`] unit), or `None`
    /// when no free range is large enough.
    pub(crate) fn take(&mut self, bytes: usize) -> Option<usize> {
        let need = rounded(bytes)?;
        let i = self.free.iter().position(|&(_, len)| len >= need)?;
        let (off, len) = self.free[i];
        if len == need {
            self.free.remove(i);
        } else {
            self.free[i] = (off + need, len - need);
        }
        Some(off)
    }

    /// Returns a block that [`take`](Self::take) gave for `bytes` bytes at `off`.
    pub(crate) fn give(&mut self, off: usize, bytes: usize) {
        let Some(len) = rounded(bytes) else { return };
        let i = self.free.partition_point(|&(o, _)| o < off);
        self.free.insert(i, (off, len));
        // Merge with the next range, then with the previous one.
        if i + 1 < self.free.len() && off + len == self.free[i + 1].0 {
            self.free[i].1 += self.free.remove(i + 1).1;
        }
        if i > 0 && self.free[i - 1].0 + self.free[i - 1].1 == off {
            self.free[i - 1].1 += self.free.remove(i).1;
        }
    }

    /// The largest block [`take`](Self::take) could give now.
    pub(crate) fn largest(&self) -> usize {
        self.free.iter().map(|&(_, len)| len).max().unwrap_or(0)
    }
}

/// `bytes` rounded up to whole [`ALIGN`] units, at least one.
fn rounded(bytes: usize) -> Option<usize> {
    bytes.max(1).checked_next_multiple_of(ALIGN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_aligned_disjoint_and_reused() {
        let mut a = Arena::new(1000);
        assert_eq!(a.largest(), 960);
        let x = a.take(1).unwrap();
        let y = a.take(100).unwrap();
        let z = a.take(64).unwrap();
        assert_eq!((x, y, z), (0, 64, 192));
        assert_eq!(a.take(900), None);
        a.give(y, 100);
        // First fit: the hole left by `y` takes a block that fits in it.
        assert_eq!(a.take(128), Some(64));
        a.give(64, 128);
        a.give(x, 1);
        a.give(z, 64);
        // Everything merged back into one range.
        assert_eq!(a.free, vec![(0, 960)]);
        assert_eq!(a.take(960), Some(0));
        assert_eq!(a.take(0), None);
    }

    #[test]
    fn an_empty_heap_gives_nothing() {
        let mut a = Arena::new(10);
        assert_eq!(a.largest(), 0);
        assert_eq!(a.take(1), None);
        assert_eq!(Arena::new(64).take(usize::MAX), None);
    }
}
