"""The pure metadata layer: parsing without I/O, and the purity of the core modules."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from xr_zstrings import DimensionError, MetadataError
from xr_zstrings.formats.nczarr import NodeObjects, check_name, parse_array, parse_group, parse_json, unparse_json


@pytest.mark.parametrize("module", ["formats.nczarr", "text.fixed", "text.nc_char", "text.policy", "text.vlen", "errors"])
def test_pure_core_imports_neither_xarray_nor_zarr(module):
    code = (f"import sys, xr_zstrings.{module}; "
            "bad = [m for m in ('xarray', 'zarr') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def _array(zarray, zattrs=None, **objs):
    base = {"zarr_format": 2, "shape": [3], "chunks": [3], "dtype": "<f8", "fill_value": None,
            "order": "C", "compressor": None, "filters": None}
    base.update(zarray)
    return parse_array(NodeObjects("/v", {".zarray": base, ".zattrs": zattrs or {}, **objs}), store="mem:")


def test_json_constants_and_netcdf_c_unparsing():
    assert np.isnan(parse_json(b'{"fill_value": NaN}', where="k")["fill_value"])
    assert unparse_json({"a": 1, "b": [1, 2], "c": {"d": "é"}}) == '{"a": 1, "b": [1,2], "c": {"d": "é"}}'
    with pytest.raises(MetadataError, match="k.*malformed JSON"):
        parse_json(b'{"a": ', where="k")


def test_default_fill_values_are_snapped_back_from_their_rounded_json():
    assert _array({"fill_value": 9.96921e36}).fill_value == np.float64(9.969209968386869e36)
    assert _array({"dtype": "<f4", "fill_value": 9.96921e36}).fill_value == np.float32(9.96921e36)
    assert np.isnan(_array({"fill_value": "NaN"}).fill_value)
    assert _array({"fill_value": [-999]}).fill_value == -999.0  # NCZarr 1.0 one-element lists


def test_nczarr_1_0_objects_and_type_codes():
    meta = _array(
        {"dtype": "<f4", "fill_value": [-1]},
        {"units": "K", "scale": [0.5], "flags": [1, 2]},
        **{".nczvar": {"dimrefs": ["/x"], "storage": "chunked"},
           ".nczattr": {"types": {"units": "2", "scale": "5", "flags": "3"}}},
    )
    assert meta.dimension_references == ("/x",)
    assert meta.attrs["units"] == "K"
    assert meta.attrs["scale"] == np.float32(0.5) and isinstance(meta.attrs["scale"], np.float32)
    assert meta.attrs["flags"].dtype == np.dtype("<i2")
    assert meta.generation.startswith("nczarr-1.0")


def test_group_generations_are_recognised():
    g = parse_group(NodeObjects("/", {
        ".zgroup": {"zarr_format": 2, "_NCZARR_SUPERBLOCK": {"version": "2.0.0"},
                    "_NCZARR_GROUP": {"dims": {"x": 3, "t": {"size": 2, "unlimited": 1}},
                                      "vars": ["v"], "groups": []}},
        ".zattrs": {}}))
    assert g.generation.startswith("nczarr-2 (uppercase")
    assert g.dimensions["t"].unlimited and g.dimensions["x"].size == 3
    assert g.arrays == ("v",)


@pytest.mark.parametrize("name", ["..", ".", "a/b", "", "a\x00b", 5, "a\\b"])
def test_bad_names(name):
    with pytest.raises(MetadataError):
        check_name(name, where="w")


def test_dimension_count_must_match_shape():
    with pytest.raises(DimensionError, match="2 dimensions"):
        _array({}, {"_ARRAY_DIMENSIONS": ["x", "y"]})
