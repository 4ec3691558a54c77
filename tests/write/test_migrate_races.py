"""``migrate`` in place is a writer under the same claim as appends (issue 37 items 3 and 10).

Each writer runs in a child process (tests/pause_writer.py) that stops itself at a commit step; the
store is then read through engine="zstrings", engine="zarr" (the v3 metadata: zarr.json) and netCDF4
(netcdf-c, local stores), which must all read the same rows, the rows written. Targets: a local
directory path (writers serialised by the writer lock), a zarr-python ``LocalStore`` object and moto
S3 (only the journal claim).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
import warnings
from pathlib import Path
from typing import Any

import netCDF4
import numpy as np
import pytest
import xarray as xr
import zarr
from pause_writer import Writer, rows, run_now
from peers import nc_url

import xr_zstrings
from xr_zstrings import StoreReplacedError
from xr_zstrings.cli.main import main
from xr_zstrings.io.commit import JOURNAL, inspect_store
from xr_zstrings.io.store import open_store

BUCKET = "zstrings-migrate-races"
KINDS = ["path", "localstore", "s3"]
BASE = 230


class Target:
    """A 230-row store (chunks of 10, ``t`` unlimited) of one kind: how writers name it, how to read it."""

    def __init__(self, kind: str, tmp_path: Path, s3: Any = None) -> None:
        self.kind, self.s3 = kind, s3
        self.path = tmp_path / "s.zarr"
        if kind == "s3":
            self.key = f"{uuid.uuid4().hex[:8]}/s.zarr"
            self.url = f"s3://{s3.bucket(BUCKET)}/{self.key}"
            self.so: dict[str, Any] | None = s3.options()
        else:
            self.url, self.so = str(self.path), None
        xr_zstrings.to_nczarr(rows(0, BASE, "x"), self.url, mode="w-", unlimited_dims=["t"], storage_options=self.so)

    @property
    def spec_target(self) -> str:
        """The target as the pause harness takes it ("local:PATH": a LocalStore object)."""
        return f"local:{self.path}" if self.kind == "localstore" else self.url

    def spec(self, op: str, **kw: Any) -> dict[str, Any]:
        return {"op": op, "target": self.spec_target, "so": self.so, **kw}

    def zarr_store(self) -> Any:
        if self.kind != "s3":
            return str(self.path)
        from obstore.store import S3Store
        from s3_server import KEY, REGION, SECRET

        return zarr.storage.ObjectStore(S3Store(BUCKET, prefix=self.key, endpoint=self.s3.endpoint, access_key_id=KEY,
                                                secret_access_key=SECRET, region=REGION,
                                                client_options={"allow_http": True}), read_only=True)

    def read(self) -> dict[str, tuple[list[str], list[float]]]:
        """(names, values) as each reader reads them."""
        out = {}
        with xr.open_dataset(self.url, engine="zstrings", storage_options=self.so) as ds:
            out["zstrings"] = ([str(v) for v in ds["name"].values], ds["value"].values.tolist())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (zarr-python: both zarr.json and .zgroup exist)
            with xr.open_dataset(self.zarr_store(), engine="zarr") as ds:  # (v2 metadata only: NC_STRING as bytes)
                out["zarr"] = ([v.decode() if isinstance(v, bytes) else str(v) for v in ds["name"].values],
                               ds["value"].values.tolist())
        if self.kind != "s3":
            with netCDF4.Dataset(nc_url(self.path)) as nc:
                out["netCDF4"] = ([str(v) for v in nc["name"][:]], np.asarray(nc["value"][:]).tolist())
        return out

    def has_v3(self) -> bool:
        return open_store(self.url, storage_options=self.so).get_bytes("zarr.json") is not None


def expected(*parts: tuple[int, int, str]) -> tuple[list[str], list[float]]:
    """The rows the writers wrote, as ``rows`` makes them (start, n, tag), in order."""
    ds = xr.concat([rows(*p) for p in parts], dim="t")
    return [str(v) for v in ds["name"].values], ds["value"].values.tolist()


def assert_all_read(target: Target, want: tuple[list[str], list[float]]) -> None:
    for reader, got in target.read().items():
        assert len(got[0]) == len(want[0]), f"{reader} reads {len(got[0])} rows, {len(want[0])} were written"
        assert got == want, reader


@pytest.fixture(params=KINDS)
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    s3 = request.getfixturevalue("s3") if request.param == "s3" else None
    return Target(request.param, tmp_path, s3)


class LockPausedWriter(Writer):
    """A writer (this file run as a script) that stops itself at its first attempt to take a
    writer lock (Python's ``fcntl.flock`` audit event): a local-path migrate that reads the store
    before it takes the lock has read it by then."""

    def start(self) -> LockPausedWriter:
        env = {**os.environ, **{k: str(v) for k, v in self.spec.get("env", {}).items()}}
        tests = str(Path(__file__).resolve().parents[1])  # (pause_writer, peers)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (tests, env.get("PYTHONPATH", "")) if p)
        self.proc = subprocess.Popen([sys.executable, __file__, json.dumps(self.spec)], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)
        return self


# ---------------------------------------------------------------------------------------------
# Item 3: migrate and an append at once
# ---------------------------------------------------------------------------------------------


def test_migrate_while_an_append_holds_the_store(target: Target) -> None:
    """The append pauses at ``writing`` holding the claim (and, on a path, the writer lock); a
    migrate then either waits and migrates the appended store (path: the lock is waited for) or
    refuses with ConcurrentWriteError (the claim of a live writer): never v3 metadata of the store
    as it was before the append (engine="zarr" read 230 of 310 rows)."""
    append = Writer(target.spec("append", pause="writing", start=BASE, n=80, tag="a")).start().paused()
    try:
        if target.kind == "path":  # waits for the lock: paused at its first try, then let go
            mig = LockPausedWriter(target.spec("migrate", pause=None)).start().paused()
            append.resume()
            assert append.result() == {"outcome": "ok"}
            mig.resume()
            assert mig.result() == {"outcome": "ok"}
        else:
            got = run_now(target.spec("migrate"))
            assert got["outcome"] == "ConcurrentWriteError", got
            assert not target.has_v3()  # nothing was written
            append.resume()
            assert append.result() == {"outcome": "ok"}
            assert run_now(target.spec("migrate")) == {"outcome": "ok"}
    finally:
        append.kill()
    assert target.has_v3()
    assert_all_read(target, expected((0, BASE, "x"), (BASE, 80, "a")))


def test_append_while_a_migrate_holds_the_store(target: Target) -> None:
    """The migrate pauses at ``writing`` (claimed, the store read): an append on a path waits for
    it and then keeps the v3 metadata in step; elsewhere it refuses while the migrate holds the claim."""
    mig = Writer(target.spec("migrate", pause="writing")).start().paused()
    try:
        if target.kind == "path":
            app = LockPausedWriter(target.spec("append", pause=None, start=BASE, n=80, tag="a")).start().paused()
            mig.resume()
            assert mig.result() == {"outcome": "ok"}
            app.resume()
            assert app.result() == {"outcome": "ok"}
        else:
            got = run_now(target.spec("append", start=BASE, n=80, tag="a"))
            assert got["outcome"] == "ConcurrentWriteError", got
            mig.resume()
            assert mig.result() == {"outcome": "ok"}
            assert run_now(target.spec("append", start=BASE, n=80, tag="a")) == {"outcome": "ok"}
    finally:
        mig.kill()
    assert_all_read(target, expected((0, BASE, "x"), (BASE, 80, "a")))


def test_append_after_migrate_keeps_v3_in_step(target: Target) -> None:
    """An append (and added variables) to a store migrated in place write its v3 metadata again:
    engine="zarr" reads what engine="zstrings" and netcdf-c read (it read the store as migrated)."""
    assert run_now(target.spec("migrate")) == {"outcome": "ok"}
    assert run_now(target.spec("append", start=BASE, n=80, tag="a")) == {"outcome": "ok"}
    assert run_now(target.spec("append", start=BASE + 80, n=15, tag="b")) == {"outcome": "ok"}
    assert_all_read(target, expected((0, BASE, "x"), (BASE, 80, "a"), (BASE + 80, 15, "b")))
    xr_zstrings.to_nczarr(xr.Dataset({"extra": ("e", np.arange(3))}), target.url, mode="a", storage_options=target.so)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with xr.open_dataset(target.zarr_store(), engine="zarr") as ds:
            assert ds["extra"].values.tolist() == [0, 1, 2]


# ---------------------------------------------------------------------------------------------
# check and repair: v3 metadata out of step, an interrupted migrate
# ---------------------------------------------------------------------------------------------


def _check(capsys: pytest.CaptureFixture[str], target: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(["check", target])
    return rc, capsys.readouterr().out


def test_check_names_stale_v3_metadata(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """v3 metadata that describe another version than the v2 metadata (as another tool's v2 append
    leaves them: the zarr.json objects of before it) are a PROBLEM of ``check``; ``repair`` writes
    them again from the v2 metadata."""
    t = Target("path", tmp_path)
    xr_zstrings.migrate(t.url)
    before = {p: p.read_bytes() for p in t.path.rglob("zarr.json")}
    xr_zstrings.to_nczarr(rows(BASE, 80, "a"), t.url, mode="a", append_dim="t")
    for p, raw in before.items():  # the v3 metadata as the v2 append found them
        p.write_bytes(raw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with xr.open_dataset(t.url, engine="zarr") as ds:
            assert ds.sizes["t"] == BASE  # the disagreement check must name
    rc, out = _check(capsys, t.url)
    assert rc != 0 and "PROBLEM /name" in out and "disagree with the v2 metadata" in out, out
    assert "[230]" in out and "[310]" in out, out
    report = xr_zstrings.repair(t.url)
    assert report.changed and "v3 metadata" in report.action, report
    assert_all_read(t, expected((0, BASE, "x"), (BASE, 80, "a")))
    rc, out = _check(capsys, t.url)
    assert "disagree" not in out, out


def test_repairs_v3_step_on_a_store_never_migrated_asks_only_for_the_root_zarr_json(tmp_path: Path) -> None:
    """``repair`` ends by bringing the v3 metadata of a store migrated in place in step; on a store
    never migrated that step asks for the root ``zarr.json`` and stops (before: it read the whole tree
    again first, 9 requests more of a 2-variable store). Counted by a zarr-python ``WrapperStore``
    under repair: what it asked beyond the requests of the caller's ``ZStore`` is the step's."""
    from zarr.storage import LocalStore, WrapperStore

    from xr_zstrings.io.zstore import ZStore

    asked: list[str] = []

    class Counting(WrapperStore[LocalStore]):
        async def get(self, key: str, *a: Any, **kw: Any) -> Any:
            asked.append(key)
            return await self._store.get(key, *a, **kw)

        async def exists(self, key: str) -> bool:
            asked.append(key)
            return await self._store.exists(key)

        async def list_dir(self, prefix: str) -> Any:
            asked.append(f"{prefix}/ (listed)")
            async for name in self._store.list_dir(prefix):
                yield name

    t = Target("path", tmp_path)
    zs = ZStore(Counting(LocalStore(t.path)), display=str(t.path))
    report = xr_zstrings.repair(zs)
    assert not report.changed, report
    assert len(asked) - zs.requests <= 1, (len(asked), zs.requests, asked)
    assert "zarr.json" in asked


def test_killed_migrate_is_named_and_repaired(target: Target, capsys: pytest.CaptureFixture[str]) -> None:
    """A migrate killed (SIGKILL) while it writes the v3 metadata leaves its journal: ``check`` names
    an interrupted migration, ``repair`` rolls it back (the v3 metadata removed: every reader reads
    the v2 metadata), and a migrate after that migrates the store."""
    assert run_now(target.spec("migrate")) == {"outcome": "ok"}  # v3 metadata there before
    assert run_now(target.spec("append", start=BASE, n=20, tag="a")) == {"outcome": "ok"}
    mig = Writer(target.spec("migrate", pause="writing")).start().paused()
    mig.kill()
    zs = open_store(target.url, storage_options=target.so)
    assert zs.get_bytes(JOURNAL) is not None
    state, action = inspect_store(zs).describe()
    assert "migration in place" in state and "ended" in state and "roll back" in action, (state, action)
    if target.kind != "s3":
        _, out = _check(capsys, target.url)
        assert "migration in place" in out and "roll back" in out, out
    report = xr_zstrings.repair(target.url, storage_options=target.so)
    assert report.changed, report
    assert zs.get_bytes(JOURNAL) is None
    want = expected((0, BASE, "x"), (BASE, 20, "a"))
    assert_all_read(target, want)
    assert run_now(target.spec("migrate")) == {"outcome": "ok"}
    assert target.has_v3()
    assert_all_read(target, want)


# ---------------------------------------------------------------------------------------------
# Item 10: a lazy reader of another tool's v2 store goes on reading after an in-place migrate
# ---------------------------------------------------------------------------------------------


def _xarray_store(path: Path, start: int, tag: str) -> xr.Dataset:
    ds = rows(start, 40, tag)
    ds["name"] = ds["name"].astype(object)
    ds.to_zarr(path, mode="w", zarr_format=2, consolidated=True)
    return ds


def test_lazy_reader_keeps_reading_after_migrate(tmp_path: Path) -> None:
    """The migrate changes nothing a v2 reader reads (zarr.json beside .zgroup): the lazy reader of
    an xarray-written pure Zarr v2 store reads its values; a replacement (xarray's mode="w") is
    still refused."""
    p = tmp_path / "x.zarr"
    src = _xarray_store(p, 0, "x")
    lazy = xr.open_dataset(p, engine="zstrings")
    xr_zstrings.migrate(p, missing="values")
    assert [str(v) for v in lazy["name"].values] == [str(v) for v in src["name"].values]
    assert lazy["value"].values.tolist() == src["value"].values.tolist()
    lazy2 = xr.open_dataset(p, engine="zstrings")
    _xarray_store(p, 100, "b")
    with pytest.raises(StoreReplacedError):
        lazy2["value"].load()


if __name__ == "__main__":  # LockPausedWriter's child: stop at the first writer-lock attempt, then run
    from pause_writer import run

    def _hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "fcntl.flock" and not getattr(_hook, "done", False):
            _hook.done = True  # type: ignore[attr-defined]
            os.kill(os.getpid(), signal.SIGSTOP)

    sys.addaudithook(_hook)
    print(json.dumps(run(json.loads(sys.argv[1]))), flush=True)


def test_append_after_migrate_is_committed_when_the_v3_metadata_cannot_be_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fills while an append to a store migrated in place writes its v3 metadata again
    (after the append committed): the append returns with a warning naming the fix, and its rows are
    read (before: a raw OSError, so a caller retrying the append would have written its rows twice)."""
    import errno

    from xr_zstrings.write import migrate as migrate_module

    path = tmp_path / "s.zarr"
    xr_zstrings.to_nczarr(rows(0, BASE, "x"), path, unlimited_dims=["t"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        xr_zstrings.migrate(path)

    def full(p: Path, data: bytes) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(p))

    monkeypatch.setattr(migrate_module, "_replace", full)
    with pytest.warns(UserWarning, match="zstrings repair"):
        xr_zstrings.to_nczarr(rows(BASE, 80, "a"), path, mode="a", append_dim="t")
    monkeypatch.undo()
    want = expected((0, BASE, "x"), (BASE, 80, "a"))
    with xr.open_dataset(path, engine="zstrings") as ds:
        assert ([str(v) for v in ds["name"].values], ds["value"].values.tolist()) == want
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with xr.open_dataset(path, engine="zarr") as ds:  # (its v3 metadata rolled back: read as v2)
            got = [v.decode() if isinstance(v, bytes) else str(v) for v in ds["name"].values.tolist()]
            assert (got, ds["value"].values.tolist()) == want


def test_a_migrate_taken_over_before_its_root_leaves_the_takers_store_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An in-place migrate through a ``LocalStore`` object (the journal claim only) stalls past its
    lease after its arrays' zarr.json, before its root zarr.json; repair takes the store over and rolls it back,
    then an append commits. The migrate then refuses (``ConcurrentWriteError``) and writes no root
    zarr.json: engine="zarr" reads the append (before: its root zarr.json, written as a file
    without the claim's fence, described the store without the append)."""
    import time

    from zarr.storage import LocalStore

    from xr_zstrings.io.commit import Transaction
    from xr_zstrings.io.zstore import ZStore

    path = tmp_path / "s.zarr"
    xr_zstrings.to_nczarr(rows(0, BASE, "x"), path, unlimited_dims=["t"])
    monkeypatch.setenv("XR_ZSTRINGS_LOCK_TIMEOUT", "1")
    monkeypatch.setattr(Transaction, "_start_renewal", lambda self: None)  # (stalled: nothing renews its claim)
    set_many, stalled = ZStore.set_many, []

    def then_stall(self: ZStore, items: Any, **kw: Any) -> None:
        items = list(items)
        set_many(self, items, **kw)
        if not stalled and any(k.endswith("/zarr.json") for k, _ in items):  # (the arrays' v3 metadata)
            stalled.append(True)
            time.sleep(1.2)  # past the lease
            xr_zstrings.repair(LocalStore(path), force=True)
            xr_zstrings.to_nczarr(rows(BASE, 80, "a"), path, mode="a", append_dim="t")

    monkeypatch.setattr(ZStore, "set_many", then_stall)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(xr_zstrings.ConcurrentWriteError):
            xr_zstrings.migrate(LocalStore(path, read_only=False))
    monkeypatch.undo()
    want = expected((0, BASE, "x"), (BASE, 80, "a"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with xr.open_dataset(path, engine="zarr") as ds:
            got = [v.decode() if isinstance(v, bytes) else str(v) for v in ds["name"].values.tolist()]
            assert (got, ds["value"].values.tolist()) == want


def test_migrate_in_place_on_a_full_disk_names_the_fix_and_is_rolled_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fills while an in-place migrate writes its root zarr.json: our error names the store,
    the full disk and the fix (before: a bare OSError), and no v3 metadata are left: engine="zarr"
    and engine="zstrings" read the v2 store as it was."""
    import errno

    from xr_zstrings.write import migrate as migrate_module

    path = tmp_path / "s.zarr"
    xr_zstrings.to_nczarr(rows(0, BASE, "x"), path, unlimited_dims=["t"])

    def full(p: Path, data: bytes) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(p))

    monkeypatch.setattr(migrate_module, "_replace", full)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(xr_zstrings.ZStringsError, match="is full.*Free space"):
            xr_zstrings.migrate(path)
    monkeypatch.undo()
    assert not list(path.rglob("zarr.json"))
    want = expected((0, BASE, "x"))
    with xr.open_dataset(path, engine="zstrings") as ds:
        assert ([str(v) for v in ds["name"].values], ds["value"].values.tolist()) == want
