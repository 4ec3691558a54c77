"""Virtual references (VirtualiZarr, icechunk) to NCZarr / Zarr v2 stores and netCDF-4 files.

The map of this folder (``pip install "xr_zstrings[virtual]"``; Python >= 3.12; docs/virtual.md):

* ``nczarr``: ``NCZarrParser``, a VirtualiZarr parser for NCZarr (every netcdf-c generation) and
  Zarr v2 stores, whose v3 metadata are ``migrate``'s (one translation: ``write.migrate``).
* ``netcdf4``: ``NetCDF4Parser``, a VirtualiZarr parser for netCDF-4 / HDF5 files whose strings
  VirtualiZarr's HDF parser cannot reference.
* ``source``: ``VirtualSource``, where a source is (its URL, the obstore registry, icechunk's
  virtual chunk container and credentials for it).
* ``icechunk_write``: a parsed source written into an icechunk session's store through the write
  session (the arrays' v3 metadata as the parser made them, virtual chunk references, inlined
  chunks as native ones).
* :func:`virtualize` (``xr_zstrings.virtualize``): the one call for the common case; :func:`access`:
  what a reader authorizes.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from typing import Any

from ..errors import UnsupportedError
from .source import VirtualSource

__all__ = ["PARSERS", "VirtualSource", "access", "parser_for", "source_kind", "virtualize"]

#: which parser reads which source: kind -> (module, class); imported when used
PARSERS: dict[str, tuple[str, str]] = {
    "nczarr": ("xr_zstrings.virtual.nczarr", "NCZarrParser"),
    "netcdf4": ("xr_zstrings.virtual.netcdf4", "NetCDF4Parser"),
}
_NETCDF_SUFFIXES = (".nc", ".nc4", ".h5", ".hdf5", ".he5", ".cdf")


def source_kind(source: str | os.PathLike[str]) -> str:
    """"netcdf4" for a netCDF-4 / HDF5 file (by its name: ``.nc``, ``.nc4``, ``.h5``, ...), else "nczarr"."""
    text = os.fspath(source).split("#", 1)[0].rstrip("/").lower()
    return "netcdf4" if text.endswith(_NETCDF_SUFFIXES) else "nczarr"


def parser_for(source: str | os.PathLike[str], **options: Any) -> Any:
    """The VirtualiZarr parser (an instance, with ``options``) for ``source``."""
    kind = source_kind(source)
    module, name = PARSERS[kind]
    try:
        cls = getattr(importlib.import_module(module), name)
    except ImportError as e:
        if e.name not in (module, None) and not str(e.name).startswith("xr_zstrings"):
            raise UnsupportedError(f"Cannot virtualize {os.fspath(source)}: {e}. Install the extra: "
                                   'pip install "xr_zstrings[virtual]" (Python >= 3.12).') from e
        raise UnsupportedError(f"Cannot virtualize the {kind} source {os.fspath(source)}: its parser ({module}) is "
                               "not available in this version of xr_zstrings.") from e
    return cls(**options)


def virtualize(source: str | os.PathLike[str], session: Any, *, group: str | None = None, mode: str = "w-",
               missing: str | None = None, storage_options: Mapping[str, Any] | None = None,
               branch: str = "main") -> Any:
    """Virtualize an NCZarr / Zarr v2 store or a netCDF-4 file (a path or ``s3://`` URL) into icechunk.

    ``session``: a writable icechunk ``Session`` whose repository has a virtual chunk container for
    the source's location, or the ``Repository`` itself, which gets one (``file://`` of the source's
    folder, or ``s3://`` of its bucket with ``storage_options``' endpoint and credentials), saved in
    its config, and a writable session on ``branch``. Returns the session: the commit stays the
    caller's (``session.commit(...)``). ``group``: the icechunk group written (default the root);
    ``mode``: "w-" refuses a non-empty target, "w" replaces it; ``missing``: as ``migrate``'s.
    """
    _require_extra(source)
    from .icechunk_write import write_virtual

    src = VirtualSource.of(source, storage_options)
    options = {"missing": missing} if source_kind(source) == "nczarr" else {}
    manifest_store = parser_for(source, **options)(src.url, src.registry)
    writable = src.writable_session(session, branch=branch)
    write_virtual(manifest_store, writable.store, group=group, mode=mode)
    return writable


def _require_extra(source: str | os.PathLike[str]) -> None:
    """VirtualiZarr and icechunk importable, else an error naming the extra to install."""
    for name in ("virtualizarr", "icechunk"):
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise UnsupportedError(
                f"Cannot virtualize {os.fspath(source)}: {name} is not installed ({e}). Install the extra: "
                'pip install "xr_zstrings[virtual]" (VirtualiZarr and icechunk publish wheels for Python >= 3.12 '
                "only).") from e


def access(source: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``authorize_virtual_chunk_access`` for ``icechunk.Repository.open`` to read what
    :func:`virtualize` wrote from ``source`` (its container's URL prefix -> credentials)."""
    return VirtualSource.of(source, storage_options).access()
