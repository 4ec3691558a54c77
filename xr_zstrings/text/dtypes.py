"""The string kinds a read returns, and conversions between them.

``string_dtype`` (what a user asks for) is resolved here, once: ``"T"`` (default)
:class:`numpy.dtypes.StringDType`, variable-width UTF-8, 16 bytes per element (strings up to 15
bytes stored inline, longer ones in one arena per array); ``"O"`` object array of :class:`str`
(what xarray/pandas used historically); ``"U"`` fixed-width UTF-32, width = the longest value in
code points; ``"bytes"`` the stored bytes, never decoded.  Every decoder ends with
:func:`convert_string_dtype`; Zarr v2 ``<Un``/``>Un`` (UTF-32) and ``|O`` arrays of str convert
here too.  Pure: numpy only.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from ..errors import StringDecodeError, ZStringsError
from .kernels import kernels
from .policy import position_label, what_prefix

__all__ = [
    "NA_T",
    "StringKind",
    "claim_string_dtypes",
    "convert_string_dtype",
    "decode_objects",
    "decode_utf32",
    "empty_T",
    "is_arrow_string_dtype",
    "missing_string_dtype",
    "objects_to_T",
    "resolve_string_dtype",
]

StringKind = Literal["T", "O", "U", "bytes"]

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


def is_arrow_string_dtype(kind: Any) -> bool:
    """``string_dtype="arrow"``: engine="zstrings" reads as "T", then hands 1-D text variables to
    xarray as pandas Arrow-backed arrays (xr_zstrings/xarray_arrow.py); numpy results have no such kind."""
    return isinstance(kind, str) and kind.strip().lower() == "arrow"


# the spellings of each string output kind: names, Python/numpy types, unsized numpy dtypes' kinds
_BY_NAME: dict[str, np.dtype] = {"T": _T, "StringDType": _T, "O": _OBJ, "object": _OBJ, "|O": _OBJ,
                                 "U": _U, "<U": _U, "str": _U, "unicode": _U, "bytes": _S, "S": _S, "|S": _S}
_BY_TYPE: dict[Any, np.dtype] = {np.dtypes.StringDType: _T, bytes: _S, np.bytes_: _S, object: _OBJ, str: _U,
                                 np.str_: _U}
_BY_DTYPE_KIND: dict[str, np.dtype] = {"O": _OBJ, "U": _U, "S": _S}


def _known_string_dtype(kind: Any) -> np.dtype | None:
    """The numpy dtype a ``string_dtype`` spelling names, or None for anything else."""
    if kind is None:
        return _T
    if isinstance(kind, np.dtypes.StringDType):
        return kind
    if isinstance(kind, str):
        return _BY_NAME.get(kind.strip())
    if isinstance(kind, type):
        return _BY_TYPE.get(kind)
    if isinstance(kind, np.dtype) and (kind.kind == "O" or (kind.kind in "US" and kind.itemsize == 0)):
        return _BY_DTYPE_KIND[kind.kind]
    return None


def resolve_string_dtype(kind: Any = "T") -> np.dtype:
    """Map a user's ``string_dtype`` choice ("T"/"O"/"U"/"bytes" or an equivalent dtype) to a numpy dtype.

    Returns ``StringDType()`` (or the given StringDType instance), ``dtype(object)``, the
    unsized ``dtype('<U')`` (the width is computed from the data) or, for "bytes" (also "S",
    ``bytes``), the unsized ``dtype('S')``: the stored bytes, never decoded.  ``None`` means "T".
    """
    found = _known_string_dtype(kind)
    if found is not None:
        return found
    if is_arrow_string_dtype(kind):
        raise ZStringsError(
            "string_dtype='arrow' is an option of xr.open_dataset / open_datatree / open_groups with "
            "engine='zstrings' (pandas Arrow-backed variables); this function returns a numpy array: use "
            "'T' (numpy StringDType), 'O', 'U' or 'bytes' here, or xr_zstrings.read_arrow for an Arrow array"
        )
    raise ZStringsError(
        f"string_dtype={kind!r} is not a string output kind; use 'T' (numpy StringDType, the "
        "default), 'O' (object array of str), 'U' (fixed-width unicode; its width is computed "
        "from the data, so pass plain 'U' rather than a sized dtype such as 'U10') or 'bytes' "
        "(the stored bytes, not decoded); xr.open_dataset(..., engine='zstrings') also takes 'arrow' "
        "(1-D string variables as pandas Arrow-backed arrays)"
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
        arr = objects_to_T(arr, "")
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
            f"{what_prefix(what)}{lost.size} value(s) end with NUL characters, e.g. value {position_label(i, t.shape)} = "
            f"{str(flat[i])!r}, which string_dtype='U' cannot hold (numpy's fixed-width strings drop "
            "trailing NULs). Read with string_dtype='T' (the default) or 'O', which keep every character."
        )


def objects_to_T(arr: np.ndarray, what: str) -> np.ndarray:
    """An object array of str as StringDType; anything else in it (None, bytes, numbers, lone
    surrogates) raises ZStringsError naming the first such element."""
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
                f"{what_prefix(what)}object array element {position_label(i, arr.shape)} is {v!r} of type "
                f"{type(v).__name__}, not str{hint}"
            )
        try:
            v.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ZStringsError(
                f"{what_prefix(what)}element {position_label(i, arr.shape)} {v!r} contains a lone surrogate "
                f"(code point U+{ord(v[e.start]):04X}), which has no UTF-8 encoding"
            ) from None
    raise ZStringsError(f"{what_prefix(what)}could not convert the object array to strings")



def empty_T(shape: int | tuple[int, ...]) -> np.ndarray:
    """A StringDType array of ``shape`` whose every element is ""."""
    return np.zeros(shape, dtype=_T)


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
        raise ZStringsError(f"{what_prefix(what)}expected a <Un or >Un array, got dtype {raw.dtype}")
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
            f"{what_prefix(what)}value {position_label(i // w, raw.shape)} holds code point "
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
        raise ZStringsError(f"{what_prefix(what)}expected an object array of str, got dtype {raw.dtype}")
    if raw.dtype.kind == "O":
        target = resolve_string_dtype(string_dtype)
        if target.kind == "O":
            objects_to_T(raw, what) if raw.size else None  # validate only
            return raw
        return convert_string_dtype(objects_to_T(raw, what), target, what)
    return convert_string_dtype(raw, string_dtype, what)

