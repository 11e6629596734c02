//! Outputs: Parthenon-compatible `.phdf` files with an `.xdmf` beside each, restart files
//! (`.rhdf`), a history file (`.hst`) and PNG slices.
//!
//! Every writer is collective: each rank calls it with its own [`Snapshot`]; the block data are
//! gathered to rank 0 ([`gather`]), rank 0 writes, and its verdict is broadcast so that an I/O
//! error on rank 0 is an error on every rank and no rank is left waiting.
//!
//! - [`config`]: an output block (`parthenon/outputN`) and the file names;
//! - [`gather`]: the collective part (agreement on errors, block data to rank 0);
//! - [`select`]: which variables an output holds and how their values are read from a block;
//! - [`phdf`]: the HDF5 writer shared by `.phdf` and `.rhdf` files;
//! - [`xdmf`]: the XDMF index of a `.phdf` file;
//! - [`restart`]: restart files and their reader;
//! - [`schedule`]: when an output block writes and its file numbers;
//! - [`hst`]: the history file, its numbers as [`printf`] formats them;
//! - [`png`]: slices rendered to PNG.

// Geometry code indexes several per-direction arrays with one direction index.
#![allow(clippy::needless_range_loop)]

pub mod config;
pub mod error;
pub mod gather;
pub mod hst;
pub mod phdf;
pub mod png;
pub mod printf;
pub mod restart;
pub mod schedule;
pub mod seal;
pub mod select;
pub mod xdmf;

pub use config::{longest_file_name, FileNumber, FileType, OutputBlock, MAX_NAME_PART};
pub use error::OutputError;
pub use restart::{read_restart, RestartData};
pub use schedule::Schedule;

use mpi::topology::Communicator;
use starhalo_boundary::FieldLayout;
use starhalo_mesh::field::Fields;
use starhalo_mesh::Mesh;
use std::path::{Path, PathBuf};

/// `path` with `.tmp` appended: where a file is written before it takes its name.
pub fn tmp_path(path: &Path) -> PathBuf {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    PathBuf::from(tmp)
}

/// Writes what `write` writes to `path` through a temporary file renamed over it, so that a
/// failure (a full disk) leaves the old file or none, never a truncated one under the final
/// name. The writer is buffered, so large files stream out without a copy in memory.
pub fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let tmp = tmp_path(path);
    writable_file(&tmp)?;
    std::fs::File::create(&tmp)
        .and_then(|f| {
            let mut w = std::io::BufWriter::new(f);
            write(&mut w)?;
            std::io::Write::flush(&mut w)
        })
        .and_then(|()| std::fs::rename(&tmp, path))
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
}

/// Refuses a `path` that is a FIFO or a socket: opening one to write waits until some reader
/// comes, which may be never.
pub(crate) fn writable_file(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::FileTypeExt as _;
    match std::fs::metadata(path).map(|m| m.file_type()) {
        Ok(t) if t.is_fifo() || t.is_socket() => Err(std::io::Error::other(format!(
            "{} is a FIFO or a socket, not a regular file",
            path.display()
        ))),
        _ => Ok(()),
    }
}

/// Appends `text` to `path`, after `header` when the file is new or empty, all or nothing: a
/// failed write (a full disk) cuts the file back to what it held, so it never ends in a
/// partial line.
pub fn append_whole(path: &Path, header: &str, text: &str) -> std::io::Result<()> {
    writable_file(path)?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let len = f.metadata()?.len();
    let all = if len == 0 {
        format!("{header}{text}")
    } else {
        text.to_string()
    };
    std::io::Write::write_all(&mut f, all.as_bytes()).inspect_err(|_| {
        let _ = f.set_len(len);
    })
}

/// The value of a problem parameter, written under `/Params` as `<package>/<key>`.
#[derive(Debug, Clone, PartialEq)]
pub enum ParamValue {
    /// An integer (written as int64).
    Int(i64),
    /// A real (written as float64).
    Real(f64),
    /// A flag (written as HDF5's boolean enum, which h5py reads as `numpy.bool_`).
    Bool(bool),
    /// A string (variable-length).
    Str(String),
}

/// One rank's view of the simulation state at an output step.
///
/// Only cell-centred variables are stored in `data`; variables of other centrings are skipped
/// by every writer.
#[derive(Debug, Clone, Copy)]
pub struct Snapshot<'a> {
    /// The global mesh (every rank holds all of it).
    pub mesh: &'a Mesh,
    /// Registered variables, in registration order.
    pub fields: &'a Fields,
    /// Per block: `nvar` slots (the sum of `ncomp` over the cell-centred variables, in
    /// registration order), each a row-major `[k][j][i]` array of `dims` points including
    /// `nghost` ghost layers along active directions.
    pub layout: FieldLayout,
    /// Ghost layers along active directions.
    pub nghost: usize,
    /// This rank's blocks, ascending gid; data block `b` belongs to `gids[b]`.
    pub gids: &'a [usize],
    /// `gids.len() * stride` values: block `b`'s `layout.block_len()` values start at
    /// `b * stride`.
    pub data: &'a [f64],
    /// Values from one block's start to the next in `data`: at least `layout.block_len()`,
    /// more where the storage keeps other arrays per block (coarse buffers), which writers skip.
    pub stride: usize,
    /// `gids.len() * fields.iter().count()`: entry `b * nvars + v` says whether variable `v`
    /// (registration order, all centrings) is allocated on block `b`; an unallocated variable
    /// reads as its default value.
    pub allocated: &'a [bool],
    /// Cycle number.
    pub cycle: u64,
    /// Simulation time.
    pub time: f64,
    /// Time step.
    pub dt: f64,
    /// Wall-clock seconds since the run started.
    pub wall_time: f64,
    /// The resolved input deck text.
    pub deck: &'a str,
    /// Problem parameters written under `/Params` (may be empty).
    pub params: &'a [(String, ParamValue)],
}

impl Snapshot<'_> {
    /// The values of local block `b` (in `layout`).
    pub fn block(&self, b: usize) -> &[f64] {
        &self.data[b * self.stride..][..self.layout.block_len()]
    }
}

/// Checks at set-up what `block` can only find out when it writes: that the variables it names
/// exist and are cell-centred, and that a PNG slice fits the mesh. A run calls this before its
/// first step so that a bad output block is bad input, not a failure at the first write.
pub fn check_block(block: &OutputBlock, mesh: &Mesh, fields: &Fields) -> Result<(), OutputError> {
    match block.file_type {
        FileType::Hdf5 => select::select(
            fields,
            block.variables.as_deref(),
            &format!("{}/variables", block.block),
        )
        .map(drop),
        FileType::Png => png::slice_of(mesh, fields, block).map(drop),
        FileType::Restart | FileType::History => Ok(()),
    }
}

/// Writes what `block` asks for at output number `number` into `dir`, collectively, and
/// returns the path of the main file written (the same on every rank).
///
/// `problem_id` is `parthenon/job/problem_id`. A history output appends one line to its file
/// and ignores `number`.
pub fn write_output<C: Communicator>(
    comm: &C,
    snap: &Snapshot,
    block: &OutputBlock,
    problem_id: &str,
    dir: &Path,
    number: FileNumber,
) -> Result<PathBuf, OutputError> {
    match block.file_type {
        FileType::Hdf5 => {
            let path = dir.join(block.file_name(problem_id, number, "phdf"));
            phdf::write_phdf(comm, snap, block, &path)?;
            Ok(path)
        }
        FileType::Restart => {
            let path = dir.join(block.file_name(problem_id, number, "rhdf"));
            restart::write_restart(comm, snap, block.compression, &path)?;
            Ok(path)
        }
        FileType::History => {
            let path = dir.join(hst::file_name(problem_id, &block.id));
            hst::write_history(comm, snap, block.data_format.as_ref(), &path)?;
            Ok(path)
        }
        FileType::Png => {
            let path = dir.join(block.file_name(problem_id, number, "png"));
            png::write_png(comm, snap, block, &path)?;
            Ok(path)
        }
    }
}

#[cfg(test)]
mod write_tests {
    use super::*;

    #[test]
    fn an_atomic_write_that_fails_leaves_nothing_behind() {
        let dir = std::env::temp_dir().join(format!("starhalo-atomic-{}", std::process::id()));
        let taken = dir.join("taken");
        std::fs::create_dir_all(taken.join("inside")).unwrap();
        // The final name is a directory: the rename fails, and the temporary file goes.
        assert!(write_atomically(&taken, |w| w.write_all(b"data")).is_err());
        assert!(!tmp_path(&taken).exists());
        assert!(taken.join("inside").is_dir());
        let file = dir.join("file");
        write_atomically(&file, |w| w.write_all(b"one")).unwrap();
        write_atomically(&file, |w| w.write_all(b"two")).unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), b"two");
        assert!(!tmp_path(&file).exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Opening a FIFO to write would wait for a reader: both writers refuse one at once.
    #[test]
    fn a_fifo_where_a_file_goes_is_refused_not_waited_on() {
        let dir = std::env::temp_dir().join(format!("starhalo-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = |p: &Path| {
            let made = std::process::Command::new("mkfifo").arg(p).status();
            assert!(made.unwrap().success());
        };
        let hst = dir.join("a.hst");
        fifo(&hst);
        let e = append_whole(&hst, "# header\n", "1 2\n").unwrap_err();
        let fifo_message =
            |p: &Path| format!("{} is a FIFO or a socket, not a regular file", p.display());
        assert_eq!(e.to_string(), fifo_message(&hst));
        let png = dir.join("a.png");
        fifo(&tmp_path(&png));
        let e = write_atomically(&png, |w| w.write_all(b"data")).unwrap_err();
        assert_eq!(e.to_string(), fifo_message(&tmp_path(&png)));
        assert!(tmp_path(&png).exists(), "not the writer's to remove");
        // A FIFO under the final name is replaced, as any earlier file is.
        std::fs::remove_file(tmp_path(&png)).unwrap();
        fifo(&png);
        write_atomically(&png, |w| w.write_all(b"data")).unwrap();
        assert_eq!(std::fs::read(&png).unwrap(), b"data");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
