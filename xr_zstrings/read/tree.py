"""A store's metadata tree: every group and array, read once, from one version of the store.

``open_tree`` fetches the root's metadata objects, then hands the walk to the reader of the format
it found (``tree_v2``: Zarr v2 and every NCZarr generation; ``tree_v3``: Zarr v3). Both read one
tree level per batch of concurrent requests and fill the same ``TreeMeta``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import DimensionError, IncompleteStoreError, ZStringsError
from ..formats.array import ArrayMeta
from ..formats.nczarr import Dimension, GroupMeta
from ..io.consolidated import INCOMPLETE_MARKER, ZMETADATA, consolidated_meta, consolidated_view, version_of
from ..io.zstore import ZStore
from . import tree_v2, tree_v3
from .paths import node_key

__all__ = ["TreeMeta", "open_tree"]


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
    #: the lineage of the version read (its root's version record, ``commit.VersionRecord``)
    lineage: str | None = None
    #: read from consolidated metadata (``.zmetadata``)
    consolidated: bool = False

    @property
    def root(self) -> GroupMeta:
        return self.groups["/"]

    @property
    def netcdf_c(self) -> bool:
        """netcdf-c wrote the store (its root carries ``_NCProperties``)."""
        return self.root.nc_properties is not None

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


def open_tree(zstore: ZStore, *, consolidated: bool = True, serve: Mapping[str, Any] | None = None) -> TreeMeta:
    """Read all group and array metadata, concurrently, one tree level at a time.

    A local store that a writer swaps in while it is read (a replacement in another process commits
    by exchanging directories) is read again, so the metadata always comes from one version: the
    old one or the new one, never the root of one and the arrays of the other. Changes in place
    (appends, added variables: the same lineage) are served whole from ``.zmetadata``.
    ``consolidated=False`` reads every metadata object (a writer that found one changed since);
    ``serve`` (key -> JSON) serves the metadata objects given instead (a writer's mended copies).
    """
    for _ in range(10):
        before = zstore.version_token()
        # a root without our version record: its identity is its lineage (ZStore.lineage_now), taken
        # before the read and compared after it (same_version), so it is the read version's
        root_id = zstore.lineage_now() if before is not None else None
        try:
            tree = _open_tree(zstore, consolidated=consolidated, serve=serve)
        except ZStringsError:
            if before is None or zstore.version_token() == before:
                raise
            continue
        lineage = tree.lineage
        if lineage is None and root_id is not None and root_id.startswith(("zgroup:", "zarrjson:")):
            lineage = root_id
        if before is None or zstore.same_version(before, lineage):
            tree.version = before
            zstore.read_lineage = lineage
            return tree
    return _open_tree(zstore, consolidated=consolidated, serve=serve)


def _open_tree(zstore: ZStore, *, consolidated: bool = True, serve: Mapping[str, Any] | None = None) -> TreeMeta:
    """Fetch the root's objects of every format and ``.zmetadata`` in one batch, decide how the
    store is read (``commit.consolidated_view``), then walk the format found."""
    tree = TreeMeta(store=zstore)
    zstore.drop_consolidated()  # (an earlier read's copy: this read decides again)
    root_names = tree_v2.ROOT_OBJECTS + ("zarr.json", ZMETADATA)
    root_objs = dict(zip(root_names, zstore.get_json_many([node_key("/", o) for o in root_names]), strict=True))
    zmetadata = root_objs.pop(ZMETADATA, None)
    zarr_json = root_objs.pop("zarr.json")
    zstore.read_v3_beside = zarr_json is not None  # (a store migrated in place: write.migrate.keep_v3_in_step)
    view = consolidated_view(root_objs[".zgroup"], root_objs[".zattrs"], zmetadata, remote=zstore.remote) \
        if consolidated else "objects"
    if serve is not None:
        zmetadata, view = {"zarr_consolidated_format": 1, "metadata": dict(serve)}, "given"
    if view == "use" and version_of((consolidated_meta(zmetadata) or {}).get(".zgroup")) is None \
            and not _same_children(zstore, zmetadata):
        view = "objects"  # another tool's .zmetadata that misses nodes added since (or lists removed ones)
    if view in ("use", "given") and zstore.use_consolidated(zmetadata, force=True):
        served = zstore.consolidated
        root_objs[".zgroup"], root_objs[".zattrs"] = served.get(".zgroup"), served.get(".zattrs")
        tree.consolidated = True
        if zstore.recorded is not None:
            zstore.recorded.update(served)
    for o, obj in ((".zgroup", root_objs[".zgroup"]), ("zarr.json", zarr_json)):
        if isinstance(obj, dict) and INCOMPLETE_MARKER in obj:
            raise IncompleteStoreError(
                f"Store {zstore.display} is incomplete: its root {o!r} is the placeholder a writer puts "
                "first and replaces last, so a write is still running or was interrupted. Wait for it; "
                f"`zstrings check {zstore.display}` tells which, and `zstrings repair {zstore.display}` "
                "completes or undoes an interrupted write."
            )
    rec = version_of(root_objs[".zgroup"])
    tree.lineage = rec.lineage if rec is not None else None
    if root_objs[".zgroup"] is None and root_objs[".nczgroup"] is None and zarr_json is not None:
        tree_v3.walk(tree, zarr_json)
    else:
        tree_v2.walk(tree, root_objs, zmetadata)
    return tree


def _same_children(zstore: ZStore, zmetadata: Any) -> bool:
    """Whether another tool's ``.zmetadata`` names the nodes the store's root holds (one LIST): the
    usual way such a copy goes stale is a node added without re-consolidating (zarr-python's
    ``create_array``, xarray's ``to_zarr(..., consolidated=False)``). Ours are kept in step by
    every writer and carry a version record instead (``commit.consolidated_view``)."""
    meta = consolidated_meta(zmetadata) or {}
    named = {k.split("/", 1)[0] for k in meta if "/" in k}
    found = {n for n in zstore.list_dir("") if not n.startswith(".") and n != "zarr.json"}
    return named == found
