"""Migrating a Zarr v2 / NCZarr store to Zarr v3: metadata only against a full rewrite.

    python benchmarks/migrate.py --chunks 10000 [--per-chunk 100] [--server auto|moto|seaweedfs]

The source is an NCZarr store written by ``to_nczarr``: one NC_STRING variable (label-like values,
``|S24``) of ``--chunks`` chunks of ``--per-chunk`` strings each. Rows, each the median of
``--repeat`` runs on a fresh copy (``--s3-repeat`` on S3):

* locally: ``xr_zstrings.migrate`` in place (v3 metadata beside the v2 metadata) and into a new
  directory (chunks hard-linked), against a full rewrite (``to_zarr_v3`` of what
  ``engine="zstrings"`` opens: every chunk read, decoded, encoded and written);
* on S3 (SeaweedFS when installed, else moto; through tests/latency_proxy.py adding no delay, which
  counts the requests and the bytes the client receives): in place, into another prefix of the same
  bucket (server-side copies), and the same full rewrite. "object bytes read" is the sum of the
  sizes of the objects the client GETs; "metadata bytes" the size of the source's metadata objects.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _s3 import KEY, REGION, SECRET, create_bucket, start_server, stop
from latency_proxy import LatencyProxy

from xr_zstrings import migrate, to_nczarr, to_zarr_v3

BUCKET = "migrate"


def source(path: Path, chunks: int, per_chunk: int) -> None:
    n = chunks * per_chunk
    labels = np.array([f"label-{i % 97:02d}-{i:09d}" for i in range(n)], dtype=np.dtypes.StringDType())
    ds = xr.Dataset({"label": ("x", labels)})
    ds["label"].encoding["chunks"] = (per_chunk,)
    to_nczarr(ds, path, maxstrlen=24)


def _median(fn: Callable[[], Any], prepare: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        prepare()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _rewrite(src: Any, dst: Any, storage_options: dict | None = None) -> None:
    ds = xr.open_dataset(src, engine="zstrings", storage_options=storage_options)  # 24 MB: no dask needed
    to_zarr_v3(ds, dst, mode="w", storage_options=storage_options)


def local_rows(src: Path, root: Path, repeat: int) -> list[tuple[str, float]]:
    work, new, full = root / "work.zarr", root / "new.zarr", root / "full.zarr"

    def fresh() -> None:
        for p in (work, new, full):
            shutil.rmtree(p, ignore_errors=True)
        shutil.copytree(src, work)

    return [
        ("in place", _median(lambda: migrate(work), fresh, repeat)),
        ("new directory (hard links)", _median(lambda: migrate(work, new), fresh, repeat)),
        ("full rewrite (to_zarr_v3)", _median(lambda: _rewrite(work, full), fresh, repeat)),
    ]


def _upload(src: Path, endpoint: str, prefix: str) -> None:
    """Every file of ``src`` to ``s3://BUCKET/prefix/`` (256 puts in flight; not timed)."""
    import asyncio

    import obstore
    from obstore.store import S3Store

    store = S3Store(BUCKET, endpoint=endpoint, access_key_id=KEY, secret_access_key=SECRET, region=REGION,
                    client_options={"allow_http": True})
    files = [p for p in src.rglob("*") if p.is_file()]

    async def put(batch: list[Path]) -> None:
        await asyncio.gather(*(obstore.put_async(store, f"{prefix}/{p.relative_to(src).as_posix()}", p.read_bytes())
                               for p in batch))

    for i in range(0, len(files), 256):
        asyncio.run(put(files[i:i + 256]))


def s3_rows(src: Path, repeat: int, kind: str, tmp: Path) -> list[tuple[str, float, int, int, int]]:
    proc, endpoint, name = start_server(kind, tmp, BUCKET)
    print(f"S3 server: {name}")
    try:
        if name == "moto":
            create_bucket(endpoint, BUCKET)
        proxy = LatencyProxy(endpoint.split("://", 1)[1], delay=0.0).start()
        opts = {"endpoint_url": proxy.endpoint, "key": KEY, "secret": SECRET, "region": REGION}
        sizes = {p.relative_to(src).as_posix(): p.stat().st_size for p in src.rglob("*") if p.is_file()}
        run = [0]

        def fresh() -> None:
            run[0] += 1
            _upload(src, endpoint, f"src{run[0]}")
            proxy.reset()

        def url(p: str) -> str:
            return f"s3://{BUCKET}/{p}"

        rows = []
        cases = [("in place", lambda: migrate(url(f"src{run[0]}"), storage_options=opts)),
                 ("same bucket (server-side copies)",
                  lambda: migrate(url(f"src{run[0]}"), url(f"new{run[0]}"), storage_options=opts)),
                 ("full rewrite (to_zarr_v3)", lambda: _rewrite(url(f"src{run[0]}"), url(f"full{run[0]}"), opts))]
        for label, fn in cases:
            t = _median(fn, fresh, repeat)
            gets = [ln.split()[1] for ln in proxy.request_lines if ln.startswith("GET ") and "?" not in ln]
            read = sum(sizes.get(g.split(f"/src{run[0]}/", 1)[-1], 0) for g in gets if f"/src{run[0]}/" in g)
            rows.append((label, t, proxy.requests, read, proxy.bytes_down))
        proxy.stop()
        return rows
    finally:
        stop(proc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, default=10_000)
    ap.add_argument("--per-chunk", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--s3-repeat", type=int, default=1, help="runs per S3 row (moto is slow)")
    ap.add_argument("--server", default="auto", choices=("auto", "moto", "seaweedfs", "none"))
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        src = root / "src.zarr"
        source(src, args.chunks, args.per_chunk)
        meta = sum(p.stat().st_size for p in src.rglob(".z*")) + sum(p.stat().st_size for p in src.rglob(".ncz*"))
        data = sum(p.stat().st_size for p in src.rglob("*") if p.is_file()) - meta
        print(f"source: {args.chunks:,} chunks of {args.per_chunk} strings (|S24), {data:,} bytes of chunks, "
              f"{meta:,} bytes of metadata")
        rows = local_rows(src, root, args.repeat)
        full = rows[-1][1]
        print("\n| local | seconds | vs full rewrite |\n| --- | ---: | ---: |")
        for label, t in rows:
            print(f"| {label} | {t:.3f} | {full / t:.0f}x faster |" if t != full else f"| {label} | {t:.3f} | 1x |")
        if args.server == "none":
            return
        srows = s3_rows(src, args.s3_repeat, args.server, root)
        full = srows[-1][1]
        print("\n| S3 | seconds | vs full rewrite | requests | object bytes read | bytes received | metadata bytes |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for label, t, req, read, down in srows:
            print(f"| {label} | {t:.3f} | {full / t:.1f}x | {req:,} | {read:,} | {down:,} | {meta:,} |")


if __name__ == "__main__":
    main()
