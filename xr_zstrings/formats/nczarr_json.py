"""The JSON of an NCZarr 2 store as netcdf-c writes it: values, typed attributes (Appendix G).

The write side of ``metadata``: ``dumps`` serialises like netcdf-c (``{"a": 1, "b": [1,2]}``,
non-finite floats as strings) and ``attrs_json`` types each attribute as netcdf-c does.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import ZStringsError
from .nczarr import NC_DEFAULT_MAXSTRLEN, unparse_json

# ---------------------------------------------------------------------------------------------
# JSON as netcdf-c writes it
# ---------------------------------------------------------------------------------------------


def json_value(value: Any) -> Any:
    """A JSON-ready value: numpy scalars/arrays to Python, non-finite floats to netcdf-c's strings."""
    if isinstance(value, np.ndarray):
        return [json_value(v) for v in value.tolist()] if value.ndim else json_value(value[()])
    if isinstance(value, np.floating):
        if value.dtype == np.float32 and np.isfinite(value):
            return float(str(value))  # the shortest text that reads back as the same float32
        value = float(value)
    elif isinstance(value, np.integer | np.bool_):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, Mapping):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    return value


def dumps(obj: Any) -> bytes:
    """Serialise metadata like netcdf-c: ``{"a": 1, "b": [1,2]}``, UTF-8, no ASCII escaping."""
    return unparse_json(json_value(obj)).encode("utf-8")


# ---------------------------------------------------------------------------------------------
# Attributes (Appendix G)
# ---------------------------------------------------------------------------------------------


def _attr_entry(name: str, value: Any, *, where: str) -> tuple[Any, str]:
    """The JSON value and NCZarr dtype of one attribute, as netcdf-c types it.

    Text is stored as a JSON string (netcdf-c parses JSON-looking text, so that ``"17"`` reads back as
    ``"1"``: we keep text as text), except a JSON object written exactly as netcdf-c un-parses it,
    which is stored parsed (Appendix G) so both readers return the same text.
    """
    if isinstance(value, bytes | np.bytes_):
        value = bytes(value).decode("utf-8", "surrogateescape")
    if isinstance(value, str | np.str_):
        return _text_attr(str(value)), ">S1"
    if isinstance(value, Mapping):
        return json_value(value), ">S1"  # Appendix G: JSON-valued text; reads back as its text
    if isinstance(value, bool | np.bool_):
        return int(value), "<i1"
    if isinstance(value, int) and not isinstance(value, bool):
        return value, _int_attr_type(name, value, where=where)
    if isinstance(value, float):
        return json_value(value), "<f8"
    if isinstance(value, np.generic) and value.dtype.kind in "iuf":
        return json_value(value), "<" + value.dtype.str[1:]
    entry = _array_attr(value) if isinstance(value, list | tuple | np.ndarray) else None
    if entry is not None:
        return entry
    raise ZStringsError(
        f"Cannot write attribute {name!r} of {where}: got {value!r} of type {type(value).__name__}. "
        "netCDF attributes hold text, numbers, lists of numbers or lists of strings (or a dict, stored "
        "as JSON text); convert the value or drop the attribute."
    )


def _text_attr(value: str) -> Any:
    """A text attribute's JSON value: the text, or the parsed object when it is one written exactly
    as netcdf-c un-parses it."""
    if value.startswith("{"):
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and unparse_json(parsed) == value:
            return parsed
    return value


def _int_attr_type(name: str, value: int, *, where: str) -> str:
    """The NCZarr dtype of a Python integer attribute: int64, else uint64, else an error."""
    if -(2**63) <= value < 2**63:
        return "<i8"
    if 0 <= value < 2**64:
        return "<u8"
    raise ZStringsError(
        f"Cannot write attribute {name!r} of {where}: {value} does not fit netCDF's 64-bit integers; "
        "store it as a float or as text."
    )


def _array_attr(value: Any) -> tuple[Any, str] | None:
    """(JSON value, NCZarr dtype) of a list/tuple/array attribute of strings or numbers; None for
    any other element type."""
    arr = np.asarray(value)
    if arr.dtype.kind == "O" and all(isinstance(v, str) for v in arr.reshape(-1)):
        arr = arr.astype(str)
    if arr.dtype.kind in "UT":
        return [str(v) for v in arr.reshape(-1).tolist()], f"|S{NC_DEFAULT_MAXSTRLEN}"
    if arr.dtype.kind == "S":
        return [bytes(v).decode("utf-8") for v in arr.reshape(-1).tolist()], f"|S{NC_DEFAULT_MAXSTRLEN}"
    if arr.dtype.kind == "b":
        arr = arr.astype("i1")
    if arr.dtype.kind in "iuf":
        return json_value(arr.reshape(-1)), "<" + arr.dtype.str[1:]
    return None


def attrs_json(attrs: Mapping[str, Any], *, where: str, typed: bool) -> tuple[dict[str, Any], dict[str, str]]:
    out: dict[str, Any] = {}
    types: dict[str, str] = {}
    for k, v in attrs.items():
        key = str(k)
        value, dtype = _attr_entry(key, v, where=where)
        if not typed and isinstance(v, Mapping):
            value = json_value(v)
        out[key] = value
        types[key] = dtype
    return out, types
