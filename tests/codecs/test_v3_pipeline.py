"""Zarr v3 chunk codec pipeline (xr_zstrings.codecs.v3) against the real peer and golden chunks.

* zarr-python 3 -> zstrings: arrays written by zarr-python (vlen-utf8 with/without compressors,
  sharded, variable_length_bytes, fixed_length_utf32, null_terminated_bytes, numeric with
  transpose/big endian/crc32c); every stored chunk's raw bytes decode to what zarr-python reads.
* zstrings -> zarr-python: our encoding of each chunk, written in place of zarr-python's, reads
  back identically through zarr-python.
* zarrs.vlen and the Arrow layout have no Python peer: golden chunks built from pyarrow's buffers
  (tests/golden_chunks/, tests/golden_chunks/v3/, see their READMEs) plus hypothesis round trips.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from zarr.codecs import (
    BloscCodec,
    BytesCodec,
    Crc32cCodec,
    GzipCodec,
    ShardingCodec,
    TransposeCodec,
    VLenUTF8Codec,
    ZstdCodec,
)

from xr_zstrings.codecs.v3 import V3Pipeline, classify_data_type
from xr_zstrings.errors import (
    ChunkError,
    MetadataError,
    StringDecodeError,
    UnsupportedError,
    ZStringsError,
)

T = np.dtypes.StringDType()
GOLDEN = Path(__file__).parents[1] / "golden_chunks"
VALUES = json.loads((GOLDEN / "values.json").read_text(encoding="utf-8"))
STRS = VALUES["strs"]
BINS = [b.encode("latin-1") for b in VALUES["bins_latin1"]]
MULTI = ["a", "héllo", "中文字", "😀x", "", "zz", "x\0y", "tail\0", "€" * 30]
PLAIN_BYTES = {"name": "bytes", "configuration": {"endian": "little"}}

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


# --------------------------------------------------------------------------------------------
# helpers: read zarr-python's metadata and chunks straight from the LocalStore directory
# --------------------------------------------------------------------------------------------


def _dtype_of(data_type) -> np.dtype:
    """The numpy dtype a metadata layer would choose for a zarr.json data_type."""
    if isinstance(data_type, dict):
        name, cfg = data_type["name"], data_type.get("configuration", {})
        if name == "fixed_length_utf32":
            return np.dtype(f"<U{cfg['length_bytes'] // 4}")
        if name == "null_terminated_bytes":
            return np.dtype(f"S{cfg['length_bytes']}")
        data_type = name
    kind, _ = classify_data_type(data_type)
    if kind == "str":
        return T
    if kind == "bytes":
        return np.dtype(object)
    return np.dtype(data_type)


def _fill_of(meta, dtype):
    fv = meta["fill_value"]
    if dtype.kind in "OS":
        return b"" if meta["data_type"] != "string" else ""
    if dtype.kind in "TU":
        return fv
    return np.array(fv, dtype)[()]


def _pipeline(path: Path, **kw) -> tuple[V3Pipeline, dict]:
    meta = json.loads((path / "zarr.json").read_text())
    dtype = _dtype_of(meta["data_type"])
    pipe = V3Pipeline.from_metadata(
        meta["codecs"],
        data_type=meta["data_type"],
        dtype=dtype,
        chunk_shape=tuple(meta["chunk_grid"]["configuration"]["chunk_shape"]),
        where=str(path.name),
        fill_value=_fill_of(meta, dtype),
        **kw,
    )
    return pipe, meta


def _chunk_files(path: Path, meta: dict):
    """(chunk coords, file path, region slices) for every chunk zarr-python stored."""
    shape = meta["shape"]
    cs = meta["chunk_grid"]["configuration"]["chunk_shape"]
    grid = [math.ceil(s / c) for s, c in zip(shape, cs)]
    out = []
    for coords in np.ndindex(*grid):
        f = path.joinpath("c", *map(str, coords)) if coords else path / "c"
        if f.exists():
            region = tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(coords, cs, shape))
            out.append((coords, f, region))
    return out


def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape:
        return False
    if a.dtype.kind == "f":
        return np.array_equal(a, b, equal_nan=True)
    return a.tolist() == b.tolist()


def _create(tmp_path, name, data, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        arr = zarr.create_array(
            zarr.storage.LocalStore(tmp_path / name), shape=data.shape,
            dtype=kw.pop("dtype", data.dtype), zarr_format=3, **kw,
        )
        arr[...] = data
    return arr


def _strings(n, seed=0):
    rng = np.random.default_rng(seed)
    return np.array([MULTI[i % len(MULTI)] + str(int(x)) for i, x in enumerate(rng.integers(0, 10**6, n))], dtype=T)


# --------------------------------------------------------------------------------------------
# zarr-python -> zstrings -> zarr-python
# --------------------------------------------------------------------------------------------


def _vlen_bytes_dtype():
    from zarr.dtype import VariableLengthBytes

    return VariableLengthBytes()


CASES = {
    "str-raw": lambda: {"data": _strings(23).reshape(23), "chunks": (5,), "dtype": str, "compressors": None},
    "str-zstd": lambda: {"data": _strings(30).reshape(5, 6), "chunks": (2, 4), "dtype": str, "compressors": [ZstdCodec(level=3)]},
    "str-gzip": lambda: {"data": _strings(30).reshape(5, 6), "chunks": (2, 4), "dtype": str, "compressors": [GzipCodec(level=5)]},
    "str-blosc": lambda: {"data": _strings(30).reshape(5, 6), "chunks": (3, 3), "dtype": str,
                              "compressors": [BloscCodec(cname="lz4", clevel=5, shuffle="bitshuffle")]},
    "str-crc32c-transpose": lambda: {"data": _strings(24).reshape(2, 3, 4), "chunks": (2, 2, 3), "dtype": str,
                                         "filters": [TransposeCodec(order=(2, 0, 1))],
                                         "compressors": [ZstdCodec(), Crc32cCodec()]},
    "str-sharded": lambda: {"data": _strings(70).reshape(10, 7), "chunks": (2, 3), "shards": (4, 6), "dtype": str},
    "str-sharded-gzip": lambda: {"data": _strings(45).reshape(45), "chunks": (4,), "shards": (12,), "dtype": str,
                                     "compressors": [GzipCodec()]},
    "str-sharded-index-start": lambda: {
        "data": _strings(40).reshape(8, 5), "chunks": (4, 6), "dtype": str,
        "serializer": ShardingCodec(chunk_shape=(2, 3), codecs=[VLenUTF8Codec(), ZstdCodec()], index_location="start"),
        "compressors": None},
    "bytes": lambda: {"data": np.array(BINS * 3, dtype=object), "chunks": (4,), "dtype": _vlen_bytes_dtype()},
    "bytes-sharded": lambda: {"data": np.array(BINS * 5, dtype=object), "chunks": (3,), "shards": (9,),
                                  "dtype": _vlen_bytes_dtype()},
    "fixed-utf32": lambda: {"data": np.array(["a", "bb", "ccc", "é", "😀", "xyzzy", ""], dtype="<U5"), "chunks": (3,)},
    "fixed-utf32-big": lambda: {"data": np.array(["a", "bb", "ccc", "é", "😀", "xyzzy", ""], dtype="<U5"),
                                    "chunks": (3,), "serializer": BytesCodec(endian="big"), "compressors": None},
    "null-terminated": lambda: {"data": np.array([b"a", b"bb", b"", b"x\0y", b"12345"], dtype="S5"), "chunks": (2,)},
    "int32-transpose-big-crc32c": lambda: {
        "data": np.arange(30, dtype="int32").reshape(5, 6), "chunks": (2, 4), "filters": [TransposeCodec(order=(1, 0))],
        "serializer": BytesCodec(endian="big"), "compressors": [Crc32cCodec()]},
    "float64-gzip-fill-nan": lambda: {"data": np.where(np.arange(20) % 3, np.arange(20) / 7, np.nan), "chunks": (6,),
                                          "compressors": [GzipCodec()], "fill_value": np.nan},
    "uint16-sharded-blosc": lambda: {"data": np.arange(48, dtype="uint16").reshape(6, 8), "chunks": (3, 2),
                                         "shards": (6, 4), "compressors": [BloscCodec(cname="zstd", clevel=3)]},
}


@pytest.mark.parametrize("case", list(CASES), ids=lambda c: f"zarr-python->zstrings-{c}")
def test_zarr_python_chunks_decode_and_reencode(tmp_path, case):
    spec = CASES[case]()
    data = spec.pop("data")
    arr = _create(tmp_path, "a", data, **spec)
    expected_all = arr[...]
    pipe, meta = _pipeline(tmp_path / "a")
    files = _chunk_files(tmp_path / "a", meta)
    assert files, "zarr-python wrote no chunks"
    ours_encoded = {}
    for coords, f, region in files:
        raw = f.read_bytes()
        got = pipe.decode(raw, key="/".join(map(str, coords)))
        assert got.shape == pipe.chunk_shape and got.dtype == pipe.dtype
        inside = tuple(slice(0, r.stop - r.start) for r in region)
        assert _equal(got[inside], np.asarray(expected_all[region]).astype(got.dtype)), coords
        enc = pipe.encode(got)
        again = pipe.decode(enc)
        assert _equal(again, got)
        ours_encoded[f] = enc
    # zstrings -> zarr-python: our chunks in place of zarr-python's read back identically
    for f, enc in ours_encoded.items():
        f.write_bytes(enc)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reread = zarr.open_array(zarr.storage.LocalStore(tmp_path / "a"), mode="r")[...]
    assert _equal(np.asarray(reread), np.asarray(expected_all))


def test_zarr_python_layout_names(tmp_path):
    layouts = {}
    for case in ("str-zstd", "str-sharded", "bytes", "fixed-utf32", "null-terminated", "int32-transpose-big-crc32c"):
        spec = CASES[case]()
        _create(tmp_path, case, spec.pop("data"), **spec)
        pipe, _ = _pipeline(tmp_path / case)
        layouts[case] = (pipe.layout, pipe.sharded)
    assert layouts == {
        "str-zstd": ("vlen-utf8", False),
        "str-sharded": ("vlen-utf8", True),
        "bytes": ("vlen-bytes", False),
        "fixed-utf32": ("fixed", False),
        "null-terminated": ("fixed", False),
        "int32-transpose-big-crc32c": ("numeric", False),
    }


def test_zarr_python_vlen_object_output(tmp_path):
    spec = CASES["str-zstd"]()
    data = spec.pop("data")
    _create(tmp_path, "a", data, **spec)
    meta = json.loads((tmp_path / "a" / "zarr.json").read_text())
    pipe = V3Pipeline.from_metadata(meta["codecs"], data_type="string", dtype=object, chunk_shape=(2, 4))
    got = pipe.decode((tmp_path / "a" / "c" / "0" / "0").read_bytes())
    assert got.dtype == object and got.tolist() == data[:2, :4].tolist()


def test_sharded_empty_inner_chunks_are_filled(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        arr = zarr.create_array(zarr.storage.LocalStore(tmp_path / "a"), shape=(8,), chunks=(2,), shards=(8,),
                                dtype=str, fill_value="FILL", zarr_format=3)
        arr[2:4] = np.array(["x", "y"])
    pipe, _ = _pipeline(tmp_path / "a")
    raw = (tmp_path / "a" / "c" / "0").read_bytes()
    got = pipe.decode(raw)
    assert got.tolist() == ["FILL", "FILL", "x", "y", "FILL", "FILL", "FILL", "FILL"] == arr[...].tolist()
    # our encoding leaves the all-fill inner chunks out, as zarr-python does
    assert pipe.encode(got) == raw


# --------------------------------------------------------------------------------------------
# the layout rule
# --------------------------------------------------------------------------------------------

ZSTD = {"name": "zstd", "configuration": {"level": 0, "checksum": False}}


@pytest.mark.parametrize(
    "codecs,data_type,dtype,layout",
    [
        ([{"name": "vlen-utf8"}, ZSTD], "string", T, "vlen-utf8"),
        ([{"name": "vlen-utf8"}], {"name": "string"}, T, "vlen-utf8"),
        ([{"name": "vlen-bytes"}], "variable_length_bytes", object, "vlen-bytes"),
        ([], {"name": "string"}, T, "arrow"),
        ([{"name": "bytes"}], "string", T, "arrow"),
        ([ZSTD], {"name": "binary"}, object, "arrow"),
        ([], "large_string", T, "arrow-large"),
        ([{"name": "bytes"}, ZSTD], {"name": "large_binary"}, object, "arrow-large"),
        ([{"name": "zarrs.vlen", "configuration": {"index_codecs": [PLAIN_BYTES], "data_codecs": [{"name": "bytes"}],
                                                    "index_data_type": "uint32"}}], "string", T, "zarrs.vlen"),
        ([{"name": "https://codec.zarrs.dev/array_to_bytes/vlen",
           "configuration": {"index_codecs": [PLAIN_BYTES], "data_codecs": [{"name": "bytes"}],
                             "index_data_type": "uint64", "index_location": "end"}}], "bytes", object, "zarrs.vlen"),
        ([{"name": "bytes", "configuration": {"endian": "little"}}], {"name": "fixed_length_utf32",
                                                                       "configuration": {"length_bytes": 16}}, "<U4", "fixed"),
        ([{"name": "bytes"}], {"name": "null_terminated_bytes", "configuration": {"length_bytes": 8}}, "S8", "fixed"),
        ([PLAIN_BYTES, ZSTD], "int32", "int32", "numeric"),
    ],
)
def test_layout_rule(codecs, data_type, dtype, layout):
    pipe = V3Pipeline.from_metadata(codecs, data_type=data_type, dtype=dtype, chunk_shape=(3,))
    assert pipe.layout == layout


# --------------------------------------------------------------------------------------------
# golden chunks (no Python peer for zarrs.vlen / Arrow layout)
# --------------------------------------------------------------------------------------------


def _zarrs_cfg(idt, loc, index_codecs=None, data_codecs=None):
    cfg = {"index_codecs": index_codecs or [PLAIN_BYTES], "data_codecs": data_codecs or [{"name": "bytes"}],
           "index_data_type": idt}
    if loc is not None:
        cfg["index_location"] = loc
    return [{"name": "zarrs.vlen", "configuration": cfg}]


@pytest.mark.parametrize(
    "file,codecs,data_type,values",
    [
        ("arrow_string.bin", [], {"name": "string"}, STRS),
        ("arrow_string.bin", [{"name": "bytes"}], "string", STRS),
        ("arrow_large_string.bin", [], "large_string", STRS),
        ("arrow_binary.bin", [], {"name": "binary"}, BINS),
        ("arrow_large_binary.bin", [{"name": "bytes"}], "large_binary", BINS),
        ("arrow_string_empty.bin", [], "string", []),
        *[(f"zarrs_vlen_strs_{idt}_{loc}.bin", _zarrs_cfg(idt, loc), "string", STRS)
          for idt in ("uint32", "uint64") for loc in ("start", "end")],
        *[(f"zarrs_vlen_zarrs_doc_{idt}_{loc}.bin", _zarrs_cfg(idt, loc), "string", VALUES["zarrs_doc"])
          for idt in ("uint32", "uint64") for loc in ("start", "end")],
        ("zarrs_vlen_zarrs_doc_uint32_start.bin", _zarrs_cfg("uint32", None), "string", VALUES["zarrs_doc"]),
        ("numcodecs_vlen_utf8.bin", [{"name": "vlen-utf8"}], "string", STRS),
        ("numcodecs_vlen_utf8_empty.bin", [{"name": "vlen-utf8"}], "string", []),
        ("numcodecs_vlen_bytes.bin", [{"name": "vlen-bytes"}], "variable_length_bytes", BINS),
        ("v3/zarrs_vlen_crc32c_uint32_end.bin",
         _zarrs_cfg("uint32", "end", [PLAIN_BYTES, {"name": "crc32c"}], [{"name": "bytes"}, {"name": "crc32c"}]),
         "string", STRS),
        ("v3/arrow_string_crc32c.bin", [{"name": "crc32c"}], {"name": "string"}, STRS),
    ],
    ids=lambda v: v if isinstance(v, str) and v.endswith(".bin") else "",
)
def test_golden_chunks(file, codecs, data_type, values):
    raw = (GOLDEN / file).read_bytes()
    kind, _ = classify_data_type(data_type)
    dtype = T if kind == "str" else np.dtype(object)
    pipe = V3Pipeline.from_metadata(codecs, data_type=data_type, dtype=dtype, chunk_shape=(len(values),))
    got = pipe.decode(raw)
    assert got.dtype == dtype and got.tolist() == values
    assert pipe.encode(np.array(values, dtype=dtype)) == raw
    arrow = pipe.decode_arrow(raw)
    assert arrow.to_pylist() == values
    if pipe.layout.startswith("arrow") and not pipe.bb and values:  # zero copy: Arrow reads the chunk's memory
        buf = np.frombuffer(raw, np.uint8)
        arrow = pipe.decode_arrow(buf)
        isz = 8 if pipe.layout == "arrow-large" else 4
        assert arrow.buffers()[1].address == buf.ctypes.data
        assert arrow.buffers()[2].address == buf.ctypes.data + -(-(len(values) + 1) * isz // 64) * 64


def test_golden_sharded_arrow():
    raw = (GOLDEN / "v3" / "sharded_arrow_string_end.bin").read_bytes()
    codecs = [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [4], "codecs": [{"name": "bytes"}],
        "index_codecs": [PLAIN_BYTES, {"name": "crc32c"}], "index_location": "end"}}]
    pipe = V3Pipeline.from_metadata(codecs, data_type={"name": "string"}, dtype=T, chunk_shape=(16,), fill_value="-")
    assert pipe.layout == "arrow" and pipe.sharded
    expected = STRS[0:4] + STRS[4:8] + ["-"] * 4 + ["z"] * 4
    got = pipe.decode(raw)
    assert got.tolist() == expected
    assert pipe.encode(got) == raw


def test_golden_arrow_offsets_come_from_pyarrow():
    """The fixture's offsets are pyarrow's own: decode_arrow hands them back unchanged."""
    raw = (GOLDEN / "arrow_string.bin").read_bytes()
    pipe = V3Pipeline.from_metadata([], data_type="string", dtype=T, chunk_shape=(len(STRS),))
    arr = pipe.decode_arrow(raw)
    ref = pa.array(STRS, pa.string())
    assert arr.equals(ref)
    assert bytes(arr.buffers()[1])[: 4 * (len(STRS) + 1)] == bytes(ref.buffers()[1])[: 4 * (len(STRS) + 1)]


# --------------------------------------------------------------------------------------------
# hypothesis round trips per layout, with codec chains inside
# --------------------------------------------------------------------------------------------

BLOSC = {"name": "blosc", "configuration": {"cname": "zstd", "clevel": 5, "shuffle": "shuffle", "typesize": 4,
                                            "blocksize": 0}}
GZIP = {"name": "gzip", "configuration": {"level": 1}}
CRC = {"name": "crc32c"}

STRING_CHAINS = {
    "vlen-utf8": [{"name": "vlen-utf8"}],
    "vlen-utf8+zstd+crc32c": [{"name": "vlen-utf8"}, ZSTD, CRC],
    "transpose+vlen-utf8+gzip": "transpose",
    "zarrs-u32-start-blosc-gzip": _zarrs_cfg("uint32", "start", [PLAIN_BYTES, BLOSC], [{"name": "bytes"}, GZIP]),
    "zarrs-u64-end-crc-zstd": _zarrs_cfg("uint64", "end", [{"name": "bytes", "configuration": {"endian": "big"}}, CRC],
                                         [{"name": "bytes"}, ZSTD, CRC]),
    "zarrs-v0.0-no-location": _zarrs_cfg("uint64", None, [PLAIN_BYTES], [{"name": "bytes"}, GZIP]),
    "arrow": [],
    "arrow+zstd": [ZSTD],
    "arrow-bytes+gzip+crc": [{"name": "bytes"}, GZIP, CRC],
    "arrow-large": "large",
}

text = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=12)


@st.composite
def string_arrays(draw, min_dims=1):
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=min_dims, max_size=3)))
    n = math.prod(shape)
    vals = draw(st.lists(text, min_size=n, max_size=n))
    return np.array(vals, dtype=T).reshape(shape)


@pytest.mark.parametrize("chain", list(STRING_CHAINS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arr=string_arrays())
def test_roundtrip_strings(chain, arr):
    codecs, data_type = STRING_CHAINS[chain], "string"
    if codecs == "transpose":
        codecs = [{"name": "transpose", "configuration": {"order": list(range(arr.ndim))[::-1]}},
                  {"name": "vlen-utf8"}, GZIP]
    elif codecs == "large":
        codecs, data_type = [ZSTD], "large_string"
    pipe = V3Pipeline.from_metadata(codecs, data_type=data_type, dtype=T, chunk_shape=arr.shape)
    enc = pipe.encode(arr)
    got = pipe.decode(enc)
    assert got.dtype == T and got.shape == arr.shape
    assert got.tolist() == arr.tolist()
    obj = V3Pipeline.from_metadata(codecs, data_type=data_type, dtype=object, chunk_shape=arr.shape).decode(enc)
    assert obj.dtype == object and obj.tolist() == arr.tolist()
    if chain.startswith(("arrow", "zarrs", "vlen")) and "transpose" not in chain:
        assert pipe.decode_arrow(enc).to_pylist() == arr.reshape(-1).tolist()


@pytest.mark.parametrize("chain", ["vlen-bytes", "zarrs", "arrow", "arrow-large"])
@settings(max_examples=40, deadline=None)
@given(vals=st.lists(st.binary(max_size=10), max_size=20))
def test_roundtrip_bytes(chain, vals):
    codecs, data_type = {
        "vlen-bytes": ([{"name": "vlen-bytes"}, GZIP], "variable_length_bytes"),
        "zarrs": (_zarrs_cfg("uint32", "end", [PLAIN_BYTES, CRC], [{"name": "bytes"}, ZSTD]), "bytes"),
        "arrow": ([ZSTD], {"name": "binary"}),
        "arrow-large": ([], "large_binary"),
    }[chain]
    arr = np.empty(len(vals), object)
    arr[:] = vals
    pipe = V3Pipeline.from_metadata(codecs, data_type=data_type, dtype=object, chunk_shape=arr.shape)
    got = pipe.decode(pipe.encode(arr))
    assert got.dtype == object and got.tolist() == vals


@st.composite
def sharded_arrays(draw):
    ndim = draw(st.integers(1, 2))
    inner = tuple(draw(st.lists(st.integers(1, 3), min_size=ndim, max_size=ndim)))
    cps = tuple(draw(st.lists(st.integers(1, 3), min_size=ndim, max_size=ndim)))
    shape = tuple(i * c for i, c in zip(inner, cps))
    vals = draw(st.lists(st.one_of(st.just(""), text), min_size=math.prod(shape), max_size=math.prod(shape)))
    return inner, np.array(vals, dtype=T).reshape(shape)


@pytest.mark.parametrize("inner_chain", ["vlen-utf8+zstd", "arrow", "zarrs", "nested-shard"])
@pytest.mark.parametrize("location", ["start", "end"])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=sharded_arrays())
def test_roundtrip_sharded(inner_chain, location, case):
    inner, arr = case
    inner_codecs = {
        "vlen-utf8+zstd": [{"name": "vlen-utf8"}, ZSTD],
        "arrow": [{"name": "bytes"}],
        "zarrs": _zarrs_cfg("uint64", "end", [PLAIN_BYTES], [{"name": "bytes"}, GZIP]),
        "nested-shard": [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [1] * len(inner), "codecs": [{"name": "vlen-utf8"}], "index_location": "start"}}],
    }[inner_chain]
    codecs = [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": list(inner), "codecs": inner_codecs,
        "index_codecs": [PLAIN_BYTES, CRC], "index_location": location}}, GZIP]
    pipe = V3Pipeline.from_metadata(codecs, data_type="string", dtype=T, chunk_shape=arr.shape, fill_value="")
    for empty in (False, True):
        got = pipe.decode(pipe.encode(arr, write_empty_chunks=empty))
        assert got.dtype == T and got.tolist() == arr.tolist()


@settings(max_examples=40, deadline=None)
@given(arr=st.lists(st.integers(-(2**31), 2**31 - 1), min_size=12, max_size=12))
def test_roundtrip_numeric_transpose_big_endian(arr):
    a = np.array(arr, dtype="int32").reshape(2, 3, 2)
    codecs = [{"name": "transpose", "configuration": {"order": [2, 0, 1]}},
              {"name": "bytes", "configuration": {"endian": "big"}}, BLOSC, CRC]
    pipe = V3Pipeline.from_metadata(codecs, data_type="int32", dtype="int32", chunk_shape=(2, 3, 2))
    enc = pipe.encode(a)
    # the stored bytes are the transposed array, big-endian (after blosc + crc32c are undone)
    assert _raw_after(pipe, enc) == np.ascontiguousarray(a.transpose(2, 0, 1)).astype(">i4").tobytes()
    got = pipe.decode(enc)
    assert got.dtype == np.dtype("int32") and got.tolist() == a.tolist() and got.flags.c_contiguous


def _raw_after(pipe, enc):
    return pipe.bytes_decode(enc, "t").tobytes()


def test_long_strings_embedded_nul_and_empty():
    vals = ["x" * 70000, "", "a\0b", "\0", "é" * 40000, "end"]
    arr = np.array(vals, dtype=T)
    for codecs in ([{"name": "vlen-utf8"}, ZSTD], [ZSTD], _zarrs_cfg("uint32", "end", [PLAIN_BYTES], [{"name": "bytes"}, GZIP])):
        pipe = V3Pipeline.from_metadata(codecs, data_type="string", dtype=T, chunk_shape=(6,))
        assert pipe.decode(pipe.encode(arr)).tolist() == vals


def test_lone_surrogate_is_a_clear_error():
    pipe = V3Pipeline.from_metadata([{"name": "vlen-utf8"}], data_type="string", dtype=object, chunk_shape=(2,))
    with pytest.raises(ZStringsError, match="surrogate"):
        pipe.encode(np.array(["ok", "bad\udcff"], dtype=object))


def test_zero_dim_chunk():
    pipe = V3Pipeline.from_metadata([{"name": "vlen-utf8"}], data_type="string", dtype=T, chunk_shape=())
    got = pipe.decode(pipe.encode(np.array("héllo", dtype=T)))
    assert got.shape == () and got[()] == "héllo"


def test_fixed_output_dtype_U():
    pipe = V3Pipeline.from_metadata([], data_type="string", dtype="<U", chunk_shape=(3,))
    got = pipe.decode(pipe.encode(np.array(["a", "bé", "xyz"], dtype=T)))
    assert got.dtype.kind == "U" and got.tolist() == ["a", "bé", "xyz"]


def test_generic_zarr_array_array_codec():
    codecs = [{"name": "numcodecs.delta", "configuration": {"dtype": "<i8"}}, PLAIN_BYTES, ZSTD]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe = V3Pipeline.from_metadata(codecs, data_type="int64", dtype="int64", chunk_shape=(10,))
    a = np.arange(10, dtype="int64") ** 2
    assert pipe.decode(pipe.encode(a)).tolist() == a.tolist()


# --------------------------------------------------------------------------------------------
# malformed input -> ZStringsError subclasses
# --------------------------------------------------------------------------------------------


def _sharded_pipe(location="end"):
    codecs = [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [2], "codecs": [{"name": "vlen-utf8"}],
        "index_codecs": [PLAIN_BYTES, CRC], "index_location": location}}]
    return V3Pipeline.from_metadata(codecs, data_type="string", dtype=T, chunk_shape=(6,), where="grp/var")


def test_truncated_shard_index():
    pipe = _sharded_pipe()
    raw = pipe.encode(np.array(list("abcdef"), dtype=T))
    with pytest.raises(ChunkError, match="grp/var.*(index|crc|checksum)"):
        pipe.decode(raw[:-5])
    with pytest.raises(ChunkError, match="shorter than its 52-byte index"):
        pipe.decode(raw[:20])


def test_shard_index_pointing_beyond_the_shard():
    pipe = _sharded_pipe("start")
    raw = bytearray(pipe.encode(np.array(list("abcdef"), dtype=T)))
    import google_crc32c
    idx = np.frombuffer(bytes(raw[:48]), "<u8").copy()
    idx[1] = 10**6  # nbytes of inner chunk 0
    body = idx.tobytes()
    raw[:52] = body + np.uint32(google_crc32c.value(body)).tobytes()
    with pytest.raises(ChunkError, match="beyond the"):
        pipe.decode(bytes(raw))


def test_crc32c_mismatch():
    pipe = V3Pipeline.from_metadata([{"name": "vlen-utf8"}, CRC], data_type="string", dtype=T, chunk_shape=(3,),
                                    where="g/v")
    raw = bytearray(pipe.encode(np.array(["a", "b", "c"], dtype=T)))
    raw[5] ^= 0xFF
    with pytest.raises(ChunkError, match=r"g/v chunk c/1.*crc32c.*checksum"):
        pipe.decode(bytes(raw), key="c/1")


def test_compressed_garbage():
    pipe = V3Pipeline.from_metadata([{"name": "vlen-utf8"}, GZIP], data_type="string", dtype=T, chunk_shape=(3,))
    with pytest.raises(ChunkError, match="gzip"):
        pipe.decode(b"not gzip at all")


def test_zarrs_offsets_beyond_data():
    pipe = V3Pipeline.from_metadata(_zarrs_cfg("uint32", "start"), data_type="string", dtype=T, chunk_shape=(2,))
    index = np.array([0, 1, 50], "<u4").tobytes()
    raw = np.uint64(len(index)).tobytes() + index + b"abc"
    with pytest.raises(ChunkError, match="last offset is 50"):
        pipe.decode(raw)
    with pytest.raises(ChunkError):
        pipe.decode(raw[:6])


def test_arrow_offsets_beyond_data():
    pipe = V3Pipeline.from_metadata([], data_type="string", dtype=T, chunk_shape=(2,))
    raw = np.array([0, 1, 99], "<i4").tobytes().ljust(64, b"\0") + b"ab"
    with pytest.raises(ChunkError, match="last offset is 99"):
        pipe.decode(raw)


def test_vlen_truncated_and_wrong_count():
    pipe = V3Pipeline.from_metadata([{"name": "vlen-utf8"}], data_type="string", dtype=T, chunk_shape=(3,))
    raw = pipe.encode(np.array(["abc", "d", "e"], dtype=T))
    with pytest.raises(ChunkError):
        pipe.decode(raw[:-2])
    with pytest.raises(ChunkError, match="expected 4"):
        pipe.decode(raw, chunk_shape=(4,))


def test_invalid_utf8():
    pipe = V3Pipeline.from_metadata([], data_type="string", dtype=T, chunk_shape=(1,))
    raw = np.array([0, 2], "<i4").tobytes().ljust(64, b"\0") + b"\xff\xfe"
    with pytest.raises(StringDecodeError):
        pipe.decode(raw)
    lenient = V3Pipeline.from_metadata([], data_type="string", dtype=T, chunk_shape=(1,), utf8_errors="replace")
    assert lenient.decode(raw).tolist() == ["\ufffd\ufffd"]


def test_numeric_wrong_size():
    pipe = V3Pipeline.from_metadata([PLAIN_BYTES], data_type="int32", dtype="int32", chunk_shape=(4,), where="x")
    with pytest.raises(ChunkError, match="expected 16"):
        pipe.decode(b"\0" * 12)
    with pytest.raises(ChunkError):
        pipe.decode(12345)


def test_unknown_codec_fails_at_build_time():
    with pytest.raises(UnsupportedError, match=r"grp/var.*'no\.such\.codec'.*Fix"):
        V3Pipeline.from_metadata([{"name": "vlen-utf8"}, {"name": "no.such.codec"}], data_type="string",
                                 dtype=T, chunk_shape=(3,), where="grp/var")
    with pytest.raises(UnsupportedError, match="no.such"):  # inside a zarrs.vlen data chain too
        V3Pipeline.from_metadata(_zarrs_cfg("uint32", "end", None, [{"name": "bytes"}, {"name": "no.such"}]),
                                 data_type="string", dtype=T, chunk_shape=(3,))


def test_bad_chains_fail_at_build_time():
    with pytest.raises(MetadataError, match="more than one array->bytes"):
        V3Pipeline.from_metadata([{"name": "vlen-utf8"}, PLAIN_BYTES], data_type="string", dtype=T, chunk_shape=(3,))
    with pytest.raises(MetadataError, match="no array->bytes"):
        V3Pipeline.from_metadata([ZSTD], data_type="int32", dtype="int32", chunk_shape=(3,))
    with pytest.raises(MetadataError, match="not a multiple"):
        V3Pipeline.from_metadata([{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [4], "codecs": [{"name": "vlen-utf8"}]}}], data_type="string", dtype=T, chunk_shape=(6,))
    with pytest.raises(UnsupportedError, match="fixed encoded size"):
        V3Pipeline.from_metadata([{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [2], "codecs": [{"name": "vlen-utf8"}], "index_codecs": [PLAIN_BYTES, GZIP]}}],
            data_type="string", dtype=T, chunk_shape=(6,))
    with pytest.raises(UnsupportedError, match="index_data_type"):
        V3Pipeline.from_metadata(_zarrs_cfg("int16", "end"), data_type="string", dtype=T, chunk_shape=(3,))
    with pytest.raises(MetadataError, match="transpose order"):
        V3Pipeline.from_metadata([{"name": "transpose", "configuration": {"order": [0, 0]}}, {"name": "vlen-utf8"}],
                                 data_type="string", dtype=T, chunk_shape=(3, 3))


def test_encode_wrong_shape_is_a_clear_error():
    pipe = V3Pipeline.from_metadata([{"name": "vlen-utf8"}], data_type="string", dtype=T, chunk_shape=(2, 2))
    with pytest.raises(ZStringsError, match="pad with the fill value"):
        pipe.encode(np.array(["a", "b", "c"], dtype=T))


# --------------------------------------------------------------------------------------------
# layering
# --------------------------------------------------------------------------------------------


def test_import_does_not_pull_xarray():
    code = ("import sys, xr_zstrings.codecs.v3 as c; import numpy as np; "
            "p = c.V3Pipeline.from_metadata([{'name': 'vlen-utf8'}, {'name': 'zstd'}], data_type='string', "
            "dtype=np.dtypes.StringDType(), chunk_shape=(1,)); p.decode(p.encode(np.array(['a'], "
            "dtype=np.dtypes.StringDType()))); assert 'xarray' not in sys.modules, 'xarray imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_decoded_chunks_are_writeable_and_c_contiguous():
    for codecs, data_type, dtype, arr in (
        ([PLAIN_BYTES], "int32", "int32", np.arange(6, dtype="int32").reshape(2, 3)),
        ([{"name": "transpose", "configuration": {"order": [1, 0]}}, PLAIN_BYTES], "int32", "int32",
         np.arange(6, dtype="int32").reshape(2, 3)),
        ([], "string", T, np.array([["a", "b", "c"], ["d", "é", ""]], dtype=T)),
    ):
        pipe = V3Pipeline.from_metadata(codecs, data_type=data_type, dtype=dtype, chunk_shape=arr.shape)
        got = pipe.decode(pipe.encode(arr))
        assert got.flags.writeable and got.flags.c_contiguous and got.tolist() == arr.tolist()
