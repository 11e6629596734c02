//! Every star-forest operation and unit type on seeded random graphs, on 1, 2, 3, 4 and 8 ranks,
//! under both discoveries and every implementation (basic, neighbor, rma), against a sequential
//! reference computed here from the whole graph; bcast and reduce also through the forest's
//! packed (staged) form, with the packed arrays copied through the forest or moved by MPI in
//! place (the GPU-aware path, on host memory).
//!
//! The parent process relaunches this binary under `mpiexec`; each rank builds the same graphs
//! from the seed, runs its part through the forest, and checks its own results bit for bit.

mod common;

use common::sf_world::{random_world, World};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use starhalo_exec::Policy;
use starhalo_sf::mpi::topology::{Communicator, SimpleCommunicator};
use starhalo_sf::mpi::traits::CommunicatorCollectives;
use starhalo_sf::{
    Discovery, Graph, Op, Pending, RootRef, Scalar, SfError, SfOptions, SfType, Staged, StarForest,
    Unit,
};

fn main() {
    if std::env::var_os(common::CHILD_ENV).is_some() {
        child();
    } else {
        eprintln!("sf_random: all ops and units on seeded random graphs");
        common::relaunch_self(&[1, 2, 3, 4, 8], 600);
    }
}

/// Deterministic data for rank r: values chosen so every op has work (zeros for logic ops).
fn values<U: TestUnit>(seed: u64, r: usize, len: usize) -> Vec<U> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (r as u64 * 7919));
    (0..len).map(|_| U::random(&mut rng)).collect()
}

trait TestUnit: Unit<Scalar: Reference> + PartialEq + std::fmt::Debug {
    fn random(rng: &mut ChaCha8Rng) -> Self;
    fn bits_eq(&self, other: &Self) -> bool {
        bytemuck::bytes_of(self) == bytemuck::bytes_of(other)
    }
}
/// Each op written out again, apart from the library's reducers, so that a wrong reducer
/// cannot hide in the reference (`None`: the op is not defined for the type).
trait Reference: Scalar {
    fn combine(op: Op, d: Self, s: Self) -> Option<Self>;
}
macro_rules! test_int {
    ($($t:ty),*) => {$(impl TestUnit for $t {
        fn random(rng: &mut ChaCha8Rng) -> Self {
            if rng.gen_bool(0.25) { 0 } else { rng.gen_range(1..100) as $t }
        }
    }
    impl Reference for $t {
        fn combine(op: Op, d: Self, s: Self) -> Option<Self> {
            Some(match op {
                Op::Replace => s,
                Op::Sum => d.wrapping_add(s),
                Op::Prod => d.wrapping_mul(s),
                Op::Min => d.min(s),
                Op::Max => d.max(s),
                Op::Land => <$t>::from(d != 0 && s != 0),
                Op::Lor => <$t>::from(d != 0 || s != 0),
                Op::Band => d & s,
                Op::Bor => d | s,
                Op::Bxor => d ^ s,
            })
        }
    })*};
}
macro_rules! reference_float {
    ($($t:ty),*) => {$(impl Reference for $t {
        fn combine(op: Op, d: Self, s: Self) -> Option<Self> {
            match op {
                Op::Replace => Some(s),
                Op::Sum => Some(d + s),
                Op::Prod => Some(d * s),
                Op::Min => Some(d.min(s)),
                Op::Max => Some(d.max(s)),
                _ => None,
            }
        }
    })*};
}
reference_float!(f64, f32);
test_int!(i64, i32, u8);
impl TestUnit for f64 {
    fn random(rng: &mut ChaCha8Rng) -> Self {
        rng.gen_range(-40.0..40.0)
    }
}
impl TestUnit for f32 {
    fn random(rng: &mut ChaCha8Rng) -> Self {
        rng.gen_range(-40.0f32..40.0)
    }
}
impl<T: TestUnit + Scalar, const N: usize> TestUnit for [T; N]
where
    [T; N]: Unit<Scalar: Reference>,
{
    fn random(rng: &mut ChaCha8Rng) -> Self {
        std::array::from_fn(|_| T::random(rng))
    }
}

fn apply<U: TestUnit>(op: Op, dst: &mut U, src: &U) {
    let d: &mut [U::Scalar] = bytemuck::cast_slice_mut(std::slice::from_mut(dst));
    let s: &[U::Scalar] = bytemuck::cast_slice(std::slice::from_ref(src));
    for (d, &s) in d.iter_mut().zip(s) {
        *d = Reference::combine(op, *d, s).expect("op checked by caller");
    }
}

struct Case<'a> {
    world: &'a World,
    sf: &'a StarForest,
    /// The same forest staged through packed arrays (the device path's host form).
    staged: &'a Staged,
    seed: u64,
    rank: usize,
    failures: &'a mut Vec<String>,
}

impl Case<'_> {
    /// Every rank's root values (or leaf values with `leaf`), drawn from the seed plus `salt`.
    fn per_rank<U: TestUnit>(&self, salt: u64, leaf: bool) -> Vec<Vec<U>> {
        let len = |r: usize| match leaf {
            true => self.world.leaf_space[r],
            false => self.world.nroots[r],
        };
        let n = self.world.nroots.len();
        (0..n)
            .map(|r| values(self.seed + salt, r, len(r)))
            .collect()
    }

    /// This rank's leaves after a bcast with `op` of `roots` onto `leaves`.
    fn bcast_reference<U: TestUnit>(&self, roots: &[Vec<U>], leaves: &[U], op: Op) -> Vec<U> {
        let mut want = leaves.to_vec();
        for &(l, q, o) in &self.world.leaves[self.rank] {
            apply(op, &mut want[l], &roots[q][o]);
        }
        want
    }

    /// This rank's roots after a reduce with `op` of every rank's `leaves` into `roots`, and
    /// the leaf updates of the same fetch-and-op: each root combines its leaves in the
    /// documented order.
    fn reduce_reference<U: TestUnit>(
        &self,
        roots: &[Vec<U>],
        leaves: &[Vec<U>],
        op: Op,
    ) -> (Vec<U>, Vec<U>) {
        let me = self.rank;
        let mut want_root = roots[me].clone();
        let mut want_upd = vec![U::zeroed(); self.world.leaf_space[me]];
        for (q, root_q) in roots.iter().enumerate() {
            for (o, &root_qo) in root_q.iter().enumerate() {
                let mut acc = root_qo;
                for (p, l) in self.world.leaves_of(q, o) {
                    if p == me {
                        want_upd[l] = acc;
                    }
                    apply(op, &mut acc, &leaves[p][l]);
                }
                if q == me {
                    want_root[o] = acc;
                }
            }
        }
        (want_root, want_upd)
    }

    fn check<U: TestUnit>(&mut self, what: &str, got: &[U], want: &[U]) {
        let same = got.len() == want.len() && got.iter().zip(want).all(|(a, b)| a.bits_eq(b));
        if !same {
            self.failures.push(format!(
                "seed {} rank {} {what}:\n  got  {got:?}\n  want {want:?}",
                self.seed, self.rank
            ));
        }
    }

    fn all_ops<U: TestUnit>(&mut self) {
        let roots: Vec<Vec<U>> = self.per_rank(0, false);
        let leaves: Vec<Vec<U>> = self.per_rank(1, true);
        let me = self.rank;
        let name = std::any::type_name::<U>();
        for op in Op::ALL {
            let defined = <U::Scalar as Scalar>::reducer(op).is_some();
            if defined
                != U::Scalar::combine(
                    op,
                    bytemuck::Zeroable::zeroed(),
                    bytemuck::Zeroable::zeroed(),
                )
                .is_some()
            {
                self.failures.push(format!(
                    "{name} {op}: defined {defined} in the library only"
                ));
                continue;
            }
            if !defined {
                let mut leaf = leaves[me].clone();
                let refused = self.sf.bcast(&roots[me], &mut leaf, op);
                if !matches!(refused, Err(SfError::UnsupportedOp { .. })) {
                    self.failures.push(format!(
                        "{name} {op}: expected UnsupportedOp, got {refused:?}"
                    ));
                }
                continue;
            }
            // bcast: every leaf combines with its one root.
            let want = self.bcast_reference(&roots, &leaves[me], op);
            let mut got = leaves[me].clone();
            self.sf.bcast(&roots[me], &mut got, op).unwrap();
            self.check(&format!("bcast {op} {name}"), &got, &want);
            let mut got = leaves[me].clone();
            self.staged.bcast(&roots[me], &mut got, op).unwrap();
            self.check(&format!("staged bcast {op} {name}"), &got, &want);
            let mut got = leaves[me].clone();
            self.staged
                .bcast_in_place(&roots[me], &mut got, op)
                .unwrap();
            self.check(&format!("in-place bcast {op} {name}"), &got, &want);

            // reduce and fetch-and-op: each root combines its leaves in the documented order.
            let (want_root, want_upd) = self.reduce_reference(&roots, &leaves, op);
            let mut got = roots[me].clone();
            self.sf.reduce(&leaves[me], &mut got, op).unwrap();
            self.check(&format!("reduce {op} {name}"), &got, &want_root);
            let mut got = roots[me].clone();
            self.staged.reduce(&leaves[me], &mut got, op).unwrap();
            self.check(&format!("staged reduce {op} {name}"), &got, &want_root);
            let mut got = roots[me].clone();
            self.staged
                .reduce_in_place(&leaves[me], &mut got, op)
                .unwrap();
            self.check(&format!("in-place reduce {op} {name}"), &got, &want_root);

            let mut got_root = roots[me].clone();
            let mut got_upd = vec![U::zeroed(); self.world.leaf_space[me]];
            self.sf
                .fetch_and_op(&mut got_root, &leaves[me], &mut got_upd, op)
                .unwrap();
            self.check(
                &format!("fetch-and-op {op} {name} root"),
                &got_root,
                &want_root,
            );
            self.check(
                &format!("fetch-and-op {op} {name} leafupdate"),
                &got_upd,
                &want_upd,
            );
        }
    }

    /// A fetch-and-op and a bcast in flight together, the fetch-and-op ended before the bcast
    /// begins on odd ranks and after it on even ones (its end sends, so the two ranks' sends
    /// start in opposite orders): each still gets its own data. On even ranks the bcast is
    /// split-phase (staged) for even seeds and `bcast_while` (in place) for odd ones.
    fn fetch_across_bcast(&mut self) {
        let me = self.rank;
        let roots: Vec<Vec<f64>> = self.per_rank(8, false);
        let leaves: Vec<Vec<f64>> = self.per_rank(9, true);
        let bcast_roots: Vec<Vec<f64>> = self.per_rank(10, false);
        let (want_root, want_upd) = self.reduce_reference(&roots, &leaves, Op::Sum);
        let want_b = self.bcast_reference(&bcast_roots, &leaves[me], Op::Replace);
        let (mut root, mut upd, mut b) = (
            roots[me].clone(),
            vec![0.0; self.world.leaf_space[me]],
            leaves[me].clone(),
        );
        let f = self
            .sf
            .fetch_and_op_begin(&mut root, &leaves[me], &mut upd, Op::Sum)
            .unwrap();
        if me % 2 == 1 {
            f.end();
            self.sf
                .bcast(&bcast_roots[me], &mut b, Op::Replace)
                .unwrap();
        } else if self.seed.is_multiple_of(2) {
            let pb = self
                .sf
                .bcast_begin(&bcast_roots[me], &mut b, Op::Replace)
                .unwrap();
            f.end();
            pb.end();
        } else {
            let ended = self
                .sf
                .bcast_while(&bcast_roots[me], &mut b, Op::Replace, || {
                    f.end();
                    "ended"
                })
                .unwrap();
            assert_eq!(ended, "ended", "bcast_while returns what its work returned");
        }
        self.check("fetch across bcast: root", &root, &want_root);
        self.check("fetch across bcast: leafupdate", &upd, &want_upd);
        self.check("fetch across bcast: bcast", &b, &want_b);
    }

    /// Rank 0 waits in a barrier between its bcast's begin and end, while the other ranks,
    /// late to begin, need its data before they reach the barrier: its messages must move
    /// while it is in another MPI call.
    fn barrier_inside(&mut self) {
        let me = self.rank;
        let roots: Vec<Vec<f64>> = self.per_rank(11, false);
        let mut got = vec![0.0; self.world.leaf_space[me]];
        let want = self.bcast_reference(&roots, &got, Op::Replace);
        let comm = self.sf.comm();
        if me == 0 {
            let p = self
                .sf
                .bcast_begin(&roots[me], &mut got, Op::Replace)
                .unwrap();
            comm.barrier();
            p.end();
        } else {
            std::thread::sleep(std::time::Duration::from_millis(20));
            self.sf.bcast(&roots[me], &mut got, Op::Replace).unwrap();
            comm.barrier();
        }
        self.check("bcast across a barrier", &got, &want);
    }

    /// One-sided: with one operation kept in flight, 63 more run, and the 64th, which would
    /// share its signal slot, is refused (the same on every rank, as every rank runs the same
    /// sequence); the kept one then ends with its data.
    fn ring_window(&mut self) {
        let roots = vec![3.0f64; self.sf.nroots()];
        let mut kept = vec![0.0f64; self.sf.leaf_space()];
        let mut want = kept.clone();
        for &(l, _, _) in &self.world.leaves[self.rank] {
            want[l] = 3.0;
        }
        let a = self.sf.bcast_begin(&roots, &mut kept, Op::Replace).unwrap();
        let mut scratch = vec![0.0f64; self.sf.leaf_space()];
        let ran = (0..63)
            .take_while(|_| self.sf.bcast(&roots, &mut scratch, Op::Replace).is_ok())
            .count();
        let refused = self.sf.bcast(&roots, &mut scratch, Op::Replace);
        a.end();
        if ran != 63 || !matches!(refused, Err(SfError::TooManyInFlight(64))) {
            self.failures
                .push(format!("rma ring window: {ran} ran, then {refused:?}"));
        }
        self.check("rma ring window: kept bcast", &kept, &want);
    }

    /// A one-sided forest refuses the 65th operation in flight (its signal rings hold 64), on
    /// every rank alike, and works on once they end (the next check runs on it).
    fn ring_limit(&mut self) {
        let roots = vec![1.0f64; self.sf.nroots()];
        let mut leaves = vec![vec![0.0f64; self.sf.leaf_space()]; 65];
        let mut pending = Vec::new();
        let mut refused = None;
        for leaf in &mut leaves {
            match self.sf.bcast_begin(&roots, leaf, Op::Replace) {
                Ok(p) => pending.push(p),
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
        }
        let begun = pending.len();
        pending.into_iter().for_each(Pending::end);
        if begun != 64 || !matches!(refused, Some(SfError::TooManyInFlight(64))) {
            self.failures
                .push(format!("rma ring limit: {begun} begun, then {refused:?}"));
        }
    }

    /// Three operations in flight at once on one forest, ended in reverse order.
    fn overlapping(&mut self) {
        let me = self.rank;
        let roots: Vec<Vec<f64>> = self.per_rank(5, false);
        let leaves: Vec<Vec<f64>> = self.per_rank(6, true);
        let root_i: Vec<Vec<i32>> = self.per_rank(7, false);

        let want_a = self.bcast_reference(&roots, &leaves[me], Op::Replace);
        let want_b = self.bcast_reference(&roots, &leaves[me], Op::Sum);
        let mut want_c = root_i[me].clone();
        for (o, want) in want_c.iter_mut().enumerate() {
            for (p, l) in self.world.leaves_of(me, o) {
                *want = (*want).max(leaves[p][l] as i32);
            }
        }
        let leaf_i: Vec<i32> = leaves[me].iter().map(|&v| v as i32).collect();
        let (mut a, mut b, mut c) = (leaves[me].clone(), leaves[me].clone(), root_i[me].clone());
        let pa = self
            .sf
            .bcast_begin(&roots[me], &mut a, Op::Replace)
            .unwrap();
        let pb = self.sf.bcast_begin(&roots[me], &mut b, Op::Sum).unwrap();
        let pc = self.sf.reduce_begin(&leaf_i, &mut c, Op::Max).unwrap();
        pc.end();
        pb.end();
        pa.end();
        self.check("overlapping bcast replace", &a, &want_a);
        self.check("overlapping bcast sum", &b, &want_b);
        self.check("overlapping reduce max", &c, &want_c);
    }
}

fn plans(sf: &StarForest) -> String {
    format!("{:?} {:?}", sf.leaf_ranks(), sf.root_ranks())
}

fn child() {
    let universe = starhalo_sf::mpi::initialize().expect("MPI init");
    let world: SimpleCommunicator = universe.world();
    let (rank, n) = (world.rank() as usize, world.size() as usize);
    let mut failures = Vec::new();
    for seed in 0..6u64 {
        let w = random_world(seed * 1000 + n as u64, n);
        let g = w.graph(rank);
        let mut seen = Vec::new();
        // Both discoveries; the second also packs on rayon's pool; the third moves its
        // messages by neighbourhood collectives, the fourth by one-sided puts and signals.
        let configs = [
            (Discovery::Allreduce, Policy::Serial, SfType::Basic),
            (Discovery::Nbx, Policy::Threaded, SfType::Basic),
            (Discovery::Allreduce, Policy::Serial, SfType::Neighbor),
            (Discovery::Nbx, Policy::Serial, SfType::Rma),
        ];
        for (discovery, policy, sf_type) in configs {
            let opts = SfOptions {
                discovery,
                policy,
                sf_type,
            };
            let sf = StarForest::new(&world, &g, opts).unwrap();
            seen.push(plans(&sf));
            let staged = Staged::new(&sf).unwrap();
            let mut case = Case {
                world: &w,
                sf: &sf,
                staged: &staged,
                seed,
                rank,
                failures: &mut failures,
            };
            case.all_ops::<f64>();
            case.all_ops::<[u8; 5]>();
            // Packing and reductions do not depend on the transport, which moves bytes: the
            // other unit types once, under the default one.
            if sf_type == SfType::Basic {
                case.all_ops::<f32>();
                case.all_ops::<i64>();
                case.all_ops::<i32>();
                case.all_ops::<u8>();
                case.all_ops::<[f64; 3]>();
            }
            case.fetch_across_bcast();
            // An rma send moves only inside its forest's calls (documented on SfType::Rma).
            if sf_type != SfType::Rma {
                case.barrier_inside();
            }
            if sf_type == SfType::Rma {
                case.ring_window();
                case.ring_limit();
            }
            case.overlapping();
        }
        if seen.iter().any(|s| *s != seen[0]) {
            failures.push(format!(
                "seed {seed}: set-ups differ:\n  {}",
                seen.join("\n  ")
            ));
        }
    }
    invalid_graphs(&world, &mut failures);
    replace_after_own_leaf(&world, &mut failures);
    // The query links and runs; an MPI cannot move CUDA memory on a machine without a driver.
    let cuda = starhalo_sf::mpi_cuda_support();
    if cuda && !common::has_gpu() {
        failures.push("MPI reports CUDA support without an NVIDIA driver".into());
    }
    for f in &failures {
        eprintln!("[rank {rank}] FAIL {f}");
    }
    drop(universe);
    std::process::exit(i32::from(!failures.is_empty()));
}

/// A replace-reduce where a root in the range that remote leaves fill contiguously also has a
/// leaf on its own rank: the remote value must win (own rank's leaves first, then the others
/// in rank order), so the remote data cannot land in place, where the own leaf, copied after
/// the receive started, would overwrite it. Rank 1's message is sent and has arrived (a
/// barrier) before rank 0 begins, which is when a wrong in-place receive is filled at once.
fn replace_after_own_leaf(world: &SimpleCommunicator, failures: &mut Vec<String>) {
    use starhalo_sf::mpi::collective::CommunicatorCollectives;
    let (rank, n) = (world.rank(), world.size());
    if n < 2 {
        return;
    }
    let at = |rank, offset| RootRef { rank, offset };
    let leaves = match rank {
        0 => vec![at(0, 1)],
        1 => vec![at(0, 0), at(0, 1), at(0, 2)],
        _ => vec![],
    };
    let nroots = if rank == 0 { 3 } else { 0 };
    for sf_type in [SfType::Basic, SfType::Neighbor] {
        let opts = SfOptions {
            sf_type,
            ..SfOptions::default()
        };
        let sf = StarForest::new(world, &Graph::new(nroots, None, leaves.clone()), opts).unwrap();
        let leaf: Vec<f64> = (0..sf.leaf_space())
            .map(|l| (10 * rank + l as i32) as f64)
            .collect();
        let mut root = vec![-1.0; nroots];
        if rank != 0 {
            sf.reduce(&leaf, &mut root, Op::Replace).unwrap();
            world.barrier();
        } else {
            world.barrier();
            sf.reduce(&leaf, &mut root, Op::Replace).unwrap();
            if root != [10.0, 11.0, 12.0] {
                failures.push(format!(
                    "{sf_type:?} replace with an own leaf inside the remote range: {root:?}"
                ));
            }
        }
    }
}

/// Each invalid graph is an error on every rank, never a hang; the finder names the fault.
fn invalid_graphs(world: &SimpleCommunicator, failures: &mut Vec<String>) {
    let (rank, n) = (world.rank() as i64, world.size() as i64);
    let last = n - 1;
    let cases: Vec<(&str, Graph)> = vec![
        (
            "rank out of range",
            Graph::new(
                1,
                None,
                if rank == last {
                    vec![RootRef { rank: n, offset: 0 }]
                } else {
                    vec![]
                },
            ),
        ),
        (
            "offset beyond the owner's roots",
            Graph::new(
                2,
                None,
                if rank == last {
                    vec![RootRef { rank: 0, offset: 2 }]
                } else {
                    vec![]
                },
            ),
        ),
        (
            "leaf given twice",
            Graph::new(
                1,
                Some(if rank == 0 { vec![1, 1] } else { vec![] }),
                if rank == 0 {
                    vec![RootRef { rank: 0, offset: 0 }; 2]
                } else {
                    vec![]
                },
            ),
        ),
    ];
    for discovery in [Discovery::Allreduce, Discovery::Nbx] {
        for (what, g) in &cases {
            let opts = SfOptions {
                discovery,
                ..SfOptions::default()
            };
            match StarForest::new(world, g, opts) {
                Ok(_) => failures.push(format!("{what}: accepted on rank {rank}")),
                Err(SfError::PeerInvalid(_)) => {}
                Err(e) => {
                    let finder_ok = match *what {
                        "rank out of range" => {
                            rank == last && matches!(e, SfError::RankOutOfRange { .. })
                        }
                        "offset beyond the owner's roots" => {
                            rank == 0
                                && matches!(
                                    e,
                                    SfError::OffsetOutOfRange {
                                        offset: 2,
                                        nroots: 2,
                                        ..
                                    }
                                )
                        }
                        _ => rank == 0 && e == SfError::DuplicateLeaf(1),
                    };
                    if !finder_ok {
                        failures.push(format!("{what}: unexpected error on rank {rank}: {e}"));
                    }
                }
            }
        }
    }
}
