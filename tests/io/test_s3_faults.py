"""Object-storage faults (issue 15, item 8), against real S3 servers (moto on 127.0.0.1).

A server that goes away mid-read or mid-write (a dedicated moto server that the test stops), one
that accepts connections but never answers, a chunk truncated between open and read, a missing
bucket, wrong or insufficient credentials: every reader and writer answers with the package's typed
errors (mapped from obstore's exception types) within the documented retry budget, never a hang or
a raw obstore exception. Also ``convert`` from store to store, and a failed conversion to ``.nc``.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import netCDF4
import numpy as np
import obstore
import pytest
import xarray as xr
from peers import nc_url
from s3_server import S3Server

from xr_zstrings import to_nczarr
from xr_zstrings.errors import (
    ChunkError,
    StoreConnectionError,
    StoreNotFoundError,
    StorePermissionError,
    ZStringsError,
)
from xr_zstrings.write.convert import convert
from xr_zstrings.write.zarr3 import to_zarr_v3

BUCKET = "zstrings-faults"
VALUES = np.array([f"v{i:05d}-{'é' * (i % 4)}" for i in range(20_000)], dtype=object)
# a small retry budget keeps the failing cases short; the defaults are documented in docs/cloud.md
FAST = {"timeout": 5, "connect_timeout": 2, "max_retries": 1, "retry_timeout": 2}


@pytest.fixture
def doomed() -> Iterator[S3Server]:
    """A second moto server (same in-process S3 state) that the test may stop."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    srv = S3Server(endpoint=f"http://{host}:{port}", server=server)
    yield srv
    try:
        server.stop()
    except Exception:  # already stopped by the test
        pass


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _bounded(fn: Callable[[], Any], limit: float = 120) -> BaseException | None:
    """Run ``fn`` on a thread; a hang (no return within ``limit`` s) fails the test."""
    out: list[BaseException | None] = []

    def run() -> None:
        try:
            fn()
            out.append(None)
        except BaseException as e:  # returned to the test
            out.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(limit)
    assert out, f"no answer within {limit} s: the call hangs"
    return out[0]


def _dataset() -> xr.Dataset:
    return xr.Dataset({"name": ("x", VALUES), "n": ("x", np.arange(VALUES.size))})


# ---------------------------------------------------------------------------------------------
# typed errors for every reader and writer
# ---------------------------------------------------------------------------------------------


def _operations(tmp_path: Path) -> dict[str, Callable[[str, dict[str, Any]], Any]]:
    local = tmp_path / "src.zarr"
    to_nczarr(xr.Dataset({"name": ("x", VALUES[:10])}), local)
    small = xr.Dataset({"name": ("x", VALUES[:10])})
    return {
        "open_dataset": lambda url, so: xr.open_dataset(url, engine="zstrings", storage_options=so)["name"].values,
        "to_nczarr": lambda url, so: to_nczarr(small, url, mode="w", storage_options=so),
        "to_nczarr zarr2": lambda url, so: to_nczarr(small, url, mode="w", format="zarr2", storage_options=so),
        "to_nczarr append": lambda url, so: to_nczarr(small.rename(name="other"), url, mode="a", storage_options=so),
        "to_zarr_v3": lambda url, so: to_zarr_v3(small, url, mode="w", storage_options=so),
        "convert": lambda url, so: convert(local, url, mode="w", storage_options=so),
    }


OPERATIONS = ["open_dataset", "to_nczarr", "to_nczarr zarr2", "to_nczarr append", "to_zarr_v3", "convert"]


@pytest.mark.parametrize("op", OPERATIONS)
def test_missing_bucket_is_store_not_found(s3: S3Server, tmp_path: Path, op: str) -> None:
    err = _bounded(lambda: _operations(tmp_path)[op]("s3://no-such-bucket-zs/x.zarr", {**s3.options(), **FAST}))
    assert isinstance(err, StoreNotFoundError), repr(err)
    assert "no-such-bucket-zs" in str(err)


@pytest.mark.parametrize("op", OPERATIONS)
@pytest.mark.parametrize("who", ["wrong key", "no permission"])
def test_bad_credentials_are_store_permission_errors(s3: S3Server, tmp_path: Path, op: str, who: str) -> None:
    s3.bucket(BUCKET)
    url = f"s3://{BUCKET}/creds-{op.replace(' ', '-')}.zarr"
    to_nczarr(xr.Dataset({"name": ("x", VALUES[:10])}), url, mode="w", storage_options=s3.options())
    ops = _operations(tmp_path)
    with s3.enforce_auth() as keys:
        key, secret = ("AKIAWRONGWRONGWRONG", "not-the-secret") if who == "wrong key" else keys["stranger"]
        err = _bounded(lambda: ops[op](url, {**s3.options(key=key, secret=secret), **FAST}))
    assert isinstance(err, StorePermissionError), repr(err)
    assert "credentials" in str(err)


@pytest.mark.parametrize("op", OPERATIONS)
def test_no_server_is_a_connection_error_with_the_retry_budget(tmp_path: Path, op: str) -> None:
    opts = {"endpoint_url": f"http://127.0.0.1:{_free_port()}", "key": "k", "secret": "s", "region": "us-east-1",
            **FAST}
    err = _bounded(lambda: _operations(tmp_path)[op]("s3://some-bucket/x.zarr", opts))
    assert isinstance(err, StoreConnectionError), repr(err)
    assert "max_retries" in str(err) and "retry_timeout" in str(err)


def test_a_server_that_never_answers_times_out() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)  # accepts connections, never sends a byte
    try:
        opts = {"endpoint_url": f"http://127.0.0.1:{listener.getsockname()[1]}", "key": "k", "secret": "s",
                "region": "us-east-1", "timeout": 2, "connect_timeout": 1, "max_retries": 1, "retry_timeout": 1}
        err = _bounded(lambda: xr.open_dataset("s3://b/x.zarr", engine="zstrings", storage_options=opts))
        assert isinstance(err, StoreConnectionError), repr(err)
        err = _bounded(lambda: to_nczarr(_dataset(), "s3://b/x.zarr", storage_options=opts))
        assert isinstance(err, StoreConnectionError), repr(err)
    finally:
        listener.close()


# ---------------------------------------------------------------------------------------------
# the server goes away
# ---------------------------------------------------------------------------------------------


def test_server_gone_mid_read(s3: S3Server, doomed: S3Server) -> None:
    s3.bucket(BUCKET)
    url = f"s3://{BUCKET}/gone-mid-read.zarr"
    to_nczarr(_dataset().chunk({"x": 500}), url, mode="w", storage_options=s3.options())
    ds = xr.open_dataset(url, engine="zstrings", storage_options={**doomed.options(), **FAST})
    assert ds["name"][:3000].values.tolist() == VALUES[:3000].tolist()  # reads while the server is up
    doomed.server.stop()
    err = _bounded(lambda: ds["name"][3000:].values)
    assert isinstance(err, StoreConnectionError), repr(err)
    assert url.split("/")[-1] in str(err)


def test_server_gone_mid_write(s3: S3Server, doomed: S3Server) -> None:
    s3.bucket(BUCKET)
    url = f"s3://{BUCKET}/gone-mid-write.zarr"
    calls: list[int] = []

    def stop_after_some_blocks(block: np.ndarray) -> np.ndarray:
        calls.append(1)
        if len(calls) == 5:  # the server goes away while the writer is writing chunks
            doomed.server.stop()
        return block

    data = _dataset().chunk({"x": 1000})
    data["name"] = data["name"].copy(data=data["name"].data.map_blocks(stop_after_some_blocks, dtype=object))
    err = _bounded(lambda: to_nczarr(data, url, mode="w", storage_options={**doomed.options(), **FAST}))
    assert isinstance(err, StoreConnectionError), repr(err)
    assert len(calls) >= 5
    # the half-written store is refused (never read as complete), by us and by the placeholder root
    with pytest.raises(ZStringsError):
        xr.open_dataset(url, engine="zstrings", storage_options=s3.options())


def test_chunk_truncated_between_open_and_read(s3: S3Server) -> None:
    s3.bucket(BUCKET)
    url = f"s3://{BUCKET}/truncated.zarr"
    to_nczarr(_dataset(), url, mode="w", compressor={"id": "zlib", "level": 1}, storage_options=s3.options())
    ds = xr.open_dataset(url, engine="zstrings", storage_options=s3.options())
    store = s3.obstore(BUCKET)
    keys = [m["path"] for batch in obstore.list(store, prefix="truncated.zarr/name/") for m in batch
            if not m["path"].rsplit("/", 1)[1].startswith(".")]
    raw = bytes(obstore.get(store, keys[0]).bytes())
    obstore.put(store, keys[0], raw[: len(raw) // 2])
    with pytest.raises(ChunkError, match=keys[0].split("/", 1)[1]):
        ds["name"].values  # the read is the test


# ---------------------------------------------------------------------------------------------
# convert: store -> store, and no half-written .nc
# ---------------------------------------------------------------------------------------------


def test_convert_store_to_store(tmp_path: Path) -> None:
    src, dst = tmp_path / "a.zarr", tmp_path / "b.zarr"
    xr.Dataset({"name": ("x", VALUES[:100].astype(str))}).to_zarr(src, zarr_format=2, consolidated=False)
    convert(src, dst)  # xarray's <U strings -> NCZarr NC_STRING, which netcdf-c reads
    with netCDF4.Dataset(nc_url(dst), "r") as nc:
        assert nc["name"][:].tolist() == VALUES[:100].tolist()
    convert(dst, tmp_path / "c.zarr", format="zarr2")
    assert xr.open_dataset(tmp_path / "c.zarr", engine="zstrings")["name"].values.tolist() == VALUES[:100].tolist()


def test_failed_convert_to_nc_leaves_the_old_file_and_nothing_else(tmp_path: Path) -> None:
    src = tmp_path / "src.zarr"
    to_nczarr(_dataset(), src, compressor={"id": "zlib", "level": 1})
    out = tmp_path / "out.nc"
    convert(src, out)
    before = out.read_bytes()
    chunk = next(p for p in sorted((src / "name").iterdir()) if not p.name.startswith("."))
    chunk.write_bytes(chunk.read_bytes()[:10])  # the conversion fails part-way, reading this chunk
    with pytest.raises(ChunkError):
        convert(src, out, mode="w")
    assert out.read_bytes() == before  # the old file, untouched
    with netCDF4.Dataset(out, "r") as nc:
        assert nc["name"][:5].tolist() == VALUES[:5].tolist()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.nc", "src.zarr"]
