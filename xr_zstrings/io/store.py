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
from typing import Any

from zarr.abc.store import Store
from zarr.storage import LocalStore

from ..errors import StoreNotFoundError, ZStringsError
from .redact import shown
from .s3 import _open_s3
from .targets import parse_nczarr_url
from .zip import _open_zip
from .zstore import ZStore

__all__ = ["open_store"]


def open_store(target: Any, *, mode: str = "r", storage_options: dict[str, Any] | None = None) -> ZStore:
    """Open a path, URL, ``.zip`` or zarr-python ``Store`` as a ``ZStore`` rooted at the dataset.

    ``s3://bucket/key`` and netcdf-c's S3 URLs (``https://host/bucket/key#mode=nczarr,s3``,
    ``https://bucket.s3.<region>.amazonaws.com/key#mode=nczarr,s3``) open object storage;
    ``storage_options`` (see ``s3_store``) configure the endpoint, credentials, region and timeouts.
    """
    read_only = mode == "r"
    if isinstance(target, ZStore):
        return target
    if isinstance(target, Store):  # (a repr over several lines, as icechunk's, on one line in messages)
        return ZStore(target, display=" ".join(shown(target).split()))
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

