//! The JSON files of `starhalo sf`: graphs and per-rank data.

use crate::exit::bad_input;
use anyhow::Result;
use serde::Deserialize;
use starhalo_sf::{Graph, RootRef};
use std::path::Path;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GraphFile {
    ranks: Vec<RankGraph>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RankGraph {
    nroots: usize,
    #[serde(default)]
    leaves: Vec<(i64, i64, i64)>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DataFile {
    ranks: Vec<Vec<serde_json::Number>>,
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad_input!("cannot read {}: {e}", path.display()))?;
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
            for (leaf, rank, offset) in g.leaves {
                let (Ok(leaf), Ok(offset)) = (usize::try_from(leaf), u64::try_from(offset)) else {
                    return Err(bad_input!(
                        "{}: rank {r}: leaf [{leaf}, {rank}, {offset}] has a negative index or offset",
                        path.display()
                    ));
                };
                ilocal.push(leaf);
                iremote.push(RootRef { rank, offset });
            }
            Ok(Graph::new(g.nroots, Some(ilocal), iremote))
        })
        .collect()
}

/// Reads a data file: one list of values per rank, as written (an integer stays exact).
pub fn read_data(path: &Path) -> Result<Vec<Vec<serde_json::Number>>> {
    Ok(read_json::<DataFile>(path)?.ranks)
}
