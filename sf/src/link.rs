//! Links: the reusable state of one operation in flight (buffers and transport requests),
//! pooled per forest so that a warm forest allocates nothing per operation.

use crate::transport::Transport;

/// What an in-flight operation does; links are only reused for the same kind and unit size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Bcast,
    Reduce,
    FetchAndOp,
}

impl Kind {
    /// Message tags per direction (`[bcast, reduce]`), distinct per kind so that operations of
    /// different kinds can be in flight together. Tag 0 belongs to set-up.
    pub(crate) fn tags(self) -> [i32; 2] {
        match self {
            Kind::Bcast => [1, 1],
            Kind::Reduce => [2, 2],
            Kind::FetchAndOp => [4, 3],
        }
    }
}

/// Buffers and requests of one operation in flight.
pub(crate) struct Link {
    pub kind: Kind,
    pub unit_bytes: usize,
    /// Root-side staging: one segment per leaf rank.
    pub rootbuf: Vec<u128>,
    /// Leaf-side staging: one segment per root rank.
    pub leafbuf: Vec<u128>,
    /// Leaf-side staging of fetched values (fetch-and-op only).
    pub fetchbuf: Vec<u128>,
    pub transport: Box<dyn Transport>,
}

/// Storage for `units` units of `unit_bytes`, 16-byte aligned so any unit type can view it.
pub(crate) fn staging(units: usize, unit_bytes: usize) -> Vec<u128> {
    vec![0u128; (units * unit_bytes).div_ceil(16)]
}

/// Views the first `units` units of a staging buffer as `U`s.
pub(crate) fn view<U: bytemuck::Pod>(buf: &mut [u128], units: usize) -> &mut [U] {
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
    bytemuck::cast_slice_mut(&mut bytes[..units * std::mem::size_of::<U>()])
}
