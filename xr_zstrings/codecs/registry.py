"""The Zarr v3 codec registry: a codec name -> the class that builds its pipeline step.

One class per codec family registers its names with :func:`register` (``transpose``, ``bytes``,
``vlen-utf8``, ``zarrs.vlen``, ``sharding_indexed``, ...); :func:`lookup` gives that class, or for
a name only zarr-python knows (compressors, checksums, ``numcodecs.*``) the adapter class of its
family, and for a name nobody knows an :class:`~xr_zstrings.errors.UnknownCodecError` naming the
codec, the array and the fix. The pipeline (:class:`~.v3.V3Pipeline`) chooses classes only here.

Every codec class derives from :class:`CodecStep`: its ``family`` ("array_array", "array_bytes" or
"bytes_bytes") and ``from_json(name, configuration, spec)`` building its step for a
:class:`~.chunk.ChunkSpec`; it may override ``claims(name, configuration)`` to decline a
configuration meant for another codec of the same name (zarrs' ``optional``) and ``nullable`` when
its chunks hold missing values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

from ..errors import UnknownCodecError, UnsupportedError
from .chunk import label

__all__ = ["FAMILIES", "CodecStep", "find", "lookup", "register", "registered"]

FAMILIES = ("array_array", "array_bytes", "bytes_bytes")


class CodecStep:
    """The base of every codec class: what the pipeline asks of a step, with the common answers."""

    #: "array_array", "array_bytes" or "bytes_bytes"
    family: ClassVar[str] = ""
    #: the codec names the class is registered under (set by ``register``)
    names: ClassVar[tuple[str, ...]] = ()
    #: an array->bytes step that holds inner chunks (``sharding_indexed``)
    sharded: ClassVar[bool] = False
    #: the chunk layout an array->bytes step writes ("numeric", "vlen-utf8", "arrow", ...)
    layout: str = "numeric"
    #: variable-length data with 64-bit offsets (Arrow's large types)
    large: bool = False

    @classmethod
    def from_json(cls, name: str, cfg: dict, spec: Any) -> Any:
        """The step for one ``codecs`` entry of an array whose chunks ``spec`` describes."""
        raise NotImplementedError

    @classmethod
    def claims(cls, name: str, cfg: Any) -> bool:
        """Whether this class reads the codec ``name`` with configuration ``cfg``."""
        return True

    @classmethod
    def nullable(cls, name: str, cfg: Any, where: str) -> bool:
        """Whether the chunks this codec writes hold missing values (a null fill stays None)."""
        return False


_T = TypeVar("_T", bound=type[CodecStep])
_REGISTRY: dict[str, type[CodecStep]] = {}


def register(*names: str) -> Callable[[_T], _T]:
    """Class decorator: the class builds the codecs ``names`` (its ``names`` attribute lists them)."""

    def add(cls: _T) -> _T:
        if not issubclass(cls, CodecStep) or cls.family not in FAMILIES:
            raise TypeError(f"{cls.__name__} must be a CodecStep with family one of {FAMILIES}")
        taken = [n for n in names if _REGISTRY.get(n, cls) is not cls]
        if taken:
            raise ValueError(f"codec name {taken[0]!r} is registered to {_REGISTRY[taken[0]].__name__} already")
        _REGISTRY.update(dict.fromkeys(names, cls))
        cls.names = names
        return cls

    return add


_loaded = False


def _load() -> None:
    # the codec modules register themselves on import (they import this module, hence not at the top)
    global _loaded
    if not _loaded:
        from . import array_array, array_bytes, sharding, zarrs  # noqa: F401 - each registers its codecs

        _loaded = True


def registered() -> dict[str, type[CodecStep]]:
    """Every codec name we implement -> its class (zarr-python's codecs are not listed)."""
    _load()
    return dict(_REGISTRY)


def find(name: str, configuration: Mapping[str, Any] | None = None) -> type[CodecStep] | None:
    """Our class for codec ``name`` (None when we do not implement it or it declines the configuration)."""
    _load()
    cls = _REGISTRY.get(name)
    if cls is not None and cls.claims(name, configuration or {}):
        return cls
    return None


def lookup(name: str, configuration: Mapping[str, Any] | None = None, where: str = "") -> type[CodecStep]:
    """The class building codec ``name`` of the array at ``where``.

    Ours when registered (and it claims ``configuration``), else zarr-python's codec of that name
    through the adapter of its family; an UnknownCodecError when neither knows the name.
    """
    cls = find(name, configuration)
    if cls is not None:
        return cls
    from .array_array import ZarrArrayArray
    from .array_bytes import ZarrArrayBytes
    from .bytes_bytes import ZarrBytesBytes
    from .zarr_python import Zarr

    codec_cls = Zarr.codec_class(name)
    if codec_cls is None:
        ours = ", ".join(sorted(n for n in _REGISTRY if "://" not in n))
        raise UnknownCodecError(
            f"{label(where)}: unknown Zarr v3 codec {name!r}; xr_zstrings reads {ours} and every "
            "codec zarr-python registers. Fix: install the package that registers this codec with "
            "zarr-python (a zarr.codecs entry point, e.g. numcodecs for 'numcodecs.*'), or rewrite "
            "the array with supported codecs"
        )
    z = Zarr.load()
    for base, adapter in ((z.BB, ZarrBytesBytes), (z.AA, ZarrArrayArray), (z.AB, ZarrArrayBytes)):
        if issubclass(codec_cls, base):
            return adapter
    raise UnsupportedError(f"{label(where)}: codec {name!r} is of an unknown kind")  # pragma: no cover
