//! Adaptive refinement of the advection run: every `advection/refine_interval` cycles each
//! block asks to be refined, kept or merged; the mesh is then remeshed and rebalanced, the
//! data moved with [`redistribute`], and the ghost exchange and flux correction rebuilt for
//! the new mesh. A merge is granted once the whole family has asked
//! `parthenon/mesh/derefine_count` times in a row.
//!
//! The advection block's own test is that of Parthenon's advection example (its current
//! code, which tests each field; a 3-D block there is tested slab by slab), on each field over
//! the whole block, ghosts included: refine where the largest value exceeds
//! `advection/refine_tol` (default 0.3) while the smallest is below `advection/derefine_tol`
//! (default 0.03), so at a front between the two; merge where the largest is below
//! `derefine_tol`.
//!
//! `parthenon/refinementN` blocks (Parthenon's criteria: `method`, `field`, `refine_tol`
//! default 0.5, `derefine_tol` default 0.05, `max_level`) replace that test by theirs; a
//! block refines if any criterion asks it to and merges only if all do. The methods, each
//! over the interior cells of `field` ([`MeasureKind`]):
//!
//! - `derivative_order_1` (the default): the largest `|q(i+1) - q(i-1)| / (2 |q(i)| + tiny)`
//!   over the active directions;
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
    test: Test,
    /// Blocks at this level or finer are not refined for this criterion.
    max_level: u32,
}

/// How a criterion decides from its measures.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Test {
    /// A `parthenon/refinementN` method: its measure above `refine_at` refines, below
    /// `derefine_at` asks to merge (for [`MeasureKind::MaxNegated`], the tolerances negated).
    Threshold {
        kind: MeasureKind,
        refine_at: f64,
        derefine_at: f64,
    },
    /// The advection package's own test (Parthenon's example), over the whole block, ghosts
    /// included: refine where the largest value exceeds `refine_tol` while the smallest is
    /// below `derefine_tol`; merge where the largest is below `derefine_tol`.
    Bounds { refine_tol: f64, derefine_tol: f64 },
}

impl Criterion {
    /// What it measures, in order: one value, or two (the largest, minus the smallest).
    fn kinds(&self) -> &[MeasureKind] {
        match &self.test {
            Test::Threshold { kind, .. } => std::slice::from_ref(kind),
            Test::Bounds { .. } => &[MeasureKind::BlockMax, MeasureKind::BlockMaxNegated],
        }
    }

    /// The flag of a block at `level` from this criterion's measures (as [`Self::kinds`]).
    fn flag(&self, m: &[f64], level: u32) -> RefinementFlag {
        let (refine, derefine) = match self.test {
            Test::Threshold {
                refine_at,
                derefine_at,
                ..
            } => (m[0] > refine_at, m[0] < derefine_at),
            Test::Bounds {
                refine_tol,
                derefine_tol,
            } => (
                m[0] > refine_tol && -m[1] < derefine_tol,
                m[0] < derefine_tol,
            ),
        };
        match (refine, derefine) {
            (true, _) if level < self.max_level => RefinementFlag::Refine,
            (true, _) => RefinementFlag::Same,
            (false, true) => RefinementFlag::Derefine,
            (false, false) => RefinementFlag::Same,
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
        let tol = |block: &str, key: &str, default: f64, nonneg: bool| -> Result<f64> {
            match deck.get_f64_or(block, key, default)? {
                x if x.is_finite() && (x >= 0.0 || !nonneg) => Ok(x),
                _ if nonneg => Err(deck
                    .invalid(block, key, "must be a finite number >= 0")
                    .into()),
                _ => Err(deck.invalid(block, key, "must be a finite number").into()),
            }
        };
        // `derefine_tol` must not lie on the refining side of `refine_tol`: Parthenon does
        // not check, and where they overlap its current code lets the merge request win,
        // which would refine nothing there. The message names the key the deck gave.
        let ordered = |block: &str, (r, d): (f64, f64), side: &str| -> Result<()> {
            if (side == "above" && d >= r) || (side == "below" && d <= r) {
                return Ok(());
            }
            let default = |key| match deck.has(block, key) {
                true => "",
                false => " (its default)",
            };
            let opposite = if side == "above" { "below" } else { "above" };
            let refine_alone = deck.has(block, "refine_tol") && !deck.has(block, "derefine_tol");
            let (key, value, rel, other, other_value) = match refine_alone {
                true => ("refine_tol", r, opposite, "derefine_tol", d),
                false => ("derefine_tol", d, side, "refine_tol", r),
            };
            Err(deck
                .invalid(
                    block,
                    key,
                    format!(
                        "{value}{} must be {rel} {other}, {other_value}{}",
                        default(key),
                        default(other)
                    ),
                )
                .into())
        };
        let (r, d) = (
            tol(BLOCK, "refine_tol", 0.3, false)?,
            tol(BLOCK, "derefine_tol", 0.03, false)?,
        );
        ordered(BLOCK, (r, d), "below")?;
        let mut criteria: Vec<Criterion> = (0..num_vars)
            .map(|field| Criterion {
                field,
                test: Test::Bounds {
                    refine_tol: r,
                    derefine_tol: d,
                },
                max_level: finest,
            })
            .collect();
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
                // `parthenon/refinement0/method` as a block: a value written as a mapping.
                deck.values_only(|b| b.starts_with("refinement"))?;
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
            let magnitude = matches!(kind, MeasureKind::Max | MeasureKind::MaxNegated);
            let r = tol(block, "refine_tol", 0.5, !magnitude)?;
            let d = tol(block, "derefine_tol", 0.05, !magnitude)?;
            let sign = match kind {
                MeasureKind::MaxNegated => -1.0,
                _ => 1.0,
            };
            ordered(block, (r, d), if sign < 0.0 { "above" } else { "below" })?;
            let test = Test::Threshold {
                kind,
                refine_at: sign * r,
                derefine_at: sign * d,
            };
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
                test,
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

    /// The field (storage slot) and measure of every value the criteria take, in order.
    pub(super) fn measures(&self) -> Vec<(usize, MeasureKind)> {
        (self.criteria.iter())
            .flat_map(|c| c.kinds().iter().map(|&k| (c.field, k)))
            .collect()
    }

    /// The flag of a block at `level` whose criteria measured `measures` (as
    /// [`Self::measures`]): refine if any criterion says so, merge only if all do.
    fn flag(&self, level: u32, measures: &[f64]) -> RefinementFlag {
        let mut all_derefine = true;
        let mut at = 0;
        for c in &self.criteria {
            let n = c.kinds().len();
            at += n;
            match c.flag(&measures[at - n..at], level) {
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
    // + 0.0: a zero is +0 whichever zero the maximum kept (the device's order differs).
    measure_any_zero(kind, u, geo) + 0.0
}

fn measure_any_zero(kind: MeasureKind, u: &[f64], geo: &Geo) -> f64 {
    let strides = [1, geo.dims[0], geo.dims[0] * geo.dims[1]];
    let strides = &strides[..geo.ndim];
    let nx = geo.n[0];
    // The start of each interior row: cells are walked row by row, without working out
    // each one's index from its three coordinates.
    let rows = (0..geo.n[2]).flat_map(move |k| (0..geo.n[1]).map(move |j| geo.at([0, j, k])));
    let along = |c: usize, s: usize| (&u[c - s..][..nx], &u[c + s..][..nx]);
    match kind {
        // Rounded division by a positive scale keeps order, so dividing the largest
        // difference gives the bits of the largest quotient: one division per cell. (A NaN
        // or infinite scale makes every quotient NaN or 0, which leave m >= +0 as it is.)
        MeasureKind::FirstDerivative => rows.fold(0.0f64, |m, c| {
            let mid = &u[c..][..nx];
            (0..nx).fold(m, |m, i| {
                let d = strides.iter().fold(0.0f64, |d, &s| {
                    let (lo, hi) = along(c, s);
                    d.max((hi[i] - lo[i]).abs())
                });
                m.max(d / (2.0 * mid[i].abs() + TINY))
            })
        }),
        MeasureKind::SecondDerivative => rows.fold(0.0f64, |m, c| {
            let mid = &u[c..][..nx];
            (strides.iter()).fold(m, |m, &s| {
                let (lo, hi) = along(c, s);
                (mid.iter().zip(lo).zip(hi)).fold(m, |m, ((&q, &l), &h)| {
                    let avg = 0.5 * (h + l);
                    m.max((avg - q).abs() / (avg.abs() + (q.abs() + TINY)))
                })
            })
        }),
        MeasureKind::Max => rows.fold(f64::NEG_INFINITY, |m, c| {
            u[c..][..nx].iter().fold(m, |m, &x| m.max(x))
        }),
        MeasureKind::MaxNegated => rows.fold(f64::NEG_INFINITY, |m, c| {
            u[c..][..nx].iter().fold(m, |m, &x| m.max(-x))
        }),
        MeasureKind::BlockMax => u.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x)),
        MeasureKind::BlockMaxNegated => u.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(-x)),
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
    /// The measure of every criterion on every local block, `[block][measure]` (as [`Amr::measures`]), from the
    /// host's fields.
    fn host_measures(&self, amr: &Amr) -> Vec<f64> {
        let data = self.data.borrow();
        let measures = amr.measures();
        let mut out = Vec::with_capacity(data.gids().len() * measures.len());
        for (b, &gid) in data.gids().iter().enumerate() {
            let geo = Geo::new(&self.mesh, gid);
            out.extend(
                (measures.iter()).map(|&(field, kind)| measure(kind, data.fine(b, field), &geo)),
            );
        }
        out
    }

    /// Every block's flag, in gid order, the same on every rank (collective), from the
    /// local blocks' `measures` (`[block][measure]`). `refine_only` turns merge requests
    /// into "same" (the initial refinement only ever adds levels).
    fn gather_flags(
        &self,
        ctx: &RunContext,
        amr: &Amr,
        measures: &[f64],
        refine_only: bool,
    ) -> Vec<RefinementFlag> {
        let data = self.data.borrow();
        let nc = amr.measures().len();
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
                    "{why}; raise the refinement tolerances (advection/refine_tol, parthenon/refinementN/refine_tol), lower parthenon/mesh/numlevel or use more ranks"
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
    /// measures the criteria (one value per block and measure comes back) and the fields
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
            test: Test::Threshold {
                kind: MeasureKind::FirstDerivative,
                refine_at: 0.1,
                derefine_at: 0.01,
            },
            max_level,
        }
    }

    /// The criteria `yaml` (an adaptive 2-level mesh's deck with two fields) makes.
    fn criteria_of(yaml: &str) -> Result<Vec<Criterion>> {
        let deck = Deck::from_str_auto(yaml, "t.yaml").unwrap();
        let mut config = MeshConfig::new([16, 16, 1], [8, 8, 1]);
        config.refinement = RefinementKind::Adaptive;
        config.numlevel = 2;
        Ok(Amr::from_deck(&deck, &config, 2)?
            .expect("adaptive")
            .criteria)
    }

    #[test]
    fn the_advection_block_tests_each_field_as_parthenons_example_does() {
        let c = criteria_of("advection: {refine_tol: 0.4, derefine_tol: 0.1}").unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(c[1].field, 1);
        let t = Test::Bounds {
            refine_tol: 0.4,
            derefine_tol: 0.1,
        };
        assert_eq!(c[0].test, t);
        // Measures: the largest value, minus the smallest.
        let flag = |max: f64, min: f64| c[0].flag(&[max, -min], 0);
        assert_eq!(flag(1.0, 0.0), RefinementFlag::Refine); // a front inside
        assert_eq!(flag(1.0, 0.5), RefinementFlag::Same); // inside the sphere
        assert_eq!(flag(0.05, 0.0), RefinementFlag::Derefine); // far from it
        assert_eq!(flag(0.3, 0.0), RefinementFlag::Same);
        assert_eq!(c[0].flag(&[1.0, 0.0], 1), RefinementFlag::Same); // at the finest level
        assert_eq!(
            c[0].kinds(),
            [MeasureKind::BlockMax, MeasureKind::BlockMaxNegated]
        );
    }

    #[test]
    fn refinement_blocks_replace_it_with_parthenons_methods() {
        let c = criteria_of(
            "parthenon/refinement0: {field: advected_1, method: magnitude, comparator: less_than, refine_tol: -0.2, derefine_tol: 0.5}\n\
             parthenon/refinement1: {field: advected, method: derivative_order_2}\n",
        )
        .unwrap();
        let t = |kind, refine_at, derefine_at| Test::Threshold {
            kind,
            refine_at,
            derefine_at,
        };
        assert_eq!(c.len(), 2);
        assert_eq!(
            (c[0].field, c[0].test),
            (1, t(MeasureKind::MaxNegated, 0.2, -0.5))
        );
        assert_eq!(
            (c[1].field, c[1].test),
            (0, t(MeasureKind::SecondDerivative, 0.5, 0.05))
        );
        // less_than refines where the smallest value is below refine_tol: 0.2 is -(-0.2).
        assert_eq!(c[0].flag(&[0.3], 0), RefinementFlag::Refine);
        assert_eq!(c[0].flag(&[-0.6], 0), RefinementFlag::Derefine);
        // With Parthenon's defaults (0.5, 0.05) less_than has its tolerances the wrong way
        // round: refused, saying they are defaults.
        let e = criteria_of(
            "parthenon/refinement0: {field: advected, method: magnitude, comparator: less_than}",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("0.05 (its default) must be above refine_tol, 0.5 (its default)"),
            "{e}"
        );
        let e = criteria_of("advection: {refine_tol: 0.1, derefine_tol: 0.2}").unwrap_err();
        assert!(
            e.to_string().contains("0.2 must be below refine_tol, 0.1"),
            "{e}"
        );
        let e = criteria_of("advection: {refine_tol: 0.01}").unwrap_err();
        let want =
            "advection/refine_tol at t.yaml:1: 0.01 must be above derefine_tol, 0.03 (its default)";
        assert!(e.to_string().contains(want), "{e}");
        // Equal tolerances leave no band between refining and merging: accepted.
        assert!(criteria_of("advection: {refine_tol: 0.1, derefine_tol: 0.1}").is_ok());
    }

    fn first_derivative(u: &[f64], geo: &Geo) -> f64 {
        measure(MeasureKind::FirstDerivative, u, geo)
    }

    #[test]
    fn measures_on_a_3d_block_are_those_of_each_cell_in_turn() {
        // Unequal sides, so a row or plane stride taken for another fails.
        let mut c = MeshConfig::new([6, 4, 8], [6, 4, 8]);
        c.refinement = RefinementKind::Adaptive;
        c.numlevel = 2;
        let geo = Geo::new(&Mesh::new(c, 1).unwrap(), 0);
        let s = [1, geo.dims[0], geo.dims[0] * geo.dims[1]];
        let cells: Vec<usize> = geo.interior().map(|p| geo.at(p)).collect();
        let npts: usize = geo.dims.iter().product();
        // Steep along one direction in turn, so the largest quotient is one along it, plus a
        // little noise, so a neighbour other than the true one gives other bits.
        for d in 0..3 {
            let mut u: Vec<f64> = (0..npts)
                .map(|i| {
                    let x = (i / s[d]) % geo.dims[d];
                    1.0 + 10.0 * (x * x) as f64 + (i * 37 % 101) as f64 / 101.0
                })
                .collect();
            // A ghost a measure must not see.
            u[0] = 1e9;
            let biggest =
                |f: &dyn Fn(usize) -> f64| cells.iter().map(|&c| f(c)).fold(f64::MIN, f64::max);
            let first = biggest(&|c| {
                let scale = 2.0 * u[c].abs() + TINY;
                (s.iter())
                    .map(|&s| (u[c + s] - u[c - s]).abs() / scale)
                    .fold(0.0, f64::max)
            });
            let second = biggest(&|c| {
                (s.iter())
                    .map(|&s| {
                        let avg = 0.5 * (u[c + s] + u[c - s]);
                        (avg - u[c]).abs() / (avg.abs() + (u[c].abs() + TINY))
                    })
                    .fold(0.0, f64::max)
            });
            assert_eq!(
                measure(MeasureKind::FirstDerivative, &u, &geo),
                first,
                "{d}"
            );
            assert_eq!(
                measure(MeasureKind::SecondDerivative, &u, &geo),
                second,
                "{d}"
            );
            assert_eq!(measure(MeasureKind::Max, &u, &geo), biggest(&|c| u[c]));
            assert_eq!(
                measure(MeasureKind::MaxNegated, &u, &geo),
                biggest(&|c| -u[c])
            );
            assert_eq!(measure(MeasureKind::BlockMax, &u, &geo), 1e9);
        }
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
            test: Test::Threshold {
                kind: MeasureKind::MaxNegated,
                refine_at: 2.0,
                derefine_at: -1.0,
            },
            ..criterion(0, 2)
        };
        assert_eq!(c.flag(&[3.0], 0), RefinementFlag::Refine);
        assert_eq!(c.flag(&[0.0], 0), RefinementFlag::Same);
        assert_eq!(c.flag(&[-1.5], 0), RefinementFlag::Derefine);
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
