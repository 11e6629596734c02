//! Graph algebra: forests made from forests (degree, multi-SF, inverse, composition,
//! embedding), and gather/scatter through the multi-SF.
//!
//! Each new forest is set up with [`StarForest::new`] on the old one's communicator and options
//! from a graph computed by one bcast or reduce over existing forests, so every function here
//! is collective over the forest's communicator.

use crate::discovery;
use crate::error::SfError;
use crate::forest::{Pending, StarForest};
use crate::graph::{Graph, RootRef};
use crate::unit::{Op, Unit};
use mpi::topology::Communicator;

/// Marks a leaf-space slot that holds no leaf.
const HOLE: [i64; 2] = [-1, -1];

/// A star forest with one root per edge: root `r` of the original forest owns the multi-roots
/// `offsets[r]..offsets[r + 1]`, one for each of its leaves, so that a gather keeps every leaf's
/// value. A root's multi-roots are ordered as reductions visit its leaves: its own rank's
/// leaves first, then the other ranks' in ascending rank order, each rank's in ascending leaf
/// index (PETSc's rank order puts the own rank among the others).
pub struct MultiSf {
    forest: StarForest,
    offsets: Vec<usize>,
}

impl MultiSf {
    /// The forest from the original leaves to the multi-roots.
    pub fn forest(&self) -> &StarForest {
        &self.forest
    }

    /// Where each original root's multi-roots start (`nroots + 1` entries).
    pub fn offsets(&self) -> &[usize] {
        &self.offsets
    }

    /// Number of leaves of each original root on this rank.
    pub fn degree(&self) -> Vec<usize> {
        self.offsets.windows(2).map(|w| w[1] - w[0]).collect()
    }
}

impl StarForest {
    /// The number of leaves of each root on this rank (`PetscSFComputeDegree`).
    pub fn degree(&self) -> Result<Vec<usize>, SfError> {
        let mut ones = vec![0i64; self.leaf_space()];
        for i in 0..self.nleaves() {
            ones[self.graph().leaf_index(i)] = 1;
        }
        let mut degree = vec![0i64; self.nroots()];
        self.reduce(&ones, &mut degree, Op::Sum)?;
        Ok(degree.into_iter().map(|d| d as usize).collect())
    }

    /// The multi-SF, set up on first use and kept.
    pub fn multi(&self) -> Result<&MultiSf, SfError> {
        if let Some(m) = self.multi_cell().get() {
            return Ok(m);
        }
        let multi = self.new_multi()?;
        Ok(self.multi_cell().get_or_init(|| Box::new(multi)))
    }

    fn new_multi(&self) -> Result<MultiSf, SfError> {
        let degree = self.degree()?;
        let mut offsets = Vec::with_capacity(degree.len() + 1);
        offsets.push(0);
        for d in &degree {
            offsets.push(offsets.last().copied().unwrap_or(0) + d);
        }
        // Each leaf takes the next free multi-root of its root, in the order reductions use.
        let mut next: Vec<i64> = offsets[..degree.len()].iter().map(|&o| o as i64).collect();
        let ones = vec![1i64; self.leaf_space()];
        let mut slot = vec![0i64; self.leaf_space()];
        self.fetch_and_op(&mut next, &ones, &mut slot, Op::Sum)?;
        let g = self.graph();
        let iremote = (0..g.nleaves())
            .map(|i| RootRef {
                rank: g.iremote[i].rank,
                offset: slot[g.leaf_index(i)] as u64,
            })
            .collect();
        let graph = Graph::new(offsets[degree.len()], g.ilocal.clone(), iremote);
        let forest = StarForest::new(self.comm(), &graph, self.options())?;
        Ok(MultiSf { forest, offsets })
    }

    /// Starts copying every leaf's value to its own multi-root (`PetscSFGatherBegin`);
    /// `multi_root` is laid out as [`MultiSf::offsets`] says.
    pub fn gather_begin<'a, U: Unit>(
        &'a self,
        leaf: &'a [U],
        multi_root: &'a mut [U],
    ) -> Result<Pending<'a, U>, SfError> {
        self.multi()?
            .forest
            .reduce_begin(leaf, multi_root, Op::Replace)
    }

    /// Starts copying each multi-root's value to its leaf (`PetscSFScatterBegin`), the
    /// reverse of [`gather_begin`](Self::gather_begin).
    pub fn scatter_begin<'a, U: Unit>(
        &'a self,
        multi_root: &'a [U],
        leaf: &'a mut [U],
    ) -> Result<Pending<'a, U>, SfError> {
        self.multi()?
            .forest
            .bcast_begin(multi_root, leaf, Op::Replace)
    }

    /// [`gather_begin`](Self::gather_begin) and its end.
    pub fn gather<U: Unit>(&self, leaf: &[U], multi_root: &mut [U]) -> Result<(), SfError> {
        self.multi()?.forest.reduce(leaf, multi_root, Op::Replace)
    }

    /// [`scatter_begin`](Self::scatter_begin) and its end.
    pub fn scatter<U: Unit>(&self, multi_root: &[U], leaf: &mut [U]) -> Result<(), SfError> {
        self.multi()?.forest.bcast(multi_root, leaf, Op::Replace)
    }

    /// The forest with every edge reversed (`PetscSFCreateInverseSF`): its roots are this
    /// forest's leaf space, its leaves this forest's roots that have a leaf. Every root must have
    /// at most one leaf, or every rank gets an error.
    pub fn invert(&self) -> Result<StarForest, SfError> {
        self.check_invertible()?;
        let mut refs = vec![HOLE; self.nroots()];
        self.reduce(&self.leaf_refs(), &mut refs, Op::Replace)?;
        self.forest_from(self.leaf_space(), refs)
    }

    /// The forest from this forest's roots to `b`'s leaves (`PetscSFCompose`): `b`'s roots
    /// index this forest's leaf space, and a leaf of `b` whose root is a leaf here takes that
    /// leaf's root. Leaves of `b` on a slot with no leaf here are dropped.
    pub fn compose(&self, b: &StarForest) -> Result<StarForest, SfError> {
        let refs = self.leaf_refs_here(b.nroots());
        let mut got = vec![HOLE; b.leaf_space()];
        b.bcast(&refs, &mut got, Op::Replace)?;
        let (ilocal, iremote) = kept(b.graph(), &got);
        self.forest_with(Graph::new(self.nroots(), Some(ilocal), iremote))
    }

    /// The forest from this forest's roots to `b`'s roots (`PetscSFComposeInverse`): the two
    /// share a leaf space, and a root of `b` takes the root here of the leaf it has in `b`.
    /// Each root of `b` must have at most one leaf, or every rank gets an error; roots of `b`
    /// whose leaf is no leaf here are not leaves of the result.
    pub fn compose_inverse(&self, b: &StarForest) -> Result<StarForest, SfError> {
        b.check_invertible()?;
        let refs = self.leaf_refs_here(b.leaf_space());
        let mut got = vec![HOLE; b.nroots()];
        b.reduce(&refs, &mut got, Op::Replace)?;
        self.forest_from(self.nroots(), got)
    }

    /// Every rank's error unless every root has at most one leaf.
    fn check_invertible(&self) -> Result<(), SfError> {
        let degree = self.degree()?;
        let many = degree.iter().position(|&d| d > 1);
        let check = many.map_or(Ok(()), |root| {
            Err(SfError::NotInvertible {
                root,
                degree: degree[root],
            })
        });
        discovery::agree(self.comm(), check)
    }

    /// The forest keeping only the edges whose roots are `roots` (indices on this rank;
    /// `PetscSFCreateEmbeddedRootSF`); the leaves keep their indices.
    pub fn embed_roots(&self, roots: &[usize]) -> Result<StarForest, SfError> {
        let check = in_range("root", roots, self.nroots());
        discovery::agree(self.comm(), check)?;
        let mut keep = vec![0u8; self.nroots()];
        roots.iter().for_each(|&r| keep[r] = 1);
        let mut leaf_keep = vec![0u8; self.leaf_space()];
        self.bcast(&keep, &mut leaf_keep, Op::Replace)?;
        self.forest_keeping(|leaf| leaf_keep[leaf] == 1)
    }

    /// The forest keeping only the leaves `leaves` (indices in this rank's leaf space;
    /// `PetscSFCreateEmbeddedLeafSF`); holes among them are ignored.
    pub fn embed_leaves(&self, leaves: &[usize]) -> Result<StarForest, SfError> {
        let check = in_range("leaf", leaves, self.leaf_space());
        discovery::agree(self.comm(), check)?;
        let mut keep = vec![false; self.leaf_space()];
        leaves.iter().for_each(|&l| keep[l] = true);
        self.forest_keeping(|leaf| keep[leaf])
    }

    /// `[rank, index]` of every leaf of this forest at its leaf index, holes elsewhere.
    fn leaf_refs(&self) -> Vec<[i64; 2]> {
        let g = self.graph();
        let rank = i64::from(self.comm().rank());
        let mut refs = vec![HOLE; self.leaf_space()];
        for i in 0..g.nleaves() {
            let l = g.leaf_index(i);
            refs[l] = [rank, l as i64];
        }
        refs
    }

    /// The root of every leaf of this forest at its leaf index, holes elsewhere, over `len`
    /// slots.
    fn leaf_refs_here(&self, len: usize) -> Vec<[i64; 2]> {
        let g = self.graph();
        let mut refs = vec![HOLE; len.max(self.leaf_space())];
        for (i, r) in g.iremote.iter().enumerate() {
            refs[g.leaf_index(i)] = [r.rank, r.offset as i64];
        }
        refs.truncate(len);
        refs
    }

    /// A forest with `nroots` roots whose leaves are the non-hole slots of `refs`.
    fn forest_from(&self, nroots: usize, refs: Vec<[i64; 2]>) -> Result<StarForest, SfError> {
        let (ilocal, iremote): (Vec<usize>, Vec<RootRef>) = refs
            .iter()
            .enumerate()
            .filter(|(_, r)| **r != HOLE)
            .map(|(l, r)| (l, root_ref(*r)))
            .unzip();
        self.forest_with(Graph::new(nroots, Some(ilocal), iremote))
    }

    fn forest_keeping(&self, keep: impl Fn(usize) -> bool) -> Result<StarForest, SfError> {
        let g = self.graph();
        let (ilocal, iremote) = (0..g.nleaves())
            .filter(|&i| keep(g.leaf_index(i)))
            .map(|i| (g.leaf_index(i), g.iremote[i]))
            .unzip();
        self.forest_with(Graph::new(self.nroots(), Some(ilocal), iremote))
    }

    fn forest_with(&self, graph: Graph) -> Result<StarForest, SfError> {
        StarForest::new(self.comm(), &graph, self.options())
    }
}

/// The leaves of `g` whose slot in `got` is no hole, each with the root found there.
fn kept(g: &Graph, got: &[[i64; 2]]) -> (Vec<usize>, Vec<RootRef>) {
    (0..g.nleaves())
        .map(|i| g.leaf_index(i))
        .filter(|&l| got[l] != HOLE)
        .map(|l| (l, root_ref(got[l])))
        .unzip()
}

fn root_ref([rank, offset]: [i64; 2]) -> RootRef {
    RootRef {
        rank,
        offset: offset as u64,
    }
}

fn in_range(what: &'static str, idx: &[usize], len: usize) -> Result<(), SfError> {
    match idx.iter().find(|&&i| i >= len) {
        Some(&index) => Err(SfError::IndexOutOfRange { what, index, len }),
        None => Ok(()),
    }
}
