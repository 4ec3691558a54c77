"""The compiled kernels (xr_zstrings.text._kernels) against the pure numpy/pyarrow fallback.

Every fast path is run twice on the same (hypothesis-generated) data: with the extension, and with
``XR_ZSTRINGS_NO_EXT=1`` forcing the fallback; results, errors (type and message) and warnings
must be identical.  Data include invalid UTF-8, NULs, truncated multibyte characters, empty
strings and strings over 64 KiB.  No timing here.
"""

from __future__ import annotations

import contextlib
import os
import struct
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xr_zstrings.text import dtypes as D
from xr_zstrings.text import fixed as S
from xr_zstrings.text import kernels as KL
from xr_zstrings.text import nc_char as C
from xr_zstrings.text import vlen as V

T = np.dtypes.StringDType()


@pytest.fixture(autouse=True, scope="module")
def _compiled_path() -> Iterator[None]:
    """These tests switch to the fallback themselves (``fallback()``) and compare, so they run the
    same in CI's fallback job, which sets XR_ZSTRINGS_NO_EXT=1 for every other test module."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("XR_ZSTRINGS_NO_EXT", raising=False)
        yield

POLICIES = ("strict", "drop", "replace")

# bytes that exercise every UTF-8 case: ASCII, NUL, continuation bytes, every lead class,
# the lead bytes with narrowed second-byte ranges, and invalid leads
_ATOMS = [b"a", b"Z", b"\x00", b"\x7f", b"\x80", b"\xbf", b"\xc0", b"\xc1", b"\xc2", b"\xdf",
          b"\xe0", b"\xed", b"\xef", b"\xf0", b"\xf4", b"\xf5", b"\xff", b"\x9f", b"\xa0", b"\x8f",
          b"\x90", "é".encode(), "€".encode(), "😀".encode(), "中".encode(), "é".encode()[:1],
          "€".encode()[:2], "😀".encode()[:3], "😀".encode()[:2]]
messy_bytes = st.lists(st.sampled_from(_ATOMS), max_size=24).map(b"".join)
mostly_valid = st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30).map(lambda s: s.encode()),
    messy_bytes,
)
text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
text_no_nul = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                      max_size=40)


@contextlib.contextmanager
def fallback() -> Iterator[None]:
    old = os.environ.get("XR_ZSTRINGS_NO_EXT")
    os.environ["XR_ZSTRINGS_NO_EXT"] = "1"
    try:
        yield
    finally:
        if old is None:
            del os.environ["XR_ZSTRINGS_NO_EXT"]
        else:
            os.environ["XR_ZSTRINGS_NO_EXT"] = old


def outcome(fn: Callable[[], Any]) -> tuple[str, Any, list[str]]:
    """("ok", value as comparable data, warnings) or ("error", (type, message), warnings)."""
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        try:
            v = fn()
        except Exception as e:  # compared, not swallowed
            return "error", (type(e).__name__, str(e)), [str(x.message) for x in w]
    if isinstance(v, np.ndarray):
        v = (v.dtype.str if v.dtype.kind != "T" else "T", v.shape,
             [x for x in v.reshape(-1).tolist()] if v.dtype.kind in "TOU" else v.tobytes())
    return "ok", v, [f"{type(x.message).__name__}: {x.message}" for x in w]


def same(fn: Callable[[], Any]) -> tuple[str, Any, list[str]]:
    """Run fn with the kernels and with the fallback; assert identical outcomes."""
    assert KL.kernels() is not None
    fast = outcome(fn)
    with fallback():
        assert KL.kernels() is None
        slow = outcome(fn)
    assert fast == slow
    return fast


# --------------------------------------------------------------------------------------------
# the switch itself
# --------------------------------------------------------------------------------------------


def test_extension_is_built():
    """`pip install .` builds xr_zstrings.text._kernels (gcc is available wherever the tests run; the
    other tests here need it too: without a compiler they fail, and this one names the cause)."""
    assert KL.kernels() is not None, KL.kernels_unavailable_reason
    assert hasattr(KL.kernels(), "fixed_to_T")


def test_env_var_forces_fallback():
    with fallback():
        assert KL.kernels() is None


def test_missing_extension_means_fallback(monkeypatch):
    """An install without a C compiler (the extension failed to build) runs the fallback."""
    monkeypatch.setattr(KL, "_kernels_mod", False)  # as if `from . import _kernels` had failed
    assert KL.kernels() is None
    raw = np.array([b"ok\xc3\xa9", b"a\xc3\xa9\xc3", b"x\x00\xff"], dtype="S5")
    assert S.decode_fixed_utf8(raw).tolist() == ["oké", "aé", "x"]
    assert V.decode_vlen_utf8_to_numpy(_vlen_bytes([b"a", "é".encode()])).tolist() == ["a", "é"]
    assert S.encode_fixed_utf8(np.array(["é", "ab"], dtype=object), None).tolist() == [b"\xc3\xa9", b"ab"]


# --------------------------------------------------------------------------------------------
# fixed width (NC_STRING |Sn) and NC_CHAR
# --------------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mostly_valid, min_size=0, max_size=40), st.integers(1, 70), st.sampled_from(POLICIES),
       st.sampled_from(["T", "O", "U"]))
def test_decode_fixed_same_as_fallback(values, width, policy, sd):
    raw = np.array([v[:width] for v in values], dtype=f"S{width}")
    same(lambda: S.decode_fixed_utf8(raw, utf8_errors=policy, string_dtype=sd, what="v"))


@settings(max_examples=100, deadline=None)
@given(st.lists(mostly_valid, min_size=1, max_size=30), st.integers(1, 20), st.sampled_from(POLICIES))
def test_decode_fixed_2d_and_uint8_input(values, width, policy):
    raw = np.array([v[:width] for v in values] * 2, dtype=f"S{width}").reshape(2, -1)
    same(lambda: S.decode_fixed_utf8(raw, utf8_errors=policy, what="v"))
    u8 = raw.view(np.uint8).reshape(2, -1, width)
    same(lambda: S.decode_fixed_utf8(u8, utf8_errors=policy))


@settings(max_examples=150, deadline=None)
@given(st.lists(mostly_valid, min_size=0, max_size=30), st.integers(0, 20), st.sampled_from(POLICIES))
def test_decode_char_same_as_fallback(values, nchar, policy):
    w = max(nchar, 1)
    raw = np.array([v[:nchar] for v in values], dtype=f"S{w}")
    chars = raw.view("S1").reshape(len(values), w)[:, :nchar]
    same(lambda: C.decode_char_array(chars, utf8_errors=policy))


def test_decode_fixed_large_and_far_errors():
    long = ("é" * 40000).encode()  # 80,000 bytes: over 64 KiB
    raw = np.array([long, b"", long[:-1], b"ok\x00junk\xff"], dtype="S80000")
    for policy in POLICIES:
        out = same(lambda policy=policy: S.decode_fixed_utf8(raw, utf8_errors=policy))
        assert out[0] in ("ok", "error")
    raw = np.array([b"abc\xc3\xa9"] * 20000, dtype="S8")
    raw[15001] = b"x\xffy"
    kind, (_, msg), _ = same(lambda: S.decode_fixed_utf8(raw, what="var"))
    assert kind == "error" and "[15001]" in msg
    out = same(lambda: S.decode_fixed_utf8(raw, utf8_errors="replace"))
    assert out[1][2][15001] == "x\ufffdy"


# --------------------------------------------------------------------------------------------
# variable length: numcodecs vlen-utf8, offsets layouts
# --------------------------------------------------------------------------------------------


def _vlen_bytes(items: list[bytes]) -> bytes:
    return struct.pack("<I", len(items)) + b"".join(struct.pack("<I", len(b)) + b for b in items)


@settings(max_examples=300, deadline=None)
@given(st.lists(mostly_valid, max_size=40), st.sampled_from(POLICIES), st.sampled_from(["T", "O", "U"]))
def test_vlen_utf8_same_as_fallback(items, policy, sd):
    buf = _vlen_bytes(items)
    same(lambda: V.decode_vlen_utf8_to_numpy(buf, len(items), utf8_errors=policy, string_dtype=sd, what="c"))


@settings(max_examples=200, deadline=None)
@given(st.lists(mostly_valid, max_size=30), st.integers(0, 5), st.sampled_from(POLICIES),
       st.sampled_from(["<i4", "<i8", "<u4", "<u8"]))
def test_offsets_same_as_fallback(items, base, policy, odt):
    data = b"#" * base + b"".join(items)
    off = np.cumsum([base] + [len(b) for b in items]).astype(odt)
    chunk = V.VlenChunk(off, np.frombuffer(data, np.uint8))
    same(lambda: V.vlen_to_numpy(chunk, utf8_errors=policy, what="c"))
    same(lambda: V.vlen_to_numpy(chunk, utf8_errors=policy, string_dtype="U"))


@pytest.mark.parametrize(
    "buf",
    [b"", b"\x01\x00", struct.pack("<I", 3) + b"\x00" * 4, struct.pack("<II", 1, 10) + b"abc",
     _vlen_bytes([b"a"]) + b"junk", struct.pack("<I", 2**32 - 1) + b"\x00" * 6],
)
def test_vlen_malformed_same_errors(buf):
    kind, (etype, _), _ = same(lambda: V.decode_vlen_utf8_to_numpy(buf, what="c"))
    assert kind == "error" and etype == "ChunkError"
    same(lambda: V.decode_vlen_utf8_to_numpy(buf, 1, what="c"))


def test_vlen_long_strings_and_nuls():
    items = [("😀" * 20000).encode(), b"", b"a\x00b\x00", b"\x00", ("x" * 70000).encode() + b"\xe2\x82"]
    for policy in POLICIES:
        same(lambda policy=policy: V.decode_vlen_utf8_to_numpy(_vlen_bytes(items), utf8_errors=policy))


def test_into_strided_views_and_sel():
    K = KL.kernels()
    raw = np.array([b"a", b"bb", "é".encode(), b"d" * 20], dtype="S20")
    out = np.empty((2, 4), T)
    view = out[:, ::-2]  # 2 x 2, negative strides
    bad = K.fixed_to_T(raw.tobytes(), 20, view, np.array([3, 2, 1, 0], np.int64), 0)
    assert bad.size == 0 and view.tolist() == [["d" * 20, "é"], ["bb", "a"]]
    with pytest.raises(IndexError):
        K.fixed_to_T(raw.tobytes(), 20, view, np.array([4, 0, 0, 0], np.int64), 0)
    with pytest.raises(TypeError):
        K.fixed_to_T(raw.tobytes(), 20, np.empty(4, object), None, 0)
    with pytest.raises(ValueError):
        K.offsets_to_T(b"abc", np.array([0, 2, 1], np.int64), np.empty(2, T), None, 0)
    assert K.vlen_utf8_to_T(b"\x01\x00\x00\x00", 1, False, np.empty(1, T), None, 0) is None


# --------------------------------------------------------------------------------------------
# encoding
# --------------------------------------------------------------------------------------------

enc_values = st.lists(st.one_of(text_no_nul, text, st.just(""), st.just("é" * 5),
                                st.just("a\udcff"), st.none(), st.just(b"x")), max_size=25)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(enc_values, st.one_of(st.none(), st.integers(0, 50)), st.sampled_from(["error", "truncate", "widen"]),
       st.sampled_from(["O", "T", "U", "list"]))
def test_encode_fixed_same_as_fallback(values, width, on_overflow, container):
    if container == "T":
        try:
            vals: Any = np.array(values, dtype=np.dtypes.StringDType(coerce=False))
        except (TypeError, ValueError, UnicodeError):
            vals = np.array(values, dtype=object)
    elif container == "U":
        try:
            vals = np.array([v for v in values if isinstance(v, str)], dtype="U")
        except (TypeError, ValueError):
            return
    elif container == "list":
        vals = list(values)
    else:
        vals = np.array(values, dtype=object)
    same(lambda: S.encode_fixed_utf8(vals, width, on_overflow=on_overflow, what="v"))
    same(lambda: C.encode_char_array(vals, width, on_overflow=on_overflow, what="v"))


def test_encode_long_and_2d():
    vals = np.array([["é" * 40000, ""], ["😀abc", "x" * 70000]], dtype=object)
    for w in (None, 5, 1):
        for mode in ("error", "truncate", "widen"):
            same(lambda w=w, mode=mode: S.encode_fixed_utf8(vals, w, on_overflow=mode))
            same(lambda w=w, mode=mode: S.encode_fixed_utf8(vals.astype(T), w, on_overflow=mode))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(text, st.none()), max_size=30), st.sampled_from(["O", "T"]))
def test_encode_vlen_same_as_fallback_and_numcodecs(values, container):
    import numcodecs

    arr = np.array(values, dtype=object)
    if container == "T":
        if any(v is None for v in values):
            return
        arr = arr.astype(T)
    kind, fast, _ = same(lambda: V.encode_vlen_utf8_chunk(arr))
    assert kind == "ok"
    assert fast == bytes(numcodecs.VLenUTF8().encode(np.array(values, dtype=object)))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(text, st.none(), st.binary(max_size=3)), max_size=30),
       st.sampled_from(["O", "T", "U"]), st.sampled_from(["str", "bytes"]))
def test_values_to_vlen_same_as_fallback(values, container, kind):
    """The compiled packer (utf8_pack on objects or StringDType) against pyarrow's conversion:
    same offsets and data, or the same error (None, bytes among str, str among bytes)."""
    arr = np.array(values, dtype=object)
    if container != "O":
        if not all(isinstance(v, str) for v in values):
            return
        arr = np.array(values, dtype=T if container == "T" else "U")

    def pack() -> Any:
        c = V.values_to_vlen(arr, kind=kind, what="v")
        return c.offsets.tolist(), bytes(c.data[int(c.offsets[0]) : int(c.offsets[-1])])

    same(pack)


@settings(max_examples=200, deadline=None)
@given(st.lists(text, max_size=30), st.integers(0, 5))
def test_vlen_utf8_from_packed_same_as_numcodecs(values, base):
    """A VlenChunk (offsets need not start at 0) -> vlen-utf8 bytes, equal to numcodecs'."""
    import numcodecs

    raw = b"\xff" * base + "".join(values).encode()
    lens = [len(v.encode()) for v in values]
    off = (np.concatenate([[0], np.cumsum(lens)]) + base).astype(np.int64)
    chunk = V.VlenChunk(off, np.frombuffer(raw, np.uint8))
    kind, fast, _ = same(lambda: V.encode_vlen_utf8_chunk(chunk))
    assert kind == "ok"
    assert fast == bytes(numcodecs.VLenUTF8().encode(np.array(values, dtype=object)))


@settings(max_examples=200, deadline=None)
@given(st.lists(text, max_size=30))
def test_T_to_objects_same_as_numpy(values):
    """The object-output conversion (ASCII fast path) equals numpy's astype(object)."""
    t = np.array(values, dtype=T)
    got = KL.kernels().T_to_objects(t)
    assert got.dtype == object and got.tolist() == t.astype(object).tolist() == values
    assert all(type(v) is str for v in got.tolist())
    two = t[: len(values) // 2 * 2].reshape(-1, 2) if len(values) >= 2 else t.reshape(-1, 1)
    assert KL.kernels().T_to_objects(np.ascontiguousarray(two)).shape == two.shape
    with pytest.raises(ValueError, match="NA"):
        KL.kernels().T_to_objects(np.array(["x", None], dtype=np.dtypes.StringDType(na_object=None)))


@settings(max_examples=150, deadline=None)
@given(st.lists(text_no_nul, max_size=30), st.sampled_from(["O", "T", "U"]))
def test_utf8_lengths_same_as_fallback(values, container):
    arr = np.array(values, dtype={"O": object, "T": T, "U": str}[container])
    kind, got, _ = same(lambda: S.utf8_lengths(arr).tolist())
    assert kind == "ok" and got == [len(v.encode()) for v in values]


def test_utf8_pack_stringdtype_statuses():
    """utf8_pack on StringDType: NUL reported unless allowed, NA left to the Python path."""
    K = KL.kernels()
    t = np.array(["a", "b\x00c", ""], dtype=T)
    status, _, off, data = K.utf8_pack(t, True)
    assert (status, off.tolist(), data) == (0, [0, 1, 4, 4], b"ab\x00c")
    assert K.utf8_pack(t)[:2] == (1, 1)
    na = np.array(["x", None], dtype=np.dtypes.StringDType(na_object=None))
    assert K.utf8_pack(na)[:2] == (2, 1)


@pytest.mark.parametrize("container", ["O", "T"])
def test_fill_fixed_bounded_zeroed_and_counts(container):
    """zeroed=True (the padding is not written) gives the same rows as zeroed=False; values over
    the width are cut at a character boundary and counted, with the longest length."""
    K = KL.kernels()
    vals = np.array(["", "abc", "é😀", "x" * 9, "aé"], dtype=object)
    vals = vals if container == "O" else vals.astype(T)
    rows = []
    for zeroed in (False, True):
        out = np.zeros(5 * 6, np.uint8) if zeroed else np.full(5 * 6, 0xAA, np.uint8)
        assert K.fill_fixed_bounded(vals, 6, out, zeroed) == (0, -1, 1, 9)  # "x" * 9 is cut
        rows.append(out.tobytes())
    assert rows[0] == rows[1] == (b"\0" * 6 + b"abc\0\0\0" + "é😀".encode() + b"x" * 6
                                  + "aé".encode() + b"\0\0\0")
    out = np.zeros(5 * 2, np.uint8)
    assert K.fill_fixed_bounded(vals, 2, out)[2:] == (4, 9)  # all but "" are over; "é😀" keeps "é"
    assert out.tobytes()[4:6] == "é".encode()
    assert K.fill_fixed_bounded(np.array(["a", "b\x00"], dtype=object), 4, bytearray(8))[:2] == (1, 1)
    assert K.fill_fixed_bounded(np.array(["a", None], dtype=object), 4, bytearray(8))[:2] == (2, 1)


# --------------------------------------------------------------------------------------------
# through the reader: chunk by chunk into the result, on threads
# --------------------------------------------------------------------------------------------


def _open_values(path: Any, **kw: Any) -> Callable[[], Any]:
    def read() -> Any:
        ds = xr.open_dataset(path, engine="zstrings", **kw)
        return {k: (ds[k].dtype.str if ds[k].dtype.kind != "T" else "T", ds[k].values.tolist(),
                    ds[k].isel({ds[k].dims[0]: slice(3, None, 7)}).values.tolist() if ds[k].ndim else None,
                    ds[k][..., 1:2].values.tolist() if ds[k].ndim else None)
                for k in ds.data_vars}

    return read


@pytest.mark.parametrize("policy", POLICIES)
def test_reader_nczarr_chunks_same_as_fallback(tmp_path, policy):
    from xr_zstrings.write.nczarr import to_nczarr

    rng = np.random.default_rng(1)
    words = ["", "a", "é", "😀x", "long string " * 5, "中文", "z" * 15, "y" * 16]
    s1 = np.array(words, dtype=object)[rng.integers(0, len(words), 1003)]
    s2 = np.array(words, dtype=object)[rng.integers(0, len(words), (37, 11))]
    ds = xr.Dataset({"s1": ("x", s1), "s2": (("y", "z"), s2),
                     "c": ("x", s1.astype(T))})
    ds["s1"].encoding["chunks"] = (100,)
    ds["s2"].encoding["chunks"] = (5, 4)
    ds["c"].encoding.update(chunks=(64,), dtype=np.dtype("S1"))
    path = tmp_path / "s.zarr"
    to_nczarr(ds, path)
    for sd in ("T", "O", "U"):  # object and U results are converted from the kernels' StringDType
        out = same(_open_values(path, utf8_errors=policy, string_dtype=sd))
        assert out[0] == "ok" and out[1]["s1"][1] == s1.tolist() and out[1]["s2"][1] == s2.tolist()
        assert out[1]["c"][1] == s1.tolist() and out[1]["s1"][0] == {"T": "T", "O": "|O", "U": "<U60"}[sd]
    # corrupt one value of one chunk: the same error (or replacement) either way
    chunk = path / "s1" / "3"
    if chunk.exists():
        import numcodecs

        meta = __import__("json").loads((path / "s1" / ".zarray").read_text())
        data = bytearray(chunk.read_bytes())
        if meta.get("compressor") is None:
            w = int(meta["dtype"][2:])
            data[5 * w : 5 * w + 3] = b"x\xff\xfe"
            chunk.write_bytes(bytes(data))
            kind, val, _ = same(_open_values(path, utf8_errors=policy))
            assert kind == ("ok" if policy == "replace" else "error")
            if kind == "error":
                assert "[305]" in val[1]
        del numcodecs


def test_reader_missing_chunks_and_threads_under_tracemalloc(tmp_path):
    """Missing chunks read as the fill value; replacement and fill happen on the decode threads
    without deadlocking when tracemalloc's allocation hook needs the GIL."""
    import tracemalloc

    from xr_zstrings.write.nczarr import to_nczarr

    vals = np.array(["é" * (i % 30) + "x" for i in range(5000)], dtype=object)
    ds = xr.Dataset({"s": ("x", vals)})
    ds["s"].encoding["chunks"] = (100,)
    path = tmp_path / "m.zarr"
    to_nczarr(ds, path)
    for i in (3, 17, 49):
        (path / "s" / str(i)).unlink()
    data = bytearray((path / "s" / "5").read_bytes())
    data[0] = 0xFF
    (path / "s" / "5").write_bytes(bytes(data))
    tracemalloc.start()
    try:
        out = same(_open_values(path, utf8_errors="replace"))
    finally:
        tracemalloc.stop()
    got = out[1]["s"][1]
    assert got[350] == "" and got[1799] == "" and got[4999] == ""
    assert got[500].startswith("\ufffd") and got[0] == "x"


@pytest.mark.parametrize("layout", ["vlen-utf8", "zarrs.vlen", "arrow", "arrow-large"])
def test_reader_v3_same_as_fallback(tmp_path, layout):
    from xr_zstrings.write.zarr3 import to_zarr_v3

    rng = np.random.default_rng(2)
    words = ["", "a", "é", "😀x", "long string " * 5, "中文", "a\x00b"]
    s1 = np.array(words, dtype=object)[rng.integers(0, len(words), 501)]
    s2 = np.array(words, dtype=object)[rng.integers(0, len(words), (23, 9))]
    ds = xr.Dataset({"s1": ("x", s1), "s2": (("y", "z"), s2)})
    ds["s1"].encoding["chunks"] = (50,)
    ds["s2"].encoding["chunks"] = (4, 5)
    path = tmp_path / "v3.zarr"
    to_zarr_v3(ds, path, layout=layout)  # type: ignore[arg-type]  # a layout name from parametrize
    for sd in ("T", "O", "U"):
        out = same(_open_values(path, string_dtype=sd))
        assert out[0] == "ok" and out[1]["s1"][1] == s1.tolist() and out[1]["s2"][1] == s2.tolist()


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("compressor", [None, "blosc"])
def test_reader_v2_vlen_same_as_fallback(tmp_path, order, compressor):
    """Zarr v2 |O + vlen-utf8 (xarray's and zarr-python's v2 str layout) through the kernels:
    C and F order, partial edge chunks, missing chunks (fill value), selections."""
    import numcodecs
    import zarr

    rng = np.random.default_rng(3)
    words = ["", "a", "é", "😀x", "long string " * 5, "中文", "a\x00b"]
    s1 = np.array(words, dtype=object)[rng.integers(0, len(words), 501)]
    s2 = np.array(words, dtype=object)[rng.integers(0, len(words), (23, 9))]
    path = tmp_path / "v2.zarr"
    g = zarr.open_group(path, mode="w", zarr_format=2)
    comp = numcodecs.Blosc() if compressor else None
    a1 = g.create_array("s1", shape=s1.shape, chunks=(50,), dtype=str, compressors=comp, order=order,
                        fill_value="")
    a1[:] = s1
    a1.attrs["_ARRAY_DIMENSIONS"] = ["x"]
    a2 = g.create_array("s2", shape=s2.shape, chunks=(4, 5), dtype=str, compressors=comp, order=order,
                        fill_value="-")
    a2[:] = s2
    a2.attrs["_ARRAY_DIMENSIONS"] = ["y", "z"]
    (path / "s2" / "0.0").unlink()  # a missing chunk reads as the fill value
    s2[:4, :5] = "-"
    for sd in ("T", "O", "U"):  # the fill value as a value (zarr-python's reading)
        out = same(_open_values(path, string_dtype=sd, use_zarr_fill_value_as_mask=False))
        assert out[0] == "ok" and out[1]["s1"][1] == s1.tolist() and out[1]["s2"][1] == s2.tolist()
    # the fill value masking (engine="zarr"'s reading, the default for Zarr v2): the same on both paths
    for sd in ("T", "O"):
        out = same(_open_values(path, string_dtype=sd))
        missing = [[None if isinstance(v, float) else v for v in row] for row in out[1]["s2"][1]]
        assert out[0] == "ok" and missing == [[None if v == "-" else v for v in row] for row in s2.tolist()]


def test_reader_v2_vlen_invalid_utf8_is_an_error_on_both_paths(tmp_path):
    import numcodecs
    import zarr

    path = tmp_path / "bad.zarr"
    g = zarr.open_group(path, mode="w", zarr_format=2)
    a = g.create_array("s", shape=(2,), chunks=(2,), dtype=str, compressors=None, fill_value="")
    a[:] = np.array(["ok", "xx"], dtype=object)
    a.attrs["_ARRAY_DIMENSIONS"] = ["x"]
    good = numcodecs.VLenUTF8().encode(np.array(["ok", "xx"], dtype=object))
    (path / "s" / "0").write_bytes(good[:-2] + b"\xff\xfe")
    kind, err, _ = same(lambda: xr.open_dataset(path, engine="zstrings")["s"].values)
    assert kind == "error" and err[0] == "ChunkError" and "s/0" in err[1] and "element 1" in err[1], err
    # utf8_errors applies to variable-length chunks too: "replace" as for fixed-width strings
    kind, got, _ = same(lambda: xr.open_dataset(path, engine="zstrings", utf8_errors="replace")["s"].values.tolist())
    assert kind == "ok" and got == ["ok", "\ufffd\ufffd"]


@pytest.mark.parametrize("layout", ["vlen-utf8", "zarrs.vlen", "arrow"])
def test_reader_v3_invalid_utf8_follows_utf8_errors(tmp_path, layout):
    """A corrupt value in a v3 variable-length chunk: an error by default, U+FFFD with "replace",
    the same on both paths."""
    from xr_zstrings.write.zarr3 import to_zarr_v3

    path = tmp_path / "bad.zarr"
    to_zarr_v3(xr.Dataset({"s": ("x", np.array(["ok", "xy"], dtype=object))}), path, layout=layout,
               compressors=[], consolidated=False)
    chunk = path / "s" / "c" / "0"
    data = chunk.read_bytes()
    i = data.rindex(b"xy")
    chunk.write_bytes(data[:i] + b"\xff\xfe" + data[i + 2 :])
    kind, err, _ = same(lambda: xr.open_dataset(path, engine="zstrings")["s"].values.tolist())
    assert kind == "error" and "c/0" in err[1], err
    kind, got, _ = same(lambda: xr.open_dataset(path, engine="zstrings", utf8_errors="replace")["s"].values.tolist())
    assert kind == "ok" and got == ["ok", "\ufffd\ufffd"]


@pytest.mark.parametrize("compressors", [None, "zstd"])
def test_reader_v3_sharded_same_as_fallback(tmp_path, compressors):
    """zarr-python's sharded string arrays: inner chunks decoded by the kernels straight into the
    result (partial edge shards, inner chunks never written, selections), equal to the fallback
    and to zarr-python."""
    import zarr

    rng = np.random.default_rng(4)
    words = ["", "a", "é", "😀x", "long string " * 5, "中文", "a\x00b"]
    s1 = np.array(words, dtype=object)[rng.integers(0, len(words), 503)]
    s1[100:200] = ""  # whole inner chunks of the fill value: zarr-python leaves them out of the shard
    s2 = np.array(words, dtype=object)[rng.integers(0, len(words), (23, 9))]
    path = tmp_path / "sh.zarr"
    g = zarr.open_group(path, mode="w", zarr_format=3)
    comp = zarr.codecs.ZstdCodec() if compressors else None
    a1 = g.create_array("s1", shape=s1.shape, chunks=(25,), shards=(100,), dtype=str, fill_value="",
                        compressors=comp, dimension_names=["x"])
    a1[:] = s1
    a2 = g.create_array("s2", shape=s2.shape, chunks=(2, 3), shards=(4, 6), dtype=str, fill_value="",
                        compressors=comp, dimension_names=["y", "z"])
    a2[:] = s2
    assert list(zarr.open_array(path / "s1")[:]) == s1.tolist()
    for sd in ("T", "O"):
        out = same(_open_values(path, string_dtype=sd))
        assert out[0] == "ok" and out[1]["s1"][1] == s1.tolist() and out[1]["s2"][1] == s2.tolist()
    got = xr.open_dataset(path, engine="zstrings")
    assert got["s2"].values[5:17:3, [0, 8, 4]].tolist() == s2[5:17:3][:, [0, 8, 4]].tolist()


# --- memory-safety regressions: malformed arguments to every kernel entry point -------------


def test_fixed_kernel_rejects_bad_widths_and_buffers():
    """N * width wrapping to the buffer's size (or a width <= 0) must not write past the buffer."""
    K = KL.kernels()
    vals = np.array(["x"] * 4, dtype=object)
    huge = 1 << 62  # 4 * 2**62 wraps to 0
    for width, buf in ((huge, bytearray(0)), (0, bytearray(0)), (-1, bytearray(4)), (2, bytearray(7))):
        with pytest.raises(ValueError):
            K.fill_fixed_bounded(vals, width, buf)


def test_vlen_from_offsets_rejects_bad_offsets():
    K = KL.kernels()
    for off in ([0, 5], [2, 1], [-1, 0], [0, 1, 0]):
        with pytest.raises(ValueError):
            K.vlen_utf8_from_offsets(b"abc", np.array(off, np.int64))
    with pytest.raises(TypeError):
        K.vlen_utf8_from_offsets(b"abc", np.array([0, 1], np.int32))


def test_kernels_reject_unaligned_index_arrays():
    K = KL.kernels()
    raw = np.zeros(8 * 3 + 1, np.uint8)
    off = raw[1:].view(np.int64)  # misaligned int64 offsets
    assert not off.flags.aligned
    out = np.empty(2, dtype=np.dtypes.StringDType())
    with pytest.raises(TypeError):
        K.offsets_to_T(b"", off, out, None, 0)
    with pytest.raises(TypeError):
        K.vlen_utf8_from_offsets(b"", off)
    sel = raw[1:17].view(np.int64)
    with pytest.raises(TypeError):
        K.fixed_to_T(b"ab", 1, out, sel, 0)


def test_vlen_into_unaligned_offsets_same_as_aligned():
    """Unaligned (but otherwise valid) offsets are copied before they reach the kernel."""
    raw = np.zeros(8 * 3 + 1, np.uint8)
    off = raw[1:].view(np.int64)
    off[:] = [0, 2, 5]
    chunk = V.VlenChunk(off, np.frombuffer(b"abcde", np.uint8))
    out = np.empty(2, dtype=np.dtypes.StringDType())
    if V.vlen_into(chunk, out):
        assert out.tolist() == ["ab", "cde"]


def test_pack_at_snapshots_its_values():
    K = KL.kernels()
    out = np.empty((2, 3), dtype=np.dtypes.StringDType())[:, ::2]
    K.pack_at(out, np.array([0, 3], np.intp), [b"a", b"b"])
    assert out.tolist() == [["a", ""], ["", "b"]]
    with pytest.raises(IndexError):
        K.pack_at(out, np.array([4], np.intp), [b"a"])
    with pytest.raises(ValueError):
        K.pack_at(out, np.array([0], np.intp), [b"a", b"b"])
    with pytest.raises(TypeError):
        K.pack_at(out, None, ["a"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.binary(max_size=40),
    offs=st.lists(st.integers(-(2**40), 2**40) | st.integers(-3, 45), max_size=8),
    odt=st.sampled_from(["<i4", "<i8", "<u4", "<u8"]),
    width=st.integers(-2, 9),
    n_expected=st.integers(-1, 6),
    policy=st.integers(0, 2),
    sel=st.none() | st.lists(st.integers(-2, 8), max_size=6),
    strided=st.booleans(),
)
def test_kernels_fuzz_malformed_inputs(data, offs, odt, width, n_expected, policy, sel, strided):
    """Random bytes, offsets, counts and selections: a clear exception or a result, never a crash
    (run under ASan/UBSan to catch out-of-bounds reads and writes)."""
    K = KL.kernels()
    T = np.dtypes.StringDType()
    m = len(sel) if sel is not None else max(len(offs) - 1, 0)
    out = np.empty(2 * m, dtype=T)[::2] if strided else np.empty(m, dtype=T)
    s = None if sel is None else np.array(sel, np.int64)
    errors = (ValueError, TypeError, IndexError, OverflowError)
    try:
        o = np.array(offs, dtype=np.int64).astype(odt) if offs else np.zeros(0, odt)
    except OverflowError:
        o = np.zeros(0, odt)
    for call in (
        lambda: K.offsets_to_T(data, o, out, s, policy),
        lambda: K.fixed_to_T(data, width, out, s, policy),
        lambda: K.vlen_utf8_to_T(data, n_expected, bool(policy & 1), out, s, policy),
        lambda: K.vlen_utf8_from_offsets(data, o.astype(np.int64)),
    ):
        with contextlib.suppress(*errors):
            call()
    vals = np.array([data.decode("utf-8", "replace")] * 3, dtype=object)
    for v in (vals, vals.astype(T)):
        with contextlib.suppress(*errors):
            K.utf8_pack(v, bool(policy & 1))
        with contextlib.suppress(*errors):
            K.T_to_objects(v)
        with contextlib.suppress(*errors):
            K.fill_fixed_bounded(v, width, bytearray(3 * max(width, 0)))
        with contextlib.suppress(*errors):
            K.utf8_scan(v)
    with contextlib.suppress(*errors):
        K.pack_at(out, None if s is None else s.astype(np.intp), [data] if s is None else [data] * len(s))


# --------------------------------------------------------------------------------------------
# every change a utf8_errors policy makes is warned about, the same way on both paths
# --------------------------------------------------------------------------------------------


def _cut_store(tmp_path: Any, layout: str) -> tuple[Any, str]:
    """A store of 12 values in 3 chunks of 4 whose values 'xy' (one per chunk, elements 1, 5, 9) are
    overwritten in place by b'x\\xc3' -- a character cut in half, as netcdf-c's byte truncation
    leaves it -- and the name the warning gives the first one."""
    import zarr

    vals = np.array(["ok", "xy", "é", "ab"] * 3, dtype=object)
    path = tmp_path / f"{layout}.zarr"
    if layout in ("nczarr", "nc_char"):
        from xr_zstrings.write.nczarr import to_nczarr

        ds = xr.Dataset({"s": ("x", vals)})
        ds["s"].encoding["chunks"] = (4,)
        if layout == "nc_char":
            ds["s"].encoding["dtype"] = np.dtype("S1")
        to_nczarr(ds, path)
        first = "value [1]"
    elif layout == "zarr-v2-vlen":
        g = zarr.open_group(path, mode="w", zarr_format=2)
        a = g.create_array("s", shape=vals.shape, chunks=(4,), dtype=str, compressors=None, fill_value="")
        a[:] = vals
        a.attrs["_ARRAY_DIMENSIONS"] = ["x"]
        first = "chunk "
    elif layout == "sharded":
        g = zarr.open_group(path, mode="w", zarr_format=3)
        a = g.create_array("s", shape=vals.shape, chunks=(2,), shards=(4,), dtype=str, compressors=None,
                           fill_value="", dimension_names=["x"])
        a[:] = vals
        first = "chunk "
    else:
        from xr_zstrings.write.zarr3 import to_zarr_v3

        ds = xr.Dataset({"s": ("x", vals)})
        ds["s"].encoding["chunks"] = (4,)
        to_zarr_v3(ds, path, layout=layout, compressors=[], consolidated=False)  # type: ignore[arg-type]  # a layout name from parametrize
        first = "chunk "
    n = 0
    for f in sorted((path / "s").rglob("*")):
        if f.is_file() and not f.name.startswith((".z", "zarr.json")):
            data = f.read_bytes()
            if b"xy" in data:
                f.write_bytes(data.replace(b"xy", b"x\xc3"))
                n += data.count(b"xy")
    assert n == 3
    return path, first


@pytest.mark.parametrize("layout", ["nczarr", "nc_char", "zarr-v2-vlen", "vlen-utf8", "zarrs.vlen", "arrow",
                                    "sharded"])
def test_policy_changes_warn_with_count_and_first_value(tmp_path, layout):
    """utf8_errors="drop" (the default) drops the cut character and says so: one
    StringDecodeWarning per read, with the count over all chunks and the first value; "replace"
    likewise; "strict" raises. Values, errors and warnings are the same without the kernels."""
    path, first = _cut_store(tmp_path, layout)
    expect = ["ok", "x", "é", "ab"] * 3
    kind, got, warned = same(lambda: xr.open_dataset(path, engine="zstrings")["s"].values.tolist())
    assert kind == "ok" and got == expect
    assert len(warned) == 1 and warned[0].startswith("StringDecodeWarning"), warned
    assert "utf8_errors='drop' removed an incomplete UTF-8 character from the end of 3 value(s)" in warned[0]
    assert f"the first is {first}" in warned[0] and "stored b'x\\xc3', read as 'x'" in warned[0], warned[0]
    if first == "chunk ":  # variable-length: the chunk and the element in it
        assert any(f"{c}, element 1:" in warned[0] for c in ("'s/0'", "'s/c/0'", "'s/c/0', inner chunk (0,)")), warned[0]
    assert "variable '/s'" in warned[0]
    kind, got, warned = same(lambda: xr.open_dataset(path, engine="zstrings", utf8_errors="replace")["s"].values.tolist())
    assert kind == "ok" and got == ["ok", "x\ufffd", "é", "ab"] * 3
    assert len(warned) == 1 and "utf8_errors='replace' put U+FFFD for invalid UTF-8 into 3 value(s)" in warned[0]
    assert f"the first is {first}" in warned[0]
    kind, err, warned = same(lambda: xr.open_dataset(path, engine="zstrings", utf8_errors="strict")["s"].values)
    assert kind == "error" and err[0] in ("StringDecodeError", "ChunkError") and not warned
    # a selection warns about what it read only: values 8..11 hold one cut value
    kind, got, warned = same(lambda: xr.open_dataset(path, engine="zstrings")["s"][8:].values.tolist())
    assert got == expect[8:] and len(warned) == 1 and "end of 1 value(s)" in warned[0]
    # selecting valid values: fixed-width layouts decode the selected values only (no warning); a
    # variable-length chunk is decoded whole (an invalid value anywhere in it is an error), so the
    # changes in chunks 0 and 1 are reported (of a shard, the inner chunks read: 4..5)
    kind, got, warned = same(lambda: xr.open_dataset(path, engine="zstrings")["s"][2:5].values.tolist())
    assert got == expect[2:5]
    if first == "chunk ":
        n = 1 if layout == "sharded" else 2
        assert len(warned) == 1 and f"end of {n} value(s)" in warned[0]
    else:
        assert warned == []


def test_policy_changes_on_dask_blocks_and_direct_calls(tmp_path):
    """With dask each block read warns about its own values; the public decoders warn per call."""
    path, _ = _cut_store(tmp_path, "nczarr")
    from xr_zstrings import StringDecodeWarning

    with pytest.warns(StringDecodeWarning) as rec:
        got = xr.open_dataset(path, engine="zstrings", chunks={})["s"].values.tolist()
    assert got == ["ok", "x", "é", "ab"] * 3
    msgs = [str(w.message) for w in rec if "utf8_errors" in str(w.message)]
    assert len(msgs) == 3 and all("end of 1 value(s)" in m for m in msgs)
    for fn in (lambda: S.decode_fixed_utf8(np.array([b"a\xc3", b"b", b"\xe2\x82"]), what="v"),
               lambda: V.decode_vlen_utf8_to_numpy(struct.pack("<II", 1, 2) + b"a\xc3", utf8_errors="drop", what="c")):
        kind, _, warned = same(fn)
        assert kind == "ok" and len(warned) == 1 and "removed an incomplete UTF-8 character" in warned[0]


# --------------------------------------------------------------------------------------------
# string_dtype="bytes" and "U" (which refuses values ending with NUL) on both paths
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["nczarr", "nc_char", "zarr-v2-vlen", "vlen-utf8", "zarrs.vlen", "arrow",
                                    "sharded"])
def test_bytes_and_u_same_as_fallback(tmp_path, layout):
    """The stored bytes (cut values included) and the "U" refusal of trailing NULs are the same
    with and without the kernels."""
    path, _ = _cut_store(tmp_path, layout)
    kind, got, warned = same(lambda: xr.open_dataset(path, engine="zstrings", string_dtype="bytes")["s"].values.tolist())
    assert kind == "ok" and warned == [] and got == [b"ok", b"x\xc3", "é".encode(), b"ab"] * 3
    kind, got, _ = same(lambda: xr.open_dataset(path, engine="zstrings", string_dtype="U")["s"].values.tolist())
    assert kind == "ok" and got == ["ok", "x", "é", "ab"] * 3


def test_u_refuses_trailing_nuls_same_as_fallback():
    values = np.array(["a", "b\x00", "c\x00d", "", "\x00"], dtype=T)
    kind, err, _ = same(lambda: D.convert_string_dtype(values, "U", "v"))
    assert kind == "error" and err[0] == "ZStringsError"
    assert "v: 2 value(s) end with NUL characters, e.g. value [1] = 'b\\x00'" in err[1]
    kind, got, _ = same(lambda: D.convert_string_dtype(values[[0, 2, 3]], "U"))
    assert kind == "ok" and got[2] == ["a", "c\x00d", ""]
