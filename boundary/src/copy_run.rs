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
    /// Every end so far filled its segment, so the next end's values would land at the
    /// start of its own: the run may go on.
    open: bool,
}

impl Run {
    /// Takes end `i`, whose values are `values` of `source` (`fills`: as many as its segment
    /// holds), into the run if they continue it; otherwise returns the run done and starts
    /// another with it.
    pub fn push(
        this: &mut Option<Run>,
        source: usize,
        values: Range<usize>,
        i: usize,
        fills: bool,
    ) -> Option<Run> {
        if let Some(r) = this {
            if r.open && r.source == source && r.values.end == values.start && r.ends.end == i {
                r.values.end = values.end;
                r.ends.end = i + 1;
                r.open = fills;
                return None;
            }
        }
        this.replace(Run {
            source,
            values,
            ends: i..i + 1,
            open: fills,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ends_back_to_back_in_both_buffers_make_one_run() {
        let mut run = None;
        assert_eq!(Run::push(&mut run, 0, 0..4, 3, true), None);
        assert_eq!(Run::push(&mut run, 0, 4..6, 4, true), None);
        // A gap in the values, a skipped end, another source: each ends the run.
        let done = Run::push(&mut run, 0, 7..9, 5, true).unwrap();
        assert_eq!((done.source, done.values, done.ends), (0, 0..6, 3..5));
        let done = Run::push(&mut run, 0, 9..10, 7, true).unwrap();
        assert_eq!(done.ends, 5..6);
        let done = Run::push(&mut run, 1, 10..12, 8, true).unwrap();
        assert_eq!((done.source, done.values, done.ends), (0, 9..10, 7..8));
        // An end short of its segment closes the run it joins: the next one's values would
        // not land at the start of its segment.
        assert_eq!(Run::push(&mut run, 1, 12..13, 9, false), None);
        let done = Run::push(&mut run, 1, 13..15, 10, true).unwrap();
        assert_eq!((done.source, done.values, done.ends), (1, 10..13, 8..10));
        assert_eq!(
            run.map(|r| (r.source, r.values, r.ends)),
            Some((1, 13..15, 10..11))
        );
    }
}
