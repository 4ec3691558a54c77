"""``zstrings repair``: complete or undo a write that was killed part-way (``xr_zstrings.repair``).
"""

from __future__ import annotations

import argparse
from typing import Any

from .common import _TARGET_HELP, OK


def _cmd_repair(args: argparse.Namespace) -> int:
    from ..write.repair import repair

    report = repair(args.target, force=args.force)
    print(f"repair {report.target}: {report.state}")
    print(f"    {'done' if report.changed else 'nothing done'}: {report.action}")
    return OK


def add_parser(sub: Any) -> None:
    """Add the 'repair' subcommand to ``sub``, the ``zstrings`` parser's subparsers."""
    p = sub.add_parser("repair", help="complete or undo a write that was killed part-way",
                       description="Complete a write that was killed after its commit point (roll forward) or "
                                   "undo one killed before it (roll back: its chunks removed, the metadata "
                                   "restored), so that every reader reads the store again; re-consolidate a "
                                   ".zmetadata another tool left stale. A write that may still be running "
                                   "(on another machine, or alive here, and its claim younger than "
                                   "XR_ZSTRINGS_LOCK_TIMEOUT) is left alone unless --force. 'zstrings check' "
                                   "says what state a store is in and what repair would do.")
    p.add_argument("target", metavar="PATH_OR_URL", help=_TARGET_HELP)
    p.add_argument("--force", action="store_true",
                   help="repair even though the write's claim is recent and its writer may be running "
                        "(only when you know it is not: that write would then fail at its commit)")
    p.set_defaults(func=_cmd_repair)
