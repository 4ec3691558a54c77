"""The metadata tree of a Zarr v3 store: the root's consolidated metadata when present, else
every ``zarr.json`` read level by level, one batch of concurrent requests per level.

An array whose data type or codec this package does not decode is listed in ``tree.unreadable``
(read through zarr-python where it can) instead of failing its group.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import MetadataError, UnsupportedError
from ..formats.nczarr import GroupMeta, check_name
from ..formats.zarr3 import ArrayMetaV3, GroupMetaV3, parse_node_v3
from .paths import join_path as _join
from .paths import node_key as _key

if TYPE_CHECKING:
    from .tree import TreeMeta

__all__ = ["walk"]


def walk(tree: TreeMeta, root_json: Any) -> None:
    """Read every group and array below the root (``root_json``, its zarr.json) into ``tree``."""
    zstore = tree.store
    root = parse_node_v3(root_json, path="/", store=zstore.display)
    if not isinstance(root, GroupMetaV3):
        raise MetadataError(
            f"{zstore.display} is a single Zarr v3 array, not a group: expected node_type 'group' in "
            "the root zarr.json. Open its parent directory."
        )
    nodes: dict[str, Any] = {"/": root}
    if root.consolidated is not None:
        for rel, obj in root.consolidated.items():
            p = "/" + rel.strip("/")
            node = _parse(tree, obj, p)
            if node is not None:
                nodes[p] = node
    else:
        _list_levels(tree, nodes)
    for path in sorted(nodes, key=lambda p: (p.count("/"), p)):
        _add_node(tree, nodes, path)


def _parse(tree: TreeMeta, obj: Any, p: str) -> Any:
    """One node's zarr.json parsed; None for an array this package cannot decode (listed in
    ``tree.unreadable``, not failing its group)."""
    try:
        return parse_node_v3(obj, path=p, store=tree.store.display)
    except UnsupportedError as e:
        if not (isinstance(obj, dict) and obj.get("node_type") == "array"):
            raise
        tree.unreadable[p] = str(e)
        return None


def _list_levels(tree: TreeMeta, nodes: dict[str, Any]) -> None:
    """Every node below the root group, read level by level (one batch of requests a level) into
    ``nodes``."""
    zstore = tree.store
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
            node = _parse(tree, obj, c)
            if node is None:
                continue
            nodes[c] = node
            if isinstance(node, GroupMetaV3):
                level.append(c)


def _add_node(tree: TreeMeta, nodes: dict[str, Any], path: str) -> None:
    """One node into ``tree`` (its parent group already there): a group, or an array."""
    zstore = tree.store
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
