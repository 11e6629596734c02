//! Seeded random star-forest graphs, known whole to every rank, for the multi-rank tests.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use starhalo_sf::{Graph, RootRef};

/// The whole graph: per rank, nroots and (leaf index, root) edges sorted by leaf index.
pub struct World {
    pub nroots: Vec<usize>,
    pub leaves: Vec<Vec<(usize, usize, usize)>>,
    pub leaf_space: Vec<usize>,
}

/// A graph on `n` ranks: some own no roots and some no leaves; some leaves are isolated.
pub fn random_world(seed: u64, n: usize) -> World {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let shape = rng.gen_range(0..3);
    let nroots: Vec<usize> = (0..n)
        .map(|_| {
            if rng.gen_bool(0.2) {
                0
            } else {
                rng.gen_range(1..7)
            }
        })
        .collect();
    random_leaves(&mut rng, shape, nroots)
}

/// A graph with the given roots per rank.
pub fn random_world_over(seed: u64, nroots: Vec<usize>) -> World {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let shape = rng.gen_range(0..3);
    random_leaves(&mut rng, shape, nroots)
}

fn random_leaves(rng: &mut ChaCha8Rng, shape: u32, nroots: Vec<usize>) -> World {
    let n = nroots.len();
    let owners: Vec<usize> = (0..n).filter(|&r| nroots[r] > 0).collect();
    let mut leaves = Vec::new();
    let mut leaf_space = Vec::new();
    for r in 0..n {
        let space = if rng.gen_bool(0.15) {
            0
        } else {
            rng.gen_range(1..12)
        };
        let mut mine = Vec::new();
        for l in 0..space {
            if owners.is_empty() || rng.gen_bool(0.15) {
                continue; // isolated leaf
            }
            let edge = match shape {
                // Blocks of contiguous roots on the next owner: contiguous plans, in-place paths.
                0 => {
                    let q = owners[(r + 1) % owners.len()];
                    (l, q, l % nroots[q])
                }
                // Irregular, with self edges and many leaves per root.
                _ => {
                    let q = owners[rng.gen_range(0..owners.len())];
                    (l, q, rng.gen_range(0..nroots[q]))
                }
            };
            mine.push(edge);
        }
        leaf_space.push(mine.last().map_or(0, |e| e.0 + 1));
        leaves.push(mine);
    }
    World {
        nroots,
        leaves,
        leaf_space,
    }
}

impl World {
    /// A world from its roots per rank and each rank's (leaf, root rank, root offset) edges.
    pub fn from_edges(nroots: Vec<usize>, mut leaves: Vec<Vec<(usize, usize, usize)>>) -> World {
        leaves.iter_mut().for_each(|e| e.sort_unstable());
        let leaf_space = leaves
            .iter()
            .map(|e| e.last().map_or(0, |e| e.0 + 1))
            .collect();
        World {
            nroots,
            leaves,
            leaf_space,
        }
    }

    pub fn graph(&self, r: usize) -> Graph {
        let edges = &self.leaves[r];
        let contiguous = edges.iter().enumerate().all(|(k, e)| e.0 == k);
        let ilocal = (!contiguous).then(|| edges.iter().map(|e| e.0).collect());
        let iremote = edges
            .iter()
            .map(|e| RootRef {
                rank: e.1 as i64,
                offset: e.2 as u64,
            })
            .collect();
        Graph::new(self.nroots[r], ilocal, iremote)
    }

    /// Leaves of root (q, o) in the forest's documented order: rank q first, then the other
    /// ranks ascending, each in ascending leaf index.
    pub fn leaves_of(&self, q: usize, o: usize) -> Vec<(usize, usize)> {
        let order = std::iter::once(q).chain((0..self.nroots.len()).filter(|&p| p != q));
        order
            .flat_map(|p| {
                self.leaves[p]
                    .iter()
                    .filter(move |e| e.1 == q && e.2 == o)
                    .map(move |e| (p, e.0))
            })
            .collect()
    }
}

/// A rank's part of a graph as (leaf, root rank, root offset) edges sorted by leaf.
pub fn edges(g: &Graph) -> Vec<(usize, usize, usize)> {
    let mut e: Vec<_> = (0..g.nleaves())
        .map(|i| {
            let r = g.iremote[i];
            (g.leaf_index(i), r.rank as usize, r.offset as usize)
        })
        .collect();
    e.sort_unstable();
    e
}
