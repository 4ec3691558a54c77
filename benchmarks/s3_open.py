"""Opening many-variable stores from object storage: requests and wall time, against a local S3.

    python benchmarks/s3_open.py --nvars 1000 [--repeat 3] [--compare-libs]

Starts moto's S3 server in its own process on 127.0.0.1 (nothing leaves the machine), writes an
NCZarr store with ``--nvars`` string variables with netcdf-c (netCDF4) and the same data as a
zarr-python Zarr v2 store with consolidated metadata, uploads both, and prints for each
``xr.open_dataset(..., engine="zstrings")``: the requests the open took
(``ds.encoding["zstrings_requests"]``), wall time (median of --repeat) and the time to load one
variable. ``--compare-libs`` also times many small GETs through zarr-python's two object-store
adapters, ``FsspecStore`` (s3fs/aiobotocore) and ``ObjectStore`` (obstore), at several
concurrency levels: the measurement behind xr_zstrings' choice of obstore (docs/cloud.md).

moto is a Python server (about 2 ms of its own per request), so absolute times are moto's; request
counts and the ratios are what carry over to a real object store, where each request costs a round
trip of 10-50 ms.
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

import numpy as np

KEY, SECRET, REGION, BUCKET = "bench", "bench", "us-east-1", "zstrings-bench"


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


def write_stores(tmp: Path, nvars: int) -> tuple[Path, Path]:
    import netCDF4
    import xarray as xr

    nc_path = tmp / "many.zarr"
    nc = netCDF4.Dataset(f"file://{nc_path}#mode=nczarr,file", "w")
    nc.createDimension("x", 8)
    for i in range(nvars):
        v = nc.createVariable(f"v{i:05d}", str, ("x",))
        v[:] = np.array([f"var {i} value {j}" for j in range(8)], dtype=object)
    nc.close()
    v2_path = tmp / "many_v2.zarr"
    xr.open_dataset(nc_path, engine="zstrings").to_zarr(v2_path, zarr_format=2, consolidated=True)
    return nc_path, v2_path


def time_open(url: str, options: dict[str, object], repeat: int) -> tuple[int, float, float]:
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
    ap.add_argument("--compare-libs", action="store_true")
    ap.add_argument("--gets", type=int, default=1000, help="objects for --compare-libs")
    args = ap.parse_args()
    import boto3

    proc, endpoint = start_moto()
    try:
        boto3.client("s3", endpoint_url=endpoint, region_name=REGION, aws_access_key_id=KEY,
                     aws_secret_access_key=SECRET).create_bucket(Bucket=BUCKET)
        options = {"endpoint_url": endpoint, "key": KEY, "secret": SECRET, "region": REGION}
        with tempfile.TemporaryDirectory() as d:
            nc_path, v2_path = write_stores(Path(d), args.nvars)
            urls = {"NCZarr (netcdf-c, _nczarr_group)": upload(endpoint, nc_path, "many.zarr"),
                    "Zarr v2 (zarr-python, .zmetadata)": upload(endpoint, v2_path, "many_v2.zarr")}
        print(f"open_dataset of {args.nvars} string variables from S3 (moto on 127.0.0.1), "
              f"median of {args.repeat}:")
        print(f"{'store':36} {'requests':>9} {'open s':>8} {'load 1 var s':>13}")
        for name, url in urls.items():
            requests, wall, load = time_open(url, options, args.repeat)
            print(f"{name:36} {requests:>9} {wall:>8.2f} {load:>13.3f}")
        if args.compare_libs:
            compare_libs(endpoint, args.gets)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()
