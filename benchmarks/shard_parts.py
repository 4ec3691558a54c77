"""Selections of a sharded Zarr v3 string array on a local S3 server: bytes fetched and time, against
xarray's engine="zarr".

    python benchmarks/shard_parts.py [--n 1e7] [--shard 1000000] [--inner 10000] [--repeat 5]
        [--server auto|seaweedfs|moto] [--rtt 0.02]

zarr-python writes ``--n`` label-like strings (``scale_dask.labels``: 12-25 characters, one in eight
multibyte) as one sharded ``string`` array (vlen-utf8 + zstd, zarr-python's defaults; ``--shard``
strings a shard, ``--inner`` an inner chunk), uploaded to a local S3 server on 127.0.0.1 (SeaweedFS
from the ``bench`` extra, else moto; benchmarks/_s3.py). Then, for 1%, 10% and 100% of the values
(the partial ones start mid-shard, at no inner-chunk boundary), each engine opens the store afresh
and reads the selection's values (``ds["s"][sel].values``: the open is not timed); the engines
interleaved, the median of ``--repeat``. engine="zarr" goes through zarr-python's ``ObjectStore``
over the same obstore client as ours.

Bytes and requests are counted by a proxy between client and server (tests/latency_proxy.py: every
byte the server sends back, headers included; the requests; the sequential round trips), in a run of
its own (the proxy costs CPU the timed runs do not pay); ``--rtt`` adds that much round trip to a
third run, timed through the proxy (one more round trip a request costs where the server is not on
the same machine). "index" is the shard indexes' bytes the selection touches (one per shard).
"""

from __future__ import annotations

import argparse
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
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from _s3 import KEY, REGION, SECRET, start_server, stop

BUCKET = "zstrings-shards"
PREFIX = "sharded.zarr"


def write_store(path: Path, n: int, shard: int, inner: int) -> int:
    """The array "s" written by zarr-python; returns its chunk objects' bytes."""
    import zarr
    from scale_dask import labels

    g = zarr.open_group(path, mode="w", zarr_format=3)
    a = g.create_array("s", shape=(n,), chunks=(inner,), shards=(shard,), dtype=str,
                       dimension_names=["x"])
    for s0 in range(0, n, shard):
        a[s0 : min(n, s0 + shard)] = labels(s0, min(n, s0 + shard))
    return sum(f.stat().st_size for f in (path / "s" / "c").rglob("*") if f.is_file())


def upload(endpoint: str, local: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    import obstore

    store = s3(endpoint)
    files = [p for p in local.rglob("*") if p.is_file()]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda p: obstore.put(store, f"{PREFIX}/{p.relative_to(local).as_posix()}",
                                            p.read_bytes()), files))


def s3(endpoint: str, prefix: str | None = None) -> Any:
    from obstore.store import S3Store

    return S3Store(BUCKET, prefix=prefix, endpoint=endpoint, access_key_id=KEY, secret_access_key=SECRET,
                   region=REGION, client_options={"allow_http": True})


def open_engine(engine: str, endpoint: str) -> Any:
    import xarray as xr

    if engine == "zstrings":
        return xr.open_dataset(f"s3://{BUCKET}/{PREFIX}", engine="zstrings", storage_options={
            "endpoint_url": endpoint, "key": KEY, "secret": SECRET, "region": REGION})
    from zarr.storage import ObjectStore

    return xr.open_dataset(ObjectStore(s3(endpoint, PREFIX), read_only=True), engine="zarr", consolidated=False)


def read(engine: str, endpoint: str, sel: slice) -> tuple[float, float, np.ndarray]:
    """(wall s, client CPU s, values) of reading ``sel`` from a fresh open."""
    ds = open_engine(engine, endpoint)
    c, t = time.process_time(), time.perf_counter()
    values = ds["s"][sel].values
    return time.perf_counter() - t, time.process_time() - c, values


def selections(n: int, shard: int, inner: int) -> dict[str, slice]:
    start = shard * (n // shard // 3) + shard // 2 + inner // 3  # mid-shard, off the inner grid
    out = {}
    for pct in (1, 10):
        m = n * pct // 100
        s0 = min(start, n - m)
        out[f"{pct}%"] = slice(s0, s0 + m)
    out["100%"] = slice(0, n)
    return out


def index_bytes(sel: slice, n: int, shard: int, inner: int) -> int:
    """The bytes of the shard indexes a selection reads: (offset, nbytes) per inner chunk + crc32c."""
    shards = (sel.stop - 1) // shard - sel.start // shard + 1
    return shards * ((shard // inner) * 16 + 4)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=float, default=1e7)
    ap.add_argument("--shard", type=int, default=1_000_000)
    ap.add_argument("--inner", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rtt", type=float, default=0.02)
    ap.add_argument("--server", choices=("auto", "seaweedfs", "moto"), default="auto")
    args = ap.parse_args()
    n = int(args.n)
    from latency_proxy import LatencyProxy
    from scale_dask import labels

    server_dir = tempfile.mkdtemp(prefix="zstrings-s3-")
    server, endpoint, kind = start_server(args.server, server_dir, BUCKET)
    try:
        with tempfile.TemporaryDirectory() as d:
            t = time.perf_counter()
            total = write_store(Path(d), n, args.shard, args.inner)
            upload(endpoint, Path(d))
            print(f"{n:,} strings in shards of {args.shard:,}, inner chunks of {args.inner:,} (vlen-utf8 + zstd): "
                  f"{total / 1e6:.1f} MB of shards on {kind} ({time.perf_counter() - t:.0f} s to write and upload)")
        sels = selections(n, args.shard, args.inner)
        engines = ("zstrings", "zarr")
        for name, sel in sels.items():  # every engine reads the values the array holds
            want = labels(sel.start, sel.stop)
            for engine in engines:
                got = read(engine, endpoint, sel)[2]
                assert np.array_equal(np.asarray(got, dtype=want.dtype), want), (engine, name)
        counted: dict[tuple[str, str], tuple[int, int, int]] = {}
        proxy = LatencyProxy(endpoint.split("://", 1)[1], delay=0).start()
        try:
            for name, sel in sels.items():
                for engine in engines:
                    ds = open_engine(engine, proxy.endpoint)
                    proxy.reset()
                    ds["s"][sel].values  # noqa: B018
                    counted[(name, engine)] = (proxy.bytes_down, proxy.requests, proxy.max_depth)
        finally:
            proxy.stop()
        times: dict[tuple[str, str], list[tuple[float, float]]] = {}
        slow: dict[tuple[str, str], list[float]] = {}
        delayed = LatencyProxy(endpoint.split("://", 1)[1], delay=args.rtt / 2).start()
        load0 = os.getloadavg()[0]
        try:
            for _ in range(args.repeat):
                for name, sel in sels.items():
                    for engine in engines:
                        wall, cpu, _ = read(engine, endpoint, sel)
                        times.setdefault((name, engine), []).append((wall, cpu))
                        if name != "100%":
                            slow.setdefault((name, engine), []).append(read(engine, delayed.endpoint, sel)[0])
        finally:
            delayed.stop()
        print(f"median of {args.repeat}, load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end\n")
        rtt = f"{args.rtt * 1000:.0f} ms RTT"
        print(f"| selection | engine | bytes fetched | % of the array (index) | requests | round trips | "
              f"time s (range) | client CPU s | {rtt} s | ours / engine=\"zarr\": bytes, time, {rtt} |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
        for name, sel in sels.items():
            idx = index_bytes(sel, n, args.shard, args.inner)
            for engine in engines:
                b, req, depth = counted[(name, engine)]
                walls = [w for w, _ in times[(name, engine)]]
                med = statistics.median(walls)
                cpu = statistics.median(c for _, c in times[(name, engine)])
                d = f"{statistics.median(slow[(name, engine)]):.3f}" if (name, engine) in slow else ""
                ratio = ""
                if engine == "zstrings":
                    zb = counted[(name, "zarr")][0]
                    zt = statistics.median(w for w, _ in times[(name, "zarr")])
                    ratio = f"{b / zb:.2f}x, {med / zt:.2f}x"
                    if (name, engine) in slow:
                        ratio += f", {statistics.median(slow[(name, engine)]) / statistics.median(slow[(name, 'zarr')]):.2f}x"
                label = "zstrings" if engine == "zstrings" else 'engine="zarr"'
                print(f"| {name} | {label} | {b / 1e6:.3f} MB | {100 * b / total:.2f}% ({100 * idx / total:.3f}%) | "
                      f"{req} | {depth} | {med:.3f} ({min(walls):.3f}-{max(walls):.3f}) | {cpu:.3f} | {d} | {ratio} |")
    finally:
        stop(server)
        shutil.rmtree(server_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
