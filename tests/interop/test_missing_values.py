"""Missing string values, one story across formats: each test is a row of the table in
docs/format-notes.md ("Missing string values"), checked against the peer that defines it.

NCZarr rows against netcdf-c (netCDF4, xarray's engine="netcdf4") on stores netcdf-c wrote; Zarr v2
rows against zarr-python 2.18 (the golden store and its recorded reading, tests/golden_missing/zarr-python-2.18)
and the live zarr-python 3; Zarr v3 rows against the live zarr-python 3.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import netCDF4
import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr
from peers import nc_url

from xr_zstrings import MissingStringsWarning, ZStringsError, to_nczarr
from xr_zstrings.write.zarr3 import to_zarr_v3

NA_T = np.dtypes.StringDType(na_object=np.nan)
GOLDEN_V2 = Path(__file__).parents[1] / "golden_missing" / "zarr-python-2.18"


@pytest.fixture(params=["C", "python"])
def kernels(request, monkeypatch):
    """Every row read through the compiled kernels and through the pure-Python fallback."""
    if request.param == "python":
        monkeypatch.setenv("XR_ZSTRINGS_NO_EXT", "1")
    return request.param


def missing(values: Any) -> list[Any]:
    """A comparable list: every missing value (NaN, None, StringDType NA) as None."""
    out = []
    for v in np.asarray(values, dtype=object).tolist():
        out.append(None if v is None or v is pd.NA or (isinstance(v, float) and v != v) else v)
    return out


def _netcdf_c_strings(path: Path, fill: str | None, *, char_fill: bytes | None = None) -> None:
    """An NCZarr store written by netcdf-c: NC_STRING ``s`` (chunks of 2, one never written, one
    element written as the fill itself) and NC_CHAR ``c``."""
    with netCDF4.Dataset(nc_url(path), "w") as nc:
        nc.createDimension("x", 6)
        nc.createDimension("n", 3)
        s = nc.createVariable("s", str, ("x",), fill_value=fill, chunksizes=(2,))
        s[0] = "a"
        s[1] = "é"
        if fill is not None:
            s[2] = fill  # written, equal to the fill: missing for every CF reader
        s[3] = "b"
        c = nc.createVariable("c", "S1", ("x", "n"), fill_value=char_fill)
        c._Encoding = "utf-8"
        c[0] = "ab"


# ---------------------------------------------------------------- NCZarr (netcdf-c defines these)


@pytest.mark.parametrize("fill", ["N/A", "", "é!"])
@pytest.mark.parametrize("chunks", [None, {}])
@pytest.mark.parametrize("string_dtype", ["T", "O", "U"])
def test_nczarr_string_fill_value_is_missing_as_engine_netcdf4(tmp_path, fill, chunks, string_dtype, kernels):
    """Row "NCZarr NC_STRING with a string _FillValue": masked as engine='netcdf4' masks it."""
    path = tmp_path / "s.zarr"
    _netcdf_c_strings(path, fill)
    ref = xr.open_dataset(nc_url(path), engine="netcdf4")["s"]
    got = xr.open_dataset(path, engine="zstrings", chunks=chunks, string_dtype=string_dtype)["s"]
    assert missing(got.values) == missing(ref.values)
    assert missing(got.values)[2] is None and missing(got.values)[4] is None  # written fill, unwritten
    assert got.dtype == (NA_T if string_dtype == "T" else np.dtype(object))  # U holds no missing value
    assert got.encoding["_FillValue"] == ref.encoding["_FillValue"] == fill
    assert got.isnull().values.tolist() == ref.isnull().values.tolist()
    # lazily indexed: a strided and a fancy selection mask the same way
    assert missing(got[::3].values) == missing(ref[::3].values)
    assert missing(got.isel(x=[4, 0]).values) == missing(ref.isel(x=[4, 0]).values)


@pytest.mark.parametrize("fill", ["N/A", "é!"])
def test_nczarr_string_fill_value_unmasked_is_the_stored_fill(tmp_path, fill, kernels):
    """Row "... mask_and_scale=False": the stored fill string, as netCDF4 returns it."""
    path = tmp_path / "s.zarr"
    _netcdf_c_strings(path, fill)
    with netCDF4.Dataset(nc_url(path), "r") as nc:
        raw = nc["s"][:].tolist()
    ref = xr.open_dataset(nc_url(path), engine="netcdf4", mask_and_scale=False)["s"]
    got = xr.open_dataset(path, engine="zstrings", mask_and_scale=False)["s"]
    assert got.values.tolist() == ref.values.tolist() == raw
    assert raw.count(fill) == 3
    assert got.dtype == np.dtypes.StringDType()
    dc = xr.open_dataset(path, engine="zstrings", decode_cf=False)["s"]
    assert dc.values.tolist() == raw


def test_nczarr_string_without_fill_value_is_the_empty_string(tmp_path, kernels):
    """Row "NCZarr NC_STRING without _FillValue": netcdf-c's default fill "" is a value."""
    path = tmp_path / "s.zarr"
    _netcdf_c_strings(path, None)
    ref = xr.open_dataset(nc_url(path), engine="netcdf4")["s"]
    got = xr.open_dataset(path, engine="zstrings")["s"]
    assert got.values.tolist() == ref.values.tolist() == ["a", "é", "", "b", "", ""]
    assert got.dtype == np.dtypes.StringDType()


def test_nczarr_char_fill_value_is_not_masked(tmp_path, kernels):
    """Row "NCZarr NC_CHAR with a _FillValue": the joined strings never equal the one-character
    fill, so engine='netcdf4' masks nothing; neither do we."""
    path = tmp_path / "c.zarr"
    _netcdf_c_strings(path, "N/A", char_fill=b"-")
    ref = xr.open_dataset(nc_url(path), engine="netcdf4")["c"]
    got = xr.open_dataset(path, engine="zstrings")["c"]
    assert got.values.tolist() == ref.values.tolist() == ["ab", "---", "---", "---", "---", "---"]


def test_masked_strings_flow_through_xarray(tmp_path):
    """What a user does next with a masked variable: isnull/fillna/dropna, pandas, to_netcdf."""
    path = tmp_path / "s.zarr"
    _netcdf_c_strings(path, "N/A")
    ds = xr.open_dataset(path, engine="zstrings")
    s = ds["s"]
    assert s.fillna("?").values.tolist() == ["a", "é", "?", "b", "?", "?"]
    assert s.dropna("x").values.tolist() == ["a", "é", "b"]
    assert s.where(s.notnull(), "z").values.tolist() == ["a", "é", "z", "b", "z", "z"]
    assert missing(s.to_pandas().tolist()) == ["a", "é", None, "b", None, None]
    assert missing(ds.set_coords("s").swap_dims(x="s").indexes["s"].tolist()) == missing(s.values)
    # written by xarray's netCDF writer with the fill it kept in encoding: masked again by netcdf-c
    ds[["s"]].to_netcdf(tmp_path / "s.nc", engine="netcdf4")
    with netCDF4.Dataset(tmp_path / "s.nc") as nc:
        assert nc["s"][:].tolist() == ["a", "é", "N/A", "b", "N/A", "N/A"]
    back = xr.open_dataset(tmp_path / "s.nc", engine="netcdf4")["s"]
    assert missing(back.values) == missing(s.values)


# ------------------------------------------------- Zarr v2 (zarr-python 2.18 defines these; 3.x beside)


def _golden_v2() -> dict[str, Any]:
    return json.loads((GOLDEN_V2 / "missing.expected.json").read_text())["arrays"]


def _peer_plain(values: list[Any]) -> list[Any]:
    return [v["bytes"].encode("latin-1") if isinstance(v, dict) else v for v in values]


@pytest.mark.parametrize("name", sorted(_golden_v2()))
@pytest.mark.parametrize("chunks", [None, {}])
def test_zarr_v2_fill_values_read_as_zarr_python_2(name, chunks, kernels):
    """Rows "Zarr v2 ...": as zarr-python 2.18 read the store it wrote (``fill_value: null`` on an
    object array: None for never-written chunks); a |S array declares no text, so its values stay
    bytes as zarr-python (and engine="zarr") read them (format-notes "Bytes or text")."""
    row = _golden_v2()[name]
    want = _peer_plain(row["values"])
    got = xr.open_dataset(GOLDEN_V2 / "missing.zarr", engine="zstrings", chunks=chunks)[name]
    assert missing(got.values) == want
    if name == "vlen_null":
        assert got.dtype == NA_T
        assert got.isnull().values.tolist() == [False, False, True, True, True, True]
    elif got.dtype.kind == "T":
        assert got.dtype == np.dtypes.StringDType()  # a fill string is a value: no NA object


def test_zarr_v2_null_fill_zarr_python_3_differs():
    """zarr-python 3 gives ``""`` / ``b""`` for never-written chunks of a ``fill_value: null`` object
    array (its data type's default); we keep zarr-python 2's (and the v2 spec's "no fill value")
    reading. Asserted here so the table's "zarr-python 3" column follows the library."""
    g = zarr.open_group(GOLDEN_V2 / "missing.zarr", mode="r")
    assert g["vlen_null"][:].tolist() == ["a", "é", "", "", "", ""]
    assert g["vlen_bytes_null"][:].tolist() == [b"a", b"\xff", b"", b"", b"", b""]
    for name, row in _golden_v2().items():
        if row["fill_value"] is not None:
            assert g[name][:].tolist() == _peer_plain(row["values"])


def test_zarr_v2_string_dtype_choices_keep_missing(kernels):
    for sd, dtype in (("O", np.dtype(object)), ("U", np.dtype(object)), ("T", NA_T)):
        got = xr.open_dataset(GOLDEN_V2 / "missing.zarr", engine="zstrings", string_dtype=sd)["vlen_null"]
        assert got.dtype == dtype and missing(got.values) == ["a", "é", None, None, None, None]


# ------------------------------------------------------------------ Zarr v3 (zarr-python 3 defines)


@pytest.mark.parametrize("fill", ["", "N/A"])
@pytest.mark.parametrize("dtype", [str, "<U4", "S4"])
def test_zarr_v3_fill_values_read_as_zarr_python(tmp_path, fill, dtype, kernels):
    """Rows "Zarr v3 ...": never-written chunks are the fill value, as zarr-python reads them."""
    path = tmp_path / "v3.zarr"
    g = zarr.open_group(path, mode="w", zarr_format=3)
    fv = fill.encode() if dtype == "S4" else fill
    with warnings.catch_warnings():  # zarr 3.1 calls <U/S "unstable" in v3 (3.4 no longer for <U)
        warnings.simplefilter("ignore", zarr.errors.UnstableSpecificationWarning)
        a = g.create_array("s", shape=(6,), chunks=(2,), dtype=dtype, fill_value=fv, dimension_names=["x"])
    a[0:2] = np.array(["a", "bc"], dtype=dtype if dtype != str else object)
    peer = zarr.open_group(path, mode="r")["s"][:].tolist()
    got = xr.open_dataset(path, engine="zstrings")["s"]
    if dtype == "S4":  # null_terminated_bytes declares no text: bytes, as zarr-python reads them
        assert got.values.tolist() == peer == [b"a", b"bc"] + [fv] * 4
        return
    assert got.values.tolist() == peer == ["a", "bc"] + [fill] * 4
    assert got.dtype == np.dtypes.StringDType()


# ------------------------------------------------------------------------- writers: to_nczarr


@pytest.mark.parametrize("na", [np.nan, None, pd.NA], ids=["nan", "None", "pd.NA"])
@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize("nc_type", ["NC_STRING", "NC_CHAR"])
def test_to_nczarr_writes_stringdtype_na_as_the_fill_value(tmp_path, na, chunked, nc_type):
    """Row "to_nczarr": StringDType NA (any NA object) is written as the string _FillValue, which
    netcdf-c stores and engine='netcdf4' masks back; without a fill it is refused with the fix."""
    values = np.array(["a", na, "cé", na], dtype=np.dtypes.StringDType(na_object=na))
    ds = xr.Dataset({"s": ("x", values)})
    ds["s"].encoding["nc_type"] = nc_type
    if chunked:
        ds = ds.chunk(x=2)
    with pytest.raises(ZStringsError, match=r"missing value\(s\).*element \[1\].*_FillValue"):
        to_nczarr(ds, tmp_path / "nofill.zarr")
    assert not (tmp_path / "nofill.zarr" / ".zgroup").exists()
    fill = "N/A" if nc_type == "NC_STRING" else "-"
    ds["s"].encoding["_FillValue"] = fill
    path = tmp_path / "fill.zarr"
    to_nczarr(ds, path)
    with netCDF4.Dataset(nc_url(path), "r") as nc:
        raw = nc["s"][:]
        if raw.dtype.kind == "S":  # NC_CHAR without netCDF4's own joining (it joins with _Encoding)
            raw = netCDF4.chartostring(raw, encoding="utf-8")
        raw = raw.tolist()
    assert raw == ["a", fill, "cé", fill]
    if nc_type == "NC_STRING":
        ref = xr.open_dataset(nc_url(path), engine="netcdf4")["s"]
        got = xr.open_dataset(path, engine="zstrings")["s"]
        assert missing(got.values) == missing(ref.values) == ["a", None, "cé", None]
    assert missing(values) == ["a", None, "cé", None]  # the caller's array is not changed


def test_masked_nczarr_round_trips_through_to_nczarr(tmp_path):
    """netcdf-c store -> engine='zstrings' (masked) -> to_nczarr: netcdf-c reads what it wrote."""
    src = tmp_path / "src.zarr"
    _netcdf_c_strings(src, "N/A")
    ds = xr.open_dataset(src, engine="zstrings")[["s"]]
    assert ds["s"].isnull().any()
    to_nczarr(ds, tmp_path / "out.zarr")
    with netCDF4.Dataset(nc_url(src), "r") as a, netCDF4.Dataset(nc_url(tmp_path / "out.zarr"), "r") as b:
        assert b["s"][:].tolist() == a["s"][:].tolist()
        assert b["s"].getncattr("_FillValue") == a["s"].getncattr("_FillValue") == "N/A"


# ------------------------------------------------------------------------ writers: to_zarr_v3


def _with_missing(src: str) -> np.ndarray:
    if src == "T":
        return np.array(["a", np.nan, "cé", np.nan, "x"], dtype=NA_T)
    return np.array(["a", np.nan, "cé", None, "x"], dtype=object)


@pytest.mark.parametrize("layout", ["vlen-utf8", "zarrs.vlen", "arrow", "arrow-large"])
@pytest.mark.parametrize("src", ["T", "O"])
def test_to_zarr_v3_missing_with_a_fill_value_are_written_as_it(tmp_path, layout, src):
    """Row "to_zarr_v3, string _FillValue": missing values are written as the fill string with a CF
    ``_FillValue`` attribute; engine='zstrings' masks them back, zarr-python reads the string."""
    ds = xr.Dataset({"s": ("x", _with_missing(src))})
    ds["s"].encoding["_FillValue"] = "N/A"
    path = tmp_path / "f.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("error", MissingStringsWarning)
        to_zarr_v3(ds, path, layout=layout)
    got = xr.open_dataset(path, engine="zstrings")["s"]
    assert got.dtype == NA_T and missing(got.values) == ["a", None, "cé", None, "x"]
    assert got.encoding["_FillValue"] == "N/A"
    assert xr.open_dataset(path, engine="zstrings", mask_and_scale=False)["s"].values.tolist() == [
        "a", "N/A", "cé", "N/A", "x"]
    if layout == "vlen-utf8":  # the layout zarr-python reads
        arr = zarr.open_group(path, mode="r")["s"]
        assert arr[:].tolist() == ["a", "N/A", "cé", "N/A", "x"] and arr.attrs["_FillValue"] == "N/A"
        # xarray 2026.9 cannot decode a string _FillValue attribute of a v3 array (nor write one)
        with pytest.raises(ValueError, match="Failed to decode fill_value"):
            xr.open_dataset(path, engine="zarr")


@pytest.mark.parametrize("layout", ["vlen-utf8", "zarrs.vlen", "arrow", "arrow-large"])
@pytest.mark.parametrize("src", ["T", "O"])
@pytest.mark.parametrize("chunked", [False, True])
def test_to_zarr_v3_missing_without_a_fill_value_use_zarrs_optional(tmp_path, layout, src, chunked):
    """Row "to_zarr_v3, no _FillValue": written in zarrs' nullable optional type around the layout
    (warned, with the fix); engine='zstrings' reads them back missing; zarr-python (NaN) and
    engine='zarr' read them missing only through this package's zarr-python plugin."""
    ds = xr.Dataset({"s": ("x", _with_missing(src)),
                     "b": ("x", np.array([b"a", None, b"", b"\xff", None], dtype=object))})
    if chunked:
        ds = ds.chunk(x=2)
    path = tmp_path / "o.zarr"
    with pytest.warns(MissingStringsWarning, match=r"'s' holds 2 missing value\(s\).*_FillValue"):
        to_zarr_v3(ds, path, layout=layout)
    got = xr.open_dataset(path, engine="zstrings")
    assert got["s"].dtype == NA_T and missing(got["s"].values) == ["a", None, "cé", None, "x"]
    assert got["b"].values.tolist() == [b"a", None, b"", b"\xff", None]
    meta = json.loads((path / "s" / "zarr.json").read_text())
    assert meta["data_type"]["name"] == "zarrs.optional" and meta["fill_value"] is None
    assert meta["codecs"][0]["name"] == "zarrs.optional"
    assert got["s"].encoding["layout"] == "zarrs.optional"
    import xr_zstrings.zarr_plugin  # noqa: F401 - the plugin (zarr 3.1.x: registered on import)

    plain = [None if isinstance(v, float) else v for v in zarr.open_array(path / "s", mode="r")[...].tolist()]
    assert plain == ["a", None, "cé", None, "x"]
    peer = xr.open_dataset(path, engine="zarr")
    assert missing(peer["s"].values) == ["a", None, "cé", None, "x"]
    assert peer["b"].isnull().values.tolist() == [False, True, False, False, True]


def test_to_zarr_v3_without_missing_values_is_unchanged(tmp_path):
    """No missing value: no _FillValue attribute, no optional type; every reader opens it."""
    ds = xr.Dataset({"s": ("x", np.array(["a", "b"], dtype=NA_T))})
    ds["s"].encoding["_FillValue"] = "N/A"
    with warnings.catch_warnings():
        warnings.simplefilter("error", MissingStringsWarning)
        to_zarr_v3(ds, tmp_path / "n.zarr")
    assert "_FillValue" not in zarr.open_group(tmp_path / "n.zarr", mode="r")["s"].attrs
    assert xr.open_dataset(tmp_path / "n.zarr", engine="zarr")["s"].values.tolist() == ["a", "b"]
    assert xr.open_dataset(tmp_path / "n.zarr", engine="zstrings")["s"].values.tolist() == ["a", "b"]


def test_masked_nczarr_round_trips_through_to_zarr_v3(tmp_path):
    """netcdf-c store -> engine='zstrings' (masked, _FillValue in encoding) -> to_zarr_v3 -> masked again."""
    src = tmp_path / "src.zarr"
    _netcdf_c_strings(src, "N/A")
    ds = xr.open_dataset(src, engine="zstrings")[["s"]]
    to_zarr_v3(ds, tmp_path / "v3.zarr")
    back = xr.open_dataset(tmp_path / "v3.zarr", engine="zstrings")["s"]
    assert missing(back.values) == missing(ds["s"].values)
    assert zarr.open_group(tmp_path / "v3.zarr", mode="r")["s"][:].tolist() == ["a", "é", "N/A", "b", "N/A", "N/A"]
