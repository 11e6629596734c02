//! The outputs of `starhalo run inputs/poisson.yaml`: hdf5 files of the potential, the
//! density (right-hand side) and the error, a history line per V-cycle, on 1 and 2 ranks.
//! Checked:
//!
//! - files before the first V-cycle, every `dn` V-cycles and at the end, numbered as the
//!   schedule says, and one history line per V-cycle;
//! - the density is the exact solution's Laplacian, and the error the potential less its mean
//!   less the exact solution, at every cell centre the file gives; the largest error is the
//!   one the run prints;
//! - the final potential is the same bits on 1 and 2 ranks;
//! - a restart output is bad input (exit 2 on every rank).

mod common;

use std::path::{Path, PathBuf};

const LIMIT_S: u64 = 120;

fn deck() -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("inputs/poisson.yaml");
    p.to_str().unwrap().to_string()
}

fn scratch(name: &str) -> PathBuf {
    common::scratch("poisson", name)
}

fn read(f: &hdf5::File, name: &str) -> Vec<f64> {
    f.dataset(name)
        .and_then(|d| d.read_raw())
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

const OUTPUTS: [&str; 4] = [
    "parthenon/output0/dn=3",
    "parthenon/output1/file_type=hst",
    "parthenon/output1/dn=1",
    "poisson/solver=mg",
];

/// Runs the deck on `ranks` ranks; returns the output directory and stdout.
fn solve(ranks: usize) -> (PathBuf, String) {
    let dir = scratch(&format!("{ranks}"));
    let deck = deck();
    let mut args = vec![deck.as_str(), "-d", dir.to_str().unwrap()];
    args.extend(OUTPUTS);
    let out = common::starhalo_run(ranks, LIMIT_S, &args);
    common::assert_ok(&format!("poisson on {ranks} ranks"), &out);
    (dir, String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn poisson_writes_its_fields_and_history() {
    let (dir, stdout) = solve(2);
    // "poisson: 5 levels, N V-cycles, ..., max error vs exact E"
    let line = stdout
        .lines()
        .find(|l| l.starts_with("poisson: "))
        .expect(&stdout);
    let words: Vec<&str> = line.split_whitespace().collect();
    let cycles: usize = words[3].parse().unwrap();
    let printed: f64 = words.last().unwrap().parse().unwrap();
    assert!(cycles >= 4, "{line}");

    let hst = std::fs::read_to_string(dir.join("poisson.out1.hst")).unwrap();
    let rows: Vec<Vec<f64>> = hst
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().map(|w| w.parse().unwrap()).collect())
        .collect();
    let cycle_column: Vec<usize> = rows.iter().map(|r| r[2] as usize).collect();
    assert_eq!(cycle_column, (0..=cycles).collect::<Vec<_>>(), "{hst}");
    assert!(hst.contains("[4]=potential [5]=density [6]=error"), "{hst}");

    let numbered = (0..=cycles).step_by(3).count();
    for n in 0..numbered {
        assert!(
            dir.join(format!("poisson.out0.{n:05}.phdf")).is_file(),
            "file {n}"
        );
    }
    assert!(!dir
        .join(format!("poisson.out0.{numbered:05}.phdf"))
        .exists());

    let f = hdf5::File::open(dir.join("poisson.out0.final.phdf")).unwrap();
    let (u, rhs, err) = (
        read(&f, "potential"),
        read(&f, "density"),
        read(&f, "error"),
    );
    let (x, y) = (read(&f, "VolumeLocations/x"), read(&f, "VolumeLocations/y"));
    let nb = f.dataset("Levels").unwrap().shape()[0];
    let n = u.len() / nb; // 32 x 32 cells per block
    let (nx, ny) = (x.len() / nb, y.len() / nb);
    assert_eq!(nx * ny, n);
    // Periodic on [0, 1]^2 with kx = 1, ky = 2: u = sin(2 pi x) sin(4 pi y), fixed up to a
    // constant.
    let tau = std::f64::consts::TAU;
    let exact = |x: f64, y: f64| (tau * x).sin() * (2.0 * tau * y).sin();
    let lambda = -(tau * tau) * 5.0;
    let mean = u.iter().sum::<f64>() / u.len() as f64;
    let mut largest = 0.0f64;
    for b in 0..nb {
        for j in 0..ny {
            for i in 0..nx {
                let c = b * n + j * nx + i;
                let e = exact(x[b * nx + i], y[b * ny + j]);
                assert!(
                    (rhs[c] - lambda * e).abs() < 1e-10,
                    "density at {b} {j} {i}"
                );
                assert!(
                    (err[c] - (u[c] - mean - e)).abs() < 1e-12,
                    "error at {b} {j} {i}"
                );
                largest = largest.max(err[c].abs());
            }
        }
    }
    assert!(
        (largest - printed).abs() <= 1e-6 * printed,
        "{largest} in the file, {printed} printed"
    );

    let (one, _) = solve(1);
    let g = hdf5::File::open(one.join("poisson.out0.final.phdf")).unwrap();
    let u1 = read(&g, "potential");
    assert!(
        u.len() == u1.len() && u.iter().zip(&u1).all(|(a, b)| a.to_bits() == b.to_bits()),
        "1 and 2 ranks differ"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&one);
}

/// Writing outputs after every V-cycle leaves the solve as it is: the result file, residuals
/// included, is the same with every output off; and an output scheduled by `dt` draws a
/// warning (the time stays 0).
#[test]
fn outputs_leave_the_solve_unchanged() {
    let deck = deck();
    let result = |name: &str, extra: &[&str]| {
        let dir = scratch(name);
        let mut args = vec![deck.as_str(), "-d", dir.to_str().unwrap()];
        args.extend(extra);
        let out = common::starhalo_run(2, LIMIT_S, &args);
        common::assert_ok(name, &out);
        let dat = std::fs::read_to_string(dir.join("poisson-poisson.dat")).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        (dat, String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (with, err) = result(
        "every",
        &[
            "parthenon/output0/dn=1",
            "parthenon/output1/file_type=hst",
            "parthenon/output1/dt=0.5",
        ],
    );
    let (without, _) = result("off", &["parthenon/output0/dn=-1"]);
    assert_eq!(with, without);
    assert!(with.contains("solver cg"), "{with}");
    assert!(
        err.contains("parthenon/output1/dt (at the command line): poisson's time stays 0"),
        "{err}"
    );
}

#[test]
fn poisson_writes_no_restart_files() {
    let dir = scratch("rst");
    let deck = deck();
    let out = common::starhalo_run(
        2,
        LIMIT_S,
        &[
            &deck,
            "-d",
            dir.to_str().unwrap(),
            "parthenon/output0/file_type=rst",
        ],
    );
    common::assert_bad_input(
        "rst",
        &out,
        "parthenon/output0/file_type at the command line: poisson writes no restart files",
    );
    let _ = std::fs::remove_dir_all(&dir);
}
