"""Bytes -> bytes codecs: compressors and checksums, the ones zarr-python registers.

No compressor is written here: zarr-python's own codecs (``gzip``, ``zstd``, ``blosc``, ``crc32c``,
``numcodecs.*``) run one chunk at a time, except that decompressors :mod:`.bounded` knows are
decoded by numcodecs through :func:`~.bounded.bounded_decode`, which refuses a chunk decoding to
more than it should before allocating it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ChunkError, MetadataError, UnsupportedError, ZStringsError
from .bounded import MAX_CHUNK_BYTES_ENV, bounded_decode, max_chunk_bytes, numcodecs_equivalent
from .chunk import ChunkSpec, as_u8, label
from .registry import CodecStep
from .zarr_python import Zarr

__all__ = ["ZarrBytesBytes"]


class ZarrBytesBytes(CodecStep):
    """A bytes->bytes codec implemented by zarr-python."""

    family = "bytes_bytes"

    @classmethod
    def from_json(cls, name: str, cfg: dict, spec: ChunkSpec) -> ZarrBytesBytes:
        """zarr-python's codec ``name`` as a step (``spec.dtype``: the element type it is told of)."""
        return cls(name, Zarr.parse(Zarr.codec_class(name), name, cfg, spec.where), spec.dtype, spec.where)

    def __init__(self, name: str, codec: Any, elem_dtype: np.dtype, where: str):
        self.name = name
        self.where = where
        dt = elem_dtype if elem_dtype.kind in "biufcmM" else np.dtype("uint8")
        self.spec = Zarr.spec((1,), dt)
        try:
            self.codec = codec.evolve_from_array_spec(self.spec)
        except Exception as e:  # noqa: BLE001 - third-party codec errors become ChunkError/MetadataError
            raise MetadataError(f"{label(where)}: invalid {name!r} codec configuration: {e}") from None
        # decompressors are run through bounded_decode (numcodecs' own decoders, capped):
        # zarr-python's gzip/zstd/blosc and numcodecs.* wrappers decode whatever a chunk holds
        self.bounded = numcodecs_equivalent(name, self.codec)
        self.limit = max_chunk_bytes()  # V3Pipeline narrows it to the exact size where known
        self.expected = f"at most {self.limit} bytes ({MAX_CHUNK_BYTES_ENV})"

    def decode(self, u8: np.ndarray, ctx: str, scratch: bool = False) -> np.ndarray:
        """One chunk's bytes decoded, refused beyond ``limit``; ``scratch``: see bounded_decode."""
        z = Zarr
        try:
            if self.bounded is not None:
                return as_u8(bounded_decode(self.bounded, u8, limit=self.limit, expected=self.expected,
                                          scratch=scratch))
            buf = z.prototype.buffer.from_array_like(u8)
            out = as_u8(z.run(self.codec, "decode", buf, self.spec))
            if out.size > self.limit:
                raise ChunkError(
                    f"the {self.name!r} codec decoded {out.size} bytes, expected {self.expected}; "
                    "the chunk is corrupt or belongs to another array"
                )
            return out
        except ZStringsError as e:
            if not str(e).startswith(ctx):
                raise type(e)(f"{ctx}: {self.name!r} codec: {e}") from None
            raise
        except Exception as e:  # noqa: BLE001 - third-party codec errors become ChunkError/MetadataError
            raise ChunkError(
                f"{ctx}: the {self.name!r} codec failed to decode {u8.size} bytes "
                f"({type(e).__name__}: {e}); the chunk is corrupt, truncated or was written with "
                "another codec chain"
            ) from None

    def encode(self, u8: np.ndarray, ctx: str) -> np.ndarray:
        z = Zarr
        try:
            buf = z.prototype.buffer.from_array_like(u8)
            return as_u8(z.run(self.codec, "encode", buf, self.spec))
        except Exception as e:  # noqa: BLE001 - third-party codec errors become ChunkError/MetadataError
            raise ZStringsError(f"{ctx}: the {self.name!r} codec failed to encode: {type(e).__name__}: {e}") from None

    def encoded_size_or_none(self, n: int) -> int | None:
        try:
            return int(self.codec.compute_encoded_size(n, self.spec))
        except Exception:  # noqa: BLE001 - compressors have no fixed encoded size
            return None

    def encoded_size(self, n: int) -> int:
        try:
            return int(self.codec.compute_encoded_size(n, self.spec))
        except Exception:  # noqa: BLE001 - third-party codec errors become ChunkError/MetadataError
            raise UnsupportedError(
                f"{label(self.where)}: the {self.name!r} codec does not have a fixed encoded size, so it "
                "cannot encode a shard index (sharding needs fixed-size index codecs such as bytes "
                "and crc32c)"
            ) from None

