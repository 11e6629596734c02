//! The ghost exchange on a deck's mesh: coalesced (one data and one status message per peer
//! rank and partition pair) against one message per channel, in the same run; on a mesh with
//! several levels, the flux correction in both modes too; and the pack-in-one of this rank's
//! send sub-halos against a plain memcpy of the same bytes.
//!
//! With `parthenon/exec/space=cuda` the fields also go to each
//! rank's GPU, and the same run adds the coalesced exchange with device fields (kernel
//! launches counted per partition) and the device pack-in-one against a device-to-device copy
//! of the same bytes ([`device`](super::exchange_device)).
//!
//! Per mode: an [`Exchange`] (or a [`FluxCorrection`]) is built, warmed up, then `--cycles`
//! ghost fills (corrections) are timed one by one, each after a barrier; a fill's time is the
//! slowest rank's, and the median over fills is reported. Messages, bytes and heap
//! allocations (counted by the global allocator) are summed over ranks and divided by the
//! number of timed fills.

use super::exchange_device::{self, DeviceCopies};
use super::median;
use crate::cli::ExchangeBenchArgs;
use crate::deck::Deck;
use crate::exit::bad_input;
use crate::run::collective::{agree, broadcast_bytes, max_f64, sum_f64};
use crate::run::memory::Memory;
use anyhow::{Context, Result};
use mpi::collective::SystemOperation;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::CommunicatorCollectives;
use serde::Serialize;
use starhalo_boundary::bnd_info::{send_box, FLAG_ALLOCATED, FLAG_COARSE};
use starhalo_boundary::{
    BlockData, BndCache, BndInfo, BoundaryType, BufferPool, Exchange, ExchangeOptions, FieldSpace,
    FluxCorrection, FluxData, HostFields, Ordering, RankChannels, Space, TaskStatus, Traffic,
};
use starhalo_exec::alloc_count;
use starhalo_exec::cuda::Device;
use starhalo_exec::{MemSpace, Policy};
use starhalo_mesh::field::{Centering, Fields, Metadata, SparseThresholds};
use starhalo_mesh::Mesh;
use std::hint::black_box;
use std::time::Instant;

/// The deck block of the benchmark's own keys.
const BLOCK: &str = "exchange";
/// Untimed ghost fills before the timed ones.
pub(super) const WARMUP: usize = 3;
/// Alternating pack/memcpy rounds; the median copy of each kind is reported.
const COPY_ROUNDS: usize = 15;

#[derive(Serialize)]
pub(super) struct Mode {
    /// Where the fields live: host, or cuda (messages staged through the host) or
    /// cuda-aware (messages in device memory, handed to MPI in place).
    space: &'static str,
    coalesced: bool,
    us_per_exchange: f64,
    us_per_exchange_mean: f64,
    messages_per_exchange: f64,
    bytes_per_exchange: f64,
    allocations_per_exchange: f64,
    /// Kernel launches per exchange and partition, averaged over ranks (device fields only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) launches_per_partition: Option<f64>,
    /// Copies between host and device or within the device per exchange and partition,
    /// averaged over ranks (device fields only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) copies_per_partition: Option<f64>,
}

#[derive(Serialize)]
struct Report {
    ranks: i32,
    blocks: usize,
    block_cells: [usize; 3],
    nvars: usize,
    sparse: bool,
    ordering: String,
    cycles: u32,
    /// Building the coalesced host exchange (slowest rank), in all and per block of the mesh:
    /// set-up is linear in the number of channels, so the second stays flat as blocks grow.
    setup_us: f64,
    setup_us_per_block: f64,
    modes: Vec<Mode>,
    /// The flux correction of every variable, coalesced and per channel, in the same form
    /// (an "exchange" is one correction); empty on a mesh of one level.
    flux_correction: Vec<Mode>,
    /// Bytes packed per pack-in-one, summed over ranks.
    pack_bytes: f64,
    pack_gbps: f64,
    memcpy_gbps: f64,
    pack_over_memcpy: f64,
    /// The device pack-in-one against a device-to-device copy (`space` cuda only).
    #[serde(skip_serializing_if = "Option::is_none")]
    device: Option<DeviceCopies>,
}

pub(super) struct Setup {
    pub(super) mesh: Mesh,
    fields: Fields,
    nvars: usize,
    sparse: bool,
    pub(super) ordering: Ordering,
    ordering_name: String,
    space: MemSpace,
}

pub fn run(world: &SimpleCommunicator, a: &ExchangeBenchArgs) -> Result<()> {
    let text = agree(world, crate::run::read_deck_on_root(world, &a.deck))?;
    // Rank 0 checked that the file is UTF-8; the bytes arrive unchanged.
    let text = String::from_utf8_lossy(&broadcast_bytes(world, text.into_bytes())).into_owned();
    let setup = agree(world, set_up(&text, a, Memory::of(world)))?;
    let rank = world.rank() as usize;
    let mut data = agree(world, initial_data(&setup, rank))?;
    // Before any timing: every rank fails together (exit 1) when some rank has no usable GPU.
    let dev = match setup.space {
        MemSpace::Cuda => {
            let dev = Device::process_default_compiled()
                .context("parthenon/exec/space is cuda, but no GPU can be used");
            Some(agree(world, dev)?)
        }
        MemSpace::Host => None,
    };
    let comm = world.duplicate();

    let mut modes = Vec::new();
    let mut setup_s = Vec::new();
    for coalesced in [true, false] {
        let opts = ExchangeOptions {
            coalesced,
            ordering: setup.ordering,
            policy: Policy::Serial,
            split: false,
        };
        world.barrier();
        let t0 = Instant::now();
        let mut ex = agree(
            world,
            Exchange::new(&comm, &setup.mesh, &data, opts).context("setting up the exchange"),
        )?;
        setup_s.push(max_f64(world, t0.elapsed().as_secs_f64()));
        let mut done = vec![false; ex.partitions()];
        let mut host = HostFields(Policy::Serial);
        modes.push(time_steps(world, "host", coalesced, a.cycles, || {
            fill(&mut ex, &mut data, &mut host, &mut done)?;
            Ok(ex.traffic())
        })?);
    }
    let mut device = None;
    if let Some(dev) = &dev {
        let (more, copies) = exchange_device::run(world, dev, &comm, &setup, &data, a.cycles)?;
        modes.extend(more);
        device = Some(copies);
    }
    let mut flux_correction = Vec::new();
    if setup.mesh.config().is_multilevel() {
        let vars: Vec<usize> = (0..data.vars().len()).collect();
        let mut fluxes = FluxData::new(&data);
        for coalesced in [true, false] {
            let pool = BufferPool::new();
            let fc = FluxCorrection::new_in(&comm, &setup.mesh, &data, &vars, coalesced, &pool);
            let mut fc = agree(world, fc.context("setting up the flux correction"))?;
            flux_correction.push(time_steps(world, "host", coalesced, a.cycles, || {
                fc.correct(&mut fluxes, &data)?;
                Ok(fc.traffic())
            })?);
        }
    }
    let (pack_bytes, pack, memcpy) = agree(world, pack_vs_memcpy(&setup, &data, rank))?;
    let n = f64::from(world.size());
    let blocks = setup.mesh.forest().len();
    let report = Report {
        ranks: world.size(),
        blocks,
        setup_us: setup_s[0] * 1e6,
        setup_us_per_block: setup_s[0] * 1e6 / blocks as f64,
        block_cells: setup.mesh.config().block_nx,
        nvars: setup.nvars,
        sparse: setup.sparse,
        ordering: setup.ordering_name,
        cycles: a.cycles,
        modes,
        flux_correction,
        pack_bytes: sum_f64(world, pack_bytes),
        pack_gbps: sum_f64(world, pack) / n,
        memcpy_gbps: sum_f64(world, memcpy) / n,
        pack_over_memcpy: 0.0,
        device,
    };
    let report = Report {
        pack_over_memcpy: report.pack_gbps / report.memcpy_gbps,
        ..report
    };
    if world.rank() == 0 {
        if a.json {
            outln!("{}", serde_json::to_string(&report)?);
        } else {
            print_table(&report);
        }
    }
    Ok(())
}

fn set_up(text: &str, a: &ExchangeBenchArgs, memory: Memory) -> Result<Setup> {
    let mut deck = Deck::from_str_auto(text, &a.deck.display().to_string())?;
    for o in &a.overrides {
        deck.apply_override(o)?;
    }
    let nvars = deck.get_usize_or(BLOCK, "nvars", 8)?;
    // Each variable gets its own communicator, of which MPI has a few thousand; advection
    // takes at most 64 variables too.
    if !(1..=64).contains(&nvars) {
        return Err(deck.invalid(BLOCK, "nvars", "must be 1 to 64").into());
    }
    let sparse = deck.get_bool_or(BLOCK, "sparse", false)?;
    let ordering_name = deck.get_str_or(BLOCK, "ordering", "natural")?;
    let ordering: Ordering = ordering_name
        .parse()
        .map_err(|m: String| deck.invalid(BLOCK, "ordering", m))?;
    let space = crate::run::exec_space(&deck)?;
    let mut config = deck.mesh_config()?;
    // A run deck's choice of message scheme: the bench times both.
    if deck.has("parthenon/mesh", "do_coalesced_comms") {
        deck.get_bool("parthenon/mesh", "do_coalesced_comms")?;
        let what = "bench exchange, which times both coalesced and per-channel messages";
        deck.ignore("parthenon/mesh", ["do_coalesced_comms"], what);
    }
    // The fields and the packed send buffers.
    let budget = memory.budget(&config, nvars, 2);
    config.max_blocks = budget.max_blocks();
    let used =
        |b: &str| b == BLOCK || b == "parthenon/exec" || starhalo_mesh::config::is_mesh_block(b);
    deck.check_unread(used, "bench exchange")?;
    deck.warn_unused_blocks(used, "bench exchange");
    let mesh =
        Mesh::new(config, memory.nranks as usize).map_err(|e| budget.deck_error(&deck, e))?;
    let mut fields = Fields::default();
    for v in 0..nvars {
        let mut m = Metadata::new(Centering::Cell).fill_ghost();
        if sparse {
            m = m.sparse(SparseThresholds::default());
        }
        fields
            .add(&format!("v{v}"), m)
            .map_err(|e| bad_input!("{e}"))?;
    }
    Ok(Setup {
        mesh,
        fields,
        nvars,
        sparse,
        ordering,
        ordering_name,
        space,
    })
}

/// Every value distinct from its neighbours and well above the sparse threshold, so every
/// channel carries data.
pub(super) fn initial_data(s: &Setup, rank: usize) -> Result<BlockData> {
    let mut data = BlockData::new(&s.mesh, &s.fields, rank)?;
    let gids = data.gids().to_vec();
    for (b, &gid) in gids.iter().enumerate() {
        for v in 0..data.vars().len() {
            data.set_allocated(b, v, true);
            for slot in data.vars()[v].slots.clone() {
                for (i, x) in data.fine_mut(b, slot).iter_mut().enumerate() {
                    *x = 1.0 + ((gid * 7919 + slot * 104_729 + i) % 1009) as f64 * 1e-3;
                }
            }
        }
    }
    Ok(data)
}

/// One ghost fill of every partition with the task functions, as `Exchange::fill_ghosts_in`
/// runs them, with `done` supplied by the caller so that the loop itself allocates nothing.
pub(super) fn fill(
    ex: &mut Exchange,
    data: &mut BlockData,
    fields: &mut dyn FieldSpace,
    done: &mut [bool],
) -> Result<()> {
    let ty = BoundaryType::Any;
    let n = ex.partitions();
    for p in 0..n {
        ex.start_receive(p, ty)?;
    }
    for p in 0..n {
        while ex.send_in(p, ty, data, fields)? == TaskStatus::Incomplete {
            std::hint::spin_loop();
        }
    }
    done.fill(false);
    while done.iter().any(|d| !d) {
        for (p, d) in done.iter_mut().enumerate() {
            if !*d && ex.receive(p, ty)? == TaskStatus::Complete {
                ex.set_bounds_in(p, ty, data, fields)?;
                *d = true;
            }
        }
    }
    for p in 0..n {
        ex.finish_in(p, data, fields)?;
    }
    Ok(())
}

/// Times `cycles` calls of `step` (after `WARMUP` untimed ones), each after a barrier; `step`
/// returns its object's traffic so far.
pub(super) fn time_steps(
    world: &SimpleCommunicator,
    space: &'static str,
    coalesced: bool,
    cycles: u32,
    mut step: impl FnMut() -> Result<Traffic>,
) -> Result<Mode> {
    let n = cycles as usize;
    let mut traffic0 = Traffic::default();
    for _ in 0..WARMUP {
        traffic0 = step()?;
    }
    let mut times = vec![0.0f64; n];
    let mut slowest = vec![0.0f64; n];
    let mut traffic = traffic0;
    world.barrier();
    let allocs0 = alloc_count::allocations();
    for t in &mut times {
        world.barrier();
        let t0 = Instant::now();
        traffic = step()?;
        *t = t0.elapsed().as_secs_f64();
    }
    let allocs = alloc_count::allocations() - allocs0;
    world.all_reduce_into(&times[..], &mut slowest[..], SystemOperation::max());
    let mean = slowest.iter().sum::<f64>() / n as f64;
    let per = |x: u64| x as f64 / n as f64;
    Ok(Mode {
        space,
        coalesced,
        us_per_exchange: median(&mut slowest) * 1e6,
        us_per_exchange_mean: mean * 1e6,
        messages_per_exchange: sum_f64(world, per(traffic.messages - traffic0.messages)),
        bytes_per_exchange: sum_f64(world, per(traffic.bytes - traffic0.bytes)),
        allocations_per_exchange: sum_f64(world, per(allocs)),
        launches_per_partition: None,
        copies_per_partition: None,
    })
}

/// This rank's send sub-halos (every channel it sends on, same-rank ones included) in one
/// cache, as the exchange lays them out.
pub(super) fn send_cache(s: &Setup, data: &BlockData, rank: usize) -> Result<BndCache> {
    let shape = *data.shape();
    let vars: Vec<usize> = (0..data.vars().len())
        .filter(|&v| data.vars()[v].fill_ghost)
        .collect();
    let nb = s.mesh.neighbors()?;
    let rc = RankChannels::new(&nb, &vars, rank);
    let mut infos = Vec::new();
    for c in &rc.send {
        let (bx, space) = send_box(c, &shape)?;
        let block = data
            .local(c.key.sender)
            .ok_or_else(|| anyhow::anyhow!("block {} is not on rank {rank}", c.key.sender))?;
        let flags = FLAG_ALLOCATED
            | if space == Space::Coarse {
                FLAG_COARSE
            } else {
                0
            };
        for slot in data.vars()[c.key.var].slots.clone() {
            infos.push(BndInfo::new(block, slot, &bx, 0, flags));
        }
    }
    Ok(BndCache::new(data.layout(), data.gids().len(), infos)?)
}

/// Bytes per pack of [`send_cache`], and the median GB/s of the pack-in-one and of a
/// `copy_from_slice` of as many bytes from a contiguous array, over every copy of alternating
/// rounds.
fn pack_vs_memcpy(s: &Setup, data: &BlockData, rank: usize) -> Result<(f64, f64, f64)> {
    let cache = send_cache(s, data, rank)?;
    let len = cache.buffer_len();
    if len == 0 {
        return Ok((0.0, 0.0, 0.0));
    }
    // All three from a pool, as the exchange's buffers: the same (cache-line) alignment.
    let pool = BufferPool::new();
    let mut buf = pool.get(len);
    let mut src = pool.get(len);
    src.iter_mut().enumerate().for_each(|(i, x)| *x = i as f64);
    let mut dst = pool.get(len);
    // About 16 MiB moved per round. Every copy is timed on its own, and the median over all
    // of them is reported: on an oversubscribed node a round that spans a time slice of
    // another process would otherwise count that slice, and a longer round (the slower
    // kind) is more likely to.
    let reps = (2_000_000 / len).max(1);
    let bytes = (len * 8) as f64;
    let n = COPY_ROUNDS * reps;
    let (mut pack, mut memcpy) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for round in 0..COPY_ROUNDS {
        for which in [round % 2, 1 - round % 2] {
            for _ in 0..reps {
                let t0 = Instant::now();
                if which == 0 {
                    cache.pack(Policy::Serial, black_box(data.data()), black_box(&mut *buf))?;
                } else {
                    black_box(&mut *dst).copy_from_slice(black_box(&*src));
                }
                let gbps = bytes / t0.elapsed().as_secs_f64() / 1e9;
                if which == 0 { &mut pack } else { &mut memcpy }.push(gbps);
            }
        }
    }
    Ok((bytes, median(&mut pack), median(&mut memcpy)))
}

fn print_table(r: &Report) {
    outln!(
        "# bench exchange: {} ranks, {} blocks of {:?} cells, {} variables{}, ordering {}, {} timed fills",
        r.ranks,
        r.blocks,
        r.block_cells,
        r.nvars,
        if r.sparse { " (sparse)" } else { "" },
        r.ordering,
        r.cycles
    );
    outln!(
        "# set-up of the coalesced exchange: {:.0} us, {:.2} us per block",
        r.setup_us,
        r.setup_us_per_block
    );
    outln!(
        "{:>17} {:>12} {:>12} {:>10} {:>12} {:>8}",
        "mode",
        "us_median",
        "us_mean",
        "messages",
        "bytes",
        "allocs"
    );
    let fc = r.flux_correction.iter().map(|m| (m, "flxcor "));
    for (m, what) in r.modes.iter().map(|m| (m, "")).chain(fc) {
        outln!(
            "{:>17} {:>12.1} {:>12.1} {:>10} {:>12} {:>8}",
            format!(
                "{what}{}{}",
                if m.space == "host" { "" } else { "device " },
                if m.coalesced { "coalesced" } else { "channel" }
            ),
            m.us_per_exchange,
            m.us_per_exchange_mean,
            m.messages_per_exchange,
            m.bytes_per_exchange,
            m.allocations_per_exchange
        );
    }
    if let [c, p, ..] = &r.modes[..] {
        outln!(
            "# per-channel / coalesced time: {:.2}",
            p.us_per_exchange / c.us_per_exchange
        );
    }
    for m in &r.modes {
        if let (Some(l), Some(c)) = (m.launches_per_partition, m.copies_per_partition) {
            outln!(
                "# device fields ({}): {l:.2} kernel launches and {c:.2} copies per exchange and partition",
                m.space
            );
        }
    }
    outln!(
        "# pack-in-one {:.2} GB/s, memcpy {:.2} GB/s ({:.0}%), {} bytes per pack over all ranks",
        r.pack_gbps,
        r.memcpy_gbps,
        100.0 * r.pack_over_memcpy,
        r.pack_bytes
    );
    if let Some(d) = &r.device {
        outln!(
            "# device pack-in-one {:.2} GB/s, device-to-device copy {:.2} GB/s ({:.0}%)",
            d.pack_gbps,
            d.d2d_gbps,
            100.0 * d.pack_over_d2d
        );
    }
}
