//! The multigrid exchange: Parthenon's five `gmg_*` boundary types over the levels of the
//! mesh's multigrid hierarchy ([`Multigrid`](starhalo_mesh::multigrid::Multigrid)).
//!
//! Levels are numbered from 0, the finest (the leaf grid), to the coarsest. Each has its own
//! storage ([`GmgData`]) and is served by three kinds of traffic:
//!
//! | type | task functions | at level `l` |
//! |---|---|---|
//! | `gmg_same` | all four | ghost fill among the blocks of `l`, across level jumps of a composite level as the leaf fill does, then physical boundaries |
//! | `gmg_restrict_send` | `send` | volume-average `l`'s blocks towards level `l + 1` |
//! | `gmg_restrict_recv` | `start_receive`, `receive`, `set_bounds` | store what level `l - 1` restricted into `l`'s interiors |
//! | `gmg_prolongate_send` | `send` | send the (ghost-widened) boxes of `l` that cover level `l - 1`'s blocks |
//! | `gmg_prolongate_recv` | `start_receive`, `receive`, `set_bounds` | prolongate level `l + 1` onto `l`'s interiors |
//!
//! `gmg_same` is the leaf ghost exchange ([`Exchange`]) built on the level's blocks
//! ([`LevelBlocks`]), so every mode and guarantee of the leaf fill holds on every level.
//! Restriction and prolongation overwrite the destination interior; the prolongation operator
//! of a variable is [`Prolongation::Linear`] (exact for linear fields), or
//! [`Prolongation::Constant`] for a variable without ghosts (its coarse ghosts are never
//! filled, so slopes could not be read); [`GmgExchange::set_prolongation`] changes it.
//! Prolongation reads the coarse level's ghosts: fill them (`gmg_same`) first.
//!
//! [`GmgExchange::restrict_down`] and [`GmgExchange::prolongate_up`] run the two legs of a
//! V-cycle with these tasks.

pub mod level;
pub mod ops;
mod transfer;

pub use level::{level_blocks_of, level_shapes, GmgData, LevelBlocks};
pub use ops::Placement;

use starhalo_mesh::Mesh;
use starhalo_sf::mpi::topology::{Communicator, SimpleCommunicator};
use starhalo_sf::p2p;
use std::time::Duration;

use crate::collective;
use crate::error::BoundaryError;
use crate::exchange::{BoundaryType, Exchange, ExchangeOptions, TaskStatus, Traffic};
use crate::patience::Patience;
use crate::prolong_restrict::Prolongation;
use level::missing;
use transfer::{Kind, Transfer};

/// Which task function is asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Task {
    StartReceive,
    Send,
    Receive,
    SetBounds,
}

/// What a (task, type, level) triple works on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// The ghost exchange of a level.
    Same(usize),
    /// Restriction from level `i` into `i + 1`.
    Restrict(usize),
    /// Prolongation from level `i + 1` onto `i`.
    Prolongate(usize),
}

fn target(
    task: Task,
    ty: BoundaryType,
    level: usize,
    levels: usize,
) -> Result<Target, BoundaryError> {
    if level >= levels {
        return Err(missing(level, levels));
    }
    let err = |why| BoundaryError::GmgLevel { level, levels, why };
    let sending = task == Task::Send;
    let coarsest = level + 1 == levels;
    match ty {
        BoundaryType::GmgSame => Ok(Target::Same(level)),
        BoundaryType::GmgRestrictSend if sending => match coarsest {
            false => Ok(Target::Restrict(level)),
            true => Err(err(
                "the coarsest level has no coarser level to restrict into",
            )),
        },
        BoundaryType::GmgRestrictRecv if !sending => match level {
            0 => Err(err("the finest level has no finer level to restrict from")),
            _ => Ok(Target::Restrict(level - 1)),
        },
        BoundaryType::GmgProlongateSend if sending => match level {
            0 => Err(err(
                "the finest level has no finer level to prolongate into",
            )),
            _ => Ok(Target::Prolongate(level - 1)),
        },
        BoundaryType::GmgProlongateRecv if !sending => match coarsest {
            false => Ok(Target::Prolongate(level)),
            true => Err(err(
                "the coarsest level has no coarser level to prolongate from",
            )),
        },
        // Leaf types, or a sending type given to a receiving task (or the reverse).
        _ => Err(BoundaryError::Unsupported(ty.name())),
    }
}

/// The multigrid exchange of one rank.
pub struct GmgExchange {
    same: Vec<Exchange>,
    /// Transfer `i` connects levels `i` and `i + 1`.
    restrict: Vec<Transfer>,
    prolong: Vec<Transfer>,
    comm: SimpleCommunicator,
    names: Vec<String>,
    fill_ghost: Vec<bool>,
    slots: Vec<std::ops::Range<usize>>,
    /// Prolongation operator per variable slot.
    slot_ops: Vec<Prolongation>,
    /// How long a round waits for its messages; `None`: as long as it takes.
    timeout: Option<Duration>,
}

impl GmgExchange {
    /// The multigrid exchange of this rank of `comm` over the levels of `data` (built for
    /// this rank from `mesh`). Collective: every rank of `comm` must call it.
    pub fn new(
        comm: &SimpleCommunicator,
        mesh: &Mesh,
        data: &GmgData,
        opts: ExchangeOptions,
    ) -> Result<Self, BoundaryError> {
        let rank = comm.rank() as usize;
        let levels = data.multigrid().levels();
        // Storage built for another rank, or before a remesh, would leave peers waiting on
        // messages that never come: check, and decide together.
        let current = mesh.multigrid()?;
        let same_hierarchy = current.levels().len() == levels.len()
            && current.levels().iter().zip(levels).all(|(a, b)| {
                a.forest.leaves() == b.forest.leaves()
                    && a.ranks == b.ranks
                    && a.block_nx == b.block_nx
            });
        let mut bad = None;
        if !same_hierarchy || levels.len() != data.len() {
            bad = Some(format!(
                "the multigrid storage ({} levels) was not built for this mesh ({} levels)",
                data.len(),
                current.levels().len()
            ));
        }
        for (i, l) in levels.iter().enumerate() {
            if data.level(i).map(|d| d.gids()).ok() != Some(&level_blocks_of(l, rank)[..]) {
                bad = Some(format!(
                    "the storage of multigrid level {i} does not hold rank {rank}'s blocks"
                ));
            }
        }
        collective::agree(
            comm,
            bad.map_or(Ok(()), |m| Err(BoundaryError::Mismatch(m))),
            "another rank's multigrid storage does not match the mesh",
        )?;

        let mut same = Vec::with_capacity(levels.len());
        for (i, l) in levels.iter().enumerate() {
            let blocks = LevelBlocks { mesh, level: l };
            same.push(Exchange::new(comm, &blocks, data.level(i)?, opts)?);
        }
        let inter = comm.duplicate();
        let tags_needed = 2 * levels.len();
        let tag_ub = p2p::tag_ub(&inter);
        if tags_needed > tag_ub {
            return Err(BoundaryError::TagOverflow {
                rank,
                peer: rank,
                tag: tags_needed,
                channels: levels.len(),
                tag_ub,
            });
        }
        // Each rank builds only its own links, which can fail (geometry, memory) on one rank
        // alone: agreed, so that no rank goes on to wait in a round for one that stopped.
        let transfers = (0..levels.len().saturating_sub(1)).try_fold(
            (Vec::new(), Vec::new()),
            |(mut restrict, mut prolong), i| {
                let fine = (&levels[i], data.level(i)?);
                let coarse = (&levels[i + 1], data.level(i + 1)?);
                let tag = 2 * i as i32;
                restrict.push(Transfer::new(Kind::Restrict, tag, rank, fine, coarse)?);
                prolong.push(Transfer::new(
                    Kind::Prolongate,
                    tag + 1,
                    rank,
                    fine,
                    coarse,
                )?);
                Ok((restrict, prolong))
            },
        );
        let (restrict, prolong) = collective::agree(
            comm,
            transfers,
            "another rank could not set up its multigrid transfers",
        )?;
        let vars = data.level(0)?.vars();
        let mut ex = Self {
            same,
            restrict,
            prolong,
            comm: inter,
            names: vars.iter().map(|v| v.name.clone()).collect(),
            fill_ghost: vars.iter().map(|v| v.fill_ghost).collect(),
            slots: vars.iter().map(|v| v.slots.clone()).collect(),
            slot_ops: vec![Prolongation::Constant; data.level(0)?.slot_defaults().len()],
            timeout: None,
        };
        for v in 0..ex.names.len() {
            let op = if ex.fill_ghost[v] {
                Prolongation::Linear
            } else {
                Prolongation::Constant
            };
            ex.set_prolongation(v, op)?;
        }
        Ok(ex)
    }

    /// Makes each round of [`fill`](Self::fill), [`restrict`](Self::restrict) and
    /// [`prolongate`](Self::prolongate) fail with [`BoundaryError::Timeout`] once it has
    /// waited `timeout` for its messages, rather than wait for ever on a stuck peer.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = Some(timeout);
    }

    /// Number of levels.
    pub fn levels(&self) -> usize {
        self.same.len()
    }

    /// Sets the prolongation operator of variable `var`, for the transfers between levels
    /// and for the level jumps of the composite levels' ghost fill.
    pub fn set_prolongation(&mut self, var: usize, op: Prolongation) -> Result<(), BoundaryError> {
        let Some(slots) = self.slots.get(var).cloned() else {
            return Err(BoundaryError::Invalid(format!(
                "no variable {var} (there are {})",
                self.slots.len()
            )));
        };
        if op != Prolongation::Constant && !self.fill_ghost[var] {
            return Err(BoundaryError::Invalid(format!(
                "variable `{}` has no ghosts, so its prolongation cannot read slopes: \
                 only the constant operator applies",
                self.names[var]
            )));
        }
        for ex in &mut self.same {
            ex.set_prolongation(var, op)?;
        }
        self.slot_ops[slots].fill(op);
        Ok(())
    }

    /// Messages and bytes this rank has sent, all levels and types together.
    pub fn traffic(&self) -> Traffic {
        let t = self.same.iter().map(Exchange::traffic).chain(
            self.restrict
                .iter()
                .chain(&self.prolong)
                .map(|t| t.traffic()),
        );
        t.fold(Traffic::default(), |a, b| Traffic {
            messages: a.messages + b.messages,
            bytes: a.bytes + b.bytes,
        })
    }

    fn target(&self, task: Task, ty: BoundaryType, level: usize) -> Result<Target, BoundaryError> {
        target(task, ty, level, self.levels())
    }

    /// Posts the receives of type `ty` at `level` (`gmg_same`, `gmg_restrict_recv`,
    /// `gmg_prolongate_recv`).
    pub fn start_receive(
        &mut self,
        level: usize,
        ty: BoundaryType,
    ) -> Result<TaskStatus, BoundaryError> {
        match self.target(Task::StartReceive, ty, level)? {
            Target::Same(l) => {
                let ex = &mut self.same[l];
                // A level has at most one partition per rank (none without blocks).
                for p in 0..ex.partitions() {
                    ex.start_receive(p, BoundaryType::Any)?;
                }
            }
            Target::Restrict(i) => self.restrict[i].start_receive(&self.comm)?,
            Target::Prolongate(i) => self.prolong[i].start_receive(&self.comm)?,
        }
        Ok(TaskStatus::Complete)
    }

    /// Packs and sends type `ty` from `level` (`gmg_same`, `gmg_restrict_send`,
    /// `gmg_prolongate_send`); `Incomplete` while the previous round has not been consumed
    /// by same-rank receivers or (restriction, prolongation) is still in flight.
    pub fn send(
        &mut self,
        level: usize,
        ty: BoundaryType,
        data: &mut GmgData,
    ) -> Result<TaskStatus, BoundaryError> {
        match self.target(Task::Send, ty, level)? {
            Target::Same(l) => {
                let ex = &mut self.same[l];
                let d = data.level_mut(l)?;
                for p in 0..ex.partitions() {
                    if ex.send(p, BoundaryType::Any, d)? == TaskStatus::Incomplete {
                        return Ok(TaskStatus::Incomplete);
                    }
                }
                Ok(TaskStatus::Complete)
            }
            Target::Restrict(i) => self.restrict[i].send(&self.comm, data.level(i)?),
            Target::Prolongate(i) => self.prolong[i].send(&self.comm, data.level(i + 1)?),
        }
    }

    /// Polls type `ty` at `level` (`gmg_same`, `gmg_restrict_recv`, `gmg_prolongate_recv`):
    /// `Incomplete` until everything has arrived.
    pub fn receive(&mut self, level: usize, ty: BoundaryType) -> Result<TaskStatus, BoundaryError> {
        match self.target(Task::Receive, ty, level)? {
            Target::Same(l) => {
                let ex = &mut self.same[l];
                let mut status = TaskStatus::Complete;
                for p in 0..ex.partitions() {
                    if ex.receive(p, BoundaryType::Any)? == TaskStatus::Incomplete {
                        status = TaskStatus::Incomplete;
                    }
                }
                Ok(status)
            }
            Target::Restrict(i) => self.restrict[i].receive(&self.comm),
            Target::Prolongate(i) => self.prolong[i].receive(&self.comm),
        }
    }

    /// Writes what arrived for type `ty` at `level` into its storage (`gmg_same`: ghosts, then
    /// prolongation across level jumps and physical boundaries; `gmg_restrict_recv`: restricted
    /// interiors; `gmg_prolongate_recv`: prolongated interiors); `Incomplete` until
    /// [`receive`](Self::receive) has reported everything.
    pub fn set_bounds(
        &mut self,
        level: usize,
        ty: BoundaryType,
        data: &mut GmgData,
    ) -> Result<TaskStatus, BoundaryError> {
        match self.target(Task::SetBounds, ty, level)? {
            Target::Same(l) => {
                let ex = &mut self.same[l];
                let d = data.level_mut(l)?;
                for p in 0..ex.partitions() {
                    if ex.set_bounds(p, BoundaryType::Any, d)? == TaskStatus::Incomplete {
                        return Ok(TaskStatus::Incomplete);
                    }
                    ex.finish(p, d)?;
                }
                Ok(TaskStatus::Complete)
            }
            Target::Restrict(i) => self.restrict[i].set_bounds(data.level_mut(i + 1)?, &[]),
            Target::Prolongate(i) => self.prolong[i].set_bounds(data.level_mut(i)?, &self.slot_ops),
        }
    }

    /// One whole round: receives posted at `to` for `recv_ty`, sent from `from` as `send_ty`,
    /// polled until everything arrived, and set.
    fn round(
        &mut self,
        (from, send_ty): (usize, BoundaryType),
        (to, recv_ty): (usize, BoundaryType),
        data: &mut GmgData,
    ) -> Result<(), BoundaryError> {
        let patience = Patience::new(self.timeout);
        let what = || format!("multigrid `{}` at level {to}", recv_ty.name());
        self.start_receive(to, recv_ty)?;
        while self.send(from, send_ty, data)? == TaskStatus::Incomplete {
            patience.poll(what)?;
        }
        while self.receive(to, recv_ty)? == TaskStatus::Incomplete {
            patience.poll(what)?;
        }
        match self.set_bounds(to, recv_ty, data)? {
            TaskStatus::Complete => Ok(()),
            TaskStatus::Incomplete => Err(BoundaryError::Mismatch(format!(
                "`{}` at level {to} arrived but could not be set",
                recv_ty.name()
            ))),
        }
    }

    /// Fills the ghosts of `level` (`gmg_same`).
    pub fn fill(&mut self, level: usize, data: &mut GmgData) -> Result<(), BoundaryError> {
        let t = (level, BoundaryType::GmgSame);
        self.round(t, t, data)
    }

    /// Restricts `level` into `level + 1` (`gmg_restrict_send` / `gmg_restrict_recv`).
    pub fn restrict(&mut self, level: usize, data: &mut GmgData) -> Result<(), BoundaryError> {
        self.round(
            (level, BoundaryType::GmgRestrictSend),
            (level + 1, BoundaryType::GmgRestrictRecv),
            data,
        )
    }

    /// Prolongates `level + 1` onto `level` (`gmg_prolongate_send` / `gmg_prolongate_recv`);
    /// `level + 1`'s ghosts must be filled.
    pub fn prolongate(&mut self, level: usize, data: &mut GmgData) -> Result<(), BoundaryError> {
        self.round(
            (level + 1, BoundaryType::GmgProlongateSend),
            (level, BoundaryType::GmgProlongateRecv),
            data,
        )
    }

    /// The downward leg of a V-cycle: restricts every level into the next coarser one, from
    /// the finest down, filling each coarser level's ghosts once it is restricted.
    pub fn restrict_down(&mut self, data: &mut GmgData) -> Result<(), BoundaryError> {
        for i in 0..self.levels().saturating_sub(1) {
            self.restrict(i, data)?;
            self.fill(i + 1, data)?;
        }
        Ok(())
    }

    /// The upward leg of a V-cycle: from the coarsest level up, fills a level's ghosts and
    /// prolongates it onto the next finer one; ends with the finest level's ghosts filled.
    pub fn prolongate_up(&mut self, data: &mut GmgData) -> Result<(), BoundaryError> {
        for i in (0..self.levels().saturating_sub(1)).rev() {
            self.fill(i + 1, data)?;
            self.prolongate(i, data)?;
        }
        self.fill(0, data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use BoundaryType::*;

    #[test]
    fn each_type_serves_its_tasks_at_levels_that_have_a_partner() {
        let n = 4;
        for t in [
            Task::StartReceive,
            Task::Send,
            Task::Receive,
            Task::SetBounds,
        ] {
            for l in 0..n {
                assert_eq!(target(t, GmgSame, l, n), Ok(Target::Same(l)));
            }
            // Leaf types are not multigrid types.
            for ty in [Any, Local, Nonlocal, FlxcorSend, FlxcorRecv] {
                assert_eq!(
                    target(t, ty, 0, n),
                    Err(BoundaryError::Unsupported(ty.name()))
                );
            }
            assert_eq!(target(t, GmgSame, n, n), Err(missing(n, n)));
        }
        let s = Task::Send;
        assert_eq!(target(s, GmgRestrictSend, 2, n), Ok(Target::Restrict(2)));
        assert_eq!(
            target(s, GmgProlongateSend, 2, n),
            Ok(Target::Prolongate(1))
        );
        for t in [Task::StartReceive, Task::Receive, Task::SetBounds] {
            assert_eq!(target(t, GmgRestrictRecv, 2, n), Ok(Target::Restrict(1)));
            assert_eq!(
                target(t, GmgProlongateRecv, 2, n),
                Ok(Target::Prolongate(2))
            );
            // A sending type asked to receive.
            assert!(matches!(
                target(t, GmgRestrictSend, 1, n),
                Err(BoundaryError::Unsupported("gmg_restrict_send"))
            ));
        }
        assert!(matches!(
            target(s, GmgProlongateRecv, 1, n),
            Err(BoundaryError::Unsupported(_))
        ));
        // Nothing to restrict into below the coarsest level, nor to prolongate from; nothing
        // finer than the finest.
        let edge = |r: Result<Target, BoundaryError>, level| match r {
            Err(BoundaryError::GmgLevel {
                level: l, levels, ..
            }) => (l, levels) == (level, 4),
            _ => false,
        };
        assert!(edge(target(s, GmgRestrictSend, 3, n), 3));
        assert!(edge(target(s, GmgProlongateSend, 0, n), 0));
        assert!(edge(target(Task::Receive, GmgRestrictRecv, 0, n), 0));
        assert!(edge(target(Task::SetBounds, GmgProlongateRecv, 3, n), 3));
        // One level: only gmg_same.
        assert!(target(s, GmgRestrictSend, 0, 1).is_err());
        assert_eq!(target(s, GmgSame, 0, 1), Ok(Target::Same(0)));
    }
}
