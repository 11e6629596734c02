//! The host twin of the device kernels: a [`SpacePlan`] run with the host's own code.

use starhalo_mesh::field::IndexShape;
use starhalo_sf::p2p::{Values, ValuesMut};

use super::{field_dims, physical_fill, threshold_flags, PartPlan, SpacePlan};
use crate::bnd_info::{BndCache, BndInfo, FieldLayout, FLAG_ALLOCATED, FLAG_COARSE};
use crate::bounds::{interior_bounds, BlockFinish};
use crate::error::BoundaryError;
use crate::exchange::{not_host, Exchange, FieldSpace};
use crate::prolong_restrict::{prolongate, restrict, Prolongation};
use crate::storage::BlockData;

/// Host twin of the pack kernel: each sub-halo of `infos` into `buf` at its offset, from the
/// `fine` block arrays or (coarse sub-halos) the `coarse` buffers of `nblocks` blocks.
pub(super) fn pack_boxes(
    infos: &[BndInfo],
    nblocks: usize,
    fine: (FieldLayout, &[f64]),
    coarse: Option<(FieldLayout, &[f64])>,
    buf: &mut [f64],
) -> Result<(), BoundaryError> {
    for b in infos {
        let (l, arr) = match b.flags & FLAG_COARSE {
            0 => fine,
            _ => coarse.ok_or_else(no_coarse)?,
        };
        let f = field_dims(l, nblocks);
        for (k, p) in b.index_box().points().enumerate() {
            buf[b.buf_offset + k] = arr[f.index(b.block, b.var, p)];
        }
    }
    Ok(())
}

/// Host twin of the unpack kernel: each sub-halo of `infos` from `buf` into the block arrays
/// or the coarse buffers; a sub-halo without [`FLAG_ALLOCATED`] gets `fill`.
pub(super) fn unpack_boxes(
    infos: &[BndInfo],
    buf: &[f64],
    nblocks: usize,
    fine: (FieldLayout, &mut [f64]),
    mut coarse: Option<(FieldLayout, &mut [f64])>,
    fill: f64,
) -> Result<(), BoundaryError> {
    let (fl, fine) = fine;
    for b in infos {
        let on = b.flags & FLAG_ALLOCATED != 0;
        let (l, arr) = match (b.flags & FLAG_COARSE, coarse.as_mut()) {
            (0, _) => (fl, &mut *fine),
            (_, Some((cl, c))) => (*cl, &mut **c),
            (_, None) => return Err(no_coarse()),
        };
        let f = field_dims(l, nblocks);
        for (k, p) in b.index_box().points().enumerate() {
            arr[f.index(b.block, b.var, p)] = if on { buf[b.buf_offset + k] } else { fill };
        }
    }
    Ok(())
}

/// A [`SpacePlan`] run on the host with the host's restriction, prolongation and boundary
/// code, on its own split copy of the storage: what `DeviceFields` does, box for box, so
/// that its results can be checked against the exchange's host path anywhere.
#[derive(Debug)]
pub struct HostTwin {
    plan: SpacePlan,
    fine: Vec<f64>,
    coarse: Vec<f64>,
}

impl HostTwin {
    /// The plan of `ex` and a copy of `data`.
    pub fn new(ex: &Exchange, data: &BlockData) -> Result<Self, BoundaryError> {
        let plan = SpacePlan::new(ex, data)?;
        let (fine, coarse) = plan.split(data.data());
        Ok(Self { plan, fine, coarse })
    }

    /// The twin's values in the host storage's layout.
    pub fn merged(&self) -> Vec<f64> {
        let n = self.plan.block_layout().block_len() * self.plan.nblocks;
        let mut out = vec![0.0; n];
        self.plan.merge(&self.fine, &self.coarse, &mut out);
        out
    }

    /// Where the values of `b`'s block and variable lie in storage of layout `l`.
    pub(super) fn slot(l: FieldLayout, b: &BndInfo) -> std::ops::Range<usize> {
        let n = l.dims.iter().product::<usize>();
        let start = (b.block * l.nvar + b.var) * n;
        start..start + n
    }

    fn restrict_boxes(&mut self, boxes: &[BndInfo]) -> Result<(), BoundaryError> {
        if boxes.is_empty() {
            return Ok(());
        }
        let c = self.plan.coarse.ok_or_else(no_coarse)?;
        for b in boxes {
            let f = &self.fine[Self::slot(self.plan.fine, b)];
            let co = &mut self.coarse[Self::slot(c, b)];
            restrict(&self.plan.shape, f, co, &b.index_box())?;
        }
        Ok(())
    }
}

fn no_coarse() -> BoundaryError {
    BoundaryError::Geometry("coarse boxes without coarse buffers".into())
}

impl FieldSpace for HostTwin {
    fn restrict(
        &mut self,
        route: usize,
        _list: &[(usize, usize)],
        _shape: &IndexShape,
        _data: &mut BlockData,
    ) -> Result<(), BoundaryError> {
        let boxes =
            self.plan.route_restrict.get_mut(route).ok_or_else(|| {
                BoundaryError::Mismatch(format!("route {route} is not in the plan"))
            })?;
        let boxes = std::mem::take(boxes);
        let done = self.restrict_boxes(&boxes);
        self.plan.route_restrict[route] = boxes;
        done
    }

    fn pack(
        &mut self,
        _route: usize,
        cache: &BndCache,
        _data: &BlockData,
        buf: ValuesMut<'_>,
        flags: Option<(&[f64], &mut [u32])>,
    ) -> Result<(), BoundaryError> {
        let buf = buf.host().ok_or_else(not_host)?;
        let p = &self.plan;
        let coarse = p.coarse.map(|c| (c, &self.coarse[..]));
        pack_boxes(cache.infos(), p.nblocks, (p.fine, &self.fine), coarse, buf)?;
        if let Some((t, over)) = flags {
            threshold_flags(cache.infos(), buf, t, over);
        }
        Ok(())
    }

    fn unpack(
        &mut self,
        _route: usize,
        cache: &BndCache,
        buf: Values<'_>,
        _data: &mut BlockData,
        _defaults: &[f64],
    ) -> Result<(), BoundaryError> {
        let buf = buf.host().ok_or_else(not_host)?;
        let p = &self.plan;
        let coarse = p.coarse.map(|c| (c, &mut self.coarse[..]));
        let fine = (p.fine, &mut self.fine[..]);
        unpack_boxes(cache.infos(), buf, p.nblocks, fine, coarse, p.fill)
    }

    fn finish(
        &mut self,
        part: usize,
        _work: &[BlockFinish],
        ops: &[Prolongation],
        _shape: &IndexShape,
        _data: &mut BlockData,
    ) -> Result<(), BoundaryError> {
        self.plan.check_ops(ops)?;
        let p = std::mem::take(self.plan.parts.get_mut(part).ok_or_else(|| {
            BoundaryError::Mismatch(format!("partition {part} is not in the plan"))
        })?);
        let done = self.run_part(&p);
        self.plan.parts[part] = p;
        done
    }
}

impl HostTwin {
    /// A partition's post-unpack work, in the device's launch order.
    fn run_part(&mut self, p: &PartPlan) -> Result<(), BoundaryError> {
        let nb = self.plan.nblocks;
        self.restrict_boxes(&p.restrict)?;
        if let Some(c) = self.plan.coarse {
            let (lo, hi) = interior_bounds(&self.plan.shape.coarse()?);
            physical_fill(c, nb, &p.coarse_physical, lo, hi, &mut self.coarse)?;
            for (op, boxes) in &p.prolong {
                for b in boxes {
                    let co = &self.coarse[Self::slot(c, b)];
                    let f = &mut self.fine[Self::slot(self.plan.fine, b)];
                    prolongate(*op, &self.plan.shape, co, f, &b.index_box())?;
                }
            }
        }
        let (lo, hi) = interior_bounds(&self.plan.shape);
        physical_fill(self.plan.fine, nb, &p.physical, lo, hi, &mut self.fine)
    }
}
