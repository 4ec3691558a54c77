"""Can raw (uncompressed) layouts use both cores? Packing StringDType values on 1 and 2 threads.

    python benchmarks/pack_threads.py [--n 1000000] [--repeat 15]

A raw NCZarr ``|S48`` read is almost all packing: the kernel's first phase (find each row's end,
validate UTF-8) runs without any lock, its second phase stores each value with numpy's
``NpyString_pack`` under the result array's allocator lock (numpy's C API: one lock per
StringDType instance, held for the whole pack loop). Chunks decoded on two threads therefore
serialise on that lock. This measures, on the same 1e6 label-like strings (benchmarks/_data.py):

1. one thread decoding every row into one array (what a 1-thread read does);
2. two threads, each decoding half into its half of one array (today's 2-thread read);
3. two threads, each into its own array with its own StringDType instance, i.e. its own allocator
   (the "per-thread buffers" plan) -- then
4. packing those two arrays once into one result (``np.concatenate``: a StringDType result must
   hold every value in its own allocator's arena, so each value is packed again, serially);
5. the dask route: ``xr.open_dataset(..., chunks=...)`` computed on the threaded scheduler with 1
   and 2 workers (each block is its own array, so nothing is shared).

Rows 3+4 against row 1 say whether "decode into per-thread buffers and pack once" can beat one
thread; the answer is printed with the numbers.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _data import make_raw


def best_times(cases: dict[str, Callable[[], object]], repeat: int) -> dict[str, tuple[float, float]]:
    """Per case: the fastest wall seconds and the least CPU seconds of the process (all threads)
    over ``repeat`` rounds, the cases interleaved round by round. The minimum, not the median: on
    a machine shared with other jobs, the least time is the best estimate of a case's own cost."""
    for fn in cases.values():  # warm up (first-touch page faults, imports)
        fn()
    walls: dict[str, list[float]] = {k: [] for k in cases}
    cpus: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(repeat):
        for name, fn in cases.items():
            c, t = time.process_time(), time.perf_counter()
            fn()
            walls[name].append(time.perf_counter() - t)
            cpus[name].append(time.process_time() - c)
    return {k: (min(walls[k]), min(cpus[k])) for k in cases}


def on_threads(*fns: Callable[[], object]) -> None:
    threads = [threading.Thread(target=f) for f in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    import xarray as xr

    from xr_zstrings import to_nczarr
    from xr_zstrings.text.kernels import kernels

    K = kernels()
    if K is None:
        raise SystemExit("the compiled kernels are not built (or XR_ZSTRINGS_NO_EXT is set)")
    n, width = args.n, 48
    strs, raw = make_raw(n)
    buf = memoryview(raw.view(np.uint8).reshape(-1))
    half = n // 2
    lo, hi = buf[: half * width], buf[half * width :]
    T = np.dtypes.StringDType

    def one_thread() -> np.ndarray:
        out = np.empty(n, T())
        K.fixed_to_T(buf, width, out, None, 0, False, None)
        return out

    def two_threads_one_array() -> np.ndarray:
        out = np.empty(n, T())
        on_threads(lambda: K.fixed_to_T(lo, width, out[:half], None, 0, False, None),
                   lambda: K.fixed_to_T(hi, width, out[half:], None, 0, False, None))
        return out

    parts: list[np.ndarray] = []

    def two_threads_two_arrays() -> None:
        a, b = np.empty(half, T()), np.empty(n - half, T())
        on_threads(lambda: K.fixed_to_T(lo, width, a, None, 0, False, None),
                   lambda: K.fixed_to_T(hi, width, b, None, 0, False, None))
        parts[:] = [a, b]

    def pack_once() -> np.ndarray:
        return np.concatenate(parts)

    ref = one_thread()
    assert two_threads_one_array().tolist() == ref.tolist() == strs
    two_threads_two_arrays()
    assert pack_once().tolist() == strs
    cases: dict[str, Callable[[], object]] = {
        "1. one thread, one array": one_thread,
        "2. two threads, one array (shared allocator)": two_threads_one_array,
        "3. two threads, two arrays (own allocators)": two_threads_two_arrays,
        "4. pack 3's arrays once into one (np.concatenate)": pack_once,
    }
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "raw.zarr"
        ds = xr.Dataset({"s": ("n", np.array(strs, dtype=T()))})
        ds["s"].encoding["chunks"] = (n // 16,)
        to_nczarr(ds, path)
        for workers in (1, 2):
            def dask_read(workers: int = workers) -> np.ndarray:
                lazy = xr.open_dataset(path, engine="zstrings", chunks={}, decode_threads=1)["s"].data
                return lazy.compute(scheduler="threads", num_workers=workers)

            assert dask_read().tolist() == strs
            cases[f"5. dask, 16 blocks, {workers} worker thread{'s' if workers > 1 else ''}"] = dask_read
        best = best_times(cases, args.repeat)
    t3, t4 = best["3. two threads, two arrays (own allocators)"], best["4. pack 3's arrays once into one (np.concatenate)"]
    rows = list(best.items())
    rows.insert(4, ("3 + 4: per-thread buffers, packed once", (t3[0] + t4[0], t3[1] + t4[1])))
    t1 = best["1. one thread, one array"]

    load = os.getloadavg()[0]
    print(f"{n:,} strings of 4-40 chars (|S{width}, raw), best of {args.repeat}, "
          f"{os.cpu_count()} CPUs, load average {load:.1f} at the end\n")
    print("| case | wall s | CPU s (all threads) | M strings/s | vs one thread |")
    print("|---|---:|---:|---:|---:|")
    for name, (t, c) in rows:
        print(f"| {name} | {t:.3f} | {c:.3f} | {n / t / 1e6:.1f} | {t1[0] / t:.2f}x |")
    ideal = t3[1] / 2 + t4[1]
    print(f"\nPer-thread buffers packed once, with two idle cores: at best {ideal:.3f} s (half of 3's CPU, "
          f"then 4's) vs {t1[1]:.3f} s of one thread's CPU: {t1[1] / ideal:.2f}x.")


if __name__ == "__main__":
    main()
