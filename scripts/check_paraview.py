#!/usr/bin/env pvpython
"""Opens a .phdf file's .xdmf index with ParaView's XDMF reader and checks what ParaView
makes of it.

Usage: pvpython check_paraview.py FILE.xdmf [--linear A0,AX,AY,AZ]
(exit 0 when every check passes, 1 with the failures listed)

- ParaView sees one rectilinear grid per block of the .phdf file beside it, in the file's
  order, and each block's node coordinates are the file's Locations for that block;
- each block carries one cell array per output component (a variable's name when it has one
  component, else its component names, as Parthenon's index names them), and every value is
  the file's for that block and cell, bit for bit;
- with --linear, every cell's value equals A0 + AX x + AY y + AZ z at the cell centre
  ParaView computes from the grid, so no axis is swapped or reversed in ParaView's reading.

Run it with ParaView's interpreter (Debian: python3-paraview), whose Python has h5py.
"""
import argparse
import sys

import h5py
import numpy as np
from paraview import servermanager
from paraview.simple import XDMFReader
from vtkmodules.util.numpy_support import vtk_to_numpy
from vtkmodules.vtkCommonDataModel import vtkCompositeDataSet


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--linear")
    a = ap.parse_args()
    bad = []

    def need(cond, what):
        if not cond:
            bad.append(what)

    phdf = a.file[: -len(".xdmf")] if a.file.endswith(".xdmf") else a.file
    with h5py.File(phdf, "r") as f:
        info = f["Info"].attrs
        nb = int(info["NumMeshBlocks"])
        loc = [f["Locations"][k][:] for k in ("x", "y", "z")]
        names = [str(n) for n in info["OutputDatasetNames"]]
        ncomp = [int(n) for n in info["NumComponents"]]
        labels = [str(n) for n in info["ComponentNames"]]
        data = {n: f[n][:] for n in names}

    # The cell arrays Parthenon's index gives each block: (array name, variable, component).
    arrays, at = [], 0
    for n, c in zip(names, ncomp):
        arrays += [(n if c == 1 else labels[at + k], n, k) for k in range(c)]
        at += c

    reader = XDMFReader(FileNames=[a.file])
    reader.UpdatePipeline()
    mesh = servermanager.Fetch(reader)
    got = mesh.GetNumberOfBlocks()
    need(got == nb, f"ParaView: {got} blocks, file {nb}")
    coeffs = None
    if a.linear:
        coeffs = [float(v) for v in a.linear.split(",")] + [0.0] * 4
    cells = 0
    for b in range(min(got, nb)):
        grid = mesh.GetBlock(b)
        name = mesh.GetMetaData(b).Get(vtkCompositeDataSet.NAME())
        if grid is None or grid.GetClassName() != "vtkRectilinearGrid":
            bad.append(f"block {b}: ParaView made {grid and grid.GetClassName()}")
            continue
        need(name == str(b), f"block {b}: ParaView names it {name!r}")
        axes = [grid.GetXCoordinates(), grid.GetYCoordinates(), grid.GetZCoordinates()]
        axes = [vtk_to_numpy(c) for c in axes]
        for k, (c, want) in enumerate(zip(axes, loc)):
            need(np.array_equal(c, want[b]), f"block {b}: axis {'xyz'[k]} at {c}, file {want[b]}")
        shape = tuple(len(c) - 1 for c in reversed(axes))  # (k, j, i)
        cells += int(np.prod(shape))
        cd = grid.GetCellData()
        seen = sorted(cd.GetArrayName(i) for i in range(cd.GetNumberOfArrays()))
        need(seen == sorted(n for n, _, _ in arrays), f"block {b}: arrays {seen}, file {arrays}")
        if coeffs:
            # ParaView's cell centres: midpoints of the node coordinates it read.
            mid = [0.5 * (c[1:] + c[:-1]) for c in axes]
            z, y, x = np.meshgrid(mid[2], mid[1], mid[0], indexing="ij")
            want_linear = coeffs[0] + coeffs[1] * x + coeffs[2] * y + coeffs[3] * z
        for label, var, k in arrays:
            arr = cd.GetArray(label)
            if arr is None:
                continue
            vals = vtk_to_numpy(arr).reshape(shape)
            want = data[var][b].reshape((-1,) + data[var].shape[-3:])[k]
            if vals.shape != want.shape or not np.array_equal(vals, want, equal_nan=True):
                bad.append(f"block {b}: {label} differs from the file")
            if coeffs:
                err = float(np.abs(vals - want_linear).max(initial=0.0))
                scale = float(np.abs(want_linear).max(initial=1.0))
                need(err <= 1e-12 * scale,
                     f"block {b}: {label} off the linear profile by {err!r} at ParaView's centres")

    for msg in bad:
        print(f"{a.file}: {msg}", file=sys.stderr)
    if not bad:
        print(f"{a.file}: ok ({nb} blocks, {cells} cells, {len(arrays)} arrays)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
