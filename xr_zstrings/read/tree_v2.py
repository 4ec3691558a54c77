"""The metadata tree of a Zarr v2 store in every NCZarr generation (and of pure Zarr v2).

Read level by level (breadth first), one batch of concurrent requests per level, using the NCZarr
group listings where they exist instead of listing keys. A store without a root ``.zgroup`` is read
when it is plainly Zarr (with a warning) and refused when it is an interrupted NCZarr write.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import IncompleteStoreError, MetadataError, StoreNotFoundError, UnsupportedError, user_stacklevel
from ..formats.nczarr import NC_DEFAULT_MAXSTRLEN, NodeObjects, check_name, parse_array, parse_group
from ..formats.netcdf_c import places
from ..io.zstore import ZStore
from .paths import join_path as _join
from .paths import node_key as _key

if TYPE_CHECKING:
    from .tree import TreeMeta

__all__ = ["ROOT_OBJECTS", "walk"]

_GROUP_OBJECTS = (".zgroup", ".zattrs")
_GROUP_OBJECTS_V1 = (".nczgroup", ".nczattr", ".nczattrs")
_ARRAY_OBJECTS = (".zarray", ".zattrs")
_ARRAY_OBJECTS_V1 = (".nczvar", ".nczarray", ".nczattr", ".nczattrs")
#: the root objects of every generation, fetched together (``tree.open_tree`` adds ``zarr.json``)
ROOT_OBJECTS = _GROUP_OBJECTS + (".nczarr", ".nczgroup", ".nczattr", ".nczattrs")
# what netcdf-c's #mode=zarr ignores: NCZarr's structure (dimensions, listings, references); it
# still types attributes by _nczarr_attr (netcdf-c 4.10.1 does, tests/interop/test_netcdf_c_parity.py)
_NCZARR_STRUCTURE = tuple(dict.fromkeys(key for what in ("superblock", "group", "array")
                                        for _, key in places(what) if key is not None))
_NCZARR_V1_STRUCTURE = tuple(obj for what in ("superblock", "group", "array") for obj, key in places(what) if key is None)


def _pure_zarr(objs: dict[str, Any], *, noxarray: bool) -> dict[str, Any]:
    """A node's metadata objects as netcdf-c's ``#mode=zarr`` reads them: without NCZarr's
    structure keys (and, with ``noxarray``, without ``_ARRAY_DIMENSIONS``)."""
    out = dict(objs)
    drop = _NCZARR_STRUCTURE + (("_ARRAY_DIMENSIONS",) if noxarray else ())
    for name in (".zgroup", ".zarray", ".zattrs"):
        obj = out.get(name)
        if isinstance(obj, dict) and any(k in obj for k in drop):
            out[name] = {k: v for k, v in obj.items() if k not in drop}
    for name in _NCZARR_V1_STRUCTURE:
        if name in out:
            out[name] = None
    return out


def _has_nczarr_markers(obj: Any) -> bool:
    """Whether a metadata object carries any NCZarr key (``_nczarr_*``/``_NCZARR_*``)."""
    return isinstance(obj, dict) and any(str(k).lower().startswith("_nczarr") for k in obj)


@dataclass(frozen=True)
class _Walk:
    """What every level of one store's walk reads by: the store, netcdf-c's ``#mode=zarr``
    (``pure``, ``noxarray``), the NCZarr generation (``v1``: its extra objects) and the root's
    defaults for its arrays."""

    store: ZStore
    pure: bool
    noxarray: bool
    v1: bool
    default_maxstrlen: int | None
    netcdf_c: bool


def walk(tree: TreeMeta, root_objs: dict[str, Any], zmetadata: Any) -> None:
    """Read every group and array below the root (whose objects ``root_objs`` holds) into ``tree``
    (from consolidated metadata when ``tree.open_tree`` chose to serve them; ``zmetadata`` is only
    used for a store without a root ``.zgroup``).

    Each level is one batch: list the groups NCZarr does not list (``_discover``), fetch every
    object of the next level at once (``_fetch_level``), then parse its arrays and groups.
    """
    w = _read_root(tree, root_objs, zmetadata)
    level = ["/"]
    while level:
        # (arrays found unreadable below are taken out of their group's listing at the end)
        listed, candidates = _discover(w, tree, level)
        objs = _fetch_level(w, listed, candidates)
        next_level: list[str] = []
        for gpath in level:
            arrays_here, groups_here = listed[gpath] if gpath in listed else _found(gpath, candidates, objs)
            tree.children[gpath] = (arrays_here, groups_here)
            _parse_arrays(w, tree, gpath, arrays_here, objs)
            next_level += _parse_groups(w, tree, gpath, groups_here, objs)
        level = next_level
    _unlist_unreadable(tree)


def _read_root(tree: TreeMeta, root_objs: dict[str, Any], zmetadata: Any) -> _Walk:
    """The root group parsed into ``tree`` and what the walk below it reads by."""
    zstore = tree.store
    if root_objs[".zgroup"] is None and root_objs[".nczgroup"] is None:
        if zstore.get_bytes(".zarray") is not None:
            raise MetadataError(
                f"{zstore.display} is a single Zarr array, not a group: expected .zgroup at the root."
            )
        root_objs = _missing_root(zstore, root_objs, zmetadata)
    pure = zstore.read_mode == "zarr"
    noxarray = pure and "noxarray" in zstore.modes
    if pure:
        root_objs = _pure_zarr(root_objs, noxarray=noxarray)
    v1 = root_objs[".nczarr"] is not None or root_objs[".nczgroup"] is not None
    root = parse_group(NodeObjects("/", root_objs), store=zstore.display)
    tree.groups["/"] = root
    if not root.is_nczarr and not v1:
        # netcdf-c reads a root without an NCZarr superblock as pure Zarr, whatever the arrays'
        # NCZarr keys say (zinfer.c; docs/format-notes.md): so do we (a root rewritten by zarr-python)
        pure = True
    default_maxstrlen = root.default_maxstrlen
    if root.is_nczarr and default_maxstrlen is None:
        default_maxstrlen = NC_DEFAULT_MAXSTRLEN
    return _Walk(zstore, pure, noxarray, v1, default_maxstrlen, netcdf_c=root.nc_properties is not None)


def _discover(w: _Walk, tree: TreeMeta, level: list[str]) -> tuple[dict[str, tuple[list[str], list[str]]],
                                                                  list[tuple[str, str]]]:
    """Each group's children: ``listed`` (gpath -> (arrays, groups)) from its NCZarr listing, else
    the store's keys below it as ``candidates`` ((parent, child path)) to probe."""
    candidates: list[tuple[str, str]] = []
    listed: dict[str, tuple[list[str], list[str]]] = {}
    for gpath in level:
        g = tree.groups[gpath]
        if g.arrays is not None and g.groups is not None:
            listed[gpath] = (list(g.arrays), list(g.groups))
        else:
            names = [
                check_name(n, where=w.store.where(gpath))
                for n in w.store.list_dir(gpath.strip("/"))
                if not n.startswith(".") and n != "zarr.json"
            ]
            for n in names:
                candidates.append((gpath, _join(gpath, n)))
    return listed, candidates


def _fetch_level(w: _Walk, listed: dict[str, tuple[list[str], list[str]]],
                 candidates: list[tuple[str, str]]) -> dict[str, dict[str, Any]]:
    """Every metadata object of the next level, fetched at once: path -> {object name: JSON}.

    An unlisted child is probed as an array first (.zarray, .zattrs: the usual case, one request
    fewer per variable than probing .zgroup too); only the others as groups, after."""
    array_objs = _ARRAY_OBJECTS + (_ARRAY_OBJECTS_V1 if w.v1 else ())
    group_objs = _GROUP_OBJECTS + (_GROUP_OBJECTS_V1 if w.v1 else ())
    wanted: list[tuple[str, str]] = []  # (path, object)
    for gpath, (arrays, groups) in listed.items():
        for a in arrays:
            wanted += [(_join(gpath, a), name) for name in array_objs]
        for c in groups:
            wanted += [(_join(gpath, c), name) for name in group_objs]
    for _, cpath in candidates:
        wanted += [(cpath, name) for name in (".zarray", ".zattrs")]
    values = w.store.get_json_many([_key(p, name) for p, name in wanted]) if wanted else []
    objs: dict[str, dict[str, Any]] = {}
    for (p, obj_name), v in zip(wanted, values, strict=True):
        objs.setdefault(p, {})[obj_name] = v
    not_arrays = [cpath for _, cpath in candidates if objs[cpath][".zarray"] is None]
    if not_arrays:
        zgroups = w.store.get_json_many([_key(p, ".zgroup") for p in not_arrays])
        for p, v in zip(not_arrays, zgroups, strict=True):
            objs[p][".zgroup"] = v
    if w.pure:
        objs = {p: _pure_zarr(node, noxarray=w.noxarray) for p, node in objs.items()}
    return objs


def _found(gpath: str, candidates: list[tuple[str, str]], objs: dict[str, dict[str, Any]]) -> tuple[list[str],
                                                                                                    list[str]]:
    """The arrays and groups among an unlisted group's probed children."""
    arrays_here: list[str] = []
    groups_here: list[str] = []
    for parent, cpath in candidates:
        if parent != gpath:
            continue
        o = objs[cpath]
        name = cpath.rsplit("/", 1)[-1]
        if o.get(".zarray") is not None:
            arrays_here.append(name)
        elif o.get(".zgroup") is not None:
            groups_here.append(name)
    return arrays_here, groups_here


def _parse_arrays(w: _Walk, tree: TreeMeta, gpath: str, arrays: list[str], objs: dict[str, dict[str, Any]]) -> None:
    """A group's arrays parsed into ``tree.arrays`` (an undecodable one into ``tree.unreadable``)."""
    for a in list(arrays):
        apath = _join(gpath, a)
        o = objs.get(apath, {})
        if o.get(".zarray") is None:
            raise MetadataError(
                f"Group {gpath!r} of {w.store.display} lists array {a!r} but key "
                f"{_key(apath, '.zarray')!r} is missing. The store is incomplete (an interrupted "
                "write?) or the listing is stale; rewrite the store."
            )
        try:
            tree.arrays[apath] = parse_array(
                NodeObjects(apath, o), store=w.store.display, default_maxstrlen=w.default_maxstrlen,
                netcdf_c=w.netcdf_c,
            )
        except UnsupportedError as e:  # one undecodable array does not block its group
            tree.unreadable[apath] = str(e)


def _parse_groups(w: _Walk, tree: TreeMeta, gpath: str, groups: list[str],
                  objs: dict[str, dict[str, Any]]) -> list[str]:
    """A group's subgroups parsed into ``tree.groups``; their paths (the next level)."""
    out: list[str] = []
    for c in groups:
        cpath = _join(gpath, c)
        o = objs.get(cpath, {})
        if o.get(".zgroup") is None and o.get(".nczgroup") is None:
            raise MetadataError(
                f"Group {gpath!r} of {w.store.display} lists subgroup {c!r} but key "
                f"{_key(cpath, '.zgroup')!r} is missing. The store is incomplete; rewrite it."
            )
        tree.groups[cpath] = parse_group(NodeObjects(cpath, o), store=w.store.display)
        out.append(cpath)
    return out


def _unlist_unreadable(tree: TreeMeta) -> None:
    for apath in tree.unreadable:
        parent, _, name = apath.rpartition("/")
        arrays = tree.children.get(parent or "/", ([], []))[0]
        if name in arrays:
            arrays.remove(name)


def _missing_root(zstore: ZStore, root_objs: dict[str, Any], zmetadata: Any) -> dict[str, Any]:
    """A store without a root ``.zgroup``: read it when it is plainly Zarr (its consolidated
    ``.zmetadata``, else arrays/groups below the root), with a warning naming what is missing;
    refuse it when it carries NCZarr metadata (what an interrupted ``to_nczarr`` leaves)."""
    raw = zstore.get_bytes(".zgroup")
    if raw is not None:  # there, but JSON null: damaged, not missing
        raise MetadataError(
            f"Invalid metadata at {zstore.where('.zgroup')}: got {bytes(raw[:40])!r}, expected a JSON "
            "object such as {\"zarr_format\": 2}. Fix or rewrite the root '.zgroup'."
        )
    if any(_has_nczarr_markers(v) for v in root_objs.values()):
        raise _interrupted(zstore)
    meta = zmetadata.get("metadata") if isinstance(zmetadata, dict) else None
    if isinstance(meta, dict) and zstore.use_consolidated(zmetadata, force=True):
        return _root_from_consolidated(zstore, root_objs, meta)
    return _implicit_root(zstore, root_objs)


def _interrupted(zstore: ZStore) -> IncompleteStoreError:
    """The error for a store with NCZarr metadata but no root ``.zgroup``."""
    return IncompleteStoreError(
        f"Store {zstore.display} is incomplete: it has NCZarr data but no root '.zgroup' (an "
        "interrupted write?). Rewrite it (to_nczarr(..., mode='w'))."
    )


def _root_from_consolidated(zstore: ZStore, root_objs: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """``_missing_root`` of a store with consolidated ``.zmetadata``: the root group as it lists it."""
    if any(_has_nczarr_markers(v) for v in meta.values()):
        raise _interrupted(zstore)
    warnings.warn(
        f"{zstore.display} has no root '.zgroup' object; reading every group and array from its "
        "consolidated '.zmetadata' (as zarr.open_consolidated and xarray's engine='zarr' do). "
        "Write the missing objects (zarr.open_group(...) on a copy) to silence this.",
        UserWarning, stacklevel=user_stacklevel(),
    )
    objs = dict(root_objs)
    objs[".zgroup"] = meta.get(".zgroup") or {"zarr_format": 2}
    objs[".zattrs"] = meta.get(".zattrs", objs[".zattrs"])
    return objs


def _implicit_root(zstore: ZStore, root_objs: dict[str, Any]) -> dict[str, Any]:
    """``_missing_root`` of a store without consolidated metadata: an implicit root group when Zarr
    arrays or groups lie below the root, else StoreNotFoundError."""
    names = [n for n in zstore.list_dir("") if not n.startswith(".")]
    if not names:
        raise StoreNotFoundError(
            f"No Zarr group at {zstore.display}: key '.zgroup' is missing. Expected an NCZarr or Zarr v2 "
            "store (a directory with .zgroup); check the path."
        )
    probes = [(n, o) for n in names for o in (".zarray", ".zgroup", ".zattrs")]
    found = dict(zip(probes, zstore.get_json_many([f"{n}/{o}" for n, o in probes]), strict=True))
    if any(_has_nczarr_markers(v) for v in found.values()):
        raise _interrupted(zstore)
    nodes = sorted({n for (n, o), v in found.items() if v is not None and o != ".zattrs"})
    if not nodes:
        shown = ", ".join(names[:5]) + (f", ... ({len(names)} in all)" if len(names) > 5 else "")
        raise StoreNotFoundError(
            f"No Zarr store at {zstore.display}: it holds {shown} but no '.zgroup' or 'zarr.json' at its "
            "root and no Zarr array or group below it. Expected an NCZarr, Zarr v2 or Zarr v3 store; "
            "check the path."
        )
    warnings.warn(
        f"{zstore.display} has no root '.zgroup' object; reading the Zarr arrays and groups below its "
        f"root ({', '.join(nodes[:5])}{', ...' if len(nodes) > 5 else ''}) as an implicit root group. "
        "Add the missing '.zgroup' ({\"zarr_format\": 2}) to silence this.",
        UserWarning, stacklevel=user_stacklevel(),
    )
    return {**root_objs, ".zgroup": {"zarr_format": 2}}
