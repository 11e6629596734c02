//! `advection`: linear advection of `advection/num_vars` copies of a cell field on the block
//! mesh, the ghost exchange's end-to-end test (as Parthenon's advection example).
//!
//! `dq/dt + v . grad q = 0` with constant velocity `(vx, vy, vz)`. Second order in space
//! (piecewise-linear reconstruction with a `none` (centred), `minmod` or `mc` limiter, upwind
//! face fluxes, conservative update) and first or second order in time (`rk1`, SSP `rk2`).
//! Each stage runs as task regions with one task list per mesh-data partition: face fluxes,
//! the flux correction at fine–coarse faces (multilevel meshes), the update and the ghost
//! fill by the boundary crate's [`Exchange`] (`advection/use_pack_in_one: false`, as in
//! Parthenon's example, makes every block a partition of its own). A receive that waits
//! longer than `parthenon/time/recv_bdry_buf_timeout_sec` stops the run naming the channels
//! still pending.
//!
//! Profiles and defaults are Parthenon's example's (velocity `(1, 1, 1)`, `cfl` 0.45, `amp`
//! 1e-6): `wave` (`1 + amp sin(k x') |v|`, `x'` the position along a wavevector at angles
//! `ang_2` from the x1-x2 plane and `ang_3` from x1 within it, by default the box's diagonal
//! with one wavelength along each active direction, so periodic; `ang_2_vert`/`ang_3_vert`
//! turn it along x3/x2), `smooth_gaussian` (`1 + amp exp(-100 r^2)`, or `exp(-r^2 / (2
//! width^2))` given `width`), `hard_sphere` (1 within `radius`, default 0.15, 0 outside), both
//! around the box centre, and starhalo's `linear` (`a0 + ax x + ay y + az z` from
//! `linear_coeffs`).
//!
//! Every cell's arithmetic depends only on its global position (cell centres and spacings
//! come from global indices), the time step is a minimum and the L1 error is an exact sum
//! ([`ExactSum`]), so results are bit-for-bit identical for any block size and number of ranks.
//!
//! On a multilevel mesh the boundary crate's flux correction keeps the update conservative.
//! With `parthenon/mesh/refinement: adaptive` the mesh follows the fields' fronts, or the
//! criteria of `parthenon/refinementN` blocks (see [`amr`]): refinement, merging, rebalancing
//! and the data movement keep the total too.
//!
//! Restarts: `file_type: rst` outputs write everything a continuation needs (fields with
//! ghosts and sparse allocation, forest, derefinement counts, cycle, time, dt and every
//! output's schedule, see [`crate::run::resume`]); `run DECK -r FILE` continues bit for bit.
//!
//! Sparse fields: `advection/sparse: true` (with `parthenon/sparse/enable_sparse`,
//! `alloc_threshold`, `dealloc_threshold`) stores the fields only on blocks where they exceed
//! the allocation threshold; unallocated blocks are skipped by the update and become
//! allocated when a neighbour sends them data above the threshold. Blocks are never
//! deallocated.
//!
//! GPU: `parthenon/exec/space: cuda` (default `host`) keeps the fields on the rank's GPU (the
//! node-local rank mod the device count, or `STARHALO_CUDA_DEVICE`): any mesh (static or
//! adaptive refinement too) with periodic, outflow or reflecting boundaries, dense or sparse
//! fields, from the start or from a restart; the same deck otherwise (see [`gpu`]). Without a
//! usable GPU the run exits 1 saying why. `parthenon/exec/gpu_mpi` chooses how the ghost
//! messages cross MPI: `staged` through host buffers (any MPI), `aware` in device memory
//! (an MPI with CUDA support, or a job of one rank, whose messages never reach MPI; exits 1
//! otherwise), `auto` (default) the latter where it can.

// Geometry indexes several per-direction arrays with one direction index.
#![allow(clippy::needless_range_loop)]

mod amr;
mod derived;
mod gpu;

use super::{Problem, ProblemInfo};
use crate::deck::Deck;
use crate::exit::bad_input;
use crate::output::{
    hst, schedule, write_output, FileType, OutputBlock, OutputError, ParamValue, Schedule, Snapshot,
};
use crate::run::collective::{agree, max_f64};
use crate::run::memory::Budget;
use crate::run::resume::{self, Resume};
use crate::run::stats::{CommTimer, Stop, Summary};
use crate::run::RunContext;
use anyhow::{Context as _, Result};
use mpi::collective::SystemOperation;
use mpi::topology::Communicator;
use mpi::traits::CommunicatorCollectives;
use starhalo_boundary::tasks::{add_exchange, add_flux_correction};
use starhalo_boundary::{
    BlockData, BoundaryType, BufferPool, Exchange, ExchangeOptions, FluxCorrection, FluxData,
};
use starhalo_exec::cuda::Device;
use starhalo_exec::tasks::{TaskList, TaskRegion, TaskStatus};
use starhalo_exec::MemSpace;
use starhalo_mesh::field::{Centering, Fields, Metadata, SparseThresholds};
use starhalo_mesh::{BoundaryCondition, Mesh, MeshConfig};
use starhalo_sf::device::GpuMpi;
use starhalo_sf::ExactSum;
use std::cell::{Cell, RefCell};
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const BLOCK: &str = "advection";
const TIME: &str = "parthenon/time";
const MESH: &str = "parthenon/mesh";
const SPARSE: &str = "parthenon/sparse";

/// The driver's entry for this problem.
pub const INFO: ProblemInfo = ProblemInfo {
    name: "advection",
    block: BLOCK,
    restarts: true,
    gpu: true,
    setup,
};

/// The initial profile. Wave, Gaussian and sphere are Parthenon's advection example's, with
/// its defaults; the Gaussian and the sphere sit at the box centre (the origin of the boxes
/// Parthenon's decks use), nearest image along periodic directions.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Profile {
    /// `1 + amp sin(k_par x') vel`, `x'` the position along the wavevector, which points
    /// along `ang_2` (from the x1-x2 plane) and `ang_3` (from x1 within it).
    Wave(Wave),
    /// `1 + amp exp(-steep r^2)`: Parthenon's `steep` is 100, `width` sets `1 / (2 width^2)`.
    SmoothGaussian {
        amp: f64,
        steep: f64,
    },
    HardSphere {
        radius: f64,
    },
    Linear([f64; 4]),
}

impl Profile {
    /// Its `advection/profile` name.
    fn name(&self) -> &'static str {
        match self {
            Profile::Wave(_) => "wave",
            Profile::SmoothGaussian { .. } => "smooth_gaussian",
            Profile::HardSphere { .. } => "hard_sphere",
            Profile::Linear(_) => "linear",
        }
    }

    /// The keys of the `advection` block it reads.
    fn keys(&self) -> &'static [&'static str] {
        match self {
            Profile::Wave(_) => &["amp", "ang_2", "ang_3", "ang_2_vert", "ang_3_vert"],
            Profile::SmoothGaussian { .. } => &["amp", "width"],
            Profile::HardSphere { .. } => &["radius"],
            Profile::Linear(_) => &["linear_coeffs"],
        }
    }
}

/// The wave's constants, derived as Parthenon's advection example derives them.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Wave {
    amp: f64,
    /// The speed `|(vx, vy, vz)|` as given (inactive directions included).
    vel: f64,
    k_par: f64,
    cos_a2: f64,
    sin_a2: f64,
    cos_a3: f64,
    sin_a3: f64,
}

/// Slope limiter of the piecewise-linear reconstruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Limiter {
    /// Centred slope, unlimited (second order on smooth data, oscillates at jumps).
    None,
    Minmod,
    /// Monotonised central.
    Mc,
}

impl Limiter {
    #[inline]
    fn slope(self, a: f64, b: f64) -> f64 {
        match self {
            Limiter::None => 0.5 * (a + b),
            Limiter::Minmod => {
                if a * b <= 0.0 {
                    0.0
                } else if a.abs() < b.abs() {
                    a
                } else {
                    b
                }
            }
            Limiter::Mc => {
                if a * b <= 0.0 {
                    0.0
                } else {
                    let m = (2.0 * a.abs()).min(2.0 * b.abs()).min(0.5 * (a + b).abs());
                    m.copysign(a)
                }
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Integrator {
    Rk1,
    Rk2,
}

impl Integrator {
    fn stages(self) -> usize {
        match self {
            Integrator::Rk1 => 1,
            Integrator::Rk2 => 2,
        }
    }
}

struct Advection {
    mesh: Mesh,
    fields: Fields,
    /// What hdf5 and png outputs may write: `fields`, then the derived fields
    /// (`advection/fill_derived`, see [`derived`]).
    out_fields: Fields,
    /// Shared by the tasks of every partition (a region runs one task at a time).
    data: RefCell<BlockData>,
    num_vars: usize,
    v: [f64; 3],
    profile: Profile,
    limiter: Limiter,
    integrator: Integrator,
    cfl: f64,
    tlim: f64,
    nlim: Option<u64>,
    compute_error: bool,
    coalesced: bool,
    outputs: Vec<OutputBlock>,
    deck_text: String,
    amr: Option<amr::Amr>,
    amr_stats: amr::AmrStats,
    /// Where a restarted run picks up (`-r FILE`); `None` starts from the profile.
    resume: Option<Resume>,
    /// Where the fields live while the run steps.
    space: MemSpace,
    /// How the ghost messages of device fields cross MPI (`parthenon/exec/gpu_mpi`), made
    /// staged or aware by [`Problem::acquire`].
    gpu_mpi: GpuMpi,
    /// The GPU the fields live on (`space: cuda`), opened by [`Problem::acquire`].
    device: Option<Arc<Device>>,
    /// The memory that bounds the number of blocks (`mesh.config().max_blocks`).
    budget: Budget,
    /// The problem's parameters as every hdf5 and restart output's `/Params` holds them
    /// (see [`package_params`]).
    package: Vec<(String, ParamValue)>,
}

/// `/Params` names start with the package's name, Parthenon's example's.
const PACKAGE: &str = "advection_package";

/// The parameters Parthenon's advection package stores and its outputs write (`/Params`,
/// `advection_package/<key>`), those that the run has: the deck's velocity as given (inactive
/// directions included), its speed, and the wave's constants.
fn package_params(
    given_v: [f64; 3],
    cfl: f64,
    num_vars: usize,
    fill_derived: bool,
    profile: &Profile,
) -> Vec<(String, ParamValue)> {
    use ParamValue::{Bool, Int, Real, Str};
    let vel = given_v.iter().map(|c| c * c).sum::<f64>().sqrt();
    let mut p = vec![
        ("cfl", Real(cfl)),
        ("vx", Real(given_v[0])),
        ("vy", Real(given_v[1])),
        ("vz", Real(given_v[2])),
        ("vel", Real(vel)),
        ("profile", Str(profile.name().to_string())),
        ("num_vars", Int(num_vars as i64)),
        ("fill_derived", Bool(fill_derived)),
    ];
    match *profile {
        Profile::Wave(w) => p.extend([
            ("amp", Real(w.amp)),
            ("k_par", Real(w.k_par)),
            ("cos_a2", Real(w.cos_a2)),
            ("cos_a3", Real(w.cos_a3)),
            ("sin_a2", Real(w.sin_a2)),
            ("sin_a3", Real(w.sin_a3)),
        ]),
        Profile::SmoothGaussian { amp, .. } => p.push(("amp", Real(amp))),
        Profile::HardSphere { .. } | Profile::Linear(_) => {}
    }
    p.into_iter()
        .map(|(k, v)| (format!("{PACKAGE}/{k}"), v))
        .collect()
}

/// The name of field copy `n`.
fn field_name(n: usize) -> String {
    if n == 0 {
        "advected".to_string()
    } else {
        format!("advected_{n}")
    }
}

fn setup(deck: &Deck, ctx: &RunContext) -> Result<Box<dyn Problem>> {
    let mut config = deck.mesh_config()?;
    if config.nghost < 2 {
        return Err(deck
            .invalid(
                MESH,
                "nghost",
                "piecewise-linear reconstruction needs at least 2 ghost layers",
            )
            .into());
    }
    let ndim = config.ndim();
    let coalesced = deck.get_bool_or(MESH, "do_coalesced_comms", true)?;
    // Parthenon's example: without pack-in-one each block exchanges its own ghosts, as a
    // partition of one block does here.
    if !deck.get_bool_or(BLOCK, "use_pack_in_one", true)? {
        if config.pack_size.is_some_and(|n| n != 1) {
            return Err(deck
                .invalid(
                    BLOCK,
                    "use_pack_in_one",
                    "false means partitions of one block each; parthenon/mesh/pack_size asks for others",
                )
                .into());
        }
        config.pack_size = Some(1);
    }

    let num_vars = deck.get_usize_or(BLOCK, "num_vars", 1)?;
    if !(1..=64).contains(&num_vars) {
        return Err(deck.invalid(BLOCK, "num_vars", "must be 1 to 64").into());
    }
    let mut v = [0.0; 3];
    for (d, key) in ["vx", "vy", "vz"].iter().enumerate() {
        v[d] = deck.get_f64_or(BLOCK, key, 1.0)?;
        if !v[d].is_finite() {
            return Err(deck.invalid(BLOCK, key, "must be a finite number").into());
        }
    }
    let given_v = v;
    let vel = v.iter().map(|c| c * c).sum::<f64>().sqrt();
    for d in 0..3 {
        if d >= ndim {
            // Inactive directions do not move anything.
            v[d] = 0.0;
        }
    }
    if v.iter().all(|&c| c == 0.0) {
        return Err(deck
            .invalid(
                BLOCK,
                "vx",
                format!("the velocity is zero along every active direction ({ndim}-D mesh)"),
            )
            .into());
    }
    let finite = |key: &str, x: f64, positive: bool| -> Result<f64> {
        if !x.is_finite() || (positive && x <= 0.0) {
            let what = if positive {
                "must be a finite number > 0"
            } else {
                "must be a finite number"
            };
            return Err(deck.invalid(BLOCK, key, what).into());
        }
        Ok(x)
    };
    let amp = || -> Result<f64> { finite("amp", deck.get_f64_or(BLOCK, "amp", 1e-6)?, false) };
    let profile = match deck.get_str_or(BLOCK, "profile", "wave")?.as_str() {
        "wave" => Profile::Wave(wave(deck, &config, amp()?, vel)?),
        "smooth_gaussian" => Profile::SmoothGaussian {
            amp: amp()?,
            steep: match deck.has(BLOCK, "width") {
                true => {
                    let w = finite("width", deck.get_f64(BLOCK, "width")?, true)?;
                    1.0 / (2.0 * w * w)
                }
                false => 100.0,
            },
        },
        "hard_sphere" => Profile::HardSphere {
            radius: finite("radius", deck.get_f64_or(BLOCK, "radius", 0.15)?, true)?,
        },
        "linear" => {
            let items = deck.get_list_or(BLOCK, "linear_coeffs", vec!["1.0".into()])?;
            let mut c = [0.0; 4];
            if items.len() > 4 {
                return Err(deck
                    .invalid(BLOCK, "linear_coeffs", "at most 4 numbers: a0, ax, ay, az")
                    .into());
            }
            for (i, s) in items.iter().enumerate() {
                c[i] = s
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite())
                    .ok_or_else(|| {
                        deck.invalid(
                            BLOCK,
                            "linear_coeffs",
                            format!("'{s}' is not a finite number"),
                        )
                    })?;
            }
            Profile::Linear(c)
        }
        other => {
            return Err(deck
                .invalid(
                    BLOCK,
                    "profile",
                    format!(
                    "unknown profile '{other}' (known: wave, smooth_gaussian, hard_sphere, linear)"
                ),
                )
                .into())
        }
    };
    // A key of another profile (left by an override of `profile`, say) is ignored.
    let others = ["amp", "width", "radius", "linear_coeffs"];
    let others = others.into_iter().chain(WAVE_KEYS);
    deck.ignore(
        BLOCK,
        others.filter(|k| !profile.keys().contains(k)),
        &format!("profile {}", profile.name()),
    );
    let limiter = match deck.get_str_or(BLOCK, "limiter", "mc")?.as_str() {
        "none" => Limiter::None,
        "minmod" => Limiter::Minmod,
        "mc" => Limiter::Mc,
        other => {
            return Err(deck
                .invalid(
                    BLOCK,
                    "limiter",
                    format!("unknown limiter '{other}' (known: none, minmod, mc)"),
                )
                .into())
        }
    };
    let cfl = deck.get_f64_or(BLOCK, "cfl", 0.45)?;
    if !(cfl > 0.0 && cfl <= 1.0) {
        return Err(deck.invalid(BLOCK, "cfl", "must be in (0, 1]").into());
    }
    let compute_error = deck.get_bool_or(BLOCK, "compute_error", false)?;

    let integrator = match deck.get_str_or(TIME, "integrator", "rk2")?.as_str() {
        "rk1" => Integrator::Rk1,
        "rk2" => Integrator::Rk2,
        other => {
            return Err(deck
                .invalid(
                    TIME,
                    "integrator",
                    format!("unknown integrator '{other}' (known: rk1, rk2)"),
                )
                .into())
        }
    };
    let tlim = deck.get_nonneg_f64_or(TIME, "tlim", 1.0)?;
    let nlim = match deck.get_i64_or(TIME, "nlim", -1)? {
        n if n < 0 => None,
        n => Some(n as u64),
    };

    let outputs = crate::run::output_blocks::blocks_of(deck)?;

    let amr = amr::Amr::from_deck(deck, &config, num_vars)?;

    let sparse = sparse_thresholds(deck)?;
    let space = crate::run::exec_space(deck)?;
    let gpu_mpi = crate::run::exec_gpu_mpi(deck)?;
    // The framework leaves `user` faces to the problem, and this one defines no such
    // boundary: its ghosts would stay zero.
    for d in 0..ndim {
        for (side, name) in ["ix", "ox"].iter().enumerate() {
            if config.bc[d][side] == BoundaryCondition::User {
                return Err(deck
                    .invalid(
                        MESH,
                        &format!("{name}{}_bc", d + 1),
                        "advection defines no user boundary (use periodic, outflow or reflecting)",
                    )
                    .into());
            }
        }
    }
    let mut fields = Fields::default();
    for n in 0..num_vars {
        let mut md = Metadata::new(Centering::Cell).fill_ghost();
        if let Some(t) = sparse {
            md = md.sparse(t);
        }
        fields
            .add(&field_name(n), md)
            .map_err(|e| bad_input!("{e}"))?;
    }
    let (nranks, rank) = (ctx.world.size() as usize, ctx.world.rank() as usize);
    let fill_derived = deck.get_bool_or(BLOCK, "fill_derived", true)?;
    let out_fields = match fill_derived {
        true => derived::with_derived(&fields, num_vars).map_err(|e| bad_input!("{e}"))?,
        false => fields.clone(),
    };
    // The fields, the step's start (rk2) and the face fluxes: about four copies, measured;
    // an output of derived fields copies them with the derived ones, five times their size.
    let derived_copies =
        match (outputs.iter()).any(|o| derived::written_by(o, &out_fields, num_vars)) {
            true => 5,
            false => 0,
        };
    let budget = ctx.memory.budget(&config, num_vars, 4 + derived_copies);
    config.max_blocks = budget.max_blocks();
    let (mesh, data, resume) = match &ctx.restart {
        Some(path) => {
            let (m, d, r) = resume::load(
                path,
                INFO.name,
                config,
                &fields,
                (nranks, rank),
                &outputs,
                &budget,
            )?;
            let steps = nlim.is_none_or(|n| r.cycle < n) && r.time < tlim;
            resume::check_cycle_room(&r, steps, &outputs)?;
            (m, d, Some(r))
        }
        None => {
            let mesh = Mesh::new(config, nranks).map_err(|e| budget.deck_error(deck, e))?;
            let data = BlockData::new(&mesh, &fields, rank).map_err(crate::exit::storage_error)?;
            (mesh, data, None)
        }
    };
    for o in &outputs {
        crate::run::output_blocks::check(deck, o, &mesh, &out_fields)?;
    }
    let adv = Advection {
        package: package_params(given_v, cfl, num_vars, fill_derived, &profile),
        budget,
        mesh,
        fields,
        out_fields,
        data: RefCell::new(data),
        num_vars,
        v,
        profile,
        limiter,
        integrator,
        cfl,
        tlim,
        nlim,
        compute_error,
        coalesced,
        outputs,
        deck_text: deck.to_yaml(),
        amr,
        amr_stats: amr::AmrStats::default(),
        resume,
        space,
        gpu_mpi,
        device: None,
    };
    adv.check_time_resolution(deck)?;
    Ok(Box::new(adv))
}

/// `x` as a person reads it: with an exponent only where it is very large or small.
fn shown(x: f64) -> String {
    if x == 0.0 || (1e-3..1e6).contains(&x.abs()) {
        format!("{x}")
    } else {
        format!("{x:e}")
    }
}

/// What to change where the time step is too small for the time to advance to `tlim`.
const STALL_HINT: &str = "the time would stop advancing (raise advection/cfl, lower the \
    velocity, coarsen the mesh or lower parthenon/time/tlim)";

/// The wave's own keys.
const WAVE_KEYS: [&str; 4] = ["ang_2", "ang_3", "ang_2_vert", "ang_3_vert"];

/// The wave of Parthenon's advection example. Without `ang_2`/`ang_3` its wavevector runs
/// along the box's diagonal, with one wavelength along each active direction, so that it is
/// periodic; `ang_N_vert` turns it along x3 (`ang_2`) or x2 (`ang_3`).
fn wave(deck: &Deck, config: &MeshConfig, amp: f64, vel: f64) -> Result<Wave> {
    use std::f64::consts::FRAC_PI_2;
    let size: [f64; 3] = std::array::from_fn(|d| config.xmax[d] - config.xmin[d]);
    let ndim = config.ndim();
    let angle = |key: &str| -> Result<Option<f64>> {
        match deck.has(BLOCK, key) {
            true => match deck.get_f64(BLOCK, key)? {
                a if a.is_finite() => Ok(Some(a)),
                _ => Err(deck.invalid(BLOCK, key, "must be a finite number").into()),
            },
            false => Ok(None),
        }
    };
    let vert2 = deck.get_bool_or(BLOCK, "ang_2_vert", false)?;
    let vert3 = deck.get_bool_or(BLOCK, "ang_3_vert", false)?;
    let mut ang_3 = angle("ang_3")?.unwrap_or_else(|| (size[0] / size[1]).atan());
    let (mut sin_a3, mut cos_a3) = ang_3.sin_cos();
    if vert3 {
        (sin_a3, cos_a3, ang_3) = (1.0, 0.0, FRAC_PI_2);
    }
    let mut ang_2 = angle("ang_2")?
        .unwrap_or_else(|| (0.5 * (size[0] * cos_a3 + size[1] * sin_a3) / size[2]).atan());
    let (mut sin_a2, mut cos_a2) = ang_2.sin_cos();
    if vert2 {
        (sin_a2, cos_a2, ang_2) = (1.0, 0.0, FRAC_PI_2);
    }
    // The wavelength: the shortest of the wavevector's spans across the box.
    let span = [
        size[0] * cos_a2 * cos_a3,
        size[1] * cos_a2 * sin_a3,
        size[2] * sin_a2,
    ];
    let mut lambda = span[0];
    if ndim > 1 && ang_3 != 0.0 {
        lambda = lambda.min(span[1]);
    }
    if ndim > 2 && ang_2 != 0.0 {
        lambda = lambda.min(span[2]);
    }
    if vert3 {
        lambda = span[1];
    }
    if vert2 {
        lambda = span[2];
    }
    let k_par = 2.0 * std::f64::consts::PI / lambda;
    if !(k_par.is_finite() && lambda > 0.0) {
        let key = if deck.has(BLOCK, "ang_2") {
            "ang_2"
        } else {
            "ang_3"
        };
        return Err(deck
            .invalid(
                BLOCK,
                key,
                format!(
                    "the wavevector's shortest span across the box is {lambda:e}, not positive"
                ),
            )
            .into());
    }
    Ok(Wave {
        amp,
        vel,
        k_par,
        cos_a2,
        sin_a2,
        cos_a3,
        sin_a3,
    })
}

/// The advected fields' sparse thresholds: `advection/sparse` asks for sparse fields, and
/// `parthenon/sparse` (`enable_sparse`, `alloc_threshold`, `dealloc_threshold`) can switch
/// sparse storage off or set the thresholds, as in Parthenon.
fn sparse_thresholds(deck: &Deck) -> Result<Option<SparseThresholds>> {
    let wanted = deck.get_bool_or(BLOCK, "sparse", false)?;
    let enabled = deck.get_bool_or(SPARSE, "enable_sparse", true)?;
    let d = SparseThresholds::default();
    let alloc = deck.get_nonneg_f64_or(SPARSE, "alloc_threshold", d.allocation)?;
    let dealloc = deck.get_f64_or(SPARSE, "dealloc_threshold", d.deallocation.min(alloc))?;
    if !(dealloc.is_finite() && (0.0..=alloc).contains(&dealloc)) {
        return Err(deck
            .invalid(
                SPARSE,
                "dealloc_threshold",
                "must be a finite number in [0, alloc_threshold]",
            )
            .into());
    }
    Ok((wanted && enabled).then_some(SparseThresholds {
        allocation: alloc,
        deallocation: dealloc,
        default_value: 0.0,
    }))
}

/// Face fluxes along direction `d` of one block's field `u` at velocity `v` into `f`: `(n_d + 1)`
/// faces along `d` times the interior cells across, row-major `[k][j][i]`; face `i` is the
/// lower face of interior cell `i`. The state on a face is the upwind cell's value plus or
/// minus half its limited slope.
fn face_fluxes(u: &[f64], geo: &Geo, d: usize, v: f64, lim: Limiter, f: &mut [f64]) {
    // One loop per limiter, so that each is a straight-line row loop the compiler vectorises.
    match lim {
        Limiter::None => faces(u, geo, d, v, f, |a, b| Limiter::None.slope(a, b)),
        Limiter::Minmod => faces(u, geo, d, v, f, |a, b| Limiter::Minmod.slope(a, b)),
        Limiter::Mc => faces(u, geo, d, v, f, |a, b| Limiter::Mc.slope(a, b)),
    }
}

#[inline(always)]
fn faces(u: &[f64], geo: &Geo, d: usize, v: f64, f: &mut [f64], slope: impl Fn(f64, f64) -> f64) {
    let stride = [1, geo.dims[0], geo.dims[0] * geo.dims[1]][d];
    let mut fd = geo.n;
    fd[d] += 1;
    assert_eq!(
        f.len(),
        fd.iter().product::<usize>(),
        "flux storage of direction {d}"
    );
    if v == 0.0 {
        f.fill(0.0);
        return;
    }
    let nx = fd[0];
    for (row, out) in f.chunks_exact_mut(nx).enumerate() {
        // Face (i, j, k) lies between cells c - stride (left) and c (right).
        let c = geo.at([0, row % fd[1], row / fd[1]]);
        // The upwind cell's row and its two neighbours' rows along d.
        let up = if v > 0.0 { c - stride } else { c };
        let (lo, mid, hi) = (
            &u[up - stride..][..nx],
            &u[up..][..nx],
            &u[up + stride..][..nx],
        );
        let rows = out.iter_mut().zip(lo).zip(mid).zip(hi);
        if v > 0.0 {
            for (((o, &l), &m), &h) in rows {
                *o = v * (m + 0.5 * slope(m - l, h - m));
            }
        } else {
            for (((o, &l), &m), &h) in rows {
                *o = v * (m - 0.5 * slope(m - l, h - m));
            }
        }
    }
}

/// Updates the interior of one block's field `u` in place from its face fluxes `flux` (per
/// direction, as [`face_fluxes`] lays them out): `u + dt L(u)`, or with the cycle's start
/// `u0`, `(u0 + u + dt L(u)) / 2`.
fn block_update(u: &mut [f64], u0: Option<&[f64]>, flux: [&[f64]; 3], geo: &Geo, dt: f64) {
    match geo.ndim {
        1 => update_rows::<1>(u, u0, flux, geo, dt),
        2 => update_rows::<2>(u, u0, flux, geo, dt),
        _ => update_rows::<3>(u, u0, flux, geo, dt),
    }
}

fn update_rows<const NDIM: usize>(
    u: &mut [f64],
    u0: Option<&[f64]>,
    flux: [&[f64]; 3],
    geo: &Geo,
    dt: f64,
) {
    let n = geo.n;
    let nx = n[0];
    // Per direction: faces per row and plane, and the step from a cell's lower face to its
    // upper one.
    let fd = [0, 1, 2].map(|d| {
        let mut fd = n;
        fd[d] += 1;
        fd
    });
    let step = [1, fd[1][0], fd[2][0] * fd[2][1]];
    for k in 0..n[2] {
        for j in 0..n[1] {
            let c = geo.at([0, j, k]);
            let faces: [(&[f64], &[f64]); NDIM] = std::array::from_fn(|d| {
                let lo = (k * fd[d][1] + j) * fd[d][0];
                (&flux[d][lo..][..nx], &flux[d][lo + step[d]..][..nx])
            });
            let row = &mut u[c..][..nx];
            let base = u0.map(|u0| &u0[c..][..nx]);
            for i in 0..nx {
                let mut du = 0.0;
                for (d, (lo, hi)) in faces.iter().enumerate() {
                    du -= (hi[i] - lo[i]) / geo.dx[d];
                }
                let q = row[i] + dt * du;
                row[i] = match base {
                    None => q,
                    Some(b) => 0.5 * (b[i] + q),
                };
            }
        }
    }
}

/// Geometry of one block: cell centres and spacings from global indices.
struct Geo {
    /// Ghost layers per direction (0 on inactive ones).
    g: [usize; 3],
    /// Interior cells per direction.
    n: [usize; 3],
    /// Points per direction, ghosts included.
    dims: [usize; 3],
    /// Global index of the first interior cell at the block's level.
    first: [i64; 3],
    dx: [f64; 3],
    xmin: [f64; 3],
    ndim: usize,
}

impl Geo {
    fn new(mesh: &Mesh, gid: usize) -> Self {
        let c = mesh.config();
        let ndim = mesh.ndim();
        let loc = mesh.forest().loc(gid).expect("a gid of this mesh");
        let ext = mesh.forest().grid().extent(loc.level());
        let mut geo = Geo {
            g: [0; 3],
            n: [1; 3],
            dims: [1; 3],
            first: [0; 3],
            dx: [1.0; 3],
            xmin: c.xmin,
            ndim,
        };
        for d in 0..ndim {
            geo.g[d] = c.nghost;
            geo.n[d] = c.block_nx[d];
            geo.dims[d] = c.block_nx[d] + 2 * c.nghost;
            geo.first[d] = loc.lx_dir(d) * c.block_nx[d] as i64;
            geo.dx[d] = (c.xmax[d] - c.xmin[d]) / (ext[d] as f64 * c.block_nx[d] as f64);
        }
        geo
    }

    /// Centre of interior cell `p` (interior-local indices).
    fn center(&self, p: [usize; 3]) -> [f64; 3] {
        let mut x = [0.0; 3];
        for d in 0..self.ndim {
            x[d] = self.xmin[d] + ((self.first[d] + p[d] as i64) as f64 + 0.5) * self.dx[d];
        }
        x
    }

    /// Array index of interior cell `p`.
    fn at(&self, p: [usize; 3]) -> usize {
        ((p[2] + self.g[2]) * self.dims[1] + p[1] + self.g[1]) * self.dims[0] + p[0] + self.g[0]
    }

    fn volume(&self) -> f64 {
        self.dx[..self.ndim].iter().product()
    }

    fn interior(&self) -> impl Iterator<Item = [usize; 3]> + '_ {
        let n = self.n;
        (0..n[2]).flat_map(move |k| (0..n[1]).flat_map(move |j| (0..n[0]).map(move |i| [i, j, k])))
    }
}

impl Advection {
    fn ndim(&self) -> usize {
        self.mesh.ndim()
    }

    /// The profile at `x`.
    fn profile_at(&self, x: [f64; 3]) -> f64 {
        let c = self.mesh.config();
        let ndim = self.ndim();
        let center = |d: usize| 0.5 * (c.xmin[d] + c.xmax[d]);
        // Distance to the box centre, minimum image along periodic directions.
        let r2 = || {
            (0..ndim)
                .map(|d| {
                    let l = c.xmax[d] - c.xmin[d];
                    let mut dx = x[d] - center(d);
                    if c.bc[d][0] == BoundaryCondition::Periodic {
                        dx -= l * (dx / l).round();
                    }
                    dx * dx
                })
                .sum::<f64>()
        };
        match self.profile {
            Profile::Wave(w) => {
                // An inactive direction's one cell is centred in the box, as Parthenon's.
                let x: [f64; 3] = std::array::from_fn(|d| match d < ndim {
                    true => x[d],
                    false => center(d),
                });
                let along = w.cos_a2 * (x[0] * w.cos_a3 + x[1] * w.sin_a3) + x[2] * w.sin_a2;
                1.0 + w.amp * (w.k_par * along).sin() * w.vel
            }
            Profile::SmoothGaussian { amp, steep } => 1.0 + amp * (-steep * r2()).exp(),
            Profile::HardSphere { radius } => {
                if r2() < radius * radius {
                    1.0
                } else {
                    0.0
                }
            }
            Profile::Linear(a) => a[0] + a[1] * x[0] + a[2] * x[1] + a[3] * x[2],
        }
    }

    /// The exact solution at `x` and time `t`: the profile carried back along the velocity
    /// (wrapped into the box along periodic directions).
    fn exact(&self, x: [f64; 3], t: f64) -> f64 {
        let c = self.mesh.config();
        let mut y = x;
        for d in 0..self.ndim() {
            y[d] = x[d] - self.v[d] * t;
            if c.bc[d][0] == BoundaryCondition::Periodic {
                let l = c.xmax[d] - c.xmin[d];
                y[d] = c.xmin[d] + (y[d] - c.xmin[d]).rem_euclid(l);
            }
        }
        self.profile_at(y)
    }

    /// The profile on every block; a sparse field is allocated only on blocks where it
    /// exceeds the allocation threshold somewhere.
    fn initialise(&self) {
        let mut data = self.data.borrow_mut();
        for b in 0..data.gids().len() {
            let geo = Geo::new(&self.mesh, data.gids()[b]);
            let vals: Vec<(usize, f64)> = geo
                .interior()
                .map(|p| (geo.at(p), self.profile_at(geo.center(p))))
                .collect();
            for s in 0..self.num_vars {
                if let Some(t) = data.vars()[s].threshold {
                    let live = vals.iter().any(|&(_, q)| q.abs() > t);
                    data.set_allocated(b, s, live);
                    if !live {
                        continue;
                    }
                }
                let u = data.fine_mut(b, s);
                for &(i, q) in &vals {
                    u[i] = q;
                }
            }
        }
    }

    /// This rank's CFL time step (infinite without blocks).
    fn local_dt(&self) -> f64 {
        self.dt_over(self.data.borrow().gids().iter().copied())
    }

    /// The time step the cells of blocks `gids` allow.
    fn dt_over(&self, gids: impl IntoIterator<Item = usize>) -> f64 {
        let mut dt = f64::INFINITY;
        for gid in gids {
            let geo = Geo::new(&self.mesh, gid);
            for d in 0..self.ndim() {
                if self.v[d] != 0.0 {
                    dt = dt.min(self.cfl * geo.dx[d] / self.v[d].abs());
                }
            }
        }
        dt
    }

    /// Without `nlim`, a run whose first time step on the mesh the deck gives is below the
    /// resolution of the time near `tlim` would stop advancing short of it: bad input, found
    /// before the first step. (The initial refinement of an adaptive mesh may shrink the step
    /// further: the run's own check at each cycle finds that.)
    fn check_time_resolution(&self, deck: &Deck) -> Result<()> {
        let dt = self.dt_over(0..self.mesh.forest().len());
        if self.nlim.is_some() || dt >= self.tlim * f64::EPSILON {
            return Ok(());
        }
        let msg = format!(
            "the time step {dt:e} is too small to reach tlim {}: {STALL_HINT}",
            shown(self.tlim)
        );
        Err(deck.invalid(TIME, "tlim", msg).into())
    }

    /// Face fluxes of every slot of local blocks `blocks`.
    fn compute_fluxes(&self, blocks: Range<usize>, data: &BlockData, flux: &mut FluxData) {
        for b in blocks {
            let geo = Geo::new(&self.mesh, data.gids()[b]);
            for s in 0..self.num_vars {
                // An unallocated sparse field is zero with zero ghosts: nothing moves.
                if !data.is_allocated(b, s) {
                    continue;
                }
                for d in 0..self.ndim() {
                    let f = flux.flux_mut(b, s, d);
                    face_fluxes(data.fine(b, s), &geo, d, self.v[d], self.limiter, f);
                }
            }
        }
    }

    /// The update of local blocks `blocks` from their (corrected) face fluxes:
    /// `u = u + dt L(u)` (`base = None`) or `u = (base + u + dt L(u)) / 2`.
    fn update(
        &self,
        blocks: Range<usize>,
        (dt, base): (f64, Option<&BlockData>),
        flux: &FluxData,
        data: &mut BlockData,
    ) {
        for b in blocks {
            let geo = Geo::new(&self.mesh, data.gids()[b]);
            for s in 0..self.num_vars {
                if !data.is_allocated(b, s) {
                    continue;
                }
                let fl = [0, 1, 2].map(|d| flux.flux(b, s, d));
                let u0 = base.map(|d| d.fine(b, s));
                block_update(data.fine_mut(b, s), u0, fl, &geo, dt);
            }
        }
    }

    /// The ghost fill of every partition as one task region.
    fn fill_ghosts(&self, ctx: &RunContext, comms: &Comms) -> Result<()> {
        let mut region = TaskRegion::new(ctx.recv_timeout);
        for p in 0..comms.parts.len() {
            let mut list = TaskList::new(format!("partition {p}"));
            add_exchange(
                &mut list,
                &[],
                &comms.exchange,
                &self.data,
                p,
                &[BoundaryType::Any],
            );
            region.push(list);
        }
        ctx.execute(&mut region).context("ghost fill")?;
        Ok(())
    }

    /// One stage: every partition's face fluxes; on a multilevel mesh the flux correction,
    /// which replaces each coarse block's fluxes on fine–coarse faces by the restricted fine
    /// ones so that the update conserves the total to round-off; then every partition's
    /// update and ghost fill. Returns the time spent outside the compute tasks
    /// (communication and waiting).
    fn stage(
        &self,
        ctx: &RunContext,
        comms: &Comms,
        dt: f64,
        base: Option<&BlockData>,
    ) -> Result<Duration> {
        let t0 = Instant::now();
        let compute = Cell::new(Duration::ZERO);
        let timed = |f: &dyn Fn()| {
            let t = Instant::now();
            f();
            compute.set(compute.get() + t.elapsed());
            Ok(TaskStatus::Complete)
        };

        let mut region = TaskRegion::new(ctx.recv_timeout);
        for (p, blocks) in comms.parts.iter().enumerate() {
            let mut list = TaskList::new(format!("partition {p}"));
            list.add("fluxes", &[], || {
                timed(&|| {
                    let data = self.data.borrow();
                    self.compute_fluxes(blocks.clone(), &data, &mut comms.flux.borrow_mut())
                })
            });
            region.push(list);
        }
        ctx.execute(&mut region)?;

        if let Some(correction) = &comms.correction {
            let mut list = TaskList::new("rank");
            add_flux_correction(&mut list, &[], correction, &comms.flux, &self.data);
            let mut region = TaskRegion::new(ctx.recv_timeout);
            region.push(list);
            ctx.execute(&mut region).context("flux correction")?;
        }

        let mut region = TaskRegion::new(ctx.recv_timeout);
        for (p, blocks) in comms.parts.iter().enumerate() {
            let mut list = TaskList::new(format!("partition {p}"));
            let update = list.add("update", &[], || {
                timed(&|| {
                    let mut data = self.data.borrow_mut();
                    self.update(blocks.clone(), (dt, base), &comms.flux.borrow(), &mut data)
                })
            });
            add_exchange(
                &mut list,
                &[update],
                &comms.exchange,
                &self.data,
                p,
                &[BoundaryType::Any],
            );
            region.push(list);
        }
        ctx.execute(&mut region).context("ghost fill")?;
        Ok(t0.elapsed().saturating_sub(compute.get()))
    }

    /// Each history output of a run restarted from `file` at `cycle` continues the history
    /// of the run it continues ([`hst::continue_history`]).
    fn continue_histories(&self, ctx: &RunContext, file: &Path, cycle: u64) -> Result<()> {
        let from_dir = file.parent().unwrap_or(Path::new("."));
        for o in self
            .outputs
            .iter()
            .filter(|o| o.file_type == FileType::History && o.enabled())
        {
            let name = hst::file_name(&ctx.problem_id, &o.id);
            hst::continue_history(&from_dir.join(&name), &ctx.out_dir.join(&name), cycle)
                .map_err(|e| match e {
                    e @ OutputError::NotAFile { .. } => bad_input!("{e}"),
                    e => e.into(),
                })
                .with_context(|| format!("{}: continuing the history", o.block))?;
        }
        Ok(())
    }

    /// The snapshot of the present state.
    fn write_outputs(
        &self,
        ctx: &RunContext,
        sched: &mut [Schedule],
        (cycle, time, dt): (u64, f64, f64),
        last: bool,
        gpu: Option<&gpu::Gpu>,
    ) -> Result<()> {
        // Every schedule advances before anything is written, so that a restart file holds
        // the schedules as they stand after this step.
        let due = schedule::due_outputs(&self.outputs, sched, (time, cycle), last);
        if due.is_empty() {
            // Nothing to write (the same on every rank): no copy of the fields.
            return Ok(());
        }
        if let Some(g) = gpu {
            g.download(&mut self.data.borrow_mut())?;
        }
        let data = self.data.borrow();
        let nv = data.vars().len();
        let allocated: Vec<bool> = (0..data.gids().len() * nv)
            .map(|i| data.is_allocated(i / nv, i % nv))
            .collect();
        let snap = Snapshot {
            mesh: &self.mesh,
            fields: &self.fields,
            layout: data.layout().fine,
            nghost: self.mesh.config().nghost,
            gids: data.gids(),
            data: data.data(),
            stride: data.layout().block_len(),
            allocated: &allocated,
            cycle,
            time,
            dt,
            wall_time: ctx.deadline.elapsed().as_secs_f64(),
            deck: &self.deck_text,
            params: &self.package,
        };
        let mut params = resume::params(INFO.name, &self.outputs, sched);
        params.extend(self.package.iter().cloned());
        // The derived fields, computed once for the outputs that write them.
        let nq = self.num_vars;
        let derived = due
            .iter()
            .any(|&(i, _)| derived::written_by(&self.outputs[i], &self.out_fields, nq))
            .then(|| {
                let default = self
                    .fields
                    .iter()
                    .next()
                    .map(|v| v.metadata.default_value());
                let unallocated = (&allocated[..], default.unwrap_or(0.0));
                let dims = (snap.gids.len(), nq);
                derived::extend(snap.layout, snap.data, snap.stride, dims, unallocated)
            });
        let derived_allocated = match derived {
            Some(_) => derived::allocation(&allocated, nq),
            None => Vec::new(),
        };
        for (i, number) in due {
            let o = &self.outputs[i];
            let snap = match &derived {
                _ if o.file_type == FileType::Restart => Snapshot {
                    params: &params,
                    ..snap
                },
                Some((layout, data)) if derived::written_by(o, &self.out_fields, nq) => Snapshot {
                    fields: &self.out_fields,
                    layout: *layout,
                    data,
                    stride: layout.block_len(),
                    allocated: &derived_allocated,
                    ..snap
                },
                _ => snap,
            };
            write_output(ctx.world, &snap, o, &ctx.problem_id, &ctx.out_dir, number)
                .with_context(|| format!("writing output {}", o.block))?;
        }
        Ok(())
    }

    /// L1 (volume-weighted mean) and Linf errors of the first field against the exact
    /// solution at `t`; collective, the same on every rank and for every decomposition.
    fn errors(&self, ctx: &RunContext, t: f64) -> (f64, f64) {
        let mut l1 = [ExactSum::default()];
        let mut linf = 0.0f64;
        let data = self.data.borrow();
        for b in 0..data.gids().len() {
            let geo = Geo::new(&self.mesh, data.gids()[b]);
            let u = data.fine(b, 0);
            let vol = geo.volume();
            l1[0].extend(geo.interior().map(|p| {
                let e = (u[geo.at(p)] - self.exact(geo.center(p), t)).abs();
                linf = linf.max(if e.is_nan() { f64::INFINITY } else { e });
                e * vol
            }));
        }
        let world = ctx.world;
        ExactSum::all_reduce(world, &mut l1);
        let c = self.mesh.config();
        let volume: f64 = (0..self.ndim()).map(|d| c.xmax[d] - c.xmin[d]).product();
        (l1[0].value() / volume, max_f64(world, linf))
    }
}

/// What the tasks of a cycle share besides the block data: the ghost exchange, the flux
/// correction (multilevel meshes only), the face fluxes and the partitions. Built for one
/// mesh.
struct Comms {
    exchange: RefCell<Exchange>,
    correction: Option<RefCell<FluxCorrection>>,
    /// The host's face fluxes (none where a GPU holds them).
    flux: RefCell<FluxData>,
    /// This rank's mesh-data partitions as ranges of local block indices.
    parts: Vec<Range<usize>>,
}

impl Comms {
    /// Built for `a`'s mesh and block data; message buffers come from `pool` (the previous
    /// exchange's, after a remesh, so buffers whose size did not change are reused).
    fn new(ctx: &RunContext, a: &Advection, pool: &BufferPool) -> Result<Self> {
        let (mesh, data, coalesced) = (&a.mesh, &*a.data.borrow(), a.coalesced);
        let opts = ExchangeOptions {
            coalesced,
            // The tasks fill ghosts with `any` only.
            split: false,
            ..ExchangeOptions::default()
        };
        // The host's task regions time their tasks; the GPU path's whole-fill calls wait
        // as long (`recv_bdry_buf_timeout_sec`), then fail so that the driver aborts the job.
        let mut exchange = Exchange::new_in(ctx.world, mesh, data, opts, pool)
            .context("setting up the ghost exchange")?;
        exchange.set_timeout(ctx.recv_timeout);
        let all_vars: Vec<usize> = (0..data.vars().len()).collect();
        let correction = if mesh.config().is_multilevel() {
            let mut c = FluxCorrection::new_in(ctx.world, mesh, data, &all_vars, coalesced, pool)
                .context("setting up the flux correction")?;
            c.set_timeout(ctx.recv_timeout);
            Some(RefCell::new(c))
        } else {
            None
        };
        let rank = ctx.world.rank() as usize;
        let first = mesh.partition().blocks_of(rank).start;
        let parts = mesh
            .pack_partitions(rank)
            .iter()
            .map(|p| p[0] - first..p[0] - first + p.len())
            .collect();
        Ok(Comms {
            exchange: RefCell::new(exchange),
            correction,
            flux: RefCell::new(match a.space {
                MemSpace::Host => FluxData::new(data),
                MemSpace::Cuda => FluxData::with_shape(data.shape(), 0, 0),
            }),
            parts,
        })
    }
}

impl Problem for Advection {
    /// With `space: cuda`, opens the device and resolves the MPI path asked for. Every rank
    /// does (set-up is agreed), so the run finds both ready.
    fn acquire(&mut self) -> Result<()> {
        if self.space == MemSpace::Cuda {
            self.device = Some(gpu::open()?);
            self.gpu_mpi = gpu::resolve_mpi(self.gpu_mpi, self.mesh.partition().nranks())?;
        }
        Ok(())
    }

    fn run(&mut self, ctx: &RunContext) -> Result<Summary> {
        let world = ctx.world;
        let comm = CommTimer::default();
        let mut comms = comm.time(|| {
            let pool = BufferPool::new();
            Comms::new(ctx, self, &pool)
        })?;
        let resume = self.resume.take();
        if resume.is_none() {
            self.initialise();
        }
        // After a restart the stored ghosts are already these values; the fill also leaves
        // the coarse buffers (not stored) as the interrupted run had them.
        comm.time(|| self.fill_ghosts(ctx, &comms))?;
        let dev = self.device.clone();
        let fresh = resume.is_none();
        if let (Some(r), Some(file)) = (&resume, &ctx.restart) {
            let mine = if ctx.is_root() {
                self.continue_histories(ctx, file, r.cycle)
            } else {
                Ok(())
            };
            agree(world, mine)?;
        }
        let (mut sched, mut t, mut cycle, mut dt) = match resume {
            // The outputs of the restart step were written by the interrupted run.
            Some(r) => {
                let n = self.mesh.forest().len();
                self.amr_stats = amr::AmrStats {
                    min_blocks: n,
                    max_blocks: n,
                    ..amr::AmrStats::default()
                };
                (r.schedules, r.time, r.cycle, r.dt)
            }
            None => {
                self.refine_initially(ctx, &comm, &mut comms)?;
                let sched = vec![Schedule::new(0.0); self.outputs.len()];
                (sched, 0.0f64, 0u64, 0.0f64)
            }
        };
        let mut gpu = match &dev {
            None => None,
            Some(d) => Some(agree(world, gpu::Gpu::new(d, self, &comms))?),
        };
        if fresh {
            self.write_outputs(ctx, &mut sched, (0, 0.0, 0.0), false, gpu.as_ref())?;
        }
        let stages = self.integrator.stages();
        // The fields at the start of the step (rk2 on the host), kept from step to step.
        let mut base: Option<BlockData> = None;
        // Zone-cycles (cell updates of the whole mesh), in all and since the last progress line.
        let (mut zone_cycles, mut since_line, mut line_t0) = (0.0f64, 0.0f64, Instant::now());
        let stop = loop {
            if self.nlim.is_some_and(|n| cycle >= n) {
                break Stop::CycleLimit;
            }
            if t >= self.tlim {
                break Stop::Converged;
            }
            // One reduction: the time step and whether any rank ran out of wall time.
            let expired = if ctx.deadline.expired() { -1.0 } else { 0.0 };
            let send = [self.local_dt(), expired];
            let mut got = [0.0f64; 2];
            comm.time(|| world.all_reduce_into(&send[..], &mut got[..], SystemOperation::min()));
            if got[1] < 0.0 {
                break Stop::WallTime;
            }
            // Within a hair of tlim the step ends the run, rather than leave a sliver.
            let last = got[0] * (1.0 + 1e-10) >= self.tlim - t;
            dt = if last { self.tlim - t } else { got[0] };
            // A step below the resolution of the time would stall the run: without nlim as
            // soon as it is below that near tlim (refinement shrinks it), with nlim only once
            // the time no longer advances. Every rank holds the same dt: all stop together.
            let stalls = match self.nlim {
                None => got[0] < self.tlim * f64::EPSILON,
                Some(_) => t + got[0] == t,
            };
            if !last && stalls {
                let msg = format!(
                    "cycle {cycle}: the time step {dt:e} is too small to reach tlim {} from \
                     time {}: {STALL_HINT}",
                    shown(self.tlim),
                    shown(t)
                );
                return agree(world, Err(anyhow::anyhow!(msg)));
            }
            if let Some(g) = gpu.as_mut() {
                g.begin_cycle()?;
                for st in 0..stages {
                    g.stage(self, &comms, dt, st)?;
                }
            } else {
                if stages > 1 {
                    let data = self.data.borrow();
                    match &mut base {
                        Some(b) => b.copy_from(&data),
                        // Every rank makes it at the same cycle (the first, or after a remesh).
                        None => base = Some(agree(world, data.try_clone().map_err(Into::into))?),
                    }
                }
                for st in 0..stages {
                    let base = if st == 0 { None } else { base.as_ref() };
                    comm.add(self.stage(ctx, &comms, dt, base)?);
                }
            }
            t = if last { self.tlim } else { t + dt };
            cycle += 1;
            let remeshed = self.adapt(ctx, &comm, cycle, &mut comms, gpu.as_mut())?;
            if remeshed {
                // Made again for the new blocks, after the old copy is freed.
                base = None;
            }
            if let (true, Some(d)) = (remeshed, &dev) {
                // New blocks, new exchange: the fields (filled on the host) go up again, after
                // the old ones are freed.
                drop(gpu.take());
                gpu = Some(agree(world, gpu::Gpu::new(d, self, &comms))?);
            }
            let blocks = self.mesh.forest().len();
            let zones = (blocks * self.mesh.config().block_nx.iter().product::<usize>()) as f64;
            zone_cycles += zones;
            since_line += zones;
            if let (true, Some(d)) = (ctx.progress_due(cycle), &dev) {
                // Kernels run ahead of the host: the line's rate and wall time count finished
                // work only.
                d.synchronize()?;
            }
            ctx.progress(cycle, || {
                let rate = since_line / line_t0.elapsed().as_secs_f64();
                (since_line, line_t0) = (0.0, Instant::now());
                format!("time={t:.6e} dt={dt:.6e} blocks={blocks} zone-cycles/wsec={rate:.3e}")
            });
            self.write_outputs(ctx, &mut sched, (cycle, t, dt), false, gpu.as_ref())?;
        };
        self.write_outputs(ctx, &mut sched, (cycle, t, dt), true, gpu.as_ref())?;
        if let Some(d) = &dev {
            // The summary's wall time counts the device's work to its end, whatever the
            // outputs and the drops below wait for.
            d.synchronize()?;
        }
        if self.amr.is_some() && ctx.is_root() {
            let f = self.mesh.forest();
            outln!("{}", self.amr_stats.line(f.len(), f.max_level()));
        }

        if self.compute_error {
            if let Some(g) = &gpu {
                g.download(&mut self.data.borrow_mut())?;
            }
            let (l1, linf) = self.errors(ctx, t);
            if ctx.is_root() {
                let nx = self.mesh.config().nx;
                outln!(
                    "advection: cycle {cycle} time {t:.6e} L1 error {l1:.6e} Linf error {linf:.6e}"
                );
                let path = ctx.out_file("errors.dat");
                let line = format!(
                    "{} {} {} {cycle} {l1:.17e} {linf:.17e}\n",
                    nx[0], nx[1], nx[2]
                );
                crate::output::append_whole(&path, "# Nx1 Nx2 Nx3 Ncycle L1 Linf\n", &line)
                    .with_context(|| format!("cannot write {}", path.display()))?;
            }
        }
        Ok(Summary {
            cycles: cycle,
            work: zone_cycles,
            work_unit: "zone-cycles",
            comm: comm.total(),
            stop,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wave of `advection` keys `adv` on a box `size` with `nx` cells a side.
    fn wave_of(size: [f64; 3], nx: [usize; 3], adv: &str) -> Wave {
        let text = format!(
            "parthenon/mesh: {{nx1: {}, nx2: {}, nx3: {}, x1min: 0, x1max: {}, x2min: 0, \
             x2max: {}, x3min: 0, x3max: {}}}\nadvection: {{{adv}}}\n",
            nx[0], nx[1], nx[2], size[0], size[1], size[2]
        );
        let deck = Deck::from_str_auto(&text, "t.yaml").unwrap();
        let config = deck.mesh_config().unwrap();
        wave(&deck, &config, 1.0, 1.0).unwrap()
    }

    /// `k x'` at `x`, the wave's phase.
    fn phase(w: &Wave, x: [f64; 3]) -> f64 {
        w.k_par * (w.cos_a2 * (x[0] * w.cos_a3 + x[1] * w.sin_a3) + x[2] * w.sin_a2)
    }

    #[test]
    fn the_default_wave_runs_along_the_diagonal_one_wavelength_per_direction() {
        use std::f64::consts::PI;
        let x = [0.3, -0.7, 0.45];
        // 3-D, unequal sides: 2 pi (x / Lx + y / Ly + z / Lz).
        let size = [2.0, 1.0, 4.0];
        let w = wave_of(size, [8, 8, 8], "");
        let want = 2.0 * PI * (0..3).map(|d| x[d] / size[d]).sum::<f64>();
        assert!(
            (phase(&w, x) - want).abs() < 1e-12,
            "{} {want}",
            phase(&w, x)
        );
        // 2-D: the third direction's extent tilts the wavevector but x3 is one cell.
        let w = wave_of([2.0, 1.0, 1.0], [8, 8, 1], "");
        for d in 0..2 {
            let mut y = x;
            y[d] += [2.0, 1.0][d];
            let shift = phase(&w, y) - phase(&w, x);
            assert!((shift - 2.0 * PI).abs() < 1e-12, "direction {d}: {shift}");
        }
    }

    #[test]
    fn wave_angles_and_vertical_switches_turn_the_wavevector() {
        use std::f64::consts::PI;
        let x = [0.3, -0.7, 0.45];
        // Along x1: one wavelength across x1.
        let w = wave_of([2.0, 1.0, 4.0], [8, 8, 8], "ang_2: 0, ang_3: 0");
        assert!((phase(&w, x) - 2.0 * PI * x[0] / 2.0).abs() < 1e-12);
        // Along x2, and along x3.
        let w = wave_of([2.0, 1.0, 4.0], [8, 8, 8], "ang_2: 0, ang_3_vert: true");
        assert!((phase(&w, x) - 2.0 * PI * x[1]).abs() < 1e-12);
        let w = wave_of([2.0, 1.0, 4.0], [8, 8, 8], "ang_2_vert: true");
        assert!((phase(&w, x) - 2.0 * PI * x[2] / 4.0).abs() < 1e-12);
    }
}
