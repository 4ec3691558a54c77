"""The one interface of an array's metadata, whichever Zarr version stored it.

``nczarr.ArrayMetaV2`` (Zarr v2 and every NCZarr generation) and ``zarr3.ArrayMetaV3``
(``zarr.json``) both implement ``ArrayMeta``, so the reader resolves dimensions, fill values,
chunk keys and attributes without asking which version it has. What only one version has (v2's
compressor and filters, v3's codec chain and shards) stays on its own class and is used only by
the code for that version (``read/chunked_v2.py``, ``read/chunked_v3.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..errors import MetadataError

__all__ = ["ArrayMeta", "int_tuple"]


def int_tuple(value: Any, *, where: str, what: str, minimum: int, decimal_strings: bool = False,
              fix: str = "") -> tuple[int, ...]:
    """A list of integers >= ``minimum`` (a shape, chunks, a chunk shape) as a tuple: the one rule of
    both versions' metadata. ``decimal_strings``: ``"5"`` counts as 5, as the v2/NCZarr reader takes
    every integer of its metadata; Zarr v3 asks for JSON integers. Else a ``MetadataError`` (``fix``
    appended to its message)."""
    out: list[int] = []
    for v in value if isinstance(value, list) else [None]:
        n = None
        if isinstance(v, int) and not isinstance(v, bool):
            n = v
        elif decimal_strings and isinstance(v, str):
            try:
                n = int(v)
            except ValueError:
                n = None
        if n is None or n < minimum or not isinstance(value, list):
            shown = repr(value) if len(repr(value)) <= 120 else repr(value)[:117] + "..."
            raise MetadataError(f"Invalid {what} at {where}: got {shown}, expected a list of integers >= "
                                f"{minimum}.{' ' + fix if fix else ''}")
        out.append(n)
    return tuple(out)


@runtime_checkable
class ArrayMeta(Protocol):
    """What every stored array's metadata says, in the same words for Zarr v2 and v3."""

    @property
    def path(self) -> str:
        """Absolute path in the store (``/v``, ``/sub/v``)."""

    @property
    def shape(self) -> tuple[int, ...]:
        """The stored shape (a netCDF scalar is stored with shape ``(1,)``)."""

    @property
    def chunks(self) -> tuple[int, ...]:
        """The shape of what one store key holds (a shard when the array is sharded)."""

    @property
    def dtype(self) -> np.dtype:
        """The storage dtype of the decoded chunks."""

    @property
    def fill_value(self) -> Any:
        """The decoded fill value of never-written chunks (None: none, or null)."""

    @property
    def scalar(self) -> bool:
        """A netCDF scalar: no dimensions."""

    @property
    def logical_shape(self) -> tuple[int, ...]:
        """The netCDF shape: ``()`` for a scalar (which Zarr v2 stores with shape ``[1]``)."""

    @property
    def attrs(self) -> Mapping[str, Any]:
        """The user attributes, typed (NCZarr) or as stored."""

    @property
    def string_kind(self) -> str | None:
        """``"string"`` (``|Sn``, NC_STRING), ``"char"`` (NC_CHAR), ``"unicode"`` (UTF-32), ``"vlen"``,
        ``"vlen-bytes"``, or None for numbers."""

    @property
    def generation(self) -> str:
        """``"zarr-v2"``, ``"zarr-v3"`` or the NCZarr generation that wrote the metadata."""

    @property
    def zarr_format(self) -> int:
        """2 or 3."""

    @property
    def name(self) -> str:
        """The last path segment."""

    @property
    def order(self) -> str:
        """Element order inside a chunk: ``"C"`` or ``"F"``."""

    @property
    def dimension_names(self) -> tuple[str | None, ...] | None:
        """Names the array itself carries (v2 ``_ARRAY_DIMENSIONS``, v3 ``dimension_names``;
        None entries are unnamed), or None."""

    @property
    def dimension_references(self) -> tuple[str, ...] | None:
        """NCZarr's fully qualified references to shared dimensions (``/x``, ``/g/y``), or None."""

    @property
    def maxstrlen(self) -> int | None:
        """The fixed width in bytes of a fixed-width string array, else None."""

    @property
    def null_fill(self) -> bool:
        """Never-written chunks and null elements are missing values (a Zarr v2 ``|O`` array
        with ``fill_value: null``, zarrs' ``optional`` type), not the empty string."""

    @property
    def declares_text(self) -> bool:
        """A fixed-width bytes array is declared text by the metadata itself (NCZarr NC_STRING,
        a ``_nczarr_maxstrlen`` attribute); otherwise ``|Sn`` is bytes, as engine="zarr" reads it."""

    def chunk_key(self, idx: tuple[int, ...]) -> str:
        """The store key of chunk ``idx``, relative to the array."""

    def cf_attributes(self, *, store: str = "") -> dict[str, Any]:
        """The attributes as xarray's CF decoding expects them (v3: xarray's encoded
        ``_FillValue`` attribute decoded); ``store`` names the store in errors."""
