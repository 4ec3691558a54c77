"""Writing edge cases (appends on every unlimited array, big unsigned attributes, fill values wider
than the data, NC_CHAR fills, bytes, name clashes, empty variables, dask probes), each checked
against the real netcdf-c (netCDF4) or zarr-python."""

from __future__ import annotations

import json
import os

import dask.array as da
import netCDF4
import numcodecs
import numpy as np
import pytest
import xarray as xr
from peers import nc_url

from xr_zstrings import ZStringsError
from xr_zstrings.write.convert import convert
from xr_zstrings.write.nczarr import to_nczarr
from xr_zstrings.write.zarr3 import to_zarr_v3


def test_append_grows_every_array_on_the_unlimited_dimension_zstrings_to_netCDF4(tmp_path):
    p = tmp_path / "a.zarr"
    to_nczarr(xr.Dataset({"a": ("t", [1.0, 2]), "b": ("t", [3.0, 4])}), p, unlimited_dims=["t"])
    to_nczarr(xr.Dataset({"a": ("t", [5.0])}), p, mode="a", append_dim="t")
    with netCDF4.Dataset(nc_url(p), "r") as nc:
        nc.set_auto_mask(False)
        assert nc["a"][:].tolist() == [1.0, 2.0, 5.0]
        assert nc["b"].shape == (3,) and nc["b"][:2].tolist() == [3.0, 4.0]
    got = xr.open_dataset(p, engine="zstrings")
    assert got["a"].values.tolist() == [1.0, 2.0, 5.0]


def test_big_unsigned_attribute_zstrings_to_netCDF4(tmp_path):
    p = tmp_path / "u.zarr"
    to_nczarr(xr.Dataset({"x": ("n", [1.0], {"big": 2**63})}), p)
    with netCDF4.Dataset(nc_url(p), "r") as nc:
        assert int(nc["x"].getncattr("big")) == 2**63
    with pytest.raises(ZStringsError, match="64-bit"):
        to_nczarr(xr.Dataset({"x": ("n", [1.0], {"huge": 2**64})}), tmp_path / "h.zarr")


def test_zarr_python_3_compressors_encoding_is_kept(tmp_path):
    src = tmp_path / "src.zarr"
    xr.Dataset({"x": ("n", np.arange(100.0))}).to_zarr(
        src, zarr_format=2, consolidated=False, encoding={"x": {"compressors": [numcodecs.Zstd(3)]}})
    to_nczarr(xr.open_zarr(src, consolidated=False), tmp_path / "o.zarr")
    assert json.loads((tmp_path / "o.zarr" / "x" / ".zarray").read_text())["compressor"]["id"] == "zstd"
    with netCDF4.Dataset(nc_url(tmp_path / "o.zarr"), "r") as nc:
        assert nc["x"][:].tolist() == list(np.arange(100.0))


def test_dask_graph_probe_writes_no_stray_chunk(tmp_path):
    p = tmp_path / "d.zarr"
    to_nczarr(xr.Dataset({"m": (("a", "b"), da.ones((2, 2), chunks=1))}), p)
    assert sorted(os.listdir(p / "m")) == [".zarray", ".zattrs", "0.0", "0.1", "1.0", "1.1"]


def test_string_fill_value_longer_than_the_data_widens(tmp_path):
    ds = xr.Dataset({"s": ("n", ["a", "b"])})
    ds["s"].encoding["_FillValue"] = "NA"
    to_nczarr(ds, tmp_path / "f.zarr")
    with netCDF4.Dataset(nc_url(tmp_path / "f.zarr"), "r") as nc:
        assert nc["s"][:].tolist() == ["a", "b"] and nc["s"].getncattr("_FillValue") == "NA"


def test_nc_char_fill_value_is_written_and_must_be_one_byte(tmp_path):
    ds = xr.Dataset({"c": ("n", ["ab", "c"])})
    ds["c"].encoding.update(nc_type="NC_CHAR", _FillValue="X")
    to_nczarr(ds, tmp_path / "c.zarr")
    with netCDF4.Dataset(nc_url(tmp_path / "c.zarr"), "r") as nc:
        assert nc["c"].getncattr("_FillValue") == b"X"  # as netCDF4 returns netcdf-c's own char fill
    ds["c"].encoding["_FillValue"] = "é"
    with pytest.raises(ZStringsError, match="one byte"):
        to_nczarr(ds, tmp_path / "c2.zarr")


def test_bytes_as_nc_string(tmp_path):
    ds = xr.Dataset({"b": ("n", np.array([b"ab", b"c"]))})
    ds["b"].encoding["nc_type"] = "NC_STRING"
    to_nczarr(ds, tmp_path / "b.zarr")
    with netCDF4.Dataset(nc_url(tmp_path / "b.zarr"), "r") as nc:
        assert nc["b"][:].tolist() == ["ab", "c"]


def test_group_and_variable_of_the_same_name_is_refused(tmp_path):
    with pytest.raises(ZStringsError, match="same name"):
        to_nczarr({"/": xr.Dataset({"a": ("x", [1])}), "/a": xr.Dataset({"v": ("y", [1.0])})},
                  tmp_path / "n.zarr")
    assert not (tmp_path / "n.zarr").exists()


def test_empty_nc_char_variable_is_readable_by_netcdf_c(tmp_path):
    ds = xr.Dataset({"c": ("n", np.array([], str))})
    ds["c"].encoding["nc_type"] = "NC_CHAR"
    to_nczarr(ds, tmp_path / "e.zarr")
    with netCDF4.Dataset(nc_url(tmp_path / "e.zarr"), "r") as nc:
        assert nc["c"].shape == (0, 1) and nc["c"][:].size == 0


def test_nc_char_without_encoding_gains_no_encoding_through_convert(tmp_path):
    src = tmp_path / "c.nc"
    with netCDF4.Dataset(src, "w") as nc:
        nc.createDimension("n", 1)
        nc.createDimension("s", 2)
        nc.createVariable("c", "S1", ("n", "s"))[:] = np.array([[b"x", b"y"]])
    convert(src, tmp_path / "c.zarr")
    convert(tmp_path / "c.zarr", tmp_path / "back.nc")
    with netCDF4.Dataset(tmp_path / "back.nc") as nc:
        assert nc["c"].ncattrs() == []
        assert nc["c"].dtype == np.dtype("S1")


@pytest.mark.parametrize(("name", "fmt", "says"), [("back.nc", None, "a netCDF-4 file, which every netcdf-c reads"),
                                                   ("v2.zarr", "zarr2", "written as plain Zarr v2"),
                                                   ("v3.zarr", "zarr3", "written as Zarr v3")])
def test_convert_refuses_netcdf_c_for_a_target_that_is_not_nczarr_saying_what_it_is(tmp_path, name, fmt, says):
    """netcdf_c chooses an NCZarr layout: for another target the refusal says what that target is."""
    src = tmp_path / "src.zarr"
    to_nczarr(xr.Dataset({"s": ("n", np.array(["a"], dtype=object))}), src)
    with pytest.raises(ZStringsError, match=f"netcdf_c='4.9.0' chooses the NCZarr layout.*is {says}.*Drop netcdf_c"):
        convert(src, tmp_path / name, netcdf_c="4.9.0", format=fmt)
    assert not (tmp_path / name).exists()


def test_convert_to_an_existing_netcdf_file_names_the_fix_it_takes(tmp_path):
    """A netCDF-4 target that exists: the refusal names mode='w' only (a netCDF file is written
    whole; mode='a' is refused for it), and mode='w' then replaces it, read by netCDF4."""
    from xr_zstrings.errors import TargetExistsError

    src = tmp_path / "src.zarr"
    to_nczarr(xr.Dataset({"s": ("n", np.array(["a", "bé"], dtype=object))}), src)
    dst = tmp_path / "out.nc"
    convert(src, dst)
    old = dst.read_bytes()
    with pytest.raises(TargetExistsError, match=r"exists and mode='w-' never overwrites\. Pass mode='w'") as e:
        convert(src, dst)
    assert "append" not in str(e.value) and dst.read_bytes() == old
    convert(src, dst, mode="w")
    with netCDF4.Dataset(dst) as nc:
        assert nc["s"][:].tolist() == ["a", "bé"]


def test_convert_takes_the_zarr2_format_from_the_url_mode_only(tmp_path):
    """``#mode=zarr`` (netcdf-c's pure Zarr) makes a Zarr v2 target; a folder named ``mode=zarr`` in
    the path does not (it is an NCZarr target, as any other path), as netcdf-c reads each."""
    from xr_zstrings.write.convert import target_format

    src = tmp_path / "src.zarr"
    to_nczarr(xr.Dataset({"s": ("n", np.array(["a", "bé"], dtype=object))}), src)
    (tmp_path / "mode=zarr").mkdir()
    in_folder = tmp_path / "mode=zarr" / "out.zarr"
    assert target_format(in_folder) == "nczarr"
    convert(src, in_folder)
    assert (in_folder / ".zgroup").read_text().count("_nczarr_superblock") == 1
    assert target_format(f"{(tmp_path / 'pure.zarr').as_uri()}#mode=zarr,file") == "zarr2"
    assert target_format(f"{(tmp_path / 'nc.zarr').as_uri()}#mode=nczarr,file") == "nczarr"
    with netCDF4.Dataset(nc_url(in_folder)) as nc:
        assert nc["s"][:].tolist() == ["a", "bé"]


def test_to_zarr_v3_bytes_keep_nuls_and_datatree_groups_get_the_layout(tmp_path):
    p = tmp_path / "b.zarr"
    to_zarr_v3(xr.Dataset({"b": ("n", np.array([b"ab", b"c\x00d"]))}), p)
    assert json.loads((p / "b" / "zarr.json").read_text())["data_type"] == "variable_length_bytes"
    assert xr.open_dataset(p, engine="zstrings")["b"].values.tolist() == [b"ab", b"c\x00d"]
    tree = xr.DataTree.from_dict({"/": xr.Dataset({"s": ("n", ["a"])}), "/g": xr.Dataset({"t": ("m", ["b"])})})
    to_zarr_v3(tree, tmp_path / "t.zarr", layout="arrow")
    assert json.loads((tmp_path / "t.zarr" / "g" / "t" / "zarr.json").read_text())["data_type"] == {"name": "string"}
    back = xr.open_datatree(tmp_path / "t.zarr", engine="zstrings")
    assert back["g/t"].values.tolist() == ["b"] and back["s"].values.tolist() == ["a"]


# ---------------------------------------------------------------------------------------------
# Issue 24: the overflow error names the variable, the longest value, its position and length
# ---------------------------------------------------------------------------------------------

_LONG = "São Paulo"  # 10 bytes of UTF-8


@pytest.mark.parametrize(("data", "chunked", "where"), [
    (np.array(["ab", "x", _LONG, "y"], dtype=np.dtypes.StringDType()), False, "[2]"),
    (np.array(["ab", "x", _LONG, "y"], dtype=object), True, "[2]"),  # a dask block of 1: position in the variable
    (np.array([["ab", "x"], ["y", _LONG]], dtype="U"), False, "(1, 1)"),
    (np.array([["ab", "x"], ["y", _LONG]], dtype="U"), True, "(1, 1)"),
])
def test_overflow_error_names_the_value_its_position_and_length(tmp_path, data, chunked, where):
    ds = xr.Dataset({"s": (("x", "y")[: data.ndim], data)})
    ds = ds.chunk(1) if chunked else ds
    with pytest.raises(ZStringsError) as e:
        to_nczarr(ds, tmp_path / "o.zarr", maxstrlen=2)
    msg = str(e.value)
    assert "variable '/s'" in msg and f"value {where} = '{_LONG}', needs 10 bytes of UTF-8" in msg, msg
    assert "width is 2 bytes" in msg and "on_overflow='widen' to use width 10" in msg
    assert not (tmp_path / "o.zarr").exists()


def _slow_blocks(n: int, bad: str) -> da.Array:
    """``n`` one-value blocks: the first is ``bad`` and made at once, every other one is made 0.3 s
    later (still running on dask's other threads when the first block's write fails)."""
    import time

    def make(block_info=None):
        (i,) = block_info[None]["chunk-location"]
        if i:
            time.sleep(0.3)
        return np.array([bad if i == 0 else "ok"], dtype=object)

    return da.map_blocks(make, chunks=((1,) * n,), dtype=object, meta=np.empty(0, object))


@pytest.mark.parametrize(("writer", "bad", "match"), [
    ("to_nczarr", _LONG, "needs 10 bytes of UTF-8"),  # longer than maxstrlen=2
    ("to_zarr_v3", "\ud800", "surrogate"),  # no UTF-8 for a lone surrogate
])
def test_a_failed_block_stops_the_other_blocks_writing(tmp_path, writer, bad, match):
    """dask's threaded scheduler raises a block's error while the other blocks still run, and
    goes on running them: they must not write into the target the writer is removing. Before:
    the removal could fail with IsADirectoryError instead of the block's error (seen in CI), and
    the other blocks' chunks made the temporary store again after it was removed."""
    import time

    import dask

    ds = xr.Dataset({"s": ("x", _slow_blocks(8, bad))})
    with dask.config.set(scheduler="threads", num_workers=4), pytest.raises(ZStringsError, match=match):
        if writer == "to_nczarr":
            to_nczarr(ds, tmp_path / "o.zarr", maxstrlen=2)
        else:
            to_zarr_v3(ds, tmp_path / "o.zarr")
    time.sleep(1.5)  # every block dask started has ended by now
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "the write left something behind"


def test_overflow_error_names_bytes_values_too(tmp_path):
    ds = xr.Dataset({"b": ("x", np.array([b"ab", b"abcdef"], dtype="S6"))})
    with pytest.raises(ZStringsError, match=r"variable '/b': 1 value\(s\) do not fit: the longest, value \[1\] = "
                                            r"b'abcdef', needs 6 bytes but the width is 2 bytes"):
        to_nczarr(ds, tmp_path / "o.zarr", maxstrlen=2)


@pytest.mark.parametrize("on_overflow", ["error", "widen"])
def test_an_append_that_overflows_is_not_told_to_widen(tmp_path, on_overflow):
    """An append keeps the stored width (on_overflow='widen' acts as 'error'): the error must not
    advise widen, but what works (truncate, or rewriting with a larger maxstrlen)."""
    p = tmp_path / "log.zarr"
    to_nczarr(xr.Dataset({"s": ("t", np.array(["ab", "cd"], dtype=object))}), p, unlimited_dims=["t"])
    more = xr.Dataset({"s": ("t", np.array(["x", _LONG], dtype=object))})
    with pytest.raises(ZStringsError) as e:
        to_nczarr(more, p, mode="a", append_dim="t", on_overflow=on_overflow)
    msg = str(e.value)
    assert f"value [1] = '{_LONG}', needs 10 bytes" in msg and "An append keeps the stored width" in msg, msg
    assert "widen" not in msg and "on_overflow='truncate'" in msg and "maxstrlen=10" in msg
    to_nczarr(more, p, mode="a", append_dim="t", on_overflow="truncate")  # what it advises works
    with netCDF4.Dataset(nc_url(p), "r") as nc:
        assert nc["s"][:].tolist() == ["ab", "cd", "x", "S"]  # 'Sã' is 3 bytes


@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize("pos", [1, 3, 7])
def test_an_append_overflow_names_the_position_in_the_appended_values(tmp_path, chunked, pos):
    """A dask-backed append is written in pieces ending on the store's chunk boundaries (the first
    completes a partial last chunk): the error names the value's index in what the user appended,
    not in the piece being written."""
    p = tmp_path / "log.zarr"
    first = xr.Dataset({"s": ("t", np.array(["ab"] * 3, dtype=object))})
    first.s.encoding["chunksizes"] = (2,)
    to_nczarr(first, p, unlimited_dims=["t"], maxstrlen=4)
    vals = np.array(["x"] * 9, dtype=object)
    vals[pos] = _LONG
    more = xr.Dataset({"s": ("t", da.from_array(vals, chunks=4) if chunked else vals)})
    with pytest.raises(ZStringsError) as e:
        to_nczarr(more, p, mode="a", append_dim="t")
    msg = str(e.value)
    assert f"value [{pos}] = '{_LONG}'" in msg and "dask block" not in msg, msg


@pytest.mark.parametrize("mode", ["w-", "w"])
def test_a_group_into_an_existing_zip_is_refused_naming_the_fix_and_the_zip_is_unchanged(tmp_path, mode):
    """A zip is only ever replaced whole: a group written into one is refused before anything is
    written (it failed with a bare NotADirectoryError), and the zip still reads as before."""
    import hashlib

    ds = xr.Dataset({"s": ("x", np.array(["a", "bb"], dtype="T"))})
    target = tmp_path / "x.zip"
    to_zarr_v3(ds, target)
    before = hashlib.sha256(target.read_bytes()).hexdigest()
    with pytest.raises(ZStringsError, match=r"group 'g' into the zip store .*written whole.*DataTree"):
        to_zarr_v3(ds, target, group="g", mode=mode)
    assert hashlib.sha256(target.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.zip"]  # nothing left beside it
    from zarr.storage import ZipStore

    with ZipStore(target, mode="r") as store:
        assert xr.open_dataset(store, engine="zarr")["s"].values.tolist() == ["a", "bb"]
