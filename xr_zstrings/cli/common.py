"""What every command shares: exit codes, the one-line usage error, opening a store's
metadata, and the store's name and layout in words.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, NoReturn

from ..io.targets import NETCDF_SUFFIXES as _NETCDF_SUFFIXES  # (light: no zarr, no xarray)

#: exit codes (INTERNAL: an exception no command expects, i.e. a bug in zstrings; its traceback is printed)
OK, PROBLEMS, USAGE, INTERNAL = 0, 1, 2, 3


#: netcdf-c's default NC_STRING width (``_nczarr_default_maxstrlen``).
_NC_DEFAULT_MAXSTRLEN = 128


class UsageError(Exception):
    """A bad combination of arguments; printed as one line, exit code 2."""


def _one_line(message: object) -> str:
    """A message on one line, URL secrets redacted (every error and warning line goes through it)."""
    from ..io.redact import redact

    return " ".join(redact(message).split())


class Parser(argparse.ArgumentParser):
    """argparse's parser whose output goes through the one redaction: a usage error quotes the
    user's arguments (``invalid choice: 's3://KEY:SECRET@...'``), which may be URLs with secrets.
    Subparsers are of the same class (``add_subparsers`` makes them ``type(self)``)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(USAGE, f"{self.prog}: error: {_one_line(message)}\n")

    def format_usage(self) -> str:
        from ..io.redact import redact

        return redact(super().format_usage())

    def format_help(self) -> str:
        from ..io.redact import redact

        return redact(super().format_help())


def _is_netcdf_file(target: str) -> bool:
    """A local netCDF-3/4 (HDF5) file, recognised by its magic bytes (or suffix if it does not exist)."""
    if "://" in target:
        return False
    p = Path(target).expanduser()
    if p.is_file():
        from ..io.atomic import NETCDF_MAGIC  # (here: the package's import stays light for the CLI)

        with p.open("rb") as f:
            head = f.read(8)
        return head.startswith(NETCDF_MAGIC)
    return not p.exists() and p.suffix.lower() in _NETCDF_SUFFIXES


def _open_tree(target: str) -> Any:
    from ..io.store import open_store
    from ..read.tree import open_tree

    if _is_netcdf_file(target):
        raise UsageError(
            f"{target} is a netCDF file, not a Zarr store: use ncdump for it, or "
            f"'zstrings convert {target} OUT.zarr' to make an NCZarr store."  # (a local path)
        )
    return open_tree(open_store(target))


def _store_name(target: str) -> str:
    from ..io.redact import redact
    from ..io.targets import parse_nczarr_url

    path = redact(parse_nczarr_url(target).path if "://" in target else target).split("?", 1)[0]
    stem = Path(str(path).rstrip("/")).name
    for suffix in (".zarr", ".zip", ".nczarr"):
        stem = stem.removesuffix(suffix)
    return stem or "store"


def _describe_layout(tree: Any) -> str:
    """The store's layout in words: NCZarr generation, pure Zarr v2 or v3, and its writer."""
    root = tree.root
    gen = root.generation
    if root.zarr_format == 3:
        return "pure Zarr v3"
    if root.is_nczarr:
        version = f" {root.nczarr_version}" if root.nczarr_version else ""
        text = f"NCZarr{version}, generation {gen}"
    else:
        text = "pure Zarr v2 (_ARRAY_DIMENSIONS)"
    props = root.nc_properties
    if props is not None:
        writer = "xr_zstrings" if "xr_zstrings" in props else "netcdf-c"
        text += f"; written by {writer} (_NCProperties {props!r})"
    return text


_TARGET_HELP = ("a directory, .zip, file:///abs/path#mode=nczarr,file URL, or an S3 URL (s3://bucket/key "
                "or https://host/bucket/key#mode=nczarr,s3; endpoint, credentials and region from the "
                "AWS_* environment)")
