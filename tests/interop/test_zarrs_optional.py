"""zarrs' nullable ``optional`` data type with its ``zarrs.optional`` codec: the row of the
missing-value table (docs/format-notes.md) checked against zarrs' documented encoding.

No Python library writes zarrs.optional, so the golden stores in tests/golden_chunks/zarrs_optional
are framed by hand from zarrs' source and the zarr-extensions draft (the README there cites both);
``expected.json`` holds the values each was built from (null = missing).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from xr_zstrings import ChunkError, MetadataError, UnsupportedError
from xr_zstrings.codecs.v3 import V3Pipeline
from xr_zstrings.formats.zarr3 import parse_node_v3

HERE = Path(__file__).parents[1] / "golden_chunks" / "zarrs_optional"
STORE = HERE / "optional.zarr"
EXPECTED = json.loads((HERE / "expected.json").read_text())
NA_T = np.dtypes.StringDType(na_object=np.nan)


@pytest.fixture(params=["C", "python"])
def kernels(request, monkeypatch):
    if request.param == "python":
        monkeypatch.setenv("XR_ZSTRINGS_NO_EXT", "1")
    return request.param


def _want(name: str) -> list:
    return [v["bytes"].encode("latin-1") if isinstance(v, dict) else v for v in EXPECTED[name]]


def _plain(values: np.ndarray) -> list:
    return [None if v is None or (isinstance(v, float) and v != v) else v
            for v in np.asarray(values, dtype=object).reshape(-1).tolist()]


@pytest.mark.parametrize("name", sorted(EXPECTED))
@pytest.mark.parametrize("chunks", [None, {}])
@pytest.mark.parametrize("string_dtype", ["T", "O"])
def test_zarrs_optional_nulls_read_as_missing(name, chunks, string_dtype, kernels):
    """Null elements (mask 0), all-null chunks (no data part) and never-written chunks of a null
    fill are missing; a ``[value]`` fill is that value; strings stay StringDType with an NA."""
    got = xr.open_dataset(STORE, engine="zstrings", chunks=chunks, string_dtype=string_dtype)[name]
    assert _plain(got.values) == _want(name)
    if name.startswith("bytes"):
        assert got.dtype == np.dtype(object)  # bytes objects, None where missing
    else:
        assert got.dtype == (NA_T if string_dtype == "T" else np.dtype(object))
        assert got.isnull().values.reshape(-1).tolist() == [v is None for v in _want(name)]
    # a selection inside one chunk and across chunks reads the same values
    flat = got.stack(i=got.dims) if got.ndim > 1 else got
    assert _plain(flat[1:7].values) == _want(name)[1:7]


@pytest.mark.parametrize("name", sorted(EXPECTED))
@pytest.mark.parametrize("chunks", [None, {}])
def test_zarrs_optional_string_dtype_bytes_gives_the_stored_bytes(name, chunks, kernels):
    """``string_dtype="bytes"``: each present value as its stored bytes (strings: their UTF-8, not
    decoded), None where missing (also in left-out inner chunks of a shard), as for other layouts."""
    got = xr.open_dataset(STORE, engine="zstrings", chunks=chunks, string_dtype="bytes")[name]
    assert got.dtype == np.dtype(object)
    want = [v.encode("utf-8") if isinstance(v, str) else v for v in _want(name)]
    assert np.asarray(got.values, dtype=object).reshape(-1).tolist() == want
    assert all(isinstance(v, bytes) or v is None for v in got.values.reshape(-1).tolist())


def test_zarrs_optional_string_dtype_bytes_keeps_invalid_utf8(tmp_path):
    """Bytes a string chunk holds that are not UTF-8 come back as stored under "bytes" (no policy
    applies: nothing is decoded), where reading it as text refuses them and names that fix."""
    import struct

    import numcodecs

    from xr_zstrings import StringDecodeError

    store = tmp_path / "o.zarr"
    shutil.copytree(STORE, store)
    name = "string_packbits_vlenutf8"  # chunk 0 is ["a", None, "é€"]: write ["a", None, b"\xff"]
    mask = np.packbits(np.array([1, 0, 1], bool), bitorder="little").tobytes()
    data = numcodecs.VLenBytes().encode(np.array([b"a", b"\xff"], dtype=object))
    (store / name / "c" / "0").write_bytes(struct.pack("<QQ", len(mask), len(data)) + mask + data)
    raw = xr.open_dataset(store, engine="zstrings", string_dtype="bytes")[name].values
    assert raw[:3].tolist() == [b"a", None, b"\xff"]
    with pytest.raises(StringDecodeError, match=r"string_packbits_vlenutf8/c/0.*not valid UTF-8.*read it as bytes"):
        xr.open_dataset(store, engine="zstrings")[name].values


@pytest.mark.parametrize("name", ["string_packbits_vlenutf8", "bytes_packbits_vlenbytes"])
def test_zarrs_optional_encoder_reproduces_the_golden_chunks(name):
    """Our zarrs.optional encoder writes the golden chunks byte for byte (the decoder's mirror)."""
    meta = parse_node_v3(json.loads((STORE / name / "zarr.json").read_text()), path=f"/{name}")
    pipe = V3Pipeline.from_metadata(list(meta.codecs), data_type=meta.data_type, dtype=meta.dtype,
                                    chunk_shape=meta.chunks)
    values = np.array(_want(name), dtype=object)
    (c,) = meta.chunks
    for key in sorted((STORE / name / "c").iterdir()):
        i = int(key.name)
        assert pipe.encode(values[i * c : (i + 1) * c]) == key.read_bytes(), key.name
        assert _plain(pipe.decode(key.read_bytes())) == _want(name)[i * c : (i + 1) * c]


def test_zarrs_optional_numeric_is_refused_with_the_fix(tmp_path):
    """zarrs' own optional uint8 test array metadata (zarrs tests/data/v3/array_optional.zarr):
    optional numbers are not read: the array is left out of its group (issue 12) with a warning
    that says so and names zarrs."""
    root = tmp_path / "n.zarr"
    (root / "a").mkdir(parents=True)
    (root / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}}))
    (root / "a" / "zarr.json").write_text(json.dumps({
        "zarr_format": 3, "node_type": "array", "shape": [4, 4],
        "data_type": {"name": "optional", "configuration": {"name": "uint8", "configuration": {}}},
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 2]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": None,
        "codecs": [{"name": "optional", "configuration": {
            "mask_codecs": [{"name": "packbits"}],
            "data_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}}],
        "dimension_names": ["y", "x"]}))
    with pytest.warns(UserWarning, match=r"'/a'.*left out.*optional 'uint8'.*string and bytes.*zarrs.*drop_variables"):
        ds = xr.open_dataset(root, engine="zstrings")
    assert "a" not in ds.variables


def test_zarrs_optional_bad_chunks_and_metadata_are_named(tmp_path):
    store = tmp_path / "o.zarr"
    shutil.copytree(STORE, store)
    name = "string_packbits_vlenutf8"
    chunk = store / name / "c" / "0"
    raw = chunk.read_bytes()
    chunk.write_bytes(raw[:-1])  # the header's lengths no longer add up
    with pytest.raises(ChunkError, match=r"zarrs.optional header says .* mask .* data bytes"):
        xr.open_dataset(store, engine="zstrings")[name].values
    chunk.write_bytes(raw)
    meta = json.loads((store / name / "zarr.json").read_text())
    meta["fill_value"] = "x"  # an optional fill value is null or a one-element list
    (store / name / "zarr.json").write_text(json.dumps(meta))
    with pytest.raises(MetadataError, match="null or a one-element list"):
        xr.open_dataset(store, engine="zstrings")
    meta["fill_value"] = None
    meta["codecs"] = [{"name": "vlen-utf8", "configuration": {}}]  # the optional type without its codec
    (store / name / "zarr.json").write_text(json.dumps(meta))
    with pytest.raises(UnsupportedError, match="zarrs.optional codec"):
        xr.open_dataset(store, engine="zstrings")
