"""NC_CHAR: strings stored as characters, ``S1`` arrays ``(..., nchar)`` (or old NCZarr's ``<U1``),
joined along the last axis and decoded with the ``_Encoding`` attribute, and encoded back.

As xarray's ``concat_characters``: only trailing NULs end a value, NULs inside one are kept.
UTF-8 goes through the fixed-width machinery (:mod:`.fixed`); other encodings through Python's
codecs.  Pure: numpy only.
"""

from __future__ import annotations

import codecs
from typing import Any

import numpy as np

from ..errors import StringDecodeError, ZStringsError
from .dtypes import _T, convert_string_dtype, empty_T, resolve_string_dtype
from .fixed import decode_flat_utf8, kernel_values, nul_error, to_T_values, utf8_matrix, utf8_matrix_kernel
from .policy import (
    OnOverflow,
    Utf8Errors,
    check_on_overflow,
    check_utf8_errors,
    overflow_error,
    policy_scope,
    position_label,
    report_change,
    warn_truncated,
    what_prefix,
)

__all__ = ["char_bytes", "decode_char_array", "encode_char_array", "norm_encoding"]


def norm_encoding(encoding: str | None) -> str:
    """Normalised codec name ('utf-8', 'ascii', 'iso8859-1', ...) or a clear error."""
    if encoding is None:
        return "utf-8"
    try:
        return codecs.lookup(str(encoding).strip()).name
    except LookupError:
        raise ZStringsError(
            f"_Encoding={encoding!r} is not a codec Python knows; use e.g. 'utf-8', 'ascii' or "
            "'latin-1', or pass encoding= explicitly"
        ) from None



def char_bytes(raw: Any, what: str) -> np.ndarray:
    """(..., nchar) uint8 matrix from S1 bytes, uint8, or old-NCZarr <U1 (one byte per element)."""
    raw = np.asarray(raw)
    if raw.ndim == 0:
        raise ZStringsError(
            f"{what_prefix(what)}a char array needs a last (string length) dimension; got a scalar"
        )
    k, size = raw.dtype.kind, raw.dtype.itemsize
    if (k == "S" and size == 1) or (k in "ui" and size == 1):
        return np.ascontiguousarray(raw).view(np.uint8)
    if k == "U" and size == 4:
        cps: np.ndarray = np.ascontiguousarray(raw.astype(raw.dtype.newbyteorder("="))).view(np.uint32)
        if cps.size and int(cps.max()) > 0xFF:
            i = int(np.argmax(cps > 0xFF))
            raise StringDecodeError(
                f"{what_prefix(what)}old-style <U1 char data must hold one byte (code point < 256) per "
                f"element, but element {position_label(i, raw.shape)} is U+{int(cps.reshape(-1)[i]):04X}"
            )
        return cps.astype(np.uint8)
    raise ZStringsError(
        f"{what_prefix(what)}expected a char array of dtype S1 (or old NCZarr <U1), got {raw.dtype}"
    )


def decode_char_array(
    raw: np.ndarray,
    *,
    encoding: str | None = "utf-8",
    utf8_errors: Utf8Errors = "drop",
    string_dtype: Any = "T",
    what: str = "",
) -> np.ndarray:
    """Join an NC_CHAR array ``(..., nchar)`` along its last axis and decode it to strings ``(...)``.

    As xarray's concat_characters (numpy's ``S`` view): only trailing NULs end a value, embedded
    ones are kept (``b"abc\\0def"`` is ``"abc\\x00def"``, as netcdf-c stores and xarray returns it);
    decoding follows ``encoding`` (the ``_Encoding`` attribute) with the ``utf8_errors`` policy
    ("drop" forgives only a cut UTF-8 character at the end).
    """
    policy = check_utf8_errors(utf8_errors)
    target = resolve_string_dtype(string_dtype)
    enc = norm_encoding(encoding)
    u8 = char_bytes(raw, what)
    shape, n = u8.shape[:-1], u8.shape[-1]
    N = int(np.prod(shape))
    if n == 0 or N == 0:
        return convert_string_dtype(empty_T(shape), target)
    mat = u8.reshape(N, n)
    flat = mat.view(f"S{n}").reshape(N)
    with policy_scope(what):
        out = _decode_char_flat(mat, flat, enc, n, N, policy, what, shape)
    return convert_string_dtype(out.reshape(shape), target)


def _decode_char_flat(
    mat: np.ndarray, flat: np.ndarray, enc: str, n: int, N: int, policy: str, what: str, shape: tuple
) -> np.ndarray:
    if enc == "utf-8":
        out = decode_flat_utf8(flat, n, policy, what, shape, trailing=True)
    elif enc in ("ascii", "iso8859-1"):
        if enc == "ascii" and int(mat.max()) >= 0x80:
            out = _decode_codec(flat, enc, policy, what, shape)
        else:
            # ASCII/latin-1: byte value == code point, so build UTF-32 directly (vectorised);
            # numpy's U strips trailing NUL code points only, as the S view does
            out = mat.astype("<u4").view(f"<U{n}").reshape(N).astype(_T)
    else:
        out = _decode_codec(flat, enc, policy, what, shape)
    return out


def _decode_codec(flat: np.ndarray, enc: str, policy: str, what: str, shape: tuple) -> np.ndarray:
    """Per-value Python decode for non-UTF-8 encodings (``tolist`` strips trailing NULs only)."""
    vals: list[str] = []
    replaced: list[tuple[int, bytes]] = []
    for i, b in enumerate(flat.tolist()):
        try:
            vals.append(b.decode(enc))
        except UnicodeDecodeError as e:
            if policy != "replace":
                raise StringDecodeError(
                    f"{what_prefix(what)}value {position_label(i, shape)} is not valid {enc} ({e.reason} at "
                    f"byte {e.start}: {b!r}); check the _Encoding attribute, or pass "
                    "utf8_errors='replace' to turn undecodable bytes into U+FFFD"
                ) from None
            vals.append(b.decode(enc, "replace"))
            replaced.append((i, b))
    if replaced:
        i, b = replaced[0]
        report_change("replace", len(replaced), f"value {position_label(i, shape)} ({enc})", b, vals[i])
    return np.array(vals, dtype=_T) if vals else empty_T(0)


def encode_char_array(
    values: Any,
    nchar: int | None,
    *,
    encoding: str | None = "utf-8",
    on_overflow: OnOverflow = "error",
    what: str = "",
) -> np.ndarray:
    """Encode strings ``(...)`` as an NC_CHAR ``S1`` array ``(..., nchar)``, NUL padded.

    ``nchar=None`` uses the longest encoded value (at least 1).  Overflow handling is as in
    encode_fixed_utf8; truncation never splits a character in any encoding.  NULs inside a value
    are kept (NC_CHAR ends only at trailing NULs); a value ending with NUL raises ZStringsError.
    """
    check_on_overflow(on_overflow)
    enc = norm_encoding(encoding)
    if enc == "utf-8":
        kv = kernel_values(values, what)
        if kv is not None:
            res = utf8_matrix_kernel(kv[0], nchar, on_overflow, what, min_width=0, shape=kv[1])
            if res is not None:
                return res[0].view("S1").reshape(kv[1] + (res[1],))
    t = to_T_values(values, what)
    shape = t.shape
    flat = t.reshape(-1)
    if enc == "utf-8":
        mat, w = utf8_matrix(flat, nchar, on_overflow, what, min_width=0, embedded_nul=True, shape=shape)
    else:
        mat, w = _codec_matrix(flat, nchar, enc, on_overflow, what, embedded_nul=True, shape=shape)
    return mat.view("S1").reshape(shape + (w,))


def _codec_matrix(
    flat: np.ndarray, width: int | None, enc: str, on_overflow: str, what: str, embedded_nul: bool = False,
    shape: tuple[int, ...] | None = None,
) -> tuple[np.ndarray, int]:
    """Strings as a ``(n, width)`` uint8 matrix of their bytes in encoding ``enc`` (not UTF-8),
    NUL padded; the width, widened or truncated to by ``on_overflow``."""
    strs = flat.tolist()
    nul = np.array([i for i, x in enumerate(strs) if (x.endswith("\x00") if embedded_nul else "\x00" in x)],
                   dtype=np.intp)
    if nul.size:
        raise nul_error(what, flat, nul, trailing=embedded_nul)
    encoded = [_codec_encode(s, i, flat, enc, what, embedded_nul) for i, s in enumerate(strs)]
    width = _codec_fit(encoded, strs, width, enc, on_overflow, what, flat, shape)
    if width == 0:
        return np.zeros((len(encoded), 0), np.uint8), 0
    arr = np.array(encoded, dtype=f"S{width}") if encoded else np.zeros(0, f"S{width}")
    return arr.view(np.uint8).reshape(len(encoded), width), width


def _codec_fit(encoded: list[bytes], strs: list[str], width: int | None, enc: str, on_overflow: str, what: str,
               flat: np.ndarray, shape: tuple[int, ...] | None) -> int:
    """The width of the encoded values (``width``, else the longest, at least 1); values longer
    than it raise, widen it or are truncated (in place) by ``on_overflow``."""
    lengths = [len(b) for b in encoded]
    longest = max(lengths, default=0)
    if width is None:
        width = max(1, longest)
    width = int(width)
    if width < 0:
        raise ZStringsError(f"{what_prefix(what)}nchar {width} must be >= 0")
    if longest <= width:
        return width
    if on_overflow == "error":
        raise overflow_error(what, lengths, width, enc, flat, shape or flat.shape)
    if on_overflow == "widen":
        return longest
    cut = _codec_truncate(encoded, strs, width, enc)
    warn_truncated(what, cut, width, longest, unit=enc)
    return width


def _codec_encode(s: str, i: int, flat: np.ndarray, enc: str, what: str, embedded_nul: bool) -> bytes:
    """Value ``i`` (``s``) encoded as ``enc``; ZStringsError when it cannot be, or when its bytes
    hold a NUL the value does not (netcdf-c would end the string there)."""
    try:
        b = s.encode(enc)
    except UnicodeEncodeError as e:
        raise ZStringsError(
            f"{what_prefix(what)}value {position_label(i, flat.shape)} {s!r} cannot be encoded as {enc} "
            f"({e.reason}: {s[e.start:e.end]!r}); use encoding='utf-8' or change the value"
        ) from None
    if b"\x00" in b and not (embedded_nul and "\x00" in s and not b.endswith(b"\x00")):
        raise ZStringsError(
            f"{what_prefix(what)}encoding {enc} turns value {position_label(i, flat.shape)} {s!r} into bytes "
            "containing NUL, which netcdf-c reads as the end of the string; use utf-8"
        )
    return b


def _codec_truncate(encoded: list[bytes], strs: list[str], width: int, enc: str) -> int:
    """Cuts each encoded value longer than ``width`` bytes to its longest prefix of whole characters
    that fits (in place); how many were cut."""
    cut = 0
    for i, b in enumerate(encoded):
        if len(b) > width:
            s = strs[i]
            k = min(len(s), width)
            while len(s[:k].encode(enc)) > width:
                k -= 1
            encoded[i] = s[:k].encode(enc)
            cut += 1
    return cut
