"""The cases xarray's own backend tests found (tests/interop/xarray_backends), each against the peer
that defines it: netCDF4/netcdf-c and engine="netcdf4" for NCZarr, engine="zarr" and zarr-python
for Zarr; and the one rule per question the writers and readers share."""

from __future__ import annotations

import json
import warnings

import netCDF4
import numpy as np
import pytest
import xarray as xr
import zarr
from peers import nc_url

from xr_zstrings import to_nczarr


def _missing(values) -> list:
    return [None if v is None or (isinstance(v, float) and v != v) else v
            for v in np.asarray(values, dtype=object).reshape(-1).tolist()]


# ---------------------------------------------------------------------- NC_CHAR stays NC_CHAR


@pytest.mark.parametrize("values", [["foo", "bar", "bazz"], ["é", "ab", ""]])
def test_nc_char_written_back_as_nc_char(tmp_path, values):
    """A variable netCDF4 wrote as NC_CHAR (xarray's encoding dtype "S1") comes back with
    encoding["dtype"] "S1" and its char dimension name, as from engine="netcdf4", so to_netcdf and
    to_nczarr write NC_CHAR again (not NC_STRING)."""
    src = tmp_path / "src.zarr"
    xr.Dataset({"x": ("t", np.array(values, dtype=object))}).to_netcdf(
        nc_url(src), engine="netcdf4", encoding={"x": {"dtype": "S1"}})
    peer = xr.open_dataset(nc_url(src), engine="netcdf4")
    ours = xr.open_dataset(src, engine="zstrings")
    assert ours["x"].values.tolist() == peer["x"].values.tolist() == values
    assert ours["x"].encoding["dtype"] == peer["x"].encoding["dtype"] == np.dtype("S1")
    assert ours["x"].encoding["char_dim_name"] == peer["x"].encoding["char_dim_name"]
    assert ours["x"].dtype == np.dtypes.StringDType()  # still our str dtype in memory
    for opened, name in ((ours, "ours"), (peer, "peer")):
        opened.to_netcdf(tmp_path / f"{name}.nc", engine="netcdf4")
        with netCDF4.Dataset(tmp_path / f"{name}.nc") as nc:
            assert nc["x"].dtype == np.dtype("S1") and nc["x"].dimensions == ("t", peer["x"].encoding["char_dim_name"])
    to_nczarr(ours, tmp_path / "back.zarr")
    with netCDF4.Dataset(nc_url(tmp_path / "back.zarr")) as nc:
        assert nc["x"].dtype == np.dtype("S1") and nc["x"].dimensions[0] == "t"
    assert xr.open_dataset(tmp_path / "back.zarr", engine="zstrings")["x"].values.tolist() == values


def test_byte_string_fill_value_is_masked_as_engine_netcdf4(tmp_path):
    """NC_CHAR without _Encoding and a one-character _FillValue (how xarray writes bytes with
    missing values): the joined values equal to the fill are missing, as engine="netcdf4" reads them;
    string_dtype="bytes" gives exactly the peer's values."""
    values = np.array([b"ab", b"cdef", np.nan], dtype=object)
    for fill in (b"X", b""):
        src = tmp_path / f"f{len(fill)}.zarr"
        xr.Dataset({"x": ("t", values, {}, {"_FillValue": fill, "dtype": "S1"})}).to_netcdf(nc_url(src),
                                                                                          engine="netcdf4")
        peer = xr.open_dataset(nc_url(src), engine="netcdf4")["x"]
        assert _missing(peer.values) == [b"ab", b"cdef", None]
        ours = xr.open_dataset(src, engine="zstrings")["x"]
        assert _missing(ours.values) == ["ab", "cdef", None]
        assert ours.encoding["_FillValue"] == fill.decode()
        raw = xr.open_dataset(src, engine="zstrings", string_dtype="bytes")["x"]
        assert _missing(raw.values) == _missing(peer.values)
        assert bytes(raw.encoding["_FillValue"]) == bytes(peer.encoding["_FillValue"]) == (fill or b"\x00")


# ----------------------------------------------------------------- engine="netcdf4"'s encoding


def test_nczarr_encoding_has_engine_netcdf4_keys(tmp_path):
    """What engine="netcdf4" gives for an NCZarr store (zlib, shuffle, complevel, fletcher32,
    chunksizes, contiguous, original_shape, the other filters' flags), we give too, from .zarray."""
    path = tmp_path / "c.zarr"
    with netCDF4.Dataset(nc_url(path), "w") as nc:
        nc.createDimension("x", 10)
        nc.createDimension("y", 4)
        for name, kw in {"a": {"zlib": True, "complevel": 9, "shuffle": True, "fletcher32": True, "chunksizes": (5, 2)},
                         "b": {"compression": "zstd", "complevel": 3}, "c": {"compression": "bzip2", "complevel": 5},
                         "d": {}}.items():
            v = nc.createVariable(name, "f4", ("x", "y"), **kw)
            v[:] = np.arange(40, dtype="f4").reshape(10, 4)
    peer = xr.open_dataset(nc_url(path), engine="netcdf4")
    ours = xr.open_dataset(path, engine="zstrings")
    keys = ("zlib", "szip", "zstd", "bzip2", "blosc", "shuffle", "complevel", "fletcher32", "contiguous",
            "chunksizes", "original_shape")
    for name in "abcd":
        want = {k: peer[name].encoding[k] for k in keys}
        assert {k: ours[name].encoding[k] for k in keys} == want, name
    ours.to_netcdf(tmp_path / "o.nc", engine="netcdf4")
    with netCDF4.Dataset(tmp_path / "o.nc") as nc:
        assert nc["a"].filters()["zlib"] and nc["a"].filters()["fletcher32"] and nc["a"].chunking() == [5, 2]


# ------------------------------------------------------------------- Zarr v3 fill_value encoding


def test_v3_fill_value_in_encoding_as_engine_zarr(tmp_path):
    ds = xr.Dataset({"n": ("x", [1, 2, 3]), "s": ("x", np.array(["a", "b", "c"], dtype=np.dtypes.StringDType()))})
    ds["n"].encoding = {"fill_value": -99}
    ds["s"].encoding = {"fill_value": "none"}
    ds.to_zarr(tmp_path / "v3.zarr", zarr_format=3)
    peer = xr.open_dataset(tmp_path / "v3.zarr", engine="zarr")
    ours = xr.open_dataset(tmp_path / "v3.zarr", engine="zstrings")
    for name in ("n", "s"):
        assert ours[name].encoding["fill_value"] == peer[name].encoding["fill_value"], name
    ours.to_zarr(tmp_path / "again.zarr", zarr_format=3)  # kept through xarray's writer
    meta = json.loads((tmp_path / "again.zarr" / "n" / "zarr.json").read_text())
    assert meta["fill_value"] == -99


# ------------------------------------------------------------- pure Zarr v2 fill values mask


@pytest.mark.parametrize("dtype", ["<U4", "|O", "S4"])
def test_v2_string_fill_value_masks_as_engine_zarr(tmp_path, dtype):
    """xarray's engine="zarr" masks a Zarr v2 array's fill_value (use_zarr_fill_value_as_mask) for
    strings as for numbers; so do we. What xarray's to_zarr(zarr_format=2) writes for missing
    strings with a _FillValue reads back missing, not as the fill string."""
    g = zarr.open_group(tmp_path / "v2.zarr", mode="w", zarr_format=2)
    fill = b"N/A" if dtype == "S4" else "N/A"
    kind = zarr.dtype.VariableLengthUTF8() if dtype == "|O" else dtype
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = g.create_array("s", shape=(4,), chunks=(2,), dtype=kind, fill_value=fill,
                           attributes={"_ARRAY_DIMENSIONS": ["x"]})
    a[0:2] = np.array(["ab", "N/A"] if dtype != "S4" else [b"ab", b"N/A"], dtype=object if dtype == "|O" else dtype)
    peer = xr.open_dataset(tmp_path / "v2.zarr", engine="zarr", consolidated=False)["s"]
    ours = xr.open_dataset(tmp_path / "v2.zarr", engine="zstrings")["s"]
    assert _missing(ours.values) == _missing(peer.values)
    assert _missing(ours.values)[1:] == [None, None, None]
    unmasked = xr.open_dataset(tmp_path / "v2.zarr", engine="zstrings", use_zarr_fill_value_as_mask=False)["s"]
    assert _missing(unmasked.values) == [v if dtype != "S4" else v.encode() for v in ["ab", "N/A", "N/A", "N/A"]]

    ds = xr.Dataset({"t": ("x", np.array(["a", np.nan], dtype=np.dtypes.StringDType(na_object=np.nan)))})
    ds["t"].encoding = {"_FillValue": "-"}
    ds.to_zarr(tmp_path / "x2.zarr", zarr_format=2)
    assert _missing(xr.open_dataset(tmp_path / "x2.zarr", engine="zstrings")["t"].values) == ["a", None]


# -------------------------------------------------- one anonymous-dimension rule, every path


def test_anonymous_dimension_used_twice_gets_distinct_names_on_every_path(tmp_path):
    """A 20x20 array on netcdf-c's anonymous dimension (NCZarr references, netcdf-c's pure-Zarr
    _ARRAY_DIMENSIONS, zarr-python without names): ``_Anonymous_Dim_20``, ``_Anonymous_Dim_20_1``
    everywhere; a named dimension used twice (netCDF allows ``v(x, x)``, xarray does not) stays
    left out with a warning."""
    for mode in ("nczarr", "zarr"):
        path = tmp_path / f"{mode}.zarr"
        with netCDF4.Dataset(nc_url(path, mode), "w") as nc:
            nc.createDimension("_Anonymous_Dim_20", 20)
            nc.createDimension("x", 3)
            nc.createVariable("sq", "u1", ("_Anonymous_Dim_20",) * 2, fill_value=False)[:] = 1
            nc.createVariable("xx", "i4", ("x", "x"))[:] = np.arange(9).reshape(3, 3)
        assert json.loads((path / "sq" / ".zarray").read_text())["fill_value"] is None
        with pytest.warns(UserWarning, match="'/xx'.*uses one dimension twice"):
            ds = xr.open_dataset(path, engine="zstrings")
        assert ds["sq"].dims == ("_Anonymous_Dim_20", "_Anonymous_Dim_20_1") and "xx" not in ds
        assert ds["sq"].isel(_Anonymous_Dim_20_1=0).shape == (20,)
    g = zarr.open_group(tmp_path / "py.zarr", mode="w", zarr_format=2)
    g.create_array("sq", shape=(20, 20), dtype="u1", fill_value=None)
    assert xr.open_dataset(tmp_path / "py.zarr", engine="zstrings")["sq"].dims == (
        "_Anonymous_Dim_20", "_Anonymous_Dim_20_1")


# ------------------------------------------------------------- one "is this text" rule


@pytest.mark.parametrize("values", [[None, "a"], ["a", None], [np.nan, "é"], [None, None]],
                         ids=["missing-first", "missing-last", "nan-first", "all-missing"])
@pytest.mark.parametrize("chunked", [False, True])
def test_object_strings_with_missing_values_are_text_for_every_writer(tmp_path, values, chunked):
    """An object array is text by its first value that is not missing (all missing: text): to_nczarr
    and to_zarr_v3 decide it alike, so [None, "a"] with a _FillValue is written as ["a", None] is."""
    from xr_zstrings.write.zarr3 import to_zarr_v3

    ds = xr.Dataset({"s": ("x", np.array(values, dtype=object))})
    ds["s"].encoding = {"_FillValue": "-"}
    if chunked:
        ds = ds.chunk({"x": 1})
    to_nczarr(ds, tmp_path / "n.zarr")
    to_zarr_v3(ds, tmp_path / "v3.zarr")
    want = [v if isinstance(v, str) else None for v in values]
    for out in ("n.zarr", "v3.zarr"):
        assert _missing(xr.open_dataset(tmp_path / out, engine="zstrings")["s"].values) == want, out
    peer = xr.open_dataset(nc_url(tmp_path / "n.zarr"), engine="netcdf4")["s"]
    assert _missing(peer.values) == want


def test_object_arrays_of_other_values_are_not_text():
    from xr_zstrings.write.plan import text_kind

    for values in ([None, "a"], [np.nan, "é"], [None, None]):
        assert text_kind(xr.Variable("x", np.array(values, dtype=object))) == "str"
        assert text_kind(xr.Variable("x", np.array(values, dtype=object)).chunk({"x": 1})) == "str"
    assert text_kind(xr.Variable("x", np.array([None, 1.5], dtype=object))) is None
    assert text_kind(xr.Variable("x", np.array([None, b"a"], dtype=object))) == "bytes"
    assert text_kind(xr.Variable("x", np.array([], dtype=object))) == "str"
