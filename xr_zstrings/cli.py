"""The ``zstrings`` command line (also ``python -m xr_zstrings``).

``zstrings`` with no arguments opens the built-in sample NCZarr store through ``engine="zstrings"`` and
prints it, so a newcomer sees strings come back as text. The subcommands are what netCDF users know
from ``ncdump``/``nccopy``:

* ``zstrings info PATH_OR_URL``: a header like ``ncdump -h`` plus the detected layout;
* ``zstrings dump PATH_OR_URL [-v VAR[,VAR]] [--group G]``: the values, strings shown as text;
* ``zstrings convert SRC DST [--format ...]``: netCDF-4 file <-> NCZarr / Zarr v2 <-> Zarr v3;
* ``zstrings check PATH_OR_URL``: what netcdf-c would fail on or truncate, and how to fix it.

Exit codes: 0 success, 1 ``check`` found problems, 2 usage or input errors (one line on stderr that
names the fix). Heavy imports (xarray, zarr, netCDF4, tqdm) stay inside functions.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["main"]

#: exit codes
OK, PROBLEMS, USAGE = 0, 1, 2

_CDL_TYPES = {
    "i1": "byte", "u1": "ubyte", "i2": "short", "u2": "ushort", "i4": "int", "u4": "uint",
    "i8": "int64", "u8": "uint64", "f4": "float", "f8": "double",
}
_CDL_SUFFIX = {"i1": "b", "u1": "UB", "i2": "s", "u2": "US", "i4": "", "u4": "U", "i8": "LL", "u8": "ULL"}
_NETCDF_SUFFIXES = (".nc", ".nc4", ".cdf", ".h5", ".hdf5", ".netcdf")
#: netcdf-c's default NC_STRING width (``_nczarr_default_maxstrlen``).
_NC_DEFAULT_MAXSTRLEN = 128


class UsageError(Exception):
    """A bad combination of arguments; printed as one line, exit code 2."""


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------


def _one_line(message: object) -> str:
    return " ".join(str(message).split())


def _is_netcdf_file(target: str) -> bool:
    """A local netCDF-3/4 (HDF5) file, recognised by its magic bytes (or suffix if it does not exist)."""
    if "://" in target:
        return False
    p = Path(target).expanduser()
    if p.is_file():
        with p.open("rb") as f:
            head = f.read(8)
        return head.startswith((b"CDF\x01", b"CDF\x02", b"CDF\x05", b"\x89HDF\r\n\x1a\n"))
    return not p.exists() and p.suffix.lower() in _NETCDF_SUFFIXES


def _open_tree(target: str) -> Any:
    from .reader import open_tree
    from .store import open_store

    if _is_netcdf_file(target):
        raise UsageError(
            f"{target} is a netCDF file, not a Zarr store: use ncdump for it, or "
            f"'zstrings convert {target} OUT.zarr' to make an NCZarr store."
        )
    return open_tree(open_store(target))


def _describe_layout(tree: Any) -> str:
    """The store's layout in words: NCZarr generation, pure Zarr v2 or v3, and its writer."""
    root = tree.root
    gen = root.generation
    if gen == "zarr-v3":
        return "pure Zarr v3"
    if gen.startswith("nczarr"):
        version = f" {root.nczarr_version}" if root.nczarr_version else ""
        text = f"NCZarr{version}, generation {gen}"
    else:
        text = "pure Zarr v2 (_ARRAY_DIMENSIONS)"
    props = root.nc_properties
    if props is not None:
        writer = "xr_zstrings" if "xr_zstrings" in props else "netcdf-c"
        text += f"; written by {writer} (_NCProperties {props!r})"
    return text


def _resolve_dims(tree: Any, meta: Any) -> list[Any]:
    """An array's dimensions; a broken reference is shown, not fatal (``check`` reports it)."""
    from .metadata import Dimension
    from .reader import _resolve_dims

    try:
        return _resolve_dims(tree, meta)
    except Exception:  # noqa: BLE001 - info shows what it can
        refs = meta.dimension_references or meta.array_dimensions or ()
        names = [r.rsplit("/", 1)[-1] for r in refs] or [f"?{i}" for i in range(len(meta.shape))]
        return [Dimension(n, s) for n, s in zip(names, meta.shape, strict=False)]


def _v3_layout(tree: Any, meta: Any) -> str | None:
    from .reader import ChunkedArray

    try:
        return ChunkedArray(tree.store, meta, meta.shape).pipeline_v3.layout
    except Exception:  # noqa: BLE001 - an unreadable chain is reported by check
        return None


def _type_and_note(tree: Any, meta: Any) -> tuple[str, str]:
    """(CDL type name, storage note) of one array."""
    kind = meta.string_kind
    v3 = meta.generation == "zarr-v3"
    if v3:
        if kind in ("vlen", "vlen-bytes"):
            layout = _v3_layout(tree, meta) or "unknown layout"
            cdl = "string" if kind == "vlen" else "opaque"
            return cdl, f"zarr v3 {meta.data_type}, layout {layout}"
        if kind == "unicode":
            return "string", f"zarr v3 {meta.data_type} ({meta.dtype.str})"
        if kind == "string":
            return "string", f"zarr v3 {meta.data_type}, {meta.dtype.itemsize} bytes"
        cdl = _CDL_TYPES.get(meta.dtype.str[1:], meta.data_type)
        return cdl, f"zarr v3 {meta.data_type}"
    if kind == "string":
        return "string", f"NC_STRING {meta.dtype_str}, maxstrlen {meta.dtype.itemsize}"
    if kind == "char":
        return "char", f"NC_CHAR {meta.dtype_str}"
    if kind == "unicode":
        return "string", f"{meta.dtype_str} fixed-width UTF-32 (zarr-python/xarray)"
    if kind == "vlen":
        return "string", "|O vlen-utf8 (zarr-python/xarray)"
    if kind == "vlen-bytes":
        return "opaque", "|O vlen-bytes (zarr-python/xarray)"
    cdl = _CDL_TYPES.get(meta.dtype.str[1:])
    if cdl is None:
        return str(meta.dtype), f"{meta.dtype_str} (no netCDF type)"
    return cdl, meta.dtype_str


def _codec_note(meta: Any) -> str:
    if meta.generation == "zarr-v3":
        names = [c.get("name") for c in meta.codecs]
        return "codecs " + "+".join(str(n) for n in names)
    parts = []
    if meta.compressor is not None:
        level = meta.compressor.get("level", meta.compressor.get("clevel"))
        parts.append(f"{meta.compressor.get('id')}" + (f" level {level}" if level is not None else ""))
    parts += [str(f.get("id")) for f in meta.filters if f.get("id") not in ("vlen-utf8", "vlen-bytes")]
    return " + ".join(parts) if parts else "uncompressed"


#: ncdump's escapes in CDL strings (ncdump/utils.c); other control characters become octal ``\\ooo``
_CDL_ESCAPES = {"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v",
                "\\": "\\\\", "'": "\\'", '"': '\\"'}


def _cdl_text(s: str) -> str:
    """A CDL string literal as ncdump writes it: quoted, ``\\n``-style escapes, other control
    characters (and bytes that are not UTF-8, kept as surrogates) in octal, other text as is."""
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch in _CDL_ESCAPES:
            out.append(_CDL_ESCAPES[ch])
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\{o:03o}")
        elif 0xDC80 <= o <= 0xDCFF:  # a byte that is not UTF-8 (surrogateescape)
            out.append(f"\\{o - 0xDC00:03o}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _cdl_bytes(b: bytes) -> str:
    return _cdl_text(bytes(b).decode("utf-8", "surrogateescape"))


def _cdl_float(x: float, *, single: bool, attribute: bool) -> str:
    """A float in the shortest form that reads back exactly (numpy's ``str``: ncdump rounds to 7 /
    15 significant digits instead). Attributes are CDL literals as ncdump writes them: ``2.``,
    ``1.e+20``, ``-999.f``, ``NaNf``; data values are plain (``2``, ``1e+20``)."""
    import numpy as np

    if np.isnan(x):
        text = "NaN"
    elif np.isinf(x):
        text = "Infinity" if x > 0 else "-Infinity"
    else:
        text = str(np.float32(x) if single else np.float64(x))
        mantissa, e, exponent = text.partition("e")
        if mantissa.endswith(".0"):
            mantissa = mantissa[:-2]
        if attribute and "." not in mantissa:
            mantissa += "."
        text = mantissa + e + exponent
    return text + ("f" if single and attribute else "")


def _cdl_scalar(v: Any, *, attribute: bool = True) -> str:
    """One attribute (or data) value in CDL: numbers typed by their numpy type as ncdump types
    them (``1s``, ``2UB``, ``3LL``, ``1.5f``), a Python float as a double, text quoted."""
    import numpy as np

    if isinstance(v, str):
        return _cdl_text(v)
    if isinstance(v, bytes | np.bytes_):
        return _cdl_bytes(v)
    if isinstance(v, bool | np.bool_):
        return "true" if v else "false"
    if isinstance(v, np.floating | float):
        return _cdl_float(float(v), single=isinstance(v, np.float32 | np.float16), attribute=attribute)
    if isinstance(v, np.integer):
        return f"{int(v)}{_CDL_SUFFIX.get(v.dtype.str[1:], '') if attribute else ''}"
    if v is None or isinstance(v, dict | list):
        return json.dumps(v, ensure_ascii=False)
    return str(v)


def _cdl_attr(value: Any) -> str:
    import numpy as np

    if isinstance(value, np.ndarray):
        return ", ".join(_cdl_scalar(x) for x in value.ravel()) if value.ndim else _cdl_scalar(value[()])
    if isinstance(value, list | tuple) and value and all(isinstance(x, str | float | bool | np.generic)
                                                         or type(x) is int for x in value):
        return ", ".join(_cdl_scalar(x) for x in value)
    return _cdl_scalar(value)


# ---------------------------------------------------------------------------------------------
# info
# ---------------------------------------------------------------------------------------------


def _group_dimensions(tree: Any, path: str, arrays: list[Any]) -> list[Any]:
    """Dimensions to list in a group: NCZarr's declared ones, else those its arrays use first."""
    group = tree.groups[path]
    if group.dimensions:
        return list(group.dimensions.values())
    seen: dict[str, Any] = {}
    declared_above = set()
    p = path
    while p != "/":
        p = p.rsplit("/", 1)[0] or "/"
        declared_above |= set(tree.groups[p].dimensions)
    for meta in arrays:
        for d in _resolve_dims(tree, meta):
            if d.name not in seen and d.name not in declared_above:
                seen[d.name] = d
    return list(seen.values())


#: what ``render_cdl`` calls for a group's ``data:`` section: (group path, indentation) -> lines
DataLines = Callable[[str, str], Iterator[str]]


def render_info(tree: Any, name: str) -> Iterator[str]:
    """``ncdump -h``-like lines for a whole tree, each variable annotated with how it is stored,
    after the store's layout."""
    yield f"// source: {tree.store.display}"
    yield f"// layout: {_describe_layout(tree)}"
    if tree.root.default_maxstrlen is not None:
        yield f"// _nczarr_default_maxstrlen: {tree.root.default_maxstrlen}"
    yield from render_cdl(tree, name, notes=True)


def render_cdl(tree: Any, name: str, *, notes: bool = False, group: str | None = None,
               data: DataLines | None = None) -> Iterator[str]:
    """CDL as ncdump writes it: the header of every group (only ``group``'s subtree when given),
    nested as ncdump nests groups, each group's ``data:`` section from ``data``, and with
    ``notes`` a comment on each variable saying how it is stored."""
    yield f"netcdf {name} {{"
    yield from _render_group(tree, "/", "", notes=notes, only=group, data=data)
    yield "}"


def _array_attrs(tree: Any, meta: Any) -> dict[str, Any]:
    """An array's attributes with ``_FillValue`` as a value of the array's type (as ncdump types
    it), whichever way the format stores it."""
    import numpy as np

    attrs = dict(meta.attrs)
    if "_FillValue" not in attrs:
        return attrs
    fill = attrs["_FillValue"]
    if meta.generation == "zarr-v3":
        from .metadata_v3 import decode_xarray_fill_attr

        try:  # xarray stores a v3 array's _FillValue attribute encoded (base64 of the value)
            fill = decode_xarray_fill_attr(fill, meta, store=tree.store.display)
        except Exception:  # noqa: BLE001 - show it as stored
            return attrs
    if meta.dtype.kind in "fiu" and isinstance(fill, int | float | np.number) and not isinstance(fill, bool):
        try:
            fill = np.array(fill).astype(meta.dtype, casting="same_kind" if meta.dtype.kind == "f" else "unsafe")
            fill = fill[()] if fill.ndim == 0 else fill
        except (TypeError, ValueError, OverflowError):  # shown as stored
            pass
    attrs["_FillValue"] = fill
    return attrs


def _in_scope(path: str, only: str | None) -> bool:
    return only is None or path == only or path.startswith(only.rstrip("/") + "/")


def _render_group(tree: Any, path: str, pad: str, *, notes: bool, only: str | None,
                  data: DataLines | None) -> Iterator[str]:
    """A group's lines and its subgroups', nested as ncdump nests them; outside ``only``'s subtree
    just the ``group:`` lines that lead to it. Iterative (an explicit stack, not recursion): a
    store may nest groups deeper than Python's recursion limit."""
    stack: list[tuple[str, str] | str] = [(path, pad)]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
            continue
        path, pad = item
        inside = _in_scope(path, only)
        if inside:
            yield from _group_body(tree, path, pad, notes=notes)
            if data is not None:
                yield from data(path, pad)
        later: list[tuple[str, str] | str] = []
        for g in tree.children.get(path, ([], []))[1]:
            child = f"{path.rstrip('/')}/{g}"
            if inside or _in_scope(child, only) or (only or "").startswith(child + "/"):
                later += ["", f"{pad}group: {g} {{", (child, pad + "  "), f"{pad}  }} // group {g}"]
        stack.extend(reversed(later))


def _group_body(tree: Any, path: str, pad: str, *, notes: bool) -> Iterator[str]:
    """One group's dimensions, variables and attributes (not its subgroups); arrays this package
    does not decode are named in a comment with the reason."""
    arrays_here = tree.children.get(path, ([], []))[0]
    metas = [tree.arrays[f"{path.rstrip('/')}/{a}"] for a in arrays_here]
    left_out = {p.rsplit("/", 1)[1]: why for p, why in tree.unreadable.items()
                if (p.rsplit("/", 1)[0] or "/") == path}
    dims = _group_dimensions(tree, path, metas)
    if dims:
        yield f"{pad}dimensions:"
        for d in dims:
            if d.unlimited:
                yield f"{pad}\t{d.name} = UNLIMITED ; // ({d.size} currently)"
            else:
                yield f"{pad}\t{d.name} = {d.size} ;"
    if metas or left_out:
        yield f"{pad}variables:"
        for meta in metas:
            cdl, note = _type_and_note(tree, meta)
            dnames = ", ".join(d.name for d in _resolve_dims(tree, meta))
            shape = "" if meta.scalar else f"({dnames})"
            chunks = "" if meta.scalar else f", chunks {list(meta.chunks)}"
            comment = f" // {note}, {_codec_note(meta)}{chunks}" if notes else ""
            yield f"{pad}\t{cdl} {meta.name}{shape} ;{comment}"
            for k, v in _array_attrs(tree, meta).items():
                yield f"{pad}\t\t{meta.name}:{k} = {_cdl_attr(v)} ;"
        for name, why in left_out.items():
            yield f"{pad}\t// {name}: not decoded by xr_zstrings: {_one_line(why)}"
    attrs = tree.groups[path].attrs
    if attrs:
        yield ""
        yield f"{pad}// {'global' if path == '/' else 'group'} attributes:"
        for k, v in attrs.items():
            yield f"{pad}\t\t:{k} = {_cdl_attr(v)} ;"


def _store_name(target: str) -> str:
    from .store import parse_nczarr_url

    path = parse_nczarr_url(target).path if "://" in target else target
    stem = Path(str(path).rstrip("/")).name
    for suffix in (".zarr", ".zip", ".nczarr"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
    return stem or "store"


def _cmd_info(args: argparse.Namespace) -> int:
    tree = _open_tree(args.target)
    for line in render_info(tree, _store_name(args.target)):
        print(line)
    return OK


# ---------------------------------------------------------------------------------------------
# dump
# ---------------------------------------------------------------------------------------------


def _fmt_values(values: Any, *, decoded: bool = True, fill: Any = None) -> list[str]:
    """Each element as ncdump writes data: strings quoted, missing values (NaN and NaT once decoded,
    None, and values equal to ``fill``, the stored ``_FillValue``) as ``_``, floats in their
    shortest exact form, times in ISO form."""
    import numpy as np

    arr = np.asarray(values)
    flat = arr.ravel()
    if fill is not None and arr.dtype.kind in "fiu":
        try:
            is_fill = np.isnan(flat) if np.isnan(fill) else flat == np.asarray(fill, dtype=arr.dtype)
        except (TypeError, ValueError, OverflowError):
            is_fill = None
        if is_fill is not None and is_fill.any():
            plain = _fmt_values(values, decoded=decoded)
            return ["_" if m else t for t, m in zip(plain, is_fill.tolist(), strict=True)]
    if arr.dtype.kind in "Mm":
        nat = np.isnat(flat)
        text = np.datetime_as_string(flat, unit="auto") if arr.dtype.kind == "M" else flat.astype(str)
        return ["_" if m else _cdl_text(str(t)) for t, m in zip(text, nat, strict=True)]
    if arr.dtype.kind in "TU":
        return [_cdl_text(str(s)) for s in flat]
    if arr.dtype.kind == "S":
        return [_cdl_bytes(s) for s in flat]
    if arr.dtype.kind == "f":
        single = arr.dtype.itemsize <= 4
        return ["_" if decoded and np.isnan(x) else _cdl_float(float(x), single=single, attribute=False)
                for x in flat]
    if arr.dtype.kind in "iu":
        return [str(int(x)) for x in flat]
    if arr.dtype.kind == "b":
        return ["true" if x else "false" for x in flat]
    out = []
    for x in flat:
        if x is None:
            out.append("_")
        else:
            out.append(_cdl_scalar(x, attribute=False))
    return out


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


def _dump_variable(name: str, var: Any, limit: int = 0, *, width: int = DUMP_WIDTH, pad: str = "",
                   decoded: bool = True, string_rows: bool = False) -> Iterator[str]:
    """One variable's data lines as ncdump writes them: ``name = v, v, ... ;`` wrapped at
    ``width`` columns with a 4-space continuation; a variable of 2 or more dimensions one row of
    its last dimension per line. Only the first ``limit`` values are read (0: all)."""
    shown = var
    chars = var.dtype == "S1" and var.ndim > 0  # NC_CHAR: the limit counts strings
    shape = var.shape[:-1] if chars else var.shape
    total = math.prod(var.shape)
    if limit and math.prod(shape) > limit:
        shown = var[_first_values_box(shape, limit) + ((slice(None),) if chars else ())]
    values = shown.values
    row = values.shape[-1] if values.ndim else 1
    one_dim = var.ndim <= 1 and not string_rows
    if string_rows and var.ndim == 1:
        row = 1
    if values.dtype == "S1" and values.ndim:  # NC_CHAR: each row of characters is one string
        values = values.view(f"S{values.shape[-1]}")[..., 0] if values.shape[-1] else values[..., 0].astype("S1")
        total //= max(var.shape[-1], 1)
        row = 1  # as ncdump: one string per line when there are several
    items = _fmt_values(values, decoded=decoded, fill=None if decoded else var.attrs.get("_FillValue"))
    more = total - len(items)
    cont = pad + "    "
    if one_dim:
        pieces = [f"{v}," for v in items[:-1]] + ([f"{items[-1]}{',' if more else ' ;'}"] if items else [])
        if more:
            pieces.append("... ;")
        elif not items:
            pieces = [";"]
        yield from _flow(f"{pad} {name} =", pieces, cont, width, pad)
    else:
        yield f"{pad} {name} ="
        rows = [items[i : i + row] for i in range(0, len(items), row or 1)] or [[]]
        for i, r in enumerate(rows):
            last = i == len(rows) - 1
            pieces = [f"{v}," for v in r[:-1]]
            if r:
                pieces.append(f"{r[-1]}{',' if (more or not last) else ' ;'}")
            if last and more:
                pieces.append("... ;")
            yield from _flow(f"{pad}  ", pieces, cont, width, pad)
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


def _cmd_dump(args: argparse.Namespace) -> int:
    if _is_netcdf_file(args.target):
        raise UsageError(f"{args.target} is a netCDF file: use ncdump for it, or convert it first.")
    if args.limit < 0:
        raise UsageError(f"--limit {args.limit}: expected a number of values >= 0 (0: all).")
    if args.width < 20:
        raise UsageError(f"-l {args.width}: expected a line width of at least 20 columns.")
    slices = _parse_slices(args.slice)
    tree = _open_tree(args.target)
    group = None
    if args.group is not None:
        group = "/" + args.group.strip("/") if args.group.strip("/") else "/"
        if group not in tree.groups:
            raise UsageError(f"no group {args.group} in {args.target}; groups: {', '.join(sorted(tree.groups))}.")
    wanted = [v.strip() for v in args.variables.split(",") if v.strip()] if args.variables else None
    name = _store_name(args.target)
    if args.header:
        for line in render_cdl(tree, name, group=group):
            print(line)
        return OK
    groups = _open_groups_lazily(args.target, raw=args.raw)
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
    missing = [w for w in wanted or () if w not in found]
    if missing:
        available = sorted(f"{g.rstrip('/')}/{n}" for g, ds in groups.items() for n in ds.variables
                           if _in_scope(g, group))
        raise UsageError(f"no variable {', '.join(missing)} in {args.target}; available: "
                         f"{', '.join(available)} (use -v NAME or -v /group/NAME).")
    used_dims = {str(d) for p, names in selected.items() for n in names for d in groups[p][n].dims}
    unused = [d for d in slices if d not in used_dims]
    if unused:
        raise UsageError(f"-d {', '.join(unused)}: no variable shown uses that dimension; the variables "
                         f"shown use {', '.join(sorted(used_dims)) or 'no dimension'}.")

    def data(path: str, pad: str) -> Iterator[str]:
        names = selected.get(path)
        if not names:
            return
        ds = groups[path]
        yield f"{pad}data:"
        applied = {d: s for d, s in slices.items() if any(d in ds[n].dims for n in names)}
        if applied:
            yield f"{pad}// selection: {', '.join(f'{d}={_slice_text(s)}' for d, s in applied.items())}"
        for n in names:
            var = ds[n].variable
            sel = {d: s for d, s in slices.items() if d in var.dims}
            if sel:
                var = var.isel(sel)
            meta = tree.arrays.get(f"{path.rstrip('/')}/{n}")
            # NC_CHAR of 2 or more dimensions (joined into strings by xarray): one string per line
            rows = meta is not None and meta.string_kind == "char" and len(meta.shape) >= 2
            yield ""
            yield from _dump_variable(n, var, args.limit, width=args.width, pad=pad, decoded=not args.raw,
                                      string_rows=rows)

    for line in render_cdl(tree, name, group=group, data=data):
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


# ---------------------------------------------------------------------------------------------
# convert
# ---------------------------------------------------------------------------------------------


def _convert_helpers() -> tuple[dict[str, Any], Callable[[Any, str], None]]:
    """The undecoded open options and the netCDF-4 writer behind ``conversion.convert`` (a
    temporary file that replaces the target when complete)."""
    from .conversion import RAW_DECODERS, write_netcdf4_file

    return dict(RAW_DECODERS), write_netcdf4_file


def _target_format(dst: str, requested: str | None) -> str:
    is_nc = dst.lower().endswith(_NETCDF_SUFFIXES)
    if requested is None:
        if is_nc:
            return "netcdf4"
        if "mode=zarr" in dst and "nczarr" not in dst.split("#", 1)[-1]:
            return "zarr2"
        return "nczarr"
    if is_nc and requested != "netcdf4":
        raise UsageError(f"DST {dst} ends in a netCDF suffix but --format {requested} writes a Zarr store: "
                         "name the target like out.zarr, or drop --format to write a netCDF-4 file.")
    return requested


class _Counted:
    """Backend array that counts the bytes read from a source variable on a progress bar."""

    BLOCK_BYTES = 8 << 20

    def __init__(self, var: Any, bar: Any) -> None:
        self.var = var
        self.shape = var.shape
        self.dtype = var.dtype
        self.bar = bar
        self.remaining = int(var.nbytes)

    def __getitem__(self, key: Any) -> Any:
        from xarray.core import indexing

        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.BASIC, self._get)

    def _get(self, key: tuple[Any, ...]) -> Any:
        import numpy as np

        key = tuple(key)
        first = key[0] if key else None
        if isinstance(first, slice) and (first.step or 1) == 1 and self.var.ndim:
            start, stop, _ = first.indices(self.shape[0])
            row_bytes = max(1, self.var.dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64)))
            rows = max(1, self.BLOCK_BYTES // row_bytes)
            if stop - start > rows:  # read in blocks so the bar moves during one large variable
                pieces = [self._read((slice(i, min(i + rows, stop)), *key[1:]))
                          for i in range(start, stop, rows)]
                return np.concatenate(pieces, axis=0)
        return self._read(key)

    def _read(self, key: tuple[Any, ...]) -> Any:
        import numpy as np

        out = np.asarray(self.var[key].values)
        n = min(self.remaining, out.size * out.dtype.itemsize)
        if n > 0:
            self.remaining -= n
            self.bar.update(n)
        return out


def _counted(groups: dict[str, Any], bar: Any) -> dict[str, Any]:
    """The same groups with every non-index variable read through ``_Counted`` (still lazy)."""
    import xarray as xr
    from xarray.backends import BackendArray
    from xarray.core import indexing

    class Counted(_Counted, BackendArray):
        pass

    out = {}
    for path, ds in groups.items():
        coords, data = {}, {}
        for name, var in ds.variables.items():
            if name not in ds.indexes:
                var = xr.Variable(var.dims, indexing.LazilyIndexedArray(Counted(var, bar)), var.attrs,
                                  var.encoding)
            (coords if name in ds.coords else data)[name] = var
        new = xr.Dataset(data, coords=coords, attrs=ds.attrs)
        new.encoding = dict(ds.encoding)
        out[path] = new
    return out


def _progress(total: int, quiet: bool, dst: str) -> Any:
    """A tqdm bar on stderr, shown only when stdout is a terminal and the conversion takes a while."""
    disable = quiet or not sys.stdout.isatty()
    try:
        from tqdm import tqdm
    except ImportError:  # progress is a nicety, never a requirement
        disable = True
    if disable:
        return _NoBar()
    return tqdm(total=total, unit="B", unit_scale=True, desc=f"-> {Path(dst).name}", delay=0.3, mininterval=0.2,
                file=sys.stderr, leave=False)


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _cmd_convert(args: argparse.Namespace) -> int:
    import xarray as xr

    src, dst = args.src, args.dst
    fmt = _target_format(dst, args.format)
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
        raise UsageError(f"SRC and DST are the same ({src}); choose another target.")
    _check_target(dst, fmt, overwrite=args.overwrite)

    from . import writer

    raw_options, write_netcdf4 = _convert_helpers()
    source_is_nc = _is_netcdf_file(src)
    if source_is_nc and not Path(src).expanduser().exists():
        raise UsageError(f"No such file: {src}; check the path.")
    open_kw: dict[str, Any] = dict(raw_options)
    if fmt == "zarr3":
        open_kw["concat_characters"] = True  # NC_CHAR becomes text, not one-byte bytes values
    engine = "netcdf4" if source_is_nc else "zstrings"
    groups = xr.open_groups(src, engine=engine, **open_kw)
    from .errors import StringOverflowError, TargetExistsError

    try:
        total = sum(int(v.nbytes) for ds in groups.values() for n, v in ds.variables.items()
                    if n not in ds.indexes)
        bar = _progress(total, args.quiet, dst)
        try:
            counted = _counted(dict(groups), bar)
            mode = "w" if args.overwrite else "w-"
            if fmt == "netcdf4":
                _clamp_chunks(counted)
                write_netcdf4(counted, dst)  # never a half-written file; the old one until done
            elif fmt in ("nczarr", "zarr2"):
                _netcdf_c_codecs(counted, args.compressor, writer.NETCDF_C_CODECS, quiet=args.quiet)
                writer.to_nczarr(counted, dst, mode=mode, format=fmt, maxstrlen=args.maxstrlen,
                                 on_overflow=args.on_overflow, netcdf_c=args.netcdf_c)
            else:
                _write_zarr3(counted, dst, mode=mode, layout=args.layout or "vlen-utf8")
        finally:
            bar.close()
    except TargetExistsError:  # object storage, or created meanwhile: the same words as above
        raise UsageError(_exists_text(dst)) from None
    except StringOverflowError as e:  # the library names its keyword arguments: name the flags
        raise UsageError(_overflow_in_flags(str(e))) from None
    finally:
        for ds in groups.values():
            ds.close()
    if not args.quiet:
        print(f"wrote {dst} ({fmt})", file=sys.stderr)
    return OK


#: what a Zarr store (v2, NCZarr, v3) holds at its root or one level down
_STORE_OBJECTS = (".zgroup", ".zarray", ".zattrs", ".zmetadata", "zarr.json")


def _exists_text(dst: str) -> str:
    """The one wording for a target that exists, whatever the format."""
    return f"DST {dst} exists; pass --overwrite to replace it, or choose another DST."


def _found(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f", ... ({len(names)} in all)" if len(names) > 5 else "")


def _not_a_store(path: Path, fmt: str) -> str | None:
    """What a local target that ``--overwrite`` must not replace holds, or None when it is a store,
    a zip or netCDF file, or empty: ``--overwrite`` replaces what zstrings could have written only."""
    if path.is_dir():
        names = sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir())
        if not names:
            return None
        if any((path / o).exists() for o in _STORE_OBJECTS):
            return None
        if any((path / n.rstrip("/") / o).exists() for n in names if n.endswith("/") for o in _STORE_OBJECTS):
            return None  # an NCZarr store whose root object an interrupted write left out
        return f"a directory that is not a Zarr store (found {_found(names)})"
    if path.is_file():
        import zipfile

        if fmt == "netcdf4" and _is_netcdf_file(str(path)):
            return None
        if fmt != "netcdf4" and zipfile.is_zipfile(path):
            return None
        return f"a file that is not {'a netCDF file' if fmt == 'netcdf4' else 'a zip'} ({path.stat().st_size:,} bytes)"
    return None


def _check_target(dst: str, fmt: str, *, overwrite: bool) -> None:
    """Refuse an existing local target without ``--overwrite`` (one wording for every format), and
    any target that is not something zstrings writes (a directory of other files) even with it."""
    from .store import local_target

    local = local_target(dst) if fmt != "netcdf4" else (Path(dst).expanduser(), False)
    if local is None:  # object storage: the writers refuse an existing store (TargetExistsError)
        return
    path = local[0]
    what = _not_a_store(path, fmt)
    if what is not None:
        raise UsageError(f"DST {dst} is {what}; zstrings does not replace it, even with --overwrite: "
                         "choose another DST.")
    exists = path.is_file() or (path.is_dir() and any(path.iterdir()))
    if exists and not overwrite:
        raise UsageError(_exists_text(dst))


def _overflow_in_flags(message: str) -> str:
    """A StringOverflowError's fix in the command's words (its flags, not the Python keywords)."""
    import re

    fixed = re.sub(r"Pass on_overflow='widen' to use width (\d+), or on_overflow='truncate' to cut them at a "
                   r"character boundary \(with a StringTruncationWarning\), or shorten the values",
                   r"Pass --on-overflow widen (width \1), --on-overflow truncate (cut at a character boundary, "
                   r"with a warning) or --maxstrlen \1.", message)
    return fixed


_COMPRESSORS = {"zlib": {"id": "zlib", "level": 4}, "zstd": {"id": "zstd", "level": 3},
                "bz2": {"id": "bz2", "level": 9}, "none": None}


def _netcdf_c_codecs(groups: dict[str, Any], choice: str | None, readable: frozenset[str], *,
                     quiet: bool) -> None:
    """Codecs for an NCZarr/Zarr v2 target: ``--compressor`` for every variable, else the source's
    own, with what netcdf-c cannot read (vlen filters, gzip, lz4, ...) replaced by zlib."""
    replaced: set[str] = set()
    for ds in groups.values():
        for vname, var in ds.variables.items():
            enc = var.encoding
            if "compressor" not in enc and "compressors" in enc:
                # either vocabulary (v2 numcodecs or v3 codec objects, see zarr_encoding) in v2 terms
                from .zarr_encoding import v2_configs

                comp0, filters0 = v2_configs(enc, where=f"variable {vname!r}")
                enc["compressor"] = comp0[0] if isinstance(comp0, list) else comp0
                enc["filters"] = filters0 if "filters" in enc else enc.get("zstrings_filters")
            enc.pop("compressors", None)
            comp = enc.get("compressor")
            if isinstance(comp, str):
                comp = {"id": comp}
            elif comp is not None and not isinstance(comp, dict):
                comp = comp.get_config() if hasattr(comp, "get_config") else None
            filters = [f if isinstance(f, dict) else f.get_config() for f in enc.get("filters") or []
                       if isinstance(f, dict) or hasattr(f, "get_config")]
            filters = [f for f in filters if f.get("id") not in ("vlen-utf8", "vlen-bytes", "vlen-array")]
            bad = [f["id"] for f in filters if f.get("id") != "shuffle"]
            filters = [f for f in filters if f.get("id") == "shuffle"]
            if choice is not None:
                comp = _COMPRESSORS[choice]
            elif comp is not None and comp.get("id") not in readable:
                bad.append(str(comp.get("id")))
                comp = _COMPRESSORS["zlib"]
            replaced.update(bad)
            for k in ("zlib", "compression", "complevel", "shuffle"):
                enc.pop(k, None)
            enc["compressor"] = comp
            enc["filters"] = filters or None
    if replaced and not quiet:
        print(f"zstrings: note: codecs netcdf-c cannot read ({', '.join(sorted(replaced))}) were replaced "
              "by zlib; choose another with --compressor.", file=sys.stderr)


def _clamp_chunks(groups: dict[str, Any]) -> None:
    """netCDF4 refuses chunks longer than a fixed dimension (a store's chunk may be, e.g. 1024 for a
    dimension of 4 that was unlimited in the source): clamp them to the dimension size."""
    for ds in groups.values():
        unlimited = set(ds.encoding.get("unlimited_dims") or ())
        for var in ds.variables.values():
            chunks = var.encoding.get("chunks")
            if chunks and len(chunks) == var.ndim:
                var.encoding["chunks"] = tuple(
                    c if d in unlimited else max(1, min(int(c), n))
                    for c, d, n in zip(chunks, var.dims, var.shape, strict=True)
                )


def _write_zarr3(groups: dict[str, Any], dst: str, *, mode: str, layout: str) -> None:
    from .writer_v3 import to_zarr_v3

    paths = list(groups)
    for i, path in enumerate(paths):
        ds = groups[path]
        for var in ds.variables.values():
            var.encoding = {k: v for k, v in var.encoding.items() if k in ("chunks", "dtype", "units",
                                                                           "calendar")}
        to_zarr_v3(ds, dst, layout=layout,  # type: ignore[arg-type]
                   mode=mode if i == 0 else "w-",  # type: ignore[arg-type]
                   group=None if path == "/" else path.strip("/"), consolidated=i == len(paths) - 1)


# ---------------------------------------------------------------------------------------------
# check
# ---------------------------------------------------------------------------------------------


@dataclass
class Finding:
    """One thing netcdf-c would fail on or truncate, and how to fix it."""

    where: str
    problem: str
    fix: str


def _suggest_dst(target: str) -> str:
    return f"{_store_name(target)}-nczarr.zarr"


def _row_blocks(meta: Any, budget: int = 32 << 20) -> Iterator[tuple[slice, ...]]:
    """Regions covering the stored array, whole chunks along the first dimension, ~``budget`` bytes."""
    shape = meta.shape
    if not shape:
        yield ()
        return
    row_bytes = max(1, meta.dtype.itemsize if meta.dtype.kind != "O" else 16)
    for n in shape[1:]:
        row_bytes *= max(1, n)
    step = max(meta.chunks[0], (budget // row_bytes) // meta.chunks[0] * meta.chunks[0])
    for start in range(0, shape[0], step):
        yield (slice(start, min(start + step, shape[0])), *(slice(0, n) for n in shape[1:]))


def _utf8_faults(values: Any) -> tuple[int, int, list[str]]:
    """(values ending in a split UTF-8 character, otherwise invalid values, up to 3 examples)."""
    import numpy as np

    split = bad = 0
    examples: list[str] = []
    for raw in np.unique(np.asarray(values).ravel()):
        b = bytes(raw).split(b"\0", 1)[0]
        try:
            b.decode("utf-8")
        except UnicodeDecodeError as e:
            if e.reason == "unexpected end of data" and e.end == len(b):
                split += int(np.count_nonzero(np.asarray(values) == raw))
            else:
                bad += int(np.count_nonzero(np.asarray(values) == raw))
            if len(examples) < 3:
                examples.append(repr(b))
    return split, bad, examples


def _longest_utf8(values: Any) -> tuple[int, int]:
    """(longest UTF-8 length in bytes, number of values longer than netcdf-c's default width)."""
    import numpy as np

    flat = np.asarray(values).ravel()
    if flat.size == 0:
        return 0, 0
    if flat.dtype.kind == "O":
        lengths = np.fromiter(
            (len(v.encode("utf-8", "surrogatepass")) if isinstance(v, str) else len(bytes(v)) for v in flat),
            dtype=np.int64, count=flat.size,
        )
    else:
        enc = np.strings.encode(flat.astype(np.dtypes.StringDType()), "utf-8", "surrogatepass")
        lengths = np.strings.str_len(enc)
    return int(lengths.max()), int(np.count_nonzero(lengths > _NC_DEFAULT_MAXSTRLEN))


#: ``check`` reads arrays up to this size whole; larger ones chunk by chunk
CHECK_WHOLE_BYTES = 32 << 20
#: ``check`` reads at most this many chunks of one array (evenly spread, first and last included)
#: unless ``--full``: a grid of 1e9 chunks is answered in seconds, and says it was sampled
CHECK_SAMPLE_CHUNKS = 2_000
#: a chunk larger than this (decoded) is reported, not read: netcdf-c reads a chunk whole, too
CHECK_MAX_CHUNK_BYTES = 256 << 20


def _check_regions(arr: Any, meta: Any, full: bool, sampled: list[str]) -> Iterator[tuple[slice, ...]]:
    """Regions of ``meta`` for check to read, bounded in memory (one chunk, or ~32 MiB) and, unless
    ``full``, in number (``CHECK_SAMPLE_CHUNKS`` chunks); chunks never written are skipped (they
    read as the fill value). A sample is noted in ``sampled``."""
    import numpy as np

    shape, chunks = tuple(meta.shape), tuple(arr.chunk_shape)
    itemsize = meta.dtype.itemsize if meta.dtype.kind not in "OT" else 16
    if not shape or math.prod(shape) * itemsize <= CHECK_WHOLE_BYTES:
        yield from _row_blocks(meta)
        return
    grid = tuple(-(-n // c) for n, c in zip(shape, chunks, strict=True))
    total = math.prod(grid)
    if full or total <= CHECK_SAMPLE_CHUNKS:
        flat: Any = range(total)
    else:
        flat = np.unique(np.linspace(0, total - 1, CHECK_SAMPLE_CHUNKS).astype(np.int64)).tolist()
        sampled.append(f"{len(flat):,} of {total:,} chunks")
    batch: list[tuple[int, ...]] = []

    def regions(ixs: list[tuple[int, ...]]) -> Iterator[tuple[slice, ...]]:
        present = arr.store.get_many([arr._chunk_key(ix) for ix in ixs])
        for ix, raw in zip(ixs, present, strict=True):
            if raw is not None:
                yield tuple(slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(ix, chunks, shape, strict=True))

    for f in flat:
        batch.append(tuple(int(i) for i in np.unravel_index(f, grid)))
        if len(batch) == 256:
            yield from regions(batch)
            batch = []
    if batch:
        yield from regions(batch)


def _check_array(tree: Any, meta: Any, target: str, netcdf_c_codecs: frozenset[str], *, full_read: bool = False,
                 sampled: list[str] | None = None) -> list[Finding]:
    """Read one array (or, when it is huge, a sample of its chunks: noted in ``sampled``) and
    return what netcdf-c would fail on or truncate."""
    from .reader import ChunkedArray

    where = meta.path
    out: list[Finding] = []
    convert = f"zstrings convert {target} {_suggest_dst(target)}"
    v3 = meta.generation == "zarr-v3"
    kind = meta.string_kind
    if not v3:
        if kind == "unicode":
            out.append(Finding(where, f"{meta.dtype_str} fixed-width UTF-32 strings (as xarray/zarr-python "
                               "write str): netcdf-c refuses to open the whole store ('NetCDF: NCZarr error')",
                               f"{convert}  (NC_STRING |Sn), or write with "
                               "xr_zstrings.prepare_for_zarr(ds).to_zarr(...)"))
        elif kind in ("vlen", "vlen-bytes"):
            out.append(Finding(where, f"|O {kind.replace('vlen', 'vlen-utf8') if kind == 'vlen' else kind} "
                               "variable-length strings (xarray/zarr-python): netcdf-c refuses to open the "
                               "whole store ('NetCDF: NCZarr error')",
                               f"{convert}, or write with xr_zstrings.to_nczarr(ds, ...)"))
        elif meta.dtype.kind == "b":
            out.append(Finding(where, "bool |b1 has no netCDF type: netcdf-c refuses to open the whole store",
                               "store it as int8/uint8 (ds[name].astype('u1')) and rewrite"))
        codec_ids = ([meta.compressor.get("id")] if meta.compressor else []) + [
            f.get("id") for f in meta.filters if f.get("id") not in ("vlen-utf8", "vlen-bytes")]
        unreadable = [str(c) for c in codec_ids if c not in netcdf_c_codecs and c != "shuffle"]
        if unreadable:
            out.append(Finding(where, f"codec {', '.join(unreadable)}: netcdf-c (netCDF4 wheel) cannot decode "
                               "it ('NetCDF: Filter error: undefined filter encountered')",
                               f"{convert} --compressor zstd  (netcdf-c reads zlib, zstd, bz2 or blosc)"))
    arr = ChunkedArray(tree.store, meta, meta.shape)
    itemsize = meta.dtype.itemsize if meta.dtype.kind not in "OT" else 16
    chunk_bytes = math.prod(arr.chunk_shape) * max(itemsize, 1)
    if meta.shape and chunk_bytes > CHECK_MAX_CHUNK_BYTES:
        out.append(Finding(where, f"chunks of {chunk_bytes:,} bytes each ({list(arr.chunk_shape)} x "
                           f"{meta.dtype.str}): too large to check, and netcdf-c reads a chunk whole",
                           f"{convert}  (it writes chunks of ~4 MiB)"))
        return out
    split = bad = longest = over = full = 0
    examples: list[str] = []
    for region in _check_regions(arr, meta, full_read, sampled if sampled is not None else []):
        raw = arr.read(region) if region else arr.read(tuple(slice(0, n) for n in meta.shape))
        if not v3 and kind in ("string", "char"):
            if kind == "char":
                import numpy as np

                raw = np.ascontiguousarray(raw).view(f"S{raw.shape[-1] or 1}")[..., 0] if raw.ndim else raw
            s, b, ex = _utf8_faults(raw)
            split, bad = split + s, bad + b
            examples += ex[: 3 - len(examples)]
            if kind == "string":
                import numpy as np

                n = meta.dtype.itemsize
                full += int(np.count_nonzero(np.strings.str_len(raw) == n))
        elif kind in ("vlen", "unicode") or (v3 and kind == "vlen-bytes"):
            lg, ov = _longest_utf8(raw)
            longest, over = max(longest, lg), over + ov
    if split:
        out.append(Finding(where, f"{split} value(s) end in a split UTF-8 character (cut at a byte, as netcdf-c "
                           f"truncates NC_STRING; e.g. {', '.join(examples)}): netCDF4-python raises "
                           "UnicodeDecodeError reading this variable",
                           "rewrite from the original data with a wider maxstrlen (zstrings convert "
                           "--maxstrlen N, or to_nczarr(..., on_overflow='widen')); engine='zstrings' reads "
                           "it as is (utf8_errors='drop')"))
    if bad:
        out.append(Finding(where, f"{bad} value(s) are not valid UTF-8: netCDF4-python cannot decode them",
                           "rewrite the values as UTF-8 (engine='zstrings', utf8_errors='replace' shows them)"))
    if (kind == "string" and not v3 and full and meta.dtype.itemsize == _NC_DEFAULT_MAXSTRLEN
            and tree.root.nc_properties is not None and "xr_zstrings" not in tree.root.nc_properties):
        out.append(Finding(where, f"{full} value(s) fill netcdf-c's default width of {_NC_DEFAULT_MAXSTRLEN} "
                           "bytes exactly: netcdf-c probably cut them when it wrote the store",
                           "rewrite from the original data with a wider maxstrlen "
                           "(_nczarr_maxstrlen, or zstrings convert --maxstrlen N)"))
    if over:
        out.append(Finding(where, f"{over} value(s) are longer than netcdf-c's default maxstrlen "
                           f"{_NC_DEFAULT_MAXSTRLEN} (longest {longest} bytes): a copy made by netcdf-c "
                           "(nccopy) would cut them at a byte",
                           f"convert with zstrings (the width is the longest value) or pass --maxstrlen "
                           f"{max(longest, _NC_DEFAULT_MAXSTRLEN)}"))
    return out


def _name_findings(tree: Any) -> list[Finding]:
    """Group, variable and dimension names netcdf-c cannot open (the rules the writers apply)."""
    import json

    from .metadata import netcdf_c_name_problem

    mode = "zarr" if tree.root.generation == "zarr-v2" else "nczarr"
    out: list[Finding] = []
    seen: set[tuple[str, str, str]] = set()
    names: list[tuple[str, str, str]] = []  # (group, what, name)
    for path, group in tree.groups.items():
        if path != "/":
            names.append((path.rsplit("/", 1)[0] or "/", "group", path.rsplit("/", 1)[1]))
        names += [(path, "dimension", d) for d in group.dimensions]
    for path, meta in tree.arrays.items():
        parent = path.rsplit("/", 1)[0] or "/"
        names.append((parent, "variable", meta.name))
        names += [(parent, "dimension", str(d)) for d in meta.array_dimensions or ()]
    # netcdf-c's JSON parser keeps \uXXXX escapes as text: a non-ASCII name that a writer escaped
    # (zarr-python and xarray do) comes out as 'u00e9' (or crashes netcdf-c when long)
    raw = b""
    if any("\\u" in json.dumps(n) for _, _, n in names):
        keys = [f"{p.strip('/')}/{o}".lstrip("/") for p in [*tree.groups, *tree.arrays]
                for o in (".zattrs", ".zgroup", ".zarray")]
        raw = b"\0".join(b for b in tree.store.get_many(keys) if b)
    for where, what, name in names:
        rule = netcdf_c_name_problem(name, mode=mode, role=what)
        if rule is None and "\\u" in json.dumps(name) and json.dumps(name)[1:-1].encode() in raw:
            rule = (r"the metadata spells it with \u escapes, which netcdf-c reads as text "
                    f"({json.dumps(name)[1:-1]!r}: the name is not found, a long one crashes it)")
        if rule is not None and (what, where, name) not in seen:
            seen.add((what, where, name))
            out.append(Finding(where, f"{what} name {name!r}: {rule}",
                               "rename it (xr.open_dataset(..., engine='zstrings').rename({old: new})) and "
                               "rewrite with to_nczarr"))
    return out


_LAYOUT_NAMES = {"4.9.0": "netcdf-c 4.9.0's layout (_NCZARR_* keys)",
                 "4.9.1": "netcdf-c 4.9.1's layout (keys in .zgroup/.zarray)",
                 "4.9.4": "netcdf-c 4.10's layout (metadata in .zattrs)"}


def netcdf_c_verdicts(tree: Any, target: str, whole_store: str = "") -> list[tuple[str, bool, str, str]]:
    """Per netcdf-c version (4.9.0, 4.9.1-4.9.3, >= 4.9.4): whether it reads the store, what it cannot
    read or what the fix loses, and the command that fixes it.

    The rules are what tests/test_netcdf_c_versions.py measures with each netcdf-c (and checks this
    function against): which layout each version reads, the scalar forms each accepts, unlimited
    dimensions from 4.9.4 (and 4.9.3's last snapshots) on, no NC_STRING or scalars in 4.9.0.
    ``whole_store`` names a problem that makes every netcdf-c refuse the store (check's findings).
    """
    from .write_plan import layout_of_generation

    root = tree.root
    gen = root.generation
    dst = _suggest_dst(target)
    arrays = list(tree.arrays.values())
    unlimited = sorted({d.name for g in tree.groups.values() for d in g.dimensions.values() if d.unlimited})
    scalars = [a for a in arrays if a.scalar]

    def form(a: Any) -> Mapping[str, Any]:
        info = a.raw_zarray.get("_nczarr_array") if isinstance(a.raw_zarray, Mapping) else None
        return info if isinstance(info, Mapping) else {}

    losses_4_9_0 = []
    if any(a.string_kind == "string" or a.string_kind in ("unicode", "vlen") for a in arrays):
        losses_4_9_0.append("strings become NC_CHAR")
    if scalars:
        losses_4_9_0.append("scalars become 1-element arrays")
    if unlimited:
        losses_4_9_0.append(f"unlimited {unlimited} become fixed")
    fix_4_9_0 = f"zstrings convert {target} {dst} --netcdf-c 4.9.0" + (
        f"  (then: {', '.join(losses_4_9_0)})" if losses_4_9_0 else "")
    fix_4_9_1 = f"zstrings convert {target} {dst} --netcdf-c 4.9.1" + (
        f"  (then: unlimited {unlimited} become fixed)" if unlimited else "")
    fix_default = f"zstrings convert {target} {dst}"
    if gen == "zarr-v3" or whole_store:
        why = "Zarr v3: 'NetCDF: Unknown file format'" if gen == "zarr-v3" else whole_store
        return [("4.9.0", False, why, fix_4_9_0), ("4.9.1-4.9.3", False, why, fix_4_9_1),
                (">= 4.9.4", False, why, fix_default)]
    if not root.is_nczarr:
        pure = "with #mode=zarr (no NCZarr groups or shared dimensions)"
        first = (("4.9.0", False, "NC_STRING in pure Zarr v2: the process aborts", fix_4_9_0)
                 if any(a.string_kind == "string" for a in arrays) else ("4.9.0", True, pure, ""))
        return [first, ("4.9.1-4.9.3", True, pure, ""), (">= 4.9.4", True, pure, "")]
    layout = layout_of_generation(gen)
    if layout is None:  # NCZarr 1.0
        return [("4.9.0", True, "", ""), ("4.9.1-4.9.3", False, "NCZarr 1.0: 'NetCDF: NCZarr error'", fix_4_9_1),
                (">= 4.9.4", False, "NCZarr 1.0: 'NetCDF: NCZarr error'", fix_default)]
    out: list[tuple[str, bool, str, str]] = []
    if layout != "4.9.0":
        out.append(("4.9.0", False, f"{_LAYOUT_NAMES[layout]}: the process aborts", fix_4_9_0))
    elif scalars or unlimited or any(a.string_kind == "string" for a in arrays):
        out.append(("4.9.0", False, "scalars, unlimited dimensions or NC_STRING: the process aborts", fix_4_9_0))
    else:
        out.append(("4.9.0", True, "", ""))
    if layout != "4.9.1":
        out.append(("4.9.1-4.9.3", False, f"{_LAYOUT_NAMES[layout]}: 'NetCDF: NCZarr error'", fix_4_9_1))
    elif unlimited:
        out.append(("4.9.1-4.9.3", False, f"unlimited dimensions {unlimited}: segmentation fault "
                    "(4.9.3's last development snapshots read them)", fix_4_9_1))
    elif any(form(a).get("storage") != "scalar" for a in scalars):
        out.append(("4.9.1-4.9.3", False, "scalars without \"storage\": \"scalar\": segmentation fault",
                    fix_default))
    else:
        out.append(("4.9.1-4.9.3", True, "", ""))
    if layout == "4.9.0":
        out.append((">= 4.9.4", False, f"{_LAYOUT_NAMES[layout]}: 'NetCDF: NCZarr error'", fix_default))
    elif layout == "4.9.1" and any(not form(a).get("scalar") for a in scalars):
        out.append((">= 4.9.4", False, "scalars without \"scalar\": 1: segmentation fault", fix_default))
    else:
        out.append((">= 4.9.4", True, "", ""))
    return out


def _unread_finding(tree: Any, path: str, why: str) -> Finding:
    """An array the reader leaves out of its Dataset (a data type or codec xr_zstrings does not
    decode): why, and whether engine='zstrings' still reads it through zarr-python."""
    try:
        import numpy as np
        import zarr

        arr = zarr.open_array(tree.store.store, path=tree.store.full_key(path.strip("/")), mode="r")
        np.dtype(arr.dtype)  # zarr-python's own extension types have no numpy dtype: not read
        how = "engine='zstrings' reads it through zarr-python"
    except Exception as e:  # noqa: BLE001 - zarr-python cannot either: say so
        how = f"zarr-python cannot read it either ({type(e).__name__}), so engine='zstrings' leaves it out"
    return Finding(path, f"{_one_line(why).rstrip('.')}. So {how}. Not checked for netcdf-c",
                   "rewrite it with a netCDF data type and a codec netcdf-c reads (zlib, zstd, bz2, blosc)")


def _cmd_check(args: argparse.Namespace) -> int:
    from .errors import ZStringsError
    from .writer import NETCDF_C_CODECS

    target = args.target
    tree = _open_tree(target)
    findings: list[Finding] = []
    if tree.root.generation == "zarr-v3":
        findings.append(Finding("/", "Zarr v3 store: netcdf-c 4.10 does not open it ('NetCDF: Unknown file "
                                "format')", f"zstrings convert {target} {_suggest_dst(target)}"))
    else:
        findings += _name_findings(tree)
    print(f"check {tree.store.display}: {_describe_layout(tree)}")
    for f in findings:
        print(f"PROBLEM {f.where}: {f.problem}")
        print(f"    fix: {f.fix}")
    n_sampled = 0
    for path in sorted(tree.arrays):
        meta = tree.arrays[path]
        sampled: list[str] = []
        try:
            found = _check_array(tree, meta, target, NETCDF_C_CODECS, full_read=args.full, sampled=sampled)
        except ZStringsError as e:
            found = [Finding(path, f"cannot be read: {_one_line(e)}", "rewrite the variable from its source")]
        findings += found
        n_sampled += bool(sampled)
        note = f"  (sampled: read {sampled[0]}; --full reads all)" if sampled else ""
        print(f"{'PROBLEM' if found else 'ok':8}{path}{note}")
        for f in found:
            print(f"    {f.problem}")
            print(f"    fix: {f.fix}")
    for path in sorted(tree.unreadable):  # left out of the Dataset (or read through zarr-python)
        f = _unread_finding(tree, path, tree.unreadable[path])
        findings.append(f)
        print(f"{'PROBLEM':8}{path}  (not read: xr_zstrings does not decode it)")
        print(f"    {f.problem}")
        print(f"    fix: {f.fix}")
    print("netcdf-c versions (what the wheels' netcdf-c measured; compressed variables also need the "
          "netcdf-c build's filter plugins):")
    whole = next((f"{f.where} {f.problem.split(': ', 1)[0]}: netcdf-c refuses the whole store" for f in findings
                  if "whole store" in f.problem), "")
    current_reads = True
    for version, reads, note, fix in netcdf_c_verdicts(tree, target, whole):
        print(f"  {version:12}{'reads' if reads else 'FAILS'}{': ' + note if note else ''}")
        if not reads:
            print(f"  {'':12}fix: {fix}")
        if version == ">= 4.9.4":
            current_reads = reads
    n = len(tree.arrays)
    if tree.unreadable:
        n_unread = len(tree.unreadable)
        print(f"{n} variable(s) read, {n_unread} not read (xr_zstrings does not decode them), "
              f"{len(findings)} problem(s) for netcdf-c.")
        return PROBLEMS
    sample_note = (f" ({n_sampled} variable(s) checked on a sample of their chunks; --full reads every chunk)"
                   if n_sampled else "")
    if findings:
        print(f"{n} variable(s) read, {len(findings)} problem(s) for netcdf-c.{sample_note}")
        return PROBLEMS
    if not current_reads:  # e.g. netcdf-c 4.9.0's layout or NCZarr 1.0: only older versions read it
        print(f"{n} variable(s) read, no problems in the data, but netcdf-c 4.10 does not read this store's "
              f"layout (which versions do, and the fix: above).{sample_note}")
        return PROBLEMS
    if n_sampled:
        print(f"{n} variable(s) read, no problems in what was read: netcdf-c reads this store as far as "
              f"checked.{sample_note}")
        return OK
    print(f"{n} variable(s) read, no problems: netcdf-c 4.10 reads this store as it is (older "
          "versions: above).")
    return OK


# ---------------------------------------------------------------------------------------------
# sample / show (the original behaviour)
# ---------------------------------------------------------------------------------------------


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
    from .sample import sample_path

    path = sample_path()
    print(f"# built-in sample: {path}")
    return _show(str(path), None)


def _cmd_show(args: argparse.Namespace) -> int:
    return _show(args.target, args.group)


# ---------------------------------------------------------------------------------------------
# The parser and the entry point
# ---------------------------------------------------------------------------------------------

_TARGET_HELP = ("a directory, .zip, file:///abs/path#mode=nczarr,file URL, or a remote URL "
                "(s3://..., with fsspec)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zstrings",
        description="String data in NCZarr / Zarr v2 / v3 stores (xr_zstrings). Without a command, "
                    "shows the built-in sample store.",
        epilog="Exit codes: 0 ok, 1 'check' found problems, 2 usage or input error.",
    )
    parser.add_argument("--traceback", action="store_true", help="show the full traceback on errors")
    parser.add_argument("--version", action="store_true",
                        help="print the versions of xr_zstrings and its stack, and whether the "
                             "compiled kernels are in use, then exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("sample", help="show the built-in sample NCZarr store (the default)",
                       description="Open the bundled NCZarr sample with engine='zstrings' and print it.")
    p.set_defaults(func=_cmd_sample)

    p = sub.add_parser("show", help="open a store with engine='zstrings' and print it with xarray",
                       description="Open a store with engine='zstrings' and print the DataTree (or one group).")
    p.add_argument("target", metavar="PATH_OR_URL", help=_TARGET_HELP)
    p.add_argument("--group", "-g", default=None, help="print only this group as a Dataset")
    p.set_defaults(func=_cmd_show)

    p = sub.add_parser("info", help="a header like 'ncdump -h' and the detected layout",
                       description="Print groups, dimensions (UNLIMITED ones too), variables with their "
                                   "netCDF types and storage layout, attributes, and the store's layout "
                                   "(NCZarr generation, pure Zarr v2 or v3). Reads metadata only.")
    p.add_argument("target", metavar="PATH_OR_URL", help=_TARGET_HELP)
    p.set_defaults(func=_cmd_info)

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
    p.add_argument("--layout", choices=("vlen-utf8", "zarrs.vlen", "arrow", "arrow-large"), default=None,
                   help="Zarr v3 string layout for --format zarr3 (default vlen-utf8, which zarr-python reads)")
    p.add_argument("--compressor", choices=tuple(_COMPRESSORS), default=None,
                   help="compressor for every variable of an nczarr/zarr2 target (default: the source's "
                        "own, codecs netcdf-c cannot read replaced by zlib)")
    p.add_argument("--netcdf-c", dest="netcdf_c", metavar="VERSION", default=None,
                   help="the oldest netcdf-c that must read DST (e.g. 4.9.0 for Debian 12, 4.9.2 for Ubuntu "
                        "24.04, 4.10); default: the layout every netcdf-c from 4.9.1 to 4.10 reads")
    p.add_argument("--overwrite", action="store_true", help="replace DST if it exists")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar and no summary line")
    p.set_defaults(func=_cmd_convert)

    p = sub.add_parser("check", help="report what netcdf-c would fail on or truncate",
                       description="Read every variable and report what netcdf-c would fail on or "
                                   "truncate (xarray-written <U/vlen strings, Zarr v3, codecs it lacks, "
                                   "split UTF-8, strings longer than maxstrlen) and how to fix it, then "
                                   "whether netcdf-c 4.9.0, 4.9.1-4.9.3 and >= 4.9.4 read the store and the "
                                   "command that fixes it for each. Exit code 1 when problems are found.")
    p.add_argument("target", metavar="PATH_OR_URL", help=_TARGET_HELP)
    p.add_argument("--full", action="store_true",
                   help=f"read every chunk (default: at most {CHECK_SAMPLE_CHUNKS:,} chunks of a variable, "
                        "evenly spread, and say so)")
    p.set_defaults(func=_cmd_check)
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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``zstrings``; returns the process exit code (0 ok, 1 problems, 2 errors)."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help (0) and usage errors (2): return, so callers get an int
        return int(e.code or 0) if not isinstance(e.code, str) else USAGE
    if args.version:
        from .versions import show_versions

        show_versions()
        return 0
    func: Callable[[argparse.Namespace], int] = getattr(args, "func", _cmd_sample)

    from .errors import ZStringsError

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
            raise
        print(f"zstrings: error: {_one_line(e)}", file=sys.stderr)
        return USAGE
    except MemoryError as e:
        if args.traceback:
            raise
        print(f"zstrings: error: out of memory ({_one_line(e) or 'MemoryError'}): the store's metadata claims "
              "more data than this machine holds; select less (dump -v NAME --limit N).", file=sys.stderr)
        return USAGE
    except KeyboardInterrupt:  # pragma: no cover
        print("zstrings: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
