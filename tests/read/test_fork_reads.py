"""Fork-safe, configurable reads (issue 15, item 4).

The reader decodes chunks on a thread pool. A child made by fork (multiprocessing's default on
Linux, PyTorch DataLoader workers, gunicorn) inherits the pool object but not its threads; these
tests read in the parent first (so the pool exists), then in forked children, each with a timeout
so a hang fails the test instead of stalling the suite. The store is written by netcdf-c.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
import threading
from pathlib import Path

import netCDF4
import numpy as np
import pytest
import xarray as xr
from peers import nc_url
from processes import FORK

from xr_zstrings import threads as reader
from xr_zstrings.errors import ZStringsError

N = 200_000
CHUNK = 5_000  # netcdf-c writes |S128 (its default maxstrlen): ~6 task groups of ~4 MiB a read
VALUES = np.array([f"{i:07d}-{'ä' * (i % 5)}-{'x' * (i % 40)}" for i in range(N)], dtype=object)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """netcdf-c writes NC_STRING values (zlib, many chunks) that are wider than 60 bytes."""
    path = tmp_path_factory.mktemp("fork") / "strings.zarr"
    ds = netCDF4.Dataset(nc_url(path), "w")
    ds.createDimension("obs", N)
    v = ds.createVariable("name", str, ("obs",), chunksizes=(CHUNK,), zlib=True, complevel=1)
    v[:] = VALUES
    ds.close()
    return path


def _decode_threads_alive() -> int:
    return sum(t.name.startswith("zstrings-decode") for t in threading.enumerate())


def _read_slice(args: tuple[str, int, int]) -> list[str]:
    path, start, stop = args
    with xr.open_dataset(path, engine="zstrings") as ds:
        return ds["name"].values[start:stop].tolist()


def _read_all_in_parent(path: Path) -> None:
    with xr.open_dataset(path, engine="zstrings") as ds:
        got = ds["name"].values
    assert got.tolist() == VALUES.tolist()
    # the parent's read went through the pool, so the children below inherit a pool object
    assert _decode_threads_alive() >= 1


@FORK
def test_fork_pool_reads_after_parent_read(store: Path) -> None:
    _read_all_in_parent(store)
    jobs = [(str(store), 0, N), (str(store), 5_000, 70_000), (str(store), N - 10, N)]
    with mp.get_context("fork").Pool(2) as pool:
        results = pool.map_async(_read_slice, jobs).get(timeout=120)  # a hang fails here
    for (_, start, stop), got in zip(jobs, results, strict=True):
        assert got == VALUES[start:stop].tolist()


def _worker(ds: xr.Dataset, worker: int, nworkers: int, out: mp.Queue) -> None:
    """A DataLoader-like worker: the dataset object was opened in the parent before the fork;
    the worker reads its share of batches from it."""
    try:
        batch = 40_000  # ~5 MB of stored values: more than one task group, so the pool is used
        starts = list(range(worker * batch, N, batch * nworkers))
        for s in starts:
            got = ds["name"][s : s + batch].values
            out.put((worker, s, got.tolist()))
        out.put((worker, None, len(starts)))
    except BaseException as e:  # report, do not hang the parent
        out.put((worker, None, repr(e)))


@FORK
def test_dataloader_like_workers_share_an_open_dataset(store: Path) -> None:
    ds = xr.open_dataset(store, engine="zstrings")
    # the parent reads first (a peek at a sample); a slice, not .values, which xarray would cache
    # in memory for the children to inherit
    assert ds["name"][10_000:70_000].values.tolist() == VALUES[10_000:70_000].tolist()
    assert _decode_threads_alive() >= 1
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(ds, w, 3, out)) for w in range(3)]
    for p in procs:
        p.start()
    seen: dict[int, list[str]] = {}
    done: dict[int, object] = {}
    try:
        while len(done) < len(procs):
            w, start, payload = out.get(timeout=120)  # a hung worker fails here
            if start is None:
                done[w] = payload
            else:
                seen[start] = payload
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    assert all(isinstance(n, int) for n in done.values()), done
    got = [v for s in sorted(seen) for v in seen[s]]
    assert got == VALUES.tolist()


_PROBE = """
import os, sys, threading
import xarray as xr
kw = {{}} if {threads!r} is None else {{"decode_threads": {threads!r}}}
with xr.open_dataset({path!r}, engine="zstrings", **kw) as ds:
    values = ds["name"].values
assert values.size == {n}
print(sum(t.name.startswith("zstrings-decode") for t in threading.enumerate()))
"""


def _decode_thread_count(store: Path, threads: int | None, env: str | None) -> int:
    e = {k: v for k, v in os.environ.items() if k != reader.DECODE_THREADS_ENV}
    if env is not None:
        e[reader.DECODE_THREADS_ENV] = env
    r = subprocess.run([sys.executable, "-c", _PROBE.format(path=str(store), threads=threads, n=N)],
                       capture_output=True, text=True, env=e, timeout=120)
    assert r.returncode == 0, r.stderr
    return int(r.stdout.strip())


@pytest.mark.parametrize(("threads", "env", "expected"), [
    (1, None, 0),            # keyword 1: decoded on the calling thread, no pool at all
    (None, "1", 0),          # the environment variable alone
    (2, "1", 2),             # the keyword wins over the environment
    (None, "3", 3),
])
def test_decode_thread_count_is_configurable(store: Path, threads: int | None, env: str | None,
                                             expected: int) -> None:
    # a full read runs more task groups than these pools have threads, so each pool fills up
    assert _decode_thread_count(store, threads, env) == expected


@pytest.mark.parametrize("threads", [1, 2, 5])
def test_results_do_not_depend_on_thread_count(store: Path, threads: int) -> None:
    with xr.open_dataset(store, engine="zstrings", decode_threads=threads) as ds:
        assert ds["name"].values.tolist() == VALUES.tolist()
        assert ds["name"][1000:50_000:7].values.tolist() == VALUES[1000:50_000:7].tolist()


@pytest.mark.parametrize("bad", [0, -2, 1.5, "many", True])
def test_bad_thread_count_is_refused_at_open(store: Path, bad: object) -> None:
    with pytest.raises(ZStringsError, match="Invalid decode_threads"):
        xr.open_dataset(store, engine="zstrings", decode_threads=bad)


def test_bad_environment_variable_is_named(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(reader.DECODE_THREADS_ENV, "zero")
    with xr.open_dataset(store, engine="zstrings") as ds, pytest.raises(ZStringsError, match="XR_ZSTRINGS_DECODE_THREADS"):
        ds["name"].values  # the read is the test
