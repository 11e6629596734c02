//! The solve's outputs (`parthenon/outputN` blocks of `file_type` `hdf5`, `hst` or `png`):
//! three cell fields of the finest level,
//!
//! - `potential`: the solution `u` so far;
//! - `density`: the right-hand side `f` (Parthenon's example names its source so);
//! - `error`: `u` less the exact solution (and less `u`'s mean where `u` is fixed only up to a
//!   constant), 0 in ghost cells.
//!
//! The V-cycle count is the output cycle and the time stays 0: every output writes before the
//! first V-cycle, those with `dn` every `dn` V-cycles, and all of them the `final` state. There
//! are no restart files (`rst` is bad input).

use super::solver::Solver;
use super::Poisson;
use crate::deck::Deck;
use crate::output::{schedule, write_output, FileType, OutputBlock, Schedule, Snapshot};
use crate::run::stats::CommTimer;
use crate::run::RunContext;
use anyhow::{Context as _, Result};
use starhalo_boundary::FieldLayout;
use starhalo_mesh::field::{Centering, Fields, Metadata};
use starhalo_mesh::Mesh;

/// The fields every output may write, in their slot order.
const FIELDS: [&str; 3] = ["potential", "density", "error"];

/// The output blocks of `deck`, checked against the mesh and the fields.
pub(super) fn from_deck(deck: &Deck, mesh: &Mesh) -> Result<Vec<OutputBlock>> {
    let outputs = crate::run::output_blocks::blocks_of(deck)?;
    let fields = fields();
    for o in &outputs {
        if o.file_type == FileType::Restart {
            return Err(deck
                .invalid(
                    &o.block,
                    "file_type",
                    "poisson writes no restart files (its outputs: hdf5, hst, png)",
                )
                .into());
        }
        crate::run::output_blocks::check(deck, o, mesh, &fields)?;
        if let (Some(_), Some(at)) = (o.dt, deck.origin(&o.block, "dt")) {
            tracing::warn!(
                "{}/dt (at {at}): poisson's time stays 0, so this output writes before the first V-cycle and at the end; dn counts V-cycles",
                o.block
            );
        }
    }
    Ok(outputs)
}

fn fields() -> Fields {
    let mut f = Fields::default();
    for name in FIELDS {
        f.add(name, Metadata::new(Centering::Cell))
            .expect("distinct valid names");
    }
    f
}

/// The outputs of one solve and where each stands.
pub(super) struct Outputs<'a> {
    blocks: &'a [OutputBlock],
    sched: Vec<Schedule>,
    fields: Fields,
    deck: &'a str,
}

impl<'a> Outputs<'a> {
    pub(super) fn new(blocks: &'a [OutputBlock], deck: &'a str) -> Self {
        Self {
            blocks,
            sched: vec![Schedule::new(0.0); blocks.len()],
            fields: fields(),
            deck,
        }
    }

    /// Writes every output due after `cycle` V-cycles (all of them, `final`, when `last`);
    /// collective.
    pub(super) fn write(
        &mut self,
        p: &Poisson,
        s: &mut Solver,
        ctx: &RunContext,
        comm: &CommTimer,
        cycle: u64,
        last: bool,
    ) -> Result<()> {
        let due = schedule::due_outputs(self.blocks, &mut self.sched, (0.0, cycle), last);
        if due.is_empty() {
            return Ok(());
        }
        s.fill_u(0)?;
        let mean = p.mean(s, ctx, comm)?;
        let grid = &s.grids[0];
        let u = s.u.level(0)?;
        let len = s.block_len(0);
        let mut data = Vec::with_capacity(u.gids().len() * FIELDS.len() * len);
        for b in 0..u.gids().len() {
            let ub = &u.fine(b, 0)[..len];
            data.extend_from_slice(ub);
            data.extend_from_slice(&s.f[0][b * len..][..len]);
            let at = data.len();
            data.resize(at + len, 0.0);
            for q in grid.interior() {
                let i = grid.at(q);
                data[at + i] = ub[i] - mean - p.exact(p.center(grid, b, q));
            }
        }
        let layout = FieldLayout {
            dims: grid.dims,
            nvar: FIELDS.len(),
        };
        let allocated = vec![true; u.gids().len() * FIELDS.len()];
        let snap = Snapshot {
            mesh: &p.mesh,
            fields: &self.fields,
            layout,
            nghost: p.mesh.config().nghost,
            gids: u.gids(),
            data: &data,
            stride: layout.block_len(),
            allocated: &allocated,
            cycle,
            time: 0.0,
            dt: 0.0,
            wall_time: ctx.deadline.elapsed().as_secs_f64(),
            deck: self.deck,
            params: &[],
        };
        for (i, number) in due {
            let o = &self.blocks[i];
            write_output(ctx.world, &snap, o, &ctx.problem_id, &ctx.out_dir, number)
                .with_context(|| format!("writing output {}", o.block))?;
        }
        Ok(())
    }
}
