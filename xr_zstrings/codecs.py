"""The Zarr v2 chunk pipeline: numcodecs compressors and filters, plus netcdf-c's shuffle.

numcodecs does the compressing; the one thing written here is netcdf-c's shuffle filter, which it
records as ``{"id": "shuffle", "elementsize": 0}`` while shuffling HDF5-style by the element size
(the dtype's itemsize, 8 for NC_STRING ``|Sn`` — netcdf-c's ``sizeof(char *)`` — and 1 for NC_CHAR),
leaving a trailing remainder unshuffled, which ``numcodecs.Shuffle`` refuses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numcodecs
import numpy as np
from numcodecs.abc import Codec

from .errors import UnsupportedError

__all__ = ["ChunkPipeline", "HDF5Shuffle", "build_pipeline"]


class HDF5Shuffle(Codec):
    """Byte shuffle exactly as HDF5/netcdf-c does it: any remainder bytes are left in place."""

    codec_id = "shuffle"

    def __init__(self, elementsize: int = 4) -> None:
        self.elementsize = int(elementsize)

    def _move(self, buf: Any, *, forward: bool) -> bytes:
        src = np.frombuffer(memoryview(buf).cast("B"), dtype=np.uint8)
        es = self.elementsize
        n = src.size // es
        if es <= 1 or n <= 1:
            return src.tobytes()
        out = np.empty_like(src)
        grid = (n, es) if forward else (es, n)
        out[: n * es] = src[: n * es].reshape(grid).T.ravel()
        out[n * es :] = src[n * es :]  # the remainder stays in place, as in HDF5
        return out.tobytes()

    def encode(self, buf: Any) -> bytes:
        return self._move(buf, forward=True)

    def decode(self, buf: Any, out: Any = None) -> bytes:
        return self._move(buf, forward=False)


@dataclass(frozen=True)
class ChunkPipeline:
    """Decode/encode one chunk's bytes: filters (in order) then the compressor."""

    compressor: Codec | None
    filters: tuple[Codec, ...]

    def decode(self, raw: bytes) -> Any:
        buf: Any = raw
        if self.compressor is not None:
            buf = self.compressor.decode(buf)
        for f in reversed(self.filters):
            buf = f.decode(buf)
        return buf

    def encode(self, data: Any) -> bytes:
        buf: Any = data
        for f in self.filters:
            buf = f.encode(buf)
        if self.compressor is not None:
            buf = self.compressor.encode(buf)
        return bytes(memoryview(buf).cast("B")) if not isinstance(buf, bytes) else buf


def _shuffle_size(config: Mapping[str, Any], dtype: np.dtype, string_kind: str | None) -> int:
    es = int(config.get("elementsize", 0) or 0)
    if es > 0:
        return es
    if string_kind == "char":
        return 1
    if dtype.kind in "SU" or string_kind is not None:
        return 8  # netcdf-c shuffles NC_STRING by sizeof(char *)
    return dtype.itemsize


def build_pipeline(
    compressor: Mapping[str, Any] | None,
    filters: Sequence[Mapping[str, Any]],
    *,
    dtype: np.dtype,
    string_kind: str | None = None,
    where: str = "",
) -> ChunkPipeline:
    """Instantiate the codecs named in ``.zarray``; an unknown id is an ``UnsupportedError`` now, not at read time."""

    def make(cfg: Mapping[str, Any]) -> Codec:
        cfg = dict(cfg)
        if cfg.get("id") == "shuffle":
            return HDF5Shuffle(_shuffle_size(cfg, dtype, string_kind))
        try:
            return numcodecs.get_codec(cfg)
        except Exception as e:
            raise UnsupportedError(
                f"Unsupported codec {cfg!r} at {where}: numcodecs cannot build it ({e}). Install the "
                "package that provides this codec (e.g. `pip install numcodecs[...]`) or rewrite the "
                "store with zlib/zstd/blosc."
            ) from None

    return ChunkPipeline(
        compressor=None if compressor is None else make(compressor),
        filters=tuple(make(f) for f in filters),
    )
