//! When an output block writes, and the number of its next file.
//!
//! Parthenon's rules: a `dt` output writes at the first step and then whenever the time
//! reaches its next output time, which then advances past the current time in steps of `dt`;
//! a `dn` output writes every `dn` cycles. The driver adds the final output of a run.

use super::config::{FileNumber, FileType, OutputBlock};

/// The outputs of `blocks` (each with its schedule in `sched`) that write at this `time`
/// and `cycle`, with their file numbers, each schedule advanced: every enabled one when
/// `last` (the final outputs of the last step; a history writes one line for it, on its
/// schedule or not, unless the step has one already), else those due.
pub fn due_outputs(
    blocks: &[OutputBlock],
    sched: &mut [Schedule],
    (time, cycle): (f64, u64),
    last: bool,
) -> Vec<(usize, FileNumber)> {
    let mut due = Vec::new();
    for (i, (o, s)) in blocks.iter().zip(sched).enumerate() {
        let number = if !o.enabled() {
            continue;
        } else if last {
            if o.file_type == FileType::History && s.last_cycle == Some(cycle) {
                continue;
            }
            s.wrote_final(o, cycle)
        } else if s.due(o, time, cycle) {
            s.wrote(o, time, cycle)
        } else {
            continue;
        };
        due.push((i, number));
    }
    due
}

/// The state of one output block across a run (restored from a restart by the driver).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    /// The time at which a `dt` output writes next.
    pub next_time: f64,
    /// The number of the next file.
    pub next_number: u32,
    /// The cycle of the last output written, if known (restart files do not store it: a
    /// restarted run starts at a cycle whose outputs its predecessor wrote).
    pub last_cycle: Option<u64>,
}

impl Schedule {
    /// A schedule whose first `dt` output is due at `start_time`, numbering files from 0.
    pub fn new(start_time: f64) -> Self {
        Self {
            next_time: start_time,
            next_number: 0,
            last_cycle: None,
        }
    }

    /// Whether `block` writes at this `time` and `cycle`.
    pub fn due(&self, block: &OutputBlock, time: f64, cycle: u64) -> bool {
        block.dt.is_some() && time >= self.next_time
            || block.dn.is_some_and(|n| cycle.is_multiple_of(n))
    }

    /// Records an output of `block` at `time` and `cycle` and returns its file number.
    pub fn wrote(&mut self, block: &OutputBlock, time: f64, cycle: u64) -> FileNumber {
        let number = self.take_number(cycle);
        if let Some(dt) = block.dt.filter(|&d| d > 0.0) {
            // Skip every output time already passed (a step longer than dt writes once).
            let behind = ((time - self.next_time) / dt).floor().max(0.0);
            self.next_time += (behind + 1.0) * dt;
        }
        number
    }

    /// Records the final output of `block` at the last step, `cycle`, and returns its number:
    /// `final`, or with `use_final_label: false` the next number. Off the schedule, it moves
    /// no output time, so that a run continued from this step writes every output due.
    pub fn wrote_final(&mut self, block: &OutputBlock, cycle: u64) -> FileNumber {
        if block.final_label {
            self.last_cycle = Some(cycle);
            return FileNumber::Final;
        }
        self.take_number(cycle)
    }

    /// The next file number, for an output written at `cycle`.
    fn take_number(&mut self, cycle: u64) -> FileNumber {
        self.last_cycle = Some(cycle);
        let n = self.next_number;
        self.next_number = self.next_number.saturating_add(1);
        FileNumber::Step(n)
    }
}

#[cfg(test)]
mod tests {
    use super::super::config::FileType;
    use super::*;

    #[test]
    fn dt_outputs_skip_passed_times_and_dn_outputs_count_cycles() {
        let mut b = OutputBlock::new(0, FileType::Hdf5);
        b.dt = Some(0.1);
        let mut s = Schedule::new(0.0);
        assert!(s.due(&b, 0.0, 0));
        assert_eq!(s.wrote(&b, 0.0, 0), FileNumber::Step(0));
        assert!(!s.due(&b, 0.05, 1));
        assert!(s.due(&b, 0.35, 2));
        assert_eq!(s.wrote(&b, 0.35, 2), FileNumber::Step(1));
        assert_eq!(s.last_cycle, Some(2));
        assert!((s.next_time - 0.4).abs() < 1e-12);
        let mut c = OutputBlock::new(1, FileType::History);
        c.dn = Some(3);
        assert!(s.due(&c, 0.0, 6) && !s.due(&c, 0.0, 7));
    }

    #[test]
    fn a_final_output_numbered_on_moves_no_output_time() {
        let mut b = OutputBlock::new(0, FileType::Hdf5);
        b.dt = Some(0.25);
        let mut s = Schedule::new(0.0);
        assert_eq!(s.wrote(&b, 0.0, 0), FileNumber::Step(0));
        assert_eq!(s.wrote_final(&b, 7), FileNumber::Final);
        b.final_label = false;
        assert_eq!(s.wrote_final(&b, 7), FileNumber::Step(1));
        assert_eq!(s.wrote(&b, 0.25, 8), FileNumber::Step(2));
        assert_eq!((s.next_time, s.last_cycle), (0.5, Some(8)));
        // The stop at t = 0.3 leaves the 0.5 output due for a continuation.
        assert_eq!(s.wrote_final(&b, 9), FileNumber::Step(3));
        assert!(s.due(&b, 0.5, 10) && s.next_time == 0.5);
    }
}
