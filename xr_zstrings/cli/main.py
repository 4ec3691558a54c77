"""The parser (each command adds its own subparser) and the entry point: errors as one line on
stderr with exit code 2, warnings as one line each.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from . import check, convert, dump, info, migrate, repair, show
from .common import INTERNAL, USAGE, Parser, UsageError, _one_line
from .show import _cmd_sample


def _parser() -> argparse.ArgumentParser:
    parser = Parser(  # (its usage errors redacted: they quote the arguments, URLs included)
        prog="zstrings",
        description="String data in NCZarr / Zarr v2 / v3 stores (xr_zstrings). Without a command, "
                    "shows the built-in sample store.",
        epilog="Exit codes: 0 ok, 1 'check' found problems, 2 usage or input error, 3 internal error (a bug).",
    )
    parser.add_argument("--traceback", action="store_true",
                        help="also show the full traceback of an error (the exit code stays the same)")
    parser.add_argument("--version", action="store_true",
                        help="print the versions of xr_zstrings and its stack, and whether the "
                             "compiled kernels are in use, then exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in (show, info, dump, convert, check, migrate, repair):  # one module per command
        command.add_parser(sub)
    return parser


def _warnings_as_lines() -> None:
    """Print each warning as one line, ``zstrings: warning: MESSAGE``, without the Python source
    line that the default format shows (call inside ``warnings.catch_warnings()``)."""

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: Any = None, line: str | None = None) -> None:
        print(f"zstrings: warning: {_one_line(message)}", file=sys.stderr)

    warnings.simplefilter("default")  # each distinct warning once (also resets what was shown)
    warnings.filterwarnings("ignore", category=DeprecationWarning)  # the libraries' own business
    warnings.filterwarnings("ignore", category=PendingDeprecationWarning)
    warnings.showwarning = show


def _print_traceback(e: BaseException) -> None:
    """``--traceback``: the error's traceback on stderr, redacted like every other line (the error
    line and the exit code follow as without it)."""
    import traceback

    from ..io.redact import redact

    print(redact("".join(traceback.format_exception(e))), end="", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``zstrings``; returns the process exit code (0 ok, 1 problems, 2 errors)."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help (0) and usage errors (2): return, so callers get an int
        return int(e.code or 0) if not isinstance(e.code, str) else USAGE
    if args.version:
        from ..versions import show_versions

        show_versions()
        return 0
    func: Callable[[argparse.Namespace], int] = getattr(args, "func", _cmd_sample)

    from ..errors import ZStringsError

    try:
        with warnings.catch_warnings():
            _warnings_as_lines()
            return func(args)
    except BrokenPipeError:  # `zstrings dump ... | head`: stop quietly, as ncdump does
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):  # not a real file descriptor (e.g. captured output)
            pass
        return 141
    except (UsageError, ZStringsError, OSError, ValueError, KeyError) as e:
        if args.traceback:
            _print_traceback(e)
        from ..io.store_errors import local_os_error

        # a local file system's refusal that no store call mapped: its path and cause, not a bare [Errno 13]
        local = local_os_error(e, f"zstrings {args.command or 'sample'} failed")
        print(f"zstrings: error: {_one_line(local or e)}", file=sys.stderr)
        return USAGE
    except MemoryError as e:
        if args.traceback:
            _print_traceback(e)
        print(f"zstrings: error: out of memory ({_one_line(e) or 'MemoryError'}): the store's metadata claims "
              "more data than this machine holds; select less (dump -v NAME --limit N).", file=sys.stderr)
        return USAGE
    except KeyboardInterrupt:  # pragma: no cover
        print("zstrings: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - a bug: its traceback, redacted like every line printed here
        _print_traceback(e)
        print(f"zstrings: internal error: {_one_line(e)}: a bug in zstrings {args.command or 'sample'}, not in "
              "your data or options; please report it with the traceback above.", file=sys.stderr)
        return INTERNAL
