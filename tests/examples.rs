//! The programs in `examples/` (built by `cargo build --examples`, which `make test` runs
//! first: `cargo test` builds examples as tests, not as programs) run under mpiexec and give
//! the same bits on any number of ranks.

mod common;

use std::path::PathBuf;

/// The built example `name`, beside this test's own directory.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("tests run from target/<profile>/deps");
    let path = dir.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is not built: run `cargo build --examples` first",
        path.display()
    );
    path
}

/// The diffusion driver: its error against the exact solution is what a correct ghost fill
/// across ranks, the periodic wrap and the refined patch's levels gives (0.46 without it),
/// and it is the same bits on 1, 2 and 3 ranks.
#[test]
fn diffusion_example_agrees_on_any_number_of_ranks() {
    let exe = example("diffusion");
    let errors: Vec<String> = [1, 2, 3]
        .iter()
        .map(|&n| {
            let o = common::mpirun(n, 120, &exe, &["100"], &[]);
            common::assert_ok(&format!("diffusion example on {n} ranks"), &o);
            let out = String::from_utf8_lossy(&o.stdout).to_string();
            assert!(out.contains(&format!("28 blocks on {n} ranks")), "{out}");
            let error = out.split("max error ").nth(1).expect("an error line");
            error.trim().to_string()
        })
        .collect();
    assert!(errors.iter().all(|e| e == &errors[0]), "{errors:?}");
    let error: f64 = errors[0].parse().expect("a number");
    // The second-order scheme's own error (6.76e-3), within a percent.
    assert!((6.7e-3..6.8e-3).contains(&error), "{error}");
}

/// The star-forest ring: on 1 to 4 ranks every ghost holds its neighbour's cell after the
/// split bcast, and the reduce counts each cell's readers (the example checks both and
/// exits 1 on a wrong value).
#[test]
fn sf_ring_example_fills_ghosts_and_counts_readers() {
    let exe = example("sf_ring");
    for n in 1..=4 {
        let o = common::mpirun(n, 60, &exe, &[], &[]);
        common::assert_ok(&format!("sf_ring example on {n} ranks"), &o);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains(&format!("{n} ranks, {} cells: ghosts filled", 5 * n)),
            "{out}"
        );
    }
}

/// The SpMV: on 1 to 4 ranks both products match the stencil bit for bit (the example
/// checks every row and exits 1 otherwise) and their norm is the same; a grid too small for
/// a matrix is refused with exit code 2.
#[test]
fn spmv_example_matches_the_stencil_on_any_number_of_ranks() {
    let exe = example("spmv");
    for n in 1..=4 {
        let o = common::mpirun(n, 60, &exe, &["17"], &[]);
        common::assert_ok(&format!("spmv example on {n} ranks"), &o);
        let out = String::from_utf8_lossy(&o.stdout);
        // Σ over rows of (A x)² for m = 17, worked out by the stencil in exact arithmetic.
        assert!(
            out.contains(&format!(
                "on {n} ranks: A x and Aᵀ x match the stencil, |A x|² = 46365.097900390625"
            )),
            "{out}"
        );
    }
    // The same bits under the other implementations of the forest.
    for t in ["neighbor", "rma"] {
        let o = common::mpirun(3, 60, &exe, &["17", t], &[]);
        common::assert_ok(&format!("spmv example on 3 ranks, {t}"), &o);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains("|A x|² = 46365.097900390625"), "{t}: {out}");
    }
    for (args, says) in [
        (
            &["1"][..],
            "the first argument, m, must be an integer from 2 to 4096",
        ),
        (
            &["17", "pigeon"],
            "unknown star-forest type `pigeon` (expected one of: basic, neighbor, rma)",
        ),
    ] {
        let o = common::mpirun(1, 60, &exe, args, &[]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// The ping-pong: on 2 ranks a row per message size, every round's data checked by the
/// example; on 1 rank it says it needs two and exits 2.
#[test]
fn sf_pingpong_example_times_every_size() {
    let exe = example("sf_pingpong");
    let o = common::mpirun(2, 120, &exe, &["3"], &[]);
    common::assert_ok("sf_pingpong example on 2 ranks", &o);
    let out = String::from_utf8_lossy(&o.stdout);
    let bytes: Vec<&str> = out
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        bytes,
        ["8", "128", "2048", "32768", "262144", "1048576"],
        "{out}"
    );
    let o = common::mpirun(1, 60, &exe, &[], &[]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("needs at least 2 ranks"),
        "{o:?}"
    );
}
