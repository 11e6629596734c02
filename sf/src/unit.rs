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

    /// A start value for partial folds by `op`: folding values into a destination in parts,
    /// each part one value or more folded from this start, gives the bits of a single fold in
    /// any order and grouping. `None` where order or grouping changes the bits (replace; every
    /// floating-point op, since rounding and signed zeros depend on it). Not an identity for
    /// land and lor: a part of no values would turn a destination of 5 into 1.
    fn neutral(op: Op) -> Option<Self> {
        let _ = op;
        None
    }
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
            fn neutral(op: Op) -> Option<Self> {
                // Wrapping sums and products are associative and commutative; land and lor
                // fold to 0 or 1 from any start that is true or false respectively.
                match op {
                    Op::Replace => None,
                    Op::Sum | Op::Lor | Op::Bor | Op::Bxor => Some(0),
                    Op::Prod | Op::Land => Some(1),
                    Op::Min => Some(<$t>::MAX),
                    Op::Max => Some(<$t>::MIN),
                    Op::Band => Some(!0),
                }
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

/// The unit whose every lane is [`Scalar::neutral`] for `op`: where it exists, values folded
/// by `op` may be combined in any grouping (partial folds of one value or more, each from
/// this start, on other ranks) and give a plain fold's bits.
pub fn neutral<U: Unit>(op: Op) -> Option<U> {
    let lane = <U::Scalar as Scalar>::neutral(op)?;
    let mut unit = U::zeroed();
    bytemuck::cast_slice_mut::<U, U::Scalar>(std::slice::from_mut(&mut unit)).fill(lane);
    Some(unit)
}

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
        // Both orders, so that neither keeping the destination nor taking the source passes.
        assert_eq!(apply(Op::Min, 3i32, 5), 3);
        assert_eq!(apply(Op::Min, 5i32, 3), 3);
        assert_eq!(apply(Op::Max, 3i32, 5), 5);
        assert_eq!(apply(Op::Max, 5i32, 3), 5);
        assert_eq!(apply(Op::Min, 9i64, -4), -4);
        assert_eq!(apply(Op::Max, -4i64, 9), 9);
        assert_eq!(apply(Op::Min, 200u8, 7), 7);
        assert_eq!(apply(Op::Max, 7u8, 200), 200);
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
        // Both orders, so that neither keeping the destination nor taking the source passes.
        for (d, s) in [(1.5f64, -2.0), (-2.0, 1.5)] {
            assert_eq!(apply(Op::Min, d, s), -2.0, "min({d}, {s})");
            assert_eq!(apply(Op::Max, d, s), 1.5, "max({d}, {s})");
            assert_eq!(apply(Op::Sum, d, s), -0.5, "sum({d}, {s})");
            assert_eq!(apply(Op::Replace, d, s), s, "replace({d}, {s})");
        }
        assert_eq!(apply(Op::Min, 1.5f32, -2.0), -2.0);
        assert_eq!(apply(Op::Max, -2.0f32, 1.5), 1.5);
        for op in Op::ALL.into_iter().filter(|o| o.integer_only()) {
            assert!(f64::reducer(op).is_none());
            let e = reducer::<[f32; 3]>(op).unwrap_err();
            assert!(e.to_string().contains("f32"), "{e}");
        }
    }

    fn fold<U: Unit>(op: Op, mut d: U, xs: &[U]) -> U {
        let red = reducer::<U>(op).unwrap();
        for x in xs {
            red(
                bytemuck::cast_slice_mut(std::slice::from_mut(&mut d)),
                bytemuck::cast_slice(std::slice::from_ref(x)),
            );
        }
        d
    }

    /// Folding in parts from the neutral start gives one fold's bits: parts of a single value
    /// (which a wrong start spoils alone: 0 for a product or a minimum, 1 for lor) and a list
    /// cut in two, over values and destinations of both signs, zero and the extremes.
    #[test]
    fn neutral_starts_let_partial_folds_combine() {
        let values: Vec<i16> = [0, 1, -1, i16::MIN, i16::MAX, 5]
            .into_iter()
            .chain((0..97i32).map(|k| (k * 7919 + 13) as i16))
            .collect();
        for op in Op::ALL.into_iter().filter(|&o| o != Op::Replace) {
            let id = neutral::<i16>(op).unwrap();
            for (i, &start) in values.iter().enumerate().step_by(7) {
                for &x in &values {
                    let part = fold(op, id, &[x]);
                    assert_eq!(fold(op, start, &[part]), fold(op, start, &[x]), "{op} {x}");
                }
                let (a, b) = values.split_at(i);
                let parts = [fold(op, id, b), fold(op, id, a)];
                let parts = &parts[..2 - usize::from(a.is_empty())];
                assert_eq!(fold(op, start, parts), fold(op, start, &values), "{op}");
            }
            let lanes = neutral::<[u8; 3]>(op).unwrap();
            assert_eq!(lanes, [neutral::<u8>(op).unwrap(); 3], "{op}");
        }
        assert!(neutral::<u32>(Op::Replace).is_none());
        for op in Op::ALL {
            assert!(neutral::<f64>(op).is_none() && neutral::<[f32; 2]>(op).is_none());
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
