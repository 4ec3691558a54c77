"""Appends a pipeline runs: their cost against the store's size, and what readers get while they run,
side by side with xarray's ``to_zarr(append_dim=...)`` and icechunk.

    python benchmarks/append.py [--files 100 1000 10000 50000] [--vars 1 10] [--repeat 5]
                                [--availability] [--server auto|seaweedfs|moto|none] [--no-icechunk]

**Cost** (locally): for each store size (``--files`` chunk files in all, split over ``--vars`` string
variables, 10 values a chunk) a store is built once per library, then ``--repeat`` appends of one
chunk per variable are timed (median): ``to_nczarr(mode="a", append_dim=...)`` (NCZarr, changed in
place under the journal protocol), xarray's ``to_zarr(mode="a", append_dim=..., consolidated=True)``
(Zarr v2, zarr-python) and icechunk (xarray's ``to_zarr`` into a writable session, then
``commit``; PyPI ``icechunk``, Python >= 3.12, optional). The goal (issue 25): an append at 50,000
files costs at most 5x its cost at 100 files.

**Availability** (``--availability``): one process appends 5 batches of 50 chunks (one string
variable) while another reads the store in a loop (open, read everything, check every value);
each read is *served* (a whole version: the length is the initial one plus whole batches, every
value right), *refused* (an error) or *wrong* (anything else). Locally, and on a local S3 server
(``--server``: SeaweedFS from the ``bench`` extra, else moto) for xr_zstrings and xarray; icechunk
locally. Readers: ``engine="zstrings"``; ``engine="zarr"`` with consolidated metadata; icechunk's
read-only session of ``main``, opened afresh for each read. The goal: >= 95% served, 0 wrong.

Prints Markdown tables (docs/performance.md and docs/reliability.md keep the numbers of a run).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _s3 import KEY, REGION, SECRET, start_server, stop

BUCKET = "zstrings-append"
os.environ.setdefault("ICECHUNK_LOG", "error")  # icechunk's own warnings (local storage) on every open
ROWS = 10  # values a chunk
T = np.dtypes.StringDType()


def batch(start: int, n: int, nvars: int) -> Any:
    """``n`` rows from ``start``: each value names its row, so a reader can check every value."""
    import xarray as xr

    rows = np.arange(start, start + n)
    values = np.array([f"row {r}" for r in rows], dtype=T)
    ds = xr.Dataset({f"s{v}": ("t", values) for v in range(nvars)})
    for var in ds.variables.values():
        var.encoding["chunks"] = (ROWS,)
    return ds


def has_icechunk() -> bool:
    try:
        import icechunk  # noqa: F401 - whether it imports is the question
    except ImportError:
        return False
    return True


# --- the writers ---------------------------------------------------------------------------------


class Ours:
    name = "xr_zstrings to_nczarr (NCZarr, in place)"

    def __init__(self, target: Any, so: dict[str, Any] | None = None) -> None:
        self.target, self.so = target, so

    def create(self, ds: Any) -> None:
        from xr_zstrings import to_nczarr

        to_nczarr(ds, self.target, unlimited_dims=["t"], maxstrlen=16, mode="w", storage_options=self.so)

    def append(self, ds: Any) -> None:
        from xr_zstrings import to_nczarr

        to_nczarr(ds, self.target, mode="a", append_dim="t", storage_options=self.so)

    def read(self, var: str) -> list[str]:
        import xarray as xr

        with xr.open_dataset(self.target, engine="zstrings", storage_options=self.so) as ds:
            return ds[var].values.tolist()


class Xarray:
    name = "xarray to_zarr (Zarr v2, consolidated)"

    def __init__(self, target: Any, so: dict[str, Any] | None = None) -> None:
        self.target, self.so = target, so

    def _store(self) -> Any:
        if self.so is None:
            return self.target
        from obstore.store import S3Store
        from zarr.storage import ObjectStore

        bucket, _, prefix = self.target.split("s3://", 1)[1].partition("/")
        return ObjectStore(S3Store(bucket, prefix=prefix, endpoint=self.so["endpoint_url"], access_key_id=KEY,
                                   secret_access_key=SECRET, region=REGION, client_options={"allow_http": True}))

    def create(self, ds: Any) -> None:  # (object strings: vlen-utf8, which appends of any length fit)
        ds.astype(object).to_zarr(self._store(), mode="w", zarr_format=2, consolidated=True,
                                  encoding={v: {"chunks": (ROWS,)} for v in ds.data_vars})

    def append(self, ds: Any) -> None:
        ds.astype(object).to_zarr(self._store(), mode="a", append_dim="t", consolidated=True)

    def read(self, var: str) -> list[str]:
        import xarray as xr

        with xr.open_dataset(self._store(), engine="zarr", consolidated=True) as ds:
            return [str(x) for x in ds[var].values.tolist()]


class Icechunk:
    name = "icechunk (xarray to_zarr + commit)"

    def __init__(self, target: Any, so: dict[str, Any] | None = None) -> None:
        self.target = target

    def _repo(self, create: bool = False) -> Any:
        import icechunk

        storage = icechunk.local_filesystem_storage(str(self.target))
        return icechunk.Repository.create(storage) if create else icechunk.Repository.open(storage)

    def create(self, ds: Any) -> None:
        session = self._repo(create=True).writable_session("main")
        ds.to_zarr(session.store, zarr_format=3, consolidated=False)
        session.commit("create")

    def append(self, ds: Any) -> None:
        session = self._repo().writable_session("main")
        ds.to_zarr(session.store, append_dim="t", consolidated=False)
        session.commit("append")

    def read(self, var: str) -> list[str]:
        import xarray as xr

        with xr.open_dataset(self._repo().readonly_session("main").store, engine="zarr", consolidated=False) as ds:
            return [str(x) for x in ds[var].values.tolist()]


# --- cost against size ---------------------------------------------------------------------------


def cost(files: list[int], nvars_list: list[int], repeat: int, kinds: list[type]) -> None:
    print("\n### One append (one chunk a variable) against the store's size, locally (median of "
          f"{repeat}; seconds)\n")
    head = " | ".join(f"{k.name}" for k in kinds)
    print(f"| chunk files | variables | {head} |")
    print("|---:|---:|" + "---:|" * len(kinds))
    results: dict[tuple[int, int, str], float] = {}
    for nvars in nvars_list:
        for n in files:
            rows = max(1, n // nvars) * ROWS
            row = []
            for kind in kinds:
                tmp = Path(tempfile.mkdtemp(prefix="zs-append-"))
                try:
                    w = kind(tmp / "store.zarr")
                    w.create(batch(0, rows, nvars))
                    w.append(batch(rows, ROWS, nvars))  # (the first append imports what appends use)
                    rows += ROWS
                    times = []
                    for i in range(repeat):
                        ds = batch(rows + i * ROWS, ROWS, nvars)
                        t = time.perf_counter()
                        w.append(ds)
                        times.append(time.perf_counter() - t)
                    assert w.read("s0")[-1] == f"row {rows + repeat * ROWS - 1}"
                    results[(n, nvars, kind.name)] = statistics.median(times)
                    row.append(f"{statistics.median(times):.3f}")
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
            print(f"| {n:,} | {nvars} | " + " | ".join(row) + " |", flush=True)
    for nvars in nvars_list:
        for kind in kinds:
            lo, hi = results.get((min(files), nvars, kind.name)), results.get((max(files), nvars, kind.name))
            if lo and hi:
                print(f"\n{kind.name}, {nvars} variable(s): {max(files):,} files cost {hi / lo:.1f}x "
                      f"{min(files):,} files")


# --- availability ---------------------------------------------------------------------------------


def _reader(kind: type, target: Any, so: dict[str, Any] | None, initial: int, step: int, done: Any,
            out: Any) -> None:
    w = kind(target, so)
    served = refused = wrong = 0
    examples: list[str] = []
    while True:
        finished = done.is_set()
        try:
            values = w.read("s0")
            n = len(values)
            if (n - initial) % step == 0 and n >= initial and values == [f"row {r}" for r in range(n)]:
                served += 1
            else:
                wrong += 1
                if len(examples) < 3:
                    examples.append(f"length {n}")
        except Exception as e:  # noqa: BLE001 - a refusal, counted
            refused += 1
            if len(examples) < 3:
                examples.append(f"{type(e).__name__}: {str(e)[:80]}")
        if finished:
            break
    out.put((served, refused, wrong, examples))


def availability(where: str, kinds: list[type], target_of: Any, so: dict[str, Any] | None,
                 appends: int = 5, chunks: int = 50) -> None:
    ctx = mp.get_context("spawn")
    for kind in kinds:
        target = target_of(kind)
        w = kind(target, so)
        initial = chunks * ROWS
        w.create(batch(0, initial, 1))
        done, out = ctx.Event(), ctx.Queue()
        reader = ctx.Process(target=_reader, args=(kind, target, so, initial, chunks * ROWS, done, out))
        reader.start()
        time.sleep(3)  # the reader process is running (imports done) before the first append
        t = time.perf_counter()
        for i in range(appends):
            w.append(batch(initial + i * chunks * ROWS, chunks * ROWS, 1))
        elapsed = time.perf_counter() - t
        done.set()
        served, refused, wrong, examples = out.get(timeout=600)
        reader.join(60)
        total = served + refused + wrong
        print(f"| {where} | {kind.name} | {appends} x {chunks} chunks in {elapsed:.1f} s | {total} | "
              f"{served} ({100 * served / max(total, 1):.0f}%) | {refused} | {wrong} | "
              f"{'; '.join(examples) or ''} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, nargs="+", default=[100, 1000, 10000, 50000])
    ap.add_argument("--vars", type=int, nargs="+", default=[1, 10])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--availability", action="store_true", help="also measure reads during appends")
    ap.add_argument("--no-cost", action="store_true", help="skip the cost table")
    ap.add_argument("--server", choices=("auto", "seaweedfs", "moto", "none"), default="auto")
    ap.add_argument("--no-icechunk", action="store_true")
    ap.add_argument("--only-ours", action="store_true",
                    help="time xr_zstrings alone (e.g. an older checkout, with PYTHONPATH pointing at it)")
    args = ap.parse_args()
    kinds: list[type] = [Ours, Xarray] + ([Icechunk] if has_icechunk() and not args.no_icechunk else [])
    if args.only_ours:
        kinds = [Ours]
    if not has_icechunk():
        print("(icechunk not installed: pip install icechunk, Python >= 3.12)")
    if not args.no_cost:
        cost(args.files, args.vars, args.repeat, kinds)
    if not args.availability:
        return
    print("\n### Reads during appends (reader and writer in two processes)\n")
    print("| where | writer and its reader | appends | reads | served | refused | wrong | examples |")
    print("|---|---|---|---:|---:|---:|---:|---|")
    tmp = Path(tempfile.mkdtemp(prefix="zs-avail-"))
    try:
        availability("local", kinds, lambda k: tmp / f"{k.__name__}.zarr", None)
        if args.server != "none":
            proc, endpoint, server = start_server(args.server, tmp / "s3", BUCKET)
            try:
                so = {"endpoint_url": endpoint, "key": KEY, "secret": SECRET, "region": REGION}
                availability(f"S3 ({server})", [Ours, Xarray], lambda k: f"s3://{BUCKET}/{k.__name__}.zarr", so)
            finally:
                stop(proc)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
