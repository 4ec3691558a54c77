"""The one list of Zarr v3 string layouts (codecs/layouts.py) and that the writer, the pipeline and
the chunk reader ask it: each row written and read back through its own kernels."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr

from xr_zstrings.codecs import layouts
from xr_zstrings.codecs.v3 import V3Pipeline
from xr_zstrings.errors import ZStringsError
from xr_zstrings.text.kernels import kernels
from xr_zstrings.write import zarr3

VALUES = np.array(["a", "", "héllo", "x" * 70], dtype=object)


def test_names_are_the_writers_and_unknown_ones_are_refused(tmp_path):
    assert zarr3.LAYOUTS == layouts.LAYOUT_NAMES == tuple(r.name for r in layouts.V3_LAYOUTS)
    assert layouts.V3_LAYOUTS[0].zarr_python  # the default is the layout zarr-python reads
    with pytest.raises(ZStringsError, match=r"Unknown layout 'nope': expected one of \('vlen-utf8'"):
        zarr3.to_zarr_v3(xr.Dataset({"s": ("x", VALUES)}), tmp_path / "s.zarr", layout="nope")
    assert not (tmp_path / "s.zarr").exists()


@pytest.mark.parametrize("row", layouts.V3_LAYOUTS, ids=lambda r: r.name)
@pytest.mark.parametrize("kind", ["str", "bytes"])
def test_each_row_builds_the_pipeline_of_its_codec_and_reads_with_its_kernel(row, kind):
    data_type, codecs = row.metadata(kind, {})
    p = V3Pipeline.from_metadata(codecs, data_type=data_type, dtype=object, chunk_shape=(4,))
    assert isinstance(p.ab, row.codec)
    assert p.layout == row.chunk_layouts[kind == "bytes"] and layouts.of_chunks(p.layout) is row
    assert p.accepts_vlen and p.layout in layouts.VARIABLE_LENGTH
    values = VALUES if kind == "str" else np.array([v.encode() for v in VALUES], dtype=object)
    raw = p.encode(values)
    assert list(p.decode(raw)) == list(values)
    if kind == "str":  # the read kernel: straight into a StringDType view (compiled kernels only;
        # without them it says so and the reader decodes through the pipeline, as asserted above)
        view = np.empty(4, dtype=np.dtypes.StringDType())
        u8 = np.frombuffer(raw, np.uint8)
        assert row.read_into(p.ab, u8, view, None, 4, "test chunk") is (kernels() is not None)
        if kernels() is not None:
            assert view.tolist() == list(values)


@pytest.mark.parametrize("name", layouts.LAYOUT_NAMES)
def test_to_zarr_v3_writes_each_rows_metadata(tmp_path, name):
    import xr_zstrings  # noqa: F401 - engine="zstrings"

    zarr3.to_zarr_v3(xr.Dataset({"s": ("x", VALUES)}), tmp_path / "s.zarr", layout=name, compressors=[])
    meta = json.loads((tmp_path / "s.zarr" / "s" / "zarr.json").read_text())
    data_type, codecs = layouts.layout_named(name).metadata("str", {})
    assert (meta["data_type"], meta["codecs"]) == (data_type, codecs)
    back = xr.open_dataset(tmp_path / "s.zarr", engine="zstrings")
    assert back["s"].values.tolist() == list(VALUES)
