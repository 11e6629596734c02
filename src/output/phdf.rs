//! The HDF5 writer of `.phdf` (and, through [`write_file`], `.rhdf`) files, in Parthenon's
//! layout (output format version 4), so that Parthenon's `phdf.py`, yt's `parthenon` frontend
//! and ParaView/VisIt (through the `.xdmf` beside it) read them.

use super::config::OutputBlock;
use super::error::OutputError;
use super::gather::{on_root, Gathered};
use super::seal::{seal, USER_BLOCK};
use super::select::{append_var, select, Extent, OutVar};
use super::{ParamValue, Snapshot};
use hdf5::types::VarLenUnicode;
use hdf5::{H5Type, Location};
use mpi::topology::Communicator;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Parthenon's output format version.
pub const OUTPUT_FORMAT_VERSION: i32 = 4;

/// Writes `snap` as a `.phdf` file at `path` and its `.xdmf` at `path` + `.xdmf`,
/// collectively (see [`super::gather`]).
pub fn write_phdf<C: Communicator>(
    comm: &C,
    snap: &Snapshot,
    block: &OutputBlock,
    path: &Path,
) -> Result<(), OutputError> {
    // The selection depends only on the fields, the same on every rank: no agreement needed.
    let vars = select(
        snap.fields,
        block.variables.as_deref(),
        &format!("{}/variables", block.block),
    )?;
    let ext = Extent::new(snap.mesh, snap.nghost, block.ghost_zones);
    let len = snap.layout.block_len();
    on_root(
        comm,
        snap,
        len,
        || super::gather::stored(snap),
        |g| {
            let storage = Storage {
                single: block.single_precision,
                deflate: block.compression,
                unallocated: if block.sparse_seed_nans {
                    f64::NAN
                } else {
                    0.0
                },
                sealed: false,
            };
            write_file(path, snap, &g, &vars, &ext, storage)?;
            let xpath = xdmf_path(path);
            if !block.write_xdmf {
                // No index of an earlier file of this name is left to describe this one.
                return match std::fs::remove_file(&xpath) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(OutputError::Io {
                        path: xpath,
                        cause: e,
                    }),
                    _ => Ok(()),
                };
            }
            super::write_atomically(&xpath, |w| {
                super::xdmf::write_xdmf(w, path, snap, &vars, &ext, block.single_precision)
            })
            .map_err(|cause| OutputError::Io { path: xpath, cause })
        },
    )?;
    Ok(())
}

/// The `.xdmf` file beside a `.phdf` file: its name with `.xdmf` appended.
pub fn xdmf_path(phdf: &Path) -> PathBuf {
    let mut s = phdf.as_os_str().to_owned();
    s.push(".xdmf");
    PathBuf::from(s)
}

/// How a file stores its variables.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Storage {
    /// As float32 (`single_precision_output`), else float64.
    pub single: bool,
    /// Deflate level, 0 (none) to 9 (`hdf5_compression_level`).
    pub deflate: u8,
    /// What a block where a sparse variable is unallocated holds: 0, as Parthenon writes by
    /// default, or NaN (`sparse_seed_nans`).
    pub unallocated: f64,
    /// Sealed ([`super::seal`]): restart files only, since Parthenon's `phdf_diff.py`
    /// compares every `Info` attribute and `Blocks` dataset it finds, so the seal lives
    /// outside what HDF5 shows (a checksum over the wall time would make any two runs differ).
    pub sealed: bool,
}

/// Writes the gathered blocks `g` to `path` (through a temporary file renamed at the end, so
/// a failed write never leaves a truncated file under the final name).
pub fn write_file(
    path: &Path,
    snap: &Snapshot,
    g: &Gathered,
    vars: &[OutVar],
    ext: &Extent,
    storage: Storage,
) -> Result<(), OutputError> {
    let tmp = super::tmp_path(path);
    // Not the writer's to remove below, should the write fail.
    super::writable_file(&tmp).map_err(|cause| OutputError::Io {
        path: path.to_path_buf(),
        cause,
    })?;
    let h = |e: hdf5::Error| OutputError::hdf5(path, e);
    let user_block = if storage.sealed { USER_BLOCK } else { 0 };
    let written = hdf5::File::with_options()
        .with_fcpl(|p| p.userblock(user_block))
        .create(&tmp)
        .map_err(|e| OutputError::hdf5(&tmp, e))
        .and_then(|file| {
            write_contents(&file, snap, g, vars, ext, storage).map_err(h)?;
            file.close().map_err(h)
        })
        .and_then(|()| match storage.sealed {
            true => seal(&tmp).map_err(|cause| OutputError::Io {
                path: tmp.clone(),
                cause,
            }),
            false => Ok(()),
        })
        .and_then(|()| {
            std::fs::rename(&tmp, path).map_err(|cause| OutputError::Io {
                path: path.to_path_buf(),
                cause,
            })
        });
    if written.is_err() {
        // A full disk or a failed rename must not leave the partial file behind.
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Parthenon's root level: the tree levels above the root grid (`2^RootLevel` covers the
/// largest root-grid direction).
pub fn root_level(nrb: [i64; 3]) -> u32 {
    let m = nrb.iter().copied().max().unwrap_or(1).max(1) as u64;
    m.next_power_of_two().trailing_zeros()
}

fn write_contents(
    file: &hdf5::File,
    snap: &Snapshot,
    g: &Gathered,
    vars: &[OutVar],
    ext: &Extent,
    storage: Storage,
) -> hdf5::Result<()> {
    let mesh = snap.mesh;
    let cfg = mesh.config();
    let forest = mesh.forest();
    let nb = g.nblocks;
    let ndim = ext.ndim;
    let nvars = snap.fields.iter().count();
    let rl = root_level(cfg.nrb());

    let input = file.create_group("Input")?;
    attr_str(&input, "File", snap.deck)?;

    let info = file.create_group("Info")?;
    attr_scalar(&info, "OutputFormatVersion", &OUTPUT_FORMAT_VERSION)?;
    // The format fixes NCycle as int32; a wrapped cycle would corrupt a restart.
    let ncycle = i32::try_from(snap.cycle)
        .map_err(|_| hdf5::Error::from(format!("cycle {} exceeds int32", snap.cycle).as_str()))?;
    attr_scalar(&info, "NCycle", &ncycle)?;
    attr_scalar(&info, "Time", &snap.time)?;
    attr_scalar(&info, "dt", &snap.dt)?;
    attr_scalar(&info, "WallTime", &snap.wall_time)?;
    attr_scalar(&info, "NumDims", &(ndim as i32))?;
    attr_scalar(&info, "NumMeshBlocks", &(nb as i32))?;
    attr_scalar(&info, "MaxLevel", &(forest.max_level() as i32))?;
    attr_scalar(&info, "IncludesGhost", &i32::from(ext.ghosts > 0))?;
    attr_scalar(&info, "NGhost", &(snap.nghost as i32))?;
    attr_str(&info, "Coordinates", "UniformCartesian")?;
    attr_scalar(&info, "NBNew", &0i32)?;
    attr_scalar(&info, "NBDel", &0i32)?;
    attr_scalar(&info, "RootLevel", &(rl as i32))?;
    let adaptive = cfg.refinement == starhalo_mesh::RefinementKind::Adaptive;
    attr_scalar(&info, "Refine", &i32::from(adaptive))?;
    attr_scalar(&info, "Multilevel", &i32::from(cfg.is_multilevel()))?;
    let per_pe: Vec<i32> = g.blocks_per_rank.iter().map(|&n| n as i32).collect();
    attr_vec(&info, "BlocksPerPE", &per_pe, false)?;
    let mbs: Vec<i32> = ext.n.iter().map(|&n| n as i32).collect();
    attr_vec(&info, "MeshBlockSize", &mbs, false)?;
    let mut domain = Vec::with_capacity(9);
    for d in 0..3 {
        domain.extend([cfg.xmin[d], cfg.xmax[d], 1.0]);
    }
    attr_vec(&info, "RootGridDomain", &domain, false)?;
    let rgs: Vec<i32> = cfg.nx.iter().map(|&n| n as i32).collect();
    attr_vec(&info, "RootGridSize", &rgs, false)?;
    let bcs: Vec<String> = cfg
        .bc
        .iter()
        .flat_map(|pair| pair.iter().map(|b| b.to_string()))
        .collect();
    attr_strs(&info, "BoundaryConditions", &bcs, false)?;
    let ncomp: Vec<u64> = vars.iter().map(|v| v.ncomp as u64).collect();
    attr_vec(&info, "NumComponents", &ncomp, true)?;
    let comp_names: Vec<String> = vars.iter().flat_map(|v| v.component_names()).collect();
    attr_strs(&info, "ComponentNames", &comp_names, true)?;
    let names: Vec<String> = vars.iter().map(|v| v.name.clone()).collect();
    attr_strs(&info, "OutputDatasetNames", &names, true)?;

    let params = file.create_group("Params")?;
    for (name, value) in snap.params {
        match value {
            ParamValue::Int(v) => attr_scalar(&params, name, v)?,
            ParamValue::Real(v) => attr_scalar(&params, name, v)?,
            ParamValue::Bool(v) => attr_scalar(&params, name, v)?,
            ParamValue::Str(v) => attr_str(&params, name, v)?,
        }
    }

    // Per-block geometry, in gid order.
    let locs = forest.leaves();
    let mut xmin = Vec::with_capacity(nb * ndim);
    let mut lx123 = Vec::with_capacity(nb * 3);
    let mut lvl5 = Vec::with_capacity(nb * 5);
    let mut levels = Vec::with_capacity(nb);
    let mut faces: [Vec<f64>; 3] = Default::default();
    let mut centres: [Vec<f64>; 3] = Default::default();
    let cnghost = (snap.nghost / 2 + 1) as i32;
    for gid in 0..nb {
        let (lo, hi) = mesh
            .bounds(gid)
            .ok_or_else(|| hdf5::Error::from(format!("no block {gid} in the mesh").as_str()))?;
        let l = locs[gid];
        xmin.extend_from_slice(&lo[..ndim]);
        lx123.extend(l.lx());
        let lid = mesh.partition().lid_of(gid).unwrap_or(0);
        lvl5.extend([(l.level() + rl) as i32, gid as i32, lid as i32, cnghost, 0]);
        levels.push(i64::from(l.level()));
        for d in 0..3 {
            faces[d].extend(ext.faces(d, lo[d], hi[d], cfg.block_nx[d]));
            centres[d].extend(ext.centres(d, lo[d], hi[d], cfg.block_nx[d]));
        }
    }
    let blocks = file.create_group("Blocks")?;
    dataset(&blocks, "xmin", &[nb, ndim], &xmin)?;
    dataset(&blocks, "loc.lx123", &[nb, 3], &lx123)?;
    dataset(&blocks, "loc.level-gid-lid-cnghost-gflag", &[nb, 5], &lvl5)?;
    // Each leaf's pending derefinement requests: a restart takes them back.
    let counts: Vec<i32> = mesh
        .derefine_counts()
        .iter()
        .map(|&c| i32::try_from(c).unwrap_or(i32::MAX))
        .collect();
    dataset(&blocks, "derefinement_count", &[nb, 1], &counts)?;

    let axes = ["x", "y", "z"];
    let locations = file.create_group("Locations")?;
    let volume = file.create_group("VolumeLocations")?;
    for d in 0..3 {
        dataset(&locations, axes[d], &[nb, ext.n[d] + 1], &faces[d])?;
        dataset(&volume, axes[d], &[nb, ext.n[d]], &centres[d])?;
    }
    dataset(file, "Levels", &[nb], &levels)?;
    dataset(file, "LogicalLocations", &[nb, 3], &lx123)?;

    // Variables: (NB, ncomp, n3, n2, n1), always 5-D, written a chunk of blocks at a time so
    // that no copy of a whole variable is made.
    for v in vars {
        let shape = [nb, v.ncomp, ext.n[2], ext.n[1], ext.n[0]];
        let fill = |gids, buf: &mut Vec<f64>| {
            append_var(
                buf,
                g,
                gids,
                &snap.layout,
                nvars,
                v,
                ext,
                storage.unallocated,
            )
        };
        let ds = if storage.single {
            dataset_by_rows::<f32>(file, &v.name, shape, storage.deflate, fill)?
        } else {
            dataset_by_rows::<f64>(file, &v.name, shape, storage.deflate, fill)?
        };
        attr_str(&ds, "TopologicalLocation", "Cell")?;
    }

    let sparse: Vec<&OutVar> = vars.iter().filter(|v| v.sparse).collect();
    if !sparse.is_empty() {
        let ns = sparse.len();
        let mut info = Vec::with_capacity(nb * ns);
        for gid in 0..nb {
            info.extend(sparse.iter().map(|v| v.allocated(g, nvars, gid)));
        }
        let ds = dataset(file, "SparseInfo", &[nb, ns], &info)?;
        let names: Vec<String> = sparse.iter().map(|v| v.name.clone()).collect();
        attr_strs(&ds, "SparseFields", &names, false)?;
        dataset(file, "SparseDeallocCount", &[nb, ns], &vec![0i32; nb * ns])?;
    }
    Ok(())
}

/// Bytes per chunk the datasets aim at: large enough that the chunk index stays small, small
/// enough that a rank reading its own blocks of a restart reads little beyond them.
const CHUNK_BYTES: usize = 1 << 20;

/// A dataset of `shape` holding `data` in row-major order (see [`new_dataset`]).
pub fn dataset<T: H5Type>(
    at: &hdf5::Group,
    name: &str,
    shape: &[usize],
    data: &[T],
) -> hdf5::Result<hdf5::Dataset> {
    let ds = new_dataset::<T>(at, name, shape, 0)?;
    ds.write_raw(data)?;
    Ok(ds)
}

/// A 5-D dataset of `shape` (see [`new_dataset`], compressed at `deflate`) written a chunk
/// of rows of its first index at a time, `fill(rows, buf)` appending the values of `rows` to
/// `buf`, so that no copy of the whole dataset is made; `T` is the type it is stored as.
pub fn dataset_by_rows<T: H5Type + Stored>(
    at: &hdf5::Group,
    name: &str,
    shape: [usize; 5],
    deflate: u8,
    mut fill: impl FnMut(std::ops::Range<usize>, &mut Vec<f64>),
) -> hdf5::Result<hdf5::Dataset> {
    let ds = new_dataset::<T>(at, name, &shape, deflate)?;
    let rows = chunk_shape(&shape, size_of::<T>())
        .map_or(shape[0], |c| c[0])
        .max(1);
    let mut buf = Vec::new();
    let mut stored: Vec<T> = Vec::new();
    for first in (0..shape[0]).step_by(rows) {
        let part = first..(first + rows).min(shape[0]);
        buf.clear();
        fill(part.clone(), &mut buf);
        stored.clear();
        stored.extend(buf.iter().map(|&x| T::from_f64(x)));
        let dims = (part.len(), shape[1], shape[2], shape[3], shape[4]);
        let view = ndarray::ArrayView::from_shape(dims, &stored)
            .map_err(|e| hdf5::Error::from(format!("{name}: {e}").as_str()))?;
        ds.write_slice(view, (part, .., .., .., ..))?;
    }
    Ok(ds)
}

/// The types values are stored as: `f64` as they are, `f32` rounded (single precision).
pub trait Stored: Copy {
    /// `x` in this type.
    fn from_f64(x: f64) -> Self;
}

impl Stored for f64 {
    fn from_f64(x: f64) -> Self {
        x
    }
}

impl Stored for f32 {
    fn from_f64(x: f64) -> Self {
        x as f32
    }
}

/// An empty dataset of `shape`, stored in chunks of whole rows of its first index (blocks,
/// for the variables; see [`chunk_shape`]), compressed by deflate at level `deflate` (none
/// at 0), with HDF5's Fletcher-32 checksum of each stored chunk, so a reader (HDF5 itself,
/// for every tool) rejects corrupted values instead of returning them.
pub fn new_dataset<T: H5Type>(
    at: &hdf5::Group,
    name: &str,
    shape: &[usize],
    deflate: u8,
) -> hdf5::Result<hdf5::Dataset> {
    let builder = at.new_dataset::<T>().shape(shape.to_vec());
    match chunk_shape(shape, size_of::<T>()) {
        Some(chunk) if deflate > 0 => builder
            .chunk(chunk)
            .deflate(deflate)
            .fletcher32()
            .create(name),
        Some(chunk) => builder.chunk(chunk).fletcher32().create(name),
        None => builder.create(name),
    }
}

/// Checks, before anything is read from `ds`, that it is stored in the chunks
/// [`new_dataset`] makes for its shape and type: HDF5 trusts a chunk shape it reads from the
/// file, and a corrupted one makes it read past its buffers.
pub fn check_layout(ds: &hdf5::Dataset) -> hdf5::Result<()> {
    let want = chunk_shape(&ds.shape(), ds.dtype()?.size());
    let got = ds.chunk();
    if got != want || (got.is_some() && !ds.filters().contains(&hdf5::filters::Filter::Fletcher32))
    {
        return Err(hdf5::Error::from(
            format!(
                "{}: stored in chunks {got:?}, not as written ({want:?})",
                ds.name()
            )
            .as_str(),
        ));
    }
    Ok(())
}

/// The chunk shape of a dataset of `shape` with elements of `elem` bytes: whole rows of its
/// first index, about [`CHUNK_BYTES`] of them, or `None` where it cannot be chunked (chunks
/// need a positive extent in every dimension).
fn chunk_shape(shape: &[usize], elem: usize) -> Option<Vec<usize>> {
    match shape.split_first() {
        Some((&rows, rest)) if rows > 0 && rest.iter().all(|&n| n > 0) => {
            let row_bytes = rest.iter().product::<usize>() * elem;
            let mut chunk = shape.to_vec();
            chunk[0] = (CHUNK_BYTES / row_bytes.max(1)).clamp(1, rows);
            Some(chunk)
        }
        _ => None,
    }
}

/// A scalar attribute.
pub fn attr_scalar<T: H5Type>(at: &Location, name: &str, v: &T) -> hdf5::Result<()> {
    at.new_attr::<T>().shape(()).create(name)?.write_scalar(v)
}

/// A 1-D attribute; one value makes a scalar unless `always_1d` (the yt traps).
pub fn attr_vec<T: H5Type>(
    at: &Location,
    name: &str,
    v: &[T],
    always_1d: bool,
) -> hdf5::Result<()> {
    if v.len() == 1 && !always_1d {
        return attr_scalar(at, name, &v[0]);
    }
    at.new_attr::<T>().shape(v.len()).create(name)?.write_raw(v)
}

fn varlen(s: &str) -> hdf5::Result<VarLenUnicode> {
    VarLenUnicode::from_str(s).map_err(|e| hdf5::Error::from(format!("string {s:?}: {e}").as_str()))
}

/// A variable-length string attribute (h5py reads fixed-length strings as bytes, which
/// breaks yt).
pub fn attr_str(at: &Location, name: &str, s: &str) -> hdf5::Result<()> {
    attr_scalar(at, name, &varlen(s)?)
}

/// A 1-D attribute of variable-length strings (scalar for one unless `always_1d`).
pub fn attr_strs(at: &Location, name: &str, v: &[String], always_1d: bool) -> hdf5::Result<()> {
    let s: Vec<VarLenUnicode> = v.iter().map(|s| varlen(s)).collect::<Result<_, _>>()?;
    attr_vec(at, name, &s, always_1d)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dataset of several chunks is written a chunk at a time: every row lands where it
    /// belongs, in both precisions, and the last, short chunk too.
    #[test]
    fn a_dataset_written_by_rows_holds_every_row() {
        let path = std::env::temp_dir().join(format!("by_rows_{}.h5", std::process::id()));
        let file = hdf5::File::create(&path).unwrap();
        // 800 B per row: 1310 rows per chunk of 1 MiB, so 3000 rows make three writes.
        let shape = [3000, 2, 1, 1, 50];
        let value = |row: usize, i: usize| (row * 100 + i) as f64 + 0.1;
        let mut calls = Vec::new();
        let fill = |rows: std::ops::Range<usize>, buf: &mut Vec<f64>| {
            calls.push(rows.clone());
            for r in rows {
                buf.extend((0..100).map(|i| value(r, i)));
            }
        };
        let ds = dataset_by_rows::<f64>(&file, "d", shape, 0, fill).unwrap();
        assert_eq!(calls, [0..1310, 1310..2620, 2620..3000]);
        let back: Vec<f64> = ds.read_raw().unwrap();
        let want: Vec<f64> = (0..3000)
            .flat_map(|r| (0..100).map(move |i| value(r, i)))
            .collect();
        assert_eq!(back, want);
        let fill = |rows: std::ops::Range<usize>, buf: &mut Vec<f64>| {
            for r in rows {
                buf.extend((0..100).map(|i| value(r, i)));
            }
        };
        let ds = dataset_by_rows::<f32>(&file, "s", shape, 5, fill).unwrap();
        let back: Vec<f32> = ds.read_raw().unwrap();
        assert_eq!(back, want.iter().map(|&x| x as f32).collect::<Vec<_>>());
        assert_eq!(ds.shape(), shape);
        drop(file);
        let _ = std::fs::remove_file(&path);
    }
}
