"""Tests for xr_zstrings.text.fixed: fixed-width UTF-8 (NC_STRING |Sn); NC_CHAR in test_nc_char.py,
string kinds in test_dtypes.py."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xr_zstrings.errors import (
    StringDecodeError,
    StringOverflowError,
    StringTruncationWarning,
    ZStringsError,
)
from xr_zstrings.text import fixed as S
from xr_zstrings.text import kernels as KL

T = np.dtypes.StringDType()
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Text without NUL or lone surrogates (what |Sn / NC_CHAR can hold faithfully).
text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))


def ref_decode(b: bytes, policy: str) -> str:
    """Reference semantics: value = bytes before the first NUL, decoded under the policy."""
    v = b.split(b"\x00", 1)[0]
    if policy == "replace":
        return v.decode("utf-8", "replace")
    try:
        return v.decode("utf-8")
    except UnicodeDecodeError as e:
        if policy == "drop" and e.reason == "unexpected end of data":
            return v[: e.start].decode("utf-8")
        raise


def S_(*vals: bytes, n: int | None = None) -> np.ndarray:
    width = n or max([len(v) for v in vals] + [1])
    return np.array(list(vals), dtype=f"S{width}")


# ----------------------------------------------------------------------------- decode_fixed_utf8


def test_split_char_drop_replace_strict():
    raw = S_(b"a\xc3\xa9\xc3")  # what netcdf-c stores for "aéé" with maxstrlen=4
    assert S.decode_fixed_utf8(raw).tolist() == ["aé"]
    assert S.decode_fixed_utf8(raw, utf8_errors="drop").tolist() == ["aé"]
    assert S.decode_fixed_utf8(raw, utf8_errors="replace").tolist() == ["aé\ufffd"]
    with pytest.raises(StringDecodeError, match="utf8_errors='drop'") as ei:
        S.decode_fixed_utf8(raw, utf8_errors="strict", what="ds.zarr/name")
    assert "ds.zarr/name" in str(ei.value)


def test_value_ends_at_first_nul():
    raw = S_(b"ab\x00cd", b"x\x00\x00y", b"\x00zz", b"ok", n=5)
    assert S.decode_fixed_utf8(raw).tolist() == ["ab", "x", "", "ok"]


def test_garbage_after_nul_is_ignored():
    raw = S_(b"ab\x00\xff\xfe", b"\xc3\xa9\x00\x80")
    for policy in ("drop", "replace", "strict"):
        assert S.decode_fixed_utf8(raw, utf8_errors=policy).tolist() == ["ab", "é"]


@pytest.mark.parametrize("cut", range(6))
def test_emoji_split_at_each_byte(cut):
    full = "x😀".encode()  # 1 + 4 bytes
    raw = np.array([full[:cut]], dtype="S5")
    if cut in (2, 3, 4):  # inside the emoji
        assert S.decode_fixed_utf8(raw).tolist() == ["x"]
        assert S.decode_fixed_utf8(raw, utf8_errors="replace").tolist() == ["x\ufffd"]
        with pytest.raises(StringDecodeError):
            S.decode_fixed_utf8(raw, utf8_errors="strict")
    else:
        expected = full[:cut].decode()
        for policy in ("drop", "replace", "strict"):
            assert S.decode_fixed_utf8(raw, utf8_errors=policy).tolist() == [expected]


def test_emoji_split_full_width_rows():
    # rows with no NUL at all (value fills the width) and a cut char at the very end
    for n in (1, 2, 3):
        raw = np.array(["😀".encode()[:n]], dtype=f"S{n}")
        assert S.decode_fixed_utf8(raw).tolist() == [""]


def test_other_invalid_utf8_raises_with_fix_hint():
    raw = S_(b"good", b"a\xffb", b"c\x80")
    with pytest.raises(StringDecodeError, match="utf8_errors='replace'") as ei:
        S.decode_fixed_utf8(raw, what="store:/var")
    assert "store:/var" in str(ei.value) and "[1]" in str(ei.value)
    assert S.decode_fixed_utf8(raw, utf8_errors="replace").tolist() == [
        "good",
        "a\ufffdb",
        "c\ufffd",
    ]


@pytest.mark.parametrize(
    "b",
    [b"\xed\xa0\x80", b"\xc0\x80", b"\xe0\x80", b"\xf4\x90", b"\xf5", b"a\xe0\x9f", b"\xed\xa0"],
)
def test_invalid_tails_are_not_dropped(b):
    # these are invalid sequences, not cut characters: "drop" must not hide them
    with pytest.raises(StringDecodeError):
        S.decode_fixed_utf8(np.array([b], dtype="S4"))


def test_overlong_and_surrogates_rejected_even_when_valid_looking():
    with pytest.raises(StringDecodeError):
        S.decode_fixed_utf8(S_(b"\xed\xa0\x80x"))


def test_error_index_is_multidim():
    raw = np.array([[b"a", b"b"], [b"c", b"\xff"]], dtype="S2")
    with pytest.raises(StringDecodeError, match=r"\(1, 1\)"):
        S.decode_fixed_utf8(raw)


def test_empty_and_all_nul():
    raw = np.zeros((3, 2), dtype="S4")
    out = S.decode_fixed_utf8(raw)
    assert out.shape == (3, 2) and out.dtype == T and (out == "").all()
    assert S.decode_fixed_utf8(S_(b"", b"", n=1)).tolist() == ["", ""]


@pytest.mark.parametrize("shape", [(0,), (0, 3), (2, 0, 4)])
@pytest.mark.parametrize("kind", ["T", "O", "U"])
def test_zero_size(shape, kind):
    out = S.decode_fixed_utf8(np.zeros(shape, "S3"), string_dtype=kind)
    assert out.shape == shape and out.dtype.kind == kind


def test_zero_d():
    out = S.decode_fixed_utf8(np.array(b"h\xc3\xa9", dtype="S3"))
    assert out.shape == () and out[()] == "hé"


@pytest.mark.parametrize("kind", ["T", "O", "U"])
def test_multidim_and_kinds(kind):
    vals = [["a", "bé"], ["😀", ""], ["xyz", "ü"]]
    raw = np.array([[v.encode() for v in row] for row in vals], dtype="S6")
    out = S.decode_fixed_utf8(raw, string_dtype=kind)
    assert out.shape == (3, 2) and out.dtype.kind == kind
    assert out.tolist() == vals


def test_non_contiguous_input():
    raw = np.array([[b"ab", b"cd"], [b"ef", b"g\x00h"]], dtype="S3").T
    assert S.decode_fixed_utf8(raw).tolist() == [["ab", "ef"], ["cd", "g"]]


def test_uint8_input():
    u8 = np.frombuffer(b"ab\x00\x00" + b"\xc3\xa9\xc3\x00", np.uint8).reshape(2, 4)
    assert S.decode_fixed_utf8(u8).tolist() == ["ab", "é"]
    assert S.decode_fixed_utf8(np.zeros((2, 0), np.uint8)).tolist() == ["", ""]


def test_rejects_other_dtypes_and_policies():
    with pytest.raises(ZStringsError, match="fixed-width bytes"):
        S.decode_fixed_utf8(np.array([1.0]))
    with pytest.raises(ZStringsError, match="utf8_errors"):
        S.decode_fixed_utf8(S_(b"a"), utf8_errors="ignore")


def test_large_array_bad_row_found_far_down():
    raw = np.array([b"abc\xc3\xa9"] * 20000, dtype="S8")
    raw[15001] = b"x\xffy"
    with pytest.raises(StringDecodeError, match=r"\[15001\]"):
        S.decode_fixed_utf8(raw)
    out = S.decode_fixed_utf8(raw, utf8_errors="replace")
    assert out[15001] == "x\ufffdy" and out[0] == "abcé" and out[-1] == "abcé"
    raw[7] = b"ok\x00junk"
    out = S.decode_fixed_utf8(raw, utf8_errors="replace")
    assert out[7] == "ok" and out[15001] == "x\ufffdy"


def test_many_truncated_rows_fast_path_result():
    vals = ["é" * k for k in range(1, 10)] * 1000
    raw = np.array([v.encode() for v in vals], dtype="S7")  # numpy cuts at byte 7
    out = S.decode_fixed_utf8(raw)
    assert out.tolist() == ["é" * min(k, 3) for k in range(1, 10)] * 1000


def test_result_never_holds_invalid_utf8():
    # numpy's S->StringDType cast does not validate; the result must always be readable
    raw = S_(b"\xff\xfe", b"a\xc3")
    out = S.decode_fixed_utf8(raw, utf8_errors="replace")
    assert out.tolist() == ["\ufffd\ufffd", "a\ufffd"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=8), min_size=1, max_size=20))
def test_decode_matches_python_reference(blobs):
    raw = np.array(blobs, dtype="S8")
    stored = [b.ljust(8, b"\x00") for b in blobs]  # what numpy holds
    for policy in ("drop", "replace", "strict"):
        try:
            expected = [ref_decode(b, policy) for b in stored]
        except UnicodeDecodeError:
            with pytest.raises(StringDecodeError):
                S.decode_fixed_utf8(raw, utf8_errors=policy)
        else:
            assert S.decode_fixed_utf8(raw, utf8_errors=policy).tolist() == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(text, max_size=20), st.integers(1, 12))
def test_byte_truncation_then_drop_is_char_prefix(values, n):
    # netcdf-c cuts at a byte; "drop" must then give the longest char prefix that fits
    raw = np.array([v.encode()[:n] for v in values], dtype=f"S{n}")
    out = S.decode_fixed_utf8(raw).tolist()
    for v, o in zip(values, out):
        assert v.startswith(o) and len(o.encode()) <= n
        assert len(v.encode()) <= n and o == v or len(v[: len(o) + 1].encode()) > n


# ----------------------------------------------------------------------------- encode_fixed_utf8


def test_encode_width_none():
    out = S.encode_fixed_utf8(["aé", "😀x", ""], None)
    assert out.dtype == np.dtype("S5")
    assert out.tolist() == [b"a\xc3\xa9", b"\xf0\x9f\x98\x80x", b""]
    assert S.encode_fixed_utf8(["", ""], None).dtype == np.dtype("S1")
    assert S.encode_fixed_utf8([], None).dtype == np.dtype("S1")


def test_encode_overflow_error_message():
    with pytest.raises(StringOverflowError) as ei:
        S.encode_fixed_utf8(["aé", "😀x", "ok"], 3, what="ds.zarr/names")
    msg = str(ei.value)
    for part in ("ds.zarr/names", "5 bytes", "width is 3", "widen", "truncate"):
        assert part in msg


def test_encode_truncate_at_char_boundary_and_warns():
    with pytest.warns(StringTruncationWarning, match="2 value"):
        out = S.encode_fixed_utf8(["aéé", "😀x", "ok"], 4, on_overflow="truncate")
    assert out.dtype == np.dtype("S4")
    assert out.tolist() == [b"a\xc3\xa9", b"\xf0\x9f\x98\x80", b"ok"]
    with pytest.warns(StringTruncationWarning):
        assert S.encode_fixed_utf8(["😀"], 3, on_overflow="truncate").tolist() == [b""]


def test_encode_widen():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = S.encode_fixed_utf8(["aéé", "b"], 2, on_overflow="widen")
    assert out.dtype == np.dtype("S5")


def test_encode_keeps_width_when_it_fits_and_shape():
    out = S.encode_fixed_utf8(np.array([["a", "b"], ["c", "d"]], T), 8)
    assert out.dtype == np.dtype("S8") and out.shape == (2, 2)
    assert S.encode_fixed_utf8(np.zeros((0, 3), "U2"), 4).shape == (0, 3)
    assert S.encode_fixed_utf8("hé", None).shape == ()


@pytest.mark.parametrize("value", ["a\x00", "a\x00b", "\x00", "x\x00\x00"])
def test_encode_rejects_nul(value):
    with pytest.raises(ZStringsError, match="NUL"):
        S.encode_fixed_utf8(["ok", value], 10, what="v")


@pytest.mark.parametrize(
    "values", [["\ud800"], np.array(["x\udfff"], "U2"), np.array(["\ud83d"], object)]
)
def test_encode_rejects_lone_surrogates(values):
    with pytest.raises(ZStringsError, match="surrogate"):
        S.encode_fixed_utf8(values, None)


@pytest.mark.parametrize("values", [[None], [b"x"], [1], np.array([b"x"]), np.array([1.5])])
def test_encode_rejects_non_str(values):
    with pytest.raises(ZStringsError):
        S.encode_fixed_utf8(values, None)


def test_encode_rejects_bad_options():
    with pytest.raises(ZStringsError, match="on_overflow"):
        S.encode_fixed_utf8(["a"], 1, on_overflow="clip")
    with pytest.raises(ZStringsError, match="width"):
        S.encode_fixed_utf8(["a"], 0)


@settings(max_examples=200, deadline=None)
@given(st.lists(text, max_size=20), st.sampled_from(["T", "O", "U"]))
def test_roundtrip_fixed(values, kind):
    enc = S.encode_fixed_utf8(values, None)
    assert S.decode_fixed_utf8(enc, string_dtype=kind).tolist() == values
    assert S.decode_fixed_utf8(enc, utf8_errors="strict").tolist() == values


@settings(max_examples=200, deadline=None)
@given(st.lists(text, min_size=1, max_size=20), st.integers(1, 10))
def test_truncate_is_prefix_at_char_boundary(values, width):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StringTruncationWarning)
        enc = S.encode_fixed_utf8(values, width, on_overflow="truncate")
    assert enc.dtype == np.dtype(f"S{width}")
    out = S.decode_fixed_utf8(enc, utf8_errors="strict").tolist()  # strict: no split chars
    for v, o in zip(values, out):
        assert v.startswith(o) and len(o.encode()) <= width
        if o != v:  # maximal: the next character would not fit
            assert len(v[: len(o) + 1].encode()) > width


# ----------------------------------------------------------------------------- purity


def test_module_does_not_import_xarray_or_zarr():
    code = (
        "import xr_zstrings.text.fixed, xr_zstrings.text.nc_char, sys; "
        "assert 'xarray' not in sys.modules and 'zarr' not in sys.modules, "
        "sorted(m for m in sys.modules if m.split('.')[0] in ('xarray', 'zarr'))"
    )
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_without_pyarrow_fallback(monkeypatch):
    monkeypatch.setattr(S, "_pa", False)  # as if pyarrow were not installed
    assert S._arrow() is None
    raw = np.array([b"ok\xc3\xa9", b"a\xc3\xa9\xc3", b"x\x00\xff"] * 3000, dtype="S5")
    assert S.decode_fixed_utf8(raw).tolist() == ["oké", "aé", "x"] * 3000
    raw[4000] = b"\xffbad"
    with pytest.raises(StringDecodeError, match=r"\[4000\]"):
        S.decode_fixed_utf8(raw)
    assert S.decode_fixed_utf8(raw, utf8_errors="replace")[4000] == "\ufffdbad"


def test_module_string_dtypes_keep_no_array_alive():
    """A StringDType instance keeps the strings of the first array made with it until the instance
    is freed: the modules' instances are claimed at import, so arrays made with them get their own."""
    import gc
    import tracemalloc

    from xr_zstrings.text import dtypes, vlen

    values = np.array([f"a value longer than fifteen bytes {i}" for i in range(20_000)], dtype=np.dtypes.StringDType())
    for t in (dtypes._T, dtypes._T_STRICT, dtypes.NA_T, vlen._T):
        assert np.empty(1, dtype=t).dtype is not t
        gc.collect()
        tracemalloc.start()
        try:
            arr = values.astype(t)
            assert tracemalloc.get_traced_memory()[0] > 500_000
            del arr
            gc.collect()
            assert tracemalloc.get_traced_memory()[0] < 100_000  # the strings went with the array
        finally:
            tracemalloc.stop()


def test_reused_output_encodes_into_one_buffer_per_thread():
    """Inside ``reused_output`` a thread's fixed-width encodings share one buffer (the writer's
    dask blocks: no fresh pages per chunk), each right until the next; outside, and in another
    thread, each encoding is its own array. The pure-Python fallback (CI's fallback job) encodes
    without the buffer: its values must be right all the same."""
    import threading

    shared = KL.kernels() is not None  # the buffer is the compiled kernels' output

    a = np.array(["a", "bé", "c" * 5], dtype=np.dtypes.StringDType())
    b = np.array(["zz", "", "ü"], dtype=np.dtypes.StringDType())
    with S.reused_output():
        first = S.encode_fixed_utf8(a, 6)
        assert first.tolist() == [b"a", "bé".encode(), b"ccccc"]
        second = S.encode_fixed_utf8(b, 6)
        assert second.tolist() == [b"zz", b"", "ü".encode()]
        assert np.shares_memory(first, second) is shared  # the contract: first is overwritten now
        seen = []
        t = threading.Thread(target=lambda: seen.append(S.encode_fixed_utf8(a, 6)))
        t.start()
        t.join()
        assert not np.shares_memory(seen[0], second) and seen[0].tolist() == [b"a", "bé".encode(), b"ccccc"]
    fresh = S.encode_fixed_utf8(a, 6)
    assert not np.shares_memory(fresh, second) and fresh.tolist() == [b"a", "bé".encode(), b"ccccc"]
