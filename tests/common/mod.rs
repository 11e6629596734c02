//! Launching multi-rank jobs from tests, always under a time limit so a deadlock fails.
#![allow(dead_code)]

pub mod amr;
pub mod routes;
pub mod sf_world;

use std::path::Path;
use std::process::{Command, Output};

/// Set in the environment of a test binary relaunched under `mpiexec`.
pub const CHILD_ENV: &str = "STARHALO_TEST_CHILD";

/// An empty scratch directory `starhalo-{kind}-{pid}-{name}` under the system's temporary
/// directory (whatever an earlier run of this process left there removed).
pub fn scratch(kind: &str, name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("starhalo-{kind}-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `mpiexec -n ranks exe args...` killed after `limit_s` seconds.
pub fn mpirun(
    ranks: usize,
    limit_s: u64,
    exe: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Output {
    let mut cmd = Command::new("timeout");
    cmd.args([
        "-k",
        "5",
        &limit_s.to_string(),
        "mpiexec",
        "-n",
        &ranks.to_string(),
    ])
    .arg(exe)
    .args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output()
        .expect("cannot start timeout/mpiexec: is MPICH installed?")
}

/// Runs `starhalo run args...` on `ranks` ranks, killed after `limit_s` seconds.
pub fn starhalo_run(ranks: usize, limit_s: u64, args: &[&str]) -> Output {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    mpirun(
        ranks,
        limit_s,
        Path::new(env!("CARGO_BIN_EXE_starhalo")),
        &all,
        &[],
    )
}

/// Panics with both output streams unless the job exited 0; 124 means it hit the time limit.
pub fn assert_ok(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what}: exit {:?} (124 = time limit)\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Panics unless the job rejected its input as the CLI promises: exit 2, no panic, and one
/// rank alone printing an error that contains `needle`.
pub fn assert_bad_input(what: &str, out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{what}: want exit 2\n{err}");
    assert!(
        err.contains(needle),
        "{what}: stderr lacks `{needle}`:\n{err}"
    );
    assert!(!err.contains("panicked"), "{what}: panicked\n{err}");
    assert_eq!(
        err.matches("error:").count(),
        1,
        "{what}: one rank speaks\n{err}"
    );
}

/// An NVIDIA driver is loaded on this machine: GPU tests take their GPU branch.
/// `STARHALO_TEST_GPU=1` (or `0`) says so where `/proc` does not show the driver.
pub fn has_gpu() -> bool {
    match std::env::var("STARHALO_TEST_GPU").as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => Path::new("/proc/driver/nvidia/version").exists(),
    }
}

/// A job that asked for the GPU on a machine without one: exit 1 on every rank, rank 0 alone
/// saying why (its message contains `says`), nothing on stdout.
pub fn assert_no_gpu_exit(out: &Output, says: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(err.contains(says), "{err}");
    assert_eq!(
        err.matches("error:").count(),
        1,
        "rank 0 alone speaks: {err}"
    );
    assert!(out.stdout.is_empty(), "no report: {out:?}");
}

/// Relaunches the running test binary on each rank count, marked as a child.
pub fn relaunch_self(ranks: &[usize], limit_s: u64) {
    relaunch_checked(ranks.iter().map(|&n| (n, Vec::new())), limit_s, |_, _| ());
}

/// Relaunches the running test binary, marked as a child, for each `(ranks, args)` job, and
/// hands each successful job's output to `check`.
pub fn relaunch_checked(
    jobs: impl IntoIterator<Item = (usize, Vec<String>)>,
    limit_s: u64,
    mut check: impl FnMut(usize, &Output),
) {
    let exe = std::env::current_exe().expect("test binary path");
    for (n, args) in jobs {
        let t0 = std::time::Instant::now();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = mpirun(n, limit_s, &exe, &args, &[(CHILD_ENV, "1")]);
        assert_ok(&format!("{} on {n} ranks", exe.display()), &out);
        check(n, &out);
        eprintln!("  {n} ranks: ok ({:.1} s)", t0.elapsed().as_secs_f64());
    }
}

/// Results that must not depend on the rank count: the `DIGEST ...` lines a child job prints
/// (one per case), compared with the first job's.
#[derive(Default)]
pub struct SameDigests {
    first: Option<(usize, Vec<String>)>,
}

impl SameDigests {
    /// Checks that the job on `ranks` ranks printed `cases` digests equal to the first job's
    /// first `cases` (a job may run fewer cases). Returns the job's stdout.
    pub fn check(&mut self, ranks: usize, out: &Output, cases: usize) -> String {
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let d: Vec<String> = text
            .lines()
            .filter(|l| l.starts_with("DIGEST"))
            .map(str::to_string)
            .collect();
        assert_eq!(d.len(), cases, "{text}");
        match &self.first {
            None => self.first = Some((ranks, d)),
            Some((m, first)) => assert_eq!(
                d[..],
                first[..cases.min(first.len())],
                "results on {ranks} ranks differ from {m} ranks"
            ),
        }
        text
    }
}
