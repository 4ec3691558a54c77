"""What another tool changed in a Zarr v2 / NCZarr store without keeping our metadata in step:
the per-object metadata (``.zgroup``/``.zattrs``/``.zarray``) compared with the consolidated copy in
``.zmetadata``; the NCZarr keys (and the root's version record) an object lost; arrays added
without being listed in their NCZarr group; unlimited dimensions an array outgrew.

``zstrings check`` reports a ``Drift``, ``repair`` commits its ``mended`` objects and
re-consolidates; writers use ``lost_keys`` (``write.append._base_tree``). Which tools leave each
behind and what readers then see: docs/reliability.md (foreign writers) and docs/format-notes.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ..formats.nczarr import parse_json
from ..formats.netcdf_c import LAYOUTS, NCZarrLayout
from .consolidated import METADATA_NAMES as _NAMES
from .consolidated import VERSION_KEY, canonical
from .zstore import ZStore

__all__ = ["HIDDEN", "Drift", "changed_objects", "find_drift", "lost_keys", "metadata_keys_of"]


#: what an array another tool added to an NCZarr group without listing it is to readers (``Drift.hidden``)
HIDDEN = "not in its group's NCZarr listing (another tool added it): netcdf-c and engine='zstrings' do not see it"


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
    #: arrays another tool added to an NCZarr group without listing them (netcdf-c does not see them)
    hidden: list[str] = field(default_factory=list)
    #: of those, the ones ``mended`` lists (their dimensions named by ``_ARRAY_DIMENSIONS``)
    adopted: list[str] = field(default_factory=list)
    #: unlimited dimensions an array outgrew (another tool appended to it alone): path -> new size
    grown: dict[str, int] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.differ or self.lost or self.hidden or self.grown)

    def stale_text(self) -> str:
        """What ``differ`` means, in words (its first five keys and how many in all)."""
        shown = ", ".join(self.differ[:5]) + (f", ... ({len(self.differ)} in all)" if len(self.differ) > 5 else "")
        return (f"consolidated metadata is stale for {shown}: another tool changed them without re-consolidating, "
                "and readers of .zmetadata (engine='zstrings', engine='zarr') do not see it")

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
        if self.hidden:
            parts.append(f"{', '.join(self.hidden)} {HIDDEN}")
            if self.adopted:
                does.append(f"list {', '.join(self.adopted)} (dimensions from _ARRAY_DIMENSIONS)")
        if self.grown:
            grown = ", ".join(f"{d} ({n})" for d, n in sorted(self.grown.items()))
            parts.append(f"arrays are longer than their unlimited dimension {grown} (another tool appended to them "
                         "alone): netcdf-c and engine='zstrings' refuse the store once .zmetadata shows them")
            does.append(f"grow {grown} and the other arrays on it (fill)")
        if self.differ:
            parts.append(self.stale_text())
        does.append("re-consolidate .zmetadata from the objects")
        return "; ".join(parts), "; then ".join(does)


def metadata_keys_of(meta: Mapping[str, Any], nodes: Iterable[str] | None = None) -> list[str]:
    """Every metadata object key of the nodes a ``.zmetadata`` names (a group's ``.zgroup`` and
    ``.zattrs``, an array's ``.zarray`` and ``.zattrs``), whether or not it names that object; of
    ``nodes`` (group and array paths) only, when given."""
    if nodes is None:
        nodes = {k.rpartition("/")[0] for k in meta if k.rpartition("/")[2] in _NAMES}
    else:
        nodes = {n.strip("/") for n in nodes}
    keys: list[str] = []
    for node in sorted(nodes):
        lead = f"{node}/" if node else ""
        kind = ".zarray" if f"{lead}.zarray" in meta else ".zgroup"
        keys += [lead + kind, lead + ".zattrs"]
    return keys


def _get_json(zs: ZStore, keys: Sequence[str]) -> list[Any]:
    """The objects themselves (never a consolidated copy), None where missing."""
    raws = zs.get_many(list(keys))
    return [None if raw is None else parse_json(bytes(raw), where=zs.where(k), attributes=k.endswith(".zattrs"))
            for k, raw in zip(keys, raws, strict=True)]


def changed_objects(zs: ZStore, keys: Sequence[str], copies: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The metadata objects ``keys`` as the store holds them (one batch of requests, None where
    missing), and those of them that differ from their copy in ``copies`` (a ``.zmetadata``'s
    objects): what another tool changed without re-consolidating."""
    found = dict(zip(keys, _get_json(zs, keys), strict=True))
    return found, [k for k in keys if canonical(found[k]) != canonical(copies.get(k))]


def _ours(key: str, name: str) -> bool:
    """A key only NCZarr (or our version record) writes: what zarr-python drops when it rewrites a
    ``.zgroup``/``.zarray`` from its own model, or xarray when it rewrites a group's attributes."""
    return name.lower().startswith("_nczarr") or (key == ".zgroup" and name == VERSION_KEY)


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
        found, drift.differ = changed_objects(zs, keys, consolidated)
        for k in drift.differ:
            obj, copy = found[k], consolidated.get(k)
            lost = lost_keys(k, obj, copy)
            if lost and isinstance(copy, Mapping):
                drift.lost[k] = lost
                drift.mended[k] = {**(obj or {}), **{n: copy[n] for n in lost}}
        drift.source = ".zmetadata"
        children = _children_of(zs, consolidated)
        drift.differ += _unlisted(zs, consolidated, children)
        _adopt(zs, drift, {**found, **drift.mended}, children)
        _grow(drift, found)
    if drift.lost or not isinstance(root_zgroup, Mapping) or consolidated is not None:
        return drift
    root_zattrs = _get_json(zs, [".zattrs"])[0]
    if _layout_of({".zgroup": root_zgroup, ".zattrs": root_zattrs}) is None:
        _rebuild_root(zs, drift, root_zgroup, root_zattrs if isinstance(root_zattrs, Mapping) else {})
    return drift


def _children_of(zs: ZStore, consolidated: Mapping[str, Any]) -> dict[str, list[str]]:
    """The children (names) of every group ``.zmetadata`` names, as the store lists them."""
    groups = sorted({k.rpartition("/")[0] for k in consolidated if k.rpartition("/")[2] == ".zgroup"})
    return {g: [n for n in zs.list_dir(g) if not n.startswith(".") and n != "zarr.json"] for g in groups}


def _unlisted(zs: ZStore, consolidated: Mapping[str, Any], listed: Mapping[str, list[str]]) -> list[str]:
    """Metadata objects of nodes ``.zmetadata`` does not name (a node another tool added)."""
    named = {k.rpartition("/")[0] for k in consolidated}
    children = [(g, n) for g, names in listed.items() for n in names if (f"{g}/{n}" if g else n) not in named]
    if not children:
        return []
    keys = [f"{g}/{n}/{o}" if g else f"{n}/{o}" for g, n in children for o in (".zarray", ".zgroup")]
    return [k for k, v in zip(keys, _get_json(zs, keys), strict=True) if v is not None]


def _grow(drift: Drift, found: Mapping[str, Any]) -> None:
    """Unlimited dimensions an array outgrew (zarr-python's ``append`` on one array grows its
    ``.zarray`` only): grown to the longest array, and every other array on them to the dimension,
    as netcdf-c requires (their new part reads as fill) and as our appends do (``_grown_alongside``)."""
    objects = {**found, **drift.mended}
    layout = _layout_of(objects)
    if layout is None:
        return
    arrays = _dimensioned_arrays(layout, objects)
    sizes = _outgrown(layout, objects, arrays)
    for ref, n in sizes.items():
        key, sp = _dimension_spec(layout, objects, ref)
        g, _, name = ref.strip("/").rpartition("/")
        _group_update(drift, layout, g, objects, lambda i, name=name, sp=sp, n=n: {
            **i, layout.dims_key: {**i.get(layout.dims_key, {}), name: {**sp, "size": n}}})
        objects[key] = drift.mended[key]
        drift.grown["/" + ref.strip("/")] = n
    for node, (refs, shape) in arrays.items():
        new = [max(s, sizes.get(r, 0)) if isinstance(s, int) else s for r, s in zip(refs, shape, strict=True)]
        if new != shape:
            key = f"{node}/.zarray" if node else ".zarray"
            drift.mended[key] = {**objects[key], "shape": new}


def _refs_and_shape(layout: NCZarrLayout, zarray: Any, zattrs: Any) -> tuple[list[Any], list[Any]] | None:
    """An NCZarr array's dimension references and shape; None unless both are lists of one length."""
    info = _array_info(layout, zarray, zattrs)
    refs = info.get(layout.dimrefs_key) if isinstance(info, Mapping) else None
    shape = zarray.get("shape") if isinstance(zarray, Mapping) else None
    if not isinstance(refs, list) or not isinstance(shape, list) or len(refs) != len(shape):
        return None
    return refs, shape


def _dimensioned_arrays(layout: NCZarrLayout, objects: Mapping[str, Any]) -> dict[str, tuple[list[str], list[Any]]]:
    """Array node -> (its NCZarr dimension references, its shape), of the arrays in ``objects`` that have both."""
    arrays: dict[str, tuple[list[str], list[Any]]] = {}
    for key, zarray in objects.items():
        node, _, name = key.rpartition("/")
        if name != ".zarray" or not isinstance(zarray, Mapping):
            continue
        found = _refs_and_shape(layout, zarray, objects.get(f"{node}/.zattrs" if node else ".zattrs"))
        if found is not None:
            arrays[node] = ([str(r) for r in found[0]], found[1])
    return arrays


def _dimension_spec(layout: NCZarrLayout, objects: Mapping[str, Any], ref: str) -> tuple[str, Any]:
    """(the key of the object listing dimension ``ref``'s group, the dimension's entry there or None)."""
    g, _, name = ref.strip("/").rpartition("/")
    gkey = layout.obj("group")
    key = f"{g}/{gkey}" if g else gkey
    info = (objects.get(key) or {}).get(layout.key("group")) if isinstance(objects.get(key), Mapping) else None
    return key, (info or {}).get(layout.dims_key, {}).get(name) if isinstance(info, Mapping) else None


def _outgrown(layout: NCZarrLayout, objects: Mapping[str, Any],
              arrays: Mapping[str, tuple[list[str], list[Any]]]) -> dict[str, int]:
    """Unlimited dimension reference -> the longest array length along it, of those an array outgrew."""
    sizes: dict[str, int] = {}
    for refs, shape in arrays.values():
        for ref, n in zip(refs, shape, strict=True):
            _, sp = _dimension_spec(layout, objects, ref)
            if isinstance(sp, Mapping) and sp.get("unlimited") and isinstance(n, int) and n > int(sp.get("size", 0)):
                sizes[ref] = max(sizes.get(ref, 0), n)
    return sizes


def _layout_of(objects: Mapping[str, Any]) -> NCZarrLayout | None:
    """The NCZarr layout whose superblock the root objects (``objects[".zgroup"]``/``[".zattrs"]``) hold."""
    for layout in LAYOUTS:
        for o, k in layout.superblock:
            holder = objects.get(o)
            if k is not None and layout.scalar is not None and isinstance(holder, Mapping) and k in holder:
                return layout
    return None


def _listing(layout: NCZarrLayout, drift: Drift, objects: Mapping[str, Any], g: str) -> Mapping[str, Any] | None:
    """Group ``g``'s NCZarr listing (dimensions, arrays, groups), as mended so far; None without one."""
    gkey = layout.obj("group")
    key = f"{g}/{gkey}" if g else gkey
    obj = drift.mended.get(key, objects.get(key))
    found = obj.get(layout.key("group")) if isinstance(obj, Mapping) else None
    return found if isinstance(found, Mapping) else None


def _adopt(zs: ZStore, drift: Drift, objects: Mapping[str, Any], children: Mapping[str, list[str]]) -> None:
    """Arrays another tool added to an NCZarr group without listing them (xarray's ``to_zarr(mode="a")``):
    netcdf-c and engine="zstrings" read a group's listing, so they do not see them. Each is listed,
    with NCZarr dimension references from its ``_ARRAY_DIMENSIONS`` (``_references``): ``drift.hidden``
    names them, ``drift.mended`` holds the objects that list them."""
    layout = _layout_of(objects)
    if layout is None:
        return
    info = partial(_listing, layout, drift, objects)
    new = [(g, n) for g, names in children.items() if info(g) is not None for n in names
           if n not in (info(g) or {}).get(layout.arrays_key, []) and n not in (info(g) or {}).get("groups", [])]
    if not new:
        return
    keys = [f"{g}/{n}/{o}" if g else f"{n}/{o}" for g, n in new for o in (".zarray", ".zattrs")]
    got = dict(zip(keys, _get_json(zs, keys), strict=True))
    for g, n in new:
        _adopt_one(layout, drift, objects, info, g, n, got)


def _adopt_one(layout: NCZarrLayout, drift: Drift, objects: Mapping[str, Any], info: Any, g: str, n: str,
               got: Mapping[str, Any]) -> None:
    """List array ``n`` of group ``g`` (its objects in ``got``) when ``_ARRAY_DIMENSIONS`` names every axis."""
    lead = f"{g}/{n}/" if g else f"{n}/"
    zarray, zattrs = got[lead + ".zarray"], got[lead + ".zattrs"] or {}
    if not isinstance(zarray, Mapping) or not isinstance(zattrs, Mapping):
        return  # (a group: netcdf-c ignores an unlisted group too; not adopted)
    path = f"/{g}/{n}" if g else f"/{n}"
    drift.hidden.append(path)
    refs = _references(layout, g, zattrs.get("_ARRAY_DIMENSIONS"), zarray.get("shape"), info, drift, objects)
    if refs is None:
        return  # (no _ARRAY_DIMENSIONS naming every axis: left unlisted, said so)
    akey = layout.obj("array")
    holder = dict(zarray if akey == ".zarray" else zattrs)
    holder[layout.key("array")] = layout.array_info(refs, scalar=False)
    if akey == ".zattrs" and layout.in_zattrs:
        types = dict(holder.get(layout.key("attr"), {}).get("types", {}))
        holder[layout.key("attr")] = {"types": {**types, layout.key("array"): "|J0"}}
    drift.mended[lead + akey] = holder
    _group_update(drift, layout, g, objects, lambda i, n=n: {**i, layout.arrays_key: [*i.get(layout.arrays_key, []), n]})
    drift.adopted.append(path)


def _group_update(drift: Drift, layout: NCZarrLayout, g: str, objects: Mapping[str, Any], change: Any) -> None:
    """``drift.mended``'s copy of group ``g``'s listing object with ``change(info)`` applied."""
    key = f"{g}/{layout.obj('group')}" if g else layout.obj("group")
    obj = dict(drift.mended.get(key, objects.get(key)) or {})
    obj[layout.key("group")] = change(dict(obj.get(layout.key("group")) or {}))
    drift.mended[key] = obj


def _references(layout: NCZarrLayout, g: str, names: Any, shape: Any, info: Any, drift: Drift,
                objects: Mapping[str, Any]) -> list[str] | None:
    """NCZarr dimension references for an array of group ``g`` with ``_ARRAY_DIMENSIONS`` ``names``:
    the dimension of that name ``g`` or the nearest group above declares, else a new one at the root
    (where netcdf-c's pure Zarr reading puts it); None when the names do not name every axis or the
    dimension found has another size."""
    if not isinstance(names, list) or not isinstance(shape, list) or len(names) != len(shape):
        return None
    refs = []
    for name, size in zip(names, shape, strict=True):
        parts = [p for p in g.split("/") if p]
        for i in range(len(parts), -1, -1):  # the nearest group declaring it: at this size, or a conflict
            here = "/".join(parts[:i])
            spec = (info(here) or {}).get(layout.dims_key, {}).get(name)
            if spec is not None:
                if (spec.get("size") if isinstance(spec, Mapping) else spec) != size:
                    return None
                refs.append(f"/{here}/{name}" if here else f"/{name}")
                break
        else:  # declared nowhere above: at the root
            _group_update(drift, layout, "", objects,
                          lambda i, name=name, size=size: {**i, layout.dims_key: {**i.get(layout.dims_key, {}), name: size}})
            refs.append(f"/{name}")
    return refs


def _rebuild_root(zs: ZStore, drift: Drift, root_zgroup: Mapping[str, Any], root_zattrs: Mapping[str, Any]) -> None:
    """The NCZarr keys of a root that lost them and has no copy in ``.zmetadata``, rebuilt from what
    the arrays still hold (their NCZarr dimension references name the root's dimensions, their
    shapes give the sizes) into ``drift``; nothing when no array of the root is an NCZarr array. An
    array of the root without NCZarr information (another tool's) gets it from its
    ``_ARRAY_DIMENSIONS`` (``_adopt``). Whether a dimension was unlimited is in no array: it comes
    back fixed."""
    arrays, groups = _children(zs, "")
    layout = _array_layout(arrays.values())
    if layout is None:
        return
    dims, ours = _root_dimensions(zs, layout, arrays, groups)
    objects = _root_objects(layout, root_zgroup, root_zattrs, {layout.dims_key: dims, layout.arrays_key: sorted(ours),
                                                               "groups": sorted(groups)})
    before = {".zgroup": set(root_zgroup), ".zattrs": set(root_zattrs)}
    for key, obj in objects.items():
        lost = [k for k in obj if k not in before[key]]
        if lost:
            drift.lost[key], drift.mended[key] = lost, obj
    drift.source = "the arrays' dimension references and shapes"
    _adopt(zs, drift, objects, {"": [n for n in arrays if n not in ours]})


def _root_dimensions(zs: ZStore, layout: NCZarrLayout, arrays: Mapping[str, tuple[Any, Any]],
                     groups: list[str]) -> tuple[dict[str, int], list[str]]:
    """(the root's dimensions: name -> the longest length an array of the tree has along it, the
    root's arrays that are NCZarr arrays)."""
    dims: dict[str, int] = {}
    ours: list[str] = []
    for name, (zarray, zattrs) in [*arrays.items(), *(("", a) for a in _below(zs, list(groups)))]:
        found = _refs_and_shape(layout, zarray, zattrs)
        if found is None:
            continue
        if name:
            ours.append(name)
        for ref, n in zip(*found, strict=True):
            parts = str(ref).strip("/").split("/")
            if len(parts) == 1 and parts[0]:
                dims[parts[0]] = max(dims.get(parts[0], 0), int(n))
    return dims, ours


def _root_objects(layout: NCZarrLayout, root_zgroup: Mapping[str, Any], root_zattrs: Mapping[str, Any],
                  listing: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The root's ``.zgroup`` and ``.zattrs`` with the NCZarr superblock and group ``listing`` put back."""
    objects = {".zgroup": dict(root_zgroup), ".zattrs": dict(root_zattrs)}
    objects[layout.obj("superblock")][layout.key("superblock")] = {"version": "2.0.0"}
    objects[layout.obj("group")][layout.key("group")] = listing
    if layout.in_zattrs:  # (typed as netcdf-c 4.10 types them)
        za = objects[".zattrs"]
        types = dict((za.get(layout.key("attr")) or {}).get("types", {}))
        za[layout.key("attr")] = {"types": {**types, **dict.fromkeys(
            (layout.key("superblock"), layout.key("group"), layout.key("attr")), "|J0")}}
    return objects


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
    """The NCZarr layout whose array information the arrays hold (one that can be extended)."""
    for zarray, zattrs in arrays:
        for layout in LAYOUTS:
            if layout.scalar is not None and layout.group and any(
                    isinstance(h, Mapping) and k in h for o, k in layout.array
                    for h in [zarray if o == ".zarray" else zattrs]):
                return layout
    return None


def _array_info(layout: NCZarrLayout, zarray: Any, zattrs: Any) -> Any:
    for o, k in layout.array:
        holder = zarray if o == ".zarray" else zattrs
        if isinstance(holder, Mapping) and k in holder:
            return holder[k]
    return None

