"""Nothing is deleted that a call should leave alone (issue 36): every public entry that writes or
repairs, and the reads, on every kind of target (``KINDS``: our store, a Zarr v3 store, one xarray
wrote, one holding a user's file or a foreign or corrupt journal, the source of convert/migrate
itself, a folder of user files, an empty folder, our zip, a zip of user files, a junk ``.zip``, a
plain file, a symlink to a store; some also named by a ``file://`` URL), locally, on S3 (moto) and
in an icechunk session, in every mode the entry takes. Ids: entry-target-mode.

Every file (S3 object, zip member, icechunk key) of the cell is hashed before and after the call:

* a refused call (an exception, a non-zero exit) changes nothing, anywhere in the cell;
* a read (``open_dataset``) and a read-only command (``check``, ``info``, ``dump``, ``migrate
  --dry-run``) change no byte, nor does ``repair`` of a healthy store (of a store holding a foreign
  or corrupt journal, at most that journal goes); ``repair`` of a target that is no store is refused;
* a write changes only its own store's keys (metadata objects, and the folders and chunks of
  arrays): user files in the target and everything beside it (the source store, a neighbour whose
  name starts with the target's) are never touched; ``mode="w-"`` changes no file that was there
  (but the metadata naming a group ``to_zarr_v3(group=...)`` adds), the modes that write into a
  store (``"a"`` with or without append_dim, xarray's ``"a-"`` and ``"r+"``) remove none;
* what a write or ``repair`` that succeeds leaves opens with ``engine="zstrings"`` and holds the
  values written;
* the control: what every entry may do (replace a store or an empty folder with ``mode="w"`` /
  ``--overwrite``, read or repair a store; replace an icechunk session's store with Zarr v3)
  succeeds, and a replacement changes its target, so no cell passes by missing its target.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import threading
import uuid
import warnings
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import obstore
import pytest
import xarray as xr
import zarr
from s3_server import KEY, REGION, SECRET, S3Server

import xr_zstrings.accessor  # noqa: F401 - registers ds.zstrings
from xr_zstrings import convert, migrate, repair, to_nczarr, to_zarr_v3
from xr_zstrings.cli.main import main as cli_main

T = np.dtypes.StringDType()
BUCKET = "zstrings-nothing-deleted"
#: the names of the objects a Zarr v2 / v3 / NCZarr store holds besides chunks (and our journal)
METADATA = frozenset({".zgroup", ".zarray", ".zattrs", ".zmetadata", "zarr.json", ".nczarr", ".nczgroup",
                      ".nczattr", ".nczarray", ".nczvar", ".zstrings-journal"})
ICECHUNK = sys.version_info >= (3, 12)
if ICECHUNK:
    import icechunk


def _ds(start: int, n: int) -> xr.Dataset:
    """One text variable along an unlimited ``t``: a store of six objects (each S3 request costs)."""
    return xr.Dataset({"name": ("t", np.array([f"n{i}-é" for i in range(start, start + n)], dtype=T))})


DS, MORE = _ds(0, 4), _ds(4, 2)  # the data written, and appended with mode="a"
#: a variable added (no "" among its values: one added to a pure Zarr v2 store another tool wrote
#: reads back as missing, a question of fill values, not of this table)
EXTRA = xr.Dataset({"extra": ("t", np.array(["x", "y", "zé", "w"], dtype=T))})


# ---------------------------------------------------------------------------------------------
# Snapshots: every file, object, zip member and icechunk key, hashed
# ---------------------------------------------------------------------------------------------


@dataclass
class Snapshot:
    """``files``: relative path -> sha256 (``"dir"`` for a folder, written ``path/``; ``"link:…"``
    for a symlink; a zip's members as ``zip!/member``, and ``zip!`` marks a valid zip);
    ``nodes``/``arrays``: the folders holding Zarr metadata / an array's."""

    files: dict[str, str] = field(default_factory=dict)
    nodes: set[str] = field(default_factory=set)
    arrays: set[str] = field(default_factory=set)

    def add(self, rel: str, data: bytes) -> None:
        self.files[rel] = hashlib.sha256(data).hexdigest()
        parent, _, name = rel.rpartition("/")
        if name in METADATA:
            self.nodes.add(parent)
            if name == ".zarray" or (name == "zarr.json" and _node_type(data) == "array"):
                self.arrays.add(parent)
        if rel.endswith(".zip") and zipfile.is_zipfile(io.BytesIO(data)):
            self.files[rel + "!"] = "zip"
            with zipfile.ZipFile(io.BytesIO(data)) as zf:
                for member in zf.namelist():
                    if not member.endswith("/"):
                        self.add(f"{rel}!/{member}", zf.read(member))


def _node_type(zarr_json: bytes) -> Any:
    try:
        return json.loads(zarr_json).get("node_type")
    except (ValueError, AttributeError):
        return None


def _local_snapshot(root: Path) -> Snapshot:
    snap = Snapshot()
    for dirpath, dirnames, filenames in os.walk(root):  # links are listed, never followed
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                snap.files[rel] = "link:" + os.readlink(p)
            elif p.is_dir():
                snap.files[rel + "/"] = "dir"
            else:
                snap.add(rel, p.read_bytes())
    return snap


def _s3_snapshot(store: Any, prefix: str, known: dict[str, bytes]) -> Snapshot:
    """Every object below ``prefix``, listed and read; an object listed with the ETag of bytes in
    ``known`` (what was put: a single PUT's ETag is the MD5 of its bytes) is not read again (each
    request to moto costs this process milliseconds of CPU)."""

    async def read() -> dict[str, bytes]:
        listed = [m for batch in obstore.list(store, prefix=prefix + "/") for m in batch]
        out, fetch = {}, []
        for m in listed:
            key, old = m["path"], known.get(m["path"][len(prefix) + 1 :])
            if old is not None and str(m["e_tag"]).strip('"') == hashlib.md5(old).hexdigest():
                out[key] = old
            else:
                fetch.append(key)
        bodies = await asyncio.gather(*(obstore.get_async(store, k) for k in fetch))
        out.update({k: bytes(await b.bytes_async()) for k, b in zip(fetch, bodies, strict=True)})
        return out

    snap = Snapshot()
    for key, data in sorted(asyncio.run(read()).items()):
        snap.add(key[len(prefix) + 1 :], data)
    return snap


def _icechunk_snapshot(store: Any) -> Snapshot:
    from zarr.core.buffer import default_buffer_prototype

    async def read() -> dict[str, bytes]:
        keys = [k async for k in store.list()]
        out = {}
        for k in keys:
            buf = await store.get(k, prototype=default_buffer_prototype())
            out[k] = b"<missing>" if buf is None else buf.to_bytes()
        return out

    snap = Snapshot()
    for k, data in asyncio.run(read()).items():
        snap.add(f"session/{k}", data)
    return snap


def _store_key(rel: str, owned: tuple[str, ...], before: Snapshot, after: Snapshot) -> bool:
    """Whether ``rel`` is one of the target store's own keys: the target itself (a zip only when it
    held no user file), a metadata object, a folder holding metadata, or anything inside an array."""
    nodes, arrays = before.nodes | after.nodes, before.arrays | after.arrays
    key = rel.rstrip("/")
    for root in owned:
        if key == root:
            members = [k for k in before.files if k.startswith(root + "!/")]
            was_zip = root + "!" in before.files
            return rel not in before.files or rel.endswith("/") or before.files[rel].startswith("link:") or (
                was_zip and all(_store_key(m, owned, before, after) for m in members))
        if key == root + "!":
            return all(_store_key(m, owned, before, after)
                       for m in before.files if m.startswith(root + "!/"))
        if key.startswith((root + "/", root + "!/")):
            if key.rpartition("/")[2] in METADATA or any(key.startswith(a + "/") for a in arrays):
                return True
            return rel.endswith("/") and key in nodes
    return False


def _problems(before: Snapshot, after: Snapshot, *, refused: bool, entry: Entry, mode: str,
              owned: tuple[str, ...], is_store: bool) -> list[str]:
    removed = sorted(before.files.keys() - after.files.keys())
    added = sorted(after.files.keys() - before.files.keys())
    modified = sorted(k for k in before.files.keys() & after.files.keys() if before.files[k] != after.files[k])
    changes = [(k, "removed") for k in removed] + [(k, "added") for k in added] + [(k, "modified") for k in modified]
    if refused or entry.kind == "read":
        why = "refused, yet changed" if refused else "read-only, yet changed"
        return [f"{why}: {k} {what}" for k, what in changes]
    out = []
    if entry.kind == "repair":
        if not is_store:
            out.append("repair reported success on a target that is not a store")
        out += [f"repair changed {k} ({what})" for k, what in changes
                if not (what == "removed" and k.endswith("/.zstrings-journal"))]
        return out
    for k, what in changes:
        if what == "removed" and mode in ("w", "overwrite") and k in {f"{r}/{IN_STORE}" for r in owned}:
            continue
        if not _store_key(k, owned, before, after):
            out.append(f"{k} {what}: not a key of the target store")
        elif mode in ("w-", "new") and what != "added" and not (
                entry.group and what == "modified" and k.rpartition("/")[2] in METADATA):
            out.append(f"mode='w-', yet {k} {what}")
        elif mode in INTO and what == "removed":
            out.append(f"mode={mode!r}, yet {k} {what}")
    return out


# ---------------------------------------------------------------------------------------------
# Targets
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """A kind of target: its name in the cell (``t.zarr``/``t.zip``), whether it is a store, and
    what else it owns (the store a symlink points at)."""

    name: str
    store: bool
    also_owned: tuple[str, ...] = ()
    url: bool = False  # named by a file:// URL (netcdf-c's form, #mode=nczarr,file or ,zip)


KINDS = {
    "store": Kind("t.zarr", True),
    "store+user-file": Kind("t.zarr", True),  # a store with a user's file at its root
    "v3-store": Kind("t.zarr", True),  # written by to_zarr_v3
    "xarray-store": Kind("t.zarr", True),  # written by xarray's to_zarr (Zarr v2, consolidated)
    "user-files": Kind("t.zarr", False),
    "empty-folder": Kind("t.zarr", False),
    "our-zip": Kind("t.zip", True),
    "foreign-zip": Kind("t.zip", False),
    "junk-zip": Kind("t.zip", False),
    "plain-file": Kind("t.zarr", False),
    "symlink-to-store": Kind("t.zarr", True, ("real.zarr",)),
    "foreign-journal": Kind("t.zarr", True),
    "corrupt-journal": Kind("t.zarr", True),
    "the-source": Kind("src.zarr", True),  # convert's and migrate's source itself
    "the-source-url": Kind("src.zarr", True, url=True),  # the source, spelled another way
    "store-url": Kind("t.zarr", True, url=True),
    "user-files-url": Kind("t.zarr", False, url=True),
    "our-zip-url": Kind("t.zip", True, url=True),
    "foreign-zip-url": Kind("t.zip", False, url=True),
}
#: on S3 (an empty folder is no object there, a symlink none either; a store xarray wrote and a zip
#: of user files take no path there that the others do not)
S3_KINDS = tuple(k for k in KINDS if k not in ("empty-folder", "symlink-to-store", "xarray-store", "foreign-zip")
                 and not KINDS[k].url)
#: on S3 for the CLI (which calls the functions above: what it adds there is its reading of the
#: AWS_* environment and of its arguments) and for xarray's writer (a prefix, whatever objects
#: are named like it)
S3_CLI = ("store", "user-files", "our-zip", "foreign-journal", "the-source")
S3_PREFIXES = ("store", "store+user-file", "v3-store", "user-files", "foreign-journal")
NOTES = {"readme.txt": b"keep me\n", "sub/draft.md": b"and me\n"}
#: a user's file at a store's root: a store still (mode="w" replaces it, that file with it, as
#: docs/reliability.md says), but every other mode keeps it
IN_STORE = "notes.txt"


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What every cell copies: a store (an unlimited ``t``, for appends), our zip, user files, a zip of
    them, junk, and a journal that another store's writer left (a real one, its writer ended)."""
    d = tmp_path_factory.mktemp("templates")
    to_nczarr(DS, d / "store.zarr", unlimited_dims=["t"])
    to_nczarr(DS, d / "our.zip", unlimited_dims=["t"])
    to_zarr_v3(DS, d / "v3.zarr")
    DS.to_zarr(d / "xarray.zarr", zarr_format=2, consolidated=True)
    for rel, data in NOTES.items():
        (d / "notes" / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / "notes" / rel).write_bytes(data)
    with zipfile.ZipFile(d / "foreign.zip", "w") as zf:
        for rel, data in NOTES.items():
            zf.writestr(rel, data)
    (d / "junk.zip").write_bytes(b"not a zip, only named like one\n")
    (d / "plain").write_bytes(b"a user's file\n")
    (d / "foreign-journal").write_bytes(_foreign_journal(d / "other.zarr"))
    (d / "corrupt-journal").write_bytes(b'{"xr_zstrings_journal": 1, "txn": "trunc')
    return d


_PAUSE: dict[str, tuple[threading.Event, threading.Event]] = {}


def _pause_hook(event: str, args: tuple[Any, ...]) -> None:
    if event == "xr_zstrings.commit" and (gate := _PAUSE.pop(args[0], None)) is not None:
        gate[0].set()
        gate[1].wait(60)


sys.addaudithook(_pause_hook)


def _foreign_journal(other: Path) -> bytes:
    """The journal of a replacement of another store (a zarr-python LocalStore is written in place)
    stopped before its commit point, as its writer left it had it been killed there: a process of
    this machine that has ended."""
    reached, go = _PAUSE["commit"] = (threading.Event(), threading.Event())
    writer = threading.Thread(target=to_nczarr, args=(DS, zarr.storage.LocalStore(other)),
                              kwargs={"mode": "w"})
    writer.start()
    try:
        while not reached.wait(0.05) and writer.is_alive():
            pass
        assert reached.is_set(), "the writer ended without reaching its commit step (audit event xr_zstrings.commit)"
        raw = json.loads((other / ".zstrings-journal").read_bytes())
    finally:
        _PAUSE.pop("commit", None)
        go.set()
        writer.join(60)
    ended = subprocess.Popen([sys.executable, "-c", ""])
    ended.wait()
    raw["writer"]["pid"] = ended.pid
    return json.dumps(raw).encode()


def _make_local(kind: str, cell: Path, tpl: Path) -> None:
    t = cell / KINDS[kind].name
    kind = kind.removesuffix("-url")
    if kind in ("store", "foreign-journal", "corrupt-journal", "store+user-file"):
        shutil.copytree(tpl / "store.zarr", t)
        if kind in ("foreign-journal", "corrupt-journal"):
            shutil.copy(tpl / kind, t / ".zstrings-journal")
        if kind == "store+user-file":
            (t / IN_STORE).write_bytes(b"a user's notes kept in the store's folder\n")
    elif kind in ("v3-store", "xarray-store"):
        shutil.copytree(tpl / f"{kind.removesuffix('-store')}.zarr", t)
    elif kind == "user-files":
        shutil.copytree(tpl / "notes", t)
    elif kind == "empty-folder":
        t.mkdir()
    elif kind in ("our-zip", "foreign-zip", "junk-zip"):
        shutil.copy(tpl / {"our-zip": "our.zip", "foreign-zip": "foreign.zip", "junk-zip": "junk.zip"}[kind], t)
    elif kind == "plain-file":
        shutil.copy(tpl / "plain", t)
    elif kind == "the-source":
        pass  # (every cell holds it)
    elif kind == "symlink-to-store":
        shutil.copytree(tpl / "store.zarr", cell / "real.zarr")
        t.symlink_to("real.zarr", target_is_directory=True)
    else:  # pragma: no cover
        raise AssertionError(kind)
    # beside it: a user's file, and a folder whose name starts with the target's
    (cell / "neighbour.txt").write_bytes(b"beside the target\n")
    (cell / f"{t.name}-old").mkdir()
    (cell / f"{t.name}-old" / "readme.txt").write_bytes(b"a neighbour\n")


def _make_s3(kind: str, store: Any, prefix: str, tpl: Path, cell: Path) -> dict[str, bytes]:
    """Put the kind's objects below ``prefix``; returns them (key below ``prefix`` -> bytes)."""
    _make_local(kind, cell, tpl)
    files = {p.relative_to(cell).as_posix(): p.read_bytes() for p in cell.rglob("*")
             if p.is_file() and (kind == "the-source" or not p.relative_to(cell).as_posix().startswith("src.zarr/"))}

    async def put() -> None:
        await asyncio.gather(*(obstore.put_async(store, f"{prefix}/{k}", v) for k, v in files.items()))

    asyncio.run(put())
    for p in sorted(cell.iterdir()):  # S3 holds the target; the cell keeps only the source
        if p.name != "src.zarr":
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    return files


# ---------------------------------------------------------------------------------------------
# Entries
# ---------------------------------------------------------------------------------------------


@dataclass
class Call:
    """One cell's call: the target (a path, URL or Store), the mode, the source store for convert and
    migrate, storage_options for S3."""

    target: Any
    mode: str
    src: str
    so: dict[str, Any] | None = None
    zarr_store: Callable[[], Any] | None = None  # the target as a zarr-python Store (xarray's writer)
    written: Any = None  # what the call wrote to, when not ``target`` (that Store)


class Refused(Exception):
    """A CLI command that exited non-zero."""


def _cli(*argv: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(list(argv))
    if code != 0:
        raise Refused(f"exit {code}: {err.getvalue().strip()}")


#: the modes that write into what is there (never remove a file)
INTO = ("a", "a-vars", "a-", "r+")


def _nczarr_args(mode: str) -> tuple[xr.Dataset, dict[str, Any]]:
    """What ``to_nczarr`` writes in ``mode``: ``"a"`` appends along ``t``, ``"a-vars"`` is mode="a"
    without append_dim (adds a variable)."""
    if mode == "a":
        return MORE, {"mode": "a", "append_dim": "t"}
    if mode == "a-vars":
        return EXTRA, {"mode": "a"}
    return DS, {"mode": mode, "unlimited_dims": ["t"]}


def _to_zarr(call: Call, fmt: int) -> None:
    """The accessor's xarray writer: ``"a"`` appends along ``t``, ``"a-"`` adds a variable, ``"r+"``
    overwrites the variables there."""
    target = call.zarr_store() if call.zarr_store is not None else call.target
    extra: dict[str, Any] = {"consolidated": False} if not isinstance(target, str) else {}
    ds = {"a": MORE, "a-": EXTRA}.get(call.mode, DS)
    if call.mode == "a":
        extra["append_dim"] = "t"
    ds.zstrings.to_zarr(target, zarr_format=fmt, mode=call.mode, **extra)
    call.written = target


def _target(call: Call) -> str:
    return call.target if isinstance(call.target, str) else os.fspath(call.target)


@dataclass(frozen=True)
class Entry:
    """A public entry: ``run(call)`` raises when it refuses; ``kind``: write, repair or read."""

    run: Callable[[Call], Any]
    modes: tuple[str, ...]
    kind: str = "write"
    places: tuple[str, ...] = ("local", "s3", "icechunk")
    group: bool = False  # writes a group into a store (whose metadata then names it, also with "w-")
    s3_modes: tuple[str, ...] | None = None  # the modes run on S3 (default: every mode)
    s3_kinds: tuple[str, ...] | None = None  # the kinds of target on S3 (default: S3_KINDS)
    #: takes netcdf-c's file:// URLs (#mode=nczarr,...): not xarray's writer, for which zarr-python
    #: reads the URL (3.1 keeps the fragment in the path, 3.4 drops it)
    nczarr_urls: bool = True


ENTRIES: dict[str, Entry] = {
    "to_nczarr": Entry(lambda c: to_nczarr(_nczarr_args(c.mode)[0], c.target, storage_options=c.so,
                                           **_nczarr_args(c.mode)[1]), ("w-", "w", "a", "a-vars")),
    "to_zarr_v3": Entry(lambda c: to_zarr_v3(DS, c.target, mode=c.mode, storage_options=c.so), ("w-", "w")),
    "to_zarr_v3-group": Entry(lambda c: to_zarr_v3(DS, c.target, mode=c.mode, group="g", storage_options=c.so),
                              ("w-", "w"), group=True),
    "convert": Entry(lambda c: convert(c.src, c.target, mode="a" if c.mode == "a-vars" else c.mode,
                                       storage_options=c.so, **({"append_dim": "t"} if c.mode == "a" else {})),
                     ("w-", "w", "a", "a-vars"), places=("local", "s3")),
    "migrate": Entry(lambda c: migrate(c.src, c.target, mode=c.mode, target_storage_options=c.so),
                     ("w-", "w")),
    "migrate-in-place": Entry(lambda c: migrate(c.target, storage_options=c.so), ("",)),
    "migrate-dry-run": Entry(lambda c: migrate(c.target, storage_options=c.so, dry_run=True), ("",), kind="read"),
    "repair": Entry(lambda c: repair(c.target, storage_options=c.so), ("",), kind="repair"),
    "open_dataset": Entry(lambda c: xr.open_dataset(c.target, engine="zstrings", storage_options=c.so).load(),
                          ("",), kind="read"),
    # (the accessor's to_nczarr is to_nczarr: S3 once is enough; xarray's a- and r+ on S3 take the
    # paths its a and w take there)
    "ds.zstrings.to_nczarr": Entry(lambda c: _nczarr_args(c.mode)[0].zstrings.to_nczarr(
        c.target, storage_options=c.so, **_nczarr_args(c.mode)[1]), ("w-", "w", "a", "a-vars"),
        places=("local", "icechunk")),
    "ds.zstrings.to_zarr-v2": Entry(lambda c: _to_zarr(c, 2), ("w-", "w", "a", "a-", "r+"), s3_modes=("w-", "w", "a"),
                                    s3_kinds=S3_PREFIXES, nczarr_urls=False),
    "ds.zstrings.to_zarr-v3": Entry(lambda c: _to_zarr(c, 3), ("w-", "w", "a", "a-", "r+"), s3_modes=("w-", "w", "a"),
                                    s3_kinds=S3_PREFIXES, nczarr_urls=False),
    "cli.convert": Entry(lambda c: _cli("convert", c.src, _target(c), "-q",
                                        *(["--overwrite"] if c.mode == "overwrite" else [])),
                         ("new", "overwrite"), places=("local", "s3"), s3_kinds=S3_CLI),
    "cli.migrate": Entry(lambda c: _cli("migrate", c.src, _target(c),
                                        *(["--overwrite"] if c.mode == "overwrite" else [])),
                         ("new", "overwrite"), places=("local", "s3"), s3_kinds=S3_CLI),
    "cli.migrate-in-place": Entry(lambda c: _cli("migrate", _target(c)), ("",), places=("local", "s3"),
                                  s3_kinds=S3_CLI),
    "cli.migrate-dry-run": Entry(lambda c: _cli("migrate", _target(c), "--dry-run"), ("",), kind="read",
                                 places=("local", "s3"), s3_kinds=S3_CLI),
    "cli.repair": Entry(lambda c: _cli("repair", _target(c)), ("",), kind="repair", places=("local", "s3"),
                        s3_kinds=S3_CLI),
    "cli.check": Entry(lambda c: _cli("check", _target(c)), ("",), kind="read", places=("local", "s3"),
                       s3_kinds=S3_CLI),
    "cli.info": Entry(lambda c: _cli("info", _target(c)), ("",), kind="read", places=("local", "s3"), s3_kinds=S3_CLI),
    "cli.dump": Entry(lambda c: _cli("dump", _target(c)), ("",), kind="read", places=("local", "s3"), s3_kinds=S3_CLI),
}

ICECHUNK_SKIP = pytest.mark.skipif(not ICECHUNK, reason="peer limit: icechunk supports Python >= 3.12 only "
                                                        "(no release for 3.11); CI's py312 and later jobs run these")


def _cells() -> Iterator[Any]:
    for name, entry in ENTRIES.items():
        for mode in entry.modes:
            suffix = f"-{mode}" if mode else ""
            if "local" in entry.places:
                for kind in KINDS:
                    yield pytest.param(name, "local", kind, mode, id=f"{name}-{kind}{suffix}")
            if "s3" in entry.places and mode in (entry.s3_modes or entry.modes):
                for kind in entry.s3_kinds or S3_KINDS:
                    yield pytest.param(name, "s3", kind, mode, id=f"{name}-s3:{kind}{suffix}")
            if "icechunk" in entry.places:
                yield pytest.param(name, "icechunk", "session", mode, id=f"{name}-icechunk-session{suffix}",
                                   marks=ICECHUNK_SKIP)


@pytest.fixture(scope="module")
def icechunk_repo() -> Any:
    """A repository whose main branch holds a Zarr v3 store (DS, written by to_zarr_v3)."""
    repo = icechunk.Repository.create(icechunk.in_memory_storage())
    session = repo.writable_session("main")
    to_zarr_v3(DS, session.store, mode="w")
    session.commit("the store")
    return repo


def _opens(call: Call, entry: str, mode: str, kind: str) -> list[str]:
    """What a write or repair that succeeded leaves opens with engine="zstrings" and holds what was
    written (every store here starts as DS; an append adds MORE, convert's the source again)."""
    names: list[Any] | None = DS["name"].values.tolist()
    if mode == "a":
        names = names + (names if entry == "convert" else MORE["name"].values.tolist())
    if mode in ("a-vars", "a-") and kind == "empty-folder":
        names = None  # (only the variable added is there)
    try:
        written = call.target if call.written is None else call.written
        with xr.open_dataset(written, engine="zstrings", storage_options=None if call.written is not None else call.so,
                             group="g" if ENTRIES[entry].group else None) as ds:
            got = {v: ds[v].values.tolist() for v in ("name", "extra") if v in ds}
    except Exception as e:
        return [f"succeeded, yet its target does not open: {type(e).__name__}: {e}"]
    want = {**({"name": names} if names is not None else {}),
            **({"extra": EXTRA["extra"].values.tolist()} if mode in ("a-vars", "a-") else {})}
    return [] if all(got.get(v) == w for v, w in want.items()) else [f"succeeded, yet it holds {got}, not {want}"]


def _control(entry: str, place: str, kind: str, mode: str, error: Exception | None, before: Snapshot,
             after: Snapshot, owned: tuple[str, ...]) -> list[str]:
    """What every entry may do (replace a store or an empty folder, read or repair a store) it does,
    and a replacement writes there: no cell passes by missing its target."""
    e, base = ENTRIES[entry], kind.removesuffix("-url")
    url_ok = place != "local" or not KINDS[kind].url or e.nczarr_urls
    replaces = (base in ("store", "empty-folder") and mode in ("w", "overwrite") and url_ok
                and not (e.group and base == "store")) or (  # (no v3 group in a v2 store)
        place == "icechunk" and mode == "w" and entry in ICECHUNK_WRITERS)
    if error is not None and (replaces or (base == "store" and url_ok and e.kind in ("read", "repair"))):
        return ["refused what it must do"]
    if error is None and base == "the-source" and entry in READS_THE_SOURCE:
        return ["succeeded with its own source as its target"]
    changed = before.files.keys() ^ after.files.keys() | {
        k for k in before.files.keys() & after.files.keys() if before.files[k] != after.files[k]}
    if error is None and replaces and place != "icechunk" and not any(  # (icechunk: same data, same bytes)
            _store_key(k, owned, before, after) for k in changed):
        return ["succeeded, yet wrote nothing to its target"]
    return []


#: the entries that read a source store: its own source as their target is refused (a replacement
#: removed the chunks it was reading)
READS_THE_SOURCE = ("convert", "migrate", "cli.convert", "cli.migrate")
#: the entries that write Zarr v3 (what an icechunk session holds): their mode="w" replaces its store
ICECHUNK_WRITERS = ("to_zarr_v3", "migrate", "ds.zstrings.to_zarr-v3")
#: one obstore client a bucket (each costs milliseconds to build)
_S3_STORES: dict[str, Any] = {}


@pytest.mark.parametrize(("entry", "place", "kind", "mode"), list(_cells()))
def test_a_call_changes_only_its_own_store(entry: str, place: str, kind: str, mode: str, tmp_path: Path,
                                           templates: Path, request: pytest.FixtureRequest,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    cell = tmp_path / "cell"
    cell.mkdir()
    shutil.copytree(templates / "store.zarr", cell / "src.zarr")  # convert's and migrate's source
    src = str(cell / "src.zarr")
    read_target: Callable[[], Snapshot]  # the target's side (the source and the rest of the cell: local)
    if place == "local":
        k = KINDS[kind]
        _make_local(kind, cell, templates)
        path = cell / k.name
        call = Call(f"{path.as_uri()}#mode=nczarr,{'zip' if k.name.endswith('.zip') else 'file'}" if k.url
                    else str(path), mode, src)
        owned, is_store = (k.name, *k.also_owned), k.store
        target_before = Snapshot()

        def read_target() -> Snapshot:
            return Snapshot()
    elif place == "s3":
        s3: S3Server = request.getfixturevalue("s3")
        bucket = s3.bucket(BUCKET)
        store = _S3_STORES.get(bucket) or _S3_STORES.setdefault(bucket, s3.obstore(bucket))
        prefix = f"cell-{uuid.uuid4().hex}"
        k = KINDS[kind]
        put = _make_s3(kind, store, prefix, templates, cell)
        target_before = Snapshot()
        for key in sorted(put):
            target_before.add(key, put[key])
        for var, value in (("AWS_ENDPOINT_URL", s3.endpoint), ("AWS_ACCESS_KEY_ID", KEY),
                           ("AWS_SECRET_ACCESS_KEY", SECRET), ("AWS_REGION", REGION)):
            monkeypatch.setenv(var, value)  # the CLI's S3 configuration
        from obstore.store import S3Store

        if kind == "the-source":  # on S3 too, named there by netcdf-c's path-style URL
            src = f"s3://{bucket}/{prefix}/src.zarr"
        call = Call(f"{s3.endpoint}/{bucket}/{prefix}/{k.name}#mode=nczarr,s3" if kind == "the-source"
                    else f"s3://{bucket}/{prefix}/{k.name}", mode, src, so=s3.options(),
                    zarr_store=lambda: zarr.storage.ObjectStore(S3Store(
                        bucket, prefix=f"{prefix}/{k.name}", endpoint=s3.endpoint, access_key_id=KEY,
                        secret_access_key=SECRET, region=REGION, client_options={"allow_http": True})))
        owned, is_store = (k.name,), k.store

        def read_target() -> Snapshot:
            return _s3_snapshot(store, prefix, put)
    else:
        session = request.getfixturevalue("icechunk_repo").writable_session("main")
        call = Call(session.store, mode, src)
        owned, is_store = ("session",), True

        def read_target() -> Snapshot:
            return _icechunk_snapshot(session.store)

        target_before = read_target()

    def snapshot(target: Snapshot) -> Snapshot:
        local = _local_snapshot(cell)  # local targets, and the source and the neighbours of every cell
        return Snapshot({**target.files, **local.files}, target.nodes | local.nodes, target.arrays | local.arrays)

    before = snapshot(target_before)
    error: Exception | None = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ENTRIES[entry].run(call)
        except Exception as e:  # a refusal: what it was is shown when the cell fails
            error = e
    after = snapshot(read_target())
    problems = _problems(before, after, refused=error is not None, entry=ENTRIES[entry], mode=mode,
                         owned=owned, is_store=is_store)
    if error is None and ENTRIES[entry].kind != "read":
        problems += _opens(call, entry, mode, kind)
    problems += _control(entry, place, kind, mode, error, before, after, owned)
    outcome = f"refused: {type(error).__name__}: {error}" if error is not None else "succeeded"
    assert not problems, f"{outcome} | " + " | ".join(problems)
