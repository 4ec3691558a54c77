"""tests/virtual: VirtualiZarr's own test module is imported by test_virtualizarr_parser_suite.py;
the markers it declares are registered here (pytest runs with --strict-markers)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    for name in ("network", "minio", "slow"):
        config.addinivalue_line("markers", f"{name}: VirtualiZarr's own marker (its parser tests run here)")
