//! Adaptive refinement of the advection run: a block asks to be refined where the first field
//! is steep and to be merged where it is flat, every `advection/refine_interval` cycles; the
//! mesh is then remeshed and rebalanced, the data moved with [`redistribute`], and the ghost
//! exchange and flux correction rebuilt for the new mesh.
//!
//! The criterion is Parthenon's first-derivative measure: the largest, over the block's
//! interior cells and the active directions, of `|q(i+1) - q(i-1)| / (2 |q(i)| + tiny)`.
//! Above `advection/refine_tol` (default 0.3) the block refines; below
//! `advection/derefine_tol` (default 0.03) it asks to merge (granted once its whole family
//! has asked `parthenon/mesh/derefine_count` times in a row).
//!
//! `parthenon/refinementN` blocks (Parthenon's criteria: `method`, `field`, `refine_tol`
//! default 0.5, `derefine_tol` default 0.05, `max_level`) replace that criterion by theirs; a
//! block refines if any criterion asks it to and merges only if all do. The methods, each
//! over the interior cells of `field` ([`MeasureKind`]):
//!
//! - `derivative_order_1` (the default), the measure above;
//! - `derivative_order_2`: the largest `|a - q(i)| / (|a| + |q(i)| + tiny)` with `a` the mean
//!   of `q(i-1)` and `q(i+1)`, over the active directions;
//! - `magnitude`: with `comparator: greater_than` (the default) the block refines where its
//!   largest value exceeds `refine_tol` and merges where it stays below `derefine_tol`; with
//!   `less_than`, where its smallest value is below `refine_tol`, and above `derefine_tol`.

use super::gpu::Gpu;
use super::{field_name, Advection, Comms, Geo, BLOCK, MESH};
use crate::deck::Deck;
use crate::exit::bad_input;
use crate::run::collective::agree;
use crate::run::stats::CommTimer;
use crate::run::RunContext;
use anyhow::{anyhow, Context as _, Result};
use mpi::datatype::PartitionMut;
use mpi::traits::CommunicatorCollectives;
use starhalo_boundary::redistribute;
use starhalo_exec::cuda::MeasureKind;
use starhalo_mesh::refine::{BlockFate, BlockOrigin};
use starhalo_mesh::{MeshConfig, RefinementFlag, RefinementKind};

/// Parthenon's `TINY_NUMBER`: keeps the measure finite where the field is zero.
pub(super) const TINY: f64 = 1e-20;

/// One refinement criterion on one field.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Criterion {
    /// The field (its slot in the storage).
    field: usize,
    kind: MeasureKind,
    /// The measure above which a block refines, and below which it asks to merge (for
    /// [`MeasureKind::MaxNegated`], the tolerances negated).
    refine_at: f64,
    derefine_at: f64,
    /// Blocks at this level or finer are not refined for this criterion.
    max_level: u32,
}

impl Criterion {
    fn flag(&self, measure: f64, level: u32) -> RefinementFlag {
        if measure > self.refine_at {
            if level < self.max_level {
                RefinementFlag::Refine
            } else {
                RefinementFlag::Same
            }
        } else if measure < self.derefine_at {
            RefinementFlag::Derefine
        } else {
            RefinementFlag::Same
        }
    }
}

/// The refinement settings.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Amr {
    criteria: Vec<Criterion>,
    /// Check every this many cycles.
    interval: u64,
}

/// What the refinement did over a run.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct AmrStats {
    /// Remeshes that changed the mesh.
    pub remeshes: u64,
    /// Blocks split.
    pub refined: usize,
    /// Blocks made by merging a family.
    pub merged: usize,
    /// Fewest blocks seen after the initial refinement.
    pub min_blocks: usize,
    /// Most blocks seen.
    pub max_blocks: usize,
}

impl Amr {
    /// The settings of an adaptive mesh, `None` otherwise. The keys are checked either way,
    /// so that switching `refinement` off for a comparison run needs no other edit.
    pub(super) fn from_deck(
        deck: &Deck,
        config: &MeshConfig,
        num_vars: usize,
    ) -> Result<Option<Self>> {
        let finest = config.numlevel.saturating_sub(1);
        // The tolerances of `block`, as thresholds of `kind`'s measure; `refine_tol` must lie
        // on the refining side of `derefine_tol`.
        let thresholds =
            |block: &str, kind: MeasureKind, refine: f64, derefine: f64| -> Result<(f64, f64)> {
                let (r, d) = match kind {
                    MeasureKind::FirstDerivative | MeasureKind::SecondDerivative => {
                        let tol = |key: &str, default| deck.get_nonneg_f64_or(block, key, default);
                        (tol("refine_tol", refine)?, tol("derefine_tol", derefine)?)
                    }
                    MeasureKind::Max | MeasureKind::MaxNegated => {
                        let tol = |key: &str, default| -> Result<f64> {
                            match deck.get_f64_or(block, key, default)? {
                                x if x.is_finite() => Ok(x),
                                _ => {
                                    Err(deck.invalid(block, key, "must be a finite number").into())
                                }
                            }
                        };
                        (tol("refine_tol", refine)?, tol("derefine_tol", derefine)?)
                    }
                };
                let (sign, side) = match kind {
                    MeasureKind::MaxNegated => (-1.0, "above"),
                    _ => (1.0, "below"),
                };
                if sign * d >= sign * r {
                    return Err(deck
                        .invalid(
                            block,
                            "derefine_tol",
                            format!("must be {side} refine_tol ({r})"),
                        )
                        .into());
                }
                Ok((sign * r, sign * d))
            };
        let kind = MeasureKind::FirstDerivative;
        let (refine_at, derefine_at) = thresholds(BLOCK, kind, 0.3, 0.03)?;
        let mut criteria = vec![Criterion {
            field: 0,
            kind,
            refine_at,
            derefine_at,
            max_level: finest,
        }];
        let mut blocks: Vec<(usize, &str)> = deck
            .blocks()
            .iter()
            .filter_map(|b| {
                let n = b.name.strip_prefix("parthenon/refinement")?;
                Some((n.parse().unwrap_or(usize::MAX), b.name.as_str()))
            })
            .collect();
        blocks.sort_unstable();
        if !blocks.is_empty() {
            criteria.clear();
        }
        for (n, block) in blocks {
            if n == usize::MAX {
                return Err(bad_input!(
                    "block {block}: refinement criteria are named parthenon/refinementN"
                ));
            }
            let method = deck.get_str_or(block, "method", "derivative_order_1")?;
            let kind = match method.as_str() {
                "derivative_order_1" => MeasureKind::FirstDerivative,
                "derivative_order_2" => MeasureKind::SecondDerivative,
                "magnitude" => {
                    match deck
                        .get_str_or(block, "comparator", "greater_than")?
                        .as_str()
                    {
                        "greater_than" => MeasureKind::Max,
                        "less_than" => MeasureKind::MaxNegated,
                        other => {
                            return Err(deck
                                .invalid(
                                    block,
                                    "comparator",
                                    format!(
                                    "unknown comparator '{other}' (known: greater_than, less_than)"
                                ),
                                )
                                .into())
                        }
                    }
                }
                other => {
                    return Err(deck
                        .invalid(
                            block,
                            "method",
                            format!(
                                "unknown method '{other}' (known: derivative_order_1, derivative_order_2, magnitude)"
                            ),
                        )
                        .into());
                }
            };
            if method != "magnitude" && deck.has(block, "comparator") {
                return Err(deck
                    .invalid(
                        block,
                        "comparator",
                        format!("applies to method magnitude, not {method}"),
                    )
                    .into());
            }
            let name = deck.get_str(block, "field")?;
            let field = (0..num_vars)
                .find(|&i| field_name(i) == name)
                .ok_or_else(|| {
                    let known: Vec<String> = (0..num_vars).map(field_name).collect();
                    deck.invalid(
                        block,
                        "field",
                        format!("no field '{name}' (known: {})", known.join(", ")),
                    )
                })?;
            let (refine_at, derefine_at) = thresholds(block, kind, 0.5, 0.05)?;
            let max_level = deck.get_i64_or(block, "max_level", i64::from(finest))?;
            if !(0..=i64::from(finest)).contains(&max_level) {
                return Err(deck
                    .invalid(
                        block,
                        "max_level",
                        format!("must be 0 to {finest} (numlevel - 1)"),
                    )
                    .into());
            }
            criteria.push(Criterion {
                field,
                kind,
                refine_at,
                derefine_at,
                max_level: max_level as u32,
            });
        }
        let interval = deck.get_i64_or(BLOCK, "refine_interval", 1)?;
        if interval < 1 {
            return Err(deck
                .invalid(BLOCK, "refine_interval", "must be a whole number >= 1")
                .into());
        }
        if config.refinement != RefinementKind::Adaptive {
            return Ok(None);
        }
        if config.numlevel < 2 {
            return Err(deck
                .invalid(
                    MESH,
                    "numlevel",
                    "adaptive refinement needs numlevel >= 2 (levels above the root grid)",
                )
                .into());
        }
        Ok(Some(Self {
            criteria,
            interval: interval as u64,
        }))
    }

    /// The field (storage slot) and measure of each criterion, in order.
    pub(super) fn measures(&self) -> Vec<(usize, MeasureKind)> {
        self.criteria.iter().map(|c| (c.field, c.kind)).collect()
    }

    /// The flag of a block at `level` whose criteria measured `measures` (one each, in
    /// order): refine if any criterion says so, merge only if all do.
    fn flag(&self, level: u32, measures: &[f64]) -> RefinementFlag {
        let mut all_derefine = true;
        for (c, &m) in self.criteria.iter().zip(measures) {
            match c.flag(m, level) {
                RefinementFlag::Refine => return RefinementFlag::Refine,
                RefinementFlag::Same => all_derefine = false,
                RefinementFlag::Derefine => {}
            }
        }
        if all_derefine {
            RefinementFlag::Derefine
        } else {
            RefinementFlag::Same
        }
    }
}

/// The measure `kind` of one block array (ghosts filled). The device computes the same, bit
/// for bit (`Device::refine_measure`).
pub(super) fn measure(kind: MeasureKind, u: &[f64], geo: &Geo) -> f64 {
    let strides = [1, geo.dims[0], geo.dims[0] * geo.dims[1]];
    let cells = geo.interior().map(|p| geo.at(p));
    match kind {
        MeasureKind::FirstDerivative => cells.fold(0.0f64, |m, c| {
            let scale = 2.0 * u[c].abs() + TINY;
            (strides[..geo.ndim].iter()).fold(m, |m, &s| m.max((u[c + s] - u[c - s]).abs() / scale))
        }),
        MeasureKind::SecondDerivative => cells.fold(0.0f64, |m, c| {
            let aqt = u[c].abs() + TINY;
            (strides[..geo.ndim].iter()).fold(m, |m, &s| {
                let avg = 0.5 * (u[c + s] + u[c - s]);
                m.max((avg - u[c]).abs() / (avg.abs() + aqt))
            })
        }),
        MeasureKind::Max => cells.fold(f64::NEG_INFINITY, |m, c| m.max(u[c])),
        MeasureKind::MaxNegated => cells.fold(f64::NEG_INFINITY, |m, c| m.max(-u[c])),
    }
}

fn code(f: RefinementFlag) -> i8 {
    match f {
        RefinementFlag::Refine => 1,
        RefinementFlag::Same => 0,
        RefinementFlag::Derefine => -1,
    }
}

fn flag_of(c: i8) -> RefinementFlag {
    match c {
        1 => RefinementFlag::Refine,
        -1 => RefinementFlag::Derefine,
        _ => RefinementFlag::Same,
    }
}

impl Advection {
    /// The measure of every criterion on every local block, `[block][criterion]`, from the
    /// host's fields.
    fn host_measures(&self, amr: &Amr) -> Vec<f64> {
        let data = self.data.borrow();
        let mut out = Vec::with_capacity(data.gids().len() * amr.criteria.len());
        for (b, &gid) in data.gids().iter().enumerate() {
            let geo = Geo::new(&self.mesh, gid);
            out.extend(
                amr.criteria
                    .iter()
                    .map(|c| measure(c.kind, data.fine(b, c.field), &geo)),
            );
        }
        out
    }

    /// Every block's flag, in gid order, the same on every rank (collective), from the
    /// local blocks' `measures` (`[block][criterion]`). `refine_only` turns merge requests
    /// into "same" (the initial refinement only ever adds levels).
    fn gather_flags(
        &self,
        ctx: &RunContext,
        amr: &Amr,
        measures: &[f64],
        refine_only: bool,
    ) -> Vec<RefinementFlag> {
        let data = self.data.borrow();
        let nc = amr.criteria.len();
        let local: Vec<i8> = data
            .gids()
            .iter()
            .enumerate()
            .map(|(b, &gid)| {
                let level = self.mesh.forest().loc(gid).map_or(0, |l| l.level());
                let f = amr.flag(level, &measures[b * nc..(b + 1) * nc]);
                if refine_only && f == RefinementFlag::Derefine {
                    0
                } else {
                    code(f)
                }
            })
            .collect();
        let p = self.mesh.partition();
        let counts: Vec<i32> = (0..p.nranks())
            .map(|r| p.blocks_of(r).len() as i32)
            .collect();
        let displs: Vec<i32> = (0..p.nranks())
            .map(|r| p.blocks_of(r).start as i32)
            .collect();
        let mut all = vec![0i8; p.nblocks()];
        ctx.world.all_gather_varcount_into(
            &local[..],
            &mut PartitionMut::new(&mut all[..], counts, displs),
        );
        all.into_iter().map(flag_of).collect()
    }

    /// Applies `flags`: remesh, move the data (first downloaded from `gpu`, where the fields
    /// live there), rebuild what depends on the mesh. Returns the numbers of blocks refined
    /// and merged, or `None` (and changes nothing but the merge counts) if the flags change no
    /// block.
    fn remesh(
        &mut self,
        ctx: &RunContext,
        comm: &CommTimer,
        flags: &[RefinementFlag],
        c: &mut Comms,
        gpu: Option<&Gpu>,
    ) -> Result<Option<(usize, usize)>> {
        if flags.contains(&RefinementFlag::Refine) {
            // The new blocks are made beside the old: they must fit in what is left now.
            self.budget = self.budget.now(ctx.world);
            self.mesh.set_max_blocks(self.budget.max_blocks());
        }
        let old_forest = self.mesh.forest().clone();
        let outcome = self
            .mesh
            .remesh(flags, None)
            .map_err(|e| match self.budget.outgrown(&e) {
                Some(why) => anyhow!(
                    "{why}; raise advection/refine_tol, lower parthenon/mesh/numlevel or use more ranks"
                ),
                None => e.into(),
            })
            .context("remeshing the adaptive mesh")?;
        if outcome.map.is_identity() {
            return Ok(None);
        }
        let world = ctx.world;
        if let Some(g) = gpu {
            agree(world, g.download(&mut self.data.borrow_mut()))
                .context("downloading the fields to remesh")?;
        }
        let data = comm
            .time(|| {
                let old = self.data.borrow();
                redistribute(world, &old_forest, &self.mesh, &outcome, &old, &[])
            })
            .context("moving block data after a remesh")?;
        *self.data.get_mut() = data;
        *c = comm
            .time(|| {
                let pool = c.exchange.borrow().pool().clone();
                Comms::new(ctx, self, &pool)
            })
            .context("after a remesh")?;
        let n = self.mesh.forest().len();
        let refined = outcome
            .map
            .fate
            .iter()
            .filter(|f| matches!(f, BlockFate::Refined { .. }))
            .count();
        let merged = outcome
            .map
            .origin
            .iter()
            .filter(|o| matches!(o, BlockOrigin::Merged { .. }))
            .count();
        let s = &mut self.amr_stats;
        s.remeshes += 1;
        s.refined += refined;
        s.merged += merged;
        s.min_blocks = s.min_blocks.min(n);
        s.max_blocks = s.max_blocks.max(n);
        Ok(Some((refined, merged)))
    }

    /// Before the first step: refine where the initial profile asks, set it up again on the
    /// new blocks (so the finest levels start from the exact profile), until nothing changes
    /// or `numlevel` rounds have run.
    pub(super) fn refine_initially(
        &mut self,
        ctx: &RunContext,
        comm: &CommTimer,
        c: &mut Comms,
    ) -> Result<()> {
        let Some(amr) = self.amr.clone() else {
            return Ok(());
        };
        let n = self.mesh.forest().len();
        self.amr_stats.min_blocks = n;
        self.amr_stats.max_blocks = n;
        for _ in 0..self.mesh.config().numlevel {
            let flags = self.gather_flags(ctx, &amr, &self.host_measures(&amr), true);
            if !flags.contains(&RefinementFlag::Refine)
                || self.remesh(ctx, comm, &flags, c, None)?.is_none()
            {
                break;
            }
            // The profile again, at the new blocks' own resolution.
            self.initialise();
            comm.time(|| self.fill_ghosts(ctx, c))?;
        }
        self.amr_stats = AmrStats {
            min_blocks: self.mesh.forest().len(),
            max_blocks: self.mesh.forest().len(),
            ..AmrStats::default()
        };
        Ok(())
    }

    /// Between steps: check the refinement criterion (every `refine_interval` cycles) and
    /// remesh if any block changes; says whether it did. With the fields on `gpu`, the device
    /// measures the criteria (one value per block and criterion comes back) and the fields
    /// are downloaded only for a remesh. Collective.
    pub(super) fn adapt(
        &mut self,
        ctx: &RunContext,
        comm: &CommTimer,
        cycle: u64,
        c: &mut Comms,
        mut gpu: Option<&mut Gpu>,
    ) -> Result<bool> {
        let Some(amr) = self.amr.clone() else {
            return Ok(false);
        };
        if !cycle.is_multiple_of(amr.interval) {
            return Ok(false);
        }
        let measures = match gpu.as_deref_mut() {
            Some(g) => agree(ctx.world, g.refine_measures())
                .context("measuring the refinement criteria on the GPU")?,
            None => self.host_measures(&amr),
        };
        // Flags of all "same" still go to the mesh: they restart the derefinement counts.
        let flags = self.gather_flags(ctx, &amr, &measures, false);
        let before = self.mesh.forest().len();
        if let Some((r, m)) = self.remesh(ctx, comm, &flags, c, gpu.as_deref())? {
            comm.time(|| self.fill_ghosts(ctx, c))
                .context("after a remesh")?;
            if ctx.is_root() {
                outln!(
                    "remesh: cycle={cycle} blocks {before} -> {} refined={r} merged={m} max_level={}",
                    self.mesh.forest().len(),
                    self.mesh.forest().max_level()
                );
            }
            return Ok(true);
        }
        Ok(false)
    }
}

impl AmrStats {
    /// One line for the end of the run.
    pub(super) fn line(&self, blocks: usize, max_level: u32) -> String {
        format!(
            "amr: remeshes={} refined={} merged={} blocks min={} max={} final={blocks} max_level={max_level}",
            self.remeshes, self.refined, self.merged, self.min_blocks, self.max_blocks
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use starhalo_mesh::Mesh;

    /// A 1-D block of 8 cells with 2 ghosts, and its geometry.
    fn block() -> Geo {
        let mut c = MeshConfig::new([8, 1, 1], [8, 1, 1]);
        c.refinement = RefinementKind::Adaptive;
        c.numlevel = 2;
        Geo::new(&Mesh::new(c, 1).unwrap(), 0)
    }

    fn criterion(field: usize, max_level: u32) -> Criterion {
        Criterion {
            field,
            kind: MeasureKind::FirstDerivative,
            refine_at: 0.1,
            derefine_at: 0.01,
            max_level,
        }
    }

    fn first_derivative(u: &[f64], geo: &Geo) -> f64 {
        measure(MeasureKind::FirstDerivative, u, geo)
    }

    #[test]
    fn second_derivative_and_magnitude_measure_what_parthenon_does() {
        let geo = block();
        let second = |u: &[f64]| measure(MeasureKind::SecondDerivative, u, &geo);
        // A straight line has no curvature; a kink at i = 6 (interior) has: there the mean of
        // the neighbours 6.5 against 6, |0.5| / (6.5 + 6 + tiny).
        let line: Vec<f64> = (0..12).map(|i| 1.0 + i as f64).collect();
        assert_eq!(second(&line), 0.0);
        let kink: Vec<f64> = (0..12)
            .map(|i| if i <= 6 { 6.0 } else { i as f64 })
            .collect();
        let want = 0.5 / (6.5 + (6.0 + TINY));
        assert_eq!(second(&kink), want);
        // Magnitude: interior values only (the ghosts, 0, 1, 10, 11, hold the extremes).
        let mut u: Vec<f64> = (0..12).map(|i| i as f64 - 5.0).collect();
        u[0] = 1e9;
        u[11] = -1e9;
        assert_eq!(measure(MeasureKind::Max, &u, &geo), 4.0);
        assert_eq!(measure(MeasureKind::MaxNegated, &u, &geo), 3.0);
        // less_than, refine_tol -2, derefine_tol 1: refine where the smallest value is below
        // -2, merge where it is above 1.
        let c = Criterion {
            kind: MeasureKind::MaxNegated,
            refine_at: 2.0,
            derefine_at: -1.0,
            ..criterion(0, 2)
        };
        assert_eq!(c.flag(3.0, 0), RefinementFlag::Refine);
        assert_eq!(c.flag(0.0, 0), RefinementFlag::Same);
        assert_eq!(c.flag(-1.5, 0), RefinementFlag::Derefine);
    }

    #[test]
    fn first_derivative_is_the_steepest_relative_centred_difference() {
        let geo = block();
        // u = 1 + 0.1 i over 12 points: centred difference 0.2 everywhere, smallest |u| at
        // the first interior point (i = 2).
        let ramp: Vec<f64> = (0..12).map(|i| 1.0 + 0.1 * i as f64).collect();
        let m = first_derivative(&ramp, &geo);
        assert!((m - 0.2 / (2.0 * 1.2)).abs() < 1e-15, "{m}");
        // A jump from 0 to 1 divides by (almost) zero: far above any tolerance.
        let step: Vec<f64> = (0..12).map(|i| if i < 6 { 0.0 } else { 1.0 }).collect();
        assert!(first_derivative(&step, &geo) > 1e10);
        // Ghost values count through the centred difference of the edge cells.
        let mut flat = vec![1.0; 12];
        flat[1] = 1.5;
        assert!((first_derivative(&flat, &geo) - 0.25).abs() < 1e-15);
        flat[0] = 100.0;
        assert!((first_derivative(&flat, &geo) - 0.25).abs() < 1e-15);
    }

    #[test]
    fn any_criterion_refines_all_must_agree_to_merge_and_max_level_caps() {
        let geo = block();
        let amr = Amr {
            criteria: vec![criterion(0, 2), criterion(1, 1)],
            interval: 1,
        };
        let flat = vec![1.0; 12];
        let steep: Vec<f64> = (0..12).map(|i| 1.0 + i as f64).collect();
        let mild: Vec<f64> = (0..12).map(|i| 1.0 + 0.05 * i as f64).collect();
        let fields = |a: &'static str, b: &'static str| {
            let pick = |n: &str| match n {
                "flat" => flat.clone(),
                "steep" => steep.clone(),
                _ => mild.clone(),
            };
            [pick(a), pick(b)]
        };
        let flag = |f: &[Vec<f64>; 2], level| {
            let m: Vec<f64> = amr
                .criteria
                .iter()
                .map(|c| first_derivative(&f[c.field], &geo))
                .collect();
            amr.flag(level, &m)
        };
        assert_eq!(flag(&fields("flat", "flat"), 0), RefinementFlag::Derefine);
        assert_eq!(flag(&fields("flat", "steep"), 0), RefinementFlag::Refine);
        assert_eq!(flag(&fields("flat", "mild"), 0), RefinementFlag::Same);
        // Field 1's criterion stops at level 1; field 0's goes on to level 2.
        assert_eq!(flag(&fields("flat", "steep"), 1), RefinementFlag::Same);
        assert_eq!(flag(&fields("steep", "flat"), 1), RefinementFlag::Refine);
    }
}
