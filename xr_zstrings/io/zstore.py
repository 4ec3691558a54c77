"""``ZStore``: the wrapper every read and write of the package goes through.

A zarr-python store plus the dataset's root prefix. It fetches keys concurrently through
zarr-python's async store API (obstore's directly under zarr's ``ObjectStore``) and counts its
requests, serves Zarr v2 metadata from consolidated metadata (when ``commit.consolidated_view``
says it is a whole, current version), ties chunk reads to the version of a local store whose
metadata were read (appends in place keep it; a replacement does not), and refuses writes that would
leave the store through a symbolic link (``refuse_links`` checks a whole tree before a change), and
does the commit protocol's create-only and compare-and-swap writes (``put_if`` and its kin, each kind
of store its own way: ``conditional``). Turning a path or URL into one is ``store.open_store``'s job.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, cast

from zarr.abc.store import RangeByteRequest, Store, SuffixByteRequest
from zarr.buffer import cpu, default_buffer_prototype
from zarr.storage import LocalStore, StorePath
from zarr.storage import ObjectStore as _ObjectStore

from ..errors import StoreReplacedError, ZStringsError
from ..formats.nczarr import ATTRIBUTE_OBJECTS, parse_json
from ..scratch import ThreadScratch
from ..zarr_compat import sync
from .conditional import Conditional, conditional_for, some_objects
from .redact import redact
from .runtime import fork_unsafe_runtime, using_native_store, using_runtime
from .store_errors import mapped_errors

__all__ = ["ByteRange", "ObjectChanged", "RangeRead", "ZStore", "make_parents", "refuse_links", "refuse_links_on"]

# Many small requests are latency-bound; cap how many are in flight at once. Chunks (large, bandwidth-
# bound) keep a moderate cap; metadata objects are a few hundred bytes each and a store without
# consolidated metadata has two per variable (NCZarr: .zarray and .zattrs), so all of one tree level
# go out together: opening 1,000 variables costs a few round trips, not one per 64 objects
# (benchmarks/s3_open.py, tests/io/test_s3.py::test_open_wide_store_round_trips). HTTP/1.1 object
# stores need one connection per request in flight; 512 stays well inside the usual 1024-file limit.
_MAX_CONCURRENCY = 64
_METADATA_CONCURRENCY = 512
# an object read with the synchronous GetResult.bytes() once its headers are in (see _fetcher):
# well inside the 10 segments (~14 kB) a new TCP connection's server sends in its first flight
_SYNC_BODY = 8192
# what zarr's LocalStore and ObjectStore read as a missing key (None)
_MISSING = (FileNotFoundError, IsADirectoryError, NotADirectoryError)
# Local chunks read with ``scratch=True`` go into one reused buffer per thread instead of a fresh
# bytes object each: a fresh 32 MB object costs a page fault per 4 KiB every chunk once dask's
# workers return freed memory to the system (MALLOC_TRIM_THRESHOLD_=65536; measured:
# docs/performance.md, "Measured notes behind the code"). Groups larger than 64 MiB get fresh memory on huge pages
# (``ThreadScratch.take``; a thread keeps at most 64 MiB).
_CHUNK_SCRATCH = ThreadScratch(64 << 20)

#: part of one object, as a slice of its bytes: ``(key, start, stop)`` is ``[start:stop]`` (fewer
#: bytes where the object ends first); ``(key, -n, None)`` is its last ``n`` bytes (all of it when shorter)
ByteRange = tuple[str, int, "int | None"]


class RangeRead(NamedTuple):
    """What a ranged read got: the bytes, the object's version and its size (each None when the
    store does not say)."""

    data: Any
    #: what changes when the object is replaced: S3's ETag, a local file's (inode, mtime, size)
    version: Any
    size: int | None


class ObjectChanged(Exception):
    """A ranged read found the object replaced since the version the caller asked for (``key``):
    what the caller derived from the older version (a shard's index) is stale; read it again."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


#: NCZarr 1.0's metadata objects: not Zarr keys, which a store holding only Zarr keys refuses to be
#: asked for (icechunk's InvalidInputError, "invalid zarr key format") instead of answering missing
_NON_ZARR_KEYS = (".nczarr", ".nczgroup", ".nczvar", ".nczarray", ".nczattr", ".nczattrs")


def _refused_non_zarr_key(key: str, e: BaseException) -> bool:
    """Whether ``e`` is a Zarr-only store refusing one of NCZarr 1.0's keys: it cannot hold one,
    so the key is missing (asked for in the first batch of every open, before the format is known)."""
    return key.rsplit("/", 1)[-1] in _NON_ZARR_KEYS and isinstance(e, ValueError) and \
        type(e).__name__ == "InvalidInputError"


#: beside a local Zarr v3 store's root ``zarr.json``: the lineage our last in-place commit kept
#: (``ZStore.keep_lineage``), since a Zarr v3 root has no room for our version record
LINEAGE_NOTE = ".zstrings-lineage"

class ZStore:
    """A zarr-python store plus a root prefix; every key here is relative to the dataset root.

    ``requests`` counts the requests made through this object (one per object fetched, written or
    listed; metadata served from consolidated metadata costs none), so a caller can see what an open
    or a read cost: ``ds.encoding["zstrings_requests"]`` holds the count an open took.
    """

    def __init__(self, store: Store | Any, *, prefix: str = "", display: str | None = None,
                 modes: frozenset[str] = frozenset(), remote: bool = False) -> None:
        self.store = store
        self.prefix = prefix.strip("/")
        self.display = redact(display or repr(store))  # every message names the store by this
        self.modes = modes
        self.remote = remote  # object storage: requests are costly, consolidated metadata is trusted
        # requests go through obstore or icechunk, which cannot run in a process forked after they
        # ran; or may complete from native threads (any store neither zarr-python's nor ours), to
        # be let finish before exit (io/runtime.py)
        self.runtime = fork_unsafe_runtime(store)
        self.native = self.runtime is not None or not type(store).__module__.startswith(("zarr.", "xr_zstrings."))
        self.requests = 0
        self._lock = threading.Lock()
        self._consolidated: dict[str, Any] | None = None
        # a LocalStore is read directly once zarr has opened it (its first get: root checked)
        self._local_direct = False
        self.pinned_version: tuple[int, int] | None = None  # see pin_version
        self.pinned_lineage: str | None = None
        self.read_lineage: str | None = None  # the lineage of the metadata last read (open_tree)
        self.read_v3_beside = False  # the metadata last read (open_tree) had a root zarr.json beside them
        #: when a dict: every metadata object get_json_many returns is recorded here by key (a
        #: writer's record of the version it read, see commit.Transaction.set_base)
        self.recorded: dict[str, Any] | None = None
        #: called before every batch of writes (``set_many``, ``check_fence``): an in-place write's
        #: transaction installs its ownership check here (``commit.Transaction``); not pickled
        self.fence: Callable[[], None] | None = None
        self._conditional: Conditional | None = None  # the store kind's conditional writes (see put_if)

    def __repr__(self) -> str:
        return f"ZStore({self.display!r})"

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_lock", None)
        state["requests"] = 0  # a copy (e.g. on a dask worker) counts its own requests
        state["fence"] = None  # a transaction's threads stay in its process (docs/reliability.md)
        state["_conditional"] = None  # (made again where it is used)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _before_requests(self) -> None:
        """Requests through obstore or icechunk are refused in a process forked after they were used
        there; a native store's threads are let finish before the interpreter exits (io/runtime)."""
        if self.runtime is not None:
            using_runtime(self.runtime, self.display)
        elif self.native:
            using_native_store()

    def _count(self, n: int = 1) -> None:
        with self._lock:
            self.requests += n

    def version_token(self) -> tuple[int, int] | None:
        """For a local directory store: what changes when a writer swaps a new version in (the
        directory's inode and change time; not the device number, which differs between the
        machines that mount one network file system); None for other stores."""
        if type(self.store) is not LocalStore:
            return None
        try:
            st = os.stat(Path(self.store.root) / self.prefix if self.prefix else self.store.root)
        except OSError:
            return None
        return (st.st_ino, st.st_ctime_ns)

    def pin_version(self, token: tuple[int, int] | None) -> None:
        """Tie later chunk reads to the version whose metadata were read (``token`` from
        ``version_token`` before that read, and the lineage ``read.tree.open_tree`` found in its
        root's version record, ``commit.VersionRecord``): see ``check_version``."""
        self.pinned_version = token
        self.pinned_lineage = self.read_lineage if token is not None else None

    def lineage_now(self) -> str | None:
        """The lineage the local store's root ``.zgroup`` names now (also a placeholder's). A root
        without our version record (another tool's store) stands for its lineage itself, by its file
        identity (``"zgroup:<inode>-<mtime>-<size>"``): a replacement writes it again (xarray's
        mode="w" removes the folder), an in-place migration (zarr.json beside it) leaves it."""
        from .consolidated import version_of

        root = Path(cast(Any, self.store).root)
        try:
            with open(root / self.full_key(".zgroup"), "rb") as f:  # (a LocalStore)
                st = os.fstat(f.fileno())
                rec = version_of(parse_json(f.read(), where=self.where(".zgroup")))
        except FileNotFoundError:
            return self._v3_lineage(root)
        except (OSError, ZStringsError):
            return None
        return rec.lineage if rec is not None else f"zgroup:{st.st_ino}-{st.st_mtime_ns}-{st.st_size}"

    def _v3_lineage(self, root: Path) -> str | None:
        """A local Zarr v3 store's lineage: its root ``zarr.json``'s file identity, carried over our
        own in-place commits by ``LINEAGE_NOTE`` (which names the roots that continue it, by their
        hash). Any other rewrite of the root (xarray's ``mode="w"`` keeps the folder and may even
        keep its inode number) is a new lineage, so a lazy reader is told, never served new chunks."""
        import hashlib
        import json

        try:
            with open(root / self.full_key("zarr.json"), "rb") as f:
                st = os.fstat(f.fileno())
                digest = hashlib.sha256(f.read()).hexdigest()
        except OSError:
            return None
        try:
            note = json.loads((root / self.full_key(LINEAGE_NOTE)).read_bytes())
            if digest in note["roots"] and isinstance(note["lineage"], str):
                return str(note["lineage"])
        except (OSError, ValueError, KeyError, TypeError):
            pass  # (no note, or not ours to trust: the root's own identity)
        return f"zarrjson:{st.st_ino}-{st.st_mtime_ns}-{st.st_size}"

    def keep_lineage(self, new_root: bytes) -> None:
        """Before an in-place commit writes ``new_root`` as a local Zarr v3 store's root: note that it
        continues the lineage there now, so lazy readers of the older version keep reading (an
        append keeps every chunk they can reach). The note names the old root too, so a reader
        between the note and the root sees the same lineage; a kill in between leaves it harmless."""
        import hashlib
        import json

        if type(self.store) is not LocalStore:
            return
        root = Path(cast(Any, self.store).root)
        lineage = self.lineage_now()
        try:
            old = (root / self.full_key("zarr.json")).read_bytes()
        except OSError:
            return
        if lineage is None:
            return
        note = {"lineage": lineage, "roots": [hashlib.sha256(old).hexdigest(), hashlib.sha256(new_root).hexdigest()]}
        self.put_whole([(LINEAGE_NOTE, json.dumps(note).encode())])

    def same_version(self, token: tuple[int, int] | None, lineage: str | None) -> bool:
        """Whether the local store still holds the version of ``token``/``lineage``: the same
        directory, unchanged, or changed in place by appends or added variables (same lineage: the
        version's chunks are unchanged), never replaced (a new directory or a new lineage)."""
        now = self.version_token()
        if now == token:
            return True
        return (lineage is not None and now is not None and token is not None and now[0] == token[0]
                and self.lineage_now() == lineage)

    def check_version(self) -> None:
        """After a chunk read: refuse it if a writer replaced the local store since the metadata were
        read (the chunks may then be the new version's, or gone).

        A replacement swaps a new directory in (a new inode) or, changed in place, starts a new
        lineage; a read that ends with the pinned version in place began and ended in it (an append
        in place keeps that version's chunks and values: the lazy reader keeps reading).
        """
        pinned = self.pinned_version
        if pinned is None or self.version_token() == pinned:
            return
        if self.same_version(pinned, self.pinned_lineage):
            self.pinned_version = self.version_token()
            return
        raise StoreReplacedError(
            f"{self.display} was replaced by another writer (mode='w') after it was opened: its chunks no "
            "longer belong to the metadata read then. Open it again (xr.open_dataset(..., engine='zstrings')) "
            "to read the new version."
        )

    def full_key(self, key: str) -> str:
        key = key.strip("/")
        return f"{self.prefix}/{key}" if self.prefix else key

    def where(self, key: str) -> str:
        """A human-readable location for error messages: the store and the key."""
        return f"{self.display} key {key.strip('/')!r}"

    # --- consolidated metadata ---------------------------------------------------------------
    @property
    def read_mode(self) -> str:
        """How the URL's netcdf-c mode asks for the store to be read: ``"zarr"`` (``#mode=zarr``:
        pure Zarr, NCZarr metadata ignored as netcdf-c's zarr mode ignores it), ``"nczarr"``, or
        ``"auto"`` (no mode: NCZarr metadata used where present)."""
        if "nczarr" in self.modes:
            return "nczarr"
        return "zarr" if "zarr" in self.modes else "auto"

    def use_consolidated(self, zmetadata: Any, *, force: bool = False) -> bool:
        """Serve Zarr v2 metadata keys from a ``.zmetadata`` object instead of the store.

        On object storage, where every request costs a round trip; elsewhere only with ``force``
        (``read.tree`` passes it when ``commit.consolidated_view`` chose the consolidated version,
        or for a store whose root object is missing). Returns whether it is used.
        """
        if not (self.remote or force) or not isinstance(zmetadata, dict):
            return False
        meta = zmetadata.get("metadata")
        if zmetadata.get("zarr_consolidated_format") != 1 or not isinstance(meta, dict):
            return False
        self._consolidated = {str(k).strip("/"): v for k, v in meta.items()}
        return True

    def drop_consolidated(self) -> None:
        """Stop serving metadata from the ``.zmetadata`` ``use_consolidated`` took: read the objects."""
        self._consolidated = None

    @property
    def consolidated(self) -> dict[str, Any]:
        """The consolidated metadata objects in use (key -> JSON), empty when none are."""
        return self._consolidated or {}

    def _from_consolidated(self, key: str) -> tuple[bool, Any]:
        """(answered, value) for a metadata key when consolidated metadata is in use."""
        if self._consolidated is None:
            return False, None
        key = key.strip("/")
        if key.rsplit("/", 1)[-1] not in (".zarray", ".zattrs", ".zgroup"):
            return False, None
        return True, self._consolidated.get(key)

    # --- reads ----------------------------------------------------------------------------
    def _fetcher(self, copy: bool = True) -> Any:
        """The coroutine function that fetches one key (bytes, or None when it does not exist;
        ``copy=False``: obstore's own immutable buffer is handed on, not copied into bytes).

        On object storage (``zarr.storage.ObjectStore``, whose public ``store`` attribute is the
        obstore store it wraps, in zarr 3.1.6 as in 3.4) obstore is called directly, as
        ``ObjectStore.get`` would call it, with the same missing-key exceptions read as None: the
        client's CPU per request is what bounds a wide open on a fast server. Each obstore
        coroutine completes through a callback from a blocking-pool thread of obstore's runtime
        (a new Python thread state, a GIL handoff and an event loop wake-up: most of the client's
        CPU per GET), so an object small enough to have arrived with its headers is read with the
        synchronous ``GetResult.bytes()``: one completion per GET instead of two (the client CPU it
        saves: docs/performance.md). A larger object (more than a new connection's first TCP window) is awaited as
        ``bytes_async``, so the event loop never waits on the network."""
        obj: Any = getattr(self.store, "store", None)
        if type(self.store) is _ObjectStore and type(obj).__module__.startswith("obstore"):
            import obstore

            get_async = obstore.get_async

            async def fetch(key: str) -> Any:  # bytes, obstore's Bytes (a buffer), or None
                try:
                    resp = await get_async(obj, key)
                    start, end = resp.range
                    data = resp.bytes() if end - start <= _SYNC_BODY else await resp.bytes_async()
                except _MISSING:
                    return None
                return bytes(data) if copy else data

            return fetch
        store, prototype = self.store, default_buffer_prototype()

        async def fetch_store(key: str) -> bytes | None:
            try:
                buf = await store.get(key, prototype=prototype)
            except Exception as e:
                if _refused_non_zarr_key(key, e):
                    return None
                raise
            return None if buf is None else buf.to_bytes()

        return fetch_store

    async def _get_many(self, keys: Sequence[str], limit: int = _MAX_CONCURRENCY,
                        copy: bool = True) -> list[Any]:
        fetch = self._fetcher(copy)
        # a Store the caller made but never opened (zarr 3.1's ZipStore.get fails on its missing lock):
        # opened first, as zarr-python's own functions open one (a no-op once open; io.zip's remote
        # zip is this package's own reader, no zarr Store)
        if isinstance(self.store, Store):
            await StorePath.open(self.store, path="")
        return await self._gather([(fetch, (self.full_key(k),)) for k in keys], limit)

    async def _gather(self, calls: Sequence[tuple[Any, tuple]], limit: int) -> list[Any]:
        """Await ``fn(*args)`` for each call, at most ``limit`` at a time, results in order (each a
        request: counted). ``limit`` workers take the calls in turn (no semaphore, one task per
        worker, not per call); the first error cancels the requests still in flight and is raised."""
        out: list[Any] = [None] * len(calls)
        todo = iter(range(len(calls)))
        self._count(len(calls))

        async def worker() -> None:
            for i in todo:
                fn, args = calls[i]
                out[i] = await fn(*args)

        tasks = [asyncio.ensure_future(worker()) for _ in range(min(limit, len(calls)))]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        return out

    def get_bytes(self, key: str) -> bytes | None:
        """The object's bytes, or ``None`` when the key does not exist."""
        return self.get_many([key])[0]

    def get_many(self, keys: Sequence[str], *, limit: int = _MAX_CONCURRENCY,
                 scratch: bool = False) -> list[Any]:
        """Fetch many keys concurrently (at most ``limit`` requests in flight); missing keys come
        back as ``None``.

        ``scratch=True``: local files may come back as views of this thread's scratch buffer,
        valid only until the thread's next scratch read (for bytes consumed right away); objects
        from object storage as obstore's buffer (bytes-like, immutable), not copied into ``bytes``.
        """
        if not keys:
            return []
        if self._local_direct:
            return self._get_many_local(keys, scratch)
        self._before_requests()
        with mapped_errors(f"Could not read from {self.display}", self.probe):
            out = sync(self._get_many(list(keys), limit, copy=not scratch))
        # zarr opened the store on that get (Store._ensure_open): read it directly from now on
        self._local_direct = type(self.store) is LocalStore
        return out

    def _get_many_local(self, keys: Sequence[str], scratch: bool = False) -> list[Any]:
        """LocalStore.get without the event loop round trip and its extra copy of each object
        (same results: a missing file, a directory or a path through a file reads as None), which
        is faster for small objects (docs/performance.md). ``scratch``: see ``get_many``."""
        root = cast(Any, self.store).root  # (a LocalStore)
        out: list[Any] = []
        used = 0  # scratch bytes handed out so far
        with mapped_errors(f"Could not read from {self.display}"):
            for k in keys:
                self._count()
                try:
                    with open(root / self.full_key(k), "rb") as f:
                        size = os.fstat(f.fileno()).st_size if scratch else 0
                        if not size:
                            out.append(f.read())
                            continue
                        view, after = _CHUNK_SCRATCH.take(used, size)
                        got = f.readinto(view)
                        rest = f.read()  # the file changed since fstat: keep what it holds now
                        if got < size or rest:
                            out.append(bytes(view[:got]) + rest)
                            continue
                        out.append(view)
                        used = after
                except _MISSING:
                    out.append(None)
        return out

    def get_json_many(self, keys: Sequence[str]) -> list[Any]:
        """Fetch and decode metadata objects concurrently; missing ones are ``None``."""
        out: list[Any] = [None] * len(keys)
        fetch: list[int] = []
        for i, k in enumerate(keys):
            answered, value = self._from_consolidated(k)
            if answered:
                out[i] = value
            else:
                fetch.append(i)
        raws = self.get_many([keys[i] for i in fetch], limit=_METADATA_CONCURRENCY)
        for i, raw in zip(fetch, raws, strict=True):
            out[i] = None if raw is None else parse_json(
                raw, where=self.where(keys[i]), attributes=keys[i].rsplit("/", 1)[-1] in ATTRIBUTE_OBJECTS)
        if self.recorded is not None:
            for k, v in zip(keys, out, strict=True):
                if v is not None and k.rsplit("/", 1)[-1] in (".zgroup", ".zattrs", ".zarray"):
                    self.recorded[k.strip("/")] = v
        return out

    # --- ranged reads (parts of shards) -------------------------------------------------------
    def get_ranges(self, ranges: Sequence[ByteRange], *, versions: Sequence[Any] | None = None,
                   scratch: bool = False) -> list[RangeRead | None]:
        """Parts of objects, concurrently (one request each); a missing object reads as None.

        ``versions[i]`` (a ``RangeRead.version`` an earlier read of the same key returned, or None):
        the part must come from that version of the object, else ``ObjectChanged`` is raised (on S3
        the server checks it: ``If-Match``; local files: their identity; other zarr-python stores
        cannot tell, and are read unchecked). ``scratch``: as ``get_many``'s.
        """
        if not ranges:
            return []
        vers = list(versions) if versions is not None else [None] * len(ranges)
        if self._local_direct:
            with mapped_errors(f"Could not read from {self.display}"):
                return self._get_ranges_local(ranges, vers, scratch)
        self._before_requests()
        fetch = self._range_fetcher()
        calls = [(fetch, (self.full_key(k), a, b, v)) for (k, a, b), v in zip(ranges, vers, strict=True)]
        try:
            with mapped_errors(f"Could not read from {self.display}", self.probe):
                return sync(self._gather(calls, _MAX_CONCURRENCY))
        except ObjectChanged as e:
            raise ObjectChanged(self._relative(e.key)) from None

    def _relative(self, full: str) -> str:
        return full[len(self.prefix) + 1:] if self.prefix and full.startswith(self.prefix + "/") else full

    def _range_fetcher(self) -> Any:
        """The coroutine function reading one range (see ``_fetcher``): obstore directly, with the
        version as ``If-Match``, else the zarr-python store's ``ByteRequest`` ranges."""
        obj: Any = getattr(self.store, "store", None)
        if type(self.store) is _ObjectStore and type(obj).__module__.startswith("obstore"):
            import obstore
            from obstore.exceptions import GenericError, PreconditionError

            get_async = obstore.get_async

            async def fetch(path: str, a: int, b: int | None, version: Any) -> RangeRead | None:
                opts: Any = {"range": {"suffix": -a} if a < 0 else (a, b)}  # obstore's GetOptions
                if version is not None:
                    opts["if_match"] = version
                try:
                    try:
                        resp = await get_async(obj, path, options=opts)
                    except GenericError as e:
                        if a >= 0 or "partial" not in str(e):
                            raise
                        # an object shorter than a suffix may come back whole (S3 answers an empty
                        # one with 200, which obstore refuses as "not partial"): read it whole
                        opts.pop("range")
                        resp = await get_async(obj, path, options=opts)
                    start, end = resp.range
                    data = resp.bytes() if end - start <= _SYNC_BODY else await resp.bytes_async()
                except _MISSING:
                    return None
                except PreconditionError:
                    raise ObjectChanged(path) from None
                meta = resp.meta
                return RangeRead(data, meta.get("e_tag"), meta.get("size"))

            return fetch
        store, prototype = self.store, default_buffer_prototype()

        async def fetch_store(path: str, a: int, b: int | None, version: Any) -> RangeRead | None:
            assert a < 0 or b is not None  # ByteRange: a stop unless the start is a suffix
            req = SuffixByteRequest(-a) if a < 0 else RangeByteRequest(a, cast(int, b))
            buf = await store.get(path, prototype=prototype, byte_range=req)
            return None if buf is None else RangeRead(buf.to_bytes(), None, None)

        return fetch_store

    def _get_ranges_local(self, ranges: Sequence[ByteRange], versions: list[Any],
                          scratch: bool) -> list[RangeRead | None]:
        """``get_ranges`` on a local directory: ``os.pread`` of each part (one open per run of the
        same key), the file's (inode, mtime, size) as its version."""
        root = cast(LocalStore, self.store).root
        out: list[RangeRead | None] = []
        used = 0  # scratch bytes handed out so far
        open_key, fd, version, size = None, -1, None, 0
        try:
            for (k, a, b), want in zip(ranges, versions, strict=True):
                self._count()
                if k != open_key:
                    if fd >= 0:
                        os.close(fd)
                    open_key, fd = k, -1
                    try:
                        fd = os.open(root / self.full_key(k), os.O_RDONLY)
                    except _MISSING:
                        pass
                    if fd >= 0:
                        st = os.fstat(fd)
                        if stat.S_ISDIR(st.st_mode):  # as get_many: a directory is no object
                            os.close(fd)
                            fd = -1
                        version, size = (st.st_ino, st.st_mtime_ns, st.st_size), st.st_size
                if fd < 0:
                    out.append(None)
                    continue
                if want is not None and want != version:
                    raise ObjectChanged(k)
                if a < 0:
                    lo, hi = max(0, size + a), size
                else:
                    assert b is not None  # ByteRange: a stop unless the start is a suffix
                    lo = min(a, size)
                    hi = max(lo, min(b, size))
                if scratch and hi > lo:
                    view, used = _CHUNK_SCRATCH.take(used, hi - lo)
                    data: Any = view[: os.preadv(fd, [view], lo)]
                else:
                    data = os.pread(fd, hi - lo, lo)
                out.append(RangeRead(data, version, size))
        finally:
            if fd >= 0:
                os.close(fd)
        return out

    def list_dir(self, path: str) -> list[str]:
        """Immediate children (names) below a group path."""
        if self._consolidated is not None:
            base = path.strip("/")
            lead = f"{base}/" if base else ""
            return sorted({k[len(lead):].split("/", 1)[0] for k in self._consolidated
                           if k.startswith(lead) and "/" in k[len(lead):]})
        prefix = self.full_key(path)
        self._before_requests()

        async def run() -> list[str]:
            self._count()
            return [x async for x in self.store.list_dir(prefix)]

        with mapped_errors(f"Could not list {self.where(path)}", self.probe):
            return sorted(set(sync(run())))

    def probe(self) -> BaseException | None:
        """For error messages: the typed error (or None) of one HEAD request on object storage,
        whose failed LIST requests obstore reports untyped (see ``_store_error``)."""
        obj = getattr(self.store, "store", None)  # zarr.storage.ObjectStore wraps an obstore store
        if not self.remote or obj is None:
            return None
        import obstore

        try:
            obstore.head(obj, self.full_key(".zgroup"))
        except Exception as e:  # noqa: BLE001 - returned for classification
            return e
        return None

    # --- writes (used by the writer) ------------------------------------------------------
    @property
    def writes_copy(self) -> bool:
        """Whether ``set_many`` is done with the bytes when it returns (local files and object
        storage write them out; a memory store keeps them): the caller may then reuse its buffer."""
        return type(self.store) in (LocalStore, _ObjectStore)

    def check_fence(self) -> None:
        """Before a batch of writes that does not go through ``set_many``: raise if the write in
        progress may no longer write to this store (see ``fence``)."""
        if self.fence is not None:
            self.fence()

    def set_many(self, items: Iterable[tuple[str, bytes]], *, fenced: bool = True) -> None:
        """Write several objects concurrently, after the ``fence`` check (``fenced=False``: the
        commit protocol's own objects, which it writes conditionally)."""

        if fenced:
            self.check_fence()
        self._before_requests()
        items = list(items)
        if isinstance(self.store, LocalStore):
            self._confine([k for k, _ in items])
            make_parents(self.store.root, [self.full_key(k) for k, _ in items])

        async def run() -> None:
            sem = asyncio.Semaphore(_MAX_CONCURRENCY)
            failed: list[Exception] = []

            async def one(k: str, v: bytes) -> None:
                async with sem:
                    if failed:  # (one failed: the rest are not started)
                        return
                    self._count()
                    try:
                        await self.store.set(self.full_key(k), cpu.Buffer.from_bytes(v))
                    except Exception as e:  # noqa: BLE001 - raised below, once every write has ended
                        failed.append(e)

            # every write started has ended when this returns: a local write's thread left running
            # would write into a folder its writer removes on the error (a full disk: the temporary
            # store came back beside the target)
            await asyncio.gather(*(one(k, v) for k, v in items))
            if failed:
                raise failed[0]

        with mapped_errors(f"Could not write to {self.display}", self.probe):
            sync(run())

    # --- conditional writes: the commit protocol's (io/commit.py) ------------------------------
    # A tag is what identifies an object's content now (an S3 ETag; locally inode, mtime and size;
    # elsewhere a hash). Each kind of store does these its own way: io/conditional.py.
    def _ops(self) -> Conditional:
        if self._conditional is None:
            self._conditional = conditional_for(self)
        return self._conditional

    def get_tagged(self, key: str) -> tuple[bytes | None, str | None]:
        """An object's bytes and tag, ``(None, None)`` when it does not exist."""
        return self._ops().get(key)

    def get_tagged_many(self, keys: Sequence[str]) -> list[tuple[bytes | None, str | None]]:
        """``get_tagged`` of several keys (at once on object storage)."""
        return self._ops().get_many(keys)

    def age(self, key: str) -> float | None:
        """Seconds since ``key`` was last written by the server's clock (object storage's
        ``Last-Modified``); None where the store keeps no clock of its own, or ``key`` is missing."""
        return self._ops().age(key)

    def put_if(self, key: str, data: bytes, *, create: bool = False, match: str | None = None) -> str | None:
        """Write ``key``; with ``create`` only if it does not exist, with ``match`` only if its tag is
        still that one: atomic on object storage that honours ``If-None-Match``/``If-Match`` and on
        local folders, else read-then-write. Returns the new tag; ``conditional.CommitConflict``
        when the condition fails. Not fenced: the protocol's own objects (``set_many`` is)."""
        return self._ops().put(key, data, create=create, match=match)

    def put_whole(self, items: Sequence[tuple[str, bytes]]) -> None:
        """Write objects unconditionally, each whole (a local file renamed over the old one, elsewhere
        ``set_many``): metadata that readers may read while it changes."""
        self._ops().put_whole(items)

    def delete_keys(self, keys: Sequence[str]) -> None:
        """Delete objects (missing ones are no error; on a local folder, the folders left empty go too)."""
        self._ops().delete(keys)

    def list_keys(self, prefix: str) -> list[str]:
        """Every key below ``prefix`` (relative to the dataset root), recursively, sorted."""
        return self._ops().list(prefix)

    def some_objects(self, n: int = 5) -> list[str]:
        """The names (first path part) of up to ``n`` objects, the package's own (``.zstrings-*``)
        left out: whether a target is empty."""
        return some_objects(self, n)

    def _confine(self, keys: Sequence[str]) -> None:
        """Refuse to write a key whose path leaves the store through a symbolic link (a linked
        folder or file inside the target): the write would change files outside it. Written by
        hand: zarr-python's LocalStore follows links, and the OS offers no portable "open beneath"."""
        root = Path(cast(Any, self.store).root)  # (a LocalStore)
        real_root = os.path.realpath(root)
        inside = real_root.rstrip(os.sep) + os.sep
        checked: dict[str, bool] = {}
        for k in keys:
            path = os.path.join(root, self.full_key(k))
            parent = os.path.dirname(path)
            ok = checked.get(parent)
            if ok is None:
                real = os.path.realpath(parent)
                ok = checked[parent] = real == real_root or real.startswith(inside)
            if ok and os.path.islink(path):
                real = os.path.realpath(path)
                ok = real.startswith(inside)
            if not ok:
                raise ZStringsError(
                    f"Cannot write {self.where(k)}: the path goes through a symbolic link to "
                    f"{os.path.realpath(path)!r}, outside the store {real_root!r}, and writing would change "
                    "files there. Nothing outside the store is ever written; replace the link with a real "
                    "folder (or copy the store with links resolved) and write again."
                )


def make_parents(root: str | os.PathLike[str], keys: Iterable[str]) -> None:
    """Create the folders of ``keys`` under ``root``, outermost first, one level per ``mkdir``.

    zarr-python's LocalStore creates a key's missing folders with ``Path.mkdir(parents=True)``,
    which recurses once per missing level: a variable 1,000 groups deep raised RecursionError.
    Created here beforehand, each write finds its folder."""
    done: set[str] = set()
    for key in keys:
        parent = os.path.dirname(os.path.join(os.fspath(root), key))
        missing: list[str] = []
        while parent not in done and not os.path.isdir(parent):
            missing.append(parent)
            parent = os.path.dirname(parent)
        for d in reversed(missing):
            with contextlib.suppress(FileExistsError):
                os.mkdir(d)
            done.add(d)
        done.add(parent)


def refuse_links(root: str | os.PathLike[str], display: str) -> None:
    """Before a store is changed (appends, added variables or groups): refuse when it holds a
    symbolic link. A link leading out of the store would have the write change files there, and the
    hard-link copy appends are made on cannot hold one (see atomic.local_commit). Checked before
    anything is written; ``ZStore.set_many`` also refuses each write whose path leaves the store."""
    stack = [os.fspath(root)]
    while stack:
        with os.scandir(stack.pop()) as it:
            for e in it:
                if e.is_symlink():
                    raise _link_error(e.path, root, display)
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)


def refuse_links_on(root: str | os.PathLike[str], folders: Iterable[str], display: str) -> None:
    """Before a store is changed in place: refuse when any of ``folders`` (relative to ``root``, and
    every folder between) is a symbolic link. What an in-place append checks instead of the whole
    tree (``refuse_links``): the folders it writes into, so the check costs the store's metadata, not
    its chunk files; ``ZStore.set_many`` also refuses each write whose path leaves the store."""
    base = os.fspath(root)
    seen: set[str] = set()
    for folder in folders:
        parts = [p for p in folder.strip("/").split("/") if p]
        for i in range(len(parts) + 1):
            rel = "/".join(parts[:i])
            if rel in seen:
                continue
            seen.add(rel)
            path = os.path.join(base, rel) if rel else base
            if os.path.islink(path):
                raise _link_error(path, base, display)


def _link_error(path: str, root: str | os.PathLike[str], display: str) -> ZStringsError:
    """The refusal of a change through the symbolic link ``path`` inside the store at ``root``."""
    real = os.path.realpath(path)
    inside = real.startswith(os.path.realpath(root).rstrip(os.sep) + os.sep)
    return ZStringsError(
        f"Cannot change {display} in place: {path!r} is a symbolic link to {real!r}"
        f"{'' if inside else ', outside the store'}. Writers never write through links "
        "(one leading out would change files there). Nothing was written. Replace the link "
        "with the folder or file it points to (cp -rL) and write again."
    )
