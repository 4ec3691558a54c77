"""Reading as netcdf-c (and xarray on top of it) reads: stores written by netcdf-c itself (netCDF4,
ncgen from Debian's netcdf-bin), each compared with what the peer reads back from the same bytes."""

from __future__ import annotations

import shutil
import subprocess

import netCDF4
import numpy as np
import pytest
import xarray as xr
from peers import assert_same_as_netcdf4, nc_url, xarray_netcdf4_dims

NCGEN = shutil.which("ncgen")
needs_ncgen = pytest.mark.skipif(
    NCGEN is None, reason="ncgen (Debian netcdf-bin) is not installed; .ci/run installs it"
)


def _chars(rows: list[bytes], n: int) -> np.ndarray:
    return np.frombuffer(b"".join(r.ljust(n, b"\0") for r in rows), "S1").reshape(len(rows), n)


def _as_text(values: list) -> list:
    """engine="netcdf4" returns NC_CHAR without _Encoding as bytes; we return str."""
    return [v.decode("utf-8") if isinstance(v, bytes) else v for v in values]


# ----------------------------------------------------------------------------- NC_CHAR


@needs_ncgen
def test_char_embedded_nul_from_ncgen_cdl_reads_as_netcdf_c_and_xarray(tmp_path):
    """ncgen writes the CDL string "abc\\000def" as 7 chars; netcdf-c keeps the NUL (ncdump prints
    it) and xarray's concat_characters too: only trailing NULs end an NC_CHAR value."""
    cdl = tmp_path / "nul.cdl"
    cdl.write_text(
        "netcdf nul {\ndimensions:\n  n = 3 ;\n  len = 7 ;\nvariables:\n  char c(n, len) ;\n"
        'data:\n  c = "abc\\000def", "xy", "\\000\\000z" ;\n}\n'
    )
    # Debian's ncgen (netcdf-c 4.9.0) writes NCZarr that the netCDF4 wheel's 4.10.1 refuses, so the
    # same CDL also goes to a netCDF-4 file for xarray's engine="netcdf4"; ncdump reads the store
    store, ncfile = tmp_path / "nul.zarr", tmp_path / "nul.nc"
    subprocess.run([NCGEN, "-k", "nc4", "-o", nc_url(store), str(cdl)], check=True)
    subprocess.run([NCGEN, "-k", "nc4", "-o", str(ncfile), str(cdl)], check=True)
    dump = subprocess.run(["ncdump", nc_url(store)], check=True, capture_output=True, text=True).stdout
    assert '"abc\\000def"' in dump  # netcdf-c's own reading of the stored bytes
    peer = xr.open_dataset(ncfile, engine="netcdf4")
    ours = xr.open_dataset(store, engine="zstrings")
    assert ours["c"].dims == peer["c"].dims == ("n",)
    assert ours["c"].values.tolist() == _as_text(peer["c"].values.tolist())
    assert ours["c"].values.tolist() == ["abc\x00def", "xy", "\x00\x00z"]


def _write_char_dims(path, mode: str = "nczarr") -> None:
    """netcdf-c store: a char dim used only by NC_CHAR (joined), one shared with a number and one
    with a coordinate variable of its name (xarray joins neither), one NC_CHAR using a char dim
    not last (so its other user is not joined either)."""
    ds = netCDF4.Dataset(nc_url(path, mode), "w")
    try:
        for name, size in [("n", 2), ("nchar", 5), ("m", 3), ("k", 4), ("w", 2)]:
            ds.createDimension(name, size)
        ds.createVariable("only_char", "S1", ("n", "nchar"))[:] = _chars([b"ab\0d", b"xyz"], 5)
        ds.createVariable("shared_char", "S1", ("n", "m"))[:] = _chars([b"ab", b"c\0e"], 3)
        ds.createVariable("count", "i4", ("m",))[:] = [1, 2, 3]
        ds.createVariable("k", "i4", ("k",))[:] = [0, 1, 2, 3]
        ds.createVariable("coord_char", "S1", ("n", "k"))[:] = _chars([b"abcd", b"e"], 4)
        ds.createVariable("w_last", "S1", ("n", "w"))[:] = _chars([b"ab", b"c"], 2)
        ds.createVariable("w_first", "S1", ("w", "n"))[:] = _chars([b"pq", b"r"], 2)
        v = ds.createVariable("utf8_shared", "S1", ("n", "m"))
        v._Encoding = "utf-8"
        v[:] = _chars([b"ok", b"a"], 3)  # (xarray fails on a split "é" here: per-char decode)
    finally:
        ds.close()


def test_char_dimension_joined_only_where_xarray_netcdf4_joins_it(tmp_path):
    store = tmp_path / "dims.zarr"
    _write_char_dims(store)
    peer_dims = xarray_netcdf4_dims(nc_url(store))["/"]
    ours = xr.open_dataset(store, engine="zstrings")
    assert {k: v.dims for k, v in ours.variables.items()} == peer_dims
    assert peer_dims["only_char"] == ("n",)  # the peer's decisions this pins
    assert peer_dims["shared_char"] == ("n", "m") and peer_dims["coord_char"] == ("n", "k")
    assert peer_dims["w_last"] == ("n", "w")
    peer = xr.open_dataset(nc_url(store), engine="netcdf4")
    for name in peer.variables:
        assert _as_text(ours[name].values.tolist()) == _as_text(peer[name].values.tolist()), name
    assert_same_as_netcdf4(store)  # values, attributes, groups as netCDF4 reads them


def test_char_dimension_rule_counts_dropped_variables_as_xarray_does(tmp_path):
    store = tmp_path / "dims.zarr"
    _write_char_dims(store)
    peer = xr.open_dataset(nc_url(store), engine="netcdf4", drop_variables=["count", "utf8_shared"])
    ours = xr.open_dataset(store, engine="zstrings", drop_variables=["count", "utf8_shared"])
    assert {k: v.dims for k, v in ours.variables.items()} == {k: v.dims for k, v in peer.variables.items()}
