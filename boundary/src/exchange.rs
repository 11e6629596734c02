//! The ghost exchange over MPI: one [`Exchange`] per rank, built at every remesh, and the task
//! functions that drive it.
//!
//! The path of one exchange, per mesh-data partition and [`BoundaryType`]:
//!
//! 1. [`Exchange::start_receive`] posts the receives of dense channels (sparse channels and
//!    coalesced messages are probed for their size instead).
//! 2. [`Exchange::send`] restricts interiors that coarser neighbours need, packs every
//!    sub-halo in one dispatch, decides per channel between data and null (unallocated, or no
//!    value above the sparse threshold), and sends: one message per channel, or one data and
//!    one allocation-status message per (peer rank, partition pair) when coalesced.
//! 3. [`Exchange::receive`] polls; it returns [`TaskStatus::Incomplete`] until every channel
//!    of the route has arrived (same-rank channels read the sender's buffer directly).
//! 4. [`Exchange::set_bounds`] unpacks every sub-halo in one dispatch (null channels fill the
//!    default value) and allocates sparse variables that received data.
//! 5. [`Exchange::finish`] prolongates from coarser neighbours and applies physical boundary
//!    conditions, once every type the caller uses has been set.
//!
//! Everything a route needs (channel lists, sub-halo caches, buffers, message groups, tags,
//! posting order) is built once in [`Exchange::new`]; an exchange allocates nothing once warm.
//!
//! The data work of steps 2, 4 and 5 (restriction, pack, unpack, prolongation, physical
//! boundaries) goes through a [`FieldSpace`]: the host's block storage by default
//! ([`HostFields`]), or a copy in device memory (`device_pack::DeviceFields`) through the
//! `*_in` variants; the exchange itself moves messages and keeps the channel states.
//!
//! Each channel end keeps its state in a [`ChannelState`] (held in dense arrays beside the
//! ends), the five-state protocol that [`CommBuffer`](crate::CommBuffer) and the flux
//! correction use too; the bytes of a route's channels live back to
//! back in message arenas (so that a coalesced message is one contiguous range, sent without
//! copying), and the arenas' storage comes from the exchange's [`BufferPool`]. Same-rank and
//! cross-rank ends go through the same states; only where the bytes come from differs.

use hashbrown::HashMap;
use std::hash::{Hash, Hasher};
use std::ops::Range;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use rand::seq::SliceRandom;
use rand::SeedableRng;
pub use starhalo_exec::TaskStatus;
use starhalo_exec::{Buffer, Fnv, Policy};
use starhalo_mesh::field::IndexShape;
use starhalo_mesh::BlockNeighbors;
use starhalo_sf::mpi::topology::{Communicator, SimpleCommunicator};
use starhalo_sf::p2p::{self, MsgArena, Values, ValuesMut};
use starhalo_sf::pool::BufferPool;

use crate::block_set::BlockSet;
use crate::bnd_info::{
    recv_box, send_box, threshold_flags, BlockLayout, BndCache, BndInfo, Space, FLAG_ALLOCATED,
    FLAG_COARSE,
};
use crate::bounds::BlockFinish;
use crate::channel::{Channel, ChannelKey, RankChannels};
use crate::coalesce::{self, Group};
use crate::collective;
use crate::comm_buffer::{Arrival, BufferState, ChannelState, Role};
use crate::copy_run::Run;
use crate::error::BoundaryError;
use crate::patience::{waiting_for, Patience};
use crate::prolong_restrict::{Prolongation, Resampler};
use crate::storage::BlockData;
use crate::tags::TagMap;

/// Which channels an operation serves (Parthenon's ten boundary types). An [`Exchange`] serves
/// the leaf types; the five `gmg_*` types are served by [`GmgExchange`](crate::gmg::GmgExchange).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BoundaryType {
    /// Every ghost channel.
    Any,
    /// Ghost channels whose two blocks share a rank.
    Local,
    /// Ghost channels between ranks.
    Nonlocal,
    /// Flux-correction channels, sending side.
    FlxcorSend,
    /// Flux-correction channels, receiving side.
    FlxcorRecv,
    /// Multigrid: same level.
    GmgSame,
    /// Multigrid: restriction, sending side.
    GmgRestrictSend,
    /// Multigrid: restriction, receiving side.
    GmgRestrictRecv,
    /// Multigrid: prolongation, sending side.
    GmgProlongateSend,
    /// Multigrid: prolongation, receiving side.
    GmgProlongateRecv,
}

impl BoundaryType {
    /// All ten, in Parthenon's order.
    pub const ALL: [Self; 10] = [
        Self::Any,
        Self::Local,
        Self::Nonlocal,
        Self::FlxcorSend,
        Self::FlxcorRecv,
        Self::GmgSame,
        Self::GmgRestrictSend,
        Self::GmgRestrictRecv,
        Self::GmgProlongateSend,
        Self::GmgProlongateRecv,
    ];

    /// Parthenon's lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Any => "any",
            Self::Local => "local",
            Self::Nonlocal => "nonlocal",
            Self::FlxcorSend => "flxcor_send",
            Self::FlxcorRecv => "flxcor_recv",
            Self::GmgSame => "gmg_same",
            Self::GmgRestrictSend => "gmg_restrict_send",
            Self::GmgRestrictRecv => "gmg_restrict_recv",
            Self::GmgProlongateSend => "gmg_prolongate_send",
            Self::GmgProlongateRecv => "gmg_prolongate_recv",
        }
    }

    /// The ghost-exchange route index of this type, if it is one.
    fn ghost_index(self) -> Option<usize> {
        match self {
            Self::Any => Some(0),
            Self::Local => Some(1),
            Self::Nonlocal => Some(2),
            _ => None,
        }
    }

    fn admits(self, c: &Channel) -> bool {
        match self {
            Self::Local => c.is_local(),
            Self::Nonlocal => !c.is_local(),
            _ => true,
        }
    }
}

impl FromStr for BoundaryType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| format!("unknown boundary type `{s}`"))
    }
}

/// The order in which a route posts its sends and receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Ordering {
    /// Channel-key order.
    #[default]
    Natural,
    /// A seeded random permutation.
    Random(u64),
    /// By receiving block, then key.
    ByReceiver,
}

impl FromStr for Ordering {
    type Err = String;
    /// `natural`, `by_receiver`, `random` or `random:SEED`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "natural" => Ok(Self::Natural),
            "by_receiver" => Ok(Self::ByReceiver),
            "random" => Ok(Self::Random(0)),
            _ => s
                .strip_prefix("random:")
                .and_then(|x| x.parse().ok())
                .map(Self::Random)
                .ok_or_else(|| {
                    format!("unknown ordering `{s}` (natural, by_receiver, random[:SEED])")
                }),
        }
    }
}

/// How an exchange moves its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExchangeOptions {
    /// One data and one status message per (peer rank, partition pair) instead of one
    /// message per channel (`parthenon/mesh/do_coalesced_comms`, default on).
    pub coalesced: bool,
    /// Posting order of sends and receives.
    pub ordering: Ordering,
    /// Pack and unpack loops: serial or threaded.
    pub policy: Policy,
    /// Also serve [`BoundaryType::Local`] and [`BoundaryType::Nonlocal`]: a ghost fill split
    /// into its same-rank channels and its messages, to overlap one with the other (default
    /// on). Every channel then has two routes, `any` and one of those, so an exchange that
    /// only runs `any` (every driver here) turns it off and holds and builds half as much.
    pub split: bool,
}

impl Default for ExchangeOptions {
    fn default() -> Self {
        Self {
            coalesced: true,
            ordering: Ordering::Natural,
            policy: Policy::Serial,
            split: true,
        }
    }
}

/// Messages and bytes this rank has sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Traffic {
    /// MPI messages.
    pub messages: u64,
    /// Payload bytes.
    pub bytes: u64,
}

/// One end of a channel within a route: what an exchange reads of it. Its channel and its
/// state are kept apart (see [`Route`]).
#[derive(Debug, Clone)]
struct End {
    /// Local index of this rank's block (sender on the send side, receiver on the receive side).
    block: usize,
    /// Variable id.
    var: usize,
    /// Its sub-halos in the route's cache, and their buffer range.
    halos: Range<usize>,
    buf: Range<usize>,
    /// Peer rank and dense tag on the variable's communicator (remote channels).
    peer: i32,
    tag: i32,
    sparse: bool,
    /// Both blocks are on this rank.
    local: bool,
    /// A receive is posted for this many values.
    posted: Option<usize>,
}

/// A same-rank receive end and the send end whose values it reads.
#[derive(Debug, Clone)]
struct LocalRecv {
    /// The receive end.
    end: usize,
    /// The sender's route and end, and the end's values in that route's send buffer.
    route: usize,
    src: usize,
    values: Range<usize>,
}

/// Copies same-rank `run` into route `ri`'s receive buffer from its source route's send
/// buffer.
fn copy_local(run: Run, routes: &mut [Route], ri: usize) -> Result<(), BoundaryError> {
    let (to, from) = if run.source == ri {
        let r = &mut routes[ri];
        (&mut r.recv_buf, &r.send_buf)
    } else {
        let (a, b) = pair_mut(routes, ri, run.source);
        (&mut a.recv_buf, &b.send_buf)
    };
    to.copy_to_segments(run.ends, from, run.values)?;
    Ok(())
}

/// Where an exchange's data work happens: the host's block storage ([`HostFields`], what
/// [`Exchange::send`], [`Exchange::set_bounds`] and [`Exchange::finish`] use), or a copy of it
/// in another memory space that restricts, packs, unpacks and finishes there and moves the
/// buffers between that space and the host, where MPI sends them. The exchange itself only
/// moves messages and keeps the channel states.
///
/// `route` numbers the exchange's (partition, type) routes as [`Exchange::route_caches`]
/// lists them and `part` the partitions, so that an implementation can prepare per-route and
/// per-partition state (device descriptors) once.
pub trait FieldSpace {
    /// Restricts the interior of every slot of each `(block, variable)` of `list` into its
    /// coarse buffer, before route `route` packs for coarser neighbours.
    fn restrict(
        &mut self,
        route: usize,
        list: &[(usize, usize)],
        shape: &IndexShape,
        data: &mut BlockData,
    ) -> Result<(), BoundaryError> {
        let _ = route;
        host_restrict(list, shape, data)
    }

    /// Packs the sub-halos of `cache` (route `route`'s send side) into `buf`: host values,
    /// or the route's message buffer where MPI reads it in place (see
    /// [`Exchange::place_messages`]). With `flags = Some((thresholds, over))` (placed
    /// messages, which the exchange does not read) it must also set `over[h]` for every
    /// sub-halo `h`: 1 when it holds a value above the threshold of its variable slot,
    /// `thresholds[var]`, else 0 ([`threshold_flags`]); the exchange sends a sparse
    /// channel's data only where some flag of it is set.
    fn pack(
        &mut self,
        route: usize,
        cache: &BndCache,
        data: &BlockData,
        buf: ValuesMut<'_>,
        flags: Option<(&[f64], &mut [u32])>,
    ) -> Result<(), BoundaryError>;

    /// Unpacks `buf` (host values, or the placed message buffer) into the sub-halos of
    /// `cache` (route `route`'s receive side).
    fn unpack(
        &mut self,
        route: usize,
        cache: &BndCache,
        buf: Values<'_>,
        data: &mut BlockData,
        defaults: &[f64],
    ) -> Result<(), BoundaryError>;

    /// Partition `part`'s post-unpack work: `work` for each of its blocks, prolongating
    /// variable `v` with `ops[v]`.
    fn finish(
        &mut self,
        part: usize,
        work: &[BlockFinish],
        ops: &[Prolongation],
        shape: &IndexShape,
        data: &mut BlockData,
    ) -> Result<(), BoundaryError> {
        let _ = part;
        host_finish(work, ops, shape, data)
    }
}

/// [`FieldSpace::restrict`] on the host's block storage (allocated variables only).
pub fn host_restrict(
    list: &[(usize, usize)],
    shape: &IndexShape,
    data: &mut BlockData,
) -> Result<(), BoundaryError> {
    let Some(cs) = data.coarse_shape().copied() else {
        return Ok(());
    };
    let interior = crate::bounds::coarse_interior(&cs);
    let r = Resampler::new(shape)?;
    for &(b, v) in list {
        if !data.is_allocated(b, v) {
            continue;
        }
        for s in data.vars()[v].slots.clone() {
            let (f, c) = data.fine_and_coarse_mut(b, s);
            r.restrict(f, c, &interior)?;
        }
    }
    Ok(())
}

/// [`FieldSpace::finish`] on the host's block storage (allocated fill-ghost variables only).
pub fn host_finish(
    work: &[BlockFinish],
    ops: &[Prolongation],
    shape: &IndexShape,
    data: &mut BlockData,
) -> Result<(), BoundaryError> {
    for f in work {
        for (v, &op) in ops.iter().enumerate().take(data.vars().len()) {
            if !data.vars()[v].fill_ghost || !data.is_allocated(f.block, v) {
                continue;
            }
            for s in data.vars()[v].slots.clone() {
                let (fine, coarse) = data.fine_and_coarse_mut(f.block, s);
                f.apply(op, shape, fine, coarse)?;
            }
        }
    }
    Ok(())
}

/// The host's block storage, packed and unpacked with `Policy`.
#[derive(Debug, Clone, Copy)]
pub struct HostFields(pub Policy);

impl FieldSpace for HostFields {
    fn pack(
        &mut self,
        _route: usize,
        cache: &BndCache,
        data: &BlockData,
        buf: ValuesMut<'_>,
        flags: Option<(&[f64], &mut [u32])>,
    ) -> Result<(), BoundaryError> {
        let buf = buf.host().ok_or_else(not_host)?;
        cache.pack(self.0, data.data(), buf)?;
        if let Some((t, over)) = flags {
            threshold_flags(cache.infos(), buf, t, over);
        }
        Ok(())
    }

    fn unpack(
        &mut self,
        _route: usize,
        cache: &BndCache,
        buf: Values<'_>,
        data: &mut BlockData,
        defaults: &[f64],
    ) -> Result<(), BoundaryError> {
        let buf = buf.host().ok_or_else(not_host)?;
        cache.unpack(self.0, buf, data.data_mut(), defaults)
    }
}

/// Host block storage given message buffers in device memory.
pub(crate) fn not_host() -> BoundaryError {
    BoundaryError::Device(
        "host fields were given message buffers in device memory to pack or unpack".into(),
    )
}

/// The sparse threshold of the variable holding storage slot `slot` (never exceeded when it
/// has none).
fn slot_threshold(data: &BlockData, slot: usize) -> f64 {
    data.vars()
        .iter()
        .find(|v| v.slots.contains(&slot))
        .and_then(|v| v.threshold)
        .unwrap_or(f64::INFINITY)
}

/// Everything one (partition, type) needs.
///
/// The ends' states and channels are kept beside the ends, not in them: an exchange walks
/// every state several times and a same-rank receiver looks at its sender's, in no order, so
/// on a mesh of many small blocks (hundreds of thousands of ends) the states must be dense
/// to stay in cache; the channels are read at set-up and for messages only.
#[derive(Debug)]
struct Route {
    send: Vec<End>,
    recv: Vec<End>,
    send_st: Vec<ChannelState>,
    recv_st: Vec<ChannelState>,
    send_ch: Vec<Channel>,
    recv_ch: Vec<Channel>,
    /// The same-rank send ends (sorted by peer rank, they are one range).
    local_send: Range<usize>,
    /// The same-rank receive ends, in order.
    local_recv: Vec<LocalRecv>,
    send_cache: BndCache,
    recv_cache: BndCache,
    send_buf: MsgArena,
    recv_buf: MsgArena,
    send_groups: Vec<Group>,
    recv_groups: Vec<Group>,
    /// Receive side of coalesced messages: per group a status and a data segment.
    coal: MsgArena,
    /// Per sub-halo of the send side: a value above its variable's sparse threshold; and
    /// whether some variable sent has a threshold (else the flags are not computed).
    over: Vec<u32>,
    thresholds: bool,
    /// Posting orders: indices into `send`/`recv` (or the groups, when coalesced).
    send_order: Vec<usize>,
    recv_order: Vec<usize>,
    /// (block, variable) pairs whose interior is restricted before sending.
    restrict: Vec<(usize, usize)>,
}

impl Route {
    /// Whether every receive end holds data or a null message.
    fn all_arrived(&self) -> bool {
        self.recv_st.iter().all(ChannelState::has_arrived)
    }
}

/// The communicator of variable `var` (only fill-ghost variables have one).
fn var_comm(
    comms: &[Option<SimpleCommunicator>],
    var: usize,
) -> Result<&SimpleCommunicator, BoundaryError> {
    comms
        .get(var)
        .and_then(Option::as_ref)
        .ok_or(BoundaryError::Unsupported("variable without ghosts"))
}

/// The ghost exchange of one rank.
pub struct Exchange {
    opts: ExchangeOptions,
    /// Where every message buffer of the routes comes from (and goes back to on drop).
    pool: BufferPool,
    shape: IndexShape,
    var_comms: Vec<Option<SimpleCommunicator>>,
    coal_comm: SimpleCommunicator,
    parts: Vec<Vec<usize>>,
    routes: Vec<Route>,
    finish: Vec<Vec<BlockFinish>>,
    prolongation: Vec<Prolongation>,
    pending_alloc: Vec<Vec<(usize, usize)>>,
    traffic: Traffic,
    defaults: Vec<f64>,
    /// Per storage slot: its variable's sparse threshold (infinite where it has none).
    thresholds: Vec<f64>,
    /// The form of the data it was built for, which every call's data must have.
    form: DataForm,
    /// How long [`fill_ghosts`](Exchange::fill_ghosts) waits for the messages of one
    /// boundary type; `None`: as long as it takes.
    timeout: Option<Duration>,
}

/// What an exchange's indices into a [`BlockData`] rely on: the block layout, the number of
/// blocks and each variable's slots.
#[derive(Debug)]
struct DataForm {
    layout: BlockLayout,
    blocks: usize,
    slots: Vec<Range<usize>>,
}

impl DataForm {
    fn of(data: &BlockData) -> Self {
        Self {
            layout: data.layout(),
            blocks: data.gids().len(),
            slots: data.vars().iter().map(|v| v.slots.clone()).collect(),
        }
    }
}

const GHOST_TYPES: [BoundaryType; 3] = [
    BoundaryType::Any,
    BoundaryType::Local,
    BoundaryType::Nonlocal,
];

fn order<T>(items: &[T], ordering: Ordering, key: impl Fn(&T) -> usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..items.len()).collect();
    match ordering {
        Ordering::Natural => {}
        Ordering::ByReceiver => idx.sort_by_key(|&i| (key(&items[i]), i)),
        Ordering::Random(seed) => {
            idx.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(seed));
        }
    }
    idx
}

/// What every rank computes alike from the block set before an exchange is built: the
/// neighbours of every block, and every rank's partitions.
struct Layout {
    neighbors: Arc<[BlockNeighbors]>,
    /// `parts[rank][p]`: the gids of partition `p` of `rank`.
    parts: Vec<Vec<Vec<usize>>>,
}

impl Layout {
    /// The layout of `mesh`, each block on a rank of the `nranks` there are.
    fn of<B: BlockSet + ?Sized>(mesh: &B, nranks: usize) -> Result<Self, BoundaryError> {
        let neighbors = mesh.neighbors()?;
        if let Some(b) = neighbors.iter().find(|b| b.rank >= nranks) {
            return Err(BoundaryError::Invalid(format!(
                "block {} is on rank {}, but the communicator has {nranks} ranks (the mesh was \
                 partitioned for more)",
                b.gid, b.rank
            )));
        }
        let parts = (0..nranks).map(|r| mesh.pack_partitions(r)).collect();
        Ok(Self { neighbors, parts })
    }

    /// Digests of what every rank must give an exchange alike: the blocks and their
    /// neighbours, the partitions, the variables, the block shape and the options that shape
    /// the messages.
    fn digests(&self, data: &BlockData, opts: ExchangeOptions) -> [(&'static str, u64); 5] {
        // FNV: the ranks of one job may run binaries built apart.
        fn digest(f: impl FnOnce(&mut Fnv)) -> u64 {
            let mut h = Fnv::default();
            f(&mut h);
            h.finish()
        }
        let blocks = digest(|h| {
            for b in self.neighbors.iter() {
                (b.gid, b.rank, b.loc).hash(h);
                for n in &b.neighbors {
                    let at = (n.loc, n.level_diff, n.element, n.fi, n.periodic_shift);
                    (n.gid, n.rank, at).hash(h);
                }
            }
        });
        let parts = digest(|h| self.parts.hash(h));
        let vars = digest(|h| {
            for v in data.vars() {
                let threshold = v.threshold.map(f64::to_bits);
                (&v.name, v.slots.len(), v.fill_ghost, threshold).hash(h);
            }
        });
        let shape = digest(|h| (data.shape(), data.coarse_shape()).hash(h));
        let options = digest(|h| (opts.coalesced, opts.split).hash(h));
        [
            ("meshes (blocks, their ranks or neighbours)", blocks),
            ("mesh-data partitions (parthenon/mesh/pack_size)", parts),
            (
                "variables (names, components, ghost exchange or sparse thresholds)",
                vars,
            ),
            ("block shapes (cells or ghost layers)", shape),
            ("exchange options (coalesced or split)", options),
        ]
    }
}

fn to_i32(x: usize, what: &str) -> Result<i32, BoundaryError> {
    i32::try_from(x).map_err(|_| BoundaryError::Geometry(format!("{what} {x} exceeds i32")))
}

impl Exchange {
    /// The exchange of this rank of `comm` for the fill-ghost variables of `data` on `mesh`
    /// (the leaves of a [`Mesh`](starhalo_mesh::Mesh), or any other [`BlockSet`] such as a
    /// multigrid level).
    /// Collective: every rank of `comm` must call it. Ranks that were given different meshes,
    /// partitions, fill-ghost variables, block shapes or options all fail, naming the first
    /// that differs; then it duplicates communicators and checks with each peer what each
    /// message will hold.
    pub fn new<B: BlockSet + ?Sized>(
        comm: &SimpleCommunicator,
        mesh: &B,
        data: &BlockData,
        opts: ExchangeOptions,
    ) -> Result<Self, BoundaryError> {
        Self::new_in(comm, mesh, data, opts, &BufferPool::new())
    }

    /// As [`new`](Self::new), with every message buffer drawn from `pool`: an exchange rebuilt
    /// after a remesh on the pool of the one it replaces (see [`pool`](Self::pool)) reuses
    /// the storage of every buffer whose size did not change.
    pub fn new_in<B: BlockSet + ?Sized>(
        comm: &SimpleCommunicator,
        mesh: &B,
        data: &BlockData,
        opts: ExchangeOptions,
        pool: &BufferPool,
    ) -> Result<Self, BoundaryError> {
        // A rank whose set-up fails tells the others before anyone waits on its messages, and
        // ranks given different meshes, fields or options stop before they make different
        // collective calls or post messages the others never match.
        let layout = collective::agree(
            comm,
            Layout::of(mesh, comm.size() as usize),
            "another rank could not set up its ghost exchange",
        )?;
        collective::same(comm, &layout.digests(data, opts))?;
        let ex = collective::agree(
            comm,
            Self::build(comm, mesh, layout, data, opts, pool),
            "another rank could not set up its ghost exchange",
        )?;
        // Sender and receiver of each message check that they list the same channels, of the
        // same lengths; a coalesced message's receiver could not cut it apart otherwise, and
        // a channel's message would not fit its receive buffer.
        let (mut sends, mut recvs) = (Vec::new(), Vec::new());
        for r in ex.routes.iter().step_by(3) {
            let listed = |ends: &'_ [End], chs: &'_ [Channel], i: usize| {
                Some((chs.get(i)?.key, ends.get(i)?.buf.len()))
            };
            sends.extend(coalesce::digests(&r.send_groups, |i| {
                listed(&r.send, &r.send_ch, i)
            }));
            recvs.extend(coalesce::digests(&r.recv_groups, |i| {
                listed(&r.recv, &r.recv_ch, i)
            }));
        }
        coalesce::agree(&ex.coal_comm, comm.rank(), &ex.pool, &sends, &recvs)?;
        Ok(ex)
    }

    /// This rank's part of [`new_in`](Self::new_in): the communicators are duplicated first
    /// (collectively, on every rank), then everything else is local.
    fn build<B: BlockSet + ?Sized>(
        comm: &SimpleCommunicator,
        mesh: &B,
        layout: Layout,
        data: &BlockData,
        opts: ExchangeOptions,
        pool: &BufferPool,
    ) -> Result<Self, BoundaryError> {
        let Layout {
            neighbors,
            parts: all_parts,
        } = layout;
        let rank = comm.rank() as usize;
        let shape = *data.shape();
        let vars: Vec<usize> = (0..data.vars().len())
            .filter(|&v| data.vars()[v].fill_ghost)
            .collect();
        let var_comms = (0..data.vars().len())
            .map(|v| vars.contains(&v).then(|| comm.duplicate()))
            .collect();
        let coal_comm = comm.duplicate();
        let tag_ub = p2p::tag_ub(&coal_comm);

        let levels_differ = neighbors
            .iter()
            .any(|b| b.neighbors.iter().any(|n| n.level_diff != 0));
        if levels_differ && data.coarse_shape().is_none() {
            return Err(BoundaryError::Invalid(
                "neighbouring blocks differ in level, so the data needs coarse buffers (as \
                 BlockData::new gives a multilevel mesh)"
                    .into(),
            ));
        }
        let rc = RankChannels::new(&neighbors, &vars, rank);
        let tags = TagMap::new(&rc, tag_ub)?;

        // Partitions of every rank, so both ends agree on message groups.
        let mut part_of = vec![0; mesh.nblocks()];
        for parts in &all_parts {
            for (p, gids) in parts.iter().enumerate() {
                for &g in gids {
                    part_of[g] = p;
                }
            }
        }
        let max_parts = all_parts.iter().map(Vec::len).max().unwrap_or(1).max(1);
        let parts: Vec<Vec<usize>> = all_parts[rank]
            .iter()
            .map(|gids| gids.iter().filter_map(|&g| data.local(g)).collect())
            .collect();
        let coal_tag = |src_part: usize, dst_part: usize| -> Result<i32, BoundaryError> {
            let t = (src_part * max_parts + dst_part) * 2 + 1;
            if t > tag_ub {
                return Err(BoundaryError::TagOverflow {
                    rank,
                    peer: rank,
                    tag: t,
                    channels: max_parts,
                    tag_ub,
                });
            }
            to_i32(t - 1, "tag")
        };

        let local = |gid: usize| {
            data.local(gid).ok_or_else(|| {
                BoundaryError::Geometry(format!("block {gid} is not on rank {rank}"))
            })
        };
        // Channels by the partition of their end on this rank, so that set-up stays linear in
        // the number of channels however many partitions there are.
        fn by_part<'a>(
            list: &'a [Channel],
            part_of: &[usize],
            nparts: usize,
            end: fn(&ChannelKey) -> usize,
        ) -> Vec<Vec<&'a Channel>> {
            let mut by = vec![Vec::new(); nparts];
            for c in list {
                if let Some(v) = by.get_mut(part_of[end(&c.key)]) {
                    v.push(c);
                }
            }
            by
        }
        let sends_of = by_part(&rc.send, &part_of, parts.len(), |k| k.sender);
        let recvs_of = by_part(&rc.recv, &part_of, parts.len(), |k| k.receiver);
        let mut routes = Vec::with_capacity(parts.len() * 3);
        for p in 0..parts.len() {
            for ty in GHOST_TYPES {
                // A type the exchange does not serve keeps an empty route, so that routes are
                // numbered alike either way.
                let served = opts.split || ty == BoundaryType::Any;
                // Send ends: sorted by (peer rank, peer partition, key) so that each coalesced
                // group is one contiguous run of the buffer.
                let mut send: Vec<&Channel> = sends_of[p]
                    .iter()
                    .copied()
                    .filter(|c| served && ty.admits(c))
                    .collect();
                send.sort_by_key(|c| (c.receiver_rank, part_of[c.key.receiver], c.key));
                let mut recv: Vec<&Channel> = recvs_of[p]
                    .iter()
                    .copied()
                    .filter(|c| served && ty.admits(c))
                    .collect();
                recv.sort_by_key(|c| (c.sender_rank, part_of[c.key.sender], c.key));

                let build = |list: &[&Channel],
                             sending: bool|
                 -> Result<(Vec<End>, BndCache), BoundaryError> {
                    let mut ends = Vec::with_capacity(list.len());
                    let mut infos = Vec::new();
                    let mut off = 0;
                    for c in list {
                        let (bx, space) = if sending {
                            send_box(c, &shape)?
                        } else {
                            recv_box(c, &shape)?
                        };
                        let block = local(if sending {
                            c.key.sender
                        } else {
                            c.key.receiver
                        })?;
                        let flags = FLAG_ALLOCATED
                            | if space == Space::Coarse {
                                FLAG_COARSE
                            } else {
                                0
                            };
                        let first = infos.len();
                        let start = off;
                        for s in data.vars()[c.key.var].slots.clone() {
                            infos.push(BndInfo::new(block, s, &bx, off, flags));
                            off += bx.len();
                        }
                        let (peer, tag) = if c.is_local() {
                            (rank, 0)
                        } else if sending {
                            (c.receiver_rank, tags.send_tag(c).unwrap_or(0))
                        } else {
                            (c.sender_rank, tags.recv_tag(c).unwrap_or(0))
                        };
                        ends.push(End {
                            block,
                            var: c.key.var,
                            halos: first..infos.len(),
                            buf: start..off,
                            peer: to_i32(peer, "rank")?,
                            tag: to_i32(tag, "tag")?,
                            sparse: data.vars()[c.key.var].threshold.is_some(),
                            local: c.is_local(),
                            posted: None,
                        });
                    }
                    let cache = BndCache::new(data.layout(), data.gids().len(), infos)?;
                    Ok((ends, cache))
                };
                let (send_ends, send_cache) = build(&send, true)?;
                let (recv_ends, recv_cache) = build(&recv, false)?;

                // Coalesced groups: runs of remote ends with the same peer and partition pair.
                let groups = |ends: &[End], chs: &[&Channel]| {
                    coalesce::groups(
                        ends.iter().zip(chs).map(|(e, c)| {
                            let parts = (part_of[c.key.sender], part_of[c.key.receiver]);
                            (!e.local).then_some((e.peer, parts))
                        }),
                        |&(from, to)| coal_tag(from, to),
                    )
                };
                let mut send_groups = groups(&send_ends, &send)?;
                let recv_groups = groups(&recv_ends, &recv)?;

                // Send buffer: the packed sub-halos, then the coalesced groups' status values.
                let len = coalesce::place_status(&mut send_groups, send_cache.buffer_len());
                let send_buf = MsgArena::with_len_in(pool, len)?;
                let recv_buf =
                    MsgArena::new_in(pool, recv_ends.iter().map(|e| e.buf.clone()).collect())?;
                let coal = coalesce::recv_arena(pool, &recv_groups)?;
                let coalesced = opts.coalesced;
                let send_order = if coalesced {
                    order(&send_groups, opts.ordering, |g| g.ends.start)
                } else {
                    order(&send, opts.ordering, |c| c.key.receiver)
                };
                let recv_order = if coalesced {
                    order(&recv_groups, opts.ordering, |g| g.ends.start)
                } else {
                    order(&recv, opts.ordering, |c| c.key.receiver)
                };
                let mut restrict: Vec<(usize, usize)> = send_ends
                    .iter()
                    .zip(&send)
                    .filter(|(_, c)| c.level_diff < 0)
                    .map(|(e, _)| (e.block, e.var))
                    .collect();
                restrict.sort_unstable();
                restrict.dedup();
                let sparse_sends = send_ends
                    .iter()
                    .any(|e| data.vars()[e.var].threshold.is_some());
                // Sorted by peer rank first, the same-rank sends are one range.
                let first = send_ends.iter().position(|e| e.local);
                let first = first.unwrap_or(send_ends.len());
                let n = send_ends[first..].iter().take_while(|e| e.local).count();
                let local_send = first..first + n;
                if send_ends.iter().filter(|e| e.local).count() != n {
                    return Err(BoundaryError::Mismatch(
                        "same-rank send ends are not one range".into(),
                    ));
                }
                routes.push(Route {
                    send_st: vec![ChannelState::new(Role::Sender); send_ends.len()],
                    recv_st: vec![ChannelState::new(Role::Receiver); recv_ends.len()],
                    send_ch: send.iter().map(|c| **c).collect(),
                    recv_ch: recv.iter().map(|c| **c).collect(),
                    local_send,
                    local_recv: Vec::new(),
                    send: send_ends,
                    recv: recv_ends,
                    over: vec![0; send_cache.infos().len()],
                    thresholds: sparse_sends,
                    send_cache,
                    recv_cache,
                    send_buf,
                    recv_buf,
                    send_groups,
                    recv_groups,
                    coal,
                    send_order,
                    recv_order,
                    restrict,
                });
            }
        }

        // Same-rank receives read the sender's end in the sender's route of the same type (a
        // channel is in the route of every type that admits it; route r has type r % 3).
        let senders: HashMap<(ChannelKey, usize), (usize, usize)> = routes
            .iter()
            .enumerate()
            .flat_map(|(r, route)| {
                let keys = route.local_send.clone().map(|j| route.send_ch[j].key);
                keys.zip(route.local_send.clone())
                    .map(move |(key, j)| ((key, r % 3), (r, j)))
            })
            .collect();
        for r in 0..routes.len() {
            let mut local_recv = Vec::new();
            for (i, c) in routes[r].recv_ch.iter().enumerate() {
                if !c.is_local() {
                    continue;
                }
                let key = c.key;
                let &(route, src) = senders
                    .get(&(key, r % 3))
                    .ok_or_else(|| BoundaryError::Mismatch(format!("no sender for {key:?}")))?;
                local_recv.push(LocalRecv {
                    end: i,
                    route,
                    src,
                    values: routes[route].send[src].buf.clone(),
                });
            }
            routes[r].local_recv = local_recv;
        }

        // Post-unpack work per block, from every channel it receives on (of one variable: the
        // geometry is the same for all).
        let first_var = vars.first().copied().unwrap_or(0);
        let mut recv_of: HashMap<usize, Vec<Channel>> = HashMap::new();
        for c in rc.recv.iter().filter(|c| c.key.var == first_var) {
            recv_of.entry(c.key.receiver).or_default().push(*c);
        }
        let mut finish = Vec::with_capacity(parts.len());
        for blocks in &parts {
            let mut list = Vec::with_capacity(blocks.len());
            for &b in blocks {
                let gid = data.gids()[b];
                let recv = recv_of.remove(&gid).unwrap_or_default();
                let mut faces = [[None; 2]; 3];
                for (d, f) in faces.iter_mut().enumerate() {
                    for (s, x) in f.iter_mut().enumerate() {
                        *x = mesh.face_boundary(gid, d, s);
                    }
                }
                list.push(BlockFinish::new(b, &recv, &shape, faces)?);
            }
            finish.push(list);
        }

        Ok(Self {
            opts,
            pool: pool.clone(),
            shape,
            var_comms,
            coal_comm,
            pending_alloc: vec![Vec::new(); parts.len()],
            parts,
            routes,
            finish,
            prolongation: vec![Prolongation::default(); data.vars().len()],
            traffic: Traffic::default(),
            defaults: data.slot_defaults().to_vec(),
            thresholds: (0..data.layout().fine.nvar)
                .map(|s| slot_threshold(data, s))
                .collect(),
            form: DataForm::of(data),
            timeout: None,
        })
    }

    /// Makes [`fill_ghosts`](Self::fill_ghosts) and its kin fail with
    /// [`BoundaryError::Timeout`], naming the channels still awaited, once the fill of one
    /// boundary type has waited `timeout` for its messages, rather than wait for ever on a
    /// stuck peer. (Task regions time the task-by-task calls themselves.)
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = Some(timeout);
    }

    /// Refuses data of another form than the exchange was built for (its indices would miss).
    /// Allocates nothing when the form matches: a warm exchange allocates nothing at all.
    fn check_data(&self, data: &BlockData) -> Result<(), BoundaryError> {
        let f = &self.form;
        if data.layout() == f.layout
            && data.gids().len() == f.blocks
            && data.vars().iter().map(|v| &v.slots).eq(&f.slots)
        {
            return Ok(());
        }
        let got = DataForm::of(data);
        let what = if got.blocks != f.blocks {
            format!("{} blocks, not {}", f.blocks, got.blocks)
        } else if got.slots.len() != f.slots.len() {
            format!("{} variables, not {}", f.slots.len(), got.slots.len())
        } else if let Some(v) = (0..f.slots.len()).find(|&v| got.slots[v] != f.slots[v]) {
            format!(
                "variable {v} in slots {:?}, not {:?}",
                f.slots[v], got.slots[v]
            )
        } else {
            format!("the block layout {:?}, not {:?}", f.layout, got.layout)
        };
        Err(BoundaryError::Invalid(format!(
            "the data is not the form the exchange was built for: {what}"
        )))
    }

    /// The number of mesh-data partitions of this rank.
    pub fn partitions(&self) -> usize {
        self.parts.len()
    }

    /// The options it was built with.
    pub fn options(&self) -> ExchangeOptions {
        self.opts
    }

    /// Registers the prolongation operator of variable `var` (default: minmod-limited linear).
    pub fn set_prolongation(&mut self, var: usize, op: Prolongation) -> Result<(), BoundaryError> {
        let n = self.prolongation.len();
        let p = self
            .prolongation
            .get_mut(var)
            .ok_or_else(|| BoundaryError::Invalid(format!("no variable {var} (there are {n})")))?;
        *p = op;
        Ok(())
    }

    /// The pool its message buffers come from.
    pub fn pool(&self) -> &BufferPool {
        &self.pool
    }

    /// Moves every message buffer into a new buffer made [like](Buffer::zeroed_like) `like`
    /// (for device memory: `Buffer::zeroed_for_mpi`), which MPI then reads and writes in
    /// place: the GPU-aware path, where the
    /// field space packs into and unpacks from device memory directly (for device memory,
    /// the MPI must support it: `starhalo_sf::mpi_cuda_support`). Only between exchanges.
    pub fn place_messages(&mut self, like: &Buffer<f64>) -> Result<(), BoundaryError> {
        for r in &mut self.routes {
            r.send_buf.wait();
            for a in [&mut r.send_buf, &mut r.recv_buf, &mut r.coal] {
                a.place(like)?;
            }
        }
        Ok(())
    }

    /// Per storage slot: its variable's sparse threshold (infinite where it has none), as
    /// [`FieldSpace::pack`] is given it.
    pub fn thresholds(&self) -> &[f64] {
        &self.thresholds
    }

    /// Messages and bytes sent so far.
    pub fn traffic(&self) -> Traffic {
        self.traffic
    }

    fn route_index(&self, part: usize, ty: BoundaryType) -> Result<usize, BoundaryError> {
        let t = ty
            .ghost_index()
            .filter(|&t| t == 0 || self.opts.split)
            .ok_or(BoundaryError::Unsupported(ty.name()))?;
        if part >= self.parts.len() {
            return Err(BoundaryError::Geometry(format!(
                "partition {part} of {}",
                self.parts.len()
            )));
        }
        Ok(part * 3 + t)
    }

    /// The channels of partition `part` and type `ty` whose message has not arrived yet: what
    /// a receive that times out reports.
    pub fn pending(&self, part: usize, ty: BoundaryType) -> Vec<String> {
        let Ok(ri) = self.route_index(part, ty) else {
            return Vec::new();
        };
        let r = &self.routes[ri];
        r.recv_ch
            .iter()
            .zip(&r.recv_st)
            .filter(|(_, st)| !st.has_arrived())
            .map(|(c, _)| c.to_string())
            .collect()
    }

    /// Posts the receives of partition `part`'s channels of type `ty`.
    pub fn start_receive(
        &mut self,
        part: usize,
        ty: BoundaryType,
    ) -> Result<TaskStatus, BoundaryError> {
        let ri = self.route_index(part, ty)?;
        if self.opts.coalesced {
            return Ok(TaskStatus::Complete);
        }
        let r = &mut self.routes[ri];
        for k in 0..r.recv_order.len() {
            let i = r.recv_order[k];
            let e = &mut r.recv[i];
            if e.local
                || e.sparse
                || e.posted.is_some()
                || r.recv_st[i].state() != BufferState::Stale
            {
                continue;
            }
            let comm = var_comm(&self.var_comms, e.var)?;
            r.recv_buf.recv(comm, i, e.buf.len(), e.peer, e.tag)?;
            e.posted = Some(e.buf.len());
        }
        Ok(TaskStatus::Complete)
    }

    /// Restricts, packs and sends partition `part`'s channels of type `ty`.
    pub fn send(
        &mut self,
        part: usize,
        ty: BoundaryType,
        data: &mut BlockData,
    ) -> Result<TaskStatus, BoundaryError> {
        let mut host = HostFields(self.opts.policy);
        self.send_in(part, ty, data, &mut host)
    }

    /// [`send`](Self::send) with the values packed from `fields`.
    pub fn send_in(
        &mut self,
        part: usize,
        ty: BoundaryType,
        data: &mut BlockData,
        fields: &mut dyn FieldSpace,
    ) -> Result<TaskStatus, BoundaryError> {
        self.check_data(data)?;
        let ri = self.route_index(part, ty)?;
        let r = &mut self.routes[ri];
        // Same-rank receivers must have consumed the last exchange.
        if r.send_st[r.local_send.clone()]
            .iter()
            .any(|st| st.state() != BufferState::Stale)
        {
            return Ok(TaskStatus::Incomplete);
        }
        r.send_buf.wait();
        // Remote sends have completed: their ends go stale (they are already, the first time).
        let (before, rest) = r.send_st.split_at_mut(r.local_send.start);
        let after = &mut rest[r.local_send.len()..];
        for st in before.iter_mut().chain(after) {
            if st.state() != BufferState::Stale {
                st.stale()?;
            }
        }
        if !r.restrict.is_empty() {
            fields.restrict(ri, &r.restrict, &self.shape, data)?;
        }
        // Sparse channels send data only with some value above the threshold: read in the
        // host buffer, or, where the values stay in the placed buffer, flagged by the pack.
        let placed = r.send_buf.is_placed();
        let flags = (r.thresholds && placed).then_some((&self.thresholds[..], &mut r.over[..]));
        fields.pack(ri, &r.send_cache, data, r.send_buf.values_mut()?, flags)?;
        let values = if placed {
            None
        } else {
            Some(r.send_buf.buf()?)
        };
        for (e, st) in r.send.iter().zip(&mut r.send_st) {
            let above = |t: f64| match values {
                Some(buf) => buf[e.buf.clone()].iter().any(|x| x.abs() > t),
                None => r.over[e.halos.clone()].iter().any(|&f| f != 0),
            };
            let live =
                data.is_allocated(e.block, e.var) && data.vars()[e.var].threshold.is_none_or(above);
            st.sent(live)?;
        }
        if self.opts.coalesced {
            let (send, send_st) = (&r.send, &r.send_st);
            coalesce::compact(&mut r.send_groups, &mut r.send_buf, |i| {
                (
                    send[i].buf.clone(),
                    send_st[i].state() == BufferState::Sending,
                )
            })?;
            coalesce::send(
                &r.send_groups,
                r.send_order.iter().copied(),
                &mut r.send_buf,
                &self.coal_comm,
                &mut self.traffic,
            )?;
        } else {
            for &i in &r.send_order {
                let e = &r.send[i];
                if e.local {
                    continue;
                }
                let range = if r.send_st[i].state() == BufferState::Sending {
                    e.buf.clone()
                } else {
                    e.buf.start..e.buf.start
                };
                let comm = var_comm(&self.var_comms, e.var)?;
                self.traffic.messages += 1;
                self.traffic.bytes += (range.len() * 8) as u64;
                r.send_buf.send(comm, range, e.peer, e.tag)?;
            }
        }
        Ok(TaskStatus::Complete)
    }

    /// Polls partition `part`'s channels of type `ty`: `Incomplete` until all have arrived.
    pub fn receive(&mut self, part: usize, ty: BoundaryType) -> Result<TaskStatus, BoundaryError> {
        let ri = self.route_index(part, ty)?;
        self.start_receive(part, ty)?;
        // Same-rank channels: the receiver reads the sender's packed values, in one copy per
        // run of ends whose values lie back to back in both buffers (both sides sort a
        // route's same-rank ends alike, so most of them make one run).
        let mut run = None;
        for k in 0..self.routes[ri].local_recv.len() {
            let r = &self.routes[ri];
            let LocalRecv {
                end: i,
                route: sr,
                src: j,
                ref values,
            } = r.local_recv[k];
            if r.recv_st[i].state() != BufferState::Stale {
                continue;
            }
            let arrival = match self.routes[sr].send_st[j].state() {
                BufferState::Sending => {
                    let fills = values.len() == r.recv[i].buf.len();
                    if let Some(done) = Run::push(&mut run, sr, values.clone(), i, fills) {
                        copy_local(done, &mut self.routes, ri)?;
                    }
                    Arrival::Data
                }
                BufferState::SendingNull => Arrival::Null,
                _ => continue,
            };
            // The run's values are copied before this call returns.
            self.routes[ri].recv_st[i].arrived(arrival)?;
        }
        if let Some(done) = run {
            copy_local(done, &mut self.routes, ri)?;
        }
        let r = &mut self.routes[ri];
        if self.opts.coalesced {
            for k in 0..r.recv_order.len() {
                let Some((ends, mut msg)) = coalesce::receive(
                    &mut r.recv_groups,
                    r.recv_order[k],
                    &mut r.coal,
                    &self.coal_comm,
                )?
                else {
                    continue;
                };
                // The message holds its channels' values back to back: one copy per run
                // between nulls.
                let mut run = None;
                for (k, i) in ends.enumerate() {
                    let arrival = match msg.take(k, r.recv[i].buf.len())? {
                        Some(values) => {
                            if let Some(done) = Run::push(&mut run, ri, values, i, true) {
                                r.recv_buf
                                    .copy_to_segments(done.ends, &r.coal, done.values)?;
                            }
                            Arrival::Data
                        }
                        None => Arrival::Null,
                    };
                    r.recv_st[i].arrived(arrival)?;
                }
                if let Some(done) = run {
                    r.recv_buf
                        .copy_to_segments(done.ends, &r.coal, done.values)?;
                }
                msg.finish()?;
            }
        } else {
            for k in 0..r.recv_order.len() {
                let i = r.recv_order[k];
                let e = &mut r.recv[i];
                if e.local
                    || !e.sparse
                    || e.posted.is_some()
                    || r.recv_st[i].state() != BufferState::Stale
                {
                    continue;
                }
                let comm = var_comm(&self.var_comms, e.var)?;
                // Sparse: the size tells data (full) from null (empty) before receiving.
                if let Some(n) = p2p::probe(comm, e.peer, e.tag)? {
                    r.recv_buf.recv(comm, i, n, e.peer, e.tag)?;
                    e.posted = Some(n);
                }
            }
            if r.recv_buf.test() {
                for (e, st) in r.recv.iter_mut().zip(&mut r.recv_st) {
                    if let Some(n) = e.posted.take() {
                        st.arrived(if n > 0 { Arrival::Data } else { Arrival::Null })?;
                    }
                }
            }
        }
        Ok(if r.all_arrived() {
            TaskStatus::Complete
        } else {
            TaskStatus::Incomplete
        })
    }

    /// Unpacks partition `part`'s channels of type `ty` in one dispatch; `Incomplete` while
    /// some have not arrived.
    pub fn set_bounds(
        &mut self,
        part: usize,
        ty: BoundaryType,
        data: &mut BlockData,
    ) -> Result<TaskStatus, BoundaryError> {
        let mut host = HostFields(self.opts.policy);
        self.set_bounds_in(part, ty, data, &mut host)
    }

    /// [`set_bounds`](Self::set_bounds) with the values unpacked into `fields`.
    pub fn set_bounds_in(
        &mut self,
        part: usize,
        ty: BoundaryType,
        data: &mut BlockData,
        fields: &mut dyn FieldSpace,
    ) -> Result<TaskStatus, BoundaryError> {
        self.check_data(data)?;
        let ri = self.route_index(part, ty)?;
        let r = &mut self.routes[ri];
        if !r.all_arrived() {
            return Ok(TaskStatus::Incomplete);
        }
        for (e, st) in r.recv.iter().zip(&r.recv_st) {
            let live = st.state() == BufferState::Received;
            r.recv_cache.set_allocated(e.halos.clone(), live);
            if live && !data.is_allocated(e.block, e.var) {
                self.pending_alloc[part].push((e.block, e.var));
            }
        }
        fields.unpack(
            ri,
            &r.recv_cache,
            r.recv_buf.values()?,
            data,
            &self.defaults,
        )?;
        coalesce::rearm(&mut r.recv_groups);
        for st in &mut r.recv_st {
            st.stale()?;
        }
        for k in 0..self.routes[ri].local_recv.len() {
            let LocalRecv { route, src, .. } = self.routes[ri].local_recv[k];
            self.routes[route].send_st[src].stale()?;
        }
        Ok(TaskStatus::Complete)
    }

    /// Allocates what arrived for unallocated sparse variables, prolongates from coarser
    /// neighbours and applies physical boundaries on partition `part`: after `set_bounds` of
    /// every type used.
    pub fn finish(
        &mut self,
        part: usize,
        data: &mut BlockData,
    ) -> Result<TaskStatus, BoundaryError> {
        self.finish_in(part, data, &mut HostFields(self.opts.policy))
    }

    /// [`finish`](Self::finish) with the post-unpack work done by `fields` where it can.
    pub fn finish_in(
        &mut self,
        part: usize,
        data: &mut BlockData,
        fields: &mut dyn FieldSpace,
    ) -> Result<TaskStatus, BoundaryError> {
        self.check_data(data)?;
        let Some(list) = self.finish.get(part) else {
            return Err(BoundaryError::Geometry(format!(
                "partition {part} of {}",
                self.parts.len()
            )));
        };
        for (b, v) in self.pending_alloc[part].drain(..) {
            data.mark_allocated(b, v);
        }
        fields.finish(part, list, &self.prolongation, &self.shape, data)?;
        Ok(TaskStatus::Complete)
    }

    /// One whole ghost fill of every partition with type `any`, polling until done.
    pub fn fill_ghosts(&mut self, data: &mut BlockData) -> Result<(), BoundaryError> {
        self.fill_ghosts_as(&[BoundaryType::Any], data)
    }

    /// Each route's send and receive caches, in the numbering [`FieldSpace`] is given.
    pub fn route_caches(&self) -> impl Iterator<Item = (&BndCache, &BndCache)> {
        self.routes.iter().map(|r| (&r.send_cache, &r.recv_cache))
    }

    /// Each route's `(block, variable)` list restricted before it packs
    /// ([`FieldSpace::restrict`]), in the numbering of [`route_caches`](Self::route_caches).
    pub fn route_restricts(&self) -> impl Iterator<Item = &[(usize, usize)]> {
        self.routes.iter().map(|r| &r.restrict[..])
    }

    /// Partition `part`'s post-unpack work per block ([`FieldSpace::finish`]).
    pub fn finish_work(&self, part: usize) -> &[BlockFinish] {
        self.finish.get(part).map_or(&[], Vec::as_slice)
    }

    /// The prolongation of each variable.
    pub fn prolongations(&self) -> &[Prolongation] {
        &self.prolongation
    }

    /// One whole ghost fill running the given types one after the other (`[Any]`, or
    /// `[Local, Nonlocal]`), polling until done.
    pub fn fill_ghosts_as(
        &mut self,
        types: &[BoundaryType],
        data: &mut BlockData,
    ) -> Result<(), BoundaryError> {
        let mut host = HostFields(self.opts.policy);
        self.fill_ghosts_in(types, data, &mut host)
    }

    /// [`fill_ghosts_as`](Self::fill_ghosts_as) with the values in `fields`.
    pub fn fill_ghosts_in(
        &mut self,
        types: &[BoundaryType],
        data: &mut BlockData,
        fields: &mut dyn FieldSpace,
    ) -> Result<(), BoundaryError> {
        let n = self.parts.len();
        for &ty in types {
            let patience = Patience::new(self.timeout);
            for p in 0..n {
                self.start_receive(p, ty)?;
            }
            // Same-rank receivers of the previous fill are the only thing a send waits for.
            let what = |p: usize| move || format!("ghost fill `{}` of partition {p}", ty.name());
            for p in 0..n {
                while self.send_in(p, ty, data, fields)? == TaskStatus::Incomplete {
                    patience.poll(what(p))?;
                }
            }
            // Every receive is posted, so partitions are taken in turn: the wait is the
            // same, and nothing is allocated to track them.
            for p in 0..n {
                while self.receive(p, ty)? == TaskStatus::Incomplete {
                    patience.poll(|| {
                        let pending = waiting_for(&self.pending(p, ty));
                        format!("{}, from {pending}", what(p)())
                    })?;
                }
                self.set_bounds_in(p, ty, data, fields)?;
            }
        }
        for p in 0..n {
            self.finish_in(p, data, fields)?;
        }
        Ok(())
    }
}

/// Mutable `a` and shared `b` of one slice (`a != b`).
fn pair_mut<T>(v: &mut [T], a: usize, b: usize) -> (&mut T, &T) {
    if a < b {
        let (x, y) = v.split_at_mut(b);
        (&mut x[a], &y[0])
    } else {
        let (x, y) = v.split_at_mut(a);
        (&mut y[0], &x[b])
    }
}
