//! The OpenSHMEM-style layer on 1, 2, 3, 4 and 8 ranks, through both on-node paths
//! (load/store into shared memory, and RMA): puts and gets, strided ones, atomics (a counter
//! whose fetched values must be a permutation, a compare-and-swap lock guarding a get + put
//! increment, bit operations), put-with-signal rounds whose data must be whole when the
//! signal arrives, team collectives, a 2-D heat solve equal bit for bit to a serial one, and
//! the refusals (each on every PE, never a hang).

mod common;

use starhalo_sf::mpi::topology::{Communicator, SimpleCommunicator};
use starhalo_sf::mpi::traits::{CommunicatorCollectives, Root};
use starhalo_sf::shmem::{Atomic, Cmp, OnNode, Shmem, ShmemOptions, Signal, Symmetric, Update};
use starhalo_sf::{Op, SfError};

fn main() {
    if std::env::var_os(common::CHILD_ENV).is_some() {
        child();
    } else {
        eprintln!("shmem: the symmetric heap's operations on both on-node paths");
        common::relaunch_self(&[1, 2, 3, 4, 8], 240);
    }
}

struct Checks {
    rank: usize,
    failures: Vec<String>,
}

impl Checks {
    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.failures
                .push(format!("rank {}: {}", self.rank, what()));
        }
    }
}

fn child() {
    let universe = starhalo_sf::mpi::initialize().expect("MPI init");
    let world: SimpleCommunicator = universe.world();
    let rank = world.rank() as usize;
    let mut c = Checks {
        rank,
        failures: Vec::new(),
    };
    for on_node in OnNode::ALL {
        let options = ShmemOptions {
            heap_bytes: 4 << 20,
            on_node,
        };
        let sh = Shmem::new(&world, options).expect("heap");
        let path = on_node.name();
        c.check(sh.load_store(rank), || {
            format!("{path}: own heap not reached directly")
        });
        let expect_direct = on_node == OnNode::LoadStore || sh.n_pes() == 1;
        let next_direct = sh.load_store((rank + 1) % sh.n_pes());
        c.check(next_direct == expect_direct, || {
            format!("{path}: load/store to the next PE is {next_direct}")
        });
        puts_and_gets(&sh, &mut c);
        strided(&sh, &mut c);
        atomics(&sh, &world, &mut c);
        signals(&sh, &mut c);
        teams(&sh, &mut c);
        heat(&sh, &mut c);
        refusals(&sh, &world, &mut c);
        c.failures.iter_mut().for_each(|f| {
            if !f.contains(" [") {
                f.push_str(&format!(" [{path}]"));
            }
        });
    }
    if !c.failures.is_empty() {
        panic!("{}", c.failures.join("\n"));
    }
    if rank == 0 {
        eprintln!("shmem child on {} ranks: all checks passed", world.size());
    }
}

/// This PE's values of `x`, copied out (the safe way to read one's own part).
fn own<T: bytemuck::Pod>(x: &Symmetric<T>) -> Vec<T> {
    let mut v = vec![T::zeroed(); x.len()];
    x.get(0, &mut v, x.shmem().my_pe()).expect("own values");
    v
}

/// Writes `vals` into this PE's part of `x` from value 0.
fn set<T: bytemuck::Pod>(x: &mut Symmetric<T>, vals: &[T]) {
    let me = x.shmem().my_pe();
    x.put(0, vals, me).expect("own values");
}

fn value(pe: usize, i: usize) -> u64 {
    (pe as u64) << 32 | i as u64
}

/// Each PE puts a block into the next PE's object, then gets one from the previous PE.
fn puts_and_gets(sh: &Shmem, c: &mut Checks) {
    let (me, n) = (sh.my_pe(), sh.n_pes());
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let mut x: Symmetric<u64> = sh.malloc(40).expect("malloc");
    c.check(own(&x).iter().all(|&v| v == 0), || {
        "malloc did not zero".into()
    });
    sh.barrier_all(); // peers may put as soon as malloc returns
    let mine: Vec<u64> = (0..30).map(|i| value(me, i)).collect();
    x.put(5, &mine, next).expect("put");
    sh.barrier_all();
    let want: Vec<u64> = (0..40)
        .map(|i| {
            if (5..35).contains(&i) {
                value(prev, i - 5)
            } else {
                0
            }
        })
        .collect();
    let got = own(&x);
    c.check(got == want, || format!("put: {:?}", &got[..8]));
    let mut got = vec![0u64; 10];
    x.get(20, &mut got, prev).expect("get");
    let pp = (prev + n - 1) % n;
    let want: Vec<u64> = (15..25).map(|i| value(pp, i)).collect();
    c.check(got == want, || format!("get: {got:?}"));
    sh.barrier_all();
}

fn strided(sh: &Shmem, c: &mut Checks) {
    let (me, n) = (sh.my_pe(), sh.n_pes());
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let mut y: Symmetric<f64> = sh.malloc(32).expect("malloc");
    let src: Vec<f64> = (0..12).map(|i| (me * 100 + i) as f64).collect();
    // src[0], src[2], ..., src[8] into y[1], y[4], ..., y[13] of the next PE.
    y.put_strided(1, 3, &src, 2, 5, next).expect("iput");
    sh.barrier_all();
    for (i, v) in own(&y).iter().enumerate() {
        let want = match i % 3 == 1 && i <= 13 {
            true => (prev * 100 + (i - 1) / 3 * 2) as f64,
            false => 0.0,
        };
        c.check(*v == want, || format!("iput: y[{i}] = {v}, want {want}"));
    }
    // y[4], y[7], y[10] of the previous PE into dst[0], dst[4], dst[8].
    let mut dst = vec![-1.0f64; 9];
    y.get_strided(4, 3, &mut dst, 4, 3, prev).expect("iget");
    let pp = (prev + n - 1) % n;
    for (i, v) in dst.iter().enumerate() {
        let want = match i % 4 {
            0 => (pp * 100 + (i / 4 + 1) * 2) as f64,
            _ => -1.0,
        };
        c.check(*v == want, || format!("iget: dst[{i}] = {v}, want {want}"));
    }
    sh.barrier_all();
}

fn atomics(sh: &Shmem, world: &SimpleCommunicator, c: &mut Checks) {
    let (me, n) = (sh.my_pe(), sh.n_pes());
    let rounds = 25;
    let mut counter: Symmetric<i64> = sh.malloc(2).expect("malloc");
    let fetched: Vec<i64> = (0..rounds)
        .map(|_| counter.atomic(0, Atomic::FetchAdd(1), 0).expect("fadd"))
        .collect();
    counter
        .update(1, Update::Add(me as i64 + 1), n - 1)
        .expect("add");
    sh.barrier_all();
    // Every fetched value is distinct: together they are 0..rounds·n.
    let mut all = vec![0i64; rounds * n];
    world.all_gather_into(&fetched[..], &mut all[..]);
    all.sort_unstable();
    c.check(all == (0..(rounds * n) as i64).collect::<Vec<_>>(), || {
        format!(
            "fetch-add values are not a permutation: {:?}",
            &all[..all.len().min(8)]
        )
    });
    let total = counter.atomic(1, Atomic::Fetch, n - 1).expect("fetch");
    c.check(total == (n * (n + 1) / 2) as i64, || {
        format!("add: {total}")
    });

    // A lock on PE 0 (compare-and-swap), guarding a non-atomic get + put on the last PE.
    let mut lock: Symmetric<u64> = sh.malloc(1).expect("malloc");
    let mut shared: Symmetric<u64> = sh.malloc(1).expect("malloc");
    let owner = n as u64 + 7;
    for _ in 0..10 {
        while lock
            .atomic(
                0,
                Atomic::CompareSwap {
                    cond: 0,
                    value: owner + me as u64,
                },
                0,
            )
            .expect("cswap")
            != 0
        {}
        let mut v = [0u64];
        shared.get(0, &mut v, n - 1).expect("get");
        v[0] += 1;
        shared.put(0, &v, n - 1).expect("put");
        sh.quiet();
        let held = lock.atomic(0, Atomic::Swap(0), 0).expect("swap");
        c.check(held == owner + me as u64, || format!("lock held by {held}"));
    }
    sh.barrier_all();
    let mut v = [0u64];
    shared.get(0, &mut v, n - 1).expect("get");
    c.check(v[0] == 10 * n as u64, || {
        format!("locked increments: {} of {}", v[0], 10 * n)
    });

    // Bit operations: each PE sets its bit, then flips it twice.
    let mut bits: Symmetric<u32> = sh.malloc(2).expect("malloc");
    bits.atomic(0, Atomic::FetchOr(1 << me), 0).expect("for");
    bits.update(1, Update::Xor(1 << me), 0).expect("xor");
    bits.update(1, Update::Xor(1 << me), 0).expect("xor");
    sh.barrier_all();
    let all_bits = ((1u64 << n) - 1) as u32;
    let got = bits.atomic(0, Atomic::FetchAnd(u32::MAX), 0).expect("fand");
    c.check(got == all_bits, || format!("or: {got:#x}"));
    let got = bits.atomic(1, Atomic::Fetch, 0).expect("fetch");
    c.check(got == 0, || format!("xor twice: {got:#x}"));
    sh.barrier_all();
    if me == 0 {
        bits.update(0, Update::Set(5), 0).expect("set");
        bits.update(0, Update::And(4), 0).expect("and");
        let got = bits.atomic(0, Atomic::Fetch, 0).expect("fetch");
        c.check(got == 4, || format!("set then and: {got}"));
    }
    sh.barrier_all();
}

/// Rounds of put-with-signal around the ring, each acknowledged before the next may land:
/// the data must be whole when the signal is seen.
fn signals(sh: &Shmem, c: &mut Checks) {
    let (me, n) = (sh.my_pe(), sh.n_pes());
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let len = 1 << 15;
    let mut data: Symmetric<u64> = sh.malloc(len).expect("malloc");
    // sig[0]: data arrived (from prev); sig[1]: the next PE has read what I sent.
    let mut sig: Symmetric<u64> = sh.malloc(2).expect("malloc");
    let mut src = vec![0u64; len];
    // Nothing has arrived before anyone sends.
    let early = sig.test(0, Cmp::Gt, 0).expect("test");
    c.check(!early, || "test saw a signal before any was sent".into());
    sh.barrier_all();
    for round in 0..12u64 {
        sig.wait_until(1, Cmp::Ge, round).expect("ack");
        src.iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = value(me, i) ^ round);
        data.put_signal(0, &src, &mut sig, 0, Signal::Add(1), next)
            .expect("put_signal");
        let seen = sig.wait_until(0, Cmp::Ge, round + 1).expect("wait");
        c.check(seen == round + 1, || {
            format!("signal {seen} in round {round}")
        });
        let whole = own(&data)
            .iter()
            .enumerate()
            .all(|(i, &v)| v == value(prev, i) ^ round);
        c.check(whole, || {
            format!("round {round}: data not whole at the signal")
        });
        sig.update(1, Update::Set(round + 1), prev).expect("ack");
    }
    c.check(sig.test(0, Cmp::Eq, 12).expect("test"), || "test".into());
    c.check(!sig.test(0, Cmp::Gt, 12).expect("test"), || "test".into());
    sh.barrier_all();
}

fn teams(sh: &Shmem, c: &mut Checks) {
    let (me, n) = (sh.my_pe(), sh.n_pes());
    // Even PEs and odd PEs, each a team of stride 2.
    let (start, size) = (me % 2, (n - me % 2).div_ceil(2));
    let team = sh.team(start, 1, size).expect("team");
    let again = sh.team(start, 1, size).expect("cached team");
    c.check(team.my_pe() == me / 2 && again.n_pes() == size, || {
        "team numbering".into()
    });
    let members: Vec<usize> = (0..size).map(|i| team.world_pe(i).unwrap()).collect();
    c.check(team.world_pe(size).is_none(), || {
        "world_pe past the end".into()
    });

    // Symmetric objects are allocated by every PE, so the teams use the same ones.
    let mut src: Symmetric<i64> = sh.malloc(3).expect("malloc");
    let mut dest: Symmetric<i64> = sh.malloc(3 * n).expect("malloc");
    set(&mut src, &[me as i64, 1, (me * me) as i64]);
    team.reduce(&mut dest, &src, Op::Sum).expect("reduce");
    let want = [
        members.iter().sum::<usize>() as i64,
        size as i64,
        members.iter().map(|p| p * p).sum::<usize>() as i64,
    ];
    let got = own(&dest);
    c.check(got[..3] == want, || format!("sum: {:?}", &got[..3]));
    team.reduce(&mut dest, &src, Op::Max).expect("reduce");
    let max = *members.last().unwrap() as i64;
    c.check(own(&dest)[0] == max, || "max".into());

    team.fcollect(&mut dest, &src).expect("fcollect");
    let want: Vec<i64> = members
        .iter()
        .flat_map(|&p| [p as i64, 1, (p * p) as i64])
        .collect();
    c.check(own(&dest)[..3 * size] == want[..], || "fcollect".into());

    // Team PE i gives its first i % 3 + 1 values.
    let got = team
        .collect(&mut dest, &src, team.my_pe() % 3 + 1)
        .expect("collect");
    let want: Vec<i64> = members
        .iter()
        .enumerate()
        .flat_map(|(i, &p)| [p as i64, 1, (p * p) as i64].into_iter().take(i % 3 + 1))
        .collect();
    c.check(got == want.len() && own(&dest)[..got] == want[..], || {
        "collect".into()
    });

    let root = size - 1;
    set(&mut src, &[1000 + me as i64]);
    team.broadcast(&mut dest, &src, root).expect("broadcast");
    let want = 1000 + members[root] as i64;
    let got = own(&dest)[0];
    c.check(got == want, || format!("broadcast: {got}"));

    // Floats reduce too; operations they lack are refused.
    let mut fs: Symmetric<f64> = sh.malloc(1).expect("malloc");
    let mut fd: Symmetric<f64> = sh.malloc(1).expect("malloc");
    set(&mut fs, &[-(me as f64) / 4.0]);
    team.reduce(&mut fd, &fs, Op::Min).expect("reduce");
    c.check(own(&fd)[0] == -(max as f64) / 4.0, || "min".into());
    let refused = team.reduce(&mut fd, &fs, Op::Bxor);
    c.check(
        matches!(refused, Err(SfError::UnsupportedOp { .. })),
        || format!("{refused:?}"),
    );
    let refused = team.reduce(&mut fd, &fs, Op::Replace);
    c.check(
        matches!(refused, Err(SfError::UnsupportedOp { .. })),
        || format!("{refused:?}"),
    );

    // Arguments that differ between members, or that every member gets wrong: an error on
    // every member, never a hang in the collective.
    if size > 1 {
        let e = team.broadcast(&mut dest, &src, team.my_pe() % 2);
        c.check(e == Err(SfError::Disagree("collective arguments")), || {
            format!("roots differ: {e:?}")
        });
        let op = [Op::Sum, Op::Max][team.my_pe() % 2];
        let e = team.reduce(&mut dest, &src, op);
        c.check(e == Err(SfError::Disagree("collective arguments")), || {
            format!("ops differ: {e:?}")
        });
        // Team PE 0 asks to collect more than its source holds.
        let n = if team.my_pe() == 0 { 4 } else { 1 };
        let e = team.collect(&mut dest, &src, n);
        let want = match team.my_pe() {
            0 => matches!(e, Err(SfError::IndexOutOfRange { .. })),
            _ => e == Err(SfError::PeerInvalid(members[0] as i32)),
        };
        c.check(want, || format!("collect past the source: {e:?}"));
    }
    let e = team.broadcast(&mut dest, &src, size);
    c.check(matches!(e, Err(SfError::PeOutOfRange { .. })), || {
        format!("root past the team: {e:?}")
    });
    let e = team.fcollect(&mut fd, &fs);
    let want = match size {
        1 => e.is_ok(),
        _ => matches!(e, Err(SfError::IndexOutOfRange { .. })),
    };
    c.check(want, || format!("fcollect into too small an object: {e:?}"));
    team.barrier();
    drop((team, again));
    sh.barrier_all();
}

/// Jacobi on a `rows` × `COLS` plate (top edge 1, others 0), rows split over the PEs, ghost
/// rows exchanged by put-with-signal into double-buffered slots; compared bit for bit with
/// the same sweeps on the whole plate.
fn heat(sh: &Shmem, c: &mut Checks) {
    const COLS: usize = 12;
    let (me, n) = (sh.my_pe(), sh.n_pes());
    let rows = 4 * n + 3;
    let (lo, hi) = (me * rows / n, (me + 1) * rows / n);
    let sweeps = 30;
    let sweep = |u: &[f64], out: &mut [f64], nrows: usize| {
        for r in 1..=nrows {
            for j in 1..COLS - 1 {
                let at = r * COLS + j;
                out[at] = 0.25 * (u[at - COLS] + u[at + COLS] + u[at - 1] + u[at + 1]);
            }
        }
    };
    let edges = |u: &mut [f64], top: bool, bottom: bool, nrows: usize| {
        if top {
            u[..COLS].fill(1.0);
        }
        if bottom {
            u[(nrows + 1) * COLS..].fill(0.0);
        }
    };
    // The whole plate, with its two edge rows.
    let mut whole = vec![0.0; (rows + 2) * COLS];
    edges(&mut whole, true, true, rows);
    let mut next = whole.clone();
    for _ in 0..sweeps {
        sweep(&whole, &mut next, rows);
        std::mem::swap(&mut whole, &mut next);
    }

    // Slots: [parity][from above / from below][COLS]; signals: from above, from below.
    let mut ghosts: Symmetric<f64> = sh.malloc(4 * COLS).expect("malloc");
    let mut sig: Symmetric<u64> = sh.malloc(2).expect("malloc");
    let nrows = hi - lo;
    let mut u = vec![0.0; (nrows + 2) * COLS];
    edges(&mut u, me == 0, me == n - 1, nrows);
    let mut out = u.clone();
    for k in 1..=sweeps as u64 {
        let par = (k % 2) as usize * 2 * COLS;
        if me > 0 {
            let first = &u[COLS..2 * COLS];
            ghosts
                .put_signal(par + COLS, first, &mut sig, 1, Signal::Set(k), me - 1)
                .expect("up");
        }
        if me + 1 < n {
            let last = &u[nrows * COLS..(nrows + 1) * COLS];
            ghosts
                .put_signal(par, last, &mut sig, 0, Signal::Set(k), me + 1)
                .expect("down");
        }
        if me > 0 {
            sig.wait_until(0, Cmp::Ge, k).expect("wait");
            ghosts.get(par, &mut u[..COLS], me).expect("own ghosts");
        }
        if me + 1 < n {
            sig.wait_until(1, Cmp::Ge, k).expect("wait");
            let below = &mut u[(nrows + 1) * COLS..];
            ghosts.get(par + COLS, below, me).expect("own ghosts");
        }
        sweep(&u, &mut out, nrows);
        out[..COLS].copy_from_slice(&u[..COLS]);
        out[(nrows + 1) * COLS..].copy_from_slice(&u[(nrows + 1) * COLS..]);
        std::mem::swap(&mut u, &mut out);
    }
    let same = u[COLS..(nrows + 1) * COLS]
        .iter()
        .zip(&whole[(lo + 1) * COLS..(hi + 1) * COLS])
        .all(|(a, b)| a.to_bits() == b.to_bits());
    c.check(same, || {
        "heat: the distributed plate differs from the whole one".into()
    });
    sh.barrier_all();
}

fn refusals(sh: &Shmem, world: &SimpleCommunicator, c: &mut Checks) {
    let (me, n) = (sh.my_pe(), sh.n_pes());
    let mut x: Symmetric<u32> = sh.malloc(4).expect("malloc");
    let e = x.put(0, &[1], n);
    c.check(
        matches!(e, Err(SfError::PeOutOfRange { pe, npes }) if pe == n && npes == n),
        || format!("put to PE n: {e:?}"),
    );
    let e = x.put(3, &[1, 2], 0);
    c.check(matches!(e, Err(SfError::IndexOutOfRange { .. })), || {
        format!("past the end: {e:?}")
    });
    let e = x.get(usize::MAX, &mut [0; 2], 0);
    c.check(matches!(e, Err(SfError::IndexOutOfRange { .. })), || {
        format!("overflow: {e:?}")
    });
    let e = x.put_strided(0, 0, &[1, 2], 1, 2, 0);
    c.check(e == Err(SfError::ZeroStride), || {
        format!("zero stride: {e:?}")
    });
    let e = x.put_strided(0, 2, &[1, 2, 3], 1, 3, 0);
    c.check(matches!(e, Err(SfError::IndexOutOfRange { .. })), || {
        format!("strided past the end: {e:?}")
    });
    let e = x.get_strided(0, 1, &mut [0; 3], 2, 3, 0);
    c.check(
        matches!(
            e,
            Err(SfError::IndexOutOfRange {
                what: "local array",
                ..
            })
        ),
        || format!("local array too short: {e:?}"),
    );
    c.check(x.put_strided(1, 1, &[], 1, 0, 0).is_ok(), || {
        "empty strided put".into()
    });
    // One value has no stride to speak of; two with a huge one leave the object.
    let one = x.put_strided(3, usize::MAX, &[9], usize::MAX, 1, me);
    c.check(one.is_ok() && own(&x)[3] == 9, || {
        format!("one value, huge strides: {one:?}")
    });
    let e = x.get_strided(0, usize::MAX / 2, &mut [0; 4], 1, 2, 0);
    c.check(matches!(e, Err(SfError::IndexOutOfRange { .. })), || {
        format!("huge stride: {e:?}")
    });
    let e = x.put_strided(0, 1, &[1, 2], usize::MAX, 2, 0);
    c.check(
        matches!(
            e,
            Err(SfError::IndexOutOfRange {
                what: "local array",
                ..
            })
        ),
        || format!("huge local stride: {e:?}"),
    );

    // A block dropped and allocated again comes back zeroed, even with a put into it
    // (over RMA: complete only locally) still on its way. (The barrier keeps that put from
    // landing before the check above has read this PE's value.)
    sh.barrier_all();
    x.put(0, &[7; 4], (me + 1) % n).expect("put");
    drop(x);
    let mut x: Symmetric<u32> = sh.malloc(4).expect("malloc");
    c.check(own(&x) == [0; 4], || format!("reused block: {:?}", own(&x)));
    let e = x.atomic(4, Atomic::Fetch, 0);
    c.check(matches!(e, Err(SfError::IndexOutOfRange { .. })), || {
        format!("atomic: {e:?}")
    });

    // Teams that leave the PEs, or that this PE is not in.
    let e = sh.team(0, 0, n + 1).map(|_| ());
    c.check(matches!(e, Err(SfError::BadTeam { .. })), || {
        format!("team too big: {e:?}")
    });
    let e = sh.team(0, 0, 0).map(|_| ());
    c.check(matches!(e, Err(SfError::BadTeam { .. })), || {
        format!("empty team: {e:?}")
    });
    let e = sh.team(0, 70, 1).map(|_| ());
    c.check(matches!(e, Err(SfError::BadTeam { .. })), || {
        format!("huge stride: {e:?}")
    });
    if me != 0 {
        let e = sh.team(0, 0, 1).map(|_| ());
        c.check(e == Err(SfError::NotInTeam { pe: me }), || {
            format!("not in team: {e:?}")
        });
    }

    // A heap that is too small, sizes that differ, and heaps out of step: refused everywhere.
    let e = sh.malloc::<u8>(8 << 20).map(|_| ());
    c.check(
        matches!(e, Err(SfError::HeapFull { bytes, .. }) if bytes == 8 << 20),
        || format!("heap full: {e:?}"),
    );
    if n > 1 {
        let e = sh.malloc::<u8>(100 + me % 2).map(|_| ());
        c.check(
            e == Err(SfError::Disagree("symmetric allocation sizes")),
            || format!("sizes differ: {e:?}"),
        );
        let lone: Symmetric<u8> = sh.malloc(64).expect("malloc");
        let keep = (me != 0).then_some(lone);
        let e = sh.malloc::<u8>(64).map(|_| ());
        c.check(matches!(e, Err(SfError::Disagree(_))), || {
            format!("out of step: {e:?}")
        });
        drop(keep);
        // Back in step once every PE has dropped it.
        let ok = sh.malloc::<u8>(64).map(|_| ());
        c.check(ok.is_ok(), || format!("back in step: {ok:?}"));
    }
    // A type aligned beyond the heap's words, asked for by one PE only (the others ask for
    // as many bytes): refused on every PE, where it hung the others before.
    #[derive(Clone, Copy, bytemuck::Zeroable, bytemuck::Pod)]
    #[repr(C, align(128))]
    struct Wide([u8; 128]);
    let e = match me {
        0 => sh.malloc::<Wide>(1).map(|_| ()),
        _ => sh.malloc::<u64>(16).map(|_| ()),
    };
    c.check(
        match me {
            0 => matches!(e, Err(SfError::Unsupported(_))),
            _ => e == Err(SfError::PeerInvalid(0)),
        },
        || format!("over-aligned on PE 0 only: {e:?}"),
    );
    // Heaps larger than the node's memory: an error on every PE, not an abort or an hour
    // of MPI touching pages.
    for on_node in [OnNode::Rma, OnNode::LoadStore] {
        let huge = ShmemOptions {
            heap_bytes: 1 << 52,
            on_node,
        };
        let e = Shmem::new(world, huge).map(|_| ());
        c.check(matches!(e, Err(SfError::IndexOutOfRange { .. })), || {
            format!("a 4 PiB heap ({on_node:?}): {e:?}")
        });
    }
    // A signal in another heap; a signal to a PE that does not exist.
    let other = Shmem::new(
        world,
        ShmemOptions {
            heap_bytes: 1000,
            on_node: OnNode::Rma,
        },
    )
    .expect("heap");
    let mut foreign: Symmetric<u64> = other.malloc(1).expect("malloc");
    let mut data: Symmetric<u64> = sh.malloc(1).expect("malloc");
    let mut sig: Symmetric<u64> = sh.malloc(1).expect("malloc");
    let e = data.put_signal(0, &[1], &mut foreign, 0, Signal::Set(1), 0);
    c.check(e == Err(SfError::OtherHeap), || {
        format!("signal in another heap: {e:?}")
    });
    let e = data.put_signal(0, &[1], &mut sig, 0, Signal::Set(1), n);
    c.check(matches!(e, Err(SfError::PeOutOfRange { .. })), || {
        format!("signal past the PEs: {e:?}")
    });
    // A heap of 1000 bytes (not whole pages) still aligns its words: atomics work.
    foreign
        .atomic(0, Atomic::FetchAdd(1), (me + 1) % n)
        .expect("fadd");
    other.barrier_all();
    c.check(own(&foreign) == [1], || {
        format!("atomics on a small heap: {:?}", own(&foreign))
    });
    drop((foreign, data, sig));
    drop(other);

    let mismatched = ShmemOptions {
        heap_bytes: 1 << 20,
        on_node: [OnNode::LoadStore, OnNode::Rma][me % 2],
    };
    if n > 1 {
        let e = Shmem::new(world, mismatched).map(|_| ());
        c.check(
            e == Err(SfError::Disagree("symmetric heap options")),
            || format!("mixed options: {e:?}"),
        );
    }
    // An agreed root keeps the run honest that everybody got this far.
    let mut flag = me as u64;
    world.process_at_rank(0).broadcast_into(&mut flag);
    c.check(flag == 0, || "broadcast".into());
    sh.barrier_all();
}
