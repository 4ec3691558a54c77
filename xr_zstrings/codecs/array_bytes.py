"""Array -> bytes codecs: ``bytes``, the Arrow layout, numcodecs' ``vlen-utf8``/``vlen-bytes``,
and any other one zarr-python registers (numeric data only).

A plain ``bytes`` codec (or none) on a variable-length data type is the draft ZEP's Arrow layout;
``zarrs.vlen_v2`` is zarrs' name for the numcodecs layout. zarrs' own codecs are in :mod:`.zarrs`,
sharding in :mod:`.sharding`; see :mod:`.v3` for the layout rule.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import ChunkError, MetadataError, UnsupportedError
from ..text.vlen import (
    Kind,
    VlenChunk,
    decode_arrow_chunk,
    decode_vlen_utf8_chunk,
    decode_vlen_utf8_to_numpy,
    encode_arrow_chunk,
    encode_vlen_utf8_chunk,
    vlen_to_numpy,
)
from .chunk import ChunkSpec, as_u8, label, string_dtype_arg, to_dtype, writeable
from .registry import CodecStep, register
from .zarr_python import Zarr

__all__ = ["ZARRS_VLEN_V2_NAMES", "ArrowLayout", "BytesCodec", "VlenCodec", "ZarrArrayBytes"]

_VLEN_NAMES = ("vlen-utf8", "vlen-bytes")
#: zarrs' name for the numcodecs interleaved layout decoupled from the data type ("the same as
#: vlen-utf8, vlen-array, vlen-bytes from Zarr V2": zarrs' codec/array_to_bytes/vlen_v2 docs)
ZARRS_VLEN_V2_NAMES = ("zarrs.vlen_v2", "https://codec.zarrs.dev/array_to_bytes/vlen_v2")


@register("bytes")
class BytesCodec(CodecStep):
    """The ``bytes`` codec: plain fixed-size element bytes (the Arrow layout on variable-length data)."""

    family = "array_bytes"
    layout = "numeric"

    @classmethod
    def from_json(cls, name: str, cfg: dict, spec: ChunkSpec) -> BytesCodec | ArrowLayout:
        """The step for a ``bytes`` entry: plain bytes, or the Arrow layout for strings and bytes."""
        if spec.kind is not None:
            if cfg.get("endian") == "big":
                raise UnsupportedError(
                    f"{label(spec.where)}: the Arrow layout has little-endian offsets; a bytes codec "
                    "with endian='big' on a string/binary data type is not supported"
                )
            return ArrowLayout(spec.kind, spec.large, spec.dtype, spec.utf8_errors)
        return cls(cfg, spec.dtype, spec.where)

    def __init__(self, cfg: dict, dtype: np.dtype, where: str):
        endian = cfg.get("endian")
        if endian not in (None, "little", "big"):
            raise MetadataError(f"{label(where)}: bytes codec endian={endian!r}; expected 'little' or 'big'")
        if dtype.kind in "OT" or dtype.itemsize == 0:
            raise UnsupportedError(f"{label(where)}: the bytes codec cannot store {dtype} elements")
        if dtype.kind in "SV" or dtype.itemsize == 1:
            stored = dtype
        else:
            if endian is None and dtype.kind == "U":
                endian = "little"  # zarr-python always writes it; be lenient when absent
            if endian is None:
                raise MetadataError(
                    f"{label(where)}: the bytes codec needs an 'endian' configuration for the "
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


@register(*_VLEN_NAMES, *ZARRS_VLEN_V2_NAMES)
class VlenCodec(CodecStep):
    """numcodecs ``vlen-utf8`` / ``vlen-bytes`` (also under zarrs' name ``zarrs.vlen_v2``)."""

    family = "array_bytes"

    @classmethod
    def from_json(cls, name: str, cfg: dict, spec: ChunkSpec) -> VlenCodec:
        """The step for a vlen entry; text or bytes from the data type, else from the name."""
        dtype = spec.dtype
        if name in ZARRS_VLEN_V2_NAMES:  # the numcodecs layout; the data type says str or bytes
            k = spec.kind or ("bytes" if dtype.kind in "OS" else "str")
            if dtype.kind not in "OTUS":
                raise UnsupportedError(
                    f"{label(spec.where)}: codec {name!r} is read for string and bytes data, not {dtype}")
            return cls("vlen-bytes" if k == "bytes" else "vlen-utf8", k, dtype, spec.utf8_errors)
        k = spec.kind or ("bytes" if name == "vlen-bytes" else "str")
        if dtype.kind not in "OTUS":
            raise UnsupportedError(f"{label(spec.where)}: codec {name!r} cannot store {dtype} data")
        return cls(name, k, dtype, spec.utf8_errors)

    def __init__(self, name: str, kind: Kind, dtype: np.dtype, utf8_errors: str):
        self.layout = name
        self.kind = kind
        self.dtype = dtype
        self.sd = string_dtype_arg(dtype, kind)
        self.utf8_errors = utf8_errors

    def decode(self, u8: np.ndarray, shape: tuple[int, ...], ctx: str) -> np.ndarray:
        out = decode_vlen_utf8_to_numpy(
            u8, math.prod(shape), kind=self.kind, string_dtype=self.sd,
            utf8_errors=self.utf8_errors, shape=shape, what=ctx,
        )
        return to_dtype(out, self.dtype)

    def to_vlen(self, u8: np.ndarray, n: int, ctx: str) -> VlenChunk:
        return decode_vlen_utf8_chunk(u8, n, what=ctx)

    def to_arrow(self, u8: np.ndarray, shape: tuple[int, ...], ctx: str, policy: str) -> Any:
        """A chunk's values as a large_string/large_binary array (the frames compacted once)."""
        from ..text.arrow import vlen_frames_to_arrow

        return vlen_frames_to_arrow(u8, math.prod(shape), kind=self.kind, policy=policy, what=ctx)

    def encode(self, arr: np.ndarray, ctx: str) -> np.ndarray:
        return as_u8(encode_vlen_utf8_chunk(arr, kind=self.kind, what=ctx))


def offsets_arrow(chunk: VlenChunk, kind: Kind, ctx: str, policy: str) -> Any:
    """Offsets + data (Arrow's layout, zarrs' index) as a large_string/large_binary array, the
    data not copied, UTF-8 validated once under ``policy``."""
    from ..text.arrow import offsets_to_arrow

    off = chunk.offsets
    if not off.flags.aligned:  # (a view into the chunk's bytes at an odd place: zarrs' index)
        off = np.array(off, dtype=off.dtype.newbyteorder("="), order="C")
    return offsets_to_arrow(off, chunk.data, kind=kind, policy=policy, what=ctx)


class ArrowLayout(CodecStep):
    """The draft ZEP Arrow layout (int32 offsets, or int64 for the large variants).

    Not a codec name: what ``bytes`` (or no array->bytes codec) means on a variable-length data type.
    """

    family = "array_bytes"

    def __init__(self, kind: Kind, large: bool, dtype: np.dtype, utf8_errors: str):
        self.layout = "arrow-large" if large else "arrow"
        self.kind, self.large, self.dtype = kind, large, dtype
        self.sd = string_dtype_arg(dtype, kind)
        self.utf8_errors = utf8_errors

    def to_vlen(self, u8: np.ndarray, n: int, ctx: str) -> VlenChunk:
        return decode_arrow_chunk(u8, n, large=self.large, what=ctx)

    def to_arrow(self, u8: np.ndarray, shape: tuple[int, ...], ctx: str, policy: str) -> Any:
        """A chunk's values as a large_string/large_binary array around its data (zero-copy)."""
        return offsets_arrow(self.to_vlen(u8, math.prod(shape), ctx), self.kind, ctx, policy)

    def decode(self, u8: np.ndarray, shape: tuple[int, ...], ctx: str) -> np.ndarray:
        chunk = self.to_vlen(u8, math.prod(shape), ctx)
        out = vlen_to_numpy(chunk, kind=self.kind, string_dtype=self.sd, utf8_errors=self.utf8_errors, what=ctx, shape=shape)
        return to_dtype(out, self.dtype)

    def encode(self, arr: np.ndarray, ctx: str) -> np.ndarray:
        return as_u8(encode_arrow_chunk(arr, large=self.large, binary=self.kind == "bytes", what=ctx))


class ZarrArrayBytes(CodecStep):
    """Any other array->bytes codec zarr-python registers (numeric data only)."""

    family = "array_bytes"
    layout = "numeric"

    @classmethod
    def from_json(cls, name: str, cfg: dict, spec: ChunkSpec) -> ZarrArrayBytes:
        """zarr-python's codec ``name`` as a step; refused on variable-length strings."""
        codec = Zarr.parse(Zarr.codec_class(name), name, cfg, spec.where)
        if spec.kind is not None:
            raise UnsupportedError(
                f"{label(spec.where)}: the array->bytes codec {name!r} cannot store variable-length "
                "strings; use vlen-utf8, vlen-bytes, zarrs.vlen or the Arrow layout"
            )
        return cls(name, codec, spec.shape, spec.dtype, spec.where)

    def __init__(self, name: str, codec: Any, shape: tuple[int, ...], dtype: np.dtype, where: str):
        self.name = name
        if dtype.kind not in "biufcmM":
            raise UnsupportedError(
                f"{label(where)}: the array->bytes codec {name!r} is not supported for {dtype} data; "
                "strings need vlen-utf8, vlen-bytes, zarrs.vlen or the Arrow layout"
            )
        try:
            self.spec = Zarr.spec(shape, dtype)
            self.codec = codec.evolve_from_array_spec(self.spec)
        except Exception as e:  # noqa: BLE001 - third-party codec errors become ChunkError/MetadataError
            raise MetadataError(f"{label(where)}: invalid {name!r} codec configuration: {e}") from None
        self.dtype = dtype

    def decode(self, u8: np.ndarray, shape: tuple[int, ...], ctx: str) -> np.ndarray:
        z = Zarr
        try:
            spec = self.spec if shape == tuple(self.spec.shape) else Zarr.spec(shape, self.dtype)
            nd = z.run(self.codec, "decode", z.prototype.buffer.from_array_like(u8), spec)
            return writeable(nd.as_numpy_array().reshape(shape))
        except Exception as e:  # noqa: BLE001 - third-party codec errors become ChunkError/MetadataError
            raise ChunkError(f"{ctx}: the {self.name!r} codec failed to decode: {type(e).__name__}: {e}") from None

    def encode(self, arr: np.ndarray, ctx: str) -> np.ndarray:
        z = Zarr
        spec = self.spec if arr.shape == tuple(self.spec.shape) else Zarr.spec(arr.shape, self.dtype)
        nd = z.prototype.nd_buffer.from_numpy_array(np.ascontiguousarray(arr))
        return as_u8(z.run(self.codec, "encode", nd, spec))
