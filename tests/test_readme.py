"""The README's Python examples run, in order, in a scratch directory (docs that run do not rot)."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import netCDF4
import numpy as np
import xarray as xr

from xr_zstrings import StringTruncationWarning

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_examples_run_and_do_what_they_say(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) >= 3
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for block in blocks:
            exec(compile(block, str(README), "exec"), ns)  # noqa: S102 - our own README
    assert ns["ds"]["station"].dtype == np.dtypes.StringDType()
    assert any(issubclass(w.category, StringTruncationWarning) for w in caught)  # maxstrlen=6 cut some
    with netCDF4.Dataset(f"file://{tmp_path / 'out.zarr'}#mode=nczarr,file", "r") as nc:
        assert all(len(s.encode()) <= 6 for s in nc["station"][:].tolist())
    back = xr.open_datatree(tmp_path / "back.zarr", engine="zstrings")
    assert back["metadata/country"].values.tolist() == ns["tree"]["metadata/country"].values.tolist()
    assert ns["read_arrow"]("v3.zarr", "station").to_pylist() == ns["ds"]["station"].values.tolist()
