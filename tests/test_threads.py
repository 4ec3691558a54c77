"""xr_zstrings/threads.py: one pool of chunk work for readers and writers, sized by
XR_ZSTRINGS_DECODE_THREADS, that nested work cannot deadlock."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from xr_zstrings import threads, to_nczarr, to_zarr_v3

N, CHUNK = 4_000, 100  # 40 chunks: more than one batch item, so the pool is asked


def _dataset() -> xr.Dataset:
    names = np.array([f"name-{i}-{'é' * (i % 4)}" for i in range(N)], dtype=object)
    ds = xr.Dataset({"name": ("x", names), "value": ("x", np.arange(N, dtype="f8"))})
    for v in ds.variables.values():
        v.encoding["chunks"] = (CHUNK,)
    return ds


def _workers() -> set[threading.Thread]:
    """The pool threads alive, as their Thread objects: pools of the same size name their threads
    alike, and a new thread may get the ident of one that just ended (an earlier test's pool,
    collected at its teardown), so neither names nor idents tell a new thread from an old one."""
    return {t for t in threading.enumerate() if t.name.startswith("zstrings-decode")}


@pytest.mark.parametrize("write", [to_zarr_v3, to_nczarr], ids=["to_zarr_v3", "to_nczarr"])
@pytest.mark.parametrize("setting", ["1", "3"])
def test_the_setting_sizes_the_writers_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write, setting) -> None:
    """Writers encode on the readers' pool, of XR_ZSTRINGS_DECODE_THREADS threads (1: none)."""
    monkeypatch.setenv(threads.DECODE_THREADS_ENV, setting)
    monkeypatch.setattr(threads, "_pools", {})
    before = _workers()
    write(_dataset(), str(tmp_path / "out.zarr"))
    expected = int(setting)
    assert sorted(threads._pools) == ([] if expected == 1 else [expected])
    if expected > 1:
        assert threads._pools[expected]._max_workers == expected
        assert 1 <= len(_workers() - before) <= expected
    with xr.open_dataset(tmp_path / "out.zarr", engine="zstrings") as got:
        assert got["name"].values.tolist() == _dataset()["name"].values.tolist()


def _finishes(fn, timeout: float = 120) -> list:
    """fn() on a daemon thread: its result, or a failure when it is still waiting after ``timeout``."""
    out: list = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "nested work on the shared pool deadlocked"
    return out[0]


def test_nested_work_on_a_saturated_pool_does_not_deadlock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every thread of a 2-thread pool runs a task that asks the same pool for more: the inner work
    runs on the asking thread instead of queueing behind its caller."""
    monkeypatch.setenv(threads.DECODE_THREADS_ENV, "2")
    gate = threading.Barrier(2, timeout=30)  # both pool threads are busy before either nests

    def outer(i: int) -> list[int]:
        if i < 2:
            gate.wait()
        return threads.run_all(lambda j: i * 10 + j, range(4))

    got = _finishes(lambda: threads.run_all(outer, range(4)))
    assert got == [[i * 10 + j for j in range(4)] for i in range(4)]


def test_a_writer_task_that_reads_does_not_deadlock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tasks on the pool that read a store (whose reads go to the same pool) while every pool
    thread is taken: as a writer whose source is a lazily read zstrings variable."""
    monkeypatch.setenv(threads.DECODE_THREADS_ENV, "2")
    to_zarr_v3(_dataset(), str(tmp_path / "src.zarr"))
    gate = threading.Barrier(2, timeout=30)

    def read_part(i: int) -> list[str]:
        if i < 2:
            gate.wait()
        with xr.open_dataset(tmp_path / "src.zarr", engine="zstrings") as ds:
            return ds["name"][i * 1000 : (i + 1) * 1000].values.tolist()

    got = _finishes(lambda: threads.run_all(read_part, range(4)))
    assert [v for part in got for v in part] == _dataset()["name"].values.tolist()


def test_one_thread_runs_on_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(threads.DECODE_THREADS_ENV, "1")
    assert threads.run_all(lambda _: threading.current_thread().name, range(3)) == [threading.current_thread().name] * 3
