//! C's `printf` conversions of one real (`%e`, `%f`, `%g` with flags, width and precision):
//! the `data_format` of Parthenon's history outputs, such as its default `%12.5e`, prints each
//! value with the same characters here as in Parthenon.

use std::fmt;

/// A format with exactly one real conversion, and spaces around it (a history line must stay
/// numbers between spaces, which its continuation after a restart reads back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CFormat {
    before: String,
    after: String,
    flags: Flags,
    width: usize,
    precision: Option<usize>,
    conv: char,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Flags {
    left: bool,
    plus: bool,
    space: bool,
    zero: bool,
    alt: bool,
}

/// Why a format was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatError(String);

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The widest field and the most digits a format may ask for.
const MAX_WIDTH: usize = 100;

impl CFormat {
    /// Parses `text`, which must hold one conversion `%[-+ 0#][width][.precision][l]`
    /// followed by one of `e E f F g G`, and nothing else but spaces.
    pub fn parse(text: &str) -> Result<Self, FormatError> {
        let err = |why: &str| FormatError(why.to_string());
        let mut text_so_far = String::new();
        let mut found: Option<(String, Flags, usize, Option<usize>, char)> = None;
        let mut chars = text.chars().peekable();
        // Digits of a width or precision, none for an empty one.
        let number = |chars: &mut std::iter::Peekable<std::str::Chars>| {
            let mut digits = String::new();
            while let Some(d) = chars.next_if(char::is_ascii_digit) {
                digits.push(d);
            }
            match digits.parse::<usize>() {
                _ if digits.is_empty() => Ok(None),
                Ok(n) if n <= MAX_WIDTH => Ok(Some(n)),
                _ => Err(err(&format!("widths and precisions go up to {MAX_WIDTH}"))),
            }
        };
        while let Some(c) = chars.next() {
            if c.is_whitespace() {
                text_so_far.push(c);
                continue;
            }
            if c != '%' {
                return Err(err("may hold only the conversion and spaces"));
            }
            if found.is_some() {
                return Err(err("holds more than one conversion"));
            }
            let mut flags = Flags::default();
            while let Some(f) = chars.next_if(|f| "-+ 0#".contains(*f)) {
                match f {
                    '-' => flags.left = true,
                    '+' => flags.plus = true,
                    ' ' => flags.space = true,
                    '0' => flags.zero = true,
                    _ => flags.alt = true,
                }
            }
            let width = number(&mut chars)?.unwrap_or(0);
            let precision = match chars.next_if_eq(&'.') {
                Some(_) => Some(number(&mut chars)?.unwrap_or(0)),
                None => None,
            };
            // `l` (`%le`, a double, as C allows) changes nothing.
            chars.next_if_eq(&'l');
            let conv = chars
                .next()
                .filter(|c| "eEfFgG".contains(*c))
                .ok_or_else(|| err("the conversion must be one of e, E, f, F, g, G"))?;
            found = Some((
                std::mem::take(&mut text_so_far),
                flags,
                width,
                precision,
                conv,
            ));
        }
        let (before, flags, width, precision, conv) =
            found.ok_or_else(|| err("needs a conversion such as %12.5e"))?;
        Ok(Self {
            before,
            after: text_so_far,
            flags,
            width,
            precision,
            conv,
        })
    }

    /// `x` as C's `printf(format, x)` prints it.
    pub fn format(&self, x: f64) -> String {
        let upper = self.conv.is_ascii_uppercase();
        let p = self.precision.unwrap_or(6);
        let a = x.abs();
        let body = match self.conv.to_ascii_lowercase() {
            _ if x.is_nan() => "nan".to_string(),
            _ if x.is_infinite() => "inf".to_string(),
            'e' => exponential(a, p, self.flags.alt),
            'f' => fixed(a, p, self.flags.alt),
            _ => general(a, p, self.flags.alt),
        };
        let body = if upper { body.to_uppercase() } else { body };
        // A NaN with its sign bit set prints `-nan`, as glibc prints it.
        let sign = if x.is_sign_negative() {
            "-"
        } else if self.flags.plus {
            "+"
        } else if self.flags.space {
            " "
        } else {
            ""
        };
        let len = sign.len() + body.len();
        let pad = self.width.saturating_sub(len);
        let field = if self.flags.left {
            format!("{sign}{body}{}", " ".repeat(pad))
        } else if self.flags.zero && x.is_finite() {
            format!("{sign}{}{body}", "0".repeat(pad))
        } else {
            format!("{}{sign}{body}", " ".repeat(pad))
        };
        format!("{}{field}{}", self.before, self.after)
    }
}

/// `a` (not negative, finite) as `d.ddde±XX` with `p` digits after the point.
fn exponential(a: f64, p: usize, alt: bool) -> String {
    let s = format!("{a:.p$e}");
    let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let point = if p == 0 && alt { "." } else { "" };
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{mantissa}{point}e{sign}{:02}", exp.abs())
}

/// `a` (not negative, finite) with `p` digits after the point.
fn fixed(a: f64, p: usize, alt: bool) -> String {
    let point = if p == 0 && alt { "." } else { "" };
    format!("{a:.p$}{point}")
}

/// `%g`: `p` significant digits, in the shorter of the two forms C picks by the exponent, with
/// trailing zeros dropped (kept with `#`).
fn general(a: f64, p: usize, alt: bool) -> String {
    let p = p.max(1);
    // The exponent after rounding to p digits decides the form.
    let e = format!("{a:.prec$e}", prec = p - 1);
    let exp: i64 = e.split_once('e').map_or(0, |(_, x)| x.parse().unwrap_or(0));
    let s = if exp < -4 || exp >= p as i64 {
        exponential(a, p - 1, alt)
    } else {
        fixed(a, (p as i64 - 1 - exp) as usize, alt)
    };
    if alt {
        return s;
    }
    let (digits, exp_part) = match s.find('e') {
        Some(i) => s.split_at(i),
        None => (s.as_str(), ""),
    };
    let digits = match digits.contains('.') {
        true => digits.trim_end_matches('0').trim_end_matches('.'),
        false => digits,
    };
    format!("{digits}{exp_part}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Expected strings are glibc's `printf` (Python's `%` operator agrees but for a padded
    /// infinity, which it pads with zeros).
    #[test]
    fn prints_as_c_does() {
        let cases: &[(&str, f64, &str)] = &[
            ("%12.5e", 1.06283178289948, " 1.06283e+00"),
            ("%12.5e", -0.000123456, "-1.23456e-04"),
            ("%12.5e", 0.0, " 0.00000e+00"),
            ("%12.5e", 6.02e23, " 6.02000e+23"),
            ("%.3e", 1e-300, "1.000e-300"),
            ("%e", 1234.5678, "1.234568e+03"),
            ("%.0e", 2.5, "2e+00"),
            ("%#.0e", 2.5, "2.e+00"),
            ("%E", 0.5, "5.000000E-01"),
            ("%10.3f", 3.14259, "     3.143"),
            ("%-10.3f", 3.14259, "3.143     "),
            ("%+.2f", 2.0, "+2.00"),
            ("% .2f", 2.0, " 2.00"),
            ("%010.3f", -3.14259, "-00003.143"),
            ("%.0f", 0.5, "0"),
            ("%.0f", 1.5, "2"),
            ("%.0f", 2.5, "2"),
            ("%g", 100000.0, "100000"),
            ("%g", 1000000.0, "1e+06"),
            ("%g", 0.0001, "0.0001"),
            ("%g", 0.00001234, "1.234e-05"),
            ("%g", 123.456, "123.456"),
            ("%.3g", 123.456, "123"),
            ("%.3g", 99999.0, "1e+05"),
            ("%.10g", 0.1, "0.1"),
            ("%#.3g", 1.0, "1.00"),
            ("%G", 1e-10, "1E-10"),
            ("%.0g", 0.0, "0"),
            ("%12.5e", f64::INFINITY, "         inf"),
            ("%012.5e", f64::NEG_INFINITY, "        -inf"),
            ("%F", f64::NAN, "NAN"),
            ("%e", -f64::NAN, "-nan"),
            ("%le", 0.5, "5.000000e-01"),
            ("  %.2f ", 1.0, "  1.00 "),
        ];
        for &(f, x, want) in cases {
            let got = CFormat::parse(f).unwrap().format(x);
            assert_eq!(got, want, "{f} of {x:e}");
        }
    }

    #[test]
    fn refuses_other_formats() {
        for (f, why) in [
            ("%d", "one of e, E"),
            ("%s", "one of e, E"),
            ("%12.5", "one of e, E"),
            ("abc", "only the conversion and spaces"),
            ("", "needs a conversion"),
            ("t=%e", "only the conversion and spaces"),
            ("%e%%", "more than one"),
            ("%e %e", "more than one"),
            ("%1000e", "up to 100"),
            ("%.200f", "up to 100"),
        ] {
            let e = CFormat::parse(f).unwrap_err();
            assert!(e.to_string().contains(why), "{f}: {e}");
        }
    }
}
