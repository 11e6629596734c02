//! Node-aware bcasts and reduces against the standard route on an irregular SpMV-like pattern:
//! every rank reads random roots (doubles) of `--peers` other ranks. Each round times every
//! strategy's bcast, then every strategy's reduce summing doubles (each leaf's value carried
//! alone, by the reverse route), then every strategy's reduce summing 64-bit integers (which
//! relays fold), in turn, so drift hits all alike; an operation's time is the slowest rank's.
//! The standard route's reduce is the plain forest's. The cost model, calibrated at the start
//! of the same run, predicts each route's operations and names its choice for each.

use super::{median, timed};
use crate::cli::StrategiesArgs;
use crate::exit::bad_input;
use crate::run::collective::agree;
use anyhow::Result;
use mpi::topology::{Communicator, SimpleCommunicator};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use starhalo_sf::{CostModel, Graph, NodeAwareSf, Nodes, Op, RootRef, SfOptions, Strategy};

#[derive(Serialize)]
struct Row {
    strategy: &'static str,
    /// Median over rounds of the slowest rank's bcast.
    measured_us: f64,
    /// The median's ratio to the standard route's.
    vs_standard: f64,
    predicted_us: f64,
    /// Median over rounds of the slowest rank's reduce (sum), and its ratio to the standard
    /// route's (the plain forest's reduce).
    reduce_us: f64,
    reduce_vs_standard: f64,
    reduce_predicted_us: f64,
    /// The same for the reduce of 64-bit integer sums, folded by relays.
    folded_us: f64,
    folded_vs_standard: f64,
    folded_predicted_us: f64,
}

#[derive(Serialize)]
struct Report {
    ranks: usize,
    nodes: usize,
    #[serde(rename = "impl")]
    imp: &'static str,
    /// The cost model's parameters, measured at the start.
    alpha_on_us: f64,
    beta_on_ns_per_kib: f64,
    alpha_off_us: f64,
    beta_off_ns_per_kib: f64,
    node_rate_gb_s: f64,
    per_forest_us: f64,
    /// The model's choice, and whether it was the fastest measured.
    chosen: &'static str,
    chosen_is_fastest: bool,
    /// The same for reduces.
    reduce_chosen: &'static str,
    reduce_chosen_is_fastest: bool,
    folded_chosen: &'static str,
    folded_chosen_is_fastest: bool,
    rows: Vec<Row>,
}

pub fn run(world: &SimpleCommunicator, a: &StrategiesArgs) -> Result<()> {
    let (rank, n) = (world.rank() as usize, world.size() as usize);
    agree(world, check_args(a, n))?;
    let nodes = match a.ranks_per_node {
        Some(k) => Nodes::blocks(n, k),
        None => Nodes::detect(world),
    };
    let graph = pattern(a, rank, n);
    let opts = SfOptions {
        sf_type: a.sf_type,
        ..SfOptions::default()
    };
    let model = CostModel::calibrate(world, &nodes)?;
    // Only the choices are kept: the chosen forests are dropped here, before timing, so that
    // no forest beyond the timed ones holds posted receives.
    let strategy_of = |(sf, p): (NodeAwareSf, Vec<_>)| (sf.strategy(), p);
    let (chosen, predictions) = strategy_of(model.choose(world, &graph, opts, &nodes, 8)?);
    let (reduce_chosen, reduce_predictions) =
        strategy_of(model.choose_reduce::<f64, _>(world, &graph, opts, &nodes, Op::Sum)?);
    let (folded_chosen, folded_predictions) =
        strategy_of(model.choose_reduce::<i64, _>(world, &graph, opts, &nodes, Op::Sum)?);
    let routes = Strategy::ALL
        .into_iter()
        .map(|s| NodeAwareSf::new(world, &graph, opts, &nodes, s))
        .collect::<Result<Vec<_>, _>>()?;
    let root: Vec<f64> = (0..a.roots).map(|i| (rank * a.roots + i) as f64).collect();
    let mut leaf = vec![0.0f64; graph.leaf_space()];
    let mut sums = vec![0.0f64; a.roots];
    let counts: Vec<i64> = (0..graph.leaf_space()).map(|i| i as i64).collect();
    let mut totals = vec![0i64; a.roots];
    // Per route, bcast, reduce and folded reduce times.
    let mut times = vec![[Vec::new(), Vec::new(), Vec::new()]; routes.len()];
    for round in 0..a.rounds as usize + 3 {
        for (k, sf) in routes.iter().enumerate() {
            let (slowest, done) = timed(world, || sf.bcast(&root, &mut leaf, Op::Replace));
            done?;
            if round >= 3 {
                times[k][0].push(slowest);
            }
        }
        for (k, sf) in routes.iter().enumerate() {
            let (slowest, done) = timed(world, || sf.reduce(&leaf, &mut sums, Op::Sum));
            done?;
            if round >= 3 {
                times[k][1].push(slowest);
            }
        }
        for (k, sf) in routes.iter().enumerate() {
            let (slowest, done) = timed(world, || sf.reduce(&counts, &mut totals, Op::Sum));
            done?;
            if round >= 3 {
                times[k][2].push(slowest);
            }
        }
    }
    if rank != 0 {
        return Ok(());
    }
    let medians: Vec<f64> = times.iter_mut().map(|t| median(&mut t[0])).collect();
    let reduces: Vec<f64> = times.iter_mut().map(|t| median(&mut t[1])).collect();
    let folded: Vec<f64> = times.iter_mut().map(|t| median(&mut t[2])).collect();
    let fastest = |m: &[f64]| {
        let i = (0..m.len()).min_by(|&i, &j| m[i].total_cmp(&m[j]));
        Strategy::ALL[i.unwrap_or(0)]
    };
    let rows: Vec<Row> = Strategy::ALL
        .iter()
        .zip(&medians)
        .zip(&predictions)
        .zip(&reduces)
        .zip(&reduce_predictions)
        .zip(folded.iter().zip(&folded_predictions))
        .map(|(((((s, m), p), r), rp), (f, fp))| Row {
            strategy: s.name(),
            measured_us: m * 1e6,
            vs_standard: m / medians[0],
            predicted_us: p.seconds * 1e6,
            reduce_us: r * 1e6,
            reduce_vs_standard: r / reduces[0],
            reduce_predicted_us: rp.seconds * 1e6,
            folded_us: f * 1e6,
            folded_vs_standard: f / folded[0],
            folded_predicted_us: fp.seconds * 1e6,
        })
        .collect();
    let report = Report {
        ranks: n,
        nodes: nodes.count(),
        imp: a.sf_type.name(),
        alpha_on_us: model.on_node.alpha * 1e6,
        beta_on_ns_per_kib: model.on_node.beta * 1024.0 * 1e9,
        alpha_off_us: model.off_node.alpha * 1e6,
        beta_off_ns_per_kib: model.off_node.beta * 1024.0 * 1e9,
        node_rate_gb_s: model.node_rate / 1e9,
        per_forest_us: model.per_forest * 1e6,
        chosen: chosen.name(),
        chosen_is_fastest: fastest(&medians) == chosen,
        reduce_chosen: reduce_chosen.name(),
        reduce_chosen_is_fastest: fastest(&reduces) == reduce_chosen,
        folded_chosen: folded_chosen.name(),
        folded_chosen_is_fastest: fastest(&folded) == folded_chosen,
        rows,
    };
    if a.json {
        outln!("{}", serde_json::to_string(&report)?);
        return Ok(());
    }
    outln!(
        "# sf-strategies: {} ranks on {} nodes, {} roots per rank, {} peers of {} values; bcast and reduce time (us), median of {} rounds",
        n,
        report.nodes,
        a.roots,
        // Alone, a rank has no one to read from.
        a.peers.min(n - 1),
        a.per_peer,
        a.rounds
    );
    outln!(
        "# model: on-node alpha {:.2} us beta {:.2} ns/KiB; off-node alpha {:.2} us beta {:.2} ns/KiB; node rate {:.2} GB/s; {:.2} us per forest",
        report.alpha_on_us,
        report.beta_on_ns_per_kib,
        report.alpha_off_us,
        report.beta_off_ns_per_kib,
        report.node_rate_gb_s,
        report.per_forest_us
    );
    outln!(
        "{:>10} {:>12} {:>12} {:>13} {:>10} {:>19} {:>20} {:>10} {:>19} {:>20}",
        "strategy",
        "measured_us",
        "vs_standard",
        "predicted_us",
        "reduce_us",
        "reduce_vs_standard",
        "reduce_predicted_us",
        "folded_us",
        "folded_vs_standard",
        "folded_predicted_us"
    );
    for r in &report.rows {
        outln!(
            "{:>10} {:>12.2} {:>12.3} {:>13.2} {:>10.2} {:>19.3} {:>20.2} {:>10.2} {:>19.3} {:>20.2}",
            r.strategy,
            r.measured_us,
            r.vs_standard,
            r.predicted_us,
            r.reduce_us,
            r.reduce_vs_standard,
            r.reduce_predicted_us,
            r.folded_us,
            r.folded_vs_standard,
            r.folded_predicted_us
        );
    }
    let also = |yes: bool| if yes { "also" } else { "not" };
    outln!(
        "# model chose {} for bcasts ({} measured fastest), {} for reduces ({} measured fastest), {} for folded reduces ({} measured fastest)",
        report.chosen,
        also(report.chosen_is_fastest),
        report.reduce_chosen,
        also(report.reduce_chosen_is_fastest),
        report.folded_chosen,
        also(report.folded_chosen_is_fastest)
    );
    Ok(())
}

/// Rank `rank`'s leaves: `per_peer` random roots of each of `peers` random other ranks.
fn pattern(a: &StrategiesArgs, rank: usize, n: usize) -> Graph {
    let mut rng = ChaCha8Rng::seed_from_u64(a.seed ^ (rank as u64).wrapping_mul(0x9E37_79B9));
    let mut others: Vec<usize> = (0..n).filter(|&r| r != rank).collect();
    others.shuffle(&mut rng);
    let mut iremote = Vec::new();
    for &q in others.iter().take(a.peers) {
        for _ in 0..a.per_peer {
            iremote.push(RootRef {
                rank: q as i64,
                offset: rng.gen_range(0..a.roots) as u64,
            });
        }
    }
    Graph::new(a.roots, None, iremote)
}

/// The most roots (and leaves) per rank: 2^26 doubles with their sums and counts is
/// about 1.5 GiB a rank, beyond which the options are a typo rather than a benchmark.
const MAX_ROOTS: usize = 1 << 26;

fn check_args(a: &StrategiesArgs, nranks: usize) -> Result<()> {
    if a.roots == 0 || a.roots > MAX_ROOTS {
        return Err(bad_input!(
            "--roots {} is out of range: 1 to {MAX_ROOTS} roots per rank",
            a.roots
        ));
    }
    if a.per_peer.saturating_mul(a.peers.max(1)) > MAX_ROOTS {
        return Err(bad_input!(
            "--per-peer {} times --peers {} is above the most leaves this benchmark builds \
             per rank, {MAX_ROOTS}",
            a.per_peer,
            a.peers
        ));
    }
    if a.ranks_per_node == Some(0) {
        return Err(bad_input!("--ranks-per-node must be at least 1"));
    }
    if a.peers >= nranks.max(1) && nranks > 1 {
        return Err(bad_input!(
            "--peers {} needs more ranks: each rank reads at most the {} others",
            a.peers,
            nranks - 1
        ));
    }
    Ok(())
}
