//! PetscSF's Table I experiment: a forest with `n` contiguous roots on rank 0 and `n` leaves on
//! rank 1, a bcast then a reduce (replace), against a raw MPI send/receive ping-pong of the
//! same bytes, in the same run. Rounds alternate the two so that drift hits both alike.
//! With `--device` the same rounds also time the forest with both arrays in GPU memory (D-D,
//! doubles, [`DeviceStaged`]: staged through the host, or handed to a GPU-aware MPI with
//! `--gpu-mpi aware`, or `auto`) beside host memory (H-H). With `--split` they also time the
//! split-phase halves (`bcast_begin`/`end`, `reduce_begin`/`end`), which stage every message
//! in the forest's own buffers, against the combined calls, which move contiguous messages in
//! place.

use super::median;
use crate::cli::PingpongArgs;
use crate::exit::bad_input;
use crate::run::collective::agree;
use anyhow::{Context as _, Result};
use mpi::point_to_point::{Destination, Source};
use mpi::topology::{Communicator, Process, SimpleCommunicator};
use mpi::traits::CommunicatorCollectives;
use serde::Serialize;
use starhalo_exec::cuda::Device;
use starhalo_exec::Buffer;
use starhalo_sf::device::{DeviceStaged, GpuMpi};
use starhalo_sf::{Graph, Op, RootRef, SfOptions, StarForest};
use std::sync::Arc;
use std::time::Instant;

#[derive(Serialize)]
struct Row {
    bytes: usize,
    mpi_us: f64,
    sf_us: f64,
    /// Median over rounds of the forest's time minus raw MPI's in the same round.
    overhead_us: f64,
    /// The forest with device arrays (`--device`).
    #[serde(skip_serializing_if = "Option::is_none")]
    sf_dd_us: Option<f64>,
    /// The forest through its split-phase halves (`--split`).
    #[serde(skip_serializing_if = "Option::is_none")]
    sf_split_us: Option<f64>,
    /// Median over rounds of the split-phase time over the combined calls' in the same round.
    #[serde(skip_serializing_if = "Option::is_none")]
    split_ratio: Option<f64>,
}

#[derive(Serialize)]
struct Report {
    #[serde(rename = "impl")]
    imp: &'static str,
    /// How device arrays crossed MPI (`--device`): staged or aware.
    #[serde(skip_serializing_if = "Option::is_none")]
    gpu_mpi: Option<&'static str>,
    rows: Vec<Row>,
}

/// The largest `--max-bytes`: the graph holds one leaf per byte, so set-up takes some 55
/// bytes per message byte at its peak (3.6 GiB for 64 MiB; 1 GiB messages aborted the
/// allocation).
const MAX_BYTES: usize = 1 << 26;

pub fn run(world: &SimpleCommunicator, a: &PingpongArgs) -> Result<()> {
    // The same verdict on every rank; agreed so that rank 0 alone reports it.
    agree(world, check_args(a, world.size()))?;
    let dev = match a.device {
        true => {
            let dev =
                Device::process_default_compiled().context("--device, but no GPU can be used");
            Some(agree(world, dev)?)
        }
        false => None,
    };
    let comm = world.duplicate();
    let opts = SfOptions {
        sf_type: a.sf_type,
        ..SfOptions::default()
    };
    let mut rows = Vec::new();
    let mut bytes = a.min_bytes;
    let mut gpu_mpi = None;
    while bytes <= a.max_bytes {
        let device = dev.as_ref().map(|d| (d, a.gpu_mpi));
        let iters = a.iters.map_or_else(|| default_iters(bytes), |n| n as usize);
        let rounds = a.rounds as usize;
        let timing = Timing {
            iters,
            rounds,
            split: a.split,
        };
        let (row, used) = measure(world, &comm, bytes, timing, opts, device)?;
        rows.push(row);
        gpu_mpi = used.map(GpuMpi::name);
        bytes *= 2;
    }
    if world.rank() == 0 {
        if a.json {
            let report = Report {
                imp: opts.sf_type.name(),
                gpu_mpi,
                rows,
            };
            outln!("{}", serde_json::to_string(&report)?);
        } else {
            outln!(
                "# sf-pingpong, implementation {}: one-way latency (us), median of {} rounds{}",
                opts.sf_type.name(),
                a.rounds,
                gpu_mpi.map_or(String::new(), |m| format!(
                    ", device arrays {m} through MPI"
                ))
            );
            outln!(
                "{:>10} {:>10} {:>10} {:>12} {:>10}{}{}",
                "bytes",
                "mpi_us",
                "sf_us",
                "overhead_us",
                "overhead",
                if a.device { "   sf_dd_us" } else { "" },
                if a.split {
                    " sf_split_us split_ratio"
                } else {
                    ""
                }
            );
            for r in rows {
                outln!(
                    "{:>10} {:>10.3} {:>10.3} {:>12.3} {:>9.1}%{}{}",
                    r.bytes,
                    r.mpi_us,
                    r.sf_us,
                    r.overhead_us,
                    100.0 * r.overhead_us / r.mpi_us,
                    r.sf_dd_us.map_or(String::new(), |t| format!(" {t:>10.3}")),
                    r.sf_split_us
                        .zip(r.split_ratio)
                        .map_or(String::new(), |(t, q)| { format!(" {t:>11.3} {q:>11.3}") })
                );
            }
        }
    }
    Ok(())
}

/// How one message size is timed.
struct Timing {
    iters: usize,
    rounds: usize,
    /// Also time the split-phase halves.
    split: bool,
}

/// What a timing runs; each is its own function, so that changes elsewhere in this file do
/// not move the timed loops' code.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    RawMpi,
    Sf,
    SfDevice,
    SfSplit,
}

fn measure(
    world: &SimpleCommunicator,
    comm: &SimpleCommunicator,
    bytes: usize,
    Timing {
        iters,
        rounds,
        split,
    }: Timing,
    opts: SfOptions,
    dev: Option<(&Arc<Device>, GpuMpi)>,
) -> Result<(Row, Option<GpuMpi>)> {
    let rank = world.rank();
    let graph = if rank == 0 {
        Graph::new(bytes, None, Vec::new())
    } else {
        Graph::new(
            0,
            None,
            (0..bytes as u64)
                .map(|offset| RootRef { rank: 0, offset })
                .collect(),
        )
    };
    let sf = StarForest::new(world, &graph, opts)?;
    // Both ping-pongs move the same bytes in the same page-aligned memory (rank 0 its roots,
    // rank 1 its leaves), so neither gains from luckier placement or alignment.
    const PAGE: usize = 4096;
    let stride = bytes.next_multiple_of(PAGE);
    let mut arena = vec![1u8; 2 * stride + PAGE];
    let skip = arena.as_ptr().align_offset(PAGE);
    let (root, leaf) = arena[skip..].split_at_mut(stride);
    let (root, leaf) = (&mut root[..sf.nroots()], &mut leaf[..sf.leaf_space()]);

    let mut on_device = match dev {
        Some((d, mpi)) => Some(agree(
            world,
            DeviceCase::new(world, d, bytes / 8, opts, mpi),
        )?),
        None => None,
    };
    let used = on_device.as_ref().map(|d| d.sf.mpi());
    // Raw MPI and the forest come first: every run times them.
    const MPI: usize = 0;
    const SF: usize = 1;
    let mut kinds = vec![Kind::RawMpi, Kind::Sf];
    kinds.extend(on_device.is_some().then_some(Kind::SfDevice));
    kinds.extend(split.then_some(Kind::SfSplit));

    let peer = comm.process_at_rank(1 - rank);
    let mut pingpong = |kind: Kind, n: usize| -> Result<()> {
        match (kind, on_device.as_mut()) {
            (Kind::RawMpi, _) if rank == 0 => raw_pingpong(&peer, root, true, n),
            (Kind::RawMpi, _) => raw_pingpong(&peer, leaf, false, n),
            (Kind::SfDevice, Some(d)) => d.pingpong(n)?,
            (Kind::SfSplit, _) => sf_split_pingpong(&sf, root, leaf, n)?,
            _ => sf_pingpong(&sf, root, leaf, n)?,
        }
        Ok(())
    };
    for &kind in &kinds {
        pingpong(kind, iters / 4 + 1)?;
    }
    // Per kind (in `kinds` order), the time of each round.
    let mut times = vec![Vec::with_capacity(rounds); kinds.len()];
    for round in 0..rounds {
        for k in (0..kinds.len()).map(|k| (k + round) % kinds.len()) {
            comm.barrier();
            let t0 = Instant::now();
            pingpong(kinds[k], iters)?;
            times[k].push(t0.elapsed().as_secs_f64() * 1e6 / (2 * iters) as f64);
        }
    }
    // The overhead and the split ratio are paired: each round times every kind back to back,
    // so drift between rounds (another process, frequency changes) cancels instead of
    // widening the spread.
    let column = |kind: Kind| kinds.iter().position(|&k| k == kind);
    let paired = |f: fn(f64, f64) -> f64, a: usize, b: usize| {
        let mut v: Vec<f64> = times[a]
            .iter()
            .zip(&times[b])
            .map(|(&x, &y)| f(x, y))
            .collect();
        median(&mut v)
    };
    let overhead_us = paired(|sf, mpi| sf - mpi, SF, MPI);
    let split_ratio = column(Kind::SfSplit).map(|s| paired(|split, sf| split / sf, s, SF));
    let mut median_of = |k: usize| median(&mut times[k]);
    let row = Row {
        bytes,
        mpi_us: median_of(MPI),
        sf_us: median_of(SF),
        overhead_us,
        sf_dd_us: column(Kind::SfDevice).map(&mut median_of),
        sf_split_us: column(Kind::SfSplit).map(&mut median_of),
        split_ratio,
    };
    Ok((row, used))
}

/// Round trips per timing: about 4 MB of traffic, so that small messages are timed over
/// many trips and large ones over enough.
fn default_iters(bytes: usize) -> usize {
    (4_000_000 / (bytes + 512)).clamp(60, 20_000)
}

/// The same ping-pong with `n` doubles in device memory: rank 0's roots, rank 1's leaves.
struct DeviceCase {
    dev: Arc<Device>,
    sf: DeviceStaged<f64>,
    root: Buffer<f64>,
    leaf: Buffer<f64>,
}

impl DeviceCase {
    fn new(
        world: &SimpleCommunicator,
        dev: &Arc<Device>,
        n: usize,
        opts: SfOptions,
        mpi: GpuMpi,
    ) -> Result<Self> {
        let graph = if world.rank() == 0 {
            Graph::new(n, None, Vec::new())
        } else {
            let leaves = (0..n as u64).map(|offset| RootRef { rank: 0, offset });
            Graph::new(0, None, leaves.collect())
        };
        let sf = StarForest::new(world, &graph, opts)?;
        let staged = DeviceStaged::new(dev, &sf, mpi)?;
        let ramp = |k: f64, len: usize| (0..len).map(|i| k * i as f64).collect::<Vec<_>>();
        let mut case = Self {
            root: Buffer::from_host_to(dev, &ramp(1.0, sf.nroots()))?,
            leaf: Buffer::zeroed_on(dev, sf.leaf_space())?,
            dev: dev.clone(),
            sf: staged,
        };
        // Checked once before timing: leaf i gets root i, and a doubled leaf i comes back.
        let Self {
            dev,
            sf,
            root,
            leaf,
        } = &mut case;
        sf.bcast(dev, root, leaf, Op::Replace)?;
        if leaf.to_vec()? != ramp(1.0, leaf.len()) {
            anyhow::bail!("the device bcast delivered wrong values");
        }
        leaf.upload(&ramp(2.0, leaf.len()))?;
        sf.reduce(dev, leaf, root, Op::Replace)?;
        if root.to_vec()? != ramp(2.0, root.len()) {
            anyhow::bail!("the device reduce delivered wrong values");
        }
        Ok(case)
    }

    /// `n` bcasts and reduces (replace) on the device arrays.
    #[inline(never)]
    fn pingpong(&mut self, n: usize) -> Result<()> {
        for _ in 0..n {
            let Self {
                dev,
                sf,
                root,
                leaf,
            } = self;
            sf.bcast(dev, root, leaf, Op::Replace)?;
            sf.reduce(dev, leaf, root, Op::Replace)?;
        }
        // The last unpack is charged to these round trips, not to the next timing.
        self.dev.synchronize()?;
        Ok(())
    }
}

/// `n` round trips of `buf` with `peer`, sending first when `first`.
#[inline(never)]
fn raw_pingpong(peer: &Process<'_>, buf: &mut [u8], first: bool, n: usize) {
    for _ in 0..n {
        if first {
            peer.send(&buf[..]);
            peer.receive_into(buf);
        } else {
            peer.receive_into(buf);
            peer.send(&buf[..]);
        }
    }
}

/// `n` bcasts and reduces (replace) over `sf`.
#[inline(never)]
fn sf_pingpong(sf: &StarForest, root: &mut [u8], leaf: &mut [u8], n: usize) -> Result<()> {
    for _ in 0..n {
        sf.bcast(root, leaf, Op::Replace)?;
        sf.reduce(leaf, root, Op::Replace)?;
    }
    Ok(())
}

/// `n` bcasts and reduces (replace) over `sf` through the split-phase halves, each ended
/// before the next begins.
#[inline(never)]
fn sf_split_pingpong(sf: &StarForest, root: &mut [u8], leaf: &mut [u8], n: usize) -> Result<()> {
    for _ in 0..n {
        sf.bcast_begin(root, leaf, Op::Replace)?.end();
        sf.reduce_begin(leaf, root, Op::Replace)?.end();
    }
    Ok(())
}

/// The options' own consistency, and the rank count.
fn check_args(a: &PingpongArgs, nranks: i32) -> Result<()> {
    if nranks != 2 {
        return Err(bad_input!(
            "bench sf-pingpong needs exactly 2 ranks (mpiexec -n 2), got {}",
            nranks
        ));
    }
    if a.min_bytes == 0 || a.min_bytes > a.max_bytes {
        return Err(bad_input!(
            "--min-bytes must be at least 1 and at most --max-bytes"
        ));
    }
    if a.max_bytes > MAX_BYTES {
        return Err(bad_input!(
            "--max-bytes {} is above the largest message this benchmark sends, {MAX_BYTES} (64 MiB)",
            a.max_bytes
        ));
    }
    if a.device && !a.min_bytes.is_multiple_of(8) {
        return Err(bad_input!(
            "--device moves doubles: --min-bytes must be a multiple of 8"
        ));
    }
    Ok(())
}
