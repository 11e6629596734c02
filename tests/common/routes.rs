//! Off-node messages of node-aware routes, counted on every rank, and the bounds each
//! strategy promises: for the bcast and the reduce route tests.

use starhalo_sf::mpi::topology::{Communicator, SimpleCommunicator};
use starhalo_sf::mpi::traits::CommunicatorCollectives;
use starhalo_sf::{Nodes, StarForest, Strategy};

/// The off-node messages of one bcast through a route's forests.
pub struct OffNode<'a> {
    nodes: &'a Nodes,
    rank: usize,
    /// This rank's messages to other nodes, per forest of the route.
    pub per_forest: Vec<usize>,
    /// Every rank's messages to each node: `all[rank * nodes + to]`.
    pub all: Vec<usize>,
    /// The other-node ranks this rank sends to in the route's middle hop (forest 2).
    middle: Vec<usize>,
}

impl<'a> OffNode<'a> {
    /// Collective.
    pub fn count(world: &SimpleCommunicator, nodes: &'a Nodes, forests: &[&StarForest]) -> Self {
        let rank = world.rank() as usize;
        let mut mine = vec![0usize; nodes.count()];
        let mut per_forest = Vec::new();
        let mut middle = Vec::new();
        for (i, f) in forests.iter().enumerate() {
            let off: Vec<usize> = f
                .leaf_ranks()
                .into_iter()
                .map(|(r, _)| nodes.of(r as usize))
                .filter(|&to| to != nodes.of(rank))
                .collect();
            off.iter().for_each(|&to| mine[to] += 1);
            per_forest.push(off.len());
            if i == 2 {
                let away = f.leaf_ranks().into_iter().map(|(r, _)| r as usize);
                middle.extend(away.filter(|&r| nodes.of(r) != nodes.of(rank)));
            }
        }
        let mut all = vec![0usize; world.size() as usize * nodes.count()];
        world.all_gather_into(&mine[..], &mut all[..]);
        OffNode {
            nodes,
            rank,
            per_forest,
            all,
            middle,
        }
    }

    /// Messages from every rank of node `k` to node `to`.
    pub fn between(&self, k: usize, to: usize) -> usize {
        let count = self.nodes.count();
        self.nodes
            .members(k)
            .iter()
            .map(|&r| self.all[r * count + to])
            .sum()
    }

    /// Whether the route keeps `strategy`'s promise: 3-step and split cross nodes in their
    /// middle hop only (direct forest, then root to sender, sender to receiver, receiver to
    /// leaf); 2-step sends each node at most one message per rank, 3-step at most one per pair
    /// of nodes, split at most `split_most(k, to)` from node `k` to node `to`.
    pub fn check(
        &self,
        strategy: Strategy,
        split_most: impl Fn(usize, usize) -> usize,
    ) -> Result<(), String> {
        let middle_only = self
            .per_forest
            .iter()
            .enumerate()
            .all(|(i, &c)| i == 2 || c == 0);
        if matches!(strategy, Strategy::ThreeStep | Strategy::Split { .. }) && !middle_only {
            return Err(format!(
                "off-node messages per forest {:?}",
                self.per_forest
            ));
        }
        // 3-step pairs node k's rank (to mod its size) with node to's rank (k mod its size), so
        // that every rank of a node takes a share of the other nodes.
        let paired = |n: usize, i: usize| {
            let m = self.nodes.members(n);
            m[i % m.len()]
        };
        let here = self.nodes.of(self.rank);
        let spread = self.middle.iter().all(|&q| {
            let to = self.nodes.of(q);
            q == paired(to, here) && self.rank == paired(here, to)
        });
        if strategy == Strategy::ThreeStep && !spread {
            return Err(format!(
                "3-step relays: rank {} sends across to {:?}",
                self.rank, self.middle
            ));
        }
        let count = self.nodes.count();
        let others = |to: usize| (0..count).filter(move |&k| k != to);
        let ok = (0..count).all(|to| match strategy {
            Strategy::Standard => true,
            Strategy::TwoStep => self.all[self.rank * count + to] <= 1,
            Strategy::ThreeStep => others(to).all(|k| self.between(k, to) <= 1),
            Strategy::Split { .. } => others(to).all(|k| self.between(k, to) <= split_most(k, to)),
        });
        match ok {
            true => Ok(()),
            false => Err(format!("off-node messages {:?}", self.all)),
        }
    }
}

/// Ranks of the smaller of nodes `k` and `to`: how many parts split may cut their data into.
pub fn pair(nodes: &Nodes, k: usize, to: usize) -> usize {
    nodes.members(k).len().min(nodes.members(to).len())
}
