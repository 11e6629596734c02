//! Node-aware bcasts and reduces: the off-node part of a forest routed through paired ranks so
//! that fewer, larger messages cross the network (Lockhart, Bienz, Gropp and Olson's 2-step,
//! 3-step and split).
//!
//! A route is a chain of ordinary star forests whose intermediate roots and leaves are relay
//! slots: values a rank holds on behalf of others, one slot per distinct root, so that a root
//! read by many leaves of a node crosses the network once. On-node edges go directly, by a
//! forest of their own. Building a chain is leaf-driven: each rank asks the next rank up its
//! path for the slots it needs (one request and one reply exchange per level).
//!
//! A reduce whose op combines in any grouping with the same bits (integers' ops but replace,
//! see [`neutral`]) runs the bcast's hops backwards as reduces: each relay folds what its
//! leaves send into its slots, so a node's leaves of one root cross the network as one value,
//! the bcast's bytes. Any other reduce (replace, floating point) runs as a bcast over the
//! inverse of the multi-SF: every leaf's value is carried, by the same strategy, to a slot of
//! its own at its root's rank, and the root combines its slots in the order a plain reduce
//! visits its leaves. Either way a routed reduce gives the plain forest's bits, floating-point
//! sums included. A fetch-and-op goes the second way, and its fetched values come back as a
//! reduce over that reverse route.

use crate::discovery::{self, Discovery};
use crate::error::SfError;
use crate::forest::{check_len, combine_unit, Access, Pending, SfOptions, StarForest};
use crate::graph::{Graph, RootRef};
use crate::raw;
use crate::unit::{neutral, reducer, Op, Scalar, Unit};
use mpi::collective::SystemOperation;
use mpi::topology::{Color, Communicator, SimpleCommunicator};
use mpi::traits::CommunicatorCollectives;
use std::cell::OnceCell;
use std::str::FromStr;

/// How the off-node part of a bcast travels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// One message from each root rank to each leaf rank.
    #[default]
    Standard,
    /// Each rank sends what a node needs of it to one paired rank there, which passes it on.
    TwoStep,
    /// A node's data for another node is gathered on one rank, sent as one message to the
    /// paired rank there, and passed on.
    ThreeStep,
    /// As 3-step, but a node's data for another node is cut into up to one part per rank of
    /// the smaller node, each part no larger than about `cap` units where it can be, and
    /// the parts cross from different ranks to different ranks, so that every rank injects.
    Split {
        /// Units per part that a pair of nodes' data is cut into (at least 1).
        cap: usize,
    },
}

impl Strategy {
    /// The split strategy's default part size: 2048 units (16 KiB of doubles), below the
    /// rendezvous threshold of common MPIs.
    pub const SPLIT_CAP: usize = 2048;

    /// Every strategy, in the order the cost model lists them.
    pub const ALL: [Strategy; 4] = [
        Strategy::Standard,
        Strategy::TwoStep,
        Strategy::ThreeStep,
        Strategy::Split {
            cap: Self::SPLIT_CAP,
        },
    ];

    /// Relay ranks between a root and an off-node leaf.
    fn relays(self) -> usize {
        match self {
            Strategy::Standard => 0,
            Strategy::TwoStep => 1,
            Strategy::ThreeStep | Strategy::Split { .. } => 2,
        }
    }

    /// The name used on the command line (`split:CAP` also parses).
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Standard => "standard",
            Strategy::TwoStep => "2-step",
            Strategy::ThreeStep => "3-step",
            Strategy::Split { .. } => "split",
        }
    }

    /// A number that differs between any two strategies.
    fn fingerprint(self) -> u64 {
        match self {
            Strategy::Split { cap } => 3u64.saturating_add(cap as u64),
            other => Strategy::ALL.iter().position(|s| *s == other).unwrap_or(0) as u64,
        }
    }
}

impl FromStr for Strategy {
    type Err = SfError;
    fn from_str(s: &str) -> Result<Self, SfError> {
        let cap = s.strip_prefix("split:").map(|c| c.parse::<usize>());
        let found = match cap {
            Some(Ok(cap)) if cap > 0 => Some(Strategy::Split { cap }),
            Some(_) => None,
            None => Strategy::ALL.into_iter().find(|t| t.name() == s),
        };
        found.ok_or_else(|| SfError::UnknownName {
            what: "strategy",
            got: s.to_string(),
            expected: "standard, 2-step, 3-step, split, split:CAP (CAP at least 1)",
        })
    }
}

/// Which ranks of a communicator share a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nodes {
    node: Vec<usize>,
    members: Vec<Vec<usize>>,
}

impl Nodes {
    /// The nodes as MPI sees them (ranks that can share memory). Collective.
    pub fn detect<C: Communicator>(comm: &C) -> Nodes {
        let local = comm.split_shared(comm.rank());
        // A node is named by its lowest rank.
        let mut leader = 0u64;
        local.all_reduce_into(&(comm.rank() as u64), &mut leader, SystemOperation::min());
        let mut leaders = vec![0u64; comm.size() as usize];
        comm.all_gather_into(&leader, &mut leaders[..]);
        Nodes::from_leaders(&leaders)
    }

    /// `size` ranks in nodes of `per_node` consecutive ranks (the last may be smaller): for
    /// trying node-aware routes on one machine.
    pub fn blocks(size: usize, per_node: usize) -> Nodes {
        let per = per_node.max(1) as u64;
        let leaders: Vec<u64> = (0..size as u64).map(|r| r / per * per).collect();
        Nodes::from_leaders(&leaders)
    }

    fn from_leaders(leaders: &[u64]) -> Nodes {
        let mut names: Vec<u64> = leaders.to_vec();
        names.sort_unstable();
        names.dedup();
        let node: Vec<usize> = leaders
            .iter()
            .map(|l| names.binary_search(l).unwrap_or(0))
            .collect();
        let mut members = vec![Vec::new(); names.len()];
        node.iter()
            .enumerate()
            .for_each(|(r, &n)| members[n].push(r));
        Nodes { node, members }
    }

    /// Number of nodes.
    pub fn count(&self) -> usize {
        self.members.len()
    }

    /// The node of `rank`.
    pub fn of(&self, rank: usize) -> usize {
        self.node[rank]
    }

    /// The ranks of node `n`, ascending.
    pub fn members(&self, n: usize) -> &[usize] {
        &self.members[n]
    }

    /// Every rank's error unless the map covers the communicator and is the same everywhere.
    /// Collective.
    pub fn check<C: Communicator>(&self, comm: &C) -> Result<(), SfError> {
        let comm = comm.duplicate();
        let size = comm.size() as usize;
        let check = match self.node.len() {
            n if n != size => Err(SfError::NodeMapSize { ranks: n, size }),
            _ => Ok(()),
        };
        discovery::agree(&comm, check)?;
        let sig = discovery::fingerprint(self.node.iter().map(|&n| n as u64));
        discovery::agree(&comm, discovery::same_everywhere(&comm, sig, "node maps"))
    }

    fn local_index(&self, rank: usize) -> usize {
        let m = &self.members[self.node[rank]];
        m.binary_search(&rank).unwrap_or(0)
    }

    /// The rank of node `n` paired with index `i` (wrapping round the node's ranks).
    fn pick(&self, n: usize, i: usize) -> usize {
        let m = &self.members[n];
        m[i % m.len()]
    }
}

/// The relays of a strategy over a node map.
struct Route<'a> {
    nodes: &'a Nodes,
    strategy: Strategy,
    /// Split: how many parts the data from each node to this rank's node is cut into.
    parts: Vec<usize>,
}

impl<'a> Route<'a> {
    /// Collective for `Split` (the off-node reads of each node's ranks are summed there).
    fn new(comm: &SimpleCommunicator, nodes: &'a Nodes, strategy: Strategy, graph: &Graph) -> Self {
        let mut parts = Vec::new();
        if let Strategy::Split { cap } = strategy {
            let count = nodes.count();
            let here = nodes.of(comm.rank() as usize);
            // The distinct values this rank reads from each node: a slight overcount of a
            // pair's data, which ranks of one node may share.
            let mut reads: Vec<[u64; 2]> = graph
                .iremote
                .iter()
                .map(|r| [r.rank as u64, r.offset])
                .filter(|[r, _]| nodes.of(*r as usize) != here)
                .collect();
            reads.sort_unstable();
            reads.dedup();
            let mut mine = vec![0u64; count];
            for [r, _] in reads {
                mine[nodes.of(r as usize)] += 1;
            }
            // Summed over this node's ranks only: a path is only ever asked for by a rank of
            // the node the value goes to, so each node keeps its own column.
            let node = comm
                .split_by_color(Color::with_value(here as i32))
                .expect("every rank has a colour");
            let mut volume = vec![0u64; count];
            node.all_reduce_into(&mine[..], &mut volume[..], SystemOperation::sum());
            parts = volume
                .iter()
                .enumerate()
                .map(|(from, &v)| {
                    let most = nodes.members[from].len().min(nodes.members[here].len());
                    (v as usize).div_ceil(cap.max(1)).clamp(1, most)
                })
                .collect();
        }
        Route {
            nodes,
            strategy,
            parts,
        }
    }

    /// The relay ranks the value `item` (root rank and offset) passes through on its way to
    /// node `to`, in order; empty when it goes directly.
    fn path(&self, item: [u64; 2], to: usize) -> Vec<usize> {
        let n = self.nodes;
        let r = item[0] as usize;
        let from = n.node[r];
        match self.strategy {
            _ if from == to => Vec::new(),
            Strategy::Standard => Vec::new(),
            Strategy::TwoStep => vec![n.pick(to, n.local_index(r))],
            Strategy::ThreeStep => vec![n.pick(from, to), n.pick(to, from)],
            Strategy::Split { .. } => {
                // Part by a hash of the value; senders counted down from the node's last
                // rank, receivers up from its first, shifted per pair so that every rank of a
                // node takes a share when it talks to many nodes.
                // Paths are asked for only by ranks of node `to`, whose parts these are.
                let k = self.parts[from];
                let h = (item[0].wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ item[1])
                    .wrapping_mul(0xBF58_476D_1CE4_E5B9);
                let part = ((h >> 32) % k as u64) as usize;
                let senders = n.members[from].len();
                let sender = senders - 1 - (part + to) % senders;
                vec![n.pick(from, sender), n.pick(to, part + from)]
            }
        }
    }
}

/// A forest whose bcasts and reduces take a node-aware route.
///
/// Set up from the same graph as a [`StarForest`] and giving the same bits, it moves on-node
/// edges directly (started by [`bcast_begin`](Self::bcast_begin)) and the off-node ones
/// through relay ranks (in [`RoutedPending::end`]). Begin bcasts in the same order on every
/// rank and end them in that order too (the relays send at the end). Reduces and
/// fetch-and-ops are blocking; the first that needs the reverse route sets it up (collective,
/// before any check of the caller's buffers), and an op the unit lacks is refused on every
/// rank first.
pub struct NodeAwareSf {
    strategy: Strategy,
    direct: StarForest,
    /// Relay hops, first (from the roots) to last (into the leaves).
    hops: Vec<StarForest>,
    nodes: Nodes,
    /// The graph and options it was set up with, for the reverse route.
    graph: Graph,
    opts: SfOptions,
    gather: OnceCell<Box<Gather>>,
}

/// The reverse route of a [`NodeAwareSf`]: a node-aware bcast from the leaves to the multi-roots
/// (one per edge, at the root's rank), and where each root's multi-roots start.
struct Gather {
    route: NodeAwareSf,
    offsets: Vec<usize>,
}

impl Gather {
    /// Every leaf's value in its own slot at its root's rank: a bcast through the route.
    fn slots<U: Unit>(&self, leaf: &[U]) -> Result<Vec<U>, SfError> {
        let mut slots = vec![U::zeroed(); self.offsets.last().copied().unwrap_or(0)];
        self.route.bcast(leaf, &mut slots, Op::Replace)?;
        Ok(slots)
    }
}

impl NodeAwareSf {
    /// Sets up the route of `strategy` for `graph` over `nodes`. Collective.
    pub fn new<C: Communicator>(
        comm: &C,
        graph: &Graph,
        opts: SfOptions,
        nodes: &Nodes,
        strategy: Strategy,
    ) -> Result<Self, SfError> {
        let comm = comm.duplicate();
        let (rank, size) = (comm.rank() as usize, comm.size() as usize);
        nodes.check(&comm)?;
        discovery::agree(
            &comm,
            discovery::same_everywhere(&comm, strategy.fingerprint(), "strategies"),
        )?;
        discovery::agree(&comm, graph.check_local(rank as i32, size))?;
        let here = nodes.of(rank);
        let route = Route::new(&comm, nodes, strategy, graph);
        let mut direct = (Vec::new(), Vec::new());
        // Off-node edges: leaf, item (root rank and offset) and the relays on its way here.
        let mut routed: Vec<(usize, [u64; 2], Vec<usize>)> = Vec::new();
        for (i, r) in graph.iremote.iter().enumerate() {
            let path = route.path([r.rank as u64, r.offset], here);
            if path.is_empty() {
                direct.0.push(graph.leaf_index(i));
                direct.1.push(*r);
            } else {
                routed.push((graph.leaf_index(i), [r.rank as u64, r.offset], path));
            }
        }
        let g = Graph::new(graph.nroots, Some(direct.0), direct.1);
        let direct = StarForest::new(&comm, &g, opts)?;
        // Relay levels 1 (nearest the roots) to `depth` (nearest the leaves); the hops between
        // them are built from the leaves up, each level asking the one above for slots.
        let depth = strategy.relays();
        let mut graphs = Vec::new();
        if depth > 0 {
            let mut asks: Vec<(usize, [u64; 2])> = routed
                .iter()
                .map(|(_, item, path)| (path[depth - 1], *item))
                .collect();
            let mut ilocal = Some(routed.iter().map(|(l, ..)| *l).collect());
            for k in (1..=depth).rev() {
                let (held, slots) = request(&comm, opts.discovery, &asks)?;
                let iremote = asks
                    .iter()
                    .zip(slots)
                    .map(|((relay, _), slot)| RootRef {
                        rank: *relay as i64,
                        offset: slot as u64,
                    })
                    .collect();
                graphs.push(Graph::new(held.len(), ilocal.take(), iremote));
                // What this rank holds at level k it asks of level k - 1 (the roots at 0).
                asks = held
                    .into_iter()
                    .map(|item| match k {
                        1 => (item[0] as usize, item),
                        _ => (route.path(item, here)[k - 2], item),
                    })
                    .collect();
            }
            let iremote = asks
                .iter()
                .map(|(_, [rank, offset])| RootRef {
                    rank: *rank as i64,
                    offset: *offset,
                })
                .collect();
            graphs.push(Graph::new(graph.nroots, None, iremote));
        }
        let hops = graphs
            .iter()
            .rev()
            .map(|g| StarForest::new(&comm, g, opts))
            .collect::<Result<_, _>>()?;
        Ok(NodeAwareSf {
            strategy,
            direct,
            hops,
            nodes: nodes.clone(),
            graph: graph.clone(),
            opts,
            gather: OnceCell::new(),
        })
    }

    /// The strategy it routes by.
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// The forests a bcast runs through, direct first, then the hops from the roots down.
    pub fn forests(&self) -> impl Iterator<Item = &StarForest> {
        std::iter::once(&self.direct).chain(&self.hops)
    }

    /// The node map it was set up with.
    pub fn nodes(&self) -> &Nodes {
        &self.nodes
    }

    /// Starts a bcast (`leaf = leaf op root`): the on-node edges now, the routed ones at
    /// [`RoutedPending::end`].
    pub fn bcast_begin<'a, U: Unit>(
        &'a self,
        root: &'a [U],
        leaf: &'a mut [U],
        op: Op,
    ) -> Result<RoutedPending<'a, U>, SfError> {
        self.start_bcast(root, leaf, op, Access::Staged)
    }

    /// [`bcast_begin`](Self::bcast_begin), the on-node edges moved in place where `access`
    /// allows.
    fn start_bcast<'a, U: Unit>(
        &'a self,
        root: &'a [U],
        leaf: &'a mut [U],
        op: Op,
        access: Access,
    ) -> Result<RoutedPending<'a, U>, SfError> {
        self.in_step(|| {
            check_len("rootdata", root.len(), self.graph.nroots)?;
            check_len("leafdata", leaf.len(), self.graph.leaf_space())?;
            match self.hops.last() {
                Some(last) => check_len("leafdata", leaf.len(), last.leaf_space()),
                None => Ok(()),
            }
        })?;
        let direct = self.direct.start_bcast(root, leaf, op, access)?;
        Ok(RoutedPending {
            sf: self,
            root,
            op,
            direct: Some(direct),
        })
    }

    /// [`bcast_begin`](Self::bcast_begin) and its end.
    pub fn bcast<U: Unit>(&self, root: &[U], leaf: &mut [U], op: Op) -> Result<(), SfError> {
        self.start_bcast(root, leaf, op, Access::InPlace)?.end()
    }

    /// Combines leaf values into their roots (`root = root op leaf`), the off-node ones along
    /// the strategy's route run backwards, with the plain forest's bits: each root combines its
    /// own rank's leaves first, then the other ranks' in ascending rank order, each rank's in
    /// ascending leaf index. The standard route's reduce is the plain forest's. Routed, where
    /// `op` has a [`neutral`] start for `U`, relays fold on the way (the bcast's hops,
    /// reversed); otherwise each leaf's value travels alone, by a reverse route the first such
    /// call sets up. Collective.
    pub fn reduce<U: Unit>(&self, leaf: &[U], root: &mut [U], op: Op) -> Result<(), SfError> {
        // The op's verdict is the same on every rank; the set-up is collective, so it comes
        // before the checks of this rank's buffers (but never on a route out of step).
        self.in_step(|| Ok(()))?;
        let red = reducer::<U>(op)?;
        let checks = || {
            check_len("leafdata", leaf.len(), self.graph.leaf_space())?;
            check_len("rootdata", root.len(), self.graph.nroots)
        };
        if let ReduceRoute::Backward = self.reduce_route::<U>(op)? {
            self.in_step(checks)?;
            return self.fold_back(leaf, root, op);
        }
        let gather = self.gather()?;
        self.in_step(checks)?;
        let slots = gather.slots(leaf)?;
        for (r, w) in root.iter_mut().zip(gather.offsets.windows(2)) {
            slots[w[0]..w[1]]
                .iter()
                .for_each(|v| combine_unit(r, v, red));
        }
        Ok(())
    }

    /// The bcast's forests run backwards as reduces, relays folding from the [`neutral`]
    /// start: the on-node edges, then the hops from the leaves up, the last into the roots.
    fn fold_back<U: Unit>(&self, leaf: &[U], root: &mut [U], op: Op) -> Result<(), SfError> {
        let mut first = self.direct.reduce(leaf, root, op);
        let Some((into_roots, relays)) = self.hops.split_first() else {
            return first;
        };
        // Routed strategies come here only for ops with a neutral start (`reduce_route`), so
        // this refusal, the same on every rank, never happens.
        let start = neutral::<U>(op).ok_or(SfError::UnsupportedOp {
            op,
            unit: <U::Scalar as Scalar>::NAME,
        })?;
        // Every hop runs even after an error here, since peers wait on this rank's relays.
        let mut held: Option<Vec<U>> = None;
        for hop in relays.iter().rev() {
            let mut up = vec![start; hop.nroots()];
            let done = hop.reduce(held.as_deref().unwrap_or(leaf), &mut up, op);
            first = first.and(done);
            held = Some(up);
        }
        let done = into_roots.reduce(held.as_deref().unwrap_or(leaf), root, op);
        first.and(done)
    }

    /// A fetch-and-op by the route: each leaf's value is combined into its root (`root = root op
    /// leaf`) and `leafupdate` receives the root's value just before that leaf's turn, in the
    /// plain forest's order and with its bits. The leaves' values travel alone, by the reverse
    /// route of the reduces without a [`neutral`] start (set up by the first call that needs
    /// it); the fetched values go back along that route, as a reduce over it. Collective.
    pub fn fetch_and_op<U: Unit>(
        &self,
        root: &mut [U],
        leaf: &[U],
        leafupdate: &mut [U],
        op: Op,
    ) -> Result<(), SfError> {
        self.in_step(|| Ok(()))?;
        if self.strategy == Strategy::Standard {
            return self.direct.fetch_and_op(root, leaf, leafupdate, op);
        }
        let red = reducer::<U>(op)?;
        let gather = self.gather()?;
        self.in_step(|| {
            check_len("rootdata", root.len(), self.graph.nroots)?;
            check_len("leafdata", leaf.len(), self.graph.leaf_space())?;
            check_len("leafupdate", leafupdate.len(), self.graph.leaf_space())
        })?;
        let mut slots = gather.slots(leaf)?;
        for (r, w) in root.iter_mut().zip(gather.offsets.windows(2)) {
            for v in &mut slots[w[0]..w[1]] {
                let before = *r;
                combine_unit(r, v, red);
                *v = before;
            }
        }
        // Each leaf has exactly one slot, so replace hands it back that slot's value.
        gather.route.reduce(&slots, leafupdate, Op::Replace)
    }

    /// How [`reduce`](Self::reduce) carries `U` values combined by `op`: backwards through
    /// this forest's own forests for the standard route (the plain forest's reduce) and for
    /// ops with a [`neutral`] start, otherwise by the reverse route, which fetch-and-ops also
    /// take (set up here if it is not yet; collective then). An op the unit lacks is refused.
    pub fn reduce_route<U: Unit>(&self, op: Op) -> Result<ReduceRoute<'_>, SfError> {
        reducer::<U>(op)?;
        if self.strategy == Strategy::Standard || neutral::<U>(op).is_some() {
            return Ok(ReduceRoute::Backward);
        }
        Ok(ReduceRoute::Reverse(&self.gather()?.route))
    }

    /// Runs this rank's checks of a routed operation's buffers: refused once the route is out
    /// of step, and the first that fails puts every forest the route runs through out of step
    /// (see [`SfError::OutOfStep`]). The direct forest holds the route's state: it is put out
    /// of step with the others, and alone by a failed check of its own.
    fn in_step(&self, checks: impl FnOnce() -> Result<(), SfError>) -> Result<(), SfError> {
        self.direct
            .in_step(checks)
            .inspect_err(|_| self.set_out_of_step())
    }

    fn set_out_of_step(&self) {
        self.forests().for_each(StarForest::set_out_of_step);
        if let Some(g) = self.gather.get() {
            g.route.set_out_of_step();
        }
    }

    fn gather(&self) -> Result<&Gather, SfError> {
        if let Some(g) = self.gather.get() {
            return Ok(g);
        }
        let comm = self.direct.comm();
        let (inverse, offsets) = inverse_multi(comm, &self.graph, self.opts.discovery)?;
        let route = NodeAwareSf::new(comm, &inverse, self.opts, &self.nodes, self.strategy)?;
        Ok(self
            .gather
            .get_or_init(|| Box::new(Gather { route, offsets })))
    }
}

/// How a [`NodeAwareSf`]'s reduce travels ([`NodeAwareSf::reduce_route`]).
#[derive(Clone, Copy)]
pub enum ReduceRoute<'a> {
    /// Through the forest's own forests backwards (leaves sending to root ranks): the plain
    /// forest's reduce for the standard route; on a routed one, relays fold what they receive
    /// (ops with a [`neutral`] start only), so a node's leaves of one root cross the network
    /// as one value.
    Backward,
    /// As a bcast through this route, from the leaf space to one slot per edge at the roots'
    /// ranks; relays combine nothing.
    Reverse(&'a NodeAwareSf),
}

/// A node-aware bcast in flight.
#[must_use = "a bcast in flight completes at `end`"]
pub struct RoutedPending<'a, U: Unit> {
    sf: &'a NodeAwareSf,
    root: &'a [U],
    op: Op,
    direct: Option<Pending<'a, U>>,
}

impl<U: Unit> RoutedPending<'_, U> {
    /// Finishes the on-node edges, then moves the off-node values hop by hop.
    pub fn end(mut self) -> Result<(), SfError> {
        self.finish()
    }

    fn finish(&mut self) -> Result<(), SfError> {
        let Some(direct) = self.direct.take() else {
            return Ok(());
        };
        let leaf = direct.end_bcast();
        let Some((last, relays)) = self.sf.hops.split_last() else {
            return Ok(());
        };
        // Every hop runs even after an error here, since peers wait on this rank's relays.
        let mut held: Option<Vec<U>> = None;
        let mut first = Ok(());
        for hop in relays {
            let mut next = vec![U::zeroed(); hop.leaf_space()];
            let done = hop.bcast(held.as_deref().unwrap_or(self.root), &mut next, Op::Replace);
            first = first.and(done);
            held = Some(next);
        }
        let done = last.bcast(held.as_deref().unwrap_or(self.root), leaf, self.op);
        first.and(done)
    }
}

impl<U: Unit> Drop for RoutedPending<'_, U> {
    fn drop(&mut self) {
        // Peers wait on this rank's relays: finish even when dropped (errors were reported by
        // `end` to a caller who asked).
        let _ = self.finish();
    }
}

/// The inverse of `graph`'s multi-SF, from one exchange: its roots are this rank's leaf space,
/// its leaves the multi-roots of this rank's roots (one per edge, each naming its leaf),
/// ordered as a plain reduce visits them: by root, then the own rank's leaves, then the other
/// ranks' in ascending rank order, each rank's in ascending leaf index. Also where each root's
/// multi-roots start. Collective.
fn inverse_multi(
    comm: &SimpleCommunicator,
    graph: &Graph,
    method: Discovery,
) -> Result<(Graph, Vec<usize>), SfError> {
    let me = comm.rank();
    let mut edges: Vec<(i32, u64, u64)> = (0..graph.nleaves())
        .map(|i| {
            let r = graph.iremote[i];
            (r.rank as i32, r.offset, graph.leaf_index(i) as u64)
        })
        .collect();
    edges.sort_unstable();
    let mut outgoing: Vec<(i32, Vec<u64>)> = Vec::new();
    for &(r, offset, leaf) in edges.iter().filter(|e| e.0 != me) {
        match outgoing.last_mut() {
            Some((q, v)) if *q == r => v.extend([offset, leaf]),
            _ => outgoing.push((r, vec![offset, leaf])),
        }
    }
    let incoming = discovery::exchange(comm, raw::raw_comm(comm), method, &outgoing);
    // (root offset, 0 for the own rank and 1 for others, leaf rank, leaf index).
    let own = edges
        .iter()
        .filter(|e| e.0 == me)
        .map(|&(_, offset, leaf)| (offset, 0u8, me, leaf));
    let others = incoming
        .iter()
        .flat_map(|(src, v)| v.chunks_exact(2).map(move |c| (c[0], 1u8, *src, c[1])));
    let mut slots: Vec<(u64, u8, i32, u64)> = own.chain(others).collect();
    slots.sort_unstable();
    let nroots = graph.nroots;
    let bad = slots.iter().find(|s| s.0 as usize >= nroots);
    discovery::agree(comm, bad.map_or(Ok(()), |s| Err(SfError::PeerInvalid(s.2))))?;
    let mut offsets = vec![0usize; nroots + 1];
    for s in &slots {
        offsets[s.0 as usize + 1] += 1;
    }
    for i in 0..nroots {
        offsets[i + 1] += offsets[i];
    }
    let iremote = slots
        .iter()
        .map(|&(_, _, rank, leaf)| RootRef {
            rank: rank as i64,
            offset: leaf,
        })
        .collect();
    Ok((Graph::new(graph.leaf_space(), None, iremote), offsets))
}

/// One level of the route: sends each `(relay, item)` ask to its relay, and returns the items
/// this rank holds for others (sorted, each once) and the slot each ask got there.
fn request(
    comm: &SimpleCommunicator,
    method: Discovery,
    asks: &[(usize, [u64; 2])],
) -> Result<(Vec<[u64; 2]>, Vec<usize>), SfError> {
    let me = comm.rank() as usize;
    let raw = raw::raw_comm(comm);
    let mut by_rank: Vec<(usize, Vec<[u64; 2]>)> = Vec::new();
    let mut sorted: Vec<(usize, [u64; 2])> = asks.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    for (r, item) in sorted {
        match by_rank.last_mut() {
            Some((q, items)) if *q == r => items.push(item),
            _ => by_rank.push((r, vec![item])),
        }
    }
    let flat = |items: &[[u64; 2]]| items.iter().flatten().copied().collect::<Vec<u64>>();
    let outgoing: Vec<(i32, Vec<u64>)> = by_rank
        .iter()
        .filter(|(r, _)| *r != me)
        .map(|(r, items)| (*r as i32, flat(items)))
        .collect();
    let incoming = discovery::exchange(comm, raw, method, &outgoing);
    // Exchanges share a tag: no rank may post replies while another still takes asks.
    comm.barrier();
    let own = by_rank
        .iter()
        .find(|(r, _)| *r == me)
        .map(|(_, i)| i.clone());
    let mut held: Vec<[u64; 2]> = incoming
        .iter()
        .flat_map(|(_, v)| v.chunks_exact(2).map(|c| [c[0], c[1]]))
        .chain(own.iter().flatten().copied())
        .collect();
    held.sort_unstable();
    held.dedup();
    let slot = |item: &[u64; 2]| held.binary_search(item).unwrap_or(0) as u64;
    let replies: Vec<(i32, Vec<u64>)> = incoming
        .iter()
        .map(|(src, v)| {
            (
                *src,
                v.chunks_exact(2).map(|c| slot(&[c[0], c[1]])).collect(),
            )
        })
        .collect();
    let answers = discovery::exchange(comm, raw, method, &replies);
    comm.barrier();
    // Each asked rank answers in the order asked.
    let mut found: Vec<((usize, [u64; 2]), usize)> = Vec::new();
    let mut short = Ok(());
    for (r, items) in &by_rank {
        let got: Vec<usize> = match *r == me {
            true => items.iter().map(|i| slot(i) as usize).collect(),
            false => answers
                .iter()
                .find(|(src, _)| *src as usize == *r)
                .map(|(_, v)| v.iter().map(|&s| s as usize).collect())
                .unwrap_or_default(),
        };
        if got.len() != items.len() {
            short = short.and(Err(SfError::PeerInvalid(*r as i32)));
        }
        found.extend(items.iter().map(|i| (*r, *i)).zip(got));
    }
    discovery::agree(comm, short)?;
    let slots = asks
        .iter()
        .map(|a| {
            found
                .binary_search_by(|(k, _)| k.cmp(a))
                .map_or(0, |i| found[i].1)
        })
        .collect();
    Ok((held, slots))
}
