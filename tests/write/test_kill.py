"""Kill every writer (SIGKILL, a real process) at seeded points and read what it left.

For every writer x target kind (local directory, zip file, S3 on the moto server) the writer runs
in a process forked by ``kill_writer.py`` and is killed at its k-th write operation (file write,
rename, link, delete or S3 PUT/DELETE). After each kill the target must read, with
engine="zstrings", as the complete new data, as the complete old data (``mode="w"``, appends,
added variables: on local targets the old data must survive every kill), or be refused with
"incomplete"/"not found" -- never a store that opens with missing variables, stand-in dtypes or
fill values. netcdf-c (netCDF4, in a subprocess: a crash fails the test and names the state) and
zarr-python (Zarr v3) read every state too and must agree.

Kill points are drawn from ``random.Random(ZSTRINGS_KILL_SEED)`` (default 15); the write's last
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
from s3_server import S3Server, start_server
from kill_writer import appended, dataset
from peers import nc_url

from xr_zstrings import IncompleteStoreError, StoreNotFoundError
from xr_zstrings.write.nczarr import to_nczarr
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

def _expected(writer: str) -> tuple[xr.Dataset, xr.Dataset | None]:
    name = writer.split(":")[0]
    if name in ("nczarr_new", "nczarr_zlib_new", "v3_new", "convert_nc", "convert_store"):
        return dataset(2), None
    if name in ("nczarr_replace", "v3_replace"):
        return dataset(2), dataset(1)
    if name == "nczarr_append":
        return appended(), dataset(1)
    if name == "nczarr_addvars":
        return dataset(1), dataset(1).drop_vars(["code", "count"])
    raise AssertionError(writer)


def _prepare_old(writer: str, target: Any, so: dict[str, Any] | None) -> None:
    """Write the store the writer replaces or extends (nothing for a fresh target)."""
    name, _, layout = writer.partition(":")
    kw: dict[str, Any] = {"storage_options": so} if so else {}
    if name == "nczarr_replace":
        to_nczarr(dataset(1), target, **kw)
    elif name == "nczarr_append":
        to_nczarr(dataset(1), target, unlimited_dims=["obs"], **kw)
    elif name == "nczarr_addvars":
        to_nczarr(dataset(1).drop_vars(["code", "count"]), target, **kw)
    elif name == "v3_replace":
        to_zarr_v3(dataset(1), target, layout=layout, **kw)  # type: ignore[arg-type]


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


_NETCDF_C_READER = r"""
import json, sys, netCDF4
for line in sys.stdin:
    i, url = json.loads(line)
    print(json.dumps(["start", i]), flush=True)
    try:
        d = netCDF4.Dataset(url, "r")
        out = {"vars": {}, "title": getattr(d, "title", None)}
        for v in sorted(d.variables):
            if v in %r:
                x = d.variables[v]
                x.set_auto_mask(False)
                out["vars"][v] = x[:].tolist()
        d.close()
        print(json.dumps(["data", i, out]), flush=True)
    except Exception as e:
        print(json.dumps(["refused", i, f"{type(e).__name__}: {e}"]), flush=True)
""" % (VARS,)


def _netcdf_c(paths: list[Path]) -> list[tuple[str, Any]]:
    """netcdf-c's reading of each state, in one subprocess (netcdf-c may crash on a bad store: the
    crash fails the test and names the state)."""
    if not paths:
        return []
    feed = "".join(json.dumps([i, nc_url(p)]) + "\n" for i, p in enumerate(paths))
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


def _allowed(writer: str, kind: str) -> dict[str, Any]:
    new, old = _expected(writer)
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


CASES = [
    # (writer, target kind)
    *[(w, "dir") for w in ("nczarr_new", "nczarr_zlib_new", "nczarr_replace", "nczarr_append",
                           "nczarr_addvars", "v3_new:vlen-utf8", "v3_new:zarrs.vlen", "v3_new:arrow",
                           "v3_new:arrow-large", "v3_replace:vlen-utf8", "convert_nc")],
    *[(w, "zip") for w in ("nczarr_new", "nczarr_replace", "v3_new:vlen-utf8")],
    ("convert_store", "ncfile"),
    *[(w, "s3") for w in ("nczarr_new", "nczarr_replace", "nczarr_append", "nczarr_addvars",
                          "v3_new:vlen-utf8", "v3_replace:arrow")],
]


@pytest.mark.parametrize(("writer", "kind"), CASES, ids=[f"{w}-{k}" for w, k in CASES])
def test_killed_writer_leaves_complete_or_refused(writer: str, kind: str, tmp_path: Path,
                                                  forks: ForkServer) -> None:
    rng = random.Random(f"{SEED}-{writer}-{kind}")
    so: dict[str, Any] | None = None
    s3: S3Server | None = None
    src: str | None = None
    name = writer.split(":")[0]
    if kind == "s3":
        s3 = start_server()
        s3.bucket(BUCKET)
        so = s3.options()
        target = f"s3://{BUCKET}/{writer.replace(':', '-')}.zarr"
    elif kind == "zip":
        target = str(tmp_path / "t.zip")
    elif kind == "ncfile":
        target = str(tmp_path / "t.nc")
    else:
        target = str(tmp_path / "t.zarr")
    if name == "convert_nc":  # netCDF-4 (written by netCDF4 through xarray) -> NCZarr store
        src = str(tmp_path / "src.nc")
        _strings_as_objects(dataset(2)).to_netcdf(src, engine="netcdf4")
    elif name == "convert_store":  # NCZarr store -> netCDF-4 file
        src = str(tmp_path / "src.zarr")
        to_nczarr(dataset(2), src)

    template = tmp_path / "template"

    def reset() -> None:
        if s3 is not None:
            import obstore

            store = s3.obstore(BUCKET)
            prefix = target.split(f"s3://{BUCKET}/", 1)[1]
            keys = [m["path"] for batch in obstore.list(store, prefix=prefix + "/") for m in batch]
            if keys:
                obstore.delete(store, keys)
            if _expected(writer)[1] is not None:
                _prepare_old(writer, target, so)
            return
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
                tmpl_target = template / p.name
                template.mkdir()
                _prepare_old(writer, str(tmpl_target), None)
            t = template / p.name
            shutil.copytree(t, p) if t.is_dir() else shutil.copy(t, p)

    # a full run: it succeeds, and says how many write operations it makes
    reset()
    full = forks.run(writer=writer, target=target, so=so, src=src)
    assert full["status"] == "ok", full
    allowed = _allowed(writer, kind)
    may_refuse = _expected(writer)[1] is None or kind == "s3"
    reader = _netcdf4_file if kind == "ncfile" else None
    assert _judge("the complete write", reader(Path(target)) if reader else _ours(target, so), allowed,
                  False, f"{writer} on {kind}") == "new"

    snapshots: list[tuple[Path, str, int]] = []  # for netcdf-c: (copy of the state, our verdict, kill point)
    outcomes: list[str] = []
    points = _kill_points(int(full["events"]), rng)
    for k in points:
        reset()
        where = f"{writer} on {kind}, ZSTRINGS_KILL_SEED={SEED}, killed at write {k} of {full['events']}"
        res = forks.run(writer=writer, target=target, so=so, src=src, kill_at=k)
        assert res["status"] in ("killed", "ok"), f"{where}: {res}"
        state = reader(Path(target)) if reader else _ours(target, so)
        verdict = _judge("engine='zstrings'", state, allowed, may_refuse, where)
        outcomes.append(verdict)
        if name.startswith("v3"):
            zp = _zarr_python(target, kind, s3)
            if zp[0] == "data":
                _judge("zarr-python (engine='zarr')", zp, allowed, True, where)
            elif verdict != "refused" and "vlen-utf8" in writer:  # zarr-python reads this layout
                raise AssertionError(f"{where}: zarr-python refuses what engine='zstrings' reads: {zp[1][:300]}")
        if kind == "dir" and not name.startswith("v3"):
            snap = tmp_path / f"snap{len(snapshots)}.zarr"
            if Path(target).exists():
                shutil.copytree(target, snap)
            snapshots.append((snap, verdict, k))
    for (snap, verdict, k), nc in zip(snapshots, _netcdf_c([s for s, _, _ in snapshots]), strict=True):
        where = f"{writer} on {kind}, ZSTRINGS_KILL_SEED={SEED}, killed at write {k}"
        got = _judge("netcdf-c", nc, allowed, True, where)
        assert got == verdict or (verdict == "refused" and got == "refused"), (
            f"{where}: engine='zstrings' reads {verdict!r} but netcdf-c reads {got!r}")
    assert len(outcomes) == len(points) and outcomes


def test_next_writer_cleans_up_after_a_killed_one(tmp_path: Path, forks: ForkServer) -> None:
    """What a killed writer left beside the target (its temporary tree) is removed by the next
    writer of that target, which holds the lock, so no other writer can still be using it."""
    target = tmp_path / "t.zarr"
    to_nczarr(dataset(1), target, unlimited_dims=["obs"])
    # killed after it cloned the store and wrote the new version beside it, just before the swap
    res = forks.run(writer="nczarr_append", target=str(target), kill_event="xr_zstrings.exchange")
    assert res["status"] == "killed"
    left = [q.name for q in tmp_path.iterdir() if q.name != "t.zarr"]
    assert left and all(n.startswith(".t.zarr.zstrings-") for n in left)
    assert _same(_ours(str(target), None), ("data", _plain(_strings_as_objects(dataset(1)))))
    assert forks.run(writer="nczarr_append", target=str(target))["status"] == "ok"
    assert [q.name for q in tmp_path.iterdir()] == ["t.zarr"]
    assert _same(_ours(str(target), None), ("data", _plain(_strings_as_objects(appended()))))


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
