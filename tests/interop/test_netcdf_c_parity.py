"""Reading as netcdf-c (and xarray on top of it) reads: stores written by netcdf-c itself (netCDF4,
ncgen from Debian's netcdf-bin), each compared with what the peer reads back from the same bytes."""

from __future__ import annotations

import json
import subprocess
import warnings
import zipfile
from pathlib import Path
from typing import Any

import netCDF4
import numpy as np
import pytest
import xarray as xr
import zarr
from peers import (
    assert_same_as_netcdf4,
    nc_url,
    netcdf4_view,
    peer_tool,
    write_netcdf_strings,
    xarray_netcdf4_dims,
)

from xr_zstrings import MetadataError


@pytest.fixture
def ncgen() -> str:
    """Debian's ncgen (netcdf-c 4.9.0), which turns netcdf-c's own CDL into stores (ncdump beside it)."""
    peer_tool("ncdump")
    return peer_tool("ncgen")


def _chars(rows: list[bytes], n: int) -> np.ndarray:
    return np.frombuffer(b"".join(r.ljust(n, b"\0") for r in rows), "S1").reshape(len(rows), n)


def _as_text(values: list) -> list:
    """engine="netcdf4" returns NC_CHAR without _Encoding as bytes; we return str."""
    return [v.decode("utf-8") if isinstance(v, bytes) else _as_text(v) if isinstance(v, list) else v
            for v in values]


# ----------------------------------------------------------------------------- NC_CHAR


def test_char_embedded_nul_from_ncgen_cdl_reads_as_netcdf_c_and_xarray(tmp_path, ncgen):
    """ncgen writes the CDL string "abc\\000def" as 7 chars; netcdf-c keeps the NUL (ncdump prints
    it) and xarray's concat_characters too: only trailing NULs end an NC_CHAR value."""
    cdl = tmp_path / "nul.cdl"
    cdl.write_text(
        "netcdf nul {\ndimensions:\n  n = 3 ;\n  len = 7 ;\nvariables:\n  char c(n, len) ;\n"
        'data:\n  c = "abc\\000def", "xy", "\\000\\000z" ;\n}\n'
    )
    # Debian's ncgen (netcdf-c 4.9.0) writes NCZarr that the netCDF4 wheel's 4.10.1 refuses, so the
    # same CDL also goes to a netCDF-4 file for xarray's engine="netcdf4"; ncdump reads the store
    store, ncfile = tmp_path / "nul.zarr", tmp_path / "nul.nc"
    subprocess.run([ncgen, "-k", "nc4", "-o", nc_url(store), str(cdl)], check=True)
    subprocess.run([ncgen, "-k", "nc4", "-o", str(ncfile), str(cdl)], check=True)
    dump = subprocess.run(["ncdump", nc_url(store)], check=True, capture_output=True, text=True).stdout
    assert '"abc\\000def"' in dump  # netcdf-c's own reading of the stored bytes
    peer = xr.open_dataset(ncfile, engine="netcdf4")
    ours = xr.open_dataset(store, engine="zstrings")
    assert ours["c"].dims == peer["c"].dims == ("n",)
    assert ours["c"].values.tolist() == _as_text(peer["c"].values.tolist())
    assert ours["c"].values.tolist() == ["abc\x00def", "xy", "\x00\x00z"]


_NUL_VALUES = ["abc\x00def", "\x00x", "plain", "", "é\x00ü"]


@pytest.mark.parametrize("chunked", [False, True])
def test_to_nczarr_writes_nc_char_with_embedded_nuls_as_netcdf_c_keeps_them(tmp_path, chunked):
    """NC_CHAR keeps NULs inside a value (only trailing ones end it): to_nczarr writes them, and
    netcdf-c (raw characters and chartostring), xarray's engine="netcdf4" on the same store and
    engine="zstrings" all read the values back unchanged."""
    from xr_zstrings import to_nczarr

    ds = xr.Dataset({"c": ("n", np.array(_NUL_VALUES, dtype=np.dtypes.StringDType()))})
    ds["c"].encoding = {"nc_type": "NC_CHAR"}
    if chunked:
        ds = ds.chunk({"n": 2})
    store = tmp_path / "nul.zarr"
    to_nczarr(ds, store)
    with netCDF4.Dataset(nc_url(store), "r") as nc:
        v = nc["c"]
        v.set_auto_chartostring(False)
        raw = np.ma.getdata(v[:])
        assert raw.dtype == np.dtype("S1") and raw.shape == (5, 7)  # é\0ü is 5 bytes, abc\0def 7
        assert [r.tobytes() for r in raw] == [x.encode("utf-8").ljust(7, b"\0") for x in _NUL_VALUES]
        v.set_auto_chartostring(True)
        assert [str(x) for x in v[:]] == _NUL_VALUES  # netCDF4's chartostring: trailing NULs only
    peer = xr.open_dataset(nc_url(store), engine="netcdf4")
    assert _as_text(peer["c"].values.tolist()) == _NUL_VALUES
    assert xr.open_dataset(store, engine="zstrings")["c"].values.tolist() == _NUL_VALUES


@pytest.mark.parametrize("encoding", ["utf-8", "latin-1"])
def test_to_nczarr_refuses_nc_char_values_ending_with_nul(tmp_path, encoding):
    """A trailing NUL is what ends an NC_CHAR value: netcdf-c and xarray would read "ab\\0" back
    as "ab", so it is refused (naming the variable, the value and the fix), not cut."""
    from xr_zstrings import ZStringsError, to_nczarr

    ds = xr.Dataset({"c": ("n", np.array(["ok", "ab\x00"], dtype=np.dtypes.StringDType()))})
    ds["c"].encoding = {"nc_type": "NC_CHAR", "_Encoding": encoding}
    with pytest.raises(ZStringsError, match=r"variable '/c': 1 value\(s\) end with a NUL.*\[1\] = 'ab\\x00'.*remove the trailing NULs"):
        to_nczarr(ds, tmp_path / "a.zarr")
    assert not (tmp_path / "a.zarr").exists()


def test_to_nczarr_refuses_nc_string_values_with_a_nul_and_names_nc_char(tmp_path):
    """NC_STRING ends at its first NUL in netcdf-c (a C string): "abc\\0def" would read back as
    "abc", so the writer refuses it, naming the variable and the fix (write it as NC_CHAR), and that
    fix writes what netcdf-c then reads back whole."""
    from xr_zstrings import ZStringsError, to_nczarr

    ds = xr.Dataset({"s": ("n", np.array(_NUL_VALUES, dtype=np.dtypes.StringDType())),
                     "b": ("n", np.array([b"a\x00b", b"c", b"", b"d", b"e"]))})
    ds["b"].encoding = {"nc_type": "NC_STRING"}
    with pytest.raises(ZStringsError, match=r"variable '/s': 3 value\(s\) contain a NUL.*NC_STRING.*"
                                            r"encoding=\{'nc_type': 'NC_CHAR'\}"):
        to_nczarr(ds[["s"]], tmp_path / "a.zarr")
    with pytest.raises(ZStringsError, match=r"variable '/b': 1 bytes value\(s\) hold a NUL.*b'a\\x00b'.*NC_CHAR"):
        to_nczarr(ds[["b"]], tmp_path / "b.zarr")
    # netcdf-c's own NC_STRING reading of such bytes: the value ends at the NUL
    with netCDF4.Dataset(nc_url(tmp_path / "peer.zarr"), "w") as nc:
        nc.createDimension("n", 1)
        nc.createVariable("s", str, ("n",))[:] = np.array(["abc\x00def"], dtype=object)
    with netCDF4.Dataset(nc_url(tmp_path / "peer.zarr"), "r") as nc:
        assert nc["s"][:].tolist() == ["abc"]
    ds["s"].encoding = {"nc_type": "NC_CHAR"}
    ds["b"].encoding = {}  # bytes default to NC_CHAR, which keeps the NUL
    to_nczarr(ds, tmp_path / "c.zarr")
    back = xr.open_dataset(tmp_path / "c.zarr", engine="zstrings")
    assert back["s"].values.tolist() == _NUL_VALUES
    peer = xr.open_dataset(nc_url(tmp_path / "c.zarr"), engine="netcdf4")
    assert _as_text(peer["s"].values.tolist()) == _NUL_VALUES
    assert peer["b"].values.tolist() == [b"a\x00b", b"c", b"", b"d", b"e"]


CDL = Path(__file__).parents[1] / "cdl"


def test_ncgen_cdl_chars_read_as_ncdump_and_xarray_netcdf4(tmp_path, ncgen):
    """tests/cdl/chars_dims.cdl (see its README) through ncgen: the NCZarr store read by us, the
    netCDF-4 file by xarray's engine="netcdf4"; ncdump shows the stored NULs."""
    store, ncfile = tmp_path / "cd.zarr", tmp_path / "cd.nc"
    subprocess.run([ncgen, "-k", "nc4", "-o", nc_url(store), str(CDL / "chars_dims.cdl")], check=True)
    subprocess.run([ncgen, "-k", "nc4", "-o", str(ncfile), str(CDL / "chars_dims.cdl")], check=True)
    dump = subprocess.run(["ncdump", nc_url(store)], check=True, capture_output=True, text=True).stdout
    assert '"a\\000b"' in dump and '"\\000\\000cd"' in dump
    peer = xr.open_dataset(ncfile, engine="netcdf4")
    ours = xr.open_dataset(store, engine="zstrings")
    assert {k: v.dims for k, v in ours.variables.items()} == {k: v.dims for k, v in peer.variables.items()}
    for name in peer.variables:
        assert _as_text(ours[name].values.tolist()) == _as_text(peer[name].values.tolist()), name
    assert peer["last_only"].dims == ("F2",) and peer["shared_last"].dims == ("G2", "F3")  # pinned


def _write_char_dims(path, mode: str = "nczarr") -> None:
    """netcdf-c store: a char dim used only by NC_CHAR (joined), one shared with a number and one
    with a coordinate variable of its name (xarray joins neither), one NC_CHAR using a char dim
    not last (so its other user is not joined either)."""
    ds = netCDF4.Dataset(nc_url(path, mode), "w")
    try:
        for name, size in [("n", 2), ("nchar", 5), ("m", 3), ("k", 4), ("w", 2)]:
            ds.createDimension(name, size)
        ds.createVariable("only_char", "S1", ("n", "nchar"))[:] = _chars([b"ab\0d", b"xyz"], 5)
        ds.createVariable("shared_char", "S1", ("n", "m"))[:] = _chars([b"ab", b"c\0e"], 3)
        ds.createVariable("count", "i4", ("m",))[:] = [1, 2, 3]
        ds.createVariable("k", "i4", ("k",))[:] = [0, 1, 2, 3]
        ds.createVariable("coord_char", "S1", ("n", "k"))[:] = _chars([b"abcd", b"e"], 4)
        ds.createVariable("w_last", "S1", ("n", "w"))[:] = _chars([b"ab", b"c"], 2)
        ds.createVariable("w_first", "S1", ("w", "n"))[:] = _chars([b"pq", b"r"], 2)
        v = ds.createVariable("utf8_shared", "S1", ("n", "m"))
        v._Encoding = "utf-8"
        v[:] = _chars([b"ok", b"a"], 3)  # (xarray fails on a split "é" here: per-char decode)
    finally:
        ds.close()


def test_char_dimension_joined_only_where_xarray_netcdf4_joins_it(tmp_path):
    store = tmp_path / "dims.zarr"
    _write_char_dims(store)
    peer_dims = xarray_netcdf4_dims(nc_url(store))["/"]
    ours = xr.open_dataset(store, engine="zstrings")
    assert {k: v.dims for k, v in ours.variables.items()} == peer_dims
    assert peer_dims["only_char"] == ("n",)  # the peer's decisions this pins
    assert peer_dims["shared_char"] == ("n", "m") and peer_dims["coord_char"] == ("n", "k")
    assert peer_dims["w_last"] == ("n", "w")
    peer = xr.open_dataset(nc_url(store), engine="netcdf4")
    for name in peer.variables:
        assert _as_text(ours[name].values.tolist()) == _as_text(peer[name].values.tolist()), name
    assert_same_as_netcdf4(store)  # values, attributes, groups as netCDF4 reads them


def test_char_dimension_rule_counts_dropped_variables_as_xarray_does(tmp_path):
    store = tmp_path / "dims.zarr"
    _write_char_dims(store)
    peer = xr.open_dataset(nc_url(store), engine="netcdf4", drop_variables=["count", "utf8_shared"])
    ours = xr.open_dataset(store, engine="zstrings", drop_variables=["count", "utf8_shared"])
    assert {k: v.dims for k, v in ours.variables.items()} == {k: v.dims for k, v in peer.variables.items()}


# ----------------------------------------------------------------------------- URL mode


def _netcdf4_groups(url: str) -> dict[str, Any]:
    """Per group: variable order, dims, dtype, unmasked values and attributes as netCDF4 reads them."""
    out: dict[str, Any] = {}
    ds = netCDF4.Dataset(url, "r")
    try:

        def walk(g: Any, path: str) -> None:
            g.set_auto_mask(False)
            out[path] = {
                "vars": {
                    v.name: (v.dimensions, v.dtype, v.isunlimited() if hasattr(v, "isunlimited") else None)
                    for v in g.variables.values()
                },
                "unlimited": {d.name for d in g.dimensions.values() if d.isunlimited()},
                "attrs": {k: g.getncattr(k) for k in g.ncattrs()},
                "values": {v.name: v[...] for v in g.variables.values()
                           if "nchar" not in v.dimensions},  # (zarr mode: NC_CHAR fails on a split é)
            }
            for name, sub in g.groups.items():
                walk(sub, f"{path.rstrip('/')}/{name}")

        walk(ds, "/")
    finally:
        ds.close()
    return out


@pytest.mark.parametrize("mode", ["zarr", "nczarr"])
def test_url_mode_chooses_the_reading_as_netcdf_c(tmp_path, mode):
    """#mode=zarr reads a store with NCZarr metadata as pure Zarr (netcdf-c: dimensions per group
    from _ARRAY_DIMENSIONS, no unlimited dimension, variables in listing order); #mode=nczarr uses
    the NCZarr metadata. Both compared with netCDF4 on the same URL."""
    store = tmp_path / "s.zarr"
    write_netcdf_strings(store)
    url = nc_url(store, mode)
    ref = _netcdf4_groups(url)
    ours = xr.open_groups(url, engine="zstrings", mask_and_scale=False, decode_times=False)
    assert set(ours) == set(ref)
    for path, r in ref.items():
        ds = ours[path]
        # NC_CHAR and scalars differ on purpose in pure Zarr (docs/format-notes.md): netcdf-c's
        # zarr mode returns NC_CHAR as 1-byte strings and scalars on a '_scalar_' dimension
        plain = [n for n, (dims, _, _) in r["vars"].items() if "_scalar_" not in dims and "nchar" not in dims]
        assert [n for n in ds.variables if n in plain] == plain, path  # same order
        for name in plain:
            assert ds[name].dims == r["vars"][name][0], (path, name)
            want = r["values"][name]
            got = ds[name].values
            assert got.tolist() == np.asarray(want).tolist(), (path, name)
        assert set(ds.encoding["unlimited_dims"]) == r["unlimited"], path
        for k, v in r["attrs"].items():
            assert np.asarray(ds.attrs[k]).tolist() == np.asarray(v).tolist(), (path, k)
    if mode == "zarr":
        assert ref["/"]["unlimited"] == set() and "x" in ref["/sub"]["vars"]["uses_root_x"][0]
    else:
        assert ref["/"]["unlimited"] == {"t"}


def test_plain_path_keeps_auto_detection(tmp_path):
    store = tmp_path / "s.zarr"
    write_netcdf_strings(store)
    plain = xr.open_dataset(store, engine="zstrings")
    nczarr = xr.open_dataset(nc_url(store, "nczarr"), engine="zstrings")
    pure = xr.open_dataset(nc_url(store, "zarr"), engine="zstrings")
    assert list(plain.variables) == list(nczarr.variables) != list(pure.variables)
    assert plain.encoding["unlimited_dims"] == {"t"} and pure.encoding["unlimited_dims"] == set()


# ----------------------------------------------------------------------------- anonymous dims


def test_repeated_anonymous_dimension_gets_distinct_names(tmp_path):
    """netcdf-c names both axes of a 5x5 array without dimension names '_Anonymous_Dim_5'; xarray
    cannot index that (isel returns shape ()). We name the repeat '_Anonymous_Dim_5_1'."""
    store = tmp_path / "anon.zarr"
    root = zarr.open_group(store, mode="w", zarr_format=2)
    a = root.create_array("sq", shape=(5, 5), chunks=(5, 5), dtype="i4", fill_value=-1)
    a[:] = np.arange(25).reshape(5, 5)
    b = root.create_array("line", shape=(5,), chunks=(5,), dtype="i4", fill_value=-1)
    b[:] = np.arange(5)
    ref = netCDF4.Dataset(nc_url(store, "zarr"), "r")
    try:
        assert ref["sq"].dimensions == ("_Anonymous_Dim_5", "_Anonymous_Dim_5")  # the peer's names
        ref_values = ref["sq"][:].tolist()
        assert ref["line"].dimensions == ("_Anonymous_Dim_5",)
    finally:
        ref.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # xarray warns on duplicate dimension names
        ds = xr.open_dataset(store, engine="zstrings")
    assert ds["sq"].dims == ("_Anonymous_Dim_5", "_Anonymous_Dim_5_1")
    assert ds["line"].dims == ("_Anonymous_Dim_5",)
    assert ds["sq"].values.tolist() == ref_values
    assert ds["sq"].isel(_Anonymous_Dim_5_1=0).values.tolist() == [r[0] for r in ref_values]
    assert int(ds["sq"].sum()) == sum(map(sum, ref_values))


# ----------------------------------------------------------------------------- missing root


def _xarray_store(path, *, consolidated: bool) -> xr.Dataset:
    ds = xr.Dataset(
        {"s": ("x", np.array(["a", "bc", "déf"], dtype=object)), "n": (("x", "y"), np.arange(6).reshape(3, 2))},
        attrs={"title": "t"},
    )
    ds.to_zarr(path, zarr_format=2, consolidated=consolidated)
    ds.to_zarr(path, group="sub", zarr_format=2, consolidated=consolidated, mode="a")
    return ds


def _same(ours: xr.Dataset, peer: xr.Dataset) -> None:
    assert set(ours.variables) == set(peer.variables)
    for name in peer.variables:
        assert ours[name].dims == peer[name].dims, name
        assert ours[name].values.tolist() == peer[name].values.tolist(), name
    assert ours.attrs == peer.attrs


def test_foreign_zarr_without_root_zgroup_reads_with_a_warning(tmp_path):
    store = tmp_path / "noroot.zarr"
    _xarray_store(store, consolidated=False)
    peer = {g: xr.open_dataset(store, engine="zarr", group=g, consolidated=False) for g in (None, "sub")}
    (store / ".zgroup").unlink()
    # the peers refuse it: netcdf-c 4.10.1 ("NCZarr error") and zarr-python's group open
    with pytest.raises(OSError):
        netCDF4.Dataset(nc_url(store, "zarr"), "r")
    with pytest.raises(Exception):  # noqa: B017 - zarr-python's own GroupNotFoundError
        zarr.open_group(store, mode="r", zarr_format=2)
    with pytest.warns(UserWarning, match=r"no root '\.zgroup'.*implicit root group"):
        ours = xr.open_dataset(store, engine="zstrings")
    _same(ours, peer[None])
    with pytest.warns(UserWarning, match="no root"):
        _same(xr.open_dataset(store, engine="zstrings", group="sub"), peer["sub"])
    # each array as zarr-python reads it
    assert ours["n"].values.tolist() == zarr.open_array(store, path="n", mode="r")[:].tolist()


def test_store_with_only_zmetadata_reads_as_xarray_zarr_engine(tmp_path):
    """What xarray's engine="zarr" read from the store before its metadata objects were removed;
    after, zarr-python 3.1.6 refuses it (no root .zgroup) and netcdf-c 4.10.1 shows it empty."""
    store = tmp_path / "consolidated.zarr"
    _xarray_store(store, consolidated=True)
    peer = {g: xr.open_dataset(store, engine="zarr", consolidated=True, group=g).load() for g in (None, "sub")}
    for f in [*store.rglob(".zgroup"), *store.rglob(".zarray"), *store.rglob(".zattrs")]:
        f.unlink()
    assert (store / ".zmetadata").is_file()
    with pytest.raises(Exception):  # noqa: B017 - zarr-python's own GroupNotFoundError
        xr.open_dataset(store, engine="zarr", consolidated=True)
    with pytest.warns(UserWarning, match=r"no root '\.zgroup'.*'\.zmetadata'"):
        ours = xr.open_dataset(store, engine="zstrings")
    _same(ours, peer[None])
    with pytest.warns(UserWarning, match="zmetadata"):
        _same(xr.open_dataset(store, engine="zstrings", group="sub"), peer["sub"])
    ref = netCDF4.Dataset(nc_url(store, "zarr"), "r")  # netcdf-c 4.10.1 sees an empty dataset
    try:
        assert list(ref.variables) == [] and list(ref.groups) == []
    finally:
        ref.close()


def test_nczarr_store_without_its_root_is_still_refused(tmp_path):
    store = tmp_path / "cut.zarr"
    write_netcdf_strings(store)
    (store / ".zgroup").unlink()
    (store / ".zattrs").unlink()
    with pytest.raises(MetadataError, match="interrupted write"):
        xr.open_dataset(store, engine="zstrings")


# ----------------------------------------------------------------------------- zip root


def _zip_of(store, zpath, *, folder: str, extra_top: bool, top_first: bool) -> None:
    with zipfile.ZipFile(zpath, "w") as zf:
        if extra_top and top_first:
            zf.writestr(".zgroup", json.dumps({"zarr_format": 2}))
        for f in sorted(store.rglob("*")):
            if f.is_file():
                zf.write(f, f"{folder}/{f.relative_to(store).as_posix()}")
        if extra_top and not top_first:
            zf.writestr(".zgroup", json.dumps({"zarr_format": 2}))


def test_zip_root_is_the_top_when_metadata_is_there_else_the_one_folder(tmp_path):
    """A zip with metadata at its top is read from the top whatever entry 0 is, as zarr-python's
    ZipStore reads it (netcdf-c's zip reader, libnczarr/zmap_zip.c, takes entry 0's folder, which
    reads a subgroup of `cd s.zarr && zip -r ../s.zip .` as the root: issue 36); a zip with
    nothing at its top is read from its one folder, netcdf-c's layout."""
    store = tmp_path / "s.zarr"
    write_netcdf_strings(store)
    expected = netcdf4_view(nc_url(store))
    z0 = tmp_path / "folder_only.zip"
    _zip_of(store, z0, folder="s", extra_top=False, top_first=False)
    assert set(xr.open_dataset(z0, engine="zstrings").variables) == set(expected["/"]["vars"])
    for top_first in (False, True):
        z = tmp_path / f"top_first_{top_first}.zip"
        _zip_of(store, z, folder="s", extra_top=True, top_first=top_first)
        top = xr.open_dataset(z, engine="zstrings")  # zarr-python's layout: the (empty) top group
        peer = xr.open_dataset(zarr.storage.ZipStore(z, mode="r"), engine="zarr", consolidated=False)
        assert set(top.variables) == set(peer.variables) == set()


# ----------------------------------------------------------------------------- undecodable arrays


def _zarrs_issue_287(path) -> None:
    """zarrs' test store tests/data/issue_287.zarr, made by its script tests/data/issue_287.py with
    zarr-python (a numpy.datetime64 array beside vlen-utf8 string arrays in group 'meta')."""
    from zarr.dtype import VariableLengthUTF8

    root = zarr.open_group(path, mode="w", zarr_format=3)
    meta = root.create_group("meta")
    date = np.array(["2023-01-01", "2023-01-02", "2023-01-03"], dtype="datetime64[ms]")
    meta.create_array("date", shape=date.shape, dtype=date.dtype)[:] = date
    labels = ["collection_a", "collection_b", "collection_c"]
    meta.create_array("collection", shape=(3,), dtype=VariableLengthUTF8())[:] = labels


def test_array_we_cannot_decode_is_read_through_zarr_python(tmp_path):
    store = tmp_path / "issue_287.zarr"
    _zarrs_issue_287(store)
    ours = xr.open_dataset(store, engine="zstrings", group="meta")
    peer = zarr.open_group(store, mode="r")["meta"]
    assert set(ours.variables) == {"date", "collection"}
    assert ours["date"].values.tolist() == peer["date"][:].tolist()
    assert ours["date"].dtype == peer["date"].dtype
    assert ours["collection"].values.tolist() == peer["collection"][:].tolist()
    assert ours["date"].encoding["read_by"] == "zarr-python"
    assert "numpy.datetime64" in ours["date"].encoding["zstrings_unsupported"]
    # one lazy selection through zarr-python's oindex
    assert ours["date"][[0, 2]].values.tolist() == peer["date"].oindex[[0, 2]].tolist()


def test_array_nobody_here_decodes_is_left_out_with_a_warning(tmp_path):
    store = tmp_path / "bad.zarr"
    _zarrs_issue_287(store)
    zj = store / "meta" / "date" / "zarr.json"
    meta = json.loads(zj.read_text())
    meta["data_type"] = {"name": "no.such.type", "configuration": {}}
    zj.write_text(json.dumps(meta))
    with pytest.raises(Exception):  # noqa: B017 - zarr-python cannot open it either
        zarr.open_array(store, path="meta/date", mode="r")
    with pytest.warns(UserWarning, match=r"'/meta/date'.*left out.*no\.such\.type.*drop_variables=\['date'\]"):
        ours = xr.open_dataset(store, engine="zstrings", group="meta")
    assert list(ours.variables) == ["collection"]
    assert ours["collection"].values.tolist() == ["collection_a", "collection_b", "collection_c"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list(xr.open_dataset(store, engine="zstrings", group="meta", drop_variables=["date"]).variables) == [
            "collection"]


# ----------------------------------------------------------------------------- lenient codecs


def test_gzip_id_holding_zlib_streams_decodes_with_a_warning(tmp_path):
    """z5py writes zlib streams under the codec id 'gzip' (zarr_implementations lists them as
    readable). The bytes here are numcodecs' Zlib output (zarr-python), relabelled 'gzip'."""
    import numcodecs

    store = tmp_path / "z5py_like.zarr"
    g = zarr.open_group(store, mode="w", zarr_format=2)
    s = g.create_array("s", shape=(4,), chunks=(2,), dtype=str, compressors=numcodecs.Zlib(level=5))
    s[:] = ["a", "bé", "", "xyz"]
    n = g.create_array("n", shape=(4,), chunks=(2,), dtype="i4", compressors=numcodecs.Zlib(level=5), fill_value=-1)
    n[:] = [1, 2, 3, 4]
    for a in (s, n):
        a.attrs["_ARRAY_DIMENSIONS"] = ["x"]
    peer = {k: zarr.open_array(store, path=k, mode="r")[:].tolist() for k in ("s", "n")}
    for name in ("s", "n"):
        za = store / name / ".zarray"
        meta = json.loads(za.read_text())
        meta["compressor"] = {"id": "gzip", "level": 5}
        za.write_text(json.dumps(meta))
    with pytest.warns(UserWarning, match="'gzip' is a zlib stream"):
        ours = xr.open_dataset(store, engine="zstrings", mask_and_scale=False).load()
    assert {k: ours[k].values.tolist() for k in ("s", "n")} == peer
    # a real gzip chunk still decodes silently
    gz = tmp_path / "gz.zarr"
    real = zarr.open_group(gz, mode="w", zarr_format=2).create_array(
        "g", shape=(3,), chunks=(3,), dtype="i4", compressors=numcodecs.GZip(level=1), fill_value=-1)
    real[:] = [7, 8, 9]
    real.attrs["_ARRAY_DIMENSIONS"] = ["x"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = xr.open_dataset(gz, engine="zstrings")["g"].values.tolist()
    assert got == zarr.open_array(gz, path="g", mode="r")[:].tolist() == [7, 8, 9]


@pytest.mark.parametrize("name", ["zarrs.vlen_v2", "https://codec.zarrs.dev/array_to_bytes/vlen_v2"])
def test_zarrs_vlen_v2_reads_as_the_interleaved_layout(tmp_path, name):
    """zarrs' vlen_v2 is "the same as vlen-utf8, vlen-array, vlen-bytes from Zarr V2, decoupled from
    the data type" (zarrs codec/array_to_bytes/vlen_v2 docs): zarr-python's vlen-utf8/vlen-bytes
    chunks under zarrs' codec name read as zarr-python reads the originals."""
    from zarr.dtype import VariableLengthBytes, VariableLengthUTF8

    store = tmp_path / "v2.zarr"
    g = zarr.open_group(store, mode="w", zarr_format=3)
    s = g.create_array("s", shape=(5,), chunks=(2,), dtype=VariableLengthUTF8(), dimension_names=["x"])
    s[:] = ["a", "bé", "", "中文", "😀"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr-python: bytes has no v3 spec yet
        b = g.create_array("b", shape=(2,), chunks=(2,), dtype=VariableLengthBytes(), dimension_names=["y"])
        b[:] = [b"\x00\xff", b"q"]
    peer = {k: zarr.open_array(store, path=k, mode="r")[:].tolist() for k in ("s", "b")}
    for k in ("s", "b"):
        zj = store / k / "zarr.json"
        meta = json.loads(zj.read_text())
        assert meta["codecs"][0]["name"] in ("vlen-utf8", "vlen-bytes")
        meta["codecs"][0] = {"name": name}
        zj.write_text(json.dumps(meta))
    ours = xr.open_dataset(store, engine="zstrings")
    assert ours["s"].values.tolist() == peer["s"]
    assert ours["b"].values.tolist() == peer["b"]
    assert ours["s"].encoding["layout"] == "vlen-utf8"
