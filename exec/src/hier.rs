//! Hierarchical loops: an outer index over groups (sub-halos, blocks, peers) and an inner index
//! over their elements, dispatched once.

use rayon::prelude::*;

/// How a hierarchical loop runs on the host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Policy {
    /// One thread, outer groups in order (deterministic, and the fastest for small halos).
    #[default]
    Serial,
    /// Outer groups spread over rayon's thread pool.
    Threaded,
}

/// Runs `f(group, elements)` for each group of `data`, where group `g` is
/// `data[offsets[g]..offsets[g + 1]]`: the "pack all sub-halos in one launch" shape.
///
/// `offsets` must be non-decreasing and end within `data`; groups are disjoint, so each call
/// gets its own mutable slice and the threaded policy needs no synchronisation.
///
/// # Panics
/// When `offsets` is not non-decreasing or runs past `data` (a caller bug, not user input).
pub fn for_each_segment<T, F>(policy: Policy, data: &mut [T], offsets: &[usize], f: F)
where
    T: Send,
    F: Fn(usize, &mut [T]) + Sync,
{
    if offsets.len() < 2 {
        return; // no group
    }
    let (first, last) = (offsets[0], offsets[offsets.len() - 1]);
    assert!(
        first <= last && last <= data.len(),
        "segment offsets out of range"
    );
    let data = &mut data[first..last];
    match policy {
        Policy::Serial => {
            let mut rest = data;
            for (g, w) in offsets.windows(2).enumerate() {
                let (seg, tail) = std::mem::take(&mut rest).split_at_mut(w[1] - w[0]);
                f(g, seg);
                rest = tail;
            }
        }
        Policy::Threaded => split_par(data, offsets, 0, first, &f),
    }
}

/// Recursive halving over groups so rayon can steal the halves.
fn split_par<T: Send, F: Fn(usize, &mut [T]) + Sync>(
    data: &mut [T],
    offsets: &[usize],
    g0: usize,
    base: usize,
    f: &F,
) {
    let ngroups = offsets.len() - 1;
    if ngroups == 1 {
        f(g0, data);
        return;
    }
    let mid = ngroups / 2;
    let (lo, hi) = data.split_at_mut(offsets[mid] - base);
    rayon::join(
        || split_par(lo, &offsets[..=mid], g0, base, f),
        || split_par(hi, &offsets[mid..], g0 + mid, offsets[mid], f),
    );
}

/// Runs `f(outer, inner)` for every `outer < n_outer` and `inner < inner_len(outer)`, as one
/// dispatch. `f` sees shared state only; use [`for_each_segment`] to write disjoint outputs.
pub fn hier_for<L, F>(policy: Policy, n_outer: usize, inner_len: L, f: F)
where
    L: Fn(usize) -> usize + Sync,
    F: Fn(usize, usize) + Sync,
{
    let body = |o: usize| (0..inner_len(o)).for_each(|i| f(o, i));
    match policy {
        Policy::Serial => (0..n_outer).for_each(body),
        Policy::Threaded => (0..n_outer).into_par_iter().for_each(body),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn fill(policy: Policy, offsets: &[usize], len: usize) -> Vec<(usize, usize)> {
        let mut data = vec![(usize::MAX, usize::MAX); len];
        for_each_segment(policy, &mut data, offsets, |g, seg| {
            for (i, v) in seg.iter_mut().enumerate() {
                *v = (g, i);
            }
        });
        data
    }

    #[test]
    fn segments_get_their_own_ranges_in_both_policies() {
        // Includes an empty group and a leading gap that must stay untouched.
        let offsets = [1, 4, 4, 6, 9];
        for policy in [Policy::Serial, Policy::Threaded] {
            let d = fill(policy, &offsets, 10);
            assert_eq!(d[0], (usize::MAX, usize::MAX));
            assert_eq!(&d[1..4], &[(0, 0), (0, 1), (0, 2)]);
            assert_eq!(&d[4..6], &[(2, 0), (2, 1)]);
            assert_eq!(&d[6..9], &[(3, 0), (3, 1), (3, 2)]);
            assert_eq!(d[9], (usize::MAX, usize::MAX));
        }
    }

    #[test]
    fn hier_for_visits_every_pair_once() {
        for policy in [Policy::Serial, Policy::Threaded] {
            let hits: Vec<AtomicUsize> = (0..100).map(|_| AtomicUsize::new(0)).collect();
            hier_for(
                policy,
                10,
                |o| o,
                |o, i| {
                    hits[10 * o + i].fetch_add(1, Ordering::Relaxed);
                },
            );
            for o in 0..10 {
                for i in 0..10 {
                    let want = usize::from(i < o);
                    assert_eq!(hits[10 * o + i].load(Ordering::Relaxed), want, "({o},{i})");
                }
            }
        }
    }

    #[test]
    fn no_groups_is_a_no_op() {
        let mut d = [1, 2, 3];
        for policy in [Policy::Serial, Policy::Threaded] {
            for_each_segment(policy, &mut d, &[], |_, _| unreachable!());
            for_each_segment(policy, &mut d, &[2], |_, _| unreachable!());
        }
        assert_eq!(d, [1, 2, 3]);
    }
}
