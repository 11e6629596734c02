//! Matrix Market coordinate files (`%%MatrixMarket matrix coordinate real general`):
//! square matrices, `real`, `integer` or `pattern` values, `general`, `symmetric` or
//! `skew-symmetric` storage (the lower triangle, as the format prescribes; an entry above the
//! diagonal is an error rather than a doubled value). Errors name the file and line.

use super::matrix::Triplets;
use std::collections::HashMap;

/// Integers up to this magnitude are exact in an f64.
const EXACT: u64 = 1 << 53;

/// A malformed or unsupported Matrix Market file.
#[derive(Debug, thiserror::Error)]
#[error("{file}:{line}: {msg}")]
pub struct MtxError {
    pub file: String,
    pub line: usize,
    pub msg: String,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Field {
    Real,
    Integer,
    Pattern,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Symmetry {
    General,
    Symmetric,
    Skew,
}

/// Parses a Matrix Market file's text into sorted triplets (duplicates summed in file
/// order), mirroring the stored triangle of symmetric matrices. A size line announcing more
/// than `max_rows` rows is an error before any entry is read.
pub fn parse(text: &str, file: &str, max_rows: usize) -> Result<Triplets, MtxError> {
    let err = |line: usize, msg: String| MtxError {
        file: file.to_string(),
        line,
        msg,
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l.trim()));
    let (_, header) = lines
        .next()
        .ok_or_else(|| err(1, "empty file: expected a %%MatrixMarket header".into()))?;
    let words: Vec<String> = header
        .split_whitespace()
        .map(str::to_ascii_lowercase)
        .collect();
    let [banner, object, format, field, symmetry] = &words[..] else {
        return Err(err(
            1,
            format!("expected '%%MatrixMarket matrix coordinate FIELD SYMMETRY', found '{header}'"),
        ));
    };
    if banner != "%%matrixmarket" || object != "matrix" {
        return Err(err(
            1,
            format!("not a Matrix Market matrix header: '{header}'"),
        ));
    }
    if format != "coordinate" {
        return Err(err(
            1,
            format!("format '{format}' is not supported (coordinate only)"),
        ));
    }
    let field = match field.as_str() {
        "real" => Field::Real,
        "integer" => Field::Integer,
        "pattern" => Field::Pattern,
        other => {
            return Err(err(
                1,
                format!("field '{other}' is not supported (real, integer or pattern)"),
            ))
        }
    };
    let sym = match symmetry.as_str() {
        "general" => Symmetry::General,
        "symmetric" => Symmetry::Symmetric,
        "skew-symmetric" => Symmetry::Skew,
        other => {
            return Err(err(
                1,
                format!(
                    "symmetry '{other}' is not supported (general, symmetric or skew-symmetric)"
                ),
            ))
        }
    };
    let mut data = lines.filter(|(_, l)| !l.is_empty() && !l.starts_with('%'));
    let (size_line, size) = data
        .next()
        .ok_or_else(|| err(1, "no size line 'ROWS COLS ENTRIES'".into()))?;
    let dims: Vec<usize> = size
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|_| {
            err(
                size_line,
                format!("expected 'ROWS COLS ENTRIES', found '{size}'"),
            )
        })?;
    let [rows, cols, nnz] = dims[..] else {
        return Err(err(
            size_line,
            format!("expected 'ROWS COLS ENTRIES', found '{size}'"),
        ));
    };
    if rows != cols || rows == 0 {
        return Err(err(
            size_line,
            format!("the matrix is {rows} x {cols}; spmv needs a square, non-empty matrix"),
        ));
    }
    if rows > max_rows {
        return Err(err(
            size_line,
            format!("the matrix has {rows} rows, more than the {max_rows} accepted"),
        ));
    }
    let mut entries =
        Vec::with_capacity(nnz.min(1 << 24) * if sym == Symmetry::General { 1 } else { 2 });
    let mut count = 0;
    // Running sums of the integer entries at each position (integer files only).
    let mut int_sums: HashMap<(usize, usize), i128> = HashMap::new();
    let mut real_sums: HashMap<(usize, usize), f64> = HashMap::new();
    for (line, l) in data {
        count += 1;
        if count > nnz {
            return Err(err(
                line,
                format!("more entries than the {nnz} the size line announces"),
            ));
        }
        let mut it = l.split_whitespace();
        let mut index = |what: &str| -> Result<usize, MtxError> {
            let t = it
                .next()
                .ok_or_else(|| err(line, format!("missing {what} index")))?;
            match t.parse::<usize>() {
                Ok(k) if (1..=rows).contains(&k) => Ok(k - 1),
                _ => Err(err(
                    line,
                    format!("{what} index '{t}' is not in 1..={rows}"),
                )),
            }
        };
        let (i, j) = (index("row")?, index("column")?);
        let mut value = || it.next().ok_or_else(|| err(line, "missing value".into()));
        let v = match field {
            Field::Pattern => 1.0,
            Field::Real => {
                let t = value()?;
                let v = t
                    .parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite())
                    .ok_or_else(|| err(line, format!("value '{t}' is not a finite number")))?;
                // Duplicates are summed in file order, as here: a sum that overflows would
                // put an infinity in the matrix.
                let sum = real_sums.entry((i, j)).or_insert(0.0);
                *sum += v;
                if !sum.is_finite() {
                    return Err(err(
                        line,
                        format!(
                            "the entries at ({}, {}) sum beyond the largest double here",
                            i + 1,
                            j + 1
                        ),
                    ));
                }
                v
            }
            // Integers beyond 2^53 would be rounded silently when stored as f64, and so
            // would duplicates summing beyond it (they are summed in file order, as here).
            Field::Integer => {
                let t = value()?;
                let v = t
                    .parse::<i64>()
                    .ok()
                    .filter(|v| v.unsigned_abs() <= EXACT)
                    .ok_or_else(|| {
                        err(
                            line,
                            format!("value '{t}' is not an integer of at most 2^53 in magnitude"),
                        )
                    })?;
                let sum = int_sums.entry((i, j)).or_insert(0);
                *sum += i128::from(v);
                if sum.unsigned_abs() > u128::from(EXACT) {
                    return Err(err(
                        line,
                        format!(
                            "the entries at ({}, {}) sum to {sum} here, beyond 2^53 in magnitude",
                            i + 1,
                            j + 1
                        ),
                    ));
                }
                v as f64
            }
        };
        if i < j && sym != Symmetry::General {
            return Err(err(
                line,
                format!(
                    "entry ({}, {}) is above the diagonal; a symmetric or skew-symmetric file \
                     stores the lower triangle only",
                    i + 1,
                    j + 1
                ),
            ));
        }
        if sym == Symmetry::Skew && i == j {
            return Err(err(
                line,
                format!(
                    "a skew-symmetric matrix has a zero diagonal; entry ({}, {}) is on it",
                    i + 1,
                    j + 1
                ),
            ));
        }
        if let Some(extra) = it.next() {
            return Err(err(line, format!("unexpected '{extra}' after the entry")));
        }
        entries.push((i, j, v));
        if i != j {
            match sym {
                Symmetry::General => {}
                Symmetry::Symmetric => entries.push((j, i, v)),
                Symmetry::Skew => entries.push((j, i, -v)),
            }
        }
    }
    if count < nnz {
        return Err(err(
            text.lines().count().max(1),
            format!("the size line announces {nnz} entries but the file has {count}"),
        ));
    }
    Ok(Triplets::new(rows, entries))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_general_and_symmetric_files() {
        let t = parse(
            "%%MatrixMarket matrix coordinate real general\n% comment\n3 3 4\n1 1 2.5\n3 1 -1\n2 3 4\n1 1 0.5\n",
            "g.mtx",
            3,
        )
        .unwrap();
        assert_eq!(t.n, 3);
        // Sorted by (row, column), duplicates summed.
        assert_eq!(t.entries, [(0, 0, 3.0), (1, 2, 4.0), (2, 0, -1.0)]);
        let t = parse(
            "%%MatrixMarket matrix coordinate integer symmetric\n2 2 2\n1 1 4\n2 1 -1\n",
            "s.mtx",
            2,
        )
        .unwrap();
        assert_eq!(t.entries, [(0, 0, 4.0), (0, 1, -1.0), (1, 0, -1.0)]);
        let t = parse(
            "%%MatrixMarket matrix coordinate pattern skew-symmetric\n2 2 1\n2 1\n",
            "k.mtx",
            2,
        )
        .unwrap();
        assert_eq!(t.entries, [(0, 1, -1.0), (1, 0, 1.0)]);
        let bom = "\u{feff}%%MatrixMarket matrix coordinate real general\n1 1 1\n1 1 2\n";
        assert_eq!(parse(bom, "b.mtx", 1).unwrap().entries, [(0, 0, 2.0)]);
    }

    #[test]
    fn errors_name_file_and_line() {
        let h = "%%MatrixMarket matrix coordinate real general\n";
        for (body, line, needle) in [
            ("", 1, "no size line"),
            ("2 3 1\n", 2, "2 x 3"),
            ("2 2\n", 2, "expected 'ROWS COLS ENTRIES'"),
            ("2 2 1\n3 1 1.0\n", 3, "row index '3' is not in 1..=2"),
            ("2 2 1\n1 0 1.0\n", 3, "column index '0'"),
            ("2 2 1\n1 1 x\n", 3, "value 'x' is not a finite number"),
            ("2 2 1\n1 1\n", 3, "missing value"),
            ("2 2 1\n1 1 1 1\n", 3, "unexpected '1'"),
            ("2 2 1\n1 1 1\n2 2 1\n", 4, "more entries than the 1"),
            ("4 4 1\n1 1 1\n", 2, "4 rows, more than the 3 accepted"),
            (
                "2 2 3\n1 1 1\n",
                3,
                "announces 3 entries but the file has 1",
            ),
        ] {
            let e = parse(&format!("{h}{body}"), "m.mtx", 3).unwrap_err();
            assert_eq!(e.line, line, "{body:?}: {e}");
            assert!(e.to_string().starts_with(&format!("m.mtx:{line}: ")), "{e}");
            assert!(e.msg.contains(needle), "{body:?}: {e}");
        }
        for (head, body, line, needle) in [
            (
                "integer general",
                "2 2 1\n1 1 1.5\n",
                3,
                "value '1.5' is not an integer",
            ),
            (
                "integer general",
                "2 2 1\n1 1 9007199254740993\n",
                3,
                "at most 2^53",
            ),
            (
                "real skew-symmetric",
                "2 2 1\n2 2 1.0\n",
                3,
                "entry (2, 2) is on it",
            ),
            (
                "integer general",
                "2 2 3\n1 1 9007199254740992\n2 2 1\n1 1 1\n",
                5,
                "entries at (1, 1) sum to 9007199254740993 here",
            ),
            (
                "real general",
                "2 2 3\n1 1 1e308\n2 2 1\n1 1 1e308\n",
                5,
                "entries at (1, 1) sum beyond the largest double",
            ),
            (
                "real symmetric",
                "2 2 2\n2 1 1\n1 2 1\n",
                4,
                "entry (1, 2) is above",
            ),
            (
                "pattern skew-symmetric",
                "2 2 1\n1 2\n",
                3,
                "lower triangle only",
            ),
        ] {
            let text = format!("%%MatrixMarket matrix coordinate {head}\n{body}");
            let e = parse(&text, "m.mtx", 3).unwrap_err();
            assert_eq!(e.line, line, "{body:?}: {e}");
            assert!(e.msg.contains(needle), "{body:?}: {e}");
        }
        for header in [
            "%%MatrixMarket matrix array real general",
            "%%MatrixMarket matrix coordinate complex general",
            "%%MatrixMarket matrix coordinate real hermitian",
            "%%MatrixMarket vector coordinate real general",
            "hello",
        ] {
            let e = parse(&format!("{header}\n1 1 1\n1 1 1\n"), "m.mtx", 3).unwrap_err();
            assert_eq!(e.line, 1, "{e}");
        }
    }
}
