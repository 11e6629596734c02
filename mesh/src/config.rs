//! Mesh configuration from plain values, validated with errors that name the Parthenon key.
//!
//! The driver parses input decks; this module takes either a [`MeshConfig`] filled in by hand
//! or a map from `block/key` strings to value strings ([`MeshConfig::from_map`]), using
//! Parthenon's names: `parthenon/mesh/{nx1,x1min,x1max,ix1_bc,ox1_bc,...,nghost,refinement,
//! numlevel,derefine_count,pack_size,multigrid}`, `parthenon/meshblock/{nx1,nx2,nx3}` and
//! `parthenon/static_refinementN/{x1min,x1max,...,level}`.

use crate::error::MeshError;
use crate::forest::finest_level;
use crate::loc::MAX_COORD_BITS;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;

/// A physical boundary condition on one face of the domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BoundaryCondition {
    /// The domain wraps around to the opposite face.
    Periodic,
    /// Zero-gradient copy of the last interior cells.
    Outflow,
    /// Mirror, with the normal vector components negated.
    Reflecting,
    /// Filled by a function the application registers.
    User,
}

impl BoundaryCondition {
    /// The name an input deck gives it (`ix1_bc: periodic`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Periodic => "periodic",
            Self::Outflow => "outflow",
            Self::Reflecting => "reflecting",
            Self::User => "user",
        }
    }
}

impl std::fmt::Display for BoundaryCondition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for BoundaryCondition {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "periodic" => Ok(Self::Periodic),
            "outflow" => Ok(Self::Outflow),
            "reflecting" => Ok(Self::Reflecting),
            "user" => Ok(Self::User),
            other => Err(format!(
                "unknown boundary condition `{other}` (expected periodic, outflow, reflecting or user)"
            )),
        }
    }
}

/// How the mesh may refine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefinementKind {
    /// A single level: the root grid only.
    None,
    /// Levels fixed at start by static regions.
    Static,
    /// Levels change at run time from refinement flags (static regions still apply).
    Adaptive,
}

impl std::fmt::Display for RefinementKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::None => "none",
            Self::Static => "static",
            Self::Adaptive => "adaptive",
        })
    }
}

/// A box that must be refined to at least `level` (`parthenon/static_refinementN`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StaticRegion {
    /// Lower corner (x1min, x2min, x3min).
    pub xmin: [f64; 3],
    /// Upper corner (x1max, x2max, x3max).
    pub xmax: [f64; 3],
    /// Refinement level relative to the root grid (0 = root).
    pub level: u32,
    /// The `N` of `parthenon/static_refinementN`, for error messages.
    pub id: usize,
}

/// Everything the mesh needs to know about its geometry and refinement.
///
/// ```
/// use starhalo_mesh::MeshConfig;
/// let mut m = std::collections::BTreeMap::new();
/// m.insert("parthenon/mesh/nx1".to_string(), "64".to_string());
/// m.insert("parthenon/mesh/nx2".to_string(), "32".to_string());
/// m.insert("parthenon/meshblock/nx1".to_string(), "16".to_string());
/// m.insert("parthenon/meshblock/nx2".to_string(), "16".to_string());
/// m.insert("parthenon/mesh/ix1_bc".to_string(), "periodic".to_string());
/// m.insert("parthenon/mesh/ox1_bc".to_string(), "periodic".to_string());
/// let c = MeshConfig::from_map(&m).unwrap();
/// assert_eq!(c.ndim(), 2);
/// assert_eq!(c.nrb(), [4, 2, 1]);
///
/// m.insert("parthenon/meshblock/nx1".to_string(), "24".to_string());
/// let e = MeshConfig::from_map(&m).unwrap_err();
/// assert_eq!(e.key(), Some("parthenon/meshblock/nx1"));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct MeshConfig {
    /// Cells of the root grid along each direction (`parthenon/mesh/nxN`).
    pub nx: [usize; 3],
    /// Lower domain corner (`parthenon/mesh/xNmin`).
    pub xmin: [f64; 3],
    /// Upper domain corner (`parthenon/mesh/xNmax`).
    pub xmax: [f64; 3],
    /// Boundary conditions, `bc[d][0]` inner (`ixN_bc`) and `bc[d][1]` outer (`oxN_bc`).
    pub bc: [[BoundaryCondition; 2]; 3],
    /// Interior cells of every block (`parthenon/meshblock/nxN`).
    pub block_nx: [usize; 3],
    /// Ghost layers (`parthenon/mesh/nghost`, default 2).
    pub nghost: usize,
    /// Refinement kind (`parthenon/mesh/refinement`).
    pub refinement: RefinementKind,
    /// Number of levels including the root (`parthenon/mesh/numlevel`, default 1).
    pub numlevel: u32,
    /// Steps a block must be flagged for derefinement before it may merge
    /// (`parthenon/mesh/derefine_count`, default 10).
    pub derefine_count: u32,
    /// Static refinement regions.
    pub static_regions: Vec<StaticRegion>,
    /// Blocks per mesh-data partition; `None` puts all local blocks in one
    /// (`parthenon/mesh/pack_size`, default -1).
    pub pack_size: Option<usize>,
    /// Build the geometric multigrid hierarchy (`parthenon/mesh/multigrid`).
    pub multigrid: bool,
    /// The most blocks the mesh may ever have (no input key: a driver sets it from the memory
    /// it has). Building or remeshing beyond it fails with [`MeshError::TooManyBlocks`]
    /// before the blocks are made. Default: no limit.
    pub max_blocks: usize,
}

const DIRS: [&str; 3] = ["1", "2", "3"];

/// The most root blocks a mesh may have: every rank holds the whole tree.
pub const MAX_ROOT_BLOCKS: u64 = 1 << 24;

/// The most points (interior and ghosts, one more along each direction for node-centred data)
/// one block may have.
pub const MAX_BLOCK_CELLS: u64 = 1 << 40;

/// Whether `block` is one of the blocks [`MeshConfig::from_map`] reads (`parthenon/mesh`,
/// `parthenon/meshblock`, `parthenon/static_refinementN`).
pub fn is_mesh_block(block: &str) -> bool {
    block == "parthenon/mesh"
        || block == "parthenon/meshblock"
        || block.starts_with("parthenon/static_refinement")
}

/// The map [`MeshConfig::from_map`] reads, recording every key looked up (given or not), so
/// that the keys read are the parser's own and no list kept beside it.
struct Reader<'a> {
    map: &'a BTreeMap<String, String>,
    looked_up: RefCell<BTreeSet<String>>,
}

impl Reader<'_> {
    fn get(&self, key: &str) -> Option<&String> {
        self.looked_up.borrow_mut().insert(key.to_string());
        self.map.get(key)
    }
}

fn mesh_key(k: &str) -> String {
    format!("parthenon/mesh/{k}")
}

fn parse<T: FromStr>(map: &Reader, key: &str, default: Option<T>) -> Result<T, MeshError>
where
    T::Err: std::fmt::Display,
{
    match map.get(key) {
        Some(v) if std::any::type_name::<T>() == "f64" && rounds_to_zero(v) => {
            Err(MeshError::invalid(
                key,
                v,
                "below the smallest 64-bit float (it would be read as 0)",
            ))
        }
        Some(v) => match yaml_non_finite(v).filter(|_| std::any::type_name::<T>() == "f64") {
            // Rust's own spelling of the value, which the checks of each key then judge.
            Some(x) => x.to_string(),
            None => v.to_string(),
        }
        .trim()
        .parse::<T>()
        .map_err(|e| {
            // Rust's own message ("invalid digit found in string") does not say what is wanted.
            let want = match std::any::type_name::<T>() {
                "usize" | "u32" | "u64" => "expected a non-negative integer: ",
                "i64" | "i32" => "expected an integer: ",
                "f64" => "expected a number: ",
                _ => "",
            };
            MeshError::invalid(key, v, format!("{want}{e}"))
        }),
        None => default.ok_or_else(|| MeshError::Missing { key: key.into() }),
    }
}

/// The value of YAML's spellings of the non-finite numbers (`.inf`, `+.inf`, `-.inf`,
/// `.nan`, any case), which a YAML deck may hold as text.
pub fn yaml_non_finite(t: &str) -> Option<f64> {
    match t.trim().to_ascii_lowercase().as_str() {
        ".inf" | "+.inf" => Some(f64::INFINITY),
        "-.inf" => Some(f64::NEG_INFINITY),
        ".nan" => Some(f64::NAN),
        _ => None,
    }
}

/// Whether the number `t` is written with a nonzero digit but reads as 0 (`1e-400`), so
/// that the value used would not be the value meant.
pub fn rounds_to_zero(t: &str) -> bool {
    let mantissa = t.trim().split(['e', 'E']).next().unwrap_or("");
    t.trim().parse::<f64>() == Ok(0.0) && mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b))
}

fn parse_bool(map: &Reader, key: &str, default: bool) -> Result<bool, MeshError> {
    match map.get(key).map(|v| v.trim().to_ascii_lowercase()) {
        None => Ok(default),
        Some(v) => match v.as_str() {
            "true" | "1" | "yes" | "on" => Ok(true),
            "false" | "0" | "no" | "off" => Ok(false),
            _ => Err(MeshError::invalid(key, v, "expected true or false")),
        },
    }
}

impl MeshConfig {
    /// A single-level configuration: mesh `nx` cells on the unit box split into blocks of
    /// `block_nx`, outflow everywhere, two ghost layers. Call [`MeshConfig::validate`] after
    /// changing fields.
    pub fn new(nx: [usize; 3], block_nx: [usize; 3]) -> Self {
        Self {
            nx,
            xmin: [0.0; 3],
            xmax: [1.0; 3],
            bc: [[BoundaryCondition::Outflow; 2]; 3],
            block_nx,
            nghost: 2,
            refinement: RefinementKind::None,
            numlevel: 1,
            derefine_count: 10,
            static_regions: Vec::new(),
            pack_size: None,
            multigrid: false,
            max_blocks: usize::MAX,
        }
    }

    /// Build and validate from `block/key -> value` strings (Parthenon key names).
    ///
    /// Only `parthenon/mesh/nx1` is required. Defaults: `nx2 = nx3 = 1`, `xNmin = 0`,
    /// `xNmax = 1`, boundary conditions `outflow`, block size = mesh size, `nghost = 2`,
    /// `refinement = none`, `numlevel = 1`, `derefine_count = 10`, `pack_size = -1`.
    /// Static regions switch `refinement = none` to static.
    pub fn from_map(map: &BTreeMap<String, String>) -> Result<Self, MeshError> {
        Self::from_map_keys(map).map(|(c, _)| c)
    }

    /// [`from_map`](Self::from_map), also returning the `block/key` paths it read, so that a
    /// driver can report the other keys of the mesh blocks ([`is_mesh_block`]) as unknown.
    pub fn from_map_keys(
        raw: &BTreeMap<String, String>,
    ) -> Result<(Self, BTreeSet<String>), MeshError> {
        let map = &Reader {
            map: raw,
            looked_up: RefCell::default(),
        };
        let mut nx = [1usize; 3];
        let mut block_nx = [1usize; 3];
        let mut c = Self::new([1; 3], [1; 3]);
        for d in 0..3 {
            let key = mesh_key(&format!("nx{}", DIRS[d]));
            nx[d] = parse(map, &key, if d == 0 { None } else { Some(1) })?;
        }
        for d in 0..3 {
            let key = format!("parthenon/meshblock/nx{}", DIRS[d]);
            block_nx[d] = parse(map, &key, Some(nx[d]))?;
            c.xmin[d] = parse(map, &mesh_key(&format!("x{}min", DIRS[d])), Some(0.0))?;
            c.xmax[d] = parse(map, &mesh_key(&format!("x{}max", DIRS[d])), Some(1.0))?;
            for (side, prefix) in ["ix", "ox"].iter().enumerate() {
                let key = mesh_key(&format!("{prefix}{}_bc", DIRS[d]));
                c.bc[d][side] = parse(map, &key, Some(BoundaryCondition::Outflow))?;
            }
        }
        c.nx = nx;
        c.block_nx = block_nx;
        c.nghost = parse(map, &mesh_key("nghost"), Some(2))?;
        let rkey = mesh_key("refinement");
        c.refinement = match map.get(&rkey).map(|s| s.trim()) {
            None | Some("none") => RefinementKind::None,
            Some("static") => RefinementKind::Static,
            Some("adaptive") => RefinementKind::Adaptive,
            Some(other) => {
                return Err(MeshError::invalid(
                    rkey,
                    other,
                    "expected none, static or adaptive",
                ))
            }
        };
        c.numlevel = parse(map, &mesh_key("numlevel"), Some(1))?;
        c.derefine_count = parse(map, &mesh_key("derefine_count"), Some(10))?;
        let pkey = mesh_key("pack_size");
        let pack: i64 = parse(map, &pkey, Some(-1))?;
        c.pack_size = match pack {
            -1 => None,
            n if n >= 1 => Some(n as usize),
            n => {
                return Err(MeshError::invalid(
                    pkey,
                    n,
                    "must be -1 (all blocks) or >= 1",
                ))
            }
        };
        c.multigrid = parse_bool(map, &mesh_key("multigrid"), false)?;

        // Static regions: every block named parthenon/static_refinementN.
        let prefix = "parthenon/static_refinement";
        let mut ids: Vec<usize> = Vec::new();
        for k in raw.keys() {
            if let Some(rest) = k.strip_prefix(prefix) {
                let Some((n, _)) = rest.split_once('/') else {
                    continue;
                };
                let id: usize = n.parse().map_err(|_| {
                    MeshError::invalid(
                        k.clone(),
                        n,
                        "static refinement blocks are named static_refinementN",
                    )
                })?;
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
        }
        ids.sort_unstable();
        for id in ids {
            let key = |k: &str| format!("{prefix}{id}/{k}");
            let mut r = StaticRegion {
                xmin: c.xmin,
                xmax: c.xmax,
                level: parse(map, &key("level"), None)?,
                id,
            };
            for d in 0..3 {
                r.xmin[d] = parse(map, &key(&format!("x{}min", DIRS[d])), Some(c.xmin[d]))?;
                r.xmax[d] = parse(map, &key(&format!("x{}max", DIRS[d])), Some(c.xmax[d]))?;
            }
            c.static_regions.push(r);
        }
        if !c.static_regions.is_empty() && c.refinement == RefinementKind::None {
            // Static regions imply static refinement, unless the deck says otherwise.
            if let Some(v) = map.get(&mesh_key("refinement")) {
                return Err(MeshError::invalid(
                    mesh_key("refinement"),
                    v,
                    format!(
                        "contradicts parthenon/static_refinement{} (use static or adaptive)",
                        c.static_regions[0].id
                    ),
                ));
            }
            c.refinement = RefinementKind::Static;
        }
        c.validate()?;
        Ok((c, map.looked_up.take()))
    }

    /// Number of dimensions: 1 if `nx2 = 1`, 2 if `nx3 = 1`, else 3.
    pub fn ndim(&self) -> usize {
        if self.nx[2] > 1 {
            3
        } else if self.nx[1] > 1 {
            2
        } else {
            1
        }
    }

    /// Root blocks along each direction (`nx / block_nx`).
    pub fn nrb(&self) -> [i64; 3] {
        [0, 1, 2].map(|d| (self.nx[d] / self.block_nx[d].max(1)) as i64)
    }

    /// True when more than one level may exist.
    pub fn is_multilevel(&self) -> bool {
        self.refinement != RefinementKind::None && self.numlevel > 1
    }

    /// The finest level allowed (0 for a single-level mesh).
    pub fn max_level(&self) -> u32 {
        if self.is_multilevel() {
            self.numlevel - 1
        } else {
            0
        }
    }

    /// Periodicity per direction (only active directions can be periodic).
    pub fn periodic(&self) -> [bool; 3] {
        let ndim = self.ndim();
        [0, 1, 2].map(|d| d < ndim && self.bc[d][0] == BoundaryCondition::Periodic)
    }

    /// Check every rule; the error names the first offending key.
    pub fn validate(&self) -> Result<(), MeshError> {
        let ndim = self.ndim();
        if self.nx[0] == 0 {
            return Err(MeshError::invalid(mesh_key("nx1"), 0, "must be at least 1"));
        }
        for d in 1..3 {
            if self.nx[d] == 0 {
                return Err(MeshError::invalid(
                    mesh_key(&format!("nx{}", DIRS[d])),
                    0,
                    "must be at least 1",
                ));
            }
        }
        if self.nx[2] > 1 && self.nx[1] == 1 {
            return Err(MeshError::invalid(
                mesh_key("nx2"),
                1,
                "a 3-D mesh (nx3 > 1) needs nx2 > 1",
            ));
        }
        if self.nghost == 0 {
            return Err(MeshError::invalid(
                mesh_key("nghost"),
                0,
                "must be at least 1",
            ));
        }
        let multilevel = self.is_multilevel();
        // Prolongation fills a fine block's ghosts from coarse cells in pairs.
        if multilevel && !self.nghost.is_multiple_of(2) {
            return Err(MeshError::invalid(
                mesh_key("nghost"),
                self.nghost,
                "must be even on a multilevel mesh (prolongation fills ghosts in pairs)",
            ));
        }
        for d in 0..3 {
            let dn = DIRS[d];
            let bkey = format!("parthenon/meshblock/nx{dn}");
            let (n, b) = (self.nx[d], self.block_nx[d]);
            if b == 0 || n % b != 0 {
                return Err(MeshError::invalid(
                    bkey,
                    b,
                    format!("must divide parthenon/mesh/nx{dn} = {n}"),
                ));
            }
            // Inactive directions too: their extent is the cells' depth (volumes, fluxes).
            for (name, x) in [("min", self.xmin[d]), ("max", self.xmax[d])] {
                if !x.is_finite() {
                    return Err(MeshError::invalid(
                        mesh_key(&format!("x{dn}{name}")),
                        x,
                        "must be a finite number",
                    ));
                }
            }
            if !(self.xmax[d] - self.xmin[d]).is_finite() {
                return Err(MeshError::invalid(
                    mesh_key(&format!("x{dn}max")),
                    self.xmax[d],
                    format!("the extent from x{dn}min = {:?} is too large", self.xmin[d]),
                ));
            }
            if self.xmin[d].partial_cmp(&self.xmax[d]) != Some(std::cmp::Ordering::Less) {
                return Err(MeshError::invalid(
                    mesh_key(&format!("x{dn}max")),
                    self.xmax[d],
                    format!("must exceed x{dn}min = {:?}", self.xmin[d]),
                ));
            }
            if d < ndim {
                if b < self.nghost {
                    return Err(MeshError::invalid(
                        bkey,
                        b,
                        format!("must be at least nghost = {}", self.nghost),
                    ));
                }
                // Fine-coarse exchanges go through a coarse buffer of b/2 cells, which must
                // hold the coarse ghosts (nghost/2 + 1) and serve nghost of them.
                let least = self.nghost.max(self.nghost / 2 + 1).saturating_mul(2);
                if multilevel && (b % 2 != 0 || b < least) {
                    return Err(MeshError::invalid(
                        bkey,
                        b,
                        format!(
                            "must be even and at least {least} (2 × nghost) on a multilevel mesh"
                        ),
                    ));
                }
                let [inner, outer] = self.bc[d];
                if (inner == BoundaryCondition::Periodic) != (outer == BoundaryCondition::Periodic)
                {
                    return Err(MeshError::invalid(
                        mesh_key(&format!("ox{dn}_bc")),
                        outer,
                        format!("periodic on one side needs periodic on the other (ix{dn}_bc is {inner})"),
                    ));
                }
            }
        }
        if self.numlevel == 0 {
            return Err(MeshError::invalid(
                mesh_key("numlevel"),
                0,
                "must be at least 1",
            ));
        }
        // Sizes every rank must hold: the root grid (all of it, on every rank) and one block
        // with its ghosts. Checked before any arithmetic on them.
        let mut ntrees: u64 = 1;
        for d in 0..3 {
            let nrb = (self.nx[d] / self.block_nx[d]) as u64;
            let bits = 64 - (nrb - 1).leading_zeros();
            ntrees = ntrees.saturating_mul(nrb);
            if bits > MAX_COORD_BITS || ntrees > MAX_ROOT_BLOCKS {
                return Err(MeshError::invalid(
                    mesh_key(&format!("nx{}", DIRS[d])),
                    self.nx[d],
                    format!(
                        "gives a root grid of more than {MAX_ROOT_BLOCKS} blocks \
                         (parthenon/meshblock/nx{} = {})",
                        DIRS[d], self.block_nx[d]
                    ),
                ));
            }
        }
        let mut cells: u64 = 1;
        for d in 0..ndim {
            let g = (self.nghost as u64).saturating_mul(2).saturating_add(1);
            let n = (self.block_nx[d] as u64).saturating_add(g);
            cells = cells.saturating_mul(n);
            if cells > MAX_BLOCK_CELLS {
                return Err(MeshError::invalid(
                    format!("parthenon/meshblock/nx{}", DIRS[d]),
                    self.block_nx[d],
                    format!("a block with ghosts would exceed {MAX_BLOCK_CELLS} points"),
                ));
            }
        }
        // The limit `Forest::from_leaves` (a restart) holds leaves to as well.
        let finest = finest_level(self.nrb());
        if self.max_level() > finest {
            return Err(MeshError::invalid(
                mesh_key("numlevel"),
                self.numlevel,
                format!(
                    "more levels than a root grid of {:?} blocks allows (at most {})",
                    self.nrb(),
                    finest + 1
                ),
            ));
        }
        // The finest cells must be wide enough for floating point to tell their edges apart
        // (a zero cell width divides the solvers by zero).
        let blocks_across = self
            .nrb()
            .map(|n| n as f64 * 2f64.powi(self.max_level() as i32));
        for d in 0..ndim {
            let n = blocks_across[d];
            let cell = (self.xmax[d] - self.xmin[d]) / (n * self.block_nx[d] as f64);
            if !(self.xmin[d] + cell > self.xmin[d] && self.xmax[d] - cell < self.xmax[d]) {
                return Err(MeshError::invalid(
                    mesh_key(&format!("x{}max", DIRS[d])),
                    self.xmax[d],
                    format!(
                        "cells of the finest level would be {cell:e} wide from x{}min = {:?}:                          too narrow to tell their edges apart",
                        DIRS[d], self.xmin[d]
                    ),
                ));
            }
        }
        if self.pack_size == Some(0) {
            return Err(MeshError::invalid(
                mesh_key("pack_size"),
                0,
                "must be -1 (all blocks) or >= 1",
            ));
        }
        for r in &self.static_regions {
            let key = |k: &str| format!("parthenon/static_refinement{}/{k}", r.id);
            if r.level > self.max_level() {
                return Err(MeshError::invalid(
                    key("level"),
                    r.level,
                    format!(
                        "exceeds the finest level {} (parthenon/mesh/numlevel = {}, refinement = {})",
                        self.max_level(),
                        self.numlevel,
                        self.refinement
                    ),
                ));
            }
            for d in 0..ndim {
                for (name, x) in [("min", r.xmin[d]), ("max", r.xmax[d])] {
                    if !x.is_finite() {
                        return Err(MeshError::invalid(
                            key(&format!("x{}{name}", DIRS[d])),
                            x,
                            "must be a finite number",
                        ));
                    }
                }
                if r.xmin[d] > r.xmax[d] {
                    return Err(MeshError::invalid(
                        key(&format!("x{}max", DIRS[d])),
                        r.xmax[d],
                        format!("is below x{}min = {}", DIRS[d], r.xmin[d]),
                    ));
                }
                // Overlap as `RefinementRules::static_min_level` counts it: interiors meet,
                // or a region of zero width lies in the closed range.
                let (lo, hi) = (self.xmin[d], self.xmax[d]);
                let outside = if r.xmin[d] < r.xmax[d] {
                    r.xmax[d] <= lo || r.xmin[d] >= hi
                } else {
                    r.xmin[d] < lo || r.xmin[d] > hi
                };
                if outside {
                    return Err(MeshError::invalid(
                        key(&format!("x{}min", DIRS[d])),
                        r.xmin[d],
                        format!(
                            "the region from x{0}min = {1} to x{0}max = {2} lies outside the \
                             domain ({lo} to {hi}) and would refine nothing",
                            DIRS[d], r.xmin[d], r.xmax[d]
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The range along one direction of the block at coordinate `lx` of the `n` blocks across a
/// domain from `xmin` to `xmax`. Neighbours share their edge bit for bit, and the last block
/// ends at `xmax` exactly.
pub(crate) fn block_range(xmin: f64, xmax: f64, lx: i64, n: i64) -> (f64, f64) {
    let w = (xmax - xmin) / n as f64;
    let edge = |i: i64| match i == n {
        true => xmax,
        false => xmin + w * i as f64,
    };
    (edge(lx), edge(lx + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        for (k, v) in [
            ("parthenon/mesh/nx1", "32"),
            ("parthenon/mesh/nx2", "32"),
            ("parthenon/meshblock/nx1", "8"),
            ("parthenon/meshblock/nx2", "8"),
        ] {
            m.insert(k.to_string(), v.to_string());
        }
        m
    }

    fn err_key(m: &BTreeMap<String, String>) -> String {
        MeshConfig::from_map(m)
            .unwrap_err()
            .key()
            .unwrap_or("")
            .to_string()
    }

    #[test]
    fn the_keys_read_are_the_parsers_own() {
        let mut m = base();
        m.insert("parthenon/mesh/refinement".into(), "static".into());
        m.insert("parthenon/mesh/numlevel".into(), "2".into());
        m.insert("parthenon/static_refinement3/level".into(), "1".into());
        m.insert("parthenon/mesh/nx4".into(), "8".into());
        let (_, read) = MeshConfig::from_map_keys(&m).unwrap();
        for k in [
            "parthenon/mesh/nx1",
            "parthenon/mesh/ox3_bc",
            "parthenon/mesh/multigrid",
            "parthenon/meshblock/nx3",
            "parthenon/static_refinement3/level",
            "parthenon/static_refinement3/x2max",
        ] {
            assert!(read.contains(k), "{k} not read: {read:?}");
        }
        assert!(!read.contains("parthenon/mesh/nx4"));
        // 21 mesh keys, 3 block sizes, 7 of the region.
        assert_eq!(read.len(), 21 + 3 + 7, "{read:?}");
        assert!(read
            .iter()
            .all(|k| is_mesh_block(k.rsplit_once('/').unwrap().0)));
    }

    #[test]
    fn good_deck_parses_with_defaults() {
        let mut m = base();
        m.insert("parthenon/mesh/refinement".into(), "adaptive".into());
        m.insert("parthenon/mesh/numlevel".into(), "3".into());
        m.insert("parthenon/mesh/ix2_bc".into(), "periodic".into());
        m.insert("parthenon/mesh/ox2_bc".into(), "periodic".into());
        m.insert("parthenon/static_refinement0/x1max".into(), "0.25".into());
        m.insert("parthenon/static_refinement0/level".into(), "2".into());
        let c = MeshConfig::from_map(&m).unwrap();
        assert_eq!(c.nghost, 2);
        assert_eq!(c.max_level(), 2);
        assert_eq!(c.periodic(), [false, true, false]);
        assert_eq!(c.static_regions.len(), 1);
        assert_eq!(c.static_regions[0].xmax[0], 0.25);
        assert_eq!(c.static_regions[0].xmax[1], 1.0);
        assert_eq!(c.pack_size, None);
    }

    #[test]
    fn a_static_region_must_meet_the_domain() {
        let region = |x2: (&str, &str)| {
            let mut m = base();
            m.insert("parthenon/mesh/numlevel".into(), "2".into());
            m.insert("parthenon/static_refinement0/level".into(), "1".into());
            m.insert("parthenon/static_refinement0/x2min".into(), x2.0.into());
            m.insert("parthenon/static_refinement0/x2max".into(), x2.1.into());
            MeshConfig::from_map(&m)
        };
        // The domain is [0, 1]: touching its edge with a region of positive width is not enough,
        // a plane on the edge is.
        for outside in [("2", "3"), ("1", "2"), ("-1", "0"), ("1.5", "1.5")] {
            let e = region(outside).unwrap_err();
            assert_eq!(
                e.key(),
                Some("parthenon/static_refinement0/x2min"),
                "{outside:?}"
            );
            assert!(
                e.to_string().contains("lies outside the domain (0 to 1)"),
                "{e}"
            );
        }
        for inside in [("0.5", "2"), ("-1", "0.01"), ("1", "1"), ("0", "0")] {
            assert!(region(inside).is_ok(), "{inside:?}");
        }
    }

    #[test]
    fn bad_input_names_the_key() {
        let mut m = base();
        m.insert("parthenon/meshblock/nx2".into(), "5".into());
        assert_eq!(err_key(&m), "parthenon/meshblock/nx2");

        let mut m = base();
        m.insert("parthenon/mesh/ix1_bc".into(), "bouncy".into());
        assert_eq!(err_key(&m), "parthenon/mesh/ix1_bc");

        let mut m = base();
        m.insert("parthenon/mesh/ix1_bc".into(), "periodic".into());
        assert_eq!(err_key(&m), "parthenon/mesh/ox1_bc");

        let mut m = base();
        m.remove("parthenon/mesh/nx1");
        assert_eq!(err_key(&m), "parthenon/mesh/nx1");

        let mut m = base();
        m.insert("parthenon/mesh/nx1".into(), "abc".into());
        assert_eq!(err_key(&m), "parthenon/mesh/nx1");

        let mut m = base();
        m.insert("parthenon/mesh/refinement".into(), "adaptive".into());
        m.insert("parthenon/mesh/numlevel".into(), "40".into());
        assert_eq!(err_key(&m), "parthenon/mesh/numlevel");

        let mut m = base();
        m.insert("parthenon/mesh/refinement".into(), "static".into());
        m.insert("parthenon/mesh/numlevel".into(), "2".into());
        m.insert("parthenon/static_refinement3/level".into(), "2".into());
        assert_eq!(err_key(&m), "parthenon/static_refinement3/level");

        let mut m = base();
        m.insert("parthenon/mesh/refinement".into(), "adaptive".into());
        m.insert("parthenon/mesh/numlevel".into(), "2".into());
        m.insert("parthenon/mesh/nx1".into(), "36".into());
        m.insert("parthenon/meshblock/nx1".into(), "9".into());
        assert_eq!(err_key(&m), "parthenon/meshblock/nx1");

        let mut m = base();
        m.insert("parthenon/mesh/nghost".into(), "9".into());
        assert_eq!(err_key(&m), "parthenon/meshblock/nx1");

        let mut m = base();
        m.insert("parthenon/mesh/refinement".into(), "adaptive".into());
        m.insert("parthenon/mesh/numlevel".into(), "2".into());
        m.insert("parthenon/mesh/nghost".into(), "3".into());
        assert_eq!(err_key(&m), "parthenon/mesh/nghost");

        let mut m = base();
        m.insert("parthenon/mesh/pack_size".into(), "0".into());
        assert_eq!(err_key(&m), "parthenon/mesh/pack_size");

        let mut m = base();
        m.insert("parthenon/mesh/x2max".into(), "-1".into());
        assert_eq!(err_key(&m), "parthenon/mesh/x2max");
    }

    #[test]
    fn absurd_numbers_are_errors_not_panics() {
        // One level, block = mesh: the multilevel bound on the block size must not overflow.
        let mut m = BTreeMap::new();
        m.insert("parthenon/mesh/nx1".to_string(), (1u64 << 63).to_string());
        m.insert(
            "parthenon/mesh/nghost".to_string(),
            (1u64 << 63).to_string(),
        );
        assert!(MeshConfig::from_map(&m).is_err());
        // Cells too narrow for floating point to tell their edges apart.
        for (lo, hi) in [("0", "5e-324"), ("1", "1.0000000000000002")] {
            let mut m = base();
            m.insert("parthenon/mesh/x1min".into(), lo.into());
            m.insert("parthenon/mesh/x1max".into(), hi.into());
            let e = MeshConfig::from_map(&m).unwrap_err();
            assert_eq!(e.key(), Some("parthenon/mesh/x1max"), "{lo} {hi}");
            assert!(e.to_string().contains("too narrow"), "{e}");
        }
        // The finest level counts: 32 cells are fine on one level, not on 30.
        let mut m = base();
        m.insert("parthenon/mesh/x1max".into(), "1e-300".into());
        assert!(MeshConfig::from_map(&m).is_ok());
        m.insert("parthenon/mesh/x1min".into(), "1".into());
        m.insert("parthenon/mesh/x1max".into(), "1.00000001".into());
        assert!(MeshConfig::from_map(&m).is_ok());
        m.insert("parthenon/mesh/refinement".into(), "adaptive".into());
        m.insert("parthenon/mesh/numlevel".into(), "30".into());
        assert_eq!(err_key(&m), "parthenon/mesh/x1max");
    }

    #[test]
    fn block_ranges_tile_the_domain_and_end_at_its_edge() {
        let (lo, hi) = (0.0, 0.9);
        for n in [1, 3, 7, 24, 1000] {
            let r: Vec<_> = (0..n).map(|i| block_range(lo, hi, i, n)).collect();
            assert_eq!((r[0].0, r[n as usize - 1].1), (lo, hi), "{n}");
            assert!(r.windows(2).all(|w| w[0].1 == w[1].0 && w[0].0 < w[0].1));
        }
    }

    #[test]
    fn dimensions_follow_nx() {
        assert_eq!(MeshConfig::new([8, 1, 1], [4, 1, 1]).ndim(), 1);
        assert_eq!(MeshConfig::new([8, 8, 1], [4, 4, 1]).ndim(), 2);
        assert_eq!(MeshConfig::new([8, 8, 8], [4, 4, 4]).ndim(), 3);
        let c = MeshConfig::new([8, 1, 4], [4, 1, 4]);
        assert_eq!(c.validate().unwrap_err().key(), Some("parthenon/mesh/nx2"));
    }
}
