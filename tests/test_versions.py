"""``show_versions()`` / ``zstrings --version``, and what a user sees when the kernels fail to build.

The failed build is real: setup.py's build_ext runs with a C compiler that always fails
(``CC=false``), and the resulting package (its Python files and what the build recorded) is
imported in a subprocess.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numcodecs
import numpy as np
import pyarrow
import xarray as xr
import zarr

import xr_zstrings
from xr_zstrings.text import kernels as loading

REPO = Path(__file__).resolve().parent.parent


def _env(**kw: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("XR_ZSTRINGS_NO_EXT", "XR_ZSTRINGS_REQUIRE_EXT")}
    env.update({k: v for k, v in kw.items() if v is not None})
    return env


def test_show_versions_names_the_stack_and_the_kernels():
    buf = io.StringIO()
    xr_zstrings.show_versions(file=buf)
    lines = buf.getvalue().splitlines()
    for name, mod in (("numpy", np), ("zarr", zarr), ("numcodecs", numcodecs), ("xarray", xr),
                      ("pyarrow", pyarrow)):
        assert f"{name}: {mod.__version__}" in lines
    assert f"xr_zstrings: {xr_zstrings.__version__}" in lines
    assert lines[0].startswith(f"python: {sys.version.split()[0]} ")
    kernels = next(line for line in lines if line.startswith("kernels: "))
    assert kernels.startswith("kernels: yes" if loading.kernels() is not None else "kernels: no")
    assert "zarr private names used: all present" in lines


def test_cli_version_prints_the_same():
    out = subprocess.run([sys.executable, "-m", "xr_zstrings", "--version"], capture_output=True,
                         text=True, env=_env(), check=True).stdout
    buf = io.StringIO()
    xr_zstrings.show_versions(file=buf)
    assert out.splitlines()[1:] == buf.getvalue().splitlines()[1:] or loading.kernels() is None
    assert "kernels: yes - compiled kernels in use" in out
    forced = subprocess.run([sys.executable, "-m", "xr_zstrings", "--version"], capture_output=True,
                            text=True, env=_env(XR_ZSTRINGS_NO_EXT="1"), check=True).stdout
    assert "kernels: no - pure-Python fallback: XR_ZSTRINGS_NO_EXT=1 forces" in forced


def test_zstrings_script_version():
    script = Path(sys.executable).parent / "zstrings"
    out = subprocess.run([str(script), "--version"], capture_output=True, text=True, env=_env(), check=True)
    assert f"xr_zstrings: {xr_zstrings.__version__}" in out.stdout.splitlines()


def test_failed_build_warns_at_install_and_on_first_use(tmp_path):
    build = tmp_path / "build"
    r = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(build), "--build-temp",
         str(tmp_path / "tmp")],
        cwd=REPO, env=_env(CC="false"), capture_output=True, text=True,
    )
    assert r.returncode == 0, r.stderr  # the install goes on without the kernels ...
    assert "WARNING: xr_zstrings.text._kernels not built" in r.stderr  # ... and says so
    marker = build / "xr_zstrings" / "text" / loading.BUILD_ERROR_FILE
    assert "CompileError" in marker.read_text(encoding="utf-8")
    assert not list(build.glob("xr_zstrings/text/_kernels*.so"))

    # the package as that build installs it: the Python files plus what the build recorded
    site = tmp_path / "site"
    shutil.copytree(REPO / "xr_zstrings", site / "xr_zstrings",
                    ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__", loading.BUILD_ERROR_FILE))
    shutil.copy(marker, site / "xr_zstrings" / "text")
    code = (
        "import warnings, numpy as np\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    import xr_zstrings\n"
        f"    assert xr_zstrings.__file__.startswith({str(site)!r}), xr_zstrings.__file__\n"
        "    from xr_zstrings.text import fixed as strings\n"
        "    v = strings.decode_fixed_utf8(np.array([b'ab', b'\\xc3\\xa9']))\n"
        "    strings.decode_fixed_utf8(np.array([b'cd']))\n"
        "assert v.tolist() == ['ab', 'é'], v\n"
        "print(len(w)); print(w[0].category.__name__); print(w[0].message)\n"
    )
    # -S: no .pth files, so an editable install's finder cannot supply the real kernels
    path = os.pathsep.join([str(site), *{sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}])
    res = subprocess.run([sys.executable, "-S", "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, env=_env(PYTHONPATH=path))
    assert res.returncode == 0, res.stderr
    count, category, message = res.stdout.splitlines()[:3]
    assert (count, category) == ("1", "RuntimeWarning")  # once per process
    assert "the build at install time failed: CompileError" in message
    assert "install a C compiler" in message
    ver = subprocess.run([sys.executable, "-S", "-m", "xr_zstrings", "--version"], cwd=tmp_path,
                         capture_output=True, text=True, env=_env(PYTHONPATH=path))
    assert "kernels: no - pure-Python fallback: the build at install time failed: CompileError" in ver.stdout
