"""zarrs' array -> bytes codecs: ``zarrs.vlen``, ``zarrs.optional`` and the ``packbits`` masks.

``zarrs.vlen`` and ``zarrs.optional`` hold nested codec chains (index/data, mask/data), built
recursively as :class:`~.v3.V3Pipeline` objects. zarr-python implements none of these.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import ChunkError, MetadataError, UnsupportedError, ZStringsError
from ..text.vlen import (
    Kind,
    VlenChunk,
    decode_offsets_index,
    join_zarrs_vlen,
    split_zarrs_vlen,
    values_to_vlen,
    vlen_to_numpy,
)
from .chunk import ChunkSpec, as_u8, label, string_dtype_arg, to_dtype
from .registry import CodecStep, register

__all__ = ["ZARRS_OPTIONAL_NAMES", "ZARRS_VLEN_NAMES", "PackbitsCodec", "ZarrsOptionalCodec", "ZarrsVlenCodec"]

ZARRS_VLEN_NAMES = ("zarrs.vlen", "https://codec.zarrs.dev/array_to_bytes/vlen")
# zarrs' nullable-data codec; plain "optional" only with zarrs' configuration (mask_codecs), since
# zarr-extensions also drafts an unrelated "optional" codec (per-chunk codec switching)
ZARRS_OPTIONAL_NAMES = ("zarrs.optional", "https://codec.zarrs.dev/array_to_bytes/optional")


def _pipeline() -> Any:
    from .v3 import V3Pipeline  # the nested chains are pipelines (v3 imports this module)

    return V3Pipeline


@register(*ZARRS_VLEN_NAMES)
class ZarrsVlenCodec(CodecStep):
    """The zarrs ``vlen`` codec, with its index and data chains built as nested pipelines."""

    family = "array_bytes"
    layout = "zarrs.vlen"

    @classmethod
    def from_json(cls, name: str, cfg: dict, spec: ChunkSpec) -> ZarrsVlenCodec:
        """The step for a zarrs.vlen entry; text or bytes from the data type (object: bytes)."""
        dtype, shape = spec.dtype, spec.shape
        k = spec.kind or ("bytes" if dtype.kind == "O" else "str")
        if dtype.kind not in "OTUS":
            raise UnsupportedError(
                f"{label(spec.where)}: codec {name!r} is supported for string and bytes data, not {dtype}")
        n = math.prod(shape) if all(s >= 0 for s in shape) else 0
        return cls(cfg, k, dtype, spec.utf8_errors, spec.where, n)

    def __init__(self, cfg: dict, kind: Kind, dtype: np.dtype, utf8_errors: str, where: str, n: int):
        idt = cfg.get("index_data_type")
        if idt not in ("uint32", "uint64"):
            raise (MetadataError if idt is None else UnsupportedError)(
                f"{label(where)}: zarrs.vlen index_data_type={idt!r}; expected 'uint32' or 'uint64'"
            )
        loc = cfg.get("index_location", "start")  # configuration v0.0 has none and means start
        if loc not in ("start", "end"):
            raise UnsupportedError(f"{label(where)}: zarrs.vlen index_location={loc!r}; expected 'start' or 'end'")
        for key in ("index_codecs", "data_codecs"):
            if not isinstance(cfg.get(key), list):
                raise MetadataError(
                    f"{label(where)}: zarrs.vlen configuration needs a list {key!r}, got {cfg.get(key)!r}"
                )
        self.kind, self.dtype, self.utf8_errors = kind, dtype, utf8_errors
        self.sd = string_dtype_arg(dtype, kind)
        self.index_data_type, self.index_location = idt, loc
        self.index = _pipeline().from_metadata(
            cfg["index_codecs"], data_type=idt, dtype=np.dtype(idt), chunk_shape=(n + 1,),
            where=f"{label(where)} zarrs.vlen index_codecs", default_bytes=True,
        )
        self.data = _pipeline().from_metadata(
            cfg["data_codecs"], data_type="uint8", dtype=np.dtype("uint8"), chunk_shape=(-1,),
            where=f"{label(where)} zarrs.vlen data_codecs", default_bytes=True,
        )

    def to_vlen(self, u8: np.ndarray, n: int, ctx: str) -> VlenChunk:
        ib, db = split_zarrs_vlen(u8, self.index_location, what=ctx)
        offsets = self.index.decode(ib, (n + 1,), key=ctx, context=f"{ctx} (zarrs.vlen index)", writeable=False)
        if len(db) == 0:
            data = np.zeros(0, np.uint8)  # zarrs skips the data codecs for empty data
        else:
            data = self.data.decode(db, (-1,), key=ctx, context=f"{ctx} (zarrs.vlen data)", writeable=False)
        offsets = decode_offsets_index(offsets, n, self.index_data_type, data_len=int(data.size), what=ctx)
        return VlenChunk(offsets, data)

    def to_arrow(self, u8: np.ndarray, shape: tuple[int, ...], ctx: str, policy: str) -> Any:
        """A chunk's values as a large_string/large_binary array around the decoded data."""
        from .array_bytes import offsets_arrow

        return offsets_arrow(self.to_vlen(u8, math.prod(shape), ctx), self.kind, ctx, policy)

    def decode(self, u8: np.ndarray, shape: tuple[int, ...], ctx: str) -> np.ndarray:
        chunk = self.to_vlen(u8, math.prod(shape), ctx)
        out = vlen_to_numpy(chunk, kind=self.kind, string_dtype=self.sd, utf8_errors=self.utf8_errors, what=ctx, shape=shape)
        return to_dtype(out, self.dtype)

    def encode(self, arr: np.ndarray, ctx: str) -> np.ndarray:
        chunk = values_to_vlen(arr, kind=self.kind, what=ctx)
        off = chunk.offsets.astype(np.int64, copy=False)
        base, end = int(off[0]), int(off[-1])
        off = off - base
        if end - base > np.iinfo(self.index_data_type).max:
            raise ZStringsError(f"{ctx}: {end - base} bytes of data do not fit index_data_type='uint32'; use 'uint64'")
        ib = self.index.encode(off.astype(self.index_data_type), check_shape=False)
        data = np.ascontiguousarray(chunk.data[base:end])
        db = self.data.encode(data, check_shape=False) if data.size else b""
        return as_u8(join_zarrs_vlen(ib, db, self.index_location))


@register("packbits")
class PackbitsCodec(CodecStep):
    """The zarr-extensions ``packbits`` codec for ``bool`` data (zarrs' optional-codec masks).

    Element ``i`` is bit ``i % 8`` (least significant first) of byte ``i // 8``, zero-padded to a
    whole byte; ``padding_encoding`` "first_byte"/"last_byte" adds one byte holding the number of
    padding bits. zarr-python has no packbits codec, hence this one (numpy's packbits does the bits).
    """

    family = "array_bytes"
    layout = "numeric"

    @classmethod
    def from_json(cls, name: str, cfg: dict, spec: ChunkSpec) -> PackbitsCodec:
        """The step for a packbits entry (bool data only)."""
        return cls(cfg, spec.dtype, spec.where)

    def __init__(self, cfg: dict, dtype: np.dtype, where: str):
        if dtype != np.dtype(bool):
            raise UnsupportedError(f"{label(where)}: the packbits codec is read for bool data only, not {dtype}")
        pad = cfg.get("padding_encoding", "none")
        if pad not in ("none", "first_byte", "last_byte"):
            raise MetadataError(
                f"{label(where)}: packbits padding_encoding={pad!r}; expected 'none', 'first_byte' or 'last_byte'"
            )
        if cfg.get("first_bit") not in (None, 0) or cfg.get("last_bit") not in (None, 0):
            raise MetadataError(f"{label(where)}: packbits first_bit/last_bit must be 0 (or absent) for bool")
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


@register(*ZARRS_OPTIONAL_NAMES, "optional")
class ZarrsOptionalCodec(CodecStep):
    """zarrs' ``zarrs.optional`` codec for its nullable ``optional`` data type (string and bytes).

    A chunk is ``u64le mask_len, u64le data_len``, the validity mask (a bool array of the chunk's
    shape, 1 = present) through ``mask_codecs``, then only the present values, in C order, as a
    1-D array of the inner data type through ``data_codecs`` (nothing when none is present).
    Missing elements decode to None in an object array. (zarrs 0.23 optional_codec.rs; the data
    type is the zarr-extensions draft "optional"; see tests/golden_chunks/README.md.)
    """

    family = "array_bytes"
    layout = "zarrs.optional"

    @classmethod
    def claims(cls, name: str, cfg: Any) -> bool:
        """Plain ``optional`` is ours only with zarrs' configuration (mask_codecs)."""
        return name in ZARRS_OPTIONAL_NAMES or (isinstance(cfg, dict) and "mask_codecs" in cfg)

    @classmethod
    def nullable(cls, name: str, cfg: Any, where: str) -> bool:
        """A chain with this codec holds missing values (a null fill value stays None)."""
        return cls.claims(name, cfg)

    @classmethod
    def from_json(cls, name: str, cfg: dict, spec: ChunkSpec) -> ZarrsOptionalCodec:
        """The step for a zarrs.optional entry (string and bytes data)."""
        return cls(cfg, data_type=spec.data_type, kind=spec.kind, dtype=spec.dtype, shape=spec.shape,
                   utf8_errors=spec.utf8_errors, where=spec.where)

    def __init__(self, cfg: dict, *, data_type: Any, kind: Kind | None, dtype: np.dtype, shape: tuple[int, ...],
                 utf8_errors: str, where: str):
        if kind is None:
            raise UnsupportedError(
                f"{label(where)}: zarrs.optional is read for string and bytes data; the inner data type "
                f"is {data_type!r}"
            )
        for key in ("mask_codecs", "data_codecs"):
            if not isinstance(cfg.get(key), list):
                raise MetadataError(f"{label(where)}: zarrs.optional configuration needs a list {key!r}, got {cfg.get(key)!r}")
        self.kind, self.dtype, self.shape = kind, dtype, shape
        self.mask = _pipeline().from_metadata(
            cfg["mask_codecs"], data_type="bool", dtype=np.dtype(bool), chunk_shape=shape,
            where=f"{label(where)} zarrs.optional mask_codecs", default_bytes=True)
        n = math.prod(shape) if all(x >= 0 for x in shape) else 0
        self.data = _pipeline().from_metadata(
            cfg["data_codecs"], data_type=data_type, dtype=np.dtype(object), chunk_shape=(n,),
            where=f"{label(where)} zarrs.optional data_codecs", utf8_errors=utf8_errors)
        self.utf8_errors = utf8_errors

    def _split(self, u8: np.ndarray, shape: tuple[int, ...], ctx: str) -> tuple[np.ndarray, np.ndarray, int]:
        """(the validity mask, the data bytes, the number of values present) of one chunk."""
        if u8.size < 16:
            raise ChunkError(f"{ctx}: a zarrs.optional chunk starts with two u64 lengths; got {u8.size} bytes")
        mask_len, data_len = (int(x) for x in u8[:16].view("<u8"))
        if 16 + mask_len + data_len != u8.size:
            raise ChunkError(
                f"{ctx}: zarrs.optional header says {mask_len} mask + {data_len} data bytes after the "
                f"16-byte header, but the chunk is {u8.size} bytes"
            )
        mask = self.mask.decode(u8[16 : 16 + mask_len], shape, context=f"{ctx} (zarrs.optional mask)", writeable=False)
        mask = np.asarray(mask, dtype=bool)
        n_valid = int(mask.sum())
        if not n_valid and data_len:
            raise ChunkError(f"{ctx}: zarrs.optional mask has no present value but {data_len} data bytes follow")
        return mask, u8[16 + mask_len :], n_valid

    def decode(self, u8: np.ndarray, shape: tuple[int, ...], ctx: str) -> np.ndarray:
        mask, data, n_valid = self._split(u8, shape, ctx)
        out = np.full(shape, None, dtype=object)
        if n_valid:
            values = self.data.decode(data, (n_valid,), context=f"{ctx} (zarrs.optional data)", writeable=False)
            out[mask] = values.reshape(-1)
        return out

    def to_arrow(self, u8: np.ndarray, shape: tuple[int, ...], ctx: str, policy: str) -> Any:
        """A chunk's values as a large_string/large_binary array, the missing ones null (the
        present values' data not copied)."""
        import pyarrow as pa

        from ..text.arrow import offsets_to_arrow

        mask, data, n_valid = self._split(u8, shape, ctx)
        valid = mask.reshape(-1)
        if not n_valid:
            return pa.nulls(valid.size, pa.large_binary() if self.kind == "bytes" else pa.large_string())
        values = self.data.decode_arrow(data, (n_valid,), policy=policy, context=f"{ctx} (zarrs.optional data)")
        off = np.frombuffer(values.buffers()[1], np.int64)[values.offset : values.offset + n_valid + 1]
        lengths = np.zeros(valid.size, np.int64)
        lengths[valid] = np.diff(off)
        full = np.empty(valid.size + 1, np.int64)
        full[0] = off[0]
        np.cumsum(lengths, out=full[1:])
        full[1:] += off[0]
        # (already validated under the policy: strict cannot fail nor report again)
        buf = values.buffers()[2]
        return offsets_to_arrow(full, np.zeros(0, np.uint8) if buf is None else np.frombuffer(buf, np.uint8), kind=self.kind,
                                valid=valid, policy="strict", what=ctx)

    def encode(self, arr: np.ndarray, ctx: str) -> np.ndarray:
        a = np.asarray(arr, dtype=object)
        valid = ~np.asarray(_isnull(a), dtype=bool)
        mb = np.frombuffer(self.mask.encode(valid, check_shape=False), np.uint8)
        present = a[valid].reshape(-1)
        db = np.frombuffer(self.data.encode(present, check_shape=False), np.uint8) if present.size else \
            np.zeros(0, np.uint8)
        head = np.array([mb.size, db.size], "<u8").view(np.uint8)
        return np.concatenate([head, mb, db])


def _isnull(a: np.ndarray) -> np.ndarray:
    """None, NaN (and pandas' NA) elements of an object array."""
    flat = a.reshape(-1).tolist()
    return np.fromiter((v is None or (isinstance(v, float) and math.isnan(v)) or type(v).__name__ == "NAType"
                        for v in flat), bool, len(flat)).reshape(a.shape)
