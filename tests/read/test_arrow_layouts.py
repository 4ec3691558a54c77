"""Every string layout the package reads, read into Arrow (issue 39): the Arrow result equals what
``xr.open_dataset(..., engine="zstrings")`` returns, missing values as Arrow nulls, and the peer that
wrote (or reads) the layout agrees on the valid values.

Each store is written by the writer users have: netcdf-c (netCDF4) for NCZarr NC_STRING and NC_CHAR,
our ``to_nczarr`` for NCZarr ``|Sn``, xarray/zarr-python for pure Zarr v2 (``|S``, ``<U``, ``|O``)
and Zarr v3 vlen-utf8/vlen-bytes, our ``to_zarr_v3`` for zarrs.vlen, zarrs.optional and the Arrow
layout. Hypothesis draws the strings (multibyte, empty, embedded NUL where the layout keeps it,
missing where the layout has them) and a selection; each example writes its store once. Every read
runs with the compiled kernels and without them (``XR_ZSTRINGS_NO_EXT=1``). Bad UTF-8 written into a
chunk follows ``utf8_errors`` exactly as the xarray path does (values, error, warnings).
"""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import netCDF4
import numcodecs
import numpy as np
import pyarrow as pa
import pytest
import xarray as xr
import zarr
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from peers import nc_url, plain

import xr_zstrings
from xr_zstrings import to_nczarr
from xr_zstrings.codecs.v3 import V3Pipeline
from xr_zstrings.formats.zarr3 import parse_node_v3
from xr_zstrings.write.zarr3 import to_zarr_v3

FILL = "N/A"
# small: each example writes a store; no shrinking (a failing example is already small, and shrinking
# one store per step takes minutes)
_SETTINGS = settings(max_examples=6, deadline=None, database=None,
                     phases=[Phase.explicit, Phase.reuse, Phase.generate],
                     suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Writers warn about things these tests do on purpose (missing values in zarrs' optional type,
    zarr-python's unstable v3 data types)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# ------------------------------------------------------------------------------------- writers
#
# write(path, values, chunk) writes variable "s" (dimension "x") and returns what the store holds:
# the values as every reader should see them, None where missing.


def _chunks_of(values: list[Any], chunk: int) -> list[tuple[int, list[Any]]]:
    return [(i, values[i:i + chunk]) for i in range(0, len(values), chunk)]


def _netcdf_string(compression: str | None) -> Callable[[Path, list[Any], int], list[Any]]:
    def write(path: Path, values: list[Any], chunk: int) -> list[Any]:
        with netCDF4.Dataset(nc_url(path), "w") as nc:
            nc.createDimension("x", len(values))
            s = nc.createVariable("s", str, ("x",), fill_value=FILL, chunksizes=(chunk,),
                                  compression=compression)
            s.setncattr("_nczarr_maxstrlen", 64)
            s[:] = np.array([FILL if v is None else v for v in values], dtype=object)
        return list(values)

    return write


def _netcdf_char(path: Path, values: list[Any], chunk: int) -> list[Any]:
    width = max([len(v.encode()) for v in values] + [1])
    with netCDF4.Dataset(nc_url(path), "w") as nc:
        nc.createDimension("x", len(values))
        nc.createDimension("nchar", width)
        c = nc.createVariable("s", "S1", ("x", "nchar"), chunksizes=(chunk, width))
        c._Encoding = "utf-8"
        c.set_auto_chartostring(False)
        c[:] = np.array([v.encode() for v in values], dtype=f"S{width}").view("S1").reshape(-1, width)
    return list(values)


def _to_nczarr(path: Path, values: list[Any], chunk: int) -> list[Any]:
    ds = xr.Dataset({"s": ("x", np.array(values, dtype=object))})
    ds["s"].encoding.update({"_FillValue": FILL, "chunks": (chunk,)})
    with _quiet():
        to_nczarr(ds, path)
    return list(values)


def _xarray_v2(dtype: str, fill: str | None = None, compressor: bool = True) -> Callable[..., list[Any]]:
    def write(path: Path, values: list[Any], chunk: int) -> list[Any]:
        data = np.array(values, dtype=object)
        if dtype == "S":  # (|S1 is NC_CHAR-like: engine="zarr" and we join its characters)
            data = data.astype(f"S{max([len(v) for v in values] + [2])}")
        elif dtype != "O":
            data = data.astype(dtype)
        ds = xr.Dataset({"s": ("x", data)})
        ds["s"].encoding["chunks"] = (chunk,)
        if fill is not None:
            ds["s"].encoding["_FillValue"] = fill
        if not compressor:
            ds["s"].encoding["compressors"] = None
        with _quiet():
            ds.to_zarr(path, zarr_format=2, consolidated=False)
        return list(values)

    return write


def _xarray_v2_encoded_text(path: Path, values: list[Any], chunk: int) -> list[Any]:
    """xarray's fixed-width text in Zarr v2 (encoding dtype "S1"): |Sn holding UTF-8, with
    ``_Encoding: utf-8``."""
    ds = xr.Dataset({"s": ("x", np.array(values, dtype=object))})
    ds["s"].encoding.update({"dtype": "S1", "chunks": (chunk,), "compressors": None})
    with _quiet():
        ds.to_zarr(path, zarr_format=2, consolidated=False)
    return list(values)


def _zarr_python_v2_null_fill(path: Path, values: list[Any], chunk: int) -> list[Any]:
    """zarr-python's ``fill_value: null`` object array: only never-written chunks are missing (a
    chunk holding any value is written whole, its missing values as "")."""
    held: list[Any] = []
    with _quiet():
        a = zarr.open_group(path, mode="w", zarr_format=2).create_array(
            "s", shape=(len(values),), chunks=(chunk,), dtype=str, fill_value=None, compressors=None,
            attributes={"_ARRAY_DIMENSIONS": ["x"]}, config={"write_empty_chunks": True})
        for i, part in _chunks_of(values, chunk):
            if all(v is None for v in part):
                held += [None] * len(part)
                continue
            part = ["" if v is None else v for v in part]
            a[i:i + len(part)] = np.array(part, dtype=object)
            held += part
    return held


def _zarr_python_v3(dtype: Any, shards: bool = False, compressed: bool = True) -> Callable[..., list[Any]]:
    def write(path: Path, values: list[Any], chunk: int) -> list[Any]:
        with _quiet():
            a = zarr.open_group(path, mode="w", zarr_format=3).create_array(
                "s", shape=(len(values),), chunks=(chunk,), shards=(2 * chunk,) if shards else None,
                dtype=dtype, dimension_names=["x"], compressors="auto" if compressed else None)
            a[:] = np.array(values, dtype=object)
        return list(values)

    return write


def _to_zarr_v3(layout: str, *, fill: bool = True, zstd: bool = False) -> Callable[..., list[Any]]:
    """Our writer: missing text as the string fill (masked when read), or (``fill=False``, and for
    bytes) in zarrs' nullable optional type around the layout."""

    def write(path: Path, values: list[Any], chunk: int) -> list[Any]:
        ds = xr.Dataset({"s": ("x", np.array(values, dtype=object))})
        ds["s"].encoding["chunks"] = (chunk,)
        if fill:
            ds["s"].encoding["_FillValue"] = FILL
        compressors = [{"name": "zstd", "configuration": {"level": 1}}] if zstd else []
        with _quiet():
            to_zarr_v3(ds, path, layout=layout, compressors=compressors)
        return list(values)

    return write


LE = {"name": "bytes", "configuration": {"endian": "little"}}
ZSTD = {"name": "zstd", "configuration": {"level": 1}}


def _sharded(inner_codecs: list[dict[str, Any]], data_type: Any = "string") -> Callable[..., list[Any]]:
    """A sharded 1-D array (shards of two inner chunks) in a layout zarr-python cannot write (the
    Arrow layout, zarrs.vlen), framed by our own v3 encoder as tests/read/test_shard_parts does;
    shards holding only the fill ("") are left out, as zarr-python leaves them."""

    def write(path: Path, values: list[Any], chunk: int) -> list[Any]:
        shard = 2 * chunk
        codecs = [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [chunk], "codecs": inner_codecs, "index_codecs": [LE, {"name": "crc32c"}],
            "index_location": "end"}}]
        doc = {"zarr_format": 3, "node_type": "array", "shape": [len(values)], "data_type": data_type,
               "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [shard]}},
               "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
               "fill_value": "", "codecs": codecs, "dimension_names": ["x"], "attributes": {}}
        (path / "s" / "c").mkdir(parents=True)
        (path / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}}))
        (path / "s" / "zarr.json").write_text(json.dumps(doc))
        meta = parse_node_v3(doc, path="/s")
        pipe = V3Pipeline.from_metadata(list(meta.codecs), data_type=meta.data_type, dtype=meta.dtype,
                                        chunk_shape=meta.chunks, fill_value=meta.fill_value)
        for i, part in _chunks_of(values, shard):
            block = np.full(shard, "", dtype=object)
            block[: len(part)] = part
            if (block != "").any():
                (path / "s" / "c" / str(i // shard)).write_bytes(pipe.encode(block))
        return list(values)

    return write


def _netcdf4_peer(path: Path) -> list[Any]:
    with xr.open_dataset(nc_url(path), engine="netcdf4") as ds:
        return plain(ds["s"].values)


def _zarr_peer(path: Path) -> list[Any]:
    with _quiet(), xr.open_dataset(path, engine="zarr", consolidated=False) as ds:
        return plain(ds["s"].values)


def _zarr_python_peer(path: Path) -> list[Any]:
    with _quiet():
        return plain(zarr.open_array(path / "s", mode="r")[:])


@dataclass(frozen=True)
class Layout:
    """One layout as users write it: its writer, what its values may be, the peer that reads it."""

    name: str
    write: Callable[[Path, list[Any], int], list[Any]]
    kind: str = "str"  # "str": text (large_string); "bytes": large_binary
    missing: bool = False  # any value may be missing
    nul: bool = False  # a value may hold NUL (not at its end: fixed width drops trailing NULs)
    peer: Callable[[Path], list[Any]] | None = None
    #: how bad UTF-8 is planted in its chunks: "fixed" (|Sn, NUL-padded) and "vlen" (lengths/offsets +
    #: data) as stored, "zstd" inside a zstd frame; None: not planted (sharded: checksummed index)
    raw: str | None = None
    #: a value at least two bytes long (a |S1 array is characters to join: xarray and we read it 0-D)
    wide: bool = False


LAYOUTS = [
    Layout("nczarr-NC_STRING", _netcdf_string(None), missing=True, peer=_netcdf4_peer, raw="fixed"),
    Layout("nczarr-NC_STRING-zstd", _netcdf_string("zstd"), missing=True, peer=_netcdf4_peer, raw="zstd"),
    Layout("nczarr-NC_CHAR", _netcdf_char, peer=_netcdf4_peer, raw="fixed"),
    Layout("nczarr-Sn-to_nczarr", _to_nczarr, missing=True, peer=_netcdf4_peer, raw="fixed"),
    Layout("v2-S-xarray", _xarray_v2("S"), kind="bytes", nul=True, peer=_zarr_peer),
    Layout("v2-U-xarray", _xarray_v2("U"), nul=True, peer=_zarr_peer),
    Layout("v2-Sn-_Encoding-xarray", _xarray_v2_encoded_text, nul=True, peer=_zarr_peer, raw="fixed", wide=True),
    Layout("v2-O-null-fill", _zarr_python_v2_null_fill, missing=True, nul=True, peer=_zarr_python_peer,
           raw="vlen"),
    Layout("v2-O-string-fill", _xarray_v2("O", FILL, compressor=False), missing=True, nul=True,
           peer=_zarr_peer, raw="vlen"),
    Layout("v3-vlen-utf8", _zarr_python_v3(str, compressed=False), nul=True, peer=_zarr_python_peer,
           raw="vlen"),
    Layout("v3-vlen-utf8-zstd-sharded", _zarr_python_v3(str, shards=True), nul=True, peer=_zarr_python_peer),
    Layout("v3-vlen-bytes", _zarr_python_v3(zarr.dtype.VariableLengthBytes()), kind="bytes", nul=True,
           peer=_zarr_python_peer),
    Layout("v3-zarrs.vlen", _to_zarr_v3("zarrs.vlen"), missing=True, nul=True, raw="vlen"),
    Layout("v3-zarrs.vlen-zstd", _to_zarr_v3("zarrs.vlen", zstd=True), missing=True, nul=True, raw="zstd"),
    Layout("v3-zarrs.vlen-sharded", _sharded([{"name": "zarrs.vlen", "configuration": {
        "index_data_type": "uint32", "index_location": "start", "index_codecs": [LE],
        "data_codecs": [{"name": "bytes"}, ZSTD]}}]), nul=True),
    Layout("v3-arrow", _to_zarr_v3("arrow"), missing=True, nul=True, raw="vlen"),
    Layout("v3-arrow-large-zstd", _to_zarr_v3("arrow-large", zstd=True), missing=True, nul=True, raw="zstd"),
    Layout("v3-arrow-sharded", _sharded([{"name": "bytes"}], {"name": "string"}), nul=True),
    Layout("v3-zarrs.optional-arrow", _to_zarr_v3("arrow", fill=False), missing=True, nul=True, raw="vlen"),
    Layout("v3-zarrs.optional-vlen-utf8-zstd", _to_zarr_v3("vlen-utf8", fill=False, zstd=True),
           missing=True, nul=True, raw="zstd"),
    Layout("v3-zarrs.optional-bytes", _to_zarr_v3("zarrs.vlen", fill=False, zstd=True), kind="bytes",
           missing=True, nul=True),
]
BY_NAME = {lay.name: lay for lay in LAYOUTS}


# ------------------------------------------------------------------------------------ strategies


def _text(nul: bool) -> st.SearchStrategy[str]:
    chars = st.characters(blacklist_categories=("Cs",), blacklist_characters="" if nul else "\x00")
    # multibyte and empty strings come up often; "N/A" is the fill some layouts mask
    return st.one_of(st.text(chars, max_size=6), st.sampled_from(["", "é", "中文", "😀x"])).filter(
        lambda s: s != FILL and not s.endswith("\x00"))


def values_for(lay: Layout) -> st.SearchStrategy[list[Any]]:
    one: st.SearchStrategy[Any] = _text(lay.nul)
    if lay.kind == "bytes":
        one = one.map(lambda s: s.encode("utf-8"))
    values = st.lists(one, min_size=1, max_size=9)
    if lay.wide:
        values = values.filter(lambda vs: max(len(v.encode()) for v in vs) >= 2)
    if lay.missing:  # missing values here and there, and often a run of them (whole chunks missing)
        values = st.tuples(st.lists(st.one_of(one, st.none()), min_size=1, max_size=9), st.integers(0, 8),
                           st.integers(0, 5)).map(lambda t: [None if t[1] <= i < t[1] + t[2] else v
                                                             for i, v in enumerate(t[0])])
    # (an object array of None only is text to our writer: a bytes variable holds one bytes value)
    return values.filter(lambda vs: any(v is not None for v in vs)) if lay.kind == "bytes" else values


def _selection(n: int) -> st.SearchStrategy[Any]:
    ints = st.integers(0, n - 1)
    slices = st.builds(slice, st.one_of(st.none(), st.integers(-n, n)), st.one_of(st.none(), st.integers(-n, n)),
                       st.one_of(st.none(), st.integers(1, 3), st.integers(-3, -1)))
    arrays = st.lists(ints, min_size=1, max_size=6).map(lambda xs: np.array(xs, dtype=np.intp))
    return st.one_of(slices, arrays)


# ------------------------------------------------------------------------------------ reading


def arrow_type(lay: Layout) -> pa.DataType:
    return pa.large_binary() if lay.kind == "bytes" else pa.large_string()


def check_arrow(arr: Any, want: list[Any], lay: Layout, where: str) -> None:
    """``arr`` (an Arrow array or chunked array) holds ``want`` (None: null) with the contract's type."""
    assert isinstance(arr, pa.Array | pa.ChunkedArray), (where, type(arr))
    assert arr.type == arrow_type(lay), (where, arr.type)
    assert arr.to_pylist() == want, where
    assert arr.null_count == sum(v is None for v in want), where


def xarray_values(path: Path, **kw: Any) -> list[Any]:
    with xr.open_dataset(path, engine="zstrings", **kw) as ds:
        return plain(ds["s"].values)


def _dataframe_columns(ds: xr.Dataset) -> dict[str, list[Any]]:
    df = ds.to_dataframe().reset_index()
    return {str(c): plain(df[c].to_numpy(dtype=object)) for c in df.columns}


# ------------------------------------------------------------------------------------ the tests


def _layout_property(lay: Layout) -> Callable[..., None]:
    @_SETTINGS
    @given(data=st.data(), values=values_for(lay), chunk=st.integers(1, 4))
    def run(tmp_path_factory: Any, data: Any, values: list[Any], chunk: int) -> None:
        path = tmp_path_factory.mktemp(lay.name) / "s.zarr"
        held = lay.write(path, values, min(chunk, len(values)))
        got = xarray_values(path)
        assert got == held  # (the store holds what the writer was given: the harness is right)
        check_arrow(xr_zstrings.read_arrow(path, "s"), got, lay, "read_arrow")
        check_arrow(xr_zstrings.read_arrow(path, "s", decode_threads=1), got, lay, "read_arrow, no pool")
        ds = xr.open_dataset(path, engine="zstrings")
        table = ds.zstrings.to_arrow()
        assert isinstance(table, pa.Table)
        check_arrow(table.column("s"), got, lay, "ds.zstrings.to_arrow()")
        assert {k: v for k, v in zip(table.column_names, (c.to_pylist() for c in table.columns), strict=True)
                } == _dataframe_columns(ds), "to_arrow(): the columns to_dataframe().reset_index() has"
        assert table.column_names == list(_dataframe_columns(ds))
        sel = data.draw(_selection(len(values)), label="selection")
        with xr.open_dataset(path, engine="zstrings") as fresh:  # (lazy: nothing loaded yet)
            table = fresh.isel(x=sel).zstrings.to_arrow()
            check_arrow(table.column("s"), plain(fresh["s"].values[sel]), lay, f"isel(x={sel!r}).zstrings.to_arrow()")
        with xr.open_dataset(path, engine="zstrings", string_dtype="arrow") as held:  # Arrow inside xarray
            whole, part = held["s"].load().data, held.isel(x=sel)["s"].load().data
            check_arrow(pa.chunked_array(whole.__arrow_array__()), got, lay, 'string_dtype="arrow"')
            check_arrow(pa.chunked_array(part.__arrow_array__()), plain(np.asarray(got, dtype=object)[sel]), lay,
                        f'string_dtype="arrow", isel(x={sel!r})')
        if lay.peer is not None:  # the peer agrees on every value we do not call missing
            theirs = lay.peer(path)
            assert len(theirs) == len(got)
            assert [t for t, g in zip(theirs, got, strict=True) if g is not None] == [g for g in got if g is not None]

    return run


def options_property(lay: Layout, opts: dict[str, Any]) -> Callable[..., None]:
    """The Arrow reads under these read options give the xarray path's values (its type: bytes
    under string_dtype="bytes", else the layout's)."""

    @_SETTINGS
    @given(values=values_for(lay), chunk=st.integers(1, 4))
    def run(tmp_path_factory: Any, values: list[Any], chunk: int) -> None:
        path = tmp_path_factory.mktemp(lay.name) / "s.zarr"
        lay.write(path, values, min(chunk, len(values)))
        want = xarray_values(path, **opts)
        typ = pa.large_binary() if opts.get("string_dtype") == "bytes" else arrow_type(lay)
        arr = xr_zstrings.read_arrow(path, "s", **opts)
        assert (arr.type, arr.to_pylist()) == (typ, want), ("read_arrow", opts)
        with xr.open_dataset(path, engine="zstrings", **opts) as ds:
            col = ds.zstrings.to_arrow().column("s")
            assert (col.type, col.to_pylist()) == (typ, want), ("ds.zstrings.to_arrow()", opts)

    return run


@pytest.mark.parametrize("name", [lay.name for lay in LAYOUTS if lay.missing])
def test_mask_and_scale_false_gives_the_stored_fill_in_arrow(tmp_path_factory, name, kernels):
    """mask_and_scale=False (a string fill is a value, as the xarray path then reads it): the Arrow
    reads give the xarray path's values."""
    options_property(BY_NAME[name], {"mask_and_scale": False})(tmp_path_factory)


@pytest.mark.parametrize("name", list(BY_NAME))
def test_read_options_apply_to_the_arrow_reads(tmp_path_factory, name, kernels):
    """string_dtype="bytes" (every value as its stored bytes: large_binary, missing still null) gives
    the xarray path's values in Arrow too, from read_arrow and from ds.zstrings.to_arrow() (a string
    _FillValue is masked by xarray's CF decoding there, all-missing stays large_binary)."""
    options_property(BY_NAME[name], {"string_dtype": "bytes"})(tmp_path_factory)


def test_an_empty_selection_of_loaded_bytes_stays_large_binary(tmp_path, kernels):
    """Bytes (zarr-python's v3 vlen-bytes) loaded into memory, then an empty selection: the column
    is still large_binary (the type the lazy read and ``read_arrow`` give), not pyarrow's guess for
    no values."""
    lay = BY_NAME["v3-vlen-bytes"]
    lay.write(tmp_path / "b.zarr", [b"a", b"\xff", b""], 2)
    ds = xr.open_dataset(tmp_path / "b.zarr", engine="zstrings")
    assert ds.isel(x=slice(0, 0)).zstrings.to_arrow().column("s").type == pa.large_binary()  # lazy
    loaded = ds.load()
    assert loaded.zstrings.to_arrow().column("s").type == pa.large_binary()
    assert loaded.isel(x=slice(0, 0)).zstrings.to_arrow().column("s").type == pa.large_binary()


@pytest.mark.parametrize("name", list(BY_NAME))
def test_arrow_equals_the_xarray_path_for_every_layout(tmp_path_factory, name, kernels):
    """A random 1-D variable in this layout: ``read_arrow`` and ``ds.zstrings.to_arrow()`` (whole,
    and a lazy selection: steps, negative steps, int arrays) give engine="zstrings"'s values with
    missing as null, as large_string / large_binary; the table is to_dataframe().reset_index();
    ``string_dtype="arrow"`` holds the same Arrow values in xarray (whole and selected); the peer
    reads the same valid values."""
    _layout_property(BY_NAME[name])(tmp_path_factory)


# ------------------------------------------------------------------------------------ bad UTF-8

MARK = b"QQQ"  # written as text, then replaced in the chunk files by three other bytes
RAW_LAYOUTS = [lay.name for lay in LAYOUTS if lay.raw]
POLICIES = ["drop", "replace", "strict"]


def _plant(path: Path, bad: bytes, zstd: bool) -> int:
    """Every MARK in the store's chunk files (zstd frames: decompressed, planted, compressed
    again) replaced by ``bad``; how many."""
    n = 0
    for f in (path / "s").rglob("*"):
        if f.is_file() and not f.name.startswith((".", "zarr.json")):
            raw = f.read_bytes()
            if zstd:
                raw = bytes(numcodecs.Zstd().decode(raw))
            n += raw.count(MARK)
            raw = raw.replace(MARK, bad)
            f.write_bytes(numcodecs.Zstd(level=1).encode(raw) if zstd else raw)
    return n


def _outcome(read: Callable[[], Any]) -> tuple[Any, list[tuple[type, str]]]:
    """What one read gives: its values (a flat list, None for missing) or its error (type, message),
    and the package's warnings (category, message) in order."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            got: Any = read()
        except Exception as e:  # (the error itself is compared)
            got = (type(e), str(e))
    ours = [(w.category, str(w.message)) for w in caught if w.category.__module__.startswith("xr_zstrings")]
    return got, ours


_bad_bytes = st.one_of(
    st.sampled_from([b"\xff\xfeZ", b"Z\xe4\xb8", b"\xc0\xafZ", b"\xed\xa0\x80", b"\x80ZZ", b"Z\xc3Z",
                     b"\xf4\x90\x80"]),
    st.binary(min_size=3, max_size=3))


@pytest.mark.parametrize("name", RAW_LAYOUTS)
def test_bad_utf8_follows_utf8_errors_as_the_xarray_path(tmp_path_factory, name, kernels):
    """Bytes that are not UTF-8 (a cut multibyte character, a stray continuation byte, a surrogate,
    random bytes, NUL in a fixed-width value) planted in a chunk: under each utf8_errors the Arrow
    reads (read_arrow, to_arrow, to_dataframe) give the values the xarray path gives, or raise the
    same error type with the same message, and warn the same warnings; through the C stream
    (pa.table) the consumer's error carries our message."""
    lay = BY_NAME[name]

    @_SETTINGS
    @given(values=st.lists(_text(lay.nul).filter(lambda v: "Q" not in v), min_size=0, max_size=5),
           where=st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["", "a", "é"]),
                                    st.sampled_from(["", "b", "中"])), min_size=1, max_size=3),
           bad=_bad_bytes, chunk=st.integers(1, 3))
    def run(values: list[str], where: list[tuple[int, str, str]], bad: bytes, chunk: int) -> None:
        values = list(values)
        for i, before, after in where:
            values.insert(min(i, len(values)), before + MARK.decode() + after)
        path = tmp_path_factory.mktemp("bad") / "s.zarr"
        lay.write(path, values, min(chunk, len(values)))
        assert _plant(path, bad, zstd=lay.raw == "zstd") == len(where)
        for policy in POLICIES:
            want = _outcome(lambda p=policy: xarray_values(path, utf8_errors=p))

            def table_column(p: str = policy) -> list[Any]:
                with xr.open_dataset(path, engine="zstrings", utf8_errors=p) as ds:
                    col = ds.zstrings.to_arrow().column("s")
                    assert col.type == pa.large_string()
                    return col.to_pylist()

            def read_arrow(p: str = policy) -> list[Any]:
                arr = xr_zstrings.read_arrow(path, "s", utf8_errors=p)
                assert arr.type == pa.large_string()
                return arr.to_pylist()

            def dataframe_column(p: str = policy) -> list[Any]:
                with xr.open_dataset(path, engine="zstrings", utf8_errors=p) as ds:
                    return plain(ds.zstrings.to_dataframe()["s"])

            def stream_column(p: str = policy) -> list[Any]:
                with xr.open_dataset(path, engine="zstrings", utf8_errors=p) as ds:
                    return pa.table(ds.zstrings).column("s").to_pylist()

            assert _outcome(read_arrow) == want, (policy, bad, "read_arrow")
            assert _outcome(table_column) == want, (policy, bad, "ds.zstrings.to_arrow()")
            assert _outcome(dataframe_column) == want, (policy, bad, "ds.zstrings.to_dataframe()")
            streamed, warned = _outcome(stream_column)
            assert warned == want[1], (policy, bad, "pa.table(ds.zstrings)")
            if isinstance(want[0], tuple):  # (the consumer raises its own error type with our message)
                assert isinstance(streamed, tuple) and want[0][1] in streamed[1], (policy, bad, streamed)
            else:
                assert streamed == want[0], (policy, bad, "pa.table(ds.zstrings)")

    run()


# ------------------------------------------------------------------------------ N-D, S3


ND_LAYOUTS = ["nczarr-NC_STRING", "v2-O-string-fill", "v3-vlen-utf8", "v3-zarrs.vlen", "v3-arrow",
              "v3-zarrs.optional-arrow"]


def _write_2d(name: str, path: Path, values: np.ndarray, chunks: tuple[int, int]) -> None:
    """A (y, x) variable "s" in this layout, by the writer users have (values: None for missing)."""
    if name == "nczarr-NC_STRING":
        with netCDF4.Dataset(nc_url(path), "w") as nc:
            nc.createDimension("y", values.shape[0])
            nc.createDimension("x", values.shape[1])
            s = nc.createVariable("s", str, ("y", "x"), fill_value=FILL, chunksizes=chunks)
            s[:] = np.array([FILL if v is None else v for v in values.reshape(-1)], dtype=object).reshape(values.shape)
        return
    ds = xr.Dataset({"s": (("y", "x"), values)}, coords={"y": np.arange(values.shape[0]) * 10})
    ds["s"].encoding["chunks"] = chunks
    if name != "v3-zarrs.optional-arrow":
        ds["s"].encoding["_FillValue"] = FILL
    with _quiet():
        if name == "v2-O-string-fill":
            ds.to_zarr(path, zarr_format=2, consolidated=False)
        elif name == "v3-vlen-utf8":
            ds["s"].encoding.pop("_FillValue")  # (no missing values: xarray writes no string fill in v3)
            ds.to_zarr(path, zarr_format=3, consolidated=False)
        else:
            to_zarr_v3(ds, path, layout=name.split("-", 1)[1].replace("zarrs.optional-", ""), compressors=[])


@pytest.mark.parametrize("name", ND_LAYOUTS)
def test_two_dimensional_variables_flatten_in_c_order_as_to_dataframe(tmp_path_factory, name, kernels):
    """A (y, x) string variable chunked across both axes (chunks that do not divide the shape):
    ``read_arrow`` is the values flattened in C order, ``ds.zstrings.to_arrow()`` holds exactly
    ``to_dataframe().reset_index()``'s columns (names, order, values, missing as null), also for
    a selection with steps and an int array on both axes."""
    lay = BY_NAME[name]
    missing = name != "v3-vlen-utf8"

    @_SETTINGS
    @given(data=st.data(), ny=st.integers(1, 4), nx=st.integers(1, 5), cy=st.integers(1, 3), cx=st.integers(1, 3))
    def run(data: Any, ny: int, nx: int, cy: int, cx: int) -> None:
        one = st.one_of(_text(lay.nul), st.none()) if missing else _text(lay.nul)
        flat = data.draw(st.lists(one, min_size=ny * nx, max_size=ny * nx), label="values")
        values = np.empty((ny, nx), dtype=object)
        values.reshape(-1)[:] = flat
        path = tmp_path_factory.mktemp("nd") / "s.zarr"
        _write_2d(name, path, values, (min(cy, ny), min(cx, nx)))
        ds = xr.open_dataset(path, engine="zstrings")
        got = plain(ds["s"].values)
        assert got == flat
        check_arrow(xr_zstrings.read_arrow(path, "s"), got, lay, "read_arrow")
        for part in (ds, ds.isel(y=data.draw(_selection(ny), label="y"), x=data.draw(_selection(nx), label="x"))):
            table = part.zstrings.to_arrow()
            assert table.column_names == list(_dataframe_columns(part))
            assert {c: table.column(c).to_pylist() for c in table.column_names} == _dataframe_columns(part)
            assert table.column("s").type == pa.large_string()

    run()


def test_a_store_on_s3_reads_into_arrow_as_the_xarray_path(tmp_path, s3, kernels):
    """One store of each family on (moto) S3: ``read_arrow`` and ``ds.zstrings.to_arrow()`` over
    ``s3://`` with storage_options give the xarray path's values."""
    values = ["a", None, "héllo", "", "中文字", None, "😀x", "z" * 40, "b"]
    for name in ("nczarr-NC_STRING", "v2-O-string-fill", "v3-arrow-large-zstd", "v3-zarrs.optional-arrow"):
        lay = BY_NAME[name]
        local = tmp_path / f"{name}.zarr"
        lay.write(local, values, 4)
        url = s3.upload(local, "arrow-layouts", f"{name}-{tmp_path.name}")
        opts = s3.options()
        with xr.open_dataset(url, engine="zstrings", storage_options=opts) as ds:
            got = plain(ds["s"].values)
            assert got == values
            check_arrow(ds.zstrings.to_arrow().column("s"), got, lay, f"{name}: to_arrow over S3")
        check_arrow(xr_zstrings.read_arrow(url, "s", storage_options=opts), got, lay, f"{name}: read_arrow over S3")



@pytest.mark.parametrize("concat_characters", [True, False])
def test_every_group_of_a_netcdf_c_store_reads_into_arrow_as_the_xarray_path(tmp_path, concat_characters, kernels):
    """netcdf-c's sample store (tests/peers.write_netcdf_strings: NC_STRING, NC_CHAR utf-8 and
    latin-1, scalars, numbers with fills, groups): ``read_arrow`` of every text variable in every
    group (joined NC_CHAR text, or with concat_characters=False its raw characters as large_binary)
    and every group's ``to_arrow()`` (broadcast over all its dimensions, as to_dataframe does) give
    the xarray path's values."""
    from peers import write_netcdf_strings

    path = tmp_path / "n.zarr"
    write_netcdf_strings(path)
    groups = xr.open_groups(path, engine="zstrings", concat_characters=concat_characters)
    seen = 0
    for group, ds in groups.items():
        table = ds.zstrings.to_arrow()
        want = _dataframe_columns(ds)
        assert table.column_names == list(want), group
        assert {c: plain(table.column(c).to_pylist()) for c in table.column_names} == want, group
        for name, var in ds.variables.items():
            if var.dtype.kind not in "TOS":
                continue
            arr = xr_zstrings.read_arrow(path, str(name), group=group, concat_characters=concat_characters)
            kind = "bytes" if var.dtype.kind == "S" else "str"
            assert arr.type == (pa.large_binary() if kind == "bytes" else pa.large_string()), (group, name)
            assert arr.to_pylist() == plain(var.values), (group, name)
            seen += 1
    assert seen == 5  # names, chars, chars_latin1, scalar_str, sub/labels


@pytest.mark.parametrize("opts", [{}, {"mask_and_scale": False}, {"string_dtype": "bytes"}],
                         ids=["T", "unmasked", "bytes"])
@pytest.mark.parametrize("name", list(BY_NAME))
def test_to_arrow_reads_text_into_arrow_not_through_numpy(tmp_path, monkeypatch, name, opts):
    """``ds.zstrings.to_arrow()`` of a lazily opened store reads its text and bytes straight into
    Arrow (``ZStringsBackendArray.arrow``), never through the numpy read (Python objects or
    StringDType in between), for every layout, masked or not; the values are the numpy read's."""
    check_not_through_numpy(tmp_path, monkeypatch, name, opts)


def check_not_through_numpy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, opts: dict[str, Any]) -> None:
    from xr_zstrings.backend import ZStringsBackendArray

    lay = BY_NAME[name]
    values = ["a", None, "héllo", "", "中文字", None, "😀x", "z" * 30] if lay.missing else ["a", "héllo", "", "z"]
    if lay.kind == "bytes":
        values = [None if v is None else v.encode() for v in values]
    path = tmp_path / "s.zarr"
    lay.write(path, values, 3)
    want = xarray_values(path, **opts)
    numpy_read = ZStringsBackendArray.__getitem__

    def no_text_as_numpy(self: Any, key: Any) -> Any:
        assert self.dtype.kind not in "TOSU", f"{name}: text read as numpy ({self.dtype})"
        return numpy_read(self, key)

    with xr.open_dataset(path, engine="zstrings", **opts) as ds:
        # (after opening: xarray's CF decoding reads one element of an object array to look for dates)
        monkeypatch.setattr(ZStringsBackendArray, "__getitem__", no_text_as_numpy)
        assert ds.zstrings.to_arrow().column("s").to_pylist() == want
