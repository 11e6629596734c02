//! Parthenon's `.in` decks: `<block/path>` opens a block, `key = value` sets a key, `#`
//! starts a comment, a value ending in `&` goes on over the next lines (each a piece of
//! the value, the last without `&`), and `<par_end>` ends the deck. Values are text, kept
//! as written ([`Value::untyped`]).

use super::{Deck, DeckError, Origin, Value};
use std::sync::Arc;

/// A key whose value goes on over the next lines: where it began and its text so far.
struct Continued {
    block: usize,
    key: String,
    value: String,
    origin: Origin,
    line: usize,
}

/// Parses `.in` deck text; `file` names it in messages.
pub fn parse(text: &str, file: &str) -> Result<Deck, DeckError> {
    let mut deck = Deck::new(file);
    let file_arc: Arc<str> = Arc::from(file);
    let mut block: Option<usize> = None;
    let mut continued: Option<Continued> = None;
    let syntax = |line: usize, msg: String| DeckError::Syntax {
        file: file.to_string(),
        line,
        msg,
    };
    let unfinished = |c: &Continued, what: &str| {
        syntax(
            c.line,
            format!("the value of '{}' goes on ('&') but {what}", c.key),
        )
    };
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let origin = Origin::File {
            file: file_arc.clone(),
            line,
        };
        let content = raw.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            continue;
        }
        if content.starts_with("<par_end>") {
            if let Some(c) = &continued {
                return Err(unfinished(c, &format!("<par_end> comes at line {line}")));
            }
            break;
        }
        if let Some(c) = continued.as_mut() {
            if content.starts_with('<') {
                return Err(unfinished(
                    c,
                    &format!("a block header comes at line {line}"),
                ));
            }
            // Parthenon would take `name = value` here for a key of its own, and lose it.
            if content.contains('=') {
                return Err(unfinished(
                    c,
                    &format!("line {line} reads as a key of its own: '{content}'"),
                ));
            }
            let (piece, goes_on) = split_continuation(content).map_err(|m| syntax(line, m))?;
            c.value.push_str(piece);
            if !goes_on {
                let c = continued.take().expect("a continued value");
                deck.insert(c.block, &c.key, Value::untyped(&c.value), c.origin)?;
            }
            continue;
        }
        if let Some(rest) = content.strip_prefix('<') {
            let name = rest
                .strip_suffix('>')
                .ok_or_else(|| {
                    syntax(
                        line,
                        format!("block header '{content}' lacks its closing '>'"),
                    )
                })?
                .trim();
            if name.is_empty() || name.split('/').any(str::is_empty) {
                return Err(syntax(
                    line,
                    format!("'{name}' is not a block name (slash-separated, no empty parts)"),
                ));
            }
            block = Some(deck.open_block(name, origin));
            continue;
        }
        let Some((key, value)) = content.split_once('=') else {
            return Err(syntax(
                line,
                format!("expected '<block>' or 'key = value', found '{content}'"),
            ));
        };
        let key = key.trim();
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Err(syntax(line, format!("'{key}' is not a key name")));
        }
        let Some(b) = block else {
            return Err(syntax(
                line,
                format!("key '{key}' comes before any <block> header"),
            ));
        };
        let (value, goes_on) = split_continuation(value).map_err(|m| syntax(line, m))?;
        if goes_on {
            continued = Some(Continued {
                block: b,
                key: key.to_string(),
                value: value.to_string(),
                origin,
                line,
            });
            continue;
        }
        if value.is_empty() {
            return Err(syntax(line, format!("key '{key}' has no value")));
        }
        deck.insert(b, key, Value::untyped(value), origin)?;
    }
    if let Some(c) = &continued {
        return Err(unfinished(c, "the deck ends first"));
    }
    Ok(deck)
}

/// A value's text on one line, trimmed, and whether it goes on (ends in `&`, as Parthenon
/// reads it: nothing but spaces may follow the `&`).
fn split_continuation(text: &str) -> Result<(&str, bool), String> {
    match text.split_once('&') {
        None => Ok((text.trim(), false)),
        Some((piece, rest)) if rest.trim().is_empty() => Ok((piece.trim(), true)),
        Some((_, rest)) => Err(format!(
            "'{}' follows a continuation '&'; only a comment may",
            rest.trim()
        )),
    }
}
