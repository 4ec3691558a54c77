"""Kill every writer (SIGKILL, a real process) and read what it left; then repair it and write again.

For every writer x target kind (local directory, zip file, netCDF file) the writer runs in a process
forked by ``kill_writer.py`` and is killed at its k-th write operation (file write, rename, link,
delete); on S3 (the moto server) every writer is killed at *every* PUT or DELETE it makes, one run
per kill point (a small dataset keeps that to a few dozen kills per writer). After each kill the
target must read, with engine="zstrings", as the complete new data or the complete old data (appends
and added variables: always; the old data must survive every kill), or be refused with
"incomplete"/"not found" (only a new store or a replacement) -- never a store that opens with
missing variables, stand-in dtypes or fill values. Then ``repair`` must leave a store every reader
reads the same way (the version readers were served, or an empty target after an interrupted
replacement), and the next write must succeed with the right values. netcdf-c (netCDF4, in a
subprocess: a crash fails the test and names the state) reads every local state twice: per object
(refused inside an append's metadata window, otherwise what we read) and in its consolidated mode
(always what we read); zarr-python (Zarr v3) reads every state too.

Local kill points are drawn from ``random.Random(ZSTRINGS_KILL_SEED)`` (default 15); the write's last
operation (the commit) is always one of them. A failure names the seed and the kill point:
``ZSTRINGS_KILL_SEED=<seed> pytest tests/write/test_kill.py -k <id>`` replays it.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import xarray as xr
from kill_writer import N, appended, dataset
from peers import nc_url
from s3_server import S3Server, start_server

from xr_zstrings import IncompleteStoreError, StoreNotFoundError
from xr_zstrings.io.commit import JOURNAL
from xr_zstrings.write.nczarr import to_nczarr
from xr_zstrings.write.repair import repair
from xr_zstrings.write.zarr3 import to_zarr_v3

SEED = int(os.environ.get("ZSTRINGS_KILL_SEED", "15"))
KILLS = int(os.environ.get("ZSTRINGS_KILLS", "3"))  # per writer x target, the commit point included
BUCKET = "zstrings-kill"
VARS = ("name", "code", "value", "count")


class ForkServer:
    """``kill_writer.py`` running as a fork server: ``run`` forks one writer and reports how it ended."""

    def __init__(self) -> None:
        here = Path(__file__).parent
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here), os.environ.get("PYTHONPATH", "")])}
        self.proc = subprocess.Popen([sys.executable, "-u", str(here / "kill_writer.py")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env)

    def run(self, **cmd: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the fork server died (exit {self.proc.poll()})"
        return json.loads(line)

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def forks() -> Iterator[ForkServer]:
    server = ForkServer()
    yield server
    server.close()


def _plain(ds: xr.Dataset) -> dict[str, Any]:
    return {"vars": {v: ds[v].values.tolist() for v in sorted(ds.data_vars) if v in VARS},
            "title": ds.attrs.get("title")}


def _strings_as_objects(ds: xr.Dataset) -> xr.Dataset:
    return ds.map(lambda v: v.astype(object) if v.dtype.kind in "TU" else v)


# --- what each writer may leave: (new, old) datasets; old is None for a fresh target ----------

def _expected(writer: str, n: int = N, small: bool = False) -> tuple[xr.Dataset, xr.Dataset | None]:
    name = writer.split(":")[0]
    if name in ("nczarr_new", "nczarr_zlib_new", "v3_new", "convert_nc", "convert_store"):
        return dataset(2, n, small), None
    if name in ("nczarr_replace", "v3_replace"):
        return dataset(2, n, small), dataset(1, n, small)
    if name in ("nczarr_append", "v3_append"):
        return appended(n, small), dataset(1, n, small)
    if name == "nczarr_addvars":
        return dataset(1, n, small), dataset(1, n, small).drop_vars(["code", "count"] if not small else ["value"])
    raise AssertionError(writer)


def _prepare_old(writer: str, target: Any, so: dict[str, Any] | None, n: int = N, small: bool = False) -> None:
    """Write the store the writer replaces or extends (nothing for a fresh target)."""
    name, _, layout = writer.partition(":")
    kw: dict[str, Any] = {"storage_options": so} if so else {}
    old = _expected(writer, n, small)[1]
    if old is None:
        return
    if name == "nczarr_append":
        to_nczarr(old, target, unlimited_dims=["obs"], **kw)
    elif name.startswith("v3"):
        to_zarr_v3(old, target, layout=layout, **kw)  # type: ignore[arg-type]  # a layout name from parametrize
    else:
        to_nczarr(old, target, **kw)


# --- reading a state ---------------------------------------------------------------------------

def _ours(target: str, so: dict[str, Any] | None) -> tuple[str, Any]:
    """("data", plain) or ("refused", message): only "incomplete" or "not found" count as a refusal."""
    kw: dict[str, Any] = {"storage_options": so} if so else {}
    try:
        with xr.open_dataset(target, engine="zstrings", **kw) as ds:
            return "data", _plain(ds.load())
    except (IncompleteStoreError, StoreNotFoundError) as e:
        return "refused", f"{type(e).__name__}: {e}"
    except Exception as e:  # any other error is not the clear "incomplete" we promise
        return "error", f"{type(e).__name__}: {e}"


def _netcdf4_file(path: Path) -> tuple[str, Any]:
    if not path.exists():
        return "refused", "no file"
    with xr.open_dataset(path, engine="netcdf4") as ds:
        return "data", _plain(ds.load())


def _zarr_python(target: str, kind: str, s3: S3Server | None) -> tuple[str, Any]:
    """xarray's own zarr engine (zarr-python) on a directory, a zip (zarr's ZipStore) or S3
    (zarr's ObjectStore): data, or refused with any error."""
    import zarr

    try:
        if kind == "zip":
            store: Any = zarr.storage.ZipStore(target, mode="r")
        elif kind == "s3":
            from obstore.store import S3Store

            assert s3 is not None
            obj = S3Store(BUCKET, prefix=target.split(f"s3://{BUCKET}/", 1)[1], endpoint=s3.endpoint,
                          access_key_id="testing", secret_access_key="testing", region="us-east-1",
                          client_options={"allow_http": True})
            store = zarr.storage.ObjectStore(obj, read_only=True)
        else:
            store = target
        with xr.open_dataset(store, engine="zarr", consolidated=None) as ds:
            return "data", _plain(ds.load())
    except Exception as e:  # zarr-python refuses the non-vlen-utf8 layouts and incomplete stores
        return "refused", f"{type(e).__name__}: {e}"


_NETCDF_C_READER = rf"""
import json, sys, netCDF4
for line in sys.stdin:
    i, url = json.loads(line)
    print(json.dumps(["start", i]), flush=True)
    try:
        d = netCDF4.Dataset(url, "r")
        out = {{"vars": {{}}, "title": getattr(d, "title", None)}}
        for v in sorted(d.variables):
            if v in {VARS!r}:
                x = d.variables[v]
                x.set_auto_mask(False)
                out["vars"][v] = x[:].tolist()
        d.close()
        print(json.dumps(["data", i, out]), flush=True)
    except Exception as e:
        print(json.dumps(["refused", i, f"{{type(e).__name__}}: {{e}}"]), flush=True)
"""


def _netcdf_c(paths: list[Path], consolidated: bool = False) -> list[tuple[str, Any]]:
    """netcdf-c's reading of each state, in one subprocess (netcdf-c may crash on a bad store: the
    crash fails the test and names the state); ``consolidated``: netcdf-c 4.10's consolidated mode
    (``#mode=nczarr,file,consolidated``: metadata from ``.zmetadata``)."""
    if not paths:
        return []
    feed = "".join(json.dumps([i, nc_url(p) + (",consolidated" if consolidated else "")]) + "\n"
                   for i, p in enumerate(paths))
    r = subprocess.run([sys.executable, "-c", _NETCDF_C_READER], input=feed, capture_output=True, text=True,
                       timeout=300)
    results: dict[int, tuple[str, Any]] = {}
    started = None
    for line in r.stdout.splitlines():
        msg = json.loads(line)
        if msg[0] == "start":
            started = msg[1]
        else:
            results[msg[1]] = (msg[0], msg[2])
    assert r.returncode == 0, (f"netcdf-c crashed (exit {r.returncode}) reading state {started}: "
                               f"{paths[started] if started is not None else '?'}\n{r.stderr[-2000:]}")
    return [results[i] for i in range(len(paths))]


# --- the harness ---------------------------------------------------------------------------------

def _kill_points(total: int, rng: random.Random) -> list[int]:
    picks = rng.sample(range(1, total), min(KILLS - 1, total - 1)) if total > 1 else []
    return sorted({*picks, total})


def _allowed(writer: str, n: int = N, small: bool = False) -> dict[str, Any]:
    new, old = _expected(writer, n, small)
    allowed = {"new": _plain(_strings_as_objects(new))}
    if old is not None:
        allowed["old"] = _plain(_strings_as_objects(old))
    return allowed


def _same(got: Any, want: Any) -> bool:
    def norm(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: norm(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [norm(v) for v in x]
        if isinstance(x, bytes):
            return x.decode()
        return x

    return norm(got) == norm(want)


def _judge(label: str, state: tuple[str, Any], allowed: dict[str, Any], may_refuse: bool, where: str) -> str:
    status, body = state
    if status == "data":
        for name, want in allowed.items():
            if _same(body, want):
                return name
        raise AssertionError(f"{where}: {label} opens a store that is neither the new nor the old data: "
                             f"{str(body)[:600]}")
    if status == "refused" and may_refuse:
        return "refused"
    raise AssertionError(f"{where}: {label} gave {status}: {str(body)[:600]}"
                         + ("" if may_refuse else " (the old data must survive this kill)"))


def _in_place(writer: str) -> bool:
    """Appends and added variables change the store in place (journal, metadata window)."""
    return writer.split(":")[0] in ("nczarr_append", "nczarr_addvars", "v3_append")


CASES = [
    # (writer, target kind); S3: test_killed_at_every_put_on_s3
    *[(w, "dir") for w in ("nczarr_new", "nczarr_zlib_new", "nczarr_replace", "nczarr_append",
                           "nczarr_addvars", "v3_new:vlen-utf8", "v3_new:zarrs.vlen", "v3_new:arrow",
                           "v3_new:arrow-large", "v3_replace:vlen-utf8", "v3_append:vlen-utf8", "v3_append:zarrs.vlen",
                           "convert_nc")],
    *[(w, "zip") for w in ("nczarr_new", "nczarr_replace", "v3_new:vlen-utf8")],
    ("convert_store", "ncfile"),
]


@pytest.mark.parametrize(("writer", "kind"), CASES, ids=[f"{w}-{k}" for w, k in CASES])
def test_killed_writer_leaves_complete_or_refused(writer: str, kind: str, tmp_path: Path,
                                                  forks: ForkServer) -> None:
    """Local targets: the old data survives every kill (new targets: absent or refused); after
    ``repair`` every reader reads what engine="zstrings" read before it."""
    rng = random.Random(f"{SEED}-{writer}-{kind}")
    src: str | None = None
    name = writer.split(":")[0]
    target = str(tmp_path / {"zip": "t.zip", "ncfile": "t.nc"}.get(kind, "t.zarr"))
    if name == "convert_nc":  # netCDF-4 (written by netCDF4 through xarray) -> NCZarr store
        src = str(tmp_path / "src.nc")
        _strings_as_objects(dataset(2)).to_netcdf(src, engine="netcdf4")
    elif name == "convert_store":  # NCZarr store -> netCDF-4 file
        src = str(tmp_path / "src.zarr")
        to_nczarr(dataset(2), src)

    template = tmp_path / "template"

    def reset() -> None:
        p = Path(target)
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
        for q in tmp_path.iterdir():  # what a killed writer left beside the target is not our business here
            if q.name.startswith(f".{p.name}.zstrings-"):
                shutil.rmtree(q) if q.is_dir() else q.unlink()
        if _expected(writer)[1] is not None:
            if not template.exists():
                template.mkdir()
                _prepare_old(writer, str(template / p.name), None)
            t = template / p.name
            shutil.copytree(t, p) if t.is_dir() else shutil.copy(t, p)

    # a full run: it succeeds, and says how many write operations it makes
    reset()
    full = forks.run(writer=writer, target=target, src=src)
    assert full["status"] == "ok", full
    allowed = _allowed(writer)
    may_refuse = _expected(writer)[1] is None
    reader = _netcdf4_file if kind == "ncfile" else None
    assert _judge("the complete write", reader(Path(target)) if reader else _ours(target, None), allowed,
                  False, f"{writer} on {kind}") == "new"

    # for netcdf-c: (copy of the state, copy after repair, our verdict, kill point)
    snapshots: list[tuple[Path, Path, str, int]] = []
    outcomes: list[str] = []
    points = _kill_points(int(full["events"]), rng)
    for k in points:
        reset()
        where = f"{writer} on {kind}, ZSTRINGS_KILL_SEED={SEED}, killed at write {k} of {full['events']}"
        res = forks.run(writer=writer, target=target, src=src, kill_at=k)
        assert res["status"] in ("killed", "ok"), f"{where}: {res}"
        state = reader(Path(target)) if reader else _ours(target, None)
        verdict = _judge("engine='zstrings'", state, allowed, may_refuse, where)
        outcomes.append(verdict)
        if name.startswith("v3"):
            zp = _zarr_python(target, kind, None)
            if zp[0] == "data":
                _judge("zarr-python (engine='zarr')", zp, allowed, True, where)
            elif verdict != "refused" and "vlen-utf8" in writer:  # zarr-python reads this layout
                raise AssertionError(f"{where}: zarr-python refuses what engine='zstrings' reads: {zp[1][:300]}")
        if name == "v3_append":  # repaired: the version readers were served, no journal left
            repair(target)
            assert not (Path(target) / JOURNAL).exists(), where
            assert _judge("engine='zstrings' after repair", _ours(target, None), allowed, False, where) == verdict
            continue
        if kind != "dir" or name.startswith("v3") or name == "convert_nc" and verdict == "refused":
            continue
        before = tmp_path / f"snap{len(snapshots)}.zarr"
        if Path(target).exists():
            shutil.copytree(target, before)
        if verdict != "refused":  # repaired: what every reader reads is what we read before
            repair(target)
            assert not (Path(target) / JOURNAL).exists(), where
            assert _judge("engine='zstrings' after repair", _ours(target, None), allowed, False, where) == verdict
        after = tmp_path / f"snap{len(snapshots)}-repaired.zarr"
        if Path(target).exists():
            shutil.copytree(target, after)
        snapshots.append((before, after, verdict, k))
    befores = [b for b, _, _, _ in snapshots]
    per_object = _netcdf_c(befores)
    consolidated = _netcdf_c(befores, consolidated=True)
    repaired = _netcdf_c([a for _, a, _, _ in snapshots])
    for (_, _, verdict, k), obj, cons, rep in zip(snapshots, per_object, consolidated, repaired, strict=True):
        where = f"{writer} on {kind}, ZSTRINGS_KILL_SEED={SEED}, killed at write {k}"
        got = _judge("netcdf-c", obj, allowed, True, where)
        assert got == verdict or (got == "refused" and _in_place(writer)), (
            f"{where}: engine='zstrings' reads {verdict!r} but netcdf-c reads {got!r}")
        assert _judge("netcdf-c (consolidated)", cons, allowed, True, where) == verdict, where
        assert _judge("netcdf-c after repair", rep, allowed, True, where) == verdict, where
    assert len(outcomes) == len(points) and outcomes


# --- S3: every writer killed at every PUT or DELETE --------------------------------------------

S3_ROWS = 50  # chunks of 40: two chunks a variable, the second partial (an append rewrites it)
S3_WRITERS = ["nczarr_new", "nczarr_replace", "nczarr_append", "nczarr_addvars", "v3_new:vlen-utf8",
              "v3_replace:vlen-utf8", "v3_append:vlen-utf8"]


@pytest.mark.parametrize("writer", S3_WRITERS)
def test_killed_at_every_put_on_s3(writer: str, forks: ForkServer) -> None:
    """Every kill point of every writer on a real S3 server (moto): what is left opens as the old or
    the new data (appends and added variables: always; a new store or a replacement may be refused),
    ``repair`` then leaves the version readers were served (or, for a replacement interrupted after
    it removed the old version, an empty target), and the same write run again completes with the
    right values (checked at every third kill point). (Before the commit protocol a killed S3 append
    left a store every command refused: IncompleteStoreError, repairable only by rewriting it from
    elsewhere.)"""
    s3 = start_server()
    s3.bucket(BUCKET)
    so = s3.options()
    name = writer.split(":")[0]
    target = f"s3://{BUCKET}/every-{writer.replace(':', '-')}.zarr"
    kw: dict[str, Any] = {"rows": S3_ROWS, "small": True}
    allowed = _allowed(writer, S3_ROWS, True)
    whole = name in ("nczarr_new", "nczarr_replace", "v3_new", "v3_replace")
    again = {  # what running the write once more gives, after the state readers were served
        "new": _expected(writer, S3_ROWS, True)[0],
        "old": _expected(writer, S3_ROWS, True)[0],
    }
    if name in ("nczarr_append", "v3_append"):
        again["new"] = xr.concat([appended(S3_ROWS, True), dataset(2, S3_ROWS, True)], dim="obs")

    import obstore

    store = s3.obstore(BUCKET)
    prefix = target.split(f"s3://{BUCKET}/", 1)[1]

    def keys() -> list[str]:
        return [m["path"] for batch in obstore.list(store, prefix=prefix + "/") for m in batch]

    template = f"s3://{BUCKET}/template-{writer.replace(':', '-')}.zarr"
    _prepare_old(writer, template, so, S3_ROWS, True)  # once; each reset copies it (server side)
    old_keys = [m["path"] for batch in obstore.list(store, prefix=template.split("/", 3)[3] + "/") for m in batch]

    def reset() -> None:
        if found := keys():
            obstore.delete(store, found)
        for key in old_keys:
            obstore.copy(store, key, prefix + key[key.index("/"):])

    reset()
    full = forks.run(writer=writer, target=target, so=so, **kw)
    assert full["status"] == "ok", full
    assert _judge("the complete write", _ours(target, so), allowed, False, writer) == "new"
    assert not any(k.endswith(JOURNAL) for k in keys())
    total = int(full["events"])
    seen: dict[str, int] = {}
    for k in range(1, total + 1):
        reset()
        where = f"{writer} on S3, killed at PUT/DELETE {k} of {total}"
        res = forks.run(writer=writer, target=target, so=so, kill_at=k, **kw)
        assert res["status"] in ("killed", "ok"), f"{where}: {res}"
        verdict = _judge("engine='zstrings'", _ours(target, so), allowed, whole, where)
        if name in ("v3_new", "v3_replace", "v3_append"):
            zp = _zarr_python(target, "s3", s3)
            if zp[0] == "data":
                _judge("zarr-python (engine='zarr')", zp, allowed, True, where)
        if not [x for x in keys() if not x.rsplit("/", 1)[-1].startswith(".zstrings-probe")]:
            # killed before its first object: no store there to repair (an error, as check's: issue 36)
            assert verdict == "refused", where
            with pytest.raises(StoreNotFoundError):
                repair(target, storage_options=so)
            report = None
        else:
            report = repair(target, storage_options=so)
        assert not any(x.endswith(JOURNAL) for x in keys()), f"{where}: {report}"
        after = _judge("engine='zstrings' after repair", _ours(target, so), allowed, whole, where)
        # a refused state repairs to the old version (a replacement that had removed nothing but its
        # root), the new one (committed), or an empty target
        assert after == verdict or (verdict == "refused" and after in ("refused", "new", "old")), (where, report)
        seen[after] = seen.get(after, 0) + 1
        if name in ("nczarr_new", "v3_new") and after == "new":
            continue  # mode="w-" refuses a store that exists: there is no write to run again
        if k % 3 and k != total:  # (the write run again at every third kill point: CI time)
            continue
        res = forks.run(writer=writer, target=target, so=so, **kw)
        assert res["status"] == "ok", f"{where}, then written again: {res}"
        want = again["new" if after == "new" else "old"]
        got = _ours(target, so)
        assert got[0] == "data" and _same(got[1], _plain(_strings_as_objects(want))), (
            f"{where}, then written again: {str(got)[:600]}")
    assert sum(seen.values()) == total and seen


def test_next_writer_recovers_a_killed_append(tmp_path: Path, forks: ForkServer) -> None:
    """An append killed in its metadata window (the root a placeholder, the metadata half changed)
    still reads as the old data; the next append rolls it back (its chunks removed, its metadata
    restored) before it appends, and nothing is left in or beside the store."""
    target = tmp_path / "t.zarr"
    to_nczarr(dataset(1), target, unlimited_dims=["obs"])
    res = forks.run(writer="nczarr_append", target=str(target), kill_event="xr_zstrings.commit:window")
    assert res["status"] == "killed"
    assert (target / JOURNAL).exists()
    assert _same(_ours(str(target), None), ("data", _plain(_strings_as_objects(dataset(1)))))
    assert forks.run(writer="nczarr_append", target=str(target))["status"] == "ok"
    assert [q.name for q in tmp_path.iterdir()] == ["t.zarr"] and not (target / JOURNAL).exists()
    assert _same(_ours(str(target), None), ("data", _plain(_strings_as_objects(appended()))))
    (nc,) = _netcdf_c([target])
    assert _same(nc, ("data", _plain(_strings_as_objects(appended()))))


def test_a_store_renamed_aside_by_a_killed_swap_is_put_back(tmp_path: Path) -> None:
    """Where two directories cannot be exchanged atomically the old store is renamed aside before
    the new one moves in; a writer killed between the two renames leaves no store (refused), and
    the next writer puts the old one back before it starts."""
    target = tmp_path / "t.zarr"
    to_nczarr(dataset(1), target, unlimited_dims=["obs"])
    target.rename(tmp_path / ".t.zarr.zstrings-old-999-deadbeef")  # the state such a kill leaves
    (tmp_path / ".t.zarr.zstrings-tmp-999-cafe").mkdir()
    assert _ours(str(target), None)[0] == "refused"
    to_nczarr(dataset(2), target, mode="a", append_dim="obs")
    assert [q.name for q in tmp_path.iterdir()] == ["t.zarr"]
    assert _same(_ours(str(target), None), ("data", _plain(_strings_as_objects(appended()))))


@pytest.mark.parametrize(("step", "state", "done", "version"), [
    ("window", "interrupted before its commit point; readers see version 1", "rolled back", 1),
    ("committed", "reached its commit point (version 2)", "rolled forward to version 2", 2),
])
def test_check_and_repair_say_what_a_killed_append_left(step: str, state: str, done: str, version: int,
                                                         tmp_path: Path, forks: ForkServer,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """``zstrings check`` names the interrupted write, its writer and what ``zstrings repair`` does;
    ``zstrings repair`` does it (the writer is gone: no --force needed) and check then reports a
    complete store of the version readers were served."""
    from xr_zstrings.cli import main

    target = tmp_path / "t.zarr"
    to_nczarr(dataset(1), target, unlimited_dims=["obs"])
    assert forks.run(writer="nczarr_append", target=str(target), kill_event=f"xr_zstrings.commit:{step}")["status"] \
        == "killed"
    capsys.readouterr()
    assert main(["check", str(target)]) == 0
    out = capsys.readouterr().out
    assert "an append by process" in out and state in out and "its writer has ended" in out, out
    assert main(["repair", str(target)]) == 0
    out = capsys.readouterr().out
    assert f"done: {done}" in out, out
    assert main(["check", str(target)]) == 0
    assert f"state: complete (version {version})" in capsys.readouterr().out
    want = appended() if version == 2 else dataset(1)
    assert _same(_ours(str(target), None), ("data", _plain(_strings_as_objects(want))))
