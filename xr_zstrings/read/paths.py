"""Node paths of a store's tree (``/``, ``/sub``, ``/sub/v``) and the store keys below them."""

from __future__ import annotations

__all__ = ["join_path", "node_key"]


def join_path(parent: str, name: str) -> str:
    """The path of child ``name`` of the group at ``parent``."""
    return f"/{name}" if parent == "/" else f"{parent}/{name}"


def node_key(path: str, obj: str) -> str:
    """The store key of object ``obj`` (``.zarray``, ``zarr.json``, a chunk key) of node ``path``."""
    return f"{path.strip('/')}/{obj}" if path != "/" else obj
