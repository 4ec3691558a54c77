"""Change an existing Zarr v3 store: append along a dimension, or add variables
(``to_zarr_v3(mode="a")``), through the same commit protocol as ``append`` (NCZarr / Zarr v2).

Both read the store's ``zarr.json`` objects after the claim, plan and check everything, record in the
journal what their chunks may leave, write the chunks, and return the metadata objects that change
(the arrays', the groups', the root's with its consolidated metadata), which the caller commits:
``Transaction.commit(objects, root="zarr.json", consolidated=False)`` (the journal records their old
values, the root becomes the placeholder every reader refuses, the objects, then the root: the
commit point). Appended values are encoded as the stored ones (their CF attributes, data type, string
layout, fill), written chunk by chunk: a partial last chunk is read, completed and rewritten (its old
part unchanged, so readers of the old metadata, lazy ones included, keep their version).
``undo_appends`` is what a recovery runs for an append that did not commit (``repair.undo``).
"""

from __future__ import annotations

import copy
import itertools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import xarray as xr
from xarray import conventions

from ..codecs.chunk import classify_data_type
from ..errors import DimensionError, ZStringsError
from ..formats.zarr3 import ArrayMetaV3, decode_xarray_fill_attr, parse_node_v3
from ..io.zstore import ZStore
from ..text import policy as strings
from .plan import _is_dask, _missing, held_otherwise, text_kind
from .plan_v3 import LayoutOptions, plan_group

__all__ = ["add_v3", "append_v3", "undo_appends"]


def read_nodes(zs: ZStore) -> dict[str, Any]:
    """Every ``zarr.json`` of the store (relative key -> JSON object), read object by object."""
    from ..zarr_compat import sync

    lead = zs.full_key("").rstrip("/")

    async def listing() -> list[str]:
        return [k async for k in zs.store.list_prefix(lead + "/" if lead else "")]

    keys = []
    for k in sync(listing()):
        rel = k[len(lead):].lstrip("/") if lead else k
        if rel == "zarr.json" or rel.endswith("/zarr.json"):
            keys.append(rel)
    return dict(zip(keys, zs.get_json_many(keys), strict=True))


def _root(zs: ZStore, nodes: Mapping[str, Any]) -> dict[str, Any]:
    root = nodes.get("zarr.json")
    if not isinstance(root, Mapping) or root.get("node_type") != "group":
        raise ZStringsError(f"Cannot write into {zs.display} with to_zarr_v3(mode='a'): it holds no Zarr v3 store "
                            "(no root group zarr.json). Write it first with mode='w-'.")
    return dict(root)


def _group_key(zs: ZStore, nodes: Mapping[str, Any], key: str, action: str) -> None:
    obj = nodes.get(f"{key}/zarr.json" if key else "zarr.json")
    if not isinstance(obj, Mapping) or obj.get("node_type") != "group":
        groups = sorted("/" + k[: -len("zarr.json")].strip("/") for k, v in nodes.items()
                        if isinstance(v, Mapping) and v.get("node_type") == "group")
        raise ZStringsError(f"Cannot {action} group {'/' + key!r}: {zs.display} has no such group (groups: "
                            f"{groups}). Write new groups with mode='w' and group=...")


def _committed_objects(zs: ZStore, nodes: Mapping[str, Any], root: dict[str, Any],
                       changed: dict[str, Any]) -> dict[str, Any]:
    """The objects to commit: ``changed`` and the root, its inline consolidated metadata (when it
    has some) rebuilt from every node as the write leaves them."""
    from .zarr3 import _consolidated_root

    out = dict(changed)
    base = {k: v for k, v in root.items() if k != "consolidated_metadata"}
    if isinstance(root.get("consolidated_metadata"), Mapping):
        base = _consolidated_root(zs, base, {**{k: v for k, v in nodes.items() if k != "zarr.json"}, **changed},
                                  others=False)
    out["zarr.json"] = {**base, **{k: v for k, v in changed.get("zarr.json", {}).items()
                                   if k != "consolidated_metadata"}}
    return out


# ---------------------------------------------------------------------------------------------
# Append
# ---------------------------------------------------------------------------------------------


@dataclass
class _Job:
    """One array to append to: its key, stored metadata, the new values (encoded as stored), the axis."""

    key: str
    name: str
    meta: dict[str, Any]
    parsed: ArrayMetaV3
    var: xr.Variable
    axis: int
    kind: Any  # "str"/"bytes" for text, None for numbers

    @property
    def old(self) -> int:
        return int(self.parsed.shape[self.axis])


def _text_fill(meta: Mapping[str, Any], parsed: ArrayMetaV3) -> tuple[Any, bool]:
    """(the string ``_FillValue`` missing values are written as, or None; whether the array is
    zarrs' optional type, whose missing values are None)."""
    optional = isinstance(meta.get("data_type"), Mapping) and meta["data_type"].get("name") == "zarrs.optional"
    fv = (meta.get("attributes") or {}).get("_FillValue")
    if fv is None or optional:
        return None, optional
    kind = _stored_kind(meta)
    if kind == "bytes":
        import base64

        return base64.b64decode(fv), False
    return str(fv), False


def _stored_kind(meta: Mapping[str, Any]) -> Any:
    dt = meta.get("data_type")
    if isinstance(dt, Mapping) and dt.get("name") == "zarrs.optional":
        dt = (dt.get("configuration") or {}).get("name")
    return classify_data_type(dt)[0]


def _encoded_as_stored(name: str, var: xr.Variable, meta: Mapping[str, Any], parsed: ArrayMetaV3) -> xr.Variable:
    """The new values of a number/time variable CF-encoded as the stored array is (its units,
    calendar, scale, offset, _FillValue and data type), by xarray's public encoders."""
    attrs = meta.get("attributes") or {}
    enc: dict[str, Any] = {k: attrs[k] for k in ("units", "calendar", "scale_factor", "add_offset") if k in attrs}
    if "_FillValue" in attrs:
        enc["_FillValue"] = decode_xarray_fill_attr(attrs["_FillValue"], parsed)
    enc["dtype"] = parsed.dtype
    var = var.copy(deep=False)
    var.encoding = enc
    var.attrs = {k: v for k, v in var.attrs.items() if k not in enc}
    return conventions.encode_cf_variable(var, name=name, coders=conventions.ZARR_CODERS)


def _append_job(zs: ZStore, nodes: Mapping[str, Any], gkey: str, name: str, var: xr.Variable,
                append_dim: str) -> _Job:
    key = f"{gkey}/{name}" if gkey else name
    meta = nodes.get(f"{key}/zarr.json")
    what = f"variable {'/' + key!r}"
    if not isinstance(meta, Mapping) or meta.get("node_type") != "array":
        raise ZStringsError(f"Cannot append {what}: it is not in {zs.display}. Appending adds values to existing "
                            "variables only; write new variables with mode='a' without append_dim.")
    parsed = parse_node_v3(meta, path=key, store=zs.display)
    assert isinstance(parsed, ArrayMetaV3)
    stored_dims = list(parsed.dimension_names or ())
    if sorted(map(str, var.dims)) != sorted(map(str, stored_dims)):
        raise DimensionError(f"Cannot append {what}: the new values have dimensions {list(var.dims)}, the store "
                             f"{stored_dims}.")
    var = var.transpose(*stored_dims)
    axis = stored_dims.index(append_dim)
    expect = [n if i != axis else var.shape[axis] for i, n in enumerate(parsed.shape)]
    if list(var.shape) != expect:
        raise DimensionError(f"Cannot append {what}: new values have shape {list(var.shape)}, expected {expect} "
                             f"(only {append_dim!r} may differ).")
    kind = _stored_kind(meta)
    if (kind is None) != (text_kind(var) is None):
        raise ZStringsError(f"Cannot append {what} to {zs.display}: the store holds {meta.get('data_type')!r} but "
                            f"the new values are {var.dtype}. Convert them first.")
    if kind is None:
        var = _encoded_as_stored(name, var, meta, parsed)
    return _Job(key, name, dict(meta), parsed, var, axis, kind)


def append_v3(zs: ZStore, txn: Any, groups: Sequence[tuple[str, xr.Dataset]], append_dim: str) -> dict[str, Any]:
    """Append each variable that has ``append_dim`` to the stored arrays; the metadata objects
    that change (the arrays' shapes, the root's consolidated metadata). Variables without
    ``append_dim`` are left as stored. The order is the crash-safety contract: plan and check every
    variable, record the ranges, write the chunks, then return the metadata."""
    nodes = read_nodes(zs)
    root = _root(zs, nodes)
    jobs: list[_Job] = []
    for gkey, ds in groups:
        _group_key(zs, nodes, gkey, "append to")
        variables, _ = conventions.encode_dataset_coordinates(ds)
        jobs += [_append_job(zs, nodes, gkey, str(n), v, append_dim) for n, v in variables.items()
                 if append_dim in v.dims]
    if txn is not None:
        txn.set_base(nodes, consolidated_in_step=True)
        txn.record_writes(appends={j.key: {"axis": j.axis, "old": j.old, "new": j.old + j.var.shape[j.axis]}
                                   for j in jobs})
    changed: dict[str, Any] = {}
    for j in jobs:
        meta = copy.deepcopy(j.meta)
        meta["shape"][j.axis] = j.old + j.var.shape[j.axis]
        if txn is None:  # (icechunk: takes chunks only inside an array's shape; nobody sees them before its commit)
            zs.set_many([(f"{j.key}/zarr.json", json.dumps(meta, indent=2).encode())])
        meta["shape"][j.axis] = _write_appended(zs, j, append_dim)
        changed[f"{j.key}/zarr.json"] = meta
    return _committed_objects(zs, nodes, root, changed)


def _pieces(var: xr.Variable, axis: int, offset: int, c: int) -> Any:
    """The new values in pieces that end on the store's chunk boundaries along the axis (the first
    completes the partial last chunk): one piece in memory; dask-backed ones each computed on its
    own, so memory holds one row of chunks, never the whole."""
    if not _is_dask(var.data):
        yield np.asarray(var.values)
        return
    n = var.shape[axis]
    first = (-offset) % c or c
    bounds = [0, *range(min(first, n), n, c), n]
    dim = var.dims[axis]
    for lo, hi in itertools.pairwise(bounds):
        if hi > lo:
            yield np.asarray(var.isel({dim: slice(lo, hi)}).values)


def _write_appended(zs: ZStore, j: _Job, append_dim: str) -> int:
    """Write a variable's new values piece by piece; the new length along the axis."""
    from .zarr3 import ArrayWriter

    fill, optional = _text_fill(j.meta, j.parsed) if j.kind is not None else (None, False)
    grown = copy.deepcopy(j.meta)  # (the chunk grid the new chunks are keyed in)
    grown["shape"][j.axis] = j.old + j.var.shape[j.axis]
    writer = ArrayWriter(zs, j.key, grown, j.kind, fill=fill, fresh=False, name=j.name)
    c = j.parsed.chunks[j.axis]
    length = j.old
    for piece in _pieces(j.var, j.axis, j.old, c):
        if j.kind is not None and fill is None and not optional:
            miss = _missing(piece) if piece.dtype.kind in "OT" else None
            if miss is not None and miss.any():
                raise ZStringsError(
                    f"Cannot append variable {'/' + j.key!r}: {int(miss.sum())} missing value(s) (None/NaN) and the "
                    f"stored array has neither a string _FillValue nor zarrs' optional type. Fill them first "
                    f"(e.g. .fillna('')).")
        start = tuple(length - j.old if i == j.axis else 0 for i in range(piece.ndim))
        with strings.at_offset(start, block=None):
            length = _write_piece(zs, writer, j.parsed, piece, j.axis, length)
    return length


def _write_piece(zs: ZStore, writer: Any, parsed: ArrayMetaV3, values: np.ndarray, axis: int, offset: int) -> int:
    """Write ``values`` at ``offset`` along ``axis`` (the partial chunk before them read back and
    written again whole, its old part unchanged); the new length."""
    c = parsed.chunks[axis]
    start = (offset // c) * c
    if start < offset:
        values = np.concatenate([_stored(zs, parsed, axis, start, offset).astype(values.dtype, copy=False)
                                 if values.dtype.kind not in "OT" else _stored(zs, parsed, axis, start, offset),
                                 values], axis=axis)
    origin = tuple(start // c if i == axis else 0 for i in range(values.ndim))
    writer.write(values, origin)
    return start + values.shape[axis]


def _stored(zs: ZStore, parsed: ArrayMetaV3, axis: int, start: int, stop: int) -> np.ndarray:
    """The stored values ``[start, stop)`` along ``axis`` (all of the other axes), as stored."""
    from ..read.chunked_v3 import ChunkedArrayV3

    logical = list(parsed.shape)
    logical[axis] = stop
    arr = ChunkedArrayV3(zs, parsed, tuple(logical), null_fill=parsed.optional)
    region = tuple(slice(start, stop) if i == axis else slice(0, n) for i, n in enumerate(parsed.shape))
    out = arr.read(region)
    return out.astype(object) if out.dtype.kind == "T" else out


# ---------------------------------------------------------------------------------------------
# Add variables
# ---------------------------------------------------------------------------------------------


def add_v3(zs: ZStore, txn: Any, groups: Sequence[tuple[str, xr.Dataset]], opts: LayoutOptions) -> dict[str, Any]:
    """``mode="a"`` without ``append_dim``: write the variables the store does not hold yet
    (identical ones, a coordinate sent again, are left alone; different ones refused) and update
    the groups' attributes; the metadata objects that change."""
    from .chunks import ChunkBatch
    from .zarr3 import _finish_lazy, _start_array

    nodes = read_nodes(zs)
    root = _root(zs, nodes)
    new: list[Any] = []
    changed: dict[str, Any] = {}
    for gkey, ds in groups:
        _group_key(zs, nodes, gkey, "add variables to")
        gmeta_raw, arrays = plan_group(gkey, ds)
        gk = f"{gkey}/zarr.json" if gkey else "zarr.json"
        gmeta = copy.deepcopy(changed.get(gk, nodes[gk]))
        gmeta.setdefault("attributes", {}).update(json.loads(gmeta_raw).get("attributes") or {})
        changed[gk] = gmeta
        for a in arrays:
            stored = nodes.get(f"{a.key}/zarr.json")
            if stored is None:
                new.append(a)
            elif not _same_stored(zs, a, stored):
                raise held_otherwise(f"variable {'/' + a.key!r}", zs.display, "append_dim=...")
    if txn is not None:
        txn.set_base(nodes, consolidated_in_step=True)
        txn.record_writes(new_arrays=["/" + a.key for a in new])
    out = ChunkBatch(zs)
    pending = [p for a in new if (p := _start_array(zs, a, opts, out, owner=txn is None)) is not None]
    out.flush()
    _finish_lazy(zs, pending, opts, owner=txn is None)
    for a in new:
        changed[f"{a.key}/zarr.json"] = json.loads(a.meta_bytes())
    return _committed_objects(zs, nodes, root, changed)


def _same_stored(zs: ZStore, a: Any, stored: Mapping[str, Any]) -> bool:
    """Whether a planned array holds what the store holds (a coordinate sent again)."""
    from ..read.chunked_v3 import ChunkedArrayV3

    parsed = parse_node_v3(stored, path=a.key, store=zs.display)
    assert isinstance(parsed, ArrayMetaV3)
    values = a.data if a.text is None else (a.text.lazy if a.text.lazy is not None else a.text.values)
    new = np.asarray(values.compute() if _is_dask(values) else values)
    if tuple(new.shape) != tuple(parsed.shape):
        return False
    old = ChunkedArrayV3(zs, parsed, parsed.shape, null_fill=parsed.optional).read(
        tuple(slice(0, n) for n in parsed.shape))
    if a.text is not None or old.dtype.kind in "OT":
        return bool(np.array_equal(np.asarray(old, dtype=object), np.asarray(new, dtype=object)))
    return bool(old.dtype == new.dtype and np.array_equal(old, new, equal_nan=old.dtype.kind in "fc"))


# ---------------------------------------------------------------------------------------------
# Undo
# ---------------------------------------------------------------------------------------------


def undo_appends(zs: ZStore, journal: Any, old_object: Callable[[str], Any]) -> None:
    """Remove what an uncommitted Zarr v3 append may have written to chunks: the chunks beyond
    each array's old length, and its partial last chunk written again as it was."""
    from ..io.store_errors import mapped_errors
    from ..zarr_compat import sync
    from .zarr3 import ArrayWriter

    for path, rng in journal.appends.items():
        key = path.strip("/")
        meta = old_object(f"{key}/zarr.json")
        if not isinstance(meta, Mapping):
            continue
        parsed = parse_node_v3(meta, path=key, store=zs.display)
        assert isinstance(parsed, ArrayMetaV3)
        axis, old, new = int(rng["axis"]), int(rng["old"]), int(rng["new"])
        grown = copy.deepcopy(dict(meta))
        grown["shape"][axis] = max(new, old)
        keyed = parse_node_v3(grown, path=key, store=zs.display)
        assert isinstance(keyed, ArrayMetaV3)
        c = parsed.chunks[axis]
        others = [range(math.ceil(n / k)) for i, (n, k) in enumerate(zip(parsed.shape, parsed.chunks, strict=True))
                  if i != axis]
        drop = []
        for jx in range(math.ceil(old / c), math.ceil(new / c)):
            for rest in np.ndindex(*(len(r) for r in others)) if others else [()]:
                ix = list(rest)
                ix.insert(axis, jx)
                drop.append(zs.full_key(f"{key}/{keyed.chunk_key(tuple(ix))}"))

        async def delete(keys: list[str] = drop) -> None:
            for k in keys:
                await zs.store.delete(k)

        with mapped_errors(f"Could not write to {zs.display}", zs.probe):
            sync(delete())
        if old % c:
            start = (old // c) * c
            kind = _stored_kind(meta)
            fill, _ = _text_fill(meta, parsed) if kind is not None else (None, False)
            values = _stored(zs, parsed, axis, start, old)
            writer = ArrayWriter(zs, key, meta, kind, fill=fill, fresh=False)
            writer.write(values, tuple(start // c if i == axis else 0 for i in range(values.ndim)))
