//! Runs every CUDA kernel of starhalo against its host implementation and prints one line per
//! check: PASS or FAIL with the largest difference found. Exits 0 when every check passes, 1 on
//! any failure or when no GPU can be used (the reason is printed).
//!
//! ```text
//! cargo run --release -p starhalo-boundary --features cuda --example gpu_selftest
//! ```
//!
//! Checks: device buffers (upload, download, fill), the star-forest gather and scatter
//! kernels for every pack-plan kind, element type and operation (atomics for lists with
//! duplicates), pack-in-one with the sparse-threshold flags and unpack-in-one on the channels
//! of real meshes, restriction, the three prolongations, physical fill, the flux
//! correction's restriction and setting of face fluxes on a refined mesh, the refinement
//! criterion's first-derivative measure, and event ordering.
//! Everything but floating-point sums and products through atomics must match bit for bit.

use std::process::ExitCode;

#[cfg(not(feature = "cuda"))]
fn main() -> ExitCode {
    eprintln!("gpu_selftest: {}", starhalo_exec::cuda::CudaError::NotBuilt);
    ExitCode::FAILURE
}

#[cfg(feature = "cuda")]
fn main() -> ExitCode {
    match selftest::run() {
        Ok(0) => {
            println!("gpu_selftest: all checks passed");
            ExitCode::SUCCESS
        }
        Ok(n) => {
            println!("gpu_selftest: {n} check(s) FAILED");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("gpu_selftest: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(feature = "cuda")]
mod selftest {
    use std::sync::Arc;

    use starhalo_boundary::bnd_info::{
        recv_box, send_box, BndCache, BndInfo, FieldLayout, IndexBox, FLAG_ALLOCATED,
    };
    use starhalo_boundary::channel::all_channels;
    use starhalo_boundary::device_flux::DeviceFluxes;
    use starhalo_boundary::device_pack::{
        field_dims, physical_fill, refine_geom, threshold_flags, DeviceBndCache, DeviceRefine,
    };
    use starhalo_boundary::flux_correction::flux_channels;
    use starhalo_boundary::prolong_restrict::{prolongate, restrict, Prolongation};
    use starhalo_boundary::{FluxData, FluxFace, FluxSpace};
    use starhalo_exec::cuda::{
        AdvectGeom, CudaError, Device, FluxGeom, MeasureArrays, MeasureKind,
    };
    use starhalo_exec::{Buffer, Element, Policy};
    use starhalo_mesh::field::{IndexRange, IndexShape};
    use starhalo_mesh::{find_neighbors, Forest, RootGrid};
    use starhalo_sf::device::DevicePlan;
    use starhalo_sf::p2p::{Values, ValuesMut};
    use starhalo_sf::{Op, Plan, Scalar};

    type Res<T> = Result<T, Box<dyn std::error::Error>>;

    /// xorshift64*: deterministic test data.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() >> 33) as usize % n.max(1)
        }
        fn unit(&mut self) -> f64 {
            (self.next() >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    struct Report {
        failed: usize,
    }

    impl Report {
        fn check(&mut self, name: &str, ok: bool, maxdiff: f64) {
            let tag = if ok { "PASS" } else { "FAIL" };
            println!("{tag}  {name:<48} max|diff| = {maxdiff:e}");
            self.failed += usize::from(!ok);
        }

        /// Bitwise comparison of f64 arrays (NaN payloads included).
        fn exact(&mut self, name: &str, got: &[f64], want: &[f64]) {
            let ok = got.len() == want.len()
                && got
                    .iter()
                    .zip(want)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
            self.check(name, ok, max_diff(got, want));
        }
    }

    fn max_diff(a: &[f64], b: &[f64]) -> f64 {
        a.iter()
            .zip(b)
            .map(|(x, y)| {
                if x.to_bits() == y.to_bits() {
                    0.0
                } else {
                    (x - y).abs()
                }
            })
            .fold(0.0, |m, d| if d.is_nan() || d > m { d } else { m })
    }

    /// A test value of type `T` from a random draw (small integers keep products exact).
    trait Sample: Element + Scalar + Into<Num> {
        fn sample(r: &mut Rng) -> Self;
    }
    /// A value as f64 for the difference, and its bits for exact comparison.
    #[derive(Clone, Copy)]
    struct Num(f64, u64);
    fn num<T: Into<Num>>(v: T) -> Num {
        v.into()
    }
    macro_rules! sample {
        ($($t:ty => |$r:ident| $e:expr;)*) => {$(
            impl Sample for $t {
                fn sample($r: &mut Rng) -> Self { $e }
            }
            impl From<$t> for Num {
                #[allow(clippy::unnecessary_cast)]
                fn from(v: $t) -> Num { Num(v as f64, v.bits().unwrap_or(0)) }
            }
        )*};
    }
    sample! {
        f32 => |r| (r.unit() * 4.0 - 2.0) as f32;
        f64 => |r| r.unit() * 4.0 - 2.0;
        i32 => |r| r.below(7) as i32 - 3;
        u32 => |r| r.below(7) as u32;
        i64 => |r| r.below(7) as i64 - 3;
        u64 => |r| r.below(7) as u64;
    }

    fn compare<T: Sample>(got: &[T], want: &[T], tol: f64) -> (bool, f64) {
        let mut ok = got.len() == want.len();
        let mut md = 0.0f64;
        for (&g, &w) in got.iter().zip(want) {
            let (g, w): (Num, Num) = (g.into(), w.into());
            if g.1 != w.1 {
                let d = (g.0 - w.0).abs();
                md = md.max(d);
                ok &= d <= tol * w.0.abs().max(1.0);
            }
        }
        (ok, md)
    }

    /// Index lists of every plan kind over an array of `n` units.
    fn plans(r: &mut Rng, n: usize) -> Vec<(&'static str, Vec<usize>)> {
        let contiguous: Vec<usize> = (5..5 + n / 3).collect();
        // A 3x4x5 box with row stride 7 and plane stride 31, starting at 2.
        let strided: Vec<usize> = (0..5)
            .flat_map(|k| (0..4).flat_map(move |j| (0..3).map(move |i| 2 + 31 * k + 7 * j + i)))
            .collect();
        let list: Vec<usize> = (0..n / 2).map(|i| (i * 37 + 11) % n).collect();
        let dups: Vec<usize> = (0..n).map(|_| r.below(n / 8)).collect();
        vec![
            ("contiguous", contiguous),
            ("strided", strided),
            ("list", list),
            ("list+duplicates", dups),
        ]
    }

    fn sf_checks<T: Sample>(dev: &Arc<Device>, rep: &mut Report, r: &mut Rng) -> Res<()> {
        let tname = std::any::type_name::<T>();
        let n = 200;
        for lanes in [1usize, 3] {
            let src: Vec<T> = (0..n * lanes).map(|_| T::sample(r)).collect();
            let dsrc = Buffer::from_host_to(dev, &src)?;
            for (kind, idx) in plans(r, n) {
                let plan = Plan::new(&idx);
                let dplan = DevicePlan::new(dev, &plan)?;
                // Gather (pack) at an offset of 4 units.
                let off = 4 * lanes;
                let mut want = vec![T::default(); off + idx.len() * lanes];
                for (p, u) in plan.iter().enumerate() {
                    want[off + p * lanes..off + (p + 1) * lanes]
                        .copy_from_slice(&src[u * lanes..(u + 1) * lanes]);
                }
                let mut dbuf = Buffer::zeroed_on(dev, want.len())?;
                dplan.pack(dev, &dsrc, lanes, &mut dbuf, off)?;
                let (ok, md) = compare(&dbuf.to_vec()?, &want, 0.0);
                rep.check(&format!("gather {kind} {tname} lanes={lanes}"), ok, md);

                // Scatter (unpack) with every operation the type has.
                let vals: Vec<T> = (0..idx.len() * lanes).map(|_| T::sample(r)).collect();
                let dvals = Buffer::from_host_to(dev, &vals)?;
                for op in Op::ALL {
                    let Some(red) = T::reducer(op) else { continue };
                    let mut host = src.clone();
                    for (p, u) in plan.iter().enumerate() {
                        let lane = |k: usize| k * lanes..(k + 1) * lanes;
                        red(&mut host[lane(u)], &vals[lane(p)]);
                    }
                    let mut ddst = Buffer::from_host_to(dev, &src)?;
                    dplan.unpack(dev, &dvals, 0, lanes, op, &mut ddst)?;
                    let got = ddst.to_vec()?;
                    let atomics = plan.duplicates;
                    let float = T::SCALAR.is_some_and(|k| k.is_float());
                    let (ok, md) = if atomics && op == Op::Replace {
                        // Any one of the values sent to a unit may win.
                        let ok = (0..n * lanes).all(|i| {
                            let (u, l) = (i / lanes, i % lanes);
                            let cands: Vec<u64> = plan
                                .iter()
                                .enumerate()
                                .filter(|&(_, v)| v == u)
                                .map(|(p, _)| num(vals[p * lanes + l]).1)
                                .collect();
                            let g = num(got[i]).1;
                            if cands.is_empty() {
                                g == num(src[i]).1
                            } else {
                                cands.contains(&g)
                            }
                        });
                        (ok, 0.0)
                    } else if atomics && float && matches!(op, Op::Sum | Op::Prod) {
                        let tol = if std::mem::size_of::<T>() == 4 {
                            1e-5
                        } else {
                            1e-12
                        };
                        compare(&got, &host, tol)
                    } else {
                        compare(&got, &host, 0.0)
                    };
                    rep.check(
                        &format!("scatter {kind} {tname} lanes={lanes} {op}"),
                        ok,
                        md,
                    );
                }
            }
        }
        Ok(())
    }

    fn buffer_checks(dev: &Arc<Device>, rep: &mut Report) -> Res<()> {
        let v: Vec<f64> = (0..1000).map(|i| i as f64 * 0.5 - 7.0).collect();
        let mut b = Buffer::from_host_to(dev, &v)?;
        rep.exact("buffer upload/download f64", &b.to_vec()?, &v);
        b.fill(-0.0)?;
        rep.exact("buffer fill f64 (-0.0)", &b.to_vec()?, &[-0.0; 1000]);
        let mut c = Buffer::<u32>::zeroed_on(dev, 333)?;
        c.fill(0xdead_beef)?;
        let ok = c.to_vec()? == vec![0xdead_beef; 333];
        rep.check("buffer fill u32", ok, 0.0);
        let mut h = Buffer::<u8>::zeroed_on(dev, 5)?;
        h.fill(9)?;
        rep.check(
            "buffer fill u8 (through the host)",
            h.to_vec()? == [9; 5],
            0.0,
        );
        let cl = b.try_clone()?;
        b.upload(&v)?;
        rep.exact("buffer clone is a copy", &cl.to_vec()?, &[-0.0; 1000]);
        // Memory for MPI (cuMemAlloc): zeroed, written, grown alike and freed again.
        for _ in 0..3 {
            let mut m = Buffer::<f64>::zeroed_for_mpi(dev, 1000)?;
            let zero = m.to_vec()? == vec![0.0; 1000];
            m.upload(&v)?;
            let grown = m.zeroed_like(2000)?;
            let ok = zero && m.to_vec()? == v && grown.to_vec()? == vec![0.0; 2000];
            rep.check("buffer for MPI: zeroed, written, grown", ok, 0.0);
        }
        Ok(())
    }

    /// Pack-in-one and unpack-in-one over the channels of uniform periodic meshes.
    fn halo_checks(dev: &Arc<Device>, rep: &mut Report, r: &mut Rng) -> Res<()> {
        for (ndim, nrb, nx, ng, nvar) in [
            (2, [3, 2, 1], [8, 6, 1], 2, 2),
            (3, [2, 2, 2], [4, 4, 4], 2, 1),
            (3, [1, 2, 1], [6, 4, 4], 1, 3),
        ] {
            let grid = RootGrid::new(ndim, nrb.map(|v| v as i64), [true; 3])?;
            let forest = Forest::uniform(grid, 0);
            let nblocks = forest.len();
            let nb = find_neighbors(&forest, &vec![0; nblocks])?;
            let shape = IndexShape::new(nx, ng, ndim)?;
            let layout = FieldLayout::of_shape(&shape, nvar);
            let vars: Vec<usize> = (0..nvar).collect();
            let (mut send, mut recv) = (Vec::new(), Vec::new());
            for (i, ch) in all_channels(&nb, &vars).into_iter().enumerate() {
                let (sb, _) = send_box(&ch, &shape)?;
                let (rb, _) = recv_box(&ch, &shape)?;
                send.push(BndInfo::new(
                    ch.key.sender,
                    ch.key.var,
                    &sb,
                    0,
                    FLAG_ALLOCATED,
                ));
                // Every third channel is unallocated: its ghosts get the default.
                let flags = if i % 3 == 2 { 0 } else { FLAG_ALLOCATED };
                recv.push(BndInfo::new(ch.key.receiver, ch.key.var, &rb, 0, flags));
            }
            let send = BndCache::new(layout, nblocks, send)?;
            let recv = BndCache::new(layout, nblocks, recv)?;
            let len = nblocks * layout.block_len();
            let data: Vec<f64> = (0..len).map(|_| r.unit() * 2.0 - 1.0).collect();
            let tag = format!("{ndim}D {} blocks {nvar} vars", nblocks);

            let mut hbuf = vec![0.0; send.buffer_len()];
            send.pack(Policy::Serial, &data, &mut hbuf)?;
            let dsend = DeviceBndCache::new(dev, &send, layout, None, nblocks)?;
            let ddata = Buffer::from_host_to(dev, &data)?;
            let mut dbuf = Buffer::zeroed_on(dev, send.buffer_len())?;
            let mut over = Buffer::<u32>::zeroed_on(dev, send.infos().len())?;
            // Per variable slot: 0.9, 0.8, ...
            let th: Vec<f64> = (0..nvar).map(|v| 0.9 - 0.1 * v as f64).collect();
            let dth = Buffer::from_host_to(dev, &th)?;
            dsend.pack(dev, &ddata, None, &mut dbuf, Some((&dth, &mut over)))?;
            rep.exact(&format!("halo pack {tag}"), &dbuf.to_vec()?, &hbuf);
            let mut want = vec![0; send.infos().len()];
            threshold_flags(send.infos(), &hbuf, &th, &mut want);
            let got = over.to_vec()?;
            let nset = want.iter().filter(|&&f| f == 1).count();
            let ok = got == want && nset > 0 && nset < want.len();
            rep.check(
                &format!("halo pack threshold flags {tag} ({nset} set)"),
                ok,
                0.0,
            );

            let mut hdata = vec![f64::NAN; len];
            recv.unpack(Policy::Serial, &hbuf, &mut hdata, &vec![-5.0; nvar])?;
            let drecv = DeviceBndCache::new(dev, &recv, layout, None, nblocks)?;
            let mut dout = Buffer::from_host_to(dev, &vec![f64::NAN; len])?;
            drecv.unpack(dev, &dbuf, &mut dout, None, -5.0)?;
            rep.exact(&format!("halo unpack {tag}"), &dout.to_vec()?, &hdata);
        }
        Ok(())
    }

    /// Restriction and the three prolongations against the host operators, bit for bit.
    fn refine_checks(dev: &Arc<Device>, rep: &mut Report, r: &mut Rng) -> Res<()> {
        for ndim in 1..=3 {
            let nx = [0, 1, 2].map(|d| if d < ndim { 6 - 2 * (d % 2) } else { 1 });
            let shape = IndexShape::new(nx, 2, ndim)?;
            let cshape = shape.coarse()?;
            let (nvar, nblocks) = (2, 3);
            let geom = refine_geom(&shape, nvar, nblocks)?;
            let (fl, cl) = (geom.fine.dims, geom.coarse.dims);
            let (fvar, cvar): (usize, usize) = (fl.iter().product(), cl.iter().product());
            // Coarse interior, and a box one cell larger (ghosts) for restriction.
            let interior = IndexBox([0, 1, 2].map(|d| IndexRange {
                s: cshape.ghosts(d),
                e: cshape.ghosts(d) + cshape.nx()[d] - 1,
            }));
            let mut boxes = Vec::new();
            for b in 0..nblocks {
                for v in 0..nvar {
                    boxes.push(BndInfo::new(b, v, &interior, 0, 0));
                }
            }
            let fine: Vec<f64> = (0..fvar * nvar * nblocks)
                .map(|_| r.unit() * 8.0 - 4.0)
                .collect();
            let coarse: Vec<f64> = (0..cvar * nvar * nblocks)
                .map(|_| {
                    if r.below(4) == 0 {
                        0.0
                    } else {
                        r.unit() * 8.0 - 4.0
                    }
                })
                .collect();

            let mut hc = vec![0.0; coarse.len()];
            for (f, c) in fine.chunks(fvar).zip(hc.chunks_mut(cvar)) {
                restrict(&shape, f, c, &interior)?;
            }
            let dref = DeviceRefine::new(dev, &boxes, geom, true)?;
            let dfine = Buffer::from_host_to(dev, &fine)?;
            let mut dc = Buffer::zeroed_on(dev, coarse.len())?;
            dref.restrict(dev, &dfine, &mut dc)?;
            rep.exact(&format!("restrict {ndim}D"), &dc.to_vec()?, &hc);

            for op in [
                Prolongation::Constant,
                Prolongation::Linear,
                Prolongation::MinmodLinear,
            ] {
                let mut hf = fine.clone();
                for (c, f) in coarse.chunks(cvar).zip(hf.chunks_mut(fvar)) {
                    prolongate(op, &shape, c, f, &interior)?;
                }
                let dcoarse = Buffer::from_host_to(dev, &coarse)?;
                let mut df = Buffer::from_host_to(dev, &fine)?;
                dref.prolongate(dev, op, &dcoarse, &mut df)?;
                rep.exact(&format!("prolongate {op:?} {ndim}D"), &df.to_vec()?, &hf);
            }
        }
        Ok(())
    }

    /// Outflow fill of the x1 faces, then the x2 faces, of a 2-D block; then every physical
    /// box of blocks with mixed outflow, reflecting and periodic faces in one launch.
    fn physical_checks(dev: &Arc<Device>, rep: &mut Report, r: &mut Rng) -> Res<()> {
        let shape = IndexShape::new([6, 4, 1], 2, 2)?;
        let (nvar, nblocks) = (2, 2);
        let layout = FieldLayout::of_shape(&shape, nvar);
        let d = layout.dims;
        let (lo, hi) = ([2, 2, 0], [7, 5, 0]);
        let rr = |s, e| IndexRange { s, e };
        let mut x1 = Vec::new();
        let mut x2 = Vec::new();
        for b in 0..nblocks {
            for v in 0..nvar {
                x1.push(BndInfo::new(
                    b,
                    v,
                    &IndexBox([rr(0, 1), rr(0, d[1] - 1), rr(0, 0)]),
                    0,
                    0,
                ));
                x1.push(BndInfo::new(
                    b,
                    v,
                    &IndexBox([rr(8, 9), rr(0, d[1] - 1), rr(0, 0)]),
                    0,
                    0,
                ));
                x2.push(BndInfo::new(
                    b,
                    v,
                    &IndexBox([rr(0, d[0] - 1), rr(0, 1), rr(0, 0)]),
                    0,
                    0,
                ));
                x2.push(BndInfo::new(
                    b,
                    v,
                    &IndexBox([rr(0, d[0] - 1), rr(6, 7), rr(0, 0)]),
                    0,
                    0,
                ));
            }
        }
        let data: Vec<f64> = (0..layout.block_len() * nblocks)
            .map(|_| r.unit())
            .collect();
        let mut host = data.clone();
        let mut ddata = Buffer::from_host_to(dev, &data)?;
        let f = field_dims(layout, nblocks);
        for (name, boxes) in [("x1", &x1), ("x2", &x2)] {
            physical_fill(layout, nblocks, boxes, lo, hi, &mut host)?;
            let descs: Vec<_> = boxes
                .iter()
                .map(starhalo_boundary::device_pack::halo_desc)
                .collect();
            let h = starhalo_exec::cuda::DeviceHalos::for_physical(dev, &descs, f, lo, hi)?;
            dev.physical_fill(&h, &mut ddata)?;
            rep.exact(&format!("outflow {name} faces"), &ddata.to_vec()?, &host);
        }
        // One launch for every physical box of a block, corners and edges included, as the
        // exchange's device fields send them: the host's direction-by-direction fill.
        use starhalo_boundary::bounds::{interior_bounds, physical_bounds, physical_boxes};
        use starhalo_mesh::BoundaryCondition as Bc;
        let (o, p, m) = (Some(Bc::Outflow), Some(Bc::Periodic), Some(Bc::Reflecting));
        for (nx, ndim, faces) in [
            ([6, 4, 1], 2, [[o, o], [o, o], [None, None]]),
            ([6, 4, 1], 2, [[p, o], [o, None], [None, None]]),
            ([4, 4, 4], 3, [[o, o], [o, o], [o, o]]),
            ([4, 3, 5], 3, [[o, p], [None, o], [o, None]]),
            ([6, 4, 1], 2, [[m, o], [o, m], [None, None]]),
            ([4, 3, 5], 3, [[m, m], [m, o], [p, m]]),
        ] {
            let shape = IndexShape::new(nx, 2, ndim)?;
            let layout = FieldLayout::of_shape(&shape, 1);
            let data: Vec<f64> = (0..layout.block_len()).map(|_| r.unit()).collect();
            let mut want = data.clone();
            physical_bounds(&shape, &faces, &mut want);
            let descs: Vec<_> = physical_boxes(&shape, &faces)
                .iter()
                .map(|(b, flags)| {
                    starhalo_boundary::device_pack::halo_desc(&BndInfo::new(0, 0, b, 0, *flags))
                })
                .collect();
            let (lo, hi) = interior_bounds(&shape);
            let f = field_dims(layout, 1);
            let h = starhalo_exec::cuda::DeviceHalos::for_physical(dev, &descs, f, lo, hi)?;
            let mut ddata = Buffer::from_host_to(dev, &data)?;
            dev.physical_fill(&h, &mut ddata)?;
            let name = format!("physical boxes in one launch, {ndim}-D {faces:?}");
            rep.exact(&name, &ddata.to_vec()?, &want);
        }
        Ok(())
    }

    /// `DeviceFluxes` on every fine–coarse face of a mesh with one root refined (two
    /// variables, one of two slots) against the host's `FluxData`, bit for bit: restriction
    /// into host (staged) and device (GPU-aware) message buffers, then setting from either,
    /// with a different set of faces applied each time (the descriptors are uploaded again).
    fn flux_checks(dev: &Arc<Device>, rep: &mut Report, r: &mut Rng) -> Res<()> {
        for (ndim, nx) in [(1, [8, 1, 1]), (2, [8, 6, 1]), (3, [4, 6, 4])] {
            let nrb = [
                2,
                if ndim > 1 { 2 } else { 1 },
                if ndim > 2 { 2 } else { 1 },
            ];
            let grid = RootGrid::new(ndim, nrb, [true, ndim > 1, ndim > 2])?;
            let roots = Forest::uniform(grid, 0);
            let mut leaves = roots.leaves()[1..].to_vec();
            leaves.extend(roots.leaves()[0].children(ndim));
            let forest = Forest::from_leaves(grid, leaves)?;
            let nblocks = forest.len();
            let nb = find_neighbors(&forest, &vec![0; nblocks])?;
            let shape = IndexShape::new(nx, 2, ndim)?;
            let slots = [0..1, 1..3];
            let rc = flux_channels(&nb, &[0, 1], 0);
            let faces = |sending: bool| -> Res<Vec<FluxFace>> {
                let list = if sending { &rc.send } else { &rc.recv };
                let mut out: Vec<FluxFace> = Vec::new();
                for c in list {
                    let gid = if sending {
                        c.key.sender
                    } else {
                        c.key.receiver
                    };
                    let at = out.last().map_or(0, |f| f.buf.end);
                    let s = slots[c.key.var].clone();
                    out.push(FluxFace::of_channel(c, sending, &shape, gid, s, at)?);
                }
                Ok(out)
            };
            let (send, recv) = (faces(true)?, faces(false)?);
            let geom = FluxGeom {
                ndim,
                n: nx,
                nslots: 3,
                nblocks,
            };
            let mut fd = FluxData::with_shape(&shape, nblocks, 3);
            let mut df = DeviceFluxes::new(dev, geom, Some([&send, &recv]))?;
            // The device layout along d: every (block, slot) array of the host in order.
            let layout = |fd: &FluxData, d: usize| -> Vec<f64> {
                let mut a = Vec::new();
                for b in 0..nblocks {
                    for s in 0..3 {
                        a.extend_from_slice(fd.flux(b, s, d));
                    }
                }
                a
            };
            for d in 0..ndim {
                for b in 0..nblocks {
                    for s in 0..3 {
                        let f = fd.flux_mut(b, s, d);
                        f.iter_mut().for_each(|x| *x = r.unit() * 2.0 - 1.0);
                    }
                }
                let a = df.array_mut(d).ok_or("no flux array")?;
                a.upload(&layout(&fd, d))?;
            }
            let tag = format!("{ndim}D {} fine faces", send.len());

            let len = send.last().map_or(0, |f| f.buf.end);
            let mut want = vec![0.0; len];
            fd.restrict(&send, ValuesMut::Host(&mut want))?;
            let mut staged = vec![0.0; len];
            df.restrict(&send, ValuesMut::Host(&mut staged))?;
            rep.exact(&format!("flux restrict staged {tag}"), &staged, &want);
            let mut placed = Buffer::zeroed_on(dev, len)?;
            df.restrict(&send, ValuesMut::Space(&mut placed))?;
            rep.exact(
                &format!("flux restrict aware {tag}"),
                &placed.to_vec()?,
                &want,
            );

            let len = recv.last().map_or(0, |f| f.buf.end);
            for (k, aware) in [false, true].into_iter().enumerate() {
                let buf: Vec<f64> = (0..len).map(|_| r.unit()).collect();
                let apply: Vec<bool> = (0..recv.len()).map(|i| i % 3 != k).collect();
                fd.set(&recv, &apply, Values::Host(&buf))?;
                if aware {
                    let b = Buffer::from_host_to(dev, &buf)?;
                    df.set(&recv, &apply, Values::Space(&b))?;
                } else {
                    df.set(&recv, &apply, Values::Host(&buf))?;
                }
                for (d, a) in df.arrays().iter().enumerate() {
                    let name = format!("flux set {} {tag} x{}", ["staged", "aware"][k], d + 1);
                    rep.exact(&name, &a.to_vec()?, &layout(&fd, d));
                }
            }
        }
        Ok(())
    }

    /// The first-derivative refinement measure, written out on the host as the advection's
    /// criterion computes it.
    fn measure_ref(
        u: &[f64],
        g: &AdvectGeom,
        criteria: &[(usize, MeasureKind)],
        tiny: f64,
    ) -> Vec<f64> {
        let npts: usize = g.dims.iter().product();
        let stride = [1, g.dims[0], g.dims[0] * g.dims[1]];
        let mut out = Vec::new();
        for b in 0..g.nblocks {
            for &(v, kind) in criteria {
                let a = &u[(b * g.nvar + v) * npts..][..npts];
                let mut m = match kind {
                    MeasureKind::FirstDerivative | MeasureKind::SecondDerivative => 0.0f64,
                    _ => f64::NEG_INFINITY,
                };
                if let MeasureKind::BlockMax | MeasureKind::BlockMaxNegated = kind {
                    let sign = if kind == MeasureKind::BlockMax {
                        1.0
                    } else {
                        -1.0
                    };
                    out.push(a.iter().fold(m, |m, &x| m.max(sign * x)) + 0.0);
                    continue;
                }
                for k in 0..g.n[2] {
                    for j in 0..g.n[1] {
                        for i in 0..g.n[0] {
                            let c = ((k + g.ghosts[2]) * g.dims[1] + j + g.ghosts[1]) * g.dims[0]
                                + i
                                + g.ghosts[0];
                            for s in &stride[..g.ndim] {
                                let (l, r) = (a[c - s], a[c + s]);
                                m = m.max(match kind {
                                    MeasureKind::FirstDerivative => {
                                        (r - l).abs() / (2.0 * a[c].abs() + tiny)
                                    }
                                    MeasureKind::SecondDerivative => {
                                        let avg = 0.5 * (r + l);
                                        (avg - a[c]).abs() / (avg.abs() + (a[c].abs() + tiny))
                                    }
                                    MeasureKind::Max => a[c],
                                    MeasureKind::MaxNegated => -a[c],
                                    MeasureKind::BlockMax | MeasureKind::BlockMaxNegated => {
                                        unreachable!("measured above")
                                    }
                                });
                            }
                        }
                    }
                }
                out.push(m + 0.0);
            }
        }
        out
    }

    /// The refinement measure's block reduction: blocks of fewer and of more cells than a
    /// thread block has threads, and more (block, criterion) pairs than the grid has blocks.
    fn measure_checks(dev: &Arc<Device>, rep: &mut Report, r: &mut Rng) -> Res<()> {
        let geom = |nblocks, ndim, n: [usize; 3]| {
            let ghosts = [0, 1, 2].map(|d| if d < ndim { 2 } else { 0 });
            AdvectGeom {
                nblocks,
                nvar: 2,
                dims: [0, 1, 2].map(|d| n[d] + 2 * ghosts[d]),
                ghosts,
                n,
                ndim,
            }
        };
        use MeasureKind::{
            BlockMax, BlockMaxNegated, FirstDerivative, Max, MaxNegated, SecondDerivative,
        };
        let cases = [
            (
                "2-D 4x4",
                geom(7, 2, [4, 4, 1]),
                vec![(1, FirstDerivative), (0, SecondDerivative), (0, Max)],
            ),
            (
                "3-D 8x8x8",
                geom(5, 3, [8, 8, 8]),
                vec![
                    (0, FirstDerivative),
                    (1, MaxNegated),
                    (1, SecondDerivative),
                    (0, BlockMax),
                    (0, BlockMaxNegated),
                ],
            ),
            (
                "1-D, 70000 blocks",
                geom(70_000, 1, [3, 1, 1]),
                vec![(1, FirstDerivative)],
            ),
        ];
        for (name, g, criteria) in cases {
            let u: Vec<f64> = (0..g.field_len())
                .map(|_| if r.below(9) == 0 { 0.0 } else { r.unit() - 0.5 })
                .collect();
            let mut m = MeasureArrays::new(dev, &g, &criteria)?;
            let mut got = vec![0.0; m.len()];
            dev.refine_measure(&g, &Buffer::from_host_to(dev, &u)?, &mut m, 1e-20, &mut got)?;
            rep.exact(
                &format!("refinement measures {name}"),
                &got,
                &measure_ref(&u, &g, &criteria, 1e-20),
            );
        }
        Ok(())
    }

    /// Events order work without a device-wide synchronisation.
    fn event_checks(dev: &Arc<Device>, rep: &mut Report) -> Res<()> {
        let mut b = Buffer::<f64>::zeroed_on(dev, 1 << 20)?;
        b.fill(3.0)?;
        let ev = dev.record()?;
        dev.wait(&ev)?;
        ev.synchronize()?;
        let done = ev.is_complete()?;
        dev.synchronize()?;
        let ok = done && b.to_vec()?.iter().all(|&v| v == 3.0);
        rep.check("event record/wait/synchronize", ok, 0.0);
        Ok(())
    }

    pub fn run() -> Res<usize> {
        let dev = Device::process_default().map_err(|e: CudaError| e.to_string())?;
        let (maj, min) = dev.compute_capability();
        println!(
            "gpu_selftest: device {} `{}` (sm_{maj}{min})",
            dev.ordinal(),
            dev.name()
        );
        let t = std::time::Instant::now();
        dev.compile_all()?;
        let (nv_major, nv_minor) = Device::nvrtc_version()?;
        println!(
            "gpu_selftest: kernels ready in {:.2} s (NVRTC {nv_major}.{nv_minor}, or the kernel cache unless STARHALO_KERNEL_CACHE is empty)",
            t.elapsed().as_secs_f64()
        );
        let mut rep = Report { failed: 0 };
        let mut r = Rng(0x5eed_cafe_f00d);
        buffer_checks(&dev, &mut rep)?;
        sf_checks::<f64>(&dev, &mut rep, &mut r)?;
        sf_checks::<f32>(&dev, &mut rep, &mut r)?;
        sf_checks::<i32>(&dev, &mut rep, &mut r)?;
        sf_checks::<u32>(&dev, &mut rep, &mut r)?;
        sf_checks::<i64>(&dev, &mut rep, &mut r)?;
        sf_checks::<u64>(&dev, &mut rep, &mut r)?;
        halo_checks(&dev, &mut rep, &mut r)?;
        refine_checks(&dev, &mut rep, &mut r)?;
        physical_checks(&dev, &mut rep, &mut r)?;
        flux_checks(&dev, &mut rep, &mut r)?;
        measure_checks(&dev, &mut rep, &mut r)?;
        event_checks(&dev, &mut rep)?;
        Ok(rep.failed)
    }
}
