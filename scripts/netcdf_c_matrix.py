"""Measure the netcdf-c reader x to_nczarr target matrix and write it into docs/netcdf-c-versions.md.

Run with the test extra installed: ``python scripts/netcdf_c_matrix.py`` (creates the netCDF4 side
venvs on first use, see tests/netcdf_c_matrix.py). ``--venvs`` only creates the side venvs (CI does
this once before the suite). The same code runs in tests/interop/test_netcdf_c_versions.py, which checks
that the docs' table is what the tests see.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import netcdf_c_matrix as m

DOC = ROOT / "docs" / "netcdf-c-versions.md"


def main(argv: list[str]) -> int:
    t0 = time.perf_counter()
    for wheel in m.PEER_WHEELS:
        m.peer_python(wheel)
    print(f"side venvs ready in {m.venv_root()} ({time.perf_counter() - t0:.1f} s)")
    if argv[:1] == ["--venvs"]:
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        matrix = {t: m.column(t, Path(tmp)) for t in m.TARGETS}
    table = m.render(matrix)
    text = DOC.read_text(encoding="utf-8")
    head, rest = text.split(m.START, 1)
    tail = rest.split(m.END, 1)[1]
    DOC.write_text(f"{head}{m.START}\n{table}{m.END}{tail}", encoding="utf-8")
    print(table)
    print(f"written to {DOC} ({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
