"""Tests for xr_zstrings.text.vlen: numcodecs vlen-*, zarrs.vlen and the draft Arrow layout."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import numcodecs
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xr_zstrings.errors import ChunkError, StringDecodeError, UnsupportedError, ZStringsError
from xr_zstrings.text import vlen as V

T = np.dtypes.StringDType()
GOLDEN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "golden_chunks")
with open(os.path.join(GOLDEN, "values.json"), encoding="utf-8") as _f:
    _VALUES = json.load(_f)
STRS = _VALUES["strs"]
BINS = [s.encode("latin-1") for s in _VALUES["bins_latin1"]]
ZARRS_DOC = _VALUES["zarrs_doc"]

EDGE = ["", "a", "x\x00y", "\x00", "tail\x00\x00", "é", "€", "😀", "中文字", "z" * 70_000, "mixé" * 5000, ""]

text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)


def golden(name: str) -> bytes:
    with open(os.path.join(GOLDEN, name), "rb") as f:
        return f.read()


def as_list(arr: np.ndarray) -> list:
    return arr.tolist()


def nc_utf8(values) -> bytes:
    return bytes(numcodecs.VLenUTF8().encode(np.array(values, dtype=object)))


# --------------------------------------------------------------------------------------------
# numcodecs vlen-utf8 / vlen-bytes
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("values", [STRS, EDGE, [], [""], ["a"] * 1000])
def test_vlen_utf8_encode_matches_numcodecs(values):
    assert V.encode_vlen_utf8_chunk(values) == nc_utf8(values)
    assert V.encode_vlen_utf8_chunk(np.array(values, dtype=T)) == nc_utf8(values)


def test_vlen_utf8_none_is_empty_like_numcodecs():
    vals = ["a", None, "b"]
    assert V.encode_vlen_utf8_chunk(vals) == nc_utf8(vals)


def test_vlen_utf8_multidim_c_order():
    arr = np.array([["a", "bb"], ["ccc", "é"]], dtype=object)
    assert V.encode_vlen_utf8_chunk(arr) == bytes(numcodecs.VLenUTF8().encode(arr))
    out = V.decode_vlen_utf8_to_numpy(V.encode_vlen_utf8_chunk(arr), 4, shape=(2, 2))
    assert out.shape == (2, 2) and as_list(out) == arr.tolist()


@pytest.mark.parametrize("string_dtype", ["T", "O", "U"])
@pytest.mark.parametrize("values", [STRS, EDGE, []])
def test_vlen_utf8_decode_numcodecs_chunks(values, string_dtype):
    buf = nc_utf8(values)
    expected = values
    if string_dtype == "U" and any(v.endswith("\x00") for v in values):
        # numpy's U cannot hold a trailing NUL: refused, never cut (numcodecs keeps it)
        with pytest.raises(ZStringsError, match="end with NUL"):
            V.decode_vlen_utf8_to_numpy(buf, len(values), string_dtype=string_dtype)
        with pytest.raises(ZStringsError, match="end with NUL"):
            V.vlen_to_numpy(V.decode_vlen_utf8_chunk(buf, len(values)), kind="str", string_dtype=string_dtype)
        return
    out = V.decode_vlen_utf8_to_numpy(buf, len(values), string_dtype=string_dtype)
    assert as_list(out) == expected
    chunk = V.decode_vlen_utf8_chunk(buf, len(values))
    out2 = V.vlen_to_numpy(chunk, kind="str", string_dtype=string_dtype)
    assert as_list(out2) == expected
    if string_dtype == "T":
        assert out.dtype == T
    elif string_dtype == "O":
        assert out.dtype == object and all(type(v) is str for v in out.tolist())
    # cross-check: numcodecs decodes our encoding to the same values
    assert numcodecs.VLenUTF8().decode(V.encode_vlen_utf8_chunk(values)).tolist() == values


def test_vlen_bytes_roundtrip_and_peer():
    buf = V.encode_vlen_utf8_chunk(BINS, kind="bytes")
    assert buf == bytes(numcodecs.VLenBytes().encode(np.array(BINS, dtype=object)))
    assert buf == golden("numcodecs_vlen_bytes.bin")
    out = V.decode_vlen_utf8_to_numpy(buf, len(BINS), kind="bytes")
    assert out.dtype == object and out.tolist() == BINS
    out = V.vlen_to_numpy(V.decode_vlen_utf8_chunk(buf), kind="bytes")
    assert out.tolist() == BINS


def test_vlen_golden():
    assert V.encode_vlen_utf8_chunk(STRS) == golden("numcodecs_vlen_utf8.bin")
    assert V.encode_vlen_utf8_chunk([]) == golden("numcodecs_vlen_utf8_empty.bin") == b"\0\0\0\0"
    assert as_list(V.decode_vlen_utf8_to_numpy(golden("numcodecs_vlen_utf8.bin"))) == STRS
    assert V.decode_vlen_utf8_to_numpy(golden("numcodecs_vlen_utf8_empty.bin"), 0).shape == (0,)


def test_vlen_decode_offsets_layout():
    chunk = V.decode_vlen_utf8_chunk(nc_utf8(["ab", "", "é"]))
    assert chunk.offsets.tolist() == [0, 2, 2, 4]
    assert chunk.data.tobytes() == b"ab\xc3\xa9"
    assert chunk.n_items == 3


@pytest.mark.parametrize(
    "buf, match",
    [
        (b"", "shorter than its 4-byte"),
        (b"\x01\x00", "shorter than its 4-byte"),
        (b"\x01\x00\x00\x00", "says 1 items but the chunk has only 4 bytes"),
        (b"\xff\xff\xff\xff" + b"\x00" * 6, "says 4294967295 items"),
        (b"\x01\x00\x00\x00\x05\x00\x00\x00ab", "claims 5 bytes"),
        (b"\x02\x00\x00\x00\x01\x00\x00\x00a\xff\xff\xff\xff", "claims 4294967295 bytes"),
        (b"\x02\x00\x00\x00\x04\x00\x00\x00abcd\x00\x00", "item 1 length header at byte 12 runs past"),
        (b"\x01\x00\x00\x00\x01\x00\x00\x00abc", "trailing bytes"),
    ],
)
def test_vlen_malformed_chunks(buf, match):
    with pytest.raises(ChunkError, match=match):
        V.decode_vlen_utf8_chunk(buf)
    with pytest.raises(ChunkError):
        V.decode_vlen_utf8_to_numpy(buf)
    with pytest.raises(ChunkError):
        V.decode_vlen_utf8_to_numpy(buf, string_dtype="O")


def test_vlen_count_mismatch_and_trailing_opt_in():
    buf = nc_utf8(["a", "b"])
    with pytest.raises(ChunkError, match="says 2 items, expected 3"):
        V.decode_vlen_utf8_chunk(buf, 3)
    chunk = V.decode_vlen_utf8_chunk(buf + b"xyz", allow_trailing=True)
    assert as_list(V.vlen_to_numpy(chunk)) == ["a", "b"]


def test_vlen_huge_count_does_not_allocate():
    # would be a 34 GB list if the header were trusted
    with pytest.raises(ChunkError):
        V.decode_vlen_utf8_to_numpy(struct.pack("<I", 2**32 - 1) + b"\x00" * 6)


# --------------------------------------------------------------------------------------------
# UTF-8 errors and surrogates
# --------------------------------------------------------------------------------------------

INVALID = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xc0\x80", b"\xf4\x90\x80\x80", b"ok\x80"]


@pytest.mark.parametrize("bad", INVALID)
@pytest.mark.parametrize("string_dtype", ["T", "O", "U"])
def test_invalid_utf8_raises_clear_error(bad, string_dtype):
    vals = [b"fine", b"x" * 40, bad, b"after"]
    buf = V.encode_vlen_utf8_chunk(vals, kind="bytes")
    with pytest.raises(StringDecodeError, match=r"element 2 .*not valid UTF-8"):
        V.decode_vlen_utf8_to_numpy(buf, 4, string_dtype=string_dtype, what="store 's' key 'k'")
    chunk = V.decode_vlen_utf8_chunk(buf)
    with pytest.raises(StringDecodeError, match=r"element 2"):
        V.vlen_to_numpy(chunk, string_dtype=string_dtype)
    arrow = V.encode_arrow_chunk(vals, binary=True)
    with pytest.raises(StringDecodeError, match=r"element 2"):
        V.vlen_to_arrow(V.decode_arrow_chunk(arrow, 4))


def test_invalid_utf8_in_long_string_and_straddle():
    # a character split across two elements is invalid in each element
    buf = V.encode_vlen_utf8_chunk([b"\xc3", b"\xa9"], kind="bytes")
    with pytest.raises(StringDecodeError, match="element 0"):
        V.decode_vlen_utf8_to_numpy(buf)
    long_bad = [b"a"] * 10 + [b"y" * 5000 + b"\xff"]
    with pytest.raises(StringDecodeError, match="element 10"):
        V.decode_vlen_utf8_to_numpy(V.encode_vlen_utf8_chunk(long_bad, kind="bytes"))


def test_invalid_utf8_never_stored_silently_in_stringdtype():
    # numpy's S->T cast does not validate UTF-8; make sure our fast path does
    vals = [b"abc"] * 5000 + [b"\xfe"] + [b"abc"] * 5000
    with pytest.raises(StringDecodeError, match="element 5000"):
        V.decode_vlen_utf8_to_numpy(V.encode_vlen_utf8_chunk(vals, kind="bytes"))


def test_utf8_errors_replace():
    buf = V.encode_vlen_utf8_chunk([b"a\xffb", b"ok"], kind="bytes")
    assert as_list(V.decode_vlen_utf8_to_numpy(buf, utf8_errors="replace")) == ["a\ufffdb", "ok"]
    chunk = V.decode_vlen_utf8_chunk(buf)
    assert as_list(V.vlen_to_numpy(chunk, string_dtype="O", utf8_errors="replace")) == ["a\ufffdb", "ok"]
    with pytest.raises(ZStringsError, match="utf8_errors"):
        V.vlen_to_numpy(chunk, utf8_errors="bogus")


@pytest.mark.parametrize("container", [list, lambda v: np.array(v, dtype=object), np.array])
def test_lone_surrogate_raises_clear_error(container):
    vals = container(["ok", "bad\ud800", "x"])
    for enc in (V.encode_vlen_utf8_chunk, V.encode_arrow_chunk, V.values_to_vlen):  # (zarrs.vlen packs with values_to_vlen)
        with pytest.raises(ZStringsError, match=r"element 1 .*lone surrogate .*U\+D800"):
            enc(vals)


def test_wrong_value_types():
    with pytest.raises(ZStringsError, match="element 1 is 3 of type int"):
        V.encode_vlen_utf8_chunk(["a", 3])
    with pytest.raises(ZStringsError, match="not str"):
        V.encode_vlen_utf8_chunk(["a", b"b"])
    with pytest.raises(ZStringsError, match="not bytes"):
        V.encode_vlen_utf8_chunk([b"a", "b"], kind="bytes")
    with pytest.raises(ZStringsError, match="bytes array"):
        V.values_to_vlen(np.array([b"a"]), kind="str")
    with pytest.raises(ZStringsError, match="kind="):
        V.values_to_vlen(["a"], kind="text")


# --------------------------------------------------------------------------------------------
# draft Arrow layout
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, values, large, binary",
    [
        ("arrow_string.bin", STRS, False, False),
        ("arrow_large_string.bin", STRS, True, False),
        ("arrow_binary.bin", BINS, False, True),
        ("arrow_large_binary.bin", BINS, True, True),
        ("arrow_string_empty.bin", [], False, False),
    ],
)
def test_arrow_golden(name, values, large, binary):
    blob = golden(name)
    assert V.encode_arrow_chunk(values, large=large, binary=binary) == blob
    chunk = V.decode_arrow_chunk(blob, len(values), large=large)
    kind = "bytes" if binary else "str"
    assert V.vlen_to_numpy(chunk, kind=kind).tolist() == values
    arr = V.vlen_to_arrow(chunk, kind=kind, large=large)
    assert arr.to_pylist() == values
    assert arr.type == {(0, 0): pa.string(), (1, 0): pa.large_string(), (0, 1): pa.binary(), (1, 1): pa.large_binary()}[(large, binary)]


def test_arrow_zero_copy():
    blob = bytearray(V.encode_arrow_chunk(STRS))
    chunk = V.decode_arrow_chunk(blob, len(STRS))
    arr = V.vlen_to_arrow(chunk)
    # the Arrow data buffer points into our chunk bytes
    base = np.frombuffer(blob, np.uint8).ctypes.data
    assert arr.buffers()[2].address == base + 64
    assert arr.buffers()[1].address == base


def test_arrow_layout_padding_rule():
    # 15 elements -> 16 int32 offsets = 64 bytes: no padding at all
    blob = V.encode_arrow_chunk(["ab"] * 15)
    assert len(blob) == 64 + 30
    assert V.vlen_to_numpy(V.decode_arrow_chunk(blob, 15)).tolist() == ["ab"] * 15


@pytest.mark.parametrize(
    "blob, n, match",
    [
        (b"\x00" * 3, 0, "too short"),
        (np.array([0, 5], "<i4").tobytes() + b"\x00" * 56 + b"abc", 1, "last offset is 5"),
        (np.array([0, 3, 1], "<i4").tobytes() + b"\x00" * 52 + b"abc", 2, "not monotonically"),
        (np.array([-1, 1], "<i4").tobytes() + b"\x00" * 56 + b"abc", 1, r"offsets\[0\] is -1"),
    ],
)
def test_arrow_malformed(blob, n, match):
    with pytest.raises(ChunkError, match=match):
        V.decode_arrow_chunk(blob, n)


def test_arrow_nonzero_first_offset_is_allowed():
    blob = np.array([2, 3, 5], "<i4").tobytes() + b"\x00" * 52 + b"xxabc"
    chunk = V.decode_arrow_chunk(blob, 2)
    assert V.vlen_to_numpy(chunk).tolist() == ["a", "bc"]
    assert V.vlen_to_arrow(chunk).to_pylist() == ["a", "bc"]
    assert V.encode_arrow_chunk(chunk) == V.encode_arrow_chunk(["a", "bc"])


# --------------------------------------------------------------------------------------------
# zarrs.vlen
# --------------------------------------------------------------------------------------------


def zarrs_vlen_from_spec(items: list[bytes], index_data_type: str, index_location: str) -> bytes:
    """A ``zarrs.vlen`` chunk with plain ``bytes`` index and data codecs, written out from the spec
    (../shared/specs/zarrs-vlen-codec.txt), not with our code: the index is the Arrow layout's
    ``len + 1`` offsets (offsets[0] = 0, offsets[j + 1] - offsets[j] = the length of element j) as
    little-endian uint32 or uint64; the data is the elements' bytes one after the other; the first
    (index_location "start") or last ("end") 8 bytes hold the index length as a u64le, with the
    index after it ("start": then the data) or between the data and it ("end"), no padding."""
    offsets = [0]
    for b in items:
        offsets.append(offsets[-1] + len(b))
    index = struct.pack(f"<{len(offsets)}{'I' if index_data_type == 'uint32' else 'Q'}", *offsets)
    data = b"".join(items)
    length = struct.pack("<Q", len(index))
    return length + index + data if index_location == "start" else data + index + length


def zarrs_chunk(index, data, n: int, index_data_type: str) -> V.VlenChunk:
    """What codecs.zarrs makes of a chunk's index and data once their (plain bytes) chains ran."""
    data = np.frombuffer(bytes(data), np.uint8) if not isinstance(data, np.ndarray) else data
    return V.VlenChunk(V.decode_offsets_index(index, n, index_data_type, data_len=int(data.size)), data)


def zarrs_roundtrip(values: list[str], index_data_type: str, index_location: str) -> np.ndarray:
    """``values`` in the spec's layout, read back by our decoder."""
    blob = zarrs_vlen_from_spec([v.encode("utf-8") for v in values], index_data_type, index_location)
    index, data = V.split_zarrs_vlen(blob, index_location)
    return V.vlen_to_numpy(zarrs_chunk(index, data, len(values), index_data_type))


@pytest.mark.parametrize("tag, values", [("strs", STRS), ("zarrs_doc", ZARRS_DOC)])
@pytest.mark.parametrize("index_data_type", ["uint32", "uint64"])
@pytest.mark.parametrize("index_location", ["start", "end"])
def test_zarrs_golden(tag, values, index_data_type, index_location):
    """The golden chunks are the spec's layout, and our decoder reads them (our encoder, the
    ZarrsVlenCodec pipeline, is checked against them in tests/codecs/test_v3_pipeline.py)."""
    blob = golden(f"zarrs_vlen_{tag}_{index_data_type}_{index_location}.bin")
    assert blob == zarrs_vlen_from_spec([v.encode("utf-8") for v in values], index_data_type, index_location)
    index, data = V.split_zarrs_vlen(blob, index_location)
    chunk = zarrs_chunk(index, data, len(values), index_data_type)
    assert chunk.offsets.dtype == np.dtype("<u4" if index_data_type == "uint32" else "<u8")
    assert V.vlen_to_numpy(chunk).tolist() == values
    assert V.vlen_to_arrow(chunk).to_pylist() == values
    assert V.join_zarrs_vlen(index, data, index_location) == blob


def test_zarrs_doc_golden_by_hand():
    """zarrs' own unit test's elements, byte by byte: u64le index length 20, five uint32 offsets, data."""
    blob = golden("zarrs_vlen_zarrs_doc_uint32_start.bin")
    assert blob == (b"\x14" + b"\x00" * 7 + b"\x00\x00\x00\x00" + b"\x01\x00\x00\x00" + b"\x03\x00\x00\x00"
                    + b"\x03\x00\x00\x00" + b"\x07\x00\x00\x00" + b"abbdddd")


def test_zarrs_split_views_and_empty_data():
    blob = zarrs_vlen_from_spec([b"", b""], "uint32", "start")
    index, data = V.split_zarrs_vlen(blob, "start")
    assert bytes(index) == np.zeros(3, "<u4").tobytes() and len(data) == 0
    assert V.vlen_to_numpy(zarrs_chunk(index, data, 2, "uint32")).tolist() == ["", ""]


def test_zarrs_index_as_array():
    offs = np.array([0, 1, 3], np.uint64)
    chunk = zarrs_chunk(offs, b"abc", 2, "uint64")
    assert V.vlen_to_numpy(chunk).tolist() == ["a", "bc"]


@pytest.mark.parametrize(
    "blob, loc, match",
    [
        (b"\x00" * 7, "start", "shorter than its 8-byte"),
        (struct.pack("<Q", 100) + b"abc", "start", "index length 100 exceeds"),
        (b"abc" + struct.pack("<Q", 2**64 - 1), "end", "exceeds"),
    ],
)
def test_zarrs_split_malformed(blob, loc, match):
    with pytest.raises(ChunkError, match=match):
        V.split_zarrs_vlen(blob, loc)


def test_zarrs_index_errors():
    good = np.array([0, 1, 3], "<u4").tobytes()
    with pytest.raises(ChunkError, match="index is 12 bytes, expected 16"):
        V.decode_offsets_index(good, 3, "uint32")
    with pytest.raises(ChunkError, match="not monotonically increasing"):
        zarrs_chunk(np.array([0, 3, 1], "<u4").tobytes(), b"abc", 2, "uint32")
    with pytest.raises(ChunkError, match="last offset is 3 but the data holds 2"):
        zarrs_chunk(good, b"ab", 2, "uint32")
    with pytest.raises(ChunkError, match="expected exactly 4"):
        zarrs_chunk(good, b"abcd", 2, "uint32")
    with pytest.raises(UnsupportedError, match="index_data_type"):
        V.decode_offsets_index(good, 2, "uint16")
    with pytest.raises(UnsupportedError, match="index_location"):
        V.split_zarrs_vlen(b"\x00" * 8, "middle")
    # huge uint64 offsets must not wrap to negative and pass
    huge = np.array([0, 2**63 + 5], "<u8").tobytes()
    with pytest.raises(ChunkError):
        zarrs_chunk(huge, b"ab", 1, "uint64")


def test_validate_offsets_direct():
    V.validate_offsets(np.array([0, 0, 2]), 2, n=2, exact_end=True, first_zero=True)
    with pytest.raises(ChunkError, match="expected 4"):
        V.validate_offsets(np.array([0, 0, 2]), 2, n=3)
    with pytest.raises(ChunkError, match=r"offsets\[0\] is 1, expected 0"):
        V.validate_offsets(np.array([1, 2]), 2, first_zero=True)


# --------------------------------------------------------------------------------------------
# edge values through every layout, and round trips
# --------------------------------------------------------------------------------------------


def _all_layouts(values):
    n = len(values)
    yield "vlen", V.decode_vlen_utf8_to_numpy(V.encode_vlen_utf8_chunk(values), n)
    yield "vlen-chunk", V.vlen_to_numpy(V.decode_vlen_utf8_chunk(V.encode_vlen_utf8_chunk(values), n))
    for large in (False, True):
        yield f"arrow{large}", V.vlen_to_numpy(V.decode_arrow_chunk(V.encode_arrow_chunk(values, large=large), n, large=large))
    for idt in ("uint32", "uint64"):
        for loc in ("start", "end"):
            yield f"zarrs-{idt}-{loc}", zarrs_roundtrip(values, idt, loc)


def test_edge_values_all_layouts():
    for name, out in _all_layouts(EDGE):
        assert out.dtype == T, name
        assert out.tolist() == EDGE, name


def test_many_medium_and_long_strings():
    rng = np.random.default_rng(0)
    lens = rng.integers(0, 3000, 600).tolist() + [200_000] + [0] * 50
    vals = ["é" * (L // 2) + "a" * (L % 2) for L in lens]
    for name, out in _all_layouts(vals):
        assert out.tolist() == vals, name


def test_stringdtype_input_with_na():
    dt = np.dtypes.StringDType(na_object=None)
    arr = np.array(["a", None, "c"], dtype=dt)
    assert V.encode_vlen_utf8_chunk(arr) == nc_utf8(["a", "", "c"])


@settings(max_examples=150, deadline=None)
@given(st.lists(text, max_size=60))
def test_hypothesis_roundtrip(values):
    for name, out in _all_layouts(values):
        assert out.tolist() == values, name
    assert V.encode_vlen_utf8_chunk(values) == nc_utf8(values)
    obj = V.decode_vlen_utf8_to_numpy(nc_utf8(values), len(values), string_dtype="O")
    assert obj.tolist() == values


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=30), max_size=40))
def test_hypothesis_bytes_roundtrip(values):
    buf = V.encode_vlen_utf8_chunk(values, kind="bytes")
    assert buf == bytes(numcodecs.VLenBytes().encode(np.array(values, dtype=object)))
    assert V.decode_vlen_utf8_to_numpy(buf, len(values), kind="bytes").tolist() == values
    blob = V.encode_arrow_chunk(values, binary=True)
    assert V.vlen_to_numpy(V.decode_arrow_chunk(blob, len(values)), kind="bytes").tolist() == values


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64), st.integers(0, 20))
def test_hypothesis_garbage_never_crashes(blob, n):
    """Arbitrary bytes decode or raise a ZStringsError -- never IndexError/MemoryError/etc."""
    for f in (
        lambda: V.decode_vlen_utf8_to_numpy(blob),
        lambda: V.decode_vlen_utf8_to_numpy(blob, string_dtype="O"),
        lambda: V.vlen_to_numpy(V.decode_arrow_chunk(blob, n)),
        lambda: V.vlen_to_numpy(V.decode_arrow_chunk(blob, n, large=True), kind="bytes"),
        lambda: V.vlen_to_numpy(zarrs_chunk(*V.split_zarrs_vlen(blob, "start"), n, "uint32")),
        lambda: V.vlen_to_numpy(zarrs_chunk(*V.split_zarrs_vlen(blob, "end"), n, "uint64")),
    ):
        try:
            f()
        except ZStringsError:
            pass


# --------------------------------------------------------------------------------------------
# purity
# --------------------------------------------------------------------------------------------


def test_import_does_not_pull_xarray_or_zarr():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    # Load xr_zstrings.text.vlen without running the package __init__ (which may grow imports),
    # so this checks vlen.py (and what it imports) itself.
    code = (
        "import sys, types, importlib\n"
        f"pkg = types.ModuleType('xr_zstrings'); pkg.__path__ = [{os.path.join(root, 'xr_zstrings')!r}]\n"
        "sys.modules['xr_zstrings'] = pkg\n"
        "importlib.import_module('xr_zstrings.text.vlen')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('xarray', 'zarr', 'numcodecs'))\n"
        "assert not bad, bad\n"
        "import xr_zstrings.text.vlen as v; v.vlen_to_numpy(v.decode_vlen_utf8_chunk(b'\\x00\\x00\\x00\\x00'))\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('xarray', 'zarr', 'numcodecs'))\n"
        "assert not bad, bad\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert res.returncode == 0, res.stderr
