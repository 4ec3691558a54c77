"""``string_dtype="arrow"``: 1-D string and bytes variables handed to xarray as pandas Arrow-backed arrays.

The reader decodes as for ``"T"`` (xarray's CF decoding cannot read an extension dtype); after
decoding, each 1-D text variable still backed by its ``ZStringsBackendArray`` is swapped for a lazy
``pd.ArrowDtype(pa.large_string())`` one (bytes: ``large_binary``), built from Arrow arrays with no
Python ``str`` in between. What xarray can and cannot hold is in docs/format-notes.md
("pandas extension arrays in xarray").
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Hashable
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import xarray as xr
from xarray.backends import BackendArray
from xarray.core import indexing

from .errors import UnsupportedError, user_stacklevel

# xarray's wrapper for pandas extension arrays: a BackendArray must return one (a bare ExtensionArray
# fails xarray's as_indexable); xarray has no public name for it. Should a release move it, only
# string_dtype="arrow" is refused (with_arrow_strings), every other read stays as it is.
try:
    from xarray.core.extension_array import PandasExtensionArray
except ImportError:  # pragma: no cover - exercised by a test that hides it

    class PandasExtensionArray:  # type: ignore[no-redef]
        """Stand-in: this xarray has no ``xarray.core.extension_array.PandasExtensionArray``."""

        missing = True

__all__ = ["ArrowBackendArray", "ArrowValues", "arrow_type_of", "numpy_strings", "pandas_str", "warn_kept", "with_arrow_strings"]


def arrow_type_of(data: Any) -> pa.DataType | None:
    """The Arrow type a variable read by ``LazyArray`` gets under ``string_dtype="arrow"``: text
    ``large_string``, stored bytes ``large_binary``, anything else None (it stays numpy)."""
    decode = getattr(data, "decode", None)
    if decode is None:
        return None
    if decode.text:
        return pa.large_string()
    if decode.as_bytes:
        return pa.large_binary()
    return None


class ArrowBackendArray(BackendArray):
    """A 1-D variable's values as a pandas ``ArrowDtype`` array, read lazily through ``source``.

    ``source`` is the variable's ``ZStringsBackendArray``: its ``arrow`` method reads the selection
    from the chunk buffers straight into Arrow (no Python ``str``, no StringDType in between).
    """

    def __init__(self, source: Any, arrow_type: pa.DataType, missing: list[bytes] | None = None) -> None:
        """``missing``: stored values xarray's CF decoding masks (a bytes ``_FillValue``): nulls here."""
        self.source = source
        self.arrow_type = arrow_type
        self.missing = pa.array(missing, arrow_type) if missing else None
        self.shape = tuple(source.shape)
        self.dtype = pd.ArrowDtype(arrow_type)

    def __getitem__(self, key: indexing.ExplicitIndexer) -> Any:
        (k,) = key.tuple
        if isinstance(k, (int, np.integer)):
            n = self.shape[0]
            if not -n <= int(k) < n:  # (as the "T" read: it wrapped around to another value)
                raise IndexError(f"index {int(k)} is out of bounds for axis 0 with size {n}")
            i = int(k) % n
            return _scalar(self._read((slice(i, i + 1),)))
        if isinstance(k, np.ndarray) and k.ndim > 1:  # a vectorized selection of more than 1-D: numpy
            return np.asarray(self._read((k.reshape(-1),)), dtype=object).reshape(k.shape)
        return ArrowValues(self._read((k,)))

    def _read(self, key: tuple[Any, ...]) -> pd.api.extensions.ExtensionArray:
        got = self.source.arrow(indexing.OuterIndexer(key) if _outer(key) else indexing.BasicIndexer(key))
        if got.type != self.arrow_type:
            got = got.cast(self.arrow_type)
        if self.missing is not None:
            got = pc.if_else(pc.is_in(got, value_set=self.missing), pa.scalar(None, self.arrow_type), got)
        return pd.arrays.ArrowExtensionArray(got)

    def index(self, name: Hashable) -> pd.Index:
        """All values as a pandas ``str`` Index over the same Arrow buffers (no copy): a dimension
        coordinate, whose index xarray takes as it is. Its Variable keeps the numpy dtype of a "T"
        read: xarray 2026.9 cannot align indexes whose coordinate has an extension dtype."""
        return pd.Index(self._read((slice(None),)), name=name, copy=False).astype(pandas_str(), copy=False)


class ArrowValues(PandasExtensionArray):
    """xarray's wrapper of a loaded extension array, but one value selected (``ds.isel(x=0)`` of a
    loaded variable) comes back as a 0-d numpy array: xarray's own wrapper gives a length-1 Arrow
    array there (Arrow has no 0-d value, pandas#61433), which xarray then refuses for a 0-d variable."""

    def __getitem__(self, key: Any) -> Any:
        parts = [p for p in key if p is not Ellipsis] if isinstance(key, tuple) else [key]
        k = parts[0] if len(parts) == 1 else key  # (xarray asks for (i, ...) to get a 0-d result)
        if isinstance(k, (int, np.integer)):
            n = len(self.array)
            if not -n <= int(k) < n:  # (as numpy: the empty slice gave a reshape ValueError)
                raise IndexError(f"index {int(k)} is out of bounds for axis 0 with size {n}")
            return _scalar(self.array[int(k) : int(k) + 1 or None])
        if isinstance(k, np.ndarray) and k.ndim > 1:  # a vectorized selection of more than 1-D: numpy
            return np.asarray(self.array.take(k.reshape(-1)), dtype=object).reshape(k.shape)
        got = super().__getitem__(key)
        return ArrowValues(got.array) if type(got) is PandasExtensionArray else got

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        out = super().__array_function__(func, types, args, kwargs)  # (concatenate, where, ...)
        return ArrowValues(out.array) if type(out) is PandasExtensionArray else out

    def __copy__(self) -> ArrowValues:
        return ArrowValues(copy.copy(self.array))

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> ArrowValues:
        return ArrowValues(copy.deepcopy(self.array, memo=memo))


def _scalar(one: pd.api.extensions.ExtensionArray) -> np.ndarray:
    """One value as a 0-d object array, as ``.values`` gives the whole variable (missing: pd.NA)."""
    return np.asarray(one, dtype=object).reshape(())


def pandas_str() -> Any:
    """pandas 3's default ``str`` dtype (Arrow-backed, missing values NaN); pandas 2.1-2.2 spell it
    ``StringDtype("pyarrow_numpy")``; without either, the Arrow dtype itself."""
    try:
        return pd.StringDtype("pyarrow", na_value=np.nan)
    except TypeError:  # (pandas < 2.3: no na_value)
        pass
    try:
        return pd.StringDtype("pyarrow_numpy")
    except (TypeError, ValueError):
        return pd.ArrowDtype(pa.large_string())


def _outer(key: tuple[Any, ...]) -> bool:
    return any(isinstance(k, np.ndarray) for k in key)


def with_arrow_strings(ds: xr.Dataset, contents: Any, backend_array: type, group: str = "/") -> tuple[xr.Dataset, list[str]]:
    """``ds`` (as xarray decoded it) with its 1-D text/bytes variables Arrow-backed; also the names
    of the string variables that stay numpy (0-d, N-D: as with "T") for the caller's warning."""
    if getattr(PandasExtensionArray, "missing", False):
        raise UnsupportedError(
            f"string_dtype='arrow' needs xarray's PandasExtensionArray (xarray.core.extension_array), which "
            f"xarray {xr.__version__} does not have; open with string_dtype='T' (the default) and take Arrow "
            "or pandas from ds.zstrings.to_arrow() / ds.zstrings.to_dataframe()"
        )
    data_vars: dict[Hashable, xr.Variable] = {}
    coords: dict[Hashable, xr.Variable] = {}
    indexes: dict[Hashable, Any] = {}
    kept: list[str] = []
    for name, spec in contents.variables.items():
        atype = arrow_type_of(spec.data)
        found = _backend_array(ds.variables[name], backend_array, atype) if atype and name in ds.variables else None
        if atype is None or found is None:
            continue  # not text, dropped, or otherwise changed by xarray's CF decoding: as decoded
        var = ds.variables[name]
        if var.ndim != 1:
            kept.append(f"{group.rstrip('/')}/{name} ({var.ndim}-D)")
            continue
        arr = ArrowBackendArray(found[0], atype, found[1])
        if var.dims == (name,) and atype == pa.large_string():
            # a dimension coordinate: its index made here, over the Arrow read (xarray would read it
            # at open anyway, and build its index through Python objects); bytes labels: as decoded
            indexes[name] = xr.indexes.PandasIndex(arr.index(name), name, coord_dtype=var.dtype)
            coords.update(indexes[name].create_variables({name: var}))
        elif var.dims != (name,):
            new = xr.Variable(var.dims, indexing.LazilyIndexedArray(arr), var.attrs, var.encoding, fastpath=True)
            (coords if name in ds.coords else data_vars)[name] = new
    if coords:
        ds = ds.assign_coords(xr.Coordinates(coords, indexes=indexes))
    return (ds.assign(data_vars) if data_vars else ds), kept


def _backend_array(var: xr.Variable, backend_array: type, atype: pa.DataType) -> tuple[Any, list[bytes]] | None:
    """The variable's ``backend_array`` if xarray's decoding left it as is (whole, unwrapped), or
    only masked a bytes fill (then also the stored values it masks); else None."""
    data: Any = var._data
    missing: list[bytes] = []
    if type(data).__name__ == "_ElementwiseFunctionArray" and atype == pa.large_binary():
        # xarray's CFMaskCoder on stored bytes: values equal to _FillValue / missing_value -> NaN
        # (numpy's |S equality ignores trailing NULs; the Arrow values have none)
        fills = [np.ravel(var.encoding[k]).tolist() for k in ("_FillValue", "missing_value") if k in var.encoding]
        missing = [bytes(f).rstrip(b"\0") for fs in fills for f in fs if isinstance(f, bytes)]
        data = getattr(data, "array", None) if missing else None
    if not isinstance(data, indexing.LazilyIndexedArray) or not isinstance(data.array, backend_array):
        return None
    if any(not (isinstance(k, slice) and k == slice(None)) for k in data.key.tuple):
        return None
    return data.array, missing


def warn_kept(kept: list[str]) -> None:
    """One warning per open naming the string variables left numpy, and why."""
    if kept:
        shown = ", ".join(kept[:5]) + (f" and {len(kept) - 5} more" if len(kept) > 5 else "")
        warnings.warn(
            f"string_dtype='arrow': {shown} read as numpy arrays (as with string_dtype='T'): xarray holds pandas "
            "Arrow arrays in 1-D variables only (ds.zstrings.to_arrow() gives these as Arrow, flattened).",
            UserWarning, stacklevel=user_stacklevel(),
        )


def numpy_strings(obj: Any) -> Any:
    """A copy of a Dataset or DataTree whose pandas Arrow string/bytes variables are numpy again,
    as ``string_dtype="T"`` reads them: text StringDType (missing values NaN), bytes an object array
    (missing None). xarray's ``to_netcdf``/``to_zarr`` cannot encode an extension dtype (they raise
    TypeError; ``to_zarr(mode="w")`` after emptying the target), so call this before them. Text is
    converted from the Arrow buffers in one pass (``arrow_to_stringdtype``), with no Python str."""
    if isinstance(obj, xr.DataTree):
        return obj.map_over_datasets(numpy_strings)
    changed = {name: _numpy_variable(var) for name, var in obj.variables.items() if isinstance(var.dtype, pd.ArrowDtype)}
    if not changed:
        return obj
    coords = {n: v for n, v in changed.items() if n in obj.coords}
    out = obj.assign({n: v for n, v in changed.items() if n not in coords})
    return out.assign_coords(coords) if coords else out


def _numpy_variable(var: xr.Variable) -> xr.Variable:
    from .text.arrow import arrow_to_stringdtype
    from .text.dtypes import NA_T

    got = pa.array(var.data) if not hasattr(var.data, "__arrow_array__") else var.data.__arrow_array__()
    values = got if isinstance(got, pa.ChunkedArray) else pa.chunked_array([got])
    if pa.types.is_large_string(values.type) or pa.types.is_string(values.type):
        data = arrow_to_stringdtype(values, dtype=NA_T if values.null_count else None)
    else:
        data = values.to_numpy(zero_copy_only=False)
    return xr.Variable(var.dims, data, var.attrs, var.encoding)
