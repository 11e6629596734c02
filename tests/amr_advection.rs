//! `starhalo run inputs/advection_amr.yaml`: adaptive refinement following a Gaussian across
//! a periodic 2-D box, on 1, 2 and 4 ranks. Checked:
//!
//! - the history file's volume integral of the field equals its initial value to 1e-13
//!   relative at every line, while remeshes refine and merge blocks and the block count
//!   changes;
//! - at the end, the block holding the Gaussian's exact centre is at the finest level, every
//!   finest block lies near that centre, and the blocks at its starting point are coarser;
//! - the AMR run beats the uniform root grid on L1 error by a wide margin;
//! - the deck's `parthenon/refinement0` block replaces the advection block's own test, and
//!   its `max_level` caps the levels; Parthenon's `magnitude` and `derivative_order_2`
//!   methods follow the Gaussian too;
//! - history, final levels and final field are identical on 1, 2 and 4 ranks;
//! - bad refinement keys exit 2 on every rank.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

const EXE: &str = env!("CARGO_BIN_EXE_starhalo");
const LIMIT_S: u64 = 180;
/// What the deck says: velocity, end time, box, finest level.
const V: [f64; 2] = [1.0, 0.5];
const TLIM: f64 = 0.3;
const LO: f64 = -0.5;
const L: f64 = 1.0;
const FINEST: i64 = 2;

fn deck() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("inputs/advection_amr.yaml")
}

struct Run {
    stdout: String,
    hst: String,
    levels: Vec<i64>,
    /// Per block, `(xmin, xmax, ymin, ymax)`.
    bounds: Vec<[f64; 4]>,
    field: Vec<f64>,
    l1: f64,
    linf: f64,
}

fn run(ranks: usize, overrides: &[&str]) -> Run {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "starhalo-amr-{}-{}",
        std::process::id(),
        RUNS.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let deck = deck();
    let mut args = vec!["run", deck.to_str().unwrap(), "-d", dir.to_str().unwrap()];
    args.extend_from_slice(overrides);
    let t0 = std::time::Instant::now();
    let out = common::mpirun(ranks, LIMIT_S, Path::new(EXE), &args, &[]);
    common::assert_ok(
        &format!("advection_amr on {ranks} ranks {overrides:?}"),
        &out,
    );
    eprintln!(
        "  {ranks} ranks {overrides:?}: {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let hst = std::fs::read_to_string(dir.join("advection_amr.out1.hst")).unwrap();
    let errors = std::fs::read_to_string(dir.join("advection_amr-errors.dat")).unwrap();
    let column = |k: usize| -> f64 {
        errors
            .lines()
            .last()
            .and_then(|l| l.split_whitespace().nth(k))
            .and_then(|x| x.parse().ok())
            .unwrap()
    };
    let (l1, linf) = (column(4), column(5));
    let file = hdf5::File::open(dir.join("advection_amr.out0.final.phdf")).unwrap();
    let levels: Vec<i64> = file.dataset("Levels").unwrap().read_raw().unwrap();
    let faces = |axis: &str| -> Vec<f64> {
        file.dataset(&format!("Locations/{axis}"))
            .unwrap()
            .read_raw()
            .unwrap()
    };
    let (x, y) = (faces("x"), faces("y"));
    let nb = levels.len();
    let (nx, ny) = (x.len() / nb, y.len() / nb);
    let bounds = (0..nb)
        .map(|b| {
            [
                x[b * nx],
                x[(b + 1) * nx - 1],
                y[b * ny],
                y[(b + 1) * ny - 1],
            ]
        })
        .collect();
    let field = file.dataset("advected").unwrap().read_raw().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    Run {
        stdout,
        hst,
        levels,
        bounds,
        field,
        l1,
        linf,
    }
}

/// The volume integrals in the history file, in order.
fn totals(hst: &str) -> Vec<f64> {
    hst.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().nth(3).unwrap().parse().unwrap())
        .collect()
}

/// Distance from `p` to the nearest point of block `b`, minimum image on the periodic box.
fn distance(b: &[f64; 4], p: [f64; 2]) -> f64 {
    let axis = |lo: f64, hi: f64, x: f64| {
        (-1..=1)
            .map(|k| {
                let x = x + k as f64 * L;
                (lo - x).max(0.0).max(x - hi)
            })
            .fold(f64::INFINITY, f64::min)
    };
    axis(b[0], b[1], p[0]).hypot(axis(b[2], b[3], p[1]))
}

fn check_physics(r: &Run) {
    // (a) The total, at every history line.
    let t = totals(&r.hst);
    assert!(t.len() >= 30, "{} history lines", t.len());
    let drift = t
        .iter()
        .map(|x| ((x - t[0]) / t[0]).abs())
        .fold(0.0, f64::max);
    eprintln!("  total {:.14e}, largest relative drift {drift:e}", t[0]);
    assert!(drift <= 1e-13, "the total drifts by {drift:e}: {t:?}");
    let remeshes: Vec<(usize, usize, usize, usize)> = r
        .stdout
        .lines()
        .filter(|l| l.starts_with("remesh:"))
        .map(|l| {
            // "remesh: cycle=C blocks A -> B refined=R merged=M max_level=L"
            let words: Vec<&str> = l.split_whitespace().collect();
            let num = |key: &str| -> usize {
                let w = words.iter().find_map(|w| w.strip_prefix(key));
                w.and_then(|x| x.parse().ok()).unwrap()
            };
            let a = words[3].parse().unwrap();
            let b = words[5].parse().unwrap();
            (a, b, num("refined="), num("merged="))
        })
        .collect();
    assert!(remeshes.len() >= 3, "{}", r.stdout);
    assert!(remeshes.iter().any(|m| m.0 != m.1), "{}", r.stdout);
    assert!(
        remeshes.iter().any(|m| m.2 > 0),
        "no refinement: {}",
        r.stdout
    );
    assert!(remeshes.iter().any(|m| m.3 > 0), "no merge: {}", r.stdout);
    let summary = r.stdout.lines().find(|l| l.starts_with("amr:")).unwrap();
    eprintln!("  {summary}");

    // (b) The refined region follows the feature.
    let wrap = |x: f64| LO + (x - LO).rem_euclid(L);
    let centre = [wrap(V[0] * TLIM), wrap(V[1] * TLIM)];
    let start = [0.0, 0.0];
    let holds =
        |b: &[f64; 4], p: [f64; 2]| b[0] <= p[0] && p[0] <= b[1] && b[2] <= p[1] && p[1] <= b[3];
    let at_centre: Vec<usize> = (0..r.levels.len())
        .filter(|&b| holds(&r.bounds[b], centre))
        .collect();
    assert!(!at_centre.is_empty());
    for &b in &at_centre {
        assert_eq!(r.levels[b], FINEST, "block {b} at the centre {centre:?}");
    }
    let at_start: Vec<usize> = (0..r.levels.len())
        .filter(|&b| holds(&r.bounds[b], start))
        .collect();
    assert!(!at_start.is_empty());
    for &b in &at_start {
        assert!(
            r.levels[b] < FINEST,
            "block {b} at the start point is still finest"
        );
    }
    // Every finest block is within a few widths of the Gaussian (width 0.05) of its centre.
    for (b, bounds) in r.bounds.iter().enumerate() {
        if r.levels[b] == FINEST {
            let d = distance(bounds, centre);
            assert!(
                d < 0.2,
                "finest block {b} {bounds:?} is {d} from the centre"
            );
        }
    }
}

/// Bad refinement keys exit 2 on every rank of a 2-rank job, naming the key.
fn check_bad_keys() {
    let deck = deck();
    for (o, says) in [
        (
            "advection/derefine_tol=0.5",
            "advection/derefine_tol at the command line: 0.5 must be below refine_tol, 0.3 (its default)",
        ),
        (
            "advection/refine_tol=-1",
            "advection/refine_tol at the command line: -1 must be above derefine_tol, 0.03 (its default)",
        ),
        ("advection/refine_interval=0", "refine_interval"),
        ("parthenon/mesh/numlevel=1", "numlevel"),
        ("parthenon/refinement0/field=foo", "no field 'foo'"),
        (
            "parthenon/refinement0/method=loehner",
            "unknown method 'loehner'",
        ),
        (
            "parthenon/refinement0/comparator=less_than",
            "applies to method magnitude, not derivative_order_1",
        ),
    ] {
        let dir = std::env::temp_dir().join(format!("starhalo-amr-bad-{}", std::process::id()));
        let args = [
            "run",
            deck.to_str().unwrap(),
            "-d",
            dir.to_str().unwrap(),
            o,
        ];
        let out = common::mpirun(2, 60, Path::new(EXE), &args, &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{o}: {err}");
        assert!(err.contains(says), "{o}: {err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

fn main() {
    eprintln!("amr_advection: inputs/advection_amr.yaml on 1, 2 and 4 ranks");
    check_bad_keys();
    let one = run(1, &[]);
    check_physics(&one);
    // The uniform root grid, for scale.
    let coarse = run(1, &["parthenon/mesh/refinement=none"]);
    // And the uniform grid at the finest level, which the AMR run should nearly match where
    // it refines (the peak): ghosts across levels of the wrong order would cost accuracy.
    let finest = run(
        1,
        &[
            "parthenon/mesh/refinement=none",
            "parthenon/mesh/nx1=128",
            "parthenon/mesh/nx2=128",
        ],
    );
    eprintln!(
        "  L1 error: AMR {:e}, root grid {:e}, finest grid {:e}",
        one.l1, coarse.l1, finest.l1
    );
    assert!(one.l1 * 4.0 < coarse.l1);
    assert!(one.l1 < 1.3 * finest.l1, "AMR L1 {:e}", one.l1);
    assert!(
        (one.linf - finest.linf).abs() < 0.01 * finest.linf,
        "AMR Linf {:e}, finest grid {:e}",
        one.linf,
        finest.linf
    );
    // The deck's refinement block replaces the advection block's own test, whose tolerances
    // then change nothing; with the block's max_level at 1, nothing goes finer.
    let ignored = run(1, &["advection/refine_tol=5", "advection/derefine_tol=4"]);
    assert_eq!(ignored.hst, one.hst);
    let capped = run(1, &["parthenon/refinement0/max_level=1"]);
    assert_eq!(capped.levels.iter().max(), Some(&1));
    // Parthenon's other methods follow the Gaussian too: its peak above 1.5 (magnitude), its
    // curvature (derivative_order_2).
    for method in [
        ["magnitude", "refine_tol=1.5", "derefine_tol=1.1"],
        [
            "derivative_order_2",
            "refine_tol=0.005",
            "derefine_tol=0.001",
        ],
    ] {
        let args: Vec<String> = ["field=advected", &format!("method={}", method[0])]
            .into_iter()
            .chain(method[1..].iter().copied())
            .map(|a| format!("parthenon/refinement0/{a}"))
            .collect();
        let r = run(1, &args.iter().map(String::as_str).collect::<Vec<_>>());
        check_physics(&r);
        assert!(r.l1 * 4.0 < coarse.l1, "{method:?}: L1 {:e}", r.l1);
        assert!(r.stdout.contains("max_level=2"), "{method:?}: {}", r.stdout);
    }
    for n in [2, 4] {
        let r = run(n, &[]);
        check_physics(&r);
        assert_eq!(r.hst, one.hst, "history on {n} ranks");
        assert_eq!(r.levels, one.levels, "final levels on {n} ranks");
        assert_eq!(r.field.len(), one.field.len());
        assert!(
            r.field
                .iter()
                .zip(&one.field)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "final field on {n} ranks"
        );
        assert_eq!(
            r.stdout
                .lines()
                .filter(|l| l.starts_with("remesh:"))
                .count(),
            one.stdout
                .lines()
                .filter(|l| l.starts_with("remesh:"))
                .count()
        );
    }
}
