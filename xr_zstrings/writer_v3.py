"""Write a Dataset to Zarr v3 with its string and bytes variables in a chosen chunk layout.

``to_zarr_v3(ds, target, layout=...)`` lets xarray and zarr-python write the store (so every
xarray convention — ``dimension_names``, coordinates, CF attributes, encoded ``_FillValue`` — is
theirs), then re-encodes each string/bytes array in the requested layout with
:class:`~xr_zstrings.codecs_v3.V3Pipeline` (the encoder beside the reader's decoder):

* ``"vlen-utf8"``: zarr-python's own layout (``string`` + ``vlen-utf8``; ``bytes`` + ``vlen-bytes``),
  readable by zarr-python and xarray's zarr engine as well;
* ``"zarrs.vlen"``: the zarrs codec, with ``index_data_type``, ``index_location`` and separate
  ``index_codecs``/``data_codecs`` chains;
* ``"arrow"`` / ``"arrow-large"``: the draft ZEP's Arrow layout (``{"name": "string"}`` or
  ``"binary"``, int32 or int64 offsets, 64-byte aligned data), followed by ``compressors``.

zarr-python refuses the last two layouts, so they are readable with ``engine="zstrings"`` only.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import xarray as xr

from .codecs_v3 import V3Pipeline
from .errors import ZStringsError
from .store import ZStore, open_store, parse_nczarr_url
from .vlen import values_to_vlen

__all__ = ["to_zarr_v3", "LAYOUTS"]

Layout = Literal["vlen-utf8", "zarrs.vlen", "arrow", "arrow-large"]
LAYOUTS: tuple[str, ...] = ("vlen-utf8", "zarrs.vlen", "arrow", "arrow-large")

# encodings of non-string variables that mean the same in Zarr v3 (xarray's own keys)
_V3_KEEP = frozenset({"chunks", "shards", "compressors", "dtype", "_FillValue", "units",
                      "calendar", "scale_factor", "add_offset", "coordinates"})


def _is_text(var: xr.Variable) -> str | None:
    """'str' or 'bytes' for variables that become variable-length arrays, else None."""
    kind = var.dtype.kind
    if kind in "UT":
        return "str"
    if kind == "S":
        return "bytes"
    if kind == "O":
        flat = var.values.ravel()
        if all(isinstance(v, str) for v in flat):
            return "str"
        if all(isinstance(v, bytes) for v in flat):
            return "bytes"
        raise ZStringsError(
            f"Variable {var!r} holds objects that are neither all str nor all bytes; "
            "convert it (e.g. .astype(str)) before writing."
        )
    return None


def _layout_metadata(
    layout: str, kind: str, *, index_data_type: str, index_location: str,
    index_codecs: Sequence[Mapping[str, Any]] | None, data_codecs: Sequence[Mapping[str, Any]] | None,
    compressors: Sequence[Mapping[str, Any]],
) -> tuple[Any, list[dict[str, Any]]]:
    """The ``data_type`` and ``codecs`` a layout writes into zarr.json."""
    if layout == "vlen-utf8":
        name = "vlen-utf8" if kind == "str" else "vlen-bytes"
        return ("string" if kind == "str" else "variable_length_bytes"), [
            {"name": name, "configuration": {}}, *map(dict, compressors)
        ]
    if layout == "zarrs.vlen":
        config = {
            "data_codecs": [dict(c) for c in (data_codecs or [{"name": "bytes"}])],
            "index_codecs": [dict(c) for c in (index_codecs or
                                                [{"name": "bytes", "configuration": {"endian": "little"}}])],
            "index_data_type": index_data_type,
            "index_location": index_location,
        }
        return ("string" if kind == "str" else "bytes"), [
            {"name": "zarrs.vlen", "configuration": config}, *map(dict, compressors)
        ]
    if layout in ("arrow", "arrow-large"):
        base = "string" if kind == "str" else "binary"
        name = base if layout == "arrow" else f"large_{base}"
        # the v3 spec wants one array->bytes codec: a plain "bytes" codec marks the Arrow layout
        return {"name": name}, [{"name": "bytes"}, *map(dict, compressors)]
    raise ZStringsError(f"Unknown layout {layout!r}: expected one of {LAYOUTS}.")


def _delete_chunks(zs: ZStore, path: str) -> None:
    from zarr.core.sync import sync

    base = zs.full_key(path)

    async def run() -> None:
        keys = [k async for k in zs.store.list_prefix(base + "/c/")]
        for k in [*keys, base + "/c"]:
            await zs.store.delete(k)

    if zs.store.supports_deletes:
        sync(run())


def _rewrite_array(
    zs: ZStore, path: str, values: np.ndarray, kind: str, layout: str, **layout_kw: Any
) -> dict[str, Any]:
    """Re-encode one array's chunks in ``layout`` and return its new zarr.json object."""
    key = f"{path}/zarr.json"
    meta = json.loads(zs.get_bytes(key) or b"{}")
    chunks = tuple(meta["chunk_grid"]["configuration"]["chunk_shape"])
    data_type, codecs = _layout_metadata(layout, kind, **layout_kw)
    fill: Any = "" if kind == "str" else b""
    dtype = np.dtypes.StringDType() if kind == "str" else np.dtype(object)
    pipe = V3Pipeline.from_metadata(codecs, data_type=data_type, dtype=dtype, chunk_shape=chunks,
                                    fill_value=fill, where=zs.where(key))
    meta.update(data_type=data_type, codecs=codecs, fill_value="")
    arr = values.astype(dtype) if kind == "str" else np.asarray(values, dtype=object)
    _delete_chunks(zs, path)
    items = []
    grid = [math.ceil(n / c) if c else 0 for n, c in zip(arr.shape, chunks, strict=True)]
    for idx in np.ndindex(*grid):
        block = np.full(chunks, fill, dtype=dtype)
        src = tuple(slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(idx, chunks, arr.shape, strict=True))
        block[tuple(slice(0, s.stop - s.start) for s in src)] = arr[src]
        items.append((f"{path}/c/" + "/".join(map(str, idx)) if idx else f"{path}/c", pipe.encode(block)))
    if arr.ndim == 0:
        items = [(f"{path}/c", pipe.encode(arr.reshape(())))]
    items.append((key, json.dumps(meta, indent=2).encode()))
    zs.set_many(items)
    return meta


def to_zarr_v3(
    ds: xr.Dataset,
    target: str | os.PathLike[str] | Any,
    *,
    layout: Layout = "vlen-utf8",
    index_data_type: Literal["uint32", "uint64"] = "uint32",
    index_location: Literal["start", "end"] = "end",
    index_codecs: Sequence[Mapping[str, Any]] | None = None,
    data_codecs: Sequence[Mapping[str, Any]] | None = None,
    compressors: Sequence[Mapping[str, Any]] = (),
    mode: Literal["w-", "w"] = "w-",
    consolidated: bool = True,
    group: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> None:
    """Write ``ds`` to a Zarr v3 store, string and bytes variables in ``layout``.

    ``compressors`` are v3 bytes->bytes codecs (e.g. ``[{"name": "zstd", "configuration":
    {"level": 3}}]``) applied after the layout; ``index_*``/``data_codecs`` configure
    ``zarrs.vlen``. Lone surrogates and other values UTF-8 cannot hold raise ``ZStringsError``.
    ``target`` may be ``s3://bucket/key`` (or netcdf-c's S3 URL forms) with ``storage_options``.
    """
    if layout not in LAYOUTS:
        raise ZStringsError(f"Unknown layout {layout!r}: expected one of {LAYOUTS}.")
    kw: dict[str, Any] = dict(layout=layout, index_data_type=index_data_type, index_location=index_location,
                              index_codecs=index_codecs, data_codecs=data_codecs, compressors=compressors)
    if isinstance(target, str | os.PathLike):
        parsed = parse_nczarr_url(os.fspath(target))
        if parsed.scheme not in ("", "file") or "s3" in parsed.modes:
            # object storage: the same obstore-backed store the reader uses, for xarray and for us
            target = open_store(os.fspath(target), mode="w",
                                storage_options=dict(storage_options) if storage_options else None)
    if isinstance(ds, xr.DataTree):
        base = (group or "").strip("/")
        for i, node in enumerate(ds.subtree):
            sub = "/".join(p for p in (base, node.path.strip("/")) if p) or None
            _write_dataset(node.to_dataset(inherit=False), target, mode=mode if i == 0 else "a",
                           group=sub, **kw)
    elif isinstance(ds, xr.Dataset):
        _write_dataset(ds, target, mode=mode, group=group, **kw)
    else:
        raise ZStringsError(f"Cannot write {type(ds).__name__}: expected an xarray Dataset or DataTree.")
    if consolidated:
        zs = open_store(target, mode="a") if not isinstance(target, ZStore) else target
        _consolidate(zs)


def _write_dataset(ds: xr.Dataset, target: Any, *, layout: str, index_data_type: str, index_location: str,
                   index_codecs: Sequence[Mapping[str, Any]] | None,
                   data_codecs: Sequence[Mapping[str, Any]] | None, compressors: Sequence[Mapping[str, Any]],
                   mode: str, group: str | None) -> None:
    """One Dataset (one group): xarray writes it, then string/bytes arrays are re-encoded in ``layout``."""
    kinds: dict[Hashable, str] = {}
    prepared = ds.copy()
    for name, var in ds.variables.items():
        kind = _is_text(var)
        if kind is None:
            # keep the CF encodings; drop what another format recorded (a v2/NCZarr compressor,
            # filters, zarr_dtype, ...) that a v3 array cannot take
            prepared[name].encoding = {k: v for k, v in var.encoding.items() if k in _V3_KEEP}
            continue
        kinds[name] = kind
        values = var.values
        if kind == "str":  # UTF-8 cannot hold lone surrogates: refuse before anything is written
            values_to_vlen(np.asarray(values, dtype=object).ravel(), kind="str", what=f"variable {name!r}")
        if kind == "bytes" and values.dtype.kind == "S":
            values = values.astype(object)
        # zarr-python writes both as variable-length (vlen-utf8 / vlen-bytes) first
        prepared[name] = prepared[name].copy(data=values.astype(object) if kind == "str" else values)
        prepared[name].encoding = {k: v for k, v in var.encoding.items() if k in ("chunks",)}
    if isinstance(target, ZStore):
        zs = target
        where = "/".join(p for p in (zs.prefix, (group or "").strip("/")) if p) or None
        prepared.to_zarr(zs.store, mode=mode, zarr_format=3, consolidated=False, group=where)
    else:
        target = os.fspath(target) if isinstance(target, os.PathLike) else target
        prepared.to_zarr(target, mode=mode, zarr_format=3, consolidated=False, group=group)
        zs = open_store(target, mode="a")
    prefix = (group or "").strip("/")
    kw = dict(index_data_type=index_data_type, index_location=index_location,
              index_codecs=index_codecs, data_codecs=data_codecs, compressors=compressors)
    for name, kind in kinds.items():
        # every layout but plain vlen-utf8 text is re-encoded (xarray turns bytes back into fixed |S)
        if layout != "vlen-utf8" or compressors or kind == "bytes":
            _rewrite_array(zs, f"{prefix}/{name}".strip("/"), np.asarray(ds[name].values), kind, layout, **kw)


def _consolidate(zs: ZStore) -> None:
    """Inline consolidated metadata as zarr-python writes it, without zarr-python parsing our arrays."""
    from zarr.core.sync import sync

    async def listing() -> list[str]:
        return [k async for k in zs.store.list_prefix(zs.full_key(""))]

    keys = [k for k in sync(listing()) if k.endswith("zarr.json")]
    entries: dict[str, Any] = {}
    rel_keys = [k[len(zs.full_key("")):].lstrip("/") if zs.prefix else k for k in keys]
    for rel, obj in zip(rel_keys, zs.get_json_many(rel_keys), strict=True):
        if rel == "zarr.json" or obj is None:
            continue
        child = rel[: -len("/zarr.json")]
        if obj.get("node_type") == "group":
            obj = {**obj, "consolidated_metadata": {"kind": "inline", "must_understand": False, "metadata": {}}}
        entries[child] = obj
    root = json.loads(zs.get_bytes("zarr.json") or b"{}")
    root["consolidated_metadata"] = {"kind": "inline", "must_understand": False,
                                     "metadata": dict(sorted(entries.items()))}
    zs.set_many([("zarr.json", json.dumps(root, indent=2).encode())])
