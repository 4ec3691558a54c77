"""Chunks decoded on the decode pool's threads: the read's context (its utf8_errors report) reaches
them (threads.run_all runs each task through text.policy.in_this_context)."""

from __future__ import annotations

import threading
import warnings

import numpy as np
import xarray as xr

from xr_zstrings import StringDecodeWarning
from xr_zstrings.read.chunked import ChunkedArray


def test_read_on_the_decode_pool_warns_once_for_all_chunks(tmp_path, monkeypatch):
    """Chunks decoded on the pool's threads report into the read's one scope: one warning with
    the count over every chunk (each chunk its own task here)."""
    import zarr

    # (Zarr v2 |O vlen-utf8: decoded on the pool with and without the compiled kernels)
    vals = np.array(["ok", "xy", "é", "ab"] * 8, dtype=object)
    g = zarr.open_group(tmp_path / "s.zarr", mode="w", zarr_format=2)
    a = g.create_array("s", shape=vals.shape, chunks=(4,), dtype=str, compressors=None, fill_value="")
    a[:] = vals
    a.attrs["_ARRAY_DIMENSIONS"] = ["x"]
    for f in (tmp_path / "s.zarr" / "s").rglob("*"):
        if f.is_file() and not f.name.startswith("."):
            f.write_bytes(f.read_bytes().replace(b"xy", b"x\xc3"))
    groups = []
    monkeypatch.setattr(ChunkedArray, "_group_size", lambda self, shape=None: 1)
    real_groups = ChunkedArray._groups

    def counted(self, plan):
        out = real_groups(self, plan)
        groups.append(len(out))
        return out

    monkeypatch.setattr(ChunkedArray, "_groups", counted)
    threads: set[str] = set()
    real_fetch = ChunkedArray._fetch

    def fetch(self, group):
        threads.add(threading.current_thread().name)
        return real_fetch(self, group)

    monkeypatch.setattr(ChunkedArray, "_fetch", fetch)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        with xr.open_dataset(tmp_path / "s.zarr", engine="zstrings", decode_threads=2) as opened:
            got = opened["s"].values.tolist()
    assert got == ["ok", "x", "é", "ab"] * 8
    assert groups and max(groups) == 8  # eight tasks ...
    assert any(name.startswith("zstrings-decode") for name in threads), threads  # ... on the pool
    msgs = [str(w.message) for w in rec if issubclass(w.category, StringDecodeWarning)]
    assert len(msgs) == 1 and "end of 8 value(s)" in msgs[0], msgs
