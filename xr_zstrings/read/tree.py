"""xarray-free reading: a store's groups, dimensions, variables and lazily indexed arrays.

``open_tree`` reads every metadata object once (concurrently, level by level, using the NCZarr
group listings where they exist instead of listing keys) and ``group_contents`` turns one group into
variables with resolved dimension names, typed attributes, encodings and ``LazyArray`` data.
Chunks are only read when a ``LazyArray`` is indexed.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..text import fixed as strings
from ..codecs.v2 import ChunkPipeline, SafeVLen, bounded_decode, build_pipeline
from ..io.atomic import INCOMPLETE_MARKER
from ..errors import (
    IncompleteStoreError,
    ChunkError,
    DimensionError,
    MetadataError,
    StoreNotFoundError,
    UnknownCodecError,
    UnsupportedError,
    ZStringsError,
)
from ..formats.nczarr import (
    NC_DEFAULT_MAXSTRLEN,
    ArrayMeta,
    Dimension,
    GroupMeta,
    NodeObjects,
    check_name,
    parse_array,
    parse_group,
)
from ..io.zstore import ZStore
from ..codecs.encoding import store_codecs_encoding, v3_codecs_encoding

__all__ = [
    "ReadOptions",
    "TreeMeta",
    "VariableSpec",
    "GroupContents",
    "LazyArray",
    "open_tree",
    "group_contents",
    "ANONYMOUS_DIM",
    "read_arrow",
]

#: netcdf-c names the dimensions it invents for arrays without any: ``_Anonymous_Dim_<len>``.
ANONYMOUS_DIM = "_Anonymous_Dim_{}"


def anonymous_dims(shape: tuple[int, ...], names: tuple[str | None, ...] | None = None) -> list[str]:
    """netcdf-c's invented names for the unnamed axes of one array, made distinct within it.

    netcdf-c gives a 5x5 array ``(_Anonymous_Dim_5, _Anonymous_Dim_5)``: one dimension used
    twice, which xarray cannot index (``isel`` silently returns the wrong shape). The second and
    later uses get ``_Anonymous_Dim_5_1``, ``_Anonymous_Dim_5_2``, ... (never a netcdf-c name).
    """
    names = names or (None,) * len(shape)
    out: list[str] = []
    for n, size in zip(names, shape, strict=True):
        if n is not None:
            out.append(n)
            continue
        base = ANONYMOUS_DIM.format(size)
        k = sum(1 for o in out if o == base or o.startswith(base + "_"))
        out.append(base if k == 0 else f"{base}_{k}")
    return out

_GROUP_OBJECTS = (".zgroup", ".zattrs")
_GROUP_OBJECTS_V1 = (".nczgroup", ".nczattr", ".nczattrs")
_ARRAY_OBJECTS = (".zarray", ".zattrs")
_ARRAY_OBJECTS_V1 = (".nczvar", ".nczarray", ".nczattr", ".nczattrs")
_ROOT_EXTRA = (".nczarr", ".nczgroup", ".nczattr", ".nczattrs", "zarr.json")
# what netcdf-c's #mode=zarr ignores: NCZarr's structure (dimensions, listings, references); it
# still types attributes by _nczarr_attr (netcdf-c 4.10.1 does, tests/interop/test_netcdf_c_parity.py)
_NCZARR_STRUCTURE = ("_nczarr_superblock", "_NCZARR_SUPERBLOCK", "_nczarr_group", "_NCZARR_GROUP",
                     "_nczarr_array", "_NCZARR_ARRAY")
_NCZARR_V1_STRUCTURE = (".nczarr", ".nczgroup", ".nczvar", ".nczarray")


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
class ReadOptions:
    """How strings come back: output dtype, UTF-8 policy, NC_CHAR joining, masking of a string
    ``_FillValue`` (xarray's ``mask_and_scale``)."""

    string_dtype: Any = "T"
    utf8_errors: strings.Utf8Errors = "drop"
    concat_characters: bool = True
    decode_threads: int | None = None  # None: $XR_ZSTRINGS_DECODE_THREADS or min(8, CPUs); 1: no pool
    mask_and_scale: bool = True

    def __post_init__(self) -> None:
        # reject bad options when the store is opened, not when data are first read
        strings.resolve_string_dtype(self.string_dtype)
        strings.check_utf8_errors(self.utf8_errors)
        object.__setattr__(self, "decode_threads", check_decode_threads(self.decode_threads))


@dataclass
class TreeMeta:
    """All metadata of a store: groups and arrays by absolute path (``/``, ``/sub``, ``/sub/v``)."""

    store: ZStore
    groups: dict[str, GroupMeta] = field(default_factory=dict)
    arrays: dict[str, ArrayMeta] = field(default_factory=dict)
    children: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict)
    #: arrays whose metadata names a data type or codec this package does not decode: path -> why
    unreadable: dict[str, str] = field(default_factory=dict)
    #: a local store's version token when its metadata were read (ZStore.version_token), else None
    version: tuple[int, int] | None = None

    @property
    def root(self) -> GroupMeta:
        return self.groups["/"]

    def dimension(self, ref: str, *, where: str) -> Dimension:
        """Resolve a fully qualified dimension reference such as ``/sub/y``."""
        ref = ref if ref.startswith("/") else "/" + ref
        gpath, _, name = ref.rpartition("/")
        group = self.groups.get(gpath or "/")
        if group is None or name not in group.dimensions:
            raise DimensionError(
                f"Dangling dimension reference {ref!r} at {where}: no group {gpath or '/'!r} declares a "
                f"dimension {name!r}. Expected a reference to a dimension listed in some group's "
                "_nczarr_group; fix the reference or add the dimension."
            )
        return group.dimensions[name]


def _join(parent: str, name: str) -> str:
    return f"/{name}" if parent == "/" else f"{parent}/{name}"


def _key(path: str, obj: str) -> str:
    return f"{path.strip('/')}/{obj}" if path != "/" else obj


def open_tree(zstore: ZStore) -> TreeMeta:
    """Read all group and array metadata, concurrently, one tree level at a time.

    A local store that a writer swaps in while it is read (an append in another process commits by
    exchanging directories) is read again, so the metadata always comes from one version: the old
    length or the new one, never the root of one and the arrays of the other.
    """
    for _ in range(10):
        before = zstore.version_token()
        try:
            tree = _open_tree(zstore)
        except ZStringsError:
            if before is None or zstore.version_token() == before:
                raise
            continue
        if before is None or zstore.version_token() == before:
            tree.version = before
            return tree
    return _open_tree(zstore)


def _open_tree(zstore: ZStore) -> TreeMeta:
    """Read every metadata object of the store, level by level (breadth first), concurrently per level.

    Long because each level is one batch: list the groups NCZarr does not list, fetch every
    object of the next level in one ``get_json_many``, probe unlisted children as arrays first,
    then parse; split, the batch's state would travel between the steps.
    """
    tree = TreeMeta(store=zstore)
    # object storage: also ask for Zarr v2 consolidated metadata (same round trip); when present,
    # every other metadata object comes from it instead of one request each
    root_names = _GROUP_OBJECTS + _ROOT_EXTRA + ((".zmetadata",) if zstore.remote else ())
    root_objs = dict(zip(root_names, zstore.get_json_many([_key("/", o) for o in root_names]), strict=True))
    zmetadata = root_objs.pop(".zmetadata", None)
    for o in (".zgroup", "zarr.json"):
        if isinstance(root_objs[o], dict) and INCOMPLETE_MARKER in root_objs[o]:
            raise IncompleteStoreError(
                f"Store {zstore.display} is incomplete: its root {o!r} is the placeholder a writer puts "
                "first and replaces last, so a write is still running or was interrupted. Wait for it, "
                "or write the store again (mode='w')."
            )
    if zmetadata is not None and root_objs[".zgroup"] is not None:
        zstore.use_consolidated(zmetadata)
    if root_objs[".zgroup"] is None and root_objs[".nczgroup"] is None:
        if root_objs["zarr.json"] is not None:
            return _open_tree_v3(tree, root_objs["zarr.json"])
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
    default_maxstrlen = root.default_maxstrlen
    if root.is_nczarr and default_maxstrlen is None:
        default_maxstrlen = NC_DEFAULT_MAXSTRLEN

    level = ["/"]
    while level:
        # 0. (arrays found unreadable below are taken out of their group's listing at the end)
        # 1. discover each group's children (listing from NCZarr metadata, else list the store)
        candidates: list[tuple[str, str]] = []  # (parent, child path)
        listed: dict[str, tuple[list[str], list[str]]] = {}
        for gpath in level:
            g = tree.groups[gpath]
            if g.arrays is not None and g.groups is not None:
                listed[gpath] = (list(g.arrays), list(g.groups))
            else:
                names = [
                    check_name(n, where=zstore.where(gpath))
                    for n in zstore.list_dir(gpath.strip("/"))
                    if not n.startswith(".") and n != "zarr.json"
                ]
                for n in names:
                    candidates.append((gpath, _join(gpath, n)))
        # 2. fetch all metadata objects of the next level at once
        array_objs = _ARRAY_OBJECTS + (_ARRAY_OBJECTS_V1 if v1 else ())
        group_objs = _GROUP_OBJECTS + (_GROUP_OBJECTS_V1 if v1 else ())
        wanted: list[tuple[str, str, str]] = []  # (path, kind, object)
        for gpath, (arrays, groups) in listed.items():
            for a in arrays:
                wanted += [(_join(gpath, a), "array", o) for o in array_objs]
            for c in groups:
                wanted += [(_join(gpath, c), "group", o) for o in group_objs]
        # an unlisted child is probed as an array first (.zarray, .zattrs: the usual case, one
        # request fewer per variable than probing .zgroup too); only the others as groups, below
        for _, cpath in candidates:
            wanted += [(cpath, "probe", o) for o in (".zarray", ".zattrs")]
        values = zstore.get_json_many([_key(p, o) for p, _, o in wanted]) if wanted else []
        objs: dict[str, dict[str, Any]] = {}
        for (p, _kind, o), v in zip(wanted, values, strict=True):
            objs.setdefault(p, {})[o] = v
        not_arrays = [cpath for _, cpath in candidates if objs[cpath][".zarray"] is None]
        if not_arrays:
            zgroups = zstore.get_json_many([_key(p, ".zgroup") for p in not_arrays])
            for p, v in zip(not_arrays, zgroups, strict=True):
                objs[p][".zgroup"] = v
        if pure:
            objs = {p: _pure_zarr(o, noxarray=noxarray) for p, o in objs.items()}
        next_level: list[str] = []
        for gpath in level:
            arrays_here: list[str] = []
            groups_here: list[str] = []
            if gpath in listed:
                arrays_here, groups_here = listed[gpath]
            else:
                for parent, cpath in candidates:
                    if parent != gpath:
                        continue
                    o = objs[cpath]
                    name = cpath.rsplit("/", 1)[-1]
                    if o.get(".zarray") is not None:
                        arrays_here.append(name)
                    elif o.get(".zgroup") is not None:
                        groups_here.append(name)
            tree.children[gpath] = (arrays_here, groups_here)
            for a in list(arrays_here):
                apath = _join(gpath, a)
                o = objs.get(apath, {})
                if o.get(".zarray") is None:
                    raise MetadataError(
                        f"Group {gpath!r} of {zstore.display} lists array {a!r} but key "
                        f"{_key(apath, '.zarray')!r} is missing. The store is incomplete (an interrupted "
                        "write?) or the listing is stale; rewrite the store."
                    )
                try:
                    tree.arrays[apath] = parse_array(
                        NodeObjects(apath, o), store=zstore.display, default_maxstrlen=default_maxstrlen,
                        netcdf_c=root.nc_properties is not None,
                    )
                except UnsupportedError as e:  # one undecodable array does not block its group
                    tree.unreadable[apath] = str(e)
            for c in groups_here:
                cpath = _join(gpath, c)
                o = objs.get(cpath, {})
                if o.get(".zgroup") is None and o.get(".nczgroup") is None:
                    raise MetadataError(
                        f"Group {gpath!r} of {zstore.display} lists subgroup {c!r} but key "
                        f"{_key(cpath, '.zgroup')!r} is missing. The store is incomplete; rewrite it."
                    )
                tree.groups[cpath] = parse_group(NodeObjects(cpath, o), store=zstore.display)
                next_level.append(cpath)
        level = next_level
    _unlist_unreadable(tree)
    return tree


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
    import warnings

    raw = zstore.get_bytes(".zgroup")
    if raw is not None:  # there, but JSON null: damaged, not missing
        raise MetadataError(
            f"Invalid metadata at {zstore.where('.zgroup')}: got {bytes(raw[:40])!r}, expected a JSON "
            "object such as {\"zarr_format\": 2}. Fix or rewrite the root '.zgroup'."
        )
    interrupted = IncompleteStoreError(
        f"Store {zstore.display} is incomplete: it has NCZarr data but no root '.zgroup' (an "
        "interrupted write?). Rewrite it (to_nczarr(..., mode='w'))."
    )
    if any(_has_nczarr_markers(v) for v in root_objs.values()):
        raise interrupted
    if zmetadata is None and not zstore.remote:  # (object storage asked for it already)
        zmetadata = zstore.get_json_many([".zmetadata"])[0]
    meta = zmetadata.get("metadata") if isinstance(zmetadata, dict) else None
    if isinstance(meta, dict) and zstore.use_consolidated(zmetadata, force=True):
        if any(_has_nczarr_markers(v) for v in meta.values()):
            raise interrupted
        warnings.warn(
            f"{zstore.display} has no root '.zgroup' object; reading every group and array from its "
            "consolidated '.zmetadata' (as zarr.open_consolidated and xarray's engine='zarr' do). "
            "Write the missing objects (zarr.open_group(...) on a copy) to silence this.",
            UserWarning, stacklevel=4,
        )
        objs = dict(root_objs)
        objs[".zgroup"] = meta.get(".zgroup") or {"zarr_format": 2}
        objs[".zattrs"] = meta.get(".zattrs", objs[".zattrs"])
        return objs
    names = [n for n in zstore.list_dir("") if not n.startswith(".")]
    if not names:
        raise StoreNotFoundError(
            f"No Zarr group at {zstore.display}: key '.zgroup' is missing. Expected an NCZarr or Zarr v2 "
            "store (a directory with .zgroup); check the path."
        )
    probes = [(n, o) for n in names for o in (".zarray", ".zgroup", ".zattrs")]
    found = dict(zip(probes, zstore.get_json_many([f"{n}/{o}" for n, o in probes]), strict=True))
    if any(_has_nczarr_markers(v) for v in found.values()):
        raise interrupted
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
        UserWarning, stacklevel=4,
    )
    return {**root_objs, ".zgroup": {"zarr_format": 2}}


def _open_tree_v3(tree: TreeMeta, root_json: Any) -> TreeMeta:
    """Zarr v3: use the root's consolidated metadata when present, else walk zarr.json level by level."""
    from ..formats.zarr3 import ArrayMetaV3, GroupMetaV3, parse_node_v3

    zstore = tree.store
    root = parse_node_v3(root_json, path="/", store=zstore.display)
    if not isinstance(root, GroupMetaV3):
        raise MetadataError(
            f"{zstore.display} is a single Zarr v3 array, not a group: expected node_type 'group' in "
            "the root zarr.json. Open its parent directory."
        )
    nodes: dict[str, Any] = {"/": root}
    def parse(obj: Any, p: str) -> Any:
        try:
            return parse_node_v3(obj, path=p, store=zstore.display)
        except UnsupportedError as e:  # an array this package cannot decode: not the whole group
            if not (isinstance(obj, dict) and obj.get("node_type") == "array"):
                raise
            tree.unreadable[p] = str(e)
            return None

    if root.consolidated is not None:
        for rel, obj in root.consolidated.items():
            p = "/" + rel.strip("/")
            node = parse(obj, p)
            if node is not None:
                nodes[p] = node
    else:
        level = ["/"]
        while level:
            candidates = [
                _join(g, check_name(n, where=zstore.where(g)))
                for g in level
                for n in zstore.list_dir(g.strip("/"))
                if n != "zarr.json" and not n.startswith(".")
            ]
            found = zstore.get_json_many([_key(c, "zarr.json") for c in candidates])
            level = []
            for c, obj in zip(candidates, found, strict=True):
                if obj is None:
                    continue  # chunk folders ("c") and foreign files are not nodes
                node = parse(obj, c)
                if node is None:
                    continue
                nodes[c] = node
                if isinstance(nodes[c], GroupMetaV3):
                    level.append(c)
    for path in sorted(nodes, key=lambda p: (p.count("/"), p)):
        node = nodes[path]
        parent = path.rsplit("/", 1)[0] or "/"
        if path != "/" and parent not in nodes:
            raise MetadataError(
                f"Consolidated metadata of {zstore.display} lists {path!r} but not its parent group "
                f"{parent!r}. Re-consolidate the store (zarr.consolidate_metadata)."
            )
        if isinstance(node, GroupMetaV3):
            tree.groups[path] = GroupMeta(
                path=path, zarr_format=3, generation="zarr-v3", dimensions={}, arrays=(), groups=(),
                attrs=dict(node.attrs), attr_types={},
            )
            tree.children[path] = ([], [])
        elif isinstance(node, ArrayMetaV3):
            tree.arrays[path] = node
        if path != "/":
            if parent not in tree.children:
                raise MetadataError(
                    f"{zstore.display}: {path!r} lies inside array {parent!r}; expected arrays to be "
                    "leaves of the hierarchy."
                )
            tree.children[parent][1 if isinstance(node, GroupMetaV3) else 0].append(path.rsplit("/", 1)[1])
    return tree


# ---------------------------------------------------------------------------------------
# Lazy arrays
# ---------------------------------------------------------------------------------------

# chunks are decoded on threads when there are enough of them; numcodecs and the kernels release
# the GIL. One pool per thread count and process: a pool's threads do not exist in a child made by
# fork (multiprocessing's default on Linux, DataLoader workers, gunicorn), so the child starts
# afresh (os.register_at_fork, and the pid check for forks that bypass Python's fork hooks).
DECODE_THREADS_ENV = "XR_ZSTRINGS_DECODE_THREADS"
_DEFAULT_THREADS = max(1, min(8, os.cpu_count() or 1))
_pools: dict[int, ThreadPoolExecutor] = {}
_pools_pid = os.getpid()
_pools_lock = threading.Lock()


def _reset_pools_after_fork() -> None:
    global _pools, _pools_pid, _pools_lock
    _pools, _pools_pid, _pools_lock = {}, os.getpid(), threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_pools_after_fork)


def check_decode_threads(value: Any, *, source: str = "decode_threads") -> int | None:
    """``value`` as a thread count (an int >= 1) or None (the default); else a clear error."""
    if value is None:
        return None
    try:
        n = int(value)
        ok = n >= 1 and (not isinstance(value, float) or n == value) and not isinstance(value, bool)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ZStringsError(
            f"Invalid {source}. Got {value!r}, expected a whole number >= 1 (1 decodes on the calling "
            "thread, no pool)."
        )
    return n


def decode_threads(requested: int | None = None) -> int:
    """The number of decode threads a read uses: ``requested`` (the ``decode_threads`` keyword),
    else the ``XR_ZSTRINGS_DECODE_THREADS`` environment variable, else min(8, CPUs)."""
    if requested is not None:
        return requested
    env = os.environ.get(DECODE_THREADS_ENV, "").strip()
    if env:
        return check_decode_threads(env, source=f"environment variable {DECODE_THREADS_ENV}") or 1
    return _DEFAULT_THREADS


def _executor(threads: int) -> ThreadPoolExecutor:
    if os.getpid() != _pools_pid:  # forked without Python's hooks (os.register_at_fork)
        _reset_pools_after_fork()
    with _pools_lock:
        pool = _pools.get(threads)
        if pool is None:
            pool = _pools[threads] = ThreadPoolExecutor(threads, thread_name_prefix="zstrings-decode")
        return pool


class ChunkedArray:
    """Reads rectangular regions of one stored array in its storage dtype (no string decoding)."""

    def __init__(self, zstore: ZStore, meta: ArrayMeta, logical_shape: tuple[int, ...],
                 utf8_errors: str = "strict", threads: int | None = None, null_fill: bool = False,
                 raw_bytes: bool = False) -> None:
        """``utf8_errors``: the policy for invalid UTF-8 in variable-length string chunks (v2
        vlen-utf8, every v3 layout); fixed-width decoding takes its policy per call.
        ``threads``: decode threads (None: ``decode_threads()``'s default, 1: no pool).
        ``null_fill``: a ``|O`` array's ``fill_value: null`` gives None, as zarr-python 2 reads it
        (else ``""``/``b""``).
        ``raw_bytes``: variable-length text is read as the stored bytes (``string_dtype="bytes"``):
        the same chunk layouts decoded as their bytes twins (vlen-utf8 as vlen-bytes, ``string`` as
        ``bytes``), so nothing is UTF-8 decoded."""
        self.threads = threads
        self.raw_bytes = raw_bytes = bool(raw_bytes and meta.string_kind == "vlen")
        self.dtype = np.dtype(object) if raw_bytes else meta.dtype  # what read() assembles
        self.store = zstore
        self.meta = meta
        self.null_fill = null_fill and meta.dtype.kind == "O" and meta.fill_value is None
        self.shape = logical_shape  # may exceed meta.shape along unlimited dimensions
        self.stored_shape = meta.shape or (1,)  # scalars: netCDF stores shape [1]
        self.chunk_shape = meta.chunks or (1,)
        self.v3 = meta.generation == "zarr-v3"
        if self.v3:
            from ..codecs.v3 import V3Pipeline

            data_type, dtype, fill = meta.data_type, meta.dtype, meta.fill_value
            if raw_bytes:
                from ..codecs.v3 import classify_data_type

                data_type = "large_binary" if classify_data_type(meta.data_type)[1] else "binary"
                dtype = np.dtype(object)
                fill = fill.encode("utf-8") if isinstance(fill, str) else fill
            self.pipeline_v3 = V3Pipeline.from_metadata(
                list(meta.codecs), data_type=data_type, dtype=dtype, chunk_shape=meta.chunks,
                fill_value=fill, where=zstore.where(_key(meta.path, "zarr.json")),
                utf8_errors=utf8_errors,
            )
            if getattr(meta, "optional", False) != (self.pipeline_v3.layout == "zarrs.optional"):
                raise (UnsupportedError if meta.optional else MetadataError)(
                    f"Array {zstore.where(_key(meta.path, 'zarr.json'))}: data type "
                    f"{'optional' if meta.optional else meta.data_type!r} with the codec chain "
                    f"{[c.get('name') for c in meta.codecs]}: zarrs' optional data type is read with "
                    "the zarrs.optional codec as its array->bytes codec, and that codec only with it."
                )
            self.parallel = True
        else:
            where = zstore.where(_key(meta.path, ".zarray"))
            filters = meta.filters
            if raw_bytes:  # numcodecs' vlen-utf8 and vlen-bytes share one layout
                filters = tuple({"id": "vlen-bytes"} if f.get("id") == "vlen-utf8" else f for f in filters)
            self.pipeline: ChunkPipeline = build_pipeline(
                meta.compressor, filters, dtype=meta.dtype, string_kind=meta.string_kind, where=where,
                chunk_shape=self.chunk_shape, utf8_errors=utf8_errors,
            )
            self.parallel = self.pipeline.compressor is not None or meta.dtype.kind == "O"
        self.vlen = meta.dtype.kind == "O"

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__.copy()

    def _fill(self) -> Any:
        fv = self.meta.fill_value
        if self.raw_bytes:
            if fv is None:
                return None if self.null_fill else b""
            return fv.encode("utf-8") if isinstance(fv, str) else fv
        if fv is None:
            if self.meta.dtype.kind == "O":
                if self.null_fill:
                    return None
                return "" if self.meta.string_kind == "vlen" else b""
            return np.zeros((), self.meta.dtype)[()]
        return fv

    def chunk_key(self, idx: tuple[int, ...]) -> str:
        if self.v3:
            return _key(self.meta.path, self.meta.chunk_key(idx if self.meta.shape else ()))
        name = self.meta.dimension_separator.join(str(i) for i in idx)
        return _key(self.meta.path, name)

    def _plan(self, region: tuple[slice, ...]) -> tuple[list[tuple[str, tuple, tuple]], bool]:
        """(per touched chunk: (key, src slices in the chunk, dst slices in the output), needs fill)."""
        stored_shape, chunks = self.stored_shape, self.chunk_shape
        ranges = []
        for s, n, c in zip(region, stored_shape, chunks, strict=True):
            stop = min(s.stop, n)
            if s.start >= stop:
                return [], True
            ranges.append(range(s.start // c, (stop - 1) // c + 1))
        fill = any(s.stop > n for s, n in zip(region, stored_shape, strict=True))
        plan = []
        for ix in itertools.product(*ranges):
            src, dst = [], []
            for i, s, n, c in zip(ix, region, stored_shape, chunks, strict=True):
                c0 = i * c
                lo, hi = max(s.start, c0), min(s.stop, c0 + c, n)
                src.append(slice(lo - c0, hi - c0))
                dst.append(slice(lo - s.start, hi - s.start))
            plan.append((self.chunk_key(ix), tuple(src), tuple(dst)))
        return plan, fill

    def _group_size(self) -> int:
        """Chunks one task fetches and decodes together: ~4 MiB of stored values (many small
        chunks share one store round trip), one chunk when chunks are bigger than that."""
        itemsize = self.meta.dtype.itemsize if self.meta.dtype.kind not in "OT" else 32
        chunk_bytes = max(1, math.prod(self.chunk_shape) * max(itemsize, 1))
        return max(1, min(256, (4 << 20) // chunk_bytes))

    def _run(self, plan: list[tuple[str, tuple, tuple]], fn: Any, parallel: bool) -> None:
        """fn(key, raw_or_None, src, dst) for every planned chunk.

        Each task fetches its own group of chunks and decodes them, on the thread pool: one
        thread's fetch overlaps another's decoding (the kernels release the GIL), and at most
        one group per thread is in memory at a time.
        """
        step = self._group_size()
        groups = [plan[b0 : b0 + step] for b0 in range(0, len(plan), step)]
        changes = strings.active_changes()  # the read's policy report, shared with the workers

        def task(group: list[tuple[str, tuple, tuple]]) -> None:
            with strings.reporting(changes):
                raws = self.store.get_many([k for k, _, _ in group])
                for (k, src, dst), i in zip(group, range(len(raws)), strict=True):
                    raw, raws[i] = raws[i], None  # drop each chunk's bytes once decoded
                    fn(k, raw, src, dst)
                    del raw

        threads = decode_threads(self.threads)
        try:
            if parallel and len(groups) > 1 and threads > 1:
                list(_executor(threads).map(task, groups))
            else:
                for g in groups:
                    task(g)
        except (ZStringsError, OSError):
            self.store.check_version()  # a swapped-in version's chunks fail: say that instead
            raise
        # chunks of one version, the one whose metadata were read (or StoreReplacedError)
        self.store.check_version()

    def read(self, region: tuple[slice, ...]) -> np.ndarray:
        """The values in ``region`` (step-1 slices within ``self.shape``) as a storage-dtype array."""
        meta = self.meta
        chunks = self.chunk_shape
        out_shape = tuple(s.stop - s.start for s in region)
        out = np.empty(out_shape, dtype=self.dtype)
        if out.size == 0:
            return out
        plan, fill = self._plan(region)
        if fill:
            out[...] = self._fill()  # beyond the stored shape (unlimited dimension): fill
        if not plan:
            return out

        def place(key: str, raw: bytes | None, src: tuple, dst: tuple) -> None:
            if raw is None:
                out[dst] = self._fill()  # a chunk never written reads as the fill value
            else:
                with strings.in_chunk(self.store.where(key)):
                    out[dst] = self._decode_chunk(raw, key, chunks, region=src)[src]

        self._run(plan, place, self.parallel and len(plan) > 2)
        return out

    # ------------------------------------------------------------------ direct string decoding

    def _sel(self, src: tuple, chunk_shape: tuple[int, ...], order: str) -> np.ndarray | None:
        """Element numbers (in the chunk's storage order) of the ``src`` box, C order; None = all."""
        full = all(s.start == 0 and s.stop == c for s, c in zip(src, chunk_shape, strict=True))
        if full and (order == "C" or sum(c > 1 for c in chunk_shape) <= 1):
            return None
        # element strides of the chunk in its storage order; only the box is materialised (a
        # chunk may be far larger than the array it belongs to)
        strides, acc = [0] * len(chunk_shape), 1
        for d in (range(len(chunk_shape) - 1, -1, -1) if order == "C" else range(len(chunk_shape))):
            strides[d], acc = acc, acc * chunk_shape[d]
        idx = np.zeros((), np.int64)
        for s, st in zip(src, strides, strict=True):
            idx = np.add.outer(idx, np.arange(s.start, s.stop, dtype=np.int64) * st)
        return np.ascontiguousarray(idx, dtype=np.int64).reshape(-1)

    def _chunk_bytes(self, raw: bytes, key: str, chunks: tuple[int, ...]) -> Any:
        """A v2 fixed-width chunk's decompressed bytes, size checked (as _decode_chunk)."""
        meta = self.meta
        try:
            buf = self.pipeline.decode(raw, scratch=True)  # consumed by the kernel right away
        except Exception as e:  # noqa: BLE001 - any codec failure is a ChunkError naming the chunk
            raise ChunkError(
                f"Cannot decode chunk {self.store.where(key)}: {type(e).__name__}: {e}. Expected data "
                f"compressed with {meta.compressor!r} and filters {list(meta.filters)!r}."
            ) from None
        mv = memoryview(buf).cast("B") if not isinstance(buf, np.ndarray) else buf.view(np.uint8).ravel()
        expected = math.prod(chunks) * meta.dtype.itemsize
        if len(mv) != expected:
            raise ChunkError(
                f"Chunk {self.store.where(key)} decodes to {len(mv)} bytes, expected {expected} "
                f"({list(chunks)} x {meta.dtype.str}). The chunk is truncated or belongs to another array."
            )
        return mv

    def can_read_into(self, decode: str, text_encoding: str, null_chunks: bool = False) -> bool:
        """Whether ``read_into`` can decode this array's chunks straight into a StringDType result."""
        meta = self.meta
        if strings.kernels() is None:
            return False
        if decode in ("fixed", "text-S"):
            return (not self.v3 and meta.dtype.kind == "S" and meta.dtype.itemsize > 0
                    and strings.norm_encoding(text_encoding) == "utf-8")
        if decode == "char":
            return (not self.v3 and meta.order == "C" and strings.norm_encoding(text_encoding) == "utf-8"
                    and meta.dtype.itemsize == 1 and meta.dtype.kind in "SUu" and len(self.shape) >= 1
                    and self.chunk_shape[-1] == self.stored_shape[-1] == self.shape[-1] > 0)
        if decode == "vlen":  # Zarr v2 |O + vlen-utf8 (what xarray and zarr-python write for str)
            p = getattr(self, "pipeline", None)
            return (p is not None and not self.v3 and meta.dtype.kind == "O" and len(p.filters) == 1
                    and isinstance(p.filters[0], SafeVLen) and p.filters[0].codec_id == "vlen-utf8"
                    and (isinstance(self._fill(), str) or (null_chunks and self._fill() is None)))
        if decode == "text":
            p = getattr(self, "pipeline_v3", None)
            if p is not None and p.sharded:  # inner chunks in a plain layout, no nested shards
                p = p.ab.inner if not p.aa and not p.ab.inner.sharded else None
            return (p is not None and p.kind == "str" and not p.aa
                    and p.layout in ("vlen-utf8", "zarrs.vlen", "arrow", "arrow-large")
                    and isinstance(self._fill(), str))
        return False

    def read_into(self, region: tuple[slice, ...], decode: str, policy: str, what: str,
                  dtype: np.dtype | None = None, null_chunks: bool = False) -> np.ndarray:
        """``region`` decoded straight into a StringDType array, one chunk at a time on the pool.

        No storage-dtype copy of the region is assembled: each chunk's decompressed bytes are
        decoded by the compiled kernels into its slot of the result (see ``can_read_into``).
        ``dtype``: the StringDType of the result (one with an NA object for masked variables);
        ``null_chunks``: never-written chunks are NA (a ``fill_value: null`` ``|O`` array).
        """
        meta = self.meta
        T = np.dtypes.StringDType() if dtype is None else dtype
        null_chunks = null_chunks and self._fill() is None
        char = decode == "char"
        lead = region[:-1] if char else region
        out_shape = tuple(s.stop - s.start for s in lead)
        out = np.empty(out_shape, dtype=T)
        if out.size == 0:
            return out
        plan, fill = self._plan(region)
        if char:  # the string-length axis is one whole chunk: drop it from the boxes
            plan = [(k, src[:-1], dst[:-1]) for k, src, dst in plan]
        chunks = self.chunk_shape
        lead_chunks = chunks[:-1] if char else chunks
        fill_value = "" if null_chunks else str(self._fill_T(decode, policy, what))
        if fill:
            out[...] = getattr(T, "na_object", "") if null_chunks else fill_value
        if not plan:
            return out
        unwritten: list[tuple] = []  # (null_chunks) boxes set to NA after the threads are done

        def index_of(dst: tuple) -> Any:
            starts = [d.start for d in dst]
            shape = tuple(d.stop - d.start for d in dst)

            def index(k: int) -> str:
                loc = np.unravel_index(k, shape) if shape else ()
                flat = int(np.ravel_multi_index(tuple(a + b for a, b in zip(loc, starts, strict=True)), out_shape)) if out_shape else 0
                return strings.position_label(flat, out_shape)

            return index

        def place(key: str, raw: bytes | None, src: tuple, dst: tuple) -> None:
            view = out[dst + (Ellipsis,)]  # a view even when dst is () (0-d result)
            if raw is None and null_chunks:
                unwritten.append(dst)
                return
            if raw is None:  # (not view[...] = fill: this runs on threads, see _kernels.pack_at)
                strings.kernels().pack_at(view, None, [fill_value.encode("utf-8")])
                return
            sel = self._sel(src, lead_chunks, meta.order)
            if decode in ("text", "vlen"):
                with strings.in_chunk(self.store.where(key)):
                    if decode == "text":
                        self._text_into(raw, key, view, sel, src)
                    else:
                        self._vlen_into(raw, key, view, sel)
                return
            buf = self._chunk_bytes(raw, key, chunks)
            width = chunks[-1] if char else meta.dtype.itemsize
            # NC_CHAR keeps embedded NULs (only trailing ones end it); NC_STRING ends at the first
            strings.decode_fixed_into(buf, width, view, sel, policy, what, index_of(dst),
                                      trailing=char or decode == "text-S")

        self._run(plan, place, True)
        for dst in unwritten:
            out[dst + (Ellipsis,)] = T.na_object
        return out

    def _fill_T(self, decode: str, policy: str, what: str) -> Any:
        fv = self._fill()
        if decode in ("text", "vlen"):
            return fv
        if decode == "char":
            b = fv if isinstance(fv, bytes) else np.asarray(fv).astype("S1").tobytes()
            row = np.frombuffer(b[:1] * self.shape[-1], np.uint8).reshape(1, -1)
            return strings.decode_char_array(row, utf8_errors=policy, what=what)[0]
        return strings.decode_fixed_utf8(np.array(fv, dtype=self.meta.dtype), utf8_errors=policy, what=what)[()]

    def _text_into(self, raw: bytes, key: str, view: np.ndarray, sel: np.ndarray | None,
                   src: tuple[slice, ...] = ()) -> None:
        """One v3 chunk (or shard: each inner chunk the ``src`` box touches) into ``view``."""
        p = self.pipeline_v3
        ctx = p.context(None)
        try:
            with p.decode_errors(ctx):
                # a plain chunk's bytes are consumed right away: decompress into scratch; a shard
                # stays whole while its inner chunks (which use the scratch) are decoded
                u8 = p.bytes_decode(raw, ctx, scratch=not p.sharded)
                if not p.sharded:
                    self._inner_into(p, u8, view, sel, math.prod(self.meta.chunks), ctx)
                    return
                shard = p.ab
                idx = shard.read_index(u8, ctx)
                for j, inner_box in enumerate(shard.slices):
                    # the part of the wanted box inside this inner chunk: where it goes in view,
                    # and which elements of the inner chunk it is
                    lo = [max(s.start, b.start) for s, b in zip(src, inner_box, strict=True)]
                    hi = [min(s.stop, b.stop) for s, b in zip(src, inner_box, strict=True)]
                    if any(a >= b for a, b in zip(lo, hi, strict=True)):
                        continue
                    sub = view[tuple(slice(a - s.start, b - s.start) for a, b, s in zip(lo, hi, src, strict=True))
                               + (Ellipsis,)]
                    box = tuple(slice(a - b.start, c - b.start) for a, c, b in zip(lo, hi, inner_box, strict=True))
                    o, nb = int(idx[j, 0]), int(idx[j, 1])
                    if o == 2**64 - 1 and nb == 2**64 - 1:  # an inner chunk never written: the fill value
                        strings.kernels().pack_at(sub, None, [str(self._fill()).encode("utf-8")])
                        continue
                    inner = shard.inner
                    ictx = f"{ctx}, inner chunk {tuple(int(c) for c in np.unravel_index(j, shard.cps))}"
                    iu8 = inner.bytes_decode(u8[o : o + nb], ictx, scratch=True)
                    self._inner_into(inner, iu8, sub, self._sel(box, shard.inner_shape, "C"),
                                     math.prod(shard.inner_shape), ictx)
        except ZStringsError as e:
            raise type(e)(f"Chunk {self.store.where(key)}: {e}") from None

    @staticmethod
    def _inner_into(p: Any, u8: np.ndarray, view: np.ndarray, sel: np.ndarray | None, n: int, ctx: str) -> None:
        """Decoded bytes of one plain (unsharded) variable-length chunk of ``n`` values into view."""
        from ..text import vlen

        if p.layout == "vlen-utf8":
            vlen.decode_vlen_utf8_into(u8, view, sel, n, utf8_errors=p.ab.utf8_errors, what=ctx)
        else:
            vlen.vlen_into(p.ab.to_vlen(u8, n, ctx), view, sel, utf8_errors=p.ab.utf8_errors, what=ctx)

    def _vlen_into(self, raw: bytes, key: str, view: np.ndarray, sel: np.ndarray | None) -> None:
        """A v2 vlen-utf8 chunk: decompress, then the kernels walk it into ``view`` (the pipeline's
        utf8_errors policy, as its SafeVLen filter decodes it)."""
        from ..text import vlen

        meta, p = self.meta, self.pipeline
        where = self.store.where(key)
        try:
            buf = raw if p.compressor is None else bounded_decode(
                p.compressor, raw, limit=p.limit, expected=p.expected, scratch=True)
            vlen.decode_vlen_utf8_into(buf, view, sel, math.prod(self.chunk_shape),
                                       utf8_errors=p.filters[0].utf8_errors, what="")
        except Exception as e:  # noqa: BLE001 - the same ChunkError as _decode_chunk's
            raise ChunkError(
                f"Cannot decode chunk {where}: {type(e).__name__}: {e}. Expected data compressed with "
                f"{meta.compressor!r} and filters {list(meta.filters)!r}."
            ) from None

    def _decode_chunk(self, raw: bytes, key: str, chunks: tuple[int, ...],
                      region: tuple[slice, ...] | None = None) -> np.ndarray:
        meta = self.meta
        n = math.prod(chunks)
        if self.v3:
            try:
                arr = self.pipeline_v3.decode(raw, meta.chunks, region=region)
            except ZStringsError as e:
                raise type(e)(f"Chunk {self.store.where(key)}: {e}") from None
            except Exception as e:
                raise ChunkError(
                    f"Cannot decode chunk {self.store.where(key)}: {type(e).__name__}: {e}. Expected the "
                    f"codecs {[c.get('name') for c in meta.codecs]!r} of its zarr.json."
                ) from None
            return np.asarray(arr).reshape(chunks)
        try:
            buf = self.pipeline.decode(raw)
        except Exception as e:
            raise ChunkError(
                f"Cannot decode chunk {self.store.where(key)}: {type(e).__name__}: {e}. Expected data "
                f"compressed with {meta.compressor!r} and filters {list(meta.filters)!r}."
            ) from None
        if self.vlen:
            arr = np.asarray(buf, dtype=object)
            if arr.size != n:
                raise ChunkError(
                    f"Chunk {self.store.where(key)} holds {arr.size} items, expected {n} "
                    f"(chunk shape {list(chunks)})."
                )
            return arr.reshape(chunks, order=meta.order)
        mv = memoryview(buf).cast("B") if not isinstance(buf, np.ndarray) else buf.view(np.uint8).ravel()
        expected = n * meta.dtype.itemsize
        if len(mv) != expected:
            raise ChunkError(
                f"Chunk {self.store.where(key)} decodes to {len(mv)} bytes, expected {expected} "
                f"({list(chunks)} x {meta.dtype.str}). The chunk is truncated or belongs to another array."
            )
        return np.frombuffer(mv, dtype=meta.dtype).reshape(chunks, order=meta.order)


class LazyArray:
    """A variable's values with strings decoded: ``shape``, ``dtype`` and basic indexing.

    NC_CHAR variables with ``concat_characters`` drop the last (string-length) dimension and
    come back as strings; everything else keeps the stored shape (``()`` for scalars).
    """

    def __init__(
        self,
        raw: ChunkedArray,
        *,
        decode: str,
        options: ReadOptions,
        encoding: str = "utf-8",
        what: str = "",
        missing: str | None = None,
        null_chunks: bool = False,
    ) -> None:
        """``missing``: a string value read as missing (a masked string ``_FillValue``);
        ``null_chunks``: never-written chunks are missing (Zarr v2 ``|O`` with ``fill_value: null``)."""
        self.raw = raw
        self.decode = decode  # "numeric", "fixed", "char", "char-sep", "char-raw", "unicode", "vlen", ...
        self.options = options
        self.text_encoding = encoding
        self.what = what
        self.missing = missing
        self.null_chunks = null_chunks
        shape = raw.shape if not raw.meta.scalar else ()
        if decode in ("char", "bytes-char") and shape:
            shape = shape[:-1]
        self.shape: tuple[int, ...] = tuple(shape)
        if decode in ("fixed", "text-S", "char", "char-sep", "unicode", "vlen", "text"):
            self.dtype = strings.resolve_string_dtype(options.string_dtype)
            if self.dtype.kind == "U":
                # fixed width: the stored width bounds the characters (vlen: only known after reading)
                meta = raw.meta
                width = {"fixed": meta.dtype.itemsize, "text-S": meta.dtype.itemsize,
                         "unicode": meta.dtype.itemsize // 4, "char-sep": 1,
                         "char": raw.shape[-1] if raw.shape else 1}.get(decode)
                self.dtype = np.dtype(f"U{max(width or 1, 1)}")
                self._fixed_u = width is not None
            if missing is not None or null_chunks:
                self.dtype = strings.missing_string_dtype(options.string_dtype)
                self._fixed_u = False
        elif decode in ("vlen-bytes", "bytes-obj", "bytes-unicode"):
            self.dtype = np.dtype(object)
        elif decode == "bytes-char":  # joined characters; one character stays an object (see _decode)
            n = raw.shape[-1] if raw.shape else 1
            self.dtype = np.dtype(f"S{n}") if n > 1 else np.dtype(object)
        else:
            self.dtype = raw.meta.dtype.newbyteorder("=") if raw.meta.dtype.kind in "biuf" else raw.meta.dtype
        # strings are decoded chunk by chunk straight into a StringDType result (compiled kernels);
        # object and U results are converted from it (faster than their numpy decode paths)
        self._masked = missing is not None or null_chunks
        self._direct = (self.dtype.kind in "OU" or self.dtype == np.dtypes.StringDType() or self._masked) and (
            not raw.meta.scalar and raw.can_read_into(decode, encoding, null_chunks))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, key: tuple[Any, ...]) -> np.ndarray:
        """Outer indexing (ints, slices of any step, 1-D integer arrays per axis).

        Only the chunks the selection touches are read: along each axis the wanted indices are
        grouped into runs of adjacent chunks, so ``[::10**9]`` or ``[[0, -1]]`` on a huge array reads
        a few chunks, not the span between them.
        """
        # every value a utf8_errors policy changes in this read is counted: one warning at the end
        with strings.policy_scope(self.what, stacklevel=5):
            return self._getitem(key)

    def _getitem(self, key: tuple[Any, ...]) -> np.ndarray:
        if not isinstance(key, tuple):
            key = (key,)
        key = key + (slice(None),) * (self.ndim - len(key))
        if self.raw.meta.scalar:
            raw = self.raw.read((slice(0, 1),))
            if self.decode in ("char", "bytes-char"):
                raw = raw.reshape(1, 1)
            return self._mask(self._convert(raw)).reshape(())
        chunks = self.raw.chunk_shape
        axes: list[list[tuple[slice, Any, Any]]] = []  # per axis: (read range, local take, output slot)
        squeeze: list[int] = []
        out_shape: list[int] = []
        for ax, (k, n) in enumerate(zip(key, self.shape, strict=True)):
            if isinstance(k, slice) and k.indices(n)[2] == 1:
                start, stop, _ = k.indices(n)
                stop = max(start, stop)
                axes.append([(slice(start, stop), slice(None), slice(None))])
                out_shape.append(stop - start)
                continue
            if isinstance(k, slice):
                idx = np.arange(*k.indices(n), dtype=np.int64)
            else:
                idx = np.asarray(k, dtype=np.int64)
                if idx.ndim == 0:
                    squeeze.append(ax)
                idx = idx.reshape(-1) % max(n, 1) if ((idx >= -n) & (idx < n)).all() else None
                if idx is None:
                    raise IndexError(f"index {k!r} is out of bounds for axis {ax} with size {n}")
            out_shape.append(idx.size)
            axes.append(self._runs(idx, chunks[ax] if ax < len(chunks) else 1))
        out: np.ndarray | None = None
        pieces = []
        for combo in itertools.product(*axes):
            region = [c[0] for c in combo]
            if self.decode in ("char", "bytes-char"):
                region.append(slice(0, self.raw.shape[-1]))
            data = self._read_region(tuple(region))
            take = tuple(c[1] for c in combo)
            if any(not isinstance(t, slice) for t in take):
                data = data[np.ix_(*[np.arange(data.shape[i])[t] for i, t in enumerate(take)])]
            pieces.append((tuple(c[2] for c in combo), data))
        if len(pieces) == 1 and all(isinstance(s, slice) for s in pieces[0][0]):
            out = pieces[0][1]  # one contiguous read: no copy (copying StringDType allocates)
            if squeeze:
                out = out[tuple(0 if i in squeeze else slice(None) for i in range(out.ndim)) + (Ellipsis,)]
            return out
        dtype = np.result_type(*[p[1].dtype for p in pieces]) if pieces else self.dtype
        out = np.empty(tuple(out_shape), dtype=dtype)
        for slot, data in pieces:
            if any(not isinstance(s, slice) for s in slot):
                out[np.ix_(*[np.arange(out.shape[i])[s] for i, s in enumerate(slot)])] = data
            else:
                out[slot] = data
        if squeeze:
            out = out[tuple(0 if i in squeeze else slice(None) for i in range(out.ndim)) + (Ellipsis,)]
        return out

    @staticmethod
    def _runs(idx: np.ndarray, chunk: int) -> list[tuple[slice, Any, Any]]:
        """Group wanted indices into runs of adjacent chunks: (read range, local take, output slots)."""
        if idx.size == 0:
            return [(slice(0, 0), slice(None), slice(None))]
        order = np.argsort(idx, kind="stable")
        sorted_idx = idx[order]
        cid = sorted_idx // chunk
        breaks = np.flatnonzero(np.diff(cid) > 1) + 1
        runs = []
        for grp in np.split(np.arange(idx.size), breaks):
            lo, hi = int(sorted_idx[grp[0]]), int(sorted_idx[grp[-1]]) + 1
            runs.append((slice(lo, hi), sorted_idx[grp] - lo, order[grp]))
        return runs

    def _read_region(self, region: tuple[slice, ...]) -> np.ndarray:
        if self._direct and strings.kernels() is not None:
            t = self.raw.read_into(region, self.decode, self.options.utf8_errors, self.what,
                                   dtype=self._na_T() if self._masked else None, null_chunks=self.null_chunks)
            if self._masked:
                return self._mask(t)
            if self.dtype.kind == "T":
                return t
            if getattr(self, "_fixed_u", False):
                return t.astype(self.dtype)  # never truncates: the stored width bounds the characters
            return strings.convert_string_dtype(t, self.dtype.kind, self.what)
        raw = self.raw.read(region)
        nulls = None
        if self.null_chunks and raw.dtype.kind == "O":
            nulls = np.equal(raw, None)  # never-written chunks (ChunkedArray fills them with None)
            raw[nulls] = ""
        return self._mask(self._convert(raw), nulls)

    def _mask(self, arr: np.ndarray, nulls: np.ndarray | None = None) -> np.ndarray:
        """Missing values into a decoded string array: elements equal to the masked fill string
        (and ``nulls``) become NA (StringDType, compared there: fast) or NaN (object results)."""
        if not self._masked:
            return arr
        T = self._na_T()
        if arr.dtype.kind in "TU" and arr.dtype != T:
            arr = arr.astype(T)
        hit = nulls
        if self.missing is not None:
            hit = arr == self.missing if hit is None else (arr == self.missing) | hit
        if hit is not None and hit.any():
            if not arr.flags.writeable:
                arr = arr.copy()
            arr[hit] = getattr(arr.dtype, "na_object", np.nan)
        return arr if arr.dtype == self.dtype else arr.astype(self.dtype)

    def _na_T(self) -> np.dtype:
        """The StringDType (with an NA object) a masked variable is decoded into."""
        return self.dtype if self.dtype.kind == "T" else strings.NA_T

    def _convert(self, raw: np.ndarray) -> np.ndarray:
        out = self._decode(raw)
        if getattr(self, "_fixed_u", False) and out.dtype != self.dtype:
            out = out.astype(self.dtype)  # never truncates: the width bounds the characters
        return out

    def _decode(self, raw: np.ndarray) -> np.ndarray:
        o = self.options
        if self.decode in ("fixed", "text-S"):
            trailing = self.decode == "text-S"
            if strings.norm_encoding(self.text_encoding) != "utf-8":  # _Encoding: as an NC_CHAR row
                n = max(raw.dtype.itemsize, 1)
                u8 = np.ascontiguousarray(raw.astype(f"S{n}")).view(np.uint8).reshape(raw.shape + (n,))
                return strings.decode_char_array(u8, encoding=self.text_encoding, utf8_errors=o.utf8_errors,
                                                 string_dtype=o.string_dtype, what=self.what)
            return strings.decode_fixed_utf8(
                raw, utf8_errors=o.utf8_errors, string_dtype=o.string_dtype, what=self.what, trailing=trailing
            )
        if self.decode == "bytes":  # the stored |Sn values, as engine="zarr" returns them
            return raw
        if self.decode == "bytes-obj":
            return raw.astype(object)
        if self.decode == "bytes-char":  # the characters joined, as xarray's concat_characters joins them
            u8 = strings.char_bytes(raw, self.what)
            n = u8.shape[-1]
            if n == 0:
                return np.full(u8.shape[:-1], b"", dtype=object)
            joined = np.ascontiguousarray(u8).view(f"S{n}").reshape(u8.shape[:-1])
            # (one character: |S1 would be joined again by xarray's CharacterArrayCoder)
            return joined if n > 1 else joined.astype(object)
        if self.decode == "bytes-unicode":  # code points: their UTF-8 bytes
            flat = raw.reshape(-1).tolist()
            return np.array([s.encode("utf-8", "surrogatepass") for s in flat] or [], dtype=object).reshape(raw.shape)
        if self.decode == "char":
            return strings.decode_char_array(
                raw, encoding=self.text_encoding, utf8_errors=o.utf8_errors,
                string_dtype=o.string_dtype, what=self.what,
            )
        if self.decode == "char-sep":  # each character its own value
            return strings.decode_char_array(
                self._char_raw(raw)[..., None], encoding=self.text_encoding, utf8_errors=o.utf8_errors,
                string_dtype=o.string_dtype, what=self.what,
            )
        if self.decode == "char-raw":
            return self._char_raw(raw)
        if self.decode == "unicode":
            return strings.decode_utf32(raw, string_dtype=o.string_dtype)
        if self.decode == "vlen":
            return strings.decode_objects(raw, string_dtype=o.string_dtype, what=self.what)
        if self.decode == "text":
            return strings.convert_string_dtype(raw, o.string_dtype, self.what)
        if self.decode == "vlen-bytes":
            return raw
        return raw.astype(self.dtype, copy=False)

    @staticmethod
    def _char_raw(raw: np.ndarray) -> np.ndarray:
        if raw.dtype.kind == "U":  # old NCZarr NC_CHAR: one byte per <U1 element
            return np.char.encode(raw, "latin-1").astype("S1")
        return raw.astype("S1")


# ---------------------------------------------------------------------------------------
# One group as variables
# ---------------------------------------------------------------------------------------


@dataclass
class VariableSpec:
    """Everything xarray needs for one variable, without xarray."""

    name: str
    dims: tuple[str, ...]
    data: LazyArray
    attrs: dict[str, Any]
    encoding: dict[str, Any]


@dataclass
class GroupContents:
    """One group, ready for xarray: variables, attributes, dimensions, dataset encoding."""

    path: str
    variables: dict[str, VariableSpec]
    attrs: dict[str, Any]
    dimensions: dict[str, Dimension]
    encoding: dict[str, Any]


def resolve_dims(tree: TreeMeta, meta: ArrayMeta) -> list[Dimension]:
    """The netCDF dimensions of an array: NCZarr references, else _ARRAY_DIMENSIONS, else anonymous."""
    where = tree.store.where(meta.path.strip("/"))
    if meta.scalar:
        return []
    if meta.generation == "zarr-v3":
        names = anonymous_dims(meta.shape, meta.dimension_names)
        return [Dimension(n, s) for n, s in zip(names, meta.shape, strict=True)]
    if meta.dimension_references is not None:
        dims = [tree.dimension(r, where=where) for r in meta.dimension_references]
        for d, n in zip(dims, meta.shape, strict=True):
            if n != d.size and not (d.unlimited and n <= d.size):
                raise DimensionError(
                    f"Array {meta.path!r} in {tree.store.display} has shape {list(meta.shape)} but "
                    f"dimension {d.name!r} has size {d.size} (references "
                    f"{list(meta.dimension_references)}). Fix .zarray's shape or the dimension size."
                )
        return dims
    if meta.array_dimensions is not None:
        return [Dimension(n, s) for n, s in zip(meta.array_dimensions, meta.shape, strict=True)]
    return [Dimension(n, s) for n, s in zip(anonymous_dims(meta.shape), meta.shape, strict=True)]


def group_contents(
    tree: TreeMeta,
    path: str = "/",
    *,
    options: ReadOptions = ReadOptions(),
    drop_variables: set[str] | None = None,
) -> GroupContents:
    """Build one group's variables with resolved, consistent dimension names and sizes.

    Long because dimension names and sizes are reconciled across all of a group's variables at once
    (shadowing, unlimited sizes, NC_CHAR string dimensions, coordinates), which needs the whole
    group in view.
    """
    path = "/" + path.strip("/") if path.strip("/") else "/"
    group = tree.groups.get(path)
    if group is None:
        raise MetadataError(
            f"No group {path!r} in {tree.store.display}. Available groups: {sorted(tree.groups)}."
        )
    arrays, _ = tree.children[path]
    drop = drop_variables or set()
    variables: dict[str, VariableSpec] = {}
    sizes: dict[str, tuple[int, str]] = {}
    unlimited: set[str] = {d.name for d in group.dimensions.values() if d.unlimited}
    resolved: dict[str, list[Dimension]] = {}
    for name in arrays:
        try:
            resolved[name] = resolve_dims(tree, tree.arrays[_join(path, name)])
        except ZStringsError:
            if name not in drop:
                raise
            resolved[name] = []  # a dropped variable's broken dimensions do not block the group
    joinable = _char_dims_joinable(tree, path, arrays, resolved)
    for name in arrays:
        if name in drop:
            continue
        meta = tree.arrays[_join(path, name)]
        dims = resolved[name]
        if len({d.name for d in dims}) < len(dims):  # netCDF allows v(x, x); xarray does not
            _leave_out(tree, meta.path, f"it uses one dimension twice ({[d.name for d in dims]}), "
                       "which an xarray Dataset cannot hold")
            continue
        for d in dims:
            size = d.size
            prev = sizes.get(d.name)
            if prev is not None and prev[0] != size:
                raise DimensionError(
                    f"Group {path!r} of {tree.store.display}: variable {name!r} uses dimension {d.name!r} "
                    f"with size {size} but variable {prev[1]!r} uses it with size {prev[0]}. A netCDF "
                    "group can reference an ancestor's dimension and a shadowing one of the same name; "
                    "an xarray Dataset cannot hold both. Drop one of the variables (drop_variables=...)."
                )
        join = bool(dims) and dims[-1].name in joinable
        try:
            variables[name] = _variable(tree, meta, dims, options, join_chars=join)
        except UnknownCodecError as e:  # (not a refusal to protect memory: those still raise)
            tree.unreadable[meta.path] = str(e)
            continue
        for d in dims:
            sizes.setdefault(d.name, (d.size, name))
            if d.unlimited:
                unlimited.add(d.name)
    for apath, why in tree.unreadable.items():
        parent, _, name = apath.rpartition("/")
        if (parent or "/") != path or name in drop or name in variables:
            continue
        spec = _through_zarr_python(tree, apath, why)
        if spec is None:
            continue
        for d, size in zip(spec.dims, spec.data.shape, strict=True):
            prev = sizes.get(d)
            if prev is not None and prev[0] != size:
                _leave_out(tree, apath, f"its dimension {d!r} has size {size} but variable {prev[1]!r} "
                           f"uses it with size {prev[0]}")
                break
        else:
            for d, size in zip(spec.dims, spec.data.shape, strict=True):
                sizes[d] = (size, name)
            variables[name] = spec
    attrs = dict(group.attrs)
    encoding: dict[str, Any] = {
        "source": tree.store.display,
        "unlimited_dims": {u for u in unlimited if u in sizes or u in group.dimensions},
        "zstrings_format": group.generation,
    }
    if path == "/" and group.default_maxstrlen is not None:
        encoding["default_maxstrlen"] = group.default_maxstrlen
    return GroupContents(
        path=path, variables=variables, attrs=attrs, dimensions=dict(group.dimensions), encoding=encoding
    )


def _leave_out(tree: TreeMeta, apath: str, why: str) -> None:
    import warnings

    name = apath.rsplit("/", 1)[-1]
    warnings.warn(
        f"Variable {apath!r} of {tree.store.display} is left out: {why}. Every other variable is "
        f"read. Pass drop_variables=[{name!r}] to silence this, or read it with engine='zarr'.",
        UserWarning, stacklevel=6,
    )


class ZarrPythonArray:
    """An array this package does not decode, read lazily through zarr-python (outer indexing)."""

    def __init__(self, arr: Any, what: str) -> None:
        self.arr = arr
        self.what = what
        self.shape: tuple[int, ...] = tuple(arr.shape)
        self.dtype = np.dtype(arr.dtype)
        self.decode = "zarr-python"

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, key: tuple[Any, ...]) -> np.ndarray:
        try:
            if not self.shape:
                return np.asarray(self.arr[...])
            return np.asarray(self.arr.oindex[key])
        except Exception as e:  # noqa: BLE001 - zarr-python's errors, named and explained
            raise ChunkError(
                f"zarr-python cannot read {self.what}: {type(e).__name__}: {e}. It was read through "
                "zarr-python because this package does not decode it; drop it (drop_variables=...)."
            ) from None


def _through_zarr_python(tree: TreeMeta, apath: str, why: str) -> VariableSpec | None:
    """An array this package cannot decode, read by zarr-python when it can; else None (with a
    warning naming the array, the reason and the fix)."""
    try:
        import zarr

        arr = zarr.open_array(tree.store.store, path=tree.store.full_key(apath.strip("/")), mode="r")
        np.dtype(arr.dtype)  # zarr-python's own extension types (no numpy dtype) are not read
    except Exception as e:  # noqa: BLE001 - zarr-python cannot either: say both reasons
        _leave_out(tree, apath, f"{why} (zarr-python cannot read it either: {type(e).__name__}: {e})")
        return None
    meta = arr.metadata
    if getattr(meta, "zarr_format", 2) == 3:
        names: Any = tuple(meta.dimension_names) if meta.dimension_names else None
        attrs = dict(arr.attrs)
    else:
        attrs = dict(arr.attrs)
        names = attrs.pop("_ARRAY_DIMENSIONS", None)
        names = tuple(names) if isinstance(names, list) and len(names) == arr.ndim else None
    dims = tuple(anonymous_dims(tuple(arr.shape), names))
    encoding = {"chunks": tuple(arr.chunks), "preferred_chunks": dict(zip(dims, arr.chunks, strict=True)),
                "read_by": "zarr-python", "zstrings_unsupported": why}
    return VariableSpec(name=apath.rsplit("/", 1)[-1], dims=dims, data=ZarrPythonArray(arr, f"variable {apath!r} of {tree.store.display}"),  # type: ignore[arg-type]
                        attrs=attrs, encoding=encoding)


def _char_dims_joinable(tree: TreeMeta, path: str, arrays: list[str],
                        resolved: Mapping[str, list[Dimension]]) -> set[str]:
    """The dimensions an NC_CHAR variable's characters may be joined along, as xarray decides it
    (``xarray.conventions.decode_cf_variables``' ``stackable``): no variable is named after the
    dimension and every variable using it (dropped ones too) is NC_CHAR with it as last dimension.
    Elsewhere engine="netcdf4" returns the separate characters, and so do we."""
    users: dict[str, list[tuple[bool, bool]]] = {}
    for name in arrays:
        meta = tree.arrays[_join(path, name)]
        names = [d.name for d in resolved.get(name, [])]
        for i, d in enumerate(names):
            users.setdefault(d, []).append((meta.string_kind == "char", i == len(names) - 1))
    return {d for d, us in users.items() if d not in arrays and all(c and last for c, last in us)}


def _variable(tree: TreeMeta, meta: ArrayMeta, dims: list[Dimension], options: ReadOptions,
              join_chars: bool = True) -> VariableSpec:
    """One array as a variable: logical shape, fill and missing values, string layout and decoder,
    encoding and the lazy data.

    Long because these decisions depend on each other (an NC_CHAR's joined string dimension
    changes the shape, the layout chooses the decoder and the encoding) and on both Zarr versions.
    """
    logical = tuple(max(d.size, n) if d.unlimited else n for d, n in zip(dims, meta.shape, strict=False))
    if meta.scalar:
        logical = (1,)
    # a |O array's fill_value null: never-written chunks are missing, as zarr-python 2 reads them
    null_fill = meta.generation == "zarr-v2" and meta.dtype.kind == "O" and meta.fill_value is None
    optional = getattr(meta, "optional", False)  # zarrs' nullable type: chunks hold None, fill may be null
    null_fill = null_fill or optional
    wants_bytes = strings.resolve_string_dtype(options.string_dtype).kind == "S"
    raw = ChunkedArray(tree.store, meta, logical, utf8_errors=options.utf8_errors, threads=options.decode_threads,
                       null_fill=null_fill, raw_bytes=wants_bytes)
    attrs = dict(meta.attrs)
    encoding: dict[str, Any] = {
        "chunks": None if meta.scalar else meta.chunks,
        "preferred_chunks": {} if meta.scalar else dict(zip([d.name for d in dims], meta.chunks, strict=True)),
    }
    v3 = meta.generation == "zarr-v3"
    if v3 and "_FillValue" in attrs:
        from ..formats.zarr3 import decode_xarray_fill_attr

        # xarray stores a v3 array's CF _FillValue attribute encoded (base64 bytes of the value)
        attrs["_FillValue"] = decode_xarray_fill_attr(attrs["_FillValue"], meta, store=tree.store.display)
    where = f"variable {meta.path!r} of {tree.store.display}"
    # compressors/filters as the codec objects xarray's to_zarr takes (zarr_encoding explains the
    # vocabulary); the store's own JSON stays under zstrings_* keys, which xarray's writers ignore
    if v3:
        text = meta.string_kind is not None
        if meta.sharded:
            encoding["chunks"] = meta.inner_chunks
        encoding.update(zarr_format=3, zarr_data_type=meta.data_type, codecs=[dict(c) for c in meta.codecs],
                        layout=raw.pipeline_v3.layout)
        encoding.update(v3_codecs_encoding(meta.codecs, shards=meta.shards, text=text, where=where))
    else:
        encoding.update(
            zarr_dtype=meta.dtype_str,
            zstrings_compressor=None if meta.compressor is None else dict(meta.compressor),
            zstrings_filters=[dict(f) for f in meta.filters] or None,
            order=meta.order,
            dimension_separator=meta.dimension_separator,
        )
        encoding.update(store_codecs_encoding(meta.compressor, meta.filters, dtype=meta.dtype,
                                              string_kind=meta.string_kind, where=where))
        if meta.dimension_references is not None:
            encoding["dimension_references"] = list(meta.dimension_references)
    dim_names = tuple(d.name for d in dims)
    what = f"variable {meta.path!r} of {tree.store.display}"
    kind = meta.string_kind
    decode = "numeric"
    text_encoding = "utf-8"
    netcdf_c = tree.root.nc_properties is not None
    if kind == "string":
        decode, text_encoding = _fixed_bytes_decode(meta, attrs, encoding, netcdf_c=netcdf_c,
                                                    wants_bytes=wants_bytes)
    elif kind == "char" and wants_bytes:  # the stored characters, joined where text would be
        if "_Encoding" in attrs:  # kept as information; xarray must not decode the bytes with it
            encoding["_Encoding"] = attrs.pop("_Encoding")
        encoding.update(nc_type="NC_CHAR", dtype=np.dtype("S1"),
                        char_dim_width=meta.shape[-1] if meta.shape and not meta.scalar else 1)
        decode = "char-raw"
        if options.concat_characters and ((dims and join_chars) or meta.scalar):
            decode = "bytes-char"
            if dims:
                encoding["char_dim_name"] = dim_names[-1]
                dim_names = dim_names[:-1]
                encoding["preferred_chunks"].pop(dims[-1].name, None)
    elif kind == "char":
        stored_encoding = attrs.pop("_Encoding", None)  # decode as UTF-8 when the store says nothing
        text_encoding = str(stored_encoding or "utf-8")
        encoding.update(nc_type="NC_CHAR", dtype=np.dtype("S1"),
                        char_dim_width=meta.shape[-1] if meta.shape and not meta.scalar else 1)
        if stored_encoding is not None:
            encoding["_Encoding"] = text_encoding
        if options.concat_characters and dims and join_chars:
            decode = "char"
            encoding["char_dim_name"] = dim_names[-1]
            dim_names = dim_names[:-1]
            encoding["preferred_chunks"].pop(dims[-1].name, None)
        elif options.concat_characters and meta.scalar:
            decode = "char"
        elif options.concat_characters and stored_encoding is not None:
            # characters not joined (see _char_dims_joinable): engine="netcdf4" decodes each
            # one with _Encoding; so do we, with the utf8_errors policy
            decode = "char-sep"
        else:
            decode = "char-raw"
            if stored_encoding is not None:  # as stored: xarray's own CF decoding may use it
                attrs["_Encoding"] = encoding.pop("_Encoding")
    elif kind == "unicode":
        decode = "bytes-unicode" if wants_bytes else "unicode"
    elif kind == "vlen" and wants_bytes:
        decode = "vlen-bytes"  # (the ChunkedArray reads the chunks as their bytes twins)
    elif kind == "vlen":
        decode = "text" if v3 else "vlen"  # v3 chunks decode straight to StringDType
    elif kind == "vlen-bytes":
        decode = "vlen-bytes"
    missing = None
    if kind in ("string", "char", "unicode", "vlen") and "_FillValue" in attrs:
        # xarray would mask a string fill value into an object array; we mask it ourselves (below)
        # into a StringDType with an NA object, and keep the fill in encoding, as engine="netcdf4"
        encoding["_FillValue"] = attrs.pop("_FillValue")
        fv = encoding["_FillValue"]
        if options.mask_and_scale and kind != "char" and isinstance(fv, str):
            # (NC_CHAR: engine="netcdf4" compares the joined strings with a one-character fill,
            # which a joined value never equals; we do not mask either)
            missing = fv
    if decode.startswith(("bytes", "vlen-bytes", "char-raw")):
        missing = None  # bytes are returned as stored: a str fill value cannot match them
    # (Zarr v3: xarray writes _FillValue as an attribute and does not mask with fill_value)
    if (kind is None and meta.generation == "zarr-v2" and not netcdf_c and meta.fill_value is not None
            and "_FillValue" not in attrs):
        # pure Zarr: the .zarray fill value is the missing-value marker, as xarray's zarr engine reads
        # it; not for netcdf-c's mode=zarr stores, whose default fill is no mask (as engine="netcdf4")
        attrs["_FillValue"] = meta.fill_value
    data = LazyArray(raw, decode=decode, options=options, encoding=text_encoding, what=what,
                     missing=missing, null_chunks=(null_fill and decode == "vlen") or (optional and decode == "text"))
    # xarray keeps StringDType only when encoding["dtype"] says so (else it casts to object), and
    # turns object arrays into fixed-width U when encoding["dtype"] is str: say what we return.
    if data.dtype.kind == "T":
        encoding["dtype"] = data.dtype
    elif data.dtype.kind == "U" and decode != "char":
        encoding["dtype"] = str
    return VariableSpec(name=meta.name, dims=dim_names, data=data, attrs=attrs, encoding=encoding)


def _fixed_bytes_decode(meta: Any, attrs: dict[str, Any], encoding: dict[str, Any], *, netcdf_c: bool,
                        wants_bytes: bool) -> tuple[str, str]:
    """(decode, text encoding) of a fixed-width bytes array (``|Sn``, v3 ``null_terminated_bytes``).

    It is text when the store says so: NCZarr's NC_STRING, anything netcdf-c wrote (its pure-Zarr
    mode too), a ``_nczarr_maxstrlen`` attribute (``prepare_for_zarr``), or xarray's ``_Encoding``
    attribute (decoded with it as xarray's CF decoding does, only trailing NULs ending a value).
    Otherwise it is bytes, returned as stored exactly as engine="zarr" and zarr-python return it:
    ``|Sn`` in a pure Zarr store is what xarray writes for a bytes variable (binary payloads too),
    and nothing says it is text. ``string_dtype="bytes"`` returns the stored bytes for every array.
    """
    declared = meta.generation not in ("zarr-v2", "zarr-v3") or netcdf_c or getattr(meta, "maxstrlen_attr", False)
    enc = attrs.get("_Encoding")
    if declared:
        encoding.update(nc_type="NC_STRING", maxstrlen=meta.dtype.itemsize)
    if wants_bytes or (not declared and enc is None):
        if enc is not None:  # kept as information; xarray must not decode the bytes with it
            encoding["_Encoding"] = attrs.pop("_Encoding")
        # one byte per value of NC_STRING: an object array, so xarray does not join it as characters
        return ("bytes-obj" if declared and meta.dtype.itemsize == 1 else "bytes"), "utf-8"
    if declared:
        return "fixed", "utf-8"
    if meta.dtype.itemsize == 1 and meta.shape and not meta.scalar:
        # |S1 + _Encoding is xarray's char array (encoding dtype "S1"): xarray's own CF decoding
        # joins the characters where it may and decodes them with _Encoding, as for engine="zarr"
        return "bytes", "utf-8"
    encoding["_Encoding"] = attrs.pop("_Encoding")
    return "text-S", str(enc)


def tree_encoding(tree: TreeMeta) -> Mapping[str, Any]:
    """Store-level facts for ``ds.encoding`` and ``zstrings info``."""
    return {"zstrings_format": tree.root.generation, "nczarr_version": tree.root.nczarr_version}


def read_arrow(target: Any, variable: str, *, group: str = "/", storage_options: dict[str, Any] | None = None) -> Any:
    """A 1-D Zarr v3 string/bytes variable as a ``pyarrow.ChunkedArray``, one Arrow array per chunk.

    Arrow-layout chunks are wrapped zero-copy (zarrs.vlen and vlen-utf8 chunks are converted);
    missing chunks become runs of the fill value. For users who want Arrow, not numpy.
    """
    import pyarrow as pa

    from ..io.store import open_store

    tree = open_tree(open_store(target, storage_options=storage_options))
    tree.store.pin_version(tree.version)
    path = _join("/" + group.strip("/") if group.strip("/") else "/", variable)
    meta = tree.arrays.get(path)
    if meta is None or meta.generation != "zarr-v3" or meta.string_kind not in ("vlen", "vlen-bytes"):
        raise UnsupportedError(
            f"read_arrow needs a Zarr v3 string or bytes array; {path!r} in {tree.store.display} is "
            f"{'missing' if meta is None else meta.generation + ' ' + str(meta.dtype)}. Use xr.open_dataset."
        )
    if len(meta.shape) != 1:
        raise UnsupportedError(f"read_arrow reads 1-D arrays; {path!r} has shape {list(meta.shape)}.")
    arr = ChunkedArray(tree.store, meta, meta.shape)
    n, c = meta.shape[0], meta.chunks[0]
    keys = [arr.chunk_key((i,)) for i in range(math.ceil(n / c))]
    pieces = []
    for i, (key, raw) in enumerate(zip(keys, tree.store.get_many(keys), strict=True)):
        length = min(c, n - i * c)
        if raw is None:
            fill = meta.fill_value if meta.fill_value is not None else ""
            pieces.append(pa.array([fill] * length))
        else:
            pieces.append(arr.pipeline_v3.decode_arrow(raw, meta.chunks, key=key).slice(0, length))
    types = {p.type for p in pieces}
    if len(types) > 1:
        pieces = [p.cast(pa.large_string() if meta.string_kind == "vlen" else pa.large_binary()) for p in pieces]
    tree.store.check_version()
    return pa.chunked_array(pieces)
