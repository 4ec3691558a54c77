"""obstore's runtime and the process (io/runtime.py): forks and exit, against a real S3 server (moto).

obstore cannot run in a child forked after its parent made requests: every request there waits
forever. Such a child gets ``ForkedProcessError`` naming the fix at once; spawned workers read a
dataset opened in the parent; a child forked before any request reads on its own, with an S3
client of its own (io/s3.py's cache is not shared across a fork). A script that ends right after
an S3 read exits cleanly, not with SIGABRT from an obstore thread caught by the finalization.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from processes import EXIT_CASES, FORK, assert_exit, in_forked_child, run_ending_right_after
from s3_server import S3Server

from xr_zstrings.errors import ForkedProcessError
from xr_zstrings.io import s3 as s3mod
from xr_zstrings.io.s3 import parse_s3_url, s3_store
from xr_zstrings.write.nczarr import to_nczarr

BUCKET = "zstrings-fork"
NAMES = np.array(["α", "β", "γγ", "", "station-5", "é" * 40], dtype=np.dtypes.StringDType())


@pytest.fixture(scope="module")
def url(s3: S3Server) -> str:
    s3.bucket(BUCKET)
    out = f"s3://{BUCKET}/names.zarr"
    ds = xr.Dataset({"name": ("n", NAMES)})
    ds["name"].encoding["chunks"] = (2,)
    to_nczarr(ds, out, storage_options=s3.options())
    return out


@FORK
def test_a_child_forked_after_s3_reads_is_refused_with_the_fix(s3: S3Server, url: str) -> None:
    ds = xr.open_dataset(url, engine="zstrings", storage_options=s3.options())
    assert ds["name"][:2].values.tolist() == NAMES[:2].tolist()  # the parent has made requests
    for what, fn in (
        ("a dataset opened in the parent", lambda: ds["name"].values.tolist()),
        ("a new open", lambda: xr.open_dataset(url, engine="zstrings", storage_options=s3.options())),
        ("a write", lambda: to_nczarr(xr.Dataset({"a": ("n", NAMES)}), f"s3://{BUCKET}/child.zarr",
                                      storage_options=s3.options())),
    ):
        kind, message = in_forked_child(fn)
        assert kind == "ForkedProcessError", (what, kind, message)
        assert "forked from process" in message and "'spawn'" in message and url.split("/")[2] in message, what
        assert "used obstore (the S3 client)" in message and "before the first read from object storage" in message
    assert issubclass(ForkedProcessError, RuntimeError)
    assert ds["name"].values.tolist() == NAMES.tolist()  # the parent reads on


def test_spawned_workers_read_a_dataset_opened_in_the_parent(s3: S3Server, url: str) -> None:
    ds = xr.open_dataset(url, engine="zstrings", storage_options=s3.options())
    assert ds["name"][:1].values.tolist() == NAMES[:1].tolist()  # the parent has made requests
    with mp.get_context("spawn").Pool(2) as pool:
        parts = pool.map(np.asarray, [ds["name"][i:i + 2] for i in range(0, NAMES.size, 2)])
    assert np.concatenate(parts).tolist() == NAMES.tolist()


@FORK
def test_a_child_forked_before_any_s3_request_reads(s3: S3Server, url: str, tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import os, sys
        import xarray as xr
        import xr_zstrings
        options = {s3.options()!r}
        pid = os.fork()
        if pid == 0:
            try:
                ds = xr.open_dataset({url!r}, engine="zstrings", storage_options=options)
                print("child", ds["name"].values.tolist(), flush=True)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        ds = xr.open_dataset({url!r}, engine="zstrings", storage_options=options)
        print("parent", ds["name"].values.tolist(), flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"child {NAMES.tolist()}", f"parent {NAMES.tolist()}"], done.stderr


@FORK
def test_a_forked_child_builds_its_own_s3_client(s3: S3Server, url: str) -> None:
    loc = parse_s3_url(url)
    parent = s3_store(loc, s3.options())
    # (s3_store itself, which makes no request: opening the store in the child is refused, above)
    assert in_forked_child(lambda: s3_store(loc, s3.options()) is not parent) == ("ok", "True")
    assert s3mod._store_cache_pid == os.getpid()
    assert s3_store(loc, s3.options()) is parent  # the parent's cache is untouched


@EXIT_CASES
def test_a_script_ending_right_after_an_s3_read_exits_cleanly(s3: S3Server, url: str,
                                                             without_hook: bool) -> None:
    done = run_ending_right_after(f"""
        import xarray as xr
        ds = xr.open_dataset({url!r}, engine="zstrings", storage_options={s3.options()!r})
        print(ds["name"].values.tolist(), flush=True)
    """, without_hook=without_hook)
    assert done.stdout.splitlines() == [str(NAMES.tolist())], done.stderr
    assert_exit(done, without_hook=without_hook)
