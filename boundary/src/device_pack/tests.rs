use super::host_twin::{pack_boxes, unpack_boxes};
use super::*;
use crate::bnd_info::{BndCache, IndexBox, FLAG_ALLOCATED, FLAG_COARSE, FLAG_MIRROR0};
use crate::bounds::interior_bounds;
use crate::prolong_restrict::{prolongate, restrict, Prolongation};
use starhalo_exec::cuda::kernels::{c_layout, define, struct_fields, HALO_SRC};
use starhalo_mesh::field::IndexRange;
use std::mem::{offset_of, size_of};

/// BndInfo can be copied to the device as is: its layout is the CUDA struct's.
#[test]
fn bnd_info_has_the_layout_of_the_cuda_struct() {
    let (cuda, size) = c_layout(&struct_fields(HALO_SRC, "sh_bnd_info").unwrap());
    let rust = [
        ("block", offset_of!(BndInfo, block)),
        ("var", offset_of!(BndInfo, var)),
        ("s", offset_of!(BndInfo, s)),
        ("e", offset_of!(BndInfo, e)),
        ("buf_offset", offset_of!(BndInfo, buf_offset)),
        ("flags", offset_of!(BndInfo, flags)),
        ("pad", offset_of!(BndInfo, pad)),
    ];
    let cuda: Vec<(&str, usize)> = cuda.iter().map(|(n, o)| (n.as_str(), *o)).collect();
    assert_eq!(cuda, rust);
    assert_eq!(size, size_of::<BndInfo>());
    assert_eq!(size_of::<BndInfo>(), size_of::<HaloDesc>());
    assert_eq!(
        define(HALO_SRC, "SH_FLAG_COARSE"),
        Some(u64::from(FLAG_COARSE))
    );
    assert_eq!(
        define(HALO_SRC, "SH_FLAG_ALLOCATED"),
        Some(u64::from(FLAG_ALLOCATED))
    );
    assert_eq!(
        define(HALO_SRC, "SH_FLAG_MIRROR0"),
        Some(u64::from(FLAG_MIRROR0))
    );
}

fn r(s: usize, e: usize) -> IndexRange {
    IndexRange { s, e }
}

#[test]
fn descriptors_convert_field_by_field() {
    let b = BndInfo::new(
        3,
        1,
        &IndexBox([r(0, 1), r(2, 5), r(0, 0)]),
        17,
        FLAG_ALLOCATED,
    );
    let d = halo_desc(&b);
    assert_eq!(
        (d.block, d.var, d.buf_offset, d.flags),
        (3, 1, 17, FLAG_ALLOCATED)
    );
    assert_eq!((d.s, d.e), ([0, 2, 0], [1, 5, 0]));
    assert_eq!(d.len(), b.len() as u64);
    let p: Vec<[u64; 3]> = d.points().collect();
    let q: Vec<[u64; 3]> = b
        .index_box()
        .points()
        .map(|p| p.map(|v| v as u64))
        .collect();
    assert_eq!(p, q, "kernel order is the host's");
}

#[test]
fn threshold_flags_mark_sub_halos_with_a_large_value() {
    let l = FieldLayout {
        dims: [4, 1, 1],
        nvar: 1,
    };
    let infos = vec![
        BndInfo::new(0, 0, &IndexBox([r(0, 1), r(0, 0), r(0, 0)]), 0, 0),
        BndInfo::new(0, 0, &IndexBox([r(2, 3), r(0, 0), r(0, 0)]), 0, 0),
    ];
    let c = BndCache::new(l, 1, infos).unwrap();
    let mut buf = vec![0.0; 4];
    c.pack(
        starhalo_exec::Policy::Serial,
        &[0.1, -2.0, 0.5, 0.0],
        &mut buf,
    )
    .unwrap();
    let mut over = [7; 2];
    threshold_flags(c.infos(), &buf, &[1.0], &mut over);
    assert_eq!(over, [1, 0]);
    threshold_flags(c.infos(), &buf, &[2.0], &mut over);
    assert_eq!(over, [0, 0]);
    // Each sub-halo is held to its own variable slot's threshold.
    let two = FieldLayout {
        dims: [2, 1, 1],
        nvar: 2,
    };
    let infos = vec![
        BndInfo::new(0, 0, &IndexBox([r(0, 1), r(0, 0), r(0, 0)]), 0, 0),
        BndInfo::new(0, 1, &IndexBox([r(0, 1), r(0, 0), r(0, 0)]), 2, 0),
    ];
    let c = BndCache::new(two, 1, infos).unwrap();
    c.pack(
        starhalo_exec::Policy::Serial,
        &[0.1, -2.0, 0.5, 3.0],
        &mut buf,
    )
    .unwrap();
    threshold_flags(c.infos(), &buf, &[2.5, 2.5], &mut over);
    assert_eq!(over, [0, 1]);
    threshold_flags(c.infos(), &buf, &[1.0, 5.0], &mut over);
    assert_eq!(over, [1, 0]);
}

#[test]
fn physical_fill_clamps_outflow_and_mirrors_reflecting_boxes() {
    // 2-D block of 2x2 interior cells with one ghost layer: 4x4 points.
    let l = FieldLayout {
        dims: [4, 4, 1],
        nvar: 1,
    };
    let mut data: Vec<f64> = (0..16).map(f64::from).collect();
    let (lo, hi) = ([1, 1, 0], [2, 2, 0]);
    let x1 = [
        BndInfo::new(0, 0, &IndexBox([r(0, 0), r(0, 3), r(0, 0)]), 0, 0),
        BndInfo::new(0, 0, &IndexBox([r(3, 3), r(0, 3), r(0, 0)]), 0, 0),
    ];
    physical_fill(l, 1, &x1, lo, hi, &mut data).unwrap();
    // Row j: ghosts i=0 and i=3 copy i=1 and i=2 of the same row (ghost rows too).
    for j in 0..4 {
        let row = 4.0 * j as f64;
        assert_eq!(data[4 * j], row + 1.0);
        assert_eq!(data[4 * j + 3], row + 2.0);
    }
    let x2 = [BndInfo::new(
        0,
        0,
        &IndexBox([r(0, 3), r(0, 0), r(0, 0)]),
        0,
        0,
    )];
    physical_fill(l, 1, &x2, lo, hi, &mut data).unwrap();
    assert_eq!(&data[0..4], &data[4..8]);
    let mixed = [x1[0], x2[0]];
    assert!(physical_fill(l, 1, &mixed, lo, hi, &mut data).is_err());
    // Reflecting x1 faces of 1-D rows: interior 1..=2 of 4 points, one ghost each side,
    // mirror 1 and 2.
    let mut data: Vec<f64> = (0..16).map(f64::from).collect();
    let x1m = x1.map(|b| BndInfo {
        flags: FLAG_MIRROR0,
        ..b
    });
    physical_fill(l, 1, &x1m, lo, hi, &mut data).unwrap();
    for j in 0..4 {
        let row = 4.0 * j as f64;
        assert_eq!([data[4 * j], data[4 * j + 3]], [row + 1.0, row + 2.0]);
    }
    // Two ghost layers mirror in reverse order: interior 2..=3 of 6 points.
    let l6 = FieldLayout {
        dims: [6, 1, 1],
        nvar: 1,
    };
    let mut row: Vec<f64> = vec![0.0, 0.0, 10.0, 20.0, 0.0, 0.0];
    let sides = [
        BndInfo::new(
            0,
            0,
            &IndexBox([r(0, 1), r(0, 0), r(0, 0)]),
            0,
            FLAG_MIRROR0,
        ),
        BndInfo::new(
            0,
            0,
            &IndexBox([r(4, 5), r(0, 0), r(0, 0)]),
            0,
            FLAG_MIRROR0,
        ),
    ];
    physical_fill(l6, 1, &sides, [2, 0, 0], [3, 0, 0], &mut row).unwrap();
    assert_eq!(row, [20.0, 10.0, 10.0, 20.0, 20.0, 10.0]);
}

/// The physical boxes filled by the device's rule (the host twin) give exactly what the
/// host's direction-by-direction fill gives, for every mix of outflow, periodic, reflecting
/// and interior faces in 1-D, 2-D and 3-D.
#[test]
fn physical_boxes_fill_as_the_host_does() {
    use crate::bounds::{interior_bounds, physical_bounds, physical_boxes};
    use starhalo_mesh::BoundaryCondition as Bc;
    let kinds = [
        None,
        Some(Bc::Periodic),
        Some(Bc::Outflow),
        Some(Bc::Reflecting),
    ];
    let mut seed = 12345u64;
    let mut next = move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as usize
    };
    for (nx, g, ndim) in [
        ([5, 1, 1], 2, 1),
        ([4, 3, 1], 1, 2),
        ([4, 3, 2], 2, 3),
        ([3, 3, 3], 3, 3),
    ] {
        let shape = IndexShape::new(nx, g, ndim).unwrap();
        let l = FieldLayout::of_shape(&shape, 1);
        let (lo, hi) = interior_bounds(&shape);
        for _ in 0..200 {
            let faces = [0, 1, 2].map(|_| [0, 1].map(|_| kinds[next() % 4]));
            let data: Vec<f64> = (0..l.block_len()).map(|_| (next() % 1000) as f64).collect();
            let mut want = data.clone();
            physical_bounds(&shape, &faces, &mut want);
            let boxes: Vec<BndInfo> = physical_boxes(&shape, &faces)
                .iter()
                .map(|(b, flags)| BndInfo::new(0, 0, b, 0, *flags))
                .collect();
            let mut got = data.clone();
            physical_fill(l, 1, &boxes, lo, hi, &mut got).unwrap();
            assert_eq!(got, want, "{nx:?} g={g} faces {faces:?}");
            let any_physical = faces[..shape.ndim()]
                .iter()
                .flatten()
                .any(|f| matches!(f, Some(Bc::Outflow | Bc::Reflecting)));
            assert_eq!(!boxes.is_empty(), any_physical, "{faces:?}");
            let mirrors = boxes.iter().any(|b| b.flags != 0);
            let any_reflecting = faces[..shape.ndim()]
                .iter()
                .flatten()
                .any(|f| *f == Some(Bc::Reflecting));
            assert_eq!(mirrors, any_reflecting, "{faces:?}");
        }
    }
}

#[test]
fn refine_geometry_follows_the_shape() {
    let shape = IndexShape::new([8, 8, 1], 2, 2).unwrap();
    let g = refine_geom(&shape, 3, 5).unwrap();
    assert_eq!((g.ndim, g.nghost, g.coarse_nghost), (2, 2, 2));
    assert_eq!(g.fine.dims, [12, 12, 1]);
    assert_eq!(g.coarse.dims, [8, 8, 1]);
    assert_eq!((g.fine.nvar, g.coarse.nblocks), (3, 5));
}

/// Reads an operation, its geometry, descriptors, the fine and coarse storage and a
/// buffer; runs one boundary kernel with the arguments `Device` passes, as 3 blocks of 32
/// threads (each block takes several sub-halos, each thread several cells, and the pack's
/// flags are a real `__syncthreads_or`); writes the storage, the buffer and the pack's
/// threshold flags.
const HALO_DRIVER: &str = r#"
int main() {
    double h[23];
    sh_read(h, 23);
    int op = (int)h[0], pop = (int)h[20];
    u64 nb = h[1], nvar = h[2], f[3] = {(u64)h[3], (u64)h[4], (u64)h[5]}, c[3] = {(u64)h[6], (u64)h[7], (u64)h[8]};
    u64 ndim = h[9], g = h[10], cg = h[11], nhalo = h[21], buflen = h[22];
    u64 lo[3] = {(u64)h[12], (u64)h[13], (u64)h[14]}, hi[3] = {(u64)h[15], (u64)h[16], (u64)h[17]};
    sh_bnd_info *info = (sh_bnd_info *)malloc(nhalo * sizeof(sh_bnd_info) + 1);
    if (fread(info, sizeof(sh_bnd_info), nhalo, stdin) != nhalo) { printf("short descriptors\n"); return 3; }
    u64 flen = nb * nvar * f[0] * f[1] * f[2], clen = nb * nvar * c[0] * c[1] * c[2];
    double *fine = (double *)malloc(flen * 8), *coarse = (double *)malloc(clen * 8), *buf = (double *)malloc(buflen * 8 + 8);
    sh_read(fine, flen);
    sh_read(coarse, clen);
    sh_read(buf, buflen);
    u32 *over = (u32 *)malloc(nhalo * 4 + 4);
    double *th = (double *)malloc(nvar * 8 + 8);
    for (u64 v = 0; v < nvar; ++v) th[v] = h[18] * (double)(v + 1);
    double *flags = (double *)malloc(nhalo * 8 + 8);
    if (op < 0 || op > 5) { printf("unknown operation %d\n", op); return 3; }
    gridDim.x = 3; blockDim.x = 32;
    for (blockIdx.x = 0; blockIdx.x < gridDim.x; ++blockIdx.x) sh_run_block([&] {
        switch (op) {
        case 0: sh_halo_pack(info, nhalo, fine, coarse, buf, f[0], f[1], f[2], c[0], c[1], c[2], nvar, th, over); break;
        case 1: sh_halo_unpack(info, nhalo, buf, fine, coarse, f[0], f[1], f[2], c[0], c[1], c[2], nvar, h[19]); break;
        case 2: sh_restrict(info, nhalo, fine, coarse, f[0], f[1], f[2], c[0], c[1], c[2], nvar, ndim, g, cg); break;
        case 3: sh_prolongate(info, nhalo, coarse, fine, f[0], f[1], f[2], c[0], c[1], c[2], nvar, ndim, g, cg, pop); break;
        case 4: sh_physical(info, nhalo, fine, f[0], f[1], f[2], nvar, lo[0], lo[1], lo[2], hi[0], hi[1], hi[2]); break;
        case 5: sh_physical(info, nhalo, coarse, c[0], c[1], c[2], nvar, lo[0], lo[1], lo[2], hi[0], hi[1], hi[2]); break;
        }
    });
    for (u64 i = 0; i < nhalo; ++i) flags[i] = op == 0 ? over[i] : 0;
    sh_write(fine, flen);
    sh_write(coarse, clen);
    sh_write(buf, buflen);
    sh_write(flags, nhalo);
    return 0;
}
"#;

/// The host's storage of one case and what a kernel left.
#[derive(Clone, PartialEq)]
struct State {
    fine: Vec<f64>,
    coarse: Vec<f64>,
    buf: Vec<f64>,
    flags: Vec<u32>,
}

/// The boundary kernels (pack with threshold flags, unpack with the sparse fill,
/// restriction, the three prolongations, the physical fill of block arrays and coarse
/// buffers), run on the host by the emulator, leave the storage bit for bit as
/// the host code the exchange runs does: 2-D and 3-D, two blocks of two variables, random
/// non-dyadic values, coarse ghost and interior boxes, outflow and reflecting faces.
/// Skipped, saying so, where no `c++` is installed.
#[test]
fn halo_kernels_under_the_emulator_match_the_host() {
    use crate::bounds::{coarse_interior, physical_boxes};
    use starhalo_exec::cuda::emulate::{desc_bytes, from_bytes, test_values, to_bytes, Emulator};
    use starhalo_mesh::BoundaryCondition as Bc;
    let Some(emu) = Emulator::build(HALO_DRIVER).unwrap() else {
        eprintln!("no host c++ compiler: boundary kernels not emulated");
        return;
    };
    let mut unit = test_values(99);
    for (nx, ndim) in [([6, 4, 1], 2), ([4, 4, 4], 3)] {
        let shape = IndexShape::new(nx, 2, ndim).unwrap();
        let cs = shape.coarse().unwrap();
        let (nb, nvar) = (2, 2);
        let (fl, cl) = (
            FieldLayout::of_shape(&shape, nvar),
            FieldLayout::of_shape(&cs, nvar),
        );
        let (fd, cd) = (field_dims(fl, nb), field_dims(cl, nb));
        let fslot = |b: &BndInfo| HostTwin::slot(fl, b);
        let cslot = |b: &BndInfo| HostTwin::slot(cl, b);
        let start = State {
            fine: (0..fd.len()).map(|_| unit()).collect(),
            coarse: (0..cd.len()).map(|_| unit()).collect(),
            buf: Vec::new(),
            flags: Vec::new(),
        };
        let (cg, g) = (cs.nghost(), shape.nghost());
        // Coarse boxes: the interior, and the first ghost layer below x1 (its children
        // are fine ghosts; its neighbours exist for the slopes).
        let interior = coarse_interior(&cs);
        let mut slab = interior;
        slab.0[0] = IndexRange {
            s: cg - 1,
            e: cg - 1,
        };
        let mut refine = Vec::new();
        for b in 0..nb {
            for v in 0..nvar {
                for bx in [&interior, &slab] {
                    refine.push(BndInfo::new(b, v, bx, 0, FLAG_COARSE));
                }
            }
        }
        // Sub-halos of both arrays, some unallocated, back to back in the buffer.
        let mut halos = Vec::new();
        let mut off = 0;
        let boxes = [
            (IndexBox([r(0, 1), r(0, 3), r(0, 0)]), 0),
            (IndexBox([r(1, 2), r(1, 1), r(0, 0)]), FLAG_COARSE),
            (IndexBox([r(2, 5), r(2, 3), r(0, 0)]), FLAG_ALLOCATED),
            (slab, FLAG_COARSE | FLAG_ALLOCATED),
        ];
        for (k, (bx, flags)) in boxes.iter().enumerate() {
            let mut bx = *bx;
            if ndim == 3 && bx.0[2].e == 0 {
                bx.0[2] = r(1, 2);
            }
            let h = BndInfo::new(k % nb, (k / 2) % nvar, &bx, off, *flags);
            off += h.len();
            halos.push(h);
        }
        let (m, o) = (Some(Bc::Reflecting), Some(Bc::Outflow));
        let faces = [[m, o], [o, m], [m, o]];
        let physical = |sh: &IndexShape, coarse: bool| -> Vec<BndInfo> {
            let flag = if coarse { FLAG_COARSE } else { 0 };
            let mut out = Vec::new();
            for b in 0..nb {
                for v in 0..nvar {
                    for (bx, m) in physical_boxes(sh, &faces) {
                        out.push(BndInfo::new(b, v, &bx, 0, m | flag));
                    }
                }
            }
            out
        };
        let run = |op: usize, pop: usize, descs: &[BndInfo], st: &State| -> State {
            let (lo, hi) = match op {
                5 => interior_bounds(&cs),
                _ => interior_bounds(&shape),
            };
            let mut h = vec![op as f64, nb as f64, nvar as f64];
            h.extend(fd.dims.map(|x| x as f64));
            h.extend(cd.dims.map(|x| x as f64));
            h.extend([ndim, g, cg].map(|x| x as f64));
            h.extend(lo.map(|x| x as f64));
            h.extend(hi.map(|x| x as f64));
            h.extend([
                0.5,
                0.25,
                pop as f64,
                descs.len() as f64,
                st.buf.len() as f64,
            ]);
            let mut input = to_bytes(&h);
            let descs: Vec<HaloDesc> = descs.iter().map(halo_desc).collect();
            input.extend(desc_bytes(&descs));
            input.extend(to_bytes(&st.fine));
            input.extend(to_bytes(&st.coarse));
            input.extend(to_bytes(&st.buf));
            let out = from_bytes(&emu.run(&input).unwrap());
            let (f, rest) = out.split_at(st.fine.len());
            let (c, rest) = rest.split_at(st.coarse.len());
            let (b, flags) = rest.split_at(st.buf.len());
            State {
                fine: f.to_vec(),
                coarse: c.to_vec(),
                buf: b.to_vec(),
                flags: flags.iter().map(|&x| x as u32).collect(),
            }
        };
        let same = |what: &str, got: &State, want: &State| {
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&got.fine),
                bits(&want.fine),
                "{ndim}-D {what}: block arrays"
            );
            assert_eq!(
                bits(&got.coarse),
                bits(&want.coarse),
                "{ndim}-D {what}: coarse"
            );
            assert_eq!(bits(&got.buf), bits(&want.buf), "{ndim}-D {what}: buffer");
        };

        // Pack, with the flags of sub-halos holding some |value| above their slot's
        // threshold: 0.5 for slot 0, 1.0 for slot 1, ...
        let mut st = State {
            buf: vec![0.0; off],
            ..start.clone()
        };
        let got = run(0, 0, &halos, &st);
        let coarse = Some((cl, &st.coarse[..]));
        pack_boxes(&halos, nb, (fl, &st.fine), coarse, &mut st.buf).unwrap();
        let mut over = vec![0; halos.len()];
        let thresholds: Vec<f64> = (0..nvar).map(|s| 0.5 * (s + 1) as f64).collect();
        threshold_flags(&halos, &st.buf, &thresholds, &mut over);
        st.flags = over;
        same("pack", &got, &st);
        assert_eq!(got.flags, st.flags, "{ndim}-D pack flags");
        assert!(st.flags.contains(&1), "some sub-halo above the threshold");

        // Unpack a random buffer; unallocated sub-halos get the fill value 0.25.
        let mut st = State {
            buf: (0..off).map(|_| unit()).collect(),
            ..start.clone()
        };
        let got = run(1, 0, &halos, &st);
        let (fine, coarse) = ((fl, &mut st.fine[..]), Some((cl, &mut st.coarse[..])));
        unpack_boxes(&halos, &st.buf, nb, fine, coarse, 0.25).unwrap();
        same("unpack", &got, &st);

        // Restriction, then each prolongation, of the coarse boxes.
        let mut st = start.clone();
        let got = run(2, 0, &refine, &st);
        for b in &refine {
            let fine = &st.fine[fslot(b)];
            restrict(&shape, fine, &mut st.coarse[cslot(b)], &b.index_box()).unwrap();
        }
        same("restrict", &got, &st);
        use starhalo_exec::cuda::ProlongOp;
        for (pop, op) in [
            (ProlongOp::Constant, Prolongation::Constant),
            (ProlongOp::Linear, Prolongation::Linear),
            (ProlongOp::MinmodLinear, Prolongation::MinmodLinear),
        ] {
            let pop = pop as usize;
            let mut st = start.clone();
            let got = run(3, pop, &refine, &st);
            for b in &refine {
                let coarse = &st.coarse[cslot(b)];
                prolongate(op, &shape, coarse, &mut st.fine[fslot(b)], &b.index_box()).unwrap();
            }
            same(&format!("prolongate {op:?}"), &got, &st);
        }

        // Physical faces of the block arrays and of the coarse buffers.
        for (op, sh, coarse) in [(4, &shape, false), (5, &cs, true)] {
            let boxes = physical(sh, coarse);
            assert!(boxes.iter().any(|b| b.flags & FLAG_MIRROR0 != 0));
            let mut st = start.clone();
            let got = run(op, 0, &boxes, &st);
            let (lo, hi) = interior_bounds(sh);
            let (l, arr) = if coarse {
                (cl, &mut st.coarse)
            } else {
                (fl, &mut st.fine)
            };
            physical_fill(l, nb, &boxes, lo, hi, arr).unwrap();
            same(&format!("physical (coarse {coarse})"), &got, &st);
        }
    }
}
