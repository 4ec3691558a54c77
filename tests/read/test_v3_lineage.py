"""A lazy reader of a local Zarr v3 store keeps its version through our appends, and is told (never
served the new chunks) when another tool replaces the store in place: xarray's ``to_zarr(mode="w")``
keeps the folder, and often its inode number, so only the root ``zarr.json`` tells the two apart."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from xr_zstrings import to_zarr_v3
from xr_zstrings.errors import StoreReplacedError


def _part(a: int, b: int) -> xr.Dataset:
    return xr.Dataset({"a": ("x", np.arange(a, b)),
                       "s": ("x", np.array([f"v{i}" for i in range(a, b)], dtype=object))})


@pytest.mark.parametrize("written_by", ["zstrings", "zstrings-appended", "xarray"])
def test_a_lazy_reader_keeps_its_version_through_appends_and_is_told_of_a_replacement(
        tmp_path: Path, written_by: str) -> None:
    path = tmp_path / "s.zarr"
    if written_by == "xarray":
        _part(0, 10).to_zarr(path, zarr_format=3, mode="w")
    else:
        to_zarr_v3(_part(0, 10), path)
    if written_by == "zstrings-appended":  # (the root zarr.json already continued once)
        to_zarr_v3(_part(10, 15), path, mode="a", append_dim="x")
    n = 15 if written_by == "zstrings-appended" else 10
    before_append = xr.open_dataset(path, engine="zstrings", chunks=None)
    before_replace = xr.open_dataset(path, engine="zstrings", chunks=None)

    to_zarr_v3(_part(20, 22), path, mode="a", append_dim="x")
    assert before_append.sizes["x"] == n
    expected = xr.open_dataset(path, engine="zarr")["s"].values[:n]  # (zarr-python: the old rows)
    assert [str(v) for v in before_append["s"].values] == [str(v) for v in expected]

    _part(0, 10).assign(a=lambda d: d.a + 100).to_zarr(path, zarr_format=3, mode="w")
    with pytest.raises(StoreReplacedError, match="replaced"):
        before_replace["a"].values  # (the read is the test)
    reopened = xr.open_dataset(path, engine="zstrings")
    np.testing.assert_array_equal(reopened["a"].values, xr.open_dataset(path, engine="zarr")["a"].values)
