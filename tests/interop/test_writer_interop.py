"""zstrings writer -> real netcdf-c (netCDF4, read-only) and -> engine="zstrings", and back.

Test ids read like ``zstrings->netCDF4``: the writer on the left, the reader on the right.
"""

from __future__ import annotations

import json
import warnings

import dask
import netCDF4
import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from peers import nc_url, netcdf4_view, write_netcdf_shadowed, write_netcdf_strings

from xr_zstrings import (
    StringOverflowError,
    StringTruncationWarning,
    UnsupportedError,
    ZStringsError,
)
from xr_zstrings.write.convert import convert
from xr_zstrings.write.nczarr import to_nczarr, with_netcdf_c_strings

T = np.dtypes.StringDType()
MULTI = ["a", "héllo", "中文字", "😀x", "", "ß" * 70]


def sample_dataset() -> xr.Dataset:
    """Strings of every shape, NC_CHAR, numbers with fill values, scalars, empty, typed attributes."""
    return xr.Dataset(
        {
            "names": ("x", np.array(MULTI, dtype=T), {"long_name": "station name"}),
            "grid": (("x", "y"), np.array([[s, s[::-1]] for s in MULTI], dtype=T)),
            "chars": ("x", np.array(["ab", "cé", "", "xyz", "中", "q"], dtype=T), {},
                      {"nc_type": "NC_CHAR", "char_dim_name": "nchar"}),
            "temp": (("x", "y"), np.arange(12, dtype="f4").reshape(6, 2), {"units": "K",
                     "valid_range": np.array([0, 400], "f4")}, {"_FillValue": np.float32(-999)}),
            "counts": ("x", np.arange(6, dtype="i8") * 10**10),
            "flag": ("x", np.array([True, False] * 3)),
            "small": ("y", np.array([1, -2], dtype="i1")),
            "scalar_str": ((), "only one é"),
            "scalar_num": ((), np.int32(42)),
            "empty": ("e", np.array([], dtype=T)),
        },
        coords={"x": np.array([f"st{i}é" for i in range(6)], dtype=T), "y": [10, 20]},
        attrs={"title": "stations", "ints": np.array([1, 2, 3], dtype="i2"), "fl": np.float32(1.5),
               "dbl": np.array([0.25, 4.0]), "tags": ["a", "héllo"], "jsonish": '{"a": 1, "b": [1,2]}',
               "numeric_text": "17", "json_text": '"q"'},
    )


def _attrs_of(url: str) -> dict:
    ds = netCDF4.Dataset(url, "r")
    try:
        return {k: ds.getncattr(k) for k in ds.ncattrs()}
    finally:
        ds.close()


# ------------------------------------------------------------------------------------------------
# 1. Dataset / DataTree / mapping -> to_nczarr -> netcdf-c and zstrings
# ------------------------------------------------------------------------------------------------


def test_dataset_roundtrip_zstrings_to_netCDF4(tmp_path):
    path = tmp_path / "d.zarr"
    ds = sample_dataset()
    to_nczarr(ds, path)
    ref = netcdf4_view(nc_url(path))["/"]
    assert ref["dims"] == {"x": (6, False), "y": (2, False), "nchar": (3, False), "e": (0, False)}
    for name in ("names", "grid", "chars", "x", "scalar_str", "empty"):
        assert ref["vars"][name]["values"] == ds[name].values.tolist(), name
    assert ref["vars"]["chars"]["dims"] == ("x",)  # joined over the nchar dimension
    assert ref["vars"]["temp"]["values"] == ds["temp"].values.tolist()
    assert ref["vars"]["temp"]["attrs"] == {"_FillValue": -999.0, "units": "K", "valid_range": [0.0, 400.0]}
    assert ref["vars"]["counts"]["values"] == ds["counts"].values.tolist()
    assert ref["vars"]["scalar_num"] == {"dims": (), "values": 42, "attrs": {}}
    assert ref["attrs"] == {"title": "stations", "ints": [1, 2, 3], "fl": 1.5, "dbl": [0.25, 4.0],
                            "tags": ["a", "héllo"], "jsonish": '{"a": 1, "b": [1,2]}', "numeric_text": "17",
                            "json_text": '"q"'}
    attrs = _attrs_of(nc_url(path))  # netCDF types survive
    assert attrs["ints"].dtype == np.int16 and isinstance(attrs["fl"], np.float32)
    assert attrs["dbl"].dtype == np.float64 and isinstance(attrs["tags"], list)
    nc = netCDF4.Dataset(nc_url(path), "r")
    try:
        assert nc["names"].dtype is str and nc["chars"].dtype == np.dtype("S1")
        assert nc["small"].dtype == np.int8 and nc["temp"].dtype == np.float32
        assert nc["scalar_str"].dimensions == ()
    finally:
        nc.close()


def test_dataset_roundtrip_zstrings_to_zstrings(tmp_path):
    path = tmp_path / "d.zarr"
    ds = sample_dataset()
    to_nczarr(ds, path)
    back = xr.open_dataset(path, engine="zstrings")
    xr.testing.assert_identical(back, ds)
    assert back["names"].encoding["maxstrlen"] == len(("ß" * 70).encode())
    assert back["chars"].encoding["nc_type"] == "NC_CHAR"
    # and the written metadata is NCZarr 2 in the layout every netcdf-c from 4.9.1 to 4.10 reads
    assert json.loads((path / ".zgroup").read_text())["_nczarr_superblock"] == {"version": "2.0.0"}
    root = json.loads((path / ".zattrs").read_text())
    assert "_nczarr_group" not in root and "_nczarr_group" not in root["_nczarr_attr"]["types"]
    assert root["_NCProperties"].startswith("version=2,xr_zstrings=")
    sc = json.loads((path / "scalar_str" / ".zattrs").read_text())
    assert sc["_ARRAY_DIMENSIONS"] == ["_scalar_"]
    sc_zarray = json.loads((path / "scalar_str" / ".zarray").read_text())
    assert sc_zarray["_nczarr_array"] == {"dimrefs": [], "scalar": 1, "storage": "scalar"}
    assert sc_zarray["shape"] == [1]
    assert json.loads((path / "chars" / ".zarray").read_text())["dtype"] == ">S1"
    # netcdf-c 4.10's own layout on request
    to_nczarr(ds, tmp_path / "d410.zarr", netcdf_c="4.10")
    root = json.loads((tmp_path / "d410.zarr" / ".zattrs").read_text())
    assert root["_nczarr_superblock"] == {"version": "2.0.0"}
    assert root["_nczarr_attr"]["types"]["_nczarr_group"] == "|J0"
    sc = json.loads((tmp_path / "d410.zarr" / "scalar_str" / ".zattrs").read_text())
    assert sc["_nczarr_array"] == {"dimension_references": [], "scalar": 1, "storage": "chunked"}
    xr.testing.assert_identical(xr.open_dataset(tmp_path / "d410.zarr", engine="zstrings"), ds)


def test_read_write_read_keeps_encodings_zstrings_to_zstrings(tmp_path):
    """netcdf-c store -> zstrings -> to_nczarr: same dtypes, widths, chunks, codecs, fill values."""
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    write_netcdf_strings(src)
    to_nczarr(xr.open_groups(src, engine="zstrings"), dst, netcdf_c="4.10")  # netcdf-c 4.10's own layout
    for zarray in src.rglob(".zarray"):
        rel = zarray.relative_to(src)
        a, b = json.loads(zarray.read_text()), json.loads((dst / rel).read_text())
        for key in ("shape", "dtype", "chunks", "compressor", "filters", "fill_value"):
            assert a[key] == b[key], (rel, key)
    for zattrs in src.rglob(".zattrs"):
        a, b = json.loads(zattrs.read_text()), json.loads((dst / zattrs.relative_to(src)).read_text())
        for key in ("_nczarr_group", "_nczarr_array"):
            assert a.get(key) == b.get(key), (zattrs, key)
    ref, got = netcdf4_view(nc_url(src)), netcdf4_view(nc_url(dst))
    for g in ref:
        for name, v in ref[g]["vars"].items():
            assert got[g]["vars"][name]["values"] == v["values"], (g, name)
            assert {k: x for k, x in got[g]["vars"][name]["attrs"].items()} == v["attrs"], (g, name)
        assert got[g]["dims"] == ref[g]["dims"], g
        assert got[g]["attrs"] == ref[g]["attrs"], g


def sample_tree() -> xr.DataTree:
    root = xr.Dataset({"v": ("x", np.arange(3))}, coords={"x": np.array(["a", "b", "c"], dtype=T)},
                      attrs={"level": "root"})
    sub = xr.Dataset({"labels": ("y", np.array(["ß", "ok"], dtype=T)), "uses_x": ("x", np.array([1.5, 2, 3]))},
                     attrs={"level": "sub"})
    deeper = xr.Dataset({"mixed": (("x", "y", "z"), np.arange(24.0).reshape(3, 2, 4)),
                         "word": ((), "tief")})
    return xr.DataTree.from_dict({"/": root, "/sub": sub, "/sub/deeper": deeper})


def test_datatree_zstrings_to_netCDF4(tmp_path):
    path = tmp_path / "t.zarr"
    tree = sample_tree()
    to_nczarr(tree, path)
    ref = netcdf4_view(nc_url(path))
    assert set(ref) == {"/", "/sub", "/sub/deeper"}
    assert ref["/sub"]["dims"] == {"y": (2, False)} and ref["/sub/deeper"]["dims"] == {"z": (4, False)}
    assert ref["/sub/deeper"]["vars"]["mixed"]["dims"] == ("x", "y", "z")
    assert ref["/sub/deeper"]["vars"]["mixed"]["values"] == np.arange(24.0).reshape(3, 2, 4).tolist()
    assert ref["/sub"]["vars"]["labels"]["values"] == ["ß", "ok"]
    assert ref["/sub/deeper"]["vars"]["word"]["values"] == "tief"
    refs = json.loads((path / "sub" / "deeper" / "mixed" / ".zarray").read_text())["_nczarr_array"]
    assert refs["dimrefs"] == ["/x", "/sub/y", "/sub/deeper/z"]


def test_datatree_zstrings_to_zstrings(tmp_path):
    path = tmp_path / "t.zarr"
    tree = sample_tree()
    tree.zstrings.to_nczarr(path)  # the accessor
    xr.testing.assert_identical(xr.open_datatree(path, engine="zstrings"), tree)


def test_mapping_with_shadowed_dimension_zstrings_to_netCDF4_and_zstrings(tmp_path):
    path = tmp_path / "m.zarr"
    groups = {
        "/": xr.Dataset({"rootvar": ("x", np.array([1, 2, 3], "i4"))}),
        "/g": xr.Dataset({"subvar": ("x", np.array([4, 5, 6, 7], "i4")),
                          "names": ("x", np.array(["p", "q", "r", "s"], dtype=T))}),
    }
    to_nczarr(groups, path)
    ref = netcdf4_view(nc_url(path))
    assert ref["/"]["dims"] == {"x": (3, False)} and ref["/g"]["dims"] == {"x": (4, False)}
    assert ref["/g"]["vars"]["names"]["values"] == ["p", "q", "r", "s"]
    back = xr.open_groups(path, engine="zstrings")
    for k, ds in groups.items():
        xr.testing.assert_identical(back[k], ds)
    # a netcdf-c store with shadowing round-trips through open_groups too
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    write_netcdf_shadowed(src)
    to_nczarr(xr.open_groups(src, engine="zstrings"), dst)
    assert netcdf4_view(nc_url(dst)) == netcdf4_view(nc_url(src))


def test_pure_zarr2_zstrings_to_netCDF4_mode_zarr(tmp_path):
    path = tmp_path / "z.zarr"
    ds = sample_dataset().drop_vars(["scalar_str", "scalar_num"])
    to_nczarr(ds, path, format="zarr2")
    assert "_nczarr_array" not in (path / "names" / ".zattrs").read_text()
    nc = netCDF4.Dataset(nc_url(path, "zarr"), "r")
    try:
        assert nc["names"][:].tolist() == MULTI
        assert nc["grid"][:].tolist() == ds["grid"].values.tolist()
        assert nc["temp"][:].filled().tolist() == ds["temp"].values.tolist()
    finally:
        nc.close()
    back = xr.open_dataset(path, engine="zstrings")
    xr.testing.assert_equal(back, ds)
    assert back.attrs["title"] == "stations" and back.attrs["tags"] == ["a", "héllo"]


# ------------------------------------------------------------------------------------------------
# 2. netCDF-4 file -> xarray -> to_nczarr -> netcdf-c reads what it read from the file
# ------------------------------------------------------------------------------------------------


def _write_nc(path) -> None:
    ds = netCDF4.Dataset(path, "w")
    try:
        ds.createDimension("x", 4)
        ds.createDimension("t", None)
        ds.createDimension("nchar", 5)
        ds.title = "from netCDF-4"
        ds.version = np.int32(3)
        ds.setncattr_string("tags", ["α", "b"])
        s = ds.createVariable("names", str, ("x",))
        s.long_name = "names"
        s[:] = np.array(["a", "héllo", "中文字", "😀"], dtype=object)
        c = ds.createVariable("chars", "S1", ("x", "nchar"))
        c[:] = np.array([v.encode() for v in ["ab", "cé", "", "xyz"]], "S5").view("S1").reshape(4, 5)
        f = ds.createVariable("temp", "f4", ("t", "x"), fill_value=-999.0, zlib=True, shuffle=True,
                              chunksizes=(2, 4))
        f.units = "K"
        f[0:3, :] = np.arange(12, dtype="f4").reshape(3, 4)
        f[1, 2] = np.ma.masked
        g = ds.createGroup("sub")
        g.createDimension("y", 2)
        lab = g.createVariable("labels", str, ("y",))
        lab[:] = np.array(["ß", "ok"], dtype=object)
        u = g.createVariable("uses_x", "i2", ("x",))
        u[:] = np.arange(4)
    finally:
        ds.close()


@pytest.mark.parametrize("how", ["open_datatree", "convert"])
def test_netcdf4_file_to_nczarr_netCDF4(tmp_path, how):
    nc, store = tmp_path / "f.nc", tmp_path / "f.zarr"
    _write_nc(nc)
    if how == "convert":
        convert(nc, store)
    else:
        tree = xr.open_datatree(nc, engine="netcdf4")
        to_nczarr(tree, store)
    assert netcdf4_view(nc_url(store)) == netcdf4_view(str(nc))
    z = netCDF4.Dataset(nc_url(store), "r")
    try:
        assert z["names"].dtype is str and z["chars"].dtype == np.dtype("S1")
        assert z.dimensions["t"].isunlimited()
    finally:
        z.close()


# ------------------------------------------------------------------------------------------------
# 3. NCZarr by netcdf-c -> zstrings -> to_netcdf -> netCDF4 (NC_STRING) -> back to NCZarr
# ------------------------------------------------------------------------------------------------


def test_netcdf_c_store_to_netcdf_file_and_back(tmp_path):
    store, nc, back = tmp_path / "s.zarr", tmp_path / "s.nc", tmp_path / "back.zarr"
    write_netcdf_strings(store)
    ref = netcdf4_view(nc_url(store))
    ds = xr.open_dataset(store, engine="zstrings")
    ds.to_netcdf(tmp_path / "plain.nc", engine="netcdf4")  # the everyday workflow
    plain = netCDF4.Dataset(tmp_path / "plain.nc", "r")
    try:
        assert plain["names"].dtype is str
        assert plain["names"][:].tolist() == ref["/"]["vars"]["names"]["values"]
    finally:
        plain.close()
    convert(store, nc)  # every group, chars kept as NC_CHAR
    assert netcdf4_view(str(nc)) == ref
    f = netCDF4.Dataset(nc, "r")
    try:
        assert f["names"].dtype is str and f["sub"]["labels"].dtype is str
    finally:
        f.close()
    convert(nc, back)
    assert netcdf4_view(nc_url(back)) == ref


# ------------------------------------------------------------------------------------------------
# 4. Property tests: arbitrary Unicode through to_nczarr
# ------------------------------------------------------------------------------------------------

_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
_settings = settings(max_examples=25, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@_settings
@given(values=st.lists(_text, min_size=1, max_size=8))
def test_property_fits_exactly_zstrings_to_netCDF4_and_zstrings(tmp_path_factory, values):
    path = tmp_path_factory.mktemp("p") / "p.zarr"
    ds = xr.Dataset({"s": ("x", np.array(values, dtype=T))})
    to_nczarr(ds, path)
    ref = netCDF4.Dataset(nc_url(path), "r")
    try:
        assert ref["s"][:].tolist() == values
    finally:
        ref.close()
    assert xr.open_dataset(path, engine="zstrings")["s"].values.tolist() == values


@_settings
@given(values=st.lists(_text, min_size=1, max_size=8), width=st.integers(1, 10),
       policy=st.sampled_from(["error", "truncate", "widen"]))
def test_property_overflow_policies_zstrings_to_netCDF4(tmp_path_factory, values, width, policy):
    path = tmp_path_factory.mktemp("p") / "p.zarr"
    ds = xr.Dataset({"s": ("x", np.array(values, dtype=T))})
    too_long = sum(len(v.encode()) > width for v in values)
    if too_long and policy == "error":
        with pytest.raises(StringOverflowError, match="'/s'"):
            to_nczarr(ds, path, maxstrlen=width, on_overflow=policy)
        assert not path.exists() or not any(path.iterdir())
        return
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        to_nczarr(ds, path, maxstrlen=width, on_overflow=policy)
    cut = [w for w in rec if issubclass(w.category, StringTruncationWarning)]
    ref = netCDF4.Dataset(nc_url(path), "r")
    try:
        got_nc = ref["s"][:].tolist()
    finally:
        ref.close()
    got = xr.open_dataset(path, engine="zstrings")["s"].values.tolist()
    assert got == got_nc
    if policy == "widen" or not too_long:
        assert got == values and not cut
        return
    assert len(cut) == 1 and f"{too_long} value(s)" in str(cut[0].message)
    for g, v in zip(got, values, strict=True):
        assert v.startswith(g) and len(g.encode()) <= width
        if g != v:  # cut at the last character boundary that fits
            assert len((g + v[len(g)]).encode()) > width


# ------------------------------------------------------------------------------------------------
# Policies and refusals, by name
# ------------------------------------------------------------------------------------------------


def test_overflow_error_names_variable_longest_width_and_options(tmp_path):
    ds = xr.Dataset({"s": ("x", np.array(["aéé", "b"], dtype=T))})
    with pytest.raises(StringOverflowError) as e:
        to_nczarr(ds, tmp_path / "e.zarr", maxstrlen=4)
    msg = str(e.value)
    assert "'/s'" in msg and "5 bytes" in msg and "width is 4" in msg
    assert "on_overflow='widen'" in msg and "on_overflow='truncate'" in msg


def test_truncate_cuts_at_character_boundary_with_count(tmp_path):
    path = tmp_path / "t.zarr"
    ds = xr.Dataset({"s": ("x", np.array(["aéé", "b", "中文"], dtype=T))})
    with pytest.warns(StringTruncationWarning, match="2 value"):
        to_nczarr(ds, path, maxstrlen=4, on_overflow="truncate")
    nc = netCDF4.Dataset(nc_url(path), "r")  # netCDF4 reads it (no half character left)
    try:
        assert nc["s"][:].tolist() == ["aé", "b", "中"]
    finally:
        nc.close()
    to_nczarr(ds, path, mode="w", maxstrlen=4, on_overflow="widen")
    assert json.loads((path / "s" / ".zarray").read_text())["dtype"] == "|S6"


@pytest.mark.parametrize(
    "value, why",
    [("a\x00b", "NUL"), ("ab\x00", "NUL"), ("x\ud800y", "surrogate")],
    ids=["embedded-NUL", "trailing-NUL", "lone-surrogate"],
)
def test_unrepresentable_strings_are_refused(tmp_path, value, why):
    ds = xr.Dataset({"s": ("x", np.array(["ok", "placeholder"], dtype=object))})
    ds["s"].values[1] = value  # xarray itself chokes on a lone surrogate in the constructor
    with pytest.raises(ZStringsError, match=why) as e:
        to_nczarr(ds, tmp_path / "u.zarr")
    assert "'/s'" in str(e.value)


def test_mode_w_dash_never_overwrites_and_w_replaces(tmp_path):
    path = tmp_path / "m.zarr"
    ds = xr.Dataset({"s": ("x", np.array(["a"], dtype=T))})
    to_nczarr(ds, path)
    with pytest.raises(ZStringsError, match="mode='w-' never overwrites"):
        to_nczarr(ds, path)
    ds2 = xr.Dataset({"t": ("y", np.array(["b", "c"], dtype=T))})
    to_nczarr(ds2, path, mode="w")
    xr.testing.assert_identical(xr.open_dataset(path, engine="zstrings"), ds2)
    assert not (path / "s").exists()


@pytest.mark.parametrize("kind", ["directory", "store"])
def test_interrupted_write_is_detected_by_netCDF4_and_zstrings(tmp_path, monkeypatch, kind):
    """A write that fails part-way: a directory target was never created (the write went to a
    sibling that is removed); a zarr-python Store target, written in place, is rolled back by the
    failed write itself (its chunks and placeholder removed: the transaction's undo), so readers
    find no store and the same write can simply run again."""
    import zarr

    from xr_zstrings.write import chunks as chunk_io

    path = tmp_path / "i.zarr"
    ds = xr.Dataset({"s": ("x", np.array([f"v{i}" for i in range(100)], dtype=T)),
                     "n": ("x", np.arange(100.0))}, attrs={"title": "x"})
    ds["s"].encoding["chunks"] = (10,)
    calls = {"n": 0}
    real = chunk_io._encode_chunk

    def failing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 11:  # the 10 chunks of "s" are written, "n" fails
            raise OSError("disk full")
        return real(*args, **kwargs)

    target = path if kind == "directory" else zarr.storage.LocalStore(path)
    monkeypatch.setattr(chunk_io, "_encode_chunk", failing)
    monkeypatch.setattr(chunk_io, "_BATCH_BYTES", 1)  # every chunk written at once, not batched
    with pytest.raises(OSError, match="disk full"):
        to_nczarr(ds, target)
    monkeypatch.undo()
    if kind == "directory":
        assert list(tmp_path.iterdir()) == []
        with pytest.raises(FileNotFoundError):
            xr.open_dataset(path, engine="zstrings")
    else:
        assert sorted(p.name for p in path.rglob("*")) == []  # nothing left: rolled back
        with pytest.raises(FileNotFoundError):
            xr.open_dataset(path, engine="zstrings")
        with pytest.raises(OSError):
            netCDF4.Dataset(nc_url(path), "r")
        to_nczarr(ds, zarr.storage.LocalStore(path))  # mode="w-": the target is empty again
        xr.testing.assert_identical(xr.open_dataset(path, engine="zstrings"), ds)
    to_nczarr(ds, target, mode="w")
    xr.testing.assert_identical(xr.open_dataset(path, engine="zstrings"), ds)


def test_codecs_netcdf_c_reads_and_refusal(tmp_path):
    values = np.array([f"wert-{i}-é" for i in range(50)], dtype=T)
    ds = xr.Dataset({
        "zlib": ("x", values, {}, {"compressor": {"id": "zlib", "level": 5},
                                   "filters": [{"id": "shuffle"}], "chunks": (16,)}),
        "zstd": ("x", values, {}, {"compressor": {"id": "zstd", "level": 3}}),
        "bz2": ("x", np.arange(50.0), {}, {"compression": "bzip2", "complevel": 2}),
        "blosc": ("x", np.arange(50, dtype="i4"), {}, {"compressor": {"id": "blosc", "cname": "lz4", "clevel": 5,
                                                                          "shuffle": 1, "blocksize": 0}}),
        "nc4": ("x", np.arange(50.0), {}, {"zlib": True, "complevel": 1, "shuffle": True}),
    })
    path = tmp_path / "c.zarr"
    to_nczarr(ds, path)
    nc = netCDF4.Dataset(nc_url(path), "r")
    try:
        for name in ds.data_vars:
            assert nc[name][:].tolist() == ds[name].values.tolist(), name
    finally:
        nc.close()
    xr.testing.assert_identical(xr.open_dataset(path, engine="zstrings"), ds)
    assert json.loads((path / "zlib" / ".zarray").read_text())["filters"] == [{"id": "shuffle", "elementsize": 0}]
    bad = xr.Dataset({"v": ("x", np.arange(3.0), {}, {"compressor": {"id": "gzip", "level": 1}})})
    with pytest.raises(UnsupportedError, match="'gzip'.*netcdf-c"):
        to_nczarr(bad, tmp_path / "bad.zarr")


@pytest.mark.parametrize("kind", ["zip", "url", "zarr-store"])
def test_targets_zstrings_to_zstrings(tmp_path, kind):
    ds = xr.Dataset({"s": ("x", np.array(MULTI, dtype=T))}, attrs={"a": "b"})
    if kind == "zip":
        target = tmp_path / "d.zip"
    elif kind == "url":
        target = nc_url(tmp_path / "u.zarr")
    else:
        from zarr.storage import MemoryStore

        target = MemoryStore()
    to_nczarr(ds, target)
    xr.testing.assert_identical(xr.open_dataset(target, engine="zstrings"), ds)
    if kind == "url":
        assert netcdf4_view(target)["/"]["vars"]["s"]["values"] == MULTI


# ------------------------------------------------------------------------------------------------
# Append, dask, the to_zarr workflow
# ------------------------------------------------------------------------------------------------


def test_append_along_unlimited_zstrings_to_netCDF4(tmp_path):
    path = tmp_path / "a.zarr"

    def part(start, n):
        t = np.arange(start, start + n)
        return xr.Dataset(
            {"s": ("t", np.array([f"é{i}" * (i % 4) for i in t], dtype=T)),
             "v": (("t", "x"), np.stack([t * 1.0, -t * 1.0], 1), {}, {"_FillValue": -9999.0}),
             "fixed": ("x", np.array(["a", "b"], dtype=T))},
            coords={"t": t})

    first = part(0, 3)
    first["s"].encoding.update(chunks=(2,), maxstrlen=16)
    first["v"].encoding["chunks"] = (2, 2)
    to_nczarr(first, path, unlimited_dims=["t"])
    to_nczarr(part(3, 4), path, mode="a", append_dim="t")
    to_nczarr(part(7, 1), path, mode="a", append_dim="t")
    expected = xr.concat([part(0, 3), part(3, 4), part(7, 1)], dim="t", data_vars="minimal")
    ref = netcdf4_view(nc_url(path))["/"]
    assert ref["dims"]["t"] == (8, True)
    assert ref["vars"]["s"]["values"] == expected["s"].values.tolist()
    assert ref["vars"]["v"]["values"] == expected["v"].values.tolist()
    xr.testing.assert_identical(xr.open_dataset(path, engine="zstrings"), expected)
    with pytest.raises(ZStringsError, match="not unlimited"):
        to_nczarr(part(0, 1).drop_vars(["s", "v", "t"]), path, mode="a", append_dim="x")


def test_dask_parallel_write_zstrings_to_netCDF4(tmp_path):
    path = tmp_path / "k.zarr"
    n = 20_000
    values = np.array([f"名前-{i}" * (1 + i % 3) for i in range(n)], dtype=T)
    ds = xr.Dataset({"s": ("x", values), "v": ("x", np.arange(n, dtype="f8"))}).chunk({"x": 3000})
    with dask.config.set(scheduler="threads"):
        to_nczarr(ds, path)
    assert sorted(p.name for p in (path / "s").iterdir() if not p.name.startswith(".")) == \
        sorted(str(i) for i in range(7))
    nc = netCDF4.Dataset(nc_url(path), "r")
    try:
        assert nc["s"][:].tolist() == values.tolist()
    finally:
        nc.close()
    back = xr.open_dataset(path, engine="zstrings", chunks={})
    assert back["s"].encoding["chunks"] == (3000,)
    xr.testing.assert_identical(back.compute(), ds.compute())
    # truncation on dask blocks: one warning with the total count
    width = 12
    over = sum(len(v.encode()) > width for v in values.tolist())
    with pytest.warns(StringTruncationWarning, match=f"{over} value"):
        to_nczarr(ds, tmp_path / "cut.zarr", maxstrlen=width, on_overflow="truncate")
    cut = xr.open_dataset(tmp_path / "cut.zarr", engine="zstrings")["s"].values.tolist()
    assert all(v.startswith(c) and len(c.encode()) <= width for c, v in zip(cut, values.tolist(), strict=True))


def test_prepare_for_zarr_to_zarr_netCDF4_mode_zarr(tmp_path):
    path = tmp_path / "x.zarr"
    ds = xr.Dataset({"names": ("x", np.array(MULTI, dtype=T)), "v": ("x", np.arange(6.0))},
                    coords={"x": np.array([f"k{i}é" for i in range(6)], dtype=T)})
    with_netcdf_c_strings(ds).to_zarr(path, zarr_format=2, consolidated=False)
    nc = netCDF4.Dataset(nc_url(path, "zarr"), "r")
    try:
        assert nc["names"][:].tolist() == MULTI
        assert nc["x"][:].tolist() == ds["x"].values.tolist()
    finally:
        nc.close()
    xr.testing.assert_identical(xr.open_dataset(path, engine="zstrings"), ds)


def test_mode_a_adds_variables_zstrings_to_netCDF4(tmp_path):
    """mode='a' without append_dim (xarray's to_zarr(mode='a')): new variables on existing and new
    dimensions, in the root and a subgroup, coordinates sent again left alone, group attributes
    updated; netcdf-c reads the result, existing values unchanged."""
    path = tmp_path / "add.zarr"
    first = xr.Dataset({"names": ("x", np.array(MULTI, dtype=T)), "v": ("x", np.arange(6.0))},
                       coords={"x": np.arange(6)}, attrs={"title": "first"})
    sub = xr.Dataset({"w": ("x", np.arange(6, dtype="i4"))})
    to_nczarr(xr.DataTree.from_dict({"/": first, "/sub": sub}), path, unlimited_dims=["x"])
    more = xr.Dataset(
        {"codes": ("x", np.array([f"c{i}é" for i in range(6)], dtype=T), {"units": "1"}),
         "chars": ("x", np.array(["a", "bb", "", "é", "z", "q"], dtype=T), {},
                   {"nc_type": "NC_CHAR", "char_dim_name": "nc4"}),
         "grid": (("x", "band"), np.ones((6, 3), "f4"), {}, {"_FillValue": -1.0})},
        coords={"x": np.arange(6), "band": np.array(["r", "g", "b"], dtype=T)},
        attrs={"history": "added"})
    to_nczarr(xr.DataTree.from_dict({"/": more, "/sub": xr.Dataset({"u": ("x", np.arange(6.0) * 2)})}),
              path, mode="a")
    view = netcdf4_view(nc_url(path))
    root = view["/"]
    assert root["dims"] == {"x": (6, True), "band": (3, False), "nc4": (2, False)}
    assert root["vars"]["names"]["values"] == MULTI  # untouched
    assert root["vars"]["codes"]["values"] == [f"c{i}é" for i in range(6)]
    assert root["vars"]["chars"]["values"] == ["a", "bb", "", "é", "z", "q"]
    assert root["vars"]["band"]["values"] == ["r", "g", "b"]
    assert root["vars"]["grid"]["dims"] == ("x", "band")
    assert root["attrs"]["title"] == "first" and root["attrs"]["history"] == "added"
    assert view["/sub"]["vars"]["u"]["values"] == (np.arange(6.0) * 2).tolist()
    assert view["/sub"]["vars"]["u"]["dims"] == ("x",)  # the root's x, referenced from the subgroup
    back = xr.open_datatree(path, engine="zstrings")
    assert back["codes"].values.tolist() == [f"c{i}é" for i in range(6)]
    assert back["sub/u"].values.tolist() == (np.arange(6.0) * 2).tolist()
    # a variable the store holds with other values is refused, nothing written
    before = sorted(p.name for p in path.iterdir())
    changed = xr.Dataset({"v": ("x", np.arange(6.0) + 1), "new": ("x", np.zeros(6))})
    with pytest.raises(ZStringsError, match="already holds it"):
        to_nczarr(changed, path, mode="a")
    assert sorted(p.name for p in path.iterdir()) == before
    # a dimension of another size than the store's is a DimensionError
    from xr_zstrings import DimensionError

    with pytest.raises(DimensionError, match="'x'"):
        to_nczarr(xr.Dataset({"z": ("x", np.zeros(4))}), path, mode="a")
    # and a group the store lacks
    with pytest.raises(ZStringsError, match="Cannot add group"):
        to_nczarr({"/": xr.Dataset(), "/other": xr.Dataset({"q": ("y", [1])})}, path, mode="a")


@pytest.mark.parametrize("mode", ["nczarr", "zarr"])
def test_mode_a_adds_variables_to_a_netcdf_c_store(tmp_path, mode):
    """A store netcdf-c wrote (NCZarr, or pure Zarr v2): variables added with mode='a' are read by
    netcdf-c beside everything it wrote, which stays as it was (attributes with their types)."""
    path = tmp_path / "nc.zarr"
    if mode == "nczarr":
        write_netcdf_strings(path, mode)
    else:  # netcdf-c cannot read back its own pure-Zarr NC_CHAR holding "é" (format notes): none here
        nc = netCDF4.Dataset(nc_url(path, mode), "w")
        nc.createDimension("x", 5)
        nc.title = "pure zarr"
        v = nc.createVariable("names", str, ("x",))
        v[:] = np.array(["a", "héllo", "中文字", "😀x", ""], dtype=object)
        nc.createVariable("counts", "i8", ("x",))[:] = np.arange(5)
        nc.close()
    before = netcdf4_view(nc_url(path, mode))
    add = xr.Dataset({"extra": ("x", np.array(["uno", "dós", "", "四", "five"], dtype=T)),
                      "level": ("lev", np.arange(3, dtype="i2"))})
    to_nczarr(add, path, mode="a")
    after = netcdf4_view(nc_url(path, mode))
    assert after["/"]["vars"]["extra"]["values"] == ["uno", "dós", "", "四", "five"]
    assert after["/"]["vars"]["level"]["values"] == [0, 1, 2]
    for g, gv in before.items():
        assert after[g]["attrs"] == gv["attrs"]
        for name, var in gv["vars"].items():
            assert after[g]["vars"][name] == var, (g, name)
    if mode == "nczarr":
        assert after["/"]["dims"]["lev"] == (3, False)
    back = xr.open_dataset(path, engine="zstrings")
    assert back["extra"].values.tolist() == ["uno", "dós", "", "四", "five"]


@pytest.mark.parametrize("target", ["path", "zarr-store"])
def test_mode_a_extends_older_nczarr_layouts_zstrings_to_netCDF4(tmp_path, target):
    """A store netcdf-c 4.9.1 wrote (metadata in .zgroup/.zarray) gets new variables in its own
    layout: the new variable and the old ones read back (netCDF4 4.10 here; test_netcdf_c_versions
    reads our stores with the old netcdf-c themselves). attrs.zarr: the one 4.9.1 store 4.10 reads.
    A zarr-python Store is changed in place: the root .zgroup (which holds the group listing in this
    layout) is the placeholder until the last write, then the updated listing."""
    import shutil
    from pathlib import Path

    from zarr.storage import LocalStore

    path = tmp_path / "old.zarr"
    shutil.copytree(Path(__file__).parents[1] / "golden" / "netcdf-c-4.9.1_netCDF4-1.6.3" / "attrs.zarr", path)
    before = netcdf4_view(nc_url(path))
    to_nczarr(xr.Dataset({"new": ("q", np.array([1, 2], "i4"))}, attrs={"added": "yes"}),
              path if target == "path" else LocalStore(path), mode="a")
    after = netcdf4_view(nc_url(path))
    assert after["/"]["vars"]["new"]["values"] == [1, 2] and after["/"]["attrs"]["added"] == "yes"
    assert after["/"]["dims"]["q"] == (2, False)
    del after["/"]["vars"]["new"], after["/"]["attrs"]["added"], after["/"]["dims"]["q"]
    assert after == before
    assert "_nczarr_group" not in json.loads((path / ".zattrs").read_text())


@pytest.mark.parametrize("chunked", [False, True])
def test_missing_strings_become_the_fill_value_zstrings_to_netCDF4(tmp_path, chunked):
    """None/NaN in a string variable: written as its string _FillValue (engine='netcdf4' masks them
    back to NaN, as for a file xarray wrote), refused with the fix named when it has none."""
    values = np.array(["a", None, "cé", np.nan, ""], dtype=object)
    ds = xr.Dataset({"s": ("x", values), "c": ("x", values.copy(), {}, {"nc_type": "NC_CHAR"})})
    if chunked:
        ds = ds.chunk({"x": 2})
    counted = r"dask block of it\): 1 missing value\(s\)" if chunked else r"'/s': 2 missing value\(s\)"
    with pytest.raises(ZStringsError, match=counted + r".*element \[1\].*_FillValue"):
        to_nczarr(ds, tmp_path / "none.zarr")
    assert not (tmp_path / "none.zarr" / ".zgroup").exists()
    ds["s"].encoding["_FillValue"] = "N/A"
    ds["c"].encoding["_FillValue"] = "-"
    path = tmp_path / "fill.zarr"
    to_nczarr(ds, path)
    ref = netcdf4_view(nc_url(path))["/"]["vars"]
    assert ref["s"]["values"] == ["a", "N/A", "cé", "N/A", ""]
    assert ref["s"]["attrs"]["_FillValue"] == "N/A"
    assert ref["c"]["values"] == ["a", "-", "cé", "-", ""]
    masked = xr.open_dataset(nc_url(path), engine="netcdf4")["s"].values.tolist()
    assert masked[0] == "a" and masked[2] == "cé" and all(v != v for v in (masked[1], masked[3]))
    assert xr.open_dataset(path, engine="zstrings", mask_and_scale=False)["s"].values.tolist() == [
        "a", "N/A", "cé", "N/A", ""]
    got = xr.open_dataset(path, engine="zstrings")["s"].values.tolist()  # masked as engine="netcdf4"
    assert [v if v == v else None for v in got] == [v if v == v else None for v in masked]
    assert values[1] is None  # the caller's array is not changed
