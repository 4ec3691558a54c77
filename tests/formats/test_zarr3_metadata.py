"""Zarr v3 metadata (``metadata_v3``): parsed from zarr.json documents that zarr-python 3 and xarray
really wrote, checked against zarr-python's own reading of them and against the chunk files on disk;
plus hand-written Arrow-ZEP and zarrs documents (no Python writer exists) and malformed documents.
"""

from __future__ import annotations

import copy
import json
import math
import os
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.codecs import BytesCodec

from xr_zstrings.errors import DimensionError, MetadataError, UnsupportedError
from xr_zstrings.formats.nczarr import parse_json
from xr_zstrings.formats.zarr3 import (
    ArrayMetaV3,
    GroupMetaV3,
    decode_xarray_fill_attr,
    normalize_data_type,
    parse_node_v3,
)

STORE = "/data/v3.zarr"


def _load(path: Path) -> dict:
    return parse_json(path.read_bytes(), where=str(path))


def _node(store: Path, rel: str) -> ArrayMetaV3 | GroupMetaV3:
    rel = rel.strip("/")
    return parse_node_v3(_load(store / rel / "zarr.json"), path="/" + rel, store=str(store))


def test_importing_metadata_v3_imports_neither_xarray_nor_zarr():
    code = ("import sys, xr_zstrings.formats.zarr3; "
            "bad = [m for m in ('xarray', 'zarr') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# ---------------------------------------------------------------------------------------
# Arrays written by zarr-python 3, compared with zarr-python's own view and the files on disk
# ---------------------------------------------------------------------------------------

def _values(dtype, shape):
    """Data that differ from every fill value used below (so every chunk is really written)."""
    n = math.prod(shape)
    if dtype == "bool":
        base = np.arange(n) % 2 == 0
    elif dtype in ("str", "T"):
        base = np.array([f"s{i}é" for i in range(n)], dtype=object)
    elif dtype == "vbytes":
        base = np.array([b"b%d\x00" % i for i in range(n)], dtype=object)
    elif dtype == "<U5":
        base = np.array([f"u{i}" for i in range(n)], dtype="<U5")
    elif dtype == "S5":
        base = np.array([b"x%d" % i for i in range(n)], dtype="S5")
    else:
        base = (np.arange(n) % 100 + 7).astype(dtype)
    return base.reshape(shape)


# name -> (create_array kwargs, dtype key for _values)
ZARR_ARRAYS = {
    "bool": ({"shape": (5,), "chunks": (2,), "dtype": "bool", "fill_value": True}, "bool"),
    "int8": ({"shape": (5,), "chunks": (2,), "dtype": "int8", "fill_value": -3}, "int8"),
    "int16": ({"shape": (5,), "chunks": (5,), "dtype": "int16"}, "int16"),
    "int32": ({"shape": (4, 3), "chunks": (3, 2), "dtype": "int32", "fill_value": -2147483648}, "int32"),
    "int64": ({"shape": (3,), "chunks": (2,), "dtype": "int64", "fill_value": -(2**63)}, "int64"),
    "uint8": ({"shape": (3,), "chunks": (2,), "dtype": "uint8", "fill_value": 255}, "uint8"),
    "uint16": ({"shape": (3,), "chunks": (2,), "dtype": "uint16"}, "uint16"),
    "uint32": ({"shape": (3,), "chunks": (2,), "dtype": "uint32", "fill_value": 4294967295}, "uint32"),
    "uint64": ({"shape": (3,), "chunks": (2,), "dtype": "uint64", "fill_value": 2**64 - 1}, "uint64"),
    "float16_nan": ({"shape": (3,), "chunks": (2,), "dtype": "float16", "fill_value": np.nan}, "float16"),
    "float32_inf": ({"shape": (3,), "chunks": (2,), "dtype": "float32", "fill_value": np.inf}, "float32"),
    "float64_ninf": ({"shape": (3,), "chunks": (2,), "dtype": "float64", "fill_value": -np.inf}, "float64"),
    "float64_num": ({"shape": (3,), "chunks": (2,), "dtype": "float64", "fill_value": -9.5e300}, "float64"),
    "float32_default": ({"shape": (3,), "chunks": (2,), "dtype": "float32"}, "float32"),
    "big_endian_int32": ({"shape": (3,), "chunks": (2,), "dtype": "int32", "serializer": BytesCodec(endian="big")},
                         "int32"),
    "str_fill": ({"shape": (5,), "chunks": (2,), "dtype": str, "fill_value": "fïll"}, "str"),
    "str_default": ({"shape": (5,), "chunks": (2,), "dtype": str}, "str"),
    "stringdtype": ({"shape": (5,), "chunks": (2,), "dtype": np.dtypes.StringDType()}, "T"),
    "vlen_bytes": ({"shape": (5,), "chunks": (2,), "dtype": "VariableLengthBytes", "fill_value": b"\x00\xff"},
                   "vbytes"),
    "vlen_bytes_default": ({"shape": (5,), "chunks": (2,), "dtype": "VariableLengthBytes"}, "vbytes"),
    "U5": ({"shape": (5,), "chunks": (2,), "dtype": "<U5", "fill_value": "abc"}, "<U5"),
    "U5_default": ({"shape": (5,), "chunks": (2,), "dtype": "<U5"}, "<U5"),
    "S5": ({"shape": (5,), "chunks": (2,), "dtype": "S5", "fill_value": b"ab"}, "S5"),
    "S5_default": ({"shape": (5,), "chunks": (2,), "dtype": "S5"}, "S5"),
    "named_dims": ({"shape": (5, 4), "chunks": (2, 3), "dtype": str, "dimension_names": ["y", None],
                        "attributes": {"units": "m", "nested": {"a": [1, 2]}}}, "str"),
    "sharded": ({"shape": (10, 7), "chunks": (2, 3), "shards": (4, 6), "dtype": str, "dimension_names": ["y", "x"]},
                "str"),
    "sharded_num": ({"shape": (9,), "chunks": (3,), "shards": (6,), "dtype": "float32"}, "float32"),
    "v2_dot": ({"shape": (5, 4), "chunks": (2, 2), "dtype": "int32",
                    "chunk_key_encoding": {"name": "v2", "separator": "."}}, "int32"),
    "v2_slash": ({"shape": (5, 4), "chunks": (2, 2), "dtype": str,
                      "chunk_key_encoding": {"name": "v2", "separator": "/"}}, "str"),
    "default_dot": ({"shape": (5, 4), "chunks": (2, 2), "dtype": "uint8",
                         "chunk_key_encoding": {"name": "default", "separator": "."}}, "uint8"),
    "scalar_f8": ({"shape": (), "dtype": "float64", "fill_value": np.nan}, "float64"),
    "scalar_str": ({"shape": (), "dtype": str, "fill_value": "z"}, "str"),
    "scalar_v2": ({"shape": (), "dtype": "int16", "chunk_key_encoding": {"name": "v2", "separator": "."}}, "int16"),
    "empty": ({"shape": (0, 3), "chunks": (2, 2), "dtype": str}, "str"),
}


@pytest.fixture(scope="module")
def zp_store(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("v3") / "zp.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr-python warns that fixed-length strings are unstable
        root = zarr.open_group(path, mode="w", zarr_format=3, attributes={"title": "zp", "n": 1})
        with zarr.config.set({"array.write_empty_chunks": True}):
            for name, (kwargs, vkey) in ZARR_ARRAYS.items():
                kw = dict(kwargs)
                if kw["dtype"] == "VariableLengthBytes":
                    kw["dtype"] = zarr.dtype.VariableLengthBytes()
                arr = root.create_array(name, **kw)
                if math.prod(arr.shape) or arr.shape == ():
                    arr[...] = _values(vkey, arr.shape)
        sub = root.create_group("sub", attributes={"a": [1, 2], "s": "é"})
        sub.create_array("b", shape=(3,), dtype="uint8")
        sub.create_group("deeper").create_array("c", shape=(2,), dtype=str)
    return path


def _same_fill(ours, theirs) -> bool:
    if type(ours) is not type(theirs):
        return False
    if isinstance(ours, np.floating) and np.isnan(theirs):
        return bool(np.isnan(ours))
    return bool(ours == theirs)


def _chunk_files(array_dir: Path) -> set[str]:
    out = set()
    for dirpath, _, files in os.walk(array_dir):
        for f in files:
            rel = os.path.relpath(os.path.join(dirpath, f), array_dir).replace(os.sep, "/")
            if rel != "zarr.json":
                out.add(rel)
    return out


@pytest.mark.parametrize("name", list(ZARR_ARRAYS))
def test_parse_matches_zarr_python_and_chunk_files_on_disk(zp_store, name):
    meta = _node(zp_store, name)
    arr = zarr.open_array(zp_store / name, mode="r")
    assert isinstance(meta, ArrayMetaV3)
    assert meta.path == f"/{name}" and meta.name == name
    assert meta.shape == arr.shape
    assert meta.inner_chunks == arr.chunks
    assert meta.shards == arr.shards
    assert meta.sharded == (arr.shards is not None)
    assert meta.chunks == (arr.shards or arr.chunks)
    assert meta.dimension_names == arr.metadata.dimension_names
    assert dict(meta.attrs) == arr.attrs.asdict()
    assert _same_fill(meta.fill_value, arr.fill_value), (meta.fill_value, arr.fill_value)
    assert meta.scalar == (arr.shape == ())
    assert meta.generation == "zarr-v3"
    # the dtype chunks decode to agrees with what zarr-python returns
    got = arr[...]
    if meta.data_type in ("string", "large_string"):
        assert meta.dtype == np.dtypes.StringDType() and meta.string_kind == "vlen"
    elif meta.data_type == "bytes":
        assert meta.dtype == np.dtype(object) and meta.string_kind == "vlen-bytes"
    else:
        assert meta.dtype == got.dtype.newbyteorder("=")
    # every chunk key we compute is a file zarr-python wrote, and nothing else was written
    keys = {meta.chunk_key(idx) for idx in np.ndindex(*meta.chunk_grid_shape)}
    assert keys == _chunk_files(zp_store / name)
    for idx in np.ndindex(*meta.chunk_grid_shape):
        assert meta.chunk_key(idx) == arr.metadata.encode_chunk_key(idx)


def test_data_type_names_and_dtypes(zp_store):
    expect = {
        "bool": ("bool", "bool", None),
        "uint64": ("uint64", "uint64", None),
        "float16_nan": ("float16", "float16", None),
        "str_fill": ("string", np.dtypes.StringDType(), "vlen"),
        "stringdtype": ("string", np.dtypes.StringDType(), "vlen"),
        "vlen_bytes": ("bytes", object, "vlen-bytes"),
        "U5": ("fixed_length_utf32", "<U5", "unicode"),
        "S5": ("null_terminated_bytes", "S5", "string"),
    }
    for name, (dt, dtype, kind) in expect.items():
        m = _node(zp_store, name)
        assert (m.data_type, m.dtype, m.string_kind) == (dt, np.dtype(dtype), kind), name
    assert _node(zp_store, "U5").data_type_config == {"length_bytes": 20}
    assert _node(zp_store, "S5").data_type_config == {"length_bytes": 5}
    assert _node(zp_store, "S5").maxstrlen == 5


def test_fill_values_decode_to_zarr_python_types(zp_store):
    m = {n: _node(zp_store, n).fill_value for n in ZARR_ARRAYS if n != "empty"}
    assert m["str_fill"] == "fïll" and type(m["str_fill"]) is str
    assert m["str_default"] == ""
    assert m["vlen_bytes"] == b"\x00\xff" and type(m["vlen_bytes"]) is bytes
    assert m["vlen_bytes_default"] == b""
    assert m["U5"] == np.str_("abc") and type(m["U5"]) is np.str_
    assert m["S5"] == np.bytes_(b"ab") and type(m["S5"]) is np.bytes_
    assert np.isnan(m["float16_nan"]) and m["float16_nan"].dtype == np.float16
    assert m["float32_inf"] == np.float32(np.inf) and m["float64_ninf"] == -np.inf
    assert m["uint64"] == np.uint64(2**64 - 1) and m["int64"] == np.int64(-(2**63))
    assert m["bool"] is np.True_


def test_sharding_codec_kept_and_scalar_chunk_keys(zp_store):
    sh = _node(zp_store, "sharded")
    assert sh.chunks == (4, 6) and sh.inner_chunks == (2, 3) and sh.chunk_grid_shape == (3, 2)
    assert sh.codecs[0]["name"] == "sharding_indexed"
    assert sh.codecs[0]["configuration"]["codecs"][0]["name"] == "vlen-utf8"
    assert sh.chunk_key((2, 1)) == "c/2/1"
    sc = _node(zp_store, "scalar_f8")
    assert sc.scalar and sc.chunk_key(()) == "c" and sc.chunk_key((0,)) == "c"
    assert _node(zp_store, "scalar_v2").chunk_key(()) == "0"
    assert _node(zp_store, "v2_dot").chunk_key((2, 1)) == "2.1"
    assert _node(zp_store, "v2_slash").chunk_key((2, 1)) == "2/1"
    assert _node(zp_store, "default_dot").chunk_key((2, 1)) == "c.2.1"
    big = _node(zp_store, "big_endian_int32")
    assert big.codecs[0] == {"name": "bytes", "configuration": {"endian": "big"}}
    assert big.dtype == np.dtype("int32")  # chunks decode to native order
    with pytest.raises(ValueError, match="chunk index"):
        sh.chunk_key((3, 0))
    with pytest.raises(ValueError, match="chunk index"):
        sh.chunk_key((0,))


def test_groups_and_consolidated_metadata_from_zarr_python(zp_store, tmp_path):
    import shutil

    store = tmp_path / "c.zarr"
    shutil.copytree(zp_store, store)
    root = _node(store, "/")
    assert isinstance(root, GroupMetaV3) and root.consolidated is None
    assert root.attrs == {"title": "zp", "n": 1}
    sub = _node(store, "sub")
    assert sub.attrs == zarr.open_group(store / "sub", mode="r").attrs.asdict()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr-python: fixed-length strings have no v3 spec yet
        zarr.consolidate_metadata(store)
    raw = _load(store / "zarr.json")
    assert raw["consolidated_metadata"]["kind"] == "inline"
    assert raw["consolidated_metadata"]["must_understand"] is False
    root = _node(store, "/")
    zroot = zarr.open_group(store, mode="r", use_consolidated=True)
    members = {k for k, _ in zroot.members(max_depth=None)}
    assert set(root.consolidated) == members
    assert {"sub", "sub/b", "sub/deeper", "sub/deeper/c"} <= members
    # each consolidated entry parses to the same metadata as the node's own zarr.json
    for rel, obj in root.consolidated.items():
        ours = parse_node_v3(obj, path="/" + rel, store=str(store))
        disk = _node(store, rel)
        assert type(ours) is type(disk)
        if isinstance(ours, ArrayMetaV3):
            fields = ("shape", "chunks", "data_type", "dtype", "codecs", "dimension_names", "attrs",
                      "chunk_key_encoding", "separator")
            assert [getattr(ours, f) for f in fields] == [getattr(disk, f) for f in fields]
            assert _same_fill(ours.fill_value, disk.fill_value)
        else:
            assert ours.attrs == disk.attrs
    # child groups carry zarr-python's empty flattened form
    assert parse_node_v3(root.consolidated["sub"], path="/sub").consolidated == {}


def test_nested_consolidated_form_is_folded_in():
    arr = {"zarr_format": 3, "node_type": "array", "shape": [1], "data_type": "int8",
           "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1]}},
           "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": [{"name": "bytes"}]}
    doc = {"zarr_format": 3, "node_type": "group", "consolidated_metadata": {
        "kind": "inline", "must_understand": False, "metadata": {
            "g": {"zarr_format": 3, "node_type": "group", "consolidated_metadata": {
                "kind": "inline", "must_understand": False, "metadata": {"a": arr}}}}}}
    g = parse_node_v3(doc, path="/", store=STORE)
    assert set(g.consolidated) == {"g", "g/a"}
    assert parse_node_v3({"zarr_format": 3, "node_type": "group", "consolidated_metadata": None},
                         path="/").consolidated is None
    ignorable = {"zarr_format": 3, "node_type": "group",
                 "consolidated_metadata": {"kind": "remote", "must_understand": False}}
    assert parse_node_v3(ignorable, path="/").consolidated is None


# ---------------------------------------------------------------------------------------
# xarray's to_zarr(zarr_format=3, consolidated=True) with string coordinates
# ---------------------------------------------------------------------------------------

def test_xarray_to_zarr_v3_consolidated_with_string_coordinates(tmp_path):
    ds = xr.Dataset(
        {"t": (("station", "time"), np.arange(6.0).reshape(2, 3), {"units": "K"})},
        coords={
            "station": ["Zürich", "東京"],  # numpy <U6 -> fixed_length_utf32
            "name": ("station", np.array(["a", "bé"], dtype=object)),  # object -> string + vlen-utf8
            "code": ("station", np.array([b"x", b"yy"])),  # |S2 -> null_terminated_bytes
        },
        attrs={"title": "xr"},
    )
    path = tmp_path / "x.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(path, zarr_format=3, consolidated=True)
    root = _node(path, "/")
    assert root.attrs == {"title": "xr"}
    assert set(root.consolidated) == {"t", "station", "name", "code"}
    zroot = zarr.open_group(path, mode="r", use_consolidated=True)
    for rel, obj in root.consolidated.items():
        meta = parse_node_v3(obj, path="/" + rel, store=str(path))
        arr = zroot[rel]
        assert meta.shape == arr.shape and meta.chunks == arr.chunks
        assert meta.dimension_names == arr.metadata.dimension_names
        assert dict(meta.attrs) == arr.attrs.asdict()
        assert _same_fill(meta.fill_value, arr.fill_value)
        assert {meta.chunk_key(i) for i in np.ndindex(*meta.chunk_grid_shape)} == _chunk_files(path / rel)
    kinds = {rel: parse_node_v3(o, path="/" + rel).data_type for rel, o in root.consolidated.items()}
    assert kinds == {"t": "float64", "station": "fixed_length_utf32", "name": "string",
                     "code": "null_terminated_bytes"}
    name = parse_node_v3(root.consolidated["name"], path="/name")
    assert name.codecs[0]["name"] == "vlen-utf8" and name.dimension_names == ("station",)
    assert parse_node_v3(root.consolidated["station"], path="/station").dtype == np.dtype("<U6")


def test_xarray_fill_value_attribute_decodes_as_xarray_does(tmp_path):
    ds = xr.Dataset({
        "f": ("x", np.array([1.0, np.nan], dtype="float32"), {"_FillValue": np.float32(-9.5)}),
        "d": ("x", np.array([1.0, 2.0]), {"_FillValue": np.nan}),
        "i": ("x", np.array([1, 2], dtype="int16"), {"_FillValue": -1}),
        "b": ("x", np.array([True, False]), {"_FillValue": True}),
    })
    path = tmp_path / "fv.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(path, zarr_format=3, consolidated=True)
        back = xr.open_zarr(path, mask_and_scale=False)
    for v in ds.data_vars:
        meta = _node(path, v)
        ours = decode_xarray_fill_attr(meta.attrs["_FillValue"], meta)
        theirs = back[v].attrs["_FillValue"]
        assert type(ours) is type(theirs)
        assert ours == theirs or (np.isnan(ours) and np.isnan(theirs))
    assert _node(path, "d").attrs["_FillValue"] == "AAAAAAAA+H8="
    # the forms xarray writes for text but cannot decode itself
    u = parse_node_v3(_doc(data_type={"name": "fixed_length_utf32", "configuration": {"length_bytes": 8}},
                           fill_value=""), path="/u")
    assert decode_xarray_fill_attr("zz", u) == "zz"
    s = parse_node_v3(_doc(data_type={"name": "null_terminated_bytes", "configuration": {"length_bytes": 2}},
                           fill_value=""), path="/s")
    assert decode_xarray_fill_attr("eno=", s) == b"zz"
    with pytest.raises(MetadataError, match=r"/data/v3\.zarr/f/zarr\.json attribute '_FillValue'"):
        decode_xarray_fill_attr(-9.5, _node(path, "f"), store="/data/v3.zarr")


# ---------------------------------------------------------------------------------------
# Hand-written documents: the Arrow-layout ZEP and zarrs (no Python writer exists for either)
# ---------------------------------------------------------------------------------------

def _doc(**over):
    doc = {
        "zarr_format": 3, "node_type": "array", "shape": [4, 3], "data_type": "int32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 2]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "attributes": {}, "dimension_names": ["y", "x"],
    }
    doc.update(over)
    return doc


# The ZEP (zep-draft-string-binary-arrow-layout.txt) gives only {"name": "string"} / {"name": "binary"}
# and calls the 64-bit variants LargeString/LargeBinary; its chunk is "the schema after all codecs", so a
# codec chain without an array->bytes codec of its own would be [{"name": "bytes"}] or a compressor.
@pytest.mark.parametrize("data_type, fill, name, dtype, kind, fill_out", [
    ({"name": "string"}, "", "string", np.dtypes.StringDType(), "vlen", ""),
    ({"name": "string"}, None, "string", np.dtypes.StringDType(), "vlen", None),
    ({"name": "binary"}, "", "binary", object, "vlen-bytes", b""),
    ({"name": "binary"}, [0, 255], "binary", object, "vlen-bytes", b"\x00\xff"),
    ({"name": "large_string"}, "x", "large_string", np.dtypes.StringDType(), "vlen", "x"),
    ({"name": "LargeString"}, "x", "large_string", np.dtypes.StringDType(), "vlen", "x"),
    ("large_binary", "AA==", "large_binary", object, "vlen-bytes", b"\x00"),
    ({"name": "LargeBinary"}, "AA==", "large_binary", object, "vlen-bytes", b"\x00"),
])
def test_arrow_zep_data_types(data_type, fill, name, dtype, kind, fill_out):
    meta = parse_node_v3(_doc(data_type=data_type, fill_value=fill,
                              codecs=[{"name": "zstd", "configuration": {"level": 3}}]),
                         path="/g/s", store=STORE)
    assert (meta.data_type, meta.dtype, meta.string_kind, meta.fill_value) == (name, np.dtype(dtype), kind,
                                                                              fill_out)
    assert meta.codecs == ({"name": "zstd", "configuration": {"level": 3}},)


ZARRS_VLEN = {
    "name": "zarrs.vlen",
    "configuration": {
        "data_codecs": [{"name": "bytes"}, {"name": "blosc", "configuration": {
            "cname": "zstd", "clevel": 5, "shuffle": "bitshuffle", "typesize": 1, "blocksize": 0}}],
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
        "index_data_type": "uint32",
        "index_location": "end",
    },
}


@pytest.mark.parametrize("codec_name", ["zarrs.vlen", "https://codec.zarrs.dev/array_to_bytes/vlen"])
@pytest.mark.parametrize("data_type, fill, name, fill_out", [
    ("string", "", "string", ""),
    ("string", "missing", "string", "missing"),
    ("bytes", [1, 2], "bytes", b"\x01\x02"),  # zarrs accepts base64 or a list of byte values
    ("bytes", "AQI=", "bytes", b"\x01\x02"),
    ("binary", "", "binary", b""),  # a zarrs alias of bytes; the layout comes from the codec
])
def test_zarrs_vlen_documents(codec_name, data_type, fill, name, fill_out):
    codec = dict(ZARRS_VLEN, name=codec_name)
    meta = parse_node_v3(_doc(data_type=data_type, fill_value=fill, codecs=[codec]), path="/s", store=STORE)
    assert meta.data_type == name and meta.fill_value == fill_out
    assert meta.codecs == (codec,)
    assert meta.chunk_key((1, 1)) == "c/1/1"


def test_zarr_python_3_0_spelling_and_short_forms():
    # zarr-python 3.0 wrote "bytes" for variable-length bytes; bare-string codecs, chunk key
    # encodings without configuration and absent attributes/dimension_names are all allowed.
    meta = parse_node_v3(_doc(data_type="bytes", fill_value="", codecs=["vlen-bytes"],
                              chunk_key_encoding={"name": "v2"}, attributes=None, dimension_names=None),
                         path="/b", store=STORE)
    assert meta.data_type == "bytes" and meta.codecs == ({"name": "vlen-bytes"},)
    assert meta.chunk_key_encoding == "v2" and meta.separator == "." and meta.chunk_key((1, 0)) == "1.0"
    assert meta.attrs == {} and meta.dimension_names is None
    doc = _doc()
    del doc["attributes"], doc["dimension_names"]
    assert parse_node_v3(doc, path="/x").attrs == {}
    assert normalize_data_type("variable_length_bytes") == ("bytes", {})


@pytest.mark.parametrize("data_type, fill, expected", [
    ("float32", "0x7fc00000", "nan"),
    ("float32", "0x3f800000", 1.0),
    ("float64", "0x3ff0000000000000", 1.0),
    ("float16", "0x3c00", 1.0),
    ("float64", "0x3f800000", 1.0),  # zarr-python decodes by digit count, then casts
    ("float32", "2.5", 2.5),  # zarr-python accepts float-ish strings
    ("float32", "inf", "inf"),
    ("float64", 3, 3.0),
    ("int16", 7.0, 7),  # and integer-valued floats for integers
    ("int16", "-12", -12),
    ("bool", False, False),
    ("bool", 1, True),
])
def test_fill_value_json_forms(data_type, fill, expected):
    meta = parse_node_v3(_doc(data_type=data_type, fill_value=fill), path="/f", store=STORE)
    ours = meta.fill_value
    assert ours.dtype == meta.dtype
    if expected == "nan":
        assert np.isnan(ours)
    elif expected == "inf":
        assert np.isposinf(ours)
    else:
        assert ours == expected
    # zarr-python reads the same document to the same value
    from zarr.core.metadata.v3 import ArrayV3Metadata

    theirs = ArrayV3Metadata.from_dict(_doc(data_type=data_type, fill_value=fill)).fill_value
    assert _same_fill(ours, theirs)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=4, max_size=4))
def test_hex_float32_fill_keeps_the_exact_bits(bits):
    meta = parse_node_v3(_doc(data_type="float32", fill_value="0x" + bits.hex()), path="/f")
    assert meta.fill_value.tobytes() == np.frombuffer(bits, ">f4").astype("<f4").tobytes()
    if not math.isnan(meta.fill_value):
        assert float(meta.fill_value) == struct.unpack(">f", bits)[0]


@settings(max_examples=150, deadline=None)
@given(
    shape=st.lists(st.integers(0, 9), min_size=0, max_size=4),
    data=st.data(),
    encoding=st.sampled_from([("default", "/"), ("default", "."), ("v2", "."), ("v2", "/")]),
)
def test_chunk_keys_match_zarr_python_encoders(shape, data, encoding):
    from zarr.core.chunk_key_encodings import parse_chunk_key_encoding

    chunks = [data.draw(st.integers(1, 4)) for _ in shape]
    doc = _doc(shape=shape, chunk_grid={"name": "regular", "configuration": {"chunk_shape": chunks}},
               chunk_key_encoding={"name": encoding[0], "configuration": {"separator": encoding[1]}},
               dimension_names=None)
    meta = parse_node_v3(doc, path="/a")
    enc = parse_chunk_key_encoding({"name": encoding[0], "configuration": {"separator": encoding[1]}})
    for idx in np.ndindex(*meta.chunk_grid_shape):
        assert meta.chunk_key(idx) == enc.encode_chunk_key(idx)


# ---------------------------------------------------------------------------------------
# Malformed documents: the error class, and a message naming the store path and the key
# ---------------------------------------------------------------------------------------

def _without(key):
    def f(d):
        del d[key]
    return f


def _set(key, value):
    def f(d):
        d[key] = value
    return f


MALFORMED = [
    # (id, mutation of _doc(), error class, text that must appear in the message)
    ("no-zarr-format", _without("zarr_format"), MetadataError, "zarr_format"),
    ("zarr-format-2", _set("zarr_format", 2), UnsupportedError, "zarr_format"),
    ("zarr-format-str", _set("zarr_format", "3"), MetadataError, "zarr_format"),
    ("node-type", _set("node_type", "dataset"), MetadataError, "node_type"),
    ("no-shape", _without("shape"), MetadataError, "shape"),
    ("no-fill", _without("fill_value"), MetadataError, "fill_value"),
    ("no-codecs", _without("codecs"), MetadataError, "codecs"),
    ("shape-neg", _set("shape", [4, -1]), MetadataError, "shape"),
    ("shape-float", _set("shape", [4, 3.0]), MetadataError, "shape"),
    ("shape-bool", _set("shape", [True, 3]), MetadataError, "shape"),
    ("shape-not-list", _set("shape", 4), MetadataError, "shape"),
    ("grid-name", _set("chunk_grid", {"name": "rectilinear", "configuration": {}}), UnsupportedError,
     "chunk_grid"),
    ("grid-no-shape", _set("chunk_grid", {"name": "regular", "configuration": {}}), MetadataError,
     "chunk_shape"),
    ("grid-zero", _set("chunk_grid", {"name": "regular", "configuration": {"chunk_shape": [0, 2]}}),
     MetadataError, "chunk_shape"),
    ("grid-rank", _set("chunk_grid", {"name": "regular", "configuration": {"chunk_shape": [2]}}),
     MetadataError, "chunk_shape"),
    ("grid-not-named", _set("chunk_grid", [2, 2]), MetadataError, "chunk_grid"),
    ("dimnames-rank", _set("dimension_names", ["y"]), DimensionError, "dimension_names"),
    ("dimnames-type", _set("dimension_names", ["y", 3]), DimensionError, "dimension_names"),
    ("dimnames-str", _set("dimension_names", "yx"), DimensionError, "dimension_names"),
    ("dtype-unknown", _set("data_type", "quaternion"), UnsupportedError, "quaternion"),
    ("dtype-complex", _set("data_type", "complex64"), UnsupportedError, "complex64"),
    ("dtype-datetime", _set("data_type", {"name": "numpy.datetime64",
                                          "configuration": {"unit": "s", "scale_factor": 1}}),
     UnsupportedError, "numpy.datetime64"),
    ("dtype-raw", _set("data_type", "r16"), UnsupportedError, "r16"),
    ("dtype-not-named", _set("data_type", 5), MetadataError, "data_type"),
    ("utf32-length", _set("data_type", {"name": "fixed_length_utf32", "configuration": {"length_bytes": 6}}),
     MetadataError, "length_bytes"),
    ("S-length", _set("data_type", {"name": "null_terminated_bytes", "configuration": {}}),
     MetadataError, "length_bytes"),
    ("fill-int-range", _set("fill_value", 2**31), MetadataError, "fill_value"),
    ("fill-int-frac", _set("fill_value", 1.5), MetadataError, "fill_value"),
    ("fill-int-null", _set("fill_value", None), MetadataError, "fill_value"),
    ("fill-float-word", lambda d: d.update(data_type="float32", fill_value="abc"), MetadataError,
     "fill_value"),
    ("fill-float-overflow", lambda d: d.update(data_type="float16", fill_value=1e10), MetadataError,
     "fill_value"),
    ("fill-float-hex-len", lambda d: d.update(data_type="float32", fill_value="0x7fc"), MetadataError,
     "fill_value"),
    ("fill-float-huge-int", lambda d: d.update(data_type="float64", fill_value=10**400), MetadataError,
     "fill_value"),
    ("fill-bool", lambda d: d.update(data_type="bool", fill_value="true"), MetadataError, "fill_value"),
    ("fill-string", lambda d: d.update(data_type="string", fill_value=["a"]), MetadataError, "fill_value"),
    ("fill-string-surrogate", lambda d: d.update(data_type="string", fill_value="\ud800"), MetadataError,
     "fill_value"),
    ("fill-bytes-b64", lambda d: d.update(data_type="variable_length_bytes", fill_value="@@@"),
     MetadataError, "fill_value"),
    ("fill-bytes-list", lambda d: d.update(data_type="bytes", fill_value=[256]), MetadataError, "fill_value"),
    ("fill-utf32-long", lambda d: d.update(
        data_type={"name": "fixed_length_utf32", "configuration": {"length_bytes": 8}}, fill_value="abc"),
     MetadataError, "fill_value"),
    ("fill-S-long", lambda d: d.update(
        data_type={"name": "null_terminated_bytes", "configuration": {"length_bytes": 2}}, fill_value="YWJj"),
     MetadataError, "fill_value"),
    ("fill-S-not-b64", lambda d: d.update(
        data_type={"name": "null_terminated_bytes", "configuration": {"length_bytes": 2}}, fill_value="a!"),
     MetadataError, "fill_value"),
    ("cke-name", _set("chunk_key_encoding", {"name": "v9"}), UnsupportedError, "chunk_key_encoding"),
    ("cke-sep", _set("chunk_key_encoding", {"name": "default", "configuration": {"separator": "-"}}),
     MetadataError, "separator"),
    ("codecs-empty", _set("codecs", []), MetadataError, "codecs"),
    ("codecs-not-list", _set("codecs", {"name": "bytes"}), MetadataError, "codecs"),
    ("codec-no-name", _set("codecs", [{"configuration": {}}]), MetadataError, "codec"),
    ("codec-config", _set("codecs", [{"name": "bytes", "configuration": [1]}]), MetadataError, "codec"),
    ("shard-rank", _set("codecs", [{"name": "sharding_indexed", "configuration": {"chunk_shape": [1]}}]),
     MetadataError, "sharding_indexed"),
    ("shard-divides", _set("codecs", [{"name": "sharding_indexed", "configuration": {"chunk_shape": [2, 3]}}]),
     MetadataError, "sharding_indexed"),
    ("shard-no-shape", _set("codecs", [{"name": "sharding_indexed", "configuration": {}}]),
     MetadataError, "sharding_indexed"),
    ("attrs", _set("attributes", [1]), MetadataError, "attributes"),
    ("extra-key", _set("zstrings_layout", "arrow"), UnsupportedError, "zstrings_layout"),
    ("extra-must", _set("ext", {"must_understand": True}), UnsupportedError, "ext"),
    ("extra-absent", _set("ext", {"name": "x"}), UnsupportedError, "ext"),
    ("transformer", _set("storage_transformers", [{"name": "chunk-manifest"}]), UnsupportedError,
     "chunk-manifest"),
    ("transformers-type", _set("storage_transformers", {"name": "x"}), MetadataError, "storage_transformers"),
]


@pytest.mark.parametrize("mutate, error, text", [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_array_documents(mutate, error, text):
    doc = _doc()
    mutate(doc)
    with pytest.raises(error) as info:
        parse_node_v3(doc, path="/grp/arr", store=STORE)
    msg = str(info.value)
    assert f"{STORE}/grp/arr/zarr.json" in msg, msg
    assert text in msg, msg
    assert "expected" in msg.lower(), msg


BAD_GROUPS = [
    ("group-attrs", {"attributes": "x"}, MetadataError, "attributes"),
    ("cm-type", {"consolidated_metadata": [1]}, MetadataError, "consolidated_metadata"),
    ("cm-kind", {"consolidated_metadata": {"kind": "remote", "metadata": {}}}, UnsupportedError, "remote"),
    ("cm-meta", {"consolidated_metadata": {"kind": "inline", "metadata": [1]}}, MetadataError, "metadata"),
    ("cm-dotdot", {"consolidated_metadata": {"kind": "inline", "metadata": {"../x": {}}}}, MetadataError,
     "'../x'"),
    ("cm-slash", {"consolidated_metadata": {"kind": "inline", "metadata": {"/abs": {}}}}, MetadataError,
     "'/abs'"),
    ("cm-nul", {"consolidated_metadata": {"kind": "inline", "metadata": {"a\x00b": {}}}}, MetadataError,
     "a\\x00b"),
    ("cm-dot", {"consolidated_metadata": {"kind": "inline", "metadata": {"a/./b": {}}}}, MetadataError,
     "a/./b"),
    ("cm-backslash", {"consolidated_metadata": {"kind": "inline", "metadata": {"a\\b": {}}}}, MetadataError,
     "a\\\\b"),
    ("cm-empty", {"consolidated_metadata": {"kind": "inline", "metadata": {"": {}}}}, MetadataError, "''"),
    ("cm-value", {"consolidated_metadata": {"kind": "inline", "metadata": {"a": 3}}}, MetadataError, "'a'"),
    ("group-extra", {"dims": {"x": 3}}, UnsupportedError, "dims"),
]


@pytest.mark.parametrize("extra, error, text", [b[1:] for b in BAD_GROUPS], ids=[b[0] for b in BAD_GROUPS])
def test_malformed_group_documents(extra, error, text):
    doc = {"zarr_format": 3, "node_type": "group", "attributes": {}}
    doc.update(extra)
    with pytest.raises(error) as info:
        parse_node_v3(doc, path="/grp", store=STORE)
    msg = str(info.value)
    assert f"{STORE}/grp/zarr.json" in msg, msg
    assert text in msg, msg


def test_non_object_documents_and_root_location():
    with pytest.raises(MetadataError, match=r"/data/v3\.zarr/zarr\.json.*got \[1, 2\]"):
        parse_node_v3([1, 2], path="/", store=STORE)
    with pytest.raises(MetadataError, match=r"^Invalid zarr.json at /zarr.json"):
        parse_node_v3(None, path="")


def test_must_understand_false_extensions_are_ignored():
    doc = _doc(my_extension={"must_understand": False, "anything": [1]},
               storage_transformers=[{"name": "hint", "must_understand": False}])
    meta = parse_node_v3(doc, path="/a", store=STORE)
    assert meta.extra_fields == {"my_extension": {"must_understand": False, "anything": [1]}}
    assert meta.storage_transformers == ({"name": "hint", "must_understand": False},)
    g = parse_node_v3({"zarr_format": 3, "node_type": "group", "x": {"must_understand": False}}, path="/")
    assert g.extra_fields == {"x": {"must_understand": False}} and g.attrs == {}


def test_parsing_does_not_mutate_or_alias_the_input():
    doc = _doc(attributes={"a": 1})
    before = copy.deepcopy(doc)
    meta = parse_node_v3(doc, path="/a")
    assert doc == before
    meta.attrs["b"] = 2  # a copy: the caller's JSON is untouched
    assert doc["attributes"] == {"a": 1}
    assert json.loads(json.dumps(doc)) == before
