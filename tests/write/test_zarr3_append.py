"""``to_zarr_v3`` with the NCZarr writer's powers (issue 38 item 2): a mapping of group paths to
Datasets (``xr.open_groups`` output) as input, ``mode="a"`` with ``append_dim`` (appends) and
without (added variables) through the commit protocol, locally and on S3 (moto), read back by
engine="zstrings", engine="zarr" and zarr-python; two overlapping appends (tests/pause_writer.py).
The kill tests (tests/write/test_kill.py) kill ``v3_append`` at every PUT on S3."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr
from pause_writer import Writer, rows
from s3_server import S3Server

from xr_zstrings import to_zarr_v3
from xr_zstrings.errors import ConcurrentWriteError, ZStringsError
from xr_zstrings.io.commit import JOURNAL

T = np.dtypes.StringDType()
BUCKET = "zstrings-v3-append"
LEASE = 4  # seconds: the writers' XR_ZSTRINGS_LOCK_TIMEOUT


def _part(v: int, n: int, missing: bool = False) -> xr.Dataset:
    """``n`` rows along ``obs`` whose values name the part ``v``: text (``missing``: one value
    missing, written as the string fill "N/A"), numbers, times; and a variable without ``obs``
    (left as stored by appends)."""
    i = np.arange(n)
    name = np.array([f"p{v}-{k}-é" for k in i], dtype=object)
    if missing:
        name[n // 2] = None
    ds = xr.Dataset({"name": ("obs", name, {}), "value": ("obs", i * 0.5 + v),
                     "time": ("obs", pd.date_range("2001-01-01", periods=n, freq="h") + pd.Timedelta(days=v)),
                     "fixed": ("x", np.arange(3, dtype="i4"))}, attrs={"title": f"part {v}"})
    if missing:
        ds["name"].encoding["_FillValue"] = "N/A"
    for var in ds.variables.values():
        var.encoding["chunks"] = (4,)
    return ds


def _want(*parts: xr.Dataset) -> xr.Dataset:
    return xr.concat(parts, dim="obs", data_vars="minimal", coords="minimal", compat="override")


def _target(kind: str, tmp_path: Path, s3: S3Server) -> tuple[Any, dict[str, Any] | None, Any]:
    """(target, storage_options, what zarr-python opens)."""
    if kind == "dir":
        return tmp_path / "t.zarr", None, tmp_path / "t.zarr"
    prefix = f"v3-{uuid.uuid4().hex}.zarr"
    url = f"s3://{s3.bucket(BUCKET)}/{prefix}"
    from obstore.store import S3Store

    obj = S3Store(BUCKET, prefix=prefix, endpoint=s3.endpoint, access_key_id="testing",
                  secret_access_key="testing", region="us-east-1", client_options={"allow_http": True})
    return url, s3.options(), zarr.storage.ObjectStore(obj, read_only=True)


def _names(values: Any) -> list[Any]:
    return [None if v is None or (isinstance(v, float) and np.isnan(v)) else str(v) for v in np.asarray(values).tolist()]


def _check(target: Any, so: dict[str, Any] | None, peer: Any, want: xr.Dataset) -> None:
    """engine="zstrings", engine="zarr" and zarr-python read ``want``'s values."""
    ours = xr.open_dataset(target, engine="zstrings", storage_options=so).load()
    theirs = xr.open_dataset(peer, engine="zarr").load()
    for got in (ours, theirs):
        assert _names(got["name"].values) == _names(want["name"].values)
        np.testing.assert_array_equal(got["value"].values, want["value"].values)
        np.testing.assert_array_equal(got["time"].values.astype("M8[s]"), want["time"].values.astype("M8[s]"))
        np.testing.assert_array_equal(got["fixed"].values, want["fixed"].values)
        assert got.attrs["title"] == "part 1"
    g = zarr.open_group(peer, mode="r")
    assert g["name"][:].tolist() == _names(want["name"].values)
    assert g["value"][:].tolist() == want["value"].values.tolist()


@pytest.mark.parametrize("kind", ["dir", "s3"])
def test_appends_along_a_dimension_read_back_by_every_reader(kind: str, tmp_path: Path, s3: S3Server) -> None:
    """Two appends (in memory, then dask blocks that straddle the chunks) to a store ``to_zarr_v3``
    wrote: every reader reads the three parts in order, text encoded as stored (the missing value
    as the string fill), times in the stored units; a lazy reader opened before keeps its version.
    (Before: ``mode="a"`` was refused.)"""
    target, so, peer = _target(kind, tmp_path, s3)
    to_zarr_v3(_part(1, 10), target, storage_options=so)
    lazy = xr.open_dataset(target, engine="zstrings", storage_options=so, chunks={})
    to_zarr_v3(_part(2, 7), target, mode="a", append_dim="obs", storage_options=so)
    to_zarr_v3(_part(3, 9).chunk({"obs": 5}), target, mode="a", append_dim="obs", storage_options=so)
    _check(target, so, peer, _want(_part(1, 10), _part(2, 7), _part(3, 9)))
    assert _names(lazy["name"].values) == _names(_part(1, 10)["name"].values)  # its version, whole
    assert open_journal(target, so) is None


def test_an_appended_missing_value_is_written_as_the_stored_fill(tmp_path: Path) -> None:
    """Missing text values of an append become the stored string ``_FillValue`` (engine="zstrings"
    masks it back; zarr-python reads the fill), as in the store's first write."""
    target = tmp_path / "t.zarr"
    to_zarr_v3(_part(1, 6, missing=True), target)
    to_zarr_v3(_part(2, 5, missing=True).chunk({"obs": 2}), target, mode="a", append_dim="obs")
    want = _names(_want(_part(1, 6, True), _part(2, 5, True))["name"].values)
    assert _names(xr.open_dataset(target, engine="zstrings")["name"].values) == want
    assert zarr.open_group(target, mode="r")["name"][:].tolist() == ["N/A" if v is None else v for v in want]


def open_journal(target: Any, so: dict[str, Any] | None) -> bytes | None:
    from xr_zstrings.io.store import open_store

    return open_store(target, storage_options=so).get_bytes(JOURNAL)


def test_a_group_mapping_is_written_as_its_groups(tmp_path: Path) -> None:
    """``xr.open_groups`` output (a dict of group path -> Dataset) is written as those groups, as
    ``to_nczarr`` takes it (before: refused as neither a Dataset nor a DataTree); zarr-python and
    both engines read every group back."""
    groups = {"/": xr.Dataset(attrs={"title": "root"}),
              "/obs": xr.Dataset({"s": ("x", np.array(["a", "bb", "ccc"], dtype=T)), "v": ("x", [1.0, 2, 3])}),
              "/obs/deep": xr.Dataset({"n": ("y", np.arange(4, dtype="i2"))}, attrs={"k": 1})}
    target = tmp_path / "g.zarr"
    to_zarr_v3(groups, target)
    for engine in ("zstrings", "zarr"):
        got = xr.open_groups(target, engine=engine)
        assert set(got) == set(groups), engine
        for path, ds in groups.items():
            assert sorted(got[path].variables) == sorted(ds.variables), (engine, path)
            for name, var in ds.variables.items():
                assert got[path][name].values.tolist() == var.values.tolist(), (engine, path, name)
            assert got[path].attrs == ds.attrs, (engine, path)
    assert zarr.open_group(target, mode="r")["obs/deep/n"][:].tolist() == [0, 1, 2, 3]
    to_zarr_v3({"/": xr.Dataset({"z": ("q", [5])})}, target, group="more", mode="w")  # under a group: into the store
    assert xr.open_dataset(target, engine="zarr", group="more")["z"].values.tolist() == [5]
    assert xr.open_dataset(target, engine="zarr", group="obs/deep")["n"].values.tolist() == [0, 1, 2, 3]


def test_mode_a_without_append_dim_adds_variables(tmp_path: Path) -> None:
    """``mode="a"`` without ``append_dim`` adds the variables the store does not hold (text in the
    layout asked, numbers), leaves identical ones alone (a coordinate sent again), refuses changed
    ones naming the fix and updates the group attributes; every reader sees the new variables."""
    target = tmp_path / "t.zarr"
    base = _part(1, 6)
    to_zarr_v3(base, target)
    extra = xr.Dataset({"label": ("obs", np.array([f"l{k}" for k in range(6)], dtype=T)),
                        "score": ("obs", np.arange(6.0)), "fixed": base["fixed"]}, attrs={"more": "yes"})
    to_zarr_v3(extra, target, mode="a")
    for engine in ("zstrings", "zarr"):
        got = xr.open_dataset(target, engine=engine)
        assert got["label"].values.tolist() == [f"l{k}" for k in range(6)]
        assert got["score"].values.tolist() == list(range(6))
        assert got.attrs == {"title": "part 1", "more": "yes"}
        assert _names(got["name"].values) == _names(base["name"].values)
    with pytest.raises(ZStringsError, match=r"already holds it with other values"):
        to_zarr_v3(xr.Dataset({"score": ("obs", np.ones(6))}), target, mode="a")
    assert xr.open_dataset(target, engine="zarr")["score"].values.tolist() == list(range(6))
    assert not (target / JOURNAL).exists()


def test_an_append_with_a_value_the_store_cannot_hold_changes_nothing(tmp_path: Path) -> None:
    """A missing value in an appended text variable stored without a fill or the optional type is
    refused before the commit, and the store reads as before (the write rolled back)."""
    target = tmp_path / "t.zarr"
    ds = xr.Dataset({"s": ("obs", np.array(["a", "b"], dtype=T))})
    to_zarr_v3(ds, target)
    with pytest.raises(ZStringsError, match=r"missing value"):
        to_zarr_v3(xr.Dataset({"s": ("obs", np.array(["c", None], dtype=object))}), target, mode="a",
                   append_dim="obs")
    assert xr.open_dataset(target, engine="zarr")["s"].values.tolist() == ["a", "b"]
    assert not (target / JOURNAL).exists()
    with pytest.raises(ZStringsError, match=r"append_dim='obs' is only used with mode='a'"):
        to_zarr_v3(ds, tmp_path / "other.zarr", append_dim="obs")


@pytest.mark.parametrize("kind", ["s3", "localstore"])
def test_two_overlapping_appends_one_raises_the_other_commits(kind: str, tmp_path: Path, s3: S3Server,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A claims the store and stops while writing its chunks; B appends meanwhile and raises
    ConcurrentWriteError having written nothing; A resumes and commits. Every reader reads the
    base rows then A's, whole; no journal is left."""
    monkeypatch.setenv("XR_ZSTRINGS_LOCK_TIMEOUT", str(LEASE))
    if kind == "s3":
        url = f"s3://{s3.bucket(BUCKET)}/race-{uuid.uuid4().hex}.zarr"
        so: dict[str, Any] | None = s3.options()
        store: Any = url
    else:
        url, so = f"local:{tmp_path / 's.zarr'}", None
        store = zarr.storage.LocalStore(tmp_path / "s.zarr", read_only=False)
    to_zarr_v3(rows(0, 25, "base"), store, storage_options=so)
    spec = {"op": "v3-append", "target": url, "so": so, "env": {"XR_ZSTRINGS_LOCK_TIMEOUT": LEASE}}
    a = Writer({**spec, "start": 25, "n": 30, "tag": "a", "pause": "writing"}).start().paused()
    try:
        with pytest.raises(ConcurrentWriteError, match="another writer"):
            to_zarr_v3(rows(25, 12, "b"), store if kind == "s3" else zarr.storage.LocalStore(tmp_path / "s.zarr"),
                       mode="a", append_dim="t", storage_options=so)
        assert a.resume().result() == {"outcome": "ok"}
    finally:
        a.kill()
    want = [*rows(0, 25, "base")["name"].values.tolist(), *rows(25, 30, "a")["name"].values.tolist()]
    assert xr.open_dataset(store, engine="zstrings", storage_options=so)["name"].values.tolist() == want
    if kind == "localstore":
        assert xr.open_dataset(tmp_path / "s.zarr", engine="zarr")["name"].values.tolist() == want
        assert zarr.open_group(tmp_path / "s.zarr", mode="r")["name"][:].tolist() == want
    else:
        copy = s3.download(BUCKET, url.split(f"s3://{BUCKET}/", 1)[1], tmp_path / "copy.zarr")
        assert zarr.open_group(copy, mode="r")["name"][:].tolist() == want
    assert open_journal(store, so) is None


@pytest.mark.skipif(sys.version_info < (3, 12), reason="icechunk publishes no wheel for Python < 3.12")
def test_an_icechunk_session_store_takes_appends_and_added_variables() -> None:
    """An icechunk session's store: the append and the added variables are written into the
    session (the grown array's zarr.json before its chunks: icechunk refuses a chunk outside an
    array's shape) and committed by its owner; zarr-python and engine="zstrings" read them."""
    import icechunk

    repo = icechunk.Repository.create(icechunk.in_memory_storage())
    session = repo.writable_session("main")
    to_zarr_v3(_part(1, 6), session.store)
    session.commit("first")
    session = repo.writable_session("main")
    to_zarr_v3(_part(2, 5), session.store, mode="a", append_dim="obs")
    to_zarr_v3(xr.Dataset({"extra": ("q", np.arange(3))}), session.store, mode="a")
    session.commit("appended")
    store = repo.readonly_session("main").store
    want = _want(_part(1, 6), _part(2, 5))
    for engine in ("zstrings", "zarr"):
        got = xr.open_dataset(store, engine=engine, **({"consolidated": False} if engine == "zarr" else {}))
        assert _names(got["name"].values) == _names(want["name"].values), engine
        assert got["value"].values.tolist() == want["value"].values.tolist(), engine
        assert got["extra"].values.tolist() == [0, 1, 2], engine


def test_to_nczarr_into_a_v3_store_names_to_zarr_v3s_append_which_does_it(tmp_path: Path) -> None:
    """``to_nczarr(mode="a")`` refuses a Zarr v3 store naming ``to_zarr_v3(mode="a", append_dim=...)``
    as the fix (before: xarray's ``to_zarr``); doing what it says appends, read by zarr-python."""
    from xr_zstrings import to_nczarr
    from xr_zstrings.errors import UnsupportedError

    target = tmp_path / "t.zarr"
    to_zarr_v3(_part(1, 6), target)
    with pytest.raises(UnsupportedError, match=r"to_zarr_v3\(ds, target, mode='a', append_dim=\.\.\.\)"):
        to_nczarr(_part(2, 5), target, mode="a", append_dim="obs")
    to_zarr_v3(_part(2, 5), target, mode="a", append_dim="obs")
    want = _names(_want(_part(1, 6), _part(2, 5))["name"].values)
    assert zarr.open_group(target, mode="r")["name"][:].tolist() == want


_KILLED_AFTER_ROOT = """
import os, pickle, sys
import xr_zstrings
from xr_zstrings.io import commit
with open(sys.argv[2], "rb") as f:
    ds = pickle.load(f)
setattr(commit.Transaction, sys.argv[3], lambda self: os._exit(9))  # killed at that step
xr_zstrings.to_zarr_v3(ds, sys.argv[1], mode="a", append_dim="obs")
"""


@pytest.mark.parametrize("consolidated", [True, False])
@pytest.mark.parametrize("kill_at", ["_fence", "_release_claim"])
def test_an_append_killed_after_its_root_is_kept_by_repair_as_readers_saw_it(tmp_path: Path, consolidated: bool,
                                                                            kill_at: str) -> None:
    """A Zarr v3 append killed after its root zarr.json (the commit point) was written, before its
    claim went (``_release_claim``): every reader already reads the appended rows, and repair rolls
    the write forward (before: a store without consolidated metadata, whose root the append leaves
    as it was, was rolled back, the appended rows readers had seen removed). Killed just before its
    root (``_fence``): repair rolls it back, the rows as before."""
    import pickle
    import subprocess
    import sys

    from xr_zstrings import repair

    target = tmp_path / "t.zarr"
    to_zarr_v3(_part(1, 6), target, consolidated=consolidated)
    (tmp_path / "part2.pickle").write_bytes(pickle.dumps(_part(2, 5)))
    done = subprocess.run([sys.executable, "-c", _KILLED_AFTER_ROOT, str(target), str(tmp_path / "part2.pickle"),
                           kill_at], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 9, done.stderr[-2000:]
    assert (target / JOURNAL).exists()
    committed = kill_at == "_release_claim"
    want = _names((_want(_part(1, 6), _part(2, 5)) if committed else _part(1, 6))["name"].values)
    if committed or consolidated:  # (else the placeholder root: every reader refuses the store)
        assert zarr.open_group(target, mode="r")["name"][:].tolist() == want  # what a reader sees now
    report = repair(target)
    assert ("rolled forward" if committed else "rolled back") in report.action, report.action
    assert not (target / JOURNAL).exists()
    assert zarr.open_group(target, mode="r")["name"][:].tolist() == want
    assert _names(xr.open_dataset(target, engine="zstrings")["name"].values) == want


@pytest.mark.parametrize("consolidated", [True, False])
def test_a_lazy_reader_keeps_its_version_through_an_append(tmp_path: Path, consolidated: bool) -> None:
    """A lazy reader opened before an append reads the rows it opened, whole, with or without the
    consolidated metadata (before: without it, it was told the store had been replaced, because
    the lineage was noted over the append's placeholder root instead of the root it started from)."""
    target = tmp_path / "t.zarr"
    to_zarr_v3(_part(1, 6), target, consolidated=consolidated)
    lazy = xr.open_dataset(target, engine="zstrings", chunks={})
    to_zarr_v3(_part(2, 5), target, mode="a", append_dim="obs")
    assert _names(lazy["name"].values) == _names(_part(1, 6)["name"].values)
    np.testing.assert_array_equal(lazy["value"].values, _part(1, 6)["value"].values)
    want = _names(_want(_part(1, 6), _part(2, 5))["name"].values)
    assert zarr.open_group(target, mode="r")["name"][:].tolist() == want
