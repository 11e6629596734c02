//! Fields on blocks: variable metadata, index shapes and mesh-data partitions.
//!
//! A variable has a [`Metadata`]: where its values live ([`Centering`]), whether ghost zones are
//! exchanged (`fill_ghost`), whether it is an independent (evolved) quantity, whether it carries
//! fluxes (one flux variable per active face direction), whether it is sparse (allocated per
//! block only where it exceeds a threshold), and how many components it has.
//!
//! An [`IndexShape`] gives the index ranges of one block: `Interior` (the cells the block owns)
//! and `Entire` (with `nghost` ghost layers on each side of every active direction), for each
//! [`TopologicalElement`] (face-, edge- and node-centred data have one more point along the
//! directions they are staggered in). Each block of a multilevel mesh also keeps a coarse
//! buffer: half the interior cells and `nghost / 2 + 1` ghost layers ([`IndexShape::coarse`]).

use crate::error::MeshError;
use starhalo_exec::{Buffer, MemSpace, SpaceError};
use std::ops::Range;

/// Where a variable's values live on the mesh.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Centering {
    /// Cell centres.
    Cell,
    /// Face centres (three components of topological elements: x1, x2, x3 faces).
    Face,
    /// Edge centres (x1, x2, x3 edges).
    Edge,
    /// Cell corners (nodes).
    Node,
}

/// One kind of mesh point: cell centre, one of three faces, one of three edges, or node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TopologicalElement {
    /// Cell centre.
    CC,
    /// Face with normal x1.
    F1,
    /// Face with normal x2.
    F2,
    /// Face with normal x3.
    F3,
    /// Edge along x1.
    E1,
    /// Edge along x2.
    E2,
    /// Edge along x3.
    E3,
    /// Node.
    NN,
}

impl TopologicalElement {
    /// Per direction, 1 if the element sits on cell boundaries along it (one extra point).
    pub fn staggering(self) -> [usize; 3] {
        use TopologicalElement::*;
        match self {
            CC => [0, 0, 0],
            F1 => [1, 0, 0],
            F2 => [0, 1, 0],
            F3 => [0, 0, 1],
            E1 => [0, 1, 1],
            E2 => [1, 0, 1],
            E3 => [1, 1, 0],
            NN => [1, 1, 1],
        }
    }
}

impl Centering {
    /// The topological elements a variable with this centering stores.
    pub fn elements(self) -> &'static [TopologicalElement] {
        use TopologicalElement::*;
        match self {
            Centering::Cell => &[CC],
            Centering::Face => &[F1, F2, F3],
            Centering::Edge => &[E1, E2, E3],
            Centering::Node => &[NN],
        }
    }
}

/// Allocation control of a sparse variable.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SparseThresholds {
    /// A block allocates the variable when some value's magnitude exceeds this.
    pub allocation: f64,
    /// A block may deallocate it when every value's magnitude is below this
    /// (must not exceed `allocation`).
    pub deallocation: f64,
    /// The value an unallocated block reads (and fills received ghosts with).
    pub default_value: f64,
}

impl Default for SparseThresholds {
    /// Parthenon's defaults: allocate above 1e-12, deallocate below 1e-14, default 0.
    fn default() -> Self {
        Self {
            allocation: 1e-12,
            deallocation: 1e-14,
            default_value: 0.0,
        }
    }
}

/// What a variable is and how the mesh treats it.
///
/// ```
/// use starhalo_mesh::field::{Centering, Metadata, SparseThresholds};
/// let md = Metadata::new(Centering::Cell)
///     .fill_ghost()
///     .independent()
///     .with_fluxes()
///     .sparse(SparseThresholds::default())
///     .components(3);
/// assert!(md.is_fill_ghost() && md.is_sparse() && md.has_fluxes());
/// assert_eq!(md.ncomp(), 3);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Metadata {
    centering: Centering,
    fill_ghost: bool,
    independent: bool,
    with_fluxes: bool,
    sparse: Option<SparseThresholds>,
    ncomp: usize,
}

impl Metadata {
    /// A dense, one-component variable with no flags.
    pub fn new(centering: Centering) -> Self {
        Self {
            centering,
            fill_ghost: false,
            independent: false,
            with_fluxes: false,
            sparse: None,
            ncomp: 1,
        }
    }

    /// Exchange ghost zones (Parthenon's `Metadata::FillGhost`).
    pub fn fill_ghost(mut self) -> Self {
        self.fill_ghost = true;
        self
    }

    /// An evolved quantity (`Metadata::Independent`).
    pub fn independent(mut self) -> Self {
        self.independent = true;
        self
    }

    /// Carries fluxes (`Metadata::WithFluxes`).
    pub fn with_fluxes(mut self) -> Self {
        self.with_fluxes = true;
        self
    }

    /// Sparse, with these thresholds (`Metadata::Sparse`).
    pub fn sparse(mut self, t: SparseThresholds) -> Self {
        self.sparse = Some(t);
        self
    }

    /// Number of components (vector or tensor size), at least 1.
    pub fn components(mut self, n: usize) -> Self {
        self.ncomp = n;
        self
    }

    /// The centering.
    pub fn centering(&self) -> Centering {
        self.centering
    }

    /// Ghost zones are exchanged.
    pub fn is_fill_ghost(&self) -> bool {
        self.fill_ghost
    }

    /// An evolved quantity.
    pub fn is_independent(&self) -> bool {
        self.independent
    }

    /// Carries fluxes.
    pub fn has_fluxes(&self) -> bool {
        self.with_fluxes
    }

    /// Sparse.
    pub fn is_sparse(&self) -> bool {
        self.sparse.is_some()
    }

    /// Thresholds, for a sparse variable.
    pub fn sparse_thresholds(&self) -> Option<SparseThresholds> {
        self.sparse
    }

    /// The value an unallocated (or freshly allocated) block holds: the sparse default, or 0.
    pub fn default_value(&self) -> f64 {
        self.sparse.map_or(0.0, |t| t.default_value)
    }

    /// Number of components.
    pub fn ncomp(&self) -> usize {
        self.ncomp
    }

    /// Check the combination of flags for variable `name`.
    pub fn validate(&self, name: &str) -> Result<(), MeshError> {
        let bad = |reason: &str| {
            Err(MeshError::Field {
                name: name.into(),
                reason: reason.into(),
            })
        };
        if name.is_empty() {
            return bad("a variable needs a name");
        }
        if self.ncomp == 0 {
            return bad("needs at least one component");
        }
        if self.with_fluxes && !matches!(self.centering, Centering::Cell | Centering::Face) {
            return bad("only cell- and face-centred variables can carry fluxes");
        }
        if let Some(t) = self.sparse {
            if !(t.allocation.is_finite()
                && t.deallocation.is_finite()
                && t.default_value.is_finite())
            {
                return bad("sparse thresholds and default value must be finite");
            }
            if t.deallocation < 0.0 || t.deallocation > t.allocation {
                return bad("sparse thresholds need 0 <= deallocation <= allocation");
            }
        }
        Ok(())
    }

    /// Storage for this variable on a block of `shape`: `ncomp` copies of every topological
    /// element's entire range, filled with [`Metadata::default_value`].
    pub fn allocate(&self, shape: &IndexShape, space: MemSpace) -> Result<Buffer<f64>, SpaceError> {
        // Counted wide: up to three element arrays of each of `ncomp` components.
        let n: u128 = self
            .centering
            .elements()
            .iter()
            .map(|&te| shape.ncells(IndexDomain::Entire, te) as u128)
            .sum();
        let wanted = n * self.ncomp as u128;
        let len = usize::try_from(wanted).map_err(|_| SpaceError::TooLarge(wanted))?;
        let mut b = Buffer::zeroed(space, len)?;
        if let Some(h) = b.host_mut() {
            h.fill(self.default_value());
        }
        Ok(b)
    }
}

/// A named variable.
#[derive(Debug, Clone, PartialEq)]
pub struct Variable {
    /// Unique name.
    pub name: String,
    /// Its metadata.
    pub metadata: Metadata,
}

/// The flux of a variable across one family of faces (or, for a face-centred variable, along
/// one family of edges).
#[derive(Debug, Clone, PartialEq)]
pub struct FluxVariable {
    /// `bnd_flux::<variable>::x<N>`.
    pub name: String,
    /// The variable it is the flux of.
    pub of: String,
    /// Direction 0, 1 or 2.
    pub direction: usize,
    /// Where the flux lives: `F1..F3` for a cell variable, `E1..E3` for a face variable.
    pub element: TopologicalElement,
    /// Components (those of the variable).
    pub ncomp: usize,
}

/// The variables of a simulation, in registration order.
///
/// ```
/// use starhalo_mesh::field::{Centering, Fields, Metadata};
/// let mut f = Fields::default();
/// f.add("rho", Metadata::new(Centering::Cell).fill_ghost().with_fluxes()).unwrap();
/// f.add("phi", Metadata::new(Centering::Cell)).unwrap();
/// assert!(f.add("rho", Metadata::new(Centering::Node)).is_err());
/// assert_eq!(f.fill_ghost().count(), 1);
/// let fl = f.flux_variables(2);
/// assert_eq!(fl.len(), 2);
/// assert_eq!(fl[1].name, "bnd_flux::rho::x2");
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fields {
    vars: Vec<Variable>,
}

impl Fields {
    /// Register `name`; names are unique.
    pub fn add(&mut self, name: &str, metadata: Metadata) -> Result<(), MeshError> {
        metadata.validate(name)?;
        if self.get(name).is_some() {
            return Err(MeshError::Field {
                name: name.into(),
                reason: "registered twice".into(),
            });
        }
        self.vars.push(Variable {
            name: name.into(),
            metadata,
        });
        Ok(())
    }

    /// The variable called `name`.
    pub fn get(&self, name: &str) -> Option<&Variable> {
        self.vars.iter().find(|v| v.name == name)
    }

    /// All variables.
    pub fn iter(&self) -> impl Iterator<Item = &Variable> {
        self.vars.iter()
    }

    /// The variables whose ghost zones are exchanged.
    pub fn fill_ghost(&self) -> impl Iterator<Item = &Variable> {
        self.vars.iter().filter(|v| v.metadata.is_fill_ghost())
    }

    /// One flux variable per active direction for every variable with fluxes.
    pub fn flux_variables(&self, ndim: usize) -> Vec<FluxVariable> {
        use TopologicalElement::*;
        let mut out = Vec::new();
        for v in self.vars.iter().filter(|v| v.metadata.has_fluxes()) {
            let te = match v.metadata.centering() {
                Centering::Face => [E1, E2, E3],
                _ => [F1, F2, F3],
            };
            for d in 0..ndim.min(3) {
                out.push(FluxVariable {
                    name: format!("bnd_flux::{}::x{}", v.name, d + 1),
                    of: v.name.clone(),
                    direction: d,
                    element: te[d],
                    ncomp: v.metadata.ncomp(),
                });
            }
        }
        out
    }
}

/// Which part of a block an index range covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IndexDomain {
    /// The block's own points.
    Interior,
    /// Interior and ghost layers.
    Entire,
}

/// An inclusive index range `s..=e`, as Parthenon writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IndexRange {
    /// First index.
    pub s: usize,
    /// Last index (inclusive).
    pub e: usize,
}

impl IndexRange {
    /// Number of indices (0 if `e < s`).
    pub fn len(&self) -> usize {
        (self.e + 1).saturating_sub(self.s)
    }

    /// True if `e < s`.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// As a half-open Rust range.
    pub fn as_range(&self) -> Range<usize> {
        self.s..self.e + 1
    }
}

/// Index ranges of one block.
///
/// ```
/// use starhalo_mesh::field::{IndexDomain, IndexShape, TopologicalElement};
/// let s = IndexShape::new([16, 8, 1], 2, 2).unwrap();
/// let cc = TopologicalElement::CC;
/// assert_eq!(s.range(0, IndexDomain::Interior, cc).as_range(), 2..18);
/// assert_eq!(s.range(0, IndexDomain::Entire, cc).as_range(), 0..20);
/// assert_eq!(s.range(2, IndexDomain::Entire, cc).as_range(), 0..1);
/// assert_eq!(s.range(0, IndexDomain::Interior, TopologicalElement::F1).len(), 17);
/// let c = s.coarse().unwrap();
/// assert_eq!((c.nx(), c.nghost()), ([8, 4, 1], 2));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IndexShape {
    nx: [usize; 3],
    nghost: usize,
    ndim: usize,
}

impl IndexShape {
    /// A block of `nx` interior cells with `nghost` ghost layers along the first `ndim`
    /// directions (inactive directions must have `nx = 1` and get no ghosts).
    pub fn new(nx: [usize; 3], nghost: usize, ndim: usize) -> Result<Self, MeshError> {
        let ok = (1..=3).contains(&ndim)
            && (0..3).all(|d| if d < ndim { nx[d] >= 1 } else { nx[d] == 1 });
        if !ok {
            return Err(MeshError::invalid(
                "parthenon/meshblock/nx1",
                format!("{nx:?}"),
                format!("not a block shape in {ndim} dimensions"),
            ));
        }
        // Node-centred arrays, the largest, have nx + 2 nghost + 1 points per active direction:
        // their count must fit in a usize, so that no array length overflows.
        let points = (0..3).try_fold(1usize, |n, d| {
            let extra = match d < ndim {
                true => nghost.checked_mul(2)?.checked_add(1)?,
                false => 0,
            };
            n.checked_mul(nx[d].checked_add(extra)?)
        });
        if points.is_none() {
            return Err(MeshError::invalid(
                "parthenon/mesh/nghost",
                nghost.to_string(),
                format!(
                    "a block of {nx:?} cells with {nghost} ghost layers has more cells than can \
                     be counted"
                ),
            ));
        }
        Ok(Self { nx, nghost, ndim })
    }

    /// Interior cells per direction.
    pub fn nx(&self) -> [usize; 3] {
        self.nx
    }

    /// Ghost layers along active directions.
    pub fn nghost(&self) -> usize {
        self.nghost
    }

    /// Number of dimensions.
    pub fn ndim(&self) -> usize {
        self.ndim
    }

    /// Ghost layers along direction `d` (0 for an inactive one).
    pub fn ghosts(&self, d: usize) -> usize {
        if d < self.ndim {
            self.nghost
        } else {
            0
        }
    }

    /// The range along direction `d` of `domain` for points of kind `te`.
    pub fn range(&self, d: usize, domain: IndexDomain, te: TopologicalElement) -> IndexRange {
        let g = self.ghosts(d);
        let extra = if d < self.ndim { te.staggering()[d] } else { 0 };
        match domain {
            IndexDomain::Interior => IndexRange {
                s: g,
                e: g + self.nx[d] - 1 + extra,
            },
            IndexDomain::Entire => IndexRange {
                s: 0,
                e: self.nx[d] + 2 * g - 1 + extra,
            },
        }
    }

    /// Number of points of kind `te` in `domain`.
    pub fn ncells(&self, domain: IndexDomain, te: TopologicalElement) -> usize {
        (0..3).map(|d| self.range(d, domain, te).len()).product()
    }

    /// The shape of the coarse buffer a block keeps for multi-level exchange: half the interior
    /// cells along each active direction and `nghost / 2 + 1` ghost layers.
    pub fn coarse(&self) -> Result<Self, MeshError> {
        let mut nx = self.nx;
        for d in 0..self.ndim {
            if !nx[d].is_multiple_of(2) {
                return Err(MeshError::invalid(
                    format!("parthenon/meshblock/nx{}", d + 1),
                    nx[d],
                    "a coarse buffer needs an even block size",
                ));
            }
            nx[d] /= 2;
        }
        Ok(Self {
            nx,
            nghost: self.nghost / 2 + 1,
            ndim: self.ndim,
        })
    }
}

/// Split a rank's blocks (its gids, in Morton order) into mesh-data partitions of `pack_size`
/// blocks each (the last may be smaller); `None` puts them all in one.
///
/// ```
/// use starhalo_mesh::field::pack_partitions;
/// assert_eq!(pack_partitions(10..15, Some(2)), vec![vec![10, 11], vec![12, 13], vec![14]]);
/// assert_eq!(pack_partitions(0..3, None), vec![vec![0, 1, 2]]);
/// assert!(pack_partitions(0..0, Some(4)).is_empty());
/// ```
pub fn pack_partitions(gids: Range<usize>, pack_size: Option<usize>) -> Vec<Vec<usize>> {
    let all: Vec<usize> = gids.collect();
    if all.is_empty() {
        return Vec::new();
    }
    let n = pack_size.unwrap_or(all.len()).max(1);
    all.chunks(n).map(|c| c.to_vec()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_whose_cells_cannot_be_counted_is_an_error() {
        assert!(IndexShape::new([8, 8, 1], usize::MAX, 2).is_err());
        assert!(IndexShape::new([usize::MAX, 1, 1], 0, 1).is_err());
        assert!(IndexShape::new([1 << 30, 1 << 30, 1 << 30], 0, 3).is_err());
        assert!(IndexShape::new([1 << 20, 1 << 20, 1], 2, 2).is_ok());
    }

    #[test]
    fn a_variable_too_large_to_allocate_is_an_error() {
        let shape = IndexShape::new([8, 8, 1], 2, 2).unwrap();
        let md = Metadata::new(Centering::Cell).components(usize::MAX / 4);
        let got = md.allocate(&shape, MemSpace::Host);
        let want = 12 * 12 * (usize::MAX / 4) as u128;
        assert!(
            matches!(got, Err(SpaceError::TooLarge(n)) if n == want),
            "{got:?}"
        );
        // Three face arrays, each countable, whose sum is not.
        let wide = IndexShape::new([3 << 30, 3 << 30, 1], 0, 2).unwrap();
        let got = Metadata::new(Centering::Face).allocate(&wide, MemSpace::Host);
        assert!(matches!(got, Err(SpaceError::TooLarge(_))), "{got:?}");
    }

    #[test]
    fn staggered_elements_have_one_more_point_where_staggered() {
        let s = IndexShape::new([8, 6, 4], 3, 3).unwrap();
        use TopologicalElement::*;
        assert_eq!(s.ncells(IndexDomain::Interior, CC), 8 * 6 * 4);
        assert_eq!(s.ncells(IndexDomain::Interior, F2), 8 * 7 * 4);
        assert_eq!(s.ncells(IndexDomain::Interior, E2), 9 * 6 * 5);
        assert_eq!(s.ncells(IndexDomain::Entire, NN), 15 * 13 * 11);
        // 1-D: no ghosts and no staggering along inactive directions.
        let s1 = IndexShape::new([8, 1, 1], 2, 1).unwrap();
        assert_eq!(s1.ncells(IndexDomain::Entire, NN), 13);
        assert!(IndexShape::new([8, 2, 1], 2, 1).is_err());
        assert_eq!(s.coarse().unwrap().nx(), [4, 3, 2]);
        assert_eq!(s.coarse().unwrap().nghost(), 2);
        assert!(IndexShape::new([6, 3, 1], 2, 2).unwrap().coarse().is_err());
    }

    #[test]
    fn metadata_validation_and_allocation() {
        let bad = Metadata::new(Centering::Node).with_fluxes();
        assert!(bad.validate("b").is_err());
        let t = SparseThresholds {
            allocation: 1e-3,
            deallocation: 1e-2,
            default_value: 0.0,
        };
        assert!(Metadata::new(Centering::Cell)
            .sparse(t)
            .validate("s")
            .is_err());
        assert!(Metadata::new(Centering::Cell)
            .components(0)
            .validate("c")
            .is_err());
        let md = Metadata::new(Centering::Face)
            .sparse(SparseThresholds {
                default_value: 7.5,
                ..Default::default()
            })
            .components(2);
        let shape = IndexShape::new([4, 4, 1], 1, 2).unwrap();
        let b = md.allocate(&shape, MemSpace::Host).unwrap();
        // F1: 7x6, F2: 6x7, F3 (inactive, unstaggered): 6x6 — two components.
        assert_eq!(b.len(), 2 * (42 + 42 + 36));
        assert!(b.host().unwrap().iter().all(|&v| v == 7.5));
    }

    #[test]
    fn face_variables_get_edge_fluxes() {
        let mut f = Fields::default();
        f.add("B", Metadata::new(Centering::Face).with_fluxes())
            .unwrap();
        let fl = f.flux_variables(3);
        assert_eq!(fl.len(), 3);
        assert_eq!(fl[2].element, TopologicalElement::E3);
        assert_eq!(fl[0].of, "B");
    }
}
