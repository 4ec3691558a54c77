"""zarr-python's own tests with and without the plugin: every test that passes without it must pass with it.

Downloads the sdist of the installed zarr-python once (``pip download --no-binary :all: --no-deps``)
into ``XR_ZSTRINGS_ZARR_SDIST`` (default ``~/.cache/xr_zstrings/zarr-sdist``), runs the chosen test
paths twice in this interpreter (with the plugin's entry points, and with them removed from
zarr-python's lazy-load lists before any test imports: what an otherwise identical venv without the
package gives), and lists each test that passed without and failed with, less :data:`DELIBERATE`.

    python tests/zarr_plugin/zarr_suite.py [--full] [-n 2]

Two edits to zarr's test tree (both in :data:`PATCHES`): ``tests/test_dtype/conftest.py`` loads the
entry points before it iterates the registry (zarr-python's own test package with a data-type entry
point fails that import without it: docs/format-notes.md, "zarr's test_dtype conftest"), and
``tests/conftest.py`` honours the without-run's switch in child processes too.
zarr's own addopts are dropped (pytest-benchmark options, doctests of ``src``); it needs pytest-asyncio.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from importlib.metadata import version
from pathlib import Path

#: the property tests that draw data types from the registry (the plugin's too); the others draw numpy
#: dtypes and take ~7 of the full set's ~8 minutes on 2 cores
_PROPERTIES = tuple(f"tests/test_properties.py::{t}" for t in (
    "test_zdtype_json_roundtrip", "test_zdtype_native_roundtrip", "test_roundtrip_array_metadata_from_json"))
#: what CI runs (the py312 job): every test of the issue's set but the slow numpy-dtype property tests
CI_PATHS = ("tests/test_dtype", "tests/test_dtype_registry.py", "tests/test_codecs", "tests/test_array.py",
            *_PROPERTIES)
#: the issue's full set, run by hand (``--full``)
FULL_PATHS = ("tests/test_dtype", "tests/test_dtype_registry.py", "tests/test_codecs", "tests/test_array.py",
              "tests/test_properties.py")

#: the switch of the run without the plugin (read by the patched tests/conftest.py, in child processes too)
WITHOUT_ENV = "XR_ZSTRINGS_ZARR_SUITE_WITHOUT"

_WITHOUT = f'''
# xr_zstrings' harness (tests/zarr_plugin/zarr_suite.py): the run without the plugin drops its entry points
import os as _os
if _os.environ.get("{WITHOUT_ENV}"):
    import zarr.registry as _registry
    from zarr.core.dtype import data_type_registry as _dtypes

    def _theirs(entries):
        return [e for e in entries if not e.value.startswith("xr_zstrings")]

    _dtypes._lazy_load_list[:] = _theirs(_dtypes._lazy_load_list)
    for _codecs in _registry._codec_registries.values():
        _codecs.lazy_load_list[:] = _theirs(_codecs.lazy_load_list)
'''
_LOOP = "zdtype_examples: tuple[ZDType[Any, Any], ...] = ()\n"
_PRELOAD = ("# xr_zstrings' harness: load the entry points before iterating (loading adds to contents)\n"
            "data_type_registry._lazy_load()\n")
_FUTURE = "from __future__ import annotations\n"

#: file -> (text to find, what replaces it)
PATCHES: dict[str, tuple[str, str]] = {"tests/conftest.py": (_FUTURE, _FUTURE + _WITHOUT),
                                       "tests/test_dtype/conftest.py": (_LOOP, _PRELOAD + _LOOP)}

_NATIVE = "from_native_dtype declines every numpy dtype: numpy's S1 stays zarr's NullTerminatedBytes"
_V2 = "ZarrsOptional has no Zarr v2 form (zarrs' optional is a v3 data type): DataTypeValidationError"
_SERIALIZER = ("create_array(dtype=ZarrsOptional()) without a serializer is refused before writing metadata "
               "(zarr's default bytes codec cannot encode objects; zarr has no per-type default serializer)")
#: test -> why it differs with the plugin on purpose: a test function (of zarr's parametrisations over the
#: registry, for the plugin's data types: node ids new with the plugin), or a whole node id
DELIBERATE: dict[str, str] = {
    "test_registered_dtypes_match_dtype": _NATIVE, "test_match_dtype_unique": _NATIVE,
    "test_registered_dtypes_match_json": _V2, "test_parse_data_type": f"{_V2}; NCChar: {_NATIVE}",
    "test_default_fill_value": _SERIALIZER, "test_default_fill_value_None": _SERIALIZER,
    "test_from_array_preserves_dtype": _SERIALIZER, "test_array_fill_value_default": _SERIALIZER,
    "tests.test_properties::test_zdtype_json_roundtrip": f"draws ZarrsOptional for Zarr v2: {_V2}",
    "tests.test_properties::test_zdtype_native_roundtrip": f"draws NCChar: {_NATIVE}",
}


def _deliberate(test: str, new: bool) -> bool:
    function = test.split("::")[-1].split("[")[0]
    return test in DELIBERATE or (new and function in DELIBERATE)


def sdist_tests(cache: Path) -> Path:
    """The test tree of the installed zarr-python's sdist, downloaded and patched once."""
    ver = version("zarr")
    root = cache / f"zarr-{ver}"
    if not (root / "tests").is_dir():
        cache.mkdir(parents=True, exist_ok=True)
        archive = cache / f"zarr-{ver}.tar.gz"
        if not archive.exists():
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
                            "--quiet", "-d", str(cache), f"zarr=={ver}"], check=True)
        with tarfile.open(archive) as tar:
            tar.extractall(cache, filter="data")
    for rel, (old, new) in PATCHES.items():
        path = root / rel
        src = path.read_text()
        if "xr_zstrings' harness" not in src:
            if old not in src:
                raise RuntimeError(f"{path}: {old!r} not found; update PATCHES for zarr {ver}")
            path.write_text(src.replace(old, new, 1))
    return root


#: hangs in a pytest-xdist worker with and without the plugin (its forkserver/spawn children); run alone
#: (``--deselect`` takes a prefix: both tests)
SERIAL = "tests/test_array.py::test_multiprocessing"


def run(root: Path, args: list[str], *, plugin: bool, junit: Path, log: Path) -> float:
    """pytest over ``args`` in zarr's test tree (its config, without its addopts), output to ``log``;
    the seconds it took."""
    env = {k: v for k, v in os.environ.items() if k != WITHOUT_ENV}
    if not plugin:
        env[WITHOUT_ENV] = "1"
    cmd = [sys.executable, "-m", "pytest", *args, "-q", "-p", "no:cacheprovider", "-o", "addopts=",
           f"--junitxml={junit}"]
    start = time.monotonic()
    with log.open("w") as out:
        subprocess.run(cmd, cwd=root, env=env, check=False, stdout=out, stderr=subprocess.STDOUT)
    return time.monotonic() - start


def outcomes(junit: Path) -> dict[str, str]:
    """node id -> passed / failed / skipped of a junit report."""
    found = {}
    for case in ET.parse(junit).iter("testcase"):
        kinds = {child.tag for child in case}
        outcome = "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
        found[f"{case.get('classname')}::{case.get('name')}"] = outcome
    return found


def regressions(without: dict[str, str], with_: dict[str, str]) -> list[str]:
    """Tests that pass without the plugin and fail with it, or fail as new tests (the plugin's data
    types drawn by zarr's parametrisations), less the deliberate differences."""
    bad = [t for t, o in with_.items() if o == "failed" and without.get(t, "passed") == "passed"]
    return [t for t in bad if not _deliberate(t, t not in without)]


def main(argv: list[str] | None = None) -> int:
    """Run both, print the counts and every regression; non-zero when there is one."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="the issue's full set (test_array, test_properties too)")
    ap.add_argument("-n", default="2", help="pytest-xdist workers")
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get(
        "XR_ZSTRINGS_ZARR_SDIST", Path.home() / ".cache" / "xr_zstrings" / "zarr-sdist")))
    args = ap.parse_args(argv)
    root = sdist_tests(args.cache)
    runs = [[*(FULL_PATHS if args.full else CI_PATHS), "-n", args.n, "--deselect", SERIAL],
            [SERIAL, f"{SERIAL}_fork_codec_pipeline_pool", "-n", "0"]]
    reports: dict[bool, dict[str, str]] = {False: {}, True: {}}
    for plugin in (False, True):
        mode = "with" if plugin else "without"
        for i, run_args in enumerate(runs):
            junit, log = args.cache / f"junit-{mode}-{i}.xml", args.cache / f"log-{mode}-{i}.txt"
            took = run(root, run_args, plugin=plugin, junit=junit, log=log)
            reports[plugin].update(outcomes(junit))
            print(f"zarr-suite: {' '.join(run_args[:2])}... {mode} the plugin: {took:.0f} s (log: {log})")
    for plugin, found in reports.items():
        counts = " ".join(f"{o}={sum(v == o for v in found.values())}" for o in ("passed", "failed", "skipped"))
        print(f"zarr-suite: zarr {version('zarr')}'s tests {'with' if plugin else 'without'} the plugin: {counts}")
    bad = regressions(reports[False], reports[True])
    for t in bad:
        print(f"FAILED zarr-suite (passes without xr_zstrings, fails with it): {t}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
