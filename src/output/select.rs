//! Which variables an output holds, their component names, and the box of each block that is
//! written (interior only, or with ghosts).

use super::error::OutputError;
use super::gather::Gathered;
use starhalo_boundary::FieldLayout;
use starhalo_mesh::field::{Centering, Fields};
use starhalo_mesh::Mesh;

/// A cell-centred variable as the writers see it.
#[derive(Debug, Clone, PartialEq)]
pub struct OutVar {
    /// The variable's name (the dataset name).
    pub name: String,
    /// Its index among all registered variables (for the allocation flags).
    pub index: usize,
    /// Its first slot in the block layout.
    pub slot: usize,
    /// Components.
    pub ncomp: usize,
    /// The value an unallocated block reads.
    pub default: f64,
    /// Sparse (allocated per block).
    pub sparse: bool,
}

impl OutVar {
    /// Parthenon's component names: `name` for one component, else `name_0`, `name_1`, ...
    pub fn component_names(&self) -> Vec<String> {
        if self.ncomp == 1 {
            vec![self.name.clone()]
        } else {
            (0..self.ncomp)
                .map(|c| format!("{}_{c}", self.name))
                .collect()
        }
    }

    /// Whether this variable is allocated on block `gid` of `g`.
    pub fn allocated(&self, g: &Gathered, nvars: usize, gid: usize) -> bool {
        g.allocated[gid * nvars + self.index]
    }
}

/// The cell-centred variables in registration order, with their slots.
pub fn cell_vars(fields: &Fields) -> Vec<OutVar> {
    let mut slot = 0;
    let mut out = Vec::new();
    for (index, v) in fields.iter().enumerate() {
        if v.metadata.centering() != Centering::Cell {
            continue;
        }
        let ncomp = v.metadata.ncomp();
        out.push(OutVar {
            name: v.name.clone(),
            index,
            slot,
            ncomp,
            default: v.metadata.default_value(),
            sparse: v.metadata.is_sparse(),
        });
        slot += ncomp;
    }
    out
}

/// The variables an output writes, alphabetical (Parthenon's `OutputDatasetNames` order):
/// those named in `names` (each a registered cell-centred variable, or the base name of a
/// sparse pool, `name` for every sparse `name_<id>`), or all.
pub fn select(
    fields: &Fields,
    names: Option<&[String]>,
    key: &str,
) -> Result<Vec<OutVar>, OutputError> {
    let all = cell_vars(fields);
    let mut out = match names {
        None => all,
        Some(names) => {
            let mut out = Vec::new();
            for n in names {
                let pool: Vec<&OutVar> = all.iter().filter(|v| in_pool(v, n)).collect();
                let named: Vec<&OutVar> = match all.iter().find(|v| &v.name == n) {
                    Some(v) => vec![v],
                    None => pool,
                };
                if named.is_empty() {
                    let reason = if fields.get(n).is_some() {
                        "only cell-centred variables can be written"
                    } else {
                        "no such variable"
                    };
                    return Err(OutputError::Invalid {
                        key: key.to_string(),
                        value: n.clone(),
                        reason: reason.into(),
                    });
                }
                for v in named {
                    if !out.contains(v) {
                        out.push(v.clone());
                    }
                }
            }
            out
        }
    };
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Whether `v` is sparse id `<id>` of pool `base`: sparse, and named `base_<id>`.
fn in_pool(v: &OutVar, base: &str) -> bool {
    v.sparse
        && v.name
            .strip_prefix(base)
            .and_then(|r| r.strip_prefix('_'))
            .is_some_and(|id| !id.is_empty() && id.bytes().all(|c| c.is_ascii_digit()))
}

/// The box of each block an output writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// Number of dimensions.
    pub ndim: usize,
    /// Ghost layers written along active directions (0 or the simulation's).
    pub ghosts: usize,
    /// Points written per direction (n1, n2, n3).
    pub n: [usize; 3],
    /// First written point in the block array, per direction.
    pub start: [usize; 3],
}

impl Extent {
    /// The written box of blocks of `mesh` with `nghost` ghosts in memory.
    pub fn new(mesh: &Mesh, nghost: usize, with_ghosts: bool) -> Self {
        let ndim = mesh.ndim();
        let nx = mesh.config().block_nx;
        let ghosts = if with_ghosts { nghost } else { 0 };
        let active = |d: usize| d < ndim;
        Self {
            ndim,
            ghosts,
            n: std::array::from_fn(|d| nx[d] + if active(d) { 2 * ghosts } else { 0 }),
            start: std::array::from_fn(|d| if active(d) { nghost - ghosts } else { 0 }),
        }
    }

    /// Ghosts written along direction `d`.
    pub fn ghosts_in(&self, d: usize) -> usize {
        if d < self.ndim {
            self.ghosts
        } else {
            0
        }
    }

    /// Points per block and component.
    pub fn len(&self) -> usize {
        self.n.iter().product()
    }

    /// Face coordinates along `d` of block `(lo, hi)` (n+1 values; an inactive direction has
    /// the block's extent).
    pub fn faces(&self, d: usize, lo: f64, hi: f64, nx: usize) -> Vec<f64> {
        let dx = (hi - lo) / nx as f64;
        let g = self.ghosts_in(d) as f64;
        (0..=self.n[d])
            .map(|i| {
                if d >= self.ndim {
                    if i == 0 {
                        lo
                    } else {
                        hi
                    }
                } else if i as f64 - g == nx as f64 {
                    hi // exact upper corner, not lo + nx * dx
                } else {
                    lo + (i as f64 - g) * dx
                }
            })
            .collect()
    }

    /// Cell-centre coordinates along `d`.
    pub fn centres(&self, d: usize, lo: f64, hi: f64, nx: usize) -> Vec<f64> {
        let dx = (hi - lo) / nx as f64;
        let g = self.ghosts_in(d) as f64;
        (0..self.n[d])
            .map(|i| {
                if d >= self.ndim {
                    0.5 * (lo + hi)
                } else {
                    lo + (i as f64 - g + 0.5) * dx
                }
            })
            .collect()
    }
}

/// Appends variable `v` of blocks `gids` of `g` (in gid order) as `(NB, ncomp, n3, n2, n1)`.
/// Unallocated blocks write `unallocated` (`SparseInfo` says which).
#[allow(clippy::too_many_arguments)]
pub fn append_var(
    out: &mut Vec<f64>,
    g: &Gathered,
    gids: std::ops::Range<usize>,
    layout: &FieldLayout,
    nvars: usize,
    v: &OutVar,
    ext: &Extent,
    unallocated: f64,
) {
    out.reserve(gids.len() * v.ncomp * ext.len());
    for gid in gids {
        let block = g.block(gid);
        let alloc = v.allocated(g, nvars, gid);
        for c in 0..v.ncomp {
            if !alloc {
                out.extend(std::iter::repeat_n(unallocated, ext.len()));
                continue;
            }
            for k in 0..ext.n[2] {
                for j in 0..ext.n[1] {
                    let i0 = layout.index_in_block(
                        v.slot + c,
                        [ext.start[0], j + ext.start[1], k + ext.start[2]],
                    );
                    out.extend_from_slice(&block[i0..i0 + ext.n[0]]);
                }
            }
        }
    }
}
