//! `starhalo run` of the advection problem on real MPI jobs: second-order convergence of a
//! smooth wave in 1-D and 3-D, results bit for bit independent of block size, rank count and
//! message mode, outputs written, and bad advection keys exit 2 on every rank.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

const EXE: &str = env!("CARGO_BIN_EXE_starhalo");
const LIMIT_S: u64 = 120;

fn scratch(name: &str) -> PathBuf {
    common::scratch("adv", name)
}

fn run(ranks: usize, dir: &Path, deck: &str, overrides: &[String]) -> Output {
    let path = dir.join("deck.yaml");
    std::fs::write(&path, deck).unwrap();
    let out_dir = dir.join("out");
    let mut args = vec![
        "run".to_string(),
        path.to_str().unwrap().to_string(),
        "-d".to_string(),
        out_dir.to_str().unwrap().to_string(),
    ];
    args.extend(overrides.iter().cloned());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    common::mpirun(ranks, LIMIT_S, Path::new(EXE), &args, &[])
}

/// Runs and returns the last line of `<id>-errors.dat`: `Nx1 Nx2 Nx3 Ncycle L1 Linf`.
fn errors_line(ranks: usize, dir: &Path, deck: &str, overrides: &[String]) -> String {
    let out = run(ranks, dir, deck, overrides);
    common::assert_ok(&format!("advection on {ranks} ranks {overrides:?}"), &out);
    let text = std::fs::read_to_string(dir.join("out").join("adv-errors.dat")).unwrap();
    assert!(text.starts_with("# Nx1 Nx2 Nx3 Ncycle L1 Linf\n"), "{text}");
    text.lines().last().unwrap().to_string()
}

fn l1(line: &str) -> f64 {
    line.split_whitespace().nth(4).unwrap().parse().unwrap()
}

const WAVE_1D: &str = "\
parthenon/job: {problem: advection, problem_id: adv}
parthenon/mesh: {nx1: 32, ix1_bc: periodic, ox1_bc: periodic}
parthenon/meshblock: {nx1: 8}
parthenon/time: {tlim: 1.0, integrator: rk2, ncycle_out: 0}
advection: {profile: wave, limiter: none, compute_error: true, cfl: 0.4, amp: 0.5}
";

const WAVE_3D: &str = "\
parthenon/job: {problem: advection, problem_id: adv}
parthenon/mesh:
  {nx1: 8, nx2: 8, nx3: 8, ix1_bc: periodic, ox1_bc: periodic, ix2_bc: periodic,
   ox2_bc: periodic, ix3_bc: periodic, ox3_bc: periodic}
parthenon/meshblock: {nx1: 8, nx2: 8, nx3: 8}
parthenon/time: {tlim: 0.25, integrator: rk2, ncycle_out: 0}
advection: {profile: wave, limiter: none, compute_error: true, cfl: 0.2, vx: 1.0, vy: 0.5, vz: 0.25}
";

fn ov(kv: &[(&str, usize)]) -> Vec<String> {
    kv.iter().map(|(k, v)| format!("{k}={v}")).collect()
}

#[test]
fn wave_1d_converges_at_second_order_and_block_size_does_not_matter() {
    let dir = scratch("1d");
    let mut prev: Option<f64> = None;
    for n in [32, 64, 128] {
        let line = errors_line(1, &dir, WAVE_1D, &ov(&[("parthenon/mesh/nx1", n)]));
        let e = l1(&line);
        eprintln!("1-D nx1={n}: {line}");
        if let Some(p) = prev {
            assert!(p / e >= 3.6, "L1 {p:e} -> {e:e}: ratio {} < 3.6", p / e);
        }
        prev = Some(e);
        // One block of the whole mesh: the same bits.
        let single = errors_line(
            1,
            &dir,
            WAVE_1D,
            &ov(&[("parthenon/mesh/nx1", n), ("parthenon/meshblock/nx1", n)]),
        );
        assert_eq!(single, line, "single block vs blocks of 8 at nx1={n}");
    }
    // The limited schemes converge too (minmod is first order at extrema: weaker bound).
    let a = l1(&errors_line(
        1,
        &dir,
        WAVE_1D,
        &["advection/limiter=mc".to_string()],
    ));
    let b = l1(&errors_line(
        1,
        &dir,
        WAVE_1D,
        &[
            "advection/limiter=mc".to_string(),
            "parthenon/mesh/nx1=64".to_string(),
        ],
    ));
    assert!(a / b > 2.5, "mc: {a:e} -> {b:e}");
}

#[test]
fn wave_3d_converges_and_ranks_agree_bit_for_bit() {
    let dir = scratch("3d");
    let mut lines = Vec::new();
    for (n, b) in [(8, 8), (16, 8), (32, 16)] {
        let o = ov(&[
            ("parthenon/mesh/nx1", n),
            ("parthenon/mesh/nx2", n),
            ("parthenon/mesh/nx3", n),
            ("parthenon/meshblock/nx1", b),
            ("parthenon/meshblock/nx2", b),
            ("parthenon/meshblock/nx3", b),
        ]);
        let line = errors_line(2, &dir, WAVE_3D, &o);
        eprintln!("3-D n={n}: {line}");
        lines.push(line);
    }
    for w in lines.windows(2) {
        let (p, e) = (l1(&w[0]), l1(&w[1]));
        assert!(p / e >= 3.6, "L1 {p:e} -> {e:e}: ratio {} < 3.6", p / e);
    }
    // 16^3 in blocks of 4^3 (64 blocks): 1, 2 and 4 ranks, coalesced or not, and one block.
    let base = ov(&[
        ("parthenon/mesh/nx1", 16),
        ("parthenon/mesh/nx2", 16),
        ("parthenon/mesh/nx3", 16),
        ("parthenon/meshblock/nx1", 4),
        ("parthenon/meshblock/nx2", 4),
        ("parthenon/meshblock/nx3", 4),
    ]);
    let mut per_channel = base.clone();
    per_channel.push("parthenon/mesh/do_coalesced_comms=false".to_string());
    for (ranks, o) in [(1, &base), (2, &base), (4, &base), (3, &per_channel)] {
        let line = errors_line(ranks, &dir, WAVE_3D, o);
        assert_eq!(line, lines[1], "{ranks} ranks, {o:?}");
    }
}

/// History integrals are exact sums: the same bits for any block size and rank count, and
/// an odd field's integral at cycle 0 is exactly zero (float sums left +-1e-17 there,
/// different for each block size).
#[test]
fn history_integrals_do_not_depend_on_block_size_or_ranks() {
    let deck = "\
parthenon/job: {problem: advection, problem_id: adv}
parthenon/mesh:
  {nx1: 32, x1min: -0.5, x1max: 0.5, nx2: 32, x2min: -0.5, x2max: 0.5,
   ix1_bc: periodic, ox1_bc: periodic, ix2_bc: periodic, ox2_bc: periodic}
parthenon/time: {tlim: 0.1, ncycle_out: 0}
parthenon/output1: {file_type: hst, dt: 0.02}
advection: {profile: linear, linear_coeffs: [0.0, 1.0, 0.3], vx: 1.0, vy: 0.5}
";
    let mut histories = Vec::new();
    for (ranks, nx) in [(1, 32), (2, 8), (3, 4), (4, 16)] {
        let dir = scratch(&format!("hst{ranks}"));
        let o = run(
            ranks,
            &dir,
            deck,
            &ov(&[
                ("parthenon/meshblock/nx1", nx),
                ("parthenon/meshblock/nx2", nx),
            ]),
        );
        common::assert_ok(&format!("history on {ranks} ranks, blocks of {nx}"), &o);
        histories.push(std::fs::read_to_string(dir.join("out/adv.out1.hst")).unwrap());
    }
    let first: Vec<&str> = histories[0]
        .lines()
        .nth(2)
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(first[2..], ["0", "0.00000000000000e0"], "{}", histories[0]);
    assert!(histories[0].lines().count() >= 7, "{}", histories[0]);
    for h in &histories {
        assert_eq!(h, &histories[0]);
    }
}

#[test]
fn outputs_and_progress() {
    let dir = scratch("out");
    let deck = "\
parthenon/job: {problem: advection, problem_id: adv}
parthenon/mesh: {nx1: 16, nx2: 16, ix1_bc: periodic, ox1_bc: periodic, ix2_bc: periodic, ox2_bc: periodic}
parthenon/meshblock: {nx1: 8, nx2: 8}
parthenon/time: {tlim: 0.1, ncycle_out: 1}
parthenon/output0: {file_type: hdf5, dt: 0.05}
parthenon/output1: {file_type: hst, dt: 0.05}
advection: {profile: smooth_gaussian, num_vars: 2, vx: 1.0, vy: -0.5}
";
    let out = run(2, &dir, deck, &[]);
    common::assert_ok("advection outputs", &out);
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(so.contains("cycle=1 time="), "{so}");
    assert!(so.contains("summary: advection on 2 ranks"), "{so}");
    let o = dir.join("out");
    for f in [
        "adv.out0.00000.phdf",
        "adv.out0.00001.phdf",
        "adv.out0.00002.phdf",
        "adv.out0.final.phdf",
        "adv.out0.00000.phdf.xdmf",
        "adv.out1.hst",
    ] {
        assert!(o.join(f).is_file(), "{f} missing in {}", o.display());
    }
    // nlim 0: the cycle-0 output and the final one, no step.
    let dir0 = scratch("nlim0");
    let out = run(2, &dir0, deck, &["parthenon/time/nlim=0".to_string()]);
    common::assert_ok("advection nlim 0", &out);
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(so.contains(": 0 cycles"), "{so}");
    assert!(dir0.join("out/adv.out0.00000.phdf").is_file());
    assert!(!dir0.join("out/adv.out0.00001.phdf").exists());
}

#[test]
fn bad_advection_keys_exit_2_on_every_rank() {
    let dir = scratch("bad");
    for (o, says) in [
        ("advection/profile=square", "advection/profile"),
        ("advection/limiter=superbee", "advection/limiter"),
        ("advection/num_vars=0", "advection/num_vars"),
        ("advection/cfl=2", "advection/cfl"),
        ("advection/colour=blue", "advection/colour"),
        ("parthenon/time/integrator=rk4", "parthenon/time/integrator"),
        ("parthenon/mesh/nghost=1", "parthenon/mesh/nghost"),
        ("advection/vx=0", "advection/vx"),
    ] {
        let out = run(2, &dir, WAVE_1D, &[o.to_string()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{o}: {err}");
        assert!(err.contains(says), "{o}: {err}");
    }
}

#[test]
fn static_refinement_runs_and_ranks_agree() {
    let dir = scratch("smr");
    let deck = "\
parthenon/job: {problem: advection, problem_id: adv}
parthenon/mesh: {nx1: 32, nx2: 32, ix1_bc: periodic, ox1_bc: periodic, ix2_bc: periodic, ox2_bc: periodic,
  numlevel: 2}
parthenon/meshblock: {nx1: 8, nx2: 8}
parthenon/static_refinement0: {x1min: 0.25, x1max: 0.5, x2min: 0.25, x2max: 0.5, level: 1}
parthenon/time: {tlim: 0.25, ncycle_out: 0}
advection: {profile: wave, limiter: mc, compute_error: true, vx: 1.0, vy: 1.0}
";
    let one = errors_line(1, &dir, deck, &[]);
    let two = errors_line(2, &dir, deck, &[]);
    assert_eq!(one, two);
    // Smooth and small: the fine region and its prolongated ghosts do not spoil the wave.
    assert!(l1(&one) < 2e-3, "{one}");
}
