"""``zstrings dump``: the store as ncdump prints a netCDF file (header, then each group's
``data:``), wrapped at 80 columns; ``-h`` header only, ``-v`` some variables, ``-d`` a slice.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .cdl import _fmt_values, _in_scope, render_cdl
from .common import _TARGET_HELP, OK, UsageError, _is_netcdf_file, _open_tree, _store_name

#: values ``dump`` prints per variable unless ``--limit`` says otherwise (0: all)
DUMP_LIMIT = 10_000


#: ``dump``'s line width (ncdump's ``-l`` default)
DUMP_WIDTH = 80


def _first_values_box(shape: tuple[int, ...], limit: int) -> tuple[slice, ...]:
    """The index box holding the first ``limit`` values in C order, whole rows where they fit:
    the box reads at most ``limit`` values however large the shape claims to be."""
    box: list[slice] = []
    for i, n in enumerate(shape):
        inner = math.prod(shape[i + 1 :])
        if inner <= limit:
            box.append(slice(0, min(n, max(1, limit // max(inner, 1)))))
            box += [slice(0, m) for m in shape[i + 1 :]]
            break
        box.append(slice(0, min(n, 1)))
    return tuple(box)


def _flow(first: str, pieces: list[str], indent: str, width: int, pad: str = "") -> list[str]:
    """``first`` then ``pieces`` separated by spaces, wrapped as ncdump wraps data: a new line
    (starting with ``indent``) before a piece that would end past ``width - 3`` columns (ncdump
    leaves a space at the end of a line and keeps it, with room for the next separator, in 80).
    Columns count from the group's indentation ``pad``, so deeply nested groups still wrap."""
    lines, line, placed = [], first, False
    for p in pieces:
        if placed and len(line) - len(pad) + 1 + len(p) > width - 3:
            lines.append(line)
            line, placed = indent + p, True
            continue
        line = f"{line} {p}" if line.strip() else line + p
        placed = True
    lines.append(line)
    return lines


def _dump_values(var: Any, limit: int, string_rows: bool) -> tuple[Any, int, int]:
    """(the values shown, how many values the variable has, values per printed row): the first
    ``limit`` values (0: all), NC_CHAR rows of characters joined into strings."""
    shown = var
    chars = var.dtype == "S1" and var.ndim > 0  # NC_CHAR: the limit counts strings
    shape = var.shape[:-1] if chars else var.shape
    total = math.prod(var.shape)
    if limit and math.prod(shape) > limit:
        shown = var[_first_values_box(shape, limit) + ((slice(None),) if chars else ())]
    values = shown.values
    row = values.shape[-1] if values.ndim else 1
    if string_rows and var.ndim == 1:
        row = 1
    if values.dtype == "S1" and values.ndim:  # NC_CHAR: each row of characters is one string
        values = values.view(f"S{values.shape[-1]}")[..., 0] if values.shape[-1] else values[..., 0].astype("S1")
        total //= max(var.shape[-1], 1)
        row = 1  # as ncdump: one string per line when there are several
    return values, total, row


def _one_line_pieces(items: list[str], more: int) -> list[str]:
    """A 1-D variable's values as ``v,`` pieces ending in `` ;`` (or ``... ;`` when ``more`` are not shown)."""
    pieces = [f"{v}," for v in items[:-1]] + ([f"{items[-1]}{',' if more else ' ;'}"] if items else [])
    if more:
        pieces.append("... ;")
    elif not items:
        pieces = [";"]
    return pieces


def _row_lines(items: list[str], row: int, more: int, *, pad: str, cont: str, width: int) -> Iterator[str]:
    """The values ``row`` to a line (each wrapped at ``width``), the last ending in `` ;`` (or
    ``... ;`` when ``more`` are not shown)."""
    rows = [items[i : i + row] for i in range(0, len(items), row or 1)] or [[]]
    for i, r in enumerate(rows):
        last = i == len(rows) - 1
        pieces = [f"{v}," for v in r[:-1]]
        if r:
            pieces.append(f"{r[-1]}{',' if (more or not last) else ' ;'}")
        if last and more:
            pieces.append("... ;")
        yield from _flow(f"{pad}  ", pieces, cont, width, pad)


def _dump_variable(name: str, var: Any, limit: int = 0, *, width: int = DUMP_WIDTH, pad: str = "",
                   decoded: bool = True, string_rows: bool = False) -> Iterator[str]:
    """One variable's data lines as ncdump writes them: ``name = v, v, ... ;`` wrapped at
    ``width`` columns with a 4-space continuation; a variable of 2 or more dimensions one row of
    its last dimension per line. Only the first ``limit`` values are read (0: all)."""
    values, total, row = _dump_values(var, limit, string_rows)
    items = _fmt_values(values, decoded=decoded, fill=None if decoded else var.attrs.get("_FillValue"))
    more = total - len(items)
    cont = pad + "    "
    if var.ndim <= 1 and not string_rows:
        yield from _flow(f"{pad} {name} =", _one_line_pieces(items, more), cont, width, pad)
    else:
        yield f"{pad} {name} ="
        yield from _row_lines(items, row, more, pad=pad, cont=cont, width=width)
    if more:
        yield (f"{pad} // {name}: the first {len(items):,} of {total:,} values (shape {list(var.shape)}); "
               f"--limit N shows more, --limit 0 all")


def _parse_slices(specs: Sequence[str] | None) -> dict[str, slice]:
    """``-d DIM=START:STOP[:STEP]`` (Python slice syntax, the end excluded) or ``-d DIM=INDEX``."""
    out: dict[str, slice] = {}
    for spec in specs or ():
        dim, eq, rng = spec.partition("=")
        try:
            if not eq or not dim.strip():
                raise ValueError
            parts = [int(p) if p.strip() else None for p in rng.split(":")]
            if len(parts) == 1:
                if parts[0] is None:
                    raise ValueError
                i = parts[0]
                out[dim.strip()] = slice(i, None if i == -1 else i + 1)
            elif len(parts) <= 3:
                if parts[2:] and parts[2] is not None and parts[2] < 1:
                    raise ValueError
                out[dim.strip()] = slice(*parts)
            else:
                raise ValueError
        except ValueError:
            raise UsageError(f"-d {spec}: expected DIM=START:STOP[:STEP] or DIM=INDEX (Python slice syntax, "
                             "the end excluded), e.g. -d time=0:10") from None
    return out


def _slice_text(s: slice) -> str:
    text = f"{'' if s.start is None else s.start}:{'' if s.stop is None else s.stop}"
    return text + (f":{s.step}" if s.step not in (None, 1) else "")


def _check_dump_args(args: argparse.Namespace) -> None:
    """Refuse a netCDF file, a negative ``--limit`` and a line width under 20 columns."""
    if _is_netcdf_file(args.target):
        raise UsageError(f"{args.target} is a netCDF file: use ncdump for it, or convert it first.")
    if args.limit < 0:
        raise UsageError(f"--limit {args.limit}: expected a number of values >= 0 (0: all).")
    if args.width < 20:
        raise UsageError(f"-l {args.width}: expected a line width of at least 20 columns.")


def _group_asked(args: argparse.Namespace, tree: Any) -> str | None:
    """``--group`` as a path of the tree ("/" for the root), None when not given."""
    if args.group is None:
        return None
    group = "/" + args.group.strip("/") if args.group.strip("/") else "/"
    if group not in tree.groups:
        raise UsageError(f"no group {args.group} in {tree.store.display}; groups: {', '.join(sorted(tree.groups))}.")
    return group


def _select_variables(tree: Any, groups: dict[str, Any], group: str | None,
                      wanted: list[str] | None) -> dict[str, list[str]]:
    """Group path -> the names of its variables to print, in the store's order: those ``-v`` names
    (all when ``wanted`` is None) in ``group`` and below; a name not found is a usage error."""
    selected: dict[str, list[str]] = {}
    found: set[str] = set()
    for path, ds in groups.items():
        if not _in_scope(path, group):
            continue
        order = [a for a in tree.children.get(path, ([], []))[0] if a in ds.variables]
        order += [str(n) for n in ds.variables if str(n) not in order]
        for n in order:
            full = f"{path.rstrip('/')}/{n}"
            if wanted is None or n in wanted or full in wanted:
                selected.setdefault(path, []).append(n)
                found.update({n, full})
    _refuse_missing(tree, groups, group, [w for w in wanted or () if w not in found])
    return selected


def _refuse_missing(tree: Any, groups: dict[str, Any], group: str | None, missing: list[str]) -> None:
    """A usage error naming the ``-v`` names not found and the variables there are."""
    if missing:
        available = sorted(f"{g.rstrip('/')}/{n}" for g, ds in groups.items() for n in ds.variables
                           if _in_scope(g, group))
        raise UsageError(f"no variable {', '.join(missing)} in {tree.store.display}; available: "
                         f"{', '.join(available)} (use -v NAME or -v /group/NAME).")


def _check_slices_used(slices: dict[str, slice], selected: dict[str, list[str]], groups: dict[str, Any]) -> None:
    """Refuse a ``-d`` dimension no printed variable uses."""
    used_dims = {str(d) for p, names in selected.items() for n in names for d in groups[p][n].dims}
    unused = [d for d in slices if d not in used_dims]
    if unused:
        raise UsageError(f"-d {', '.join(unused)}: no variable shown uses that dimension; the variables "
                         f"shown use {', '.join(sorted(used_dims)) or 'no dimension'}.")


@dataclass
class _DataSection:
    """The ``data:`` lines of each group (``render_cdl``'s ``data``): the selected variables, sliced."""

    tree: Any
    groups: dict[str, Any]
    selected: dict[str, list[str]]
    slices: dict[str, slice]
    args: argparse.Namespace

    def __call__(self, path: str, pad: str) -> Iterator[str]:
        names = self.selected.get(path)
        if not names:
            return
        ds = self.groups[path]
        yield f"{pad}data:"
        applied = {d: s for d, s in self.slices.items() if any(d in ds[n].dims for n in names)}
        if applied:
            yield f"{pad}// selection: {', '.join(f'{d}={_slice_text(s)}' for d, s in applied.items())}"
        for n in names:
            yield from self._variable(path, n, ds[n].variable, pad)

    def _variable(self, path: str, n: str, var: Any, pad: str) -> Iterator[str]:
        sel = {d: s for d, s in self.slices.items() if d in var.dims}
        if sel:
            var = var.isel(sel)
        meta = self.tree.arrays.get(f"{path.rstrip('/')}/{n}")
        # NC_CHAR of 2 or more dimensions (joined into strings by xarray): one string per line
        rows = meta is not None and meta.string_kind == "char" and len(meta.shape) >= 2
        yield ""
        yield from _dump_variable(n, var, self.args.limit, width=self.args.width, pad=pad,
                                  decoded=not self.args.raw, string_rows=rows)


def _cmd_dump(args: argparse.Namespace) -> int:
    _check_dump_args(args)
    slices = _parse_slices(args.slice)
    tree = _open_tree(args.target)
    group = _group_asked(args, tree)
    wanted = [v.strip() for v in args.variables.split(",") if v.strip()] if args.variables else None
    name = _store_name(args.target)
    if args.header:
        for line in render_cdl(tree, name, group=group):
            print(line)
        return OK
    groups = _open_groups_lazily(args.target, raw=args.raw)
    selected = _select_variables(tree, groups, group, wanted)
    _check_slices_used(slices, selected, groups)
    for line in render_cdl(tree, name, group=group, data=_DataSection(tree, groups, selected, slices, args)):
        print(line)
    return OK


def _open_groups_lazily(target: str, *, raw: bool) -> dict[str, Any]:
    """Every group as a lazy Dataset, CF-decoded unless ``raw``, without pandas indexes (xarray
    would load each dimension coordinate whole to build one)."""
    import inspect

    import xarray as xr

    kw: dict[str, Any] = {"engine": "zstrings"}
    if raw:
        kw.update(mask_and_scale=False, decode_times=False, decode_timedelta=False)
    if "create_default_indexes" in inspect.signature(xr.open_groups).parameters:
        kw["create_default_indexes"] = False
    return dict(xr.open_groups(target, **kw))


def add_parser(sub: Any) -> None:
    """Add the 'dump' subcommand to ``sub``, the ``zstrings`` parser's subparsers."""
    p = sub.add_parser("dump", help="print values like 'ncdump', strings as text", add_help=False,
                       description="Print the store as ncdump prints a netCDF file: the header, then each "
                                   "group's data (strings as text, missing values as '_'), wrapped at 80 "
                                   "columns. -h prints the header only, -v some variables' data, -d a slice.")
    p.add_argument("--help", action="help", help="show this help message and exit")
    p.add_argument("target", metavar="PATH_OR_URL", help=_TARGET_HELP)
    p.add_argument("-h", "--header", action="store_true", help="the header only, no data (as ncdump -h)")
    p.add_argument("-v", "--variables", metavar="VAR[,VAR...]", default=None,
                   help="data of these variables only (names, or /group/name paths); the header is whole")
    p.add_argument("-d", "--slice", action="append", metavar="DIM=START:STOP[:STEP]",
                   help="data of this slice of a dimension only (Python slice syntax, the end excluded; "
                        "DIM=INDEX for one index); repeat for several dimensions")
    p.add_argument("--group", "-g", default=None, help="only this group and its subgroups (e.g. /metadata)")
    p.add_argument("--raw", action="store_true",
                   help="no CF decoding: times and packed values as stored (fill values still show as '_', "
                        "as in ncdump)")
    p.add_argument("--limit", type=int, default=DUMP_LIMIT, metavar="N",
                   help=f"print the first N values of each variable and say how many more there are "
                        f"(default {DUMP_LIMIT:,}; 0 prints all)")
    p.add_argument("-l", "--width", type=int, default=DUMP_WIDTH, metavar="WIDTH",
                   help=f"line width of the data section (default {DUMP_WIDTH}, as ncdump's -l)")
    p.set_defaults(func=_cmd_dump)
