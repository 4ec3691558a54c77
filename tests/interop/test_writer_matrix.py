"""Data opened with engine="zstrings" goes through xarray's own writers and ours, unchanged.

Writer x reader matrix: every source store (golden netcdf-c stores of every generation, live
netcdf-c 4.10.1 output, zarr-python v2 and v3 stores, our v3 layouts) opened with
engine="zstrings", written by each writer, read back by engine="zstrings" and by the writing
engine's own reader. Test ids read like ``nc4101-char -> to_zarr(v3) -> zstrings``.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import netCDF4
import numcodecs
import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr
from corpus import MISSING, golden_sources, source, url
from corpus import SOURCES as CORPUS_SOURCES

from xr_zstrings import UnsupportedError, ZStringsError
from xr_zstrings.codecs.encoding import v2_configs
from xr_zstrings.sample import sample_path
from xr_zstrings.write.encoding import with_zarr_encoding
from xr_zstrings.write.nczarr import to_nczarr, with_netcdf_c_strings


def _open(path: str | Path, **kw) -> xr.Dataset:
    return xr.open_dataset(path, engine="zstrings", **kw)


# ---------------------------------------------------------------------------------------------
# The built-in sample (netcdf-c NCZarr, temperature with zlib level 4 + shuffle)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", [2, 3])
def test_sample_plain_to_zarr_writes_both_formats_with_zlib(tmp_path, fmt):
    """xarray's own ``to_zarr`` on what engine="zstrings" opened, unchanged, in either format: the
    compressor (netcdf-c's zlib level 4) and the chunks are kept; netcdf-c's shuffle, a v2 filter
    but a v3 bytes->bytes codec, cannot be in one encoding for both formats (docs/format-notes.md)."""
    ds = _open(sample_path())
    _to_zarr_unchanged(ds, tmp_path / "a.zarr", fmt)
    if fmt == 2:
        meta = json.loads((tmp_path / "a.zarr" / "temperature" / ".zarray").read_text())
        assert (meta["compressor"], meta["filters"], meta["chunks"]) == ({"id": "zlib", "level": 4}, None, [2, 5])
    else:
        meta = json.loads((tmp_path / "a.zarr" / "temperature" / "zarr.json").read_text())
        assert meta["codecs"][1:] == [{"name": "numcodecs.zlib", "configuration": {"level": 4}}]
        assert meta["chunk_grid"]["configuration"]["chunk_shape"] == [2, 5]
    for engine in ("zstrings", "zarr"):
        back = xr.open_dataset(tmp_path / "a.zarr", engine=engine).load()
        xr.testing.assert_identical(back, ds.load())
    assert back.indexes["station"].tolist() == ds["station"].values.tolist()


def test_sample_zstrings_to_zarr_v3_keeps_zlib_and_shuffle(tmp_path):
    ds = _open(sample_path())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # zarr-python: numcodecs.* are not in the v3 spec
        ds.zstrings.to_zarr(tmp_path / "a.zarr", zarr_format=3)
    meta = json.loads((tmp_path / "a.zarr" / "temperature" / "zarr.json").read_text())
    assert meta["codecs"][1:] == [
        {"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}},
        {"name": "numcodecs.zlib", "configuration": {"level": 4}},
    ]
    for engine in ("zstrings", "zarr"):
        back = xr.open_dataset(tmp_path / "a.zarr", engine=engine).load()
        xr.testing.assert_identical(back, ds.load())


def test_sample_to_zarr_v2_keeps_zlib_and_shuffle_at_the_element_size(tmp_path):
    ds = _open(sample_path())
    ds.zstrings.to_zarr(tmp_path / "a.zarr", zarr_format=2)
    meta = json.loads((tmp_path / "a.zarr" / "temperature" / ".zarray").read_text())
    assert meta["compressor"] == {"id": "zlib", "level": 4}
    assert meta["filters"] == [{"id": "shuffle", "elementsize": 4}]  # netcdf-c wrote 0
    for engine in ("zstrings", "zarr"):
        xr.testing.assert_identical(xr.open_dataset(tmp_path / "a.zarr", engine=engine).load(), ds.load())


@pytest.mark.parametrize("default", [2, 3])
def test_encodings_do_not_depend_on_zarr_default_format(default):
    """The codecs in encoding are the same whatever zarr-python's ``default_zarr_format``: one
    format-neutral spec each (docs/format-notes.md), which both formats' writers take."""
    from xr_zstrings.codecs.encoding import BothFormatsCodec

    with zarr.config.set({"default_zarr_format": default}):
        enc = _open(sample_path())["temperature"].encoding
    (comp,) = enc["compressors"]
    assert isinstance(comp, BothFormatsCodec) and enc["filters"] is None
    assert (comp.v2, comp.v3) == ({"id": "zlib", "level": 4}, {"name": "numcodecs.zlib", "configuration": {"level": 4}})
    assert comp == numcodecs.Zlib(level=4)  # the codec it stands for, in either format
    assert (enc["zstrings_compressor"], enc["zstrings_filters"]) == (
        {"id": "zlib", "level": 4}, [{"id": "shuffle", "elementsize": 0}])


@pytest.mark.parametrize("engine", ["netcdf4", "h5netcdf"])
def test_sample_to_netcdf_keeps_zlib_and_shuffle(tmp_path, engine):
    ds = _open(sample_path())
    ds.to_netcdf(tmp_path / "a.nc", engine=engine)
    with netCDF4.Dataset(tmp_path / "a.nc") as nc:
        f = nc["temperature"].filters()
        assert (f["zlib"], f["shuffle"], f["complevel"]) == (True, True, 4)
    for reader in ("netcdf4", "h5netcdf"):
        xr.testing.assert_identical(xr.open_dataset(tmp_path / "a.nc", engine=reader).load(), ds.load())


def test_sample_prepare_for_zarr_v2_is_read_by_netcdf_c(tmp_path):
    ds = _open(sample_path())
    with_netcdf_c_strings(ds).to_zarr(tmp_path / "a.zarr", zarr_format=2, consolidated=False)
    back = _open(tmp_path / "a.zarr").load()
    xr.testing.assert_equal(back, ds.load())
    assert "station" in back.indexes
    with netCDF4.Dataset(f"file://{(tmp_path / 'a.zarr').resolve()}#mode=zarr,file") as nc:
        assert [str(s) for s in nc["station"][:]] == ds["station"].values.tolist()
        assert [str(s) for s in nc["climate"][:]] == ds["climate"].values.tolist()
        # netcdf-c (mode=zarr) does not take .zarray's fill_value as _FillValue: the fill comes back raw
        raw = np.ma.getdata(nc["temperature"][:])
        np.testing.assert_array_equal(np.where(raw == -999, np.nan, raw), ds["temperature"].values)


def test_sample_through_our_writers_keeps_the_codecs(tmp_path):
    ds = _open(sample_path())
    to_nczarr(ds, tmp_path / "a.zarr")
    meta = json.loads((tmp_path / "a.zarr" / "temperature" / ".zarray").read_text())
    assert (meta["compressor"], meta["filters"]) == ({"id": "zlib", "level": 4},
                                                     [{"id": "shuffle", "elementsize": 0}])
    xr.testing.assert_identical(_open(tmp_path / "a.zarr").load(), ds.load())


def test_for_zarr_round_trips_between_vocabularies():
    ds = _open(sample_path())
    v2 = with_zarr_encoding(ds, 2)["temperature"].encoding
    assert [c.get_config() for c in v2["compressors"]] == [{"id": "zlib", "level": 4}]
    assert [c.get_config() for c in v2["filters"]] == [{"id": "shuffle", "elementsize": 4}]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        v3 = with_zarr_encoding(with_zarr_encoding(ds, 2), 3)["temperature"].encoding
    assert [c.to_dict() for c in v3["compressors"]] == [
        {"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}},
        {"name": "numcodecs.zlib", "configuration": {"level": 4}},
    ]
    assert v3["filters"] is None


# ---------------------------------------------------------------------------------------------
# Sources: every kind of store engine="zstrings" reads (tests/corpus.py), and missing strings
# ---------------------------------------------------------------------------------------------

SOURCES = [*CORPUS_SOURCES, *MISSING]


@pytest.fixture(scope="module")
def source_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("sources")


# ---------------------------------------------------------------------------------------------
# Writers and readers
# ---------------------------------------------------------------------------------------------


def _open_any(src: Path, tree: bool, zarr_format: int | None = None):
    ctx = zarr.config.set({"default_zarr_format": zarr_format}) if zarr_format else _nullcontext()
    with ctx:
        return xr.open_datatree(src, engine="zstrings") if tree else _open(src)


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _to_zarr_unchanged(obj, out: Path, fmt: int) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # zarr-python: numcodecs.* not in the v3 spec
        obj.to_zarr(out, zarr_format=fmt)


def _zstrings_to_zarr(obj, out: Path, fmt: int) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # zarr-python: numcodecs.* not in the v3 spec
        obj.zstrings.to_zarr(out, zarr_format=fmt)


# writer id -> (zarr format to open with (None: zarr's default), write function, file suffix, readers)
# "to_zarr(vN)": xarray's own, on the opened dataset unchanged; "zstrings.to_zarr(vN)": the store's
# exact codec chain for that format (shuffle, shards)
WRITERS = {
    "to_zarr(v2)": (None, lambda o, p: _to_zarr_unchanged(o, p, 2), ".zarr", ("zstrings", "zarr")),
    "zstrings.to_zarr(v2)": (None, lambda o, p: _zstrings_to_zarr(o, p, 2), ".zarr", ("zstrings", "zarr")),
    "to_zarr(v3)": (None, lambda o, p: _to_zarr_unchanged(o, p, 3), ".zarr", ("zstrings", "zarr")),
    "zstrings.to_zarr(v3)": (None, lambda o, p: _zstrings_to_zarr(o, p, 3), ".zarr", ("zstrings", "zarr")),
    "to_netcdf(netcdf4)": (None, lambda o, p: o.to_netcdf(p, engine="netcdf4"), ".nc", ("netcdf4", "h5netcdf")),
    "to_netcdf(h5netcdf)": (None, lambda o, p: o.to_netcdf(p, engine="h5netcdf"), ".nc", ("h5netcdf", "netcdf4")),
    "to_nczarr": (None, lambda o, p: to_nczarr(o, p), ".zarr", ("zstrings", "netcdf4")),
    "to_zarr_v3": (None, lambda o, p: _to_zarr_v3(o, p), ".zarr", ("zstrings", "zarr")),
}


def _to_zarr_v3(obj, out: Path) -> None:
    from xr_zstrings.write.zarr3 import to_zarr_v3

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        to_zarr_v3(obj, out)


def _read(out: Path, reader: str, writer: str, tree: bool):
    kw = {}
    target: str | Path = out
    if reader == "netcdf4" and out.suffix == ".zarr":  # netcdf-c itself, on the NCZarr store we wrote
        target = url(out, "nczarr")
    if reader == "zarr":
        kw["consolidated"] = None
    if tree:
        return xr.open_datatree(target, engine=reader, **kw)
    return xr.open_dataset(target, engine=reader, **kw)


def _plain(v):
    if isinstance(v, np.ndarray):
        return [_plain(x) for x in v.tolist()] if v.ndim else _plain(v.item())
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    if isinstance(v, np.generic):
        return _plain(v.item())
    if isinstance(v, bytes):
        return v.decode("utf-8", "surrogateescape")
    if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)):
        return None  # missing, whichever way a reader marks it (never the text "nan")
    return v


def _values(var: xr.Variable):
    vals = var.values
    if vals.dtype.kind in "OTUS":
        return [_plain(x) for x in np.asarray(vals, dtype=object).reshape(-1).tolist()], vals.shape
    return vals, vals.shape


# netcdf-c shows its NC_STRING width attributes to netCDF4 (engine="zstrings" keeps them in encoding)
_NETCDF_C_SPECIAL = ("_nczarr_maxstrlen", "_nczarr_default_maxstrlen")


def _without_special(ds: xr.Dataset) -> xr.Dataset:
    ds = ds.copy()
    ds.attrs = {k: v for k, v in ds.attrs.items() if k not in _NETCDF_C_SPECIAL}
    for var in ds.variables.values():
        var.attrs = {k: v for k, v in var.attrs.items() if k not in _NETCDF_C_SPECIAL}
    return ds


def assert_same_dataset(back: xr.Dataset, src: xr.Dataset, where: str) -> None:
    """Same variables, dims, coordinates (and which are indexes), values and attributes."""
    assert dict(back.sizes) == dict(src.sizes), where
    assert sorted(map(str, back.variables)) == sorted(map(str, src.variables)), where
    assert sorted(map(str, back.coords)) == sorted(map(str, src.coords)), where
    assert sorted(map(str, back.indexes)) == sorted(map(str, src.indexes)), where
    assert {k: _plain(v) for k, v in back.attrs.items()} == {k: _plain(v) for k, v in src.attrs.items()}, where
    for name, var in src.variables.items():
        got = back.variables[name]
        assert got.dims == var.dims, (where, name)
        g, s = _values(got), _values(var)
        assert g[1] == s[1], (where, name)
        if isinstance(s[0], list):
            assert g[0] == s[0], (where, name)
        else:
            np.testing.assert_array_equal(g[0], s[0], err_msg=f"{where}: {name}")
        assert {k: _plain(v) for k, v in got.attrs.items()} == {k: _plain(v) for k, v in var.attrs.items()}, (
            where, name)


def assert_same(back, src, where: str) -> None:
    if isinstance(src, xr.DataTree):
        assert sorted(n.path for n in back.subtree) == sorted(n.path for n in src.subtree), where
        for node in src.subtree:
            assert_same_dataset(back[node.path].to_dataset(inherit=False), node.to_dataset(inherit=False),
                                f"{where} group {node.path}")
    else:
        assert_same_dataset(back, src, where)


# ---------------------------------------------------------------------------------------------
# The matrix
# ---------------------------------------------------------------------------------------------

_CASES = [(s, w, r) for s in SOURCES for w, (_, _, _, readers) in WRITERS.items() for r in ("zstrings", *readers)
          if r != "zstrings" or WRITERS[w][2] == ".zarr"]
_CASES = list(dict.fromkeys(_CASES))
_written: dict[tuple[str, str, bool], tuple[object, Path]] = {}


def _write(sid: str, writer: str, base: Path, tree: bool):
    key = (sid, writer, tree)
    if key not in _written:
        src = source(sid, base)
        fmt, write, suffix, _ = WRITERS[writer]
        obj = _open_any(src, tree, fmt).load()
        out = base / f"{sid}.{len(_written)}{suffix}"
        write(obj, out)
        _written[key] = (obj, out)
    return _written[key]


#: sources with a codec netcdf-c has no filter for: the writers for netcdf-c refuse them (the cell's
#: expected outcome; test_to_nczarr_refuses_a_codec_netcdf_c_cannot_read writes them anyway)
_NETCDF_C_CANNOT_READ = {"zarr3-compressed": "gzip"}


#: cells that end in a refusal, each for its reason (the missing-value sources): the writer or
#: reader raises, nothing reads back changed
_REFUSED = {
    # xarray 2026.9 writes a string/bytes _FillValue attribute on a v3 array but cannot decode it
    ("missing-*", "to_zarr(v3)", "zarr"): (ValueError, "Failed to decode fill_value"),
    # (ds.zstrings.to_zarr(v3) writes a text fill as CF missing_value, which xarray writes and masks:
    # only the bytes variables' fills of these two sources stay _FillValue attributes)
    ("missing-zarr2-null", "zstrings.to_zarr(v3)", "zarr"): (ValueError, "Failed to decode fill_value"),
    ("missing-zarrs-optional", "zstrings.to_zarr(v3)", "zarr"): (ValueError, "Failed to decode fill_value"),
    # to_zarr_v3: zarrs' optional type (missing values without a fill) is read by zarr-python through
    # the package's plugin (xr_zstrings.zarr_plugin): compared like any cell (first match wins)
    ("missing-zarrs-optional", "to_zarr_v3", "zarr"): None,
    # to_zarr_v3: a CF _FillValue attribute, as above
    ("missing-*", "to_zarr_v3", "zarr"): (ValueError, "Failed to decode fill_value"),
    # to_nczarr: missing values without a fill of their own are refused, naming the fix; a bytes
    # variable's fill of two bytes is refused as an NC_CHAR fill
    ("missing-zarr2-null", "to_nczarr", "*"): (ZStringsError, "missing value|NC_CHAR fill value is one byte"),
    ("missing-zarrs-optional", "to_nczarr", "*"): (ZStringsError, "missing value"),
}


def _refused(sid: str, writer: str, reader: str):
    for (s, w, r), outcome in _REFUSED.items():
        if (s == sid or (s.endswith("*") and sid.startswith(s[:-1]))) and w == writer and r in ("*", reader):
            return outcome
    return None


#: xarray's netCDF writers store a bytes variable as NC_CHAR, whose fill is one character: a bytes
#: fill of more than one byte (missing-zarr2-null's |S4 'fixed_S', fill b"NA") is not masked back by
#: engine="netcdf4" (test_bytes_fill_through_to_netcdf_is_xarrays_own shows the same from engine="zarr")
_XARRAY_NETCDF_BYTES_FILL = {("missing-zarr2-null", "fixed_S"), ("missing-zarr2-null", "vlen_bytes_null"),
                             ("missing-zarrs-optional", "bytes_packbits_vlenbytes")}


@pytest.mark.parametrize(("sid", "writer", "reader"), _CASES, ids=[f"{s} -> {w} -> {r}" for s, w, r in _CASES])
def test_dataset_writer_reader(sid, writer, reader, source_dir):
    if writer == "to_nczarr" and sid in _NETCDF_C_CANNOT_READ:
        with pytest.raises(UnsupportedError, match=f"codec '{_NETCDF_C_CANNOT_READ[sid]}': netcdf-c 4.10 cannot read it"):
            _write(sid, writer, source_dir, tree=False)
        return
    refused = _refused(sid, writer, reader)
    if refused is not None and refused[0] is ZStringsError:
        with pytest.raises(ZStringsError, match=refused[1]):
            _write(sid, writer, source_dir, tree=False)
        return
    obj, out = _write(sid, writer, source_dir, tree=False)
    if refused is not None:
        with pytest.raises(refused[0], match=refused[1]):
            _read(out, reader, writer, tree=False).load()
        return
    skip = [n for s, n in _XARRAY_NETCDF_BYTES_FILL if s == sid] if writer.startswith("to_netcdf") else []
    obj = obj.drop_vars(skip)
    with _read(out, reader, writer, tree=False) as back:
        back = back.load().drop_vars(skip)
        if reader == "netcdf4" and out.suffix == ".zarr":
            back = _without_special(back)
        assert_same(back, obj, f"{sid} -> {writer} -> {reader}")
    if reader == "zarr" and writer.startswith(("to_zarr(", "zstrings.to_zarr(")):
        _assert_codecs_kept(obj, out, 2 if "v2" in writer else 3, f"{sid} -> {writer}",
                            exact=writer.startswith("zstrings."))


_SERIALIZERS = ("bytes", "vlen-utf8", "vlen-bytes", "fixed_length_utf32", "null_terminated_bytes")


def _v2_config(codec) -> dict | None:
    """A v2 codec (numcodecs object, JSON, or a BothFormatsCodec) as numcodecs' full configuration."""
    if codec is None:
        return None
    cfg = codec.get_config() if hasattr(codec, "get_config") else dict(codec)
    return numcodecs.get_codec(dict(cfg)).get_config()


def _v3_name(codec) -> str:
    from xr_zstrings.codecs.encoding import BothFormatsCodec

    return codec.v3["name"] if isinstance(codec, BothFormatsCodec) else codec.to_dict()["name"]


def _assert_codecs_kept(src: xr.Dataset, out: Path, fmt: int, where: str, exact: bool) -> None:
    """xarray's to_zarr wrote each variable with the codecs the encoding holds (by name and
    settings) -- the format-neutral ones engine="zstrings" gives (``exact=False``: plain
    ``to_zarr``), or the store's own chain for that format (``exact``: ``ds.zstrings.to_zarr``,
    shards included) -- or with none where the source had none: never zarr-python's default in
    their place; and with the encoding's chunks."""
    expected = with_zarr_encoding(src, fmt) if exact else src
    for name, var in src.variables.items():
        enc = expected[name].encoding
        comps = enc.get("compressors") or ()
        chunks = tuple(enc["chunks"]) if enc.get("chunks") is not None and len(enc["chunks"]) == var.ndim else None
        if fmt == 2:
            meta = json.loads((out / str(name) / ".zarray").read_text())
            assert _v2_config(meta["compressor"]) == (_v2_config(comps[0]) if comps else None), (where, name)
            stored_chunks = tuple(meta["chunks"])
        else:
            meta = json.loads((out / str(name) / "zarr.json").read_text())
            chain = meta["codecs"]
            stored_chunks = tuple(meta["chunk_grid"]["configuration"]["chunk_shape"])
            if chain[0]["name"] == "sharding_indexed":
                assert exact and enc.get("shards") is not None, (where, name)  # plain to_zarr: no shards
                assert stored_chunks == tuple(enc["shards"]), (where, name)
                stored_chunks = tuple(chain[0]["configuration"]["chunk_shape"])
                chain = chain[0]["configuration"]["codecs"]
            stored = [c["name"] for c in chain if c["name"] not in _SERIALIZERS]
            assert stored == [_v3_name(c) for c in comps], (where, name)
        if chunks is not None and var.ndim:
            assert stored_chunks == chunks, (where, name, "chunks")


def test_to_nczarr_refuses_a_codec_netcdf_c_cannot_read(source_dir, tmp_path):
    ds = _open(source("zarr3-compressed", source_dir))
    with pytest.raises(UnsupportedError, match="codec 'gzip': netcdf-c 4.10 cannot read it"):
        to_nczarr(ds, tmp_path / "a.zarr")
    to_nczarr(ds, tmp_path / "a.zarr", netcdf_c_codecs_only=False, mode="w")
    assert json.loads((tmp_path / "a.zarr" / "temp" / ".zarray").read_text())["compressor"] == {
        "id": "gzip", "level": 3}
    assert_same(_open(tmp_path / "a.zarr").load(), ds.load(), "zarr3-compressed -> to_nczarr(any codec)")


def _tree_sources() -> list[str]:
    golden = [sid for sid in golden_sources() if sid.endswith("-purezarr") and not sid.startswith("nc490")]
    return ["nc4101-tree", "nc4101-purezarr", *golden]


_TREE_CASES = [(s, w, r) for s in _tree_sources() for w, (_, _, suffix, readers) in WRITERS.items()
               for r in dict.fromkeys(("zstrings", *readers)) if r != "zstrings" or suffix == ".zarr"]


@pytest.mark.parametrize(("sid", "writer", "reader"), _TREE_CASES,
                         ids=[f"{s} (tree) -> {w} -> {r}" for s, w, r in _TREE_CASES])
def test_datatree_writer_reader(sid, writer, reader, source_dir):
    obj, out = _write(sid, writer, source_dir, tree=True)
    assert len(list(obj.subtree)) > 1
    back = _read(out, reader, writer, tree=True).load()
    if reader == "netcdf4" and out.suffix == ".zarr":
        back = back.map_over_datasets(_without_special)
    assert_same(back, obj, f"{sid} (tree) -> {writer} -> {reader}")


# ---------------------------------------------------------------------------------------------
# with_netcdf_c_strings(ds).to_zarr(zarr_format=2): what `zstrings check` recommends, read by netcdf-c
# ---------------------------------------------------------------------------------------------


def _netcdf_c_masked(back: xr.Dataset, out: Path) -> xr.Dataset:
    """netcdf-c (mode=zarr) does not take .zarray's fill_value as _FillValue (xarray's v2 writer puts
    the CF fill only there): mask those values as the source has them, for the comparison."""
    back = back.copy()
    for name, var in back.variables.items():
        zarray = out / str(name) / ".zarray"
        if zarray.exists() and var.dtype.kind in "OTU":  # strings: |Sn with a base64 fill
            import base64

            meta = json.loads(zarray.read_text())
            if isinstance(meta["fill_value"], str) and meta["dtype"].startswith("|S"):
                # written elements hold the fill's bytes; never-written ones the fill's JSON text,
                # which netcdf-c takes as plain text (it reads its own NC_STRING fills so)
                fills = [base64.b64decode(meta["fill_value"]).decode("utf-8"), meta["fill_value"]]
                values = np.asarray(var.values, dtype=object)
                hit = np.isin(values, fills)
                if hit.any():
                    back[name] = var.copy(data=np.where(hit, np.nan, values).astype(object))
            continue
        if not zarray.exists() or var.dtype.kind not in "fiu":
            continue
        fill = json.loads(zarray.read_text())["fill_value"]
        if fill is None or fill == "NaN":
            continue
        values = np.asarray(var.values, dtype="f8")
        if (values == float(fill)).any():
            back[name] = var.copy(data=np.where(values == float(fill), np.nan, values))
    return back


_PREPARE_CASES = [(s, r) for s in SOURCES for r in ("zstrings", "netcdf4")]


@pytest.mark.parametrize(("sid", "reader"), _PREPARE_CASES,
                         ids=[f"{s} -> with_netcdf_c_strings+to_zarr(v2) -> {r}" for s, r in _PREPARE_CASES])
def test_prepare_for_zarr_v2(sid, reader, source_dir):
    key = (sid, "with_netcdf_c_strings", False)
    if key not in _written:
        src = _open(source(sid, source_dir)).load()
        if sid in _NETCDF_C_CANNOT_READ:
            with pytest.raises(UnsupportedError, match=f"codec '{_NETCDF_C_CANNOT_READ[sid]}': netcdf-c 4.10 cannot read it"):
                with_netcdf_c_strings(src)
            return
        if _refused(sid, "to_nczarr", "*") is not None:  # the same plan: missing values without a fill
            with pytest.raises(ZStringsError, match="missing value"):
                with_netcdf_c_strings(src)
            return
        prepared = with_netcdf_c_strings(src)
        out = source_dir / f"{sid}.prepared.{len(_written)}.zarr"
        prepared.to_zarr(out, zarr_format=2, consolidated=False)
        _written[key] = (src, out)
    src, out = _written[key]
    where = f"{sid} -> with_netcdf_c_strings+to_zarr(v2) -> {reader}"
    if reader == "zstrings":
        back = _open(out).load()
        assert_same(back, src, where)
        for name, var in src.variables.items():  # the source's compressor, or none: never zarr's default
            comp, _ = v2_configs(var.encoding, where=name)
            comp = comp[0] if isinstance(comp, list) else comp
            want = None if comp is None else (comp if isinstance(comp, dict) else comp.get_config())["id"]
            stored = json.loads((out / str(name) / ".zarray").read_text())["compressor"]
            assert (stored or {}).get("id") == want, (where, name)
        return
    # netcdf-c itself (mode=zarr): every variable, strings as NC_STRING, compared with the source
    with xr.open_dataset(url(out, "zarr"), engine="netcdf4") as back:
        back = _netcdf_c_masked(_without_special(back.load()), out)
    expected = _as_netcdf_c_reads_xarray_v2(src)
    back = back.copy()
    # the attributes left out of the expectation are left out of the comparison (extra ones still fail)
    back.attrs = {k: v for k, v in back.attrs.items() if k in expected.attrs or k not in src.attrs}
    for name, var in back.variables.items():
        if name in expected.variables:
            var.attrs = {k: v for k, v in var.attrs.items()
                         if k in expected[name].attrs or k not in src[name].attrs}
    assert_same(back, expected, where)


def _ascii_or_number(v) -> bool:
    if isinstance(v, str):
        return v.isascii()
    if isinstance(v, list | tuple):
        return all(isinstance(x, int | float | np.number) for x in v)
    return isinstance(v, int | float | np.number) or (isinstance(v, np.ndarray) and v.dtype.kind in "iuf")


def _as_netcdf_c_reads_xarray_v2(ds: xr.Dataset) -> xr.Dataset:
    """What netcdf-c 4.10.1 can show of a pure Zarr v2 store that xarray/zarr-python wrote (its own
    limits, not ours, checked in test_netcdf_c_limits_on_xarray_v2_stores): no 0-d arrays (xarray
    writes them with shape []), non-ASCII text attributes come back with their JSON escapes
    mangled, string-list attributes as JSON text."""
    ds = ds.drop_vars([n for n, v in ds.variables.items() if v.ndim == 0]).copy()  # own attrs dicts
    ds.attrs = {k: v for k, v in ds.attrs.items() if _ascii_or_number(v)}
    for var in ds.variables.values():
        var.attrs = {k: v for k, v in var.attrs.items() if _ascii_or_number(v)}
    return ds


def test_netcdf_c_limits_on_xarray_v2_stores(tmp_path):
    """The netcdf-c limits the comparison above allows for, shown on a plain xarray v2 store: if a
    netcdf-c release lifts one, this fails and the allowance (and docs/format-notes.md) can go."""
    ds = xr.Dataset({"sc": ((), 2.5), "v": ("x", np.arange(3.0), {"long_name": "température"})},
                    attrs={"tags": ["a", "b"]})
    ds.to_zarr(tmp_path / "a.zarr", zarr_format=2, consolidated=False)
    with netCDF4.Dataset(url(tmp_path / "a.zarr", "zarr")) as nc:
        assert "sc" not in nc.variables
        assert nc["v"].long_name != "température"
        assert isinstance(nc.getncattr("tags"), str)


# ---------------------------------------------------------------------------------------------
# Codecs keep their meaning through every Zarr writer
# ---------------------------------------------------------------------------------------------


def _v2_codecs(path: Path) -> tuple:
    z = json.loads(path.read_text())
    return z["compressor"], z["filters"]


def _v3_codecs(path: Path) -> list:
    return [c for c in json.loads(path.read_text())["codecs"] if c["name"] not in ("bytes", "vlen-utf8")]


# source, variable, codecs as written to v2 (.zarray compressor, filters), as written to v3 (codecs)
_CODEC_CASES = {
    "nc4101-numeric": ("temp", ({"id": "zlib", "level": 1}, [{"id": "shuffle", "elementsize": 4}]),
                       [{"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}},
                        {"name": "numcodecs.zlib", "configuration": {"level": 1}}]),
    "zarr2-compressors": ("count", ({"id": "blosc", "cname": "lz4", "clevel": 3, "shuffle": 2, "blocksize": 0},
                                    None),
                          [{"name": "blosc", "configuration": {"typesize": 8, "cname": "lz4", "clevel": 3,
                                                               "shuffle": "bitshuffle", "blocksize": 0}}]),
    "zarr3-compressed": ("temp", ({"id": "gzip", "level": 3}, None),
                         [{"name": "gzip", "configuration": {"level": 3}}]),
}


@pytest.mark.parametrize("sid", list(_CODEC_CASES))
def test_codecs_keep_their_meaning(sid, source_dir, tmp_path):
    name, (v2_comp, v2_filters), v3 = _CODEC_CASES[sid]
    ds = _open(source(sid, source_dir))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        ds.zstrings.to_zarr(tmp_path / "v3.zarr", zarr_format=3)
        ds.zstrings.to_zarr(tmp_path / "v2.zarr", zarr_format=2)
        # and back again: v3 -> v2 -> v3 gives the same chain
        _open(tmp_path / "v2.zarr").zstrings.to_zarr(tmp_path / "v3b.zarr", zarr_format=3)
    assert _v3_codecs(tmp_path / "v3.zarr" / name / "zarr.json") == v3
    assert _v3_codecs(tmp_path / "v3b.zarr" / name / "zarr.json") == v3
    comp, filters = _v2_codecs(tmp_path / "v2.zarr" / name / ".zarray")
    assert {k: v for k, v in comp.items() if k != "typesize"} == v2_comp
    assert filters == v2_filters


def test_numeric_codec_without_v3_equivalent_is_dropped_with_a_warning():
    from xr_zstrings import CodecDroppedWarning

    ds = xr.Dataset({"v": ("x", np.arange(4.0))})
    ds["v"].encoding = {"compressors": (zarr.codecs.ZstdCodec(level=1),),
                        "filters": (zarr.codecs.TransposeCodec(order=(0,)),)}
    with pytest.warns(CodecDroppedWarning, match="transpose.*no Zarr v2"):
        enc = with_zarr_encoding(ds, 2)["v"].encoding
    assert [c.get_config() for c in enc["compressors"]] == [{"id": "zstd", "level": 1, "checksum": False}]
    assert enc["filters"] is None


# ---------------------------------------------------------------------------------------------
# Plain ds.to_zarr(zarr_format=2 | 3) on what engine="zstrings" opened, with zarr-python's defaults
# ---------------------------------------------------------------------------------------------


def _assert_zarr_python_reads(out: Path, src: xr.Dataset, fmt: int, where: str) -> None:
    """zarr-python itself (no xarray) opens every array with the source's dims, and its text arrays
    hold the source's strings (where the source has a value; a missing one is stored as a fill)."""
    g = zarr.open_group(out, mode="r", zarr_format=fmt)
    for name, var in src.variables.items():
        arr = g[str(name)]
        dims = arr.metadata.dimension_names if fmt == 3 else arr.attrs.get("_ARRAY_DIMENSIONS")
        assert tuple(dims or ()) == var.dims, (where, name)
        if var.dtype.kind not in "OTU":
            continue
        got = np.asarray(arr[...], dtype=object).reshape(-1).tolist()
        want = np.asarray(var.values, dtype=object).reshape(-1).tolist()
        pairs = [(g_, w) for g_, w in zip(got, want, strict=True)
                 if not (w is None or (isinstance(w, float) and w != w))]
        assert [_plain(g_) for g_, _ in pairs] == [_plain(w) for _, w in pairs], (where, name)


_PLAIN_CASES = [(s, f) for s in SOURCES for f in (2, 3)]


@pytest.mark.parametrize(("sid", "fmt"), _PLAIN_CASES,
                         ids=[f"{s} -> to_zarr(v{f}) plain -> zarr-python" for s, f in _PLAIN_CASES])
def test_plain_to_zarr_of_what_we_read(sid, fmt, source_dir, tmp_path):
    """xarray's own ``to_zarr``, called as a new user calls it on what engine="zstrings" opened (no
    encoding edited, zarr-python's default settings), writes both formats from every source: the
    codecs the encoding holds (one format-neutral spec each) and its chunks, read back by
    zarr-python itself (here), engine="zarr" and engine="zstrings" (the matrix above)."""
    where = f"{sid} -> to_zarr(v{fmt}) plain"
    src = _open(source(sid, source_dir)).load()
    out = _write(sid, f"to_zarr(v{fmt})", source_dir, tree=False)[1]
    _assert_zarr_python_reads(out, src, fmt, where)
    _assert_codecs_kept(src, out, fmt, where, exact=False)


def test_plain_to_zarr_v2_output_with_strings_is_not_read_by_netcdf_c(tmp_path):
    """netcdf-c 4.10.1 (mode=zarr) refuses a whole pure Zarr v2 store holding the strings xarray
    writes to v2 (``<Un`` for StringDType, vlen-utf8 ``|O`` for objects), so plain
    ``to_zarr(zarr_format=2)`` output is not netcdf-c-compatible: ``with_netcdf_c_strings`` (|Sn +
    _nczarr_maxstrlen, tested above with netCDF4) is the route there. If a netcdf-c release reads
    it, this fails and docs/format-notes.md can say so."""
    ds = _open(sample_path()).load()
    ds.zstrings.to_zarr(tmp_path / "t.zarr", zarr_format=2, consolidated=False)
    xr.Dataset({"s": ("x", np.array(["a", "é"], dtype=object))}).to_zarr(tmp_path / "o.zarr", zarr_format=2,
                                                                         consolidated=False)
    for store, dtype in (("t.zarr", "<U9"), ("o.zarr", "|O")):
        name = "station" if store == "t.zarr" else "s"
        assert json.loads((tmp_path / store / name / ".zarray").read_text())["dtype"] == dtype
        with pytest.raises(OSError, match="NCZarr error"):
            netCDF4.Dataset(url(tmp_path / store, "zarr"))


# ---------------------------------------------------------------------------------------------
# Golden stores whose strings read back missing without a fill value: what each writer does
# ---------------------------------------------------------------------------------------------

_MISSING_SOURCES = {
    "zarrs-optional": Path(__file__).resolve().parents[1] / "golden_chunks" / "zarrs_optional" / "optional.zarr",
    "zarr-python-2.18-null": Path(__file__).resolve().parents[1] / "golden_missing" / "zarr-python-2.18" / "missing.zarr",
}


def _missing_source(sid: str) -> xr.Dataset:
    ds = _open(_MISSING_SOURCES[sid]).load()
    # (StringDType with an NA object: xarray's isnull() takes "" for missing in a plain StringDType)
    keep = [n for n, v in ds.data_vars.items() if hasattr(v.dtype, "na_object") and bool(v.isnull().any())
            and v.encoding.get("zstrings_missing_marker")]
    assert keep, sid  # the golden store holds missing strings
    return ds[keep]


def _missing_as_none(values) -> list:
    return [None if v is None or (isinstance(v, float) and v != v) else v
            for v in np.asarray(values, dtype=object).reshape(-1).tolist()]


@pytest.mark.parametrize("sid", list(_MISSING_SOURCES))
def test_missing_strings_without_a_fill_through_every_writer(sid, tmp_path):
    """Missing strings that no fill value marks (zarrs' optional type, a v2 ``fill_value: null``):
    engine="zstrings" gives them ``encoding["_FillValue"]`` = U+FFFF (a noncharacter, flagged by
    ``zstrings_missing_marker``), so xarray's own writers write them as that fill, never as the text
    "nan", and every CF reader masks it back (the matrix above reads each writer's output);
    ``to_zarr_v3`` writes them in zarrs' optional type; ``to_nczarr`` refuses them naming the fix,
    and with a string ``_FillValue`` set they round-trip through netcdf-c as its fill."""
    from xr_zstrings import MissingStringsWarning, ZStringsError
    from xr_zstrings.read.variables import MISSING_MARKER
    from xr_zstrings.write.zarr3 import to_zarr_v3

    ds = _missing_source(sid)
    want = {n: _missing_as_none(v.values) for n, v in ds.data_vars.items()}
    marker = {}
    for n, var in ds.data_vars.items():
        marker[n] = var.encoding["_FillValue"]  # text: U+FFFF; bytes: its UTF-8
        assert marker[n] in (MISSING_MARKER, MISSING_MARKER.encode()) and var.encoding["zstrings_missing_marker"]
    assert MISSING_MARKER == "\uffff"
    with pytest.warns(MissingStringsWarning):
        to_zarr_v3(ds, tmp_path / "v3.zarr")
    back = _open(tmp_path / "v3.zarr")
    assert {n: _missing_as_none(back[n].values) for n in want} == want

    with pytest.raises(ZStringsError, match=r"missing value\(s\).*_FillValue"):
        to_nczarr(ds, tmp_path / "refused.zarr")
    filled = ds.copy()
    for var in filled.data_vars.values():  # (zarrs' gzip is no codec netcdf-c reads: written without)
        gz = any("gzip" in repr(c).lower() for c in var.encoding.get("compressors") or ())
        enc = {k: v for k, v in var.encoding.items() if k != "zstrings_missing_marker"}
        var.encoding = {**enc, "_FillValue": "<missing>", **({"compressors": None} if gz else {})}
    to_nczarr(filled, tmp_path / "nc.zarr")
    assert {n: _missing_as_none(v.values) for n, v in _open(tmp_path / "nc.zarr").data_vars.items()} == want
    peer = xr.open_dataset(url(tmp_path / "nc.zarr", "nczarr"), engine="netcdf4")
    assert {n: _missing_as_none(peer[n].values) for n in want} == want  # netcdf-c + xarray mask the fill

    # xarray's writers: the marker in the store where a value is missing, never "nan"
    for fmt in (2, 3):
        _to_zarr_unchanged(ds, tmp_path / f"x{fmt}.zarr", fmt)
        raw = zarr.open_group(tmp_path / f"x{fmt}.zarr", mode="r")
        for n, values in want.items():
            stored = np.asarray(raw[n][...], dtype=object).reshape(-1).tolist()
            assert stored == [marker[n] if v is None else v for v in values], (fmt, n)
        back = _open(tmp_path / f"x{fmt}.zarr")
        assert {n: _missing_as_none(back[n].values) for n in want} == want
    ds.to_netcdf(tmp_path / "x.nc", engine="netcdf4")
    with netCDF4.Dataset(tmp_path / "x.nc") as nc:
        for n, values in want.items():
            stored = np.asarray(nc[n][:], dtype=object).reshape(-1).tolist()
            assert [s.encode() if isinstance(marker[n], bytes) and isinstance(s, str) else s for s in stored] == [
                marker[n] if v is None else v for v in values], n
    back = xr.open_dataset(tmp_path / "x.nc", engine="netcdf4")
    assert {n: _missing_as_none(back[n].values) for n in want} == want


def test_bytes_fill_through_to_netcdf_is_xarrays_own(source_dir, tmp_path):
    """The one cell the matrix leaves out: a bytes variable whose fill is two bytes (|S4, fill b"NA")
    written by xarray's to_netcdf (as NC_CHAR, whose fill netCDF holds as one character) reads back
    unmasked with engine="netcdf4" -- the same from engine="zarr"'s reading of the store."""
    src = source("missing-zarr2-null", source_dir)
    for engine, kw in (("zstrings", {}), ("zarr", {"consolidated": False})):
        ds = xr.open_dataset(src, engine=engine, **kw)[["fixed_S"]].load()
        assert _values(ds["fixed_S"].variable)[0][2:] == [None] * 4
        ds.to_netcdf(tmp_path / f"{engine}.nc", engine="netcdf4")
        back = xr.open_dataset(tmp_path / f"{engine}.nc", engine="netcdf4")["fixed_S"]
        assert _values(back.variable)[0][2:] == ["NA"] * 4, engine
