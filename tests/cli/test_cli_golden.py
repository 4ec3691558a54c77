"""Golden outputs of the ``zstrings`` command line (issue 18): each case runs one command and
compares its whole stdout, stderr and exit code with ``tests/golden_cli/<case>.txt``, so any change
of wording or layout is a visible diff in review.

Regenerate after an intended change (then read the diff)::

    ZSTRINGS_REGEN_GOLDEN=1 python -m pytest tests/cli/test_cli_golden.py

Outputs are made deterministic: commands run in a temporary directory with relative paths (what is
left of the directory prints as ``<tmp>``), and ``--version`` shows the component names with their
versions masked (they differ between the CI jobs).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from peers import peer_tool

from xr_zstrings.cli import main
from xr_zstrings.sample import sample_path
from xr_zstrings.write.nczarr import to_nczarr
from xr_zstrings.write.zarr3 import to_zarr_v3

GOLDEN = Path(__file__).parent.parent / "golden_cli"
REGEN = os.environ.get("ZSTRINGS_REGEN_GOLDEN") == "1"


def _sample(d: Path) -> None:
    shutil.copytree(sample_path(), d / "stations.zarr")


def _long(d: Path) -> None:
    """40 strings (some with quotes, tabs, new lines, control characters and non-ASCII), floats of
    both widths, a 2-D variable wider than a line, NC_CHAR rows and a scalar."""
    names = [f"name {i} \"q\" \\ tab\tnl\n é\x01" if i % 7 == 0 else f"station{i}" for i in range(40)]
    ds = xr.Dataset(
        {
            "s": ("n", np.array(names, dtype=object)),
            "f": ("n", (np.arange(40) / 4).astype("f4")),
            "d": ("n", np.arange(40) / 3),
            "i8": (("m", "k"), np.arange(90, dtype="i8").reshape(3, 30) * 10**12),
            "c": (("m", "clen"), np.array([list(b"abc" * 10), list(b"x" + b"\0" * 29), [0] * 30], dtype="u1")
                  .view("S1")),
            "sc": ((), 1.5),
        },
        attrs={"title": 'a "quoted"\ttitle', "values": np.array([0.1, 1e20, 1 / 3]),
               "single": np.float32(1.5), "nan": np.float64("nan"), "count": np.int16(3)},
    )
    to_nczarr(ds, d / "long.zarr")


def _fills(d: Path) -> None:
    """The same variables with NaN and numeric fill values in NCZarr and in Zarr v3."""
    ds = xr.Dataset({"f4": ("x", np.array([1.5, np.nan], dtype="f4")),
                     "f8": ("x", np.array([2.5, np.nan])),
                     "i2": ("x", np.array([1, 2], dtype="i2"))})
    ds["f4"].encoding["_FillValue"] = np.float32("nan")
    ds["f8"].encoding["_FillValue"] = np.nan
    ds["i2"].encoding["_FillValue"] = np.int16(-1)
    to_nczarr(ds, d / "fills-nczarr.zarr")
    to_zarr_v3(ds, d / "fills-v3.zarr")


def _not_a_store(d: Path) -> None:
    (d / "notes" / "drafts").mkdir(parents=True)
    (d / "notes" / "todo.txt").write_text("keep me\n")


def _bad_json(d: Path) -> None:
    (d / "bad.zarr").mkdir()
    (d / "bad.zarr" / ".zgroup").write_text('{"zarr_format": "2')


def _undecoded(d: Path) -> None:
    """A pure Zarr v2 store (JSON by hand: no library's defaults) with a complex array, which
    xr_zstrings does not decode (zarr-python reads it), beside an int array."""
    import json

    root = d / "cx.zarr"
    for name, dtype, data in (("n", "<i4", np.arange(3, dtype="<i4")),
                              ("z", "<c8", np.array([1 + 2j, 3, 4j], dtype="<c8"))):
        (root / name).mkdir(parents=True)
        (root / name / ".zarray").write_text(json.dumps({
            "zarr_format": 2, "shape": [3], "chunks": [3], "dtype": dtype, "compressor": None,
            "fill_value": None, "filters": None, "order": "C", "dimension_separator": "."}))
        (root / name / ".zattrs").write_text(json.dumps({"_ARRAY_DIMENSIONS": ["x"]}))
        (root / name / "0").write_bytes(data.tobytes())
    (root / ".zgroup").write_text(json.dumps({"zarr_format": 2}))


def _targets(d: Path) -> None:
    _sample(d)
    for name in ("out.zarr", "out-v3.zarr", "out.zip", "out.nc"):
        fmt = {"out-v3.zarr": ["--format", "zarr3"]}.get(name, [])
        assert main(["convert", "stations.zarr", name, "-q", *fmt]) == 0


def _sample_and_not_a_store(d: Path) -> None:
    _sample(d)
    _not_a_store(d)


#: case name -> (store builder, argv)
CASES: dict[str, tuple[Callable[[Path], None] | None, list[str]]] = {
    "info_sample": (_sample, ["info", "stations.zarr"]),
    "info_fill_nczarr": (_fills, ["info", "fills-nczarr.zarr"]),
    "info_fill_v3": (_fills, ["info", "fills-v3.zarr"]),
    "info_missing": (None, ["info", "missing.zarr"]),
    "info_not_a_store": (_not_a_store, ["info", "notes"]),
    "info_malformed_json": (_bad_json, ["info", "bad.zarr"]),
    "dump_sample": (_sample, ["dump", "stations.zarr"]),
    "dump_header": (_sample, ["dump", "-h", "stations.zarr"]),
    "dump_variables": (_sample, ["dump", "stations.zarr", "-v", "station,/metadata/country"]),
    "dump_slice": (_sample, ["dump", "stations.zarr", "-v", "temperature,time", "-d", "time=1:3",
                             "-d", "station=::2"]),
    "dump_group": (_sample, ["dump", "stations.zarr", "--group", "metadata"]),
    "dump_raw": (_sample, ["dump", "stations.zarr", "--raw", "-v", "time,temperature"]),
    "dump_wrapped": (_long, ["dump", "long.zarr"]),
    "dump_limit": (_long, ["dump", "long.zarr", "-v", "s,i8,c", "--limit", "4"]),
    "dump_width_40": (_long, ["dump", "long.zarr", "-v", "d", "-l", "40"]),
    "dump_bad_slice": (_sample, ["dump", "stations.zarr", "-d", "time"]),
    "dump_unknown_dimension": (_sample, ["dump", "stations.zarr", "-v", "station", "-d", "time=0:2"]),
    "dump_unknown_variable": (_sample, ["dump", "stations.zarr", "-v", "nope"]),
    "convert_truncate_warns": (_sample, ["convert", "stations.zarr", "cut.zarr", "--maxstrlen", "4",
                                         "--on-overflow", "truncate"]),
    "convert_overflow_error": (_sample, ["convert", "stations.zarr", "cut.zarr", "--maxstrlen", "4"]),
    "convert_exists_nczarr": (_targets, ["convert", "stations.zarr", "out.zarr"]),
    "convert_exists_zarr3": (_targets, ["convert", "stations.zarr", "out-v3.zarr", "--format", "zarr3"]),
    "convert_exists_zip": (_targets, ["convert", "stations.zarr", "out.zip"]),
    "convert_exists_netcdf4": (_targets, ["convert", "stations.zarr", "out.nc"]),
    "convert_exists_url": (_targets, ["convert", "stations.zarr", "file://<tmp>/out.zarr#mode=nczarr,file"]),
    "convert_overwrite_not_a_store": (_sample_and_not_a_store, ["convert", "stations.zarr", "notes", "--overwrite"]),
    "version": (None, ["--version"]),
    "info_undecoded_array": (_undecoded, ["info", "cx.zarr"]),
    "check_undecoded_array": (_undecoded, ["check", "cx.zarr"]),
    "check_sample": (_sample, ["check", "stations.zarr"]),
}


def _normalise(text: str, tmp: Path, case: str) -> str:
    text = text.replace(str(tmp.resolve()), "<tmp>").replace(str(tmp), "<tmp>")
    if case == "version":  # versions, paths and platforms differ between the CI jobs
        text = re.sub(r"(?m)^([\w .-]+): .*$", r"\1: <masked>", text)
    return text


def _render(argv: list[str], code: int, out: str, err: str) -> str:
    return (f"$ zstrings {' '.join(argv)}\n[exit {code}]\n--- stdout\n{out}"
            f"{'' if out.endswith(chr(10)) or not out else chr(10)}--- stderr\n{err}")


@pytest.mark.parametrize("case", sorted(CASES))
def test_cli_output_matches_golden(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    setup, argv = CASES[case]
    monkeypatch.chdir(tmp_path)
    if setup is not None:
        setup(Path("."))
    capsys.readouterr()
    argv = [a.replace("<tmp>", str(tmp_path)) for a in argv]
    code = main(argv)
    out, err = capsys.readouterr()
    got = _normalise(_render(argv, code, out, err), tmp_path, case)
    path = GOLDEN / f"{case}.txt"
    if REGEN:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(got, encoding="utf-8")
    assert path.exists(), f"no golden output {path.name}: run with ZSTRINGS_REGEN_GOLDEN=1 to create it"
    assert got == path.read_text(encoding="utf-8"), (
        f"zstrings {' '.join(argv)} printed something else than {path.name}; if intended, regenerate with "
        "ZSTRINGS_REGEN_GOLDEN=1 and review the diff")


def test_every_golden_file_has_a_case() -> None:
    """A case removed (or renamed) leaves no stale golden file behind."""
    assert sorted(p.stem for p in GOLDEN.glob("*.txt")) == sorted(CASES)


# ---------------------------------------------------------------------------------------------
# The peer: Debian's ncdump on a netCDF-4 file holding the same values
# ---------------------------------------------------------------------------------------------



def _data_blocks(cdl: str) -> dict[str, str]:
    """Each variable's data block (`` name = ... ;``, trailing spaces dropped) of CDL text."""
    blocks: dict[str, str] = {}
    lines = [x.rstrip() for x in cdl.split("data:", 1)[1].splitlines()]
    i = 0
    while i < len(lines):
        m = re.match(r"^ (\w+) =", lines[i])
        if m is None:
            i += 1
            continue
        j = i
        while not lines[j].endswith(";"):
            j += 1
        blocks[m.group(1)] = "\n".join(lines[i : j + 1])
        i = j + 1
    return blocks


def test_dump_data_section_is_what_ncdump_prints(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``zstrings dump`` of a store and ``ncdump`` of the netCDF-4 file ``zstrings convert`` made from
    it print the same data blocks: wrapping, indentation, string escapes, NC_CHAR rows, ``_`` for
    fill values. (Floats here have short exact forms: ncdump rounds others to 7/15 digits, dump
    prints the shortest exact form, as docs/cli.md says.)"""
    import subprocess

    ncdump = peer_tool("ncdump")

    names = [f"name {i} \"q\" \\ tab\tnl\n é\x01" if i % 7 == 0 else f"station{i}" for i in range(40)]
    ds = xr.Dataset({
        "s": ("n", np.array(names, dtype=object)),
        "f": ("n", (np.arange(40) / 4).astype("f4")),
        "d": ("n", np.arange(40) * 1.5),
        "i8": (("m", "k"), np.arange(90, dtype="i8").reshape(3, 30) * 10**12),
        "s2": (("m", "k"), np.array([f"v{i}" for i in range(90)], dtype=object).reshape(3, 30)),
        "t": (("m", "two", "three"), np.arange(18, dtype="i2").reshape(3, 2, 3)),
        "code": (("m", "clen"), np.array([list(b"ZRH"), list(b"x\0\0"), [0, 0, 0]], dtype="u1").view("S1")),
        "sc": ((), 2.5),
    })
    ds["f"].values[3] = np.nan  # written as the fill value: both print '_'
    store, nc = tmp_path / "same.zarr", tmp_path / "same.nc"
    to_nczarr(ds, store)
    assert main(["convert", str(store), str(nc), "-q"]) == 0
    capsys.readouterr()
    assert main(["dump", str(store), "--raw"]) == 0
    ours = _data_blocks(capsys.readouterr().out)
    theirs = _data_blocks(subprocess.run([ncdump, str(nc)], check=True, capture_output=True,
                                         text=True).stdout)
    assert sorted(ours) == sorted(theirs) == sorted(ds.variables)
    for name in ours:
        assert ours[name] == theirs[name], name
