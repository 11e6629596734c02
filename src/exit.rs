//! Exit codes and who speaks about errors.

use mpi::topology::{Communicator, SimpleCommunicator};
use std::io::Write;
use std::process::ExitCode;

/// Bad input from the user (an option, a file, a graph): exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);

/// Builds a [`BadInput`] error from a format string.
macro_rules! bad_input {
    ($($t:tt)*) => { anyhow::Error::new($crate::exit::BadInput(format!($($t)*))) };
}
pub(crate) use bad_input;

/// A failure to set up field storage: a mesh too large for memory is a run-time failure (exit
/// 1, this machine cannot hold it), anything else the deck's fault (exit 2).
pub fn storage_error(e: starhalo_boundary::BoundaryError) -> anyhow::Error {
    match e {
        starhalo_boundary::BoundaryError::OutOfMemory { .. } => e.into(),
        e => bad_input!("{e}"),
    }
}

/// Makes a refused allocation (the job needs more memory than a rank has, beyond what the
/// memory budget of [`crate::run`] foresaw) end the job with exit code 1 and a message, as
/// [`say_error`] would print it, rather than with SIGABRT.
/// `hint` says what to change.
pub fn on_out_of_memory(world: &SimpleCommunicator, hint: &str) {
    let prefix = match world.size() {
        1 => String::new(),
        _ => format!("[rank {}] ", world.rank()),
    };
    let message = format!(
        "{prefix}error: out of memory: the allocation above was refused, so this rank cannot \
         hold what the job needs; {hint}"
    );
    starhalo_exec::alloc_count::exit_on_refusal(message.leak());
}

/// In a job of several ranks, makes a panic (a bug) abort the whole job after its message:
/// unwinding would leave the other ranks waiting forever in their next collective.
pub fn abort_on_panic(world: &SimpleCommunicator) {
    if world.size() == 1 {
        return;
    }
    let rank = world.rank();
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        eprintln!("[rank {rank}] a bug ended this rank; aborting the job");
        report(info);
        // The launcher drops output it has not yet forwarded when the job is torn down.
        std::thread::sleep(std::time::Duration::from_millis(500));
        SimpleCommunicator::world().abort(101)
    }));
}

/// What to change where `command` needs more memory than a rank has.
pub fn memory_hint(command: &crate::cli::Command) -> &'static str {
    use crate::cli::{BenchCommand, Command};
    match command {
        Command::Run(_) | Command::Bench(BenchCommand::Exchange(_)) => {
            "use more ranks, fewer or larger blocks, or fewer refinement levels"
        }
        Command::Sf(_) => "use a graph with fewer roots and leaves per rank",
        Command::Bench(BenchCommand::SfPingpong(_)) => "use a smaller --max-bytes",
        Command::Bench(BenchCommand::SfStrategies(_)) => "use fewer --roots or --per-peer",
        Command::Bench(BenchCommand::Shmem(_)) => "use a smaller --max-bytes or --heat-n",
    }
}

/// Prints `error: {what}` on standard error, after `[rank N] ` in a job of several ranks, in
/// one write so that it does not interleave with other ranks' lines. Control characters the
/// input brought into the message (a NUL in a key) and the invisible ones that reorder text
/// (U+202E) are shown escaped, as Rust writes them.
pub fn say_error(world: &SimpleCommunicator, what: std::fmt::Arguments<'_>) {
    let what: String = what
        .to_string()
        .chars()
        .map(|c| match c {
            '\n' | '\t' => c.to_string(),
            c if c.is_control() || reorders_text(c) => c.escape_debug().to_string(),
            c => c.to_string(),
        })
        .collect();
    let line = match world.size() {
        1 => format!("error: {what}\n"),
        _ => format!("[rank {}] error: {what}\n", world.rank()),
    };
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// The invisible characters that change the order or joining of the text around them (bidi
/// embeddings, overrides and isolates, zero-width marks, the byte-order mark): shown raw, they
/// would make a message read other than it is.
fn reorders_text(c: char) -> bool {
    matches!(c, '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}')
}

/// Prints the error (unless it only says that another rank failed, which that rank reports)
/// and maps it to the exit code.
pub fn report(world: &SimpleCommunicator, result: anyhow::Result<()>) -> ExitCode {
    let Err(err) = result else {
        return ExitCode::SUCCESS;
    };
    let peer_only = err
        .chain()
        .any(|e| matches!(e.downcast_ref(), Some(starhalo_sf::SfError::PeerInvalid(_))));
    if !peer_only {
        say_error(world, format_args!("{err:#}"));
    }
    let bad = err
        .chain()
        .any(|e| e.is::<BadInput>() || e.is::<starhalo_sf::SfError>());
    ExitCode::from(if bad { 2 } else { 1 })
}
