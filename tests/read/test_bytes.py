"""Bytes are never forced through UTF-8 (issue 11): what engine="zstrings" returns for byte data in
every layout, compared with the peers on the same stored bytes -- xarray's engine="zarr" and
zarr-python for pure Zarr v2/v3, netcdf-c (netCDF4) for NCZarr -- and ``string_dtype="bytes"``."""

from __future__ import annotations

import warnings

import netCDF4
import numcodecs
import numpy as np
import pytest
import xarray as xr
import zarr
from peers import nc_url

from xr_zstrings import StringDecodeWarning, ZStringsError
from xr_zstrings.write.nczarr import with_netcdf_c_strings

BINARY = np.array([b"\x00\xff\x10", b"abc\xc3", b"\xc3\xa9t\xc3\xa9", b"\x89PNG\r\n\x1a\n", b""], dtype="S8")


def _quiet_open(path, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error", StringDecodeWarning)  # nothing may change silently or loudly
        return xr.open_dataset(path, **kw)


def test_binary_sn_written_by_xarray_reads_as_engine_zarr_reads_it(tmp_path):
    """A bytes variable xarray writes to pure Zarr v2 is |Sn without any text declaration: it comes
    back as the same |Sn bytes engine="zarr" returns (no error, no warning, nothing changed)."""
    path = tmp_path / "b.zarr"
    xr.Dataset({"blob": ("x", BINARY)}).to_zarr(path, zarr_format=2, consolidated=False)
    ours = _quiet_open(path, engine="zstrings")["blob"]
    theirs = xr.open_dataset(path, engine="zarr", consolidated=False)["blob"]
    assert ours.dtype == theirs.dtype == np.dtype("S8")
    assert ours.values.tolist() == theirs.values.tolist() == [b"\x00\xff\x10", b"abc\xc3",
                                                            "été".encode(), b"\x89PNG\r\n\x1a\n", b""]
    assert ours.dims == theirs.dims


@pytest.mark.parametrize("compressor", [None, numcodecs.Zstd(3)], ids=["raw", "zstd"])
def test_binary_sn_written_by_zarr_python(tmp_path, compressor):
    g = zarr.open_group(tmp_path, mode="w", zarr_format=2)
    a = g.create_array("s", shape=(5,), dtype="S8", chunks=(2,), compressors=compressor,
                       attributes={"_ARRAY_DIMENSIONS": ["x"]})
    a[:] = BINARY
    got = _quiet_open(tmp_path, engine="zstrings", use_zarr_fill_value_as_mask=False)["s"].values
    assert got.dtype == np.dtype("S8") and got.tolist() == a[:].tolist()
    # engine="zarr"'s reading (the default): zarr-python's fill value b"" masks the empty value
    masked = _quiet_open(tmp_path, engine="zstrings")["s"].values
    theirs = xr.open_dataset(tmp_path, engine="zarr", consolidated=False)["s"].values
    assert masked.dtype == theirs.dtype == np.dtype(object)
    assert masked[:4].tolist() == theirs[:4].tolist() == a[:4].tolist() and np.isnan(masked[4]) and np.isnan(theirs[4])


def test_encoding_attribute_is_honoured_as_xarray_decodes_it(tmp_path):
    """xarray's _Encoding declares |Sn bytes text: decoded with it (latin-1 here), as engine="zarr"
    decodes them; xarray's own char arrays (|S1 + _Encoding) are joined and decoded too."""
    g = zarr.open_group(tmp_path, mode="w", zarr_format=2)
    a = g.create_array("latin", shape=(3,), dtype="S6", chunks=(3,),
                       attributes={"_ARRAY_DIMENSIONS": ["x"], "_Encoding": "latin-1"})
    a[:] = np.array(["café".encode("latin-1"), b"na\xefve", b"plain"])
    b = g.create_array("utf8", shape=(3,), dtype="S8", chunks=(3,),
                       attributes={"_ARRAY_DIMENSIONS": ["x"], "_Encoding": "utf-8"})
    b[:] = np.array(["été".encode(), b"a\x00b", b""])
    ds = xr.Dataset({"chars": ("y", np.array(["héllo", "wörld"], dtype=object))})
    ds["chars"].encoding["dtype"] = "S1"  # xarray writes |S1 + _Encoding + a string dimension
    ds.to_zarr(tmp_path, mode="a", zarr_format=2, consolidated=False)
    ours = _quiet_open(tmp_path, engine="zstrings")
    theirs = xr.open_dataset(tmp_path, engine="zarr", consolidated=False)
    for name in ("latin", "utf8", "chars"):
        assert ours[name].values.tolist() == theirs[name].values.tolist(), name
        assert ours[name].dims == theirs[name].dims
    assert ours["latin"].values.tolist() == ["café", "naïve", "plain"]
    assert ours["latin"].dtype == np.dtypes.StringDType()  # our str dtype, not object
    assert ours["latin"].encoding["_Encoding"] == "latin-1" and "_Encoding" not in ours["latin"].attrs
    raw = _quiet_open(tmp_path, engine="zstrings", use_zarr_fill_value_as_mask=False)
    assert raw["utf8"].values.tolist() == ["été", "a\x00b", ""]  # only trailing NULs end a value
    assert ours["chars"].values.tolist() == ["héllo", "wörld"]


def test_declared_text_stays_str(tmp_path):
    """netcdf-c's NC_STRING (NCZarr and its pure-Zarr mode) and with_netcdf_c_strings's |Sn are text."""
    path = tmp_path / "p.zarr"
    with_netcdf_c_strings(xr.Dataset({"s": ("x", np.array(["a", "été"], dtype=object))})).to_zarr(
        path, zarr_format=2, consolidated=False)
    assert _quiet_open(path, engine="zstrings")["s"].values.tolist() == ["a", "été"]
    for mode in ("nczarr", "zarr"):
        nc = tmp_path / f"nc-{mode}.zarr"
        with netCDF4.Dataset(nc_url(nc, mode), "w") as d:
            d.createDimension("x", 2)
            v = d.createVariable("s", str, ("x",))
            v[0], v[1] = "a", "été"
        got = _quiet_open(nc, engine="zstrings")["s"]
        assert got.dtype == np.dtypes.StringDType() and got.values.tolist() == ["a", "été"], mode


def _nczarr_store(tmp_path):
    """NC_STRING and NC_CHAR written by netcdf-c (netCDF4)."""
    path = tmp_path / "n.zarr"
    with netCDF4.Dataset(nc_url(path), "w") as d:
        d.createDimension("x", 3)
        d.createDimension("n", 4)
        s = d.createVariable("s", str, ("x",))
        for i, v in enumerate(["ok", "été", ""]):
            s[i] = v
        c = d.createVariable("c", "S1", ("x", "n"))
        c.set_auto_chartostring(False)
        c[:] = np.array([b"ab", "é".encode(), b"z\x00y"], dtype="S4").view("S1").reshape(3, 4)
    return path


def test_string_dtype_bytes_nczarr(tmp_path):
    """string_dtype="bytes": NC_STRING's stored |Sn as zarr-python reads the array, NC_CHAR's
    characters (as netCDF4 returns them without chartostring) joined as xarray joins them."""
    path = _nczarr_store(tmp_path)
    got = _quiet_open(path, engine="zstrings", string_dtype="bytes")
    raw_s = zarr.open_array(path / "s", mode="r")[:]
    assert got["s"].dtype == raw_s.dtype and got["s"].values.tolist() == raw_s.tolist()
    with netCDF4.Dataset(nc_url(path)) as d:
        assert [b.decode() for b in got["s"].values.tolist()] == list(d["s"][:])
        d["c"].set_auto_chartostring(False)
        chars = np.asarray(d["c"][:])
    assert got["c"].dims == ("x",) and got["c"].dtype == np.dtype("S4")
    assert got["c"].values.tolist() == [bytes(r).rstrip(b"\x00") for r in chars.view(np.uint8).reshape(3, -1)]
    assert got["c"].values.tolist() == [b"ab", "é".encode(), b"z\x00y"]
    # the text reading of the same store, for contrast
    text = _quiet_open(path, engine="zstrings")
    assert text["s"].values.tolist() == ["ok", "été", ""] and text["c"].values.tolist() == ["ab", "é", "z\x00y"]


def test_string_dtype_bytes_zarr_v2_vlen_and_unicode(tmp_path):
    """vlen-utf8 values as their stored bytes (invalid UTF-8 included, which the default refuses),
    <U as UTF-8 bytes."""
    g = zarr.open_group(tmp_path, mode="w", zarr_format=2)
    a = g.create_array("v", shape=(3,), dtype=str, chunks=(3,), compressors=None, fill_value="",
                       attributes={"_ARRAY_DIMENSIONS": ["x"]})
    a[:] = np.array(["ok", "xy", "été"], dtype=object)
    u = g.create_array("u", shape=(3,), dtype="<U4", chunks=(3,), attributes={"_ARRAY_DIMENSIONS": ["x"]})
    u[:] = np.array(["ok", "xy", "été"])
    chunk = tmp_path / "v" / "0"
    chunk.write_bytes(chunk.read_bytes().replace(b"xy", b"\xff\xfe"))
    got = _quiet_open(tmp_path, engine="zstrings", string_dtype="bytes")
    assert got["v"].values.tolist() == [b"ok", b"\xff\xfe", "été".encode()]
    assert numcodecs.VLenBytes().decode(chunk.read_bytes()).tolist() == got["v"].values.tolist()
    assert got["u"].values.tolist() == [s.encode() for s in u[:].tolist()]
    with pytest.raises(ZStringsError):  # the default refuses the corrupt value
        xr.open_dataset(tmp_path, engine="zstrings")["v"].values


@pytest.mark.parametrize("layout", ["vlen-utf8", "zarrs.vlen", "arrow", "sharded"])
def test_string_dtype_bytes_zarr_v3(tmp_path, layout):
    vals = np.array(["ok", "xy", "été", ""], dtype=object)
    if layout == "sharded":
        g = zarr.open_group(tmp_path, mode="w", zarr_format=3)
        g.create_array("s", shape=(4,), chunks=(2,), shards=(4,), dtype=str, compressors=None,
                       dimension_names=["x"])[:] = vals
    else:
        from xr_zstrings.write.zarr3 import to_zarr_v3

        to_zarr_v3(xr.Dataset({"s": ("x", vals)}), tmp_path, layout=layout, compressors=[], consolidated=False)
    files = [f for f in (tmp_path / "s").rglob("*") if f.is_file() and f.name != "zarr.json"]
    for f in files:
        f.write_bytes(f.read_bytes().replace(b"xy", b"x\xc3"))
    got = _quiet_open(tmp_path, engine="zstrings", string_dtype="bytes")["s"]
    assert got.dtype == object and got.values.tolist() == [b"ok", b"x\xc3", "été".encode(), b""]
    with pytest.warns(StringDecodeWarning, match="end of 1 value"):
        assert xr.open_dataset(tmp_path, engine="zstrings")["s"].values.tolist() == ["ok", "x", "été", ""]


def test_v3_fixed_types_and_trailing_nuls_as_zarr_python(tmp_path):
    """fixed_length_utf32 and null_terminated_bytes holding trailing NULs: the values zarr-python
    reads (numpy strips trailing NULs of fixed-width values), also with string_dtype="U"; a
    vlen-utf8 value ending with NUL, which zarr-python keeps, is refused by "U" instead of cut."""
    g = zarr.open_group(tmp_path, mode="w", zarr_format=3)
    u = g.create_array("u", shape=(3,), dtype="<U3", chunks=(3,), dimension_names=["x"])
    u[:] = np.array(["a\x00", "b", "c\x00d"])
    s = g.create_array("b", shape=(3,), dtype="S3", chunks=(3,), dimension_names=["x"])
    s[:] = np.array([b"a\x00", b"\xff", b"c\x00d"])
    v = g.create_array("v", shape=(3,), dtype=str, chunks=(3,), dimension_names=["x"])
    v[:] = np.array(["a\x00", "b", "c\x00d"], dtype=object)
    for sd in ("T", "O", "U"):
        ds = xr.open_dataset(tmp_path, engine="zstrings", string_dtype=sd)
        assert ds["u"].values.tolist() == u[:].tolist() == ["a", "b", "c\x00d"]
        assert ds["b"].values.tolist() == s[:].tolist() == [b"a", b"\xff", b"c\x00d"]  # bytes: not declared text
        if sd == "U":
            with pytest.raises(ZStringsError, match=r"1 value\(s\) end with NUL.*\[0\]"):
                ds["v"].values
        else:
            assert ds["v"].values.tolist() == v[:].tolist() == ["a\x00", "b", "c\x00d"]
    assert xr.open_dataset(tmp_path, engine="zarr")["b"].values.tolist() == s[:].tolist()
