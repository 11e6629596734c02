//! What can be wrong with a deck, each message naming the key, the file and the line.

use std::fmt;
use std::sync::Arc;

/// Where a value (or a block) was given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A line of a deck file (1-based), the file named as the user gave it.
    File { file: Arc<str>, line: usize },
    /// A `block/key=value` argument on the command line.
    CommandLine,
}

impl Origin {
    /// The file the value came from, if any.
    pub fn file(&self) -> Option<&str> {
        match self {
            Origin::File { file, .. } => Some(file),
            Origin::CommandLine => None,
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File { file, line } => write!(f, "{file}:{line}"),
            Origin::CommandLine => f.write_str("the command line"),
        }
    }
}

/// A key that no reader of the deck used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownKey {
    /// `block/key`.
    pub path: String,
    /// Where it was given.
    pub origin: Origin,
}

/// A deck error; every variant is bad input (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum DeckError {
    /// The text is not a deck: malformed YAML or `.in`, a value that is not a block, a key
    /// given twice.
    #[error("{file}:{line}: {msg}")]
    Syntax {
        file: String,
        line: usize,
        msg: String,
    },
    /// A value of the wrong type.
    #[error("{path} at {origin}: expected {expected}, found '{found}'")]
    Type {
        path: String,
        origin: Origin,
        expected: &'static str,
        found: String,
    },
    /// A value of the right type that its reader refuses (out of range, unknown name).
    /// `origin` is `None` when the value is the reader's default.
    #[error("{path} {}: {msg}", match .origin { Some(o) => format!("at {o}"), None => "(default value)".into() })]
    Invalid {
        path: String,
        origin: Option<Origin>,
        msg: String,
    },
    /// A required key is absent.
    #[error("missing required key {path} ({where_})")]
    Missing { path: String, where_: String },
    /// Keys in blocks the driver knows that nothing read (usually a typo).
    #[error("{}", unknown_message(.keys, .reader))]
    Unknown {
        keys: Vec<UnknownKey>,
        reader: String,
    },
    /// A command-line override that is not `block/key=value`.
    #[error("command-line override '{spec}': {msg}")]
    BadOverride { spec: String, msg: String },
}

fn unknown_message(keys: &[UnknownKey], reader: &str) -> String {
    let list: Vec<String> = keys
        .iter()
        .map(|k| format!("{} at {}", k.path, k.origin))
        .collect();
    let s = if keys.len() == 1 { "" } else { "s" };
    format!("unknown key{s} (not read by {reader}): {}", list.join("; "))
}
