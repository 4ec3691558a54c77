"""Wide stores: writing and opening datasets of many small variables must cost linear time.

    python benchmarks/wide.py --n 1000 10000

One Dataset of ``n`` small string variables (10 label-like values each, plus one float variable per
ten) is written by every writer: ``to_nczarr`` (NCZarr, pure Zarr v2), ``to_zarr_v3`` in every
layout, ``convert`` (the NCZarr store into a new one), then each kind of store is opened with
``engine="zstrings"``. Prints wall and CPU seconds per row and size and their ratios between the largest and
the smallest size, to compare with the ratio of the sizes (linear: equal; quadratic: its square). Run it on a quiet
machine: the numbers of a shared, loaded one move by 2x between runs.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from xr_zstrings.write.convert import convert
from xr_zstrings.write.nczarr import to_nczarr
from xr_zstrings.write.zarr3 import LAYOUTS, to_zarr_v3


def wide_dataset(n: int) -> xr.Dataset:
    """``n`` string variables of 10 values over one dimension, and a float variable per ten."""
    labels = np.array([f"station-{i:04d}" for i in range(10)], dtype=np.dtypes.StringDType())
    data: dict[str, Any] = {f"s{i:05d}": ("x", labels) for i in range(n)}
    data.update({f"f{i:05d}": ("x", np.arange(10.0) + i) for i in range(0, n, 10)})
    return xr.Dataset(data, attrs={"title": f"{n} variables"})


def _seconds(fn: Callable[[], Any]) -> tuple[float, float]:
    """Wall and CPU seconds of this process (all its threads): the CPU time moves less with the
    load of a shared machine."""
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def rows(n: int, root: Path) -> dict[str, tuple[float, float]]:
    ds = wide_dataset(n)
    out: dict[str, tuple[float, float]] = {}
    nc, z2 = root / f"nc-{n}.zarr", root / f"z2-{n}.zarr"
    out["write to_nczarr (nczarr)"] = _seconds(lambda: to_nczarr(ds, nc))
    out["write to_nczarr (zarr2)"] = _seconds(lambda: to_nczarr(ds, z2, format="zarr2"))
    for layout in LAYOUTS:
        out[f"write to_zarr_v3 ({layout})"] = _seconds(
            lambda layout=layout: to_zarr_v3(ds, root / f"v3-{layout}-{n}.zarr", layout=layout))
    out["write convert (NCZarr -> NCZarr)"] = _seconds(lambda: convert(nc, root / f"conv-{n}.zarr"))
    for label, path in [("NCZarr", nc), ("Zarr v2", z2), ("Zarr v3 vlen-utf8", root / f"v3-vlen-utf8-{n}.zarr")]:
        out[f"open engine='zstrings' ({label})"] = _seconds(
            lambda path=path: xr.open_dataset(path, engine="zstrings").close())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, nargs="+", default=[1000, 10000], help="numbers of string variables")
    args = ap.parse_args()
    sizes = sorted(args.n)
    root = Path(tempfile.mkdtemp(prefix="zstrings-wide-"))
    try:
        results = {n: rows(n, root) for n in sizes}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    lo, hi = sizes[0], sizes[-1]
    head = "".join(f"{f'{n:,} vars wall/cpu':>22}" for n in sizes)
    print(f"{'row':40}{head}   ratio wall/cpu ({hi // lo}x the variables)")
    for name in results[lo]:
        secs = "".join(f"{results[n][name][0]:11.2f}s/{results[n][name][1]:7.2f}s" for n in sizes)
        wall, cpu = (results[hi][name][i] / max(results[lo][name][i], 1e-9) for i in (0, 1))
        print(f"{name:40}{secs}   {wall:6.1f}x / {cpu:5.1f}x")


if __name__ == "__main__":
    main()
