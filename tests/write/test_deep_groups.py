"""1,000 nested groups through the writers: to_nczarr writes them (every netcdf-c target layout),
engine="zstrings" reads the deepest variable back, and mode='a' adds to it. zarr-python's LocalStore
(Path.mkdir(parents=True)) and, before Python 3.12/3.13, os.walk and shutil.rmtree recurse once per
level: the writer creates folders, clones and removes trees without recursion (RecursionError before).
Which netcdf-c opens how deep a store: tests/interop/test_netcdf_c_versions.py.
"""

from __future__ import annotations

import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from xr_zstrings import NetcdfCompatibilityWarning, to_nczarr

DEPTH = 1000


@pytest.fixture
def deep_dir(tmp_path: Path):
    yield tmp_path
    subprocess.run(["rm", "-rf", str(tmp_path)], check=True)  # pytest's cleanup recurses per level


@pytest.mark.parametrize("target", [None])  # one layout: the folders are the same in all (~1 min)
def test_1000_nested_groups_write_read_and_append(deep_dir: Path, target: str | None) -> None:
    path = "/" + "/".join(["g"] * DEPTH)
    groups = {"/": xr.Dataset(), **{"/" + "/".join(["g"] * k): xr.Dataset() for k in range(1, DEPTH)}}
    groups[path] = xr.Dataset({"v": ("y", np.array(["s0", "é1"], dtype=object))})
    store = deep_dir / "deep.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NetcdfCompatibilityWarning)  # 4.9.0: strings as NC_CHAR
        to_nczarr(groups, store, netcdf_c=target)
        to_nczarr({path: xr.Dataset({"w": ("y", np.array(["a", "b"], dtype=object))})}, store, mode="a")
    ds = xr.open_dataset(store, engine="zstrings", group=path)
    assert ds["v"].values.tolist() == ["s0", "é1"] and ds["w"].values.tolist() == ["a", "b"]
    assert (store / path.lstrip("/") / "w").is_dir()
    # the append's clone and the replaced tree were removed (no sibling temporary folders left)
    assert sorted(p.name for p in deep_dir.iterdir()) == ["deep.zarr"]
