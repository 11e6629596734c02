//! Sparse advected fields (`advection/sparse: true`) against dense ones, on 1 and 2 ranks.
//!
//! A hard sphere (1 inside, 0 outside) crosses a periodic 2-D box with a static region one
//! level deep, two fields, SSP RK2, 40 cycles, a `.phdf` every 10 cycles and at the end.
//! Checked, in every output of the sparse run against the same output of the dense run:
//!
//! - where a block is allocated its values are the dense run's bit for bit; where it is not,
//!   the file holds zeros and the dense run's values there are below the allocation threshold;
//! - at the start fewer blocks are allocated than exist, and later more than at the start
//!   (the exchange allocated blocks the sphere reached);
//! - `parthenon/sparse/enable_sparse: false` gives the dense run (no `SparseInfo`);
//! - thresholds out of range are bad input (exit 2) naming the key.

mod common;

use std::path::Path;
use std::process::Output;

const LIMIT_S: u64 = 120;
const THRESHOLD: f64 = 1e-12;

const DECK: &str = "\
parthenon/job: {problem: advection, problem_id: sp}
parthenon/mesh:
  nx1: 32
  nx2: 32
  x1min: -0.5
  x1max: 0.5
  x2min: -0.5
  x2max: 0.5
  ix1_bc: periodic
  ox1_bc: periodic
  ix2_bc: periodic
  ox2_bc: periodic
  refinement: static
  numlevel: 2
parthenon/static_refinement0: {x1min: -0.1, x1max: 0.1, x2min: -0.1, x2max: 0.1, level: 1}
parthenon/meshblock: {nx1: 8, nx2: 8}
parthenon/time: {nlim: 40, tlim: 10.0, ncycle_out: 0}
parthenon/output0: {file_type: hdf5, dn: 10}
advection: {num_vars: 2, vx: 1.0, vy: 0.5, profile: hard_sphere, radius: 0.15, cfl: 0.4}
";

const FILES: [&str; 5] = [
    "sp.out0.00000.phdf",
    "sp.out0.00001.phdf",
    "sp.out0.00002.phdf",
    "sp.out0.00003.phdf",
    "sp.out0.final.phdf",
];

fn main() {
    eprintln!("advection_sparse: sparse fields give the dense values where allocated");
    let base = std::env::temp_dir().join(format!("starhalo-sparse-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).expect("scratch dir");
    let deck = base.join("deck.yaml");
    std::fs::write(&deck, DECK).expect("deck");
    let deck = deck.to_str().expect("utf-8 path");

    for ranks in [1, 2] {
        let t0 = std::time::Instant::now();
        let dense = base.join(format!("dense{ranks}"));
        let sparse = base.join(format!("sparse{ranks}"));
        let out = run(ranks, &[deck, "-d", s(&dense)]);
        common::assert_ok(&format!("dense run on {ranks} ranks"), &out);
        let out = run(ranks, &[deck, "-d", s(&sparse), "advection/sparse=true"]);
        common::assert_ok(&format!("sparse run on {ranks} ranks"), &out);
        let allocated: Vec<usize> = FILES
            .iter()
            .map(|f| compare(&dense.join(f), &sparse.join(f)))
            .collect();
        let nblocks = block_count(&dense.join(FILES[0]));
        eprintln!("  {ranks} ranks: allocated blocks per output {allocated:?} of {nblocks}");
        assert!(
            allocated[0] < nblocks,
            "the sphere covers only part of the box"
        );
        assert!(allocated[0] > 0);
        assert!(
            allocated.windows(2).all(|w| w[0] <= w[1]) && allocated[4] > allocated[0],
            "the exchange allocates blocks as the sphere moves: {allocated:?}"
        );
        eprintln!("  {ranks} ranks: ok ({:.1} s)", t0.elapsed().as_secs_f64());
    }

    // enable_sparse: false turns the option off.
    let off = base.join("off");
    let out = run(
        1,
        &[
            deck,
            "-d",
            s(&off),
            "advection/sparse=true",
            "parthenon/sparse/enable_sparse=false",
        ],
    );
    common::assert_ok("enable_sparse=false", &out);
    let f = hdf5::File::open(off.join(FILES[4])).expect("output");
    assert!(f.dataset("SparseInfo").is_err(), "dense storage expected");
    assert_eq!(
        field(&off.join(FILES[4]), "advected"),
        field(&base.join("dense1").join(FILES[4]), "advected")
    );

    for (bad, key) in [
        ("parthenon/sparse/alloc_threshold=-1", "alloc_threshold"),
        (
            "parthenon/sparse/dealloc_threshold=1e-3",
            "dealloc_threshold",
        ),
    ] {
        let out = run(2, &[deck, "-d", s(&off), "advection/sparse=true", bad]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {err}");
        assert!(
            err.contains(key) && !err.contains("panicked"),
            "{bad}: {err}"
        );
    }
    eprintln!("  enable_sparse and bad thresholds: ok");
    let _ = std::fs::remove_dir_all(&base);
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn run(ranks: usize, args: &[&str]) -> Output {
    common::starhalo_run(ranks, LIMIT_S, args)
}

fn field(path: &Path, name: &str) -> Vec<u64> {
    let f = hdf5::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: Vec<f64> = f.dataset(name).and_then(|d| d.read_raw()).unwrap();
    v.into_iter().map(f64::to_bits).collect()
}

fn block_count(path: &Path) -> usize {
    let f = hdf5::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    f.dataset("Levels").unwrap().shape()[0]
}

/// Checks one output pair; returns the number of blocks the first field is allocated on.
fn compare(dense: &Path, sparse: &Path) -> usize {
    let fd = hdf5::File::open(dense).unwrap_or_else(|e| panic!("{}: {e}", dense.display()));
    let fs = hdf5::File::open(sparse).unwrap_or_else(|e| panic!("{}: {e}", sparse.display()));
    assert!(fd.dataset("SparseInfo").is_err(), "the dense run is dense");
    let info = fs.dataset("SparseInfo").expect("SparseInfo");
    let names: Vec<String> = info
        .attr("SparseFields")
        .and_then(|a| a.read_raw::<hdf5::types::VarLenUnicode>())
        .expect("SparseFields")
        .iter()
        .map(|n| n.as_str().to_string())
        .collect();
    assert_eq!(names, ["advected", "advected_1"]);
    let flags: Vec<bool> = info.read_raw().expect("flags");
    let nb = block_count(dense);
    assert_eq!(flags.len(), nb * 2);
    for (v, name) in names.iter().enumerate() {
        let d: Vec<f64> = fd.dataset(name).and_then(|x| x.read_raw()).unwrap();
        let s: Vec<f64> = fs.dataset(name).and_then(|x| x.read_raw()).unwrap();
        assert_eq!(d.len(), s.len());
        let per = d.len() / nb;
        for b in 0..nb {
            let (db, sb) = (&d[b * per..][..per], &s[b * per..][..per]);
            if flags[b * 2 + v] {
                assert!(
                    db.iter().zip(sb).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "{}: {name} on allocated block {b} differs from the dense run",
                    sparse.display()
                );
            } else {
                assert!(
                    sb.iter().all(|&y| y == 0.0),
                    "unallocated block {b} reads 0"
                );
                assert!(
                    db.iter().all(|x| x.abs() <= THRESHOLD),
                    "{}: {name} is unallocated on block {b} where the dense run exceeds the \
                     threshold",
                    sparse.display()
                );
            }
        }
    }
    // Both fields start alike, so they are allocated alike.
    assert!(flags.chunks(2).all(|c| c[0] == c[1]));
    flags.chunks(2).filter(|c| c[0]).count()
}
