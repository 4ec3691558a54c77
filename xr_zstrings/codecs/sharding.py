"""``sharding_indexed``: a shard of inner chunks, each through its own inner codec chain.

The shard index is ``(chunks_per_shard..., 2)`` uint64 ``offset, nbytes`` through ``index_codecs``
(at the ``start`` or ``end``); ``2**64-1`` marks an inner chunk never written (the fill value).
Inner chains are built recursively as :class:`~.v3.V3Pipeline` objects, so shards nest.

A shard is decoded whole from its bytes (``decode``), or read by parts, as zarr-python reads it:
its index alone (``index_range``, ``parse_index``), then only the inner chunks a selection
touches (``touched``), their byte ranges merged into few requests (``coalesce``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..errors import ChunkError, MetadataError, UnsupportedError, ZStringsError
from .bounded import MAX_CHUNK_BYTES_ENV, max_chunk_bytes
from .chunk import ChunkSpec, as_u8, check_shape, codec_name_cfg, label
from .registry import CodecStep, register

__all__ = ["MISSING", "ShardingCodec", "coalesce"]

#: an index entry's offset and nbytes for an inner chunk never written
MISSING = 2**64 - 1
_DEFAULT_INDEX_CODECS = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]


def _all_fill(a: np.ndarray, fill: Any) -> bool:
    try:
        if a.dtype.kind in "fc" and isinstance(fill, float) and math.isnan(fill):
            return bool(np.isnan(a).all())
        return bool(np.all(a == fill))
    except Exception:  # noqa: BLE001 - third-party codec errors become ChunkError/MetadataError
        return False


def _pipeline() -> Any:
    from .v3 import V3Pipeline  # inner and index chains are pipelines (v3 imports this module)

    return V3Pipeline


@register("sharding_indexed")
class ShardingCodec(CodecStep):
    """``sharding_indexed``: decode/encode a whole shard."""

    family = "array_bytes"
    sharded = True

    @classmethod
    def from_json(cls, name: str, cfg: dict, spec: ChunkSpec) -> ShardingCodec:
        """The step for a sharding_indexed entry (``spec.shape`` is the shard shape)."""
        return cls(cfg, data_type=spec.data_type, dtype=spec.dtype, shard_shape=spec.shape,
                   fill_value=spec.fill_value, kind=spec.kind, utf8_errors=spec.utf8_errors, where=spec.where)

    @classmethod
    def nullable(cls, name: str, cfg: Any, where: str) -> bool:
        """Whether the inner chain holds missing values (zarrs.optional inside the shard)."""
        from .v3 import nullable_chain

        codecs = cfg.get("codecs") if isinstance(cfg, dict) else None
        return isinstance(codecs, list) and nullable_chain([codec_name_cfg(c, where) for c in codecs], where)

    def __init__(self, cfg: dict, *, data_type: Any, dtype: np.dtype, shard_shape: tuple[int, ...],
                 fill_value: Any, kind: str | None, utf8_errors: str, where: str):
        inner = check_shape(cfg.get("chunk_shape", ()), where, "sharding chunk_shape")
        if len(inner) != len(shard_shape) or any(i == 0 for i in inner):
            raise MetadataError(
                f"{label(where)}: sharding chunk_shape {list(inner)} does not match the shard shape "
                f"{list(shard_shape)} (same number of dimensions, no zero extents expected)"
            )
        if any(s % i for s, i in zip(shard_shape, inner, strict=True)):
            raise MetadataError(
                f"{label(where)}: the shard shape {list(shard_shape)} is not a multiple of the inner "
                f"chunk shape {list(inner)}"
            )
        loc = cfg.get("index_location", "end")
        if loc not in ("start", "end"):
            raise MetadataError(f"{label(where)}: sharding index_location={loc!r}; expected 'start' or 'end'")
        codecs = cfg.get("codecs")
        if not isinstance(codecs, list):
            raise MetadataError(f"{label(where)}: sharding_indexed needs a 'codecs' list, got {codecs!r}")
        self.shard_shape = shard_shape
        self.inner_shape = inner
        self.cps = tuple(s // i for s, i in zip(shard_shape, inner, strict=True))
        self.n_inner = math.prod(self.cps)
        self.index_location = loc
        self.fill_value = fill_value
        self.dtype = dtype
        self.inner = _pipeline().from_metadata(
            codecs, data_type=data_type, dtype=dtype, chunk_shape=inner,
            where=f"{label(where)} (inner chunk)", fill_value=fill_value, utf8_errors=utf8_errors,
        )
        self.layout = self.inner.layout
        self.index = _pipeline().from_metadata(
            cfg.get("index_codecs", _DEFAULT_INDEX_CODECS), data_type="uint64", dtype=np.dtype("<u8"),
            chunk_shape=(*self.cps, 2), where=f"{label(where)} sharding index_codecs",
        )
        self.index_size = self.index._encoded_size(self.n_inner * 16)
        maxb = max_chunk_bytes()
        if self.n_inner * 16 > maxb:
            raise UnsupportedError(
                f"{label(where)}: sharding chunk_shape {list(inner)} makes {self.n_inner} inner chunks per "
                f"shard {list(shard_shape)}, whose index alone is beyond the {maxb}-byte chunk limit "
                f"({MAX_CHUNK_BYTES_ENV}); expected a shard holding a sensible number of inner chunks"
            )
        self.where = where

    @property
    def slices(self) -> Any:
        """C-order slices of each inner chunk within the shard (generated, never all held)."""
        inner = self.inner_shape
        return (tuple(slice(c * i, (c + 1) * i) for c, i in zip(coords, inner, strict=True)) for coords in np.ndindex(*self.cps))

    def index_range(self) -> tuple[int, int | None]:
        """Where the index lies in a shard object, as ``ZStore.get_ranges``' ``(start, stop)``: its
        last ``index_size`` bytes (index_location "end", a suffix request) or its first."""
        return (-self.index_size, None) if self.index_location == "end" else (0, self.index_size)

    def read_index(self, u8: np.ndarray, ctx: str) -> np.ndarray:
        """The ``(n_inner, 2)`` offset/nbytes entries of a whole shard's bytes."""
        B = int(u8.size)
        ib = u8[: self.index_size] if self.index_location == "start" else u8[max(0, B - self.index_size):]
        return self.parse_index(ib, ctx, B)

    def parse_index(self, ib: np.ndarray, ctx: str, size: int | None) -> np.ndarray:
        """The ``(n_inner, 2)`` offset/nbytes entries from the index's bytes (``ib``: what a read of
        ``index_range`` got), each checked against the shard's ``size`` in bytes when known, and
        against the chunk limit (no inner chunk is fetched larger than a chunk may decode to)."""
        if ib.size < self.index_size:
            raise ChunkError(
                f"{ctx}: shard of {size if size is not None else int(ib.size)} bytes is shorter than its "
                f"{self.index_size}-byte index ({self.n_inner} inner chunks); the shard is truncated"
            )
        idx = self.index.decode(ib, key=ctx, context=f"{ctx} (shard index)", writeable=False).reshape(self.n_inner, 2)
        off, nb = idx[:, 0], idx[:, 1]
        full = ~((off == MISSING) & (nb == MISSING))
        if full.any():
            o, n = off[full], nb[full]
            limit = max_chunk_bytes()  # (a larger stored inner chunk decodes beyond it too)
            if size is not None:
                bad = (o > size) | (n > size) | (o + np.minimum(n, size) > size)
                beyond = f"beyond the {size}-byte shard"
            else:
                bad = o >= 2**62
                beyond = "beyond any shard"
            if not bad.any() and (n > limit).any():
                bad = n > limit
                beyond = f"beyond the {limit}-byte chunk limit ({MAX_CHUNK_BYTES_ENV})"
            if bad.any():
                j = int(np.flatnonzero(full)[np.flatnonzero(bad)[0]])
                raise ChunkError(
                    f"{ctx}: shard index entry {j} says inner chunk at byte {int(off[j])} with "
                    f"{int(nb[j])} bytes, {beyond}; the shard is truncated or corrupt"
                )
        return idx

    def touched(self, box: tuple[slice, ...]) -> Iterator[tuple[int, tuple[slice, ...], tuple[slice, ...]]]:
        """The inner chunks a box of the shard touches, in C order: (its entry in the index, the
        part of the inner chunk in the box, where that part lies in the box)."""
        inner = self.inner_shape
        ranges = [range(s.start // i, (s.stop - 1) // i + 1) if s.stop > s.start else range(0)
                  for s, i in zip(box, inner, strict=True)]
        strides = [math.prod(self.cps[d + 1:]) for d in range(len(self.cps))]
        for coords in itertools.product(*ranges):
            part, where = [], []
            for c, s, i in zip(coords, box, inner, strict=True):
                lo, hi = max(s.start, c * i), min(s.stop, (c + 1) * i)
                part.append(slice(lo - c * i, hi - c * i))
                where.append(slice(lo - s.start, hi - s.start))
            yield sum(c * st for c, st in zip(coords, strides, strict=True)), tuple(part), tuple(where)

    def inner_chunks(self, u8: np.ndarray | None, idx: np.ndarray | None, box: tuple[slice, ...]) -> Iterator[
            tuple[int, tuple[slice, ...], tuple[slice, ...], np.ndarray | None]]:
        """The shard loop, the one every shard read runs: per inner chunk the box touches (C order),
        ``touched``'s (entry, part, where) and its stored bytes, a view of ``u8`` by the index
        ``idx`` (``read_index``), or None for one never written (or no shard: ``idx`` None)."""
        for j, part, where in self.touched(box):
            o, n = (MISSING, MISSING) if idx is None else (int(idx[j, 0]), int(idx[j, 1]))
            yield j, part, where, (None if (o == MISSING and n == MISSING) or u8 is None else u8[o : o + n])

    def coords(self, j: int) -> tuple[int, ...]:
        """Inner chunk ``j``'s coordinates in the shard (for messages)."""
        return tuple(int(c) for c in np.unravel_index(j, self.cps))

    def decode(self, u8: np.ndarray, shape: tuple[int, ...], ctx: str,
               region: tuple[slice, ...] | None = None) -> np.ndarray:
        """The shard's values; with ``region`` only the inner chunks it touches are decoded (the
        rest is the fill value), as the compiled read path does."""
        if tuple(shape) != self.shard_shape:
            raise ChunkError(f"{ctx}: a shard has shape {list(self.shard_shape)}, asked to decode {list(shape)}")
        idx = self.read_index(u8, ctx)
        nbytes = math.prod(self.shard_shape) * (self.dtype.itemsize or 16)
        if nbytes > max_chunk_bytes():
            raise ChunkError(
                f"{ctx}: a shard of shape {list(self.shard_shape)} decodes to {nbytes} bytes, beyond the "
                f"{max_chunk_bytes()}-byte chunk limit ({MAX_CHUNK_BYTES_ENV}); expected a smaller shard "
                "(raise the limit if the data are genuine)"
            )
        out = np.empty(self.shard_shape, self.dtype)
        out[...] = self.fill_value  # inner chunks never written, or outside ``region``
        box = region if region is not None else tuple(slice(0, s) for s in self.shard_shape)
        for j, _, _, data in self.inner_chunks(u8, idx, box):
            if data is not None:
                sl = tuple(slice(c * i, (c + 1) * i) for c, i in zip(self.coords(j), self.inner_shape, strict=True))
                out[sl] = self.inner.decode(data, context=f"{ctx}, inner chunk {self.coords(j)}", writeable=False)
        return out

    def encode(self, arr: np.ndarray, ctx: str, write_empty_chunks: bool = False) -> np.ndarray:
        parts: list[bytes] = []
        idx = np.full((self.n_inner, 2), MISSING, np.uint64)
        pos = self.index_size if self.index_location == "start" else 0
        for j, sl in enumerate(self.slices):
            sub = arr[sl]
            if not write_empty_chunks and _all_fill(sub, self.fill_value):
                continue
            b = self.inner.encode(np.ascontiguousarray(sub))
            idx[j] = (pos, len(b))
            parts.append(b)
            pos += len(b)
        ib = self.index.encode(idx.reshape(*self.cps, 2))
        if len(ib) != self.index_size:  # pragma: no cover - guarded at build time
            raise ZStringsError(f"{ctx}: shard index encoded to {len(ib)} bytes, expected {self.index_size}")
        parts = [ib, *parts] if self.index_location == "start" else [*parts, ib]
        return as_u8(b"".join(parts))


def coalesce(spans: Sequence[tuple[int, int]], max_gap: int, max_bytes: int) -> list[tuple[int, int, list[int]]]:
    """Byte spans ``[start, stop)`` of one object merged into fewer requests: ``(start, stop,
    the spans' positions in the input)``, by offset. Spans closer than ``max_gap`` bytes share a
    request (the gap is read and dropped) while it stays within ``max_bytes`` (a single larger span
    is its own request). zarr-python 3.2+ merges shard reads so too (its sharding_coalesce_*)."""
    out: list[tuple[int, int, list[int]]] = []
    for i in sorted(range(len(spans)), key=lambda k: spans[k][0]):
        a, b = spans[i]
        if out and a - out[-1][1] <= max_gap and max(b, out[-1][1]) - out[-1][0] <= max_bytes:
            start, stop, members = out[-1]
            out[-1] = (start, max(stop, b), [*members, i])
        else:
            out.append((a, b, [i]))
    return out
