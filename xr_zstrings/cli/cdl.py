"""CDL as ncdump writes it, in one place for ``info`` and ``dump``: types, attribute and data
values (escapes, typed literals, shortest exact floats), and the nested header of a tree.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from .common import _one_line

_CDL_TYPES = {
    "i1": "byte", "u1": "ubyte", "i2": "short", "u2": "ushort", "i4": "int", "u4": "uint",
    "i8": "int64", "u8": "uint64", "f4": "float", "f8": "double",
}


_CDL_SUFFIX = {"i1": "b", "u1": "UB", "i2": "s", "u2": "US", "i4": "", "u4": "U", "i8": "LL", "u8": "ULL"}


def _resolve_dims(tree: Any, meta: Any) -> list[Any]:
    """An array's dimensions; a broken reference is shown, not fatal (``check`` reports it)."""
    from ..formats.nczarr import Dimension
    from ..read.variables import resolve_dims

    try:
        return resolve_dims(tree, meta)
    except Exception:  # noqa: BLE001 - info shows what it can
        refs = meta.dimension_references or [n for n in meta.dimension_names or () if n is not None]
        names = [r.rsplit("/", 1)[-1] for r in refs] or [f"?{i}" for i in range(len(meta.shape))]
        return [Dimension(n, s) for n, s in zip(names, meta.shape, strict=False)]


def _v3_layout(tree: Any, meta: Any) -> str | None:
    from ..read.chunked import open_chunked

    try:
        return open_chunked(tree.store, meta, meta.shape).layout
    except Exception:  # noqa: BLE001 - an unreadable chain is reported by check
        return None


def _type_and_note(tree: Any, meta: Any) -> tuple[str, str]:
    """(CDL type name, storage note) of one array."""
    kind = meta.string_kind
    v3 = meta.zarr_format == 3
    if v3:
        if kind in ("vlen", "vlen-bytes"):
            layout = _v3_layout(tree, meta) or "unknown layout"
            cdl = "string" if kind == "vlen" else "opaque"
            return cdl, f"zarr v3 {meta.data_type}, layout {layout}"
        if kind == "unicode":
            return "string", f"zarr v3 {meta.data_type} ({meta.dtype.str})"
        if kind == "string":
            return "string", f"zarr v3 {meta.data_type}, {meta.dtype.itemsize} bytes"
        if kind == "char":  # NC_CHAR as a Zarr v3 data type (xr_zstrings.nc_char): ncdump's char
            return "char", f"NC_CHAR, zarr v3 {meta.data_type}"
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
    v2_cdl = _CDL_TYPES.get(meta.dtype.str[1:])
    if v2_cdl is None:
        return str(meta.dtype), f"{meta.dtype_str} (no netCDF type)"
    return v2_cdl, meta.dtype_str


def _codec_note(meta: Any) -> str:
    if meta.zarr_format == 3:
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
        mantissa = mantissa.removesuffix(".0")
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
    if meta.zarr_format == 3:
        from ..formats.zarr3 import decode_xarray_fill_attr

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


def _fill_mask(arr: Any, fill: Any) -> Any:
    """Where the numbers of ``arr`` equal ``fill`` (a stored ``_FillValue``; NaN matches NaN), or
    None when none does or they cannot be compared."""
    import numpy as np

    if fill is None or arr.dtype.kind not in "fiu":
        return None
    flat = arr.ravel()
    try:
        is_fill = np.isnan(flat) if np.isnan(fill) else flat == np.asarray(fill, dtype=arr.dtype)
    except (TypeError, ValueError, OverflowError):
        return None
    return is_fill if is_fill.any() else None


def _fmt_times(flat: Any, decoded: bool) -> list[str]:
    import numpy as np

    nat = np.isnat(flat)
    text = np.datetime_as_string(flat, unit="auto") if flat.dtype.kind == "M" else flat.astype(str)
    return ["_" if m else _cdl_text(str(t)) for t, m in zip(text, nat, strict=True)]


def _fmt_floats(flat: Any, decoded: bool) -> list[str]:
    import numpy as np

    single = flat.dtype.itemsize <= 4
    return ["_" if decoded and np.isnan(x) else _cdl_float(float(x), single=single, attribute=False) for x in flat]


def _fmt_objects(flat: Any, decoded: bool) -> list[str]:
    return ["_" if x is None else _cdl_scalar(x, attribute=False) for x in flat]


#: numpy dtype kind -> how ``_fmt_values`` writes the flat values (``flat``, ``decoded``); others: ``_fmt_objects``
_VALUE_FORMATS: dict[str, Callable[[Any, bool], list[str]]] = {
    "M": _fmt_times,
    "m": _fmt_times,
    "T": lambda flat, decoded: [_cdl_text(str(s)) for s in flat],
    "U": lambda flat, decoded: [_cdl_text(str(s)) for s in flat],
    "S": lambda flat, decoded: [_cdl_bytes(s) for s in flat],
    "f": _fmt_floats,
    "i": lambda flat, decoded: [str(int(x)) for x in flat],
    "u": lambda flat, decoded: [str(int(x)) for x in flat],
    "b": lambda flat, decoded: ["true" if x else "false" for x in flat],
}


def _fmt_values(values: Any, *, decoded: bool = True, fill: Any = None) -> list[str]:
    """Each element as ncdump writes data: strings quoted, missing values (NaN and NaT once decoded,
    None, and values equal to ``fill``, the stored ``_FillValue``) as ``_``, floats in their
    shortest exact form, times in ISO form."""
    import numpy as np

    arr = np.asarray(values)
    is_fill = _fill_mask(arr, fill)
    if is_fill is not None:
        plain = _fmt_values(values, decoded=decoded)
        return ["_" if m else t for t, m in zip(plain, is_fill.tolist(), strict=True)]
    return _VALUE_FORMATS.get(arr.dtype.kind, _fmt_objects)(arr.ravel(), decoded)
