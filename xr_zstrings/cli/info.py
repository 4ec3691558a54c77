"""``zstrings info``: a header like ``ncdump -h``, each variable annotated with how it is stored,
after the store's layout (NCZarr generation, pure Zarr v2 or v3, and its writer).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

from .cdl import render_cdl
from .common import _TARGET_HELP, OK, _describe_layout, _open_tree, _store_name


def render_info(tree: Any, name: str) -> Iterator[str]:
    """``ncdump -h``-like lines for a whole tree, each variable annotated with how it is stored,
    after the store's layout."""
    yield f"// source: {tree.store.display}"
    yield f"// layout: {_describe_layout(tree)}"
    if tree.root.default_maxstrlen is not None:
        yield f"// _nczarr_default_maxstrlen: {tree.root.default_maxstrlen}"
    yield from render_cdl(tree, name, notes=True)


def _cmd_info(args: argparse.Namespace) -> int:
    tree = _open_tree(args.target)
    for line in render_info(tree, _store_name(args.target)):
        print(line)
    return OK


def add_parser(sub: Any) -> None:
    """Add the 'info' subcommand to ``sub``, the ``zstrings`` parser's subparsers."""
    p = sub.add_parser("info", help="a header like 'ncdump -h' and the detected layout",
                       description="Print groups, dimensions (UNLIMITED ones too), variables with their "
                                   "netCDF types and storage layout, attributes, and the store's layout "
                                   "(NCZarr generation, pure Zarr v2 or v3). Reads metadata only.")
    p.add_argument("target", metavar="PATH_OR_URL", help=_TARGET_HELP)
    p.set_defaults(func=_cmd_info)
