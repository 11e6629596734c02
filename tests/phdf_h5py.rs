//! The `.phdf` files the driver writes open with h5py and hold every dataset and attribute
//! of the layout Parthenon's readers need (`scripts/check_phdf.py`), on a 2-rank run of a
//! multilevel 3-D advection mesh with and without ghost zones; and the checker rejects a
//! file with a dataset removed or an attribute of the wrong type, so its "ok" means
//! something. The same run on 1 rank writes files that Parthenon's `phdf_diff.py` would find
//! the same (every `Info` attribute but the time, wall time and blocks per rank, every
//! dataset: `check_phdf.py --same`), which a file holding a checksum over the wall time, say,
//! would not.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const EXE: &str = env!("CARGO_BIN_EXE_starhalo");
/// Debian's python3-h5py (installed by scripts/setup) lives in the system interpreter.
const PYTHON: &str = "/usr/bin/python3";

fn scratch(name: &str) -> PathBuf {
    common::scratch("h5py", name)
}

fn checker() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/check_phdf.py")
}

fn check(files: &[PathBuf]) -> Output {
    check_args(
        &files
            .iter()
            .map(|f| f.to_str().unwrap())
            .collect::<Vec<_>>(),
    )
}

fn check_args(args: &[&str]) -> Output {
    Command::new(PYTHON)
        .arg(checker())
        .args(args)
        .output()
        .expect("cannot start /usr/bin/python3 (scripts/setup installs python3-h5py)")
}

fn files_with(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_str().is_some_and(|s| s.ends_with(suffix)))
        .collect();
    v.sort();
    v
}

#[test]
fn outputs_of_a_multilevel_run_pass_the_h5py_check() {
    let dir = scratch("run");
    let deck = dir.join("deck.yaml");
    std::fs::write(
        &deck,
        "\
parthenon/job: {problem: advection, problem_id: adv}
parthenon/mesh: {nx1: 16, nx2: 16, nx3: 16, ix1_bc: periodic, ox1_bc: periodic,
  ix2_bc: outflow, ox2_bc: outflow, ix3_bc: periodic, ox3_bc: periodic, numlevel: 2}
parthenon/meshblock: {nx1: 8, nx2: 8, nx3: 8}
parthenon/static_refinement0: {x1min: 0.0, x1max: 0.2, x2min: 0.0, x2max: 0.2, x3min: 0.0,
  x3max: 0.2, level: 1}
parthenon/time: {nlim: 4, ncycle_out: 0}
parthenon/output0: {file_type: hdf5, dt: 0.01}
parthenon/output1: {file_type: hdf5, dt: 0.02, ghost_zones: true, variables: [advected_1]}
advection: {num_vars: 2, profile: smooth_gaussian, vx: 1.0, vy: 0.5, vz: 0.25}
",
    )
    .unwrap();
    let run = |ranks: usize, dir: &Path| {
        let out = common::mpirun(
            ranks,
            120,
            Path::new(EXE),
            &["run", deck.to_str().unwrap(), "-d", dir.to_str().unwrap()],
            &[],
        );
        common::assert_ok(&format!("advection run on {ranks} ranks"), &out);
    };
    run(2, &dir);
    let files = files_with(&dir, ".phdf");
    assert!(files.len() >= 4, "too few outputs: {files:?}");
    let res = check(&files);
    let text = String::from_utf8_lossy(&res.stdout);
    assert!(
        res.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&res.stderr)
    );
    assert_eq!(
        text.lines().filter(|l| l.ends_with(": ok")).count(),
        files.len()
    );

    // 1 rank against 2: the same files as Parthenon's diff tool compares them.
    let one = dir.join("one-rank");
    std::fs::create_dir_all(&one).unwrap();
    run(1, &one);
    for f in &files {
        let other = one.join(f.file_name().unwrap());
        let res = check_args(&["--same", f.to_str().unwrap(), other.to_str().unwrap()]);
        let text = String::from_utf8_lossy(&res.stdout);
        assert!(res.status.success() && text.ends_with(": same\n"), "{text}");
    }
    // Two outputs of one run differ, and the comparison says where.
    let last = dir.join("adv.out0.final.phdf");
    let res = check_args(&["--same", files[0].to_str().unwrap(), last.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&res.stdout);
    assert_eq!(res.status.code(), Some(1), "{text}");
    assert!(
        text.contains("/Info/NCycle differs") && text.contains("/advected differs"),
        "{text}"
    );

    // Break copies of the first file two ways: the checker must name each fault.
    let broken = dir.join("broken.phdf");
    let wrong = dir.join("wrong.phdf");
    std::fs::copy(&files[0], &broken).unwrap();
    std::fs::copy(&files[0], &wrong).unwrap();
    let edit = Command::new(PYTHON)
        .args([
            "-c",
            "import h5py, sys\n\
             with h5py.File(sys.argv[1], 'r+') as f: del f['Levels']\n\
             with h5py.File(sys.argv[2], 'r+') as f: f['Info'].attrs['NumComponents'] = [1.0, 1.0]\n",
            broken.to_str().unwrap(),
            wrong.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(edit.status.success(), "{edit:?}");
    let res = check(&[broken, wrong]);
    let text = String::from_utf8_lossy(&res.stdout);
    assert_eq!(res.status.code(), Some(1), "{text}");
    assert!(text.contains("dataset /Levels missing"), "{text}");
    assert!(text.contains("NumComponents is not uint64"), "{text}");
}
