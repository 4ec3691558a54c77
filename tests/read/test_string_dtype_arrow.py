"""``xr.open_dataset(..., engine="zstrings", string_dtype="arrow")``: 1-D string and bytes variables
as pandas ``ArrowDtype`` arrays (docs/guide.md, "string_dtype"; what xarray holds:
docs/format-notes.md, "pandas extension arrays in xarray").

Stores written by the peers (netcdf-c through netCDF4, zarr-python, xarray's engine="zarr"); every
value compared with what ``string_dtype="T"`` reads from the same store; what is written back is
read by netCDF4 and zarr-python. Both with the compiled kernels and without them.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import netCDF4
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import xarray as xr
import zarr
from peers import nc_url

import xr_zstrings
from xr_zstrings import ZStringsError, numpy_strings
from xr_zstrings.read.chunked import ChunkedArray
from xr_zstrings.read.lazy import LazyArray
from xr_zstrings.text.dtypes import resolve_string_dtype

STR = pd.ArrowDtype(pa.large_string())
BIN = pd.ArrowDtype(pa.large_binary())
LABELS = ["p", "q", "ré", "s", "t", "u"]


def _netcdf_c(path: Path) -> Path:
    """An NCZarr store netcdf-c wrote: a string dimension coordinate ``x``, NC_STRING ``s`` with a
    fill (one chunk never written, one value written as the fill: both missing), NC_CHAR ``c`` (joined
    to 1-D text), a 2-D NC_STRING ``m``, a scalar one ``title`` and a number ``n``."""
    with netCDF4.Dataset(nc_url(path), "w") as nc:
        nc.createDimension("x", 6)
        nc.createDimension("y", 2)
        nc.createDimension("nchar", 3)
        x = nc.createVariable("x", str, ("x",))
        x[:] = np.array(LABELS, dtype=object)
        s = nc.createVariable("s", str, ("x",), fill_value="N/A", chunksizes=(2,))
        s[0], s[1], s[2], s[3] = "a", "é", "N/A", "bb"  # 4-5 never written
        c = nc.createVariable("c", "S1", ("x", "nchar"))
        c._Encoding = "utf-8"
        c[:] = np.array(["ab", "c", "dé", "", "x", "yz"], dtype="U3")
        m = nc.createVariable("m", str, ("x", "y"))
        m[:] = np.array([[f"{i}{j}" for j in range(2)] for i in range(6)], dtype=object)
        n = nc.createVariable("n", "i4", ("x",))
        n[:] = np.arange(6)
        title = nc.createVariable("title", str, ())
        title[0] = "hello"
    return path


def _zarr_v3(path: Path) -> Path:
    """A Zarr v3 store xarray's engine="zarr" wrote (vlen-utf8 strings, a string index)."""
    ds = xr.Dataset({"s": ("x", np.array(["a", "é", "", "bb", "ccc", "d"], dtype=np.dtypes.StringDType())),
                     "n": ("x", np.arange(6))},
                    coords={"x": np.array(LABELS, dtype=np.dtypes.StringDType())})
    ds.to_zarr(path, zarr_format=3, mode="w", encoding={"s": {"chunks": (2,)}})
    return path


def _zarr_v2_bytes(path: Path) -> Path:
    """A pure Zarr v2 store zarr-python wrote: ``|S3`` bytes (returned as stored) beside text; ``b``
    without a fill value, ``f`` with ``b"x"``, which xarray's CF decoding masks (as a value written
    equal to it and a chunk never written)."""
    g = zarr.open_group(path, mode="w", zarr_format=2)
    b = g.create_array("b", shape=(6,), chunks=(4,), dtype="S3", fill_value=None)
    b[:] = np.array([b"ab", b"", b"\xff\x00z", b"q", b"rs", b"t"], dtype="S3")
    b.attrs["_ARRAY_DIMENSIONS"] = ["x"]
    f = g.create_array("f", shape=(6,), chunks=(4,), dtype="S3", fill_value=b"x")
    f[:4] = np.array([b"ab", b"x", b"", b"\x00q"], dtype="S3")
    f.attrs["_ARRAY_DIMENSIONS"] = ["x"]
    x = g.create_array("x", shape=(6,), chunks=(6,), dtype=str)
    x[:] = np.array(LABELS, dtype=object)
    x.attrs["_ARRAY_DIMENSIONS"] = ["x"]
    return path


def _unicode(zarr_format: int) -> Any:
    """Fixed-width UTF-32 strings xarray's engine="zarr" wrote from ``<U`` (Zarr v2 ``<U``, Zarr v3
    ``fixed_length_utf32``)."""

    def write(path: Path) -> Path:
        ds = xr.Dataset({"s": ("x", np.array(["a", "é", "", "bb", "東京", "d"], dtype="U2"))},
                        coords={"x": np.array(LABELS, dtype="U2")})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (zarr-python: fixed_length_utf32 is not in the v3 spec)
            ds.to_zarr(path, zarr_format=zarr_format, mode="w", encoding={"s": {"chunks": (4,)}})
        return path

    return write


STORES = {"nczarr": _netcdf_c, "zarr3": _zarr_v3, "zarr2-bytes": _zarr_v2_bytes, "zarr2-unicode": _unicode(2),
          "zarr3-utf32": _unicode(3)}


@pytest.fixture(params=sorted(STORES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    return STORES[request.param](tmp_path / f"{request.param}.zarr")


def _open(store: Path, **kwargs: Any) -> xr.Dataset:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the 2-D variable's warning: its own test)
        return xr.open_dataset(store, engine="zstrings", **kwargs)


def _plain(values: Any) -> list[Any]:
    """Comparable values: every missing value (NaN, None, pd.NA) as None, bytes and str as they are."""
    out = []
    for v in np.asarray(values, dtype=object).reshape(-1).tolist():
        out.append(None if v is None or v is pd.NA or (isinstance(v, float) and v != v) else v)
    return out


def _one_d_strings(ds: xr.Dataset) -> list[str]:
    """The 1-D string variables but the dimension coordinates (their own test)."""
    return [str(k) for k, v in ds.variables.items() if v.ndim == 1 and v.dtype.kind in "TSO" and v.dims != (k,)]


def test_1d_strings_are_arrow_and_equal_the_T_read(store: Path, kernels: str) -> None:
    t = _open(store)
    a = _open(store, string_dtype="arrow")
    names = _one_d_strings(t)
    assert names, "the store has 1-D string variables"
    for name in names:
        want = STR if t[name].dtype.kind == "T" else BIN
        assert a[name].dtype == want, name
        assert _plain(a[name].values) == _plain(t[name].values), name
    assert {k: v.dtype for k, v in a.variables.items() if k not in names} == \
        {k: v.dtype for k, v in t.variables.items() if k not in names}


def test_the_index_of_a_string_dimension_is_pandas_str_over_the_arrow_read(store: Path, kernels: str) -> None:
    """pandas 3's ``str`` (Arrow-backed, NaN missing) built on the Arrow arrays read, no copy; the
    coordinate Variable keeps the "T" dtype, since xarray cannot align an extension-dtype index."""
    t = _open(store)
    a = _open(store, string_dtype="arrow")
    index = a.indexes["x"]
    assert index.dtype == pd.StringDtype("pyarrow", na_value=np.nan)
    assert index.array.__arrow_array__().type == pa.large_string()
    assert index.tolist() == t.indexes["x"].tolist() == LABELS
    assert a["x"].dtype == t["x"].dtype
    assert a["x"].values.tolist() == LABELS


def test_the_index_is_built_without_a_numpy_conversion(tmp_path: Path) -> None:
    """The index of a string dimension is made from the Arrow read as it is: xarray's own index
    creation would turn it into numpy objects and back (seconds for millions of labels)."""
    store = _netcdf_c(tmp_path / "s.zarr")
    with pytest.MonkeyPatch.context() as mp:
        def to_numpy(self: Any, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("an Arrow array converted to numpy while opening")

        mp.setattr(pd.arrays.ArrowExtensionArray, "__array__", to_numpy)
        mp.setattr(pd.arrays.ArrowExtensionArray, "to_numpy", to_numpy)
        a = _open(store, string_dtype="arrow")
    assert a.indexes["x"].tolist() == LABELS
    assert a.sel(x="ré")["s"].values.item() is pd.NA  # (written equal to the fill)
    # made by the backend, so also where xarray is asked to make none (docs/guide.md says so)
    assert list(_open(store, string_dtype="arrow", create_default_indexes=False).indexes) == ["x"]


def test_loaded_arrow_variables_align_and_reindex(tmp_path: Path) -> None:
    store = _netcdf_c(tmp_path / "s.zarr")
    a = _open(store, string_dtype="arrow").drop_vars("m").load()
    left, right = xr.align(a, a.isel(x=[4, 1]), join="inner")
    assert left.indexes["x"].tolist() == ["q", "t"] and right["s"].dtype == STR
    got = a.reindex(x=["s", "zz", "p"])["s"]
    assert got.dtype == STR
    assert _plain(got.values) == ["bb", None, "a"]  # (as written by netcdf-c above; "T" cannot reindex here:
    # xarray 2026.9 fills with NaN, which a StringDType without an NA object refuses)
    both = xr.concat([a, a], "x", data_vars="minimal")
    assert both["s"].dtype == STR
    assert _plain([both["s"].isel(x=7).values]) == ["é"]  # one value of the combined Arrow array


def test_masked_bytes_are_arrow_nulls(tmp_path: Path, kernels: str) -> None:
    """Bytes whose fill xarray's CF decoding masks: the same values missing as in the "T" read."""
    store = _zarr_v2_bytes(tmp_path / "b.zarr")
    got = _open(store, string_dtype="arrow")["f"]
    assert got.dtype == BIN
    assert _plain(got.values) == _plain(_open(store)["f"].values) == [b"ab", None, b"", b"\x00q", None, None]
    assert _plain(got.isel(x=[3, 1]).values) == [b"\x00q", None]
    unmasked = _open(store, string_dtype="arrow", mask_and_scale=False)["f"]
    assert _plain(unmasked.values) == [b"ab", b"x", b"", b"\x00q", b"x", b"x"]


def test_missing_values_stay_missing(tmp_path: Path, kernels: str) -> None:
    store = _netcdf_c(tmp_path / "s.zarr")
    a = _open(store, string_dtype="arrow")
    got = a["s"].values
    assert [v is pd.NA for v in got] == [False, False, True, False, True, True]
    assert a["s"].isnull().values.tolist() == _open(store)["s"].isnull().values.tolist()
    assert a["s"].variable.data.__arrow_array__().null_count == 3  # Arrow nulls, not text


def test_1d_variables_stay_lazy_until_read(tmp_path: Path) -> None:
    a = _open(_netcdf_c(tmp_path / "s.zarr"), string_dtype="arrow")
    assert not a["s"].variable._in_memory
    assert a["x"].variable._in_memory  # the index of a string dimension is read at open, as always
    part = a["s"].isel(x=slice(0, 2))
    assert not part.variable._in_memory
    assert _plain(part.values) == ["a", "é"]
    assert isinstance(part.load().variable.data, pd.arrays.ArrowExtensionArray)


def test_values_are_read_into_arrow_not_through_numpy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Arrow variables are built by the Arrow read of the chunks (LazyArray.arrow), never by the
    numpy read (StringDType) converted afterwards."""
    store = _netcdf_c(tmp_path / "s.zarr")
    a = _open(store, string_dtype="arrow").drop_vars("m")

    def numpy_read(self: LazyArray, key: Any) -> Any:
        raise AssertionError(f"numpy read of {self.what} {key}")

    monkeypatch.setattr(LazyArray, "__getitem__", numpy_read)
    assert _plain(a["s"].isel(x=[3, 0]).values) == ["bb", "a"]
    assert _plain(a["c"].values) == ["ab", "c", "dé", "", "x", "yz"]
    assert a[["s", "c"]].to_dataframe()["c"].dtype == STR


def test_a_selection_reads_only_its_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _netcdf_c(tmp_path / "s.zarr")  # s: chunks of 2
    a = _open(store, string_dtype="arrow").drop_vars("m")
    regions: list[tuple[slice, ...]] = []
    read_arrow = ChunkedArray.read_arrow

    def recorded(self: ChunkedArray, region: tuple[slice, ...], *args: Any, **kwargs: Any) -> Any:
        regions.append(region)
        return read_arrow(self, region, *args, **kwargs)

    monkeypatch.setattr(ChunkedArray, "read_arrow", recorded)
    assert _plain(a["s"].isel(x=slice(2, 4)).values) == [None, "bb"]
    assert regions == [(slice(2, 4),)]


def _read_with(store: Path, **kwargs: Any) -> tuple[Any, list[str]]:
    """(values or the error's text, the warnings' texts) of one read."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            got: Any = _plain(xr.open_dataset(store, engine="zstrings", **kwargs)["b"].values)
        except ZStringsError as e:
            got = f"{type(e).__name__}: {e}"
    return got, [str(w.message) for w in seen if issubclass(w.category, UserWarning) and "/b" in str(w.message)]


@pytest.mark.parametrize("policy", ["drop", "replace", "strict"])
def test_bad_utf8_follows_utf8_errors_as_the_T_read(tmp_path: Path, kernels: str, policy: str) -> None:
    g = zarr.open_group(tmp_path / "bad.zarr", mode="w", zarr_format=2)  # |S with _Encoding: text
    b = g.create_array("b", shape=(3,), chunks=(3,), dtype="S3", fill_value=None)
    b[:] = np.array([b"a\xff", b"ok", b"\xc3"], dtype="S3")
    b.attrs.update({"_ARRAY_DIMENSIONS": ["x"], "_Encoding": "utf-8"})
    got = _read_with(tmp_path / "bad.zarr", string_dtype="arrow", utf8_errors=policy)
    assert got == _read_with(tmp_path / "bad.zarr", string_dtype="T", utf8_errors=policy)
    if policy == "replace":
        assert got[0] == ["a\ufffd", "ok", "\ufffd"] and len(got[1]) == 1
    else:
        assert str(got[0]).startswith("StringDecodeError: variable '/b'")


def test_to_dataframe_gives_arrow_columns(store: Path) -> None:
    t = _open(store)
    a = _open(store, string_dtype="arrow")
    one_d = [k for k in a.data_vars if a[k].ndim == 1]
    df = a[one_d].to_dataframe()
    want = t[one_d].to_dataframe()
    for name in one_d:
        if t[name].dtype.kind in "TSO":
            assert df[name].dtype == (STR if t[name].dtype.kind == "T" else BIN), name
        assert _plain(df[name]) == _plain(want[name]), name
    assert df.index.tolist() == want.index.tolist() == LABELS
    assert df.index.dtype == pd.StringDtype("pyarrow", na_value=np.nan)  # pandas 3's Arrow-backed str


@pytest.mark.parametrize("loaded", [False, True])
def test_isel_and_sel_on_the_string_index(tmp_path: Path, loaded: bool) -> None:
    store = _netcdf_c(tmp_path / "s.zarr")
    t = _open(store).drop_vars("m")
    a = _open(store, string_dtype="arrow").drop_vars("m")
    if loaded:
        a = a.load()
    assert a.indexes["x"].tolist() == LABELS
    for sel in ({"x": "ré"}, {"x": "s"}, {"x": ["u", "p"]}, {"x": slice("q", "s")}):
        got, want = a.sel(sel), t.sel(sel)
        for name in ("s", "c", "x"):
            assert _plain(got[name].values) == _plain(want[name].values), (sel, name)
    vectorized = xr.DataArray([[5, 0], [2, 2]], dims=("a", "b"))  # (2-D: numpy object, as .values)
    for isel in ({"x": 3}, {"x": -1}, {"x": [5, 0, 2]}, {"x": slice(None, None, -2)}, {"x": slice(2, 2)},
                 {"x": vectorized}):
        got, want = a.isel(isel), t.isel(isel)
        for name in ("s", "c", "x"):
            assert got[name].shape == want[name].shape, (isel, name)
            assert _plain(got[name].values) == _plain(want[name].values), (isel, name)
    assert a.sel(x=["u", "p"])["s"].dtype == STR


def test_nd_strings_stay_stringdtype_with_one_warning(tmp_path: Path) -> None:
    store = _netcdf_c(tmp_path / "s.zarr")
    with pytest.warns(UserWarning, match=r"string_dtype='arrow': /m \(2-D\), /title \(0-D\) read as numpy arrays") as rec:
        a = xr.open_dataset(store, engine="zstrings", string_dtype="arrow")
    assert len([w for w in rec if "string_dtype='arrow'" in str(w.message)]) == 1
    assert a["m"].dtype == a["title"].dtype == np.dtypes.StringDType()
    assert a["m"].values.tolist() == _open(store)["m"].values.tolist()
    assert a["title"].values.tolist() == "hello"


def test_written_back_as_the_T_read_writes(tmp_path: Path) -> None:
    """Our writers take the Arrow variables; xarray's own writers refuse them (TypeError, their
    limitation), and ``numpy_strings`` first makes them writable: netCDF4 and zarr-python read the
    same strings as from the "T" read written the same way."""
    store = _netcdf_c(tmp_path / "s.zarr")
    t = _open(store).drop_vars("m")
    a = _open(store, string_dtype="arrow").drop_vars("m")

    def nczarr(ds: xr.Dataset, name: str) -> dict[str, Any]:
        xr_zstrings.to_nczarr(ds, tmp_path / name)
        with netCDF4.Dataset(nc_url(tmp_path / name)) as nc:
            nc.set_auto_mask(False)
            return {k: _plain(nc[k][:]) for k in ("x", "s", "n")}

    written = nczarr(a, "a.zarr")
    assert written == nczarr(t, "t.zarr")
    assert written["s"][2] == "N/A"  # missing written as the fill, as netcdf-c wrote it

    def v3(ds: xr.Dataset, name: str) -> dict[str, Any]:
        ds.zstrings.to_zarr(tmp_path / name, zarr_format=3)
        g = zarr.open_group(tmp_path / name, mode="r")
        return {k: _plain(g[k][:]) for k in ("x", "s", "c")}

    assert v3(a, "a3.zarr") == v3(t, "t3.zarr")

    with pytest.raises(TypeError, match="large_string"):
        a.to_netcdf(tmp_path / "refused.nc")
    numpy_strings(a).to_netcdf(tmp_path / "a.nc")
    t.to_netcdf(tmp_path / "t.nc")
    with netCDF4.Dataset(tmp_path / "a.nc") as na, netCDF4.Dataset(tmp_path / "t.nc") as nt:
        for k in ("x", "s", "c"):
            assert _plain(na[k][:]) == _plain(nt[k][:]), k


@pytest.mark.parametrize("writer", ["to_zarr_v2", "to_zarr_v3"])
def test_our_other_writers_take_arrow_variables(tmp_path: Path, writer: str) -> None:
    """netcdf-c (``mode=zarr``) reads what to_zarr_v2 wrote, zarr-python what to_zarr_v3 wrote,
    from an Arrow read as from a "T" read, also for an append along the (unlimited) dimension."""
    store = _netcdf_c(tmp_path / "s.zarr")
    t = _open(store).drop_vars(["m", "x", "title"])
    a = _open(store, string_dtype="arrow").drop_vars(["m", "x", "title"])
    write = getattr(xr_zstrings, writer)

    def written(first: xr.Dataset, then: xr.Dataset, name: str) -> dict[str, Any]:
        write(first, tmp_path / name, unlimited_dims=["x"]) if writer == "to_zarr_v2" else write(first, tmp_path / name)
        write(then, tmp_path / name, mode="a", append_dim="x")
        if writer == "to_zarr_v2":
            with netCDF4.Dataset(nc_url(tmp_path / name, "zarr")) as nc:
                nc.set_auto_mask(False)  # (c left out: netCDF4 decodes an _Encoding NC_CHAR character by character)
                return {k: _plain(nc[k][:]) for k in ("s", "n")}
        g = zarr.open_group(tmp_path / name, mode="r")
        return {k: _plain(g[k][:]) for k in ("s", "c", "n")}

    got = written(a, a, "a.zarr")
    assert got == written(t, t, "t.zarr")
    assert got["s"] == ["a", "é", "N/A", "bb", "N/A", "N/A"] * 2  # missing as the fill, as netcdf-c wrote it


def test_a_region_write_takes_arrow_variables(tmp_path: Path) -> None:
    store = _netcdf_c(tmp_path / "s.zarr")  # s: chunks of 2
    xr_zstrings.to_nczarr(_open(store).drop_vars("m"), tmp_path / "out.zarr")
    part = _open(store, string_dtype="arrow")[["s"]].drop_vars("x").isel(x=[3, 2])  # ["bb", missing]
    xr_zstrings.to_nczarr(part, tmp_path / "out.zarr", mode="r+", region={"x": slice(0, 2)})
    with netCDF4.Dataset(nc_url(tmp_path / "out.zarr")) as nc:
        nc.set_auto_mask(False)
        assert _plain(nc["s"][:]) == ["bb", "N/A", "N/A", "bb", "N/A", "N/A"]


def test_numpy_strings_gives_the_T_dtypes(store: Path) -> None:
    t = _open(store)
    back = numpy_strings(_open(store, string_dtype="arrow"))
    for name in _one_d_strings(t):
        assert not isinstance(back[name].dtype, pd.ArrowDtype), name
        assert _plain(back[name].values) == _plain(t[name].values), name


def _tree(path: Path) -> Path:
    with netCDF4.Dataset(nc_url(path), "w") as nc:
        nc.createDimension("x", 3)
        x = nc.createVariable("x", str, ("x",))
        x[:] = np.array(["a", "b", "c"], dtype=object)
        g = nc.createGroup("obs")
        g.createDimension("k", 2)
        v = g.createVariable("name", str, ("k",), fill_value="")
        v[0] = "first"  # [1] never written: missing
    return path


def test_open_datatree_and_open_groups(tmp_path: Path) -> None:
    store = _tree(tmp_path / "t.zarr")
    tree = xr.open_datatree(store, engine="zstrings", string_dtype="arrow")
    assert tree["obs"]["name"].dtype == STR
    assert _plain(tree["obs"]["name"].values) == ["first", None]
    assert tree.ds.indexes["x"].dtype == pd.StringDtype("pyarrow", na_value=np.nan)
    assert tree.ds.indexes["x"].tolist() == ["a", "b", "c"]
    back = numpy_strings(tree)  # (a DataTree too: each group's Arrow variables)
    assert back["obs"]["name"].dtype == np.dtypes.StringDType(na_object=np.nan)
    assert _plain(back["obs"]["name"].values) == ["first", None]
    groups = xr.open_groups(store, engine="zstrings", string_dtype="arrow")
    assert groups["/obs"]["name"].dtype == STR
    assert _plain(groups["/obs"]["name"].values) == _plain(
        xr.open_groups(store, engine="zstrings")["/obs"]["name"].values)


def test_a_bad_string_dtype_names_the_choices(tmp_path: Path) -> None:
    store = _tree(tmp_path / "t.zarr")
    with pytest.raises(ZStringsError, match=r"string_dtype='arow' is not a string output kind.*'T'.*'arrow'"):
        xr.open_dataset(store, engine="zstrings", string_dtype="arow")
    with pytest.raises(ZStringsError, match="string_dtype='arrow' is an option of xr.open_dataset"):
        resolve_string_dtype("arrow")  # the numpy readers have no Arrow result


def test_dask_chunks_are_refused_by_xarray(tmp_path: Path) -> None:
    """A fact of xarray 2026.9 the docs state: dask cannot hold a pandas extension dtype."""
    store = _netcdf_c(tmp_path / "s.zarr")
    with pytest.raises(TypeError, match="large_string"):
        _open(store, string_dtype="arrow", chunks={})


def test_lazy_arrow_variables_need_load_before_concat(tmp_path: Path) -> None:
    """A fact of xarray 2026.9 the docs state: it cannot combine lazy extension arrays."""
    store = _netcdf_c(tmp_path / "s.zarr")
    a = _open(store, string_dtype="arrow").drop_vars("m")
    with pytest.raises(ValueError, match="to a NumPy dtype"):
        xr.concat([a, a], "x", data_vars="minimal")
    assert _plain(xr.concat([a.load(), a.load()], "x", data_vars="minimal")["c"].values) == ["ab", "c", "dé", "", "x", "yz"] * 2


def test_xarray_refuses_pandas_str_arrays_so_arrow_dtype_it_is() -> None:
    """Why ArrowDtype and not pandas 3's ``str`` (docs/guide.md): a Variable of ``str`` cannot be
    selected from in xarray 2026.9; one of ArrowDtype can."""
    values = pa.chunked_array([pa.array(["a", None, "c"], pa.large_string())])
    as_str = xr.Variable("x", pd.array(pd.arrays.ArrowExtensionArray(values)).astype(
        pd.StringDtype("pyarrow", na_value=np.nan)))
    with pytest.raises(TypeError, match="Invalid array type"):
        as_str.isel(x=[0, 2])
    as_arrow = xr.Variable("x", pd.arrays.ArrowExtensionArray(values))
    assert as_arrow.isel(x=[0, 2]).dtype == STR


def test_an_xarray_without_its_extension_array_wrapper_refuses_arrow_only(tmp_path: Path) -> None:
    """xarray has no public name for the wrapper string_dtype='arrow' hands it: should a release
    move it, engine='zstrings' still opens (the backend imports this module) and only 'arrow' is
    refused, naming the fix. Before, the backend's import failed: every open did."""
    import subprocess
    import sys

    store = _netcdf_c(tmp_path / "nc.zarr")
    code = f"""
import xarray.core.extension_array as m
del m.PandasExtensionArray
import xarray as xr
from xr_zstrings import UnsupportedError
assert xr.open_dataset({str(store)!r}, engine="zstrings").x.values.tolist() == {LABELS!r}
try:
    xr.open_dataset({str(store)!r}, engine="zstrings", string_dtype="arrow")
except UnsupportedError as e:
    print(e)
"""
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    assert "string_dtype='arrow' needs xarray's PandasExtensionArray" in got.stdout
    assert "ds.zstrings.to_arrow()" in got.stdout


@pytest.mark.parametrize("loaded", [False, True])
@pytest.mark.parametrize("index", [6, 7])
def test_an_index_out_of_bounds_is_refused_as_the_T_read(tmp_path: Path, index: int, loaded: bool) -> None:
    """One value past the end of a variable without an index on its dimension (xarray hands the int
    to the backend array as it is): IndexError as string_dtype='T' raises, not the value
    ``index % size`` (it wrapped); loaded, IndexError too (a reshape ValueError before)."""
    store = _netcdf_c(tmp_path / "nc.zarr")
    errors = []
    for sd in ("T", "arrow"):
        s = _open(store, string_dtype=sd).drop_vars("x").s
        s = s.load() if loaded else s
        with pytest.raises(IndexError) as e:
            s.isel(x=index).values  # (the read is the test)
        errors.append(str(e.value))
    assert errors[0] == errors[1]
