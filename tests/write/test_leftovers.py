"""Issue 37 items 5 and 6: what a write that runs out of disk space and a killed ``repair`` leave.

A full disk is a real one: a small tmpfs, mounted in a user and mount namespace of the child process
that writes (``unshare -rm``, as tests/cli/test_cli_messages.py's read-only mount: no privilege
needed, nothing left mounted). The child fills it to the last page, frees a number of pages and
writes; it reports what it saw as one JSON line and copies the store out for the readers here
(engine="zstrings", xarray's engine="zarr", netCDF4). A killed ``repair`` is a child that SIGKILLs
itself at the ``os.replace`` of a temporary file (tests/write/kill_writer.py's style).

    python test_leftovers.py full-disk '{"scenario": ..., "dir": ..., "out": ...}'
    python test_leftovers.py kill-repair '{"store": ..., "at": ".zgroup"}'
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
PAGE = 4096
#: names of temporary files anywhere: ours (``<name>.<8 hex>.partial``, ``.<name>.zstrings-tmp-...``) and zarr-python's
TEMPORARY = re.compile(r".*\.partial|.*zstrings-(tmp|old)-.*")


# ---------------------------------------------------------------------------------------------
# the children
# ---------------------------------------------------------------------------------------------


def _temporaries(folder: Path) -> list[str]:
    """Temporary files in and beside ``folder`` (a store), by name."""
    found = [p.relative_to(folder.parent).as_posix() for p in folder.parent.rglob("*") if TEMPORARY.fullmatch(p.name)]
    return sorted(found)


def _fill(d: Path, free_pages: int) -> Path:
    """Fill the file system of ``d`` to its last page, then free ``free_pages`` pages."""
    filler = d / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"x" * PAGE)
    except OSError:
        pass
    finally:
        os.close(fd)
    os.truncate(filler, max(0, filler.stat().st_size - free_pages * PAGE))
    return filler


def _outcome(call: Any) -> dict[str, Any]:
    try:
        call()
    except BaseException as e:  # (reported to the test)
        import traceback

        return {"raised": f"{type(e).__module__}.{type(e).__name__}", "message": str(e),
                "where": traceback.format_exc()[-1500:]}
    return {"raised": None}


def _cli(*argv: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "xr_zstrings", *argv], capture_output=True, text=True, check=False)
    return {"rc": proc.returncode, "out": proc.stdout, "err": proc.stderr}


def _claimed(store: Path) -> bool:
    """Whether the store holds a claim (a write under way or left unfinished: its journal)."""
    return (store / ".zstrings-journal").exists()


def full_disk(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one full-disk scenario in ``spec["dir"]`` (a small tmpfs): each attempt writes the old
    store afresh, fills the disk, frees 0, 1, 2, ... pages and writes; reports every attempt."""
    from kill_writer import dataset

    from xr_zstrings.write.nczarr import to_nczarr
    from xr_zstrings.write.zarr3 import to_zarr_v3

    d, out = Path(spec["dir"]), Path(spec["out"])
    store = d / "s.zarr"
    scenario = spec["scenario"]
    attempts = []
    for pages in range(spec.get("first", 0), spec.get("last", 60)):
        for p in d.iterdir():
            shutil.rmtree(p) if p.is_dir() else p.unlink()
        if scenario in ("append", "replace"):
            to_nczarr(dataset(1), store, unlimited_dims=["obs"])
        filler = _fill(d, pages)
        new = dataset(2)
        write = {
            "append": lambda: to_nczarr(new, store, mode="a", append_dim="obs"),
            "replace": lambda: to_nczarr(new, store, mode="w"),
            "new": lambda: to_nczarr(new, store),
            "v3-new": lambda: to_zarr_v3(new, store),
        }[scenario]
        got = {"pages": pages, **_outcome(write), "temporaries": _temporaries(store),
               "claimed": store.is_dir() and _claimed(store)}
        if got["claimed"]:
            got["journal"] = json.loads((store / ".zstrings-journal").read_bytes())
        if scenario == "append":  # what readers see now (engine="zstrings"), and the state `check` prints
            import xarray as xr

            from xr_zstrings.io.commit import inspect_store
            from xr_zstrings.io.store import open_store

            with xr.open_dataset(store, engine="zstrings") as ds:
                got["names"] = [str(v) for v in ds["name"].values]
            got["state"] = inspect_store(open_store(str(store))).describe()[0]
        attempts.append(got)
        if got["raised"] is None:
            break
        if scenario == "append" and got["claimed"] and spec.get("repair", True) and \
                (got["journal"]["appends"] or not spec.get("chunks_written")):
            # the rollback could not finish: on to check and repair
            got["check"] = _cli("check", str(store))
            shutil.copytree(store, out / "failed", symlinks=True)
            filler.unlink()
            got["repair"] = _cli("repair", str(store))
            got["after_repair"] = _temporaries(store)
            got["check_after"] = _cli("check", str(store))
            shutil.copytree(store, out / "repaired", symlinks=True)
            break
        if scenario == "append" and pages == spec.get("first", 0):
            got["check"] = _cli("check", str(store))
            shutil.copytree(store, out / f"failed-{pages}", symlinks=True)
    return {"attempts": attempts}


def kill_repair(spec: dict[str, Any]) -> None:
    """``repair`` of ``spec["store"]``, killed (SIGKILL) just before it renames its temporary file
    of ``spec["at"]`` (".zstrings-journal", ".zgroup") over the object."""
    from xr_zstrings.write.repair import repair

    at, replace = spec["at"], os.replace

    def dying(src: Any, dst: Any, *a: Any, **kw: Any) -> None:
        if Path(os.fspath(dst)).name == at and Path(os.fspath(src)).name.endswith(".partial"):
            os.kill(os.getpid(), signal.SIGKILL)
        replace(src, dst, *a, **kw)

    os.replace = dying  # type: ignore[assignment]  # (the child only)
    repair(spec["store"])


# ---------------------------------------------------------------------------------------------
# item 5: a full disk
# ---------------------------------------------------------------------------------------------


def _on_a_full_disk(tmp_path: Path, spec: dict[str, Any], size: str = "400k") -> dict[str, Any]:
    """``full_disk(spec)`` in a child with ``tmp_path/disk`` a tmpfs of ``size`` (its own mount namespace)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("util-linux's unshare is not installed: no small file system to fill")
    probe = subprocess.run([unshare, "-rm", "true"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"user namespaces are not available here ({probe.stderr.strip()}): no tmpfs to fill")
    disk, out = tmp_path / "disk", tmp_path / "out"
    disk.mkdir()
    out.mkdir()
    script = 'mount -t tmpfs -o size="$1" tmpfs "$2" && shift 2 && exec "$@"'
    spec = {**spec, "dir": str(disk), "out": str(out)}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([unshare, "-rm", "sh", "-c", script, "sh", size, str(disk), sys.executable, __file__,
                           "full-disk", json.dumps(spec)], capture_output=True, text=True, timeout=600,
                          check=False, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _disk_full_error(got: dict[str, Any], store: str) -> None:
    """The error of a write that ran out of space: ours, naming the store, the full disk and the fix."""
    assert got["raised"] == "xr_zstrings.errors.ZStringsError", got
    assert store in got["message"], got
    assert "No space left on device" in got["message"] and "the disk is full" in got["message"], got
    assert "Free space there" in got["message"] and "zstrings repair" in got["message"], got


def _read_all(path: Path) -> dict[str, Any]:
    """The store's values through engine="zstrings", xarray's engine="zarr" and netCDF4 (netcdf-c)."""
    import netCDF4
    import xarray as xr
    from peers import nc_url

    def text(values: Any) -> list[str]:  # (xarray's zarr reader gives the stored bytes)
        return [v.decode() if isinstance(v, bytes) else str(v) for v in values]

    out = {}
    with xr.open_dataset(path, engine="zstrings") as ds:
        out["zstrings"] = {"name": text(ds["name"].values), "value": ds["value"].values.tolist()}
    with xr.open_dataset(path, engine="zarr", zarr_format=2) as ds:
        out["zarr"] = {"name": text(ds["name"].values), "value": ds["value"].values.tolist()}
    with netCDF4.Dataset(nc_url(path)) as nc:
        out["netcdf4"] = {"name": text(nc["name"][:]), "value": nc["value"][:].tolist()}
    return out


def _old_values() -> dict[str, Any]:
    from kill_writer import dataset

    ds = dataset(1)
    return {"name": [str(v) for v in ds["name"].values], "value": ds["value"].values.tolist()}


def test_an_append_on_a_full_disk_raises_our_error_and_leaves_no_temporary_file(tmp_path):
    """No page free: the claim itself cannot be written. Before: a bare ``OSError`` and a
    ``.zstrings-journal.<hex>.partial`` left in the store."""
    got = _on_a_full_disk(tmp_path, {"scenario": "append", "first": 0, "last": 1})["attempts"][0]
    store = str(tmp_path / "disk" / "s.zarr")
    _disk_full_error(got, store)
    assert got["temporaries"] == [], got
    assert not got["claimed"], got
    assert got["check"]["rc"] == 0 and "state: complete (version 1)" in got["check"]["out"], got["check"]
    for reader, values in _read_all(tmp_path / "out" / "failed-0").items():
        assert values == _old_values(), reader


def test_an_append_whose_rollback_finds_no_space_is_named_by_check_and_repaired_once_space_is_freed(tmp_path):
    """An append that runs out of space part-way, and whose rollback (the rewrite of the last
    partial chunk) runs out of space too: the write raises our error, its claim stays and `check`
    names an interrupted append whose readers see version 1; freed space, `repair` rolls it back,
    and every reader reads the old values. Every number of free pages up to that case raises our
    error and leaves no temporary file."""
    found = _on_a_full_disk(tmp_path, {"scenario": "append", "first": 1, "last": 40, "chunks_written": True})
    found = found["attempts"]
    store = str(tmp_path / "disk" / "s.zarr")
    for got in found:
        _disk_full_error(got, store)
        assert got["temporaries"] == [], got
        assert got["names"] == _old_values()["name"], got["pages"]
        if not got["claimed"]:  # the write undid itself
            assert got["state"] == "complete (version 1)", got
        else:  # (the first page held its claim, which it then could not release)
            assert "an append" in got["state"] and "readers see version 1" in got["state"], got
    last = found[-1]
    assert last["claimed"] and last["journal"]["appends"], f"no free pages left a rollback of chunks unfinished: {found}"
    check = last["check"]
    assert check["rc"] == 0, check
    assert "state: an append" in check["out"] and "interrupted before its commit point" in check["out"], check
    assert "readers see version 1" in check["out"] and "repair: roll back" in check["out"], check
    with __import__("xarray").open_dataset(tmp_path / "out" / "failed", engine="zstrings") as ds:
        assert ds["name"].values.tolist() == _old_values()["name"]  # readers meanwhile: the old version
    assert last["repair"]["rc"] == 0 and "rolled back" in last["repair"]["out"], last["repair"]
    assert last["after_repair"] == [], last
    assert "state: complete" in last["check_after"]["out"], last["check_after"]
    for reader, values in _read_all(tmp_path / "out" / "repaired").items():
        assert values == _old_values(), reader


@pytest.mark.parametrize("scenario", ["new", "replace", "v3-new"])
def test_a_local_directory_write_on_a_full_disk_leaves_nothing_beside_the_target(tmp_path, scenario):
    """Writes swapped in whole (``io.atomic.local_commit``): at every number of free pages until the
    write fits, our error, and no temporary tree or file in or beside the target."""
    found = _on_a_full_disk(tmp_path, {"scenario": scenario, "first": 0, "last": 80}, size="600k")["attempts"]
    assert found[-1]["raised"] is None, found[-1]  # (the write fits at last)
    assert len(found) > 1, found
    store = str(tmp_path / "disk" / "s.zarr")
    for got in found:
        assert got["temporaries"] == [], got
    for got in found[:-1]:
        _disk_full_error(got, store)


# ---------------------------------------------------------------------------------------------
# item 6: a killed repair's temporary files
# ---------------------------------------------------------------------------------------------


def _killed_writing(path: Path, when: str, mode: str = "a") -> None:
    """A 230-row store at ``path`` written again (``dataset(2)``, an append or ``mode``) by a child
    that SIGKILLs itself at the audit event for which ``when`` (a Python expression of the event
    ``e`` and its arguments ``a``) is true."""
    from kill_writer import dataset

    from xr_zstrings.write.nczarr import to_nczarr

    to_nczarr(dataset(1), path, unlimited_dims=["obs"])
    how = "mode='a', append_dim='obs'" if mode == "a" else f"mode={mode!r}"
    code = ("import os, re, signal, sys\n"
            f"sys.addaudithook(lambda e, a: os.kill(os.getpid(), signal.SIGKILL) if {when} else None)\n"
            "from kill_writer import dataset\nfrom xr_zstrings.write.nczarr import to_nczarr\n"
            f"to_nczarr(dataset(2), {str(path)!r}, {how})\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, env=_env())
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def _interrupted_append(path: Path) -> None:
    """A store whose append was killed in its metadata window (a child SIGKILLed at the step)."""
    _killed_writing(path, "e == 'xr_zstrings.commit' and a and a[0] == 'window'")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")])}


def _named_then_removed(path: Path, named: list[str], said: list[str]) -> str:
    """`check` of ``path`` names each of ``named`` as a leftover (PROBLEM, exit 1), then `repair`
    removes them and says so (``said``: the names its report gives); returns check's output."""
    check = _cli("check", str(path))
    for name in named:
        assert f"PROBLEM {name}: a temporary file an interrupted write or repair left" in check["out"], check["out"]
    assert check["rc"] == 1, check["out"]
    repaired = _cli("repair", str(path))
    assert repaired["rc"] == 0, repaired["err"]
    assert (f"removed {len(said)} temporary file(s) an interrupted write or repair left ({', '.join(said)})"
            in repaired["out"]), repaired["out"]
    return str(check["out"])


def _ours(path: Path) -> list[str]:
    return sorted(p.name for p in path.rglob("*") if re.fullmatch(r".+\.[0-9a-f]{8}\.partial", p.name))


@pytest.mark.parametrize("at", [".zstrings-journal", ".zgroup"])
def test_a_repair_killed_before_its_rename_leaves_files_the_next_repair_removes(tmp_path, at):
    """A repair killed just before renaming its temporary file of ``at`` leaves that file in the
    root; `check` names it, and the next repair removes it (and says so), and nothing that is not
    ours: a user's file named like a temporary one stays. Before: every later repair kept it."""
    import xarray as xr

    path = tmp_path / "s.zarr"
    _interrupted_append(path)
    proc = subprocess.run([sys.executable, __file__, "kill-repair", json.dumps({"store": str(path), "at": at})],
                          capture_output=True, text=True, check=False, env=_env())
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    left = _ours(path)
    assert [n.split(".partial")[0].rsplit(".", 1)[0] for n in left] == [at], left
    theirs = [path / "notes.partial", path / "name" / "0.0123456789abcdef0123456789abcdef.partial",
              path / ".zgroup.ABCDEF12.partial", path / "name" / ".zarray.1234567.partial"]
    for p in theirs:
        p.write_bytes(b"not ours")
    _named_then_removed(path, left, left)
    assert _ours(path) == []
    assert all(p.read_bytes() == b"not ours" for p in theirs)
    again = subprocess.run([sys.executable, "-m", "xr_zstrings", "check", str(path)], capture_output=True, text=True,
                           check=False)
    assert "temporary file" not in again.stdout and "state: complete" in again.stdout, again.stdout
    with xr.open_dataset(path, engine="zstrings") as ds:
        assert ds.sizes["obs"] == 230


def test_what_a_killed_writer_left_beside_the_store_is_named_and_its_removal_said(tmp_path):
    """A replacement (``mode="w"``) killed just before its swap leaves its temporary store beside the
    target: `check` names it, `repair` removes it and says so (before: removed without a word, and
    `check` said nothing); a user's file beside the store, named like it, stays."""
    path = tmp_path / "s.zarr"
    _killed_writing(path, "e == 'xr_zstrings.exchange'", mode="w")
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".s.zarr.zstrings-tmp-"))
    assert len(left) == 1 and (tmp_path / left[0]).is_dir(), sorted(os.listdir(tmp_path))
    theirs = tmp_path / ".s.zarr.notes"
    theirs.write_text("mine")
    _named_then_removed(path, [f"../{left[0]}"], left)
    assert sorted(os.listdir(tmp_path)) == [".s.zarr.notes", "s.zarr"]
    assert theirs.read_text() == "mine"
    assert _read_all(path)["netcdf4"] == _old_values()


#: zarr-python's temporary file of an object its LocalStore writes (zarr/storage/_local.py ``_atomic_write``)
ZARR_PARTIAL = re.compile(r".+\.[0-9a-f]{32}\.partial")


def test_zarr_pythons_temporary_file_of_a_killed_chunk_write_is_named_and_removed_once_older_than_the_lease(
        tmp_path, monkeypatch):
    """Our chunk writes into a local folder go through zarr-python's LocalStore, which writes each to
    ``<key with its suffix replaced>.<32 hex>.partial`` and renames it: an append SIGKILLed at that
    rename leaves the file. Once older than the lease, `check` names it and `repair` removes it (and
    says so); one as young as a live zarr-python writer's stays, unnamed. Before: both kept for ever."""
    import uuid

    monkeypatch.setenv("XR_ZSTRINGS_LOCK_TIMEOUT", "60")
    path = tmp_path / "s.zarr"
    _killed_writing(path, "e == 'os.rename' and re.fullmatch(r'.+\\.[0-9a-f]{32}\\.partial', "
                    "os.path.basename(os.fsdecode(a[0])))")
    killed = sorted(p for p in path.rglob("*") if ZARR_PARTIAL.fullmatch(p.name))  # (writes in parallel: 1 or more)
    assert 1 <= len(killed) <= 4, sorted(p.relative_to(path).as_posix() for p in path.rglob("*"))
    left = [p.relative_to(path).as_posix() for p in killed]
    for p in killed:  # (written an hour ago: older than the 60 s lease)
        os.utime(p, (p.stat().st_mtime - 3600, p.stat().st_mtime - 3600))
    young = path / "value" / f"9.{uuid.uuid4().hex}.partial"  # a live zarr-python writer's, now
    young.write_bytes(b"being written")
    named = _named_then_removed(path, left, left)
    assert young.name not in named, named
    assert [p for p in path.rglob("*") if ZARR_PARTIAL.fullmatch(p.name)] == [young]
    again = _cli("check", str(path))
    assert "temporary file" not in again["out"] and "state: complete" in again["out"], again["out"]
    assert _read_all(path)["netcdf4"] == _old_values()


if __name__ == "__main__":
    sys.path[:0] = [str(HERE), str(HERE.parent)]
    command, arg = sys.argv[1], json.loads(sys.argv[2])
    if command == "full-disk":
        print(json.dumps(full_disk(arg)), flush=True)
    else:
        kill_repair(arg)
