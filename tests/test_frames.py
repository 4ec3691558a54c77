"""``ds.zstrings.to_arrow()`` / ``.to_dataframe()`` / the Arrow C stream (xr_zstrings.frames, issue 39)
against xarray's own ``to_dataframe()`` on stores real writers made (netcdf-c through netCDF4 for
NCZarr, xarray with zarr-python for Zarr v2 and v3), and the hand-off to pandas, polars, DuckDB and
pyarrow checked by the buffers they hold.
"""

from __future__ import annotations

import math
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
from hypothesis import given, settings
from hypothesis import strategies as st
from peers import nc_url
from zarr.storage import LocalStore, WrapperStore

from xr_zstrings import frames

STR = pd.StringDtype("pyarrow", na_value=np.nan)  # pandas 3's default ``str``
NA_T = np.dtypes.StringDType(na_object=np.nan)


def _netcdf_c_store(path: Path) -> None:
    """NCZarr by netcdf-c: a string dimension coordinate ``x``, a dimension without one (``y``),
    a string non-index coordinate ``kind(y)``, NC_STRING ``label(x)`` with missing values (its
    fill written and chunks never written), ``name(y, x)`` (the frame is (x, y): reordered),
    ``flip(x, y)``, CF-scaled ``temp`` with a masked value and decoded times."""
    with netCDF4.Dataset(nc_url(path), "w") as nc:
        nc.createDimension("y", 3)
        nc.createDimension("x", 5)
        nc.createVariable("x", str, ("x",))[:] = np.array(["a", "bé", "東京", "d", ""], dtype=object)
        nc.createVariable("kind", str, ("y",))[:] = np.array(["p", "q", "r"], dtype=object)
        label = nc.createVariable("label", str, ("x",), fill_value="-", chunksizes=(2,))
        label[0], label[1], label[3] = "one", "-", "four"
        name = nc.createVariable("name", str, ("y", "x"), chunksizes=(2, 2))
        name[:] = np.array([[f"n{i}{j}" * (i + 1) for j in range(5)] for i in range(3)], dtype=object)
        nc.createVariable("flip", str, ("x", "y"))[:] = np.array([[f"f{j}{i}" for i in range(3)] for j in range(5)],
                                                                   dtype=object)
        temp = nc.createVariable("temp", "i2", ("y", "x"), fill_value=-999)
        temp.scale_factor = 0.5
        temp.coordinates = "kind"
        temp[:] = np.arange(15).reshape(3, 5)
        temp[1, 1] = np.ma.masked
        time = nc.createVariable("time", "f8", ("y",))
        time.units = "days since 2026-01-01"
        time[:] = [0, 1, 2.5]


def _xarray_store(src: Path, path: Path, zarr_format: int) -> None:
    """The same Dataset written by xarray (zarr-python): text as vlen-utf8 (object values), a
    missing label as None (v2: its last chunk holds only missing values: never written, the null fill)."""
    ds = xr.open_dataset(src, engine="zstrings").load()
    for v in ds.variables.values():
        v.encoding = {}
    ds = ds.map(lambda v: v.astype(object) if v.dtype.kind == "T" else v)
    ds = ds.assign_coords(kind=ds.kind.astype(object))
    ds["label"] = ds.label.where(ds.label.notnull(), None)
    ds.to_zarr(path, zarr_format=zarr_format, consolidated=False,
               encoding={"label": {"chunks": (2,)}, "name": {"chunks": (2, 2)}})


@pytest.fixture(scope="module", params=["nczarr", "v2", "v3"])
def store(request, tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("frames")
    _netcdf_c_store(base / "nczarr.zarr")
    if request.param == "nczarr":
        return base / "nczarr.zarr"
    path = base / f"{request.param}.zarr"
    _xarray_store(base / "nczarr.zarr", path, int(request.param[1]))
    return path


def _open(path: Path) -> xr.Dataset:
    return xr.open_dataset(path, engine="zstrings")


def _plain(values: Any) -> list[Any]:
    """A comparable list, every missing value (NaN, None, NA) as None."""
    return [None if v is None or v is pd.NA or (isinstance(v, float) and v != v) else v
            for v in np.asarray(values, dtype=object).tolist()]


def _assert_frame_as_xarray(ours: pd.DataFrame, ref: pd.DataFrame) -> None:
    """Same columns and index as xarray's frame; its object (text) columns are ``str`` here with the
    same values and the same missing ones, other columns equal with their dtype."""
    assert list(ours.columns) == list(ref.columns)
    pd.testing.assert_index_equal(ours.index, ref.index, exact=True)
    for c in ref.columns:
        if ref[c].dtype == object:
            assert ours[c].dtype == STR, c
            assert isinstance(ours[c].array, pd.arrays.ArrowStringArray), c
            assert _plain(ours[c]) == _plain(ref[c]), c
        else:
            pd.testing.assert_series_equal(ours[c], ref[c], check_exact=True)


def _assert_table_as_xarray(table: pa.Table, ref: pd.DataFrame) -> None:
    """The Table holds ``ref.reset_index()``'s columns: same names and order, text as
    ``large_string`` with nulls where ``ref`` is missing, numbers and times equal (NaN kept)."""
    flat = ref.reset_index()
    assert table.column_names == [str(c) for c in flat.columns]
    for c in flat.columns:
        col = table[str(c)]
        if flat[c].dtype == object or flat[c].dtype == STR:
            assert col.type == pa.large_string(), c
            assert col.to_pylist() == _plain(flat[c]), c
        else:
            assert col.type == pa.from_numpy_dtype(flat[c].dtype), c
            np.testing.assert_array_equal(col.to_numpy(), flat[c].to_numpy(), strict=True)


def _assert_same_table(a: pa.Table, b: pa.Table) -> None:
    """Same schema and values (NaN equal to NaN, which ``Table.equals`` does not hold)."""
    assert a.schema == b.schema
    for c in a.column_names:
        assert _plain(a[c].to_pylist()) == _plain(b[c].to_pylist()), c


def _select(ds: xr.Dataset, select: str) -> xr.Dataset:
    return {"all": ds, "1-D": ds[["label"]], "2-D text only": ds[["name", "flip"]]}[select]


@pytest.mark.parametrize("select", ["all", "1-D", "2-D text only"])
def test_frames_match_xarray_to_dataframe(store, select):
    """Each result from its own freshly opened (lazy) Dataset: xarray's ``to_dataframe`` loads the
    values it reads into the Dataset."""
    ref = _select(_open(store), select).to_dataframe()
    _assert_frame_as_xarray(frames.to_dataframe(_select(_open(store), select)), ref)
    _assert_table_as_xarray(_select(_open(store), select).zstrings.to_arrow(), ref)


@pytest.mark.parametrize("store", ["nczarr", "v2"], indirect=True)
def test_missing_text_is_missing(store):
    """Masked text (the fill written, chunks never written) is null in Arrow and NaN in ``str``:
    never the fill's text."""
    ds = _open(store)
    expect = _plain(ds.label.values)
    assert None in expect
    assert frames.to_arrow(ds[["label"]])["label"].to_pylist() == expect
    assert _plain(frames.to_dataframe(ds[["label"]])["label"]) == expect


def test_dim_order_as_xarray(store):
    ref = _open(store).to_dataframe(dim_order=["y", "x"])
    _assert_frame_as_xarray(frames.to_dataframe(_open(store), dim_order=["y", "x"]), ref)
    _assert_table_as_xarray(frames.to_arrow(_open(store), dim_order=["y", "x"]), ref)
    with pytest.raises(ValueError, match="dim_order"):
        frames.to_arrow(_open(store), dim_order=["x"])


def test_dataarray_as_xarray(store):
    da = _open(store).name
    ref = _open(store).name.to_dataframe()
    _assert_frame_as_xarray(da.zstrings.to_dataframe(), ref)
    _assert_table_as_xarray(_open(store).name.zstrings.to_arrow(), ref)


def test_dataarray_stream_as_xarrays_own(store):
    """xarray's ``DataArray.__arrow_c_stream__`` (its coordinates, then the values; text as
    ``string``) holds the same rows as ours (text as ``large_string``), which adds what
    ``to_dataframe().reset_index()`` adds: a column for the dimension without a coordinate."""
    theirs = pa.table(_open(store).temp.load())
    ours = pa.table(_open(store).temp.zstrings)
    assert sorted(ours.column_names) == sorted([*theirs.column_names, "y"])
    for c in theirs.column_names:
        assert _plain(ours[c].to_pylist()) == _plain(theirs[c].to_pylist()), c
    unnamed = _open(store).name.load().rename(None)
    assert pa.table(unnamed.zstrings).column_names == list(unnamed.rename("values").to_dataframe().reset_index().columns)
    assert pa.table(unnamed.zstrings)["values"].to_pylist() == pa.table(unnamed)["values"].to_pylist()
    with pytest.raises(ValueError, match="unnamed DataArray"):
        unnamed.zstrings.to_dataframe()


class _Recording(WrapperStore):
    """A local store that records the keys read through it (chunks included)."""

    def __init__(self, store: Any) -> None:
        super().__init__(store)
        self.keys: list[str] = []

    async def get(self, key, prototype=None, byte_range=None):  # type: ignore[no-untyped-def]
        self.keys.append(key)
        return await self._store.get(key, prototype, byte_range)

    async def get_partial_values(self, prototype, key_ranges):  # type: ignore[no-untyped-def]
        key_ranges = list(key_ranges)
        self.keys += [k for k, _ in key_ranges]
        return await self._store.get_partial_values(prototype, key_ranges)


def _forty() -> np.ndarray:
    """Strings longer than 12 bytes (polars keeps shorter ones inside its views, not in a data buffer)."""
    return np.array([f"value number {i:04d}" for i in range(40)], dtype=object)


@pytest.fixture(scope="module")
def forty(tmp_path_factory) -> Path:
    """40 strings in chunks of 10 (v3 vlen-utf8, by xarray) and a number beside them."""
    path = tmp_path_factory.mktemp("forty") / "s.zarr"
    xr.Dataset({"s": ("x", _forty()),
                "f": ("x", np.arange(40.0))}).to_zarr(
        path, zarr_format=3, consolidated=False, encoding={"s": {"chunks": (10,)}, "f": {"chunks": (10,)}})
    return path


@pytest.mark.parametrize(("sel", "chunks"), [(slice(12, 18), {1}), (slice(5, 25, 3), {0, 1, 2}),
                                            ([31, 2, 33], {0, 3}), ([7], {0})])
def test_a_lazy_selection_reads_only_its_chunks(forty, sel, chunks):
    rec = _Recording(LocalStore(forty, read_only=True))
    ds = xr.open_dataset(rec, engine="zstrings")
    rec.keys.clear()
    table = ds.isel(x=sel).zstrings.to_arrow()
    assert {k for k in rec.keys if k.startswith("s/")} == {f"s/c/{i}" for i in chunks}
    expect = _forty()[sel]
    assert table["s"].to_pylist() == np.atleast_1d(expect).tolist()


@pytest.mark.parametrize("store", ["nczarr"], indirect=True)
def test_the_lazy_source_under_the_installed_xarray(forty, store):
    """Pins ``frames.lazy_source`` to the installed xarray's lazy wrappers: a fresh or outer-selected
    variable is found with its selection; loaded, dask, in-memory, vectorized or transposed ones are
    not (they go through their values). Fails when xarray changes its wrappers: the results stay
    right (test_results_do_not_depend_on_the_lazy_source), only slower."""
    ds = xr.open_dataset(forty, engine="zstrings")
    found = frames.lazy_source(ds.s.variable)
    assert found is not None and found[1].tuple == (slice(None),)
    assert found[0].shape == (40,)
    found = frames.lazy_source(ds.isel(x=slice(12, 18)).s.variable)
    assert found is not None and found[1].tuple == (slice(12, 18, 1),)
    found = frames.lazy_source(ds.isel(x=[3, 1]).s.variable)
    assert found is not None and [list(k) for k in found[1].tuple] == [[3, 1]]
    assert frames.lazy_source(ds.chunk(x=10).s.variable) is None
    assert frames.lazy_source(ds.s.load().variable) is None
    assert frames.lazy_source(xr.Variable("x", np.array(["a"], dtype=NA_T))) is None
    two = _open(store)
    assert frames.lazy_source(two.name.variable) is not None
    assert frames.lazy_source(two.name.T.variable) is None
    assert frames.lazy_source(two.temp.variable) is None  # (CF decoding's wrapper: the values serve)
    assert frames.lazy_source(two.name.variable[xr.Variable("p", [0, 1]), xr.Variable("p", [1, 2])]) is None


def test_results_do_not_depend_on_the_lazy_source(store, monkeypatch):
    """Without the store route (what a change of xarray's wrappers would do) every column is the same."""
    direct = frames.to_arrow(_open(store).isel(x=slice(1, 4)))
    monkeypatch.setattr(frames, "lazy_source", lambda variable: None)
    _assert_same_table(frames.to_arrow(_open(store).isel(x=slice(1, 4))), direct)


def test_the_store_route_reads_text_as_arrow(forty, monkeypatch):
    """A lazy text variable is read by the backend's Arrow read; not through its numpy values."""
    ds = xr.open_dataset(forty, engine="zstrings")
    backend, _ = frames.lazy_source(ds.s.variable)  # type: ignore[misc]
    calls: list[Any] = []
    read = type(backend).arrow

    def spy(self, key):  # type: ignore[no-untyped-def]
        calls.append(key)
        return read(self, key)

    monkeypatch.setattr(type(backend), "arrow", spy)
    numpy_read = type(backend).__getitem__

    def no_text_as_numpy(self, key):  # type: ignore[no-untyped-def]
        assert self.dtype.kind != "T", "text read as numpy"
        return numpy_read(self, key)

    monkeypatch.setattr(type(backend), "__getitem__", no_text_as_numpy)
    table = ds.isel(x=slice(3, 30)).zstrings.to_arrow()
    assert [k.tuple for k in calls] == [(slice(3, 30, 1),)]
    assert table["s"].to_pylist() == _forty()[3:30].tolist()


def _data_buffers(col: pa.ChunkedArray | pa.Array) -> list[int]:
    """The addresses of a string column's data buffers (one per chunk; a view array's variadic ones)."""
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    if pa.types.is_string_view(col.type):
        return [b.address for c in chunks for b in c.buffers()[2:] if b is not None and b.size]
    return [c.buffers()[2].address for c in chunks]


def _capture_tables(monkeypatch) -> list[pa.Table]:
    """Every Table ``frames.to_arrow`` returns (the stream's included)."""
    made: list[pa.Table] = []
    build = frames.to_arrow

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        made.append(build(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(frames, "to_arrow", spy)
    return made


def test_polars_holds_the_tables_buffers(forty, monkeypatch):
    """polars (its strings are Arrow views) takes the Table's data buffers as they are, from the
    Table and from the C stream; numbers too."""
    table = xr.open_dataset(forty, engine="zstrings").zstrings.to_arrow()
    got = pl.from_arrow(table, rechunk=False)
    assert _data_buffers(got["s"].to_arrow(compat_level=pl.CompatLevel.newest())) == _data_buffers(table["s"])
    first = got["f"].get_chunks()[0].to_arrow()  # (polars splits it as the Table's record batches)
    assert first.buffers()[1].address == table["f"].chunks[0].buffers()[1].address
    made = _capture_tables(monkeypatch)
    streamed = pl.DataFrame(xr.open_dataset(forty, engine="zstrings").zstrings)
    (table,) = made
    assert _data_buffers(streamed["s"].to_arrow(compat_level=pl.CompatLevel.newest())) == _data_buffers(table["s"])
    assert streamed["s"].to_list() == table["s"].to_pylist()
    assert pl.from_arrow(xr.open_dataset(forty, engine="zstrings").zstrings).struct.unnest().equals(streamed)


def test_pandas_holds_the_arrow_buffers(forty, monkeypatch):
    """The ``str`` column of ``to_dataframe`` holds the very Arrow buffers read from the store; a
    1-D number column is xarray's values, not a copy of them (xarray's own frame copies)."""
    made: list[Any] = []
    column = frames._Frame.arrow_column

    def spy(self, name):  # type: ignore[no-untyped-def]
        made.append(column(self, name))
        return made[-1]

    monkeypatch.setattr(frames._Frame, "arrow_column", spy)
    ds = xr.open_dataset(forty, engine="zstrings").load()  # (so that ds.f.values is what was read)
    df = frames.to_dataframe(ds)
    (text,) = made
    held = pa.array(df["s"].array)
    assert _data_buffers(held) == _data_buffers(text)
    assert np.shares_memory(df["f"].to_numpy(), ds.f.values)
    assert not np.shares_memory(ds.to_dataframe()["f"].to_numpy(), ds.f.values)
    assert frames.to_arrow(ds)["f"].chunks[0].buffers()[1].address == ds.f.values.ctypes.data


def test_pyarrow_and_duckdb_read_the_stream(store):
    ds = _open(store)
    _assert_same_table(pa.table(ds.zstrings), _open(store).zstrings.to_arrow())
    assert frames._Frame.of(_open(store), None).schema() == pa.table(ds.zstrings).schema  # (known before reading)
    asked = pa.schema([f.with_type(pa.string()) if f.type == pa.large_string() else f for f in pa.table(ds.zstrings).schema])
    cast = pa.RecordBatchReader.from_stream(_open(store).zstrings, schema=asked).read_all()
    assert cast.schema == asked and cast["label"].to_pylist() == pa.table(ds.zstrings)["label"].to_pylist()
    z = _open(store).zstrings  # noqa: F841 - DuckDB finds it by its name
    rows = duckdb.sql("SELECT x, count(*) AS n, count(label) AS labels FROM z GROUP BY x ORDER BY x").fetchall()
    ref = _open(store).to_dataframe().reset_index()
    expect = sorted((x, int((ref.x == x).sum()), int(ref.label[ref.x == x].notna().sum())) for x in set(ref.x))
    assert rows == expect


def test_duckdb_reads_the_store_once_a_query(forty):
    """DuckDB asks for the C stream three times a query (binding, then scanning) and pulls one: the
    stream carries its schema and reads on the first pull, so each chunk is read once."""
    rec = _Recording(LocalStore(forty, read_only=True))
    ds = xr.open_dataset(rec, engine="zstrings")
    rec.keys.clear()
    z = ds.zstrings  # noqa: F841 - DuckDB finds it by its name
    assert duckdb.sql("SELECT count(*), min(s) FROM z").fetchall() == [(40, _forty()[0])]
    assert sorted(k for k in rec.keys if k.startswith("s/")) == [f"s/c/{i}" for i in range(4)]


@pytest.mark.parametrize("how", ["StringDType NA", "object", "<U", "dask"])
def test_in_memory_and_dask_data_fall_back(how):
    """Values already in memory (or dask) go through pyarrow's conversion: same frame as xarray's."""
    values = np.array(["a", np.nan, "東京", ""], dtype=NA_T)
    data = {"StringDType NA": values, "object": values.astype(object), "<U": np.array(["a", "b", "東京", ""]),
            "dask": values}[how]
    ds = xr.Dataset({"s": (("x",), data), "n": (("x", "y"), np.arange(8.0).reshape(4, 2)),
                     "one": ((), np.array("const", dtype=NA_T))},  # (a scalar: broadcast to every row)
                    coords={"x": [10, 20, 30, 40], "c": ("y", np.array(["p", "q"], dtype=object))})
    if how == "dask":
        ds = ds.chunk(x=2)
        assert frames.lazy_source(ds.s.variable) is None
    _assert_frame_as_xarray(frames.to_dataframe(ds), ds.to_dataframe())
    _assert_table_as_xarray(frames.to_arrow(ds), ds.to_dataframe())
    _assert_same_table(pa.table(ds.zstrings), frames.to_arrow(ds))  # (object values: no schema before reading)


def test_bytes_are_large_binary():
    """Bytes values (``|S``, or bytes objects) are ``large_binary`` in Arrow and ArrowDtype in pandas."""
    ds = xr.Dataset({"b": ("x", np.array([b"a", b"\xff", b""])), "o": ("x", np.array([b"x", None, b"z"], dtype=object))})
    table = frames.to_arrow(ds)
    assert table.schema.types[1:] == [pa.large_binary(), pa.large_binary()]
    assert table["b"].to_pylist() == [b"a", b"\xff", b""] and table["o"].to_pylist() == [b"x", None, b"z"]
    df = frames.to_dataframe(ds)
    assert df["b"].dtype == pd.ArrowDtype(pa.large_binary())
    assert df["o"].tolist()[:1] == [b"x"] and pd.isna(df["o"].iloc[1])


def test_what_frames_refuse():
    tree = xr.DataTree(xr.Dataset({"s": ("x", ["a"])}))
    with pytest.raises(TypeError, match="DataTree"):
        tree.zstrings.to_arrow()
    with pytest.raises(ValueError, match="scalar"):
        xr.DataArray("a", name="s").zstrings.to_arrow()
    odd = np.array([object(), object()])
    with pytest.raises(TypeError, match="'t'.*object"):
        frames.to_arrow(xr.Dataset({"t": ("x", odd)}))
    dates = xr.date_range("2000-01-01", periods=3, calendar="noleap", use_cftime=True)
    cf = xr.Dataset({"v": ("time", [1, 2, 3])}, coords={"time": dates, "c": ("time", np.asarray(dates))})
    with pytest.raises(TypeError, match="index 'time'.*DatetimeNoLeap.*convert_calendar"):
        frames.to_arrow(cf)
    with pytest.raises(TypeError, match="variable 'time'.*DatetimeNoLeap"):
        frames.to_arrow(cf.drop_indexes("time"))
    pd.testing.assert_frame_equal(frames.to_dataframe(cf), cf.to_dataframe())  # (objects Arrow has no type for: as xarray)


def _open_arrow(path: Path) -> xr.Dataset:
    with pytest.warns(UserWarning, match="2-D.*read as numpy arrays"):  # (name, flip: xarray holds 1-D ones only)
        return xr.open_dataset(path, engine="zstrings", string_dtype="arrow")


def test_arrow_backed_variables_as_xarray(store):
    """``string_dtype="arrow"`` (1-D text as pandas Arrow arrays in xarray): those columns become
    ``str`` too (xarray's frame keeps their ArrowDtype), as the N-D text left StringDType does."""
    ref = _open_arrow(store).to_dataframe()
    got = frames.to_dataframe(_open_arrow(store))
    assert ref["label"].dtype == pd.ArrowDtype(pa.large_string())
    assert got["label"].dtype == STR
    assert got["name"].dtype == STR
    assert list(got.columns) == list(ref.columns)
    pd.testing.assert_index_equal(got.index, ref.index)
    for c in ref.columns:
        assert _plain(got[c]) == _plain(ref[c]), c
    table = _open_arrow(store).zstrings.to_arrow()
    assert table["label"].type == pa.large_string()
    assert table["label"].to_pylist() == _plain(ref.reset_index()["label"])


def test_a_stacked_dimension_as_xarray():
    """A MultiIndex (``stack``): its levels are index columns, as ``reset_index`` makes them."""
    ds = xr.Dataset({"s": (("a", "b"), np.array([["p", "q"], ["r", np.nan]], dtype=NA_T)),
                     "n": (("a", "b"), np.arange(4).reshape(2, 2))},
                    coords={"a": ["x", "y"], "b": [1, 2]}).stack(z=("a", "b"))
    _assert_frame_as_xarray(frames.to_dataframe(ds), ds.to_dataframe())
    _assert_table_as_xarray(frames.to_arrow(ds), ds.to_dataframe())


@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_any_dims_and_order_as_xarray(data):
    """Random dimensions (sizes 1-3; c: 0-3), text variables over random subsets of them in random order,
    a random ``dim_order``: the same rows as xarray's ``to_dataframe()`` (in-memory values)."""
    dims = ["a", "b", "c"][: data.draw(st.integers(2, 3))]
    sizes = {d: data.draw(st.integers(0 if d == "c" else 1, 3)) for d in dims}
    text = st.one_of(st.none(), st.text(max_size=4))
    variables = {}
    for i in range(data.draw(st.integers(1, 3))):
        vdims = data.draw(st.permutations(dims).flatmap(lambda p: st.integers(0, len(p)).map(lambda k: p[:k])))
        n = math.prod(sizes[d] for d in vdims)
        values = [np.nan if v is None else v for v in data.draw(st.lists(text, min_size=n, max_size=n))]
        variables[f"v{i}"] = (tuple(vdims), np.array(values, dtype=NA_T).reshape([sizes[d] for d in vdims]))
    variables["n"] = (tuple(dims), np.arange(math.prod(sizes.values()), dtype="f4").reshape(list(sizes.values())))
    ds = xr.Dataset(variables, coords={"a": np.arange(sizes["a"]) * 10})
    order = data.draw(st.permutations(list(ds.dims)))
    ref = ds.to_dataframe(dim_order=order)
    _assert_frame_as_xarray(frames.to_dataframe(ds, dim_order=order), ref)
    table = frames.to_arrow(ds, dim_order=order)
    _assert_table_as_xarray(table, ref)
    assert frames._Frame.of(ds, order).schema() == table.schema  # (the stream's, known before reading)


class _Pandas22StringDtype(pd.StringDtype):
    """pandas 2.1-2.2's ``StringDtype``: no ``na_value``; its ``str`` is spelled ``"pyarrow_numpy"``."""

    def __init__(self, storage: Any = None, **kwargs: Any) -> None:
        if kwargs:
            raise TypeError(f"StringDtype.__init__() got an unexpected keyword argument {next(iter(kwargs))!r}")
        if storage == "pyarrow_numpy":
            super().__init__("pyarrow", na_value=np.nan)
        else:
            super().__init__(storage)


def test_to_dataframe_on_pandas_before_2_3(store, monkeypatch):
    """pyproject does not pin pandas and xarray allows 2.2: there ``to_dataframe`` spells ``str``
    ``StringDtype("pyarrow_numpy")`` (``StringDtype(na_value=...)`` raised TypeError), same values
    and buffers. (Checked against the real pandas 2.2.3 and 2.3.3 wheels when written.)"""
    ref = _open(store)[["label"]].to_dataframe()
    monkeypatch.setattr(pd, "StringDtype", _Pandas22StringDtype)
    made: list[Any] = []
    column = frames._Frame.arrow_column
    monkeypatch.setattr(frames._Frame, "arrow_column", lambda self, name: made.append(column(self, name)) or made[-1])
    df = frames.to_dataframe(_open(store)[["label"]])
    assert type(df["label"].dtype) is _Pandas22StringDtype and np.isnan(df["label"].dtype.na_value)
    assert _plain(df["label"]) == _plain(ref["label"])
    (text,) = made
    assert _data_buffers(pa.array(df["label"].array)) == _data_buffers(text)
