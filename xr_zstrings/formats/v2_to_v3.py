"""Zarr v2 / NCZarr metadata as Zarr v3 ``zarr.json`` (pure: no I/O, no xarray/zarr).

What ``xr_zstrings.migrate`` writes for each array and group, so that zarr-python, xarray's
engine="zarr" and engine="zstrings" read the same values from the v2 chunk bytes unchanged:

==========================  ==========================================================  ==========
v2 ``dtype`` (string kind)  v3 ``data_type`` and array->bytes codec                      attribute
==========================  ==========================================================  ==========
numbers, ``|b1``            ``int8`` ... ``float64``, ``bool``; ``bytes`` (its endian)
``|Sn`` NC_STRING (text)    ``null_terminated_bytes`` (``length_bytes`` n); ``bytes``     ``_Encoding``
``|Sn`` bytes (pure Zarr)   ``null_terminated_bytes``; ``bytes``
``>S1`` / old ``<U1``       ``xr_zstrings.nc_char`` (NC_CHAR: one byte); ``bytes``        ``_Encoding``
NC_CHAR
``<Un`` / ``>Un``           ``fixed_length_utf32`` (4n); ``bytes`` (its endian)
``|O`` + vlen-utf8          ``string``; ``vlen-utf8``
``|O`` + vlen-bytes         ``variable_length_bytes``; ``vlen-bytes``
==========================  ==========================================================  ==========

``_Encoding: utf-8`` is added where engine="zstrings" decodes text the store does not declare
(NC_STRING; NC_CHAR whose characters it joins), so engine="zarr" decodes the same text. Order ``F``
becomes a ``transpose`` codec; the filters and compressor become the v3 codecs the caller
(``write.migrate``, through ``codecs.encoding``) finds for them. The fill value is written in the
v3 form of the data type (a v2 ``null`` becomes the type's zero); CF's ``_FillValue`` attribute in
xarray's v3 encoding (base64 of a float64 for floats), which only numeric types have in xarray's
v3 reader (a string ``_FillValue`` fails its open: ``write.migrate`` writes missing text as CF's
``missing_value``, which xarray masks). NCZarr's typed attributes keep their netCDF types in ``_nczarr_attr`` (as in v2's
``.zattrs``), which engine="zstrings" applies and xarray hides (it drops ``_nc*`` attributes).
"""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import UnsupportedError
from .nczarr import ArrayMetaV2
from .zarr3 import NC_CHAR_DATA_TYPE

__all__ = ["data_type_json", "fill_value_json", "serializer_json", "v3_attributes", "xarray_fill_attr"]

_NUMERIC = {"b": "bool", "i": "int", "u": "uint", "f": "float"}


def data_type_json(meta: ArrayMetaV2) -> Any:
    """The v3 ``data_type`` of a v2 array (the table above)."""
    kind, dt = meta.string_kind, meta.dtype
    if kind == "string":
        return {"name": "null_terminated_bytes", "configuration": {"length_bytes": dt.itemsize}}
    if kind == "char":
        return NC_CHAR_DATA_TYPE
    if kind == "unicode":
        return {"name": "fixed_length_utf32", "configuration": {"length_bytes": dt.itemsize}}
    if kind == "vlen":
        return "string"
    if kind == "vlen-bytes":
        return "variable_length_bytes"
    if dt.kind not in _NUMERIC:
        raise UnsupportedError(f"{meta.path}: dtype {meta.dtype_str!r} has no Zarr v3 data type here")
    return "bool" if dt.kind == "b" else f"{_NUMERIC[dt.kind]}{dt.itemsize * 8}"


def _endian(dt: np.dtype) -> str | None:
    if dt.itemsize <= 1 or dt.kind in "SO" or dt.byteorder == "|":
        return None
    little = dt.byteorder == "<" or (dt.byteorder == "=" and np.little_endian)
    return "little" if little else "big"


def serializer_json(meta: ArrayMetaV2) -> dict[str, Any]:
    """The array->bytes codec that reads the v2 chunk bytes (after the v2 filters are undone)."""
    if meta.string_kind == "vlen":
        return {"name": "vlen-utf8", "configuration": {}}
    if meta.string_kind == "vlen-bytes":
        return {"name": "vlen-bytes", "configuration": {}}
    endian = _endian(meta.dtype) if meta.string_kind != "char" else None
    return {"name": "bytes", "configuration": {"endian": endian}} if endian else {"name": "bytes"}


def fill_value_json(meta: ArrayMetaV2) -> Any:
    """The v3 ``fill_value`` (JSON) of a v2 array; a v2 ``null`` (no fill) becomes the type's zero."""
    fill, kind, dt = meta.fill_value, meta.string_kind, meta.dtype
    if kind in ("string", "vlen-bytes"):
        raw = b"" if fill is None else bytes(fill) if not isinstance(fill, str) else fill.encode("utf-8")
        return base64.standard_b64encode(raw).decode("ascii")
    if kind == "char":
        raw = b"" if fill is None else bytes(fill).rstrip(b"\0")
        return raw[:1].decode("latin-1")  # NC_CHAR_DATA_TYPE's fill: the byte as one character
    if kind in ("unicode", "vlen"):
        return "" if fill is None else str(fill)
    if fill is None:
        return False if dt.kind == "b" else 0
    if dt.kind == "b":
        return bool(fill)
    if dt.kind in "iu":
        return int(fill)
    value = float(fill)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def xarray_fill_attr(value: Any, dtype: np.dtype) -> Any:
    """A CF ``_FillValue`` in xarray's Zarr v3 encoding (``FillValueCoder``), for numeric types:
    base64 of a little-endian float64 for floats, a number for integers, a bool for bools."""
    if isinstance(value, np.ndarray):
        value = value.reshape(-1)[0]
    if dtype.kind == "f":
        return base64.standard_b64encode(struct.pack("<d", float(value))).decode("ascii")
    if dtype.kind == "b":
        return bool(value)
    return int(value)


def _plain(value: Any) -> Any:
    """An attribute value as plain JSON (numpy values as Python numbers and lists; NaN kept)."""
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()] if value.ndim else _plain(value[()])
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def v3_attributes(attrs: Mapping[str, Any], types: Mapping[str, str]) -> dict[str, Any]:
    """The attributes of a group or array as v3 ``attributes``: the values as plain JSON, and the
    netCDF types of typed (NCZarr) ones in ``_nczarr_attr`` (``{"types": {name: dtype}}``)."""
    out = {str(k): _plain(v) for k, v in attrs.items()}
    kept = {k: t for k, t in types.items() if k in out and k != "_FillValue"}
    if kept:
        out["_nczarr_attr"] = {"types": kept}
    return out
