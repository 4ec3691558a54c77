"""The Zarr v3 string layouts ``to_zarr_v3`` writes: one row each, with what each needs.

Per layout: its name (``to_zarr_v3(layout=...)``, ``zstrings convert --layout``), the chunk
layouts its arrays' pipelines report (``V3Pipeline.layout``: text and bytes), the ``data_type`` and
array->bytes codec it writes into zarr.json, the codec class whose ``encode`` is its write kernel
(packed values -> chunk bytes; ``decode``/``to_vlen`` read it), the read kernel that decodes a
chunk straight into a ``StringDType`` view, and whether zarr-python reads it. The writer
(write/zarr3.py), the pipeline (codecs/v3.py), the chunk reader (read/chunked_v3.py), the CLI
(cli/convert.py) and the docs test all ask this table.

A new layout is one row here, its codec class (registered in :mod:`.registry`), its kernels in
text/ when its framing is new, and its tests. (A new ``data_type`` name also goes into
formats/zarr3.py, which parses data types below this layer.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ZStringsError
from ..text import vlen
from ..text.vlen import Kind
from .array_bytes import ArrowLayout, VlenCodec
from .registry import CodecStep
from .zarrs import ZarrsVlenCodec

__all__ = ["LAYOUT_NAMES", "V3_LAYOUTS", "VARIABLE_LENGTH", "V3Layout", "layout_named", "of_chunks"]

#: the read kernel: (the array->bytes step, a chunk's decoded bytes, the view, the selection in it or
#: None for all, the number of values, the context errors name) -> the values written into the view;
#: False (nothing written) without the compiled kernels, as the chunk reader knows (``can_read_into``)
ReadInto = Callable[[Any, np.ndarray, np.ndarray, "np.ndarray | None", int, str], bool]


def _numcodecs_into(step: Any, u8: np.ndarray, view: np.ndarray, sel: np.ndarray | None, n: int, ctx: str) -> bool:
    """numcodecs' interleaved lengths decoded straight into the view (no offsets array)."""
    return vlen.decode_vlen_utf8_into(u8, view, sel, n, utf8_errors=step.utf8_errors, what=ctx)


def _offsets_into(step: Any, u8: np.ndarray, view: np.ndarray, sel: np.ndarray | None, n: int, ctx: str) -> bool:
    """Offsets + data (the step's ``to_vlen``: zarrs' index, Arrow's offsets) into the view."""
    return vlen.vlen_into(step.to_vlen(u8, n, ctx), view, sel, utf8_errors=step.utf8_errors, what=ctx)


def _vlen_utf8_metadata(kind: Kind, options: Mapping[str, Any]) -> tuple[Any, list[dict[str, Any]]]:
    name = "vlen-utf8" if kind == "str" else "vlen-bytes"
    return ("string" if kind == "str" else "variable_length_bytes"), [{"name": name, "configuration": {}}]


def _zarrs_vlen_metadata(kind: Kind, options: Mapping[str, Any]) -> tuple[Any, list[dict[str, Any]]]:
    config = {
        "data_codecs": [dict(c) for c in (options.get("data_codecs") or [{"name": "bytes"}])],
        "index_codecs": [dict(c) for c in (options.get("index_codecs") or
                                            [{"name": "bytes", "configuration": {"endian": "little"}}])],
        "index_data_type": options.get("index_data_type", "uint32"),
        "index_location": options.get("index_location", "end"),
    }
    return ("string" if kind == "str" else "bytes"), [{"name": "zarrs.vlen", "configuration": config}]


def _arrow_metadata(large: bool) -> Callable[[Kind, Mapping[str, Any]], tuple[Any, list[dict[str, Any]]]]:
    def metadata(kind: Kind, options: Mapping[str, Any]) -> tuple[Any, list[dict[str, Any]]]:
        base = "string" if kind == "str" else "binary"
        # the v3 spec wants one array->bytes codec: a plain "bytes" codec marks the Arrow layout
        return {"name": f"large_{base}" if large else base}, [{"name": "bytes"}]

    return metadata


@dataclass(frozen=True)
class V3Layout:
    """One Zarr v3 string layout and what writing and reading it needs."""

    name: str
    title: str
    #: ``V3Pipeline.layout`` of its arrays holding text, and holding bytes
    chunk_layouts: tuple[str, str]
    #: (kind, the writer's options) -> (``data_type``, the array->bytes codec entries; compressors follow)
    metadata: Callable[[Kind, Mapping[str, Any]], tuple[Any, list[dict[str, Any]]]]
    #: the codec class whose ``encode`` is the write kernel (packed values -> chunk bytes)
    codec: type[CodecStep]
    #: the read kernel straight into a ``StringDType`` view
    read_into: ReadInto
    #: zarr-python reads (and writes) it: ``compressors=None`` then means zarr-python's default
    zarr_python: bool = False


V3_LAYOUTS: tuple[V3Layout, ...] = (
    V3Layout("vlen-utf8", "zarr-python's own (numcodecs' interleaved lengths)", ("vlen-utf8", "vlen-bytes"),
             _vlen_utf8_metadata, VlenCodec, _numcodecs_into, zarr_python=True),
    V3Layout("zarrs.vlen", "zarrs' codec (an offsets index and the data, each with its own codecs)",
             ("zarrs.vlen", "zarrs.vlen"), _zarrs_vlen_metadata, ZarrsVlenCodec, _offsets_into),
    V3Layout("arrow", "the draft ZEP's Arrow layout (int32 offsets, 64-byte aligned data)", ("arrow", "arrow"),
             _arrow_metadata(large=False), ArrowLayout, _offsets_into),
    V3Layout("arrow-large", "the Arrow layout with int64 offsets", ("arrow-large", "arrow-large"),
             _arrow_metadata(large=True), ArrowLayout, _offsets_into),
)

#: the names ``to_zarr_v3(layout=...)`` and ``zstrings convert --layout`` accept; the first is the default
LAYOUT_NAMES: tuple[str, ...] = tuple(r.name for r in V3_LAYOUTS)
#: every chunk layout holding variable-length values (a pipeline's ``layout``)
VARIABLE_LENGTH: frozenset[str] = frozenset(c for r in V3_LAYOUTS for c in r.chunk_layouts)


def layout_named(name: str) -> V3Layout:
    """The row of ``to_zarr_v3(layout=name)``, or a ZStringsError naming the choices."""
    for row in V3_LAYOUTS:
        if row.name == name:
            return row
    raise ZStringsError(f"Unknown layout {name!r}: expected one of {LAYOUT_NAMES}.")


def of_chunks(chunk_layout: str) -> V3Layout:
    """The row whose arrays' pipelines report ``chunk_layout`` (``"vlen-bytes"`` -> vlen-utf8's)."""
    return next(r for r in V3_LAYOUTS if chunk_layout in r.chunk_layouts)
