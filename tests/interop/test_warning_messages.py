"""Warnings point at the user's line and say what the peers do (issue 36, item 11).

``MissingStringsWarning`` (``to_zarr_v3`` writing missing strings in zarrs' ``optional`` type) said
zarr-python and engine="zarr" cannot open the array, which this package's zarr plugin made untrue,
and pointed at ``sys:1``; the readers' warnings pointed into the package. Each warning here is
recorded and must name this file and the line of the call, and what it claims of zarr-python and
engine="zarr" is checked against them.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

import numpy as np
import pytest
import xarray as xr
import zarr

import xr_zstrings
import xr_zstrings.accessor  # (registers ds.zstrings)
from xr_zstrings.errors import CodecDroppedWarning, MissingStringsWarning, StringTruncationWarning


def _only(record: list[warnings.WarningMessage], category: type[Warning]) -> warnings.WarningMessage:
    found = [w for w in record if issubclass(w.category, category)]
    assert len(found) == 1, [(w.category.__name__, str(w.message)) for w in record]
    return found[0]


def _names() -> xr.Dataset:
    return xr.Dataset({"name": ("x", np.array(["Zürich", None, "Oslo"], dtype=object))})


@pytest.mark.parametrize("chunked", [False, True], ids=["in-memory", "dask"])
def test_missing_strings_warning_points_at_the_call_and_says_what_zarr_python_does(tmp_path, chunked):
    ds = _names().chunk(x=1) if chunked else _names()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        line = sys._getframe().f_lineno + 1
        xr_zstrings.to_zarr_v3(ds, tmp_path / "s.zarr")
    w = _only(record, MissingStringsWarning)
    assert w.filename == __file__ and w.lineno == line, (w.filename, w.lineno)
    text = str(w.message)
    assert "cannot open that array)" not in text  # the old claim, untrue with the plugin
    assert "zarr plugin" in text and "read them back missing" in text
    # what the warning says, checked against the peers: zarr-python and engine="zarr" read NaN there
    raw = zarr.open_array(tmp_path / "s.zarr" / "name", mode="r")[:]
    assert raw[0] == "Zürich" and raw[2] == "Oslo" and raw[1] != raw[1]  # NaN: missing
    got = xr.open_dataset(tmp_path / "s.zarr", engine="zarr", consolidated=False)["name"].values
    assert got[0] == "Zürich" and got[2] == "Oslo" and got[1] != got[1]  # NaN: missing
    ours = xr.open_dataset(tmp_path / "s.zarr", engine="zstrings")["name"].values
    assert ours[0] == "Zürich" and ours[2] == "Oslo" and ours[1] is not None and ours[1] != ours[1]


def test_a_reader_warning_points_at_the_users_open_dataset(tmp_path):
    ds = xr.Dataset({"s": ("x", np.array(["a", "b"], dtype="<U1"))})
    ds.to_zarr(tmp_path / "v2.zarr", zarr_format=2, consolidated=True)
    os.remove(tmp_path / "v2.zarr" / ".zgroup")  # read from .zmetadata, with a warning saying so
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        line = sys._getframe().f_lineno + 1
        got = xr.open_dataset(tmp_path / "v2.zarr", engine="zstrings")
    w = _only(record, UserWarning)
    assert "has no root '.zgroup'" in str(w.message)
    assert w.filename == __file__ and w.lineno == line, (w.filename, w.lineno)
    assert got["s"].values.tolist() == ["a", "b"]


def test_truncation_warning_points_at_the_users_write(tmp_path):
    ds = xr.Dataset({"s": ("x", np.array(["short", "much too long"], dtype=object))})
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        line = sys._getframe().f_lineno + 1
        xr_zstrings.to_nczarr(ds, tmp_path / "n.zarr", maxstrlen=5, on_overflow="truncate")
    w = _only(record, StringTruncationWarning)
    assert w.filename == __file__ and w.lineno == line, (w.filename, w.lineno)


def test_a_variable_left_out_is_warned_at_the_users_open_dataset(tmp_path):
    ds = xr.Dataset({"s": ("x", np.array(["a", "b"], dtype=object)), "n": ("x", [1, 2])})
    xr_zstrings.to_zarr_v3(ds, tmp_path / "u.zarr", layout="vlen-utf8", consolidated=False)
    meta_path = tmp_path / "u.zarr" / "s" / "zarr.json"
    meta = json.loads(meta_path.read_text())
    meta["codecs"].append({"name": "no-such-codec"})  # a codec nobody decodes: the array is left out
    meta_path.write_text(json.dumps(meta))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        line = sys._getframe().f_lineno + 1
        got = xr.open_dataset(tmp_path / "u.zarr", engine="zstrings")
    w = _only(record, UserWarning)
    assert "left out" in str(w.message) and "no-such-codec" in str(w.message)
    assert w.filename == __file__ and w.lineno == line, (w.filename, w.lineno)
    assert list(got.data_vars) == ["n"]


def test_a_dropped_codec_is_warned_at_the_users_call(tmp_path):
    ds = xr.Dataset({"v": ("x", np.arange(4.0))})
    ds["v"].encoding = {"filters": (zarr.codecs.TransposeCodec(order=(0,)),)}  # no Zarr v2 equivalent
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        line = sys._getframe().f_lineno + 1
        ds.zstrings.to_zarr(tmp_path / "v2.zarr", zarr_format=2)
    w = _only(record, CodecDroppedWarning)
    assert w.filename == __file__ and w.lineno == line, (w.filename, w.lineno)
