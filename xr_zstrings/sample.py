"""The built-in sample: a small NCZarr store written by netcdf-c 4.10.1 (see scripts/make_sample.py)."""

from __future__ import annotations

from importlib.resources import as_file, files
from pathlib import Path


def sample_path() -> Path:
    """Path of the bundled ``stations.zarr`` NCZarr store (weather stations with string names)."""
    with as_file(files("xr_zstrings") / "data" / "stations.zarr") as p:
        return Path(p)
