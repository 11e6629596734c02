//! Channels: the unit of boundary communication.
//!
//! A channel carries one variable's ghost data from one block to one neighbour through one
//! geometric element of the sender. The element is part of the key because on small periodic
//! grids two blocks (or a block and itself) can touch through several elements. Keys order
//! lexicographically as `(sender gid, receiver gid, variable, sender element index)`, the order
//! of Parthenon's channel tuple.
//!
//! A rank builds the channels it sends on from its own blocks' neighbour records, and the
//! channels it receives on from the same records seen from the other side (the neighbour
//! sends through the opposite element). Both views describe the same edges, so no rank needs
//! another rank's records.

use starhalo_mesh::field::Fields;
use starhalo_mesh::{BlockNeighbors, Element, Mesh, NeighborBlock};

use crate::error::BoundaryError;

/// The identity of one channel; ordered as Parthenon orders its channel tuple.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChannelKey {
    /// Global id of the sending block.
    pub sender: usize,
    /// Global id of the receiving block.
    pub receiver: usize,
    /// Variable id (index among the simulation's variables).
    pub var: usize,
    /// The sender's element that touches the receiver.
    pub element: Element,
}

/// One channel with what the exchange needs to know about its two ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Channel {
    /// Its key.
    pub key: ChannelKey,
    /// Rank of the sending block.
    pub sender_rank: usize,
    /// Rank of the receiving block.
    pub receiver_rank: usize,
    /// Receiver level minus sender level: -1, 0 or +1.
    pub level_diff: i32,
    /// Parthenon's `fi1, fi2`: which half of the coarser block's element the finer block
    /// covers, along the element's free active directions (`[0, 0]` on the same level). The
    /// value is the same seen from either end.
    pub fi: [u8; 2],
}

impl std::fmt::Display for Channel {
    /// How timeout messages name a channel: both blocks with their ranks, the variable id
    /// and the sender's element.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let k = &self.key;
        write!(
            f,
            "block {} (rank {}) -> block {} (rank {}), variable {}, element {}",
            k.sender, self.sender_rank, k.receiver, self.receiver_rank, k.var, k.element
        )
    }
}

impl Channel {
    /// True when both blocks live on the same rank (no MPI needed).
    pub fn is_local(&self) -> bool {
        self.sender_rank == self.receiver_rank
    }

    /// The receiver's element that touches the sender: the opposite of the sender's.
    pub fn receiver_element(&self) -> Element {
        self.key.element.opposite()
    }

    /// The channel that block `b` sends on to neighbour `n`, for variable `var`.
    pub fn outgoing(b: &BlockNeighbors, n: &NeighborBlock, var: usize) -> Self {
        Self {
            key: ChannelKey {
                sender: b.gid,
                receiver: n.gid,
                var,
                element: n.element,
            },
            sender_rank: b.rank,
            receiver_rank: n.rank,
            level_diff: n.level_diff,
            fi: n.fi,
        }
    }

    /// The channel that block `b` receives on from neighbour `n`, for variable `var`.
    pub fn incoming(b: &BlockNeighbors, n: &NeighborBlock, var: usize) -> Self {
        Self {
            key: ChannelKey {
                sender: n.gid,
                receiver: b.gid,
                var,
                element: n.neighbor_element,
            },
            sender_rank: n.rank,
            receiver_rank: b.rank,
            level_diff: -n.level_diff,
            fi: n.fi,
        }
    }
}

/// Every channel of a mesh, seen from the senders, sorted by key: one per (block, neighbour
/// record, variable in `vars`).
///
/// ```
/// use starhalo_boundary::channel::all_channels;
/// use starhalo_mesh::{find_neighbors, Forest, RootGrid};
/// // Two blocks on a periodic line touch through both faces: 2 blocks x 2 faces x 1 variable.
/// let f = Forest::uniform(RootGrid::new(1, [2, 1, 1], [true, false, false]).unwrap(), 0);
/// let nb = find_neighbors(&f, &[0, 1]).unwrap();
/// let ch = all_channels(&nb, &[7]);
/// assert_eq!(ch.len(), 4);
/// assert!(ch.iter().all(|c| !c.is_local() && c.key.var == 7));
/// assert!(ch.windows(2).all(|w| w[0].key < w[1].key));
/// ```
pub fn all_channels(neighbors: &[BlockNeighbors], vars: &[usize]) -> Vec<Channel> {
    let mut out: Vec<Channel> = neighbors
        .iter()
        .flat_map(|b| {
            b.neighbors
                .iter()
                .flat_map(move |n| vars.iter().map(move |&v| Channel::outgoing(b, n, v)))
        })
        .collect();
    out.sort_unstable_by_key(|c| c.key);
    out
}

/// The channels one rank takes part in, each list sorted by key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RankChannels {
    /// The rank.
    pub rank: usize,
    /// Channels whose sender is on this rank.
    pub send: Vec<Channel>,
    /// Channels whose receiver is on this rank.
    pub recv: Vec<Channel>,
}

impl RankChannels {
    /// The channels of `rank`, from the neighbour records of its own blocks only (records of
    /// other ranks' blocks in `neighbors` are ignored).
    pub fn new(neighbors: &[BlockNeighbors], vars: &[usize], rank: usize) -> Self {
        let mut send = Vec::new();
        let mut recv = Vec::new();
        for b in neighbors.iter().filter(|b| b.rank == rank) {
            for n in &b.neighbors {
                for &v in vars {
                    send.push(Channel::outgoing(b, n, v));
                    recv.push(Channel::incoming(b, n, v));
                }
            }
        }
        send.sort_unstable_by_key(|c| c.key);
        recv.sort_unstable_by_key(|c| c.key);
        Self { rank, send, recv }
    }
}

/// The ids of the variables whose ghosts are exchanged: their indices in `fields`.
pub fn fill_ghost_ids(fields: &Fields) -> Vec<usize> {
    fields
        .iter()
        .enumerate()
        .filter(|(_, v)| v.metadata.is_fill_ghost())
        .map(|(i, _)| i)
        .collect()
}

/// The channels of `rank` on `mesh` for the fill-ghost variables of `fields`.
pub fn mesh_channels(
    mesh: &Mesh,
    fields: &Fields,
    rank: usize,
) -> Result<RankChannels, BoundaryError> {
    let nb = mesh.neighbors()?;
    Ok(RankChannels::new(&nb, &fill_ghost_ids(fields), rank))
}

#[cfg(test)]
mod tests {
    use super::*;
    use starhalo_mesh::field::{Centering, Metadata};
    use starhalo_mesh::{find_neighbors, Forest, LogicalLocation, RootGrid};

    fn two_level() -> (Forest, Vec<usize>) {
        let g = RootGrid::new(2, [2, 2, 1], [true, true, false]).unwrap();
        let mut leaves = vec![
            LogicalLocation::new(0, [1, 0, 0]),
            LogicalLocation::new(0, [0, 1, 0]),
            LogicalLocation::new(0, [1, 1, 0]),
        ];
        leaves.extend(LogicalLocation::new(0, [0, 0, 0]).children(2));
        let f = Forest::from_leaves(g, leaves).unwrap();
        let ranks = (0..f.len()).map(|g| g % 3).collect();
        (f, ranks)
    }

    #[test]
    fn key_order_is_sender_receiver_var_element() {
        let e = |i| Element::new(i).unwrap();
        let k = |s, r, v, el| ChannelKey {
            sender: s,
            receiver: r,
            var: v,
            element: e(el),
        };
        let mut keys = vec![k(1, 0, 0, 0), k(0, 2, 0, 0), k(0, 1, 1, 0), k(0, 1, 0, 26)];
        keys.sort();
        assert_eq!(
            keys,
            vec![k(0, 1, 0, 26), k(0, 1, 1, 0), k(0, 2, 0, 0), k(1, 0, 0, 0)]
        );
    }

    #[test]
    fn send_and_receive_views_describe_the_same_channels() {
        let (f, ranks) = two_level();
        let nb = find_neighbors(&f, &ranks).unwrap();
        let vars = [0, 3];
        let all = all_channels(&nb, &vars);
        let nrec: usize = nb.iter().map(|b| b.neighbors.len()).sum();
        assert_eq!(all.len(), nrec * vars.len());
        let mut sends = Vec::new();
        let mut recvs = Vec::new();
        for r in 0..3 {
            let rc = RankChannels::new(&nb, &vars, r);
            assert!(rc.send.iter().all(|c| c.sender_rank == r));
            assert!(rc.recv.iter().all(|c| c.receiver_rank == r));
            sends.extend(rc.send);
            recvs.extend(rc.recv);
        }
        sends.sort_unstable_by_key(|c| c.key);
        recvs.sort_unstable_by_key(|c| c.key);
        // Same keys, same ranks, same level difference and fi from both ends.
        assert_eq!(sends, all);
        assert_eq!(recvs, all);
        assert!(all.iter().any(|c| c.level_diff == 1));
        assert!(all.iter().any(|c| c.level_diff == -1 && c.fi[0] == 1));
    }

    #[test]
    fn locality_follows_ranks_and_self_channels_exist() {
        // One periodic block in 2-D is its own neighbour through all 8 elements.
        let f = Forest::uniform(RootGrid::new(2, [1, 1, 1], [true, true, false]).unwrap(), 0);
        let nb = find_neighbors(&f, &[0]).unwrap();
        let ch = all_channels(&nb, &[0]);
        assert_eq!(ch.len(), 8);
        assert!(ch
            .iter()
            .all(|c| c.is_local() && c.key.sender == 0 && c.key.receiver == 0));
        let (f, ranks) = two_level();
        let nb = find_neighbors(&f, &ranks).unwrap();
        for c in all_channels(&nb, &[0]) {
            assert_eq!(c.is_local(), ranks[c.key.sender] == ranks[c.key.receiver]);
        }
    }

    #[test]
    fn fill_ghost_ids_skip_other_variables() {
        let mut fields = Fields::default();
        fields
            .add("a", Metadata::new(Centering::Cell).fill_ghost())
            .unwrap();
        fields.add("b", Metadata::new(Centering::Cell)).unwrap();
        fields
            .add("c", Metadata::new(Centering::Cell).fill_ghost())
            .unwrap();
        assert_eq!(fill_ghost_ids(&fields), vec![0, 2]);
    }
}
