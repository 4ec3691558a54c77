"""Object storage: stores written by netcdf-c and zarr-python, uploaded to a real S3 server (moto on
127.0.0.1), read and written through every URL form netcdf-c knows, with request counts and errors."""

from __future__ import annotations

import pickle
import socket
import threading
import zipfile
from pathlib import Path

import netCDF4
import numpy as np
import pytest
import xarray as xr
from peers import nc_url, netcdf4_view, zstrings_view
from s3_server import S3Server

from xr_zstrings.errors import (
    StoreConnectionError,
    StoreNotFoundError,
    StorePermissionError,
    UnsupportedError,
    ZStringsError,
)
from xr_zstrings.io.s3 import parse_s3_url
from xr_zstrings.io.store import open_store
from xr_zstrings.read.tree_v2 import ROOT_OBJECTS
from xr_zstrings.write.nczarr import to_nczarr

BUCKET = "zstrings-test"
#: what an open on object storage asks for first, in one batch: the root objects of every NCZarr
#: generation and Zarr v2, zarr.json and .zmetadata
ROOT_REQUESTS = len(ROOT_OBJECTS) + 2
STATIONS = np.array([f"station-{i:03d}-é{'x' * (i % 7)}" for i in range(50)], dtype=object)


def _netcdf_c_store(url: str) -> None:
    """A small netCDF file as netcdf-c writes it: NC_STRING (multi-chunk), NC_CHAR, a subgroup."""
    ds = netCDF4.Dataset(url, "w")
    ds.title = "written by netcdf-c"
    ds.createDimension("obs", STATIONS.size)
    ds.createDimension("nchar", 6)
    v = ds.createVariable("station", str, ("obs",), chunksizes=(16,))
    v[:] = STATIONS
    c = ds.createVariable("code", "S1", ("obs", "nchar"), chunksizes=(16, 6))
    c[:] = netCDF4.stringtochar(np.array([f"c{i:05d}" for i in range(STATIONS.size)], dtype="S6"))
    t = ds.createVariable("temp", "f4", ("obs",), chunksizes=(25,))
    t[:] = np.arange(STATIONS.size, dtype="f4") / 2
    g = ds.createGroup("sub")
    g.createDimension("y", 3)
    n = g.createVariable("name", str, ("y",))
    n[:] = np.array(["α", "β", "γγ"], dtype=object)
    ds.close()


@pytest.fixture(scope="module")
def stores(s3: S3Server, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """netcdf-c (directory and zip) and zarr-python (v2 consolidated, v3) stores, uploaded."""
    tmp = tmp_path_factory.mktemp("s3src")
    out: dict[str, object] = {"tmp": tmp}
    _netcdf_c_store(nc_url(tmp / "nc.zarr"))
    out["nc_local"] = tmp / "nc.zarr"
    out["nc"] = s3.upload(tmp / "nc.zarr", BUCKET, "netcdf-c/nc.zarr")
    # netcdf-c's zip layout (everything under a top folder named after the file), deflated; the
    # netCDF4 wheel is built without zip support, so the netcdf-c directory store is zipped here
    with zipfile.ZipFile(tmp / "nc.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        for f in sorted((tmp / "nc.zarr").rglob("*")):
            if f.is_file():
                zf.write(f, "nc/" + f.relative_to(tmp / "nc.zarr").as_posix())
    out["zip_local"] = tmp / "nc.zip"
    out["zip"] = s3.upload(tmp / "nc.zip", BUCKET, "netcdf-c/nc.zip")
    ds = xr.Dataset({"station": ("obs", STATIONS), "temp": ("obs", np.arange(STATIONS.size, dtype="f8"))})
    ds["station"].encoding["chunks"] = (16,)
    ds.to_zarr(tmp / "v2.zarr", zarr_format=2, consolidated=True)
    out["v2_local"] = tmp / "v2.zarr"
    out["v2"] = s3.upload(tmp / "v2.zarr", BUCKET, "zarr-python/v2.zarr")
    ds.to_zarr(tmp / "v3.zarr", zarr_format=3, consolidated=True)
    out["v3_local"] = tmp / "v3.zarr"
    out["v3"] = s3.upload(tmp / "v3.zarr", BUCKET, "zarr-python/v3.zarr")
    return out


def _same(a: xr.Dataset, b: xr.Dataset) -> None:
    xr.testing.assert_identical(a.load(), b.load())


# --- URL forms ----------------------------------------------------------------------------------


def test_netcdf_c_store_through_every_url_form(s3: S3Server, stores: dict) -> None:
    local = xr.open_dataset(stores["nc_local"], engine="zstrings")
    h = s3.host
    creds = {"key": "testing", "secret": "testing"}
    forms = {
        "s3://": (stores["nc"], s3.options()),
        "s3://#mode=nczarr,s3": (stores["nc"] + "#mode=nczarr,s3", s3.options()),
        "path-style": (f"http://{h}/{BUCKET}/netcdf-c/nc.zarr#mode=nczarr,s3", creds),
        "virtual-host": (f"http://{BUCKET}.{h}/netcdf-c/nc.zarr#mode=nczarr,s3", s3.options()),
    }
    for name, (url, opts) in forms.items():
        ds = xr.open_dataset(url, engine="zstrings", storage_options=opts)
        assert ds["station"].values.tolist() == STATIONS.tolist(), name
        _same(ds, local)
    # what netcdf-c reads from its own store equals what we read from S3, groups included
    got = zstrings_view(stores["nc"], storage_options=s3.options())
    ref = netcdf4_view(nc_url(stores["nc_local"]))
    assert {p: (g["attrs"], g["vars"]) for p, g in got.items()} == {p: (g["attrs"], g["vars"]) for p, g in ref.items()}


def test_zarr_python_stores(s3: S3Server, stores: dict) -> None:
    for kind in ("v2", "v3"):
        remote = xr.open_dataset(stores[kind], engine="zstrings", storage_options=s3.options())
        _same(remote, xr.open_dataset(stores[f"{kind}_local"], engine="zstrings"))
        assert remote["station"].values.tolist() == STATIONS.tolist()


def test_zip_archive_in_object_storage(s3: S3Server, stores: dict) -> None:
    local = xr.open_dataset(stores["zip_local"], engine="zstrings")
    for url in (stores["zip"], stores["zip"] + "#mode=nczarr,zip"):
        ds = xr.open_dataset(url, engine="zstrings", storage_options=s3.options())
        _same(ds, local)
    tree = xr.open_datatree(stores["zip"], engine="zstrings", storage_options=s3.options())
    assert tree["sub/name"].values.tolist() == ["α", "β", "γγ"]
    with pytest.raises(UnsupportedError, match="read-only"):
        open_store(stores["zip"], mode="w", storage_options=s3.options())


def test_aws_url_forms_parse() -> None:
    loc = parse_s3_url("https://s3.eu-west-1.amazonaws.com/bkt/a/b.zarr#mode=nczarr,s3")
    assert (loc.bucket, loc.key, loc.region) == ("bkt", "a/b.zarr", "eu-west-1")
    loc = parse_s3_url("https://my.bkt.s3.us-west-2.amazonaws.com/a/b.zarr#mode=nczarr,s3")
    assert (loc.bucket, loc.key, loc.region, loc.endpoint) == (
        "my.bkt", "a/b.zarr", "us-west-2", "https://s3.us-west-2.amazonaws.com")
    loc = parse_s3_url("s3://bkt/k#mode=nczarr,s3&aws.region=ap-south-1")
    assert (loc.bucket, loc.key, loc.region, loc.endpoint) == ("bkt", "k", "ap-south-1", None)
    loc = parse_s3_url("https://minio.example:9000/bkt/k.zarr#mode=nczarr,s3")
    assert (loc.bucket, loc.key, loc.endpoint) == ("bkt", "k.zarr", "https://minio.example:9000")
    loc = parse_s3_url("https://bkt.minio.example/k#mode=zarr,s3", {"virtual_hosted_style": True})
    assert (loc.bucket, loc.key, loc.virtual_hosted) == ("bkt", "k", True)
    with pytest.raises(ZStringsError, match="bucket"):
        parse_s3_url("https://minio.example/#mode=nczarr,s3")
    with pytest.raises(ZStringsError, match="mode fragment"):
        open_store("https://minio.example/bkt/k.zarr")


# --- writing ------------------------------------------------------------------------------------


def test_write_nczarr_to_s3_netcdf_c_reads_it(s3: S3Server, tmp_path: Path) -> None:
    s3.bucket(BUCKET)
    ds = xr.Dataset({"station": ("obs", STATIONS), "temp": ("obs", np.arange(STATIONS.size, dtype="f8"))},
                    attrs={"title": "to S3"})
    ds["station"].encoding["chunks"] = (16,)
    url = f"s3://{BUCKET}/written/out.zarr"
    to_nczarr(ds, open_store(url, mode="w", storage_options=s3.options()), mode="w")
    back = xr.open_dataset(url, engine="zstrings", storage_options=s3.options())
    assert back["station"].values.tolist() == STATIONS.tolist()
    local = s3.download(BUCKET, "written/out.zarr", tmp_path / "out.zarr")
    with netCDF4.Dataset(nc_url(local), "r") as nc:
        assert nc["station"][:].tolist() == STATIONS.tolist()
        assert nc.title == "to S3"
    with pytest.raises(ZStringsError, match="not empty"):
        to_nczarr(ds, open_store(url, mode="w", storage_options=s3.options()), mode="w-")


def test_write_zarr_v3_layouts_to_s3_and_read_back(s3: S3Server) -> None:
    """to_zarr_v3 through the same obstore-backed store: every string layout lands in S3 and reads back."""
    from xr_zstrings.write.zarr3 import LAYOUTS, to_zarr_v3

    s3.bucket(BUCKET)
    ds = xr.Dataset({"station": ("obs", STATIONS)})
    ds["station"].encoding["chunks"] = (16,)
    for layout in LAYOUTS:
        url = f"s3://{BUCKET}/v3/{layout}.zarr"
        to_zarr_v3(ds, url, layout=layout, mode="w", storage_options=s3.options())
        back = xr.open_dataset(url, engine="zstrings", storage_options=s3.options())
        assert back["station"].values.tolist() == STATIONS.tolist(), layout
        assert back["station"].encoding["layout"] == layout


# --- requests -----------------------------------------------------------------------------------


def _many_variables(path: Path, n: int) -> None:
    nc = netCDF4.Dataset(nc_url(path), "w")
    nc.createDimension("x", 4)
    for i in range(n):
        v = nc.createVariable(f"v{i:04d}", str, ("x",))
        v[:] = np.array([f"{i}-{j}" for j in range(4)], dtype=object)
    nc.close()


def test_open_200_variables_is_cheap_in_requests(s3: S3Server, tmp_path: Path) -> None:
    _many_variables(tmp_path / "many.zarr", 200)
    url = s3.upload(tmp_path / "many.zarr", BUCKET, "many/nc200.zarr")
    ds = xr.open_dataset(url, engine="zstrings", storage_options=s3.options())
    n = ds.encoding["zstrings_requests"]
    # the root's objects, then .zarray + .zattrs per variable from the _nczarr_group listing, no LIST
    assert n <= 2 * 200 + 10, n
    assert len(ds.data_vars) == 200 and ds["v0199"].values.tolist()[-1] == "199-3"
    # zarr-python's consolidated metadata: a handful of requests whatever the variable count
    xr.open_dataset(tmp_path / "many.zarr", engine="zstrings").to_zarr(
        tmp_path / "many_v2.zarr", zarr_format=2, consolidated=True)
    url2 = s3.upload(tmp_path / "many_v2.zarr", BUCKET, "many/v2_200.zarr")
    ds2 = xr.open_dataset(url2, engine="zstrings", storage_options=s3.options())
    assert ds2.encoding["zstrings_requests"] <= 10, ds2.encoding["zstrings_requests"]
    assert ds2["v0007"].values.tolist() == ds["v0007"].values.tolist()


@pytest.fixture(scope="module")
def slow_s3(s3: S3Server) -> object:
    """The S3 server behind a proxy that adds 200 ms each way and counts sequential round trips (a
    delay well above the time this loaded machine takes to send a few hundred requests)."""
    from latency_proxy import LatencyProxy

    proxy = LatencyProxy(s3.host, delay=0.2).start()
    yield proxy
    proxy.stop()


def test_open_wide_store_round_trips(s3: S3Server, slow_s3: object, tmp_path: Path) -> None:
    """200 variables, every layout: the metadata objects of one tree level go out together, so an
    open costs a few sequential round trips (counted by the proxy: a request that waited for an
    answer is one deeper), not one per 64 objects as before (NCZarr: 8), and the data equal
    engine="zarr"'s."""
    n = 200
    _many_variables(tmp_path / "nc.zarr", n)
    ref = xr.open_dataset(tmp_path / "nc.zarr", engine="zstrings")
    for fmt in (2, 3):
        for cons in (False, True):
            ref.to_zarr(tmp_path / f"v{fmt}{'c' if cons else ''}.zarr", zarr_format=fmt, consolidated=cons)
    from xr_zstrings import to_nczarr

    to_nczarr(ref, tmp_path / "ours.zarr")
    # (round trips, requests) at most: NCZarr: the root's objects, then .zarray + .zattrs of every
    # variable from the _nczarr_group listing; unconsolidated Zarr: root, one LIST, one probe of
    # every child (v2: .zarray + .zattrs, v3: zarr.json); consolidated: the root's objects only
    # (+1: obstore retries a request the loaded server drops, one round trip deeper)
    # zarr-python's consolidated v2: + one LIST (a stale .zmetadata that misses a node is not served);
    # ours (to_nczarr's .zmetadata, in step by its version record): the root's objects only
    cases = {"nc.zarr": (2 + 1, 2 * n + 10), "v2.zarr": (3 + 1, 2 * n + 12), "v3.zarr": (3 + 1, n + 12),
             "v2c.zarr": (2 + 1, 11), "v3c.zarr": (1 + 1, 10), "ours.zarr": (1 + 1, 10)}
    proxy = slow_s3
    for name, (depth, requests) in cases.items():
        url = s3.upload(tmp_path / name, BUCKET, f"wide/{name}")
        proxy.reset()  # type: ignore[attr-defined]  # the slow_s3 fixture's proxy
        ds = xr.open_dataset(url, engine="zstrings", storage_options=s3.options(endpoint_url=proxy.endpoint))  # type: ignore[attr-defined]  # the slow_s3 fixture's proxy
        assert proxy.requests == ds.encoding["zstrings_requests"] <= requests, (name, proxy.requests)  # type: ignore[attr-defined]  # the slow_s3 fixture's proxy
        assert proxy.max_depth <= depth, (name, proxy.max_depth)  # type: ignore[attr-defined]  # the slow_s3 fixture's proxy
        assert proxy.max_in_flight >= min(requests - 12, 2 * n), (name, proxy.max_in_flight)  # type: ignore[attr-defined]  # the slow_s3 fixture's proxy
        if name in ("nc.zarr", "ours.zarr"):  # netcdf-c's read (of its store, and of ours)
            with netCDF4.Dataset(nc_url(tmp_path / name)) as nc:
                names, values = sorted(nc.variables), nc["v0123"][:].tolist()
        else:
            peer = xr.open_dataset(tmp_path / name, engine="zarr", consolidated=name.endswith("c.zarr"))
            names, values = sorted(peer.data_vars), peer["v0123"].values.tolist()
        assert ds["v0123"].values.tolist() == values == [f"123-{j}" for j in range(4)]
        assert sorted(ds.data_vars) == names


def test_open_is_lazy_and_chunks_are_read_independently(s3: S3Server, stores: dict) -> None:
    ds = xr.open_dataset(stores["nc"], engine="zstrings", storage_options=s3.options(), chunks={})
    arr = ds["station"].data
    assert arr.numblocks == (4,)
    backend = ds["station"].variable._data
    assert pickle.loads(pickle.dumps(arr)).blocks[2].compute().tolist() == STATIONS[32:48].tolist()
    del backend
    zstore = open_store(stores["nc"], storage_options=s3.options())
    from xr_zstrings.read.options import ReadOptions
    from xr_zstrings.read.tree import open_tree
    from xr_zstrings.read.variables import group_contents

    tree = open_tree(zstore)
    opened = zstore.requests
    lazy = group_contents(tree, options=ReadOptions()).variables["station"].data
    assert lazy[17:20].tolist() == STATIONS[17:20].tolist()
    assert zstore.requests - opened == 1  # one chunk, one GET
    assert arr.compute().tolist() == STATIONS.tolist()


# --- errors -------------------------------------------------------------------------------------


def test_missing_objects_and_buckets(s3: S3Server) -> None:
    s3.bucket(BUCKET)
    with pytest.raises(StoreNotFoundError, match="No Zarr group"):
        xr.open_dataset(f"s3://{BUCKET}/nothing/here.zarr", engine="zstrings", storage_options=s3.options())
    with pytest.raises(StoreNotFoundError, match="bucket does not exist"):
        xr.open_dataset("s3://no-such-bucket-zs/x.zarr", engine="zstrings", storage_options=s3.options())
    with pytest.raises(StoreNotFoundError, match="does not exist"):
        xr.open_dataset(f"s3://{BUCKET}/missing.zip", engine="zstrings", storage_options=s3.options())


def test_permission_errors(s3: S3Server, stores: dict) -> None:
    """A refused request is not retried: the failed open makes one request per root object it
    asked for, plus the typed probe (counted by a proxy that adds no delay)."""
    from latency_proxy import LatencyProxy

    proxy = LatencyProxy(s3.host, delay=0).start()
    try:
        with s3.enforce_auth() as keys:
            for key, secret in (keys["stranger"], ("AKIAWRONG", "testing")):
                proxy.reset()
                with pytest.raises(StorePermissionError, match="permission denied"):
                    xr.open_dataset(stores["nc"], engine="zstrings",
                                    storage_options=s3.options(key=key, secret=secret, endpoint_url=proxy.endpoint))
                assert 1 <= proxy.requests <= ROOT_REQUESTS + 1, proxy.requests
            admin = s3.options(key=keys["admin"][0], secret=keys["admin"][1])
            ds = xr.open_dataset(stores["nc"], engine="zstrings", storage_options=admin)
            assert ds["station"].values.tolist() == STATIONS.tolist()
    finally:
        proxy.stop()


def test_anonymous_access(s3: S3Server, stores: dict) -> None:
    import json

    import boto3

    public = s3.bucket("zstrings-public")
    policy = {"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": "*", "Action": ["s3:GetObject", "s3:ListBucket"],
        "Resource": [f"arn:aws:s3:::{public}", f"arn:aws:s3:::{public}/*"]}]}
    boto3.client("s3", endpoint_url=s3.endpoint, region_name="us-east-1", aws_access_key_id="testing",
                 aws_secret_access_key="testing").put_bucket_policy(Bucket=public, Policy=json.dumps(policy))
    url = s3.upload(stores["nc_local"], public, "nc.zarr")
    anon = {"endpoint_url": s3.endpoint, "anon": True}
    ds = xr.open_dataset(url, engine="zstrings", storage_options=anon)
    assert ds["station"].values.tolist() == STATIONS.tolist()
    # unsigned requests to a private bucket are refused, with a message that says what to do
    with pytest.raises(StorePermissionError, match="anon=True"):
        xr.open_dataset(stores["nc"], engine="zstrings", storage_options=anon)


def test_unreachable_endpoint_fails_fast() -> None:
    """Nothing listening: a clear error. A server that drops every connection: each request is
    tried at most 1 + max_retries (2) times, never until a timeout."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    with pytest.raises(StoreConnectionError, match="did not answer"):
        xr.open_dataset(f"s3://{BUCKET}/x.zarr", engine="zstrings",
                        storage_options={"endpoint_url": f"http://127.0.0.1:{port}", "anon": True})

    server = socket.create_server(("127.0.0.1", 0))
    accepted = 0

    def drop_all() -> None:
        nonlocal accepted
        while True:
            try:
                conn, _ = server.accept()
            except OSError:  # closed: the test is over
                return
            accepted += 1
            conn.close()

    thread = threading.Thread(target=drop_all, daemon=True)
    thread.start()
    try:
        with pytest.raises(StoreConnectionError, match="did not answer"):
            xr.open_dataset(f"s3://{BUCKET}/x.zarr", engine="zstrings",
                            storage_options={"endpoint_url": f"http://127.0.0.1:{server.getsockname()[1]}",
                                             "anon": True})
    finally:
        server.close()
        thread.join(5)
    assert 1 <= accepted <= (ROOT_REQUESTS + 1) * 3, accepted


def test_bad_storage_options(s3: S3Server, tmp_path: Path) -> None:
    with pytest.raises(ZStringsError, match="Invalid storage_options"):
        open_store(f"s3://{BUCKET}/x.zarr", storage_options={**s3.options(), "no_such_option": 1})
    with pytest.raises(ZStringsError, match="object storage"):
        open_store(tmp_path, storage_options=s3.options())
