"""Zip archives as stores: local ``.zip`` files (zarr-python's ``ZipStore``) and read-only zip
archives in object storage (``_RemoteZip``: ranged GETs for the central directory, then one per
member, with no download of the whole archive).

Both find the dataset inside the archive with ``_zip_root``: the folder of the zip's first entry,
as netcdf-c reads it (its zip layout puts everything under a top-level folder), else the top
(zarr-python's ``ZipStore`` layout), else the one top-level folder holding Zarr metadata.

Members are bounded like every other chunk path (codecs/bounded.py): a member whose declared size
exceeds :func:`~xr_zstrings.codecs.bounded.max_chunk_bytes` is refused before anything is
decompressed, and a member is never decompressed beyond its declared size, whose CRC-32 is checked
(a zip bomb or a corrupt archive raises ``ChunkError`` naming the member).
"""

from __future__ import annotations

import io
import struct
import zipfile
from pathlib import Path
from typing import Any, cast

from zarr.buffer import default_buffer_prototype
from zarr.storage import ZipStore

from ..codecs.bounded import MAX_CHUNK_BYTES_ENV, max_chunk_bytes
from ..errors import ChunkError, MetadataError, StoreNotFoundError, ZStringsError
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
    import obstore

    counter = ZStore(None, display=display, remote=True)  # counts the open's requests
    try:
        counter._count()
        size = int(obstore.head(obj, key)["size"])
        with zipfile.ZipFile(_RangeFile(obj, key, size, counter)) as zf:
            infos = zf.infolist()
            first_entry = infos[0].filename if infos else None
            members = {i.filename: i for i in infos if not i.is_dir()}
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
        cls = _BoundedZipStore if read_only else ZipStore
        store = sync(cls.open(path, mode="r" if read_only else "w", read_only=read_only))
    except Exception as e:  # zipfile.BadZipFile, OSError
        raise ZStringsError(f"Cannot open zip store {display}: {e}. Expected a readable .zip file.") from e
    if not read_only:
        return ZStore(store, display=display, modes=modes)
    # netcdf-c's zip layout puts the dataset under a top-level folder named after the file.
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
    except (zipfile.BadZipFile, OSError):
        infos = []
    cast(_BoundedZipStore, store).infos = {i.filename: i for i in infos if not i.is_dir()}
    first_entry = infos[0].filename if infos else None
    zs = ZStore(store, display=display, modes=modes)

    def has_metadata(prefix: str) -> bool:
        return any(ZStore(store, prefix=prefix).get_many(list(_METADATA_KEYS)))

    def is_group(prefix: str) -> bool:
        return _is_group(ZStore(store, prefix=prefix).get_json_many(list(_GROUP_KEYS)))

    root = _zip_root(first_entry, has_metadata, [n for n in zs.list_dir("") if n], display=display,
                     is_group=is_group)
    return zs if not root else ZStore(store, prefix=root, display=display, modes=modes)
