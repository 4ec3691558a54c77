"""Chunks of a Zarr v3 array: the codec chain of its ``zarr.json`` (``codecs.v3.V3Pipeline``),
shards included, in every string layout (vlen-utf8, zarrs.vlen, the Arrow layout, zarrs.optional).

Variable-length text chunks (and each inner chunk of a shard) decode straight into a StringDType
result with the compiled kernels (``read_into``); everything else through ``decode_chunk``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..codecs.encoding import v3_codecs_encoding
from ..codecs.v3 import V3Pipeline, classify_data_type
from ..errors import ChunkError, MetadataError, UnsupportedError, ZStringsError
from ..formats.zarr3 import ArrayMetaV3
from ..io.zstore import ZStore
from ..text import fixed as strings
from ..text import vlen
from .chunked import ChunkedArray
from .paths import node_key

__all__ = ["ChunkedArrayV3"]

#: an inner chunk a shard's index marks as never written (offset and length both 2**64 - 1)
_MISSING = 2**64 - 1


class ChunkedArrayV3(ChunkedArray):
    """A Zarr v3 array's chunks through its codec chain."""

    meta: ArrayMetaV3
    vlen_decode = "text"

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
        try:
            arr = self.pipeline.decode(raw, self.meta.chunks, region=region)
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

    def _can_read_into(self, decode: str, text_encoding: str, null_chunks: bool) -> bool:
        if decode != "text":
            return False
        p: Any = self.pipeline
        if p.sharded:  # inner chunks in a plain layout, no nested shards
            p = p.ab.inner if not p.aa and not p.ab.inner.sharded else None
        return (p is not None and p.kind == "str" and not p.aa
                and p.layout in ("vlen-utf8", "zarrs.vlen", "arrow", "arrow-large")
                and isinstance(self.stored_fill(), str))

    def _decode_into(self, raw: bytes, key: str, view: np.ndarray, sel: np.ndarray | None,
                     src: tuple[slice, ...], decode: str, policy: str, what: str, index: Any) -> None:
        with strings.in_chunk(self.store.where(key)):
            self._text_into(raw, key, view, sel, src)

    def _text_into(self, raw: bytes, key: str, view: np.ndarray, sel: np.ndarray | None,
                   src: tuple[slice, ...]) -> None:
        """One chunk (or shard: each inner chunk the ``src`` box touches) into ``view``."""
        p = self.pipeline
        ctx = p.context(None)
        try:
            with p.decode_errors(ctx):
                # a plain chunk's bytes are consumed right away: decompress into scratch; a shard
                # stays whole while its inner chunks (which use the scratch) are decoded
                u8 = p.bytes_decode(raw, ctx, scratch=not p.sharded)
                if not p.sharded:
                    self._inner_into(p, u8, view, sel, math.prod(self.meta.chunks), ctx)
                    return
                shard = p.ab
                idx = shard.read_index(u8, ctx)
                for j, inner_box in enumerate(shard.slices):
                    # the part of the wanted box inside this inner chunk: where it goes in view,
                    # and which elements of the inner chunk it is
                    lo = [max(s.start, b.start) for s, b in zip(src, inner_box, strict=True)]
                    hi = [min(s.stop, b.stop) for s, b in zip(src, inner_box, strict=True)]
                    if any(a >= b for a, b in zip(lo, hi, strict=True)):
                        continue
                    sub = view[tuple(slice(a - s.start, b - s.start) for a, b, s in zip(lo, hi, src, strict=True))
                               + (Ellipsis,)]
                    box = tuple(slice(a - b.start, c - b.start) for a, c, b in zip(lo, hi, inner_box, strict=True))
                    o, nb = int(idx[j, 0]), int(idx[j, 1])
                    if o == _MISSING and nb == _MISSING:  # an inner chunk never written: the fill value
                        strings.kernels().pack_at(sub, None, [str(self.stored_fill()).encode("utf-8")])
                        continue
                    inner = shard.inner
                    ictx = f"{ctx}, inner chunk {tuple(int(c) for c in np.unravel_index(j, shard.cps))}"
                    iu8 = inner.bytes_decode(u8[o : o + nb], ictx, scratch=True)
                    self._inner_into(inner, iu8, sub, self.sel(box, shard.inner_shape, "C"),
                                     math.prod(shard.inner_shape), ictx)
        except ZStringsError as e:
            raise type(e)(f"Chunk {self.store.where(key)}: {e}") from None

    @staticmethod
    def _inner_into(p: Any, u8: np.ndarray, view: np.ndarray, sel: np.ndarray | None, n: int, ctx: str) -> None:
        """Decoded bytes of one plain (unsharded) variable-length chunk of ``n`` values into view."""
        if p.layout == "vlen-utf8":
            vlen.decode_vlen_utf8_into(u8, view, sel, n, utf8_errors=p.ab.utf8_errors, what=ctx)
        else:
            vlen.vlen_into(p.ab.to_vlen(u8, n, ctx), view, sel, utf8_errors=p.ab.utf8_errors, what=ctx)
