"""Concurrent use of one local store by real processes: writers are serialised by the target's lock
(``.<name>.zstrings-lock``, flock), ``mode="w-"`` is exclusive, no append is lost, and a reader
that reads while another process appends sees the old or the new length, never a torn store."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import netCDF4
import numpy as np
import pytest
import xarray as xr
from peers import nc_url
from s3_server import S3Server

from xr_zstrings import StoreReplacedError, ZStringsError
from xr_zstrings.write.nczarr import to_nczarr

T = np.dtypes.StringDType()
BATCH = 7  # rows per append; chunks of 5, so most appends rewrite a partial chunk


def _batch(writer: int, i: int) -> xr.Dataset:
    tag = f"w{writer}-b{i}"
    return xr.Dataset({"tag": ("t", np.array([tag] * BATCH, dtype=T)),
                       "row": ("t", np.arange(BATCH, dtype="i4"))})


def _start(path: Path) -> None:
    ds = _batch(0, 0)
    for v in ds.variables.values():
        v.encoding["chunks"] = (5,)
    to_nczarr(ds, path, unlimited_dims=["t"], maxstrlen=8)


def _ctx() -> Any:
    # fork: the children need this module's functions without importing xarray again (seconds);
    # zarr-python resets its event loop in a fork child
    return mp.get_context("fork")


def _s3_ctx() -> Any:
    # obstore's runtime does not survive a fork: S3 writers start from a fork server that has
    # imported the writer but never touched obstore
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["xarray", "dask.array", "xr_zstrings.write.nczarr", "test_concurrency"])
    return ctx


def _appender(path: str, writer: int, n: int, go: Any) -> None:
    go.wait()
    for i in range(1, n + 1):
        to_nczarr(_batch(writer, i), path, mode="a", append_dim="t")


@contextlib.contextmanager
def _released(target: Any, arg_sets: list[tuple[Any, ...]], timeout: float = 120) -> Iterator[list[Any]]:
    """One forked process per argument tuple (each gets a shared start event as its last argument),
    released together; yields them running, then joins them and asserts each exited 0."""
    ctx = _ctx()
    go = ctx.Event()
    procs = [ctx.Process(target=target, args=(*args, go)) for args in arg_sets]
    for p in procs:
        p.start()
    go.set()
    yield procs
    for p in procs:
        p.join(timeout)
    assert [p.exitcode for p in procs] == [0] * len(procs)


def test_two_processes_appending_lose_no_batch(tmp_path: Path) -> None:
    path = tmp_path / "log.zarr"
    _start(path)
    with _released(_appender, [(str(path), w, 8) for w in (1, 2)]):
        pass
    ds = xr.open_dataset(path, engine="zstrings")
    tags = ds["tag"].values.tolist()
    assert len(tags) == BATCH * (1 + 2 * 8)
    # every batch exactly once and whole (its rows together, in order)
    blocks = [tags[i : i + BATCH] for i in range(0, len(tags), BATCH)]
    assert all(len(set(b)) == 1 for b in blocks)
    assert sorted(b[0] for b in blocks) == sorted(["w0-b0", *[f"w{w}-b{i}" for w in (1, 2) for i in range(1, 9)]])
    assert ds["row"].values.tolist() == list(range(BATCH)) * (1 + 2 * 8)
    for w in (1, 2):  # each writer's batches in its own order
        mine = [b[0] for b in blocks if b[0].startswith(f"w{w}-")]
        assert mine == [f"w{w}-b{i}" for i in range(1, 9)]
    with netCDF4.Dataset(nc_url(path), "r") as nc:  # netcdf-c agrees
        assert nc["tag"][:].tolist() == tags


def _create(path: str, writer: int, go: Any, results: Any, so: dict[str, Any] | None = None) -> None:
    go.wait()
    try:
        to_nczarr(_batch(writer, 0), path, mode="w-", storage_options=so)
        results.put((writer, "ok"))
    except ZStringsError as e:
        results.put((writer, str(e)))


def test_mode_w_minus_is_exclusive(tmp_path: Path) -> None:
    ctx = _ctx()
    for round_ in range(4):
        path = tmp_path / f"new{round_}.zarr"
        go, results = ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=_create, args=(str(path), w, go, results)) for w in (1, 2)]
        for p in procs:
            p.start()
        go.set()
        for p in procs:
            p.join(120)
        got = dict(results.get(timeout=10) for _ in procs)
        winners = [w for w, r in got.items() if r == "ok"]
        assert len(winners) == 1, got
        loser = 3 - winners[0]
        assert "mode='w-' never overwrites" in got[loser]
        tags = xr.open_dataset(path, engine="zstrings")["tag"].values.tolist()
        assert tags == [f"w{winners[0]}-b0"] * BATCH


def test_mode_w_minus_is_exclusive_on_s3(s3: S3Server) -> None:
    """On S3 the placeholder root is claimed with a create-only PUT (If-None-Match), so of two
    processes creating one store exactly one wins and the other is told so."""
    bucket = s3.bucket("zstrings-concurrency")
    ctx = _s3_ctx()
    for round_ in range(2):
        url = f"s3://{bucket}/new-{uuid.uuid4().hex}.zarr"
        go, results = ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=_create, args=(url, w, go, results, s3.options())) for w in (1, 2)]
        for p in procs:
            p.start()
        go.set()
        for p in procs:
            p.join(120)
        got = dict(results.get(timeout=10) for _ in procs)
        winners = [w for w, r in got.items() if r == "ok"]
        assert len(winners) == 1, (round_, got)
        assert "mode='w-'" in got[3 - winners[0]]
        back = xr.open_dataset(url, engine="zstrings", storage_options=s3.options())
        assert back["tag"].values.tolist() == [f"w{winners[0]}-b0"] * BATCH


def _overwrite(path: str, writer: int, n: int, go: Any) -> None:
    go.wait()
    for i in range(n):
        to_nczarr(_batch(writer, i), path, mode="w")


def test_two_processes_overwriting_leave_one_whole_version(tmp_path: Path) -> None:
    path = tmp_path / "w.zarr"
    _start(path)
    seen = set()
    with _released(_overwrite, [(str(path), w, 6) for w in (1, 2)]) as procs:
        while any(p.is_alive() for p in procs):  # whatever a reader reads meanwhile is one whole version
            try:
                tags = xr.open_dataset(path, engine="zstrings")["tag"].values.tolist()
            except (ZStringsError, OSError):
                # a reader racing a replacement may be refused (documented); it never gets a mix
                continue
            assert len(tags) == BATCH and len(set(tags)) == 1, tags
            seen.add(tags[0])
    final = xr.open_dataset(path, engine="zstrings")["tag"].values.tolist()
    assert final in (["w1-b5"] * BATCH, ["w2-b5"] * BATCH)
    assert [q.name for q in tmp_path.iterdir()] == ["w.zarr"]  # nothing left beside it


def test_reading_while_another_process_appends(tmp_path: Path) -> None:
    path = tmp_path / "grow.zarr"
    _start(path)
    n = 15
    expected = ["w0-b0"] * BATCH + [f"w1-b{i}" for i in range(1, n + 1) for _ in range(BATCH)]
    reads = 0
    deadline = time.monotonic() + 120
    with _released(_appender, [(str(path), 1, n)]) as (proc,):
        while proc.is_alive() and time.monotonic() < deadline:
            ds = xr.open_dataset(path, engine="zstrings")
            try:
                tags = ds["tag"].values.tolist()
                rows = ds["row"].values.tolist()
            except StoreReplacedError:  # an append swapped in between the open and the read: refused
                continue
            reads += 1
            assert len(tags) % BATCH == 0 and len(rows) == len(tags), len(tags)
            assert tags == expected[: len(tags)]  # the old or the new length, never a torn read
    assert reads > 0
    assert xr.open_dataset(path, engine="zstrings")["tag"].values.tolist() == expected


def test_lock_timeout_gives_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer that waits longer than XR_ZSTRINGS_LOCK_TIMEOUT for another process gets
    ConcurrentWriteError naming the store; the store is unchanged."""
    from xr_zstrings import ConcurrentWriteError

    path = tmp_path / "held.zarr"
    _start(path)
    ctx = _ctx()
    held, release = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_hold_lock, args=(str(path), held, release))
    proc.start()
    assert held.wait(60)
    monkeypatch.setenv("XR_ZSTRINGS_LOCK_TIMEOUT", "0.3")
    with pytest.raises(ConcurrentWriteError, match="another process"):
        to_nczarr(_batch(1, 1), path, mode="a", append_dim="t")
    release.set()
    proc.join(60)
    assert xr.open_dataset(path, engine="zstrings")["tag"].values.tolist() == ["w0-b0"] * BATCH


def _hold_lock(path: str, held: Any, release: Any) -> None:
    from xr_zstrings.io.atomic import target_lock

    with target_lock(Path(path), path):
        held.set()
        release.wait(60)


def test_lazy_read_after_a_replacement_is_refused(tmp_path: Path) -> None:
    """A Dataset opened lazily, then the store replaced by another writer (another process here,
    mode="w"): reading it raises StoreReplacedError instead of mixing the old metadata with the new
    chunks (an overwrite with other chunks once read as the old first chunk plus a missing second
    one); opened again, it reads the new version."""
    path = tmp_path / "v.zarr"
    _start(path)  # chunks of 5: two chunks
    old = xr.open_dataset(path, engine="zstrings")
    with _released(_overwrite, [(str(path), 1, 1)]):  # one chunk of 7 rows
        pass
    with pytest.raises(StoreReplacedError, match="was replaced by another writer.*Open it again"):
        old["tag"].values
    with pytest.raises(StoreReplacedError):
        old["row"][5:].values
    assert xr.open_dataset(path, engine="zstrings")["tag"].values.tolist() == ["w1-b0"] * BATCH


def _add_variable(path: str, writer: int, n: int, go: Any) -> None:
    go.wait()
    to_nczarr(xr.Dataset({"extra": ("t", np.arange(BATCH, dtype="i4"))}), path, mode="a")


@pytest.mark.parametrize("change", ["append", "add"])
def test_lazy_reader_keeps_its_version_through_appends(tmp_path: Path, change: str) -> None:
    """A Dataset opened lazily keeps reading the version it opened while another process appends
    to the store or adds a variable (the append rewrites the partial last chunk with the same old
    values, and its new chunks lie outside the old shape), as engine="zarr" and icechunk do; opened
    again, it reads the new version. (Failed before: StoreReplacedError on every append.)"""
    path = tmp_path / "v.zarr"
    _start(path)  # chunks of 5: the second chunk is partial, and an append rewrites it
    old = xr.open_dataset(path, engine="zstrings")
    assert old["tag"][:2].values.tolist() == ["w0-b0"] * 2  # read once before the change, too
    writer = _appender if change == "append" else _add_variable
    with _released(writer, [(str(path), 1, 3)]):
        pass
    assert old["tag"].values.tolist() == ["w0-b0"] * BATCH
    assert old["row"][5:].values.tolist() == [5, 6]
    assert "extra" not in old
    new = xr.open_dataset(path, engine="zstrings")
    if change == "append":
        assert new["tag"].values.tolist() == ["w0-b0"] * BATCH + [f"w1-b{i}" for i in (1, 2, 3) for _ in range(BATCH)]
    else:
        assert new["extra"].values.tolist() == list(range(BATCH))


def test_a_store_changed_in_place_by_nobody_reads_as_before(tmp_path: Path) -> None:
    """The version check costs nothing in the common case: repeated lazy reads of an unchanged
    store succeed, also after an unrelated write beside the store."""
    path = tmp_path / "v.zarr"
    _start(path)
    ds = xr.open_dataset(path, engine="zstrings")
    to_nczarr(_batch(3, 0), tmp_path / "other.zarr")
    for _ in range(3):
        assert ds["tag"].values.tolist() == ["w0-b0"] * BATCH


# --- object storage: two writers, one store ----------------------------------------------------

def _s3_batch(writer: int, i: int) -> xr.Dataset:
    ds = _batch(writer, i)
    for v in ds.variables.values():
        v.encoding["chunks"] = (5,)
    return ds


def _s3_appender(url: str, so: dict[str, Any], writer: int, rounds: int, go: Any, step: Any, results: Any) -> None:
    """Append one batch per round, both writers released together each round (``step``: a
    barrier); report OK or the error of each."""
    from xr_zstrings import ConcurrentWriteError

    go.wait()
    for i in range(1, rounds + 1):
        step.wait(60)
        try:
            to_nczarr(_s3_batch(writer, i), url, mode="a", append_dim="t", storage_options=so)
            results.put((writer, i, "ok"))
        except ConcurrentWriteError as e:
            results.put((writer, i, f"ConcurrentWriteError: {e}"))
        except Exception as e:  # any other outcome fails the test
            results.put((writer, i, f"{type(e).__name__}: {e}"))


def _whole_batches(tags: list[str]) -> list[str]:
    """The batches a store holds, each asserted whole (BATCH rows of one tag, together)."""
    blocks = [tags[i : i + BATCH] for i in range(0, len(tags), BATCH)]
    assert len(tags) % BATCH == 0 and all(len(set(b)) == 1 for b in blocks), tags  # nothing torn
    return [b[0] for b in blocks]


def test_two_processes_appending_to_s3_lose_no_batch(s3: S3Server) -> None:
    """Two processes append to one S3 store, released together for 10 rounds: in each round one
    commits and the other either commits after it or gets ConcurrentWriteError naming the store;
    the store holds exactly the batches whose writes returned, each whole: 0 lost, 0 torn. (Before:
    all 20 calls returned OK, 3 batches were lost and 14 torn.)"""
    bucket = s3.bucket("zstrings-concurrency")
    url = f"s3://{bucket}/two-{uuid.uuid4().hex}.zarr"
    so = s3.options()
    ds = _s3_batch(0, 0)
    to_nczarr(ds, url, unlimited_dims=["t"], maxstrlen=8, storage_options=so)
    rounds = 10
    ctx = _s3_ctx()
    go, step, results = ctx.Event(), ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_s3_appender, args=(url, so, w, rounds, go, step, results)) for w in (1, 2)]
    for p in procs:
        p.start()
    go.set()
    for p in procs:
        p.join(300)
    assert [p.exitcode for p in procs] == [0, 0]
    got = [results.get(timeout=10) for _ in range(2 * rounds)]
    unexpected = [r for r in got if r[2] != "ok" and not r[2].startswith("ConcurrentWriteError")]
    assert not unexpected, unexpected
    refused = [r for r in got if r[2] != "ok"]
    assert all(url in r[2] and "Nothing was written" in r[2] for r in refused), refused
    ok = sorted(f"w{w}-b{i}" for w, i, r in got if r == "ok")
    tags = xr.open_dataset(url, engine="zstrings", storage_options=so)["tag"].values.tolist()
    held = _whole_batches(tags)
    assert held[0] == "w0-b0" and sorted(held[1:]) == ok  # every batch that returned OK, once; no other
    for w in (1, 2):  # each writer's batches in its own order
        mine = [b for b in held if b.startswith(f"w{w}-")]
        assert mine == sorted(mine, key=lambda b: int(b.split("-b")[1]))


def _gated_writer(url: str, so: dict[str, Any], role: str, order: str, events: dict[str, Any], results: Any) -> None:
    """One of the two writers of the placeholder interleaving. "A" stops right after its first PUT
    of the root ``.zgroup`` (a placeholder); "B" makes its first request only once that placeholder
    is in the store. ``order`` "overlap": A then waits for B to finish. "strand" (the interleaving
    that stranded stores): A waits for B's first request, finishes, and only then B goes on."""
    import asyncio

    import obstore

    from xr_zstrings import ConcurrentWriteError

    def patch(names: tuple[str, ...], before: Any = None, after: Any = None) -> None:
        for name in names:
            real = getattr(obstore, name)

            def wrapped(*a: Any, _real: Any = real, _async: bool = name.endswith("_async"), **k: Any) -> Any:
                path = a[1] if len(a) > 1 else ""
                if before is not None:
                    before(path)
                if not _async:
                    out = _real(*a, **k)
                    if after is not None:
                        after(path)
                    return out

                async def run() -> Any:
                    out = await _real(*a, **k)
                    if after is not None:
                        await asyncio.to_thread(after, path)
                    return out

                return run()

            setattr(obstore, name, wrapped)

    if role == "A":
        def after_put(path: str) -> None:
            if path.endswith("/.zgroup") and not events["a_placeholder"].is_set():
                events["a_placeholder"].set()
                events["b_done" if order == "overlap" else "b_started"].wait(120)

        patch(("put", "put_async"), after=after_put)
    else:
        first = [True]

        def before_request(path: str) -> None:
            if first[0]:
                events["a_placeholder"].wait(120)  # B's first request waits for A's placeholder

        def after_request(path: str) -> None:
            if first[0]:
                first[0] = False
                if order == "strand":  # A finishes after B's first request, before B goes on
                    events["b_started"].set()
                    events["a_done"].wait(120)

        patch(("get", "get_async", "put", "put_async", "head", "head_async"), before=before_request,
              after=after_request)
    try:
        to_nczarr(_s3_batch(1 if role == "A" else 2, 1), url, mode="a", append_dim="t", storage_options=so)
        results.put((role, "ok"))
    except ConcurrentWriteError as e:
        results.put((role, f"ConcurrentWriteError: {e}"))
    except Exception as e:  # reported, the test fails on it
        results.put((role, f"{type(e).__name__}: {e}"))
    finally:
        events["a_done" if role == "A" else "b_done"].set()


@pytest.mark.parametrize("order", ["strand", "overlap"])
def test_placeholder_interleaving_cannot_strand_the_store(s3: S3Server, order: str) -> None:
    """The interleaving that left an S3 store's root a placeholder forever, made deterministic:
    writer A's placeholder PUT lands between B's first request (its read of the root) and B's claim.
    "strand": A then finishes before B goes on; "overlap": A waits until B has finished. Either B
    commits after A (its claim comes after A's) or it gets ConcurrentWriteError having written
    nothing; the store opens, holding every batch whose write returned, whole. (Before: "strand"
    saved A's placeholder as B's "original root" and wrote it back last: the store was refused
    forever; "overlap" failed B with IncompleteStoreError.)"""
    bucket = s3.bucket("zstrings-concurrency")
    url = f"s3://{bucket}/interleave-{uuid.uuid4().hex}.zarr"
    so = s3.options()
    to_nczarr(_s3_batch(0, 0), url, unlimited_dims=["t"], maxstrlen=8, storage_options=so)
    ctx = _s3_ctx()
    events = {name: ctx.Event() for name in ("a_placeholder", "b_started", "a_done", "b_done")}
    results = ctx.Queue()
    procs = [ctx.Process(target=_gated_writer, args=(url, so, role, order, events, results)) for role in ("A", "B")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    got = dict(results.get(timeout=10) for _ in procs)
    assert got["A"] == "ok", got
    tags = xr.open_dataset(url, engine="zstrings", storage_options=so)["tag"].values.tolist()
    if order == "strand":
        assert got["B"] == "ok", got
        assert _whole_batches(tags) == ["w0-b0", "w1-b1", "w2-b1"]
    else:
        assert got["B"].startswith("ConcurrentWriteError") and "Nothing was written" in got["B"], got
        assert _whole_batches(tags) == ["w0-b0", "w1-b1"]
