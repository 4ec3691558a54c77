"""The Zarr v3 chunk codec pipeline: one chunk's stored bytes <-> a numpy array, both ways.

:class:`V3Pipeline` is built once per array from the ``zarr.json`` ``codecs`` list
(:meth:`V3Pipeline.from_metadata`, which builds every codec eagerly so a bad chain fails at open
time) and then decodes/encodes whole chunks (C order, the full chunk shape: Zarr v3 stores edge
chunks at full size; the caller slices).

Codecs
------
* array -> array: ``transpose`` (numpy); any other array->array codec zarr-python registers
  (``numcodecs.delta``, ...) through zarr-python, for numeric data only.
* array -> bytes: ``bytes`` (endian; also for ``fixed_length_utf32``/``null_terminated_bytes``),
  ``vlen-utf8``/``vlen-bytes`` (numcodecs layout), ``zarrs.vlen`` /
  ``https://codec.zarrs.dev/array_to_bytes/vlen`` (its ``index_codecs`` and ``data_codecs`` are
  full codec chains, built recursively as :class:`V3Pipeline` objects: the index chain decodes to
  ``n+1`` ``index_data_type`` offsets, the data chain to ``uint8`` bytes; ``index_location``
  absent means ``start``, configuration v0.0), ``sharding_indexed`` (inner chain built
  recursively; shard index ``(chunks_per_shard..., 2)`` uint64 ``offset, nbytes`` through
  ``index_codecs``, ``2**64-1`` = empty inner chunk -> ``fill_value``; nested sharding works),
  and any other array->bytes codec zarr-python registers, for numeric data only.
* bytes -> bytes: every codec zarr-python registers (``gzip``, ``zstd``, ``blosc``, ``crc32c``,
  ``numcodecs.*``): zarr-python's own implementations are called, one chunk at a time, through
  ``_zarr_compat.run_codec`` (the private sync fast path where the codec has one, else the public
  ``Codec.decode``/``encode``).  No compressor is written here.

The layout rule (strings and bytes)
-----------------------------------
zarr-python's ``string`` data type (always with ``vlen-utf8``) has the same name as the draft
Arrow-layout ZEP's ``{"name": "string"}``, so the layout is decided from the *codec chain*,
never from the data type name alone:

==========================================  =============================================
array -> bytes codec in the chain           chunk layout (after the bytes->bytes codecs)
==========================================  =============================================
``vlen-utf8`` or ``vlen-bytes``             numcodecs: ``u32 n``, then ``u32 len + bytes``
``zarrs.vlen`` (either name)                zarrs: u64 index length + index + data
none, or a plain ``bytes`` codec, with a    draft ZEP Arrow layout: ``n+1`` little-endian
variable-length data type (``string``,      int32 offsets, zero padding to 64 bytes, data;
``binary``, ``bytes``,                      int64 offsets (``"arrow-large"``) for
``variable_length_bytes``, ...)             ``large_string``/``large_binary``
``bytes`` with a fixed-width or numeric     plain little/big-endian array bytes
data type
==========================================  =============================================

The ZEP names the 64-bit variants ``LargeString``/``LargeBinary`` but gives no JSON spelling and
no offsets-width configuration key; we accept ``large_string``, ``large_binary``,
``largestring``, ``LargeString``, ``large_utf8`` ... (case and ``_`` ignored).  Whether the
values are text or bytes comes from the data type (``string``-like -> ``str``, ``binary``/
``bytes``-like -> ``bytes``), falling back to the codec name (``vlen-bytes`` -> bytes).

What decode returns
-------------------
An array of ``chunk_shape`` and exactly ``pipeline.dtype`` (the dtype the metadata layer passed):
``StringDType`` strings are decoded straight to ``StringDType`` (no Python ``str`` objects),
``object`` gives ``str`` (or ``bytes`` for binary data) objects, ``U`` fixed width.  For
zero-copy Arrow use :meth:`V3Pipeline.decode_arrow`.  Malformed input raises
:class:`~xr_zstrings.errors.ChunkError` (invalid UTF-8 :class:`StringDecodeError`), never a bare
IndexError/ValueError; unknown codecs raise :class:`UnsupportedError` at build time.

Sharding: ``chunk_shape`` is the *shard* shape (the chunk grid's); a shard is decoded whole.
:meth:`V3Pipeline.encode` leaves inner chunks holding only the fill value out of the shard
(index entry ``2**64-1``), as zarr-python does, unless ``write_empty_chunks=True``.

This module never imports xarray; zarr-python is imported lazily, the first time a chain needs
one of its codecs (plain ``bytes``/``transpose``/vlen/Arrow chains do not import it at all).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from .. import zarr_compat as _zarr_compat
from .v2 import MAX_CHUNK_BYTES_ENV, bounded_decode, max_chunk_bytes
from ..errors import ChunkError, MetadataError, UnknownCodecError, UnsupportedError, ZStringsError
from ..text.vlen import (
    VlenChunk,
    decode_arrow_chunk,
    decode_offsets_index,
    decode_vlen_utf8_chunk,
    decode_vlen_utf8_to_numpy,
    encode_arrow_chunk,
    encode_vlen_utf8_chunk,
    join_zarrs_vlen,
    split_zarrs_vlen,
    values_to_vlen,
    vlen_to_arrow,
    vlen_to_numpy,
)

__all__ = ["ZARRS_OPTIONAL_NAMES", "ZARRS_VLEN_NAMES", "V3Pipeline", "classify_data_type"]

ZARRS_VLEN_NAMES = ("zarrs.vlen", "https://codec.zarrs.dev/array_to_bytes/vlen")
# zarrs' nullable-data codec; plain "optional" only with zarrs' configuration (mask_codecs), since
# zarr-extensions also drafts an unrelated "optional" codec (per-chunk codec switching)
ZARRS_OPTIONAL_NAMES = ("zarrs.optional", "https://codec.zarrs.dev/array_to_bytes/optional")
_VLEN_NAMES = ("vlen-utf8", "vlen-bytes")
#: zarrs' name for the numcodecs interleaved layout decoupled from the data type ("the same as
#: vlen-utf8, vlen-array, vlen-bytes from Zarr V2": zarrs' codec/array_to_bytes/vlen_v2 docs)
ZARRS_VLEN_V2_NAMES = ("zarrs.vlen_v2", "https://codec.zarrs.dev/array_to_bytes/vlen_v2")
_MAX_U64 = 2**64 - 1
_STR_NAMES = {"string", "str", "utf8", "largestring", "largeutf8", "variablelengthutf8"}
_BYTES_NAMES = {"bytes", "binary", "variablelengthbytes", "largebinary", "largebytes", "vlenbytes"}
_LARGE_NAMES = {"largestring", "largeutf8", "largebinary", "largebytes"}
_DEFAULT_INDEX_CODECS = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]


# --------------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------------


def _w(where: str) -> str:
    return where if where else "<array>"


def _norm_name(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "")


def classify_data_type(data_type: Any, dtype: Any = None) -> tuple[str | None, bool]:
    """``(kind, large)`` of a zarr.json ``data_type``: kind "str"/"bytes" for variable-length
    types, None for fixed-width and numeric ones; ``large`` for the 64-bit-offset Arrow variants."""
    name = data_type.get("name") if isinstance(data_type, dict) else data_type
    if isinstance(name, str):
        n = _norm_name(name)
        if n in _STR_NAMES:
            return "str", n in _LARGE_NAMES
        if n in _BYTES_NAMES:
            return "bytes", n in _LARGE_NAMES
    if dtype is not None:
        dt = np.dtype(dtype)
        if isinstance(dt, np.dtypes.StringDType):
            return "str", False
    return None, False


def _codec_name_cfg(codec: Any, where: str) -> tuple[str, dict]:
    if isinstance(codec, str):
        return codec, {}
    if not isinstance(codec, dict) or not isinstance(codec.get("name"), str):
        raise MetadataError(
            f"{_w(where)}: invalid codec entry {codec!r}; expected an object with a string 'name' "
            "and an optional 'configuration'"
        )
    cfg = codec.get("configuration") or {}
    if not isinstance(cfg, dict):
        raise MetadataError(f"{_w(where)}: codec {codec['name']!r} configuration must be an object, got {cfg!r}")
    return codec["name"], cfg


def _u8(buf: Any) -> np.ndarray:
    """bytes-like / zarr Buffer / ndarray -> 1-D uint8 view (no copy when possible)."""
    if isinstance(buf, np.ndarray):
        if buf.dtype == np.uint8 and buf.ndim == 1:
            return buf
        return np.ascontiguousarray(buf).reshape(-1).view(np.uint8)
    if hasattr(buf, "as_numpy_array") and not isinstance(buf, (bytes, bytearray, memoryview)):
        return _u8(buf.as_numpy_array())
    mv = memoryview(buf)
    if not mv.c_contiguous:
        mv = memoryview(mv.tobytes())
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return np.frombuffer(mv, dtype=np.uint8)


def _writeable(a: np.ndarray) -> np.ndarray:
    return a if a.flags.writeable else a.copy()


def _to_dtype(out: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if out.dtype == dtype:
        return out
    if dtype.kind == "U" and dtype.itemsize == 0:
        return out  # unsized "U": keep the width the conversion chose
    return out.astype(dtype)


def _string_dtype_arg(dtype: np.dtype, kind: str) -> Any:
    if kind == "bytes":
        return "O"
    if isinstance(dtype, np.dtypes.StringDType):
        return dtype
    if dtype.kind == "O":
        return "O"
    if dtype.kind == "U":
        return "U"
    return np.dtypes.StringDType()  # e.g. 'S': decode to T, then cast


def _check_shape(shape: Any, where: str, what: str = "chunk_shape") -> tuple[int, ...]:
    try:
        t = tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        raise MetadataError(f"{_w(where)}: {what} {shape!r} is not a sequence of integers") from None
    if any(s < 0 for s in t):
        raise MetadataError(f"{_w(where)}: {what} {t} has a negative extent")
    return t


# --------------------------------------------------------------------------------------------
# zarr-python glue (imported lazily so the cost is paid once, at first build)
# --------------------------------------------------------------------------------------------


class _Zarr:
    """Lazily imported zarr-python pieces."""

    _loaded = False
    _zdtypes: dict[np.dtype, Any] = {}

    @classmethod
    def load(cls) -> type[_Zarr]:
        if not cls._loaded:
            import zarr.registry
            from zarr.abc.codec import ArrayArrayCodec, ArrayBytesCodec, BytesBytesCodec
            from zarr.buffer import default_buffer_prototype
            from zarr.dtype import parse_dtype

            cls.registry = zarr.registry
            cls.AA, cls.AB, cls.BB = ArrayArrayCodec, ArrayBytesCodec, BytesBytesCodec
            cls.prototype = default_buffer_prototype()
            cls.zdtype = staticmethod(lambda dt: parse_dtype(dt, zarr_format=3))
            cls._loaded = True
        return cls

    _specs: dict[tuple[tuple[int, ...], np.dtype], Any] = {}

    @classmethod
    def spec(cls, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        """zarr-python's ArraySpec for a chunk, memoised: zarr's dtype registry lookup costs about
        1 ms a call, i.e. a second when opening 1,000 compressed Zarr v3 variables (ArraySpec and
        zarr's dtypes are frozen dataclasses, safe to share)."""
        key = (tuple(shape), np.dtype(dtype))
        found = cls._specs.get(key)
        if found is not None:
            return found
        z = cls.load()
        zd = cls._zdtypes.get(dtype)
        if zd is None:  # zarr-python's dtype lookup scans its registry: once per dtype (wide stores)
            try:
                zd = z.zdtype(dtype)
            except Exception:  # noqa: BLE001 - third-party codec errors become ChunkError/MetadataError
                zd = z.zdtype(np.dtype("uint8"))
            cls._zdtypes[dtype] = zd
        shape = shape if all(s >= 0 for s in shape) else (0,)
        spec = _zarr_compat.array_spec(shape, zd, zd.default_scalar(), z.prototype)
        if len(cls._specs) < 4096:
            cls._specs[key] = spec
        return spec

    @classmethod
    def codec_class(cls, name: str, where: str) -> type:
        z = cls.load()
        try:
            return z.registry.get_codec_class(name)
        except Exception:  # noqa: BLE001 - third-party codec errors become ChunkError/MetadataError
            raise UnknownCodecError(
                f"{_w(where)}: unknown Zarr v3 codec {name!r}; xr_zstrings reads transpose, bytes, "
                f"vlen-utf8, vlen-bytes, zarrs.vlen, sharding_indexed and every codec zarr-python "
                "registers. Fix: install the package that registers this codec with zarr-python "
                "(a zarr.codecs entry point, e.g. numcodecs for 'numcodecs.*'), or rewrite the "
                "array with supported codecs"
            ) from None

    @classmethod
    def run(cls, codec: Any, method: str, data: Any, spec: Any) -> Any:
        return _zarr_compat.run_codec(codec, method, data, spec)


# --------------------------------------------------------------------------------------------
# array -> array steps
# --------------------------------------------------------------------------------------------


class _Transpose:
    name = "transpose"

    def __init__(self, cfg: dict, ndim: int, where: str):
        order = cfg.get("order")
        try:
            order = tuple(int(o) for o in order)
        except (TypeError, ValueError):
            raise MetadataError(f"{_w(where)}: transpose order {order!r} is not a list of integers") from None
        if sorted(order) != list(range(ndim)):
            raise MetadataError(
                f"{_w(where)}: transpose order {list(order)} is not a permutation of the chunk's "
                f"{ndim} dimensions"
            )
        self.order = order
        self.inverse = tuple(int(i) for i in np.argsort(order))

    def out_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(shape[o] for o in self.order)

    def out_dtype(self, dtype: np.dtype) -> np.dtype:
        return dtype

    def decode(self, arr: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        return arr.transpose(self.inverse)

    def encode(self, arr: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(arr.transpose(self.order))


class _ZarrAA:
    """Any other array->array codec, through zarr-python (numeric data only)."""

    def __init__(self, name: str, codec: Any, shape: tuple[int, ...], dtype: np.dtype, where: str):
        z = _Zarr.load()
        self.name = name
        try:
            self.in_spec = _Zarr.spec(shape, dtype)
            self.codec = codec.evolve_from_array_spec(self.in_spec)
            self.out_spec = self.codec.resolve_metadata(self.in_spec)
            self._out_dtype = np.dtype(self.out_spec.dtype.to_native_dtype())
        except ZStringsError:
            raise
        except Exception as e:  # noqa: BLE001 - third-party codec errors become ChunkError/MetadataError
            raise UnsupportedError(f"{_w(where)}: codec {name!r} cannot be used on {dtype} chunks: {e}") from None
        self.z = z

    def out_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(self.out_spec.shape) if shape == tuple(self.in_spec.shape) else shape

    def out_dtype(self, dtype: np.dtype) -> np.dtype:
        return self._out_dtype

    def decode(self, arr: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        nd = self.z.prototype.nd_buffer.from_numpy_array(np.ascontiguousarray(arr))
        return self.z.run(self.codec, "decode", nd, self.in_spec).as_numpy_array()

    def encode(self, arr: np.ndarray) -> np.ndarray:
        nd = self.z.prototype.nd_buffer.from_numpy_array(np.ascontiguousarray(arr))
        return self.z.run(self.codec, "encode", nd, self.in_spec).as_numpy_array()


# --------------------------------------------------------------------------------------------
# bytes -> bytes steps
# --------------------------------------------------------------------------------------------


class _ZarrBB:
    """A bytes->bytes codec implemented by zarr-python."""

    def __init__(self, name: str, codec: Any, elem_dtype: np.dtype, where: str):
        self.name = name
        self.where = where
        dt = elem_dtype if elem_dtype.kind in "biufcmM" else np.dtype("uint8")
        self.spec = _Zarr.spec((1,), dt)
        try:
            self.codec = codec.evolve_from_array_spec(self.spec)
        except Exception as e:  # noqa: BLE001 - third-party codec errors become ChunkError/MetadataError
            raise MetadataError(f"{_w(where)}: invalid {name!r} codec configuration: {e}") from None
        # decompressors are run through codecs.bounded_decode (numcodecs' own decoders, capped):
        # zarr-python's gzip/zstd/blosc and numcodecs.* wrappers decode whatever a chunk holds
        self.bounded = _bounded_equivalent(name, self.codec)
        self.limit = max_chunk_bytes()  # V3Pipeline narrows it to the exact size where known
        self.expected = f"at most {self.limit} bytes ({MAX_CHUNK_BYTES_ENV})"

    def decode(self, u8: np.ndarray, ctx: str, scratch: bool = False) -> np.ndarray:
        z = _Zarr
        try:
            if self.bounded is not None:
                return _u8(bounded_decode(self.bounded, u8, limit=self.limit, expected=self.expected,
                                          scratch=scratch))
            buf = z.prototype.buffer.from_array_like(u8)
            out = _u8(z.run(self.codec, "decode", buf, self.spec))
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
        z = _Zarr
        try:
            buf = z.prototype.buffer.from_array_like(u8)
            return _u8(z.run(self.codec, "encode", buf, self.spec))
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
                f"{_w(self.where)}: the {self.name!r} codec does not have a fixed encoded size, so it "
                "cannot encode a shard index (sharding needs fixed-size index codecs such as bytes "
                "and crc32c)"
            ) from None


_BOUNDED_IDS = ("zlib", "gzip", "bz2", "lzma", "zstd", "blosc", "lz4")


def _bounded_equivalent(name: str, codec: Any) -> Any:
    """The numcodecs codec that decodes like zarr-python's ``codec``, for the compressors that
    ``codecs.bounded_decode`` knows how to cap; None for any other codec."""
    import numcodecs

    try:
        if name in ("gzip", "zstd", "blosc"):
            return numcodecs.get_codec({"id": name})  # decoding needs no configuration
        if name.startswith("numcodecs.") and name.split(".", 1)[1] in _BOUNDED_IDS:
            return numcodecs.get_codec(dict(codec.codec_config))
    except Exception:  # noqa: BLE001 - fall back to zarr-python's decoder (checked afterwards)
        return None
    return None


# --------------------------------------------------------------------------------------------
# array -> bytes steps
# --------------------------------------------------------------------------------------------


class _BytesAB:
    """The ``bytes`` codec: plain fixed-size element bytes."""

    layout = "numeric"

    def __init__(self, cfg: dict, dtype: np.dtype, where: str):
        endian = cfg.get("endian")
        if endian not in (None, "little", "big"):
            raise MetadataError(f"{_w(where)}: bytes codec endian={endian!r}; expected 'little' or 'big'")
        if dtype.kind in "OT" or dtype.itemsize == 0:
            raise UnsupportedError(f"{_w(where)}: the bytes codec cannot store {dtype} elements")
        if dtype.kind in "SV" or dtype.itemsize == 1:
            stored = dtype
        else:
            if endian is None and dtype.kind == "U":
                endian = "little"  # zarr-python always writes it; be lenient when absent
            if endian is None:
                raise MetadataError(
                    f"{_w(where)}: the bytes codec needs an 'endian' configuration for the "
                    f"multi-byte data type {dtype}"
                )
            stored = dtype.newbyteorder("<" if endian == "little" else ">")
        if dtype.kind in "SU":
            self.layout = "fixed"
        self.dtype = dtype
        self.stored = stored

    def encoded_nbytes(self, shape: tuple[int, ...]) -> int | None:
        """The exact size of an encoded chunk of ``shape`` (None for the variable-length data chain)."""
        if any(s < 0 for s in shape):
            return None
        return math.prod(shape) * self.stored.itemsize

    def decode(self, u8: np.ndarray, shape: tuple[int, ...], ctx: str) -> np.ndarray:
        isz = self.stored.itemsize
        if any(s < 0 for s in shape):  # variable length (the zarrs.vlen data chain)
            if u8.size % isz:
                raise ChunkError(f"{ctx}: {u8.size} bytes is not a whole number of {isz}-byte elements")
            shape = (u8.size // isz,)
        n = math.prod(shape)
        if u8.size != n * isz:
            raise ChunkError(
                f"{ctx}: the chunk decodes to {u8.size} bytes, expected {n * isz} ({n} elements of "
                f"{self.stored} for chunk shape {shape}); the chunk is truncated, corrupt or belongs "
                "to another array"
            )
        arr = u8.view(self.stored).reshape(shape)
        if self.stored != self.dtype:
            return arr.astype(self.dtype)
        return arr  # may be a read-only view; V3Pipeline.decode copies at the top level only

    def encode(self, arr: np.ndarray, ctx: str) -> np.ndarray:
        a = np.ascontiguousarray(np.asarray(arr).astype(self.stored, copy=False))
        return a.reshape(-1).view(np.uint8)


class _VlenAB:
    """numcodecs ``vlen-utf8`` / ``vlen-bytes``."""

    def __init__(self, name: str, kind: str, dtype: np.dtype, utf8_errors: str):
        self.layout = name
        self.kind = kind
        self.dtype = dtype
        self.sd = _string_dtype_arg(dtype, kind)
        self.utf8_errors = utf8_errors

    def decode(self, u8: np.ndarray, shape: tuple[int, ...], ctx: str) -> np.ndarray:
        out = decode_vlen_utf8_to_numpy(
            u8, math.prod(shape), kind=self.kind, string_dtype=self.sd,
            utf8_errors=self.utf8_errors, shape=shape, what=ctx,
        )
        return _to_dtype(out, self.dtype)

    def to_vlen(self, u8: np.ndarray, n: int, ctx: str) -> VlenChunk:
        return decode_vlen_utf8_chunk(u8, n, what=ctx)

    def encode(self, arr: np.ndarray, ctx: str) -> np.ndarray:
        return _u8(encode_vlen_utf8_chunk(arr, kind=self.kind, what=ctx))


class _ArrowAB:
    """The draft ZEP Arrow layout (int32 offsets, or int64 for the large variants)."""

    def __init__(self, kind: str, large: bool, dtype: np.dtype, utf8_errors: str):
        self.layout = "arrow-large" if large else "arrow"
        self.kind, self.large, self.dtype = kind, large, dtype
        self.sd = _string_dtype_arg(dtype, kind)
        self.utf8_errors = utf8_errors

    def to_vlen(self, u8: np.ndarray, n: int, ctx: str) -> VlenChunk:
        return decode_arrow_chunk(u8, n, large=self.large, what=ctx)

    def decode(self, u8: np.ndarray, shape: tuple[int, ...], ctx: str) -> np.ndarray:
        chunk = self.to_vlen(u8, math.prod(shape), ctx)
        out = vlen_to_numpy(chunk, kind=self.kind, string_dtype=self.sd, utf8_errors=self.utf8_errors, what=ctx, shape=shape)
        return _to_dtype(out, self.dtype)

    def encode(self, arr: np.ndarray, ctx: str) -> np.ndarray:
        return _u8(encode_arrow_chunk(arr, large=self.large, binary=self.kind == "bytes", what=ctx))


class _ZarrsVlenAB:
    """The zarrs ``vlen`` codec, with its index and data chains built as nested pipelines."""

    layout = "zarrs.vlen"

    def __init__(self, cfg: dict, kind: str, dtype: np.dtype, utf8_errors: str, where: str, n: int):
        idt = cfg.get("index_data_type")
        if idt not in ("uint32", "uint64"):
            raise (MetadataError if idt is None else UnsupportedError)(
                f"{_w(where)}: zarrs.vlen index_data_type={idt!r}; expected 'uint32' or 'uint64'"
            )
        loc = cfg.get("index_location", "start")  # configuration v0.0 has none and means start
        if loc not in ("start", "end"):
            raise UnsupportedError(f"{_w(where)}: zarrs.vlen index_location={loc!r}; expected 'start' or 'end'")
        for key in ("index_codecs", "data_codecs"):
            if not isinstance(cfg.get(key), list):
                raise MetadataError(
                    f"{_w(where)}: zarrs.vlen configuration needs a list {key!r}, got {cfg.get(key)!r}"
                )
        self.kind, self.dtype, self.utf8_errors = kind, dtype, utf8_errors
        self.sd = _string_dtype_arg(dtype, kind)
        self.index_data_type, self.index_location = idt, loc
        self.index = V3Pipeline.from_metadata(
            cfg["index_codecs"], data_type=idt, dtype=np.dtype(idt), chunk_shape=(n + 1,),
            where=f"{_w(where)} zarrs.vlen index_codecs", _default_bytes=True,
        )
        self.data = V3Pipeline.from_metadata(
            cfg["data_codecs"], data_type="uint8", dtype=np.dtype("uint8"), chunk_shape=(-1,),
            where=f"{_w(where)} zarrs.vlen data_codecs", _default_bytes=True,
        )

    def to_vlen(self, u8: np.ndarray, n: int, ctx: str) -> VlenChunk:
        ib, db = split_zarrs_vlen(u8, self.index_location, what=ctx)
        offsets = self.index.decode(ib, (n + 1,), key=ctx, _ctx=f"{ctx} (zarrs.vlen index)")
        if len(db) == 0:
            data = np.zeros(0, np.uint8)  # zarrs skips the data codecs for empty data
        else:
            data = self.data.decode(db, (-1,), key=ctx, _ctx=f"{ctx} (zarrs.vlen data)")
        offsets = decode_offsets_index(offsets, n, self.index_data_type, data_len=int(data.size), what=ctx)
        return VlenChunk(offsets, data)

    def decode(self, u8: np.ndarray, shape: tuple[int, ...], ctx: str) -> np.ndarray:
        chunk = self.to_vlen(u8, math.prod(shape), ctx)
        out = vlen_to_numpy(chunk, kind=self.kind, string_dtype=self.sd, utf8_errors=self.utf8_errors, what=ctx, shape=shape)
        return _to_dtype(out, self.dtype)

    def encode(self, arr: np.ndarray, ctx: str) -> np.ndarray:
        chunk = values_to_vlen(arr, kind=self.kind, what=ctx)
        off = chunk.offsets.astype(np.int64, copy=False)
        base, end = int(off[0]), int(off[-1])
        off = off - base
        if end - base > np.iinfo(self.index_data_type).max:
            raise ZStringsError(f"{ctx}: {end - base} bytes of data do not fit index_data_type='uint32'; use 'uint64'")
        ib = self.index.encode(off.astype(self.index_data_type), _shape_check=False)
        data = np.ascontiguousarray(chunk.data[base:end])
        db = self.data.encode(data, _shape_check=False) if data.size else b""
        return _u8(join_zarrs_vlen(ib, db, self.index_location))


class _PackbitsAB:
    """The zarr-extensions ``packbits`` codec for ``bool`` data (zarrs' optional-codec masks).

    Element ``i`` is bit ``i % 8`` (least significant first) of byte ``i // 8``, zero-padded to a
    whole byte; ``padding_encoding`` "first_byte"/"last_byte" adds one byte holding the number of
    padding bits. zarr-python has no packbits codec, hence this one (numpy's packbits does the bits).
    """

    layout = "numeric"

    def __init__(self, cfg: dict, dtype: np.dtype, where: str):
        if dtype != np.dtype(bool):
            raise UnsupportedError(f"{_w(where)}: the packbits codec is read for bool data only, not {dtype}")
        pad = cfg.get("padding_encoding", "none")
        if pad not in ("none", "first_byte", "last_byte"):
            raise MetadataError(
                f"{_w(where)}: packbits padding_encoding={pad!r}; expected 'none', 'first_byte' or 'last_byte'"
            )
        if cfg.get("first_bit") not in (None, 0) or cfg.get("last_bit") not in (None, 0):
            raise MetadataError(f"{_w(where)}: packbits first_bit/last_bit must be 0 (or absent) for bool")
        self.pad = pad
        self.dtype = dtype

    def encoded_nbytes(self, shape: tuple[int, ...]) -> int | None:
        return None if any(s < 0 for s in shape) else (math.prod(shape) + 7) // 8 + (self.pad != "none")

    def decode(self, u8: np.ndarray, shape: tuple[int, ...], ctx: str) -> np.ndarray:
        n = math.prod(shape)
        want = (n + 7) // 8 + (self.pad != "none")
        if u8.size != want:
            raise ChunkError(f"{ctx}: a packbits mask of {n} elements is {want} bytes, got {u8.size}")
        bits = u8[1:] if self.pad == "first_byte" else u8[:-1] if self.pad == "last_byte" else u8
        if self.pad != "none" and int(u8[0 if self.pad == "first_byte" else -1]) != (-n) % 8:
            raise ChunkError(f"{ctx}: the packbits padding byte says {int(u8[0 if self.pad == 'first_byte' else -1])} "
                             f"padding bits, expected {(-n) % 8} for {n} elements")
        return np.unpackbits(bits, count=n, bitorder="little").astype(bool).reshape(shape)

    def encode(self, arr: np.ndarray, ctx: str) -> np.ndarray:
        a = np.ascontiguousarray(arr, dtype=bool).reshape(-1)
        bits = np.packbits(a, bitorder="little")
        pad = np.array([(-a.size) % 8], np.uint8)
        if self.pad == "first_byte":
            return np.concatenate([pad, bits])
        return np.concatenate([bits, pad]) if self.pad == "last_byte" else bits


class _OptionalAB:
    """zarrs' ``zarrs.optional`` codec for its nullable ``optional`` data type (string and bytes).

    A chunk is ``u64le mask_len, u64le data_len``, the validity mask (a bool array of the chunk's
    shape, 1 = present) through ``mask_codecs``, then only the present values, in C order, as a
    1-D array of the inner data type through ``data_codecs`` (nothing when none is present).
    Missing elements decode to None in an object array. (zarrs 0.23 optional_codec.rs; the data
    type is the zarr-extensions draft "optional"; see tests/golden_chunks/README.md.)
    """

    layout = "zarrs.optional"

    def __init__(self, cfg: dict, *, data_type: Any, kind: str | None, dtype: np.dtype, shape: tuple[int, ...],
                 utf8_errors: str, where: str):
        if kind is None:
            raise UnsupportedError(
                f"{_w(where)}: zarrs.optional is read for string and bytes data; the inner data type "
                f"is {data_type!r}"
            )
        for key in ("mask_codecs", "data_codecs"):
            if not isinstance(cfg.get(key), list):
                raise MetadataError(f"{_w(where)}: zarrs.optional configuration needs a list {key!r}, got {cfg.get(key)!r}")
        self.kind, self.dtype, self.shape = kind, dtype, shape
        self.mask = V3Pipeline.from_metadata(
            cfg["mask_codecs"], data_type="bool", dtype=np.dtype(bool), chunk_shape=shape,
            where=f"{_w(where)} zarrs.optional mask_codecs", _default_bytes=True)
        n = math.prod(shape) if all(x >= 0 for x in shape) else 0
        self.data = V3Pipeline.from_metadata(
            cfg["data_codecs"], data_type=data_type, dtype=np.dtype(object), chunk_shape=(n,),
            where=f"{_w(where)} zarrs.optional data_codecs", utf8_errors=utf8_errors)
        self.inner_layout = self.data.layout
        self.utf8_errors = utf8_errors

    def decode(self, u8: np.ndarray, shape: tuple[int, ...], ctx: str) -> np.ndarray:
        if u8.size < 16:
            raise ChunkError(f"{ctx}: a zarrs.optional chunk starts with two u64 lengths; got {u8.size} bytes")
        mask_len, data_len = (int(x) for x in u8[:16].view("<u8"))
        if 16 + mask_len + data_len != u8.size:
            raise ChunkError(
                f"{ctx}: zarrs.optional header says {mask_len} mask + {data_len} data bytes after the "
                f"16-byte header, but the chunk is {u8.size} bytes"
            )
        mask = self.mask.decode(u8[16 : 16 + mask_len], shape, _ctx=f"{ctx} (zarrs.optional mask)")
        mask = np.asarray(mask, dtype=bool)
        out = np.full(shape, None, dtype=object)
        n_valid = int(mask.sum())
        if n_valid:
            values = self.data.decode(u8[16 + mask_len :], (n_valid,), _ctx=f"{ctx} (zarrs.optional data)")
            out[mask] = values.reshape(-1)
        elif data_len:
            raise ChunkError(f"{ctx}: zarrs.optional mask has no present value but {data_len} data bytes follow")
        return out

    def encode(self, arr: np.ndarray, ctx: str) -> np.ndarray:
        a = np.asarray(arr, dtype=object)
        valid = ~np.asarray(_isnull(a), dtype=bool)
        mb = np.frombuffer(self.mask.encode(valid, _shape_check=False), np.uint8)
        present = a[valid].reshape(-1)
        db = np.frombuffer(self.data.encode(present, _shape_check=False), np.uint8) if present.size else \
            np.zeros(0, np.uint8)
        head = np.array([mb.size, db.size], "<u8").view(np.uint8)
        return np.concatenate([head, mb, db])


def _isnull(a: np.ndarray) -> np.ndarray:
    """None, NaN (and pandas' NA) elements of an object array."""
    flat = a.reshape(-1).tolist()
    return np.fromiter((v is None or (isinstance(v, float) and v != v) or type(v).__name__ == "NAType"
                        for v in flat), bool, len(flat)).reshape(a.shape)


class _ZarrAB:
    """Any other array->bytes codec zarr-python registers (numeric data only)."""

    layout = "numeric"

    def __init__(self, name: str, codec: Any, shape: tuple[int, ...], dtype: np.dtype, where: str):
        self.name = name
        if dtype.kind not in "biufcmM":
            raise UnsupportedError(
                f"{_w(where)}: the array->bytes codec {name!r} is not supported for {dtype} data; "
                "strings need vlen-utf8, vlen-bytes, zarrs.vlen or the Arrow layout"
            )
        try:
            self.spec = _Zarr.spec(shape, dtype)
            self.codec = codec.evolve_from_array_spec(self.spec)
        except Exception as e:  # noqa: BLE001 - third-party codec errors become ChunkError/MetadataError
            raise MetadataError(f"{_w(where)}: invalid {name!r} codec configuration: {e}") from None
        self.dtype = dtype

    def decode(self, u8: np.ndarray, shape: tuple[int, ...], ctx: str) -> np.ndarray:
        z = _Zarr
        try:
            spec = self.spec if shape == tuple(self.spec.shape) else _Zarr.spec(shape, self.dtype)
            nd = z.run(self.codec, "decode", z.prototype.buffer.from_array_like(u8), spec)
            return _writeable(nd.as_numpy_array().reshape(shape))
        except Exception as e:  # noqa: BLE001 - third-party codec errors become ChunkError/MetadataError
            raise ChunkError(f"{ctx}: the {self.name!r} codec failed to decode: {type(e).__name__}: {e}") from None

    def encode(self, arr: np.ndarray, ctx: str) -> np.ndarray:
        z = _Zarr
        spec = self.spec if arr.shape == tuple(self.spec.shape) else _Zarr.spec(arr.shape, self.dtype)
        nd = z.prototype.nd_buffer.from_numpy_array(np.ascontiguousarray(arr))
        return _u8(z.run(self.codec, "encode", nd, spec))


def _default_fill(dtype: np.dtype, kind: str | None) -> Any:
    if kind == "bytes":
        return b""
    if kind == "str" or dtype.kind in "TU":
        return ""
    if dtype.kind == "S":
        return b""
    if dtype.kind == "O":
        return ""
    return np.zeros((), dtype)[()]


def _is_optional_codec(name: str, cfg: Any) -> bool:
    # plain "optional" only with zarrs' configuration (mask_codecs): see ZARRS_OPTIONAL_NAMES
    return name in ZARRS_OPTIONAL_NAMES or (name == "optional" and isinstance(cfg, dict) and "mask_codecs" in cfg)


def _optional_chain(entries: list[tuple[str, Any]], where: str) -> bool:
    """Whether a chain's array->bytes codec is zarrs.optional (also inside sharding_indexed)."""
    for name, cfg in entries:
        if _is_optional_codec(name, cfg):
            return True
        if name == "sharding_indexed" and isinstance(cfg, dict) and isinstance(cfg.get("codecs"), list):
            return _optional_chain([_codec_name_cfg(c, where) for c in cfg["codecs"]], where)
    return False


def _all_fill(a: np.ndarray, fill: Any) -> bool:
    try:
        if a.dtype.kind in "fc" and isinstance(fill, float) and math.isnan(fill):
            return bool(np.isnan(a).all())
        return bool(np.all(a == fill))
    except Exception:  # noqa: BLE001 - third-party codec errors become ChunkError/MetadataError
        return False


class _ShardingAB:
    """``sharding_indexed``: decode/encode a whole shard."""

    def __init__(self, cfg: dict, *, data_type: Any, dtype: np.dtype, shard_shape: tuple[int, ...],
                 fill_value: Any, kind: str | None, utf8_errors: str, where: str):
        inner = _check_shape(cfg.get("chunk_shape", ()), where, "sharding chunk_shape")
        if len(inner) != len(shard_shape) or any(i == 0 for i in inner):
            raise MetadataError(
                f"{_w(where)}: sharding chunk_shape {list(inner)} does not match the shard shape "
                f"{list(shard_shape)} (same number of dimensions, no zero extents expected)"
            )
        if any(s % i for s, i in zip(shard_shape, inner, strict=True)):
            raise MetadataError(
                f"{_w(where)}: the shard shape {list(shard_shape)} is not a multiple of the inner "
                f"chunk shape {list(inner)}"
            )
        loc = cfg.get("index_location", "end")
        if loc not in ("start", "end"):
            raise MetadataError(f"{_w(where)}: sharding index_location={loc!r}; expected 'start' or 'end'")
        codecs = cfg.get("codecs")
        if not isinstance(codecs, list):
            raise MetadataError(f"{_w(where)}: sharding_indexed needs a 'codecs' list, got {codecs!r}")
        self.shard_shape = shard_shape
        self.inner_shape = inner
        self.cps = tuple(s // i for s, i in zip(shard_shape, inner, strict=True))
        self.n_inner = math.prod(self.cps)
        self.index_location = loc
        self.fill_value = fill_value
        self.dtype = dtype
        self.inner = V3Pipeline.from_metadata(
            codecs, data_type=data_type, dtype=dtype, chunk_shape=inner,
            where=f"{_w(where)} (inner chunk)", fill_value=fill_value, utf8_errors=utf8_errors,
        )
        self.layout = self.inner.layout
        self.index = V3Pipeline.from_metadata(
            cfg.get("index_codecs", _DEFAULT_INDEX_CODECS), data_type="uint64", dtype=np.dtype("<u8"),
            chunk_shape=(*self.cps, 2), where=f"{_w(where)} sharding index_codecs",
        )
        self.index_size = self.index._encoded_size(self.n_inner * 16)
        maxb = max_chunk_bytes()
        if self.n_inner * 16 > maxb:
            raise UnsupportedError(
                f"{_w(where)}: sharding chunk_shape {list(inner)} makes {self.n_inner} inner chunks per "
                f"shard {list(shard_shape)}, whose index alone is beyond the {maxb}-byte chunk limit "
                f"({MAX_CHUNK_BYTES_ENV}); expected a shard holding a sensible number of inner chunks"
            )
        self.where = where

    @property
    def slices(self) -> Any:
        """C-order slices of each inner chunk within the shard (generated, never all held)."""
        inner = self.inner_shape
        return (tuple(slice(c * i, (c + 1) * i) for c, i in zip(coords, inner, strict=True)) for coords in np.ndindex(*self.cps))

    def _empty(self, shape: tuple[int, ...]) -> np.ndarray:
        out = np.empty(shape, self.dtype)
        out[...] = self.fill_value
        return out

    def read_index(self, u8: np.ndarray, ctx: str) -> np.ndarray:
        B = int(u8.size)
        if B < self.index_size:
            raise ChunkError(
                f"{ctx}: shard of {B} bytes is shorter than its {self.index_size}-byte index "
                f"({self.n_inner} inner chunks); the shard is truncated"
            )
        ib = u8[: self.index_size] if self.index_location == "start" else u8[B - self.index_size:]
        idx = self.index.decode(ib, key=ctx, _ctx=f"{ctx} (shard index)").reshape(self.n_inner, 2)
        off, nb = idx[:, 0], idx[:, 1]
        empty = (off == _MAX_U64) & (nb == _MAX_U64)
        full = ~empty
        if full.any():
            o = off[full]
            bad = (o > B) | (nb[full] > B) | (o + np.minimum(nb[full], B) > B)
            if bad.any():
                j = int(np.flatnonzero(full)[np.flatnonzero(bad)[0]])
                raise ChunkError(
                    f"{ctx}: shard index entry {j} says inner chunk at byte {int(off[j])} with "
                    f"{int(nb[j])} bytes, beyond the {B}-byte shard; the shard is truncated or corrupt"
                )
        return idx

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
        for j, sl in enumerate(self.slices):
            o, n = int(idx[j, 0]), int(idx[j, 1])
            untouched = region is not None and any(
                r.start >= b.stop or r.stop <= b.start for r, b in zip(region, sl, strict=True))
            if (o == _MAX_U64 and n == _MAX_U64) or untouched:
                out[sl] = self.fill_value
            else:
                out[sl] = self.inner.decode(u8[o:o + n], _ctx=f"{ctx}, inner chunk {tuple(int(c) for c in np.unravel_index(j, self.cps))}")
        return out

    def encode(self, arr: np.ndarray, ctx: str, write_empty_chunks: bool = False) -> np.ndarray:
        parts: list[bytes] = []
        idx = np.full((self.n_inner, 2), _MAX_U64, np.uint64)
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
        return _u8(b"".join(parts))


# --------------------------------------------------------------------------------------------
# the pipeline
# --------------------------------------------------------------------------------------------


class V3Pipeline:
    """A Zarr v3 codec chain for one array: ``decode(raw) -> ndarray``, ``encode(ndarray) -> bytes``.

    Attributes: ``layout`` ("numeric", "fixed", "vlen-utf8", "vlen-bytes", "zarrs.vlen", "arrow",
    "arrow-large"; for a sharded array the inner chunks' layout), ``sharded``, ``kind``
    ("str"/"bytes" for variable-length data, else None), ``dtype``, ``chunk_shape``, ``codec_names``.
    """

    def __init__(self, *, aa: list, ab: Any, bb: list, dtype: np.dtype, chunk_shape: tuple[int, ...],
                 where: str, kind: str | None, fill_value: Any, codec_names: list[str]):
        self.aa, self.ab, self.bb = aa, ab, bb
        self.dtype = dtype
        self.chunk_shape = chunk_shape
        self.where = where
        self.kind = kind
        self.fill_value = fill_value
        self.codec_names = codec_names
        self.sharded = isinstance(ab, _ShardingAB)
        self.layout = ab.layout
        # whether encode() takes a VlenChunk (packed values) in place of a chunk array
        self.accepts_vlen = not aa and not self.sharded and self.layout in (
            "vlen-utf8", "vlen-bytes", "zarrs.vlen", "arrow", "arrow-large")

    def __repr__(self) -> str:
        return (f"V3Pipeline(layout={self.layout!r}, sharded={self.sharded}, dtype={self.dtype}, "
                f"chunk_shape={self.chunk_shape}, codecs={self.codec_names})")

    # ---------------------------------------------------------------------------- building

    @classmethod
    def from_metadata(
        cls,
        codecs: list[dict],
        *,
        data_type: str | dict,
        dtype: Any,
        chunk_shape: tuple[int, ...],
        where: str = "",
        fill_value: Any = None,
        utf8_errors: str = "strict",
        _default_bytes: bool = False,
    ) -> V3Pipeline:
        """Build the chain for one array from its zarr.json ``codecs`` (see the module docstring).

        ``fill_value`` (already parsed to a Python/numpy scalar) fills empty inner chunks of a
        shard; None means the data type's default ("" / b"" / 0).  ``utf8_errors`` ("strict",
        "replace", "drop") applies to invalid UTF-8 in variable-length strings.

        Long because it validates the whole chain in one pass, in the order the spec requires
        (array->array, one array->bytes, bytes->bytes), each position with its own error naming the
        codec; the per-codec classes it builds hold the rest.
        """
        if codecs is None:
            codecs = []
        if not isinstance(codecs, (list, tuple)):
            raise MetadataError(f"{_w(where)}: 'codecs' must be a list, got {codecs!r}")
        dtype = np.dtype(dtype)
        shape = tuple(int(s) for s in chunk_shape)
        if any(s < -1 for s in shape):
            raise MetadataError(f"{_w(where)}: chunk_shape {list(shape)} has a negative extent")
        kind, large = classify_data_type(data_type, dtype)
        z = None
        entries = [_codec_name_cfg(c, where) for c in codecs]
        if fill_value is None and not _optional_chain(entries, where):
            # (zarrs' optional type: a null fill is missing, so inner chunks a shard leaves out are None)
            fill_value = _default_fill(dtype, kind)
        names = [n for n, _ in entries]
        aa: list = []
        ab: Any = None
        bb: list = []
        cur_shape, cur_dtype = shape, dtype
        for name, cfg in entries:
            if ab is None and name == "transpose":
                step = _Transpose(cfg, len(cur_shape), where)
                aa.append(step)
                cur_shape = step.out_shape(cur_shape)
                continue
            is_ab_name = name in ("bytes", "sharding_indexed", "packbits", *_VLEN_NAMES, *ZARRS_VLEN_NAMES,
                                  *ZARRS_VLEN_V2_NAMES, *ZARRS_OPTIONAL_NAMES) or (
                                      name == "optional" and "mask_codecs" in cfg)
            if is_ab_name:
                if ab is not None:
                    raise MetadataError(
                        f"{_w(where)}: codec chain {names} has more than one array->bytes codec "
                        f"({name!r} after {ab.layout!r}); a chain needs exactly one"
                    )
                ab = cls._build_ab(name, cfg, data_type=data_type, kind=kind, large=large,
                                   dtype=cur_dtype, shape=cur_shape, fill_value=fill_value,
                                   utf8_errors=utf8_errors, where=where)
                continue
            if name == "transpose":
                raise MetadataError(f"{_w(where)}: array->array codec 'transpose' after the array->bytes codec in {names}")
            z = _Zarr.load()
            codec_cls = _Zarr.codec_class(name, where)
            try:
                codec = codec_cls.from_dict({"name": name, "configuration": cfg})
            except Exception as e:  # noqa: BLE001 - third-party codec errors become ChunkError/MetadataError
                raise MetadataError(f"{_w(where)}: invalid configuration for codec {name!r}: {e}") from None
            if isinstance(codec, z.BB):
                if ab is None:
                    ab = cls._implicit_ab(kind, large, cur_dtype, utf8_errors, where, names, _default_bytes)
                bb.append(_ZarrBB(name, codec, cur_dtype, where))
            elif isinstance(codec, z.AA):
                if ab is not None:
                    raise MetadataError(f"{_w(where)}: array->array codec {name!r} after the array->bytes codec in {names}")
                if kind is not None or cur_dtype.kind not in "biufcmM":
                    raise UnsupportedError(
                        f"{_w(where)}: the array->array codec {name!r} is not supported on string "
                        "or bytes data (only transpose is)"
                    )
                step = _ZarrAA(name, codec, cur_shape, cur_dtype, where)
                aa.append(step)
                cur_shape, cur_dtype = step.out_shape(cur_shape), step.out_dtype(cur_dtype)
            elif isinstance(codec, z.AB):
                if ab is not None:
                    raise MetadataError(f"{_w(where)}: codec chain {names} has more than one array->bytes codec")
                if kind is not None:
                    raise UnsupportedError(
                        f"{_w(where)}: the array->bytes codec {name!r} cannot store variable-length "
                        "strings; use vlen-utf8, vlen-bytes, zarrs.vlen or the Arrow layout"
                    )
                ab = _ZarrAB(name, codec, cur_shape, cur_dtype, where)
            else:  # pragma: no cover - every registered codec is one of the three
                raise UnsupportedError(f"{_w(where)}: codec {name!r} is of an unknown kind")
        if ab is None:
            ab = cls._implicit_ab(kind, large, cur_dtype, utf8_errors, where, names, _default_bytes)
        # what each bytes->bytes step may decode to: exactly the size of the array->bytes output
        # (fixed-size data) through the inner steps, else the global limit (vlen data, compressors)
        maxb = max_chunk_bytes()
        exact = ab.encoded_nbytes(cur_shape) if isinstance(ab, _BytesAB) else None
        for step in bb:
            if exact is None:
                step.limit, step.expected = maxb, f"at most {maxb} bytes ({MAX_CHUNK_BYTES_ENV})"
            else:
                step.limit = min(exact, maxb)
                step.expected = f"{exact} bytes (the chunk's size before {step.name!r})"
                if exact > maxb:
                    step.expected += f", which is itself beyond the {maxb}-byte limit ({MAX_CHUNK_BYTES_ENV})"
                exact = step.encoded_size_or_none(exact)
        return cls(aa=aa, ab=ab, bb=bb, dtype=dtype, chunk_shape=shape, where=where, kind=kind,
                   fill_value=fill_value, codec_names=names)

    @staticmethod
    def _implicit_ab(kind, large, dtype, utf8_errors, where, names, default_bytes):
        if kind is not None:
            return _ArrowAB(kind, large, dtype, utf8_errors)
        if default_bytes:
            return _BytesAB({"endian": "little"}, dtype, where)
        raise MetadataError(
            f"{_w(where)}: codec chain {names} has no array->bytes codec (such as 'bytes') for "
            f"{dtype} data; Zarr v3 requires exactly one"
        )

    @classmethod
    def _build_ab(cls, name, cfg, *, data_type, kind, large, dtype, shape, fill_value, utf8_errors, where):
        if name == "sharding_indexed":
            return _ShardingAB(cfg, data_type=data_type, dtype=dtype, shard_shape=shape,
                               fill_value=fill_value, kind=kind, utf8_errors=utf8_errors, where=where)
        if name == "bytes":
            if kind is not None:
                if cfg.get("endian") == "big":
                    raise UnsupportedError(
                        f"{_w(where)}: the Arrow layout has little-endian offsets; a bytes codec "
                        "with endian='big' on a string/binary data type is not supported"
                    )
                return _ArrowAB(kind, large, dtype, utf8_errors)
            return _BytesAB(cfg, dtype, where)
        if name == "packbits":
            return _PackbitsAB(cfg, dtype, where)
        if name in ZARRS_OPTIONAL_NAMES or name == "optional":
            return _OptionalAB(cfg, data_type=data_type, kind=kind, dtype=dtype, shape=shape,
                               utf8_errors=utf8_errors, where=where)
        if name in ZARRS_VLEN_V2_NAMES:  # the numcodecs layout; the data type says str or bytes
            k = kind or ("bytes" if dtype.kind in "OS" else "str")
            if dtype.kind not in "OTUS":
                raise UnsupportedError(f"{_w(where)}: codec {name!r} is read for string and bytes data, not {dtype}")
            return _VlenAB("vlen-bytes" if k == "bytes" else "vlen-utf8", k, dtype, utf8_errors)
        if name in _VLEN_NAMES:
            k = kind or ("bytes" if name == "vlen-bytes" else "str")
            if dtype.kind not in "OTUS":
                raise UnsupportedError(f"{_w(where)}: codec {name!r} cannot store {dtype} data")
            return _VlenAB(name, k, dtype, utf8_errors)
        # zarrs.vlen
        k = kind or ("bytes" if dtype.kind == "O" else "str")
        if dtype.kind not in "OTUS":
            raise UnsupportedError(f"{_w(where)}: codec {name!r} is supported for string and bytes data, not {dtype}")
        n = math.prod(shape) if all(s >= 0 for s in shape) else 0
        return _ZarrsVlenAB(cfg, k, dtype, utf8_errors, where, n)

    def _encoded_size(self, n_bytes: int) -> int:
        size = n_bytes
        for step in self.bb:
            size = step.encoded_size(size)
        return size

    # ---------------------------------------------------------------------------- decoding

    def context(self, key: Any) -> str:
        w = _w(self.where)
        return f"{w} chunk {key}" if key not in (None, "") else w

    def _shapes(self, chunk_shape: tuple[int, ...]) -> list[tuple[int, ...]]:
        shapes = [chunk_shape]
        for step in self.aa:
            shapes.append(step.out_shape(shapes[-1]))
        return shapes

    def bytes_decode(self, raw: Any, ctx: str, *, scratch: bool = False) -> np.ndarray:
        """The bytes->bytes chain undone.  ``scratch``: the last decompressor may write into this
        thread's reused buffer (codecs.bounded_decode); the caller consumes the result first."""
        try:
            u8 = _u8(raw)
        except TypeError:
            raise ChunkError(f"{ctx}: expected the chunk as bytes, got {type(raw).__name__}") from None
        for i, step in enumerate(reversed(self.bb)):
            if scratch and i == len(self.bb) - 1 and isinstance(step, _ZarrBB):
                u8 = step.decode(u8, ctx, scratch=True)
            else:
                u8 = step.decode(u8, ctx)
        return u8

    def decode(self, raw: Any, chunk_shape: tuple[int, ...] | None = None, *, key: Any = None,
               _ctx: str | None = None, region: tuple[slice, ...] | None = None) -> np.ndarray:
        """Stored chunk bytes -> the full chunk (C order, ``chunk_shape``, dtype ``self.dtype``).

        ``key`` (e.g. the store key "c/0/1") only enriches error messages.  ``region``: the part
        of the chunk that will be used; a shard then decodes only the inner chunks it touches.
        """
        shape = self.chunk_shape if chunk_shape is None else tuple(int(s) for s in chunk_shape)
        ctx = _ctx or self.context(key)
        with self.decode_errors(ctx):
            shapes = self._shapes(shape)
            u8 = self.bytes_decode(raw, ctx)
            if self.sharded and not self.aa and region is not None:
                arr = self.ab.decode(u8, shapes[-1], ctx, region=region)
            else:
                arr = self.ab.decode(u8, shapes[-1], ctx)
            for step, s in zip(reversed(self.aa), reversed(shapes[:-1]), strict=True):
                arr = step.decode(arr, s)
            if arr.dtype != self.dtype:
                arr = _to_dtype(arr, self.dtype)
            if not arr.flags.c_contiguous:
                arr = np.ascontiguousarray(arr)
            if _ctx is None and not arr.flags.writeable:  # nested chains skip the copy
                arr = arr.copy()
            return arr

    @contextlib.contextmanager
    def decode_errors(self, ctx: str) -> Iterator[None]:
        """Turn any failure while decoding one chunk into a ChunkError naming ``ctx`` and the codecs
        (our own errors, MemoryError and RecursionError pass through)."""
        try:
            yield
        except (ZStringsError, MemoryError, RecursionError):
            raise
        except Exception as e:
            raise ChunkError(
                f"{ctx}: cannot decode the chunk with codecs {self.codec_names} "
                f"({type(e).__name__}: {e}); the chunk is corrupt or belongs to another array"
            ) from e

    def decode_arrow(self, raw: Any, chunk_shape: tuple[int, ...] | None = None, *, key: Any = None):
        """Variable-length chunk -> flat (C-order) ``pyarrow`` (large_)string/binary array.

        Zero-copy for the Arrow layout (and for zarrs.vlen when the data chain hands back its
        buffer); needs a layout without transpose or sharding.
        """
        ctx = self.context(key)
        if self.kind is None or self.aa or self.sharded:
            raise UnsupportedError(
                f"{_w(self.where)}: decode_arrow needs a variable-length string/bytes chain without "
                f"transpose or sharding; this one is {self.layout!r} ({self.codec_names}); use decode()"
            )
        shape = self.chunk_shape if chunk_shape is None else tuple(chunk_shape)
        try:
            u8 = self.bytes_decode(raw, ctx)
            chunk = self.ab.to_vlen(u8, math.prod(shape), ctx)
            large = getattr(self.ab, "large", False) or chunk.offsets.dtype.itemsize == 8
            return vlen_to_arrow(chunk, kind=self.kind, large=large, what=ctx)
        except ZStringsError:
            raise
        except Exception as e:
            raise ChunkError(f"{ctx}: cannot decode the chunk: {type(e).__name__}: {e}") from e

    # ---------------------------------------------------------------------------- encoding

    def encode(self, arr: Any, *, key: Any = None, write_empty_chunks: bool = False,
               _shape_check: bool = True) -> bytes:
        """A full chunk (``chunk_shape``; pad edge chunks with the fill value) -> stored bytes.

        ``write_empty_chunks=False`` (zarr-python's default) leaves inner chunks of a shard that
        hold only the fill value out of the shard (index entry 2**64-1).
        """
        ctx = self.context(key)
        if isinstance(arr, VlenChunk):  # already packed values (the writer's fast path)
            n = arr.offsets.shape[0] - 1
            if not self.accepts_vlen or n != math.prod(self.chunk_shape):
                raise ZStringsError(
                    f"{ctx}: a packed chunk of {n} values needs a plain variable-length layout with "
                    f"{math.prod(self.chunk_shape)} values per chunk; pass the values as an array"
                )
            u8 = self.ab.encode(arr, ctx)
            for step in self.bb:
                u8 = step.encode(u8, ctx)
            return u8.tobytes()
        a = np.asarray(arr) if not isinstance(arr, np.ndarray) else arr
        if _shape_check and a.shape != self.chunk_shape:
            if a.size == math.prod(self.chunk_shape) and a.ndim <= 1 and len(self.chunk_shape) <= 1:
                a = a.reshape(self.chunk_shape)
            else:
                raise ZStringsError(
                    f"{ctx}: chunk of shape {list(a.shape)} does not match the chunk shape "
                    f"{list(self.chunk_shape)}; Zarr v3 stores edge chunks at full size: pad with the "
                    "fill value first"
                )
        for step in self.aa:
            a = step.encode(a)
        if isinstance(self.ab, _ShardingAB):
            u8 = self.ab.encode(a, ctx, write_empty_chunks)
        else:
            u8 = self.ab.encode(a, ctx)
        for step in self.bb:
            u8 = step.encode(u8, ctx)
        return u8.tobytes()
