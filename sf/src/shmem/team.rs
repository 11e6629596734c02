//! Teams of PEs (`start + i·2^log_stride`, `i < size`) and their collectives on symmetric
//! objects, each one MPI collective on the team's communicator. Communicators are made with
//! `MPI_Comm_create_group`, so only the members take part, and kept for reuse.

use super::{Shmem, Symmetric};
use crate::error::SfError;
use crate::unit::{Op, Scalar};
use mpi::collective::SystemOperation;
use mpi::datatype::PartitionMut;
use mpi::topology::{Communicator, Group, SimpleCommunicator};
use mpi::traits::{CommunicatorCollectives, Equivalence, Root};
use std::rc::Rc;
use std::sync::atomic::{fence, Ordering};

/// A set of PEs of a [`Shmem`] that run collectives together.
pub struct Team<'h> {
    shmem: &'h Shmem,
    comm: Rc<SimpleCommunicator>,
    start: usize,
    stride: usize,
    size: usize,
}

impl Shmem {
    /// Every PE.
    pub fn world(&self) -> Team<'_> {
        self.team(0, 0, self.n_pes())
            .expect("every PE is a member of the world team")
    }

    /// The team of PEs `start + i·2^log_stride` for `i < size` (OpenSHMEM's triplet). Called
    /// by the members only; the first call for a triplet is collective over them, later ones
    /// reuse its communicator. A triplet that leaves the PEs gives [`SfError::BadTeam`], and a
    /// call from a PE outside it [`SfError::NotInTeam`].
    pub fn team(&self, start: usize, log_stride: u32, size: usize) -> Result<Team<'_>, SfError> {
        let npes = self.n_pes();
        let stride = 1usize.checked_shl(log_stride).unwrap_or(0);
        let last = (size.checked_sub(1))
            .and_then(|s| s.checked_mul(stride))
            .and_then(|x| x.checked_add(start));
        if stride == 0 || last.is_none_or(|l| l >= npes) {
            return Err(SfError::BadTeam {
                start,
                log_stride,
                size,
                npes,
            });
        }
        let me = self.my_pe();
        if me < start || !(me - start).is_multiple_of(stride) || (me - start) / stride >= size {
            return Err(SfError::NotInTeam { pe: me });
        }
        let key = (start, log_stride, size);
        let cached = self.teams.borrow().get(&key).cloned();
        let comm = match cached {
            Some(c) => c,
            None => {
                let ranks: Vec<i32> = (0..size).map(|i| (start + i * stride) as i32).collect();
                let group = self.comm.group().include(&ranks);
                let comm = self
                    .comm
                    .split_by_subgroup(&group)
                    .expect("a member of the group gets its communicator");
                let comm = Rc::new(comm);
                self.teams.borrow_mut().insert(key, comm.clone());
                comm
            }
        };
        Ok(Team {
            shmem: self,
            comm,
            start,
            stride,
            size,
        })
    }
}

impl<'h> Team<'h> {
    /// This PE's number in the team.
    pub fn my_pe(&self) -> usize {
        self.comm.rank() as usize
    }

    /// How many PEs the team has.
    pub fn n_pes(&self) -> usize {
        self.size
    }

    /// The heap's number of the team's PE `pe`, if there is one.
    pub fn world_pe(&self, pe: usize) -> Option<usize> {
        (pe < self.size).then(|| self.start + pe * self.stride)
    }

    /// Collective: a [`quiet`](Shmem::quiet) on every member, then a barrier
    /// (`shmem_barrier`); afterwards every member sees every update made before it.
    pub fn barrier(&self) {
        self.shmem.quiet();
        self.comm.barrier();
        self.shmem.heap.sync();
        fence(Ordering::SeqCst);
    }

    /// Collective: `src` of team PE `root` into `dest` on every member, `dest` of `root`
    /// included (`shmem_broadcast`).
    pub fn broadcast<T: bytemuck::Pod + Equivalence>(
        &self,
        dest: &mut Symmetric<'h, T>,
        src: &Symmetric<'h, T>,
        root: usize,
    ) -> Result<(), SfError> {
        if root >= self.size {
            return Err(SfError::PeOutOfRange {
                pe: root,
                npes: self.size,
            });
        }
        let n = room(dest, src.len())?;
        let out = &mut dest.local_mut()[..n];
        if self.my_pe() == root {
            out.copy_from_slice(src.local());
        }
        self.comm.process_at_rank(root as i32).broadcast_into(out);
        Ok(())
    }

    /// Collective: `dest[i] = op` over every member's `src[i]` (`shmem_<op>_reduce`).
    pub fn reduce<T: Scalar + Equivalence>(
        &self,
        dest: &mut Symmetric<'h, T>,
        src: &Symmetric<'h, T>,
        op: Op,
    ) -> Result<(), SfError> {
        let system = match op {
            _ if T::reducer(op).is_none() => None,
            Op::Replace => None,
            Op::Sum => Some(SystemOperation::sum()),
            Op::Prod => Some(SystemOperation::product()),
            Op::Min => Some(SystemOperation::min()),
            Op::Max => Some(SystemOperation::max()),
            Op::Land => Some(SystemOperation::logical_and()),
            Op::Lor => Some(SystemOperation::logical_or()),
            Op::Band => Some(SystemOperation::bitwise_and()),
            Op::Bor => Some(SystemOperation::bitwise_or()),
            Op::Bxor => Some(SystemOperation::bitwise_xor()),
        };
        let system = system.ok_or(SfError::UnsupportedOp { op, unit: T::NAME })?;
        let n = room(dest, src.len())?;
        self.comm
            .all_reduce_into(src.local(), &mut dest.local_mut()[..n], system);
        Ok(())
    }

    /// Collective: every member's `src`, in team order, into `dest` (`shmem_fcollect`).
    pub fn fcollect<T: bytemuck::Pod + Equivalence>(
        &self,
        dest: &mut Symmetric<'h, T>,
        src: &Symmetric<'h, T>,
    ) -> Result<(), SfError> {
        let n = room(dest, src.len().saturating_mul(self.size))?;
        self.comm
            .all_gather_into(src.local(), &mut dest.local_mut()[..n]);
        Ok(())
    }

    /// Collective: the first `n` values of each member's `src` (`n` may differ between
    /// members), in team order, into `dest` (`shmem_collect`); returns how many values
    /// `dest` received.
    pub fn collect<T: bytemuck::Pod + Equivalence>(
        &self,
        dest: &mut Symmetric<'h, T>,
        src: &Symmetric<'h, T>,
        n: usize,
    ) -> Result<usize, SfError> {
        // A member asking for more than its `src` holds sends -1, so every member fails.
        let mine = match n <= src.len() {
            true => i32::try_from(n).unwrap_or(i32::MAX),
            false => -1,
        };
        let mut counts = vec![0i32; self.size];
        self.comm.all_gather_into(&mine, &mut counts[..]);
        if let Some(bad) = counts.iter().position(|&c| c < 0) {
            return Err(match n > src.len() {
                true => SfError::IndexOutOfRange {
                    what: "values to collect",
                    index: n - 1,
                    len: src.len(),
                },
                false => SfError::PeerInvalid(self.world_pe(bad).unwrap_or(bad) as i32),
            });
        }
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        let total = room(dest, total)?;
        let displs: Vec<i32> = counts
            .iter()
            .scan(0i32, |at, &c| {
                let d = *at;
                *at = at.saturating_add(c);
                Some(d)
            })
            .collect();
        let mut out = PartitionMut::new(&mut dest.local_mut()[..total], &counts[..], &displs[..]);
        self.comm
            .all_gather_varcount_into(&src.local()[..n], &mut out);
        Ok(total)
    }
}

/// `need`, once `dest` is checked to hold that many values.
fn room<T>(dest: &Symmetric<'_, T>, need: usize) -> Result<usize, SfError>
where
    T: bytemuck::Pod,
{
    match need <= dest.len() {
        true => Ok(need),
        false => Err(SfError::IndexOutOfRange {
            what: "destination object",
            index: need.saturating_sub(1),
            len: dest.len(),
        }),
    }
}
