//! The JSON files of `starhalo sf`: graphs and per-rank data.

use crate::exit::bad_input;
use anyhow::Result;
use serde::de::{self, Deserializer, Unexpected, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use starhalo_sf::{Graph, RootRef, SfError};
use std::marker::PhantomData;
use std::path::Path;

/// An integer of a graph file. serde_json reads an integer beyond 64 bits as a float, which
/// its own message would call a floating point number.
struct Int<T>(T);

impl<'de, T: TryFrom<i64> + TryFrom<u64>> Deserialize<'de> for Int<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<T: TryFrom<i64> + TryFrom<u64>> Visitor<'_> for V<T> {
            type Value = Int<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                let signed = T::try_from(-1i64).is_ok();
                f.write_str(if signed {
                    "a signed 64-bit integer"
                } else {
                    "a non-negative integer"
                })
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                T::try_from(v)
                    .map(Int)
                    .map_err(|_| E::invalid_value(Unexpected::Signed(v), &self))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                T::try_from(v)
                    .map(Int)
                    .map_err(|_| E::invalid_value(Unexpected::Unsigned(v), &self))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                // Integers within 64 bits come as such: a whole float beyond them was written
                // as an integer, or with an exponent (`1e20`).
                if v.is_finite() && v.fract() == 0.0 && v.abs() >= 2f64.powi(63) {
                    Err(E::custom("a number beyond the 64-bit integer range"))
                } else {
                    Err(E::invalid_type(Unexpected::Float(v), &self))
                }
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GraphFile {
    ranks: Vec<RankGraph>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RankGraph {
    nroots: Int<usize>,
    #[serde(default)]
    leaves: Vec<Leaf>,
}

/// `[leaf index, root rank, root offset]`.
struct Leaf([i64; 3]);

impl<'de> Deserialize<'de> for Leaf {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Vec::<Int<i64>>::deserialize(d)?;
        match v[..] {
            [Int(a), Int(b), Int(c)] => Ok(Leaf([a, b, c])),
            _ => Err(de::Error::custom(format!(
                "a leaf is [leaf index, root rank, root offset], found {} numbers",
                v.len()
            ))),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DataFile {
    ranks: Vec<Vec<serde_json::Number>>,
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text = crate::input_file::read_text(path)
        .map_err(|e| bad_input!("cannot read {}: {e}", path.display()))?;
    crate::input_file::note_read(path, crc32fast::hash(text.as_bytes()));
    serde_json::from_str(&text).map_err(|e| bad_input!("{}: {e}", path.display()))
}

/// Reads a graph file and returns every rank's graph.
pub fn read_graph(path: &Path) -> Result<Vec<Graph>> {
    let file: GraphFile = read_json(path)?;
    file.ranks
        .into_iter()
        .enumerate()
        .map(|(r, g)| {
            let mut ilocal = Vec::with_capacity(g.leaves.len());
            let mut iremote = Vec::with_capacity(g.leaves.len());
            for Leaf([leaf, rank, offset]) in g.leaves {
                let (Ok(leaf), Ok(offset)) = (usize::try_from(leaf), u64::try_from(offset)) else {
                    return Err(bad_input!(
                        "{}: rank {r}: leaf [{leaf}, {rank}, {offset}] has a negative index or offset",
                        path.display()
                    ));
                };
                ilocal.push(leaf);
                iremote.push(RootRef { rank, offset });
            }
            Ok(Graph::new(g.nroots.0, Some(ilocal), iremote))
        })
        .collect()
}

/// The line of graph file `path` that holds the leaf `err` names, for an error that set-up
/// found on rank `rank` after the file parsed. The file is read again: only a failing run
/// pays for finding lines.
pub fn leaf_line(path: &Path, rank: usize, err: &SfError) -> Option<usize> {
    #[derive(Deserialize)]
    struct File<'a> {
        #[serde(borrow)]
        ranks: Vec<Leaves<'a>>,
    }
    #[derive(Deserialize)]
    struct Leaves<'a> {
        #[serde(borrow, default)]
        leaves: Vec<&'a RawValue>,
    }
    use SfError::{DuplicateLeaf, OffsetOutOfRange, RankOutOfRange};
    if !matches!(
        err,
        RankOutOfRange { .. } | OffsetOutOfRange { .. } | DuplicateLeaf(_)
    ) {
        return None;
    }
    let text = crate::input_file::read_text(path).ok()?;
    let file: File = serde_json::from_str(&text).ok()?;
    let leaves = |r: usize| {
        let raw = file.ranks.get(r).map_or(&[][..], |g| &g.leaves[..]);
        raw.iter().filter_map(|&raw| {
            let Leaf(l) = serde_json::from_str(raw.get()).ok()?;
            Some((raw, l))
        })
    };
    let index = |i: usize| i64::try_from(i).ok();
    let (raw, _) = match *err {
        RankOutOfRange {
            leaf, rank: root, ..
        } => leaves(rank).find(|(_, l)| Some(l[0]) == index(leaf) && l[1] == root),
        OffsetOutOfRange {
            leaf_rank,
            rank: root,
            offset,
            ..
        } => leaves(usize::try_from(leaf_rank).ok()?)
            .find(|(_, l)| l[1] == i64::from(root) && u64::try_from(l[2]) == Ok(offset)),
        // The second time it is given.
        DuplicateLeaf(leaf) => leaves(rank)
            .filter(|(_, l)| Some(l[0]) == index(leaf))
            .nth(1),
        _ => None,
    }?;
    // The raw value borrows from `text`: its address gives its place there.
    let at = (raw.get().as_ptr() as usize).checked_sub(text.as_ptr() as usize)?;
    (at <= text.len()).then(|| crate::input_file::line_at(text.as_bytes(), at))
}

/// Reads a data file: one list of values per rank, as written (an integer stays exact).
pub fn read_data(path: &Path) -> Result<Vec<Vec<serde_json::Number>>> {
    Ok(read_json::<DataFile>(path)?.ranks)
}
