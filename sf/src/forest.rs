//! The star forest: set-up from a graph, and the operations with begin and end halves.

use crate::algebra::MultiSf;
use crate::discovery::{self, Discovery};
use crate::error::SfError;
use crate::graph::Graph;
use crate::link::{self, Kind, Link};
use crate::plan::{PackPlan, Plan};
use crate::raw::{self, RawComm};
use crate::rma::{Rma, RmaShared};
use crate::transport::{Basic, Dir, Neighbor, NeighborGraphs, SfType, Side, Transport};
use crate::unit::{reducer, Op, Reducer, Unit};
use mpi::topology::{Communicator, SimpleCommunicator};
use starhalo_exec::{for_each_segment, Policy};
use std::cell::{Cell, OnceCell, RefCell};
use std::rc::Rc;

/// Choices made when a forest is set up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SfOptions {
    /// Reverse-discovery algorithm.
    pub discovery: Discovery,
    /// Implementation of remote traffic.
    pub sf_type: SfType,
    /// How packing loops run on the host.
    pub policy: Policy,
}

/// Remote peer ranks of one side, each with the local indices its message carries.
#[derive(Debug, Default)]
struct Peers {
    ranks: Vec<i32>,
    /// Unit offsets of each peer's segment in the staging buffer (`ranks.len() + 1` entries).
    offsets: Vec<usize>,
    plans: Vec<Plan>,
}

impl Peers {
    fn new(groups: Vec<(i32, Vec<usize>)>) -> Self {
        let mut p = Peers {
            offsets: vec![0],
            ..Peers::default()
        };
        for (rank, idx) in groups {
            p.ranks.push(rank);
            p.offsets.push(p.total() + idx.len());
            p.plans.push(Plan::new(&idx));
        }
        p
    }

    fn total(&self) -> usize {
        self.offsets.last().copied().unwrap_or(0)
    }

    fn len(&self) -> usize {
        self.ranks.len()
    }

    fn units(&self, i: usize) -> usize {
        self.offsets[i + 1] - self.offsets[i]
    }
}

/// A star forest over an MPI communicator (a duplicate of the one given, so its traffic never
/// mixes with the caller's).
///
/// Operations are collective over the forest's communicator and must be begun in the same
/// order on every rank (and fetch-and-ops, whose end sends, ended in the same order); several
/// may be in flight at once on different data. The data slices stay borrowed from `*_begin`
/// until [`Pending::end`], so they cannot be touched in between.
///
/// Reductions are deterministic: each root combines its own rank's leaves first, then the
/// other ranks' in ascending rank order, each rank's in ascending leaf index.
///
/// A begin half checks its arguments before any message moves. Those checks are local: if
/// one fails on one rank (a [`SfError::BufferTooShort`]), that rank's peers still run their
/// halves and wait for it, as MPI's and PETSc's collectives do with a bad argument on one
/// rank. Treat such an error as fatal for the job (return it from `main`: `mpiexec` then
/// stops the other ranks). The forest refuses every operation after it
/// with [`SfError::OutOfStep`], so that a message its peers sent for the failed operation is
/// never taken for a later one's.
///
/// Drop the forest before MPI is finalised (before the `Universe`): it frees its communicators
/// and persistent requests on drop.
pub struct StarForest {
    comm: SimpleCommunicator,
    raw: RawComm,
    opts: SfOptions,
    /// This rank's part of the graph, kept for the graph algebra (`algebra`).
    graph: Graph,
    leaf_space: usize,
    /// Remote ranks with leaves on my roots; indices are my roots.
    leaf_ranks: Peers,
    /// Remote ranks owning my leaves' roots; indices are my leaves.
    root_ranks: Peers,
    /// Edges within this rank, in matching order.
    self_roots: Plan,
    self_leaves: Plan,
    /// Root index from which remote reduce data may land in place: set when the remote roots
    /// form one contiguous range that no local edge touches.
    reduce_in_place: Option<usize>,
    /// What the links of its implementation share.
    shared: Shared,
    links: RefCell<Vec<Link>>,
    /// Set when a begin half's checks failed on this rank (see [`SfError::OutOfStep`]).
    out_of_step: Cell<bool>,
    /// The multi-SF, set up by the first gather or scatter.
    multi: OnceCell<Box<MultiSf>>,
}

/// What a forest's links share, per implementation: the graph communicators of a
/// [`SfType::Neighbor`] forest, the windows and signal rings of a [`SfType::Rma`] one.
enum Shared {
    Basic,
    Neighbor(NeighborGraphs),
    Rma(Rc<RmaShared>),
}

impl StarForest {
    /// Sets up a forest from this rank's part of the graph. Collective; an invalid graph on any
    /// rank is an error on every rank.
    ///
    /// ```no_run
    /// use starhalo_sf::{mpi, Graph, Op, RootRef, SfOptions, StarForest};
    /// let universe = mpi::initialize().unwrap();
    /// let world = universe.world();
    /// // One root per rank; one leaf reading the root of rank 0.
    /// let g = Graph::new(1, None, vec![RootRef { rank: 0, offset: 0 }]);
    /// let sf = StarForest::new(&world, &g, SfOptions::default()).unwrap();
    /// let root = [42.0f64];
    /// let mut leaf = [0.0f64];
    /// let pending = sf.bcast_begin(&root, &mut leaf, Op::Replace).unwrap();
    /// // ... independent work here; `root` and `leaf` cannot be touched ...
    /// pending.end();
    /// assert_eq!(leaf[0], 42.0);
    /// ```
    pub fn new<C: Communicator>(comm: &C, graph: &Graph, opts: SfOptions) -> Result<Self, SfError> {
        let comm = comm.duplicate();
        let raw = raw::raw_comm(&comm);
        let (rank, size) = (comm.rank(), comm.size() as usize);
        // The options choose the collectives that set-up and operations run: ranks with
        // different ones would mismatch them and hang.
        let kinds = discovery::fingerprint([opts.discovery as u64, opts.sf_type as u64]);
        discovery::same_everywhere(&comm, kinds, "star-forest options (discovery, type)")?;
        discovery::agree(&comm, graph.check_local(rank, size))?;

        // Group leaves by root rank, each group in ascending leaf index.
        let mut edges: Vec<(i32, usize, u64)> = (0..graph.nleaves())
            .map(|i| {
                (
                    graph.iremote[i].rank as i32,
                    graph.leaf_index(i),
                    graph.iremote[i].offset,
                )
            })
            .collect();
        edges.sort_unstable();
        let mut self_edges = (Vec::new(), Vec::new());
        let mut groups: Vec<(i32, Vec<usize>, Vec<u64>)> = Vec::new();
        for (r, leaf, offset) in edges {
            match groups.last_mut() {
                _ if r == rank => {
                    self_edges.0.push(offset as usize);
                    self_edges.1.push(leaf);
                }
                Some((q, leaves, offsets)) if *q == r => {
                    leaves.push(leaf);
                    offsets.push(offset);
                }
                _ => groups.push((r, vec![leaf], vec![offset])),
            }
        }
        let (leaf_groups, outgoing): (Vec<_>, Vec<_>) =
            groups.into_iter().map(|(r, l, o)| ((r, l), (r, o))).unzip();

        let incoming = discovery::exchange(&comm, raw, opts.discovery, &outgoing);
        let checked = incoming.iter().try_for_each(|(src, offs)| {
            match offs.iter().find(|&&o| o >= graph.nroots as u64) {
                Some(&offset) => Err(SfError::OffsetOutOfRange {
                    leaf_rank: *src,
                    rank,
                    offset,
                    nroots: graph.nroots,
                }),
                None => Ok(()),
            }
        });
        discovery::agree(&comm, checked)?;

        let root_groups = incoming
            .into_iter()
            .map(|(src, offs)| (src, offs.into_iter().map(|o| o as usize).collect()))
            .collect();
        let leaf_ranks = Peers::new(root_groups);
        let root_ranks = Peers::new(leaf_groups);
        let self_roots = Plan::new(&self_edges.0);
        let self_leaves = Plan::new(&self_edges.1);
        let reduce_in_place = in_place_range(&leaf_ranks, &self_edges.0);
        let (leaves, roots) = (&leaf_ranks.ranks, &root_ranks.ranks);
        let shared = match opts.sf_type {
            SfType::Basic => Shared::Basic,
            SfType::Neighbor => Shared::Neighbor(NeighborGraphs::new(raw, leaves, roots)),
            SfType::Rma => Shared::Rma(Rc::new(RmaShared::new(&comm, raw, leaves, roots))),
        };
        Ok(StarForest {
            comm,
            raw,
            opts,
            graph: graph.clone(),
            leaf_space: graph.leaf_space(),
            leaf_ranks,
            root_ranks,
            self_roots,
            self_leaves,
            reduce_in_place,
            shared,
            links: RefCell::new(Vec::new()),
            out_of_step: Cell::new(false),
            multi: OnceCell::new(),
        })
    }

    /// The forest's own communicator.
    pub fn comm(&self) -> &SimpleCommunicator {
        &self.comm
    }

    /// The options it was set up with.
    pub fn options(&self) -> SfOptions {
        self.opts
    }

    /// Roots on this rank.
    pub fn nroots(&self) -> usize {
        self.graph.nroots
    }

    /// Connected leaves on this rank.
    pub fn nleaves(&self) -> usize {
        self.graph.nleaves()
    }

    pub(crate) fn multi_cell(&self) -> &OnceCell<Box<MultiSf>> {
        &self.multi
    }

    /// This rank's part of the graph the forest was set up from.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Length a leaf array must have.
    pub fn leaf_space(&self) -> usize {
        self.leaf_space
    }

    /// Ranks with leaves on this rank's roots (self first when it has local edges), each with
    /// the plan of the roots it reads.
    pub fn leaf_ranks(&self) -> Vec<(i32, &Plan)> {
        self.with_self(&self.self_roots, &self.leaf_ranks)
    }

    /// Ranks owning roots of this rank's leaves (self first when it has local edges), each
    /// with the plan of the leaves that read it.
    pub fn root_ranks(&self) -> Vec<(i32, &Plan)> {
        self.with_self(&self.self_leaves, &self.root_ranks)
    }

    fn with_self<'a>(&'a self, own: &'a Plan, peers: &'a Peers) -> Vec<(i32, &'a Plan)> {
        let me = (!own.is_empty()).then(|| (self.comm.rank(), own));
        me.into_iter()
            .chain(peers.ranks.iter().copied().zip(&peers.plans))
            .collect()
    }

    /// Starts sending root values to their leaves: `leaf = leaf op root`. The messages are
    /// staged in the forest's own buffers, since the handle could be leaked; to overlap work
    /// with messages MPI moves in place, use [`bcast_while`](Self::bcast_while).
    pub fn bcast_begin<'a, U: Unit>(
        &'a self,
        root: &'a [U],
        leaf: &'a mut [U],
        op: Op,
    ) -> Result<Pending<'a, U>, SfError> {
        self.start_bcast(root, leaf, op, Access::Staged)
    }

    /// [`bcast_begin`](Self::bcast_begin), with MPI given the caller's slices where
    /// `access` allows.
    pub(crate) fn start_bcast<'a, U: Unit>(
        &'a self,
        root: &'a [U],
        leaf: &'a mut [U],
        op: Op,
        access: Access,
    ) -> Result<Pending<'a, U>, SfError> {
        let red = combine::<U>(op)?;
        self.in_step(|| {
            check_len("rootdata", root.len(), self.graph.nroots)?;
            check_len("leafdata", leaf.len(), self.leaf_space)
        })?;
        let mut link = self.take_link::<U>(Kind::Bcast)?;
        // Replacing values may land in place; combining needs the old ones.
        let in_place = access == Access::InPlace && red.is_none();
        self.post_recvs::<U>(
            &mut link,
            Side::Leaf,
            Dir::Bcast,
            in_place.then_some(leaf.as_mut_ptr()),
        );
        self.pack_and_send(&mut link, Side::Root, Dir::Bcast, root, access);
        scatter(leaf, &self.self_leaves, root, &self.self_roots, red);
        Ok(Pending {
            sf: self,
            link: Some(link),
            work: Work::Bcast {
                leaf,
                red,
                in_place,
            },
        })
    }

    /// Starts combining leaf values into their roots: `root = root op leaf`, staged as
    /// [`bcast_begin`](Self::bcast_begin) is; see also [`reduce_while`](Self::reduce_while).
    pub fn reduce_begin<'a, U: Unit>(
        &'a self,
        leaf: &'a [U],
        root: &'a mut [U],
        op: Op,
    ) -> Result<Pending<'a, U>, SfError> {
        self.start_reduce(leaf, root, op, Access::Staged)
    }

    /// [`reduce_begin`](Self::reduce_begin), with MPI given the caller's slices where
    /// `access` allows.
    fn start_reduce<'a, U: Unit>(
        &'a self,
        leaf: &'a [U],
        root: &'a mut [U],
        op: Op,
        access: Access,
    ) -> Result<Pending<'a, U>, SfError> {
        let red = combine::<U>(op)?;
        self.in_step(|| {
            check_len("leafdata", leaf.len(), self.leaf_space)?;
            check_len("rootdata", root.len(), self.graph.nroots)
        })?;
        let mut link = self.take_link::<U>(Kind::Reduce)?;
        let in_place = self
            .reduce_in_place
            .filter(|_| red.is_none() && access == Access::InPlace);
        match in_place {
            Some(start) => {
                let base = root[start..].as_mut_ptr().cast_const();
                let peers = &self.leaf_ranks;
                // SAFETY: every segment lies in `root`, which `Pending` borrows until the wait
                // (in place: the call that began it ends it).
                unsafe {
                    bind_and_start(&mut *link.transport, peers, Side::Root, Dir::Reduce, |i| {
                        base.wrapping_add(peers.offsets[i])
                    })
                };
            }
            None => self.post_recvs::<U>(&mut link, Side::Root, Dir::Reduce, None),
        }
        self.pack_and_send(&mut link, Side::Leaf, Dir::Reduce, leaf, access);
        scatter(root, &self.self_roots, leaf, &self.self_leaves, red);
        Ok(Pending {
            sf: self,
            link: Some(link),
            work: Work::Reduce {
                root,
                red,
                in_place: in_place.is_some(),
            },
        })
    }

    /// Starts a fetch-and-op: each leaf's value is combined into its root (`root = root op
    /// leaf`), and `leafupdate` receives the root's value just before that leaf's turn.
    pub fn fetch_and_op_begin<'a, U: Unit>(
        &'a self,
        root: &'a mut [U],
        leaf: &'a [U],
        leafupdate: &'a mut [U],
        op: Op,
    ) -> Result<Pending<'a, U>, SfError> {
        self.start_fetch_and_op(root, leaf, leafupdate, op, Access::Staged)
    }

    /// [`fetch_and_op_begin`](Self::fetch_and_op_begin), with MPI given the caller's slices
    /// where `access` allows.
    fn start_fetch_and_op<'a, U: Unit>(
        &'a self,
        root: &'a mut [U],
        leaf: &'a [U],
        leafupdate: &'a mut [U],
        op: Op,
        access: Access,
    ) -> Result<Pending<'a, U>, SfError> {
        let red = reducer::<U>(op)?;
        let in_place = access == Access::InPlace;
        self.in_step(|| {
            check_len("rootdata", root.len(), self.graph.nroots)?;
            check_len("leafdata", leaf.len(), self.leaf_space)?;
            check_len("leafupdate", leafupdate.len(), self.leaf_space)
        })?;
        let mut link = self.take_link::<U>(Kind::FetchAndOp)?;
        self.post_recvs::<U>(&mut link, Side::Root, Dir::Reduce, None);
        self.post_recvs::<U>(
            &mut link,
            Side::Leaf,
            Dir::Bcast,
            in_place.then_some(leafupdate.as_mut_ptr()),
        );
        self.pack_and_send(&mut link, Side::Leaf, Dir::Reduce, leaf, access);
        for (r, l) in self.self_roots.iter().zip(self.self_leaves.iter()) {
            leafupdate[l] = root[r];
            combine_unit(&mut root[r], &leaf[l], red);
        }
        Ok(Pending {
            sf: self,
            link: Some(link),
            work: Work::FetchAndOp {
                root,
                leafupdate,
                red,
                in_place,
            },
        })
    }

    /// [`bcast_begin`](Self::bcast_begin) and its end.
    pub fn bcast<U: Unit>(&self, root: &[U], leaf: &mut [U], op: Op) -> Result<(), SfError> {
        self.bcast_while(root, leaf, op, || ())
    }

    /// A bcast that runs `work` while its messages are in flight and returns what `work`
    /// returns. Unlike [`bcast_begin`](Self::bcast_begin), MPI reads and writes contiguous
    /// messages in the caller's slices: no handle escapes, so the operation always ends
    /// before the borrow does (on a panic in `work` too). `work` may read `root`.
    pub fn bcast_while<U: Unit, R>(
        &self,
        root: &[U],
        leaf: &mut [U],
        op: Op,
        work: impl FnOnce() -> R,
    ) -> Result<R, SfError> {
        let pending = self.start_bcast(root, leaf, op, Access::InPlace)?;
        let done = work();
        pending.end();
        Ok(done)
    }

    /// [`reduce_begin`](Self::reduce_begin) and its end.
    pub fn reduce<U: Unit>(&self, leaf: &[U], root: &mut [U], op: Op) -> Result<(), SfError> {
        self.reduce_while(leaf, root, op, || ())
    }

    /// A reduce that runs `work` while its messages are in flight, in place as
    /// [`bcast_while`](Self::bcast_while) is. `work` may read `leaf`.
    pub fn reduce_while<U: Unit, R>(
        &self,
        leaf: &[U],
        root: &mut [U],
        op: Op,
        work: impl FnOnce() -> R,
    ) -> Result<R, SfError> {
        let pending = self.start_reduce(leaf, root, op, Access::InPlace)?;
        let done = work();
        pending.end();
        Ok(done)
    }

    /// [`fetch_and_op_begin`](Self::fetch_and_op_begin) and its end.
    pub fn fetch_and_op<U: Unit>(
        &self,
        root: &mut [U],
        leaf: &[U],
        leafupdate: &mut [U],
        op: Op,
    ) -> Result<(), SfError> {
        self.start_fetch_and_op(root, leaf, leafupdate, op, Access::InPlace)
            .map(Pending::end)
    }

    /// Runs a begin half's rank-local checks (buffer lengths): refused once the forest is out
    /// of step, and out of step from the first that fails. (An unsupported op depends only on
    /// the unit type and op, which every rank passes alike; an rma forest's ring limit is
    /// reached alike on ranks that begin and end operations in the same order, and it works
    /// on after. A rank that ends them in another order can be refused alone: its peers then
    /// run an operation it did not, so such a refusal is fatal.)
    pub(crate) fn in_step(
        &self,
        checks: impl FnOnce() -> Result<(), SfError>,
    ) -> Result<(), SfError> {
        if self.out_of_step.get() {
            return Err(SfError::OutOfStep);
        }
        checks().inspect_err(|_| self.set_out_of_step())
    }

    /// Refuses every later operation (see [`SfError::OutOfStep`]).
    pub(crate) fn set_out_of_step(&self) {
        self.out_of_step.set(true);
    }

    fn peers(&self, side: Side) -> &Peers {
        match side {
            Side::Root => &self.leaf_ranks,
            Side::Leaf => &self.root_ranks,
        }
    }

    /// A pooled link of this kind and unit size, or a new one.
    fn take_link<U: Unit>(&self, kind: Kind) -> Result<Link, SfError> {
        assert!(
            align_of::<U>() <= 16,
            "unit types must be aligned to at most 16 bytes"
        );
        // The same on every rank (it depends on the type only), so refused alike.
        if size_of::<U>() == 0 {
            return Err(SfError::Unsupported("units of zero bytes"));
        }
        self.take_link_bytes(kind, size_of::<U>())
    }

    fn take_link_bytes(&self, kind: Kind, unit_bytes: usize) -> Result<Link, SfError> {
        if let Shared::Rma(rma) = &self.shared {
            rma.check_slots()?;
        }
        let mut pool = self.links.borrow_mut();
        if let Some(i) = pool
            .iter()
            .position(|l| l.kind == kind && l.unit_bytes == unit_bytes)
        {
            return Ok(pool.swap_remove(i));
        }
        let fetch_units = if kind == Kind::FetchAndOp {
            self.root_ranks.total()
        } else {
            0
        };
        let transport: Box<dyn Transport> = match &self.shared {
            Shared::Basic => Box::new(Basic::new(
                self.raw,
                &self.leaf_ranks.ranks,
                &self.root_ranks.ranks,
                kind.tags(),
            )),
            Shared::Neighbor(graphs) => Box::new(Neighbor::new(
                graphs,
                kind == Kind::FetchAndOp,
                self.leaf_ranks.len(),
                self.root_ranks.len(),
            )),
            Shared::Rma(rma) => Box::new(Rma::new(rma.clone())),
        };
        Ok(Link {
            kind,
            unit_bytes,
            rootbuf: link::staging(self.leaf_ranks.total(), unit_bytes),
            leafbuf: link::staging(self.root_ranks.total(), unit_bytes),
            fetchbuf: link::staging(fetch_units, unit_bytes),
            transport,
        })
    }

    /// Moves every remote edge's unit, replacing, straight between `root` and `leaf` memory
    /// that MPI reads and writes itself (host memory, or device memory under an MPI with CUDA
    /// support): root to leaf, or leaf to root with `reduce`. This rank's own edges are left
    /// to the caller, and every remote peer's indices must be contiguous on both sides (a
    /// [`Staged`](crate::Staged) forest's are).
    ///
    /// # Safety
    /// `root` must address `nroots` units and `leaf` `leaf_space` units of `unit_bytes` bytes,
    /// valid until this returns, with the destination not aliased.
    pub(crate) unsafe fn move_in_place(
        &self,
        root: *mut u8,
        leaf: *mut u8,
        unit_bytes: usize,
        reduce: bool,
    ) -> Result<(), SfError> {
        let (kind, dir, from, to) = match reduce {
            false => (
                Kind::Bcast,
                Dir::Bcast,
                (Side::Root, root),
                (Side::Leaf, leaf),
            ),
            true => (
                Kind::Reduce,
                Dir::Reduce,
                (Side::Leaf, leaf),
                (Side::Root, root),
            ),
        };
        self.in_step(|| {
            let contiguous = |p: &Peers| p.plans.iter().all(|q| q.contiguous_start().is_some());
            match contiguous(&self.leaf_ranks) && contiguous(&self.root_ranks) {
                true => Ok(()),
                false => Err(SfError::NotInPlace),
            }
        })?;
        let mut link = self.take_link_bytes(kind, unit_bytes)?;
        let t = &mut link.transport;
        // Receives first, then sends.
        for (side, base) in [to, from] {
            let peers = self.peers(side);
            for (i, plan) in peers.plans.iter().enumerate() {
                let start = plan.contiguous_start().unwrap_or(0);
                let addr = base.wrapping_add(start * unit_bytes).cast_const();
                // SAFETY: the caller's contract: `units(i)` units from `start` lie in the
                // array and stay valid until the waits below.
                unsafe { t.bind(side, dir, i, addr, peers.units(i) * unit_bytes) };
            }
            t.start(side, dir);
        }
        t.wait(to.0, dir);
        t.wait(from.0, dir);
        self.links.borrow_mut().push(link);
        Ok(())
    }

    /// Binds and starts the receives of `(side, dir)`: in place at `direct` (the start of a
    /// user slice that `Pending` borrows, given only where [`Access::InPlace`]) for peers
    /// whose indices are contiguous, into staging otherwise.
    fn post_recvs<U: Unit>(&self, link: &mut Link, side: Side, dir: Dir, direct: Option<*mut U>) {
        let peers = self.peers(side);
        let staging = match (side, link.kind) {
            (Side::Root, _) => &mut link.rootbuf,
            (Side::Leaf, Kind::FetchAndOp) => &mut link.fetchbuf,
            (Side::Leaf, _) => &mut link.leafbuf,
        };
        let stage = link::view::<U>(staging, peers.total()).as_ptr();
        // SAFETY: each message is either in the user's slice, borrowed until the wait by a
        // `Pending` that the call which began it ends (`Access::InPlace`), or in the link's
        // staging buffer, which the link owns and never resizes.
        unsafe {
            bind_and_start(&mut *link.transport, peers, side, dir, |i| {
                match (direct, peers.plans[i].contiguous_start()) {
                    (Some(d), Some(start)) => d.wrapping_add(start).cast_const(),
                    _ => stage.wrapping_add(peers.offsets[i]),
                }
            })
        };
    }

    /// Packs `data` for every peer of `side` whose indices are not contiguous, or for every
    /// peer where `access` is [`Access::Staged`] (one dispatch), binds each message
    /// (contiguous ones in place otherwise) and starts the sends.
    fn pack_and_send<U: Unit>(
        &self,
        link: &mut Link,
        side: Side,
        dir: Dir,
        data: &[U],
        access: Access,
    ) {
        let in_place = |plan: &Plan| match access {
            Access::InPlace => plan.contiguous_start(),
            Access::Staged => None,
        };
        let peers = self.peers(side);
        let staging = match side {
            Side::Root => &mut link.rootbuf,
            Side::Leaf => &mut link.leafbuf,
        };
        let stage = link::view::<U>(staging, peers.total());
        for_each_segment(self.opts.policy, stage, &peers.offsets, |i, seg| {
            let plan = &peers.plans[i];
            if in_place(plan).is_none() {
                gather(seg, plan, data);
            }
        });
        let stage = stage.as_ptr();
        // SAFETY: each message is in `data`, borrowed until the wait by a `Pending` that the
        // call which began it ends (`Access::InPlace`), or in the link's staging buffer,
        // which the link owns and never resizes.
        unsafe {
            bind_and_start(&mut *link.transport, peers, side, dir, |i| {
                match in_place(&peers.plans[i]) {
                    Some(start) => data[start..].as_ptr(),
                    None => stage.wrapping_add(peers.offsets[i]),
                }
            })
        };
    }
}

/// Binds every peer's message of `(side, dir)` to `place(peer)` and starts them all.
///
/// # Safety
/// Each `place(i)` must point to `peers.units(i)` units that stay valid (and, for receives,
/// unaliased) until the transport's wait for `(side, dir)`.
unsafe fn bind_and_start<U: Unit>(
    t: &mut dyn Transport,
    peers: &Peers,
    side: Side,
    dir: Dir,
    place: impl Fn(usize) -> *const U,
) {
    for i in 0..peers.len() {
        // SAFETY: the caller's contract.
        unsafe {
            t.bind(
                side,
                dir,
                i,
                place(i).cast(),
                peers.units(i) * size_of::<U>(),
            )
        };
    }
    t.start(side, dir);
}

/// Unpacks every peer's staging segment into `dst`, except, when `in_place`, the peers whose
/// contiguous data was received straight into `dst`.
fn unpack_peers<U: Unit>(
    dst: &mut [U],
    peers: &Peers,
    staging: &mut [u128],
    red: Combine<U>,
    in_place: bool,
) {
    let buf = link::view::<U>(staging, peers.total());
    for (i, plan) in peers.plans.iter().enumerate() {
        if !(in_place && plan.contiguous_start().is_some()) {
            unpack(dst, plan, &buf[peers.offsets[i]..peers.offsets[i + 1]], red);
        }
    }
}

/// The remote-root range that reduce data may land in directly, if any.
fn in_place_range(leaf_ranks: &Peers, self_roots: &[usize]) -> Option<usize> {
    let all: Vec<usize> = leaf_ranks.plans.iter().flat_map(Plan::iter).collect();
    let start = *all.first()?;
    let end = start + all.len();
    let contiguous = all.iter().enumerate().all(|(k, &v)| v == start + k);
    let untouched = self_roots.iter().all(|r| !(start..end).contains(r));
    (contiguous && untouched).then_some(start)
}

pub(crate) fn check_len(what: &'static str, got: usize, need: usize) -> Result<(), SfError> {
    if got < need {
        return Err(SfError::BufferTooShort { what, got, need });
    }
    Ok(())
}

/// How values combine at the destination: `None` is a plain copy (replace).
pub(crate) type Combine<U> = Option<Reducer<<U as Unit>::Scalar>>;

pub(crate) fn combine<U: Unit>(op: Op) -> Result<Combine<U>, SfError> {
    let red = reducer::<U>(op)?;
    Ok((op != Op::Replace).then_some(red))
}

fn lanes<U: Unit>(u: &[U]) -> &[U::Scalar] {
    bytemuck::cast_slice(u)
}

fn lanes_mut<U: Unit>(u: &mut [U]) -> &mut [U::Scalar] {
    bytemuck::cast_slice_mut(u)
}

/// `dst = dst op src`, lane by lane.
pub(crate) fn combine_unit<U: Unit>(dst: &mut U, src: &U, red: Reducer<U::Scalar>) {
    red(
        lanes_mut(std::slice::from_mut(dst)),
        lanes(std::slice::from_ref(src)),
    );
}

/// `dst[dst_plan[k]] = dst[...] op src[src_plan[k]]` for every k, in order: slice by slice
/// over the stretches where both plans' runs overlap, or index by index where either has
/// short runs (a list's, mostly single cells, or a ghost-wide row's).
fn scatter<U: Unit>(dst: &mut [U], dst_plan: &Plan, src: &[U], src_plan: &Plan, red: Combine<U>) {
    if short_runs(dst_plan) || short_runs(src_plan) {
        let pairs = dst_plan.iter().zip(src_plan.iter());
        match red {
            None => pairs.for_each(|(d, s)| dst[d] = src[s]),
            Some(f) => pairs.for_each(|(d, s)| combine_unit(&mut dst[d], &src[s], f)),
        }
        return;
    }
    let (mut druns, mut sruns) = (dst_plan.runs(), src_plan.runs());
    let (mut d, mut s) = (druns.next(), sruns.next());
    while let (Some((ds, dl)), Some((ss, sl))) = (d, s) {
        let n = dl.min(sl);
        let (to, from) = (&mut dst[ds..ds + n], &src[ss..ss + n]);
        match red {
            None => copy(to, from),
            Some(f) => f(lanes_mut(to), lanes(from)),
        }
        d = if dl > n {
            Some((ds + n, dl - n))
        } else {
            druns.next()
        };
        s = if sl > n {
            Some((ss + n, sl - n))
        } else {
            sruns.next()
        };
    }
}

/// Runs too short for a slice copy to beat a loop over indices (measured by `benches/pack`).
fn short_runs(p: &Plan) -> bool {
    match p.kind {
        PackPlan::Contiguous { .. } => false,
        PackPlan::Strided { dx, .. } => dx < 8,
        PackPlan::List(_) => true,
    }
}

/// `seg[k] = data[plan[k]]`, run by run (index by index where they are short).
pub(crate) fn gather<U: Unit>(seg: &mut [U], plan: &Plan, data: &[U]) {
    if short_runs(plan) {
        seg.iter_mut()
            .zip(plan.iter())
            .for_each(|(s, i)| *s = data[i]);
        return;
    }
    let mut at = 0;
    for (start, len) in plan.runs() {
        copy(&mut seg[at..at + len], &data[start..start + len]);
        at += len;
    }
}

/// `to = from`: a loop for a few units (single cells of a list, a ghost-wide row), where a
/// call to `memcpy` would cost more than the copy.
#[inline]
fn copy<U: Unit>(to: &mut [U], from: &[U]) {
    if to.len() <= 4 {
        to.iter_mut().zip(from).for_each(|(t, f)| *t = *f);
    } else {
        to.copy_from_slice(from);
    }
}

/// `dst[plan[k]] = dst[...] op src[k]`: a scatter from the whole of `src`, with a plain copy
/// when both sides are contiguous.
pub(crate) fn unpack<U: Unit>(dst: &mut [U], plan: &Plan, src: &[U], red: Combine<U>) {
    match (red, plan.contiguous_start()) {
        (None, Some(start)) => dst[start..start + src.len()].copy_from_slice(src),
        _ => {
            let whole = Plan {
                kind: PackPlan::Contiguous {
                    start: 0,
                    len: src.len(),
                },
                duplicates: false,
            };
            scatter(dst, plan, src, &whole, red);
        }
    }
}

/// Whether MPI may read and write the caller's slices in place (contiguous messages) or only
/// the link's staging buffers. In place only where the call that begins an operation also
/// ends it: a [`Pending`] handed to the caller could be leaked (`mem::forget` is safe), which
/// would end the borrow of its slices while MPI still uses them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    InPlace,
    Staged,
}

/// The data an operation in flight still has to finish.
enum Work<'a, U: Unit> {
    Bcast {
        leaf: &'a mut [U],
        red: Combine<U>,
        in_place: bool,
    },
    Reduce {
        root: &'a mut [U],
        red: Combine<U>,
        in_place: bool,
    },
    FetchAndOp {
        root: &'a mut [U],
        leafupdate: &'a mut [U],
        red: Reducer<U::Scalar>,
        in_place: bool,
    },
}

/// An operation in flight. Its data stays borrowed until [`end`](Self::end); dropping it
/// without `end` completes it too. MPI reads and writes only the buffers of its link, which
/// it owns: one leaked with `mem::forget` takes them along (the operation never completes,
/// and its link is lost), so a caller's buffer is never freed under MPI.
#[must_use = "an operation in flight completes at `end`"]
pub struct Pending<'a, U: Unit> {
    sf: &'a StarForest,
    link: Option<Link>,
    work: Work<'a, U>,
}

impl<'a, U: Unit> Pending<'a, U> {
    /// Waits for the remote messages and finishes the operation.
    pub fn end(mut self) {
        self.finish();
    }

    /// Ends a bcast and hands its leaf data back, for a caller that goes on writing it.
    pub(crate) fn end_bcast(mut self) -> &'a mut [U] {
        self.finish();
        match &mut self.work {
            Work::Bcast { leaf, .. } => std::mem::take(leaf),
            _ => &mut [],
        }
    }

    fn finish(&mut self) {
        let Some(mut link) = self.link.take() else {
            return;
        };
        let sf = self.sf;
        let t = &mut link.transport;
        match &mut self.work {
            Work::Bcast {
                leaf,
                red,
                in_place,
            } => {
                t.wait(Side::Leaf, Dir::Bcast);
                unpack_peers(leaf, &sf.root_ranks, &mut link.leafbuf, *red, *in_place);
                t.wait(Side::Root, Dir::Bcast);
            }
            Work::Reduce {
                root,
                red,
                in_place,
            } => {
                t.wait(Side::Root, Dir::Reduce);
                if !*in_place {
                    unpack_peers(root, &sf.leaf_ranks, &mut link.rootbuf, *red, false);
                }
                t.wait(Side::Leaf, Dir::Reduce);
            }
            Work::FetchAndOp {
                root,
                leafupdate,
                red,
                in_place,
            } => {
                t.wait(Side::Root, Dir::Reduce);
                // Fetch each root's value before combining, in peer order, and send it back
                // from the same staging segment (already bound: same addresses).
                let peers = &sf.leaf_ranks;
                let buf = link::view::<U>(&mut link.rootbuf, peers.total());
                let stage = buf.as_ptr();
                let idx = peers.plans.iter().flat_map(Plan::iter);
                for (slot, r) in buf.iter_mut().zip(idx) {
                    let incoming = *slot;
                    *slot = root[r];
                    combine_unit(&mut root[r], &incoming, *red);
                }
                // SAFETY: every segment is in the link's staging buffer, owned by the link.
                unsafe {
                    bind_and_start(&mut **t, peers, Side::Root, Dir::Bcast, |i| {
                        stage.wrapping_add(peers.offsets[i])
                    })
                };
                t.wait(Side::Leaf, Dir::Reduce);
                t.wait(Side::Leaf, Dir::Bcast);
                unpack_peers(
                    leafupdate,
                    &sf.root_ranks,
                    &mut link.fetchbuf,
                    None,
                    *in_place,
                );
                t.wait(Side::Root, Dir::Bcast);
            }
        }
        sf.links.borrow_mut().push(link);
    }
}

impl<U: Unit> Drop for Pending<'_, U> {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// A random plan of `n` indices below 300: a contiguous range, a 3-D box of random row
    /// and plane counts (rows of 1 to `n` values, so both the slice path and the index path),
    /// or a list that may repeat indices.
    fn random_plan(rng: &mut impl Rng, n: usize) -> Plan {
        let divisor = |rng: &mut dyn rand::RngCore, n: usize| {
            let ds: Vec<usize> = (1..=n.max(1)).filter(|d| n.is_multiple_of(*d)).collect();
            ds[rng.gen_range(0..ds.len())]
        };
        let idx: Vec<usize> = match rng.gen_range(0..3) {
            0 => {
                let s = rng.gen_range(0..50);
                (s..s + n).collect()
            }
            1 => {
                let dx = divisor(rng, n);
                let dy = divisor(rng, n / dx.max(1));
                let sx = dx + rng.gen_range(1..3);
                let sy = dy * sx + rng.gen_range(0..3);
                let s = rng.gen_range(0..10);
                (0..n)
                    .map(|p| s + (p / (dx * dy)) * sy + (p / dx % dy) * sx + p % dx)
                    .collect()
            }
            _ => (0..n).map(|_| rng.gen_range(0..300)).collect(),
        };
        Plan::new(&idx)
    }

    /// Random plan pairs of units of `L` lanes, with Replace and Sum, against the loop over
    /// indices; returns how many took the slice path (and of those, with a box) and how
    /// many the index path.
    fn scatter_and_gather<const L: usize>(rng: &mut impl Rng) -> (usize, usize, usize) {
        let (mut slices, mut boxes, mut short) = (0, 0, 0);
        let unit = |i: usize| -> [f64; L] { std::array::from_fn(|l| (i * L + l) as f64) };
        for _ in 0..1500 {
            let n = rng.gen_range(0..60);
            let (dp, sp) = (random_plan(rng, n), random_plan(rng, n));
            let src: Vec<[f64; L]> = (0..400).map(unit).collect();
            let red = if rng.gen_bool(0.5) {
                None
            } else {
                combine::<[f64; L]>(Op::Sum).unwrap()
            };
            let (mut got, mut want) = (vec![[0.5; L]; 400], vec![[0.5; L]; 400]);
            scatter(&mut got, &dp, &src, &sp, red);
            for (d, s) in dp.iter().zip(sp.iter()) {
                for l in 0..L {
                    want[d][l] = src[s][l] + if red.is_some() { want[d][l] } else { 0.0 };
                }
            }
            assert_eq!(got, want, "{dp} <- {sp}");
            let mut seg = vec![[0.0; L]; n];
            gather(&mut seg, &sp, &src);
            assert!(seg.iter().zip(sp.iter()).all(|(v, s)| *v == src[s]), "{sp}");
            if short_runs(&dp) || short_runs(&sp) {
                short += 1;
            } else {
                slices += 1;
                let strided = |p: &Plan| matches!(p.kind, PackPlan::Strided { .. });
                boxes += usize::from(strided(&dp) || strided(&sp));
            }
        }
        (slices, boxes, short)
    }

    #[test]
    fn scatter_and_gather_follow_the_plans_index_by_index() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        for (slices, boxes, short) in [
            scatter_and_gather::<1>(&mut rng),
            scatter_and_gather::<3>(&mut rng),
        ] {
            assert!(
                slices > 150 && boxes > 30 && short > 150,
                "{slices} by slices ({boxes} with a box), {short} by index"
            );
        }
    }
}
