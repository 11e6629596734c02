//! Runs of receive ends whose values lie back to back in one source buffer (a send buffer
//! of this rank, or a coalesced message) and whose segments lie back to back in the receive
//! buffer: one copy moves a run, where a copy per channel would cost a device copy call each
//! when the buffers are in device memory.

use std::ops::Range;

/// Receive ends `ends` whose values are `values` of source `source`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Run {
    /// Which buffer holds the values (a route, for same-rank ends).
    pub source: usize,
    pub values: Range<usize>,
    pub ends: Range<usize>,
}

impl Run {
    /// Takes end `i`, whose values are `values` of `source` and fill its segment, into the
    /// run if they continue it; otherwise returns the run done and starts another with it.
    pub fn push(
        this: &mut Option<Run>,
        source: usize,
        values: Range<usize>,
        i: usize,
    ) -> Option<Run> {
        if let Some(r) = this {
            if r.source == source && r.values.end == values.start && r.ends.end == i {
                r.values.end = values.end;
                r.ends.end = i + 1;
                return None;
            }
        }
        this.replace(Run {
            source,
            values,
            ends: i..i + 1,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ends_back_to_back_in_both_buffers_make_one_run() {
        let mut run = None;
        assert_eq!(Run::push(&mut run, 0, 0..4, 3), None);
        assert_eq!(Run::push(&mut run, 0, 4..6, 4), None);
        // A gap in the values, a skipped end, another source: each ends the run.
        let done = Run::push(&mut run, 0, 7..9, 5).unwrap();
        assert_eq!(
            done,
            Run {
                source: 0,
                values: 0..6,
                ends: 3..5
            }
        );
        let done = Run::push(&mut run, 0, 9..10, 7).unwrap();
        assert_eq!(done.ends, 5..6);
        let done = Run::push(&mut run, 1, 10..12, 8).unwrap();
        assert_eq!(
            done,
            Run {
                source: 0,
                values: 9..10,
                ends: 7..8
            }
        );
        assert_eq!(
            run,
            Some(Run {
                source: 1,
                values: 10..12,
                ends: 8..9
            })
        );
    }
}
