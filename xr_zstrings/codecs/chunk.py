"""A chunk as the Zarr v3 codec steps see it: the spec each step is built for, and buffer helpers.

:class:`ChunkSpec` plays the part of zarr-python's ``ArraySpec`` (shape, dtype, fill value) plus what
our decoding needs (the variable-length kind from :func:`classify_data_type`, the UTF-8 policy, the
array path for messages); a pipeline evolves it through the array->array steps.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MetadataError

if TYPE_CHECKING:
    from ..text.vlen import Kind

__all__ = ["ChunkSpec", "as_u8", "classify_data_type", "codec_name_cfg", "default_fill", "label"]

_STR_NAMES = {"string", "str", "utf8", "largestring", "largeutf8", "variablelengthutf8"}
_BYTES_NAMES = {"bytes", "binary", "variablelengthbytes", "largebinary", "largebytes", "vlenbytes"}
_LARGE_NAMES = {"largestring", "largeutf8", "largebinary", "largebytes"}


def label(where: str) -> str:
    """The array path for messages (``<array>`` when unknown)."""
    return where if where else "<array>"


def norm_name(name: str) -> str:
    """A data type name compared without case, ``_`` and ``-`` (``LargeString`` = ``large_string``)."""
    return name.lower().replace("_", "").replace("-", "")


def classify_data_type(data_type: Any, dtype: Any = None) -> tuple[Kind | None, bool]:
    """``(kind, large)`` of a zarr.json ``data_type``: kind "str"/"bytes" for variable-length
    types, None for fixed-width and numeric ones; ``large`` for the 64-bit-offset Arrow variants."""
    name = data_type.get("name") if isinstance(data_type, dict) else data_type
    if isinstance(name, str):
        n = norm_name(name)
        if n in _STR_NAMES:
            return "str", n in _LARGE_NAMES
        if n in _BYTES_NAMES:
            return "bytes", n in _LARGE_NAMES
    if dtype is not None:
        dt = np.dtype(dtype)
        if isinstance(dt, np.dtypes.StringDType):
            return "str", False
    return None, False


def codec_name_cfg(codec: Any, where: str) -> tuple[str, dict]:
    """``(name, configuration)`` of one zarr.json ``codecs`` entry (a bare name is allowed)."""
    if isinstance(codec, str):
        return codec, {}
    if not isinstance(codec, dict) or not isinstance(codec.get("name"), str):
        raise MetadataError(
            f"{label(where)}: invalid codec entry {codec!r}; expected an object with a string 'name' "
            "and an optional 'configuration'"
        )
    cfg = codec.get("configuration") or {}
    if not isinstance(cfg, dict):
        raise MetadataError(f"{label(where)}: codec {codec['name']!r} configuration must be an object, got {cfg!r}")
    return codec["name"], cfg


def as_u8(buf: Any) -> np.ndarray:
    """bytes-like / zarr Buffer / ndarray -> 1-D uint8 view (no copy when possible)."""
    if isinstance(buf, np.ndarray):
        if buf.dtype == np.uint8 and buf.ndim == 1:
            return buf
        return np.ascontiguousarray(buf).reshape(-1).view(np.uint8)
    if hasattr(buf, "as_numpy_array") and not isinstance(buf, (bytes, bytearray, memoryview)):
        return as_u8(buf.as_numpy_array())
    mv = memoryview(buf)
    if not mv.c_contiguous:
        mv = memoryview(mv.tobytes())
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return np.frombuffer(mv, dtype=np.uint8)


def writeable(a: np.ndarray) -> np.ndarray:
    """``a``, copied only when it is a read-only view."""
    return a if a.flags.writeable else a.copy()


def to_dtype(out: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``out`` cast to the pipeline's dtype (an unsized ``U`` keeps the width found)."""
    if out.dtype == dtype:
        return out
    if dtype.kind == "U" and dtype.itemsize == 0:
        return out  # unsized "U": keep the width the conversion chose
    return out.astype(dtype)


def string_dtype_arg(dtype: np.dtype, kind: Kind) -> Any:
    """The ``string_dtype`` argument of text.vlen's decoders for a result of ``dtype``."""
    if kind == "bytes":
        return "O"
    if isinstance(dtype, np.dtypes.StringDType):
        return dtype
    if dtype.kind == "O":
        return "O"
    if dtype.kind == "U":
        return "U"
    return np.dtypes.StringDType()  # e.g. 'S': decode to T, then cast


def check_shape(shape: Any, where: str, what: str = "chunk_shape") -> tuple[int, ...]:
    """``shape`` as a tuple of non-negative ints, else a MetadataError naming ``what``."""
    try:
        t = tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        raise MetadataError(f"{label(where)}: {what} {shape!r} is not a sequence of integers") from None
    if any(s < 0 for s in t):
        raise MetadataError(f"{label(where)}: {what} {t} has a negative extent")
    return t


def default_fill(dtype: np.dtype, kind: Kind | None) -> Any:
    """The fill value of a chain whose metadata gives none: ``""``, ``b""`` or zero."""
    if kind == "bytes":
        return b""
    if kind == "str" or dtype.kind in "TU":
        return ""
    if dtype.kind == "S":
        return b""
    if dtype.kind == "O":
        return ""
    return np.zeros((), dtype)[()]


@dataclass(frozen=True)
class ChunkSpec:
    """What one codec step is built for: the chunk it sees and the reading policy.

    ``dtype``/``shape`` are those of the step's input (after the array->array steps before it);
    ``kind``/``large`` come from :func:`classify_data_type` of ``data_type`` (the zarr.json one).
    ``default_bytes``: a chain without an array->bytes codec gets ``bytes`` (nested index/data
    chains of zarrs' codecs) rather than an error.
    """

    data_type: Any
    dtype: np.dtype
    shape: tuple[int, ...]
    kind: Kind | None = None
    large: bool = False
    fill_value: Any = None
    utf8_errors: str = "strict"
    where: str = ""
    default_bytes: bool = False

    def evolve(self, **changes: Any) -> ChunkSpec:
        """This spec with some fields replaced (the input of the next step)."""
        return dataclasses.replace(self, **changes)
