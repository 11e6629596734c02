//! The postal and max-rate models of a node-aware bcast or reduce, with parameters measured on
//! the running machine, and the choice of the strategy they predict fastest.
//!
//! A message of `s` bytes costs `alpha + beta * s` (postal). Off-node, a rank's traffic is
//! also bounded by its node's injection rate: `alpha * m + max(s_node / rate, beta * s)`
//! (max-rate), where `s_node` is what all ranks of the node inject. A bcast's time on a rank
//! is the sum over the forests it runs through, each adding a fixed software overhead; the
//! prediction is the largest over ranks. A reduce is priced by the path it takes: the same
//! forests backwards (messages from leaf ranks to root ranks), or a bcast through its reverse
//! route.

use crate::error::SfError;
use crate::forest::{SfOptions, StarForest};
use crate::graph::Graph;
use crate::node_aware::{NodeAwareSf, Nodes, ReduceRoute, Strategy};
use crate::plan::Plan;
use crate::unit::{Op, Unit};
use mpi::collective::SystemOperation;
use mpi::topology::Communicator;
use mpi::traits::{CommunicatorCollectives, Destination, Root, Source};
use std::time::Instant;

/// Latency (s) and inverse bandwidth (s per byte) of one message.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Postal {
    pub alpha: f64,
    pub beta: f64,
}

impl Postal {
    /// Time of `m` messages carrying `s` bytes in all.
    pub fn time(&self, m: usize, s: usize) -> f64 {
        self.alpha * m as f64 + self.beta * s as f64
    }
}

/// The parameters of both models.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostModel {
    /// Between ranks on one node.
    pub on_node: Postal,
    /// Between ranks on different nodes.
    pub off_node: Postal,
    /// Bytes per second one node can inject into the network (`R_N`); infinite reduces the
    /// max-rate model to the postal one.
    pub node_rate: f64,
    /// Seconds a bcast spends in each forest it runs through whatever it moves (the call, its
    /// bookkeeping and the buffers of a relay): what makes a route of three forests dearer
    /// than one when messages are few and small.
    pub per_forest: f64,
}

/// What one rank sends in one forest's bcast.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Load {
    pub on_msgs: usize,
    pub on_bytes: usize,
    pub off_msgs: usize,
    pub off_bytes: usize,
    /// Off-node bytes sent by every rank of this rank's node together.
    pub node_off_bytes: usize,
}

/// One strategy's predicted and (when asked) measured time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prediction {
    pub strategy: Strategy,
    /// Seconds, the largest over ranks.
    pub seconds: f64,
}

impl CostModel {
    /// The time of one forest's bcast on a rank with this load.
    pub fn time(&self, load: &Load) -> f64 {
        let off = self.off_node.alpha * load.off_msgs as f64
            + (load.node_off_bytes as f64 / self.node_rate)
                .max(self.off_node.beta * load.off_bytes as f64);
        self.on_node.time(load.on_msgs, load.on_bytes) + off
    }

    /// The predicted time of a bcast of `unit_bytes`-byte units through `sf`, the largest over
    /// ranks. Collective.
    pub fn predict(&self, sf: &NodeAwareSf, unit_bytes: usize) -> f64 {
        // The node map was checked when `sf` was made.
        self.predict_by(sf, |f| load_of(f, sf.nodes(), unit_bytes, f.leaf_ranks()))
    }

    /// The predicted time of a reduce of `U` by `op` through `sf`, by the route
    /// [`NodeAwareSf::reduce_route`] names: the bcast's forests backwards (leaves sending to
    /// root ranks), or a bcast through the reverse route. Collective (it may set up the
    /// reverse route).
    pub fn predict_reduce<U: Unit>(&self, sf: &NodeAwareSf, op: Op) -> Result<f64, SfError> {
        let unit_bytes = std::mem::size_of::<U>();
        Ok(match sf.reduce_route::<U>(op)? {
            ReduceRoute::Backward => {
                self.predict_by(sf, |f| load_of(f, sf.nodes(), unit_bytes, f.root_ranks()))
            }
            ReduceRoute::Reverse(route) => self.predict(route, unit_bytes),
        })
    }

    /// The sum over `sf`'s forests of each one's overhead and its time under `load`, the
    /// largest over ranks. Collective.
    fn predict_by(&self, sf: &NodeAwareSf, load: impl Fn(&StarForest) -> Load) -> f64 {
        let comm = sf.forests().next().map(StarForest::comm);
        let Some(comm) = comm else { return 0.0 };
        let mine: f64 = sf
            .forests()
            .map(|f| self.per_forest + self.time(&load(f)))
            .sum();
        slowest(comm, mine)
    }

    /// Sets up every strategy for `graph`, predicts each one's bcast, and keeps the fastest (the
    /// first of equals, so standard wins ties). Collective; every rank makes the same choice.
    pub fn choose<C: Communicator>(
        &self,
        comm: &C,
        graph: &Graph,
        opts: SfOptions,
        nodes: &Nodes,
        unit_bytes: usize,
    ) -> Result<(NodeAwareSf, Vec<Prediction>), SfError> {
        self.choose_by(comm, graph, opts, nodes, |sf| {
            Ok(self.predict(sf, unit_bytes))
        })
    }

    /// [`choose`](Self::choose) by the predicted reduces of `U` by `op`.
    pub fn choose_reduce<U: Unit, C: Communicator>(
        &self,
        comm: &C,
        graph: &Graph,
        opts: SfOptions,
        nodes: &Nodes,
        op: Op,
    ) -> Result<(NodeAwareSf, Vec<Prediction>), SfError> {
        self.choose_by(comm, graph, opts, nodes, |sf| {
            self.predict_reduce::<U>(sf, op)
        })
    }

    fn choose_by<C: Communicator>(
        &self,
        comm: &C,
        graph: &Graph,
        opts: SfOptions,
        nodes: &Nodes,
        predict: impl Fn(&NodeAwareSf) -> Result<f64, SfError>,
    ) -> Result<(NodeAwareSf, Vec<Prediction>), SfError> {
        let mut best: Option<(NodeAwareSf, f64)> = None;
        let mut all = Vec::new();
        for strategy in Strategy::ALL {
            let sf = NodeAwareSf::new(comm, graph, opts, nodes, strategy)?;
            let seconds = predict(&sf)?;
            all.push(Prediction { strategy, seconds });
            if best.as_ref().is_none_or(|(_, t)| seconds < *t) {
                best = Some((sf, seconds));
            }
        }
        let (sf, _) = best.expect("Strategy::ALL is not empty");
        Ok((sf, all))
    }

    /// Measures the parameters by ping-pong: rank 0 with the next rank on its node (on-node)
    /// and with the first rank of the next node (off-node), and the injection rate as the
    /// bytes every rank of node 0 sends at once to the next node, per second; the per-forest
    /// overhead is the slowest rank's bcast through a forest of one self edge. A pair that
    /// does not exist takes the other's figures; rank 0's results go to every rank.
    /// Collective.
    pub fn calibrate<C: Communicator>(comm: &C, nodes: &Nodes) -> Result<CostModel, SfError> {
        nodes.check(comm)?;
        let rank = comm.rank() as usize;
        let on_peer = nodes.members(nodes.of(0)).get(1).copied();
        let off_peer = (nodes.count() > 1).then(|| nodes.members(1)[0]);
        let on = on_peer.map(|p| pingpong(comm, rank, p));
        let off = off_peer.map(|p| pingpong(comm, rank, p));
        let fallback = Postal {
            alpha: 1e-6,
            beta: 1e-10,
        };
        let on_node = on.or(off).unwrap_or(fallback);
        let off_node = off.or(on).unwrap_or(fallback);
        let node_rate = match nodes.count() > 1 {
            true => injection_rate(comm, nodes),
            false => f64::INFINITY,
        };
        let per_forest = forest_overhead(comm);
        let mut params = [
            on_node.alpha,
            on_node.beta,
            off_node.alpha,
            off_node.beta,
            node_rate,
            per_forest,
        ];
        comm.process_at_rank(0).broadcast_into(&mut params[..]);
        Ok(CostModel {
            on_node: Postal {
                alpha: params[0],
                beta: params[1],
            },
            off_node: Postal {
                alpha: params[2],
                beta: params[3],
            },
            node_rate: params[4],
            per_forest: params[5],
        })
    }
}

/// What this rank sends in a bcast through `sf`: one message per remote leaf rank.
/// Collective; a node map that does not fit `sf`'s communicator (or differs between ranks) is
/// an error on every rank.
pub fn load(sf: &StarForest, nodes: &Nodes, unit_bytes: usize) -> Result<Load, SfError> {
    nodes.check(sf.comm())?;
    Ok(load_of(sf, nodes, unit_bytes, sf.leaf_ranks()))
}

/// The largest of every rank's `mine`. Collective.
fn slowest(comm: &impl Communicator, mine: f64) -> f64 {
    let mut worst = 0.0f64;
    comm.all_reduce_into(&mine, &mut worst, SystemOperation::max());
    worst
}

/// What this rank sends to `peers` (each with the plan of what goes there). Collective.
fn load_of(sf: &StarForest, nodes: &Nodes, unit_bytes: usize, peers: Vec<(i32, &Plan)>) -> Load {
    let me = sf.comm().rank() as usize;
    let mut l = Load::default();
    for (r, plan) in peers {
        let (r, bytes) = (r as usize, plan.len() * unit_bytes);
        match r {
            _ if r == me => {}
            _ if nodes.of(r) == nodes.of(me) => {
                l.on_msgs += 1;
                l.on_bytes += bytes;
            }
            _ => {
                l.off_msgs += 1;
                l.off_bytes += bytes;
            }
        }
    }
    let mut each = vec![0u64; sf.comm().size() as usize];
    sf.comm()
        .all_gather_into(&(l.off_bytes as u64), &mut each[..]);
    l.node_off_bytes = nodes
        .members(nodes.of(me))
        .iter()
        .map(|&r| each[r] as usize)
        .sum();
    l
}

const SMALL: usize = 8;
const LARGE: usize = 1 << 16;
const ROUNDS: usize = 50;

/// One-way postal parameters between rank 0 and `peer`, fitted through a small and a large
/// message (measured on rank 0; other ranks return zeros).
fn pingpong<C: Communicator>(comm: &C, rank: usize, peer: usize) -> Postal {
    let mut one_way = [0.0; 2];
    for (k, size) in [SMALL, LARGE].into_iter().enumerate() {
        let mut buf = vec![0u8; size];
        let mut rounds = Vec::with_capacity(ROUNDS);
        comm.barrier();
        for _ in 0..ROUNDS {
            let t0 = Instant::now();
            match rank {
                0 => {
                    comm.process_at_rank(peer as i32).send(&buf[..]);
                    comm.process_at_rank(peer as i32).receive_into(&mut buf[..]);
                }
                r if r == peer => {
                    comm.process_at_rank(0).receive_into(&mut buf[..]);
                    comm.process_at_rank(0).send(&buf[..]);
                }
                _ => {}
            }
            rounds.push(t0.elapsed().as_secs_f64() / 2.0);
        }
        // The median: one descheduled round must not set the latency.
        rounds.sort_by(f64::total_cmp);
        one_way[k] = rounds[ROUNDS / 2];
    }
    let beta = ((one_way[1] - one_way[0]) / (LARGE - SMALL) as f64).max(0.0);
    Postal {
        alpha: (one_way[0] - beta * SMALL as f64).max(0.0),
        beta,
    }
}

/// The median time of a bcast through a forest whose one edge stays on its rank, the
/// slowest rank's.
fn forest_overhead<C: Communicator>(comm: &C) -> f64 {
    let me = comm.rank();
    let g = Graph::new(
        1,
        None,
        vec![crate::graph::RootRef {
            rank: i64::from(me),
            offset: 0,
        }],
    );
    let Ok(sf) = StarForest::new(comm, &g, SfOptions::default()) else {
        return 0.0;
    };
    let (root, mut leaf) = ([1.0f64], [0.0f64]);
    let mut rounds: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let t0 = Instant::now();
            let _ = sf.bcast(&root, &mut leaf, crate::unit::Op::Replace);
            t0.elapsed().as_secs_f64()
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    slowest(comm, rounds[ROUNDS / 2])
}

/// Bytes per second node 0 injects when each of its ranks sends a large message to a rank of
/// node 1 at once (measured on rank 0).
fn injection_rate<C: Communicator>(comm: &C, nodes: &Nodes) -> f64 {
    let rank = comm.rank() as usize;
    let (from, to) = (nodes.members(0), nodes.members(1));
    let pairs: Vec<(usize, usize)> = from
        .iter()
        .zip(to.iter().cycle())
        .map(|(&a, &b)| (a, b))
        .collect();
    let mut buf = vec![0u8; LARGE * 4];
    comm.barrier();
    let t0 = Instant::now();
    for _ in 0..ROUNDS / 5 {
        for &(a, b) in &pairs {
            if rank == a {
                comm.process_at_rank(b as i32).send(&buf[..]);
            }
        }
        // A receiver may be paired with several senders: take them in sender order.
        for &(a, b) in &pairs {
            if rank == b {
                comm.process_at_rank(a as i32).receive_into(&mut buf[..]);
            }
        }
    }
    comm.barrier();
    let seconds = t0.elapsed().as_secs_f64();
    (pairs.len() * buf.len() * (ROUNDS / 5)) as f64 / seconds.max(1e-9)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> CostModel {
        CostModel {
            on_node: Postal {
                alpha: 1e-6,
                beta: 1e-10,
            },
            off_node: Postal {
                alpha: 5e-6,
                beta: 1e-9,
            },
            node_rate: 4e9,
            per_forest: 1e-6,
        }
    }

    #[test]
    fn postal_below_the_injection_limit_and_max_rate_above() {
        let m = model();
        let load = Load {
            on_msgs: 2,
            on_bytes: 1000,
            off_msgs: 3,
            off_bytes: 1_000_000,
            node_off_bytes: 1_000_000,
        };
        let postal = 2e-6 + 1e-7 + 15e-6 + 1e-3;
        assert!((m.time(&load) - postal).abs() < 1e-12);
        // Four ranks of the node inject 40 MB at once: the node's rate bounds it.
        let crowded = Load {
            node_off_bytes: 40_000_000,
            ..load
        };
        let max_rate = 2e-6 + 1e-7 + 15e-6 + 40e6 / 4e9;
        assert!((m.time(&crowded) - max_rate).abs() < 1e-12);
    }

    #[test]
    fn fewer_larger_messages_win_when_latency_dominates() {
        let m = model();
        let many = Load {
            off_msgs: 16,
            off_bytes: 16 * 64,
            node_off_bytes: 4 * 16 * 64,
            ..Load::default()
        };
        let aggregated = Load {
            on_msgs: 3,
            on_bytes: 3 * 4 * 64,
            off_msgs: 1,
            off_bytes: 16 * 64,
            node_off_bytes: 16 * 64,
        };
        assert!(m.time(&aggregated) < m.time(&many));
    }
}
