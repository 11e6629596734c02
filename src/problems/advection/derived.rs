//! The derived fields of Parthenon's advection example (`advection/fill_derived`, default
//! true as there), one component per advected field `q`, over whole blocks (ghosts too):
//!
//! - `one_minus_advected`: `1 - q`;
//! - `one_minus_advected_sq`: `(1 - q)^2`;
//! - `one_minus_sqrt_one_minus_advected_sq_12`: `1 - sqrt((1 - q)^2)`;
//! - `one_minus_sqrt_one_minus_advected_sq_37`: `1` minus the previous one.
//!
//! The last two are sparse ids 12 and 37 of one pool, as in Parthenon, so an output that
//! names the pool writes both. All four are allocated on every block, as Parthenon's are:
//! where a sparse advected field is not allocated they derive from its default value (so
//! `one_minus_advected` reads 1 there, also when the output writes NaN for the field
//! itself). They are computed only for an hdf5
//! or png output that names them, never stored between steps. An output without a
//! `variables` list writes the advected fields alone (Parthenon's would add these, which
//! would make every such file five times larger), as do restart files and histories.

use crate::output::png::find_component;
use crate::output::select::{cell_vars, select};
use crate::output::{FileType, OutputBlock};
use starhalo_boundary::FieldLayout;
use starhalo_mesh::field::{Centering, Fields, Metadata, SparseThresholds};
use starhalo_mesh::MeshError;

/// The derived fields, in the order they follow the advected ones.
pub(super) const NAMES: [&str; 4] = [
    "one_minus_advected",
    "one_minus_advected_sq",
    "one_minus_sqrt_one_minus_advected_sq_12",
    "one_minus_sqrt_one_minus_advected_sq_37",
];

/// `fields` (the `num_vars` advected fields) with the derived fields after them.
pub(super) fn with_derived(fields: &Fields, num_vars: usize) -> Result<Fields, MeshError> {
    let mut out = fields.clone();
    for (i, name) in NAMES.iter().enumerate() {
        let md = Metadata::new(Centering::Cell).components(num_vars);
        out.add(
            name,
            match i >= 2 {
                true => md.sparse(SparseThresholds::default()),
                false => md,
            },
        )?;
    }
    Ok(out)
}

/// The allocation flags of the derived output: `allocated` (`nblocks * num_vars`, the
/// advected fields'), then the derived fields, allocated everywhere.
pub(super) fn allocation(allocated: &[bool], num_vars: usize) -> Vec<bool> {
    (allocated.chunks(num_vars))
        .flat_map(|a| a.iter().copied().chain([true; NAMES.len()]))
        .collect()
}

/// Whether output `o` writes a derived field of `out_fields`, whose first `num_vars`
/// variables are the advected fields.
pub(super) fn written_by(o: &OutputBlock, out_fields: &Fields, num_vars: usize) -> bool {
    match o.file_type {
        FileType::Hdf5 => o.variables.as_deref().is_some_and(|names| {
            select(out_fields, Some(names), "")
                .is_ok_and(|vars| vars.iter().any(|v| v.index >= num_vars))
        }),
        FileType::Png => o.png_variable.as_deref().is_some_and(|name| {
            find_component(&cell_vars(out_fields), name).is_some_and(|(v, _)| v.index >= num_vars)
        }),
        FileType::Restart | FileType::History => false,
    }
}

/// The blocks of `data` (`nblocks` of them, `stride` apart, the `num_vars` advected fields
/// first in `layout`) with the derived fields appended: their layout and values. A field
/// not allocated on a block (`allocated[b * num_vars + v]` false) reads as `default` there.
pub(super) fn extend(
    layout: FieldLayout,
    data: &[f64],
    stride: usize,
    (nblocks, num_vars): (usize, usize),
    (allocated, default): (&[bool], f64),
) -> (FieldLayout, Vec<f64>) {
    let ext = FieldLayout {
        nvar: layout.nvar + NAMES.len() * num_vars,
        ..layout
    };
    let n = layout.var_len();
    let unallocated = vec![default; n];
    let mut out = Vec::with_capacity(nblocks * ext.block_len());
    for b in 0..nblocks {
        let block = &data[b * stride..][..layout.block_len()];
        out.extend_from_slice(block);
        let q = |v: usize| match allocated[b * num_vars + v] {
            true => &block[v * n..][..n],
            false => &unallocated[..],
        };
        for v in 0..num_vars {
            out.extend(q(v).iter().map(|&q| 1.0 - q));
        }
        for v in 0..num_vars {
            out.extend(q(v).iter().map(|&q| (1.0 - q) * (1.0 - q)));
        }
        for v in 0..num_vars {
            out.extend(q(v).iter().map(|&q| one_minus_sqrt(q)));
        }
        for v in 0..num_vars {
            out.extend(q(v).iter().map(|&q| 1.0 - one_minus_sqrt(q)));
        }
    }
    (ext, out)
}

fn one_minus_sqrt(q: f64) -> f64 {
    1.0 - ((1.0 - q) * (1.0 - q)).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_values_follow_each_block() {
        // Two blocks of two fields, 3 points each, stored 8 apart (2 values of other arrays).
        let layout = FieldLayout {
            dims: [3, 1, 1],
            nvar: 2,
        };
        let data = [
            0.0, 0.5, 2.0, 1.0, 3.0, -1.0, 9.0, 9.0, //
            0.25, 1.0, 4.0, 0.0, 0.0, 0.0, 9.0, 9.0,
        ];
        let (ext, out) = extend(layout, &data, 8, (2, 2), (&[true; 4], 0.0));
        assert_eq!(ext.nvar, 10);
        assert_eq!(out.len(), 2 * 30);
        let var = |b: usize, v: usize| &out[b * 30 + v * 3..][..3];
        assert_eq!(var(0, 0), [0.0, 0.5, 2.0]);
        assert_eq!(var(0, 1), [1.0, 3.0, -1.0]);
        assert_eq!(var(0, 2), [1.0, 0.5, -1.0]); // 1 - q, field 0
        assert_eq!(var(0, 3), [0.0, -2.0, 2.0]); // 1 - q, field 1
        assert_eq!(var(0, 4), [1.0, 0.25, 1.0]); // (1 - q)^2
        assert_eq!(var(0, 6), [0.0, 0.5, 0.0]); // 1 - |1 - q|, field 0
        assert_eq!(var(0, 7), [1.0, -1.0, -1.0]); // field 1
        assert_eq!(var(0, 8), [1.0, 0.5, 1.0]); // _37: 1 - _12, field 0
        assert_eq!(var(1, 0), [0.25, 1.0, 4.0]);
        assert_eq!(var(1, 6), [0.25, 1.0, -2.0]);
        assert_eq!(var(1, 9), [1.0, 1.0, 1.0]);
        // Field 1 unallocated on block 0 reads as the default there, 0.5; the derived fields
        // stay allocated.
        let unallocated = [true, false, true, true];
        let (_, out) = extend(layout, &data, 8, (2, 2), (&unallocated, 0.5));
        let var = |b: usize, v: usize| &out[b * 30 + v * 3..][..3];
        assert_eq!(var(0, 3), [0.5; 3]);
        assert_eq!(var(0, 2), [1.0, 0.5, -1.0]);
        assert_eq!(var(1, 3), [1.0, 1.0, 1.0]);
        let flags = allocation(&unallocated, 2);
        assert_eq!(flags.len(), 2 * 6);
        assert_eq!(flags[..6], [true, false, true, true, true, true]);
        assert_eq!(flags[6..], [true; 6]);
    }

    #[test]
    fn outputs_write_derived_fields_named_alone_or_by_pool() {
        let mut fields = Fields::default();
        fields
            .add("advected", Metadata::new(Centering::Cell).fill_ghost())
            .unwrap();
        let all = with_derived(&fields, 1).unwrap();
        let hdf5 = |vars: Option<&[&str]>| OutputBlock {
            variables: vars.map(|v| v.iter().map(|s| s.to_string()).collect()),
            ..OutputBlock::new(0, FileType::Hdf5)
        };
        assert!(!written_by(&hdf5(None), &all, 1));
        assert!(!written_by(&hdf5(Some(&["advected"])), &all, 1));
        assert!(written_by(&hdf5(Some(&["one_minus_advected_sq"])), &all, 1));
        let pool = select(
            &all,
            Some(&["one_minus_sqrt_one_minus_advected_sq".to_string()]),
            "",
        )
        .unwrap();
        let names: Vec<_> = pool.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, [NAMES[2], NAMES[3]]);
        let rst = OutputBlock::new(1, FileType::Restart);
        assert!(!written_by(&rst, &all, 1));
    }
}
