//! Unit types and reduction operations.

use crate::error::SfError;
use std::fmt;
use std::str::FromStr;

/// How a received value combines with the value already at the destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Overwrite (MPI_REPLACE).
    Replace,
    /// Add.
    Sum,
    /// Multiply.
    Prod,
    /// Keep the smaller.
    Min,
    /// Keep the larger.
    Max,
    /// Logical and (integers: nonzero is true, result 0 or 1).
    Land,
    /// Logical or (integers).
    Lor,
    /// Bitwise and (integers).
    Band,
    /// Bitwise or (integers).
    Bor,
    /// Bitwise exclusive or (integers).
    Bxor,
}

impl Op {
    /// Every operation, in the order of the MPI standard.
    pub const ALL: [Op; 10] = [
        Op::Replace,
        Op::Sum,
        Op::Prod,
        Op::Min,
        Op::Max,
        Op::Land,
        Op::Lor,
        Op::Band,
        Op::Bor,
        Op::Bxor,
    ];
    const NAMES: [&'static str; 10] = [
        "replace", "sum", "prod", "min", "max", "land", "lor", "band", "bor", "bxor",
    ];

    /// The lower-case name used on the command line.
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    /// True for the operations that only integers have.
    pub fn integer_only(self) -> bool {
        matches!(self, Op::Land | Op::Lor | Op::Band | Op::Bor | Op::Bxor)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Op {
    type Err = SfError;
    fn from_str(s: &str) -> Result<Self, SfError> {
        let i = Self::NAMES.iter().position(|n| *n == s);
        i.map(|i| Self::ALL[i]).ok_or_else(|| SfError::UnknownName {
            what: "operation",
            got: s.to_string(),
            expected: "replace, sum, prod, min, max, land, lor, band, bor, bxor",
        })
    }
}

/// A primitive value the forest can reduce.
pub trait Scalar: bytemuck::Pod + Send + Sync + PartialOrd + fmt::Debug {
    /// Type name for messages.
    const NAME: &'static str;
    /// `dst = dst op src`, or `None` when `op` is not defined for this type.
    fn reducer(op: Op) -> Option<Reducer<Self>>;
}

/// The unit of data at each root and leaf: a [`Scalar`], or a fixed-size block `[S; N]`
/// reduced lane by lane.
pub trait Unit: bytemuck::Pod + Send + Sync {
    /// The lane type.
    type Scalar: Scalar;
    /// Lanes per unit.
    const LANES: usize;
}

impl<S: Scalar, const N: usize> Unit for [S; N]
where
    [S; N]: bytemuck::Pod,
{
    type Scalar = S;
    const LANES: usize = N;
}

/// A [`Reducer`] applying `|d, s| body` (`d: &mut S`, `s: S`) to every pair of lanes.
macro_rules! lanewise {
    (|$d:ident, $s:ident| $body:expr) => {
        |dst, src| dst.iter_mut().zip(src).for_each(|($d, &$s)| $body)
    };
}

macro_rules! int_scalar {
    ($($t:ty),*) => {$(
        impl Scalar for $t {
            const NAME: &'static str = stringify!($t);
            fn reducer(op: Op) -> Option<Reducer<Self>> {
                Some(match op {
                    Op::Replace => lanewise!(|d, s| *d = s),
                    Op::Sum => lanewise!(|d, s| *d = d.wrapping_add(s)),
                    Op::Prod => lanewise!(|d, s| *d = d.wrapping_mul(s)),
                    Op::Min => lanewise!(|d, s| *d = (*d).min(s)),
                    Op::Max => lanewise!(|d, s| *d = (*d).max(s)),
                    Op::Land => lanewise!(|d, s| *d = <$t>::from(*d != 0 && s != 0)),
                    Op::Lor => lanewise!(|d, s| *d = <$t>::from(*d != 0 || s != 0)),
                    Op::Band => lanewise!(|d, s| *d &= s),
                    Op::Bor => lanewise!(|d, s| *d |= s),
                    Op::Bxor => lanewise!(|d, s| *d ^= s),
                })
            }
        }
        impl Unit for $t {
            type Scalar = $t;
            const LANES: usize = 1;
        }
    )*};
}
int_scalar!(i8, i16, i32, i64, u8, u16, u32, u64);

macro_rules! float_scalar {
    ($($t:ty),*) => {$(
        impl Scalar for $t {
            const NAME: &'static str = stringify!($t);
            fn reducer(op: Op) -> Option<Reducer<Self>> {
                match op {
                    Op::Replace => Some(lanewise!(|d, s| *d = s)),
                    Op::Sum => Some(lanewise!(|d, s| *d += s)),
                    Op::Prod => Some(lanewise!(|d, s| *d *= s)),
                    Op::Min => Some(lanewise!(|d, s| *d = d.min(s))),
                    Op::Max => Some(lanewise!(|d, s| *d = d.max(s))),
                    _ => None,
                }
            }
        }
        impl Unit for $t {
            type Scalar = $t;
            const LANES: usize = 1;
        }
    )*};
}
float_scalar!(f32, f64);

/// `dst[i] = dst[i] op src[i]` lane by lane over two slices of equal length: one call per
/// run of consecutive values, whose loop the compiler sees whole.
pub type Reducer<S> = fn(&mut [S], &[S]);

/// The reducer of `op` for unit `U`, or the error naming both.
pub(crate) fn reducer<U: Unit>(op: Op) -> Result<Reducer<U::Scalar>, SfError> {
    <U::Scalar as Scalar>::reducer(op).ok_or(SfError::UnsupportedOp {
        op,
        unit: <U::Scalar as Scalar>::NAME,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply<S: Scalar>(op: Op, d: S, s: S) -> S {
        let mut d = d;
        S::reducer(op).unwrap()(std::slice::from_mut(&mut d), &[s]);
        d
    }

    #[test]
    fn integer_ops() {
        assert_eq!(apply(Op::Replace, 3i32, 5), 5);
        assert_eq!(apply(Op::Sum, 3i32, 5), 8);
        assert_eq!(apply(Op::Prod, 3i32, 5), 15);
        assert_eq!(apply(Op::Min, 3i32, 5), 3);
        assert_eq!(apply(Op::Max, 3i32, 5), 5);
        assert_eq!(apply(Op::Land, 3i32, 0), 0);
        assert_eq!(apply(Op::Land, 3i32, 7), 1);
        assert_eq!(apply(Op::Lor, 0u8, 0), 0);
        assert_eq!(apply(Op::Lor, 0u8, 9), 1);
        assert_eq!(apply(Op::Band, 0b1100u8, 0b1010), 0b1000);
        assert_eq!(apply(Op::Bor, 0b1100u8, 0b1010), 0b1110);
        assert_eq!(apply(Op::Bxor, 0b1100u8, 0b1010), 0b0110);
        assert_eq!(apply(Op::Sum, 250u8, 10), 4, "wraps like C");
    }

    #[test]
    fn float_ops_and_refusals() {
        assert_eq!(apply(Op::Prod, 1.5f64, -2.0), -3.0);
        assert_eq!(apply(Op::Min, 1.5f32, -2.0), -2.0);
        for op in Op::ALL.into_iter().filter(|o| o.integer_only()) {
            assert!(f64::reducer(op).is_none());
            let e = reducer::<[f32; 3]>(op).unwrap_err();
            assert!(e.to_string().contains("f32"), "{e}");
        }
    }

    #[test]
    fn names_round_trip() {
        for op in Op::ALL {
            assert_eq!(op.name().parse::<Op>().unwrap(), op);
        }
        assert!("avg".parse::<Op>().is_err());
    }
}
