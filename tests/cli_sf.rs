//! The `starhalo sf`, `bench sf-pingpong` and `bench sf-strategies` command-line contracts, on
//! real MPI jobs.

mod common;

use serde_json::Value;
use std::path::{Path, PathBuf};

const EXE: &str = env!("CARGO_BIN_EXE_starhalo");

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("starhalo-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Three ranks: rank 0 has 2 roots and leaves 0, 2 (leaf 1 isolated); rank 1 has 1 root and
/// leaves 0, 1, 3 (one on its own root); rank 2 has 3 roots and no leaves.
const GRAPH: &str = r#"{"ranks":[
  {"nroots":2,"leaves":[[0,1,0],[2,0,1]]},
  {"nroots":1,"leaves":[[0,0,0],[1,2,2],[3,1,0]]},
  {"nroots":3,"leaves":[]}]}"#;

fn sf_run(
    dir: &Path,
    ranks: usize,
    graph: &str,
    extra: &[&str],
) -> (std::process::Output, PathBuf) {
    let g = dir.join("g.json");
    std::fs::write(&g, graph).unwrap();
    let out = dir.join("o.json");
    let mut args = vec![
        "sf",
        "run",
        "--graph",
        g.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    (common::mpirun(ranks, 120, Path::new(EXE), &args, &[]), out)
}

fn field(o: &Value, rank: usize, key: &str) -> Vec<f64> {
    o["ranks"][rank][key]
        .as_array()
        .unwrap_or_else(|| panic!("{key} missing"))
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect()
}

fn run_ok(name: &str, op: &str, extra: &[&str]) -> Value {
    let dir = scratch(name);
    let mut args = vec!["--op", op];
    args.extend_from_slice(extra);
    let (out, path) = sf_run(&dir, 3, GRAPH, &args);
    common::assert_ok(&format!("sf run {op}"), &out);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn bcast_sum_with_default_data() {
    let o = run_ok("bcast", "bcast:sum", &[]);
    assert_eq!(
        field(&o, 0, "leafdata"),
        [-100.0 + 200.0, -101.0, -102.0 + 101.0]
    );
    assert_eq!(
        field(&o, 1, "leafdata"),
        [-200.0 + 100.0, -201.0 + 302.0, -202.0, -203.0 + 200.0]
    );
    assert_eq!(field(&o, 2, "leafdata"), Vec::<f64>::new());
    assert_eq!(
        field(&o, 2, "rootdata"),
        [300.0, 301.0, 302.0],
        "roots untouched by bcast"
    );
    assert!(o["ranks"][0].get("leafupdate").is_none());
}

#[test]
fn reduce_sum_and_replace_with_integer_units() {
    let o = run_ok("reduce", "reduce:sum", &["--unit", "i32"]);
    assert_eq!(field(&o, 0, "rootdata"), [100.0 - 200.0, 101.0 - 102.0]);
    assert_eq!(field(&o, 1, "rootdata"), [200.0 - 100.0 - 203.0]);
    assert_eq!(field(&o, 2, "rootdata"), [300.0, 301.0, 302.0 - 201.0]);
    // Replace: the last in the documented order (own rank first, then ascending) wins.
    let o = run_ok("replace", "reduce:replace", &["--unit", "i64"]);
    assert_eq!(field(&o, 1, "rootdata"), [-100.0]);
}

#[test]
fn fetch_and_op_fetches_in_order() {
    let o = run_ok("fetch", "fetch-and-op:sum", &["--unit", "f32"]);
    // Root (1,0) serves rank 1's leaf 3 first (own rank), then rank 0's leaf 0.
    assert_eq!(field(&o, 1, "leafupdate"), [100.0, 302.0, 0.0, 200.0]);
    assert_eq!(field(&o, 0, "leafupdate"), [200.0 - 203.0, 0.0, 101.0]);
    assert_eq!(field(&o, 1, "rootdata"), [200.0 - 203.0 - 100.0]);
}

/// `--sf-type neighbor` and `rma` move the same data as the default: every kind of
/// operation, the whole result file alike (on three ranks, one of them with no leaves).
#[test]
fn every_type_matches_basic() {
    for op in ["bcast:sum", "reduce:max", "fetch-and-op:sum"] {
        let name = op.replace(':', "-");
        let basic = run_ok(&format!("basic-{name}"), op, &["--sf-type", "basic"]);
        for t in ["neighbor", "rma"] {
            let other = run_ok(&format!("{t}-{name}"), op, &["--sf-type", t]);
            assert_eq!(basic, other, "{op} under {t}");
        }
    }
    for t in ["neighbor", "rma"] {
        let o = run_ok(&format!("{t}-bcast"), "bcast:replace", &["--sf-type", t]);
        assert_eq!(field(&o, 0, "leafdata"), [200.0, -101.0, 101.0], "{t}");
        assert_eq!(
            field(&o, 1, "leafdata"),
            [100.0, 302.0, -202.0, 200.0],
            "{t}"
        );
    }
}

#[test]
fn data_files_replace_the_defaults() {
    let dir = scratch("data");
    let root = dir.join("r.json");
    std::fs::write(&root, r#"{"ranks":[[1,2],[3],[4,5,6]]}"#).unwrap();
    let bcast_root = |unit: &str| {
        let r = root.to_str().unwrap();
        let args = ["--op", "bcast:replace", "--unit", unit, "--root-data", r];
        sf_run(&dir, 3, GRAPH, &args)
    };
    let (out, path) = bcast_root("u8");
    common::assert_ok("sf run with --root-data", &out);
    let o: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    // Default leaves are negative; as u8 they wrap like a C cast (-101 -> 155).
    assert_eq!(field(&o, 0, "leafdata"), [3.0, 155.0, 2.0]);
    assert_eq!(field(&o, 1, "leafdata"), [1.0, 6.0, 54.0, 3.0]);

    // Integers are read as written: 2^53 + 1 and i64::MIN, which a double would round,
    // arrive exactly.
    std::fs::write(
        &root,
        r#"{"ranks":[[9007199254740993,2],[-9223372036854775808],[4,5,6]]}"#,
    )
    .unwrap();
    let (out, path) = bcast_root("i64");
    common::assert_ok("sf run --unit i64 with large integers", &out);
    let o: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let leaf = |k: usize| o["ranks"][1]["leafdata"][k].as_i64();
    assert_eq!(leaf(0), Some(9_007_199_254_740_993));
    assert_eq!(leaf(3), Some(i64::MIN));

    // Values given in a file must fit the unit: 300 is no u8, 2.5 no integer, 1e39 no f32.
    for (unit, bad, shown) in [
        ("u8", "300", "300"),
        ("i64", "9223372036854775808", "9223372036854775808"),
        ("i64", "-9223372036854775809", "-9.223372036854776e+18"),
        ("i64", "9007199254740993.0", "9007199254740992.0"),
        ("i32", "2.5", "2.5"),
        ("f32", "1e39", "1e+39"),
    ] {
        std::fs::write(&root, format!(r#"{{"ranks":[[1,2],[3],[4,{bad},6]]}}"#)).unwrap();
        let (out, _) = bcast_root(unit);
        common::assert_bad_input(
            &format!("{bad} as {unit}"),
            &out,
            &format!("root value {shown} (rank 2, index 1) does not fit {unit}"),
        );
    }
}

#[test]
fn option_errors_are_reported_once() {
    let dir = scratch("options");
    for (args, needle) in [
        (
            &["--op", "bcast:sum", "--bogus"][..],
            "unexpected argument '--bogus'",
        ),
        (&["--op", "nope"][..], "--op `nope`"),
        (&["--op", "bcast:sum", "--unit", "f16"][..], "--unit `f16`"),
        (
            &["--op", "bcast:sum", "--sf-type", "carrier-pigeon"][..],
            "--sf-type",
        ),
    ] {
        let (out, _) = sf_run(&dir, 3, GRAPH, args);
        common::assert_bad_input(&format!("{args:?}"), &out, needle);
    }
}

/// `--out` naming a directory, or a file in a directory that does not exist or takes no
/// files, is refused before the operation runs.
#[test]
fn an_unwritable_out_is_bad_input() {
    let dir = scratch("out");
    let g = dir.join("g.json");
    std::fs::write(&g, GRAPH).unwrap();
    let missing = dir.join("missing").join("o.json");
    for (out, needle) in [
        (dir.clone(), "is a directory; name the result file"),
        (missing, "missing does not exist"),
        // A directory that takes no files (root may write anywhere else).
        (PathBuf::from("/proc/o.json"), "cannot write in /proc"),
    ] {
        let args = [
            "sf",
            "run",
            "--graph",
            g.to_str().unwrap(),
            "--op",
            "bcast:sum",
            "--out",
            out.to_str().unwrap(),
        ];
        let o = common::mpirun(3, 120, Path::new(EXE), &args, &[]);
        common::assert_bad_input(&format!("--out {}", out.display()), &o, needle);
    }
}

#[test]
fn wrong_rank_count_is_bad_input() {
    let (out, _) = sf_run(&scratch("ranks"), 2, GRAPH, &["--op", "bcast:sum"]);
    common::assert_bad_input("2 ranks for a 3-rank graph", &out, "mpiexec -n 3");
}

#[test]
fn invalid_graph_stops_every_rank() {
    // Rank 0 reads root offset 5 of rank 2, which has 3 roots: only rank 2 can see it, and
    // names the line of rank 0's leaf (the same root read by rank 1 comes later).
    let g = "{\"ranks\":[{\"nroots\":1,\"leaves\":[[1,2,0],\n[0,2,5]]},\n\
             {\"nroots\":1,\"leaves\":[[0,2,5]]},{\"nroots\":3}]}";
    let (out, _) = sf_run(&scratch("invalid"), 3, g, &["--op", "bcast:sum"]);
    common::assert_bad_input(
        "offset beyond nroots",
        &out,
        "g.json:2: rank 0 has a leaf on root (2, 5), but rank 2 has only 3 roots",
    );
    let g = "{\"ranks\":[{\"nroots\":1,\"leaves\":[[0,0,0],\n[1,0,0],\n[2,7,0]]},{\"nroots\":1}]}";
    let (out, _) = sf_run(
        &scratch("invalid2"),
        2,
        g,
        &["--op", "bcast:sum", "--discovery", "nbx"],
    );
    common::assert_bad_input(
        "root rank out of range",
        &out,
        "g.json:3: leaf 2 names root rank 7",
    );
    // The second time a leaf index is given is the line named.
    let g = "{\"ranks\":[{\"nroots\":1,\"leaves\":[[4,0,0],\n[3,0,0],\n[4,0,0]]}]}";
    let (out, _) = sf_run(&scratch("invalid5"), 1, g, &["--op", "bcast:sum"]);
    common::assert_bad_input("a leaf given twice", &out, "g.json:3: leaf index 4");
    let (out, _) = sf_run(
        &scratch("invalid3"),
        1,
        "{\"ranks\":[{\"nroots\":1,\n\"leaves\":[[0,0]]}]}",
        &["--op", "bcast:sum"],
    );
    common::assert_bad_input("malformed graph", &out, "line 2");
    for (what, g, needle) in [
        (
            "an offset beyond 64 bits",
            r#"{"ranks":[{"nroots":1,"leaves":[[0,0,99999999999999999999]]}]}"#,
            "a number beyond the 64-bit integer range at line 1 column 57",
        ),
        (
            "a whole number written as a float",
            r#"{"ranks":[{"nroots":3.0}]}"#,
            "floating point `3.0`, expected a non-negative integer",
        ),
        (
            "a leaf of four numbers",
            r#"{"ranks":[{"nroots":1,"leaves":[[0,0,0,1]]}]}"#,
            "a leaf is [leaf index, root rank, root offset], found 4 numbers",
        ),
        ("no ranks", r#"{"ranks":[]}"#, "the graph lists no ranks"),
        (
            "a fractional index",
            r#"{"ranks":[{"nroots":1,"leaves":[[0.5,0,0]]}]}"#,
            "floating point `0.5`, expected a signed 64-bit integer",
        ),
        (
            "negative roots",
            r#"{"ranks":[{"nroots":-1}]}"#,
            "integer `-1`, expected a non-negative integer",
        ),
    ] {
        let (out, _) = sf_run(&scratch("invalid4"), 1, g, &["--op", "bcast:sum"]);
        common::assert_bad_input(what, &out, needle);
    }
}

/// What one rank alone finds wrong stops every rank with one exit code: root data that only
/// rank 2's part of the file gets wrong (2; also a file listing a rank too many), a graph too
/// large for memory (2, before its values are made, not an allocation abort), a result file
/// rank 0 cannot write (1); an oversized ping-pong is bad input (2), not a panic.
#[test]
fn failures_on_one_rank_give_every_rank_one_code() {
    let dir = scratch("onerank");
    let data = dir.join("data.json");
    for (what, text, needle) in [
        (
            "short data",
            r#"{"ranks":[[1,2],[1],[1,2]]}"#,
            "rank 2 has 2 root values but the graph needs 3",
        ),
        (
            "data for a fourth rank",
            r#"{"ranks":[[1,2],[1],[1,2,3],[4]]}"#,
            "lists root values for 4 ranks but this job has 3",
        ),
    ] {
        std::fs::write(&data, text).unwrap();
        let args = ["--op", "bcast:sum", "--root-data", data.to_str().unwrap()];
        let (out, _) = sf_run(&dir, 3, GRAPH, &args);
        common::assert_bad_input(what, &out, needle);
    }
    let exits_1 = |what: &str, out: &std::process::Output, needle: &str| {
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{what}: want exit 1\n{err}");
        assert!(
            err.contains(needle) && !err.contains("panicked"),
            "{what}:\n{err}"
        );
    };
    // As a deck's mesh too large for the ranks' memory, a graph that cannot be held is bad
    // input.
    let huge = r#"{"ranks":[{"nroots":18446744073709551615},{"nroots":3}]}"#;
    let (out, _) = sf_run(&scratch("huge"), 2, huge, &["--op", "reduce:sum"]);
    common::assert_bad_input("huge graph", &out, "do not fit in memory");
    // Values an allocation would still grant (memory is overcommitted, or here 2 GiB of 3
    // GiB of address space) but that the run cannot hold beside their JSON text: refused
    // before any is made (this was exit 1, out of memory, after seconds of work).
    let (big, big_out) = (dir.join("big.json"), dir.join("big-out.json"));
    std::fs::write(
        &big,
        r#"{"ranks":[{"nroots":268435456,"leaves":[[0,0,1]]}]}"#,
    )
    .unwrap();
    let script = "ulimit -v 3145728 && exec \"$0\" \"$@\"";
    let args = [
        "-c",
        script,
        EXE,
        "sf",
        "run",
        "--graph",
        big.to_str().unwrap(),
        "--op",
        "bcast:replace",
        "--out",
        big_out.to_str().unwrap(),
    ];
    let out = common::mpirun(1, 120, Path::new("sh"), &args, &[]);
    common::assert_bad_input(
        "big graph",
        &out,
        "do not fit in memory: they need at least",
    );
    // A sum that overflows to inf cannot be written as JSON (it was written as null).
    let (roots, leaves) = (dir.join("roots.json"), dir.join("leaves.json"));
    let m = "1e308";
    let text = format!(r#"{{"ranks":[[{m},{m}],[{m}],[{m},{m},{m}]]}}"#);
    std::fs::write(&roots, text).unwrap();
    let text = format!(r#"{{"ranks":[[{m},{m},{m}],[{m},{m},{m},{m}],[]]}}"#);
    std::fs::write(&leaves, text).unwrap();
    let (roots, leaves) = (roots.to_str().unwrap(), leaves.to_str().unwrap());
    let args = [
        "--op",
        "reduce:sum",
        "--root-data",
        roots,
        "--leaf-data",
        leaves,
    ];
    let (out, _) = sf_run(&dir, 3, GRAPH, &args);
    exits_1("overflow", &out, "is not a finite number (an overflow?)");
    // A write that fails only when rank 0 writes, after the operation (the directory takes
    // files, checked first, but a directory holds the result's temporary name).
    let dir = scratch("unwritable");
    let g = dir.join("g.json");
    std::fs::write(&g, GRAPH).unwrap();
    let result = dir.join("o.json");
    std::fs::create_dir_all(dir.join("o.json.tmp")).unwrap();
    let sf_args = [
        "sf",
        "run",
        "--graph",
        g.to_str().unwrap(),
        "--out",
        result.to_str().unwrap(),
        "--op",
        "bcast:sum",
    ];
    let out = common::mpirun(3, 120, Path::new(EXE), &sf_args, &[]);
    exits_1("result write refused", &out, "cannot write");
    // mpiexec merges the ranks' codes: each rank's own, through a shell that prints it.
    let script = r#""$0" "$@"; echo "rank exit $?" >&2"#;
    let mut args = vec!["-c", script, EXE];
    args.extend(sf_args);
    let out = common::mpirun(3, 120, Path::new("/bin/sh"), &args, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("rank exit 1").count(), 3, "{err}");
    let args = ["bench", "sf-pingpong", "--max-bytes", "99999999999999"];
    let out = common::mpirun(2, 60, Path::new(EXE), &args, &[]);
    common::assert_bad_input("huge ping-pong", &out, "above the largest message");
    let args = ["bench", "sf-pingpong", "--iters", "0"];
    let out = common::mpirun(2, 60, Path::new(EXE), &args, &[]);
    common::assert_bad_input("no round trips", &out, "--iters");
}

#[test]
fn bad_ops_are_bad_input() {
    let dir = scratch("ops");
    let (out, _) = sf_run(&dir, 3, GRAPH, &["--op", "bcast:avg"]);
    common::assert_bad_input("unknown op", &out, "unknown operation `avg`");
    let (out, _) = sf_run(&dir, 3, GRAPH, &["--op", "reduce:band"]);
    common::assert_bad_input("bitwise op on f64", &out, "not defined for unit type f64");
    let (out, _) = sf_run(&dir, 3, GRAPH, &["--op", "fetch-and-op:max"]);
    common::assert_bad_input("fetch-and-op max", &out, "sum only");
}

#[test]
fn view_shows_each_plan_kind() {
    let dir = scratch("view");
    // Rank 0 owns 40 roots (a 10-wide grid) and reads two of its own. Rank 1 reads roots 0..4
    // (contiguous), rank 2 a 2x2 box (10,11,20,21: strided), rank 3 a scattered list.
    let g = r#"{"ranks":[
      {"nroots":40,"leaves":[[0,0,3],[1,0,4]]},
      {"nroots":0,"leaves":[[0,0,0],[1,0,1],[2,0,2],[3,0,3]]},
      {"nroots":0,"leaves":[[0,0,10],[1,0,11],[2,0,20],[3,0,21]]},
      {"nroots":0,"leaves":[[0,0,9],[1,0,2],[2,0,30]]}]}"#;
    let path = dir.join("g.json");
    std::fs::write(&path, g).unwrap();
    let out = common::mpirun(
        4,
        60,
        Path::new(EXE),
        &["sf", "view", "--graph", path.to_str().unwrap()],
        &[],
    );
    common::assert_ok("sf view", &out);
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "rank 0: 40 roots, 2 leaves",
        "rank 0 (self): leaves contiguous [0, 2)",
        "rank 0 (self): roots contiguous [3, 5)",
        "rank 1: roots contiguous [0, 4)",
        "rank 2: roots strided start 10 box 2x2x1 strides 10,20",
        "rank 3: roots list of 3",
        "rank 0: leaves contiguous [0, 3)",
    ] {
        assert!(text.contains(want), "missing `{want}` in:\n{text}");
    }
    let order: Vec<usize> = ["rank 0:", "rank 1:", "rank 2:", "rank 3:"]
        .iter()
        .map(|s| text.find(s).unwrap())
        .collect();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "ranks print in order:\n{text}"
    );
}

#[test]
fn pingpong_json_reports_each_size() {
    let out = common::mpirun(
        2,
        120,
        Path::new(EXE),
        &[
            "bench",
            "sf-pingpong",
            "--max-bytes",
            "64",
            "--iters",
            "200",
            "--json",
        ],
        &[],
    );
    common::assert_ok("bench sf-pingpong", &out);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["impl"], "basic");
    let rows = v["rows"].as_array().unwrap();
    let sizes: Vec<u64> = rows.iter().map(|r| r["bytes"].as_u64().unwrap()).collect();
    assert_eq!(sizes, [8, 16, 32, 64]);
    for r in rows {
        assert!(
            r["mpi_us"].as_f64().unwrap() > 0.0 && r["sf_us"].as_f64().unwrap() > 0.0,
            "{r}"
        );
        // The paired overhead is a per-round difference, so it can be slightly negative.
        assert!(r["overhead_us"].as_f64().is_some_and(f64::is_finite), "{r}");
    }
    // One round of 50 round trips: each of rma's flushes is a round trip that needs the
    // peer scheduled, so on an oversubscribed machine (tests run side by side) the default
    // 7692 trips per timing took from 10 s to over 120 s. The report's shape is what this
    // checks.
    for t in ["neighbor", "rma"] {
        let args = [
            "bench",
            "sf-pingpong",
            "--max-bytes",
            "16",
            "--rounds",
            "1",
            "--iters",
            "50",
            "--sf-type",
            t,
            "--json",
        ];
        let out = common::mpirun(2, 120, Path::new(EXE), &args, &[]);
        common::assert_ok(&format!("bench sf-pingpong --sf-type {t}"), &out);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["impl"], t);
        assert_eq!(v["rows"].as_array().map(Vec::len), Some(2));
    }
    let out = common::mpirun(3, 60, Path::new(EXE), &["bench", "sf-pingpong"], &[]);
    common::assert_bad_input("ping-pong on 3 ranks", &out, "exactly 2 ranks");
}

/// The strategies benchmark: one row per strategy (bcast and reduce) against standard, the
/// model's parameters and a choice among the rows; bad options are bad input on every rank.
#[test]
fn strategies_json_reports_every_route() {
    let args = [
        "bench",
        "sf-strategies",
        "--ranks-per-node",
        "1",
        "--peers",
        "1",
        "--roots",
        "64",
        "--per-peer",
        "16",
        "--rounds",
        "3",
        "--json",
    ];
    let out = common::mpirun(2, 120, Path::new(EXE), &args, &[]);
    common::assert_ok("bench sf-strategies", &out);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["ranks"].as_u64(), v["nodes"].as_u64()),
        (Some(2), Some(2))
    );
    let rows = v["rows"].as_array().unwrap();
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["strategy"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["standard", "2-step", "3-step", "split"]);
    assert_eq!(rows[0]["vs_standard"].as_f64(), Some(1.0));
    assert_eq!(rows[0]["reduce_vs_standard"].as_f64(), Some(1.0));
    assert_eq!(rows[0]["folded_vs_standard"].as_f64(), Some(1.0));
    for r in rows {
        for key in [
            "measured_us",
            "predicted_us",
            "reduce_us",
            "reduce_predicted_us",
            "folded_us",
            "folded_predicted_us",
        ] {
            assert!(r[key].as_f64().unwrap() > 0.0, "{key}: {r}");
        }
    }
    assert!(names.contains(&v["chosen"].as_str().unwrap()), "{v}");
    assert!(names.contains(&v["reduce_chosen"].as_str().unwrap()), "{v}");
    assert!(names.contains(&v["folded_chosen"].as_str().unwrap()), "{v}");
    assert!(
        v["alpha_off_us"].as_f64().is_some_and(f64::is_finite),
        "{v}"
    );
    for (bad, says) in [
        (&["--peers", "2"][..], "--peers 2"),
        (&["--ranks-per-node", "0"][..], "--ranks-per-node"),
        (&["--roots", "0"][..], "--roots"),
        // Beyond what any rank could hold: refused before anything is allocated.
        (&["--roots", "18446744073709551615"][..], "out of range"),
        (
            &["--per-peer", "100000000000"][..],
            "--per-peer 100000000000",
        ),
        (&["--per-peer", "40000000"][..], "times --peers 3"),
        (&["--sf-type", "bogus"][..], "bogus"),
    ] {
        let args: Vec<&str> = ["bench", "sf-strategies"]
            .iter()
            .chain(bad)
            .copied()
            .collect();
        let out = common::mpirun(2, 60, Path::new(EXE), &args, &[]);
        common::assert_bad_input(&format!("sf-strategies {bad:?}"), &out, says);
    }
}

/// `bench shmem` on 2 and 3 ranks: a row per size, every atomic through both paths, and heat
/// solves that agree bit for bit (the run fails otherwise); bad options exit 2.
#[test]
fn shmem_bench_json_reports_every_row() {
    let args = [
        "bench",
        "shmem",
        "--max-bytes",
        "4096",
        "--rounds",
        "2",
        "--heat-n",
        "16",
        "--heat-sweeps",
        "7",
        "--json",
    ];
    for ranks in [2, 3] {
        let out = common::mpirun(ranks, 120, Path::new(EXE), &args, &[]);
        common::assert_ok("bench shmem", &out);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["ranks"].as_u64(), Some(ranks as u64));
        let sizes: Vec<u64> = v["pingpong"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["bytes"].as_u64().unwrap())
            .collect();
        assert_eq!(sizes, [8, 64, 512, 4096]);
        for r in v["pingpong"].as_array().unwrap() {
            for k in [
                "two_sided_us",
                "load_store_us",
                "rma_us",
                "rma_vs_two_sided",
            ] {
                assert!(r[k].as_f64().is_some_and(|t| t > 0.0), "{k}: {r}");
            }
        }
        let atomics: Vec<(&str, &str)> = v["atomics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["op"].as_str().unwrap(), r["path"].as_str().unwrap()))
            .collect();
        assert_eq!(
            atomics,
            [
                ("fetch-add", "load-store"),
                ("fetch-add", "rma"),
                ("compare-swap", "load-store"),
                ("compare-swap", "rma")
            ]
        );
        assert_eq!(v["heat"]["identical"].as_bool(), Some(true), "{v}");
        assert!(
            v["barrier"]["ratio"].as_f64().is_some_and(|r| r > 0.0),
            "{v}"
        );
    }
    let out = common::mpirun(1, 60, Path::new(EXE), &args, &[]);
    common::assert_bad_input("bench shmem on 1 rank", &out, "at least 2 ranks");
    let out = common::mpirun(
        3,
        60,
        Path::new(EXE),
        &["bench", "shmem", "--heat-n", "2"],
        &[],
    );
    common::assert_bad_input("bench shmem --heat-n 2", &out, "--heat-n 2");
    let out = common::mpirun(
        2,
        60,
        Path::new(EXE),
        &["bench", "shmem", "--heat-n", "1000000"],
        &[],
    );
    common::assert_bad_input("bench shmem --heat-n 1000000", &out, "above 16384");
    let out = common::mpirun(
        2,
        60,
        Path::new(EXE),
        &["bench", "shmem", "--max-bytes", "4"],
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "--max-bytes 4: {out:?}");
}

/// `--device`: with a GPU, every row also has the forest on device arrays (D-D), checked for
/// the right values before it is timed; without one, both ranks exit 1 and rank 0 alone says
/// why. Sizes that are not whole doubles are bad input.
#[test]
fn pingpong_device_rows_or_exit_1() {
    let args = [
        "bench",
        "sf-pingpong",
        "--max-bytes",
        "64",
        "--rounds",
        "3",
        "--iters",
        "20",
        "--json",
        "--device",
    ];
    let out = common::mpirun(2, 120, Path::new(EXE), &args, &[]);
    if common::has_gpu() {
        common::assert_ok("bench sf-pingpong --device", &out);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        for r in v["rows"].as_array().unwrap() {
            assert!(r["sf_dd_us"].as_f64().is_some_and(|t| t > 0.0), "{r}");
        }
    } else {
        common::assert_no_gpu_exit(&out, "no GPU can be used");
    }
    let bad = ["bench", "sf-pingpong", "--device", "--min-bytes", "12"];
    let out = common::mpirun(2, 60, Path::new(EXE), &bad, &[]);
    common::assert_bad_input("--device with 12 bytes", &out, "multiple of 8");
}

/// `--strategy` routes bcasts, reduces and fetch-and-ops through relays with the plain
/// forest's results, on one-rank and two-rank nodes; unknown routes or empty nodes are bad
/// input on every rank.
#[test]
fn node_aware_routes_give_the_plain_results() {
    let data = r#"{"ranks":[[0.1,1e16],[-1e16],[3.0,0.2,7e-3]]}"#;
    let dir = scratch("routes");
    let roots = dir.join("roots.json");
    std::fs::write(&roots, data).unwrap();
    let roots = roots.to_str().unwrap();
    for op in [
        "bcast:sum",
        "reduce:sum",
        "reduce:replace",
        "fetch-and-op:sum",
    ] {
        let want = run_ok("routes-plain", op, &["--root-data", roots]);
        for (s, k) in [
            ("2-step", "1"),
            ("3-step", "1"),
            ("split:1", "2"),
            ("3-step", "2"),
        ] {
            let extra = ["--root-data", roots, "--strategy", s, "--ranks-per-node", k];
            let got = run_ok("routes", op, &extra);
            assert_eq!(got, want, "{op} --strategy {s} --ranks-per-node {k}");
        }
    }
    for (extra, says) in [
        (
            &["--op", "bcast:sum", "--strategy", "4-step"][..],
            "--strategy",
        ),
        (
            &["--op", "bcast:sum", "--ranks-per-node", "2"][..],
            "--ranks-per-node 2",
        ),
        (
            &[
                "--op",
                "reduce:sum",
                "--strategy",
                "2-step",
                "--ranks-per-node",
                "0",
            ][..],
            "--ranks-per-node",
        ),
    ] {
        let (out, _) = sf_run(&dir, 3, GRAPH, extra);
        common::assert_bad_input(&format!("sf run {extra:?}"), &out, says);
    }
}
