"""Tests for xr_zstrings.text.nc_char: NC_CHAR characters joined and split, with _Encoding."""

from __future__ import annotations

import netCDF4
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xr_zstrings.errors import StringDecodeError, StringOverflowError, StringTruncationWarning, ZStringsError
from xr_zstrings.text import nc_char as C

T = np.dtypes.StringDType()

# Text without NUL or lone surrogates (what |Sn / NC_CHAR can hold faithfully).
text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))


# ----------------------------------------------------------------------------- NC_CHAR


def chars(rows: list[bytes], n: int) -> np.ndarray:
    return np.array([[r[i : i + 1] for i in range(n)] for r in rows], dtype="S1").reshape(
        len(rows), n
    )


def test_decode_char_array_basic():
    raw = chars([b"ab\x00", b"\xc3\xa9\x00", b"xyz", b"\x00\x00\x00"], 3)
    assert C.decode_char_array(raw).tolist() == ["ab", "é", "xyz", ""]


def test_decode_char_array_split_char_and_embedded_nul():
    raw = chars([b"a\xc3\xa9\xc3", b"a\x00bc"], 4)
    assert C.decode_char_array(raw).tolist() == ["aé", "a\x00bc"]
    assert C.decode_char_array(raw, utf8_errors="replace").tolist() == ["aé\ufffd", "a\x00bc"]
    with pytest.raises(StringDecodeError):
        C.decode_char_array(raw, utf8_errors="strict")


def test_decode_char_array_multidim_and_empty():
    raw = np.array([[[b"a", b"b"], [b"c", b""]]], dtype=">S1")  # (1, 2, 2)
    out = C.decode_char_array(raw)
    assert out.shape == (1, 2) and out.tolist() == [["ab", "c"]]
    z = C.decode_char_array(np.zeros((3, 0), "S1"))
    assert z.shape == (3,) and (z == "").all()
    assert C.decode_char_array(np.zeros((0, 4), "S1"), string_dtype="U").shape == (0,)
    assert C.decode_char_array(np.array([b"h", b"i"], "S1")).shape == ()
    with pytest.raises(ZStringsError, match="last"):
        C.decode_char_array(np.array(b"a", "S1"))


def test_decode_char_array_old_nczarr_u1():
    raw = np.array([["a", "\xc3", "\xa9"], ["x", "\x00", "\x00"]], dtype="<U1")
    assert C.decode_char_array(raw).tolist() == ["aé", "x"]
    assert C.decode_char_array(raw.astype(">U1")).tolist() == ["aé", "x"]
    with pytest.raises(StringDecodeError, match="U\\+20AC"):
        C.decode_char_array(np.array([["€"]], "<U1"))


@pytest.mark.parametrize("encoding", ["latin-1", "latin1", "ISO-8859-1"])
def test_decode_char_array_latin1(encoding):
    raw = chars([b"caf\xe9", b"\xff\x00\xe9x", b"\xe9\x00\x00\x00"], 4)
    assert C.decode_char_array(raw, encoding=encoding).tolist() == ["café", "ÿ\x00éx", "é"]


def test_decode_char_array_ascii_and_other_codecs():
    assert C.decode_char_array(chars([b"ab"], 2), encoding="ascii").tolist() == ["ab"]
    with pytest.raises(StringDecodeError, match="_Encoding"):
        C.decode_char_array(chars([b"a\xe9"], 2), encoding="ascii")
    assert C.decode_char_array(
        chars([b"a\xe9"], 2), encoding="ascii", utf8_errors="replace"
    ).tolist() == ["a\ufffd"]
    assert C.decode_char_array(chars([b"\x80x\x00y"], 4), encoding="cp1252").tolist() == ["€x\x00y"]
    with pytest.raises(ZStringsError, match="codec"):
        C.decode_char_array(chars([b"a"], 1), encoding="no-such-codec")


def test_encode_char_array():
    out = C.encode_char_array(["ab", "é"], 3)
    assert out.dtype == np.dtype("S1") and out.shape == (2, 3)
    assert out.tolist() == [[b"a", b"b", b""], [b"\xc3", b"\xa9", b""]]
    assert C.encode_char_array(["ab", "é"], None).shape == (2, 2)
    assert C.encode_char_array([["a"], ["b"]], 2).shape == (2, 1, 2)
    assert C.encode_char_array(["", ""], 0).shape == (2, 0)
    with pytest.raises(StringOverflowError):
        C.encode_char_array(["é"], 1, what="v")
    with pytest.warns(StringTruncationWarning):
        assert C.encode_char_array(["aé"], 2, on_overflow="truncate").tolist() == [[b"a", b""]]
    with pytest.raises(ZStringsError, match="NUL"):
        C.encode_char_array(["a\x00"], 3)


def test_encode_char_array_latin1_and_errors():
    out = C.encode_char_array(["café"], None, encoding="latin-1")
    assert out.tolist() == [[b"c", b"a", b"f", b"\xe9"]]
    with pytest.raises(ZStringsError, match="cannot be encoded"):
        C.encode_char_array(["€"], 2, encoding="latin-1")
    with pytest.warns(StringTruncationWarning):
        out = C.encode_char_array(["café"], 3, encoding="latin-1", on_overflow="truncate")
    assert out.tolist() == [[b"c", b"a", b"f"]]
    with pytest.raises(ZStringsError, match="NUL"):
        C.encode_char_array(["ab"], 8, encoding="utf-16")


@settings(max_examples=150, deadline=None)
@given(st.lists(text, max_size=10), st.sampled_from(["T", "O", "U"]))
def test_roundtrip_char(values, kind):
    enc = C.encode_char_array(values, None)
    assert C.decode_char_array(enc, string_dtype=kind).tolist() == values


# ----------------------------------------------------------------------------- peer: netCDF4


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.text(alphabet=st.characters(min_codepoint=1, max_codepoint=0x10FFFF,
                                       blacklist_categories=("Cs",)), max_size=6),
        min_size=1, max_size=8,
    ),
    st.integers(0, 4),
)
def test_char_matches_netcdf4_chartostring(values, extra):
    # whole characters only: chartostring decodes each row's bytes with Python
    n = max(len(v.encode()) for v in values) + extra
    if n == 0:
        return
    raw = C.encode_char_array(values, n)
    peer = netCDF4.chartostring(raw, encoding="utf-8")
    assert C.decode_char_array(raw).tolist() == peer.tolist() == values


@settings(max_examples=150, deadline=None)
@given(st.lists(text, min_size=1, max_size=8), st.integers(0, 4))
def test_encode_char_matches_netcdf4_stringtochar(values, extra):
    n = max(max(len(v.encode()) for v in values) + extra, 1)
    peer = netCDF4.stringtochar(np.array(values, dtype="U"), encoding="utf-8", n_strlen=n)
    ours = C.encode_char_array(values, n)
    assert ours.dtype == peer.dtype and ours.shape == peer.shape
    assert ours.tolist() == peer.tolist()


def test_char_latin1_matches_netcdf4():
    raw = chars([b"caf\xe9", b"\xff\xfe\x00\x00"], 4)
    peer = netCDF4.chartostring(raw, encoding="latin-1")
    assert C.decode_char_array(raw, encoding="latin-1").tolist() == peer.tolist()
    ascii_vals = np.array([b"ab", b"xyz"], "S3")
    peer_chars = netCDF4.stringtochar(ascii_vals)  # S input: ascii
    assert C.encode_char_array(["ab", "xyz"], 3).tolist() == peer_chars.tolist()


@pytest.mark.parametrize("encoding", ["utf-8", "ascii", "latin-1", "cp1252"])
@pytest.mark.parametrize("kernels", [True, False], ids=["kernels", "numpy"])
def test_char_embedded_nul_as_netcdf4_chartostring(encoding, kernels, monkeypatch):
    # NC_CHAR: only trailing NULs end a value (netCDF4.chartostring, xarray's concat_characters);
    # embedded NULs are data, unlike NC_STRING which ends at its first NUL
    if not kernels:
        monkeypatch.setenv("XR_ZSTRINGS_NO_EXT", "1")
    raw = chars([b"a\x00b\x00", b"\x00\x00ab", b"abc\x00", b"\x00\x00\x00\x00", b"a\x00\x00z"], 4)
    peer = netCDF4.chartostring(raw, encoding=encoding).tolist()
    assert C.decode_char_array(raw, encoding=encoding).tolist() == peer
    assert peer[0] == "a\x00b"  # the peer's behaviour this pins
