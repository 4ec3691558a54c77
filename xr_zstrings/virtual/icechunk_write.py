"""A parsed source (a VirtualiZarr ``ManifestStore``) written into an icechunk session's store.

Each array's ``zarr.json`` is its parser's v3 metadata as they are (for an NCZarr store:
``migrate``'s), its referenced chunks icechunk virtual references, its inlined chunks native
chunks. VirtualiZarr's own writer (``vds.vz.to_icechunk``) is not used for this: it creates each
array again from its NumPy dtype, which turns NC_CHAR (``xr_zstrings.nc_char``) into
``null_terminated_bytes`` of length 1, cannot tell ``variable_length_bytes`` from ``string`` and
replaces the fill value; docs/virtual.md. The target is opened by the write session
(``write.session``: an icechunk session's store is committed by its owner, the caller).
"""

from __future__ import annotations

import json
import math
import warnings
from typing import Any

from ..errors import ZStringsError
from ..write.session import write_session

__all__ = ["write_virtual"]


def write_virtual(manifest_store: Any, store: Any, *, group: str | None = None, mode: str = "w-") -> None:
    """Write every group and array of ``manifest_store`` into the icechunk ``store`` (at ``group``);
    ``mode`` "w-" refuses a non-empty target, "w" replaces it. Nothing is committed."""
    root = manifest_store._group  # (VirtualiZarr has no public accessor; its own xarray.py reads this)
    prefix = group.strip("/") if group else ""
    with write_session(store, mode, fmt="v3", group=prefix or None) as s:
        _parents(s.zstore, prefix)
        _write_group(s.zstore, store, root, prefix)
        s.finish()


def _parents(zs: Any, prefix: str) -> None:
    """The groups above ``prefix`` that are not there yet, as empty groups (else no reader finds it)."""
    parts = prefix.split("/") if prefix else []
    for i in range(len(parts)):
        key = _join("/".join(parts[:i]), "zarr.json")
        if zs.get_bytes(key) is None:
            zs.set_many([(key, json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}}).encode())])


def _json(metadata: Any, path: str = "") -> bytes:
    """A node's zarr.json, as zarr-python writes it, except that a NaN or infinite number in its
    attributes becomes the string "NaN" / "Infinity" / "-Infinity" (Zarr v3's spelling of such fill
    values), with a warning naming it: icechunk refuses JSON's NaN literal (icechunk#1238)."""
    from zarr.core.buffer import default_buffer_prototype

    obj = json.loads(metadata.to_buffer_dict(default_buffer_prototype())["zarr.json"].to_bytes())
    changed: list[str] = []
    obj["attributes"] = _finite(obj.get("attributes") or {}, changed, "")
    if changed:
        warnings.warn(f"/{path}: attribute(s) {', '.join(dict.fromkeys(changed))} hold NaN or infinite numbers, which icechunk "
                      "cannot store (icechunk#1238): written as the strings 'NaN', 'Infinity', '-Infinity' in the "
                      "icechunk repository (the source keeps the numbers).", UserWarning, stacklevel=2)
    return json.dumps(obj, indent=2, ensure_ascii=False, allow_nan=False).encode("utf-8")


def _finite(value: Any, changed: list[str], where: str) -> Any:
    """``value`` with each non-finite float replaced by its Zarr v3 string (``changed``: where)."""
    if isinstance(value, float) and not math.isfinite(value):
        changed.append(where.split("/")[0] or where)
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, list):
        return [_finite(v, changed, where) for v in value]
    if isinstance(value, dict):
        out = {k: _finite(v, changed, f"{where}/{k}" if where else k) for k, v in value.items()}
        return out
    return value


def _join(prefix: str, name: str) -> str:
    return f"{prefix}/{name}" if prefix else name


def _write_group(zs: Any, store: Any, node: Any, path: str) -> None:
    """A group's zarr.json, its arrays (metadata before chunks: icechunk refuses chunks of an array
    it does not know yet), then its subgroups."""
    zs.set_many([(_join(path, "zarr.json"), _json(node.metadata, path))])
    for name, array in node.arrays.items():
        _write_array(zs, store, array, _join(path, name))
    for name, sub in node.groups.items():
        _write_group(zs, store, sub, _join(path, name))


def _write_array(zs: Any, store: Any, array: Any, path: str) -> None:
    """One array: its metadata, its virtual references, its inlined chunks as native chunks."""
    from icechunk import VirtualChunkSpec

    meta = array.metadata
    zs.set_many([(_join(path, "zarr.json"), _json(meta, path))])
    refs, native = [], []
    for key, entry in array.manifest.dict().items():
        idx = _index(key, len(meta.shape))
        if "data" in entry:
            native.append((_join(path, meta.encode_chunk_key(idx)), bytes(entry["data"])))
        else:
            refs.append(VirtualChunkSpec(index=list(idx), location=str(entry["path"]), offset=int(entry["offset"]),
                                         length=int(entry["length"])))
    if refs:
        failed = store.set_virtual_refs(zs.full_key(path), refs, validate_containers=True)
        if failed:
            raise ZStringsError(
                f"Cannot write the virtual references of {path!r}: {len(failed)} chunk(s) (e.g. {refs[0].location}) "
                "lie outside every virtual chunk container of the icechunk repository. Add a container for the "
                "source's location (xr_zstrings.virtualize(source, repo) adds one).")
    if native:
        zs.set_many(native)


def _index(key: str, ndim: int) -> tuple[int, ...]:
    """A manifest key ("0.1", or a scalar's "0"/"c") as a chunk index."""
    if ndim == 0:
        return ()
    return tuple(int(p) for p in json.loads("[" + key.replace(".", ",") + "]"))
