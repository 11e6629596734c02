//! Command-line options (clap).

// The doc comments below are clap's `--help` text, written for the terminal, not rustdoc.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]

use clap::{Args, Parser, Subcommand};
use starhalo_sf::device::GpuMpi;
use starhalo_sf::SfType;
use std::path::PathBuf;

/// starhalo: boundary communication for block-structured AMR, over MPI.
#[derive(Parser, Debug)]
#[command(name = "starhalo", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a simulation from an input deck (YAML, or Parthenon's .in format).
    Run(RunArgs),
    /// Star-forest tools: run one operation on a graph file, or show how a graph is set up.
    #[command(subcommand)]
    Sf(SfCommand),
    /// Benchmarks that print a table, or JSON with --json.
    #[command(subcommand)]
    Bench(BenchCommand),
}

/// `starhalo run DECK [block/key=value ...]`.
///
/// The problem is `parthenon/job/problem` (or, when absent, `parthenon/job/problem_id`, which
/// also names the output files).
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Input deck: YAML, or Parthenon's format when it ends in .in or opens with a <block> line.
    pub deck: PathBuf,
    /// Overrides `block/path/key=value`, applied in order after the deck is read.
    pub overrides: Vec<String>,
    /// Output directory (created if needed).
    #[arg(short = 'd', long = "dir", value_name = "DIR", default_value = ".")]
    pub dir: PathBuf,
    /// Restart from this file (only for problems that support restarts).
    #[arg(short = 'r', long = "restart", value_name = "FILE")]
    pub restart: Option<PathBuf>,
    /// Check the deck as a run would (every key, the mesh, the outputs), print it resolved
    /// (overrides applied) as YAML, and run nothing.
    #[arg(short = 'n', long = "dry-run")]
    pub dry_run: bool,
    /// Wall-time limit HH:MM:SS: stop cleanly, with final output, once it is reached.
    #[arg(short = 't', long = "wall-time", value_name = "HH:MM:SS")]
    pub wall_time: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum SfCommand {
    /// Run one operation on a graph under `mpiexec -n N` (N = ranks in the graph).
    Run(SfRunArgs),
    /// Print each rank's roots, leaves, peer ranks and pack plans.
    View(SfViewArgs),
}

/// Options shared by every command that sets up a star forest.
#[derive(Args, Debug, Clone)]
pub struct SfSetup {
    /// Graph file: {"ranks":[{"nroots":N,"leaves":[[leaf_index,root_rank,root_offset],...]},...]}.
    #[arg(long)]
    pub graph: PathBuf,
    /// Reverse discovery: auto, allreduce or nbx.
    #[arg(long, default_value = "auto")]
    pub discovery: String,
    /// Star-forest implementation: basic, neighbor or rma.
    #[arg(long, default_value = "basic")]
    pub sf_type: String,
}

#[derive(Args, Debug)]
pub struct SfRunArgs {
    #[command(flatten)]
    pub setup: SfSetup,
    /// bcast:OPNAME, reduce:OPNAME or fetch-and-op:sum.
    #[arg(long)]
    pub op: String,
    /// Unit type: f64, f32, i64, i32 or u8.
    #[arg(long, default_value = "f64")]
    pub unit: String,
    /// Root data: {"ranks":[[v,...],...]} (default: root i on rank r is 100*(r+1)+i).
    #[arg(long)]
    pub root_data: Option<PathBuf>,
    /// Leaf data (default: leaf j on rank r is -(100*(r+1)+j)).
    #[arg(long)]
    pub leaf_data: Option<PathBuf>,
    /// Result file, written by rank 0.
    #[arg(long)]
    pub out: PathBuf,
    /// Route of the off-node edges: standard, 2-step, 3-step, split or split:CAP (every route
    /// gives the same bits).
    #[arg(long, default_value = "standard")]
    pub strategy: String,
    /// With `--strategy`: group consecutive ranks into nodes of this many (default: the
    /// machine's real nodes).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub ranks_per_node: Option<u64>,
}

#[derive(Args, Debug)]
pub struct SfViewArgs {
    #[command(flatten)]
    pub setup: SfSetup,
}

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Star-forest ping-pong against raw MPI (2 ranks): PetscSF's Table I experiment.
    SfPingpong(PingpongArgs),
    /// Ghost exchange on a deck's mesh, coalesced against per channel, and pack-in-one
    /// against memcpy of the same bytes.
    Exchange(ExchangeBenchArgs),
    /// Node-aware bcasts and reduces (2-step, 3-step, split) against the standard route on an
    /// irregular pattern, with the cost model's predictions and choice.
    SfStrategies(StrategiesArgs),
    /// The OpenSHMEM-style layer against two-sided MPI: put-with-signal ping-pong, atomics,
    /// barriers and a 2-D heat solve, through load/store and through RMA.
    Shmem(ShmemBenchArgs),
}

#[derive(Args, Debug)]
pub struct ShmemBenchArgs {
    /// Largest ping-pong message in bytes; sizes run from 8 bytes up by factors of 8 to it.
    #[arg(long, default_value_t = 1 << 20, value_parser = clap::value_parser!(u64).range(8..=1 << 28))]
    pub max_bytes: u64,
    /// Timed rounds, each timing every variant once in turn; medians are reported.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: u32,
    /// Rows and columns of the heat plate (rows are split over the ranks).
    #[arg(long, default_value_t = 128)]
    pub heat_n: usize,
    /// Jacobi sweeps per heat solve.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub heat_sweeps: u32,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct StrategiesArgs {
    /// Group consecutive ranks into nodes of this many (default: the machine's real nodes).
    #[arg(long)]
    pub ranks_per_node: Option<usize>,
    /// Roots (doubles) per rank.
    #[arg(long, default_value_t = 4096)]
    pub roots: usize,
    /// Other ranks each rank reads from.
    #[arg(long, default_value_t = 3)]
    pub peers: usize,
    /// Random roots read from each of those ranks (repeats allowed).
    #[arg(long, default_value_t = 256)]
    pub per_peer: usize,
    /// Seed of the pattern.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Timed rounds, each timing every strategy once; medians are reported.
    #[arg(long, default_value_t = 31, value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: u32,
    /// Star-forest implementation: basic, neighbor or rma.
    #[arg(long, default_value = "basic", value_parser = |s: &str| s.parse::<SfType>())]
    pub sf_type: SfType,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `starhalo bench exchange DECK [block/key=value ...]`.
///
/// The mesh comes from `parthenon/mesh` and `parthenon/meshblock` (and any refinement
/// blocks); the `exchange` block sets `nvars` (cell-centred variables, default 8), `sparse`
/// (default false) and `ordering` (natural, by_receiver, random[:SEED]; default natural).
#[derive(Args, Debug)]
pub struct ExchangeBenchArgs {
    /// Input deck (YAML, or Parthenon's .in format).
    pub deck: PathBuf,
    /// Overrides `block/path/key=value`, applied in order after the deck is read.
    pub overrides: Vec<String>,
    /// Timed ghost fills per mode (after a warm-up); the median over fills is reported.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    pub cycles: u32,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct PingpongArgs {
    /// Smallest message in bytes.
    #[arg(long, default_value_t = 8)]
    pub min_bytes: usize,
    /// Largest message in bytes.
    #[arg(long, default_value_t = 4 << 20)]
    pub max_bytes: usize,
    /// Timed rounds per size, each timing raw MPI and the forest back to back; medians are
    /// reported, the overhead as the median of the per-round differences.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: u32,
    /// Round trips per timing (after a quarter as many to warm up); by default about 4 MB
    /// of traffic, 60 to 20000 round trips.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub iters: Option<u32>,
    /// Also time the forest with both arrays in GPU memory (doubles, staged through the
    /// host), in the same rounds; sizes must be multiples of 8 bytes. Exit 1 without a GPU.
    #[arg(long)]
    pub device: bool,
    /// How the device arrays cross MPI with --device: staged (host copies, any MPI), aware
    /// (device pointers to an MPI with CUDA support; exit 1 if this MPI has none) or auto.
    #[arg(long, default_value = "auto", requires = "device", value_parser = |s: &str| s.parse::<GpuMpi>())]
    pub gpu_mpi: GpuMpi,
    /// Also time the split-phase halves (bcast_begin/end, reduce_begin/end), which stage
    /// every message, in the same rounds; reports their time over the combined calls'.
    #[arg(long)]
    pub split: bool,
    /// Star-forest implementation: basic, neighbor or rma.
    #[arg(long, default_value = "basic", value_parser = |s: &str| s.parse::<SfType>())]
    pub sf_type: SfType,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}
