"""``show_versions()``: the versions of the stack and whether the compiled kernels are in use.

For bug reports and CI logs (``zstrings --version`` prints the same).  Versions come from the
installed distributions' metadata (nothing heavy is imported), except numpy's, whose C API the
kernels are built against.
"""

from __future__ import annotations

import platform
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import TextIO

__all__ = ["kernels_status", "show_versions", "versions"]

# the stack, in the order printed: runtime dependencies, then the peers the tests use
STACK = ("numpy", "zarr", "numcodecs", "xarray", "pyarrow", "obstore", "tqdm",
         "netCDF4", "h5netcdf", "h5py", "dask", "distributed")


def kernels_status() -> tuple[bool, str]:
    """(in use, explanation): the compiled kernels, or why the pure-Python fallback runs."""
    from .text import kernels as loading

    mod = loading.kernels()
    if mod is not None:
        return True, f"compiled kernels in use ({mod.__file__})"
    return False, f"pure-Python fallback: {loading.kernels_unavailable_reason}"


def versions() -> dict[str, str | None]:
    """Installed version of every package of the stack (None when not installed)."""
    out: dict[str, str | None] = {}
    for name in ("xr_zstrings", *STACK):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def show_versions(file: TextIO | None = None) -> None:
    """Print xr_zstrings' version, the stack's versions and whether the kernels are in use."""
    from . import zarr_compat as _zarr_compat

    file = file or sys.stdout
    in_use, why = kernels_status()
    lines = [
        f"python: {sys.version.split()[0]} ({platform.python_implementation()}, {platform.platform()})",
        *(f"{k}: {v or 'not installed'}" for k, v in versions().items()),
        f"kernels: {'yes' if in_use else 'no'} - {why}",
    ]
    if versions()["zarr"]:
        missing = _zarr_compat.missing_private_names()
        lines.append("zarr private names used: " + ("all present" if not missing else
                                                     f"MISSING {missing} (public fallbacks in use)"))
    print("\n".join(lines), file=file)
