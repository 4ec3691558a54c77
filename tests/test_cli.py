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
