"""Which netcdf-c reads what ``to_nczarr`` writes: the reader x target matrix, measured.

Shared by ``tests/interop/test_netcdf_c_versions.py`` (which asserts every cell) and
``scripts/netcdf_c_matrix.py`` (which writes the table into docs/netcdf-c-versions.md), so the docs
show exactly what the tests see.

Readers: the netcdf-c inside each netCDF4 wheel that installs on Python 3.11 (side virtual
environments with numpy<2, ``peer_venvs.py``: created once under ``XR_ZSTRINGS_PEER_VENVS``, default
``~/.cache/xr_zstrings/peer-venvs``, behind a file lock so pytest-xdist workers share them), the
project's own netCDF4 (netcdf-c 4.10.1), and Debian's ``ncdump`` when ``netcdf-bin`` is installed.
Every read runs in its own subprocess (``tests/golden/make_golden.py --read-store``), because
netcdf-c 4.9.0 aborts the whole process on stores it cannot read.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr
from peer_venvs import PEER_WHEELS, base_python, peer_python, venv_root  # noqa: F401  (re-exported)

from xr_zstrings.formats.netcdf_c import DEFAULT_LAYOUT, NETCDF_C, netcdf_c_for

HERE = Path(__file__).parent
MAKE_GOLDEN = HERE / "golden" / "make_golden.py"

#: rows of the matrix: reader id -> label
READERS = {**{w: f"netcdf-c {c} (netCDF4 {w})" for w, c in PEER_WHEELS.items()},
           "current": "netcdf-c {current} (netCDF4 {wheel}, this venv)",
           "ncdump": "Debian 12 `ncdump` (netcdf-bin {version})"}


def _targets() -> dict[str, str | None]:
    """One column per layout to_nczarr writes, each named by a netcdf-c of the row that reads it
    (formats.netcdf_c.NETCDF_C: 4.9.0, 4.10), the default layout's as "default"; and netcdf-c's own."""
    out: dict[str, str | None] = {}
    seen = set()
    for r in NETCDF_C:
        if r.writes.name not in seen:
            seen.add(r.writes.name)
            out.update({"default": None} if r.writes is DEFAULT_LAYOUT else {r.example: r.example})
    return {**out, "netcdf-c": "netcdf-c"}


#: columns: target id -> to_nczarr's netcdf_c (None: the default); "netcdf-c" = netcdf-c 4.10's own output
TARGETS = _targets()
TARGET_LABELS = {**{t: f"`netcdf_c=\"{t}\"`" for t in TARGETS},
                 "default": f"default (`netcdf_c=None`, {DEFAULT_LAYOUT.name} layout)",
                 "netcdf-c": "netcdf-c {current}'s own output"}


def promised() -> dict[str, set[str]]:
    """Which readers each target is for (the promise to_nczarr's docstring makes): the peers of
    every netcdf-c row that reads the layout the target writes."""
    out = {}
    for t, netcdf_c in TARGETS.items():
        if netcdf_c == "netcdf-c":
            continue
        layout = netcdf_c_for(netcdf_c).writes if netcdf_c else DEFAULT_LAYOUT
        out[t] = {peer for r in NETCDF_C if r.reads_layout(layout) for peer, _ in r.peers}
    return out


def check_rows() -> dict[str, list[str]]:
    """The rows of ``zstrings check`` and the readers (not ncdump) each stands for."""
    return {r.label: [peer for peer, _ in r.peers if peer != "ncdump"] for r in NETCDF_C}


# ---------------------------------------------------------------------------------------------
# Reading a store with one netcdf-c, in a subprocess
# ---------------------------------------------------------------------------------------------


@dataclass
class Read:
    ok: bool
    result: dict[str, Any] | None = None
    error: str = ""


def _tail(text: str) -> str:
    """The error in a reader's stderr, without paths: ``NetCDF: NCZarr error``, ``assertion in zclose.c``."""
    import re

    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):  # the exception or the assertion, not the traceback frames
        m = re.search(r"/(\w+\.c):\d+: \w+: Assertion", ln)
        if m:
            return f"assertion in {m[1]}"
        m = re.search(r"(NetCDF: [^:'\"]+)", ln)
        if m:
            return m[1].strip()
        if "Error" in ln:
            return re.sub(r"'?(file://|/)\S+", "", ln)[:120]
    return (lines[-1] if lines else "")[:120]


def read_with(reader: str, store: Path, workdir: Path, mode: str = "nczarr") -> Read:
    """What netcdf-c ``reader`` (a wheel version or "current") reads from ``store`` (``mode``:
    netcdf-c's URL mode list before ``file``: ``nczarr``, ``zarr``, ``nczarr,consolidated``)."""
    python = sys.executable if reader == "current" else str(peer_python(reader))
    out = workdir / f"read-{reader}-{mode.replace(',', '-')}-{store.name}.json"
    proc = subprocess.run([python, str(MAKE_GOLDEN), "--read-store", str(store), mode, str(out)],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        crash = {-6: "process aborts", -11: "segmentation fault"}.get(proc.returncode)
        detail = _tail(proc.stderr)
        why = f"{crash} ({detail})" if crash and detail else crash or detail
        return Read(False, error=why)
    return Read(True, json.loads(out.read_text()))


def ncdump_version() -> str | None:
    exe = shutil.which("ncdump")
    if exe is None:
        return None
    proc = subprocess.run([exe], capture_output=True, text=True)
    for ln in (proc.stdout + proc.stderr).splitlines():
        if "netcdf library version" in ln.lower():
            return ln.split("version", 1)[1].split()[0]
    return "?"


def read_with_ncdump(store: Path) -> Read:
    url = f"file://{store.absolute()}#mode=nczarr,file"
    proc = subprocess.run(["ncdump", url], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        return Read(False, error={-6: "process aborts", -11: "segmentation fault"}.get(
            proc.returncode, _tail(proc.stderr) or f"exit {proc.returncode}"))
    return Read(True, {"cdl": proc.stdout})


# ---------------------------------------------------------------------------------------------
# What we write
# ---------------------------------------------------------------------------------------------

STRINGS = ["a", "héllo", "中文字", "😀x", ""]


def matrix_groups() -> dict[str, xr.Dataset]:
    """Strings (multibyte, empty), NC_CHAR on request, numbers with fill values and missing chunks,
    a scalar, typed attributes (non-ASCII text too), nested groups with an inherited dimension."""
    root = xr.Dataset(
        {"names": ("x", np.array(STRINGS), {"long_name": "station name"}),
         "code": ("x", np.array(["ab", "cd", "é", "", "xyz"]), {}, {"nc_type": "NC_CHAR"}),
         "temp": (("t", "x"), np.array([[1.5, np.nan, 3, 4, 5], [6, 7, 8, 9, 10]], "f4"),
                  {"units": "K", "valid_range": np.array([0, 400], "f4")}, {"_FillValue": np.float32(-999)}),
         "count": ("x", np.arange(5, dtype="i8") * 10**10),
         "height": ((), np.float64(2.5), {"units": "m"})},
        attrs={"title": "stations", "ints": np.array([1, -2, 3], "i2"), "fl": np.float32(1.5),
               "unicode": "héllo 中文"},
    )
    sub = xr.Dataset({"labels": ("y", np.array(["ß", "ok", "中"])), "uses_x": ("x", np.arange(5, dtype="i2"))},
                     attrs={"level": "sub"})
    return {"/": root, "/sub": sub}


def write_target(target: str, path: Path) -> list[str]:
    """Write the matrix dataset for one column; return the warnings it gave."""
    groups = matrix_groups()
    if target == "netcdf-c":
        write_with_netcdf_c(groups, path)
        return []
    from xr_zstrings import to_nczarr

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        to_nczarr(groups, path, netcdf_c=TARGETS[target])
    return [str(w.message) for w in caught]


def write_with_netcdf_c(groups: dict[str, xr.Dataset], path: Path) -> None:
    """The same content written by netcdf-c itself (the project's netCDF4)."""
    import netCDF4

    ds = netCDF4.Dataset(f"file://{path.absolute()}#mode=nczarr,file", "w")
    try:
        for gpath, gds in groups.items():
            g = ds if gpath == "/" else ds.createGroup(gpath.strip("/"))
            for k, v in gds.attrs.items():
                g.setncattr(k, v)
            for d, n in gds.sizes.items():
                if gpath == "/" or d not in groups["/"].sizes:
                    g.createDimension(d, n)
            for name, var in gds.variables.items():
                data = var.values
                if data.dtype.kind == "U" and var.encoding.get("nc_type") == "NC_CHAR":
                    width = max(len(s.encode()) for s in data.tolist()) or 1
                    cdim = f"string{width}"
                    g.createDimension(cdim, width)
                    v = g.createVariable(name, "S1", var.dims + (cdim,))
                    v.set_var_chunk_cache(size=0, nelems=0)
                    v._Encoding = "utf-8"
                    v.set_auto_chartostring(False)
                    v[:] = np.array([s.encode() for s in data.tolist()], f"S{width}").view("S1").reshape(-1, width)
                elif data.dtype.kind == "U":
                    v = g.createVariable(name, str, var.dims)
                    v.set_var_chunk_cache(size=0, nelems=0)
                    v[:] = data.astype(object)
                else:
                    fill = var.encoding.get("_FillValue")
                    v = g.createVariable(name, data.dtype, var.dims, fill_value=fill)
                    v.set_var_chunk_cache(size=0, nelems=0)
                    if var.ndim:
                        v[:] = np.where(np.isnan(data), fill, data) if data.dtype.kind == "f" and fill is not None \
                            else data
                    else:
                        v.assignValue(data)
                for k, a in var.attrs.items():
                    v.setncattr(k, a)
    finally:
        ds.close()


# ---------------------------------------------------------------------------------------------
# Comparing what a netcdf-c read with what was written
# ---------------------------------------------------------------------------------------------

BOOKKEEPING = {"_nczarr_maxstrlen", "_nczarr_default_maxstrlen", "_Encoding", "_FillValue", "_NCProperties"}


def _bytes(v: Any) -> bytes:
    return v["__bytes__"].encode("latin-1") if isinstance(v, dict) else b""


def _joined(raw: Any) -> Any:
    """NC_CHAR raw values (lists of {"__bytes__": c}) joined per row and decoded, as xarray does."""
    if raw and isinstance(raw[0], list):
        return [_joined(r) for r in raw]
    return b"".join(_bytes(c) for c in raw).rstrip(b"\x00").decode("utf-8")


def _flat(v: Any) -> list[Any]:
    if isinstance(v, list):
        return [y for x in v for y in _flat(x)]
    return [v]


def compare(groups: dict[str, xr.Dataset], got: dict[str, Any]) -> list[str]:
    """What the reader lost or changed, as short phrases; [] when it read everything as written."""
    changes: list[str] = []
    read = got["groups"]
    if set(read) != set(groups):
        changes.append(f"groups {sorted(read)} instead of {sorted(groups)}")
    for gpath, ds in groups.items():
        rg = read.get(gpath)
        if rg is None:
            continue
        for k, v in ds.attrs.items():
            ra = rg["attrs"].get(k)
            if ra is None or _flat(ra.get("value")) != _flat(np.asarray(v).tolist()):
                changes.append(f"attribute {gpath.rstrip('/')}/{k}: {ra and ra.get('value')!r}")
        for name, var in ds.variables.items():
            where = f"{gpath.rstrip('/')}/{name}"
            rv = rg["variables"].get(name)
            if rv is None:
                changes.append(f"{where} missing")
                continue
            is_str = var.dtype.kind == "U"
            char_stored = rv["dtype"] == "|S1"
            dims = list(rv["dims"])
            values = rv["values_decoded"]
            if is_str and char_stored:
                dims = dims[:-1]
                values = _joined(rv["values"])
                if var.encoding.get("nc_type") != "NC_CHAR":
                    changes.append("strings as NC_CHAR")
            if rv["shape"] == [1] and var.ndim == 0:
                changes.append("scalars as 1-element arrays")
                dims, values = [], values[0] if isinstance(values, list) else values
            if dims != list(var.dims):
                changes.append(f"{where} dims {dims}")
            if not is_str and not char_stored and var.dtype.kind == "f":
                want = np.where(np.isnan(var.values), None, var.values).tolist()
            else:
                want = var.values.tolist()
            if values != want:
                changes.append(f"{where} values {str(values)[:60]}")
            for k, a in var.attrs.items():
                ra = rv["attrs"].get(k)
                if ra is None or _flat(ra.get("value")) != _flat(np.asarray(a).tolist()):
                    changes.append(f"attribute {where}:{k}")
    return sorted(set(changes))


def compare_cdl(groups: dict[str, xr.Dataset], cdl: str) -> list[str]:
    """ncdump's CDL holds every variable, group, attribute and (quoted) string value written."""
    changes = []
    for gpath, ds in groups.items():
        if gpath != "/" and f"group: {gpath.strip('/').split('/')[-1]}" not in cdl:
            changes.append(f"group {gpath} missing")
        for k in ds.attrs:
            if f":{k} = " not in cdl:
                changes.append(f"attribute {gpath.rstrip('/')}/{k} missing")
        for name, var in ds.variables.items():
            if f" {name}(" not in cdl and f" {name} ;" not in cdl:
                changes.append(f"{gpath.rstrip('/')}/{name} missing")
            if var.dtype.kind == "U":
                for s in var.values.reshape(-1).tolist():
                    octal = "".join(c if ord(c) < 128 else "".join(f"\\{b:03o}" for b in c.encode()) for c in s)
                    if s and f'"{s}"' not in cdl and f'"{octal}"' not in cdl:
                        changes.append(f"{gpath.rstrip('/')}/{name} value {s!r}")
    return changes


# ---------------------------------------------------------------------------------------------
# The matrix
# ---------------------------------------------------------------------------------------------


def cell(reader: str, store: Path, workdir: Path, groups: dict[str, xr.Dataset]) -> str:
    """"reads", "reads; <what changes>" or "fails: <error>" for one reader on one store."""
    if reader == "ncdump":
        r = read_with_ncdump(store)
        if not r.ok:
            return f"fails: {r.error}"
        assert r.result is not None
        diff = compare_cdl(groups, r.result["cdl"])
    else:
        r = read_with(reader, store, workdir)
        if not r.ok:
            return f"fails: {r.error}"
        assert r.result is not None
        diff = compare(groups, r.result)
    return "reads" if not diff else "reads; " + "; ".join(diff)


def available_readers() -> list[str]:
    readers = [*PEER_WHEELS, "current"]
    if ncdump_version() is not None:
        readers.append("ncdump")
    return readers


def column(target: str, workdir: Path) -> dict[str, str]:
    """Every reader's cell for one target (the store written once)."""
    store = workdir / f"target-{target}.zarr"
    shutil.rmtree(store, ignore_errors=True)
    write_target(target, store)
    groups = matrix_groups()
    return {reader: cell(reader, store, workdir, groups) for reader in available_readers()}


def reader_label(reader: str) -> str:
    import netCDF4

    return READERS[reader].format(current=netCDF4.__netcdf4libversion__, wheel=netCDF4.__version__,
                                  version=ncdump_version())


def render(matrix: dict[str, dict[str, str]]) -> str:
    """The markdown table: rows readers, columns targets."""
    import netCDF4

    cols = list(matrix)
    head = "| reader | " + " | ".join(TARGET_LABELS[c].format(current=netCDF4.__netcdf4libversion__)
                                        for c in cols) + " |"
    lines = [head, "|" + "---|" * (len(cols) + 1)]
    readers = [r for r in READERS if all(r in matrix[c] for c in cols)]
    for r in readers:
        lines.append(f"| {reader_label(r)} | " + " | ".join(matrix[c][r].replace("|", "\\|") for c in cols) + " |")
    return "\n".join(lines) + "\n"


START, END = "<!-- netcdf-c matrix: generated by scripts/netcdf_c_matrix.py -->", "<!-- end of matrix -->"


def docs_table(doc: Path) -> str:
    text = doc.read_text(encoding="utf-8")
    return text.split(START, 1)[1].split(END, 1)[0].strip("\n") + "\n"
