"""The lint step's complexity gate: the functions of xr_zstrings whose cyclomatic complexity, as
radon counts it, is over ``LIMIT``; the step fails, listing them, when there are more than ``BUDGET``.

    python .ci/complexity.py   # needs radon (the lint extra); .ci/run's run_lint runs it

Radon, not ruff's C901 (mccabe, not enabled in pyproject's ruff config): ruff counts neither ``and``/``or``
nor the loops and conditions of comprehensions, so a function radon scores 6 scores 2 there and
ruff at 20 flags 1 of the 46 functions radon put over 20 when this gate was added (issue 38 item 4
counts radon's).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: radon's rank D starts above this complexity
LIMIT = 20

#: how many functions may stay over LIMIT: none since issue 38 (its target was at most 10, from 48).
#: A function that needs more is split by job (named steps, a table of cases), not given budget.
BUDGET = 0

#: what a reader runs to see the list
COMMAND = "python -m radon cc -n D -s xr_zstrings"


def over_limit(blocks: dict[str, Any]) -> list[str]:
    """``path:line name (complexity)`` of each block in radon's JSON output (``radon cc -j``) over ``LIMIT``."""
    found = []
    for path, items in sorted(blocks.items()):
        if isinstance(items, dict):  # radon's {"error": ...} for a file it could not parse
            raise SystemExit(f"complexity: radon could not read {path}: {items.get('error')}")
        for b in items:
            if b["complexity"] > LIMIT:
                name = f"{b['classname']}.{b['name']}" if b.get("classname") else b["name"]
                found.append(f"{path}:{b['lineno']} {name} ({b['complexity']})")
    return found


def verdict(found: list[str], budget: int = BUDGET) -> tuple[bool, str]:
    """(whether the gate passes, what it says) for the functions ``found`` over ``LIMIT``."""
    head = f"complexity: {len(found)} functions with cyclomatic complexity > {LIMIT} (radon; budget {budget})"
    if len(found) <= budget:
        return True, head
    return False, "\n".join([
        f"{head}: {len(found) - budget} over the budget. These are over {LIMIT} ({COMMAND} lists them with their ranks):",
        *(f"  {f}" for f in found),
        ("Fix: split the new or grown function by job (named steps for what it does in turn, a table for "
         "what varies), keeping its behaviour and messages; the budget only goes down."),
    ])


def main() -> int:
    out = subprocess.run([sys.executable, "-m", "radon", "cc", "-j", "xr_zstrings"], cwd=ROOT,
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        print(f"complexity: radon failed ({out.stderr.strip()}); install the lint extra: "
              "python -m pip install -e '.[lint]'", file=sys.stderr)
        return 1
    ok, text = verdict(over_limit(json.loads(out.stdout)))
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
