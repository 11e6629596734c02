//! PNG images of a 2-D slice of one variable component (a 3-D mesh is cut at an x3 position),
//! coloured with the viridis map, with every block's outline drawn in black (a colour viridis
//! never takes, so outlines stay visible at any value).
//!
//! Each rank sends, per block, the interior plane the slice crosses (NaN for blocks the slice
//! misses); rank 0 renders.

use super::config::{OutputBlock, PngSlice};
use super::error::OutputError;
use super::gather::on_root;
use super::select::{cell_vars, OutVar};
use super::Snapshot;
use mpi::topology::Communicator;
use plotters::prelude::*;
use plotters::style::colors::colormaps::ViridisRGB;
use starhalo_mesh::field::Fields;
use starhalo_mesh::Mesh;
use std::path::Path;

/// Default image width in pixels.
pub const DEFAULT_WIDTH: u32 = 512;

/// The variable and component named by `name` (a variable, meaning its component 0, or a
/// component name such as `vel_1`).
pub fn find_component(vars: &[OutVar], name: &str) -> Option<(OutVar, usize)> {
    for v in vars {
        if v.name == name {
            return Some((v.clone(), 0));
        }
        if let Some(c) = v.component_names().iter().position(|c| c == name) {
            return Some((v.clone(), c));
        }
    }
    None
}

/// What a PNG output slices: the variable, its component and the x3 position of the cut (0 on
/// a 2-D mesh). Errors name the output block's key; a run checks this at set-up.
pub fn slice_of(
    mesh: &Mesh,
    fields: &Fields,
    block: &OutputBlock,
) -> Result<(OutVar, usize, f64), OutputError> {
    let invalid = |key: &str, value: &str, reason: &str| OutputError::Invalid {
        key: format!("{}/{key}", block.block),
        value: value.to_string(),
        reason: reason.to_string(),
    };
    let cfg = mesh.config();
    let ndim = mesh.ndim();
    if ndim < 2 {
        return Err(invalid(
            "file_type",
            "png",
            "a png slice needs a 2-D or 3-D mesh",
        ));
    }
    let name = block.png_variable.as_deref().unwrap_or_default();
    let (var, comp) = find_component(&cell_vars(fields), name).ok_or_else(|| {
        invalid(
            "variable",
            name,
            "not a cell-centred variable or component name",
        )
    })?;
    let x3 = match block.png_x3 {
        _ if ndim < 3 => 0.0,
        None => 0.5 * (cfg.xmin[2] + cfg.xmax[2]),
        Some(PngSlice::Position(x)) if x >= cfg.xmin[2] && x <= cfg.xmax[2] => x,
        Some(PngSlice::Position(x)) => {
            return Err(invalid("x3", &x.to_string(), "outside the domain along x3"))
        }
        Some(PngSlice::RootIndex(k)) if k < cfg.nx[2] => {
            cfg.xmin[2] + (k as f64 + 0.5) * (cfg.xmax[2] - cfg.xmin[2]) / cfg.nx[2] as f64
        }
        Some(PngSlice::RootIndex(k)) => {
            return Err(invalid(
                "slice",
                &k.to_string(),
                "beyond the root grid along x3",
            ))
        }
    };
    Ok((var, comp, x3))
}

/// Writes the PNG slice `block` asks for, collectively.
pub fn write_png<C: Communicator>(
    comm: &C,
    snap: &Snapshot,
    block: &OutputBlock,
    path: &Path,
) -> Result<(), OutputError> {
    let mesh = snap.mesh;
    let cfg = mesh.config();
    let ndim = mesh.ndim();
    let (var, comp, x3) = slice_of(mesh, snap.fields, block)?;
    let [n1, n2, n3] = cfg.block_nx;
    let nvars = snap.fields.iter().count();
    let g = snap.nghost;
    let lay = snap.layout;
    // The k index (interior) of the plane of block `gid` the slice crosses, if any.
    let plane_of = |gid: usize| -> Option<usize> {
        if ndim < 3 {
            return Some(0);
        }
        let (lo, hi) = mesh.bounds(gid)?;
        let last = hi[2] >= cfg.xmax[2];
        if x3 < lo[2] || x3 > hi[2] || (x3 == hi[2] && !last) {
            return None;
        }
        let k = ((x3 - lo[2]) / (hi[2] - lo[2]) * n3 as f64).floor() as usize;
        Some(k.min(n3 - 1))
    };
    let plane = |b: usize| -> Vec<f64> {
        let Some(k) = plane_of(snap.gids[b]) else {
            return vec![f64::NAN; n1 * n2];
        };
        if !snap.allocated[b * nvars + var.index] {
            return vec![var.default; n1 * n2];
        }
        let block = snap.block(b);
        let kk = if ndim < 3 { 0 } else { k + g };
        let mut out = Vec::with_capacity(n1 * n2);
        for j in 0..n2 {
            let i0 = lay.index_in_block(var.slot + comp, [g, j + g, kk]);
            out.extend_from_slice(&block[i0..i0 + n1]);
        }
        out
    };
    let local = || super::gather::per_block(snap, n1 * n2, plane);
    on_root(comm, snap, n1 * n2, local, |gathered| {
        let png_err = |e: String| OutputError::Png {
            path: path.to_path_buf(),
            message: e,
        };
        let (lx, ly) = (cfg.xmax[0] - cfg.xmin[0], cfg.xmax[1] - cfg.xmin[1]);
        let w = block.png_size.0.unwrap_or(DEFAULT_WIDTH);
        let h = block
            .png_size
            .1
            .unwrap_or_else(|| ((w as f64 * ly / lx).round() as u32).clamp(8, 16384));
        let (lo, hi) = match block.png_range {
            (Some(a), Some(b)) => (a, b),
            (a, b) => {
                let finite = gathered.payload.iter().copied().filter(|x| x.is_finite());
                let (mn, mx) = finite.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
                    (a.min(x), b.max(x))
                });
                let (mn, mx) = if mn > mx { (0.0, 1.0) } else { (mn, mx) };
                let (mn, mx) = (a.unwrap_or(mn), b.unwrap_or(mx));
                if mn < mx {
                    (mn, mx)
                } else {
                    (mn - 0.5, mn + 0.5)
                }
            }
        };
        // Where `v` lies from `lo` to `hi`, in [0, 1], NaN at the low end. Normalised here,
        // not by the colour map, which panics on a range of no width (1e17 ± 0.5 rounds to
        // one value); halved first, so that a range as wide as ±1.7e308 has a finite width.
        let unit = |v: f64| {
            let t = (0.5 * v - 0.5 * lo) / (0.5 * hi - 0.5 * lo);
            if t.is_nan() {
                0.0
            } else {
                t.clamp(0.0, 1.0)
            }
        };
        let px = |x: f64| ((x - cfg.xmin[0]) / lx * w as f64).round() as i32;
        let py = |y: f64| h as i32 - ((y - cfg.xmin[1]) / ly * h as f64).round() as i32;
        // Drawn in memory and written through a temporary file, as every output is.
        let mut rgb = vec![0u8; w as usize * h as usize * 3];
        let area = BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area();
        area.fill(&WHITE).map_err(|e| png_err(e.to_string()))?;
        let mut outlines = Vec::new();
        for gid in 0..gathered.nblocks {
            let values = gathered.block(gid);
            if values.first().is_none_or(|v| v.is_nan()) {
                continue;
            }
            let Some((blo, bhi)) = mesh.bounds(gid) else {
                continue;
            };
            let (dx, dy) = ((bhi[0] - blo[0]) / n1 as f64, (bhi[1] - blo[1]) / n2 as f64);
            for j in 0..n2 {
                for i in 0..n1 {
                    let v = values[j * n1 + i];
                    let c = ViridisRGB::get_color_normalized(unit(v), 0.0, 1.0);
                    let x0 = px(blo[0] + i as f64 * dx);
                    let x1 = px(blo[0] + (i + 1) as f64 * dx);
                    let y0 = py(blo[1] + (j + 1) as f64 * dy);
                    let y1 = py(blo[1] + j as f64 * dy);
                    area.draw(&Rectangle::new([(x0, y0), (x1, y1)], c.filled()))
                        .map_err(|e| png_err(e.to_string()))?;
                }
            }
            // Clamped so the domain's outer edges stay inside the image.
            let (cx, cy) = (
                |x: i32| x.clamp(0, w as i32 - 1),
                |y: i32| y.clamp(0, h as i32 - 1),
            );
            outlines.push([
                (cx(px(blo[0])), cy(py(bhi[1]))),
                (cx(px(bhi[0])), cy(py(blo[1]))),
            ]);
        }
        // Outlines last, so no cell paints over a neighbour's edge.
        for r in outlines {
            area.draw(&Rectangle::new(r, BLACK.stroke_width(1)))
                .map_err(|e| png_err(e.to_string()))?;
        }
        area.present().map_err(|e| png_err(e.to_string()))?;
        drop(area);
        super::write_atomically(path, |out| {
            let mut png = png::Encoder::new(out, w, h);
            png.set_color(png::ColorType::Rgb);
            png.set_depth(png::BitDepth::Eight);
            // Each row's best filter, as image's encoder chooses: 5 to 10 times smaller files.
            png.set_adaptive_filter(png::AdaptiveFilterType::Adaptive);
            let mut png = png.write_header().map_err(std::io::Error::other)?;
            png.write_image_data(&rgb).map_err(std::io::Error::other)?;
            png.finish().map_err(std::io::Error::other)
        })
        .map_err(|cause| OutputError::Io {
            path: path.to_path_buf(),
            cause,
        })
    })?;
    Ok(())
}
