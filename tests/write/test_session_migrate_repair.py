"""``migrate`` and ``repair`` open their target through the write session (issue 38 item 1): each
passes its target through ``write.session.classify`` exactly once (a migration's source, only read,
never); the read-only commands (``check``, ``migrate --dry-run``) never open a session; a zip is
only read by ``repair`` and refused in place by ``migrate``, whatever names it."""

from __future__ import annotations

import hashlib
import shutil
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr
from s3_server import S3Server

import xr_zstrings
from xr_zstrings import UnsupportedError, migrate, repair, to_nczarr
from xr_zstrings.cli.main import main as cli_main
from xr_zstrings.write import session as session_module

T = np.dtypes.StringDType()
DS = xr.Dataset({"name": ("t", np.array(["a", "bé", "", "中文"], dtype=T))})


def _spied(monkeypatch: pytest.MonkeyPatch, name: str) -> list[Any]:
    """Every target ``write.session.<name>`` is handed, in order (the real one still runs)."""
    seen: list[Any] = []
    real = getattr(session_module, name)

    def spy(target: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(target)
        return real(target, *args, **kwargs)

    monkeypatch.setattr(session_module, name, spy)
    return seen


@pytest.fixture
def classified(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every target ``write.session.classify`` is handed, in order."""
    return _spied(monkeypatch, "classify")


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every target a write session is opened on (``write.session.write_session``)."""
    return _spied(monkeypatch, "write_session")


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "src.zarr"
    to_nczarr(DS, path, unlimited_dims=["t"])
    return path


def _hashes(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_migrate_to_a_new_target_classifies_the_target_once_and_never_the_source(
        store: Path, tmp_path: Path, classified: list[Any]) -> None:
    dst = tmp_path / "v3.zarr"
    migrate(store, dst, missing="values")
    assert classified == [dst]
    got = xr.open_dataset(dst, engine="zarr")  # zarr-python reads what it wrote
    assert got["name"].values.tolist() == DS["name"].values.tolist()


def test_migrate_in_place_classifies_the_store_once(store: Path, classified: list[Any]) -> None:
    migrate(store, missing="values")
    assert classified == [store]
    assert zarr.open_group(store, mode="r", zarr_format=3)["name"].shape == (4,)


def test_migrate_into_a_zarr_python_store_classifies_it_once(store: Path, classified: list[Any]) -> None:
    dst = zarr.storage.MemoryStore()
    migrate(store, dst, missing="values")
    assert classified == [dst]
    assert zarr.open_group(dst, mode="r").metadata.zarr_format == 3
    assert xr.open_dataset(dst, engine="zarr")["name"].values.tolist() == DS["name"].values.tolist()


def test_migrate_to_s3_classifies_the_target_once(store: Path, s3: S3Server, classified: list[Any]) -> None:
    dst = f"s3://{s3.bucket('session-migrate')}/v3.zarr"
    migrate(store, dst, missing="values", target_storage_options=s3.options())
    assert classified == [dst]
    back = xr.open_dataset(dst, engine="zstrings", storage_options=s3.options())
    assert back["name"].values.tolist() == DS["name"].values.tolist()


@pytest.mark.parametrize("where", ["new", "in place"])
def test_cli_migrate_classifies_its_target_once(where: str, store: Path, tmp_path: Path, classified: list[Any],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    dst = [str(tmp_path / "v3.zarr")] if where == "new" else []
    assert cli_main(["migrate", str(store), *dst]) == 0
    capsys.readouterr()
    assert classified == (dst or [str(store)])


def test_migrate_refusing_its_own_source_classifies_it_once_and_writes_nothing(
        store: Path, classified: list[Any]) -> None:
    before = _hashes(store)
    url = f"{store.as_uri()}#mode=nczarr,file"
    with pytest.raises(xr_zstrings.ZStringsError, match="the target is the source"):
        migrate(store, url, mode="w", missing="values")
    assert classified == [url] and _hashes(store) == before


def test_check_and_migrate_dry_runs_open_no_session(store: Path, tmp_path: Path, classified: list[Any],
                                                     opened: list[Any], capsys: pytest.CaptureFixture[str]) -> None:
    before = _hashes(store)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert cli_main(["check", str(store)]) == 0
    migrate(store, dry_run=True)
    assert cli_main(["migrate", str(store), "--dry-run"]) == 0
    assert classified == [] and opened == []
    migrate(store, tmp_path / "v3.zarr", dry_run=True)  # (its target classified: the refusals it would make)
    capsys.readouterr()
    assert classified == [tmp_path / "v3.zarr"] and opened == []
    assert _hashes(store) == before and not (tmp_path / "v3.zarr").exists()


def test_repair_classifies_its_target_once(store: Path, classified: list[Any]) -> None:
    before = _hashes(store)
    report = repair(store)
    assert classified == [store] and not report.changed and _hashes(store) == before


def test_cli_repair_classifies_its_target_once(store: Path, classified: list[Any],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["repair", str(store)]) == 0
    assert "nothing done" in capsys.readouterr().out
    assert classified == [str(store)]


def test_repair_of_s3_classifies_its_target_once(s3: S3Server, classified: list[Any]) -> None:
    url = f"s3://{s3.bucket('session-repair')}/a.zarr"
    to_nczarr(DS, url, storage_options=s3.options())
    classified.clear()  # (the write's own)
    assert not repair(url, storage_options=s3.options()).changed
    assert classified == [url]


@pytest.mark.parametrize("how", ["path", "url", "zipstore"])
def test_repair_of_a_zip_classifies_it_once_and_only_reads_it(how: str, tmp_path: Path,
                                                               classified: list[Any]) -> None:
    path = tmp_path / "our.zip"
    to_nczarr(DS, path)
    (tmp_path / ".our.zip.zstrings-tmp-dead.zip").write_bytes(b"what a killed writer left")
    classified.clear()
    before = path.read_bytes()
    target: Any = {"path": path, "url": f"{path.as_uri()}#mode=nczarr,zip",
                   "zipstore": zarr.storage.ZipStore(path, mode="r")}[how]
    report = repair(target)
    assert classified == [target]
    assert path.read_bytes() == before and zipfile.is_zipfile(path)
    if how == "zipstore":  # (a Store names no place beside it to look into)
        assert not report.changed and (tmp_path / ".our.zip.zstrings-tmp-dead.zip").exists()
    else:
        assert report.changed and "removed 1" in report.action
        assert not (tmp_path / ".our.zip.zstrings-tmp-dead.zip").exists()


def test_the_session_refuses_a_zip_for_an_in_place_migration_before_anything(tmp_path: Path, store: Path,
                                                                             classified: list[Any]) -> None:
    shutil.make_archive(str(tmp_path / "nc"), "zip", store)
    before = (tmp_path / "nc.zip").read_bytes()
    with pytest.raises(UnsupportedError, match=r"zip file.*Pass a target \(a directory\) to migrate into"):
        migrate(tmp_path / "nc.zip", missing="values")
    assert classified == [tmp_path / "nc.zip"] and (tmp_path / "nc.zip").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nc.zip", "src.zarr"]


def test_a_repair_session_of_a_zip_is_read_only(tmp_path: Path) -> None:
    """The session a repair opens on a zip is one that cannot write: its store is read-only, and
    it holds no claim."""
    path = tmp_path / "our.zip"
    to_nczarr(DS, path)
    before = path.read_bytes()
    with session_module.write_session(path, "a", kind="repair", writer="repair") as s:
        assert s.target.is_zip and s.read_only and s.txn is None
        assert s.zstore.store.read_only
    assert path.read_bytes() == before


def test_migrate_in_place_through_a_symbolic_link_is_refused_as_every_writer_refuses_it(
        store: Path, tmp_path: Path) -> None:
    """In place, ``migrate`` is a writer like an append: its session refuses a target that is a
    link (before, it alone wrote its v3 metadata through one)."""
    link = tmp_path / "link.zarr"
    link.symlink_to(store)
    before = _hashes(store)
    with pytest.raises(xr_zstrings.TargetExistsError, match="link"):
        migrate(link, missing="values")
    assert _hashes(store) == before and sorted(p.name for p in tmp_path.iterdir()) == ["link.zarr", "src.zarr"]
