"""Array -> array codecs: ``transpose`` (numpy), and any other one zarr-python registers.

zarr-python's array->array codecs (``numcodecs.delta``, ``numcodecs.fixedscaleoffset``, ...) are
run through it, for numeric data only: they have no meaning for variable-length strings.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import MetadataError, UnsupportedError, ZStringsError
from .chunk import ChunkSpec, label
from .registry import CodecStep, register
from .zarr_python import Zarr

__all__ = ["TransposeCodec", "ZarrArrayArray"]


@register("transpose")
class TransposeCodec(CodecStep):
    """``transpose``: the chunk is stored with its axes in ``order``."""

    family = "array_array"
    name = "transpose"

    @classmethod
    def from_json(cls, name: str, cfg: dict, spec: ChunkSpec) -> TransposeCodec:
        """The step for one ``codecs`` entry (see registry)."""
        return cls(cfg, len(spec.shape), spec.where)

    def __init__(self, cfg: dict, ndim: int, where: str):
        order: Any = cfg.get("order")
        try:
            order = tuple(int(o) for o in order)
        except (TypeError, ValueError):
            raise MetadataError(f"{label(where)}: transpose order {order!r} is not a list of integers") from None
        if sorted(order) != list(range(ndim)):
            raise MetadataError(
                f"{label(where)}: transpose order {list(order)} is not a permutation of the chunk's "
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


class ZarrArrayArray(CodecStep):
    """Any other array->array codec, through zarr-python (numeric data only)."""

    family = "array_array"

    @classmethod
    def from_json(cls, name: str, cfg: dict, spec: ChunkSpec) -> ZarrArrayArray:
        """zarr-python's codec ``name`` as a step; refused on string and bytes data."""
        codec = Zarr.parse(Zarr.codec_class(name), name, cfg, spec.where)
        if spec.kind is not None or spec.dtype.kind not in "biufcmM":
            raise UnsupportedError(
                f"{label(spec.where)}: the array->array codec {name!r} is not supported on string "
                "or bytes data (only transpose is)"
            )
        return cls(name, codec, spec.shape, spec.dtype, spec.where)

    def __init__(self, name: str, codec: Any, shape: tuple[int, ...], dtype: np.dtype, where: str):
        z = Zarr.load()
        self.name = name
        try:
            self.in_spec = Zarr.spec(shape, dtype)
            self.codec = codec.evolve_from_array_spec(self.in_spec)
            self.out_spec = self.codec.resolve_metadata(self.in_spec)
            self._out_dtype = np.dtype(self.out_spec.dtype.to_native_dtype())
        except ZStringsError:
            raise
        except Exception as e:  # noqa: BLE001 - third-party codec errors become ChunkError/MetadataError
            raise UnsupportedError(f"{label(where)}: codec {name!r} cannot be used on {dtype} chunks: {e}") from None
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
