"""Datasets and DataArrays as Arrow tables and pandas DataFrames (``ds.zstrings.to_arrow()``,
``.to_dataframe()``, the Arrow C stream): the rows ``to_dataframe()`` gives, with string columns
built as Arrow arrays (straight from the store's chunks where the data is still lazy), so no Python
``str`` stands between the chunk and pandas, polars, DuckDB or pyarrow.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import xarray as xr
from xarray.core import indexing

from .backend import ZStringsBackendArray

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

__all__ = ["arrow_stream", "lazy_source", "to_arrow", "to_dataframe"]

# DataArray.to_dataframe's trick: a name no coordinate can hold, renamed back at the end
_UNIQUE = "__xr_zstrings_dataarray_values_4f1c__"


def to_arrow(obj: xr.Dataset | xr.DataArray, *, dim_order: Sequence[Hashable] | None = None) -> pa.Table:
    """The columns ``obj.to_dataframe(dim_order).reset_index()`` has (same names, as ``str``, same
    order and rows: values flattened in C order over the dimensions, broadcast as ``to_dataframe``
    broadcasts them) as a ``pyarrow.Table``. Text is ``large_string``, bytes ``large_binary``,
    missing values nulls; lazily opened text variables are read from the store into Arrow directly."""
    import pyarrow as pa

    frame = _Frame.of(obj, dim_order)
    names, arrays = frame.index_columns()
    for name in frame.columns:
        names.append(frame.label(name))
        arrays.append(frame.arrow_column(name))
    return pa.Table.from_arrays(arrays, names=[str(n) for n in names])


def to_dataframe(obj: xr.Dataset | xr.DataArray, *, dim_order: Sequence[Hashable] | None = None) -> pd.DataFrame:
    """What ``obj.to_dataframe(dim_order)`` gives (same index, columns and values), but text
    columns are pandas' ``str`` dtype backed by the Arrow arrays (bytes: ``ArrowDtype(large_binary)``),
    built without a Python object per value; missing text stays missing (NaN, as ``str`` shows it)."""
    import pandas as pd

    frame = _Frame.of(obj, dim_order)
    index = frame.ds.coords.to_index(list(frame.dims))
    data = {frame.label(name): frame.pandas_column(name) for name in frame.columns}
    return pd.DataFrame(data, index=index, copy=False)


def arrow_stream(obj: xr.Dataset | xr.DataArray, requested_schema: Any = None) -> Any:
    """The Arrow C stream (PyCapsule) of ``to_arrow(obj)``; an unnamed DataArray's column is
    ``"values"``, as in xarray's own ``DataArray.__arrow_c_stream__``.

    Where every column's Arrow type follows from the dtypes, the stream carries the schema and
    reads when its first batch is pulled: DuckDB asks for a stream several times a query (to bind
    it, then to scan it) and pulls one, so the store is read once."""
    import pyarrow as pa

    if isinstance(obj, xr.DataArray) and obj.name is None:
        obj = obj.rename("values")
    schema = _Frame.of(obj, None).schema()
    if schema is None:
        return to_arrow(obj).__arrow_c_stream__(requested_schema)
    reader = pa.RecordBatchReader.from_batches(schema, _batches(obj, schema))
    return reader.__arrow_c_stream__(requested_schema)


def _batches(obj: xr.Dataset | xr.DataArray, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """``to_arrow(obj)``'s record batches (its columns' chunks, no copy), read on the first pull."""
    table = to_arrow(obj)
    yield from (table if table.schema.equals(schema) else table.cast(schema)).to_batches()


def lazy_source(variable: xr.Variable) -> tuple[ZStringsBackendArray, indexing.ExplicitIndexer] | None:
    """The backend array under an engine="zstrings" Variable and the selection xarray holds for it
    (``LazilyIndexedArray.key``), or None when the data is loaded, dask, another engine's, or under
    a wrapper we do not know (vectorized or transposed selections, CF decoding functions).

    xarray has no public way to reach a backend array: this walks its lazy wrappers
    (MemoryCachedArray, CopyOnWriteArray, LazilyIndexedArray) and is the one place that knows them.
    Should xarray change them, None sends every caller to the loaded values: slower, still right.
    """
    found = _lazy_masked_source(variable)
    return None if found is None or found[2] is not None else (found[0], found[1])


def _lazy_masked_source(
    variable: xr.Variable,
) -> tuple[ZStringsBackendArray, indexing.ExplicitIndexer, frozenset[Any] | None] | None:
    """``lazy_source``, also through xarray's CF mask of a text variable (a string ``_FillValue``
    of a ``string_dtype="bytes"`` read: CFMaskCoder, not the backend, masks it); then also the
    stored values xarray's mask turns missing (else None)."""
    data: Any = getattr(variable, "_data", None)
    key: indexing.ExplicitIndexer | None = None
    fills: frozenset[Any] | None = None
    for _ in range(8):  # (a few wrappers deep at most)
        if isinstance(data, ZStringsBackendArray):
            return data, key if key is not None else indexing.BasicIndexer((slice(None),) * data.ndim), fills
        if isinstance(data, (indexing.MemoryCachedArray, indexing.CopyOnWriteArray)):
            data = data.array
        elif type(data) is indexing.LazilyIndexedArray and key is None:
            key, data = data.key, data.array
        elif fills is None and key is None and (fills := _text_mask_fills(data)) is not None:
            data = data.array
        else:
            return None
    return None


def _text_mask_fills(data: Any) -> frozenset[Any] | None:
    """The stored values xarray's CF mask wrapper (``_ElementwiseFunctionArray`` of
    ``_apply_mask``) over text makes missing, or None for any other wrapper or function."""
    func = getattr(data, "func", None)
    if type(data).__name__ != "_ElementwiseFunctionArray" or not isinstance(func, functools.partial):
        return None
    kw = func.keywords
    if getattr(func.func, "__name__", "") != "_apply_mask" or np.dtype(kw.get("dtype")) != np.dtype(object):
        return None
    fills = kw.get("encoded_fill_values", ())
    missing = kw.get("decoded_fill_value")
    if not (isinstance(missing, float) and math.isnan(missing)) or not all(isinstance(f, (str, bytes)) for f in fills):
        return None
    return frozenset(fills)


def _masked_arrow(out: Any, fills: frozenset[Any]) -> Any:
    """``out`` with the values ``_apply_mask`` matches as nulls: numpy's ``==`` on the object values
    (bytes equal bytes only, str equal str only), so only fills of the result's kind mask."""
    import pyarrow as pa

    from .read.arrow import mask_equal

    kind = bytes if pa.types.is_large_binary(out.type) else str
    for fill in sorted(f for f in fills if isinstance(f, kind)):
        out = mask_equal(out, bytes(fill) if isinstance(fill, bytes) else str(fill))
    return out


def _is_text(dtype: Any) -> bool:
    return isinstance(dtype, np.dtype) and dtype.kind in "TUSO"


def _via_arrow(variable: xr.Variable) -> bool:
    """Text (or object) values and pandas extension arrays go through Arrow; numbers and times
    are taken as xarray's (CF-decoded) numpy values."""
    return _is_text(variable.dtype) or not isinstance(variable.dtype, np.dtype)


def _is_text_type(t: pa.DataType) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_large_string(t) or pa.types.is_string(t) or pa.types.is_string_view(t))


def _numpy_text_to_arrow(values: np.ndarray, what: Hashable, encoding: dict[Any, Any]) -> pa.Array:
    """In-memory text (StringDType, ``<U``, ``|S``, object) as one Arrow array: pyarrow builds it
    from StringDType without Python objects (asked for ``large_string`` directly, it takes a
    slower per-value path: the cast comes after); an object array's NaN/None become nulls, and
    objects other than str/bytes keep the type pyarrow infers for them."""
    import pyarrow as pa

    flat = np.ravel(values)
    try:
        arr = pa.array(flat, from_pandas=True)
    except (pa.ArrowException, TypeError, ValueError) as e:
        kinds = sorted({type(v).__name__ for v in flat[:100]})
        raise TypeError(f"Cannot convert variable {what!r} to Arrow: its object values ({', '.join(kinds)}) "
                        f"have no Arrow type ({e}). Convert or drop it first (e.g. ds.drop_vars({what!r})).") from e
    if pa.types.is_null(arr.type):  # (no value to tell: the dtype, or the encoding, says bytes or text)
        return arr.cast(pa.large_binary() if _holds_bytes(values.dtype, encoding) else pa.large_string())
    if pa.types.is_binary(arr.type):
        return arr.cast(pa.large_binary())
    if pa.types.is_string(arr.type):
        return arr.cast(pa.large_string())
    return arr


def _holds_bytes(dtype: np.dtype, encoding: dict[Any, Any]) -> bool:
    """Whether an array of this dtype with no values holds bytes: ``|S``, xarray's vlen-bytes object
    dtype, or an object array read from a Zarr v3 bytes array (its encoding's data type)."""
    from xarray.coding.strings import check_vlen_dtype

    if dtype.kind == "S" or check_vlen_dtype(dtype) is bytes:
        return True
    return dtype.kind == "O" and encoding.get("zarr_data_type") == "bytes"


def _variable_arrow(variable: xr.Variable, what: Hashable) -> pa.ChunkedArray:
    """A text or extension-array Variable's values flattened in C order over its own dims: read
    from the store straight into Arrow when still lazy, else converted from the values."""
    import pyarrow as pa

    found = _lazy_masked_source(variable) if _is_text(variable.dtype) else None
    if found is not None:
        backend, key, fills = found
        out = backend.arrow(key)
        out = out if fills is None else _masked_arrow(out, fills)
    elif _is_text(variable.dtype):
        out = _numpy_text_to_arrow(variable.values, what, variable.encoding)
    else:  # a pandas extension array (1-D; xarray keeps it as it is)
        out = pa.array(getattr(variable.data, "array", variable.data))
    out = out if isinstance(out, pa.ChunkedArray) else pa.chunked_array([out])
    if len(out) != math.prod(variable.shape):
        raise AssertionError(f"Arrow column {what!r} has {len(out)} values for a variable of shape {variable.shape}")
    return out


def _broadcast_positions(dims: tuple[Hashable, ...], shape: tuple[int, ...], sizes: dict[Hashable, int]) -> np.ndarray:
    """For each row of the frame (C order over ``sizes``), the flat (C order) position of its value
    in a variable of ``dims``/``shape``: what ``set_dims(...).values.reshape(-1)`` picks."""
    strides = [math.prod(shape[j + 1:]) for j in range(len(shape))]
    pos = np.zeros([1] * len(sizes), dtype=np.int64)
    for axis, dim in enumerate(sizes):
        if dim in dims:
            j = dims.index(dim)
            along = [1] * len(sizes)
            along[axis] = sizes[dim]
            pos = pos + (np.arange(sizes[dim], dtype=np.int64) * strides[j]).reshape(along)
    return np.broadcast_to(pos, tuple(sizes.values())).reshape(-1)


@dataclass
class _Frame:
    """A Dataset (a DataArray as its one-variable Dataset) with the dims in frame order and the
    variables that become columns, as ``Dataset._to_dataframe`` chooses them."""

    ds: xr.Dataset
    sizes: dict[Hashable, int]
    columns: list[Hashable]
    rename: dict[Hashable, Hashable]

    @property
    def dims(self) -> tuple[Hashable, ...]:
        return tuple(self.sizes)

    @classmethod
    def of(cls, obj: xr.Dataset | xr.DataArray, dim_order: Sequence[Hashable] | None) -> _Frame:
        rename: dict[Hashable, Hashable] = {}
        if isinstance(obj, xr.DataArray):
            if obj.name is None:
                raise ValueError("cannot convert an unnamed DataArray to a DataFrame: give it a name "
                                 "(da.rename('name')), as DataArray.to_dataframe asks")
            if obj.ndim == 0:
                raise ValueError("cannot convert a scalar to a DataFrame")
            ds = obj.to_dataset(name=_UNIQUE)
            rename = {_UNIQUE: obj.name}
            default: Iterable[Hashable] = obj.dims
        elif isinstance(obj, xr.Dataset):
            ds, default = obj, obj.dims
        else:
            raise TypeError(f"to_arrow/to_dataframe take an xarray Dataset or DataArray, not {type(obj).__name__}")
        order = list(default) if dim_order is None else list(dim_order)
        if set(order) != set(ds.dims) or len(order) != len(ds.dims):
            raise ValueError(f"dim_order {list(order)} does not match the set of dimensions of this "
                             f"{type(obj).__name__}: {list(ds.dims)}")
        columns = [k for k in ds.variables if k not in ds.xindexes]
        return cls(ds, {d: ds.sizes[d] for d in order}, columns, rename)

    def label(self, name: Hashable) -> Hashable:
        return self.rename.get(name, name)

    def index_columns(self) -> tuple[list[Hashable], list[pa.Array]]:
        """The columns ``reset_index()`` makes of the index ``to_dataframe`` builds (pandas' own
        arrays as Arrow: a ``str`` index level is handed over without a copy)."""
        import pandas as pd

        index = self.ds.coords.to_index(list(self.dims))
        levels = ([index.get_level_values(i) for i in range(index.nlevels)]
                  if isinstance(index, pd.MultiIndex) else [index])
        names: list[Hashable] = [lv.name for lv in levels]
        return names, [_index_to_arrow(lv) for lv in levels]

    def schema(self) -> pa.Schema | None:
        """``to_arrow``'s schema from the dtypes alone (nothing read), or None where a column's
        Arrow type depends on its values (object arrays, other pandas types)."""
        import pandas as pd
        import pyarrow as pa

        pairs: list[tuple[Hashable, Any]] = []
        for dim in self.dims:  # (the index's levels, without building it: a product of dims is N rows)
            index = self.ds.indexes.get(dim)
            if isinstance(index, pd.MultiIndex):
                pairs += [(name, lv.dtype) for name, lv in zip(index.names, index.levels, strict=True)]
            else:
                pairs.append((dim, np.dtype(np.int64) if index is None else index.dtype))
        pairs += [(self.label(n), self.ds.variables[n].dtype) for n in self.columns]
        types = [_arrow_type_of(dtype) for _, dtype in pairs]
        if any(t is None for t in types):
            return None
        return pa.schema([pa.field(str(name), t) for (name, _), t in zip(pairs, types, strict=True)])

    def arrow_column(self, name: Hashable) -> pa.Array | pa.ChunkedArray:
        """One variable as the frame's column: text via Arrow (reordered/broadcast with ``take``
        where its dims are not the frame's), numbers from xarray's (CF-decoded) values."""
        import pyarrow as pa

        var = self.ds.variables[name]
        if _via_arrow(var):
            out = _variable_arrow(var, self.label(name))
            if var.dims != self.dims:
                out = out.take(pa.array(_broadcast_positions(var.dims, var.shape, self.sizes)))
            return out
        values = np.ravel(var.set_dims(self.sizes).values)
        return pa.array(values, from_pandas=False)

    def pandas_column(self, name: Hashable) -> Any:
        """One variable as ``to_dataframe`` makes it, text as a pandas Arrow-backed array."""
        import pyarrow as pa

        var = self.ds.variables[name]
        if not _via_arrow(var):
            return var.set_dims(self.sizes).values.reshape(-1)
        try:
            col = self.arrow_column(name)
        except TypeError:  # objects Arrow has no type for (cftime dates, ...): as xarray
            return var.set_dims(self.sizes).values.reshape(-1)
        if _is_text_type(col.type) or pa.types.is_large_binary(col.type):
            return _pandas_text(col)  # (``str`` whatever the read: "T", "arrow", object)
        if not isinstance(var.dtype, np.dtype) and hasattr(var.dtype, "__from_arrow__"):
            return var.dtype.__from_arrow__(col)
        return var.set_dims(self.sizes).values.reshape(-1)  # (objects that are not text: as xarray)


def _arrow_type_of(dtype: Any) -> pa.DataType | None:
    """The Arrow type ``to_arrow`` gives a column of this dtype, when the dtype alone says it."""
    import pandas as pd
    import pyarrow as pa

    if isinstance(dtype, pd.ArrowDtype):
        return dtype.pyarrow_dtype
    if isinstance(dtype, pd.StringDtype) and dtype.storage == "pyarrow":
        return pa.large_string()
    if not isinstance(dtype, np.dtype) or dtype.kind == "O":
        return None
    if dtype.kind in "TU":
        return pa.large_string()
    if dtype.kind == "S":
        return pa.large_binary()
    try:
        return pa.from_numpy_dtype(dtype)
    except (pa.ArrowException, TypeError, ValueError):
        return None


def _index_to_arrow(level: pd.Index) -> pa.Array:
    """One index level as Arrow (a ``str`` level's own Arrow arrays, numbers and times zero-copy)."""
    import pyarrow as pa

    try:
        return pa.Array.from_pandas(level)
    except (pa.ArrowException, TypeError) as e:
        kinds = sorted({type(v).__name__ for v in level[:100]})
        raise TypeError(f"Cannot convert the index {level.name!r} to Arrow: its values ({', '.join(kinds)}) have no "
                        "Arrow type. Convert it first (cftime dates: ds.convert_calendar('standard', "
                        "use_cftime=False)), or use ds.zstrings.to_dataframe().") from e


def _pandas_text(col: pa.Array | pa.ChunkedArray) -> Any:
    """An Arrow text column as pandas' ``str`` (``StringDtype("pyarrow", na_value=nan)``, pandas 3's
    default; its pandas 2.x spelling there) holding the same buffers; bytes as ``ArrowDtype(large_binary)``."""
    import pandas as pd
    import pyarrow as pa

    from .xarray_arrow import pandas_str

    chunked = col if isinstance(col, pa.ChunkedArray) else pa.chunked_array([col])
    if _is_text_type(chunked.type):
        return pandas_str().__from_arrow__(chunked)  # (the public way in on pandas 2.1 to 3)
    return pd.arrays.ArrowExtensionArray(chunked)
