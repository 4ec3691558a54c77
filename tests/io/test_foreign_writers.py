"""Another tool's append while one of ours is under way (issue 37 item 4): xarray's
``to_zarr(mode="a", append_dim=...)`` and zarr-python take no claim, so our writer must notice their
change and never delete it: our write fails without touching it, and a rollback or repair keeps
the arrays it cannot prove its own.

Our append runs in a child process paused at a commit step (tests/pause_writer.py), or in this
process with the other tool's append run just before its commit; the other tool writes through
zarr-python's own store (a path, a ``LocalStore``, an ``ObjectStore`` on moto S3). The values are
read back through engine="zstrings", engine="zarr" and zarr-python.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr
from pause_writer import Writer, rows
from s3_server import KEY, REGION, SECRET

from xr_zstrings import repair, to_nczarr
from xr_zstrings.cli.main import main
from xr_zstrings.errors import ConcurrentWriteError
from xr_zstrings.io.commit import Transaction

#: how zarr-python refuses our placeholder root when xarray opens the store: zarr 3.4 a ValueError on
#: its "zarr_format", zarr 3.1.6 a TypeError naming its "xr_zstrings_incomplete" key
PLACEHOLDER_REFUSED = (ValueError, TypeError)
PLACEHOLDER_SAYS = "zarr_format|xr_zstrings_incomplete"
BASE, ADDED = 100, 50


@dataclass
class Target:
    """One store, as our writer (``ours``, ``so``) and zarr-python (``peer()``) open it."""

    url: str  # what engine="zstrings", repair and `zstrings check` open
    ours: str  # pause_writer's target
    so: dict[str, Any] | None
    peer: Callable[[], Any]  # a zarr-python store (or path) of it: xarray's writer, engine="zarr"

    def ours_store(self) -> Any:
        """What this process's to_nczarr writes to (a ``LocalStore`` object for "local:")."""
        if self.ours.startswith("local:"):
            return zarr.storage.LocalStore(self.ours[len("local:"):])
        return self.url


@pytest.fixture(params=["dir", "localstore", "s3"])
def target(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Target]:
    """A store of ``BASE`` rows, written by our writer; on S3, `zstrings check` reaches it through
    the ``AWS_*`` variables."""
    if request.param == "s3":
        from obstore.store import S3Store

        s3 = request.getfixturevalue("s3")
        bucket, key = s3.bucket("zstrings-foreign"), f"{uuid.uuid4().hex}.zarr"
        for name, value in (("AWS_ENDPOINT_URL", s3.endpoint), ("AWS_ACCESS_KEY_ID", KEY),
                            ("AWS_SECRET_ACCESS_KEY", SECRET), ("AWS_REGION", REGION), ("AWS_ALLOW_HTTP", "true")):
            monkeypatch.setenv(name, value)
        url = f"s3://{bucket}/{key}"
        t = Target(url, url, s3.options(), lambda: zarr.storage.ObjectStore(S3Store(
            bucket, prefix=key, endpoint=s3.endpoint, access_key_id=KEY, secret_access_key=SECRET, region=REGION,
            client_options={"allow_http": True})))
    else:
        path = str(tmp_path / "s.zarr")
        ours = f"local:{path}" if request.param == "localstore" else path
        t = Target(path, ours, None,
                   (lambda: zarr.storage.LocalStore(path)) if request.param == "localstore" else (lambda: path))
    to_nczarr(rows(0, BASE, "base"), t.url, unlimited_dims=["t"], storage_options=t.so)
    yield t


def _xarray_append(t: Target, *, consolidated: bool, n: int = ADDED) -> None:
    """xarray's own append of ``n`` rows tagged "x" (the text as the store's bytes: xarray refuses
    to append StringDType to a |S array)."""
    ds = rows(BASE, n, "x")
    ds["name"] = ("t", np.array([s.encode() for s in ds["name"].values], dtype="S24"))
    ds.to_zarr(t.peer(), mode="a", append_dim="t", zarr_format=2, consolidated=consolidated)


def _expected(tag: str, n: int = ADDED) -> list[str]:
    return [*rows(0, BASE, "base")["name"].values.tolist(), *rows(BASE, n, tag)["name"].values.tolist()]


def _text(values: Any) -> list[str]:
    return [v.decode() if isinstance(v, bytes) else str(v) for v in np.asarray(values).tolist()]


def _read_all(t: Target, *, consolidated: bool) -> dict[str, list[str]]:
    """The "name" values as engine="zstrings", engine="zarr" and zarr-python read them (the peers
    from the objects when the other tool left ``.zmetadata`` as it was)."""
    got = {"zstrings": _text(xr.open_dataset(t.url, engine="zstrings", storage_options=t.so)["name"].values)}
    with xr.open_dataset(t.peer(), engine="zarr", consolidated=consolidated) as ds:
        got["zarr"] = _text(ds["name"].values)
    g = zarr.open_group(t.peer(), mode="r", zarr_format=2, use_consolidated=consolidated)
    got["zarr-python"] = _text(g["name"][:])
    return got


def _check_names_state(t: Target, capsys: pytest.CaptureFixture[str]) -> str:
    """`zstrings check`: its state line says the store is complete, or what repair does; never a
    write of ours left under way."""
    main(["check", t.url])
    out = capsys.readouterr().out
    state = next((ln for ln in out.splitlines() if ln.startswith("state:")), "")
    assert "complete" in state or "\n    repair: " in out, out
    assert "interrupted" not in out and "under way" not in out, out
    return out


def _paused(t: Target, pause: str, n: int = ADDED) -> Writer:
    return Writer({"op": "append", "target": t.ours, "start": BASE, "n": n, "tag": "a", "pause": pause,
                   "so": t.so}).start().paused()


@pytest.mark.parametrize("consolidated", [True, False], ids=["consolidated", "unconsolidated"])
def test_an_append_paused_at_writing_keeps_xarrays_rows(target: Target, consolidated: bool,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """xarray appends while ours waits at `writing`: ours fails before it writes a chunk, naming the
    changed objects; xarray's rows stay (they were rolled away, or overwritten, before)."""
    ours = _paused(target, "writing")
    try:
        _xarray_append(target, consolidated=consolidated)
    finally:
        out = ours.resume().result()
    assert _read_all(target, consolidated=consolidated) == dict.fromkeys(("zstrings", "zarr", "zarr-python"),
                                                                         _expected("x"))
    assert out["outcome"] == "ConcurrentWriteError", out
    assert "name/.zarray" in out["message"] and "other tool's change was kept" in out["message"], out
    assert "Nothing of this write was committed" in out["message"], out
    _check_names_state(target, capsys)


@pytest.mark.parametrize("consolidated", [True, False], ids=["consolidated", "unconsolidated"])
def test_a_change_during_our_chunk_writes_fails_our_commit_and_keeps_theirs(
        target: Target, consolidated: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """xarray appends after our chunks are written, before our commit: the commit refuses before its
    metadata window, and the rollback leaves the arrays xarray grew as xarray wrote them."""
    commit = Transaction.commit

    def foreign_first(self: Transaction, *args: Any, **kw: Any) -> None:
        if self.kind == "append":
            _xarray_append(target, consolidated=consolidated)
        commit(self, *args, **kw)

    monkeypatch.setattr(Transaction, "commit", foreign_first)
    with pytest.raises(ConcurrentWriteError) as e:
        to_nczarr(rows(BASE, ADDED, "a"), target.ours_store(), mode="a", append_dim="t", storage_options=target.so)
    monkeypatch.setattr(Transaction, "commit", commit)
    assert _read_all(target, consolidated=consolidated) == dict.fromkeys(("zstrings", "zarr", "zarr-python"),
                                                                         _expected("x"))
    assert "name/.zarray" in str(e.value) and "other tool's change was kept" in str(e.value)
    _check_names_state(target, capsys)


@pytest.mark.parametrize("consolidated", [True, False], ids=["consolidated", "unconsolidated"])
def test_repair_of_a_killed_append_keeps_rows_another_tool_appended(
        target: Target, consolidated: bool, capsys: pytest.CaptureFixture[str]) -> None:
    """Ours is killed at `writing` (its journal records the append), xarray appends, then repair
    rolls ours back: the arrays xarray grew are neither removed nor rewritten, and the report says
    so (also where xarray's consolidated metadata replaced ours, which no longer names our write's
    base: before, repair refused the journal as another store's and the store stayed claimed)."""
    ours = _paused(target, "writing")
    ours.kill()
    _xarray_append(target, consolidated=consolidated)
    report = repair(target.ours_store(), storage_options=target.so, force=True)
    assert "kept as another writer or tool left them" in report.action and "name (length 150" in report.action, report
    assert _read_all(target, consolidated=consolidated) == dict.fromkeys(("zstrings", "zarr", "zarr-python"),
                                                                         _expected("x"))
    _check_names_state(target, capsys)


@pytest.mark.parametrize("n", [30, ADDED])
def test_repair_of_an_append_killed_in_its_window_keeps_an_array_another_tool_grew(
        target: Target, n: int, capsys: pytest.CaptureFixture[str]) -> None:
    """Ours is killed in its metadata window (placeholder root: xarray's writer is refused), then
    zarr-python appends rows to one array directly (no root read): repair rolls ours back but
    leaves that array, its chunks and its .zarray, as zarr-python wrote them; also when it appended
    exactly as many rows as ours (its .zarray has our length: the content ours would have had,
    recorded in the journal, tells them apart; before, repair deleted those rows as ours)."""
    ours = _paused(target, "window")
    ours.kill()
    with pytest.raises(PLACEHOLDER_REFUSED, match=PLACEHOLDER_SAYS):  # the placeholder: xarray refuses the store
        _xarray_append(target, consolidated=True)
    arr = zarr.open_array(target.peer(), path="name", mode="r+", zarr_format=2)
    arr.append(np.array([s.encode() for s in rows(BASE, n, "x")["name"].values], dtype="S24"))
    report = repair(target.ours_store(), storage_options=target.so, force=True)
    assert "kept as another writer or tool left them" in report.action and f"name (length {BASE + n}" in report.action, \
        report
    g = zarr.open_group(target.peer(), mode="r", zarr_format=2, use_consolidated=False)
    assert _text(g["name"][:]) == _expected("x", n)
    assert g["value"].shape == (BASE,)  # ours, rolled back
    np.testing.assert_array_equal(g["value"][:], rows(0, BASE, "base")["value"].values)


@pytest.mark.parametrize("n", [30, ADDED])
def test_an_array_another_tool_grows_in_our_window_fails_ours_and_is_kept(target: Target, n: int,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """zarr-python appends ``n`` rows to one array directly (no root read: the placeholder does not
    stop it) while ours waits in its metadata window: ours fails and is rolled back, that array is
    left as zarr-python wrote it, also when it grew to exactly our write's length (before: ours
    returned OK over it, its .zarray ours)."""
    ours = _paused(target, "window")
    try:
        arr = zarr.open_array(target.peer(), path="name", mode="r+", zarr_format=2)
        arr.append(np.array([s.encode() for s in rows(BASE, n, "x")["name"].values], dtype="S24"))
    finally:
        out = ours.resume().result()
    g = zarr.open_group(target.peer(), mode="r", zarr_format=2, use_consolidated=False)
    assert _text(g["name"][:]) == _expected("x", n)
    assert g["value"].shape == (BASE,)  # ours, rolled back
    np.testing.assert_array_equal(g["value"][:], rows(0, BASE, "base")["value"].values)
    assert out["outcome"] == "ConcurrentWriteError" and "name/.zarray" in out["message"], out
    _check_names_state(target, capsys)


@pytest.mark.parametrize("pause", ["window", "commit"])
def test_xarray_is_refused_while_our_append_is_in_its_window(target: Target, pause: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """From the window on, the root is our placeholder: xarray's append is refused before it writes
    anything, ours commits, and every reader reads our rows."""
    ours = _paused(target, pause)
    try:
        with pytest.raises(PLACEHOLDER_REFUSED, match=PLACEHOLDER_SAYS):
            _xarray_append(target, consolidated=True)
    finally:
        out = ours.resume().result()
    assert out == {"outcome": "ok"}
    assert _read_all(target, consolidated=True) == dict.fromkeys(("zstrings", "zarr", "zarr-python"), _expected("a"))
    assert "state: complete" in _check_names_state(target, capsys)


def test_the_next_append_after_a_killed_one_and_xarrays_keeps_every_row(target: Target) -> None:
    """Ours is killed at `writing`, xarray appends and consolidates, our next append recovers the
    killed one (keeping xarray's rows) and appends after them (before: it refused the journal as
    another store's, and the store stayed claimed until someone removed it)."""
    ours = _paused(target, "writing")
    ours.kill()
    _xarray_append(target, consolidated=True)
    to_nczarr(rows(BASE + ADDED, 20, "b"), target.ours_store(), mode="a", append_dim="t", storage_options=target.so)
    want = [*_expected("x"), *rows(BASE + ADDED, 20, "b")["name"].values.tolist()]
    assert _read_all(target, consolidated=True) == dict.fromkeys(("zstrings", "zarr", "zarr-python"), want)



#: step -> what to run when this process's writer reports it (``sys.audit``); a hook added once
_AT_STEP: dict[str, Callable[[], None]] = {}


def _at_step(event: str, args: tuple[Any, ...]) -> None:
    if event == "xr_zstrings.commit" and args and args[0] in _AT_STEP:
        _AT_STEP.pop(args[0])()


sys.addaudithook(_at_step)


@pytest.mark.parametrize("step", ["writing", "window"])
def test_an_array_our_append_only_grows_alongside_is_kept_when_another_tool_appends_to_it(
        target: Target, step: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Ours appends "value" alone ("name", on the same unlimited dimension, is grown alongside with
    fill) while zarr-python appends 60 rows to "name" directly (before our chunk writes, or in our
    metadata window): ours fails and "name" keeps all 60 (before: ours returned OK and wrote name/.zarray back
    at 150 rows, hiding 10 of them)."""
    def foreign() -> None:
        arr = zarr.open_array(target.peer(), path="name", mode="r+", zarr_format=2)
        arr.append(np.array([s.encode() for s in rows(BASE, 60, "x")["name"].values], dtype="S24"))

    _AT_STEP[step] = foreign
    try:
        with pytest.raises(ConcurrentWriteError, match="name/.zarray"):
            to_nczarr(rows(BASE, ADDED, "a")[["value"]], target.ours_store(), mode="a", append_dim="t",
                      storage_options=target.so)
    finally:
        _AT_STEP.clear()
    g = zarr.open_group(target.peer(), mode="r", zarr_format=2, use_consolidated=False)
    assert _text(g["name"][:]) == _expected("x", 60)
    assert g["value"].shape == (BASE,)  # ours, rolled back
    np.testing.assert_array_equal(g["value"][:], rows(0, BASE, "base")["value"].values)


def test_a_window_refusal_restores_only_the_root_it_wrote(tmp_path: Path) -> None:
    """Ours pauses in its metadata window (only its placeholder root written) of a store in netcdf-c
    4.9.4's layout, whose root ``.zattrs`` holds the dimensions (so the append rewrites it); another
    tool adds an attribute to that ``.zattrs`` meanwhile. Ours fails (the change is seen) and its
    rollback puts back only the root ``.zgroup`` it replaced (before, it also wrote its recorded old
    ``.zattrs`` back over the other tool's, which it had never written)."""
    path = tmp_path / "s.zarr"
    to_nczarr(rows(0, BASE, "base"), path, unlimited_dims=["t"], netcdf_c="4.9.4")
    assert "_nczarr_group" in json.loads((path / ".zattrs").read_text())  # (the layout this test needs)
    ours = _paused(Target(str(path), str(path), None, lambda: str(path)), "window")
    attrs = json.loads((path / ".zattrs").read_text())
    (path / ".zattrs").write_text(json.dumps({**attrs, "added_by": "another tool"}))
    out = ours.resume().result()
    assert out["outcome"] == "ConcurrentWriteError" and ".zattrs" in out["message"], out
    assert json.loads((path / ".zattrs").read_text()).get("added_by") == "another tool"
    assert xr.open_dataset(path, engine="zstrings")["name"].values.tolist() == rows(0, BASE, "base")["name"].values.tolist()
