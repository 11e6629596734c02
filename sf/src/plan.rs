//! Pack plans: the cheapest description of a list of indices, found once at set-up.

use std::fmt;

/// How a list of unit indices is stored, from cheapest to most general.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PackPlan {
    /// `start..start + len`: MPI can read or write the user's array in place.
    Contiguous { start: usize, len: usize },
    /// A 3-D box `start + sy*k + sx*j + i` for `i < dx, j < dy, k < dz` (sub-block of a
    /// row-major array: a face, an edge or the interior of a structured block).
    Strided {
        start: usize,
        dx: usize,
        dy: usize,
        dz: usize,
        sx: usize,
        sy: usize,
    },
    /// Anything else, index by index.
    List(Vec<usize>),
}

/// A pack plan and what set-up learnt about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The indices.
    pub kind: PackPlan,
    /// True when an index occurs more than once (unpacking needs atomics on a GPU).
    pub duplicates: bool,
}

impl Plan {
    /// Analyses `idx` and picks the cheapest plan that reproduces it exactly, in order.
    ///
    /// ```
    /// use starhalo_sf::{PackPlan, Plan};
    /// // A 2x2x2 box in an 4x4x4 array starting at (1,1,1).
    /// let idx: Vec<usize> = [21, 22, 25, 26, 37, 38, 41, 42].into();
    /// let p = Plan::new(&idx);
    /// assert_eq!(p.kind, PackPlan::Strided { start: 21, dx: 2, dy: 2, dz: 2, sx: 4, sy: 16 });
    /// assert_eq!(p.iter().collect::<Vec<_>>(), idx);
    /// ```
    pub fn new(idx: &[usize]) -> Self {
        if let Some(kind) = contiguous(idx).or_else(|| strided(idx)) {
            return Plan {
                kind,
                duplicates: false,
            };
        }
        let mut sorted = idx.to_vec();
        sorted.sort_unstable();
        let duplicates = sorted.windows(2).any(|w| w[0] == w[1]);
        Plan {
            kind: PackPlan::List(idx.to_vec()),
            duplicates,
        }
    }

    /// Number of indices.
    pub fn len(&self) -> usize {
        match &self.kind {
            PackPlan::Contiguous { len, .. } => *len,
            PackPlan::Strided { dx, dy, dz, .. } => dx * dy * dz,
            PackPlan::List(l) => l.len(),
        }
    }

    /// True when the plan has no index.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The first index of a contiguous plan.
    pub fn contiguous_start(&self) -> Option<usize> {
        match self.kind {
            PackPlan::Contiguous { start, .. } => Some(start),
            _ => None,
        }
    }

    /// The indices in order.
    pub fn iter(&self) -> PlanIter<'_> {
        PlanIter {
            rows: self.rows(),
            at: 0,
            end: 0,
            left: self.len(),
        }
    }

    /// The indices in order as maximal runs `(start, len)` of consecutive ones, so that
    /// packing moves slices: one for a contiguous plan, a row at a time for a strided one,
    /// and for a list what its neighbours in it allow.
    ///
    /// ```
    /// use starhalo_sf::Plan;
    /// let p = Plan::new(&[7, 8, 9, 3, 0, 1]);
    /// assert_eq!(p.runs().collect::<Vec<_>>(), [(7, 3), (3, 1), (0, 2)]);
    /// ```
    pub fn runs(&self) -> Runs<'_> {
        Runs {
            rows: self.rows(),
            next: None,
        }
    }

    /// A box's rows, or a list's indices one by one.
    fn rows(&self) -> Rows<'_> {
        match &self.kind {
            PackPlan::Contiguous { start, len } => Rows::Strided {
                start: *start,
                dx: *len,
                dy: 1,
                sx: 0,
                sy: 0,
                j: 0,
                k: 0,
                rows: usize::from(*len > 0),
            },
            PackPlan::Strided {
                start,
                dx,
                dy,
                dz,
                sx,
                sy,
            } => Rows::Strided {
                start: *start,
                dx: *dx,
                dy: *dy,
                sx: *sx,
                sy: *sy,
                j: 0,
                k: 0,
                rows: dy * dz,
            },
            PackPlan::List(l) => Rows::List(l.iter()),
        }
    }
}

/// Iterator over a plan's runs of consecutive indices ([`Plan::runs`]).
pub struct Runs<'a> {
    rows: Rows<'a>,
    /// The run read ahead while extending the last one.
    next: Option<(usize, usize)>,
}

/// A plan's runs before neighbours are joined: a box's rows or a list's single indices.
enum Rows<'a> {
    /// Rows of `dx` at `start + k sy + j sx`; `(j, k)` is the next, `rows` how many are left.
    Strided {
        start: usize,
        dx: usize,
        dy: usize,
        sx: usize,
        sy: usize,
        j: usize,
        k: usize,
        rows: usize,
    },
    List(std::slice::Iter<'a, usize>),
}

impl Iterator for Rows<'_> {
    type Item = (usize, usize);
    #[inline]
    fn next(&mut self) -> Option<(usize, usize)> {
        match self {
            Rows::Strided {
                start,
                dx,
                dy,
                sx,
                sy,
                j,
                k,
                rows,
            } => {
                if *rows == 0 {
                    return None;
                }
                let row = (*start + *k * *sy + *j * *sx, *dx);
                *rows -= 1;
                *j += 1;
                if *j == *dy {
                    (*j, *k) = (0, *k + 1);
                }
                Some(row)
            }
            Rows::List(it) => it.next().map(|&i| (i, 1)),
        }
    }
}

impl Iterator for Runs<'_> {
    type Item = (usize, usize);
    #[inline]
    fn next(&mut self) -> Option<(usize, usize)> {
        let (start, mut len) = self.next.take().or_else(|| self.rows.next())?;
        for (s, l) in self.rows.by_ref() {
            if s != start + len {
                self.next = Some((s, l));
                break;
            }
            len += l;
        }
        Some((start, len))
    }
}

/// Iterator over a plan's indices: along each row, then the next.
pub struct PlanIter<'a> {
    rows: Rows<'a>,
    /// The next index of the current row, and its end.
    at: usize,
    end: usize,
    left: usize,
}

impl Iterator for PlanIter<'_> {
    type Item = usize;
    #[inline]
    fn next(&mut self) -> Option<usize> {
        if self.left == 0 {
            return None;
        }
        while self.at == self.end {
            let (start, len) = self.rows.next()?;
            (self.at, self.end) = (start, start + len);
        }
        self.left -= 1;
        self.at += 1;
        Some(self.at - 1)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for PlanIter<'_> {}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            PackPlan::Contiguous { start, len } => {
                write!(f, "contiguous [{start}, {})", start + len)
            }
            PackPlan::Strided {
                start,
                dx,
                dy,
                dz,
                sx,
                sy,
            } => write!(
                f,
                "strided start {start} box {dx}x{dy}x{dz} strides {sx},{sy}"
            ),
            PackPlan::List(l) => {
                write!(f, "list of {}", l.len())?;
                if self.duplicates {
                    f.write_str(" with duplicates")?;
                }
                Ok(())
            }
        }
    }
}

fn contiguous(idx: &[usize]) -> Option<PackPlan> {
    let start = idx.first().copied().unwrap_or(0);
    let ok = idx.iter().enumerate().all(|(k, &v)| v == start + k);
    ok.then_some(PackPlan::Contiguous {
        start,
        len: idx.len(),
    })
}

/// Recognises a 3-D box with non-overlapping rows and planes (so no duplicates).
fn strided(idx: &[usize]) -> Option<PackPlan> {
    let start = *idx.first()?;
    let dx = idx
        .iter()
        .enumerate()
        .take_while(|&(k, &v)| v == start + k)
        .count();
    if !idx.len().is_multiple_of(dx) || idx.len() == dx {
        return None;
    }
    let rows: Vec<usize> = idx.iter().step_by(dx).copied().collect();
    let sx = rows[1].checked_sub(start).filter(|&s| s >= dx)?;
    let dy = rows
        .iter()
        .enumerate()
        .take_while(|&(j, &r)| r == start + j * sx)
        .count();
    if !rows.len().is_multiple_of(dy) {
        return None;
    }
    let dz = rows.len() / dy;
    let sy = if dz > 1 {
        rows[dy].checked_sub(start).filter(|&s| s >= dy * sx)?
    } else {
        dy * sx
    };
    let kind = PackPlan::Strided {
        start,
        dx,
        dy,
        dz,
        sx,
        sy,
    };
    let plan = Plan {
        kind,
        duplicates: false,
    };
    plan.iter().eq(idx.iter().copied()).then_some(plan.kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn contiguous_and_empty() {
        assert_eq!(
            Plan::new(&[4, 5, 6]).kind,
            PackPlan::Contiguous { start: 4, len: 3 }
        );
        assert_eq!(
            Plan::new(&[]).kind,
            PackPlan::Contiguous { start: 0, len: 0 }
        );
        assert_eq!(Plan::new(&[9]).contiguous_start(), Some(9));
    }

    #[test]
    fn strided_faces_of_a_block() {
        // Interior part (j in 1..3) of the x-face i = 4 of a 5x4x3 array: 20*k + 5*j + 4.
        let face = |js: std::ops::Range<usize>| -> Vec<usize> {
            (0..3)
                .flat_map(|k| js.clone().map(move |j| 20 * k + 5 * j + 4))
                .collect()
        };
        let idx = face(1..3);
        let p = Plan::new(&idx);
        assert_eq!(
            p.kind,
            PackPlan::Strided {
                start: 9,
                dx: 1,
                dy: 2,
                dz: 3,
                sx: 5,
                sy: 20
            }
        );
        assert!(!p.duplicates);
        assert!(p.iter().eq(idx.iter().copied()));
        // The whole face has one row stride throughout, so it collapses to a 2-D box.
        let idx = face(0..4);
        let p = Plan::new(&idx);
        assert!(
            matches!(
                p.kind,
                PackPlan::Strided {
                    dx: 1,
                    dy: 12,
                    dz: 1,
                    sx: 5,
                    ..
                }
            ),
            "{p}"
        );
        assert!(p.iter().eq(idx.iter().copied()));
    }

    #[test]
    fn irregular_and_duplicates_become_lists() {
        let p = Plan::new(&[0, 1, 5, 6, 7]);
        assert!(matches!(p.kind, PackPlan::List(_)));
        assert!(!p.duplicates);
        let p = Plan::new(&[3, 1, 3]);
        assert!(p.duplicates);
        // Overlapping rows would be a "box" with duplicates: must not be strided.
        let p = Plan::new(&[0, 1, 2, 1, 2, 3]);
        assert!(matches!(p.kind, PackPlan::List(_)) && p.duplicates);
    }

    /// The runs of a plan, expanded, are its indices.
    fn expand(p: &Plan) -> Vec<usize> {
        p.runs().flat_map(|(s, l)| s..s + l).collect()
    }

    #[test]
    fn runs_are_rows_and_joined_neighbours() {
        // A box of two rows of 4: a run per row.
        let idx = [10, 11, 12, 13, 30, 31, 32, 33];
        let p = Plan::new(&idx);
        assert!(matches!(p.kind, PackPlan::Strided { .. }), "{p}");
        assert_eq!(p.runs().collect::<Vec<_>>(), [(10, 4), (30, 4)]);
        assert_eq!(Plan::new(&[]).runs().count(), 0);
        assert_eq!(Plan::new(&[4, 5, 6]).runs().collect::<Vec<_>>(), [(4, 3)]);
        // A list's consecutive neighbours join; a repeat starts a new run.
        let p = Plan::new(&[5, 5, 6, 2, 8, 9, 10]);
        assert!(matches!(p.kind, PackPlan::List(_)), "{p}");
        let runs = [(5, 1), (5, 2), (2, 1), (8, 3)];
        assert_eq!(p.runs().collect::<Vec<_>>(), runs);
    }

    #[test]
    fn every_plan_reproduces_its_indices() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for _ in 0..2000 {
            let n = rng.gen_range(0..40);
            let idx: Vec<usize> = if rng.gen_bool(0.5) {
                let (dx, dy, dz) = (
                    rng.gen_range(1..4),
                    rng.gen_range(1..4),
                    rng.gen_range(1..4),
                );
                let (sx, sy, s0) = (dx + rng.gen_range(0..3), 0, rng.gen_range(0..5));
                let sy = sy + dy * sx + rng.gen_range(0..3);
                (0..dz)
                    .flat_map(|k| {
                        (0..dy).flat_map(move |j| (0..dx).map(move |i| s0 + k * sy + j * sx + i))
                    })
                    .collect()
            } else {
                (0..n).map(|_| rng.gen_range(0..20)).collect()
            };
            let p = Plan::new(&idx);
            assert!(p.iter().eq(idx.iter().copied()), "{idx:?} -> {p}");
            assert_eq!(expand(&p), idx, "{p}");
            let mut s = idx.clone();
            s.sort_unstable();
            s.dedup();
            assert_eq!(p.duplicates, s.len() != idx.len(), "{idx:?}");
        }
    }
}
