"""What readers need of the commit protocol (``io.commit``): the version record a root ``.zgroup``
carries, the placeholder root a write puts first and replaces last, and whether a reader is
served ``.zmetadata`` or the objects (``consolidated_view``). Kept apart so that readers and the
store adapter (``io.zstore``) import no writer code."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..formats.nczarr_json import dumps

__all__ = [
    "INCOMPLETE_MARKER",
    "METADATA_NAMES",
    "VERSION_KEY",
    "ZMETADATA",
    "VersionRecord",
    "canonical",
    "consolidated_bytes",
    "consolidated_meta",
    "consolidated_view",
    "is_placeholder",
    "version_of",
    "with_version",
]

#: Zarr v2 consolidated metadata: the commit point of in-place writes
ZMETADATA = ".zmetadata"
#: the key of the version record in a root ``.zgroup`` (and in a placeholder)
VERSION_KEY = "xr_zstrings"
#: the per-object metadata of Zarr v2
METADATA_NAMES = (".zgroup", ".zattrs", ".zarray")
#: the key that marks a placeholder root object, written first and replaced last on stores that
#: cannot swap (object storage, zarr-python Store objects): readers refuse it with "incomplete"
INCOMPLETE_MARKER = "xr_zstrings_incomplete"


@dataclass(frozen=True)
class VersionRecord:
    """What a root ``.zgroup`` says of the version it belongs to. ``lineage`` is kept by appends and
    added variables and changes with every replacement; ``commit`` changes with every write."""

    lineage: str
    commit: str
    version: int
    kind: str = ""  # in a placeholder: the write under way ("append", "add", "new", "replace")

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"lineage": self.lineage, "commit": self.commit, "version": self.version}
        if self.kind:
            out["kind"] = self.kind
        return out


def version_of(obj: Any) -> VersionRecord | None:
    """The version record of a root ``.zgroup`` (or of a placeholder), None when it has none."""
    rec = obj.get(VERSION_KEY) if isinstance(obj, Mapping) else None
    if not isinstance(rec, Mapping):
        return None
    try:
        return VersionRecord(str(rec["lineage"]), str(rec["commit"]), int(rec.get("version", 0)),
                             str(rec.get("kind", "")))
    except (KeyError, TypeError, ValueError):
        return None


def is_placeholder(obj: Any) -> bool:
    return isinstance(obj, Mapping) and INCOMPLETE_MARKER in obj


def with_version(zgroup: Mapping[str, Any], rec: VersionRecord) -> dict[str, Any]:
    """``zgroup`` with ``rec`` as its version record (the kind is a placeholder's only)."""
    out = {k: v for k, v in zgroup.items() if k != VERSION_KEY}
    out[VERSION_KEY] = VersionRecord(rec.lineage, rec.commit, rec.version).as_json()
    return out


def canonical(obj: Any) -> str:
    """Comparable text of a metadata object (NaN compares equal to NaN here, unlike in a dict)."""
    return json.dumps(obj, sort_keys=True, default=str)


def consolidated_bytes(meta: Mapping[str, Any]) -> bytes:
    """A ``.zmetadata`` object as zarr-python and netcdf-c 4.10 write it."""
    return dumps({"metadata": dict(sorted(meta.items())), "zarr_consolidated_format": 1})


def consolidated_meta(zmetadata: Any) -> dict[str, Any] | None:
    """The metadata objects (key -> JSON) of a ``.zmetadata`` object, None when it is not one."""
    if not isinstance(zmetadata, Mapping) or zmetadata.get("zarr_consolidated_format") != 1:
        return None
    meta = zmetadata.get("metadata")
    return {str(k).strip("/"): v for k, v in meta.items()} if isinstance(meta, Mapping) else None


def consolidated_view(root_zgroup: Any, root_zattrs: Any, zmetadata: Any, *, remote: bool) -> str:
    """How a reader reads a Zarr v2 store, from its root objects and ``.zmetadata`` (one batch of
    requests): ``"use"`` (serve every metadata object from ``.zmetadata``) or ``"objects"`` (read
    the objects; a placeholder root is then refused).

    Our ``.zmetadata`` (its copy of the root ``.zgroup`` has a version record) is a whole committed
    version: it is used when the root object belongs to the same lineage, in a metadata window (an
    append's placeholder; a root one commit behind or ahead, which a reader racing a commit sees) or
    in step (the same commit, and a root ``.zattrs`` equal to its copy). A root of another lineage or
    of none, or a root ``.zattrs`` changed in step, means another tool changed the store since:
    ``.zmetadata`` is stale and the objects are read. Another tool's ``.zmetadata`` is used on object
    storage when the root objects agree with it, locally never (the objects cost as little to read).
    What no root object shows (another tool changed an array's metadata and did not re-consolidate)
    is not noticed here, as zarr-python and xarray do not notice it: ``zstrings check`` compares
    every object and ``zstrings repair`` re-consolidates."""
    meta = consolidated_meta(zmetadata)
    if meta is None:
        return "objects"
    copy = meta.get(".zgroup")
    ours = version_of(copy)
    here = version_of(root_zgroup)
    if ours is not None:
        if here is None or here.lineage != ours.lineage:
            return "objects"
        if is_placeholder(root_zgroup):  # an append's window, or any write past its commit point
            return "use" if here.kind in ("append", "add") or here.commit == ours.commit else "objects"
        if here.commit != ours.commit:  # a reader racing a commit, or a window left by a killed writer
            return "use"
        # in step by the version record: a root .zattrs another tool changed since is seen here
        return "use" if canonical(root_zattrs) == canonical(meta.get(".zattrs")) else "objects"
    if not remote or is_placeholder(root_zgroup) or root_zgroup is None:
        return "objects"
    same = (canonical(root_zgroup) == canonical(copy)
            and canonical(root_zattrs) == canonical(meta.get(".zattrs")))
    return "use" if same else "objects"
