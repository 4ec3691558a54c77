"""A VirtualiZarr parser for NCZarr (every netcdf-c generation) and pure Zarr v2 stores.

The v3 metadata of each array are the ones ``xr_zstrings.migrate`` writes (``write.migrate.
plan_migration``: one translation of dimensions, typed attributes, fill values, NC_CHAR and
NC_STRING); each chunk is a reference (path, offset 0, length) to the source's chunk object, and
the chunks of an array ``migrate`` rewrites (no v3 codec chain decodes its bytes unchanged, or
``missing="optional"``) are inlined with the rewritten bytes. Never-written chunks stay missing
(they read as the fill value). Used as VirtualiZarr's own parsers are::

    vds = open_virtual_dataset(url, registry=registry, parser=NCZarrParser())
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ZStringsError
from ..io.zstore import ZStore
from ..read.tree import open_tree
from ..write.migrate import ArrayPlan, plan_migration, rewritten_chunks, stored_chunks

if TYPE_CHECKING:
    from obspec_utils.registry import ObjectStoreRegistry
    from virtualizarr.manifests import ManifestArray, ManifestGroup, ManifestStore

__all__ = ["NCZarrParser"]

_MISSING_MODES = (None, "values", "optional")


class NCZarrParser:
    """Parse an NCZarr or Zarr v2 store into a VirtualiZarr ``ManifestStore``.

    ``group``: the store's group (``"sub/inner"``) taken as the root; ``skip_variables``: array
    names left out at every level; ``missing``: as :func:`xr_zstrings.migrate`'s (None refuses a
    store whose bytes arrays would lose their missing values, naming them; ``"values"`` references
    their chunks, the missing values reading as the fill; ``"optional"`` inlines them rewritten
    into zarrs' nullable optional type).
    """

    def __init__(self, group: str | None = None, skip_variables: Iterable[str] | None = None,
                 missing: str | None = None) -> None:
        if missing not in _MISSING_MODES:
            raise ZStringsError(f"Invalid missing={missing!r}: expected None, 'values' or 'optional' (as "
                                "xr_zstrings.migrate's).")
        self.group = group.strip("/") if group else None
        self.skip_variables = frozenset(skip_variables or ())
        self.missing = missing

    def __call__(self, url: str, registry: ObjectStoreRegistry[Any]) -> ManifestStore:
        """The store at ``url`` (a path or URL that ``registry`` resolves) as a ManifestStore."""
        from virtualizarr.manifests import ManifestStore
        from virtualizarr.manifests.manifest import validate_and_normalize_path_to_uri
        from zarr.storage import ObjectStore

        _register_plugin()
        uri = validate_and_normalize_path_to_uri(os.fspath(url), fs_root=Path.cwd().as_uri())
        where = uri.rstrip("/")  # (the store's root: its chunks' URLs are below it)
        if urllib.parse.unquote(where) != where:
            raise ZStringsError(
                f"Cannot virtualize {os.fspath(url)}: its URL needs percent-encoding ({where!r}), and VirtualiZarr's "
                "ManifestStore reads a chunk URL's path verbatim (it finds no '%20' folder) while icechunk refuses "
                "one that is not encoded. Move or link the store to a path of letters, digits and -_./ only.")
        obs, rel = registry.resolve(uri)
        rel = str(rel).strip("/")
        zs = ZStore(ObjectStore(obs, read_only=True), prefix=rel, display=uri,
                    remote=not uri.startswith("file:"))
        tree = open_tree(zs)
        arrays, groups = plan_migration(tree, in_place=False, missing=self.missing or "values")
        self._refuse_lost(uri, arrays)
        sizes = _object_sizes(obs, rel)
        root = "/" + self.group if self.group else "/"
        if root not in groups:
            raise ZStringsError(f"{uri}: no group {self.group!r} (groups: {sorted(groups)}). Pass one of those, "
                                "or group=None for the root.")
        return ManifestStore(registry=registry, group=self._group(root, zs, tree, arrays, groups, sizes, where))

    def _refuse_lost(self, uri: str, arrays: Mapping[str, ArrayPlan]) -> None:
        lost = sorted(p for p, a in arrays.items() if a.missing_lost)
        if self.missing is None and lost:
            raise ZStringsError(
                f"Cannot virtualize {uri} without a choice: the missing values of {len(lost)} bytes array(s) "
                f"({', '.join(lost)}) would read as values, because no Zarr v3 metadata marks a bytes value "
                "missing for xarray. Pass missing='optional' (NCZarrParser(missing='optional'), "
                "virtualize(..., missing='optional')) to inline just those arrays rewritten into zarrs' nullable "
                "optional type, which keeps them missing, or missing='values' to reference their chunks, the "
                "missing values then reading as the fill.")

    def _group(self, gpath: str, zs: ZStore, tree: Any, arrays: Mapping[str, ArrayPlan],
               groups: Mapping[str, Any], sizes: Mapping[str, int], where: str) -> ManifestGroup:
        """The ManifestGroup of group ``gpath`` and everything below it."""
        from virtualizarr.manifests import ManifestGroup

        names, subgroups = tree.children[gpath]
        prefix = gpath.rstrip("/") + "/"
        out_arrays = {n: _manifest_array(zs, arrays[prefix + n], sizes, where)
                      for n in names if n not in self.skip_variables}
        out_groups = {g: self._group(prefix + g, zs, tree, arrays, groups, sizes, where) for g in subgroups}
        return ManifestGroup(arrays=out_arrays, groups=out_groups, attributes=groups[gpath]["attributes"])


def _register_plugin() -> None:
    """The plugin's data types (``xr_zstrings.nc_char``) known to zarr-python (3.1.x loads no entry points)."""
    from ..zarr_plugin import register

    register()


def _object_sizes(obs: Any, rel: str) -> dict[str, int]:
    """Every object below the store's root (one listing): its key relative to the root -> size."""
    import obstore

    lead = rel + "/" if rel else ""
    out: dict[str, int] = {}
    for batch in obstore.list(obs, prefix=rel or None):
        for obj in batch:
            key = str(obj["path"])
            if key.startswith(lead):
                out[key[len(lead):]] = int(obj["size"])
    return out


def _manifest_array(zs: ZStore, plan: ArrayPlan, sizes: Mapping[str, int], where: str) -> ManifestArray:
    """One array: ``migrate``'s v3 metadata, its chunks referenced (or, rewritten, inlined)."""
    from virtualizarr.manifests import ChunkManifest, ManifestArray
    from virtualizarr.manifests.manifest import INLINED_CHUNK_PATH, MISSING_CHUNK_PATH
    from zarr.core.metadata import ArrayV3Metadata

    js = plan.zarr_json
    shape = js["shape"]
    chunks = js["chunk_grid"]["configuration"]["chunk_shape"]
    grid = tuple(-(-n // c) for n, c in zip(shape, chunks, strict=True))
    paths = np.full(grid, MISSING_CHUNK_PATH, dtype=np.dtypes.StringDType())
    offsets = np.zeros(grid, dtype=np.uint64)
    lengths = np.zeros(grid, dtype=np.uint64)
    inlined: dict[tuple[int, ...], bytes] = {}
    if plan.reuse:
        for idx, key in stored_chunks(plan):
            size = sizes.get(key)
            if size is None:
                continue  # never written: missing (reads as the fill value)
            if size == 0:
                raise ZStringsError(f"{where}/{key}: a chunk object of 0 bytes, which VirtualiZarr cannot reference "
                                    "(no codec chain decodes it either); rewrite the array with migrate.")
            paths[idx], lengths[idx] = f"{where}/{key}", size
    else:
        for batch in rewritten_chunks(zs, plan):
            for idx, data in batch:
                paths[idx], lengths[idx] = INLINED_CHUNK_PATH, len(data)
                inlined[idx] = data
    manifest = ChunkManifest.from_arrays(paths=paths, offsets=offsets, lengths=lengths, validate_paths=False,
                                         inlined=inlined)
    return ManifestArray(metadata=ArrayV3Metadata.from_dict(dict(js)), chunkmanifest=manifest)
