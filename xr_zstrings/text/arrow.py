"""Stored string layouts -> Arrow arrays built straight from the stored buffers, and Arrow ->
numpy StringDType in one pass (:func:`arrow_to_stringdtype`, public).

Text becomes ``pa.large_string()``, bytes ``pa.large_binary()``; missing values are Arrow nulls
(:func:`with_nulls`).  Offsets and data are built by the compiled kernels (or numpy without them),
UTF-8 is validated once per array, and only when validation fails are the bad values decoded one
by one with the numpy path's decoders, so ``utf8_errors`` gives the same values, errors and
reports on both.  Pure: numpy, pyarrow and the kernels; never xarray or zarr.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ZStringsError
from .dtypes import NA_T, decode_utf32
from .fixed import _decode_error, _fixed_row_value, _value_lengths
from .kernels import kernels
from .policy import check_utf8_errors, policy_scope, position_label, report_change, what_prefix
from .vlen import (
    Kind,
    VlenChunk,
    _as_u8,
    _check_kind,
    _decode_one,
    _spans_to_T,
    _where,
    decode_vlen_utf8_chunk,
    validate_offsets,
    vlen_into,
)

__all__ = [
    "arrow_to_stringdtype",
    "fixed_to_arrow",
    "offsets_to_arrow",
    "utf32_to_arrow",
    "vlen_frames_to_arrow",
    "with_nulls",
]

Index = Callable[[int], Any]

_STR = pa.large_string()
_BIN = pa.large_binary()
# values validated per block when hunting for the few invalid ones (error path only)
_BLOCK = 4096


def _arrow_type(kind: str) -> pa.DataType:
    return _STR if _check_kind(kind) == "str" else _BIN


def _build(kind: str, off64: np.ndarray, data: np.ndarray) -> pa.Array:
    """A large_string/large_binary array owning (not copying) ``off64`` and ``data``."""
    n = int(off64.shape[0]) - 1
    return pa.Array.from_buffers(_arrow_type(kind), n, [None, pa.py_buffer(off64), pa.py_buffer(data)])


def _pool_out(n: int, size: int) -> tuple[pa.Buffer, pa.ResizableBuffer]:
    """A kernel's output buffers (n + 1 int64 offsets, ``size`` data bytes) from pyarrow's pool,
    which reuses freed pages: a fresh numpy array of a chunk's size faults in every page."""
    return pa.allocate_buffer(8 * (n + 1)), pa.allocate_buffer(size, resizable=True)


def _pooled(res: tuple[Any, Any, bool]) -> tuple[np.ndarray, np.ndarray, bool]:
    """A kernel's result in :func:`_pool_out` buffers as (offsets, data, valid), the data shrunk to
    its values (a slice would keep the whole upper bound alive as long as the Arrow array)."""
    off_b, dat_b, ok = res
    off64 = np.frombuffer(off_b, np.int64)
    total = int(off64[-1])
    if total < dat_b.size:
        dat_b.resize(total, shrink_to_fit=True)
    return off64, np.frombuffer(dat_b, np.uint8), ok


def _int64(off: np.ndarray) -> np.ndarray:
    """Checked offsets as native contiguous int64 (no copy when they are already)."""
    if off.dtype == np.int64 and off.flags.c_contiguous and off.flags.aligned:
        return off
    return np.ascontiguousarray(off, dtype=np.int64)


def _utf8_ok(arr: pa.Array) -> bool:
    """Whether every value of a large_string array is valid UTF-8 (Arrow's validator)."""
    try:
        arr.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _bad_values(arr: pa.Array) -> np.ndarray:
    """Positions of the values of a (large_)string array that are not valid UTF-8 (error path:
    the blocks Arrow rejects are decoded one by one)."""
    bad = []
    for b0 in range(0, len(arr), _BLOCK):
        blk = arr.slice(b0, _BLOCK)
        if _utf8_ok(blk):
            continue
        for j, b in enumerate(blk.view(_BIN if pa.types.is_large_string(arr.type) else pa.binary()).to_pylist()):
            try:
                (b or b"").decode("utf-8")
            except UnicodeDecodeError:
                bad.append(b0 + j)
    return np.asarray(bad, dtype=np.intp)


def _replace_values(arr: pa.Array, rows: np.ndarray, values: list[str]) -> pa.Array:
    """``arr`` with ``values`` at ``rows`` (new buffers; the error path only)."""
    mask = np.zeros(len(arr), bool)
    mask[rows] = True
    rep = pa.array([v.encode("utf-8") for v in values], _BIN)
    return pc.replace_with_mask(arr.view(_BIN), pa.array(mask), rep).view(arr.type)


def _fix_spans(arr: pa.Array, off64: np.ndarray, data: np.ndarray, policy: str, what: str,
               index: Index | None) -> pa.Array:
    """Variable-length values under ``policy`` exactly as the numpy path decodes them (text.vlen):
    the first value it cannot decode raises, the others are dropped or replaced and reported."""
    bad = _bad_values(arr)
    if not bad.size:  # pragma: no cover - Arrow's validator and Python's decoder agree
        return arr
    label: Any = index or (lambda k: k)
    vals = [_decode_one(data, int(off64[k]), int(off64[k + 1] - off64[k]), policy, what, label(k), report=False)
            for k in bad.tolist()]
    k0 = int(bad[0])
    b = data[int(off64[k0]) : int(off64[k0 + 1])].tobytes()
    report_change("replace" if policy == "replace" else "drop", int(bad.size), _where(label(k0), what), b, vals[0])
    return _replace_values(arr, bad, vals)


def _checked(arr: pa.Array, off64: np.ndarray, data: np.ndarray, policy: str, what: str,
             index: Index | None, valid: bool | None = None) -> pa.Array:
    """``arr`` when its text is valid UTF-8 (``valid``: already known), else fixed under ``policy``."""
    if valid is None:
        valid = _utf8_ok(arr)
    if valid:
        return arr
    with policy_scope(what):  # one warning per call, as the numpy path's (or into the read's)
        return _fix_spans(arr, off64, data, policy, what, index)


def offsets_to_arrow(
    offsets: np.ndarray,
    data: Any,
    *,
    kind: Kind = "str",
    valid: np.ndarray | None = None,
    policy: str = "strict",
    what: str = "",
    index: Index | None = None,
) -> pa.Array:
    """Arrow/zarrs-style offsets (any integer dtype, n+1 values, the first need not be 0) and one
    data buffer -> large_string/large_binary, the data (and int64 offsets) not copied.

    Offsets are checked once (ChunkError naming ``what``), UTF-8 validated once; ``valid``
    (True: present) makes the other values null.
    """
    check_utf8_errors(policy)
    _arrow_type(kind)
    u8 = _as_u8(data, what)
    off = np.asarray(offsets)
    K = kernels()
    status = -1  # unchecked
    if K is not None and off.ndim == 1 and off.size and off.dtype.kind in "iu" and off.dtype.itemsize in (4, 8):
        off = np.ascontiguousarray(off, dtype=off.dtype.newbyteorder("="))
        if not off.flags.aligned:  # (a view into a byte buffer; the kernel reads aligned integers)
            off = off.copy()
        status = K.offsets_check(u8, off, kind == "str")
    if status in (-1, 1):  # the numpy check (names the first bad offset)
        validate_offsets(off, int(u8.size), what=what, layout="Arrow offsets")
        status = -1  # (UTF-8 then checked by Arrow)
    off64 = _int64(off)
    arr = _build(kind, off64, u8)
    if kind == "str":
        arr = _checked(arr, off64, u8, policy, what, index, None if status == -1 else status == 0)
    return with_nulls(arr, None if valid is None else ~np.asarray(valid, bool))


def vlen_frames_to_arrow(
    buf: Any,
    n_expected: int | None,
    *,
    kind: Kind = "str",
    policy: str = "strict",
    what: str = "",
    allow_trailing: bool = False,
    index: Index | None = None,
) -> pa.Array:
    """A numcodecs ``vlen-utf8``/``vlen-bytes`` chunk (u32 count, then u32 length + bytes per item)
    -> large_string/large_binary, the data compacted in one pass; the framing errors of
    :func:`text.vlen.decode_vlen_utf8_chunk`."""
    check_utf8_errors(policy)
    _arrow_type(kind)
    a = _as_u8(buf, what)
    K = kernels()
    res = None
    if K is not None:
        n = _vlen_count(a)
        if n is not None:
            res = K.vlen_to_offsets(a, -1 if n_expected is None else int(n_expected), bool(allow_trailing),
                                    kind == "str", *_pool_out(n, len(a) - 4 - 4 * n))
            res = None if res is None else _pooled(res)
    if res is None:  # no kernels, or a malformed chunk: the Python walk names the problem
        chunk = decode_vlen_utf8_chunk(a, n_expected, what=what, allow_trailing=allow_trailing)
        off64, data, ok = chunk.offsets, chunk.data, None
    else:
        off64, data, ok = res
    arr = _build(kind, off64, data)
    return _checked(arr, off64, data, policy, what, index, ok) if kind == "str" else arr


def _vlen_count(a: Any) -> int | None:
    """The value count a vlen chunk's header gives, or None when the chunk cannot hold that many
    frames (the kernel's and the Python walk's framing checks then name the problem)."""
    nbytes = len(a)
    if nbytes < 4:
        return None
    n = int.from_bytes(bytes(a[:4]), "little")
    return n if n <= (nbytes - 4) // 4 else None


def _fixed_matrix(u8: Any, what: str) -> np.ndarray:
    """(n, width) C-contiguous uint8 from a uint8 matrix or a 1-D ``|Sn`` array."""
    m = np.asarray(u8)
    if m.dtype.kind == "S" and m.ndim == 1:
        return np.ascontiguousarray(m).view(np.uint8).reshape(m.shape[0], m.dtype.itemsize)
    if m.dtype.kind in "ui" and m.dtype.itemsize == 1 and m.ndim == 2:
        return np.ascontiguousarray(m).view(np.uint8)
    raise ZStringsError(
        f"{what_prefix(what)}expected fixed-width values as a uint8 array shaped (n, width) or a 1-D "
        f"|Sn array, got dtype {m.dtype} with shape {m.shape}"
    )


def _fixed_offsets(mat: np.ndarray, trailing: bool) -> tuple[np.ndarray, np.ndarray]:
    """(int64 offsets, compacted data) of fixed-width rows with numpy (the reference path)."""
    n, w = mat.shape
    off64 = np.zeros(n + 1, np.int64)
    if n == 0 or w == 0:
        return off64, np.zeros(0, np.uint8)
    L = _value_lengths(mat, trailing)
    np.cumsum(L, out=off64[1:])
    return off64, mat[np.arange(w)[None, :] < L[:, None]]


def _fix_rows(arr: pa.Array, mat: np.ndarray, trailing: bool, policy: str, what: str, index: Index) -> pa.Array:
    """Fixed-width values under ``policy`` exactly as :func:`text.fixed.decode_fixed_into`: values
    that lost a cut character are reported, then the first invalid one raises (strict/drop) or
    every invalid one becomes U+FFFD (replace)."""
    bad = _bad_values(arr)
    rows: list[int] = []
    vals: list[str] = []
    first_bad = None
    drops = []
    for k in bad.tolist():
        b, kept = _fixed_row_value(mat[k].tobytes(), policy, trailing)
        try:
            v = kept.decode("utf-8")
            drops.append((k, b, v))
        except UnicodeDecodeError as e:
            if policy != "replace":
                first_bad = first_bad or (k, kept, e)
                continue
            v = b.decode("utf-8", "replace")
        rows.append(k)
        vals.append(v)
    if drops:
        k, b, v = drops[0]
        report_change("drop", len(drops), f"value {index(k)}", b, v)
    if first_bad is not None:
        k, kept, err = first_bad
        raise _decode_error(what, index(k), kept, err, policy) from None
    if policy == "replace" and rows:
        report_change("replace", len(rows), f"value {index(rows[0])}", _fixed_row_value(mat[rows[0]].tobytes(), policy, trailing)[0], vals[0])
    return _replace_values(arr, np.asarray(rows, np.intp), vals) if rows else arr


def fixed_to_arrow(
    u8: np.ndarray,
    *,
    trailing: bool,
    kind: Kind = "str",
    policy: str = "strict",
    what: str = "",
    index: Index | None = None,
) -> pa.Array:
    """Fixed-width values, uint8 (n, width) (``|Sn`` values, or NC_CHAR rows joined) -> Arrow.

    A value ends at its first NUL (netcdf-c's NC_STRING rule) or, with ``trailing``, loses its
    trailing NULs only (NC_CHAR, ``|Sn`` with ``_Encoding``): the values of
    :func:`text.fixed.decode_fixed_utf8` / :func:`text.nc_char.decode_char_array` (UTF-8).
    ``index(k)`` names value k in errors (default: its position).
    """
    check_utf8_errors(policy)
    _arrow_type(kind)
    mat = _fixed_matrix(u8, what)
    n, w = mat.shape
    K = kernels()
    ok = None
    if K is not None and n and w:
        off64, data, ok = _pooled(K.fixed_to_offsets(mat, w, bool(trailing), kind == "str", *_pool_out(n, n * w)))
    else:
        off64, data = _fixed_offsets(mat, trailing)
    arr = _build(kind, off64, data)
    if kind != "str" or (ok if ok is not None else _utf8_ok(arr)):
        return arr
    with policy_scope(what):
        return _fix_rows(arr, mat, trailing, policy, what, index or (lambda k: position_label(k, (n,))))


def utf32_to_arrow(values: np.ndarray, *, what: str = "") -> pa.Array:
    """Zarr v2 ``<U``/``>U`` values (any shape, flattened in C order) -> large_string; numpy's
    values (trailing NULs stripped, embedded ones kept) and :func:`text.dtypes.decode_utf32`'s
    error for code points that are not text."""
    raw = np.asarray(values)
    if raw.dtype.kind != "U":
        raise ZStringsError(f"{what_prefix(what)}expected a <Un or >Un array, got dtype {raw.dtype}")
    flat = np.ascontiguousarray(raw).reshape(-1)
    if flat.size == 0 or flat.dtype.itemsize == 0:
        return _build("str", np.zeros(flat.size + 1, np.int64), np.zeros(0, np.uint8))
    K = kernels()
    res = None
    if K is not None:
        res = K.utf32_to_offsets(flat, flat.dtype.itemsize // 4, not flat.dtype.isnative,
                                 *_pool_out(flat.size, flat.nbytes))
        res = None if res is None else _pooled(res)
    if res is not None:
        return _build("str", res[0], res[1])
    # the fallback: numpy's cast (its values and errors) and pyarrow's conversion of StringDType
    return pa.array(decode_utf32(flat, what=what), _STR)


def with_nulls(arr: pa.Array, missing: np.ndarray | None) -> pa.Array:
    """``arr`` with its ``missing`` (True) positions null; the offsets and data are not copied."""
    if missing is None:
        return arr
    m = np.asarray(missing, bool).reshape(-1)
    if m.size != len(arr):
        raise ZStringsError(f"with_nulls: the mask has {m.size} values for an array of {len(arr)}")
    if not m.any():
        return arr
    valid = ~m
    if arr.null_count:
        valid &= arr.is_valid().to_numpy(zero_copy_only=False)
    if arr.offset:
        valid = np.concatenate([np.zeros(arr.offset, bool), valid])
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    n_null = int(len(arr) - np.count_nonzero(valid))
    return pa.Array.from_buffers(arr.type, len(arr), [bitmap, *arr.buffers()[1:]], null_count=n_null,
                                 offset=arr.offset)


# --------------------------------------------------------------------------------------------
# Arrow -> numpy StringDType
# --------------------------------------------------------------------------------------------


def _out_dtype(dtype: Any, nulls: int) -> np.dtype:
    """The result dtype: ``dtype``, or StringDType() (NA_T when there are nulls)."""
    if dtype is None:
        return NA_T if nulls else np.dtypes.StringDType()
    dt = np.dtype(dtype)
    if not isinstance(dt, np.dtypes.StringDType):
        raise ZStringsError(f"arrow_to_stringdtype: dtype must be a numpy StringDType, got {dt}")
    if nulls and not hasattr(dt, "na_object"):
        raise ZStringsError(
            f"arrow_to_stringdtype: the Arrow array holds {nulls} null(s) but dtype {dt!r} has no na_object "
            "to put in their place; pass dtype=None (NaN marks them, as engine='zstrings' reads missing "
            "strings), a StringDType(na_object=...), or fill them first (pyarrow.compute.fill_null)"
        )
    return dt


def _as_plain(arr: pa.Array) -> pa.Array:
    """string/large_string as they are, string_view cast to large_string (Arrow's copy), a
    dictionary of them as it is; anything else refused."""
    t = arr.dictionary.type if pa.types.is_dictionary(arr.type) else arr.type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_dictionary(arr.type):
        return arr if not pa.types.is_string_view(t) else arr.cast(pa.dictionary(arr.type.index_type, _STR))
    if pa.types.is_string_view(t):
        return arr.cast(_STR)
    raise ZStringsError(
        f"arrow_to_stringdtype: expected Arrow string, large_string or string_view values (or a "
        f"dictionary of them), got {t}; cast the array first (e.g. arr.cast(pa.large_string()))"
    )


def _vlen_chunk(arr: pa.Array) -> VlenChunk:
    """A string/large_string array's offsets and data, not copied."""
    n = len(arr)
    isz = 8 if pa.types.is_large_string(arr.type) else 4
    bufs = arr.buffers()
    off = np.frombuffer(bufs[1], dtype=np.int64 if isz == 8 else np.int32, count=n + 1, offset=arr.offset * isz)
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None and bufs[2].size else np.zeros(1, np.uint8)
    return VlenChunk(off, data)


def _fill_chunk(arr: pa.Array, out: np.ndarray) -> None:
    """One string/large_string array's values (a dictionary's: its values picked by the indices
    in the same pass) into StringDType ``out`` (its length); null positions are left for the caller."""
    if len(arr) == 0:
        return
    if pa.types.is_dictionary(arr.type):
        if len(arr.dictionary) and kernels() is not None:
            sel = np.ascontiguousarray(arr.indices.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
            vlen_into(_vlen_chunk(arr.dictionary), out, sel, utf8_errors="strict")
            return
        arr = arr.dictionary_decode()
    chunk = _vlen_chunk(arr)
    if not vlen_into(chunk, out, None, utf8_errors="strict"):  # the fallback: numpy's S->T cast
        off64 = chunk.offsets.astype(np.int64)
        _spans_to_T(chunk.data, off64[:-1], np.diff(off64), "strict", "", out=out)


def _nulls(arr: pa.Array) -> np.ndarray | None:
    """Where ``arr`` is null (a dictionary's null values too: Arrow's null_count leaves them out), or None."""
    if arr.null_count or (pa.types.is_dictionary(arr.type) and arr.dictionary.null_count):
        return arr.is_null().to_numpy(zero_copy_only=False)
    return None


def arrow_to_stringdtype(arr: pa.Array | pa.ChunkedArray, *, dtype: np.dtype | None = None) -> np.ndarray:
    """Arrow string/large_string/string_view values (or a dictionary of them; an Array or a
    ChunkedArray) -> a 1-D numpy StringDType array in one pass, with no Python strings.

    Nulls become the dtype's ``na_object``; ``dtype=None`` gives ``StringDType()`` without nulls
    and ``StringDType(na_object=np.nan)`` with them (as engine="zstrings" reads missing strings).
    """
    chunks = [_as_plain(c) for c in (arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr])]
    masks = [_nulls(c) for c in chunks]
    dt = _out_dtype(dtype, sum(int(m.sum()) for m in masks if m is not None))
    out = np.empty(sum(len(c) for c in chunks), dt)
    pos = 0
    for c, m in zip(chunks, masks, strict=True):
        part = out[pos : pos + len(c)]
        _fill_chunk(c, part)
        if m is not None:
            part[m] = dt.na_object  # type: ignore[attr-defined]
        pos += len(c)
    return out
