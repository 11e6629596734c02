//! `starhalo sf run` and `starhalo sf view`.

use crate::cli::{SfRunArgs, SfSetup, SfViewArgs};
use crate::comm::gather_bytes;
use crate::exit::bad_input;
use crate::graph_file::{leaf_line, read_data, read_graph};
use crate::run::collective::{agree, same_inputs};
use anyhow::{Context, Result};
use mpi::topology::{Communicator, SimpleCommunicator};
use serde::Serialize;
use serde_json::Number;
use starhalo_sf::{Graph, NodeAwareSf, Nodes, Op, SfOptions, StarForest, Strategy, Unit};
use std::fmt::Write as _;
use std::path::Path;

/// A unit type the command line can name: read from JSON numbers, written back as JSON.
trait CliUnit: Unit + Serialize + Default {
    /// The value of a JSON number from a data file, if the unit can hold it exactly in range
    /// (integers must be whole numbers the type holds; an f32 must not overflow).
    fn from_json(v: &Number) -> Option<Self>;
    /// A generated default value; integers wrap like a C cast (-101 is 155 as u8).
    fn wrapping(v: f64) -> Self;
    /// Whether JSON can hold the value (it has no inf or NaN; serde_json writes `null`).
    fn in_json(&self) -> bool {
        true
    }
}

macro_rules! cli_int {
    ($($t:ty),*) => {$(impl CliUnit for $t {
        fn from_json(v: &Number) -> Option<Self> {
            // Integers as written (exact beyond 2^53). A float only if whole and below 2^53,
            // where it is exact: from there on it may be a rounded value (serde_json reads
            // an integer outside i64 and u64 as a float), which must not pass as the value.
            const EXACT: f64 = (1u64 << 53) as f64;
            let whole = match (v.as_i64(), v.as_u64(), v.as_f64()) {
                (Some(i), _, _) => i128::from(i),
                (_, Some(u), _) => i128::from(u),
                (_, _, Some(f)) if f.fract() == 0.0 && f.abs() < EXACT => f as i128,
                _ => return None,
            };
            <$t>::try_from(whole).ok()
        }
        fn wrapping(v: f64) -> Self {
            v as i64 as $t
        }
    })*};
}
cli_int!(i64, i32, u8);
impl CliUnit for f64 {
    fn from_json(v: &Number) -> Option<Self> {
        v.as_f64()
    }
    fn wrapping(v: f64) -> Self {
        v
    }
    fn in_json(&self) -> bool {
        self.is_finite()
    }
}
impl CliUnit for f32 {
    fn from_json(v: &Number) -> Option<Self> {
        v.as_f64().map(|x| x as f32).filter(|x| x.is_finite())
    }
    fn wrapping(v: f64) -> Self {
        v as f32
    }
    fn in_json(&self) -> bool {
        self.is_finite()
    }
}

/// What `--op` asks for.
#[derive(Clone, Copy, Debug)]
enum Action {
    Bcast(Op),
    Reduce(Op),
    FetchAndOp(Op),
}

fn parse_action(s: &str) -> Result<Action> {
    let (kind, name) = s.split_once(':').ok_or_else(|| {
        bad_input!("--op `{s}`: expected bcast:OP, reduce:OP or fetch-and-op:sum")
    })?;
    let op: Op = name.parse().map_err(|e| bad_input!("--op `{s}`: {e}"))?;
    match kind {
        "bcast" => Ok(Action::Bcast(op)),
        "reduce" => Ok(Action::Reduce(op)),
        "fetch-and-op" if op == Op::Sum => Ok(Action::FetchAndOp(op)),
        "fetch-and-op" => Err(bad_input!("--op `{s}`: fetch-and-op supports sum only")),
        _ => Err(bad_input!(
            "--op `{s}`: unknown operation kind `{kind}` (bcast, reduce, fetch-and-op)"
        )),
    }
}

/// Reads the graph and sets up the forest. Every rank reads the same file and options, so
/// every rank reaches the same verdict on them; agreed, so that one rank reports it. An
/// invalid graph is found by the forest's set-up, which reports from the rank that sees it.
fn setup(world: &SimpleCommunicator, s: &SfSetup) -> Result<(Graph, StarForest)> {
    let (graph, opts) = agree(world, read_setup(world, s))?;
    same_inputs(world)?;
    let sf = StarForest::new(world, &graph, opts).map_err(|e| {
        let rank = world.rank() as usize;
        let line = leaf_line(&s.graph, rank, &e).map_or(String::new(), |l| format!(":{l}"));
        anyhow::Error::new(e).context(format!("invalid graph in {}{line}", s.graph.display()))
    })?;
    Ok((graph, sf))
}

/// This rank's graph and the forest's options.
fn read_setup(world: &SimpleCommunicator, s: &SfSetup) -> Result<(Graph, SfOptions)> {
    let opts = SfOptions {
        discovery: s
            .discovery
            .parse()
            .map_err(|e| bad_input!("--discovery: {e}"))?,
        sf_type: s
            .sf_type
            .parse()
            .map_err(|e| bad_input!("--sf-type: {e}"))?,
        ..SfOptions::default()
    };
    let mut graphs = read_graph(&s.graph)?;
    let size = world.size() as usize;
    if graphs.is_empty() {
        return Err(bad_input!(
            "{}: the graph lists no ranks",
            s.graph.display()
        ));
    }
    if graphs.len() != size {
        return Err(bad_input!(
            "{} describes {} ranks but this job has {size}: run it with mpiexec -n {}",
            s.graph.display(),
            graphs.len(),
            graphs.len()
        ));
    }
    Ok((graphs.swap_remove(world.rank() as usize), opts))
}

/// The forest `sf run` operates on, and its node-aware route when `--strategy` asks for one.
struct Forest {
    plain: StarForest,
    routed: Option<NodeAwareSf>,
}

/// `sf run`: one operation, results gathered into a JSON file by rank 0.
pub fn run(world: &SimpleCommunicator, a: &SfRunArgs) -> Result<()> {
    let options = parse_action(&a.op).and_then(|action| {
        let strategy: Strategy = a
            .strategy
            .parse()
            .map_err(|e| bad_input!("--strategy: {e}"))?;
        if let (Some(k), Strategy::Standard) = (a.ranks_per_node, strategy) {
            return Err(bad_input!(
                "--ranks-per-node {k}: nodes matter only to --strategy 2-step, 3-step or split"
            ));
        }
        Ok((action, strategy, runner(&a.unit)?))
    });
    let (action, strategy, run) = agree(world, options)?;
    let out = if world.rank() == 0 {
        check_out(&a.out)
    } else {
        Ok(())
    };
    agree(world, out)?;
    let (graph, sf) = setup(world, &a.setup)?;
    let routed = match strategy {
        Strategy::Standard => None,
        s => {
            let nodes = match a.ranks_per_node {
                Some(k) => Nodes::blocks(world.size() as usize, k as usize),
                None => Nodes::detect(world),
            };
            Some(NodeAwareSf::new(world, &graph, sf.options(), &nodes, s)?)
        }
    };
    let forest = Forest { plain: sf, routed };
    run(world, &forest, a, action)
}

/// Whether `--out` can be written, before any work: not a directory, in one that exists and
/// takes files.
fn check_out(out: &Path) -> Result<()> {
    if out.is_dir() {
        return Err(bad_input!(
            "--out {}: is a directory; name the result file",
            out.display()
        ));
    }
    let dir = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return Err(bad_input!(
            "--out {}: {} {}",
            out.display(),
            dir.display(),
            if dir.exists() {
                "is not a directory"
            } else {
                "does not exist"
            }
        ));
    }
    let what = format!("--out {}: cannot write in {}", out.display(), dir.display());
    crate::run::check_can_write_in(dir, &what)
}

/// `sf run` for one unit type.
type Runner = fn(&SimpleCommunicator, &Forest, &SfRunArgs, Action) -> Result<()>;

/// The `sf run` of `--unit`.
fn runner(unit: &str) -> Result<Runner> {
    Ok(match unit {
        "f64" => run_typed::<f64>,
        "f32" => run_typed::<f32>,
        "i64" => run_typed::<i64>,
        "i32" => run_typed::<i32>,
        "u8" => run_typed::<u8>,
        u => {
            return Err(bad_input!(
                "--unit `{u}`: expected f64, f32, i64, i32 or u8"
            ))
        }
    })
}

/// Whether this rank can hold its part of `sf run`: its root and leaf values and their JSON
/// text, at two bytes a value at the least, which rank 0 holds three times (its own, all
/// ranks' gathered, and the document written from them). A lower bound: a graph refused
/// here surely does not fit, where an allocation that merely succeeds may still leave too
/// little (memory is overcommitted) and end the run half-way. Collective.
fn fits_in_memory<U: CliUnit>(world: &SimpleCommunicator, sf: &StarForest) -> Result<()> {
    let memory = crate::run::memory::Memory::of(world);
    let values = sf.nroots().saturating_add(sf.leaf_space()) as u64;
    let copies = if world.rank() == 0 { 3 } else { 1 };
    let need = values.saturating_mul(std::mem::size_of::<U>() as u64 + copies * 2);
    if need <= memory.per_rank {
        return Ok(());
    }
    Err(bad_input!(
        "the graph's {} root and {} leaf values on rank {} do not fit in memory: they need \
         at least {}, more than the {} each rank can count on; use a graph with fewer roots \
         and leaves per rank or more ranks",
        sf.nroots(),
        sf.leaf_space(),
        world.rank(),
        crate::run::memory::bytes(need),
        crate::run::memory::bytes(memory.per_rank)
    ))
}

/// This rank's data: from the file (which lists every rank's), or the default
/// `sign * (100*(rank+1) + i)`.
fn data<U: CliUnit>(
    file: Option<&Path>,
    (rank, size): (usize, usize),
    len: usize,
    sign: f64,
    what: &str,
) -> Result<Vec<U>> {
    let Some(path) = file else {
        // The graph sets `len`: one too large to hold is bad input, not an allocation abort.
        let mut v = Vec::new();
        starhalo_exec::alloc_count::try_reserve_exact(&mut v, len).map_err(|_| {
            bad_input!("the graph's {len} {what} values on rank {rank} do not fit in memory")
        })?;
        v.extend((0..len).map(|i| U::wrapping(sign * (100 * (rank + 1) + i) as f64)));
        return Ok(v);
    };
    let mut all = read_data(path)?;
    if all.len() != size {
        return Err(bad_input!(
            "{} lists {what} values for {} ranks but this job has {size}",
            path.display(),
            all.len()
        ));
    }
    let values = all.swap_remove(rank);
    if values.len() != len {
        return Err(bad_input!(
            "{}: rank {rank} has {} {what} values but the graph needs {len}",
            path.display(),
            values.len()
        ));
    }
    values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            U::from_json(v).ok_or_else(|| {
                bad_input!(
                    "{}: {what} value {v} (rank {rank}, index {i}) does not fit {}",
                    path.display(),
                    std::any::type_name::<U>()
                )
            })
        })
        .collect()
}

#[derive(Serialize)]
struct RankResult<U> {
    rootdata: Vec<U>,
    leafdata: Vec<U>,
    #[serde(skip_serializing_if = "Option::is_none")]
    leafupdate: Option<Vec<U>>,
}

fn run_typed<U: CliUnit>(
    world: &SimpleCommunicator,
    forest: &Forest,
    a: &SfRunArgs,
    action: Action,
) -> Result<()> {
    let rank = world.rank() as usize;
    let ranks = (rank, world.size() as usize);
    let (plain, routed) = (&forest.plain, forest.routed.as_ref());
    agree(world, fits_in_memory::<U>(world, plain))?;
    // Every rank checks its data, then all agree, so a bad file on one rank stops them all.
    let loaded =
        data::<U>(a.root_data.as_deref(), ranks, plain.nroots(), 1.0, "root").and_then(|r| {
            Ok((
                r,
                data::<U>(
                    a.leaf_data.as_deref(),
                    ranks,
                    plain.leaf_space(),
                    -1.0,
                    "leaf",
                )?,
            ))
        });
    let (mut root, mut leaf) = agree(world, loaded)?;
    same_inputs(world)?;
    let mut leafupdate = None;
    let op_result = match action {
        Action::Bcast(op) => match routed {
            Some(sf) => sf.bcast(&root, &mut leaf, op),
            None => plain.bcast(&root, &mut leaf, op),
        },
        Action::Reduce(op) => match routed {
            Some(sf) => sf.reduce(&leaf, &mut root, op),
            None => plain.reduce(&leaf, &mut root, op),
        },
        Action::FetchAndOp(op) => {
            let mut upd = vec![U::default(); leaf.len()];
            let r = match routed {
                Some(sf) => sf.fetch_and_op(&mut root, &leaf, &mut upd, op),
                None => plain.fetch_and_op(&mut root, &leaf, &mut upd, op),
            };
            leafupdate = Some(upd);
            r
        }
    };
    // Op validity is decided identically on every rank (same unit, same op), before any message.
    agree(
        world,
        op_result.map_err(|e| bad_input!("--op {} --unit {}: {e}", a.op, a.unit)),
    )?;
    // An overflow (inf) or NaN cannot be written as a JSON number: an error, not a `null`.
    let lists = [
        ("rootdata", Some(&root)),
        ("leafdata", Some(&leaf)),
        ("leafupdate", leafupdate.as_ref()),
    ];
    let unwritable = lists.into_iter().find_map(|(name, list)| {
        let i = list?.iter().position(|v| !v.in_json())?;
        Some(anyhow::anyhow!(
            "{name}[{i}] is not a finite number (an overflow?), which JSON cannot hold"
        ))
    });
    agree(world, unwritable.map_or(Ok(()), Err))?;
    let mine = serde_json::to_vec(&RankResult {
        rootdata: root,
        leafdata: leaf,
        leafupdate,
    })?;
    let all = gather_bytes(world, &mine);
    // Rank 0 writes; all agree on how that went, so every rank exits with its code.
    let written = if rank == 0 {
        write_result(&a.out, &all)
    } else {
        Ok(())
    };
    agree(world, written)
}

/// Writes the ranks' JSON results as one document `{"ranks": [...]}`.
fn write_result(path: &Path, ranks: &[Vec<u8>]) -> Result<()> {
    let mut out = String::from("{\"ranks\":[");
    for (r, bytes) in ranks.iter().enumerate() {
        if r > 0 {
            out.push(',');
        }
        out.push_str(std::str::from_utf8(bytes)?);
    }
    out.push_str("]}\n");
    crate::output::write_atomically(path, |w| w.write_all(out.as_bytes()))
        .with_context(|| format!("cannot write {}", path.display()))
}

/// `sf view`: each rank describes its part; rank 0 prints them in order.
pub fn view(world: &SimpleCommunicator, a: &SfViewArgs) -> Result<()> {
    let (graph, sf) = setup(world, &a.setup)?;
    let mut s = String::new();
    let rank = world.rank();
    let _ = writeln!(
        s,
        "rank {rank}: {} roots, {} leaves (leaf space {}), implementation {}",
        sf.nroots(),
        graph.nleaves(),
        sf.leaf_space(),
        sf.options().sf_type.name()
    );
    let _ = writeln!(s, "  root ranks (owners of this rank's leaves' roots):");
    for (r, plan) in sf.root_ranks() {
        let _ = writeln!(
            s,
            "    rank {r}{}: leaves {plan}",
            if r == rank { " (self)" } else { "" }
        );
    }
    let _ = writeln!(
        s,
        "  leaf ranks (ranks whose leaves read this rank's roots):"
    );
    for (r, plan) in sf.leaf_ranks() {
        let _ = writeln!(
            s,
            "    rank {r}{}: roots {plan}",
            if r == rank { " (self)" } else { "" }
        );
    }
    for part in gather_bytes(world, s.as_bytes()) {
        out!("{}", String::from_utf8_lossy(&part));
    }
    Ok(())
}
