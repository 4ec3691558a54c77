"""``mode="w"`` replaces an earlier version of what the writer makes, never other files: a folder of
documents, a text file or a zip where a store or netCDF file is written is refused with
TargetExistsError naming what was found, and left byte for byte as it was."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from xr_zstrings import TargetExistsError, convert, to_nczarr, to_zarr_v3

DS = xr.Dataset({"s": ("x", np.array(["a", "bé"], dtype=np.dtypes.StringDType()))})


def _snapshot(p: Path) -> dict[str, bytes]:
    if p.is_file():
        return {"": p.read_bytes()}
    return {str(q.relative_to(p)): (q.read_bytes() if q.is_file() else b"<dir>") for q in sorted(p.rglob("*"))}


def _folder(tmp_path: Path) -> Path:
    d = tmp_path / "notes"
    (d / "sub").mkdir(parents=True)
    (d / "readme.txt").write_text("keep me")
    (d / "sub" / "draft.md").write_text("and me")
    return d


WRITERS = {
    "to_nczarr": lambda dst: to_nczarr(DS, dst, mode="w"),
    "to_nczarr zarr2": lambda dst: to_nczarr(DS, dst, mode="w", format="zarr2"),
    "to_zarr_v3": lambda dst: to_zarr_v3(DS, dst, mode="w"),
}


@pytest.mark.parametrize("writer", list(WRITERS))
def test_mode_w_refuses_a_folder_that_is_not_a_store(tmp_path: Path, writer: str) -> None:
    d = _folder(tmp_path)
    before = _snapshot(d)
    with pytest.raises(TargetExistsError, match=r"not a Zarr store \(found readme.txt, sub/\).*another target"):
        WRITERS[writer](d)
    assert _snapshot(d) == before
    assert sorted(q.name for q in tmp_path.iterdir()) == ["notes"]  # nothing left beside it


@pytest.mark.parametrize("writer", list(WRITERS))
def test_mode_w_refuses_a_plain_file(tmp_path: Path, writer: str) -> None:
    f = tmp_path / "data.zarr"
    f.write_text("not a store")
    with pytest.raises(TargetExistsError, match="a file that is not a Zarr store"):
        WRITERS[writer](f)
    assert f.read_text() == "not a store"


def test_zip_target_refuses_a_file_that_is_not_a_zip_and_replaces_a_zip(tmp_path: Path) -> None:
    f = tmp_path / "out.zip"
    f.write_text("a text file named .zip")
    with pytest.raises(TargetExistsError, match="a file that is not a zip"):
        to_nczarr(DS, f, mode="w")
    assert f.read_text() == "a text file named .zip"
    f.unlink()
    to_nczarr(DS, f, mode="w")
    assert zipfile.is_zipfile(f)
    to_nczarr(DS.assign(s=DS["s"][::-1]), f, mode="w")  # a zip it could have written: replaced
    assert xr.open_dataset(f, engine="zstrings")["s"].values.tolist() == ["bé", "a"]


def test_convert_to_netcdf_refuses_a_file_that_is_not_netcdf(tmp_path: Path) -> None:
    src = tmp_path / "src.zarr"
    to_nczarr(DS, src)
    f = tmp_path / "out.nc"
    f.write_text("notes, not netCDF")
    with pytest.raises(TargetExistsError, match="a file that is not a netCDF file"):
        convert(src, f, mode="w")
    assert f.read_text() == "notes, not netCDF"


@pytest.mark.parametrize("writer", list(WRITERS))
def test_mode_w_still_replaces_stores_and_empty_folders(tmp_path: Path, writer: str) -> None:
    d = tmp_path / "s.zarr"
    d.mkdir()
    WRITERS[writer](d)  # an empty folder
    WRITERS[writer](d)  # a store it wrote
    to_nczarr(DS, tmp_path / "other.zarr")
    WRITERS[writer](tmp_path / "other.zarr")  # a store another writer wrote
    for p in (d, tmp_path / "other.zarr"):
        assert xr.open_dataset(p, engine="zstrings")["s"].values.tolist() == ["a", "bé"]
