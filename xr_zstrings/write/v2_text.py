"""Appended text encoded as a pure Zarr v2 store's own string array holds it (the stores xarray's
and zarr-python's writers make): ``|O`` with ``vlen-utf8`` or ``vlen-bytes``, ``<Un`` (UTF-32 of
``n`` characters); ``|Sn`` goes through the NC_STRING encoder at the stored width.

The stored array decides everything: the width (``on_overflow`` applies; ``widen`` acts as
``error``, as in every append) and what a missing value becomes: the array's fill, which
engine="zarr" and engine="zstrings" read back missing (zarr-python shows the fill), as xarray's own
append writes it. An array with no fill (``fill_value: null``) cannot hold a missing value in a
written chunk (the vlen codecs store ``None`` as ``""``): such values are refused, naming the fix.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ..errors import StringOverflowError, StringTruncationWarning, ZStringsError, user_stacklevel
from ..text.policy import position_label, what_prefix
from .plan import missing_filled

#: the string kinds (``ArrayMetaV2.string_kind``) encoded here; ``string`` (``|Sn``) is the NC_STRING encoder's
OWN_LAYOUTS = frozenset({"vlen", "vlen-bytes", "unicode"})


def missing_fill(meta: Any, *, netcdf_c: bool) -> Any:
    """What a missing value is written as in this pure Zarr v2 string array, or None when it has no
    fill: a CF ``_FillValue`` attribute, else (not a netcdf-c store) the ``.zarray`` ``fill_value``,
    which is what engine="zarr" and engine="zstrings" mask there."""
    if "_FillValue" in meta.attrs:
        return meta.attrs["_FillValue"]
    return None if netcdf_c else meta.fill_value


def fill_missing(values: np.ndarray, fill: Any, *, as_bytes: bool, what: str, where: str) -> np.ndarray:
    """``values`` with their missing ones (None, NaN, a ``StringDType`` NA) as ``fill``; without a
    fill a ``ZStringsError`` naming the count, the first one and the fix (``where``: the array's
    ``.zarray`` key in the store)."""

    def no_fill(n: int, i: int) -> ZStringsError:
        return ZStringsError(
            f"{what_prefix(what)}{n} missing value(s) (None/NaN), e.g. element "
            f"{position_label(i, values.shape)}, but {where} has no fill value (fill_value null), so a missing "
            "value cannot be stored there: zarr-python and engine='zarr' would read it as ''. Fill them first "
            "(e.g. ds[name].fillna('')), or write the store again with a fill value "
            "(encoding={name: {'_FillValue': 'N/A'}}): appends then store a missing value as that fill."
        )

    def stored(fill: Any) -> Any:
        if as_bytes:
            return fill.encode("utf-8") if isinstance(fill, str) else bytes(fill)
        return bytes(fill).decode("utf-8") if isinstance(fill, bytes | np.bytes_) else str(fill)

    return missing_filled(values, fill, no_fill, as_object=as_bytes, convert=stored)


def encode_as_stored(values: np.ndarray, meta: Any, on_overflow: str, what: str, where: str) -> np.ndarray:
    """``values`` (text or bytes, no missing value left) as the storage of ``meta``'s array
    (``OWN_LAYOUTS``): objects for the vlen codecs, ``<Un`` cut or refused at the stored width."""
    arr = np.asarray(values)
    kind = meta.string_kind
    if kind == "vlen-bytes":
        return _objects(arr, as_bytes=True, what=what)
    if kind == "vlen":
        return _objects(arr, as_bytes=False, what=what)
    if kind == "unicode":
        return _unicode(arr, meta.dtype, on_overflow, what, where)
    raise AssertionError(f"not a layout of its own: {kind!r}")


def _objects(arr: np.ndarray, *, as_bytes: bool, what: str) -> np.ndarray:
    """An object array of ``str`` (``vlen-utf8``) or ``bytes`` (``vlen-bytes``); a value the codec
    cannot write faithfully (a lone surrogate, bytes that are not UTF-8 for text) is refused."""
    out = np.empty(arr.shape, dtype=object)
    flat = out.reshape(-1)
    for i, v in enumerate(arr.reshape(-1).tolist()):
        try:
            if as_bytes:
                flat[i] = v.encode("utf-8") if isinstance(v, str) else bytes(v)
            else:
                flat[i] = v.decode("utf-8") if isinstance(v, bytes) else str(v)
                flat[i].encode("utf-8")  # (vlen-utf8 stores UTF-8: a lone surrogate has none)
        except (UnicodeError, TypeError) as e:
            raise ZStringsError(
                f"{what_prefix(what)}value {position_label(i, arr.shape)} = {v!r} cannot be stored as "
                f"{'vlen-bytes' if as_bytes else 'vlen-utf8'} ({e}). Replace it (e.g. with .str.encode / "
                ".str.decode) before appending."
            ) from None
    return out


def _unicode(arr: np.ndarray, dtype: np.dtype, on_overflow: str, what: str, where: str) -> np.ndarray:
    """``<Un``: each value at most ``n`` characters (``on_overflow``: ``truncate`` cuts and warns,
    otherwise a ``StringOverflowError``); a value ending in NUL is refused (``<U`` drops trailing
    NULs: it would read back shorter)."""
    n = dtype.itemsize // 4
    if arr.dtype.kind not in "UT":
        arr = _objects(arr, as_bytes=False, what=what)
    # (in Python: numpy 2.4's StringDType string functions miscount trailing NULs)
    values = [str(v) for v in arr.reshape(-1).tolist()]
    lengths = np.fromiter((len(v) for v in values), np.int64, count=len(values))
    over = lengths > n
    if over.any():
        i = int(np.argmax(lengths))
        longest = int(lengths[i])
        if on_overflow != "truncate":
            value = repr(values[i])
            value = value if len(value) <= 60 else value[:50] + "..." + value[-7:]
            raise StringOverflowError(
                f"{what_prefix(what)}{int(over.sum())} value(s) do not fit: the longest, value "
                f"{position_label(i, arr.shape)} = {value}, has {longest} characters but {where} stores "
                f"{dtype.str} ({n} characters). An append keeps the stored width: pass on_overflow='truncate' "
                "to cut them (with a StringTruncationWarning), shorten the values, or rewrite the whole "
                "variable with a wider dtype."
            )
        warnings.warn(StringTruncationWarning(
            f"{what_prefix(what)}{int(over.sum())} value(s) longer than {n} characters (longest {longest}) "
            f"were cut to the {dtype.str} that {where} stores"), stacklevel=user_stacklevel())
        values = [v[:n] for v in values]
    ends_nul = [i for i, v in enumerate(values) if v.endswith("\x00")]
    if ends_nul:
        i = ends_nul[0]
        raise ZStringsError(
            f"{what_prefix(what)}{len(ends_nul)} value(s) end with NUL, e.g. value {position_label(i, arr.shape)} "
            f"= {values[i]!r}: {where} stores {dtype.str}, which drops trailing NULs (it would read back "
            "without them). Strip them (e.g. .str.rstrip('\\x00')) before appending."
        )
    return np.array(values, dtype=dtype).reshape(arr.shape)
