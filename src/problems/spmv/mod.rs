//! `spmv`: a distributed sparse matrix-vector product over a star forest (PETSc's MatMult
//! and MatMultTranspose), and conjugate gradients on top of it.
//!
//! The matrix comes from a Matrix Market file (`spmv/matrix`) or a generator
//! (`spmv/generate: laplace2d | laplace3d` with grid size `spmv/n`). With the test vector
//! `x_i = 1 + (i mod 7)/8` the run computes `y = A x` and `z = A^T x`, checks both against
//! the serial products on rank 0 (`spmv/check`), and with `spmv/solver: cg` solves
//! `A u = y`, whose exact solution is `x`. Results go to `<problem_id>-spmv.dat`: `y` is the
//! same bit for bit on any number of ranks (rows are summed in column order), and so is CG:
//! its dot products are exact sums reduced over the ranks ([`starhalo_sf::ExactSum`]).

mod cg;
mod dist;
mod matrix;
mod mtx;

use super::{Problem, ProblemInfo};
use crate::comm::gather_bytes;
use crate::deck::Deck;
use crate::exit::bad_input;
use crate::run::collective::max_f64;
use crate::run::stats::{CommTimer, Stop, Summary};
use crate::run::RunContext;
use anyhow::{bail, Context as _, Result};
use dist::{row_starts, DistMatrix};
use matrix::{Csr, Generator, Triplets};
use mpi::topology::Communicator;
use std::fmt::Write as _;
use std::ops::Range;

const BLOCK: &str = "spmv";

/// The driver's entry for this problem.
pub const INFO: ProblemInfo = ProblemInfo {
    name: "spmv",
    block: BLOCK,
    restarts: false,
    gpu: false,
    setup,
};

/// Largest matrix accepted (rows), so that a typo cannot ask for terabytes.
const MAX_ROWS: usize = 1 << 26;

/// Where the matrix comes from.
enum Source {
    Generated { generator: Generator, n: usize },
    File { name: String, triplets: Triplets },
}

impl Source {
    fn size(&self) -> usize {
        match self {
            // Checked against MAX_ROWS in setup.
            Source::Generated { generator, n } => generator.size(*n).unwrap_or(0),
            Source::File { triplets, .. } => triplets.n,
        }
    }

    fn rows(&self, rows: Range<usize>) -> Csr {
        match self {
            Source::Generated { generator, n } => generator.rows(*n, rows),
            Source::File { triplets, .. } => triplets.rows(rows),
        }
    }

    fn describe(&self) -> String {
        match self {
            Source::Generated { generator, n } => format!("{} n={n}", generator.name()),
            Source::File { name, .. } => name.clone(),
        }
    }
}

struct Spmv {
    source: Source,
    cg: bool,
    tol: f64,
    max_iters: u64,
    check: bool,
}

fn setup(deck: &Deck, _ctx: &RunContext) -> Result<Box<dyn Problem>> {
    let source = match (deck.get_path(BLOCK, "matrix")?, deck.has(BLOCK, "generate")) {
        (Some(_), true) => {
            return Err(deck
                .invalid(BLOCK, "generate", "give spmv/matrix or spmv/generate, not both")
                .into())
        }
        (Some(path), false) => {
            let name = path.display().to_string();
            let text = crate::input_file::read_text(&path).map_err(|e| {
                deck.invalid(BLOCK, "matrix", format!("cannot read {name}: {e}"))
            })?;
            crate::input_file::note_read(&path, crc32fast::hash(text.as_bytes()));
            let triplets = mtx::parse(&text, &name, MAX_ROWS)
                .map_err(|e| deck.invalid(BLOCK, "matrix", e.to_string()))?;
            Source::File { name, triplets }
        }
        (None, true) => {
            let generator = match deck.get_str(BLOCK, "generate")?.as_str() {
                "laplace2d" => Generator::Laplace2d,
                "laplace3d" => Generator::Laplace3d,
                other => {
                    return Err(deck
                        .invalid(
                            BLOCK,
                            "generate",
                            format!("unknown generator '{other}' (known: laplace2d, laplace3d)"),
                        )
                        .into())
                }
            };
            let n = deck.get_usize_or(BLOCK, "n", 16)?;
            if n == 0 || generator.size(n).is_none_or(|s| s > MAX_ROWS) {
                return Err(deck
                    .invalid(BLOCK, "n", format!("must be at least 1 and give at most {MAX_ROWS} rows"))
                    .into());
            }
            Source::Generated { generator, n }
        }
        (None, false) => {
            return Err(bad_input!(
                "missing required key spmv/matrix (a Matrix Market file) or spmv/generate (laplace2d or laplace3d) in {}",
                deck.file()
            ))
        }
    };
    let cg = match deck.get_str_or(BLOCK, "solver", "cg")?.as_str() {
        "cg" => true,
        "none" => false,
        other => {
            return Err(deck
                .invalid(
                    BLOCK,
                    "solver",
                    format!("unknown solver '{other}' (known: cg, none)"),
                )
                .into())
        }
    };
    if let (true, Source::File { name, triplets }) = (cg, &source) {
        // CG on a nonsymmetric matrix runs to max_iters or breaks down with a misleading
        // message. The generators' matrices are symmetric by construction.
        if let Some(((i, j, v), mirror)) = triplets.asymmetry() {
            return Err(deck
                .invalid(
                    BLOCK,
                    "solver",
                    format!(
                        "cg needs a symmetric matrix, and {name} is not: entry ({}, {}) is {v:e}, \
                         entry ({}, {}) {mirror:e}; use solver: none for the products",
                        i + 1,
                        j + 1,
                        j + 1,
                        i + 1
                    ),
                )
                .into());
        }
        // Positive definite needs a positive diagonal (an all-zero matrix "converged" at once
        // to the zero vector).
        if let Some((i, v)) = triplets.nonpositive_diagonal() {
            return Err(deck
                .invalid(
                    BLOCK,
                    "solver",
                    format!(
                        "cg needs a positive definite matrix, and {name} is not: its diagonal \
                         entry ({row}, {row}) is {v:e}; use solver: none for the products",
                        row = i + 1
                    ),
                )
                .into());
        }
    }
    let tol = deck.get_nonneg_f64_or(BLOCK, "tol", 1e-10)?;
    let max_iters = deck.get_usize_or(BLOCK, "max_iters", 1000)? as u64;
    let check = deck.get_bool_or(BLOCK, "check", true)?;
    Ok(Box::new(Spmv {
        source,
        cg,
        tol,
        max_iters,
        check,
    }))
}

/// The test vector: small dyadic values, so products and sums of a few terms are exact.
fn test_x(i: usize) -> f64 {
    1.0 + (i % 7) as f64 / 8.0
}

/// Concatenates every rank's `f64`s on rank 0 (rank order = global order).
fn gather_f64(ctx: &RunContext, mine: &[f64]) -> Vec<f64> {
    let bytes: Vec<u8> = mine.iter().flat_map(|v| v.to_le_bytes()).collect();
    gather_bytes(ctx.world, &bytes)
        .iter()
        .flat_map(|p| {
            p.chunks_exact(8).map(|c| {
                let mut b = [0u8; 8];
                b.copy_from_slice(c);
                f64::from_le_bytes(b)
            })
        })
        .collect()
}

/// Largest `|a - b|` over two vectors.
fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

impl Problem for Spmv {
    fn run(&mut self, ctx: &RunContext) -> Result<Summary> {
        let world = ctx.world;
        let (rank, size) = (world.rank() as usize, world.size() as usize);
        let n = self.source.size();
        let starts = row_starts(n, size);
        let rows = starts[rank]..starts[rank + 1];
        let a = DistMatrix::new(world, &self.source.rows(rows.clone()), &starts, rank)?;
        let comm = CommTimer::default();
        let x: Vec<f64> = rows.clone().map(test_x).collect();
        let mut y = vec![0.0; rows.len()];
        let mut z = vec![0.0; rows.len()];
        let mut ghost = vec![0.0; a.nghosts()];
        a.matvec(&x, &mut y, &mut ghost, &comm)?;
        a.matvec_transpose(&x, &mut z, &mut ghost, &comm)?;
        let nnz = crate::run::collective::sum_f64(world, a.nnz() as f64);

        let cg = if self.cg {
            let mut u = vec![0.0; rows.len()];
            let res = cg::solve(ctx, &a, &y, &mut u, self.tol, self.max_iters, &comm)?;
            let err = max_f64(world, max_diff(&u, &x));
            Some((res, err))
        } else {
            None
        };

        let (y_all, z_all) = (gather_f64(ctx, &y), gather_f64(ctx, &z));
        let mut report = Report {
            source: self.source.describe(),
            n,
            nnz: nnz as u64,
            check: None,
            cg: cg
                .as_ref()
                .map(|(r, e)| (r.iterations, r.relative_residual, *e, r.stop)),
        };
        let mut verdict = Ok(());
        if ctx.is_root() {
            if self.check {
                // The serial reference, on rank 0 only: the whole matrix, summed in order.
                let full = self.source.rows(0..n);
                let x_all: Vec<f64> = (0..n).map(test_x).collect();
                let (ys, zs) = (full.matvec(&x_all), full.matvec_transpose(&x_all, n));
                let (dy, dz) = (max_diff(&y_all, &ys), max_diff(&z_all, &zs));
                report.check = Some((dy, dz));
                let scale = zs.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1.0);
                if let Some(i) = (0..n).find(|&i| y_all[i].to_bits() != ys[i].to_bits()) {
                    verdict = Err(anyhow::anyhow!(
                        "A x differs from the serial product at row {i}: {:e} vs {:e}",
                        y_all[i],
                        ys[i]
                    ));
                } else if dz > 1e-12 * scale {
                    verdict = Err(anyhow::anyhow!(
                        "A^T x differs from the serial transpose product by {dz:e}"
                    ));
                }
            }
            outln!("{}", report.line(size));
            let path = ctx.out_file("spmv.dat");
            crate::output::write_atomically(&path, |w| {
                w.write_all(report.file_text(&y_all, &z_all).as_bytes())
            })
            .with_context(|| format!("cannot write {}", path.display()))?;
        }
        verdict?;
        let (cycles, stop) = match &cg {
            Some((r, _)) => (r.iterations, r.stop),
            None => (1, Stop::Converged),
        };
        if let Some((r, _)) = &cg {
            if r.stop == Stop::CycleLimit && ctx.is_root() {
                tracing::warn!(
                    "spmv: CG stopped at max_iters {} with relative residual {:.3e} above tol {:.3e}",
                    self.max_iters,
                    r.relative_residual,
                    self.tol
                );
            }
        }
        if !nnz.is_finite() {
            bail!("spmv: nonzero count overflowed");
        }
        Ok(Summary {
            cycles,
            work: nnz * (2 + cycles) as f64,
            work_unit: "multiply-adds",
            comm: comm.total(),
            stop,
        })
    }
}

/// What rank 0 prints and writes.
struct Report {
    source: String,
    n: usize,
    nnz: u64,
    /// Largest differences from the serial `A x` and `A^T x`.
    check: Option<(f64, f64)>,
    /// Iterations, relative residual, max error against the exact solution, stop reason.
    cg: Option<(u64, f64, f64, Stop)>,
}

impl Report {
    fn line(&self, size: usize) -> String {
        let mut s = format!(
            "spmv: {} ({} rows, {} nonzeros) on {size} rank{}",
            self.source,
            self.n,
            self.nnz,
            if size == 1 { "" } else { "s" }
        );
        if let Some((dy, dz)) = self.check {
            let _ = write!(
                s,
                "; serial check: |A x - ref| {dy:e}, |A^T x - ref| {dz:e}"
            );
        }
        if let Some((it, res, err, _)) = self.cg {
            let _ = write!(
                s,
                "; CG: {it} iterations, relative residual {res:.6e}, max error {err:.6e}"
            );
        }
        s
    }

    fn file_text(&self, y: &[f64], z: &[f64]) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "# spmv: y = A x and z = A^T x for x_i = 1 + (i mod 7)/8");
        let _ = writeln!(
            s,
            "matrix {}\nrows {}\nnnz {}",
            self.source, self.n, self.nnz
        );
        if let Some((dy, dz)) = self.check {
            let _ = writeln!(s, "check_ax_max_diff {dy:e}\ncheck_atx_max_diff {dz:e}");
        }
        if let Some((it, res, err, stop)) = self.cg {
            let stop = match stop {
                Stop::Converged => "converged",
                Stop::CycleLimit => "max_iters",
                Stop::WallTime => "wall_time",
            };
            let _ = writeln!(
                s,
                "cg_iterations {it}\ncg_relative_residual {res:e}\ncg_max_error {err:e}\ncg_stop {stop}"
            );
        }
        let _ = writeln!(s, "# y = A x, one value per line");
        for v in y {
            let _ = writeln!(s, "{v:e}");
        }
        let _ = writeln!(s, "# z = A^T x, one value per line");
        for v in z {
            let _ = writeln!(s, "{v:e}");
        }
        s
    }
}
