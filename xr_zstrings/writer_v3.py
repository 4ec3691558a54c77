"""Write a Dataset to Zarr v3 with its string and bytes variables in a chosen chunk layout.

``to_zarr_v3(ds, target, layout=...)`` lets xarray and zarr-python write the store (so every
xarray convention — ``dimension_names``, coordinates, CF attributes, encoded ``_FillValue`` — is
theirs), with each string/bytes variable replaced by a zero-cost stand-in of its shape whose
chunks are never written; the strings are packed once by the compiled kernels and written chunk
by chunk in the requested layout with :class:`~xr_zstrings.codecs_v3.V3Pipeline` (the encoder
beside the reader's decoder), together with the layout's ``data_type`` and ``codecs``:

* ``"vlen-utf8"``: zarr-python's own layout (``string`` + ``vlen-utf8``; ``bytes`` + ``vlen-bytes``),
  readable by zarr-python and xarray's zarr engine as well;
* ``"zarrs.vlen"``: the zarrs codec, with ``index_data_type``, ``index_location`` and separate
  ``index_codecs``/``data_codecs`` chains;
* ``"arrow"`` / ``"arrow-large"``: the draft ZEP's Arrow layout (``{"name": "string"}`` or
  ``"binary"``, int32 or int64 offsets, 64-byte aligned data), followed by ``compressors``.

zarr-python refuses the last two layouts, so they are readable with ``engine="zstrings"`` only.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import os
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import numpy as np
import pandas as pd
import xarray as xr

from .codecs_v3 import V3Pipeline
from .errors import ZStringsError
from .store import ZStore, open_store, parse_nczarr_url
from .strings import kernels
from .vlen import VlenChunk, values_to_vlen

__all__ = ["to_zarr_v3", "LAYOUTS"]

Layout = Literal["vlen-utf8", "zarrs.vlen", "arrow", "arrow-large"]
LAYOUTS: tuple[str, ...] = ("vlen-utf8", "zarrs.vlen", "arrow", "arrow-large")
_THREADS = max(2, min(8, os.cpu_count() or 1))

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
    if kind == "O":  # by the first value; _text_values checks them all
        flat = var.values.reshape(-1)
        return "bytes" if flat.size and isinstance(flat[0], bytes) else "str"
    return None


def _check_objects(values: np.ndarray, kind: str, name: Hashable) -> None:
    """Every element of an object array is a str (kind 'str') or bytes ('bytes'), or raise."""
    typ = str if kind == "str" else bytes
    if not all(isinstance(v, typ) for v in values.reshape(-1).tolist()):
        missing = pd.isnull(values)
        if missing.any():
            i = int(np.flatnonzero(np.asarray(missing).reshape(-1))[0])
            raise ZStringsError(
                f"Variable {name!r} holds {int(missing.sum())} missing value(s) (None/NaN), e.g. element "
                f"{i}: a variable-length string array has none. Fill them first (e.g. "
                f"ds[{name!r}].fillna('')), or write NCZarr with to_nczarr and a string _FillValue."
            )
        raise ZStringsError(
            f"Variable {name!r} holds objects that are neither all str nor all bytes; "
            "convert it (e.g. .astype(str)) before writing."
        )


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


_BATCH_BYTES = 64 << 20


def _text_values(var: xr.Variable, kind: str, name: Hashable) -> tuple[np.ndarray, VlenChunk]:
    """(values as O/T or object-of-bytes, every value packed): packing validates them (lone
    surrogates, str/bytes mix-ups, None raise ZStringsError) before anything is written."""
    values = var.values
    if kind == "str" and values.dtype.kind not in "OT":
        try:
            values = values.astype(np.dtypes.StringDType())
        except (TypeError, UnicodeError, ValueError):  # lone surrogates: reported below
            values = values.astype(object)
    elif kind == "bytes":
        values = np.asarray(values, dtype=object)
    flat = np.ascontiguousarray(values).reshape(-1)
    K = kernels()
    if values.dtype.kind == "O" and kind == "str" and K is not None:
        status, _, offsets, data = K.utf8_pack(flat, True)  # takes str objects only
        if status == 0:
            return values, VlenChunk(offsets, np.frombuffer(data, np.uint8))
    if values.dtype.kind == "O":
        _check_objects(flat, kind, name)
    return values, values_to_vlen(flat, kind=kind, what=f"variable {name!r}")


def _chunk_items(
    path: str, values: np.ndarray, packed: VlenChunk, kind: str, chunks: tuple[int, ...], pipe: V3Pipeline
) -> Iterator[Callable[[], tuple[str, bytes]]]:
    """One job per chunk; each job encodes its chunk (edge chunks padded with the fill value).

    1-D variable-length layouts slice the packed offsets/data per chunk (no second pass over
    the values); other shapes pad each block as an array.
    """
    fill: Any = "" if kind == "str" else b""
    if values.ndim == 0:
        yield lambda: (f"{path}/c", pipe.encode(values.reshape(())))
        return
    grid = [math.ceil(n / c) if c else 0 for n, c in zip(values.shape, chunks, strict=True)]
    if values.ndim == 1 and pipe.accepts_vlen:
        off = packed.offsets.astype(np.int64, copy=False)
        (c,), (n,) = chunks, values.shape

        def job(i: int) -> tuple[str, bytes]:
            lo, hi = i * c, min((i + 1) * c, n)
            o = off[lo : hi + 1]
            if hi - lo < c:  # the edge chunk: pad with empty values (the fill value "")
                o = np.concatenate([o, np.full(c - (hi - lo), o[-1], np.int64)])
            return f"{path}/c/{i}", pipe.encode(VlenChunk(o - o[0], packed.data[int(o[0]) : int(o[-1])]))

        for i in range(grid[0]):
            yield functools.partial(job, i)
        return
    dtype = values.dtype

    def block_job(idx: tuple[int, ...]) -> tuple[str, bytes]:
        src = tuple(slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(idx, chunks, values.shape, strict=True))
        block = np.full(chunks, fill, dtype=dtype)
        block[tuple(slice(0, s.stop - s.start) for s in src)] = values[src]
        return f"{path}/c/" + "/".join(map(str, idx)), pipe.encode(block)

    for idx in np.ndindex(*grid):
        yield functools.partial(block_job, idx)


def _write_text_array(
    zs: ZStore, path: str, values: np.ndarray, packed: VlenChunk, kind: str, layout: str, keep_codecs: bool,
    **layout_kw: Any,
) -> dict[str, Any]:
    """Write one string/bytes array in ``layout``: its zarr.json (xarray's, written for the
    stand-in, now with the layout's data type and codecs), then its chunks (encoded on threads).

    Metadata first, as xarray and zarr-python write arrays: an interrupted write leaves chunks
    missing (read as the fill value ""), never a uint8 stand-in in place of the strings.
    """
    key = f"{path}/zarr.json"
    meta = json.loads(zs.get_bytes(key) or b"{}")
    chunks = tuple(meta["chunk_grid"]["configuration"]["chunk_shape"])
    data_type, codecs = _layout_metadata(layout, kind, **layout_kw)
    if keep_codecs:  # zarr-python's own default compressors (what its vlen-utf8 arrays get)
        codecs = [codecs[0], *[c for c in meta.get("codecs", []) if c.get("name") != "bytes"]]
    fill: Any = "" if kind == "str" else b""
    dtype = np.dtypes.StringDType() if kind == "str" else np.dtype(object)
    pipe = V3Pipeline.from_metadata(codecs, data_type=data_type, dtype=dtype, chunk_shape=chunks,
                                    fill_value=fill, where=zs.where(key))
    meta.update(data_type=data_type, codecs=codecs, fill_value="")
    _delete_chunks(zs, path)
    zs.set_many([(key, json.dumps(meta, indent=2).encode())])
    jobs = _chunk_items(path, values, packed, kind, chunks, pipe)
    per_chunk = max(1, math.prod(chunks) * 32)
    batch = max(1, _BATCH_BYTES // per_chunk)
    with ThreadPoolExecutor(_THREADS) as pool:
        while part := list(itertools.islice(jobs, batch)):
            zs.set_many(list(pool.map(lambda job: job(), part)))
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
    compressors: Sequence[Mapping[str, Any]] | None = None,
    mode: Literal["w-", "w"] = "w-",
    consolidated: bool = True,
    group: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> None:
    """Write ``ds`` to a Zarr v3 store, string and bytes variables in ``layout``.

    ``compressors`` are v3 bytes->bytes codecs (e.g. ``[{"name": "zstd", "configuration":
    {"level": 3}}]``) applied after the layout; ``None`` gives ``vlen-utf8`` text zarr-python's
    default (zstd) as zarr-python itself would write it and leaves the other layouts
    uncompressed, ``[]`` writes no compressor; ``index_*``/``data_codecs`` configure
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
                   data_codecs: Sequence[Mapping[str, Any]] | None,
                   compressors: Sequence[Mapping[str, Any]] | None, mode: str, group: str | None) -> None:
    """One Dataset (one group): xarray writes everything but the strings' chunks, then we do.

    Each string/bytes variable goes to xarray as a zero-cost uint8 stand-in of its shape (all
    fill value, so no chunk is written), so its zarr.json gets xarray's attributes, dimension
    names and chunk grid; ``_write_text_array`` then writes the real chunks and data type.
    """
    texts: dict[Hashable, tuple[str, np.ndarray, VlenChunk]] = {}
    prepared = ds.copy()
    for name, var in ds.variables.items():
        kind = _is_text(var)
        if kind is None:
            # keep the CF encodings; drop what another format recorded (a v2/NCZarr compressor,
            # filters, zarr_dtype, ...) that a v3 array cannot take
            prepared[name].encoding = {k: v for k, v in var.encoding.items() if k in _V3_KEEP}
            continue
        texts[name] = (kind, *_text_values(var, kind, name))
        stand_in = np.broadcast_to(np.zeros((), np.uint8), var.shape)
        prepared[name] = prepared[name].copy(data=stand_in)
        prepared[name].encoding = {k: v for k, v in var.encoding.items() if k in ("chunks",)}
        prepared[name].encoding["write_empty_chunks"] = False
        prepared[name].attrs.pop("_FillValue", None)
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
              index_codecs=index_codecs, data_codecs=data_codecs, compressors=compressors or ())
    for name, (kind, values, packed) in texts.items():
        keep = layout == "vlen-utf8" and compressors is None and kind == "str"
        _write_text_array(zs, f"{prefix}/{name}".strip("/"), values, packed, kind, layout, keep, **kw)


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
