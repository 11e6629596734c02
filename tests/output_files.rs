//! Outputs on 1 and 3 ranks: `.phdf` (with and without ghosts), `.xdmf`, history, PNG and
//! restart files of a 2-level AMR mesh in 2-D and 3-D, with a dense scalar, a 3-component
//! vector, a sparse scalar unallocated on some blocks and a face variable that is not written;
//! and `.phdf` files of a statically refined and of a single-level mesh (`Info/Refine`).
//!
//! The parent relaunches this binary under `mpiexec`; each job writes its files into its own
//! directory and reads its restart file back on every rank. The parent then checks the files
//! against the layout of `phdf.md`, against the function the data were filled with, and the
//! 1-rank files against the 3-rank files.

mod common;

#[allow(dead_code, unused_imports)]
#[path = "../src/output/mod.rs"]
mod output;

use output::{FileNumber, FileType, OutputBlock, OutputError, ParamValue, Snapshot};
use starhalo_boundary::FieldLayout;
use starhalo_mesh::field::{Centering, Fields, Metadata, SparseThresholds};
use starhalo_mesh::{Mesh, MeshConfig, RefinementFlag, RefinementKind, StaticRegion};
use std::path::{Path, PathBuf};

const OUT_ENV: &str = "STARHALO_TEST_OUT";
const DECK: &str = "parthenon/job:\n  problem_id: test\n# \"quoted\" & <odd> text, ünïcode\n";
const SPARSE_DEFAULT: f64 = 0.25;
const CASES: [&str; 2] = ["d2", "d3"];

fn main() {
    if std::env::var_os(common::CHILD_ENV).is_some() {
        child();
        return;
    }
    eprintln!("output_files: phdf/xdmf/hst/png/rhdf on 1 and 3 ranks");
    let base = std::env::temp_dir().join(format!("starhalo-output-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let exe = std::env::current_exe().expect("test binary path");
    for n in [1usize, 3] {
        let dir = base.join(format!("r{n}"));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        let d = dir.to_string_lossy().into_owned();
        let out = common::mpirun(
            n,
            240,
            &exe,
            &[],
            &[(common::CHILD_ENV, "1"), (OUT_ENV, d.as_str())],
        );
        common::assert_ok(&format!("writers on {n} ranks"), &out);
    }
    for case in CASES {
        for n in [1usize, 3] {
            let dir = base.join(format!("r{n}"));
            check_phdf(case, n, &dir, false);
            check_phdf(case, n, &dir, true);
            check_xdmf(&dir.join(format!("{case}.out0.00000.phdf.xdmf")));
            check_xdmf(&dir.join(format!("{case}.out1.00000.phdf.xdmf")));
            check_hst(case, &dir);
            check_refine_flags(case, &dir);
            check_single(case, &dir);
            check_storage(case, n, &dir);
            check_png(case, &dir);
        }
        for file in [
            format!("{case}.out0.00000.phdf"),
            format!("{case}.out1.00000.phdf"),
            format!("{case}.out2.00000.rhdf"),
        ] {
            same_data(&base.join("r1").join(&file), &base.join("r3").join(&file));
        }
        let hst = format!("{case}.out3.hst");
        assert_eq!(
            std::fs::read_to_string(base.join("r1").join(&hst)).unwrap(),
            std::fs::read_to_string(base.join("r3").join(&hst)).unwrap(),
            "history differs between 1 and 3 ranks"
        );
    }
    let _ = std::fs::remove_dir_all(&base);
    eprintln!("  ok");
}

// ---------------------------------------------------------------- the test problem

/// A 2-level mesh: 2-D 16x8 cells on [-1,1]x[-0.5,0.5] in 4x4 blocks (root level 2), or 3-D
/// 8^3 cells in 4^3 blocks; one root block refined.
fn mesh(case: &str, nranks: usize) -> Mesh {
    let mut c = if case == "d2" {
        let mut c = MeshConfig::new([16, 8, 1], [4, 4, 1]);
        c.xmin = [-1.0, -0.5, 0.0];
        c.xmax = [1.0, 0.5, 1.0];
        c
    } else {
        MeshConfig::new([8, 8, 8], [4, 4, 4])
    };
    c.refinement = RefinementKind::Adaptive;
    c.numlevel = 2;
    c.bc[0] = [starhalo_mesh::BoundaryCondition::Periodic; 2];
    let mut m = Mesh::new(c, nranks).unwrap();
    let mut flags = vec![RefinementFlag::Same; m.forest().len()];
    flags[if case == "d2" { 2 } else { 0 }] = RefinementFlag::Refine;
    m.remesh(&flags, None).unwrap();
    m
}

/// The root grid of `case` refined otherwise: a static region one level deep in a corner
/// (more than one level, none adaptive), or a single level.
fn mesh_refined(case: &str, nranks: usize, kind: RefinementKind) -> Mesh {
    let mut c = mesh(case, 1).config().clone();
    c.refinement = kind;
    if kind == RefinementKind::Static {
        c.static_regions.push(StaticRegion {
            xmin: c.xmin,
            xmax: std::array::from_fn(|d| c.xmin[d] + 0.1),
            level: 1,
            id: 0,
        });
    } else {
        c.numlevel = 1;
    }
    Mesh::new(c, nranks).unwrap()
}

fn fields() -> Fields {
    let mut f = Fields::default();
    f.add("rho", Metadata::new(Centering::Cell)).unwrap();
    f.add("vel", Metadata::new(Centering::Cell).components(3))
        .unwrap();
    f.add("bface", Metadata::new(Centering::Face)).unwrap();
    let t = SparseThresholds {
        default_value: SPARSE_DEFAULT,
        ..SparseThresholds::default()
    };
    f.add("scal", Metadata::new(Centering::Cell).sparse(t))
        .unwrap();
    f
}

/// Slots: rho 0, vel 1..=3, scal 4. Variables: rho 0, vel 1, bface 2, scal 3.
const NSLOTS: usize = 5;
const NVARS: usize = 4;

/// The value of slot `s` at a point: linear, so the midpoint rule integrates it exactly.
fn f(s: usize, x: [f64; 3]) -> f64 {
    1.0 + 10.0 * s as f64 + 2.0 * x[0] + 3.0 * x[1] + 5.0 * x[2]
}

fn scal_allocated(gid: usize) -> bool {
    gid % 3 != 1
}

/// Centre of point `p` (ghosts included) of block `gid`.
fn centre(m: &Mesh, gid: usize, g: usize, p: [usize; 3]) -> [f64; 3] {
    let (lo, hi) = m.bounds(gid).unwrap();
    let nx = m.config().block_nx;
    std::array::from_fn(|d| {
        if d < m.ndim() {
            lo[d] + (p[d] as f64 - g as f64 + 0.5) * (hi[d] - lo[d]) / nx[d] as f64
        } else {
            0.5 * (lo[d] + hi[d])
        }
    })
}

struct Local {
    layout: FieldLayout,
    gids: Vec<usize>,
    data: Vec<f64>,
    allocated: Vec<bool>,
}

fn local(m: &Mesh, rank: usize) -> Local {
    let g = m.config().nghost;
    let layout = FieldLayout::of_shape(&m.index_shape().unwrap(), NSLOTS);
    let gids: Vec<usize> = m.partition().blocks_of(rank).collect();
    let mut data = vec![0.0; gids.len() * layout.block_len()];
    let mut allocated = vec![true; gids.len() * NVARS];
    let [d0, d1, d2] = layout.dims;
    for (b, &gid) in gids.iter().enumerate() {
        allocated[b * NVARS + 3] = scal_allocated(gid);
        for s in 0..NSLOTS {
            for k in 0..d2 {
                for j in 0..d1 {
                    for i in 0..d0 {
                        let v = if s == 4 && !scal_allocated(gid) {
                            SPARSE_DEFAULT
                        } else {
                            f(s, centre(m, gid, g, [i, j, k]))
                        };
                        data[b * layout.block_len() + layout.index_in_block(s, [i, j, k])] = v;
                    }
                }
            }
        }
    }
    Local {
        layout,
        gids,
        data,
        allocated,
    }
}

fn params() -> Vec<(String, ParamValue)> {
    vec![
        ("hydro/gamma".into(), ParamValue::Real(1.4)),
        ("hydro/n".into(), ParamValue::Int(3)),
        ("hydro/on".into(), ParamValue::Bool(true)),
        ("hydro/eos".into(), ParamValue::Str("ideal".into())),
    ]
}

// ---------------------------------------------------------------- under mpiexec

fn child() {
    use mpi::topology::Communicator;
    let universe = mpi::initialize().expect("MPI init");
    let world = universe.world();
    let rank = world.rank() as usize;
    let nranks = world.size() as usize;
    let dir = PathBuf::from(std::env::var(OUT_ENV).expect("output dir"));
    let fields = fields();
    let params = params();
    for case in CASES {
        let m = mesh(case, nranks);
        let l = local(&m, rank);
        let snap = Snapshot {
            mesh: &m,
            fields: &fields,
            layout: l.layout,
            nghost: m.config().nghost,
            gids: &l.gids,
            data: &l.data,
            stride: l.layout.block_len(),
            allocated: &l.allocated,
            cycle: 42,
            time: 0.125,
            dt: 1.0 / 3.0,
            wall_time: 2.5,
            deck: DECK,
            params: &params,
        };
        let write = |b: &OutputBlock| {
            output::write_output(&world, &snap, b, case, &dir, FileNumber::Step(0))
        };
        write(&OutputBlock::new(0, FileType::Hdf5)).unwrap();
        let mut b1 = OutputBlock::new(1, FileType::Hdf5);
        b1.ghost_zones = true;
        b1.variables = Some(vec!["vel".into(), "scal".into()]);
        write(&b1).unwrap();
        let mut b7 = OutputBlock::new(7, FileType::Hdf5);
        b7.single_precision = true;
        b7.variables = Some(vec!["rho".into()]);
        write(&b7).unwrap();
        // Parthenon's storage keys: no compression, no .xdmf, NaN where sparse is unallocated,
        // three-digit file numbers.
        let mut b9 = OutputBlock::new(9, FileType::Hdf5);
        (b9.compression, b9.write_xdmf, b9.sparse_seed_nans) = (0, false, true);
        b9.number_width = 3;
        if rank == 0 {
            // An index left by an earlier run must not describe the new file.
            let stale = dir.join(format!("{case}.out9.000.phdf.xdmf"));
            std::fs::write(stale, "stale").unwrap();
        }
        write(&b9).unwrap();
        // The same variables on a statically refined mesh and on a single level.
        for (id, kind) in [(10, RefinementKind::Static), (11, RefinementKind::None)] {
            let m = mesh_refined(case, nranks, kind);
            let l = local(&m, rank);
            let other = Snapshot {
                mesh: &m,
                gids: &l.gids,
                data: &l.data,
                allocated: &l.allocated,
                ..snap
            };
            let b = OutputBlock::new(id, FileType::Hdf5);
            output::write_output(&world, &other, &b, case, &dir, FileNumber::Step(0)).unwrap();
        }
        let rst = write(&OutputBlock::new(2, FileType::Restart)).unwrap();
        let hst = OutputBlock::new(3, FileType::History);
        write(&hst).unwrap();
        let later = Snapshot {
            cycle: 43,
            time: 0.25,
            ..snap
        };
        output::write_output(&world, &later, &hst, case, &dir, FileNumber::Step(1)).unwrap();
        let mut png = OutputBlock::new(4, FileType::Png);
        png.png_variable = Some(if case == "d2" { "vel_1" } else { "rho" }.into());
        png.png_size = (Some(320), Some(if case == "d2" { 160 } else { 320 }));
        if case == "d3" {
            png.png_x3 = Some(output::config::PngSlice::Position(0.3));
        }
        write(&png).unwrap();

        // Every rank reads the restart file and takes its own blocks back, bit for bit.
        // The verdict broadcast after the write orders it before these reads.
        let r = output::read_restart(&rst).unwrap();
        assert_eq!(
            (r.cycle, r.time, r.dt, r.wall_time),
            (42, 0.125, 1.0 / 3.0, 2.5)
        );
        assert_eq!(r.deck, DECK);
        assert_eq!(r.params, params.iter().cloned().collect());
        assert_eq!(r.locations, m.forest().leaves());
        // The writing run's blocks per rank, as the partition gave them.
        let per_rank: Vec<usize> = (0..nranks)
            .map(|q| m.partition().blocks_of(q).len())
            .collect();
        assert_eq!(r.blocks_per_rank, per_rank);
        let (data, alloc) = r.block_data(&fields, &l.gids).unwrap();
        assert!(
            data.iter()
                .map(|x| x.to_bits())
                .eq(l.data.iter().map(|x| x.to_bits())),
            "restart data differ on rank {rank}"
        );
        assert_eq!(alloc, l.allocated);
        // Storage that keeps more per block (coarse buffers) writes the same blocks: here each
        // block is followed by NaNs that must not reach the file.
        let bl = l.layout.block_len();
        let padded: Vec<f64> = l
            .data
            .chunks(bl)
            .flat_map(|b| b.iter().copied().chain([f64::NAN; 5]))
            .collect();
        let gappy = Snapshot {
            data: &padded,
            stride: bl + 5,
            ..snap
        };
        let rst8 = output::write_output(
            &world,
            &gappy,
            &OutputBlock::new(8, FileType::Restart),
            case,
            &dir,
            FileNumber::Step(0),
        )
        .unwrap();
        let (data8, alloc8) = output::read_restart(&rst8)
            .unwrap()
            .block_data(&fields, &l.gids)
            .unwrap();
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&data8), bits(&l.data), "padded storage on rank {rank}");
        assert_eq!(alloc8, l.allocated);
        // A file without ghosts reads back too: interior cells equal, ghosts zero.
        let p0 = dir.join(format!("{case}.out0.00000.phdf"));
        let r0 = output::read_restart(&p0).unwrap();
        assert!(!r0.includes_ghost);
        let (d0, a0) = r0.block_data(&fields, &l.gids).unwrap();
        assert_eq!((d0.len(), &a0), (l.data.len(), &l.allocated));
        let g = m.config().nghost;
        let [n0, n1, n2] = l.layout.dims;
        for b in 0..l.gids.len() {
            for s in 0..NSLOTS {
                for k in 0..n2 {
                    for j in 0..n1 {
                        for i in 0..n0 {
                            let ghost = [i, j, k]
                                .iter()
                                .zip(l.layout.dims)
                                .any(|(&q, n)| n > 1 && (q < g || q >= n - g));
                            let at =
                                b * l.layout.block_len() + l.layout.index_in_block(s, [i, j, k]);
                            let want = if s == 4 && !scal_allocated(l.gids[b]) {
                                SPARSE_DEFAULT // unallocated: the default everywhere
                            } else if ghost {
                                0.0
                            } else {
                                l.data[at]
                            };
                            assert_eq!(d0[at], want, "block {b} slot {s} [{i},{j},{k}]");
                        }
                    }
                }
            }
        }
        // Another partition's blocks come back too (a restart on a different rank count).
        let all: Vec<usize> = (0..m.forest().len()).collect();
        let (every, _) = r.block_data(&fields, &all).unwrap();
        assert_eq!(every.len(), all.len() * l.layout.block_len());
        // Gids out of order and apart, and none at all, read the same values.
        let last = all.len() - 1;
        let (two, _) = r.block_data(&fields, &[last, 0]).unwrap();
        assert_eq!(
            bits(&two),
            bits(&[&every[last * bl..], &every[..bl]].concat())
        );
        assert!(r.block_data(&fields, &[]).unwrap().0.is_empty());

        // Errors reach every rank and none hangs: an unwritable directory fails on rank 0 (an
        // HDF5 error there) and is reported to the others; a bad variable fails everywhere.
        let e = output::write_output(
            &world,
            &snap,
            &OutputBlock::new(0, FileType::Hdf5),
            case,
            Path::new("/nonexistent/dir"),
            FileNumber::Step(0),
        )
        .unwrap_err();
        match (rank, &e) {
            (0, OutputError::Hdf5 { .. }) => {}
            (r, OutputError::Peer(msg)) if r > 0 => assert!(msg.contains("rank 0"), "{msg}"),
            _ => panic!("rank {rank}: unexpected {e}"),
        }
        let mut bad = OutputBlock::new(5, FileType::Hdf5);
        bad.variables = Some(vec!["bface".into()]);
        let e = write(&bad).unwrap_err();
        assert!(
            matches!(e, OutputError::Invalid { .. }) && e.to_string().contains("cell-centred"),
            "{e}"
        );
        // An inconsistent snapshot on one rank only (the last) is agreed on by all.
        assert!(!l.gids.is_empty());
        let cut = usize::from(rank == nranks - 1);
        let short = Snapshot {
            data: &l.data[..l.data.len() - cut],
            ..snap
        };
        // Every writer, those that compute a payload per block (history, png) too.
        let mut png = OutputBlock::new(6, FileType::Png);
        png.png_variable = Some("rho".into());
        for block in [
            OutputBlock::new(6, FileType::Hdf5),
            OutputBlock::new(6, FileType::History),
            png,
        ] {
            let e = output::write_output(&world, &short, &block, case, &dir, FileNumber::Step(0))
                .unwrap_err();
            match (rank == nranks - 1, &e) {
                (true, OutputError::Snapshot(_)) | (false, OutputError::Peer(_)) => {}
                _ => panic!("rank {rank}: unexpected {e}"),
            }
        }
    }
}

// ---------------------------------------------------------------- checks in the parent

fn type_of(a: &hdf5::Attribute) -> String {
    a.dtype().unwrap().to_descriptor().unwrap().to_string()
}

/// Checks attribute `name` of `loc`: type and shape.
fn attr(loc: &hdf5::Location, name: &str, ty: &str, shape: &[usize]) -> hdf5::Attribute {
    let a = loc
        .attr(name)
        .unwrap_or_else(|e| panic!("attribute {name}: {e}"));
    assert_eq!(type_of(&a), ty, "type of {name}");
    assert_eq!(a.shape(), shape, "shape of {name}");
    a
}

fn strings(a: &hdf5::Attribute) -> Vec<String> {
    a.read_raw::<hdf5::types::VarLenUnicode>()
        .unwrap()
        .iter()
        .map(|s| s.as_str().to_string())
        .collect()
}

fn check_phdf(case: &str, nranks: usize, dir: &Path, ghosts: bool) {
    let out = if ghosts { "out1" } else { "out0" };
    let path = dir.join(format!("{case}.{out}.00000.phdf"));
    let file = hdf5::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let m = mesh(case, nranks);
    let nb = m.forest().len();
    let ndim = m.ndim();
    let g = 2usize;
    let gw = if ghosts { g } else { 0 };
    let n: [usize; 3] =
        std::array::from_fn(|d| m.config().block_nx[d] + if d < ndim { 2 * gw } else { 0 });
    let s = "unicode (var len)";

    let input = file.group("Input").unwrap();
    let deck: hdf5::types::VarLenUnicode = attr(&input, "File", s, &[]).read_scalar().unwrap();
    assert_eq!(deck.as_str(), DECK);

    let info = file.group("Info").unwrap();
    let i32s = |name: &str, shape: &[usize]| -> Vec<i32> {
        attr(&info, name, "int32", shape).read_raw().unwrap()
    };
    assert_eq!(i32s("OutputFormatVersion", &[]), [4]);
    assert_eq!(i32s("NCycle", &[]), [42]);
    let real = |name: &str| -> f64 { attr(&info, name, "float64", &[]).read_scalar().unwrap() };
    assert_eq!(
        (real("Time"), real("dt"), real("WallTime")),
        (0.125, 1.0 / 3.0, 2.5)
    );
    assert_eq!(i32s("NumDims", &[]), [ndim as i32]);
    assert_eq!(i32s("NumMeshBlocks", &[]), [nb as i32]);
    assert_eq!(i32s("MaxLevel", &[]), [1]);
    assert_eq!(i32s("IncludesGhost", &[]), [i32::from(ghosts)]);
    assert_eq!(i32s("NGhost", &[]), [2]);
    let coords: hdf5::types::VarLenUnicode =
        attr(&info, "Coordinates", s, &[]).read_scalar().unwrap();
    assert_eq!(coords.as_str(), "UniformCartesian");
    let root_level = if case == "d2" { 2 } else { 1 };
    assert_eq!(i32s("NBNew", &[]), [0]);
    assert_eq!(i32s("NBDel", &[]), [0]);
    assert_eq!(i32s("RootLevel", &[]), [root_level]);
    assert_eq!(i32s("Refine", &[]), [1]);
    assert_eq!(i32s("Multilevel", &[]), [1]);
    let per_pe: Vec<i32> = (0..nranks)
        .map(|r| m.partition().blocks_of(r).len() as i32)
        .collect();
    let pe_shape: &[usize] = if nranks == 1 { &[] } else { &[nranks] };
    assert_eq!(i32s("BlocksPerPE", pe_shape), per_pe);
    assert_eq!(
        i32s("MeshBlockSize", &[3]),
        n.iter().map(|&x| x as i32).collect::<Vec<_>>()
    );
    let c = m.config();
    let dom: Vec<f64> = attr(&info, "RootGridDomain", "float64", &[9])
        .read_raw()
        .unwrap();
    for d in 0..3 {
        assert_eq!(dom[3 * d..3 * d + 3], [c.xmin[d], c.xmax[d], 1.0]);
    }
    assert_eq!(
        i32s("RootGridSize", &[3]),
        c.nx.iter().map(|&x| x as i32).collect::<Vec<_>>()
    );
    let bcs = strings(&attr(&info, "BoundaryConditions", s, &[6]));
    assert_eq!(
        bcs,
        ["periodic", "periodic", "outflow", "outflow", "outflow", "outflow"]
    );
    let (names, ncomp, comps): (Vec<&str>, Vec<u64>, Vec<&str>) = if ghosts {
        (
            vec!["scal", "vel"],
            vec![1, 3],
            vec!["scal", "vel_0", "vel_1", "vel_2"],
        )
    } else {
        (
            vec!["rho", "scal", "vel"],
            vec![1, 1, 3],
            vec!["rho", "scal", "vel_0", "vel_1", "vel_2"],
        )
    };
    let got: Vec<u64> = attr(&info, "NumComponents", "uint64", &[names.len()])
        .read_raw()
        .unwrap();
    assert_eq!(got, ncomp);
    assert_eq!(
        strings(&attr(&info, "ComponentNames", s, &[comps.len()])),
        comps
    );
    assert_eq!(
        strings(&attr(&info, "OutputDatasetNames", s, &[names.len()])),
        names
    );

    let p = file.group("Params").unwrap();
    let gamma: f64 = attr(&p, "hydro/gamma", "float64", &[])
        .read_scalar()
        .unwrap();
    assert_eq!(gamma, 1.4);
    assert_eq!(
        attr(&p, "hydro/n", "int64", &[])
            .read_scalar::<i64>()
            .unwrap(),
        3
    );
    assert!(attr(&p, "hydro/on", "bool", &[])
        .read_scalar::<bool>()
        .unwrap());
    let eos: hdf5::types::VarLenUnicode = attr(&p, "hydro/eos", s, &[]).read_scalar().unwrap();
    assert_eq!(eos.as_str(), "ideal");

    let ds = |name: &str, ty: &str, shape: &[usize]| -> hdf5::Dataset {
        let d = file
            .dataset(name)
            .unwrap_or_else(|e| panic!("dataset {name}: {e}"));
        assert_eq!(
            d.dtype().unwrap().to_descriptor().unwrap().to_string(),
            ty,
            "type of {name}"
        );
        assert_eq!(d.shape(), shape, "shape of {name}");
        d
    };
    let leaves = m.forest().leaves();
    let xmin: Vec<f64> = ds("Blocks/xmin", "float64", &[nb, ndim])
        .read_raw()
        .unwrap();
    let lx: Vec<i64> = ds("Blocks/loc.lx123", "int64", &[nb, 3])
        .read_raw()
        .unwrap();
    let l5: Vec<i32> = ds("Blocks/loc.level-gid-lid-cnghost-gflag", "int32", &[nb, 5])
        .read_raw()
        .unwrap();
    ds("Blocks/derefinement_count", "int32", &[nb, 1]);
    let levels: Vec<i64> = ds("Levels", "int64", &[nb]).read_raw().unwrap();
    let ll: Vec<i64> = ds("LogicalLocations", "int64", &[nb, 3])
        .read_raw()
        .unwrap();
    assert_eq!(lx, ll);
    let axes = ["x", "y", "z"];
    let faces: Vec<Vec<f64>> = (0..3)
        .map(|d| {
            ds(
                &format!("Locations/{}", axes[d]),
                "float64",
                &[nb, n[d] + 1],
            )
            .read_raw()
            .unwrap()
        })
        .collect();
    let centres: Vec<Vec<f64>> = (0..3)
        .map(|d| {
            ds(
                &format!("VolumeLocations/{}", axes[d]),
                "float64",
                &[nb, n[d]],
            )
            .read_raw()
            .unwrap()
        })
        .collect();
    for gid in 0..nb {
        let (lo, hi) = m.bounds(gid).unwrap();
        assert_eq!(xmin[gid * ndim..(gid + 1) * ndim], lo[..ndim]);
        assert_eq!(lx[3 * gid..3 * gid + 3], leaves[gid].lx());
        assert_eq!(levels[gid], leaves[gid].level() as i64);
        let lid = m.partition().lid_of(gid).unwrap() as i32;
        assert_eq!(
            l5[5 * gid..5 * gid + 5],
            [
                leaves[gid].level() as i32 + root_level,
                gid as i32,
                lid,
                2,
                0
            ]
        );
        for d in 0..3 {
            let fc = &faces[d][gid * (n[d] + 1)..(gid + 1) * (n[d] + 1)];
            let g_d = if d < ndim { gw } else { 0 };
            assert!((fc[g_d] - lo[d]).abs() < 1e-14 && (fc[n[d] - g_d] - hi[d]).abs() < 1e-14);
            let cc = &centres[d][gid * n[d]..(gid + 1) * n[d]];
            for i in 0..n[d] {
                assert!((cc[i] - 0.5 * (fc[i] + fc[i + 1])).abs() < 1e-14);
            }
        }
    }

    // Values: every cell of every block against the function at the centre of the cell.
    let off = if ghosts { 0 } else { g };
    let slot0 = |name: &str| match name {
        "rho" => 0,
        "vel" => 1,
        _ => 4,
    };
    for (name, &nc) in names.iter().zip(&ncomp) {
        let nc = nc as usize;
        let d = ds(name, "float64", &[nb, nc, n[2], n[1], n[0]]);
        let tl: hdf5::types::VarLenUnicode = attr(&d, "TopologicalLocation", s, &[])
            .read_scalar()
            .unwrap();
        assert_eq!(tl.as_str(), "Cell");
        let vals: Vec<f64> = d.read_raw().unwrap();
        let mut idx = 0;
        for gid in 0..nb {
            for comp in 0..nc {
                for k in 0..n[2] {
                    for j in 0..n[1] {
                        for i in 0..n[0] {
                            let p = [i, j, k].map(|q| q + off);
                            let p = std::array::from_fn(|dd| if dd < ndim { p[dd] } else { 0 });
                            let want = if *name == "scal" && !scal_allocated(gid) {
                                0.0
                            } else {
                                f(slot0(name) + comp, centre(&m, gid, g, p))
                            };
                            assert_eq!(vals[idx], want, "{name}[{gid},{comp},{k},{j},{i}]");
                            idx += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(
        file.dataset("bface").is_err(),
        "face variables are not written"
    );
    let si = ds("SparseInfo", "bool", &[nb, 1]);
    assert_eq!(strings(&attr(&si, "SparseFields", s, &[])), ["scal"]);
    let flags: Vec<bool> = si.read_raw().unwrap();
    assert_eq!(flags, (0..nb).map(scal_allocated).collect::<Vec<_>>());
    ds("SparseDeallocCount", "int32", &[nb, 1]);
}

/// The XDMF is well-formed XML and every HDF data item names a dataset of the `.phdf` beside
/// it with the dimensions it claims; every hyperslab stays inside its dataset.
fn check_xdmf(path: &Path) {
    use quick_xml::events::Event;
    let text = std::fs::read_to_string(path).unwrap();
    let mut reader = quick_xml::Reader::from_str(&text);
    let mut stack: Vec<String> = Vec::new();
    let mut pending: Option<Vec<usize>> = None; // Dimensions of an open HDF data item
    let mut slab: Option<Vec<usize>> = None; // values of the last hyperslab selection
    let mut in_xml_item = false;
    let (mut n_hdf, mut n_grids) = (0, 0);
    loop {
        match reader
            .read_event()
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        {
            Event::Start(e) if e.name().as_ref() == b"Grid" => {
                let name = String::from_utf8(e.name().as_ref().to_vec()).unwrap();
                if e.try_get_attribute("GridType")
                    .unwrap()
                    .unwrap()
                    .value
                    .as_ref()
                    == b"Uniform"
                {
                    n_grids += 1;
                }
                stack.push(name);
            }
            Event::Start(e) => {
                let name = String::from_utf8(e.name().as_ref().to_vec()).unwrap();
                let get = |k: &str| {
                    e.try_get_attribute(k)
                        .unwrap()
                        .map(|a| a.unescape_value().unwrap().into_owned())
                };
                if name == "DataItem" {
                    let dims: Vec<usize> = get("Dimensions")
                        .unwrap()
                        .split_whitespace()
                        .map(|x| x.parse().unwrap())
                        .collect();
                    match get("Format").as_deref() {
                        Some("HDF") => pending = Some(dims),
                        Some("XML") => in_xml_item = true,
                        _ => {}
                    }
                }
                stack.push(name);
            }
            Event::Text(t) => {
                let t = t.unescape().unwrap().into_owned();
                if in_xml_item {
                    slab = Some(t.split_whitespace().map(|x| x.parse().unwrap()).collect());
                }
                if let Some(dims) = pending.take() {
                    let (file, ds) = t.trim().split_once(":/").unwrap();
                    let h5 = hdf5::File::open(path.parent().unwrap().join(file)).unwrap();
                    let d = h5.dataset(ds).unwrap_or_else(|e| panic!("{ds}: {e}"));
                    assert_eq!(d.shape(), dims, "{ds} dimensions in {}", path.display());
                    // start, stride, count per axis: start + (count - 1) * stride inside.
                    let s = slab.take().expect("hyperslab before its data");
                    let r = dims.len();
                    assert_eq!(s.len(), 3 * r);
                    for a in 0..r {
                        assert!(s[a] + (s[2 * r + a] - 1) * s[r + a] < dims[a], "{ds} slab");
                    }
                    n_hdf += 1;
                }
            }
            Event::End(e) => {
                let name = stack.pop().expect("balanced");
                assert_eq!(name.as_bytes(), e.name().as_ref());
                in_xml_item = false;
            }
            Event::Eof => break,
            _ => {}
        }
    }
    assert!(stack.is_empty());
    assert!(
        n_grids > 0 && n_hdf >= 3 * n_grids,
        "{n_grids} grids, {n_hdf} items"
    );
}

/// `single_precision_output`: float32 values, the nearest to the double ones, and an XDMF
/// that says so.
fn check_single(case: &str, dir: &Path) {
    let path = dir.join(format!("{case}.out7.00000.phdf"));
    check_xdmf(&dir.join(format!("{case}.out7.00000.phdf.xdmf")));
    let xml = std::fs::read_to_string(dir.join(format!("{case}.out7.00000.phdf.xdmf"))).unwrap();
    assert!(xml.contains("Name=\"rho\" NumberType=\"Float\" Precision=\"4\""));
    let f32s = hdf5::File::open(&path).unwrap().dataset("rho").unwrap();
    assert_eq!(
        f32s.dtype().unwrap().to_descriptor().unwrap().to_string(),
        "float32"
    );
    let f64s = hdf5::File::open(dir.join(format!("{case}.out0.00000.phdf")))
        .unwrap()
        .dataset("rho")
        .unwrap();
    let (a, b): (Vec<f32>, Vec<f64>) = (f32s.read_raw().unwrap(), f64s.read_raw().unwrap());
    assert!(a.len() == b.len() && a.iter().zip(&b).all(|(x, y)| *x == *y as f32));
}

/// Variables are deflated at Parthenon's level 5 by default (restarts too) and not at all at
/// level 0, with the same values; `write_xdmf: false` writes no `.xdmf`;
/// `sparse_seed_nans` writes NaN, not 0, where `scal` is unallocated; `file_number_width: 3`
/// numbers `000`.
fn check_storage(case: &str, nranks: usize, dir: &Path) {
    let open = |name: &str| {
        let path = dir.join(format!("{case}.{name}"));
        hdf5::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let (packed, plain) = (open("out0.00000.phdf"), open("out9.000.phdf"));
    assert!(!dir.join(format!("{case}.out9.000.phdf.xdmf")).exists());
    assert!(!dir.join(format!("{case}.out9.00000.phdf")).exists());
    let deflate = |f: &hdf5::File, v: &str| {
        let ds = f.dataset(v).unwrap();
        let level = ds.filters().iter().find_map(|x| match x {
            hdf5::filters::Filter::Deflate(l) => Some(*l),
            _ => None,
        });
        (level, ds.storage_size())
    };
    for v in ["rho", "vel", "scal"] {
        let ((lp, sp), (l0, s0)) = (deflate(&packed, v), deflate(&plain, v));
        assert_eq!((lp, l0), (Some(5), None), "{case} {v}: deflate levels");
        assert!(sp < s0, "{case} {v}: deflated {sp} bytes, plain {s0}");
        let a: Vec<f64> = packed.dataset(v).unwrap().read_raw().unwrap();
        let b: Vec<f64> = plain.dataset(v).unwrap().read_raw().unwrap();
        if v != "scal" {
            assert!(
                a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                "{v}"
            );
            continue;
        }
        let per_block = a.len() / mesh(case, nranks).forest().len();
        for (gid, (x, y)) in a.chunks(per_block).zip(b.chunks(per_block)).enumerate() {
            match scal_allocated(gid) {
                true => assert!(x == y && y.iter().all(|v| v.is_finite()), "block {gid}"),
                false => assert!(x.iter().all(|&v| v == 0.0) && y.iter().all(|v| v.is_nan())),
            }
        }
    }
    let rst = open("out2.00000.rhdf");
    assert_eq!(deflate(&rst, "rho").0, Some(5), "{case}: restart deflated");
}

/// Parthenon's `Info/Refine` says whether refinement is adaptive, `Info/Multilevel` whether
/// there may be more than one level: 1/1 on the adaptive mesh (`check_phdf`), 0/1 with
/// static refinement, 0/0 on a single level.
fn check_refine_flags(case: &str, dir: &Path) {
    for (out, max_level, want) in [("out10", 1, [0, 1]), ("out11", 0, [0, 0])] {
        let path = dir.join(format!("{case}.{out}.00000.phdf"));
        let file = hdf5::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let info = file.group("Info").unwrap();
        let get = |name: &str| -> i32 { attr(&info, name, "int32", &[]).read_scalar().unwrap() };
        // The static region did refine: the file is multilevel in fact.
        assert_eq!(
            get("MaxLevel"),
            max_level,
            "{}: Info/MaxLevel",
            path.display()
        );
        assert_eq!(
            [get("Refine"), get("Multilevel")],
            want,
            "{}: Info/Refine, Info/Multilevel",
            path.display()
        );
    }
}

fn check_hst(case: &str, dir: &Path) {
    let text = std::fs::read_to_string(dir.join(format!("{case}.out3.hst"))).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(lines[1].contains("[1]=time") && lines[1].contains("[8]=scal"));
    let m = mesh(case, 1);
    let c = m.config();
    let vol: f64 = (0..3).map(|d| c.xmax[d] - c.xmin[d]).product();
    let mid: [f64; 3] = std::array::from_fn(|d| 0.5 * (c.xmin[d] + c.xmax[d]));
    for (line, cycle) in [(lines[2], "42"), (lines[3], "43")] {
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cols.len(), 3 + NSLOTS);
        assert_eq!(cols[2], cycle);
        for s in 0..4 {
            let got: f64 = cols[3 + s].parse().unwrap();
            let want = f(s, mid) * vol;
            assert!(
                (got - want).abs() < 1e-10 * want.abs(),
                "slot {s}: {got} vs {want}"
            );
        }
        // The sparse scal: its integral over the blocks that hold it, plus the default over
        // the volume of those that do not (the default is a value, not a per-cell amount).
        let (mut held, mut default) = (0.0, 0.0);
        for gid in 0..m.forest().len() {
            let (lo, hi) = m.bounds(gid).unwrap();
            let v: f64 = (0..3).map(|d| hi[d] - lo[d]).product();
            let mid: [f64; 3] = std::array::from_fn(|d| 0.5 * (lo[d] + hi[d]));
            match scal_allocated(gid) {
                true => held += f(4, mid) * v,
                false => default += SPARSE_DEFAULT * v,
            }
        }
        assert!(default > 0.0, "{case}: every block holds scal");
        let got: f64 = cols[3 + 4].parse().unwrap();
        let want = held + default;
        assert!(
            (got - want).abs() < 1e-10 * want.abs(),
            "{case}: history of sparse scal: {got}, want {held} allocated + {default} default"
        );
    }
}

fn check_png(case: &str, dir: &Path) {
    let path = dir.join(format!("{case}.out4.00000.png"));
    let dec = png::Decoder::new(std::fs::File::open(&path).unwrap());
    let mut reader = dec.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let (w, h) = (320usize, if case == "d2" { 160 } else { 320 });
    assert_eq!((info.width as usize, info.height as usize), (w, h));
    let ch = info.line_size / w;
    let px = |x: usize, y: usize| -> &[u8] { &buf[y * info.line_size + x * ch..][..3] };
    // 2-D: the domain is 2x1 over 320x160, root blocks 0.5 wide = 80 px; 3-D: 0.5 = 160 px.
    let edge = if case == "d2" { 80 } else { 160 };
    assert_eq!(px(edge, h / 2 + 7), [0, 0, 0], "block outline");
    let inside = px(edge + 9, h / 2 + 7);
    assert_ne!(inside, [0, 0, 0], "field pixel");
    // The field varies: two cells far apart differ.
    assert_ne!(px(5, 5), px(w - 6, h - 6));
    // Oriented as the domain, y up: viridis's green rises with the value, and the field
    // rises with x (by 2 per unit) and y (by 3). Sampled a tenth in from the corners (clear
    // of block outlines): bottom left, bottom right, top left. A flip or a transpose swaps
    // two of them.
    let green = |fx: f64, fy: f64| {
        let p = px((fx * w as f64) as usize, ((1.0 - fy) * h as f64) as usize);
        assert_ne!(p, [0, 0, 0], "{case}: outline at ({fx}, {fy})");
        p[1]
    };
    let (a, b, c) = (green(0.1, 0.1), green(0.9, 0.1), green(0.1, 0.9));
    // d2 spans 2 x 1 (values 0.7, 3.9, 3.1 above the corner); the 3-D slice 1 x 1 (0.5,
    // 2.1, 2.9).
    let order = if case == "d2" {
        a < c && c < b
    } else {
        a < b && b < c
    };
    assert!(
        order,
        "{case}: greens bottom-left {a}, bottom-right {b}, top-left {c}"
    );
}

/// Two files hold the same datasets with the same values, apart from the partition.
fn same_data(a: &Path, b: &Path) {
    let fa = hdf5::File::open(a).unwrap();
    let fb = hdf5::File::open(b).unwrap();
    let mut names = Vec::new();
    for grp in ["", "Blocks/", "Locations/", "VolumeLocations/"] {
        let g = if grp.is_empty() {
            fa.group("/").unwrap()
        } else {
            fa.group(grp.trim_end_matches('/')).unwrap()
        };
        for m in g.member_names().unwrap() {
            if g.dataset(&m).is_ok() {
                names.push(format!("{grp}{m}"));
            }
        }
    }
    assert!(names.len() > 10, "{names:?}");
    for n in names {
        if n == "Blocks/loc.level-gid-lid-cnghost-gflag" {
            continue; // lid depends on the partition
        }
        let (da, db) = (fa.dataset(&n).unwrap(), fb.dataset(&n).unwrap());
        assert_eq!(da.shape(), db.shape(), "{n}");
        let ty = da.dtype().unwrap().to_descriptor().unwrap().to_string();
        match ty.as_str() {
            "float64" => {
                let (x, y): (Vec<f64>, Vec<f64>) = (da.read_raw().unwrap(), db.read_raw().unwrap());
                assert!(
                    x.iter()
                        .map(|v| v.to_bits())
                        .eq(y.iter().map(|v| v.to_bits())),
                    "{n} differs between {} and {}",
                    a.display(),
                    b.display()
                );
            }
            _ => {
                let (x, y): (Vec<i64>, Vec<i64>) = match ty.as_str() {
                    "bool" => {
                        let (x, y): (Vec<bool>, Vec<bool>) =
                            (da.read_raw().unwrap(), db.read_raw().unwrap());
                        (
                            x.into_iter().map(i64::from).collect(),
                            y.into_iter().map(i64::from).collect(),
                        )
                    }
                    _ => (da.read_raw().unwrap(), db.read_raw().unwrap()),
                };
                assert_eq!(x, y, "{n}");
            }
        }
    }
}
