"""Chunks of a Zarr v3 array: the codec chain of its ``zarr.json`` (``codecs.v3.V3Pipeline``),
shards included, in every string layout (vlen-utf8, zarrs.vlen, the Arrow layout, zarrs.optional).

Variable-length text chunks (and each inner chunk of a shard) decode straight into a StringDType
result with the compiled kernels (``read_into``); everything else through ``decode_chunk``.

Shards are read by parts when ``sharding_indexed`` is the whole codec chain (zarr-python's own
condition): a shard the selection covers is fetched whole, as one object; of any other, the index
first (one ranged request per shard, all at once, kept for the open array's later reads), then only
the inner chunks the selection touches, their byte ranges merged into few requests. The unit decoded
is then the inner chunk (``unit_shape``), as a chunk of an unsharded array. The index is kept for
the open where the store tells a replaced shard (S3's ETag, checked by the server through
``If-Match``; a local file's identity): a shard replaced since is noticed and its index read again.
Other zarr-python stores cannot tell, so their indexes are read once per selection, as zarr-python
reads them.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from typing import Any, NamedTuple, Self

import numpy as np

from ..codecs.array_array import TransposeCodec
from ..codecs.encoding import v3_codecs_encoding
from ..codecs.layouts import VARIABLE_LENGTH, of_chunks
from ..codecs.sharding import MISSING, ShardingCodec, coalesce
from ..codecs.v3 import V3Pipeline, classify_data_type
from ..errors import ChunkError, MetadataError, UnsupportedError, ZStringsError
from ..formats.zarr3 import ArrayMetaV3
from ..io.zstore import ObjectChanged, ZStore
from ..text.kernels import kernels
from ..text.policy import in_chunk
from .chunked import ChunkedArray, Plan
from .decode import Decode
from .paths import node_key

__all__ = ["ChunkedArrayV3", "InnerKey"]

#: byte ranges of one shard closer than this are read in one request, up to _COALESCE_MAX bytes
#: (zarr-python 3.4's defaults: sharding_coalesce_max_gap_bytes, sharding_coalesce_max_bytes)
_COALESCE_GAP = 1 << 20
_COALESCE_MAX = 16 << 20
#: shard indexes an open array keeps (bytes of index entries); the oldest are dropped first
_INDEX_CACHE_BYTES = 64 << 20
#: reads of one shard's parts when it keeps being replaced between its index and its parts
_CHANGED_TRIES = 3


class InnerKey(str):
    """A shard's store key naming one of its inner chunks (``inner``: the chunk's coordinates in
    the shard): what the chunk reader hands its decoders for a shard read by parts."""

    inner: tuple[int, ...]

    def __new__(cls, key: str, inner: tuple[int, ...]) -> Self:
        obj = super().__new__(cls, key)
        obj.inner = inner
        return obj


class _Index(NamedTuple):
    entries: np.ndarray  # (n_inner, 2) offset, nbytes
    version: Any  # the object's version the index came from (ZStore.RangeRead.version)


class _IndexCache:
    """Shard indexes read by one open array (key -> _Index), the oldest dropped beyond ``limit``
    bytes of entries; thread-safe; a pickled copy (a dask worker's) starts empty."""

    def __init__(self, limit: int = _INDEX_CACHE_BYTES) -> None:
        self.limit = limit
        self._items: dict[str, _Index] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"limit": self.limit}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["limit"])  # type: ignore[misc]

    def get(self, key: str) -> _Index | None:
        return self._items.get(key)

    def put(self, key: str, index: _Index) -> None:
        if index.entries.nbytes > self.limit:
            return
        with self._lock:
            self.drop_locked(key)
            self._items[key] = index
            self._bytes += index.entries.nbytes
            while self._bytes > self.limit:
                self.drop_locked(next(iter(self._items)))

    def drop(self, key: str) -> None:
        with self._lock:
            self.drop_locked(key)

    def drop_locked(self, key: str) -> None:
        old = self._items.pop(key, None)
        if old is not None:
            self._bytes -= old.entries.nbytes


class _ShardRead:
    """One shard read by parts in one selection, shared by the groups of its inner chunks (on
    several threads): the index they use and the version of the shard any of them has read data
    of, so that a selection never mixes two versions of a shard."""

    def __init__(self, key: str, index: _Index | None) -> None:
        self.key = key
        self.index = index
        self.used: Any = None  # (the version read; _UNVERSIONED for a store that tells none)
        self.lock = threading.Lock()


_UNVERSIONED = object()


class _Part(NamedTuple):
    """One inner chunk a partial shard read needs: its entry in the index, the part of it wanted,
    where that goes in the output."""

    j: int
    src: tuple[slice, ...]
    dst: tuple[slice, ...]


class ChunkedArrayV3(ChunkedArray):
    """A Zarr v3 array's chunks through its codec chain."""

    meta: ArrayMetaV3
    vlen_decode = Decode.TEXT

    def __init__(self, zstore: ZStore, meta: ArrayMetaV3, logical_shape: tuple[int, ...],
                 utf8_errors: str = "strict", threads: int | None = None, null_fill: bool = False,
                 raw_bytes: bool = False) -> None:
        super().__init__(zstore, meta, logical_shape, threads=threads, null_fill=null_fill, raw_bytes=raw_bytes)
        data_type, dtype, fill = meta.data_type, meta.dtype, meta.fill_value
        if self.raw_bytes:
            data_type = "large_binary" if classify_data_type(meta.data_type)[1] else "binary"
            dtype = np.dtype(object)
            fill = fill.encode("utf-8") if isinstance(fill, str) else fill
        where = zstore.where(node_key(meta.path, "zarr.json"))
        self.pipeline = V3Pipeline.from_metadata(
            list(meta.codecs), data_type=data_type, dtype=dtype, chunk_shape=meta.chunks,
            fill_value=fill, where=where, utf8_errors=utf8_errors,
        )
        p = self.pipeline
        # read by parts: sharding_indexed is the whole chain (no codec transposes or compresses
        # the shard as a whole) of an array with dimensions; the unit decoded is then the inner chunk
        self.shard: ShardingCodec | None = p.ab if p.sharded and not p.aa and not p.bb and meta.shape else None
        self.unit: V3Pipeline = self.shard.inner if self.shard is not None else p
        if self.shard is not None:
            self.unit_shape = self.shard.inner_shape
        self._indexes = _IndexCache()
        if meta.optional != (self.pipeline.layout == "zarrs.optional"):
            raise (UnsupportedError if meta.optional else MetadataError)(
                f"Array {where}: data type {'optional' if meta.optional else meta.data_type!r} with "
                f"the codec chain {[c.get('name') for c in meta.codecs]}: zarrs' optional data type is "
                "read with the zarrs.optional codec as its array->bytes codec, and that codec only with it."
            )

    @property
    def layout(self) -> str | None:
        return self.pipeline.layout

    def store_encoding(self, where: str) -> dict[str, Any]:
        meta = self.meta
        encoding: dict[str, Any] = {
            "zarr_format": 3, "zarr_data_type": meta.data_type, "codecs": [dict(c) for c in meta.codecs],
            "layout": self.pipeline.layout,
        }
        # (a sharded array's chunks are its shards: Zarr v2 has no shards, and writing the inner
        # chunks as chunks would multiply the objects; zstrings_shards keeps the shards for v3)
        encoding.update(v3_codecs_encoding(meta.codecs, shards=meta.shards, text=meta.string_kind is not None,
                                           where=where))
        return encoding

    def decode_chunk(self, raw: bytes, key: str, chunks: tuple[int, ...],
                     region: tuple[slice, ...] | None = None) -> np.ndarray:
        inner = getattr(key, "inner", None)
        try:
            if inner is None:  # a chunk (or a shard decoded whole), in the metadata's shape (0-d: ())
                arr = self.pipeline.decode(raw, self.meta.chunks, region=region if self.meta.shape else None)
            else:  # an inner chunk of a shard read by parts
                ctx = f"{self.pipeline.context(None)}, inner chunk {inner}"
                arr = self.unit.decode(raw, self.unit_shape, region=region, context=ctx, writeable=False)
        except ZStringsError as e:
            raise type(e)(f"Chunk {self.store.where(key)}: {e}") from None
        except Exception as e:  # noqa: BLE001 - any codec failure is a ChunkError naming the chunk
            raise ChunkError(
                f"Cannot decode chunk {self.store.where(key)}: {type(e).__name__}: {e}. Expected the "
                f"codecs {[c.get('name') for c in self.meta.codecs]!r} of its zarr.json."
            ) from None
        return np.asarray(arr).reshape(chunks)

    def decode_arrow(self, raw: bytes, key: str) -> Any:
        """One chunk as a pyarrow array (zero-copy for Arrow-layout chunks)."""
        return self.pipeline.decode_arrow(raw, self.meta.chunks, key=key)

    # ------------------------------------------------------------------ straight into StringDType

    def _can_read_into(self, decode: Decode, text_encoding: str, null_chunks: bool) -> bool:
        if decode is not Decode.TEXT:
            return False
        p: Any = self.unit
        if p.sharded:  # a shard decoded whole: inner chunks in a plain layout, no nested shards
            p = p.ab.inner if not p.aa and not p.ab.inner.sharded else None
        return (p is not None and p.kind == "str" and not p.aa
                and p.layout in VARIABLE_LENGTH
                and isinstance(self.stored_fill(), str))

    def _decode_into(self, raw: bytes, key: str, view: np.ndarray, sel: np.ndarray | None,
                     src: tuple[slice, ...], decode: Decode, policy: str, what: str, index: Any) -> None:
        with in_chunk(self.store.where(key)):
            self._text_into(raw, key, view, sel, src)

    def _text_into(self, raw: bytes, key: str, view: np.ndarray, sel: np.ndarray | None,
                   src: tuple[slice, ...]) -> None:
        """One unit (chunk, inner chunk, or a shard decoded whole: each inner chunk the ``src`` box
        touches) into ``view``."""
        p = self.unit
        ctx = p.context(None) if self.shard is None else self.pipeline.context(None)
        inner = getattr(key, "inner", None)
        if inner is not None:
            ctx = f"{ctx}, inner chunk {inner}"
        try:
            with p.decode_errors(ctx):
                # a plain chunk's bytes are consumed right away: decompress into scratch; a shard
                # stays whole while its inner chunks (which use the scratch) are decoded
                u8 = p.bytes_decode(raw, ctx, scratch=not p.sharded)
                if not p.sharded:
                    self._inner_into(p, u8, view, sel, math.prod(self.unit_shape), ctx)
                    return
                shard = p.ab
                idx = shard.read_index(u8, ctx)
                for j, part, where, data in shard.inner_chunks(u8, idx, src):
                    sub = view[where + (Ellipsis,)]
                    if data is None:  # an inner chunk never written: the fill value
                        kernels().pack_at(sub, None, [str(self.stored_fill()).encode("utf-8")])
                        continue
                    inner_p = shard.inner
                    ictx = f"{ctx}, inner chunk {shard.coords(j)}"
                    iu8 = inner_p.bytes_decode(data, ictx, scratch=True)
                    self._inner_into(inner_p, iu8, sub, self.sel(part, shard.inner_shape, "C"),
                                     math.prod(shard.inner_shape), ictx)
        except ZStringsError as e:
            raise type(e)(f"Chunk {self.store.where(key)}: {e}") from None

    @staticmethod
    def _inner_into(p: Any, u8: np.ndarray, view: np.ndarray, sel: np.ndarray | None, n: int, ctx: str) -> None:
        """Decoded bytes of one plain (unsharded) variable-length chunk of ``n`` values into view
        (the layout's read kernel)."""
        of_chunks(p.layout).read_into(p.ab, u8, view, sel, n, ctx)

    # ------------------------------------------------------------------ straight into Arrow

    def _can_read_arrow(self, decode: Decode) -> bool:
        """Variable-length chunks (each inner chunk of a shard read by parts) in every layout,
        zarrs.optional included; not chains with array->array codecs or compressed whole shards."""
        p: Any = self.unit
        if decode not in (Decode.TEXT, Decode.VLEN_BYTES) or (p.kind == "bytes") != decode.as_bytes:
            return False
        if p.aa and (p.sharded or not all(isinstance(t, TransposeCodec) for t in p.aa)):
            return False
        if p.sharded:  # a shard decoded whole (compressed as a whole): its inner chunks, one level
            p = p.ab.inner
            if p.sharded or p.aa:
                return False
        if p.layout == "zarrs.optional":
            p = p.ab.data
            return not p.sharded and not p.aa and p.layout in VARIABLE_LENGTH
        return p.layout in VARIABLE_LENGTH

    def _arrow_wraps(self, decode: Decode) -> bool:
        """The Arrow layout and zarrs.vlen are wrapped as stored (any chunk of theirs may be)."""
        p: Any = self.unit
        if decode not in (Decode.TEXT, Decode.VLEN_BYTES):
            return False
        if p.sharded:
            p = p.ab.inner
        if p.layout == "zarrs.optional":
            p = p.ab.data
        return p.layout not in ("vlen-utf8", "vlen-bytes")

    def _arrow_box(self, raw: Any, key: str, src: tuple[slice, ...], decode: Decode, policy: str, what: str,
                   index: Any) -> Any:
        if decode not in (Decode.TEXT, Decode.VLEN_BYTES):
            return super()._arrow_box(raw, key, src, decode, policy, what, index)
        from .arrow import box_of

        p = self.unit
        ctx = p.context(None) if self.shard is None else self.pipeline.context(None)
        inner = getattr(key, "inner", None)
        if inner is not None:
            ctx = f"{ctx}, inner chunk {inner}"
        with in_chunk(self.store.where(key)):
            try:
                if p.sharded:
                    return self._shard_arrow(p, raw, src, decode, policy, ctx)
                if p.aa:
                    return self._transposed_arrow(p, raw, src, policy, ctx)
                arr = p.decode_arrow(raw, self.unit_shape, policy=policy, context=ctx)
            except ZStringsError as e:
                raise type(e)(f"Chunk {self.store.where(key)}: {e}") from None
        return box_of(arr, src, self.unit_shape, "C")

    def _transposed_arrow(self, p: V3Pipeline, raw: Any, src: tuple[slice, ...], policy: str, ctx: str) -> Any:
        """The ``src`` box (C order) of a chunk stored transposed (``transpose`` codecs): its values
        as stored, taken in the chunk's own order."""
        shapes = p._shapes(self.unit_shape)
        with p.decode_errors(ctx):
            arr = p.ab.to_arrow(p.bytes_decode(raw, ctx), shapes[-1], ctx, policy)
        n = len(self.unit_shape)
        axes = list(range(n))  # stored axis k holds the chunk's axis axes[k]
        for step in p.aa:
            axes = [axes[o] for o in step.order]
        strides, acc = [0] * n, 1
        for k in reversed(range(n)):
            strides[axes[k]], acc = acc, acc * shapes[-1][k]
        idx = np.zeros((), np.int64)
        for s, st in zip(src, strides, strict=True):
            idx = np.add.outer(idx, np.arange(s.start, s.stop, dtype=np.int64) * st)
        return arr.take(idx.reshape(-1))

    def _shard_arrow(self, p: V3Pipeline, raw: Any, src: tuple[slice, ...], decode: Decode, policy: str,
                     ctx: str) -> Any:
        """The ``src`` box of a shard decoded whole (its compression undone first): each inner chunk
        it touches as Arrow, put in the box's C order (never-written inner chunks: the fill)."""
        from .arrow import arrow_type, assemble, box_of

        shard: Any = p.ab
        with p.decode_errors(ctx):
            u8 = p.bytes_decode(raw, ctx)
            idx = shard.read_index(u8, ctx)
        pieces = []
        for j, part, where, data in shard.inner_chunks(u8, idx, src):
            arr = None
            if data is not None:
                ictx = f"{ctx}, inner chunk {shard.coords(j)}"
                arr = box_of(shard.inner.decode_arrow(data, shard.inner_shape, policy=policy, context=ictx),
                             part, shard.inner_shape, "C")
            pieces.append((where, arr))
        box = tuple(s.stop - s.start for s in src)
        return assemble(pieces, box, self._fill_arrow(decode, policy, ctx), arrow_type(decode)).combine_chunks()

    # ------------------------------------------------------------------ shards read by parts

    def _groups(self, plan: Plan) -> list[Any]:
        """A shard the box covers (every inner chunk of it) is one object fetched whole, as
        zarr-python fetches it; the other shards' indexes are read now, together (those this open
        has not read yet), and their touched inner chunks grouped by bytes, in index order."""
        shard = self.shard
        if shard is None:
            return super()._groups(plan)
        whole: Plan = []
        partial: list[tuple[str, list[_Part]]] = []
        for ix, src, dst in plan:
            if self._covers(ix, src):
                whole.append((ix, src, dst))
            else:
                parts = [_Part(j, part, _offset(where, dst)) for j, part, where in shard.touched(src)]
                partial.append((self.chunk_key(ix), parts))
        step = self._group_size()
        groups: list[Any] = [("whole", whole[b0 : b0 + step]) for b0 in range(0, len(whole), step)]
        indexes = self._shard_indexes([k for k, _ in partial])
        step = self._group_size(self.unit_shape)
        for key, parts in partial:
            index = indexes[key]
            if index is not None:  # by offset: neighbours share a request
                parts.sort(key=lambda q: int(index.entries[q.j, 0]))
            read = _ShardRead(key, index)
            for b0 in range(0, len(parts), step):
                groups.append(("parts", read, parts[b0 : b0 + step]))
        return groups

    def _covers(self, ix: tuple[int, ...], src: tuple[slice, ...]) -> bool:
        """Whether the box ``src`` of shard ``ix`` touches every inner chunk of it that lies in the array."""
        assert self.shard is not None
        for i, s, c, n, u in zip(ix, src, self.chunk_shape, self.stored_shape, self.unit_shape, strict=True):
            inside = min(c, n - i * c)  # the shard's extent within the array
            if s.start >= u or -(-s.stop // u) < -(-inside // u):
                return False
        return True

    def _shard_indexes(self, keys: list[str]) -> dict[str, _Index | None]:
        """Each shard's index (None: no such shard): from this open's cache, else read now, all
        in one round of ranged requests (and kept where the store gives the shard's version)."""
        out: dict[str, _Index | None] = {k: self._indexes.get(k) for k in keys}
        todo = [k for k, v in out.items() if v is None]
        if todo:
            assert self.shard is not None
            a, b = self.shard.index_range()
            for k, got in zip(todo, self.store.get_ranges([(k, a, b) for k in todo]), strict=True):
                if got is None:
                    continue  # no shard (not cached: a writer may add it later)
                ctx = self.pipeline.context(None)
                try:
                    with self.pipeline.decode_errors(ctx):
                        entries = self.shard.parse_index(np.frombuffer(got.data, np.uint8), ctx, got.size)
                except ZStringsError as e:
                    raise type(e)(f"Chunk {self.store.where(k)}: {e}") from None
                out[k] = index = _Index(entries, got.version)
                if got.version is not None:  # (a store that cannot tell a replaced shard: read per selection)
                    self._indexes.put(k, index)
        return out

    def _fetch(self, group: Any, scratch: bool = True) -> Iterator[tuple[str, Any, tuple, tuple]]:
        if self.shard is None:
            yield from super()._fetch(group, scratch)
        elif group[0] == "whole":
            yield from self._fetch_whole(group[1], scratch)
        else:
            yield from self._fetch_parts(*group[1:], scratch=scratch)

    def _fetch_whole(self, plan: Plan, scratch: bool = True) -> Iterator[tuple[str, Any, tuple, tuple]]:
        """Shards fetched whole, handed on inner chunk by inner chunk."""
        shard = self.shard
        assert shard is not None
        raws = self.store.get_many([self.chunk_key(ix) for ix, _, _ in plan], scratch=scratch)
        for (ix, src, dst), i in zip(plan, range(len(raws)), strict=True):
            key, raw, raws[i] = self.chunk_key(ix), raws[i], None
            idx, u8 = None, None
            if raw is not None:
                u8 = np.frombuffer(raw, np.uint8)
                ctx = self.pipeline.context(None)
                try:
                    with self.pipeline.decode_errors(ctx):
                        idx = shard.read_index(u8, ctx)
                except ZStringsError as e:
                    raise type(e)(f"Chunk {self.store.where(key)}: {e}") from None
            for j, part, where, data in shard.inner_chunks(u8, idx, src):
                yield InnerKey(key, shard.coords(j)), data, part, _offset(where, dst)
            del raw

    def _fetch_parts(self, read: _ShardRead, parts: list[_Part], *,
                     scratch: bool = True) -> Iterator[tuple[str, Any, tuple, tuple]]:
        """Inner chunks of one shard by byte ranges (merged where close), through its index.

        A shard replaced since its index was read (kept from an earlier selection) is refused by
        the version check of the ranged reads: its index is read again, unless this selection has
        already read parts of the old version (then a ChunkError: read the selection again)."""
        shard = self.shard
        assert shard is not None
        key = read.key
        fetched = self._fetch_ranges(read, parts, scratch)
        if fetched is None:  # no shard: every part is the fill value
            for q in parts:
                yield InnerKey(key, shard.coords(q.j)), None, q.src, q.dst
            return
        data = self._inner_slices(key, *fetched)
        for q in parts:
            yield InnerKey(key, shard.coords(q.j)), data.get(q.j), q.src, q.dst

    def _fetch_ranges(self, read: _ShardRead, parts: list[_Part], scratch: bool = True) -> tuple[dict[int, tuple[int, int]], list[int],
                                                                           list[Any], list[Any]] | None:
        """The byte ranges of a shard's wanted inner chunks, fetched: (spans by inner chunk, the inner
        chunks in order, the merged ranges, what each returned); None when there is no shard. Read
        again with a fresh index (up to ``_CHANGED_TRIES`` times) when the shard was replaced."""
        for _attempt in range(_CHANGED_TRIES):
            index = read.index
            if index is None:
                self._use(read, _UNVERSIONED)
                return None
            entries = index.entries
            spans = {q.j: (int(entries[q.j, 0]), int(entries[q.j, 0] + entries[q.j, 1])) for q in parts
                     if not (entries[q.j, 0] == MISSING and entries[q.j, 1] == MISSING)}
            js = list(spans)
            merged = coalesce([spans[j] for j in js], _COALESCE_GAP, _COALESCE_MAX)
            got = self._get_ranges_of(read, index, merged, scratch)
            if got is not None:
                self._use(read, index.version if index.version is not None else _UNVERSIONED)
                return spans, js, merged, got
        raise ChunkError(
            f"Chunk {self.store.where(read.key)}: the shard was replaced {_CHANGED_TRIES} times while being "
            "read (between its index and its inner chunks); another writer is rewriting it. Read it "
            "again when the writer is done."
        )

    def _get_ranges_of(self, read: _ShardRead, index: _Index, merged: list[Any],
                       scratch: bool = True) -> list[Any] | None:
        """The merged byte ranges of one version of a shard; None (its index read again) when that
        version is gone, ChunkError when this selection already read parts of it."""
        key = read.key
        try:
            got = self.store.get_ranges([(key, a, b) for a, b, _ in merged],
                                        versions=[index.version] * len(merged), scratch=scratch)
            if index.version is not None and any(r is None for r in got):
                raise ObjectChanged(key)  # deleted since its index was read
        except ObjectChanged:
            with read.lock:
                if read.used is not None:
                    raise self._mixed(key) from None
                if read.index is index:  # (not yet read again by another group of the shard)
                    self._indexes.drop(key)
                    read.index = self._shard_indexes([key])[key]
            return None
        return got

    def _inner_slices(self, key: str, spans: dict[int, tuple[int, int]], js: list[int], merged: list[Any],
                      got: list[Any]) -> dict[int, Any]:
        """Each wanted inner chunk's bytes, cut from the merged ranges fetched (ChunkError when the
        index points beyond what the shard holds)."""
        data: dict[int, Any] = {}
        for (a, b, members), r in zip(merged, got, strict=True):
            buf = None if r is None else np.frombuffer(r.data, np.uint8)
            for m in members:
                j = js[m]
                lo, hi = spans[j]
                if buf is None or hi - a > buf.size:
                    got_n = "nothing (the shard is gone)" if buf is None else f"{buf.size} bytes"
                    raise ChunkError(
                        f"Chunk {self.store.where(key)}: {self.pipeline.context(None)}: shard index entry "
                        f"{j} says inner chunk at byte {lo} with {hi - lo} bytes, beyond the end of the "
                        f"shard (bytes {a} to {b} read as {got_n}); the shard is truncated or corrupt"
                    )
                data[j] = buf[lo - a : hi - a]
        return data

    def _use(self, read: _ShardRead, version: Any) -> None:
        """Record that this selection reads ``version`` of the shard (ChunkError: another group of
        it read another version)."""
        with read.lock:
            if read.used is None:
                read.used = version
            elif read.used is not version and read.used != version:
                raise self._mixed(read.key)

    def _mixed(self, key: str) -> ChunkError:
        return ChunkError(
            f"Chunk {self.store.where(key)}: the shard was replaced by another writer while this selection "
            "read it (its inner chunks would mix two versions). Read the selection again."
        )


def _offset(where: tuple[slice, ...], dst: tuple[slice, ...]) -> tuple[slice, ...]:
    """``where`` (slices relative to a box) moved to where the box goes (``dst``)."""
    return tuple(slice(w.start + d.start, w.stop + d.start) for w, d in zip(where, dst, strict=True))
