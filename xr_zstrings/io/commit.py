"""The commit protocol of writes that change a store in place: object storage, zarr-python
``Store`` objects, and appends or added variables on local directories.

A write there cannot swap a whole new version in (no rename of a tree), so it is made of steps
that readers must never see half done, and that a killed writer must never leave stranded:

1. **Claim.** The writer creates the store's *journal* (``.zstrings-journal``) with a create-only
   write (S3 ``If-None-Match: *``): of two writers exactly one gets it, the other raises
   ``ConcurrentWriteError`` before it writes anything. A journal left by a writer that is gone (the
   same machine and its process has ended, or its claim was not renewed for
   ``XR_ZSTRINGS_LOCK_TIMEOUT`` seconds) is taken over: the taker recovers the store first (below).
   A thread renews the claim every quarter lease, and every batch of writes through the store
   checks it first (``Transaction._fence``): a writer stalled past its lease and taken over stops
   before its next batch, so of its writes only the batch in flight when it stalled can land after
   the taker's. On a local folder a conditional write checks and replaces under an ``flock`` of the
   folder (``_LocalOps._exclusive``). Local directory paths are also serialised by the writer lock
   (``atomic.target_lock``), so there a journal always belongs to a writer that is gone; a
   zarr-python ``LocalStore`` object has no such lock and relies on the claim.
2. **Chunks.** Before writing any chunk the journal records what the write may leave (the ranges
   an append writes, the arrays a write adds). An append's new chunks lie outside the old shape,
   and its rewritten partial last chunk keeps the old values, so readers of the old metadata never
   see them. Other tools take no claim (xarray's ``to_zarr(mode="a")``): after recording, before
   the metadata window and once it opened, the write re-reads the objects it changes and
   ``.zmetadata``'s ETag, and fails on a change since it began (``Transaction._check_unchanged``),
   keeping that change.
3. **Metadata window.** The journal records the old value of every metadata object the write
   changes; the root ``.zgroup`` becomes a *placeholder* (refused by every per-object reader:
   netcdf-c says "NCZarr error", zarr-python and xarray refuse it); the metadata objects change.
4. **Commit point.** The consolidated ``.zmetadata`` (the Zarr v2 form netcdf-c 4.10 reads in its
   ``consolidated`` mode) is replaced with a conditional write (``If-Match`` the version the write
   started from): this single object switches every consolidated reader from the old version to the
   new one. Then the real root ``.zgroup`` (which names the new version), and the journal removed:
   each only while it is the writer's (``_put_root``: over its own placeholder; ``release``: after
   proving the claim). Before the window, its objects and the commit point the writer proves its
   claim again (``_fence``), so a writer resumed after a takeover changes nothing of the taker's.

Readers (``consolidated_view``) are served whole versions: ``engine="zstrings"`` and netcdf-c 4.10
with ``#mode=...,consolidated`` read ``.zmetadata``, which is the old version until the commit point
and the new one after it, also while the per-object metadata are in the window or were left there
by a killed writer. Per-object readers see the old version, then a refusal during the metadata
window, then the new version.

**Recovery** (the next writer, ``repair``): a journal whose commit id is the one in ``.zmetadata`` is
*rolled forward* (the per-object metadata are written from ``.zmetadata``); any other is *rolled
back* (the chunks it may have written are undone by the caller's ``undo`` function, the metadata
objects get their recorded old values back), but for an appended array another tool grew since
(``foreign_appends``): its chunks and metadata are left as they are. A whole-store write (new store, ``mode="w"``) that
had not committed cannot be completed without its writer: it is rolled back to an empty target
once the old version was removed, else to the old version.

The root ``.zgroup`` carries the store's version record (``"xr_zstrings": {"lineage", "commit",
"version"}``): the lineage changes only when a store is replaced, so a lazy reader can tell an
append (its version's chunks unchanged: keep reading) from a replacement (``StoreReplacedError``).

Kept free of the read and write layers: the caller hands in metadata objects and, for recovery,
the function that undoes chunk writes (``write.repair.undo``).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn, Self, cast

from ..errors import (
    ConcurrentWriteError,
    ConditionalWriteWarning,
    JournalError,
    MetadataError,
    TargetExistsError,
    user_stacklevel,
)
from ..formats.nczarr import parse_json
from ..formats.nczarr_json import dumps
from .atomic import incomplete_v2_group, incomplete_v3_root, lock_timeout, refused, store_root
from .consolidated import (
    METADATA_NAMES,
    VERSION_KEY,
    ZMETADATA,
    VersionRecord,
    canonical,
    consolidated_bytes,
    consolidated_meta,
    consolidated_view,
    is_placeholder,
    version_of,
    with_version,
)
from .store_errors import mapped_errors
from .zstore import ZStore

__all__ = [
    "JOURNAL",
    "VERSION_KEY",
    "ZMETADATA",
    "Journal",
    "JournalError",
    "StoreState",
    "Transaction",
    "VersionRecord",
    "consolidated_view",
    "inspect_store",
    "version_of",
]

#: the journal object of a write in progress (at the store's root)
JOURNAL = ".zstrings-journal"


def new_id() -> str:
    return uuid.uuid4().hex[:16]


# ---------------------------------------------------------------------------------------------
# Store operations: object storage (obstore), local directories, any zarr-python Store
# ---------------------------------------------------------------------------------------------


class CommitConflict(Exception):
    """A create-only or conditional write lost: someone else wrote the object first (internal to
    the protocol: writers turn it into ``ConcurrentWriteError``)."""


class _Ops:
    """The few operations the protocol needs, on one store. ``etag`` is whatever identifies the
    object's current content (an S3 ETag; locally inode, time and size; elsewhere a hash)."""

    conditional = True  # create-only and compare-and-swap writes are atomic on this store
    server_time = False  # ages come from the server's Last-Modified (else from the journal)

    def __init__(self, zstore: ZStore) -> None:
        self.zstore = zstore

    def get(self, key: str) -> tuple[bytes | None, str | None]:
        raise NotImplementedError

    def get_many(self, keys: Sequence[str]) -> list[tuple[bytes | None, str | None]]:
        """``get`` of several keys (at once where requests cost a round trip)."""
        return [self.get(k) for k in keys]

    def age(self, key: str) -> float | None:
        """Seconds since ``key`` was last written, by the server's clock where it says."""
        return None

    def both(self, *calls: Callable[[], Any]) -> list[Any]:
        """Run independent operations at once (one round trip for all on object storage)."""
        if len(calls) == 1:
            return [calls[0]()]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(len(calls)) as pool:
            return [f.result() for f in [pool.submit(c) for c in calls]]

    def put(self, key: str, data: bytes, *, create: bool = False, match: str | None = None) -> str | None:
        raise NotImplementedError

    def delete(self, keys: Sequence[str]) -> None:
        raise NotImplementedError

    def list(self, prefix: str) -> list[str]:
        """Every key below ``prefix`` (relative to the dataset root), recursively."""
        from ..zarr_compat import sync

        zs = self.zstore
        lead = zs.full_key(prefix).rstrip("/")
        full = zs.full_key("").rstrip("/")

        async def run() -> list[str]:
            return [k async for k in zs.store.list_prefix(lead + "/" if lead else "")]

        with mapped_errors(f"Could not list {zs.display}", zs.probe):
            keys = sync(run())
        return sorted(k[len(full):].lstrip("/") if full else k for k in keys)


class _ObstoreOps(_Ops):
    """Object storage through obstore: ``PutMode`` create / update-with-ETag where the server
    honours ``If-None-Match`` / ``If-Match`` (detected once per server, ``_honours_conditions``)."""

    server_time = True

    def __init__(self, zstore: ZStore) -> None:
        super().__init__(zstore)
        self.obj = cast(Any, zstore.store).store  # (an ObjectStore: its obstore store)
        self.conditional = _honours_conditions(self)

    def _path(self, key: str) -> str:
        return self.zstore.full_key(key)

    def get(self, key: str) -> tuple[bytes | None, str | None]:
        import obstore

        with mapped_errors(f"Could not read {self.zstore.where(key)}", self.zstore.probe):
            try:
                res = obstore.get(self.obj, self._path(key))
            except (FileNotFoundError, obstore.exceptions.NotFoundError):
                return None, None
            return bytes(res.bytes()), res.meta.get("e_tag")

    def get_many(self, keys: Sequence[str]) -> list[tuple[bytes | None, str | None]]:
        import asyncio

        import obstore

        from ..zarr_compat import sync

        async def one(key: str) -> tuple[bytes | None, str | None]:
            try:
                res = await obstore.get_async(self.obj, self._path(key))
                return bytes(await res.bytes_async()), res.meta.get("e_tag")
            except (FileNotFoundError, obstore.exceptions.NotFoundError):
                return None, None

        async def run() -> list[tuple[bytes | None, str | None]]:
            return list(await asyncio.gather(*(one(k) for k in keys)))

        self.zstore._count(len(keys))
        with mapped_errors(f"Could not read from {self.zstore.display}", self.zstore.probe):
            return sync(run())

    def age(self, key: str) -> float | None:
        """By the server's ``Last-Modified``, which has whole seconds (an HTTP date): one second
        less than it shows, so that a claim renewed within the lease never looks expired."""
        import obstore

        with mapped_errors(f"Could not read {self.zstore.where(key)}", self.zstore.probe):
            try:
                meta = obstore.head(self.obj, self._path(key))
            except (FileNotFoundError, obstore.exceptions.NotFoundError):
                return None
        return max(0.0, time.time() - meta["last_modified"].timestamp() - 1.0)

    def put(self, key: str, data: bytes, *, create: bool = False, match: str | None = None) -> str | None:
        import obstore

        mode: Any = "overwrite"
        if self.conditional:
            mode = "create" if create else ({"e_tag": match} if match else "overwrite")
        elif create or match:  # the server ignores the conditions: check, then write (racy; warned)
            _, now = self.get(key)
            if (create and now is not None) or (match and now != match):
                raise CommitConflict(key)
        self.zstore._count()
        with mapped_errors(f"Could not write to {self.zstore.where(key)}", self.zstore.probe):
            try:
                res = obstore.put(self.obj, self._path(key), data, mode=mode)
            except (obstore.exceptions.AlreadyExistsError, obstore.exceptions.PreconditionError):
                raise CommitConflict(key) from None
        return res.get("e_tag")

    def delete(self, keys: Sequence[str]) -> None:
        import obstore

        if not keys:
            return
        self.zstore._count(len(keys))
        with mapped_errors(f"Could not delete from {self.zstore.display}", self.zstore.probe):
            for i in range(0, len(keys), 1000):
                with contextlib.suppress(FileNotFoundError, obstore.exceptions.NotFoundError):
                    obstore.delete(self.obj, [self._path(k) for k in keys[i : i + 1000]])


class _LocalOps(_Ops):
    """A local directory, changed in place under the target's writer lock: every object is written
    to a temporary file and renamed over the old one (readers see either, never a torn object)."""

    def __init__(self, zstore: ZStore) -> None:
        super().__init__(zstore)
        root = Path(cast(Any, zstore.store).root)  # (a LocalStore)
        self.root = root / zstore.prefix if zstore.prefix else root

    def get(self, key: str) -> tuple[bytes | None, str | None]:
        p = self.root / key
        try:
            with open(p, "rb") as f:
                st = os.fstat(f.fileno())
                return f.read(), f"{st.st_ino}-{st.st_mtime_ns}-{st.st_size}"
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None, None

    def age(self, key: str) -> float | None:
        try:
            return max(0.0, time.time() - os.stat(self.root / key).st_mtime)
        except FileNotFoundError:
            return None

    def put(self, key: str, data: bytes, *, create: bool = False, match: str | None = None) -> str | None:
        if match is None:
            return self._put(key, data, create=create, conditional=create)
        with self._exclusive():  # the check and the replacement as one step for every process
            if self.get(key)[1] != match:
                raise CommitConflict(key)
            return self._put(key, data, create=create, conditional=True)

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        """Hold an exclusive ``flock`` on the store's root directory while a conditional write checks
        and replaces its object: a file system has no compare-and-swap, and two writers that check
        at once would both replace (a renewal racing a release put a released claim back). Held for
        microseconds; waits at most the lease for a holder (a stopped process keeps it)."""
        try:
            import fcntl
        except ImportError:  # (Windows: no flock; conditional writes are then check-then-write)
            yield
            return
        try:
            fd = os.open(self.root, os.O_RDONLY)
        except FileNotFoundError:  # the store is gone: no object is as the write expects
            raise CommitConflict(str(self.root)) from None
        try:
            end = time.monotonic() + lock_timeout()
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > end:
                        raise ConcurrentWriteError(
                            f"Cannot write to {self.zstore.display}: another process holds its root folder's "
                            f"lock for longer than the lease ({lock_timeout():.0f} s; a stopped process?). "
                            "Try again when it has ended.") from None
                    time.sleep(0.005)
            yield
        finally:
            os.close(fd)  # (releases the lock)

    def _put(self, key: str, data: bytes, *, create: bool, conditional: bool) -> str | None:
        from .atomic import partial_name
        from .store_errors import local_errors

        p = self.root / key
        tmp = p.with_name(partial_name(p.name))  # (one a killed writer left: `repair` removes it, TEMPORARY)
        self.zstore._count()
        try:  # the temporary file goes whatever fails, a full disk's write of it too
            with local_errors(f"Could not write to {self.zstore.where(key)}"):  # (a full disk, a permission)
                p.parent.mkdir(parents=True, exist_ok=True)
                with open(tmp, "wb") as f:
                    f.write(data)
                try:
                    if create:
                        os.link(tmp, p)  # fails when the key exists: an atomic create-only write
                    else:
                        os.replace(tmp, p)
                except FileExistsError:
                    raise CommitConflict(key) from None
                except FileNotFoundError:
                    if not conditional:
                        raise
                    # its temporary file was removed (a repair holding the claim removes leftovers):
                    # the condition is lost as when another writer wrote first
                    raise CommitConflict(key) from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        return self.get(key)[1]

    def delete(self, keys: Sequence[str]) -> None:
        from .store_errors import local_errors

        folders: set[Path] = set()
        for k in keys:
            self.zstore._count()
            try:
                with local_errors(f"Could not delete {self.zstore.where(k)}"):  # (a permission: named with the path)
                    os.remove(self.root / k)
            except (FileNotFoundError, NotADirectoryError):
                continue
            folders.add((self.root / k).parent)
        for d in sorted(folders, key=lambda p: -len(p.parts)):  # folders a rollback emptied go too
            while d != self.root and d.is_relative_to(self.root):
                try:
                    d.rmdir()
                except OSError:  # not empty (or gone)
                    break
                d = d.parent


class _StoreOps(_Ops):
    """Any other zarr-python Store: create-only through ``set_if_not_exists`` (atomic where the
    store makes it so), compare-and-swap by reading first (not atomic: documented)."""

    conditional = False

    def get(self, key: str) -> tuple[bytes | None, str | None]:
        import hashlib

        raw = self.zstore.get_bytes(key)
        if raw is None:
            return None, None
        raw = bytes(raw)
        return raw, hashlib.sha256(raw).hexdigest()

    def put(self, key: str, data: bytes, *, create: bool = False, match: str | None = None) -> str | None:
        from zarr.buffer import cpu

        from ..zarr_compat import sync

        zs = self.zstore
        if match is not None and self.get(key)[1] != match:
            raise CommitConflict(key)
        if create:
            zs._count()
            with mapped_errors(f"Could not write to {zs.where(key)}", zs.probe):
                sync(zs.store.set_if_not_exists(zs.full_key(key), cpu.Buffer.from_bytes(data)))
            got, tag = self.get(key)
            if got != data:
                raise CommitConflict(key)
            return tag
        zs.set_many([(key, data)], fenced=False)  # (the journal itself: see Transaction._fence)
        return self.get(key)[1]

    def delete(self, keys: Sequence[str]) -> None:
        from ..zarr_compat import sync

        zs = self.zstore
        if not keys or not zs.store.supports_deletes:
            return

        async def run() -> None:
            for k in keys:
                await zs.store.delete(zs.full_key(k))

        zs._count(len(keys))
        with mapped_errors(f"Could not delete from {zs.display}", zs.probe):
            sync(run())


def _some_objects(zs: ZStore, n: int = 5) -> list[str]:
    """The names (first path part) of up to ``n`` objects in the store, ours left out: whether a
    target is empty. Objects, not a listing of folders: an S3 server with a file system behind it
    (SeaweedFS's filer) keeps listing the folders of deleted objects."""
    from ..zarr_compat import sync

    lead = zs.full_key("").rstrip("/")

    async def run() -> list[str]:
        found: list[str] = []
        async for k in zs.store.list_prefix(lead + "/" if lead else ""):
            name = (k[len(lead):].lstrip("/") if lead else k).split("/", 1)[0]
            if not name.startswith(".zstrings-") and name not in found:
                found.append(name)
                if len(found) >= n:
                    break
        return found

    with mapped_errors(f"Could not list {zs.display}", zs.probe):
        return sync(run())


def ops_for(zstore: ZStore) -> _Ops:
    """The protocol's operations on ``zstore``'s kind of store."""
    from zarr.storage import LocalStore, ObjectStore

    store = zstore.store
    if type(store) is ObjectStore and type(getattr(store, "store", None)).__module__.startswith("obstore"):
        return _ObstoreOps(zstore)
    if type(store) is LocalStore:
        return _LocalOps(zstore)
    return _StoreOps(zstore)


_CONDITIONS: dict[tuple[str, str], bool] = {}
_CONDITIONS_LOCK = threading.Lock()


def _honours_conditions(ops: _ObstoreOps) -> bool:
    """Whether the server behind ``ops`` refuses a create-only write of an existing object and a
    write whose ``If-Match`` ETag is stale: found once per server and process with a probe object
    beside the dataset (three PUTs, two of them at once, and a DELETE). Where it does not, writers
    warn (``ConditionalWriteWarning``) and fall back to read-then-write."""
    import obstore

    cfg: Any = {}
    with contextlib.suppress(Exception):
        cfg = dict(ops.obj.config)
    key = (str(cfg.get("bucket") or cfg.get("aws_bucket") or id(ops.obj)),
           str(cfg.get("endpoint") or cfg.get("aws_endpoint") or ""))
    with _CONDITIONS_LOCK:
        if key in _CONDITIONS:
            return _CONDITIONS[key]
        probe = ops._path(f".zstrings-probe-{new_id()}")

        def put_refused(mode: Any) -> bool:
            try:
                obstore.put(ops.obj, probe, b"2", mode=mode)
            except (obstore.exceptions.AlreadyExistsError, obstore.exceptions.PreconditionError):
                return True
            return False

        with mapped_errors(f"Could not write to {ops.zstore.display}", ops.zstore.probe):
            obstore.put(ops.obj, probe, b"1", mode="create")
            # a second create-only write and one whose If-Match ETag is stale must both be refused
            honours = all(ops.both(lambda: put_refused("create"), lambda: put_refused({"e_tag": '"stale-etag"'})))
            with contextlib.suppress(FileNotFoundError, obstore.exceptions.NotFoundError):
                obstore.delete(ops.obj, probe)
        _CONDITIONS[key] = honours
    if not honours:
        warnings.warn(ConditionalWriteWarning(
            f"{ops.zstore.display}: the object store ignores conditional writes (If-None-Match / If-Match), "
            "so two writers that start at the same moment can both go ahead and one's chunks can overwrite "
            "the other's. Write each store from one process at a time (docs/reliability.md, 'Concurrent "
            "writers')."), stacklevel=user_stacklevel())
    return honours


# ---------------------------------------------------------------------------------------------
# Writers and the journal
# ---------------------------------------------------------------------------------------------


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _pid_start(pid: int) -> str:
    """When process ``pid`` started (Linux: clock ticks since boot), so a reused pid is not taken
    for the writer; "" where unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def this_writer() -> dict[str, Any]:
    now = time.time()
    return {"host": socket.gethostname(), "boot": _boot_id(), "pid": os.getpid(),
            "pid_start": _pid_start(os.getpid()), "started": now, "renewed": now}


def writer_gone(w: Mapping[str, Any]) -> bool:
    """Whether the process that wrote journal writer record ``w`` is known to have ended: it ran on
    this machine (host name and boot id) and no process with its pid and start time exists."""
    if w.get("host") != socket.gethostname() or w.get("boot", "") != _boot_id():
        return False
    pid = int(w.get("pid", 0) or 0)
    if pid <= 0:
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    start = str(w.get("pid_start", ""))
    return bool(start) and _pid_start(pid) not in ("", start)


def describe_writer(w: Mapping[str, Any]) -> str:
    return f"process {w.get('pid')} on {w.get('host')}"


def release(ops: _Ops, journal: Journal, etag: str | None, *, proven: bool = False) -> bool:
    """End the claim ``journal`` whose object has ETag ``etag``, only while it is ours: a conditional
    write renews it (proving it is ours and restarting its lease; ``proven``: the caller renewed it
    less than half a lease ago), then it is deleted at once.
    Neither S3 nor a file system deletes conditionally on a version, so the delete leans on the
    lease as every fenced batch of writes does (``Transaction._fence``): nobody may take a claim over
    until it has gone unrenewed for a whole lease. False (nothing changed) when another writer or
    repair took it over since: it is theirs."""
    if etag is None:
        return False
    if not proven:
        journal.writer["renewed"] = time.time()
        try:
            ops.put(JOURNAL, journal.to_bytes(), match=etag)
        except CommitConflict:
            return False
    ops.delete([JOURNAL])
    return True


#: what ``repair`` does about a journal no write of the store left (``errors.JournalError``), in words
#: (``StoreState.describe``, ``zstrings check``)
JOURNAL_REFUSED = (f"refuses: nothing acts on a journal no write of this store left; remove {JOURNAL} if you know no "
                   "writer is running")


@dataclass
class Journal:
    """The record of a write in progress (``.zstrings-journal``). ``appends``: array path ->
    ``{"axis", "old", "new"}`` (the lengths along the appended axis); ``new_arrays``: arrays the
    write adds; ``old_meta``: metadata key -> its value before the write (None: it did not exist),
    recorded before the first metadata object changes; ``phase``: claimed, writing, committing;
    a whole-store write: clearing (its old root recorded, about to be replaced by the placeholder)
    and cleared (removing the old objects)."""

    txn: str
    kind: str  # "append", "add", "new", "replace", "migrate" (Zarr v3 metadata beside the v2: write.migrate)
    fmt: str  # "v2", "v3"
    writer: dict[str, Any]
    lineage: str
    commit: str
    version: int
    base: str | None = None  # the commit the write builds on (append, add)
    phase: str = "claimed"
    appends: dict[str, dict[str, int]] = field(default_factory=dict)
    new_arrays: list[str] = field(default_factory=list)
    old_meta: dict[str, Any] | None = None
    #: the metadata objects (key -> JSON) the write puts, recorded with ``old_meta``: a recovery
    #: tells its own objects from another tool's of the same shape by their content
    new_meta: dict[str, Any] | None = None

    def to_bytes(self) -> bytes:
        return json.dumps({"xr_zstrings_journal": 1, **asdict(self)}, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, raw: bytes, *, where: str) -> Journal:
        """The journal in ``raw``; ``JournalError`` when it is not one a write of ours left (not JSON,
        not a journal, or fields of the wrong kind): nothing may act on it."""
        try:
            obj = parse_json(raw, where=where)
        except MetadataError as e:
            why = str(e).split(": ", 1)[-1].split(". Expected", 1)[0]  # ("malformed JSON (...)", "not UTF-8 (...)")
            raise JournalError.of(f"{where} is not an xr_zstrings write journal ({why})") from None
        if not isinstance(obj, Mapping) or obj.get("xr_zstrings_journal") != 1:
            raise JournalError.of(f"{where} is not an xr_zstrings write journal (a JSON object with "
                                  "'xr_zstrings_journal': 1 was expected)")
        fields = {k: obj[k] for k in cls.__dataclass_fields__ if k in obj}
        try:
            j = cls(**fields)
        except TypeError as e:  # a required field missing
            raise JournalError.of(f"{where} is not a complete xr_zstrings write journal ({e})") from None
        bad = j._bad_field()
        if bad:
            raise JournalError.of(f"{where} is not a valid xr_zstrings write journal ({bad})")
        return j

    def _bad_field(self) -> str | None:
        """What field of a parsed journal has a value no writer writes, or None."""
        if self.kind not in ("append", "add", "new", "replace", "migrate") or self.fmt not in ("v2", "v3"):
            return f"kind {self.kind!r}, format {self.fmt!r}"
        if not all(isinstance(v, str) for v in (self.txn, self.lineage, self.commit, self.phase)) or \
                not isinstance(self.version, int) or not isinstance(self.writer, dict) or \
                not (self.base is None or isinstance(self.base, str)):
            return "its txn, lineage, commit, version, phase, base or writer has the wrong type"
        if not isinstance(self.appends, dict) or not all(
                isinstance(r, dict) and all(isinstance(r.get(n), int) for n in ("axis", "old", "new"))
                for r in self.appends.values()):
            return "its appends are not {path: {axis, old, new}}"
        if not isinstance(self.new_arrays, list) or not all(isinstance(a, str) for a in self.new_arrays) or \
                not all(m is None or isinstance(m, dict) for m in (self.old_meta, self.new_meta)):
            return "its new_arrays, old_meta or new_meta have the wrong type"
        return None

    @property
    def whole_store(self) -> bool:
        return self.kind in ("new", "replace")


# ---------------------------------------------------------------------------------------------
# What a store holds: for check, repair and a writer that finds a journal
# ---------------------------------------------------------------------------------------------


@dataclass
class StoreState:
    """A store's commit state, as ``zstrings check`` reports it and ``repair`` acts on it."""

    fmt: str  # "v2", "v3" or "none"
    journal: Journal | None
    journal_etag: str | None
    journal_age: float | None  # seconds since the journal was written or renewed
    committed: VersionRecord | None  # the version in .zmetadata (v2) that readers are served
    root: VersionRecord | None  # the version the root object names (or its placeholder's)
    root_placeholder: bool
    zmetadata_etag: str | None
    consolidated: dict[str, Any] | None  # the metadata objects of .zmetadata
    root_obj: Any = None
    root_zattrs: Any = None
    #: the ETag of the root object of the store's format (``.zgroup`` or ``zarr.json``), None when absent
    root_etag: str | None = None
    #: why ``journal`` does not belong to this store (``journal_foreign``), None when it may
    foreign: str | None = None

    @property
    def writer_gone(self) -> bool:
        return self.journal is not None and writer_gone(self.journal.writer)

    @property
    def lease_expired(self) -> bool:
        return self.journal_age is not None and self.journal_age > lock_timeout()

    @property
    def in_journal_commit(self) -> bool:
        """The journal's write reached its commit point (the new version is in ``.zmetadata``)."""
        j = self.journal
        if j is None:
            return False
        if j.fmt == "v3" and not j.whole_store:  # an append or add (write.append_v3): its root written last
            return j.phase == "committing" and self.root_obj is not None and not self.root_placeholder and \
                canonical(self.root_obj) != canonical((j.old_meta or {}).get("zarr.json"))
        if j.fmt == "v3":
            return self.root_obj is not None and not self.root_placeholder
        return self.committed is not None and self.committed.commit == j.commit

    def describe(self) -> tuple[str, str]:
        """(what state the store is in, what ``repair`` does about it), in words."""
        j = self.journal
        if j is None:
            if _lagging(self):
                assert self.committed is not None and self.root is not None
                shows = ("the root object is still the placeholder of that write" if self.root_placeholder
                         and self.root.commit == self.committed.commit else
                         f"the per-object metadata show version {self.root.version}")
                return (f"version {self.committed.version} is committed (.zmetadata) but {shows}",
                        "roll forward: write the per-object metadata from .zmetadata")
            if self.root_placeholder:
                return ("the root object is a placeholder of a write that left no journal",
                        "nothing it can complete: write the store again (mode='w')")
            if self.fmt == "v2" and self.consolidated is not None and self.committed is not None and \
                    consolidated_view(self.root_obj, self.root_zattrs, {"zarr_consolidated_format": 1,
                                      "metadata": self.consolidated}, remote=True) == "objects":
                return ("consolidated metadata (.zmetadata) is stale: another tool changed the root objects since",
                        "re-consolidate .zmetadata from the objects")
            if self.fmt == "v2" and self.consolidated is not None and self.committed is None:
                return ("complete; its consolidated metadata (.zmetadata) was written by another tool", "nothing to do")
            ver = f" (version {self.committed.version})" if self.committed is not None else ""
            return f"complete{ver}", "nothing to do"
        if self.foreign is not None:
            return f"its journal {JOURNAL} does not belong to this store: {self.foreign}", JOURNAL_REFUSED
        who = describe_writer(j.writer)
        age = f"{self.journal_age:.0f} s" if self.journal_age is not None else "an unknown time"
        what = {"append": "an append", "add": "added variables", "new": "a new store's first write",
                "replace": "a replacement (mode='w')", "migrate": "a migration in place (Zarr v3 metadata)"
                }.get(j.kind, j.kind)
        alive = ("its writer has ended" if self.writer_gone else
                 f"its claim has not been renewed for {age}, longer than the lease" if self.lease_expired else
                 f"its writer may still be running (last renewed {age} ago)")
        if self.in_journal_commit:
            state = f"{what} by {who} reached its commit point (version {j.version}); {alive}"
            action = "roll forward: finish the per-object metadata of the committed version"
        elif j.whole_store and j.phase == "cleared":
            state = f"{what} by {who} was interrupted after the old version was removed; {alive}"
            action = "roll back to an empty target (nothing of either version is complete); then write it again"
        elif j.whole_store:
            state = f"{what} by {who} is under way or was interrupted before removing anything; {alive}"
            action = "roll back: drop the claim (the old version is intact; its root object put back)"
        elif j.kind == "migrate":  # (write.migrate: it changes no v2 object nor chunk)
            state = f"{what} by {who} is under way or was interrupted; v2 readers are unaffected; {alive}"
            action = ("roll back: remove the Zarr v3 metadata it was writing (v3 readers then read the v2 metadata); "
                      "migrate again" if j.phase != "claimed" else "drop the claim (it wrote nothing)")
        else:
            base = f"version {self.committed.version}" if self.committed else "the old version"
            state = f"{what} by {who} is under way or was interrupted before its commit point; readers see {base}; {alive}"
            action = "roll back: remove the chunks it wrote and restore the metadata it changed"
        if not (self.writer_gone or self.lease_expired):
            action += " (only with --force / force=True while its writer may be running)"
        return state, action


def inspect_store(zstore: ZStore, ops: _Ops | None = None) -> StoreState:
    """Read the journal, the root object and ``.zmetadata`` of ``zstore`` (no other object, but for
    a whole-store write's journal without its root: whether the store is empty). ``JournalError``
    when the journal is not one; ``StoreState.foreign`` says why one does not belong to ``zstore``."""
    ops = ops or ops_for(zstore)
    (raw_j, etag_j), (raw_z, etag_z), (raw_g, etag_g), (raw_a, _), (raw_3, etag_3) = ops.get_many(
        [JOURNAL, ZMETADATA, ".zgroup", ".zattrs", "zarr.json"])
    journal = Journal.from_bytes(raw_j, where=zstore.where(JOURNAL)) if raw_j is not None else None
    age = None
    if journal is not None:
        age = ops.age(JOURNAL) if ops.server_time else None
        if age is None:
            age = max(0.0, time.time() - float(journal.writer.get("renewed", 0) or 0))
    zm = parse_json(raw_z, where=zstore.where(ZMETADATA)) if raw_z is not None else None
    meta = consolidated_meta(zm)
    root = parse_json(raw_g, where=zstore.where(".zgroup")) if raw_g is not None else None
    fmt = "v2" if raw_g is not None or meta is not None else ("v3" if raw_3 is not None else "none")
    if journal is not None and fmt == "none":
        fmt = journal.fmt
    if fmt == "v3" and raw_3 is not None:
        root = parse_json(raw_3, where=zstore.where("zarr.json"))
    raw_a = raw_a if fmt == "v2" else None
    committed = version_of(meta.get(".zgroup")) if meta else None
    foreign = None
    if journal is not None:
        raw_root = raw_3 if journal.fmt == "v3" else raw_g
        try:
            own_root = parse_json(raw_root, where=zstore.where("root")) if raw_root is not None else None
        except MetadataError:
            own_root = "unreadable"
        foreign = journal_foreign(journal, committed, meta, own_root, lambda: _some_objects(zstore))
    return StoreState(
        fmt=fmt, journal=journal, journal_etag=etag_j, journal_age=age, committed=committed,
        root=version_of(root) if fmt == "v2" else None, root_placeholder=is_placeholder(root),
        zmetadata_etag=etag_z, consolidated=meta, root_obj=root,
        root_zattrs=parse_json(raw_a, where=zstore.where(".zattrs")) if raw_a is not None else None,
        foreign=foreign, root_etag=etag_3 if fmt == "v3" else etag_g,
    )


def refuse_foreign(state: StoreState, zstore: ZStore, doing: str) -> None:
    """Raise ``JournalError`` (``doing`` leads its message) when ``state``'s journal does not belong
    to ``zstore``: neither ``repair`` nor a writer's recovery acts on it."""
    if state.foreign is not None:
        raise JournalError.of(f"its journal {zstore.where(JOURNAL)} does not belong to this store: {state.foreign}",
                              doing)


def _length_in(consolidated: Mapping[str, Any], path: str, axis: int) -> int | None:
    """The length along ``axis`` of array ``path`` as consolidated metadata shows it, None if it does not."""
    z = consolidated.get(f"{path.strip('/')}/.zarray")
    shape = z.get("shape") if isinstance(z, Mapping) else None
    return shape[axis] if isinstance(shape, list) and 0 <= axis < len(shape) else None


def journal_foreign(j: Journal, committed: VersionRecord | None, consolidated: Mapping[str, Any] | None,
                    root: Any, others: Callable[[], list[str]]) -> str | None:
    """Why journal ``j`` cannot have been left by a write of the store it lies in, or None when it can.

    A write's journal and the store's version records agree in every state a writer can leave (see
    the module docstring): an append or added variables build on the committed version (``j.base``
    is the commit in ``.zmetadata``; ``j.commit`` once it committed); a whole-store write's root
    object (``root``: of the journal's format) is its placeholder, naming its lineage and commit,
    from before it removes anything (while it clears, the old root it recorded) until its commit
    point (``.zmetadata`` names ``j.commit``), or the target was empty (``others()`` lists the store's
    objects). A journal that records nothing yet (phase "claimed") changes nothing when dropped, nor
    does an append's whose every array another tool grew and consolidated since (xarray's
    ``to_zarr(mode="a")``: its recovery keeps them, ``foreign_appends``).
    Any other journal (a copy, a restore from backup, a file moved between stores) is refused."""
    if j.phase == "claimed" and not (j.appends or j.new_arrays or j.old_meta):
        return None
    c = committed
    if c is not None and j.commit and c.commit == j.commit:  # (random ids: only this write commits it)
        return None
    if j.kind == "migrate" and c is None and j.base is None:
        return None  # a migration of a store without our version record (it changes no v2 object)
    what = {"append": "an append", "add": "added variables", "new": "a new store's write",
            "replace": "a replacement (mode='w')", "migrate": "a migration in place"}[j.kind]
    ours = f"{what} of lineage {j.lineage or '?'} (version {j.version}, commit {j.commit or '?'}" + \
        (f", from commit {j.base}" if j.base else "")
    has = (f"the store's committed version record (.zmetadata) is lineage {c.lineage}, version {c.version}, "
           f"commit {c.commit}") if c is not None else "the store has no committed version record (.zmetadata)"
    if j.whole_store:
        rec = version_of(root) if is_placeholder(root) else None
        if rec is not None and (rec.lineage, rec.commit) == (j.lineage, j.commit):
            return None  # its placeholder: it removed (or was removing) the old version
        old = (j.old_meta or {}).get("zarr.json" if j.fmt == "v3" else ".zgroup")
        if j.phase == "clearing" and canonical(root) == canonical(old):
            return None  # nothing removed yet: the root it recorded is still there
        if j.phase == "cleared" and root is None and not others():
            return None  # a new store's target: empty before its placeholder
        if j.fmt == "v3" and j.phase == "cleared" and isinstance(root, Mapping) and not is_placeholder(root):
            return None  # a Zarr v3 write past its commit point (its zarr.json names no version)
        shows = ("a placeholder of lineage " + rec.lineage if rec is not None else
                 "a placeholder of another write" if is_placeholder(root) else
                 "no root object" if root is None else "a complete root object")
        return f"it records {ours}), but the store's root shows {shows}; {has}"
    if j.fmt == "v3":  # a Zarr v3 append or add: no version record in its root zarr.json to hold it to
        return None
    if c is not None and j.base is not None and c.commit == j.base:
        return None  # built on the committed version
    if c is None and consolidated is not None and j.appends and not (j.new_arrays or j.old_meta) and all(
            _length_in(consolidated, p, r["axis"]) not in (None, r["old"]) for p, r in j.appends.items()):
        return None  # another tool grew every array it records, then consolidated: a recovery keeps them all
    if c is None and j.base is None and consolidated is not None:
        # another tool's consolidated metadata, in step, that the write left as it was: it shows the
        # appended arrays at their old length and none of the added ones
        def length(path: str, axis: int) -> int | None:
            z = consolidated.get(f"{path.strip('/')}/.zarray")
            shape = z.get("shape") if isinstance(z, Mapping) else None
            return shape[axis] if isinstance(shape, list) and 0 <= axis < len(shape) else None

        if all(length(p, r["axis"]) == r["old"] for p, r in j.appends.items()) and \
                not any(f"{p.strip('/')}/.zarray" in consolidated for p in j.new_arrays):
            return None
        return (f"it records {ours}) that the store's consolidated metadata (another tool's) does not show "
                "before it (an appended array at another length, or an added array already there)")
    return f"it records {ours}), but {has}"


# ---------------------------------------------------------------------------------------------
# Recovery
# ---------------------------------------------------------------------------------------------

#: undo(zstore, journal, old_object) removes the chunks an uncommitted write may have written:
#: ``old_object(key)`` gives a metadata object as it was before the write
Undo = Callable[[ZStore, Journal, Callable[[str], Any]], None]


def _old_object(ops: _Ops, journal: Journal, zstore: ZStore) -> Callable[[str], Any]:
    def get(key: str) -> Any:
        if journal.old_meta is not None and key in journal.old_meta:
            return journal.old_meta[key]
        raw, _ = ops.get(key)
        return None if raw is None else parse_json(raw, where=zstore.where(key))
    return get


def foreign_appends(ops: _Ops, journal: Journal) -> dict[str, int | None]:
    """The arrays ``journal``'s append records that another writer or tool grew or changed since:
    path -> their length along the appended axis now (None: no readable ``.zarray``), one batch of
    reads. An array's per-object ``.zarray`` shows the journal's ``old`` length until the write's
    metadata window, and its ``new`` one after (phase "committing": then only with the content the
    journal recorded the write puts, ``new_meta``); any other length or content is a change this
    write cannot prove its own (xarray's ``to_zarr(mode="a")`` takes no claim), so a rollback
    neither removes nor rewrites that array's chunks or metadata."""
    if journal.fmt != "v2" or not journal.appends:
        return {}
    paths = list(journal.appends)
    found: dict[str, int | None] = {}
    for path, (raw, _) in zip(paths, ops.get_many([f"{p.strip('/')}/.zarray" for p in paths]), strict=True):
        r = journal.appends[path]
        try:
            now = json.loads(raw) if raw is not None else None
            n: int | None = int(now["shape"][int(r["axis"])]) if now is not None else None
        except (ValueError, TypeError, KeyError, IndexError):
            now, n = None, None
        written = (journal.new_meta or {}).get(f"{path.strip('/')}/.zarray")
        ours = journal.phase == "committing" and n == r["new"] and \
            (journal.new_meta is None or canonical(now) == canonical(written))
        if n != r["old"] and not ours:
            found[path] = n
    return found


def _kept_words(journal: Journal, foreign: Mapping[str, int | None]) -> str:
    """What a recovery left alone (``foreign_appends``), in words for its report."""
    if not foreign:
        return ""
    each = ", ".join(f"{p.strip('/')} ({'no readable .zarray' if n is None else f'length {n}'}; this write "
                     f"recorded {journal.appends[p]['old']} -> {journal.appends[p]['new']})" for p, n in foreign.items())
    return (f"; kept as another writer or tool left them, untouched (not this write's to undo): {each}")


def _write_objects(ops: _Ops, objects: Mapping[str, Any], root: str) -> None:
    """Write metadata objects (None: delete), the root one last, after the store's fence check (a
    write's claim; as every batch of chunk writes): on every kind of store, a writer taken over
    while stalled changes no metadata."""
    zs = ops.zstore
    zs.check_fence()
    rest = [(k, v) for k, v in objects.items() if k != root]
    puts = [(k, bytes(v) if isinstance(v, bytes | bytearray) else dumps(v)) for k, v in rest if v is not None]
    if puts:
        if isinstance(ops, _LocalOps):
            for k, data in puts:
                ops.put(k, bytes(data))
        else:
            zs.set_many(puts)
    ops.delete([k for k, v in rest if v is None])
    if root in objects:
        v = objects[root]
        if v is None:
            ops.delete([root])
        else:
            ops.put(root, bytes(v) if isinstance(v, bytes | bytearray) else dumps(v))


def recover(zstore: ZStore, state: StoreState, undo: Undo | None, ops: _Ops | None = None, *,
            claim: str | None = None) -> str:
    """Complete or undo the write ``state.journal`` records; returns what was done, in words. The
    caller holds the claim (its journal object has ETag ``claim``, released here when given; a
    taker that goes on writing passes None) and knows that write's writer is gone (or was told to
    go ahead)."""
    ops = ops or ops_for(zstore)
    j = state.journal
    if j is None:
        return _finish_lagging(zstore, state, ops) if _lagging(state) else "nothing to do"
    root = "zarr.json" if j.fmt == "v3" else ".zgroup"
    foreign = {} if j.whole_store else foreign_appends(ops, j)  # (never undone nor overwritten)
    theirs = {f"{p.strip('/')}/{n}" for p in foreign for n in METADATA_NAMES}
    if state.in_journal_commit:
        if j.fmt == "v2" and state.consolidated is not None:
            keys = [root] if j.whole_store else list(j.old_meta or state.consolidated)
            _write_objects(ops, {k: state.consolidated.get(k) for k in {*keys, root} if k not in theirs}, root)
        done = f"rolled forward to version {j.version}" + _kept_words(j, foreign)
    elif j.whole_store and j.phase == "clearing":  # nothing of the old version removed but its root
        if j.old_meta and j.old_meta.get(root) is not None and state.root_placeholder:
            ops.put(root, dumps(j.old_meta[root]))
        done = "dropped the claim of a replacement that had not removed the old version (it is intact)"
    elif j.whole_store and j.phase == "cleared":  # (one that only claimed the target wrote nothing yet)
        keys = [k for k in ops.list("") if k != JOURNAL]
        metadata = [k for k in keys if k.rsplit("/", 1)[-1] in (*METADATA_NAMES, ZMETADATA, "zarr.json")]
        ops.delete(sorted(metadata, key=lambda k: (k.count("/"), k)))  # the root's first: refused from here on
        ops.delete([k for k in keys if k not in set(metadata)])
        done = ("removed the interrupted replacement (the old version had already been removed): the target "
                "is empty; write it again" if j.kind == "replace" else
                "removed the interrupted new store's objects: the target is empty; write it again")
    elif j.whole_store:
        done = "dropped the claim of a write that had not changed anything"  # (a replacement, "claimed")
    else:
        if undo is not None:
            mine = replace(j, appends={p: r for p, r in j.appends.items() if p not in foreign})
            undo(zstore, mine, _old_object(ops, j, zstore))
        if j.old_meta:
            # a root another tool wrote over this write's placeholder is theirs too
            if foreign and not state.root_placeholder and canonical(state.root_obj) != canonical(j.old_meta.get(root)):
                theirs.add(root)
            _write_objects(ops, {k: v for k, v in j.old_meta.items() if k not in theirs}, root)
        elif state.root_placeholder and state.consolidated is not None and root in state.consolidated:
            ops.put(root, dumps(state.consolidated[root]))  # the placeholder landed, the old values not
        done = "rolled back the interrupted write (its chunks removed, its metadata changes undone)" + \
            _kept_words(j, foreign)
    if claim is not None and not release(ops, j, claim):
        raise ConcurrentWriteError(f"{zstore.display}: another writer or repair took the store over while this "
                                   f"one {done}; look again with `zstrings check`.")
    return done


def _lagging(state: StoreState) -> bool:
    """No journal, and the per-object metadata lag behind our committed ``.zmetadata`` (a writer
    fenced out after its commit point, or a root object left as a placeholder)."""
    c, r = state.committed, state.root
    if state.journal is not None or state.fmt != "v2" or c is None or state.consolidated is None or r is None:
        return False
    return r.lineage == c.lineage and (r.commit != c.commit or state.root_placeholder)


def _finish_lagging(zstore: ZStore, state: StoreState, ops: _Ops) -> str:
    """Write every metadata object from ``.zmetadata`` (which lag is not recorded), the root last."""
    assert state.consolidated is not None and state.committed is not None
    _write_objects(ops, dict(state.consolidated), ".zgroup")
    return f"rolled forward to version {state.committed.version}"


# ---------------------------------------------------------------------------------------------
# A write
# ---------------------------------------------------------------------------------------------


class Transaction:
    """One write of a store, committed by the protocol in this module's docstring.

    The API every writer uses (``to_nczarr``, appends, ``to_zarr_v3``; ``migrate`` the same way)::

        with Transaction.begin(zstore, kind, fmt="v2", undo=write.repair.undo, mode="w") as txn:
            # kind: "new" (mode="w-"), "replace" (mode="w"), "append", "add"
            txn.set_base(objects, consolidated_in_step=tree.consolidated)  # append/add: what it read
            txn.record_writes(appends={path: {"axis", "old", "new"}}, new_arrays=[...])  # append/add
            ... write the chunks through zstore ...
            txn.commit(changed_objects)          # append/add; a whole store: commit(all, full=True)

    ``begin`` claims the store (its journal), recovers what a dead writer left, and for the
    whole-store kinds prepares the target (a placeholder root first; replacing, the old objects
    removed). ``inplace=False`` is a target written beside the store and swapped in (local
    directories, zip files): no claim, ``commit`` just writes the objects and ``.zmetadata``.
    ``commit`` takes metadata objects (key -> JSON object, bytes, or None to delete) and writes
    them with the version record, ``.zmetadata`` (Zarr v2) and the root last. A Zarr v3 writer,
    whose root ``zarr.json`` is its own commit point, writes everything itself and calls
    ``finish()``. On an exception (``with``) ``abort()`` undoes the write. While the write lasts a
    thread renews the claim, and the store's every batch of writes checks it (``ZStore.fence``);
    ``txn.record`` is the version the write makes.
    """

    def __init__(self, zstore: ZStore, kind: str, fmt: str, *, inplace: bool, undo: Undo | None) -> None:
        self.zstore = zstore
        self.kind = kind
        self.fmt = fmt
        self.inplace = inplace
        self.undo = undo
        self.ops: _Ops | None = ops_for(zstore) if inplace else None
        self.journal: Journal | None = None
        self.etag: str | None = None
        self.base_meta: dict[str, Any] | None = None
        self.base_etag: str | None = None
        self.record = VersionRecord(new_id(), new_id(), 1)
        self.state: StoreState | None = None  # what the store held when the write began (after its claim)
        self._lost = threading.Event()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._lock = threading.Lock()
        self._done = False
        #: when (time.monotonic, before the request) the claim was last written: claimed or renewed
        self._renewed_at = -float("inf")
        self._fence_after = lock_timeout() / 2
        self._confirm_lock = threading.Lock()
        #: the ETag of the placeholder root this write put: the root it may replace at its end
        self._root_etag: str | None = None

    # --- claim -------------------------------------------------------------------------------
    @classmethod
    def begin(cls, zstore: ZStore, kind: str, *, fmt: str = "v2", inplace: bool = True, undo: Undo | None = None,
              mode: str = "w") -> Transaction:
        """Claim ``zstore`` for a write of ``kind`` (see the class docstring). ``mode`` ("w-" or "w")
        for the whole-store kinds: "w-" refuses a target that is not empty."""
        txn = cls(zstore, kind, fmt, inplace=inplace, undo=undo)
        if not inplace:
            return txn
        txn._claim(mode)
        try:
            if kind in ("new", "replace"):
                txn._prepare_whole(mode)
        except BaseException:
            txn._release()
            raise
        txn._start_renewal()
        zstore.fence = txn._fence  # every later batch of writes through zstore checks the claim first
        return txn

    def _claim(self, mode: str) -> None:
        """Create our journal (create-only), then look at the store (nobody else changes it while we
        hold it). A journal already there: a dead writer's is taken over and its write completed
        or undone first; a live writer's makes this write refuse."""
        ops = self.ops
        assert ops is not None
        zs = self.zstore
        journal = Journal(new_id(), self.kind, self.fmt, this_writer(), "", "", 0)
        state: StoreState | None = None
        for _ in range(5):
            sent = time.monotonic()
            try:
                self.etag = ops.put(JOURNAL, journal.to_bytes(), create=True)
            except CommitConflict:
                try:
                    other = inspect_store(zs, ops)
                except JournalError as e:  # nothing was written: our create-only write lost to it
                    raise JournalError.of(e.found, f"Cannot write to {zs.display}: ") from None
                if other.journal is None:
                    continue  # it ended between our write and our look: try again
                self._refuse_unless_gone(other, mode)  # (a live writer's: wait, whatever it records)
                refuse_foreign(other, zs, f"Cannot write to {zs.display}: ")
                sent = time.monotonic()
                try:
                    self.etag = ops.put(JOURNAL, journal.to_bytes(), match=other.journal_etag)  # one taker wins
                except CommitConflict:
                    continue
                self.journal = journal
                recover(zs, other, self.undo, ops)  # (keeps the journal: now ours, no claim to release)
            self.journal = journal
            self._renewed_at = sent
            sys.audit("xr_zstrings.commit", "claimed")  # (tests stop a writer at each step)
            state = inspect_store(zs, ops)
            if state.journal_etag != self.etag:  # taken over while it stalled right after its claim
                self._lose("its claim was taken over while it was stalled")
            break
        if state is None:
            raise ConcurrentWriteError(f"Cannot write to {zs.display}: other writers keep claiming it; try again.")
        if _lagging(state):
            _finish_lagging(zs, state, ops)
            state = inspect_store(zs, ops)
        self.state = state
        self._set_record(state)
        journal.lineage, journal.commit, journal.version = self.record.lineage, self.record.commit, self.record.version
        journal.base = state.committed.commit if state.committed else None

    def _set_record(self, state: StoreState) -> None:
        """The version this write makes: the next of the committed lineage (append, add), else a new
        lineage (a new store, a replacement, or the first change of a store without our version)."""
        c = state.committed
        if self.kind in ("append", "add") and c is not None and state.root is not None \
                and state.root.lineage == c.lineage:
            self.record = VersionRecord(c.lineage, new_id(), c.version + 1)
        else:
            self.record = VersionRecord(new_id(), new_id(), 1)

    def _refuse_unless_gone(self, state: StoreState, mode: str) -> None:
        """Another write's journal is there: refuse unless its writer is gone (ended, or its claim
        not renewed for the lease)."""
        other = state.journal
        assert other is not None
        if state.writer_gone or state.lease_expired:
            return
        zs = self.zstore
        age = f"{state.journal_age:.0f} s" if state.journal_age is not None else "some time"
        left = max(0.0, lock_timeout() - (state.journal_age or 0.0))
        cls = TargetExistsError if mode == "w-" and self.kind == "new" else ConcurrentWriteError
        extra = " and mode='w-' never overwrites" if cls is TargetExistsError else ""
        raise cls(
            f"Cannot write to {zs.display}: another writer ({describe_writer(other.writer)}, last seen {age} ago) "
            f"is writing it (its claim {JOURNAL!r}){extra}. Nothing was written. Wait for that write to end and "
            f"write again. If that writer was killed, the next write after {left:.0f} s recovers the store by "
            f"itself; `zstrings repair {zs.display} --force` recovers it now (only when you are sure that writer "
            "is not running).")

    def _prepare_whole(self, mode: str) -> None:
        """A new store or a replacement: refuse a non-empty target for "w-"; then (journal phase
        "cleared" first: from here on nothing of an older version is kept) the placeholder root,
        which every reader refuses, and the old objects removed, metadata first."""
        ops, zs = self.ops, self.zstore
        assert ops is not None and self.journal is not None
        root = "zarr.json" if self.fmt == "v3" else ".zgroup"
        existing = _some_objects(zs)
        if existing and mode == "w-":
            raise TargetExistsError(
                f"Cannot write to {zs.display}: it is not empty (found {sorted(existing)[:5]}) and mode='w-' never "
                "overwrites. Pass mode='w' to replace it, or mode='a' with append_dim to append.")
        found = store_root(zs).refusal if existing else None
        if found is not None:  # a prefix of other objects: replacing is for a store's older version
            raise refused(zs.display, found, mode)
        rec = VersionRecord(self.record.lineage, self.record.commit, self.record.version, self.kind)
        placeholder = incomplete_v3_root(rec.as_json()) if self.fmt == "v3" else incomplete_v2_group(rec.as_json())
        if existing:  # the old root recorded: until the old objects go, a rollback puts it back
            raw, _ = ops.get(root)
            self.journal.old_meta = {root: None if raw is None else parse_json(raw, where=zs.where(root))}
            self.journal.phase = "clearing"
            self._put_journal()
            ops.delete([ZMETADATA])  # consolidated readers: no old version to serve any more
        else:  # an empty target: whatever is there later is this write's
            self.journal.phase = "cleared"
            self._put_journal()
        self._root_etag = ops.put(root, placeholder)
        if existing:
            self.journal.phase = "cleared"
            self._put_journal()
            keys = [k for k in ops.list("") if k not in (JOURNAL, root)]
            metadata = [k for k in keys if k.rsplit("/", 1)[-1] in (*METADATA_NAMES, "zarr.json")]
            ops.delete(sorted(metadata, key=lambda k: (k.count("/"), k)))
            ops.delete([k for k in keys if k not in set(metadata)])

    # --- the write ---------------------------------------------------------------------------
    def set_base(self, objects: Mapping[str, Any], *, consolidated_in_step: bool) -> None:
        """The metadata objects (key -> JSON) the write starts from (append, add), as read after the
        claim. When they did not come from our own in-step ``.zmetadata``, that is written first
        (this version, consolidated: the *base*), so that consolidated readers are served the old
        version through the write's metadata window and a rollback restores what readers saw."""
        names = METADATA_NAMES if self.fmt == "v2" else ("zarr.json",)
        self.base_meta = {k: v for k, v in objects.items() if k.rsplit("/", 1)[-1] in names}
        if not self.inplace or self.fmt != "v2":
            return
        ops = self.ops
        assert ops is not None and self.journal is not None and self.state is not None
        exists, etag = self.state.consolidated is not None or self.state.zmetadata_etag is not None, \
            self.state.zmetadata_etag
        self.base_etag = etag
        if consolidated_in_step and exists:
            return
        base = VersionRecord(self.record.lineage, new_id(), self.record.version)
        self.record = VersionRecord(base.lineage, self.record.commit, base.version + 1)
        meta = dict(self.base_meta)
        if ".zgroup" in meta:
            meta[".zgroup"] = with_version(meta[".zgroup"], base)
        try:
            self.base_etag = ops.put(ZMETADATA, consolidated_bytes(meta), create=not exists, match=etag)
        except CommitConflict:
            self._lose(f"{ZMETADATA!r} changed under it")
        j = self.journal
        j.base, j.lineage, j.commit, j.version = base.commit, self.record.lineage, self.record.commit, \
            self.record.version
        self._put_journal()

    def record_writes(self, *, appends: Mapping[str, Mapping[str, int]] | None = None,
                      new_arrays: Sequence[str] = ()) -> None:
        """Before the first chunk write: what an uncommitted write may have left (for a rollback):
        ``appends`` maps an array's path to ``{"axis", "old", "new"}``, ``new_arrays`` lists the
        arrays the write adds."""
        if self.journal is None:
            return
        self.journal.appends.update({k: {n: int(x) for n, x in v.items()} for k, v in (appends or {}).items()})
        self.journal.new_arrays.extend(new_arrays)
        self.journal.phase = "writing"
        self._put_journal()
        sys.audit("xr_zstrings.commit", "writing")
        self._check_unchanged("writing")

    def _check_unchanged(self, step: str, objects: Mapping[str, Any] | None = None) -> None:
        """Refuse to go on (``ConcurrentWriteError``) when another tool (xarray's or zarr-python's
        writer, which take no claim) changed a metadata object this append or add changes (an
        appended array's ``.zarray``, an added one's, every ``.zarray`` in ``objects``: an array
        grown alongside; the root ``.zgroup``/``.zattrs``) or
        ``.zmetadata`` since ``set_base``: one batch of reads. At ``step`` "writing" no chunk of this
        write is written yet, so its journal is emptied first and the rollback deletes nothing; at
        "commit" (before the window) and "window" (once the placeholder root, whose conditional write
        checked the root, is ours: a change during the window) the arrays the other tool changed
        leave the journal, so the rollback never touches them."""
        j, ops = self.journal, self.ops
        if j is None or ops is None or not self.inplace or self.fmt != "v2" or self.base_meta is None or \
                self.kind not in ("append", "add"):
            return
        paths = {f"{p.strip('/')}/.zarray": p for p in [*j.appends, *j.new_arrays]}
        paths.update({k: k.rsplit("/", 1)[0] for k in objects or {} if k.endswith("/.zarray") and k not in paths})
        keys = [*paths, ".zattrs", *([".zgroup"] if step != "window" else [])]
        *got, (_, zm_etag) = ops.get_many([*keys, ZMETADATA])
        changed: dict[str, str] = {}
        for key, (raw, _) in zip(keys, got, strict=True):
            try:
                now = None if raw is None else parse_json(raw, where=self.zstore.where(key))
            except MetadataError:
                now = "unreadable"
            was = self.base_meta.get(key)
            if canonical(now) == canonical(was):
                continue
            if key in paths and isinstance(now, Mapping) and isinstance(was, Mapping):
                changed[key] = f"{key} (shape {now.get('shape')}; this write started from {was.get('shape')})"
            else:
                changed[key] = f"{key} ({'removed' if now is None else 'written' if was is None else 'rewritten'})"
        if zm_etag != self.base_etag:
            changed[ZMETADATA] = f"{ZMETADATA} ({'removed' if zm_etag is None else 'rewritten'})"
        if not changed:
            return
        theirs = {paths[k] for k in changed if k in paths}
        if step == "writing":  # nothing of this write's chunks is written yet: nothing to undo
            j.appends, j.new_arrays, j.phase = {}, [], "claimed"
        else:  # the arrays another tool changed are not this write's to undo
            j.appends = {p: r for p, r in j.appends.items() if p not in theirs}
            j.new_arrays = [p for p in j.new_arrays if p not in theirs]
            gone = {p.strip("/") for p in theirs}
            j.old_meta = {k: v for k, v in (j.old_meta or {}).items() if k.rsplit("/", 1)[0] not in gone}
            if step == "window":  # only the placeholder root is written: a rollback restores only it
                j.old_meta = {k: v for k, v in j.old_meta.items() if k == ".zgroup"}
                j.new_meta, j.phase = None, "writing"
        self._put_journal()
        kept = "" if step == "writing" else (
            "; this write's chunks are removed from the arrays only it changed, and the arrays the other tool "
            "changed are left as that tool wrote them (some of their chunks may hold this write's values)")
        self._stop.set()
        raise ConcurrentWriteError(
            f"Cannot write to {self.zstore.display}: another writer or tool (one that takes no claim, such as "
            f"xarray's to_zarr or zarr-python) changed {', '.join(changed.values())} while this write was under way. "
            f"Nothing of this write was committed and the other tool's change was kept{kept}. Write again: the store "
            "is no longer the version this write started from.")

    def commit(self, objects: Mapping[str, Any], *, root: str = ".zgroup", consolidated: bool = True,
               full: bool = False) -> None:
        """Make ``objects`` (metadata key -> JSON object, bytes, or None to delete) the store's new
        version, in the order of the module docstring. ``full``: ``objects`` are every metadata
        object of the store (a new store, a replacement), else changes to ``set_base``'s.
        ``consolidated``: write ``.zmetadata`` (Zarr v2: the commit point). The root object gets the
        new version record (Zarr v2) and is written last."""
        zs = self.zstore
        objects = {k: (parse_json(bytes(v), where=zs.where(k)) if isinstance(v, bytes | bytearray) else v)
                   for k, v in objects.items()}
        meta: dict[str, Any] = {} if full or self.base_meta is None else dict(self.base_meta)
        for k, v in objects.items():
            if k.rsplit("/", 1)[-1] in METADATA_NAMES:
                if v is None:
                    meta.pop(k, None)
                else:
                    meta[k] = v
        if root == ".zgroup" and ".zgroup" in meta:
            objects[root] = meta[root] = with_version(meta[root], self.record)
        if not self.inplace:  # written beside the target: nobody reads it before the swap
            zs.set_many([(k, dumps(v)) for k, v in objects.items() if k != root and v is not None])
            if consolidated:
                zs.set_many([(ZMETADATA, consolidated_bytes(meta))])
            if objects.get(root) is not None:
                zs.set_many([(root, dumps(objects[root]))])
            self._done = True
            return
        ops = self.ops
        assert ops is not None and self.journal is not None
        whole = self.kind in ("new", "replace")
        if whole:  # (in place, the journal's conditional write below proves the claim is still ours)
            self._check_owner()
        self._check_unchanged("commit", objects)  # (before the window: another tool's change since set_base)
        if not whole:  # the old values (for a rollback) and the window: readers of objects refuse
            self._open_window(objects, root)
        _write_objects(ops, {k: v for k, v in objects.items() if k != root}, root)
        if consolidated and self.fmt == "v2":
            sys.audit("xr_zstrings.commit", "commit")
            # the claim is still ours (renewed first when the writer stalled): the conditional write
            # below proves only that nobody committed since, and a writer taken over after its
            # objects were written would commit a version whose chunks the taker removed
            self._fence()
            try:  # the commit point
                if whole or self.base_etag is None:
                    ops.put(ZMETADATA, consolidated_bytes(meta), create=True)
                else:
                    ops.put(ZMETADATA, consolidated_bytes(meta), match=self.base_etag)
            except CommitConflict:
                self._lose(f"{ZMETADATA!r} changed under it: another writer committed first")
        sys.audit("xr_zstrings.commit", "committed")
        # at once: the root naming the new version, and the claim released (a root left behind is
        # finished by the next writer or repair: .zmetadata says which version is committed). Each
        # only while it is ours (conditional writes): a writer resumed after a takeover leaves the
        # taker's claim and root alone (the taker rolled this committed write forward)
        self._stop_renewal()
        if self.fmt == "v3" and objects.get(root) is not None:
            # Zarr v3 (write.append_v3): the root zarr.json is the commit point, so it lands before
            # the claim goes (a claim released first would leave the arrays grown, the root not)
            self._put_root(root, dumps(objects[root]))
            self._release_claim()
            self._done = True
            return
        done: list[Callable[[], object]] = [self._release_claim]
        if objects.get(root) is not None:
            done.append(lambda: self._put_root(root, dumps(objects[root])))
        ops.both(*done)
        self._done = True

    def _open_window(self, objects: Mapping[str, Any], root: str) -> None:
        """The metadata window of an append or add: the journal records the old values of
        ``objects`` (for a rollback), then the root becomes the placeholder every per-object reader
        refuses."""
        ops = self.ops
        assert ops is not None and self.journal is not None
        old = self.base_meta or {}
        self.journal.old_meta = {k: old.get(k) for k in objects}
        self.journal.new_meta = {k: v for k, v in objects.items() if k != root and isinstance(v, Mapping)}
        self.journal.phase = "committing"
        rec = VersionRecord(self.record.lineage, self.record.commit, self.record.version, self.kind)
        placeholder = incomplete_v2_group(rec.as_json()) if root == ".zgroup" else incomplete_v3_root(rec.as_json())
        # the journal first (a conditional write: the claim is still ours, and its lease starts
        # again), then the placeholder; only over the root this write started from: a root
        # changed since (a writer that took the store over while this one stalled, another
        # tool) is not ours to replace
        self._put_journal()
        was = self.state.root_etag if self.state is not None else None
        if root == "zarr.json" and isinstance(objects.get(root), Mapping) and objects[root].get("consolidated_metadata"):
            # a Zarr v3 root holding the consolidated metadata (write.append_v3): every reader of it
            # is served the old version until it is replaced, the commit point; no placeholder
            self._root_etag = was
            sys.audit("xr_zstrings.commit", "window")
            return
        lost = object()
        try:
            put: object = ops.put(root, placeholder, match=was) if was else ops.put(root, placeholder, create=True)
        except CommitConflict:
            put = lost
        if put is lost:  # nothing of the metadata changed: a rollback must not restore any of it
            self.journal.old_meta, self.journal.phase = None, "writing"
            self._put_journal()
            self._lose(f"its root object {root!r} changed under it (another writer or tool wrote it)")
        self._root_etag = cast("str | None", put)
        sys.audit("xr_zstrings.commit", "window")
        self._check_unchanged("window", objects)  # (another tool's change since set_base, the window included)

    def _put_root(self, root: str, data: bytes) -> None:
        """The root object naming the committed version, only over this write's placeholder."""
        ops = self.ops
        assert ops is not None
        with contextlib.suppress(CommitConflict):  # replaced since: a taker finished this version
            ops.put(root, data, match=self._root_etag) if self._root_etag else ops.put(root, data)

    def _stop_renewal(self) -> None:
        """Stop the claim's renewal thread and wait for it: a renewal in flight must not race the
        release (a renewal after it would put the claim back)."""
        self._stop.set()
        if self._renewer is not None and self._renewer is not threading.current_thread():
            self._renewer.join()

    def _release_claim(self) -> bool:
        """Release this write's claim while it is still ours (``release``); False when it was taken
        over (then it is the taker's and stays)."""
        self._stop_renewal()
        if self.ops is None or self.journal is None:
            return False
        with self._lock:
            proven = not self._lost.is_set() and time.monotonic() - self._renewed_at < self._fence_after
            ok = release(self.ops, self.journal, self.etag, proven=proven)
            if ok:
                self.etag = None
            else:
                self._lost.set()
            return ok

    def _lose(self, why: str) -> NoReturn:
        self._stop.set()
        raise ConcurrentWriteError(
            f"Cannot commit the write to {self.zstore.display}: {why}. This write was not committed: readers "
            "keep the version another writer made. Write again (the data you passed was not stored).")

    def _check_owner(self) -> None:
        """Refuse to go on when the claim was taken over (a stalled writer: see ``_start_renewal``)."""
        ops = self.ops
        assert ops is not None
        if self._lost.is_set():
            self._lose("its claim was taken over while it was stalled")
        with self._lock:
            _, etag = ops.get(JOURNAL)
            if etag != self.etag:
                self._lost.set()
        if self._lost.is_set():
            self._lose("its claim was taken over while it was stalled")

    def _fence(self) -> None:
        """Before every batch of writes through the store (``ZStore.fence``): refuse to go on when
        the claim was taken over (the renewal thread found it), and renew the claim first when it
        was last written more than half the lease ago (the writer stalled, or its renewal thread
        did). A taker needs the claim unrenewed for the whole lease, so a batch that starts here
        has at least half the lease before anyone may take the store over. The renewal thread
        writes the claim every quarter lease, so a write that does not stall pays no request here.

        A renewal rather than a read of the journal: it confirms the claim (``If-Match`` its ETag)
        at the same cost and also extends the lease, where a read would leave a writer whose
        renewal thread is starved on a lease that keeps running out."""
        if self._lost.is_set():
            self._lose("its claim was taken over while it was stalled")
        if time.monotonic() - self._renewed_at > self._fence_after:
            self._confirm()

    def _confirm(self) -> None:
        """Renew the claim now (one conditional write), unless another thread just did."""
        with self._confirm_lock:
            if time.monotonic() - self._renewed_at > self._fence_after:
                self._put_journal()
        if self._lost.is_set():
            self._lose("its claim was taken over while it was stalled")

    def _put_journal(self) -> None:
        ops = self.ops
        assert ops is not None and self.journal is not None
        with self._lock:
            self.journal.writer["renewed"] = time.time()
            sent = time.monotonic()
            try:
                self.etag = ops.put(JOURNAL, self.journal.to_bytes(), match=self.etag)
            except CommitConflict:
                self._lost.set()
            else:
                self._renewed_at = sent
        if self._lost.is_set():
            self._lose("its claim was taken over while it was stalled")

    def _start_renewal(self) -> None:
        period = max(1.0, min(lock_timeout() / 4, 60.0))

        def run() -> None:
            while not self._stop.wait(period):
                try:
                    self._put_journal()
                except ConcurrentWriteError:
                    return
                except Exception:  # noqa: BLE001,S112 - a failed renewal is retried; the commit checks ownership
                    continue

        self._renewer = threading.Thread(target=run, name="zstrings-claim", daemon=True)
        self._renewer.start()

    def _unfence(self) -> None:
        if self.zstore.fence == self._fence:
            self.zstore.fence = None

    def finish(self) -> None:
        """End the write: the claim is released while it is ours (the v3 writer, whose root
        zarr.json is its commit point, calls it after writing that)."""
        sys.audit("xr_zstrings.commit", "committed")
        self._unfence()
        self._release_claim()
        self._done = True

    def _release(self) -> None:
        self._unfence()
        with contextlib.suppress(Exception):
            self._release_claim()

    def abort(self) -> None:
        """Undo a write that failed (an exception, not a kill): as a recovery would."""
        self._stop.set()
        if self._done or not self.inplace or self.journal is None or self._lost.is_set():
            return
        assert self.ops is not None
        self._stop_renewal()
        state = inspect_store(self.zstore, self.ops)
        if state.journal is None or state.journal.txn != self.journal.txn or state.journal_etag != self.etag:
            return  # not ours any more: the taker undoes or completes it
        recover(self.zstore, state, self.undo, self.ops, claim=self.etag)
        self.etag = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        if et is not None:
            with contextlib.suppress(Exception):
                self.abort()
        self._stop.set()
        self._unfence()


@contextlib.contextmanager
def begun(zstore: ZStore, kind: str, **kw: Any) -> Iterator[Transaction]:
    """``Transaction.begin`` as a context: on an exception the write is undone."""
    txn = Transaction.begin(zstore, kind, **kw)
    with txn:
        yield txn
