"""The xarray entry point: laziness, dask chunks, guess_can_open, engine registration."""

from __future__ import annotations

import collections

import pytest
import xarray as xr
from peers import nc_url, write_netcdf_strings
from zarr.abc.store import Store
from zarr.storage import LocalStore, WrapperStore

from xr_zstrings.backend import ZStringsBackendEntrypoint


class CountingStore(WrapperStore):
    """A real LocalStore that records every key read, to prove what opening touches."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.reads: collections.Counter[str] = collections.Counter()

    async def get(self, key, prototype, byte_range=None):
        self.reads[key] += 1
        return await self._store.get(key, prototype, byte_range)


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("lazy") / "s.zarr"
    write_netcdf_strings(path)
    return path


def _is_metadata(key: str) -> bool:
    return key.rsplit("/", 1)[-1].startswith((".z", ".ncz", "zarr.json"))


def test_open_reads_metadata_only_and_indexing_reads_only_needed_chunks(store_path):
    store = CountingStore(LocalStore(store_path, read_only=True))
    ds = xr.open_dataset(store, engine="zstrings")
    assert store.reads and all(_is_metadata(k) for k in store.reads), sorted(store.reads)
    assert max(store.reads.values()) == 1  # each metadata object is read once
    store.reads.clear()
    # temp is (t=5, x=5) in chunks (2, 2): [0, 0:2] lives in chunk 0.0 alone
    assert ds["temp"][0, 0:2].values.tolist() == [0.0, 1.0]
    assert set(store.reads) == {"temp/0.0"}
    store.reads.clear()
    assert ds["names"][1].values[()] == "héllo"
    assert set(store.reads) == {"names/0"}


def test_engine_is_registered_and_guess_can_open(store_path, tmp_path):
    assert "zstrings" in xr.backends.list_engines()
    ep = ZStringsBackendEntrypoint()
    assert ep.guess_can_open(store_path)
    assert ep.guess_can_open(str(store_path))
    assert ep.guess_can_open(nc_url(store_path))
    assert ep.guess_can_open("s3://bucket/key#mode=nczarr,s3")
    # not ours: plain files, missing paths, other objects, pure zarr without NCZarr keys
    (tmp_path / "f.nc").write_bytes(b"CDF\x01")
    assert not ep.guess_can_open(tmp_path / "f.nc")
    assert not ep.guess_can_open(tmp_path / "missing.zarr")
    assert not ep.guess_can_open(12)
    assert not ep.guess_can_open(None)
    assert not ep.guess_can_open("\x00weird")
    (tmp_path / "pure").mkdir()
    (tmp_path / "pure" / ".zgroup").write_text('{"zarr_format": 2}')
    assert not ep.guess_can_open(tmp_path / "pure")


def test_chunks_gives_dask_arrays_on_disk_chunks(store_path):
    ds = xr.open_dataset(store_path, engine="zstrings", chunks={})
    assert ds["temp"].chunks == ((2, 2, 1), (2, 2, 1))
    assert ds["names"].chunks == ((5,),)
    eager = xr.open_dataset(store_path, engine="zstrings")
    xr.testing.assert_identical(ds.load(), eager.load())


def test_open_dataset_of_a_group_and_drop_variables(store_path):
    ds = xr.open_dataset(store_path, engine="zstrings", group="sub", drop_variables=["labels"])
    assert list(ds.data_vars) == ["uses_root_x"]
    assert ds["uses_root_x"].dims == ("x",)


def test_open_groups_relative_to_a_group(store_path):
    groups = xr.open_groups(store_path, engine="zstrings", group="sub")
    assert sorted(groups) == ["/", "/deeper"]
    assert groups["/deeper"]["mixed"].shape == (5, 2, 3)


def test_pickled_lazy_variable_reads_the_same(store_path):
    import pickle

    ds = xr.open_dataset(store_path, engine="zstrings", chunks={})
    again = pickle.loads(pickle.dumps(ds))
    xr.testing.assert_identical(again.load(), ds.load())


class GcWatchingStore(WrapperStore):
    """A real LocalStore that records whether Python's collector was on at each read."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.gc_on: list[bool] = []

    async def get(self, key, prototype, byte_range=None):
        import gc

        self.gc_on.append(gc.isenabled())
        return await self._store.get(key, prototype, byte_range)


@pytest.mark.parametrize("enabled", [True, False], ids=["gc-on", "gc-off"])
def test_opening_pauses_the_collector_and_leaves_it_as_it_was(store_path, enabled):
    """Opening pauses the cyclic collector (wide stores: benchmarks/wide.py) and leaves it as the
    caller had it, also when the open fails and when opens run on several threads at once."""
    import gc
    import threading

    from xr_zstrings import StoreNotFoundError

    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        store = GcWatchingStore(LocalStore(store_path, read_only=True))
        xr.open_dataset(store, engine="zstrings")
        assert store.gc_on and not any(store.gc_on)  # paused during the open's metadata reads
        assert gc.isenabled() is enabled
        with pytest.raises(StoreNotFoundError):
            xr.open_dataset(store_path.parent / "missing.zarr", engine="zstrings")
        assert gc.isenabled() is enabled
        opened: list[int] = []
        threads = [threading.Thread(target=lambda: opened.append(len(xr.open_dataset(store_path, engine="zstrings").variables)))
                   for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(opened) == 4 and len(set(opened)) == 1
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


@pytest.mark.parametrize("opener", ["open_dataset", "open_datatree", "open_groups"])
def test_missing_group_is_an_oserror_as_from_netcdf4_and_zarr(store_path, opener):
    """xarray's backend tests (and users) catch a missing group as OSError: netCDF4 raises OSError,
    zarr-python FileNotFoundError. Ours is both a FileNotFoundError and a ZStringsError."""
    from xr_zstrings import GroupNotFoundError, ZStringsError

    with pytest.raises(OSError, match=r"No group '/nope'.*Available groups: \['/', '/sub'") as info:
        getattr(xr, opener)(store_path, engine="zstrings", group="nope")
    assert isinstance(info.value, GroupNotFoundError | FileNotFoundError | ZStringsError)
    assert isinstance(info.value, FileNotFoundError) and isinstance(info.value, ZStringsError)
    with pytest.raises(OSError):  # the peer on the same store
        xr.open_dataset(nc_url(store_path), engine="netcdf4", group="nope")
    with pytest.raises(ValueError, match="must be a string"):
        getattr(xr, opener)(store_path, engine="zstrings", group=("sub",))


def test_load_async_reads_the_same(store_path):
    """``Dataset.load_async`` (xarray's async loading) reads through engine="zstrings" too."""
    import asyncio

    ds = xr.open_dataset(store_path, engine="zstrings")
    loaded = asyncio.run(ds.load_async())
    xr.testing.assert_identical(loaded, xr.open_dataset(store_path, engine="zstrings").load())
    assert loaded["names"].values.tolist() == xr.open_dataset(store_path, engine="zstrings")["names"].values.tolist()
