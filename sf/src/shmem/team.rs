//! Teams of PEs (`start + i·2^log_stride`, `i < size`) and their collectives on symmetric
//! objects, each one MPI collective on the team's communicator. Communicators are made with
//! `MPI_Comm_create_group`, so only the members take part, and kept for reuse.

use super::{Shmem, Symmetric};
use crate::discovery::fingerprint;
use crate::error::SfError;
use crate::unit::{Op, Scalar};
use mpi::collective::SystemOperation;
use mpi::datatype::PartitionMut;
use mpi::topology::{Communicator, Group, SimpleCommunicator};
use mpi::traits::{CommunicatorCollectives, Equivalence, Root};
use std::mem::size_of;
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
    /// call from a PE outside it [`SfError::NotInTeam`]. Every member must pass the same
    /// triplet: only the members take part, so a member that asks for another team (or a bad
    /// one) cannot be told apart from one that is late, and the others wait for it.
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
        let mine = match root < self.size {
            true => room(dest, src.len()).map(drop),
            false => Err(SfError::PeOutOfRange {
                pe: root,
                npes: self.size,
            }),
        };
        self.agree(mine, &[root, src.len(), dest.len(), size_of::<T>()])?;
        let n = src.len();
        // SAFETY: members write neither object during a collective on them (the collective's
        // contract, as in OpenSHMEM); the two are distinct objects.
        let (from, out) = unsafe { (src.local(), &mut dest.local_mut()[..n]) };
        if self.my_pe() == root {
            out.copy_from_slice(from);
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
        let mine = match system {
            Some(_) => room(dest, src.len()).map(drop),
            None => Err(SfError::UnsupportedOp { op, unit: T::NAME }),
        };
        let name = fingerprint(T::NAME.bytes().map(u64::from)) as usize;
        self.agree(mine, &[op as usize, src.len(), dest.len(), name])?;
        // Refused above on every member when there is none.
        let system = system.ok_or(SfError::UnsupportedOp { op, unit: T::NAME })?;
        let n = src.len();
        // SAFETY: as in `broadcast`.
        let (from, out) = unsafe { (src.local(), &mut dest.local_mut()[..n]) };
        self.comm.all_reduce_into(from, out, system);
        Ok(())
    }

    /// Collective: every member's `src`, in team order, into `dest` (`shmem_fcollect`).
    pub fn fcollect<T: bytemuck::Pod + Equivalence>(
        &self,
        dest: &mut Symmetric<'h, T>,
        src: &Symmetric<'h, T>,
    ) -> Result<(), SfError> {
        let n = src.len().saturating_mul(self.size);
        self.agree(
            room(dest, n).map(drop),
            &[src.len(), dest.len(), size_of::<T>()],
        )?;
        // SAFETY: as in `broadcast`.
        let (from, out) = unsafe { (src.local(), &mut dest.local_mut()[..n]) };
        self.comm.all_gather_into(from, out);
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
        let mine = match n <= src.len() && i32::try_from(n).is_ok() {
            true => Ok(()),
            false => Err(SfError::IndexOutOfRange {
                what: "values to collect",
                index: n.saturating_sub(1),
                len: src.len(),
            }),
        };
        self.agree(mine, &[src.len(), dest.len(), size_of::<T>()])?;
        let mut counts = vec![0i32; self.size];
        self.comm.all_gather_into(&(n as i32), &mut counts[..]);
        // Every member has the same counts and the same `dest` length: the same verdict.
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        if i32::try_from(total).is_err() {
            return Err(SfError::IndexOutOfRange {
                what: "collected values (MPI counts them in an int)",
                index: total - 1,
                len: i32::MAX as usize,
            });
        }
        let total = room(dest, total)?;
        let displs: Vec<i32> = counts
            .iter()
            .scan(0i32, |at, &c| {
                let d = *at;
                *at = at.saturating_add(c);
                Some(d)
            })
            .collect();
        // SAFETY: as in `broadcast`.
        let (from, out) = unsafe { (&src.local()[..n], &mut dest.local_mut()[..total]) };
        let mut out = PartitionMut::new(out, &counts[..], &displs[..]);
        self.comm.all_gather_varcount_into(from, &mut out);
        Ok(total)
    }

    /// Agrees before a collective moves data: every member's own error, or
    /// [`SfError::PeerInvalid`] naming the first member that had one, or
    /// [`SfError::Disagree`] when the members' `args` differ. One reduction.
    fn agree(&self, mine: Result<(), SfError>, args: &[usize]) -> Result<(), SfError> {
        let print = fingerprint(args.iter().map(|&a| a as u64));
        // Small numbers, so that the maximum is the same read signed or unsigned.
        let failed = match mine {
            Err(_) => (self.size - self.my_pe()) as u64,
            Ok(()) => 0,
        };
        let mut got = [0u64; 3];
        self.comm.all_reduce_into(
            &[failed, print, !print][..],
            &mut got[..],
            SystemOperation::max(),
        );
        mine?;
        if got[0] != 0 {
            let first = self.size - got[0] as usize;
            return Err(SfError::PeerInvalid(
                self.world_pe(first).unwrap_or(first) as i32
            ));
        }
        match got[1] == !got[2] {
            true => Ok(()),
            false => Err(SfError::Disagree("collective arguments")),
        }
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
