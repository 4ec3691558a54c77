"""``xr_zstrings.migrate``: what it writes, what it leaves alone, and how it commits.

The peers' reading of migrated stores over the whole corpus is tests/interop/test_migrate_peers.py;
here: the zarr.json it writes for netcdf-c's own store, hard links (no chunk copied), the v2 store
untouched by an in-place migration, an array rewritten with its reason, refusals, an interrupted
migration, object storage (no chunk read: server-side copies), a zarr-python Store target.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import struct
from pathlib import Path

import netCDF4
import numpy as np
import pytest
import xarray as xr
import zarr
from peers import nc_url

import xr_zstrings
from xr_zstrings import TargetExistsError, UnsupportedError, ZStringsError
from xr_zstrings.io.commit import JOURNAL
from xr_zstrings.write import migrate as migrate_module

BUCKET = "migrate"


def _netcdf_c_store(path: Path) -> Path:
    """netcdf-c 4.10.1's own NCZarr: NC_STRING (one shuffled by 8 bytes over 30-byte chunks), NC_CHAR,
    zlib+shuffle numbers with a fill value and never-written chunks, a scalar, typed attributes, a
    subgroup using the root's dimension."""
    ds = netCDF4.Dataset(nc_url(path), "w")
    try:
        ds.createDimension("x", 5)
        ds.createDimension("t", None)
        ds.createDimension("nchar", 3)
        ds.title = "migrate me"
        ds.ints = np.array([1, -2], "i2")
        names = ds.createVariable("names", str, ("x",))
        names[:] = np.array(["a", "héllo", "中文", "", "z"], dtype=object)
        packed = ds.createVariable("packed", str, ("x",), zlib=True, shuffle=True)
        packed._nczarr_maxstrlen = 6
        packed[:] = np.array(["a", "bb", "ccc", "dddd", "é"], dtype=object)
        code = ds.createVariable("code", "S1", ("x", "nchar"))
        code.set_auto_chartostring(False)
        code[:] = np.frombuffer(b"".join(s.encode().ljust(3, b"\0") for s in ("ab", "c", "xyz", "", "é")),
                                "S1").reshape(5, 3)
        temp = ds.createVariable("temp", "f4", ("t", "x"), zlib=True, shuffle=True, fill_value=np.float32(-999),
                                 chunksizes=(2, 2))
        temp.units = "K"
        temp.valid_range = np.array([0, 400], "f4")
        temp[0:3, :] = np.ma.masked_equal(np.arange(15, dtype="f4").reshape(3, 5), 7)  # 7: the fill
        s = ds.createVariable("scalar", "i4", ())
        s[...] = 7
        sub = ds.createGroup("sub")
        u = sub.createVariable("uses_x", "i2", ("x",))
        u[:] = np.arange(5)
    finally:
        ds.close()
    return path


@pytest.fixture(scope="module")
def nc(tmp_path_factory) -> Path:
    return _netcdf_c_store(tmp_path_factory.mktemp("src") / "nc.zarr")


def _v2_files(root: Path) -> dict[str, tuple[int, str]]:
    """Every file of the v2 store: (inode, sha256)."""
    return {str(p.relative_to(root)): (p.stat().st_ino, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != "zarr.json" and "/c/" not in f"/{p.relative_to(root)}/"}


def _plain(values) -> list:
    """Values as a comparable list, missing values (NaN, None) as None."""
    return [None if v is None or (isinstance(v, float) and v != v) else v
            for v in np.asarray(values, dtype=object).reshape(-1).tolist()]


def _same_as_source(src: Path, out: Path) -> None:
    ours = xr.open_groups(src, engine="zstrings")
    back = xr.open_groups(out, engine="zstrings")
    assert set(ours) == set(back)
    for g in ours:
        for v in ours[g].variables:
            a, b = ours[g][v], back[g][v]
            assert a.dims == b.dims, (g, v)
            assert _plain(a.values) == _plain(b.values), (g, v)


def test_migrated_metadata_of_netcdf_c_store(nc, tmp_path):
    report = xr_zstrings.migrate(nc, tmp_path / "v3.zarr")
    meta = {p: json.loads((tmp_path / "v3.zarr" / p / "zarr.json").read_text())
            for p in ("names", "packed", "code", "temp", "scalar", "sub/uses_x")}
    assert meta["names"]["data_type"] == {"name": "null_terminated_bytes", "configuration": {"length_bytes": 128}}
    assert meta["names"]["attributes"]["_Encoding"] == "utf-8"
    assert meta["code"]["data_type"] == "xr_zstrings.nc_char"
    assert meta["code"]["dimension_names"] == ["x", "nchar"]
    assert meta["code"]["attributes"]["_Encoding"] == "utf-8"  # engine="zstrings" joins and decodes it
    t = meta["temp"]
    assert (t["data_type"], t["fill_value"], t["dimension_names"]) == ("float32", -999.0, ["t", "x"])
    assert t["codecs"] == [{"name": "bytes", "configuration": {"endian": "little"}},
                           {"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}},
                           {"name": "numcodecs.zlib", "configuration": {"level": 4}}]
    assert t["attributes"]["_FillValue"] == base64.b64encode(struct.pack("<d", -999.0)).decode()
    assert t["attributes"]["_nczarr_attr"]["types"]["valid_range"] == "<f4"
    assert (meta["scalar"]["shape"], meta["scalar"]["dimension_names"]) == ([], [])
    assert meta["sub/uses_x"]["dimension_names"] == ["x"]
    assert t["chunk_key_encoding"] == {"name": "default", "configuration": {"separator": "/"}}
    root = json.loads((tmp_path / "v3.zarr" / "zarr.json").read_text())
    assert root["attributes"]["title"] == "migrate me" and "_NCProperties" not in root["attributes"]
    assert set(root["consolidated_metadata"]["metadata"]) == {"names", "packed", "code", "temp", "scalar", "sub",
                                                              "sub/uses_x"}
    # the one array no v3 codec chain decodes unchanged is rewritten, and the report says why
    assert report.rewritten == {"/packed": report.rewritten["/packed"]}
    assert "shuffled its chunks by 8 bytes" in report.rewritten["/packed"]
    assert meta["packed"]["codecs"][1] == {"name": "numcodecs.shuffle", "configuration": {"elementsize": 6}}
    assert not report.metadata_only and len(report.reused) == 5
    _same_as_source(nc, tmp_path / "v3.zarr")
    ds = xr.open_dataset(tmp_path / "v3.zarr", engine="zstrings")
    assert int(ds["temp"].isnull().sum()) == 1 and ds.attrs["ints"].dtype == np.dtype("i2")


def test_new_location_hard_links_every_chunk(nc, tmp_path):
    report = xr_zstrings.migrate(nc, tmp_path / "v3.zarr")
    src_temp = sorted(p for p in (nc / "temp").iterdir() if p.name[0].isdigit())
    assert report.transfer == "hard-linked" and report.chunks_transferred > len(src_temp)
    for p in src_temp:
        i, j = p.name.split(".")
        assert (tmp_path / "v3.zarr" / "temp" / "c" / i / j).stat().st_ino == p.stat().st_ino
    assert not list(tmp_path.glob(".v3.zarr.zstrings-*"))  # nothing left beside the target


def test_in_place_leaves_the_v2_store_unchanged(nc, tmp_path):
    store = tmp_path / "nc.zarr"
    shutil.copytree(nc, store)
    before = _v2_files(store)
    report = xr_zstrings.migrate(store)
    assert report.in_place and report.transfer == "shared"
    after = _v2_files(store)
    assert {k: v[1] for k, v in after.items()} == {k: v[1] for k, v in before.items()}  # same bytes
    temp = json.loads((store / "temp" / "zarr.json").read_text())
    assert temp["chunk_key_encoding"] == {"name": "v2", "configuration": {"separator": "."}}
    assert (store / "packed" / "c" / "0").is_file()  # the rewritten array's v3 chunk beside its v2 one
    _same_as_source(nc, store)  # engine="zstrings" still reads the v2 metadata
    with pytest.warns(UserWarning, match="Both zarr.json"):
        v3 = zarr.open_group(store, mode="r")  # zarr-python prefers Zarr v3
    assert v3.metadata.zarr_format == 3
    assert v3["temp"][0, :].tolist() == [0, 1, 2, 3, 4]
    with netCDF4.Dataset(nc_url(store), "r") as ds:  # and netcdf-c still reads it as NCZarr
        assert ds["names"][:].tolist() == ["a", "héllo", "中文", "", "z"]
    again = xr_zstrings.migrate(store)  # idempotent
    assert again.reused == report.reused
    assert json.loads((store / "temp" / "zarr.json").read_text()) == temp


def test_dry_run_writes_nothing(nc, tmp_path):
    report = xr_zstrings.migrate(nc, tmp_path / "v3.zarr", dry_run=True)
    assert report.dry_run and "/packed" in report.rewritten and not (tmp_path / "v3.zarr").exists()
    assert report.lines()[0].startswith("would migrate")


def test_refusals(nc, tmp_path):
    xr_zstrings.migrate(nc, tmp_path / "v3.zarr")
    with pytest.raises(TargetExistsError, match="mode='w-'"):
        xr_zstrings.migrate(nc, tmp_path / "v3.zarr")
    xr_zstrings.migrate(nc, tmp_path / "v3.zarr", mode="w")
    with pytest.raises(ZStringsError, match="Zarr v3 store already"):
        xr_zstrings.migrate(tmp_path / "v3.zarr", tmp_path / "again.zarr")
    shutil.make_archive(str(tmp_path / "nc"), "zip", nc)
    with pytest.raises(UnsupportedError, match="zip file"):
        xr_zstrings.migrate(tmp_path / "nc.zip")
    xr_zstrings.migrate(tmp_path / "nc.zip", tmp_path / "fromzip.zarr")  # a zip source, copied
    _same_as_source(nc, tmp_path / "fromzip.zarr")


def test_interrupted_migration_leaves_nothing_half_written(nc, tmp_path, monkeypatch):
    """A new location appears whole or not at all; in place, a migration that fails removes the v3
    metadata it wrote (v3 readers see the v2 store), and migrating again completes it."""
    store = tmp_path / "nc.zarr"
    shutil.copytree(nc, store)

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(migrate_module, "_replace", boom)
    real = migrate_module._write

    def write_then_fail(*args, **kwargs):
        real(*args, **kwargs)
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        xr_zstrings.migrate(store)
    assert not list(store.rglob("zarr.json")) and not (store / JOURNAL).exists()
    assert zarr.open_group(store, mode="r").metadata.zarr_format == 2  # no v3 root: the v2 store
    _same_as_source(nc, store)
    monkeypatch.setattr(migrate_module, "_write", write_then_fail)
    with pytest.raises(OSError, match="disk full"):
        xr_zstrings.migrate(nc, tmp_path / "v3.zarr")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nc.zarr"]  # no target, nothing beside it
    monkeypatch.undo()
    xr_zstrings.migrate(store)
    assert zarr.open_group(store, mode="r", zarr_format=3)["temp"][0, :].tolist() == [0, 1, 2, 3, 4]


def test_filters_without_a_v3_codec_are_rewritten(tmp_path):
    import numcodecs

    ds = xr.Dataset({"v": ("x", np.arange(10, dtype="i4")), "d": ("x", np.arange(10, dtype="f8"))})
    ds.to_zarr(tmp_path / "v2.zarr", zarr_format=2, consolidated=False, encoding={
        "v": {"filters": [numcodecs.Base64()], "compressors": [numcodecs.Zlib(1)]},
        "d": {"filters": [numcodecs.Delta(dtype="f8")], "compressors": [numcodecs.Zstd(1)]}})
    report = xr_zstrings.migrate(tmp_path / "v2.zarr", tmp_path / "v3.zarr")
    assert set(report.rewritten) == {"/v"} and "base64" in report.rewritten["/v"]
    d = json.loads((tmp_path / "v3.zarr" / "d" / "zarr.json").read_text())
    assert [c["name"] for c in d["codecs"]] == ["numcodecs.delta", "bytes", "zstd"]
    for engine in ("zarr", "zstrings"):
        xr.testing.assert_identical(xr.open_dataset(tmp_path / "v3.zarr", engine=engine).load(), ds)


def test_into_a_zarr_python_store(nc):
    store = zarr.storage.MemoryStore()
    report = xr_zstrings.migrate(nc, store)
    assert report.transfer == "copied"
    g = zarr.open_group(store, mode="r")
    assert g["temp"][0, :].tolist() == [0, 1, 2, 3, 4]
    assert xr.open_dataset(store, engine="zstrings")["names"].values.tolist() == ["a", "héllo", "中文", "", "z"]


# ---------------------------------------------------------------------------------------------
# Object storage: nothing of a reusable array's chunks is read
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def proxy(s3):
    from latency_proxy import LatencyProxy

    p = LatencyProxy(s3.host, delay=0.0).start()
    yield p
    p.stop()


def _gets(proxy) -> list[str]:
    """The objects GET (not the LISTs, GETs with a query) since the proxy's reset."""
    return [ln.split()[1] for ln in proxy.request_lines if ln.startswith("GET ") and "?" not in ln.split()[1]]


@pytest.mark.parametrize("where", ["in place", "same bucket", "other bucket"])
def test_s3_reads_metadata_only(nc, s3, proxy, tmp_path, where):
    prefix = f"{where.replace(' ', '-')}/nc.zarr"
    url = s3.upload(nc, BUCKET, prefix)
    opts = s3.options(endpoint_url=proxy.endpoint)
    target = {"in place": None, "same bucket": f"s3://{BUCKET}/{where.replace(' ', '-')}/v3.zarr",
              "other bucket": f"s3://{s3.bucket(BUCKET + '-other')}/v3.zarr"}[where]
    proxy.reset()
    report = xr_zstrings.migrate(url, target, storage_options=opts)
    reads = _gets(proxy)
    chunk_reads = [k for k in reads if not k.rsplit("/", 1)[-1].startswith((".z", ".ncz")) and "zarr.json" not in k]
    rewritten = [k for k in chunk_reads if "/packed/" in k]  # the one array that is rewritten
    if where == "other bucket":  # no server-side copy between buckets: every chunk is read once
        assert report.transfer == "copied" and len(chunk_reads) - len(rewritten) == report.chunks_transferred
    else:
        assert chunk_reads == rewritten and len(rewritten) == 1, chunk_reads
        assert report.transfer == ("shared" if target is None else "copied server-side")
    out = target or url
    ref = xr.open_dataset(nc, engine="zstrings")
    bucket, _, key = out[len("s3://"):].partition("/")
    from obstore.store import S3Store
    from s3_server import KEY, REGION, SECRET

    peer_store = zarr.storage.ObjectStore(S3Store(bucket, prefix=key, endpoint=s3.endpoint, access_key_id=KEY,
                                                  secret_access_key=SECRET, region=REGION,
                                                  client_options={"allow_http": True}), read_only=True)
    for got in (xr.open_dataset(out, engine="zstrings", storage_options=s3.options()),
                xr.open_dataset(peer_store, engine="zarr")):
        for v in ("names", "code", "temp"):
            assert _plain(got[v].values) == _plain(ref[v].values), v


def test_text_fill_value_becomes_missing_value(tmp_path):
    """xarray cannot decode a Zarr v3 ``_FillValue`` attribute of a string type (it fails to open the
    variable): the text fill is written as CF's ``missing_value``, which xarray's masking honours, so
    engine="zarr" opens the variable and both engines read the fill as missing, as before migration."""
    ds = xr.Dataset({"s": ("x", np.array(["a", "N/A", "ccc"], dtype=object))})
    ds["s"].attrs["_FillValue"] = "N/A"
    xr_zstrings.to_nczarr(ds, tmp_path / "s.zarr")
    report = xr_zstrings.migrate(tmp_path / "s.zarr", tmp_path / "v3.zarr")
    assert report.metadata_only and not report.notes and not report.missing_lost
    meta = json.loads((tmp_path / "v3.zarr" / "s" / "zarr.json").read_text())
    assert "_FillValue" not in meta["attributes"] and meta["attributes"]["missing_value"] == "N/A"
    assert _plain(xr.open_dataset(tmp_path / "s.zarr", engine="zstrings")["s"].values) == ["a", None, "ccc"]
    for engine in ("zarr", "zstrings"):
        assert _plain(xr.open_dataset(tmp_path / "v3.zarr", engine=engine)["s"].values) == ["a", None, "ccc"]
