"""One shuffle-size rule (codecs.v2.shuffle_elementsize): netcdf-c records ``elementsize: 0`` and
shuffles by the element size (1 for NC_CHAR, 8 = sizeof(char *) for NC_STRING); the reader, the
v2 -> v3 codec mapping and the encodings handed to xarray's writers all use it."""

from __future__ import annotations

import json
import zlib

import netCDF4
import numcodecs
import numpy as np
import pytest
from peers import nc_url

from xr_zstrings.codecs import encoding
from xr_zstrings.codecs.v2 import build_pipeline, shuffle_elementsize
from xr_zstrings.errors import MetadataError


@pytest.mark.parametrize(("nc_type", "values"), [("f4", np.arange(7, dtype="f4") * 1.5),
                                                 ("i2", np.arange(7, dtype="i2") - 3),
                                                 ("f8", np.linspace(0, 1, 7))])
def test_netcdf_c_shuffle_undone_by_every_rule(tmp_path, nc_type, values):
    """Bytes netcdf-c shuffled are unshuffled by the reader's filter and by the numcodecs Shuffle
    the encodings carry (v2_objects) alike."""
    path = tmp_path / "s.zarr"
    ds = netCDF4.Dataset(nc_url(path), "w")
    ds.createDimension("x", 7)
    ds.createVariable("v", nc_type, ("x",), zlib=True, shuffle=True, chunksizes=(7,))[:] = values
    ds.close()
    zarray = json.loads((path / "v" / ".zarray").read_text())
    shuffle = [f for f in zarray["filters"] if f["id"] == "shuffle"]
    assert shuffle == [{"id": "shuffle", "elementsize": 0}]
    dtype = np.dtype(zarray["dtype"])
    shuffled = zlib.decompress((path / "v" / "0").read_bytes())
    expected = np.asarray(values, dtype=dtype).tobytes()
    assert shuffled != expected  # netcdf-c did shuffle
    reader = build_pipeline(None, shuffle, dtype=dtype)
    assert bytes(reader.decode(shuffled)) == expected
    _, filters = encoding.v2_objects(None, shuffle, dtype=dtype, text=False)
    assert filters == [numcodecs.Shuffle(elementsize=dtype.itemsize)]
    assert bytes(filters[0].decode(shuffled)) == expected


@pytest.mark.parametrize(("dtype", "kind", "size"), [("<f4", None, 4), (">i2", None, 2), ("|S1", "char", 1),
                                                     ("|S5", "fixed", 8), ("|S5", None, 8), ("|u1", None, 1)])
def test_one_rule_for_elementsize_zero(dtype, kind, size):
    assert shuffle_elementsize({"id": "shuffle", "elementsize": 0}, np.dtype(dtype), kind) == size
    assert shuffle_elementsize({"id": "shuffle", "elementsize": 3}, np.dtype(dtype), kind) == 3


def test_the_encodings_rule_is_the_readers():
    """No second rule: v2_objects asks shuffle_elementsize (a bad elementsize is refused alike)."""
    with pytest.raises(MetadataError, match="elementsize"):
        encoding.v2_objects(None, [{"id": "shuffle", "elementsize": -1}], dtype=np.dtype("f4"), text=False)
