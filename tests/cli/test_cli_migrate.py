"""``zstrings migrate`` and the migration line of ``zstrings check``."""

from __future__ import annotations

import shutil

import netCDF4
import numpy as np
import xarray as xr
from peers import nc_url

from xr_zstrings.cli import main
from xr_zstrings.sample import sample_path


def _shuffled_strings(path):
    """netcdf-c NC_STRING |S6 with zlib+shuffle over 5 values: 30-byte chunks shuffled by 8 bytes."""
    with netCDF4.Dataset(nc_url(path), "w") as ds:
        ds.createDimension("x", 5)
        v = ds.createVariable("s", str, ("x",), zlib=True, shuffle=True)
        v._nczarr_maxstrlen = 6
        v[:] = np.array(["a", "bb", "ccc", "dddd", "é"], dtype=object)
        n = ds.createVariable("n", "i4", ("x",))
        n[:] = np.arange(5)
    return path


def test_migrate_dry_run_then_new_location_then_in_place(tmp_path, capsys):
    src = tmp_path / "s.zarr"
    shutil.copytree(sample_path(), src)
    assert main(["migrate", str(src), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"would migrate {src} in place") and "0 rewritten" in out
    assert not (src / "zarr.json").exists()
    assert main(["migrate", str(src), str(tmp_path / "v3.zarr")]) == 0
    out = capsys.readouterr().out
    assert "chunk object(s) hard-linked" in out
    assert main(["migrate", str(src), str(tmp_path / "v3.zarr")]) == 2  # exists: refused, names the fix
    assert "pass --overwrite" in capsys.readouterr().err  # the CLI's flag, not the API's mode='w'
    assert main(["migrate", str(src), str(tmp_path / "v3.zarr"), "--overwrite"]) == 0
    assert main(["migrate", str(src)]) == 0 and (src / "zarr.json").exists()
    capsys.readouterr()
    ref = xr.open_dataset(sample_path(), engine="zstrings")
    got = xr.open_dataset(tmp_path / "v3.zarr", engine="zarr")
    assert got["station"].values.tolist() == ref["station"].values.tolist()
    assert main(["migrate", str(tmp_path / "v3.zarr")]) == 2
    assert "Zarr v3 store already" in capsys.readouterr().err


def test_check_says_whether_migration_is_metadata_only(tmp_path, capsys):
    main(["check", str(sample_path())])
    assert "Zarr v3 migration: metadata only" in capsys.readouterr().out
    store = _shuffled_strings(tmp_path / "shuffled.zarr")
    main(["check", str(store)])
    out = capsys.readouterr().out
    assert "Zarr v3 migration: 1 of 2 array(s) must be rewritten" in out
    assert "/s: netcdf-c shuffled its chunks by 8 bytes" in out
    assert main(["migrate", str(store), str(tmp_path / "v3.zarr")]) == 0
    out = capsys.readouterr().out
    assert "1 array(s) reuse their chunks, 1 rewritten" in out and "rewritten /s:" in out
    assert xr.open_dataset(tmp_path / "v3.zarr", engine="zarr")["s"].values.tolist() == ["a", "bb", "ccc", "dddd", "é"]


def test_migrate_a_netcdf_file_is_a_usage_error(tmp_path, capsys):
    with netCDF4.Dataset(tmp_path / "a.nc", "w") as ds:
        ds.createDimension("x", 1)
    assert main(["migrate", str(tmp_path / "a.nc")]) == 2
    assert "--format zarr3" in capsys.readouterr().err


def test_migrate_in_place_through_a_link_says_the_writers_refusal_not_a_dst(tmp_path, capsys):
    """In place there is no DST: the session's refusal of a link is printed as it is (it named
    ``DST None`` and --overwrite, which cannot help)."""
    src = tmp_path / "s.zarr"
    shutil.copytree(sample_path(), src)
    link = tmp_path / "link.zarr"
    link.symlink_to(src)
    assert main(["migrate", str(link)]) == 2
    err = capsys.readouterr().err
    assert "symbolic link" in err and str(src) in err, err
    assert "DST" not in err and "--overwrite" not in err, err
    assert not (src / "zarr.json").exists()
