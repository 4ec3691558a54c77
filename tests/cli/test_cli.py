"""The command line: the README's first command shows the built-in sample."""

from __future__ import annotations

import subprocess
import sys

import netCDF4
import numpy as np

from xr_zstrings.cli import main
from xr_zstrings.sample import sample_path


def test_no_arguments_shows_the_sample_with_text_strings(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "/station: ['Zürich', '東京', 'São Paulo', 'Reykjavík', 'Oslo']" in out
    assert "/code: ['ZRH', 'HND', 'GRU', 'RKV', 'OSL']" in out


def test_sample_is_what_netcdf_c_reads():
    ds = netCDF4.Dataset(f"file://{sample_path()}#mode=nczarr,file", "r")
    try:
        names = ds["station"][:].tolist()
        codes = netCDF4.chartostring(ds["code"][:].filled(b"")).tolist()
    finally:
        ds.close()
    assert names == ["Zürich", "東京", "São Paulo", "Reykjavík", "Oslo"]
    assert codes == ["ZRH", "HND", "GRU", "RKV", "OSL"]


def test_show_a_group_and_errors_exit_2(capsys, tmp_path):
    assert main(["show", str(sample_path()), "--group", "metadata"]) == 0
    assert "country" in capsys.readouterr().out
    assert main(["show", str(tmp_path / "nothing.zarr")]) == 2
    assert "nothing.zarr" in capsys.readouterr().err


def test_module_entry_point_in_a_real_subprocess():
    proc = subprocess.run([sys.executable, "-m", "xr_zstrings"], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "Zürich" in proc.stdout
    assert np.char.count(np.array([proc.stdout]), "StringDType")[0] >= 1


# ---------------------------------------------------------------------------------------------
# info / dump / convert / check (issue 7)
# ---------------------------------------------------------------------------------------------

import pytest
import xarray as xr

from xr_zstrings.cli import convert as cli_convert

SAMPLE = str(sample_path())
NAMES = ["Zürich", "東京", "São Paulo", "Reykjavík", "Oslo"]


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("command", [[], ["sample"], ["show"], ["info"], ["dump"], ["convert"], ["check"]])
def test_help_on_every_command(capsys, command):
    code, out, _ = run(capsys, *command, "--help")
    assert code == 0
    assert out.startswith("usage: zstrings")


def test_usage_errors_exit_2_with_one_line(capsys):
    code, _, err = run(capsys, "info")  # missing PATH_OR_URL: argparse's usage error
    assert code == 2 and "PATH_OR_URL" in err
    code, _, err = run(capsys, "frobnicate")
    assert code == 2 and "invalid choice" in err


def test_info_is_an_ncdump_header_with_the_layout(capsys):
    code, out, err = run(capsys, "info", SAMPLE)
    assert code == 0, err
    assert "// layout: NCZarr 2.0.0, generation nczarr-2 (.zattrs, netcdf-c >= 4.9.3); written by netcdf-c" in out
    assert "netcdf stations {" in out
    assert "\ttime = UNLIMITED ; // (4 currently)" in out
    assert "\tstation = 5 ;" in out
    assert "\tstring station(station) ; // NC_STRING |S128, maxstrlen 128" in out
    assert "\tstring climate(station) ; // NC_STRING |S12, maxstrlen 12" in out
    assert "\tchar code(station, code_len) ; // NC_CHAR >S1" in out
    assert "\tfloat temperature(time, station) ; // <f4, zlib level 4 + shuffle, chunks [2, 5]" in out
    assert "\t\ttemperature:_FillValue = -999.f ;" in out  # ncdump's CDL literal
    assert '\t\t:title = "Weather stations with names (xr_zstrings sample)" ;' in out
    assert "group: metadata {" in out and "  \tstring country(station) ;" in out
    assert "Zürich" not in out  # a header: metadata only


@pytest.mark.parametrize("layout", ["vlen-utf8", "zarrs.vlen", "arrow"])
def test_info_zarr_v3_shows_the_string_layout(capsys, tmp_path, layout):
    from xr_zstrings.write.zarr3 import to_zarr_v3

    ds = xr.Dataset({"name": ("station", NAMES), "t": ("station", np.arange(5.0))})
    to_zarr_v3(ds, tmp_path / "v3.zarr", layout=layout)
    code, out, _ = run(capsys, "info", str(tmp_path / "v3.zarr"))
    assert code == 0
    assert "// layout: pure Zarr v3" in out
    assert f"\tstring name(station) ; // zarr v3 string, layout {layout}" in out
    assert "\tdouble t(station) ; // zarr v3 float64" in out


def test_info_pure_zarr_v2_from_xarray(capsys, tmp_path):
    xr.Dataset({"u": ("x", np.array(["ab", "cé"]))}).to_zarr(tmp_path / "x.zarr", zarr_format=2,
                                                            consolidated=False)
    code, out, _ = run(capsys, "info", str(tmp_path / "x.zarr"))
    assert code == 0
    assert "// layout: pure Zarr v2 (_ARRAY_DIMENSIONS)" in out
    assert "\tx = 2 ;" in out and "string u(x) ; // <U2 fixed-width UTF-32 (zarr-python/xarray)" in out


def test_info_errors_name_the_fix(capsys, tmp_path):
    code, _, err = run(capsys, "info", str(tmp_path / "missing.zarr"))
    assert code == 2 and err.count("\n") == 1 and "missing.zarr" in err
    nc = tmp_path / "f.nc"
    d = netCDF4.Dataset(nc, "w")
    d.close()
    code, _, err = run(capsys, "info", str(nc))
    assert code == 2 and "zstrings convert" in err and "ncdump" in err


def test_dump_shows_strings_as_text(capsys):
    code, out, _ = run(capsys, "dump", SAMPLE)
    assert code == 0
    assert ' station = "Zürich", "東京", "São Paulo", "Reykjavík", "Oslo" ;' in out
    assert ' code =\n  "ZRH",\n  "HND",\n  "GRU",\n  "RKV",\n  "OSL" ;' in out  # NC_CHAR rows, as ncdump
    assert ' country = "Schweiz", "日本", "Brasil", "Ísland", "Norge" ;' in out
    assert "  _, 9, 22.2, -2.5, -5.5 ;" in out  # the fill value is shown as '_' (ncdump's numbers)
    assert ' time = "2026-01-01", "2026-01-02"' in out


def test_dump_selects_variables_and_groups(capsys):
    code, out, _ = run(capsys, "dump", SAMPLE, "-v", "station,/metadata/country")
    assert code == 0 and " station =" in out and " country =" in out and " temperature =" not in out
    assert "\tfloat temperature(time, station) ;" in out  # as ncdump -v: the whole header
    code, out, _ = run(capsys, "dump", SAMPLE, "--group", "metadata")
    assert code == 0 and "country =" in out and "station =" not in out
    code, out, _ = run(capsys, "dump", SAMPLE, "--raw", "-v", "time,temperature")
    assert " time = 0, 1, 2, 3 ;" in out and "  _, 9, 22.2, -2.5, -5.5 ;" in out  # ncdump's '_' for the fill
    code, _, err = run(capsys, "dump", SAMPLE, "-v", "nope")
    assert code == 2 and "nope" in err and "/station" in err


def _strings(target, var, group=None):
    ds = xr.open_dataset(target, engine="zstrings", group=group)
    return ds[var].values.tolist()


def test_convert_round_trip_netcdf4_nczarr_zarr3(capsys, tmp_path):
    nc, z, v3, back = (str(tmp_path / n) for n in ("a.nc", "b.zarr", "c.zarr", "d.nc"))
    assert run(capsys, "convert", SAMPLE, nc)[0] == 0
    ref = netCDF4.Dataset(nc)
    try:
        assert ref["station"][:].tolist() == NAMES
        assert ref["time"].dimensions == ("time",) and ref.dimensions["time"].isunlimited()
        assert ref.groups["metadata"]["country"][:].tolist()[1] == "日本"
    finally:
        ref.close()
    code, _, err = run(capsys, "convert", nc, z)
    assert code == 0 and "wrote" in err
    assert _strings(z, "station") == NAMES and _strings(z, "code") == ["ZRH", "HND", "GRU", "RKV", "OSL"]
    assert run(capsys, "check", z)[0] == 0  # netcdf-c reads what convert wrote
    assert run(capsys, "convert", z, v3, "--format", "zarr3", "--layout", "arrow")[0] == 0
    assert _strings(v3, "station") == NAMES and _strings(v3, "country", "metadata")[3] == "Ísland"
    assert run(capsys, "convert", v3, back, "-q")[0] == 0
    ref = netCDF4.Dataset(back)
    try:
        assert ref["station"][:].tolist() == NAMES
        np.testing.assert_array_equal(ref["temperature"][:].filled(np.nan)[:3], _temps()[:3])
    finally:
        ref.close()


def _temps():
    return xr.open_dataset(SAMPLE, engine="zstrings", mask_and_scale=False)["temperature"].values


def test_convert_maxstrlen_and_overflow_policies(capsys, tmp_path):
    code, _, err = run(capsys, "convert", SAMPLE, str(tmp_path / "a.zarr"), "--maxstrlen", "4")
    assert code == 2 and "--on-overflow widen" in err and err.count("\n") == 1  # the flag that fixes it
    assert not (tmp_path / "a.zarr" / ".zgroup").exists()
    code, _, err = run(capsys, "convert", SAMPLE, str(tmp_path / "b.zarr"), "--maxstrlen", "4",
                       "--on-overflow", "truncate", "--format", "zarr2")
    assert code == 0
    # one line per warning, without the Python source line the default format adds
    assert "zstrings: warning: variable '/station': 4 value(s) longer than 4 bytes" in err
    assert ".py:" not in err and all(line.startswith(("zstrings: warning: ", "wrote ")) for line in err.splitlines())
    assert _strings(tmp_path / "b.zarr", "station") == ["Zür", "東", "São", "Reyk", "Oslo"]
    code, _, _ = run(capsys, "convert", SAMPLE, str(tmp_path / "c.zarr"), "--maxstrlen", "4",
                     "--on-overflow", "widen")
    assert code == 0 and _strings(tmp_path / "c.zarr", "station") == NAMES


@pytest.mark.parametrize("argv, message", [
    (["--format", "zarr3", "--maxstrlen", "8"], "--maxstrlen applies"),
    (["--layout", "arrow"], "--format zarr3"),
    (["--maxstrlen", "0"], "at least 1"),
])
def test_convert_usage_errors(capsys, tmp_path, argv, message):
    code, _, err = run(capsys, "convert", SAMPLE, str(tmp_path / "x.zarr"), *argv)
    assert code == 2 and message in err


def test_convert_refuses_to_overwrite_without_flag(capsys, tmp_path):
    nc = str(tmp_path / "a.nc")
    assert run(capsys, "convert", SAMPLE, nc)[0] == 0
    code, _, err = run(capsys, "convert", SAMPLE, nc)
    assert code == 2 and "--overwrite" in err
    assert run(capsys, "convert", SAMPLE, nc, "--overwrite")[0] == 0
    code, _, err = run(capsys, "convert", SAMPLE, str(tmp_path / "b.nc"), "--format", "nczarr")
    assert code == 2 and "out.zarr" in err


def test_progress_bar_only_on_a_terminal(monkeypatch, capsys, tmp_path):
    from tqdm import tqdm

    assert isinstance(cli_convert._progress(10, False, "x"), cli_convert._NoBar)  # captured stdout: not a terminal
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    bar = cli_convert._progress(10, False, "x")
    assert isinstance(bar, tqdm)
    bar.close()
    assert isinstance(cli_convert._progress(10, True, "x"), cli_convert._NoBar)  # --quiet
    code, _, err = run(capsys, "convert", SAMPLE, str(tmp_path / "a.zarr"), "-q")
    assert code == 0 and err == ""


def test_convert_reads_large_variables_in_blocks(monkeypatch, capsys, tmp_path):
    from xr_zstrings.write.nczarr import to_nczarr

    ds = xr.Dataset({"s": ("x", np.array([f"s{i}é" for i in range(5000)])), "f": ("x", np.arange(5000.0))})
    to_nczarr(ds, tmp_path / "src.zarr")
    seen = []

    class Bar(cli_convert._NoBar):
        def update(self, n):
            seen.append(n)

    from xr_zstrings.write.convert import CountedReads  # (the library's convert counts the reads)

    monkeypatch.setattr(CountedReads, "BLOCK_BYTES", 4096)
    monkeypatch.setattr(cli_convert, "_progress", lambda *a: Bar())
    assert run(capsys, "convert", str(tmp_path / "src.zarr"), str(tmp_path / "dst.nc"))[0] == 0
    assert len(seen) > 10 and sum(seen) == ds["s"].astype(np.dtypes.StringDType()).nbytes + ds["f"].nbytes
    back = xr.open_dataset(tmp_path / "dst.nc")
    assert back["s"].values.tolist() == ds["s"].values.tolist()


def test_check_clean_store_exits_0(capsys):
    code, out, _ = run(capsys, "check", SAMPLE)
    assert code == 0
    assert "ok      /metadata/country" in out and "no problems" in out


def test_check_xarray_strings_netcdf_c_cannot_read(capsys, tmp_path):
    path = tmp_path / "x.zarr"
    xr.Dataset({
        "u": ("x", np.array(["ab", "cé"])),
        "o": ("x", np.array(["ab", "c" * 200], dtype=object)),
        "f": ("x", [1.0, 2.0]),
    }).to_zarr(path, zarr_format=2, consolidated=False)
    with pytest.raises(OSError, match="NCZarr error"):  # what the check predicts
        netCDF4.Dataset(f"file://{path}#mode=zarr,file")
    code, out, _ = run(capsys, "check", str(path))
    assert code == 1
    assert "PROBLEM /u" in out and "<U2 fixed-width UTF-32" in out
    assert "PROBLEM /o" in out and "vlen-utf8" in out
    assert "1 value(s) are longer than netcdf-c's default maxstrlen 128 (longest 200 bytes)" in out
    assert f"fix: zstrings convert {path} x-nczarr.zarr" in out
    assert "ok      /f" in out
    fixed = tmp_path / "x-nczarr.zarr"
    assert run(capsys, "convert", str(path), str(fixed))[0] == 0
    assert run(capsys, "check", str(fixed))[0] == 0
    ref = netCDF4.Dataset(f"file://{fixed}#mode=nczarr,file")
    try:
        assert ref["o"][:].tolist() == ["ab", "c" * 200]
    finally:
        ref.close()


def test_check_split_utf8_written_by_netcdf_c(capsys, tmp_path):
    path = tmp_path / "trunc.zarr"
    d = netCDF4.Dataset(f"file://{path}#mode=nczarr,file", "w")
    d.createDimension("x", 3)
    v = d.createVariable("s", str, ("x",))
    v.setncattr("_nczarr_maxstrlen", 4)
    v[:] = np.array(["aéé", "ok", "中文"], dtype=object)
    d.close()
    code, out, _ = run(capsys, "check", str(path))
    assert code == 1
    assert "PROBLEM /s" in out and "2 value(s) end in a split UTF-8 character" in out
    assert "UnicodeDecodeError" in out and "maxstrlen" in out


def test_check_zarr_v3_and_codecs_netcdf_c_lacks(capsys, tmp_path):
    from xr_zstrings.write.zarr3 import to_zarr_v3

    to_zarr_v3(xr.Dataset({"s": ("x", ["a", "b"])}), tmp_path / "v3.zarr")
    code, out, _ = run(capsys, "check", str(tmp_path / "v3.zarr"))
    assert code == 1 and "PROBLEM /: Zarr v3 store" in out and "zstrings convert" in out
    import numcodecs

    xr.Dataset({"f": ("x", np.arange(4.0))}).to_zarr(
        tmp_path / "gz.zarr", zarr_format=2, consolidated=False,
        encoding={"f": {"compressors": [numcodecs.GZip()]}})
    code, out, _ = run(capsys, "check", str(tmp_path / "gz.zarr"))
    assert code == 1 and "codec gzip" in out and "zlib, zstd, bz2 or blosc" in out
    assert "--compressor zstd" in out
    code, _, err = run(capsys, "convert", str(tmp_path / "gz.zarr"), str(tmp_path / "a.zarr"), "--compressor", "zstd")
    assert code == 0 and run(capsys, "check", str(tmp_path / "a.zarr"))[0] == 0
    code, _, err = run(capsys, "convert", str(tmp_path / "gz.zarr"), str(tmp_path / "b.zarr"))
    assert code == 0 and "codecs netcdf-c cannot read (gzip) were replaced by zlib" in err
    assert "choose another compressor with --compressor." in err and "recompress=" not in err, err  # (its flag)
    assert '"id": "zlib"' in (tmp_path / "b.zarr" / "f" / ".zarray").read_text()


@pytest.mark.parametrize(("layout", "oldest", "code"), [
    (None, None, 0), (None, "4.9.0", 1), (None, "4.9.2", 0), (None, "4.10", 0),
    ("4.10", None, 0), ("4.10", "4.9.2", 1), ("4.9.0", None, 1), ("4.9.0", "4.9.0", 1),
])
def test_check_exit_code_follows_the_netcdf_c_that_must_read_the_store(capsys, tmp_path, layout, oldest, code):
    """Exit 1 when the data has problems or a netcdf-c that must read the store does not: the
    current one (>= 4.9.4) by default, or --netcdf-c VERSION and every newer one. Every version's
    verdict is printed either way (the verdicts are checked against those netcdf-c versions in
    tests/interop/test_netcdf_c_versions.py)."""
    from xr_zstrings.write.nczarr import to_nczarr

    path = tmp_path / "s.zarr"
    ds = xr.Dataset({"s": ("x", np.array(["a", "b"], dtype=object))} if layout != "4.9.0" else {"f": ("x", [1.0])})
    to_nczarr(ds, path, netcdf_c=layout)
    code_, out, _ = run(capsys, "check", str(path), *(("--netcdf-c", oldest) if oldest else ()))
    assert code_ == code, out
    assert "4.9.0       " in out and "4.9.1-4.9.3 " in out and ">= 4.9.4    " in out
    if code and oldest:
        assert f"--netcdf-c {oldest} says it must" in out


def test_check_refuses_a_netcdf_c_it_has_no_verdict_for(capsys):
    code, out, err = run(capsys, "check", SAMPLE, "--netcdf-c", "4.8.1")
    assert code == 2 and not out and "from 4.9.0 on" in err


def test_check_exit_code_in_a_real_subprocess(tmp_path):
    xr.Dataset({"u": ("x", np.array(["ab"]))}).to_zarr(tmp_path / "u.zarr", zarr_format=2, consolidated=False)
    proc = subprocess.run([sys.executable, "-m", "xr_zstrings", "check", str(tmp_path / "u.zarr")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1, proc.stderr
    assert "PROBLEM /u" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "xr_zstrings", "info", str(tmp_path / "none.zarr")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2
    assert proc.stderr.startswith("zstrings: error: ") and proc.stderr.count("\n") == 1
