"""The one way into a write (issue 38 item 1): every write entry point's target passes through
``write.session`` exactly once, and nothing in write/, cli/ or the accessor opens a target itself.

The first test runs each entry point against a real target with ``session.classify`` spied on;
the second reads the source (``ast``) for the names only the session may use.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import xr_zstrings
from xr_zstrings.write import session

PACKAGE = Path(xr_zstrings.__file__).resolve().parent


def _ds(n: int = 4, start: int = 0) -> xr.Dataset:
    ds = xr.Dataset({"s": ("t", np.array([f"v{i}é" for i in range(start, start + n)], dtype=object)),
                     "f": ("t", np.arange(start, start + n, dtype="f8"))})
    ds.encoding["unlimited_dims"] = {"t"}
    for v in ds.variables.values():
        v.encoding["chunks"] = (2,)
    return ds


def _nczarr(p: Path) -> None:
    from xr_zstrings.write.nczarr import to_nczarr

    to_nczarr(_ds(), p / "src.zarr")


def _v3(p: Path) -> None:
    from xr_zstrings.write.zarr3 import to_zarr_v3

    to_zarr_v3(_ds(), p / "src.zarr")


def _nothing(p: Path) -> None:
    pass


def _cli(*args: str) -> Callable[[Path], None]:
    def run(p: Path) -> None:
        from xr_zstrings.cli.main import main

        assert main([a.replace("{p}", str(p)) for a in args] + ["-q"]) == 0

    return run


def _call(name: str, *args: object, **kw: object) -> Callable[[Path], None]:
    """``xr_zstrings.<name>(*args, **kw)``, each ``"{p}/..."`` argument a path in the test's folder."""
    def run(p: Path) -> None:
        fn = getattr(xr_zstrings, name)
        fn(*[str(a).replace("{p}", str(p)) if isinstance(a, str) else a for a in args], **kw)

    return run


def _accessor(method: str, **kw: object) -> Callable[[Path], None]:
    def run(p: Path) -> None:
        getattr(_ds().zstrings, method)(p / "out.zarr", **kw)

    return run


def _region(p: Path) -> None:
    from xr_zstrings.write.nczarr import to_nczarr

    to_nczarr(_ds(2, start=2), p / "src.zarr", mode="a", region={"t": slice(0, 2)})


#: entry point -> (what is there first, the write)
CASES: dict[str, tuple[Callable[[Path], None], Callable[[Path], None]]] = {
    "to_nczarr": (_nothing, _call("to_nczarr", _ds(), "{p}/out.zarr")),
    "to_nczarr zip": (_nothing, _call("to_nczarr", _ds(), "{p}/out.zip")),
    "to_nczarr mode=w": (_nczarr, _call("to_nczarr", _ds(), "{p}/src.zarr", mode="w")),
    "to_nczarr append": (_nczarr, _call("to_nczarr", _ds(2, start=4), "{p}/src.zarr", mode="a", append_dim="t")),
    "to_nczarr add": (_nczarr, _call("to_nczarr", xr.Dataset({"g": ("t", np.zeros(4))}), "{p}/src.zarr", mode="a")),
    "to_zarr_v2": (_nothing, _call("to_zarr_v2", _ds(), "{p}/out.zarr")),
    "convert store -> nczarr": (_nczarr, _call("convert", "{p}/src.zarr", "{p}/out.zarr")),
    "convert store -> netcdf4": (_nczarr, _call("convert", "{p}/src.zarr", "{p}/out.nc")),
    "convert store -> zarr3": (_nczarr, _call("convert", "{p}/src.zarr", "{p}/out3.zarr", format="zarr3")),
    "cli convert": (_nczarr, _cli("convert", "{p}/src.zarr", "{p}/out.zarr")),
    "cli convert netcdf4": (_nczarr, _cli("convert", "{p}/src.zarr", "{p}/out.nc")),
    "cli convert zarr3": (_nczarr, _cli("convert", "{p}/src.zarr", "{p}/out3.zarr", "--format", "zarr3")),
    "accessor to_nczarr": (_nothing, _accessor("to_nczarr")),
    "accessor to_zarr_v2": (_nothing, _accessor("to_zarr_v2")),
    "accessor to_zarr": (_nothing, _accessor("to_zarr", zarr_format=3)),
    "region": (_nczarr, _region),
    "to_zarr_v3": (_nothing, _call("to_zarr_v3", _ds(), "{p}/out.zarr")),
    "to_zarr_v3 group into a store": (_v3, _call("to_zarr_v3", _ds(), "{p}/src.zarr", group="g")),
    "to_zarr_v3 append": (_v3, _call("to_zarr_v3", _ds(2, start=4), "{p}/src.zarr", mode="a", append_dim="t")),
    "migrate to a new store": (_nczarr, _call("migrate", "{p}/src.zarr", "{p}/out.zarr")),
    "migrate in place": (_nczarr, _call("migrate", "{p}/src.zarr")),
    "repair": (_nczarr, _call("repair", "{p}/src.zarr")),
}

@pytest.mark.parametrize("case", list(CASES))
def test_every_write_classifies_its_target_through_the_session_once(case: str, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Each write entry point's target goes through ``session.classify`` exactly once (a writer
    that classified it itself, or twice, is what issue 38 took away)."""
    before, write = CASES[case]
    before(tmp_path)
    seen: list[object] = []
    real = session.classify

    def spy(target: object, storage_options: object = None) -> session.Target:
        seen.append(target)
        return real(target, storage_options)  # type: ignore[arg-type]

    monkeypatch.setattr(session, "classify", spy)
    write(tmp_path)
    assert len(seen) == 1, f"{case}: the target was classified {len(seen)} times by the session ({seen})"


def test_a_read_only_command_opens_no_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from xr_zstrings.cli.main import main

    _nczarr(tmp_path)
    opened: list[object] = []

    def refuse(*args: object, **kw: object) -> session.Target:
        opened.append(args)
        raise AssertionError("a read-only command classified a write target")

    monkeypatch.setattr(session, "classify", refuse)
    for command in ("check", "info", "dump", "show"):
        assert main([command, str(tmp_path / "src.zarr")]) in (0, 1), command
    assert opened == []


def test_a_region_session_is_refused_while_another_writer_holds_a_live_claim(tmp_path: Path) -> None:
    """Region writers take no lock (many write disjoint slabs at once), but not while a writer that
    changes the store (here an append of this live process) holds its claim."""
    from xr_zstrings.errors import ConcurrentWriteError

    _nczarr(tmp_path)
    store = tmp_path / "src.zarr"
    with session.write_session(store, "a", kind="append") as claim:
        with pytest.raises(ConcurrentWriteError, match="another writer .* is writing it"), \
                session.write_session(store, "a", kind="region"):
            pass
        claim.finish()
    with session.write_session(store, "a", kind="region") as s:
        assert s.txn is None and s.target.kind == "dir"


def test_a_region_session_is_refused_while_a_whole_store_writer_holds_the_folders_lock(tmp_path: Path) -> None:
    """A replacement of a local folder is written beside it under the folder's writer lock, with no
    claim in the store: a region written meanwhile would be swapped away, so it is refused."""
    from xr_zstrings.errors import ConcurrentWriteError
    from xr_zstrings.io.atomic import target_lock

    _nczarr(tmp_path)
    store = tmp_path / "src.zarr"
    with target_lock(store.resolve(), str(store)), pytest.raises(ConcurrentWriteError, match="holds its writer lock"), \
            session.write_session(store, "a", kind="region"):
        pass
    with session.write_session(store, "a", kind="region") as s:
        assert s.txn is None


def test_the_cli_compressor_choices_are_the_librarys() -> None:
    from xr_zstrings.cli.convert import COMPRESSOR_CHOICES
    from xr_zstrings.write.convert import COMPRESSORS

    assert COMPRESSOR_CHOICES == tuple(COMPRESSORS)


# ---------------------------------------------------------------------------------------------
# layout: only the session opens targets
# ---------------------------------------------------------------------------------------------

#: what opens, locks, recovers or commits a target: the session's business alone
SESSION_ONLY = {"local_target", "local_commit", "target_lock", "recover_swaps", "Transaction", "begun", "target_root"}

#: modules still opening targets themselves, each with why; the list only shrinks (the helper that
#: routes one removes it here: test_the_allow_list_names_only_modules_that_still_need_it says when)
ALLOWED: dict[str, str] = {
    "cli/check.py": "read-only (opens no session): looks beside a local store for what killed writers left",
}


def _scanned() -> list[Path]:
    return sorted([*(PACKAGE / "write").glob("*.py"), *(PACKAGE / "cli").glob("*.py"), PACKAGE / "accessor.py"])


def opens_targets(source: str) -> list[str]:
    """What ``source`` does that only the session may: imports of ``SESSION_ONLY`` names (not
    for type checking) and ``open_store(..., mode=...)`` other than ``mode="r"``."""
    found: list[str] = []
    tree = ast.parse(source)
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
                   for n in ast.walk(node)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and id(node) not in typing_only:
            found += [f"imports {a.name}" for a in node.names if a.name in SESSION_ONLY]
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            mode = next((k.value for k in node.keywords if k.arg == "mode"), None)
            if name == "open_store" and mode is not None and not (isinstance(mode, ast.Constant) and mode.value == "r"):
                found.append(f"open_store(..., mode={ast.unparse(mode)}) at line {node.lineno}")
    return found


@pytest.mark.parametrize("path", _scanned(), ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_only_the_session_opens_targets(path: Path) -> None:
    rel = path.relative_to(PACKAGE).as_posix()
    found = opens_targets(path.read_text(encoding="utf-8"))
    if rel == "write/session.py" or rel in ALLOWED:
        return
    assert not found, f"{rel} opens a target itself ({found}); open it with write.session.write_session"


def test_the_allow_list_names_only_modules_that_still_need_it() -> None:
    """An allowed module that no longer opens targets leaves the list (it only shrinks)."""
    stale = [rel for rel in ALLOWED if not opens_targets((PACKAGE / rel).read_text(encoding="utf-8"))]
    assert not stale, f"remove {stale} from ALLOWED: they open targets through the session now"


def test_the_check_sees_a_writer_opening_its_target() -> None:
    assert opens_targets("from ..io.atomic import local_commit\n") == ["imports local_commit"]
    assert opens_targets("zs = open_store(t, mode='a')\n") == ["open_store(..., mode='a') at line 1"]
    assert opens_targets("zs = open_store(t, mode='r')\nif TYPE_CHECKING:\n    from x import Transaction\n") == []
