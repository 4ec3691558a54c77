"""``xr_zstrings.migrate`` keeps missing string values missing (issue 36, item 8).

Each source is written by the real writer (zarr-python's Zarr v2, xarray's ``to_zarr``, netCDF4's
NCZarr, zarr-python 2.18's golden store) and read before and after migration by xarray's own
engine="zarr" and by engine="zstrings": the same elements are missing, or the report (dry run and
real run) names the array, says why, and ``missing="optional"`` keeps them missing. Also: text that
is not valid UTF-8 (which xarray's engine="zarr" refuses once ``_Encoding`` is written) is named by
``check_utf8=True``, and an in-place migration says that engine="zarr" then warns about both
metadata versions.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import netCDF4
import numpy as np
import pytest
import xarray as xr
import zarr
from peers import nc_url

import xr_zstrings
import xr_zstrings.zarr_plugin  # registers the plugin (zarr 3.1.x: see its docstring)
from xr_zstrings.cli import main

GOLDEN_MISSING = Path(__file__).resolve().parents[1] / "golden_missing" / "zarr-python-2.18" / "missing.zarr"


def _missing(store: Path, name: str, engine: str, group: str | None = None) -> list[bool]:
    """Which elements of ``name`` read as missing (None or NaN) through ``engine``."""
    extra = {"consolidated": None} if engine == "zarr" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = xr.open_dataset(store, engine=engine, group=group, **extra)
        values = ds[name].load().values
    return [v is None or (isinstance(v, float) and v != v) for v in np.asarray(values, dtype=object).reshape(-1).tolist()]


def _values(store: Path, name: str, engine: str) -> list[Any]:
    extra = {"consolidated": None} if engine == "zarr" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        values = xr.open_dataset(store, engine=engine, **extra)[name].load().values
    return [None if v is None or (isinstance(v, float) and v != v) else v
            for v in np.asarray(values, dtype=object).reshape(-1).tolist()]


def _tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _migrated(src: Path, tmp_path: Path, where: str, **kw: Any) -> tuple[Path, xr_zstrings.MigrationReport]:
    if where == "new":
        out = tmp_path / "v3.zarr"
        return out, xr_zstrings.migrate(src, out, **kw)
    out = tmp_path / "inplace.zarr"
    shutil.copytree(src, out)
    return out, xr_zstrings.migrate(out, **kw)


def _zarr_python_v2(path: Path, dtype: str, fill: Any, values: list[Any]) -> Path:
    """A zarr-python Zarr v2 array (``_ARRAY_DIMENSIONS`` set): chunks of 2, the last of 3 never written."""
    g = zarr.open_group(path, mode="w", zarr_format=2)
    a = g.create_array("s", shape=(6,), chunks=(2,), dtype=str if dtype == "|O" else dtype, fill_value=fill)
    a.attrs["_ARRAY_DIMENSIONS"] = ["x"]
    a[0:4] = np.array(values, dtype=object if dtype == "|O" else dtype)
    return path


def _same_missing(src: Path, out: Path, name: str, *, zarr_before: bool = True) -> list[bool]:
    """The missing elements engine="zstrings" reads from the source (engine="zarr" too when it opens
    the source), read the same by both engines from the migrated store."""
    before = _missing(src, name, "zstrings")
    assert any(before), "the source has missing values"
    if zarr_before:
        assert _missing(src, name, "zarr") == before
    assert _missing(out, name, "zarr") == before
    assert _missing(out, name, "zstrings") == before
    return before


# ---------------------------------------------------------------------------------------------
# Text: the metadata keep missing values missing (a CF missing_value attribute)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["new", "in place"])
@pytest.mark.parametrize("fill", ["", "NA"])
@pytest.mark.parametrize("dtype", ["<U4", "|O"])
def test_zarr_python_v2_fill_stays_missing(dtype, fill, where, tmp_path):
    src = _zarr_python_v2(tmp_path / "src.zarr", dtype, fill, ["ab", "", "NA", "é"])
    out, report = _migrated(src, tmp_path, where)
    # the fill, written or in the never-written chunk, is missing before and after
    assert _same_missing(src, out, "s") == [False, fill == "", fill == "NA", False, True, True]
    assert _values(out, "s", "zarr") == _values(src, "s", "zstrings")
    meta = json.loads((out / "s" / "zarr.json").read_text())
    assert meta["attributes"]["missing_value"] == fill and "_FillValue" not in meta["attributes"]
    assert not report.missing_lost and report.metadata_only


def test_xarray_v2_fill_stays_missing(tmp_path):
    na = np.dtypes.StringDType(na_object=np.nan)
    ds = xr.Dataset({"s": ("x", np.array(["a", np.nan, "", "é"], dtype=na))})
    ds["s"].encoding = {"_FillValue": "N/A", "dtype": na}
    ds.to_zarr(tmp_path / "src.zarr", zarr_format=2)
    out, report = _migrated(tmp_path / "src.zarr", tmp_path, "new")
    assert _same_missing(tmp_path / "src.zarr", out, "s") == [False, True, False, False]
    assert not report.missing_lost


def test_golden_zarr_python_2_text_stays_missing(tmp_path):
    """zarr-python 2.18's store: vlen-utf8 with fill_value null (never-written chunks missing), "" and
    "N/A"; <U4 with "NA"."""
    out, report = _migrated(GOLDEN_MISSING, tmp_path, "new", missing="values")  # (its bytes arrays: below)
    for name in ("vlen_null", "vlen_empty", "vlen_text", "fixed_U"):
        before = _missing(GOLDEN_MISSING, name, "zstrings")
        assert before == [False, False, True, True, True, True], name
        assert _missing(out, name, "zarr") == before, name
        assert _missing(out, name, "zstrings") == before, name
    assert set(report.missing_lost) == {"/fixed_S", "/vlen_bytes_null"}  # bytes: below
    # fill_value null: the never-written chunks hold U+FFFF, a noncharacter, marked missing
    meta = json.loads((out / "vlen_null" / "zarr.json").read_text())
    assert meta["fill_value"] == "\uffff" and meta["attributes"]["missing_value"] == "\uffff"
    assert zarr.open_array(out / "vlen_null", mode="r")[...].tolist() == ["a", "é", *["\uffff"] * 4]
    assert any("U+FFFF" in n for n in report.notes["/vlen_null"])


@pytest.mark.parametrize("where", ["new", "in place"])
def test_netcdf_c_string_fill_stays_missing(where, tmp_path):
    src = tmp_path / "nc.zarr"
    with netCDF4.Dataset(nc_url(src), "w") as nc:
        nc.createDimension("x", 6)
        s = nc.createVariable("s", str, ("x",), fill_value="N/A", chunksizes=(2,))
        s[0], s[1], s[2], s[3] = "a", "é", "N/A", ""
    out, report = _migrated(src, tmp_path, where)
    assert _same_missing(src, out, "s", zarr_before=False) == [False, False, True, False, True, True]
    meta = json.loads((out / "s" / "zarr.json").read_text())
    assert meta["attributes"]["missing_value"] == "N/A" and not report.notes and not report.missing_lost


# ---------------------------------------------------------------------------------------------
# Bytes: no metadata keeps them missing for xarray; the report says so, missing="optional" keeps them
# ---------------------------------------------------------------------------------------------


def _bytes_store(path: Path) -> Path:
    """zarr-python Zarr v2 ``|S4`` with fill ``b""``, one chunk never written."""
    g = zarr.open_group(path, mode="w", zarr_format=2)
    a = g.create_array("b", shape=(6,), chunks=(2,), dtype="S4", fill_value=b"")
    a.attrs["_ARRAY_DIMENSIONS"] = ["x"]
    a[0:4] = np.array([b"ab", b"", b"NA", b"\xff"], dtype="S4")
    return path


def test_bytes_fill_is_named_before_anything_changes(tmp_path, capsys):
    src = _bytes_store(tmp_path / "src.zarr")
    dry = xr_zstrings.migrate(src, dry_run=True)
    assert dry.missing_lost == ["/b"] and not (src / "zarr.json").exists()
    why = " ".join(dry.notes["/b"])
    assert "read as values after migration" in why and "missing='optional'" in why
    assert main(["migrate", str(src), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "note /b:" in out and "--missing optional" in out
    main(["check", str(src)])  # and check, which says whether a store migrates metadata-only
    out = capsys.readouterr().out
    assert "the missing values of 1 bytes array(s) would read as values (/b)" in out and "--missing optional" in out
    # without a choice nothing is written, and the refusal names the array and both choices
    before = _tree_bytes(src)
    with pytest.raises(xr_zstrings.ZStringsError, match=r"without a choice.*\(/b\).*missing='optional'.*"
                       r"missing='values'.*Nothing was written"):
        xr_zstrings.migrate(src, tmp_path / "refused.zarr")
    with pytest.raises(xr_zstrings.ZStringsError, match="without a choice"):
        xr_zstrings.migrate(src)  # in place
    assert main(["migrate", str(src), str(tmp_path / "refused.zarr")]) == 2
    err = capsys.readouterr().err
    assert "(/b)" in err and "--missing optional" in err and "--missing values" in err and "missing='" not in err
    assert _tree_bytes(src) == before and not (tmp_path / "refused.zarr").exists()
    # missing='values': the values are b"" after it, in both engines (as the report said)
    plain, _ = _migrated(src, tmp_path / "plain", "new", missing="values")
    assert not any(_missing(plain, "b", "zarr")) and not any(_missing(plain, "b", "zstrings"))


@pytest.mark.parametrize("where", ["new", "in place"])
def test_bytes_fill_kept_missing_as_optional(where, tmp_path):
    src = _bytes_store(tmp_path / "src.zarr")
    out, report = _migrated(src, tmp_path, where, missing="optional")
    assert _same_missing(src, out, "b") == [False, True, False, False, True, True]
    assert _values(out, "b", "zarr") == _values(src, "b", "zstrings") == [b"ab", None, b"NA", b"\xff", None, None]
    assert set(report.rewritten) == {"/b"} and "optional" in report.rewritten["/b"] and not report.missing_lost
    if where == "in place":  # netcdf-c and v2 readers still read the v2 metadata and chunks
        assert _missing(out, "b", "zstrings") == _missing(src, "b", "zstrings")


def test_golden_vlen_bytes_null_kept_missing_as_optional(tmp_path):
    out, report = _migrated(GOLDEN_MISSING, tmp_path, "new", missing="optional")
    for name in ("vlen_bytes_null", "fixed_S"):
        before = _missing(GOLDEN_MISSING, name, "zstrings")
        assert any(before)
        assert _missing(out, name, "zarr") == before, name
        assert _missing(out, name, "zstrings") == before, name
    assert not report.missing_lost


def test_cli_missing_optional(tmp_path, capsys):
    src = _bytes_store(tmp_path / "src.zarr")
    assert main(["migrate", str(src), str(tmp_path / "v3.zarr"), "--missing", "optional"]) == 0
    assert "rewritten /b:" in capsys.readouterr().out
    assert _missing(tmp_path / "v3.zarr", "b", "zarr") == _missing(src, "b", "zstrings")


# ---------------------------------------------------------------------------------------------
# Text cut inside a UTF-8 character: named (check_utf8)
# ---------------------------------------------------------------------------------------------


def _cut_store(path: Path) -> Path:
    """netcdf-c NC_STRING with _nczarr_maxstrlen 4: "aéé" stored as b"a\\xc3\\xa9\\xc3" (cut mid-character)."""
    with netCDF4.Dataset(nc_url(path), "w") as nc:
        nc.createDimension("x", 3)
        t = nc.createVariable("t", str, ("x",))
        t.setncattr("_nczarr_maxstrlen", np.int32(4))
        t[:] = np.array(["aéé", "ok", "é"], dtype=object)
        u = nc.createVariable("u", str, ("x",))
        u[:] = np.array(["fine", "", "é"], dtype=object)
    return path


def test_text_cut_inside_a_character_is_named(tmp_path, capsys):
    src = _cut_store(tmp_path / "cut.zarr")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        before = xr.open_dataset(src, engine="zstrings")["t"].values.tolist()
    report = xr_zstrings.migrate(src, dry_run=True, check_utf8=True)
    assert set(report.not_utf8) == {"/t"} and "1 value(s)" in report.not_utf8["/t"]
    assert any("note /t:" in ln and "UnicodeDecodeError" in ln for ln in report.lines())
    assert main(["migrate", str(src), "--dry-run", "--check-utf8"]) == 0
    assert "UnicodeDecodeError" in capsys.readouterr().out
    # unchecked, the report says that such values would go unnoticed and how to look
    assert any("check_utf8" in ln for ln in xr_zstrings.migrate(src, dry_run=True).lines())
    out, _ = _migrated(src, tmp_path, "new", check_utf8=True)
    with pytest.raises(UnicodeDecodeError):  # what the report named: xarray's strict decoding
        xr.open_dataset(out, engine="zarr")["t"].load()
    assert xr.open_dataset(out, engine="zarr")["u"].values.tolist() == ["fine", "", "é"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert xr.open_dataset(out, engine="zstrings")["t"].values.tolist() == before


def test_check_utf8_reads_joined_characters_whole(tmp_path):
    """A 1-D NC_CHAR xarray joins into one string, a 2-byte character across its chunk boundary: valid."""
    src = tmp_path / "c.zarr"
    with netCDF4.Dataset(nc_url(src), "w") as nc:
        nc.createDimension("n", 6)
        c = nc.createVariable("c", "S1", ("n",), chunksizes=(3,))
        c.set_auto_chartostring(False)
        c[:] = np.frombuffer("abé d".encode().ljust(6, b"\0"), "S1")
    report = xr_zstrings.migrate(src, tmp_path / "v3.zarr", check_utf8=True)
    assert report.not_utf8 == {}
    assert xr.open_dataset(tmp_path / "v3.zarr", engine="zarr")["c"].values.tolist() == "abé d"


# ---------------------------------------------------------------------------------------------
# The corpus (tests/corpus.py): every variable keeps its missing values, or the report names it
# ---------------------------------------------------------------------------------------------

#: corpus stores with missing strings or text engine="zarr" cannot decode: netcdf-c 4.10.1 (netCDF4)
#: and 4.9.0/4.9.1 (golden), xarray's and zarr-python 2.18's Zarr v2
CORPUS = ["missing-nc4101-fill", "missing-zarr2-fill", "missing-zarr2-null", "nc4101-strings", "nc4101-chars",
          "nc491-strings", "nc490-chars", "zarr2-xarray"]


@pytest.fixture(scope="module")
def corpus_base(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("corpus")


def _mask_or_error(store: Path, name: str, engine: str) -> list[bool] | type:
    try:
        return _missing(store, name.lstrip("/"), engine)
    except Exception as e:  # compared below
        return type(e)


@pytest.mark.parametrize("missing", ["values", "optional"])
@pytest.mark.parametrize("sid", CORPUS)
def test_corpus_missing_values_stay_or_are_named(sid, missing, corpus_base, tmp_path):
    from corpus import source

    src = source(sid, corpus_base)
    out = tmp_path / "v3.zarr"
    report = xr_zstrings.migrate(src, out, missing=missing, check_utf8=True)
    for name in [*report.reused, *report.rewritten]:
        before = _mask_or_error(src, name, "zstrings")
        assert isinstance(before, list), (name, before)
        for engine in ("zarr", "zstrings"):
            after = _mask_or_error(out, name, engine)
            if after is UnicodeDecodeError and engine == "zarr":
                assert name in report.not_utf8, name  # named, not silent
                continue
            if name in report.missing_lost:  # named, with the way to keep them
                assert missing == "values" and any(before) and "missing='optional'" in " ".join(report.notes[name])
                continue
            assert after == before, (name, engine)
    assert not report.not_utf8 or all("UnicodeDecodeError" in why for why in report.not_utf8.values())


# ---------------------------------------------------------------------------------------------
# In place: engine="zarr" warns about both metadata versions (issue 36, item 11)
# ---------------------------------------------------------------------------------------------


def test_in_place_report_says_engine_zarr_warns(tmp_path):
    src = _zarr_python_v2(tmp_path / "src.zarr", "|O", "", ["a", "b", "c", "d"])
    report = xr_zstrings.migrate(src)
    with pytest.warns(UserWarning, match=r"Both zarr.json \(Zarr format 3\) and .zgroup \(Zarr format 2\)"):
        xr.open_dataset(src, engine="zarr", consolidated=None)
    assert any("Both zarr.json (Zarr format 3) and .zgroup (Zarr format 2)" in ln for ln in report.lines())
    new = xr_zstrings.migrate(src, tmp_path / "v3.zarr")
    assert not any("Both zarr.json" in ln for ln in new.lines())
