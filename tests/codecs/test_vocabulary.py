"""codecs/vocabulary.py: the one table of codec names (numcodecs id, Zarr v3 name, netCDF4 name,
what netcdf-c reads), each row checked against the real libraries: zarr-python writes with the
row's v3 codec what numcodecs decodes, netCDF4 names the row's compression, and netcdf-c reads
an NCZarr array of each codec exactly when the row says it does."""

from __future__ import annotations

import warnings

import netCDF4
import numcodecs
import numpy as np
import pytest
import xarray as xr
import zarr
from peers import nc_url

from xr_zstrings.codecs.vocabulary import (
    CODECS,
    NETCDF_C_CODECS,
    NETCDF_C_FILTERS,
    netcdf4_compression,
    v2_equivalent,
    v2_id_of_netcdf4,
    v3_equivalent,
)
from xr_zstrings.write.nczarr import to_nczarr

#: a configuration each row's codec is built with (netcdf-c needs a level to be written: see below)
CONFIGS = {"zlib": {"level": 3}, "zstd": {"level": 3}, "bz2": {"level": 3}, "gzip": {"level": 3},
           "blosc": {"cname": "lz4", "clevel": 5, "shuffle": 1}, "lz4": {}, "shuffle": {"elementsize": 8}}
VALUES = np.arange(1000, dtype="<f8")


def _codec(row):
    return numcodecs.get_codec({"id": row.v2_id, **CONFIGS[row.v2_id]})


def test_every_row_has_a_configuration_here():
    assert sorted(CONFIGS) == sorted(r.v2_id for r in CODECS)


@pytest.mark.parametrize("row", CODECS, ids=lambda r: r.v2_id)
def test_each_row_is_the_same_codec_in_zarr_v3(tmp_path, row):
    """The row's v3 codec, as zarr-python writes it, is what numcodecs' codec of the row decodes;
    and back: the v3 codec's JSON gives a numcodecs codec decoding the same chunk."""
    v2 = _codec(row)
    role, v3 = v3_equivalent(v2, dtype=VALUES.dtype)
    assert role == "compressor" and v3.to_dict()["name"] == row.v3_name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numcodecs.* "not in the Zarr v3 specification"
        a = zarr.create_array(str(tmp_path / "a.zarr"), shape=VALUES.shape, chunks=VALUES.shape, dtype="<f8",
                              compressors=[v3], fill_value=0.0)
        a[:] = VALUES
    raw = (tmp_path / "a.zarr" / "c" / "0").read_bytes()
    assert np.array_equal(np.frombuffer(v2.decode(raw), "<f8"), VALUES)
    back = v2_equivalent(v3.to_dict())
    assert back.codec_id == row.v2_id
    assert np.array_equal(np.frombuffer(back.decode(raw), "<f8"), VALUES)


@pytest.mark.parametrize("row", [r for r in CODECS if r.netcdf4], ids=lambda r: r.v2_id)
def test_each_netcdf4_name_is_netcdf4s(tmp_path, row):
    """netCDF4 compresses with the row's ``compression`` name and reports it under that name."""
    with netCDF4.Dataset(tmp_path / "a.nc", "w") as nc:
        nc.createDimension("x", VALUES.size)
        nc.createVariable("v", "f8", ("x",), compression=row.netcdf4, complevel=3)[:] = VALUES
    with netCDF4.Dataset(tmp_path / "a.nc") as nc:
        assert nc["v"].filters()[row.netcdf4]
    assert netcdf4_compression(row.v2_id) == row.netcdf4 and v2_id_of_netcdf4(row.netcdf4) == row.v2_id


@pytest.mark.parametrize("row", CODECS, ids=lambda r: r.v2_id)
def test_netcdf_c_reads_exactly_the_codecs_the_table_says(tmp_path, row):
    """An NCZarr array compressed (or, for a filter, filtered) by the row's codec is read by
    netcdf-c (the netCDF4 wheel's) exactly when ``netcdf_c`` says so; the others fail to open as
    netcdf-c's "undefined filter"."""
    ds = xr.Dataset({"v": ("x", VALUES)})
    if row.netcdf_c == "filter":
        ds["v"].encoding.update(compressor={"id": "zlib", "level": 1}, filters=[_codec(row).get_config()])
    else:
        ds["v"].encoding.update(compressor=_codec(row).get_config())
    to_nczarr(ds, tmp_path / "s.zarr", netcdf_c_codecs_only=row.netcdf_c is not None)
    assert (row.v2_id in NETCDF_C_CODECS) == (row.netcdf_c == "compressor")
    assert (row.v2_id in NETCDF_C_FILTERS) == (row.netcdf_c == "filter")
    if row.netcdf_c is None:
        with pytest.raises(RuntimeError, match="undefined filter"), netCDF4.Dataset(nc_url(tmp_path / "s.zarr")) as nc:
            nc["v"][:]
        return
    with netCDF4.Dataset(nc_url(tmp_path / "s.zarr")) as nc:
        assert np.array_equal(nc["v"][:], VALUES)


@pytest.mark.parametrize("name", sorted(NETCDF_C_CODECS))
def test_netcdf_c_reads_a_compressor_given_by_name_alone(tmp_path, name):
    """``to_nczarr(compressor="zstd")`` (a name, no level): netcdf-c 4.10 crashed (SIGSEGV) reading
    a zstd or bz2 compressor without a level, so the writer writes numcodecs' default level (zlib:
    4). Read in a child process, which a crash cannot take the tests down with."""
    import subprocess
    import sys

    to_nczarr(xr.Dataset({"v": ("x", VALUES)}), tmp_path / "s.zarr", compressor=name)
    code = ("import sys, netCDF4, numpy as np\n"
            "with netCDF4.Dataset(sys.argv[1]) as nc:\n"
            "    print(np.array_equal(nc['v'][:], np.arange(1000)))\n")
    done = subprocess.run([sys.executable, "-c", code, nc_url(tmp_path / "s.zarr")], capture_output=True, text=True,
                          timeout=120, check=False)
    assert (done.returncode, done.stdout.strip()) == (0, "True"), done.stderr[-2000:]
