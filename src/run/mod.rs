//! `starhalo run`: read the deck, apply overrides, pick the problem, run it.
//!
//! Every step that can reject input ends in a collective agreement ([`collective::agree`]),
//! so bad input stops every rank with exit code 2 and only the first failing rank speaks.
//! Rank 0 reads the deck file and broadcasts it: every rank then parses the same text and
//! reads the same keys, so they fail (or not) together.

pub mod clock;
pub mod collective;
pub mod context;
pub mod memory;
pub mod output_blocks;
pub mod resume;
pub mod stats;

pub use collective::report;
pub use context::RunContext;

use crate::cli::RunArgs;
use crate::deck::Deck;
use crate::exit::bad_input;
use crate::output::MAX_NAME_PART;
use crate::problems::{self, Problem};
use anyhow::Result;
use collective::{agree, broadcast_bytes};
use mpi::topology::{Communicator, SimpleCommunicator};
use starhalo_exec::{MemSpace, SpaceError};
use starhalo_sf::device::GpuMpi;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// The longest path the kernel takes, in bytes, without its terminating NUL.
const PATH_MAX: usize = 4095;

/// The driver's own block for job settings.
const JOB: &str = "parthenon/job";
/// The driver's block for where a problem runs.
const EXEC: &str = "parthenon/exec";
/// The driver's own block for time-stepping settings.
const TIME: &str = "parthenon/time";

/// Runs `starhalo run` on every rank.
pub fn main(world: &SimpleCommunicator, a: &RunArgs) -> Result<()> {
    let start = Instant::now();

    let limit = agree(
        world,
        a.wall_time
            .as_deref()
            .map(clock::parse_wall_time)
            .transpose(),
    )?;
    let text = agree(world, read_deck_on_root(world, &a.deck))?;
    // Rank 0 checked that the file is UTF-8; the bytes arrive unchanged.
    let text = String::from_utf8_lossy(&broadcast_bytes(world, text.into_bytes())).into_owned();
    let deck = agree(world, parse(&text, a))?;

    let mut ctx = RunContext {
        world,
        problem_id: String::new(),
        out_dir: a.dir.clone(),
        deadline: clock::Deadline::new(start, limit),
        ncycle_out: 1,
        recv_timeout: Duration::from_secs(60),
        restart: a.restart.clone(),
        memory: memory::Memory::of(world),
    };
    let (name, mut problem) = agree(world, set_up(&deck, &mut ctx))?;
    collective::same_inputs(world)?;
    if a.dry_run {
        // The deck has been checked as a run would check it; nothing runs or is written.
        agree(world, check_out_dir(world, &ctx))?;
        if world.rank() == 0 {
            out!("{}", deck.to_yaml());
        }
        return Ok(());
    }
    agree(
        world,
        check_out_dir(world, &ctx).and_then(|()| make_out_dir(world, &ctx)),
    )?;

    let t0 = Instant::now();
    // Problems fail collectively; a failure seen by one rank at the very end (rank 0's
    // result file) still stops every rank with the same code.
    let summary = problem.run(&ctx);
    if let Err(e) = &summary {
        // A blocking round (multigrid, or the GPU path's ghost fill or flux correction) that
        // waited past recv_bdry_buf_timeout_sec: its peers may never reach the agreement
        // below.
        let stuck = e.chain().any(|c| {
            matches!(
                c.downcast_ref(),
                Some(starhalo_boundary::BoundaryError::Timeout { .. })
            )
        });
        if stuck {
            ctx.abort_stuck(format_args!(
                "{e:#} (parthenon/time/recv_bdry_buf_timeout_sec)"
            ));
        }
    }
    let summary = agree(world, summary)?;
    summary.print(world, name, t0.elapsed());
    Ok(())
}

/// Logs go to standard error, coloured only on a terminal; rank 0 reports progress and
/// warnings, the others only errors.
pub fn init_logging(speaker: bool) {
    let level = if speaker {
        tracing::Level::INFO
    } else {
        tracing::Level::ERROR
    };
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .without_time()
        .try_init();
}

/// Rank 0 reads the deck file at `path`; the other ranks get an empty text (and wait for
/// its verdict, then its text).
pub fn read_deck_on_root(world: &SimpleCommunicator, path: &std::path::Path) -> Result<String> {
    if world.rank() != 0 {
        return Ok(String::new());
    }
    crate::input_file::read_text(path)
        .map_err(|e| bad_input!("cannot read deck {}: {e}", path.display()))
}

fn parse(text: &str, a: &RunArgs) -> Result<Deck> {
    let mut deck = Deck::from_str_auto(text, &a.deck.display().to_string())?;
    for o in &a.overrides {
        deck.apply_override(o)?;
    }
    Ok(deck)
}

/// Reads the driver's keys, finds the problem and lets it read its own; then any key left
/// unread in `parthenon/*` or the problem's block is an error. Nothing here communicates.
fn set_up(deck: &Deck, ctx: &mut RunContext) -> Result<(&'static str, Box<dyn Problem>)> {
    let name = match (deck.has(JOB, "problem"), deck.has(JOB, "problem_id")) {
        (true, _) => deck.get_str(JOB, "problem")?,
        (false, true) => deck.get_str(JOB, "problem_id")?,
        (false, false) => {
            return Err(bad_input!(
                "{} does not say which problem to run: give {JOB}/problem (or {JOB}/problem_id, \
                 which then names the problem too)",
                deck.file()
            ))
        }
    };
    let key = if deck.has(JOB, "problem") {
        "problem"
    } else {
        "problem_id"
    };
    let info = problems::find(&name).ok_or_else(|| {
        deck.invalid(
            JOB,
            key,
            format!("unknown problem '{name}' (known: {})", problems::names()),
        )
    })?;
    // The spec's default (`parthenon`) where `problem` names the problem; a deck with only
    // `problem_id` names both by it.
    ctx.problem_id = deck.get_str_or(JOB, "problem_id", "parthenon")?;
    let id = &ctx.problem_id;
    // Short enough that every file name built on it stays within the 255 bytes a name may
    // have (with an output's id of at most as many, its number and extension).
    if id.is_empty()
        || id.contains(['/', '\\'])
        || id.chars().any(char::is_control)
        || id.len() > MAX_NAME_PART
    {
        return Err(deck
            .invalid(
                JOB,
                "problem_id",
                format!("must be a plain file-name prefix of at most {MAX_NAME_PART} bytes"),
            )
            .into());
    }
    let ncycle_out = deck.get_i64_or(TIME, "ncycle_out", 1)?;
    ctx.ncycle_out = u64::try_from(ncycle_out).map_err(|_| {
        deck.invalid(
            TIME,
            "ncycle_out",
            "must be 0 (no progress lines) or positive",
        )
    })?;
    let timeout = deck.get_f64_or(TIME, "recv_bdry_buf_timeout_sec", 60.0)?;
    // Waits compare elapsed time against the timeout, so one past Duration's range (`inf`
    // included) can only mean "never"; one that rounds to 0 ns would fail every wait.
    ctx.recv_timeout = match Duration::try_from_secs_f64(timeout) {
        Ok(d) if !d.is_zero() => d,
        Err(_) if timeout > 0.0 => Duration::MAX,
        _ => {
            return Err(deck
                .invalid(
                    TIME,
                    "recv_bdry_buf_timeout_sec",
                    "must be a positive number of seconds (1e-9 or more)",
                )
                .into())
        }
    };
    if let (Some(r), false) = (&ctx.restart, info.restarts) {
        return Err(bad_input!(
            "-r {}: problem '{}' does not support restarts",
            r.display(),
            info.name
        ));
    }
    if !info.gpu {
        check_host_only(deck, info.name)?;
    }
    let mut problem = (info.setup)(deck, ctx)?;
    let reader = format!("the driver or problem {}", info.name);
    deck.check_unread(|b| b.starts_with("parthenon/") || b == info.block, &reader)?;
    // A block nested in the problem's own (`nx: {a: 1}`) is a value written as a mapping.
    let nested = format!("{}/", info.block);
    if let Some(b) = deck.blocks().iter().find(|b| b.name.starts_with(&nested)) {
        let key = b.name[nested.len()..].split('/').next().unwrap_or_default();
        if !deck.asked(info.block, key) {
            return Err(crate::deck::DeckError::Unknown {
                keys: vec![crate::deck::UnknownKey {
                    path: b.name.clone(),
                    origin: b.origin.clone(),
                }],
                reader,
            }
            .into());
        }
        return Err(bad_input!(
            "{} at {}: problem {} reads a value here, not a block of keys",
            b.name,
            b.origin,
            info.name
        ));
    }
    deck.warn_unused_blocks(
        |b| b.starts_with("parthenon/") || b == info.block,
        &format!("problem {}", info.name),
    );
    // After every deck check, so that bad input is reported as such first.
    problem.acquire()?;
    Ok((info.name, problem))
}

/// `parthenon/exec/space`: where a run's fields live (default `host`).
pub fn exec_space(deck: &Deck) -> Result<MemSpace> {
    deck.get_str_or(EXEC, "space", "host")?
        .parse()
        .map_err(|e: SpaceError| deck.invalid(EXEC, "space", e.to_string()).into())
}

/// `parthenon/exec/gpu_mpi`: how device fields' messages cross MPI (default `auto`).
pub fn exec_gpu_mpi(deck: &Deck) -> Result<GpuMpi> {
    deck.get_str_or(EXEC, "gpu_mpi", "auto")?
        .parse()
        .map_err(|e: String| deck.invalid(EXEC, "gpu_mpi", e).into())
}

/// The GPU keys of a problem without GPU code, read as the GPU problems read them: `space`
/// other than `host` is refused saying that the problem runs on the host only, rather than
/// called an unknown key; `gpu_mpi`, which only device fields use, is ignored with a warning.
fn check_host_only(deck: &Deck, problem: &str) -> Result<()> {
    if exec_space(deck)? != MemSpace::Host {
        let why = format!("problem {problem} runs on the host only");
        return Err(deck.invalid(EXEC, "space", why).into());
    }
    if deck.has(EXEC, "gpu_mpi") {
        exec_gpu_mpi(deck)?;
        deck.ignore(
            EXEC,
            ["gpu_mpi"],
            &format!("problem {problem}, which runs on the host"),
        );
    }
    Ok(())
}

/// Rank 0 checks, without creating anything, that the output directory exists or could be
/// made: the nearest existing path of `-d` and its parents is a directory.
fn check_out_dir(world: &SimpleCommunicator, ctx: &RunContext) -> Result<()> {
    if world.rank() != 0 {
        return Ok(());
    }
    let cannot = |why: String| {
        bad_input!(
            "-d {}: cannot create the output directory: {why}",
            ctx.out_dir.display()
        )
    };
    // HDF5 takes file names as UTF-8 only.
    if ctx.out_dir.to_str().is_none() {
        return Err(bad_input!(
            "-d {}: the name is not UTF-8, which HDF5 requires of file names",
            ctx.out_dir.display()
        ));
    }
    // Every name a run may write must fit in the 4095 bytes a path may have.
    let longest = crate::output::longest_file_name(&ctx.problem_id);
    let dir_len = ctx.out_dir.as_os_str().len();
    if dir_len + 1 + longest > PATH_MAX {
        return Err(bad_input!(
            "-d: the output directory's path is {dir_len} bytes: with file names of up to \
             {longest} bytes in it (an output id may have {MAX_NAME_PART} bytes, a file number \
             10 digits) it would pass the {PATH_MAX} bytes a path may have"
        ));
    }
    let mut at = ctx.out_dir.as_path();
    loop {
        match std::fs::metadata(at) {
            Ok(m) if m.is_dir() => return Ok(()),
            Ok(_) => return Err(cannot(format!("{} is not a directory", at.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match at.parent() {
                Some(p) if !p.as_os_str().is_empty() => at = p,
                _ => return Ok(()),
            },
            Err(e) => return Err(cannot(format!("{}: {e}", at.display()))),
        }
    }
}

/// Rank 0 creates the output directory and checks that files can be made in it (a
/// directory that exists may still refuse them), before the run does any work.
fn make_out_dir(world: &SimpleCommunicator, ctx: &RunContext) -> Result<()> {
    if world.rank() == 0 {
        let dir = ctx.out_dir.display();
        std::fs::create_dir_all(&ctx.out_dir)
            .map_err(|e| bad_input!("-d {dir}: cannot create the output directory: {e}"))?;
        check_can_write_in(
            &ctx.out_dir,
            &format!("-d {dir}: cannot write in the output directory"),
        )?;
    }
    Ok(())
}

/// Checks that files can be made in the existing directory `dir` (one may still refuse them)
/// by making one and removing it; `what` is the message, before the system's reason. A
/// refusal is bad input, the user's choice of directory; another failure (a full disk) is a
/// run-time error.
pub fn check_can_write_in(dir: &std::path::Path, what: &str) -> Result<()> {
    let probe = dir.join(format!(".starhalo-probe-{}", std::process::id()));
    if let Err(e) = std::fs::File::create(&probe) {
        use std::io::ErrorKind as K;
        let why = format!("{what}: {e}");
        return Err(match e.kind() {
            K::PermissionDenied | K::ReadOnlyFilesystem | K::NotFound => {
                bad_input!("{why}")
            }
            _ => anyhow::anyhow!(why),
        });
    }
    let _ = std::fs::remove_file(&probe);
    Ok(())
}
