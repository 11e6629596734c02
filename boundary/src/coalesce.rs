//! Coalesced messages: the cross-rank channels of a route that go to one peer (and, for the
//! ghost exchange, one partition pair) travel as two messages: a status of one value per
//! channel (1: data, 0: null) on `tag`, and the values of the live channels back to back on
//! `tag + 1`. Both ends list a group's channels in the same order, so the status is all the
//! receiver needs to cut the data apart; [`agree`] checks at set-up that they do. The
//! receiver probes the data message for its size and grows its segment by doubling.
//!
//! Used by the ghost [`Exchange`](crate::Exchange) and the
//! [`FluxCorrection`](crate::FluxCorrection), each on a communicator of its own.

use hashbrown::HashSet;
use std::ops::Range;

use starhalo_sf::mpi::topology::SimpleCommunicator;
use starhalo_sf::p2p::{self, MsgArena};
use starhalo_sf::pool::BufferPool;

use crate::channel::ChannelKey;
use crate::collective;
use crate::error::BoundaryError;
use crate::exchange::Traffic;

/// The channels of one coalesced message pair.
#[derive(Debug, Clone)]
pub(crate) struct Group {
    pub peer: i32,
    /// Its channel ends: a run of its owner's end list.
    pub ends: Range<usize>,
    /// Tag of the status message; the data message has `tag + 1`.
    pub tag: i32,
    /// Send side: where the status values go in the send buffer, and the data range.
    status_at: usize,
    data: Range<usize>,
    /// Receive side: which of the two messages have arrived.
    status_in: bool,
    data_in: bool,
    /// The status values as sent or received (one per end), in host memory.
    status: Vec<f64>,
}

/// Groups the remote ends of an end list: `ends` yields, per end, `None` for a same-rank end
/// and `Some((peer, key))` otherwise; consecutive remote ends with the same peer and key form
/// one group, whose tag is `tag(key)`. A same-rank end ends a group, and two groups with one
/// peer and tag are an error (their messages could be taken for each other): the list must
/// hold each (peer, key)'s ends together.
pub(crate) fn groups<K: PartialEq>(
    ends: impl IntoIterator<Item = Option<(i32, K)>>,
    mut tag: impl FnMut(&K) -> Result<i32, BoundaryError>,
) -> Result<Vec<Group>, BoundaryError> {
    let mut out: Vec<Group> = Vec::new();
    let mut last: Option<(i32, K)> = None;
    let mut seen = HashSet::new();
    for (i, end) in ends.into_iter().enumerate() {
        let Some((peer, key)) = end else {
            last = None;
            continue;
        };
        if let (Some(g), Some(l)) = (out.last_mut(), &last) {
            if l.0 == peer && l.1 == key {
                g.ends.end = i + 1;
                continue;
            }
        }
        let tag = tag(&key)?;
        if !seen.insert((peer, tag)) {
            return Err(BoundaryError::Mismatch(format!(
                "two message groups to or from rank {peer} on tag {tag}: the channel ends \
                 are not held together by peer and key"
            )));
        }
        out.push(Group {
            peer,
            ends: i..i + 1,
            tag,
            status_at: 0,
            data: 0..0,
            status_in: false,
            data_in: false,
            status: Vec::new(),
        });
        last = Some((peer, key));
    }
    for g in &mut out {
        g.status = vec![0.0; g.ends.len()];
    }
    Ok(out)
}

/// Places the status values of every send group after `len` values of packed channels;
/// returns the send buffer's length.
pub(crate) fn place_status(groups: &mut [Group], mut len: usize) -> usize {
    for g in groups {
        g.status_at = len;
        len += g.ends.len();
    }
    len
}

/// The receive arena of `groups`: per group a status segment and a data segment (empty until
/// the first message grows it), with storage from `pool`.
pub(crate) fn recv_arena(pool: &BufferPool, groups: &[Group]) -> Result<MsgArena, BoundaryError> {
    let mut segs = Vec::with_capacity(2 * groups.len());
    let mut at = 0;
    for g in groups {
        segs.push(at..at + g.ends.len());
        at += g.ends.len();
        segs.push(at..at);
    }
    Ok(MsgArena::new_in(pool, segs)?)
}

/// Writes each group's status values into `arena` and moves its live channels together
/// (nothing moves when all are live). `end(i)` is end `i`'s range of the arena and whether it
/// is live.
pub(crate) fn compact(
    groups: &mut [Group],
    arena: &mut MsgArena,
    end: impl Fn(usize) -> (Range<usize>, bool),
) -> Result<(), BoundaryError> {
    for g in groups {
        let start = end(g.ends.start).0.start;
        let mut at = start;
        for (k, i) in g.ends.clone().enumerate() {
            let (range, live) = end(i);
            g.status[k] = f64::from(u8::from(live));
            if live {
                if range.start != at {
                    arena.copy_within(range.clone(), at)?;
                }
                at += range.len();
            }
        }
        arena.write(g.status_at, &g.status)?;
        g.data = start..at;
    }
    Ok(())
}

/// Sends the status and data messages of the groups in `order`, from `arena` (after
/// [`compact`]).
pub(crate) fn send(
    groups: &[Group],
    order: impl IntoIterator<Item = usize>,
    arena: &mut MsgArena,
    comm: &SimpleCommunicator,
    traffic: &mut Traffic,
) -> Result<(), BoundaryError> {
    for gi in order {
        let g = &groups[gi];
        let n = g.ends.len();
        arena.send(comm, g.status_at..g.status_at + n, g.peer, g.tag)?;
        arena.send(comm, g.data.clone(), g.peer, g.tag + 1)?;
        traffic.messages += 2;
        traffic.bytes += ((n + g.data.len()) * 8) as u64;
    }
    Ok(())
}

/// Receives what has arrived of group `gi` into `arena` (from [`recv_arena`]). Once both of
/// its messages are in, returns the group's ends and where their values are in the arena,
/// to be taken in order; the group then returns nothing until [`rearm`].
pub(crate) fn receive<'a>(
    groups: &'a mut [Group],
    gi: usize,
    arena: &mut MsgArena,
    comm: &SimpleCommunicator,
) -> Result<Option<(Range<usize>, Arrived<'a>)>, BoundaryError> {
    let g = &mut groups[gi];
    if !g.status_in {
        let Some(n) = p2p::probe(comm, g.peer, g.tag)? else {
            return Ok(None);
        };
        if n != g.ends.len() {
            return Err(BoundaryError::Mismatch(format!(
                "rank {} sent a status of {n} channels, expected {}",
                g.peer,
                g.ends.len()
            )));
        }
        arena.recv(comm, 2 * gi, n, g.peer, g.tag)?;
        arena.wait();
        arena.read(arena.segment(2 * gi).map_or(0, |s| s.start), &mut g.status)?;
        g.status_in = true;
    }
    if g.data_in {
        return Ok(None);
    }
    let Some(n) = p2p::probe(comm, g.peer, g.tag + 1)? else {
        return Ok(None);
    };
    arena.grow(2 * gi + 1, n)?;
    arena.recv(comm, 2 * gi + 1, n, g.peer, g.tag + 1)?;
    arena.wait();
    g.data_in = true;
    let at = arena.segment(2 * gi + 1).map_or(0, |s| s.start);
    let arrived = Arrived {
        peer: g.peer,
        status: &g.status,
        payload: at..at + n,
        at,
    };
    Ok(Some((g.ends.clone(), arrived)))
}

/// The two messages of a group, cut apart channel by channel; [`Arrived::finish`] once all
/// are taken.
pub(crate) struct Arrived<'a> {
    peer: i32,
    status: &'a [f64],
    /// Where the data message lies in the receive arena, and the next channel's values.
    payload: Range<usize>,
    at: usize,
}

impl Arrived<'_> {
    /// Where the values of the group's `k`-th channel, which has `len` of them, lie in the
    /// receive arena, or `None` when it sent a null; channels are taken in order.
    pub fn take(&mut self, k: usize, len: usize) -> Result<Option<Range<usize>>, BoundaryError> {
        if self.status.get(k).is_none_or(|&s| s == 0.0) {
            return Ok(None);
        }
        let values = self.at..self.at + len;
        if values.end > self.payload.end {
            return Err(BoundaryError::Mismatch(format!(
                "rank {} sent {} values, fewer than its status announces",
                self.peer,
                self.payload.len()
            )));
        }
        self.at = values.end;
        Ok(Some(values))
    }

    /// Checks, once every channel is taken, that the data message held nothing more.
    pub fn finish(self) -> Result<(), BoundaryError> {
        if self.at == self.payload.end {
            return Ok(());
        }
        Err(BoundaryError::Mismatch(format!(
            "rank {} sent {} values, more than the {} its status announces",
            self.peer,
            self.payload.len(),
            self.at - self.payload.start
        )))
    }
}

/// Makes every group ready for the next exchange's messages.
pub(crate) fn rearm(groups: &mut [Group]) {
    for g in groups {
        g.status_in = false;
        g.data_in = false;
    }
}

/// Each group's (peer, tag, [`digest`]) for [`agree`]; `end(i)` is end `i`'s channel key and
/// values (`None` past the last end).
pub(crate) fn digests<'a>(
    groups: &'a [Group],
    end: impl Fn(usize) -> Option<(ChannelKey, usize)> + 'a,
) -> impl Iterator<Item = (i32, i32, [f64; 3])> + 'a {
    groups.iter().map(move |g| {
        // A group outside the ends digests as empty, which its peer's digest then contradicts.
        let listed: Option<Vec<_>> = g.ends.clone().map(&end).collect();
        (g.peer, g.tag, digest(listed.unwrap_or_default()))
    })
}

/// Count and hash of the channel keys and lengths one end of a group lists: both ends must
/// agree on what each channel is and on how many values it carries.
fn digest(ends: impl IntoIterator<Item = (ChannelKey, usize)>) -> [f64; 3] {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut n = 0u32;
    for (k, len) in ends {
        n += 1;
        for x in [k.sender, k.receiver, k.var, k.element.index(), len] {
            h = (h ^ x as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    [f64::from(n), (h >> 32) as f64, (h & 0xffff_ffff) as f64]
}

/// Sender and receiver of each group (the channels of one coalesced message pair, which
/// travel one message each when not coalesced) check that they list the same channels of the
/// same lengths: each sends the [`digest`] of its group to the other. `sends` and `recvs` are
/// this rank's groups as (peer, tag, digest). Collective over `comm`: a mismatch is seen by
/// the receiving end only, so every rank learns whether any rank saw one and fails with it.
pub(crate) fn agree(
    comm: &SimpleCommunicator,
    rank: i32,
    pool: &BufferPool,
    sends: &[(i32, i32, [f64; 3])],
    recvs: &[(i32, i32, [f64; 3])],
) -> Result<(), BoundaryError> {
    // Every rank has its arenas before any posts a message, so that none waits for a rank
    // that could not make them.
    let arenas = (|| {
        let mut out = MsgArena::with_len_in(pool, sends.len() * 3)?;
        for (i, (_, _, d)) in sends.iter().enumerate() {
            out.buf_mut()?[i * 3..i * 3 + 3].copy_from_slice(d);
        }
        let got = MsgArena::new_in(pool, (0..recvs.len()).map(|i| i * 3..i * 3 + 3).collect())?;
        Ok((out, got))
    })();
    let others = "another rank could not allocate its channel-list check";
    let (mut out, mut got) = collective::agree(comm, arenas, others)?;
    for (i, (peer, tag, _)) in recvs.iter().enumerate() {
        got.recv(comm, i, 3, *peer, *tag)?;
    }
    for (i, (peer, tag, _)) in sends.iter().enumerate() {
        out.send(comm, i * 3..i * 3 + 3, *peer, *tag)?;
    }
    got.wait();
    out.wait();
    let got = got.buf()?;
    let mine = recvs
        .iter()
        .enumerate()
        .find(|(i, (_, _, d))| got[i * 3..i * 3 + 3] != d[..])
        .map_or(Ok(()), |(i, (peer, _, d))| {
            let what = match d[0] == got[i * 3] {
                true => format!("{} channels on both, with other keys or lengths", d[0]),
                false => format!("{} channels here, {} there", d[0], got[i * 3]),
            };
            Err(BoundaryError::Mismatch(format!(
                "rank {rank} and its sender, rank {peer}, list different channels for one \
                 message: {what}"
            )))
        });
    collective::agree(
        comm,
        mine,
        "another rank's messages list other channels than their senders'",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_runs_of_remote_ends_with_one_peer_and_key() {
        // Ends: local, (1, a) x2, (1, b), (2, b), local.
        let ends = [
            None,
            Some((1, 'a')),
            Some((1, 'a')),
            Some((1, 'b')),
            Some((2, 'b')),
            None,
        ];
        let g = groups(ends, |&k| Ok(if k == 'a' { 10 } else { 20 })).unwrap();
        let got: Vec<_> = g.iter().map(|g| (g.peer, g.ends.clone(), g.tag)).collect();
        assert_eq!(got, [(1, 1..3, 10), (1, 3..4, 20), (2, 4..5, 20)]);
        // A same-rank end between two ends of one peer and key never joins a group; the ends
        // after it would share the first group's tag, which is an error, not a clash.
        let split = [Some((1, 'a')), None, Some((1, 'a'))];
        assert!(groups(split, |_| Ok(10)).is_err());
        let apart = [Some((1, 'a')), Some((2, 'a')), Some((1, 'a'))];
        assert!(groups(apart, |_| Ok(10)).is_err());
    }

    /// The status marks live ends, and live ends move together in order, so that the data
    /// message is one range; the receiver cuts it apart by the status.
    #[test]
    fn compact_then_take_gives_each_live_channel_its_values() {
        // Three ends of 2, 3 and 1 values; the middle one is null.
        let ranges = [0..2, 2..5, 5..6];
        let live = [true, false, true];
        let mut g = groups([Some((1, ())), Some((1, ())), Some((1, ()))], |_| Ok(0)).unwrap();
        let len = place_status(&mut g, 6);
        assert_eq!((g[0].status_at, len), (6, 9));
        let mut arena = MsgArena::with_len(9).unwrap();
        let values = [1.0, 2.0, -1.0, -1.0, -1.0, 3.0, 0.0, 0.0, 0.0];
        arena.buf_mut().unwrap().copy_from_slice(&values);
        compact(&mut g, &mut arena, |i| (ranges[i].clone(), live[i])).unwrap();
        assert_eq!(g[0].data, 0..3);
        let buf = arena.buf().unwrap();
        assert_eq!(&buf[..3], &[1.0, 2.0, 3.0]);
        assert_eq!(&buf[6..], &[1.0, 0.0, 1.0]);
        // The status as sent, with a payload of `n` values from 10 in the receive arena.
        let status = buf[6..].to_vec();
        let arrived = |n: usize| Arrived {
            peer: 1,
            status: &status,
            payload: 10..10 + n,
            at: 10,
        };
        let mut msg = arrived(3);
        assert_eq!(msg.take(0, 2).unwrap(), Some(10..12));
        assert_eq!(msg.take(1, 3).unwrap(), None);
        assert_eq!(msg.take(2, 1).unwrap(), Some(12..13));
        assert!(msg.finish().is_ok());
        // A payload longer than the status announces is an error too.
        let mut long = arrived(4);
        for (k, len) in [(0, 2), (1, 3), (2, 1)] {
            long.take(k, len).unwrap();
        }
        assert!(long.finish().is_err());
        // A payload shorter than the status announces is an error, not a short copy.
        let mut short = arrived(1);
        assert!(short.take(0, 2).is_err());
    }

    #[test]
    fn digest_tells_lists_apart() {
        use starhalo_mesh::Element;
        let key = |v| ChannelKey {
            sender: 1,
            receiver: 2,
            var: v,
            element: Element::from_offset([1, 0, 0]).unwrap(),
        };
        let d = |vs: &[usize]| digest(vs.iter().map(|&v| (key(v), 8)));
        assert_eq!(d(&[0, 1]), d(&[0, 1]));
        assert_ne!(d(&[0, 1]), d(&[1, 0]));
        assert_ne!(d(&[0, 1]), d(&[0]));
        assert_eq!(d(&[])[0], 0.0);
        // The same channels with another length for one of them.
        let longer = digest([(key(0), 8), (key(1), 9)]);
        assert_ne!(d(&[0, 1]), longer);
    }
}
