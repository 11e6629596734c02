//! Ranks started with different inputs (an MPMD launch, node-local copies of a file that
//! differ) stop with exit code 2 and one message from rank 0, rather than setting up different
//! runs that wait on each other forever: other arguments on one rank, or the same arguments
//! reading other contents (each rank in its own working directory) from a graph file, a data
//! file, a Matrix Market file or a restart file; the message names the first that differs.

mod common;

use std::path::Path;
use std::process::{Command, Output};

const EXE: &str = env!("CARGO_BIN_EXE_starhalo");
const LIMIT_S: &str = "60";

/// One rank in each of `dirs`, running `starhalo` with that rank's arguments.
fn mpmd(ranks: &[(&Path, Vec<&str>)]) -> Output {
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "5", LIMIT_S, "mpiexec"]);
    for (i, (dir, args)) in ranks.iter().enumerate() {
        if i > 0 {
            cmd.arg(":");
        }
        cmd.args(["-n", "1", "-wdir"]).arg(dir).arg(EXE).args(args);
    }
    cmd.output().expect("cannot start timeout/mpiexec")
}

/// Directories `a` and `b` in `base`, `name` in each with its own contents.
fn two_dirs(base: &Path, name: &str, a: &[u8], b: &[u8]) -> [std::path::PathBuf; 2] {
    let dirs = [base.join("a"), base.join("b")];
    for (dir, text) in dirs.iter().zip([a, b]) {
        std::fs::create_dir_all(dir.join(Path::new(name).parent().unwrap())).unwrap();
        std::fs::write(dir.join(name), text).unwrap();
    }
    dirs
}

#[test]
fn other_arguments_on_one_rank_stop_every_rank() {
    let dir = common::scratch("disagree", "args");
    let deck = Path::new(env!("CARGO_MANIFEST_DIR")).join("inputs/advection.yaml");
    let deck = deck.to_str().unwrap();
    let out_dir = dir.join("out");
    let out_dir = out_dir.to_str().unwrap();
    let run = |nlim: &'static str| vec!["run", deck, "-d", out_dir, nlim];
    let out = mpmd(&[
        (&dir, run("parthenon/time/nlim=4")),
        (&dir, run("parthenon/time/nlim=4")),
        (&dir, run("parthenon/time/nlim=6")),
    ]);
    common::assert_bad_input(
        "nlim 6 on rank 2",
        &out,
        "rank 2 was given other arguments than rank 0",
    );
    assert!(!Path::new(out_dir).exists(), "nothing is written");
    // A bad option on one rank only is the same disagreement, not a rank left waiting.
    let out = mpmd(&[
        (&dir, run("parthenon/time/nlim=4")),
        (&dir, vec!["--bogus"]),
    ]);
    common::assert_bad_input(
        "--bogus on rank 1",
        &out,
        "rank 1 was given other arguments",
    );
}

#[test]
fn other_graph_contents_on_one_rank_stop_every_rank() {
    let base = common::scratch("disagree", "graph");
    let graph = |offset: u8| {
        format!(
            r#"{{"ranks":[{{"nroots":3,"leaves":[[0,1,{offset}]]}},{{"nroots":2,"leaves":[[0,0,1]]}}]}}"#
        )
        .into_bytes()
    };
    let [a, b] = two_dirs(&base, "g.json", &graph(0), &graph(1));
    let args = vec!["sf", "run", "--graph", "g.json", "--op", "bcast:replace"];
    let args = [args, vec!["--out", "o.json"]].concat();
    let out = mpmd(&[(&a, args.clone()), (&b, args.clone())]);
    common::assert_bad_input(
        "graph files that differ",
        &out,
        "rank 1 read other contents than rank 0 from g.json",
    );
    // The same contents: the run goes on.
    std::fs::write(b.join("g.json"), graph(0)).unwrap();
    let out = mpmd(&[(&a, args.clone()), (&b, args.clone())]);
    common::assert_ok("the same graph file", &out);
    // The same graph, other root values: the message names the data file.
    std::fs::write(a.join("r.json"), r#"{"ranks":[[1,2,3],[4,5]]}"#).unwrap();
    std::fs::write(b.join("r.json"), r#"{"ranks":[[1,2,3],[4,6]]}"#).unwrap();
    let args = [args, vec!["--root-data", "r.json"]].concat();
    let out = mpmd(&[(&a, args.clone()), (&b, args)]);
    common::assert_bad_input(
        "root data that differ",
        &out,
        "rank 1 read other contents than rank 0 from r.json",
    );
}

#[test]
fn other_matrix_or_restart_contents_on_one_rank_stop_every_rank() {
    let base = common::scratch("disagree", "files");
    let matrix = |d: &str| {
        format!("%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 {d}\n2 2 1\n")
            .into_bytes()
    };
    let [a, b] = two_dirs(&base, "m/a.mtx", &matrix("2"), &matrix("3"));
    let deck =
        "parthenon/job: {problem: spmv, problem_id: m}\nspmv: {matrix: m/a.mtx, solver: none}\n";
    for dir in [&a, &b] {
        std::fs::write(dir.join("deck.yaml"), deck).unwrap();
    }
    let args = vec!["run", "deck.yaml", "-d", "out"];
    let out = mpmd(&[(&a, args.clone()), (&b, args.clone())]);
    common::assert_bad_input(
        "matrix files that differ",
        &out,
        "rank 1 read other contents than rank 0 from m/a.mtx",
    );

    // Two restart files of one run, at cycles 1 and 2, under one name.
    let deck = Path::new(env!("CARGO_MANIFEST_DIR")).join("inputs/advection.yaml");
    let full = base.join("full");
    let out = common::starhalo_run(
        2,
        120,
        &[
            deck.to_str().unwrap(),
            "-d",
            full.to_str().unwrap(),
            "parthenon/time/nlim=2",
            "parthenon/output2/file_type=rst",
            "parthenon/output2/dn=1",
        ],
    );
    common::assert_ok("the run that writes restart files", &out);
    for (dir, n) in [(&a, 1), (&b, 2)] {
        let file = full.join(format!("advection.out2.{n:05}.rhdf"));
        std::fs::copy(file, dir.join("r.rhdf")).unwrap();
    }
    let deck = deck.to_str().unwrap();
    let args = vec!["run", deck, "-d", "out", "-r", "r.rhdf"];
    let out = mpmd(&[(&a, args.clone()), (&b, args)]);
    common::assert_bad_input(
        "restart files that differ",
        &out,
        "rank 1 read other contents than rank 0 from r.rhdf",
    );
}
