"""At scale: label-like strings written and read through dask on a 2-worker LocalCluster, locally and
on a local S3 server, xr_zstrings side by side with xarray's engine="zarr" + ``ds.to_zarr``.

    python benchmarks/scale_dask.py --sizes 1e6,1e7 [--chunk 1000000] [--s3-max 1e7] [--out rows.json]

For each size the strings are made on the workers, block by block (``label-<category>-<number>``,
12-25 characters, one in eight with a multibyte category, like station or product labels; cut
cyclically from a pool of 1,048,573 such labels that each worker makes once), so no process ever
holds the whole array; the "generating" column times that source alone. Each row is one operation on a fresh pair of worker processes
(1 thread each, no memory limit); a sampler thread on each worker records its peak RSS during each
operation (every 10 ms, after a gc and ``malloc_trim`` so freed memory of earlier operations is
returned first), reported for the worker that grew most:

* write: ``to_nczarr(ds, target)`` (NC_STRING ``|S32``: ``maxstrlen=32`` given, as one would for
  data too big to scan twice; each worker writes its own chunks) and, when ``--v3``,
  ``to_zarr_v3(ds, target)``; vs ``ds.to_zarr(target)`` (zarr-python, Zarr v3, vlen-utf8);
* read: ``xr.open_dataset(target, engine=..., chunks={})`` then the total UTF-8 length of every
  value (``np.strings.str_len`` per block, summed), computed on the cluster, so every value is
  decoded on a worker and nothing but a number comes back.

Targets: a local directory (``--dir``, default a temporary one) and, up to ``--s3-max`` strings,
moto's S3 server in its own process on 127.0.0.1 (xr_zstrings through obstore;
``ds.to_zarr``/engine="zarr" through zarr-python's ``ObjectStore`` over the same obstore client).
Single-process rows (no dask, numpy in one process: ``to_nczarr(ds.compute(), ...)`` and
``open_dataset(...)["s"].values``) give the dask speedup, up to ``--single-max``.

Prints a markdown table (the README's benchmark section carries it) and, with ``--out``, the rows
as JSON lines.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

T = np.dtypes.StringDType()
WIDTH = 32
CATEGORIES = np.array(["station", "sensor", "product", "region", "gauge", "buoy", "site",
                       "météo", "estación", "станция"], dtype=T)


def labels(start: int, stop: int) -> np.ndarray:
    """Label number start..stop-1 (deterministic, vectorised; about 1 M/s, so blocks are cut from
    a pool of them, see ``block_values``)."""
    ids = np.arange(start, stop, dtype=np.int64)
    cat = CATEGORIES[np.where(ids % 8 == 0, 7 + ids % 3, (ids * 2654435761 % 97) % 7)]
    num = (ids * 40503 % 1_000_000_007).astype(T)
    return np.strings.add(np.strings.add(np.strings.add("label-", cat), "-"), num)


POOL = 1_048_573  # a prime: blocks of any size start at different places in the pool


def block_values(start: int, stop: int) -> np.ndarray:
    """Values start..stop-1 of the benchmark's array: the labels of a pool of ~1e6, made once per
    process, taken cyclically (a block costs one copy, not a generation, so the writers are what
    the write rows time)."""
    pool = _POOL_CACHE.get(POOL)
    if pool is None:
        pool = _POOL_CACHE[POOL] = labels(0, POOL)
    return pool[np.arange(start, stop, dtype=np.int64) % POOL]


_POOL_CACHE: dict[int, np.ndarray] = {}


def make_dataset(n: int, chunk: int) -> Any:
    import dask.array as da
    import xarray as xr

    chunks = (tuple([chunk] * (n // chunk) + ([n % chunk] if n % chunk else [])),)

    def block(block_info: Any = None) -> np.ndarray:
        (start, stop), = block_info[None]["array-location"]
        import scale_dask  # the workers' copy of this module keeps the pool between tasks

        return scale_dask.block_values(start, stop)

    data = da.map_blocks(block, chunks=chunks, dtype=T, meta=np.empty(0, T), name=f"labels-{n}-{chunk}")
    return xr.Dataset({"s": ("n", data)})


def total_length(arr: Any) -> int:
    """The total length in characters of every value (str_len), computed where the blocks live."""
    import dask.array as da

    if isinstance(arr, da.Array):
        return int(arr.map_blocks(lambda b: np.array([np.strings.str_len(b.astype(T)).sum()]),
                                  chunks=((1,) * arr.numblocks[0],), dtype=np.int64).sum().compute())
    return int(np.strings.str_len(np.asarray(arr).astype(T)).sum())


def _reset_peak(dask_worker: Any = None) -> float:
    """On a worker: free what earlier operations left (gc, malloc_trim) and restart its RSS sampler
    (a thread reading the RSS every 10 ms); returns the RSS now, in MB."""
    import ctypes
    import gc
    import threading

    import psutil

    import xr_zstrings  # noqa: F401 - imports are not an operation's memory

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    w = dask_worker
    proc = psutil.Process()
    if not hasattr(w, "zs_peak"):
        w.zs_peak = [0]

        def sample() -> None:
            while True:
                rss = proc.memory_info().rss
                if rss > w.zs_peak[0]:
                    w.zs_peak[0] = rss
                time.sleep(0.01)

        threading.Thread(target=sample, daemon=True, name="zs-rss-sampler").start()
    w.zs_peak[0] = proc.memory_info().rss
    return w.zs_peak[0] / 2**20


def _read_peak(dask_worker: Any = None) -> float:
    return dask_worker.zs_peak[0] / 2**20


def run_op(client: Any, fn: Callable[[], Any]) -> tuple[float, float, float, Any]:
    """(seconds, peak RSS MB of the busier worker, that worker's RSS before, result)."""
    before = client.run(_reset_peak)
    t = time.perf_counter()
    result = fn()
    wall = time.perf_counter() - t
    peaks = client.run(_read_peak)
    busiest = max(peaks, key=lambda w: peaks[w] - before[w])
    return wall, peaks[busiest], before[busiest], result


def start_moto() -> tuple[Any, str]:
    from s3_open import start_moto as start

    return start()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1e6,1e7", help="comma-separated string counts")
    ap.add_argument("--chunk", type=float, default=1e6, help="strings per chunk (and dask block)")
    ap.add_argument("--s3-max", type=float, default=1e7, help="largest size also run against S3")
    ap.add_argument("--single-max", type=float, default=1e7, help="largest size also run in one process")
    ap.add_argument("--v3", action="store_true", help="also to_zarr_v3 (vlen-utf8)")
    ap.add_argument("--dir", default=None, help="where the local stores go (default: a temporary dir)")
    ap.add_argument("--out", default=None, help="append the rows as JSON lines here")
    ap.add_argument("--skip-zarr-above", type=float, default=float("inf"),
                    help="engine='zarr' rows only up to this size (it is the slow side)")
    args = ap.parse_args()
    import distributed
    import xarray as xr

    from xr_zstrings import to_nczarr

    sizes = [int(float(s)) for s in args.sizes.split(",")]
    chunk = int(args.chunk)
    work = Path(tempfile.mkdtemp(prefix="zstrings-scale-", dir=args.dir))
    moto, endpoint = (None, None)
    if any(n <= args.s3_max for n in sizes):
        import boto3

        moto, endpoint = start_moto()
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="bench",
                     aws_secret_access_key="bench").create_bucket(Bucket="scale")
    opts = {"endpoint_url": endpoint, "key": "bench", "secret": "bench", "region": "us-east-1"}

    def zarr_store(url: str) -> Any:
        """zarr-python's ObjectStore for an s3://scale/... URL (pickles to the workers)."""
        from obstore.store import S3Store
        from zarr.storage import ObjectStore

        return ObjectStore(S3Store("scale", prefix=url.split("/", 3)[3], endpoint=endpoint, access_key_id="bench",
                                   secret_access_key="bench", region="us-east-1",
                                   client_options={"allow_http": True}), read_only=False)
    rows: list[dict[str, Any]] = []
    chunk_mb = labels(0, chunk).nbytes / 2**20 + sum(
        len(s.encode()) for s in labels(0, 2000).tolist()) / 2000 * chunk / 2**20

    def emit(row: dict[str, Any]) -> None:
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(row) + "\n")

    # the workers import this module (block_values' pool) from here
    here = str(Path(__file__).resolve().parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
    try:
        with (distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                       dashboard_address=None, silence_logs=40, memory_limit=0) as cluster,
              distributed.Client(cluster) as client):
            # warm up the workers (first imports, dask's first graph of each kind): not measured
            small = make_dataset(2 * min(chunk, 50_000), min(chunk, 50_000))
            to_nczarr(small, work / "warm.zarr", maxstrlen=WIDTH)
            small.to_zarr(work / "warm_zarr.zarr", mode="w")
            for path, engine in ((work / "warm.zarr", "zstrings"), (work / "warm_zarr.zarr", "zarr")):
                total_length(xr.open_dataset(path, engine=engine, chunks={})["s"].data)
            for n in sizes:
                ds = make_dataset(n, chunk)
                expect = int(np.strings.str_len(block_values(0, min(n, 10_000))).sum())  # spot check below
                wall, peak, before, _ = run_op(client, lambda ds=ds: total_length(ds["s"].data))
                emit({"n": n, "place": "-", "op": "generate", "who": "source alone", "s": wall, "peak_mb": peak,
                      "base_mb": before, "chunk_mb": chunk_mb, "load": os.getloadavg()[0]})
                where = {"local": (str(work / f"{n}"), None)}
                if n <= args.s3_max:
                    where["S3 (moto)"] = (f"s3://scale/{n}", opts)
                for place, (base, so) in where.items():
                    writers: dict[str, tuple[Callable[[], Any], str, dict[str, Any]]] = {
                        "xr_zstrings to_nczarr": (
                            lambda base=base, so=so: to_nczarr(ds, f"{base}/nczarr.zarr", maxstrlen=WIDTH,
                                                               storage_options=so),
                            f"{base}/nczarr.zarr", {"engine": "zstrings", "storage_options": so}),
                    }
                    if args.v3:
                        from xr_zstrings import to_zarr_v3

                        writers["xr_zstrings to_zarr_v3"] = (
                            lambda base=base, so=so: to_zarr_v3(ds, f"{base}/v3.zarr", storage_options=so),
                            f"{base}/v3.zarr", {"engine": "zstrings", "storage_options": so})
                    if n <= args.skip_zarr_above:
                        ztarget = zarr_store(f"{base}/zarr.zarr") if so else f"{base}/zarr.zarr"
                        writers["engine=\"zarr\" ds.to_zarr"] = (
                            lambda ztarget=ztarget: ds.to_zarr(ztarget, mode="w"),
                            ztarget, {"engine": "zarr"})
                    for name, (write, target, open_kw) in writers.items():
                        wall, peak, before, _ = run_op(client, write)
                        emit({"n": n, "place": place, "op": "write", "who": name, "s": wall,
                              "peak_mb": peak, "base_mb": before, "chunk_mb": chunk_mb, "load": os.getloadavg()[0]})

                        def read(target: Any = target, open_kw: dict[str, Any] = open_kw) -> int:
                            kw = {k: v for k, v in open_kw.items() if v is not None}
                            return total_length(xr.open_dataset(target, chunks={}, **kw)["s"].data)

                        wall, peak, before, total = run_op(client, read)
                        emit({"n": n, "place": place, "op": "read", "who": name.split(" ")[0], "s": wall,
                              "peak_mb": peak, "base_mb": before, "chunk_mb": chunk_mb,
                              "load": os.getloadavg()[0], "total_len": total})
                        head = xr.open_dataset(target, **{k: v for k, v in open_kw.items() if v is not None})
                        assert int(np.strings.str_len(head["s"][: min(n, 10_000)].values.astype(T)).sum()) == expect
                    if place == "local":
                        shutil.rmtree(base, ignore_errors=True)
                if n <= args.single_max:  # one process, no dask: the baseline for the dask speedup
                    with tempfile.TemporaryDirectory(dir=work) as d:
                        local = ds.compute()
                        t = time.perf_counter()
                        to_nczarr(local, f"{d}/one.zarr", maxstrlen=WIDTH)
                        w = time.perf_counter() - t
                        del local
                        t = time.perf_counter()
                        total = total_length(xr.open_dataset(f"{d}/one.zarr", engine="zstrings")["s"].values)
                        r = time.perf_counter() - t
                    for op, s in (("write", w), ("read", r)):
                        emit({"n": n, "place": "local", "op": op, "who": "xr_zstrings, one process (no dask)",
                              "s": s, "peak_mb": None, "base_mb": None, "chunk_mb": chunk_mb,
                              "load": os.getloadavg()[0], **({"total_len": total} if op == "read" else {})})
    finally:
        if moto is not None:
            from s3_open import stop

            stop(moto)
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(table(rows))


def table(rows: list[dict[str, Any]]) -> str:
    """The README's table: per size, place and operation, ours vs engine="zarr" side by side."""
    def rate(r: dict[str, Any] | None) -> str:
        return "" if r is None else f"{r['n'] / r['s'] / 1e6:.2f}"

    def mem(r: dict[str, Any] | None) -> str:
        if r is None or r["peak_mb"] is None:
            return ""
        grew = r["peak_mb"] - r["base_mb"]
        return f"{r['peak_mb']:.0f} (+{grew:.0f} = {grew / r['chunk_mb']:.1f} chunks)"

    def find(n: int, place: str, op: str, who: str) -> dict[str, Any] | None:
        return next((r for r in rows if (r["n"], r["place"], r["op"]) == (n, place, op)
                     and r["who"].startswith(who)), None)

    out = ["| strings | where | op | xr_zstrings M strings/s | engine=\"zarr\" M strings/s | ratio "
           "| xr_zstrings peak RSS / worker, MB | engine=\"zarr\" peak RSS / worker, MB "
           "| xr_zstrings one process M strings/s | generating the strings alone M/s |",
           "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for n in sorted({r["n"] for r in rows}):
        gen = find(n, "-", "generate", "source")
        for place in ("local", "S3 (moto)"):
            for op in ("write", "read"):
                ours = find(n, place, op, "xr_zstrings to_nczarr" if op == "write" else "xr_zstrings")
                if ours is None:
                    continue
                zarr = find(n, place, op, "engine")
                one = find(n, place, op, "xr_zstrings, one process")
                ratio = "" if zarr is None else f"{zarr['s'] / ours['s']:.1f}x"
                out.append(f"| {n:,} | {place} | {op} | {rate(ours)} | {rate(zarr)} | {ratio} | {mem(ours)} | "
                           f"{mem(zarr)} | {rate(one)} | {rate(gen) if op == 'write' else ''} |")
        v3 = [r for r in rows if r["n"] == n and r["who"].endswith("to_zarr_v3")]
        for r in v3:
            out.append(f"| {n:,} | {r['place']} | write (to_zarr_v3) | {rate(r)} | | | {mem(r)} | | | |")
    return "\n".join(out)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
