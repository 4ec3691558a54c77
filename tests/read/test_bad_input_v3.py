"""Damaged Zarr v3 stores (issue 7): every field of zarr.json, every string layout's chunks, shards.

Each row copies a pristine store (``fuzz_stores``: vlen-utf8, zarrs.vlen, Arrow layout, sharded),
damages one thing and expects a ``ZStringsError`` subclass naming the store, the key and the text
given. See ``test_fuzz.py`` for NCZarr/Zarr v2, hypothesis fuzzing, bombs and huge shapes.
"""

from __future__ import annotations

import json
import shutil
import struct

import numpy as np
import pytest
from fuzz_stores import V3_KINDS, assert_array_left_out_or_read_by_zarr_python, build_all, edit_json, open_all

from xr_zstrings import (
    ChunkError,
    DimensionError,
    MetadataError,
    StringDecodeError,
    UnsupportedError,
    ZStringsError,
)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    return build_all(tmp_path_factory.mktemp("pristine_v3"))


def _drop(d, key):
    del d[key]


def _grid(o, shape):
    o["chunk_grid"]["configuration"]["chunk_shape"] = shape


# (what, mutation of names/zarr.json, error class, texts); applied to every v3 store
FIELDS = [
    ("zarr_format 2", lambda o: o.update(zarr_format=2), UnsupportedError, ["zarr_format", "2"]),
    ("zarr_format text", lambda o: o.update(zarr_format="3"), MetadataError, ["zarr_format", "'3'"]),
    ("zarr_format missing", lambda o: _drop(o, "zarr_format"), MetadataError, ["zarr_format"]),
    ("node_type unknown", lambda o: o.update(node_type="table"), MetadataError, ["node_type", "'table'"]),
    ("shape as string", lambda o: o.update(shape="8"), MetadataError, ["shape", "'8'"]),
    ("shape negative", lambda o: o.update(shape=[-8]), MetadataError, ["shape", "-8"]),
    ("shape float", lambda o: o.update(shape=[8.0]), MetadataError, ["shape", "8.0"]),
    ("shape beyond any array", lambda o: o.update(shape=[2**62, 2**62]), MetadataError, ["shape"]),
    ("shape missing", lambda o: _drop(o, "shape"), MetadataError, ["'shape'"]),
    ("chunks zero", lambda o: _grid(o, [0]), MetadataError, ["chunk_shape", "[0]"]),
    ("chunks negative", lambda o: _grid(o, [-1]), MetadataError, ["chunk_shape", "-1"]),
    ("chunks float", lambda o: _grid(o, [2.5]), MetadataError, ["chunk_shape", "2.5"]),
    ("chunks huge", lambda o: _grid(o, [10**30]), MetadataError, ["chunk"]),
    ("chunks wrong length", lambda o: _grid(o, [2, 2]), MetadataError, ["chunk_shape"]),
    ("chunks not a list", lambda o: _grid(o, 4), MetadataError, ["chunk_shape"]),
    ("chunk_grid unknown", lambda o: o.update(chunk_grid={"name": "rectilinear", "configuration": {}}),
     UnsupportedError, ["'rectilinear'"]),
    ("chunk_grid a number", lambda o: o.update(chunk_grid=5), MetadataError, ["chunk_grid", "5"]),
    ("chunk_grid configuration a list", lambda o: o.update(chunk_grid={"name": "regular", "configuration": []}),
     MetadataError, ["chunk_grid"]),
    ("data_type a number", lambda o: o.update(data_type=5), MetadataError, ["data_type", "5"]),
    ("data_type unknown", lambda o: o.update(data_type="utf9"), UnsupportedError, ["'utf9'"]),
    ("data_type object without name", lambda o: o.update(data_type={"configuration": {}}), MetadataError,
     ["data_type"]),
    ("data_type complex", lambda o: o.update(data_type="complex64"), UnsupportedError, ["complex"]),
    ("fixed_length_utf32 without length", lambda o: o.update(data_type="fixed_length_utf32"), MetadataError,
     ["length_bytes"]),
    ("fill_value an object", lambda o: o.update(fill_value={"a": 1}), MetadataError, ["fill_value"]),
    ("fill_value a list", lambda o: o.update(fill_value=[1, 2]), MetadataError, ["fill_value"]),
    ("fill_value missing", lambda o: _drop(o, "fill_value"), MetadataError, ["'fill_value'"]),
    ("codecs not a list", lambda o: o.update(codecs={"name": "bytes"}), MetadataError, ["codecs"]),
    ("codecs empty", lambda o: o.update(codecs=[]), MetadataError, ["codecs"]),
    ("codec a number", lambda o: o.update(codecs=[5]), MetadataError, ["codec", "5"]),
    ("codec unknown", lambda o: o.update(codecs=[{"name": "nosuchcodec"}]), UnsupportedError, ["'nosuchcodec'"]),
    ("two array->bytes codecs", lambda o: o.update(codecs=[{"name": "vlen-utf8"}, {"name": "vlen-utf8"}]),
     MetadataError, ["array->bytes"]),
    ("codec configuration a list", lambda o: o.update(codecs=[{"name": "vlen-utf8", "configuration": [1]}]),
     MetadataError, ["configuration"]),
    ("transpose not a permutation", lambda o: o.update(codecs=[{"name": "transpose", "configuration": {"order": [3]}},
                                                               *o["codecs"]]), MetadataError, ["transpose"]),
    ("zstd level text", lambda o: o["codecs"].append({"name": "zstd", "configuration": {"level": "max"}}),
     MetadataError, ["zstd"]),
    ("dimension_names too many", lambda o: o.update(dimension_names=["x", "y"]), DimensionError,
     ["dimension_names", "['x', 'y']"]),
    ("dimension_names a string", lambda o: o.update(dimension_names="x"), DimensionError, ["dimension_names"]),
    ("dimension_names numbers", lambda o: o.update(dimension_names=[5]), DimensionError, ["dimension_names"]),
    ("dimension_names disagree with sizes", lambda o: o.update(shape=[5]), DimensionError, ["'x'"]),
    ("attributes a list", lambda o: o.update(attributes=[1]), MetadataError, ["attributes"]),
    ("chunk_key_encoding unknown", lambda o: o.update(chunk_key_encoding={"name": "v9"}), UnsupportedError,
     ["'v9'"]),
    ("chunk_key_encoding separator", lambda o: o.update(chunk_key_encoding={"name": "default",
                                                                            "configuration": {"separator": "|"}}),
     MetadataError, ["separator", "'|'"]),
    ("storage transformer", lambda o: o.update(storage_transformers=[{"name": "x"}]), UnsupportedError,
     ["storage transformer"]),
    ("storage transformers not a list", lambda o: o.update(storage_transformers="x"), MetadataError,
     ["storage_transformers"]),
    ("extension that must be understood", lambda o: o.update(extra={"must_understand": True}), UnsupportedError,
     ["'extra'"]),
    ("not an object", lambda o: [], MetadataError, ["zarr.json"]),
]

SHARDING = [
    ("sharding inner shape not dividing", lambda c: c["configuration"].update(chunk_shape=[3]), MetadataError,
     ["chunk_shape"]),
    ("sharding inner shape zero", lambda c: c["configuration"].update(chunk_shape=[0]), MetadataError,
     ["chunk_shape"]),
    ("sharding inner rank", lambda c: c["configuration"].update(chunk_shape=[1, 1]), MetadataError,
     ["chunk_shape"]),
    ("sharding codecs missing", lambda c: _drop(c["configuration"], "codecs"), MetadataError, ["codecs"]),
    ("sharding index_location", lambda c: c["configuration"].update(index_location="middle"), MetadataError,
     ["'middle'"]),
    ("sharding index codec compressing", lambda c: c["configuration"].update(
        index_codecs=[{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "gzip"}]),
     UnsupportedError, ["gzip"]),
]

ZARRS = [
    ("zarrs.vlen index_data_type", lambda c: c["configuration"].update(index_data_type="uint8"), UnsupportedError,
     ["'uint8'"]),
    ("zarrs.vlen index_data_type missing", lambda c: _drop(c["configuration"], "index_data_type"), MetadataError,
     ["index_data_type"]),
    ("zarrs.vlen index_location", lambda c: c["configuration"].update(index_location="middle"), UnsupportedError,
     ["'middle'"]),
    ("zarrs.vlen data_codecs not a list", lambda c: c["configuration"].update(data_codecs="zstd"), MetadataError,
     ["data_codecs"]),
    ("zarrs.vlen data codec unknown", lambda c: c["configuration"].update(data_codecs=[{"name": "nosuch"}]),
     UnsupportedError, ["'nosuch'"]),
]


def _consolidated_root(o):
    o["consolidated_metadata"] = {"kind": "inline", "must_understand": False, "metadata": {}}
    return o


GROUP = [
    ("root not an object", lambda o: [1], MetadataError, ["zarr.json"]),
    ("root node_type missing", lambda o: _drop(o, "node_type"), MetadataError, ["node_type"]),
    ("consolidated a list", lambda o: o.update(consolidated_metadata=[]), MetadataError, ["consolidated_metadata"]),
    ("consolidated kind", lambda o: o.update(consolidated_metadata={"kind": "sidecar"}), UnsupportedError,
     ["'sidecar'"]),
    ("consolidated child ..", lambda o: _consolidated_root(o)["consolidated_metadata"]["metadata"].update(
        {"..": {"zarr_format": 3, "node_type": "group"}}), MetadataError, ["'..'"]),
    ("consolidated child absolute", lambda o: _consolidated_root(o)["consolidated_metadata"]["metadata"].update(
        {"/etc": {"zarr_format": 3, "node_type": "group"}}), MetadataError, ["/etc"]),
    ("consolidated child NUL", lambda o: _consolidated_root(o)["consolidated_metadata"]["metadata"].update(
        {"a\x00": {"zarr_format": 3, "node_type": "group"}}), MetadataError, ["a\\x00"]),
    ("consolidated child not an object", lambda o: _consolidated_root(o)["consolidated_metadata"]["metadata"].update(
        {"a": 5}), MetadataError, ["'a'"]),
    ("consolidated orphan", lambda o: _consolidated_root(o)["consolidated_metadata"]["metadata"].update(
        {"g/a": {"zarr_format": 3, "node_type": "group"}}), MetadataError, ["'/g/a'"]),
]


def _codec(o, name):
    return next(c for c in o["codecs"] if c["name"] == name)


def _rows():
    for kind in V3_KINDS:
        for what, fn, err, texts in FIELDS:
            key = "names" if what == "dimension_names disagree with sizes" else "names/zarr.json"  # a group check
            yield pytest.param(kind, "names/zarr.json", fn, err, [key, *texts], id=f"{kind}-{what}")
        for what, fn, err, texts in GROUP:
            yield pytest.param(kind, "zarr.json", fn, err, texts, id=f"{kind}-{what}")
    for what, fn, err, texts in SHARDING:
        yield pytest.param("zarr-v3-sharded", "names/zarr.json",
                           lambda o, fn=fn: fn(_codec(o, "sharding_indexed")), err, ["names/zarr.json", *texts],
                           id=f"sharded-{what}")
    for what, fn, err, texts in ZARRS:
        yield pytest.param("zarr-v3-zarrs", "names/zarr.json", lambda o, fn=fn: fn(_codec(o, "zarrs.vlen")), err,
                           ["names/zarr.json", *texts], id=f"zarrs-{what}")


@pytest.mark.parametrize(("kind", "rel", "fn", "err", "texts"), list(_rows()))
def test_damaged_zarr_json(pristine, tmp_path, kind, rel, fn, err, texts):
    store = tmp_path / "s.zarr"
    shutil.copytree(pristine[kind], store)
    edit_json(store / rel, fn)
    if err is UnsupportedError and rel != "zarr.json":
        # one array we cannot decode never blocks its group (issue 12); a codec configuration we
        # refuse while decoding still raises
        assert_array_left_out_or_read_by_zarr_python(store, rel.rsplit("/", 1)[0], err, tuple(texts))
        return
    with pytest.raises(ZStringsError) as info:
        open_all(store)
    assert isinstance(info.value, err), f"{type(info.value).__name__}: {info.value}"
    msg = str(info.value)
    assert str(store) in msg, msg
    for t in texts:
        assert t in msg, f"{t!r} not in {msg}"


# --- chunk bytes, per layout -------------------------------------------------------------

U32 = struct.Struct("<I")


def _vlen(values: list[bytes]) -> bytes:
    return U32.pack(len(values)) + b"".join(U32.pack(len(v)) + v for v in values)


def _arrow(offsets: list[int], data: bytes, large=False) -> bytes:
    off = np.array(offsets, "<i8" if large else "<i4").tobytes()
    return off + b"\0" * (-len(off) % 64) + data


def _zarrs_end(index: list[int], data: bytes) -> bytes:
    import numcodecs

    ib = np.array(index, "<u4").tobytes()
    db = bytes(numcodecs.Zstd(level=1).encode(data)) if data else b""
    return db + ib + struct.pack("<Q", len(ib))


def _zstd(b: bytes) -> bytes:
    import numcodecs

    return bytes(numcodecs.Zstd(level=0).encode(b))


def _gzip(b: bytes) -> bytes:
    import gzip

    return gzip.compress(b)


N = 8
GOOD = [b"a"] * N
CHUNKS = [
    # vlen-utf8 (zarr-python), one chunk of 8
    ("zarr-v3-vlen", _zstd(_vlen(GOOD[:7])), ChunkError, ["7 items", "expected 8"]),
    ("zarr-v3-vlen", _zstd(U32.pack(2**31) + b"\0" * 12), ChunkError, ["items"]),
    ("zarr-v3-vlen", _zstd(_vlen(GOOD)[:-1]), ChunkError, ["past the end"]),
    ("zarr-v3-vlen", _zstd(_vlen(GOOD) + b"junk"), ChunkError, ["trailing"]),
    ("zarr-v3-vlen", _zstd(_vlen([b"\xff"] + GOOD[1:])), StringDecodeError, ["names"]),
    ("zarr-v3-vlen", _zstd(_vlen([b"\xed\xa0\x80"] + GOOD[1:])), StringDecodeError, ["names"]),
    ("zarr-v3-vlen", _zstd(b"\0\0"), ChunkError, ["shorter"]),
    ("zarr-v3-vlen", _vlen(GOOD), ChunkError, ["zstd"]),  # not compressed
    # Arrow layout (+ gzip)
    ("zarr-v3-arrow", _gzip(_arrow([0, 1, 2, 3, 4, 5, 6, 7, 100], b"a" * 8)), ChunkError, ["last offset"]),
    ("zarr-v3-arrow", _gzip(_arrow([0, 1, 2, 3, 2, 5, 6, 7, 8], b"a" * 8)), ChunkError, ["monoton"]),
    ("zarr-v3-arrow", _gzip(_arrow([-5, 1, 2, 3, 4, 5, 6, 7, 8], b"a" * 8)), ChunkError, ["offsets[0]"]),
    ("zarr-v3-arrow", _gzip(b"\0" * 20), ChunkError, ["too short"]),
    ("zarr-v3-arrow", _gzip(_arrow(list(range(9)), b"\xff" + b"a" * 7)), StringDecodeError, ["names"]),
    ("zarr-v3-arrow", _arrow(list(range(9)), b"a" * 8), ChunkError, ["gzip"]),  # not compressed
    # zarrs.vlen (uint32 index at the end, zstd data)
    ("zarr-v3-zarrs", _zarrs_end(list(range(9)), b"a" * 8)[:-1], ChunkError, ["index length"]),
    ("zarr-v3-zarrs", b"\0" * 7, ChunkError, ["shorter"]),
    ("zarr-v3-zarrs", _zarrs_end(list(range(8)), b"a" * 8), ChunkError, ["index"]),
    ("zarr-v3-zarrs", _zarrs_end([0, 1, 2, 3, 4, 5, 6, 7, 9], b"a" * 8), ChunkError, ["last offset"]),
    ("zarr-v3-zarrs", _zarrs_end([0, 2, 1, 3, 4, 5, 6, 7, 8], b"a" * 8), ChunkError, ["monoton"]),
    ("zarr-v3-zarrs", _zarrs_end(list(range(9)), b"\xc3" + b"a" * 7), StringDecodeError, ["names"]),
    ("zarr-v3-zarrs", b"garbage!" + struct.pack("<Q", 0), ChunkError, ["names/c/0"]),
]


def _shard_rows():
    """The sharded store's names/c/0: 2 inner chunks of 2 strings, index (2 x offset,nbytes) + crc32c at the end."""
    inner = [_vlen([b"a", b"b"]), _vlen([b"c", b"d"])]
    import numcodecs

    inner = [bytes(numcodecs.Zstd(level=0).encode(c)) for c in inner]

    def shard(entries, body=None, crc_ok=True):
        idx = np.array(entries, "<u8").tobytes()
        import google_crc32c  # zarr-python's crc32c

        crc = struct.pack("<I", google_crc32c.value(idx) if crc_ok else 0)
        return (body if body is not None else b"".join(inner)) + idx + crc

    a, b = len(inner[0]), len(inner[1])
    return [
        ("zarr-v3-sharded", shard([[0, a], [a, b]], crc_ok=False), ChunkError, ["checksum"]),
        ("zarr-v3-sharded", shard([[0, a], [a, b + 1000]]), ChunkError, ["beyond"]),
        ("zarr-v3-sharded", shard([[2**63, a], [a, b]]), ChunkError, ["beyond"]),
        ("zarr-v3-sharded", shard([[0, 2**64 - 2], [a, b]]), ChunkError, ["beyond"]),
        ("zarr-v3-sharded", shard([[a, b], [0, a]], body=inner[1] + inner[0]), None, []),  # out of order: fine
        ("zarr-v3-sharded", shard([[0, 3], [a, b]]), ChunkError, ["zstd"]),
        ("zarr-v3-sharded", shard([[0, a], [a, b]])[-30:], ChunkError, ["shorter"]),
        ("zarr-v3-sharded", shard([[0, a], [a, b]])[:10], ChunkError, ["shorter"]),
    ]


def _chunk_rows():
    rows = CHUNKS
    try:
        rows = rows + _shard_rows()
    except ImportError:  # pragma: no cover - crc32c comes with zarr-python
        pass
    for i, (kind, data, err, texts) in enumerate(rows):
        yield pytest.param(kind, data, err, texts, id=f"{kind}-chunk{i:02d}")


@pytest.mark.parametrize(("kind", "data", "err", "texts"), list(_chunk_rows()))
def test_damaged_v3_chunk(pristine, tmp_path, kind, data, err, texts):
    store = tmp_path / "s.zarr"
    shutil.copytree(pristine[kind], store)
    (store / "names" / "c" / "0").write_bytes(data)
    if err is None:
        open_all(store)
        return
    with pytest.raises(ZStringsError) as info:
        open_all(store, utf8_errors="strict")
    assert isinstance(info.value, err), f"{type(info.value).__name__}: {info.value}"
    msg = str(info.value)
    assert str(store) in msg, msg
    assert "names" in msg, msg
    for t in texts:
        assert t in msg, f"{t!r} not in {msg}"


def test_zarr_json_invalid_utf8_and_truncated(pristine, tmp_path):
    for kind in V3_KINDS:
        for i, raw in enumerate([b'{"zarr_format": 3, "node_type": "arr', b'{"zarr_format": 3, "x": "\xff"}', b"[" * 10**5]):
            store = tmp_path / f"{kind}{i}.zarr"
            shutil.copytree(pristine[kind], store)
            (store / "names" / "zarr.json").write_bytes(raw)
            with pytest.raises(MetadataError) as info:
                open_all(store)
            assert str(store) in str(info.value) and "names/zarr.json" in str(info.value), str(info.value)


def test_consolidated_metadata_is_checked_like_the_files(pristine, tmp_path):
    """A damaged child inside the root's consolidated metadata: the same errors as a damaged file."""
    store = tmp_path / "s.zarr"
    shutil.copytree(pristine["zarr-v3-vlen"], store)
    names = json.loads((store / "names" / "zarr.json").read_text())
    names["shape"] = "8"
    edit_json(store / "zarr.json", lambda o: o.update(consolidated_metadata={
        "kind": "inline", "must_understand": False, "metadata": {"names": names}}))
    with pytest.raises(MetadataError, match=r"names/zarr\.json.*'8'"):
        open_all(store)
