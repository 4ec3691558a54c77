"""The ``zstrings`` command line (also ``python -m xr_zstrings``), one module per command.

``zstrings`` with no arguments opens the built-in sample NCZarr store through ``engine="zstrings"`` and
prints it, so a newcomer sees strings come back as text. The subcommands are what netCDF users know
from ``ncdump``/``nccopy``:

* ``zstrings info PATH_OR_URL`` (info.py): a header like ``ncdump -h`` plus the detected layout;
* ``zstrings dump PATH_OR_URL [-h] [-v VAR[,VAR]] [-d DIM=START:STOP]`` (dump.py): CDL as ncdump prints it;
* ``zstrings convert SRC DST [--format ...]`` (convert.py): netCDF-4 file <-> NCZarr / Zarr v2 <-> Zarr v3;
* ``zstrings check PATH_OR_URL`` (check.py): what netcdf-c would fail on or truncate, and how to fix it;
  also the store's commit state and what ``repair`` would do;
* ``zstrings repair PATH_OR_URL [--force]`` (repair.py): complete or undo a write that was killed part-way;
* ``zstrings migrate SRC [DST]`` (migrate.py): Zarr v2 / NCZarr -> Zarr v3, the chunks reused;
* ``zstrings show`` / ``sample`` (show.py): the store as xarray prints it.

CDL formatting shared by ``info`` and ``dump`` is in cdl.py, what every command shares in common.py,
the parser and the entry point in main.py. Exit codes: 0 success, 1 ``check`` found problems, 2 usage
or input errors (one line on stderr that names the fix). Heavy imports (xarray, zarr, netCDF4, tqdm)
stay inside functions.
"""

from __future__ import annotations

from .check import netcdf_c_verdicts
from .main import main

__all__ = ["main", "netcdf_c_verdicts"]
