//! `parthenon/exec/space: cuda` for the advection problem. Where this machine has an NVIDIA
//! GPU, the run on 1 and 2 ranks (periodic; outflow along x2; reflecting and outflow faces
//! with sparse fields; a static refined region, so prolongation, restriction and the flux
//! correction run; adaptive refinement; a continuation from a host run's restart file) gives
//! the host run's error norms bit for bit; where it has none, every rank exits 1 saying why
//! and nothing is written; likewise with the ghost messages forced through host buffers or
//! into device memory (`parthenon/exec/gpu_mpi`). A GPU run's progress lines wait for the
//! device, so their rates count finished work. Decks the GPU path does not run (user
//! boundaries), and unknown spaces and GPU MPI paths, are bad input (exit 2) naming the key.

mod common;

use common::{assert_ok, starhalo_run};
use std::path::{Path, PathBuf};

const DECK: &str = "\
parthenon/job:
  problem: advection
  problem_id: advection
parthenon/mesh:
  nx1: 32
  x1min: -0.5
  x1max: 0.5
  ix1_bc: periodic
  ox1_bc: periodic
  nx2: 32
  x2min: -0.5
  x2max: 0.5
  ix2_bc: periodic
  ox2_bc: periodic
parthenon/meshblock:
  nx1: 8
  nx2: 8
parthenon/time:
  tlim: 1.0
  nlim: 6
advection:
  num_vars: 2
  vx: 1.0
  vy: -0.5
  profile: smooth_gaussian
  amp: 1.0
  width: 0.1
  limiter: mc
  compute_error: true
";

fn scratch(name: &str) -> PathBuf {
    common::scratch("gpu", name)
}

fn run(ranks: usize, deck: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![deck.to_str().unwrap(), "-d", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    starhalo_run(ranks, 120, &args)
}

#[test]
fn cuda_matches_the_host_or_exits_1_saying_why() {
    let dir = scratch("run");
    let deck = dir.join("deck.yaml");
    std::fs::write(&deck, DECK).unwrap();
    // Periodic everywhere; outflow along x2; reflecting and outflow faces with sparse fields
    // (the Gaussian leaves most blocks unallocated): faces filled by the physical kernel.
    let outflow = [
        "parthenon/mesh/ix2_bc=outflow",
        "parthenon/mesh/ox2_bc=outflow",
    ];
    let walls = [
        "parthenon/mesh/ix1_bc=reflecting",
        "parthenon/mesh/ox1_bc=outflow",
        "parthenon/mesh/ix2_bc=outflow",
        "parthenon/mesh/ox2_bc=reflecting",
        "advection/sparse=true",
        "parthenon/sparse/alloc_threshold=1.5",
    ];
    let static_region = [
        "parthenon/mesh/refinement=static",
        "parthenon/mesh/numlevel=3",
        "parthenon/static_refinement0/x1min=-0.2",
        "parthenon/static_refinement0/x1max=0.1",
        "parthenon/static_refinement0/x2min=-0.1",
        "parthenon/static_refinement0/x2max=0.2",
        "parthenon/static_refinement0/level=2",
        "parthenon/mesh/ix2_bc=reflecting",
        "parthenon/mesh/ox2_bc=reflecting",
    ];
    // Remeshes 5 times in 24 cycles on the host: the GPU run rebuilds its device fields.
    let adaptive = [
        "parthenon/mesh/refinement=adaptive",
        "parthenon/mesh/numlevel=3",
        "parthenon/mesh/derefine_count=1",
        "parthenon/refinement0/field=advected",
        "parthenon/refinement0/refine_tol=0.02",
        "parthenon/refinement0/derefine_tol=0.01",
        "parthenon/time/integrator=rk2",
        "parthenon/time/nlim=24",
    ];
    // The advection block's own test (Parthenon's example) on a hard sphere, measured over
    // whole blocks: the device's other measure kernel path.
    let adaptive_sphere = [
        &adaptive[..3],
        &[
            "advection/profile=hard_sphere",
            "advection/radius=0.2",
            "parthenon/time/integrator=rk2",
            "parthenon/time/nlim=24",
        ],
    ]
    .concat();
    let cases = [
        ("periodic", &[][..]),
        ("outflow", &outflow[..]),
        ("walls_sparse", &walls[..]),
        ("static_region", &static_region[..]),
        ("adaptive", &adaptive[..]),
        ("adaptive_sphere", &adaptive_sphere[..]),
    ];
    for (case, bcs) in cases {
        let host_out = dir.join(format!("host_{case}"));
        let host = run(1, &deck, &host_out, bcs);
        assert_ok("host run", &host);
        let want = std::fs::read_to_string(host_out.join("advection-errors.dat")).unwrap();
        let remeshes = remesh_lines(&host);
        let adapts = case.starts_with("adaptive");
        assert_eq!(remeshes > 0, adapts, "{case}: host remeshes");
        for ranks in [1, 2] {
            let out = dir.join(format!("cuda_{case}_{ranks}"));
            let mut extra = vec!["parthenon/exec/space=cuda"];
            extra.extend_from_slice(bcs);
            let r = run(ranks, &deck, &out, &extra);
            check_cuda_run(ranks, &r, &out, &want);
            if common::has_gpu() {
                assert_eq!(remesh_lines(&r), remeshes, "{case}: GPU remeshes");
            }
        }
    }
    // A host run writing restart files every 3 cycles; the cuda run continues from cycle 3.
    let rst = ["parthenon/output1/file_type=rst", "parthenon/output1/dn=3"];
    let host_out = dir.join("host_rst");
    assert_ok("host run with restarts", &run(1, &deck, &host_out, &rst));
    let want = std::fs::read_to_string(host_out.join("advection-errors.dat")).unwrap();
    let file = host_out.join("advection.out1.00001.rhdf");
    assert!(file.exists(), "no restart file at cycle 3");
    for ranks in [1, 2] {
        let out = dir.join(format!("cuda_resumed_{ranks}"));
        let mut extra = vec!["-r", file.to_str().unwrap(), "parthenon/exec/space=cuda"];
        extra.extend_from_slice(&rst);
        check_cuda_run(ranks, &run(ranks, &deck, &out, &extra), &out, &want);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The ghost messages staged through the host, and forced GPU-aware (in device memory): with
/// a GPU, both give the host's error norms, except that the GPU-aware path of two ranks on an
/// MPI without CUDA support exits 1 on every rank saying so (one rank hands MPI no message,
/// so it runs there too); without one, all exit 1 for want of a GPU.
#[test]
fn staged_and_gpu_aware_messages_match_the_host() {
    let dir = scratch("gpu_mpi");
    let deck = dir.join("deck.yaml");
    std::fs::write(&deck, DECK).unwrap();
    // Sparse fields with null messages, so coalesced messages are compacted.
    let sparse = [
        "advection/sparse=true",
        "parthenon/sparse/alloc_threshold=1.5",
    ];
    let host_out = dir.join("host");
    assert_ok("host run", &run(1, &deck, &host_out, &sparse));
    let want = std::fs::read_to_string(host_out.join("advection-errors.dat")).unwrap();
    for (ranks, path) in [(2, "staged"), (2, "aware"), (1, "aware")] {
        let out = dir.join(format!("{path}{ranks}"));
        let key = format!("parthenon/exec/gpu_mpi={path}");
        let mut extra = vec!["parthenon/exec/space=cuda", &key];
        extra.extend_from_slice(&sparse);
        let r = run(ranks, &deck, &out, &extra);
        if path == "aware" && ranks > 1 && common::has_gpu() && r.status.code() == Some(1) {
            common::assert_no_gpu_exit(&r, "GPU-aware MPI was asked for");
            continue;
        }
        check_cuda_run(ranks, &r, &out, &want);
        // A dry run opens the device and resolves the MPI path as the run does.
        let mut dry = extra.clone();
        dry.push("-n");
        let r = run(ranks, &deck, &out, &dry);
        if common::has_gpu() && (path == "staged" || ranks == 1) {
            assert_ok("cuda dry run", &r);
        } else if common::has_gpu() && r.status.code() == Some(1) {
            common::assert_no_gpu_exit(&r, "GPU-aware MPI was asked for");
        } else if !common::has_gpu() {
            common::assert_no_gpu_exit(&r, "parthenon/exec/space is cuda, but no GPU can be used");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The `remesh:` lines rank 0 printed.
fn remesh_lines(r: &std::process::Output) -> usize {
    String::from_utf8_lossy(&r.stdout)
        .lines()
        .filter(|l| l.starts_with("remesh:"))
        .count()
}

/// A cuda run on `ranks` ranks: the host's error norms `want` with a GPU, else exit 1 on
/// every rank, rank 0 saying why, nothing written.
fn check_cuda_run(ranks: usize, r: &std::process::Output, out: &Path, want: &str) {
    if common::has_gpu() {
        assert_ok("cuda run", r);
        let got = std::fs::read_to_string(out.join("advection-errors.dat")).unwrap();
        assert_eq!(
            got, want,
            "{ranks} ranks: GPU error norms differ from the host's"
        );
    } else {
        common::assert_no_gpu_exit(r, "parthenon/exec/space is cuda, but no GPU can be used");
        let written = std::fs::read_dir(out).map_or(0, |d| d.count());
        assert_eq!(written, 0, "{ranks} ranks wrote output before failing");
    }
}

#[test]
fn unknown_spaces_and_decks_the_gpu_does_not_run_are_bad_input() {
    let dir = scratch("bad");
    let deck = dir.join("deck.yaml");
    std::fs::write(&deck, DECK).unwrap();
    let out = dir.join("out");
    for (extra, key, says) in [
        (
            vec!["parthenon/exec/space=gpu"],
            "parthenon/exec/space",
            "unknown memory space `gpu`",
        ),
        (
            vec!["parthenon/mesh/ix1_bc=user", "parthenon/mesh/ox1_bc=user"],
            "parthenon/mesh/ix1_bc",
            "advection defines no user boundary",
        ),
        (
            vec!["parthenon/exec/space=cuda", "parthenon/exec/gpu_mpi=eager"],
            "parthenon/exec/gpu_mpi",
            "unknown GPU MPI path `eager`",
        ),
        // Bad input is reported as such before the device is looked for.
        (
            vec!["parthenon/exec/space=cuda", "advection/bogus=1"],
            "advection/bogus",
            "unknown key",
        ),
        (
            vec!["parthenon/exec/space=cuda", "parthenon/time/bogus=1", "-n"],
            "parthenon/time/bogus",
            "unknown key",
        ),
    ] {
        let r = run(2, &deck, &out, &extra);
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(key) && err.contains(says), "{err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Kernels run ahead of the host, so a progress line (here, the last cycle's) must wait for
/// the device before it reads the clock: its wall time then covers nearly the whole run.
/// Without that, under the emulated driver (whose queued work waits for a synchronisation)
/// the line came after 0.02 s of a 0.19 s run, at a rate 600 times the true one.
#[test]
fn progress_lines_count_finished_device_work() {
    if !common::has_gpu() {
        return; // exit 1 without a GPU: `cuda_matches_the_host_or_exits_1_saying_why`
    }
    let dir = scratch("progress");
    let deck = dir.join("deck.yaml");
    std::fs::write(&deck, DECK).unwrap();
    let out = dir.join("out");
    // A 48^3 box of 16^3 blocks: enough device work per cycle to tell the two apart.
    let overrides = [
        "parthenon/mesh/nx1=48",
        "parthenon/mesh/nx2=48",
        "parthenon/mesh/nx3=48",
        "parthenon/mesh/x3min=-0.5",
        "parthenon/mesh/x3max=0.5",
        "parthenon/mesh/ix3_bc=periodic",
        "parthenon/mesh/ox3_bc=periodic",
        "parthenon/meshblock/nx1=16",
        "parthenon/meshblock/nx2=16",
        "parthenon/meshblock/nx3=16",
        "parthenon/exec/space=cuda",
        "parthenon/time/nlim=10",
        "parthenon/time/ncycle_out=10",
    ];
    let r = run(1, &deck, &out, &overrides);
    assert_ok("cuda run", &r);
    let stdout = String::from_utf8_lossy(&r.stdout);
    let seconds = |line: &str, key: &str| -> f64 {
        let at = line
            .find(key)
            .unwrap_or_else(|| panic!("no `{key}` in {line}"))
            + key.len();
        let num: String = line[at..]
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        num.parse().unwrap_or_else(|_| panic!("`{key}` in {line}"))
    };
    let line = stdout.lines().find(|l| l.starts_with("cycle=10 ")).unwrap();
    let summary = stdout.lines().find(|l| l.starts_with("summary:")).unwrap();
    let (at_line, whole) = (seconds(line, "wall="), seconds(summary, "wall "));
    assert!(
        at_line >= 0.5 * whole,
        "the last cycle's line came at {at_line} s of a {whole} s run:\n{stdout}"
    );
}
