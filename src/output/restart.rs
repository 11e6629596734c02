//! Restart files (`.rhdf`): the `.phdf` layout holding every cell-centred variable with its
//! ghost cells in double precision, so that a run continues bit for bit; and their reader.
//!
//! A restarted driver reads the file's description on every rank ([`read_restart`]: the
//! blocks' locations and the variables' names and shapes), rebuilds the forest from
//! [`RestartData::locations`], partitions it, and reads only its own blocks' values with
//! [`RestartData::block_data`], in the layout of a [`Snapshot`].

use super::error::OutputError;
use super::gather::on_root;
use super::phdf::{check_layout, write_file, Storage};
use super::select::{cell_vars, Extent};
use super::{ParamValue, Snapshot};
use hdf5::types::VarLenUnicode;
use hdf5::H5Type;
use mpi::topology::Communicator;
use starhalo_mesh::field::Fields;
use starhalo_mesh::LogicalLocation;
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Writes a restart file of `snap` at `path`, its variables compressed at `deflate`,
/// collectively.
pub fn write_restart<C: Communicator>(
    comm: &C,
    snap: &Snapshot,
    deflate: u8,
    path: &Path,
) -> Result<(), OutputError> {
    let mut vars = cell_vars(snap.fields);
    vars.sort_by(|a, b| a.name.cmp(&b.name));
    let ext = Extent::new(snap.mesh, snap.nghost, true);
    let len = snap.layout.block_len();
    on_root(
        comm,
        snap,
        len,
        || super::gather::stored(snap),
        |g| {
            let storage = Storage {
                single: false,
                deflate,
                unallocated: 0.0,
                sealed: true,
            };
            write_file(path, snap, &g, &vars, &ext, storage)
        },
    )?;
    Ok(())
}

/// Everything a restart file holds, read back.
#[derive(Debug, Clone, PartialEq)]
pub struct RestartData {
    /// The file read.
    pub path: PathBuf,
    /// The resolved input deck of the run that wrote it.
    pub deck: String,
    /// Cycle, time, time step and wall time at the output.
    pub cycle: u64,
    /// Simulation time.
    pub time: f64,
    /// Time step.
    pub dt: f64,
    /// Wall-clock seconds of the writing run.
    pub wall_time: f64,
    /// Number of dimensions.
    pub ndim: usize,
    /// Ghost layers of the simulation.
    pub nghost: usize,
    /// Whether the variables hold ghost cells (always for files written here).
    pub includes_ghost: bool,
    /// Points per block and component as stored (n1, n2, n3).
    pub stored: [usize; 3],
    /// Every block's location (levels from the root grid), in gid order.
    pub locations: Vec<LogicalLocation>,
    /// Every block's derefinement count (`Blocks/derefinement_count`), in gid order.
    pub derefine_counts: Vec<u32>,
    /// Cells of the root grid per direction (`RootGridSize`).
    pub root_grid_size: [usize; 3],
    /// The domain: `[xmin, xmax]` per direction (from `RootGridDomain`).
    pub domain: [[f64; 2]; 3],
    /// Boundary conditions `ix1, ox1, ix2, ox2, ix3, ox3` by name.
    pub boundary_conditions: Vec<String>,
    /// Blocks per rank of the writing run (its owners: contiguous gid ranges).
    pub blocks_per_rank: Vec<usize>,
    /// Variables by name: their number of components (the values, `(NB, ncomp, n3, n2, n1)`,
    /// stay in the file until [`block_data`](Self::block_data) reads some blocks).
    pub variables: BTreeMap<String, usize>,
    /// Sparse variables by name: allocation flag of each block.
    pub sparse: BTreeMap<String, Vec<bool>>,
    /// The `/Params` attributes (what the writing run passed in [`Snapshot::params`]), by
    /// name; attributes of other types are skipped.
    pub params: BTreeMap<String, ParamValue>,
}

impl RestartData {
    /// Number of blocks.
    pub fn nblocks(&self) -> usize {
        self.locations.len()
    }

    /// The blocks `gids`, read from the file, in the layout of a [`Snapshot`] of `fields` with
    /// this file's ghost width: the data (`gids.len() * layout.block_len()`; ghosts zero when
    /// the file has none; unallocated variables at their default value) and the allocation
    /// flags (`gids.len() * nvars`; dense and non-cell variables true).
    pub fn block_data(
        &self,
        fields: &Fields,
        gids: &[usize],
    ) -> Result<(Vec<f64>, Vec<bool>), OutputError> {
        let bad = |reason: String| OutputError::BadRestart {
            path: self.path.clone(),
            reason,
        };
        let vars = cell_vars(fields);
        let nvars = fields.iter().count();
        let g = if self.includes_ghost { 0 } else { self.nghost };
        let dims: [usize; 3] =
            std::array::from_fn(|d| self.stored[d] + if d < self.ndim { 2 * g } else { 0 });
        let var_len: usize = dims.iter().product();
        let stored_len: usize = self.stored.iter().product();
        let slots: usize = vars.iter().map(|v| v.ncomp).sum();
        if let Some(&gid) = gids.iter().find(|&&g| g >= self.nblocks()) {
            return Err(bad(format!(
                "no block {gid} (the file has {})",
                self.nblocks()
            )));
        }
        // One hyperslab from the lowest gid asked for to the highest: a rank's blocks are
        // consecutive, so it reads only them.
        let (lo, hi) = (
            gids.iter().copied().min().unwrap_or(0),
            gids.iter().copied().max().map_or(0, |g| g + 1),
        );
        let file = hdf5::File::open(&self.path).map_err(|e| bad(e.to_string()))?;
        let mut data = vec![0.0; gids.len() * slots * var_len];
        let mut alloc = vec![true; gids.len() * nvars];
        for v in &vars {
            let Some(&ncomp) = self.variables.get(&v.name) else {
                return Err(bad(format!("no variable `{}`", v.name)));
            };
            if ncomp != v.ncomp {
                return Err(bad(format!(
                    "`{}` has {ncomp} components, the simulation registers {}",
                    v.name, v.ncomp
                )));
            }
            let values = if gids.is_empty() {
                Vec::new()
            } else {
                read_blocks(&file, &v.name, lo..hi).map_err(bad)?
            };
            let flags = self.sparse.get(&v.name);
            for (b, &gid) in gids.iter().enumerate() {
                if let Some(f) = flags {
                    alloc[b * nvars + v.index] = f[gid];
                }
                if !alloc[b * nvars + v.index] {
                    // The file holds 0 there; the simulation reads the default value.
                    for c in 0..v.ncomp {
                        data[(b * slots + v.slot + c) * var_len..][..var_len].fill(v.default);
                    }
                    continue;
                }
                for c in 0..v.ncomp {
                    let src = &values[((gid - lo) * v.ncomp + c) * stored_len..][..stored_len];
                    let dst = &mut data[(b * slots + v.slot + c) * var_len..][..var_len];
                    let off = |d: usize| if d < self.ndim { g } else { 0 };
                    for k in 0..self.stored[2] {
                        for j in 0..self.stored[1] {
                            let s = (k * self.stored[1] + j) * self.stored[0];
                            let t = ((k + off(2)) * dims[1] + j + off(1)) * dims[0] + off(0);
                            dst[t..t + self.stored[0]].copy_from_slice(&src[s..s + self.stored[0]]);
                        }
                    }
                }
            }
        }
        Ok((data, alloc))
    }
}

/// Values of variable `name` for blocks `gids` (`(NB, ncomp, n3, n2, n1)`, flattened).
fn read_blocks(file: &hdf5::File, name: &str, gids: Range<usize>) -> Result<Vec<f64>, String> {
    let ds = file.dataset(name).map_err(|e| format!("{name}: {e}"))?;
    check_layout(&ds).map_err(|e| e.to_string())?;
    let values: ndarray::ArrayD<f64> = ds
        .read_slice((gids, .., .., .., ..))
        .map_err(|e| format!("{name}: {e}"))?;
    Ok(values.into_iter().collect())
}

/// Reads a restart (or `.phdf`) file's description: everything but the variables' values,
/// which [`RestartData::block_data`] reads per block. Every rank may call it at once: the
/// file is opened read-only. libhdf5 trusts what it parses: check a restart file's seal
/// ([`super::seal::check`]) before.
pub fn read_restart(path: &Path) -> Result<RestartData, OutputError> {
    let bad = |reason: String| OutputError::BadRestart {
        path: path.to_path_buf(),
        reason,
    };
    let h = |e: hdf5::Error| bad(e.to_string());
    let file = hdf5::File::open(path).map_err(h)?;
    let info = file.group("Info").map_err(h)?;
    let scalar_i64 = |name: &str| -> Result<i64, OutputError> {
        info.attr(name)
            .and_then(|a| a.read_scalar::<i64>())
            .map_err(|e| bad(format!("Info/{name}: {e}")))
    };
    let scalar_f64 = |name: &str| -> Result<f64, OutputError> {
        info.attr(name)
            .and_then(|a| a.read_scalar::<f64>())
            .map_err(|e| bad(format!("Info/{name}: {e}")))
    };
    let count = |name: &str, v: i64| -> Result<usize, OutputError> {
        usize::try_from(v).map_err(|_| bad(format!("Info/{name} = {v}")))
    };
    let nb = count("NumMeshBlocks", scalar_i64("NumMeshBlocks")?)?;
    let ndim = count("NumDims", scalar_i64("NumDims")?)?;
    if !(1..=3).contains(&ndim) {
        return Err(bad(format!("Info/NumDims = {ndim}")));
    }
    let nghost = count("NGhost", scalar_i64("NGhost")?)?;
    let includes_ghost = scalar_i64("IncludesGhost")? != 0;
    // Parthenon's files store the cycle as int32.
    let ncycle = scalar_i64("NCycle")?;
    let cycle = u64::try_from(ncycle)
        .ok()
        .filter(|&c| i32::try_from(c).is_ok())
        .ok_or_else(|| bad(format!("Info/NCycle = {ncycle}: not a cycle 0 to 2^31-1")))?;
    let mbs: Vec<i64> = info
        .attr("MeshBlockSize")
        .and_then(|a| a.read_raw())
        .map_err(|e| bad(format!("Info/MeshBlockSize: {e}")))?;
    if mbs.len() != 3 || mbs.iter().any(|&n| n < 1) {
        return Err(bad(format!("Info/MeshBlockSize = {mbs:?}")));
    }
    let stored = [mbs[0] as usize, mbs[1] as usize, mbs[2] as usize];
    let per_pe: Vec<i64> = info
        .attr("BlocksPerPE")
        .and_then(|a| a.read_raw())
        .map_err(|e| bad(format!("Info/BlocksPerPE: {e}")))?;
    let blocks_per_rank: Vec<usize> = per_pe
        .iter()
        .map(|&n| count("BlocksPerPE", n))
        .collect::<Result<_, _>>()?;
    if blocks_per_rank.iter().sum::<usize>() != nb {
        return Err(bad(format!("BlocksPerPE {per_pe:?} do not sum to {nb}")));
    }
    let deck = file
        .group("Input")
        .and_then(|g| g.attr("File"))
        .and_then(|a| a.read_scalar::<VarLenUnicode>())
        .map_err(|e| bad(format!("Input/File: {e}")))
        .and_then(|t| text(t.as_bytes()).map_err(|e| bad(format!("Input/File: {e}"))))?;

    let read = |name: &str, shape: &[usize]| -> Result<hdf5::Dataset, OutputError> {
        let ds = file
            .dataset(name)
            .map_err(|e| bad(format!("{name}: {e}")))?;
        if ds.shape() != shape {
            return Err(bad(format!(
                "{name} has shape {:?}, expected {shape:?}",
                ds.shape()
            )));
        }
        check_layout(&ds).map_err(h)?;
        Ok(ds)
    };
    fn raw<T: H5Type>(ds: &hdf5::Dataset, path: &Path) -> Result<Vec<T>, OutputError> {
        ds.read_raw().map_err(|e| OutputError::BadRestart {
            path: path.to_path_buf(),
            reason: format!("{}: {e}", ds.name()),
        })
    }
    let levels: Vec<i64> = raw(&read("Levels", &[nb])?, path)?;
    let lx: Vec<i64> = raw(&read("LogicalLocations", &[nb, 3])?, path)?;
    let mut locations = Vec::with_capacity(nb);
    for b in 0..nb {
        let level = u32::try_from(levels[b]).map_err(|_| bad(format!("Levels[{b}]")))?;
        locations.push(LogicalLocation::new(
            level,
            [lx[3 * b], lx[3 * b + 1], lx[3 * b + 2]],
        ));
    }

    let counts: Vec<i64> = raw(&read("Blocks/derefinement_count", &[nb, 1])?, path)?;
    let derefine_counts = counts
        .iter()
        .map(|&c| u32::try_from(c).map_err(|_| bad(format!("Blocks/derefinement_count {c}"))))
        .collect::<Result<_, _>>()?;
    let rgs: Vec<i64> = info
        .attr("RootGridSize")
        .and_then(|a| a.read_raw())
        .map_err(|e| bad(format!("Info/RootGridSize: {e}")))?;
    if rgs.len() != 3 || rgs.iter().any(|&n| n < 1) {
        return Err(bad(format!("Info/RootGridSize = {rgs:?}")));
    }
    let dom: Vec<f64> = info
        .attr("RootGridDomain")
        .and_then(|a| a.read_raw())
        .map_err(|e| bad(format!("Info/RootGridDomain: {e}")))?;
    if dom.len() != 9 {
        return Err(bad(format!("Info/RootGridDomain has {} values", dom.len())));
    }
    let texts = |attr: &hdf5::Attribute, what: &str| -> Result<Vec<String>, OutputError> {
        let raw: Vec<VarLenUnicode> = attr.read_raw().map_err(|e| bad(format!("{what}: {e}")))?;
        (raw.iter().map(|t| text(t.as_bytes())))
            .collect::<Result<_, _>>()
            .map_err(|e| bad(format!("{what}: {e}")))
    };
    let attr = |name: &str| {
        info.attr(name)
            .map_err(|e| bad(format!("Info/{name}: {e}")))
    };
    let bcs = texts(&attr("BoundaryConditions")?, "Info/BoundaryConditions")?;
    let names = texts(&attr("OutputDatasetNames")?, "Info/OutputDatasetNames")?;
    let ncomps: Vec<u64> = info
        .attr("NumComponents")
        .and_then(|a| a.read_raw())
        .map_err(|e| bad(format!("Info/NumComponents: {e}")))?;
    if names.len() != ncomps.len() {
        return Err(bad(
            "OutputDatasetNames and NumComponents differ in length".into()
        ));
    }
    let mut variables = BTreeMap::new();
    for (name, &nc) in names.iter().zip(&ncomps) {
        let nc = nc as usize;
        read(name, &[nb, nc, stored[2], stored[1], stored[0]])?;
        variables.insert(name.clone(), nc);
    }
    let mut sparse = BTreeMap::new();
    if let Ok(ds) = file.dataset("SparseInfo") {
        let fields = ds
            .attr("SparseFields")
            .map_err(|e| bad(format!("SparseInfo/SparseFields: {e}")))
            .and_then(|a| texts(&a, "SparseInfo/SparseFields"))?;
        let ns = fields.len();
        if ds.shape() != [nb, ns] {
            return Err(bad(format!("SparseInfo has shape {:?}", ds.shape())));
        }
        let flags: Vec<bool> = raw(&ds, path)?;
        for (s, f) in fields.iter().enumerate() {
            sparse.insert(f.clone(), (0..nb).map(|b| flags[b * ns + s]).collect());
        }
    }
    let params = read_params(&file).map_err(|e| bad(format!("Params: {e}")))?;
    // A run resumed at a time that is not a number would never reach its end.
    let time = scalar_f64("Time")?;
    let dt = scalar_f64("dt")?;
    let wall_time = scalar_f64("WallTime")?;
    for (name, x) in [("Time", time), ("dt", dt), ("WallTime", wall_time)] {
        if !(x.is_finite() && x >= 0.0) {
            return Err(bad(format!("Info/{name} = {x}: not a finite number >= 0")));
        }
    }
    Ok(RestartData {
        path: path.to_path_buf(),
        deck,
        cycle,
        time,
        dt,
        wall_time,
        ndim,
        nghost,
        includes_ghost,
        stored,
        locations,
        derefine_counts,
        root_grid_size: [rgs[0] as usize, rgs[1] as usize, rgs[2] as usize],
        domain: [0, 1, 2].map(|d| [dom[3 * d], dom[3 * d + 1]]),
        boundary_conditions: bcs,
        blocks_per_rank,
        variables,
        sparse,
        params,
    })
}

/// A string of the file as text. hdf5's `as_str` takes the bytes for UTF-8 unchecked, and
/// a file can hold any bytes: checked here, so other bytes are an error naming the value
/// rather than an invalid `str`.
fn text(bytes: &[u8]) -> hdf5::Result<String> {
    String::from_utf8(bytes.to_vec()).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let before: String = String::from_utf8_lossy(&bytes[..at])
            .chars()
            .rev()
            .take(24)
            .collect();
        let before: String = before.chars().rev().collect();
        let msg = format!(
            "a string of {} bytes is not UTF-8 at byte {at}, after {before:?}",
            bytes.len()
        );
        hdf5::Error::from(msg.as_str())
    })
}

/// The attributes of `/Params` that have a [`ParamValue`] type.
fn read_params(file: &hdf5::File) -> hdf5::Result<BTreeMap<String, ParamValue>> {
    use hdf5::types::TypeDescriptor as T;
    let mut out = BTreeMap::new();
    let Ok(group) = file.group("Params") else {
        return Ok(out);
    };
    for name in group.attr_names()? {
        let a = group.attr(&name)?;
        if !a.is_scalar() {
            continue;
        }
        let v = match a.dtype()?.to_descriptor()? {
            T::Integer(_) | T::Unsigned(_) => ParamValue::Int(a.read_scalar::<i64>()?),
            T::Float(_) => ParamValue::Real(a.read_scalar::<f64>()?),
            T::Boolean => ParamValue::Bool(a.read_scalar::<bool>()?),
            T::VarLenUnicode => {
                ParamValue::Str(text(a.read_scalar::<VarLenUnicode>()?.as_bytes())?)
            }
            T::VarLenAscii => {
                let t = a.read_scalar::<hdf5::types::VarLenAscii>()?;
                ParamValue::Str(text(t.as_bytes())?)
            }
            _ => continue,
        };
        out.insert(name, v);
    }
    Ok(out)
}
