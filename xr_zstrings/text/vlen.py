"""Variable-length string/bytes chunk layouts, decoded and encoded one chunk at a time.

Three layouts (all *after* decompression; compressors and codec chains are handled elsewhere):

* numcodecs / zarr-python ``vlen-utf8`` and ``vlen-bytes``: ``u32le n`` then ``n`` times
  ``u32le length + bytes``.  Byte-identical to ``numcodecs.VLenUTF8/VLenBytes``.
* the ``zarrs.vlen`` codec: an Arrow-style offsets index (``n+1`` uint32/uint64) and the data,
  each through its own codec chain, framed with a ``u64le`` index length at the start or end.
* the draft ZEP Arrow layout: ``n+1`` int32 (int64 for the large variants) offsets, zero padding
  to a 64-byte boundary, then the data.

Every layout decodes to a :class:`VlenChunk` (offsets + uint8 data) which converts to numpy
(StringDType / object / U, or object bytes) or, zero-copy, to pyarrow.  Pure: numpy, pyarrow and
the standard library only; never xarray or zarr.  Malformed chunks raise :class:`ChunkError`,
invalid UTF-8 :class:`StringDecodeError`, never IndexError/MemoryError.
"""

from __future__ import annotations

import functools
import itertools
import struct
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import numpy as np
import pyarrow as pa
from numpy.lib.stride_tricks import as_strided

from ..errors import ChunkError, StringDecodeError, UnsupportedError, ZStringsError
from .dtypes import claim_string_dtypes, convert_string_dtype
from .kernels import POLICY_CODE, kernels
from .policy import check_utf8_errors, current_chunk, policy_scope, report_change, what_prefix

__all__ = [
    "IndexDataType",
    "IndexLocation",
    "Kind",
    "VlenChunk",
    "decode_arrow_chunk",
    "decode_offsets_index",
    "decode_vlen_utf8_chunk",
    "decode_vlen_utf8_into",
    "decode_vlen_utf8_to_numpy",
    "encode_arrow_chunk",
    "encode_vlen_utf8_chunk",
    "join_zarrs_vlen",
    "split_zarrs_vlen",
    "validate_offsets",
    "values_to_vlen",
    "vlen_into",
    "vlen_to_arrow",
    "vlen_to_numpy",
]

Kind = Literal["str", "bytes"]
IndexDataType = Literal["uint32", "uint64"]
IndexLocation = Literal["start", "end"]

_T = np.dtypes.StringDType()
_CLAIMED = claim_string_dtypes(_T)  # arrays made with _T get their own instance (see there)
_OBJ = np.dtype(object)
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_INDEX_DTYPES: dict[str, np.dtype] = {"uint32": np.dtype("<u4"), "uint64": np.dtype("<u8")}
_INT32_MAX = 2**31 - 1
# Strings longer than this are converted one by one (their bytes dominate, not Python overhead).
_MAX_MATRIX_WIDTH = 1024
# Bytes of padded matrix built per block when converting to StringDType (cache friendly).
_BLOCK_BYTES = 1 << 22
_ARROW_ALIGN = 64


class VlenChunk(NamedTuple):
    """One decoded chunk: ``offsets`` (n+1 monotone integers) into ``data`` (1-D uint8)."""

    offsets: np.ndarray
    data: np.ndarray

    @property
    def n_items(self) -> int:
        """Number of elements in the chunk."""
        return int(self.offsets.shape[0]) - 1


# --------------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------------


def _as_u8(buf: Any, what: str = "") -> np.ndarray:
    """Any bytes-like (bytes, bytearray, memoryview, ndarray, zarr-like Buffer) -> 1-D uint8, no copy."""
    if isinstance(buf, np.ndarray):
        if buf.dtype == np.uint8 and buf.ndim == 1 and buf.flags.c_contiguous:
            return buf
        return np.ascontiguousarray(buf).reshape(-1).view(np.uint8)
    if hasattr(buf, "as_numpy_array") and not isinstance(buf, (bytes, bytearray, memoryview)):
        return _as_u8(buf.as_numpy_array(), what)
    try:
        mv = memoryview(buf)
    except TypeError:
        raise ZStringsError(
            f"{what_prefix(what)}expected a bytes-like chunk (bytes, bytearray, memoryview or uint8 "
            f"ndarray), got {type(buf).__name__}"
        ) from None
    if not mv.c_contiguous:
        mv = memoryview(mv.tobytes())
    return np.frombuffer(mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv, dtype=np.uint8)


def _check_kind(kind: str) -> str:
    if kind not in ("str", "bytes"):
        raise ZStringsError(f"kind={kind!r}; expected 'str' (UTF-8 text) or 'bytes' (raw bytes)")
    return kind


def _index_dtype(index_data_type: str) -> np.dtype:
    try:
        return _INDEX_DTYPES[index_data_type]
    except (KeyError, TypeError):
        raise UnsupportedError(
            f"zarrs.vlen index_data_type={index_data_type!r} is not supported; expected 'uint32' "
            "or 'uint64'"
        ) from None


def _check_location(index_location: str) -> str:
    if index_location not in ("start", "end"):
        raise UnsupportedError(
            f"zarrs.vlen index_location={index_location!r} is not supported; expected 'start' or "
            "'end' (configurations without index_location are version 0.0 and mean 'start')"
        )
    return index_location


def _round_up(x: int, base: int = _ARROW_ALIGN) -> int:
    return -(-x // base) * base


def _where(i: int, what: str) -> str:
    """Names value ``i`` of a chunk: the chunk first (so the first value sorts first), then ``what``."""
    chunk = current_chunk()  # set by the reader: the same name on the compiled and fallback paths
    if chunk:  # (what then names the array's metadata, but may add the inner chunk of a shard)
        parts = [f"chunk {chunk}", what[what.index("inner chunk") :] if "inner chunk" in what else ""]
    else:
        parts = [what]
    parts = [p for p in parts if p]
    return f"{', '.join(parts) or 'the chunk'}, element {i}"


def _after_kernel(stats: np.ndarray, bad: np.ndarray, out: np.ndarray, sel: np.ndarray | None,
                  span: Callable[[int], tuple[np.ndarray, int, int]],
                  policy: str, what: str) -> None:
    """Finish a kernel decode of one variable-length chunk as the fallback does: the chunk is decoded
    whole, so an invalid value anywhere in it raises (strict/drop), and every value of it the policy
    changed is reported, selected or not; selected bad values are replaced (replace)."""
    n_drop, first_drop, n_bad, first_bad = (int(x) for x in stats[2:6])
    if n_bad and policy != "replace":
        a, s, ln = span(first_bad)
        _decode_one(a, s, ln, policy, what, first_bad)  # raises StringDecodeError with the details
    if bad.size:
        vals = [_decode_one(*span(int(sel[k]) if sel is not None else k), policy, what, 0, report=False).encode("utf-8")
                for k in bad.tolist()]
        # (not out[...] = ...: chunks decode on threads, see _kernels.pack_at)
        kernels().pack_at(out, np.ascontiguousarray(bad, dtype=np.intp), vals)
    if n_bad:  # (replace)
        a, s, ln = span(first_bad)
        b = bytes(a[s : s + ln])
        report_change("replace", n_bad, _where(first_bad, what), b, b.decode("utf-8", "replace"))
    if n_drop:
        a, s, ln = span(first_drop)
        b = bytes(a[s : s + ln])
        report_change("drop", n_drop, _where(first_drop, what), b, b.decode("utf-8", "ignore"))


def vlen_into(
    chunk: VlenChunk, out: np.ndarray, sel: np.ndarray | None = None, *, utf8_errors: str = "strict", what: str = ""
) -> bool:
    """Decode a (validated) VlenChunk's strings straight into StringDType ``out`` (any strided view).

    ``out``'s k-th element in C order gets element ``sel[k]`` (k when None).  Returns False when
    the compiled kernels are not available (the caller uses :func:`vlen_to_numpy`).
    """
    K = kernels()
    if K is None:
        return False
    check_utf8_errors(utf8_errors)
    off = chunk.offsets
    if not (off.dtype.isnative and off.flags.c_contiguous and off.dtype.kind in "iu" and off.dtype.itemsize in (4, 8)):
        off = np.ascontiguousarray(off, dtype=np.int64)
    if not off.flags.aligned:  # (the kernel reads the offsets as aligned integers)
        off = np.array(off, dtype=np.int64, order="C")
    data = chunk.data if chunk.data.flags.c_contiguous else np.ascontiguousarray(chunk.data)
    stats = np.zeros(6, np.int64)
    bad = K.offsets_to_T(data, off, out, sel, POLICY_CODE[utf8_errors], stats)
    if bad.size or stats[2] or stats[4]:
        with policy_scope(what):
            _after_kernel(stats, bad, out, sel, lambda i: (data, int(off[i]), int(off[i + 1]) - int(off[i])),
                          utf8_errors, what)
    return True


def decode_vlen_utf8_into(
    buf: Any,
    out: np.ndarray,
    sel: np.ndarray | None = None,
    n_expected: int | None = None,
    *,
    utf8_errors: str = "strict",
    what: str = "",
    allow_trailing: bool = False,
) -> bool:
    """Decode a numcodecs ``vlen-utf8`` chunk straight into StringDType ``out`` (see vlen_into).

    The header walk, UTF-8 validation and packing run in C without the GIL.  Returns False when
    the compiled kernels are not available.  Malformed chunks raise the same ChunkError as
    :func:`decode_vlen_utf8_chunk`.
    """
    K = kernels()
    if K is None:
        return False
    check_utf8_errors(utf8_errors)
    a = _as_u8(buf, what)
    stats = np.zeros(6, np.int64)
    bad = K.vlen_utf8_to_T(a, -1 if n_expected is None else int(n_expected), bool(allow_trailing), out, sel,
                           POLICY_CODE[utf8_errors], stats)
    if bad is None:  # malformed: the Python walk names the problem
        _walk_vlen_headers(a, what, n_expected, allow_trailing)
        raise ChunkError(f"{what_prefix(what)}malformed vlen-utf8 chunk")  # pragma: no cover
    if bad.size or stats[2] or stats[4]:
        _, _, pos = _walk_vlen_headers(a, what, n_expected, allow_trailing)
        with policy_scope(what):
            _after_kernel(stats, bad, out, sel, lambda i: (a, int(pos[i]) + 4, int(pos[i + 1]) - int(pos[i]) - 4),
                          utf8_errors, what)
    return True


# --------------------------------------------------------------------------------------------
# offsets validation
# --------------------------------------------------------------------------------------------


def validate_offsets(
    offsets: np.ndarray,
    data_len: int,
    *,
    n: int | None = None,
    exact_end: bool = False,
    first_zero: bool = False,
    what: str = "",
    layout: str = "vlen",
) -> None:
    """Check ``offsets`` indexes ``data_len`` bytes: n+1 long, >= 0, monotone, last within data.

    Raises :class:`ChunkError` naming the first bad offset; ``exact_end`` also requires the last
    offset to equal ``data_len`` (zarrs.vlen does), ``first_zero`` requires offsets[0] == 0.
    """
    c = what_prefix(what)
    if offsets.ndim != 1 or offsets.shape[0] < 1:
        raise ChunkError(f"{c}{layout} offsets must be a 1-D array of n+1 >= 1 integers, got shape {offsets.shape}")
    if n is not None and offsets.shape[0] != n + 1:
        raise ChunkError(
            f"{c}{layout} index holds {offsets.shape[0]} offsets, expected {n + 1} (chunk of {n} "
            "elements + 1); the chunk does not match the array's chunk shape"
        )
    if offsets.dtype.kind not in "iu":
        raise ChunkError(f"{c}{layout} offsets must be integers, got dtype {offsets.dtype}")
    first = int(offsets[0])
    if first < 0 or (first_zero and first != 0):
        raise ChunkError(
            f"{c}{layout} offsets[0] is {first}, expected {'0' if first_zero else '>= 0'}; the "
            "index is corrupt"
        )
    if offsets.shape[0] > 1:
        bad = offsets[1:] < offsets[:-1]
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            raise ChunkError(
                f"{c}{layout} offsets are not monotonically increasing: offsets[{j + 1}] = "
                f"{int(offsets[j + 1])} < offsets[{j}] = {int(offsets[j])}; the index is corrupt "
                "or was decoded with the wrong index_data_type/endianness"
            )
    last = int(offsets[-1])
    if last > data_len or (exact_end and last != data_len):
        raise ChunkError(
            f"{c}{layout} last offset is {last} but the data holds {data_len} bytes (expected "
            f"{'exactly' if exact_end else 'at most'} {data_len}); the chunk is truncated or its "
            "index and data do not belong together"
        )


def _offsets_int64(offsets: np.ndarray) -> np.ndarray:
    """Validated offsets as native int64 (no copy when already int64)."""
    if offsets.dtype == np.int64:
        return offsets
    return offsets.astype(np.int64)


# --------------------------------------------------------------------------------------------
# numcodecs vlen-utf8 / vlen-bytes
# --------------------------------------------------------------------------------------------


def _walk_vlen_headers(buf: Any, what: str, n_expected: int | None, allow_trailing: bool):
    """Walk the u32 length headers: returns (u8 view, item count, header positions with end appended)."""
    a = _as_u8(buf, what)
    B = int(a.size)
    c = what_prefix(what)
    if B < 4:
        raise ChunkError(
            f"{c}vlen-utf8/vlen-bytes chunk of {B} bytes is shorter than its 4-byte item-count "
            "header; the chunk is truncated or not vlen encoded"
        )
    n = int(a[0]) | int(a[1]) << 8 | int(a[2]) << 16 | int(a[3]) << 24
    if n_expected is not None and n != n_expected:
        raise ChunkError(
            f"{c}vlen-utf8/vlen-bytes chunk header says {n} items, expected {n_expected} (the "
            "chunk shape's element count); the chunk belongs to another array or is corrupt"
        )
    if n > (B - 4) // 4:  # every item needs at least its 4-byte length: never allocate for lies
        raise ChunkError(
            f"{c}vlen-utf8/vlen-bytes chunk header says {n} items but the chunk has only {B} bytes "
            f"(at least {4 + 4 * n} needed); the chunk is truncated or not vlen encoded"
        )
    unpack = _U32.unpack_from
    mv = memoryview(a)
    pos = [0] * (n + 1)
    p = 4
    i = 0
    try:
        for i in range(n):
            pos[i] = p
            p += 4 + unpack(mv, p)[0]
    except struct.error:
        raise ChunkError(
            f"{c}vlen-utf8/vlen-bytes item {i} length header at byte {p} runs past the end of the "
            f"{B}-byte chunk; the chunk is truncated or corrupt"
        ) from None
    if p > B:
        last = n - 1
        raise ChunkError(
            f"{c}vlen-utf8/vlen-bytes item {last} claims {p - pos[last] - 4} bytes at byte "
            f"{pos[last] + 4}, past the end of the {B}-byte chunk; the chunk is truncated or corrupt"
        )
    if p < B and not allow_trailing:
        raise ChunkError(
            f"{c}vlen-utf8/vlen-bytes chunk has {B - p} unexpected trailing bytes after its {n} "
            "items; the chunk is corrupt or not vlen encoded (pass allow_trailing=True to ignore)"
        )
    pos[n] = p
    return a, n, np.array(pos, dtype=np.int64)


def decode_vlen_utf8_chunk(
    buf: Any, n_expected: int | None = None, *, what: str = "", allow_trailing: bool = False
) -> VlenChunk:
    """Decode a numcodecs ``vlen-utf8``/``vlen-bytes`` chunk into offsets + contiguous data.

    The length headers are walked once (a tight loop, ~13 M items/s); the data is then compacted
    with one vectorised mask.  Use :func:`decode_vlen_utf8_to_numpy` to skip the compaction.
    """
    a, n, pos = _walk_vlen_headers(buf, what, n_expected, allow_trailing)
    offsets = np.empty(n + 1, np.int64)
    # item i's data starts at pos[i] + 4; removing the count header and i + 1 length headers
    offsets[:n] = pos[:n] - 4 * np.arange(n, dtype=np.int64) - 4
    offsets[n] = pos[n] - 4 - 4 * n
    keep = np.ones(int(pos[n]), dtype=bool)
    keep[:4] = False
    if n:
        keep[(pos[:n, None] + np.arange(4)).ravel()] = False
    data = a[: int(pos[n])][keep]
    return VlenChunk(offsets, data)


def _scoped(fn: Any) -> Any:
    """Warn once per call about the values a utf8_errors policy changed (see policy.policy_scope)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with policy_scope(kwargs.get("what", "")):
            return fn(*args, **kwargs)

    return wrapper


@_scoped
def decode_vlen_utf8_to_numpy(
    buf: Any,
    n_expected: int | None = None,
    *,
    kind: Kind = "str",
    string_dtype: Any = "T",
    utf8_errors: str = "strict",
    shape: tuple[int, ...] | None = None,
    what: str = "",
    allow_trailing: bool = False,
) -> np.ndarray:
    """One-shot ``vlen-utf8``/``vlen-bytes`` chunk -> numpy, reading strings in place (fastest path)."""
    _check_kind(kind)
    check_utf8_errors(utf8_errors)
    wants_T = kind == "str" and _wants_T(string_dtype)
    if wants_T and kernels() is not None:
        out = _vlen_into_T(buf, n_expected, utf8_errors=utf8_errors, what=what, allow_trailing=allow_trailing)
        if out is not None:
            return out.reshape(shape) if shape is not None else out
    a, n, pos = _walk_vlen_headers(buf, what, n_expected, allow_trailing)
    if wants_T:
        starts = pos[:n] + 4
        lens = pos[1:] - starts
        out = _spans_to_T(a, starts, lens, utf8_errors, what)
        return out.reshape(shape) if shape is not None else out
    if kind == "bytes" or string_dtype in ("O", object, "object", "|O"):
        # object output: slicing one bytes object per item beats compaction + Arrow here
        out = _vlen_objects(a, n, pos, kind=kind, utf8_errors=utf8_errors, what=what)
        return out.reshape(shape) if shape is not None else out
    chunk = decode_vlen_utf8_chunk(a, n_expected, what=what, allow_trailing=allow_trailing)
    return vlen_to_numpy(
        chunk, kind=kind, string_dtype=string_dtype, utf8_errors=utf8_errors, what=what, shape=shape
    )


def _vlen_into_T(buf: Any, n_expected: int | None, *, utf8_errors: str, what: str,
                 allow_trailing: bool) -> np.ndarray | None:
    """A vlen-utf8 chunk decoded by the compiled kernel straight into a StringDType array; None
    when its header cannot be right (the checking path then says what is wrong)."""
    a = _as_u8(buf, what)
    n = int(a[:4].view("<u4")[0]) if a.size >= 4 else 0
    if n_expected is not None and n != n_expected:
        n = int(n_expected)
    if not (a.size >= 4 and n <= (a.size - 4) // 4):
        return None
    out: np.ndarray = np.empty(n, _T)
    decode_vlen_utf8_into(a, out, None, n_expected, utf8_errors=utf8_errors, what=what,
                          allow_trailing=allow_trailing)
    return out


def _vlen_objects(a: np.ndarray, n: int, pos: np.ndarray, *, kind: Kind, utf8_errors: str,
                  what: str) -> np.ndarray:
    """The items of a walked vlen chunk as an object array of bytes (``kind="bytes"``) or str."""
    b = a.tobytes()
    st = (pos[:n] + 4).tolist()
    en = pos[1:].tolist()
    out = np.empty(n, _OBJ)
    if kind == "bytes":
        out[:] = [b[i:j] for i, j in zip(st, en, strict=True)]
        return out
    try:
        out[:] = [b[i:j].decode("utf-8") for i, j in zip(st, en, strict=True)]
    except UnicodeDecodeError:
        out[:] = [_decode_one(a, i, j - i, utf8_errors, what, k) for k, (i, j) in enumerate(zip(st, en, strict=True))]
    return out


def encode_vlen_utf8_chunk(values: Any, *, kind: Kind = "str", what: str = "") -> bytes:
    """Encode values (or a VlenChunk) as a numcodecs ``vlen-utf8``/``vlen-bytes`` chunk.

    Byte-identical to ``numcodecs.VLenUTF8().encode`` / ``VLenBytes().encode`` (None -> empty).
    """
    K = kernels()
    chunk = values_to_vlen(values, kind=kind, what=what)  # compiled packing for str arrays
    off = _offsets_int64(chunk.offsets)
    n = off.shape[0] - 1
    if K is not None and n <= 0xFFFFFFFF and (n == 0 or int((off[1:] - off[:-1]).max()) <= 0xFFFFFFFF):
        return K.vlen_utf8_from_offsets(chunk.data, np.ascontiguousarray(off, dtype=np.int64))
    if n > 0xFFFFFFFF:
        raise ZStringsError(f"{what_prefix(what)}{n} items do not fit a vlen chunk's uint32 item count")
    base, end = int(off[0]), int(off[-1])
    lens = np.diff(off)
    if n and int(lens.max()) > 0xFFFFFFFF:
        raise ZStringsError(f"{what_prefix(what)}an item of {int(lens.max())} bytes exceeds vlen's uint32 length")
    total = 4 + 4 * n + (end - base)
    out = np.empty(total, np.uint8)
    out[:4] = np.frombuffer(_U32.pack(n), np.uint8)
    if n:
        hdr = 4 + 4 * np.arange(n, dtype=np.int64) + (off[:-1] - base)
        hidx = hdr[:, None] + np.arange(4)
        out[hidx] = lens.astype("<u4").view(np.uint8).reshape(n, 4)
        keep = np.ones(total, dtype=bool)
        keep[:4] = False
        keep[hidx.ravel()] = False
        out[keep] = chunk.data[base:end]
    return out.tobytes()


# --------------------------------------------------------------------------------------------
# zarrs.vlen
# --------------------------------------------------------------------------------------------


def split_zarrs_vlen(chunk: Any, index_location: IndexLocation, *, what: str = "") -> tuple[memoryview, memoryview]:
    """Split a ``zarrs.vlen`` chunk into (encoded index, encoded data) by its u64le index length.

    Zero-copy memoryviews.  Run each through its codec chain; note zarrs writes an EMPTY encoded
    data part (no data codecs applied) when the chunk's data is empty (last offset 0).
    """
    _check_location(index_location)
    a = _as_u8(chunk, what)
    B = int(a.size)
    c = what_prefix(what)
    if B < 8:
        raise ChunkError(
            f"{c}zarrs.vlen chunk of {B} bytes is shorter than its 8-byte index length; the chunk "
            "is truncated or not zarrs.vlen encoded"
        )
    mv = memoryview(a)
    if index_location == "start":
        index_len = _U64.unpack_from(mv, 0)[0]
    else:
        index_len = _U64.unpack_from(mv, B - 8)[0]
    if index_len > B - 8:
        raise ChunkError(
            f"{c}zarrs.vlen index length {index_len} exceeds the {B - 8} bytes available in the "
            f"chunk (index_location={index_location!r}); the chunk is truncated, corrupt, or "
            "index_location is wrong"
        )
    if index_location == "start":
        return mv[8 : 8 + index_len], mv[8 + index_len :]
    main = B - 8
    return mv[main - index_len : main], mv[: main - index_len]


def join_zarrs_vlen(index_bytes: Any, data_bytes: Any, index_location: IndexLocation) -> bytes:
    """Frame an encoded index and encoded data as one ``zarrs.vlen`` chunk (inverse of split)."""
    _check_location(index_location)
    index_b = memoryview(index_bytes).cast("B") if not isinstance(index_bytes, bytes) else index_bytes
    data_b = memoryview(data_bytes).cast("B") if not isinstance(data_bytes, bytes) else data_bytes
    length = _U64.pack(len(index_b))
    if index_location == "start":
        return b"".join((length, index_b, data_b))
    return b"".join((data_b, index_b, length))


def decode_offsets_index(
    index_bytes: Any,
    n: int,
    index_data_type: IndexDataType,
    *,
    data_len: int | None = None,
    what: str = "",
) -> np.ndarray:
    """Decoded index bytes (little-endian) or an integer array -> n+1 offsets (uint32/uint64).

    If ``data_len`` is given the offsets are validated against it (zarrs requires last == data_len).
    """
    dt = _index_dtype(index_data_type)
    c = what_prefix(what)
    if isinstance(index_bytes, np.ndarray) and index_bytes.dtype.kind in "iu" and index_bytes.dtype.itemsize > 1:
        offsets = index_bytes.reshape(-1)
        if offsets.dtype.itemsize != dt.itemsize:
            raise ChunkError(
                f"{c}zarrs.vlen index decoded to dtype {offsets.dtype}, expected {index_data_type}"
            )
    else:
        a = _as_u8(index_bytes, what)
        expected = (n + 1) * dt.itemsize
        if a.size != expected:
            raise ChunkError(
                f"{c}zarrs.vlen index is {a.size} bytes, expected {expected} ({n + 1} "
                f"{index_data_type} offsets for {n} elements); the index is truncated, corrupt or "
                "index_data_type is wrong"
            )
        offsets = a.view(dt)
    if offsets.shape[0] != n + 1:
        raise ChunkError(
            f"{c}zarrs.vlen index holds {offsets.shape[0]} offsets, expected {n + 1} for {n} elements"
        )
    if data_len is not None:
        validate_offsets(offsets, data_len, n=n, exact_end=True, what=what, layout="zarrs.vlen")
    return offsets


# --------------------------------------------------------------------------------------------
# draft Arrow layout
# --------------------------------------------------------------------------------------------


def decode_arrow_chunk(buf: Any, n: int, *, large: bool = False, what: str = "") -> VlenChunk:
    """Split a draft-ZEP Arrow-layout chunk (offsets, pad to 64 bytes, data) zero-copy, validated."""
    a = _as_u8(buf, what)
    isz = 8 if large else 4
    off_end = (n + 1) * isz
    c = what_prefix(what)
    if n < 0 or a.size < off_end:
        raise ChunkError(
            f"{c}Arrow-layout chunk of {a.size} bytes is too short for its {n + 1} "
            f"{'int64' if large else 'int32'} offsets ({off_end} bytes); the chunk is truncated or "
            f"{'not the large (int64) variant' if large else 'uses int64 offsets (large=True)'}"
        )
    offsets = a[:off_end].view("<i8" if large else "<i4")
    data = a[_round_up(off_end) :]
    validate_offsets(offsets, int(data.size), n=n, what=what, layout="Arrow-layout")
    return VlenChunk(offsets, data)


def encode_arrow_chunk(
    values: Any, *, large: bool = False, binary: bool = False, what: str = ""
) -> bytes:
    """Encode values as a draft-ZEP Arrow-layout chunk: offsets from 0, zero pad to 64, data."""
    chunk = values_to_vlen(values, kind="bytes" if binary else "str", what=what)
    off = _offsets_int64(chunk.offsets)
    base, end = int(off[0]), int(off[-1])
    if not large and end - base > _INT32_MAX:
        raise ZStringsError(
            f"{what_prefix(what)}{end - base} bytes of data do not fit int32 offsets; use large=True"
        )
    off_b = (off - base).astype("<i8" if large else "<i4").tobytes()
    start = _round_up(len(off_b))
    out = bytearray(start + (end - base))
    out[: len(off_b)] = off_b
    out[start:] = chunk.data[base:end].tobytes()
    return bytes(out)


# --------------------------------------------------------------------------------------------
# conversion to numpy / arrow
# --------------------------------------------------------------------------------------------


def _wants_T(string_dtype: Any) -> bool:
    return string_dtype in ("T", "StringDType", None) or isinstance(string_dtype, np.dtypes.StringDType)


@functools.lru_cache(maxsize=16)
def _tail_masks(width: int) -> np.ndarray:
    """Row L keeps the first L bytes: (width+1, width) uint8 table of 0xFF/0x00."""
    tri = np.zeros((width + 1, width), np.uint8)
    tri[np.arange(width)[None, :] < np.arange(width + 1)[:, None]] = 0xFF
    tri.flags.writeable = False
    return tri


def _utf8_valid(u8: np.ndarray) -> bool:
    """Whether a contiguous uint8 buffer is valid UTF-8 (Arrow's fast validator, strict RFC 3629)."""
    m = u8.reshape(-1)
    size = int(m.size)
    if size == 0:
        return True
    large = size > _INT32_MAX
    off = np.array([0, size], np.int64 if large else np.int32)
    arr = pa.Array.from_buffers(
        pa.large_string() if large else pa.string(), 1, [None, pa.py_buffer(off), pa.py_buffer(m)]
    )
    try:
        arr.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _decode_one(a: np.ndarray, s: int, ln: int, policy: str, what: str, i: int, report: bool = True) -> str:
    """One value under ``policy``; a change the policy makes is reported (see policy.report_change)."""
    b = a[s : s + ln].tobytes()
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError as e:
        if policy == "replace":
            v = b.decode("utf-8", "replace")
            if report:
                report_change("replace", 1, _where(i, what), b, v)
            return v
        if policy == "drop" and e.reason == "unexpected end of data" and e.end == len(b):
            try:
                v = b[: e.start].decode("utf-8")
                if report:
                    report_change("drop", 1, _where(i, what), b, v)
                return v
            except UnicodeDecodeError as e2:
                e = e2
        excerpt = b[max(0, e.start - 8) : e.start + 8]
        raise StringDecodeError(
            f"{what_prefix(what)}element {i} of the chunk ({ln} bytes) is not valid UTF-8: {e.reason} at "
            f"byte {e.start} (near {excerpt!r}) under utf8_errors={policy!r}; the data may be binary "
            "or in another encoding: read it as bytes, or pass utf8_errors='replace'"
        ) from None


def _spans_to_T(
    a: np.ndarray, starts: np.ndarray, lens: np.ndarray, policy: str, what: str, index: np.ndarray | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Strings a[starts[i] : starts[i] + lens[i]] -> StringDType (into ``out`` when given: any 1-D
    StringDType array of their number), with no Python objects.

    Short strings are gathered into a NUL-padded |S matrix (strided window view + row gather +
    tail mask), UTF-8 validated by Arrow, then cast by numpy's S->T cast; long ones go one by one.
    ``index`` maps rows back to chunk element numbers for error messages.
    """
    n = int(lens.shape[0])
    if out is None:
        out = np.empty(n, _T)
    if n == 0:
        return out
    maxlen = int(lens.max())
    if maxlen == 0:
        return out
    total = int(lens.sum())
    width = min(maxlen, _MAX_MATRIX_WIDTH, max(32, 4 * (total // n) + 16))
    long_ = lens > width
    eff = np.where(long_, 0, lens) if long_.any() else lens
    # padded copy so every width-byte window starting at a valid start stays in bounds
    lo = int(starts.min())
    hi = int((starts + eff).max())
    buf = np.zeros(hi - lo + width, np.uint8)
    buf[: hi - lo] = a[lo:hi]
    win = as_strided(buf, shape=(hi - lo + 1, width), strides=(1, 1), writeable=False)
    rel = starts - lo
    tri = _tail_masks(width)
    sdt = np.dtype(f"S{width}")
    block = max(256, _BLOCK_BYTES // width)
    failed = []
    for b0 in range(0, n, block):
        b1 = min(n, b0 + block)
        mat = win[np.minimum(rel[b0:b1], hi - lo)]
        mat &= tri[eff[b0:b1]]
        # numpy 2.4's S->T cast copies bytes WITHOUT validating UTF-8 (2.5's raises a bare
        # TypeError), so validate here: the padded rows are each valid iff their concatenation
        # is valid and no row starts mid-character.
        if _utf8_valid(mat) and not ((mat[:, 0] & 0xC0) == 0x80).any():
            out[b0:b1] = mat.view(sdt).reshape(-1)
        else:
            failed.append((b0, b1))
    # rows the matrix could not represent exactly: long strings, trailing NULs, UTF-8 errors
    fix = np.flatnonzero(long_)
    nz = np.flatnonzero(eff > 0)
    if nz.size:
        tail0 = nz[a[starts[nz] + eff[nz] - 1] == 0]
        if tail0.size:
            fix = np.union1d(fix, tail0)
    mid = fix[lens[fix] <= _MAX_MATRIX_WIDTH] if fix.size > 256 else fix[:0]
    if mid.size > 256 and mid.size < n:  # many medium strings: recurse with a wider matrix
        sub_index = mid if index is None else index[mid]
        try:
            out[mid] = _spans_to_T(a, starts[mid], lens[mid], policy, what, sub_index)
            fix = np.setdiff1d(fix, mid, assume_unique=True)
        except StringDecodeError:
            pass  # fall through to one by one for exact error reporting
    for b0, b1 in failed:
        fix = np.union1d(fix, np.arange(b0, b1))
    if fix.size:
        st, ln = starts[fix].tolist(), lens[fix].tolist()
        idx = fix.tolist() if index is None else index[fix].tolist()
        vals = [_decode_one(a, s, l, policy, what, i) for s, l, i in zip(st, ln, idx, strict=True)]
        try:
            out[fix] = vals
        except UnicodeEncodeError:  # surrogateescape-like output cannot live in StringDType
            raise StringDecodeError(f"{what_prefix(what)}decoded strings hold lone surrogates") from None
    return out


def vlen_to_arrow(chunk: VlenChunk, *, kind: Kind = "str", large: bool = False, what: str = "") -> pa.Array:
    """VlenChunk -> pa.(large_)string/binary array; zero-copy when offsets already match, UTF-8 validated."""
    _check_kind(kind)
    off = chunk.offsets
    want = np.dtype("<i8") if large else np.dtype("<i4")
    if off.dtype != want:
        last = int(off[-1]) if off.size else 0
        if not large and last > _INT32_MAX:
            raise ZStringsError(
                f"{what_prefix(what)}offsets up to {last} do not fit Arrow int32 offsets; pass large=True"
            )
        off = off.astype(want)
    data = chunk.data if chunk.data.size else np.zeros(1, np.uint8)
    typ = {
        ("str", False): pa.string(),
        ("str", True): pa.large_string(),
        ("bytes", False): pa.binary(),
        ("bytes", True): pa.large_binary(),
    }[(kind, bool(large))]
    n = off.shape[0] - 1
    arr = pa.Array.from_buffers(typ, n, [None, pa.py_buffer(off), pa.py_buffer(data)])
    try:
        arr.validate(full=True)
    except (pa.ArrowInvalid, pa.ArrowException) as e:
        if kind == "str":
            from .arrow import _bad_values  # (text.arrow builds on this module)

            bad = _bad_values(arr)
            if bad.size:
                i = int(bad[0])
                a = chunk.data
                s, ln = int(chunk.offsets[i]), int(chunk.offsets[i + 1]) - int(chunk.offsets[i])
                _decode_one(a, s, ln, "strict", what, i)  # raises StringDecodeError with details
        raise ChunkError(f"{what_prefix(what)}invalid variable-length chunk: {e}") from None
    return arr


@_scoped
def vlen_to_numpy(
    chunk: VlenChunk,
    *,
    kind: Kind = "str",
    string_dtype: Any = "T",
    utf8_errors: str = "strict",
    what: str = "",
    shape: tuple[int, ...] | None = None,
) -> np.ndarray:
    """VlenChunk -> numpy: str as StringDType ("T", fast, no Python objects), object or U; bytes as object."""
    _check_kind(kind)
    check_utf8_errors(utf8_errors)
    if kind == "bytes":
        arr = vlen_to_arrow(chunk, kind="bytes", large=True, what=what)
        out = arr.to_numpy(zero_copy_only=False)
    elif _wants_T(string_dtype):
        out = np.empty(chunk.n_items, _T)
        if not vlen_into(chunk, out, None, utf8_errors=utf8_errors, what=what):
            off = _offsets_int64(chunk.offsets)
            out = _spans_to_T(chunk.data, off[:-1], np.diff(off), utf8_errors, what)
    elif string_dtype in ("O", object, "object", "|O") or (
        isinstance(string_dtype, np.dtype) and string_dtype.kind == "O"
    ):
        try:
            arr = vlen_to_arrow(chunk, kind="str", large=True, what=what)
            out = arr.to_numpy(zero_copy_only=False)
        except StringDecodeError:
            if utf8_errors == "strict":
                raise
            off = _offsets_int64(chunk.offsets).tolist()
            out = np.empty(len(off) - 1, _OBJ)
            out[:] = [_decode_one(chunk.data, s, e - s, utf8_errors, what, i) for i, (s, e) in enumerate(itertools.pairwise(off))]
    else:
        t: np.ndarray = np.empty(chunk.n_items, _T)
        if not vlen_into(chunk, t, None, utf8_errors=utf8_errors, what=what):
            off = _offsets_int64(chunk.offsets)
            t = _spans_to_T(chunk.data, off[:-1], np.diff(off), utf8_errors, what)
        out = convert_string_dtype(t, string_dtype)
    return out.reshape(shape) if shape is not None else out


# --------------------------------------------------------------------------------------------
# values -> VlenChunk
# --------------------------------------------------------------------------------------------


def _first_bad_value(flat: np.ndarray, kind: str, what: str) -> ZStringsError:
    c = what_prefix(what)
    for i, v in enumerate(flat.tolist()):
        if v is None:
            continue
        if kind == "str":
            if not isinstance(v, str):
                hint = " (bytes: write them with kind='bytes' / vlen-bytes)" if isinstance(v, bytes) else ""
                return ZStringsError(f"{c}element {i} is {v!r} of type {type(v).__name__}, not str{hint}")
            try:
                v.encode("utf-8")
            except UnicodeEncodeError as e:
                return ZStringsError(
                    f"{c}element {i} {v!r} contains a lone surrogate (U+{ord(v[e.start]):04X} at "
                    f"character {e.start}); UTF-8 cannot represent lone surrogates (they usually come "
                    "from decoding with errors='surrogateescape'): store the original bytes with "
                    "kind='bytes' or clean the strings"
                )
        elif not isinstance(v, (bytes, bytearray, memoryview)):
            hint = " (str: encode it, or write it with kind='str' / vlen-utf8)" if isinstance(v, str) else ""
            return ZStringsError(f"{c}element {i} is {v!r} of type {type(v).__name__}, not bytes{hint}")
    return ZStringsError(f"{c}could not convert the values to variable-length {kind}")


def values_to_vlen(values: Any, *, kind: Kind = "str", what: str = "") -> VlenChunk:
    """Array-like of str (or bytes) of any shape, C order -> VlenChunk (int64 offsets from 0).

    None (and StringDType NA) become empty, as numcodecs does; lone surrogates raise ZStringsError.
    """
    if isinstance(values, VlenChunk):
        return values
    _check_kind(kind)
    arr = values if isinstance(values, np.ndarray) else np.asarray(values, dtype=object)
    flat = arr.reshape(-1)
    k = flat.dtype.kind
    _check_vlen_values_dtype(flat, kind, what)
    K = kernels()
    has_na = getattr(flat.dtype, "na_object", None) is not None
    if K is not None and kind == "str" and k in "OT" and not has_na:
        # compiled: one pass over the values; anything it cannot take (None, bytes, lone
        # surrogates) goes the pyarrow way below, which reports or converts it
        status, _, offsets, data = K.utf8_pack(np.ascontiguousarray(flat), True)
        if status == 0:
            return VlenChunk(offsets, np.frombuffer(data, np.uint8))
    return _vlen_by_arrow(flat, kind, what, has_na=has_na)


def _vlen_by_arrow(flat: np.ndarray, kind: str, what: str, *, has_na: bool) -> VlenChunk:
    """``values_to_vlen`` through pyarrow: any values the compiled packing does not take (NA and
    None as empty, bytes), and the error naming the first bad value."""
    k = flat.dtype.kind
    if k == "T" and has_na:
        flat = flat.astype(_OBJ)
        flat = np.where(np.array([isinstance(v, str) for v in flat.tolist()], bool), flat, None)
    typ = pa.large_string() if kind == "str" else pa.large_binary()
    try:
        pa_arr = _arrow_of_objects(flat, kind, typ) if k == "O" else pa.array(flat, type=typ, from_pandas=False)
    except (UnicodeError, pa.ArrowException, TypeError, ValueError):
        if k == "U":
            flat = flat.astype(_OBJ)
        raise _first_bad_value(flat, kind, what) from None
    if pa_arr is None:  # nothing but None
        return VlenChunk(np.zeros(len(flat) + 1, np.int64), np.zeros(0, np.uint8))
    n = len(pa_arr)
    bufs = pa_arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int64, count=n + 1, offset=pa_arr.offset * 8)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return VlenChunk(offsets, data)


def _check_vlen_values_dtype(flat: np.ndarray, kind: str, what: str) -> None:
    """Refuses values whose dtype cannot hold ``kind`` (bytes for text, text for bytes, numbers)."""
    k = flat.dtype.kind
    c = what_prefix(what)
    if kind == "str" and k == "S":
        raise ZStringsError(f"{c}expected str values for kind='str', got a bytes array ({flat.dtype}); decode it first or use kind='bytes'")
    if kind == "bytes" and k in "UT":
        raise ZStringsError(f"{c}expected bytes values for kind='bytes', got a str array ({flat.dtype}); encode it first or use kind='str'")
    if k not in "OUTS":
        raise ZStringsError(f"{c}expected an array of {kind}, got dtype {flat.dtype}")


def _arrow_of_objects(flat: np.ndarray, kind: str, typ: Any) -> Any:
    """An object array as an Arrow array of ``typ``; None when every value is None. The type is
    inferred first, so str/bytes mix-ups are caught like numcodecs does (a typed conversion would
    silently accept bytes as text and str as bytes): TypeError."""
    pa_arr = pa.array(flat, from_pandas=False)
    t = pa_arr.type
    if pa.types.is_null(t):
        return None
    if kind == "str":
        ok = pa.types.is_string(t) or pa.types.is_large_string(t)
    else:
        ok = (pa.types.is_binary(t) or pa.types.is_large_binary(t)) and not any(
            isinstance(v, str) for v in flat.tolist()
        )
    if not ok:
        raise TypeError(t)
    pa_arr = pa_arr.cast(typ)
    if isinstance(pa_arr, pa.ChunkedArray):
        pa_arr = pa_arr.combine_chunks()
    return pa_arr
