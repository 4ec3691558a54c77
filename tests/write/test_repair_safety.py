"""``repair``, ``check`` and a writer's recovery change nothing they should not (issue 36 items 1, 2, 4, 5).

* A zip file is only read: ``repair`` of our own zip (any way it is named) changes no byte and says
  there is nothing to do; a zip that is no store, or a file that is no zip, is an error (exit 2);
  only what a killed zip writer left *beside* the zip is removed.
* A ``.zstrings-journal`` that no write of the store left (another store's, or the store's own from
  an older version: restored from a backup) is refused by ``repair``, by the next writer and named
  by ``check`` (exit 1): before, ``repair`` emptied the store or undid a later append.
* A journal that is not one (not JSON, not a journal, fields missing): ``check`` names it (exit 1),
  ``repair`` and writers refuse it with the fix.
* ``repair`` of what is not a store (a folder of other files, an empty one, a broken root) is an
  error, as ``check`` says (exit 2), not "nothing to do".

The interrupted writes are real: ``kill_writer.py`` (tests/write/test_kill.py's fork server) runs
each writer in a process killed with SIGKILL at a step of the commit protocol. Every file (every S3
object) is hashed before and after each call; a refused call must leave every hash as it was.
"""

from __future__ import annotations

import hashlib
import shutil
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import obstore
import pytest
import xarray as xr
import zarr
from kill_writer import appended, dataset
from s3_server import S3Server
from test_kill import ForkServer

from xr_zstrings import JournalError, ZStringsError, to_nczarr
from xr_zstrings.cli.main import main
from xr_zstrings.io.commit import JOURNAL
from xr_zstrings.write.repair import repair
from xr_zstrings.write.zarr3 import to_zarr_v3

BUCKET = "zstrings-repair-safety"
ROWS = 50  # chunks of 40: the second one partial (an append rewrites it)


@pytest.fixture(scope="module")
def forks() -> Iterator[ForkServer]:
    server = ForkServer()
    yield server
    server.close()


def _hashes(root: Path) -> dict[str, str]:
    """Every file below ``root`` (hidden ones too) -> the SHA-256 of its bytes."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _s3_hashes(s3: S3Server, prefix: str) -> dict[str, str]:
    store = s3.obstore(BUCKET)
    keys = [m["path"] for batch in obstore.list(store, prefix=prefix) for m in batch]
    return {k: hashlib.sha256(bytes(obstore.get(store, k).bytes())).hexdigest() for k in sorted(keys)}


def _values(target: str, so: dict[str, Any] | None = None) -> dict[str, list[Any]]:
    with xr.open_dataset(target, engine="zstrings", storage_options=so) as ds:
        return {str(v): ds[v].values.tolist() for v in sorted(ds.data_vars)}


def _plain(ds: xr.Dataset) -> dict[str, list[Any]]:
    return {str(v): ds[v].values.tolist() for v in sorted(ds.data_vars)}


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(list(args))
    got = capsys.readouterr()
    return rc, got.out + got.err


# --- item 1: a zip is only read -----------------------------------------------------------------


@pytest.mark.parametrize("writer", ["to_nczarr", "to_zarr_v3"])
@pytest.mark.parametrize("how", ["api", "cli", "file-url", "cli-file-url", "zipstore"])
def test_repair_of_our_zip_changes_no_byte(writer: str, how: str, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Our own zip (either writer) is complete by construction: ``repair`` says so and leaves every
    byte; zarr-python and engine="zstrings" read it as written. (Before: truncated to 22 bytes,
    "nothing done", exit 0.)"""
    ds = dataset(1, ROWS, small=True)
    zpath = tmp_path / "own.zip"
    (to_nczarr if writer == "to_nczarr" else to_zarr_v3)(ds, zpath)
    target = f"file://{zpath}#mode=nczarr,zip" if how.endswith("file-url") else str(zpath)
    before = _hashes(tmp_path)
    if how.startswith("cli"):
        rc, out = _cli(capsys, "repair", target)
        assert rc == 0 and "nothing done: nothing to do" in out, out
    elif how == "zipstore":  # a zarr-python ZipStore the caller opened: read, and left open
        with zarr.storage.ZipStore(zpath, mode="r", read_only=True) as zs:
            assert repair(zs).action == "nothing to do"
            assert sorted(zarr.open_group(zs, mode="r").array_keys()) == sorted(str(v) for v in ds.data_vars)
    else:
        report = repair(target)
        assert not report.changed and report.action == "nothing to do", report
    assert _hashes(tmp_path) == before
    assert _values(str(zpath)) == _plain(ds)
    group = zarr.open_group(zarr.storage.ZipStore(zpath, mode="r"), mode="r")
    assert sorted(group.array_keys()) == sorted(str(v) for v in ds.data_vars)


@pytest.mark.parametrize("mode", ["a", "w"])
def test_no_store_opens_an_existing_zip_for_writing(mode: str, tmp_path: Path) -> None:
    """The root of item 1: opening a local zip for writing reached zarr-python's ``ZipStore`` in mode
    "w", which empties the file. It is refused, naming why, and the zip keeps every byte."""
    from xr_zstrings.io.store import open_store

    zpath = tmp_path / "own.zip"
    to_nczarr(dataset(1, ROWS, small=True), zpath)
    before = _hashes(tmp_path)
    with pytest.raises(ZStringsError, match="never changed in place"):
        open_store(str(zpath), mode=mode)
    assert _hashes(tmp_path) == before


def _foreign_zip(tmp_path: Path) -> Path:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("buy milk\n")
    p = tmp_path / "docs.zip"
    with zipfile.ZipFile(p, "w") as zf:  # as `zip -r docs.zip notes` makes it
        zf.write(notes, "notes/")
        zf.write(notes / "todo.txt", "notes/todo.txt")
    return p


@pytest.mark.parametrize("kind", ["foreign zip", "junk named .zip", "empty .zip"])
def test_repair_refuses_a_zip_that_is_no_store_and_changes_nothing(kind: str, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A zip of other files, or a file that is no zip: an error naming it (exit 2), no byte changed."""
    if kind == "foreign zip":
        path = _foreign_zip(tmp_path)
    else:
        path = tmp_path / ("junk.zip" if kind.startswith("junk") else "empty.zip")
        path.write_bytes(b"these are my notes, not a zip\n" if kind.startswith("junk") else b"")
    before = _hashes(tmp_path)
    rc, out = _cli(capsys, "repair", str(path))
    assert rc == 2 and path.name in out, out
    with pytest.raises(ZStringsError, match=path.name):
        repair(str(path))
    with pytest.raises(ZStringsError):
        repair(f"file://{path}#mode=nczarr,zip")
    assert _hashes(tmp_path) == before


def test_repair_of_a_zip_in_object_storage_only_reads_it(s3: S3Server, tmp_path: Path) -> None:
    """A zip in S3 is read-only here: ``repair`` reports it complete (it said "Cannot write the zip
    archive" before), and no object changes."""
    prefix = f"zip-{uuid.uuid4().hex}"
    to_nczarr(dataset(1, ROWS, small=True), tmp_path / "own.zip")
    url = s3.upload(tmp_path / "own.zip", BUCKET, f"{prefix}/own.zip")
    so = s3.options()
    before = _s3_hashes(s3, prefix)
    report = repair(url, storage_options=so)
    assert not report.changed and report.action == "nothing to do", report
    assert _s3_hashes(s3, prefix) == before


def test_repair_removes_only_what_a_killed_zip_writer_left_beside_the_zip(tmp_path: Path,
                                                                          forks: ForkServer) -> None:
    """A replacement of a zip killed at its last step (the swap) leaves the old zip whole and its
    new one unfinished beside it: ``repair`` removes that sibling, and the zip keeps every byte."""
    zpath = tmp_path / "t.zip"
    to_nczarr(dataset(1, ROWS, small=True), zpath)
    full = forks.run(writer="nczarr_replace", target=str(zpath), rows=ROWS, small=True)  # (counts its steps)
    assert full["status"] == "ok", full
    to_nczarr(dataset(1, ROWS, small=True), zpath, mode="w")
    zip_hash = hashlib.sha256(zpath.read_bytes()).hexdigest()
    # its last two steps: the new zip renamed over the old one, the lock file removed
    res = forks.run(writer="nczarr_replace", target=str(zpath), rows=ROWS, small=True, kill_at=full["events"] - 1)
    assert res["status"] == "killed", res
    left = [p.name for p in tmp_path.iterdir() if p.name.startswith(".t.zip.zstrings-tmp-")]
    assert len(left) == 1 and hashlib.sha256(zpath.read_bytes()).hexdigest() == zip_hash, left
    report = repair(str(zpath))
    assert report.changed and "removed 1" in report.action, report
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.zip"]
    assert hashlib.sha256(zpath.read_bytes()).hexdigest() == zip_hash


# --- item 2: a journal that does not belong to the store ----------------------------------------


class Target:
    """A store at a local path or an S3 prefix, with its files' hashes and its journal's bytes."""

    def __init__(self, where: str, tmp_path: Path, s3: S3Server | None, name: str) -> None:
        self.s3 = s3
        self.so = s3.options() if s3 is not None else None
        if s3 is not None:
            self.prefix = f"{where}-{uuid.uuid4().hex}/{name}.zarr"
            self.url = f"s3://{BUCKET}/{self.prefix}"
        else:
            self.url = str(tmp_path / f"{name}.zarr")

    def hashes(self) -> dict[str, str]:
        if self.s3 is not None:
            return _s3_hashes(self.s3, self.prefix + "/")
        return _hashes(Path(self.url))

    def journal(self) -> bytes | None:
        if self.s3 is not None:
            try:
                return bytes(obstore.get(self.s3.obstore(BUCKET), f"{self.prefix}/{JOURNAL}").bytes())
            except FileNotFoundError:
                return None
        p = Path(self.url) / JOURNAL
        return p.read_bytes() if p.exists() else None

    def put_journal(self, raw: bytes) -> None:
        if self.s3 is not None:
            obstore.put(self.s3.obstore(BUCKET), f"{self.prefix}/{JOURNAL}", raw)
        else:
            (Path(self.url) / JOURNAL).write_bytes(raw)

    def run(self, forks: ForkServer, writer: str, **kw: Any) -> dict[str, Any]:
        return forks.run(writer=writer, target=self.url, so=self.so, rows=ROWS, small=True, **kw)


def _killed_journal(source: str, forks: ForkServer, tmp_path: Path, s3: S3Server) -> tuple[bytes, str]:
    """A journal a real writer left when it was killed (SIGKILL): another store's append in its
    metadata window, or another store's replacement (S3: in place) after it removed the old
    version. Returns its bytes and the writer it belongs to."""
    if source == "another store's append":
        other = Target("local", tmp_path, None, "other")
        to_nczarr(dataset(1, ROWS, small=True), other.url, unlimited_dims=["obs"])
        res = other.run(forks, "nczarr_append", kill_event="xr_zstrings.commit:window")
    else:
        other = Target("s3", tmp_path, s3, "other")
        to_nczarr(dataset(1, ROWS, small=True), other.url, storage_options=other.so)
        res = other.run(forks, "nczarr_replace", kill_event="xr_zstrings.commit:commit")
    assert res["status"] == "killed", res
    raw = other.journal()
    assert raw is not None
    return raw, other.url


SOURCES = ["another store's append", "another store's replacement", "its own older append (a restored backup)"]


@pytest.mark.parametrize("where", ["local", "s3"])
@pytest.mark.parametrize("source", SOURCES)
def test_a_journal_that_does_not_belong_is_refused_and_nothing_changes(
        source: str, where: str, tmp_path: Path, s3: S3Server, forks: ForkServer,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A journal another write left (another store's, or this store's own from before a later
    append) lies in a healthy store: ``repair`` (API and CLI) and the next append refuse it and
    change no byte, naming the journal and the fix; ``check`` names it on its state line (exit 1).
    Before: ``repair`` emptied the store ("the target is empty", exit 0) or undid the later append,
    and the append deleted everything, then raised StoreNotFoundError."""
    s3.bucket(BUCKET)
    store = Target(where, tmp_path, s3 if where == "s3" else None, "store")
    so = store.so
    kw: dict[str, Any] = {"storage_options": so} if so else {}
    to_nczarr(dataset(1, ROWS, small=True), store.url, unlimited_dims=["obs"], **kw)
    if source.startswith("its own"):  # killed in its window, repaired, appended again; then the backup's journal
        assert store.run(forks, "nczarr_append", kill_event="xr_zstrings.commit:window")["status"] == "killed"
        raw = store.journal()
        assert raw is not None
        assert "rolled back" in repair(store.url, storage_options=so).action
        assert store.run(forks, "nczarr_append")["status"] == "ok"
        want = _plain(appended(ROWS, small=True))
    else:
        raw, _ = _killed_journal(source, forks, tmp_path, s3)
        want = _plain(dataset(1, ROWS, small=True))
    store.put_journal(raw)
    before = store.hashes()
    assert _values(store.url, so) == want

    with pytest.raises(JournalError, match=r"does not belong to this store.*remove that \.zstrings-journal"):
        repair(store.url, storage_options=so)
    assert store.hashes() == before
    with pytest.raises(JournalError, match=r"Cannot write to .*does not belong to this store"):
        to_nczarr(dataset(3, ROWS, small=True), store.url, mode="a", append_dim="obs", **kw)
    assert store.hashes() == before
    if so is None:  # (the CLI takes S3 credentials from the environment)
        rc, out = _cli(capsys, "repair", store.url)
        assert rc == 2 and "does not belong" in out, out
        rc, out = _cli(capsys, "check", store.url)
        assert rc == 1 and f"state: its journal {JOURNAL} does not belong to this store" in out, out
        assert store.hashes() == before
    assert _values(store.url, so) == want


# --- item 5: a journal that is not one ----------------------------------------------------------

NOT_JOURNALS = {
    "not JSON": b"{\"xr_zstrings_journal\": 1, \"kind\": \"app",
    "another JSON document": b'{"notes": "mine"}',
    "empty": b"",
    "a journal missing its fields": b'{"xr_zstrings_journal": 1, "kind": "replace", "phase": "cleared"}',
    "a journal with fields of the wrong kind": (
        b'{"xr_zstrings_journal": 1, "txn": "t", "kind": "append", "fmt": "v2", "writer": {}, "lineage": "L",'
        b' "commit": "C", "version": 2, "phase": "writing", "appends": {"/name": "all"}}'),
}


@pytest.mark.parametrize("where", ["local", "s3"])
@pytest.mark.parametrize("content", list(NOT_JOURNALS))
def test_a_journal_that_is_not_one_is_a_problem_check_names_and_repair_refuses(
        content: str, where: str, tmp_path: Path, s3: S3Server, capsys: pytest.CaptureFixture[str]) -> None:
    """``check`` reports it on its state line naming the file (exit 1; before: no state line, "no
    problems", exit 0); ``repair`` and a writer refuse it with the fix (before: "malformed JSON" and
    no advice); nothing changes."""
    s3.bucket(BUCKET)
    store = Target(where, tmp_path, s3 if where == "s3" else None, "store")
    so = store.so
    kw: dict[str, Any] = {"storage_options": so} if so else {}
    to_nczarr(dataset(1, ROWS, small=True), store.url, unlimited_dims=["obs"], **kw)
    store.put_journal(NOT_JOURNALS[content])
    before = store.hashes()
    with pytest.raises(JournalError, match=r"is not .*xr_zstrings write journal.*remove that \.zstrings-journal"):
        repair(store.url, storage_options=so)
    with pytest.raises(JournalError, match=r"Cannot write to .*is not .*xr_zstrings write journal"):
        to_nczarr(dataset(3, ROWS, small=True), store.url, mode="a", append_dim="obs", **kw)
    if so is None:
        rc, out = _cli(capsys, "check", store.url)
        assert rc == 1 and f"state: {store.url} key '{JOURNAL}' is not" in out, out
        assert f"PROBLEM {JOURNAL}" in out, out
        rc, out = _cli(capsys, "repair", store.url)
        assert rc == 2 and "remove that .zstrings-journal" in out, out
    assert store.hashes() == before
    assert _values(store.url, so) == _plain(dataset(1, ROWS, small=True))


# --- item 4: repair of what is not a store ------------------------------------------------------

NOT_STORES = {
    "a folder of other files": {"notes.txt": b"mine\n", "sub/data.csv": b"a,b\n1,2\n"},
    "an empty folder": {},
    "a zarr.json that is no Zarr metadata": {"zarr.json": b'{"zarr_format": 3}'},
    "a .zgroup that is no Zarr metadata": {".zgroup": b'{"zarr_format": "two"}', "notes.txt": b"mine\n"},
}


@pytest.mark.parametrize("where", ["local", "s3"])
@pytest.mark.parametrize("kind", list(NOT_STORES))
def test_repair_of_what_is_not_a_store_is_an_error_like_check(kind: str, where: str, tmp_path: Path, s3: S3Server,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 2 with the reader's error, as ``check`` (before: "complete / nothing to do", exit 0);
    nothing changes."""
    files = NOT_STORES[kind]
    if where == "local":
        target = tmp_path / "folder"
        target.mkdir()
        for name, data in files.items():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            (target / name).write_bytes(data)
        rc, out = _cli(capsys, "check", str(target))
        assert rc == 2, out
        before = _hashes(tmp_path)
        rc, out = _cli(capsys, "repair", str(target))
        assert rc == 2 and "zstrings: error:" in out, out
        with pytest.raises(ZStringsError):
            repair(str(target))
        assert _hashes(tmp_path) == before
        return
    prefix = f"nostore-{uuid.uuid4().hex}"
    store = s3.obstore(s3.bucket(BUCKET))
    for name, data in files.items():
        obstore.put(store, f"{prefix}/folder/{name}", data)
    obstore.put(store, f"{prefix}/beside.txt", b"a neighbour\n")
    before = _s3_hashes(s3, prefix + "/")
    with pytest.raises(ZStringsError):
        repair(f"s3://{BUCKET}/{prefix}/folder", storage_options=s3.options())
    assert _s3_hashes(s3, prefix + "/") == before


def test_repair_of_a_healthy_store_changes_no_byte_and_an_emptied_target_is_no_store(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The control: a healthy store is "nothing to do" with every byte kept; a folder a repair
    emptied (what an interrupted new store leaves) is then no store, as check says."""
    target = tmp_path / "s.zarr"
    to_nczarr(dataset(1, ROWS, small=True), target)
    before = _hashes(tmp_path)
    rc, out = _cli(capsys, "repair", str(target))
    assert rc == 0 and "nothing done: nothing to do" in out, out
    assert _hashes(tmp_path) == before
    shutil.rmtree(target)
    target.mkdir()
    assert _cli(capsys, "repair", str(target))[0] == 2
