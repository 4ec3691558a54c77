"""Store access, the only module that does I/O.

Paths, ``file://`` URLs with netcdf-c's ``#mode=...`` fragment, ``.zip`` files (netcdf-c's zip
layout puts everything under a top-level folder) and any zarr-python ``Store`` are wrapped in one
``ZStore`` that fetches keys concurrently through zarr-python's async store API.
"""

from __future__ import annotations

import asyncio
import os
import urllib.parse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import LocalStore, MemoryStore, ZipStore

from .errors import MetadataError, StoreNotFoundError, ZStringsError
from .metadata import parse_json

__all__ = ["ZStore", "open_store", "parse_nczarr_url", "looks_like_zstrings_target"]

_METADATA_KEYS = (".zgroup", ".zarray", ".zattrs", "zarr.json", ".nczarr", ".nczgroup")
# Many small requests are latency-bound; cap how many are in flight at once.
_MAX_CONCURRENCY = 64


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
    """A zarr-python store plus a root prefix; every key here is relative to the dataset root."""

    def __init__(self, store: Store, *, prefix: str = "", display: str | None = None,
                 modes: frozenset[str] = frozenset()) -> None:
        self.store = store
        self.prefix = prefix.strip("/")
        self.display = display or repr(store)
        self.modes = modes

    def __repr__(self) -> str:
        return f"ZStore({self.display!r})"

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__.copy()

    def full_key(self, key: str) -> str:
        key = key.strip("/")
        return f"{self.prefix}/{key}" if self.prefix else key

    def where(self, key: str) -> str:
        """A human-readable location for error messages: the store and the key."""
        return f"{self.display} key {key.strip('/')!r}"

    # --- reads ----------------------------------------------------------------------------
    async def _get(self, key: str) -> bytes | None:
        buf = await self.store.get(self.full_key(key), prototype=default_buffer_prototype())
        return None if buf is None else buf.to_bytes()

    async def _get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        sem = asyncio.Semaphore(_MAX_CONCURRENCY)

        async def one(k: str) -> bytes | None:
            async with sem:
                return await self._get(k)

        return list(await asyncio.gather(*(one(k) for k in keys)))

    def get_bytes(self, key: str) -> bytes | None:
        """The object's bytes, or ``None`` when the key does not exist."""
        return self.get_many([key])[0]

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """Fetch many keys concurrently; missing keys come back as ``None``."""
        if not keys:
            return []
        try:
            return sync(self._get_many(list(keys)))
        except ZStringsError:
            raise
        except (OSError, ValueError) as e:
            raise ZStringsError(f"Could not read from {self.display}: {e}") from e

    def get_json_many(self, keys: Sequence[str]) -> list[Any]:
        """Fetch and decode metadata objects concurrently; missing ones are ``None``."""
        return [
            None if raw is None else parse_json(raw, where=self.where(k))
            for k, raw in zip(keys, self.get_many(keys), strict=True)
        ]

    def list_dir(self, path: str) -> list[str]:
        """Immediate children (names) below a group path."""
        prefix = self.full_key(path)

        async def run() -> list[str]:
            return [x async for x in self.store.list_dir(prefix)]

        return sorted(set(sync(run())))

    # --- writes (used by the writer) ------------------------------------------------------
    def set_many(self, items: Iterable[tuple[str, bytes]]) -> None:
        """Write several objects concurrently."""
        from zarr.core.buffer import cpu

        async def run() -> None:
            sem = asyncio.Semaphore(_MAX_CONCURRENCY)

            async def one(k: str, v: bytes) -> None:
                async with sem:
                    await self.store.set(self.full_key(k), cpu.Buffer.from_bytes(v))

            await asyncio.gather(*(one(k, v) for k, v in items))

        sync(run())


def open_store(target: Any, *, mode: str = "r", storage_options: dict[str, Any] | None = None) -> ZStore:
    """Open a path, URL, ``.zip`` or zarr-python ``Store`` as a ``ZStore`` rooted at the dataset."""
    read_only = mode == "r"
    if isinstance(target, ZStore):
        return target
    if isinstance(target, Store):
        return ZStore(target, display=repr(target))
    if isinstance(target, os.PathLike):
        target = os.fspath(target)
    if not isinstance(target, str):
        raise ZStringsError(
            f"Cannot open {target!r}: expected a path, a file:// URL, a .zip file or a zarr-python Store."
        )
    parsed = parse_nczarr_url(target)
    if parsed.scheme not in ("", "file") or "s3" in parsed.modes:
        raise ZStringsError(
            f"Cannot open {target!r}: the {parsed.scheme or 's3'!r} storage is not supported yet; "
            "use a local path, a file:// URL, a .zip file or pass a zarr-python Store."
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
    zs = ZStore(store, display=display, modes=modes)
    if any(zs.get_many(list(_METADATA_KEYS))):
        return zs
    tops = [n for n in zs.list_dir("") if n]
    candidates = [t for t in tops if any(ZStore(store, prefix=t).get_many(list(_METADATA_KEYS)))]
    if len(candidates) == 1:
        return ZStore(store, prefix=candidates[0], display=display, modes=modes)
    raise MetadataError(
        f"No Zarr group at the root of zip store {display}: expected .zgroup/zarr.json at the top "
        f"or in exactly one top-level folder, found folders {tops!r}."
    )


def memory_store() -> ZStore:
    """An empty in-memory store (tests, scratch writes)."""
    return ZStore(MemoryStore(), display="<memory>")
