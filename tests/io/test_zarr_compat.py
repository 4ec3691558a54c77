"""xr_zstrings.zarr_compat: the private zarr-python names we keep, and their public fallbacks.

The first test fails loudly (in the newest-zarr CI jobs first) when a zarr release moves one of
the private names: without it the code would keep working on the slower public fallback and
nobody would notice.  The others run real writes and reads with the public fallbacks forced
(``XR_ZSTRINGS_ZARR_PUBLIC=1``) and compare with the private path and with the peers.
"""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
import zarr
from peers import nc_url, netcdf4_view

from xr_zstrings import zarr_compat as _zarr_compat
from xr_zstrings.io.store import open_store
from xr_zstrings.write.nczarr import to_nczarr
from xr_zstrings.write.zarr3 import to_zarr_v3


def test_private_zarr_names_still_exist():
    missing = _zarr_compat.missing_private_names()
    assert missing == [], (
        f"zarr {zarr.__version__} no longer has {missing}: xr_zstrings now runs on the public "
        "fallback (slower) or fails; update xr_zstrings/zarr_compat.py for this zarr release"
    )


def _dataset() -> xr.Dataset:
    names = np.array(["Zürich", "", "東京", "a" * 300, "x"], dtype=np.dtypes.StringDType())
    return xr.Dataset(
        {"name": ("station", names), "t": ("station", np.arange(5.0))},
        coords={"station": np.arange(5)},
        attrs={"title": "compat"},
    )


@pytest.fixture(params=["private", "public"])
def zarr_path(request, monkeypatch) -> str:
    if request.param == "public":
        monkeypatch.setenv(_zarr_compat.PUBLIC_ENV, "1")
    else:
        monkeypatch.delenv(_zarr_compat.PUBLIC_ENV, raising=False)
    return request.param


def test_nczarr_write_overwrite_and_read(tmp_path, zarr_path):
    """Writes (set_many), overwrite (delete_dir), reads (get_many, list_dir) through each path;
    netcdf-c reads the result."""
    ds = _dataset()
    path = tmp_path / "a.zarr"
    to_nczarr(ds, path)
    to_nczarr(ds.isel(station=slice(0, 3)), path, mode="w")
    got = xr.open_dataset(path, engine="zstrings")
    assert got["name"].values.tolist() == ["Zürich", "", "東京"]
    peer = netcdf4_view(nc_url(path))["/"]["vars"]
    assert list(peer["name"]["values"]) == ["Zürich", "", "東京"]
    assert list(peer["t"]["values"]) == [0.0, 1.0, 2.0]


def test_zip_store_through_each_path(tmp_path, zarr_path):
    path = tmp_path / "a.zip"
    to_nczarr(_dataset(), path)
    got = xr.open_dataset(path, engine="zstrings")
    assert got["name"].values.tolist() == _dataset()["name"].values.tolist()


def test_zarr_v3_codecs_through_each_path(tmp_path, zarr_path):
    """zarr-python's gzip, crc32c and sharding codecs run through run_codec (the private sync
    methods, or the public Codec.decode/encode); zarr-python reads what we wrote and we read what
    it wrote."""
    ds = _dataset()
    path = tmp_path / "v3.zarr"
    to_zarr_v3(ds, path, compressors=[{"name": "gzip", "configuration": {"level": 5}},
                                      {"name": "crc32c"}])
    zr = zarr.open_group(path, mode="r")
    assert [str(v) for v in zr["name"][...]] == ds["name"].values.tolist()
    src = tmp_path / "zp.zarr"
    g = zarr.open_group(src, mode="w", zarr_format=3)
    a = g.create_array("v", shape=(40,), chunks=(4,), shards=(20,), dtype="int32",
                       compressors=[zarr.codecs.GzipCodec(), zarr.codecs.Crc32cCodec()],
                       dimension_names=["n"])
    a[...] = np.arange(40, dtype="int32")
    got = xr.open_dataset(src, engine="zstrings")
    assert got["v"].values.tolist() == list(range(40))


def test_public_fallback_uses_its_own_loop(monkeypatch):
    """The fallback really runs coroutines (not zarr.core.sync): on our own loop thread."""
    import asyncio
    import threading

    async def where() -> str:
        await asyncio.sleep(0)
        return threading.current_thread().name

    monkeypatch.setenv(_zarr_compat.PUBLIC_ENV, "1")
    assert _zarr_compat.sync(where()) == "xr_zstrings-io"
    monkeypatch.delenv(_zarr_compat.PUBLIC_ENV)
    assert _zarr_compat.sync(where()) != "xr_zstrings-io"


def test_local_store_reads_directly_after_zarr_opened_it(tmp_path):
    """The direct file reads give what zarr-python's LocalStore.get gives (missing keys None)."""
    to_nczarr(_dataset(), tmp_path / "a.zarr")
    zs = open_store(tmp_path / "a.zarr")
    keys = [".zgroup", "name/.zarray", "name/0", "nope", "name"]
    first = zs.get_many(keys)  # through zarr-python's async get
    assert zs._local_direct
    assert zs.get_many(keys) == first
    ref = zarr.storage.LocalStore(tmp_path / "a.zarr", read_only=True)
    assert first == [None if (b := ref.get_sync(k)) is None else b.to_bytes() for k in keys]


def test_local_scratch_reads_reuse_one_buffer_per_thread(tmp_path, monkeypatch):
    """``get_many(scratch=True)`` (the chunk reader's fetch) gives the same bytes as plain reads,
    as views of one buffer the thread reuses; empty files and missing keys come back as plain reads
    do, and files beyond the cap in fresh numpy memory of their own (``scratch.fresh``: huge pages)."""
    from xr_zstrings.io import zstore

    ds = xr.Dataset({"v": ("x", np.array([f"value-{i}" for i in range(4000)], dtype=np.dtypes.StringDType()))})
    ds["v"].encoding["chunks"] = (1000,)
    to_nczarr(ds, tmp_path / "a.zarr")
    (tmp_path / "a.zarr" / "empty").write_bytes(b"")
    zs = open_store(tmp_path / "a.zarr")
    keys = ["v/0", "v/1", "nope", "v/2", "empty", "v/3"]
    plain = zs.get_many(keys)
    assert zs._local_direct
    zs.get_many(keys, scratch=True)  # the thread's buffer grows to the group's size
    first = zs.get_many(keys, scratch=True)
    assert [None if v is None else bytes(v) for v in first] == plain
    views = [v for v in first if isinstance(v, memoryview)]
    assert len(views) == 4 and len({id(v.obj) for v in views}) == 1  # then one buffer holds a group
    again = zs.get_many(["v/3", "v/0"], scratch=True)
    assert again[0].obj is views[0].obj  # reused, not a fresh buffer
    assert bytes(again[1]) == plain[0] and bytes(views[0]) == plain[5]  # (the contract: overwritten)
    monkeypatch.setattr(zstore._CHUNK_SCRATCH, "limit", 100)
    big = zs.get_many(["v/1", "v/2"], scratch=True)  # over the cap: fresh memory of each file's size
    assert [bytes(b) for b in big] == plain[1:4:2]
    assert all(isinstance(b.obj, np.ndarray) and b.obj.size == len(p) for b, p in zip(big, plain[1:4:2], strict=True))
    assert big[0].obj is not big[1].obj and big[0].obj is not views[0].obj
    ranged = zs.get_ranges([("v/1", 0, 150), ("v/1", -20, None), ("v/2", 3, 8)], scratch=True)
    assert [bytes(r.data) for r in ranged] == [plain[1][:150], plain[1][-20:], plain[3][3:8]]
    assert isinstance(ranged[0].data.obj, np.ndarray) and ranged[0].data.obj is not ranged[1].data.obj


def test_ranged_reads_same_on_every_path(tmp_path):
    """``ZStore.get_ranges`` (shards read by parts) gives the same bytes read directly from local
    files as through zarr-python's ``ByteRequest`` ranges: a suffix longer than the object is all
    of it, a range past the end what there is, a missing key or a folder None. Only the direct
    path knows each object's version, and refuses a range of a version no longer there."""
    from xr_zstrings.io.zstore import ObjectChanged, ZStore

    root = tmp_path / "r.zarr"
    root.mkdir()
    (root / "a").write_bytes(bytes(range(200)))
    (root / "empty").write_bytes(b"")
    (root / "dir").mkdir()
    ranges = [("a", -16, None), ("a", -500, None), ("a", 10, 20), ("a", 190, 300), ("a", 250, 260),
              ("nope", 0, 4), ("dir", -4, None), ("empty", -16, None), ("a", 0, 200)]
    want = [bytes(range(184, 200)), bytes(range(200)), bytes(range(10, 20)), bytes(range(190, 200)), b"",
            None, None, b"", bytes(range(200))]
    zs = ZStore(zarr.storage.LocalStore(root, read_only=True))
    via_zarr = zs.get_ranges(ranges)
    assert not zs._local_direct
    assert [None if r is None else bytes(r.data) for r in via_zarr] == want
    assert all(r is None or (r.version, r.size) == (None, None) for r in via_zarr)
    direct = open_store(root)
    direct.get_many(["a"])
    assert direct._local_direct
    got = direct.get_ranges(ranges, scratch=True)
    assert [None if r is None else bytes(r.data) for r in got] == want
    assert got[0].size == 200 and got[0].version is not None
    assert direct.get_ranges([("a", 0, 4)], versions=[got[0].version])[0].data == bytes(range(4))
    (root / "b").write_bytes(bytes(range(200)))
    (root / "b").replace(root / "a")  # the same bytes, another file
    with pytest.raises(ObjectChanged) as e:
        direct.get_ranges([("a", 0, 4)], versions=[got[0].version])
    assert e.value.key == "a"
