"""Zip archives as stores: local ``.zip`` files (zarr-python's ``ZipStore``) and read-only zip
archives in object storage (``_RemoteZip``: ranged GETs for the central directory, then one per
member, with no download of the whole archive).

Both find the dataset inside the archive with ``_zip_root``: the folder of the zip's first entry,
as netcdf-c reads it (its zip layout puts everything under a top-level folder), else the top
(zarr-python's ``ZipStore`` layout), else the one top-level folder holding Zarr metadata.
"""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path
from typing import Any

from zarr.buffer import default_buffer_prototype
from zarr.storage import ZipStore

from ..errors import MetadataError, StoreNotFoundError, ZStringsError
from ..zarr_compat import sync
from .store_errors import _store_error
from .zstore import ZStore

_METADATA_KEYS = (".zgroup", ".zarray", ".zattrs", "zarr.json", ".nczarr", ".nczgroup")


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
