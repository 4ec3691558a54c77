"""Reading rectangular regions of one stored array, chunk by chunk, whatever its Zarr version.

``ChunkedArray`` plans which chunks a region touches, fetches them in groups on the decode
threads and places each decoded chunk; what a chunk's bytes mean is the subclass's:
``chunked_v2.ChunkedArrayV2`` (numcodecs filters and compressor, netcdf-c's shuffle) and
``chunked_v3.ChunkedArrayV3`` (the Zarr v3 codec chain, shards). ``open_chunked`` picks one.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import Any, cast

import numpy as np

from ..errors import ZStringsError
from ..formats.array import ArrayMeta
from ..io.zstore import ZStore
from ..text.fixed import decode_fixed_utf8
from ..text.kernels import kernels
from ..text.nc_char import decode_char_array, norm_encoding
from ..text.policy import in_chunk, position_label
from ..text.vlen import Kind
from ..threads import decode_threads, run_all
from .decode import Decode
from .paths import node_key

__all__ = ["ChunkedArray", "open_chunked"]

#: a planned chunk: (its grid coordinates, the box to take from it, where the box goes in the output)
Plan = list[tuple[tuple[int, ...], tuple, tuple]]


class ChunkedArray:
    """Reads rectangular regions of one stored array in its storage dtype (no string decoding),
    or, for string arrays the kernels decode, straight into a StringDType result (``read_into``)."""

    #: how ``LazyArray`` decodes this version's variable-length text: Decode.VLEN (v2: objects) or
    #: Decode.TEXT (v3: chunks decode straight to StringDType)
    vlen_decode = Decode.VLEN

    def __init__(self, zstore: ZStore, meta: ArrayMeta, logical_shape: tuple[int, ...],
                 threads: int | None = None, null_fill: bool = False, raw_bytes: bool = False) -> None:
        """(Each version's subclass also takes ``utf8_errors``: the policy for invalid UTF-8 in
        variable-length string chunks, which its codec pipeline applies; fixed-width decoding
        takes its policy per call.)
        ``threads``: decode threads (None: ``decode_threads()``'s default, 1: no pool).
        ``null_fill``: a ``|O`` array's ``fill_value: null`` gives None, as zarr-python 2 reads it
        (else ``""``/``b""``).
        ``raw_bytes``: variable-length text is read as the stored bytes (``string_dtype="bytes"``):
        the same chunk layouts decoded as their bytes twins (vlen-utf8 as vlen-bytes, ``string`` as
        ``bytes``), so nothing is UTF-8 decoded."""
        self.threads = threads
        self.raw_bytes = raw_bytes = bool(raw_bytes and meta.string_kind == "vlen")
        self.dtype = np.dtype(object) if raw_bytes else meta.dtype  # what read() assembles
        self.store = zstore
        self.meta = meta
        self.null_fill = null_fill and meta.dtype.kind == "O" and meta.fill_value is None
        self.shape = logical_shape  # may exceed meta.shape along unlimited dimensions
        self.stored_shape = meta.shape or (1,)  # scalars: netCDF stores shape [1]
        self.chunk_shape = meta.chunks or (1,)
        # what one decode takes: a chunk (a shard's inner chunk when the v3 reader reads shards
        # by parts); selections are planned in these units
        self.unit_shape = self.chunk_shape
        self.parallel = True  # decode several chunks on the pool (subclasses narrow it)

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__.copy()

    # ------------------------------------------------------------------ what subclasses define

    @property
    def layout(self) -> str | None:
        """The variable-length string layout of the chunks (v3: ``vlen-utf8``, ``zarrs.vlen``,
        ``arrow``, ...), or None."""
        return None

    def store_encoding(self, where: str) -> dict[str, Any]:
        """The array's storage facts for ``encoding``: its metadata, and its codecs as the codec
        objects xarray's ``to_zarr`` takes (``where`` names the variable in errors)."""
        raise NotImplementedError

    def decode_chunk(self, raw: bytes, key: str, chunks: tuple[int, ...],
                     region: tuple[slice, ...] | None = None) -> np.ndarray:
        """One stored chunk's bytes as a storage-dtype array of shape ``chunks``."""
        raise NotImplementedError

    def _can_read_into(self, decode: Decode, text_encoding: str, null_chunks: bool) -> bool:
        return False

    def _decode_into(self, raw: bytes, key: str, view: np.ndarray, sel: np.ndarray | None,
                     src: tuple[slice, ...], decode: Decode, policy: str, what: str, index: Any) -> None:
        """One chunk decoded into its part of a StringDType result (``view``); ``sel``: the
        chunk's elements in the box (None: all), ``index(k)``: the label of the box's k-th value."""
        raise NotImplementedError

    # ------------------------------------------------------------------ chunks and the plan

    def stored_fill(self) -> Any:
        """The value of an element no chunk holds, in the storage dtype (None: missing)."""
        fv = self.meta.fill_value
        if self.raw_bytes:
            if fv is None:
                return None if self.null_fill else b""
            return fv.encode("utf-8") if isinstance(fv, str) else fv
        if fv is None:
            if self.meta.dtype.kind == "O":
                if self.null_fill:
                    return None
                return "" if self.meta.string_kind == "vlen" else b""
            return np.zeros((), self.meta.dtype)[()]
        return fv

    def chunk_key(self, idx: tuple[int, ...]) -> str:
        """The store key of chunk ``idx`` (from the store's root)."""
        return node_key(self.meta.path, self.meta.chunk_key(idx if self.meta.shape else ()))

    def _plan(self, region: tuple[slice, ...]) -> tuple[Plan, bool]:
        """(per touched chunk: (its grid coordinates, src slices in the chunk, dst slices in the
        output), needs fill)."""
        stored_shape, chunks = self.stored_shape, self.chunk_shape
        ranges = []
        for s, n, c in zip(region, stored_shape, chunks, strict=True):
            stop = min(s.stop, n)
            if s.start >= stop:
                return [], True
            ranges.append(range(s.start // c, (stop - 1) // c + 1))
        fill = any(s.stop > n for s, n in zip(region, stored_shape, strict=True))
        plan = []
        for ix in itertools.product(*ranges):
            src, dst = [], []
            for i, s, n, c in zip(ix, region, stored_shape, chunks, strict=True):
                c0 = i * c
                lo, hi = max(s.start, c0), min(s.stop, c0 + c, n)
                src.append(slice(lo - c0, hi - c0))
                dst.append(slice(lo - s.start, hi - s.start))
            plan.append((ix, tuple(src), tuple(dst)))
        return plan, fill

    def _group_size(self, shape: tuple[int, ...] | None = None) -> int:
        """Chunks (of ``shape``: the chunk shape unless given) one task fetches and decodes
        together: ~4 MiB of stored values (many small chunks share one store round trip), one
        chunk when chunks are bigger than that."""
        itemsize = self.meta.dtype.itemsize if self.meta.dtype.kind not in "OT" else 32
        chunk_bytes = max(1, math.prod(shape or self.chunk_shape) * max(itemsize, 1))
        return max(1, min(256, (4 << 20) // chunk_bytes))

    def _groups(self, plan: Plan) -> list[Any]:
        """The plan cut into the groups one task each fetches (``_fetch``) and decodes."""
        step = self._group_size()
        return [plan[b0 : b0 + step] for b0 in range(0, len(plan), step)]

    def _fetch(self, group: Any, scratch: bool = True) -> Iterator[tuple[str, Any, tuple, tuple]]:
        """(key, bytes or None, src, dst) per unit of a group, each fetched before it is yielded and
        to be consumed before the next (``scratch``: local chunks may be read into the thread's
        reused buffer: ZStore.get_many's scratch)."""
        raws = self.store.get_many([self.chunk_key(ix) for ix, _, _ in group], scratch=scratch)
        for (ix, src, dst), i in zip(group, range(len(raws)), strict=True):
            raw, raws[i] = raws[i], None  # drop each chunk's bytes once decoded
            yield self.chunk_key(ix), raw, src, dst

    def _run(self, plan: Plan, fn: Any, parallel: bool, *, scratch: bool = True) -> None:
        """fn(key, raw_or_None, src, dst) for every planned chunk; fn must not keep ``raw`` (it may
        be a view of a buffer the thread reuses), unless ``scratch`` is False (fresh buffers: an
        Arrow result may keep them).

        Each task fetches its own group of chunks and decodes them, on the thread pool: one
        thread's fetch overlaps another's decoding (the kernels release the GIL), and at most
        one group per thread is in memory at a time.
        """
        def task(group: Any) -> None:
            # fn consumes each chunk's bytes before this thread fetches again (see _fetch)
            for k, raw, src, dst in (self._fetch(group) if scratch else self._fetch(group, False)):
                fn(k, raw, src, dst)
                del raw

        threads = decode_threads(self.threads)  # (a bad XR_ZSTRINGS_DECODE_THREADS fails every read)
        try:
            groups = self._groups(plan)
            # run_all's tasks run in the caller's context: the read's policy report (policy_scope)
            run_all(task, groups, threads if parallel else 1)
        except (ZStringsError, OSError):
            self.store.check_version()  # a swapped-in version's chunks fail: say that instead
            raise
        # chunks of one version, the one whose metadata were read (or StoreReplacedError)
        self.store.check_version()

    # ------------------------------------------------------------------ reads

    def read(self, region: tuple[slice, ...]) -> np.ndarray:
        """The values in ``region`` (step-1 slices within ``self.shape``) as a storage-dtype array."""
        chunks = self.unit_shape
        out_shape = tuple(s.stop - s.start for s in region)
        out = np.empty(out_shape, dtype=self.dtype)
        if out.size == 0:
            return out
        plan, fill = self._plan(region)
        if fill:
            out[...] = self.stored_fill()  # beyond the stored shape (unlimited dimension): fill
        if not plan:
            return out

        def place(key: str, raw: bytes | None, src: tuple, dst: tuple) -> None:
            if raw is None:
                out[dst] = self.stored_fill()  # a chunk never written reads as the fill value
            else:
                with in_chunk(self.store.where(key)):
                    out[dst] = self.decode_chunk(raw, key, chunks, region=src)[src]

        # (a shard read by parts is many units: parallel however few shards)
        self._run(plan, place, self.parallel and (len(plan) > 2 or self.unit_shape != self.chunk_shape))
        return out

    def can_read_into(self, decode: Decode, text_encoding: str, null_chunks: bool = False) -> bool:
        """Whether ``read_into`` can decode this array's chunks straight into a StringDType result."""
        return kernels() is not None and self._can_read_into(decode, text_encoding, null_chunks)

    @staticmethod
    def sel(src: tuple, chunk_shape: tuple[int, ...], order: str) -> np.ndarray | None:
        """Element numbers (in the chunk's storage order) of the ``src`` box, C order; None = all."""
        full = all(s.start == 0 and s.stop == c for s, c in zip(src, chunk_shape, strict=True))
        if full and (order == "C" or sum(c > 1 for c in chunk_shape) <= 1):
            return None
        # element strides of the chunk in its storage order; only the box is materialised (a
        # chunk may be far larger than the array it belongs to)
        strides, acc = [0] * len(chunk_shape), 1
        for d in (range(len(chunk_shape) - 1, -1, -1) if order == "C" else range(len(chunk_shape))):
            strides[d], acc = acc, acc * chunk_shape[d]
        idx = np.zeros((), np.int64)
        for s, st in zip(src, strides, strict=True):
            idx = np.add.outer(idx, np.arange(s.start, s.stop, dtype=np.int64) * st)
        return np.ascontiguousarray(idx, dtype=np.int64).reshape(-1)

    def read_into(self, region: tuple[slice, ...], decode: Decode, policy: str, what: str,
                  dtype: np.dtype | None = None, null_chunks: bool = False) -> np.ndarray:
        """``region`` decoded straight into a StringDType array, one chunk at a time on the pool.

        No storage-dtype copy of the region is assembled: each chunk's decompressed bytes are
        decoded by the compiled kernels into its slot of the result (see ``can_read_into``).
        ``dtype``: the StringDType of the result (one with an NA object for masked variables);
        ``null_chunks``: never-written chunks are NA (a ``fill_value: null`` ``|O`` array).
        """
        T = np.dtypes.StringDType() if dtype is None else dtype
        null_chunks = null_chunks and self.stored_fill() is None
        char = decode.joins_chars
        lead = region[:-1] if char else region
        out_shape = tuple(s.stop - s.start for s in lead)
        out = np.empty(out_shape, dtype=T)
        if out.size == 0:
            return out
        plan, fill = self._plan(region)
        if char:  # the string-length axis is one whole chunk: drop it from the boxes
            plan = [(k, src[:-1], dst[:-1]) for k, src, dst in plan]
        lead_chunks = self.unit_shape[:-1] if char else self.unit_shape
        fill_value = "" if null_chunks else str(self._fill_T(decode, policy, what))
        if fill:
            out[...] = getattr(T, "na_object", "") if null_chunks else fill_value
        if not plan:
            return out
        unwritten: list[tuple] = []  # (null_chunks) boxes set to NA after the threads are done

        def index_of(dst: tuple) -> Any:
            return _labels(dst, out_shape)

        def place(key: str, raw: bytes | None, src: tuple, dst: tuple) -> None:
            view = out[dst + (Ellipsis,)]  # a view even when dst is () (0-d result)
            if raw is None and null_chunks:
                unwritten.append(dst)
                return
            if raw is None:  # (not view[...] = fill: this runs on threads, see _kernels.pack_at)
                kernels().pack_at(view, None, [fill_value.encode("utf-8")])
                return
            sel = self.sel(src, lead_chunks, self.meta.order)
            self._decode_into(raw, key, view, sel, src, decode, policy, what, index_of(dst))

        self._run(plan, place, True)
        for dst in unwritten:
            out[dst + (Ellipsis,)] = cast(np.dtypes.StringDType, T).na_object
        return out

    # ------------------------------------------------------------------ straight into Arrow

    def can_read_arrow(self, decode: Decode, text_encoding: str) -> bool:
        """Whether ``read_arrow`` builds this array's values straight from its chunk buffers: |Sn
        (UTF-8 or as bytes), NC_CHAR (rows whose chunks hold whole rows, or characters), UTF-32,
        and the variable-length layouts the subclass reads (``_can_read_arrow``)."""
        meta, utf8 = self.meta, norm_encoding(text_encoding) == "utf-8"
        if decode in (Decode.FIXED, Decode.TEXT_S, Decode.BYTES, Decode.BYTES_OBJ):
            return meta.dtype.kind == "S" and meta.dtype.itemsize > 0 and (utf8 or decode.as_bytes)
        if decode.joins_chars:
            return ((utf8 or decode.as_bytes) and meta.dtype.itemsize == 1 and meta.dtype.kind in "Su"
                    and len(self.shape) >= 1 and self.shape[-1] > 0)
        if decode in (Decode.CHAR_SEP, Decode.CHAR_RAW):  # NC_CHAR, one value per character
            return (utf8 or decode.as_bytes) and meta.dtype.itemsize == 1 and meta.dtype.kind in "Su"
        if decode is Decode.UNICODE:
            return meta.dtype.kind == "U"
        return self._can_read_arrow(decode)

    def _can_read_arrow(self, decode: Decode) -> bool:
        return False

    def read_arrow(self, region: tuple[slice, ...], decode: Decode, policy: str, what: str, *,
                   null_chunks: bool = False) -> Any:
        """``region``'s values flattened in C order as a ``pyarrow.ChunkedArray`` (large_string,
        or large_binary for bytes), built from each chunk's buffers on the pool (``can_read_arrow``).

        ``decode.joins_chars`` drops the last axis. Elements no chunk holds are the fill value, or
        nulls when the stored fill is missing (``null_chunks``: as ``read_into``). Boxes that are
        contiguous in the result (1-D, chunks spanning whole trailing axes) stay one Arrow chunk
        each; other boxes are put in place with one ``take``.
        """
        from . import arrow as ra  # (read.arrow imports the chunk readers)

        char = decode.joins_chars
        out_shape = tuple(s.stop - s.start for s in (region[:-1] if char else region))
        typ = ra.arrow_type(decode)
        fill = self._fill_arrow(decode, policy, what)
        if math.prod(out_shape) == 0:
            return ra.assemble([], out_shape, fill, typ)
        if char and self.unit_shape[-1] != self.shape[-1]:  # chunks split the rows: join their bytes first
            return self._rows_arrow(region, decode, policy, what, out_shape)
        plan, _ = self._plan(region)
        pieces: list[tuple[tuple, Any]] = []  # (box in the result, its values or None: never written)

        def place(key: str, raw: bytes | None, src: tuple, dst: tuple) -> None:
            dst = dst[:-1] if char else dst
            arr = None if raw is None else self._arrow_box(raw, key, src, decode, policy, what, _labels(dst, out_shape))
            pieces.append((dst, arr if arr is None or arr.type == typ else arr.cast(typ)))

        if plan:
            # an Arrow chunk that wraps the bytes it was read from needs them fresh (no scratch)
            self._run(plan, place, True, scratch=not self._arrow_wraps(decode))
        return ra.assemble(pieces, out_shape, fill, typ)

    def _arrow_wraps(self, decode: Decode) -> bool:
        """Whether ``_arrow_box`` may return arrays around a chunk's stored bytes (zero-copy), so
        the chunk must not be read into the thread's reused buffer. The fixed-width rows and
        numcodecs' vlen frames are always compacted into new buffers."""
        return False

    def _rows_arrow(self, region: tuple[slice, ...], decode: Decode, policy: str, what: str,
                    out_shape: tuple[int, ...]) -> Any:
        """NC_CHAR rows split across chunks: the region's stored characters (``read``: bytes, no
        strings) joined into rows, then one Arrow array."""
        import pyarrow as pa

        from ..text import arrow as ta

        raw = np.ascontiguousarray(self.read(region))
        kind: Kind = "bytes" if decode.as_bytes else "str"
        arr = ta.fixed_to_arrow(raw.view(np.uint8).reshape(-1, raw.shape[-1]), trailing=True, kind=kind,
                                policy=policy, what=what,
                                index=_labels(tuple(slice(0, n) for n in out_shape), out_shape))
        return pa.chunked_array([arr], type=arr.type)

    def _arrow_box(self, raw: Any, key: str, src: tuple[slice, ...], decode: Decode, policy: str, what: str,
                   index: Any) -> Any:
        """One unit's ``src`` box, C order, as an Arrow array: here the fixed-width layouts, from the
        stored bytes ``decode_chunk`` gives (no strings made; F-order chunks put in C order); the
        subclasses read their variable-length chunks."""
        from ..text import arrow as ta

        box = np.ascontiguousarray(self.decode_chunk(raw, key, self.unit_shape, region=src)[src])
        if decode is Decode.UNICODE:
            return ta.utf32_to_arrow(box.reshape(-1))
        width = box.shape[-1] if decode.joins_chars else box.dtype.itemsize
        u8 = box.view(np.uint8).reshape(-1, width)
        kind: Kind = "bytes" if decode.as_bytes else "str"
        # a value ends at its first NUL (NC_STRING), else loses its trailing NULs only (numpy's |S)
        return ta.fixed_to_arrow(u8, trailing=decode.trailing_nuls_only or decode.as_bytes, kind=kind,
                                 policy=policy, what=what, index=index)

    def _fill_arrow(self, decode: Decode, policy: str, what: str) -> Any:
        """The value of an element no chunk holds, as the result has it (None: a null)."""
        fv = self.stored_fill()
        if fv is None:
            return None
        if decode is Decode.UNICODE:
            return str(np.array(fv, dtype=self.meta.dtype)[()])
        if decode.text:
            return str(self._fill_T(decode, policy, what))
        if decode.joins_chars:  # the fill character repeated, as the joined |Sn keeps it
            b = fv if isinstance(fv, bytes) else np.asarray(fv).astype("S1").tobytes()
            return (b[:1] * self.shape[-1]).rstrip(b"\0")
        if isinstance(fv, str):
            return fv.encode("utf-8")
        return bytes(np.array(fv, dtype=self.meta.dtype)[()]) if self.meta.dtype.kind == "S" else bytes(fv)

    def _fill_T(self, decode: Decode, policy: str, what: str) -> Any:
        fv = self.stored_fill()
        if decode.variable_length:
            return fv
        if decode.joins_chars:
            b = fv if isinstance(fv, bytes) else np.asarray(fv).astype("S1").tobytes()
            row = np.frombuffer(b[:1] * self.shape[-1], np.uint8).reshape(1, -1)
            return decode_char_array(row, utf8_errors=cast(Any, policy), what=what)[0]
        return decode_fixed_utf8(np.array(fv, dtype=self.meta.dtype), utf8_errors=cast(Any, policy),
                                         what=what)[()]


def _labels(dst: tuple, out_shape: tuple[int, ...]) -> Any:
    """``index(k)``: the label (in the read's result) of the k-th value of box ``dst``, for errors."""
    starts = [d.start for d in dst]
    shape = tuple(d.stop - d.start for d in dst)

    def index(k: int) -> str:
        loc = np.unravel_index(k, shape) if shape else ()
        flat = int(np.ravel_multi_index(tuple(a + b for a, b in zip(loc, starts, strict=True)), out_shape)) if out_shape else 0
        return position_label(flat, out_shape)

    return index


def open_chunked(zstore: ZStore, meta: ArrayMeta, logical_shape: tuple[int, ...], **options: Any) -> ChunkedArray:
    """The chunk reader for ``meta``'s Zarr version (``options``: ``ChunkedArray``'s keywords)."""
    # imported here: each subclass's module imports this one for the base class
    from .chunked_v2 import ChunkedArrayV2
    from .chunked_v3 import ChunkedArrayV3

    cls: type[ChunkedArray] = ChunkedArrayV3 if meta.zarr_format == 3 else ChunkedArrayV2
    return cls(zstore, meta, logical_shape, **options)
