"""Write xarray objects to Zarr v3 with their string and bytes variables in a chosen chunk layout.

``to_zarr_v3(obj, target, layout=...)`` plans every array (``plan_v3``: numbers CF-encoded by
xarray's public encoders, each ``zarr.json`` made by zarr-python itself, so every xarray convention
-- ``dimension_names``, coordinates, CF attributes, encoded ``_FillValue`` -- is what
``ds.to_zarr(zarr_format=3)`` writes), writes every chunk with our codec chains
(:class:`~xr_zstrings.codecs.v3.V3Pipeline`; strings packed once by the compiled kernels), then the
metadata, the root ``zarr.json`` (with the consolidated metadata) last. The string layouts:

* ``"vlen-utf8"``: zarr-python's own layout (``string`` + ``vlen-utf8``; ``bytes`` + ``vlen-bytes``),
  readable by zarr-python and xarray's zarr engine as well;
* ``"zarrs.vlen"``: the zarrs codec, with ``index_data_type``, ``index_location`` and separate
  ``index_codecs``/``data_codecs`` chains;
* ``"arrow"`` / ``"arrow-large"``: the draft ZEP's Arrow layout (``{"name": "string"}`` or
  ``"binary"``, int32 or int64 offsets, 64-byte aligned data), followed by ``compressors``.

zarr-python refuses the last two layouts, so they are readable with ``engine="zstrings"`` only.
Dask-backed variables are never loaded whole: each block is encoded and written as its chunk by the
task that computes it (``ArrayWriter``, through ``chunks.block_writes``; on a distributed cluster,
by the workers). ``ArrayWriter`` also writes given blocks into an existing array (appends, regions).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import math
import os
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import xarray as xr

from ..codecs.layouts import LAYOUT_NAMES, layout_named
from ..codecs.v3 import V3Pipeline
from ..errors import ZStringsError
from ..formats.zarr3 import ArrayMetaV3, parse_node_v3
from ..io.redact import shown
from ..io.store import zarr_v3_only
from ..io.store_errors import local_errors
from ..io.zstore import ZStore
from ..text.vlen import Kind, VlenChunk
from ..threads import run_all
from . import WriteMode
from .chunks import ChunkBatch, block_write, block_writes, compute_sums, local_scheduler
from .deferred import deferred
from .plan import _missing, check_names
from .plan_v3 import (
    ArrayPlan,
    LayoutOptions,
    TextValues,
    _fill_attribute,
    group_json,
    pack,
    plan_group,
    text_meta,
    warn_optional,
)
from .region import Region, write_region
from .session import check_mode

__all__ = ["LAYOUTS", "ArrayWriter", "to_zarr_v3"]

#: the layouts' names (codecs.layouts: one row each), the default first
LAYOUTS: tuple[str, ...] = LAYOUT_NAMES

_BATCH_BYTES = 64 << 20


# ---------------------------------------------------------------------------------------------
# Chunks: one array's blocks encoded with the codecs of its zarr.json
# ---------------------------------------------------------------------------------------------


def _text_items(key_of: Callable[[tuple[int, ...]], str], values: np.ndarray, packed: VlenChunk | None, kind: Kind,
                chunks: tuple[int, ...], pipe: V3Pipeline, pad: Any = "",
                origin: tuple[int, ...] | None = None) -> Iterator[Callable[[], tuple[str, bytes]]]:
    """One job per chunk of text; each job encodes its chunk (edge chunks padded with the fill value).

    1-D variable-length layouts slice the packed offsets/data per chunk (no second pass over
    the values); other shapes pad each block as an array. ``origin``: the chunk index of
    ``values[0, ...]`` (a block written on its own), in chunks.
    """
    fill: Any = pad if pad != "" or kind == "str" else b""
    origin = origin or (0,) * values.ndim
    if values.ndim == 0:
        yield lambda: (key_of(()), pipe.encode(values.reshape(())))
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
            return key_of((i + origin[0],)), pipe.encode(VlenChunk(o - o[0], packed.data[int(o[0]) : int(o[-1])]))

        for i in range(grid[0]):
            yield functools.partial(job, i)
        return
    yield from _block_items(key_of, values, fill, chunks, pipe, origin, skip_empty=False)


def _block_items(key_of: Callable[[tuple[int, ...]], str], values: np.ndarray, fill: Any, chunks: tuple[int, ...],
                 pipe: V3Pipeline, origin: tuple[int, ...], *, skip_empty: bool) -> Iterator[Callable[[], Any]]:
    """One job per chunk of ``values`` (edge chunks padded with ``fill``); ``skip_empty``: a chunk
    holding only the fill value is not written (zarr-python's default, ``write_empty_chunks=False``):
    its job gives None."""
    grid = [math.ceil(n / c) if c else 0 for n, c in zip(values.shape, chunks, strict=True)]
    dtype = values.dtype

    def job(idx: tuple[int, ...]) -> tuple[str, bytes] | None:
        src = tuple(slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(idx, chunks, values.shape, strict=True))
        part = values[src]
        if skip_empty and _all_fill(part, fill):
            return None
        block = part if part.shape == tuple(chunks) else np.full(chunks, fill, dtype=dtype)
        if block is not part:
            block[tuple(slice(0, s.stop - s.start) for s in src)] = part
        return key_of(tuple(i + o for i, o in zip(idx, origin, strict=True))), pipe.encode(np.ascontiguousarray(block))

    for idx in np.ndindex(*grid):
        yield functools.partial(job, idx)


def _all_fill(block: np.ndarray, fill: Any) -> bool:
    if block.dtype.kind in "fc":
        return bool(np.array_equal(block, np.full_like(block, fill), equal_nan=True))
    return bool((block == fill).all())


class ArrayWriter:
    """Encodes blocks of one Zarr v3 array with the codec chain of its ``zarr.json`` and writes them
    as its chunks, wherever it runs (threads, or the worker processes of a distributed cluster:
    hence picklable, the chain built again in each process). Numbers: chunks holding only the fill
    value are left out of a new array, as zarr-python does (``fresh``). Text (``kind``): missing
    values become ``fill`` (the string ``_FillValue``), or None in zarrs' ``optional`` type; a dask
    block holding one without either is not written (counted: the caller writes every block again
    in the optional type). A call gives the number of missing values met.

    Also the writer of given blocks into an existing array (appends, regions): ``write(values,
    origin)`` with ``origin`` in chunks."""

    def __init__(self, zs: ZStore, key: str, meta: Mapping[str, Any], kind: Kind | None = None, *,
                 fill: Any = None, fresh: bool = True, name: Hashable = None) -> None:
        self.zs, self.key, self.meta, self.kind = zs, key, dict(meta), kind
        self.fill, self.fresh, self.name = fill, fresh, key if name is None else name
        self.optional = isinstance(meta.get("data_type"), Mapping) and meta["data_type"].get("name") == "zarrs.optional"
        self._parsed: ArrayMetaV3 | None = None
        self._pipe: V3Pipeline | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_pipe": None, "_parsed": None}

    @property
    def parsed(self) -> ArrayMetaV3:
        if self._parsed is None:
            parsed = parse_node_v3(self.meta, path=self.key, store=self.zs.display)
            assert isinstance(parsed, ArrayMetaV3)
            self._parsed = parsed
        return self._parsed

    @property
    def chunks(self) -> tuple[int, ...]:
        return tuple(self.parsed.chunks)

    def pipeline(self) -> V3Pipeline:
        if self._pipe is None:
            m = self.parsed
            if self.kind is None:
                dtype, fill = m.dtype, m.fill_value
            else:
                dtype = np.dtype(object) if self.optional or self.kind == "bytes" else np.dtypes.StringDType()
                fill = None if self.optional else ("" if self.kind == "str" else b"")
            data_type = self.meta["data_type"]
            if self.optional:  # (the pipeline is the present values' type: zarrs.optional wraps it)
                inner = data_type["configuration"]
                data_type = inner["name"] if not inner.get("configuration") else inner
            self._pipe = V3Pipeline.from_metadata(list(m.codecs), data_type=data_type, dtype=dtype,
                                                  chunk_shape=m.chunks, fill_value=fill,
                                                  where=self.zs.where(f"{self.key}/zarr.json"))
        return self._pipe

    def key_of(self, idx: tuple[int, ...]) -> str:
        m = self.parsed
        return f"{self.key}/{m.chunk_key(idx if m.shape else ())}"

    def jobs(self, values: np.ndarray, packed: VlenChunk | None = None,
             origin: tuple[int, ...] | None = None) -> Iterator[Callable[[], Any]]:
        """One job per chunk of ``values`` (its chunk index ``origin``): each gives (key, bytes), or None."""
        origin = origin or (0,) * values.ndim
        if self.kind is not None:
            pad: Any = None if self.optional else ""
            return _text_items(self.key_of, values, packed, self.kind, self.chunks, self.pipeline(), pad=pad,
                               origin=origin)
        stored = values.astype(self.parsed.dtype, copy=False)
        if stored.ndim == 0:
            fill = self.parsed.fill_value
            if self.fresh and _all_fill(stored.reshape(1), fill):
                return iter(())
            return iter([lambda: (self.key_of(()), self.pipeline().encode(stored.reshape(())))])
        return _block_items(self.key_of, stored, self.parsed.fill_value, self.chunks, self.pipeline(), origin,
                            skip_empty=self.fresh)

    def prepared(self, block: np.ndarray) -> tuple[np.ndarray | None, VlenChunk | None, int]:
        """A block of text with its missing values as the fill (or None in the optional type),
        checked and packed: (values, packed or None, the missing values met); values None: not to
        be written (missing values without a fill: the caller writes it again as optional)."""
        values = np.asarray(block)
        miss = _missing(values) if values.dtype.kind in "OT" else None
        n = int(miss.sum()) if miss is not None else 0
        assert self.kind is not None
        if self.optional:  # missing values as None, the present ones checked as packing does
            values = values.astype(object)
            if n:
                values[miss] = None
            pack(np.where(miss, "" if self.kind == "str" else b"", values) if n else values, self.kind, self.name)
            return values, None, n
        if n and self.fill is None:
            return None, None, n
        if n:
            values = values.copy() if values.dtype.kind == "T" else values.astype(object)
            values[miss] = self.fill
        values, packed = pack(values, self.kind, self.name)
        return values, packed, n

    def write(self, values: np.ndarray, origin: tuple[int, ...] | None = None) -> int:
        """Encode ``values`` and write them as the chunks from ``origin`` (in chunks) on; the
        missing text values met (see the class)."""
        n, packed = 0, None
        data: np.ndarray | None = np.asarray(values)
        if self.kind is not None:
            data, packed, n = self.prepared(values)
            if data is None:
                return n
        assert data is not None
        with block_write(self.zs):
            for job in self.jobs(data, packed, origin):
                item = job()
                if item is not None:
                    self.zs.set_many([item])
        return n

    def __call__(self, block: np.ndarray, block_info: Any = None) -> np.ndarray:
        if block_info is None:  # dask probing the function while building the graph: write nothing
            return np.zeros((1,) * max(np.ndim(block), 1), np.int64)
        loc = tuple(block_info[0]["chunk-location"])
        n = self.write(block, loc)
        return np.full((1,) * max(np.ndim(block), 1), n, np.int64)

    def graph(self, data: Any) -> Any:
        """The dask graph of block writes (blocks rechunked to the array's chunks first, so that
        every chunk is written by exactly one task): one count per block."""
        if data.ndim == 0:
            return block_writes(_write_scalar, data.reshape(1), self, "zstrings-v3")
        return block_writes(_write_block, data.rechunk(self.chunks), self, "zstrings-v3")


def _write_block(block: np.ndarray, writer: ArrayWriter, block_info: Any = None) -> np.ndarray:
    return writer(block, block_info)


def _write_scalar(block: np.ndarray, writer: ArrayWriter) -> np.ndarray:
    return np.full((1,), writer.write(np.asarray(block).reshape(())), np.int64)


def write_numpy(out: ChunkBatch, writer: ArrayWriter, values: np.ndarray, packed: VlenChunk | None = None,
                origin: tuple[int, ...] | None = None) -> None:
    """Write in-memory values (their chunks encoded on the shared pool, ``threads.run_all``) into
    ``out``, a batch of writes across arrays."""
    jobs = writer.jobs(values, packed, origin)
    per_chunk = max(1, math.prod(writer.chunks or (1,)) * 32)
    batch = max(1, _BATCH_BYTES // per_chunk)
    while part := list(itertools.islice(jobs, batch)):
        out.add([x for x in run_all(lambda job: job(), part) if x is not None])


def _is_dask(data: Any) -> bool:
    from .plan import _is_dask as is_dask

    return is_dask(data)


# ---------------------------------------------------------------------------------------------
# A write: chunks, then every zarr.json, the root last
# ---------------------------------------------------------------------------------------------


class _Pending:
    """A dask array's block writes (``counts``: per block, the missing text values it met) and
    the zarr.json zarr-python made for it (``base``: a text array's layout goes on it)."""

    def __init__(self, a: ArrayPlan, counts: Any, base: dict[str, Any]) -> None:
        self.a, self.counts, self.base = a, counts, base


def _start_array(zs: ZStore, a: ArrayPlan, opts: LayoutOptions, out: ChunkBatch, *, owner: bool) -> _Pending | None:
    """Write an array's chunks (in memory: into ``out``), or give back its graph of block writes
    (dask: computed with the others at once); its final zarr.json is in ``a.meta``. ``owner``: a
    transactional store, which takes an array's zarr.json before its chunks."""
    text, base = a.text, a.meta
    if text is None:
        writer = ArrayWriter(zs, a.key, a.meta, name=a.name)
        data = a.data
    else:
        a.meta, a.raw = text_meta(base, text.kind, opts, text.missing), None
        writer = ArrayWriter(zs, a.key, a.meta, text.kind, fill=text.fill, name=a.name)
        data = text.lazy if text.lazy is not None else text.values
    if owner:
        zs.set_many([(f"{a.key}/zarr.json", a.meta_bytes())])
    if _is_dask(data):
        return _Pending(a, writer.graph(data), base)
    write_numpy(out, writer, np.asarray(data), text.packed if text is not None else None)
    return None


def _finish_lazy(zs: ZStore, pending: list[_Pending], opts: LayoutOptions, *, owner: bool) -> None:
    """Compute the dask block writes; a text array whose blocks met missing values without a
    string fill value is written again in zarrs' optional type (found only now, as an in-memory
    variable's are before), one with a fill says so in its ``_FillValue`` attribute."""
    if not pending:
        return
    counts = compute_sums([p.counts for p in pending], zs)
    again: list[Any] = []
    for p, n in zip(pending, counts, strict=True):
        text = p.a.text
        if text is None or not n:
            continue
        if text.fill is not None:
            _fill_attribute(p.a.meta, text.fill)
            continue
        warn_optional(p.a.name, int(n))
        p.a.text = TextValues(text.kind, missing=("optional", int(n)), lazy=text.lazy)
        p.a.meta = text_meta(p.base, text.kind, opts, p.a.text.missing)
        if owner:
            zs.set_many([(f"{p.a.key}/zarr.json", p.a.meta_bytes())])
        again.append(ArrayWriter(zs, p.a.key, p.a.meta, text.kind, name=p.a.name).graph(text.lazy))
    if again:
        compute_sums(again, zs)


def _write_nodes(zs: ZStore, planned: Sequence[tuple[str, bytes, list[ArrayPlan]]], opts: LayoutOptions, *,
                 into_group: bool, consolidated: bool, owner: bool = False) -> None:
    """Every chunk (in-memory arrays batched across arrays, dask ones in one parallel compute),
    then every array's zarr.json, the groups' (deepest first, with the parents a group path
    implies), the root's last. A transactional store (icechunk) takes an array's zarr.json before
    its chunks (``owner``): there the metadata is written first too."""
    objects = _metadata(zs, planned, into_group)
    if owner:
        zs.set_many([(k, v) for k, v in objects.items() if k != "zarr.json"])
    out = ChunkBatch(zs)
    pending: list[_Pending] = []
    for _, _, arrays in planned:
        for a in arrays:
            if into_group:  # a group written into an existing store: old chunks of the array go first
                _delete_chunks(zs, a.key)
            p = _start_array(zs, a, opts, out, owner=owner)
            if p is not None:
                pending.append(p)
    out.flush()
    _finish_lazy(zs, pending, opts, owner=owner)
    for _, _, arrays in planned:
        for a in arrays:
            objects[f"{a.key}/zarr.json"] = a.meta_bytes()
    _put_metadata(zs, objects, consolidated, others=into_group)


def _metadata(zs: ZStore, planned: Sequence[tuple[str, bytes, list[ArrayPlan]]], into_group: bool) -> dict[str, bytes]:
    """The groups' zarr.json (relative key -> bytes), with every parent a group path implies that
    the store does not hold (zarr-python's implicit groups: no attributes)."""
    objects: dict[str, bytes] = {}
    for key, raw, _ in planned:
        objects[f"{key}/zarr.json" if key else "zarr.json"] = raw
    parents: list[str] = []
    for key, _, _ in planned:
        parts = key.split("/") if key else []
        parents += ["/".join(parts[:i]) for i in range(len(parts))]
    for p in dict.fromkeys(parents):
        k = f"{p}/zarr.json" if p else "zarr.json"
        if k in objects:
            continue
        if into_group and zs.get_bytes(k) is not None:
            continue
        objects[k] = group_json(None, p, {})
    return objects


def _put_metadata(zs: ZStore, objects: dict[str, bytes], consolidated: bool, others: bool) -> None:
    """Arrays, then groups (deepest first), then the root (consolidated: with every node's metadata
    inline, as zarr-python's ``consolidate_metadata`` writes it)."""
    def depth(k: str) -> int:
        return k.count("/")

    decoded = {k: json.loads(v) for k, v in objects.items()}
    arrays = [k for k in objects if k != "zarr.json" and decoded[k].get("node_type") == "array"]
    groups = [k for k in objects if k != "zarr.json" and k not in set(arrays)]
    zs.set_many([(k, objects[k]) for k in arrays])
    for k in sorted(groups, key=depth, reverse=True):
        zs.set_many([(k, objects[k])])
    root_raw = objects.get("zarr.json")
    if root_raw is None and not consolidated:
        return
    if root_raw is None:
        root_raw = zs.get_bytes("zarr.json") or group_json(None, "", {})
    root = json.loads(root_raw)
    if consolidated:
        root = _consolidated_root(zs, root, decoded, others)
        root_raw = json.dumps(root, indent=2).encode()
    zs.set_many([("zarr.json", root_raw)])


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


def _relative(zs: ZStore, full: str) -> str:
    lead = zs.full_key("").rstrip("/")
    return full[len(lead):].lstrip("/") if lead else full


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


# ---------------------------------------------------------------------------------------------
# The public API
# ---------------------------------------------------------------------------------------------


def to_zarr_v3(
    ds: xr.Dataset | xr.DataTree | Mapping[str, xr.Dataset],
    target: str | os.PathLike[str] | Any,
    *,
    layout: str = LAYOUT_NAMES[0],
    index_data_type: Literal["uint32", "uint64"] = "uint32",
    index_location: Literal["start", "end"] = "end",
    index_codecs: Sequence[Mapping[str, Any]] | None = None,
    data_codecs: Sequence[Mapping[str, Any]] | None = None,
    compressors: Sequence[Mapping[str, Any]] | None = None,
    mode: WriteMode = "w-",
    consolidated: bool = True,
    group: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    append_dim: str | None = None,
    region: Region | None = None,
    compute: bool = True,
) -> Any:
    """Write ``ds`` to a Zarr v3 store, string and bytes variables in ``layout``.

    ``ds`` is a Dataset, a DataTree (its nodes become groups) or a mapping of group paths to
    Datasets (``xr.open_groups`` output), written at ``group`` (the root when None).
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

    ``mode="a"`` writes into the store there, under the commit protocol of ``to_nczarr``'s appends
    (a killed write is undone by the next writer or ``repair``; of two writers one raises
    ``ConcurrentWriteError``): with ``append_dim``, the variables that have that dimension get the
    new values appended (encoded as the stored ones); without, the variables the store does not
    hold yet are added (identical ones left alone, different ones refused) and group attributes
    updated. ``group`` then names where ``ds`` goes in the store.

    ``region`` (dimension -> slice, or "auto"; a Dataset) writes ``ds`` into that part of the arrays
    the store holds, chunks only, no lock, regions aligned with the chunks (``write.region``).
    ``compute=False`` returns a dask ``Delayed`` that writes and commits when computed
    (``write.deferred``); the checks, the plan and the packing run now (an append's plan then).

    The argument checks, the plan and every value's packing come before anything is written.
    """
    if region is not None:
        return write_region(ds, target, region, fmt="v3", mode=mode, group=group, storage_options=storage_options,
                            compute=compute)
    layout_named(layout)  # (an unknown one is refused before anything is written)
    opts = LayoutOptions(layout, index_data_type, index_location, index_codecs, data_codecs, compressors)
    check_mode(mode)
    if append_dim is not None and mode != "a":
        raise ZStringsError(f"append_dim={append_dim!r} is only used with mode='a'.")
    nodes = _nodes(ds, group, target)
    if mode == "a":  # (an append plans under its claim: all of it runs when computed)
        append = functools.partial(_write_in_place, target, nodes, append_dim, opts, storage_options)
        return deferred(append, "zstrings-v3") if not compute else append()
    # every value is checked and packed before the target is touched
    planned = [(key, *plan_group(key, d)) for key, d in nodes]
    write = functools.partial(_write_new, target, planned, group, mode, consolidated, opts, storage_options)
    return deferred(write, "zstrings-v3") if not compute else write()


def _write_new(target: Any, planned: list[Any], group: str | None, mode: str, consolidated: bool,
               opts: LayoutOptions, storage_options: Mapping[str, Any] | None) -> None:
    """``to_zarr_v3`` of a whole store (or of a group into one) after its plan: the write session
    opens the target (``write.session``: a local folder or zip written beside it and swapped in,
    object storage claimed with its placeholder root first, an icechunk session's store as its
    owner commits), then every chunk, the metadata, the root ``zarr.json`` last."""
    from .session import write_session

    with write_session(target, mode, fmt="v3", group=group, storage_options=storage_options) as s:
        zs = s.zstore
        with local_scheduler(zs), _local_errors(s):
            _write_nodes(zs, planned, opts, into_group=group is not None, consolidated=consolidated,
                         owner=s.target.kind == "icechunk")
        s.finish()


def _nodes(ds: Any, group: str | None, target: Any) -> list[tuple[str, xr.Dataset]]:
    """(each node's key from the store's root, its variables): a Dataset at ``group``, a
    DataTree's nodes or a mapping's groups under it; names checked for every reader."""
    base = (group or "").strip("/")
    if isinstance(ds, xr.Dataset):
        named = {"/" + base: ds}
    elif isinstance(ds, xr.DataTree):
        named = {"/" + "/".join(p for p in (base, n.path.strip("/")) if p): n.to_dataset(inherit=False)
                 for n in ds.subtree}
    elif isinstance(ds, Mapping):
        from .nczarr import _as_groups

        named = {"/" + "/".join(p for p in (base, k.strip("/")) if p): v for k, v in _as_groups(ds).items()}
    else:
        raise ZStringsError(f"Cannot write {type(ds).__name__}: expected an xarray Dataset, DataTree or a mapping "
                            "of group paths to Datasets (as xr.open_groups returns).")
    check_names(named, netcdf_c=None, target=shown(target))
    return [(k.strip("/"), v) for k, v in named.items()]


def _write_in_place(target: Any, nodes: list[tuple[str, xr.Dataset]], append_dim: str | None, opts: LayoutOptions,
                    storage_options: Mapping[str, Any] | None) -> None:
    """``mode="a"``: an append (``append_dim``) or added variables, in the store itself, committed by
    the journal transaction (``append_v3``); an icechunk session's store by its owner's commit."""
    from .append_v3 import add_v3, append_v3
    from .session import write_session

    kind = "add" if append_dim is None else "append"
    with write_session(target, "a", kind=kind, fmt="v3", storage_options=storage_options) as s:
        zs = s.zstore
        with local_scheduler(zs), _local_errors(s):
            objects = append_v3(zs, s.txn, nodes, append_dim) if append_dim is not None else \
                add_v3(zs, s.txn, nodes, opts)
            if s.txn is not None:
                s.commit(objects, root="zarr.json", consolidated=False)
            else:  # (icechunk: nobody sees the write before its owner commits it)
                zs.set_many([(k, json.dumps(v, indent=2).encode()) for k, v in objects.items() if k != "zarr.json"])
                zs.set_many([("zarr.json", json.dumps(objects["zarr.json"], indent=2).encode())])


def _local_errors(s: Any) -> Any:
    """A local file system's refusal (a full disk) as our error naming the store."""
    if s.target.kind not in ("dir", "zip"):
        return contextlib.nullcontext()
    return local_errors(f"Could not write to {s.zstore.display}")
