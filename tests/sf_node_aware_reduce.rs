//! Node-aware reduces (2-step, 3-step, split) on seeded random graphs and a fan-in on 1, 2,
//! 3, 4 and 8 ranks, with nodes of 1, 2 and 3 ranks, under every implementation: bit for bit
//! the plain forest's reduce for floating-point sums whose bits depend on the order of the
//! terms, for replace (the last leaf wins) and for integer and multi-lane units, whose relays
//! fold on the way; messages across nodes as few as each strategy promises, and folded
//! reduces sending fewer values across nodes than the plain forest where a node's leaves
//! share roots.

mod common;

use common::routes::{pair, OffNode};
use common::sf_world::{random_world, World};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use starhalo_sf::mpi::collective::SystemOperation;
use starhalo_sf::mpi::topology::{Communicator, SimpleCommunicator};
use starhalo_sf::mpi::traits::{CommunicatorCollectives, Root};
use starhalo_sf::{
    CostModel, NodeAwareSf, Nodes, Op, ReduceRoute, SfError, SfOptions, SfType, StarForest,
    Strategy,
};

fn main() {
    if std::env::var_os(common::CHILD_ENV).is_some() {
        child();
    } else {
        eprintln!("sf_node_aware_reduce: routed reduces against the plain forest");
        common::relaunch_self(&[1, 2, 3, 4, 8], 300);
    }
}

/// Values of magnitudes from 1 to 1e15, so that sums in different orders round differently.
fn values(seed: u64, len: usize) -> Vec<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..len)
        .map(|_| rng.gen_range(-9.0..9.0) * 10f64.powi(rng.gen_range(0..16)))
        .collect()
}

fn same_bits(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Per reordering (reversed; the first leaf moved last, as a route that took the own rank last
/// would), whether summing some root's leaves in that order changes its bits: whether the test
/// would see a route that combined in that order.
fn order_matters(plain: &StarForest, leaf: &[f64], root: &[f64]) -> [bool; 2] {
    let multi = plain.multi().unwrap();
    let mut slots = vec![0.0f64; multi.offsets().last().copied().unwrap_or(0)];
    plain.gather(leaf, &mut slots).unwrap();
    let sum = |r: f64, s: &[f64]| s.iter().fold(r, |a, v| a + v).to_bits();
    let mut seen = [false; 2];
    for (w, &r) in multi.offsets().windows(2).zip(root) {
        let s = &slots[w[0]..w[1]];
        let mut reversed = s.to_vec();
        reversed.reverse();
        let mut rotated = s.to_vec();
        rotated.rotate_left(1.min(s.len()));
        seen[0] |= sum(r, &reversed) != sum(r, s);
        seen[1] |= sum(r, &rotated) != sum(r, s);
    }
    seen
}

/// The messages (peer rank, values) of a reduce that `route` names for `sf`: its own forests
/// backwards (leaves to root ranks), or a bcast through the reverse route.
fn reduce_sends(sf: &NodeAwareSf, route: ReduceRoute) -> Vec<(i32, usize)> {
    let (forests, backward): (Vec<&StarForest>, bool) = match route {
        ReduceRoute::Backward => (sf.forests().collect(), true),
        ReduceRoute::Reverse(reverse) => (reverse.forests().collect(), false),
    };
    forests
        .into_iter()
        .flat_map(|f| match backward {
            true => f.root_ranks(),
            false => f.leaf_ranks(),
        })
        .map(|(r, plan)| (r, plan.len()))
        .collect()
}

/// The values of `sends` that go to other nodes, summed over ranks. Collective.
fn off_node_values(world: &SimpleCommunicator, nodes: &Nodes, sends: &[(i32, usize)]) -> u64 {
    let here = nodes.of(world.rank() as usize);
    let mine: usize = sends
        .iter()
        .filter(|(r, _)| nodes.of(*r as usize) != here)
        .map(|(_, n)| n)
        .sum();
    let mut all = 0u64;
    world.all_reduce_into(&(mine as u64), &mut all, SystemOperation::sum());
    all
}

fn child() {
    let universe = starhalo_sf::mpi::initialize().expect("MPI init");
    let world: SimpleCommunicator = universe.world();
    let (rank, n) = (world.rank() as usize, world.size() as usize);
    let types = [SfType::Basic, SfType::Neighbor, SfType::Rma];
    let mut failures = Vec::new();
    let mut fail = |what: String| failures.push(format!("rank {rank}: {what}"));
    let maps = [
        Nodes::blocks(n, 1),
        Nodes::blocks(n, 2),
        Nodes::blocks(n, 3),
    ];
    let mut sensitive = [false; 2];
    // Two random graphs, then a fan-in: twelve leaves per rank, two on each of
    // the two roots of six ranks from its own on (wrapping), so roots mix ranks.
    let fan_in = (0..n)
        .map(|r| (0..12).map(|l| (l, (r + l / 2) % n, l % 2)).collect())
        .collect();
    let worlds = (0..2u64)
        .map(|seed| random_world(seed * 31 + 5 + n as u64, n))
        .chain([World::from_edges(vec![2; n], fan_in)]);
    for (seed, w) in (0u64..).zip(worlds) {
        let g = w.graph(rank);
        let opts = SfOptions {
            sf_type: types[seed as usize % types.len()],
            ..SfOptions::default()
        };
        let plain = StarForest::new(&world, &g, opts).unwrap();
        let mut leaf = values(seed * 7 + rank as u64, w.leaf_space[rank]);
        if seed == 2 {
            // The fan-in: huge terms that nearly cancel among small ones, so that where any
            // term goes in a root's sum shows in its bits.
            for (l, v) in leaf.iter_mut().enumerate() {
                *v = [1e16, 0.75 + l as f64, -0.999e16][(l + rank) % 3];
            }
        }
        let root0 = values(seed * 7 + 1000 + rank as u64, w.nroots[rank]);
        let ints: Vec<i64> = leaf.iter().map(|v| *v as i64).collect();
        let lanes: Vec<[u8; 3]> = leaf
            .iter()
            .map(|v| (*v as u32).to_le_bytes()[..3].try_into().unwrap())
            .collect();
        let seen = order_matters(&plain, &leaf, &root0);
        sensitive = [sensitive[0] | seen[0], sensitive[1] | seen[1]];
        // Two of the three node maps per graph (8 oversubscribed ranks are slow to set up).
        for nodes in [&maps[seed as usize % 3], &maps[(seed as usize + 1) % 3]] {
            for strategy in Strategy::ALL
                .into_iter()
                .chain([Strategy::Split { cap: 1 }])
            {
                let what = format!("seed {seed} {strategy:?} nodes {}", nodes.count());
                let sf = NodeAwareSf::new(&world, &g, opts, nodes, strategy).unwrap();
                let mut got_f = root0.clone();
                for op in [Op::Sum, Op::Replace, Op::Max] {
                    let (mut want, mut got) = (root0.clone(), root0.clone());
                    plain.reduce(&leaf, &mut want, op).unwrap();
                    sf.reduce(&leaf, &mut got, op).unwrap();
                    if !same_bits(&want, &got) {
                        fail(format!("{what} {op}: got {got:?} want {want:?}"));
                    }
                }
                let mut want = vec![3i64; w.nroots[rank]];
                let mut got = want.clone();
                plain.reduce(&ints, &mut want, Op::Prod).unwrap();
                sf.reduce(&ints, &mut got, Op::Prod).unwrap();
                if got != want {
                    fail(format!("{what} i64 prod: got {got:?} want {want:?}"));
                }
                let mut want = vec![[1u8; 3]; w.nroots[rank]];
                let mut got = want.clone();
                plain.reduce(&lanes, &mut want, Op::Bxor).unwrap();
                sf.reduce(&lanes, &mut got, Op::Bxor).unwrap();
                if got != want {
                    fail(format!("{what} [u8; 3] bxor: got {got:?} want {want:?}"));
                }
                // Relays fold integers from a neutral start: logic ops on values other than 0
                // and 1 (whose fold is 0 or 1), maxima of negatives, bitwise or (the unit
                // tests check every op's start).
                let small: Vec<i32> = ints.iter().map(|v| (v % 5) as i32 - 1).collect();
                let start: Vec<i32> = (0..w.nroots[rank]).map(|i| [0, 7, -3][i % 3]).collect();
                for op in [Op::Land, Op::Lor, Op::Max, Op::Bor] {
                    let (mut want, mut got) = (start.clone(), start.clone());
                    plain.reduce(&small, &mut want, op).unwrap();
                    sf.reduce(&small, &mut got, op).unwrap();
                    if got != want {
                        fail(format!("{what} i32 {op}: got {got:?} want {want:?}"));
                    }
                }
                // Integers fold backwards through the bcast's forests, floating point takes
                // the reverse route; folding sends no more values across nodes than the plain
                // forest, and fewer in the fan-in on nodes of several ranks, which share roots.
                let routed = strategy != Strategy::Standard;
                let ints_route = sf.reduce_route::<i64>(Op::Sum).unwrap();
                let floats_route = sf.reduce_route::<f64>(Op::Sum).unwrap();
                if !matches!(ints_route, ReduceRoute::Backward)
                    || matches!(floats_route, ReduceRoute::Reverse(_)) != routed
                {
                    fail(format!("{what}: integer sums should fold, float sums not"));
                }
                let plain_sends: Vec<(i32, usize)> = (plain.root_ranks().into_iter())
                    .map(|(r, plan)| (r, plan.len()))
                    .collect();
                let (folded, unfolded) = (
                    off_node_values(&world, nodes, &reduce_sends(&sf, ints_route)),
                    off_node_values(&world, nodes, &plain_sends),
                );
                let shared = nodes.count() > 1 && nodes.members(0).len() > 1;
                let fewer = seed == 2 && routed && shared;
                if folded > unfolded || (fewer && folded >= unfolded) {
                    fail(format!(
                        "{what}: folded reduce sends {folded} values across nodes, plain {unfolded}"
                    ));
                }
                // Fetch-and-op: the roots and every leaf's fetched value (on a one-relay and a
                // two-relay route only: each sets up a second route, slow on 8 ranks).
                let fetch = matches!(strategy, Strategy::TwoStep | Strategy::Split { cap: 1 });
                let (mut want, mut got) = (root0.clone(), root0.clone());
                let mut want_upd = vec![0.5f64; w.leaf_space[rank]];
                let mut got_upd = want_upd.clone();
                if fetch {
                    plain
                        .fetch_and_op(&mut want, &leaf, &mut want_upd, Op::Sum)
                        .unwrap();
                    sf.fetch_and_op(&mut got, &leaf, &mut got_upd, Op::Sum)
                        .unwrap();
                }
                if !same_bits(&want, &got) || !same_bits(&want_upd, &got_upd) {
                    fail(format!(
                        "{what} fetch-and-op: got {got:?} {got_upd:?} want {want:?} {want_upd:?}"
                    ));
                }
                // An operation the unit lacks is refused on every rank before anything moves.
                let refused = sf.reduce(&leaf, &mut got_f, Op::Band);
                if !matches!(refused, Err(SfError::UnsupportedOp { .. })) {
                    fail(format!("{what} f64 band: {refused:?}"));
                }
                // The reverse route keeps the strategy's message bounds.
                if let ReduceRoute::Reverse(route) = floats_route {
                    let forests: Vec<&StarForest> = route.forests().collect();
                    let off = OffNode::count(&world, nodes, &forests);
                    // One part under the default cap (these graphs are small), at most one
                    // per rank of the smaller node with `split:1`.
                    let tiny = strategy == Strategy::Split { cap: 1 };
                    let split_most = |k, to| if tiny { pair(nodes, k, to) } else { 1 };
                    if let Err(e) = off.check(strategy, split_most) {
                        fail(format!("{what}: reverse route {e}"));
                    }
                }
            }
        }
    }
    let mut any = [0u8; 2];
    let mine = sensitive.map(u8::from);
    world.all_reduce_into(&mine[..], &mut any[..], SystemOperation::max());
    if n > 1 && any.contains(&0) {
        fail(format!(
            "sums sensitive to reversal, rotation: {any:?}: the test cannot see order"
        ));
    }

    // The cost model's reduce predictions: finite, the same choice on every rank, and that
    // choice the fastest predicted.
    let nodes = Nodes::blocks(n, 2);
    let model = CostModel::calibrate(&world, &nodes).unwrap();
    let w = random_world(77 + n as u64, n);
    let (chosen, predictions) = model
        .choose_reduce::<f64, _>(
            &world,
            &w.graph(rank),
            SfOptions::default(),
            &nodes,
            Op::Sum,
        )
        .unwrap();
    let best = predictions
        .iter()
        .fold(f64::INFINITY, |m, p| m.min(p.seconds));
    let got = predictions.iter().find(|p| p.strategy == chosen.strategy());
    if got.is_none_or(|p| p.seconds != best) || predictions.iter().any(|p| !p.seconds.is_finite()) {
        fail(format!(
            "reduce: chose {:?} of {predictions:?}",
            chosen.strategy()
        ));
    }
    let mine = Strategy::ALL
        .iter()
        .position(|s| *s == chosen.strategy())
        .unwrap_or(usize::MAX) as u64;
    let mut first = mine;
    world.process_at_rank(0).broadcast_into(&mut first);
    if first != mine {
        fail(format!(
            "reduce choice differs from rank 0: {mine:?} vs {first:?}"
        ));
    }

    if !failures.is_empty() {
        panic!("{}", failures.join("\n"));
    }
    if rank == 0 {
        eprintln!("sf_node_aware_reduce child on {n} ranks: all checks passed");
    }
}
