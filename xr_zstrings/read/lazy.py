"""A variable's lazily indexed values with strings decoded: what xarray's BackendArray wraps.

Outer indexing reads only the chunks the selection touches; strings are decoded by the decoder the
variable's layout chose (``decode``: fixed-width, NC_CHAR rows, UTF-32, vlen, v3 text, bytes ...),
straight into StringDType with the compiled kernels where the chunk reader can.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import user_stacklevel
from ..text.dtypes import (
    NA_T,
    convert_string_dtype,
    decode_objects,
    decode_utf32,
    missing_string_dtype,
    resolve_string_dtype,
)
from ..text.fixed import decode_fixed_utf8
from ..text.kernels import kernels
from ..text.nc_char import char_bytes, decode_char_array, norm_encoding
from ..text.policy import policy_scope
from .chunked import ChunkedArray
from .decode import Decode
from .options import ReadOptions

__all__ = ["LazyArray"]


class LazyArray:
    """A variable's values with strings decoded: ``shape``, ``dtype`` and basic indexing.

    NC_CHAR variables with ``concat_characters`` drop the last (string-length) dimension and
    come back as strings; everything else keeps the stored shape (``()`` for scalars).
    """

    def __init__(
        self,
        raw: ChunkedArray,
        *,
        decode: Decode | str,
        options: ReadOptions,
        encoding: str = "utf-8",
        what: str = "",
        missing: str | None = None,
        null_chunks: bool = False,
        marker: str | bytes | None = None,
    ) -> None:
        """``missing``: a string value read as missing (a masked string ``_FillValue``);
        ``null_chunks``: never-written chunks are missing (Zarr v2 ``|O`` with ``fill_value: null``);
        ``marker``: the fill value xarray's writers are given for those (``MISSING_MARKER``): a value
        equal to it is warned about, since it would come back missing from what they write."""
        self.raw = raw
        self.marker = marker
        self._marker_warned = False
        self.decode = decode = Decode(decode)  # how the stored values become the result
        self.options = options
        self.text_encoding = encoding
        self.what = what
        self.missing = missing
        self.null_chunks = null_chunks
        self._fixed_u = False  # a U result whose width the stored width bounds (never truncates)
        shape = raw.shape if not raw.meta.scalar else ()
        if decode.joins_chars and shape:
            shape = shape[:-1]
        self.shape: tuple[int, ...] = tuple(shape)
        if decode.text:
            self.dtype = resolve_string_dtype(options.string_dtype)
            if self.dtype.kind == "U":
                # fixed width: the stored width bounds the characters (vlen: only known after reading)
                width = decode.stored_width(raw.meta, raw.shape)
                self.dtype = np.dtype(f"U{max(width or 1, 1)}")
                self._fixed_u = width is not None
            if missing is not None or null_chunks:
                self.dtype = missing_string_dtype(options.string_dtype)
                self._fixed_u = False
        elif decode.objects:
            self.dtype = np.dtype(object)
        elif decode is Decode.BYTES_CHAR:  # joined characters; one character stays an object (_bytes_char)
            n = raw.shape[-1] if raw.shape else 1
            self.dtype = np.dtype(f"S{n}") if n > 1 else np.dtype(object)
        else:
            self.dtype = raw.meta.dtype.newbyteorder("=") if raw.meta.dtype.kind in "biuf" else raw.meta.dtype
        # strings are decoded chunk by chunk straight into a StringDType result (compiled kernels);
        # object and U results are converted from it (faster than their numpy decode paths)
        self._masked = missing is not None or null_chunks
        self._direct = (self.dtype.kind in "OU" or self.dtype == np.dtypes.StringDType() or self._masked) and (
            not raw.meta.scalar and raw.can_read_into(decode, encoding, null_chunks))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, key: tuple[Any, ...]) -> np.ndarray:
        """Outer indexing (ints, slices of any step, 1-D integer arrays per axis).

        Only the chunks the selection touches are read: along each axis the wanted indices are
        grouped into runs of adjacent chunks, so ``[::10**9]`` or ``[[0, -1]]`` on a huge array reads
        a few chunks, not the span between them.
        """
        # every value a utf8_errors policy changes in this read is counted: one warning at the end
        with policy_scope(self.what):
            return self._getitem(key)

    def _getitem(self, key: tuple[Any, ...]) -> np.ndarray:
        if not isinstance(key, tuple):
            key = (key,)
        key = key + (slice(None),) * (self.ndim - len(key))
        if self.raw.meta.scalar:
            raw = self.raw.read((slice(0, 1),))
            if self.decode.joins_chars:
                raw = raw.reshape(1, 1)
            return self._mask(self._convert(raw)).reshape(())
        chunks = self.raw.unit_shape  # (a sharded array's inner chunks when read by parts)
        axes: list[list[tuple[slice, Any, Any]]] = []  # per axis: (read range, local take, output slot)
        squeeze: list[int] = []
        out_shape: list[int] = []
        for ax, (k, n) in enumerate(zip(key, self.shape, strict=True)):
            runs, size, scalar = self._axis_runs(ax, k, n, chunks[ax] if ax < len(chunks) else 1)
            axes.append(runs)
            out_shape.append(size)
            if scalar:
                squeeze.append(ax)
        pieces = [self._read_piece(combo) for combo in itertools.product(*axes)]
        if len(pieces) == 1 and all(isinstance(s, slice) for s in pieces[0][0]):
            return _squeezed(pieces[0][1], squeeze)  # one contiguous read: no copy (copying StringDType allocates)
        return _squeezed(self._assemble(pieces, out_shape), squeeze)

    def arrow(self, key: tuple[Any, ...]) -> Any:
        """``self[key]`` (the same outer indexing) flattened in C order, as a ``pyarrow.ChunkedArray``:
        large_string for text, large_binary for bytes; missing values (the masked fill string,
        never-written chunks of a null fill, zarrs' optional nulls) are nulls.

        Built from the chunk buffers (``ChunkedArray.read_arrow``: only the chunks the selection
        touches, no Python ``str``, no StringDType) wherever the chunk reader can; the rest comes
        from ``self[key]`` (same values, slower): scalars, ``|Sn``/NC_CHAR with a non-UTF-8
        ``_Encoding``, UTF-32 as bytes, ``<U1`` NC_CHAR, v2 ``|O`` with other filters, v3 chains
        with array->array codecs other than ``transpose`` or nested shards; numbers keep their own
        Arrow type.
        """
        from .arrow import values_to_arrow

        with policy_scope(self.what):  # one utf8_errors warning per call, as __getitem__
            if not self._arrow_direct():
                return values_to_arrow(self._getitem(key), self.decode)
            return self._arrow(key if isinstance(key, tuple) else (key,))

    def _arrow_direct(self) -> bool:
        """Whether ``arrow`` builds the values from the chunk buffers."""
        return ((self.decode.text or self.decode.as_bytes) and not self.raw.meta.scalar
                and self.raw.can_read_arrow(self.decode, self.text_encoding))

    def _arrow(self, key: tuple[Any, ...]) -> Any:
        from .arrow import arrow_type, assemble

        key = key + (slice(None),) * (self.ndim - len(key))
        chunks = self.raw.unit_shape
        axes: list[list[tuple[slice, Any, Any]]] = []
        out_shape: list[int] = []
        for ax, (k, n) in enumerate(zip(key, self.shape, strict=True)):
            runs, size, _ = self._axis_runs(ax, k, n, chunks[ax] if ax < len(chunks) else 1)
            axes.append(runs)
            out_shape.append(size)
        shape = tuple(out_shape)
        pieces = [self._arrow_piece(combo, shape) for combo in itertools.product(*axes)]
        if len(pieces) == 1 and all(isinstance(s, slice) or bool((s == np.arange(n)).all())
                                    for s, n in zip(pieces[0][0], shape, strict=True)):
            out = pieces[0][1]  # one run per axis, in order: the chunk reader's Arrow chunks as they are
        else:
            out = assemble(pieces, shape, None, arrow_type(self.decode))
        return self._arrow_mask(out)

    def _arrow_piece(self, combo: tuple[tuple[slice, Any, Any], ...], out_shape: tuple[int, ...]) -> tuple[
            tuple[Any, ...], Any]:
        """One run per axis read as Arrow and taken: (its box in the result, its values in C order)."""
        region = [c[0] for c in combo]
        if self.decode.joins_chars:
            region.append(slice(0, self.raw.shape[-1]))
        data = self.raw.read_arrow(tuple(region), self.decode, self.options.utf8_errors, self.what,
                                   null_chunks=self.null_chunks)
        takes = tuple(c[1] for c in combo)
        if any(not isinstance(t, slice) for t in takes):
            from .arrow import _flat_indices

            data = data.take(_flat_indices(takes, tuple(c[0].stop - c[0].start for c in combo)))
        box = tuple(slice(0, n) if isinstance(c[2], slice) else c[2] for c, n in zip(combo, out_shape, strict=True))
        return box, data

    def _arrow_mask(self, out: Any) -> Any:
        """The masked fill string's elements as nulls (the buffers are not copied); warns as
        ``_mask`` of a value equal to the marker."""
        import pyarrow as pa
        import pyarrow.compute as pc

        marker: Any = self.marker
        if isinstance(marker, str) and pa.types.is_large_binary(out.type):
            marker = marker.encode("utf-8")
        if marker is not None and not self._marker_warned and len(out) and \
                isinstance(marker, bytes) == pa.types.is_large_binary(out.type) and \
                pc.any(pc.equal(out, pa.scalar(marker, out.type))).as_py():
            self._warn_marker()
        if self.missing is None or not len(out):
            return out
        from .arrow import mask_equal

        return mask_equal(out, self.missing)

    def _axis_runs(self, ax: int, k: Any, n: int, chunk: int) -> tuple[list[tuple[slice, Any, Any]], int, bool]:
        """One axis of an outer-indexing key: its runs (``_runs``), the output length and whether
        the key is a single integer (the axis is squeezed out)."""
        if isinstance(k, slice) and k.indices(n)[2] == 1:
            start, stop, _ = k.indices(n)
            stop = max(start, stop)
            return [(slice(start, stop), slice(None), slice(None))], stop - start, False
        scalar = False
        if isinstance(k, slice):
            idx = np.arange(*k.indices(n), dtype=np.int64)
        else:
            idx = np.asarray(k, dtype=np.int64)
            scalar = idx.ndim == 0
            if not ((idx >= -n) & (idx < n)).all():
                raise IndexError(f"index {k!r} is out of bounds for axis {ax} with size {n}")
            idx = idx.reshape(-1) % max(n, 1)
        return self._runs(idx, chunk), idx.size, scalar

    def _read_piece(self, combo: tuple[tuple[slice, Any, Any], ...]) -> tuple[tuple[Any, ...], np.ndarray]:
        """One run per axis, read and taken: (output slots, values)."""
        region = [c[0] for c in combo]
        if self.decode.joins_chars:
            region.append(slice(0, self.raw.shape[-1]))
        data = self._read_region(tuple(region))
        take = tuple(c[1] for c in combo)
        if any(not isinstance(t, slice) for t in take):
            data = data[np.ix_(*[np.arange(data.shape[i])[t] for i, t in enumerate(take)])]
        return tuple(c[2] for c in combo), data

    def _assemble(self, pieces: list[tuple[tuple[Any, ...], np.ndarray]], out_shape: list[int]) -> np.ndarray:
        """The pieces of a read put into one result at their output slots."""
        dtype = np.result_type(*[p[1].dtype for p in pieces]) if pieces else self.dtype
        out = np.empty(tuple(out_shape), dtype=dtype)
        for slot, data in pieces:
            if any(not isinstance(s, slice) for s in slot):
                out[np.ix_(*[np.arange(out.shape[i])[s] for i, s in enumerate(slot)])] = data
            else:
                out[slot] = data
        return out

    @staticmethod
    def _runs(idx: np.ndarray, chunk: int) -> list[tuple[slice, Any, Any]]:
        """Group wanted indices into runs of adjacent chunks: (read range, local take, output slots)."""
        if idx.size == 0:
            return [(slice(0, 0), slice(None), slice(None))]
        order = np.argsort(idx, kind="stable")
        sorted_idx = idx[order]
        cid = sorted_idx // chunk
        breaks = np.flatnonzero(np.diff(cid) > 1) + 1
        runs = []
        for grp in np.split(np.arange(idx.size), breaks):
            lo, hi = int(sorted_idx[grp[0]]), int(sorted_idx[grp[-1]]) + 1
            runs.append((slice(lo, hi), sorted_idx[grp] - lo, order[grp]))
        return runs

    def _read_region(self, region: tuple[slice, ...]) -> np.ndarray:
        if self._direct and kernels() is not None:
            t = self.raw.read_into(region, self.decode, self.options.utf8_errors, self.what,
                                   dtype=self._na_T() if self._masked else None, null_chunks=self.null_chunks)
            if self._masked:
                return self._mask(t)
            if self.dtype.kind == "T":
                return t
            if self._fixed_u:
                return t.astype(self.dtype)  # never truncates: the stored width bounds the characters
            return convert_string_dtype(t, self.dtype.kind, self.what)
        raw = self.raw.read(region)
        nulls = None
        if self.null_chunks and raw.dtype.kind == "O":
            nulls = np.equal(raw, None)  # never-written chunks (ChunkedArray fills them with None)
            raw[nulls] = ""
        return self._mask(self._convert(raw), nulls)

    def _mask(self, arr: np.ndarray, nulls: np.ndarray | None = None) -> np.ndarray:
        """Missing values into a decoded string array: elements equal to the masked fill string
        (and ``nulls``) become NA (StringDType, compared there: fast) or NaN (object results)."""
        if self.marker is not None and not self._marker_warned and arr.dtype.kind in "OT" and \
                bool(np.equal(arr, self.marker).any()):
            self._warn_marker()
        if not self._masked:
            return arr
        T = self._na_T()
        if arr.dtype.kind in "TU" and arr.dtype != T:
            arr = arr.astype(T)
        hit = nulls
        if self.missing is not None:
            hit = arr == self.missing if hit is None else (arr == self.missing) | hit
        if hit is not None and hit.any():
            if not arr.flags.writeable:
                arr = arr.copy()
            arr[hit] = getattr(arr.dtype, "na_object", np.nan)
        return arr if arr.dtype == self.dtype else arr.astype(self.dtype)

    def _warn_marker(self) -> None:
        """Warn (once) that the data hold the missing-value marker (``marker``)."""
        self._marker_warned = True
        import warnings

        warnings.warn(
            f"{self.what} holds the value {self.marker!r}, the encoding['_FillValue'] engine='zstrings' "
            "gives its missing values for xarray's writers: written by them, it would read back "
            "missing. Set encoding['_FillValue'] to a value the data does not hold first.",
            UserWarning, stacklevel=user_stacklevel(),
        )

    def _na_T(self) -> np.dtype:
        """The StringDType (with an NA object) a masked variable is decoded into."""
        return self.dtype if self.dtype.kind == "T" else NA_T

    def _convert(self, raw: np.ndarray) -> np.ndarray:
        out = self._decode(raw)
        if self._fixed_u and out.dtype != self.dtype:
            out = out.astype(self.dtype)  # never truncates: the width bounds the characters
        return out

    def _decode(self, raw: np.ndarray) -> np.ndarray:
        return _DECODERS.get(self.decode, LazyArray._as_dtype)(self, raw)

    def _fixed(self, raw: np.ndarray) -> np.ndarray:
        o = self.options
        if norm_encoding(self.text_encoding) != "utf-8":  # _Encoding: as an NC_CHAR row
            n = max(raw.dtype.itemsize, 1)
            u8: np.ndarray = np.ascontiguousarray(raw.astype(f"S{n}")).view(np.uint8).reshape(raw.shape + (n,))
            return decode_char_array(u8, encoding=self.text_encoding, utf8_errors=o.utf8_errors,
                                     string_dtype=o.string_dtype, what=self.what)
        return decode_fixed_utf8(raw, utf8_errors=o.utf8_errors, string_dtype=o.string_dtype, what=self.what,
                                 trailing=self.decode.trailing_nuls_only)

    def _bytes_char(self, raw: np.ndarray) -> np.ndarray:
        """The characters joined, as xarray's concat_characters joins them."""
        u8 = char_bytes(raw, self.what)
        n = u8.shape[-1]
        if n == 0:
            return np.full(u8.shape[:-1], b"", dtype=object)
        joined = np.ascontiguousarray(u8).view(f"S{n}").reshape(u8.shape[:-1])
        # (one character: |S1 would be joined again by xarray's CharacterArrayCoder)
        return joined if n > 1 else joined.astype(object)

    def _bytes_unicode(self, raw: np.ndarray) -> np.ndarray:
        """Code points: their UTF-8 bytes."""
        flat = raw.reshape(-1).tolist()
        return np.array([s.encode("utf-8", "surrogatepass") for s in flat] or [], dtype=object).reshape(raw.shape)

    def _char(self, raw: np.ndarray) -> np.ndarray:
        o = self.options
        return decode_char_array(raw, encoding=self.text_encoding, utf8_errors=o.utf8_errors,
                                 string_dtype=o.string_dtype, what=self.what)

    def _char_sep(self, raw: np.ndarray) -> np.ndarray:
        """Each character its own value."""
        return self._char(self._char_raw(raw)[..., None])

    def _unicode(self, raw: np.ndarray) -> np.ndarray:
        return decode_utf32(raw, string_dtype=self.options.string_dtype)

    def _vlen(self, raw: np.ndarray) -> np.ndarray:
        return decode_objects(raw, string_dtype=self.options.string_dtype, what=self.what)

    def _text(self, raw: np.ndarray) -> np.ndarray:
        return convert_string_dtype(raw, self.options.string_dtype, self.what)

    def _as_stored(self, raw: np.ndarray) -> np.ndarray:
        """The stored values (|Sn as engine="zarr" returns them; variable-length bytes)."""
        return raw

    def _as_objects(self, raw: np.ndarray) -> np.ndarray:
        return raw.astype(object)

    def _as_dtype(self, raw: np.ndarray) -> np.ndarray:
        return raw.astype(self.dtype, copy=False)

    @staticmethod
    def _char_raw(raw: np.ndarray) -> np.ndarray:
        if raw.dtype.kind == "U":  # old NCZarr NC_CHAR: one byte per <U1 element
            return np.char.encode(raw, "latin-1").astype("S1")
        return raw.astype("S1")


# how each mode decodes the stored values it reads (the rest: the stored values as self.dtype)
_DECODERS: dict[Decode, Callable[[LazyArray, np.ndarray], np.ndarray]] = {
    Decode.FIXED: LazyArray._fixed,
    Decode.TEXT_S: LazyArray._fixed,
    Decode.BYTES: LazyArray._as_stored,
    Decode.BYTES_OBJ: LazyArray._as_objects,
    Decode.BYTES_CHAR: LazyArray._bytes_char,
    Decode.BYTES_UNICODE: LazyArray._bytes_unicode,
    Decode.CHAR: LazyArray._char,
    Decode.CHAR_SEP: LazyArray._char_sep,
    Decode.CHAR_RAW: lambda self, raw: LazyArray._char_raw(raw),
    Decode.UNICODE: LazyArray._unicode,
    Decode.VLEN: LazyArray._vlen,
    Decode.TEXT: LazyArray._text,
    Decode.VLEN_BYTES: LazyArray._as_stored,
}


def _squeezed(out: np.ndarray, squeeze: list[int]) -> np.ndarray:
    """``out`` without the axes an integer key selected (``squeeze``)."""
    if squeeze:
        out = out[tuple(0 if i in squeeze else slice(None) for i in range(out.ndim)) + (Ellipsis,)]
    return out
