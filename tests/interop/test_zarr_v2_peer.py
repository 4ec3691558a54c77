"""zarr-python / xarray (Zarr v2) -> zstrings: pure Zarr v2 stores written by the real peers."""

from __future__ import annotations

import netCDF4
import numcodecs
import numpy as np
import pytest
import xarray as xr
import zarr
from peers import nc_url

MULTI = ["a", "héllo", "中文字", "😀x", "", "zz"]


def _v2(path, name, data, **kw):
    g = zarr.open_group(path, mode="a", zarr_format=2)
    arr = g.create_array(name, shape=data.shape, dtype=kw.pop("dtype", data.dtype), **kw)
    arr[...] = data
    return arr


def _expected_text(arr) -> list:
    """What zarr-python reads back: |S without a text declaration stays bytes (as engine="zarr")."""
    values = np.asarray(arr[...])
    if values.dtype.kind == "S":
        return values.ravel().tolist()
    return [v if isinstance(v, bytes) else str(v) for v in values.ravel().tolist()]


def _plain(values) -> list:
    """Values as a comparable list, every missing value (NaN, NA) as None."""
    return [None if isinstance(v, float) and v != v else v
            for v in np.asarray(values, dtype=object).ravel().tolist()]


def _as_both_peers_read(path, name: str, arr) -> None:
    """engine="zstrings" reads a pure Zarr v2 array as engine="zarr" does (the array's fill_value
    masks, its use_zarr_fill_value_as_mask default), and with use_zarr_fill_value_as_mask=False as
    zarr-python does (the fill value is a value)."""
    ours = xr.open_dataset(path, engine="zstrings")[name].values
    assert _plain(ours) == _plain(xr.open_dataset(path, engine="zarr")[name].values)
    raw = xr.open_dataset(path, engine="zstrings", use_zarr_fill_value_as_mask=False)[name].values
    assert _plain(raw) == _expected_text(arr)


@pytest.mark.parametrize(
    "compressor",
    [None, numcodecs.Zlib(5), numcodecs.Zstd(3), numcodecs.BZ2(5), numcodecs.Blosc("lz4", 5, shuffle=1)],
    ids=["raw", "zlib", "zstd", "bz2", "blosc"],
)
@pytest.mark.parametrize("order", ["C", "F"])
def test_fixed_bytes_with_compressors_order_and_partial_chunks(tmp_path, compressor, order):
    data = np.array([s.encode() for s in MULTI * 3], dtype="S12").reshape(3, 6)
    arr = _v2(tmp_path, "s", data, chunks=(2, 4), compressors=compressor, order=order,
              attributes={"_ARRAY_DIMENSIONS": ["y", "x"]})
    ds = xr.open_dataset(tmp_path, engine="zstrings")
    assert ds["s"].dims == ("y", "x")
    _as_both_peers_read(tmp_path, "s", arr)
    assert _plain(ds["s"].values).count(None) == 3  # zarr-python's fill b"" masks the "" values
    assert ds["s"].encoding["chunks"] == (2, 4)
    assert ds["s"].encoding["order"] == order


def test_base64_fill_value_for_missing_chunks(tmp_path):
    g = zarr.open_group(tmp_path, mode="w", zarr_format=2)
    arr = g.create_array("s", shape=(6,), dtype="S5", chunks=(2,), fill_value=b"xy",
                         attributes={"_ARRAY_DIMENSIONS": ["x"]})
    arr[0:2] = np.array([b"ab", b"cd"])
    assert '"eHk="' in (tmp_path / "s" / ".zarray").read_text()
    assert not (tmp_path / "s" / "2").exists()
    assert _expected_text(arr) == [b"ab", b"cd", b"xy", b"xy", b"xy", b"xy"]
    _as_both_peers_read(tmp_path, "s", arr)
    assert _plain(xr.open_dataset(tmp_path, engine="zstrings")["s"].values) == [b"ab", b"cd"] + [None] * 4


@pytest.mark.parametrize("dtype", ["<U7", ">U7"])
def test_utf32_both_byte_orders(tmp_path, dtype):
    data = np.array(MULTI, dtype=dtype)
    arr = _v2(tmp_path, "u", data, chunks=(4,), attributes={"_ARRAY_DIMENSIONS": ["x"]})
    assert f'"{dtype}"' in (tmp_path / "u" / ".zarray").read_text()
    assert np.asarray(arr[:]).tolist() == MULTI
    _as_both_peers_read(tmp_path, "u", arr)  # (zarr-python's fill "": the one "" value is missing)


def test_vlen_utf8_and_vlen_bytes_objects(tmp_path):
    g = zarr.open_group(tmp_path, mode="w", zarr_format=2)
    s = g.create_array("s", shape=(6,), dtype=str, chunks=(4,), attributes={"_ARRAY_DIMENSIONS": ["x"]})
    s[:] = np.array(MULTI, dtype=object)
    b = g.create_array("b", shape=(3,), dtype=zarr.dtype.VariableLengthBytes(), chunks=(2,), attributes={"_ARRAY_DIMENSIONS": ["y"]})
    b[:] = np.array([b"\x00\xff", b"", b"abc"], dtype=object)
    zarray = (tmp_path / "s" / ".zarray").read_text()
    assert "vlen-utf8" in zarray and '"|O"' in zarray
    assert "vlen-bytes" in (tmp_path / "b" / ".zarray").read_text()
    assert list(s[:]) == MULTI and list(b[:]) == [b"\x00\xff", b"", b"abc"]
    _as_both_peers_read(tmp_path, "s", s)
    _as_both_peers_read(tmp_path, "b", b)


def test_slash_dimension_separator_and_numeric_fill(tmp_path):
    g = zarr.open_group(tmp_path, mode="w", zarr_format=2)
    a = g.create_array("a", shape=(5, 3), dtype="f8", chunks=(2, 2), fill_value=-1.5,
                       chunk_key_encoding={"name": "v2", "separator": "/"},
                       attributes={"_ARRAY_DIMENSIONS": ["y", "x"]})
    a[0:2, :] = 1.0
    assert (tmp_path / "a" / "0" / "0").exists()
    ds = xr.open_dataset(tmp_path, engine="zstrings", mask_and_scale=False)
    np.testing.assert_array_equal(ds["a"].values, a[:])
    masked = xr.open_dataset(tmp_path, engine="zstrings")["a"].values
    assert np.isnan(masked[2:]).all() and (masked[:2] == 1.0).all()


def test_anonymous_dimensions_named_as_netcdf_c_names_them(tmp_path):
    g = zarr.open_group(tmp_path, mode="w", zarr_format=2)
    g.create_array("a", shape=(3, 4), dtype="i4")[:] = np.arange(12).reshape(3, 4)
    g.create_array("c", shape=(3,), dtype="S5")[:] = np.array([b"ab", b"cd", b"e"])
    ref = netCDF4.Dataset(nc_url(tmp_path, "zarr"), "r")
    try:
        ref_dims = {n: v.dimensions for n, v in ref.variables.items()}
        ref_c = ref["c"][:].tolist()
    finally:
        ref.close()
    ds = xr.open_dataset(tmp_path, engine="zstrings")
    assert {n: ds[n].dims for n in ref_dims} == ref_dims
    # netcdf-c reads any |Sn as NC_STRING text; zarr-python wrote bytes (no declaration), so we
    # return them as engine="zarr" and zarr-python do (docs/format-notes.md)
    assert ref_c == ["ab", "cd", "e"]
    assert ds["c"].values.tolist() == [b"ab", b"cd", b"e"]
    assert ds["c"].values.tolist() == zarr.open_array(tmp_path / "c", mode="r")[:].tolist()


def test_xarray_to_zarr_v2_with_string_coords_reads_identically(tmp_path):
    src = xr.Dataset(
        {"temp": (("station", "time"), np.arange(6.0).reshape(3, 2), {"units": "K"})},
        coords={"station": ["Zürich", "東京", "Oslo"], "time": [0, 1],
                "code": ("station", np.array([b"ZRH", b"TYO", b"OSL"]))},
        attrs={"title": "stations"},
    )
    src.to_zarr(tmp_path / "x.zarr", zarr_format=2, consolidated=True)
    ref = xr.open_dataset(tmp_path / "x.zarr", engine="zarr")
    got = xr.open_dataset(tmp_path / "x.zarr", engine="zstrings")
    assert got["station"].values.tolist() == ref["station"].values.tolist() == ["Zürich", "東京", "Oslo"]
    # a bytes coordinate stays bytes, as the zarr engine returns it
    assert got["code"].values.tolist() == ref["code"].values.tolist() == [b"ZRH", b"TYO", b"OSL"]
    xr.testing.assert_identical(got, ref)
    assert got.sel(station="東京")["temp"].values.tolist() == [2.0, 3.0]
