//! Sums of `f64` whose bits do not depend on the order of the terms, so a dot product or an
//! integral is the same on any number of ranks and for any block size.
//!
//! A floating-point sum rounds after every addition, so `MPI_SUM` over doubles (and PETSc's
//! `VecDot`) gives bits that change with the decomposition. [`ExactSum`] instead holds the
//! sum exactly, as a fixed-point integer that spans every finite `f64` (2^-1074 up to
//! 2^1024) in 32-bit digits kept in `i64` words. Integer addition is associative, so ranks
//! combine their sums with a plain `MPI_SUM` over the words ([`ExactSum::all_reduce`]), and
//! [`ExactSum::value`] rounds once: the result is the correctly rounded sum of the terms.
//!
//! Many terms go faster through [`Extend`] than through [`ExactSum::add`] one by one: it first adds the mantissas of each sign and exponent as integers, as Neal's large
//! superaccumulator does ("Fast exact summation using small and large superaccumulators",
//! 2015), and moves those partial sums into the digits every 2048 terms.

use std::cell::Cell;

use mpi::collective::{CommunicatorCollectives, SystemOperation};

/// Digits of 32 bits: 67 hold the 2098 bits of the `f64` range with room for carries.
const DIGITS: usize = 67;
/// Counts of NaN, +inf and -inf terms follow the digits.
const WORDS: usize = DIGITS + 3;
/// A term adds less than 2^32 to a digit, so an `i64` digit takes 2^30 terms (and the sums
/// of that many ranks) before its carries must move up.
const TERMS_BEFORE_CARRY: u32 = 1 << 30;
/// Mantissas (below 2^53) summed in a `u64` bin before it must be emptied.
const BATCH: usize = 1 << 11;
const _: () = assert!((BATCH as u128) * ((1 << 53) - 1) <= u64::MAX as u128);

/// An exact sum of `f64` terms; see the module documentation.
///
/// ```
/// use starhalo_sf::ExactSum;
/// let mut s = ExactSum::default();
/// for x in [1e16, 1.0, -1e16, 1e-300] {
///     s.add(x);
/// }
/// assert_eq!(s.value(), 1.0); // a sum in `f64` gives 0.0 in this order
/// ```
#[derive(Clone, Debug)]
pub struct ExactSum {
    /// Word `k < DIGITS` weighs 2^(32k - 1074); after [`Self::carry`] all digits but the
    /// last lie in [0, 2^32) and the last holds the sign.
    words: [i64; WORDS],
    /// Terms added since the last carry.
    pending: u32,
}

impl Default for ExactSum {
    fn default() -> Self {
        Self {
            words: [0; WORDS],
            pending: 0,
        }
    }
}

impl ExactSum {
    /// Adds `x` exactly. Infinities and NaN are counted apart and decide the value as in IEEE
    /// arithmetic (NaN, or +inf and -inf together, give NaN).
    pub fn add(&mut self, x: f64) {
        let bits = x.to_bits();
        let exponent = ((bits >> 52) & 0x7ff) as usize;
        if exponent == 0x7ff {
            let special = match (bits & FRACTION != 0, bits >> 63 == 1) {
                (true, _) => 0,
                (false, false) => 1,
                (false, true) => 2,
            };
            self.words[DIGITS + special] += 1;
        } else {
            self.add_scaled(mantissa(bits), exponent, bits >> 63 == 1);
        }
    }

    /// Adds `±magnitude * 2^(exponent - 1075)` (`exponent` as in the bits of an `f64`, so a
    /// subnormal's 0 weighs as 1), for a magnitude below 2^64.
    fn add_scaled(&mut self, magnitude: u64, exponent: usize, negative: bool) {
        let at = exponent.saturating_sub(1);
        let wide = u128::from(magnitude) << (at % 32);
        let k = at / 32;
        for (i, word) in self.words[k..k + 3].iter_mut().enumerate() {
            let digit = i64::from((wide >> (32 * i)) as u32);
            *word += if negative { -digit } else { digit };
        }
        self.pending += 1;
        if self.pending == TERMS_BEFORE_CARRY {
            self.carry();
        }
    }

    /// The exact sum of the products `a[i] * b[i]` (each rounded once, as `f64`), over the
    /// shorter length.
    pub fn dot(a: &[f64], b: &[f64]) -> Self {
        let mut s = Self::default();
        s.extend(a.iter().zip(b).map(|(x, y)| x * y));
        s
    }

    /// Adds the terms of `other`.
    pub fn merge(&mut self, other: &Self) {
        let mut other = other.clone();
        other.carry();
        self.carry();
        for (w, o) in self.words.iter_mut().zip(other.words) {
            *w += o;
        }
        self.carry();
    }

    /// Moves each digit's carries into the next, leaving digits in [0, 2^32).
    fn carry(&mut self) {
        for k in 0..DIGITS - 1 {
            let c = self.words[k] >> 32;
            self.words[k] -= c << 32;
            self.words[k + 1] += c;
        }
        self.pending = 0;
    }

    /// The sum rounded to the nearest `f64` (ties to even); an exact zero is `+0.0`.
    pub fn value(&self) -> f64 {
        let [nan, plus_inf, minus_inf] = [0, 1, 2].map(|i| self.words[DIGITS + i] > 0);
        if nan || (plus_inf && minus_inf) {
            return f64::NAN;
        }
        if plus_inf || minus_inf {
            return if plus_inf {
                f64::INFINITY
            } else {
                f64::NEG_INFINITY
            };
        }
        let mut s = self.clone();
        s.carry();
        let negative = s.words[DIGITS - 1] < 0;
        if negative {
            s.words[..DIGITS].iter_mut().for_each(|w| *w = -*w);
            s.carry();
        }
        let digits = &s.words[..DIGITS];
        let Some(top) = digits.iter().rposition(|&d| d != 0) else {
            return 0.0;
        };
        // The top three digits (at least 65 bits when there are lower ones), with any lower
        // bit folded into the last place as a sticky bit: one rounding to 53 bits, then an
        // exact scaling (the result is subnormal only when all of it lies in the window).
        let low = top.saturating_sub(2);
        let mut window = digits[low..=top]
            .iter()
            .rev()
            .fold(0u128, |m, &d| (m << 32) | d as u128);
        if digits[..low].iter().any(|&d| d != 0) {
            window |= 1;
        }
        let magnitude = window as f64 * pow2(32 * low as i32 - 1074);
        if negative {
            -magnitude
        } else {
            magnitude
        }
    }

    /// Sums `sums` over the ranks of `comm` in one reduction, in place: afterwards every rank
    /// holds the same sums, whatever the ranks' order or number. Collective.
    pub fn all_reduce<C: CommunicatorCollectives>(comm: &C, sums: &mut [Self]) {
        let mut mine = Vec::with_capacity(sums.len() * WORDS);
        for s in sums.iter_mut() {
            s.carry();
            mine.extend_from_slice(&s.words);
        }
        let mut all = vec![0i64; mine.len()];
        comm.all_reduce_into(&mine[..], &mut all[..], SystemOperation::sum());
        for (s, words) in sums.iter_mut().zip(all.chunks_exact(WORDS)) {
            s.words.copy_from_slice(words);
            s.carry();
        }
    }
}

impl Extend<f64> for ExactSum {
    /// Adds every term, as [`ExactSum::add`] would, faster: mantissas are first summed per
    /// sign and exponent in `u64` bins (at most 2048 to a bin), and only the bins a
    /// batch touched are moved into the digits.
    fn extend<I: IntoIterator<Item = f64>>(&mut self, terms: I) {
        // The thread's bins, or fresh ones where a sum holds them (a term that sums
        // something itself) or they are gone (a sum that panicked, or thread-local storage
        // torn down).
        let mut bins = BINS.try_with(Cell::take).ok().flatten().unwrap_or_default();
        self.extend_in(&mut bins, terms.into_iter());
        let _ = BINS.try_with(|b| b.set(Some(bins)));
    }
}

/// The bins of [`ExactSum`]'s `extend`, indexed by a term's sign and exponent.
struct Bins {
    sums: [u64; 1 << 12],
    touched: [u16; BATCH],
}

impl Default for Bins {
    fn default() -> Self {
        Self {
            sums: [0; 1 << 12],
            touched: [0; BATCH],
        }
    }
}

thread_local! {
    /// 36 KiB, zero between sums (each empties the bins it touched) and kept per thread: a
    /// sum of a few terms does not clear them all first.
    static BINS: Cell<Option<Box<Bins>>> = const { Cell::new(None) };
}

impl ExactSum {
    fn extend_in(&mut self, bins: &mut Bins, terms: impl Iterator<Item = f64>) {
        let (mut ntouched, mut nterms) = (0, 0);
        for x in terms {
            let bits = x.to_bits();
            let bin = (bits >> 52) as usize;
            if bin & 0x7ff == 0x7ff {
                self.add(x);
                continue;
            }
            // Recorded always, kept only for a bin's first term of the batch: no branch.
            bins.touched[ntouched] = bin as u16;
            ntouched += usize::from(bins.sums[bin] == 0);
            bins.sums[bin] += mantissa(bits);
            nterms += 1;
            if nterms == BATCH {
                self.empty_bins(&mut bins.sums, &bins.touched[..ntouched]);
                (ntouched, nterms) = (0, 0);
            }
        }
        self.empty_bins(&mut bins.sums, &bins.touched[..ntouched]);
    }

    /// Moves the `touched` bins (sign bit and exponent of their terms) into the digits.
    fn empty_bins(&mut self, bins: &mut [u64; 1 << 12], touched: &[u16]) {
        for &bin in touched {
            let bin = usize::from(bin);
            let sum = std::mem::take(&mut bins[bin]);
            if sum != 0 {
                self.add_scaled(sum, bin & 0x7ff, bin >> 11 == 1);
            }
        }
    }
}

const FRACTION: u64 = (1 << 52) - 1;

/// The integer mantissa of a finite `f64`'s bits: the fraction with the implicit bit of a
/// normal number.
fn mantissa(bits: u64) -> u64 {
    (bits & FRACTION) | u64::from(bits & (0x7ff << 52) != 0) << 52
}

/// 2^e for e in [-1074, 1023], exactly.
fn pow2(e: i32) -> f64 {
    if e >= -1022 {
        f64::from_bits(((e + 1023) as u64) << 52)
    } else {
        f64::from_bits(1 << (e + 1074))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn sum(terms: &[f64]) -> f64 {
        let mut s = ExactSum::default();
        terms.iter().for_each(|&x| s.add(x));
        s.value()
    }

    /// A term of every scale, subnormals and the extremes included.
    fn any_term(rng: &mut ChaCha8Rng) -> f64 {
        match rng.gen_range(0..10) {
            0 => f64::from_bits(rng.gen_range(1..1 << 52)),
            1 => f64::MAX * rng.gen_range(-1.0..1.0),
            _ => rng.gen_range(-1.0..1.0) * 2f64.powi(rng.gen_range(-300..300)),
        }
    }

    /// The result is the correctly rounded sum: checked against sums whose exact value is
    /// known, including cancellation a float sum loses entirely and ties to even.
    #[test]
    fn the_value_is_the_correctly_rounded_sum() {
        assert_eq!(sum(&[]), 0.0);
        assert_eq!(sum(&[1e16, 1.0, -1e16]), 1.0);
        assert_eq!(sum(&[1.0, 1e-300, -1.0]), 1e-300);
        assert_eq!(sum(&[f64::MAX, f64::MAX, -f64::MAX]), f64::MAX);
        assert_eq!(sum(&[f64::MAX, f64::MAX]), f64::INFINITY);
        assert_eq!(sum(&[-f64::MAX, -f64::MAX]), f64::NEG_INFINITY);
        let tiny = f64::from_bits(1);
        assert_eq!(sum(&[tiny, tiny, tiny]), f64::from_bits(3));
        assert_eq!(sum(&[-tiny, 2.0 * tiny]), tiny);
        // 1 + 2^-53 is a tie: to even (1.0); a further 2^-200 breaks it upwards.
        let half_ulp = 2f64.powi(-53);
        assert_eq!(sum(&[1.0, half_ulp]), 1.0);
        assert_eq!(sum(&[1.0, half_ulp, 2f64.powi(-200)]), 1.0 + f64::EPSILON);
        assert_eq!(sum(&[1.0, half_ulp, -2f64.powi(-200)]), 1.0);
        assert_eq!(
            sum(&[-1.0, -half_ulp, -2f64.powi(-200)]),
            -1.0 - f64::EPSILON
        );
        // Integers beyond 2^53 add exactly before the one rounding.
        let big = 2f64.powi(60);
        assert_eq!(sum(&[big, 1.0, 1.0, 1.0, 1.0, -big]), 4.0);
        assert!(sum(&[1.0, f64::NAN]).is_nan());
        assert!(sum(&[f64::INFINITY, f64::NEG_INFINITY]).is_nan());
        assert_eq!(sum(&[f64::INFINITY, -f64::MAX]), f64::INFINITY);
        assert_eq!(sum(&[-0.0, -0.0]).to_bits(), 0.0f64.to_bits());
    }

    /// The bulk path gives the bits of the term-by-term path, across many batches, with bins
    /// filled to their limit, and with infinities and NaN among the terms.
    #[test]
    fn extend_and_dot_agree_with_add() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let full = f64::from_bits((1 << 63) | (1000 << 52) | FRACTION);
        for n in [0, 1, 7, BATCH - 1, BATCH, BATCH + 1, 5 * BATCH + 3] {
            let mut terms: Vec<f64> = (0..n).map(|_| any_term(&mut rng)).collect();
            terms.extend(std::iter::repeat_n(full, n));
            let mut bulk = ExactSum::default();
            bulk.extend(terms.iter().copied());
            assert_eq!(bulk.value().to_bits(), sum(&terms).to_bits(), "{n} terms");
            let ones = vec![1.0; terms.len()];
            assert_eq!(
                ExactSum::dot(&terms, &ones).value().to_bits(),
                sum(&terms).to_bits()
            );
        }
        for special in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let mut bulk = ExactSum::default();
            bulk.extend([1.0, special, 2.0]);
            assert_eq!(bulk.value().to_bits(), sum(&[1.0, special, 2.0]).to_bits());
        }
        assert_eq!(ExactSum::dot(&[3.0, 4.0], &[5.0, 6.0, 7.0]).value(), 39.0);
    }

    /// The bins kept between calls start empty each time: after a sum whose terms stopped
    /// with a panic half-way, and where a term is itself worked out by a sum.
    #[test]
    fn kept_bins_carry_nothing_from_one_sum_to_the_next() {
        // Integers of many exponents whose sum is exact: a term lost or counted twice shows.
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let terms: Vec<f64> = (0..3 * BATCH + 5)
            .map(|_| rng.gen_range(-(1i64 << 40)..1 << 40) as f64)
            .collect();
        let stopped = std::panic::catch_unwind(|| {
            let mut s = ExactSum::default();
            s.extend(terms.iter().enumerate().map(|(i, &x)| {
                assert!(i < BATCH + 7, "stop");
                x
            }));
        });
        assert!(stopped.is_err());
        let mut after = ExactSum::default();
        after.extend(terms.iter().copied());
        assert_eq!(after.value().to_bits(), sum(&terms).to_bits());
        // Each term the sum of a row: the inner sums run while the outer one holds the
        // thread's bins.
        let rows: Vec<&[f64]> = terms.chunks(7).collect();
        let mut outer = ExactSum::default();
        outer.extend(rows.iter().map(|r| {
            let mut inner = ExactSum::default();
            inner.extend(r.iter().copied());
            inner.value()
        }));
        let want: Vec<f64> = rows.iter().map(|r| sum(r)).collect();
        assert_eq!(outer.value().to_bits(), sum(&want).to_bits());
    }

    /// Any order and any split into partial sums merged later give the same bits, with terms
    /// spanning the whole range; float sums of the same terms differ.
    #[test]
    fn order_and_splitting_do_not_change_the_bits() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut float_sums_differ = false;
        for _ in 0..200 {
            let mut terms: Vec<f64> = (0..rng.gen_range(1..60))
                .map(|_| any_term(&mut rng))
                .collect();
            let want = sum(&terms);
            let naive: f64 = terms.iter().sum();
            for _ in 0..4 {
                let i = rng.gen_range(0..terms.len());
                let j = rng.gen_range(0..terms.len());
                terms.swap(i, j);
                let cut = rng.gen_range(0..=terms.len());
                let (mut a, mut b) = (ExactSum::default(), ExactSum::default());
                terms[..cut].iter().for_each(|&x| a.add(x));
                b.extend(terms[cut..].iter().copied());
                b.merge(&a);
                assert_eq!(b.value().to_bits(), want.to_bits(), "{terms:?}");
                float_sums_differ |= terms.iter().sum::<f64>() != naive;
            }
        }
        assert!(float_sums_differ);
    }

    /// Against exact rational arithmetic on terms of a narrow range: the sum of integers
    /// scaled by one power of two is exact in i128, so its rounding is known.
    #[test]
    fn agrees_with_integer_arithmetic() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        for _ in 0..500 {
            let scale = rng.gen_range(-1070..900);
            let ints: Vec<i64> = (0..rng.gen_range(1..40))
                .map(|_| rng.gen_range(-(1i64 << 53)..1 << 53))
                .collect();
            let exact: i128 = ints.iter().map(|&i| i128::from(i)).sum();
            let terms: Vec<f64> = ints.iter().map(|&i| i as f64 * pow2(scale)).collect();
            // i128 -> f64 rounds to nearest even, then the scaling is exact (normal range).
            let want = exact as f64 * pow2(scale);
            if want.is_finite() && (want == 0.0 || want.abs() >= f64::MIN_POSITIVE) {
                assert_eq!(
                    sum(&terms).to_bits(),
                    want.to_bits(),
                    "{ints:?} * 2^{scale}"
                );
            }
        }
    }

    /// Terms that fill every bit of their three digits, many times over, in both signs:
    /// the carries move up and the one rounding is that of the exact integer.
    #[test]
    fn carries_keep_long_sums_exact() {
        let mantissa = (1u64 << 53) - 1;
        for shift in [-1074, -1050, -3, 0, 31, 900] {
            let x = mantissa as f64 * pow2(shift);
            for n in [1u32, 2, 3, 1000, 100_003] {
                let (mut up, mut down) = (ExactSum::default(), ExactSum::default());
                (0..n).for_each(|_| up.add(x));
                down.extend((0..n).map(|_| -x));
                let want = (u128::from(n) * u128::from(mantissa)) as f64 * pow2(shift);
                if want.is_finite() {
                    assert_eq!(up.value(), want, "{n} x 2^{shift}");
                    assert_eq!(down.value(), -want, "{n} x 2^{shift}");
                }
                up.merge(&down);
                assert_eq!(up.value().to_bits(), 0, "{n} x 2^{shift}");
            }
        }
    }
}
