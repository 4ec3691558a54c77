"""Bounded decompression: a chunk may not decode to more than it should, for both pipelines.

numcodecs' zlib, gzip, bz2 and lzma decode everything a chunk holds, zstd, blosc and lz4 allocate
whatever size their header declares, and ``vlen-utf8``/``vlen-bytes`` allocate one object per item
their header claims. A chunk that would decode to more than the chunk's size (when known: fixed-size
data) or more than :func:`max_chunk_bytes` (1 GiB unless ``XR_ZSTRINGS_MAX_CHUNK_BYTES`` says
otherwise) is refused with a :class:`~xr_zstrings.errors.ChunkError` before the excess is allocated:
the streaming decoders stop at the limit, the others are checked against their headers first.
The Zarr v2 pipeline (:mod:`.v2`) and the Zarr v3 bytes->bytes codecs (:mod:`.bytes_bytes`, through
:func:`numcodecs_equivalent`) both decode through :func:`bounded_decode`.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import struct
import zlib
from typing import Any

import numpy as np
from numcodecs.abc import Codec

from ..errors import ChunkError, user_stacklevel
from ..scratch import ThreadScratch, fresh

__all__ = [
    "DEFAULT_MAX_CHUNK_BYTES",
    "MAX_CHUNK_BYTES_ENV",
    "bounded_decode",
    "max_chunk_bytes",
    "numcodecs_equivalent",
    "zstd_decoded_bound",
]

#: The largest decoded chunk accepted when its exact size is not known (variable-length strings,
#: size-changing filters); also the largest fixed-size chunk decoded at all.
DEFAULT_MAX_CHUNK_BYTES = 1 << 30
#: Environment variable overriding :data:`DEFAULT_MAX_CHUNK_BYTES` (a number of bytes).
MAX_CHUNK_BYTES_ENV = "XR_ZSTRINGS_MAX_CHUNK_BYTES"
_STEP = 1 << 24  # streaming decoders hand out at most this many bytes at a time


def max_chunk_bytes() -> int:
    """The decoded-chunk size limit: ``$XR_ZSTRINGS_MAX_CHUNK_BYTES`` or 1 GiB."""
    env = os.environ.get(MAX_CHUNK_BYTES_ENV, "").strip()
    if not env:
        return DEFAULT_MAX_CHUNK_BYTES
    try:
        value = int(env)
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(
            f"{MAX_CHUNK_BYTES_ENV}={env!r}: expected a positive number of bytes (e.g. {1 << 32})."
        )
    return value


def _too_big(limit: int, expected: str) -> ChunkError:
    return ChunkError(
        f"the chunk decompresses to more than {limit} bytes, expected {expected}; refused before "
        "decompressing the rest (a corrupt chunk or a decompression bomb). If the data are genuine, "
        f"raise the limit with the environment variable {MAX_CHUNK_BYTES_ENV}."
    )


def _read_bounded(read: Any, limit: int, expected: str) -> bytes:
    """Pull decoded pieces of at most ``_STEP`` bytes from ``read(n)`` until b"", up to ``limit``."""
    pieces: list[bytes] = []
    total = 0
    while True:
        piece = read(min(_STEP, limit + 1 - total) if total <= limit else 1)
        if not piece:
            return b"".join(pieces)
        total += len(piece)
        if total > limit:
            raise _too_big(limit, expected)
        pieces.append(piece)


def _zlib_bounded(buf: Any, limit: int, expected: str, wbits: int = zlib.MAX_WBITS) -> bytes:
    d = zlib.decompressobj(wbits)
    tail: bytes = bytes(buf)

    def read(n: int) -> bytes:
        nonlocal tail
        if d.eof:
            return b""
        piece = d.decompress(tail, n)
        tail = d.unconsumed_tail
        if not piece and not tail and not d.eof:
            raise zlib.error("Error -5 while decompressing data: incomplete or truncated stream")
        return piece

    return _read_bounded(read, limit, expected)


_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_BLOCK_MAX = 1 << 17


def zstd_decoded_bound(buf: Any) -> int | None:
    """An upper bound of what ``numcodecs.Zstd.decode`` produces (or allocates), from headers only.

    Every frame counts (numcodecs 0.16/0.17 decode all the frames of a chunk, not the first):
    a frame with a content size is decoded into exactly that many bytes; a frame without one is
    streamed block by block: raw and RLE blocks state their size, compressed blocks hold at most
    ``min(window size, 128 KiB)``. None when ``buf`` does not start with a zstd frame.
    """
    try:
        b: Any = buf if isinstance(buf, bytes) else memoryview(buf).cast("B")  # no copy of the chunk
    except TypeError:
        b = bytes(buf)
    n = len(b)
    pos = total = 0
    while pos + 4 <= n:
        magic = int.from_bytes(b[pos : pos + 4], "little")
        if 0x184D2A50 <= magic <= 0x184D2A5F:  # skippable frame
            pos += 8 + int.from_bytes(b[pos + 4 : pos + 8], "little")
            continue
        if magic != _ZSTD_MAGIC:
            return None if pos == 0 else total
        header = _zstd_frame_header(b, pos, n) if pos + 5 <= n else None
        if header is None:
            return total
        p, fcs, block_max = header
        frame, end = _zstd_blocks(b, p, n, block_max)
        total += fcs if fcs is not None else frame
        if end is None:  # truncated, or a reserved block: the decoder fails here at the latest
            return total
        pos = end + (4 if (b[pos + 4] >> 2) & 1 else 0)  # the frame's checksum
    return total


def _zstd_frame_header(b: Any, pos: int, n: int) -> tuple[int, int | None, int] | None:
    """The zstd frame at ``pos``: (where its first block starts, its declared content size or None,
    the largest a compressed block of it decodes to); None when its header is cut short."""
    fhd = b[pos + 4]
    single = (fhd >> 5) & 1
    p = pos + 5
    window = 0
    if not single:
        if p >= n:
            return None
        wd = b[p]
        p += 1
        base = 1 << (10 + (wd >> 3))
        window = base + (base >> 3) * (wd & 7)
    p += (0, 1, 2, 4)[fhd & 3]
    fcs_len = (1 if single else 0, 2, 4, 8)[fhd >> 6]
    fcs = None
    if fcs_len:
        fcs = int.from_bytes(b[p : p + fcs_len], "little") + (256 if fcs_len == 2 else 0)
        window = window or fcs
        p += fcs_len
    return p, fcs, (min(window, _ZSTD_BLOCK_MAX) if window else _ZSTD_BLOCK_MAX)


def _zstd_blocks(b: Any, p: int, n: int, block_max: int) -> tuple[int, int | None]:
    """A frame's blocks from ``p``: (the bound of what they decode to, where the last one ends);
    the end is None when the blocks are cut short (one more block counted) or one is reserved."""
    frame = 0
    while True:
        if p + 3 > n:
            return frame + block_max, None
        h = int.from_bytes(b[p : p + 3], "little")
        p += 3
        btype, bsize = (h >> 1) & 3, h >> 3
        if btype == 3:
            return frame, None
        frame += block_max if btype == 2 else bsize  # raw and RLE blocks state their size
        p += 1 if btype == 1 else bsize  # an RLE block stores one byte
        if h & 1:
            return frame, p


def _zstd_content_size(buf: Any) -> int | None:
    """The first zstd frame's declared content size (what numcodecs decodes into), or None."""
    b = memoryview(buf).cast("B") if not isinstance(buf, bytes) else buf
    if len(b) < 6 or int.from_bytes(b[:4], "little") != _ZSTD_MAGIC:
        return None
    fhd = b[4]
    single = (fhd >> 5) & 1
    fcs_len = (1 if single else 0, 2, 4, 8)[fhd >> 6]
    p = 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3]
    if not fcs_len or len(b) < p + fcs_len:
        return None
    return int.from_bytes(b[p : p + fcs_len], "little") + (256 if fcs_len == 2 else 0)


def _is_zlib_not_gzip(buf: Any) -> bool:
    """A zlib (RFC 1950) header rather than gzip's magic 1f 8b: deflate method, valid FCHECK."""
    b = memoryview(buf).cast("B") if not isinstance(buf, bytes) else buf
    if len(b) < 2 or (b[0] == 0x1F and b[1] == 0x8B):
        return False
    return (b[0] & 0x0F) == 8 and (b[0] >> 4) <= 7 and ((b[0] << 8) | b[1]) % 31 == 0


def _stream_reader(cid: str, codec: Codec, raw: io.BytesIO) -> Any:
    if cid == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if cid == "bz2":
        return bz2.BZ2File(raw, mode="rb")
    fmt = getattr(codec, "format", lzma.FORMAT_AUTO)
    return lzma.LZMAFile(raw, mode="rb", format=fmt,
                         filters=getattr(codec, "filters", None) if fmt == lzma.FORMAT_RAW else None)


# Decompressing into fresh memory costs a page fault per 4 KiB (a large share of zstd's time:
# docs/performance.md); callers that consume the output before their thread decodes again can ask for a
# per-thread scratch buffer instead (reused, at most 16 MiB, so at most that much per thread).
_SCRATCH = ThreadScratch(16 << 20)


def bounded_decode(codec: Codec, buf: Any, *, limit: int, expected: str = "", scratch: bool = False) -> Any:
    """``codec.decode(buf)``, refusing (``ChunkError``) output beyond ``limit`` bytes before it is made.

    zlib, gzip, bz2 and lzma are streamed and stopped at the limit; zstd, blosc and lz4 are checked
    against the sizes their headers declare (what numcodecs allocates); ``vlen-*`` filters are
    :class:`~.v2.SafeVLen` (which bounds its own output). Any other codec decodes first and is
    checked afterwards.

    ``scratch=True``: zstd/blosc/lz4 output whose exact size the header states goes into this
    thread's scratch buffer, valid only until the thread's next scratch decode.
    """
    expected = expected or f"at most {limit} bytes"
    cid = getattr(codec, "codec_id", None)
    if cid in _STREAMED:
        return _decode_streamed(str(cid), codec, buf, limit, expected)
    declared = _DECLARED_SIZE.get(str(cid))
    exact = declared(buf, limit, expected) if declared is not None else None
    if exact and (scratch or exact > _SCRATCH.limit):  # the size known: decode into memory made for it
        reuse = _SCRATCH.get(exact) if scratch else None
        out = reuse[:exact] if reuse is not None else fresh(exact)
        codec.decode(buf, out=out)
        return out
    out = codec.decode(buf)
    if not getattr(codec, "bounds_own_output", False):  # SafeVLen checks the items itself
        size = out.nbytes if isinstance(out, np.ndarray) else len(memoryview(out).cast("B"))
        if size > limit:
            raise _too_big(limit, expected)
    return out


#: the codecs decoded as a stream, stopped at the limit
_STREAMED = ("zlib", "gzip", "bz2", "lzma")


def _decode_streamed(cid: str, codec: Codec, buf: Any, limit: int, expected: str) -> bytes:
    if cid == "gzip" and _is_zlib_not_gzip(buf):
        # z5py (and zarr_implementations' fixtures) store zlib streams under the id "gzip": the
        # two headers cannot be confused (gzip starts 1f 8b, zlib with a checksummed CMF/FLG pair)
        import warnings

        warnings.warn(
            "A chunk stored under codec id 'gzip' is a zlib stream (no gzip header, as z5py writes "
            "them); decoded as zlib. Rewrite the array with compressor {'id': 'zlib'} (or real gzip) "
            "to silence this.", UserWarning, stacklevel=user_stacklevel(),
        )
        return _zlib_bounded(buf, limit, expected)
    if cid == "zlib":
        return _zlib_bounded(buf, limit, expected)
    with _stream_reader(cid, codec, io.BytesIO(bytes(buf))) as f:
        return _read_bounded(f.read, limit, expected)


def _zstd_size(buf: Any, limit: int, expected: str) -> int | None:
    """Refuses a zstd chunk whose frames' bound passes ``limit``; its exact size when one frame states it."""
    bound = zstd_decoded_bound(buf)
    if bound is not None and bound > limit:
        raise _too_big(limit, f"{expected}; its zstd header(s) say {bound} bytes")
    first = _zstd_content_size(buf)
    return first if first == bound else None  # one frame (several: numcodecs sizes the output)


def _blosc_size(buf: Any, limit: int, expected: str) -> int:
    """A blosc chunk's decoded size from its header, refused when truncated or over ``limit``."""
    b = memoryview(buf).cast("B") if not isinstance(buf, bytes) else buf
    if len(b) < 16:
        raise ChunkError(f"a blosc chunk of {len(b)} bytes is shorter than blosc's 16-byte header")
    nbytes, _blocksize, cbytes = struct.unpack_from("<III", b, 4)
    if cbytes > len(b):
        raise ChunkError(
            f"the blosc header says {cbytes} compressed bytes but the chunk has {len(b)}; "
            "the chunk is truncated"
        )
    if nbytes > limit:
        raise _too_big(limit, f"{expected}; its blosc header says {nbytes} bytes")
    return int(nbytes)


def _lz4_size(buf: Any, limit: int, expected: str) -> int:
    """An lz4 chunk's decoded size from its 4-byte header, refused over ``limit``."""
    b = memoryview(buf).cast("B") if not isinstance(buf, bytes) else buf
    if len(b) < 4:
        raise ChunkError(f"an lz4 chunk of {len(b)} bytes is shorter than its 4-byte size header")
    (nbytes,) = struct.unpack_from("<I", b, 0)
    if nbytes > limit:
        raise _too_big(limit, f"{expected}; its lz4 header says {nbytes} bytes")
    return int(nbytes)


#: the codecs whose headers declare what numcodecs allocates: checked before decoding
_DECLARED_SIZE = {"zstd": _zstd_size, "blosc": _blosc_size, "lz4": _lz4_size}


_BOUNDED_IDS = ("zlib", "gzip", "bz2", "lzma", "zstd", "blosc", "lz4")


def numcodecs_equivalent(name: str, codec: Any) -> Any:
    """The numcodecs codec that decodes like zarr-python's ``codec``, for the compressors that
    :func:`bounded_decode` knows how to cap; None for any other codec."""
    import numcodecs

    try:
        if name in ("gzip", "zstd", "blosc"):
            return numcodecs.get_codec({"id": name})  # decoding needs no configuration
        if name.startswith("numcodecs.") and name.split(".", 1)[1] in _BOUNDED_IDS:
            return numcodecs.get_codec(dict(codec.codec_config))
    except Exception:  # noqa: BLE001 - fall back to zarr-python's decoder (checked afterwards)
        return None
    return None
