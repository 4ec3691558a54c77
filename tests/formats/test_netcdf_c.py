"""The one table of NCZarr layouts and netcdf-c releases (formats/netcdf_c.py): what every part asks.

Whether each row is *true* is measured with the real netcdf-c releases in
tests/interop/test_netcdf_c_versions.py (which derives its matrix from the same rows); these tests
hold the table's own consistency and that every consumer asks it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from xr_zstrings import UnsupportedError, ZStringsError
from xr_zstrings.formats import netcdf_c as t

ROOT = Path(__file__).resolve().parents[2]


def test_importable_with_the_standard_library_alone():
    """tests/peer_venvs.py imports it with CI's system Python before any environment exists."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import xr_zstrings.formats.netcdf_c as t; "
            "assert not {'numpy', 'xarray', 'zarr'} & set(sys.modules), sorted(sys.modules); "
            "print(len(t.NETCDF_C))")
    r = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(ROOT)], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == str(len(t.NETCDF_C)), r.stderr


@pytest.mark.parametrize(("version", "row", "layout"), [
    ("4.9.0", "4.9.0", "4.9.0"), ("4.9.1", "4.9.1-4.9.3", "4.9.1"), ("4.9.2", "4.9.1-4.9.3", "4.9.1"),
    ("4.9.3-development", "4.9.1-4.9.3", "4.9.1"), ("4.9.4", ">= 4.9.4", "4.9.4"), ("4.10", ">= 4.9.4", "4.9.4"),
    ("4.10.1", ">= 4.9.4", "4.9.4"), ("5.0", ">= 4.9.4", "4.9.4"),
])
def test_a_version_finds_its_row_and_the_layout_written_for_it(version, row, layout):
    r = t.netcdf_c_for(version)
    assert (r.label, r.writes.name) == (row, layout)
    assert r.reads_layout(r.writes)  # a target is read by the netcdf-c it is for


def test_versions_it_cannot_write_for_are_refused():
    with pytest.raises(UnsupportedError, match="before 4.9.0 reads NCZarr 1.0"):
        t.netcdf_c_for("4.8.1")
    with pytest.raises(ZStringsError, match=r"Invalid netcdf_c='latest'.*'4\.9\.2' \(Ubuntu 24\.04\)"):
        t.netcdf_c_for("latest")


def test_rows_run_oldest_to_newest_and_the_newest_reads_the_default():
    versions = [r.version for r in t.NETCDF_C]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    assert t.NETCDF_C[-1].reads_layout(t.DEFAULT_LAYOUT)
    assert t.netcdf_c_for(t.DEFAULT_NETCDF_C).writes is t.DEFAULT_LAYOUT


def test_layouts_have_distinct_names_generations_and_places():
    assert len({x.name for x in t.LAYOUTS}) == len({x.generation for x in t.LAYOUTS}) == len(t.LAYOUTS)
    for what in ("superblock", "group", "array", "attr"):
        found = [p for x in t.LAYOUTS for p in getattr(x, what)]
        assert len(t.places(what)) == len(set(found))
    for x in t.LAYOUTS:
        assert x.writes_as is None or t.layout_named(x.writes_as).writable
        assert t.layout_of_generation(x.generation) is x
    # every row writes a layout it reads; every writable layout is some row's
    assert {x.name for x in t.LAYOUTS if x.writable} == {r.writes.name for r in t.NETCDF_C}


def test_each_writable_layout_marks_scalars_for_the_netcdf_c_that_read_it():
    """The scalar marker a layout writes carries what every reading netcdf-c needs (the 4.9.1
    layout both forms: 4.9.1-4.9.3 and 4.9.4+ each segfault on the other's alone)."""
    for x in t.LAYOUTS:
        if not x.writable:
            continue
        info = x.array_info([], scalar=True)
        for r in t.NETCDF_C:
            if r.reads_layout(x) and r.scalar_marker is not None:
                key, value = r.scalar_marker
                assert info.get(key) == value, (x.name, r.label, info)


def test_peer_wheels_are_the_rows_peers():
    assert t.peer_wheels() == {"1.6.2": "4.9.0", "1.6.3": "4.9.1", "1.6.5": "4.9.3-development",
                               "1.7.1.post1": "4.9.3-development (later snapshot)", "1.7.2": "4.9.4-development"}


def test_the_writers_internal_default_is_the_public_default():
    """Issue 28: internal writer functions defaulted to the 4.9.4 layout while to_nczarr's default
    is 4.9.1's; they now take the table's default (or require a layout)."""
    import inspect

    from xr_zstrings.write import chunks, plan

    assert plan._Options(fmt="nczarr", on_overflow="error", maxstrlen=None, default_maxstrlen=None,
                         compressor=None, strict_codecs=True).layout is t.DEFAULT_LAYOUT
    for fn in (plan._zarray, plan._array_zattrs, plan._group_objects, chunks.write_arrays):
        assert inspect.signature(fn).parameters["layout"].default is inspect.Parameter.empty, fn


def _code_strings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of a module's string literals that are code, not docstrings or comments."""
    import ast
    import io
    import tokenize

    src = path.read_text(encoding="utf-8")
    docs: set[int] = set()
    for n in ast.walk(ast.parse(src)):
        if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and n.body:
            b = n.body[0]
            if isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant) and isinstance(b.value.value, str):
                docs.update(range(b.lineno, b.end_lineno + 1))
    return [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(src).readline)
            if tok.type == tokenize.STRING and tok.start[0] not in docs]


def test_no_netcdf_c_version_or_generation_label_outside_the_table():
    """Issue 28: a new netcdf-c target is one row of formats/netcdf_c.py. Every other module asks the
    table (rows, ``CURRENT``, ``examples_text``, ``is_nczarr``, ``ZARR_V2``/``ZARR_V3``) instead of
    spelling a netcdf-c version or comparing a generation label (the old main had 102 code lines of
    version literals in 9 files and 29 comparisons against generation labels)."""
    import re

    version = re.compile(r"(?<![\w.])4\.(8|9|10)(\.\d)?(?!\d)")
    label = re.compile(r"""^["'](zarr-v[23]|nczarr-|nczarr["']$)""")
    found = []
    files = [*sorted((ROOT / "xr_zstrings").rglob("*.py")), ROOT / "tests" / "peer_venvs.py",
             ROOT / "tests" / "netcdf_c_matrix.py", ROOT / "scripts" / "netcdf_c_matrix.py"]
    for path in files:
        if path.name == "netcdf_c.py" and path.parent.name == "formats":
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        for n, text in _code_strings(path):
            code = lines[n - 1].split("#")[0]
            if version.search(text) or (label.match(text) and re.search(r"==|!=|startswith|\bin\b", code)
                                        and "generation" in code):
                found.append(f"{path.relative_to(ROOT)}:{n}: {lines[n - 1].strip()}")
    assert found == [], found


def test_help_examples_and_depth_limit_come_from_the_rows():
    assert t.examples_text() == "4.9.0 (Debian 12), 4.9.2 (Ubuntu 24.04) or 4.10"
    assert t.CURRENT is t.NETCDF_C[-1] and t.CURRENT.example == "4.10"
    assert [r.max_depth for r in t.NETCDF_C if r.max_depth] == [("4.10.1", 30, "4.9.1-4.9.4")]
    assert t.is_nczarr(t.DEFAULT_LAYOUT.generation) and not t.is_nczarr(t.ZARR_V2) and not t.is_nczarr(t.ZARR_V3)
    assert all(t.is_nczarr(layout.generation) for layout in t.LAYOUTS)
