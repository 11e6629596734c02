//! Deck values: what a YAML scalar or list, a `.in` value or a command-line override holds.

use std::fmt;

/// One value of a deck key.
///
/// YAML decks keep the type YAML gave the scalar, except a number whose text that type would
/// change (`016`, `1e5`), kept as [`Value::Text`]; `.in` decks and command-line overrides hold
/// [`Value::Text`], kept as written (Parthenon stores every value as a string). The typed
/// getters of [`Deck`](super::Deck) accept text for any type, so a `problem_id` of `1e5`
/// stays `1e5` while `1e5` for a number is 100000.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `true` or `false`.
    Bool(bool),
    /// An integer that fits `i64`.
    Int(i64),
    /// A floating-point number.
    Float(f64),
    /// Any other scalar.
    Str(String),
    /// Untyped text from a `.in` deck or an override, or a YAML number, as written.
    Text(String),
    /// A sequence (`[a, b]` in YAML).
    List(Vec<Value>),
}

impl Value {
    /// Untyped text as written, less surrounding white space; `[a, b, ...]` is a list of
    /// such texts.
    pub fn untyped(text: &str) -> Value {
        let t = text.trim();
        match t.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            Some(inner) if inner.trim().is_empty() => Value::List(Vec::new()),
            Some(inner) => Value::List(inner.split(',').map(Value::untyped).collect()),
            None => Value::Text(t.to_string()),
        }
    }

    /// Types untyped text the way YAML would: `true`/`false`, then an integer, then a number with at least one
    /// digit, then `[a, b, ...]` as a list; anything else stays a string. Surrounding white
    /// space is dropped.
    pub fn infer(text: &str) -> Value {
        let t = text.trim();
        if let Some(inner) = t.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            let inner = inner.trim();
            if inner.is_empty() {
                return Value::List(Vec::new());
            }
            return Value::List(inner.split(',').map(Value::infer).collect());
        }
        match t {
            "true" => return Value::Bool(true),
            "false" => return Value::Bool(false),
            _ => {}
        }
        if let Ok(i) = t.parse::<i64>() {
            return Value::Int(i);
        }
        if t.bytes().any(|b| b.is_ascii_digit()) {
            // `1e400` overflows: it stays text, refused by a reader wanting a number, as a
            // YAML deck refuses it.
            if let Some(f) = parse_real(t).filter(|f| f.is_finite()) {
                return Value::Float(f);
            }
        }
        Value::Str(t.to_string())
    }

    /// The value as plain text, the way a `.in` deck would write it (lists as `[a, b]`, so that
    /// a list where one value belongs is never taken for that value).
    pub fn text(&self) -> String {
        match self {
            Value::Bool(b) => b.to_string(),
            Value::Int(i) => i.to_string(),
            Value::Float(f) => float_text(*f),
            Value::Str(s) | Value::Text(s) => s.clone(),
            Value::List(items) => format!(
                "[{}]",
                items.iter().map(Value::text).collect::<Vec<_>>().join(", ")
            ),
        }
    }

    /// The value as a YAML flow scalar or flow sequence that reads back as the same value.
    pub fn yaml(&self) -> String {
        match self {
            Value::Float(f) if f.is_nan() => ".nan".into(),
            Value::Float(f) if f.is_infinite() => if *f > 0.0 { ".inf" } else { "-.inf" }.into(),
            Value::Float(f) => yaml_float(*f),
            Value::Str(s) => yaml_string(s),
            // A number as written (`1e5`, `007`), which the deck reader keeps as written;
            // typed where the type's text is the text (`true`); a string otherwise.
            Value::Text(s) => match Value::infer(s) {
                Value::Int(_) | Value::Float(_) => s.clone(),
                // A non-finite number as YAML writes it (`.inf`) or a literal beyond f64
                // (`1e999`): plain, so that YAML reads a number.
                _ if is_yaml_non_finite(s) => s.clone(),
                typed if typed.text() == *s => typed.yaml(),
                _ => yaml_string(s),
            },
            Value::List(items) => format!(
                "[{}]",
                items.iter().map(Value::yaml).collect::<Vec<_>>().join(", ")
            ),
            other => other.text(),
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
    }
}

/// `t` as an `f64`, except a literal with a nonzero digit that rounds to zero (`1e-400`):
/// read as 0, a tolerance or a step would silently mean something else. YAML's spellings of
/// the non-finite values (`.inf`, `-.inf`, `.nan`) read as Rust's (`inf`, `-inf`, `NaN`), so
/// that each key decides whether it takes them.
pub(crate) fn parse_real(t: &str) -> Option<f64> {
    if let Some(x) = starhalo_mesh::config::yaml_non_finite(t) {
        return Some(x);
    }
    let f = t.trim().parse::<f64>().ok()?;
    (!starhalo_mesh::config::rounds_to_zero(t)).then_some(f)
}

/// Whether `s` is YAML's spelling of a non-finite number or a numeral that overflows f64
/// (not Rust's `inf` or `nan`, which YAML reads as strings).
pub(super) fn is_yaml_non_finite(s: &str) -> bool {
    starhalo_mesh::config::yaml_non_finite(s).is_some()
        || (s.bytes().any(|b| b.is_ascii_digit())
            && s.trim().parse::<f64>().is_ok_and(f64::is_infinite))
}

/// Shortest text that parses back to the same `f64`, always with a `.` or an exponent so
/// that it reads back as a float and not an integer.
fn float_text(f: f64) -> String {
    let s = format!("{f:?}");
    if s.contains(['.', 'e', 'E']) || !f.is_finite() {
        s
    } else {
        format!("{s}.0")
    }
}

/// A finite float as YAML that YAML 1.1 readers (PyYAML) take for a float too: a `.` in the
/// mantissa and a signed exponent (`1.0e-8`, `1.0e+23`), where `1e-8` would be a string.
fn yaml_float(f: f64) -> String {
    let s = format!("{f:?}");
    let (mantissa, exponent) = s.split_once('e').unwrap_or((&s, ""));
    let dot = if mantissa.contains('.') { "" } else { ".0" };
    match exponent {
        "" => format!("{mantissa}{dot}"),
        x if x.starts_with('-') => format!("{mantissa}{dot}e{x}"),
        x => format!("{mantissa}{dot}e+{x}"),
    }
}

/// A string as YAML: plain when it cannot be mistaken for anything else (not starting with
/// a digit either: YAML reads `0x10` and `1_000` as integers), single-quoted otherwise (YAML
/// doubles a quote inside single quotes), double-quoted with escapes where it holds control
/// characters (a newline, say), which single quotes cannot carry.
fn yaml_string(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-' | '+'))
        && !s.starts_with(['-', '.', '+'])
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && matches!(Value::infer(s), Value::Str(_))
        && !is_yaml_keyword(s);
    if plain {
        s.to_string()
    } else if s.chars().any(char::is_control) {
        let mut out = String::from('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                c if c.is_control() => out.push_str(&format!("\\u{:04x}", u32::from(c))),
                c => out.push(c),
            }
        }
        out.push('"');
        out
    } else {
        format!("'{}'", s.replace('\'', "''"))
    }
}

/// Words that YAML 1.1 readers take for booleans or null.
fn is_yaml_keyword(s: &str) -> bool {
    const WORDS: [&str; 12] = [
        "true", "false", "yes", "no", "on", "off", "y", "n", "null", "nan", "inf", "infinity",
    ];
    WORDS.iter().any(|w| w.eq_ignore_ascii_case(s)) || s == "~"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn infer_types_text() {
        assert_eq!(Value::infer(" 64 "), Value::Int(64));
        assert_eq!(Value::infer("-3"), Value::Int(-3));
        assert_eq!(Value::infer("0.4"), Value::Float(0.4));
        assert_eq!(Value::infer("1e-8"), Value::Float(1e-8));
        assert_eq!(Value::infer("0e5"), Value::Float(0.0));
        assert_eq!(Value::infer("1e-400"), Value::Str("1e-400".into()));
        assert_eq!(parse_real("-0.0e-400"), Some(-0.0));
        assert_eq!(parse_real("2.5E-999"), None);
        assert_eq!(Value::infer("true"), Value::Bool(true));
        assert_eq!(Value::infer("periodic"), Value::Str("periodic".into()));
        assert_eq!(Value::infer("inf"), Value::Str("inf".into()));
        assert_eq!(
            Value::infer("[a, 2]"),
            Value::List(vec![Value::Str("a".into()), Value::Int(2)])
        );
        assert_eq!(Value::infer("[]"), Value::List(vec![]));
    }

    #[test]
    fn untyped_text_is_kept_as_written() {
        let t = |s: &str| Value::Text(s.into());
        assert_eq!(Value::untyped(" 1e5 "), t("1e5"));
        assert_eq!(
            Value::untyped("[a, 007]"),
            Value::List(vec![t("a"), t("007")])
        );
        assert_eq!(Value::untyped("[ ]"), Value::List(vec![]));
        assert_eq!(t("1e5").text(), "1e5");
        // Numbers as written (the YAML reader keeps them so), other text typed where the type
        // keeps the text, quoted where it would not.
        for (text, yaml) in [
            ("64", "64"),
            ("-0.5", "-0.5"),
            ("true", "true"),
            ("1e-8", "1e-8"),
            ("periodic", "periodic"),
            ("1e5", "1e5"),
            ("007", "007"),
            ("1.50", "1.50"),
            ("yes", "'yes'"),
            ("0x10", "'0x10'"),
            // Beyond f64, and YAML's infinity: numbers still, which the key judges.
            ("1e400", "1e400"),
            (".inf", ".inf"),
        ] {
            assert_eq!(t(text).yaml(), yaml, "{text}");
        }
    }

    #[test]
    fn yaml_text_reads_back_as_the_same_type() {
        assert_eq!(Value::Float(1.0).yaml(), "1.0");
        assert_eq!(Value::Float(1e-8).yaml(), "1.0e-8");
        assert_eq!(Value::Float(1e23).yaml(), "1.0e+23");
        assert_eq!(Value::Float(-2.5e-7).yaml(), "-2.5e-7");
        assert_eq!(Value::Float(1000.0).yaml(), "1000.0");
        for f in [
            1e-8,
            1e23,
            -2.5e-7,
            0.1,
            1000.0,
            f64::MAX,
            f64::MIN_POSITIVE,
        ] {
            let y = Value::Float(f).yaml();
            assert_eq!(y.parse::<f64>().unwrap().to_bits(), f.to_bits(), "{y}");
            assert_eq!(Value::infer(&y), Value::Float(f), "{y}");
        }
        assert_eq!(Value::Str("64".into()).yaml(), "'64'");
        assert_eq!(Value::Str("yes".into()).yaml(), "'yes'");
        assert_eq!(Value::Str("it's".into()).yaml(), "'it''s'");
        assert_eq!(Value::Str("0x10".into()).yaml(), "'0x10'");
        assert_eq!(Value::Str("1_000".into()).yaml(), "'1_000'");
        assert_eq!(Value::Str("a\nb\u{7}\"".into()).yaml(), r#""a\nb\u0007\"""#);
        assert_eq!(Value::infer("1e400"), Value::Str("1e400".into()));
        assert_eq!(Value::Str("advected".into()).yaml(), "advected");
        assert_eq!(Value::Str("matrices/a.mtx".into()).yaml(), "matrices/a.mtx");
        assert_eq!(Value::Float(f64::NEG_INFINITY).yaml(), "-.inf");
    }
}
