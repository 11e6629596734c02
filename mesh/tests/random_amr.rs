//! Seeded random AMR meshes (1-D, 2-D, 3-D; periodic or not; up to 4 levels) checked against
//! brute-force geometry written here from scratch:
//!
//! - every block's neighbour records equal the contacts found by testing every pair of leaves
//!   (and their periodic images) for touching boxes: same neighbours, same elements, same
//!   levels, same periodic shifts, same sub-face indices;
//! - element ownership equals the "finest, then latest in Morton order" rule evaluated on the
//!   boxes;
//! - 2:1 balance holds after every remesh, and the remesh map relates exactly the old and new
//!   blocks that share each cell of the domain.

use starhalo_mesh::{
    find_neighbors, initial_forest, remesh, BlockFate, BlockOrigin, Element, Forest,
    LogicalLocation, RefinementFlag, RefinementRules, RemeshMap, RootGrid,
};
use std::collections::BTreeMap;

/// SplitMix64: a tiny seeded generator, so the test needs no extra crate.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64) < p * (1u64 << 53) as f64
    }
}

/// A leaf as a box in units of the finest level `fine`.
fn bbox(l: &LogicalLocation, fine: u32, ndim: usize) -> ([i64; 3], [i64; 3]) {
    let s = fine - l.level();
    let lo = l.lx().map(|x| x << s);
    let mut hi = lo;
    for d in 0..3 {
        hi[d] = if d < ndim {
            lo[d] + (1 << s)
        } else {
            lo[d] + 1
        };
    }
    (lo, hi)
}

/// (neighbour gid, element offset, level difference, periodic shift, fi)
type Contact = (usize, [i32; 3], i32, [i32; 3], [u8; 2]);

/// All contacts of every leaf, by testing every pair and every periodic image.
fn brute_force_contacts(f: &Forest) -> Vec<Vec<Contact>> {
    let grid = f.grid();
    let ndim = grid.ndim();
    let fine = f.max_level();
    let ext = grid.extent(fine);
    let mut shifts = vec![[0i32; 3]];
    for d in 0..ndim {
        if grid.periodic()[d] {
            let mut more = Vec::new();
            for s in &shifts {
                for v in [-1, 1] {
                    let mut t = *s;
                    t[d] = v;
                    more.push(t);
                }
            }
            shifts.extend(more);
        }
    }
    let boxes: Vec<_> = f.leaves().iter().map(|l| bbox(l, fine, ndim)).collect();
    let mut out = vec![Vec::new(); f.len()];
    for (a, (alo, ahi)) in boxes.iter().enumerate() {
        for (b, (blo0, bhi0)) in boxes.iter().enumerate() {
            for s in &shifts {
                if a == b && *s == [0, 0, 0] {
                    continue;
                }
                let blo: [i64; 3] = [0, 1, 2].map(|d| blo0[d] + s[d] as i64 * ext[d]);
                let bhi: [i64; 3] = [0, 1, 2].map(|d| bhi0[d] + s[d] as i64 * ext[d]);
                if !(0..ndim).all(|d| blo[d] <= ahi[d] && alo[d] <= bhi[d]) {
                    continue;
                }
                let mut o = [0i32; 3];
                for d in 0..ndim {
                    o[d] = if bhi[d] == alo[d] {
                        -1
                    } else if blo[d] == ahi[d] {
                        1
                    } else {
                        0
                    };
                }
                assert_ne!(o, [0, 0, 0], "leaves {a} and {b} overlap");
                let (la, lb) = (f.leaves()[a].level() as i32, f.leaves()[b].level() as i32);
                let dl = lb - la;
                let mut fi = [0u8; 2];
                let free: Vec<usize> = (0..ndim).filter(|&d| o[d] == 0).collect();
                for (slot, &d) in free.iter().take(2).enumerate() {
                    fi[slot] = if dl > 0 {
                        ((blo[d] - alo[d]) * 2 / (ahi[d] - alo[d])) as u8
                    } else if dl < 0 {
                        ((alo[d] - blo[d]) * 2 / (bhi[d] - blo[d])) as u8
                    } else {
                        0
                    };
                }
                out[a].push((b, o, dl, *s, fi));
            }
        }
    }
    for v in &mut out {
        v.sort();
    }
    out
}

/// Ownership by the rule, on boxes: block A owns element e unless a block touching the
/// element's region (point, open segment, open square) is finer, or as fine and later in
/// Morton order (or is A's own periodic image shifted by a lexicographically positive vector).
fn brute_force_ownership(f: &Forest, contacts: &[Vec<Contact>]) -> Vec<[bool; 27]> {
    let ndim = f.ndim();
    let fine = f.max_level();
    let ext = f.grid().extent(fine);
    (0..f.len())
        .map(|a| {
            let la = f.leaves()[a];
            let (alo, ahi) = bbox(&la, fine, ndim);
            let mut own = [true; 27];
            for e in Element::all() {
                let eo = e.offset();
                for &(b, _, _, s, _) in &contacts[a] {
                    let lb = f.leaves()[b];
                    let (blo0, bhi0) = bbox(&lb, fine, ndim);
                    let touches = (0..ndim).all(|d| {
                        let (blo, bhi) = (
                            blo0[d] + s[d] as i64 * ext[d],
                            bhi0[d] + s[d] as i64 * ext[d],
                        );
                        match eo[d] {
                            -1 => blo <= alo[d] && alo[d] <= bhi,
                            1 => blo <= ahi[d] && ahi[d] <= bhi,
                            _ => blo < ahi[d] && bhi > alo[d],
                        }
                    });
                    // A periodic image of the block itself outranks it when shifted by a
                    // lexicographically positive number of domain lengths.
                    let later = if lb == la {
                        s > [0, 0, 0]
                    } else {
                        (lb.level(), lb) > (la.level(), la)
                    };
                    if touches && later {
                        own[e.index()] = false;
                    }
                }
            }
            own
        })
        .collect()
}

/// Every point of the domain that lies on the boundary of some block has exactly one owner.
///
/// Points are taken on the lattice of half the finest cell width (so every face, edge and node
/// of every block, whatever its level, has lattice points in its relative interior) and wrapped
/// through periodic boundaries. For each block and each of its non-volume elements, the lattice
/// points in the element's relative interior are credited with one owner if the block owns
/// that element. A block touching itself through a periodic boundary contributes once per copy.
/// Independent of the neighbour records: only the ownership flags are read.
fn check_unique_owners(f: &Forest) {
    let got = find_neighbors(f, &vec![0; f.len()]).unwrap();
    let ndim = f.ndim();
    let fine = f.max_level();
    let ext = f.grid().extent(fine);
    let periodic = f.grid().periodic();
    let mut owners: BTreeMap<[i64; 3], usize> = BTreeMap::new();
    for (a, l) in f.leaves().iter().enumerate() {
        let (lo, hi) = bbox(l, fine, ndim);
        for e in Element::neighbors(ndim) {
            let eo = e.offset();
            // Lattice coordinates (doubled) of the element's relative interior, per direction.
            let axis: Vec<Vec<i64>> = (0..3)
                .map(|d| {
                    if d >= ndim {
                        vec![0]
                    } else {
                        match eo[d] {
                            -1 => vec![2 * lo[d]],
                            1 => vec![2 * hi[d]],
                            _ => (2 * lo[d] + 1..2 * hi[d]).collect(),
                        }
                    }
                })
                .collect();
            let own = got[a].ownership.owns(e) as usize;
            for &x in &axis[0] {
                for &y in &axis[1] {
                    for &z in &axis[2] {
                        let mut p = [x, y, z];
                        for d in 0..ndim {
                            if periodic[d] {
                                p[d] = p[d].rem_euclid(2 * ext[d]);
                            }
                        }
                        *owners.entry(p).or_default() += own;
                    }
                }
            }
        }
    }
    for (p, n) in &owners {
        assert_eq!(
            *n, 1,
            "lattice point {p:?} (half finest cells) has {n} owners"
        );
    }
}

fn check_neighbors(f: &Forest, rng: &mut Rng, nranks: usize) {
    check_unique_owners(f);
    let ranks: Vec<usize> = (0..f.len())
        .map(|_| rng.below(nranks as u64) as usize)
        .collect();
    let got = find_neighbors(f, &ranks).unwrap();
    let want = brute_force_contacts(f);
    let owns = brute_force_ownership(f, &want);
    for (a, b) in got.iter().enumerate() {
        assert_eq!(b.gid, a);
        assert_eq!(b.loc, f.leaves()[a]);
        let mut mine: Vec<Contact> = b
            .neighbors
            .iter()
            .map(|n| {
                assert_eq!(n.rank, ranks[n.gid]);
                assert_eq!(n.loc, f.leaves()[n.gid]);
                assert_eq!(n.neighbor_element, n.element.opposite());
                assert_eq!(n.this_owns, b.ownership.owns(n.element));
                assert_eq!(n.neighbor_owns, owns[n.gid][n.neighbor_element.index()]);
                (
                    n.gid,
                    n.element.offset(),
                    n.level_diff,
                    n.periodic_shift,
                    n.fi,
                )
            })
            .collect();
        mine.sort();
        assert_eq!(mine, want[a], "neighbours of block {a} at {}", b.loc);
        // Inactive-direction elements take the ownership of their projection; compare the
        // active ones.
        for e in Element::all().filter(|e| e.is_active(f.ndim())) {
            assert_eq!(
                b.ownership.owns(e),
                owns[a][e.index()],
                "block {a} element {e}"
            );
        }
        assert!(
            b.neighbors.iter().all(|n| n.level_diff.abs() <= 1),
            "2:1 broken at {a}"
        );
    }
}

/// Every cell of the finest grid belongs to one old and one new block, and the map relates
/// exactly those two; every relation in the map is backed by shared cells.
fn check_map(old: &Forest, new: &Forest, map: &RemeshMap) {
    assert_eq!(map.origin.len(), new.len());
    assert_eq!(map.fate.len(), old.len());
    let ndim = old.ndim();
    let fine = old.max_level().max(new.max_level());
    let ext = old.grid().extent(fine);
    let mut shared: BTreeMap<(usize, usize), u64> = BTreeMap::new();
    for k in 0..ext[2] {
        for j in 0..ext[1] {
            for i in 0..ext[0] {
                let c = LogicalLocation::new(fine, [i, j, k]);
                let o = old.covering_leaf(&c).expect("old forest covers every cell");
                let n = new.covering_leaf(&c).expect("new forest covers every cell");
                *shared.entry((o, n)).or_default() += 1;
            }
        }
    }
    let cells = |l: &LogicalLocation| 1u64 << ((fine - l.level()) as usize * ndim);
    let mut from_map = BTreeMap::new();
    for (n, origin) in map.origin.iter().enumerate() {
        let nl = new.leaves()[n];
        match origin {
            BlockOrigin::Kept { old: o } => {
                assert_eq!(old.leaves()[*o], nl);
                assert_eq!(map.fate[*o], BlockFate::Kept { new: n });
                from_map.insert((*o, n), cells(&nl));
            }
            BlockOrigin::Refined { old: o } => {
                let ol = old.leaves()[*o];
                assert!(ol.contains(&nl) && ol != nl);
                match &map.fate[*o] {
                    BlockFate::Refined { new: kids } => assert!(kids.contains(&n)),
                    f => panic!("old {o} refined into {n} but its fate is {f:?}"),
                }
                from_map.insert((*o, n), cells(&nl));
            }
            BlockOrigin::Merged { old: os } => {
                assert!(!os.is_empty());
                for o in os {
                    let ol = old.leaves()[*o];
                    assert!(nl.contains(&ol) && ol != nl);
                    assert_eq!(map.fate[*o], BlockFate::Merged { new: n });
                    from_map.insert((*o, n), cells(&ol));
                }
            }
        }
    }
    assert_eq!(
        from_map, shared,
        "the map must relate exactly the blocks that share cells"
    );
}

fn random_case(seed: u64, ndim: usize) {
    let mut rng = Rng(seed);
    let mut nrb = [1i64; 3];
    let mut periodic = [false; 3];
    for d in 0..ndim {
        nrb[d] = 1 + rng.below(if ndim == 3 { 2 } else { 3 }) as i64;
        periodic[d] = rng.chance(0.5);
    }
    let grid = RootGrid::new(ndim, nrb, periodic).unwrap();
    let rules = RefinementRules::adaptive(3);
    let cap = [0, 60, 150, 260][ndim];
    let mut f = initial_forest(grid, &rules).unwrap();
    check_neighbors(&f, &mut rng, 3);
    for _step in 0..6 {
        let p_ref = if f.len() > cap { 0.0 } else { 0.25 };
        let flags: Vec<RefinementFlag> = (0..f.len())
            .map(|_| {
                if rng.chance(p_ref) {
                    RefinementFlag::Refine
                } else if rng.chance(0.6) {
                    RefinementFlag::Derefine
                } else {
                    RefinementFlag::Same
                }
            })
            .collect();
        let r = remesh(&f, &flags, &rules).unwrap();
        assert!(r.forest.max_level() <= 3);
        // Blocks flagged to refine (below the top level) are refined.
        for (o, fl) in flags.iter().enumerate() {
            if *fl == RefinementFlag::Refine && f.leaves()[o].level() < 3 {
                assert!(matches!(r.map.fate[o], BlockFate::Refined { .. }));
            }
        }
        check_map(&f, &r.forest, &r.map);
        check_neighbors(&r.forest, &mut rng, 3);
        f = r.forest;
    }
}

#[test]
fn random_1d_meshes_match_brute_force() {
    for seed in 0..12 {
        random_case(1000 + seed, 1);
    }
}

#[test]
fn random_2d_meshes_match_brute_force() {
    for seed in 0..8 {
        random_case(2000 + seed, 2);
    }
}

#[test]
fn random_3d_meshes_match_brute_force() {
    for seed in 0..4 {
        random_case(3000 + seed, 3);
    }
}

#[test]
fn tiny_periodic_grids_give_self_and_multiple_contacts() {
    // One periodic block in 2-D: itself through all 8 elements.
    let grid = RootGrid::new(2, [1, 1, 1], [true, true, false]).unwrap();
    let f = Forest::uniform(grid, 0);
    let nb = find_neighbors(&f, &[0]).unwrap();
    assert_eq!(nb[0].neighbors.len(), 8);
    assert!(nb[0].neighbors.iter().all(|n| n.gid == 0));
    // It owns one copy of each physical element: one x face, one y face, one of the four
    // corners (all the same node).
    let owned: Vec<_> = Element::neighbors(2)
        .filter(|e| nb[0].ownership.owns(*e))
        .map(|e| e.offset())
        .collect();
    assert_eq!(owned, vec![[-1, -1, 0], [0, -1, 0], [-1, 0, 0]]);
    check_unique_owners(&f);
    // Refined once: each child sees each of its 3 siblings through several elements.
    let f = Forest::uniform(grid, 1);
    let mut rng = Rng(7);
    check_neighbors(&f, &mut rng, 2);
    let nb = find_neighbors(&f, &[0, 0, 0, 0]).unwrap();
    let count = |g| nb[0].neighbors.iter().filter(|n| n.gid == g).count();
    // Two x faces to the x sibling, two y faces to the y sibling, four corners to the diagonal.
    assert_eq!([count(0), count(1), count(2), count(3)], [0, 2, 2, 4]);
}

/// Random refine/derefine sequences through [`Mesh`]: balance after every remesh, partitions
/// contiguous in Morton order and within one block's cost of ideal, move plans consistent with
/// the partitions, and every multigrid level balanced and linked to the level below.
#[test]
fn mesh_sequences_keep_balance_and_balanced_partitions() {
    use starhalo_mesh::{is_balanced, Mesh, MeshConfig, RefinementKind};
    let mut rng = Rng(99);
    for case in 0..6 {
        let ndim = 1 + case % 3;
        let mut nx = [1usize; 3];
        let mut bnx = [1usize; 3];
        for d in 0..ndim {
            bnx[d] = 4;
            nx[d] = 4 * (1 + rng.below(2) as usize);
        }
        let mut c = MeshConfig::new(nx, bnx);
        c.refinement = RefinementKind::Adaptive;
        c.numlevel = 4;
        c.derefine_count = rng.below(3) as u32;
        let nranks = 1 + rng.below(5) as usize;
        let mut mesh = Mesh::new(c, nranks).unwrap();
        for _ in 0..5 {
            let n = mesh.forest().len();
            let p_ref = if n > [0, 40, 100, 200][ndim] {
                0.0
            } else {
                0.2
            };
            let flags: Vec<RefinementFlag> = (0..n)
                .map(|_| {
                    if rng.chance(p_ref) {
                        RefinementFlag::Refine
                    } else if rng.chance(0.5) {
                        RefinementFlag::Derefine
                    } else {
                        RefinementFlag::Same
                    }
                })
                .collect();
            let costs: Vec<f64> = (0..n).map(|_| 0.5 + rng.below(8) as f64).collect();
            let old_part = mesh.partition().clone();
            let old_forest = mesh.forest().clone();
            let out = mesh.remesh(&flags, Some(&costs)).unwrap();
            let f = mesh.forest();
            assert!(is_balanced(f));
            check_map(&old_forest, f, &out.map);
            // Partition: contiguous, in Morton order, balanced within one block's cost.
            let p = mesh.partition();
            assert_eq!(p.nblocks(), f.len());
            assert!(f.leaves().windows(2).all(|w| w[0] < w[1]));
            let ranks = p.ranks();
            assert!(ranks.windows(2).all(|w| w[0] <= w[1]));
            let ideal = out.costs.iter().sum::<f64>() / nranks as f64;
            let cmax = out.costs.iter().cloned().fold(0.0, f64::max);
            for load in p.loads(&out.costs) {
                assert!((load - ideal).abs() <= cmax + 1e-9);
            }
            // Moves: one per (old, new) pair of the map, ranks from the two partitions.
            for m in &out.moves {
                assert_eq!(Some(m.from_rank), old_part.rank_of(m.old_gid));
                assert_eq!(Some(m.to_rank), p.rank_of(m.new_gid));
            }
            let pairs: usize = out
                .map
                .origin
                .iter()
                .map(|o| match o {
                    BlockOrigin::Merged { old } => old.len(),
                    _ => 1,
                })
                .sum();
            assert_eq!(out.moves.len(), pairs);
            // Neighbour ranks come from the partition.
            for b in mesh.neighbors().unwrap().iter() {
                assert_eq!(b.rank, ranks[b.gid]);
            }
            // Multigrid levels: each tiles the domain, is balanced, links to its coarser level.
            let mg = mesh.multigrid().unwrap();
            let lv = mg.levels();
            assert_eq!(lv[0].forest.leaves(), f.leaves());
            for (i, l) in lv.iter().enumerate() {
                assert!(is_balanced(&l.forest));
                if let Some(next) = lv.get(i + 1) {
                    assert!(l.forest.len() >= next.forest.len());
                    for (g, loc) in l.forest.leaves().iter().enumerate() {
                        let c = l.coarser[g].expect("linked");
                        assert!(next.forest.leaves()[c].contains(loc));
                    }
                }
            }
            assert_eq!(mg.coarsest().map(|l| l.level), Some(-1));
        }
    }
}
