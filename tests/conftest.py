"""Fixtures shared by every test folder (pytest loads this rootdir conftest first).

The test folders mirror the package (formats/, text/, codecs/, io/, read/, write/, cli/) plus
interop/ for the peer matrices. pytest puts this folder on ``sys.path`` when it loads this file, so
every test module imports the helper modules kept here (``peers``, ``fuzz_stores``, ``s3_server``)
by their plain names. Test data (cdl/, golden*/) lives here too: ``TESTS`` is its parent folder.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from s3_server import S3Server, start_server

# the tests/ folder: test data paths are relative to it
TESTS = Path(__file__).resolve().parent

# the per-class count of xarray's backend tests (interop/xarray_backends), printed by the controller
pytest_plugins = ["xarray_backends_summary"]


@pytest.fixture(scope="session")
def s3() -> S3Server:
    """The S3 server on 127.0.0.1 (moto; one per test process, shared by every S3 test)."""
    return start_server()


@pytest.fixture(params=["C", "python"])
def kernels(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """A test run through the compiled kernels ("C") and through the pure numpy/pyarrow fallback
    ("python": ``XR_ZSTRINGS_NO_EXT=1``). "C" leaves the environment alone: CI's fallback job sets the
    variable for every test."""
    if request.param == "python":
        monkeypatch.setenv("XR_ZSTRINGS_NO_EXT", "1")
    return str(request.param)

