//! Parthenon's `.in` decks: `<block/path>` opens a block, `key = value` sets a key, `#`
//! starts a comment. Values are text, kept as written ([`Value::untyped`]).

use super::{Deck, DeckError, Origin, Value};
use std::sync::Arc;

/// Parses `.in` deck text; `file` names it in messages.
pub fn parse(text: &str, file: &str) -> Result<Deck, DeckError> {
    let mut deck = Deck::new(file);
    let file_arc: Arc<str> = Arc::from(file);
    let mut block: Option<usize> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let syntax = |msg: String| DeckError::Syntax {
            file: file.to_string(),
            line,
            msg,
        };
        let origin = Origin::File {
            file: file_arc.clone(),
            line,
        };
        let content = raw.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            continue;
        }
        if let Some(rest) = content.strip_prefix('<') {
            let name = rest
                .strip_suffix('>')
                .ok_or_else(|| syntax(format!("block header '{content}' lacks its closing '>'")))?
                .trim();
            if name.is_empty() || name.split('/').any(str::is_empty) {
                return Err(syntax(format!(
                    "'{name}' is not a block name (slash-separated, no empty parts)"
                )));
            }
            block = Some(deck.open_block(name, origin));
            continue;
        }
        let Some((key, value)) = content.split_once('=') else {
            return Err(syntax(format!(
                "expected '<block>' or 'key = value', found '{content}'"
            )));
        };
        let key = key.trim();
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Err(syntax(format!("'{key}' is not a key name")));
        }
        let Some(b) = block else {
            return Err(syntax(format!(
                "key '{key}' comes before any <block> header"
            )));
        };
        if value.trim().is_empty() {
            return Err(syntax(format!("key '{key}' has no value")));
        }
        deck.insert(b, key, Value::untyped(value), origin)?;
    }
    Ok(deck)
}
