"""``zstrings migrate``: a Zarr v2 / NCZarr store as Zarr v3, its chunk bytes reused
(``xr_zstrings.migrate``): in place beside the v2 metadata, or into a new location.
"""

from __future__ import annotations

import argparse
from typing import Any

from .common import _TARGET_HELP, OK, UsageError, _is_netcdf_file


def _cmd_migrate(args: argparse.Namespace) -> int:
    from ..write.migrate import migrate

    if _is_netcdf_file(args.src):
        raise UsageError(f"{args.src} is a netCDF file, not a Zarr store: 'zstrings convert {args.src} OUT.zarr "
                         "--format zarr3' writes it as Zarr v3.")
    from ..errors import TargetExistsError
    from ..io.redact import redact
    from .convert import _refused_text

    if args.missing is None and not args.dry_run:  # the API's refusal, in the command's words (planned
        lost = migrate(args.src, dry_run=True).missing_lost  # in place: the same arrays, DST not looked at)
        if lost:
            raise UsageError(
                f"Cannot migrate {redact(args.src)} without a choice: the missing values of {len(lost)} bytes array(s) "
                f"({', '.join(lost)}) would read as values after migration (no Zarr v3 metadata marks a bytes value "
                "missing for xarray). Pass --missing optional to rewrite just those arrays into zarrs' nullable "
                "optional type, which keeps them missing, or --missing values to keep their chunks (the missing "
                "values then read as the fill). Nothing was written.")
    try:
        report = migrate(args.src, args.dst, mode="w" if args.overwrite else "w-", dry_run=args.dry_run,
                         consolidated=not args.no_consolidated, missing=args.missing, check_utf8=args.check_utf8)
    except TargetExistsError as e:  # the writer's refusal (its session's) in the command's words, as convert's
        if args.dst is None:  # in place (a link refused): no DST to name, the writer's own words
            raise
        raise UsageError(_refused_text(args.dst, "zarr3", args.overwrite, e)) from None
    for line in report.lines():
        print(line)
    return OK


def add_parser(sub: Any) -> None:
    """Add the 'migrate' subcommand to ``sub``, the ``zstrings`` parser's subparsers."""
    p = sub.add_parser("migrate", help="Zarr v2 / NCZarr -> Zarr v3, metadata only where the chunks allow",
                       description="Write Zarr v3 metadata for a Zarr v2 or NCZarr store (any netcdf-c "
                                   "generation), reusing its chunks: without DST in place, beside the v2 "
                                   "metadata (netcdf-c and v2 readers read it as before, zarr-python as Zarr "
                                   "v3); with DST into a new store whose chunks are hard-linked (or copied "
                                   "server side on S3). Arrays whose chunks no v3 codec decodes unchanged are "
                                   "rewritten; the summary says which and why.")
    p.add_argument("src", metavar="SRC", help="the Zarr v2 / NCZarr store (" + _TARGET_HELP + ")")
    p.add_argument("dst", metavar="DST", nargs="?", default=None,
                   help="a new directory or s3:// URL (default: migrate SRC in place)")
    p.add_argument("--dry-run", action="store_true", help="only say what would be reused and rewritten")
    p.add_argument("--overwrite", action="store_true", help="replace DST if it exists")
    p.add_argument("--no-consolidated", action="store_true",
                   help="no consolidated metadata in the root zarr.json (default: written)")
    p.add_argument("--missing", choices=("values", "optional"), default=None,
                   help="bytes arrays whose missing values no Zarr v3 metadata keeps missing for xarray (--dry-run "
                        "names them): 'values' keeps their chunks (they read as the fill), 'optional' rewrites "
                        "them into zarrs' nullable optional type (kept missing); default: refuse to migrate "
                        "such a store until one is chosen")
    p.add_argument("--check-utf8", action="store_true",
                   help="read the text arrays and name those xarray's engine='zarr' cannot decode (not valid "
                        "UTF-8, e.g. cut inside a character by netcdf-c); default: not read")
    p.set_defaults(func=_cmd_migrate)
