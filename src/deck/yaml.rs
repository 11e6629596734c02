//! YAML decks, read with `serde-saphyr`: every top-level key is a block whose value is a
//! mapping; a mapping nested inside a block is a sub-block (`parthenon: {mesh: {nx1: 8}}` is
//! the block `parthenon/mesh`). Values are scalars or lists. Spans from `serde-saphyr` give
//! each key and value its line, and the text of a number as written, kept where YAML's
//! typing would change it (`016`, `1e5`).

use super::{Deck, DeckError, Origin, Value};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;
use std::fmt;
use std::sync::Arc;

/// A YAML node as the deck sees it.
enum Node {
    Null,
    Scalar(Value),
    List(Vec<Spanned<Node>>),
    Map(Vec<(Spanned<Key>, Spanned<Node>)>),
}

/// A mapping key: any scalar, read as text by [`key_text`].
struct Key(Value);

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a scalar, a list or a mapping")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Scalar(Value::Bool(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Scalar(Value::Int(v)))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
        // Integers beyond i64 stay text, so the getters report them as out of range.
        Ok(Node::Scalar(match i64::try_from(v) {
            Ok(i) => Value::Int(i),
            Err(_) => Value::Str(v.to_string()),
        }))
    }
    fn visit_i128<E>(self, v: i128) -> Result<Node, E> {
        Ok(Node::Scalar(Value::Str(v.to_string())))
    }
    fn visit_u128<E>(self, v: u128) -> Result<Node, E> {
        Ok(Node::Scalar(Value::Str(v.to_string())))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Scalar(Value::Float(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Scalar(Value::Str(v.to_string())))
    }
    fn visit_string<E>(self, v: String) -> Result<Node, E> {
        Ok(Node::Scalar(Value::Str(v)))
    }
    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<Node>>()? {
            items.push(item);
        }
        Ok(Node::List(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(k) = map.next_key::<Spanned<Key>>()? {
            let v = map.next_value::<Spanned<Node>>()?;
            entries.push((k, v));
        }
        Ok(Node::Map(entries))
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Node::deserialize(d)? {
            Node::Scalar(v) => Ok(Key(v)),
            _ => Err(de::Error::custom("a deck key must be a plain scalar")),
        }
    }
}

/// A number as written (`016`, `1e5`, `1.0e-8`; an integer where its text is not the one of
/// the value YAML typed it as) that reads back as that value: the deck keeps text as written,
/// as a `.in` deck does. Anything else (`0x10`, a string) stays as YAML typed it.
fn as_written(v: Value, at: &serde_saphyr::Location, text: &str) -> Value {
    let span = at.span();
    let raw = span
        .byte_offset()
        .zip(span.byte_len())
        .and_then(|(o, n)| text.get(o as usize..(o + n) as usize));
    match (&v, raw) {
        (Value::Int(i), Some(raw)) if raw.parse() == Ok(*i) && raw != i.to_string() => {
            Value::Text(raw.to_string())
        }
        // Every float: its text as written is also the text `-n` prints (`1e-5`, not `1.0e-5`).
        (Value::Float(f), Some(raw)) if raw.parse() == Ok(*f) => Value::Text(raw.to_string()),
        // A non-finite number (`1e999`, `.Inf`), which the visitor wrote in YAML's spelling.
        (Value::Str(_), Some(raw)) if super::value::is_yaml_non_finite(raw) => {
            Value::Text(raw.to_string())
        }
        // An integer beyond 64 bits, which the visitor wrote out without its leading zeros.
        (Value::Str(s), Some(raw))
            if s.parse::<i128>().is_ok() && raw.parse::<i128>() == s.parse::<i128>() =>
        {
            Value::Text(raw.to_string())
        }
        _ => v,
    }
}

/// The text of a key: a number as written (a key `1e5` is `1e5`, not `100000.0`).
fn key_text(k: &Spanned<Key>, text: &str) -> String {
    as_written(k.value.0.clone(), &k.defined, text).text()
}

/// Parses YAML deck text; `file` names it in messages.
pub fn parse(text: &str, file: &str) -> Result<Deck, DeckError> {
    let syntax = |line: usize, msg: String| DeckError::Syntax {
        file: file.to_string(),
        line,
        msg,
    };
    // Only `true` and `false` are booleans: keys such as `n` or `on` stay text, as in
    // Parthenon. The snippet is left out: the message names the line itself.
    // Non-finite numbers (`.inf`, `1e999`) come as text, for the key that reads them to judge.
    let options = serde_saphyr::options! {
        strict_booleans: true,
        with_snippet: false,
        reject_non_finite_typeless_float: false,
    };
    let root: Spanned<Node> = serde_saphyr::from_str_with_options(text, options).map_err(|e| {
        let line = e.location().map_or(0, |l| l.line() as usize);
        syntax(
            line,
            format!("malformed YAML: {}", clean_message(&e.to_string())),
        )
    })?;
    let mut deck = Deck::new(file);
    let file_arc: Arc<str> = Arc::from(file);
    let at = |s: &Spanned<Node>| s.referenced.line() as usize;
    match root.value {
        Node::Null => Ok(deck),
        Node::Map(entries) => {
            for (k, v) in entries {
                let name = key_text(&k, text);
                // A block is where its name is written (its keys may start a line below).
                let line = match k.referenced.line() as usize {
                    0 => at(&v),
                    l => l,
                };
                match v.value {
                    Node::Map(inner) => {
                        add_block(&mut deck, &name, inner, line, &file_arc, text)?;
                    }
                    // `block:` with nothing under it is an empty block.
                    Node::Null => add_block(&mut deck, &name, Vec::new(), line, &file_arc, text)?,
                    _ => {
                        let why = "must be a block (a mapping of keys to values)";
                        let line = k.referenced.line() as usize;
                        return Err(syntax(line, format!("top-level key '{name}' {why}")));
                    }
                }
            }
            Ok(deck)
        }
        _ => Err(syntax(
            at(&root),
            "a deck is a mapping of block names to blocks".into(),
        )),
    }
}

/// A `serde-saphyr` message without what ours already says (the position) or what only a
/// programmer could act on (its option names).
fn clean_message(msg: &str) -> String {
    let first = msg.lines().next().unwrap_or(msg).trim();
    let first = first.strip_prefix("error: ").unwrap_or(first);
    let first = match first.strip_prefix("line ").and_then(|r| r.split_once(": ")) {
        Some((pos, rest)) if pos.contains("column") => match pos.split_once("column") {
            Some((_, col)) => format!("column {}: {rest}", col.trim()),
            None => rest.to_string(),
        },
        _ => first.to_string(),
    };
    let first = match first.rsplit_once(" at line ") {
        Some((head, pos)) if pos.contains("column") => head.to_string(),
        _ => first,
    };
    let first = first
        .replace("non-finite float ", "")
        .replace(
            "rejected by reject_non_finite_typeless_float",
            "is not a finite number",
        )
        .replace(
            "detected; use from_multiple or from_multiple_with_options",
            "in one file; a deck is one document",
        );
    match first.split_once(", set DuplicateKeyPolicy") {
        Some((head, _)) => head.to_string(),
        None => first,
    }
}

fn add_block(
    deck: &mut Deck,
    name: &str,
    entries: Vec<(Spanned<Key>, Spanned<Node>)>,
    line: usize,
    file: &Arc<str>,
    text: &str,
) -> Result<(), DeckError> {
    let origin = |line: u64| Origin::File {
        file: file.clone(),
        line: line as usize,
    };
    if name.is_empty() || name.split('/').any(str::is_empty) {
        return Err(DeckError::Syntax {
            file: file.to_string(),
            line,
            msg: format!("'{name}' is not a block name (slash-separated, no empty parts)"),
        });
    }
    // A mapping that only holds blocks (`parthenon: {job: {...}}`) is not a block itself,
    // which no reader would use; an empty one (`block: {}`) is.
    let block_origin = origin(line as u64);
    if entries.is_empty() {
        deck.open_block(name, block_origin.clone());
    }
    let mut block = None;
    for (k, v) in entries {
        let key = key_text(&k, text);
        let line = v.referenced.line();
        match v.value {
            Node::Map(inner) => {
                let sub = format!("{name}/{key}");
                add_block(deck, &sub, inner, k.referenced.line() as usize, file, text)?;
            }
            node => {
                let value = to_value(node, &v.defined, text).map_err(|msg| DeckError::Syntax {
                    file: file.to_string(),
                    line: line as usize,
                    msg: format!("{name}/{key}: {msg}"),
                })?;
                let b = *block.get_or_insert_with(|| deck.open_block(name, block_origin.clone()));
                deck.insert(b, &key, value, origin(k.referenced.line()))?;
            }
        }
    }
    Ok(())
}

fn to_value(node: Node, at: &serde_saphyr::Location, text: &str) -> Result<Value, String> {
    match node {
        Node::Scalar(v) => Ok(as_written(v, at, text)),
        Node::Null => Err("has no value".into()),
        Node::List(items) => items
            .into_iter()
            .map(|s| to_value(s.value, &s.defined, text))
            .collect::<Result<_, _>>()
            .map(Value::List),
        Node::Map(_) => Err("a list may not hold mappings".into()),
    }
}
