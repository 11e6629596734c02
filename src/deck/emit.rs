//! Writing a deck back as YAML (`starhalo run -n`), in block order with keys in order.

use super::{Deck, Entry, Origin};
use std::fmt::Write as _;

/// The deck as block-style YAML that [`super::yaml::parse`] reads back to the same values.
pub fn to_yaml(deck: &Deck) -> String {
    let mut out = String::new();
    let overrides = deck
        .blocks()
        .iter()
        .flat_map(|b| &b.entries)
        .filter(|e| e.origin == Origin::CommandLine)
        .count();
    // A control character in the file's name (a newline) would end the comment line.
    let mut file = String::new();
    for c in deck.file().chars() {
        if c.is_control() {
            file.extend(c.escape_default());
        } else {
            file.push(c);
        }
    }
    let _ = writeln!(
        out,
        "# {file} with {overrides} command-line override{} applied",
        if overrides == 1 { "" } else { "s" }
    );
    for b in deck.blocks() {
        let _ = writeln!(
            out,
            "{}:{}",
            key(&b.name),
            if b.entries.is_empty() { " {}" } else { "" }
        );
        for e in &b.entries {
            let _ = writeln!(out, "  {}: {}", key(&e.key), value(e));
        }
    }
    out
}

/// A value as YAML. A file path is written absolute, so that the printed deck finds the file
/// from wherever it is saved (a relative path was relative to the deck that gave it).
fn value(e: &Entry) -> String {
    match e.path.get().then(|| e.resolved_path()).flatten() {
        Some(p) => {
            let p = std::path::absolute(&p).unwrap_or(p);
            super::Value::Str(p.to_string_lossy().into_owned()).yaml()
        }
        None => e.value.yaml(),
    }
}

/// A mapping key: plain when safe, quoted like a string value otherwise.
fn key(k: &str) -> String {
    super::Value::Str(k.to_string()).yaml()
}
