//! Field storage of one rank's blocks, as the exchange reads and writes it.
//!
//! Each block is one contiguous segment ([`BlockLayout`]): the ghost-inclusive array of every
//! variable slot (a variable with `ncomp` components has `ncomp` slots), then the coarse
//! buffers of the same slots on a multilevel mesh. Sparse variables carry an allocation flag
//! per block; an unallocated variable holds its default value everywhere, which is what
//! readers of an unallocated variable see.

use std::ops::Range;

use starhalo_mesh::field::{Centering, Fields, IndexShape};
use starhalo_mesh::Mesh;

use crate::bnd_info::{BlockLayout, FieldLayout};
use crate::error::BoundaryError;

/// One variable as the storage knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct VarSlots {
    /// Its name.
    pub name: String,
    /// Its slots.
    pub slots: Range<usize>,
    /// Value of an unallocated block.
    pub default: f64,
    /// Sparse allocation threshold, if sparse.
    pub threshold: Option<f64>,
    /// Whether ghosts are exchanged.
    pub fill_ghost: bool,
}

/// The field values of one rank's blocks.
#[derive(Debug, Clone)]
pub struct BlockData {
    gids: Vec<usize>,
    shape: IndexShape,
    coarse_shape: Option<IndexShape>,
    layout: BlockLayout,
    vars: Vec<VarSlots>,
    slot_default: Vec<f64>,
    data: Vec<f64>,
    allocated: Vec<bool>,
}

impl BlockData {
    /// Storage for `rank`'s blocks of `mesh` with every variable of `fields` allocated and
    /// zero (sparse variables: unallocated, at their default).
    pub fn new(mesh: &Mesh, fields: &Fields, rank: usize) -> Result<Self, BoundaryError> {
        let gids = mesh.partition().blocks_of(rank).collect();
        Self::for_blocks(fields, gids, mesh.index_shape()?, mesh.coarse_shape()?)
    }

    /// Storage for the blocks `gids` (ascending) of one shape, with a coarse buffer of
    /// `coarse_shape` per block where the blocks have neighbours on other levels; every
    /// variable of `fields` allocated and zero (sparse variables: unallocated, at their
    /// default). Multigrid levels are stored this way.
    pub fn for_blocks(
        fields: &Fields,
        gids: Vec<usize>,
        shape: IndexShape,
        coarse_shape: Option<IndexShape>,
    ) -> Result<Self, BoundaryError> {
        if let Some(w) = gids.windows(2).find(|w| w[0] >= w[1]) {
            return Err(BoundaryError::Geometry(format!(
                "block gids must ascend: {} follows {}",
                w[1], w[0]
            )));
        }
        let mut vars = Vec::new();
        let mut nslot = 0;
        for v in fields.iter() {
            if v.metadata.centering() != Centering::Cell {
                return Err(BoundaryError::Geometry(format!(
                    "variable `{}`: the exchange stores cell-centred variables only",
                    v.name
                )));
            }
            let n = v.metadata.ncomp();
            let sparse = v.metadata.sparse_thresholds();
            vars.push(VarSlots {
                name: v.name.clone(),
                slots: nslot..nslot + n,
                default: v.metadata.default_value(),
                threshold: sparse.map(|t| t.allocation),
                fill_ghost: v.metadata.is_fill_ghost(),
            });
            nslot += n;
        }
        let layout = BlockLayout {
            fine: FieldLayout::of_shape(&shape, nslot),
            coarse: coarse_shape.map(|c| FieldLayout::of_shape(&c, nslot)),
        };
        let mut slot_default = vec![0.0; nslot];
        for v in &vars {
            slot_default[v.slots.clone()].fill(v.default);
        }
        Self::zeroed(Self {
            data: Vec::new(),
            allocated: Vec::new(),
            gids,
            shape,
            coarse_shape,
            layout,
            vars,
            slot_default,
        })
    }

    /// A copy, or [`BoundaryError::OutOfMemory`] (not an allocation abort) where its values
    /// do not fit in memory.
    pub fn try_clone(&self) -> Result<Self, BoundaryError> {
        let mut data = Vec::new();
        starhalo_exec::alloc_count::try_reserve_exact(&mut data, self.data.len()).map_err(
            |_| BoundaryError::OutOfMemory {
                what: format!("a copy of the fields of {} blocks", self.gids.len()),
                bytes: self.data.len() as u128 * 8,
            },
        )?;
        data.extend_from_slice(&self.data);
        Ok(Self {
            gids: self.gids.clone(),
            shape: self.shape,
            coarse_shape: self.coarse_shape,
            layout: self.layout,
            vars: self.vars.clone(),
            slot_default: self.slot_default.clone(),
            data,
            allocated: self.allocated.clone(),
        })
    }

    /// Makes this a copy of `src`, reusing this storage where it is large enough.
    pub fn copy_from(&mut self, src: &Self) {
        self.gids.clone_from(&src.gids);
        self.shape.clone_from(&src.shape);
        self.coarse_shape.clone_from(&src.coarse_shape);
        self.layout.clone_from(&src.layout);
        self.vars.clone_from(&src.vars);
        self.slot_default.clone_from(&src.slot_default);
        self.data.clone_from(&src.data);
        self.allocated.clone_from(&src.allocated);
    }

    /// `s` with storage for its blocks: dense variables zero, sparse ones unallocated. Storage
    /// too large for this process is an error, not an allocation abort.
    fn zeroed(mut s: Self) -> Result<Self, BoundaryError> {
        let len = s.gids.len() as u128 * s.layout.block_len() as u128;
        let too_large = || BoundaryError::OutOfMemory {
            what: format!("field storage of {} blocks", s.gids.len()),
            bytes: len * 8,
        };
        let len = usize::try_from(len).map_err(|_| too_large())?;
        starhalo_exec::alloc_count::try_reserve_exact(&mut s.data, len).map_err(|_| too_large())?;
        s.data.resize(len, 0.0);
        s.allocated = vec![true; s.gids.len() * s.vars.len()];
        for b in 0..s.gids.len() {
            for v in 0..s.vars.len() {
                if s.vars[v].threshold.is_some() {
                    s.set_allocated(b, v, false);
                }
            }
        }
        Ok(s)
    }

    /// Storage with the same variables for `rank`'s blocks of `mesh` (a remeshed mesh whose
    /// blocks have the same shape): dense variables zero, sparse ones unallocated.
    pub fn for_blocks_of(&self, mesh: &Mesh, rank: usize) -> Result<Self, BoundaryError> {
        let shape = mesh.index_shape()?;
        if shape != self.shape {
            return Err(BoundaryError::Geometry(format!(
                "blocks of {:?} cells, {} ghosts: the storage holds {:?}, {}",
                shape.nx(),
                shape.nghost(),
                self.shape.nx(),
                self.shape.nghost()
            )));
        }
        if mesh.coarse_shape()? != self.coarse_shape {
            return Err(BoundaryError::Geometry(
                "the remeshed mesh differs in having coarse buffers".into(),
            ));
        }
        Self::zeroed(Self {
            data: Vec::new(),
            allocated: Vec::new(),
            gids: mesh.partition().blocks_of(rank).collect(),
            shape,
            coarse_shape: self.coarse_shape,
            layout: self.layout,
            vars: self.vars.clone(),
            slot_default: self.slot_default.clone(),
        })
    }

    /// Global ids of the blocks, ascending; local block `b` is `gids()[b]`.
    pub fn gids(&self) -> &[usize] {
        &self.gids
    }

    /// Local index of block `gid`.
    pub fn local(&self, gid: usize) -> Option<usize> {
        self.gids.binary_search(&gid).ok()
    }

    /// Index ranges of a block.
    pub fn shape(&self) -> &IndexShape {
        &self.shape
    }

    /// Index ranges of a coarse buffer (multilevel meshes).
    pub fn coarse_shape(&self) -> Option<&IndexShape> {
        self.coarse_shape.as_ref()
    }

    /// The storage layout.
    pub fn layout(&self) -> BlockLayout {
        self.layout
    }

    /// The variables, in registration order.
    pub fn vars(&self) -> &[VarSlots] {
        &self.vars
    }

    /// Default value of every slot.
    pub fn slot_defaults(&self) -> &[f64] {
        &self.slot_default
    }

    /// All values.
    pub fn data(&self) -> &[f64] {
        &self.data
    }

    /// All values, for writing.
    pub fn data_mut(&mut self) -> &mut [f64] {
        &mut self.data
    }

    fn block_range(&self, b: usize) -> Range<usize> {
        let n = self.layout.block_len();
        b * n..(b + 1) * n
    }

    /// The block arrays of every slot of local block `b`, one after the other (no coarse
    /// buffers): what a block carries when it moves to another rank.
    pub fn fine_block(&self, b: usize) -> &[f64] {
        let n = self.layout.fine.block_len();
        &self.data[self.block_range(b)][..n]
    }

    /// [`BlockData::fine_block`], for writing.
    pub fn fine_block_mut(&mut self, b: usize) -> &mut [f64] {
        let n = self.layout.fine.block_len();
        let r = self.block_range(b);
        &mut self.data[r][..n]
    }

    /// Slot `slot`'s block array of local block `b` (ghosts included).
    pub fn fine(&self, b: usize, slot: usize) -> &[f64] {
        let n = self.layout.fine.var_len();
        &self.data[self.block_range(b)][slot * n..(slot + 1) * n]
    }

    /// Slot `slot`'s block array and coarse buffer of local block `b`, for writing.
    pub fn fine_and_coarse_mut(&mut self, b: usize, slot: usize) -> (&mut [f64], &mut [f64]) {
        let (nf, nc) = (
            self.layout.fine.var_len(),
            self.layout.coarse.map_or(0, |c| c.var_len()),
        );
        let start = self.layout.coarse_start();
        let r = self.block_range(b);
        let (fine, coarse) = self.data[r].split_at_mut(start);
        (
            &mut fine[slot * nf..(slot + 1) * nf],
            &mut coarse[slot * nc..(slot + 1) * nc],
        )
    }

    /// Slot `slot`'s block array of local block `b`, for writing.
    pub fn fine_mut(&mut self, b: usize, slot: usize) -> &mut [f64] {
        self.fine_and_coarse_mut(b, slot).0
    }

    /// Whether variable `var` is allocated on local block `b`.
    pub fn is_allocated(&self, b: usize, var: usize) -> bool {
        self.allocated[b * self.vars.len() + var]
    }

    /// Allocates or deallocates variable `var` on local block `b`. Either way the values
    /// (block array and coarse buffer) start at the default, as Parthenon's do. Only sparse
    /// variables come and go: a dense one stays allocated, as in Parthenon, so that every
    /// exchange mode sends its values (a receiver tells a null message from data by its
    /// length only where a variable is sparse).
    pub fn set_allocated(&mut self, b: usize, var: usize, on: bool) {
        let on = on || self.vars[var].threshold.is_none();
        let i = b * self.vars.len() + var;
        if self.allocated[i] == on {
            return;
        }
        self.allocated[i] = on;
        let d = self.vars[var].default;
        for s in self.vars[var].slots.clone() {
            let (f, c) = self.fine_and_coarse_mut(b, s);
            f.fill(d);
            c.fill(d);
        }
    }

    /// Marks variable `var` allocated on local block `b` without touching its values (the
    /// exchange has just unpacked received ghosts into the default-valued storage).
    pub fn mark_allocated(&mut self, b: usize, var: usize) {
        self.allocated[b * self.vars.len() + var] = true;
    }

    /// The block arrays only (no coarse buffers), block after block: the form outputs take.
    pub fn fine_values(&self) -> Vec<f64> {
        let n = self.layout.fine.block_len();
        (0..self.gids.len())
            .flat_map(|b| self.data[self.block_range(b)][..n].iter().copied())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use starhalo_mesh::field::{Metadata, SparseThresholds};
    use starhalo_mesh::MeshConfig;

    #[test]
    fn only_sparse_variables_are_deallocated() {
        let mesh = Mesh::new(MeshConfig::new([8, 8, 1], [4, 4, 1]), 1).unwrap();
        let mut f = Fields::default();
        f.add("u", Metadata::new(Centering::Cell)).unwrap();
        let sparse = Metadata::new(Centering::Cell).sparse(SparseThresholds::default());
        f.add("s", sparse).unwrap();
        let mut data = BlockData::new(&mesh, &f, 0).unwrap();
        assert!(data.is_allocated(0, 0) && !data.is_allocated(0, 1));
        data.set_allocated(0, 1, true);
        data.fine_mut(0, 0).fill(3.0);
        data.set_allocated(0, 0, false);
        data.set_allocated(0, 1, false);
        assert!(data.is_allocated(0, 0), "a dense variable stays allocated");
        assert!(
            data.fine(0, 0).iter().all(|&x| x == 3.0),
            "and keeps its values"
        );
        assert!(!data.is_allocated(0, 1));
    }
}
