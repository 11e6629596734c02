//! A distributed sparse matrix-vector product on the star forest, as PETSc's MatMult and
//! MatMultTranspose do it: the 5-point Laplacian of an `m × m` grid, its rows dealt to the
//! ranks in contiguous blocks.
//!
//! ```text
//! cargo build --release --example spmv
//! mpiexec -n 4 target/release/examples/spmv [m [basic|neighbor|rma]]
//! ```
//!
//! Each rank's leaves are the columns its rows touch, rooted in the vector entries that own
//! them. `y = A x` is a `bcast` of `x` into those columns and a local product; `z = Aᵀ x` is
//! a local product into the columns and a `reduce` with `Sum` back to their owners. With
//! `x_i = 1 + i/8 + (i mod 7)/64` (a different value at every row, each a multiple of 1/64)
//! every sum is exact, so both must equal the stencil applied to `x` directly, bit for bit,
//! on any number of ranks and under every implementation of the forest (the second argument):
//! the example exits 1 otherwise (every rank, through `MPI_Abort`), 2 on a bad argument. `starhalo run` with the `spmv` problem is the full driver (Matrix
//! Market input, CG).

use mpi::collective::SystemOperation;
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator, CommunicatorCollectives};
use starhalo_sf::{Graph, Op, RootRef, SfOptions, SfType, StarForest};
use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(universe) = mpi::initialize() else {
        eprintln!("spmv: MPI could not be initialized");
        return ExitCode::FAILURE;
    };
    let world = universe.world();
    let m = match std::env::args().nth(1).map(|a| a.parse::<usize>()) {
        None => 64,
        Some(Ok(m)) if (2..=4096).contains(&m) => m,
        Some(_) => {
            if world.rank() == 0 {
                eprintln!("spmv: the first argument, m, must be an integer from 2 to 4096");
            }
            return ExitCode::from(2);
        }
    };
    let sf_type = match std::env::args().nth(2).map(|a| a.parse::<SfType>()) {
        None => SfType::default(),
        Some(Ok(t)) => t,
        Some(Err(e)) => {
            if world.rank() == 0 {
                eprintln!("spmv: the second argument: {e}");
            }
            return ExitCode::from(2);
        }
    };
    match run(&world, m, sf_type) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Other ranks may be waiting on this one: end them all.
            eprintln!("spmv: rank {}: {e}", world.rank());
            world.abort(1)
        }
    }
}

/// This rank's rows in compressed form, with columns numbered by their place among the
/// rank's leaves.
struct Rows {
    starts: Vec<usize>,
    cols: Vec<usize>,
    vals: Vec<f64>,
}

fn run(
    world: &SimpleCommunicator,
    m: usize,
    sf_type: SfType,
) -> Result<(), Box<dyn std::error::Error>> {
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let n = m * m;
    let owned = |r: usize| r * n / size..(r + 1) * n / size;
    let mine = owned(rank);
    let x = |i: usize| 1.0 + i as f64 / 8.0 + (i % 7) as f64 / 64.0;

    // The distinct columns of this rank's rows, sorted, are its leaves.
    let mut columns: Vec<usize> = mine
        .clone()
        .flat_map(|r| stencil(m, r).map(|(c, _)| c))
        .collect();
    columns.sort_unstable();
    columns.dedup();
    let leaves = columns
        .iter()
        .map(|&c| {
            let owner = (0..size)
                .find(|&r| owned(r).contains(&c))
                .expect("a column in 0..n");
            RootRef {
                rank: owner as i64,
                offset: (c - owned(owner).start) as u64,
            }
        })
        .collect();
    let opts = SfOptions {
        sf_type,
        ..SfOptions::default()
    };
    let sf = StarForest::new(world, &Graph::new(mine.len(), None, leaves), opts)?;
    let rows = Rows::new(mine.clone().map(|r| stencil(m, r)), &columns);

    // y = A x: the columns' entries from their owners, then the local rows.
    let xs: Vec<f64> = mine.clone().map(x).collect();
    let mut xcols = vec![0.0; columns.len()];
    sf.bcast(&xs, &mut xcols, Op::Replace)?;
    let y = rows.times(&xcols);

    // z = Aᵀ x: each local row's products go to its columns, summed at their owners.
    let mut zcols = vec![0.0; columns.len()];
    rows.transpose_times(&xs, &mut zcols);
    let mut z = vec![0.0; mine.len()];
    sf.reduce(&zcols, &mut z, Op::Sum)?;

    for (k, row) in mine.clone().enumerate() {
        let want: f64 = stencil(m, row).map(|(c, a)| a * x(c)).sum();
        if y[k] != want || z[k] != want {
            return Err(format!("row {row}: A x = {}, Aᵀ x = {}, not {want}", y[k], z[k]).into());
        }
    }
    let mut norm2 = 0.0;
    let local: f64 = y.iter().map(|v| v * v).sum();
    world.all_reduce_into(&local, &mut norm2, SystemOperation::sum());
    if rank == 0 {
        println!(
            "spmv: {m}x{m} Laplacian on {size} ranks: A x and Aᵀ x match the stencil, |A x|² = {norm2}"
        );
    }
    Ok(())
}

/// The 5-point Laplacian's row `row` of an `m × m` grid with Dirichlet edges: `(column, a)`.
fn stencil(m: usize, row: usize) -> impl Iterator<Item = (usize, f64)> {
    let (i, j) = (row % m, row / m);
    let west = (i > 0).then(|| (row - 1, -1.0));
    let east = (i + 1 < m).then(|| (row + 1, -1.0));
    let south = (j > 0).then(|| (row - m, -1.0));
    let north = (j + 1 < m).then(|| (row + m, -1.0));
    [Some((row, 4.0)), west, east, south, north]
        .into_iter()
        .flatten()
}

impl Rows {
    /// From each row's `(global column, a)`, columns renumbered by their place in the
    /// sorted `columns`.
    fn new<R: Iterator<Item = (usize, f64)>>(
        rows: impl Iterator<Item = R>,
        columns: &[usize],
    ) -> Self {
        let mut csr = Rows {
            starts: vec![0],
            cols: Vec::new(),
            vals: Vec::new(),
        };
        for row in rows {
            for (col, a) in row {
                csr.cols
                    .push(columns.binary_search(&col).expect("a listed column"));
                csr.vals.push(a);
            }
            csr.starts.push(csr.cols.len());
        }
        csr
    }

    fn row(&self, k: usize) -> impl Iterator<Item = (usize, f64)> + '_ {
        let r = self.starts[k]..self.starts[k + 1];
        self.cols[r.clone()]
            .iter()
            .copied()
            .zip(self.vals[r].iter().copied())
    }

    fn times(&self, xcols: &[f64]) -> Vec<f64> {
        (0..self.starts.len() - 1)
            .map(|k| self.row(k).map(|(c, a)| a * xcols[c]).sum())
            .collect()
    }

    fn transpose_times(&self, x: &[f64], zcols: &mut [f64]) {
        for (k, xk) in x.iter().enumerate() {
            for (c, a) in self.row(k) {
                zcols[c] += a * xk;
            }
        }
    }
}
