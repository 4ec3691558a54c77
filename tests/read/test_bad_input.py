"""Damaged stores: every case ends in a ZStringsError naming the store and key, never a crash."""

from __future__ import annotations

import json
import shutil
import zlib

import pytest
import xarray as xr
from fuzz_stores import assert_array_left_out_or_read_by_zarr_python
from peers import write_netcdf_strings

from xr_zstrings import (
    ChunkError,
    DimensionError,
    MetadataError,
    StoreNotFoundError,
    StringDecodeError,
    UnsupportedError,
    ZStringsError,
)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    path = tmp_path_factory.mktemp("bad") / "good.zarr"
    write_netcdf_strings(path)
    return path


def _edit_json(path, fn):
    obj = json.loads(path.read_text())
    fn(obj)
    path.write_text(json.dumps(obj))


def _root_group(obj):
    return obj["_nczarr_group"]


CASES = {
    # name: (mutation(store_path), expected error class, text the message must contain, read data?)
    "malformed root json": (lambda p: (p / ".zattrs").write_text('{"title": "x", '), MetadataError,
                            ".zattrs", False),
    "truncated zarray": (lambda p: (p / "names" / ".zarray").write_text('{"zarr_format": 2, "shape": [5'),
                         MetadataError, "names/.zarray", False),
    # (an attribute object that is not UTF-8 reads, its values as bytes: test_attribute_not_utf8_is_bytes)
    "metadata not utf-8": (lambda p: (p / "temp" / ".zarray").write_bytes(b'{"zarr_format": 2, "x": "\xff"}'),
                           MetadataError, "temp/.zarray", False),
    "metadata not an object": (lambda p: (p / "counts" / ".zarray").write_text("[1, 2]"), MetadataError,
                               "counts", False),
    "shape disagrees with dimension": (
        lambda p: _edit_json(p / "counts" / ".zarray", lambda o: o.update(shape=[7], chunks=[7])),
        DimensionError, "'x' has size 5", False),
    "dangling dimension reference": (
        lambda p: _edit_json(p / "counts" / ".zattrs",
                             lambda o: o["_nczarr_array"].update(dimension_references=["/nowhere"])),
        DimensionError, "/nowhere", False),
    "too few dimension references": (
        lambda p: _edit_json(p / "temp" / ".zattrs",
                             lambda o: o["_nczarr_array"].update(dimension_references=["/t"])),
        DimensionError, "temp", False),
    "array name with ..": (
        lambda p: _edit_json(p / ".zattrs", lambda o: _root_group(o)["arrays"].append("..")),
        MetadataError, "'..'", False),
    "array name with slash": (
        lambda p: _edit_json(p / ".zattrs", lambda o: _root_group(o)["arrays"].append("a/b")),
        MetadataError, "'a/b'", False),
    "listed array missing": (
        lambda p: _edit_json(p / ".zattrs", lambda o: _root_group(o)["arrays"].append("ghost")),
        MetadataError, "ghost/.zarray", False),
    "listed group missing": (
        lambda p: _edit_json(p / ".zattrs", lambda o: _root_group(o)["groups"].append("ghost")),
        MetadataError, "ghost/.zgroup", False),
    "negative dimension size": (
        lambda p: _edit_json(p / ".zattrs", lambda o: _root_group(o)["dimensions"].update(x=-1)),
        MetadataError, "dimension 'x'", False),
    "unknown dtype": (lambda p: _edit_json(p / "counts" / ".zarray", lambda o: o.update(dtype="<q9")),
                      UnsupportedError, "'<q9'", False),
    "complex dtype": (lambda p: _edit_json(p / "counts" / ".zarray", lambda o: o.update(dtype="<c16")),
                      UnsupportedError, "counts/.zarray", False),
    "unknown compressor": (
        lambda p: _edit_json(p / "temp" / ".zarray", lambda o: o.update(compressor={"id": "nosuchcodec"})),
        UnsupportedError, "nosuchcodec", False),
    "fill value of the wrong type": (
        lambda p: _edit_json(p / "counts" / ".zarray", lambda o: o.update(fill_value="abc")),
        MetadataError, "fill_value", False),
    "chunks rank mismatch": (
        lambda p: _edit_json(p / "temp" / ".zarray", lambda o: o.update(chunks=[2])),
        MetadataError, "chunks", False),
    "chunk of the wrong size": (lambda p: (p / "counts" / "0").write_bytes(b"\x00" * 12), ChunkError,
                                "counts/0", True),
    "corrupt compressed chunk": (lambda p: (p / "temp" / "0.0").write_bytes(b"not zlib at all"), ChunkError,
                                 "temp/0.0", True),
    "invalid utf-8 inside a string": (
        lambda p: (p / "names" / "0").write_bytes(b"\xffbc".ljust(128, b"\0") * 5), StringDecodeError,
        "names", True),
    "decompressed chunk of the wrong size": (
        lambda p: (p / "temp" / "0.0").write_bytes(zlib.compress(b"\x00" * 3)), ChunkError, "temp/0.0", True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_damaged_store_gives_a_clear_error(pristine, tmp_path, case):
    mutate, err, text, read = CASES[case]
    path = tmp_path / "s.zarr"
    shutil.copytree(pristine, path)
    mutate(path)
    if case in ("unknown dtype", "complex dtype", "unknown compressor"):
        # one array we cannot decode never blocks its group (issue 12)
        assert_array_left_out_or_read_by_zarr_python(path, "temp" if case == "unknown compressor" else "counts")
        return
    with pytest.raises(err) as info:
        ds = xr.open_dataset(path, engine="zstrings")
        if read:
            ds.load()
    msg = str(info.value)
    assert isinstance(info.value, ZStringsError)
    assert text in msg, msg
    assert str(path) in msg, msg


def test_not_a_store(tmp_path):
    with pytest.raises(StoreNotFoundError, match="missing.zarr"):
        xr.open_dataset(tmp_path / "missing.zarr", engine="zstrings")
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreNotFoundError, match=r"\.zgroup"):
        xr.open_dataset(tmp_path / "empty", engine="zstrings")


def test_bad_options_are_rejected_by_name(pristine):
    with pytest.raises(ZStringsError, match="string_dtype"):
        xr.open_dataset(pristine, engine="zstrings", string_dtype="float")
    with pytest.raises(ZStringsError, match="utf8_errors"):
        xr.open_dataset(pristine, engine="zstrings", utf8_errors="ignore")


def test_attribute_not_utf8_is_bytes(pristine, tmp_path):
    """An attribute whose text is not UTF-8 (netcdf-c stores a text attribute's bytes as they are)
    comes back as its bytes with a StringDecodeWarning naming it; the rest of the store reads, as
    netCDF4 reads it. Invalid UTF-8 in array metadata stays a MetadataError (above)."""
    from xr_zstrings import StringDecodeWarning

    path = tmp_path / "s.zarr"
    shutil.copytree(pristine, path)
    zattrs = path / "temp" / ".zattrs"
    raw = zattrs.read_bytes()
    assert raw.startswith(b"{")
    zattrs.write_bytes(b'{"bad": "caf\xe9 \x01", "bad_list": ["\xff"], ' + raw[1:])
    with pytest.warns(StringDecodeWarning, match=r"\['bad', 'bad_list'\].*temp/\.zattrs.*bytes"):
        ds = xr.open_dataset(path, engine="zstrings")
    assert ds["temp"].attrs["bad"] == b"caf\xe9 \x01"
    assert ds["temp"].attrs["bad_list"] == [b"\xff"]
    xr.testing.assert_equal(ds.load(), xr.open_dataset(pristine, engine="zstrings").load())
    import netCDF4

    with netCDF4.Dataset(f"file://{path}#mode=nczarr,file") as nc:  # the peer opens it too
        assert nc["temp"].getncattr("bad").startswith("caf")


def test_v3_attribute_not_utf8_is_bytes(tmp_path):
    import zarr

    from xr_zstrings import StringDecodeWarning

    g = zarr.open_group(tmp_path / "v3.zarr", mode="w", zarr_format=3)
    a = g.create_array("v", shape=(2,), dtype="i4", dimension_names=["x"])
    a[:] = [1, 2]
    meta = tmp_path / "v3.zarr" / "v" / "zarr.json"
    obj = json.loads(meta.read_text())
    obj["attributes"]["note"] = "PLACEHOLDER"
    meta.write_bytes(json.dumps(obj).encode().replace(b"PLACEHOLDER", b"\xe9t\xe9"))
    with pytest.warns(StringDecodeWarning, match="note"):
        ds = xr.open_dataset(tmp_path / "v3.zarr", engine="zstrings")
    assert ds["v"].attrs["note"] == b"\xe9t\xe9" and ds["v"].values.tolist() == [1, 2]
