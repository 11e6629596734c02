#!/usr/bin/env python3
"""Opens a .phdf file with yt's Parthenon reader and checks what yt makes of it.

Usage: check_yt.py FILE [--hst HST] [--linear A0,AX,AY,AZ]
(exit 0 when every check passes, 1 with the failures listed)

- yt's mesh is the file's: dimensions, domain, time, block count, finest level, and the
  cells of its grids tile the domain (their volumes sum to the domain's, so no block is
  lost or counted twice across levels);
- with --hst, each variable's volume integral as yt computes it equals the history file's
  integral at the file's time (the history is written from the solver's own arrays);
- with --linear, every cell's value of every variable equals A0 + AX x + AY y + AZ z at the
  cell centre yt gives it, so no axis is swapped or reversed in yt's reading.

Run it with an interpreter that has yt 4.2 or newer (scripts/setup makes target/yt-venv).
"""
import argparse
import sys

import h5py
import numpy as np
import yt

yt.set_log_level("error")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--hst")
    ap.add_argument("--linear")
    a = ap.parse_args()
    bad = []

    def need(cond, what):
        if not cond:
            bad.append(what)

    with h5py.File(a.file, "r") as f:
        info = f["Info"].attrs
        nb = int(info["NumMeshBlocks"])
        ndim = int(info["NumDims"])
        dom = np.asarray(info["RootGridDomain"], dtype=float).reshape(3, 3)  # min, max, ratio
        size = np.asarray(info["RootGridSize"], dtype=int)
        max_level = int(info["MaxLevel"])
        time = float(info["Time"])
        names = [str(n) for n in info["OutputDatasetNames"]]

    ds = yt.load(a.file)
    need(ds.dimensionality == ndim, f"yt: {ds.dimensionality} dimensions, file {ndim}")
    need(list(ds.domain_dimensions[:ndim]) == list(size[:ndim]),
         f"yt: domain dimensions {ds.domain_dimensions}, file {size}")
    left, right = ds.domain_left_edge.d, ds.domain_right_edge.d
    need(np.allclose(left[:ndim], dom[:ndim, 0]) and np.allclose(right[:ndim], dom[:ndim, 1]),
         f"yt: domain {left}..{right}, file {dom[:, 0]}..{dom[:, 1]}")
    need(abs(float(ds.current_time.d) - time) <= 1e-14 * max(1.0, abs(time)),
         f"yt: time {ds.current_time}, file {time}")
    need(ds.index.num_grids == nb, f"yt: {ds.index.num_grids} grids, file {nb} blocks")
    need(ds.index.max_level == max_level, f"yt: finest level {ds.index.max_level}, file {max_level}")
    fields = [("parthenon", n) for n in names]
    need(all(fl in ds.field_list for fl in fields), f"yt: fields {ds.field_list}, file {names}")

    ad = ds.all_data()
    vol = ad["index", "cell_volume"].d
    domain = float(np.prod((right - left)[:ndim]))
    need(abs(vol.sum() - domain) <= 1e-12 * domain,
         f"yt: cell volumes sum to {vol.sum()!r}, the domain is {domain!r}")

    if a.hst:
        hist = history(a.hst)
        row = min(hist, key=lambda r: abs(r["time"] - time), default=None)
        if row is None or abs(row["time"] - time) > 1e-12 * max(1.0, abs(time)):
            bad.append(f"{a.hst} has no line at time {time}")
        else:
            for n in names:
                if n not in row:
                    continue
                got = float((ad["parthenon", n].d * vol).sum())
                need(abs(got - row[n]) <= 1e-12 * max(1.0, abs(row[n])),
                     f"{n}: yt's integral {got!r}, history {row[n]!r}")

    if a.linear:
        c = [float(v) for v in a.linear.split(",")]
        c += [0.0] * (4 - len(c))
        x, y, z = (ad["index", k].d for k in ("x", "y", "z"))
        want = c[0] + c[1] * x + c[2] * (y if ndim > 1 else 0) + c[3] * (z if ndim > 2 else 0)
        scale = float(np.abs(want).max(initial=1.0))
        for n in names:
            err = float(np.abs(ad["parthenon", n].d - want).max(initial=0.0))
            need(err <= 1e-12 * scale, f"{n}: off the linear profile by {err!r} at yt's centres")

    for b in bad:
        print(f"{a.file}: {b}", file=sys.stderr)
    if not bad:
        print(f"{a.file}: ok ({nb} blocks, {len(vol)} cells, levels 0-{max_level})")
    return 1 if bad else 0


def history(path):
    """The rows of a history file, keyed by column name (`# [k]=name` header)."""
    cols, rows = [], []
    with open(path) as h:
        for line in h:
            if line.startswith("#"):
                if "[1]=" in line:
                    cols = [w.split("=", 1)[1] for w in line[1:].split()]
                continue
            if line.strip():
                rows.append(dict(zip(cols, (float(v) for v in line.split()))))
    return rows


if __name__ == "__main__":
    sys.exit(main())
