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
from datetime import UTC, datetime, timedelta
from typing import Any

from ..errors import ZStringsError
from ..write.session import write_session

__all__ = ["write_virtual"]


def write_virtual(manifest_store: Any, store: Any, *, group: str | None = None, mode: str = "w-",
                  last_updated_at: datetime | None = None) -> None:
    """Write every group and array of ``manifest_store`` into the icechunk ``store`` (at ``group``);
    ``mode`` "w-" refuses a non-empty target, "w" replaces it. Nothing is committed. Each reference
    carries ``last_updated_at`` (default: now + 1 s, as VirtualiZarr's ``to_icechunk``; icechunk keeps
    whole seconds): icechunk refuses to read a chunk whose object changed after it."""
    root = manifest_group(manifest_store)
    prefix = group.strip("/") if group else ""
    checked = last_updated_at or datetime.now(UTC) + timedelta(seconds=1)
    with write_session(store, mode, fmt="v3", group=prefix or None) as s:
        _parents(s.zstore, prefix)
        _write_group(s.zstore, store, root, prefix, checked)
        s.finish()


def manifest_group(manifest_store: Any) -> Any:
    """The root ``ManifestGroup`` of a VirtualiZarr ``ManifestStore``: its constructor's ``group``,
    which VirtualiZarr 2.8 keeps only as the private ``_group`` (its own xarray.py reads it the same
    way; no public getter). The one place this package reads it; a VirtualiZarr without it is named."""
    root = getattr(manifest_store, "_group", None)
    if root is None:
        import virtualizarr

        raise ZStringsError(
            f"VirtualiZarr {virtualizarr.__version__}'s ManifestStore has no '_group' (its root ManifestGroup, "
            "read by xr_zstrings.virtual as VirtualiZarr 2.8's own xarray.py does): this xr_zstrings supports "
            'VirtualiZarr 2.8; pip install "virtualizarr>=2.8,<3" or a newer xr_zstrings.')
    return root


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


def _write_group(zs: Any, store: Any, node: Any, path: str, checked: datetime) -> None:
    """A group's zarr.json, its arrays (metadata before chunks: icechunk refuses chunks of an array
    it does not know yet), then its subgroups."""
    zs.set_many([(_join(path, "zarr.json"), _json(node.metadata, path))])
    for name, array in node.arrays.items():
        _write_array(zs, store, array, _join(path, name), checked)
    for name, sub in node.groups.items():
        _write_group(zs, store, sub, _join(path, name), checked)


def _write_array(zs: Any, store: Any, array: Any, path: str, checked: datetime) -> None:
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
                                         length=int(entry["length"]), last_updated_at_checksum=checked))
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
