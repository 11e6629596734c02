#!/usr/bin/python3
"""Checks .phdf/.rhdf files against the layout Parthenon's readers need, with h5py.

Usage: check_phdf.py FILE...   (exit 0 when every file passes, 1 with the problems listed)
       check_phdf.py --same A B  (exit 0 when A and B hold the same mesh and data as
                                  Parthenon's phdf_diff.py compares files, 1 with the
                                  differences listed)

What it checks (the Parthenon output format, version 4): the /Input, /Info, /Params,
/Blocks, coordinate and variable datasets with their types and shapes; scalar versus 1-D
attributes; variable-length strings; the block count agreeing everywhere; the sparse
datasets when sparse fields exist; the level column of the blocks' table against /Levels
(phdf.py reads levels there), cell centres midway between faces, and each block's first face
at its /Blocks/xmin. A .phdf file holds no /Info attribute or /Blocks dataset beyond
Parthenon's (phdf_diff.py compares all it finds, so one that differs from run to run, such
as a checksum over the wall time, would make any two runs differ); neither does a restart
file, whose seal lives in the HDF5 user block.
"""
import sys

import h5py
import numpy as np

INFO_INT = ["OutputFormatVersion", "NCycle", "NumDims", "NumMeshBlocks", "MaxLevel",
            "IncludesGhost", "NGhost", "NBNew", "NBDel", "RootLevel", "Refine", "Multilevel"]
INFO_REAL = ["Time", "dt", "WallTime"]
ALWAYS_1D = ["NumComponents", "ComponentNames", "OutputDatasetNames"]
INFO_OTHER = ["Coordinates", "BlocksPerPE", "MeshBlockSize", "RootGridDomain", "RootGridSize",
              "BoundaryConditions", "NumComponents", "ComponentNames", "OutputDatasetNames"]
BLOCKS = ["xmin", "loc.lx123", "loc.level-gid-lid-cnghost-gflag", "derefinement_count"]


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
        table = f["Blocks/loc.level-gid-lid-cnghost-gflag"][:]
        need(np.array_equal(table[:, 0], levels + int(info["RootLevel"])),
             "the blocks' level column is not Levels + RootLevel")
        ng = int(info["NGhost"]) if int(info["IncludesGhost"]) else 0
        xmin = f["Blocks/xmin"][:]
        for d, axis in enumerate("xyz"[:int(info["NumDims"])]):
            faces = f["Locations/" + axis][:]
            need(np.allclose(f["VolumeLocations/" + axis][:], 0.5 * (faces[:, 1:] + faces[:, :-1]),
                             rtol=1e-14, atol=0),
                 f"VolumeLocations/{axis} are not midway between Locations/{axis}")
            need(np.allclose(faces[:, ng], xmin[:, d], rtol=1e-14, atol=0),
                 f"Locations/{axis} do not start at Blocks/xmin")
        known = {"Info": INFO_INT + INFO_REAL + INFO_OTHER, "Blocks": BLOCKS}
        sealed = 512 if path.endswith(".rhdf") else 0
        need(f.userblock_size == sealed,
             f"a user block of {f.userblock_size} bytes; expected {sealed}")
        extra = sorted(set(info) - set(known["Info"]))
        need(not extra, f"/Info attributes {extra} beyond Parthenon's")
        extra = sorted(set(f["Blocks"]) - set(known["Blocks"]))
        need(not extra, f"/Blocks datasets {extra} beyond Parthenon's")

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


# What phdf_diff.py leaves out: attributes that differ between runs of one problem by design,
# and the blocks' table, which holds ranks' local ids.
DIFF_SKIPS_INFO = ["Time", "BlocksPerPE", "WallTime", "OutputFormatVersion"]
DIFF_SKIPS_BLOCKS = ["loc.level-gid-lid-cnghost-gflag"]


def same(a, b):
    """The differences phdf_diff.py would find between files a and b, with no tolerance: every
    /Info attribute but DIFF_SKIPS_INFO, every /Params attribute, every /Blocks dataset but
    DIFF_SKIPS_BLOCKS, and every other top-level dataset (coordinates, levels, variables)."""
    diff = []
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        for group, skip in (("Info", DIFF_SKIPS_INFO), ("Params", [])):
            ka = sorted(set(fa[group].attrs) - set(skip))
            kb = sorted(set(fb[group].attrs) - set(skip))
            if ka != kb:
                diff.append(f"/{group} attributes {ka} against {kb}")
                continue
            for k in ka:
                if not np.array_equal(np.asarray(fa[group].attrs[k]),
                                      np.asarray(fb[group].attrs[k])):
                    diff.append(f"/{group}/{k} differs")

        def datasets(f):
            names = []
            f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
            return sorted(n for n in names if n.split("/")[-1] not in DIFF_SKIPS_BLOCKS)

        na, nb = datasets(fa), datasets(fb)
        if na != nb:
            diff.append(f"datasets {na} against {nb}")
        for n in sorted(set(na) & set(nb)):
            if not np.array_equal(fa[n][...], fb[n][...], equal_nan=fa[n].dtype.kind == "f"):
                diff.append(f"/{n} differs")
    return diff


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    if sys.argv[1] == "--same":
        if len(sys.argv) != 4:
            print(__doc__.strip().splitlines()[3], file=sys.stderr)
            return 2
        diff = same(sys.argv[2], sys.argv[3])
        for d in diff:
            print(f"{sys.argv[2]} vs {sys.argv[3]}: {d}")
        if not diff:
            print(f"{sys.argv[2]} vs {sys.argv[3]}: same")
        return 1 if diff else 0
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
