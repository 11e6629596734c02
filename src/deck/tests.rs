use super::*;

const YAML: &str = "\
# a deck
parthenon/job: {problem_id: advection}
parthenon/mesh: {nx1: 64, nx2: 64, x1min: -0.5, ix1_bc: periodic, refinement: adaptive}
parthenon/time:
  tlim: 1.0
  nlim: -1
  integrator: rk2
parthenon/output0: {file_type: hdf5, dt: 0.1, variables: [advected, one]}
advection: {vx: 1.0, profile: wave, on: true}
";

const IN: &str = "\
# the same in Parthenon's format
<parthenon/job>
problem_id = advection   # trailing comment

<parthenon/mesh>
nx1 = 64
x1min = -0.5
ix1_bc = periodic
<parthenon/output0>
variables = advected, one
<advection>
vx = 1.0
on = true
";

fn yaml() -> Deck {
    Deck::from_str_auto(YAML, "d.yaml").unwrap()
}

#[test]
fn yaml_values_keep_their_types_and_lines() {
    let d = yaml();
    assert_eq!(
        d.get_str("parthenon/job", "problem_id").unwrap(),
        "advection"
    );
    assert_eq!(d.get_i64("parthenon/mesh", "nx1").unwrap(), 64);
    assert_eq!(d.get_f64("parthenon/mesh", "x1min").unwrap(), -0.5);
    assert_eq!(d.get_i64("parthenon/time", "nlim").unwrap(), -1);
    assert!(d.get_bool("advection", "on").unwrap());
    assert_eq!(
        d.get_list("parthenon/output0", "variables").unwrap(),
        ["advected", "one"]
    );
    let line = |b, k| match d.origin(b, k) {
        Some(Origin::File { line, .. }) => *line,
        other => panic!("{other:?}"),
    };
    assert_eq!(line("parthenon/mesh", "ix1_bc"), 3);
    assert_eq!(line("parthenon/time", "integrator"), 7);
    assert_eq!(line("advection", "vx"), 9);
    // A block is at its header, also when its keys start on the next line.
    let block_line = |b: &str| match &d.blocks().iter().find(|x| x.name == b).unwrap().origin {
        Origin::File { line, .. } => *line,
        other => panic!("{other:?}"),
    };
    assert_eq!(block_line("parthenon/time"), 4);
    assert_eq!(block_line("parthenon/output0"), 8);
    let names: Vec<_> = d.blocks().iter().map(|b| b.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "parthenon/job",
            "parthenon/mesh",
            "parthenon/time",
            "parthenon/output0",
            "advection"
        ]
    );
}

#[test]
fn nested_yaml_mappings_are_sub_blocks() {
    let d = Deck::from_str_auto(
        "parthenon:\n  mesh:\n    nx1: 8\n  job: {problem: heat2d}\nempty:\n",
        "n.yaml",
    )
    .unwrap();
    assert_eq!(d.get_i64("parthenon/mesh", "nx1").unwrap(), 8);
    assert_eq!(d.get_str("parthenon/job", "problem").unwrap(), "heat2d");
    assert!(d.block("empty").is_some_and(|b| b.entries.is_empty()));
}

/// A value written as a mapping is an error at its line for the reader that takes the key,
/// not an absent key (its default) or a missing one; the mesh's keys too, which it reads
/// from a flat map.
#[test]
fn a_value_written_as_a_block_is_named() {
    let text = "parthenon/mesh:\n  nx1: 16\n  ix1_bc: {a: 1}\n  ox1_bc: periodic\n  \
                nx2: {b: {c: 2}}\nheat2d:\n  nx: 8\n  file: {a: 1}\n";
    let d = Deck::from_str_auto(text, "v.yaml").unwrap();
    let e = d
        .get_str_or("parthenon/mesh", "ix1_bc", "outflow")
        .unwrap_err();
    let want = "parthenon/mesh/ix1_bc at v.yaml:3: expected a single value, found a block of keys";
    assert_eq!(e.to_string(), want);
    let e = d.get_i64("parthenon/mesh", "nx2").unwrap_err().to_string();
    assert!(
        e.starts_with("parthenon/mesh/nx2 at v.yaml:5: expected an integer"),
        "{e}"
    );
    let e = d.get_path("heat2d", "file").unwrap_err().to_string();
    assert!(
        e.starts_with("heat2d/file at v.yaml:8: expected a file path"),
        "{e}"
    );
    let e = d.mesh_config().unwrap_err().to_string();
    assert!(e.starts_with("parthenon/mesh/"), "{e}");
    assert!(e.contains("found a block of keys"), "{e}");
    // Keys beside them read as before.
    assert_eq!(d.get_i64("heat2d", "nx").unwrap(), 8);
    assert_eq!(d.get_i64_or("heat2d", "ny", 3).unwrap(), 3);
}

#[test]
fn in_format_reads_into_the_same_tree() {
    let d = Deck::from_str_auto(IN, "d.in").unwrap();
    assert_eq!(
        d.get_str("parthenon/job", "problem_id").unwrap(),
        "advection"
    );
    assert_eq!(d.get_i64("parthenon/mesh", "nx1").unwrap(), 64);
    assert_eq!(d.get_f64("parthenon/mesh", "x1min").unwrap(), -0.5);
    assert_eq!(d.get_str("parthenon/mesh", "ix1_bc").unwrap(), "periodic");
    assert_eq!(
        d.get_list("parthenon/output0", "variables").unwrap(),
        ["advected", "one"]
    );
    assert!(d.get_bool("advection", "on").unwrap());
    assert_eq!(
        d.origin("parthenon/mesh", "x1min"),
        Some(&Origin::File {
            file: "d.in".into(),
            line: 7
        })
    );
    // The format is recognised from the content when the name does not say.
    let sniffed = Deck::from_str_auto(IN, "deck.txt").unwrap();
    assert_eq!(sniffed.flat_map(), d.flat_map());
}

#[test]
fn overrides_replace_and_create_keys() {
    let mut d = yaml();
    d.apply_override("parthenon/mesh/nx1=32").unwrap();
    d.apply_override("advection/vx=2").unwrap();
    d.apply_override("parthenon/meshblock/nx1=16").unwrap();
    d.apply_override("advection/profile = [a, b]").unwrap();
    assert_eq!(d.get_i64("parthenon/mesh", "nx1").unwrap(), 32);
    assert_eq!(d.get_f64("advection", "vx").unwrap(), 2.0);
    assert_eq!(d.get_i64("parthenon/meshblock", "nx1").unwrap(), 16);
    assert_eq!(d.get_list("advection", "profile").unwrap(), ["a", "b"]);
    assert_eq!(d.origin("advection", "vx"), Some(&Origin::CommandLine));
    for bad in [
        "nx1=3",
        "parthenon/mesh/nx1",
        "/nx1=3",
        "parthenon//nx1=3",
        "parthenon/mesh/=3",
    ] {
        let e = d.apply_override(bad).unwrap_err();
        assert!(matches!(e, DeckError::BadOverride { .. }), "{bad}: {e}");
        assert!(e.to_string().contains(bad), "{e}");
    }
}

#[test]
fn defaults_apply_only_when_absent() {
    let d = yaml();
    assert_eq!(d.get_i64_or("parthenon/mesh", "nx3", 1).unwrap(), 1);
    assert_eq!(d.get_i64_or("parthenon/mesh", "nx1", 1).unwrap(), 64);
    assert_eq!(d.get_usize_or("nosuch", "n", 7).unwrap(), 7);
    assert_eq!(d.get_str_or("advection", "x", "dflt").unwrap(), "dflt");
    assert!(d.get_bool_or("advection", "off", false).is_ok_and(|b| !b));
    assert_eq!(
        d.get_list_or("advection", "l", vec![]).unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(d.get_f64_or("advection", "vy", 0.5).unwrap(), 0.5);
}

#[test]
fn type_errors_name_key_file_and_line() {
    let d = Deck::from_str_auto(
        "parthenon/job: {x: 1}\nparthenon/mesh: {nx1: abc, f: [1, 2], b: maybe, n: -3}\n",
        "deck.yaml",
    )
    .unwrap();
    let e = d.get_i64("parthenon/mesh", "nx1").unwrap_err().to_string();
    assert_eq!(
        e,
        "parthenon/mesh/nx1 at deck.yaml:2: expected an integer, found 'abc'"
    );
    let e = d.get_f64("parthenon/mesh", "f").unwrap_err().to_string();
    assert!(e.contains("expected a number, found '[1, 2]'"), "{e}");
    let e = d
        .get_bool_or("parthenon/mesh", "b", true)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("parthenon/mesh/b at deck.yaml:2: expected true or false"),
        "{e}"
    );
    let e = d.get_usize("parthenon/mesh", "n").unwrap_err().to_string();
    assert!(
        e.contains("expected a non-negative integer, found '-3'"),
        "{e}"
    );
    let mut big = yaml();
    big.apply_override("parthenon/time/nlim=99999999999999999999")
        .unwrap();
    let e = big
        .get_i64("parthenon/time", "nlim")
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "parthenon/time/nlim at the command line: 99999999999999999999 is beyond the 64-bit integer range"
    );
    let e = d.get_str("parthenon/mesh", "f").unwrap_err().to_string();
    assert!(e.contains("expected a single value"), "{e}");
    // In .in decks every value is text; a type error names the .in line.
    let d = Deck::from_str_auto("<heat2d>\n\nnx = 1.5\n", "h.in").unwrap();
    let e = d.get_i64("heat2d", "nx").unwrap_err().to_string();
    assert_eq!(e, "heat2d/nx at h.in:3: expected an integer, found '1.5'");
    let mut d = d;
    d.apply_override("heat2d/nx=many").unwrap();
    let e = d.get_i64("heat2d", "nx").unwrap_err().to_string();
    assert_eq!(
        e,
        "heat2d/nx at the command line: expected an integer, found 'many'"
    );
}

#[test]
fn missing_keys_are_named() {
    let d = yaml();
    let e = d.get_f64("advection", "vy").unwrap_err().to_string();
    assert_eq!(
        e,
        "missing required key advection/vy (block advection at d.yaml:9 has no key vy)"
    );
    let e = d.get_i64("heat2d", "nx").unwrap_err().to_string();
    assert_eq!(
        e,
        "missing required key heat2d/nx (d.yaml has no block heat2d)"
    );
}

#[test]
fn invalid_values_name_their_origin() {
    let d = yaml();
    let e = d
        .invalid("parthenon/mesh", "nx1", "must be even")
        .to_string();
    assert_eq!(e, "parthenon/mesh/nx1 at d.yaml:3: must be even");
    let e = d.invalid("parthenon/mesh", "nx3", "too small").to_string();
    assert_eq!(e, "parthenon/mesh/nx3 (default value): too small");
}

#[test]
fn unread_keys_in_known_blocks_are_reported() {
    let d = yaml();
    d.get_str("parthenon/job", "problem_id").unwrap();
    d.mark_read("parthenon/mesh", &["nx1", "nx2", "x1min", "ix1_bc"]);
    let known =
        |b: &str| b.starts_with("parthenon/") && b != "parthenon/time" && b != "parthenon/output0";
    let e = d.check_unread(known, "problem x").unwrap_err();
    assert_eq!(
        e.to_string(),
        "unknown key (not read by problem x): parthenon/mesh/refinement at d.yaml:3"
    );
    d.get_str("parthenon/mesh", "refinement").unwrap();
    d.check_unread(known, "problem x").unwrap();
    // `advection` was not selected, and nothing read it: an error once it is.
    let e = d
        .check_unread(|b| b == "advection", "p")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("unknown keys (not read by p): advection/vx at d.yaml:9;"),
        "{e}"
    );
}

#[test]
fn malformed_yaml_names_the_line() {
    let bad = "parthenon/job: {problem: heat2d}\nheat2d:\n  nx: 8\n   ny: [1, 2\n";
    let e = Deck::from_str_auto(bad, "bad.yaml").unwrap_err();
    let DeckError::Syntax { line, .. } = &e else {
        panic!("{e}")
    };
    assert!(*line >= 3, "{e}");
    assert!(e.to_string().starts_with("bad.yaml:"), "{e}");
    for (text, line, needle) in [
        ("a: 1\n", 1, "top-level key 'a' must be a block"),
        ("- 1\n- 2\n", 1, "a deck is a mapping"),
        ("b:\n  k: 1\n  k: 2\n", 3, "duplicate mapping key: k"),
        ("b:\n  k:\n", 2, "b/k: has no value"),
        ("b:\n  k: [{x: 1}]\n", 2, "a list may not hold mappings"),
        ("b//c: {k: 1}\n", 1, "not a block name"),
        ("b: {k: 1}\n---\nc: {k: 2}\n", 3, "a deck is one document"),
    ] {
        let e = Deck::from_str_auto(text, "t.yaml").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains(needle), "{text:?}: {msg}");
        // No position of the parser's own (the line is ours) and none of its option names.
        assert!(!msg.contains(" at line ") && !msg.contains("_"), "{msg}");
        match e {
            DeckError::Syntax { line: l, .. } if l == line => {}
            other => panic!("{text:?}: {other:?}"),
        }
    }
}

#[test]
fn malformed_in_files_name_the_line() {
    for (text, line, needle) in [
        ("nx = 1\n", 1, "key 'nx' comes before any <block> header"),
        (
            "<a>\nnx 1\n",
            2,
            "expected '<block>' or 'key = value', found 'nx 1'",
        ),
        ("<a\n", 1, "lacks its closing '>'"),
        ("<a>\n\n= 3\n", 3, "'' is not a key name"),
        ("<a>\nx =   # empty\n", 2, "key 'x' has no value"),
        (
            "<a>\nx = 1\n<b>\n<a>\nx = 2\n",
            5,
            "a/x is given twice (first at t.in:2)",
        ),
        ("<a//b>\n", 1, "not a block name"),
        (
            "<a>\nb/x = 1\n",
            2,
            "key 'b/x' of block a: a key name holds no '/'; name the block by its whole path (a/b)",
        ),
    ] {
        match Deck::from_str_auto(text, "t.in") {
            Err(e @ DeckError::Syntax { line: l, .. }) if l == line => {
                assert!(e.to_string().contains(needle), "{text:?}: {e}");
                assert!(e.to_string().starts_with(&format!("t.in:{line}: ")), "{e}");
            }
            other => panic!("{text:?}: {other:?}"),
        }
    }
}

#[test]
fn printed_yaml_reads_back_identically() {
    for mut d in [yaml(), Deck::from_str_auto(IN, "d.in").unwrap()] {
        d.apply_override("parthenon/mesh/nx1=32").unwrap();
        d.apply_override("extra/s=007x").unwrap();
        d.apply_override("extra/q='quoted'").unwrap();
        d.apply_override("extra/id=1e5").unwrap();
        d.apply_override("extra/tol=1.0e-8").unwrap();
        d.apply_override("extra/eps=1e-8").unwrap();
        let text = d.to_yaml();
        assert!(text.contains("nx1: 32\n"), "{text}");
        assert!(text.contains("id: 1e5\n"), "{text}");
        assert!(text.contains("tol: 1.0e-8\n"), "kept as written: {text}");
        assert!(text.contains("eps: 1e-8\n"), "{text}");
        assert!(text.contains("6 command-line overrides applied"), "{text}");
        let back = Deck::from_str_auto(&text, "back.yaml").unwrap();
        for (b1, b2) in d.blocks().iter().zip(back.blocks()) {
            assert_eq!(b1.name, b2.name);
            // The same text, so every getter gives the same value.
            let v1: Vec<_> = b1
                .entries
                .iter()
                .map(|e| (&e.key, e.value.text()))
                .collect();
            let v2: Vec<_> = b2
                .entries
                .iter()
                .map(|e| (&e.key, e.value.text()))
                .collect();
            assert_eq!(v1, v2, "{text}");
        }
        assert_eq!(d.blocks().len(), back.blocks().len());
    }
}

#[test]
fn paths_are_relative_to_the_deck_that_names_them() {
    let mut d =
        Deck::from_str_auto("spmv: {matrix: m/a.mtx, abs: /x/b.mtx}\n", "inputs/s.yaml").unwrap();
    assert_eq!(
        d.get_path("spmv", "matrix").unwrap(),
        Some(PathBuf::from("inputs/m/a.mtx"))
    );
    assert_eq!(
        d.get_path("spmv", "abs").unwrap(),
        Some(PathBuf::from("/x/b.mtx"))
    );
    assert_eq!(d.get_path("spmv", "none").unwrap(), None);
    d.apply_override("spmv/matrix=c.mtx").unwrap();
    assert_eq!(
        d.get_path("spmv", "matrix").unwrap(),
        Some(PathBuf::from("c.mtx"))
    );
}

#[test]
fn a_mapping_of_blocks_is_not_a_block() {
    let d = Deck::from_str_auto(
        "parthenon:\n  job: {problem: heat2d}\n  time:\n    nlim: 3\nempty: {}\n",
        "n.yaml",
    )
    .unwrap();
    let names: Vec<&str> = d.blocks().iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names, ["parthenon/job", "parthenon/time", "empty"]);
    assert_eq!(d.get_i64("parthenon/time", "nlim").unwrap(), 3);
}

#[test]
fn a_byte_order_mark_is_not_part_of_the_deck() {
    for (text, file) in [
        ("\u{feff}<heat2d>\nnx = 8\n", "b.in"),
        ("\u{feff}heat2d:\n  nx: 8\n", "b.yaml"),
    ] {
        let d = Deck::from_str_auto(text, file).unwrap();
        assert_eq!(d.get_i64("heat2d", "nx").unwrap(), 8, "{file}");
    }
}

#[test]
fn the_printed_header_stays_one_comment_line() {
    let d = Deck::from_str_auto("heat2d:\n  nx: 8\n", "a\nb: 1.yaml").unwrap();
    let text = d.to_yaml();
    assert!(text.starts_with("# a\\nb: 1.yaml with 0"), "{text}");
    let back = Deck::from_str_auto(&text, "back.yaml").unwrap();
    assert_eq!(back.get_i64("heat2d", "nx").unwrap(), 8);
}

#[test]
fn mesh_errors_show_the_value_as_written() {
    let mut d = yaml();
    d.apply_override("parthenon/mesh/x1min=nan").unwrap();
    let e = d.mesh_config().unwrap_err().to_string();
    assert!(
        e.contains("parthenon/mesh/x1min at the command line: `nan`: must be a finite number"),
        "{e}"
    );
}

/// YAML's non-finite numbers reach the key that reads them, as written: a time-out of
/// `.inf` means never, a mesh bound of `.nan` or `1e400` is refused naming its key.
#[test]
fn non_finite_yaml_numbers_are_judged_by_their_key() {
    let text = "b:\n  t: .inf\n  u: -.Inf\n  v: 1e400\n  w: .nan\n  q: '.inf'\n\
                parthenon/mesh:\n  nx1: 8\n  x1min: .NaN\n";
    let d = Deck::from_str_auto(text, "n.yaml").unwrap();
    assert_eq!(d.get_f64("b", "t").unwrap(), f64::INFINITY);
    assert_eq!(d.get_f64("b", "u").unwrap(), f64::NEG_INFINITY);
    assert_eq!(d.get_f64("b", "v").unwrap(), f64::INFINITY);
    assert!(d.get_f64("b", "w").unwrap().is_nan());
    assert_eq!(d.get_str("b", "v").unwrap(), "1e400");
    // A quoted string stays a string, which a number key still reads.
    assert_eq!(d.get_str("b", "q").unwrap(), ".inf");
    assert_eq!(d.get_f64("b", "q").unwrap(), f64::INFINITY);
    let e = d.mesh_config().unwrap_err().to_string();
    assert!(
        e.contains("parthenon/mesh/x1min at n.yaml:9: `.NaN`: must be a finite number"),
        "{e}"
    );
    // Printed plain, as numbers (a quoted string would be text to other YAML readers).
    let printed = d.to_yaml();
    for line in ["t: .inf", "u: -.Inf", "v: 1e400", "w: .nan", "q: '.inf'"] {
        assert!(printed.contains(line), "{line}:\n{printed}");
    }
    let back = Deck::from_str_auto(&printed, "back.yaml").unwrap();
    assert_eq!(back.get_str("b", "v").unwrap(), "1e400");
    assert_eq!(back.get_f64("b", "t").unwrap(), f64::INFINITY);
}

#[test]
fn yaml_numbers_are_kept_as_written() {
    let text = "\
parthenon/job: {problem_id: 1e5}
b:
  tol: 1e-5
  id: 1e16
  n: 016
  f: 1.0e1
  big: 0099999999999999999999
  hex: 0x10
  1e5: x
  l: [007, 2.50]
";
    let d = Deck::from_str_auto(text, "d.yaml").unwrap();
    assert_eq!(d.get_str("parthenon/job", "problem_id").unwrap(), "1e5");
    assert_eq!(d.get_usize("b", "n").unwrap(), 16);
    assert_eq!(d.get_f64("b", "f").unwrap(), 10.0);
    assert_eq!(d.get_i64("b", "hex").unwrap(), 16);
    assert_eq!(d.get_str("b", "1e5").unwrap(), "x");
    assert_eq!(d.get_list("b", "l").unwrap(), ["007", "2.50"]);
    let e = d.get_usize("b", "f").unwrap_err().to_string();
    assert!(e.ends_with("found '1.0e1'"), "{e}");
    let e = d.get_i64("b", "big").unwrap_err().to_string();
    assert!(
        e.starts_with("b/big at d.yaml:7: 0099999999999999999999"),
        "{e}"
    );
    // Printed and read back: the same text.
    let printed = d.to_yaml();
    assert!(printed.contains("  tol: 1e-5\n  id: 1e16\n"), "{printed}");
    let back = Deck::from_str_auto(&printed, "back.yaml").unwrap();
    for k in ["tol", "id", "n", "f", "big", "hex", "1e5"] {
        assert_eq!(
            back.get_str("b", k).unwrap(),
            d.get_str("b", k).unwrap(),
            "{k}"
        );
    }
    assert_eq!(back.get_str("parthenon/job", "problem_id").unwrap(), "1e5");
}

#[test]
fn numbers_that_round_to_zero_are_refused() {
    // Read as 0, a tolerance of 1e-400 would ask for something else than what was written.
    for (text, origin) in [
        ("b:\n  tol: 1e-400\n", "t.yaml:2"),
        ("<b>\ntol = 2.5E-999\n", "t.in:2"),
    ] {
        let name = if text.starts_with('<') {
            "t.in"
        } else {
            "t.yaml"
        };
        let d = Deck::from_str_auto(text, name).unwrap();
        let e = d.get_f64("b", "tol").unwrap_err().to_string();
        assert!(
            e.contains(origin) && e.contains("it would be read as 0"),
            "{e}"
        );
    }
    let mut d = yaml();
    d.apply_override("b/tol=0.0e-400").unwrap();
    d.apply_override("b/eps=1e-310").unwrap();
    assert_eq!(d.get_f64("b", "tol").unwrap(), 0.0);
    assert_eq!(d.get_f64("b", "eps").unwrap(), 1e-310);
    d.apply_override("parthenon/mesh/x1min=-1e-400").unwrap();
    let e = d.mesh_config().unwrap_err().to_string();
    assert!(
        e.contains("x1min") && e.contains("it would be read as 0"),
        "{e}"
    );
}

/// A key written with a path inside a block (`parthenon: {"mesh/nx1": 64}`) belongs to no
/// block a reader asks for: refused where it is written, in either format.
#[test]
fn a_key_with_a_path_inside_a_block_is_refused() {
    let text = "parthenon/mesh: {nx1: 32}\nparthenon:\n  \"mesh/nx1\": 64\n";
    match Deck::from_str_auto(text, "t.yaml") {
        Err(e @ DeckError::Syntax { line: 3, .. }) => {
            assert!(
                e.to_string().contains("key 'mesh/nx1' of block parthenon"),
                "{e}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn in_values_continue_over_lines_ending_in_ampersand() {
    let text = "<parthenon/output0>\nvariables = a, b, & # two\n\n   # a comment between\n  c, &\n  d\nid = x\n<par_end>\nthis is not read\n";
    let d = Deck::from_str_auto(text, "c.in").unwrap();
    assert_eq!(
        d.get_list("parthenon/output0", "variables").unwrap(),
        ["a", "b", "c", "d"]
    );
    assert_eq!(d.get_str("parthenon/output0", "id").unwrap(), "x");
    // The key is where its value began.
    assert_eq!(
        d.origin("parthenon/output0", "variables"),
        Some(&Origin::File {
            file: "c.in".into(),
            line: 2
        })
    );
    for (text, line, needle) in [
        ("<a>\nx = 1 & 2\n", 2, "'2' follows a continuation '&'"),
        (
            "<a>\nx = 1, &\n<b>\n",
            2,
            "goes on ('&') but a block header comes at line 3",
        ),
        (
            "<a>\nx = 1, &\n",
            2,
            "goes on ('&') but the deck ends first",
        ),
        ("<a>\nx = 1, &\n<par_end>\n", 2, "<par_end> comes at line 3"),
        ("<a>\nx = 1, &\n 2 & 3\n", 3, "'3' follows a continuation"),
        (
            "<a>\nx = 1, &\ny = 2\n",
            2,
            "the value of 'x' goes on ('&') but line 3 reads as a key of its own: 'y = 2'",
        ),
    ] {
        match Deck::from_str_auto(text, "t.in") {
            Err(e @ DeckError::Syntax { line: l, .. }) if l == line => {
                assert!(e.to_string().contains(needle), "{text:?}: {e}");
            }
            other => panic!("{text:?}: {other:?}"),
        }
    }
}

#[test]
fn parthenons_block_names_fill_ours() {
    let mut d = Deck::from_str_auto("<Advection>\ncfl = 0.45\n", "p.in").unwrap();
    d.apply_override("Advection/vx=2").unwrap();
    assert!(d.block("Advection").is_none());
    assert_eq!(d.get_f64("advection", "cfl").unwrap(), 0.45);
    assert_eq!(d.get_f64("advection", "vx").unwrap(), 2.0);
    // Both spellings are one block: a key in each is given twice.
    let e = Deck::from_str_auto("<advection>\ncfl = 1\n<Advection>\ncfl = 2\n", "p.in")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("advection/cfl is given twice (first at p.in:2)"),
        "{e}"
    );
    let y = Deck::from_str_auto("Advection: {cfl: 0.4}\n", "p.yaml").unwrap();
    assert_eq!(y.get_f64("advection", "cfl").unwrap(), 0.4);
}
