"""Tests for xr_zstrings.text.dtypes: the string kinds a read returns, UTF-32 and object conversions."""

from __future__ import annotations

import numpy as np
import pytest

from xr_zstrings.errors import StringDecodeError, ZStringsError
from xr_zstrings.text import dtypes as D

T = np.dtypes.StringDType()


# ----------------------------------------------------------------------------- dtype handling


@pytest.mark.parametrize(
    "kind, expected",
    [
        ("T", "T"),
        (None, "T"),
        (T, "T"),
        (np.dtypes.StringDType, "T"),
        ("O", "O"),
        (object, "O"),
        (np.dtype(object), "O"),
        ("U", "U"),
        (str, "U"),
        (np.str_, "U"),
        (np.dtype("U"), "U"),
    ],
)
def test_resolve_string_dtype(kind, expected):
    assert D.resolve_string_dtype(kind).kind == expected


def test_resolve_string_dtype_keeps_custom_stringdtype():
    dt = np.dtypes.StringDType(na_object=None)
    assert D.resolve_string_dtype(dt) is dt


@pytest.mark.parametrize("bad", ["X", "U10", np.dtype("U10"), np.dtype("S4"), int, 3])
def test_resolve_string_dtype_rejects(bad):
    with pytest.raises(ZStringsError, match="string_dtype"):
        D.resolve_string_dtype(bad)


def test_convert_string_dtype_all_kinds():
    src = np.array([["a", "bé"], ["😀", ""]], dtype=T)
    for kind, dtk in [("T", "T"), ("O", "O"), ("U", "U")]:
        out = D.convert_string_dtype(src, kind)
        assert out.dtype.kind == dtk and out.shape == (2, 2)
        assert out.tolist() == src.tolist()
    assert D.convert_string_dtype(src, "U").dtype == np.dtype("<U2")
    assert D.convert_string_dtype(np.array(["a", "b"], object), "T").dtype == T
    big = np.array(["ab", "c"], ">U2")
    assert D.convert_string_dtype(big, "T").tolist() == ["ab", "c"]
    assert D.convert_string_dtype(np.array([], T), "U").dtype == np.dtype("<U1")


def test_convert_string_dtype_rejects_bytes_and_non_str():
    with pytest.raises(ZStringsError, match="decode bytes first"):
        D.convert_string_dtype(np.array([b"a"]), "T")
    with pytest.raises(ZStringsError, match="not str"):
        D.convert_string_dtype(np.array(["a", None], object), "T")


# ----------------------------------------------------------------------------- UTF-32, objects


@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("kind", ["T", "O", "U"])
def test_decode_utf32(order, kind):
    raw = np.array([["ab", "é"], ["😀", ""]], dtype=f"{order}U2")
    out = D.decode_utf32(raw, string_dtype=kind)
    assert out.dtype.kind == kind and out.tolist() == [["ab", "é"], ["😀", ""]]


def test_decode_utf32_invalid_code_point():
    raw = np.array([0x41, 0x110000], "<u4").view("<U1")
    with pytest.raises(StringDecodeError, match="110000"):
        D.decode_utf32(raw)
    with pytest.raises(ZStringsError):
        D.decode_utf32(np.array([b"a"]))


def test_decode_utf32_zero_size():
    assert D.decode_utf32(np.zeros((0, 2), "<U3")).shape == (0, 2)


@pytest.mark.parametrize("kind", ["T", "O", "U"])
def test_decode_objects(kind):
    raw = np.array([["a", "bé"], ["", "😀"]], dtype=object)
    out = D.decode_objects(raw, string_dtype=kind)
    assert out.dtype.kind == kind and out.tolist() == raw.tolist()


def test_decode_objects_rejects_non_str():
    with pytest.raises(ZStringsError, match="None"):
        D.decode_objects(np.array(["a", None], object), what="v")
    with pytest.raises(ZStringsError, match="bytes"):
        D.decode_objects(np.array(["a", b"b"], object), string_dtype="O")
    assert D.decode_objects(np.array([], object)).shape == (0,)
