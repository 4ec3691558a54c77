"""``ds.zstrings.to_zarr`` keeps the promise of this package's writers (docs/reliability.md):
``mode="w"`` replaces only what a write could have made, and no mode turns a folder of the user's
files into a store's root. Before, it forwarded to xarray's ``to_zarr``, whose ``mode="w"`` deleted a
folder of documents (issue 36, item 3). The target is checked by the writers' own rule
(``io.atomic.not_replaceable``) before xarray touches it: local folders, ``file://`` URLs, zarr-python
``LocalStore``/``ZipStore``/``MemoryStore``/``ObjectStore`` objects and ``s3://`` prefixes (moto)."""

from __future__ import annotations

import os
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import obstore
import pytest
import xarray as xr
import zarr
from obstore.store import S3Store
from s3_server import KEY, REGION, SECRET, S3Server

import xr_zstrings.accessor  # noqa: F401 - registers ds.zstrings
from xr_zstrings import StoreNotFoundError, TargetExistsError, to_nczarr

DS = xr.Dataset({"s": ("x", np.array(["a", "bé"], dtype=object)), "v": ("x", [1.0, 2.0])})
MORE = xr.Dataset({"s": ("x", np.array(["c"], dtype=object)), "v": ("x", [3.0])})
BUCKET = "zstrings-accessor-writes"


def _snapshot(p: Path) -> dict[str, bytes]:
    if p.is_file():
        return {"": p.read_bytes()}
    return {str(q.relative_to(p)): (q.read_bytes() if q.is_file() else b"<dir>") for q in sorted(p.rglob("*"))}


def _notes(tmp_path: Path) -> Path:
    d = tmp_path / "notes"
    (d / "sub").mkdir(parents=True)
    (d / "readme.txt").write_text("keep me")
    (d / "sub" / "draft.md").write_text("and me")
    return d


def _values(store: Any) -> list[str]:
    """What xarray's own engine="zarr" reads back (the peer)."""
    return xr.open_dataset(store, engine="zarr", consolidated=False)["s"].values.tolist()


def test_xarray_itself_deletes_the_folder(tmp_path: Path) -> None:
    """(Why the accessor checks first: the call it forwards to deletes a folder of user files.)"""
    d = _notes(tmp_path)
    DS.to_zarr(d, zarr_format=3, mode="w")
    assert not (d / "readme.txt").exists()


#: (the accessor's modes; "a" with append_dim, as a user appends)
MODES: dict[str, dict[str, Any]] = {"w": {"mode": "w"}, "a": {"mode": "a"}, "r+": {"mode": "r+"},
                                    "append": {"mode": "a", "append_dim": "x"}, "w-": {"mode": "w-"},
                                    "default": {}}
FOLDER_TARGETS: dict[str, Callable[[Path], Any]] = {
    "path": lambda d: d,
    "str": lambda d: str(d),
    "file URL": lambda d: d.absolute().as_uri(),
    "LocalStore": lambda d: zarr.storage.LocalStore(d),
}


@pytest.mark.parametrize("fmt", [2, 3])
@pytest.mark.parametrize("how", list(FOLDER_TARGETS))
@pytest.mark.parametrize("mode", list(MODES))
def test_a_folder_of_user_files_is_refused_in_every_mode(tmp_path: Path, mode: str, how: str, fmt: int) -> None:
    d = _notes(tmp_path)
    before = _snapshot(d)
    with pytest.raises(TargetExistsError, match=r"not a Zarr store \(found readme.txt, sub/\).*another target"):
        DS.zstrings.to_zarr(FOLDER_TARGETS[how](d), zarr_format=fmt, **MODES[mode])
    assert _snapshot(d) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes"]


def test_the_mode_w_refusal_says_what_mode_w_replaces(tmp_path: Path) -> None:
    d = _notes(tmp_path)
    with pytest.raises(TargetExistsError, match=r"Cannot replace .*notes.*mode='w' replaces only what a write "
                                                r"could have made"):
        DS.zstrings.to_zarr(d, mode="w")
    with pytest.raises(TargetExistsError, match=r"Cannot write into .*notes.*mode='a' would make it a Zarr "
                                                r"store's root"):
        DS.zstrings.to_zarr(d, mode="a")


def test_a_folder_holding_a_store_below_its_root_is_refused(tmp_path: Path) -> None:
    d = _notes(tmp_path)
    to_nczarr(DS, d / "results.zarr")
    before = _snapshot(d)
    with pytest.raises(TargetExistsError, match=r"it holds Zarr stores in results.zarr/"):
        DS.zstrings.to_zarr(d, zarr_format=3, mode="w")
    assert _snapshot(d) == before


def test_a_plain_file_or_a_zip_file_where_a_folder_goes_is_refused(tmp_path: Path) -> None:
    """A path names a folder for xarray (a LocalStore), ``.zip`` or not."""
    for name in ("data.zarr", "data.zip"):
        f = tmp_path / name
        with zipfile.ZipFile(f, "w") as zf:
            zf.writestr("doc.txt", "a zip of documents")
        before = f.read_bytes()
        with pytest.raises(TargetExistsError, match="a file that is not a Zarr store"):
            DS.zstrings.to_zarr(f, mode="w")
        assert f.read_bytes() == before


def test_a_symbolic_link_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real.zarr"
    DS.zstrings.to_zarr(real, zarr_format=2)
    link = tmp_path / "link.zarr"
    link.symlink_to(real)
    before = _snapshot(real)
    with pytest.raises(TargetExistsError, match=r"symbolic link to .*write to .* itself, or remove the link"):
        DS.zstrings.to_zarr(link, zarr_format=2, mode="w")
    assert link.is_symlink() and _snapshot(real) == before


def test_a_zipstore_over_a_file_that_is_not_a_zip_is_refused_before_it_is_truncated(tmp_path: Path) -> None:
    f = tmp_path / "notes.zip"
    f.write_text("a text file named .zip")
    with pytest.raises(TargetExistsError, match="a file that is not a zip"):
        DS.zstrings.to_zarr(zarr.storage.ZipStore(f, mode="w"), zarr_format=3, mode="w")
    assert f.read_text() == "a text file named .zip"


def test_a_memorystore_holding_other_keys_is_refused(tmp_path: Path) -> None:
    from zarr.core.buffer import cpu

    data = {"readme.txt": cpu.Buffer.from_bytes(b"keep me"), "sub/draft.md": cpu.Buffer.from_bytes(b"and me")}
    store = zarr.storage.MemoryStore(data)
    with pytest.raises(TargetExistsError, match=r"a store location whose root is not a Zarr store \(found readme.txt, "
                                                r"sub/\)"):
        DS.zstrings.to_zarr(store, zarr_format=3, mode="w")
    assert sorted(data) == ["readme.txt", "sub/draft.md"]


WRITABLE: dict[str, Callable[[Path], Any]] = {
    "absent": lambda p: p,
    "empty folder": lambda p: p.mkdir() or p,
    "a store xarray wrote": lambda p: DS.to_zarr(p, zarr_format=2) and p,
    "a store to_nczarr wrote": lambda p: to_nczarr(DS, p) or p,
}


@pytest.mark.parametrize("fmt", [2, 3])
@pytest.mark.parametrize("what", list(WRITABLE))
def test_stores_empty_folders_and_new_targets_are_still_written(tmp_path: Path, what: str, fmt: int) -> None:
    p = WRITABLE[what](tmp_path / "s.zarr")
    DS.zstrings.to_zarr(p, zarr_format=fmt, mode="w", consolidated=False)
    assert _values(p) == ["a", "bé"]
    MORE.zstrings.to_zarr(p, zarr_format=fmt, append_dim="x", consolidated=False)
    assert _values(p) == ["a", "bé", "c"]
    DS.zstrings.to_zarr(p, zarr_format=fmt, mode="a", group="g", consolidated=False)  # a group in the store
    assert xr.open_dataset(p, engine="zarr", group="g", consolidated=False)["s"].values.tolist() == ["a", "bé"]


def test_a_zipstore_over_a_zip_is_written(tmp_path: Path) -> None:
    f = tmp_path / "out.zip"
    to_nczarr(DS.assign(s=DS["s"][::-1]), f)
    with zarr.storage.ZipStore(f, mode="w") as store:
        DS.zstrings.to_zarr(store, zarr_format=3, mode="w", consolidated=False)
    with zarr.storage.ZipStore(f, mode="r") as store:
        assert _values(store) == ["a", "bé"]


# ---------------------------------------------------------------------------------------------
# Object storage (moto): a prefix of the user's objects
# ---------------------------------------------------------------------------------------------


def _objects(s3: S3Server, prefix: str) -> dict[str, bytes]:
    st = s3.obstore(BUCKET)
    keys = [m["path"] for batch in obstore.list(st, prefix=prefix + "/") for m in batch]
    return {k: bytes(obstore.get(st, k).bytes()) for k in sorted(keys)}


def _object_store(s3: S3Server, prefix: str) -> zarr.storage.ObjectStore:
    return zarr.storage.ObjectStore(S3Store(BUCKET, prefix=prefix, endpoint=s3.endpoint, access_key_id=KEY,
                                            secret_access_key=SECRET, region=REGION,
                                            client_options={"allow_http": True}))


@pytest.fixture
def user_prefix(s3: S3Server, request: pytest.FixtureRequest) -> str:
    s3.bucket(BUCKET)
    prefix = f"user-{request.node.name}".replace("[", "-").replace("]", "").replace(" ", "-")
    st = s3.obstore(BUCKET)
    obstore.put(st, f"{prefix}/readme.txt", b"keep me")
    obstore.put(st, f"{prefix}/sub/draft.md", b"and me")
    return prefix


@pytest.mark.parametrize("mode", ["w", "a"])
def test_an_s3_prefix_of_user_objects_is_refused_through_an_object_store(s3: S3Server, user_prefix: str,
                                                                         mode: str) -> None:
    before = _objects(s3, user_prefix)
    with pytest.raises(TargetExistsError, match=r"not a Zarr store \(found readme.txt, sub/\)"):
        DS.zstrings.to_zarr(_object_store(s3, user_prefix), zarr_format=3, mode=mode, consolidated=False)
    assert _objects(s3, user_prefix) == before


def test_an_s3_url_of_user_objects_is_refused(s3: S3Server, user_prefix: str) -> None:
    before = _objects(s3, user_prefix)
    with pytest.raises(TargetExistsError, match=r"not a Zarr store \(found readme.txt, sub/\)"):
        DS.zstrings.to_zarr(f"s3://{BUCKET}/{user_prefix}", zarr_format=3, mode="w",
                            storage_options=s3.options())
    assert _objects(s3, user_prefix) == before


def test_an_s3_prefix_holding_a_store_is_replaced(s3: S3Server) -> None:
    s3.bucket(BUCKET)
    prefix = f"store-{os.getpid()}"
    store = _object_store(s3, prefix)
    DS.assign(s=DS["s"][::-1]).to_zarr(store, zarr_format=3, mode="w", consolidated=False)
    DS.zstrings.to_zarr(store, zarr_format=3, mode="w", consolidated=False)
    assert _values(_object_store(s3, prefix)) == ["a", "bé"]
    assert all(not k.endswith(("readme.txt", "draft.md")) for k in _objects(s3, prefix))


# ---------------------------------------------------------------------------------------------
# Writing into a store: a refused call adds nothing either
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", [2, 3])
def test_appending_where_no_store_is_adds_nothing(tmp_path: Path, fmt: int) -> None:
    """xarray's to_zarr(append_dim=...) creates the group's metadata, then fails: refused first."""
    d = tmp_path / "empty.zarr"
    d.mkdir()
    with pytest.raises(StoreNotFoundError, match=r"Cannot append to .*empty.zarr along 'x': it holds no Zarr store"):
        MORE.zstrings.to_zarr(d, zarr_format=fmt, append_dim="x")
    assert list(d.iterdir()) == []


@pytest.mark.parametrize(("have", "asked"), [(2, 3), (3, 2)])
def test_writing_into_a_store_of_the_other_format_adds_nothing(tmp_path: Path, have: int, asked: int) -> None:
    p = tmp_path / "s.zarr"
    DS.to_zarr(p, zarr_format=have, consolidated=False)
    before = _snapshot(p)
    for kw in ({"append_dim": "x"}, {"mode": "a"}):
        with pytest.raises(TargetExistsError, match=rf"it is a Zarr v{have} store.*Pass zarr_format={have}"):
            MORE.zstrings.to_zarr(p, zarr_format=asked, consolidated=False, **kw)
        assert _snapshot(p) == before


@pytest.mark.parametrize("have", [2, 3])
def test_appending_without_zarr_format_takes_the_stores(tmp_path: Path, have: int) -> None:
    p = tmp_path / "s.zarr"
    DS.to_zarr(p, zarr_format=have, consolidated=False)
    MORE.zstrings.to_zarr(p, append_dim="x", consolidated=False)
    assert _values(p) == ["a", "bé", "c"]
    assert zarr.open_group(p, mode="r").metadata.zarr_format == have


@pytest.mark.parametrize("mode", ["a", "a-"])
def test_xarrays_write_into_an_nczarr_store_is_refused_and_netcdf_c_still_reads_it(tmp_path, mode):
    """xarray's to_zarr into an NCZarr store rewrote the root group's metadata without NCZarr's keys
    (engine='zstrings' then raised 'Dangling dimension reference'): refused before xarray runs,
    naming to_nczarr; the store is unchanged and netcdf-c (netCDF4) still reads its dimension."""
    import netCDF4

    from xr_zstrings import UnsupportedError

    target = tmp_path / "s.zarr"
    to_nczarr(DS, target)
    before = _snapshot(target)
    extra = xr.Dataset({"u": ("x", np.array(["x", "y"], dtype=object))})
    with pytest.raises(UnsupportedError, match=r"NCZarr store .*_nczarr_\* keys.*ds\.zstrings\.to_nczarr"):
        extra.zstrings.to_zarr(target, zarr_format=2, mode=mode)
    assert _snapshot(target) == before
    with netCDF4.Dataset(f"file://{target}#mode=nczarr,file") as nc:
        assert nc.dimensions["x"].size == 2 and list(nc["s"][:]) == ["a", "bé"]


def test_zarr_v2_into_an_icechunk_session_is_refused_before_xarray_deletes_it(tmp_path):
    """icechunk holds Zarr v3 only: xarray's mode='w' deleted the session's store, then failed on
    '.zattrs'. Refused first; the session still holds its store."""
    import sys

    if sys.version_info < (3, 12):
        pytest.skip("icechunk publishes no wheel for Python < 3.12 (the test extra installs it from 3.12)")
    import icechunk

    from xr_zstrings import UnsupportedError

    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    session = repo.writable_session("main")
    DS.zstrings.to_zarr(session.store, zarr_format=3, mode="w", consolidated=False)
    with pytest.raises(UnsupportedError, match="icechunk holds Zarr v3 only.*zarr_format=3"):
        DS.zstrings.to_zarr(session.store, zarr_format=2, mode="w", consolidated=False)
    assert xr.open_zarr(session.store, consolidated=False)["s"].values.tolist() == ["a", "bé"]
