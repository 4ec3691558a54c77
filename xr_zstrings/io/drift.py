"""What another tool changed in a Zarr v2 / NCZarr store without keeping our metadata in step:
the per-object metadata (``.zgroup``/``.zattrs``/``.zarray``) compared with the consolidated copy in
``.zmetadata``, and a root ``.zgroup`` that lost its NCZarr keys or our version record.

Readers keep serving ``.zmetadata`` while the root says it is in step (``commit.consolidated_view``,
as zarr-python's consolidated readers do), so a change another tool made to an array's objects
without re-consolidating shows only after ``repair`` (which re-consolidates). zarr-python's
``group.attrs[...] = ...`` on a store opened without consolidated metadata rewrites the root
``.zgroup`` as ``{"zarr_format": 2}``: netcdf-c then reads the store as pure Zarr (no superblock:
docs/format-notes.md), and ``repair`` puts the keys back. ``zstrings check`` and ``repair`` use this
module; writers do not (``write.append._base_tree`` compares the objects it rewrites itself).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..formats.nczarr import parse_json
from ..formats.netcdf_c import LAYOUTS, NCZarrLayout
from .zstore import ZStore

__all__ = ["Drift", "find_drift", "lost_keys", "metadata_keys_of"]

_NAMES = (".zgroup", ".zattrs", ".zarray")
_VERSION_KEY = "xr_zstrings"  # (io.commit.VERSION_KEY: that module imports this one's users)
#: the NCZarr keys a root ``.zgroup`` holds in some layout
_ROOT_KEYS = tuple(dict.fromkeys(k for layout in LAYOUTS for o, k in (*layout.superblock, *layout.group)
                                 if o == ".zgroup" and k is not None))


@dataclass
class Drift:
    """Where the per-object metadata and ``.zmetadata`` disagree, and what objects lost."""

    #: metadata keys whose object differs from its copy in ``.zmetadata`` (or is only on one side)
    differ: list[str] = field(default_factory=list)
    #: metadata key -> the keys its object lost (NCZarr keys; the root ``.zgroup``'s version record)
    lost: dict[str, list[str]] = field(default_factory=dict)
    #: metadata key -> its object with what it lost put back
    mended: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: where the lost keys come back from: ".zmetadata" or "the arrays"
    source: str = ""

    def __bool__(self) -> bool:
        return bool(self.differ or self.lost)

    def lost_text(self) -> str:
        """``/.zgroup``: ``_nczarr_group``, ... in words."""
        return "; ".join(f"{'/' + k if '/' not in k else k} lost {', '.join(v)}" for k, v in sorted(self.lost.items()))

    def describe(self) -> tuple[str, str]:
        """(what is wrong, what ``repair`` does), in words (``zstrings check``'s state line)."""
        parts, does = [], []
        if self.lost:
            effects = []
            if any(k.endswith(".zarray") for k in self.lost):
                effects.append("netcdf-c refuses an NCZarr array without its _nczarr_array ('NCZarr error')")
            if ".zgroup" in self.lost or ".zattrs" in self.lost:
                effects.append("netcdf-c and engine='zstrings' read a root without its NCZarr superblock as pure "
                               "Zarr (no NCZarr dimensions)")
            parts.append(f"{self.lost_text()} (another tool rewrote them: zarr-python's attrs[...] = ... does)"
                         + (f"; {'; '.join(effects)}" if effects else ""))
            does.append(f"put the lost keys back (from {self.source})")
        if self.differ:
            shown = ", ".join(self.differ[:5]) + (f", ... ({len(self.differ)} in all)" if len(self.differ) > 5 else "")
            parts.append(f"consolidated metadata is stale for {shown}: another tool changed them without "
                         "re-consolidating, and readers of .zmetadata (engine='zstrings', engine='zarr') do not "
                         "see it")
        does.append("re-consolidate .zmetadata from the objects")
        return "; ".join(parts), "; then ".join(does)


def metadata_keys_of(meta: Mapping[str, Any]) -> list[str]:
    """Every metadata object key of the nodes a ``.zmetadata`` names (a group's ``.zgroup`` and
    ``.zattrs``, an array's ``.zarray`` and ``.zattrs``), whether or not it names that object."""
    nodes = {k.rpartition("/")[0] for k in meta if k.rpartition("/")[2] in _NAMES}
    keys: list[str] = []
    for node in sorted(nodes):
        lead = f"{node}/" if node else ""
        kind = ".zarray" if f"{lead}.zarray" in meta else ".zgroup"
        keys += [lead + kind, lead + ".zattrs"]
    return keys


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=str)


def _get_json(zs: ZStore, keys: Sequence[str]) -> list[Any]:
    """The objects themselves (never a consolidated copy), None where missing."""
    raws = zs.get_many(list(keys))
    return [None if raw is None else parse_json(bytes(raw), where=zs.where(k), attributes=k.endswith(".zattrs"))
            for k, raw in zip(keys, raws, strict=True)]


def _ours(key: str, name: str) -> bool:
    """A key only NCZarr (or our version record) writes: what zarr-python drops when it rewrites a
    ``.zgroup``/``.zarray`` from its own model, or xarray when it rewrites a group's attributes."""
    return name.lower().startswith("_nczarr") or (key == ".zgroup" and name == _VERSION_KEY)


def lost_keys(key: str, obj: Any, copy: Any) -> list[str]:
    """The keys of metadata object ``key`` (``obj``; a ``.zattrs`` removed counts as empty) that its
    consolidated ``copy`` holds and it lost: NCZarr keys (netcdf-c 4.9.4's layout keeps them in
    ``.zattrs``), the root's version record."""
    if obj is None and key.endswith(".zattrs"):
        obj = {}
    if not isinstance(obj, Mapping) or not isinstance(copy, Mapping):
        return []
    return [n for n in copy if _ours(key, n) and n not in obj]


def find_drift(zs: ZStore, consolidated: Mapping[str, Any] | None, root_zgroup: Any) -> Drift:
    """Compare every metadata object of ``zs`` with ``consolidated`` (the objects ``.zmetadata``
    holds; None without one) and find what its ``.zgroup``/``.zarray`` objects lost (``root_zgroup``:
    the root's, already read). Costs a request per metadata object ``.zmetadata`` names and a listing
    per group it names; without one, a listing and a request per object of the tree when the root
    lost its NCZarr keys."""
    drift = Drift()
    if consolidated is not None:
        keys = metadata_keys_of(consolidated)
        found = dict(zip(keys, _get_json(zs, keys), strict=True))
        drift.differ = [k for k in keys if _canonical(found[k]) != _canonical(consolidated.get(k))]
        for k in drift.differ:
            obj, copy = found[k], consolidated.get(k)
            lost = lost_keys(k, obj, copy)
            if lost and isinstance(copy, Mapping):
                drift.lost[k] = lost
                drift.mended[k] = {**(obj or {}), **{n: copy[n] for n in lost}}
        drift.source = ".zmetadata"
        drift.differ += _unlisted(zs, consolidated)
    if drift.lost or not isinstance(root_zgroup, Mapping) or any(k in root_zgroup for k in _ROOT_KEYS):
        return drift
    rebuilt = _rebuild_root(zs)
    if rebuilt is not None:
        drift.lost[".zgroup"] = [k for k in rebuilt if k not in root_zgroup]
        drift.mended[".zgroup"] = {**root_zgroup, **rebuilt}
        drift.source = "the arrays (their dimension references and shapes)"
    return drift


def _unlisted(zs: ZStore, consolidated: Mapping[str, Any]) -> list[str]:
    """Metadata objects of nodes ``.zmetadata`` does not name (a node another tool added): one
    listing per group it names."""
    groups = sorted({k.rpartition("/")[0] for k in consolidated if k.rpartition("/")[2] == ".zgroup"})
    named = {k.rpartition("/")[0] for k in consolidated}
    children = [(g, n) for g in groups for n in zs.list_dir(g)
                if not n.startswith(".") and n != "zarr.json" and (f"{g}/{n}" if g else n) not in named]
    if not children:
        return []
    keys = [f"{g}/{n}/{o}" if g else f"{n}/{o}" for g, n in children for o in (".zarray", ".zgroup")]
    return [k for k, v in zip(keys, _get_json(zs, keys), strict=True) if v is not None]


def _rebuild_root(zs: ZStore) -> dict[str, Any] | None:
    """The NCZarr keys of a root ``.zgroup`` that lost them and has no copy in ``.zmetadata``:
    rebuilt from what the arrays still hold (their NCZarr dimension references name the root's
    dimensions, their shapes give the sizes); None when no array of the root is an NCZarr array.
    Whether a dimension was unlimited is not in any array: it comes back fixed."""
    arrays, groups = _children(zs, "")
    layout = _array_layout(arrays.values())
    if layout is None:
        return None
    dims: dict[str, int] = {}
    for zarray, zattrs in [*arrays.values(), *_below(zs, list(groups))]:
        info = _array_info(layout, zarray, zattrs)
        refs = info.get(layout.dimrefs_key) if isinstance(info, Mapping) else None
        shape = zarray.get("shape") if isinstance(zarray, Mapping) else None
        if not isinstance(refs, list) or not isinstance(shape, list) or len(refs) != len(shape):
            continue
        for ref, n in zip(refs, shape, strict=True):
            parts = str(ref).strip("/").split("/")
            if len(parts) == 1 and parts[0]:
                dims[parts[0]] = max(dims.get(parts[0], 0), int(n))
    return {layout.key("superblock"): {"version": "2.0.0"},
            layout.key("group"): {layout.dims_key: dims, layout.arrays_key: sorted(arrays), "groups": sorted(groups)}}


def _children(zs: ZStore, path: str) -> tuple[dict[str, tuple[Any, Any]], list[str]]:
    """A group's arrays (name -> (.zarray, .zattrs)) and subgroups (paths)."""
    names = [n for n in zs.list_dir(path) if not n.startswith(".") and n != "zarr.json"]
    lead = f"{path}/" if path else ""
    keys = [f"{lead}{n}/{o}" for n in names for o in _NAMES]
    objs = _get_json(zs, keys)
    arrays: dict[str, tuple[Any, Any]] = {}
    groups: list[str] = []
    for i, n in enumerate(names):
        zgroup, zattrs, zarray = objs[3 * i : 3 * i + 3]
        if zarray is not None:
            arrays[n] = (zarray, zattrs)
        elif zgroup is not None:
            groups.append(lead + n)
    return arrays, groups


def _below(zs: ZStore, groups: list[str]) -> list[tuple[Any, Any]]:
    """Every array's (.zarray, .zattrs) in ``groups`` and their subgroups."""
    out: list[tuple[Any, Any]] = []
    while groups:
        g = groups.pop()
        arrays, sub = _children(zs, g)
        out += arrays.values()
        groups += sub
    return out


def _array_layout(arrays: Any) -> NCZarrLayout | None:
    """The NCZarr layout whose array information the arrays hold (in ``.zarray`` only: a layout that
    keeps it in ``.zattrs`` keeps the superblock there too, which zarr-python does not drop)."""
    for zarray, _ in arrays:
        for layout in LAYOUTS:
            if layout.group and layout.obj("group") == ".zgroup" and isinstance(zarray, Mapping) \
                    and any(o == ".zarray" and k in zarray for o, k in layout.array):
                return layout
    return None


def _array_info(layout: NCZarrLayout, zarray: Any, zattrs: Any) -> Any:
    for o, k in layout.array:
        holder = zarray if o == ".zarray" else zattrs
        if isinstance(holder, Mapping) and k in holder:
            return holder[k]
    return None

