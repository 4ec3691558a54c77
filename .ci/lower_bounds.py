"""The minimum-versions job's constraints: every ``>=`` lower bound in pyproject.toml pinned exactly
(a requirement pinned with ``==``, such as the notebook's data package, is its own bound).

Reads the build requirements, the runtime dependencies and the ``test`` extra.  With ``--check``
it verifies instead that the active environment has exactly those versions installed (so a bound
pip could not honour, or a package that slipped in at another version, fails the job).
"""

from __future__ import annotations

import re
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v))


def lower_bounds() -> dict[str, tuple[str, str]]:
    """Each requirement's lower bound, with its environment marker ("" when it has none)."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    reqs = [*meta["build-system"]["requires"], *meta["project"]["dependencies"],
            *meta["project"]["optional-dependencies"]["test"]]
    out: dict[str, tuple[str, str]] = {}
    for r in reqs:
        m = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)(?:\[[^]]*\])?\s*(?:>=|==)\s*([0-9][^,;\s]*)\s*(?:;\s*(.+?))?\s*", r)
        if not m:
            sys.exit(f"lower_bounds: {r!r} has no single '>=' lower bound (or '==' pin); "
                     "give every requirement one")
        name = re.sub(r"[-_.]+", "-", m.group(1)).lower()
        # a package bounded twice (numpy: build headers and runtime) gets the higher bound
        if name not in out or _key(m.group(2)) > _key(out[name][0]):
            out[name] = (m.group(2), m.group(3) or "")
    return out


def main() -> int:
    bounds = lower_bounds()
    if "--check" not in sys.argv:
        print("\n".join(f"{n}=={v}" + (f"; {mk}" if mk else "") for n, (v, mk) in bounds.items()))
        return 0
    from packaging.markers import Marker  # installed with the test extra (pytest needs it)
    from packaging.version import Version

    bad = []
    for n, (v, mk) in bounds.items():
        if mk and not Marker(mk).evaluate():
            continue  # not for this Python (e.g. icechunk, Python >= 3.12 only)
        try:
            got = version(n)
        except PackageNotFoundError:
            got = "not installed"
        if got == "not installed" or Version(got) != Version(v):
            bad.append(f"{n}: lower bound {v}, installed {got}")
    print("\n".join(bad) if bad else f"all {len(bounds)} lower bounds installed exactly")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
