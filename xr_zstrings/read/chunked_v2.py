"""Chunks of a Zarr v2 array (every NCZarr generation too): numcodecs' compressor and filters,
netcdf-c's shuffle, ``.``/``/`` chunk keys, C or F order.

Fixed-width text (``|Sn`` NC_STRING, NC_CHAR rows) and vlen-utf8 chunks decode straight into a
StringDType result with the compiled kernels (``read_into``); everything else through
``decode_chunk`` into the storage dtype.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..codecs.encoding import store_codecs_encoding
from ..codecs.v2 import ChunkPipeline, SafeVLen, bounded_decode, build_pipeline
from ..errors import ChunkError
from ..formats.nczarr import ArrayMetaV2
from ..io.zstore import ZStore
from ..text import vlen
from ..text.fixed import decode_fixed_into
from ..text.nc_char import norm_encoding
from ..text.policy import in_chunk
from .chunked import ChunkedArray
from .decode import Decode
from .paths import node_key

__all__ = ["ChunkedArrayV2"]


class ChunkedArrayV2(ChunkedArray):
    """A Zarr v2 array's chunks through its numcodecs pipeline."""

    meta: ArrayMetaV2

    def __init__(self, zstore: ZStore, meta: ArrayMetaV2, logical_shape: tuple[int, ...],
                 utf8_errors: str = "strict", threads: int | None = None, null_fill: bool = False,
                 raw_bytes: bool = False) -> None:
        super().__init__(zstore, meta, logical_shape, threads=threads, null_fill=null_fill, raw_bytes=raw_bytes)
        filters = meta.filters
        if self.raw_bytes:  # numcodecs' vlen-utf8 and vlen-bytes share one layout
            filters = tuple({"id": "vlen-bytes"} if f.get("id") == "vlen-utf8" else f for f in filters)
        self.pipeline: ChunkPipeline = build_pipeline(
            meta.compressor, filters, dtype=meta.dtype, string_kind=meta.string_kind,
            where=zstore.where(node_key(meta.path, ".zarray")), chunk_shape=self.chunk_shape,
            utf8_errors=utf8_errors,
        )
        self.parallel = self.pipeline.compressor is not None or meta.dtype.kind == "O"

    def store_encoding(self, where: str) -> dict[str, Any]:
        meta = self.meta
        encoding: dict[str, Any] = {
            "zarr_dtype": meta.dtype_str,
            "zstrings_compressor": None if meta.compressor is None else dict(meta.compressor),
            "zstrings_filters": [dict(f) for f in meta.filters] or None,
            "order": meta.order,
            "dimension_separator": meta.dimension_separator,
        }
        encoding.update(store_codecs_encoding(meta.compressor, meta.filters, dtype=meta.dtype,
                                              string_kind=meta.string_kind, where=where))
        if meta.dimension_references is not None:
            encoding["dimension_references"] = list(meta.dimension_references)
        return encoding

    def _decode_error(self, key: str, e: Exception) -> ChunkError:
        meta = self.meta
        return ChunkError(
            f"Cannot decode chunk {self.store.where(key)}: {type(e).__name__}: {e}. Expected data "
            f"compressed with {meta.compressor!r} and filters {list(meta.filters)!r}."
        )

    def _check_size(self, mv: Any, key: str, chunks: tuple[int, ...]) -> None:
        expected = math.prod(chunks) * self.meta.dtype.itemsize
        if len(mv) != expected:
            raise ChunkError(
                f"Chunk {self.store.where(key)} decodes to {len(mv)} bytes, expected {expected} "
                f"({list(chunks)} x {self.meta.dtype.str}). The chunk is truncated or belongs to another array."
            )

    def decode_chunk(self, raw: bytes, key: str, chunks: tuple[int, ...],
                     region: tuple[slice, ...] | None = None) -> np.ndarray:
        meta = self.meta
        try:
            buf = self.pipeline.decode(raw)
        except Exception as e:  # noqa: BLE001 - any codec failure is a ChunkError naming the chunk
            raise self._decode_error(key, e) from None
        if meta.dtype.kind == "O":  # vlen-utf8 / vlen-bytes: the filter gives the objects
            arr = np.asarray(buf, dtype=object)
            n = math.prod(chunks)
            if arr.size != n:
                raise ChunkError(
                    f"Chunk {self.store.where(key)} holds {arr.size} items, expected {n} "
                    f"(chunk shape {list(chunks)})."
                )
            return arr.reshape(chunks, order=meta.order)
        mv = memoryview(buf).cast("B") if not isinstance(buf, np.ndarray) else buf.view(np.uint8).ravel()
        self._check_size(mv, key, chunks)
        return np.frombuffer(mv, dtype=meta.dtype).reshape(chunks, order=meta.order)

    # ------------------------------------------------------------------ straight into StringDType

    def _can_read_into(self, decode: Decode, text_encoding: str, null_chunks: bool) -> bool:
        meta = self.meta
        if decode.fixed_width:
            return (meta.dtype.kind == "S" and meta.dtype.itemsize > 0
                    and norm_encoding(text_encoding) == "utf-8")
        if decode is Decode.CHAR:
            return (meta.order == "C" and norm_encoding(text_encoding) == "utf-8"
                    and meta.dtype.itemsize == 1 and meta.dtype.kind in "SUu" and len(self.shape) >= 1
                    and self.chunk_shape[-1] == self.stored_shape[-1] == self.shape[-1] > 0)
        if decode is Decode.VLEN:  # |O + vlen-utf8 (what xarray and zarr-python write for str)
            p = self.pipeline
            fill = self.stored_fill()
            return (meta.dtype.kind == "O" and len(p.filters) == 1
                    and isinstance(p.filters[0], SafeVLen) and p.filters[0].codec_id == "vlen-utf8"
                    and (isinstance(fill, str) or (null_chunks and fill is None)))
        return False

    def _decode_into(self, raw: bytes, key: str, view: np.ndarray, sel: np.ndarray | None,
                     src: tuple[slice, ...], decode: Decode, policy: str, what: str, index: Any) -> None:
        if decode is Decode.VLEN:
            with in_chunk(self.store.where(key)):
                self._vlen_into(raw, key, view, sel)
            return
        buf = self._chunk_bytes(raw, key)
        width = self.chunk_shape[-1] if decode.joins_chars else self.meta.dtype.itemsize
        # NC_CHAR keeps embedded NULs (only trailing ones end it); NC_STRING ends at the first
        decode_fixed_into(buf, width, view, sel, policy, what, index, trailing=decode.trailing_nuls_only)

    # ------------------------------------------------------------------ straight into Arrow

    def _can_read_arrow(self, decode: Decode) -> bool:
        """|O chunks framed by numcodecs' vlen-utf8 / vlen-bytes alone (after the compressor)."""
        p = self.pipeline
        return (decode in (Decode.VLEN, Decode.VLEN_BYTES) and self.meta.dtype.kind == "O" and len(p.filters) == 1
                and isinstance(p.filters[0], SafeVLen))

    def _arrow_box(self, raw: Any, key: str, src: tuple[slice, ...], decode: Decode, policy: str, what: str,
                   index: Any) -> Any:
        if self.meta.dtype.kind != "O":
            return super()._arrow_box(raw, key, src, decode, policy, what, index)
        from ..text import arrow as ta

        p = self.pipeline
        f = p.filters[0]
        with in_chunk(self.store.where(key)):
            try:
                # (the frames are compacted into new buffers: the decompressed bytes may be scratch)
                buf = raw if p.compressor is None else bounded_decode(
                    p.compressor, raw, limit=p.limit, expected=p.expected, scratch=True)
                arr = ta.vlen_frames_to_arrow(buf, math.prod(self.chunk_shape),
                                              kind="bytes" if decode.as_bytes else "str",
                                              policy=f.utf8_errors, what="")
            except Exception as e:  # noqa: BLE001 - the same ChunkError as decode_chunk's
                raise self._decode_error(key, e) from None
        from .arrow import box_of

        return box_of(arr, src, self.chunk_shape, self.meta.order)

    def _chunk_bytes(self, raw: bytes, key: str) -> Any:
        """A fixed-width chunk's decompressed bytes, size checked (as ``decode_chunk``)."""
        try:
            buf = self.pipeline.decode(raw, scratch=True)  # consumed by the kernel right away
        except Exception as e:  # noqa: BLE001 - any codec failure is a ChunkError naming the chunk
            raise self._decode_error(key, e) from None
        mv = memoryview(buf).cast("B") if not isinstance(buf, np.ndarray) else buf.view(np.uint8).ravel()
        self._check_size(mv, key, self.chunk_shape)
        return mv

    def _vlen_into(self, raw: bytes, key: str, view: np.ndarray, sel: np.ndarray | None) -> None:
        """A vlen-utf8 chunk: decompress, then the kernels walk it into ``view`` (the pipeline's
        utf8_errors policy, as its SafeVLen filter decodes it)."""
        p = self.pipeline
        try:
            buf = raw if p.compressor is None else bounded_decode(
                p.compressor, raw, limit=p.limit, expected=p.expected, scratch=True)
            vlen.decode_vlen_utf8_into(buf, view, sel, math.prod(self.chunk_shape),
                                       utf8_errors=p.filters[0].utf8_errors, what="")
        except Exception as e:  # noqa: BLE001 - the same ChunkError as decode_chunk's
            raise self._decode_error(key, e) from None
