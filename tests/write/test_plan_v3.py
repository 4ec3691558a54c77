"""write/plan_v3: the plan of a Zarr v3 group (zarr.json made by zarr-python, values packed)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import numpy as np
import pytest
import xarray as xr
from zarr.storage import MemoryStore

from xr_zstrings.write.plan_v3 import plan_group


def test_planning_n_variables_lists_a_store_of_bounded_size_per_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """zarr-python's ``overwrite`` lists the metadata store once per node; the planner keeps none of
    the nodes it made there, so each listing scans a few keys, not every variable planned before it."""
    scanned: list[int] = []
    real = MemoryStore.list_prefix

    async def counting(self: MemoryStore, prefix: str) -> AsyncIterator[str]:
        scanned.append(len([k async for k in self.list()]))
        async for k in real(self, prefix):
            yield k

    monkeypatch.setattr(MemoryStore, "list_prefix", counting)
    n = 300
    _, arrays = plan_group("", xr.Dataset({f"v{i}": ("x", np.arange(3.0)) for i in range(n)}))
    assert len(arrays) == n and scanned
    assert max(scanned) <= 4, f"a listing scanned {max(scanned)} keys: nodes planned before are still held"
