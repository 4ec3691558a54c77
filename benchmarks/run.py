"""Side-by-side benchmark: xr_zstrings vs the peers on the same data, in one run.

    python benchmarks/run.py --n 1000000 --repeat 3

Generates its data with the real peers (netcdf-c through netCDF4 for NCZarr, zarr-python for
Zarr v3), times full materialisation of one string variable per layout, and prints throughput
(million strings per second, median of --repeat runs), the ratio to each peer and the peak memory
traced while loading relative to the size of the result.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import netCDF4
import numpy as np
import xarray as xr
import zarr

sys.path.insert(0, str(Path(__file__).parent))
from _data import make_strings  # noqa: E402


def _time(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def _peak(fn: Callable[[], Any]) -> tuple[int, Any]:
    tracemalloc.start()
    try:
        out = fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, out


def _nbytes(values: np.ndarray) -> int:
    if values.dtype.kind == "T":  # StringDType: 16-byte slots plus arena for long strings
        return values.size * 16 + int(sum(len(s.encode()) for s in values.tolist() if len(s.encode()) > 15))
    return values.nbytes


def write_nczarr(path: Path, strings: list[str], compression: str | None) -> str:
    url = f"file://{path}#mode=nczarr,file"
    ds = netCDF4.Dataset(url, "w")
    ds.createDimension("x", len(strings))
    kw = {"compression": compression} if compression else {}
    v = ds.createVariable("s", str, ("x",), chunksizes=(min(len(strings), 100_000),), **kw)
    v.setncattr("_nczarr_maxstrlen", 48)
    v[:] = np.array(strings, dtype=object)
    ds.close()
    return url


def write_zarr_v3(path: Path, strings: list[str], compressor: Any) -> None:
    ds = xr.Dataset({"s": ("x", np.array(strings, dtype=object))})
    enc = {"s": {"chunks": (min(len(strings), 100_000),), "compressors": compressor}}
    ds.to_zarr(path, zarr_format=3, encoding=enc, consolidated=False, mode="w")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1_000_000, help="number of strings (default 1,000,000)")
    p.add_argument("--repeat", type=int, default=3, help="runs per measurement; the median is shown")
    args = p.parse_args(argv)
    strings = make_strings(args.n)
    expected = np.array(strings, dtype=object)
    rows: list[tuple[str, str, float, float | None, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        tmpd = Path(tmp)
        for comp in (None, "zstd"):
            label = f"NCZarr |S48 ({comp or 'raw'})"
            store = tmpd / f"nc_{comp}.zarr"
            url = write_nczarr(store, strings, comp)

            def ours(store: Path = store) -> np.ndarray:
                return xr.open_dataset(store, engine="zstrings")["s"].values

            def nc_engine(url: str = url) -> np.ndarray:
                return xr.open_dataset(url, engine="netcdf4")["s"].values

            def nc_raw(url: str = url) -> np.ndarray:
                with netCDF4.Dataset(url, "r") as nc:
                    return nc["s"][:]

            t_ours, got = _time(ours, args.repeat)
            assert got.tolist() == strings, "zstrings read differs from what was written"
            peak, _ = _peak(ours)
            t_eng, ref = _time(nc_engine, args.repeat)
            assert list(ref) == list(expected)
            t_raw, _ = _time(nc_raw, args.repeat)
            mem = f"{peak / _nbytes(got):.2f}x result"
            rows.append((label, "xr_zstrings", args.n / t_ours / 1e6, None, mem))
            rows.append((label, "xarray engine=netcdf4", args.n / t_eng / 1e6, t_eng / t_ours, ""))
            rows.append((label, "netCDF4 Dataset[var][:]", args.n / t_raw / 1e6, t_raw / t_ours, ""))
        for comp_name, compressor in (("raw", None), ("zstd", zarr.codecs.ZstdCodec(level=3))):
            label = f"Zarr v3 vlen-utf8 ({comp_name})"
            store = tmpd / f"v3_{comp_name}.zarr"
            write_zarr_v3(store, strings, compressor)

            def ours3(store: Path = store) -> np.ndarray:
                return xr.open_dataset(store, engine="zstrings")["s"].values

            def zarr_engine(store: Path = store) -> np.ndarray:
                return xr.open_dataset(store, engine="zarr", consolidated=False)["s"].values

            try:
                t_ours, got = _time(ours3, args.repeat)
                assert got.tolist() == strings
                peak, _ = _peak(ours3)
                mem = f"{peak / _nbytes(got):.2f}x result"
                ours_rate: float | None = args.n / t_ours / 1e6
            except Exception as e:  # the v3 reader may not be there yet: say so, keep going
                t_ours, ours_rate, mem = float("nan"), None, f"not available: {type(e).__name__}: {e}"[:60]
            t_z, ref = _time(zarr_engine, args.repeat)
            assert list(ref) == strings
            rows.append((label, "xr_zstrings", ours_rate or float("nan"), None, mem))
            rows.append((label, "xarray engine=zarr", args.n / t_z / 1e6, t_z / t_ours, ""))
        # the other v3 layouts, written by our encoder; zarr-python reads none of them, so its
        # vlen-utf8 read of the same strings is the reference
        ref_store = tmpd / "v3_raw.zarr"
        t_ref, _ = _time(lambda: xr.open_dataset(ref_store, engine="zarr", consolidated=False)["s"].values,
                         args.repeat)
        for layout in ("zarrs.vlen", "arrow", "arrow-large"):
            from xr_zstrings.reader import read_arrow
            from xr_zstrings.writer_v3 import to_zarr_v3

            store = tmpd / f"layout_{layout}.zarr"
            src = xr.Dataset({"s": ("x", np.array(strings, dtype=object))})
            src["s"].encoding["chunks"] = (min(len(strings), 100_000),)
            to_zarr_v3(src, store, layout=layout)  # type: ignore[arg-type]
            t_ours, got = _time(lambda store=store: xr.open_dataset(store, engine="zstrings")["s"].values,
                                args.repeat)
            assert got.tolist() == strings
            peak, _ = _peak(lambda store=store: xr.open_dataset(store, engine="zstrings")["s"].values)
            rows.append((f"Zarr v3 {layout}", "xr_zstrings", args.n / t_ours / 1e6, None,
                         f"{peak / _nbytes(got):.2f}x result"))
            rows.append((f"Zarr v3 {layout}", "engine=zarr on vlen-utf8", args.n / t_ref / 1e6,
                         t_ref / t_ours, ""))
            t_arrow, arr = _time(lambda store=store: read_arrow(store, "s"), args.repeat)
            assert arr.to_pylist()[:5] == strings[:5]
            rows.append((f"Zarr v3 {layout}", "read_arrow (pyarrow)", args.n / t_arrow / 1e6,
                         t_ref / t_arrow, "vs engine=zarr"))
    print(f"\n{args.n:,} strings (4-40 chars, 20% multibyte), median of {args.repeat} runs\n")
    print(f"{'layout':28} {'reader':26} {'M strings/s':>12} {'zstrings is':>12}  peak memory")
    for layout, reader, rate, ratio, mem in rows:
        r = "" if ratio is None else f"{ratio:10.1f}x"
        print(f"{layout:28} {reader:26} {rate:12.2f} {r:>12}  {mem}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
