"""The zarr-python plugin (``xr_zstrings.zarr_plugin``): our layouts in plain zarr-python, xarray's
engine="zarr" and dask, compared with what engine="zstrings" reads and with the golden chunks
(zarrs' documented encodings, netcdf-c's own stores), in whichever zarr-python this runs.

What zarr-python still refuses is pinned with strict xfails naming the check: each one fails the
day zarr-python lifts its limit, so the plugin table (docs/guide.md) can be updated then.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings
from importlib.metadata import entry_points, version
from pathlib import Path

import dask.array as da
import netCDF4
import numpy as np
import pytest
import xarray as xr
import zarr
from peers import nc_url
from zarr.storage import LocalStore

import xr_zstrings.zarr_plugin as zp  # registers the plugin (zarr 3.1.x never loads data-type entry points)
from xr_zstrings import to_nczarr, to_zarr_v3

TESTS = Path(__file__).resolve().parents[1]
GOLDEN = TESTS / "golden"
CHUNKS = TESTS / "golden_chunks"
OPTIONAL = CHUNKS / "zarrs_optional"
VALUES = json.loads((CHUNKS / "values.json").read_text())
STRS, BINS = VALUES["strs"], [b.encode("latin-1") for b in VALUES["bins_latin1"]]
#: NC_CHAR stored as ">S1" (netcdf-c 4.9.1 and later); 4.9.0 wrote "<U1", see the xfail below
CHAR_STORES = sorted(p for p in GOLDEN.glob("*/chars.zarr") if "4.9.0" not in p.parent.name)
ZARR_VERSION = tuple(int(x) for x in version("zarr").split(".")[:3])


def _ids(p: Path) -> str:
    return p.parent.name.split("_")[0]


def _chars(store: Path) -> list[str]:
    return sorted(p.name for p in store.iterdir() if (p / ".zarray").exists())


def _zstrings_raw(store: Path, name: str) -> np.ndarray:
    """The stored characters as engine="zstrings" returns them (bytes, not joined, not masked)."""
    ds = xr.open_dataset(store, engine="zstrings", string_dtype="bytes", concat_characters=False,
                         mask_and_scale=False)
    return ds[name].values


def test_entry_points_name_the_plugin_classes():
    eps = entry_points()
    types = {e.name: e.load() for e in eps.select(group="zarr.data_type")}
    assert {n: types.get(n) for n in ("nc_char", "zarrs_optional")} == {
        "nc_char": zp.NCChar, "zarrs_optional": zp.ZarrsOptional}
    codecs = {e.name: e.load() for e in eps.select(group="zarr.codecs")}
    assert {n: codecs[n] for n in zp.CODEC_NAMES} == zp.CODEC_NAMES


def test_plugin_changes_nothing_zarr_python_already_infers(tmp_path):
    """``S1`` stays zarr-python's NullTerminatedBytes ("|S1") and object stays ambiguous."""
    a = zarr.create_array(LocalStore(tmp_path / "a.zarr"), shape=(2,), dtype="S1", zarr_format=2)
    assert json.loads((tmp_path / "a.zarr" / ".zarray").read_text())["dtype"] == "|S1"
    assert type(a.metadata.dtype).__name__ == "NullTerminatedBytes"
    with pytest.raises(ValueError, match="ambiguous"):
        zarr.create_array(LocalStore(tmp_path / "b.zarr"), shape=(2,), dtype=object)


def test_registration_per_zarr_version():
    """zarr >= 3.4.1 loads the data types from the entry points; 3.1.x needs ``register()`` (or the
    import of ``xr_zstrings.zarr_plugin``): the documented way, checked in a fresh process."""
    array = CHAR_STORES[0] / "c_utf8"
    code = ("import sys, zarr\n"
            "if sys.argv[2] == 'register':\n    import xr_zstrings.zarr_plugin as p; p.register()\n"
            "print(zarr.open_array(sys.argv[1], mode='r', zarr_format=2)[...].tobytes())\n")
    plain = subprocess.run([sys.executable, "-c", code, str(array), "plain"], capture_output=True, text=True)
    registered = subprocess.run([sys.executable, "-c", code, str(array), "register"], capture_output=True,
                                text=True)
    assert registered.returncode == 0, registered.stderr
    if ZARR_VERSION >= (3, 4, 1):
        assert plain.returncode == 0, plain.stderr
        assert plain.stdout == registered.stdout
    else:
        assert plain.returncode != 0 and "No Zarr data type found" in plain.stderr


@pytest.mark.parametrize("store", CHAR_STORES, ids=_ids)
def test_nc_char_read_by_zarr_python_as_zstrings_reads_it(store):
    for name in _chars(store):
        arr = zarr.open_array(store / name, mode="r", zarr_format=2)
        assert isinstance(arr.metadata.dtype, zp.NCChar)
        got = arr[...]
        want = _zstrings_raw(store, name)
        assert got.dtype == np.dtype("S1")
        assert got.reshape(want.shape).tolist() == want.tolist(), name


@pytest.mark.parametrize("store", CHAR_STORES, ids=_ids)
def test_nc_char_read_by_engine_zarr_and_dask(store):
    """engine="zarr" joins the characters (decoding those with ``_Encoding``), as engine="zstrings"
    does; where the store declares no encoding it returns the joined bytes, engine="zstrings" their
    UTF-8 text (a split last character dropped, its ``utf8_errors="drop"``)."""
    ours = xr.open_dataset(store, engine="zstrings", mask_and_scale=False)
    theirs = xr.open_dataset(store, engine="zarr", mask_and_scale=False, consolidated=False)
    for name in _chars(store):
        want = np.asarray(ours[name].values, dtype=object).reshape(-1).tolist()
        got = [v.decode("utf-8", "ignore") if isinstance(v, bytes) else v
               for v in np.asarray(theirs[name].values, dtype=object).reshape(-1).tolist()]
        assert got == want, name
        lazy = da.from_zarr(str(store), component=name).compute()
        assert lazy.tolist() == zarr.open_array(store / name, mode="r")[...].tolist()


@pytest.mark.xfail(strict=True, raises=(ValueError, AssertionError),
                   reason="zarr-python reads the '<U1' of netcdf-c <= 4.9.0 as UTF-32 (4 bytes an element) "
                          "where netcdf-c stored one byte: no data type can claim '<U1' from zarr-python's "
                          "FixedLengthUTF32; xr_zstrings.migrate makes it xr_zstrings.nc_char")
def test_nc_char_of_netcdf_c_4_9_0_read_by_zarr_python():
    store = GOLDEN / "netcdf-c-4.9.0_netCDF4-1.6.2" / "chars.zarr"
    got = zarr.open_array(store / "c_utf8", mode="r", zarr_format=2)[...]
    assert got.tolist() == _zstrings_raw(store, "c_utf8").tolist()


def test_nc_char_written_by_zarr_python_stays_nc_char_for_netcdf_c(tmp_path):
    """zarr-python rewriting an NC_CHAR array's metadata keeps ``">S1"`` (NC_CHAR to netcdf-c), and an
    array it writes with ``NCChar()`` holds the bytes ``to_nczarr`` writes for the same characters.
    (netcdf-c 4.10's layout, whose NCZarr keys are attributes: zarr-python drops the unknown keys of
    the older layouts' ``.zarray`` whenever it rewrites one.)"""
    chars = np.array([[b"a", b"b", b""], [b"\xc3", b"\xa9", b"z"]])
    ds = xr.Dataset({"c": (("x", "n"), chars)})
    ds["c"].encoding["nc_type"] = "NC_CHAR"
    to_nczarr(ds, tmp_path / "s.zarr", netcdf_c="4.10")
    arr = zarr.open_array(tmp_path / "s.zarr" / "c", mode="r+", zarr_format=2)
    arr.update_attributes({"written_by": "zarr-python"})
    assert json.loads((tmp_path / "s.zarr" / "c" / ".zarray").read_text())["dtype"] == ">S1"
    with netCDF4.Dataset(nc_url(tmp_path / "s.zarr"), "r") as nc:
        var = nc["c"]
        var.set_auto_chartostring(False)
        assert var.dtype == np.dtype("S1") and var.getncattr("written_by") == "zarr-python"
        assert np.asarray(var[:]).tolist() == chars.tolist()
    ours = zarr.create_array(LocalStore(tmp_path / "z.zarr"), shape=chars.shape, chunks=chars.shape,
                             dtype=zp.NCChar(), zarr_format=2, compressors=None, fill_value=b"")
    ours[...] = chars
    assert json.loads((tmp_path / "z.zarr" / ".zarray").read_text())["dtype"] == ">S1"
    assert (tmp_path / "z.zarr" / "0.0").read_bytes() == (tmp_path / "s.zarr" / "c" / "0.0").read_bytes()


def test_nc_char_in_zarr_v3_round_trips(tmp_path):
    chars = np.array([[b"h", b"\xc3", b"\xa9"], [b"o", b"k", b""]])
    g = zarr.open_group(LocalStore(tmp_path / "v3.zarr"), mode="w", zarr_format=3)
    a = g.create_array("c", shape=chars.shape, dtype=zp.NCChar(), fill_value=b"\xe9", dimension_names=["x", "n"],
                       attributes={"_Encoding": "utf-8"})
    a[...] = chars
    meta = json.loads((tmp_path / "v3.zarr" / "c" / "zarr.json").read_text())
    assert (meta["data_type"], meta["fill_value"]) == ("xr_zstrings.nc_char", "\u00e9")
    assert zarr.open_array(tmp_path / "v3.zarr" / "c", mode="r")[...].tolist() == chars.tolist()
    assert xr.open_dataset(tmp_path / "v3.zarr", engine="zstrings")["c"].values.tolist() == ["hé", "ok"]


@pytest.mark.parametrize("index", ["uint32", "uint64"])
@pytest.mark.parametrize("location", ["start", "end"])
def test_zarrs_vlen_written_by_zarr_python_is_zarrs_encoding(tmp_path, index, location):
    """bytes through the plugin's zarrs.vlen are the golden chunk zarrs' encoding gives, byte for byte,
    and zarr-python, engine="zstrings" and dask read them back."""
    codec = zp.ZarrsVlenCodec.from_dict({"name": "zarrs.vlen", "configuration": {
        "index_data_type": index, "index_location": location, "data_codecs": [{"name": "bytes"}],
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}})
    values = np.array([s.encode() for s in STRS], dtype=object)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr-python: variable_length_bytes has no v3 specification
        g = zarr.open_group(LocalStore(tmp_path / "v.zarr"), mode="w", zarr_format=3)
        a = g.create_array("b", shape=values.shape, chunks=values.shape, dtype=zarr.dtype.VariableLengthBytes(),
                           serializer=codec, compressors=None, fill_value=b"", dimension_names=["x"])
    a[...] = values
    golden = (CHUNKS / f"zarrs_vlen_strs_{index}_{location}.bin").read_bytes()
    assert (tmp_path / "v.zarr" / "b" / "c" / "0").read_bytes() == golden
    assert zarr.open_array(tmp_path / "v.zarr" / "b", mode="r")[...].tolist() == values.tolist()
    assert xr.open_dataset(tmp_path / "v.zarr", engine="zstrings")["b"].values.tolist() == values.tolist()
    assert da.from_zarr(str(tmp_path / "v.zarr"), component="b").compute().tolist() == values.tolist()


def test_zarrs_vlen_v2_written_by_zarr_python_is_numcodecs_vlen_bytes(tmp_path):
    codec = zp.ZarrsVlenV2Codec.from_dict({"name": "zarrs.vlen_v2"})
    values = np.array(BINS, dtype=object)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = zarr.create_array(LocalStore(tmp_path / "v.zarr"), shape=values.shape, chunks=values.shape,
                              dtype=zarr.dtype.VariableLengthBytes(), serializer=codec, compressors=None,
                              fill_value=b"", dimension_names=["x"])
    a[...] = values
    assert (tmp_path / "v.zarr" / "c" / "0").read_bytes() == (CHUNKS / "numcodecs_vlen_bytes.bin").read_bytes()
    assert zarr.open_array(tmp_path / "v.zarr", mode="r")[...].tolist() == BINS


def test_to_zarr_v3_bytes_in_zarrs_vlen_read_by_zarr_python_and_engine_zarr(tmp_path):
    ds = xr.Dataset({"b": ("x", np.array(BINS, dtype=object)), "n": ("x", np.arange(len(BINS)))})
    to_zarr_v3(ds, tmp_path / "v.zarr", layout="zarrs.vlen", index_location="start",
               compressors=[{"name": "zstd", "configuration": {"level": 1}}])
    assert zarr.open_array(tmp_path / "v.zarr" / "b", mode="r")[...].tolist() == BINS
    assert xr.open_dataset(tmp_path / "v.zarr", engine="zarr")["b"].values.tolist() == BINS


def _want_optional(name: str) -> list:
    raw = json.loads((OPTIONAL / "expected.json").read_text())[name]
    return [v["bytes"].encode("latin-1") if isinstance(v, dict) else v for v in raw]


def _plain(values) -> list:
    return [None if v is None or (isinstance(v, float) and v != v) else v
            for v in np.asarray(values, dtype=object).reshape(-1).tolist()]


#: the golden array whose codec zarrs' own test data names plain "optional" (see the next tests)
PLAIN_OPTIONAL = "string2d_bytesmask_zarrsvlen_gzip"


@pytest.fixture(scope="module")
def optional_store(tmp_path_factory) -> Path:
    """The golden zarrs optional store without the array zarr-python cannot open (plain "optional")."""
    out = tmp_path_factory.mktemp("optional") / "optional.zarr"
    shutil.copytree(OPTIONAL / "optional.zarr", out, ignore=shutil.ignore_patterns(PLAIN_OPTIONAL))
    return out


@pytest.mark.parametrize("name", sorted(set(json.loads((OPTIONAL / "expected.json").read_text())) - {PLAIN_OPTIONAL}))
def test_zarrs_optional_read_by_zarr_python_engine_zarr_and_dask(name, optional_store):
    """Missing elements (nulls, all-null chunks, never-written chunks of a null fill) are NaN in
    zarr-python (its fill value cannot be None), missing in engine="zarr" as in engine="zstrings"."""
    store = optional_store
    arr = zarr.open_array(store / name, mode="r")
    assert isinstance(arr.metadata.dtype, zp.ZarrsOptional)
    assert _plain(arr[...]) == _want_optional(name)
    assert _plain(da.from_zarr(str(store), component=name).compute()) == _want_optional(name)
    ours = xr.open_dataset(store, engine="zstrings")[name]
    theirs = xr.open_dataset(store, engine="zarr")[name]
    assert _plain(theirs.values) == _plain(ours.values) == _want_optional(name)
    assert theirs.isnull().values.tolist() == ours.isnull().values.tolist()


def test_plain_optional_codec_name_is_left_to_zarr_extensions():
    """zarr-extensions drafts an unrelated codec called "optional": the plugin does not claim the name
    in zarr-python (zarrs writes "zarrs.optional"); engine="zstrings" reads zarrs' by its configuration."""
    store = OPTIONAL / "optional.zarr"
    assert "optional" not in zp.CODEC_NAMES
    with pytest.raises(Exception, match="optional"):
        zarr.open_array(store / PLAIN_OPTIONAL, mode="r")[...]
    got = xr.open_dataset(store, engine="zstrings")[PLAIN_OPTIONAL]
    assert _plain(got.values) == _want_optional(PLAIN_OPTIONAL)


@pytest.mark.parametrize("name", ["string_packbits_vlenutf8", "bytes_packbits_vlenbytes"])
def test_zarrs_optional_written_by_zarr_python_is_zarrs_encoding(tmp_path, name):
    ref = OPTIONAL / "optional.zarr" / name
    meta = json.loads((ref / "zarr.json").read_text())
    dtype = zp.ZarrsOptional.from_json(meta["data_type"], zarr_format=3)
    codec = zp.ZarrsOptionalCodec.from_dict(meta["codecs"][0])
    want = _want_optional(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = zarr.create_array(LocalStore(tmp_path / "o.zarr"), shape=tuple(meta["shape"]),
                              chunks=tuple(meta["chunk_grid"]["configuration"]["chunk_shape"]), dtype=dtype,
                              serializer=codec, compressors=None, fill_value=None,
                              dimension_names=meta["dimension_names"])
    written = sorted(p.name for p in (ref / "c").iterdir())
    n = a.chunks[0]
    for key in written:
        i = int(key) * n
        a[i:i + n] = np.array([np.nan if v is None else v for v in want[i:i + n]], dtype=object)
    for key in written:
        assert (tmp_path / "o.zarr" / "c" / key).read_bytes() == (ref / "c" / key).read_bytes(), key
    assert _plain(zarr.open_array(tmp_path / "o.zarr", mode="r")[...]) == want


# ---------------------------------------------------------------------------------------------
# What zarr-python still refuses (each fails here the day zarr-python lifts the limit)
# ---------------------------------------------------------------------------------------------

_STRING_CHECK = ("zarr-python accepts a `string` array only with a codec whose class is named "
                 "VLenUTF8Codec (zarr.core.metadata.v3.validate_codecs, 3.1.6-3.4.2: 'For string dtype, "
                 "ArrayBytesCodec must be `VLenUTF8Codec`')")
_ARROW = ("zarr-python's `bytes` codec views a chunk as fixed-size elements: the Arrow layout (a `bytes` "
          "codec on a variable-length type) is not read, and zarr-python has no `binary`/`large_*` data type")


def _refused(layout: str, kind: str, why: str) -> object:
    return pytest.param(layout, kind, id=f"{layout}-{kind}",
                        marks=pytest.mark.xfail(strict=True, raises=ValueError, reason=why))


@pytest.mark.parametrize(("layout", "kind"), [
    _refused("zarrs.vlen", "str", _STRING_CHECK),
    _refused("arrow", "str", _STRING_CHECK),
    _refused("arrow", "bytes", _ARROW),
    _refused("arrow-large", "str", _ARROW),
])
def test_zarr_python_still_refuses(tmp_path, layout, kind):
    values = STRS if kind == "str" else BINS
    ds = xr.Dataset({"v": ("x", np.array(values, dtype=object))})
    to_zarr_v3(ds, tmp_path / "v.zarr", layout=layout)
    assert zarr.open_array(tmp_path / "v.zarr" / "v", mode="r")[...].tolist() == values


@pytest.mark.xfail(strict=True, raises=ValueError, reason=_STRING_CHECK)
def test_string_with_zarrs_vlen_v2_is_refused_too(tmp_path):
    """zarrs.vlen_v2 on a ``string`` array: the same check (the chunks are numcodecs' vlen-utf8)."""
    ds = xr.Dataset({"v": ("x", np.array(STRS, dtype=object))})
    to_zarr_v3(ds, tmp_path / "v.zarr", layout="vlen-utf8", compressors=[], consolidated=False)
    meta_path = tmp_path / "v.zarr" / "v" / "zarr.json"
    meta = json.loads(meta_path.read_text())
    meta["codecs"][0] = {"name": "zarrs.vlen_v2"}
    meta_path.write_text(json.dumps(meta))
    assert xr.open_dataset(tmp_path / "v.zarr", engine="zstrings")["v"].values.tolist() == STRS
    assert zarr.open_array(tmp_path / "v.zarr" / "v", mode="r")[...].tolist() == STRS
