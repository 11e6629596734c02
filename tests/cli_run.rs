//! `starhalo run`: decks, overrides, problems and bad input, on real MPI jobs.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

const EXE: &str = env!("CARGO_BIN_EXE_starhalo");
const LIMIT_S: u64 = 120;

fn scratch(name: &str) -> PathBuf {
    common::scratch("run", name)
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

fn run(ranks: usize, args: &[&str]) -> Output {
    common::starhalo_run(ranks, LIMIT_S, args)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A result file: `key value` lines, and the value lines after each `# ...` section header.
struct Dat {
    keys: BTreeMap<String, String>,
    sections: Vec<Vec<f64>>,
}

fn read_dat(path: &Path) -> Dat {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut d = Dat {
        keys: BTreeMap::new(),
        sections: Vec::new(),
    };
    for line in text.lines() {
        if line.starts_with('#') {
            d.sections.push(Vec::new());
            continue;
        }
        let nums: Option<Vec<f64>> = line.split_whitespace().map(|w| w.parse().ok()).collect();
        match (nums, d.sections.len() > 1) {
            (Some(v), true) => d.sections.last_mut().unwrap().extend(v),
            _ => {
                let (k, v) = line.split_once(' ').unwrap();
                d.keys.insert(k.to_string(), v.to_string());
            }
        }
    }
    d
}

impl Dat {
    fn f64(&self, k: &str) -> f64 {
        self.keys[k].parse().unwrap()
    }
}

const HEAT: &str = "\
parthenon/job: {problem: heat2d, problem_id: h}
parthenon/time: {ncycle_out: 50}
heat2d:
  nx: 12
  ny: 12
  tol: 1.0e-9
  max_iters: 4000
  check_every: 5
";

const HEAT_IN: &str = "\
# the same deck in Parthenon's format
<parthenon/job>
problem = heat2d
problem_id = h      # output prefix

<parthenon/time>
ncycle_out = 50
<heat2d>
nx = 12
ny = 12
tol = 1.0e-9
max_iters = 4000
check_every = 5
";

#[test]
fn heat2d_is_bit_identical_on_1_to_4_ranks_and_reaches_the_exact_state() {
    let dir = scratch("heat");
    let deck = write(&dir, "heat.yaml", HEAT);
    let mut files = Vec::new();
    for n in [1, 2, 3, 4] {
        let out_dir = dir.join(format!("out{n}"));
        let mut args = vec![deck.as_str(), "-d", out_dir.to_str().unwrap()];
        if n == 4 {
            // A timeout past what a Duration holds means "never", not bad input.
            args.push("parthenon/time/recv_bdry_buf_timeout_sec=inf");
        }
        let o = run(n, &args);
        common::assert_ok(&format!("heat2d on {n} ranks"), &o);
        let s = stdout(&o);
        assert!(s.contains("cycle=50 residual="), "progress line:\n{s}");
        assert!(
            s.contains("(converged)") && s.contains("communication"),
            "summary:\n{s}"
        );
        files.push(std::fs::read(out_dir.join("h-heat2d.dat")).unwrap());
        if n == 1 {
            let d = read_dat(&out_dir.join("h-heat2d.dat"));
            assert_eq!(d.keys["stop"], "converged");
            assert!(d.f64("residual") <= 1e-9);
            assert!(d.f64("max_error") < 1e-7, "{}", d.keys["max_error"]);
            // The field itself against T = x^2 - y^2.
            let field = &d.sections[1];
            assert_eq!(field.len(), 144);
            for (k, v) in field.iter().enumerate() {
                let (x, y) = ((k % 12 + 1) as f64 / 13.0, (k / 12 + 1) as f64 / 13.0);
                assert!((v - (x * x - y * y)).abs() < 1e-7, "point {k}: {v}");
            }
        }
    }
    assert!(
        files.iter().all(|f| f == &files[0]),
        "results differ between rank counts"
    );

    // The .in deck gives the same answer.
    let deck_in = write(&dir, "heat.in", HEAT_IN);
    let out_dir = dir.join("out_in");
    let o = run(2, &[&deck_in, "-d", out_dir.to_str().unwrap()]);
    common::assert_ok("heat2d from a .in deck", &o);
    assert!(std::fs::read(out_dir.join("h-heat2d.dat")).unwrap() == files[0]);
    // Without `problem_id`, files take the spec's default prefix, `parthenon`.
    let unnamed = write(
        &dir,
        "unnamed.in",
        &HEAT_IN.replace("problem_id = h      # output prefix\n", ""),
    );
    let out_unnamed = dir.join("out_unnamed");
    let o = run(1, &[&unnamed, "-d", out_unnamed.to_str().unwrap()]);
    common::assert_ok("heat2d without problem_id", &o);
    assert!(std::fs::read(out_unnamed.join("parthenon-heat2d.dat")).unwrap() == files[0]);

    // Progress before the first residual check has no residual to show.
    let o = run(
        1,
        &[
            &deck,
            "-d",
            out_dir.to_str().unwrap(),
            "heat2d/check_every=75",
        ],
    );
    let s = stdout(&o);
    let residual = |cycle: u32| {
        let line = s
            .lines()
            .find(|l| l.starts_with(&format!("cycle={cycle} ")));
        line.and_then(|l| l.split_whitespace().nth(1)?.strip_prefix("residual="))
            .unwrap_or_else(|| panic!("no residual at cycle {cycle}:\n{s}"))
            .to_string()
    };
    assert_eq!(residual(50), "unchecked");
    let r: f64 = residual(100).parse().unwrap();
    assert!(r.is_finite() && r > 0.0, "{s}");
}

/// Standard output closed early (`starhalo run ... | head -1`) loses the output, not the run.
#[test]
fn a_closed_standard_output_does_not_stop_the_run() {
    let dir = scratch("closedout");
    let deck = write(&dir, "heat.yaml", HEAT);
    // Under a time limit: a run that blocked on the closed pipe would hang the suite.
    let mut child = std::process::Command::new("timeout")
        .args([
            "-k",
            "5",
            "120",
            EXE,
            "run",
            &deck,
            "-d",
            dir.to_str().unwrap(),
            "parthenon/time/ncycle_out=1",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(dir.join("h-heat2d.dat").exists());
}

#[test]
fn heat2d_stops_cleanly_at_the_wall_time_limit() {
    let dir = scratch("walltime");
    let deck = write(&dir, "heat.yaml", HEAT);
    let t0 = std::time::Instant::now();
    let o = run(
        2,
        &[
            &deck,
            "-t",
            "00:00:01",
            "-d",
            dir.to_str().unwrap(),
            // Far from converging within the limit (64 x 64 converges in 0.15 s).
            "heat2d/nx=256",
            "heat2d/ny=256",
            "heat2d/tol=0",
            "heat2d/max_iters=1000000000",
        ],
    );
    common::assert_ok("heat2d with -t", &o);
    assert!(t0.elapsed().as_secs() < 60);
    assert!(
        stdout(&o).contains("(wall-time limit reached)"),
        "{}",
        stdout(&o)
    );
    let d = read_dat(&dir.join("h-heat2d.dat"));
    assert_eq!(d.keys["stop"], "wall_time");
    assert_eq!(d.sections[1].len(), 256 * 256, "final output written");
}

const SPMV: &str = "\
parthenon/job: {problem: spmv, problem_id: lap}
parthenon/time: {ncycle_out: 5}
spmv: {generate: laplace2d, n: 9, solver: cg, tol: 1.0e-10, max_iters: 300}
";

#[test]
fn spmv_products_are_identical_on_1_to_4_ranks_and_cg_converges() {
    let dir = scratch("spmv");
    let deck = write(&dir, "spmv.yaml", SPMV);
    let (mut results, mut progress) = (Vec::new(), Vec::new());
    for n in [1, 2, 3, 4] {
        let out_dir = dir.join(format!("out{n}"));
        let o = run(n, &[&deck, "-d", out_dir.to_str().unwrap()]);
        common::assert_ok(&format!("spmv on {n} ranks"), &o);
        assert!(
            stdout(&o).contains("cycle=5 relative_residual="),
            "{}",
            stdout(&o)
        );
        results.push(read_dat(&out_dir.join("lap-spmv.dat")));
        // The progress lines, less their wall times.
        progress.push(
            stdout(&o)
                .lines()
                .filter_map(|l| l.split_once(" wall=").map(|(head, _)| head.to_string()))
                .collect::<Vec<_>>(),
        );
    }
    let x = |i: usize| 1.0 + (i % 7) as f64 / 8.0;
    for d in &results {
        assert_eq!(d.keys["rows"], "81");
        assert_eq!(d.keys["nnz"], (81 * 5 - 4 * 9).to_string());
        assert_eq!(d.f64("check_ax_max_diff"), 0.0);
        assert_eq!(d.f64("check_atx_max_diff"), 0.0);
        let (y, z) = (&d.sections[1], &d.sections[2]);
        assert_eq!(
            y, &results[0].sections[1],
            "A x differs between rank counts"
        );
        // Symmetric A: the reduce-based A^T x equals A x.
        assert_eq!(y, z);
        // Row 0 of the 2-D Laplacian: 4 x0 - x1 - x9.
        assert_eq!(y[0], 4.0 * x(0) - x(1) - x(9));
        assert_eq!(d.keys["cg_stop"], "converged");
        assert!(d.f64("cg_relative_residual") <= 1e-10);
        assert!(d.f64("cg_max_error") < 1e-8);
        // Dot products are exact sums: the whole solve is the same bits on any rank count.
        for key in ["cg_iterations", "cg_relative_residual", "cg_max_error"] {
            assert_eq!(d.keys[key], results[0].keys[key], "{key}");
        }
    }
    assert!(progress.windows(2).all(|w| w[0] == w[1]), "{progress:#?}");
}

/// CG on the 2-D Laplacian read from a file, and on the same matrix times 2^-900 and
/// 2^+900 (where `b.b` underflows to zero or overflows unless the solve scales): the same
/// iterations, residuals and errors, as a power of two scales every value exactly.
#[test]
fn cg_does_not_depend_on_the_scale_of_the_matrix() {
    let dir = scratch("cgscale");
    let n = 6;
    let mut results = Vec::new();
    for k in [0, -900, 900] {
        let scale = 2f64.powi(k / 2) * 2f64.powi(k - k / 2);
        let mut entries = Vec::new();
        for i in 0..n * n {
            let (x, y) = (i % n, i / n);
            entries.push((i, i, 4.0));
            if x > 0 {
                entries.push((i, i - 1, -1.0));
            }
            if y > 0 {
                entries.push((i, i - n, -1.0));
            }
        }
        let mut mtx = format!(
            "%%MatrixMarket matrix coordinate real symmetric\n{} {} {}\n",
            n * n,
            n * n,
            entries.len()
        );
        for (i, j, v) in entries {
            mtx += &format!("{} {} {:e}\n", i + 1, j + 1, v * scale);
        }
        let m = write(&dir, &format!("lap{k}.mtx"), &mtx);
        let deck = write(
            &dir,
            &format!("cg{k}.yaml"),
            &format!(
                "parthenon/job: {{problem: spmv, problem_id: s}}\n\
                 spmv: {{matrix: {m}, solver: cg, tol: 1.0e-12, max_iters: 100}}\n"
            ),
        );
        let out = dir.join(format!("out{k}"));
        let o = run(2, &[&deck, "-d", out.to_str().unwrap()]);
        common::assert_ok(&format!("cg at scale 2^{k}"), &o);
        results.push(read_dat(&out.join("s-spmv.dat")));
    }
    assert_eq!(results[0].keys["cg_stop"], "converged");
    assert!(results[0].f64("cg_iterations") > 3.0);
    for (d, k) in results.iter().zip([0, -900, 900]) {
        for key in [
            "cg_stop",
            "cg_iterations",
            "cg_relative_residual",
            "cg_max_error",
        ] {
            assert_eq!(d.keys[key], results[0].keys[key], "{key} at scale 2^{k}");
        }
    }
}

/// The test vector and serial products, computed here from the file itself.
fn serial_products(mtx: &Path) -> (Vec<f64>, Vec<f64>) {
    let text = std::fs::read_to_string(mtx).unwrap();
    let mut lines = text.lines().filter(|l| !l.starts_with('%'));
    let n: usize = lines
        .next()
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let x = |i: usize| 1.0 + (i % 7) as f64 / 8.0;
    let (mut y, mut z) = (vec![0.0; n], vec![0.0; n]);
    for l in lines {
        let w: Vec<&str> = l.split_whitespace().collect();
        let (i, j, v): (usize, usize, f64) = (
            w[0].parse().unwrap(),
            w[1].parse().unwrap(),
            w[2].parse().unwrap(),
        );
        y[i - 1] += v * x(j - 1);
        z[j - 1] += v * x(i - 1);
    }
    (y, z)
}

#[test]
fn spmv_transpose_of_a_nonsymmetric_file_matches_the_serial_product() {
    let dir = scratch("mtx");
    let mtx = Path::new(env!("CARGO_MANIFEST_DIR")).join("inputs/matrices/nonsym12.mtx");
    let (y_ref, z_ref) = serial_products(&mtx);
    assert_ne!(y_ref, z_ref, "the test matrix must be nonsymmetric");
    let deck = Path::new(env!("CARGO_MANIFEST_DIR")).join("inputs/spmv_mtx.yaml");
    for n in [1, 2, 3, 4] {
        let out_dir = dir.join(format!("out{n}"));
        let o = run(
            n,
            &[deck.to_str().unwrap(), "-d", out_dir.to_str().unwrap()],
        );
        common::assert_ok(&format!("spmv .mtx on {n} ranks"), &o);
        let d = read_dat(&out_dir.join("nonsym12-spmv.dat"));
        // Dyadic values: every sum is exact, so equality is exact in any order.
        assert_eq!(d.sections[1], y_ref, "A x on {n} ranks");
        assert_eq!(d.sections[2], z_ref, "A^T x on {n} ranks");
        assert!(!d.keys.contains_key("cg_iterations"));
    }
    // CG needs a symmetric matrix: asking for it is bad input on every rank, found by a dry
    // run too. A x = A^T x on the test vector (sneaky3) does not fool the check.
    for (matrix, says) in [
        ("nonsym12.mtx", "entry (2, 4) is -2e0, entry (4, 2) 7.5e-1"),
        (
            "sneaky3.mtx",
            "entry (1, 2) is 1.25e0, entry (2, 1) -1.25e0",
        ),
    ] {
        let m = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("inputs/matrices")
            .join(matrix);
        let (y, z) = serial_products(&m);
        assert_eq!(y == z, matrix == "sneaky3.mtx", "{matrix}");
        let m = format!("spmv/matrix={}", m.display());
        for dry in [false, true] {
            let mut args = vec![deck.to_str().unwrap(), "-d", dir.to_str().unwrap()];
            args.extend(["spmv/solver=cg", m.as_str()]);
            if dry {
                args.push("-n");
            }
            let o = run(3, &args);
            let what = format!("cg on {matrix} (dry run: {dry})");
            common::assert_bad_input(
                &what,
                &o,
                "spmv/solver at the command line: cg needs a symmetric matrix",
            );
            common::assert_bad_input(&what, &o, says);
        }
    }
    // Nor a symmetric matrix that cannot be positive definite: row 2 has no diagonal entry.
    let m = write(
        &dir,
        "zero_diagonal.mtx",
        "%%MatrixMarket matrix coordinate real symmetric\n3 3 3\n1 1 4\n2 1 1\n3 3 2\n",
    );
    let m = format!("spmv/matrix={m}");
    let o = run(2, &[deck.to_str().unwrap(), "-n", "spmv/solver=cg", &m]);
    common::assert_bad_input(
        "cg on a zero diagonal",
        &o,
        "cg needs a positive definite matrix, and",
    );
    common::assert_bad_input("cg on a zero diagonal", &o, "entry (2, 2) is 0e0");
}

#[test]
fn dry_run_prints_the_resolved_deck_and_runs_nothing() {
    let dir = scratch("dry");
    let deck = write(&dir, "heat.yaml", HEAT);
    let o = run(
        2,
        &[
            &deck,
            "-n",
            "heat2d/nx=7",
            "advection/vx=2",
            "-d",
            dir.to_str().unwrap(),
        ],
    );
    common::assert_ok("-n", &o);
    let s = stdout(&o);
    assert!(s.contains("heat2d:\n  nx: 7\n  ny: 12\n"), "{s}");
    assert!(s.contains("advection:\n  vx: 2\n"), "{s}");
    assert!(s.contains("2 command-line overrides applied"), "{s}");
    assert_eq!(s.matches("heat2d:").count(), 1, "rank 0 alone prints:\n{s}");
    assert!(!dir.join("h-heat2d.dat").exists());
    // The printed deck is itself a deck that gives the same output.
    let again = write(&dir, "again.yaml", &s);
    let o2 = run(1, &[&again, "-n"]);
    common::assert_ok("-n on -n output", &o2);
    assert_eq!(
        stdout(&o2).lines().skip(1).collect::<Vec<_>>(),
        s.lines().skip(1).collect::<Vec<_>>()
    );
    // A file path is printed absolute: the printed deck, saved elsewhere, finds the matrix
    // that the original named relative to itself. An override is kept as written: `1e5` is
    // a problem_id, not the number 100000.
    let spmv = concat!(env!("CARGO_MANIFEST_DIR"), "/inputs/spmv_mtx.yaml");
    let o = run(1, &[spmv, "-n", "parthenon/job/problem_id=1e5"]);
    common::assert_ok("-n spmv", &o);
    let printed = stdout(&o);
    let matrix = concat!(env!("CARGO_MANIFEST_DIR"), "/inputs/matrices/nonsym12.mtx");
    assert!(
        printed.contains(&format!("  matrix: {matrix}\n")),
        "{printed}"
    );
    assert!(printed.contains("  problem_id: 1e5\n"), "{printed}");
    let saved = write(&dir, "spmv.yaml", &printed);
    let o = run(1, &[&saved, "-d", dir.to_str().unwrap()]);
    common::assert_ok("the printed spmv deck", &o);
    assert!(dir.join("1e5-spmv.dat").exists());
    // A dry run checks the deck as the run would: an unknown key or an impossible split is
    // bad input, and nothing is printed or written.
    for (bad, needle) in [
        (
            "heat2d/nxx=7",
            "unknown key (not read by the driver or problem heat2d): heat2d/nxx",
        ),
        (
            "heat2d/ny=1",
            "ny at the command line: 1 row cannot be split over 2 ranks",
        ),
        (
            "heat2d/ny=100000000",
            "heat2d/ny at the command line: nx * ny = 12 * 100000000 exceeds",
        ),
    ] {
        let out = dir.join("never");
        let o = run(2, &[&deck, "-n", bad, "-d", out.to_str().unwrap()]);
        assert_eq!(
            o.status.code(),
            Some(2),
            "-n {bad}
{}",
            stderr(&o)
        );
        assert!(
            stderr(&o).contains(needle),
            "-n {bad}
{}",
            stderr(&o)
        );
        assert!(stdout(&o).is_empty(), "-n {bad} printed a deck");
        assert!(!out.exists(), "-n {bad} made the output directory");
    }
    // An output directory that the run could not make fails the dry run too.
    let file = write(&dir, "afile", "");
    for d in [file.clone(), format!("{file}/sub")] {
        let o = run(1, &[&deck, "-n", "-d", &d]);
        assert_eq!(o.status.code(), Some(2), "-d {d}\n{}", stderr(&o));
        assert!(
            stderr(&o).contains(&format!("-d {d}: cannot create the output directory")),
            "{}",
            stderr(&o)
        );
    }
}

/// An output directory that exists but takes no files, one whose name HDF5 cannot open
/// files in (not UTF-8), and names that would make file names longer than a file system
/// allows stop the run before any work, with exit 2 on every rank, naming the cause.
#[test]
fn unusable_output_names_are_bad_input_before_the_run() {
    let dir = scratch("names");
    let deck = format!("{}/inputs/advection.yaml", env!("CARGO_MANIFEST_DIR"));
    let out = dir.join("out");
    let out = out.to_str().unwrap();
    assert_bad_input_everywhere(
        "a directory that takes no files",
        &[&deck, "-d", "/proc"],
        "-d /proc: cannot write in the output directory",
    );
    let long = "x".repeat(101);
    for (key, needle) in [
        (
            "parthenon/job/problem_id",
            "must be a plain file-name prefix of at most 100 bytes",
        ),
        (
            "parthenon/output0/id",
            "must be a non-empty name of at most 100 bytes",
        ),
    ] {
        let arg = format!("{key}={long}");
        assert_bad_input_everywhere(&format!("a long {key}"), &[&deck, "-d", out, &arg], needle);
    }
    // A control character in an id (HDF5 refused a NUL only when the first file was written,
    // after outputs due before it had overwritten an earlier run's).
    assert_bad_input_everywhere(
        "an id with a control character",
        &[&deck, "-d", out, "parthenon/output0/id=a\u{1}b"],
        "parthenon/output0/id",
    );
    assert!(
        !Path::new(out).exists(),
        "bad input made the output directory"
    );
    // The longest names a run may write: an id of 100 bytes, 10-digit numbers, and the
    // XDMF's temporary name `advection.<id>.0000000000.phdf.xdmf.tmp` (135 bytes). In a
    // directory whose path leaves exactly room for them the run writes them; one byte more
    // is bad input.
    let keys = [
        format!("parthenon/output0/id={}", "i".repeat(100)),
        "parthenon/output0/file_number_width=10".to_string(),
        "parthenon/time/nlim=1".to_string(),
        "parthenon/mesh/nx1=16".to_string(),
        "parthenon/mesh/nx2=16".to_string(),
        "parthenon/meshblock/nx1=8".to_string(),
        "parthenon/meshblock/nx2=8".to_string(),
    ];
    let deep_dir = |len: usize| {
        let mut p = dir.join("deep");
        while p.as_os_str().len() + 201 < len {
            p.push("d".repeat(200));
        }
        let rest = len - p.as_os_str().len() - 1;
        p.push("e".repeat(rest));
        assert_eq!(p.as_os_str().len(), len);
        p
    };
    let fits = deep_dir(4095 - 1 - 135);
    let mut args = vec![deck.as_str(), "-d", fits.to_str().unwrap()];
    args.extend(keys.iter().map(String::as_str));
    let o = run(2, &args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let xdmf = format!("advection.{}.0000000000.phdf.xdmf", "i".repeat(100));
    assert!(fits.join(xdmf).is_file());
    let over = deep_dir(4095 - 135);
    args[2] = over.to_str().unwrap();
    assert_bad_input_everywhere(
        "a path too long for the file names in it",
        &args,
        "it would pass the 4095 bytes a path may have",
    );
    assert!(!over.exists(), "bad input made the output directory");

    use std::os::unix::ffi::OsStrExt as _;
    let odd = dir.join(std::ffi::OsStr::from_bytes(b"o_\xffdir"));
    let o = std::process::Command::new("timeout")
        .args([
            "-k", "5", "60", "mpiexec", "-n", "2", EXE, "run", &deck, "-d",
        ])
        .arg(&odd)
        .output()
        .unwrap();
    common::assert_bad_input("-d not UTF-8", &o, "the name is not UTF-8");
    assert!(!odd.exists(), "bad input made the output directory");
}

/// `parthenon/output05` is output number 5, as in Parthenon: its keys are read from its own
/// block and it writes `out5` files; with `parthenon/output5` beside it both would write the
/// same files, and the error names both blocks.
#[test]
fn an_output_number_with_a_leading_zero_reads_its_own_block() {
    let dir = scratch("output05");
    let deck = format!("{}/inputs/advection.yaml", env!("CARGO_MANIFEST_DIR"));
    let out = dir.join("out");
    let args = [
        deck.as_str(),
        "-d",
        out.to_str().unwrap(),
        "parthenon/time/nlim=2",
        "parthenon/output05/file_type=hst",
        "parthenon/output05/dn=1",
    ];
    let o = run(1, &args);
    common::assert_ok("output05", &o);
    let hst = std::fs::read_to_string(out.join("advection.out5.hst")).unwrap();
    // The header, then cycles 0, 1 and 2.
    assert_eq!(
        hst.lines().filter(|l| !l.starts_with('#')).count(),
        3,
        "{hst}"
    );
    let o = run(
        1,
        &[&args[..], &["parthenon/output5/file_type=hst"]].concat(),
    );
    common::assert_bad_input(
        "output ids out5 twice",
        &o,
        "parthenon/output5/id (default value): `out5` is also the id of parthenon/output05",
    );
}

/// PNG colours of ranges that have no width in floating point (1e17 ± 0.5) or whose width
/// overflows (±1.7e308): the plotting library's colour map panicked on both, on rank 0 alone,
/// and the other ranks waited for ever. Now each run writes its images; with the same range
/// everywhere, each image is one colour (its cells at the same end of the map).
#[test]
fn png_ranges_of_no_width_or_overflowing_width_are_drawn() {
    let dir = scratch("png_ranges");
    let deck = format!("{}/inputs/advection.yaml", env!("CARGO_MANIFEST_DIR"));
    for (name, range) in [
        ("flat", ["parthenon/output2/range_min=1e17", ""]),
        (
            "wide",
            [
                "parthenon/output2/range_min=-1.7e308",
                "parthenon/output2/range_max=1.7e308",
            ],
        ),
    ] {
        let out = dir.join(name);
        let mut args = vec![
            deck.as_str(),
            "-d",
            out.to_str().unwrap(),
            "parthenon/time/nlim=1",
            "parthenon/output2/dt=-1",
            "parthenon/output2/dn=1",
        ];
        args.extend(range.iter().filter(|a| !a.is_empty()));
        let o = run(2, &args);
        common::assert_ok(name, &o);
        let png = out.join("advection.out2.00000.png");
        let dec = png::Decoder::new(std::fs::File::open(&png).unwrap());
        let mut reader = dec.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        let (w, h) = (info.width as usize, info.height as usize);
        let ch = info.line_size / w;
        let px = |fx: f64, fy: f64| {
            let (x, y) = ((fx * w as f64) as usize, (fy * h as f64) as usize);
            buf[y * info.line_size + x * ch..][..3].to_vec()
        };
        let corner = px(0.1, 0.1);
        assert_ne!(corner, [0, 0, 0], "{name}: an outline, not a cell");
        for (fx, fy) in [(0.9, 0.1), (0.1, 0.9), (0.9, 0.9), (0.55, 0.45)] {
            assert_eq!(px(fx, fy), corner, "{name}: one colour at ({fx}, {fy})");
        }
    }
}

/// Parthenon's file-numbering keys: `file_number_width: 2` names files `NN`, and with
/// `use_final_label: false` the last step's output takes the next number instead of `final`
/// (PNG too); a history's `data_format` prints as C's printf; an out-of-range compression
/// level is bad input naming the key.
#[test]
fn file_numbers_follow_width_and_final_label() {
    let dir = scratch("numbering");
    let deck = format!("{}/inputs/advection.yaml", env!("CARGO_MANIFEST_DIR"));
    let out = dir.join("out");
    let args = [
        deck.as_str(),
        "-d",
        out.to_str().unwrap(),
        "parthenon/time/nlim=3",
        "parthenon/output0/dt=-1",
        "parthenon/output0/dn=1",
        "parthenon/output0/file_number_width=2",
        "parthenon/output0/use_final_label=false",
        "parthenon/output2/dt=-1",
        "parthenon/output2/dn=2",
        "parthenon/output2/use_final_label=false",
        "parthenon/output1/data_format=%12.5e",
    ];
    let o = run(2, &args);
    common::assert_ok("numbering", &o);
    // The history in Parthenon's default format (integrals of the two fields).
    let hst = std::fs::read_to_string(out.join("advection.out1.hst")).unwrap();
    let first = hst.lines().find(|l| !l.starts_with('#')).unwrap();
    assert_eq!(
        first,
        " 0.00000e+00  0.00000e+00 0  1.06283e+00  1.06283e+00"
    );
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".phdf") || n.ends_with(".png"))
        .collect();
    names.sort();
    // Cycles 0 to 3 on schedule, then the last step's final output numbered on as
    // Parthenon numbers it (04; the PNG's, after cycles 0 and 2, 00002): no `final`.
    assert_eq!(
        names,
        [
            "advection.out0.00.phdf",
            "advection.out0.01.phdf",
            "advection.out0.02.phdf",
            "advection.out0.03.phdf",
            "advection.out0.04.phdf",
            "advection.out2.00000.png",
            "advection.out2.00001.png",
            "advection.out2.00002.png",
        ]
    );
    let o = run(
        1,
        &[&args[..], &["parthenon/output0/hdf5_compression_level=10"]].concat(),
    );
    common::assert_bad_input(
        "compression level 10",
        &o,
        "parthenon/output0/hdf5_compression_level",
    );
}

/// A receive timeout that some ranks see and others do not stops the whole job, saying why,
/// rather than leaving the others waiting in a later collective: a tiny timeout on an
/// adaptive run on 4 ranks, a few times (before the fix, about a third of such runs hung).
/// The multigrid exchange's rounds honour the same timeout (they waited for ever before):
/// on two cores, some round of the Poisson solve's dozens of V-cycles waits beyond 1 µs.
#[test]
fn a_receive_timeout_stops_every_rank() {
    for (name, says, must_stop) in [
        (
            "advection_amr",
            "stayed incomplete for more than 0.000001 s",
            false,
        ),
        (
            "poisson",
            "still waiting for messages after 0.000001 s",
            true,
        ),
    ] {
        let deck = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("inputs/{name}.yaml"));
        let mut stopped = false;
        for attempt in 0..4 {
            let dir = scratch(&format!("timeout-{name}{attempt}"));
            let out = run(
                4,
                &[
                    deck.to_str().unwrap(),
                    "-d",
                    dir.to_str().unwrap(),
                    "parthenon/time/recv_bdry_buf_timeout_sec=1e-6",
                ],
            );
            let code = out.status.code();
            assert_ne!(code, Some(124), "{name} {attempt} hung:\n{}", stderr(&out));
            if code != Some(0) {
                assert_eq!(code, Some(1), "{name} {attempt}\n{}", stderr(&out));
                assert!(
                    stderr(&out).contains(says),
                    "{name} {attempt}\n{}",
                    stderr(&out)
                );
                stopped = true;
            }
        }
        assert!(stopped || !must_stop, "no {name} run hit a 1 µs timeout");
    }
}

/// Runs on 3 ranks, each through a shell that records its own exit code, and checks that
/// every rank exited 2, the message was printed once (rank 0) and contains `needle`.
fn assert_bad_input_everywhere(what: &str, args: &[&str], needle: &str) {
    let dir = scratch(&format!("codes-{}", what.replace(' ', "_")));
    let script = format!(
        "\"$0\" \"$@\"; rc=$?; echo $rc > {}/rc.${{PMI_RANK:-0}}; exit $rc",
        dir.display()
    );
    let mut all = vec!["-c", script.as_str(), EXE, "run"];
    all.extend_from_slice(args);
    let o = common::mpirun(3, LIMIT_S, Path::new("sh"), &all, &[]);
    common::assert_bad_input(what, &o, needle);
    for r in 0..3 {
        let rc = std::fs::read_to_string(dir.join(format!("rc.{r}"))).unwrap_or_default();
        assert_eq!(rc.trim(), "2", "{what}: rank {r} exit code\n{}", stderr(&o));
    }
}

#[test]
fn bad_yaml_input_exits_2_on_every_rank() {
    let dir = scratch("bad");
    let deck = write(&dir, "heat.yaml", HEAT);
    assert_bad_input_everywhere(
        "unknown key",
        &[&deck, "heat2d/tolerance=3"],
        "unknown key (not read by the driver or problem heat2d): heat2d/tolerance at the command line",
    );
    let typo = write(&dir, "typo.yaml", &HEAT.replace("max_iters", "maxiters"));
    assert_bad_input_everywhere("unknown key in file", &[&typo], "heat2d/maxiters at ");
    assert_bad_input_everywhere(
        "wrong type",
        &[&deck, "heat2d/nx=abc"],
        "heat2d/nx at the command line: expected a non-negative integer, found 'abc'",
    );
    let wrong = write(
        &dir,
        "wrong.yaml",
        &HEAT.replace("tol: 1.0e-9", "tol: small"),
    );
    assert_bad_input_everywhere(
        "wrong type in file",
        &[&wrong],
        &format!("heat2d/tol at {wrong}:6: expected a number, found 'small'"),
    );
    let nested = write(
        &dir,
        "nested.yaml",
        &HEAT.replace("  nx: 12", "  nx: {a: 1}"),
    );
    assert_bad_input_everywhere(
        "mapping for a value",
        &[&nested],
        &format!("heat2d/nx at {nested}:4: expected a non-negative integer, found a block of keys"),
    );
    // A block under a name the problem does not read is an unknown key, not a misread value.
    let unknown = write(
        &dir,
        "unknown.yaml",
        &HEAT.replace("  nx: 12", "  nx: 12\n  sub: {nx: 1}"),
    );
    assert_bad_input_everywhere(
        "an unknown block",
        &[&unknown],
        "unknown key (not read by the driver or problem heat2d): heat2d/sub at ",
    );
    // The GPU keys of a problem without GPU code.
    assert_bad_input_everywhere(
        "a host-only problem on a GPU",
        &[&deck, "parthenon/exec/space=cuda"],
        "parthenon/exec/space at the command line: problem heat2d runs on the host only",
    );
    let control = write(
        &dir,
        "control.yaml",
        &HEAT.replace("problem_id: h}", "problem_id: \"h\\nx\"}"),
    );
    assert_bad_input_everywhere(
        "a newline in problem_id",
        &[&control],
        &format!("parthenon/job/problem_id at {control}:1: must be a plain file-name prefix"),
    );
    let missing = write(&dir, "missing.yaml", "heat2d: {nx: 4}\n");
    assert_bad_input_everywhere(
        "missing key",
        &[&missing],
        &format!("{missing} does not say which problem to run: give parthenon/job/problem"),
    );
    let malformed = write(
        &dir,
        "malformed.yaml",
        &HEAT.replace("  ny: 12", "  ny: 12: 3"),
    );
    assert_bad_input_everywhere(
        "malformed YAML",
        &[&malformed],
        &format!("{malformed}:5: malformed YAML"),
    );
    assert_bad_input_everywhere(
        "a timeout that rounds to 0 ns",
        &[&deck, "parthenon/time/recv_bdry_buf_timeout_sec=1e-12"],
        "recv_bdry_buf_timeout_sec at the command line: must be a positive number of seconds (1e-9 or more)",
    );
    assert_bad_input_everywhere(
        "bad -t",
        &[&deck, "-t", "1:30"],
        "-t '1:30': expected a wall-time limit HH:MM:SS",
    );
    assert_bad_input_everywhere(
        "unknown problem",
        &[&deck, "parthenon/job/problem=advect"],
        "unknown problem 'advect' (known: heat2d, spmv",
    );
    assert_bad_input_everywhere(
        "restart",
        &[&deck, "-r", "x.rst"],
        "problem 'heat2d' does not support restarts",
    );
    assert_bad_input_everywhere(
        "no deck",
        &[&dir.join("none.yaml").to_string_lossy()],
        "cannot read deck",
    );
    assert_bad_input_everywhere(
        "bad override",
        &[&deck, "nx=3"],
        "command-line override 'nx=3'",
    );
    assert_bad_input_everywhere(
        "too few rows",
        &[&deck, "heat2d/ny=2"],
        "2 rows cannot be split over 3 ranks",
    );
    let spmv = write(
        &dir,
        "spmv.yaml",
        "parthenon/job: {problem: spmv}\nspmv: {matrix: nofile.mtx}\n",
    );
    assert_bad_input_everywhere("missing matrix file", &[&spmv], "spmv/matrix at ");
}

#[test]
fn bad_in_input_exits_2_on_every_rank() {
    let dir = scratch("badin");
    let deck = write(&dir, "heat.in", HEAT_IN);
    assert_bad_input_everywhere(
        "in: unknown key",
        &[&deck, "heat2d/nz=3"],
        "heat2d/nz at the command line",
    );
    let typo = write(
        &dir,
        "typo.in",
        &HEAT_IN.replace("check_every", "check_evry"),
    );
    assert_bad_input_everywhere(
        "in: unknown key in file",
        &[&typo],
        &format!("heat2d/check_evry at {typo}:13"),
    );
    let wrong = write(&dir, "wrong.in", &HEAT_IN.replace("nx = 12", "nx = twelve"));
    assert_bad_input_everywhere(
        "in: wrong type",
        &[&wrong],
        &format!("heat2d/nx at {wrong}:9: expected a non-negative integer, found 'twelve'"),
    );
    let missing = write(&dir, "missing.in", "<heat2d>\nnx = 4\n");
    assert_bad_input_everywhere(
        "in: missing key",
        &[&missing],
        "does not say which problem to run",
    );
    let malformed = write(
        &dir,
        "malformed.in",
        &HEAT_IN.replace("<heat2d>", "<heat2d"),
    );
    assert_bad_input_everywhere(
        "in: malformed",
        &[&malformed],
        &format!("{malformed}:8: block header '<heat2d' lacks its closing '>'"),
    );
    assert_bad_input_everywhere(
        "in: bad -t",
        &[&deck, "-t", "00:61:00"],
        "minutes and seconds must be below 60",
    );
    let unknown = write(
        &dir,
        "unknown.in",
        &HEAT_IN.replace("problem = heat2d", "problem = burgers"),
    );
    assert_bad_input_everywhere(
        "in: unknown problem",
        &[&unknown],
        &format!("parthenon/job/problem at {unknown}:3: unknown problem 'burgers'"),
    );
    // Control characters from the file are shown escaped, and a problem name with one is an
    // unknown problem (not a bad problem_id, which defaults to it).
    let control = write(
        &dir,
        "control.in",
        &HEAT_IN.replace("problem = heat2d", "problem = heat\u{1}2d"),
    );
    assert_bad_input_everywhere(
        "in: control characters",
        &[&control],
        &format!("parthenon/job/problem at {control}:3: unknown problem 'heat\\u{{1}}2d'"),
    );
    let control = write(
        &dir,
        "nul.in",
        &HEAT_IN.replace("check_every", "check\0every"),
    );
    assert_bad_input_everywhere(
        "in: NUL in a key",
        &[&control],
        &format!("heat2d/check\\0every at {control}:13"),
    );
    // A right-to-left override would make the message read backwards.
    let control = write(
        &dir,
        "rlo.in",
        &HEAT_IN.replace("problem = heat2d", "problem = heat\u{202e}2d"),
    );
    assert_bad_input_everywhere(
        "in: right-to-left override",
        &[&control],
        "unknown problem 'heat\\u{202e}2d'",
    );
}

/// The history ends with a line for the last step, on its schedule (`dn: 1`) or not
/// (`dt` longer than the run), and never two for one cycle.
#[test]
fn the_history_ends_with_one_line_for_the_last_step() {
    let dir = scratch("hst");
    let deck = format!("{}/inputs/advection.yaml", env!("CARGO_MANIFEST_DIR"));
    for (schedule, want) in [
        ("parthenon/output1/dn=1", vec!["0", "1", "2", "3", "4", "5"]),
        ("parthenon/output1/dt=0.05", vec!["0", "5"]),
    ] {
        let out = dir.join(schedule.replace(['/', '='], "_"));
        let o = run(
            2,
            &[
                &deck,
                "-d",
                out.to_str().unwrap(),
                "parthenon/time/nlim=5",
                "parthenon/output0/dt=-1",
                "parthenon/output2/dt=-1",
                schedule,
            ],
        );
        common::assert_ok(schedule, &o);
        let text = std::fs::read_to_string(out.join("advection.out1.hst")).unwrap();
        let cycles: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split_whitespace().nth(2).unwrap())
            .collect();
        assert_eq!(cycles, want, "{schedule}:\n{text}");
        // Blocks disabled by a negative dt write nothing, not even a final output.
        let names: Vec<String> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names
                .iter()
                .all(|n| !n.contains(".out0.") && !n.contains(".out2.")),
            "{names:?}"
        );
    }
}

/// Turning the png block into a restart output leaves its png keys behind: they are ignored,
/// as Parthenon ignores them, and rank 0 says so once, naming where each was given.
#[test]
fn keys_of_another_file_type_are_ignored_with_a_warning() {
    let deck = format!("{}/inputs/advection.yaml", env!("CARGO_MANIFEST_DIR"));
    let o = run(
        2,
        &[
            &deck,
            "-n",
            "parthenon/output2/file_type=rst",
            "parthenon/output0/width=3",
        ],
    );
    common::assert_ok("-n with keys of another file type", &o);
    let err = stderr(&o);
    for warning in [
        "parthenon/output0/width (at the command line) does not apply to file_type hdf5; ignored",
        "parthenon/output2/variable (at ",
    ] {
        assert_eq!(err.matches(warning).count(), 1, "{warning}\n{err}");
    }
    assert!(err.contains("does not apply to file_type rst"), "{err}");

    // So are the keys of another profile, where an override changed the profile.
    let o = run(2, &[&deck, "-n", "advection/profile=hard_sphere"]);
    common::assert_ok("-n with keys of another profile", &o);
    let err = stderr(&o);
    for key in ["amp", "width"] {
        let warning = format!("advection/{key} (at {deck}:");
        assert_eq!(err.matches(&warning).count(), 1, "{warning}\n{err}");
    }
    assert_eq!(
        err.matches("does not apply to profile hard_sphere; ignored")
            .count(),
        2,
        "{err}"
    );

    // A png slice position on a 2-D mesh, which has one slice.
    let o = run(2, &[&deck, "-n", "parthenon/output2/x3=0.25"]);
    common::assert_ok("-n with a png x3 on a 2-D mesh", &o);
    let warning = "parthenon/output2/x3 (at the command line) does not apply to a 2-D mesh (it has one slice); ignored";
    assert_eq!(stderr(&o).matches(warning).count(), 1, "{}", stderr(&o));

    // And a 2-D poisson deck's second wave number on a 1-D mesh, still checked for its type.
    let poisson = format!("{}/inputs/poisson.yaml", env!("CARGO_MANIFEST_DIR"));
    let one_d = ["parthenon/mesh/nx2=1", "parthenon/meshblock/nx2=1"];
    let o = run(1, &[&[poisson.as_str(), "-n"][..], &one_d].concat());
    common::assert_ok("-n of a 2-D poisson deck on a 1-D mesh", &o);
    let warning = format!("poisson/ky (at {poisson}:28) does not apply to a 1-D mesh; ignored");
    assert!(stderr(&o).contains(&warning), "{}", stderr(&o));
    let o = run(
        1,
        &[&[poisson.as_str(), "-n", "poisson/ky=two"][..], &one_d].concat(),
    );
    common::assert_bad_input("a 1-D mesh's ky of the wrong type", &o, "poisson/ky");
}

/// Mistakes that only the mesh or the problem's variables reveal are still found at set-up:
/// exit 2 on every rank before any step, each message naming the key and where it was given.
#[test]
fn bad_advection_input_is_found_before_the_first_step() {
    let dir = scratch("badadv");
    let text = std::fs::read_to_string(format!(
        "{}/inputs/advection.yaml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let deck = write(&dir, "adv.yaml", &text);
    let out = dir.join("out");
    let out = out.to_str().unwrap();
    let line = |needle: &str| 1 + text.lines().position(|l| l.contains(needle)).unwrap();
    // A key the problem reads only after asking whether it is given, written as a block.
    let width = text.lines().find(|l| l.starts_with("  width:")).unwrap();
    let nested = write(&dir, "nested.yaml", &text.replace(width, "  width: {a: 1}"));
    assert_bad_input_everywhere(
        "a value written as a block",
        &[&nested, "-d", out],
        &format!(
            "advection/width at {nested}:{}: problem advection reads a value here",
            line(width)
        ),
    );
    assert_bad_input_everywhere(
        "unknown output variable",
        &[
            &deck,
            "-d",
            out,
            "parthenon/output0/variables=advected,nosuch",
        ],
        "parthenon/output0/variables at the command line: `nosuch`: no such variable",
    );
    assert_bad_input_everywhere(
        "fewer fields than the outputs name",
        &[&deck, "-d", out, "advection/num_vars=1"],
        &format!(
            "parthenon/output0/variables at {deck}:{}: `advected_1`: no such variable",
            line("variables: [advected, advected_1]")
        ),
    );
    assert_bad_input_everywhere(
        "two histories with one id",
        &[
            &deck,
            "-d",
            out,
            "parthenon/output3/file_type=hst",
            "parthenon/output3/dn=1",
            "parthenon/output3/id=out1",
        ],
        "parthenon/output3/id at the command line: `out1` is also the id of parthenon/output1",
    );
    assert_bad_input_everywhere(
        "png on a 1-D mesh",
        &[
            &deck,
            "-d",
            out,
            "parthenon/mesh/nx2=1",
            "parthenon/meshblock/nx2=1",
        ],
        &format!(
            "parthenon/output2/file_type at {deck}:{}: `png`: a png slice needs a 2-D or 3-D mesh",
            line("file_type: png")
        ),
    );
    let typo = write(&dir, "typo.yaml", &text.replace("  nx1: 64", "  nx1: 6x4"));
    assert_bad_input_everywhere(
        "mesh integer in file",
        &[&typo, "-d", out],
        &format!(
            "parthenon/mesh/nx1 at {typo}:{}: `6x4`: expected a non-negative integer",
            line("  nx1: 64")
        ),
    );
    assert_bad_input_everywhere(
        "blocks too small to refine",
        &[
            &deck,
            "-d",
            out,
            "parthenon/mesh/refinement=adaptive",
            "parthenon/mesh/numlevel=2",
            "parthenon/meshblock/nx1=2",
        ],
        "parthenon/meshblock/nx1 at the command line: `2`: must be even and at least 4",
    );
    assert_bad_input_everywhere(
        "user boundaries without a user boundary function",
        &[
            &deck,
            "-d",
            out,
            "parthenon/mesh/ix2_bc=user",
            "parthenon/mesh/ox2_bc=user",
        ],
        "parthenon/mesh/ix2_bc at the command line: advection defines no user boundary",
    );
    assert_bad_input_everywhere(
        "an inverted x3 extent on a 2-D mesh",
        &[&deck, "-d", out, "parthenon/mesh/x3min=2"],
        "parthenon/mesh/x3max",
    );
    // 4096² blocks of 16² cells with ghosts and two variables: far more than any machine has.
    assert_bad_input_everywhere(
        "a mesh larger than memory",
        &[
            &deck,
            "-d",
            out,
            "parthenon/mesh/nx1=65536",
            "parthenon/mesh/nx2=65536",
        ],
        &format!("error: {deck}: the mesh would have more than "),
    );
    assert!(
        !Path::new(out).exists(),
        "bad input wrote into the output directory"
    );
}

/// Refinement everywhere up to 12 levels grows the mesh until memory runs out: with 1 GB of
/// address space per rank the run stops at the remesh that would not fit, with a run-time
/// error on every rank, instead of the allocator's abort.
#[test]
fn runaway_refinement_stops_at_the_memory_it_has() {
    let dir = scratch("runaway");
    let deck = format!("{}/inputs/advection_amr.yaml", env!("CARGO_MANIFEST_DIR"));
    let out = dir.join("out");
    let o = common::mpirun(
        2,
        LIMIT_S,
        Path::new("sh"),
        &[
            "-c",
            "ulimit -v 1000000 && exec \"$0\" \"$@\"",
            EXE,
            "run",
            &deck,
            "-d",
            out.to_str().unwrap(),
            "parthenon/mesh/numlevel=12",
            "parthenon/refinement0/field=advected",
            "parthenon/refinement0/refine_tol=1e-12",
            "parthenon/refinement0/derefine_tol=1e-13",
            "parthenon/output0/dt=-1",
            "parthenon/output1/dt=-1",
        ],
        &[],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("[rank 0] error: remeshing the adaptive mesh: the mesh would have more than ")
            && err.contains("blocks, the most that fit in memory: each of the 2 ranks has "),
        "{err}"
    );
    assert_eq!(err.matches("error:").count(), 1, "{err}");
}

/// The memory budget is a lower bound, so a mesh it accepts may still not fit: a block of
/// 4² cells costs more than it counts. Raising the address-space limit step by step from
/// where MPI starts to where the run ends well, every run ends in one of the promised ways on
/// every rank (the budget's exit 2, a fallible allocation's or a refused infallible one's
/// exit 1), never with a signal or a hang; and some step lands between budget and need, where
/// a refused `Vec` growth now gives exit 1 and says so. (Near and below the limit where a
/// one-block run starts, MPI_Init itself fails, in ways that change from run to run, some
/// with no message; and where MPI's own allocations fail later it aborts the job itself:
/// those steps are skipped.)
#[test]
fn a_mesh_that_passes_the_budget_but_not_memory_ends_with_exit_1() {
    let dir = scratch("oom");
    let mesh = |n: usize, b: usize| {
        format!(
            "parthenon/job: {{problem: advection, problem_id: tiny}}\n\
             parthenon/mesh: {{nx1: {n}, nx2: {n}, ix1_bc: periodic, ox1_bc: periodic, \
             ix2_bc: periodic, ox2_bc: periodic}}\n\
             parthenon/meshblock: {{nx1: {b}, nx2: {b}}}\n\
             parthenon/time: {{nlim: 1, ncycle_out: 0}}\n\
             advection: {{num_vars: 1, compute_error: false}}\n"
        )
    };
    let (deck, small) = (dir.join("tiny.yaml"), dir.join("small.yaml"));
    std::fs::write(&deck, mesh(512, 4)).unwrap();
    std::fs::write(&small, mesh(8, 8)).unwrap();
    let out = dir.join("out");
    let run = |mib: usize, deck: &Path| {
        common::mpirun(
            2,
            LIMIT_S,
            Path::new("sh"),
            &[
                "-c",
                &format!("ulimit -v {} && exec \"$0\" \"$@\"", mib * 1024),
                EXE,
                "run",
                deck.to_str().unwrap(),
                "-d",
                out.to_str().unwrap(),
            ],
            &[],
        )
    };
    // MPI_Init fails now and then just above the lowest limit where it can succeed: start a
    // step above the lowest where three one-block runs in a row succeed.
    let floor = 10
        + (100..1000)
            .step_by(10)
            .find(|&mib| (0..3).all(|_| run(mib, &small).status.success()))
            .expect("a one-block run starts below 1000 MiB");
    let (mut refused_by_budget, mut refused_by_system) = (false, false);
    for mib in (floor..1000).step_by(10) {
        let o = run(mib, &deck);
        let err = stderr(&o);
        let budget = err.contains("blocks, the most that fit in memory");
        let system = err.contains("error: out of memory: the allocation above was refused");
        match o.status.code() {
            Some(0) => {
                assert!(
                    refused_by_system,
                    "no limit between the budget's and the run's need (up to {mib} MiB; \
                     the budget refused some: {refused_by_budget})"
                );
                return;
            }
            Some(2) if budget => refused_by_budget = true,
            Some(1) if system => refused_by_system = true,
            Some(1) if err.contains("fit in memory") => {}
            // Near the floor MPI may still fail to start now and then, and higher up it may
            // abort the job itself where its own allocations fail.
            Some(_)
                if !(refused_by_budget || refused_by_system)
                    || err.contains("Fatal error in")
                    || err.contains("MPI_Init") =>
            {
                continue
            }
            code => panic!("{mib} MiB: exit {code:?} (124 = time limit)\n{err}"),
        }
        assert!(!err.contains("panicked"), "{mib} MiB: {err}");
    }
    panic!("the run did not fit in 1000 MiB");
}

/// A time step below the resolution of the time near tlim would stall the run there forever
/// (`t + dt == t`); it stops at once, on every rank, with one message.
#[test]
fn a_time_step_too_small_to_reach_tlim_is_bad_input_unless_nlim_ends_the_run() {
    let dir = scratch("tinydt");
    let deck = format!("{}/inputs/advection.yaml", env!("CARGO_MANIFEST_DIR"));
    let out = dir.join("out");
    let out = out.to_str().unwrap();
    // The time would stop advancing near 1e-3, short of tlim: found before the first step.
    let tiny = "advection/cfl=1e-17";
    assert_bad_input_everywhere(
        "a time step too small for tlim",
        &[&deck, "-d", out, tiny],
        "parthenon/time/tlim at ",
    );
    let o = run(2, &["-n", &deck, "-d", out, tiny]);
    assert_eq!(o.status.code(), Some(2), "-n: {}", stderr(&o));
    assert!(stderr(&o).contains("is too small to reach tlim 1:"));
    // An adaptive mesh refines before its first step, which may shrink the step below that:
    // the run's own check stops every rank with exit 1.
    let amr = format!("{}/inputs/advection_amr.yaml", env!("CARGO_MANIFEST_DIR"));
    let o = run(2, &["-n", &amr, "-d", out, "parthenon/time/tlim=3e13"]);
    assert_eq!(o.status.code(), Some(0), "-n: {}", stderr(&o));
    let o = run(2, &[&amr, "-d", out, "parthenon/time/tlim=3e13"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("[rank 0] error: cycle 0: the time step ")
            && err.contains("is too small to reach tlim 3e13 from time 0:"),
        "{err}"
    );
    assert_eq!(err.matches("error:").count(), 1, "{err}");
    // With nlim the run ends long before the time could stall.
    let o = run(
        2,
        &[
            &deck,
            "-d",
            out,
            "parthenon/time/tlim=1e14",
            "parthenon/time/nlim=3",
            "parthenon/mesh/nx1=32",
            "parthenon/mesh/nx2=32",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// A write that fails (here the final name is taken by a directory, as a full disk would fail
/// it) is a run-time error on every rank and leaves no partial `.tmp` file behind.
#[test]
fn a_failed_output_write_leaves_no_partial_file() {
    let dir = scratch("failedwrite");
    let deck = format!("{}/inputs/advection.yaml", env!("CARGO_MANIFEST_DIR"));
    let taken = dir.join("advection.out0.00000.phdf");
    std::fs::create_dir_all(taken.join("occupied")).unwrap();
    let o = run(
        2,
        &[
            &deck,
            "-d",
            dir.to_str().unwrap(),
            "parthenon/time/nlim=1",
            "parthenon/output1/dt=-1",
            "parthenon/output2/dt=-1",
        ],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("advection.out0.00000.phdf"), "{err}");
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "partial files left: {left:?}");
}

/// A history line that does not fit (here a file-size limit of 1 KiB stands in for a full
/// disk) is not written in part: the history keeps its whole lines and the run fails.
#[test]
fn a_history_line_is_appended_whole_or_not_at_all() {
    let dir = scratch("historylimit");
    let deck = format!("{}/inputs/advection.yaml", env!("CARGO_MANIFEST_DIR"));
    let o = common::mpirun(
        1,
        LIMIT_S,
        Path::new("sh"),
        &[
            "-c",
            // The limit writes fail with EFBIG once the signal it raises is ignored.
            "trap '' XFSZ && ulimit -f 2 && exec \"$0\" \"$@\"",
            EXE,
            "run",
            &deck,
            "-d",
            dir.to_str().unwrap(),
            "parthenon/time/nlim=30",
            "parthenon/output0/dt=-1",
            "parthenon/output2/dt=-1",
            "parthenon/output1/dt=-1",
            "parthenon/output1/dn=1",
        ],
        // UCX's shared-memory transport cannot map its segments under the limit.
        &[("UCX_TLS", "self,tcp")],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("advection.out1.hst: File too large"), "{err}");
    let hst = std::fs::read_to_string(dir.join("advection.out1.hst")).unwrap();
    assert!(hst.len() < 1024 && hst.ends_with('\n'), "{hst:?}");
    let rows: Vec<&str> = hst.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(rows.len() >= 3, "{hst}");
    for r in rows {
        assert_eq!(r.split_whitespace().count(), 5, "a cut line: {r:?}");
    }
}

const POISSON: &str = "\
parthenon/job: {problem: poisson, problem_id: p}
parthenon/mesh: {nx1: 32, nx2: 32, ix1_bc: periodic, ox1_bc: periodic, ix2_bc: periodic, ox2_bc: periodic}
parthenon/meshblock: {nx1: 8, nx2: 8}
parthenon/time: {ncycle_out: 1}
poisson: {kx: 1, ky: 2, tol: 1.0e-10}
";

/// Faces that hold `u` to 0 (`user`: Dirichlet, ghosts the negated mirror) or its normal
/// derivative to 0 (`reflecting`, `outflow`: Neumann), alone and mixed, in 2-D and 3-D: the
/// error against the exact solution (sines and cosines that meet those conditions) falls at
/// second order, the V-cycles do not grow with the resolution, and rank counts agree bit for
/// bit. Stale ghosts, a mean removed where `u` is fixed, or the wrong mode would all miss the
/// exact solution by far more than the discretisation error.
#[test]
fn poisson_dirichlet_and_neumann_faces_converge_at_second_order() {
    let dir = scratch("poisson-faces");
    let deck = write(&dir, "poisson.yaml", POISSON);
    let faces = |x1: [&str; 2], x2: [&str; 2]| {
        vec![
            format!("parthenon/mesh/ix1_bc={}", x1[0]),
            format!("parthenon/mesh/ox1_bc={}", x1[1]),
            format!("parthenon/mesh/ix2_bc={}", x2[0]),
            format!("parthenon/mesh/ox2_bc={}", x2[1]),
        ]
    };
    let solve = |ranks: usize, name: &str, args: &[String]| {
        let out_dir = dir.join(format!("{name}-{ranks}"));
        let mut all = vec![deck.as_str(), "-d", out_dir.to_str().unwrap()];
        all.extend(args.iter().map(String::as_str));
        let o = run(ranks, &all);
        common::assert_ok(&format!("poisson {name} on {ranks} ranks"), &o);
        let d = read_dat(&out_dir.join("p-poisson.dat"));
        assert_eq!(d.keys["stop"], "converged", "{name}: {:?}", d.keys);
        let text = std::fs::read_to_string(out_dir.join("p-poisson.dat")).unwrap();
        (d, text)
    };
    for (name, x1, x2) in [
        ("dirichlet", ["user", "user"], ["user", "user"]),
        (
            "neumann",
            ["reflecting", "reflecting"],
            ["outflow", "outflow"],
        ),
        ("mixed", ["user", "outflow"], ["reflecting", "user"]),
        (
            "half-periodic",
            ["periodic", "periodic"],
            ["user", "reflecting"],
        ),
    ] {
        let mut errors = Vec::new();
        for nx in [16, 32, 64] {
            let mut args = faces(x1, x2);
            args.push(format!("parthenon/mesh/nx1={nx}"));
            args.push(format!("parthenon/mesh/nx2={nx}"));
            let (d, _) = solve(1, &format!("{name}{nx}"), &args);
            assert!(d.f64("v_cycles") <= 9.0, "{name} at {nx}: {:?}", d.keys);
            errors.push(d.f64("max_error"));
        }
        assert!(
            errors
                .windows(2)
                .all(|w| (3.6..4.4).contains(&(w[0] / w[1]))),
            "{name}: {errors:?}"
        );
        // k half periods (sin between Dirichlet faces, cos between Neumann ones): the error
        // at nx 64 is that of a wave resolved by 64 / k cells (k - 1/2 for unlike faces).
        assert!(errors[2] < 2e-3, "{name}: {errors:?}");
        let (_, one) = solve(1, &format!("{name}-r"), &faces(x1, x2));
        let (_, three) = solve(3, &format!("{name}-r"), &faces(x1, x2));
        assert_eq!(one, three, "{name}");
    }
    let cube = |n: usize| {
        let mut args = faces(["user", "reflecting"], ["periodic", "periodic"]);
        args.extend(
            [
                "parthenon/mesh/ix3_bc=user",
                "parthenon/mesh/ox3_bc=user",
                "parthenon/meshblock/nx3=8",
                "poisson/kz=1",
            ]
            .map(String::from),
        );
        args.extend((1..=3).map(|d| format!("parthenon/mesh/nx{d}={n}")));
        args
    };
    let (coarse, one) = solve(1, "cube16", &cube(16));
    assert_eq!(one, solve(2, "cube16", &cube(16)).1);
    let (fine, _) = solve(1, "cube32", &cube(32));
    let ratio = coarse.f64("max_error") / fine.f64("max_error");
    assert!((3.6..4.4).contains(&ratio), "{ratio}: {:?}", fine.keys);
}

/// Multigrid V-cycles through the multigrid exchange: each cuts the residual (by 0.15 or
/// better on average), their number does not grow with the resolution (the coarsest level
/// is solved, not just relaxed), the error against the exact solution falls at second order,
/// and every rank count gives the same bits, with either smoother and in 3-D.
#[test]
fn poisson_multigrid_converges_at_second_order_and_ranks_agree_bit_for_bit() {
    let dir = scratch("poisson");
    let deck = write(&dir, "poisson.yaml", POISSON);
    let solve = |ranks: usize, args: &[&str]| {
        // Named by a hash: the arguments spelled out can exceed a file name's length.
        let mut hash = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(args, &mut hash);
        let case = std::hash::Hasher::finish(&hash);
        let out_dir = dir.join(format!("out{ranks}-{case:016x}"));
        let mut all = vec![deck.as_str(), "-d", out_dir.to_str().unwrap()];
        all.extend(args);
        let o = run(ranks, &all);
        common::assert_ok(&format!("poisson on {ranks} ranks with {args:?}"), &o);
        assert!(
            stdout(&o).contains("cycle=3 relative_residual="),
            "{}",
            stdout(&o)
        );
        let d = read_dat(&out_dir.join("p-poisson.dat"));
        assert_eq!(d.keys["stop"], "converged", "{args:?}");
        std::fs::read_to_string(out_dir.join("p-poisson.dat")).unwrap()
    };
    let cube = [
        "parthenon/mesh/nx1=16",
        "parthenon/mesh/nx2=16",
        "parthenon/mesh/nx3=16",
        "parthenon/mesh/ix3_bc=periodic",
        "parthenon/mesh/ox3_bc=periodic",
        "parthenon/meshblock/nx3=8",
        "poisson/kz=1",
    ];
    for (args, ranks) in [
        (&[][..], &[1, 2, 3, 4][..]),
        (
            &["poisson/smoother=jacobi", "poisson/omega=0.7"][..],
            &[1, 3][..],
        ),
        (&["poisson/solver=mg"][..], &[1, 3][..]),
        (
            &[
                "poisson/smoother=line",
                "poisson/solver=mg",
                "parthenon/mesh/x2max=8",
            ][..],
            &[1, 2, 3][..],
        ),
        (&cube[..], &[1, 3][..]),
        // Planes across x1-x2 (cells 2.5 times longer along x3), dealt to the ranks in
        // turn, with every kind of face folded into them or held beyond them.
        (
            &[
                &cube[..],
                &[
                    "poisson/smoother=line",
                    "parthenon/mesh/x3max=2.5",
                    "parthenon/mesh/ix1_bc=user",
                    "parthenon/mesh/ox1_bc=reflecting",
                    "parthenon/mesh/ix2_bc=reflecting",
                    "parthenon/mesh/ox2_bc=outflow",
                    "parthenon/mesh/ix3_bc=user",
                    "parthenon/mesh/ox3_bc=reflecting",
                ],
            ]
            .concat()[..],
            &[1, 2, 3][..],
        ),
    ] {
        let results: Vec<String> = ranks.iter().map(|&n| solve(n, args)).collect();
        assert!(results.iter().all(|r| r == &results[0]), "{results:#?}");
    }
    // V-cycles alone, and as the preconditioner of flexible CG (the default): reduction per
    // V-cycle at worst and on average, V-cycles at most.
    for (solver, worst, mean, most) in [("mg", 0.35, 0.15, 12.0), ("cg", 0.15, 0.05, 7.0)] {
        let (mut errors, mut v_cycles) = (Vec::new(), Vec::new());
        for nx in ["16", "32", "64", "128"] {
            let out_dir = dir.join(format!("{solver}{nx}"));
            let (n1, n2, sv) = (
                format!("parthenon/mesh/nx1={nx}"),
                format!("parthenon/mesh/nx2={nx}"),
                format!("poisson/solver={solver}"),
            );
            let o = run(1, &[&deck, "-d", out_dir.to_str().unwrap(), &n1, &n2, &sv]);
            common::assert_ok(&format!("poisson {solver} at nx {nx}"), &o);
            let d = read_dat(&out_dir.join("p-poisson.dat"));
            assert_eq!(d.keys["stop"], "converged");
            assert!(d.f64("relative_residual") <= 1e-10);
            assert!(d.f64("levels") >= 3.0, "{:?}", d.keys);
            assert!(d.f64("v_cycles") <= most, "{solver}: {:?}", d.keys);
            v_cycles.push(d.f64("v_cycles"));
            let r = &d.sections[1];
            assert_eq!(r[0], 1.0);
            assert!(r.windows(2).all(|w| w[1] < worst * w[0]), "{solver}: {r:?}");
            let rate = r.last().unwrap().powf(1.0 / (r.len() - 1) as f64);
            assert!(
                rate < mean,
                "{solver}: mean reduction {rate} per V-cycle: {r:?}"
            );
            errors.push(d.f64("max_error"));
        }
        assert!(errors.windows(2).all(|w| w[0] / w[1] >= 3.6), "{errors:?}");
        assert!(v_cycles[3] <= v_cycles[2], "{solver}: {v_cycles:?}");
    }
    // Solved to rounding, the solve stays there: blocks of 2 cells leave one level, whose
    // CG starts from the answer each V-cycle; and a coarse tolerance below rounding.
    for (args, stop) in [
        (
            &[
                "parthenon/meshblock/nx1=2",
                "parthenon/meshblock/nx2=2",
                "poisson/solver=mg",
                "poisson/tol=0",
                "poisson/max_iters=40",
            ][..],
            "max_iters",
        ),
        (&["poisson/coarse_tol=1e-300"][..], "converged"),
    ] {
        let out_dir = dir.join("rounding");
        let o = run(
            1,
            &[&[deck.as_str(), "-d", out_dir.to_str().unwrap()][..], args].concat(),
        );
        common::assert_ok(&format!("poisson with {args:?}"), &o);
        let d = read_dat(&out_dir.join("p-poisson.dat"));
        assert_eq!(d.keys["stop"], stop, "{args:?}: {:?}", d.keys);
        assert!(
            d.sections[1][1..].iter().all(|&r| r < 0.1),
            "{:?}",
            d.sections[1]
        );
        assert!(d.f64("max_error") < 0.011, "{:?}", d.keys);
    }
    // Cells 4 times taller than wide: 20 V-cycles are too few alone, enough under CG.
    for (solver, stop) in [("mg", "max_iters"), ("cg", "converged")] {
        let out_dir = dir.join(format!("tall-{solver}"));
        let sv = format!("poisson/solver={solver}");
        let args = [deck.as_str(), "-d", out_dir.to_str().unwrap(), &sv];
        let o = run(
            1,
            &[
                &args[..],
                &["parthenon/mesh/x2max=4", "poisson/max_iters=20"],
            ]
            .concat(),
        );
        common::assert_ok(&format!("poisson {solver} on tall cells"), &o);
        let d = read_dat(&out_dir.join("p-poisson.dat"));
        assert_eq!(d.keys["stop"], stop, "{solver}: {:?}", d.keys);
    }
    // Cells far from square: zebra lines, each solved whole across blocks, relax the strong
    // coupling that point smoothing leaves (cg needs 45 V-cycles with rbgs at aspect 8), and
    // V-cycles need fewer the farther cells are from square. Lines one block long, with the
    // values beyond their ends held, took 60 V-cycles alone at aspect 64 and diverged at 16
    // with longer blocks. Dirichlet faces' ghosts join the line's diagonal (lagged a sweep
    // behind, they diverged at the first V-cycle). Cells narrow in two directions in 3-D get
    // planes across both, solved whole: lines along each in turn took 17 and 18 V-cycles
    // alone at an aspect ratio of 4 with Neumann and mixed faces, and had not converged
    // after 40 at 16 (lines along one alone diverged).
    let dirichlet = [
        "parthenon/mesh/x2max=32",
        "parthenon/mesh/ix1_bc=user",
        "parthenon/mesh/ox1_bc=user",
        "parthenon/mesh/ix2_bc=user",
        "parthenon/mesh/ox2_bc=user",
    ];
    let square = [
        "parthenon/mesh/nx1=128",
        "parthenon/mesh/nx2=128",
        "parthenon/meshblock/nx1=16",
        "parthenon/meshblock/nx2=16",
    ];
    let tall = |a: &'static str| [&square[..], &[a]].concat();
    let flat_3d =
        |x3max: &'static str, faces: &[&'static str]| [&cube[..], &[x3max], faces].concat();
    let neumann = [
        "parthenon/mesh/ix1_bc=reflecting",
        "parthenon/mesh/ox1_bc=reflecting",
        "parthenon/mesh/ix2_bc=outflow",
        "parthenon/mesh/ox2_bc=reflecting",
    ];
    let mixed = [
        "parthenon/mesh/ix1_bc=user",
        "parthenon/mesh/ox1_bc=reflecting",
        "parthenon/mesh/ix3_bc=user",
        "parthenon/mesh/ox3_bc=reflecting",
    ];
    for (case, (solver, most, cells)) in [
        ("cg", 7.0, tall("parthenon/mesh/x2max=8")),
        ("mg", 9.0, tall("parthenon/mesh/x2max=8")),
        ("mg", 3.0, tall("parthenon/mesh/x2max=64")),
        ("cg", 6.0, [&square[..], &dirichlet[..]].concat()),
        ("mg", 7.0, [&square[..], &dirichlet[..]].concat()),
        ("mg", 2.0, flat_3d("parthenon/mesh/x3max=16", &[])),
        ("mg", 3.0, flat_3d("parthenon/mesh/x3max=4", &neumann)),
        ("mg", 2.0, flat_3d("parthenon/mesh/x3max=16", &neumann)),
        ("mg", 4.0, flat_3d("parthenon/mesh/x3max=4", &mixed)),
    ]
    .into_iter()
    .enumerate()
    {
        let out_dir = dir.join(format!("line-{solver}-{case}"));
        let sv = format!("poisson/solver={solver}");
        let mut args = vec![
            deck.as_str(),
            "-d",
            out_dir.to_str().unwrap(),
            &sv,
            "poisson/smoother=line",
            "poisson/max_iters=40",
        ];
        args.extend(&cells);
        let o = run(1, &args);
        common::assert_ok(&format!("poisson {solver} with lines"), &o);
        let d = read_dat(&out_dir.join("p-poisson.dat"));
        assert_eq!(
            d.keys["stop"], "converged",
            "{solver} {cells:?}: {:?}",
            d.keys
        );
        assert!(
            d.f64("v_cycles") <= most,
            "{solver} {cells:?}: {:?}",
            d.keys
        );
    }
    // Not a uniform mesh, a wave the grid cannot resolve, a vanishing solution, no
    // smoothing, a box too large: bad input on every rank, naming what is wrong.
    for (bad, says) in [
        (
            [
                "parthenon/mesh/refinement=adaptive",
                "parthenon/mesh/numlevel=2",
            ],
            "poisson solves on a",
        ),
        (["poisson/kx=16", "poisson/ky=2"], "poisson/kx"),
        (["poisson/ky=0", "poisson/kx=1"], "poisson/ky"),
        (
            ["poisson/post_smooth=0", "poisson/pre_smooth=2"],
            "poisson/post_smooth",
        ),
        (
            ["parthenon/mesh/x2max=1e6", "poisson/tol=0"],
            "parthenon/mesh/x2max",
        ),
        (
            ["parthenon/mesh/x2max=1e200", "poisson/tol=0"],
            "parthenon/mesh/x2max",
        ),
        (
            ["poisson/coarse_tol=1", "poisson/tol=0"],
            "poisson/coarse_tol",
        ),
        (
            ["poisson/smoother=sor", "poisson/tol=0"],
            "poisson/smoother",
        ),
        (
            ["poisson/solver=bicgstab", "poisson/tol=0"],
            "poisson/solver",
        ),
        (
            ["poisson/omega=0.7", "poisson/tol=0"],
            "poisson/omega at the command line: weights smoother: jacobi only",
        ),
        (
            ["poisson/tol=1e-400", "poisson/max_iters=1"],
            "poisson/tol at the command line: 1e-400 is below the smallest 64-bit float",
        ),
    ] {
        let o = run(
            2,
            &[
                &deck,
                "-d",
                dir.join("bad").to_str().unwrap(),
                bad[0],
                bad[1],
            ],
        );
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{says}: {}", stderr(&o));
    }
    // A 1-D mesh is a single line, which solved whole is singular without a Dirichlet face.
    let one_d = POISSON
        .replace("nx2: 32,", "nx2: 1,")
        .replace("nx2: 8}", "nx2: 1}")
        .replace("ky: 2, ", "");
    let one_d = write(&dir, "poisson1d.yaml", &one_d);
    let o = run(2, &[&one_d, "poisson/smoother=line"]);
    common::assert_bad_input(
        "line smoother on a 1-D mesh",
        &o,
        "poisson/smoother at the command line: line relaxes the lines of a 2-D or 3-D mesh",
    );
    // Solved, at second order: the error falls fourfold from 32 to 64 cells.
    let max_error = |nx: &str| {
        let out = dir.join(format!("1d-{nx}"));
        let mesh_nx = format!("parthenon/mesh/nx1={nx}");
        let o = run(2, &[&one_d, "-d", out.to_str().unwrap(), &mesh_nx]);
        common::assert_ok(&format!("poisson in 1-D, {nx} cells"), &o);
        let d = read_dat(&out.join("p-poisson.dat"));
        assert_eq!(d.keys["stop"], "converged", "{nx} cells: {:?}", d.keys);
        d.f64("max_error")
    };
    let (coarse, fine) = (max_error("32"), max_error("64"));
    assert!(coarse < 1e-2, "1-D error on 32 cells: {coarse}");
    let order = (coarse / fine).log2();
    assert!(
        (1.8..2.2).contains(&order),
        "1-D order {order}: {coarse} -> {fine}"
    );
}
