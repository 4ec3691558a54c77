"""The ``zstrings`` command line (also ``python -m xr_zstrings``).

With no arguments it opens the built-in sample NCZarr store through ``engine="zstrings"`` and
prints it, so a newcomer sees strings come back as text. Heavy imports stay inside functions.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


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
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    parser = argparse.ArgumentParser(
        prog="zstrings",
        description="Open NCZarr / Zarr stores with real str variables (xr_zstrings).",
    )
    sub = parser.add_subparsers(dest="command")
    p_sample = sub.add_parser("sample", help="show the built-in sample NCZarr store (the default)")
    p_sample.set_defaults(command="sample")
    p_show = sub.add_parser("show", help="open a store or URL with engine='zstrings' and print it")
    p_show.add_argument("target", help="a directory, .zip, or file:///abs/path#mode=nczarr,file URL")
    p_show.add_argument("--group", "-g", default=None, help="print only this group as a Dataset")
    args = parser.parse_args(argv)

    from .errors import ZStringsError

    try:
        if args.command in (None, "sample"):
            from .sample import sample_path

            path = sample_path()
            print(f"# built-in sample: {path}")
            return _show(str(path), None)
        return _show(args.target, args.group)
    except ZStringsError as e:
        print(f"zstrings: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
