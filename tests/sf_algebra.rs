//! The graph algebra (degree, multi-SF with gather and scatter, inverse, composition, embedding)
//! on seeded random graphs on 1, 2, 3, 4 and 8 ranks, under every implementation: each rank
//! checks its part of every new forest edge for edge against a reference computed here from
//! the whole graph, and that bad requests fail on every rank.

mod common;

use common::sf_world::{edges, random_world, random_world_over, World};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use starhalo_sf::mpi::topology::{Communicator, SimpleCommunicator};
use starhalo_sf::{Op, SfError, SfOptions, SfType, StarForest};
use std::collections::HashSet;
use std::fmt::Debug;

fn main() {
    if std::env::var_os(common::CHILD_ENV).is_some() {
        child();
    } else {
        eprintln!("sf_algebra: forests from forests on seeded random graphs");
        common::relaunch_self(&[1, 2, 3, 4, 8], 300);
    }
}

struct Check {
    seed: u64,
    rank: usize,
    failures: Vec<String>,
}

impl Check {
    fn eq<T: PartialEq + Debug>(&mut self, what: &str, got: T, want: T) {
        if got != want {
            self.failures.push(format!(
                "seed {} rank {} {what}:\n  got  {got:?}\n  want {want:?}",
                self.seed, self.rank
            ));
        }
    }
}

/// A value naming leaf `l` of rank `p`.
fn tag(p: usize, l: usize) -> u64 {
    (p * 1000 + l + 1) as u64
}

/// The first leaf of every root that has one, by the owning rank of that leaf.
fn first_leaves(w: &World) -> HashSet<(usize, usize)> {
    (0..w.nroots.len())
        .flat_map(|q| (0..w.nroots[q]).map(move |o| (q, o)))
        .filter_map(|(q, o)| w.leaves_of(q, o).first().copied())
        .collect()
}

/// A forest over the leaf spaces of `a` (plus two slots) in which every root has at most one
/// leaf: the shape `compose_inverse` needs of its second forest.
fn injective_over(seed: u64, a: &World) -> World {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let n = a.nroots.len();
    let nroots: Vec<usize> = (0..n).map(|_| rng.gen_range(0..6)).collect();
    let mut used = HashSet::new();
    let mut leaves = vec![Vec::new(); n];
    for (q, &nq) in nroots.iter().enumerate() {
        for o in 0..nq {
            let r = rng.gen_range(0..n);
            let l = rng.gen_range(0..a.leaf_space[r] + 2);
            if rng.gen_bool(0.8) && used.insert((r, l)) {
                leaves[r].push((l, q, o));
            }
        }
    }
    World::from_edges(nroots, leaves)
}

/// Rank `r`'s edge of `w` at leaf `l`.
fn edge_at(w: &World, r: usize, l: usize) -> Option<(usize, usize, usize)> {
    w.leaves[r].iter().find(|e| e.0 == l).copied()
}

fn child() {
    let universe = starhalo_sf::mpi::initialize().expect("MPI init");
    let world: SimpleCommunicator = universe.world();
    let (rank, n) = (world.rank() as usize, world.size() as usize);
    let types = [SfType::Basic, SfType::Neighbor, SfType::Rma];
    let mut t = Check {
        seed: 0,
        rank,
        failures: Vec::new(),
    };
    for seed in 0..6u64 {
        t.seed = seed;
        let opts = SfOptions {
            sf_type: types[seed as usize % types.len()],
            ..SfOptions::default()
        };
        let w = random_world(seed * 100 + n as u64, n);
        let sf = StarForest::new(&world, &w.graph(rank), opts).unwrap();
        let mine = &w.leaves[rank];

        // Degree, and the multi-SF: multi-roots in reduction order, scatter undoing gather.
        let degree: Vec<usize> = (0..w.nroots[rank])
            .map(|o| w.leaves_of(rank, o).len())
            .collect();
        t.eq("degree", sf.degree().unwrap(), degree.clone());
        let offsets: Vec<usize> = std::iter::once(0)
            .chain(degree.iter().scan(0, |acc, d| {
                *acc += d;
                Some(*acc)
            }))
            .collect();
        let multi = sf.multi().unwrap();
        t.eq("multi offsets", multi.offsets(), &offsets[..]);
        t.eq("multi degree", multi.degree(), degree);
        let leaf_vals: Vec<u64> = (0..w.leaf_space[rank]).map(|l| tag(rank, l)).collect();
        let want: Vec<u64> = (0..w.nroots[rank])
            .flat_map(|o| w.leaves_of(rank, o))
            .map(|(p, l)| tag(p, l))
            .collect();
        let mut got = vec![0u64; want.len()];
        sf.gather(&leaf_vals, &mut got).unwrap();
        t.eq("gather", &got, &want);
        let mut back = vec![0u64; w.leaf_space[rank]];
        sf.scatter(&want, &mut back).unwrap();
        let mut want_back = vec![0u64; w.leaf_space[rank]];
        mine.iter().for_each(|e| want_back[e.0] = tag(rank, e.0));
        t.eq("scatter", back, want_back);

        // Leaf embedding down to one leaf per root, and the inverse of that.
        let firsts = first_leaves(&w);
        let sel: Vec<usize> = mine
            .iter()
            .map(|e| e.0)
            .filter(|&l| firsts.contains(&(rank, l)))
            .collect();
        let one = sf.embed_leaves(&sel).unwrap();
        let want: Vec<_> = mine
            .iter()
            .copied()
            .filter(|e| firsts.contains(&(rank, e.0)))
            .collect();
        t.eq("embed_leaves", edges(one.graph()), want);
        let inv = one.invert().unwrap();
        t.eq("invert roots", inv.nroots(), one.leaf_space());
        let want: Vec<_> = (0..w.nroots[rank])
            .filter_map(|o| w.leaves_of(rank, o).first().map(|&(p, l)| (o, p, l)))
            .collect();
        t.eq("invert", edges(inv.graph()), want);
        // The whole forest has an inverse only where no root has two leaves.
        let crowded = |q: usize| (0..w.nroots[q]).position(|o| w.leaves_of(q, o).len() > 1);
        let want = match (crowded(rank), (0..n).find(|&q| crowded(q).is_some())) {
            (Some(root), _) => Err(SfError::NotInvertible {
                root,
                degree: w.leaves_of(rank, root).len(),
            }),
            (None, Some(q)) => Err(SfError::PeerInvalid(q as i32)),
            (None, None) => Ok(()),
        };
        t.eq("invert refused", sf.invert().map(|_| ()), want);

        // Root embedding: the even roots (by seed).
        let keep = |o: usize| (o + seed as usize).is_multiple_of(2);
        let sel: Vec<usize> = (0..w.nroots[rank]).filter(|&o| keep(o)).collect();
        let want: Vec<_> = mine.iter().copied().filter(|e| keep(e.2)).collect();
        t.eq(
            "embed_roots",
            edges(sf.embed_roots(&sel).unwrap().graph()),
            want,
        );
        // An index out of range on the last rank fails there and on every other rank.
        let bad = if rank == n - 1 {
            vec![w.nroots[rank]]
        } else {
            vec![]
        };
        let want = match rank == n - 1 {
            true => SfError::IndexOutOfRange {
                what: "root",
                index: w.nroots[rank],
                len: w.nroots[rank],
            },
            false => SfError::PeerInvalid(n as i32 - 1),
        };
        t.eq(
            "embed_roots refused",
            sf.embed_roots(&bad).err(),
            Some(want),
        );

        // Composition with a forest whose roots are this one's leaf space.
        let wb = random_world_over(seed * 100 + n as u64 + 7, w.leaf_space.clone());
        let b = StarForest::new(&world, &wb.graph(rank), opts).unwrap();
        let c = sf.compose(&b).unwrap();
        let want: Vec<_> = wb.leaves[rank]
            .iter()
            .filter_map(|&(l, q, o)| edge_at(&w, q, o).map(|e| (l, e.1, e.2)))
            .collect();
        t.eq("compose", edges(c.graph()), want);
        t.eq("compose roots", c.nroots(), w.nroots[rank]);
        // A bcast through the composite is a bcast through each, where the first reaches.
        let roots: Vec<u64> = (0..w.nroots[rank]).map(|o| tag(rank, o) * 7).collect();
        let mut mid = vec![0u64; sf.leaf_space().max(b.nroots())];
        sf.bcast(&roots, &mut mid[..sf.leaf_space()], Op::Replace)
            .unwrap();
        let mut two = vec![0u64; b.leaf_space()];
        b.bcast(&mid[..b.nroots()], &mut two, Op::Replace).unwrap();
        let mut one = vec![0u64; b.leaf_space()];
        c.bcast(&roots, &mut one, Op::Replace).unwrap();
        t.eq("compose bcast", one, two);

        // Composition with the inverse of a forest sharing this one's leaf space.
        let wi = injective_over(seed * 100 + n as u64 + 11, &w);
        let bi = StarForest::new(&world, &wi.graph(rank), opts).unwrap();
        let ci = sf.compose_inverse(&bi).unwrap();
        let want: Vec<_> = (0..n)
            .flat_map(|r| wi.leaves[r].iter().map(move |&(l, q, o)| (r, l, q, o)))
            .filter(|&(_, _, q, _)| q == rank)
            .filter_map(|(r, l, _, o)| edge_at(&w, r, l).map(|e| (o, e.1, e.2)))
            .collect::<Vec<_>>();
        let mut want = want;
        want.sort_unstable();
        t.eq("compose_inverse", edges(ci.graph()), want);
        t.eq("compose_inverse roots", ci.nroots(), w.nroots[rank]);
    }
    if !t.failures.is_empty() {
        panic!("{}", t.failures.join("\n"));
    }
    if rank == 0 {
        eprintln!("sf_algebra child on {n} ranks: all checks passed");
    }
}
