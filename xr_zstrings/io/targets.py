"""Where a user's path or URL points, before any store is opened.

Splits a path or netcdf-c's ``file:///a/b.zarr#mode=nczarr,file`` URL into the path and the mode
flags, tells local targets (a directory or a ``.zip``, which the writers replace beside the target)
from object storage, and sniffs whether a path is clearly an NCZarr/Zarr store for xarray's
``guess_can_open``. Pure path and URL logic, apart from the stores themselves, so that classifying a
target needs neither zarr-python nor obstore.
"""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ZStringsError
from .redact import redact, refuse_credentials

__all__ = ["NETCDF_SUFFIXES", "ParsedTarget", "local_target", "looks_like_zstrings_target", "parse_nczarr_url"]

#: the names of a netCDF file target (``convert`` and ``zstrings convert`` write one there)
NETCDF_SUFFIXES = (".nc", ".nc4", ".cdf", ".h5", ".hdf5", ".netcdf")


@dataclass(frozen=True)
class ParsedTarget:
    """A user's path or URL split into where the store is and netcdf-c's mode flags."""

    path: str
    modes: frozenset[str]
    fragment: dict[str, str]
    scheme: str


def parse_nczarr_url(target: str) -> ParsedTarget:
    """Split ``file:///a/b.zarr#mode=nczarr,file`` (or a plain path) into path and mode flags.

    A URL holding credentials (``s3://user:password@bucket/...``) is refused here, before anything
    is opened or requested (``redact.refuse_credentials``), and so is a URL with a query
    (``?versionId=...``, a presigned signature): no store location has one, and ignoring it would
    silently read another version or with other credentials than the URL says."""
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
    if scheme:
        refuse_credentials(target)
        if parsed.query:
            raise ZStringsError(
                f"Cannot use {redact(target)}: the URL has a query ('?...'), which no store location "
                "takes (netcdf-c's options go in the '#mode=...' fragment) and which would be ignored: "
                "an object version or a presigned signature in it would silently not apply. Remove the "
                "query; pass credentials as storage_options={'key': ..., 'secret': ..., 'token': ...} or "
                "the AWS_* environment variables."
            )
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
        from zarr.abc.store import Store

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
    except Exception:  # noqa: BLE001 - a target that cannot be looked at is not a store to claim
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
