"""Where a chunk's time goes, in one process: scale_dask.py's bare work against ours, chunk by chunk.

    python benchmarks/scale_one_process.py [--n 2e7] [--chunk 1e6] [--repeat 3]

The same label strings, ``|S32`` store and bare functions as ``scale_dask.py`` (imported from it),
without a cluster: CPU milliseconds (user + system), wall milliseconds and minor page faults per
chunk, each row ``--repeat`` times (the first of each row pays first-touch costs):

* read: bare (``_bare_read``: the chunk file into one reused buffer, decoded with the reader's
  kernel), ours on dask's synchronous scheduler (``open_dataset(chunks={})`` and the benchmark's
  consumer), ours without dask (``ds[v][i*c:(i+1)*c].values``), and bare as one dask task a chunk;
* write: bare (the pre-made ``|S32`` bytes stored), bare with the writer's encoding (each chunk
  encoded from its values with the writer's kernel into a reused buffer), and ``to_nczarr`` on
  dask's synchronous scheduler; each write into a directory removed (and synced) before it.

``--chunk 4e6`` makes chunks of 128 MB, over the reader's 64 MiB reused buffer: their bytes go
into fresh memory (``xr_zstrings.scratch.fresh``), which the page-fault column shows.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import xarray as xr

sys.path.insert(0, str(Path(__file__).parent))
import scale_dask as S

from xr_zstrings import to_nczarr
from xr_zstrings.text.fixed import reused_output


def measure(name: str, nchunks: int, fn: Callable[[], object], repeat: int,
            before: Callable[[], object] = lambda: None) -> None:
    """Print CPU/wall ms and minor faults per chunk of ``fn``, ``repeat`` times (``before``: not timed)."""
    libc = ctypes.CDLL("libc.so.6")
    for _ in range(repeat):
        before()
        gc.collect()
        libc.malloc_trim(0)
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        fn()
        t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
        cpu = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
        print(f"{name:34s} cpu {1e3 * cpu / nchunks:7.1f} ms/chunk (system {1e3 * (r1.ru_stime - r0.ru_stime) / nchunks:6.1f})"
              f"  wall {1e3 * (t1 - t0) / nchunks:7.1f}  minor faults/chunk {(r1.ru_minflt - r0.ru_minflt) / nchunks:8.0f}",
              flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=float, default=2e7, help="strings (a multiple of --chunk)")
    ap.add_argument("--chunk", type=float, default=1e6, help="strings per chunk")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where the stores go (default: a temporary dir)")
    args = ap.parse_args()
    n, chunk = int(args.n), int(args.chunk)
    nchunks = n // chunk
    chunks = list(range(nchunks))
    work = Path(tempfile.mkdtemp(prefix="zstrings-one-", dir=args.dir))
    try:
        S.pool(0)
        values = np.concatenate([S.block_values(i, min(i + chunk, n)) for i in range(0, n, chunk)])
        ds = xr.Dataset({"s": ("x", values)}).chunk({"x": chunk})
        to_nczarr(ds, work / "nczarr.zarr", maxstrlen=S.WIDTH)
        store = str(work / "nczarr.zarr")
        print(f"{n:,} strings, chunks of {chunk:,} ({chunk * S.WIDTH / 2**20:.0f} MiB as |S32), in {work}")

        def ours_dask() -> None:
            with dask.config.set(scheduler="sync"):
                S.summarize(xr.open_dataset(store, engine="zstrings", chunks={})["s"].data)

        def ours_plain() -> None:
            v = xr.open_dataset(store, engine="zstrings")["s"].variable
            for i in chunks:
                v[i * chunk:(i + 1) * chunk].values  # noqa: B018  (materialised, then dropped)

        def bare_dask() -> None:
            blocks = da.map_blocks(S._bare_read_block, str(work), None, chunk, dtype=S.T, meta=np.empty(0, S.T),
                                   chunks=((chunk,) * nchunks,))
            with dask.config.set(scheduler="sync"):
                S.summarize(blocks)

        measure("read: bare", nchunks, lambda: S._bare_read(str(work), None, chunks, chunk), args.repeat)
        measure("read: ours, dask sync", nchunks, ours_dask, args.repeat)
        measure("read: ours, no dask", nchunks, ours_plain, args.repeat)
        measure("read: bare, one dask task a chunk", nchunks, bare_dask, args.repeat)

        target = work / "w"

        def fresh() -> None:
            shutil.rmtree(target, ignore_errors=True)
            os.sync()

        S.bare_chunk(chunk)
        put, _ = S._bare_io(str(target), None)

        def bare_encoded() -> None:
            with reused_output():
                for i in chunks:
                    put(f"bare/{i}", S._encoded(i, chunk, n))

        def ours_write() -> None:
            with dask.config.set(scheduler="sync"):
                to_nczarr(ds, target, maxstrlen=S.WIDTH)

        measure("write: bare (bytes made before)", nchunks, lambda: S._bare_write(str(target), None, chunks, chunk),
                args.repeat, fresh)
        measure("write: bare, encoded", nchunks, bare_encoded, args.repeat, fresh)
        measure("write: ours (to_nczarr, dask sync)", nchunks, ours_write, args.repeat, fresh)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
