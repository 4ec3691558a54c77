"""Conditional writes on one store, the few operations the commit protocol (``commit``) needs,
behind ``ZStore``'s ``get_tagged``, ``put_if``, ``delete_keys``, ``list_keys`` and ``age``.

One class a kind of store: object storage through obstore (``PutMode`` create / update-with-ETag
where the server honours them, probed once per server), a local folder (create-only by hard link,
compare-and-swap under an ``flock`` of the folder), any other zarr-python ``Store`` (read, then
write: not atomic). Below ``zstore``, which imports it: what of a ``ZStore`` the operations use is
the protocol ``Keyed`` here, so io/ has no import circle.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol, cast

from ..errors import ConcurrentWriteError, ConditionalWriteWarning, user_stacklevel
from .store_errors import mapped_errors

__all__ = ["CommitConflict", "Conditional", "Keyed", "at_once", "conditional_for", "lock_timeout", "partial_name",
           "some_objects"]


class Keyed(Protocol):
    """What of a ``ZStore`` the operations here use (``ZStore`` is one)."""

    store: Any
    prefix: str
    display: str

    def full_key(self, key: str) -> str: ...
    def where(self, key: str) -> str: ...
    def probe(self) -> BaseException | None: ...
    def get_bytes(self, key: str) -> bytes | None: ...
    def set_many(self, items: Iterable[tuple[str, bytes]], *, fenced: bool = True) -> None: ...
    def _count(self, n: int = 1) -> None: ...


def lock_timeout() -> float:
    """Seconds a writer waits for another writer of the same target (``XR_ZSTRINGS_LOCK_TIMEOUT``)."""
    try:
        return float(os.environ.get("XR_ZSTRINGS_LOCK_TIMEOUT", "600"))
    except ValueError:
        return 600.0


def partial_name(name: str) -> str:
    """The temporary file an object ``name`` is written to before it is renamed over the object
    (``_LocalConditional.put``): ``<name>.<8 hex digits>.partial`` (``atomic.TEMPORARY`` matches exactly these)."""
    return f"{name}.{uuid.uuid4().hex[:8]}.partial"


def at_once(*calls: Callable[[], Any]) -> list[Any]:
    """Run independent operations at once (one round trip for all on object storage)."""
    if len(calls) == 1:
        return [calls[0]()]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(calls)) as pool:
        return [f.result() for f in [pool.submit(c) for c in calls]]


class CommitConflict(Exception):
    """A create-only or conditional write lost: someone else wrote the object first (internal to
    the protocol: writers turn it into ``ConcurrentWriteError``)."""


class Conditional:
    """The few operations the protocol needs, on one store. ``etag`` is whatever identifies the
    object's current content (an S3 ETag; locally inode, time and size; elsewhere a hash)."""

    def __init__(self, zstore: Keyed) -> None:
        self.zstore = zstore

    def get(self, key: str) -> tuple[bytes | None, str | None]:
        raise NotImplementedError

    def get_many(self, keys: Sequence[str]) -> list[tuple[bytes | None, str | None]]:
        """``get`` of several keys (at once where requests cost a round trip)."""
        return [self.get(k) for k in keys]

    def age(self, key: str) -> float | None:
        """Seconds since ``key`` was last written, by the server's clock; None where the store keeps
        no clock of its own (the caller goes by the journal's record)."""
        return None

    def put(self, key: str, data: bytes, *, create: bool = False, match: str | None = None) -> str | None:
        raise NotImplementedError

    def delete(self, keys: Sequence[str]) -> None:
        raise NotImplementedError

    def put_whole(self, items: Sequence[tuple[str, bytes]]) -> None:
        """Write objects unconditionally, each whole (``ZStore.set_many``, after its fence check)."""
        self.zstore.set_many(items)

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


class _ObstoreConditional(Conditional):
    """Object storage through obstore: ``PutMode`` create / update-with-ETag where the server
    honours ``If-None-Match`` / ``If-Match`` (detected once per server, ``_honours_conditions``)."""

    def __init__(self, zstore: Keyed) -> None:
        super().__init__(zstore)
        self.obj = cast(Any, zstore.store).store  # (an ObjectStore: its obstore store)

    @cached_property
    def conditional(self) -> bool:
        """Whether the server honours the conditions: probed at the first write that has one."""
        return _honours_conditions(self)

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


class _LocalConditional(Conditional):
    """A local directory, changed in place under the target's writer lock: every object is written
    to a temporary file and renamed over the old one (readers see either, never a torn object)."""

    def __init__(self, zstore: Keyed) -> None:
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

    def put_whole(self, items: Sequence[tuple[str, bytes]]) -> None:
        """Each renamed over its object (``put``): a reader never sees one torn."""
        for k, data in items:
            self.put(k, bytes(data))

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


class _StoreConditional(Conditional):
    """Any other zarr-python Store: create-only through ``set_if_not_exists`` (atomic where the
    store makes it so), compare-and-swap by reading first (not atomic: documented)."""

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


def some_objects(zs: Keyed, n: int = 5) -> list[str]:
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


def conditional_for(zstore: Keyed) -> Conditional:
    """The protocol's operations on ``zstore``'s kind of store."""
    from zarr.storage import LocalStore, ObjectStore

    store = zstore.store
    if type(store) is ObjectStore and type(getattr(store, "store", None)).__module__.startswith("obstore"):
        return _ObstoreConditional(zstore)
    if type(store) is LocalStore:
        return _LocalConditional(zstore)
    return _StoreConditional(zstore)


_CONDITIONS: dict[tuple[str, str], bool] = {}
_CONDITIONS_LOCK = threading.Lock()


def _honours_conditions(ops: _ObstoreConditional) -> bool:
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
        probe = ops._path(f".zstrings-probe-{uuid.uuid4().hex[:16]}")

        def put_refused(mode: Any) -> bool:
            try:
                obstore.put(ops.obj, probe, b"2", mode=mode)
            except (obstore.exceptions.AlreadyExistsError, obstore.exceptions.PreconditionError):
                return True
            return False

        with mapped_errors(f"Could not write to {ops.zstore.display}", ops.zstore.probe):
            obstore.put(ops.obj, probe, b"1", mode="create")
            # a second create-only write and one whose If-Match ETag is stale must both be refused
            honours = all(at_once(lambda: put_refused("create"), lambda: put_refused({"e_tag": '"stale-etag"'})))
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

