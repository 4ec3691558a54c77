"""Strings into pandas, polars and Arrow: every layout, side by side with xarray's and Parquet's routes.

    python benchmarks/arrow.py                      # 1e7 labels, 1e6 long strings (a long run)
    python benchmarks/arrow.py --n 1000000 --long-n 100000 --repeat 3
    python benchmarks/arrow.py --quick              # a smoke run of every row (seconds)

Writes the same strings in each layout (NCZarr ``|Sn`` by ``to_nczarr``, NCZarr NC_CHAR by netCDF4,
pure Zarr v2 ``|O`` vlen-utf8 and Zarr v3 vlen-utf8 by xarray's ``to_zarr``, ``to_zarr_v3``'s
zarrs.vlen and Arrow layouts; uncompressed and zstd level 3) and in Parquet (PLAIN encoding, no
dictionary; uncompressed and zstd level 3), then times, in one run:

* (a) a pandas ``str`` column: xarray's ``open_dataset(...).to_dataframe()`` with engine="zarr" and
  engine="zstrings", our ``ds.zstrings.to_dataframe()``, ``pq.read_table(...).to_pandas()``;
* (b) a polars DataFrame: xarray's route then ``pl.from_pandas``, ``pl.DataFrame(ds.zstrings)`` (the C stream),
  ``pl.read_parquet``;
* (c) an Arrow result: ``ds.zstrings.to_arrow()``, ``xr_zstrings.read_arrow``, ``pq.read_table``;
* the limit: a copy of the payload bytes (a uint8 buffer of the UTF-8 data's size into a fresh array);
* Arrow -> StringDType: ``xr_zstrings.arrow_to_stringdtype`` against
  ``np.array(arr.to_pylist(), dtype=StringDType())`` and ``arr.to_numpy(zero_copy_only=False)``.

Each row's values are checked against the source once (outside the timing). Peak memory is the
process's RSS high-water mark (``VmHWM``, reset through ``/proc/self/clear_refs``) over one run of
the row in a fresh child process, relative to the result's size (Arrow ``nbytes``; pandas'
``memory_usage(deep=True)``; polars' ``estimated_size``): pyarrow's allocations are outside
tracemalloc. A row whose API is not in this checkout prints "n/a (not available)".
``XR_ZSTRINGS_NO_EXT=1`` benchmarks the pure numpy/pyarrow fallback.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

T = np.dtypes.StringDType()
CATEGORIES = np.array(["station", "sensor", "product", "region", "gauge", "buoy", "site",
                       "météo", "estación", "станция"], dtype=T)
LABEL_WIDTH = 32  # |S32 / NC_CHAR x32: the longest label is 25 bytes
LONG_WIDTH = 2048  # the longest long string is 2,000 bytes
ZSTD_LEVEL = 3
#: layouts (name, compressed?); the long strings skip NC_CHAR (netCDF4 writes it one char a cell)
LAYOUTS = ["nczarr", "nczarr+zstd", "nc_char", "v2", "v2+zstd", "v3", "v3+zstd",
           "zarrs.vlen", "zarrs.vlen+zstd", "arrow", "arrow+zstd"]
LABEL = {"nczarr": "NCZarr |Sn", "nc_char": "NCZarr NC_CHAR", "v2": "Zarr v2 |O vlen-utf8",
         "v3": "Zarr v3 vlen-utf8", "zarrs.vlen": "Zarr v3 zarrs.vlen", "arrow": "Zarr v3 Arrow layout"}


class NotAvailable(Exception):
    """The API a row times is not in this checkout."""


# ------------------------------------------------------------------------------------------
# data
# ------------------------------------------------------------------------------------------


def labels(n: int) -> pa.Array:
    """``label-<category>-<number>``, 12-25 bytes, one in eight multibyte (benchmarks/scale_dask.py's)."""
    ids = np.arange(n, dtype=np.int64)
    cat = CATEGORIES[np.where(ids % 8 == 0, 7 + ids % 3, (ids * 2654435761 % 97) % 7)]
    num = (ids * 40503 % 1_000_000_007).astype(T)
    return pa.array(np.strings.add(np.strings.add(np.strings.add("label-", cat), "-"), num), pa.large_string())


def long_strings(n: int, seed: int = 0) -> pa.Array:
    """200-2,000 bytes of printable ASCII each, one in five ending in a 2-byte character ("é")."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(200, 2001, n)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    data = rng.integers(0x21, 0x7F, int(offsets[-1]), dtype=np.uint8)
    mb = np.flatnonzero(rng.random(n) < 0.2)
    data[offsets[mb + 1] - 2] = 0xC3
    data[offsets[mb + 1] - 1] = 0xA9
    return pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data))


def payload_bytes(arr: pa.Array) -> int:
    offsets = np.frombuffer(arr.buffers()[1], np.int64)[arr.offset : arr.offset + len(arr) + 1]
    return int(offsets[-1] - offsets[0])


# ------------------------------------------------------------------------------------------
# stores
# ------------------------------------------------------------------------------------------


_OBJECTS: dict[int, np.ndarray] = {}


def _objects(values: pa.Array) -> np.ndarray:
    """``values`` as an object array (made once: the writers of every layout take it)."""
    if id(values) not in _OBJECTS:
        _OBJECTS.clear()
        _OBJECTS[id(values)] = values.to_numpy(zero_copy_only=False)
    return _OBJECTS[id(values)]


def write_layout(layout: str, path: Path, values: pa.Array, chunk: int, width: int) -> str | None:
    """Write ``values`` as variable "s" along "x" in ``layout`` at ``path``; None when not made here."""
    import numcodecs
    import xarray as xr

    name, _, comp = layout.partition("+")
    strs = _objects(values)  # object: what xarray's to_zarr writes as vlen-utf8
    ds = xr.Dataset({"s": ("x", strs)})
    if name == "nczarr":
        from xr_zstrings import to_nczarr

        ds["s"].encoding["chunks"] = (chunk,)
        to_nczarr(ds, path, mode="w", maxstrlen=width,
                  compressor=numcodecs.Zstd(level=ZSTD_LEVEL) if comp else None)
    elif name == "nc_char":
        import netCDF4

        raw = np.array(strs.tolist(), dtype=f"U{width}").astype(np.dtypes.StringDType())
        raw = np.strings.encode(raw, "utf-8").astype(f"S{width}")
        nc = netCDF4.Dataset(f"file://{path}#mode=nczarr,file", "w")
        nc.createDimension("x", len(values))
        nc.createDimension("nchar", width)
        v = nc.createVariable("s", "S1", ("x", "nchar"), chunksizes=(chunk, width))
        v.setncattr("_Encoding", "utf-8")
        v.set_auto_chartostring(False)
        v[:] = raw.view("S1").reshape(len(values), width)
        nc.close()
    elif name in ("v2", "v3"):
        if name == "v2":
            compressors: Any = [numcodecs.Zstd(level=ZSTD_LEVEL)] if comp else None
        else:
            import zarr

            compressors = [zarr.codecs.ZstdCodec(level=ZSTD_LEVEL)] if comp else None
        ds.to_zarr(path, zarr_format=int(name[1]), consolidated=False, mode="w",
                   encoding={"s": {"chunks": (chunk,), "compressors": compressors}})
    else:
        from xr_zstrings import to_zarr_v3

        ds["s"].encoding["chunks"] = (chunk,)
        to_zarr_v3(ds, path, layout=name, mode="w",
                   compressors=[{"name": "zstd", "configuration": {"level": ZSTD_LEVEL}}] if comp else [])
    return str(path)


def write_parquet(path: Path, values: pa.Array, comp: str | None) -> str:
    import pyarrow.parquet as pq

    # PLAIN, no dictionary: the layout closest to a Zarr vlen chunk; one row group a 1e6 values
    pq.write_table(pa.table({"s": values}), path, compression=comp or "none", use_dictionary=False,
                   column_encoding={"s": "PLAIN"}, compression_level=ZSTD_LEVEL if comp else None,
                   row_group_size=1_000_000)
    return str(path)


# ------------------------------------------------------------------------------------------
# the rows: a route name -> a callable (used by the timing run and by the memory child)
# ------------------------------------------------------------------------------------------


def _open(store: str, engine: str) -> Any:
    import xarray as xr

    kw: dict[str, Any] = {"consolidated": False} if engine == "zarr" else {}
    return xr.open_dataset(store, engine=engine, **kw)


def _accessor(store: str, method: str) -> Any:
    ds = _open(store, "zstrings")
    acc = ds.zstrings
    if not hasattr(acc, method):
        raise NotAvailable(f"ds.zstrings.{method}")
    return getattr(acc, method)


def _read_arrow(store: str) -> Any:
    import xr_zstrings
    from xr_zstrings.errors import UnsupportedError

    try:
        return xr_zstrings.read_arrow(store, "s")
    except UnsupportedError as e:  # read_arrow not yet generalised to this layout
        raise NotAvailable(str(e).split(";")[0]) from None


def _polars_from_stream(store: str) -> Any:
    """``pl.DataFrame(ds.zstrings)``: polars reads the Arrow C stream (``pl.from_arrow`` of a stream
    gives a struct Series, not a DataFrame)."""
    import polars as pl

    ds = _open(store, "zstrings")
    if not hasattr(type(ds.zstrings), "__arrow_c_stream__"):
        raise NotAvailable("ds.zstrings.__arrow_c_stream__")
    return pl.DataFrame(ds.zstrings)


def route(name: str, store: str) -> Callable[[], Any]:
    """The callable one row times (``store``: a Zarr store, a Parquet file, or the payload size)."""
    import pyarrow.parquet as pq

    routes: dict[str, Callable[[], Any]] = {
        "xarray engine=zarr .to_dataframe()": lambda: _open(store, "zarr").to_dataframe(),
        "xarray engine=zstrings .to_dataframe()": lambda: _open(store, "zstrings").to_dataframe(),
        "ds.zstrings.to_dataframe()": lambda: _accessor(store, "to_dataframe")(),
        "pl.DataFrame(ds.zstrings)": lambda: _polars_from_stream(store),
        "ds.zstrings.to_arrow()": lambda: _accessor(store, "to_arrow")(),
        "xr_zstrings.read_arrow": lambda: _read_arrow(store),
        "read_arrow(...).to_pandas()": lambda: _read_arrow(store).to_pandas(),
        "pq.read_table(...).to_pandas()": lambda: pq.read_table(store).to_pandas(),
        "pl.read_parquet": lambda: __import__("polars").read_parquet(store),
        "pq.read_table": lambda: pq.read_table(store),
    }
    if name == "memcpy of the payload":
        src = np.ones(int(store), np.uint8)
        return src.copy
    return routes[name]


def result_column(out: Any) -> pa.ChunkedArray | pa.Array:
    """Column "s" of a row's result as Arrow (for the value check)."""
    if isinstance(out, pa.Table):
        return out.column("s")
    if isinstance(out, pa.ChunkedArray | pa.Array):
        return out
    if type(out).__module__.startswith("polars"):
        return out["s"].to_arrow() if hasattr(out, "columns") else out.to_arrow()
    col = out["s"] if hasattr(out, "columns") else out
    return pa.array(col.array if col.dtype != object else col.to_numpy(), type=pa.large_string(),
                    from_pandas=True)


def result_nbytes(out: Any) -> int:
    if isinstance(out, pa.Table | pa.ChunkedArray | pa.Array):
        return int(out.nbytes)
    if type(out).__module__.startswith("polars"):
        return int(out.estimated_size())
    if isinstance(out, np.ndarray):
        return int(out.nbytes)
    return int(out.memory_usage(index=True, deep=True).sum() if hasattr(out, "columns")
               else out.memory_usage(index=True, deep=True))


def same_values(out: Any, expected: pa.Array) -> bool:
    got = result_column(out)
    if isinstance(got, pa.ChunkedArray):
        got = got.combine_chunks() if got.num_chunks else pa.array([], expected.type)
    if pa.types.is_string(got.type) or pa.types.is_large_string(got.type) or pa.types.is_string_view(got.type):
        got = got.cast(pa.large_string())
    return bool(got.equals(expected))


# ------------------------------------------------------------------------------------------
# measuring
# ------------------------------------------------------------------------------------------


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        return int(re.search(rf"{key}:\s+(\d+)", f.read()).group(1)) * 1024  # type: ignore[union-attr]


def child_peak(route_name: str, store: str) -> None:
    """(In a fresh process) one run of the row: RSS high-water over it above the RSS before, and the
    result's size, printed as JSON."""
    import pandas  # noqa: F401 - imported before the baseline, as every route's modules
    import polars  # noqa: F401
    import pyarrow.parquet  # noqa: F401
    import xarray  # noqa: F401
    import zarr  # noqa: F401 - (zarr-python and the readers: ~20 MB of modules, not the read's memory)

    import xr_zstrings.backend
    import xr_zstrings.frames
    import xr_zstrings.read.arrow  # noqa: F401

    fn = route(route_name, store)
    gc.collect()
    base = _status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    out = fn()
    peak = _status("VmHWM") - base
    print(json.dumps({"peak": peak, "nbytes": result_nbytes(out)}))


def measure_peak(route_name: str, store: str) -> tuple[int, int] | None:
    cmd = [sys.executable, __file__, "--child", route_name, store]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if r.returncode:
        return None
    d = json.loads(r.stdout.strip().splitlines()[-1])
    return d["peak"], d["nbytes"]


def timed(fn: Callable[[], Any], repeat: int, cpu: list[float] | None = None) -> tuple[list[float], Any]:
    """Seconds of each of ``repeat`` runs (the cyclic collector off while timing, as timeit) and the
    last result (the previous result dropped before each run); each run's process CPU seconds (all
    threads) appended to ``cpu``: steadier than wall time on a shared machine."""
    times, out = [], None
    for _ in range(repeat):
        out = None
        gc.collect()
        gc.disable()
        try:
            c0, t0 = time.process_time(), time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - t0)
            if cpu is not None:
                cpu.append(time.process_time() - c0)
        finally:
            gc.enable()
    return times, out


@dataclass
class Row:
    data: str
    layout: str
    target: str
    reader: str
    n: int
    times: list[float] = field(default_factory=list)
    status: str = ""  # "" = measured; else why not
    peak: tuple[int, int] | None = None
    ratios: dict[str, float] = field(default_factory=dict)
    payload: int = 0  # UTF-8 bytes of the values
    cpu: list[float] = field(default_factory=list)  # process CPU seconds of each run

    @property
    def cpu_rate(self) -> float:
        """Strings per CPU second of the fastest run by CPU (M/s)."""
        return self.n / min(self.cpu) / 1e6 if self.cpu else float("nan")

    @property
    def t(self) -> float:
        return statistics.median(self.times) if self.times else float("nan")

    @property
    def rate(self) -> float:
        return self.n / self.t / 1e6 if self.times else float("nan")

    def spread(self) -> str:
        if len(self.times) < 2:
            return ""
        return f"{self.n / max(self.times) / 1e6:.2f}-{self.n / min(self.times) / 1e6:.2f}"


# ------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10_000_000, help="label-like strings (default 1e7)")
    p.add_argument("--long-n", type=int, default=1_000_000, help="long strings, 200-2,000 bytes (default 1e6)")
    p.add_argument("--repeat", type=int, default=3, help="runs of our rows, Parquet and memcpy (median shown)")
    p.add_argument("--peer-repeat", type=int, default=1, help="runs of xarray's to_dataframe rows (slow)")
    p.add_argument("--layouts", nargs="+", choices=LAYOUTS, default=LAYOUTS)
    p.add_argument("--data", nargs="+", choices=["labels", "long"], default=["labels", "long"])
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory child processes")
    p.add_argument("--no-xarray", action="store_true", help="skip xarray's to_dataframe rows")
    p.add_argument("--xarray-from", default=None, metavar="JSON",
                   help="with --no-xarray: take xarray's rows (same sizes) from an earlier run's --json file")
    p.add_argument("--dir", default=None, help="where the stores are written (default: a temporary dir)")
    p.add_argument("--quick", action="store_true", help="a smoke run: 20,000 + 2,000 strings, one run each")
    p.add_argument("--json", default=None, help="also write the rows to this JSON file")
    p.add_argument("--child", nargs=2, metavar=("ROUTE", "STORE"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child_peak(*args.child)
        return 0
    if args.quick:
        args.n, args.long_n, args.repeat, args.peer_repeat = 20_000, 2_000, 1, 1

    rows: list[Row] = []
    tmp = Path(tempfile.mkdtemp(prefix="zstrings-arrow-", dir=args.dir))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # (the stores are removed when stopped)
    try:
        for data in args.data:
            rows += run_data(data, args, tmp)
            if args.json:  # (kept as it goes: a long run stopped keeps what it measured)
                Path(args.json).write_text(json.dumps([r.__dict__ | {"rate": r.rate} for r in rows], indent=1))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.xarray_from:
        old = [Row(**{k: v for k, v in d.items() if k != "rate"}) for d in json.loads(Path(args.xarray_from).read_text())]
        sizes = {r.data: r.n for r in rows}
        rows += [r for r in old if "xarray" in r.reader and sizes.get(r.data) == r.n]
    report(rows, args)
    if args.json:
        Path(args.json).write_text(json.dumps([r.__dict__ | {"rate": r.rate} for r in rows], indent=1))
    return 1 if any(r.status.startswith(("WRONG", "error")) for r in rows) else 0


def _log(r: Row) -> None:
    what = r.status or f"{r.rate:8.2f} M/s {r.spread():>13} ({r.cpu_rate:.2f} M/CPU-s)"
    print(f"  {r.data:6} {r.layout:30} {r.target:6} {r.reader:40} {what}", file=sys.stderr, flush=True)


def run_row(data: str, layout: str, target: str, reader: str, store: str, n: int, repeat: int,
            expected: pa.Array | None, args: Any) -> tuple[Row, Any]:
    """Time one row (values checked against ``expected`` once), its peak memory in a child."""
    r = Row(data, layout, target, reader, n)
    out = None
    try:
        r.times, out = timed(route(reader, store), repeat, r.cpu)
    except (NotAvailable, AttributeError, ImportError) as e:
        r.status = f"n/a (not available: {str(e)[:60]})"
    except Exception as e:  # noqa: BLE001 - an API mid-development must not stop the other rows
        r.status = f"error: {type(e).__name__}: {str(e)[:80]}"
    if not r.status and expected is not None and not same_values(out, expected):
        r.status = "WRONG VALUES"
    if not r.status and not args.no_memory and reader != "memcpy of the payload" and "xarray" not in reader and (
            not args.quick or (layout, reader) == ("Parquet PLAIN (raw)", "pq.read_table")):  # --quick: one child
        r.peak = measure_peak(reader, store)
    _log(r)
    return r, out


def run_data(data: str, args: Any, tmp: Path) -> list[Row]:
    n = args.n if data == "labels" else args.long_n
    if n <= 0:
        return []
    values = labels(n) if data == "labels" else long_strings(n)
    chunk = min(n, 100_000 if data == "labels" else 10_000)
    width = LABEL_WIDTH if data == "labels" else LONG_WIDTH
    payload = payload_bytes(values)
    print(f"{data}: {n:,} strings, {payload / 1e6:.0f} MB of UTF-8, chunks of {chunk:,}", file=sys.stderr)
    rows: list[Row] = []

    def add(*a: Any, **kw: Any) -> Any:
        r, out = run_row(data, *a, **kw)
        rows.append(r)
        return out

    add("(limit)", "bytes", "memcpy of the payload", str(payload), n, args.repeat, None, args)
    for comp in (None, "zstd"):
        pq_path = write_parquet(tmp / f"{data}_{comp}.parquet", values, comp)
        lay = f"Parquet PLAIN ({comp or 'raw'})"
        for target, reader in (("arrow", "pq.read_table"), ("pandas", "pq.read_table(...).to_pandas()"),
                               ("polars", "pl.read_parquet")):
            add(lay, target, reader, pq_path, n, args.repeat, values, args)

    for layout in args.layouts:
        if data == "long" and layout == "nc_char":
            continue
        name, _, comp = layout.partition("+")
        lay = f"{LABEL[name]} ({comp or 'raw'})"
        path = tmp / f"{data}_{layout}.zarr"
        t0 = time.perf_counter()
        try:
            store = write_layout(layout, path, values, chunk, width)
        except Exception as e:  # noqa: BLE001 - a writer that cannot make a layout skips its rows
            print(f"  {lay}: not written ({type(e).__name__}: {e})", file=sys.stderr)
            continue
        print(f"  {lay}: written in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        assert store is not None
        if not args.no_xarray:
            for engine in ("zarr", "zstrings"):
                reader = f"xarray engine={engine} .to_dataframe()"
                if engine == "zarr" and name in ("zarrs.vlen", "arrow"):
                    rows.append(Row(data, lay, "pandas", reader, n, status="n/a (zarr-python cannot read it)"))
                    _log(rows[-1])
                    continue
                df = add(lay, "pandas", reader, store, n, args.peer_repeat,
                         values if not (engine == "zarr" and name in ("nczarr", "nc_char")) else None, args)
                if df is not None:  # xarray's route to polars: its DataFrame handed to polars
                    import polars as pl

                    r = Row(data, lay, "polars", f"{reader} + pl.from_pandas", n)
                    c_conv: list[float] = []
                    t_conv, _ = timed(lambda df=df: pl.from_pandas(df.reset_index()), 1, c_conv)  # type: ignore[misc]
                    r.times = [rows[-1].t + t_conv[0]]
                    r.cpu = [min(rows[-1].cpu) + c_conv[0]]
                    rows.append(r)
                    _log(r)
                del df
        for target, reader in (("pandas", "ds.zstrings.to_dataframe()"),
                               ("pandas", "read_arrow(...).to_pandas()"),
                               ("polars", "pl.DataFrame(ds.zstrings)"),
                               ("arrow", "ds.zstrings.to_arrow()"), ("arrow", "xr_zstrings.read_arrow")):
            add(lay, target, reader, store, n, args.repeat, values, args)
        shutil.rmtree(path, ignore_errors=True)

    rows += stringdtype_rows(data, values, args)
    for r in rows:
        r.payload = payload
    return rows


def stringdtype_rows(data: str, values: pa.Array, args: Any) -> list[Row]:
    """Arrow -> numpy StringDType (and pyarrow's own to_numpy, to object) on one Arrow array."""
    n = len(values)
    chunked = pa.chunked_array([values.slice(i, 100_000) for i in range(0, n, 100_000)])
    rows = []
    import xr_zstrings

    to_t: Any = getattr(xr_zstrings, "arrow_to_stringdtype", None) if "arrow_to_stringdtype" in dir(xr_zstrings) else None
    if to_t is None:  # not exported yet: the module's own
        try:
            from xr_zstrings.text.arrow import arrow_to_stringdtype as to_t
        except ImportError:
            to_t = None
    cases: list[tuple[str, Callable[[], Any] | None, int]] = [
        ("arrow_to_stringdtype(arr)", None if to_t is None else (lambda: to_t(chunked)), args.repeat),
        ("np.array(arr.to_pylist(), dtype=StringDType())",
         lambda: np.array(chunked.to_pylist(), dtype=T), args.peer_repeat),
        ("arr.to_numpy(zero_copy_only=False)", lambda: chunked.to_numpy(zero_copy_only=False), args.repeat),
    ]
    for reader, fn, repeat in cases:
        r = Row(data, "Arrow -> numpy", "numpy", reader, n)
        if fn is None:
            r.status = "n/a (not available)"
        else:
            r.times, out = timed(fn, repeat, r.cpu)
            if reader.startswith("arrow_to") and (out.dtype != T or out.tolist()[:1000] != values.slice(0, 1000).to_pylist()
                                                  or out.size != n):
                r.status = "WRONG VALUES"
            del out
        rows.append(r)
        _log(r)
    return rows


# ------------------------------------------------------------------------------------------
# the report
# ------------------------------------------------------------------------------------------


def _find(rows: list[Row], data: str, layout: str | None, reader: str) -> Row | None:
    for r in rows:
        if r.data == data and (layout is None or r.layout == layout) and r.reader == reader and not r.status:
            return r
    return None


def compute_ratios(rows: list[Row]) -> None:
    """Per row: vs xarray's route (the faster engine giving the same text, same layout and target), vs Parquet
    at the same compression and target, and the raw layouts' time vs the payload's memcpy."""
    for r in rows:
        if r.status or r.layout in ("(limit)", "Arrow -> numpy") or "xarray" in r.reader or r.layout.startswith("Parquet"):
            continue
        comp = "zstd" if "(zstd)" in r.layout else "raw"
        suffix = " + pl.from_pandas" if r.target == "polars" else ""
        # (engine="zarr" reads NCZarr text as |Sn bytes, NC_CHAR as single characters: not the same frame)
        engines = ("zstrings",) if r.layout.startswith("NCZarr") else ("zarr", "zstrings")
        found = [_find(rows, r.data, r.layout, f"xarray engine={e} .to_dataframe(){suffix}") for e in engines]
        peers = [x for x in found if x is not None]
        if r.target != "arrow" and peers:
            r.ratios["xarray"] = min(x.t for x in peers) / r.t
        pq_reader = {"pandas": "pq.read_table(...).to_pandas()", "polars": "pl.read_parquet", "arrow": "pq.read_table"}
        pqr = _find(rows, r.data, f"Parquet PLAIN ({comp})", pq_reader[r.target])
        if pqr is not None:
            r.ratios["parquet"] = pqr.t / r.t
        mc = _find(rows, r.data, "(limit)", "memcpy of the payload")
        if mc is not None and comp == "raw":
            r.ratios["memcpy"] = r.t / mc.t
    for data in {r.data for r in rows}:
        ours = _find(rows, data, "Arrow -> numpy", "arrow_to_stringdtype(arr)")
        for r in rows:
            if ours is not None and r.data == data and r.layout == "Arrow -> numpy" and r is not ours and not r.status:
                ours.ratios["vs " + r.reader.split("(")[0].replace("np.array", "to_pylist")] = r.t / ours.t


def report(rows: list[Row], args: Any) -> None:
    compute_ratios(rows)
    from xr_zstrings.text.kernels import kernels

    ext = "compiled kernels" if kernels() is not None else "pure-Python fallback"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent, check=False).stdout.strip()
    print(f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}, {ext}, "
          f"{os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"median of {args.repeat} runs (xarray's rows: {args.peer_repeat})\n")
    print(f"{'data':6} {'layout':30} {'into':6} {'reader':46} {'M str/s':>8} {'(range)':>13} "
          f"{'GB/s':>6} {'M/CPU-s':>8} {'vs xarray':>9} {'vs Parquet':>10} {'/ memcpy':>8} {'peak/result':>11}  notes")
    for r in rows:
        if r.status:
            print(f"{r.data:6} {r.layout:30} {r.target:6} {r.reader:46} {r.status}")
            continue
        pay = r.payload / r.t / 1e9
        rt = r.ratios
        peak = f"{r.peak[0] / r.peak[1]:.2f}x" if r.peak and r.peak[1] else ""
        notes = ", ".join(f"{k} {v:.2f}x" for k, v in rt.items() if k.startswith("vs "))
        print(f"{r.data:6} {r.layout:30} {r.target:6} {r.reader:46} {r.rate:8.2f} {r.spread():>13} "
              f"{pay:6.2f} {r.cpu_rate:8.2f} "
              f"{_fmt(rt.get('xarray')):>9} {_fmt(rt.get('parquet')):>10} {_fmt(rt.get('memcpy')):>8} {peak:>11}  {notes}")


def _fmt(x: float | None) -> str:
    return "" if x is None else f"{x:.2f}x"


if __name__ == "__main__":
    sys.exit(main())
