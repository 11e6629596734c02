//! An output block of the deck (`parthenon/outputN`) and the names of the files it writes.

use super::error::OutputError;
use std::collections::BTreeMap;

/// What an output block writes (`file_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileType {
    /// `hdf5`: a `.phdf` file and its `.xdmf` index.
    Hdf5,
    /// `rst`: a `.rhdf` restart file.
    Restart,
    /// `hst`: one line per output appended to the history file.
    History,
    /// `png`: a slice of one variable.
    Png,
}

impl FileType {
    /// Every type, in the order the deck's error messages list them.
    pub const ALL: [FileType; 4] = [
        FileType::Hdf5,
        FileType::Restart,
        FileType::History,
        FileType::Png,
    ];

    /// The deck's name of the type.
    pub fn name(self) -> &'static str {
        match self {
            FileType::Hdf5 => "hdf5",
            FileType::Restart => "rst",
            FileType::History => "hst",
            FileType::Png => "png",
        }
    }

    /// Whether outputs of this type read `key` (one of [`OutputBlock::keys`]); the others
    /// are ignored, as Parthenon ignores them.
    pub fn applies(self, key: &str) -> bool {
        COMMON_KEYS.contains(&key) || self.own_keys().contains(&key)
    }

    /// The keys that only outputs of this type read.
    fn own_keys(self) -> &'static [&'static str] {
        match self {
            FileType::Hdf5 => &["variables", "ghost_zones", "single_precision_output"],
            FileType::Restart | FileType::History => &[],
            FileType::Png => &[
                "variable",
                "x3",
                "slice",
                "width",
                "height",
                "range_min",
                "range_max",
            ],
        }
    }
}

/// The keys every output block may have.
const COMMON_KEYS: [&str; 4] = ["file_type", "id", "dt", "dn"];

/// The longest `parthenon/job/problem_id` and output `id`, in bytes: the file names built of
/// both, a number and an extension then stay within the 255 bytes a file name may have.
pub const MAX_NAME_PART: usize = 100;

/// The number part of a file name: the output count, or `final` for the last output of a run
/// stopped by its wall-time limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileNumber {
    /// Zero-padded to five digits.
    Step(u32),
    /// `final`.
    Final,
}

/// One `parthenon/outputN` block.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputBlock {
    /// The deck block, `parthenon/output<N>`, for error messages.
    pub block: String,
    /// `id`, default `out<N>`: the middle part of the file names.
    pub id: String,
    /// `file_type`.
    pub file_type: FileType,
    /// `dt`: simulation time between outputs (`None`: not time-driven).
    pub dt: Option<f64>,
    /// `dn`: cycles between outputs (`None`: not cycle-driven).
    pub dn: Option<u64>,
    /// `variables`: the variables to write; `None` writes every cell-centred variable.
    pub variables: Option<Vec<String>>,
    /// `ghost_zones`: write ghost cells too (default false, which yt needs).
    pub ghost_zones: bool,
    /// `single_precision_output`: write variables as float32.
    pub single_precision: bool,
    /// PNG: `variable` (a variable name, or a component name such as `vel_1`).
    pub png_variable: Option<String>,
    /// PNG: the x3 position of the slice of a 3-D mesh (`x3`, or `slice`: a cell index of the
    /// root grid along x3). Default: the middle of the domain.
    pub png_x3: Option<PngSlice>,
    /// PNG: image size in pixels (`width`, `height`; default 512 wide, height by aspect).
    pub png_size: (Option<u32>, Option<u32>),
    /// PNG: colour range (`range_min`, `range_max`; default the data's range).
    pub png_range: (Option<f64>, Option<f64>),
}

/// Where a PNG slices a 3-D mesh.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PngSlice {
    /// A physical x3 position.
    Position(f64),
    /// A cell index along x3 on the root grid.
    RootIndex(usize),
}

/// The file name `<problem_id>.<id>.<NNNNN>.<ext>` (or `.final.`), as Parthenon names them:
/// its tools find outputs by this pattern.
pub fn file_name(problem_id: &str, id: &str, number: FileNumber, ext: &str) -> String {
    match number {
        FileNumber::Step(n) => format!("{problem_id}.{id}.{n:05}.{ext}"),
        FileNumber::Final => format!("{problem_id}.{id}.final.{ext}"),
    }
}

impl OutputBlock {
    /// Whether the block writes at all: with neither a positive `dt` nor a positive `dn` it is
    /// disabled, as Parthenon disables a block with `dt < 0`, and writes no final output either.
    pub fn enabled(&self) -> bool {
        self.dt.is_some() || self.dn.is_some()
    }

    /// A block of `file_type` named `out<n>` with every other key at its default.
    pub fn new(n: usize, file_type: FileType) -> Self {
        Self {
            block: format!("parthenon/output{n}"),
            id: format!("out{n}"),
            file_type,
            dt: None,
            dn: None,
            variables: None,
            ghost_zones: false,
            single_precision: false,
            png_variable: None,
            png_x3: None,
            png_size: (None, None),
            png_range: (None, None),
        }
    }

    /// Every key [`from_map`](Self::from_map) reads, of any file type.
    pub fn keys() -> impl Iterator<Item = &'static str> {
        COMMON_KEYS.into_iter().chain(
            FileType::ALL
                .into_iter()
                .flat_map(|t| t.own_keys().iter().copied()),
        )
    }

    /// Reads the keys of deck block `block`, output number `n` (`parthenon/output<n>`, where
    /// `parthenon/output01` is number 1 too, as in Parthenon), from a deck flattened to
    /// `block/key` → value strings (the form `MeshConfig::from_map` takes). Lists may be
    /// written `a, b` or `[a, b]`.
    pub fn from_map(
        map: &BTreeMap<String, String>,
        block: &str,
        n: usize,
    ) -> Result<Self, OutputError> {
        let prefix = format!("{block}/");
        let given = |k: &str| map.get(&format!("{prefix}{k}")).map(|v| v.trim());
        let bad = |k: &str, v: &str, why: &str| OutputError::Invalid {
            key: format!("{prefix}{k}"),
            value: v.to_string(),
            reason: why.to_string(),
        };
        let file_type = match given("file_type") {
            None => return Err(bad("file_type", "", "missing (hdf5, rst, hst or png)")),
            Some(v) => match FileType::ALL.into_iter().find(|t| t.name() == v) {
                Some(t) => t,
                None => return Err(bad("file_type", v, "expected hdf5, rst, hst or png")),
            },
        };
        // Keys of other file types are not read (nor checked).
        let get = |k: &str| given(k).filter(|_| file_type.applies(k));
        let mut b = Self {
            block: block.to_string(),
            ..Self::new(n, file_type)
        };
        if let Some(v) = get("id") {
            if v.is_empty()
                || v.contains(['/', '\\'])
                || v.chars().any(char::is_whitespace)
                || v.len() > MAX_NAME_PART
            {
                return Err(bad(
                    "id",
                    v,
                    &format!(
                        "must be a non-empty name of at most {MAX_NAME_PART} bytes without `/` or spaces"
                    ),
                ));
            }
            b.id = v.to_string();
        }
        let real = |k: &str| -> Result<Option<f64>, OutputError> {
            get(k)
                .map(|v| {
                    v.parse::<f64>()
                        .ok()
                        .filter(|x| x.is_finite())
                        .ok_or_else(|| bad(k, v, "expected a finite number"))
                })
                .transpose()
        };
        let flag = |k: &str| -> Result<bool, OutputError> {
            match get(k) {
                None | Some("false") => Ok(false),
                Some("true") => Ok(true),
                Some(v) => Err(bad(k, v, "expected true or false")),
            }
        };
        let size = |k: &str| -> Result<Option<u32>, OutputError> {
            get(k)
                .map(|v| {
                    v.parse::<u32>()
                        .ok()
                        .filter(|&p| (8..=16384).contains(&p))
                        .ok_or_else(|| bad(k, v, "expected a pixel count in 8..=16384"))
                })
                .transpose()
        };
        b.dt = real("dt")?;
        // Parthenon disables an output with a negative dt or dn (see `enabled`).
        if b.dt.is_some_and(|t| t <= 0.0) {
            b.dt = None;
        }
        b.dn = match get("dn") {
            None => None,
            Some(v) => match v.parse::<i64>() {
                Ok(d) if d > 0 => Some(d as u64),
                Ok(_) => None,
                Err(_) => return Err(bad("dn", v, "expected an integer")),
            },
        };
        if let Some(v) = get("variables") {
            let names: Vec<String> = v
                .trim_start_matches('[')
                .trim_end_matches(']')
                .split(',')
                .map(|s| s.trim().trim_matches(['"', '\'']).to_string())
                .filter(|s| !s.is_empty())
                .collect();
            if names.is_empty() {
                return Err(bad("variables", v, "an empty list"));
            }
            b.variables = Some(names);
        }
        b.ghost_zones = flag("ghost_zones")?;
        b.single_precision = flag("single_precision_output")?;
        b.png_variable = get("variable").map(str::to_string);
        if b.file_type == FileType::Png && b.png_variable.is_none() {
            return Err(bad(
                "variable",
                "",
                "a png output needs the variable to plot",
            ));
        }
        b.png_x3 = match (real("x3")?, get("slice")) {
            (Some(x), None) => Some(PngSlice::Position(x)),
            (None, Some(v)) => {
                Some(PngSlice::RootIndex(v.parse().map_err(|_| {
                    bad("slice", v, "expected a cell index (0, 1, ...)")
                })?))
            }
            (None, None) => None,
            (Some(_), Some(v)) => return Err(bad("slice", v, "give either x3 or slice, not both")),
        };
        b.png_size = (size("width")?, size("height")?);
        b.png_range = (real("range_min")?, real("range_max")?);
        if let (Some(lo), Some(hi)) = b.png_range {
            if lo >= hi {
                return Err(bad("range_max", &hi.to_string(), "must exceed range_min"));
            }
        }
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deck(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (format!("parthenon/output3/{k}"), v.to_string()))
            .collect()
    }

    #[test]
    fn parses_keys_and_names_files() {
        let b = OutputBlock::from_map(
            &deck(&[
                ("file_type", "hdf5"),
                ("dt", "0.5"),
                ("dn", "-1"),
                ("variables", "[rho, \"vel\"]"),
                ("ghost_zones", "true"),
            ]),
            "parthenon/output3",
            3,
        )
        .unwrap();
        assert_eq!(b.id, "out3");
        assert_eq!(b.dt, Some(0.5));
        assert_eq!(b.dn, None);
        assert_eq!(b.variables, Some(vec!["rho".into(), "vel".into()]));
        assert!(b.ghost_zones && !b.single_precision);
        assert_eq!(
            file_name("blast", &b.id, FileNumber::Step(12), "phdf"),
            "blast.out3.00012.phdf"
        );
        assert_eq!(
            file_name("blast", "chk", FileNumber::Final, "rhdf"),
            "blast.chk.final.rhdf"
        );
    }

    #[test]
    fn keys_apply_to_their_file_types() {
        let all: Vec<_> = OutputBlock::keys().collect();
        assert_eq!(all.len(), 14, "{all:?}");
        for t in FileType::ALL {
            for k in COMMON_KEYS {
                assert!(t.applies(k), "{k} on {}", t.name());
            }
        }
        assert!(FileType::Hdf5.applies("ghost_zones") && !FileType::Hdf5.applies("width"));
        assert!(FileType::Png.applies("width") && !FileType::Png.applies("variables"));
        for k in ["variables", "variable", "single_precision_output"] {
            assert!(!FileType::History.applies(k) && !FileType::Restart.applies(k));
        }
    }

    #[test]
    fn keys_of_other_file_types_are_not_read() {
        let b = OutputBlock::from_map(
            &deck(&[
                ("file_type", "rst"),
                ("dn", "4"),
                ("variable", "rho"),
                ("width", "0"),
                ("variables", "rho"),
            ]),
            "parthenon/output3",
            3,
        )
        .unwrap();
        assert_eq!(b.dn, Some(4));
        assert_eq!(
            (b.png_variable, b.png_size.0, b.variables),
            (None, None, None)
        );
    }

    #[test]
    fn bad_values_name_the_key() {
        for (pairs, key) in [
            (vec![("file_type", "vtk")], "file_type"),
            (vec![("file_type", "hdf5"), ("dt", "soon")], "dt"),
            (
                vec![("file_type", "hdf5"), ("ghost_zones", "yes")],
                "ghost_zones",
            ),
            (vec![("file_type", "png")], "variable"),
            (vec![("file_type", "hdf5"), ("id", "a/b")], "id"),
            (
                vec![("file_type", "png"), ("variable", "rho"), ("width", "0")],
                "width",
            ),
        ] {
            let e = OutputBlock::from_map(&deck(&pairs), "parthenon/output3", 3).unwrap_err();
            assert!(matches!(e, OutputError::Invalid { .. }), "{e:?}");
            assert!(
                e.to_string()
                    .starts_with(&format!("parthenon/output3/{key}")),
                "{e}"
            );
        }
    }
}
