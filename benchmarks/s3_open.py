"""Opening many-variable stores from object storage over a network round trip, against a local S3.

    python benchmarks/s3_open.py --nvars 1000 [--rtt 0.02] [--repeat 3] [--compare-libs]

Starts moto's S3 server in its own process on 127.0.0.1 (nothing leaves the machine), writes an
NCZarr store with ``--nvars`` string variables with netcdf-c (netCDF4) and the same data as
zarr-python Zarr v2 and v3 stores with and without consolidated metadata, uploads them, and opens
each through two proxies in their own processes (tests/latency_proxy.py): one adding nothing and one
adding ``--rtt / 2`` in each direction (a new connection pays one more RTT for its handshake).
``tc netem`` in a network namespace would be the usual tool, but this machine's kernel has no netem
qdisc (``unshare -rn`` works, ``tc qdisc add dev lo root netem ...`` fails: "Specified qdisc kind
is unknown"), so the delaying proxy is the substitute. Printed per store: the requests
``xr.open_dataset(..., engine="zstrings")`` took (``ds.encoding["zstrings_requests"]``), its wall
time (median of --repeat) without and with the delay, what the delay added in RTTs (the round trips
the open waited for), the same two times for xarray's ``engine="zarr"`` through zarr-python's
``ObjectStore`` over the same obstore client (consolidated=True for the consolidated stores, else
False), and the time to load one variable. ``--compare-libs`` also times many small GETs through
zarr-python's two object-store adapters, ``FsspecStore`` (s3fs/aiobotocore) and ``ObjectStore``
(obstore), at several concurrency levels: the measurement behind xr_zstrings' choice of obstore
(docs/cloud.md).

moto is a Python server (a few ms of CPU per request on this machine's shared cores), so a store
needing two thousand GETs is bound by moto's request rate, with or without the delay: the "no
delay" column is that floor, and the RTTs the delay added are what carries over to a real object
store (where thousands of GETs per second per prefix are served concurrently).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

KEY, SECRET, REGION, BUCKET = "bench", "bench", "us-east-1", "zstrings-bench"


def stop(proc: subprocess.Popen[Any]) -> None:
    """End a server this benchmark started (moto under load can take a while to honour SIGTERM)."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(endpoint + "/moto-api/", timeout=1)
            return proc, endpoint
        except Exception:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.terminate()
                raise SystemExit("moto server did not start (pip install 'moto[server]')") from None
            time.sleep(0.1)


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
    port = int(proc.stdout.readline())  # type: ignore[union-attr]
    return proc, f"http://127.0.0.1:{port}"


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
    for fmt in (2, 3):
        for cons in (False, True):
            p = tmp / f"many_v{fmt}{'_consolidated' if cons else ''}.zarr"
            ds.to_zarr(p, zarr_format=fmt, consolidated=cons)
            out[f"v{fmt}{' consolidated' if cons else ''}"] = p
    return out


def time_open(url: str, options: dict[str, object], repeat: int) -> tuple[int, float, float]:
    """(requests, median open seconds, seconds to load one variable)."""
    import xarray as xr

    times, requests, load = [], 0, 0.0
    for _ in range(repeat):
        t = time.perf_counter()
        ds = xr.open_dataset(url, engine="zstrings", storage_options=options)
        times.append(time.perf_counter() - t)
        requests = ds.encoding["zstrings_requests"]
        t = time.perf_counter()
        ds[next(iter(ds.data_vars))].values  # noqa: B018 - one variable, one chunk
        load = time.perf_counter() - t
    return requests, statistics.median(times), load


def time_open_zarr(endpoint: str, prefix: str, consolidated: bool, repeat: int) -> float | str:
    """xarray's engine="zarr" through zarr-python's ObjectStore on the same obstore client."""
    import xarray as xr
    from obstore.store import S3Store
    from zarr.storage import ObjectStore

    times = []
    for _ in range(repeat):
        st = ObjectStore(S3Store(BUCKET, prefix=prefix, endpoint=endpoint, access_key_id=KEY,
                                 secret_access_key=SECRET, region=REGION,
                                 client_options={"allow_http": True}), read_only=True)
        t = time.perf_counter()
        try:
            xr.open_dataset(st, engine="zarr", consolidated=consolidated)
        except Exception as e:  # noqa: BLE001 - reported in the table
            return f"fails: {type(e).__name__}"
        times.append(time.perf_counter() - t)
    return statistics.median(times)


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
                assert await st.get(k, prototype=default_buffer_prototype()) is not None  # type: ignore[attr-defined]

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
    ap.add_argument("--rtt", type=float, default=0.02, help="emulated round-trip time in seconds (0: none)")
    ap.add_argument("--compare-libs", action="store_true")
    ap.add_argument("--gets", type=int, default=1000, help="objects for --compare-libs")
    args = ap.parse_args()
    import boto3

    proc, endpoint = start_moto()
    try:
        boto3.client("s3", endpoint_url=endpoint, region_name=REGION, aws_access_key_id=KEY,
                     aws_secret_access_key=SECRET).create_bucket(Bucket=BUCKET)
        stores: dict[str, tuple[str, Path]] = {}
        with tempfile.TemporaryDirectory() as d:
            for label, path in write_stores(Path(d), args.nvars).items():
                stores[label] = (upload(endpoint, path, path.name), path)
        proxies = [start_proxy(endpoint, 0.0), start_proxy(endpoint, args.rtt)]
        print(f"open_dataset of {args.nvars} string variables from S3 (moto on 127.0.0.1, through a proxy "
              f"adding nothing / {args.rtt * 1000:.0f} ms RTT), median of {args.repeat}, load average "
              f"{os.getloadavg()[0]:.1f} at the start:\n")
        rtt_ms = f"{args.rtt * 1000:.0f} ms"
        print(f"| store | zstrings requests | zstrings open s, no delay | {rtt_ms} RTT | added by the delay, "
              f"in RTTs | engine=\"zarr\" open s, no delay | {rtt_ms} RTT | zstrings load 1 var s |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        try:
            for label, (url, _path) in stores.items():
                walls, peers = [], []
                for _proc, via in proxies:
                    options = {"endpoint_url": via, "key": KEY, "secret": SECRET, "region": REGION}
                    requests, wall, load = time_open(url, options, args.repeat)
                    walls.append(wall)
                    peers.append(time_open_zarr(via, url.split("/", 3)[3], "consolidated" in label, args.repeat))
                p0, p1 = (p if isinstance(p, str) else f"{p:.2f}" for p in peers)
                print(f"| {label} | {requests} | {walls[0]:.2f} | {walls[1]:.2f} | "
                      f"{(walls[1] - walls[0]) / args.rtt:.0f} | {p0} | {p1} | {load:.3f} |")
        finally:
            for proc, _via in proxies:
                stop(proc)
        if args.compare_libs:
            compare_libs(endpoint, args.gets)
    finally:
        stop(proc)


if __name__ == "__main__":
    main()
