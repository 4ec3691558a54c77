"""Zip archives as stores: local ``.zip`` files (zarr-python's ``ZipStore``) and read-only zip
archives in object storage (``_RemoteZip``: ranged GETs for the central directory, then one per
member, with no download of the whole archive).

Both find the dataset inside the archive with ``_zip_root``: the shallowest folder holding Zarr
metadata, so the top when anything is there (zarr-python's ``ZipStore``, ``zip -r`` of a store's
contents), else the one top-level folder (``zip -r`` of the store folder, netcdf-c's layout).

Members are bounded like every other chunk path (codecs/bounded.py): a member whose declared size
exceeds :func:`~xr_zstrings.codecs.bounded.max_chunk_bytes` is refused before anything is
decompressed, and a member is never decompressed beyond its declared size, whose CRC-32 is checked
(a zip bomb or a corrupt archive raises ``ChunkError`` naming the member).
"""

from __future__ import annotations

import io
import os
import struct
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, cast

from zarr.buffer import default_buffer_prototype
from zarr.storage import ZipStore

from ..codecs.bounded import MAX_CHUNK_BYTES_ENV, max_chunk_bytes
from ..errors import ChunkError, MetadataError, StoreNotFoundError, UnsupportedError, ZStringsError
from ..zarr_compat import sync
from .store_errors import _store_error
from .zstore import ZStore

_METADATA_KEYS = (".zgroup", ".zarray", ".zattrs", "zarr.json", ".nczarr", ".nczgroup")


def _check_declared_size(info: zipfile.ZipInfo, where: str) -> None:
    """Refuse a member whose declared size is over the decoded-chunk limit, before decompressing."""
    limit = max_chunk_bytes()
    if info.file_size > limit:
        raise ChunkError(
            f"{where}: zip member {info.filename!r} declares {info.file_size} bytes, more than the "
            f"{limit}-byte limit for one chunk; refused before decompressing it (a zip bomb or a "
            f"corrupt archive). If the data are genuine, raise the limit with {MAX_CHUNK_BYTES_ENV}."
        )


def _decode_member(info: zipfile.ZipInfo, data: bytes, where: str) -> bytes:
    """A member's bytes from its stored (compressed) ``data``: at most its declared size, CRC-checked.

    Decompressed by the standard library's ``zipfile.ZipExtFile`` (what ``ZipFile.open`` returns
    and zarr-python's ``ZipStore`` reads through): it stops at the declared size, checks the CRC-32
    and knows every method ``zipfile`` does (stored, deflate, bzip2, zip's LZMA header), so the remote
    reader decodes exactly like the local one instead of a hand-written decompressor per method."""
    _check_declared_size(info, where)
    try:
        with zipfile.ZipExtFile(io.BytesIO(data), "rb", info) as f:  # type: ignore[call-overload]  # as ZipFile.open
            out = f.read()
    except NotImplementedError as e:  # an unknown compression method
        raise ZStringsError(f"{where}: zip member {info.filename!r}: {e}; expected stored, deflate, "
                            "bzip2 or lzma.") from e
    except Exception as e:  # zlib.error, lzma.LZMAError: the stream itself is broken
        raise ChunkError(f"{where}: zip member {info.filename!r} is corrupt ({type(e).__name__}: {e}).") from e
    if len(out) != info.file_size:
        raise ChunkError(f"{where}: zip member {info.filename!r} holds {len(out)} bytes, its header "
                         f"declares {info.file_size}; the archive is corrupt.")
    return out


class _BoundedZipStore(ZipStore):
    """zarr-python's read-only ``ZipStore`` that refuses members declared larger than the chunk
    limit before reading them (``zipfile`` itself stops at the declared size and checks the CRC-32).
    ``infos``: the archive's central directory, read once by ``_open_zip``."""

    infos: dict[str, zipfile.ZipInfo]

    def _check(self, key: str) -> None:
        info = self.infos.get(key)
        if info is not None:  # a missing key: ZipStore answers None
            _check_declared_size(info, str(self.path))

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        self._check(key)
        try:
            return await super().get(key, prototype, byte_range)
        except zipfile.BadZipFile as e:  # "Bad CRC-32 for file ...": the member's bytes changed
            raise ChunkError(f"{self.path}: zip member {key!r} is corrupt ({e}).") from e

    async def get_partial_values(self, prototype: Any, key_ranges: Any) -> Any:
        key_ranges = list(key_ranges)
        for key, _ in key_ranges:
            self._check(key)
        try:
            return await super().get_partial_values(prototype, key_ranges)
        except zipfile.BadZipFile as e:
            raise ChunkError(f"{self.path}: a zip member is corrupt ({e}).") from e


class _RemoteZip:
    """A read-only zip archive in object storage: one GET for the central directory, then one
    ranged GET per member (local header and data together). Members are read concurrently."""

    read_only = True
    supports_deletes = False
    supports_writes = False

    def __init__(self, obj: Any, key: str, members: dict[str, zipfile.ZipInfo], size: int) -> None:
        self.obj = obj
        self.key = key
        self.members = members  # name -> its central-directory entry
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

        info = self.members.get(key)
        if info is None:
            return None
        where = f"Zip archive {self.key!r}"
        _check_declared_size(info, where)  # before fetching the member's bytes
        offset, csize = info.header_offset, info.compress_size
        want = 30 + len(key.encode()) + 512 + csize
        raw = bytes(await obstore.get_range_async(self.obj, self.key, start=offset,
                                                  end=min(offset + want, self.size)))
        if raw[:4] != b"PK\x03\x04":
            raise ZStringsError(f"{where}: member {key!r} has no local header.")
        nlen, elen = struct.unpack("<HH", raw[26:30])
        start = 30 + nlen + elen
        data = raw[start : start + csize]
        if len(data) < csize:
            data += bytes(await obstore.get_range_async(
                self.obj, self.key, start=offset + start + len(data), end=offset + start + csize))
        out = _decode_member(info, data, where)
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
#: names that only a group holds (``.zattrs`` and ``zarr.json`` also sit in arrays' folders)
_GROUP_ONLY = frozenset({".zgroup", ".nczgroup", ".nczarr", ".zmetadata"})
_ROOT_MARKERS = frozenset({*_METADATA_KEYS, ".zmetadata"})


def _zip_root(names: Iterable[str], *, display: str, is_group: Callable[[str], bool]) -> str:
    """The key prefix of the dataset in a zip ("" is the top): the shallowest folder holding Zarr
    metadata. Anything at the top makes the top the dataset (zarr-python's ``ZipStore``, and
    ``cd s.zarr && zip -r ../s.zip .`` as zarr's docs make one, whose first entry may be a
    subgroup); else the one top folder holding it (``zip -r s.zip s.zarr``, netcdf-c's layout).
    A folder holding an array counts as its parent group. ``names``: the zip's member names;
    ``is_group(prefix)``: whether its ``zarr.json`` is a group's (read only where it decides)."""
    marks: dict[str, set[str]] = {}
    for name in names:
        folder, _, base = name.rpartition("/")
        if base in _ROOT_MARKERS:
            marks.setdefault(folder, set()).add(base)
    if "" in marks:
        return ""
    if not marks:
        raise MetadataError(f"No Zarr store in zip store {display}: no .zgroup, .zattrs, .zarray, zarr.json "
                            "or .nczarr in any folder. Expected a zip of a Zarr/NCZarr store.")

    def depth(folder: str) -> int:
        return folder.count("/") + 1 if folder else 0

    kinds: dict[str, bool] = {}

    def group(folder: str) -> bool:
        if folder not in kinds:
            m = marks[folder]
            kinds[folder] = bool(m & _GROUP_ONLY) or (".zarray" not in m and (
                is_group(folder) if "zarr.json" in m else ".zattrs" in m))
        return kinds[folder]

    for d in range(min(map(depth, marks)), max(map(depth, marks)) + 1):
        found = {f for f in marks if depth(f) == d and group(f)}
        found |= {f.rpartition("/")[0] for f in marks if depth(f) == d + 1 and not group(f)}
        if len(found) == 1:
            return found.pop()
        if found:
            raise MetadataError(
                f"Zip store {display} holds {len(found)} Zarr stores side by side ({', '.join(sorted(found))}) "
                "and no Zarr metadata at its top: which one is the dataset is not clear. Zip one store, or "
                "open the one you mean from the unzipped folder.")
    raise MetadataError(f"No Zarr group in zip store {display}: its folders {sorted(marks)!r} hold arrays only.")


def _open_remote_zip(obj: Any, key: str, *, display: str, modes: frozenset[str]) -> ZStore:
    import obstore

    counter = ZStore(None, display=display, remote=True)  # counts the open's requests
    try:
        counter._count()
        size = int(obstore.head(obj, key)["size"])
        with zipfile.ZipFile(_RangeFile(obj, key, size, counter)) as zf:
            members = {i.filename: i for i in zf.infolist() if not i.is_dir()}
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

    def is_group(prefix: str) -> bool:
        return _is_group(zs.get_json_many([f"{prefix}/{k}" if prefix else k for k in _GROUP_KEYS]))

    root = _zip_root(members, display=display, is_group=is_group)
    if not root:
        return zs
    out = ZStore(store, prefix=root, display=display, modes=modes, remote=True)
    out.requests = zs.requests
    return out


def _open_zip(path: Path, *, display: str, modes: frozenset[str], read_only: bool) -> ZStore:
    if read_only and not path.is_file():
        raise StoreNotFoundError(f"No zip store at {display}: {str(path)!r} does not exist.")
    if not read_only and os.path.lexists(path):  # (zarr-python's ZipStore in mode "w" empties the file)
        raise UnsupportedError(
            f"Cannot open zip store {display} for writing: {str(path)!r} exists, and a zip file is never "
            "changed in place (writers write a new zip beside it and rename it over the old one). Nothing was "
            "changed. Read it (mode='r'), or write a new zip with to_nczarr(..., mode='w').")
    try:
        cls = _BoundedZipStore if read_only else ZipStore
        store = sync(cls.open(path, mode="r" if read_only else "w", read_only=read_only))
    except Exception as e:  # zipfile.BadZipFile, OSError
        raise ZStringsError(f"Cannot open zip store {display}: {e}. Expected a readable .zip file.") from e
    if not read_only:
        return ZStore(store, display=display, modes=modes)
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
    except (zipfile.BadZipFile, OSError):
        infos = []
    members = {i.filename: i for i in infos if not i.is_dir()}
    cast(_BoundedZipStore, store).infos = members
    zs = ZStore(store, display=display, modes=modes)

    def is_group(prefix: str) -> bool:
        return _is_group(ZStore(store, prefix=prefix).get_json_many(list(_GROUP_KEYS)))

    root = _zip_root(members, display=display, is_group=is_group)
    return zs if not root else ZStore(store, prefix=root, display=display, modes=modes)
