//! The history file: one line per output step with time, dt, cycle and the volume integral of
//! every component of every cell-centred variable over the interior of all blocks.
//!
//! The integrals are exact sums of `value * cell volume` ([`ExactSum`]) reduced over the
//! ranks, so their bits depend neither on the number of ranks nor on the size of the blocks.

use super::error::OutputError;
use super::gather::{agree, check_snapshot, verdict};
use super::printf::CFormat;
use super::select::cell_vars;
use super::Snapshot;
use mpi::topology::Communicator;
use starhalo_sf::ExactSum;
use std::path::Path;

/// The history file's name, `<problem_id>.<id>.hst`: one file per run, no number.
pub fn file_name(problem_id: &str, id: &str) -> String {
    format!("{problem_id}.{id}.hst")
}

/// Makes `to` the history of a run restarted at `cycle`, so that the continuation appends to
/// the lines of the run it continues: those of `from` (the history beside the restart file;
/// `to` itself when restarting in place, or where `from` is gone), up to `cycle`. Lines of
/// later cycles belong to a continuation this one replaces and are dropped; with neither file
/// there is nothing to continue (a warning says so). `to` is replaced whole (a temporary file renamed), so a
/// failure leaves it as it was.
///
/// A run stopped off its history schedule (wall time, `nlim`) ended with a line for its last
/// step, the restart cycle; that line stays.
///
/// Lines that are neither comments, blank nor whole history lines (numbers, the third a
/// cycle, as many as in the first; bytes that are not UTF-8, say; a line cut short) are kept
/// as they are, not silently lost; a warning names the first of them. Anything but a regular
/// file where the history should be is [`OutputError::NotAFile`].
pub fn continue_history(from: &Path, to: &Path, cycle: u64) -> Result<(), OutputError> {
    let source = match (from.exists(), to.exists()) {
        (true, _) => from,
        (false, true) => to,
        (false, false) => {
            tracing::warn!(
                "{}: no history to continue; this run's starts at cycle {cycle}",
                from.display()
            );
            return Ok(());
        }
    };
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |cause| OutputError::Io { path, cause }
    };
    // A fifo would block the read, a directory fails it: neither is a history.
    if !std::fs::metadata(source).map_err(io(source))?.is_file() {
        return Err(OutputError::NotAFile {
            path: source.to_path_buf(),
        });
    }
    let bytes = std::fs::read(source).map_err(io(source))?;
    let Continued {
        kept,
        foreign,
        lines,
    } = continued(&bytes, cycle);
    if let Some(first) = foreign.first() {
        tracing::warn!(
            "{}:{first}: not a whole history line ({} such in all); kept as written in the continued history",
            source.display(),
            foreign.len(),
        );
    }
    if lines == 0 {
        tracing::warn!(
            "{}: no history lines up to cycle {cycle} to continue",
            source.display()
        );
    }
    super::write_atomically(to, |w| w.write_all(&kept)).map_err(io(to))
}

/// What a continued history keeps of an old one.
#[derive(Debug, PartialEq)]
struct Continued {
    /// The bytes kept: every line but history lines past the restart cycle, each ended.
    kept: Vec<u8>,
    /// Line numbers (from 1) of kept lines that are neither blank, comments nor whole
    /// history lines.
    foreign: Vec<usize>,
    /// History lines kept.
    lines: usize,
}

/// The lines of the history `bytes` a run restarted at `cycle` continues.
fn continued(bytes: &[u8], cycle: u64) -> Continued {
    let mut out = Continued {
        kept: Vec::with_capacity(bytes.len() + 1),
        foreign: Vec::new(),
        lines: 0,
    };
    // Every history line has the columns of the first: one with fewer was cut short.
    let mut columns = None;
    for (n, line) in bytes.split_inclusive(|&b| b == b'\n').enumerate() {
        let text = std::str::from_utf8(line).ok().map(str::trim);
        let line_cycle = text.and_then(history_cycle);
        // Lines of later cycles go, even cut short (a run that died writing one).
        if line_cycle.is_some_and(|c| c > cycle) {
            continue;
        }
        out.lines += usize::from(line_cycle.is_some());
        let words = text.map_or(0, |t| t.split_whitespace().count());
        let whole = line_cycle.is_some() && *columns.get_or_insert(words) == words;
        // The writer ends every line: one without its newline is where the file was cut.
        let cut = !line.ends_with(b"\n");
        let blank_or_comment = text.is_some_and(|t| t.is_empty() || t.starts_with('#'));
        if cut || !whole && !blank_or_comment {
            out.foreign.push(n + 1);
        }
        out.kept.extend_from_slice(line);
        if cut {
            out.kept.push(b'\n');
        }
    }
    out
}

/// The cycle of a history line: numbers only, the third the cycle.
fn history_cycle(line: &str) -> Option<u64> {
    let mut words = line.split_whitespace();
    let cycle = words.clone().nth(2)?.parse().ok()?;
    words.all(|w| w.parse::<f64>().is_ok()).then_some(cycle)
}

/// Appends one line for `snap` to the history file at `path` (writing the header first when
/// the file is new or empty), collectively.
///
/// Time, dt and the integrals print as `format` says (a C format such as Parthenon's
/// `%12.5e`), or with every digit (`{:.14e}`) without one; the cycle as an integer.
pub fn write_history<C: Communicator>(
    comm: &C,
    snap: &Snapshot,
    format: Option<&CFormat>,
    path: &Path,
) -> Result<(), OutputError> {
    let vars = cell_vars(snap.fields);
    agree(comm, check_snapshot(snap))?;
    let nvars = snap.fields.iter().count();
    let cfg = snap.mesh.config();
    let ndim = snap.mesh.ndim();
    let off = |d: usize| if d < ndim { snap.nghost } else { 0 };
    let [nx, ny, nz] = cfg.block_nx;
    let mut totals = vec![ExactSum::default(); snap.layout.nvar];
    for v in &vars {
        for c in 0..v.ncomp {
            let slot = v.slot + c;
            let total = &mut totals[slot];
            let allocated = |b: usize| snap.allocated[b * nvars + v.index];
            let dv = |b: usize| snap.mesh.cell_volume(snap.gids[b]).unwrap_or(0.0);
            // Every interior cell of every block; an unallocated block counts as holding its
            // default value.
            for b in (0..snap.gids.len()).filter(|&b| !allocated(b)) {
                total.extend(std::iter::repeat_n(v.default * dv(b), nx * ny * nz));
            }
            let rows = (0..snap.gids.len())
                .filter(|&b| allocated(b))
                .flat_map(|b| {
                    let block = snap.block(b);
                    let dv = dv(b);
                    (0..nz * ny).flat_map(move |row| {
                        let [j, k] = [row % ny, row / ny];
                        let i0 = snap
                            .layout
                            .index_in_block(slot, [off(0), j + off(1), k + off(2)]);
                        block[i0..i0 + nx].iter().map(move |u| u * dv)
                    })
                });
            total.extend(rows);
        }
    }
    ExactSum::all_reduce(comm, &mut totals);
    let columns: Vec<String> = vars.iter().flat_map(|v| v.component_names()).collect();
    let write = || {
        let io = |cause| OutputError::Io {
            path: path.to_path_buf(),
            cause,
        };
        let mut header = String::from("# starhalo history data\n#");
        let heads = ["time", "dt", "cycle"]
            .into_iter()
            .map(str::to_string)
            .chain(columns.iter().cloned());
        for (i, h) in heads.enumerate() {
            header.push_str(&format!(" [{}]={h}", i + 1));
        }
        header.push('\n');
        let real = |x: f64| format.map_or_else(|| format!("{x:.14e}"), |f| f.format(x));
        let mut line = format!("{} {} {}", real(snap.time), real(snap.dt), snap.cycle);
        for t in &totals {
            line.push(' ');
            line.push_str(&real(t.value()));
        }
        line.push('\n');
        super::append_whole(path, &header, &line).map_err(io)
    };
    verdict(comm, (comm.rank() == 0).then(write))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_continued_history_keeps_lines_up_to_the_restart_cycle() {
        let dir = std::env::temp_dir().join(format!("starhalo-hst-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (from, to) = (dir.join("from.hst"), dir.join("to.hst"));
        let kept = b"# time dt cycle q\n0.0 0.1 0 1.0\r\n\n  # note\n0.1 0.1 1 1.0\ngarbage \xff\n0.2 0.1 2 1.0";
        let text = [&kept[..], b"\n0.3 0.1 3 1\n"].concat();
        std::fs::write(&from, text).unwrap();
        std::fs::write(&to, "stale\n").unwrap();
        continue_history(&from, &to, 2).unwrap();
        // Kept byte for byte (a missing last newline added), later cycles dropped.
        assert_eq!(std::fs::read(&to).unwrap(), [&kept[..], b"\n"].concat());
        // Nothing to continue: nothing is written.
        let none = dir.join("none.hst");
        continue_history(&none, &none, 2).unwrap();
        assert!(!none.exists());
        // Anything but a regular file is an error, not a read that blocks (a fifo).
        let e = continue_history(&dir, &to, 2).unwrap_err();
        assert!(matches!(e, OutputError::NotAFile { .. }), "{e}");
        assert_eq!(history_cycle("0.3 0.1 3 1"), Some(3));
        assert_eq!(history_cycle("0.3 0.1 3 x"), None, "not all numbers");
        assert_eq!(
            history_cycle("0.3 0.1 3.5 1"),
            None,
            "the cycle is an integer"
        );
        assert_eq!(history_cycle("0.3 0.1"), None, "truncated");
        // A line cut short (fewer columns, or no newline at the end) is kept and named.
        let c = continued(b"# h\n0.0 0.1 0 1.0 2.0\n0.1 0.1 1 1.0\n0.2 0.1 2 1.0 2", 5);
        assert_eq!(c.foreign, [3, 4]);
        assert_eq!(c.lines, 3, "the header is not a history line");
        assert!(c.kept.ends_with(b"0.1 0.1 1 1.0\n0.2 0.1 2 1.0 2\n"));
        // Lines after the restart cycle go, whole or cut short.
        let c = continued(b"0.0 0.1 0 1 2\n0.1 0.1 1 1 2\n0.2 0.1 2 1", 1);
        assert_eq!(c.kept, b"0.0 0.1 0 1 2\n0.1 0.1 1 1 2\n");
        assert_eq!(c.foreign, [0usize; 0]);
        let c = continued(b"0.0 0.1 0 1 2\n0.1 0.1 1 1\n0.2 0.1 2 1 2\n", 1);
        assert_eq!(c.kept, b"0.0 0.1 0 1 2\n0.1 0.1 1 1\n");
        assert_eq!(c.foreign, [2]);
        // Only a header (or nothing): no history lines.
        assert_eq!(continued(b"# h\n", 5).lines, 0);
        assert_eq!(continued(b"", 5).foreign, [0usize; 0]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
