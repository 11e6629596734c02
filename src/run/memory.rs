//! How many blocks fit in the memory a job has. A mesh that cannot fit is refused before its
//! blocks are made, with a message saying why, instead of ending in the allocator's abort or
//! the kernel's OOM killer half-way through building it or through a runaway refinement.
//!
//! The cost of a block is a lower bound (0.6 to 0.98 of what advection measures on uniform
//! meshes of 2 to 64 cells a side in 2-D and 3-D, the least for the smallest blocks), so a
//! mesh is refused only when it surely does not fit. A remesh builds the new blocks beside the
//! old ones, so it is checked against the memory left at that moment. A mesh between the bound
//! and what it truly needs ends when an allocation is refused: the large ones are fallible and
//! say what did not fit, any other ends the job with exit code 1 and a message
//! ([`crate::exit::on_out_of_memory`]).

use crate::deck::Deck;
use crate::exit::bad_input;
use mpi::collective::SystemOperation;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::CommunicatorCollectives;
use starhalo_mesh::{MeshConfig, MeshError};

/// Bytes of a block's channel ends per neighbour and variable (measured: 760 to 960 B).
const CHANNEL_BYTES: u64 = 512;
/// Bytes of a block's place in the tree, its neighbour records and partition entry, which
/// every rank holds for every block (measured: about 2.4 KiB in 2-D).
const TREE_BYTES: u64 = 512;
/// Bytes of one neighbour record in the tree, held by every rank.
const NEIGHBOR_BYTES: u64 = 32;

/// The memory of a job.
#[derive(Debug, Clone, Copy)]
pub struct Memory {
    /// Bytes every rank may use: the least any rank has.
    pub per_rank: u64,
    /// Ranks of the job.
    pub nranks: u64,
    /// Ranks on the node of this one, which share its memory.
    pub local_ranks: u64,
}

impl Memory {
    /// What the ranks of `world` have. Collective.
    pub fn of(world: &SimpleCommunicator) -> Self {
        Self {
            per_rank: 0,
            nranks: world.size() as u64,
            local_ranks: world.split_shared(0).size() as u64,
        }
        .now(world)
    }

    /// What the ranks of `world` (the same as [`Memory::of`]'s) have now. Collective.
    pub fn now(self, world: &SimpleCommunicator) -> Self {
        let mine = available(self.local_ranks);
        let mut per_rank = mine;
        world.all_reduce_into(&mine, &mut per_rank, SystemOperation::min());
        Self { per_rank, ..self }
    }

    /// The budget of blocks of `config` holding `nvars` variables `copies` times over (the
    /// fields and the problem's copies of them).
    pub fn budget(self, config: &MeshConfig, nvars: usize, copies: u64) -> Budget {
        let ndim = config.ndim();
        let cells: u64 = (0..ndim)
            .map(|d| (config.block_nx[d] + 2 * config.nghost) as u64)
            .product();
        let neighbors = 3u64.pow(ndim as u32) - 1;
        let nvars = nvars as u64;
        Budget {
            memory: self,
            block_nx: config.block_nx,
            local: nvars.saturating_mul(
                (copies * 8)
                    .saturating_mul(cells)
                    .saturating_add(neighbors * CHANNEL_BYTES),
            ),
            global: TREE_BYTES + neighbors * NEIGHBOR_BYTES,
        }
    }
}

/// The memory of a job and what its blocks cost.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// What the ranks have.
    pub memory: Memory,
    /// A block's cells per direction.
    pub block_nx: [usize; 3],
    /// Bytes a block costs the rank that holds it.
    pub local: u64,
    /// Bytes a block costs every rank.
    pub global: u64,
}

impl Budget {
    /// The same blocks in the memory the ranks of `world` have now. Collective.
    pub fn now(self, world: &SimpleCommunicator) -> Self {
        Self {
            memory: self.memory.now(world),
            ..self
        }
    }

    /// The most blocks that fit: `n` blocks cost each rank `n * global + n / nranks * local`.
    pub fn max_blocks(&self) -> usize {
        let Memory {
            per_rank, nranks, ..
        } = self.memory;
        let per_block = u128::from(self.global) * u128::from(nranks) + u128::from(self.local);
        let n = u128::from(per_rank) * u128::from(nranks) / per_block;
        usize::try_from(n).unwrap_or(usize::MAX)
    }

    /// `e` of building the mesh a deck asks for, as bad input; a mesh that outgrew the
    /// budget says why.
    pub fn deck_error(&self, deck: &Deck, e: MeshError) -> anyhow::Error {
        let advice = match e {
            MeshError::TooManyBlocks { limit: 0 } => "use smaller blocks",
            _ => "use fewer or larger blocks, fewer refinement levels or more ranks",
        };
        match self.outgrown(&e) {
            Some(why) => bad_input!("{}: {why}; {advice}", deck.file()),
            None => deck.mesh_error(e),
        }
    }

    /// Why, when `e` says that the mesh outgrew [`Budget::max_blocks`].
    pub fn outgrown(&self, e: &MeshError) -> Option<String> {
        let MeshError::TooManyBlocks { limit } = e else {
            return None;
        };
        let ranks = match self.memory.nranks {
            1 => "the one rank has".to_string(),
            n => format!("each of the {n} ranks has"),
        };
        let [nx1, nx2, nx3] = self.block_nx;
        let what = match limit {
            // The block's size comes from the deck's meshblock keys or, without them, the mesh.
            0 => format!(
                "not one block of {nx1} x {nx2} x {nx3} cells (parthenon/meshblock/nx1..nx3, \
                 or the mesh's own size where they are not given) fits in memory"
            ),
            _ => {
                format!("the mesh would have more than {limit} blocks, the most that fit in memory")
            }
        };
        Some(format!(
            "{what}: {ranks} {} to spare, and a block needs at least {} on the rank that holds \
             it and {} on every rank",
            bytes(self.memory.per_rank),
            bytes(self.local),
            bytes(self.global)
        ))
    }
}

/// `b` bytes in the largest binary unit that keeps one digit before the point.
pub fn bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Bytes this process may still allocate: the least of the node's available memory and swap
/// shared by the `local_ranks` ranks on the node, the room under the address-space limit, and the room
/// under the control group's limit. `u64::MAX` where nothing says.
fn available(local_ranks: u64) -> u64 {
    let local_ranks = local_ranks.max(1);
    let node = meminfo("MemAvailable").map(|m| m.saturating_add(meminfo("SwapFree").unwrap_or(0)));
    let cgroup = cgroup_room();
    let address_space = address_space_room();
    [
        node.map(|b| b / local_ranks),
        cgroup.map(|b| b / local_ranks),
        address_space,
    ]
    .into_iter()
    .flatten()
    .min()
    .unwrap_or(u64::MAX)
}

/// A `/proc/meminfo` entry in bytes.
fn meminfo(key: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.split(':').next() == Some(key))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

/// The room under the control group's memory limit (cgroup v2), if it has one.
fn cgroup_room() -> Option<u64> {
    let read = |f: &str| std::fs::read_to_string(format!("/sys/fs/cgroup/{f}")).ok();
    let max: u64 = read("memory.max")?.trim().parse().ok()?;
    let current: u64 = read("memory.current")?.trim().parse().ok()?;
    Some(max.saturating_sub(current))
}

/// The room under the soft address-space limit (`ulimit -v`), if there is one.
fn address_space_room() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max address space"))?;
    let limit: u64 = line
        .trim_start_matches("Max address space")
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let used_kib: u64 = status
        .lines()
        .find(|l| l.starts_with("VmSize:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(limit.saturating_sub(used_kib.saturating_mul(1024)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_that_fit_share_the_tree_on_every_rank_and_split_the_rest() {
        let memory = Memory {
            per_rank: 1000,
            nranks: 4,
            local_ranks: 2,
        };
        let b = Budget {
            memory,
            block_nx: [16, 8, 1],
            local: 30,
            global: 5,
        };
        // n * 5 + n / 4 * 30 <= 1000: n <= 4000 / 50.
        assert_eq!(b.max_blocks(), 80);
        let one = Budget {
            memory: Memory {
                nranks: 1,
                ..memory
            },
            ..b
        };
        assert_eq!(one.max_blocks(), 1000 / 35);
        let unknown = Budget {
            memory: Memory {
                per_rank: u64::MAX,
                ..memory
            },
            ..b
        };
        assert!(unknown.max_blocks() > 1 << 60);
        let why = b.outgrown(&MeshError::TooManyBlocks { limit: 80 }).unwrap();
        assert!(
            why.starts_with("the mesh would have more than 80 blocks, the most that fit in memory: each of the 4 ranks has 1000 B to spare"),
            "{why}"
        );
        let why = b.outgrown(&MeshError::TooManyBlocks { limit: 0 }).unwrap();
        assert!(
            why.starts_with("not one block of 16 x 8 x 1 cells (parthenon/meshblock/nx1..nx3"),
            "{why}"
        );
        assert_eq!(b.outgrown(&MeshError::BadLeaves(String::new())), None);
    }

    #[test]
    fn sizes_are_written_in_binary_units() {
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
    }

    #[test]
    fn this_machine_reports_some_memory() {
        let m = meminfo("MemAvailable").unwrap();
        assert!(m > 1 << 20, "{m}");
        assert!(available(1) <= m.saturating_add(meminfo("SwapFree").unwrap_or(0)));
    }
}
