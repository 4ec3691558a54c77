"""The commit protocol (xr_zstrings/io/commit.py): consolidated metadata that netcdf-c 4.10 reads and
that every writer keeps in step, readers served a whole version through a write's metadata window,
a stale ``.zmetadata`` of another tool not served, the claim (one of two writers; a dead or expired
writer's claim taken over; a stalled writer fenced out), and a server that ignores conditional
writes detected and warned about. Real stores: local directories and the moto S3 server."""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import netCDF4
import numpy as np
import obstore
import pytest
import xarray as xr
import zarr
from peers import nc_url
from s3_server import S3Server

from xr_zstrings import ConcurrentWriteError, ConditionalWriteWarning, to_nczarr
from xr_zstrings.io.atomic import incomplete_v2_group
from xr_zstrings.io.commit import JOURNAL, Transaction, consolidated_view, inspect_store
from xr_zstrings.io.store import open_store
from xr_zstrings.write.repair import repair, undo

T = np.dtypes.StringDType()
BUCKET = "zstrings-commit"


def _ds(start: int, n: int, tag: str = "a") -> xr.Dataset:
    t = np.arange(start, start + n)
    ds = xr.Dataset({"name": ("t", np.array([f"{tag}-{i}-é" for i in t], dtype=T)), "value": ("t", t * 0.5)},
                    attrs={"title": f"written {tag}"})
    for v in ds.variables.values():
        v.encoding["chunks"] = (4,)
    ds["name"].encoding["maxstrlen"] = 16
    return ds


def _metadata_objects(path: Path) -> dict[str, Any]:
    return {p.relative_to(path).as_posix(): json.loads(p.read_text()) for p in sorted(path.rglob(".z*"))
            if p.name in (".zgroup", ".zattrs", ".zarray")}


def _zmetadata(path: Path) -> dict[str, Any]:
    return json.loads((path / ".zmetadata").read_text())["metadata"]


# --- what readers are served --------------------------------------------------------------------


def test_consolidated_view_serves_whole_versions_only() -> None:
    rec = {"lineage": "L", "commit": "C1", "version": 1}
    root = {"zarr_format": 2, "xr_zstrings": rec}
    ours = {"zarr_consolidated_format": 1, "metadata": {".zgroup": root, ".zattrs": {"title": "x"}}}
    view = consolidated_view
    assert view(root, {"title": "x"}, ours, remote=False) == "use"  # in step
    assert view(root, {"title": "changed"}, ours, remote=True) == "objects"  # another tool changed .zattrs
    ahead = {**root, "xr_zstrings": {**rec, "commit": "C2", "version": 2}}
    assert view(ahead, {"title": "y"}, ours, remote=False) == "use"  # a reader racing a commit
    append = json.loads(incomplete_v2_group({**rec, "commit": "C2", "kind": "append"}))
    assert view(append, None, ours, remote=False) == "use"  # an append's window: the committed version
    replace = json.loads(incomplete_v2_group({"lineage": "L2", "commit": "C9", "version": 1, "kind": "replace"}))
    assert view(replace, None, ours, remote=False) == "objects"  # a replacement: refused
    past = json.loads(incomplete_v2_group({**rec, "kind": "new"}))  # a new store past its commit point
    assert view(past, None, ours, remote=False) == "use"  # (its root not yet written: .zmetadata is whole)
    other = {**root, "xr_zstrings": {**rec, "lineage": "M"}}
    assert view(other, {"title": "x"}, ours, remote=False) == "objects"  # replaced by another lineage
    assert view({"zarr_format": 2}, {"title": "x"}, ours, remote=False) == "objects"  # rewritten by a tool
    foreign = {"zarr_consolidated_format": 1, "metadata": {".zgroup": {"zarr_format": 2}, ".zattrs": {"a": 1}}}
    assert view({"zarr_format": 2}, {"a": 1}, foreign, remote=True) == "use"  # zarr-python's, as it agrees
    assert view({"zarr_format": 2}, {"a": 1}, foreign, remote=False) == "objects"  # locally: the objects
    assert view({"zarr_format": 2}, {"a": 2}, foreign, remote=True) == "objects"  # stale


def test_every_writer_keeps_zmetadata_in_step_and_netcdf_c_4_10_reads_it(tmp_path: Path) -> None:
    """to_nczarr writes .zmetadata (the form netcdf-c 4.10 reads in its consolidated mode and
    writes itself); appends, added variables and repair keep it equal to the objects: never stale.
    netcdf-c 4.10 reads the same through .zmetadata as through the objects, and so does zarr-python."""
    path = tmp_path / "s.zarr"
    to_nczarr(_ds(0, 6), path, unlimited_dims=["t"])
    steps = [lambda: to_nczarr(_ds(6, 5), path, mode="a", append_dim="t"),
             lambda: to_nczarr(xr.Dataset({"extra": ("t", np.arange(11, dtype="i4"))}, attrs={"more": "yes"}),
                               path, mode="a"),
             lambda: repair(path)]
    versions = []
    for step in [lambda: None, *steps]:
        step()
        assert _zmetadata(path) == _metadata_objects(path)  # every object, equal
        versions.append(_zmetadata(path)[".zgroup"]["xr_zstrings"]["version"])
        with netCDF4.Dataset(nc_url(path)) as a, netCDF4.Dataset(nc_url(path) + ",consolidated") as b:
            assert sorted(a.variables) == sorted(b.variables)
            assert a["name"][:].tolist() == b["name"][:].tolist()
            assert a.title == b.title
    assert versions == [1, 2, 3, 3]  # repair found nothing to do
    ours = xr.open_dataset(path, engine="zstrings")
    peer = xr.open_dataset(path, engine="zarr", consolidated=True)
    assert ours["name"].values.tolist() == [f"a-{i}-é" for i in range(11)]
    assert ours["extra"].values.tolist() == peer["extra"].values.tolist() == list(range(11))
    assert ours.attrs["more"] == "yes"


@pytest.fixture
def pause() -> Iterator[Any]:
    """Stop a writer thread at a step of the commit protocol (an audit event) until released."""
    gates: dict[str, tuple[threading.Event, threading.Event]] = {}
    _GATES.append(gates)

    def at(step: str) -> tuple[threading.Event, threading.Event]:
        gates[step] = (threading.Event(), threading.Event())
        return gates[step]

    yield at
    for reached, go in gates.values():
        go.set()
    _GATES.remove(gates)


_GATES: list[dict[str, tuple[threading.Event, threading.Event]]] = []


def _gate_hook(event: str, args: tuple[Any, ...]) -> None:
    if event != "xr_zstrings.commit":
        return
    for gates in _GATES:
        gate = gates.pop(args[0], None)
        if gate is not None:
            gate[0].set()
            gate[1].wait(60)


sys.addaudithook(_gate_hook)


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_readers_are_served_a_whole_version_through_an_append(kind: str, tmp_path: Path, s3: S3Server,
                                                              pause: Any) -> None:
    """An append stopped at each step of its commit: engine="zstrings" (and, locally, netcdf-c 4.10
    in consolidated mode) reads the old version until the commit point and the new one after it,
    never refused, never a mix; a per-object reader (netcdf-c's default mode) is refused inside the
    metadata window only. (Before: every read during an S3 append was refused.)"""
    if kind == "s3":
        target: Any = f"s3://{s3.bucket(BUCKET)}/served-{uuid.uuid4().hex}.zarr"
        so: dict[str, Any] | None = s3.options()
    else:
        target, so = tmp_path / "s.zarr", None
    to_nczarr(_ds(0, 6), target, unlimited_dims=["t"], storage_options=so)
    old, new = [f"a-{i}-é" for i in range(6)], [f"a-{i}-é" for i in range(6)] + [f"b-{i}-é" for i in range(6, 11)]
    expected = {"claimed": old, "writing": old, "window": old, "commit": old, "committed": new}
    gates = {step: pause(step) for step in expected}
    errors: list[BaseException] = []

    def append() -> None:
        try:
            to_nczarr(_ds(6, 5, "b"), target, mode="a", append_dim="t", storage_options=so)
        except BaseException as e:  # reported below
            errors.append(e)

    writer = threading.Thread(target=append)
    writer.start()
    for step, want in expected.items():
        reached, go = gates[step]
        assert reached.wait(60), step
        got = xr.open_dataset(target, engine="zstrings", storage_options=so)["name"].values.tolist()
        assert got == want, step
        if kind == "local":
            with netCDF4.Dataset(nc_url(target) + ",consolidated") as nc:
                assert nc["name"][:].tolist() == want, step
            if step in ("window", "commit", "committed"):
                with pytest.raises(OSError, match="NCZarr error"):
                    netCDF4.Dataset(nc_url(target))
        go.set()
    writer.join(60)
    assert not errors, errors
    assert xr.open_dataset(target, engine="zstrings", storage_options=so)["name"].values.tolist() == new


def test_our_store_opens_in_one_round_of_requests_on_s3(s3: S3Server) -> None:
    """A store to_nczarr wrote opens from its root objects and .zmetadata, fetched together: one
    round of requests, whatever the number of variables (before: two per variable)."""
    url = f"s3://{s3.bucket(BUCKET)}/wide-{uuid.uuid4().hex}.zarr"
    ds = xr.Dataset({f"v{i:03d}": ("x", np.array([f"{i}-{j}" for j in range(3)], dtype=T)) for i in range(120)})
    to_nczarr(ds, url, storage_options=s3.options())
    back = xr.open_dataset(url, engine="zstrings", storage_options=s3.options())
    from xr_zstrings.read.tree_v2 import ROOT_OBJECTS

    assert back.encoding["zstrings_requests"] == len(ROOT_OBJECTS) + 2  # + zarr.json and .zmetadata
    xr.testing.assert_identical(back.load(), ds)


def test_a_stale_zmetadata_of_another_tool_is_not_served(s3: S3Server, tmp_path: Path) -> None:
    """A .zmetadata that no longer agrees with the store (another tool added a variable without
    re-consolidating; or changed the root attributes of our store) is not served: the objects are
    read, where xarray's engine="zarr" serves the stale copy. ``zstrings check`` says so of ours, and
    ``repair`` re-consolidates it; then it is served again (one round of requests)."""
    bucket = s3.bucket(BUCKET)
    store = s3.obstore(bucket)
    ds = _ds(0, 6)
    ds.to_zarr(tmp_path / "x.zarr", zarr_format=2, consolidated=True)
    xr.Dataset({"later": ("t", np.arange(6.0))}).to_zarr(tmp_path / "x.zarr", mode="a", consolidated=False)
    x_url = s3.upload(tmp_path / "x.zarr", bucket, f"stale-x-{uuid.uuid4().hex}.zarr")
    got = xr.open_dataset(x_url, engine="zstrings", storage_options=s3.options())
    assert got["later"].values.tolist() == list(np.arange(6.0))
    peer = xr.open_dataset(tmp_path / "x.zarr", engine="zarr", consolidated=True)
    assert "later" not in peer  # what the stale copy says
    # ours: another tool changes the root attributes and leaves .zmetadata as it was
    ours_url = f"s3://{bucket}/stale-ours-{uuid.uuid4().hex}.zarr"
    to_nczarr(ds, ours_url, storage_options=s3.options())
    key = ours_url.split(f"s3://{bucket}/", 1)[1] + "/.zattrs"
    attrs = json.loads(bytes(obstore.get(store, key).bytes()))
    attrs["title"] = "changed by another tool"
    obstore.put(store, key, json.dumps(attrs).encode())
    got = xr.open_dataset(ours_url, engine="zstrings", storage_options=s3.options())
    assert got.attrs["title"] == "changed by another tool"
    assert got["name"].values.tolist() == ds["name"].values.tolist()
    state, action = inspect_store(open_store(ours_url, storage_options=s3.options())).describe()
    assert "stale" in state and "re-consolidate" in action, (state, action)
    report = repair(ours_url, storage_options=s3.options())
    assert report.changed and "rewrote .zmetadata" in report.action
    back = xr.open_dataset(ours_url, engine="zstrings", storage_options=s3.options())
    assert back.attrs["title"] == "changed by another tool"
    from xr_zstrings.read.tree_v2 import ROOT_OBJECTS

    assert back.encoding["zstrings_requests"] == len(ROOT_OBJECTS) + 2  # served from .zmetadata again


# --- the claim ----------------------------------------------------------------------------------


def test_the_second_writer_is_refused_before_it_writes(s3: S3Server) -> None:
    """While a write holds the store (its journal), another is refused with ConcurrentWriteError
    naming the store, the writer and what to do, and changes nothing."""
    url = f"s3://{s3.bucket(BUCKET)}/claimed-{uuid.uuid4().hex}.zarr"
    so = s3.options()
    to_nczarr(_ds(0, 6), url, unlimited_dims=["t"], storage_options=so)
    zs = open_store(url, mode="a", storage_options=so)
    before = sorted(m["path"] for b in obstore.list(s3.obstore(BUCKET), prefix=url.split("/", 3)[3]) for m in b)
    with Transaction.begin(zs, "append", undo=undo) as held:
        with pytest.raises(ConcurrentWriteError, match=r"another writer \(process \d+ on .*is writing it.*repair"):
            to_nczarr(_ds(6, 2), url, mode="a", append_dim="t", storage_options=so)
        held.abort()
    after = sorted(m["path"] for b in obstore.list(s3.obstore(BUCKET), prefix=url.split("/", 3)[3]) for m in b)
    assert after == before
    assert xr.open_dataset(url, engine="zstrings", storage_options=so)["value"].size == 6


def test_a_writer_whose_claim_was_taken_over_does_not_commit(s3: S3Server) -> None:
    """A writer that stalled past its lease and was taken over finds out before its commit point
    (ConcurrentWriteError) and commits nothing; readers keep the committed version."""
    url = f"s3://{s3.bucket(BUCKET)}/fenced-{uuid.uuid4().hex}.zarr"
    so = s3.options()
    to_nczarr(_ds(0, 6), url, unlimited_dims=["t"], storage_options=so)
    zs = open_store(url, mode="a", storage_options=so)
    txn = Transaction.begin(zs, "add", undo=undo)
    txn.set_base({k: v for k, v in inspect_store(zs).consolidated.items()}, consolidated_in_step=True)
    obstore.put(s3.obstore(BUCKET), url.split("/", 3)[3] + "/" + JOURNAL, b'{"taken": "over"}')
    with pytest.raises(ConcurrentWriteError, match="taken over"):
        txn.commit({".zattrs": {"title": "never"}})
    txn._stop.set()
    obstore.delete(s3.obstore(BUCKET), url.split("/", 3)[3] + "/" + JOURNAL)
    assert xr.open_dataset(url, engine="zstrings", storage_options=so).attrs["title"] == "written a"


@pytest.mark.parametrize(("writer", "kind"), [("append", "local"), ("append", "s3"), ("v3-replace", "s3")])
def test_a_writer_stalled_past_its_lease_writes_no_chunk_after_the_takeover(
        writer: str, kind: str, tmp_path: Path, s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """Writer A (a child process, stall_writer.py) stops itself with SIGSTOP between two batches of
    its chunk writes, renewal thread and all; B takes the store over once A's lease ran out, undoes
    A's write, writes the same chunk keys (an append at the same length; a replacement) and
    commits; then A continues. A raises ConcurrentWriteError before its next chunk batch (the fence
    before every batch), so B's values read back exactly, by us and by a peer (netcdf-c; zarr-python
    for Zarr v3). (Before: A wrote its remaining chunks over B's committed ones and failed at its
    commit, or with Zarr v3 did not fail at all: B's write was torn.) Stores: a zarr-python
    LocalStore object, which has no writer lock, and the moto S3 server."""
    import os
    import signal
    import subprocess

    from stall_writer import NEW, OLD, stall_dataset

    from xr_zstrings import to_zarr_v3

    monkeypatch.setenv("XR_ZSTRINGS_LOCK_TIMEOUT", "2")
    path, prefix = tmp_path / "s.zarr", f"stalled-{uuid.uuid4().hex}.zarr"
    so: dict[str, Any] | None = s3.options() if kind == "s3" else None
    url = f"s3://{s3.bucket(BUCKET)}/{prefix}"

    def target() -> Any:  # a fresh LocalStore object for each write, as separate runs would have
        return url if kind == "s3" else zarr.storage.LocalStore(path, read_only=False)

    if writer == "append":
        to_nczarr(stall_dataset("old", 0, OLD), target(), unlimited_dims=["t"], storage_options=so)
        write_b = lambda: to_nczarr(stall_dataset("b"), target(), mode="a", append_dim="t", storage_options=so)
        want = xr.concat([stall_dataset("old", 0, OLD), stall_dataset("b")], dim="t")
    else:
        to_zarr_v3(stall_dataset("old", 0, OLD), target(), storage_options=so)
        write_b = lambda: to_zarr_v3(stall_dataset("b", 0, OLD + NEW), target(), mode="w", storage_options=so)
        want = stall_dataset("b", 0, OLD + NEW)
    child = subprocess.Popen([sys.executable, str(Path(__file__).with_name("stall_writer.py")), writer,
                              url if kind == "s3" else f"local:{path}", json.dumps(so)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, status = os.waitpid(child.pid, os.WUNTRACED)  # A stopped itself after its first chunk batch
        assert os.WIFSTOPPED(status), child.stderr.read() if child.stderr else status
        deadline = time.monotonic() + 60
        while True:  # B: refused while A's claim holds, then takes it over (A's pid lives: only the lease)
            try:
                write_b()
                break
            except ConcurrentWriteError as e:
                if "another writer" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.25)
    finally:
        os.kill(child.pid, signal.SIGCONT)
        out, err = child.communicate(timeout=120)
    ended = json.loads(out.strip().splitlines()[-1]) if out.strip() else {"outcome": err}
    assert ended["outcome"].startswith("ConcurrentWriteError") and "taken over" in ended["outcome"], ended
    assert ended["batches_after_stall"] == 0  # not one chunk batch of A's after it resumed
    back = xr.open_dataset(target(), engine="zstrings", storage_options=so)
    assert back["name"].values.tolist() == want["name"].values.tolist()
    assert back["value"].values.tolist() == want["value"].values.tolist()
    local = path if kind == "local" else s3.download(BUCKET, prefix, tmp_path / "copy.zarr")
    if writer == "append":
        with netCDF4.Dataset(nc_url(local)) as nc:  # netcdf-c reads the same: B's batch, whole
            assert nc["name"][:].tolist() == want["name"].values.tolist()
            assert nc["value"][:].tolist() == want["value"].values.tolist()
    else:
        peer = zarr.open_group(local, mode="r")
        assert peer["name"][:].tolist() == want["name"].values.tolist()
        assert peer["value"][:].tolist() == want["value"].values.tolist()


def test_a_running_writer_of_a_localstore_object_keeps_its_claim(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A zarr-python LocalStore object has no writer lock: its claim is renewed like any store's, so a
    second writer is refused while the first one runs longer than the lease, instead of taking a
    live writer's store over. (Before: the claim was never renewed there; after the lease the second
    writer took over.)"""
    from stall_writer import OLD, stall_dataset

    monkeypatch.setenv("XR_ZSTRINGS_LOCK_TIMEOUT", "2")
    path = tmp_path / "s.zarr"
    to_nczarr(stall_dataset("old", 0, OLD), zarr.storage.LocalStore(path, read_only=False), unlimited_dims=["t"])
    zs = open_store(zarr.storage.LocalStore(path, read_only=False), mode="a")
    with Transaction.begin(zs, "append", undo=undo) as held:
        time.sleep(3)  # longer than the lease (not a timing assertion: the claim is renewed meanwhile)
        with pytest.raises(ConcurrentWriteError, match="another writer"):
            to_nczarr(stall_dataset("b"), zarr.storage.LocalStore(path, read_only=False), mode="a", append_dim="t")
        held.abort()
    assert xr.open_dataset(path, engine="zstrings")["name"].values.tolist() == \
        stall_dataset("old", 0, OLD)["name"].values.tolist()


def test_the_fence_costs_an_append_that_does_not_stall_no_request(s3: S3Server,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """An append of many chunk batches checks the claim before each batch and pays no request for
    it: the claim, written at the start and renewed by its thread, is never older than half the
    lease (the default, 600 s) when a batch starts."""
    from stall_writer import OLD, stall_dataset

    from xr_zstrings.write import chunks

    url, so = f"s3://{s3.bucket(BUCKET)}/fence-cost-{uuid.uuid4().hex}.zarr", s3.options()
    to_nczarr(stall_dataset("old", 0, OLD), url, unlimited_dims=["t"], storage_options=so)
    calls = {"_fence": 0, "_confirm": 0}
    for name in calls:
        method = getattr(Transaction, name)

        def counted(self: Transaction, _m: Any = method, _n: str = name) -> None:
            calls[_n] += 1
            _m(self)

        monkeypatch.setattr(Transaction, name, counted)
    monkeypatch.setattr(chunks, "_BATCH_BYTES", 1)  # one chunk a batch
    to_nczarr(stall_dataset("b"), url, mode="a", append_dim="t", storage_options=so)
    assert calls["_fence"] >= 2 * 3  # every batch: 3 new chunks of each of 2 variables (and the metadata)
    assert calls["_confirm"] == 0
    assert xr.open_dataset(url, engine="zstrings", storage_options=so)["name"].values.tolist()[OLD:] == \
        stall_dataset("b")["name"].values.tolist()


def test_an_expired_claim_of_a_writer_elsewhere_is_taken_over(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """A journal left by a writer on another machine (which cannot be asked whether it runs) holds
    the store until its claim is older than XR_ZSTRINGS_LOCK_TIMEOUT: until then writers and repair
    are refused (repair goes ahead with force=True); after it, the next writer recovers the store."""
    url = f"s3://{s3.bucket(BUCKET)}/expired-{uuid.uuid4().hex}.zarr"
    so = s3.options()
    to_nczarr(_ds(0, 6), url, unlimited_dims=["t"], storage_options=so)
    zs = open_store(url, mode="a", storage_options=so)
    txn = Transaction.begin(zs, "append", undo=undo)
    txn._stop.set()  # no renewal: as a writer that stopped
    raw = json.loads(bytes(obstore.get(s3.obstore(BUCKET), url.split("/", 3)[3] + "/" + JOURNAL).bytes()))
    raw["writer"].update(host="elsewhere.example", pid=1)
    obstore.put(s3.obstore(BUCKET), url.split("/", 3)[3] + "/" + JOURNAL, json.dumps(raw).encode())
    monkeypatch.setenv("XR_ZSTRINGS_LOCK_TIMEOUT", "2")
    with pytest.raises(ConcurrentWriteError, match="elsewhere.example"):
        to_nczarr(_ds(6, 2), url, mode="a", append_dim="t", storage_options=so)
    with pytest.raises(ConcurrentWriteError, match="force=True"):
        repair(url, storage_options=so)
    # the claim expires: its Last-Modified (whole seconds) is read as a second older than it shows,
    # so after the lease and that second (not a timing assertion: any later moment would do)
    time.sleep(3.5)
    to_nczarr(_ds(6, 2), url, mode="a", append_dim="t", storage_options=so)
    assert xr.open_dataset(url, engine="zstrings", storage_options=so)["value"].values.tolist() == \
        (np.arange(8) * 0.5).tolist()


def test_a_server_ignoring_conditional_writes_is_detected_and_warned(s3: S3Server) -> None:
    """Behind a proxy that drops If-None-Match / If-Match (an S3 service without conditional
    writes), the first write to the server warns once (ConditionalWriteWarning) and writes still
    work, a held claim still refuses a second writer (read, then write: racy, documented)."""
    from conditional_proxy import ConditionalStripProxy

    proxy = ConditionalStripProxy(s3.host).start()
    try:
        so = s3.options(endpoint_url=proxy.endpoint)
        url = f"s3://{s3.bucket(BUCKET)}/plain-{uuid.uuid4().hex}.zarr"
        with pytest.warns(ConditionalWriteWarning, match="ignores conditional writes"):
            to_nczarr(_ds(0, 6), url, unlimited_dims=["t"], storage_options=so)
        assert proxy.stripped >= 2  # the probe's create-only and If-Match writes reached it stripped
        to_nczarr(_ds(6, 2), url, mode="a", append_dim="t", storage_options=so)
        zs = open_store(url, mode="a", storage_options=so)
        with Transaction.begin(zs, "append", undo=undo) as held:
            with pytest.raises(ConcurrentWriteError):
                to_nczarr(_ds(8, 2), url, mode="a", append_dim="t", storage_options=so)
            held.abort()
        assert xr.open_dataset(url, engine="zstrings", storage_options=so)["value"].size == 8
    finally:
        proxy.stop()
    # the real server honours them: no warning there
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", ConditionalWriteWarning)
        to_nczarr(_ds(0, 2), f"s3://{BUCKET}/honoured-{uuid.uuid4().hex}.zarr", storage_options=s3.options())
