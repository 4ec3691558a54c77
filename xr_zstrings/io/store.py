"""Opening a store: ``open_store`` turns a path, a ``file://`` URL with netcdf-c's ``#mode=...``
fragment, a ``.zip`` file, an S3 URL or a zarr-python ``Store`` into a ``ZStore`` rooted at the
dataset.

Only the dispatch lives here; each kind of target has its module beside it: ``targets`` (paths and
URLs), ``zstore`` (the ``ZStore`` every read and write goes through), ``zip`` (zip archives, local
and in a bucket), ``s3`` (object storage) and ``store_errors`` (store exceptions mapped to ours).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from zarr.abc.store import Store
from zarr.storage import LocalStore

from ..errors import StoreNotFoundError, StorePermissionError, UnsupportedError, ZStringsError
from .redact import shown
from .s3 import _open_s3
from .targets import parse_nczarr_url
from .zip import _open_zip
from .zstore import ZStore

__all__ = ["open_store", "zarr_v3_only"]

#: the writers that keep keys of their own beside Zarr v3's (NCZarr / Zarr v2 metadata, the
#: ``.zstrings-journal``), which a store holding Zarr v3 keys only refuses: what to do instead
_NOT_ZARR_V3 = {
    "to_nczarr": ("write NCZarr or Zarr v2 to",
                  ("Write Zarr v3 into the session instead: xr_zstrings.to_zarr_v3(ds, session.store), then "
                   "session.commit('...') (netcdf-c reads no icechunk repository).")),
    "repair": ("repair",
               ("No write of xr_zstrings can be left half-done there: to_zarr_v3 writes into the session and "
                "only session.commit(...) makes it visible, all at once, so there is nothing to repair "
                "(session.discard_changes() drops what a session has not committed).")),
}


def zarr_v3_only(store: Any) -> bool:
    """Whether ``store`` holds Zarr v3 keys only, and nobody sees a write until its owner commits
    it: an icechunk session's store (``session.store``; ``session.commit(...)`` is the caller's)."""
    return type(store).__module__.partition(".")[0] == "icechunk"


def _refuse_unwritable(store: Store, display: str, writer: str | None) -> None:
    """Refuse a zarr-python Store passed to a writer that cannot write it, naming the fix: an
    icechunk session's store for the writers that keep other keys than Zarr v3's, and a read-only
    store (for ``repair`` only when it must change something, which it finds out itself)."""
    icechunk = zarr_v3_only(store)
    if icechunk and writer in _NOT_ZARR_V3:
        action, fix = _NOT_ZARR_V3[writer]
        raise UnsupportedError(
            f"Cannot {action} {display}: it is an icechunk session's store, which holds Zarr v3 only (icechunk "
            f"refuses every other key, such as '.zgroup' or xr_zstrings' '.zstrings-journal'). {fix}")
    if not store.read_only or writer == "repair":
        return
    if icechunk:
        raise StorePermissionError(
            f"Cannot write to {display}: it is the store of a read-only icechunk session (repo.readonly_session("
            "...)), which never changes the repository. Write through a writable session: session = "
            "repo.writable_session('main') (or the branch to write to), pass session.store, then "
            "session.commit('...').")
    raise StorePermissionError(
        f"Cannot write to {display}: the zarr-python store is read-only (read_only=True). Pass a writable "
        "one: store.with_read_only(False), or open it with read_only=False.")


def open_store(target: Any, *, mode: str = "r", storage_options: dict[str, Any] | None = None,
               writer: Literal["to_nczarr", "repair"] | None = None) -> ZStore:
    """Open a path, URL, ``.zip`` or zarr-python ``Store`` as a ``ZStore`` rooted at the dataset.

    ``s3://bucket/key`` and netcdf-c's S3 URLs (``https://host/bucket/key#mode=nczarr,s3``,
    ``https://bucket.s3.<region>.amazonaws.com/key#mode=nczarr,s3``) open object storage;
    ``storage_options`` (see ``s3_store``) configure the endpoint, credentials, region and timeouts.
    A Store opened for writing (``mode`` other than ``"r"``) is refused when read-only, or when it
    holds Zarr v3 only (icechunk) and ``writer`` (the public function writing) keeps other keys.
    """
    read_only = mode == "r"
    if isinstance(target, ZStore):
        return target
    if isinstance(target, Store):  # (a repr over several lines, as icechunk's, on one line in messages)
        display = " ".join(shown(target).split())
        if not read_only:
            _refuse_unwritable(target, display, writer)
        return ZStore(target, display=display)
    if isinstance(target, os.PathLike):
        target = os.fspath(target)
    if not isinstance(target, str):
        raise ZStringsError(
            f"Cannot open {shown(target)}: expected a path, a file:// URL, an s3:// URL, a .zip file or a "
            "zarr-python Store."
        )
    parsed = parse_nczarr_url(target)
    if parsed.scheme in ("s3", "http", "https") or "s3" in parsed.modes:
        return _open_s3(target, parsed, mode=mode, storage_options=storage_options)
    if parsed.scheme not in ("", "file"):
        raise ZStringsError(
            f"Cannot open {shown(target)!r}: the {parsed.scheme!r} storage is not supported; use a local "
            "path, a file:// URL, an s3:// URL (or https://host/bucket/key#mode=nczarr,s3), a .zip "
            "file or pass a zarr-python Store."
        )
    if storage_options:
        raise ZStringsError(
            f"storage_options={sorted(storage_options)!r} were given for the local store {shown(target)!r}; "
            "they configure object storage (s3:// URLs) only. Drop them or pass an s3:// URL."
        )
    path = Path(parsed.path).expanduser()
    display = shown(target)
    if "zip" in parsed.modes or (path.suffix.lower() == ".zip" and not path.is_dir()):
        return _open_zip(path, display=display, modes=parsed.modes, read_only=read_only)
    if read_only and not path.is_dir():
        raise StoreNotFoundError(
            f"No store at {display}: {str(path)!r} is not a directory. Expected an NCZarr/Zarr "
            "directory, a .zip file or a URL such as file:///abs/path.zarr#mode=nczarr,file."
        )
    return ZStore(LocalStore(path, read_only=read_only), display=display, modes=parsed.modes)

