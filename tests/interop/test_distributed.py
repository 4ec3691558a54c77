"""dask.distributed: chunked string variables read from S3 on a LocalCluster of worker processes,
and a dask-backed Dataset written to S3 by the workers, read back by netcdf-c."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dask.array as da
import distributed
import netCDF4
import numpy as np
import pytest
import xarray as xr
import zarr
from peers import nc_url
from s3_server import S3Server

from xr_zstrings.io.store import open_store
from xr_zstrings.write.nczarr import to_nczarr

BUCKET = "zstrings-dist"
VALUES = np.array([f"value {i} · {'ü' * (i % 5)}" for i in range(1000)], dtype=object)


@pytest.fixture(scope="module")
def client() -> Iterator[distributed.Client]:
    """One LocalCluster for the module: 2 worker processes, 1 thread each (startup is slow)."""
    with (distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                   dashboard_address=None, silence_logs=40) as cluster,
          distributed.Client(cluster) as c):
        yield c


@pytest.fixture(scope="module")
def netcdf_c_url(s3: S3Server, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A multi-chunk NC_STRING variable written by netcdf-c, uploaded to S3."""
    path = tmp_path_factory.mktemp("dist") / "multi.zarr"
    nc = netCDF4.Dataset(nc_url(path), "w")
    nc.createDimension("n", VALUES.size)
    nc.createDimension("m", 3)
    v = nc.createVariable("label", str, ("n",), chunksizes=(64,))
    v[:] = VALUES
    w = nc.createVariable("grid", str, ("n", "m"), chunksizes=(100, 2))
    w[:] = np.array([[f"{i}:{j}" for j in range(3)] for i in range(VALUES.size)], dtype=object)
    nc.close()
    return s3.upload(path, BUCKET, "multi.zarr")


def test_read_multichunk_strings_on_local_cluster(client: distributed.Client, s3: S3Server,
                                                  netcdf_c_url: str) -> None:
    serial = xr.open_dataset(netcdf_c_url, engine="zstrings", storage_options=s3.options()).load()
    ds = xr.open_dataset(netcdf_c_url, engine="zstrings", storage_options=s3.options(), chunks={})
    assert ds["label"].data.numblocks == (16,) and ds["grid"].data.numblocks == (10, 2)
    with distributed.get_task_stream(client) as ts:
        futures = client.compute([ds["label"].data, ds["grid"].data])
        label, grid = client.gather(futures)
    workers = {t["worker"] for t in ts.data}
    assert workers and workers <= set(client.scheduler_info()["workers"])  # ran in the worker processes
    np.testing.assert_array_equal(label, serial["label"].values)
    np.testing.assert_array_equal(grid, serial["grid"].values)
    assert label.tolist() == VALUES.tolist()
    # xarray's own compute goes through the same cluster
    xr.testing.assert_identical(ds.compute(), serial)


def test_write_dask_dataset_to_s3_on_local_cluster(client: distributed.Client, s3: S3Server,
                                                   tmp_path: Path) -> None:
    labels = da.from_array(VALUES, chunks=100)
    ds = xr.Dataset({"label": ("n", labels), "value": ("n", da.arange(VALUES.size, chunks=100) * 0.5)},
                    attrs={"title": "written by dask workers"})
    url = f"s3://{s3.bucket(BUCKET)}/written.zarr"
    with distributed.get_task_stream(client) as ts:
        to_nczarr(ds, open_store(url, mode="w", storage_options=s3.options()), mode="w")
    assert len({t["worker"] for t in ts.data}) >= 1 and len(ts.data) >= 10
    local = s3.download(BUCKET, "written.zarr", tmp_path / "written.zarr")
    with netCDF4.Dataset(nc_url(local), "r") as nc:
        assert nc["label"][:].tolist() == VALUES.tolist()
        np.testing.assert_array_equal(nc["value"][:], np.arange(VALUES.size) * 0.5)
        assert nc.title == "written by dask workers"
    back = xr.open_dataset(url, engine="zstrings", storage_options=s3.options())
    assert back["label"].values.tolist() == VALUES.tolist()


def test_distributed_write_is_byte_identical_to_a_serial_write(client: distributed.Client,
                                                               tmp_path: Path) -> None:
    """Two worker processes writing the blocks of one local store give the same files, byte for
    byte, as a serial write (the workers write into the sibling that is swapped in at the end), but
    for the version record every write makes its own (``.zgroup``'s ``xr_zstrings``: lineage and
    commit ids, also in ``.zmetadata``'s copy)."""
    import dask

    labels = da.from_array(VALUES, chunks=50)
    ds = xr.Dataset({"label": ("n", labels), "value": ("n", da.arange(VALUES.size, chunks=50) * 0.5)},
                    attrs={"title": "one store, several writers"})
    with distributed.get_task_stream(client) as ts:
        to_nczarr(ds, tmp_path / "dist.zarr")
    assert len({t["worker"] for t in ts.data}) == 2  # both worker processes wrote chunks
    with dask.config.set(scheduler="synchronous"):
        to_nczarr(ds, tmp_path / "serial.zarr")

    def files(root: Path) -> dict[str, bytes]:
        return {p.relative_to(root).as_posix(): _without_version_record(p.read_bytes()) if p.name in (
            ".zgroup", ".zmetadata") else p.read_bytes() for p in root.rglob("*") if p.is_file()}

    dist, serial = files(tmp_path / "dist.zarr"), files(tmp_path / "serial.zarr")
    assert len(dist) > 40 and dist == serial
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dist.zarr", "serial.zarr"]


def _without_version_record(raw: bytes) -> bytes:
    """A root ``.zgroup`` or ``.zmetadata`` with the version record taken out (the rest unchanged)."""
    import re

    out = re.sub(rb', "xr_zstrings": \{"lineage": "[0-9a-f]+", "commit": "[0-9a-f]+", "version": \d+\}', b"", raw)
    assert out != raw  # every root .zgroup (and its copy) carries one
    return out


@pytest.mark.parametrize("layout", ["vlen-utf8", "arrow"])
def test_to_zarr_v3_from_local_cluster(client: distributed.Client, s3: S3Server, tmp_path: Path,
                                       layout: str) -> None:
    """to_zarr_v3 of a dask-backed Dataset on the cluster: the worker processes write the string
    chunks (metadata once, by the client), locally and to S3; zarr-python and engine="zarr" read it."""
    from xr_zstrings.write.zarr3 import to_zarr_v3

    labels = da.from_array(VALUES, chunks=50)
    ds = xr.Dataset({"label": ("n", labels), "value": ("n", da.arange(VALUES.size, chunks=50) * 0.5)})
    url = f"s3://{s3.bucket(BUCKET)}/v3-{layout}.zarr"
    for target, options in [(tmp_path / "local.zarr", None), (url, s3.options())]:
        with distributed.get_task_stream(client) as ts:
            to_zarr_v3(ds, target, layout=layout, storage_options=options)
        # the 20 block writes (fused by dask with their sums) ran in both worker processes
        assert len(ts.data) >= 20 and len({t["worker"] for t in ts.data}) == 2
        back = xr.open_dataset(target, engine="zstrings", storage_options=options)
        assert back["label"].values.tolist() == VALUES.tolist()
    local = s3.download(BUCKET, f"v3-{layout}.zarr", tmp_path / "from-s3.zarr")
    if layout == "vlen-utf8":  # the peers read the layout they know
        for path in (tmp_path / "local.zarr", local):
            assert zarr.open_array(path / "label", mode="r")[:].tolist() == VALUES.tolist()
            peer = xr.open_dataset(path, engine="zarr")
            assert peer["label"].values.tolist() == VALUES.tolist()
            np.testing.assert_array_equal(peer["value"].values, np.arange(VALUES.size) * 0.5)


def test_zip_targets_from_local_cluster(client: distributed.Client, tmp_path: Path) -> None:
    """A zip target with a cluster running: written by threads of this process (a ZipStore sent to
    a worker would reopen the file for writing there and truncate it); every value comes back."""
    from xr_zstrings.write.zarr3 import to_zarr_v3

    labels = da.from_array(VALUES, chunks=50)
    ds = xr.Dataset({"label": ("n", labels), "value": ("n", da.arange(VALUES.size, chunks=50) * 0.5)})
    to_nczarr(ds, tmp_path / "nc.zip")
    to_zarr_v3(ds, tmp_path / "v3.zip")
    for path in (tmp_path / "nc.zip", tmp_path / "v3.zip"):
        back = xr.open_dataset(path, engine="zstrings")
        assert back["label"].values.tolist() == VALUES.tolist()
        np.testing.assert_array_equal(back["value"].values, np.arange(VALUES.size) * 0.5)
    store = zarr.storage.ZipStore(tmp_path / "v3.zip", mode="r")
    assert zarr.open_array(store, path="label", mode="r")[:].tolist() == VALUES.tolist()
