"""Names that say what they give (issue 38, item 6): ``to_zarr_v2`` is the pure Zarr v2 writer
(``to_nczarr(format="zarr2")`` still works, writing the same bytes); ``with_netcdf_c_strings`` and
``with_zarr_encoding`` are the old ``prepare_for_zarr`` and ``for_zarr``, whose names still work and
warn ``FutureWarning`` at the caller's line; every writer's ``mode`` is the one ``WriteMode`` type
(``NewMode`` where a writer refuses ``"a"``). Outputs are read back by engine="zarr", zarr-python
and netcdf-c (netCDF4, ``mode=zarr``)."""

from __future__ import annotations

import json
import typing
import warnings
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from peers import nc_url, netcdf4_view

import xr_zstrings
from xr_zstrings import ZStringsError
from xr_zstrings.write import NewMode, WriteMode

DS = xr.Dataset(
    {"name": ("t", np.array(["a", "été", "", "ccc"], dtype=object)), "v": ("t", [1.0, 2.5, -1.0, 4.0])},
    coords={"t": [0, 1, 2, 3]},
)
MORE = xr.Dataset(
    {"name": ("t", np.array(["dd", "ü"], dtype=object)), "v": ("t", [5.0, 6.0])},
    coords={"t": [4, 5]},
)


def _files(root: Path) -> dict[str, bytes]:
    """Every file's bytes; the root ``.zgroup``'s version record (random lineage and commit ids, one
    per write: io.commit) is left out, in the file and in ``.zmetadata``."""
    out = {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
    for key, path in ((".zgroup", ()), (".zmetadata", ("metadata", ".zgroup"))):
        if key in out:
            doc = json.loads(out[key])
            node = doc
            for k in path:
                node = node[k]
            assert set(node.pop("xr_zstrings", {})) <= {"lineage", "commit", "version"}
            out[key] = json.dumps(doc).encode()
    return out


def _write_both(tmp_path: Path, new: typing.Callable[[Path], None]) -> tuple[Path, Path]:
    old = tmp_path / "old.zarr"
    xr_zstrings.to_nczarr(DS, old, format="zarr2", unlimited_dims=["t"])
    xr_zstrings.to_nczarr(MORE, old, mode="a", format="zarr2", append_dim="t")
    out = tmp_path / "new.zarr"
    new(out)
    return old, out


@pytest.mark.parametrize("spelling", ["function", "accessor"])
def test_to_zarr_v2_writes_the_bytes_to_nczarr_zarr2_writes(tmp_path, spelling):
    """Written, then appended to: the same files with the same bytes, read the same by engine="zarr",
    engine="zstrings", zarr-python and netcdf-c (``mode=zarr``)."""

    def new(out: Path) -> None:
        if spelling == "function":
            xr_zstrings.to_zarr_v2(DS, out, unlimited_dims=["t"])
            xr_zstrings.to_zarr_v2(MORE, out, mode="a", append_dim="t")
        else:
            DS.zstrings.to_zarr_v2(out, unlimited_dims=["t"])
            MORE.zstrings.to_zarr_v2(out, mode="a", append_dim="t")

    old, out = _write_both(tmp_path, new)
    assert _files(out) == _files(old)
    for engine in ("zarr", "zstrings"):
        with xr.open_dataset(old, engine=engine) as a, xr.open_dataset(out, engine=engine) as b:
            xr.testing.assert_identical(a.load(), b.load())
    assert xr.open_dataset(out, engine="zstrings")["name"].values.tolist() == ["a", "été", "", "ccc", "dd", "ü"]
    group = zarr.open_group(out, mode="r", zarr_format=2)
    assert group["v"][:].tolist() == [1.0, 2.5, -1.0, 4.0, 5.0, 6.0]
    assert repr(netcdf4_view(nc_url(out, "zarr"))) == repr(netcdf4_view(nc_url(old, "zarr")))  # (NaN fill: repr)


def test_to_zarr_v2_takes_to_nczarrs_arguments_but_format():
    """A thin spelling of ``to_nczarr(format="zarr2")``: the same keyword arguments, without ``format``."""
    import inspect

    params = dict(inspect.signature(xr_zstrings.to_nczarr).parameters)
    del params["format"]
    assert list(inspect.signature(xr_zstrings.to_zarr_v2).parameters) == list(params)
    with pytest.raises(TypeError, match="format"):
        xr_zstrings.to_zarr_v2(DS, "unused.zarr", format="nczarr")  # type: ignore[call-arg]


def _warned_here(record: list[warnings.WarningMessage], new: str) -> None:
    (w,) = [w for w in record if issubclass(w.category, FutureWarning)]
    assert new in str(w.message) and "deprecated" in str(w.message)
    assert w.filename == __file__  # the user's line, not the package's


def test_prepare_for_zarr_is_with_netcdf_c_strings_and_warns(tmp_path):
    """The old name gives the same Dataset (same bytes through ``to_zarr``) and warns naming the new."""
    new = xr_zstrings.with_netcdf_c_strings(DS)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        old = xr_zstrings.prepare_for_zarr(DS)
    _warned_here(record, "with_netcdf_c_strings")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        via_accessor = DS.zstrings.prepare_for_zarr()
    _warned_here(record, "with_netcdf_c_strings")
    for name, ds in (("new", new), ("old", old), ("accessor", via_accessor),
                     ("new_accessor", DS.zstrings.with_netcdf_c_strings())):
        ds.to_zarr(tmp_path / f"{name}.zarr", zarr_format=2, consolidated=False)
    trees = {n: _files(tmp_path / f"{n}.zarr") for n in ("new", "old", "accessor", "new_accessor")}
    assert trees["old"] == trees["new"] == trees["accessor"] == trees["new_accessor"]
    with netcdf4_dataset(tmp_path / "new.zarr") as nc:  # the point of it: netcdf-c reads the strings
        assert nc["name"][:].tolist() == ["a", "été", "", "ccc"]


def netcdf4_dataset(path: Path) -> typing.Any:
    import netCDF4

    return netCDF4.Dataset(nc_url(path, "zarr"), "r")


@pytest.mark.parametrize("fmt", [2, 3])
def test_for_zarr_is_with_zarr_encoding_and_warns(tmp_path, fmt):
    src = tmp_path / "src.zarr"
    xr_zstrings.to_nczarr(DS, src, compressor={"id": "zlib", "level": 4})
    ds = xr.open_dataset(src, engine="zstrings")
    new = xr_zstrings.with_zarr_encoding(ds, fmt)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        old = xr_zstrings.for_zarr(ds, fmt)
    _warned_here(record, "with_zarr_encoding")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        via_accessor = ds.zstrings.for_zarr(fmt)
    _warned_here(record, "with_zarr_encoding")
    for name, d in (("new", new), ("old", old), ("accessor", via_accessor),
                    ("new_accessor", ds.zstrings.with_zarr_encoding(fmt))):
        d.to_zarr(tmp_path / f"{name}.zarr", zarr_format=fmt, consolidated=False)
    trees = {n: _files(tmp_path / f"{n}.zarr") for n in ("new", "old", "accessor", "new_accessor")}
    assert trees["old"] == trees["new"] == trees["accessor"] == trees["new_accessor"]
    with xr.open_dataset(tmp_path / "new.zarr", engine="zarr", consolidated=False) as back:
        assert back["name"].values.tolist() == ["a", "été", "", "ccc"]


def test_the_new_names_are_public_and_the_old_ones_only_importable():
    for name in ("to_zarr_v2", "with_netcdf_c_strings", "with_zarr_encoding"):
        assert name in xr_zstrings.__all__ and name in dir(xr_zstrings)
    for name in ("prepare_for_zarr", "for_zarr"):
        assert name not in xr_zstrings.__all__
        assert callable(getattr(xr_zstrings, name))


def _mode(func: typing.Any) -> typing.Any:
    return typing.get_type_hints(func)["mode"]


def test_every_writer_mode_is_the_one_shared_type():
    """``mode`` is ``WriteMode`` where a writer writes into a store, ``NewMode`` (its ``"w-"`` and
    ``"w"``) where it only writes whole stores; no writer spells its own."""
    from xr_zstrings.accessor import ZStringsAccessor

    assert typing.get_args(WriteMode) == ("w-", "w", "a")
    assert typing.get_args(NewMode) == ("w-", "w")
    for func in (xr_zstrings.to_nczarr, xr_zstrings.to_zarr_v2, xr_zstrings.to_zarr_v3, xr_zstrings.convert,
                 ZStringsAccessor.to_nczarr, ZStringsAccessor.to_zarr_v2):
        assert _mode(func) == WriteMode, func
    for func in (xr_zstrings.migrate,):
        assert _mode(func) == NewMode, func


def test_a_writer_that_refuses_append_names_its_modes(tmp_path):
    src = tmp_path / "src.zarr"
    xr_zstrings.to_nczarr(DS, src)
    with pytest.raises(ZStringsError, match=r"Invalid mode='a': expected 'w-' .* or 'w'"):
        xr_zstrings.migrate(src, tmp_path / "out.zarr", mode="a")  # type: ignore[arg-type]
    assert not (tmp_path / "out.zarr").exists()
