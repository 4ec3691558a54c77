"""Lazy selections read into Arrow (issue 39, READ): ``LazyArray.arrow`` (through the backend array
xarray holds) and ``read_arrow`` give the values ``engine="zstrings"`` gives for the same selection,
flattened in C order, missing values as nulls; only the chunks the selection touches are read; the
chunk buffers become Arrow arrays without the numpy read path (no ``str``, no StringDType).

Stores are written by the writers users have: netCDF4 (NCZarr NC_STRING, NC_CHAR), zarr-python
(Zarr v2 ``|O``/``|S`` in C and F order, v3 with never-written chunks, sharded), xarray's
``to_zarr`` (v2 with a string ``_FillValue``, v3) and our ``to_zarr_v3`` for the layouts
zarr-python cannot write. Every read runs with the compiled kernels and without them.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import netCDF4
import numpy as np
import pyarrow as pa
import pytest
import xarray as xr
import zarr
from peers import nc_url, plain
from xarray.core import indexing

import xr_zstrings
from xr_zstrings.backend import ZStringsBackendArray
from xr_zstrings.io.zstore import ZStore
from xr_zstrings.read.chunked import ChunkedArray
from xr_zstrings.read.lazy import LazyArray
from xr_zstrings.write.zarr3 import to_zarr_v3

FILL = "N/A"
NY, NX = 5, 7
CHUNKS = (2, 3)  # chunks that divide neither axis
TEXT = ["a", "héllo", "", "中文字", "😀x", "z" * 30, "b\u00e9", "q"]


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The writers warn about zarr-python's unstable v3 string types and missing values."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def grid(missing: bool = True) -> np.ndarray:
    """(NY, NX) text values, some None where the layout has missing values."""
    out = np.empty((NY, NX), dtype=object)
    out.reshape(-1)[:] = [TEXT[(i * 5) % len(TEXT)] + str(i % 4) for i in range(NY * NX)]
    if missing:
        out[1, 2] = out[4, 6] = out[0, 0] = None
    return out


def backend_array(ds: xr.Dataset, name: str) -> ZStringsBackendArray:
    """The backend array under a lazily opened variable's xarray wrappers (before it is loaded)."""
    return lazy_selection(ds[name])[0]


def lazy_selection(var: xr.DataArray) -> tuple[ZStringsBackendArray, Any]:
    """(the backend array, xarray's own indexer) of a lazily opened and selected variable."""
    data: Any = var.variable._data
    while not isinstance(data, indexing.LazilyIndexedArray):
        data = data.array
    assert isinstance(data.array, ZStringsBackendArray)
    return data.array, data.key


# --------------------------------------------------------------------------------- the writers
# write(path) writes a (y, x) text variable "s" and returns the values every reader should see.


def _netcdf4_string(path: Path) -> np.ndarray:
    values = grid()
    with netCDF4.Dataset(nc_url(path), "w") as nc:
        nc.createDimension("y", NY)
        nc.createDimension("x", NX)
        s = nc.createVariable("s", str, ("y", "x"), fill_value=FILL, chunksizes=CHUNKS)
        s[:] = np.where(np.equal(values, None), FILL, values).astype(object)
    return values


def _netcdf4_char(path: Path) -> np.ndarray:
    values = grid(missing=False)
    width = max(len(v.encode()) for v in values.reshape(-1))
    with netCDF4.Dataset(nc_url(path), "w") as nc:
        nc.createDimension("y", NY)
        nc.createDimension("x", NX)
        nc.createDimension("nchar", width)
        c = nc.createVariable("s", "S1", ("y", "x", "nchar"), chunksizes=(*CHUNKS, width))
        c._Encoding = "utf-8"
        c.set_auto_chartostring(False)
        c[:] = np.array([v.encode() for v in values.reshape(-1)], dtype=f"S{width}").view("S1").reshape(
            NY, NX, width)
    return values


def _zarr_python_v2(dtype: Any, order: Literal["C", "F"]) -> Callable[[Path], np.ndarray]:
    """zarr-python's Zarr v2 array in ``order``; its first chunk row never written (the fill)."""

    def write(path: Path) -> np.ndarray:
        values = grid(missing=False)
        if dtype is not str:  # (|Sn without _Encoding: read as the stored bytes)
            values = np.array([v.encode() for v in values.reshape(-1)], dtype=object).reshape(NY, NX)
        with _quiet():
            a = zarr.open_group(path, mode="w", zarr_format=2).create_array(
                "s", shape=(NY, NX), chunks=CHUNKS, dtype=dtype, order=order, fill_value="" if dtype is str else b"",
                attributes={"_ARRAY_DIMENSIONS": ["y", "x"]})
            a[2:, :] = values[2:, :]
        values[:2, :] = None  # a Zarr v2 fill_value marks missing values (use_zarr_fill_value_as_mask)
        return values

    return write


def _xarray_v2(path: Path) -> np.ndarray:
    values = grid()
    ds = xr.Dataset({"s": (("y", "x"), values)})
    ds["s"].encoding.update({"chunks": CHUNKS, "_FillValue": FILL})
    ds.to_zarr(path, zarr_format=2, consolidated=False)
    return values


def _zarr_python_v3(shards: bool) -> Callable[[Path], np.ndarray]:
    """zarr-python's Zarr v3 vlen-utf8 array (sharded or not); chunks holding only the fill ("")
    are never written."""

    def write(path: Path) -> np.ndarray:
        values = grid(missing=False)
        values[:2, :3] = ""
        with _quiet():
            a = zarr.open_group(path, mode="w", zarr_format=3).create_array(
                "s", shape=(NY, NX), chunks=CHUNKS, shards=(4, 6) if shards else None, dtype=str,
                dimension_names=["y", "x"], fill_value="")
            a[:] = values
        return values

    return write


def _zarr_python_v3_compressed_shards(path: Path) -> np.ndarray:
    """zarr-python's sharded vlen-utf8 array with zstd around each whole shard (so shards are read
    and decompressed whole, not by parts)."""
    from zarr.codecs import ShardingCodec, VLenUTF8Codec, ZstdCodec

    values = grid(missing=False)
    values[:2, :3] = ""
    with _quiet():
        zarr.open_group(path, mode="w", zarr_format=3).create_array(
            "s", shape=(NY, NX), chunks=(4, 6), dtype=str, dimension_names=["y", "x"], fill_value="",
            serializer=ShardingCodec(chunk_shape=CHUNKS, codecs=[VLenUTF8Codec()]), compressors=[ZstdCodec()])[:] = values
    return values


def _zarr_python_v3_transposed(path: Path) -> np.ndarray:
    """zarr-python's vlen-utf8 array whose chunks are stored transposed (a ``transpose`` codec).
    zarr-python 3.1.x stores such string chunks untransposed (and reads them back so: values come
    back moved); there the chunks are framed again by our own v3 encoder, as the spec has them."""
    from zarr.codecs import TransposeCodec

    values = grid(missing=False)
    with _quiet():
        a = zarr.open_group(path, mode="w", zarr_format=3).create_array(
            "s", shape=(NY, NX), chunks=CHUNKS, dtype=str, dimension_names=["y", "x"],
            filters=[TransposeCodec(order=(1, 0))], compressors=None)
        a[:] = values
    if tuple(int(x) for x in zarr.__version__.split(".")[:2]) < (3, 4):
        from xr_zstrings.codecs.v3 import V3Pipeline

        meta = json.loads((path / "s" / "zarr.json").read_text())
        pipe = V3Pipeline.from_metadata(meta["codecs"], data_type="string", dtype=np.dtypes.StringDType(),
                                        chunk_shape=CHUNKS)
        for i in range(-(-NY // CHUNKS[0])):
            for j in range(-(-NX // CHUNKS[1])):
                block = np.full(CHUNKS, "", dtype=np.dtypes.StringDType())
                part = values[i * CHUNKS[0]:(i + 1) * CHUNKS[0], j * CHUNKS[1]:(j + 1) * CHUNKS[1]]
                block[:part.shape[0], :part.shape[1]] = part
                (path / "s" / "c" / str(i) / str(j)).write_bytes(pipe.encode(block))
    return values


def _to_zarr_v3(layout: str) -> Callable[[Path], np.ndarray]:
    def write(path: Path) -> np.ndarray:
        values = grid()
        ds = xr.Dataset({"s": (("y", "x"), values)})
        ds["s"].encoding["chunks"] = CHUNKS
        with _quiet():  # (missing values: zarrs' optional type around the layout)
            to_zarr_v3(ds, path, layout=layout, compressors=[{"name": "zstd", "configuration": {"level": 1}}])
        return values

    return write


WRITERS: dict[str, Callable[[Path], np.ndarray]] = {
    "netcdf4-NC_STRING": _netcdf4_string,
    "netcdf4-NC_CHAR": _netcdf4_char,
    "zarr2-O-C": _zarr_python_v2(str, "C"),
    "zarr2-O-F": _zarr_python_v2(str, "F"),
    "zarr2-S-F": _zarr_python_v2("S40", "F"),
    "xarray-v2-O-fill": _xarray_v2,
    "zarr3-vlen-utf8": _zarr_python_v3(False),
    "zarr3-sharded": _zarr_python_v3(True),
    "zarr3-shards-compressed-whole": _zarr_python_v3_compressed_shards,
    "zarr3-transposed": _zarr_python_v3_transposed,
    "to_zarr_v3-arrow-optional": _to_zarr_v3("arrow"),
    "to_zarr_v3-zarrs.vlen-optional": _to_zarr_v3("zarrs.vlen"),
}

SELECTIONS: list[tuple[Any, ...]] = [
    (),
    (slice(None, None, 2), slice(1, None, 3)),
    (np.array([4, 0, 2]), slice(None, None, -2)),
    (1, np.array([6, 0, 3])),
    (slice(3, 0, -1), -2),
    (np.array([], dtype=np.int64), slice(None)),
    (slice(1, 4), slice(2, 7)),
]


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, np.ndarray]]:
    """Each writer's store, written once for the module."""
    out = {}
    for name, write in WRITERS.items():
        path = tmp_path_factory.mktemp(name.replace(".", "_")) / "s.zarr"
        out[name] = (path, write(path))
    return out


def _isel(key: tuple[Any, ...]) -> dict[str, Any]:
    return dict(zip(("y", "x"), key, strict=False))


@pytest.mark.parametrize("name", list(WRITERS))
def test_a_lazy_selection_into_arrow_is_the_xarray_path(stores, name, kernels):
    """Each selection (steps, negative steps, int arrays, ints, empty): the backend array's
    ``arrow`` is engine="zstrings"'s values for it, flattened in C order, missing as null, typed
    large_string; ``read_arrow`` is the whole variable."""
    path, written = stores[name]
    typ = pa.large_binary() if name == "zarr2-S-F" else pa.large_string()
    # (a bytes fill is masked by xarray's CF decoding, above the backend array: compare unmasked)
    opts = {"mask_and_scale": False} if name == "zarr2-S-F" else {}
    with xr.open_dataset(path, engine="zstrings", **opts) as ds:
        arr = backend_array(ds, "s")
        assert opts or plain(ds["s"].values) == plain(written)  # (the store holds what was written)
        for key in SELECTIONS:
            want = plain(ds["s"].isel(_isel(key)).values)
            got = arr.arrow(key)
            assert isinstance(got, pa.ChunkedArray) and got.type == typ, (key, got.type)
            assert got.to_pylist() == want, key
    for key in SELECTIONS:
        with xr.open_dataset(path, engine="zstrings", **opts) as ds:  # xarray's own indexer of a lazy selection
            lazy, indexer = lazy_selection(ds["s"].isel(_isel(key)))
            assert lazy.arrow(indexer).to_pylist() == plain(ds["s"].isel(_isel(key)).values), key
    whole = xr_zstrings.read_arrow(path, "s")
    assert whole.type == typ and whole.to_pylist() == plain(written)


@pytest.mark.parametrize("name", list(WRITERS))
def test_chunks_become_arrow_without_the_numpy_read(stores, name, kernels, monkeypatch):
    """Every layout here is read straight from its chunk buffers: the numpy read path (which builds
    StringDType or str objects) is never taken."""
    path, written = stores[name]

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the numpy read path was taken")

    with xr.open_dataset(path, engine="zstrings", mask_and_scale=name != "zarr2-S-F") as ds:
        arr = backend_array(ds, "s")
        want = plain(ds["s"].values[::2][:, [5, 1]])
        monkeypatch.setattr(ChunkedArray, "read", refuse)
        monkeypatch.setattr(ChunkedArray, "read_into", refuse)
        monkeypatch.setattr(LazyArray, "_getitem", refuse)
        assert arr.arrow((slice(None, None, 2), np.array([5, 1]))).to_pylist() == want
        assert xr_zstrings.read_arrow(path, "s").to_pylist() == plain(written)


class _Spy:
    """The store keys a read fetches (ZStore.get_many and get_ranges, shard parts included)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.keys: list[str] = []
        real_many, real_ranges = ZStore.get_many, ZStore.get_ranges

        def get_many(store: ZStore, keys: Any, **kw: Any) -> Any:
            self.keys += list(keys)
            return real_many(store, keys, **kw)

        def get_ranges(store: ZStore, ranges: Any, **kw: Any) -> Any:
            self.keys += [r[0] for r in ranges]
            return real_ranges(store, ranges, **kw)

        monkeypatch.setattr(ZStore, "get_many", get_many)
        monkeypatch.setattr(ZStore, "get_ranges", get_ranges)

    def chunks(self) -> set[str]:
        got = {k.rsplit("s/", 1)[-1] for k in self.keys if "/s/" in "/" + k and not k.endswith((".zarray", "zarr.json", ".zattrs"))}
        self.keys.clear()
        return got


@pytest.mark.parametrize("writer", ["xarray-v2", "xarray-v3", "to_zarr_v3-arrow", "zarr3-sharded"])
def test_only_the_chunks_a_selection_touches_are_read(tmp_path, writer, kernels, monkeypatch):
    """1,000 values in 100 chunks of 10: a run, an int array and a step read their chunks only."""
    values = np.array([f"v{i}-é" for i in range(1000)], dtype=object)
    path = tmp_path / "s.zarr"
    with _quiet():
        if writer == "zarr3-sharded":  # shards of 50: the inner chunks are the chunks read
            zarr.open_group(path, mode="w", zarr_format=3).create_array(
                "s", shape=(1000,), chunks=(10,), shards=(50,), dtype=str, dimension_names=["x"])[:] = values
        elif writer == "to_zarr_v3-arrow":
            ds = xr.Dataset({"s": ("x", values)})
            ds["s"].encoding["chunks"] = (10,)
            to_zarr_v3(ds, path, layout="arrow")
        else:
            ds = xr.Dataset({"s": ("x", values)})
            ds["s"].encoding["chunks"] = (10,)
            ds.to_zarr(path, zarr_format=2 if writer == "xarray-v2" else 3, consolidated=False)
    sep = "." if writer == "xarray-v2" else "c/"
    with xr.open_dataset(path, engine="zstrings") as ds:
        arr = backend_array(ds, "s")
        spy = _Spy(monkeypatch)
        cases = [((slice(205, 215),), [20, 21]), ((np.array([995, 5]),), [0, 99]),
                 ((slice(None, None, 300),), [0, 30, 60, 90]), ((slice(998, 994, -1),), [99])]
        for key, chunks in cases:
            got = arr.arrow(key)
            assert got.to_pylist() == values[key].tolist(), key
            if writer == "zarr3-sharded":  # one object per shard, read by its inner chunks' byte ranges
                assert spy.chunks() == {f"c/{c // 5}" for c in chunks}, key
            else:
                assert spy.chunks() == {f"{sep}{c}" if sep == "c/" else str(c) for c in chunks}, key


def test_one_arrow_chunk_per_stored_chunk_where_chunks_are_runs(tmp_path, kernels):
    """1-D, and 2-D chunks spanning whole rows, keep one Arrow chunk per stored chunk (nothing
    concatenated); chunks splitting the rows are put in order one band of chunk rows at a time."""
    values = np.array([f"s{i}" for i in range(24)], dtype=object).reshape(6, 4)
    ds = xr.Dataset({"a": ("x", values.reshape(-1)), "rows": (("y", "z"), values), "boxes": (("y", "z"), values)})
    ds["a"].encoding["chunks"] = (5,)
    ds["rows"].encoding["chunks"] = (4, 4)
    ds["boxes"].encoding["chunks"] = (4, 3)
    ds.to_zarr(tmp_path / "s.zarr", zarr_format=3, consolidated=False)
    one = xr_zstrings.read_arrow(tmp_path / "s.zarr", "a")
    assert one.num_chunks == 5 and one.to_pylist() == values.reshape(-1).tolist()
    rows = xr_zstrings.read_arrow(tmp_path / "s.zarr", "rows")
    assert rows.num_chunks == 2 and rows.to_pylist() == values.reshape(-1).tolist()
    boxes = xr_zstrings.read_arrow(tmp_path / "s.zarr", "boxes")
    assert boxes.num_chunks == 2 and boxes.to_pylist() == values.reshape(-1).tolist()


def test_never_written_chunks_of_a_null_fill_are_nulls(tmp_path, kernels):
    """zarr-python's Zarr v2 ``fill_value: null`` object array, one chunk written: the others read
    as missing (engine="zstrings" NaN/NA), Arrow nulls; so do places beyond a chunk of the edge."""
    path = tmp_path / "s.zarr"
    with _quiet():
        a = zarr.open_group(path, mode="w", zarr_format=2).create_array(
            "s", shape=(10,), chunks=(4,), dtype=str, fill_value=None, attributes={"_ARRAY_DIMENSIONS": ["x"]})
        a[4:8] = np.array(["a", "", "é", "d"], dtype=object)
    with xr.open_dataset(path, engine="zstrings") as ds:
        arr = backend_array(ds, "s")
        want = plain(ds["s"].values)
        assert want == [None] * 4 + ["a", "", "é", "d"] + [None] * 2
        got = arr.arrow(())
        assert got.to_pylist() == want and got.null_count == 6
        assert arr.arrow((np.array([9, 4, 0]),)).to_pylist() == [None, "a", None]
    assert xr_zstrings.read_arrow(path, "s").to_pylist() == want


def test_bytes_and_layouts_without_an_arrow_path(tmp_path, kernels):
    """string_dtype="bytes" gives large_binary; an NC_CHAR with a non-UTF-8 ``_Encoding`` and a
    number variable come through the numpy read (same values, numbers keep their type)."""
    path = tmp_path / "s.zarr"
    values = ["café", "naïve", "", "x"]
    with netCDF4.Dataset(nc_url(path), "w") as nc:
        nc.createDimension("x", 4)
        nc.createDimension("nchar", 6)
        c = nc.createVariable("latin", "S1", ("x", "nchar"), chunksizes=(3, 6))
        c._Encoding = "latin-1"
        c.set_auto_chartostring(False)
        c[:] = np.array([v.encode("latin-1") for v in values], dtype="S6").view("S1").reshape(4, 6)
        nc.createVariable("n", "i4", ("x",))[:] = np.arange(4)
        nc.createVariable("s", str, ("x",), chunksizes=(3,))[:] = np.array(values, dtype=object)
    with xr.open_dataset(path, engine="zstrings") as ds:
        assert backend_array(ds, "latin").arrow(()).to_pylist() == values == plain(ds["latin"].values)
        n = backend_array(ds, "n").arrow((slice(None, None, -1),))
        assert n.type == pa.int32() and n.to_pylist() == [3, 2, 1, 0]
    with xr.open_dataset(path, engine="zstrings", string_dtype="bytes") as ds:
        got = backend_array(ds, "s").arrow((np.array([1, 0]),))
        assert got.type == pa.large_binary() and got.to_pylist() == [v.encode() for v in values[1::-1]]
    assert xr_zstrings.read_arrow(path, "latin").to_pylist() == values
    assert xr_zstrings.read_arrow(path, "s", string_dtype="bytes").to_pylist() == [v.encode() for v in values]


def test_a_selection_over_s3(tmp_path, s3, kernels, monkeypatch):
    """A 2-D store on (moto) S3: a lazy selection's Arrow values are the xarray path's, reading only
    its chunks; ``read_arrow`` takes storage_options."""
    local = tmp_path / "s.zarr"
    written = _xarray_v2(local)
    url = s3.upload(local, s3.bucket("arrow-read"), tmp_path.name)
    opts = s3.options()
    with xr.open_dataset(url, engine="zstrings", storage_options=opts) as ds:
        arr = backend_array(ds, "s")
        spy = _Spy(monkeypatch)
        key = (slice(0, 2), np.array([6, 1]))
        assert arr.arrow(key).to_pylist() == plain(ds["s"].isel(_isel(key)).values) == plain(written[:2][:, [6, 1]])
        assert spy.chunks() == {"0.0", "0.2"}
    assert xr_zstrings.read_arrow(url, "s", storage_options=opts).to_pylist() == plain(written)


def test_beyond_the_stored_shape_of_an_unlimited_dimension(tmp_path, kernels):
    """netCDF4 grows an unlimited dimension with another variable: the places past a string
    variable's stored length (and its never-written chunks) read as its fill, masked: nulls."""
    path = tmp_path / "s.zarr"
    with netCDF4.Dataset(nc_url(path), "w") as nc:
        nc.createDimension("t", None)
        nc.createVariable("s", str, ("t",), chunksizes=(2,), fill_value=FILL)[0:3] = np.array(["a", "", "中"], dtype=object)
        nc.createVariable("n", "i4", ("t",), chunksizes=(2,))[0:7] = np.arange(7)
    with xr.open_dataset(path, engine="zstrings") as ds:
        arr = backend_array(ds, "s")
        want = plain(ds["s"].values)
        assert want == ["a", "", "中", None, None, None, None]
        assert arr.arrow(()).to_pylist() == want
        assert arr.arrow((np.array([6, 2, 4]),)).to_pylist() == [None, "中", None]
    assert xr_zstrings.read_arrow(path, "s").to_pylist() == want


def test_nc_char_split_across_chunks_and_kept_as_characters(tmp_path, kernels, monkeypatch):
    """NC_CHAR whose chunks split the rows (netCDF4 chunksizes (3, 2) of 3 characters) reads into
    Arrow from the stored characters (no str, no StringDType); with concat_characters=False each
    character is a large_binary value, as engine="zstrings" returns them."""
    path = tmp_path / "s.zarr"
    values = ["ab", "é", "", "xyz", "q"]
    with netCDF4.Dataset(nc_url(path), "w") as nc:
        nc.createDimension("x", 5)
        nc.createDimension("nchar", 3)
        c = nc.createVariable("s", "S1", ("x", "nchar"), chunksizes=(3, 2))
        c._Encoding = "utf-8"
        c.set_auto_chartostring(False)
        c[:] = np.array([v.encode() for v in values], dtype="S3").view("S1").reshape(5, 3)
    for key in [(), (np.array([3, 0]),), (slice(None, None, -2),)]:
        with xr.open_dataset(path, engine="zstrings") as ds:
            arr = backend_array(ds, "s")
            want = ds["s"].isel(x=key[0] if key else slice(None)).values.tolist()
            assert want == list(np.array(values, dtype=object)[key[0] if key else slice(None)])
            with monkeypatch.context() as m:
                m.setattr(LazyArray, "_getitem", lambda *a: pytest.fail("the numpy read path was taken"))
                assert arr.arrow(key).to_pylist() == want
    with xr.open_dataset(path, engine="zstrings", concat_characters=False) as ds:
        arr = backend_array(ds, "s")
        got = arr.arrow((slice(0, 2), slice(None)))
        assert got.type == pa.large_binary()
        assert got.to_pylist() == ds["s"].values[:2].ravel().tolist() == [b"a", b"b", b"", b"\xc3", b"\xa9", b""]


def test_what_cannot_be_read_into_arrow_says_why(tmp_path):
    """A variable the group does not hold names the group, the store and what it holds; a
    vectorized (pointwise) selection is refused with the fix (outer selections only)."""
    path = tmp_path / "s.zarr"
    xr.Dataset({"s": ("x", np.array(["a", "b"], dtype=object))}).to_zarr(path, zarr_format=3, consolidated=False)
    with pytest.raises(xr_zstrings.ZStringsError, match=r"no array 'nope' in group '/' of .*s\.zarr.*\['s'\]"):
        xr_zstrings.read_arrow(path, "nope")
    with xr.open_dataset(path, engine="zstrings") as ds:
        key = indexing.VectorizedIndexer((np.array([0, 1]),))
        with pytest.raises(TypeError, match="outer selections"):
            backend_array(ds, "s").arrow(key)
        assert backend_array(ds, "s").arrow(indexing.OuterIndexer((np.array([1, 0]),))).to_pylist() == ["b", "a"]
