#!/usr/bin/python3
"""Checks .phdf/.rhdf files against the layout Parthenon's readers need, with h5py.

Usage: check_phdf.py FILE...   (exit 0 when every file passes, 1 with the problems listed)

What it checks (the Parthenon output format, version 4): the /Input, /Info, /Params,
/Blocks, coordinate and variable datasets with their types and shapes; scalar versus 1-D
attributes; variable-length strings; the block count agreeing everywhere; the sparse
datasets when sparse fields exist.
"""
import sys

import h5py
import numpy as np

INFO_INT = ["OutputFormatVersion", "NCycle", "NumDims", "NumMeshBlocks", "MaxLevel",
            "IncludesGhost", "NGhost", "NBNew", "NBDel", "RootLevel", "Refine", "Multilevel"]
INFO_REAL = ["Time", "dt", "WallTime"]
ALWAYS_1D = ["NumComponents", "ComponentNames", "OutputDatasetNames"]


def check(path):
    bad = []

    def need(cond, what):
        if not cond:
            bad.append(what)
        return cond

    def vlen_str(obj, name):
        # Variable-length strings read back as str, fixed-length ones as bytes (yt breaks).
        v = obj.attrs[name]
        items = v.tolist() if isinstance(v, np.ndarray) else [v]
        need(all(isinstance(x, str) for x in items), f"attribute {name} is not variable-length strings")
        return items

    with h5py.File(path, "r") as f:
        need("Input" in f and "File" in f["Input"].attrs, "/Input attribute File missing")
        if "Input" in f and "File" in f["Input"].attrs:
            vlen_str(f["Input"], "File")
        need("Params" in f, "/Params group missing")
        if not need("Info" in f, "/Info missing"):
            return bad
        info = f["Info"].attrs
        for k in INFO_INT + INFO_REAL + ["Coordinates", "BlocksPerPE", "MeshBlockSize",
                                         "RootGridDomain", "RootGridSize", "BoundaryConditions"]:
            need(k in info, f"/Info attribute {k} missing")
        if bad:
            return bad
        for k in INFO_INT:
            v = info[k]
            need(np.ndim(v) == 0 and np.issubdtype(np.asarray(v).dtype, np.integer),
                 f"/Info {k} is not a scalar integer")
        for k in INFO_REAL:
            need(np.ndim(info[k]) == 0 and np.asarray(info[k]).dtype == np.float64,
                 f"/Info {k} is not a scalar float64")
        need(info["OutputFormatVersion"] == 4, "OutputFormatVersion is not 4")
        need(vlen_str(f["Info"], "Coordinates") == ["UniformCartesian"], "Coordinates")
        need(len(vlen_str(f["Info"], "BoundaryConditions")) == 6, "BoundaryConditions needs 6")
        need(np.shape(info["MeshBlockSize"]) == (3,), "MeshBlockSize is not int[3]")
        need(np.shape(info["RootGridSize"]) == (3,), "RootGridSize is not int[3]")
        need(np.shape(info["RootGridDomain"]) == (9,), "RootGridDomain is not Real[9]")
        for k in ALWAYS_1D:
            need(k in info and np.ndim(info[k]) == 1, f"/Info {k} is not 1-D")
        if bad:
            return bad
        need(np.asarray(info["NumComponents"]).dtype == np.uint64, "NumComponents is not uint64")
        names = vlen_str(f["Info"], "OutputDatasetNames")
        comps = vlen_str(f["Info"], "ComponentNames")
        need(names == sorted(names), "OutputDatasetNames are not alphabetical")
        need(len(names) == len(info["NumComponents"]), "one NumComponents per variable")
        need(len(comps) == int(np.sum(info["NumComponents"])), "one ComponentName per component")

        nb = int(info["NumMeshBlocks"])
        nd = int(info["NumDims"])
        need(int(np.sum(info["BlocksPerPE"])) == nb, "BlocksPerPE does not sum to NumMeshBlocks")
        n1, n2, n3 = (int(x) for x in info["MeshBlockSize"])
        shapes = {
            "Blocks/xmin": (nb, nd),
            "Blocks/loc.lx123": (nb, 3),
            "Blocks/loc.level-gid-lid-cnghost-gflag": (nb, 5),
            "Blocks/derefinement_count": (nb, 1),
            "Locations/x": (nb, n1 + 1), "Locations/y": (nb, n2 + 1), "Locations/z": (nb, n3 + 1),
            "VolumeLocations/x": (nb, n1), "VolumeLocations/y": (nb, n2),
            "VolumeLocations/z": (nb, n3),
            "Levels": (nb,), "LogicalLocations": (nb, 3),
        }
        for name, shape in shapes.items():
            if need(name in f, f"dataset /{name} missing"):
                need(f[name].shape == shape, f"/{name} has shape {f[name].shape}, expected {shape}")
        if bad:
            return bad
        need(f["Blocks/loc.lx123"].dtype == np.int64, "loc.lx123 is not int64")
        need(f["Levels"].dtype == np.int64, "Levels is not int64")
        need(f["LogicalLocations"].dtype == np.int64, "LogicalLocations is not int64")
        need(f["Blocks/xmin"].dtype == np.float64, "xmin is not float64")
        gids = f["Blocks/loc.level-gid-lid-cnghost-gflag"][:, 1]
        need(list(gids) == list(range(nb)), "blocks are not in gid order")
        levels = f["Levels"][:]
        need(int(info["MaxLevel"]) == int(levels.max(initial=0)), "MaxLevel is not the finest level")
        need(np.array_equal(f["LogicalLocations"][:], f["Blocks/loc.lx123"][:]),
             "LogicalLocations differ from loc.lx123")
        x = f["Locations/x"][:]
        need(bool(np.all(np.diff(x, axis=1) > 0)), "face coordinates do not increase")

        for name, nc in zip(names, info["NumComponents"]):
            if not need(name in f, f"variable dataset /{name} missing"):
                continue
            d = f[name]
            need(d.ndim == 5 and d.shape[0] == nb and d.shape[1] == int(nc),
                 f"/{name} has shape {d.shape}, expected (NB, ncomp, n3, n2, n1)")
            if "TopologicalLocation" in d.attrs:
                loc = vlen_str(d, "TopologicalLocation")
                if loc == ["Cell"]:
                    need(d.shape[2:] == (n3, n2, n1), f"/{name} cell shape {d.shape[2:]}")
            else:
                need(False, f"/{name} lacks TopologicalLocation")
            need(d.dtype in (np.float64, np.float32), f"/{name} is not real")
            need(bool(np.all(np.isfinite(d[...]))), f"/{name} holds non-finite values")

        if "SparseInfo" in f:
            si = f["SparseInfo"]
            if need("SparseFields" in si.attrs, "/SparseInfo lacks SparseFields"):
                ns = len(vlen_str(si, "SparseFields"))
                need(si.shape == (nb, ns), f"/SparseInfo shape {si.shape}")
                need(si.dtype == np.bool_, "/SparseInfo is not bool")
                need("SparseDeallocCount" in f and f["SparseDeallocCount"].shape == (nb, ns),
                     "/SparseDeallocCount missing or misshaped")
    return bad


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    failed = 0
    for path in sys.argv[1:]:
        try:
            bad = check(path)
        except (OSError, KeyError) as e:
            bad = [f"cannot read: {e}"]
        if bad:
            failed += 1
            print(f"{path}: " + "; ".join(bad))
        else:
            print(f"{path}: ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
