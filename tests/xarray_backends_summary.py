"""The count per class of xarray's backend test classes (tests/interop/xarray_backends): passed
(and how many of those opened anything through engine="zstrings"), regressions, deliberate
differences, peer failures, skips. A plugin of the root conftest: with pytest-xdist the controller
process, which prints the summary, sees every test report but never loads that folder's conftest."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import pytest

_HERE = "xarray_backends"
_outcomes: dict[str, Counter[str]] = defaultdict(Counter)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _HERE not in report.nodeid:
        return
    parts = report.nodeid.split("::")
    cls = parts[1] if len(parts) > 2 else parts[-1]
    if report.when == "setup" and report.skipped:
        _outcomes[cls]["skipped"] += 1
        return
    if report.when != "call":
        if report.failed:
            _outcomes[cls][f"error ({report.when})"] += 1
        return
    props = dict(report.user_properties)
    xfail = getattr(report, "wasxfail", None)
    if report.skipped and xfail is not None:
        kind = ("deliberate difference" if xfail.startswith("deliberate") else
                "peer fails too" if xfail.startswith("peer fails too") else "xfail (xarray's mark)")
        _outcomes[cls][kind] += 1
    elif report.skipped:
        _outcomes[cls]["skipped"] += 1
    elif report.failed:
        _outcomes[cls]["regression" if "regression" in str(report.longrepr) else "failed"] += 1
    else:
        _outcomes[cls]["passed"] += 1
        if props.get("zstrings_opens"):
            _outcomes[cls]["passed, read through zstrings"] += 1


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _outcomes:
        return
    terminalreporter.section("xarray's backend test classes (tests/interop/xarray_backends)")
    for cls in sorted(_outcomes):
        counts = _outcomes[cls]
        terminalreporter.write_line(f"{cls}: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
