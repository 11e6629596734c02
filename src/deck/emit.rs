//! Writing a deck back as YAML (`starhalo run -n`), in block order with keys in order.

use super::{Deck, Origin};
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
    let _ = writeln!(
        out,
        "# {} with {overrides} command-line override{} applied",
        deck.file(),
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
            let _ = writeln!(out, "  {}: {}", key(&e.key), e.value.yaml());
        }
    }
    out
}

/// A mapping key: plain when safe, quoted like a string value otherwise.
fn key(k: &str) -> String {
    super::Value::Str(k.to_string()).yaml()
}
