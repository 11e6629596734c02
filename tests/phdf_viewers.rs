//! Viewers open the `.phdf` files the driver writes and see what the solver had, on a 2-rank
//! 3-D mesh of three levels and a 2-D periodic one with sparse fields:
//!
//! - yt's Parthenon reader (`scripts/check_yt.py`): the mesh (dimensions, domain, time,
//!   blocks, levels, cells tiling the domain), every cell's value of a linear profile at the
//!   centre yt places it (so no axis is swapped or reversed), and volume integrals equal to
//!   the history file's. Copies with a block reversed along x, or checked against a profile
//!   with two axes swapped, fail.
//! - ParaView's XDMF reader on the `.xdmf` index (`scripts/check_paraview.py`): a grid per
//!   block at the file's coordinates, every value the file's, a linear profile at ParaView's
//!   cell centres, with and without ghost zones, in single precision and with NaN where
//!   sparse fields are unallocated. Indexes pointing a block at its neighbour's data or
//!   coordinates fail.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const EXE: &str = env!("CARGO_BIN_EXE_starhalo");

/// The interpreter with yt: `STARHALO_YT_PYTHON`, else the virtual environment scripts/setup
/// makes.
fn python() -> PathBuf {
    std::env::var_os("STARHALO_YT_PYTHON").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("target/yt-venv/bin/python"),
        PathBuf::from,
    )
}

fn scratch(name: &str) -> PathBuf {
    common::scratch("yt", name)
}

/// ParaView's interpreter: `STARHALO_PVPYTHON`, else `pvpython` (Debian's python3-paraview,
/// which scripts/setup --test installs).
fn pvpython() -> PathBuf {
    std::env::var_os("STARHALO_PVPYTHON").map_or_else(|| PathBuf::from("pvpython"), PathBuf::from)
}

/// The two viewers' checks.
#[derive(Clone, Copy)]
enum Viewer {
    Yt,
    ParaView,
}

fn check(viewer: Viewer, file: &Path, args: &[&str]) -> Output {
    let (py, script) = match viewer {
        Viewer::Yt => (python(), "scripts/check_yt.py"),
        Viewer::ParaView => (pvpython(), "scripts/check_paraview.py"),
    };
    Command::new("timeout")
        .args(["-k", "5", "300"])
        .arg(&py)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join(script))
        .arg(file)
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot start {} ({e}): run scripts/setup --test",
                py.display()
            )
        })
}

fn assert_passes(viewer: Viewer, file: &Path, args: &[&str]) {
    let out = check(viewer, file, args);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains(": ok"),
        "{}: {text}{}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn assert_fails(viewer: Viewer, file: &Path, args: &[&str], needle: &str) {
    let out = check(viewer, file, args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}: {err}", file.display());
    assert!(
        err.contains(needle),
        "{}: lacks `{needle}`: {err}",
        file.display()
    );
}

/// Runs `deck` on 2 ranks in `dir`.
fn run(dir: &Path, deck: &str) {
    let path = dir.join("deck.yaml");
    std::fs::write(&path, deck).unwrap();
    let args = ["run", path.to_str().unwrap(), "-d", dir.to_str().unwrap()];
    let out = common::mpirun(2, 120, Path::new(EXE), &args, &[]);
    common::assert_ok("advection run", &out);
}

/// 3-D, blocks of 4x8x4 cells over a box of unequal sides, a corner refined twice; the
/// linear profile's slopes differ in size and sign per axis.
const DECK_3D: &str = "\
parthenon/job: {problem: advection, problem_id: adv}
parthenon/mesh: {nx1: 16, nx2: 16, nx3: 16, x1min: -1.0, x1max: 1.0, x2min: 0.0, x2max: 0.5,
  x3min: 0.0, x3max: 4.0, ix1_bc: outflow, ox1_bc: outflow, ix2_bc: outflow, ox2_bc: outflow,
  ix3_bc: outflow, ox3_bc: outflow, numlevel: 3}
parthenon/meshblock: {nx1: 4, nx2: 8, nx3: 4}
parthenon/static_refinement0: {x1min: -1.0, x1max: -0.6, x2min: 0.0, x2max: 0.1, x3min: 3.5,
  x3max: 4.0, level: 2}
parthenon/time: {nlim: 2, ncycle_out: 0}
parthenon/output0: {file_type: hdf5, dn: 1}
parthenon/output1: {file_type: hst, dn: 1}
parthenon/output2: {file_type: hdf5, dn: 2, ghost_zones: true, single_precision_output: true}
advection: {num_vars: 2, vx: 1.0, vy: 0.5, vz: 0.25, profile: linear,
  linear_coeffs: [1.5, 2.0, -30.0, 500.0]}
";

#[test]
fn viewers_read_a_three_level_3d_mesh_as_written() {
    let dir = scratch("3d");
    run(&dir, DECK_3D);
    let hst = dir.join("adv.out1.hst");
    let hst = hst.to_str().unwrap();
    let first = dir.join("adv.out0.00000.phdf");
    assert_passes(
        Viewer::Yt,
        &first,
        &["--hst", hst, "--linear", "1.5,2,-30,500"],
    );
    // Advected (outflow faces change the integral), against the history's later lines.
    assert_passes(
        Viewer::Yt,
        &dir.join("adv.out0.00002.phdf"),
        &["--hst", hst],
    );

    // y and z slopes swapped: the values are not where that profile puts them.
    assert_fails(
        Viewer::Yt,
        &first,
        &["--linear", "1.5,2,500,-30"],
        "off the linear profile",
    );
    // One block's values reversed along x, as a writer mixing up its axes would store them.
    let flipped = dir.join("flipped.phdf");
    std::fs::copy(&first, &flipped).unwrap();
    let edit = Command::new(python())
        .args([
            "-c",
            "import h5py, sys\n\
             with h5py.File(sys.argv[1], 'r+') as f:\n    \
                 d = f['advected']\n    d[3] = d[3][..., ::-1]\n",
            flipped.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(edit.status.success(), "{edit:?}");
    assert_fails(
        Viewer::Yt,
        &flipped,
        &["--linear", "1.5,2,-30,500"],
        "advected: off",
    );
    // A history whose integral differs in the last digits.
    let text = std::fs::read_to_string(hst).unwrap();
    let line = text.lines().find(|l| !l.starts_with('#')).unwrap();
    let last = line.split_whitespace().last().unwrap();
    let value: f64 = last.parse().unwrap();
    let edited = text.replacen(
        line,
        &line.replacen(last, &format!("{:e}", value * (1.0 + 1e-9)), 1),
        1,
    );
    let wrong = dir.join("wrong.hst");
    std::fs::write(&wrong, edited).unwrap();
    assert_fails(
        Viewer::Yt,
        &first,
        &["--hst", wrong.to_str().unwrap()],
        "history",
    );

    let index = dir.join("adv.out0.00000.phdf.xdmf");
    let linear = ["--linear", "1.5,2,-30,500"];
    assert_passes(Viewer::ParaView, &index, &linear);
    assert_fails(
        Viewer::ParaView,
        &index,
        &["--linear", "1.5,2,500,-30"],
        "off the linear profile",
    );
    // Ghost zones (where outflow faces break the profile) in single precision.
    for f in ["adv.out2.00000.phdf.xdmf", "adv.out2.final.phdf.xdmf"] {
        assert_passes(Viewer::ParaView, &dir.join(f), &[]);
    }
    // Indexes that point block 3 at block 4's values, or at its x coordinates.
    let xdmf = std::fs::read_to_string(&index).unwrap();
    for (i, (from, to, says)) in [
        (
            "XML\">3 0 0 0 0 1",
            "XML\">4 0 0 0 0 1",
            "block 3: advected differs",
        ),
        ("XML\">3 0 1 1 1 ", "XML\">4 0 1 1 1 ", "block 3: axis x"),
    ]
    .into_iter()
    .enumerate()
    {
        assert!(xdmf.contains(from), "{from}");
        let phdf = dir.join(format!("edit{i}.phdf"));
        std::fs::copy(dir.join("adv.out0.00000.phdf"), &phdf).unwrap();
        let edited = dir.join(format!("edit{i}.phdf.xdmf"));
        std::fs::write(&edited, xdmf.replacen(from, to, 1)).unwrap();
        assert_fails(Viewer::ParaView, &edited, &linear, says);
    }
}

/// 2-D and sparse: the sphere's fields are allocated on some blocks only, and the others
/// hold no values in the file (yt), or NaN (ParaView, from `sparse_seed_nans`).
#[test]
fn viewers_read_a_2d_sparse_run() {
    let dir = scratch("2d");
    run(
        &dir,
        "\
parthenon/job: {problem: advection, problem_id: adv}
parthenon/mesh: {nx1: 32, nx2: 32, x1min: -0.5, x1max: 0.5, x2min: -0.5, x2max: 0.5,
  ix1_bc: periodic, ox1_bc: periodic, ix2_bc: periodic, ox2_bc: periodic}
parthenon/meshblock: {nx1: 8, nx2: 16}
parthenon/time: {nlim: 4, ncycle_out: 0}
parthenon/sparse: {alloc_threshold: 0.01}
parthenon/output0: {file_type: hdf5, dn: 2}
parthenon/output1: {file_type: hst, dn: 2}
parthenon/output2: {file_type: hdf5, dn: 2, sparse_seed_nans: true}
advection: {num_vars: 2, vx: 1.0, vy: 0.5, profile: hard_sphere, radius: 0.2, sparse: true}
",
    );
    let hst = dir.join("adv.out1.hst");
    let last = dir.join("adv.out0.final.phdf");
    for f in [dir.join("adv.out0.00002.phdf"), last.clone()] {
        assert_passes(Viewer::Yt, &f, &["--hst", hst.to_str().unwrap()]);
    }
    let alloc = Command::new(python())
        .args([
            "-c",
            "import h5py, sys\n\
             print(sorted(set(h5py.File(sys.argv[1])['SparseInfo'][:].ravel().tolist())))",
            last.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&alloc.stdout);
    assert_eq!(
        text.trim(),
        "[False, True]",
        "some blocks allocated, some not: {alloc:?}"
    );
    for f in ["adv.out0.final.phdf.xdmf", "adv.out2.final.phdf.xdmf"] {
        assert_passes(Viewer::ParaView, &dir.join(f), &[]);
    }
}
