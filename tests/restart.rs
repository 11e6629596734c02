//! `starhalo run DECK -r FILE`: advection restarted from a restart file finishes bit for bit
//! as the run that never stopped, on 1 and 2 ranks, and bad restart files stop every rank with
//! exit code 2.
//!
//! The mesh is 2-D, periodic, with a static region two levels deep (so the flux correction
//! runs), two advected fields, SSP RK2. The uninterrupted run does 12 cycles and writes a
//! restart file every 5 cycles, a `.phdf` with ghosts every 0.03 in time and a history line
//! every cycle; the second run restarts from the cycle-5 file. Checked:
//!
//! - every file the restarted run writes exists in the uninterrupted run's directory under
//!   the same name (same file numbers) and holds the same datasets bit for bit, the same
//!   cycle, time and time step; and it writes every file the other wrote after cycle 5, and
//!   nothing for cycle 5 itself;
//! - its history file, continued from the one beside the restart file, is the uninterrupted
//!   run's byte for byte (also restarted in place, where the lines after cycle 5 are dropped);
//! - the final restart file is the same on 1 and 2 ranks;
//! - the same holds with sparse fields (a hard sphere, some blocks unallocated at the
//!   restart), and that file continued with dense fields ends with the same values;
//! - and on 3 ranks with adaptive refinement, where the mesh still changes after the
//!   restart point, by the steepness of a Gaussian (`parthenon/refinement0`), with a merge
//!   that the file's derefinement counts make due at cycle 6, and on 2 by the advection
//!   block's own test on a hard sphere;
//! - `Info/Refine` is 1 only with adaptive refinement, `Info/Multilevel` 1 with either;
//! - restarted with `nlim` at the file's cycle, a run takes no step, writes one history line
//!   for that cycle (not two) and only its final files;
//! - a missing file, a `.phdf` file, a truncated file, one damaged byte (in the values, in
//!   HDF5's own metadata), a file edited through HDF5 (another problem's name, another time,
//!   a changed value), such edits sealed again (another problem, a cycle beyond int32, an
//!   output time that is not a number), a directory where the history beside it should be,
//!   and a deck whose mesh differs from the file's exit 2 on every rank with a message naming
//!   the cause.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Output;

const LIMIT_S: u64 = 120;
const RESTART_CYCLE: i64 = 5;

const DECK: &str = "\
parthenon/job: {problem: advection, problem_id: adv}
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
  numlevel: 3
parthenon/static_refinement0: {x1min: -0.1, x1max: 0.1, x2min: -0.1, x2max: 0.1, level: 2}
parthenon/meshblock: {nx1: 8, nx2: 8}
parthenon/time: {nlim: 12, tlim: 10.0, ncycle_out: 0, integrator: rk2}
parthenon/output0: {file_type: hdf5, dt: 0.03, ghost_zones: true}
parthenon/output1: {file_type: rst, dn: 5}
parthenon/output2: {file_type: hst, dn: 1}
advection:
  num_vars: 2
  vx: 1.0
  vy: 0.5
  profile: smooth_gaussian
  amp: 1.0
  cfl: 0.4
";

fn main() {
    eprintln!("restart: bit-identical continuation of advection, and bad restart files");
    let base = std::env::temp_dir().join(format!("starhalo-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).expect("scratch dir");
    let deck = base.join("deck.yaml");
    std::fs::write(&deck, DECK).expect("deck");
    let deck = deck.to_str().expect("utf-8 path");

    let mut finals = Vec::new();
    // Dense fields on 1 and 2 ranks; sparse fields (a hard sphere: some blocks unallocated).
    let sparse: &[&str] = &["advection/sparse=true", "advection/profile=hard_sphere"];
    // Adaptive refinement on top of the static region: the mesh keeps changing after the
    // restart point, so the continuation must restore the forest and derefinement counts.
    // A derefine_tol near refine_tol flags the children of a refined block (their first
    // derivative about halves) at once; at this cfl the gaussian has just refined a block at
    // cycle 5, whose children, counted once in the cycle-5 file, merge at cycle 6 only if the
    // file's counts are taken back.
    let amr: &[&str] = &[
        "parthenon/mesh/refinement=adaptive",
        "parthenon/mesh/derefine_count=2",
        "advection/width=0.05",
        "advection/cfl=0.6",
        "parthenon/refinement0/field=advected",
        "parthenon/refinement0/refine_tol=0.05",
        "parthenon/refinement0/derefine_tol=0.04",
    ];
    // The advection block's own test (Parthenon's example) on a hard sphere.
    let sphere: &[&str] = &[
        "parthenon/mesh/refinement=adaptive",
        "parthenon/mesh/derefine_count=2",
        "advection/profile=hard_sphere",
        "advection/radius=0.2",
    ];
    for (ranks, extra, tag) in [
        (1, &[][..], "dense"),
        (2, &[][..], "dense"),
        (2, sparse, "sparse"),
        (3, amr, "amr"),
        (2, sphere, "sphere"),
    ] {
        let t0 = std::time::Instant::now();
        let name = if tag == "dense" {
            format!("full{ranks}")
        } else {
            format!("{tag}{ranks}")
        };
        let full = base.join(&name);
        let resumed = base.join(format!("{name}-resumed"));
        let mut args = vec![deck, "-d", path_str(&full)];
        args.extend_from_slice(extra);
        let out = run(ranks, &args);
        common::assert_ok(&format!("uninterrupted {tag} run on {ranks} ranks"), &out);
        let rst = full.join("adv.out1.00001.rhdf");
        assert_eq!(attr::<i64>(&rst, "NCycle"), RESTART_CYCLE);
        let unallocated = hdf5::File::open(&rst)
            .and_then(|f| f.dataset("SparseInfo"))
            .and_then(|d| d.read_raw::<bool>())
            .map_or(0, |f| f.iter().filter(|a| !**a).count());
        assert_eq!(
            unallocated > 0,
            tag == "sparse",
            "unallocated blocks in {tag} run"
        );
        // Parthenon's Info/Refine: adaptive refinement on; Info/Multilevel: levels may differ
        // (the static region makes them differ in every case).
        let adaptive = i64::from(tag == "amr" || tag == "sphere");
        assert_eq!(
            (attr::<i64>(&rst, "Refine"), attr::<i64>(&rst, "Multilevel")),
            (adaptive, 1),
            "Info/Refine, Info/Multilevel of the {tag} restart file"
        );
        if tag == "amr" {
            pending_merge(&rst, &String::from_utf8_lossy(&out.stdout));
        }
        if ranks == 1 {
            // A stale history already in the new directory gives way to the one beside the
            // restart file.
            std::fs::create_dir_all(&resumed).expect("resumed dir");
            std::fs::write(resumed.join("adv.out2.hst"), "# stale\n9 9 99 9\n").expect("stale");
        }
        let mut args = vec![deck, "-d", path_str(&resumed), "-r", path_str(&rst)];
        args.extend_from_slice(extra);
        let out = run(ranks, &args);
        common::assert_ok(&format!("restarted {tag} run on {ranks} ranks"), &out);
        check_continuation(&full, &resumed);
        if tag == "dense" && ranks == 1 {
            no_step(deck, &base, &full);
        }
        if tag == "dense" && ranks == 2 {
            // Restarted in the run's own directory from its cycle-5 file: the history drops
            // the lines after cycle 5 that the continuation writes again.
            let again = base.join("again2");
            std::fs::create_dir_all(&again).expect("again dir");
            for e in std::fs::read_dir(&full).expect("full dir") {
                let e = e.expect("entry");
                std::fs::copy(e.path(), again.join(e.file_name())).expect("copy");
            }
            let rst = again.join("adv.out1.00001.rhdf");
            let args = [deck, "-d", path_str(&again), "-r", path_str(&rst)];
            common::assert_ok("restart in place", &run(ranks, &args[..]));
            same_history(&full, &again);
        }
        if tag == "dense" {
            finals.push(full.join("adv.out1.final.rhdf"));
        } else if tag == "amr" || tag == "sphere" {
            let blocks = |f: &str| attr::<i64>(&full.join(f), "NumMeshBlocks");
            let (at_restart, at_end) =
                (blocks("adv.out1.00001.rhdf"), blocks("adv.out1.final.rhdf"));
            assert_ne!(
                at_restart, at_end,
                "the mesh changes after the restart point"
            );
        } else {
            // The sparse file continued with dense fields: allocated everywhere, same values.
            let densified = base.join(format!("{name}-dense"));
            let args = [deck, "-d", path_str(&densified), "-r", path_str(&rst)];
            let out = run(ranks, &args[..]);
            common::assert_ok("sparse file restarted dense", &out);
            let last = "adv.out1.final.rhdf";
            let f = hdf5::File::open(densified.join(last)).expect("final restart file");
            assert!(f.dataset("SparseInfo").is_err(), "dense fields expected");
            for v in ["advected", "advected_1"] {
                assert_eq!(
                    field_bits(&full.join(last), v),
                    field_bits(&densified.join(last), v)
                );
            }
        }
        eprintln!(
            "  {tag}, {ranks} ranks: ok ({:.1} s)",
            t0.elapsed().as_secs_f64()
        );
    }
    same_file(&finals[0], &finals[1]);

    bad_restarts(&base, deck);
    eprintln!("  bad restart files: ok");
    let _ = std::fs::remove_dir_all(&base);
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn run(ranks: usize, args: &[&str]) -> Output {
    common::starhalo_run(ranks, LIMIT_S, args)
}

/// The `.phdf` and `.rhdf` files of a directory.
fn hdf5_files(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.ends_with(".phdf") || n.ends_with(".rhdf"))
        .collect()
}

fn attr<T: hdf5::H5Type>(path: &Path, name: &str) -> T {
    let f = hdf5::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    f.group("Info")
        .and_then(|g| g.attr(name))
        .and_then(|a| a.read_scalar::<T>())
        .unwrap_or_else(|e| panic!("{}: Info/{name}: {e}", path.display()))
}

fn check_continuation(full: &Path, resumed: &Path) {
    let written = hdf5_files(resumed);
    let expected: BTreeSet<String> = hdf5_files(full)
        .into_iter()
        .filter(|n| attr::<i64>(&full.join(n), "NCycle") > RESTART_CYCLE)
        .collect();
    assert_eq!(
        written, expected,
        "the restarted run writes exactly the files the uninterrupted run wrote after cycle \
         {RESTART_CYCLE}, with the same numbers"
    );
    // A time-driven output, a cycle-driven output and the final ones.
    for name in [
        "adv.out0.00001.phdf",
        "adv.out1.00002.rhdf",
        "adv.out1.final.rhdf",
    ] {
        assert!(written.contains(name), "{name} missing: {written:?}");
    }
    for name in &written {
        let (a, b) = (full.join(name), resumed.join(name));
        assert_eq!(
            attr::<i64>(&a, "NCycle"),
            attr::<i64>(&b, "NCycle"),
            "{name}"
        );
        for key in ["Time", "dt"] {
            assert_eq!(
                attr::<f64>(&a, key).to_bits(),
                attr::<f64>(&b, key).to_bits(),
                "{name}: Info/{key}"
            );
        }
        same_file(&a, &b);
    }
    same_history(full, resumed);
}

/// The history continues the one beside the restart file: the restarted run's file is the
/// uninterrupted run's, byte for byte, one line per cycle 0 to 12 (column 3 is the cycle).
fn same_history(full: &Path, resumed: &Path) {
    let read = |dir: &Path| {
        let p = dir.join("adv.out2.hst");
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    };
    let want = read(full);
    let cycles: Vec<&str> = want
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().nth(2).unwrap())
        .collect();
    let expected: Vec<String> = (0..=12).map(|c| c.to_string()).collect();
    assert_eq!(cycles, expected, "one history line per cycle:\n{want}");
    assert_eq!(read(resumed), want, "{}", resumed.display());
}

/// The amr run's cycle-5 file holds the derefinement counts of a merge still pending (some
/// leaf counted, below `derefine_count` = 2), and the run merges blocks at the next cycle:
/// a continuation that lost the counts would merge a cycle late and differ.
fn pending_merge(rst: &Path, stdout: &str) {
    let counts: Vec<i32> = hdf5::File::open(rst)
        .and_then(|f| f.dataset("Blocks/derefinement_count"))
        .and_then(|d| d.read_raw())
        .unwrap_or_else(|e| panic!("{}: Blocks/derefinement_count: {e}", rst.display()));
    assert!(
        counts.contains(&1),
        "no merge pending in the derefinement counts of {}: {counts:?}",
        rst.display()
    );
    // "remesh: cycle=C blocks A -> B refined=R merged=M max_level=L"
    let next = format!("remesh: cycle={} ", RESTART_CYCLE + 1);
    let merged = stdout
        .lines()
        .filter(|l| l.starts_with(&next))
        .flat_map(|l| l.split_whitespace())
        .find_map(|w| w.strip_prefix("merged="));
    assert!(
        merged.is_some_and(|m| m != "0"),
        "no merge at cycle {} in the amr run:\n{stdout}",
        RESTART_CYCLE + 1
    );
}

/// Restarted at its cycle limit (`nlim` = the file's cycle), a run takes no step: its
/// history is the uninterrupted run's up to that cycle, with one line for it, not two, and
/// it writes only its final outputs, the restart file the one it started from.
fn no_step(deck: &str, base: &Path, full: &Path) {
    let dir = base.join("no-step1");
    let rst = full.join("adv.out1.00001.rhdf");
    let nlim = format!("parthenon/time/nlim={RESTART_CYCLE}");
    let args = [deck, "-d", path_str(&dir), "-r", path_str(&rst), &nlim];
    common::assert_ok("restart at nlim", &run(1, &args[..]));
    let read = |d: &Path| {
        let p = d.join("adv.out2.hst");
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    };
    let (got, all) = (read(&dir), read(full));
    let cycle = |l: &str| {
        l.split_whitespace()
            .nth(2)
            .and_then(|c| c.parse::<i64>().ok())
    };
    let want: String = all
        .lines()
        .filter(|l| l.starts_with('#') || cycle(l).is_some_and(|c| c <= RESTART_CYCLE))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        got, want,
        "history of a restart that takes no step: cycles 0 to {RESTART_CYCLE} once each"
    );
    let written = hdf5_files(&dir);
    let finals: BTreeSet<String> = ["adv.out0.final.phdf", "adv.out1.final.rhdf"]
        .map(String::from)
        .into();
    assert_eq!(written, finals, "files of a restart that takes no step");
    let last = dir.join("adv.out1.final.rhdf");
    assert_eq!(
        attr::<i64>(&last, "NCycle"),
        RESTART_CYCLE,
        "{}",
        last.display()
    );
    same_file(&rst, &last);
}

fn field_bits(path: &Path, name: &str) -> Vec<u64> {
    let f = hdf5::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: Vec<f64> = f.dataset(name).and_then(|d| d.read_raw()).expect(name);
    v.into_iter().map(f64::to_bits).collect()
}

/// Every dataset of `a` is in `b` with the same shape and the same bits.
fn same_file(a: &Path, b: &Path) {
    let fa = hdf5::File::open(a).unwrap_or_else(|e| panic!("{}: {e}", a.display()));
    let fb = hdf5::File::open(b).unwrap_or_else(|e| panic!("{}: {e}", b.display()));
    let mut names = Vec::new();
    for grp in ["/", "Blocks", "Locations", "VolumeLocations"] {
        let g = fa.group(grp).expect("group");
        for m in g.member_names().expect("members") {
            if g.dataset(&m).is_ok() {
                names.push(format!("{}/{m}", grp.trim_end_matches('/')));
            }
        }
    }
    // Two fields, Levels, LogicalLocations and the Blocks/Locations datasets at least.
    assert!(names.len() >= 12, "{}: {names:?}", a.display());
    for n in &names {
        if n.ends_with("loc.level-gid-lid-cnghost-gflag") {
            continue; // the local ids depend on the number of ranks
        }
        let (da, db) = (fa.dataset(n).unwrap(), fb.dataset(n).unwrap());
        assert_eq!(da.shape(), db.shape(), "{n}");
        let ty = da.dtype().unwrap().to_descriptor().unwrap().to_string();
        let bits = |d: &hdf5::Dataset| -> Vec<u64> {
            match ty.as_str() {
                "float64" => d
                    .read_raw::<f64>()
                    .unwrap()
                    .iter()
                    .map(|x| x.to_bits())
                    .collect(),
                "bool" => d
                    .read_raw::<bool>()
                    .unwrap()
                    .into_iter()
                    .map(u64::from)
                    .collect(),
                _ => d
                    .read_raw::<i64>()
                    .unwrap()
                    .into_iter()
                    .map(|x| x as u64)
                    .collect(),
            }
        };
        assert!(
            bits(&da) == bits(&db),
            "{n} differs between {} and {}",
            a.display(),
            b.display()
        );
    }
}

/// Runs a restart on 2 ranks that must fail with exit code 2 and `what` in its message.
fn expect_bad(deck: &str, dir: &Path, file: &Path, extra: &[&str], what: &str) {
    let mut args = vec![deck, "-d", path_str(dir), "-r", path_str(file)];
    args.extend_from_slice(extra);
    let out = run(2, &args);
    // Exit 2 (124: a rank hung), the message, no panic, and one rank speaking for all.
    common::assert_bad_input(&format!("-r {} {extra:?}", file.display()), &out, what);
}

/// Seals `path` again after an edit: the CRC-32 of every byte after the 512-byte user block,
/// as the restart writer seals it.
fn seal(path: &Path) {
    let mut bytes = std::fs::read(path).expect("file to seal");
    let text = format!(
        "starhalo restart file\ncrc32 {:08x}\nbytes {}\n",
        crc32fast::hash(&bytes[512..]),
        bytes.len()
    );
    bytes[..512].fill(0);
    bytes[..text.len()].copy_from_slice(text.as_bytes());
    std::fs::write(path, bytes).expect("sealed file");
}

fn bad_restarts(base: &Path, deck: &str) {
    let full = base.join("full2");
    let rst = full.join("adv.out1.00001.rhdf");
    let dir = base.join("bad");
    expect_bad(deck, &dir, &base.join("missing.rhdf"), &[], "no such file");
    expect_bad(
        deck,
        &dir,
        &full,
        &[],
        "is a directory; name the restart file",
    );
    expect_bad(
        deck,
        &dir,
        Path::new("/dev/null"),
        &[],
        "not a regular file",
    );
    expect_bad(
        deck,
        &dir,
        &full.join("adv.out0.00000.phdf"),
        &[],
        "not a restart file of starhalo run",
    );
    // Damaged bytes are found by the seal before libhdf5 reads the file: a truncated file,
    // one flipped bit in a variable's values, one in the HDF5 metadata (the global heap of
    // the names, where libhdf5 itself would loop forever or crash).
    let sealed = "does not match its seal";
    let bytes = std::fs::read(&rst).expect("restart file");
    let damaged = |name: &str, bytes: &[u8]| {
        let path = base.join(name);
        std::fs::write(&path, bytes).expect("damaged copy");
        expect_bad(deck, &dir, &path, &[], sealed);
    };
    damaged("truncated.rhdf", &bytes[..bytes.len() / 2]);
    let chunk = hdf5::File::open(&rst)
        .and_then(|f| f.dataset("advected"))
        .map(|ds| ds.chunk_info(0).expect("advected is chunked"))
        .expect("chunk of advected");
    let mut flipped = bytes.clone();
    flipped[(chunk.addr + chunk.size / 2) as usize] ^= 0x10;
    damaged("flipped.rhdf", &flipped);
    let heap = bytes
        .windows(4)
        .position(|w| w == b"GCOL")
        .expect("a global heap");
    let name = heap
        + bytes[heap..]
            .windows(10)
            .position(|w| w == b"advected_1")
            .expect("a name in the global heap");
    let mut heap_bytes = bytes.clone();
    heap_bytes[name - 8] ^= 0xff; // the name's length
    damaged("heap.rhdf", &heap_bytes);

    // Changed through HDF5 itself, so that the file is a valid HDF5 file: the seal no longer
    // holds. Changed and sealed again, the reader's own checks find what is wrong.
    let edit = |name: &str, reseal: bool, change: &dyn Fn(&hdf5::File)| -> std::path::PathBuf {
        let copy = base.join(name);
        std::fs::copy(&rst, &copy).expect("copy");
        change(&hdf5::File::open_rw(&copy).expect("open copy"));
        if reseal {
            seal(&copy);
        }
        copy
    };
    let set_problem = |f: &hdf5::File| {
        let params = f.group("Params").expect("Params");
        params.delete_attr("driver/problem").expect("delete");
        let name: hdf5::types::VarLenUnicode = "heat2d".parse().unwrap();
        params
            .new_attr::<hdf5::types::VarLenUnicode>()
            .shape(())
            .create("driver/problem")
            .and_then(|a| a.write_scalar(&name))
            .expect("rewrite");
    };
    let later = |f: &hdf5::File| {
        let time = f
            .group("Info")
            .and_then(|g| g.attr("Time"))
            .expect("Info/Time");
        time.write_scalar(&0.25f64).expect("rewrite");
    };
    let value = |f: &hdf5::File| {
        let ds = f.dataset("advected").expect("advected");
        let mut v: Vec<f64> = ds.read_raw().expect("values");
        let last = v.len() - 1;
        v[last] += 1.0;
        ds.write_raw(&v).expect("rewrite");
    };
    for (name, change) in [
        ("other.rhdf", &set_problem as &dyn Fn(&hdf5::File)),
        ("later.rhdf", &later),
        ("value.rhdf", &value),
    ] {
        expect_bad(deck, &dir, &edit(name, false, change), &[], sealed);
    }
    let other = edit("other_sealed.rhdf", true, &set_problem);
    expect_bad(deck, &dir, &other, &[], "written by problem 'heat2d'");
    let cycle = edit("cycle.rhdf", true, &|f| {
        let info = f.group("Info").expect("Info");
        info.delete_attr("NCycle").expect("delete");
        info.new_attr::<i64>()
            .shape(())
            .create("NCycle")
            .and_then(|a| a.write_scalar(&i64::MAX))
            .expect("rewrite");
    });
    expect_bad(deck, &dir, &cycle, &[], "Info/NCycle = 9223372036854775807");
    let never = edit("never.rhdf", true, &|f| {
        f.group("Params")
            .and_then(|g| g.attr("parthenon/output0/next_time"))
            .and_then(|a| a.write_scalar(&f64::NAN))
            .expect("rewrite");
    });
    expect_bad(
        deck,
        &dir,
        &never,
        &[],
        "parthenon/output0/next_time = NaN: not a finite time",
    );
    // Strings whose bytes are not UTF-8, sealed again: named, not read as text (hdf5's
    // as_str took them unchecked, and the message printing them panicked).
    let mut not_utf8 = bytes.clone();
    let mut at = 512;
    while let Some(i) = not_utf8[at..].windows(8).position(|w| w == b"periodic") {
        not_utf8[at + i + 2] = 0x8d;
        at += i + 8;
    }
    assert!(at > 512, "the deck's boundary conditions are in the file");
    let path = base.join("not_utf8.rhdf");
    std::fs::write(&path, &not_utf8).expect("edited copy");
    seal(&path);
    expect_bad(deck, &dir, &path, &[], "is not UTF-8 at byte");

    // A directory where the history beside the restart file should be.
    let beside = base.join("beside");
    std::fs::create_dir_all(beside.join("adv.out2.hst")).expect("directory");
    std::fs::copy(&rst, beside.join("r.rhdf")).expect("copy");
    expect_bad(
        deck,
        &dir,
        &beside.join("r.rhdf"),
        &[],
        "adv.out2.hst: not a regular file",
    );

    // Decks whose mesh is not the file's.
    expect_bad(
        deck,
        &dir,
        &rst,
        &["parthenon/mesh/nx1=64"],
        "root grid has [32, 32, 1] cells",
    );
    expect_bad(
        deck,
        &dir,
        &rst,
        &["parthenon/meshblock/nx1=16"],
        "parthenon/meshblock gives [16, 8, 1]",
    );
    expect_bad(
        deck,
        &dir,
        &rst,
        &["parthenon/static_refinement0/level=1"],
        "does not fit the mesh configuration",
    );
    expect_bad(
        deck,
        &dir,
        &rst,
        &["parthenon/mesh/x2max=0.6"],
        "domain along x2",
    );
    expect_bad(
        deck,
        &dir,
        &rst,
        &["advection/num_vars=3"],
        "no variable `advected_2`",
    );
}
