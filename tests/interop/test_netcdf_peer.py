"""netCDF4 (netcdf-c 4.10) -> zstrings: stores written by the real netcdf-c, read back by both."""

from __future__ import annotations

import shutil
import zipfile

import netCDF4
import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from peers import (
    assert_same_as_netcdf4,
    nc_url,
    netcdf4_view,
    write_netcdf_shadowed,
    write_netcdf_strings,
    zstrings_view,
)

from xr_zstrings import DimensionError, StringDecodeError


@pytest.fixture(scope="module")
def nczarr_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("nc") / "strings.zarr"
    write_netcdf_strings(path)
    return path


def test_every_group_variable_and_attribute_matches_netcdf_c(tmp_path):
    path = tmp_path / "s.zarr"
    write_netcdf_strings(path)
    got = assert_same_as_netcdf4(path)
    assert got["/"]["vars"]["names"]["values"] == ["a", "héllo", "中文字", "😀x", ""]


def test_pure_zarr_mode_reads_like_nczarr_mode(tmp_path):
    """netcdf-c's mode=zarr drops types and dimension references; its own reader then returns
    NC_CHAR as one-byte strings and scalars with a '_scalar_' dimension (so we cannot compare with
    it directly). We read the '>S1' signature as NC_CHAR and '_scalar_' as 0-d, which gives what the
    same data written in mode=nczarr reads as in netcdf-c."""
    nczarr, pure = tmp_path / "n.zarr", tmp_path / "z.zarr"
    write_netcdf_strings(nczarr, "nczarr")
    write_netcdf_strings(pure, "zarr")
    assert "_nczarr" not in (pure / "chars" / ".zattrs").read_text()
    ref = netcdf4_view(nc_url(nczarr))
    got = zstrings_view(pure)
    assert set(got) == set(ref)
    for path, r in ref.items():
        for name, rv in r["vars"].items():
            gv = got[path]["vars"][name]
            assert (gv["dims"], gv["values"]) == (rv["dims"], rv["values"]), (path, name)
            for k, v in rv["attrs"].items():
                assert gv["attrs"][k] == v, (path, name, k)
        # untyped JSON attributes stay JSON, as xarray's zarr engine returns them
        assert {k: v for k, v in got[path]["attrs"].items() if k != "jsonish"} == {
            k: v for k, v in r["attrs"].items() if k != "jsonish"
        }
    assert got["/"]["attrs"]["jsonish"] == {"a": 1, "b": [1, 2]}


def test_noxarray_mode_gets_netcdf_c_anonymous_dimension_names(tmp_path):
    """mode=nczarr,noxarray (4.10) writes neither NCZarr keys nor _ARRAY_DIMENSIONS: netcdf-c
    invents '_Anonymous_Dim_<len>' names, and so do we. netcdf-c then reads its own NC_CHAR
    as 1-byte strings and fails on the split 'é' (asserted below); we read '>S1' as NC_CHAR."""
    path = tmp_path / "nx.zarr"
    write_netcdf_strings(path, "nczarr,noxarray")
    ref = netCDF4.Dataset(nc_url(path, "zarr"), "r")
    try:
        ref_dims = {name: v.dimensions for name, v in ref.variables.items()}
        ref_names = ref["names"][:].tolist()
        with pytest.raises(UnicodeDecodeError):
            ref["chars"][:]
    finally:
        ref.close()
    ds = xr.open_dataset(path, engine="zstrings")
    for name, dims in ref_dims.items():
        if name.startswith("scalar"):
            assert dims == ("_Anonymous_Dim_1",) and ds[name].dims == dims
        elif name.startswith("chars"):
            assert ds[name].dims == dims[:-1]
        elif len(set(dims)) < len(dims):
            # netcdf-c repeats one anonymous dimension within a variable; we name the repeats
            # distinctly (xarray cannot index a repeated dimension): docs/format-notes.md
            assert ds[name].dims[0] == dims[0] and len(set(ds[name].dims)) == len(dims), name
            assert all(d.startswith(r) for d, r in zip(ds[name].dims, dims, strict=True)), name
        else:
            assert ds[name].dims == dims, name
    assert ds["temp"].dims == ("_Anonymous_Dim_5", "_Anonymous_Dim_5_1")
    assert ds["names"].values.tolist() == ref_names
    assert ds["chars"].values.tolist() == ["ab", "cde", "fghij", "", "é"]


def test_strings_come_back_as_str_with_nczarr_encoding(nczarr_store):
    ds = xr.open_dataset(nczarr_store, engine="zstrings")
    assert ds["names"].dtype == np.dtypes.StringDType()
    assert list(ds["names"].values) == ["a", "héllo", "中文字", "😀x", ""]
    enc = ds["names"].encoding
    assert enc["nc_type"] == "NC_STRING" and enc["maxstrlen"] == 128
    assert ds["chars"].dims == ("x",)
    assert list(ds["chars"].values) == ["ab", "cde", "fghij", "", "é"]
    assert ds["chars"].encoding["char_dim_name"] == "nchar"
    assert list(ds["chars_latin1"].values) == ["é", "b", "ü", "", "x"]
    assert "_Encoding" not in ds["chars_latin1"].attrs
    assert ds["chars_latin1"].encoding["_Encoding"] == "latin-1"
    assert ds["scalar_str"].shape == () and ds["scalar_str"].values[()] == "only one"
    assert ds["scalar_int"].shape == () and int(ds["scalar_int"]) == 42
    assert ds.encoding["unlimited_dims"] == {"t"}
    # internal bookkeeping is not shown as attributes
    for var in ds.variables.values():
        assert not any(k.startswith(("_nczarr", "_ARRAY")) for k in var.attrs)
    assert not any(k.startswith(("_nczarr", "_NCProperties")) for k in ds.attrs)


def test_cf_masking_uses_the_fill_value_for_missing_chunks(nczarr_store):
    ds = xr.open_dataset(nczarr_store, engine="zstrings")
    ref = netCDF4.Dataset(nc_url(nczarr_store), "r")
    try:
        expected = ref["temp"][:]  # netCDF4 masks the fill value itself
    finally:
        ref.close()
    got = ds["temp"].values
    assert got.shape == expected.shape == (5, 5)
    np.testing.assert_array_equal(np.isnan(got), np.ma.getmaskarray(expected))
    np.testing.assert_array_equal(got[~np.isnan(got)], expected.compressed())
    assert ds["temp"].encoding["_FillValue"] == -999.0


def test_concat_characters_false_keeps_char_arrays(nczarr_store):
    ds = xr.open_dataset(nczarr_store, engine="zstrings", concat_characters=False)
    assert ds["chars"].dims == ("x", "nchar")
    assert ds["chars"].dtype == np.dtype("S1")
    ref = netCDF4.Dataset(nc_url(nczarr_store), "r")
    try:
        np.testing.assert_array_equal(ds["chars"].values, ref["chars"][:].filled(b""))
    finally:
        ref.close()


@pytest.mark.parametrize("kind,dtype", [("T", np.dtypes.StringDType()), ("O", np.dtype(object)), ("U", None)])
def test_string_dtype_is_selectable(nczarr_store, kind, dtype):
    ds = xr.open_dataset(nczarr_store, engine="zstrings", string_dtype=kind)
    values = ds["names"].values
    if dtype is None:
        assert values.dtype.kind == "U"
    else:
        assert values.dtype == dtype
    assert values.tolist() == ["a", "héllo", "中文字", "😀x", ""]
    assert ds.sel(x=1)["names"].values[()] == "héllo"


def test_split_utf8_character_from_netcdf_c_truncation(tmp_path):
    """netcdf-c cuts at a byte: "aéé" in maxstrlen=4 is stored as a\\xc3\\xa9\\xc3."""
    path = tmp_path / "trunc.zarr"
    ds = netCDF4.Dataset(nc_url(path), "w")
    ds.createDimension("x", 3)
    v = ds.createVariable("s", str, ("x",))
    v.setncattr("_nczarr_maxstrlen", 4)
    v[:] = np.array(["aéé", "ok", "中文"], dtype=object)
    ds.close()
    raw = (path / "s" / "0").read_bytes()
    assert raw[:4] == "aéé".encode()[:4] == b"a\xc3\xa9\xc3"
    # the peer itself cannot read what it wrote
    ref = netCDF4.Dataset(nc_url(path), "r")
    try:
        with pytest.raises(UnicodeDecodeError):
            ref["s"][:]
    finally:
        ref.close()
    assert xr.open_dataset(path, engine="zstrings")["s"].values.tolist() == ["aé", "ok", "中"]
    replaced = xr.open_dataset(path, engine="zstrings", utf8_errors="replace")["s"].values.tolist()
    assert replaced == ["aé\ufffd", "ok", "中\ufffd"]
    with pytest.raises(StringDecodeError, match="utf8_errors"):
        xr.open_dataset(path, engine="zstrings", utf8_errors="strict")["s"].load()


def test_default_maxstrlen_from_root_attribute(tmp_path):
    path = tmp_path / "dm.zarr"
    ds = netCDF4.Dataset(nc_url(path), "w")
    ds.setncattr("_nczarr_default_maxstrlen", 16)
    ds.createDimension("x", 2)
    v = ds.createVariable("s", str, ("x",))
    v[:] = np.array(["a" * 20, "b"], dtype=object)
    ds.close()
    got = xr.open_dataset(path, engine="zstrings")
    assert got.encoding["default_maxstrlen"] == 16
    assert got["s"].encoding["maxstrlen"] == 16
    assert got["s"].values.tolist() == ["a" * 16, "b"] == netcdf4_view(nc_url(path))["/"]["vars"]["s"]["values"]


def test_netcdf_c_shuffled_compressed_strings(tmp_path):
    """netcdf-c writes shuffle elementsize 0 and shuffles |Sn by 8 bytes; we decode as it does."""
    path = tmp_path / "shuf.zarr"
    ds = netCDF4.Dataset(nc_url(path), "w")
    ds.createDimension("x", 7)
    v = ds.createVariable("s", str, ("x",), zlib=True, shuffle=True, chunksizes=(3,))
    v.setncattr("_nczarr_maxstrlen", 5)
    v[:] = np.array(["abc", "déf", "xyzxy", "q", "", "é", "zz"], dtype=object)
    c = ds.createVariable("c", "S1", ("x",), zlib=True, shuffle=True)
    c[:] = np.array(list(b"abcdefg"), dtype="S1")
    ds.close()
    assert '"elementsize": 0' in (path / "s" / ".zarray").read_text()
    assert_same_as_netcdf4(path)


def test_shadowed_dimension_groups(tmp_path):
    path = tmp_path / "shadow.zarr"
    write_netcdf_shadowed(path)
    assert_same_as_netcdf4(path)
    root = xr.open_dataset(path, engine="zstrings")
    sub = xr.open_dataset(path, engine="zstrings", group="g")
    assert root.sizes["x"] == 3 and sub.sizes["x"] == 4
    assert sub["names"].values.tolist() == ["p", "q", "r", "s"]
    with pytest.raises(DimensionError, match="open_groups"):
        xr.open_datatree(path, engine="zstrings")
    groups = xr.open_groups(path, engine="zstrings")
    assert groups["/g"].sizes["x"] == 4


def test_datatree_of_nested_groups(nczarr_store):
    tree = xr.open_datatree(nczarr_store, engine="zstrings")
    assert tree["sub/labels"].values.tolist() == ["ß", "ok"]
    assert tree["sub/deeper/mixed"].dims == ("x", "y", "z")
    assert tree["sub/deeper/mixed"].shape == (5, 2, 3)
    assert tree["sub"].attrs["note"] == "in a subgroup"
    sub = xr.open_dataset(nczarr_store, engine="zstrings", group="/sub/deeper")
    np.testing.assert_array_equal(sub["mixed"].values, np.arange(30.0).reshape(5, 2, 3))


def test_same_name_dimensions_from_two_groups_in_one_dataset_is_an_error(tmp_path):
    path = tmp_path / "both.zarr"
    ds = netCDF4.Dataset(nc_url(path), "w")
    ds.createDimension("x", 3)
    g = ds.createGroup("g")
    g.createDimension("x", 4)
    a = g.createVariable("a", "i4", ("/x",) if False else ("x",))
    a[:] = [1, 2, 3, 4]
    ds.close()
    # rewrite one variable to reference the root dimension as netCDF allows
    b_meta = (path / "g" / "a" / ".zattrs").read_text()
    assert '"/g/x"' in b_meta
    shutil.copytree(path / "g" / "a", path / "g" / "b")
    (path / "g" / "b" / ".zattrs").write_text(b_meta.replace('"/g/x"', '"/x"'))
    zarray = (path / "g" / "b" / ".zarray").read_text().replace("[4]", "[3]")
    (path / "g" / "b" / ".zarray").write_text(zarray)
    zattrs = (path / "g" / ".zattrs").read_text().replace('["a"]', '["a","b"]')
    (path / "g" / ".zattrs").write_text(zattrs)
    with pytest.raises(DimensionError, match="'x'.*size"):
        xr.open_dataset(path, engine="zstrings", group="g")
    assert xr.open_dataset(path, engine="zstrings", group="g", drop_variables="b").sizes["x"] == 4


@pytest.mark.parametrize("layout", ["top-folder", "root"])
def test_zip_stores_and_urls(nczarr_store, tmp_path, layout):
    zpath = tmp_path / "strings.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        for f in sorted(nczarr_store.rglob("*")):
            if f.is_file():
                rel = f.relative_to(nczarr_store).as_posix()
                zf.write(f, f"strings/{rel}" if layout == "top-folder" else rel)
    expected = zstrings_view(nczarr_store)
    assert zstrings_view(zpath) == expected
    assert zstrings_view(f"file://{zpath}#mode=nczarr,zip") == expected


def test_file_url_form(nczarr_store):
    assert zstrings_view(nc_url(nczarr_store)) == zstrings_view(nczarr_store)


_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(_text, min_size=1, max_size=9), maxstrlen=st.integers(1, 20),
       chunk=st.integers(1, 4))
def test_property_any_unicode_written_by_netcdf_c_reads_as_netcdf_c_reads_it(tmp_path_factory, values,
                                                                               maxstrlen, chunk):
    """netcdf-c writes arbitrary Unicode (cut at maxstrlen bytes); where its own reader succeeds we
    return the same strings, and where it fails (a split character) we return the value with the
    incomplete character dropped, always a prefix of what was written."""
    path = tmp_path_factory.mktemp("prop") / "p.zarr"
    ds = netCDF4.Dataset(nc_url(path), "w")
    ds.createDimension("x", len(values))
    v = ds.createVariable("s", str, ("x",), chunksizes=(min(chunk, len(values)),))
    v.setncattr("_nczarr_maxstrlen", maxstrlen)
    v[:] = np.array(values, dtype=object)
    ds.close()
    got = xr.open_dataset(path, engine="zstrings")["s"].values.tolist()
    ref = netCDF4.Dataset(nc_url(path), "r")
    try:
        expected = ref["s"][:].tolist()
    except UnicodeDecodeError:
        expected = None
    finally:
        ref.close()
    if expected is not None:
        assert got == expected
    for g, original in zip(got, values, strict=True):
        assert original.startswith(g)
        assert len(g.encode()) <= maxstrlen
        assert len(original.encode()) <= maxstrlen or len(g.encode()) > maxstrlen - 4


@pytest.mark.parametrize("compression", ["zlib", "zstd", "bzip2"])
def test_netcdf_c_compressors(tmp_path, compression):
    """Each compressor the netCDF4 wheel's netcdf-c can write to NCZarr (blosc fails there, see
    test_zarr_v2_peer for blosc written by zarr-python)."""
    path = tmp_path / f"{compression}.zarr"
    ds = netCDF4.Dataset(nc_url(path), "w")
    ds.createDimension("x", 7)
    s = ds.createVariable("s", str, ("x",), compression=compression, shuffle=True, chunksizes=(3,))
    s[:] = np.array(["abc", "déf", "", "中文", "x" * 40, "😀", "z"], dtype=object)
    f = ds.createVariable("f", "f8", ("x",), compression=compression, chunksizes=(4,))
    f[:] = np.linspace(0, 1, 7)
    ds.close()
    assert compression[:2] in (path / "s" / ".zarray").read_text()
    assert_same_as_netcdf4(path)
