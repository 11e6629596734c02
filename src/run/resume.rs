//! Continuing a run from a restart file (`run DECK -r FILE`).
//!
//! A restart file holds the fields with their ghost cells and sparse allocation, the forest
//! with its derefinement counts, the cycle, time and time step; [`params`] adds under
//! `/Params` what a bit-identical continuation needs beyond that: the problem's name and each
//! output block's schedule. [`load`] takes it all back on every rank, without communicating
//! (every rank reads the file; the driver agrees on the verdict), and rejects a file of
//! another problem or of another mesh with a message that says which.

use super::memory::Budget;
use crate::exit::bad_input;
use crate::output::{read_restart, seal, OutputBlock, ParamValue, RestartData, Schedule};
use anyhow::Result;
use starhalo_boundary::BlockData;
use starhalo_mesh::field::Fields;
use starhalo_mesh::{Mesh, MeshConfig};
use std::path::Path;

/// The `/Params` attribute naming the problem that wrote the file.
pub const PROBLEM: &str = "driver/problem";

/// Where a restarted run picks up.
#[derive(Debug, Clone, PartialEq)]
pub struct Resume {
    /// Cycles done.
    pub cycle: u64,
    /// Simulation time reached.
    pub time: f64,
    /// The last time step.
    pub dt: f64,
    /// Each output block's schedule, in the order of the outputs passed to [`load`].
    pub schedules: Vec<Schedule>,
}

fn next_time_key(o: &OutputBlock) -> String {
    format!("{}/next_time", o.block)
}

fn file_number_key(o: &OutputBlock) -> String {
    format!("{}/file_number", o.block)
}

/// What a restart output of `problem` stores besides the fields: the problem's name and each
/// output block's schedule (as it stands once this step's outputs are counted).
pub fn params(
    problem: &str,
    outputs: &[OutputBlock],
    schedules: &[Schedule],
) -> Vec<(String, ParamValue)> {
    let mut p = vec![(PROBLEM.to_string(), ParamValue::Str(problem.to_string()))];
    for (o, s) in outputs.iter().zip(schedules) {
        p.push((next_time_key(o), ParamValue::Real(s.next_time)));
        p.push((
            file_number_key(o),
            ParamValue::Int(i64::from(s.next_number)),
        ));
    }
    p
}

/// Reads the restart file `path` of `problem` and rebuilds, for `rank` of `nranks`: the mesh
/// (the file's forest, checked against `config`), this rank's blocks of `fields` with ghosts
/// and allocation flags, and where the run stands. Output blocks the file does not know start
/// afresh at the restart time. A forest of more blocks than fit in `budget` is refused.
pub fn load(
    path: &Path,
    problem: &str,
    config: MeshConfig,
    fields: &Fields,
    (nranks, rank): (usize, usize),
    outputs: &[OutputBlock],
    budget: &Budget,
) -> Result<(Mesh, BlockData, Resume)> {
    let shown = path.display();
    match std::fs::metadata(path) {
        Err(_) => return Err(bad_input!("-r {shown}: no such file")),
        Ok(m) if m.is_dir() => {
            return Err(bad_input!(
                "-r {shown}: is a directory; name the restart file (a .rhdf) inside it"
            ))
        }
        Ok(m) if !m.is_file() => {
            return Err(bad_input!(
                "-r {shown}: not a regular file (a restart file is a .rhdf)"
            ))
        }
        Ok(_) => {}
    }
    // Before libhdf5 parses the file: damaged metadata can make it hang or crash.
    let crc = seal::check(path).map_err(|e| bad_input!("-r {shown}: {e}"))?;
    crate::input_file::note_read(path, crc);
    let r = read_restart(path).map_err(|e| bad_input!("-r: {e}"))?;
    match r.params.get(PROBLEM) {
        Some(ParamValue::Str(p)) if p == problem => {}
        Some(ParamValue::Str(p)) => {
            return Err(bad_input!(
                "-r {shown}: the file was written by problem '{p}', this deck runs '{problem}'"
            ))
        }
        _ => {
            return Err(bad_input!(
                "-r {shown}: not a restart file of starhalo run (no /Params/{PROBLEM}; \
                 restart files come from file_type: rst outputs)"
            ))
        }
    }
    check_mesh(&r, &config).map_err(|why| {
        bad_input!("-r {shown}: the file's mesh does not match the deck's parthenon/mesh: {why}")
    })?;
    let mesh =
        Mesh::restore(config, r.locations.clone(), nranks, &r.derefine_counts).map_err(|e| {
            match budget.outgrown(&e) {
                Some(why) => bad_input!("-r {shown}: {why}; restart on more ranks"),
                None => bad_input!("-r {shown}: {e}"),
            }
        })?;
    let mut data = BlockData::new(&mesh, fields, rank).map_err(crate::exit::storage_error)?;
    let (values, alloc) = r
        .block_data(fields, data.gids())
        .map_err(|e| bad_input!("-r: {e}"))?;
    let nvars = data.vars().len();
    let var_len = data.layout().fine.var_len();
    let slots = data.layout().fine.nvar;
    for b in 0..data.gids().len() {
        // Allocation first: (de)allocating resets the values to the default. A variable the
        // deck makes dense is allocated everywhere (where the file had it unallocated, it
        // holds the default value, as the file says).
        for v in 0..nvars {
            let dense = data.vars()[v].threshold.is_none();
            data.set_allocated(b, v, dense || alloc[b * nvars + v]);
        }
        for s in 0..slots {
            let at = (b * slots + s) * var_len;
            data.fine_mut(b, s)
                .copy_from_slice(&values[at..at + var_len]);
        }
    }
    let schedules = outputs
        .iter()
        .map(|o| schedule(&r, o))
        .collect::<Result<_>>()?;
    let resume = Resume {
        cycle: r.cycle,
        time: r.time,
        dt: r.dt,
        schedules,
    };
    Ok((mesh, data, resume))
}

/// `.phdf` and `.rhdf` files number cycles as int32 (`Info/NCycle`): a run resumed at the last
/// such cycle could write neither after its next step, so it is refused before it starts
/// rather than failing at its first output. `steps` says whether the run takes a step at all
/// (its `nlim` and `tlim` are not yet reached).
pub fn check_cycle_room(r: &Resume, steps: bool, outputs: &[OutputBlock]) -> Result<()> {
    use crate::output::FileType;
    let numbered =
        |o: &&OutputBlock| o.enabled() && matches!(o.file_type, FileType::Hdf5 | FileType::Restart);
    match outputs.iter().find(numbered) {
        Some(o) if steps && i32::try_from(r.cycle + 1).is_err() => Err(bad_input!(
            "-r: the file stands at cycle {}, the last a .phdf or .rhdf can number \
             (Info/NCycle is int32), so {} (file_type: {}) could write nothing after it; \
             drop the hdf5 and rst outputs to go on",
            r.cycle,
            o.block,
            o.file_type.name()
        )),
        _ => Ok(()),
    }
}

/// The schedule of output `o` stored in the file, or a fresh one at the restart time.
fn schedule(r: &RestartData, o: &OutputBlock) -> Result<Schedule> {
    let bad = |what: &str| {
        bad_input!(
            "-r {}: /Params/{what} is missing or not a number",
            r.path.display()
        )
    };
    let (tk, nk) = (next_time_key(o), file_number_key(o));
    match (r.params.get(&tk), r.params.get(&nk)) {
        (None, None) => Ok(Schedule::new(r.time)),
        // An output time that is not a number would never come (or always).
        (Some(ParamValue::Real(t)), Some(ParamValue::Int(_))) if !t.is_finite() => Err(bad_input!(
            "-r {}: /Params/{tk} = {t}: not a finite time",
            r.path.display()
        )),
        (Some(ParamValue::Real(t)), Some(ParamValue::Int(n))) => Ok(Schedule {
            next_time: *t,
            next_number: u32::try_from(*n).map_err(|_| bad(&nk))?,
            last_cycle: Some(r.cycle),
        }),
        (Some(ParamValue::Real(_)), _) => Err(bad(&nk)),
        _ => Err(bad(&tk)),
    }
}

/// Why the file's mesh is not the one `config` describes, if it is not.
fn check_mesh(r: &RestartData, config: &MeshConfig) -> Result<(), String> {
    let ndim = config.ndim();
    if r.ndim != ndim {
        return Err(format!("the file is {}-D, the deck {ndim}-D", r.ndim));
    }
    if r.root_grid_size != config.nx {
        return Err(format!(
            "the file's root grid has {:?} cells, nx1, nx2, nx3 give {:?}",
            r.root_grid_size, config.nx
        ));
    }
    for d in 0..3 {
        let deck = [config.xmin[d], config.xmax[d]];
        if r.domain[d] != deck {
            return Err(format!(
                "the file's domain along x{} is {:?}, x{0}min and x{0}max give {deck:?}",
                d + 1,
                r.domain[d]
            ));
        }
    }
    let bcs: Vec<&str> = config.bc.iter().flatten().map(|b| b.name()).collect();
    if r.boundary_conditions != bcs {
        return Err(format!(
            "the file's boundary conditions are {:?}, the deck's {bcs:?}",
            r.boundary_conditions
        ));
    }
    if r.nghost != config.nghost {
        return Err(format!(
            "the file has {} ghost layers, nghost is {}",
            r.nghost, config.nghost
        ));
    }
    if !r.includes_ghost {
        return Err("the file holds no ghost cells".into());
    }
    let stored: [usize; 3] =
        std::array::from_fn(|d| config.block_nx[d] + if d < ndim { 2 * config.nghost } else { 0 });
    if r.stored != stored {
        let n: [usize; 3] = std::array::from_fn(|d| {
            r.stored[d].saturating_sub(if d < ndim { 2 * r.nghost } else { 0 })
        });
        return Err(format!(
            "the file's blocks have {n:?} cells, parthenon/meshblock gives {:?}",
            config.block_nx
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::FileType;

    fn at(cycle: u64) -> Resume {
        Resume {
            cycle,
            time: 0.5,
            dt: 0.01,
            schedules: Vec::new(),
        }
    }

    #[test]
    fn a_resume_at_the_last_int32_cycle_is_refused_only_where_it_would_write_one() {
        let last = i32::MAX as u64;
        let (hst, rst) = (
            OutputBlock {
                dn: Some(1),
                ..OutputBlock::new(0, FileType::History)
            },
            OutputBlock {
                dn: Some(5),
                ..OutputBlock::new(1, FileType::Restart)
            },
        );
        let both = [hst.clone(), rst];
        let err = check_cycle_room(&at(last), true, &both).unwrap_err();
        assert!(err.downcast_ref::<crate::exit::BadInput>().is_some());
        let msg = err.to_string();
        assert!(msg.contains("cycle 2147483647"), "{msg}");
        assert!(msg.contains("parthenon/output1 (file_type: rst)"), "{msg}");
        // One cycle earlier the next output still fits; a run that stops at once writes
        // nothing numbered past the file's; history lines number cycles as 64-bit.
        check_cycle_room(&at(last - 1), true, &both).unwrap();
        check_cycle_room(&at(last), false, &both).unwrap();
        check_cycle_room(&at(last), true, &[hst]).unwrap();
        // A disabled block (no positive dt or dn) writes nothing, not even at the end.
        let off = OutputBlock {
            dt: None,
            dn: None,
            ..OutputBlock::new(2, FileType::Hdf5)
        };
        assert!(!off.enabled());
        check_cycle_room(&at(last), true, &[off]).unwrap();
        let on = OutputBlock {
            dn: Some(1),
            ..OutputBlock::new(2, FileType::Hdf5)
        };
        assert!(check_cycle_room(&at(last), true, &[on]).is_err());
    }
}
