"""Write a Dataset to Zarr v3 with its string and bytes variables in a chosen chunk layout.

``to_zarr_v3(ds, target, layout=...)`` lets xarray and zarr-python write the store (so every
xarray convention — ``dimension_names``, coordinates, CF attributes, encoded ``_FillValue`` — is
theirs), with each string/bytes variable replaced by a zero-cost stand-in of its shape whose
chunks are never written; the strings are packed once by the compiled kernels and written chunk
by chunk in the requested layout with :class:`~xr_zstrings.codecs.v3.V3Pipeline` (the encoder
beside the reader's decoder), together with the layout's ``data_type`` and ``codecs``:

* ``"vlen-utf8"``: zarr-python's own layout (``string`` + ``vlen-utf8``; ``bytes`` + ``vlen-bytes``),
  readable by zarr-python and xarray's zarr engine as well;
* ``"zarrs.vlen"``: the zarrs codec, with ``index_data_type``, ``index_location`` and separate
  ``index_codecs``/``data_codecs`` chains;
* ``"arrow"`` / ``"arrow-large"``: the draft ZEP's Arrow layout (``{"name": "string"}`` or
  ``"binary"``, int32 or int64 offsets, 64-byte aligned data), followed by ``compressors``.

zarr-python refuses the last two layouts, so they are readable with ``engine="zstrings"`` only.
Dask-backed variables are never loaded whole: each block is packed, encoded and written as its
chunk by the task that computes it (``_BlockWriter``; on a distributed cluster, by the workers).
"""

from __future__ import annotations

import base64
import collections
import functools
import itertools
import json
import math
import os
import warnings
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd
import xarray as xr
from zarr.storage import WrapperStore

from ..codecs.encoding import format_encoding
from ..codecs.layouts import LAYOUT_NAMES, layout_named
from ..codecs.v3 import V3Pipeline
from ..errors import MissingStringsWarning, TargetExistsError, UnsupportedError, ZStringsError, user_stacklevel
from ..io.atomic import CloneStore, local_commit, not_replaceable
from ..io.commit import Transaction
from ..io.redact import shown
from ..io.store import open_store, zarr_v3_only
from ..io.store_errors import local_errors
from ..io.targets import local_target
from ..io.zstore import ZStore
from ..text.kernels import kernels
from ..text.vlen import Kind, VlenChunk, values_to_vlen
from ..threads import run_all
from . import NewMode
from .chunks import ChunkBatch, block_write, block_writes, compute_sums, local_scheduler
from .plan import _is_dask, _missing, check_names, string_fill, text_kind

__all__ = ["LAYOUTS", "to_zarr_v3"]

#: the layouts' names (codecs.layouts: one row each), the default first
LAYOUTS: tuple[str, ...] = LAYOUT_NAMES

# encodings of non-string variables that mean the same in Zarr v3 (xarray's own keys)
_V3_KEEP = frozenset({"chunks", "shards", "compressors", "dtype", "_FillValue", "units",
                      "calendar", "scale_factor", "add_offset", "coordinates"})


def _check_objects(values: np.ndarray, kind: Kind, name: Hashable) -> None:
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
    layout: str, kind: Kind, *, compressors: Sequence[Mapping[str, Any]], **options: Any
) -> tuple[Any, list[dict[str, Any]]]:
    """The ``data_type`` and ``codecs`` a layout (codecs.layouts) writes into zarr.json: its own
    array->bytes codec, then the compressors."""
    data_type, codecs = layout_named(layout).metadata(kind, options)
    return data_type, [*codecs, *map(dict, compressors)]


def _delete_chunks(zs: ZStore, path: str) -> None:
    from ..zarr_compat import sync

    base = zs.full_key(path)

    async def run() -> None:
        try:
            keys = [k async for k in zs.store.list_prefix(base + "/c/")]
        except ValueError as e:  # icechunk lists no prefix of a node it does not hold: no old chunks
            if zarr_v3_only(zs.store) and type(e).__name__ == "InvalidInputError":
                return
            raise
        for k in [*keys, base + "/c"]:
            await zs.store.delete(k)

    if zs.store.supports_deletes:
        sync(run())


_BATCH_BYTES = 64 << 20


def _text_values(var: xr.Variable, kind: Kind, name: Hashable) -> tuple[np.ndarray, VlenChunk]:
    """(values as O/T or object-of-bytes, every value packed): packing validates them (lone
    surrogates, str/bytes mix-ups, None raise ZStringsError) before anything is written."""
    return _pack(var.values, kind, name)


def _pack(values: np.ndarray, kind: Kind, name: Hashable) -> tuple[np.ndarray, VlenChunk]:
    """``_text_values`` of an array (a whole variable, or one dask block of it)."""
    values = np.asarray(values)
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


def _missing_values(var: xr.Variable, kind: Kind, name: Hashable) -> tuple[Any, tuple[str, Any] | None]:
    """Missing values (None, NaN, StringDType NA) of a text variable, made writable: written as
    its string ``_FillValue`` (encoding or attribute; engine="zstrings" masks it back) when it has
    one, else in zarrs' nullable ``optional`` type (None marks them; warned: zarr-python cannot
    read that type: then an object array with None, not a Variable, which would turn None into NaN).
    ``(var, None)`` when there is none."""
    if var.dtype.kind not in "OT":
        return var, None
    arr = np.asarray(var.values)
    miss = _missing(arr)
    if miss is None or not miss.any():
        return var, None
    fill = string_fill(var)
    if isinstance(fill, np.str_ | np.bytes_):
        fill = fill.item()
    if kind == "str" and isinstance(fill, bytes):
        fill = fill.decode("utf-8")
    if isinstance(fill, str if kind == "str" else bytes):
        out = arr.copy() if arr.dtype.kind == "T" else arr.astype(object)
        out[miss] = fill
        return var.copy(data=out), ("fill", fill)
    out = arr.astype(object)
    out[miss] = None
    i = int(np.flatnonzero(miss.reshape(-1))[0])
    _warn_optional(name, int(miss.sum()), f", e.g. element {i}")
    return out, ("optional", int(miss.sum()))


def _warn_optional(name: Hashable, n: int, example: str = "") -> None:
    warnings.warn(
        f"Variable {name!r} holds {n} missing value(s) (None/NaN/NA){example}: "
        "written in zarrs' nullable 'optional' data type: engine='zstrings', zarrs, and zarr-python and "
        "engine='zarr' through xr_zstrings' zarr plugin (on zarr-python 3.1.x after "
        "xr_zstrings.zarr_plugin.register()) read them back missing, but where xr_zstrings is not installed "
        f"zarr-python cannot open that array. Set ds[{name!r}].encoding['_FillValue'] to a string to write "
        "them as that string instead (every zarr-python reads the string, engine='zstrings' masks it).",
        MissingStringsWarning, stacklevel=user_stacklevel(),
    )


def _chunk_items(
    path: str, values: np.ndarray, packed: VlenChunk | None, kind: Kind, chunks: tuple[int, ...], pipe: V3Pipeline,
    pad: Any = "", origin: tuple[int, ...] | None = None,
) -> Iterator[Callable[[], tuple[str, bytes]]]:
    """One job per chunk; each job encodes its chunk (edge chunks padded with the fill value).

    1-D variable-length layouts slice the packed offsets/data per chunk (no second pass over
    the values); other shapes pad each block as an array. ``origin``: the chunk index of
    ``values[0, ...]`` (a dask block written on its own), in chunks.
    """
    fill: Any = pad if pad != "" or kind == "str" else b""
    origin = origin or (0,) * values.ndim
    if values.ndim == 0:
        yield lambda: (f"{path}/c", pipe.encode(values.reshape(())))
        return
    grid = [math.ceil(n / c) if c else 0 for n, c in zip(values.shape, chunks, strict=True)]
    if values.ndim == 1 and pipe.accepts_vlen and packed is not None:
        off = packed.offsets.astype(np.int64, copy=False)
        (c,), (n,) = chunks, values.shape

        def job(i: int) -> tuple[str, bytes]:
            lo, hi = i * c, min((i + 1) * c, n)
            o = off[lo : hi + 1]
            if hi - lo < c:  # the edge chunk: pad with empty values (the fill value "")
                o = np.concatenate([o, np.full(c - (hi - lo), o[-1], np.int64)])
            return f"{path}/c/{i + origin[0]}", pipe.encode(VlenChunk(o - o[0], packed.data[int(o[0]) : int(o[-1])]))

        for i in range(grid[0]):
            yield functools.partial(job, i)
        return
    dtype = values.dtype

    def block_job(idx: tuple[int, ...]) -> tuple[str, bytes]:
        src = tuple(slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(idx, chunks, values.shape, strict=True))
        block = np.full(chunks, fill, dtype=dtype)
        block[tuple(slice(0, s.stop - s.start) for s in src)] = values[src]
        return f"{path}/c/" + "/".join(str(i + o) for i, o in zip(idx, origin, strict=True)), pipe.encode(block)

    for idx in np.ndindex(*grid):
        yield functools.partial(block_job, idx)


@dataclass
class _Text:
    """A string/bytes variable to write: in memory (``values`` checked and ``packed`` before the
    target is touched) or dask-backed (``lazy``: written block by block, checked per block)."""

    kind: Kind
    values: np.ndarray | None = None
    packed: VlenChunk | None = None
    missing: tuple[str, Any] | None = None
    lazy: Any = None  # the dask array
    fill: Any = None  # dask: the string _FillValue missing values become (None: they are refused)


class _Writes(ChunkBatch):
    """The chunk writes of in-memory text variables (batched across variables; encoded on the
    shared pool, ``threads.run_all``), and whether old chunks are deleted first (a group written
    into an existing store)."""

    def __init__(self, zs: ZStore, clear_old: bool) -> None:
        super().__init__(zs)
        self.clear_old = clear_old


@dataclass
class _Pending:
    """A dask text variable's writes (``written`` sums the missing values its blocks filled) and
    the zarr.json that goes into the store after them."""

    key: str
    meta: dict[str, Any]
    written: Any
    text: _Text
    path: str
    name: Hashable
    keep_codecs: bool


def _write_text_array(
    zs: ZStore, meta_store: _MetadataLast, path: str, name: Hashable, text: _Text, layout: str,
    keep_codecs: bool, out: _Writes, **layout_kw: Any,
) -> _Pending | None:
    """Write one string/bytes array in ``layout``: its chunks (encoded on threads), and its zarr.json
    (xarray's, held back by ``meta_store``, now with the layout's data type and codecs) into
    ``meta_store``, which writes it to the store only after every chunk of every array. A
    dask-backed array gives back its graph of block writes instead (``_Pending``), for the caller
    to compute with the others at once."""
    kind, missing = text.kind, text.missing
    key = f"{path}/zarr.json"
    meta = json.loads(meta_store.meta[zs.full_key(key)])
    chunks = tuple(meta["chunk_grid"]["configuration"]["chunk_shape"])
    data_type, codecs = _layout_metadata(layout, kind, **layout_kw)
    if keep_codecs:  # zarr-python's own default compressors (what its vlen-utf8 arrays get)
        codecs = [codecs[0], *[c for c in meta.get("codecs", []) if c.get("name") != "bytes"]]
    fill: Any = "" if kind == "str" else b""
    dtype = np.dtypes.StringDType() if kind == "str" else np.dtype(object)
    meta.update(data_type=data_type, codecs=codecs, fill_value="")
    pad: Any = ""
    if missing is not None and missing[0] == "optional":
        # zarrs' nullable type around the layout: the layout's serializer holds the present values,
        # a packbits mask says which are present; compressors stay outside (zarrs.optional codec)
        inner = data_type if isinstance(data_type, dict) else {"name": data_type, "configuration": {}}
        codecs = [{"name": "zarrs.optional", "configuration": {
            "mask_codecs": [{"name": "packbits", "configuration": {"padding_encoding": "none"}}],
            "data_codecs": [codecs[0]]}}, *codecs[1:]]
        meta.update(data_type={"name": "zarrs.optional", "configuration": {
            "name": inner["name"], "configuration": dict(inner.get("configuration") or {})}},
            codecs=codecs, fill_value=None)
        dtype, fill, pad = np.dtype(object), None, None
    elif missing is not None:  # ("fill", the string _FillValue the missing values were written as)
        _fill_attribute(meta, missing[1])
    pipe_kw = {"codecs": codecs, "data_type": data_type, "dtype": dtype, "chunk_shape": chunks, "fill_value": fill,
               "where": zs.where(key)}
    if out.clear_old:  # a group written into an existing store: its old chunks go first
        _delete_chunks(zs, path)
    if text.lazy is not None:
        optional = missing is not None and missing[0] == "optional"
        writer = _BlockWriter(zs, path, name, kind, chunks, pipe_kw, text.fill, optional)
        return _Pending(zs.full_key(key), meta, writer.graph(text.lazy), text, path, name, keep_codecs)
    assert text.values is not None
    pipe = V3Pipeline.from_metadata(**pipe_kw)
    jobs = _chunk_items(path, text.values, text.packed, kind, chunks, pipe, pad=pad)
    per_chunk = max(1, math.prod(chunks) * 32)
    batch = max(1, _BATCH_BYTES // per_chunk)
    while part := list(itertools.islice(jobs, batch)):
        out.add(run_all(lambda job: job(), part))
    meta_store.meta[zs.full_key(key)] = json.dumps(meta, indent=2).encode()
    return None


def _fill_attribute(meta: dict[str, Any], fv: Any) -> None:
    """The string ``_FillValue`` attribute missing values were written as, as xarray encodes a v3
    string ``_FillValue``: text, base64 for bytes."""
    attrs = meta.setdefault("attributes", {})
    attrs["_FillValue"] = fv if isinstance(fv, str) else base64.b64encode(fv).decode("ascii")


class _BlockWriter:
    """Encodes and writes one dask block of a text variable as its chunk, wherever dask runs it
    (threads, or the worker processes of a distributed cluster: hence picklable, the codec chain
    built again in each process). Returns the number of missing values in the block: written as
    the string fill value, or in the ``optional`` pass as missing; without a fill value a block
    holding one is not written (the caller then writes every block again in the optional type)."""

    def __init__(self, zs: ZStore, path: str, name: Hashable, kind: Kind, chunks: tuple[int, ...],
                 pipe_kw: dict[str, Any], fill: Any, optional: bool = False) -> None:
        self.zs, self.path, self.name, self.kind, self.chunks = zs, path, name, kind, chunks
        self.pipe_kw, self.fill, self.optional = pipe_kw, fill, optional
        self._pipe: V3Pipeline | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_pipe": None}

    def graph(self, data: Any) -> Any:
        """The dask graph of block writes (blocks rechunked to the store's chunks first, so that
        every chunk is written by exactly one task): one count per block."""
        # (this writer is one key of the graph: each worker gets it, its store and codec chain once)
        return block_writes(_write_v3_block, data.rechunk(self.chunks), self, "zstrings-v3")

    def __call__(self, block: np.ndarray, block_info: Any = None) -> np.ndarray:
        if block_info is None:  # dask probing the function while building the graph: write nothing
            return np.zeros((1,) * max(np.ndim(block), 1), np.int64)
        loc = tuple(block_info[0]["chunk-location"])
        values = np.asarray(block)
        miss = _missing(values) if values.dtype.kind in "OT" else None
        n = int(miss.sum()) if miss is not None else 0
        pad: Any = ""
        if self.optional:  # missing values as None, the present ones checked as packing does
            values = values.astype(object)
            if n:
                values[miss] = None
            _pack(np.where(miss, "" if self.kind == "str" else b"", values) if n else values, self.kind, self.name)
            packed, pad = None, None
        else:
            if n and self.fill is None:
                return np.full((1,) * values.ndim, n, np.int64)  # written again in the optional type
            if n:
                values = values.copy() if values.dtype.kind == "T" else values.astype(object)
                values[miss] = self.fill
            values, packed = _pack(values, self.kind, self.name)
        if self._pipe is None:
            self._pipe = V3Pipeline.from_metadata(**self.pipe_kw)
        with block_write(self.zs):
            for job in _chunk_items(self.path, values, packed, self.kind, self.chunks, self._pipe, pad=pad,
                                    origin=loc):
                self.zs.set_many([job()])
        return np.full((1,) * values.ndim, n, np.int64)


def _write_v3_block(block: np.ndarray, writer: _BlockWriter, block_info: Any = None) -> np.ndarray:
    return writer(block, block_info)


def _is_meta_key(key: str) -> bool:
    return key == "zarr.json" or key.endswith("/zarr.json")


class _HeldMetadata(dict):  # type: ignore[type-arg]  # key -> zarr-python's metadata buffer, as its store holds it
    """The ``zarr.json`` objects ``_MetadataLast`` holds, by key, with the number of keys below each
    folder (``below["a/b/"]``), so that clearing a folder that holds none costs one lookup.

    zarr-python clears each array's folder before creating it (``delete_dir``): a scan of every
    held key per array made writing n variables cost n^2 (measured: docs/performance.md)."""

    def __init__(self, items: Any = ()) -> None:
        super().__init__()
        self.below: collections.Counter[str] = collections.Counter()
        for k, v in dict(items).items():
            self[k] = v

    def __reduce__(self) -> tuple[Any, ...]:
        # (the store goes to dask workers) rebuilt through __init__: pickle's default sets a
        # dict subclass's items before its attributes exist
        return (type(self), (dict(self),))

    @staticmethod
    def _folders(key: str) -> list[str]:
        parts = key.split("/")[:-1]
        return ["/".join(parts[: i + 1]) + "/" for i in range(len(parts))]

    def __setitem__(self, key: str, value: bytes) -> None:
        if key not in self:
            self.below.update(self._folders(key))
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        self.below.subtract(self._folders(key))

    def pop(self, key: str, *default: Any) -> Any:
        if key not in self:
            return dict.pop(self, key, *default)
        value = self[key]
        del self[key]
        return value

    def setdefault(self, key: str, value: Any = None) -> Any:
        if key not in self:
            self[key] = value
        return self[key]


class _MetadataLast(WrapperStore):  # type: ignore[type-arg]  # wraps any Store; not subscripted at runtime (zarr 3.1)
    """The store xarray writes through: chunks go to the real store, every ``zarr.json`` stays in
    memory until ``flush`` writes them after all chunks, the root last.

    So the real store never holds xarray's uint8 stand-ins, and until the root's zarr.json is
    written (the last object) no reader opens it. ``hidden`` keys (our placeholder root) read as
    absent. zarr-python has no option to defer metadata, hence this wrapper.
    """

    def __init__(self, store: Any, hidden: frozenset[str] = frozenset(), passthrough: bool = False) -> None:
        super().__init__(store)
        self.meta = _HeldMetadata()
        self.hidden = hidden
        # a transactional store (an icechunk session) needs an array's zarr.json before its chunks,
        # and shows nothing before the caller commits: metadata is written through (and again last)
        self.passthrough = passthrough

    def _with_store(self, store: Any) -> _MetadataLast:
        out = type(self)(store, self.hidden, self.passthrough)
        out.meta = self.meta
        return out

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        if _is_meta_key(key):
            raw = self.meta.get(key)
            if raw is None:
                if key in self.hidden:
                    return None
                return await self._store.get(key, prototype, byte_range)
            return prototype.buffer.from_bytes(raw)
        return await self._store.get(key, prototype, byte_range)

    async def exists(self, key: str) -> bool:
        if _is_meta_key(key) and (key in self.meta or key in self.hidden):
            return key in self.meta
        return bool(await self._store.exists(key))

    async def set(self, key: str, value: Any) -> None:
        if _is_meta_key(key):
            self.meta[key] = value.to_bytes()
            if self.passthrough:
                await self._store.set(key, value)
        else:
            await self._store.set(key, value)

    async def set_if_not_exists(self, key: str, value: Any) -> None:
        if _is_meta_key(key):
            self.meta.setdefault(key, value.to_bytes())
            if self.passthrough:
                await self._store.set(key, value)
        else:
            await self._store.set_if_not_exists(key, value)

    async def _set_many(self, values: Any) -> None:
        for k, v in values:
            await self.set(k, v)

    async def delete(self, key: str) -> None:
        if _is_meta_key(key):
            self.meta.pop(key, None)
        elif self._store.supports_deletes:
            await self._store.delete(key)

    async def delete_dir(self, prefix: str) -> None:
        # the target was emptied before (or is a fresh directory): only our own view is cleared
        lead = prefix.rstrip("/") + "/" if prefix else ""
        if lead and not self.meta.below[lead]:
            return  # (the usual case: a new array's folder)
        for k in [k for k in self.meta if k.startswith(lead)]:
            del self.meta[k]

    async def list_dir(self, prefix: str) -> Any:
        lead = prefix.rstrip("/") + "/" if prefix else ""
        seen: set[str] = set()
        for k in self.meta:
            if k.startswith(lead):
                seen.add(k[len(lead):].split("/", 1)[0])
        async for name in self._store.list_dir(prefix):
            if (lead + name) not in self.hidden and not name.startswith(".zstrings-"):  # (a write's journal)
                seen.add(name)
        for name in sorted(seen):
            yield name

    async def list_prefix(self, prefix: str) -> Any:
        seen = {k for k in self.meta if k.startswith(prefix)}
        async for k in self._store.list_prefix(prefix):
            if (not _is_meta_key(k) or k not in self.hidden) and ".zstrings-" not in k:
                seen.add(k)
        for k in sorted(seen):
            yield k

    async def list(self) -> Any:
        async for k in self.list_prefix(""):
            yield k

    def flush(self, zs: ZStore, root_key: str, consolidated: bool, others: bool = False) -> None:
        """Write the held metadata: arrays, then groups (deepest first), then the root."""
        def depth(k: str) -> int:
            return k.count("/")

        lead = zs.full_key("").rstrip("/")
        # zarr-python's implicit parents above the store's prefix are not part of this store
        self.meta = _HeldMetadata((k, v) for k, v in self.meta.items() if not lead or k.startswith(lead + "/"))
        arrays: list[str] = []
        groups: list[str] = []
        for k, raw in self.meta.items():
            if k == root_key:
                continue
            (arrays if json.loads(raw).get("node_type") == "array" else groups).append(k)
        rel = functools.partial(_relative, zs)
        zs.set_many([(rel(k), self.meta[k]) for k in arrays])
        for k in sorted(groups, key=depth, reverse=True):
            zs.set_many([(rel(k), self.meta[k])])
        root = json.loads(self.meta.get(root_key) or b"{}")
        if consolidated:
            root = _consolidated_root(zs, root, {rel(k): json.loads(v) for k, v in self.meta.items()}, others)
        zs.set_many([(rel(root_key), json.dumps(root, indent=2).encode())])


def _relative(zs: ZStore, full: str) -> str:
    lead = zs.full_key("").rstrip("/")
    return full[len(lead):].lstrip("/") if lead else full


def to_zarr_v3(
    ds: xr.Dataset,
    target: str | os.PathLike[str] | Any,
    *,
    layout: str = LAYOUT_NAMES[0],
    index_data_type: Literal["uint32", "uint64"] = "uint32",
    index_location: Literal["start", "end"] = "end",
    index_codecs: Sequence[Mapping[str, Any]] | None = None,
    data_codecs: Sequence[Mapping[str, Any]] | None = None,
    compressors: Sequence[Mapping[str, Any]] | None = None,
    mode: NewMode = "w-",
    consolidated: bool = True,
    group: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> None:
    """Write ``ds`` to a Zarr v3 store, string and bytes variables in ``layout``.

    ``layout`` is one of ``codecs.layouts.LAYOUT_NAMES`` (``"vlen-utf8"``, ``"zarrs.vlen"``, ``"arrow"``,
    ``"arrow-large"``: the module docstring describes each).
    ``compressors`` are v3 bytes->bytes codecs (e.g. ``[{"name": "zstd", "configuration":
    {"level": 3}}]``) applied after the layout; ``None`` gives ``vlen-utf8`` text zarr-python's
    default (zstd) as zarr-python itself would write it and leaves the other layouts
    uncompressed, ``[]`` writes no compressor; ``index_*``/``data_codecs`` configure
    ``zarrs.vlen``. Lone surrogates and other values UTF-8 cannot hold raise ``ZStringsError``.
    ``target`` is a directory, a ``.zip`` path, ``s3://bucket/key`` (or netcdf-c's S3 URL forms,
    with ``storage_options``) or a zarr-python Store. Every chunk is written before any metadata
    and the root ``zarr.json`` last; a local directory or zip is written beside the target and
    swapped in whole (``mode="w"`` keeps the old store until then): see docs/reliability.md.

    The argument checks and every value's packing come before anything is written; then the
    local (``_write_local``: beside the target, swapped in) or object-storage commit
    (``_write_into``: a transaction on the store).
    """
    layout_named(layout)  # (an unknown one is refused before anything is written)
    if mode not in ("w-", "w"):
        raise ZStringsError(f"Invalid mode={mode!r}: expected 'w-' (create, never overwrite) or 'w' (overwrite).")
    nodes = _nodes(ds, group, target)
    kw: dict[str, Any] = {"layout": layout, "index_data_type": index_data_type, "index_location": index_location,
                          "index_codecs": index_codecs, "data_codecs": data_codecs, "compressors": compressors}
    # every value is checked and packed before the target is touched
    prepared = [(g, *_prepare(d)) for g, d in nodes]
    local = local_target(target)
    if local is not None:
        _write_local(target, *local, prepared, group=group, mode=mode, consolidated=consolidated, kw=kw)
        return
    if isinstance(target, str | os.PathLike):
        zs = open_store(os.fspath(target), mode="w",
                        storage_options=dict(storage_options) if storage_options else None)
    else:
        zs = open_store(target, mode="w")
    _write_into(zs, prepared, group=group, mode=mode, consolidated=consolidated, kw=kw)


def _nodes(ds: Any, group: str | None, target: Any) -> list[tuple[str | None, xr.Dataset]]:
    """(the group each node is written as, its variables): a Dataset at ``group``, a DataTree's nodes
    under it; names checked for every reader."""
    if not isinstance(ds, xr.DataTree | xr.Dataset):
        raise ZStringsError(f"Cannot write {type(ds).__name__}: expected an xarray Dataset or DataTree.")
    base = "/" + (group or "").strip("/")
    named = ({base: ds} if isinstance(ds, xr.Dataset) else
             {f"{base.rstrip('/')}/{n.path.strip('/')}": n.to_dataset(inherit=False) for n in ds.subtree})
    check_names(named, netcdf_c=None, target=shown(target))
    if isinstance(ds, xr.Dataset):
        return [(group, ds)]
    root = (group or "").strip("/")
    return [("/".join(p for p in (root, node.path.strip("/")) if p) or None, node.to_dataset(inherit=False))
            for node in ds.subtree]


def _write_local(target: Any, path: Any, is_zip: bool, prepared: list[Any], *, group: str | None, mode: str,
                 consolidated: bool, kw: Mapping[str, Any]) -> None:
    """A local directory or zip: written beside the target and swapped in whole (a group written
    into the store that is there: into a copy of it)."""
    from zarr.storage import ZipStore

    from ..zarr_compat import sync

    display = shown(target)
    into = group is not None and path.exists()  # a group written into the store that is there
    found = not_replaceable(path, "zip" if is_zip else "zarr") if into else None
    if found is not None:  # (else it would make a folder of other files a store's root)
        raise TargetExistsError(f"Cannot write group {group!r} into {display}: it is {found}. Write the "
                                "group into a store, or choose another target.")
    if into and is_zip:  # (a zip is only ever replaced whole: no writer changes one in place)
        raise TargetExistsError(
            f"Cannot write group {group!r} into the zip store {display}: a zip is written whole, never "
            "changed in place. Write the whole tree at once (a DataTree, or a dict of groups), or write the "
            "group into a folder store and zip that.")
    with local_commit(path, mode="a" if into else mode, display=display,
                      zip_file=is_zip) as tmp:
        if tmp is None:  # no hard links here: write into the target itself, metadata last
            zs = open_store(os.fspath(target), mode="a")
        elif is_zip:
            zs = ZStore(sync(ZipStore.open(tmp, mode="w", read_only=False)), display=display)
        else:
            zs = ZStore(CloneStore(tmp, read_only=False), display=display)
        _refuse_v2_root(zs, group)
        if group is not None and mode == "w-" and zs.list_dir(group.strip("/")):
            raise ZStringsError(f"Cannot write group {group!r} to {display}: it exists and mode='w-' never "
                                "overwrites. Pass mode='w' to replace it.")
        try:
            with local_scheduler(zs), local_errors(f"Could not write to {display}"):  # (a full disk: named)
                _write_nodes(zs, prepared, mode, group is not None, consolidated, kw)
        finally:
            if is_zip and tmp is not None:
                zs.store.close()


def _write_into(zs: ZStore, prepared: list[Any], *, group: str | None, mode: str, consolidated: bool,
                kw: Mapping[str, Any]) -> None:
    """A store on object storage (or a zarr-python Store): a group written into it as it is; a
    transactional store's own commit; else a claimed write transaction."""
    if group is not None:
        _refuse_v2_root(zs, group)
        _write_nodes(zs, prepared, mode, True, consolidated, kw)
        return
    if _transactional(zs):
        _claim_transactional(zs, mode)
        _write_nodes(zs, prepared, mode, False, consolidated, kw)
        return
    # the store is claimed (its journal), a placeholder root zarr.json put first (refused by every
    # reader until the real one replaces it) and, for mode="w", the older store's objects removed;
    # the root zarr.json (with the consolidated metadata) is the commit point: see io/commit.py
    with Transaction.begin(zs, "new" if mode == "w-" else "replace", fmt="v3", mode=mode) as txn:
        _write_nodes(zs, prepared, mode, False, consolidated, kw)
        txn.finish()


def _refuse_v2_root(zs: ZStore, group: str | None) -> None:
    """A group written into a Zarr v2 / NCZarr store is refused before anything is written: every
    reader of that store (its root ``.zgroup``) would miss a Zarr v3 group inside it."""
    if group is None:
        return
    names = set(zs.list_dir(""))
    if "zarr.json" not in names and names & {".zgroup", ".zarray", ".nczarr"}:
        raise UnsupportedError(
            f"Cannot write Zarr v3 group {group!r} into {zs.display}: it is a Zarr v2 / NCZarr store, whose "
            "readers (engine='zstrings', netcdf-c, zarr-python) would not see a Zarr v3 group inside it. Migrate "
            "the store to Zarr v3 first (xr_zstrings.migrate(target): netcdf-c keeps reading it), or write "
            "the group to another store.")


def _claim_transactional(zs: ZStore, mode: str) -> None:
    """A store whose writes nobody sees until its owner commits them: no journal or placeholder
    (icechunk refuses both: it validates every key and every zarr.json); ``mode="w-"`` refuses a
    store that is not empty, ``mode="w"`` removes what the older store held."""
    existing = zs.list_dir("")
    if existing and mode == "w-":
        raise TargetExistsError(f"Cannot write to {zs.display}: it is not empty (found {sorted(existing)[:5]}) and "
                                "mode='w-' never overwrites. Pass mode='w' to replace it.")
    if mode == "w":
        _clear(zs)


def _transactional(zs: ZStore) -> bool:
    """A store whose writes nobody sees until its owner commits them: an icechunk session's store
    (``session.store``; ``session.commit(...)`` is the caller's)."""
    return zarr_v3_only(zs.store)


def _mapped_store_errors(zs: ZStore) -> Any:
    from ..io.store_errors import mapped_errors

    return mapped_errors(f"Could not write to {zs.display}", zs.probe)


def _clear(zs: ZStore) -> None:
    """Delete every object of the store: root metadata first, then everything else."""
    from ..zarr_compat import sync

    if not zs.store.supports_deletes:
        return
    lead = zs.full_key("").rstrip("/")

    async def run() -> None:
        keys = [k async for k in zs.store.list_prefix(lead) if not lead or k.startswith(lead + "/")]
        rel = [k[len(lead):].lstrip("/") if lead else k for k in keys]
        first = [k for k, r in zip(keys, rel, strict=True) if r in (".zgroup", ".zattrs", ".zmetadata", "zarr.json")]
        for k in sorted(first, key=lambda k: not k.endswith(".zattrs")):  # .zattrs before .zgroup
            await zs.store.delete(k)
        for k in keys:
            if k not in first:
                await zs.store.delete(k)

    with _mapped_store_errors(zs):
        sync(run())


def _prepare(ds: xr.Dataset) -> tuple[xr.Dataset, dict[Hashable, _Text]]:
    """The Dataset xarray writes (each string/bytes variable as a zero-cost uint8 stand-in of its
    shape: all fill value, so no chunk is written, but its zarr.json gets xarray's attributes,
    dimension names and chunk grid) and the text variables we write ourselves: packed when in
    memory, left lazy when dask-backed (written block by block, on the store's chunk grid).

    The Dataset is built once from all its variables: assigning them one by one re-merges the
    whole Dataset each time, quadratic in the number of variables (10,000 took minutes)."""
    texts: dict[Hashable, _Text] = {}
    variables: dict[Hashable, xr.Variable] = {}
    for name, var in ds.variables.items():
        kind = text_kind(var)
        if kind is None:
            # keep the CF encodings; drop what another format recorded (a v2/NCZarr compressor,
            # filters, zarr_dtype, ...) that a v3 array cannot take
            var = var.copy(deep=False)
            # (the store's own chain where the encoding is still engine="zstrings"'s: its shards too)
            enc = format_encoding(var.encoding, 3, dtype=var.dtype, text=False, where=f"variable {name!r}")
            var.encoding = {k: v for k, v in enc.items() if k in _V3_KEEP}
            variables[name] = var
            continue
        enc_chunks = var.encoding.get("chunks")
        if _is_dask(var.data) and var.ndim:
            texts[name] = _Text(kind, lazy=var.data, fill=_string_fill(var, kind))
            if enc_chunks is None:  # as xarray does for dask arrays: the store's chunks are dask's
                enc_chunks = tuple(max(max(c), 1) for c in var.data.chunks)
        else:
            if _is_dask(var.data):  # a 0-d dask variable: one value
                var = var.compute()
            filled, missing = _missing_values(var, kind, name)
            if missing is not None and missing[0] == "optional":
                # validate the present values (as packing does) before anything is written
                present = np.where(np.equal(filled, None), "" if kind == "str" else b"", filled)
                _text_values(xr.Variable(var.dims, present), kind, name)
                texts[name] = _Text(kind, filled, None, missing)
            else:
                var = filled
                texts[name] = _Text(kind, *_text_values(var, kind, name), missing)
        stand_in = xr.Variable(var.dims, np.broadcast_to(np.zeros((), np.uint8), var.shape),
                               {k: v for k, v in var.attrs.items() if k != "_FillValue"})
        stand_in.encoding = {"write_empty_chunks": False}
        if enc_chunks is not None:
            stand_in.encoding["chunks"] = enc_chunks
        variables[name] = stand_in
    coords = {n: variables[n] for n in ds.coords}
    prepared = xr.Dataset({n: variables[n] for n in ds.data_vars}, coords=coords, attrs=ds.attrs)
    prepared.encoding = dict(ds.encoding)
    return prepared, texts


def _string_fill(var: xr.Variable, kind: Kind) -> Any:
    """The string ``_FillValue`` (encoding or attribute) missing values of a dask-backed text
    variable are written as, or None (then a block holding one is refused)."""
    fill = string_fill(var)
    if isinstance(fill, np.str_ | np.bytes_):
        fill = fill.item()
    if kind == "str" and isinstance(fill, bytes):
        fill = fill.decode("utf-8")
    return fill if isinstance(fill, str if kind == "str" else bytes) else None


def _write_nodes(zs: ZStore, prepared: list[Any], mode: str, into_group: bool, consolidated: bool,
                 kw: Mapping[str, Any]) -> None:
    """xarray writes each node through ``_MetadataLast`` (chunks of numbers, metadata held back),
    we write the text chunks (dask-backed ones in one parallel compute), then every zarr.json,
    the root last."""
    root_key = zs.full_key("zarr.json")
    meta_store = _MetadataLast(zs.store, hidden=frozenset({root_key}) if not into_group else frozenset(),
                               passthrough=_transactional(zs))
    layout = kw["layout"]
    lkw = {"index_data_type": kw["index_data_type"], "index_location": kw["index_location"],
           "index_codecs": kw["index_codecs"], "data_codecs": kw["data_codecs"],
           "compressors": kw["compressors"] or ()}
    pending: list[_Pending] = []
    out = _Writes(zs, clear_old=into_group)
    for i, (group, ds, texts) in enumerate(prepared):
        where = "/".join(p for p in (zs.prefix, (group or "").strip("/")) if p) or None
        zs.check_fence()  # xarray writes the group's number chunks straight to the store
        ds.to_zarr(meta_store, mode=("w" if not into_group else "a") if i == 0 else "a", zarr_format=3,
                   consolidated=False, group=where)
        prefix = (group or "").strip("/")
        for name, text in texts.items():
            keep = layout_named(layout).zarr_python and kw["compressors"] is None and text.kind == "str"
            p = _write_text_array(zs, meta_store, f"{prefix}/{name}".strip("/"), name, text, layout, keep,
                                  out, **lkw)
            if p is not None:
                pending.append(p)
    out.flush()
    if pending:
        counts = compute_sums([p.written for p in pending], zs)
        again: list[_Pending] = []
        for p, n in zip(pending, counts, strict=True):
            if int(n) and p.text.fill is None:
                # missing values without a string fill value: found only now, so every block is
                # written again in zarrs' optional type (as an in-memory variable would be)
                _warn_optional(p.name, int(n))
                text = _Text(p.text.kind, missing=("optional", int(n)), lazy=p.text.lazy)
                redo = _write_text_array(zs, meta_store, p.path, p.name, text, layout, p.keep_codecs, out, **lkw)
                assert redo is not None
                again.append(redo)
                continue
            if int(n):  # missing values were written as the string _FillValue: say so (as in memory)
                _fill_attribute(p.meta, p.text.fill)
            meta_store.meta[p.key] = json.dumps(p.meta, indent=2).encode()
        for p in again:
            meta_store.meta[p.key] = json.dumps(p.meta, indent=2).encode()
        if again:
            compute_sums([p.written for p in again], zs)
    if into_group and consolidated and root_key not in meta_store.meta:
        raw = zs.get_bytes("zarr.json")
        if raw is not None:
            meta_store.meta[root_key] = raw
    meta_store.flush(zs, root_key, consolidated, others=into_group)


def _consolidated_root(zs: ZStore, root: dict[str, Any], nodes: Mapping[str, Any], others: bool) -> dict[str, Any]:
    """The root zarr.json with inline consolidated metadata as zarr-python writes it, built from
    the nodes just written plus (for a write into a group) the ones the store already had."""
    from ..zarr_compat import sync

    async def listing() -> list[str]:
        return [k async for k in zs.store.list_prefix(zs.full_key(""))]

    entries: dict[str, Any] = {}
    found: dict[str, Any] = {}
    if others:  # a write into one group: the rest of the store is listed too
        keys = [_relative(zs, k) for k in sync(listing()) if k.endswith("zarr.json")]
        keys = [k for k in keys if k not in nodes and k != "zarr.json"]
        found = dict(zip(keys, zs.get_json_many(keys), strict=True))
    for rel, obj in {**found, **nodes}.items():
        if rel == "zarr.json" or not isinstance(obj, dict):
            continue
        child = rel[: -len("/zarr.json")]
        if obj.get("node_type") == "group":
            obj = {**obj, "consolidated_metadata": {"kind": "inline", "must_understand": False, "metadata": {}}}
        entries[child] = obj
    return {**root, "consolidated_metadata": {"kind": "inline", "must_understand": False,
                                              "metadata": dict(sorted(entries.items()))}}
