//! The OpenSHMEM-style layer (`starhalo_sf::shmem`) against two-sided MPI in the same run,
//! after the benchmarks of the OpenSHMEM-over-MPI-3 paper: ping-pong latency (put with
//! signal, then wait for the reply's signal) from 8 bytes up, atomic fetch-add and
//! compare-and-swap latency against an 8-byte two-sided round trip, `barrier_all` against
//! `MPI_Barrier`, and a 2-D heat solve (Jacobi, rows split over the ranks) whose ghost rows
//! move by put-with-signal or by send/receive. The one-sided variants run through both
//! on-node paths: load/store into shared memory, and RMA. Each round times every variant
//! once, in turn, so drift hits all alike; medians over rounds are reported. The three heat
//! solves must agree bit for bit, or the run fails.

use super::{median, timed};
use crate::cli::ShmemBenchArgs;
use crate::exit::bad_input;
use crate::run::collective::agree;
use anyhow::{bail, Result};
use mpi::collective::SystemOperation;
use mpi::point_to_point::{Destination, Source};
use mpi::request::WaitGuard;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::CommunicatorCollectives;
use serde::Serialize;
use starhalo_sf::shmem::{Atomic, Cmp, OnNode, Shmem, ShmemOptions, Signal, Symmetric};

/// One figure measured three ways, and the one-sided ways' ratios to two-sided.
#[derive(Serialize)]
struct Versus {
    two_sided_us: f64,
    load_store_us: f64,
    rma_us: f64,
    load_store_vs_two_sided: f64,
    rma_vs_two_sided: f64,
}

impl Versus {
    /// From seconds: two-sided, load/store, RMA.
    fn of(m: [f64; 3]) -> Self {
        Self {
            two_sided_us: m[0] * 1e6,
            load_store_us: m[1] * 1e6,
            rma_us: m[2] * 1e6,
            load_store_vs_two_sided: m[1] / m[0],
            rma_vs_two_sided: m[2] / m[0],
        }
    }
}

#[derive(Serialize)]
struct PingRow {
    bytes: usize,
    /// Half a round trip, median over rounds.
    #[serde(flatten)]
    times: Versus,
}

#[derive(Serialize)]
struct AtomicRow {
    op: &'static str,
    path: &'static str,
    us: f64,
    /// Against a whole 8-byte two-sided round trip (an atomic that fetches is one).
    vs_two_sided_round_trip: f64,
}

#[derive(Serialize)]
struct Pair {
    shmem_us: f64,
    mpi_us: f64,
    ratio: f64,
}

#[derive(Serialize)]
struct Heat {
    n: usize,
    sweeps: u32,
    /// Per sweep, the slowest rank's, median over rounds.
    #[serde(flatten)]
    times: Versus,
    identical: bool,
}

#[derive(Serialize)]
struct Report {
    ranks: usize,
    /// Whether rank 1 shares memory with rank 0 (the load/store path reaches it).
    same_node: bool,
    pingpong: Vec<PingRow>,
    atomics: Vec<AtomicRow>,
    barrier: Pair,
    heat: Heat,
}

pub fn run(world: &SimpleCommunicator, a: &ShmemBenchArgs) -> Result<()> {
    let (me, np) = (world.rank() as usize, world.size() as usize);
    agree(world, check_args(a, np))?;
    let max = a.max_bytes as usize;
    let mut sizes: Vec<usize> = std::iter::successors(Some(8usize), |s| Some(s * 8))
        .take_while(|&s| s < max)
        .collect();
    sizes.push(max);
    let heap_bytes = max + 8 * a.heat_n * 4 + (1 << 12);
    let heaps = OnNode::ALL.map(|on_node| {
        Shmem::new(
            world,
            ShmemOptions {
                heap_bytes,
                on_node,
            },
        )
    });
    let [load_store, rma] = heaps;
    let heaps = [load_store?, rma?];
    let rounds = a.rounds as usize;

    // Ping-pong: two-sided, then put-with-signal through each path.
    let mut pingers = heaps
        .iter()
        .map(|h| Pinger::new(h, max))
        .collect::<Result<Vec<_>>>()?;
    let mut buf = vec![7u8; max];
    let mut pingpong = Vec::new();
    for &bytes in &sizes {
        let reps = ((1 << 20) / bytes).clamp(8, 1000);
        let mut t = [vec![], vec![], vec![]];
        for _ in 0..rounds + 1 {
            t[0].push(
                timed(world, || two_sided_pingpong(world, &mut buf[..bytes], reps)).0
                    / (2 * reps) as f64,
            );
            for (k, p) in pingers.iter_mut().enumerate() {
                t[k + 1]
                    .push(timed(world, || p.pingpong(&buf[..bytes], reps)).0 / (2 * reps) as f64);
            }
        }
        let m = t.map(|mut v| median(&mut v[1..]));
        pingpong.push(PingRow {
            bytes,
            times: Versus::of(m),
        });
    }
    drop(pingers);

    // Atomics on rank 1's word, from rank 0, through each path, against an 8-byte round
    // trip.
    let reps = 1000;
    let ops = [
        ("fetch-add", Atomic::FetchAdd(1)),
        ("compare-swap", Atomic::CompareSwap { cond: 0, value: 1 }),
    ];
    let mut words = heaps
        .iter()
        .map(|h| h.malloc::<u64>(1))
        .collect::<Result<Vec<_>, _>>()?;
    let mut t = vec![vec![]; 1 + ops.len() * words.len()];
    for _ in 0..rounds + 1 {
        t[0].push(timed(world, || two_sided_pingpong(world, &mut buf[..8], reps)).0 / reps as f64);
        for (i, (_, op)) in ops.iter().enumerate() {
            for (j, word) in words.iter_mut().enumerate() {
                let per_op = timed(world, || {
                    if me == 0 {
                        (0..reps).for_each(|_| drop(word.atomic(0, *op, 1)));
                    }
                })
                .0 / reps as f64;
                t[1 + i * OnNode::ALL.len() + j].push(per_op);
            }
        }
    }
    drop(words);
    let m: Vec<f64> = t.iter_mut().map(|v| median(&mut v[1..])).collect();
    let atomics = ops
        .iter()
        .flat_map(|(name, _)| OnNode::ALL.map(|p| (*name, p.name())))
        .zip(&m[1..])
        .map(|((op, path), &s)| AtomicRow {
            op,
            path,
            us: s * 1e6,
            vs_two_sided_round_trip: s / m[0],
        })
        .collect();

    // Barriers.
    let reps = 200;
    let mut t = [vec![], vec![]];
    for _ in 0..rounds + 1 {
        t[0].push(timed(world, || (0..reps).for_each(|_| heaps[0].barrier_all())).0 / reps as f64);
        t[1].push(timed(world, || (0..reps).for_each(|_| world.barrier())).0 / reps as f64);
    }
    let m = t.map(|mut v| median(&mut v[1..]));
    let barrier = Pair {
        shmem_us: m[0] * 1e6,
        mpi_us: m[1] * 1e6,
        ratio: m[0] / m[1],
    };

    let heat = heat(world, a, &heaps)?;
    if me != 0 {
        return Ok(());
    }
    let report = Report {
        ranks: np,
        same_node: heaps[0].load_store(1),
        pingpong,
        atomics,
        barrier,
        heat,
    };
    print(a, &report)
}

/// Put-with-signal ping-pong between ranks 0 and 1 on one heap.
struct Pinger<'h> {
    data: Symmetric<'h, u8>,
    sig: Symmetric<'h, u64>,
    seq: u64,
    me: usize,
}

impl<'h> Pinger<'h> {
    fn new(heap: &'h Shmem, max: usize) -> Result<Self> {
        Ok(Self {
            data: heap.malloc(max)?,
            sig: heap.malloc(1)?,
            seq: 0,
            me: heap.my_pe(),
        })
    }

    fn pingpong(&mut self, buf: &[u8], reps: usize) {
        for _ in 0..reps {
            self.seq += 1;
            let seq = self.seq;
            let (data, sig) = (&mut self.data, &mut self.sig);
            let _ = match self.me {
                0 => data
                    .put_signal(0, buf, sig, 0, Signal::Set(seq), 1)
                    .and_then(|_| sig.wait_until(0, Cmp::Ge, seq).map(drop)),
                1 => sig
                    .wait_until(0, Cmp::Ge, seq)
                    .and_then(|_| data.put_signal(0, buf, sig, 0, Signal::Set(seq), 0)),
                _ => Ok(()),
            };
        }
    }
}

fn two_sided_pingpong(world: &SimpleCommunicator, buf: &mut [u8], reps: usize) {
    let me = world.rank();
    if me > 1 {
        return;
    }
    let peer = world.process_at_rank(1 - me);
    for _ in 0..reps {
        if me == 0 {
            peer.send(&buf[..]);
            peer.receive_into(&mut buf[..]);
        } else {
            peer.receive_into(&mut buf[..]);
            peer.send(&buf[..]);
        }
    }
}

/// How ghost rows reach the ranks above and below.
trait Halo {
    /// Fills `u`'s ghost rows (`u` holds `nrows + 2` rows of `cols`).
    fn exchange(&mut self, u: &mut [f64], cols: usize) -> Result<()>;
}

struct TwoSided<'a> {
    world: &'a SimpleCommunicator,
}

impl Halo for TwoSided<'_> {
    fn exchange(&mut self, u: &mut [f64], cols: usize) -> Result<()> {
        let (me, np) = (self.world.rank(), self.world.size());
        let (top, rest) = u.split_at_mut(cols);
        let (mid, bottom) = rest.split_at_mut(rest.len() - cols);
        let (first, last) = (&mid[..cols], &mid[mid.len() - cols..]);
        mpi::request::scope(|scope| {
            let mut guards: Vec<WaitGuard<'_, _, _>> = Vec::new();
            if me > 0 {
                let up = self.world.process_at_rank(me - 1);
                guards.push(up.immediate_receive_into(scope, top).into());
                guards.push(up.immediate_send(scope, first).into());
            }
            if me + 1 < np {
                let down = self.world.process_at_rank(me + 1);
                guards.push(down.immediate_receive_into(scope, bottom).into());
                guards.push(down.immediate_send(scope, last).into());
            }
        });
        Ok(())
    }
}

/// Ghost rows put with a signal into double-buffered slots: `[parity][from above, from
/// below][cols]`. A rank writes slot `k % 2` of a neighbour only after that neighbour's
/// exchange-`k - 1` rows arrived, which it sent after reading slot `k % 2` in exchange
/// `k - 2`.
struct OneSided<'h> {
    ghosts: Symmetric<'h, f64>,
    sig: Symmetric<'h, u64>,
    /// Exchanges so far, over every solve: the signal values, which only grow.
    count: u64,
}

impl Halo for OneSided<'_> {
    fn exchange(&mut self, u: &mut [f64], cols: usize) -> Result<()> {
        let heap = self.ghosts.shmem();
        let (me, np) = (heap.my_pe(), heap.n_pes());
        let nrows = u.len() / cols - 2;
        self.count += 1;
        let seq = self.count;
        let par = (seq % 2) as usize * 2 * cols;
        let (ghosts, sig) = (&mut self.ghosts, &mut self.sig);
        if me > 0 {
            let first = &u[cols..2 * cols];
            ghosts.put_signal(par + cols, first, sig, 1, Signal::Set(seq), me - 1)?;
        }
        if me + 1 < np {
            let last = &u[nrows * cols..(nrows + 1) * cols];
            ghosts.put_signal(par, last, sig, 0, Signal::Set(seq), me + 1)?;
        }
        if me > 0 {
            sig.wait_until(0, Cmp::Ge, seq)?;
            ghosts.get(par, &mut u[..cols], me)?;
        }
        if me + 1 < np {
            sig.wait_until(1, Cmp::Ge, seq)?;
            ghosts.get(par + cols, &mut u[(nrows + 1) * cols..], me)?;
        }
        Ok(())
    }
}

/// Jacobi sweeps on an `n` × `n` plate whose top edge is held at 1 and other edges at 0;
/// returns this rank's rows.
fn solve(halo: &mut dyn Halo, me: usize, np: usize, n: usize, sweeps: u32) -> Result<Vec<f64>> {
    let (lo, hi) = (me * n / np, (me + 1) * n / np);
    let nrows = hi - lo;
    let mut u = vec![0.0; (nrows + 2) * n];
    if me == 0 {
        u[..n].fill(1.0);
    }
    let mut out = u.clone();
    for _ in 0..sweeps {
        halo.exchange(&mut u, n)?;
        for r in 1..=nrows {
            for j in 1..n - 1 {
                let at = r * n + j;
                out[at] = 0.25 * (u[at - n] + u[at + n] + u[at - 1] + u[at + 1]);
            }
        }
        std::mem::swap(&mut u, &mut out);
        // The ghost rows are refilled next sweep; the edge rows stay.
        u[..n].copy_from_slice(&out[..n]);
        u[(nrows + 1) * n..].copy_from_slice(&out[(nrows + 1) * n..]);
    }
    Ok(u[n..(nrows + 1) * n].to_vec())
}

fn heat(world: &SimpleCommunicator, a: &ShmemBenchArgs, heaps: &[Shmem; 2]) -> Result<Heat> {
    let (me, np) = (world.rank() as usize, world.size() as usize);
    let (n, sweeps) = (a.heat_n, a.heat_sweeps);
    let mut halos: Vec<Box<dyn Halo + '_>> = vec![Box::new(TwoSided { world })];
    for h in heaps {
        halos.push(Box::new(OneSided {
            ghosts: h.malloc(4 * n)?,
            sig: h.malloc(2)?,
            count: 0,
        }));
    }
    let mut times = [vec![], vec![], vec![]];
    let mut results: Vec<Vec<f64>> = vec![Vec::new(); 3];
    for _ in 0..a.rounds + 1 {
        for (k, halo) in halos.iter_mut().enumerate() {
            let (t, res) = timed(world, || solve(halo.as_mut(), me, np, n, sweeps));
            times[k].push(t);
            results[k] = res?;
        }
    }
    let same = |x: &[f64], y: &[f64]| x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits());
    let mine = same(&results[0], &results[1]) && same(&results[0], &results[2]);
    let mut all = false;
    world.all_reduce_into(&mine, &mut all, SystemOperation::logical_and());
    if !all {
        bail!("the heat solves differ between two-sided and one-sided ghost exchange");
    }
    let m = times.map(|mut v| median(&mut v[1..]) / sweeps as f64);
    Ok(Heat {
        n,
        sweeps,
        times: Versus::of(m),
        identical: all,
    })
}

fn print(a: &ShmemBenchArgs, r: &Report) -> Result<()> {
    if a.json {
        outln!("{}", serde_json::to_string(r)?);
        return Ok(());
    }
    outln!(
        "# shmem: {} ranks ({}); medians of {} rounds",
        r.ranks,
        if r.same_node {
            "ranks 0 and 1 share a node"
        } else {
            "ranks 0 and 1 on different nodes"
        },
        a.rounds
    );
    outln!("# ping-pong, half round trip (us)");
    outln!(
        "{:>9} {:>11} {:>11} {:>9} {:>12} {:>8}",
        "bytes",
        "two_sided",
        "load_store",
        "rma",
        "ls/2sided",
        "rma/2s"
    );
    for p in &r.pingpong {
        outln!(
            "{:>9} {:>11.2} {:>11.2} {:>9.2} {:>12.3} {:>8.3}",
            p.bytes,
            p.times.two_sided_us,
            p.times.load_store_us,
            p.times.rma_us,
            p.times.load_store_vs_two_sided,
            p.times.rma_vs_two_sided
        );
    }
    for x in &r.atomics {
        outln!(
            "# atomic {} ({}): {:.3} us, {:.3} of an 8-byte two-sided round trip",
            x.op,
            x.path,
            x.us,
            x.vs_two_sided_round_trip
        );
    }
    outln!(
        "# barrier_all {:.2} us, MPI_Barrier {:.2} us: {:.3}",
        r.barrier.shmem_us,
        r.barrier.mpi_us,
        r.barrier.ratio
    );
    let (h, t) = (&r.heat, &r.heat.times);
    outln!(
        "# heat {}x{}, {} sweeps, per sweep: two-sided {:.2} us, load/store {:.2} us ({:.3}), rma {:.2} us ({:.3}); identical: {}",
        h.n,
        h.n,
        h.sweeps,
        t.two_sided_us,
        t.load_store_us,
        t.load_store_vs_two_sided,
        t.rma_us,
        t.rma_vs_two_sided,
        h.identical
    );
    Ok(())
}

/// The largest heat plate side: 16384² doubles is 2 GiB over all ranks.
const MAX_HEAT_N: usize = 1 << 14;

fn check_args(a: &ShmemBenchArgs, nranks: usize) -> Result<()> {
    if nranks < 2 {
        return Err(bad_input!(
            "bench shmem needs at least 2 ranks (got {nranks})"
        ));
    }
    if a.heat_n > MAX_HEAT_N {
        return Err(bad_input!(
            "--heat-n {} is above {MAX_HEAT_N}: the plate holds heat-n squared doubles",
            a.heat_n
        ));
    }
    if a.heat_n < 3 || a.heat_n < nranks {
        return Err(bad_input!(
            "--heat-n {} is too small: the plate needs at least 3 rows and one row per rank ({nranks})",
            a.heat_n
        ));
    }
    Ok(())
}
