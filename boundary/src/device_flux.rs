//! The flux correction on a CUDA device (feature `cuda`): face fluxes that stay in device
//! memory, each correction one restriction launch for every sending face and one launch
//! setting every receiving face.
//!
//! A [`FluxFace`] becomes one [`HaloDesc`] per slot ([`flux_descs`]): its box of coarse faces,
//! its normal in the flags (`FLAG_NORMAL0 << d`), and [`FLAG_ALLOCATED`] where a receiving
//! face is set. `DeviceFluxes` holds the face flux arrays the advection kernels write and the
//! two descriptor arrays, and is the [`FluxSpace`] a [`FluxCorrection`] runs on: staged (the
//! restriction is copied down to the host message buffer, which waits for the stream: the
//! one synchronisation before MPI; what arrives is copied up) or, with the correction's
//! messages placed in device memory, straight into and out of them. The descriptor
//! conversion exists in every build, and a test runs the kernels on the host (emulated)
//! against [`FluxData`](crate::FluxData).

use starhalo_exec::cuda::{HaloDesc, FLAG_ALLOCATED, FLAG_NORMAL0};

use crate::error::BoundaryError;
use crate::flux_correction::{check_apply, FluxFace};
#[cfg(doc)]
use crate::flux_correction::{FluxCorrection, FluxSpace};

/// The kernels' form of `faces`: per face, per slot, one descriptor of the face's box at its
/// slot's place in the buffer. With `apply` (receiving faces, one flag each),
/// [`FLAG_ALLOCATED`] marks the faces to set; without, every face has it. An empty face or a
/// flag list of another length is an error.
pub fn flux_descs(
    faces: &[FluxFace],
    apply: Option<&[bool]>,
) -> Result<Vec<HaloDesc>, BoundaryError> {
    if let Some(a) = apply {
        check_apply(faces, a)?;
    }
    let mut out = Vec::with_capacity(faces.iter().map(|f| f.slots.len()).sum());
    for (i, f) in faces.iter().enumerate() {
        if f.faces.iter().any(|r| r.is_empty()) {
            return Err(BoundaryError::Geometry(format!("empty flux face {f:?}")));
        }
        let on = apply.is_none_or(|a| a[i]);
        for (k, slot) in f.slots.clone().enumerate() {
            out.push(HaloDesc {
                block: f.block as u64,
                var: slot as u64,
                s: f.faces.clone().map(|r| r.start as u64),
                e: f.faces.clone().map(|r| (r.end - 1) as u64),
                buf_offset: f.slot_values(k).start as u64,
                flags: (FLAG_NORMAL0 << f.dir) | if on { FLAG_ALLOCATED } else { 0 },
                pad: 0,
            });
        }
    }
    Ok(out)
}

#[cfg(feature = "cuda")]
pub use device::DeviceFluxes;

#[cfg(feature = "cuda")]
mod device {
    use std::sync::Arc;

    use starhalo_exec::cuda::{Device, DeviceHalos, FluxGeom, Staging, FLAG_ALLOCATED};
    use starhalo_exec::Buffer;
    use starhalo_sf::p2p::{Values, ValuesMut};

    use super::flux_descs;
    use crate::error::BoundaryError;
    use crate::flux_correction::{check_apply, FluxFace, FluxSpace};

    /// One side of the correction on the device: its faces, their descriptors, and the
    /// device copy of its message buffer (staged path).
    #[derive(Debug)]
    struct Side {
        faces: Vec<FluxFace>,
        halos: DeviceHalos,
        stage: Staging<f64>,
    }

    impl Side {
        fn new(
            dev: &Arc<Device>,
            faces: &[FluxFace],
            geom: FluxGeom,
            restrict: bool,
        ) -> Result<Self, BoundaryError> {
            let len = faces.last().map_or(0, |f| f.buf.end);
            let descs = flux_descs(faces, None)?;
            Ok(Self {
                faces: faces.to_vec(),
                halos: DeviceHalos::for_flux(dev, &descs, geom, restrict, len)
                    .map_err(BoundaryError::device)?,
                stage: Staging::new(len),
            })
        }

        /// Checks that `faces` are the ones uploaded.
        fn check(&self, faces: &[FluxFace]) -> Result<(), BoundaryError> {
            if faces == self.faces {
                Ok(())
            } else {
                Err(BoundaryError::Mismatch(
                    "the flux correction's faces are not those its device fluxes were built for"
                        .into(),
                ))
            }
        }

        /// The descriptors, the staging copy on `dev`, and its length, checked to fit in a
        /// host message buffer of `got` values.
        fn staging(
            &mut self,
            dev: &Arc<Device>,
            got: usize,
        ) -> Result<(&DeviceHalos, &mut Buffer<f64>, usize), BoundaryError> {
            let n = self.stage.len();
            if got < n {
                return Err(BoundaryError::Size {
                    what: "flux correction buffer",
                    expected: n,
                    got,
                });
            }
            let stage = self.stage.get(dev).map_err(BoundaryError::device)?;
            Ok((&self.halos, stage, n))
        }
    }

    /// Face fluxes in device memory (per active direction `d`, `[block][slot][faces]` as
    /// [`FluxGeom`] lays them out), with a flux correction's faces uploaded: the
    /// [`FluxSpace`] of a correction on a GPU.
    #[derive(Debug)]
    pub struct DeviceFluxes {
        dev: Arc<Device>,
        geom: FluxGeom,
        flux: Vec<Buffer<f64>>,
        /// Sending and receiving faces, where there is a correction.
        sides: Option<[Side; 2]>,
    }

    impl DeviceFluxes {
        /// Zero face fluxes of `geom` on `dev`, and a correction's sending and receiving
        /// `faces` (its [`send_faces`](crate::FluxCorrection::send_faces) and
        /// [`recv_faces`](crate::FluxCorrection::recv_faces), built for blocks of `geom`'s
        /// shape and slots).
        pub fn new(
            dev: &Arc<Device>,
            geom: FluxGeom,
            faces: Option<[&[FluxFace]; 2]>,
        ) -> Result<Self, BoundaryError> {
            let flux = (0..geom.ndim.min(3))
                .map(|d| Buffer::zeroed_on(dev, geom.len(d)))
                .collect::<Result<_, _>>()
                .map_err(BoundaryError::device)?;
            let sides = match faces {
                Some([send, recv]) => Some([
                    Side::new(dev, send, geom, true)?,
                    Side::new(dev, recv, geom, false)?,
                ]),
                None => None,
            };
            Ok(Self {
                dev: dev.clone(),
                geom,
                flux,
                sides,
            })
        }

        /// Allocates the device copies of the correction's messages now (the staged path
        /// needs them; GPU-aware messages never do), so that the correction allocates nothing.
        pub fn allocate_staging(&mut self) -> Result<(), BoundaryError> {
            for s in self.sides.iter_mut().flatten() {
                s.stage.allocate(&self.dev).map_err(BoundaryError::device)?;
            }
            Ok(())
        }

        /// The face flux arrays, one per active direction.
        pub fn arrays(&self) -> &[Buffer<f64>] {
            &self.flux
        }

        /// The face flux array along `d`, to write.
        pub fn array_mut(&mut self, d: usize) -> Option<&mut Buffer<f64>> {
            self.flux.get_mut(d)
        }
    }

    /// Side `k` (0 sending, 1 receiving) of a correction's faces.
    fn side(sides: &mut Option<[Side; 2]>, k: usize) -> Result<&mut Side, BoundaryError> {
        match sides {
            Some(s) => Ok(&mut s[k]),
            None => Err(BoundaryError::Mismatch(
                "these device fluxes were built without a flux correction".into(),
            )),
        }
    }

    impl FluxSpace for DeviceFluxes {
        fn blocks(&self) -> usize {
            self.geom.nblocks
        }

        fn slots(&self) -> usize {
            self.geom.nslots
        }

        fn face_dims(&self, d: usize) -> [usize; 3] {
            self.geom.face_dims(d)
        }

        fn restrict(
            &mut self,
            faces: &[FluxFace],
            buf: ValuesMut<'_>,
        ) -> Result<(), BoundaryError> {
            let Self {
                dev, flux, sides, ..
            } = self;
            let side = side(sides, 0)?;
            side.check(faces)?;
            match buf {
                // GPU-aware: straight into the message buffer MPI reads in place.
                ValuesMut::Space(b) if b.host().is_none() => dev
                    .flux_restrict(&side.halos, flux, b)
                    .map_err(BoundaryError::device),
                // Staged: into the device copy, then down to host memory (the download waits
                // for the stream: the one synchronisation before MPI).
                other => {
                    let h = other
                        .host()
                        .ok_or_else(|| BoundaryError::device("no host values"))?;
                    let (halos, stage, n) = side.staging(dev, h.len())?;
                    dev.flux_restrict(halos, flux, stage)
                        .map_err(BoundaryError::device)?;
                    stage.download(&mut h[..n]).map_err(BoundaryError::device)
                }
            }
        }

        fn set(
            &mut self,
            faces: &[FluxFace],
            apply: &[bool],
            buf: Values<'_>,
        ) -> Result<(), BoundaryError> {
            let Self {
                dev, flux, sides, ..
            } = self;
            let side = side(sides, 1)?;
            side.check(faces)?;
            check_apply(faces, apply)?;
            // Which faces are set changes only with sparse allocation: upload then.
            let want = faces
                .iter()
                .zip(apply)
                .flat_map(|(f, &a)| std::iter::repeat_n(a, f.slots.len()));
            let same = side
                .halos
                .descs()
                .iter()
                .zip(want)
                .all(|(d, a)| (d.flags & FLAG_ALLOCATED != 0) == a);
            if !same {
                let descs = flux_descs(faces, Some(apply))?;
                side.halos = side
                    .halos
                    .with_descs(dev, &descs)
                    .map_err(BoundaryError::device)?;
            }
            match buf {
                // GPU-aware: straight from the message buffer MPI wrote in place.
                Values::Space(b) if b.host().is_none() => dev
                    .flux_set(&side.halos, b, flux)
                    .map_err(BoundaryError::device),
                // Staged: up from host memory into the device copy, then set from it.
                other => {
                    let h = other
                        .host()
                        .ok_or_else(|| BoundaryError::device("no host values"))?;
                    let (halos, stage, n) = side.staging(dev, h.len())?;
                    stage.upload(&h[..n]).map_err(BoundaryError::device)?;
                    dev.flux_set(halos, stage, flux)
                        .map_err(BoundaryError::device)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flux_correction::tests::one_refined;
    use crate::flux_correction::{flux_channels, FluxData, FluxSpace};
    use starhalo_exec::cuda::FluxGeom;
    use starhalo_mesh::field::IndexShape;
    use starhalo_sf::p2p::{Values, ValuesMut};

    /// The kernels' test program: reads a geometry, descriptors, the face flux arrays and a
    /// buffer; restricts (op 0) or sets (op 1) as 3 blocks of 32 threads; writes the arrays
    /// and the buffer.
    const FLUX_DRIVER: &str = r#"
int main() {
    double h[10];
    sh_read(h, 10);
    int op = (int)h[0];
    u64 n[3] = {(u64)h[1], (u64)h[2], (u64)h[3]}, nslot = h[4], nb = h[5], ndim = h[6], nface = h[7], buflen = h[8];
    sh_bnd_info *info = (sh_bnd_info *)malloc(nface * sizeof(sh_bnd_info) + 1);
    if (fread(info, sizeof(sh_bnd_info), nface, stdin) != nface) { printf("short descriptors\n"); return 3; }
    double *x[3];
    u64 len[3];
    for (int d = 0; d < 3; ++d) {
        u64 m[3] = {n[0], n[1], n[2]};
        m[d] += 1;
        len[d] = d < (int)ndim ? nb * nslot * m[0] * m[1] * m[2] : 0;
        x[d] = (double *)malloc(len[d] * 8 + 8);
        sh_read(x[d], len[d]);
    }
    double *buf = (double *)malloc(buflen * 8 + 8);
    sh_read(buf, buflen);
    if (op != 0 && op != 1) { printf("unknown operation %d\n", op); return 3; }
    gridDim.x = 3; blockDim.x = 32;
    for (blockIdx.x = 0; blockIdx.x < gridDim.x; ++blockIdx.x) sh_run_block([&] {
        if (op == 0) sh_flux_restrict(info, nface, x[0], x[1], x[2], buf, n[0], n[1], n[2], nslot, ndim);
        else sh_flux_set(info, nface, buf, x[0], x[1], x[2], n[0], n[1], n[2], nslot);
    });
    for (int d = 0; d < 3; ++d) sh_write(x[d], len[d]);
    sh_write(buf, buflen);
    return 0;
}
"#;

    /// The flux kernels, run on the host by the emulator over the descriptors of
    /// every fine–coarse face of a refined mesh (two variables, one of two slots), restrict
    /// and set as [`FluxData`] does, bit for bit: 1-D to 3-D, random non-dyadic fluxes,
    /// some receiving faces not applied. Skipped, saying so, where no `c++` is installed.
    #[test]
    fn flux_kernels_under_the_emulator_match_the_host() {
        use starhalo_exec::cuda::emulate::{
            desc_bytes, from_bytes, test_values, to_bytes, Emulator,
        };
        let Some(emu) = Emulator::build(FLUX_DRIVER).unwrap() else {
            eprintln!("no host c++ compiler: flux kernels not emulated");
            return;
        };
        let mut unit = test_values(7);
        for (nx, ndim) in [([6, 1, 1], 1), ([6, 4, 1], 2), ([4, 4, 4], 3)] {
            let shape = IndexShape::new(nx, 2, ndim).unwrap();
            let (_, nb) = one_refined(ndim, 1);
            let slots = [0..1, 1..3];
            let rc = flux_channels(&nb, &[0, 1], 0);
            let faces = |list: &[crate::channel::Channel], sending: bool| {
                let mut at = 0;
                let mut out = Vec::new();
                for c in list {
                    let gid = if sending {
                        c.key.sender
                    } else {
                        c.key.receiver
                    };
                    let s = slots[c.key.var].clone();
                    let f = FluxFace::of_channel(c, sending, &shape, gid, s, at).unwrap();
                    at = f.buf.end;
                    out.push(f);
                }
                out
            };
            let (send, recv) = (faces(&rc.send, true), faces(&rc.recv, false));
            assert!(send.len() >= 2 && send.len() == recv.len(), "{ndim}-D");
            let mut fd = FluxData::with_shape(&shape, nb.len(), 3);
            for d in 0..ndim {
                for b in 0..nb.len() {
                    for s in 0..3 {
                        fd.flux_mut(b, s, d).iter_mut().for_each(|x| *x = unit());
                    }
                }
            }
            let geom = FluxGeom {
                ndim,
                n: shape.nx(),
                nslots: 3,
                nblocks: nb.len(),
            };
            // The device layout of one direction: the host's slot arrays of it in order.
            let arrays = |fd: &FluxData| -> Vec<Vec<f64>> {
                (0..ndim)
                    .map(|d| {
                        let mut v = Vec::new();
                        for b in 0..nb.len() {
                            for s in 0..3 {
                                v.extend_from_slice(fd.flux(b, s, d));
                            }
                        }
                        v
                    })
                    .collect()
            };
            let run = |op: usize, descs: &[HaloDesc], fd: &FluxData, buf: &[f64]| {
                let h = [
                    op,
                    nx[0],
                    nx[1],
                    nx[2],
                    3,
                    nb.len(),
                    ndim,
                    descs.len(),
                    buf.len(),
                    0,
                ];
                let mut input = to_bytes(&h.map(|v| v as f64));
                input.extend(desc_bytes(descs));
                for a in arrays(fd) {
                    input.extend(to_bytes(&a));
                }
                input.extend(to_bytes(buf));
                from_bytes(&emu.run(&input).unwrap())
            };
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();

            // Restriction of every sending face.
            let send_len = send.last().unwrap().buf.end;
            let descs = flux_descs(&send, None).unwrap();
            geom.check(&descs, true, send_len).unwrap();
            let got = run(0, &descs, &fd, &vec![0.0; send_len]);
            let mut want = vec![0.0; send_len];
            fd.restrict(&send, ValuesMut::Host(&mut want)).unwrap();
            assert_eq!(
                bits(&got[got.len() - send_len..]),
                bits(&want),
                "{ndim}-D restrict"
            );

            // Setting the receiving faces but every third from a random buffer.
            let recv_len = recv.last().unwrap().buf.end;
            let buf: Vec<f64> = (0..recv_len).map(|_| unit()).collect();
            let apply: Vec<bool> = (0..recv.len()).map(|i| i % 3 != 1).collect();
            let descs = flux_descs(&recv, Some(&apply)).unwrap();
            geom.check(&descs, false, recv_len).unwrap();
            let got = run(1, &descs, &fd, &buf);
            let mut host = fd.clone();
            host.set(&recv, &apply, Values::Host(&buf)).unwrap();
            assert_ne!(host, fd, "{ndim}-D: setting changed some fluxes");
            let want: Vec<f64> = arrays(&host).concat();
            assert_eq!(
                bits(&got[..got.len() - recv_len]),
                bits(&want),
                "{ndim}-D set"
            );
        }
    }
}
