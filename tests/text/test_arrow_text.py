"""text/arrow.py: stored layouts straight into Arrow arrays, and Arrow into StringDType.

Every Arrow result is compared with what the numpy path's decoders give for the same buffers
(values, errors, utf8_errors warnings) and, for valid UTF-8, with Python's own ``bytes.decode``
(the peer); Arrow -> StringDType with ``pyarrow``'s own ``to_pylist``.  Every test runs with the
compiled kernels and with ``XR_ZSTRINGS_NO_EXT=1`` (the ``path`` fixture).  No timing here.
"""

from __future__ import annotations

import struct
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xr_zstrings.errors import ChunkError, StringDecodeError, ZStringsError
from xr_zstrings.text import arrow as A
from xr_zstrings.text import dtypes as D
from xr_zstrings.text import fixed as F
from xr_zstrings.text import kernels as KL
from xr_zstrings.text import nc_char as C
from xr_zstrings.text import vlen as V
from xr_zstrings.text.policy import policy_scope

POLICIES = ("strict", "drop", "replace")
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# bytes that exercise every UTF-8 case: ASCII, NUL, continuation bytes, lead bytes, cut characters
_ATOMS = [b"a", b"Z", b"\x00", b"\x7f", b"\x80", b"\xbf", b"\xc0", b"\xc2", b"\xe0", b"\xed", b"\xf0",
          b"\xf4", b"\xf5", b"\xff", "é".encode(), "€".encode(), "😀".encode(), "中".encode(),
          "é".encode()[:1], "€".encode()[:2], "😀".encode()[:3]]
text = st.text(alphabet=st.characters(codec="utf-8"), max_size=30)  # (no lone surrogates)
messy = st.lists(st.sampled_from(_ATOMS), max_size=12).map(b"".join)
some_bytes = st.one_of(text.map(str.encode), messy)


@pytest.fixture(params=["kernels", "fallback"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both paths: the compiled kernels, and the pure numpy/pyarrow fallback."""
    if request.param == "kernels":
        monkeypatch.delenv("XR_ZSTRINGS_NO_EXT", raising=False)
        assert KL.kernels() is not None, KL.kernels_unavailable_reason
    else:
        monkeypatch.setenv("XR_ZSTRINGS_NO_EXT", "1")
        assert KL.kernels() is None
    return request.param


def outcome(fn: Callable[[], Any]) -> tuple[str, Any, list[str]]:
    """("ok", values, warnings) or ("error", (type, message), warnings); Arrow and numpy results
    both as a list of values."""
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        try:
            v = fn()
        except Exception as e:  # compared, not swallowed
            return "error", (type(e).__name__, str(e)), [str(x.message) for x in w]
    if isinstance(v, (pa.Array, pa.ChunkedArray)):
        v = v.to_pylist()
    elif isinstance(v, np.ndarray):
        v = v.reshape(-1).tolist()
    return "ok", v, [f"{type(x.message).__name__}: {x.message}" for x in w]


def frames(values: list[bytes]) -> bytes:
    """numcodecs vlen framing, written here by hand (u32le count, u32le length + bytes per value)."""
    return struct.pack("<I", len(values)) + b"".join(struct.pack("<I", len(v)) + v for v in values)


def python_decode(values: list[bytes]) -> list[str] | None:
    """Python's own decoding (the peer), or None when some value is not valid UTF-8."""
    try:
        return [v.decode("utf-8") for v in values]
    except UnicodeDecodeError:
        return None


# --------------------------------------------------------------------------------------------
# vlen frames
# --------------------------------------------------------------------------------------------


@SETTINGS
@given(st.lists(some_bytes, max_size=30), st.sampled_from(POLICIES))
def test_vlen_frames_as_the_numpy_path_and_python(path, values, policy):
    buf = frames(values)
    got = outcome(lambda: A.vlen_frames_to_arrow(buf, len(values), policy=policy, what="v"))
    numpy_path = outcome(lambda: V.decode_vlen_utf8_to_numpy(buf, len(values), utf8_errors=policy, what="v"))
    assert got == numpy_path
    peer = python_decode(values)
    if peer is not None:
        assert got == ("ok", peer, [])
    arr = A.vlen_frames_to_arrow(buf, None, kind="bytes")
    assert arr.type == pa.large_binary() and arr.to_pylist() == values


@pytest.mark.parametrize(("mangle", "n_expected", "allow_trailing"), [
    (lambda b: b[:2], None, False),  # shorter than its count
    (lambda b: b[:-1], None, False),  # the last value cut
    (lambda b: b[:9], None, False),  # a length header cut
    (lambda b: b + b"xx", None, False),  # trailing bytes
    (lambda b: b"\xff\xff\xff\x00" + b[4:], None, False),  # a count larger than the chunk
    (lambda b: b, 5, False),  # a count other than expected
])
def test_vlen_frames_framing_errors_as_the_numpy_path(path, mangle, n_expected, allow_trailing):
    buf = mangle(frames([b"abc", "é".encode(), b""]))
    got = outcome(lambda: A.vlen_frames_to_arrow(buf, n_expected, what="v", allow_trailing=allow_trailing))
    assert got[0] == "error" and got[1][0] == "ChunkError"
    assert got == outcome(lambda: V.decode_vlen_utf8_chunk(buf, n_expected, what="v", allow_trailing=allow_trailing))


def test_vlen_frames_allow_trailing_and_final_size(path):
    values = [b"abc", "é".encode(), b"", b"z" * 300]
    arr = A.vlen_frames_to_arrow(frames(values) + b"junk", 4, allow_trailing=True)
    assert arr.to_pylist() == [v.decode() for v in values]
    arr = A.vlen_frames_to_arrow(frames(values), 4)
    # the data buffer holds exactly the values' bytes (compacted once, no slack)
    assert arr.buffers()[2].size == sum(map(len, values)) == len(frames(values)) - 4 - 4 * len(values)
    assert arr.type == pa.large_string()


# --------------------------------------------------------------------------------------------
# offsets + data
# --------------------------------------------------------------------------------------------


@SETTINGS
@given(st.lists(some_bytes, max_size=30), st.sampled_from(POLICIES), st.integers(0, 5),
       st.sampled_from(["<i4", "<i8", "<u4", "<u8", ">i8"]), st.data())
def test_offsets_as_the_numpy_path_and_python(path, values, policy, lead, dt, data):
    blob = b"\xff" * lead + b"".join(values)  # offsets need not start at 0 (invalid bytes before)
    off = np.cumsum([lead] + [len(v) for v in values]).astype(dt)
    u8 = np.frombuffer(blob, np.uint8)
    got = outcome(lambda: A.offsets_to_arrow(off, u8, policy=policy, what="v"))
    chunk = V.VlenChunk(off.astype(np.int64), u8)
    assert got == outcome(lambda: V.vlen_to_numpy(chunk, utf8_errors=policy, what="v"))
    peer = python_decode(values)
    if peer is not None:
        assert got == ("ok", peer, [])
        valid = np.array(data.draw(st.lists(st.booleans(), min_size=len(values), max_size=len(values))), bool)
        arr = A.offsets_to_arrow(off, u8, policy=policy, valid=valid)
        assert arr.to_pylist() == [s if ok else None for s, ok in zip(peer, valid, strict=True)]
    assert A.offsets_to_arrow(off, blob, kind="bytes").to_pylist() == values


def test_offsets_int64_are_zero_copy(path):
    data = np.frombuffer("xxabcé".encode(), np.uint8)
    off = np.array([2, 5, 7], np.int64)
    arr = A.offsets_to_arrow(off, data)
    assert arr.to_pylist() == ["abc", "é"]
    assert arr.buffers()[1].address == off.ctypes.data
    assert arr.buffers()[2].address == data.ctypes.data
    assert A.offsets_to_arrow(off.astype(np.int32), data).buffers()[2].address == data.ctypes.data


def test_offsets_from_a_byte_buffer_at_any_alignment(path):
    """Offsets viewed from a chunk's bytes need not be aligned (the kernels read aligned integers)."""
    raw = b"\x00" + np.array([0, 1, 3], "<i8").tobytes() + "aé".encode()
    off = np.frombuffer(raw, "<i8", count=3, offset=1)
    assert not off.flags.aligned
    assert A.offsets_to_arrow(off, np.frombuffer(raw, np.uint8, offset=25)).to_pylist() == ["a", "é"]


@pytest.mark.parametrize(("off", "found"), [
    ([0, 3, 2], "offsets[2] = 2 < offsets[1] = 3"),
    ([0, 3, 9], "last offset is 9 but the data holds 6 bytes"),
    ([-1, 3, 4], "offsets[0] is -1"),
])
def test_bad_offsets_name_what_and_the_offset(path, off, found):
    with pytest.raises(ChunkError, match="^var v: .*" + found.replace("[", r"\[").replace("]", r"\]")):
        A.offsets_to_arrow(np.array(off, np.int64), b"abcdef", what="var v")


# --------------------------------------------------------------------------------------------
# fixed width
# --------------------------------------------------------------------------------------------


@SETTINGS
@given(st.lists(some_bytes, max_size=25), st.integers(0, 12), st.sampled_from(POLICIES), st.booleans())
def test_fixed_as_the_numpy_path_and_python(path, values, width, policy, trailing):
    rows = [v[:width].ljust(width, b"\x00") for v in values]
    u8 = np.frombuffer(b"".join(rows), np.uint8).reshape(len(rows), width)
    got = outcome(lambda: A.fixed_to_arrow(u8, trailing=trailing, policy=policy, what="v"))
    if trailing:  # NC_CHAR: the rows as S1 characters, joined by the numpy path
        numpy_path = outcome(lambda: C.decode_char_array(u8.view("S1"), utf8_errors=policy, what="v"))
    else:
        numpy_path = outcome(lambda: F.decode_fixed_utf8(u8, utf8_errors=policy, what="v"))
    assert got == numpy_path
    cut = [r.rstrip(b"\x00") if trailing else r.split(b"\x00", 1)[0] for r in rows]
    peer = python_decode(cut)
    if peer is not None:
        assert got == ("ok", peer, [])
    assert A.fixed_to_arrow(u8, trailing=trailing, kind="bytes").to_pylist() == cut


def test_fixed_nul_placement(path):
    raw = np.array([b"ab\x00cd", b"\x00xyz", b"abc\x00\x00", b"", "é€".encode()[:5]], "S5")
    assert A.fixed_to_arrow(raw, trailing=False).to_pylist() == ["ab", "", "abc", "", "é€"[:2]]
    assert A.fixed_to_arrow(raw, trailing=True).to_pylist() == ["ab\x00cd", "\x00xyz", "abc", "", "é€"]
    with pytest.raises(ZStringsError, match="uint8 array shaped"):
        A.fixed_to_arrow(np.zeros((2, 2), np.int32), trailing=False)


def test_fixed_index_names_the_value(path):
    raw = np.array([b"ok", b"a\xff"], "S2")
    with pytest.raises(StringDecodeError, match=r"^v: value \(7, 3\) is not valid UTF-8"):
        A.fixed_to_arrow(raw, trailing=False, what="v", index=lambda k: str((7, 2 + k)))


def test_vlen_index_names_the_value(path):
    with pytest.raises(StringDecodeError, match=r"^v: element 12 of the chunk \(1 bytes\) is not valid UTF-8"):
        A.vlen_frames_to_arrow(frames([b"ok", b"\xff"]), 2, what="v", index=lambda k: k + 11)


def test_one_warning_for_a_whole_read_as_the_numpy_path(path):
    """Inside a read's policy scope, the changes of every chunk make one warning, the numpy path's."""
    chunks = [frames([b"a\xff", b"ok"]), frames([b"\xfe", b"\xe2\x82"])]
    rows = np.frombuffer(b"x\xffz\x00", np.uint8).reshape(1, 4)

    def read(arrow: bool) -> list[str]:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            with policy_scope("var"):
                for c in chunks:
                    if arrow:
                        A.vlen_frames_to_arrow(c, 2, policy="replace")
                        A.fixed_to_arrow(rows, trailing=False, policy="replace")
                    else:
                        V.decode_vlen_utf8_to_numpy(c, 2, utf8_errors="replace")
                        F.decode_fixed_utf8(rows, utf8_errors="replace")
        return [str(x.message) for x in w]

    assert read(True) == read(False)
    assert len(read(True)) == 1 and "into 5 value(s)" in read(True)[0]


def test_bad_values_found_past_the_first_block(path):
    """Invalid values anywhere in a long array (past the kernels' 64 KiB validation blocks too)
    are found and replaced, each counted once."""
    values = [b"x" * 50] * 10000
    values[3] = values[9000] = b"\xff"
    buf = frames(values)
    with pytest.warns(UserWarning, match="into 2 value"):
        arr = A.vlen_frames_to_arrow(buf, None, policy="replace")
    assert arr[9000].as_py() == arr[3].as_py() == "\ufffd" and arr[8999].as_py() == "x" * 50


# --------------------------------------------------------------------------------------------
# UTF-32 and nulls
# --------------------------------------------------------------------------------------------


@SETTINGS
@given(st.lists(text, max_size=20), st.booleans())
def test_utf32_as_numpy(path, values, big):
    u = np.array(values, dtype="U") if values else np.zeros(0, "U1")
    if big:
        u = u.astype(u.dtype.newbyteorder(">"))
    arr = A.utf32_to_arrow(u)
    assert arr.type == pa.large_string() and arr.to_pylist() == u.tolist()  # numpy's own values


@pytest.mark.parametrize("code", [0xD800, 0xDFFF, 0x110000, 0xFFFFFFFF])
@pytest.mark.parametrize("order", ["<", ">"])
def test_utf32_bad_code_point_as_decode_utf32(path, code, order):
    u = np.array(["ab", "cd"], f"{order}U2")
    u.view(f"{order}u4")[3] = code
    with pytest.raises(StringDecodeError) as ours:
        A.utf32_to_arrow(u, what="v")
    with pytest.raises(StringDecodeError) as numpy_path:
        D.decode_utf32(u, what="v")
    assert str(ours.value) == str(numpy_path.value)


def test_with_nulls_keeps_the_buffers(path):
    arr = A.offsets_to_arrow(np.array([0, 1, 3, 3, 4], np.int64), b"abcd")
    sliced = pa.concat_arrays([pa.array([None], pa.large_string()), arr]).slice(1)
    for a in (arr, sliced):
        out = A.with_nulls(a, np.array([False, True, False, False]))
        assert out.to_pylist() == ["a", None, "", "d"]
        assert [b.address for b in out.buffers()[1:]] == [b.address for b in a.buffers()[1:]]
    out = A.with_nulls(A.with_nulls(arr, np.array([True, False, False, False])), np.array([0, 0, 0, 1], bool))
    assert out.to_pylist() == [None, "bc", "", None] and out.null_count == 2
    assert A.with_nulls(arr, None) is arr


# --------------------------------------------------------------------------------------------
# Arrow -> StringDType
# --------------------------------------------------------------------------------------------

maybe_text = st.lists(st.one_of(text, st.none()), max_size=30)


def _as_expected(values: list[Any], na: Any) -> list[Any]:
    return [na if v is None else v for v in values]


@SETTINGS
@given(maybe_text, st.sampled_from(["string", "large_string", "string_view"]), st.booleans(), st.integers(0, 3))
def test_arrow_to_stringdtype_round_trips(path, values, typ, dictionary, slice_at):
    arr = pa.array(values, getattr(pa, typ)())
    if dictionary:
        arr = arr.dictionary_encode()
    arr = arr.slice(min(slice_at, len(arr)))
    got = A.arrow_to_stringdtype(arr)
    want = arr.to_pylist()  # pyarrow's own values (the peer)
    assert isinstance(got.dtype, np.dtypes.StringDType) and got.shape == (len(want),)
    if None in want:
        assert got.dtype == D.NA_T
        assert [None if isinstance(x, float) and np.isnan(x) else x for x in got.tolist()] == want
    else:
        assert not hasattr(got.dtype, "na_object") and got.tolist() == want
    dt = np.dtypes.StringDType(na_object=None)
    assert A.arrow_to_stringdtype(arr, dtype=dt).tolist() == want


def test_arrow_to_stringdtype_chunked(path):
    ch = pa.chunked_array([pa.array(["a", None], pa.large_string()), pa.array([], pa.large_string()),
                           pa.array(["é", "中x"], pa.large_string())])
    got = A.arrow_to_stringdtype(ch, dtype=np.dtypes.StringDType(na_object=""))
    assert got.tolist() == ["a", "", "é", "中x"]
    assert A.arrow_to_stringdtype(pa.chunked_array([], pa.string())).shape == (0,)


def test_arrow_to_stringdtype_null_in_a_dictionary(path):
    """A null in the dictionary (not in the indices) is a null too."""
    arr = pa.DictionaryArray.from_arrays(pa.array([0, 1, 1], pa.int8()), pa.array(["é", None]))
    got = A.arrow_to_stringdtype(arr)
    assert got.dtype == D.NA_T and got[0] == "é" and all(np.isnan(x) for x in got[1:].tolist())


def test_arrow_to_stringdtype_nulls_need_an_na_object(path):
    with pytest.raises(ValueError, match="na_object.*dtype=None.*fill_null"):
        A.arrow_to_stringdtype(pa.array(["a", None]), dtype=np.dtypes.StringDType())
    assert A.arrow_to_stringdtype(pa.array(["a", "b"]), dtype=np.dtypes.StringDType()).tolist() == ["a", "b"]
    with pytest.raises(ValueError, match="got int64; cast the array first"):
        A.arrow_to_stringdtype(pa.array([1, 2]))
    with pytest.raises(ValueError, match="must be a numpy StringDType"):
        A.arrow_to_stringdtype(pa.array(["a"]), dtype=np.dtype(object))


def test_arrow_to_stringdtype_refuses_invalid_utf8(path):
    bad = pa.Array.from_buffers(pa.string(), 2, [None, pa.py_buffer(np.array([0, 1, 2], np.int32)),
                                                 pa.py_buffer(b"a\xff")])
    with pytest.raises(StringDecodeError, match="element 1 of the chunk"):
        A.arrow_to_stringdtype(bad)


@pytest.mark.parametrize("layout", ["fixed", "fixed-trailing", "utf32"])
def test_the_result_holds_its_values_not_the_rows_width(path: str, layout: str) -> None:
    """Short values in wide rows (|S64, <U32 of 8-character labels): the Arrow array holds memory
    for its values and offsets, not the n * width (or 4 bytes a code point) its kernel wrote into
    (a view of that allocation kept it alive as long as the array: 4.5x, 8.5x the values here).
    numpy's allocations are traced by tracemalloc, pyarrow's by its pool."""
    import gc
    import tracemalloc

    n = 10_000
    if layout == "utf32":
        rows: Any = np.array(["abcdefgh"] * n, dtype="<U32")
    else:
        rows = np.zeros((n, 64), np.uint8)
        rows[:, :8] = ord("a")

    def convert() -> pa.Array:
        if layout == "utf32":
            return A.utf32_to_arrow(rows)
        return A.fixed_to_arrow(rows, trailing=layout == "fixed-trailing")

    convert()  # (what the first call imports is not the array's)
    gc.collect()
    tracemalloc.start()
    try:
        pool = pa.total_allocated_bytes()
        arr = convert()
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] + pa.total_allocated_bytes() - pool
    finally:
        tracemalloc.stop()
    assert arr.to_pylist()[:2] == (["abcdefgh"] * 2 if layout == "utf32" else ["a" * 8] * 2)
    values = 8 * n + 8 * (n + 1)  # the data and int64 offsets
    assert held <= 1.3 * values, f"the array holds {held} bytes for {values} bytes of values and offsets"


@pytest.mark.parametrize("layout", ["fixed", "vlen", "utf32"])
def test_the_kernels_write_into_pyarrows_pool(monkeypatch: pytest.MonkeyPatch, layout: str) -> None:
    """The compiled kernels write a chunk's offsets and data into buffers of pyarrow's memory pool,
    which reuses freed pages (a fresh numpy array of a chunk's size faults in every page)."""
    import gc

    monkeypatch.delenv("XR_ZSTRINGS_NO_EXT", raising=False)
    assert KL.kernels() is not None, KL.kernels_unavailable_reason
    n = 10_000
    labels = [f"label-{i:06d}" for i in range(n)]
    fixed = np.array([s.encode() for s in labels], dtype="S16")
    frames = len(labels).to_bytes(4, "little") + b"".join(
        len(s).to_bytes(4, "little") + s.encode() for s in labels)

    def convert() -> pa.Array:
        if layout == "fixed":
            return A.fixed_to_arrow(fixed, trailing=False)
        if layout == "vlen":
            return A.vlen_frames_to_arrow(frames, n)
        return A.utf32_to_arrow(np.array(labels))

    convert()
    gc.collect()
    pool = pa.total_allocated_bytes()
    arr = convert()
    held = pa.total_allocated_bytes() - pool
    assert arr.to_pylist() == labels
    values = 12 * n + 8 * (n + 1)  # the data and int64 offsets
    assert held >= values, f"pyarrow's pool holds {held} bytes of the {values} bytes of values and offsets"
