"""Fixed-width UTF-8: NCZarr NC_STRING (``|Sn``, NUL padded, a value ends at its first NUL, as
netcdf-c reads it) decoded and encoded, and the fixed-width machinery NC_CHAR builds on.

Decoding runs in the compiled kernels (:func:`decode_fixed_into`) or, without them, on numpy and
pyarrow; both give the same results, errors and ``utf8_errors`` reports.  Encoding refuses what
netcdf-c could not read back (NUL inside a value, lone surrogates) and applies ``on_overflow``.
A writer may let its encodings reuse one buffer per thread (:func:`reused_output`).  No xarray
or zarr imports here: this is the hot path and must stay importable and testable on its own.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..errors import StringDecodeError, ZStringsError
from ..scratch import ThreadScratch
from .dtypes import _T, convert_string_dtype, empty_T, objects_to_T, resolve_string_dtype
from .kernels import POLICY_CODE, kernels
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

__all__ = [
    "decode_fixed_into",
    "decode_fixed_utf8",
    "encode_fixed_utf8",
    "has_embedded_nul",
    "reused_output",
    "utf8_lengths",
]

# Rows handled per block when hunting for the few invalid values on the slow path.
_BLOCK = 4096

# UTF-8 lead-byte tables: continuation bytes needed, and the allowed range of the 2nd byte
# (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF).
_NEED = np.zeros(256, np.int8)
_NEED[0xC2:0xE0] = 1
_NEED[0xE0:0xF0] = 2
_NEED[0xF0:0xF5] = 3
_LO = np.full(256, 0x80, np.uint8)
_HI = np.full(256, 0xBF, np.uint8)
_LO[0xE0], _HI[0xED], _LO[0xF0], _HI[0xF4] = 0xA0, 0x9F, 0x90, 0x8F


def _as_fixed_bytes(raw: Any, what: str) -> tuple[np.ndarray, tuple[int, ...], int]:
    """(flat contiguous |Sn view or None-if-n==0, logical shape, n) for |Sn or uint8 (..., n)."""
    raw = np.asarray(raw)
    if raw.dtype.kind == "S":
        shape, n = raw.shape, raw.dtype.itemsize
        if n == 0:
            return np.zeros(raw.size, "S1"), shape, 0
        return np.ascontiguousarray(raw).reshape(-1), shape, n
    if raw.dtype.kind in "ui" and raw.dtype.itemsize == 1 and raw.ndim >= 1:
        shape, n = raw.shape[:-1], raw.shape[-1]
        if n == 0:
            return np.zeros(int(np.prod(shape)), "S1"), shape, 0
        flat = np.ascontiguousarray(raw).view(np.uint8).reshape(-1, n)
        return flat.view(f"S{n}").reshape(-1), shape, n
    raise ZStringsError(
        f"{what_prefix(what)}expected fixed-width bytes (|Sn) or a uint8 array shaped (..., n), got "
        f"dtype {raw.dtype} with shape {raw.shape}"
    )


def has_embedded_nul(u8: np.ndarray) -> bool:
    """True if some row of the (N, n) byte matrix has a NUL followed by a non-NUL byte."""
    n = u8.shape[1]
    if n < 2:
        return False
    z = (u8 == 0).reshape(-1)
    d = z[:-1] > z[1:]  # NUL then non-NUL, in flat order
    d[n - 1 :: n] = False  # ignore pairs that straddle two rows
    return bool(d.any())


def _first_nul_lengths(u8: np.ndarray) -> np.ndarray:
    """Bytes before the first NUL of each row (n if the row has no NUL)."""
    N, n = u8.shape
    z = u8 == 0
    L = z.argmax(axis=1)
    L[~z[np.arange(N), L]] = n
    return L


def _rstrip_lengths(u8: np.ndarray) -> np.ndarray:
    """Bytes of each row without its trailing NULs (NC_CHAR: embedded NULs are kept)."""
    _, n = u8.shape
    nz = u8 != 0
    last = n - 1 - nz[:, ::-1].argmax(axis=1)
    return np.where(nz.any(axis=1), last + 1, 0)


def _value_lengths(u8: np.ndarray, trailing: bool) -> np.ndarray:
    """Each row's value length: before the first NUL, or (``trailing``) without trailing NULs."""
    return _rstrip_lengths(u8) if trailing else _first_nul_lengths(u8)


def _incomplete_tail(u8: np.ndarray, L: np.ndarray) -> np.ndarray:
    """Per row, the length (0-3) of an incomplete-but-so-far-valid UTF-8 sequence ending at L.

    That is exactly what cutting a valid string at a byte leaves, and what Python reports as
    "unexpected end of data"; anything else invalid is left for validation to reject.
    """
    N = u8.shape[0]
    rows = np.arange(N)

    def byte_before(off: int) -> np.ndarray:
        pos = L - off
        ok = pos >= 0
        b = u8[rows, np.where(ok, pos, 0)]
        return np.where(ok, b, 0).astype(np.intp)  # 0 = "no byte": ASCII, not a lead

    b1, b2, b3 = byte_before(1), byte_before(2), byte_before(3)
    c1 = (b1 & 0xC0) == 0x80
    c2 = (b2 & 0xC0) == 0x80
    k1 = _NEED[b1] >= 1
    k2 = c1 & (_NEED[b2] >= 2) & (b1 >= _LO[b2]) & (b1 <= _HI[b2])
    k3 = c1 & c2 & (_NEED[b3] >= 3) & (b2 >= _LO[b3]) & (b2 <= _HI[b3])
    return np.select([k1, k2, k3], [1, 2, 3], 0)


def _decode_error(
    what: str, idx: str, value: bytes, err: UnicodeDecodeError, policy: str
) -> StringDecodeError:
    fix = "pass utf8_errors='replace' to turn invalid bytes into U+FFFD"
    if policy == "strict" and err.reason == "unexpected end of data":
        fix = (
            "this looks like a character cut by a byte-width limit; pass utf8_errors='drop' "
            "(the default) to drop it, or utf8_errors='replace'"
        )
    return StringDecodeError(
        f"{what_prefix(what)}value {idx} is not valid UTF-8 ({err.reason} at byte {err.start}: "
        f"{value!r}) under utf8_errors={policy!r}; {fix}"
    )


_pa: Any = None


def _arrow() -> Any:
    """pyarrow, imported on first use (its UTF-8 validation is fast: docs/performance.md), or None."""
    global _pa
    if _pa is None:
        try:
            import pyarrow
        except ImportError:  # pragma: no cover - pyarrow is a declared dependency
            _pa = False
        else:
            _pa = pyarrow
    return _pa or None


def _arrow_view(flat: np.ndarray, n: int) -> Any:
    """Zero-copy Arrow large_string view of a contiguous |Sn array (each value keeps its padding)."""
    N = flat.size
    offsets = np.arange(0, (N + 1) * n, n, dtype=np.int64)
    pa = _arrow()
    return pa.LargeStringArray.from_buffers(N, pa.py_buffer(offsets), pa.py_buffer(flat))


def _python_invalid_rows(flat: np.ndarray, rows: np.ndarray) -> np.ndarray:
    bad = []
    for i, b in zip(rows.tolist(), flat[rows].tolist(), strict=True):
        try:
            b.decode("utf-8")
        except UnicodeDecodeError:
            bad.append(i)
    return np.asarray(bad, dtype=np.intp)


def _invalid_rows(flat: np.ndarray, u8: np.ndarray, *, first_only: bool = False) -> np.ndarray:
    """Indices of rows whose bytes (padding included) are not valid UTF-8.

    Needed because numpy 2.4's S->StringDType cast copies bytes WITHOUT validating them (invalid
    input would give a StringDType array that fails later, far from the cause) and numpy 2.5's
    raises a bare TypeError naming no value: finding the rows first gives the same
    StringDecodeError (or U+FFFD under "replace") on both.
    Only call on rows that contain no byte after their first NUL (canonical rows).
    """
    N, n = u8.shape
    if N == 0 or int(u8.max()) < 0x80:
        return np.zeros(0, np.intp)
    pa = _arrow()
    if pa is None:
        rows = np.flatnonzero(u8.max(axis=1) >= 0x80)
        return _python_invalid_rows(flat, rows)
    try:
        _arrow_view(flat, n).validate(full=True)
        return np.zeros(0, np.intp)
    except pa.ArrowInvalid as e:
        m = re.search(r"string index (\d+)", str(e))
        if first_only and m:
            return np.array([int(m.group(1))], np.intp)
    bad = []
    for start in range(0, N, _BLOCK):
        blk = flat[start : start + _BLOCK]
        try:
            _arrow_view(blk, n).validate(full=True)
        except pa.ArrowInvalid:
            bad.append(start + _python_invalid_rows(blk, np.arange(blk.size)))
    return np.concatenate(bad) if bad else np.zeros(0, np.intp)


def decode_flat_utf8(flat: np.ndarray, n: int, policy: str, what: str, shape: tuple,
                      trailing: bool = False) -> np.ndarray:
    """Decode a 1-D contiguous |Sn array to StringDType: a value ends at its first NUL (netcdf-c's
    NC_STRING), or with ``trailing`` only trailing NULs are stripped (NC_CHAR, as netCDF4/xarray)."""
    N = flat.size
    if N == 0 or n == 0:
        return empty_T(N)
    if kernels() is not None:
        out = np.empty(N, _T)
        decode_fixed_into(flat, n, out, None, policy, what, lambda k: position_label(k, shape), trailing=trailing)
        return out
    u8 = flat.view(np.uint8).reshape(N, n)
    # Fast path: numpy's S->T cast strips trailing NULs, which equals the first-NUL rule when
    # no row has a NUL followed by more bytes; UTF-8 validity is checked separately (ASCII
    # max-byte test, else pyarrow) because the cast itself does not check it.
    if (trailing or not has_embedded_nul(u8)) and _invalid_rows(flat, u8, first_only=True).size == 0:
        return flat.astype(_T)
    return _decode_slow(u8, policy, what, shape, trailing)


def _decode_slow(u8: np.ndarray, policy: str, what: str, shape: tuple, trailing: bool = False) -> np.ndarray:
    """Cut every row at its end (see _value_lengths; and a trailing partial char for "drop"), then validate."""
    N, n = u8.shape
    L0 = L = _value_lengths(u8, trailing)
    tail = None
    if policy == "drop":
        tail = _incomplete_tail(u8, L0)
        L = L0 - tail
    canon = u8.copy()
    canon[np.arange(n)[None, :] >= L[:, None]] = 0
    canon_s = canon.view(f"S{n}").reshape(N)
    bad = _invalid_rows(canon_s, canon, first_only=policy != "replace")
    fixed: list[str] = []
    if bad.size:
        if policy != "replace":
            i = int(bad[0])
            b = canon_s[i].tobytes().rstrip(b"\x00")
            try:
                b.decode("utf-8")
            except UnicodeDecodeError as e:
                raise _decode_error(what, position_label(i, shape), b, e, policy) from None
        fixed = [b.decode("utf-8", "replace") for b in canon_s[bad].tolist()]
        first_bad = canon_s[int(bad[0])].tobytes()[: int(L[int(bad[0])])]
        # blank the invalid rows before the cast: numpy 2.5's S->T cast raises a bare TypeError on
        # invalid UTF-8 (numpy 2.4 copied the bytes unchecked); both then get the same U+FFFD values
        canon_s[bad] = b""
    out = canon_s.astype(_T)
    if bad.size:
        out[bad] = np.array(fixed, dtype=_T)
        i = int(bad[0])
        report_change("replace", bad.size, f"value {position_label(i, shape)}", first_bad, fixed[0])
    if tail is not None:
        dropped = np.flatnonzero(tail > 0)
        if dropped.size:
            i = int(dropped[0])
            report_change("drop", dropped.size, f"value {position_label(i, shape)}", u8[i, : L0[i]].tobytes(), str(out[i]))
    return out


def _fixed_row_value(row: bytes, policy: str, trailing: bool = False) -> tuple[bytes, bytes]:
    """(value before its first NUL, or without trailing NULs; the same with a cut trailing
    character dropped under "drop")."""
    b = row.rstrip(b"\x00") if trailing else row.split(b"\x00", 1)[0]
    if policy != "drop" or not b:
        return b, b
    u8 = np.frombuffer(b, np.uint8).reshape(1, -1)
    cut = int(_incomplete_tail(u8, np.array([len(b)]))[0])
    kept = b[: len(b) - cut]
    return b, kept.rstrip(b"\x00") if trailing and cut else kept


def decode_fixed_into(
    buf: Any, n: int, out: np.ndarray, sel: np.ndarray | None, policy: str, what: str, index: Any,
    trailing: bool = False,
) -> None:
    """Compiled path: decode fixed-width rows of ``buf`` (``n`` bytes each) into StringDType ``out``.

    ``out`` may be any (strided) view; its k-th element in C order gets row ``sel[k]`` (row k
    when ``sel`` is None).  ``index(k)`` formats position k for error messages.  Invalid values
    raise or become U+FFFD exactly as the numpy fallback (``decode_flat_utf8``) does.
    """
    K = kernels()
    stats = np.zeros(2, np.int64) if policy == "drop" else None
    bad = K.fixed_to_T(buf, n, out, sel, POLICY_CODE[policy], trailing, stats)
    if not bad.size and (stats is None or not stats[0]):
        return
    rows = memoryview(buf).cast("B")
    if stats is not None and stats[0]:
        k = int(stats[1])
        r = int(sel[k]) if sel is not None else k
        b, kept = _fixed_row_value(bytes(rows[r * n : (r + 1) * n]), policy, trailing)
        report_change("drop", int(stats[0]), f"value {index(k)}", b, kept.decode("utf-8", "replace"))
    if not bad.size:
        return
    fixed = []
    for k in bad.tolist():
        r = int(sel[k]) if sel is not None else k
        b, kept = _fixed_row_value(bytes(rows[r * n : (r + 1) * n]), policy, trailing)
        if policy != "replace":
            try:
                kept.decode("utf-8")
            except UnicodeDecodeError as e:
                raise _decode_error(what, index(k), kept, e, policy) from None
            raise StringDecodeError(f"{what_prefix(what)}value {index(k)} is not valid UTF-8: {b!r}")
        fixed.append(b.decode("utf-8", "replace").encode("utf-8"))
        if len(fixed) == 1:
            first = (f"value {index(k)}", b)
    # (not out[...] = ...: chunks decode on threads, see _kernels.pack_at)
    K.pack_at(out, np.ascontiguousarray(bad, dtype=np.intp), fixed)
    report_change("replace", len(fixed), first[0], first[1], fixed[0].decode("utf-8"))


def decode_fixed_utf8(
    raw: np.ndarray,
    *,
    utf8_errors: Utf8Errors = "drop",
    string_dtype: Any = "T",
    what: str = "",
    trailing: bool = False,
) -> np.ndarray:
    """Decode NUL-padded fixed-width UTF-8 (NCZarr NC_STRING ``|Sn``) to strings, same shape.

    A value is the bytes before the FIRST NUL (netcdf-c semantics, unlike numpy which strips
    trailing NULs only).  ``utf8_errors``: "drop" drops an incomplete UTF-8 sequence at the end
    of a value (what netcdf-c's byte truncation leaves) and raises on other invalid UTF-8;
    "replace" turns every invalid sequence into U+FFFD; "strict" raises on anything invalid.
    ``raw`` may also be a uint8 array shaped ``(..., n)``.  ``what`` names the data in errors.
    ``trailing``: only trailing NULs end a value (numpy's and xarray's rule for ``|Sn`` bytes).
    """
    policy = check_utf8_errors(utf8_errors)
    target = resolve_string_dtype(string_dtype)
    flat, shape, n = _as_fixed_bytes(raw, what)
    with policy_scope(what):
        out = decode_flat_utf8(flat, n, policy, what, shape, trailing=trailing)
    return convert_string_dtype(out.reshape(shape), target, what)


def to_T_values(values: Any, what: str) -> np.ndarray:
    """Any str array-like -> StringDType array (refusing bytes, None, numbers, surrogates)."""
    if isinstance(values, np.ndarray):
        arr = values
    else:
        arr = np.array(values, dtype=object)
    k = arr.dtype.kind
    if k == "T":
        return arr
    if k == "U":
        if not arr.dtype.isnative:
            arr = arr.astype(arr.dtype.newbyteorder("="))
        try:
            return arr.astype(_T)
        except (TypeError, UnicodeError, ValueError):
            return objects_to_T(arr.astype(object), what)  # finds and names the bad value
    if k == "O":
        return objects_to_T(arr, what)
    if k == "S":
        raise ZStringsError(
            f"{what_prefix(what)}expected str values but got bytes (dtype {arr.dtype}); decode them "
            "first (they may already be in the stored layout)"
        )
    raise ZStringsError(f"{what_prefix(what)}expected str values, got an array of dtype {arr.dtype}")


def utf8_lengths(values: Any) -> np.ndarray:
    """UTF-8 byte length of every str in ``values`` (flat, C order), compiled when possible."""
    arr = np.asarray(values)
    K = kernels()
    if K is not None and arr.dtype.kind in "OT" and getattr(arr.dtype, "na_object", None) is None:
        status, _, lengths = K.utf8_scan(np.ascontiguousarray(arr).reshape(-1), True)
        if status == 0:
            return lengths
    t = convert_string_dtype(arr, "T").reshape(-1)
    if t.size == 0:
        return np.zeros(0, np.int64)
    return np.strings.str_len(np.strings.encode(t, "utf-8")).astype(np.int64)


def nul_error(what: str, t: np.ndarray, rows: np.ndarray, trailing: bool = False) -> ZStringsError:
    """The error for values ``rows`` of ``t`` that hold a NUL netcdf-c would end them at (NC_STRING),
    or (``trailing``: NC_CHAR) that end with one."""
    i = int(rows[0])
    if trailing:  # NC_CHAR
        return ZStringsError(
            f"{what_prefix(what)}{rows.size} value(s) end with a NUL character, e.g. value "
            f"{position_label(i, t.shape)} = {t.reshape(-1)[i]!r}; NC_CHAR keeps NULs inside a value but "
            "netcdf-c and xarray drop the trailing ones when reading, so these cannot be written "
            "faithfully -- remove the trailing NULs"
        )
    return ZStringsError(
        f"{what_prefix(what)}{rows.size} value(s) contain a NUL character, e.g. value "
        f"{position_label(i, t.shape)} = {t.reshape(-1)[i]!r}; netcdf-c ends an NC_STRING value at its "
        "first NUL, so such values cannot be written faithfully as NC_STRING -- write the variable "
        "as NC_CHAR (encoding={'nc_type': 'NC_CHAR'}), which keeps NULs inside a value, or remove "
        "or replace the NULs"
    )

def kernel_values(values: Any, what: str) -> tuple[np.ndarray, tuple[int, ...]] | None:
    """(flat C-contiguous StringDType/object array the kernels can encode, shape), or None."""
    if kernels() is None:
        return None
    arr = values if isinstance(values, np.ndarray) else np.array(values, dtype=object)
    if arr.dtype.kind == "U":
        arr = to_T_values(arr, what)
    if arr.dtype.kind not in "TO":
        return None
    return np.ascontiguousarray(arr).reshape(-1), arr.shape


# A writer's block encodings may go into one buffer per thread instead of fresh memory: each fresh
# 32 MB chunk (np.zeros) cost a page fault per 4 KiB once dask's workers return freed memory to the
# system (how much: docs/performance.md); see reused_output. Encodings over the cap get fresh memory.
# The switch is thread-local on purpose, not a context variable: the buffer belongs to the thread,
# and a pool task that inherited the switch would hand back views of its thread's buffer, which
# the thread's next task overwrites before the caller has written them.
_OUT_SCRATCH = ThreadScratch(64 << 20)
_REUSE = threading.local()


@contextlib.contextmanager
def reused_output() -> Iterator[None]:
    """Inside: this thread's ``encode_fixed_utf8`` results may be views of one buffer the thread
    reuses, valid until its next encoding; for a caller that writes each encoded chunk (and is
    done with its bytes) before encoding the next."""
    before = getattr(_REUSE, "on", False)
    _REUSE.on = True
    try:
        yield
    finally:
        _REUSE.on = before


def utf8_matrix_kernel(
    flat: np.ndarray, width: int | None, on_overflow: str, what: str, min_width: int,
    shape: tuple[int, ...] | None = None,
) -> tuple[np.ndarray, int] | None:
    """The compiled twin of ``_utf8_matrix`` (same results, errors and warnings), or None when a
    value needs the Python path to be reported (non-str, missing, NUL, lone surrogate).

    A known width takes one pass (rows written, overflow counted); otherwise a length scan finds
    the longest value first.
    """
    K = kernels()
    N = flat.size
    if width is None or width == 0 or N == 0:
        status, _, lengths = K.utf8_scan(flat)
        if status != 0:
            return None
        longest, width = _resolve_width(lengths, width, min_width, what)
        if longest > width:  # only when a width of 0 was asked for
            if on_overflow == "error":
                raise overflow_error(what, lengths, width, "UTF-8", flat, shape or flat.shape)
            if on_overflow == "widen":
                width = longest
            else:
                warn_truncated(what, int((lengths > width).sum()), width, longest)
        if width == 0 or N == 0:
            return np.zeros((N, width), np.uint8), width
    else:
        _resolve_width(np.zeros(0, np.int64), width, min_width, what)  # width >= min_width
    buf = _OUT_SCRATCH.get(N * width) if getattr(_REUSE, "on", False) else None
    if buf is None:
        mat = np.zeros((N, width), np.uint8)  # fresh zero pages: the kernel skips writing the padding
    else:
        mat = buf[: N * width].reshape(N, width)  # reused: the kernel writes the padding too
    status, _, n_over, longest = K.fill_fixed_bounded(flat, width, mat.reshape(-1), buf is None)
    if status != 0:
        return None
    if n_over:
        if on_overflow == "error":
            raise overflow_error(what, utf8_lengths(flat), width, "UTF-8", flat, shape or flat.shape)
        if on_overflow == "widen":
            return utf8_matrix_kernel(flat, longest, on_overflow, what, min_width)
        warn_truncated(what, n_over, width, longest)
    return mat, width


def utf8_matrix(
    t: np.ndarray, width: int | None, on_overflow: str, what: str, min_width: int,
    embedded_nul: bool = False, shape: tuple[int, ...] | None = None,
) -> tuple[np.ndarray, int]:
    """UTF-8 encode a flat StringDType array into an (N, width) NUL-padded uint8 matrix.

    ``embedded_nul`` (NC_CHAR): a NUL inside a value is kept (netcdf-c and xarray end a char
    string only at its trailing NULs); a value ending with NUL is still refused (it would read back
    without them). Otherwise (NC_STRING) any NUL is refused: netcdf-c ends the string there."""
    N = t.size
    if N == 0:
        enc, lengths = np.zeros(0, "S1"), np.zeros(0, np.intp)
    else:
        # A sentinel byte after each value keeps trailing NULs visible: numpy's string
        # functions treat trailing NULs as padding (even np.strings.find(t, "\x00") fails).
        enc = np.strings.encode(np.strings.add(t, "\x01"), "utf-8")
        en = enc.dtype.itemsize
        u8 = enc.view(np.uint8).reshape(N, en)
        lengths = np.strings.str_len(enc) - 1
        if has_embedded_nul(u8):
            z = u8 == 0
            rows = np.flatnonzero((z[:, :-1] & ~z[:, 1:]).any(axis=1))
            if embedded_nul:  # only the NULs right before the sentinel (a value's end) are lost
                rows = rows[(lengths[rows] > 0) & (u8[rows, np.maximum(lengths[rows] - 1, 0)] == 0)]
            if rows.size:
                raise nul_error(what, t, rows, trailing=embedded_nul)
        u8[np.arange(N), lengths] = 0  # drop the sentinel
    longest, width = _resolve_width(lengths, width, min_width, what)
    if longest > width:
        if on_overflow == "error":
            raise overflow_error(what, lengths, width, "UTF-8", t, shape or t.shape)
        if on_overflow == "widen":
            width = longest
        else:  # truncate at a character boundary
            en = enc.dtype.itemsize
            u8 = enc.view(np.uint8).reshape(N, en)  # our own buffer: edit in place
            over = np.flatnonzero(lengths > width)
            cut = np.full(over.size, width, np.intp)
            for _ in range(3):  # back off over continuation bytes (at most 3 in UTF-8)
                cont = (u8[over, cut] & 0xC0) == 0x80
                if not cont.any():
                    break
                cut[cont] -= 1
            sub = u8[over]
            sub[np.arange(en)[None, :] >= cut[:, None]] = 0
            u8[over] = sub
            enc = u8.view(f"S{en}").reshape(N)
            warn_truncated(what, over.size, width, longest)
    if width == 0:
        return np.zeros((N, 0), np.uint8), 0
    fixed = enc.astype(f"S{width}")
    return fixed.view(np.uint8).reshape(N, width), width


def encode_fixed_utf8(
    values: Any,
    width: int | None,
    *,
    on_overflow: OnOverflow = "error",
    what: str = "",
) -> np.ndarray:
    """Encode strings as NUL-padded UTF-8 ``|S{width}`` (NCZarr NC_STRING layout), same shape.

    ``width=None`` uses the longest UTF-8 encoding (at least 1).  Values longer than ``width``
    raise StringOverflowError ("error"), are cut at a character boundary with a
    StringTruncationWarning ("truncate"), or widen the output ("widen").  Values containing NUL
    or lone surrogates raise ZStringsError: netcdf-c could not read them back unchanged.
    """
    check_on_overflow(on_overflow)
    kv = kernel_values(values, what)
    if kv is not None:
        res = utf8_matrix_kernel(kv[0], width, on_overflow, what, min_width=1, shape=kv[1])
        if res is not None:
            return res[0].view(f"S{res[1]}").reshape(kv[1])
    t = to_T_values(values, what)
    shape = t.shape
    mat, w = utf8_matrix(t.reshape(-1), width, on_overflow, what, min_width=1, shape=shape)
    return mat.view(f"S{w}").reshape(shape)




def _resolve_width(lengths: np.ndarray, width: int | None, min_width: int, what: str) -> tuple[int, int]:
    """(longest UTF-8 length, the width to encode at): the longest value when no width is given."""
    longest = int(lengths.max()) if lengths.size else 0
    width = max(min_width, longest) if width is None else int(width)
    if width < min_width:
        raise ZStringsError(f"{what_prefix(what)}width {width} is too small; it must be >= {min_width}")
    return longest, width
