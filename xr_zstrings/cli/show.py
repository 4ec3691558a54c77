"""``zstrings`` / ``zstrings sample`` / ``zstrings show``: open a store with engine="zstrings" and
print it as xarray shows it.
"""

from __future__ import annotations

import argparse
from typing import Any

from .common import _TARGET_HELP, OK


def _show(target: str, group: str | None) -> int:
    import xarray as xr

    if group is None:
        tree = xr.open_datatree(target, engine="zstrings")
        print(tree)
        for node in tree.subtree:
            for name, var in node.to_dataset(inherit=False).variables.items():
                if var.dtype.kind in "TOU":
                    print(f"{node.path.rstrip('/')}/{name}: {var.values.tolist()!r}")
    else:
        print(xr.open_dataset(target, engine="zstrings", group=group))
    return OK


def _cmd_sample(args: argparse.Namespace) -> int:
    from ..sample import sample_path

    path = sample_path()
    print(f"# built-in sample: {path}")
    return _show(str(path), None)


def _cmd_show(args: argparse.Namespace) -> int:
    return _show(args.target, args.group)


def add_parser(sub: Any) -> None:
    """Add the 'sample' and 'show' subcommands to ``sub``, the ``zstrings`` parser's subparsers."""
    p = sub.add_parser("sample", help="show the built-in sample NCZarr store (the default)",
                       description="Open the bundled NCZarr sample with engine='zstrings' and print it.")
    p.set_defaults(func=_cmd_sample)

    p = sub.add_parser("show", help="open a store with engine='zstrings' and print it with xarray",
                       description="Open a store with engine='zstrings' and print the DataTree (or one group).")
    p.add_argument("target", metavar="PATH_OR_URL", help=_TARGET_HELP)
    p.add_argument("--group", "-g", default=None, help="print only this group as a Dataset")
    p.set_defaults(func=_cmd_show)
