"""The stalled writer of tests/io/test_commit.py's fence tests, run as a child process.

It appends ``stall_dataset("a")`` to the store (``to_nczarr``), or replaces the store with it
(``to_zarr_v3(mode="w")``), one chunk a batch, and before its second batch of chunk writes
through the store it stops itself with SIGSTOP: every thread of the process stops, the claim's renewal
thread with it, as a writer paused or starved past its lease. The test takes the store over with
another writer meanwhile and continues this one with SIGCONT. It prints one JSON line: how the
append ended and how many chunk batches were written after the stall.

    python stall_writer.py WRITER TARGET [STORAGE_OPTIONS_JSON]
    # WRITER "append" or "v3-replace"; TARGET "local:PATH" (a zarr LocalStore) or a URL
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

import numpy as np
import xarray as xr

T = np.dtypes.StringDType()
OLD, NEW = 8, 12  # rows in the store, rows an append adds; chunks of 4


def stall_dataset(tag: str, start: int = OLD, n: int = NEW) -> xr.Dataset:
    """``n`` rows from ``start``: a string and a number variable whose values name the writer."""
    t = np.arange(start, start + n)
    ds = xr.Dataset({"name": ("t", np.array([f"{tag}-{i}-é" for i in t], dtype=T)),
                     "value": ("t", t + (0.25 if tag == "a" else 0.5))})
    for v in ds.variables.values():
        v.encoding["chunks"] = (4,)
    ds["name"].encoding["maxstrlen"] = 16
    return ds


def _is_chunk(key: str) -> bool:
    name = key.rsplit("/", 1)[-1]
    return not name.startswith(".") and name != "zarr.json"  # no metadata object nor the journal


def main(writer: str, target: str, so: dict[str, Any] | None) -> None:
    from xr_zstrings import to_nczarr, to_zarr_v3
    from xr_zstrings.io.zstore import ZStore
    from xr_zstrings.write import chunks, zarr3

    chunks._BATCH_BYTES = zarr3._BATCH_BYTES = 1  # one chunk a batch: the stall falls between two batches
    batches = {"before": 0, "after": 0}
    original = ZStore.set_many

    def set_many(self: ZStore, items: Any, **kw: Any) -> None:
        items = list(items)
        if items and all(_is_chunk(k) for k, _ in items):
            stalled = batches["before"] >= 1
            if batches["before"] == 1:
                batches["before"] += 1
                os.kill(os.getpid(), signal.SIGSTOP)  # the whole process stops here, until SIGCONT
            original(self, items, **kw)  # (the fence, then the writes)
            batches["after" if stalled else "before"] += 1
            return
        original(self, items, **kw)

    ZStore.set_many = set_many  # type: ignore[method-assign]
    if target.startswith("local:"):
        from zarr.storage import LocalStore

        store: Any = LocalStore(target[len("local:"):], read_only=False)
    else:
        store = target
    outcome = "committed"
    try:
        if writer == "append":
            to_nczarr(stall_dataset("a"), store, mode="a", append_dim="t", storage_options=so)
        else:
            to_zarr_v3(stall_dataset("a", 0, OLD + NEW), store, mode="w", storage_options=so)
    except Exception as e:  # reported to the test
        outcome = f"{type(e).__name__}: {e}"
    print(json.dumps({"outcome": outcome, "batches_after_stall": batches["after"]}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]) if len(sys.argv) > 3 else None)
