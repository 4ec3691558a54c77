"""``mode="w"`` replaces an earlier version of what the writer makes, never other files: a folder of
documents, a text file or a zip where a store or netCDF file is written is refused with
TargetExistsError naming what was found, and left byte for byte as it was."""

from __future__ import annotations

import contextlib
import io
import os
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from xr_zstrings import TargetExistsError, convert, to_nczarr, to_zarr_v3
from xr_zstrings.cli import main
from xr_zstrings.sample import sample_path

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


# ---------------------------------------------------------------------------------------------
# Issue 24: only a folder whose ROOT is a store is replaced; links are never written through
# ---------------------------------------------------------------------------------------------

def _cli_convert(src: Path, dst: Path, *extra: str) -> None:
    """``zstrings convert SRC DST --overwrite``; its one-line error raised as TargetExistsError."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["convert", str(src), str(dst), "--overwrite", "-q", *extra])
    if code != 0:
        raise TargetExistsError(err.getvalue())


#: every way to replace a local target: name -> f(source store, target)
ALL_WRITERS: dict[str, Callable[[Path, Path], None]] = {
    **{name: (lambda w: lambda src, dst: w(dst))(w) for name, w in WRITERS.items()},
    "to_zarr_v3 group": lambda src, dst: to_zarr_v3(DS, dst, mode="w", group="g"),
    "convert": lambda src, dst: convert(src, dst, mode="w"),
    "cli convert --overwrite": lambda src, dst: _cli_convert(src, dst),
    "cli convert --overwrite zarr3": lambda src, dst: _cli_convert(src, dst, "--format", "zarr3"),
}


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src") / "source.zarr"
    to_nczarr(DS, src)
    return src


def _project(tmp_path: Path, *, hidden: bool = False, link: bool = False) -> Path:
    """A user's folder of files holding a store one level down (the issue's data-loss case)."""
    d = tmp_path / "proj"
    d.mkdir()
    (d / "notes.txt").write_text("keep me")
    (d / "other").mkdir()
    (d / "other" / "draft.md").write_text("and me")
    to_nczarr(DS, d / "results.zarr")
    if hidden:
        (d / ".git").mkdir()
        (d / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    if link:
        elsewhere = tmp_path / "elsewhere.zarr"
        to_nczarr(DS, elsewhere)
        (d / "linked.zarr").symlink_to(elsewhere)
    return d


@pytest.mark.parametrize("writer", list(ALL_WRITERS))
@pytest.mark.parametrize("variant", ["nested store", "hidden files", "link to a store inside"])
def test_mode_w_refuses_a_folder_holding_a_store_below_its_root(tmp_path: Path, source: Path, writer: str,
                                                                 variant: str) -> None:
    d = _project(tmp_path, hidden=variant == "hidden files", link=variant == "link to a store inside")
    before = _snapshot(d)
    outside = _snapshot(tmp_path / "elsewhere.zarr") if variant == "link to a store inside" else None
    with pytest.raises(TargetExistsError, match=r"whose root is not a Zarr store \(found .*notes.txt.*results.zarr/"):
        ALL_WRITERS[writer](source, d)
    assert _snapshot(d) == before  # notes, other folders and the store inside all still there
    if outside is not None:
        assert _snapshot(tmp_path / "elsewhere.zarr") == outside
    assert not [p.name for p in tmp_path.iterdir() if ".zstrings-" in p.name]  # nothing left beside it


def test_the_refusal_names_the_stores_inside_and_what_to_do(tmp_path: Path) -> None:
    d = _project(tmp_path)
    with pytest.raises(TargetExistsError) as e:
        to_nczarr(DS, d, mode="w")
    msg = str(e.value)
    assert "it holds Zarr stores in results.zarr/" in msg and "remove it yourself" in msg


def test_a_folder_of_hidden_files_only_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    (d / ".hidden").write_text("x")
    with pytest.raises(TargetExistsError, match=r"found \.hidden\)"):
        to_nczarr(DS, d, mode="w")
    assert (d / ".hidden").read_text() == "x"


def test_a_store_root_with_extra_files_is_still_a_store_and_links_inside_are_not_followed(tmp_path: Path) -> None:
    """mode="w" over a store means replacing it, extra files and all; deleting the old version
    removes a link inside it, never what the link points to."""
    d = tmp_path / "s.zarr"
    to_nczarr(DS, d)
    (d / ".DS_Store").write_text("finder")
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "data.txt").write_text("precious")
    (d / "link").symlink_to(keep)
    to_nczarr(DS.assign(s=DS["s"][::-1]), d, mode="w")
    assert xr.open_dataset(d, engine="zstrings")["s"].values.tolist() == ["bé", "a"]
    assert not (d / ".DS_Store").exists() and not (d / "link").exists()
    assert (keep / "data.txt").read_text() == "precious"


def test_a_root_object_that_is_a_link_is_not_a_store_we_wrote(tmp_path: Path) -> None:
    other = tmp_path / "other.zarr"
    to_nczarr(DS, other)
    d = tmp_path / "d"
    d.mkdir()
    (d / ".zgroup").symlink_to(other / ".zgroup")
    (d / "notes.txt").write_text("keep me")
    with pytest.raises(TargetExistsError, match=r"\.zgroup at its root is not a regular file"):
        to_nczarr(DS, d, mode="w")
    assert (d / "notes.txt").read_text() == "keep me"


def test_an_interrupted_in_place_write_is_still_replaceable(tmp_path: Path) -> None:
    """What our writers leave when interrupted in place (object-storage style: the placeholder root
    ``.zgroup`` written first) is a store whose root is there: mode="w" replaces it."""
    from xr_zstrings.io.atomic import incomplete_v2_group

    d = tmp_path / "s.zarr"
    to_nczarr(DS, d)
    (d / ".zgroup").write_bytes(incomplete_v2_group())
    (d / ".zattrs").unlink()
    to_nczarr(DS, d, mode="w")
    assert xr.open_dataset(d, engine="zstrings")["s"].values.tolist() == ["a", "bé"]


LINK_WRITERS = {
    "to_nczarr w": lambda dst: to_nczarr(DS, dst, mode="w"),
    "to_nczarr w-": lambda dst: to_nczarr(DS, dst, mode="w-"),
    "to_nczarr a": lambda dst: to_nczarr(DS, dst, mode="a"),
    "to_zarr_v3 w": lambda dst: to_zarr_v3(DS, dst, mode="w"),
    "cli convert --overwrite": lambda dst: _cli_convert(sample_path(), dst),
}


#: (an append needs a store there first: a zip or a dangling link is "no store to append to")
LINK_CASES = [(w, k) for w in LINK_WRITERS for k in ("directory", "empty directory", "zip", "dangling")
              if not (w == "to_nczarr a" and k in ("zip", "dangling"))]


@pytest.mark.parametrize(("writer", "kind"), LINK_CASES)
def test_a_target_that_is_a_symbolic_link_is_refused_before_writing(tmp_path: Path, writer: str, kind: str) -> None:
    """Writing "through" a link would swap the new version in over the link itself: refused up
    front (before, a directory link failed with NotADirectoryError after the whole write, and a
    link to a zip was silently replaced by a regular file)."""
    real = tmp_path / ("real.zip" if kind == "zip" else "real.zarr")
    if kind == "directory":
        to_nczarr(DS, real)
    elif kind == "empty directory":
        real.mkdir()
    elif kind == "zip":
        to_nczarr(DS, real)
    link = tmp_path / ("link.zip" if kind == "zip" else "link.zarr")
    link.symlink_to(real)
    before = _snapshot(real) if real.exists() else None
    with pytest.raises(TargetExistsError, match=r"is a symbolic link to .*write to .* itself, or remove the link"):
        LINK_WRITERS[writer](link)
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert (_snapshot(real) if real.exists() else None) == before
    assert not [p.name for p in tmp_path.iterdir() if ".zstrings-" in p.name]


def test_convert_to_a_netcdf_file_through_a_link_is_refused(tmp_path: Path, source: Path) -> None:
    real = tmp_path / "real.nc"
    convert(source, real)
    link = tmp_path / "link.nc"
    link.symlink_to(real)
    before = real.read_bytes()
    with pytest.raises(TargetExistsError, match=r"is a symbolic link to .*real.nc' \(a file\)"):
        convert(source, link, mode="w")
    assert link.is_symlink() and real.read_bytes() == before
