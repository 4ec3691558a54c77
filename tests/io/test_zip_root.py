"""The dataset in a zip is its shallowest folder holding Zarr metadata: the zip's top when anything
is there (what ``cd s.zarr && zip -r ../s.zip .`` and zarr-python's ``ZipStore`` make, whatever
the first entry), else the one top folder (``zip -r s.zip s.zarr``, netcdf-c's layout). Before,
the folder of the first entry won: a subgroup was read as the root and failed with a dangling
dimension (issue 36, item 6). Each case is compared with what netcdf-c (netCDF4) reads from the
unzipped folder, or with engine="zarr" over zarr-python's ZipStore."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from peers import assert_same_as_netcdf4, missing_peer, nc_url, netcdf4_view, zstrings_view
from s3_server import S3Server

from xr_zstrings import migrate
from xr_zstrings.cli import main
from xr_zstrings.errors import MetadataError
from xr_zstrings.sample import sample_path


def _zip_r(folder: Path, out: Path, *, contents: bool) -> Path:
    """The real ``zip -r``: of the folder's contents (``cd folder && zip -r ../out .``, zarr's docs)
    or of the folder itself (``zip -r out folder``: one top folder)."""
    exe = shutil.which("zip")
    if exe is None:
        missing_peer("the zip command is not installed (apt-get install zip)")
    if contents:
        subprocess.run([exe, "-qr", str(out.absolute()), "."], cwd=folder, check=True)
    else:
        subprocess.run([exe, "-qr", str(out.absolute()), folder.name], cwd=folder.parent, check=True)
    return out


@pytest.fixture
def stations(tmp_path: Path) -> Path:
    """The sample NCZarr store (a subgroup 'metadata' whose variable uses the root's dimension)."""
    return Path(shutil.copytree(sample_path(), tmp_path / "s.zarr"))


def _same_view(got: dict, ref: dict) -> None:
    assert set(got) == set(ref)
    for path, r in ref.items():
        assert set(got[path]["vars"]) == set(r["vars"]), path
        for name, rv in r["vars"].items():
            assert got[path]["vars"][name]["dims"] == rv["dims"], (path, name)
            assert got[path]["vars"][name]["values"] == rv["values"], (path, name)


@pytest.mark.parametrize("contents", [True, False], ids=["zip -r of the contents", "zip -r of the folder"])
def test_zip_r_reads_as_netcdf_c_reads_the_folder(tmp_path: Path, stations: Path, contents: bool) -> None:
    z = _zip_r(stations, tmp_path / "s.zip", contents=contents)
    first = zipfile.ZipFile(z).namelist()[0]
    assert first.startswith("metadata/" if contents else "s.zarr/")  # (the case of the issue)
    ref = netcdf4_view(nc_url(stations))  # netcdf-c reading the folder that was zipped
    _same_view(zstrings_view(z), ref)
    assert set(xr.open_dataset(z, engine="zstrings").variables) == set(ref["/"]["vars"])


@pytest.mark.parametrize("contents", [True, False], ids=["zip -r of the contents", "zip -r of the folder"])
def test_migrate_and_check_read_the_whole_zip(tmp_path: Path, stations: Path, contents: bool,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    z = _zip_r(stations, tmp_path / "s.zip", contents=contents)
    ref = netcdf4_view(nc_url(stations))
    dst = tmp_path / "v3.zarr"
    migrate(z, dst)
    peer = xr.open_groups(dst, engine="zarr")  # the migrated store as xarray reads Zarr v3
    assert set(peer) == set(ref)
    for path, r in ref.items():
        assert set(peer[path].data_vars) | set(peer[path].coords) == set(r["vars"]), path
    code = main(["check", str(z)])
    out = capsys.readouterr().out
    n = sum(len(g["vars"]) for g in ref.values())
    assert f"{n} variable(s) read" in out, out
    assert code == main(["check", str(stations)])  # the same verdict as for the folder itself


def _zarr_python_zip(tmp_path: Path, zarr_format: int) -> Path:
    """A store with a subgroup written by xarray into zarr-python's ZipStore (its own layout)."""
    ds = xr.Dataset({"name": ("station", np.array(["Zürich", "東京"], dtype=object))},
                    coords={"station": [1, 2]})
    sub = xr.Dataset({"code": ("n", np.array(["a", "bc", "d"], dtype=object))})
    z = tmp_path / "zp.zip"
    tree = xr.DataTree.from_dict({"/": ds, "/deep/er": sub})
    with zarr.storage.ZipStore(z, mode="w") as store:
        tree.to_zarr(store, zarr_format=zarr_format, consolidated=False)
    return z


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_zarr_python_zipstore_zip_reads_as_engine_zarr(tmp_path: Path, zarr_format: int) -> None:
    z = _zarr_python_zip(tmp_path, zarr_format)
    with zarr.storage.ZipStore(z, mode="r") as store:
        peer = xr.open_groups(store, engine="zarr", consolidated=False)
        want = {p: {n: v.values.tolist() for n, v in g.variables.items()} for p, g in peer.items()}
    got = xr.open_groups(z, engine="zstrings")
    assert {p: {n: v.values.tolist() for n, v in g.variables.items()} for p, g in got.items()} == want


def test_a_folder_of_the_first_entry_does_not_win_over_the_top(tmp_path: Path, stations: Path) -> None:
    """Metadata at the top and in a folder listed first: the top is the dataset (no warning)."""
    z = tmp_path / "first.zip"
    with zipfile.ZipFile(z, "w") as zf:
        files = sorted(p for p in stations.rglob("*") if p.is_file())
        for name in sorted((p.relative_to(stations).as_posix() for p in files),
                           key=lambda n: not n.startswith("metadata/")):  # the subgroup's entries first
            zf.write(stations / name, name)
    assert zipfile.ZipFile(z).namelist()[0].startswith("metadata/")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        _same_view(zstrings_view(z), netcdf4_view(nc_url(stations)))


def test_two_stores_side_by_side_are_refused_naming_both(tmp_path: Path, stations: Path) -> None:
    both = tmp_path / "both"
    both.mkdir()
    shutil.copytree(stations, both / "a.zarr")
    shutil.copytree(stations, both / "b.zarr")
    z = _zip_r(both, tmp_path / "both.zip", contents=True)
    with pytest.raises(MetadataError, match=r"a\.zarr.*b\.zarr"):
        xr.open_dataset(z, engine="zstrings")


def test_a_zip_of_a_store_inside_folders_reads_that_store(tmp_path: Path, stations: Path) -> None:
    """``zip -r out.zip data`` of data/run1/s.zarr: the shallowest folder with metadata."""
    shutil.copytree(stations, tmp_path / "data" / "run1" / "s.zarr")
    z = _zip_r(tmp_path / "data", tmp_path / "deep.zip", contents=False)
    _same_view(zstrings_view(z), netcdf4_view(nc_url(stations)))


@pytest.mark.parametrize("contents", [True, False], ids=["zip -r of the contents", "zip -r of the folder"])
def test_zip_in_object_storage_finds_the_same_root(tmp_path: Path, stations: Path, s3: S3Server,
                                                   contents: bool) -> None:
    z = _zip_r(stations, tmp_path / "s.zip", contents=contents)
    url = s3.upload(z, s3.bucket("zstrings-zip-root"), f"{'contents' if contents else 'folder'}/s.zip")
    _same_view(zstrings_view(url, storage_options=s3.options()), netcdf4_view(nc_url(stations)))


def test_the_folder_read_as_before(stations: Path) -> None:
    """(The folder the zips are made of reads as netcdf-c reads it: the reference above is sound.)"""
    assert_same_as_netcdf4(stations)
