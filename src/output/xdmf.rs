//! The XDMF index of a `.phdf` file, which ParaView and VisIt open: a collection of one
//! rectilinear grid per block whose coordinates and cell data are hyperslabs of the `.phdf`
//! datasets (the layout Parthenon writes).

use super::select::{Extent, OutVar};
use super::Snapshot;
use std::io::Write;
use std::path::Path;

/// Escapes the five XML special characters in attribute values and text.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// Writes the XDMF text for the `.phdf` file at `phdf` (referenced by its file name, so the
/// pair can be moved together) to `x`.
pub fn write_xdmf(
    x: &mut dyn Write,
    phdf: &Path,
    snap: &Snapshot,
    vars: &[OutVar],
    ext: &Extent,
    single: bool,
) -> std::io::Result<()> {
    let file = esc(&phdf
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default());
    let nb = snap.mesh.forest().len();
    let [n1, n2, n3] = ext.n;
    let prec = if single { 4 } else { 8 };
    writeln!(x, "<?xml version=\"1.0\" ?>")?;
    writeln!(x, "<!DOCTYPE Xdmf SYSTEM \"Xdmf.dtd\">")?;
    writeln!(x, "<Xdmf Version=\"3.0\">")?;
    writeln!(
        x,
        "<Information Name=\"TimeVaryingMetaData\" Value=\"True\"/>"
    )?;
    writeln!(x, "  <Domain>")?;
    writeln!(x, "  <Grid Name=\"Mesh\" GridType=\"Collection\">")?;
    writeln!(
        x,
        "    <Information Name=\"Cycle\" Value=\"{}\"/>",
        snap.cycle
    )?;
    writeln!(x, "    <Time Value=\"{:e}\"/>", snap.time)?;
    for b in 0..nb {
        writeln!(x, "    <Grid GridType=\"Uniform\" Name=\"{b}\">")?;
        writeln!(
            x,
            "      <Topology TopologyType=\"3DRectMesh\" Dimensions=\"{} {} {}\"/>",
            n3 + 1,
            n2 + 1,
            n1 + 1
        )?;
        writeln!(x, "      <Geometry GeometryType=\"VXVYVZ\">")?;
        for (axis, n) in [("x", n1), ("y", n2), ("z", n3)] {
            let m = n + 1;
            writeln!(
                x,
                "        <DataItem ItemType=\"HyperSlab\" Dimensions=\"{m}\">"
            )?;
            writeln!(x,
                "          <DataItem Dimensions=\"3 2\" NumberType=\"Int\" Format=\"XML\">{b} 0 1 1 1 {m}</DataItem>"
            )?;
            writeln!(x,
                "          <DataItem Format=\"HDF\" Dimensions=\"{nb} {m}\" Name=\"{axis}\" NumberType=\"Float\" Precision=\"8\">{file}:/Locations/{axis}</DataItem>"
            )?;
            writeln!(x, "        </DataItem>")?;
        }
        writeln!(x, "      </Geometry>")?;
        for v in vars {
            let name = esc(&v.name);
            for (c, comp) in v.component_names().iter().enumerate() {
                writeln!(
                    x,
                    "      <Attribute Name=\"{}\" Center=\"Cell\">",
                    esc(comp)
                )?;
                writeln!(
                    x,
                    "        <DataItem ItemType=\"HyperSlab\" Dimensions=\"{n3} {n2} {n1}\">"
                )?;
                writeln!(x,
                    "          <DataItem Dimensions=\"3 5\" NumberType=\"Int\" Format=\"XML\">{b} {c} 0 0 0 1 1 1 1 1 1 1 {n3} {n2} {n1}</DataItem>"
                )?;
                writeln!(x,
                    "          <DataItem Format=\"HDF\" Dimensions=\"{nb} {} {n3} {n2} {n1}\" Name=\"{name}\" NumberType=\"Float\" Precision=\"{prec}\">{file}:/{name}</DataItem>",
                    v.ncomp
                )?;
                writeln!(x, "        </DataItem>")?;
                writeln!(x, "      </Attribute>")?;
            }
        }
        writeln!(x, "    </Grid>")?;
    }
    writeln!(x, "  </Grid>")?;
    writeln!(x, "  </Domain>")?;
    writeln!(x, "</Xdmf>")
}
