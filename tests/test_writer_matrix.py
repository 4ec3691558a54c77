"""Data opened with engine="zstrings" goes through xarray's own writers and ours, unchanged.

Writer x reader matrix: every source store (golden netcdf-c stores of every generation, live
netcdf-c 4.10.1 output, zarr-python v2 and v3 stores, our v3 layouts) opened with
engine="zstrings", written by each writer, read back by engine="zstrings" and by the writing
engine's own reader. Test ids read like ``nc4101-char -> to_zarr(v3) -> zstrings``.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import netCDF4
import numpy as np
import pytest
import xarray as xr
import zarr

from xr_zstrings.sample import sample_path
from xr_zstrings.writer import prepare_for_zarr, to_nczarr
from xr_zstrings.zarr_encoding import for_zarr


def _open(path: str | Path, **kw) -> xr.Dataset:
    return xr.open_dataset(path, engine="zstrings", **kw)


# ---------------------------------------------------------------------------------------------
# The built-in sample (netcdf-c NCZarr, temperature with zlib level 4 + shuffle)
# ---------------------------------------------------------------------------------------------


def test_sample_to_zarr_v3_unchanged_keeps_zlib_and_shuffle(tmp_path):
    ds = _open(sample_path())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # zarr-python: numcodecs.* are not in the v3 spec
        ds.to_zarr(tmp_path / "a.zarr", zarr_format=3)
    meta = json.loads((tmp_path / "a.zarr" / "temperature" / "zarr.json").read_text())
    assert meta["codecs"][1:] == [
        {"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}},
        {"name": "numcodecs.zlib", "configuration": {"level": 4}},
    ]
    for engine in ("zstrings", "zarr"):
        back = xr.open_dataset(tmp_path / "a.zarr", engine=engine).load()
        xr.testing.assert_identical(back, ds.load())
    assert back.indexes["station"].tolist() == ds["station"].values.tolist()


def test_sample_to_zarr_v2_keeps_zlib_and_shuffle_at_the_element_size(tmp_path):
    ds = _open(sample_path())
    ds.zstrings.to_zarr(tmp_path / "a.zarr", zarr_format=2)
    meta = json.loads((tmp_path / "a.zarr" / "temperature" / ".zarray").read_text())
    assert meta["compressor"] == {"id": "zlib", "level": 4}
    assert meta["filters"] == [{"id": "shuffle", "elementsize": 4}]  # netcdf-c wrote 0
    for engine in ("zstrings", "zarr"):
        xr.testing.assert_identical(xr.open_dataset(tmp_path / "a.zarr", engine=engine).load(), ds.load())


def test_codecs_follow_zarr_default_format(tmp_path):
    """With zarr-python's default format set to 2, plain ``ds.to_zarr()`` writes v2 unchanged."""
    with zarr.config.set({"default_zarr_format": 2}):
        ds = _open(sample_path())
        assert ds["temperature"].encoding["compressors"][0].get_config() == {"id": "zlib", "level": 4}
        ds.to_zarr(tmp_path / "a.zarr", zarr_format=2)
    meta = json.loads((tmp_path / "a.zarr" / "temperature" / ".zarray").read_text())
    assert (meta["compressor"], meta["filters"]) == ({"id": "zlib", "level": 4},
                                                     [{"id": "shuffle", "elementsize": 4}])
    xr.testing.assert_identical(xr.open_dataset(tmp_path / "a.zarr", engine="zarr").load(), ds.load())


@pytest.mark.parametrize("engine", ["netcdf4", "h5netcdf"])
def test_sample_to_netcdf_keeps_zlib_and_shuffle(tmp_path, engine):
    ds = _open(sample_path())
    ds.to_netcdf(tmp_path / "a.nc", engine=engine)
    with netCDF4.Dataset(tmp_path / "a.nc") as nc:
        f = nc["temperature"].filters()
        assert (f["zlib"], f["shuffle"], f["complevel"]) == (True, True, 4)
    for reader in ("netcdf4", "h5netcdf"):
        xr.testing.assert_identical(xr.open_dataset(tmp_path / "a.nc", engine=reader).load(), ds.load())


def test_sample_prepare_for_zarr_v2_is_read_by_netcdf_c(tmp_path):
    ds = _open(sample_path())
    prepare_for_zarr(ds).to_zarr(tmp_path / "a.zarr", zarr_format=2, consolidated=False)
    back = _open(tmp_path / "a.zarr").load()
    xr.testing.assert_equal(back, ds.load())
    assert "station" in back.indexes
    with netCDF4.Dataset(f"file://{(tmp_path / 'a.zarr').resolve()}#mode=zarr,file") as nc:
        assert [str(s) for s in nc["station"][:]] == ds["station"].values.tolist()
        assert [str(s) for s in nc["climate"][:]] == ds["climate"].values.tolist()
        # netcdf-c (mode=zarr) does not take .zarray's fill_value as _FillValue: the fill comes back raw
        raw = np.ma.getdata(nc["temperature"][:])
        np.testing.assert_array_equal(np.where(raw == -999, np.nan, raw), ds["temperature"].values)


def test_sample_through_our_writers_keeps_the_codecs(tmp_path):
    ds = _open(sample_path())
    to_nczarr(ds, tmp_path / "a.zarr")
    meta = json.loads((tmp_path / "a.zarr" / "temperature" / ".zarray").read_text())
    assert (meta["compressor"], meta["filters"]) == ({"id": "zlib", "level": 4},
                                                     [{"id": "shuffle", "elementsize": 0}])
    xr.testing.assert_identical(_open(tmp_path / "a.zarr").load(), ds.load())


def test_for_zarr_round_trips_between_vocabularies():
    ds = _open(sample_path())
    v2 = for_zarr(ds, 2)["temperature"].encoding
    assert [c.get_config() for c in v2["compressors"]] == [{"id": "zlib", "level": 4}]
    assert [c.get_config() for c in v2["filters"]] == [{"id": "shuffle", "elementsize": 4}]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        v3 = for_zarr(for_zarr(ds, 2), 3)["temperature"].encoding
    assert [c.to_dict() for c in v3["compressors"]] == [
        {"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}},
        {"name": "numcodecs.zlib", "configuration": {"level": 4}},
    ]
    assert v3["filters"] is None
