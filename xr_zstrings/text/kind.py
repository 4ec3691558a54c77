"""Is this text: the one rule every writer and the accessor ask (``text_kind``), and what counts as a
missing value in an object array (``is_missing``). Pure: looks at a dtype and values (a dask
array's blocks in order, computed one at a time), imports neither xarray nor pandas."""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .vlen import Kind

__all__ = ["is_dask", "is_missing", "text_kind"]

_NOTHING = object()


def is_dask(data: Any) -> bool:
    return type(data).__module__.startswith("dask.")


def is_missing(v: Any) -> bool:
    """None, a float NaN or ``pd.NA`` (pandas, when it is loaded: only then can a value be pd.NA)."""
    pd = sys.modules.get("pandas")
    return v is None or (pd is not None and v is pd.NA) or (isinstance(v, float) and math.isnan(v))


def _first_present(data: Any) -> Any:
    """The first value of an object array that is not missing (None/NaN/pd.NA), or ``_NOTHING``
    when every value is missing (or there is none). A dask array is looked at block by block, in
    order, until one holds a value (usually the first)."""
    if is_dask(data):
        import dask

        blocks = data.to_delayed().reshape(-1)
        for block in blocks:
            found = _first_present(np.asarray(dask.compute(block)[0]))
            if found is not _NOTHING:
                return found
        return _NOTHING
    return next((v for v in np.asarray(data).reshape(-1).tolist() if not is_missing(v)), _NOTHING)


def text_kind(var: Any) -> Kind | None:
    """"str", "bytes" or None (not text), of a variable (anything with ``dtype`` and ``data``): the
    one rule every writer asks (to_nczarr, appends, convert, to_zarr_v3) and the accessor's
    ``with_zarr_encoding``. ``U``/``T`` are text, ``S`` bytes; an object array is what its first value that
    is not missing is (a str: text, bytes: bytes, anything else: not text), and an object array of
    only missing values is text (strings are the only thing it can be written as)."""
    k = var.dtype.kind
    if k in "TU":
        return "str"
    if k == "S":
        return "bytes"
    if k != "O":
        return None
    first = _first_present(var.data)
    if first is _NOTHING or isinstance(first, str | np.str_):
        return "str"
    if isinstance(first, bytes | np.bytes_):
        return "bytes"
    return None
