//! The device half of `bench exchange` (`parthenon/exec/space=cuda`): the coalesced ghost
//! fill with every rank's fields on its GPU ([`DeviceFields`]: one pack and one unpack launch
//! per route), with the messages staged through host buffers for MPI and (on one rank, or
//! with an MPI that supports CUDA) in device memory, GPU-aware; and the device pack-in-one of
//! this rank's send sub-halos against a device-to-device copy of as many bytes.
//!
//! Both are checked before they are timed against the host: the filled fields must equal the
//! host fill's bit for bit, and the packed buffer the host pack's.

use super::exchange::{fill, initial_data, send_cache, time_steps, Mode, Setup, WARMUP};
use super::median;
use crate::run::collective::{agree, sum_f64};
use anyhow::{bail, Context as _, Result};
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::CommunicatorCollectives;
use serde::Serialize;
use starhalo_boundary::device_pack::{DeviceBndCache, DeviceFields};
use starhalo_boundary::{BlockData, Exchange, ExchangeOptions};
use starhalo_exec::cuda::Device;
use starhalo_exec::{Buffer, Policy};
use std::sync::Arc;
use std::time::Instant;

/// Timed batches of each kind, alternating; the median batch of each kind is reported.
const COPY_ROUNDS: usize = 15;
/// Bytes moved per batch.
const BATCH_BYTES: usize = 64 << 20;

/// The device pack-in-one against a device-to-device copy, averaged over ranks.
#[derive(Serialize)]
pub(super) struct DeviceCopies {
    pub pack_gbps: f64,
    pub d2d_gbps: f64,
    pub pack_over_d2d: f64,
}

/// Times the device exchange of `setup`'s initial values (after checking it against `filled`,
/// the host's ghost fill of them) with the messages staged through the host (`cuda`) and, on
/// one rank or with an MPI that supports CUDA, in device memory that MPI reads in place
/// (`cuda-aware`), and the device copies on `dev`.
pub(super) fn run(
    world: &SimpleCommunicator,
    dev: &Arc<Device>,
    comm: &SimpleCommunicator,
    setup: &Setup,
    filled: &BlockData,
    cycles: u32,
) -> Result<(Vec<Mode>, DeviceCopies)> {
    let rank = world.rank() as usize;
    let aware = world.size() == 1 || starhalo_sf::mpi_cuda_support();
    let mut modes = Vec::new();
    let mut last = None;
    for placed in [false, true].into_iter().filter(|&p| !p || aware) {
        let mut data = agree(world, initial_data(setup, rank))?;
        let opts = ExchangeOptions {
            coalesced: true,
            ordering: setup.ordering,
            policy: Policy::Serial,
            split: false,
        };
        let mut ex = agree(
            world,
            Exchange::new(comm, &setup.mesh, &data, opts).context("setting up the exchange"),
        )?;
        // The device starts from the initial values (ghosts not yet filled) and must reach
        // the host fill's result in `filled`.
        let fields = DeviceFields::new(dev, &ex, &data)
            .map_err(anyhow::Error::from)
            .and_then(|f| {
                if placed {
                    ex.place_messages(&Buffer::zeroed_for_mpi(dev, 1)?)?;
                }
                Ok(f)
            })
            .context("uploading the fields");
        let mut fields = agree(world, fields)?;
        let mut done = vec![false; ex.partitions()];
        let first = fill(&mut ex, &mut data, &mut fields, &mut done).and_then(|()| {
            fields.download(&mut data)?;
            if data.data() != filled.data() {
                bail!("the device ghost fill differs from the host's");
            }
            Ok(())
        });
        agree(world, first)?;

        let (launches0, copies0) = (dev.launches(), dev.copies());
        let name = if placed { "cuda-aware" } else { "cuda" };
        let mut mode = time_steps(world, name, true, cycles, || {
            fill(&mut ex, &mut data, &mut fields, &mut done)?;
            // The last unpack is charged to this fill, not to the next one.
            dev.synchronize()?;
            Ok(ex.traffic())
        })?;
        let fills = (WARMUP + cycles as usize) as f64;
        let per_partition = |count: u64| count as f64 / fills / ex.partitions() as f64;
        let n = f64::from(world.size());
        let launches = per_partition(dev.launches() - launches0);
        let copies = per_partition(dev.copies() - copies0);
        mode.launches_per_partition = Some(sum_f64(world, launches) / n);
        mode.copies_per_partition = Some(sum_f64(world, copies) / n);
        modes.push(mode);
        last = Some((fields, data));
    }
    let Some((fields, data)) = last else {
        bail!("no device exchange ran");
    };
    let n = f64::from(world.size());

    // One rank at a time, so that each has its GPU to itself while it is timed.
    let mut mine = Ok((0.0, 0.0));
    for r in 0..world.size() as usize {
        world.barrier();
        if r == rank {
            mine = pack_vs_d2d(dev, &fields, setup, &data, rank);
        }
    }
    let (pack, d2d) = agree(world, mine)?;
    let (pack_gbps, d2d_gbps) = (sum_f64(world, pack) / n, sum_f64(world, d2d) / n);
    Ok((
        modes,
        DeviceCopies {
            pack_gbps,
            d2d_gbps,
            pack_over_d2d: pack_gbps / d2d_gbps,
        },
    ))
}

/// Median GB/s of the device pack-in-one of this rank's send sub-halos from `fields` (which
/// hold `data`'s values) and of a device copy of as many bytes, each timed over a batch ended
/// by one stream synchronisation.
fn pack_vs_d2d(
    dev: &Arc<Device>,
    fields: &DeviceFields,
    s: &Setup,
    data: &BlockData,
    rank: usize,
) -> Result<(f64, f64)> {
    let cache = send_cache(s, data, rank)?;
    let len = cache.buffer_len();
    if len == 0 {
        return Ok((0.0, 0.0));
    }
    let plan = fields.plan();
    let d = DeviceBndCache::new(dev, &cache, plan.fine, plan.coarse, plan.nblocks)?;
    let (fine, coarse) = (fields.data(), fields.coarse());
    let mut buf = Buffer::zeroed_on(dev, len)?;
    let src = Buffer::from_host_to(dev, &vec![1.0f64; len])?;
    let mut dst = Buffer::zeroed_on(dev, len)?;

    d.pack(dev, fine, coarse, &mut buf, None)?;
    let mut want = vec![0.0; len];
    cache.pack(Policy::Serial, data.data(), &mut want)?;
    if buf.to_vec()? != want {
        bail!("the device pack-in-one differs from the host's");
    }

    let bytes = (len * 8) as f64;
    let reps = (BATCH_BYTES / (len * 8)).clamp(1, 10_000);
    let (mut pack, mut d2d) = (Vec::new(), Vec::new());
    for round in 0..COPY_ROUNDS {
        for which in [round % 2, 1 - round % 2] {
            dev.synchronize()?;
            let t0 = Instant::now();
            for _ in 0..reps {
                if which == 0 {
                    d.pack(dev, fine, coarse, &mut buf, None)?;
                } else {
                    dst.copy_from(&src)?;
                }
            }
            dev.synchronize()?;
            let gbps = bytes * reps as f64 / t0.elapsed().as_secs_f64() / 1e9;
            if which == 0 { &mut pack } else { &mut d2d }.push(gbps);
        }
    }
    Ok((median(&mut pack), median(&mut d2d)))
}
