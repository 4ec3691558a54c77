"""Reading edge cases: netcdf-c string fill values, outer/strided and 0-d indexing, huge declared
shapes, unlimited dimensions longer than an array, DataTree coordinates, guess_can_open on zips."""

from __future__ import annotations

import zipfile

import netCDF4
import numpy as np
import pytest
import xarray as xr
import zarr
from peers import nc_url, write_netcdf_strings

from xr_zstrings import DimensionError
from xr_zstrings.backend import ZStringsBackendEntrypoint


@pytest.mark.parametrize("fill", ["QUJD", "MISSING", "é!"])
def test_netcdf_c_string_fill_value_is_plain_text(tmp_path, fill):
    path = tmp_path / "f.zarr"
    with netCDF4.Dataset(nc_url(path), "w") as nc:
        nc.createDimension("n", 4)
        s = nc.createVariable("s", str, ("n",), fill_value=fill, chunksizes=(2,))
        s[0] = "a"
    with netCDF4.Dataset(nc_url(path), "r") as nc:
        expected = nc["s"][:].tolist()
    got = xr.open_dataset(path, engine="zstrings", mask_and_scale=False)
    assert got["s"].values.tolist() == expected == ["a", fill, fill, fill]
    # unmasked: the fill stays an attribute, as engine="netcdf4" leaves it
    peer = xr.open_dataset(nc_url(path), engine="netcdf4", mask_and_scale=False)["s"]
    assert got["s"].attrs["_FillValue"] == peer.attrs["_FillValue"] == fill
    assert "_FillValue" not in got["s"].encoding
    # masked (the default) as engine="netcdf4" masks it, in a StringDType with NaN as its NA
    ref = xr.open_dataset(nc_url(path), engine="netcdf4")["s"].values.tolist()
    got = xr.open_dataset(path, engine="zstrings")["s"]
    assert got.dtype == np.dtypes.StringDType(na_object=np.nan)
    assert [v if v == v else "<NA>" for v in got.values.tolist()] == [
        v if v == v else "<NA>" for v in ref] == ["a", "<NA>", "<NA>", "<NA>"]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("idx") / "s.zarr"
    write_netcdf_strings(path)
    return path


@pytest.mark.parametrize("string_dtype", ["T", "O", "U"])
@pytest.mark.parametrize(
    "sel",
    [{"x": [4, 0, 2]}, {"x": slice(None, None, -2)}, {"x": [1, 1, 3]}, {"x": 1}, {"x": slice(3, 0, -1)},
     {"x": []}, {"x": -1}],
    ids=lambda s: repr(s),
)
def test_outer_and_strided_indexing_matches_eager_numpy(store, sel, string_dtype):
    lazy = xr.open_dataset(store, engine="zstrings", string_dtype=string_dtype)
    eager = lazy.load()
    lazy = xr.open_dataset(store, engine="zstrings", string_dtype=string_dtype)
    for name in ("names", "chars", "temp", "counts"):
        got = lazy[name].isel(sel).values
        exp = eager[name].values[
            tuple(sel["x"] if d == "x" else slice(None) for d in eager[name].dims)
        ]
        np.testing.assert_array_equal(got, exp, err_msg=f"{name} {sel}")
        if name in ("names", "chars") and string_dtype != "U":
            assert got.dtype == lazy[name].dtype, (name, sel, got.dtype)


def test_huge_declared_shape_stays_cheap(tmp_path):
    g = zarr.open_group(tmp_path, mode="w", zarr_format=2)
    a = g.create_array("v", shape=(10**12,), chunks=(10,), dtype="f4", fill_value=-1.0,
                       attributes={"_ARRAY_DIMENSIONS": ["x"]})
    a[:20] = np.arange(20)
    ds = xr.open_dataset(tmp_path, engine="zstrings", mask_and_scale=False)
    assert ds["v"][:5].values.tolist() == [0, 1, 2, 3, 4]
    assert ds["v"].isel(x=[0, 10**12 - 1, 15]).values.tolist() == [0.0, -1.0, 15.0]
    assert ds["v"][:: 10**11].values.tolist() == [0.0] + [-1.0] * 9


def test_zero_d_string_selection_keeps_the_declared_dtype(store):
    for kind in ("T", "O"):
        ds = xr.open_dataset(store, engine="zstrings", string_dtype=kind)
        assert ds["names"][1].values.dtype == ds["names"].dtype
        assert ds["names"][1].values[()] == "héllo"


def test_datatree_refuses_a_subgroup_coordinate_that_disagrees(tmp_path):
    path = tmp_path / "tree.zarr"
    with netCDF4.Dataset(nc_url(path), "w") as nc:
        nc.createDimension("x", 3)
        nc.createVariable("x", "i4", ("x",))[:] = [1, 2, 3]
        g = nc.createGroup("sub")
        g.createDimension("x", 3)
        g.createVariable("x", "i4", ("x",))[:] = [7, 8, 9]
    with pytest.raises(DimensionError, match="'/sub'.*open_groups"):
        xr.open_datatree(path, engine="zstrings")
    assert xr.open_groups(path, engine="zstrings")["/sub"]["x"].values.tolist() == [7, 8, 9]


def test_netcdf_c_pure_zarr_integers_stay_integers(tmp_path):
    for mode in ("nczarr", "zarr"):
        path = tmp_path / f"{mode}.zarr"
        with netCDF4.Dataset(nc_url(path, mode), "w") as nc:
            nc.createDimension("n", 3)
            nc.createVariable("i", "i4", ("n",))[:] = [1, 2, 3]
        assert xr.open_dataset(path, engine="zstrings")["i"].dtype == np.int32, mode


def test_unlimited_dimension_longer_than_a_stored_array_reads_fill(tmp_path, store):
    """netcdf-c 4.10 extends every array; older writers (and hand edits) leave some shorter."""
    import shutil

    path = tmp_path / "short.zarr"
    shutil.copytree(store, path)
    zarray = (path / "temp" / ".zarray").read_text().replace('"shape": [5,5]', '"shape": [3,5]')
    (path / "temp" / ".zarray").write_text(zarray)
    ds = xr.open_dataset(path, engine="zstrings", mask_and_scale=False)
    assert ds.sizes["t"] == 5
    values = ds["temp"].values
    np.testing.assert_array_equal(values[:3], np.arange(15, dtype="f4").reshape(3, 5))
    assert (values[3:] == -999.0).all()


def test_guess_can_open_claims_nczarr_zips_only(store, tmp_path):
    ep = ZStringsBackendEntrypoint()
    z = tmp_path / "s.zip"
    with zipfile.ZipFile(z, "w") as zf:
        for f in store.rglob("*"):
            if f.is_file():
                zf.write(f, f"s/{f.relative_to(store).as_posix()}")
    assert ep.guess_can_open(z)
    other = tmp_path / "other.zip"
    with zipfile.ZipFile(other, "w") as zf:
        zf.writestr("readme.txt", "hello")
    assert not ep.guess_can_open(other)
    (tmp_path / "broken.zip").write_bytes(b"PK\x03\x04garbage")
    assert not ep.guess_can_open(tmp_path / "broken.zip")
    assert not ep.guess_can_open(b"bytes")


def test_fixed_width_u_output_has_the_declared_width(store):
    ds = xr.open_dataset(store, engine="zstrings", string_dtype="U")
    assert ds["names"].dtype == np.dtype("U128")  # maxstrlen 128 bytes bounds the characters
    assert ds["names"].values.dtype == np.dtype("U128")
    assert ds["chars"].values.dtype == ds["chars"].dtype == np.dtype("U6")
    assert ds["chars"].values.tolist() == ["ab", "cde", "fghij", "", "é"]
