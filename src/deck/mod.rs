//! Input decks: a tree of blocks (Parthenon's slash paths such as `parthenon/mesh`), each an
//! ordered list of keys with values that remember the file and line they came from.
//!
//! Decks are read from YAML ([`yaml`]) or from Parthenon's `.in` format ([`parthenon_in`]),
//! then changed by command-line overrides `block/path/key=value`. Readers use the typed
//! getters; each getter marks its key as read, so that after a problem has read what it
//! needs, [`Deck::check_unread`] can report the keys that nothing used (usually typos) in
//! the blocks the driver knows.
//!
//! Getters come in pairs: `get_i64(block, key)` for a required key and
//! `get_i64_or(block, key, default)` for an optional one, likewise for `usize`, `f64`, `bool`,
//! `str` and lists. Their errors name the key, the file and the line, e.g.
//! `parthenon/mesh/nx1 at deck.yaml:3: expected an integer, found 'abc'`.

mod emit;
mod error;
pub mod parthenon_in;
mod value;
pub mod yaml;

pub use error::{DeckError, Origin, UnknownKey};
use value::parse_real;
pub use value::Value;

use starhalo_mesh::{MeshConfig, MeshError};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Blocks that Parthenon's own examples name otherwise, as (theirs, ours): their decks and
/// overrides fill our block, so `<Advection>` of Parthenon's advection example is
/// `advection`.
pub const BLOCK_ALIASES: &[(&str, &str)] = &[("Advection", "advection")];

/// One key of a block.
#[derive(Debug)]
pub struct Entry {
    /// The key (last path component).
    pub key: String,
    /// Its value.
    pub value: Value,
    /// Where it was given (the last place, when an override replaced it).
    pub origin: Origin,
    /// Set by the getters; read by [`Deck::check_unread`].
    read: Cell<bool>,
    /// Set by [`Deck::get_path`]: the value names a file relative to where it was given.
    path: Cell<bool>,
}

impl Entry {
    fn new(key: &str, value: Value, origin: Origin) -> Entry {
        Entry {
            key: key.to_string(),
            value,
            origin,
            read: Cell::new(false),
            path: Cell::new(false),
        }
    }

    /// The value as a file path: a relative path is taken relative to the directory of the
    /// deck file that gave it (overrides: the current directory).
    fn resolved_path(&self) -> Option<PathBuf> {
        let p = PathBuf::from(to_str(&self.value)?);
        let base = self.origin.file().and_then(|f| Path::new(f).parent());
        Some(match base {
            Some(dir) if p.is_relative() => dir.join(p),
            _ => p,
        })
    }
}

/// One block: a slash path and its keys in the order given.
#[derive(Debug)]
pub struct Block {
    /// The block path, e.g. `parthenon/mesh`.
    pub name: String,
    /// Where the block was first opened.
    pub origin: Origin,
    /// Its keys in order.
    pub entries: Vec<Entry>,
}

/// A parsed deck.
#[derive(Debug, Default)]
pub struct Deck {
    /// The file the deck came from, as the user named it.
    file: String,
    blocks: Vec<Block>,
    /// Every `block/key` a getter or [`Deck::has`] asked for, given or not: a reader's keys,
    /// which tell a value written as a block of keys from a key no one reads.
    asked: RefCell<BTreeSet<String>>,
}

impl Deck {
    /// An empty deck that claims to come from `file`.
    pub fn new(file: &str) -> Self {
        Deck {
            file: file.to_string(),
            ..Deck::default()
        }
    }

    /// Parses deck text: Parthenon's `.in` format when `file` ends in `.in` or the first
    /// meaningful line opens a `<block>`, YAML otherwise. `file` names the text in messages.
    pub fn from_str_auto(text: &str, file: &str) -> Result<Self, DeckError> {
        // A byte-order mark, as some Windows editors write one, is not part of the first line.
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let is_in = Path::new(file).extension().is_some_and(|e| e == "in")
            || text
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty() && !l.starts_with('#'))
                .is_some_and(|l| l.starts_with('<'));
        if is_in {
            parthenon_in::parse(text, file)
        } else {
            yaml::parse(text, file)
        }
    }

    /// The file the deck was read from.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The blocks in the order they were opened.
    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }

    /// The block named `name`, if present.
    pub fn block(&self, name: &str) -> Option<&Block> {
        self.blocks.iter().find(|b| b.name == name)
    }

    /// Opens a block (or returns the open one), remembering where it was first opened. A
    /// block Parthenon's examples name otherwise ([`BLOCK_ALIASES`]) opens ours.
    pub(crate) fn open_block(&mut self, name: &str, origin: Origin) -> usize {
        let name = BLOCK_ALIASES
            .iter()
            .find(|(theirs, _)| *theirs == name)
            .map_or(name, |(_, ours)| ours);
        if let Some(i) = self.blocks.iter().position(|b| b.name == name) {
            return i;
        }
        self.blocks.push(Block {
            name: name.to_string(),
            origin,
            entries: Vec::new(),
        });
        self.blocks.len() - 1
    }

    /// Adds a key to an open block; a key given twice in the files is an error (overrides
    /// replace instead, through [`Deck::apply_override`]).
    pub(crate) fn insert(
        &mut self,
        block: usize,
        key: &str,
        value: Value,
        origin: Origin,
    ) -> Result<(), DeckError> {
        let b = &mut self.blocks[block];
        let line = match &origin {
            Origin::File { line, .. } => *line,
            Origin::CommandLine => 0,
        };
        // `mesh/nx1` inside `parthenon` would read as `parthenon/mesh/nx1` yet belong to
        // neither block: a key is one name, the path is the block's.
        if key.contains('/') {
            return Err(DeckError::Syntax {
                file: origin.file().unwrap_or(&self.file).to_string(),
                line,
                msg: format!(
                    "key '{key}' of block {}: a key name holds no '/'; name the block by its \
                     whole path ({}/{}) and give the key there",
                    b.name,
                    b.name,
                    key.rsplit_once('/').map_or("", |(p, _)| p)
                ),
            });
        }
        if let Some(first) = b.entries.iter().find(|e| e.key == key) {
            return Err(DeckError::Syntax {
                file: origin.file().unwrap_or(&self.file).to_string(),
                line,
                msg: format!(
                    "{}/{key} is given twice (first at {})",
                    b.name, first.origin
                ),
            });
        }
        b.entries.push(Entry::new(key, value, origin));
        Ok(())
    }

    /// Applies `block/path/key=value`: the block path is everything before the last `/` of
    /// the left side. The value is text as written ([`Value::untyped`]); the key is created if absent.
    pub fn apply_override(&mut self, spec: &str) -> Result<(), DeckError> {
        let bad = |msg: &str| DeckError::BadOverride {
            spec: spec.to_string(),
            msg: msg.to_string(),
        };
        let (path, text) = spec
            .split_once('=')
            .ok_or_else(|| bad("expected block/key=value"))?;
        let (block, key) = path
            .trim()
            .rsplit_once('/')
            .ok_or_else(|| bad("expected block/key=value (the key needs a block path)"))?;
        if block.is_empty() || key.is_empty() || block.split('/').any(str::is_empty) {
            return Err(bad("empty block or key name"));
        }
        let value = Value::untyped(text);
        let b = self.open_block(block, Origin::CommandLine);
        let entries = &mut self.blocks[b].entries;
        match entries.iter_mut().find(|e| e.key == key) {
            Some(e) => {
                e.value = value;
                e.origin = Origin::CommandLine;
            }
            None => entries.push(Entry::new(key, value, Origin::CommandLine)),
        }
        Ok(())
    }

    /// The entry of `block/key`, marked as read.
    pub fn entry(&self, block: &str, key: &str) -> Option<&Entry> {
        let e = self.given(block, key)?;
        e.read.set(true);
        Some(e)
    }

    /// The entry of `block/key`, not marked as read (but noted as asked for).
    fn given(&self, block: &str, key: &str) -> Option<&Entry> {
        self.asked.borrow_mut().insert(format!("{block}/{key}"));
        self.block(block)?.entries.iter().find(|e| e.key == key)
    }

    /// Whether a getter or [`Deck::has`] asked for `block/key`, given or not.
    pub fn asked(&self, block: &str, key: &str) -> bool {
        self.asked.borrow().contains(&format!("{block}/{key}"))
    }

    /// Whether `block/key` is present (does not mark it read).
    pub fn has(&self, block: &str, key: &str) -> bool {
        self.given(block, key).is_some()
    }

    /// Marks keys as read by a reader that takes the deck another way (for instance
    /// [`Deck::flat_map`] handed to `MeshConfig::from_map`), so [`Deck::check_unread`]
    /// accepts them.
    pub fn mark_read(&self, block: &str, keys: &[&str]) {
        if let Some(b) = self.block(block) {
            for e in b.entries.iter().filter(|e| keys.contains(&e.key.as_str())) {
                e.read.set(true);
            }
        }
    }

    /// Keys of `block` that the deck gives but that do not apply to `what` (a file type, a
    /// profile: left by an override, say): each draws a warning naming where it was given
    /// and counts as read, so it is ignored rather than unknown.
    pub fn ignore<'k>(&self, block: &str, keys: impl IntoIterator<Item = &'k str>, what: &str) {
        for k in keys {
            if let Some(at) = self.origin(block, k) {
                tracing::warn!("{block}/{k} (at {at}) does not apply to {what}; ignored");
                self.mark_read(block, &[k]);
            }
        }
    }

    /// The mesh configuration (`parthenon/mesh`, `parthenon/meshblock`,
    /// `parthenon/static_refinementN`), read by `MeshConfig::from_map`; a key it rejects is
    /// reported at its file and line like the getters' errors. Marks the keys it reads.
    pub fn mesh_config(&self) -> anyhow::Result<MeshConfig> {
        // The mesh's blocks hold values only; the mesh reads them from a flat map, where a
        // value written as a block would look absent.
        self.values_only(|b| {
            ["mesh", "meshblock"].contains(&b) || b.starts_with("static_refinement")
        })?;
        let (config, read) =
            MeshConfig::from_map_keys(&self.flat_map()).map_err(|e| self.mesh_error(e))?;
        for path in &read {
            if let Some((block, key)) = path.rsplit_once('/') {
                self.mark_read(block, &[key]);
            }
        }
        Ok(config)
    }

    /// A mesh error as bad input: one that names a key is reported at the key's file and line
    /// (or as missing from its block), any other names the deck.
    pub fn mesh_error(&self, e: MeshError) -> anyhow::Error {
        match e {
            MeshError::Invalid { key, value, reason } => {
                // The mesh renders the number it parsed (`NaN` for `nan`): show the text.
                let (block, k) = key.rsplit_once('/').unwrap_or(("", &key));
                let value = self.given(block, k).map_or(value, |e| e.value.text());
                self.key_error(&key, &value, &reason).into()
            }
            MeshError::Missing { key } => {
                let (block, k) = key.rsplit_once('/').unwrap_or(("", &key));
                self.missing(block, k).into()
            }
            other => crate::exit::bad_input!("{}: {other}", self.file),
        }
    }

    /// `value` of `block/key` (a full path, as readers of [`Deck::flat_map`] name keys) is
    /// refused for `reason`; the error names where the key was given, or says that it is
    /// missing when it was not given and has no value.
    pub fn key_error(&self, path: &str, value: &str, reason: &str) -> DeckError {
        let (block, key) = path.rsplit_once('/').unwrap_or(("", path));
        let origin = self.origin(block, key).cloned();
        if origin.is_none() && value.is_empty() {
            return self.missing(block, key);
        }
        DeckError::Invalid {
            origin,
            path: path.to_string(),
            msg: format!("`{value}`: {reason}"),
        }
    }

    /// Every key as `block/key -> text` (lists as `[a, b]`), the form
    /// `starhalo_mesh::MeshConfig::from_map` takes. Marks nothing as read.
    pub fn flat_map(&self) -> BTreeMap<String, String> {
        self.blocks
            .iter()
            .flat_map(|b| {
                b.entries
                    .iter()
                    .map(move |e| (format!("{}/{}", b.name, e.key), e.value.text()))
            })
            .collect()
    }

    /// Where `block/key` was given, if it was.
    pub fn origin(&self, block: &str, key: &str) -> Option<&Origin> {
        self.given(block, key).map(|e| &e.origin)
    }

    fn missing(&self, block: &str, key: &str) -> DeckError {
        let where_ = match self.block(block) {
            Some(b) => format!("block {block} at {} has no key {key}", b.origin),
            None => format!("{} has no block {block}", self.file),
        };
        DeckError::Missing {
            path: format!("{block}/{key}"),
            where_,
        }
    }

    /// An error where `block/key`, which its reader takes as `expected`, was written as a
    /// block of keys (`ix1_bc: {a: 1}`): the reader would otherwise find no value there and
    /// take its default, or report the key missing.
    pub fn value_not_block(&self, block: &str, key: &str, expected: &str) -> Result<(), DeckError> {
        let path = format!("{block}/{key}");
        let inside = format!("{path}/");
        match (self.blocks.iter()).find(|b| b.name == path || b.name.starts_with(&inside)) {
            None => Ok(()),
            Some(b) => Err(DeckError::Invalid {
                path,
                origin: Some(b.origin.clone()),
                msg: format!("expected {expected}, found a block of keys"),
            }),
        }
    }

    /// [`value_not_block`](Self::value_not_block) for every key of each block
    /// `parthenon/<name>` with `holds_values(name)`: blocks whose keys are single values.
    pub fn values_only(&self, holds_values: impl Fn(&str) -> bool) -> Result<(), DeckError> {
        for b in &self.blocks {
            let parts: Vec<&str> = b.name.splitn(4, '/').collect();
            if let ["parthenon", name, key, ..] = parts[..] {
                if holds_values(name) {
                    self.value_not_block(&format!("parthenon/{name}"), key, "a single value")?;
                }
            }
        }
        Ok(())
    }

    fn required(&self, block: &str, key: &str) -> Result<&Entry, DeckError> {
        self.entry(block, key)
            .ok_or_else(|| self.missing(block, key))
    }

    /// An error for a value its reader refuses, naming where it was given (or that it is the
    /// reader's default).
    pub fn invalid(&self, block: &str, key: &str, msg: impl Into<String>) -> DeckError {
        DeckError::Invalid {
            path: format!("{block}/{key}"),
            origin: self.origin(block, key).cloned(),
            msg: msg.into(),
        }
    }

    /// Warns about each block that `used` does not select: decks may carry blocks for other
    /// problems, as in Parthenon, but a misspelt block name shows here.
    pub fn warn_unused_blocks(&self, used: impl Fn(&str) -> bool, reader: &str) {
        for b in self.blocks.iter().filter(|b| !used(&b.name)) {
            tracing::warn!("block {} (at {}) is not used by {reader}", b.name, b.origin);
        }
    }

    /// Reports every key that no getter read, in the blocks `known` selects; `reader` names
    /// who read the deck (e.g. "the driver and problem heat2d").
    pub fn check_unread(
        &self,
        known: impl Fn(&str) -> bool,
        reader: &str,
    ) -> Result<(), DeckError> {
        let keys: Vec<UnknownKey> = self
            .blocks
            .iter()
            .filter(|b| known(&b.name))
            .flat_map(|b| {
                b.entries
                    .iter()
                    .filter(|e| !e.read.get())
                    .map(|e| UnknownKey {
                        path: format!("{}/{}", b.name, e.key),
                        origin: e.origin.clone(),
                    })
            })
            .collect();
        if keys.is_empty() {
            Ok(())
        } else {
            Err(DeckError::Unknown {
                keys,
                reader: reader.to_string(),
            })
        }
    }

    /// The deck as YAML, overrides applied: what `starhalo run -n` prints.
    pub fn to_yaml(&self) -> String {
        emit::to_yaml(self)
    }
}

/// A typed reading of one entry: the getters convert with this and name the expected type.
fn typed<T>(
    e: &Entry,
    block: &str,
    expected: &'static str,
    conv: impl Fn(&Value) -> Option<T>,
) -> Result<T, DeckError> {
    conv(&e.value).ok_or_else(|| {
        let (path, found) = (format!("{block}/{}", e.key), e.value.text());
        // A whole number too large for 64 bits is an integer, just not one we can hold.
        let whole = found.trim().parse::<i128>();
        if expected.contains("integer") && whole.is_ok_and(|i| i64::try_from(i).is_err()) {
            return DeckError::Invalid {
                path,
                origin: Some(e.origin.clone()),
                msg: format!("{} is beyond the 64-bit integer range", found.trim()),
            };
        }
        if expected == "a number" && found.trim().parse::<f64>() == Ok(0.0) {
            return DeckError::Invalid {
                path,
                origin: Some(e.origin.clone()),
                msg: format!(
                    "{} is below the smallest 64-bit float (it would be read as 0)",
                    found.trim()
                ),
            };
        }
        DeckError::Type {
            path,
            origin: e.origin.clone(),
            expected,
            found,
        }
    })
}

fn to_i64(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::Str(s) | Value::Text(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn to_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Float(f) => Some(*f),
        Value::Int(i) => Some(*i as f64),
        Value::Str(s) | Value::Text(s) => parse_real(s),
        _ => None,
    }
}

fn to_bool(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::Str(s) | Value::Text(s) => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" | "on" | "1" => Some(true),
            "false" | "no" | "off" | "0" => Some(false),
            _ => None,
        },
        Value::Int(1) => Some(true),
        Value::Int(0) => Some(false),
        _ => None,
    }
}

fn to_str(v: &Value) -> Option<String> {
    match v {
        Value::List(_) => None,
        other => Some(other.text()),
    }
}

#[allow(dead_code)] // used by `get_list`, kept for output variable lists
fn to_list(v: &Value) -> Option<Vec<String>> {
    Some(match v {
        Value::List(items) => items.iter().map(Value::text).collect(),
        Value::Str(s) | Value::Text(s) => s
            .split(',')
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty())
            .collect(),
        other => vec![other.text()],
    })
}

fn to_usize(v: &Value) -> Option<usize> {
    to_i64(v).and_then(|i| usize::try_from(i).ok())
}

/// Defines a required getter and its `_or` form with a default.
macro_rules! getters {
    ($($get:ident, $get_or:ident, $t:ty, $dt:ty, $conv:ident, $what:literal;)*) => {$(
        #[doc = concat!("The required key `block/key` as ", $what, ".")]
        pub fn $get(&self, block: &str, key: &str) -> Result<$t, DeckError> {
            self.value_not_block(block, key, $what)?;
            typed(self.required(block, key)?, block, $what, $conv)
        }

        #[doc = concat!("`block/key` as ", $what, ", or `default` when absent.")]
        pub fn $get_or(&self, block: &str, key: &str, default: $dt) -> Result<$t, DeckError> {
            self.value_not_block(block, key, $what)?;
            match self.entry(block, key) {
                Some(e) => typed(e, block, $what, $conv),
                None => Ok(default.into()),
            }
        }
    )*};
}

// Every type has both forms so that the problems to come (advection, outputs) find what
// they need; the first problems use only some of them.
#[allow(dead_code)]
impl Deck {
    getters! {
        get_i64, get_i64_or, i64, i64, to_i64, "an integer";
        get_usize, get_usize_or, usize, usize, to_usize, "a non-negative integer";
        get_f64, get_f64_or, f64, f64, to_f64, "a number";
        get_bool, get_bool_or, bool, bool, to_bool, "true or false";
        get_str, get_str_or, String, &str, to_str, "a single value";
        get_list, get_list_or, Vec<String>, Vec<String>, to_list, "a list";
    }

    /// `block/key` as a finite number `>= 0` (a tolerance, a threshold, a time), or
    /// `default` when absent.
    pub fn get_nonneg_f64_or(
        &self,
        block: &str,
        key: &str,
        default: f64,
    ) -> Result<f64, DeckError> {
        let x = self.get_f64_or(block, key, default)?;
        if x.is_finite() && x >= 0.0 {
            Ok(x)
        } else {
            Err(self.invalid(block, key, "must be a finite number >= 0"))
        }
    }

    /// `block/key` as a file path; a relative path is taken relative to the directory of the
    /// deck file that gave it (overrides: the current directory). `None` when absent.
    pub fn get_path(&self, block: &str, key: &str) -> Result<Option<PathBuf>, DeckError> {
        self.value_not_block(block, key, "a file path")?;
        let Some(e) = self.entry(block, key) else {
            return Ok(None);
        };
        e.path.set(true);
        typed(e, block, "a file path", |_| e.resolved_path()).map(Some)
    }
}

#[cfg(test)]
mod tests;
