//! An exchange's data work as box lists that device storage runs as kernels.

use starhalo_mesh::field::IndexShape;

use crate::bnd_info::{BlockLayout, BndInfo, FieldLayout, FLAG_COARSE};
use crate::bounds::{coarse_interior, physical_boxes, BlockFinish};
use crate::error::BoundaryError;
use crate::exchange::Exchange;
use crate::prolong_restrict::Prolongation;
use crate::storage::BlockData;

/// An exchange's data work as box lists, for storage that keeps the block arrays (`fine`) and
/// the coarse buffers (`coarse`) apart, each `[block][variable][points]`.
#[derive(Debug, Clone)]
pub struct SpacePlan {
    /// The block arrays of one block.
    pub fine: FieldLayout,
    /// The coarse buffers of one block, on a multilevel mesh.
    pub coarse: Option<FieldLayout>,
    /// Blocks on this rank.
    pub nblocks: usize,
    /// The block shape.
    pub shape: IndexShape,
    /// The prolongation of each variable the plan was made with.
    pub ops: Vec<Prolongation>,
    /// The value unallocated (null) sub-halos receive: the default of every sparse
    /// fill-ghost variable.
    pub fill: f64,
    /// Per storage slot: its variable's sparse threshold (infinite where it has none), the
    /// exchange's.
    pub thresholds: Vec<f64>,
    /// Per route: the coarse interiors restricted before it packs.
    pub route_restrict: Vec<Vec<BndInfo>>,
    /// Per partition: its post-unpack work.
    pub parts: Vec<PartPlan>,
}

/// A partition's post-unpack work, in launch order.
#[derive(Debug, Clone, Default)]
pub struct PartPlan {
    /// Coarse boxes of the blocks with a coarser neighbour restricted from their block arrays:
    /// interiors, and the ghosts same-level or finer neighbours filled.
    pub restrict: Vec<BndInfo>,
    /// Those blocks' coarse physical boxes.
    pub coarse_physical: Vec<BndInfo>,
    /// Coarse boxes prolongated into the block arrays, per operator.
    pub prolong: Vec<(Prolongation, Vec<BndInfo>)>,
    /// The block arrays' physical boxes.
    pub physical: Vec<BndInfo>,
}

impl SpacePlan {
    /// The plan of `ex`, built for `data`, whose sparse fill-ghost variables must share one
    /// default value.
    ///
    /// Restriction, prolongation and the physical fill run on every variable, allocated or not (the
    /// host skips unallocated ones): an unallocated variable's values are never read, since
    /// it sends null messages and its interior is never written, so allocated values are the
    /// host's bit for bit.
    pub fn new(ex: &Exchange, data: &BlockData) -> Result<Self, BoundaryError> {
        let nblocks = data.gids().len();
        let mut defaults = data
            .vars()
            .iter()
            .filter(|v| v.fill_ghost && v.threshold.is_some())
            .map(|v| v.default);
        let fill = defaults.next().unwrap_or(0.0);
        if defaults.any(|d| d.to_bits() != fill.to_bits()) {
            return Err(BoundaryError::Geometry(
                "sparse variables with different default values".into(),
            ));
        }
        let shape = *data.shape();
        let cshape = data.coarse_shape().copied();
        let slots_of = |v: usize| data.vars()[v].slots.clone();
        // (variable, slot) of every fill-ghost variable.
        let filled: Vec<(usize, usize)> = (0..data.vars().len())
            .filter(|&v| data.vars()[v].fill_ghost)
            .flat_map(|v| slots_of(v).map(move |s| (v, s)))
            .collect();
        let ops = ex.prolongations().to_vec();
        let route_restrict = ex
            .route_restricts()
            .map(|list| match &cshape {
                Some(cs) => {
                    let interior = coarse_interior(cs);
                    list.iter()
                        .flat_map(|&(b, v)| slots_of(v).map(move |s| (b, s)))
                        .map(|(b, s)| BndInfo::new(b, s, &interior, 0, FLAG_COARSE))
                        .collect()
                }
                None => Vec::new(),
            })
            .collect();
        let parts = (0..ex.partitions())
            .map(|p| part_plan(ex.finish_work(p), &filled, &ops, &shape, cshape.as_ref()))
            .collect::<Result<_, _>>()?;
        let layout = data.layout();
        Ok(Self {
            fine: layout.fine,
            coarse: layout.coarse,
            nblocks,
            shape,
            ops,
            fill,
            thresholds: ex.thresholds().to_vec(),
            route_restrict,
            parts,
        })
    }

    /// Checks that the exchange still prolongates with the operators the plan was made with.
    pub fn check_ops(&self, ops: &[Prolongation]) -> Result<(), BoundaryError> {
        if ops == self.ops {
            Ok(())
        } else {
            Err(BoundaryError::Mismatch(
                "prolongation changed after the plan was made".into(),
            ))
        }
    }

    /// The block layout the host storage has for this plan.
    pub fn block_layout(&self) -> BlockLayout {
        BlockLayout {
            fine: self.fine,
            coarse: self.coarse,
        }
    }

    /// The host storage `data` split into block arrays and coarse buffers.
    pub fn split(&self, data: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let l = self.block_layout();
        let (n, start) = (l.block_len(), l.coarse_start());
        let (mut fine, mut coarse) = (Vec::new(), Vec::new());
        for b in data.chunks(n.max(1)).take(self.nblocks) {
            fine.extend_from_slice(&b[..start]);
            coarse.extend_from_slice(&b[start..]);
        }
        (fine, coarse)
    }

    /// The inverse of [`split`](Self::split), into `data`.
    pub fn merge(&self, fine: &[f64], coarse: &[f64], data: &mut [f64]) {
        let l = self.block_layout();
        let (n, start) = (l.block_len(), l.coarse_start());
        let cn = n - start;
        for (b, out) in data.chunks_mut(n.max(1)).take(self.nblocks).enumerate() {
            out[..start].copy_from_slice(&fine[b * start..(b + 1) * start]);
            out[start..].copy_from_slice(&coarse[b * cn..(b + 1) * cn]);
        }
    }
}

fn part_plan(
    work: &[BlockFinish],
    filled: &[(usize, usize)],
    ops: &[Prolongation],
    shape: &IndexShape,
    cshape: Option<&IndexShape>,
) -> Result<PartPlan, BoundaryError> {
    let mut p = PartPlan::default();
    let mut by_op: Vec<(Prolongation, Vec<BndInfo>)> = Vec::new();
    for f in work {
        let fine_physical = physical_boxes(shape, &f.faces);
        for &(_, s) in filled {
            for (b, flags) in &fine_physical {
                p.physical.push(BndInfo::new(f.block, s, b, 0, *flags));
            }
        }
        if f.prolong.is_empty() {
            continue;
        }
        let Some(cs) = cshape else {
            return Err(BoundaryError::Geometry(
                "prolongation without coarse buffers".into(),
            ));
        };
        let coarse_physical = physical_boxes(cs, &f.faces);
        for &(v, s) in filled {
            let co = |b: &crate::bnd_info::IndexBox| BndInfo::new(f.block, s, b, 0, FLAG_COARSE);
            p.restrict.push(co(&f.interior));
            p.restrict.extend(f.restrict.iter().map(co));
            p.coarse_physical.extend(
                coarse_physical
                    .iter()
                    .map(|(b, flags)| BndInfo::new(f.block, s, b, 0, FLAG_COARSE | flags)),
            );
            let op = *ops.get(v).ok_or_else(|| {
                BoundaryError::Mismatch(format!("no prolongation for variable {v}"))
            })?;
            let list = match by_op.iter().position(|(o, _)| *o == op) {
                Some(i) => &mut by_op[i].1,
                None => {
                    by_op.push((op, Vec::new()));
                    &mut by_op.last_mut().expect("just pushed").1
                }
            };
            list.extend(f.prolong.iter().map(co));
        }
    }
    p.prolong = by_op;
    Ok(p)
}
