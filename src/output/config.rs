//! An output block of the deck (`parthenon/outputN`) and the names of the files it writes.

use super::error::OutputError;
use super::printf::CFormat;
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
            FileType::Hdf5 => &[
                "variables",
                "ghost_zones",
                "single_precision_output",
                "hdf5_compression_level",
                "write_xdmf",
                "sparse_seed_nans",
                "file_number_width",
                "use_final_label",
            ],
            FileType::Restart => &[
                "hdf5_compression_level",
                "file_number_width",
                "use_final_label",
            ],
            FileType::History => &["data_format"],
            FileType::Png => &[
                "file_number_width",
                "use_final_label",
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

/// Parthenon's default `hdf5_compression_level`.
pub const DEFAULT_COMPRESSION: u8 = 5;

/// The longest `parthenon/job/problem_id` and output `id`, in bytes: the file names built of
/// both, a number and an extension then stay within the 255 bytes a file name may have.
pub const MAX_NAME_PART: usize = 100;

/// The most bytes of any file name a run writes for `problem_id`: an output's
/// `<problem_id>.<id>.<number>.phdf.xdmf.tmp` (the XDMF beside a `.phdf`, before it takes its
/// name), with an id of [`MAX_NAME_PART`] bytes and a number of 10 digits, is the longest.
pub fn longest_file_name(problem_id: &str) -> usize {
    problem_id.len() + 1 + MAX_NAME_PART + 1 + 10 + ".phdf.xdmf.tmp".len()
}

/// The number part of a file name: the output count, or `final` for the last output of a run
/// stopped by its wall-time limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileNumber {
    /// Zero-padded to the block's `file_number_width` digits.
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
    /// `hdf5_compression_level` (`.phdf` and `.rhdf`): the deflate level of every dataset
    /// stored in chunks, 0 (none) to 9; Parthenon's default, 5.
    pub compression: u8,
    /// `write_xdmf`: an `.xdmf` beside each `.phdf` (default true).
    pub write_xdmf: bool,
    /// `sparse_seed_nans`: unallocated sparse variables write NaN instead of 0.
    pub sparse_seed_nans: bool,
    /// `file_number_width`: the digits of a file number, zero-padded (default 5; a number
    /// with more digits is written whole).
    pub number_width: usize,
    /// `use_final_label`: the last step's output is numbered `final` (default true), else it
    /// takes the next number.
    pub final_label: bool,
    /// History: `data_format`, the C format of every real (Parthenon's default is `%12.5e`;
    /// without one, every digit: `{:.14e}`).
    pub data_format: Option<CFormat>,
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

impl OutputBlock {
    /// The file name `<problem_id>.<id>.<NNNNN>.<ext>` (or `.final.`), as Parthenon names
    /// them: its tools find outputs by this pattern.
    pub fn file_name(&self, problem_id: &str, number: FileNumber, ext: &str) -> String {
        let id = &self.id;
        match number {
            FileNumber::Step(n) => {
                format!("{problem_id}.{id}.{n:0w$}.{ext}", w = self.number_width)
            }
            FileNumber::Final => format!("{problem_id}.{id}.final.{ext}"),
        }
    }

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
            compression: DEFAULT_COMPRESSION,
            write_xdmf: true,
            sparse_seed_nans: false,
            number_width: 5,
            final_label: true,
            data_format: None,
            png_variable: None,
            png_x3: None,
            png_size: (None, None),
            png_range: (None, None),
        }
    }

    /// Every key [`from_map`](Self::from_map) reads, of any file type, once each.
    pub fn keys() -> impl Iterator<Item = &'static str> {
        let own = FileType::ALL
            .into_iter()
            .flat_map(|t| t.own_keys().iter().copied());
        let mut seen = Vec::new();
        for k in COMMON_KEYS.into_iter().chain(own) {
            if !seen.contains(&k) {
                seen.push(k);
            }
        }
        seen.into_iter()
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
                || v.chars().any(|c| c.is_whitespace() || c.is_control())
                || v.len() > MAX_NAME_PART
            {
                return Err(bad(
                    "id",
                    v,
                    &format!(
                        "must be a non-empty name of at most {MAX_NAME_PART} bytes without `/`, \
                         spaces or control characters"
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
        let flag = |k: &str, default: bool| -> Result<bool, OutputError> {
            match get(k) {
                None => Ok(default),
                Some("false") => Ok(false),
                Some("true") => Ok(true),
                Some(v) => Err(bad(k, v, "expected true or false")),
            }
        };
        let int =
            |k: &str, range: std::ops::RangeInclusive<u8>| -> Result<Option<u8>, OutputError> {
                get(k)
                    .map(|v| {
                        v.parse::<u8>()
                            .ok()
                            .filter(|n| range.contains(n))
                            .ok_or_else(|| {
                                let (lo, hi) = range.clone().into_inner();
                                bad(k, v, &format!("expected an integer in {lo}..={hi}"))
                            })
                    })
                    .transpose()
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
        b.ghost_zones = flag("ghost_zones", false)?;
        b.single_precision = flag("single_precision_output", false)?;
        b.compression = int("hdf5_compression_level", 0..=9)?.unwrap_or(DEFAULT_COMPRESSION);
        b.write_xdmf = flag("write_xdmf", true)?;
        b.sparse_seed_nans = flag("sparse_seed_nans", false)?;
        // A file number has at most 10 digits (u32); wider pads to no purpose.
        b.number_width = int("file_number_width", 0..=10)?.map_or(5, usize::from);
        b.final_label = flag("use_final_label", true)?;
        if let Some(v) = get("data_format") {
            let f = CFormat::parse(v).map_err(|e| bad("data_format", v, &e.to_string()))?;
            b.data_format = Some(f);
        }
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
            (b.compression, b.write_xdmf, b.sparse_seed_nans),
            (5, true, false)
        );
        assert_eq!((b.number_width, b.final_label), (5, true));
        assert_eq!(
            b.file_name("blast", FileNumber::Step(12), "phdf"),
            "blast.out3.00012.phdf"
        );
        assert_eq!(
            b.file_name("blast", FileNumber::Final, "rhdf"),
            "blast.out3.final.rhdf"
        );
    }

    /// Parthenon's other keys of HDF5 outputs and file names.
    #[test]
    fn parses_compression_xdmf_seeding_and_numbering() {
        let b = OutputBlock::from_map(
            &deck(&[
                ("file_type", "hdf5"),
                ("dn", "1"),
                ("hdf5_compression_level", "0"),
                ("write_xdmf", "false"),
                ("sparse_seed_nans", "true"),
                ("file_number_width", "2"),
                ("use_final_label", "false"),
            ]),
            "parthenon/output3",
            3,
        )
        .unwrap();
        assert_eq!(
            (b.compression, b.write_xdmf, b.sparse_seed_nans),
            (0, false, true)
        );
        assert!(!b.final_label);
        assert_eq!(
            b.file_name("p", FileNumber::Step(7), "phdf"),
            "p.out3.07.phdf"
        );
        assert_eq!(
            b.file_name("p", FileNumber::Step(123), "phdf"),
            "p.out3.123.phdf"
        );
        let r = OutputBlock::from_map(
            &deck(&[("file_type", "rst"), ("hdf5_compression_level", "9")]),
            "parthenon/output3",
            3,
        )
        .unwrap();
        assert_eq!(r.compression, 9);
    }

    #[test]
    fn keys_apply_to_their_file_types() {
        let all: Vec<_> = OutputBlock::keys().collect();
        assert_eq!(all.len(), 20, "{all:?}");
        for t in FileType::ALL {
            for k in COMMON_KEYS {
                assert!(t.applies(k), "{k} on {}", t.name());
            }
        }
        assert!(FileType::Hdf5.applies("ghost_zones") && !FileType::Hdf5.applies("width"));
        assert!(FileType::Png.applies("width") && !FileType::Png.applies("variables"));
        for k in [
            "variables",
            "variable",
            "single_precision_output",
            "write_xdmf",
        ] {
            assert!(!FileType::History.applies(k) && !FileType::Restart.applies(k));
        }
        assert!(FileType::Restart.applies("hdf5_compression_level"));
        // A history has no file numbers.
        assert!(!FileType::History.applies("use_final_label"));
        assert!(!FileType::History.applies("file_number_width"));
        assert!(!FileType::Png.applies("hdf5_compression_level"));
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
            (
                vec![("file_type", "hdf5"), ("hdf5_compression_level", "10")],
                "hdf5_compression_level",
            ),
            (
                vec![("file_type", "hst"), ("data_format", "%d")],
                "data_format",
            ),
            (
                vec![("file_type", "rst"), ("file_number_width", "11")],
                "file_number_width",
            ),
            (
                vec![
                    ("file_type", "png"),
                    ("variable", "rho"),
                    ("use_final_label", "1"),
                ],
                "use_final_label",
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
