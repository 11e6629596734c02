//! Flux correction at fine–coarse faces: the conservation step of an AMR update.
//!
//! Where a coarse block meets finer blocks through a face, the coarse block's fluxes on that
//! face are not the sum of the fine ones, so a conservative update would create or destroy
//! the conserved quantity there. After every block has computed its face fluxes, each fine
//! block area-averages its fluxes on such a face over every `2^(ndim-1)` fine faces that
//! cover one coarse face and sends them; the coarse block replaces its own fluxes on the half
//! (quarter in 3-D) of the face that the sender covers. Then both sides of the face agree.
//!
//! - [`FluxData`] holds the face fluxes of one rank's blocks: per block, per variable slot,
//!   per active direction `d`, an array of `n_d + 1` faces along `d` by the interior cells
//!   along the other directions (no ghosts). Every slot of every variable of the
//!   [`BlockData`] gets fluxes; a [`FluxCorrection`] corrects the variables it was built for.
//! - [`FluxSpace`] is what a correction asks of the storage of the fluxes: restrict its
//!   sending [`FluxFace`]s into the message buffer, set its receiving ones from it.
//!   [`FluxData`] does it on the host; `DeviceFluxes` (feature `cuda`) in one launch each on
//!   a GPU, into and from host buffers (staged) or message buffers in device memory
//!   ([`FluxCorrection::place_messages`]).
//! - [`FluxCorrection`] is built per rank after each remesh (collectively, like
//!   [`Exchange`](crate::Exchange)). Its channels are the fine→coarse channels through faces
//!   only (receiver one level coarser, sender element a face): same-level faces, edges and
//!   corners carry no flux correction. Same-rank channels copy; cross-rank channels travel
//!   on a communicator of its own, coalesced by default (one status and one data message per
//!   peer rank, as the ghost exchange sends them), or one message per channel with dense
//!   tags. Message buffers come from a [`BufferPool`], shared with the exchange in a driver.
//! - Sparse variables: a sender whose variable is unallocated sends a null (an empty message,
//!   or a 0 in the coalesced status), and a receiver whose variable is unallocated ignores
//!   what arrives. Flux correction never allocates.
//!
//! Task order per cycle: [`FluxCorrection::start_receive`] (`flxcor_recv`),
//! [`FluxCorrection::send`] (`flxcor_send`), [`FluxCorrection::receive`] (`flxcor_recv`,
//! polls), [`FluxCorrection::set_bounds`] (`flxcor_recv`); or [`FluxCorrection::correct`]
//! for all four, blocking.

use std::ops::Range;
use std::time::Duration;

use starhalo_exec::Buffer;
use starhalo_mesh::field::IndexShape;
use starhalo_mesh::{BlockNeighbors, ElementKind, Mesh};
use starhalo_sf::mpi::topology::{Communicator, SimpleCommunicator};
use starhalo_sf::p2p::{self, MsgArena, Values, ValuesMut};
use starhalo_sf::pool::BufferPool;

use crate::channel::{Channel, RankChannels};
use crate::coalesce::{self, Group};
use crate::collective;
use crate::comm_buffer::{Arrival, BufferState, ChannelState, Role};
use crate::copy_run::Run;
use crate::error::BoundaryError;
use crate::exchange::{BoundaryType, TaskStatus, Traffic};
use crate::patience::{waiting_for, Patience};
use crate::storage::BlockData;
use crate::tags::TagMap;

/// Face fluxes of one rank's blocks.
///
/// The array of direction `d` has dimensions [`FluxData::face_dims`]`(d)`: `n_d + 1` along
/// `d`, the interior cell counts along the other directions, stored with the first direction
/// fastest. Face `i` along `d` is the lower face of interior cell `i` (so face `n_d` is the
/// upper face of the last cell). Inactive directions have empty arrays.
#[derive(Debug, Clone, PartialEq)]
pub struct FluxData {
    ndim: usize,
    nblocks: usize,
    nslots: usize,
    dims: [[usize; 3]; 3],
    /// Start of each direction's array within one slot, and the slot length (`off[3]`).
    off: [usize; 4],
    data: Vec<f64>,
}

impl FluxData {
    /// Zero fluxes for every block and slot of `data`.
    pub fn new(data: &BlockData) -> Self {
        let nslots = data.vars().iter().map(|v| v.slots.end).max().unwrap_or(0);
        Self::with_shape(data.shape(), data.gids().len(), nslots)
    }

    /// Zero fluxes for `nblocks` blocks of `shape` with `nslots` slots each.
    pub fn with_shape(shape: &IndexShape, nblocks: usize, nslots: usize) -> Self {
        let ndim = shape.ndim();
        let nx = shape.nx();
        let mut dims = [[0; 3]; 3];
        let mut off = [0; 4];
        for d in 0..3 {
            if d < ndim {
                dims[d] = nx;
                dims[d][d] += 1;
            }
            off[d + 1] = off[d] + dims[d].iter().product::<usize>();
        }
        Self {
            ndim,
            nblocks,
            nslots,
            dims,
            off,
            data: vec![0.0; nblocks * nslots * off[3]],
        }
    }

    /// Number of dimensions.
    pub fn ndim(&self) -> usize {
        self.ndim
    }

    /// Number of blocks.
    pub fn blocks(&self) -> usize {
        self.nblocks
    }

    /// Number of slots per block.
    pub fn slots(&self) -> usize {
        self.nslots
    }

    /// Dimensions of direction `d`'s face array (`[0; 3]` for an inactive direction).
    pub fn face_dims(&self, d: usize) -> [usize; 3] {
        self.dims.get(d).copied().unwrap_or([0; 3])
    }

    /// Index of face `p` in direction `d`'s array.
    pub fn face_index(&self, d: usize, p: [usize; 3]) -> usize {
        let n = self.face_dims(d);
        (p[2] * n[1] + p[1]) * n[0] + p[0]
    }

    fn range(&self, b: usize, slot: usize, d: usize) -> Range<usize> {
        assert!(
            b < self.nblocks && slot < self.nslots && d < 3,
            "flux array ({b}, {slot}, {d}) out of ({}, {}, 3)",
            self.nblocks,
            self.nslots
        );
        let base = (b * self.nslots + slot) * self.off[3];
        base + self.off[d]..base + self.off[d + 1]
    }

    /// Direction `d`'s fluxes of slot `slot` of local block `b`.
    pub fn flux(&self, b: usize, slot: usize, d: usize) -> &[f64] {
        &self.data[self.range(b, slot, d)]
    }

    /// Direction `d`'s fluxes of slot `slot` of local block `b`, for writing.
    pub fn flux_mut(&mut self, b: usize, slot: usize, d: usize) -> &mut [f64] {
        let r = self.range(b, slot, d);
        &mut self.data[r]
    }

    /// Every value.
    pub fn values(&self) -> &[f64] {
        &self.data
    }

    /// Sets every flux to `x`.
    pub fn fill(&mut self, x: f64) {
        self.data.fill(x);
    }
}

/// One fine–coarse face of a flux correction, as a [`FluxSpace`] restricts or sets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FluxFace {
    /// Local block.
    pub block: usize,
    /// The variable's slots, one after another in the buffer.
    pub slots: Range<usize>,
    /// Normal direction.
    pub dir: usize,
    /// A box of the face array along `dir`: one face layer along `dir`, and along the other
    /// directions coarse faces. A sending (fine) face restricts the fine faces `2q` and
    /// `2q + 1` under each coarse face `q`, which covers its whole face; a receiving (coarse)
    /// face replaces the faces of the box.
    pub faces: [Range<usize>; 3],
    /// Its values in the message buffer: slot after slot, the box's faces first direction
    /// fastest.
    pub buf: Range<usize>,
}

impl FluxFace {
    /// The face of fine→coarse face channel `c` at this rank's end (`sending`: the fine
    /// block's, else the coarse one's) on blocks of `shape`: local block `block`, its variable's
    /// `slots`, its values from `at` in the buffer.
    pub fn of_channel(
        c: &Channel,
        sending: bool,
        shape: &IndexShape,
        block: usize,
        slots: Range<usize>,
        at: usize,
    ) -> Result<Self, BoundaryError> {
        let (ndim, nx) = (shape.ndim(), shape.nx());
        let element = if sending {
            c.key.element
        } else {
            c.receiver_element()
        };
        let o = element.offset();
        let Some(d) = (0..ndim).find(|&d| o[d] != 0) else {
            return Err(BoundaryError::Geometry(format!("{element} is not a face")));
        };
        let face = if o[d] > 0 { nx[d] } else { 0 };
        // Sending: the whole fine face, restricted; receiving: the half (quarter) of the
        // coarse face the sender covers.
        let mut faces = [0..1, 0..1, 0..1];
        faces[d] = face..face + 1;
        for (s, e) in free_dirs(ndim, d).enumerate() {
            if !nx[e].is_multiple_of(2) {
                return Err(BoundaryError::Geometry(format!(
                    "odd block extent {} along direction {e}",
                    nx[e]
                )));
            }
            let h = nx[e] / 2;
            let start = if sending { 0 } else { usize::from(c.fi[s]) * h };
            faces[e] = start..start + h;
        }
        let mut f = Self {
            block,
            slots,
            dir: d,
            faces,
            buf: at..at,
        };
        f.buf.end = at + f.per_slot() * f.slots.len();
        Ok(f)
    }

    /// Values per slot.
    pub fn per_slot(&self) -> usize {
        self.faces.iter().map(ExactSizeIterator::len).product()
    }

    /// Where the `k`-th of its slots lies in the message buffer.
    pub fn slot_values(&self, k: usize) -> Range<usize> {
        let per = self.per_slot();
        let start = self.buf.start + k * per;
        start..start + per
    }
}

/// Where face fluxes live, as a [`FluxCorrection`] reads and writes them: [`FluxData`] on the
/// host, `DeviceFluxes` (feature `cuda`) on a GPU.
pub trait FluxSpace {
    /// Blocks held.
    fn blocks(&self) -> usize;
    /// Slots per block.
    fn slots(&self) -> usize;
    /// Dimensions of one slot's face array along `d` (`[0; 3]` for an inactive direction).
    fn face_dims(&self, d: usize) -> [usize; 3];
    /// Restricts every sending face into `buf` (at its [`FluxFace::buf`]).
    fn restrict(&mut self, faces: &[FluxFace], buf: ValuesMut<'_>) -> Result<(), BoundaryError>;
    /// Replaces the fluxes of every receiving face with `apply` by its values in `buf`.
    fn set(
        &mut self,
        faces: &[FluxFace],
        apply: &[bool],
        buf: Values<'_>,
    ) -> Result<(), BoundaryError>;
}

/// Checks that `apply` has one flag per face.
pub(crate) fn check_apply(faces: &[FluxFace], apply: &[bool]) -> Result<(), BoundaryError> {
    BoundaryError::check_size("flux face flags", faces.len(), apply.len())
}

fn not_host_fluxes() -> BoundaryError {
    BoundaryError::Device(
        "host face fluxes were given message buffers in device memory to restrict into or set \
         from"
            .into(),
    )
}

impl FluxSpace for FluxData {
    fn blocks(&self) -> usize {
        self.nblocks
    }

    fn slots(&self) -> usize {
        self.nslots
    }

    fn face_dims(&self, d: usize) -> [usize; 3] {
        FluxData::face_dims(self, d)
    }

    fn restrict(&mut self, faces: &[FluxFace], buf: ValuesMut<'_>) -> Result<(), BoundaryError> {
        let buf = buf.host().ok_or_else(not_host_fluxes)?;
        let got = buf.len();
        for f in faces {
            let dims = FluxData::face_dims(self, f.dir);
            // A sending face restricts its whole face (what the device kernel reads too).
            let whole = (0..self.ndim).all(|e| e == f.dir || f.faces[e] == (0..dims[e] / 2));
            if !whole {
                return Err(BoundaryError::Geometry(format!(
                    "sending flux face {f:?} is not a whole face of {dims:?}"
                )));
            }
            for (k, s) in f.slots.clone().enumerate() {
                let out = buf.get_mut(f.slot_values(k)).ok_or(BoundaryError::Size {
                    what: "flux correction buffer",
                    expected: f.buf.end,
                    got,
                })?;
                let face = f.faces[f.dir].start;
                restrict_face(
                    self.flux(f.block, s, f.dir),
                    dims,
                    f.dir,
                    face,
                    self.ndim,
                    out,
                )?;
            }
        }
        Ok(())
    }

    fn set(
        &mut self,
        faces: &[FluxFace],
        apply: &[bool],
        buf: Values<'_>,
    ) -> Result<(), BoundaryError> {
        let buf = buf.host().ok_or_else(not_host_fluxes)?;
        check_apply(faces, apply)?;
        for (f, _) in faces.iter().zip(apply).filter(|(_, &a)| a) {
            let dims = FluxData::face_dims(self, f.dir);
            let at = |p: [usize; 3]| (p[2] * dims[1] + p[1]) * dims[0] + p[0];
            for (k, s) in f.slots.clone().enumerate() {
                let src = buf.get(f.slot_values(k)).ok_or(BoundaryError::Size {
                    what: "flux correction buffer",
                    expected: f.buf.end,
                    got: buf.len(),
                })?;
                let dst = self.flux_mut(f.block, s, f.dir);
                for (x, p) in src.iter().zip(points(f.faces.clone())) {
                    dst[at(p)] = *x;
                }
            }
        }
        Ok(())
    }
}

/// The points of a box, first direction fastest.
fn points(r: [Range<usize>; 3]) -> impl Iterator<Item = [usize; 3]> {
    let [a, b, c] = r;
    c.flat_map(move |k| {
        let a = a.clone();
        b.clone()
            .flat_map(move |j| a.clone().map(move |i| [i, j, k]))
    })
}

/// The active directions other than `d`, in increasing order.
fn free_dirs(ndim: usize, d: usize) -> impl Iterator<Item = usize> {
    (0..ndim).filter(move |&e| e != d)
}

/// Restricts the fine fluxes of face layer `face` along direction `d` of a face array of
/// dimensions `dims` (see [`FluxData`]) onto the coarse faces: each coarse value is the mean
/// of the `2^(ndim-1)` fine faces covering it, summed in a fixed order (first free direction
/// fastest). `out` receives the coarse faces, first free direction fastest; its length must
/// be the product of the halved free extents.
///
/// ```
/// use starhalo_boundary::flux_correction::restrict_face;
/// // 2-D, fluxes along x on a 4x2 block: face array 5x2; restrict the face at x index 4.
/// let dims = [5, 2, 1];
/// let fine: Vec<f64> = (0..10).map(f64::from).collect();
/// let mut out = [0.0];
/// restrict_face(&fine, dims, 0, 4, 2, &mut out).unwrap();
/// assert_eq!(out[0], (4.0 + 9.0) / 2.0);
/// ```
pub fn restrict_face(
    fine: &[f64],
    dims: [usize; 3],
    d: usize,
    face: usize,
    ndim: usize,
    out: &mut [f64],
) -> Result<(), BoundaryError> {
    if ndim > 3 || d >= ndim || face >= dims[d] || fine.len() != dims.iter().product::<usize>() {
        return Err(BoundaryError::Geometry(format!(
            "face {face} along direction {d} of a {dims:?} flux array ({} values, {ndim}-D)",
            fine.len()
        )));
    }
    let mut coarse = [0..1, 0..1, 0..1];
    coarse[d] = face..face + 1;
    // The offsets of the fine faces covering a coarse one, earlier free directions varying
    // fastest (at most 4: no allocation per call).
    let mut offsets = [[0usize; 3]; 4];
    let mut nkids = 1;
    for e in free_dirs(ndim, d) {
        if !dims[e].is_multiple_of(2) {
            return Err(BoundaryError::Geometry(format!(
                "odd extent {} along direction {e} cannot be restricted",
                dims[e]
            )));
        }
        coarse[e] = 0..dims[e] / 2;
        for i in 0..nkids {
            offsets[nkids + i] = offsets[i];
            offsets[nkids + i][e] = 1;
        }
        nkids *= 2;
    }
    let kids = &offsets[..nkids];
    let want: usize = coarse.iter().map(ExactSizeIterator::len).product();
    BoundaryError::check_size("restricted face", want, out.len())?;
    let scale = 1.0 / kids.len() as f64;
    let at = |p: [usize; 3]| (p[2] * dims[1] + p[1]) * dims[0] + p[0];
    for (o, q) in out.iter_mut().zip(points(coarse)) {
        let base = |k: &[usize; 3]| {
            let mut p = q;
            for e in free_dirs(ndim, d) {
                p[e] = 2 * q[e] + k[e];
            }
            fine[at(p)]
        };
        let mut s = base(&kids[0]);
        for k in &kids[1..] {
            s += base(k);
        }
        *o = s * scale;
    }
    Ok(())
}

/// The flux-correction channels of `rank`: the fine→coarse channels through faces among the
/// channels of `vars` (receiver one level coarser than the sender, sender element a face).
pub fn flux_channels(neighbors: &[BlockNeighbors], vars: &[usize], rank: usize) -> RankChannels {
    let mut rc = RankChannels::new(neighbors, vars, rank);
    let keep = |c: &Channel| c.level_diff == -1 && c.key.element.kind() == ElementKind::Face;
    rc.send.retain(keep);
    rc.recv.retain(keep);
    rc
}

/// One end of a flux-correction channel (its face is at the same index of the side's faces).
#[derive(Debug, Clone)]
struct End {
    ch: Channel,
    /// This rank's block (sender on the send side, receiver on the receive side).
    block: usize,
    var: usize,
    /// This end's range of its buffer.
    buf: Range<usize>,
    peer: i32,
    tag: i32,
    sparse: bool,
    /// The five-state protocol of this end. A same-rank channel's sender writes the
    /// receiver's buffer and state and keeps its own stale.
    st: ChannelState,
    posted: Option<usize>,
    /// Send side of a same-rank channel: the receive end it writes.
    target: Option<usize>,
}

/// The flux correction of one rank.
pub struct FluxCorrection {
    shape: IndexShape,
    comm: SimpleCommunicator,
    coalesced: bool,
    /// Ends sorted by (peer rank, key): each coalesced group is a run of them.
    send: Vec<End>,
    recv: Vec<End>,
    /// The faces of the ends, in their order.
    send_faces: Vec<FluxFace>,
    recv_faces: Vec<FluxFace>,
    /// Receive side: which faces [`FluxSpace::set`] replaces (scratch, one per end).
    apply: Vec<bool>,
    send_groups: Vec<Group>,
    recv_groups: Vec<Group>,
    send_buf: MsgArena,
    recv_buf: MsgArena,
    /// Receive side of coalesced messages: per group a status and a data segment.
    coal: MsgArena,
    traffic: Traffic,
    /// How long [`correct`](FluxCorrection::correct) waits for its messages; `None`: as
    /// long as it takes.
    timeout: Option<Duration>,
}

impl std::fmt::Debug for FluxCorrection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FluxCorrection")
            .field("send", &self.send.len())
            .field("recv", &self.recv.len())
            .field("traffic", &self.traffic)
            .finish()
    }
}

fn expect(ty: BoundaryType, want: BoundaryType) -> Result<(), BoundaryError> {
    if ty == want {
        Ok(())
    } else {
        Err(BoundaryError::Unsupported(ty.name()))
    }
}

impl FluxCorrection {
    /// The coalesced flux correction of this rank of `comm` for every variable of `data` on
    /// `mesh`. Collective: every rank of `comm` must call it (it duplicates the communicator
    /// and checks with each peer what each coalesced message will hold).
    pub fn new(
        comm: &SimpleCommunicator,
        mesh: &Mesh,
        data: &BlockData,
    ) -> Result<Self, BoundaryError> {
        let vars: Vec<usize> = (0..data.vars().len()).collect();
        Self::new_in(comm, mesh, data, &vars, true, &BufferPool::new())
    }

    /// The flux correction for the variables `vars` (ids in `data.vars()`, e.g. those with
    /// fluxes), `coalesced` or one message per channel, with its message buffers drawn from
    /// `pool`. Collective.
    pub fn new_in(
        comm: &SimpleCommunicator,
        mesh: &Mesh,
        data: &BlockData,
        vars: &[usize],
        coalesced: bool,
        pool: &BufferPool,
    ) -> Result<Self, BoundaryError> {
        // A rank whose set-up fails tells the others before anyone waits on its messages.
        let own = comm.duplicate();
        let fc = collective::agree(
            comm,
            Self::build(own, comm.rank() as usize, mesh, data, vars, coalesced, pool),
            "another rank could not set up its flux correction",
        )?;
        if coalesced {
            let sends: Vec<_> = coalesce::digests(&fc.send_groups, |i| {
                fc.send.get(i).map(|e| (e.ch.key, e.buf.len()))
            })
            .collect();
            let recvs: Vec<_> = coalesce::digests(&fc.recv_groups, |i| {
                fc.recv.get(i).map(|e| (e.ch.key, e.buf.len()))
            })
            .collect();
            coalesce::agree(&fc.comm, comm.rank(), pool, &sends, &recvs)?;
        }
        Ok(fc)
    }

    /// This rank's part of [`new_in`](Self::new_in), on its own communicator `own`: local.
    fn build(
        own: SimpleCommunicator,
        rank: usize,
        mesh: &Mesh,
        data: &BlockData,
        vars: &[usize],
        coalesced: bool,
        pool: &BufferPool,
    ) -> Result<Self, BoundaryError> {
        let shape = *data.shape();
        let nvars = data.vars().len();
        if let Some(&v) = vars.iter().find(|&&v| v >= nvars) {
            return Err(BoundaryError::Geometry(format!(
                "variable {v} of {nvars} has no storage"
            )));
        }
        let tag_ub = p2p::tag_ub(&own);
        let neighbors = mesh.neighbors()?;
        let mut rc = flux_channels(&neighbors, vars, rank);
        let tags = TagMap::new(&rc, usize::MAX)?;
        rc.send.sort_by_key(|c| (c.receiver_rank, c.key));
        rc.recv.sort_by_key(|c| (c.sender_rank, c.key));
        // Coalesced messages have tags of their own: the per-channel ones are not needed.
        let tag_of = |t: Option<usize>, var: usize, peer: usize| -> Result<i32, BoundaryError> {
            let Some(t) = t.filter(|_| !coalesced) else {
                return Ok(-1);
            };
            let tag = t * nvars + var;
            if tag > tag_ub {
                return Err(BoundaryError::TagOverflow {
                    rank,
                    peer,
                    tag,
                    channels: tags.count(peer, true).max(tags.count(peer, false)),
                    tag_ub,
                });
            }
            i32::try_from(tag).map_err(|_| BoundaryError::Geometry(format!("tag {tag}")))
        };
        let build =
            |list: &[Channel], sending: bool| -> Result<(Vec<End>, Vec<FluxFace>), BoundaryError> {
                let mut out = Vec::with_capacity(list.len());
                let mut faces = Vec::with_capacity(list.len());
                let mut at = 0;
                for c in list {
                    let gid = if sending {
                        c.key.sender
                    } else {
                        c.key.receiver
                    };
                    let block = data.local(gid).ok_or_else(|| {
                        BoundaryError::Geometry(format!("block {gid} is not on rank {rank}"))
                    })?;
                    let var = c.key.var;
                    let slots = data.vars()[var].slots.clone();
                    let face = FluxFace::of_channel(c, sending, &shape, block, slots, at)?;
                    let (peer, tag) = if c.is_local() {
                        (rank as i32, -1)
                    } else if sending {
                        let p = c.receiver_rank;
                        (p as i32, tag_of(tags.send_tag(c), var, p)?)
                    } else {
                        let p = c.sender_rank;
                        (p as i32, tag_of(tags.recv_tag(c), var, p)?)
                    };
                    at = face.buf.end;
                    out.push(End {
                        ch: *c,
                        block,
                        var,
                        buf: face.buf.clone(),
                        peer,
                        tag,
                        sparse: data.vars()[var].threshold.is_some(),
                        st: ChannelState::new(if sending {
                            Role::Sender
                        } else {
                            Role::Receiver
                        }),
                        posted: None,
                        target: None,
                    });
                    faces.push(face);
                }
                Ok((out, faces))
            };
        let (mut send, send_faces) = build(&rc.send, true)?;
        let (recv, recv_faces) = build(&rc.recv, false)?;
        for e in send.iter_mut().filter(|e| e.ch.is_local()) {
            let j = recv
                .binary_search_by_key(&(rank, e.ch.key), |r| (r.ch.sender_rank, r.ch.key))
                .map_err(|_| BoundaryError::Mismatch(format!("no receiver for {:?}", e.ch.key)))?;
            e.target = Some(j);
        }
        // One group per peer rank: status on tag 0, data on tag 1.
        let groups = |ends: &[End]| {
            coalesce::groups(
                ends.iter()
                    .map(|e| (coalesced && !e.ch.is_local()).then_some((e.peer, ()))),
                |()| Ok(0),
            )
        };
        let mut send_groups = groups(&send)?;
        let recv_groups = groups(&recv)?;
        let send_len = send.last().map_or(0, |e| e.buf.end);
        let send_len = coalesce::place_status(&mut send_groups, send_len);
        Ok(Self {
            shape,
            coalesced,
            send_buf: MsgArena::with_len_in(pool, send_len)?,
            recv_buf: MsgArena::new_in(pool, recv.iter().map(|e| e.buf.clone()).collect())?,
            coal: coalesce::recv_arena(pool, &recv_groups)?,
            comm: own,
            apply: vec![false; recv.len()],
            send,
            recv,
            send_faces,
            recv_faces,
            send_groups,
            recv_groups,
            traffic: Traffic::default(),
            timeout: None,
        })
    }

    /// The channels this rank sends on (fine blocks here, coarser neighbours), by peer rank
    /// and key.
    pub fn send_channels(&self) -> impl Iterator<Item = &Channel> {
        self.send.iter().map(|e| &e.ch)
    }

    /// The channels this rank receives on (coarse blocks here, finer neighbours), by peer rank
    /// and key.
    pub fn recv_channels(&self) -> impl Iterator<Item = &Channel> {
        self.recv.iter().map(|e| &e.ch)
    }

    /// The faces this rank restricts and sends, in the order of
    /// [`send_channels`](Self::send_channels).
    pub fn send_faces(&self) -> &[FluxFace] {
        &self.send_faces
    }

    /// The faces this rank receives and sets, in the order of
    /// [`recv_channels`](Self::recv_channels).
    pub fn recv_faces(&self) -> &[FluxFace] {
        &self.recv_faces
    }

    /// Moves every message buffer into a new buffer made [like](Buffer::zeroed_like) `like`
    /// (for device memory: `Buffer::zeroed_for_mpi`), which MPI then reads and writes in
    /// place: the GPU-aware path, where the
    /// flux space restricts into and sets from device memory directly (for device memory,
    /// the MPI must support it). Only between corrections.
    pub fn place_messages(&mut self, like: &Buffer<f64>) -> Result<(), BoundaryError> {
        self.send_buf.wait();
        for a in [&mut self.send_buf, &mut self.recv_buf, &mut self.coal] {
            a.place(like)?;
        }
        Ok(())
    }

    /// Messages and bytes sent so far.
    pub fn traffic(&self) -> Traffic {
        self.traffic
    }

    /// Posts the receives of dense cross-rank channels (`flxcor_recv`); sparse ones, and
    /// coalesced messages, are probed for their size in [`FluxCorrection::receive`].
    pub fn start_receive(&mut self, ty: BoundaryType) -> Result<TaskStatus, BoundaryError> {
        expect(ty, BoundaryType::FlxcorRecv)?;
        if self.coalesced {
            return Ok(TaskStatus::Complete);
        }
        for (i, e) in self.recv.iter_mut().enumerate() {
            if e.ch.is_local()
                || e.sparse
                || e.posted.is_some()
                || e.st.state() != BufferState::Stale
            {
                continue;
            }
            self.recv_buf
                .recv(&self.comm, i, e.buf.len(), e.peer, e.tag)?;
            e.posted = Some(e.buf.len());
        }
        Ok(TaskStatus::Complete)
    }

    /// Restricts the fine fluxes on every fine→coarse face and sends them (`flxcor_send`);
    /// same-rank channels are written straight into the receiver's buffer. `Incomplete`
    /// while a same-rank receiver has not yet consumed the previous cycle.
    pub fn send(
        &mut self,
        ty: BoundaryType,
        fluxes: &mut impl FluxSpace,
        data: &BlockData,
    ) -> Result<TaskStatus, BoundaryError> {
        expect(ty, BoundaryType::FlxcorSend)?;
        self.check_fluxes(fluxes)?;
        let busy = self.send.iter().any(|e| {
            e.target
                .is_some_and(|j| self.recv[j].st.state() != BufferState::Stale)
        });
        if busy {
            return Ok(TaskStatus::Incomplete);
        }
        self.send_buf.wait();
        // Remote sends have completed: their ends go stale (they are already, the first time).
        for e in self.send.iter_mut().filter(|e| e.target.is_none()) {
            if e.st.state() != BufferState::Stale {
                e.st.stale()?;
            }
        }
        // Every face, allocated or not: one pass (one launch on a device); unallocated
        // variables send null below.
        fluxes.restrict(&self.send_faces, self.send_buf.values_mut()?)?;
        // Same-rank receivers get their values in one copy per run (see `copy_run`).
        let mut run = None;
        for e in &mut self.send {
            let live = data.is_allocated(e.block, e.var);
            match e.target {
                Some(j) => {
                    let r = &mut self.recv[j];
                    let fills = e.buf.len() == r.buf.len();
                    if live {
                        if let Some(done) = Run::push(&mut run, 0, e.buf.clone(), j, fills) {
                            self.recv_buf.copy_to_segments(
                                done.ends,
                                &self.send_buf,
                                done.values,
                            )?;
                        }
                    }
                    r.st.arrived(if live { Arrival::Data } else { Arrival::Null })?;
                }
                None => e.st.sent(live)?,
            }
        }
        if let Some(done) = run {
            self.recv_buf
                .copy_to_segments(done.ends, &self.send_buf, done.values)?;
        }
        if self.coalesced {
            let send = &self.send;
            coalesce::compact(&mut self.send_groups, &mut self.send_buf, |i| {
                (
                    send[i].buf.clone(),
                    send[i].st.state() == BufferState::Sending,
                )
            })?;
            let all = 0..self.send_groups.len();
            coalesce::send(
                &self.send_groups,
                all,
                &mut self.send_buf,
                &self.comm,
                &mut self.traffic,
            )?;
            return Ok(TaskStatus::Complete);
        }
        for e in self.send.iter().filter(|e| !e.ch.is_local()) {
            let range = if e.st.state() == BufferState::Sending {
                e.buf.clone()
            } else {
                e.buf.start..e.buf.start
            };
            self.traffic.messages += 1;
            self.traffic.bytes += (range.len() * 8) as u64;
            self.send_buf.send(&self.comm, range, e.peer, e.tag)?;
        }
        Ok(TaskStatus::Complete)
    }

    /// Polls the incoming corrections (`flxcor_recv`): `Incomplete` until all have arrived.
    pub fn receive(&mut self, ty: BoundaryType) -> Result<TaskStatus, BoundaryError> {
        self.start_receive(ty)?;
        if self.coalesced {
            self.receive_coalesced()?;
        } else {
            self.receive_per_channel()?;
        }
        Ok(if self.arrived() {
            TaskStatus::Complete
        } else {
            TaskStatus::Incomplete
        })
    }

    /// Takes apart the coalesced messages that have arrived, per peer rank.
    fn receive_coalesced(&mut self) -> Result<(), BoundaryError> {
        for gi in 0..self.recv_groups.len() {
            let Some((ends, mut msg)) =
                coalesce::receive(&mut self.recv_groups, gi, &mut self.coal, &self.comm)?
            else {
                continue;
            };
            let mut run = None;
            for (k, i) in ends.enumerate() {
                let e = &mut self.recv[i];
                let arrival = match msg.take(k, e.buf.len())? {
                    Some(values) => {
                        if let Some(done) = Run::push(&mut run, 0, values, i, true) {
                            self.recv_buf
                                .copy_to_segments(done.ends, &self.coal, done.values)?;
                        }
                        Arrival::Data
                    }
                    None => Arrival::Null,
                };
                e.st.arrived(arrival)?;
            }
            if let Some(done) = run {
                self.recv_buf
                    .copy_to_segments(done.ends, &self.coal, done.values)?;
            }
            msg.finish()?;
        }
        Ok(())
    }

    /// Posts the receives of sparse channels whose message has arrived (its size tells data
    /// from null), and marks what has completed.
    fn receive_per_channel(&mut self) -> Result<(), BoundaryError> {
        for (i, e) in self.recv.iter_mut().enumerate() {
            if e.ch.is_local()
                || !e.sparse
                || e.posted.is_some()
                || e.st.state() != BufferState::Stale
            {
                continue;
            }
            if let Some(n) = p2p::probe(&self.comm, e.peer, e.tag)? {
                if n != 0 && n != e.buf.len() {
                    return Err(BoundaryError::Mismatch(format!(
                        "rank {} sent {n} flux values for {:?}, expected {}",
                        e.peer,
                        e.ch.key,
                        e.buf.len()
                    )));
                }
                self.recv_buf.recv(&self.comm, i, n, e.peer, e.tag)?;
                e.posted = Some(n);
            }
        }
        if self.recv_buf.test() {
            for e in &mut self.recv {
                if let Some(n) = e.posted.take() {
                    e.st.arrived(if n > 0 { Arrival::Data } else { Arrival::Null })?;
                }
            }
        }
        Ok(())
    }

    /// The channels whose correction has not arrived yet: what a receive that times out
    /// reports.
    pub fn pending(&self) -> Vec<String> {
        self.recv
            .iter()
            .filter(|e| !e.st.has_arrived())
            .map(|e| e.ch.to_string())
            .collect()
    }

    fn arrived(&self) -> bool {
        self.recv.iter().all(|e| e.st.has_arrived())
    }

    fn check_fluxes(&self, fluxes: &impl FluxSpace) -> Result<(), BoundaryError> {
        let faces = || self.send_faces.iter().chain(&self.recv_faces);
        let need = faces().map(|f| f.slots.end).max().unwrap_or(0);
        let blocks = faces().map(|f| f.block + 1).max().unwrap_or(0);
        let want = FluxData::with_shape(&self.shape, 0, 0);
        let same_dims = (0..3).all(|d| fluxes.face_dims(d) == want.face_dims(d));
        if fluxes.slots() < need || fluxes.blocks() < blocks || !same_dims {
            return Err(BoundaryError::Mismatch(format!(
                "flux storage of {} blocks x {} slots does not fit this flux correction \
                 ({blocks} blocks, {need} slots, block shape {:?})",
                fluxes.blocks(),
                fluxes.slots(),
                self.shape.nx()
            )));
        }
        Ok(())
    }

    /// Replaces the coarse fluxes on every fine→coarse face with what arrived
    /// (`flxcor_recv`); `Incomplete` while some have not arrived. Null messages and
    /// receivers whose variable is unallocated leave the fluxes as they are.
    pub fn set_bounds(
        &mut self,
        ty: BoundaryType,
        fluxes: &mut impl FluxSpace,
        data: &BlockData,
    ) -> Result<TaskStatus, BoundaryError> {
        expect(ty, BoundaryType::FlxcorRecv)?;
        self.check_fluxes(fluxes)?;
        if !self.arrived() {
            return Ok(TaskStatus::Incomplete);
        }
        for (a, e) in self.apply.iter_mut().zip(&self.recv) {
            *a = e.st.state() == BufferState::Received && data.is_allocated(e.block, e.var);
        }
        fluxes.set(&self.recv_faces, &self.apply, self.recv_buf.values()?)?;
        for e in &mut self.recv {
            e.st.stale()?;
        }
        coalesce::rearm(&mut self.recv_groups);
        Ok(TaskStatus::Complete)
    }

    /// Makes [`correct`](Self::correct) fail with [`BoundaryError::Timeout`], naming the
    /// channels still awaited, once it has waited `timeout` for its messages.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = Some(timeout);
    }

    /// One whole flux correction, blocking until every correction has arrived and been set.
    pub fn correct(
        &mut self,
        fluxes: &mut impl FluxSpace,
        data: &BlockData,
    ) -> Result<(), BoundaryError> {
        let patience = Patience::new(self.timeout);
        self.start_receive(BoundaryType::FlxcorRecv)?;
        while self.send(BoundaryType::FlxcorSend, fluxes, data)? == TaskStatus::Incomplete {
            patience.poll(|| "flux correction".into())?;
        }
        while self.receive(BoundaryType::FlxcorRecv)? == TaskStatus::Incomplete {
            patience.poll(|| format!("flux correction, from {}", waiting_for(&self.pending())))?;
        }
        self.set_bounds(BoundaryType::FlxcorRecv, fluxes, data)?;
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use starhalo_mesh::{find_neighbors, Forest, RootGrid};

    /// A periodic grid of 2^ndim root blocks with the first refined once, round robin on
    /// `nranks` ranks.
    pub(crate) fn one_refined(ndim: usize, nranks: usize) -> (Forest, Vec<BlockNeighbors>) {
        let n = [
            2,
            if ndim > 1 { 2 } else { 1 },
            if ndim > 2 { 2 } else { 1 },
        ];
        let grid = RootGrid::new(ndim, n, [true, ndim > 1, ndim > 2]).unwrap();
        let roots = Forest::uniform(grid, 0);
        let mut leaves = roots.leaves()[1..].to_vec();
        leaves.extend(roots.leaves()[0].children(ndim));
        let f = Forest::from_leaves(grid, leaves).unwrap();
        let ranks: Vec<usize> = (0..f.len()).map(|g| g % nranks).collect();
        let nb = find_neighbors(&f, &ranks).unwrap();
        (f, nb)
    }

    #[test]
    fn only_fine_to_coarse_faces_get_channels() {
        for ndim in [2, 3] {
            let (f, nb) = one_refined(ndim, 1);
            let rc = flux_channels(&nb, &[0, 2], 0);
            // Each child has ndim faces pointing out of its parent, each onto a coarse block.
            let children = 1 << ndim;
            assert_eq!(rc.send.len(), children * ndim * 2, "{ndim}-D");
            assert_eq!(rc.send, rc.recv);
            for c in &rc.send {
                assert_eq!(c.key.element.kind(), ElementKind::Face);
                let (ls, lr) = (f.leaves()[c.key.sender], f.leaves()[c.key.receiver]);
                assert_eq!((ls.level(), lr.level()), (1, 0), "{c:?}");
            }
            // The filter matters: there are same-level faces and fine-coarse edges and
            // corners, and none of them carries a correction.
            let all = RankChannels::new(&nb, &[0], 0);
            assert!(all
                .send
                .iter()
                .any(|c| c.level_diff == 0 && c.key.element.kind() == ElementKind::Face));
            assert!(all
                .send
                .iter()
                .any(|c| c.level_diff == -1 && c.key.element.kind() != ElementKind::Face));
            assert!(all.send.iter().any(|c| c.level_diff == 1));
            // Every coarse face touched by fine blocks is covered exactly once by the halves.
            let mut cover = std::collections::BTreeMap::new();
            for c in rc.send.iter().filter(|c| c.key.var == 0) {
                let k = (c.key.receiver, c.receiver_element());
                let e: &mut Vec<[u8; 2]> = cover.entry(k).or_default();
                e.push(c.fi);
            }
            for (k, mut fis) in cover {
                fis.sort_unstable();
                let want: Vec<[u8; 2]> = if ndim == 2 {
                    vec![[0, 0], [1, 0]]
                } else {
                    vec![[0, 0], [0, 1], [1, 0], [1, 1]]
                };
                assert_eq!(fis, want, "{k:?}");
            }
        }
    }

    #[test]
    fn both_sides_list_the_same_channels_across_ranks() {
        let (_, nb) = one_refined(3, 3);
        let mut sends: Vec<Channel> = Vec::new();
        let mut recvs: Vec<Channel> = Vec::new();
        for r in 0..3 {
            let rc = flux_channels(&nb, &[0], r);
            sends.extend(rc.send);
            recvs.extend(rc.recv);
        }
        sends.sort_by_key(|c| c.key);
        recvs.sort_by_key(|c| c.key);
        assert_eq!(sends, recvs);
        assert_eq!(sends.len(), 24);
    }

    #[test]
    fn restriction_is_the_area_mean_of_the_covering_faces() {
        // 3-D, fluxes along y on a 4x2x6 block: face array 4x3x6.
        let dims = [4, 3, 6];
        let fine: Vec<f64> = (0..72).map(|i| f64::from(i * i % 17)).collect();
        let at = |p: [usize; 3]| (p[2] * 3 + p[1]) * 4 + p[0];
        for face in [0, 2] {
            let mut out = vec![0.0; 2 * 3];
            restrict_face(&fine, dims, 1, face, 3, &mut out).unwrap();
            for kk in 0..3 {
                for ii in 0..2 {
                    let f = |a: usize, c: usize| fine[at([2 * ii + a, face, 2 * kk + c])];
                    let want = (((f(0, 0) + f(1, 0)) + f(0, 1)) + f(1, 1)) * 0.25;
                    assert_eq!(out[kk * 2 + ii].to_bits(), want.to_bits());
                }
            }
        }
        // A constant flux restricts to itself; 1-D faces pass through.
        let mut out = [0.0; 2];
        restrict_face(&[3.5; 4 * 5], [4, 5, 1], 1, 5 - 1, 2, &mut out).unwrap();
        assert_eq!(out, [3.5, 3.5]);
        let mut one = [0.0];
        restrict_face(&[1.0, 2.0, 7.0], [3, 1, 1], 0, 2, 1, &mut one).unwrap();
        assert_eq!(one, [7.0]);
        // Wrong sizes and odd extents are errors.
        assert!(restrict_face(&[0.0; 20], [4, 5, 1], 1, 0, 2, &mut [0.0; 3]).is_err());
        assert!(restrict_face(&[0.0; 15], [3, 5, 1], 1, 0, 2, &mut [0.0; 1]).is_err());
        assert!(restrict_face(&[0.0; 20], [4, 5, 1], 2, 0, 2, &mut [0.0; 2]).is_err());
    }

    #[test]
    fn flux_data_layout() {
        let shape = IndexShape::new([4, 2, 1], 2, 2).unwrap();
        let mut f = FluxData::with_shape(&shape, 3, 2);
        assert_eq!(f.face_dims(0), [5, 2, 1]);
        assert_eq!(f.face_dims(1), [4, 3, 1]);
        assert_eq!(f.face_dims(2), [0, 0, 0]);
        assert_eq!(f.flux(0, 0, 0).len(), 10);
        assert_eq!(f.flux(2, 1, 1).len(), 12);
        assert!(f.flux(1, 1, 2).is_empty());
        assert_eq!(f.values().len(), 3 * 2 * 22);
        let i = f.face_index(1, [3, 2, 0]);
        f.flux_mut(2, 1, 1)[i] = 9.0;
        assert_eq!(f.values()[(2 * 2 + 1) * 22 + 10 + 11], 9.0);
    }
}
