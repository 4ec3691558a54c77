"""Store access, the only module that does I/O.

Paths, ``file://`` URLs with netcdf-c's ``#mode=...`` fragment, ``.zip`` files (netcdf-c's zip
layout puts everything under a top-level folder), S3 object storage (``s3://bucket/key`` and
netcdf-c's ``https://host/bucket/key#mode=nczarr,s3`` / ``https://bucket.host/key#mode=...`` URLs,
zip archives in a bucket included) and any zarr-python ``Store`` are wrapped in one ``ZStore``
that fetches keys concurrently through zarr-python's async store API and counts its requests.

Object storage goes through obstore (Rust, ``zarr.storage.ObjectStore``); see docs/cloud.md for
why (measured against s3fs) and for the ``storage_options`` it understands.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import struct
import threading
import urllib.parse
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zarr.abc.store import Store
from zarr.buffer import cpu, default_buffer_prototype
from zarr.storage import LocalStore, MemoryStore, ZipStore

from ..zarr_compat import sync
from ..errors import (
    MetadataError,
    StoreConnectionError,
    StoreNotFoundError,
    StorePermissionError,
    StoreReplacedError,
    UnsupportedError,
    ZStringsError,
)
from ..formats.nczarr import parse_json

__all__ = [
    "S3Location",
    "ZStore",
    "looks_like_zstrings_target",
    "open_store",
    "parse_nczarr_url",
    "parse_s3_url",
    "refuse_links",
]

_METADATA_KEYS = (".zgroup", ".zarray", ".zattrs", "zarr.json", ".nczarr", ".nczgroup")
# Many small requests are latency-bound; cap how many are in flight at once. Chunks (large, bandwidth-
# bound) keep a moderate cap; metadata objects are a few hundred bytes each and a store without
# consolidated metadata has two per variable (NCZarr: .zarray and .zattrs), so all of one tree level
# go out together: opening 1,000 variables costs a few round trips, not one per 64 objects
# (benchmarks/s3_open.py, tests/io/test_s3.py::test_open_wide_store_round_trips). HTTP/1.1 object
# stores need one connection per request in flight; 512 stays well inside the usual 1024-file limit.
_MAX_CONCURRENCY = 64
_METADATA_CONCURRENCY = 512


@dataclass(frozen=True)
class ParsedTarget:
    """A user's path or URL split into where the store is and netcdf-c's mode flags."""

    path: str
    modes: frozenset[str]
    fragment: dict[str, str]
    scheme: str


def parse_nczarr_url(target: str) -> ParsedTarget:
    """Split ``file:///a/b.zarr#mode=nczarr,file`` (or a plain path) into path and mode flags."""
    frag: dict[str, str] = {}
    base = target
    if "#" in target:
        base, _, fragment = target.partition("#")
        for item in fragment.split("&"):
            key, _, value = item.partition("=")
            if key.strip():
                frag[key.strip().lower()] = value.strip()
    modes = frozenset(m.strip().lower() for m in frag.get("mode", "").split(",") if m.strip())
    parsed = urllib.parse.urlparse(base)
    scheme = parsed.scheme.lower() if len(parsed.scheme) > 1 else ""
    if scheme == "file":
        path = urllib.parse.unquote(parsed.path)
        if parsed.netloc and parsed.netloc != "localhost":
            path = f"//{parsed.netloc}{path}"
    else:
        path = base
    return ParsedTarget(path=path, modes=modes, fragment=frag, scheme=scheme)


def local_target(target: Any) -> tuple[Path, bool] | None:
    """(path, is_zip) when ``target`` is a local directory or zip path/URL (what the writers swap in
    beside the target), else None: object storage and Store objects."""
    if isinstance(target, os.PathLike):
        target = os.fspath(target)
    if not isinstance(target, str):
        return None
    parsed = parse_nczarr_url(target)
    if parsed.scheme not in ("", "file") or "s3" in parsed.modes:
        return None
    p = Path(parsed.path).expanduser()
    return p, ("zip" in parsed.modes or (p.suffix.lower() == ".zip" and not p.is_dir()))


def looks_like_zstrings_target(target: Any) -> bool:
    """Cheap, never-raising check used by ``guess_can_open``: is this clearly an NCZarr/Zarr store?"""
    try:
        if isinstance(target, Store):
            return True
        if isinstance(target, os.PathLike):
            target = os.fspath(target)
        if not isinstance(target, str):
            return False
        parsed = parse_nczarr_url(target)
        if parsed.modes & {"nczarr", "zarr", "noxarray"}:
            return True
        if parsed.scheme not in ("", "file"):
            return False
        p = Path(parsed.path)
        if p.suffix.lower() == ".zip" and p.is_file():
            return _is_nczarr_zip(p)
        if p.is_dir():
            return any((p / k).is_file() for k in (".zgroup", ".nczarr", ".nczgroup")) and _is_nczarr_dir(p)
        return False
    except Exception:
        return False


def _is_nczarr_zip(p: Path) -> bool:
    """A zip whose root (or single top folder) group carries NCZarr metadata."""
    import zipfile

    with zipfile.ZipFile(p) as zf:
        for name in zf.namelist():
            parts = name.split("/")
            if len(parts) <= 2 and parts[-1] in (".zattrs", ".zgroup", ".nczarr"):
                info = zf.getinfo(name)
                if parts[-1] == ".nczarr" or (info.file_size < 1 << 24 and b"nczarr" in zf.read(name).lower()):
                    return True
    return False


def _is_nczarr_dir(p: Path) -> bool:
    """A directory group that carries NCZarr metadata in any generation."""
    for name in (".zattrs", ".zgroup"):
        f = p / name
        try:
            if f.is_file() and f.stat().st_size < 1 << 24 and b"nczarr" in f.read_bytes().lower():
                return True
        except OSError:
            return False
    return (p / ".nczarr").is_file() or (p / ".nczgroup").is_file()


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
        self.display = display or repr(store)
        self.modes = modes
        self.remote = remote  # object storage: requests are costly, consolidated metadata is trusted
        self.requests = 0
        self._lock = threading.Lock()
        self._consolidated: dict[str, Any] | None = None
        self._before_write: Any = None  # called once before the first write (see before_first_write)
        self.claimed = False
        self.root_zgroup: bytes | None = None
        # a LocalStore is read directly once zarr has opened it (its first get: root checked)
        self._local_direct = False
        self.pinned_version: tuple[int, int] | None = None  # see pin_version

    def __repr__(self) -> str:
        return f"ZStore({self.display!r})"

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_lock", None)
        state["requests"] = 0  # a copy (e.g. on a dask worker) counts its own requests
        state["_before_write"] = None  # the writer's process claims the root, never a worker
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

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
        ``version_token`` before that read): see ``check_version``."""
        self.pinned_version = token

    def check_version(self) -> None:
        """After a chunk read: refuse it if a writer swapped a new version of the local store in
        since the metadata were read (the chunks may then be the new version's, or gone).

        A swap changes the directory's inode, so a read that ends with the pinned token in place
        began and ended in the pinned version (hard links keep that version's chunks unchanged).
        """
        pinned = self.pinned_version
        if pinned is None or self.version_token() == pinned:
            return
        raise StoreReplacedError(
            f"{self.display} was replaced by another writer (mode='w', an append or added variables) "
            "after it was opened: its chunks no longer belong to the metadata read then. Open it again "
            "(xr.open_dataset(..., engine='zstrings')) to read the new version."
        )

    def full_key(self, key: str) -> str:
        key = key.strip("/")
        return f"{self.prefix}/{key}" if self.prefix else key

    def where(self, key: str) -> str:
        """A human-readable location for error messages: the store and the key."""
        return f"{self.display} key {key.strip('/')!r}"

    # --- consolidated metadata (object storage) ---------------------------------------------
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

        Only on object storage, where every request costs a round trip (or with ``force``: a
        store whose metadata objects are missing); local stores keep reading the real objects.
        Returns whether the consolidated metadata is used.
        """
        if not (self.remote or force) or not isinstance(zmetadata, dict):
            return False
        meta = zmetadata.get("metadata")
        if zmetadata.get("zarr_consolidated_format") != 1 or not isinstance(meta, dict):
            return False
        self._consolidated = {str(k).strip("/"): v for k, v in meta.items()}
        return True

    def _from_consolidated(self, key: str) -> tuple[bool, Any]:
        """(answered, value) for a metadata key when consolidated metadata is in use."""
        if self._consolidated is None:
            return False, None
        key = key.strip("/")
        if key.rsplit("/", 1)[-1] not in (".zarray", ".zattrs", ".zgroup"):
            return False, None
        return True, self._consolidated.get(key)

    # --- reads ----------------------------------------------------------------------------
    async def _get(self, key: str) -> bytes | None:
        self._count()
        buf = await self.store.get(self.full_key(key), prototype=default_buffer_prototype())
        return None if buf is None else buf.to_bytes()

    async def _get_many(self, keys: Sequence[str], limit: int = _MAX_CONCURRENCY) -> list[bytes | None]:
        sem = asyncio.Semaphore(limit)

        async def one(k: str) -> bytes | None:
            async with sem:
                return await self._get(k)

        return list(await asyncio.gather(*(one(k) for k in keys)))

    def get_bytes(self, key: str) -> bytes | None:
        """The object's bytes, or ``None`` when the key does not exist."""
        return self.get_many([key])[0]

    def get_many(self, keys: Sequence[str], *, limit: int = _MAX_CONCURRENCY) -> list[bytes | None]:
        """Fetch many keys concurrently (at most ``limit`` requests in flight); missing keys come
        back as ``None``."""
        if not keys:
            return []
        if self._local_direct:
            return self._get_many_local(keys)
        with mapped_errors(f"Could not read from {self.display}", self.probe):
            out = sync(self._get_many(list(keys), limit))
        # zarr opened the store on that get (Store._ensure_open): read it directly from now on
        self._local_direct = type(self.store) is LocalStore
        return out

    def _get_many_local(self, keys: Sequence[str]) -> list[bytes | None]:
        """LocalStore.get without the event loop round trip and its extra copy of each object
        (same results: a missing file, a directory or a path through a file reads as None).
        Measured 2x faster than LocalStore.get_sync (its Buffer copy) for 2000 small objects."""
        root = self.store.root
        out: list[bytes | None] = []
        with mapped_errors(f"Could not read from {self.display}"):
            for k in keys:
                self._count()
                try:
                    with open(root / self.full_key(k), "rb") as f:
                        out.append(f.read())
                except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
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
            out[i] = None if raw is None else parse_json(raw, where=self.where(keys[i]))
        return out

    def list_dir(self, path: str) -> list[str]:
        """Immediate children (names) below a group path."""
        if self._consolidated is not None:
            base = path.strip("/")
            lead = f"{base}/" if base else ""
            return sorted({k[len(lead):].split("/", 1)[0] for k in self._consolidated
                           if k.startswith(lead) and "/" in k[len(lead):]})
        prefix = self.full_key(path)

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
    def before_first_write(self, fn: Any) -> None:
        """Run ``fn()`` once, just before this store's first write (a writer's placeholder claim)."""
        self._before_write = fn

    def set_many(self, items: Iterable[tuple[str, bytes]]) -> None:
        """Write several objects concurrently."""

        items = list(items)
        if isinstance(self.store, LocalStore):
            self._confine([k for k, _ in items])
            make_parents(self.store.root, [self.full_key(k) for k, _ in items])
        if self._before_write is not None:
            fn, self._before_write = self._before_write, None
            fn()
            self.claimed = True

        async def run() -> None:
            sem = asyncio.Semaphore(_MAX_CONCURRENCY)

            async def one(k: str, v: bytes) -> None:
                async with sem:
                    self._count()
                    await self.store.set(self.full_key(k), cpu.Buffer.from_bytes(v))

            await asyncio.gather(*(one(k, v) for k, v in items))

        with mapped_errors(f"Could not write to {self.display}", self.probe):
            sync(run())


    def _confine(self, keys: Sequence[str]) -> None:
        """Refuse to write a key whose path leaves the store through a symbolic link (a linked
        folder or file inside the target): the write would change files outside it. Written by
        hand: zarr-python's LocalStore follows links, and the OS offers no portable "open beneath"."""
        root = Path(self.store.root)
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
                    real = os.path.realpath(e.path)
                    inside = real.startswith(os.path.realpath(root).rstrip(os.sep) + os.sep)
                    raise ZStringsError(
                        f"Cannot change {display} in place: {e.path!r} is a symbolic link to {real!r}"
                        f"{'' if inside else ', outside the store'}. Writers never write through links "
                        "(one leading out would change files there). Nothing was written. Replace the link "
                        "with the folder or file it points to (cp -rL) and write again."
                    )
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)


@contextlib.contextmanager
def mapped_errors(what: str, probe: Any = None) -> Iterator[None]:
    """Re-raise a store library's exception as one of ours (``_store_error``); ours pass through."""
    try:
        yield
    except ZStringsError:
        raise
    except Exception as e:
        err = _store_error(e, what, probe)
        if err is None:
            raise
        raise err from e


#: what bounds a request to object storage (``storage_options`` keys, defaults in ``s3_store``)
_RETRY_HELP = ("each request gives up after storage_options 'timeout' (default 30 s; connecting: "
               "'connect_timeout', 5 s) and is retried up to 'max_retries' times (default 2) within "
               "'retry_timeout' (default 10 s); see docs/cloud.md")


def _store_error(e: BaseException, what: str, probe: Any = None) -> Exception | None:
    """Map a store library's exception to our hierarchy by its type, with a message that says what
    to do. obstore types GET/PUT/HEAD failures (``FileNotFoundError``, ``PermissionDeniedError``,
    ``UnauthenticatedError``) but reports a failed LIST, and a server that does not answer, as
    ``GenericError``: then ``probe()`` (a typed HEAD request on the same store) tells which it was."""
    from obstore import exceptions as ox

    name = type(e).__name__
    text = str(e).split("\n", 1)[0][:400]
    listed = False  # a failed LIST whose bucket answers "not found": the bucket does not exist
    if isinstance(e, ox.GenericError) and probe is not None:
        found = probe()
        listed = isinstance(found, FileNotFoundError | ox.NotFoundError)
        if isinstance(found, PermissionError | ox.PermissionDeniedError | ox.UnauthenticatedError
                      | FileNotFoundError | ox.NotFoundError):
            e, name = found, type(found).__name__
            text = f"{text} (then, asked for one object: {str(found).splitlines()[0][:200]})"
    if isinstance(e, PermissionError | ox.PermissionDeniedError | ox.UnauthenticatedError):
        return StorePermissionError(
            f"{what}: permission denied ({name}: {text}). Check the credentials in storage_options "
            "(key/secret/token, or anon=True for a public bucket) or the AWS_* environment variables, "
            "and that they may read (and, for writing, write) this bucket and prefix."
        )
    if listed:
        return StoreNotFoundError(
            f"{what}: the bucket does not exist ({text}). Check the bucket name in the URL and the "
            "endpoint_url in storage_options."
        )
    if isinstance(e, FileNotFoundError | ox.NotFoundError):
        return StoreNotFoundError(
            f"{what}: not found ({name}: {text}). Check the bucket name in the URL (the bucket may not "
            "exist) and the endpoint_url in storage_options."
        )
    if isinstance(e, ConnectionError | TimeoutError | ox.GenericError):
        return StoreConnectionError(
            f"{what}: the object store did not answer or failed ({name}: {text}). Check endpoint_url in "
            f"storage_options (or AWS_ENDPOINT_URL) and the network; {_RETRY_HELP}."
        )
    if isinstance(e, OSError | ValueError | ox.BaseError):
        return ZStringsError(f"{what}: {name}: {text}")
    return None  # not a storage error: let it propagate unchanged


def open_store(target: Any, *, mode: str = "r", storage_options: dict[str, Any] | None = None) -> ZStore:
    """Open a path, URL, ``.zip`` or zarr-python ``Store`` as a ``ZStore`` rooted at the dataset.

    ``s3://bucket/key`` and netcdf-c's S3 URLs (``https://host/bucket/key#mode=nczarr,s3``,
    ``https://bucket.s3.<region>.amazonaws.com/key#mode=nczarr,s3``) open object storage;
    ``storage_options`` (see ``s3_store``) configure the endpoint, credentials, region and timeouts.
    """
    read_only = mode == "r"
    if isinstance(target, ZStore):
        return target
    if isinstance(target, Store):
        return ZStore(target, display=repr(target))
    if isinstance(target, os.PathLike):
        target = os.fspath(target)
    if not isinstance(target, str):
        raise ZStringsError(
            f"Cannot open {target!r}: expected a path, a file:// URL, an s3:// URL, a .zip file or a "
            "zarr-python Store."
        )
    parsed = parse_nczarr_url(target)
    if parsed.scheme in ("s3", "http", "https") or "s3" in parsed.modes:
        return _open_s3(target, parsed, mode=mode, storage_options=storage_options)
    if parsed.scheme not in ("", "file"):
        raise ZStringsError(
            f"Cannot open {target!r}: the {parsed.scheme!r} storage is not supported; use a local "
            "path, a file:// URL, an s3:// URL (or https://host/bucket/key#mode=nczarr,s3), a .zip "
            "file or pass a zarr-python Store."
        )
    if storage_options:
        raise ZStringsError(
            f"storage_options={sorted(storage_options)!r} were given for the local store {target!r}; "
            "they configure object storage (s3:// URLs) only. Drop them or pass an s3:// URL."
        )
    path = Path(parsed.path).expanduser()
    display = str(target)
    if "zip" in parsed.modes or (path.suffix.lower() == ".zip" and not path.is_dir()):
        return _open_zip(path, display=display, modes=parsed.modes, read_only=read_only)
    if read_only and not path.is_dir():
        raise StoreNotFoundError(
            f"No store at {display}: {str(path)!r} is not a directory. Expected an NCZarr/Zarr "
            "directory, a .zip file or a URL such as file:///abs/path.zarr#mode=nczarr,file."
        )
    return ZStore(LocalStore(path, read_only=read_only), display=display, modes=parsed.modes)


# ---------------------------------------------------------------------------------------------
# S3 object storage
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class S3Location:
    """Where an S3 URL points: bucket, key (the dataset's prefix), and what the URL says of the
    service (endpoint, region, virtual-host addressing); ``storage_options`` override the latter."""

    bucket: str
    key: str
    endpoint: str | None = None
    region: str | None = None
    virtual_hosted: bool = False


_AWS_HOST = ("amazonaws.com", "amazonaws.com.cn")


def _aws_region(labels: list[str]) -> str | None:
    """``s3.eu-west-1`` / ``s3-eu-west-1`` / ``s3`` (+ optional ``dualstack``) -> the region."""
    labels = [x for x in labels if x != "dualstack"]
    if not labels:
        return None
    head = labels[0]
    if head.startswith("s3-"):
        return head[3:]
    if head == "s3" and len(labels) > 1:
        return labels[1]
    return None


def parse_s3_url(target: str, storage_options: dict[str, Any] | None = None) -> S3Location:
    """Bucket, key, endpoint and region of an S3 URL in any of netcdf-c's forms.

    * ``s3://bucket/key``: the endpoint comes from ``storage_options`` or the AWS environment.
    * ``https://s3.<region>.amazonaws.com/bucket/key`` (path style, AWS) and
      ``https://bucket.s3.<region>.amazonaws.com/key`` (virtual host, AWS).
    * ``https://<host>/bucket/key`` (path style, any S3-compatible service: MinIO, Ceph, ...).
    * ``https://bucket.<host>/key`` (virtual host, any service): recognised when
      ``storage_options["endpoint_url"]`` is ``https://<host>`` or ``virtual_hosted_style=True``.

    The fragment (``#mode=nczarr,s3``) is ignored here; ``aws.region=...`` in it sets the region.
    """
    opts = storage_options or {}
    parsed = parse_nczarr_url(target)
    base = target.partition("#")[0]
    u = urllib.parse.urlparse(base)
    scheme = u.scheme.lower()
    region = parsed.fragment.get("aws.region") or None
    path = urllib.parse.unquote(u.path).strip("/")
    if scheme == "s3":
        if not u.netloc:
            raise ZStringsError(f"Invalid S3 URL {target!r}: expected s3://bucket/key.")
        return S3Location(bucket=u.netloc, key=path, region=region)
    if scheme not in ("http", "https") or not u.hostname:
        raise ZStringsError(
            f"Invalid S3 URL {target!r}: expected s3://bucket/key, https://host/bucket/key#mode=nczarr,s3 "
            "or https://bucket.host/key#mode=nczarr,s3."
        )
    host = u.hostname.lower()
    netloc = u.netloc.rsplit("@", 1)[-1]
    labels = host.split(".")
    aws = next((h for h in _AWS_HOST if host == h or host.endswith("." + h)), None)
    if aws is not None:
        pre = labels[: -len(aws.split("."))]
        if pre and (pre[0] == "s3" or pre[0].startswith("s3-")):  # path style
            bucket, _, key = path.partition("/")
            region = region or _aws_region(pre)
            endpoint = f"{scheme}://{netloc}"
        else:  # virtual host: <bucket>.s3.<region>.amazonaws.com (bucket names may contain dots)
            i = next((j for j, x in enumerate(pre) if x == "s3" or x.startswith("s3-")), None)
            if i is None or i == 0:
                raise ZStringsError(f"Invalid S3 URL {target!r}: cannot find the bucket in host {host!r}.")
            bucket, key = ".".join(pre[:i]), path
            region = region or _aws_region(pre[i:])
            endpoint = f"{scheme}://" + netloc.split(".", i)[-1] if region is None else None
            if endpoint is None:
                endpoint = f"{scheme}://s3.{region}.{aws}"
        if not bucket:
            raise ZStringsError(f"Invalid S3 URL {target!r}: no bucket name.")
        return S3Location(bucket=bucket, key=key, endpoint=endpoint, region=region)
    ep = _endpoint_option(opts)
    ep_netloc = urllib.parse.urlparse(ep).netloc.lower() if ep else ""
    if ep_netloc and netloc.lower().endswith("." + ep_netloc):
        bucket = netloc[: -len(ep_netloc) - 1]
        return S3Location(bucket=bucket, key=path, endpoint=ep, region=region)
    if opts.get("virtual_hosted_style"):
        bucket = labels[0]
        return S3Location(bucket=bucket, key=path, endpoint=f"{scheme}://{netloc}", region=region,
                          virtual_hosted=True)
    bucket, _, key = path.partition("/")
    if not bucket:
        raise ZStringsError(
            f"Invalid S3 URL {target!r}: no bucket. Expected https://host/bucket/key#mode=nczarr,s3 "
            "(path style) or, for https://bucket.host/key, storage_options={'endpoint_url': "
            "'https://host'} or {'virtual_hosted_style': True}."
        )
    return S3Location(bucket=bucket, key=key, endpoint=f"{scheme}://{netloc}", region=region)


_OPTION_ALIASES: dict[str, tuple[str, ...]] = {
    "access_key_id": ("key", "aws_access_key_id", "access_key_id"),
    "secret_access_key": ("secret", "aws_secret_access_key", "secret_access_key"),
    "token": ("token", "session_token", "aws_session_token"),
    "region": ("region", "region_name", "aws_region"),
}
_OUR_OPTIONS = {"endpoint_url", "endpoint", "anon", "anonymous", "timeout", "connect_timeout",
                "max_retries", "retry_timeout", "client_options", "retry_config", "client_kwargs",
                "virtual_hosted_style", "config_kwargs"}


def _endpoint_option(opts: dict[str, Any]) -> str | None:
    ck = opts.get("client_kwargs") or {}
    ep = opts.get("endpoint_url") or opts.get("endpoint") or ck.get("endpoint_url")
    return str(ep).rstrip("/") if ep else None


def s3_store(loc: S3Location, storage_options: dict[str, Any] | None = None) -> Any:
    """An obstore ``S3Store`` for ``loc`` configured from ``storage_options``.

    Understood (s3fs spellings accepted too): ``endpoint_url`` (``endpoint``,
    ``client_kwargs={"endpoint_url": ...}``), ``key``/``secret``/``token`` (or ``aws_access_key_id``,
    ...), ``anon=True`` (unsigned requests, public buckets), ``region`` (``region_name``),
    ``timeout`` (seconds per request, default 30), ``connect_timeout`` (default 5),
    ``max_retries`` (default 2), ``retry_timeout`` (seconds, default 10), ``virtual_hosted_style``,
    ``client_options``/``retry_config`` (obstore's, merged last); any other key is an obstore
    ``S3Config`` key (e.g. ``request_payer``). Unset values come from the ``AWS_*`` environment.
    """
    from datetime import timedelta

    try:
        from obstore.store import S3Store
    except ImportError as e:  # pragma: no cover - obstore is a dependency
        raise ZStringsError("Object storage needs the obstore package: pip install obstore") from e
    opts = dict(storage_options or {})
    config: dict[str, Any] = {}
    for name, aliases in _OPTION_ALIASES.items():
        for a in aliases:
            if opts.get(a) is not None:
                config[name] = opts[a]
    ck = opts.get("client_kwargs") or {}
    if "region" not in config and ck.get("region_name"):
        config["region"] = ck["region_name"]
    if "region" not in config and loc.region:
        config["region"] = loc.region
    endpoint = _endpoint_option(opts)
    if endpoint and loc.virtual_hosted and not urllib.parse.urlparse(endpoint).netloc.startswith(loc.bucket + "."):
        endpoint = None  # the URL's own virtual host wins over a plain service endpoint
    endpoint = endpoint or loc.endpoint
    if loc.virtual_hosted or (opts.get("virtual_hosted_style") and endpoint):
        config["virtual_hosted_style_request"] = True
    if endpoint:
        config["endpoint"] = endpoint
    if opts.get("anon") or opts.get("anonymous"):
        config["skip_signature"] = True
    known = {a for al in _OPTION_ALIASES.values() for a in al} | _OUR_OPTIONS
    for k, v in opts.items():
        if k not in known:
            config[k] = v
    for k, v in (opts.get("config_kwargs") or {}).items():
        config.setdefault(k, v)
    client: dict[str, Any] = {
        "timeout": timedelta(seconds=float(opts.get("timeout", 30))),
        "connect_timeout": timedelta(seconds=float(opts.get("connect_timeout", 5))),
    }
    env_endpoint = os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT") or ""
    if (endpoint or env_endpoint).startswith("http://"):
        client["allow_http"] = True
    client.update(opts.get("client_options") or {})
    retry: dict[str, Any] = {
        "max_retries": int(opts.get("max_retries", 2)),
        "retry_timeout": timedelta(seconds=float(opts.get("retry_timeout", 10))),
        "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=2),
                    "base": 2},
    }
    retry.update(opts.get("retry_config") or {})
    try:
        return S3Store(loc.bucket, client_options=client, retry_config=retry, **config)
    except Exception as e:
        raise ZStringsError(
            f"Invalid storage_options for s3://{loc.bucket}/{loc.key}: {type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else ''}. Expected endpoint_url, key, secret, token, "
            "anon, region, timeout, connect_timeout, max_retries or an obstore S3Config key."
        ) from e


def _redact(target: str) -> str:
    """The URL for messages, without user:password@ or credential-looking fragment values."""
    base, sep, frag = target.partition("#")
    u = urllib.parse.urlparse(base)
    if u.password or u.username:
        u = u._replace(netloc=u.netloc.rsplit("@", 1)[-1])
    return urllib.parse.urlunparse(u) + sep + frag


def _open_s3(target: str, parsed: ParsedTarget, *, mode: str,
             storage_options: dict[str, Any] | None) -> ZStore:
    from zarr.storage import ObjectStore

    if parsed.scheme in ("http", "https") and not parsed.modes & {"s3", "nczarr", "zarr"}:
        raise ZStringsError(
            f"Cannot open {target!r}: an http(s) URL is read as netcdf-c's S3 URL only with a mode "
            "fragment, e.g. https://host/bucket/key#mode=nczarr,s3 (or use s3://bucket/key)."
        )
    loc = parse_s3_url(target, storage_options)
    display = _redact(target)
    obj = s3_store(loc, storage_options)
    key = loc.key.strip("/")
    if "zip" in parsed.modes or key.lower().endswith(".zip"):
        if mode != "r":
            raise UnsupportedError(
                f"Cannot write the zip archive {display}: zip files in object storage are read-only "
                "here. Write a local .zip (to_nczarr(ds, 'out.zip')) and upload it, or write a "
                "directory-style store to s3://bucket/key."
            )
        return _open_remote_zip(obj, key, display=display, modes=parsed.modes)
    # Object stores are always opened writable-capable: the writer's append path reopens a target
    # it first opened for reading; the reader never writes.
    return ZStore(ObjectStore(obj, read_only=False), prefix=key, display=display, modes=parsed.modes,
                  remote=True)


class _RemoteZip:
    """A read-only zip archive in object storage: one GET for the central directory, then one
    ranged GET per member (local header and data together). Members are read concurrently."""

    read_only = True
    supports_deletes = False
    supports_writes = False

    def __init__(self, obj: Any, key: str, members: dict[str, tuple[int, int, int, int]], size: int) -> None:
        self.obj = obj
        self.key = key
        self.members = members  # name -> (header offset, compress type, compressed size, size)
        self.size = size
        self._dirs: dict[str, set[str]] = {}
        for name in members:
            parts = name.split("/")
            for i in range(len(parts)):
                self._dirs.setdefault("/".join(parts[:i]), set()).add(parts[i])

    def __repr__(self) -> str:
        return f"RemoteZip({self.key!r})"

    def close(self) -> None:
        pass

    async def get(self, key: str, prototype: Any = None, byte_range: Any = None) -> Any:
        import obstore

        m = self.members.get(key)
        if m is None:
            return None
        offset, ctype, csize, _size = m
        want = 30 + len(key.encode()) + 512 + csize
        raw = bytes(await obstore.get_range_async(self.obj, self.key, start=offset,
                                                  end=min(offset + want, self.size)))
        if raw[:4] != b"PK\x03\x04":
            raise ZStringsError(f"Zip archive {self.key!r}: member {key!r} has no local header.")
        nlen, elen = struct.unpack("<HH", raw[26:30])
        start = 30 + nlen + elen
        data = raw[start : start + csize]
        if len(data) < csize:
            data += bytes(await obstore.get_range_async(
                self.obj, self.key, start=offset + start + len(data), end=offset + start + csize))
        if ctype == 0:
            out = data
        elif ctype == 8:
            out = zlib.decompress(data, -15)
        elif ctype == 12:
            import bz2

            out = bz2.decompress(data)
        elif ctype == 14:
            import lzma

            out = lzma.decompress(data)
        else:
            raise ZStringsError(f"Zip archive {self.key!r}: member {key!r} uses compression {ctype}, "
                                "expected stored, deflate, bzip2 or lzma.")
        if prototype is None:
            prototype = default_buffer_prototype()
        return prototype.buffer.from_bytes(out)

    async def list_dir(self, prefix: str) -> Any:
        for name in sorted(self._dirs.get(prefix.strip("/"), ())):
            yield name

    async def list_prefix(self, prefix: str) -> Any:
        for name in self.members:
            if name.startswith(prefix):
                yield name


class _RangeFile(io.RawIOBase):
    """A seekable file over ranged GETs, for ``zipfile`` to read a remote central directory."""

    def __init__(self, obj: Any, key: str, size: int, counter: ZStore) -> None:
        self.obj, self.key, self.size, self.pos, self.counter = obj, key, size, 0, counter
        self.cache: tuple[int, bytes] = (0, b"")

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = {0: offset, 1: self.pos + offset, 2: self.size + offset}[whence]
        return self.pos

    def readinto(self, b: Any) -> int:
        import obstore

        n = min(len(b), self.size - self.pos)
        if n <= 0:
            return 0
        c0, cdata = self.cache
        if not (c0 <= self.pos and self.pos + n <= c0 + len(cdata)):
            start = max(0, min(self.pos, self.size - (1 << 16)))  # read ahead: the directory's tail
            end = min(self.size, max(self.pos + n, start + (1 << 16)))
            self.counter._count()
            cdata = bytes(obstore.get_range(self.obj, self.key, start=start, end=end))
            c0 = start
            self.cache = (c0, cdata)
        b[:n] = cdata[self.pos - c0 : self.pos - c0 + n]
        self.pos += n
        return n


def _is_group(objs: list[Any]) -> bool:
    """Whether a prefix's (.zgroup, .nczgroup, .nczarr, zarr.json) objects make it a group."""
    zg, nczg, ncz, zj = objs
    return zg is not None or nczg is not None or ncz is not None or (
        isinstance(zj, dict) and zj.get("node_type") == "group")


_GROUP_KEYS = (".zgroup", ".nczgroup", ".nczarr", "zarr.json")


def _zip_root(first_entry: str | None, has_metadata: Any, tops: list[str], *, display: str,
              is_group: Any = None) -> str:
    """The key prefix of the dataset in a zip: netcdf-c's zip reader (libnczarr/zmap_zip.c,
    ``zipopen``) takes the first path segment of the zip's entry 0 as the dataset; a zip whose
    entry 0 is a top-level file is zarr-python's ZipStore layout (the dataset at the top).
    ``has_metadata(prefix)`` says whether Zarr metadata is there. "" is the top."""
    import warnings

    is_group = is_group or has_metadata
    seg = first_entry.split("/", 1)[0] if first_entry and "/" in first_entry else None
    if seg and is_group(seg):  # (a folder holding an array of a top-level dataset is not it)
        if is_group(""):
            warnings.warn(
                f"Zip store {display} holds Zarr metadata both at its top and in folder {seg!r}; "
                f"reading {seg!r}, the folder of the zip's first entry, as netcdf-c does. Open the "
                "zip with zarr.storage.ZipStore to read the top instead.",
                UserWarning, stacklevel=4,
            )
        return seg
    if has_metadata(""):
        return ""
    candidates = [t for t in tops if has_metadata(t)]
    if len(candidates) == 1:
        return candidates[0]
    raise MetadataError(
        f"No Zarr group at the root of zip store {display}: expected .zgroup/zarr.json at the top, "
        f"in the folder of the zip's first entry, or in exactly one top-level folder; found folders "
        f"{tops!r}."
    )


def _open_remote_zip(obj: Any, key: str, *, display: str, modes: frozenset[str]) -> ZStore:
    import zipfile

    import obstore

    counter = ZStore(None, display=display, remote=True)  # counts the open's requests
    try:
        counter._count()
        size = int(obstore.head(obj, key)["size"])
        with zipfile.ZipFile(_RangeFile(obj, key, size, counter)) as zf:  # type: ignore[arg-type]
            infos = zf.infolist()
            first_entry = infos[0].filename if infos else None
            members = {i.filename: (i.header_offset, i.compress_type, i.compress_size, i.file_size)
                       for i in infos if not i.is_dir()}
    except zipfile.BadZipFile as e:
        raise ZStringsError(f"Cannot open zip store {display}: {e}. Expected a readable .zip object.") from e
    except Exception as e:
        err = _store_error(e, f"Cannot open zip store {display}")
        if isinstance(err, StoreNotFoundError):
            raise StoreNotFoundError(f"No zip store at {display}: the object {key!r} does not exist.") from e
        if err is None:
            raise
        raise err from e
    store = _RemoteZip(obj, key, members, size)
    zs = ZStore(store, display=display, modes=modes, remote=True)
    zs.requests = counter.requests

    def has_metadata(prefix: str) -> bool:
        return any(zs.get_many([f"{prefix}/{k}" if prefix else k for k in _METADATA_KEYS]))

    def is_group(prefix: str) -> bool:
        return _is_group(zs.get_json_many([f"{prefix}/{k}" if prefix else k for k in _GROUP_KEYS]))

    root = _zip_root(first_entry, has_metadata, [n for n in zs.list_dir("") if n], display=display,
                     is_group=is_group)
    if not root:
        return zs
    out = ZStore(store, prefix=root, display=display, modes=modes, remote=True)
    out.requests = zs.requests
    return out


def _open_zip(path: Path, *, display: str, modes: frozenset[str], read_only: bool) -> ZStore:
    if read_only and not path.is_file():
        raise StoreNotFoundError(f"No zip store at {display}: {str(path)!r} does not exist.")
    try:
        store = sync(ZipStore.open(path, mode="r" if read_only else "w", read_only=read_only))
    except Exception as e:  # zipfile.BadZipFile, OSError
        raise ZStringsError(f"Cannot open zip store {display}: {e}. Expected a readable .zip file.") from e
    if not read_only:
        return ZStore(store, display=display, modes=modes)
    # netcdf-c's zip layout puts the dataset under a top-level folder named after the file.
    import zipfile

    zs = ZStore(store, display=display, modes=modes)
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
            first_entry = infos[0].filename if infos else None
    except (zipfile.BadZipFile, OSError):
        first_entry = None

    def has_metadata(prefix: str) -> bool:
        return any(ZStore(store, prefix=prefix).get_many(list(_METADATA_KEYS)))

    def is_group(prefix: str) -> bool:
        return _is_group(ZStore(store, prefix=prefix).get_json_many(list(_GROUP_KEYS)))

    root = _zip_root(first_entry, has_metadata, [n for n in zs.list_dir("") if n], display=display,
                     is_group=is_group)
    return zs if not root else ZStore(store, prefix=root, display=display, modes=modes)


def memory_store() -> ZStore:
    """An empty in-memory store (tests, scratch writes)."""
    return ZStore(MemoryStore(), display="<memory>")
