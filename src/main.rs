//! `starhalo`: the command-line driver.
//!
//! Exit codes: 0 success, 1 run-time failure, 2 bad input (options, files, graphs). Every rank
//! of a multi-rank job reaches the same verdict on bad input and exits; none is left waiting.

#![forbid(unsafe_code)]

/// `print!` for standard output that may be closed (a pipe into `head`): the output is lost,
/// the run goes on and writes its files, where `print!` would panic.
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($t)*);
    }};
}

/// `println!` as [`out!`] prints.
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

mod bench;
mod cli;
mod comm;
mod deck;
mod exit;
mod graph_file;
mod input_file;
mod output;
mod problems;
mod run;
mod sf_cmd;

use clap::Parser;
use mpi::topology::Communicator;
use std::process::ExitCode;

#[global_allocator]
static GLOBAL: starhalo_exec::alloc_count::Counting = starhalo_exec::alloc_count::Counting;

fn main() -> ExitCode {
    let args = cli::Cli::try_parse();
    let Some(universe) = mpi::initialize() else {
        eprintln!("error: MPI was already initialised");
        return ExitCode::from(1);
    };
    let world = universe.world();
    if let Err(e) = run::collective::same_command_line(&world) {
        run::init_logging(world.rank() == 0);
        return run::report(&world, Err(e));
    }
    // Every rank parses the same command line: rank 0 alone prints the verdict (an error, or
    // the help text), and every rank exits with its code (2 for a bad option).
    let args = match args {
        Ok(args) => args,
        Err(e) => {
            if world.rank() == 0 {
                let _ = e.print();
            }
            return ExitCode::from(e.exit_code() as u8);
        }
    };
    run::init_logging(world.rank() == 0);
    exit::abort_on_panic(&world);
    exit::on_out_of_memory(&world, exit::memory_hint(&args.command));
    let result = match args.command {
        cli::Command::Run(a) => run::main(&world, &a),
        cli::Command::Sf(cli::SfCommand::Run(a)) => sf_cmd::run(&world, &a),
        cli::Command::Sf(cli::SfCommand::View(a)) => sf_cmd::view(&world, &a),
        cli::Command::Bench(cli::BenchCommand::SfPingpong(a)) => {
            bench::sf_pingpong::run(&world, &a)
        }
        cli::Command::Bench(cli::BenchCommand::Exchange(a)) => bench::exchange::run(&world, &a),
        cli::Command::Bench(cli::BenchCommand::SfStrategies(a)) => {
            bench::sf_strategies::run(&world, &a)
        }
        cli::Command::Bench(cli::BenchCommand::Shmem(a)) => bench::shmem::run(&world, &a),
    };
    run::report(&world, result)
}
