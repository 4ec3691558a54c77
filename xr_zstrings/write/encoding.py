"""A Dataset's or DataTree's encodings in one Zarr format's vocabulary, for xarray's ``to_zarr``.

``with_zarr_encoding`` (``ds.zstrings.to_zarr``, ``to_zarr_v2``'s netcdf-c copy) gives each variable
the codecs :func:`~xr_zstrings.codecs.encoding.format_encoding` chooses for ``zarr_format`` (the
store's exact chain while the encoding is still engine="zstrings"'s, else the user's converted),
and a v3 text variable's string fill as ``missing_value``, which xarray's v3 writer can write. The
codec translation itself (no xarray) is codecs/encoding.py's.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from ..codecs.encoding import format_encoding
from ..errors import user_stacklevel
from ..text.kind import text_kind

if TYPE_CHECKING:
    import xarray as xr

__all__ = ["for_zarr", "with_zarr_encoding"]


@overload
def with_zarr_encoding(obj: xr.Dataset, zarr_format: int) -> xr.Dataset: ...
@overload
def with_zarr_encoding(obj: xr.DataTree, zarr_format: int) -> xr.DataTree: ...
def with_zarr_encoding(obj: Any, zarr_format: int) -> Any:
    """A copy of a Dataset or DataTree whose variables' codecs are in ``zarr_format``'s vocabulary,
    for ``.to_zarr(..., zarr_format=zarr_format)``: the store's exact chain where the encoding is
    still engine="zstrings"'s (shuffle, shards), else the encoding's own codecs converted; codecs
    without an equivalent are dropped with a ``CodecDroppedWarning``."""
    import xarray as xr

    if zarr_format not in (2, 3):
        raise ValueError(f"zarr_format must be 2 or 3, got {zarr_format!r}.")
    if isinstance(obj, xr.DataTree):
        return obj.map_over_datasets(lambda d: with_zarr_encoding(d, zarr_format))
    from ..xarray_arrow import numpy_strings

    obj = numpy_strings(obj)  # string_dtype="arrow"'s pandas Arrow strings: xarray's to_zarr cannot encode them
    out = obj.copy()
    for name, var in obj.variables.items():
        kind = text_kind(var)  # the writers' rule (text/kind.py)
        out[name].encoding = format_encoding(dict(var.encoding), zarr_format, dtype=var.dtype, text=kind is not None,
                                             where=f"variable {name!r}")
        as_chars = np.dtype(var.encoding.get("dtype", "O")).kind == "S"  # (NC_CHAR: xarray refuses its fill)
        if zarr_format == 3 and kind == "str" and not as_chars:
            out[name].attrs, out[name].encoding = _v3_text_fill(dict(var.attrs), dict(out[name].encoding))
    return out


@overload
def for_zarr(obj: xr.Dataset, zarr_format: int) -> xr.Dataset: ...
@overload
def for_zarr(obj: xr.DataTree, zarr_format: int) -> xr.DataTree: ...
def for_zarr(obj: Any, zarr_format: int) -> Any:
    """Deprecated: the old name of ``with_zarr_encoding`` (same arguments, same result)."""
    warnings.warn("xr_zstrings.for_zarr is deprecated: use xr_zstrings.with_zarr_encoding (same arguments, same "
                  "result).", FutureWarning, stacklevel=user_stacklevel())
    return with_zarr_encoding(obj, zarr_format)


def _v3_text_fill(attrs: dict[str, Any], encoding: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A text variable's string ``_FillValue`` as CF ``missing_value`` (attribute or encoding, where
    it was), for xarray's Zarr v3 writer: xarray 2026.9 cannot encode a ``_FillValue`` for a
    StringDType or object variable, nor decode one it wrote for ``<U``, but writes ``missing_value``
    (missing values as it) and masks it when it reads the array."""
    for where in (attrs, encoding):
        fill = where.get("_FillValue")
        if isinstance(fill, str | np.str_) and "missing_value" not in attrs and "missing_value" not in encoding:
            where["missing_value"] = str(where.pop("_FillValue"))
    return attrs, encoding
