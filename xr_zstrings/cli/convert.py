"""``zstrings convert``: netCDF-4 file <-> NCZarr / Zarr v2 <-> Zarr v3, read a block at a time
with a progress bar; an existing target is refused in one wording, whatever the format.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path
from typing import Any, cast

from ..codecs.layouts import LAYOUT_NAMES
from ..formats.netcdf_c import CURRENT, DEFAULT_NETCDF_C, examples_text
from ..io.redact import redact
from .common import _NETCDF_SUFFIXES, _TARGET_HELP, OK, UsageError, _is_netcdf_file

#: ``--compressor``: the keys of ``write.convert.COMPRESSORS`` (not imported: the command line loads
#: no writer before it runs one)
COMPRESSOR_CHOICES = ("zlib", "zstd", "bz2", "none")


def _target_format(dst: str, requested: str | None) -> str:
    """``--format``, else the library's choice from the name (``write.convert.target_format``)."""
    from ..write.convert import target_format

    if requested is None:
        return target_format(dst)
    if dst.lower().endswith(_NETCDF_SUFFIXES) and requested != "netcdf4":
        raise UsageError(f"DST {redact(dst)} ends in a netCDF suffix but --format {requested} writes a Zarr store: "
                         "name the target like out.zarr, or drop --format to write a netCDF-4 file.")
    return requested


def _progress(total: int, quiet: bool, dst: str) -> Any:
    """A tqdm bar on stderr, shown only when stdout is a terminal and the conversion takes a while."""
    disable = quiet or not sys.stdout.isatty()
    try:
        from tqdm import tqdm
    except ImportError:  # progress is a nicety, never a requirement
        disable = True
    if disable:
        return _NoBar()
    return tqdm(total=total, unit="B", unit_scale=True, desc=f"-> {Path(redact(dst)).name}", delay=0.3, mininterval=0.2,
                file=sys.stderr, leave=False)


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _cmd_convert(args: argparse.Namespace) -> int:
    src, dst = args.src, args.dst
    fmt = _target_format(dst, args.format)
    _check_flags(args, fmt)
    from ..errors import CodecDroppedWarning, StringOverflowError, TargetExistsError
    from ..write.convert import convert

    kw: dict[str, Any] = {}
    if fmt in ("nczarr", "zarr2"):  # the source's codecs, what netcdf-c cannot read replaced (said unless -q)
        kw = {"maxstrlen": args.maxstrlen, "on_overflow": args.on_overflow, "recompress": args.compressor or "netcdf-c"}
    elif fmt == "zarr3":
        kw = {"layout": args.layout or LAYOUT_NAMES[0]}
    try:
        with warnings.catch_warnings():
            if args.quiet:
                warnings.filterwarnings("ignore", message="codecs netcdf-c cannot read", category=CodecDroppedWarning)
            warnings.showwarning = _codec_fix_in_flags(warnings.showwarning, CodecDroppedWarning)
            convert(src, dst, mode="w" if args.overwrite else "w-", format=cast(Any, fmt), netcdf_c=args.netcdf_c,
                    progress=lambda total: _progress(total, args.quiet, dst), **kw)
    except TargetExistsError as e:  # the writer's refusal, in the command's words
        raise UsageError(_refused_text(dst, fmt, args.overwrite, e)) from None
    except StringOverflowError as e:  # the library names its keyword arguments: name the flags
        raise UsageError(_overflow_in_flags(str(e))) from None
    if not args.quiet:
        print(f"wrote {redact(dst)} ({fmt})", file=sys.stderr)
    return OK


def _check_flags(args: argparse.Namespace, fmt: str) -> None:
    """Refuse flags the target format does not take, and SRC/DST that cannot be, in the command's words."""
    src, dst = args.src, args.dst
    if args.maxstrlen is not None and fmt not in ("nczarr", "zarr2"):
        raise UsageError(f"--maxstrlen applies to --format nczarr/zarr2 only ({fmt} strings are "
                         "variable-length); drop it.")
    if args.maxstrlen is not None and args.maxstrlen < 1:
        raise UsageError(f"--maxstrlen {args.maxstrlen}: expected a width of at least 1 byte.")
    if args.compressor is not None and fmt not in ("nczarr", "zarr2"):
        raise UsageError(f"--compressor applies to --format nczarr/zarr2 only (target is {fmt}); drop it.")
    if args.netcdf_c is not None and fmt != "nczarr":
        raise UsageError(f"--netcdf-c chooses the NCZarr layout; it applies to --format nczarr (target is {fmt}).")
    if args.layout is not None and fmt != "zarr3":
        raise UsageError(f"--layout chooses the Zarr v3 string layout; add --format zarr3 (target is {fmt}).")
    if os.path.abspath(src) == os.path.abspath(dst):
        raise UsageError(f"SRC and DST are the same ({redact(src)}); choose another target.")
    if _is_netcdf_file(src) and not Path(src).expanduser().exists():
        raise UsageError(f"No such file: {src}; check the path.")


def _exists_text(dst: str) -> str:
    """The one wording for a target that exists, whatever the format."""
    return f"DST {redact(dst)} exists; pass --overwrite to replace it, or choose another DST."


def _not_a_store(dst: str, fmt: str) -> str | None:
    """What a local target that ``--overwrite`` must not replace holds (the writers' own rule), or
    None when it is a store, a zip or netCDF file, empty, or not local."""
    from ..io.atomic import not_replaceable
    from ..write.session import classify

    path = classify(dst).path
    if path is None:
        return None
    kind = "netcdf" if fmt == "netcdf4" else ("zip" if path.is_file() else "zarr")  # (dirs: one rule)
    return not_replaceable(path, kind)


def _never_replaced_text(dst: str, what: str) -> str:
    return f"DST {redact(dst)} is {what}; zstrings does not replace it, even with --overwrite: choose another DST."


def _refused_text(dst: str, fmt: str, overwrite: bool, e: BaseException) -> str:
    """A writer's ``TargetExistsError`` in the command's words: a target zstrings never replaces,
    one that exists (without ``--overwrite``), else the writer's words with the flag for the mode."""
    what = _not_a_store(dst, fmt)
    if what is not None:
        return _never_replaced_text(dst, what)
    if not overwrite:
        return _exists_text(dst)
    return str(e).replace("mode='w' replaces", "--overwrite replaces")


def _codec_fix_in_flags(show: Any, category: type[Warning]) -> Any:
    """``show`` (``warnings.showwarning``) with a replaced codec's fix in the command's words (its
    flag, not the library's keyword argument)."""
    def in_flags(message: Any, cat: type[Warning], *args: Any, **kwargs: Any) -> Any:
        if issubclass(cat, category):
            message = str(message).replace("recompress=... (zstrings convert --compressor)", "--compressor")
        return show(message, cat, *args, **kwargs)

    return in_flags


def _overflow_in_flags(message: str) -> str:
    """A StringOverflowError's fix in the command's words (its flags, not the Python keywords)."""
    import re

    fixed = re.sub(r"Pass on_overflow='widen' to use width (\d+), or on_overflow='truncate' to cut them at a "
                   r"character boundary \(with a StringTruncationWarning\), or shorten the values",
                   r"Pass --on-overflow widen (width \1), --on-overflow truncate (cut at a character boundary, "
                   r"with a warning) or --maxstrlen \1.", message)
    return fixed


def add_parser(sub: Any) -> None:
    """Add the 'convert' subcommand to ``sub``, the ``zstrings`` parser's subparsers."""
    p = sub.add_parser("convert", help="netCDF-4 file <-> NCZarr / Zarr v2 <-> Zarr v3",
                       description="Copy a whole file or store, groups included. The source is a netCDF "
                                   "file (read with netCDF4) or any store engine='zstrings' reads; the "
                                   "target format follows --format, else the DST name (.nc -> netCDF-4, "
                                   "anything else -> NCZarr). A progress bar shows on long conversions "
                                   "when stdout is a terminal.")
    p.add_argument("src", metavar="SRC", help="a netCDF file or a store (" + _TARGET_HELP + ")")
    p.add_argument("dst", metavar="DST", help="a .nc file, a directory, a .zip or a file:// URL")
    p.add_argument("--format", choices=("nczarr", "zarr2", "zarr3", "netcdf4"), default=None,
                   help="target format (default: netcdf4 for .nc targets, else nczarr)")
    p.add_argument("--maxstrlen", type=int, default=None,
                   help="NC_STRING width in bytes for nczarr/zarr2 (default: each variable's stored "
                        "width, else its longest value)")
    p.add_argument("--on-overflow", choices=("error", "truncate", "widen"), default="error",
                   help="strings longer than the width: fail (default), cut at a character boundary, "
                        "or widen")
    p.add_argument("--layout", choices=LAYOUT_NAMES, default=None,
                   help=f"Zarr v3 string layout for --format zarr3 (default {LAYOUT_NAMES[0]}, which zarr-python "
                        "reads)")
    p.add_argument("--compressor", choices=COMPRESSOR_CHOICES, default=None,
                   help="compressor for every variable of an nczarr/zarr2 target (default: the source's "
                        "own, codecs netcdf-c cannot read replaced by zlib)")
    p.add_argument("--netcdf-c", dest="netcdf_c", metavar="VERSION", default=None,
                   help=f"the oldest netcdf-c that must read DST (e.g. {examples_text()}); default: the layout "
                        f"every netcdf-c from {DEFAULT_NETCDF_C} to {CURRENT.example} reads")
    p.add_argument("--overwrite", action="store_true", help="replace DST if it exists")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar and no summary line")
    p.set_defaults(func=_cmd_convert)
