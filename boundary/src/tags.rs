//! Dense MPI tags.
//!
//! Each variable gets its own communicator, so a tag only has to tell apart the channels of
//! one variable between one ordered pair of ranks. For each peer, a rank sorts the distinct
//! `(sender gid, receiver gid, sender element)` triples of the channels it sends to that peer
//! (and, separately, of those it receives from it) and numbers them from 0. The sender's
//! "send to peer" list and the receiver's "receive from peer" list hold the same triples, so
//! both ends compute the same numbers without talking to each other.

use std::collections::BTreeMap;

use starhalo_mesh::Element;

use crate::channel::{Channel, RankChannels};
use crate::error::BoundaryError;

/// The part of a channel key that its tag depends on.
pub type TagKey = (usize, usize, Element);

fn tag_key(c: &Channel) -> TagKey {
    (c.key.sender, c.key.receiver, c.key.element)
}

/// The tags of one rank: per peer, the sorted channel triples in each direction.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TagMap {
    rank: usize,
    send: BTreeMap<usize, Vec<TagKey>>,
    recv: BTreeMap<usize, Vec<TagKey>>,
}

impl TagMap {
    /// Numbers the cross-rank channels of `channels`; fails if any tag would exceed `tag_ub`
    /// (the communicator's `MPI_TAG_UB`). Same-rank channels get no tag.
    ///
    /// ```
    /// use starhalo_boundary::{RankChannels, TagMap};
    /// use starhalo_mesh::{find_neighbors, Forest, RootGrid};
    /// let f = Forest::uniform(RootGrid::new(1, [2, 1, 1], [true, false, false]).unwrap(), 0);
    /// let nb = find_neighbors(&f, &[0, 1]).unwrap();
    /// let (r0, r1) = (RankChannels::new(&nb, &[0], 0), RankChannels::new(&nb, &[0], 1));
    /// let (t0, t1) = (TagMap::new(&r0, 32767).unwrap(), TagMap::new(&r1, 32767).unwrap());
    /// // Block 0 sends to block 1 through both of its faces: tags 0 and 1, on both ranks.
    /// for c in &r0.send {
    ///     assert_eq!(t0.send_tag(c), t1.recv_tag(c));
    /// }
    /// assert!(TagMap::new(&r0, 0).is_err());
    /// ```
    pub fn new(channels: &RankChannels, tag_ub: usize) -> Result<Self, BoundaryError> {
        let rank = channels.rank;
        let group = |list: &[Channel], peer_of: fn(&Channel) -> usize| {
            let mut m: BTreeMap<usize, Vec<TagKey>> = BTreeMap::new();
            for c in list.iter().filter(|c| !c.is_local()) {
                m.entry(peer_of(c)).or_default().push(tag_key(c));
            }
            for v in m.values_mut() {
                v.sort_unstable();
                v.dedup();
            }
            m
        };
        let send = group(&channels.send, |c| c.receiver_rank);
        let recv = group(&channels.recv, |c| c.sender_rank);
        for (&peer, list) in send.iter().chain(recv.iter()) {
            let top = list.len().saturating_sub(1);
            if top > tag_ub {
                return Err(BoundaryError::TagOverflow {
                    rank,
                    peer,
                    tag: top,
                    channels: list.len(),
                    tag_ub,
                });
            }
        }
        Ok(Self { rank, send, recv })
    }

    /// The rank these tags belong to.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The tag this rank sends `c` with, if `c` is a cross-rank channel sent from here.
    pub fn send_tag(&self, c: &Channel) -> Option<usize> {
        find(&self.send, c.receiver_rank, tag_key(c))
    }

    /// The tag this rank receives `c` with, if `c` is a cross-rank channel received here.
    pub fn recv_tag(&self, c: &Channel) -> Option<usize> {
        find(&self.recv, c.sender_rank, tag_key(c))
    }

    /// Number of distinct tags used towards (`send`) or from (`!send`) `peer`.
    pub fn count(&self, peer: usize, send: bool) -> usize {
        let m = if send { &self.send } else { &self.recv };
        m.get(&peer).map_or(0, Vec::len)
    }
}

fn find(m: &BTreeMap<usize, Vec<TagKey>>, peer: usize, k: TagKey) -> Option<usize> {
    m.get(&peer)?.binary_search(&k).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::all_channels;
    use starhalo_mesh::{find_neighbors, Forest, LogicalLocation, RootGrid};

    /// A 3-D periodic two-level mesh spread over `nranks` ranks, round robin.
    fn mesh(nranks: usize) -> (Vec<starhalo_mesh::BlockNeighbors>, usize) {
        let g = RootGrid::new(3, [2, 2, 1], [true, true, true]).unwrap();
        let mut leaves = vec![
            LogicalLocation::new(0, [1, 0, 0]),
            LogicalLocation::new(0, [0, 1, 0]),
            LogicalLocation::new(0, [1, 1, 0]),
        ];
        leaves.extend(LogicalLocation::new(0, [0, 0, 0]).children(3));
        let f = Forest::from_leaves(g, leaves).unwrap();
        let ranks: Vec<usize> = (0..f.len()).map(|g| (g * 7 + 1) % nranks).collect();
        (find_neighbors(&f, &ranks).unwrap(), nranks)
    }

    #[test]
    fn both_ranks_agree_on_every_cross_rank_tag() {
        let (nb, nranks) = mesh(3);
        let vars = [0, 1];
        let views: Vec<RankChannels> = (0..nranks)
            .map(|r| RankChannels::new(&nb, &vars, r))
            .collect();
        let tags: Vec<TagMap> = views
            .iter()
            .map(|v| TagMap::new(v, 32767).unwrap())
            .collect();
        let mut cross = 0;
        for c in all_channels(&nb, &vars) {
            let (s, r) = (c.sender_rank, c.receiver_rank);
            if s == r {
                assert_eq!(tags[s].send_tag(&c), None);
                continue;
            }
            cross += 1;
            let ts = tags[s].send_tag(&c).unwrap();
            assert_eq!(Some(ts), tags[r].recv_tag(&c), "{c:?}");
            assert!(ts < tags[s].count(r, true));
        }
        assert!(cross > 50);
        // Dense: per (rank, peer) the tags are exactly 0..count, each used by one triple.
        for r in 0..nranks {
            for p in (0..nranks).filter(|&p| p != r) {
                let mut used: Vec<usize> = views[r]
                    .send
                    .iter()
                    .filter(|c| c.receiver_rank == p)
                    .filter_map(|c| tags[r].send_tag(c))
                    .collect();
                used.sort_unstable();
                used.dedup();
                assert_eq!(used, (0..tags[r].count(p, true)).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn overflow_names_rank_peer_and_numbers() {
        let (nb, _) = mesh(2);
        let v = RankChannels::new(&nb, &[0], 0);
        let need = TagMap::new(&v, usize::MAX).unwrap().count(1, true);
        assert!(need > 2);
        assert!(TagMap::new(&v, need - 1).is_ok());
        let err = TagMap::new(&v, need - 2).unwrap_err();
        match &err {
            BoundaryError::TagOverflow {
                rank, tag, tag_ub, ..
            } => {
                assert_eq!((*rank, *tag_ub), (0, need - 2));
                assert!(*tag > need - 2);
            }
            e => panic!("wrong error {e}"),
        }
        let msg = err.to_string();
        assert!(msg.contains(&format!("{}", need - 2)), "{msg}");
    }
}
