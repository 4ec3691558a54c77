"""zarr-python codecs for zarrs' string layouts: ``zarrs.vlen``, ``zarrs.vlen_v2``, ``zarrs.optional``.

Each class is a thin zarr-python ``ArrayBytesCodec`` around the package's own codec step
(``codecs.zarrs``, ``codecs.array_bytes``), built as a one-codec ``V3Pipeline`` for each chunk spec
zarr-python hands in: the bytes decode and encode exactly as engine="zstrings" reads and
``to_zarr_v3`` writes them (the same kernels, nested index/data/mask chains included), with
engine="zstrings"' default UTF-8 policy (``"drop"``: a value cut inside a character loses the
incomplete character, with a ``StringDecodeWarning``).

What zarr-python itself refuses is not worked around here: it accepts a ``string`` array only with
a codec whose class is named ``VLenUTF8Codec`` (``zarr.core.metadata.v3.validate_codecs``), so
``string`` + ``zarrs.vlen`` / ``zarrs.vlen_v2`` stays unreadable there (``bytes`` + either codec,
and ``zarrs.optional`` over both, read); the plugin table of docs/guide.md (with the zarr versions
checked) and ``tests/zarr_plugin`` pin each refusal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from zarr.abc.codec import ArrayBytesCodec

from ..codecs.array_bytes import ZARRS_VLEN_V2_NAMES
from ..codecs.chunk import as_u8
from ..codecs.v3 import V3Pipeline
from ..codecs.zarrs import ZARRS_OPTIONAL_NAMES, ZARRS_VLEN_NAMES
from .dtypes import MISSING, ZarrsOptional

__all__ = ["CODEC_NAMES", "ZarrsOptionalCodec", "ZarrsVlenCodec", "ZarrsVlenV2Codec"]

#: the UTF-8 policy of engine="zstrings"' default read
UTF8_ERRORS = "drop"


def _freeze(value: Any) -> Any:
    """A hashable copy of a JSON configuration (the codec objects are frozen dataclasses)."""
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("__list__", *(_freeze(v) for v in value))
    return value


def _thaw(value: Any) -> Any:
    if isinstance(value, tuple) and value[:1] == ("__list__",):
        return [_thaw(v) for v in value[1:]]
    if isinstance(value, tuple):
        return {k: _thaw(v) for k, v in value}
    return value


@dataclass(frozen=True)
class _WrappedCodec(ArrayBytesCodec):
    """One of our array->bytes codec steps as a zarr-python codec (name and configuration kept)."""

    #: the names this class answers to (the first is written by default)
    names: ClassVar[tuple[str, ...]] = ()
    name: str = ""
    config: Any = ()
    _pipelines: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        name = data.get("name")
        if name not in cls.names:
            raise ValueError(f"{cls.__name__} reads codecs named {cls.names}, got {name!r}")
        cfg = data.get("configuration") or {}
        if not isinstance(cfg, dict):
            raise ValueError(f"codec {name!r}: configuration must be an object, got {cfg!r}")  # noqa: TRY004 - zarr-python's own from_dict raises ValueError
        cls.check(name, cfg)
        return cls(name=name, config=_freeze(cfg))

    @classmethod
    def check(cls, name: str, cfg: dict) -> None:
        """Refuse a configuration the codec cannot read (the pipeline checks the rest per chunk spec)."""

    @property
    def configuration(self) -> dict[str, Any]:
        return _thaw(self.config)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "configuration": self.configuration}

    def evolve_from_array_spec(self, array_spec: Any) -> Any:
        self._pipeline(array_spec)  # a configuration that cannot hold this data type fails now
        return self

    def _pipeline(self, spec: Any) -> V3Pipeline:
        """Our one-codec pipeline for chunks of ``spec`` (memoised per shape and data type)."""
        key = (tuple(spec.shape), spec.dtype)
        found = self._pipelines.get(key)
        if found is None:
            data_type, dtype = self.data_type(spec.dtype)
            found = V3Pipeline.from_metadata(
                [self.to_dict()], data_type=data_type, dtype=dtype, chunk_shape=tuple(spec.shape),
                utf8_errors=UTF8_ERRORS, where=f"zarr-python {self.name!r} codec")
            if len(self._pipelines) < 64:
                self._pipelines[key] = found
        return found

    @staticmethod
    def data_type(zdtype: Any) -> tuple[Any, np.dtype]:
        """(the data type JSON our pipeline classifies, the numpy dtype chunks decode to)."""
        return zdtype.to_json(zarr_format=3), np.dtype(zdtype.to_native_dtype())

    def _decode_sync(self, chunk_bytes: Any, chunk_spec: Any) -> Any:
        arr = self._pipeline(chunk_spec).decode(as_u8(chunk_bytes), tuple(chunk_spec.shape))
        return chunk_spec.prototype.nd_buffer.from_numpy_array(arr)

    async def _decode_single(self, chunk_bytes: Any, chunk_spec: Any) -> Any:
        return self._decode_sync(chunk_bytes, chunk_spec)

    def _encode_sync(self, chunk_array: Any, chunk_spec: Any) -> Any:
        arr = np.ascontiguousarray(chunk_array.as_numpy_array())
        return chunk_spec.prototype.buffer.from_bytes(self._pipeline(chunk_spec).encode(arr))

    async def _encode_single(self, chunk_array: Any, chunk_spec: Any) -> Any:
        return self._encode_sync(chunk_array, chunk_spec)

    def compute_encoded_size(self, input_byte_length: int, chunk_spec: Any) -> int:
        raise NotImplementedError(f"{self.name}: the encoded size of variable-length data is not known ahead")


@dataclass(frozen=True)
class ZarrsVlenCodec(_WrappedCodec):
    """zarrs' ``zarrs.vlen`` (index + data, each through its own codec chain)."""

    names: ClassVar[tuple[str, ...]] = ZARRS_VLEN_NAMES


@dataclass(frozen=True)
class ZarrsVlenV2Codec(_WrappedCodec):
    """zarrs' ``zarrs.vlen_v2``: numcodecs' interleaved vlen layout on any variable-length type."""

    names: ClassVar[tuple[str, ...]] = ZARRS_VLEN_V2_NAMES


@dataclass(frozen=True)
class ZarrsOptionalCodec(_WrappedCodec):
    """zarrs' ``zarrs.optional``: a validity mask and the present values, each through a codec chain."""

    #: zarrs' names only: zarr-extensions drafts an unrelated codec called plain "optional", which
    #: zarr-python must stay free to register (engine="zstrings" reads zarrs' "optional" by its
    #: configuration, codecs/zarrs.py)
    names: ClassVar[tuple[str, ...]] = ZARRS_OPTIONAL_NAMES

    @classmethod
    def check(cls, name: str, cfg: dict) -> None:
        if "mask_codecs" not in cfg:
            raise ValueError(f"codec {name!r} without 'mask_codecs' is not zarrs' optional codec; "
                             "xr_zstrings reads zarrs' (mask_codecs and data_codecs)")

    def _decode_sync(self, chunk_bytes: Any, chunk_spec: Any) -> Any:
        arr = self._pipeline(chunk_spec).decode(as_u8(chunk_bytes), tuple(chunk_spec.shape))
        arr[np.equal(arr, None)] = MISSING  # as in a never-written chunk (ZarrsOptional.MISSING)
        return chunk_spec.prototype.nd_buffer.from_numpy_array(arr)

    @staticmethod
    def data_type(zdtype: Any) -> tuple[Any, np.dtype]:
        if not isinstance(zdtype, ZarrsOptional):
            raise ValueError(f"the zarrs.optional codec is read for zarrs' optional data type, not {zdtype}")  # noqa: TRY004 - as zarr-python's codecs refuse a data type
        return zdtype.inner, np.dtype(object)


#: every codec name the plugin registers -> its class
CODEC_NAMES: dict[str, type[_WrappedCodec]] = {
    n: cls for cls in (ZarrsVlenCodec, ZarrsVlenV2Codec, ZarrsOptionalCodec) for n in cls.names}
