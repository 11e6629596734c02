//! The history file: one line per output step with time, dt, cycle and the volume integral of
//! every component of every cell-centred variable over the interior of all blocks.
//!
//! Per-block integrals are gathered to rank 0 and summed in gid order, so the numbers do not
//! depend on the number of ranks.

use super::error::OutputError;
use super::gather::on_root;
use super::select::cell_vars;
use super::Snapshot;
use mpi::topology::Communicator;
use std::io::Write;
use std::path::Path;

/// The history file's name, `<problem_id>.<id>.hst`: one file per run, no number.
pub fn file_name(problem_id: &str, id: &str) -> String {
    format!("{problem_id}.{id}.hst")
}

/// Makes `to` the history of a run restarted at `cycle`, so that the continuation appends to
/// the lines of the run it continues: those of `from` (the history beside the restart file;
/// `to` itself when restarting in place, or where `from` is gone), up to `cycle`. Lines of
/// later cycles belong to a continuation this one replaces and are dropped; with neither file
/// there is nothing to continue. `to` is replaced whole (a temporary file renamed), so a
/// failure leaves it as it was.
///
/// A run stopped off its history schedule (wall time, `nlim`) ended with a line for its last
/// step, the restart cycle; that line stays.
pub fn continue_history(from: &Path, to: &Path, cycle: u64) -> Result<(), OutputError> {
    let source = match (from.exists(), to.exists()) {
        (true, _) => from,
        (false, true) => to,
        (false, false) => return Ok(()),
    };
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |cause| OutputError::Io { path, cause }
    };
    let text = std::fs::read_to_string(source).map_err(io(source))?;
    // Column 3 is the cycle; a line that does not parse is kept, not silently lost.
    let later = |l: &str| {
        !l.starts_with('#')
            && l.split_whitespace()
                .nth(2)
                .and_then(|c| c.parse::<u64>().ok())
                .is_some_and(|c| c > cycle)
    };
    let kept: String = text
        .lines()
        .filter(|l| !later(l))
        .flat_map(|l| [l, "\n"])
        .collect();
    let tmp = to.with_extension("hst.tmp");
    std::fs::write(&tmp, kept)
        .and_then(|()| std::fs::rename(&tmp, to))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io(to)(e)
        })
}

/// Appends one line for `snap` to the history file at `path` (writing the header first when
/// the file is new or empty), collectively.
pub fn write_history<C: Communicator>(
    comm: &C,
    snap: &Snapshot,
    path: &Path,
) -> Result<(), OutputError> {
    let vars = cell_vars(snap.fields);
    let nslots = snap.layout.nvar;
    let nvars = snap.fields.iter().count();
    let cfg = snap.mesh.config();
    let ndim = snap.mesh.ndim();
    let g = snap.nghost;
    let lay = snap.layout;
    let integrals = |b: usize| -> Vec<f64> {
        let gid = snap.gids[b];
        let (lo, hi) = snap.mesh.bounds(gid).unwrap_or(([0.0; 3], [0.0; 3]));
        let ncells: usize = cfg.block_nx.iter().product();
        let vol: f64 = (0..3).map(|d| hi[d] - lo[d]).product();
        let dv = vol / ncells as f64;
        let block = &snap.data[b * lay.block_len()..(b + 1) * lay.block_len()];
        let off = |d: usize| if d < ndim { g } else { 0 };
        let mut out = vec![0.0; nslots];
        for v in &vars {
            let alloc = snap.allocated[b * nvars + v.index];
            for c in 0..v.ncomp {
                out[v.slot + c] = if alloc {
                    let mut s = 0.0;
                    for k in 0..cfg.block_nx[2] {
                        for j in 0..cfg.block_nx[1] {
                            let i0 =
                                lay.index_in_block(v.slot + c, [off(0), j + off(1), k + off(2)]);
                            s += block[i0..i0 + cfg.block_nx[0]].iter().sum::<f64>();
                        }
                    }
                    s * dv
                } else {
                    v.default * vol
                };
            }
        }
        out
    };
    let columns: Vec<String> = vars.iter().flat_map(|v| v.component_names()).collect();
    on_root(comm, snap, nslots, integrals, |gathered| {
        let mut totals = vec![0.0; nslots];
        for gid in 0..gathered.nblocks {
            for (t, x) in totals.iter_mut().zip(gathered.block(gid)) {
                *t += x;
            }
        }
        let io = |cause| OutputError::Io {
            path: path.to_path_buf(),
            cause,
        };
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(io)?;
        let mut text = String::new();
        if f.metadata().map_err(io)?.len() == 0 {
            text.push_str("# starhalo history data\n#");
            let heads = ["time", "dt", "cycle"]
                .into_iter()
                .map(str::to_string)
                .chain(columns.iter().cloned());
            for (i, h) in heads.enumerate() {
                text.push_str(&format!(" [{}]={h}", i + 1));
            }
            text.push('\n');
        }
        text.push_str(&format!(
            "{:.14e} {:.14e} {}",
            snap.time, snap.dt, snap.cycle
        ));
        for t in &totals {
            text.push_str(&format!(" {t:.14e}"));
        }
        text.push('\n');
        f.write_all(text.as_bytes()).map_err(io)
    })?;
    Ok(())
}
