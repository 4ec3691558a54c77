"""Names and paths (issue 15, item 6): writers refuse, before writing anything, a group, variable
or dimension name that engine="zstrings" or netcdf-c cannot open; ``zstrings check`` agrees with
netcdf-c; writers never follow a symbolic link out of the target.

Every accepted name is read back by both readers (netcdf-c in a subprocess: some names crash it),
and the rules themselves are checked against netcdf-c on stores zarr-python writes.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
from peers import nc_url

from xr_zstrings import to_nczarr
from xr_zstrings.cli import main as cli_main
from xr_zstrings.errors import ZStringsError
from xr_zstrings.write.convert import convert
from xr_zstrings.write.zarr3 import to_zarr_v3

# odd names: metadata object names, relative paths, separators of every platform, NUL and other
# control characters, white space, leading punctuation, Unicode (composed and not), long names
NAMES = [
    ".zarray", ".zattrs", ".zgroup", ".zmetadata", "zarr.json", ".nczarr", ".nczgroup", ".nczvar", ".nczattr",
    "..", ".", "...", "..a", ".a", "a.", "a..b", "a/b", "a\\b", "a\x00b", "a:b", "C:", "a b", "a ", " a", "é ",
    "-a", "+a", "~a", "a\tb", "a\nb", "a\x7fb", "a\x01", "é", "名前", "a\u00a0", "𝔘", "e\u0301", "\u00e9\u0301",
    "a#b", "a?b", "a*b", "a|b", "a<b", "a>b", 'a"b', "a'b", "a%b", "a&b", "a=b", "a,b", "a;b", "a[b]", "a{b}",
    "a@b", "a!b", "a$b", "a^b", "a`b", "CON", "nul", "_a", "__a", "0a", "0", "c", "a\u200b", "a\u2028b",
    "\ufeffa", "a" * 255, "a" * 256, "a" * 257, "é" * 128, "\ud800",
]
IDS = [repr(n)[1:-1][:24] for n in NAMES]
VALUES = np.array(["α", "bc", ""], dtype=object)

# reads the names netcdf-c sees in each store given on stdin (one per line), one JSON line each;
# a crash (some names make netcdf-c segfault) ends the process: the caller restarts after it
_NC_LISTER = r"""
import json, sys, netCDF4
for line in sys.stdin:
    url = line.rstrip("\n")
    print(json.dumps({"url": url, "start": True}), flush=True)
    try:
        ds = netCDF4.Dataset(url, "r")
    except Exception as e:
        print(json.dumps({"url": url, "error": str(e)[:200]}), flush=True)
        continue
    out = []
    def walk(g, path):
        out.append(["group", path])
        for d in g.dimensions:
            out.append(["dimension", d])
        for name, v in g.variables.items():
            v.set_auto_mask(False)
            vals = v[...]
            out.append(["variable", name, [x if isinstance(x, str) else repr(x) for x in vals.ravel().tolist()]])
        for name, c in g.groups.items():
            walk(c, path.rstrip("/") + "/" + name)
    walk(ds, "/")
    ds.close()
    print(json.dumps({"url": url, "names": out}), flush=True)
"""


def netcdf_c_names(urls: list[str]) -> dict[str, Any]:
    """url -> list of what netcdf-c sees, or an error string (also for a crash)."""
    result: dict[str, Any] = {}
    todo = list(urls)
    while todo:
        r = subprocess.run([sys.executable, "-c", _NC_LISTER], input="\n".join(todo) + "\n",
                           capture_output=True, text=True, timeout=300)
        started = None
        for line in r.stdout.splitlines():
            msg = json.loads(line)
            if msg.get("start"):
                started = msg["url"]
            else:
                result[msg["url"]] = msg.get("names", msg.get("error"))
                started = None
        if started is not None:  # crashed on this one
            result[started] = f"netcdf-c crashed (exit {r.returncode})"
        todo = [u for u in todo if u not in result]
        if r.returncode == 0 and todo:
            raise AssertionError(f"netcdf-c lister skipped {todo}: {r.stderr[-500:]}")
    return result


def _dataset(role: str, name: str) -> Any:
    if role == "variable":
        return xr.Dataset({name: ("x", VALUES)})
    if role == "dimension":
        return xr.Dataset({"v": (name, VALUES)})
    return {"/": xr.Dataset(), "/" + name: xr.Dataset({"v": ("x", VALUES)})}


def _found_by_zstrings(path: Path, role: str, name: str) -> bool:
    groups = xr.open_groups(path, engine="zstrings")
    if role == "group":
        return ("/" + name) in groups and groups["/" + name]["v"].values.tolist() == VALUES.tolist()
    ds = groups["/"]
    if role == "variable":
        return name in ds.variables and ds[name].values.tolist() == VALUES.tolist()
    return name in ds.dims and ds["v"].values.tolist() == VALUES.tolist()


def _found_by_netcdf_c(seen: Any, role: str, name: str) -> bool:
    if isinstance(seen, str):
        return False
    if role == "group":
        return ["group", "/" + name] in seen
    if role == "variable":
        return ["variable", name, VALUES.tolist()] in seen
    return ["dimension", name] in seen


@pytest.mark.parametrize("role", ["variable", "dimension", "group"])
@pytest.mark.parametrize("fmt", ["nczarr", "zarr2"])
def test_to_nczarr_writes_only_names_both_readers_open(tmp_path: Path, fmt: str, role: str) -> None:
    accepted: dict[str, Path] = {}
    failures: list[str] = []
    for i, name in enumerate(NAMES):
        target = tmp_path / f"{i}.zarr"
        try:
            to_nczarr(_dataset(role, name), target, format=fmt)
        except ZStringsError as e:
            msg = str(e)
            # the error names the culprit and a rule, and nothing was written
            if repr(name) not in msg and repr("/" + name) not in msg:
                failures.append(f"{name!r}: refused without naming it: {msg}")
            if target.exists():
                failures.append(f"{name!r}: refused, but {target.name} was created")
            continue
        accepted[name] = target
        if not _found_by_zstrings(target, role, name):
            failures.append(f"{name!r}: written, but engine='zstrings' does not read it back")
    mode = "nczarr" if fmt == "nczarr" else "zarr"
    seen = netcdf_c_names([nc_url(p, mode) for p in accepted.values()])
    for name, p in accepted.items():
        got = seen[nc_url(p, mode)]
        if not _found_by_netcdf_c(got, role, name):
            failures.append(f"{name!r}: written, but netcdf-c does not read it back: {str(got)[:200]}")
    assert not failures, "\n".join(failures)
    # the table is broad in both directions: many names pass, many are refused
    assert len(accepted) >= 30 and len(NAMES) - len(accepted) >= 20


@pytest.mark.parametrize("role", ["variable", "dimension", "group"])
def test_to_zarr_v3_writes_only_names_readers_open(tmp_path: Path, role: str) -> None:
    import zarr

    failures: list[str] = []
    accepted = 0
    for i, name in enumerate(NAMES):
        target = tmp_path / f"{i}.zarr"
        obj = _dataset(role, name)
        try:
            tree = (xr.DataTree(children={name: xr.DataTree(obj["/" + name])}) if isinstance(obj, dict)
                    else obj)
        except (ValueError, KeyError, TypeError, RecursionError):  # ('..': xarray recurses)
            continue  # xarray itself refuses such a node name: nothing for our writer to do
        try:
            to_zarr_v3(tree, target)
        except ZStringsError as e:
            if repr(name) not in str(e) and repr("/" + name) not in str(e):
                failures.append(f"{name!r}: refused without naming it: {e}")
            if target.exists():
                failures.append(f"{name!r}: refused, but {target.name} was created")
            continue
        accepted += 1
        if not _found_by_zstrings(target, role, name):
            failures.append(f"{name!r}: written, but engine='zstrings' does not read it back")
        g = zarr.open_group(target, mode="r")
        path = name if role == "variable" else f"{name}/v" if role == "group" else "v"
        try:
            arr = g[path]
            ok = arr[...].tolist() == VALUES.tolist()
            if role == "dimension":
                ok = ok and list(arr.metadata.dimension_names) == [name]
        except Exception as e:  # reported below
            ok, path = False, f"{path} ({type(e).__name__}: {e})"
        if not ok:
            failures.append(f"{name!r}: written, but zarr-python does not read {path!r} back")
    assert not failures, "\n".join(failures)
    assert accepted >= 50  # v3 has no netcdf-c rules: only what no reader can open is refused


def test_append_and_convert_refuse_before_writing(tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    to_nczarr(xr.Dataset({"v": ("x", VALUES)}), store)
    before = sorted(p.relative_to(store).as_posix() for p in store.rglob("*"))
    with pytest.raises(ZStringsError, match=r"variable '/-bad'.*starts with '-'"):
        to_nczarr(xr.Dataset({"-bad": ("x", VALUES)}), store, mode="a")
    with pytest.raises(ZStringsError, match=r"variable '/\.zarray'"):
        to_nczarr(xr.Dataset({".zarray": ("x", VALUES)}), store, mode="a")
    assert sorted(p.relative_to(store).as_posix() for p in store.rglob("*")) == before
    # a store netcdf-c cannot read (zarr-python wrote a name netcdf-c refuses) -> a netCDF file
    odd = tmp_path / "odd.zarr"
    xr.Dataset({"a ": ("x", np.arange(3))}).to_zarr(odd, zarr_format=2, consolidated=False)
    nc = tmp_path / "out.nc"
    with pytest.raises(ZStringsError, match=r"variable '/a '.*white space"):
        convert(odd, nc)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["odd.zarr", "s.zarr"]  # no file, no leftover
    with pytest.raises(ZStringsError, match=r"variable '/a '"):
        convert(odd, tmp_path / "copy.zarr")
    assert not (tmp_path / "copy.zarr").exists()


def _check_names(store: Path) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli_main(["check", str(store)])
    return code, out.getvalue()


def test_zstrings_check_agrees_with_netcdf_c_on_names(tmp_path: Path) -> None:
    """zarr-python writes what our writers refuse; netcdf-c's verdict on each store is what
    ``zstrings check`` must say (a name problem exactly where netcdf-c cannot open the name)."""
    stores: dict[str, tuple[str, str, Path]] = {}
    for i, name in enumerate(NAMES):
        if "/" in name or "\\" in name:
            continue  # zarr-python reads both as its own path separator
        for role in ("variable", "dimension", "group"):
            p = tmp_path / f"{role[0]}{i}.zarr"
            ds = (xr.Dataset({name: ("x", np.arange(3))}) if role == "variable"
                  else xr.Dataset({"v": (name if role == "dimension" else "x", np.arange(3))}))
            try:
                if role == "group":
                    xr.Dataset().to_zarr(p, zarr_format=2, consolidated=False)
                ds.to_zarr(p, zarr_format=2, consolidated=False, group=name if role == "group" else None,
                           mode="a" if role == "group" else "w-",
                           encoding={k: {"compressors": None} for k in ds.data_vars})
            except Exception:  # names zarr-python itself cannot write: not this test's case
                continue
            stores[nc_url(p, "zarr")] = (role, name, p)
    assert len(stores) >= 90
    seen = netcdf_c_names(list(stores))
    disagree: list[str] = []
    for url, (role, name, p) in stores.items():
        got = seen[url]
        nc_ok = (not isinstance(got, str)
                 and any(e[0] == role and e[1] == (name if role != "group" else "/" + name) for e in got))
        try:
            code, text = _check_names(p)
        except Exception as e:  # a name our reader refuses ('a\\b'): check cannot open it
            code, text = 2, f"{type(e).__name__}: {e}"
        flagged = f"{role} name {name!r}" in text
        if code != 2 and role != "dimension" and name not in (
                xr.open_dataset(p, engine="zstrings").variables if role == "variable"
                else {k.strip("/") for k in xr.open_groups(p, engine="zstrings")}):
            # engine="zstrings" does not list it ('.a', 'zarr.json': metadata-like names, which our
            # writers refuse): check cannot flag what the reader does not see
            continue
        if code == 2:  # our reader refuses the store: netcdf-c must not read it either
            if nc_ok:
                disagree.append(f"{role} {name!r}: zstrings check cannot open it ({text[:120]}), netcdf-c reads it")
        elif flagged == nc_ok:
            disagree.append(f"{role} {name!r}: check {'flags' if flagged else 'passes'} it, netcdf-c "
                            f"{'reads' if nc_ok else 'does not read'} it ({str(got)[:120]})")
    assert not disagree, "\n".join(disagree)


# ---------------------------------------------------------------------------------------------
# symbolic links
# ---------------------------------------------------------------------------------------------


def _tree(path: Path) -> list[str]:
    return sorted(p.relative_to(path).as_posix() for p in path.rglob("*"))


@pytest.mark.skipif(not hasattr(os, "symlink") or sys.platform == "win32", reason="needs symbolic links")
@pytest.mark.parametrize("link", ["group", "array"])
def test_append_never_writes_through_a_link_out_of_the_store(tmp_path: Path, link: str) -> None:
    store = tmp_path / "s.zarr"
    outside = tmp_path / "outside"
    tree = {"/": xr.Dataset({"v": ("t", VALUES)}), "/g": xr.Dataset({"w": ("t", VALUES)})}
    to_nczarr(tree, store, unlimited_dims=["t"])
    # the group (or one array) folder is replaced by a link to a copy outside the store
    moved = store / "g" if link == "group" else store / "v"
    moved.rename(outside)
    moved.symlink_to(outside, target_is_directory=True)
    before_out, before_in = _tree(outside), _tree(store)
    more = {"/": xr.Dataset({"v": ("t", VALUES)}), "/g": xr.Dataset({"w": ("t", VALUES)})}
    with pytest.raises(ZStringsError, match="symbolic link") as e:
        to_nczarr(more, store, mode="a", append_dim="t")
    assert str(outside) in str(e.value)
    with pytest.raises(ZStringsError, match="symbolic link"):
        to_nczarr({"/": xr.Dataset({"new": ("t", VALUES)}), "/g": xr.Dataset({"new": ("t", VALUES)})},
                  store, mode="a")
    assert _tree(outside) == before_out  # nothing written outside
    assert _tree(store) == before_in  # and nothing inside either: refused before writing


@pytest.mark.skipif(not hasattr(os, "symlink") or sys.platform == "win32", reason="needs symbolic links")
def test_links_inside_the_store_are_refused_too(tmp_path: Path) -> None:
    """Appends change a hard-link copy of the store, which cannot hold a link: refused, not lost."""
    store = tmp_path / "s.zarr"
    to_nczarr(xr.Dataset({"v": ("t", VALUES)}), store, unlimited_dims=["t"])
    (store / "v").rename(store / "v-real")
    (store / "v").symlink_to("v-real", target_is_directory=True)
    before = _tree(store)
    with pytest.raises(ZStringsError, match="symbolic link"):
        to_nczarr(xr.Dataset({"v": ("t", VALUES)}), store, mode="a", append_dim="t")
    assert _tree(store) == before
    assert xr.open_dataset(store, engine="zstrings")["v"].values.tolist() == VALUES.tolist()
