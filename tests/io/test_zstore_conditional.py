"""``ZStore``'s conditional writes (io/conditional.py), the only store operations the commit
protocol uses, on each kind of store it commits to: a local folder, object storage (the moto S3
server) and any other zarr-python Store (a ``MemoryStore``). What they wrote is read back through
the store itself (the file on disk, obstore's GET, zarr-python's ``Store.get``)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import obstore
import pytest
import zarr
from s3_server import S3Server
from zarr.buffer import default_buffer_prototype

from xr_zstrings.io.conditional import CommitConflict
from xr_zstrings.io.store import open_store
from xr_zstrings.io.zstore import ZStore

BUCKET = "zstrings-conditional"


@pytest.fixture(params=["local", "s3", "memory"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _open(kind: str, tmp_path: Path, s3: S3Server) -> tuple[ZStore, Any]:
    """The store, and a function reading an object's bytes with the store's own client (None: missing)."""
    if kind == "local":
        (tmp_path / "s.zarr").mkdir()
        zs = open_store(str(tmp_path / "s.zarr"), mode="a")

        def read_local(key: str) -> bytes | None:
            p = tmp_path / "s.zarr" / key
            return p.read_bytes() if p.exists() else None

        return zs, read_local
    if kind == "s3":
        prefix = f"c-{uuid.uuid4().hex}.zarr"
        zs = open_store(f"s3://{s3.bucket(BUCKET)}/{prefix}", mode="a", storage_options=s3.options())

        def read_s3(key: str) -> bytes | None:
            try:
                return bytes(obstore.get(s3.obstore(BUCKET), f"{prefix}/{key}").bytes())
            except (FileNotFoundError, obstore.exceptions.NotFoundError):
                return None

        return zs, read_s3
    store = zarr.storage.MemoryStore()

    def read_memory(key: str) -> bytes | None:
        buf = asyncio.run(store.get(key, prototype=default_buffer_prototype()))
        return None if buf is None else buf.to_bytes()

    return ZStore(store, display="memory"), read_memory


def test_create_only_compare_and_swap_delete_and_list(kind: str, tmp_path: Path, s3: S3Server) -> None:
    zs, read = _open(kind, tmp_path, s3)
    assert zs.get_tagged("a/k") == (None, None)
    tag = zs.put_if("a/k", b"one", create=True)
    assert tag is not None and zs.get_tagged("a/k") == (b"one", tag) and read("a/k") == b"one"
    with pytest.raises(CommitConflict):  # create-only: it exists
        zs.put_if("a/k", b"two", create=True)
    with pytest.raises(CommitConflict):  # compare-and-swap against a tag it no longer has
        zs.put_if("a/k", b"two", match="stale")
    assert read("a/k") == b"one"  # neither losing write changed it
    new = zs.put_if("a/k", b"three", match=tag)
    assert new != tag and read("a/k") == b"three"
    with pytest.raises(CommitConflict):  # the old tag is stale now
        zs.put_if("a/k", b"four", match=tag)
    assert zs.get_tagged_many(["a/k", "missing"]) == [(b"three", new), (None, None)]
    zs.put_if("b/c/d", b"x")
    zs.put_whole([("b/e", b"y"), (".zstrings-journal", b"{}")])
    assert zs.list_keys("") == [".zstrings-journal", "a/k", "b/c/d", "b/e"]
    assert zs.list_keys("b") == ["b/c/d", "b/e"]
    assert sorted(zs.some_objects()) == ["a", "b"]  # (the package's own objects left out)
    zs.delete_keys(["a/k", "b/c/d", "missing"])
    assert read("a/k") is None and read("b/c/d") is None and read("b/e") == b"y"
    assert zs.list_keys("") == [".zstrings-journal", "b/e"]
    if kind == "local":  # a folder emptied by the deletes goes too
        assert not (tmp_path / "s.zarr" / "b" / "c").exists() and (tmp_path / "s.zarr" / "b").is_dir()


def test_age_is_the_servers_where_it_keeps_one(kind: str, tmp_path: Path, s3: S3Server) -> None:
    """Object storage says when an object was last written (its Last-Modified); elsewhere None, and
    the caller goes by the journal's own record."""
    zs, _ = _open(kind, tmp_path, s3)
    zs.put_if("k", b"1")
    age = zs.age("k")
    if kind == "s3":
        assert age is not None and age >= 0.0 and zs.age("missing") is None
    else:
        assert age is None


def test_inspecting_an_s3_store_writes_nothing(s3: S3Server) -> None:
    """``inspect_store`` (what ``zstrings check`` reads) only reads: the probe of whether the server
    honours conditional writes (a probe object written beside the dataset) waits for the first
    write through the protocol. Behind a proxy that drops the conditional headers, a fresh server
    for this process: before, the look alone wrote the probe and warned."""
    import warnings

    from conditional_proxy import ConditionalStripProxy

    from xr_zstrings import ConditionalWriteWarning
    from xr_zstrings.io.commit import inspect_store

    prefix = f"looked-{uuid.uuid4().hex}.zarr"
    obstore.put(s3.obstore(s3.bucket(BUCKET)), f"{prefix}/.zgroup", b'{"zarr_format": 2}')
    proxy = ConditionalStripProxy(s3.host).start()
    try:
        url = f"s3://{BUCKET}/{prefix}"
        with warnings.catch_warnings():
            warnings.simplefilter("error", ConditionalWriteWarning)
            state = inspect_store(open_store(url, storage_options=s3.options(endpoint_url=proxy.endpoint)))
        assert state.describe() == ("complete", "nothing to do") and proxy.stripped == 0
        with pytest.warns(ConditionalWriteWarning, match="ignores conditional writes"):  # (the first write probes)
            open_store(url, mode="a", storage_options=s3.options(endpoint_url=proxy.endpoint)).put_if("k", b"1")
        assert proxy.stripped >= 2
    finally:
        proxy.stop()
