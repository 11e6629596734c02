//! `starhalo bench exchange` on real MPI jobs: the JSON report, and its traffic figures
//! against what the mesh says they must be (computed here from the same mesh), for the ghost
//! exchange and, on a mesh of two levels, the flux correction.

mod common;

use serde_json::Value;
use starhalo_boundary::bnd_info::send_box;
use starhalo_boundary::flux_correction::flux_channels;
use starhalo_boundary::RankChannels;
use starhalo_mesh::{Mesh, MeshConfig};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const EXE: &str = env!("CARGO_BIN_EXE_starhalo");

fn deck() -> String {
    format!("{}/inputs/bench_exchange.yaml", env!("CARGO_MANIFEST_DIR"))
}

/// A 16^3 periodic mesh of 8x8x4 blocks (16 blocks), smaller than the shipped deck's.
const MESH: [(&str, &str); 4] = [
    ("parthenon/mesh/nx1", "16"),
    ("parthenon/mesh/nx2", "16"),
    ("parthenon/mesh/nx3", "16"),
    ("parthenon/meshblock/nx3", "4"),
];

fn bench(ranks: usize, extra: &[&str]) -> std::process::Output {
    let deck = deck();
    let overrides: Vec<String> = MESH.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut args = vec!["bench", "exchange", deck.as_str()];
    args.extend(overrides.iter().map(String::as_str));
    args.extend_from_slice(extra);
    common::mpirun(ranks, 180, Path::new(EXE), &args, &[])
}

fn run_json(ranks: usize, extra: &[&str]) -> Value {
    let mut args = vec!["--cycles", "4", "--json"];
    args.extend_from_slice(extra);
    let out = bench(ranks, &args);
    common::assert_ok("bench exchange", &out);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// What the mesh implies on `ranks` ranks with `nvars` single-component variables and one
/// partition per rank: ordered pairs of neighbouring ranks, cross-rank channels, their packed
/// values, and the values of every rank's send sub-halos (same-rank channels included).
struct Expect {
    rank_pairs: usize,
    cross_channels: usize,
    cross_values: usize,
    send_values: usize,
}

fn expect(ranks: usize, nvars: usize) -> Expect {
    let mut map: BTreeMap<String, String> = BTreeMap::new();
    for d in 1..=3 {
        map.insert(format!("parthenon/mesh/nx{d}"), "16".into());
        map.insert(format!("parthenon/meshblock/nx{d}"), "8".into());
        for side in ["ix", "ox"] {
            map.insert(format!("parthenon/mesh/{side}{d}_bc"), "periodic".into());
        }
    }
    map.insert("parthenon/meshblock/nx3".into(), "4".into());
    let mesh = Mesh::new(MeshConfig::from_map(&map).unwrap(), ranks).unwrap();
    let shape = mesh.index_shape().unwrap();
    let nb = mesh.neighbors().unwrap();
    let vars: Vec<usize> = (0..nvars).collect();
    let mut e = Expect {
        rank_pairs: 0,
        cross_channels: 0,
        cross_values: 0,
        send_values: 0,
    };
    let mut pairs = BTreeSet::new();
    for r in 0..ranks {
        for c in RankChannels::new(&nb, &vars, r).send {
            let n = send_box(&c, &shape).unwrap().0.len();
            e.send_values += n;
            if !c.is_local() {
                pairs.insert((c.sender_rank, c.receiver_rank));
                e.cross_channels += 1;
                e.cross_values += n;
            }
        }
    }
    e.rank_pairs = pairs.len();
    e
}

fn num(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("`{key}` missing or not a number in {v}"))
}

fn check(report: &Value, ranks: usize, nvars: usize) {
    let e = expect(ranks, nvars);
    assert!(
        e.rank_pairs > 0 && e.cross_channels > e.rank_pairs,
        "test mesh too small"
    );
    assert_eq!(report["ranks"], ranks);
    assert_eq!(report["blocks"], 16);
    assert_eq!(report["nvars"], nvars);
    let modes = report["modes"].as_array().expect("modes");
    assert_eq!(modes.len(), 2, "{report}");
    assert_eq!(modes[0]["coalesced"], true);
    assert_eq!(modes[1]["coalesced"], false);
    for m in modes {
        for key in ["us_per_exchange", "us_per_exchange_mean"] {
            assert!(num(m, key) > 0.0, "{m}");
        }
        // A warm fill allocates nothing: routes, buffers and caches are built once.
        let allocs = num(m, "allocations_per_exchange");
        assert!(allocs == 0.0, "{allocs} allocations per exchange: {m}");
    }
    let (co, pc) = (&modes[0], &modes[1]);
    // Coalesced: a data and a status message per ordered pair of neighbouring ranks.
    assert_eq!(num(co, "messages_per_exchange"), (2 * e.rank_pairs) as f64);
    // Per channel: one message per cross-rank channel.
    assert_eq!(num(pc, "messages_per_exchange"), e.cross_channels as f64);
    // Same payload; coalesced adds one status value per channel.
    assert_eq!(num(pc, "bytes_per_exchange"), (8 * e.cross_values) as f64);
    assert_eq!(
        num(co, "bytes_per_exchange"),
        (8 * (e.cross_values + e.cross_channels)) as f64
    );
    assert_eq!(num(report, "pack_bytes"), (8 * e.send_values) as f64);
    assert!(num(report, "pack_gbps") > 0.0 && num(report, "memcpy_gbps") > 0.0);
    let ratio = num(report, "pack_over_memcpy");
    let want = num(report, "pack_gbps") / num(report, "memcpy_gbps");
    assert!((ratio - want).abs() <= 1e-12 * want, "{report}");
}

#[test]
fn four_ranks_dense_report_matches_the_mesh() {
    let r = run_json(4, &["exchange/nvars=2"]);
    check(&r, 4, 2);
    assert_eq!(r["sparse"], false);
    assert_eq!(r["ordering"], "natural");
}

#[test]
fn three_ranks_sparse_by_receiver_report_matches_the_mesh() {
    let r = run_json(
        3,
        &[
            "exchange/nvars=3",
            "exchange/sparse=true",
            "exchange/ordering=by_receiver",
        ],
    );
    check(&r, 3, 3);
    assert_eq!(r["sparse"], true);
}

#[test]
fn table_output_names_both_modes() {
    let out = bench(2, &["--cycles", "2", "exchange/nvars=1"]);
    common::assert_ok("bench exchange (table)", &out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("coalesced") && text.contains("channel"),
        "{text}"
    );
    assert!(text.contains("GB/s"), "{text}");
}

#[test]
fn bad_keys_exit_2_on_every_rank() {
    for bad in [
        "exchange/nvars=0",
        // One communicator each: thousands would exhaust MPI's (an abort, not an error).
        "exchange/nvars=2046",
        "exchange/bogus=1",
        "exchange/ordering=sideways",
        // The mesh blocks the bench reads are checked as strictly as its own.
        "parthenon/mesh/nghosts=3",
        "parthenon/meshblock/nx4=8",
        "parthenon/mesh/refinment=static",
        "parthenon/exec/spaces=cuda",
    ] {
        let out = bench(2, &["--cycles", "1", bad]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        let key = bad.split('=').next().unwrap_or_default();
        assert!(err.contains(key), "{bad}: {err}");
    }
}

/// A run deck benchmarks as it is: keys of the driver's own (its message scheme, which the
/// bench times both ways) and blocks the bench has no use for only draw warnings.
#[test]
fn the_advection_run_deck_benchmarks_with_warnings() {
    let deck = format!("{}/inputs/advection.yaml", env!("CARGO_MANIFEST_DIR"));
    let args = [
        "bench",
        "exchange",
        deck.as_str(),
        "--cycles",
        "1",
        "parthenon/mesh/nx1=32",
        "parthenon/mesh/nx2=32",
    ];
    let out = common::mpirun(2, 120, Path::new(EXE), &args, &[]);
    common::assert_ok("bench exchange of advection.yaml", &out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("parthenon/mesh/do_coalesced_comms (at ")
            && err.contains("does not apply to bench exchange, which times both"),
        "{err}"
    );
    let bad = [&args[..], &["parthenon/mesh/do_coalesced_comms=maybe"]].concat();
    let out = common::mpirun(2, 120, Path::new(EXE), &bad, &[]);
    common::assert_bad_input("a non-boolean", &out, "do_coalesced_comms");
}

/// The two-level deck shrunk to a periodic 16^3 mesh of 8^3 blocks with one root block
/// refined: 8 fine and 7 coarse blocks, every coarse one meeting fine ones through faces.
const AMR: [(&str, &str); 9] = [
    ("parthenon/mesh/nx1", "16"),
    ("parthenon/mesh/nx2", "16"),
    ("parthenon/mesh/nx3", "16"),
    ("parthenon/static_refinement0/x1min", "0.1"),
    ("parthenon/static_refinement0/x1max", "0.4"),
    ("parthenon/static_refinement0/x2min", "0.1"),
    ("parthenon/static_refinement0/x2max", "0.4"),
    ("parthenon/static_refinement0/x3min", "0.1"),
    ("parthenon/static_refinement0/x3max", "0.4"),
];

/// Flux correction on two levels: coalesced, a status and a data message per ordered pair of
/// ranks that share fine-coarse faces; per channel, one message per cross-rank face channel;
/// no allocation once warm in either mode. The ghost exchange modes are there too.
#[test]
fn three_ranks_two_levels_report_the_flux_correction() {
    let ranks = 3;
    let nvars = 2;
    let deck = format!(
        "{}/inputs/bench_exchange_amr.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let overrides: Vec<String> = AMR.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut args = vec!["bench", "exchange", deck.as_str(), "exchange/nvars=2"];
    args.extend(overrides.iter().map(String::as_str));
    args.extend(["--cycles", "3", "--json"]);
    let out = common::mpirun(ranks, 180, Path::new(EXE), &args, &[]);
    common::assert_ok("bench exchange (two levels)", &out);
    let text = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(text.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    assert_eq!(report["blocks"], 15, "{report}");
    assert_eq!(report["modes"].as_array().map(Vec::len), Some(2));

    // The deck's mesh with the overrides: periodic, 8^3 blocks, two levels.
    let mut map: BTreeMap<String, String> = BTreeMap::new();
    for d in 1..=3 {
        map.insert(format!("parthenon/meshblock/nx{d}"), "8".into());
        for side in ["ix", "ox"] {
            map.insert(format!("parthenon/mesh/{side}{d}_bc"), "periodic".into());
        }
    }
    map.insert("parthenon/mesh/numlevel".into(), "2".into());
    map.insert("parthenon/static_refinement0/level".into(), "1".into());
    for (k, v) in AMR {
        map.insert(k.into(), v.into());
    }
    let mesh = Mesh::new(MeshConfig::from_map(&map).unwrap(), ranks).unwrap();
    let nb = mesh.neighbors().unwrap();
    let vars: Vec<usize> = (0..nvars).collect();
    let (mut pairs, mut cross) = (BTreeSet::new(), 0);
    for r in 0..ranks {
        for c in flux_channels(&nb, &vars, r).send {
            if !c.is_local() {
                pairs.insert((c.sender_rank, c.receiver_rank));
                cross += 1;
            }
        }
    }
    assert!(
        cross > pairs.len() && !pairs.is_empty(),
        "test mesh too small"
    );

    let fc = report["flux_correction"]
        .as_array()
        .expect("flux_correction");
    assert_eq!(fc.len(), 2, "{report}");
    assert_eq!(fc[0]["coalesced"], true);
    assert_eq!(fc[1]["coalesced"], false);
    assert_eq!(
        num(&fc[0], "messages_per_exchange"),
        (2 * pairs.len()) as f64
    );
    assert_eq!(num(&fc[1], "messages_per_exchange"), cross as f64);
    for m in fc {
        assert!(num(m, "us_per_exchange") > 0.0, "{m}");
        assert_eq!(num(m, "allocations_per_exchange"), 0.0, "{m}");
    }
}

/// On a mesh of one level there is nothing to correct: the list is empty.
#[test]
fn one_level_reports_no_flux_correction() {
    let r = run_json(2, &["exchange/nvars=1"]);
    assert_eq!(
        r["flux_correction"].as_array().map(Vec::len),
        Some(0),
        "{r}"
    );
}

/// `parthenon/exec/space=cuda`: with a GPU, a third mode (device fields, coalesced, messages
/// staged through the host) and, on one rank (or with an MPI that supports CUDA), a fourth
/// (messages in device memory), each with the host coalesced mode's traffic and exactly one
/// pack and one unpack launch per partition, no allocation and a few copies, and the device
/// copies (the bench itself fails unless each device fill and the pack equal the host's bit
/// for bit). Without one, every rank exits 1 before any timing, saying why, and prints no
/// report.
#[test]
fn cuda_space_adds_the_device_exchange_or_exits_1() {
    for ranks in [1, 2] {
        if common::has_gpu() {
            let r = run_json(ranks, &["exchange/nvars=3", "parthenon/exec/space=cuda"]);
            let modes = r["modes"].as_array().unwrap();
            assert!(modes.len() == 4 || (ranks > 1 && modes.len() == 3), "{r}");
            let host = &modes[0];
            for (dev, space) in modes[2..].iter().zip(["cuda", "cuda-aware"]) {
                assert_eq!(dev["space"], space, "{r}");
                assert_eq!(dev["coalesced"], true, "{r}");
                for key in ["messages_per_exchange", "bytes_per_exchange"] {
                    assert_eq!(num(dev, key), num(host, key), "{key}: {r}");
                }
                assert_eq!(num(dev, "launches_per_partition"), 2.0, "{r}");
                // Warm device fills allocate nothing either (kernel arguments on the stack).
                assert_eq!(num(dev, "allocations_per_exchange"), 0.0, "{r}");
                // A few copies (messages staged through the host, runs of same-rank ends
                // and of coalesced messages), not one per channel (hundreds here).
                assert!(num(dev, "copies_per_partition") <= 8.0, "{r}");
            }
            let d = &r["device"];
            assert!(num(d, "pack_gbps") > 0.0 && num(d, "d2d_gbps") > 0.0, "{r}");
        } else {
            let out = bench(ranks, &["--cycles", "1", "parthenon/exec/space=cuda"]);
            common::assert_no_gpu_exit(&out, "no GPU can be used");
        }
    }
}

/// Two levels with `parthenon/exec/space=cuda`: with a GPU the device mode moves what the host
/// coalesced mode moves (restriction, coarse sub-halos and prolongation on the device);
/// without one, exit 1 before any timing.
#[test]
fn cuda_space_runs_two_levels_or_exits_1() {
    let amr: Vec<String> = AMR.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut args: Vec<&str> = amr.iter().map(String::as_str).collect();
    args.extend([
        "parthenon/mesh/numlevel=2",
        "parthenon/static_refinement0/level=1",
        "parthenon/exec/space=cuda",
        "exchange/nvars=2",
    ]);
    if common::has_gpu() {
        let r = run_json(3, &args);
        let modes = r["modes"].as_array().unwrap();
        assert!(modes.len() >= 3, "{r}");
        for dev in &modes[2..] {
            for key in ["messages_per_exchange", "bytes_per_exchange"] {
                assert_eq!(num(dev, key), num(&modes[0], key), "{key}: {r}");
            }
        }
    } else {
        args.extend(["--cycles", "1"]);
        common::assert_no_gpu_exit(&bench(3, &args), "no GPU can be used");
    }
}

/// Spaces other than host and cuda are unknown: exit 2 naming the key.
#[test]
fn unknown_spaces_are_bad_input() {
    let out = bench(2, &["--cycles", "1", "parthenon/exec/space=gpu"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("parthenon/exec/space"), "{err}");
}
