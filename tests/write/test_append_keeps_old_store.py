"""Changing a store (appends, added variables or groups) never writes into the files of the live store.

Local writers change a hard-link clone of the store and swap it in (xr_zstrings.io.atomic); a write
into a file the clone still shares with the live store would change the live store before the swap
(zarr-python before 3.1.3 writes an existing key in place). An extra hard link to the files a change
rewrites shows whether their old bytes survived.
"""

from __future__ import annotations

import os

import numpy as np
import xarray as xr

from xr_zstrings import to_nczarr
from xr_zstrings.write.zarr3 import to_zarr_v3

T = np.dtypes.StringDType()


def _part(start: int, n: int) -> xr.Dataset:
    t = np.arange(start, start + n)
    return xr.Dataset({"s": ("t", np.array([f"é{i}" for i in t], dtype=T))}, coords={"t": t})


def _pin(store, keys, outside):
    """Hard-link ``keys`` of ``store`` into ``outside``; return their bytes now."""
    outside.mkdir()
    before = {}
    for i, key in enumerate(keys):
        os.link(store / key, outside / str(i))
        before[key] = (store / key).read_bytes()
    return before


def _unchanged(keys, outside, before):
    return {key: (outside / str(i)).read_bytes() == before[key] for i, key in enumerate(keys)}


def test_append_leaves_the_shared_files_of_the_old_store_alone(tmp_path):
    path = tmp_path / "a.zarr"
    first = _part(0, 3)
    first["s"].encoding.update(chunks=(2,), maxstrlen=8)
    to_nczarr(first, path, unlimited_dims=["t"])
    keys = ["s/1", "s/.zarray", ".zattrs"]  # the partial last chunks and metadata the append rewrites
    before = _pin(path, keys, tmp_path / "pins")
    to_nczarr(_part(3, 2), path, mode="a", append_dim="t")
    assert (path / "s/1").read_bytes() != before["s/1"]  # the append did rewrite it ...
    assert _unchanged(keys, tmp_path / "pins", before) == dict.fromkeys(keys, True)  # ... in a new file
    expected = xr.concat([_part(0, 3), _part(3, 2)], dim="t")
    xr.testing.assert_identical(xr.open_dataset(path, engine="zstrings"), expected)


def test_adding_a_variable_leaves_the_shared_metadata_alone(tmp_path):
    path = tmp_path / "v.zarr"
    to_nczarr(_part(0, 3), path)
    keys = [".zattrs", ".zgroup"]
    before = _pin(path, keys, tmp_path / "pins")
    to_nczarr(xr.Dataset({"u": ("t", np.array(["x", "yy", "zzz"], dtype=T))}), path, mode="a")
    assert _unchanged(keys, tmp_path / "pins", before) == dict.fromkeys(keys, True)
    assert xr.open_dataset(path, engine="zstrings")["u"].values.tolist() == ["x", "yy", "zzz"]


def test_zarr_v3_group_added_leaves_the_shared_root_alone(tmp_path):
    path = tmp_path / "g.zarr"
    to_zarr_v3(_part(0, 3), path)
    keys = ["zarr.json"]
    before = _pin(path, keys, tmp_path / "pins")
    to_zarr_v3(_part(5, 2), path, group="sub")
    assert (path / "zarr.json").read_bytes() != before["zarr.json"]  # the consolidated root was rewritten
    assert _unchanged(keys, tmp_path / "pins", before) == {"zarr.json": True}
    back = xr.open_dataset(path, engine="zstrings", group="sub")
    assert back["s"].values.tolist() == ["é5", "é6"]
