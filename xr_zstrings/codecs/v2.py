"""The Zarr v2 chunk pipeline: numcodecs compressors and filters, plus netcdf-c's shuffle.

numcodecs does the compressing; the one thing written here is netcdf-c's shuffle filter, which it
records as ``{"id": "shuffle", "elementsize": 0}`` while shuffling HDF5-style by the element size
(the dtype's itemsize, 8 for NC_STRING ``|Sn`` — netcdf-c's ``sizeof(char *)`` — and 1 for NC_CHAR),
leaving a trailing remainder unshuffled, which ``numcodecs.Shuffle`` refuses.

Every decoding step is bounded (:mod:`.bounded`): a chunk that would decode to more than its size
(fixed-size data) or more than ``max_chunk_bytes()`` is refused before the excess is allocated.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numcodecs
import numpy as np
from numcodecs.abc import Codec

from ..errors import MetadataError, UnknownCodecError

# bounded_decode and max_chunk_bytes are also importable from here, where read/ imports them
from .bounded import DEFAULT_MAX_CHUNK_BYTES, MAX_CHUNK_BYTES_ENV, bounded_decode, max_chunk_bytes

__all__ = [
    "ChunkPipeline",
    "HDF5Shuffle",
    "SafeVLen",
    "bounded_decode",
    "build_pipeline",
    "max_chunk_bytes",
    "shuffle_elementsize",
]


class SafeVLen(Codec):
    """``vlen-utf8``/``vlen-bytes`` decoding that validates the item count against the bytes.

    numcodecs allocates one object per item the 4-byte header claims (16 GiB for ``ff ff ff 7f``)
    before looking at the data; this decodes with :mod:`xr_zstrings.text.vlen`, which refuses first.
    Encoding is numcodecs'.
    """

    bounds_own_output = True  # bounded_decode: the item count is checked against the bytes

    def __init__(self, codec_id: str, utf8_errors: str = "strict") -> None:
        self.codec_id = codec_id
        self.utf8_errors = utf8_errors  # the reader's policy for invalid UTF-8 in vlen-utf8 items
        self._nc = numcodecs.get_codec({"id": codec_id})

    def encode(self, buf: Any) -> Any:
        return self._nc.encode(buf)

    def decode(self, buf: Any, out: Any = None) -> Any:
        from ..text.vlen import decode_vlen_utf8_to_numpy

        if self.codec_id == "vlen-bytes":
            return decode_vlen_utf8_to_numpy(buf, kind="bytes", string_dtype="O", utf8_errors="strict")
        return decode_vlen_utf8_to_numpy(buf, kind="str", string_dtype="O", utf8_errors=self.utf8_errors)

    def get_config(self) -> dict[str, Any]:
        return {"id": self.codec_id}


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
    """Decode/encode one chunk's bytes: filters (in order) then the compressor.

    ``limit`` bounds what every decoding step may produce (the exact chunk size when it is known and
    the filters keep sizes, else :func:`max_chunk_bytes`); ``expected`` describes it for messages.
    """

    compressor: Codec | None
    filters: tuple[Codec, ...]
    limit: int = DEFAULT_MAX_CHUNK_BYTES
    expected: str = ""

    def decode(self, raw: bytes, *, scratch: bool = False) -> Any:
        """``scratch``: the decompressor may write into this thread's reused buffer (the caller
        consumes the result before the thread decodes again; see bounded_decode)."""
        buf: Any = raw
        if self.compressor is not None:
            buf = bounded_decode(self.compressor, buf, limit=self.limit, expected=self.expected, scratch=scratch)
        for f in reversed(self.filters):
            buf = bounded_decode(f, buf, limit=self.limit, expected=self.expected)
        return buf

    def encode(self, data: Any) -> bytes:
        buf: Any = data
        for f in self.filters:
            buf = f.encode(buf)
        if self.compressor is not None:
            buf = self.compressor.encode(buf)
        return bytes(memoryview(buf).cast("B")) if not isinstance(buf, bytes) else buf


#: the pipeline of an array stored without codecs (shared: frozen)
_NO_CODECS = ChunkPipeline(compressor=None, filters=())


def shuffle_elementsize(config: Mapping[str, Any], dtype: np.dtype, string_kind: str | None, where: str = "") -> int:
    """The element size a ``shuffle`` filter shuffled by: its ``elementsize``, or for netcdf-c's ``0``
    the dtype's itemsize (1 for NC_CHAR, 8 for NC_STRING: netcdf-c's ``sizeof(char *)``)."""
    es = config.get("elementsize", 0) or 0
    if isinstance(es, bool) or not isinstance(es, int) or es < 0:
        raise MetadataError(
            f"Invalid shuffle filter {dict(config)!r} at {where}: elementsize is {es!r}, expected an "
            "integer >= 0 (0: the element size of the dtype, as netcdf-c writes it)."
        )
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
    chunk_shape: Sequence[int] | None = None,
    utf8_errors: str = "strict",
) -> ChunkPipeline:
    """Instantiate the codecs named in ``.zarray``; an unknown id is an ``UnsupportedError`` now, not at read time.

    ``chunk_shape`` (the ``.zarray`` chunks) lets decoding refuse any chunk that decompresses to
    more than ``prod(chunk_shape) * itemsize`` bytes; without it the limit is ``max_chunk_bytes()``.
    ``utf8_errors`` is the policy of the ``vlen-utf8`` filter for invalid UTF-8.
    """

    def make(cfg: Mapping[str, Any]) -> Codec:
        cfg = dict(cfg)
        if not isinstance(cfg.get("id"), str):
            raise MetadataError(
                f"Invalid codec {cfg!r} at {where}: expected an object whose 'id' is a codec name "
                "such as 'zlib' or 'zstd'."
            )
        if cfg["id"] == "shuffle":
            return HDF5Shuffle(shuffle_elementsize(cfg, dtype, string_kind, where))
        if cfg["id"] in ("vlen-utf8", "vlen-bytes"):
            return SafeVLen(cfg["id"], utf8_errors)
        try:
            return numcodecs.get_codec(cfg)
        except Exception as e:  # noqa: BLE001 - numcodecs raises anything for a bad config
            raise UnknownCodecError(
                f"Unsupported codec {cfg!r} at {where}: numcodecs cannot build it ({e}). Install the "
                "package that provides this codec (e.g. `pip install numcodecs[...]`) or rewrite the "
                "store with zlib/zstd/blosc."
            ) from None

    if compressor is None and not filters:
        return _NO_CODECS  # (nothing decodes, so there is nothing to bound)
    limit = max_chunk_bytes()
    expected = f"at most {limit} bytes ({MAX_CHUNK_BYTES_ENV})"
    sized = all(dict(f).get("id") == "shuffle" for f in filters)  # filters that keep the size
    if chunk_shape is not None and dtype.kind != "O" and sized:
        exact = math.prod(int(c) for c in chunk_shape) * dtype.itemsize
        expected = f"{exact} bytes ({list(chunk_shape)} x {dtype.str})"
        if exact > limit:
            expected += f", which is itself beyond the {limit}-byte limit ({MAX_CHUNK_BYTES_ENV})"
        limit = min(exact, limit)
    return ChunkPipeline(
        compressor=None if compressor is None else make(compressor),
        filters=tuple(make(f) for f in filters),
        limit=limit,
        expected=expected,
    )
