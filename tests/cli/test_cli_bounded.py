"""The CLI on hostile metadata (issue 15, item 7): tiny stores whose metadata claims shapes of
1e9-1e12, chunk grids of 1e9 chunks, or 1,000 nested groups. ``info``, ``dump`` and ``check`` run
as real subprocesses under a memory limit (RLIMIT_AS) and a timeout, and must answer with a result
that says it is limited/sampled, or with a one-line error and exit code 2; never a traceback, a
MemoryError, a kill by the limit or a hang.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from xr_zstrings import to_nczarr  # stores in netcdf-c 4.10's layout (netcdf_c="4.10"): the tests edit its .zattrs

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_AS is POSIX")

MEMORY_LIMIT = 3 << 30  # address space of the CLI process: imports take ~1 GiB of it
TIMEOUT = 120  # a hang fails the test; a healthy run takes a few seconds


def _edit(path: Path, **changes: object) -> None:
    meta = json.loads(path.read_text())
    meta.update(changes)
    path.write_text(json.dumps(meta))


def _claim(store: Path, var: str, n: int, chunk: int, dim: str = "x") -> None:
    """Make ``var``'s metadata claim shape [n] in chunks of ``chunk`` (and its dimension size n)."""
    _edit(store / var / ".zarray", shape=[n], chunks=[chunk])
    zattrs = json.loads((store / ".zattrs").read_text())
    zattrs["_nczarr_group"]["dimensions"][dim] = {"size": n, "unlimited": 0}
    (store / ".zattrs").write_text(json.dumps(zattrs))


def _strings(n: int) -> np.ndarray:
    return np.array([f"s{i}" for i in range(n)], dtype=object)


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))

    env = {**os.environ, "XR_ZSTRINGS_DECODE_THREADS": "2"}
    return subprocess.run([sys.executable, "-m", "xr_zstrings.cli", *argv], capture_output=True, text=True,
                          timeout=TIMEOUT, preexec_fn=limit, env=env)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("hostile")
    stores: dict[str, Path] = {}

    # 1e9 values claimed, chunks of 1,000: the first chunk exists, the other 999,999 do not
    p = stores["shape 1e9"] = base / "shape1e9.zarr"
    to_nczarr(xr.Dataset({"s": ("x", _strings(1000))}), p, maxstrlen=8, netcdf_c="4.10")
    _claim(p, "s", 10**9, 1000)

    # 1e12 values in one claimed chunk of 1e12 (never written)
    p = stores["shape 1e12"] = base / "shape1e12.zarr"
    to_nczarr(xr.Dataset({"s": ("x", _strings(3))}), p, maxstrlen=8, netcdf_c="4.10")
    _claim(p, "s", 10**12, 10**12)
    (p / "s" / "0").unlink()

    # a grid of 1e9 one-value chunks, the first three written
    p = stores["grid 1e9"] = base / "grid1e9.zarr"
    to_nczarr(xr.Dataset({"s": ("x", _strings(3))}, ).chunk({"x": 1}), p, maxstrlen=8, netcdf_c="4.10")
    _claim(p, "s", 10**9, 1)

    # a dimension coordinate of 1e9 values (xarray would load an index whole)
    p = stores["coordinate 1e9"] = base / "coord1e9.zarr"
    to_nczarr(xr.Dataset({"s": ("x", _strings(1000))}, coords={"x": np.arange(1000)}), p, maxstrlen=8, netcdf_c="4.10")
    _claim(p, "s", 10**9, 1000)
    _edit(p / "x" / ".zarray", shape=[10**9], chunks=[1000])

    # 1,000 nested groups, a variable in the deepest (built by hand, quicker than to_nczarr's 1,000
    # groups: tests/write/test_deep_groups.py writes them; shutil.rmtree recurses once per level)
    p = stores["1,000 nested groups"] = base / "deep.zarr"
    two = base / "two.zarr"
    to_nczarr({"/": xr.Dataset(), "/g": xr.Dataset(), "/g/g": xr.Dataset({"v": ("y", _strings(2))})}, two, netcdf_c="4.10")
    p.mkdir()
    for f in (".zattrs", ".zgroup"):
        shutil.copy(two / f, p / f)
    cur = p
    for _ in range(999):
        cur = cur / "g"
        cur.mkdir()
        for f in (".zattrs", ".zgroup"):
            shutil.copy(two / "g" / f, cur / f)
    cur = cur / "g"
    shutil.copytree(two / "g" / "g", cur)
    za = json.loads((cur / "v" / ".zattrs").read_text())
    za["_nczarr_array"]["dimension_references"] = ["/" + "/".join(["g"] * 1000) + "/y"]
    (cur / "v" / ".zattrs").write_text(json.dumps(za))
    for store in stores.values():  # (the edits above left it stale: check would say so, exit 1)
        (store / ".zmetadata").unlink(missing_ok=True)
    yield stores
    subprocess.run(["rm", "-rf", str(p)], check=True)  # pytest's cleanup recurses per level too


CASES = ["shape 1e9", "shape 1e12", "grid 1e9", "coordinate 1e9", "1,000 nested groups"]


def _answered(r: subprocess.CompletedProcess[str]) -> None:
    """A result (exit 0/1) or a one-line error (exit 2); never a traceback or a kill."""
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    assert r.returncode in (0, 1, 2), (r.returncode, r.stderr[-500:])
    if r.returncode == 2:
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("zstrings: error: "), r.stderr


@pytest.mark.parametrize("case", CASES)
def test_info_answers(hostile: dict[str, Path], case: str) -> None:
    r = _run("info", str(hostile[case]))
    _answered(r)
    assert r.returncode == 0
    if case == "1,000 nested groups":
        assert r.stdout.count("group: g {") == 1000 and "string v(y)" in r.stdout
    else:
        assert "s(x)" in r.stdout


@pytest.mark.parametrize("case", CASES)
def test_dump_shows_a_limited_result_that_says_so(hostile: dict[str, Path], case: str) -> None:
    r = _run("dump", str(hostile[case]))
    _answered(r)
    assert r.returncode == 0
    if case == "1,000 nested groups":
        assert 'v = "s0", "s1" ;' in r.stdout
        return
    total = {"shape 1e12": 10**12}.get(case, 10**9)
    assert f"the first 10,000 of {total:,} values" in r.stdout
    lines = r.stdout.splitlines()
    first = next(i for i, x in enumerate(lines) if x.startswith(" s = "))
    block = [lines[first]]
    while not block[-1].endswith(";"):  # wrapped at 80 columns as ncdump wraps
        block.append(lines[first + len(block)])
    assert all(len(x) <= 80 for x in block) and all(x.startswith("    ") for x in block[1:])
    values = " ".join(x.strip() for x in block)[len("s = "):].split(", ")
    assert len(values) == 10_001 and values[-1] == "... ;"  # 10,000 values, then the ellipsis
    if case in ("shape 1e9", "coordinate 1e9"):
        assert values[:3] == ['"s0"', '"s1"', '"s2"'] and values[999] == '"s999"' and values[1000] == '""'


def test_dump_limit_is_adjustable(hostile: dict[str, Path]) -> None:
    r = _run("dump", str(hostile["shape 1e9"]), "--limit", "5")
    assert r.returncode == 0
    assert ' s = "s0", "s1", "s2", "s3", "s4", ... ;' in r.stdout
    assert "the first 5 of 1,000,000,000 values" in r.stdout
    r = _run("dump", str(hostile["shape 1e9"]), "--limit", "-1")
    _answered(r)
    assert r.returncode == 2 and "--limit" in r.stderr


@pytest.mark.parametrize("case", CASES)
def test_check_answers_and_says_what_it_sampled(hostile: dict[str, Path], case: str) -> None:
    r = _run("check", str(hostile[case]))
    _answered(r)
    if case == "shape 1e12":
        assert r.returncode == 1 and "too large to check" in r.stdout
    elif case == "1,000 nested groups":
        # netcdf-c 4.10.1 aborts on groups nested more than 30 deep (tests/interop/test_netcdf_c_versions.py)
        assert r.returncode == 1 and "groups nested 1000 deep: netcdf-c 4.10.1 aborts" in r.stdout, r.stdout
        assert "ok      /g/g/g" in r.stdout and "1 problem(s) (above)" in r.stdout
        # netcdf-c 4.10's layout (the fixture edits its .zattrs): 4.9.1-4.9.3 cannot read it
        assert "4.9.1-4.9.3 FAILS: netcdf-c 4.10's layout" in r.stdout
    else:
        assert "sampled: read 2,000 of" in r.stdout and "--full reads every chunk" in r.stdout
        assert r.returncode == 0, r.stdout  # the chunks that exist are fine; the others read as fill


def test_check_samples_a_grid_of_1e18_chunks(tmp_path: Path) -> None:
    """Shape [1e9, 1e9] in [1, 1] chunks: 1e18 chunks, beyond float64's exact integers. The sample's
    chunk indices were computed in float64 ("index 1000000000000000000 is out of bounds"); now in
    Python ints. (More elements than int64 bytes are refused as damaged metadata, with exit 2.)"""
    n = 10**9
    p = tmp_path / "grid2d.zarr"
    to_nczarr(xr.Dataset({"s": (("x", "y"), _strings(4).reshape(2, 2))}).chunk({"x": 1, "y": 1}), p, maxstrlen=8,
              netcdf_c="4.10")
    _edit(p / "s" / ".zarray", shape=[n, n], chunks=[1, 1])
    zattrs = json.loads((p / ".zattrs").read_text())
    zattrs["_nczarr_group"]["dimensions"].update(x={"size": n, "unlimited": 0}, y={"size": n, "unlimited": 0})
    (p / ".zattrs").write_text(json.dumps(zattrs))
    (p / ".zmetadata").unlink()  # (the edits left it stale: check would say so, exit 1)
    r = _run("check", str(p))
    _answered(r)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"sampled: read 2,000 of {n * n:,} chunks" in r.stdout
