"""Chunk I/O for the writer: encode blocks with an array's codec pipeline and write them to the store.

numpy arrays are written chunk by chunk on threads, in batches; dask arrays become a graph of
per-block writes (``_dask_writer``) that one ``dask.compute`` runs in parallel.
"""

from __future__ import annotations

import contextlib
import math
import threading
import uuid
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from ..errors import ZStringsError, user_stacklevel
from ..formats.netcdf_c import NCZarrLayout
from ..io.zstore import ZStore
from ..text.fixed import reused_output
from ..text.policy import at_offset
from ..threads import run_all
from .plan import _Array

_BATCH_BYTES = 64 << 20


def chunk_key(a: _Array, idx: tuple[int, ...]) -> str:
    return f"{a.key}/{a.separator.join(str(i) for i in idx) or '0'}"


def _encode_chunk(a: _Array, block: np.ndarray, chunk_shape: tuple[int, ...]) -> bytes:
    """Pad an edge block to the full chunk with the fill value and run the codec pipeline."""
    block = np.asarray(block, dtype=a.dtype)
    if block.shape != chunk_shape:
        full = np.full(chunk_shape, a.fill_storage, dtype=a.dtype)
        full[tuple(slice(0, s) for s in block.shape)] = block
        block = full
    assert a.pipeline is not None
    if block.dtype.kind == "O":  # |O (another writer's pure Zarr v2 text): the vlen filter makes the bytes
        return a.pipeline.encode(np.ascontiguousarray(block))
    # the chunk's bytes as a flat uint8 view (no copy for a contiguous block); uncompressed chunks
    # go to the store as that view, compressors read it directly
    block = np.ascontiguousarray(block)
    raw = block.reshape(-1).view(np.uint8) if block.dtype.itemsize else np.frombuffer(block.tobytes(), np.uint8)
    if a.pipeline.compressor is None and not a.pipeline.filters:
        return raw  # type: ignore[return-value]  # a uint8 view: the store takes any buffer (no copy)
    return a.pipeline.encode(raw)


class ChunkBatch:
    """Chunk writes gathered into batches of about ``_BATCH_BYTES`` (or 4096 objects) across
    arrays: a wide dataset of small variables costs a few concurrent store round trips, not one
    per variable. ``flush`` before anything that must follow the chunks (metadata)."""

    def __init__(self, zstore: ZStore) -> None:
        self.zstore = zstore
        self.items: list[tuple[str, Any]] = []
        self.size = 0

    def add(self, items: list[tuple[str, Any]]) -> None:
        self.items.extend(items)
        self.size += sum(len(v) for _, v in items)
        if self.size >= _BATCH_BYTES or len(self.items) >= 4096:
            self.flush()

    def flush(self) -> None:
        if self.items:
            self.zstore.set_many(self.items)
        self.items, self.size = [], 0


def _write_numpy(zstore: ZStore, a: _Array, storage: np.ndarray, origin: tuple[int, ...] | None = None,
                 batch_to: ChunkBatch | None = None) -> None:
    """Write a storage-dtype array chunk by chunk (threads compress; ``origin`` in chunk units),
    into ``batch_to`` when given (written by its owner) or straight to the store."""
    chunks = a.chunks or (1,)
    storage = storage.reshape(1) if a.scalar else storage
    if storage.size == 0:
        return
    grid = [range(math.ceil(n / c)) for n, c in zip(storage.shape, chunks, strict=True)]
    origin = origin or (0,) * len(chunks)

    def one(idx: tuple[int, ...]) -> tuple[str, bytes]:
        sel = tuple(slice(i * c, (i + 1) * c) for i, c in zip(idx, chunks, strict=True))
        key = chunk_key(a, tuple(i + o for i, o in zip(idx, origin, strict=True)))
        return key, _encode_chunk(a, storage[sel], chunks)

    idxs = list(np.ndindex(*(len(r) for r in grid)))
    per_chunk = max(1, math.prod(chunks) * a.dtype.itemsize)
    batch = max(1, _BATCH_BYTES // per_chunk)
    for start in range(0, len(idxs), batch):
        items = run_all(one, idxs[start : start + batch])  # the shared pool (threads.decode_threads)
        if batch_to is not None:
            batch_to.add(items)
        else:
            zstore.set_many(items)


class _Gate:
    """Whether one store object still takes block writes, and how many are running."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.running = 0
        self.closed = False


# one gate per store object of this process (a dask worker process unpickles its own store object,
# whose gate is never closed: the writer there is fenced by the commit check, docs/reliability.md)
_GATES: weakref.WeakKeyDictionary[ZStore, _Gate] = weakref.WeakKeyDictionary()
_GATES_LOCK = threading.Lock()


def _gate(zstore: ZStore) -> _Gate:
    with _GATES_LOCK:
        gate = _GATES.get(zstore)
        if gate is None:
            gate = _GATES[zstore] = _Gate()
        return gate


@contextlib.contextmanager
def block_write(zstore: ZStore) -> Iterator[None]:
    """One dask task's chunk write through ``zstore``: refused once the write was abandoned
    (``compute_sums`` failed), counted while it runs."""
    gate = _gate(zstore)
    with gate.cond:
        if gate.closed:
            raise ZStringsError(f"Not writing to {zstore.display}: the write was abandoned after an error "
                                "in another block (that error is the one raised).")
        gate.running += 1
    try:
        yield
    finally:
        with gate.cond:
            gate.running -= 1
            gate.cond.notify_all()


def abandon_block_writes(zstore: ZStore) -> None:
    """No block write through ``zstore`` starts from now on, and those running are waited for.

    dask's local schedulers raise the first failed task's error while the other tasks of the graph
    are still running, and go on running them: without this, they kept writing chunks into a
    target the writer was already removing (its temporary sibling came back after the clean-up,
    or its removal failed with IsADirectoryError instead of the task's error)."""
    gate = _gate(zstore)
    with gate.cond:
        gate.closed = True
        gate.cond.wait_for(lambda: gate.running == 0)


class _BlockWriter:
    """What the per-block write tasks of one array need: the store, the array's chunk layout and
    codecs, and its block encoder (``a`` without its data or attributes).

    It is one key of the graph (``block_writes``), so a task's message does not hold the whole
    source graph (whose size grows with the number of blocks: docs/performance.md), and the
    tasks of a worker share one store object (object storage: one client and its connections
    instead of one per block)."""

    def __init__(self, zstore: ZStore, a: _Array) -> None:
        import dataclasses

        self.zstore = zstore
        self.a = dataclasses.replace(a, data=None, attrs={})
        self.extra = len(a.chunks) - a.data.ndim if not a.scalar else 0
        self.chunk_shape = a.chunks or (1,)

    def write(self, block: np.ndarray, loc: tuple[int, ...]) -> int:
        """Encode one block, write it as chunk ``loc``; the number of values cut (truncate).

        Where the store is done with the bytes once written (files, object storage), the block is
        encoded into the thread's reused buffer (``reused_output``): no fresh pages per chunk."""
        a = self.a
        assert a.encode_block is not None
        reuse = reused_output() if self.zstore.writes_copy else contextlib.nullcontext()
        # at_offset: errors name positions in the variable, not in the block
        with block_write(self.zstore), reuse, at_offset(tuple(i * c for i, c in zip(loc, self.chunk_shape, strict=False))):
            stored, cut = a.encode_block(block)
            if a.scalar:
                stored = np.asarray(stored).reshape(1)
                loc = (0,)
            self.zstore.set_many([(chunk_key(a, loc + (0,) * self.extra), _encode_chunk(a, stored, self.chunk_shape))])
        return int(cut)


def _write_block(block: np.ndarray, writer: _BlockWriter, block_info: Any = None) -> np.ndarray:
    if block_info is None:  # dask probing the function (not with meta given): write nothing
        return np.zeros((1,) * max(block.ndim, 1), np.int64)
    loc = tuple(block_info[0]["chunk-location"]) if block_info.get(0) else ()
    cut = writer.write(block, loc)
    return np.full((1,) * max(block.ndim, 1), cut, np.int64)


def _write_scalar(block: np.ndarray, writer: _BlockWriter) -> np.ndarray:
    return np.full((1,), writer.write(block.reshape(()), ()), np.int64)


def block_writes(fn: Any, data: Any, writer: Any, label: str) -> Any:
    """The dask array of ``fn(block, writer[, block_info])`` over every block of ``data``: one
    int64 count per block; computing it writes every chunk (both writers' dask graphs).

    ``writer`` is one key of the graph that every block's task depends on (as xarray's reads depend
    on one ``original-`` key): a distributed scheduler sends it to each worker once, not inside
    every task, and a worker's tasks share its store object. Unique names: dask would otherwise
    tokenize the writer by pickling it; ``meta`` given: dask would otherwise probe ``fn`` with the
    Delayed writer."""
    import dask
    import dask.array as da

    token = uuid.uuid4().hex
    held = dask.delayed(writer, name=f"{label}-writer-{token}", pure=False)
    return da.map_blocks(fn, data, held, dtype=np.int64, chunks=tuple((1,) * len(c) for c in data.chunks),
                         name=f"{label}-write-{token}", meta=np.empty((0,) * data.ndim, np.int64))


def _dask_writer(zstore: ZStore, a: _Array) -> Any:
    """A dask array of per-block truncation counts; computing it writes every chunk."""
    data = a.data
    logical_chunks = a.chunks[: data.ndim] if not a.scalar else ()
    if data.ndim:
        data = data.rechunk(logical_chunks)
    assert a.encode_block is not None
    writer = _BlockWriter(zstore, a)
    if data.ndim == 0:
        return block_writes(_write_scalar, data.reshape(1), writer, "zstrings")
    return block_writes(_write_block, data, writer, "zstrings")


def local_scheduler(zstore: ZStore) -> Any:
    """A context in which dask computes with threads of this process when the target is a zip file:
    a ``ZipStore`` sent to the worker processes of a distributed cluster reopens the file for
    writing there (truncating it), so only this process may write it. Elsewhere: no change."""
    import contextlib

    if type(zstore.store).__name__ != "ZipStore":
        return contextlib.nullcontext()
    import importlib.util

    if importlib.util.find_spec("dask") is None:
        return contextlib.nullcontext()
    import dask

    return dask.config.set(scheduler="threads")


_COMPUTE_GROUP = 256


def compute_sums(graphs: list[Any], zstore: ZStore) -> list[int]:
    """Compute dask arrays of per-block counts (each block's task writes its chunk to ``zstore``)
    and sum each; on an error, no block write goes on after it is raised (``abandon_block_writes``).

    In groups of ``_COMPUTE_GROUP`` arrays: dask's graph optimisation culls every layer against
    every output key, so one ``dask.compute`` of n arrays costs n^2 (docs/performance.md); each
    group still runs its blocks in parallel."""
    import dask

    out: list[int] = []
    try:
        for i in range(0, len(graphs), _COMPUTE_GROUP):
            out += [int(np.asarray(x).sum()) for x in dask.compute(*graphs[i : i + _COMPUTE_GROUP])]
    except BaseException:
        abandon_block_writes(zstore)
        raise
    return out


def attach_pipelines(arrays: Iterable[_Array]) -> None:
    """Build each planned array's codec pipeline (before the store is touched: a codec error
    leaves the target as it was)."""
    from ..codecs.v2 import build_pipeline
    from .plan import _what

    for a in arrays:
        a.pipeline = build_pipeline(a.compressor, a.filters or (), dtype=a.dtype,
                                    string_kind=a.kind if a.kind in ("string", "char") else None,
                                    where=_what(a.group, a.name))


def write_arrays(zstore: ZStore, arrays: list[_Array], layout: NCZarrLayout | None) -> list[tuple[str, bytes]]:
    """Write the chunks of planned arrays (numpy on threads, dask in one parallel compute) and
    return their ``.zarray``/``.zattrs`` items in ``layout`` (None: pure Zarr v2), for the caller
    to write after the chunks."""
    import warnings

    from ..errors import StringTruncationWarning
    from ..formats.nczarr_json import dumps
    from .plan import _array_zattrs, _is_dask, _what, _zarray

    lazy: list[tuple[_Array, Any]] = []
    batch = ChunkBatch(zstore)
    for a in arrays:
        if _is_dask(a.data):
            lazy.append((a, _dask_writer(zstore, a)))
        else:
            _write_numpy(zstore, a, np.asarray(a.data), batch_to=batch)
    batch.flush()
    if lazy:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", StringTruncationWarning)
            counts = compute_sums([x for _, x in lazy], zstore)
        for (a, _), n in zip(lazy, counts, strict=True):
            if int(n):
                warnings.warn(StringTruncationWarning(
                    f"{_what(a.group, a.name)}: {int(n)} value(s) longer than {a.maxstrlen or a.shape[-1]} "
                    "bytes were cut at a character boundary (on_overflow='truncate')"), stacklevel=user_stacklevel())
    items: list[tuple[str, bytes]] = []
    for a in arrays:
        items.append((f"{a.key}/.zarray", dumps(_zarray(a, layout))))
        items.append((f"{a.key}/.zattrs", dumps(_array_zattrs(a, layout))))
    return items
