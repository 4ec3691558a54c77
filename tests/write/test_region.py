"""Region writes (``to_nczarr``/``to_zarr_v3`` with ``region=``) and deferred writes (``compute=False``).

A pipeline initialises a store from a template, then worker processes each write a disjoint slab with
no lock between them; the values are compared with xarray's own ``to_zarr(region=...)`` and read back
by every peer the format has (zarr-python / engine="zarr", netcdf-c through netCDF4).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import dask
import netCDF4
import numpy as np
import pytest
import xarray as xr
import zarr
from dask.delayed import Delayed
from distributed import Client, LocalCluster
from pause_writer import Writer, rows

import xr_zstrings as xz
from xr_zstrings.errors import ConcurrentWriteError, StringOverflowError, StringTruncationWarning, ZStringsError

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # (the worker processes cannot import this file)

T = np.dtypes.StringDType()
N, SLABS, CHUNK = 12, 8, 6  # each slab: two chunks of rows


def template(n: int = N * SLABS) -> xr.Dataset:
    """What the pipeline initialises: fill values everywhere, the chunks the slabs align with."""
    ds = xr.Dataset({"name": ("x", np.full(n, "", dtype=T)), "value": (("x", "y"), np.full((n, 3), np.nan))},
                    coords={"x": np.arange(n)})
    ds["name"].encoding.update(chunks=(CHUNK,), maxstrlen=16)
    ds["value"].encoding.update(chunks=(CHUNK, 3))
    return ds


def slab(i: int) -> xr.Dataset:
    """Slab ``i``: values naming the worker, a missing number among them."""
    x = np.arange(i * N, (i + 1) * N)
    value = (x[:, None] * 10 + np.arange(3)).astype(float)
    value[1, 1] = np.nan
    return xr.Dataset({"name": ("x", np.array([f"w{i}-{j}-é" for j in x], dtype=T)), "value": (("x", "y"), value)},
                      coords={"x": x})


def as_objects(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with its text as Python objects: what xarray's own region writes compare dtypes with."""
    return ds.assign(name=ds["name"].astype(object))


def expected() -> tuple[list[str], np.ndarray]:
    whole = [slab(i) for i in range(SLABS)]
    return ([s for w in whole for s in w["name"].values.tolist()], np.concatenate([w["value"].values for w in whole]))


def init(fmt: str, target: Any, so: dict[str, Any] | None = None) -> None:
    if fmt == "v3":
        xz.to_zarr_v3(template(), target, storage_options=so)
    else:
        xz.to_nczarr(template(), target, format=fmt, storage_options=so)


def write_slab(fmt: str, target: Any, i: int, so: dict[str, Any] | None = None) -> int:
    """One worker's write (run in a worker process): its slab, into the store, no lock."""
    ds, region = slab(i), {"x": slice(i * N, (i + 1) * N)}
    if fmt == "v3":
        xz.to_zarr_v3(ds, target, region=region, storage_options=so)
    else:
        xz.to_nczarr(ds, target, mode="a", region=region, storage_options=so)
    return os.getpid()


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    """One cluster of 8 worker processes for the module, started by a fork server that has imported
    what a region write needs (spawned, each worker imports it again: half a minute on two cores;
    forked from this process, a worker can inherit a lock another thread held: zarr's event loop)."""
    import multiprocessing
    import multiprocessing.forkserver

    multiprocessing.get_context("forkserver").set_forkserver_preload(
        ["distributed", "netCDF4", "zarr", "xarray", "xr_zstrings.write.region", "xr_zstrings.write.session",
         "xr_zstrings.write.append", "xr_zstrings.read.tree", "xr_zstrings.codecs.v2"])
    multiprocessing.forkserver.ensure_running()  # (with those; distributed would start it with its own)
    with dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"}), LocalCluster(
            n_workers=SLABS, processes=True, threads_per_worker=1, dashboard_address=None) as cluster, \
            Client(cluster, set_as_default=False) as c:
        yield c


def texts(values: Any) -> list[str]:
    """Values as text (engine="zarr" reads a pure Zarr v2 ``|S`` array as bytes)."""
    return [s.decode() if isinstance(s, bytes) else str(s) for s in np.asarray(values).tolist()]


def check_values(names: Any, values: Any, reader: str) -> None:
    want_names, want_values = expected()
    assert texts(names) == want_names, reader
    np.testing.assert_array_equal(np.asarray(values, dtype=float), want_values, err_msg=reader)


def read_peers(fmt: str, path: Path) -> None:
    ours = xr.open_dataset(path, engine="zstrings").load()
    check_values(ours["name"].values, ours["value"].values, "zstrings")
    if fmt in ("v3", "zarr2"):
        theirs = xr.open_dataset(path, engine="zarr", zarr_format=3 if fmt == "v3" else 2,
                                 consolidated=False).load()
        check_values(theirs["name"].values, theirs["value"].values, "engine='zarr'")
        group = zarr.open_group(path, mode="r")
        check_values(group["name"][:], group["value"][:], "zarr-python")
    if fmt == "nczarr":
        with netCDF4.Dataset(f"file://{path}#mode=nczarr,file") as nc:
            check_values(nc["name"][:], np.ma.filled(nc["value"][:], np.nan), "netcdf-c")


# ---------------------------------------------------------------------------------------------
# Eight worker processes, disjoint slabs
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["nczarr", "zarr2", "v3"])
def test_eight_worker_processes_write_disjoint_slabs(fmt: str, tmp_path: Path, client: Client) -> None:
    """Eight processes each write their slab of a string and a numeric variable, at once, into one
    store; every reader sees every slab exactly (none lost to a neighbour's write)."""
    path = tmp_path / "s.zarr"
    init(fmt, path)
    pids = client.gather(client.map(write_slab, [fmt] * SLABS, [str(path)] * SLABS, range(SLABS), pure=False))
    assert len(set(pids)) > 1 and os.getpid() not in pids  # (written by worker processes, not here)
    read_peers(fmt, path)


def test_eight_worker_processes_on_object_storage(s3: Any, client: Client) -> None:
    """The same pipeline on S3 (moto): the region writers take no claim, so none refuses another."""
    url, so = f"s3://{s3.bucket('region')}/v3.zarr", s3.options()
    init("v3", url, so)
    client.gather(client.map(write_slab, ["v3"] * SLABS, [url] * SLABS, range(SLABS), [so] * SLABS, pure=False))
    ours = xr.open_dataset(url, engine="zstrings", storage_options=so).load()
    check_values(ours["name"].values, ours["value"].values, "zstrings")
    group = zarr.open_group(zarr.storage.ObjectStore(s3.obstore("region"), read_only=True), path="v3.zarr", mode="r")
    check_values(group["name"][:], group["value"][:], "zarr-python")


def test_a_dask_region_is_written_by_the_cluster(tmp_path: Path, client: Client) -> None:
    """A dask-backed region on a distributed client: its blocks are written by the workers."""
    path = tmp_path / "s.zarr"
    init("nczarr", path)
    whole = xr.concat([slab(i) for i in range(SLABS)], "x").chunk(x=CHUNK)
    with client.as_current(), dask.config.set(scheduler=client):
        xz.to_nczarr(whole, path, mode="a", region={"x": slice(0, N * SLABS)})
    read_peers("nczarr", path)


# ---------------------------------------------------------------------------------------------
# The same values as xarray's own region writes
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["v3", "zarr2", "nczarr"])
def test_same_values_as_xarray_region_writes(fmt: str, tmp_path: Path) -> None:
    """xarray's ``to_zarr(region=...)`` into its own store of the template is the expectation: ours,
    read by engine="zarr" (Zarr) or netcdf-c (NCZarr), holds the same values."""
    ref, ours = tmp_path / "ref.zarr", tmp_path / "ours.zarr"
    as_objects(template()).to_zarr(ref, zarr_format=3 if fmt == "v3" else 2, consolidated=False)
    init(fmt, ours)
    for i in (5, 0, 2, 7, 1, 6, 3, 4):  # (every slab: the template's fill reads differently by reader)
        region = {"x": slice(i * N, (i + 1) * N)}
        as_objects(slab(i)).drop_vars("x").to_zarr(ref, region=region, mode="r+", consolidated=False)
        write_slab(fmt, ours, i)
    want = xr.open_dataset(ref, engine="zarr", consolidated=False).load()
    if fmt == "nczarr":
        with netCDF4.Dataset(f"file://{ours}#mode=nczarr,file") as nc:
            got_names, got_values = nc["name"][:].tolist(), np.ma.filled(nc["value"][:], np.nan)
    else:
        got = xr.open_dataset(ours, engine="zarr", consolidated=False).load()
        got_names, got_values = got["name"].values.tolist(), got["value"].values
    assert texts(got_names) == texts(want["name"].values)
    np.testing.assert_array_equal(got_values, want["value"].values)


def test_region_auto_from_the_coordinate(tmp_path: Path) -> None:
    """region="auto" finds the slab's place from its coordinate values in the store (xarray's rule)."""
    ref, ours = tmp_path / "ref.zarr", tmp_path / "ours.zarr"
    as_objects(template()).to_zarr(ref, zarr_format=3, consolidated=False)
    init("v3", ours)
    as_objects(slab(3)).to_zarr(ref, region="auto", mode="r+", consolidated=False)
    xz.to_zarr_v3(slab(3), ours, region="auto")
    want = xr.open_dataset(ref, engine="zarr", consolidated=False).load()
    got = xr.open_dataset(ours, engine="zarr", consolidated=False).load()
    assert got["name"].values.tolist() == want["name"].values.tolist()
    np.testing.assert_array_equal(got["value"].values, want["value"].values)


# ---------------------------------------------------------------------------------------------
# Refusals
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["nczarr", "v3"])
def test_a_misaligned_region_is_refused(fmt: str, tmp_path: Path) -> None:
    """A region covering part of a chunk would race with the neighbour writing the rest of it:
    refused before anything is written, naming the variable, dimension, region and chunk boundaries."""
    path = tmp_path / "s.zarr"
    init(fmt, path)
    before = sorted(p.relative_to(path) for p in path.rglob("*"))
    ds = slab(0).assign_coords(x=np.arange(3, 3 + N))
    with pytest.raises(ZStringsError) as e:
        if fmt == "v3":
            xz.to_zarr_v3(ds, path, region={"x": slice(3, 3 + N)})
        else:
            xz.to_nczarr(ds, path, mode="a", region={"x": slice(3, 3 + N)})
    msg = str(e.value)
    assert "variable '/name'" in msg or "variable '/value'" in msg
    assert "region['x'] = slice(3, 15)" in msg and "chunks of 6 along 'x'" in msg
    assert "chunk boundaries at [0, 6, 12, 18, 24, 30, '...', 84, 90, 96]" in msg
    assert sorted(p.relative_to(path) for p in path.rglob("*")) == before


def test_what_a_region_write_refuses(tmp_path: Path) -> None:
    """xarray's rules (a variable without a region dimension; no metadata change) and ours (no
    'widen', no mode='w', a store of the other format)."""
    path = tmp_path / "s.zarr"
    init("nczarr", path)
    region = {"x": slice(0, N)}
    with pytest.raises(ValueError, match=r"\.drop_vars\(\['label'\]\)"):
        xz.to_nczarr(slab(0).assign(label=((), "a")), path, mode="a", region=region)
    with pytest.raises(ZStringsError, match="on_overflow='widen' cannot apply to a region write"):
        xz.to_nczarr(slab(0), path, mode="a", region=region, on_overflow="widen")
    with pytest.raises(ZStringsError, match="mode='w' replaces the whole store"):
        xz.to_nczarr(slab(0), path, mode="w", region=region)
    with pytest.raises(ZStringsError, match="goes past the stored size 96"):
        xz.to_nczarr(slab(0), path, mode="a", region={"x": slice(90, 102)})
    with pytest.raises(ZStringsError, match="with to_zarr_v3: it is a Zarr v2 store"):
        xz.to_zarr_v3(slab(0), path, region=region)
    long = slab(0).assign(name=("x", np.array(["é" * 9] * N, dtype=T)))  # 18 bytes, the store keeps 16
    with pytest.raises(StringOverflowError):
        xz.to_nczarr(long, path, mode="a", region=region)
    with pytest.warns(StringTruncationWarning):
        xz.to_nczarr(long, path, mode="a", region=region, on_overflow="truncate")
    assert xr.open_dataset(path, engine="zstrings")["name"].values[0] == "é" * 8


def test_a_region_that_does_not_fit_is_ours_and_what_xarray_raises(tmp_path: Path) -> None:
    """A region the Dataset or the store cannot take raises ``RegionError``: a ``ZStringsError``
    (as every bad input here) and also the ``KeyError``/``TypeError``/``ValueError`` xarray's own
    ``to_zarr(region=...)`` raises for the same mistake, so code written for xarray catches it."""
    from xr_zstrings.errors import RegionError

    path = tmp_path / "s.zarr"
    init("nczarr", path)
    cases = [  # (what xarray raises for it, the call)
        (TypeError, lambda: xz.to_nczarr(slab(0), path, mode="a", region=[("x", slice(0, N))])),
        (ValueError, lambda: xz.to_nczarr(slab(0), path, mode="a", region={"y": slice(0, N)})),
        (TypeError, lambda: xz.to_nczarr(slab(0), path, mode="a", region={"x": 3})),
        (ValueError, lambda: xz.to_nczarr(slab(0), path, mode="a", region={"x": slice(0, N, 2)})),
        (ValueError, lambda: xz.to_nczarr(slab(0).assign(label=((), "a")), path, mode="a", region={"x": slice(0, N)})),
        (KeyError, lambda: xz.to_nczarr(slab(0).assign_coords(x=np.arange(10_000, 10_000 + N)), path, mode="a",
                                        region="auto")),
    ]
    for xarray_raises, call in cases:
        with pytest.raises(RegionError) as info:
            call()
        assert isinstance(info.value, ZStringsError) and isinstance(info.value, xarray_raises)
        assert not str(info.value).startswith("'")  # (not quoted as a KeyError's message would be)
    assert "append the new 'x' values first (mode='a', append_dim='x')" in str(info.value)


def with_missing_name(i: int, lazy: bool) -> xr.Dataset:
    """Slab ``i`` with a missing text value in its first chunk (dask-backed if ``lazy``)."""
    ds = slab(i).assign(name=("x", np.array([None if j == 2 else f"w{i}-{j}" for j in range(N)], dtype=object)))
    return ds.chunk(x=CHUNK) if lazy else ds


@pytest.mark.parametrize("lazy", [False, True], ids=["numpy", "dask"])
def test_v3_missing_text_in_a_region(lazy: bool, tmp_path: Path) -> None:
    """Zarr v3 text: a missing value goes in as the array's string _FillValue, or None in zarrs'
    optional type; with neither it is refused (in memory: before any chunk is written; dask: the
    block holding it is not written). Read back by zarr-python where it reads the type."""
    region = {"x": slice(0, N)}
    plain, filled, optional = tmp_path / "plain.zarr", tmp_path / "filled.zarr", tmp_path / "optional.zarr"
    init("v3", plain)
    with pytest.raises(ZStringsError, match=r"1 missing value\(s\) \(None/NaN\), but .*plain\.zarr key name/zarr\.json "
                       r"has no string _FillValue"):
        xz.to_zarr_v3(with_missing_name(0, lazy), plain, region=region)
    assert zarr.open_array(plain / "name", mode="r")[:CHUNK].tolist() == [""] * CHUNK
    if not lazy:
        np.testing.assert_array_equal(zarr.open_array(plain / "value", mode="r")[:N], np.full((N, 3), np.nan))
    ds = template()
    ds["name"] = ds["name"].astype(object).where(ds["x"] > 0, None)  # (a missing value: the fill is kept)
    ds["name"].encoding.update(chunks=(CHUNK,), _FillValue="?")
    xz.to_zarr_v3(ds, filled)
    xz.to_zarr_v3(with_missing_name(0, lazy), filled, region=region)
    assert zarr.open_array(filled / "name", mode="r")[:4].tolist() == ["w0-0", "w0-1", "?", "w0-3"]
    ds = template().assign(name=("x", np.array([None] * N * SLABS, dtype=object)))
    ds["name"].encoding.update(chunks=(CHUNK,))
    with pytest.warns(UserWarning):
        xz.to_zarr_v3(ds, optional)
    xz.to_zarr_v3(with_missing_name(0, lazy), optional, region=region)
    got = xr.open_dataset(optional, engine="zstrings")["name"].values[:4].tolist()
    assert got[:2] == ["w0-0", "w0-1"] and (got[2] is None or got[2] != got[2])


@pytest.mark.parametrize("lazy", [False, True], ids=["numpy", "dask"])
@pytest.mark.parametrize("dtype", ["U2", "S2"])
def test_v3_fixed_width_text_too_long_for_a_region_is_refused(dtype: str, lazy: bool, tmp_path: Path) -> None:
    """A region of a fixed-width text array xarray wrote (zarr-python's fixed_length_utf32 /
    null_terminated_bytes): a value longer than the width is refused naming it and the stored type,
    and nothing is written; never cut silently by the cast to the stored type."""
    path = tmp_path / "fixed.zarr"
    xr.Dataset({"s": ("x", np.array(["ab", "cd", "ef", "gh"], dtype=dtype))}).to_zarr(
        path, zarr_format=3, mode="w", encoding={"s": {"chunks": (2,)}})
    as_kind = (lambda v: v) if dtype == "U2" else (lambda v: v.encode("ascii"))
    slab = xr.Dataset({"s": ("x", np.array([as_kind("xyz"), as_kind("w")], dtype=object))})
    with pytest.raises(StringOverflowError, match=r"1 value\(s\) do not fit .*fixed\.zarr key s/zarr\.json, which stores "
                       r"(<U2 \(2 characters\)|\|S2 \(2 bytes\)): the longest, value \[0\] = b?'xyz', has 3 "):
        xz.to_zarr_v3(slab.chunk({"x": 2}) if lazy else slab, path, region={"x": slice(0, 2)})
    assert zarr.open_array(path / "s", mode="r")[:].tolist() == [as_kind(v) for v in ("ab", "cd", "ef", "gh")]
    xz.to_zarr_v3(slab.assign(s=("x", np.array([as_kind("xy"), as_kind("w")], dtype=object))), path,
                  region={"x": slice(0, 2)})
    assert zarr.open_array(path / "s", mode="r")[:].tolist() == [as_kind(v) for v in ("xy", "w", "ef", "gh")]


@pytest.mark.parametrize("target", ["path", "local:"])
def test_a_region_write_during_a_live_append_is_refused(target: str, tmp_path: Path) -> None:
    """An append paused while it holds the store (its journal; on a path its writer lock too): a
    region write refuses with ConcurrentWriteError and writes nothing; the append then completes."""
    path = tmp_path / "s.zarr"
    xz.to_nczarr(rows(0, 20, "a"), path, unlimited_dims=["t"])
    spec = {"op": "append", "target": f"{target}{path}" if target == "local:" else str(path), "pause": "writing",
            "start": 20, "n": 10, "tag": "b"}
    append = Writer(spec).start().paused()
    try:
        with pytest.raises(ConcurrentWriteError, match="Nothing was written"):
            xz.to_nczarr(rows(0, 10, "r"), path, mode="a", region={"t": slice(0, 10)})
    finally:
        append.resume()
    assert append.result() == {"outcome": "ok"}
    got = xr.open_dataset(path, engine="zstrings")["name"].values.tolist()
    assert got == [f"a-{i}-é" for i in range(20)] + [f"b-{i}-é" for i in range(20, 30)]


# ---------------------------------------------------------------------------------------------
# compute=False
# ---------------------------------------------------------------------------------------------


def whole(tag: str) -> xr.Dataset:
    return rows(0, 30, tag).chunk(t=10)


def writer(fmt: str) -> Any:
    return (lambda ds, p, **kw: xz.to_zarr_v3(ds, p, **kw)) if fmt == "v3" else \
        (lambda ds, p, **kw: xz.to_nczarr(ds, p, **kw))


@pytest.mark.parametrize("fmt", ["nczarr", "v3"])
def test_compute_false_writes_nothing_until_computed(fmt: str, tmp_path: Path) -> None:
    """The Delayed writes and commits when computed: before, readers see no store (a new target)
    or the old one (mode='w'); after, the new one. Two Delayeds computed together both land."""
    new, old = tmp_path / "new.zarr", tmp_path / "old.zarr"
    write = writer(fmt)
    write(rows(0, 30, "old"), old)
    d_new = write(whole("n"), new, compute=False)
    d_old = write(whole("r"), old, mode="w", compute=False)
    assert isinstance(d_new, Delayed) and isinstance(d_old, Delayed)
    assert not new.exists()
    assert xr.open_dataset(old, engine="zstrings")["name"].values[0] == "old-0-é"
    dask.compute(d_new, d_old)
    assert xr.open_dataset(new, engine="zstrings")["name"].values.tolist() == [f"n-{i}-é" for i in range(30)]
    assert xr.open_dataset(old, engine="zstrings")["name"].values.tolist() == [f"r-{i}-é" for i in range(30)]


def test_compute_false_checks_before_returning(tmp_path: Path) -> None:
    """Errors of the values come at call time, not at compute time."""
    bad = rows(0, 30, "x").assign(name=("t", np.array(["é" * 20] * 30, dtype=T)))
    bad["name"].encoding["maxstrlen"] = 4
    with pytest.raises(StringOverflowError):
        xz.to_nczarr(bad, tmp_path / "s.zarr", compute=False)
    assert not (tmp_path / "s.zarr").exists()


@pytest.mark.parametrize("fmt", ["nczarr", "v3"])
def test_compute_false_on_a_distributed_client(fmt: str, tmp_path: Path, client: Client) -> None:
    """Computed on the cluster: a worker process takes the claim, the blocks run on the workers."""
    path = tmp_path / "s.zarr"
    delayed = writer(fmt)(whole("d"), str(path), compute=False)
    assert not path.exists()
    client.compute(delayed).result()
    assert xr.open_dataset(path, engine="zstrings")["name"].values.tolist() == [f"d-{i}-é" for i in range(30)]


def test_compute_false_region_then_template(tmp_path: Path, client: Client) -> None:
    """xarray's pipeline shape: the template written with compute=False (its values never
    computed), then region writes of each slab from the cluster."""
    path = tmp_path / "s.zarr"
    dask_template = template().chunk(x=CHUNK)
    dask.compute(xz.to_zarr_v3(dask_template, path, compute=False))
    client.gather(client.map(write_slab, ["v3"] * SLABS, [str(path)] * SLABS, range(SLABS), pure=False))
    read_peers("v3", path)


@pytest.mark.parametrize("fmt", ["nczarr", "v3"])
def test_compute_false_append(fmt: str, tmp_path: Path) -> None:
    """An append with compute=False (planned under its claim, so all of it runs when computed):
    readers see the old rows until it is computed, then the appended ones."""
    path = tmp_path / "s.zarr"
    if fmt == "v3":
        xz.to_zarr_v3(rows(0, 30, "a"), path)
    else:
        xz.to_nczarr(rows(0, 30, "a"), path, unlimited_dims=["t"])
    delayed = writer(fmt)(rows(30, 10, "b").chunk(t=5), path, mode="a", append_dim="t", compute=False)
    assert xr.open_dataset(path, engine="zstrings").sizes["t"] == 30
    delayed.compute()
    got = xr.open_dataset(path, engine="zstrings")["name"].values.tolist()
    assert got == [f"a-{i}-é" for i in range(30)] + [f"b-{i}-é" for i in range(30, 40)]
