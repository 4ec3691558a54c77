"""How every writer commits: nothing a reader can open until the new data is complete.

Local directories and zip files are written *beside* the target (a hidden sibling
``.<name>.zstrings-tmp-<pid>-<hex>``) and swapped in at the end: ``rename`` for a new target or a
zip file, and for a directory that already exists an atomic exchange of the two directories
(Linux ``renameat2(RENAME_EXCHANGE)``, macOS ``renamex_np(RENAME_SWAP)``). An append or an added
variable works on a clone of the store made of hard links (one link per file, no data copied), so
the old store stays untouched and readable until the exchange. Writers of one target are serialised
by an advisory lock on a sibling file ``.<name>.zstrings-lock`` (``flock``; the kernel releases it
when a writer dies, so a killed writer never leaves a stale lock). Whoever holds the lock removes
what a killed writer left beside the target.

Object storage and zarr-python ``Store`` objects have no rename: there the root metadata is written
last, and a *placeholder* root object (``INCOMPLETE_MARKER``) is written first, so every state in
between is refused by engine="zstrings", netcdf-c and zarr-python (see docs/reliability.md).

Python has no binding for renameat2/renamex_np (the only atomic way to replace a non-empty
directory), so ``_exchange`` calls the C library through ctypes.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from zarr.storage import LocalStore

from ..errors import ConcurrentWriteError, TargetExistsError
from .conditional import lock_timeout, partial_name
from .consolidated import INCOMPLETE_MARKER
from .zstore import ZStore, refuse_links

__all__ = ["INCOMPLETE_MARKER", "TEMPORARY", "ZARR_TEMPORARY", "CloneStore", "incomplete_v2_group", "incomplete_v3_root", "leftover_temporaries",
           "leftovers_beside", "local_commit", "lock_held", "partial_name", "target_lock"]

_MARKER_TEXT = ("a write by xr_zstrings started here and has not finished (or was interrupted); "
                "the store is incomplete until this object is replaced")


def incomplete_v2_group(version: dict[str, Any] | None = None) -> bytes:
    """A root ``.zgroup`` that netcdf-c, zarr-python and our reader all refuse (``zarr_format`` is
    not a number: netcdf-c answers "NCZarr error" instead of reading a half-written store). Each
    is unique, so a writer can tell whether its own create-only write won. ``version``: the version
    record of the write under way (``commit.VersionRecord``), which tells a reader whether the
    store's consolidated metadata may still be served (an append's window) or not (a replacement)."""
    import json

    obj: dict[str, Any] = {"zarr_format": "incomplete", INCOMPLETE_MARKER: _MARKER_TEXT,
                           "writer": f"{os.getpid()}-{uuid.uuid4().hex}"}
    if version is not None:
        obj["xr_zstrings"] = version
    return json.dumps(obj).encode()


def incomplete_v3_root(version: dict[str, Any] | None = None) -> bytes:
    """A root ``zarr.json`` that zarr-python, xarray and our reader all refuse (unknown node type)."""
    import json

    obj: dict[str, Any] = {"zarr_format": 3, "node_type": "incomplete", INCOMPLETE_MARKER: _MARKER_TEXT,
                           "writer": f"{os.getpid()}-{uuid.uuid4().hex}"}
    if version is not None:
        obj["xr_zstrings"] = version
    return json.dumps(obj).encode()


def _sibling(target: Path, tag: str, suffix: str = "") -> Path:
    return target.with_name(f".{target.name}.zstrings-{tag}-{os.getpid()}-{uuid.uuid4().hex[:8]}{suffix}")


#: the temporary files our writers and ``repair`` make inside a local store, and nothing else: an object
#: being written (``partial_name``) and the root ``zarr.json`` of an in-place ``migrate``
#: (``write.migrate._replace``). zarr-python's own (``ZARR_TEMPORARY``) do not match.
TEMPORARY = re.compile(r"(?:.+\.[0-9a-f]{8}\.partial|\.zarr\.json\.zstrings-tmp-[0-9]+)")

#: zarr-python's temporary file of an object its ``LocalStore`` writes (the key with its last suffix
#: replaced by ``.<32 hex digits>.partial``, renamed over the key when written): our chunk writes into
#: local folders go through it, so a killed one leaves it. It may be a live zarr-python writer's, which
#: takes no claim of ours: only one older than the lease (``lock_timeout``) is a leftover.
ZARR_TEMPORARY = re.compile(r".+\.[0-9a-f]{32}\.partial")


def leftover_temporaries(store: Path) -> list[Path]:
    """Temporary files a killed writer or ``repair`` left inside the local store ``store`` (names
    ``TEMPORARY`` matches exactly; the in-place ``migrate``'s only at the root; zarr-python's
    ``ZARR_TEMPORARY`` last changed more than the lease ago), sorted. Every folder is listed: they
    can lie beside any metadata object. Links are neither followed nor listed (a stack, not
    ``os.walk``: see ``_link_tree``)."""
    old = time.time() - lock_timeout()
    found: list[Path] = []
    stack = [os.fspath(store)]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except OSError:
            continue
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                stack.append(e.path)
            elif e.is_file(follow_symlinks=False) and _leftover(e, at_root=folder == os.fspath(store), old=old):
                found.append(Path(e.path))
    return sorted(found)


def _leftover(entry: os.DirEntry[str], *, at_root: bool, old: float) -> bool:
    """Whether the file ``entry`` is a leftover temporary file (``leftover_temporaries``); ``old``:
    the time before which a zarr-python one last changed to be one."""
    if TEMPORARY.fullmatch(entry.name):
        return entry.name.endswith(".partial") or at_root
    if not ZARR_TEMPORARY.fullmatch(entry.name):
        return False
    try:
        return entry.stat(follow_symlinks=False).st_mtime < old
    except OSError:  # (gone since it was listed)
        return False


def lock_held(target: Path) -> bool:
    """Whether a writer holds ``target``'s writer lock now (``target_lock``): what is beside the target
    and in it may then be that writer's, not a leftover. Takes no lock; False without ``fcntl``."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return False
    try:
        fd = os.open(target.with_name(f".{target.name}.zstrings-lock"), os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def leftovers_beside(target: Path) -> list[Path]:
    """What killed writers left beside ``target`` (``_recover`` removes them): their unfinished
    temporary trees and zip files, and an old version a fallback swap renamed aside; not the lock."""
    prefix = f".{target.name}.zstrings-"
    try:
        siblings = list(target.parent.iterdir())
    except OSError:
        return []
    return sorted(p for p in siblings if p.name.startswith(prefix) and p.name != f"{prefix}lock")


@contextlib.contextmanager
def target_lock(target: Path, display: str) -> Iterator[None]:
    """Hold the exclusive writer lock of ``target`` (a sibling lock file, ``flock``).

    A second writer waits (up to ``XR_ZSTRINGS_LOCK_TIMEOUT`` seconds, default 600) and then raises
    ``ConcurrentWriteError``. Without ``fcntl`` (Windows) writers are not serialised.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    lock = target.with_name(f".{target.name}.zstrings-lock")
    timeout = lock_timeout()
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        fd = _open_lock(lock, display)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if time.monotonic() >= deadline:
                raise ConcurrentWriteError(
                    f"Cannot write to {display}: another process has been writing it for more than "
                    f"{timeout:g} s (it holds the lock {str(lock)!r}). Wait for it to finish, or raise "
                    "XR_ZSTRINGS_LOCK_TIMEOUT."
                ) from None
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
            continue
        try:  # the holder before us removes the file when done: lock the file that is there now
            same = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)  # no lock file is left beside the store
        os.close(fd)  # releases the lock


def _open_lock(lock: Path, display: str) -> int:
    """The lock file's descriptor (made with its folder if missing); a read-only file system or a
    permission problem named with the path, not as a bare ``[Errno 30]``."""
    from .store_errors import local_errors

    with local_errors(f"Cannot write to {display}: its writer lock (a file beside it) cannot be made"):
        lock.parent.mkdir(parents=True, exist_ok=True)
        return os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        _rmtree(os.fspath(p))
    else:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def _rmtree(top: str) -> None:
    """Remove a folder tree, ignoring errors, without recursion: ``shutil.rmtree`` recurses once
    per level before Python 3.13 (RecursionError on a store 1,000 groups deep)."""
    stack, dirs = [top], []
    while stack:
        d = stack.pop()
        dirs.append(d)
        try:
            with os.scandir(d) as it:
                for e in it:
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                    else:
                        with contextlib.suppress(OSError):
                            os.unlink(e.path)
        except OSError:
            continue
    for d in reversed(dirs):  # children were listed after their parents
        with contextlib.suppress(OSError):
            os.rmdir(d)


def _recover(target: Path) -> None:
    """Under the lock: clean up after writers that were killed. A target that a killed fallback swap
    left missing gets its old version back; temporary trees are deleted."""
    prefix = f".{target.name}.zstrings-"
    olds: list[Path] = []
    try:
        siblings = list(target.parent.iterdir())
    except FileNotFoundError:
        return
    for p in siblings:
        if not p.name.startswith(prefix) or p.name == f"{prefix}lock":  # the lock we hold
            continue
        if p.name.startswith(prefix + "old-"):
            olds.append(p)
        else:
            _remove(p)
    if olds and not os.path.lexists(target):
        newest = max(olds, key=lambda q: q.stat().st_mtime)
        os.rename(newest, target)
        olds.remove(newest)
    for p in olds:
        _remove(p)


def _libc() -> Any:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:  # pragma: no cover
        return None


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two existing paths; False where the platform or file system cannot."""
    libc = _libc()
    if libc is None:
        return False
    sys.audit("xr_zstrings.exchange", str(a), str(b))  # lets tests stop a writer right here
    if sys.platform.startswith("linux"):
        fn = getattr(libc, "renameat2", None)
        if fn is None:
            return False
        fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
        at_fdcwd, rename_exchange = -100, 2
        rc = fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    elif sys.platform == "darwin":
        fn = getattr(libc, "renamex_np", None)
        if fn is None:
            return False
        fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint]
        rc = fn(os.fsencode(a), os.fsencode(b), 0x2)  # RENAME_SWAP
    else:
        return False
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def _swap_in(tmp: Path, target: Path) -> None:
    """Make ``tmp`` the target. A directory target that exists is exchanged atomically; where the
    platform cannot, it is renamed aside first (readers briefly find no store: refused, not wrong)."""
    if not os.path.lexists(target) or target.is_file() or target.is_symlink():
        os.replace(tmp, target)
        return
    if not any(target.iterdir()):
        os.rmdir(target)
        os.rename(tmp, target)
        return
    if _exchange(tmp, target):
        _remove(tmp)  # now the old version
        return
    old = _sibling(target, "old")
    os.rename(target, old)
    os.rename(tmp, target)
    _remove(old)


def _link_tree(src: Path, dst: Path) -> bool:
    """Clone a directory tree with hard links (no data copied). False when links are not possible."""
    # a stack, not os.walk/Path.mkdir(parents=True): both recurse per level before Python 3.12
    dst.parent.mkdir(parents=True, exist_ok=True)
    stack = [(os.fspath(src), os.fspath(dst))]
    while stack:
        s_dir, d_dir = stack.pop()
        os.makedirs(d_dir, exist_ok=True)  # its parent exists: one level
        with os.scandir(s_dir) as it:
            entries = list(it)
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                stack.append((e.path, os.path.join(d_dir, e.name)))
                continue
            if e.is_symlink() or e.name.endswith(".partial"):  # .partial: a killed zarr-python write's
                continue
            try:
                os.link(e.path, os.path.join(d_dir, e.name))
            except OSError as err:
                if err.errno in (errno.EPERM, errno.EXDEV, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
                    return False
                raise
    return True


def recover_swaps(target: Path, display: str) -> None:
    """Clean up after killed swaps of ``target`` now (under its lock): a store one renamed aside is
    put back, its temporary files beside it removed (e.g. before checking that a store to append to
    exists). Not the in-place commit protocol's recovery (``io.commit.recover``)."""
    target = Path(os.path.abspath(target))
    if not target.parent.is_dir():
        return
    with target_lock(target, display):
        _recover(target)


class CloneStore(LocalStore):
    """The store of a hard-link clone (see ``_link_tree``): a write gives its key a file of its own.

    The clone's files share their data with the live store until the swap. zarr-python before 3.1.3
    writes an existing key in place (``open("wb")``), which would change the live store mid-append
    (a killed append would leave it torn); unlinking a shared file first keeps the old store intact
    whatever zarr-python does. Written by hand: no zarr-python store is copy-on-write."""

    def _unshare(self, key: str) -> None:
        path = os.path.join(self.root, key)
        try:
            if os.lstat(path).st_nlink > 1:
                os.unlink(path)
        except FileNotFoundError:
            pass

    async def set(self, key: str, value: Any) -> None:
        with _writing(self.root, key):
            self._unshare(key)
            await super().set(key, value)

    async def set_if_not_exists(self, key: str, value: Any) -> None:
        with _writing(self.root, key):
            await super().set_if_not_exists(key, value)

    async def get(self, key: str, prototype: Any = None, byte_range: Any = None) -> Any:
        with _writing(self.root, key):  # (a store not yet opened makes its folder on a read)
            return await super().get(key, prototype, byte_range)

    if hasattr(LocalStore, "set_sync"):  # zarr >= 3.2 writes through it without the event loop

        def set_sync(self, key: str, value: Any) -> None:
            with _writing(self.root, key):
                self._unshare(key)
                super().set_sync(key, value)

    if hasattr(LocalStore, "get_sync"):

        def get_sync(self, key: str, *args: Any, **kw: Any) -> Any:
            with _writing(self.root, key):
                return super().get_sync(key, *args, **kw)


class _Gate:
    """The writes under way into one temporary store (``CloneStore``), and whether it is shut."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.writing = 0
        self.shut = False


_GATES: dict[str, _Gate] = {}
_GATES_LOCK = threading.Lock()


def _gate(root: Any) -> _Gate:
    with _GATES_LOCK:
        return _GATES.setdefault(os.path.abspath(root), _Gate())


@contextlib.contextmanager
def _writing(root: Any, key: str) -> Iterator[None]:
    """One write (or read: a store not yet opened makes its folder) into the temporary store
    ``root``, refused once it is shut (``_shut``)."""
    gate = _gate(root)
    with gate.cond:
        if gate.shut:
            raise OSError(errno.ECANCELED, "the write into this temporary store failed and it was removed",
                          os.path.join(root, key))
        gate.writing += 1
    try:
        yield
    finally:
        with gate.cond:
            gate.writing -= 1
            gate.cond.notify_all()


def _shut(tmp: Path, wait: float = 60.0) -> None:
    """Refuse every later write into ``tmp`` and wait (at most ``wait`` s) for those under way: when
    one write of a batch fails (a full disk) zarr-python raises while its other writes go on in
    threads, which would make the folder again after it is removed."""
    gate = _gate(tmp)
    with gate.cond:
        gate.shut = True
        gate.cond.wait_for(lambda: gate.writing == 0, wait)


#: the root objects of a store a write could have made (Zarr v2 / NCZarr 2 group or array, consolidated
#: metadata, Zarr v3, NCZarr 1.0 of netcdf-c 4.8); a placeholder root left by an interrupted write is
#: one of them too (see ``incomplete_v2_group``)
ROOT_OBJECTS = (".zgroup", ".zarray", ".zmetadata", "zarr.json", ".nczarr")
NETCDF_MAGIC = (b"CDF\x01", b"CDF\x02", b"CDF\x05", b"\x89HDF\r\n\x1a\n")


def _listing(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f", ... ({len(names)} in all)" if len(names) > 5 else "")


def _link_problem(path: Path) -> str | None:
    """What a symbolic link at ``path`` (the target itself) points to, or None when it is not one."""
    if not path.is_symlink():
        return None
    real = os.path.realpath(path)
    what = "a directory" if os.path.isdir(real) else ("a file" if os.path.isfile(real) else "nothing (dangling)")
    return (f"a symbolic link to {real!r} ({what}), and writers never write through a link (the new "
            f"version would replace the link, not what it points to): write to {real!r} itself, or remove "
            "the link")


def _root_not_a_store(names: list[str], root_object: Callable[[str], bool], holds_store: Callable[[str], bool],
                      what: str = "a directory") -> str | None:
    """``not_replaceable``'s rule for a folder (or an object-storage prefix) holding ``names`` (a
    folder's ending in "/"): None when it is empty or ``root_object(name)`` finds a store's root
    object (a regular file or object) in it; else what it holds, and the stores inside
    (``holds_store(folder)``)."""
    if not names or any(root_object(o) for o in ROOT_OBJECTS):
        return None
    nested = [n for n in names if n.endswith("/") and holds_store(n)]
    linked = [n for n in names if n in ROOT_OBJECTS]  # a root object that is a link (or a folder)
    why = (f"; {_listing(linked)} at its root is not a regular file (writers write no links)" if linked else
           f"; it holds Zarr stores in {_listing(nested)} (a folder of stores, or a store that lost its "
           "root object)" if nested else "")
    return f"{what} whose root is not a Zarr store (found {_listing(names)}){why}"


def not_replaceable(path: Path, kind: str) -> str | None:
    """What an existing local ``path`` holds that a ``mode="w"`` write of ``kind`` (``"zarr"``: a
    store directory, ``"zip"``, ``"netcdf"``) must not replace, or None when it is what such a write
    could have made (or empty, or absent). Replacing is for earlier versions, never other files.

    A directory is replaced only when its *root* is a store (a regular file named in
    ``ROOT_OBJECTS``), whatever else it holds, or when it is empty. A folder whose root is not a
    store is refused even when stores sit inside it (a project folder holding ``results.zarr``):
    no writer here leaves a store without its root object (local writes are swapped in whole, and
    in-place writes put a placeholder root first), so such a folder is not ours to delete."""
    link = _link_problem(path)
    if link is not None:
        return link
    if path.is_dir():
        entries = [p.name + ("/" if p.is_dir() and not p.is_symlink() else "") for p in sorted(path.iterdir())]
        return _root_not_a_store(entries, lambda o: (path / o).is_file() and not (path / o).is_symlink(),
                                 lambda n: any((path / n / o).is_file() for o in ROOT_OBJECTS))
    if path.is_file():
        if kind == "zip":
            names = zipfile_names(path)
            if names is not None:
                return _zip_not_a_store(names)
        elif kind == "netcdf":
            with path.open("rb") as f:
                if f.read(8).startswith(NETCDF_MAGIC):
                    return None
        what = {"zip": "a zip", "netcdf": "a netCDF file", "zarr": "a Zarr store"}[kind]
        return f"a file that is not {what} ({path.stat().st_size:,} bytes)"
    return None


def _zip_not_a_store(names: list[str]) -> str | None:
    """``not_replaceable``'s rule for a zip holding members ``names``: None when it is empty or its
    root is a store's (a root object at its top, or in its one top folder: netcdf-c's layout); a
    zip of other files (documents zipped by hand) is not a store a write could have made."""
    files = [n for n in names if not n.endswith("/")]
    top = sorted({n.split("/", 1)[0] + ("/" if "/" in n else "") for n in files})
    folder = top[0] if len(top) == 1 and top[0].endswith("/") else ""
    return _root_not_a_store(top, lambda o: o in files or f"{folder}{o}" in files,
                             lambda n: any(f"{n}{o}" in files for o in ROOT_OBJECTS), what="a zip")


def refuse_link_target(target: Path, display: str) -> None:
    """Refuse a target that is itself a symbolic link (what ``local_commit`` checks first), for the
    writes that change a store in place (``commit``: appends, added variables)."""
    link = _link_problem(target)
    if link is not None:
        raise TargetExistsError(f"Cannot write to {display}: it is {link}.")


def refused(display: str, found: str, mode: str) -> TargetExistsError:
    """The error for a target ``not_replaceable`` refuses: ``mode="w"`` would delete what is there;
    another mode would write into it and make it a store's root (which a later ``mode="w"``
    replaces whole)."""
    if mode == "w":
        return TargetExistsError(
            f"Cannot replace {display}: it is {found}, and mode='w' replaces only what a write could have "
            "made. Choose another target (or remove it yourself if it is meant to go).")
    return TargetExistsError(
        f"Cannot write into {display}: it is {found}, and mode={mode!r} would make it a Zarr store's root "
        "(which a later mode='w' replaces whole, the files in it with it). Choose another target.")


#: names at most looked into when a prefix of object storage is refused (the message shows five)
_LOOK_INTO = 20


class TargetRoot(NamedTuple):
    """What is at a write's target: ``refusal``, what a write may not touch there
    (``not_replaceable``; None when absent, empty or a store); ``roots``, the store root objects
    (``ROOT_OBJECTS``) at its top."""

    display: str
    refusal: str | None
    roots: frozenset[str]


def _local_root(path: Path, kind: str, display: str) -> TargetRoot:
    path = Path(os.path.abspath(path))
    roots: frozenset[str] = frozenset()
    if kind == "zip":
        roots = frozenset(n for n in zipfile_names(path) or () if n in ROOT_OBJECTS)
    elif path.is_dir() and not path.is_symlink():
        roots = frozenset(o for o in ROOT_OBJECTS if (path / o).is_file() and not (path / o).is_symlink())
    return TargetRoot(display, not_replaceable(path, kind), roots)


def zipfile_names(path: Path) -> list[str] | None:
    """The member names of a zip file, or None when ``path`` is no zip (read, never opened for writing)."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as zf:
            return zf.namelist()
    except (OSError, zipfile.BadZipFile):
        return None


def store_root(zs: ZStore) -> TargetRoot:
    """``not_replaceable`` for a prefix of object storage or a zarr-python Store (``zs``'s root), by
    listing it: refused unless empty or holding a store's root object. Our own objects
    (``.zstrings-*``: a write's claim) are not counted."""
    import asyncio

    from ..zarr_compat import sync
    from .store import zarr_v3_only
    from .store_errors import mapped_errors

    store = zs.store

    async def exists(keys: list[str]) -> list[bool]:
        return list(await asyncio.gather(*(store.exists(zs.full_key(k)) for k in keys)))

    names = [n for n in zs.list_dir("") if n and not n.startswith(".zstrings-")]
    if not names:
        return TargetRoot(zs.display, None, frozenset())
    if zarr_v3_only(store):  # icechunk holds Zarr v3 nodes only, and raises when asked for another key
        with mapped_errors(f"Could not list {zs.display}", zs.probe):
            return TargetRoot(zs.display, None, frozenset({"zarr.json"}) if sync(exists(["zarr.json"])) else frozenset())
    look = names[:_LOOK_INTO]
    with mapped_errors(f"Could not list {zs.display}", zs.probe):
        roots = frozenset(o for o, there in zip(ROOT_OBJECTS, sync(exists(list(ROOT_OBJECTS))), strict=True) if there)
        if roots:
            return TargetRoot(zs.display, None, roots)
        objects = dict(zip(look, sync(exists(look)), strict=True))
        folders = [n for n in look if not objects[n]]
        inside = sync(exists([f"{n}/{o}" for n in folders for o in ROOT_OBJECTS]))
    stores = {n for i, n in enumerate(folders) if any(inside[i * len(ROOT_OBJECTS):(i + 1) * len(ROOT_OBJECTS)])}
    shown = [n if objects.get(n, True) else f"{n}/" for n in names]
    return TargetRoot(zs.display, _root_not_a_store(shown, lambda o: False, lambda n: n.rstrip("/") in stores,
                                                    what="a store location"), roots)


def target_root(target: Any, *, storage_options: Mapping[str, Any] | None = None) -> TargetRoot | None:
    """What is at the target of a write by another library (xarray's ``to_zarr``, through
    ``ds.zstrings.to_zarr``), by the rule of this package's writers (``not_replaceable``): local
    paths and ``file://`` URLs (a folder, also when named ``.zip``, as xarray writes it), ``s3://``
    URLs, and zarr-python Stores: a ``LocalStore`` by its folder, a writable ``ZipStore`` by its
    file (opening it could truncate it), others by listing. None for what it cannot look into
    (other URL schemes, a ZipStore over a file object)."""
    from zarr.abc.store import Store
    from zarr.storage import ZipStore

    from .redact import shown
    from .targets import parse_nczarr_url

    display = " ".join(shown(target).split())
    if isinstance(target, ZStore):
        return store_root(target)
    if isinstance(target, LocalStore):
        return _local_root(Path(target.root), "zarr", display)
    if isinstance(target, ZipStore):
        return _local_root(target.path, "zip", display) if target.path is not None else None
    if isinstance(target, Store):
        return store_root(ZStore(target, display=display))
    if not isinstance(target, (str, os.PathLike)):
        return None
    text = os.fspath(target)
    parsed = parse_nczarr_url(text)
    if parsed.scheme in ("", "file") and "s3" not in parsed.modes:
        return _local_root(Path(parsed.path).expanduser(), "zarr", display)
    if parsed.scheme in ("s3", "http", "https") or "s3" in parsed.modes:
        from .store import open_store

        so = dict(storage_options) if storage_options else None
        return store_root(open_store(text, mode="w", storage_options=so))
    return None


def is_nonempty(target: Path) -> bool:
    if target.is_dir():
        return any(target.iterdir())
    return os.path.lexists(target)


@contextlib.contextmanager
def local_commit(target: Path, *, mode: str, display: str, zip_file: bool = False,
                 kind: str | None = None) -> Iterator[Path | None]:
    """Yield where to write instead of ``target``; on success swap it in, on any error remove it.

    ``mode``: ``"w-"`` (refuse an existing target), ``"w"`` (replace it), ``"a"`` (yield a hard-link
    clone of the existing directory to change). Yields ``None`` for ``"a"`` when the file system
    cannot hard-link: the caller then changes the store in place (metadata last). All under the
    target's writer lock. ``kind`` (``"zarr"``, ``"zip"``, ``"netcdf"``; default from ``zip_file``):
    what ``mode="w"`` may replace; anything else there (a folder of other files) is refused.
    """
    target = Path(os.path.abspath(target))
    kind = kind or ("zip" if zip_file else "zarr")
    link = _link_problem(target)  # every mode, before the lock and the write (swapping a tree in
    if link is not None:  # over a link fails only at the end; a zip or .nc would replace the link)
        raise TargetExistsError(f"Cannot write to {display}: it is {link}.")
    with target_lock(target, display):
        _recover(target)
        if mode == "w-" and is_nonempty(target):
            raise TargetExistsError(
                f"Cannot write to {display}: it exists and mode='w-' never overwrites. Pass mode='w' to replace it."
                if kind == "netcdf" else  # (a netCDF file is written whole: no mode='a')
                f"Cannot write to {display}: it is not empty and mode='w-' never overwrites. Pass "
                "mode='w' to replace it, or mode='a' with append_dim to append."
            )
        found = not_replaceable(target, kind) if mode == "w" else None
        if found is not None:
            raise refused(display, found, mode)
        tmp = _sibling(target, "tmp", ".zip" if zip_file else "")
        try:
            if mode == "a":
                refuse_links(target, display)  # never written through, and a clone cannot hold them
                if not _link_tree(target, tmp):
                    _remove(tmp)
                    yield None
                    return
            yield tmp
            _swap_in(tmp, target)
        except BaseException:
            _shut(tmp)  # threads still writing into it finish first; later ones are refused (kept shut)
            _remove(tmp)
            raise
        with _GATES_LOCK:  # (a write that succeeded: nothing is writing into it any more)
            _GATES.pop(os.path.abspath(tmp), None)
