"""zarr-python's side of the Zarr v3 codecs: imported lazily, its ArraySpecs memoised.

Every codec we do not implement ourselves (compressors, checksums, ``numcodecs.*``, any array->array
or array->bytes codec a package registers with zarr-python) runs through zarr-python, one chunk at a
time (``zarr_compat.run_codec``). zarr-python is imported the first time a chain needs one of its
codecs: plain ``bytes``/``transpose``/vlen/Arrow chains never import it.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from .. import zarr_compat as _zarr_compat
from ..errors import MetadataError
from .chunk import label

__all__ = ["Zarr"]


class Zarr:
    """Lazily imported zarr-python pieces."""

    _loaded = False
    _zdtypes: ClassVar[dict[np.dtype, Any]] = {}
    # set by load(): zarr.registry, the codec base classes, the buffer prototype, the dtype parser
    registry: ClassVar[Any]
    AA: ClassVar[type]
    AB: ClassVar[type]
    BB: ClassVar[type]
    prototype: ClassVar[Any]
    zdtype: ClassVar[Any]

    @classmethod
    def load(cls) -> type[Zarr]:
        """Import zarr-python's registry, codec base classes, buffer prototype and dtype parser once."""
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

    _specs: ClassVar[dict[tuple[tuple[int, ...], np.dtype], Any]] = {}

    @classmethod
    def spec(cls, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        """zarr-python's ArraySpec for a chunk, memoised: zarr's dtype registry lookup is slow enough
        to dominate opening many compressed Zarr v3 variables (docs/performance.md); ArraySpec and
        zarr's dtypes are frozen dataclasses, safe to share."""
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
    def codec_class(cls, name: str) -> Any:
        """The class zarr-python registers under ``name``, or None."""
        z = cls.load()
        try:
            return z.registry.get_codec_class(name)
        except Exception:  # noqa: BLE001 - zarr-python raises KeyError (or an entry point's error)
            return None

    @classmethod
    def parse(cls, codec_cls: Any, name: str, cfg: dict[str, Any], where: str) -> Any:
        """zarr-python's codec object for one ``codecs`` entry; a bad configuration is a MetadataError."""
        try:
            return codec_cls.from_dict({"name": name, "configuration": cfg})
        except Exception as e:  # noqa: BLE001 - third-party codec errors become ChunkError/MetadataError
            raise MetadataError(f"{label(where)}: invalid configuration for codec {name!r}: {e}") from None

    @classmethod
    def run(cls, codec: Any, method: str, data: Any, spec: Any) -> Any:
        """One chunk through one zarr-python codec (its sync fast path where it has one)."""
        return _zarr_compat.run_codec(codec, method, data, spec)
