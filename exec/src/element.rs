//! The element types a [`Buffer`](crate::Buffer) can hold in every memory space.

/// The scalar types the device kernels are instantiated for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScalarKind {
    /// `f32`
    F32,
    /// `f64`
    F64,
    /// `i32`
    I32,
    /// `u32`
    U32,
    /// `i64`
    I64,
    /// `u64`
    U64,
}

impl ScalarKind {
    /// Every kind, in the order of the kernels' instantiations.
    pub const ALL: [ScalarKind; 6] = [
        ScalarKind::F32,
        ScalarKind::F64,
        ScalarKind::I32,
        ScalarKind::U32,
        ScalarKind::I64,
        ScalarKind::U64,
    ];

    /// The suffix of the kernels' names (`sh_gather_box_f64`).
    pub fn suffix(self) -> &'static str {
        match self {
            ScalarKind::F32 => "f32",
            ScalarKind::F64 => "f64",
            ScalarKind::I32 => "i32",
            ScalarKind::U32 => "u32",
            ScalarKind::I64 => "i64",
            ScalarKind::U64 => "u64",
        }
    }

    /// True for `f32` and `f64`.
    pub fn is_float(self) -> bool {
        matches!(self, ScalarKind::F32 | ScalarKind::F64)
    }
}

mod sealed {
    pub trait Sealed {}
}

#[cfg(feature = "cuda")]
#[doc(hidden)]
/// What the CUDA backend needs of an element (its bits can be copied to a device as is).
pub trait DeviceBits: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits {}
#[cfg(feature = "cuda")]
impl<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits> DeviceBits for T {}

#[cfg(not(feature = "cuda"))]
#[doc(hidden)]
/// What the CUDA backend needs of an element (nothing in a build without it).
pub trait DeviceBits {}
#[cfg(not(feature = "cuda"))]
impl<T> DeviceBits for T {}

/// A plain value that can live in host or device memory: the primitive numbers and the
/// sub-halo descriptor [`HaloDesc`](crate::cuda::HaloDesc). Sealed: its bits are copied
/// between spaces as they are.
pub trait Element: Copy + Default + Send + Sync + 'static + sealed::Sealed + DeviceBits {
    /// The kernels' scalar type, for the types the device kernels are instantiated for.
    const SCALAR: Option<ScalarKind>;
    /// The value's bits, for types of 4 or 8 bytes (device fill without a host copy).
    fn bits(self) -> Option<u64>;
}

macro_rules! element {
    ($($t:ty => $kind:expr, |$v:ident| $bits:expr;)*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const SCALAR: Option<ScalarKind> = $kind;
            fn bits(self) -> Option<u64> {
                let $v = self;
                $bits
            }
        }
    )*};
}

element! {
    f32 => Some(ScalarKind::F32), |v| Some(u64::from(v.to_bits()));
    f64 => Some(ScalarKind::F64), |v| Some(v.to_bits());
    i32 => Some(ScalarKind::I32), |v| Some(u64::from(v as u32));
    u32 => Some(ScalarKind::U32), |v| Some(u64::from(v));
    i64 => Some(ScalarKind::I64), |v| Some(v as u64);
    u64 => Some(ScalarKind::U64), |v| Some(v);
    u8 => None, |v| { let _ = v; None };
    crate::cuda::HaloDesc => None, |v| { let _ = v; None };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_are_the_values_bits() {
        assert_eq!((-1.5f64).bits(), Some((-1.5f64).to_bits()));
        assert_eq!((-1i32).bits(), Some(0xffff_ffff));
        assert_eq!(2.0f32.bits(), Some(0x4000_0000));
        assert_eq!(7u8.bits(), None);
        assert_eq!(f64::SCALAR.map(ScalarKind::suffix), Some("f64"));
        assert!(ScalarKind::F32.is_float() && !ScalarKind::U64.is_float());
    }
}
