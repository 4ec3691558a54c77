"""Pure numpy conversions between stored string layouts and Python/numpy strings.

Covers NCZarr NC_STRING (``|Sn``, NUL padded, value ends at the first NUL, as netcdf-c does),
NCZarr NC_CHAR (``S1`` with a last string-length dimension, or old-style ``<U1``), Zarr v2
``<Un``/``>Un`` (UTF-32) and ``|O`` (vlen-utf8) arrays.  No xarray or zarr imports here: this
module is the hot path and must stay importable and testable on its own.

Output string dtype ("string_dtype"):
  * ``"T"`` (default) -- :class:`numpy.dtypes.StringDType`, variable-width UTF-8, 16 bytes per
    element (strings up to 15 bytes stored inline, longer ones in one arena per array);
  * ``"O"`` -- object array of :class:`str` (what xarray/pandas used historically);
  * ``"U"`` -- fixed-width UTF-32, width = the longest value in code points.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import re
import threading
import warnings
from collections.abc import Iterator
from typing import Any, Literal

import numpy as np

from ..errors import (
    StringDecodeError,
    StringDecodeWarning,
    StringOverflowError,
    StringTruncationWarning,
    ZStringsError,
)
from ..scratch import ThreadScratch

__all__ = [
    "NA_T",
    "OnOverflow",
    "StringKind",
    "Utf8Errors",
    "convert_string_dtype",
    "decode_char_array",
    "decode_fixed_into",
    "decode_fixed_utf8",
    "decode_objects",
    "decode_utf32",
    "encode_char_array",
    "encode_fixed_utf8",
    "kernels",
    "missing_string_dtype",
    "overflow_error",
    "resolve_string_dtype",
    "reused_output",
]

Utf8Errors = Literal["drop", "replace", "strict"]
StringKind = Literal["T", "O", "U", "bytes"]
OnOverflow = Literal["error", "truncate", "widen"]

_T = np.dtypes.StringDType()
_T_STRICT = np.dtypes.StringDType(coerce=False)  # refuses non-str objects instead of str()-ing them
_OBJ = np.dtype(object)
_U = np.dtype("U")
_S = np.dtype("S")  # string_dtype="bytes": the stored bytes, never decoded
# the missing-value dtype: numpy's StringDType with NaN as its NA, which is what pandas' "str"
# dtype (na_value NaN) and xarray's index adapter give back, what engine="netcdf4" puts in object
# arrays, and what xarray's isnull() detects with np.isnan (docs/format-notes.md, "Missing values")
NA_T = np.dtypes.StringDType(na_object=np.nan)


def claim_string_dtypes(*dtypes: np.dtype) -> list[np.ndarray]:
    """Claim module-level StringDType instances with empty arrays (keep the result).

    A StringDType instance holds the string storage (its arena) of the first array made with it
    until the instance itself is freed: a module-level instance lives as long as the process, so
    the first array made with it (a decoded chunk, or a whole read) would keep its strings in
    memory for good. Once an empty array owns the instance, every array made with it gets an
    instance of its own, freed with the array."""
    return [np.empty(0, dtype=t) for t in dtypes]


_CLAIMED = claim_string_dtypes(_T, _T_STRICT, NA_T)

_UTF8_ERRORS = ("drop", "replace", "strict")
_ON_OVERFLOW = ("error", "truncate", "widen")

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

_POLICY_CODE = {"strict": 0, "drop": 1, "replace": 2}
_kernels_mod: Any = None
# why the compiled kernels are not in use (None while they are, or before the first kernels() call)
kernels_unavailable_reason: str | None = None
NO_EXT_ENV = "XR_ZSTRINGS_NO_EXT"
# written next to the package by setup.py when the kernels failed to build (the compiler's error)
BUILD_ERROR_FILE = "_kernels_build_error.txt"


def kernels() -> Any:
    """The compiled kernels module (``xr_zstrings.text._kernels``), or None.

    None when the extension was not built (no C compiler at install time) or when the
    environment variable ``XR_ZSTRINGS_NO_EXT=1`` forces the pure numpy/pyarrow fallback (read
    on every call, so tests can switch paths).  Both paths give identical results and errors.
    A missing extension warns once per process (RuntimeWarning) with the build's error.
    """
    global _kernels_mod, kernels_unavailable_reason
    if os.environ.get(NO_EXT_ENV, "") not in ("", "0"):
        kernels_unavailable_reason = f"{NO_EXT_ENV}=1 forces the pure-Python fallback"
        return None
    if _kernels_mod is None:
        mod: Any  # the module, or False: the build failed (warned once)
        try:
            from . import _kernels as mod

            kernels_unavailable_reason = None
        except ImportError as e:
            mod = False
            kernels_unavailable_reason = _build_failure() or f"xr_zstrings.text._kernels cannot be imported: {e}"
            warnings.warn(
                f"xr_zstrings: the compiled string kernels are not in use ({kernels_unavailable_reason}); "
                "running on the pure numpy/pyarrow fallback: same results, several times slower. "
                "Fix: install a C compiler (gcc or clang) and reinstall xr_zstrings (pip install -v "
                f"shows the build); set {NO_EXT_ENV}=1 to use the fallback without this warning",
                RuntimeWarning,
                stacklevel=2,
            )
        _kernels_mod = mod
    elif _kernels_mod:
        kernels_unavailable_reason = None
    return _kernels_mod or None


def _build_failure() -> str | None:
    """The build error setup.py recorded at install time, if the kernels failed to build."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), BUILD_ERROR_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read().strip()
    except OSError:
        return None
    return f"the build at install time failed: {text.splitlines()[0][:300]}" if text else None


# --------------------------------------------------------------------------------------------
# dtype handling
# --------------------------------------------------------------------------------------------


def resolve_string_dtype(kind: Any = "T") -> np.dtype:
    """Map a user's ``string_dtype`` choice ("T"/"O"/"U"/"bytes" or an equivalent dtype) to a numpy dtype.

    Returns ``StringDType()`` (or the given StringDType instance), ``dtype(object)``, the
    unsized ``dtype('<U')`` (the width is computed from the data) or, for "bytes" (also "S",
    ``bytes``), the unsized ``dtype('S')``: the stored bytes, never decoded.  ``None`` means "T".
    """
    if kind is None:
        return _T
    if isinstance(kind, np.dtypes.StringDType):
        return kind
    if kind is np.dtypes.StringDType:
        return _T
    if isinstance(kind, str):
        key = kind.strip()
        if key in ("T", "StringDType"):
            return _T
        if key in ("O", "object", "|O"):
            return _OBJ
        if key in ("U", "<U", "str", "unicode"):
            return _U
        if key in ("bytes", "S", "|S"):
            return _S
    elif kind is bytes or kind is np.bytes_:
        return _S
    elif kind is object:
        return _OBJ
    elif kind is str or kind is np.str_:
        return _U
    elif isinstance(kind, np.dtype):
        if kind.kind == "O":
            return _OBJ
        if kind.kind == "U" and kind.itemsize == 0:
            return _U
        if kind.kind == "S" and kind.itemsize == 0:
            return _S
    raise ZStringsError(
        f"string_dtype={kind!r} is not a string output kind; use 'T' (numpy StringDType, the "
        "default), 'O' (object array of str), 'U' (fixed-width unicode; its width is computed "
        "from the data, so pass plain 'U' rather than a sized dtype such as 'U10') or 'bytes' "
        "(the stored bytes, not decoded)"
    )


def missing_string_dtype(string_dtype: Any = "T") -> np.dtype:
    """The result dtype of a string variable that can hold missing values.

    StringDType gets an NA object (``NA_T`` unless the given StringDType has one); object stays
    object (missing = NaN); fixed-width ``U`` cannot hold a missing value and becomes object, as
    engine="netcdf4" returns masked strings.
    """
    target = resolve_string_dtype(string_dtype)
    if target.kind == "T":
        return target if hasattr(target, "na_object") else NA_T
    return _OBJ


def convert_string_dtype(arr: Any, string_dtype: Any = "T", what: str = "") -> np.ndarray:
    """Convert any array of str (StringDType, object of str, or U) to the requested kind.

    Used as the last step of every decoder so they all honour ``string_dtype`` the same way.
    A ``U`` array cannot hold trailing NULs (numpy strips them): values ending with NUL raise
    ZStringsError (naming the first) rather than change silently.
    """
    target = resolve_string_dtype(string_dtype)
    if target.kind == "S":
        raise ZStringsError(
            "string_dtype='bytes' keeps the stored bytes: there is nothing to convert an array of "
            "str to; encode it (np.strings.encode) if you want bytes"
        )
    arr = np.asarray(arr)
    k = arr.dtype.kind
    if k not in "TUO":
        raise ZStringsError(
            f"convert_string_dtype expects an array of str (StringDType, object or U), got dtype "
            f"{arr.dtype}; decode bytes first with decode_fixed_utf8 or decode_char_array"
        )
    if k == "O":
        arr = _objects_to_T(arr, "")
        k = "T"
    elif k == "U" and not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if target.kind == "T":
        return arr if arr.dtype == target else arr.astype(target)
    if target.kind == "O":
        K = kernels()
        if K is not None and k == "T" and not hasattr(arr.dtype, "na_object"):
            return K.T_to_objects(np.ascontiguousarray(arr))  # astype(object), ASCII fast path
        return arr.astype(_OBJ)
    # U: fixed width = longest value in code points (at least 1)
    if k == "U":
        return arr
    width = int(np.strings.str_len(arr).max()) if arr.size else 1
    out = arr.astype(f"U{max(width, 1)}")
    _refuse_trailing_nuls(arr, out, what)
    return out


def _refuse_trailing_nuls(t: np.ndarray, u: np.ndarray, what: str) -> None:
    """Raise when a StringDType value ends with NUL: numpy's fixed-width ``U`` (``u``) dropped it.

    The compiled scan finds any NUL at C speed (valid data pay only that); only then, and always
    on the fallback, each value's length with a sentinel appended (numpy 2.4's string functions
    treat a StringDType's trailing NULs as padding; 2.5's do not) is compared with its length in
    ``u``."""
    if t.size == 0:
        return
    flat = np.ascontiguousarray(t).reshape(-1)
    K = kernels()
    if K is not None and getattr(t.dtype, "na_object", None) is None and K.utf8_scan(flat, False)[0] == 0:
        return  # no NUL (or other oddity) anywhere
    full = np.strings.str_len(np.strings.add(flat, "\x01")) - 1
    lost = np.flatnonzero(full != np.strings.str_len(u.reshape(-1)))
    if lost.size:
        i = int(lost[0])
        raise ZStringsError(
            f"{_ctx(what)}{lost.size} value(s) end with NUL characters, e.g. value {position_label(i, t.shape)} = "
            f"{str(flat[i])!r}, which string_dtype='U' cannot hold (numpy's fixed-width strings drop "
            "trailing NULs). Read with string_dtype='T' (the default) or 'O', which keep every character."
        )


def _objects_to_T(arr: np.ndarray, what: str) -> np.ndarray:
    try:
        return arr.astype(_T_STRICT).astype(_T)
    except (ValueError, TypeError, UnicodeError):
        pass
    flat = arr.reshape(-1)
    for i, v in enumerate(flat):
        if not isinstance(v, str):
            hint = (
                " (bytes: decode them first, e.g. with decode_fixed_utf8)"
                if isinstance(v, (bytes, np.bytes_))
                else ""
            )
            raise ZStringsError(
                f"{_ctx(what)}object array element {position_label(i, arr.shape)} is {v!r} of type "
                f"{type(v).__name__}, not str{hint}"
            )
        try:
            v.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ZStringsError(
                f"{_ctx(what)}element {position_label(i, arr.shape)} {v!r} contains a lone surrogate "
                f"(code point U+{ord(v[e.start]):04X}), which has no UTF-8 encoding"
            ) from None
    raise ZStringsError(f"{_ctx(what)}could not convert the object array to strings")


# --------------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------------


def _ctx(what: str) -> str:
    return f"{what}: " if what else ""


def position_label(i: int, shape: tuple[int, ...]) -> str:
    """Where flat value ``i`` of an array of ``shape`` is, in the whole variable: inside
    ``at_offset`` (a dask block being written) the block's start is added."""
    idx = [i] if len(shape) <= 1 else [int(x) for x in np.unravel_index(i, shape)]
    offset = getattr(_active, "offset", ())
    idx = [a + b for a, b in zip(idx, offset, strict=False)] + idx[len(offset):]
    return f"[{idx[0]}]" if len(idx) == 1 else str(tuple(idx))


@contextlib.contextmanager
def at_offset(offset: tuple[int, ...], block: str | None = "the dask block") -> Iterator[None]:
    """Values encoded in this thread are a part starting at ``offset`` of the values the user gave:
    errors name positions in the whole (``position_label``) and, if ``block`` names the part, where
    that part starts."""
    prev = getattr(_active, "offset", ()), getattr(_active, "block", None)
    _active.offset, _active.block = tuple(int(x) for x in offset), block
    try:
        yield
    finally:
        _active.offset, _active.block = prev


@contextlib.contextmanager
def stored_width(why: str) -> Iterator[None]:
    """Widths in this thread cannot change (``why``: e.g. an append keeps the stored width):
    overflow errors advise what can be done instead of ``on_overflow='widen'``."""
    prev = getattr(_active, "stored_width", None)
    _active.stored_width = why
    try:
        yield
    finally:
        _active.stored_width = prev


def check_utf8_errors(utf8_errors: str) -> str:
    """Validate a UTF-8 policy name, naming the choices when it is wrong."""
    if utf8_errors not in _UTF8_ERRORS:
        raise ZStringsError(
            f"Invalid utf8_errors={utf8_errors!r}: expected one of {_UTF8_ERRORS} ('drop' removes a "
            "character netcdf-c cut in half, 'replace' uses U+FFFD, 'strict' raises)."
        )
    return utf8_errors


def _resolve_width(lengths: np.ndarray, width: int | None, min_width: int, what: str) -> tuple[int, int]:
    """(longest UTF-8 length, the width to encode at): the longest value when no width is given."""
    longest = int(lengths.max()) if lengths.size else 0
    width = max(min_width, longest) if width is None else int(width)
    if width < min_width:
        raise ZStringsError(f"{_ctx(what)}width {width} is too small; it must be >= {min_width}")
    return longest, width


def _warn_truncated(what: str, count: int, width: int, longest: int) -> None:
    """The one truncation warning both encode paths give (count, width, longest value)."""
    warnings.warn(
        StringTruncationWarning(
            f"{_ctx(what)}{count} value(s) longer than {width} bytes of UTF-8 "
            f"(longest {longest}) were cut at a character boundary"
        ),
        stacklevel=4,
    )


def check_on_overflow(on_overflow: str) -> str:
    if on_overflow not in _ON_OVERFLOW:
        raise ZStringsError(f"on_overflow={on_overflow!r}; expected one of {_ON_OVERFLOW}")
    return on_overflow


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


def _empty_T(shape: int | tuple[int, ...]) -> np.ndarray:
    return np.zeros(shape, dtype=_T)  # every element is ""


# --------------------------------------------------------------------------------------------
# policy reports: every value a utf8_errors policy changes is counted and warned about
# --------------------------------------------------------------------------------------------


class PolicyChanges:
    """What a ``utf8_errors`` policy changed during one read: per kind ("drop" / "replace") the
    number of values and the first one (by position).  Thread-safe: chunks decode on threads."""

    def __init__(self, what: str = "") -> None:
        self.what = what
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.first: dict[str, tuple[Any, str, bytes, str]] = {}

    def add(self, kind: str, count: int, where: str, before: bytes, after: str) -> None:
        """``count`` values changed by ``kind``; ``where``/``before``/``after`` describe one of them."""
        if count <= 0:
            return
        key = (tuple(int(x) for x in re.findall(r"\d+", where)), where)
        with self._lock:
            self.counts[kind] = self.counts.get(kind, 0) + int(count)
            old = self.first.get(kind)
            if old is None or key < old[0]:
                self.first[kind] = (key, where, before, after)

    def warn(self, stacklevel: int = 3) -> None:
        """One StringDecodeWarning per kind of change (nothing when nothing changed)."""
        for kind in ("drop", "replace"):
            n = self.counts.get(kind, 0)
            if not n:
                continue
            _, where, before, after = self.first[kind]
            if kind == "drop":
                what_happened = (
                    f"utf8_errors='drop' removed an incomplete UTF-8 character from the end of {n} "
                    "value(s) (what netcdf-c's byte truncation leaves)"
                )
            else:
                what_happened = f"utf8_errors='replace' put U+FFFD for invalid UTF-8 into {n} value(s)"
            warnings.warn(
                StringDecodeWarning(
                    f"{_ctx(self.what)}{what_happened}; the first is {where}: stored {before!r}, read "
                    f"as {after!r}. Pass utf8_errors='strict' to raise instead, or "
                    "string_dtype='bytes' to read the stored bytes."
                ),
                stacklevel=stacklevel,
            )


_active = threading.local()


def active_changes() -> PolicyChanges | None:
    """The PolicyChanges the current thread reports into (None: report by warning at once)."""
    return getattr(_active, "changes", None)


@contextlib.contextmanager
def reporting(changes: PolicyChanges | None) -> Iterator[PolicyChanges | None]:
    """Make this thread report policy changes into ``changes`` (a read's worker threads use the
    caller's); None leaves the thread as it is."""
    if changes is None:
        yield active_changes()
        return
    prev = active_changes()
    _active.changes = changes
    try:
        yield changes
    finally:
        _active.changes = prev


@contextlib.contextmanager
def policy_scope(what: str = "", stacklevel: int = 4) -> Iterator[PolicyChanges]:
    """Collect the policy changes of one public call and warn once at its end; inside an outer
    scope (a whole read), report into that one instead."""
    outer = active_changes()
    if outer is not None:
        yield outer
        return
    changes = PolicyChanges(what)
    _active.changes = changes
    try:
        yield changes
    finally:
        _active.changes = None
    changes.warn(stacklevel=stacklevel)


def current_chunk() -> str:
    """The chunk this thread is decoding (set by the reader), for naming variable-length values."""
    return getattr(_active, "chunk", "")


@contextlib.contextmanager
def in_chunk(label: str) -> Iterator[None]:
    """Name the chunk being decoded in this thread (``current_chunk``) while the block runs."""
    prev = current_chunk()
    _active.chunk = label
    try:
        yield
    finally:
        _active.chunk = prev


def report_change(kind: str, count: int, where: str, before: bytes, after: str) -> None:
    """Record that a policy changed ``count`` values (into the active scope, else warn now)."""
    changes = active_changes()
    if changes is None:
        changes = PolicyChanges()
        changes.add(kind, count, where, before, after)
        changes.warn(stacklevel=4)
    else:
        changes.add(kind, count, where, before, after)


# --------------------------------------------------------------------------------------------
# fixed-width UTF-8 (NC_STRING as |Sn)
# --------------------------------------------------------------------------------------------


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
        f"{_ctx(what)}expected fixed-width bytes (|Sn) or a uint8 array shaped (..., n), got "
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
        f"{_ctx(what)}value {idx} is not valid UTF-8 ({err.reason} at byte {err.start}: "
        f"{value!r}) under utf8_errors={policy!r}; {fix}"
    )


_pa: Any = None


def _arrow() -> Any:
    """pyarrow, imported on first use (it validates UTF-8 at ~100 M strings/s), or None."""
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


def _decode_flat_utf8(flat: np.ndarray, n: int, policy: str, what: str, shape: tuple,
                      trailing: bool = False) -> np.ndarray:
    """Decode a 1-D contiguous |Sn array to StringDType: a value ends at its first NUL (netcdf-c's
    NC_STRING), or with ``trailing`` only trailing NULs are stripped (NC_CHAR, as netCDF4/xarray)."""
    N = flat.size
    if N == 0 or n == 0:
        return _empty_T(N)
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
    raise or become U+FFFD exactly as the numpy fallback (``_decode_flat_utf8``) does.
    """
    K = kernels()
    stats = np.zeros(2, np.int64) if policy == "drop" else None
    bad = K.fixed_to_T(buf, n, out, sel, _POLICY_CODE[policy], trailing, stats)
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
            raise StringDecodeError(f"{_ctx(what)}value {index(k)} is not valid UTF-8: {b!r}")
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
        out = _decode_flat_utf8(flat, n, policy, what, shape, trailing=trailing)
    return convert_string_dtype(out.reshape(shape), target, what)


def _to_T_values(values: Any, what: str) -> np.ndarray:
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
            return _objects_to_T(arr.astype(object), what)  # finds and names the bad value
    if k == "O":
        return _objects_to_T(arr, what)
    if k == "S":
        raise ZStringsError(
            f"{_ctx(what)}expected str values but got bytes (dtype {arr.dtype}); decode them "
            "first (they may already be in the stored layout)"
        )
    raise ZStringsError(f"{_ctx(what)}expected str values, got an array of dtype {arr.dtype}")


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


def _nul_error(what: str, t: np.ndarray, rows: np.ndarray, trailing: bool = False) -> ZStringsError:
    i = int(rows[0])
    if trailing:  # NC_CHAR
        return ZStringsError(
            f"{_ctx(what)}{rows.size} value(s) end with a NUL character, e.g. value "
            f"{position_label(i, t.shape)} = {t.reshape(-1)[i]!r}; NC_CHAR keeps NULs inside a value but "
            "netcdf-c and xarray drop the trailing ones when reading, so these cannot be written "
            "faithfully -- remove the trailing NULs"
        )
    return ZStringsError(
        f"{_ctx(what)}{rows.size} value(s) contain a NUL character, e.g. value "
        f"{position_label(i, t.shape)} = {t.reshape(-1)[i]!r}; netcdf-c ends an NC_STRING value at its "
        "first NUL, so such values cannot be written faithfully as NC_STRING -- write the variable "
        "as NC_CHAR (encoding={'nc_type': 'NC_CHAR'}), which keeps NULs inside a value, or remove "
        "or replace the NULs"
    )


def overflow_error(what: str, lengths: Any, width: int, unit: str, values: Any,
                    shape: tuple[int, ...]) -> StringOverflowError:
    """Values longer than ``width`` (``lengths``: encoded length of each flat value of ``values``,
    an array of ``shape``; ``unit`` their encoding): how many, the longest one (its position in the
    variable, its value and length), and the fix (see ``stored_width``)."""
    lengths = np.asarray(lengths)
    i = int(np.argmax(lengths))
    longest = int(lengths[i])
    value = np.asarray(values).reshape(-1)[i]
    value = repr(value.item() if isinstance(value, np.generic) else value)
    value = value if len(value) <= 60 else value[:50] + "..." + value[-7:]
    why = getattr(_active, "stored_width", None)
    fix = (f"Pass on_overflow='widen' to use width {longest}, or on_overflow='truncate' to cut them "
           "at a character boundary (with a StringTruncationWarning), or shorten the values"
           if why is None else
           f"{why}: pass on_overflow='truncate' to cut them at a character boundary (with a "
           f"StringTruncationWarning), shorten the values, or rewrite the whole variable with "
           f"maxstrlen={longest} or more")
    part = getattr(_active, "block", None) if getattr(_active, "offset", ()) else None
    block = f" of {part} at {position_label(0, shape)}" if part else ""
    return StringOverflowError(
        f"{_ctx(what)}{int((lengths > width).sum())} value(s){block} do not fit: the longest, value "
        f"{position_label(i, shape)} = {value}, needs {longest} bytes{f' of {unit}' if unit else ''} but the "
        f"width is {width} bytes. {fix}"
    )


def _kernel_values(values: Any, what: str) -> tuple[np.ndarray, tuple[int, ...]] | None:
    """(flat C-contiguous StringDType/object array the kernels can encode, shape), or None."""
    if kernels() is None:
        return None
    arr = values if isinstance(values, np.ndarray) else np.array(values, dtype=object)
    if arr.dtype.kind == "U":
        arr = _to_T_values(arr, what)
    if arr.dtype.kind not in "TO":
        return None
    return np.ascontiguousarray(arr).reshape(-1), arr.shape


# A writer's block encodings may go into one buffer per thread instead of fresh memory: each fresh
# 32 MB chunk (np.zeros) cost a page fault per 4 KiB once dask's workers return freed memory to the
# system (the memcpy into those pages was a quarter of a worker's busy time writing 1e6-string |S32
# chunks); see reused_output. Encodings over the cap get fresh memory.
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


def _utf8_matrix_kernel(
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
                _warn_truncated(what, int((lengths > width).sum()), width, longest)
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
            return _utf8_matrix_kernel(flat, longest, on_overflow, what, min_width)
        _warn_truncated(what, n_over, width, longest)
    return mat, width


def _utf8_matrix(
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
                raise _nul_error(what, t, rows, trailing=embedded_nul)
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
            _warn_truncated(what, over.size, width, longest)
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
    kv = _kernel_values(values, what)
    if kv is not None:
        res = _utf8_matrix_kernel(kv[0], width, on_overflow, what, min_width=1, shape=kv[1])
        if res is not None:
            return res[0].view(f"S{res[1]}").reshape(kv[1])
    t = _to_T_values(values, what)
    shape = t.shape
    mat, w = _utf8_matrix(t.reshape(-1), width, on_overflow, what, min_width=1, shape=shape)
    return mat.view(f"S{w}").reshape(shape)


# --------------------------------------------------------------------------------------------
# UTF-32 (Zarr v2 <Un / >Un) and object arrays
# --------------------------------------------------------------------------------------------


def decode_utf32(raw: np.ndarray, *, string_dtype: Any = "T", what: str = "") -> np.ndarray:
    """Convert a Zarr v2 ``<Un``/``>Un`` (UTF-32, NUL padded) array to the chosen string kind.

    numpy semantics apply (trailing NULs stripped).  Big-endian input is byte-swapped first
    (numpy 2.4 cannot cast ``>U`` to StringDType directly).  Invalid code points raise.
    """
    raw = np.asarray(raw)
    if raw.dtype.kind != "U":
        raise ZStringsError(f"{_ctx(what)}expected a <Un or >Un array, got dtype {raw.dtype}")
    if not raw.dtype.isnative:
        raw = raw.astype(raw.dtype.newbyteorder("="))
    try:
        out = raw.astype(_T)
    except (TypeError, UnicodeError, ValueError):
        cps = raw.reshape(-1).view(np.uint32) if raw.dtype.itemsize else np.zeros(0, np.uint32)
        bad = (cps > 0x10FFFF) | ((cps >= 0xD800) & (cps <= 0xDFFF))
        i = int(np.flatnonzero(bad)[0]) if bad.any() else 0
        w = max(raw.dtype.itemsize // 4, 1)
        raise StringDecodeError(
            f"{_ctx(what)}value {position_label(i // w, raw.shape)} holds code point "
            f"0x{int(cps[i]) if bad.any() else 0:X}, which is not a Unicode scalar value "
            "(surrogate or above U+10FFFF); the UTF-32 data is corrupt or not text"
        ) from None
    return convert_string_dtype(out, string_dtype)


def decode_objects(raw: np.ndarray, *, string_dtype: Any = "T", what: str = "") -> np.ndarray:
    """Convert an object array of str (e.g. from the vlen-utf8 codec) to the chosen kind.

    Non-str elements (None, bytes, numbers) raise ZStringsError naming the first one.
    """
    raw = np.asarray(raw)
    if raw.dtype.kind not in "OTU":
        raise ZStringsError(f"{_ctx(what)}expected an object array of str, got dtype {raw.dtype}")
    if raw.dtype.kind == "O":
        target = resolve_string_dtype(string_dtype)
        if target.kind == "O":
            _objects_to_T(raw, what) if raw.size else None  # validate only
            return raw
        return convert_string_dtype(_objects_to_T(raw, what), target, what)
    return convert_string_dtype(raw, string_dtype, what)


# --------------------------------------------------------------------------------------------
# NC_CHAR: S1 (..., nchar) <-> strings
# --------------------------------------------------------------------------------------------


def char_bytes(raw: Any, what: str) -> np.ndarray:
    """(..., nchar) uint8 matrix from S1 bytes, uint8, or old-NCZarr <U1 (one byte per element)."""
    raw = np.asarray(raw)
    if raw.ndim == 0:
        raise ZStringsError(
            f"{_ctx(what)}a char array needs a last (string length) dimension; got a scalar"
        )
    k, size = raw.dtype.kind, raw.dtype.itemsize
    if (k == "S" and size == 1) or (k in "ui" and size == 1):
        return np.ascontiguousarray(raw).view(np.uint8)
    if k == "U" and size == 4:
        cps: np.ndarray = np.ascontiguousarray(raw.astype(raw.dtype.newbyteorder("="))).view(np.uint32)
        if cps.size and int(cps.max()) > 0xFF:
            i = int(np.argmax(cps > 0xFF))
            raise StringDecodeError(
                f"{_ctx(what)}old-style <U1 char data must hold one byte (code point < 256) per "
                f"element, but element {position_label(i, raw.shape)} is U+{int(cps.reshape(-1)[i]):04X}"
            )
        return cps.astype(np.uint8)
    raise ZStringsError(
        f"{_ctx(what)}expected a char array of dtype S1 (or old NCZarr <U1), got {raw.dtype}"
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
        return convert_string_dtype(_empty_T(shape), target)
    mat = u8.reshape(N, n)
    flat = mat.view(f"S{n}").reshape(N)
    with policy_scope(what):
        out = _decode_char_flat(mat, flat, enc, n, N, policy, what, shape)
    return convert_string_dtype(out.reshape(shape), target)


def _decode_char_flat(
    mat: np.ndarray, flat: np.ndarray, enc: str, n: int, N: int, policy: str, what: str, shape: tuple
) -> np.ndarray:
    if enc == "utf-8":
        out = _decode_flat_utf8(flat, n, policy, what, shape, trailing=True)
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
                    f"{_ctx(what)}value {position_label(i, shape)} is not valid {enc} ({e.reason} at "
                    f"byte {e.start}: {b!r}); check the _Encoding attribute, or pass "
                    "utf8_errors='replace' to turn undecodable bytes into U+FFFD"
                ) from None
            vals.append(b.decode(enc, "replace"))
            replaced.append((i, b))
    if replaced:
        i, b = replaced[0]
        report_change("replace", len(replaced), f"value {position_label(i, shape)} ({enc})", b, vals[i])
    return np.array(vals, dtype=_T) if vals else _empty_T(0)


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
        kv = _kernel_values(values, what)
        if kv is not None:
            res = _utf8_matrix_kernel(kv[0], nchar, on_overflow, what, min_width=0, shape=kv[1])
            if res is not None:
                return res[0].view("S1").reshape(kv[1] + (res[1],))
    t = _to_T_values(values, what)
    shape = t.shape
    flat = t.reshape(-1)
    if enc == "utf-8":
        mat, w = _utf8_matrix(flat, nchar, on_overflow, what, min_width=0, embedded_nul=True, shape=shape)
    else:
        mat, w = _codec_matrix(flat, nchar, enc, on_overflow, what, embedded_nul=True, shape=shape)
    return mat.view("S1").reshape(shape + (w,))


def _codec_matrix(
    flat: np.ndarray, width: int | None, enc: str, on_overflow: str, what: str, embedded_nul: bool = False,
    shape: tuple[int, ...] | None = None,
) -> tuple[np.ndarray, int]:
    strs = flat.tolist()
    nul = np.array([i for i, x in enumerate(strs) if (x.endswith("\x00") if embedded_nul else "\x00" in x)],
                   dtype=np.intp)
    if nul.size:
        raise _nul_error(what, flat, nul, trailing=embedded_nul)
    encoded = []
    for i, s in enumerate(strs):
        try:
            b = s.encode(enc)
        except UnicodeEncodeError as e:
            raise ZStringsError(
                f"{_ctx(what)}value {position_label(i, flat.shape)} {s!r} cannot be encoded as {enc} "
                f"({e.reason}: {s[e.start:e.end]!r}); use encoding='utf-8' or change the value"
            ) from None
        if b"\x00" in b and not (embedded_nul and "\x00" in s and not b.endswith(b"\x00")):
            raise ZStringsError(
                f"{_ctx(what)}encoding {enc} turns value {position_label(i, flat.shape)} {s!r} into bytes "
                "containing NUL, which netcdf-c reads as the end of the string; use utf-8"
            )
        encoded.append(b)
    lengths = [len(b) for b in encoded]
    longest = max(lengths, default=0)
    if width is None:
        width = max(1, longest)
    width = int(width)
    if width < 0:
        raise ZStringsError(f"{_ctx(what)}nchar {width} must be >= 0")
    if longest > width:
        if on_overflow == "error":
            raise overflow_error(what, lengths, width, enc, flat, shape or flat.shape)
        if on_overflow == "widen":
            width = longest
        else:
            cut = 0
            for i, b in enumerate(encoded):
                if len(b) > width:
                    s = strs[i]
                    k = min(len(s), width)
                    while len(s[:k].encode(enc)) > width:
                        k -= 1
                    encoded[i] = s[:k].encode(enc)
                    cut += 1
            warnings.warn(
                StringTruncationWarning(
                    f"{_ctx(what)}{cut} value(s) longer than {width} bytes of {enc} "
                    f"(longest {longest}) were cut at a character boundary"
                ),
                stacklevel=3,
            )
    if width == 0:
        return np.zeros((len(encoded), 0), np.uint8), 0
    arr = np.array(encoded, dtype=f"S{width}") if encoded else np.zeros(0, f"S{width}")
    return arr.view(np.uint8).reshape(len(encoded), width), width
