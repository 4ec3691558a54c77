"""text/kind.py: the one "is this text" rule (text_kind), asked by every writer and by with_zarr_encoding."""

from __future__ import annotations

import subprocess
import sys

import numcodecs
import numpy as np
import xarray as xr

from xr_zstrings import with_zarr_encoding
from xr_zstrings.text.kind import is_missing, text_kind


def test_the_rule_is_pure():
    code = "import sys, xr_zstrings.text.kind; assert 'xarray' not in sys.modules and 'pandas' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_first_values_do_not_decide():
    """The to_nczarr bug of the old twin rules: a first value that is missing does not make text."""
    assert text_kind(xr.Variable("x", np.array([None, float("nan"), "a"], dtype=object))) == "str"
    assert text_kind(xr.Variable("x", np.array([None, 2.5], dtype=object))) is None
    assert is_missing(float("nan")) and is_missing(None) and not is_missing("")


def test_for_zarr_asks_the_writers_rule():
    """An object variable of numbers is not text for with_zarr_encoding either: its filters are kept (the
    old dtype-kind rule took every object array for text and dropped them)."""
    ds = xr.Dataset({"v": ("x", np.array([None, 1.5, 2.5], dtype=object)),
                     "s": ("x", np.array([None, "a", "b"], dtype=object))})
    delta = numcodecs.Delta(dtype="<f8")
    for name in ds.variables:
        ds[name].encoding = {"filters": (delta,), "compressors": (numcodecs.Zlib(level=1),)}
    out = with_zarr_encoding(ds, 2)
    assert out["v"].encoding["filters"] == (delta,)
    assert "filters" not in out["s"].encoding
