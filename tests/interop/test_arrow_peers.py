"""The Arrow hand-off to the data-frame peers (issue 39): polars, pandas 3, pyarrow and DuckDB read
``ds.zstrings`` (its Table and its Arrow C stream) with the strings' buffers shared, not copied, and
with missing values null (polars, DuckDB) or NaN (pandas ``str``), never the text "nan"; and
``xr_zstrings.arrow_to_stringdtype`` agrees with numpy's own construction from Python strings.

The stores are written by real peers (netcdf-c through netCDF4, zarr-python) and by our Zarr v3
writer in the Arrow layout with missing values (zarrs' optional type).
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import netCDF4
import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest
import xarray as xr
import zarr
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from peers import nc_url, plain

import xr_zstrings
from xr_zstrings.write.zarr3 import to_zarr_v3

NA_T = np.dtypes.StringDType(na_object=np.nan)
LABELS = ["alpha", None, "héllo wörld, long enough for a data buffer", "", "中文字", None, "😀x" * 9, "z" * 40,
          "b"]
ROWS, COLS = 3, 3  # LABELS as a (y, x) variable too


def _write_netcdf_c(path: Path) -> None:
    """NCZarr by netcdf-c: NC_STRING ``s`` (x) and ``grid`` (y, x) with a string _FillValue (missing),
    a number ``n`` and a string coordinate ``lab``."""
    with netCDF4.Dataset(nc_url(path), "w") as nc:
        nc.createDimension("x", len(LABELS))
        nc.createDimension("y", ROWS)
        nc.createDimension("c", COLS)
        s = nc.createVariable("s", str, ("x",), fill_value="N/A", chunksizes=(4,))
        s[:] = np.array(["N/A" if v is None else v for v in LABELS], dtype=object)
        g = nc.createVariable("grid", str, ("y", "c"), fill_value="N/A", chunksizes=(2, 2))
        g[:] = np.array(["N/A" if v is None else v for v in LABELS], dtype=object).reshape(ROWS, COLS)
        n = nc.createVariable("n", "f8", ("x",))
        n[:] = np.arange(len(LABELS)) / 4
        lab = nc.createVariable("lab", str, ("x",))
        lab[:] = np.array([f"L{i}" for i in range(len(LABELS))], dtype=object)
        nc.variables["s"].coordinates = "lab"


def _write_arrow_layout(path: Path) -> None:
    """Zarr v3 in the Arrow layout (our writer), missing values in zarrs' optional type."""
    ds = xr.Dataset(
        {"s": ("x", np.array(LABELS, dtype=object)),
         "grid": (("y", "c"), np.array(LABELS, dtype=object).reshape(ROWS, COLS)),
         "n": ("x", np.arange(len(LABELS)) / 4)},
        coords={"lab": ("x", np.array([f"L{i}" for i in range(len(LABELS))], dtype=object))})
    for v in ("s", "grid", "lab"):
        ds[v].encoding["chunks"] = (4,) if ds[v].ndim == 1 else (2, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        to_zarr_v3(ds, path, layout="arrow", compressors=[])


def _write_zarr_python_v3(path: Path) -> None:
    """Zarr v3 vlen-utf8 by xarray's zarr backend (zarr-python): no missing values in v3 text."""
    ds = xr.Dataset({"s": ("x", np.array(["" if v is None else v for v in LABELS], dtype=object)),
                     "n": ("x", np.arange(len(LABELS)) / 4)})
    ds["s"].encoding["chunks"] = (4,)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(path, zarr_format=3, consolidated=False)


WRITERS: dict[str, Callable[[Path], None]] = {
    "nczarr-netcdf-c": _write_netcdf_c,
    "v3-arrow-optional": _write_arrow_layout,
    "v3-vlen-utf8-zarr-python": _write_zarr_python_v3,
}


@pytest.fixture(params=list(WRITERS))
def store(request: Any, tmp_path: Path) -> Path:
    path = tmp_path / f"{request.param}.zarr"
    WRITERS[request.param](path)
    return path


def _open(path: Path) -> xr.Dataset:
    return xr.open_dataset(path, engine="zstrings")


def _strings(obj: xr.Dataset) -> list[str]:
    return [str(k) for k, v in obj.variables.items() if v.dtype.kind in "TOU"]


def _reference_columns(ds: xr.Dataset) -> dict[str, list[Any]]:
    """xarray's own table: ``to_dataframe().reset_index()``, missing as None."""
    df = ds.to_dataframe().reset_index()
    return {str(c): plain(df[c].to_numpy(dtype=object)) for c in df.columns}


def _data_buffers(col: pa.ChunkedArray | pa.Array) -> list[tuple[int, int]]:
    """The memory (start, end) of each non-empty data buffer of a string column, chunk by chunk."""
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    out = []
    for c in chunks:
        bufs = c.buffers()
        data = bufs[2:] if pa.types.is_string_view(c.type) or pa.types.is_binary_view(c.type) else bufs[2:3]
        out += [(b.address, b.address + b.size) for b in data if b is not None and b.size > 0]
    return out


def assert_shared(theirs: list[tuple[int, int]], ours: list[tuple[int, int]], how: str) -> None:
    """Every data buffer a consumer holds lies inside one of ours: it took our memory, not a copy
    (polars keeps the part of a buffer its string views point into)."""
    assert theirs, f"{how}: holds no data buffer"
    for start, end in theirs:
        assert any(a <= start and end <= b for a, b in ours), f"{how}: a copy at {start:#x} (ours: {ours})"


def _polars_buffers(series: pl.Series) -> list[tuple[int, int]]:
    """The data buffers polars holds for a string column (its string views' data buffers, exported
    as they are)."""
    exported = series.to_arrow(compat_level=pl.CompatLevel.newest())
    assert pa.types.is_string_view(exported.type), exported.type
    return _data_buffers(exported)


def polars_from_arrow(obj: Any) -> pl.DataFrame:
    """``pl.from_arrow`` of an object with an Arrow C stream: polars 2 gives a Series of structs
    (one field per column) for a stream, a DataFrame for a Table."""
    got = pl.from_arrow(obj)
    return got.struct.unnest() if isinstance(got, pl.Series) else got


def _grid_ds(ds: xr.Dataset) -> xr.Dataset:
    """The 1-D part (x) and the 2-D part (y, c) of a store are two tables."""
    return ds[[v for v in ds.data_vars if "x" in ds[v].dims]]


# ------------------------------------------------------------------------------ pyarrow, polars, duckdb


def test_to_arrow_is_xarrays_table_with_nulls(store, kernels):
    """``ds.zstrings.to_arrow()`` and ``pa.table(ds.zstrings)`` (the C stream) hold the columns
    ``to_dataframe().reset_index()`` has, strings as large_string with missing values null."""
    ds = _grid_ds(_open(store))
    want = _reference_columns(ds)
    for how, table in (("to_arrow", ds.zstrings.to_arrow()), ("pa.table(stream)", pa.table(ds.zstrings))):
        assert table.column_names == list(want), how
        assert {c: table.column(c).to_pylist() for c in table.column_names} == want, how
        for name in _strings(ds):
            assert table.column(name).type == pa.large_string(), (how, name)
        assert "nan" not in table.column("s").to_pylist()
        assert table.column("s").null_count == (0 if "vlen-utf8" in store.name else LABELS.count(None))


def test_polars_shares_the_tables_string_buffers(store, kernels):
    """polars (``pl.from_arrow``, ``pl.DataFrame``) takes the Table's string data buffers as they
    are (its string views point into them: no copy) and holds missing values as null."""
    ds = _grid_ds(_open(store))
    table = ds.zstrings.to_arrow()
    col = table.column("s")
    ours = _data_buffers(col)
    assert ours
    for how, df in (("from_arrow", pl.from_arrow(table)), ("DataFrame", pl.DataFrame(table))):
        assert isinstance(df, pl.DataFrame)
        assert_shared(_polars_buffers(df["s"]), ours, f"polars {how}")
        assert df["s"].to_list() == col.to_pylist(), how
        assert df["s"].null_count() == col.null_count, how


def test_polars_and_duckdb_read_the_c_stream(store, kernels):
    """``pl.from_arrow(ds.zstrings)``, ``pl.DataFrame(ds.zstrings)`` and DuckDB scanning
    ``ds.zstrings`` get xarray's table: the same columns and values, missing as null (never "nan")."""
    ds = _grid_ds(_open(store))
    want = _reference_columns(ds)
    for how, df in (("from_arrow", polars_from_arrow(ds.zstrings)), ("DataFrame", pl.DataFrame(ds.zstrings))):
        assert isinstance(df, pl.DataFrame), how
        assert df.columns == list(want), how
        assert {c: df[c].to_list() for c in df.columns} == want, how
        assert df["s"].dtype == pl.String, how
    frame = ds.zstrings  # noqa: F841 - DuckDB finds it by name (its replacement scan takes the C stream)
    rel = duckdb.sql("SELECT * FROM frame")
    assert rel.columns == list(want)
    rows = rel.fetchall()
    assert {c: [r[i] for r in rows] for i, c in enumerate(rel.columns)} == want
    assert duckdb.sql("SELECT count(*) FROM frame WHERE s IS NULL").fetchall() == [(want["s"].count(None),)]


@pytest.mark.parametrize("writer", ["nczarr-netcdf-c", "v3-arrow-optional"])
def test_two_dimensional_variables_flatten_as_to_dataframe(tmp_path, writer, kernels):
    """A (y, c) string variable with missing values, chunked across both axes: the stream's table
    is ``to_dataframe().reset_index()`` in C order, for polars and pandas too."""
    WRITERS[writer](tmp_path / "g.zarr")
    part = _open(tmp_path / "g.zarr")[["grid"]]
    want = _reference_columns(part)
    table = part.zstrings.to_arrow()
    assert table.column_names == list(want) == ["y", "c", "grid"]
    assert {c: table.column(c).to_pylist() for c in table.column_names} == want
    assert polars_from_arrow(part.zstrings)["grid"].to_list() == want["grid"]
    assert pl.DataFrame(part.zstrings)["grid"].to_list() == want["grid"]
    assert plain(part.zstrings.to_dataframe()["grid"]) == want["grid"]


@pytest.mark.parametrize("how", ["dask", "loaded", "dataarray", "dim_order"])
def test_every_route_gives_xarrays_table(store, how, kernels):
    """The Table is ``to_dataframe().reset_index()``'s also when the data is dask (``chunks={}``),
    loaded into memory, a DataArray (``da.zstrings``), or laid out with ``dim_order``; the C stream
    (polars) and ``to_dataframe()`` give the same."""
    ds = xr.open_dataset(store, engine="zstrings", chunks={} if how == "dask" else None)
    obj: Any = _grid_ds(ds).load() if how == "loaded" else _grid_ds(ds)
    kw: dict[str, Any] = {}
    if how == "dataarray":
        obj = ds["s"]
    elif how == "dim_order" and "grid" in ds:
        obj, kw = ds[["grid"]], {"dim_order": ["c", "y"]}
    ref = obj.to_dataframe(**kw)
    want = _reference_columns(obj) if not kw else {str(c): plain(ref.reset_index()[c].to_numpy(dtype=object))
                                                   for c in ref.reset_index().columns}
    table = obj.zstrings.to_arrow(**kw)
    assert table.column_names == list(want)
    assert {c: table.column(c).to_pylist() for c in table.column_names} == want
    if not kw:
        assert {c: pl.DataFrame(obj.zstrings)[c].to_list() for c in want} == want
    frame = obj.zstrings.to_dataframe(**kw)
    pd.testing.assert_index_equal(frame.index, ref.index, exact=False)
    assert {str(c): plain(frame[c]) for c in frame.columns} == {str(c): plain(ref[c]) for c in ref.columns}


def test_a_string_dimension_coordinate_is_its_own_column(store, kernels):
    """A string coordinate made the dimension (its pandas index, as ``to_dataframe`` builds it): the
    Table's first column is that index as large_string; ``to_dataframe()`` keeps xarray's index."""
    ds = _grid_ds(_open(store))
    if "lab" not in ds.coords:
        ds = ds.assign_coords(lab=("x", [f"L{i}" for i in range(ds.sizes["x"])]))
    by_label = ds.swap_dims(x="lab")
    table = by_label.zstrings.to_arrow()
    want = _reference_columns(by_label)
    assert table.column_names[0] == "lab" and table.column_names == list(want)
    assert table.column("lab").type == pa.large_string()
    assert {c: plain(table.column(c).to_pylist()) for c in table.column_names} == want
    frame = by_label.zstrings.to_dataframe()
    pd.testing.assert_index_equal(frame.index, by_label.to_dataframe().index, exact=False)
    assert frame.index.dtype == "str"


# ------------------------------------------------------------------------------------- pandas 3


def test_to_dataframe_is_xarrays_with_arrow_backed_str_columns(store, kernels):
    """``ds.zstrings.to_dataframe()``: xarray's ``to_dataframe()`` (same index, columns, numbers),
    string columns pandas 3 ``str`` backed by Arrow, missing values NaN (``isna``), not "nan"."""
    ds = _grid_ds(_open(store))
    ref = ds.to_dataframe()
    got = ds.zstrings.to_dataframe()
    pd.testing.assert_index_equal(got.index, ref.index, exact=False)
    assert list(got.columns) == list(ref.columns)
    for c in got.columns:
        if c in _strings(ds):
            assert got[c].dtype == pd.StringDtype("pyarrow", na_value=np.nan) == "str", c
            assert isinstance(got[c].array, pd.arrays.ArrowStringArray), c
            assert got[c].isna().tolist() == ref[c].isna().tolist(), c
            assert "nan" not in got[c].dropna().tolist()
        assert plain(got[c]) == plain(ref[c]), c


def test_pandas_shares_the_tables_string_buffers(store, kernels):
    """pandas 3 (``DataFrame.from_arrow`` of the Table and of the C stream) holds the Arrow
    strings as they are: its ``str`` column's Arrow data buffers are the Table's (no copy)."""
    ds = _grid_ds(_open(store))
    table = ds.zstrings.to_arrow()
    ours = _data_buffers(table.column("s"))
    df = pd.DataFrame.from_arrow(table)
    assert df["s"].dtype == "str"
    held = df["s"].array.__arrow_array__()
    assert_shared(_data_buffers(held), ours, "pandas from_arrow")
    assert plain(df["s"]) == table.column("s").to_pylist()
    streamed = pd.DataFrame.from_arrow(ds.zstrings)
    assert list(streamed.columns) == table.column_names
    assert streamed["s"].dtype == "str" and plain(streamed["s"]) == table.column("s").to_pylist()


@pytest.mark.parametrize("writer", ["nczarr-netcdf-c", "v3-arrow-optional"])
def test_the_c_stream_hands_over_arrow_held_strings_without_a_copy(tmp_path, writer, kernels):
    """A Dataset read with ``string_dtype="arrow"`` and loaded holds its 1-D strings as Arrow: the
    accessor's C stream hands those very buffers to pyarrow, polars and pandas (``from_arrow`` and
    ``ds.zstrings.to_dataframe()``, a ``str`` column as for a "T" read), no copy on the way; the
    values are the ``"T"`` read's."""
    WRITERS[writer](tmp_path / "a.zarr")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the 2-D variable is read as "T", with a warning)
        ds = xr.open_dataset(tmp_path / "a.zarr", engine="zstrings", string_dtype="arrow")[["s", "n"]].load()
    held = ds["s"].data.__arrow_array__()
    ours = _data_buffers(held)
    want = plain(_open(tmp_path / "a.zarr")["s"].values)
    assert held.to_pylist() == want
    table = pa.table(ds.zstrings)
    assert_shared(_data_buffers(table.column("s")), ours, "pa.table(ds.zstrings)")
    assert table.column("s").to_pylist() == want
    df = pl.DataFrame(ds.zstrings)
    assert_shared(_polars_buffers(df["s"]), ours, "pl.DataFrame(ds.zstrings)")
    assert df["s"].to_list() == want
    for how, frame in (("pd.DataFrame.from_arrow(ds.zstrings)", pd.DataFrame.from_arrow(ds.zstrings)),
                       ("ds.zstrings.to_dataframe()", ds.zstrings.to_dataframe())):
        assert frame["s"].dtype == "str", how
        assert_shared(_data_buffers(frame["s"].array.__arrow_array__()), ours, how)
        assert plain(frame["s"]) == want, how


# ------------------------------------------------------------------------- arrow_to_stringdtype


def _reference(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """numpy's own construction from Python strings (None made the NA object: numpy would store the
    text "None" for it)."""
    return np.array([np.nan if v is None else v for v in arr.to_pylist()], dtype=NA_T)


_values = st.lists(st.one_of(st.text(st.characters(blacklist_categories=("Cs",)), max_size=20),
                             st.sampled_from(["", "é", "中文字", "😀", "x" * 30]), st.none()), max_size=30)
_types = st.sampled_from([pa.string(), pa.large_string(), pa.string_view()])


def _make(values: list[Any], typ: pa.DataType, shape: str, data: Any) -> pa.Array | pa.ChunkedArray:
    arr = pa.array(values, type=typ)
    if shape == "sliced" and len(values) > 1:
        start = data.draw(st.integers(0, len(values) - 1), label="start")
        return arr.slice(start, data.draw(st.integers(0, len(values) - start), label="length"))
    if shape == "chunked":
        cuts = sorted(data.draw(st.lists(st.integers(0, len(values)), max_size=3), label="cuts"))
        bounds = [0, *cuts, len(values)]
        return pa.chunked_array([arr.slice(a, b - a) for a, b in itertools.pairwise(bounds)], type=typ)
    if shape == "dictionary":
        return arr.dictionary_encode() if not pa.types.is_string_view(typ) else arr
    return arr


@pytest.mark.parametrize("shape", ["array", "sliced", "chunked", "dictionary"])
def test_arrow_to_stringdtype_agrees_with_numpy(shape, kernels):
    """``xr_zstrings.arrow_to_stringdtype`` (string, large_string, string_view; whole, sliced,
    chunked, dictionary-encoded; with nulls) gives numpy's StringDType array of the same values,
    nulls as the NA object; with no nulls a plain ``StringDType()``."""

    @settings(max_examples=40, deadline=None, database=None, phases=[Phase.explicit, Phase.generate, Phase.shrink],
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(values=_values, typ=_types, data=st.data())
    def run(values: list[Any], typ: pa.DataType, data: Any) -> None:
        arr = _make(values, typ, shape, data)
        got = xr_zstrings.arrow_to_stringdtype(arr)
        want = _reference(arr)
        assert isinstance(got, np.ndarray) and got.ndim == 1
        assert got.dtype == (NA_T if arr.null_count else np.dtypes.StringDType())
        assert plain(got) == plain(want)
        assert [isinstance(v, float) for v in got.tolist()] == [v is None for v in arr.to_pylist()]

    run()


def test_arrow_to_stringdtype_dtype_choice(kernels):
    """An explicit dtype's NA object stands for nulls; a dtype with none, with nulls present, is a
    ValueError that names the fix."""
    arr = pa.chunked_array([pa.array(["a", None], type=pa.large_string()), pa.array(["é"], type=pa.large_string())])
    na_none = np.dtypes.StringDType(na_object=None)
    got = xr_zstrings.arrow_to_stringdtype(arr, dtype=na_none)
    assert got.dtype == na_none and got.tolist() == ["a", None, "é"]
    with pytest.raises(ValueError, match="na_object"):
        xr_zstrings.arrow_to_stringdtype(arr, dtype=np.dtypes.StringDType())
    assert xr_zstrings.arrow_to_stringdtype(arr.filter(pa.array([True, False, True])),
                                            dtype=np.dtypes.StringDType()).tolist() == ["a", "é"]


def test_arrow_to_stringdtype_reads_zarr_python_strings(tmp_path, kernels):
    """The Arrow strings a peer hands over (zarr-python's v3 strings through pyarrow) come back as
    the StringDType array zarr-python itself gives."""
    a = zarr.open_group(tmp_path / "p.zarr", mode="w", zarr_format=3).create_array(
        "s", shape=(len(LABELS),), chunks=(4,), dtype=str)
    a[:] = np.array(["" if v is None else v for v in LABELS], dtype=object)
    theirs = a[:]
    got = xr_zstrings.arrow_to_stringdtype(pa.array(theirs.tolist(), type=pa.string_view()))
    assert got.dtype == np.dtypes.StringDType() and got.tolist() == theirs.tolist()
