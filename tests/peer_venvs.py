"""Side virtual environments holding the old netCDF4 wheels (and the netcdf-c each bundles).

The wheels are the peers of ``xr_zstrings.formats.netcdf_c.NETCDF_C``, the one table of netcdf-c
releases (a new netcdf-c target is a row there, and its wheel gets a venv here). Standard library
only (that module too), so CI can create them once before any configuration's venv exists:
``python3 tests/peer_venvs.py``. Each venv (Python 3.11, numpy<2, ``netCDF4==<wheel>``) lives under
``XR_ZSTRINGS_PEER_VENVS`` (default ``~/.cache/xr_zstrings/peer-venvs``), is created once behind a
file lock (pytest-xdist workers and parallel CI jobs wait for one creator) and reused by every later
test session and CI configuration.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

try:
    from xr_zstrings.formats.netcdf_c import peer_wheels
except ImportError:  # CI's system Python, before the package is installed anywhere: the source tree's
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from xr_zstrings.formats.netcdf_c import peer_wheels

#: netCDF4 wheel -> the netcdf-c it bundles (tests/golden/README.md)
PEER_WHEELS = peer_wheels()


def venv_root() -> Path:
    return Path(os.environ.get("XR_ZSTRINGS_PEER_VENVS") or Path.home() / ".cache" / "xr_zstrings" / "peer-venvs")


def base_python() -> str | None:
    """A Python 3.11 to build the side venvs from (the old wheels exist for cp311)."""
    for cand in (os.environ.get("XR_ZSTRINGS_PEER_PYTHON"),
                 str(Path.home() / ".pyenv" / "versions" / "3.11.7" / "bin" / "python"),
                 shutil.which("python3.11")):
        if cand and Path(cand).exists():
            return cand
    return None


def peer_python(wheel: str) -> Path:
    """The python of the side venv holding netCDF4==wheel (created once; later calls reuse it).

    Raises RuntimeError naming what failed (no Python 3.11, pip error)."""
    root = venv_root()
    root.mkdir(parents=True, exist_ok=True)
    venv = root / f"py311-netCDF4-{wheel}"
    py = venv / "bin" / "python"
    ready = venv / ".ready"
    with open(root / f".lock-{wheel}", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready.exists():
            return py
        base = base_python()
        if base is None:
            raise RuntimeError("no Python 3.11 to build the netCDF4 side venvs (set XR_ZSTRINGS_PEER_PYTHON)")
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([base, "-m", "venv", str(venv)], check=True, capture_output=True)
        r = subprocess.run([str(py), "-m", "pip", "install", "-q", "numpy<2", "cftime", f"netCDF4=={wheel}",
                            "--only-binary=:all:"], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"pip install netCDF4=={wheel} failed: {r.stderr[-500:]}")
        ready.write_text(wheel + "\n")
    return py


def ensure_all() -> dict[str, Path]:
    """Every side venv, the missing ones created concurrently (pip mostly waits on downloads)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(PEER_WHEELS)) as pool:
        return dict(zip(PEER_WHEELS, pool.map(peer_python, PEER_WHEELS), strict=True))


def main() -> int:
    t0 = time.perf_counter()
    for wheel, py in ensure_all().items():
        print(f"netCDF4 {wheel}: {py}")
    print(f"side venvs ready in {venv_root()} ({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
