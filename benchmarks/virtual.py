"""Virtual references into icechunk against migrate and a full copy, for strings.

    nice python benchmarks/virtual.py [--size 1.0] [--quick] [--workdir DIR] [--keep]

Two sources of about ``--size`` GB each (half of the bytes a float32 variable, half string variables):

* an NCZarr store written by ``to_nczarr``: ``value`` (time, x) float32 and ``label`` (time,)
  NC_STRING (``|S24``, label-like values, ~20% with multibyte characters);
* a netCDF-4 file written by netCDF4 (netcdf-c): the same ``value`` (chunked, uncompressed: random
  numbers do not compress) and ``label`` as NC_STRING (HDF5 variable-length strings, in the global heap).

For each: ``xr_zstrings.virtualize`` into a new icechunk repository on local storage (and its
commit: the NCZarr store through ``NCZarrParser``, the netCDF-4 file through ``NetCDF4Parser``, whose
NC_STRING chunks are read and stored inline), ``xr_zstrings.migrate`` into a new directory (NCZarr only:
migrate takes Zarr v2 / NCZarr; its chunks are hard links), and a full copy (``to_zarr_v3`` of what
``engine="zstrings"`` / ``engine="netcdf4"`` opens, dask chunks of the source's). Then the time to read
``label`` whole from each result with ``engine="zstrings"`` (and from the source). "bytes written" is
what each made on disk (for migrate: the files that are not hard links to the source's chunks).
Numbers go in docs/performance.md ("Virtual references").
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

STRING_BYTES = 24  # |S24 in the NCZarr store; the netCDF-4 file's strings are the same values
X = 64  # numbers per time step


def _pool(n: int = 50_000, seed: int = 0) -> np.ndarray:
    """Distinct label-like strings (at most 24 UTF-8 bytes), ~20% with multibyte characters."""
    rng = np.random.default_rng(seed)
    out = []
    multibyte = "éüßçø€中文😀"
    for i in range(n):
        s = f"label-{rng.integers(0, 10**6):06d}-{i:07d}"
        if rng.random() < 0.2:
            s = s[:-3] + multibyte[i % len(multibyte)]
        out.append(s)
    return np.array(out, dtype=np.dtypes.StringDType())


def _dataset(size_gb: float) -> xr.Dataset:
    """Half the bytes float32 (time, X), half labels (time,) of up to 24 bytes."""
    steps = max(1000, int(size_gb * 1e9 / 2 / STRING_BYTES))
    rng = np.random.default_rng(1)
    labels = _pool()[rng.integers(0, 50_000, steps)]
    rows = max(1, int(size_gb * 1e9 / 2 / (4 * X)))
    value = rng.random((rows, X), dtype=np.float32)
    return xr.Dataset({"label": ("time", labels), "value": (("row", "x"), value)})


def write_nczarr(ds: xr.Dataset, path: Path) -> None:
    from xr_zstrings import to_nczarr

    ds["label"].encoding["chunks"] = (min(ds.sizes["time"], 1_000_000),)
    ds["value"].encoding["chunks"] = (min(ds.sizes["row"], 65_536), X)
    to_nczarr(ds, path, maxstrlen=STRING_BYTES)


def write_netcdf4(ds: xr.Dataset, path: Path) -> None:
    import netCDF4

    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("time", None)
        nc.createDimension("row", ds.sizes["row"])
        nc.createDimension("x", X)
        label = nc.createVariable("label", str, ("time",), chunksizes=(min(ds.sizes["time"], 1_000_000),))
        value = nc.createVariable("value", "f4", ("row", "x"), chunksizes=(min(ds.sizes["row"], 65_536), X))
        step = 1_000_000
        labels = ds["label"].values
        for i in range(0, labels.size, step):
            part = labels[i:i + step].astype(object)
            label[i:i + part.size] = part
        value[:] = ds["value"].values


def _bytes(path: Path, new_only: bool = False) -> int:
    files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
    return sum(p.stat().st_size for p in files if not new_only or p.stat().st_nlink == 1)


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _virtualize(src: Path, repo_dir: Path) -> Any:
    import icechunk

    import xr_zstrings

    storage = icechunk.local_filesystem_storage(str(repo_dir))
    session = xr_zstrings.virtualize(src, icechunk.Repository.create(storage))
    session.commit("virtual")
    return storage


def _icechunk_store(src: Path, storage: Any) -> Any:
    import icechunk

    from xr_zstrings.virtual import access

    repo = icechunk.Repository.open(storage, authorize_virtual_chunk_access=access(src))
    return repo.readonly_session("main").store


def _full_copy(src: Path, dst: Path, engine: str) -> None:
    from xr_zstrings import to_zarr_v3

    ds = xr.open_dataset(src, engine=engine, chunks={})
    to_zarr_v3(ds, dst, mode="w")


def _read_label(store: Any, engine: str = "zstrings", repeat: int = 3) -> float:
    """The median of ``repeat`` whole reads of ``label`` (open included), after one untimed read."""
    def read() -> int:
        ds = xr.open_dataset(store, engine=engine)
        return int(ds["label"].values.size)

    read()
    return statistics.median(_timed(read)[0] for _ in range(repeat))


def rows_for(kind: str, src: Path, work: Path) -> list[tuple[str, float, int, float]]:
    """(method, seconds, bytes written, seconds to read label) for one source."""
    engine = "zstrings" if kind == "nczarr" else "netcdf4"
    rows = [(f"the source ({engine})", math.nan, 0, _read_label(src, engine))]
    seconds, storage = _timed(lambda: _virtualize(src, work / f"{kind}-repo"))
    rows.append(("virtualize into icechunk", seconds, _bytes(work / f"{kind}-repo"),
                 _read_label(_icechunk_store(src, storage))))
    if kind == "nczarr":
        from xr_zstrings import migrate

        seconds, _ = _timed(lambda: migrate(src, work / "migrated.zarr"))
        rows.append(("migrate (new directory, hard links)", seconds, _bytes(work / "migrated.zarr", new_only=True),
                     _read_label(work / "migrated.zarr")))
    dst = work / f"{kind}-copy.zarr"
    seconds, _ = _timed(lambda: _full_copy(src, dst, engine))
    rows.append(("full copy (to_zarr_v3)", seconds, _bytes(dst), _read_label(dst)))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=float, default=1.0, help="GB per source (default 1)")
    ap.add_argument("--quick", action="store_true", help="a smoke run (--size 0.01)")
    ap.add_argument("--workdir", type=Path, default=None, help="where the sources and results go (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    size = 0.01 if args.quick else args.size
    warnings.simplefilter("ignore")
    work = Path(tempfile.mkdtemp(prefix="zstrings-virtual-", dir=args.workdir))
    try:
        ds = _dataset(size)
        nczarr, nc = work / "source.zarr", work / "source.nc"
        t_nczarr, _ = _timed(lambda: write_nczarr(ds, nczarr))
        t_nc, _ = _timed(lambda: write_netcdf4(ds, nc))
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {ds.sizes['time']:,} labels, "
              f"{ds.sizes['row']:,}x{X} float32")
        print(f"NCZarr store {_bytes(nczarr):,} bytes (written in {t_nczarr:.1f} s); netCDF-4 file {_bytes(nc):,} bytes "
              f"(written in {t_nc:.1f} s)")
        for kind, src in (("nczarr", nczarr), ("netcdf4", nc)):
            print(f"\n| {kind} source | seconds | bytes written | read `label` (s) |\n| --- | ---: | ---: | ---: |")
            for label, seconds, written, read in rows_for(kind, src, work):
                shown = "" if math.isnan(seconds) else f"{seconds:.2f}"
                print(f"| {label} | {shown} | {written:,} | {read:.2f} |")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
