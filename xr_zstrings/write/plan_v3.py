"""The Zarr v3 write plan: what each variable of a group becomes (its ``zarr.json`` and the values
its chunks hold), beside ``plan`` (NCZarr / Zarr v2).

Numbers, times and booleans are CF-encoded by xarray's public encoders
(``xarray.conventions.encode_cf_variable`` with ``ZARR_CODERS``, as xarray's zarr backend does), and
every ``zarr.json`` is made by zarr-python itself (``zarr.create_array`` / ``zarr.create_group`` into
an in-memory store: no chunk written), so dimension names, attributes, fill values, chunk grids and
default codecs are exactly what ``ds.to_zarr(zarr_format=3)`` writes. String and bytes variables
get the chosen layout's ``data_type`` and ``codecs`` (``codecs.layouts``), and missing values either
the variable's string ``_FillValue`` or zarrs' nullable ``optional`` type.
"""

from __future__ import annotations

import base64
import json
import struct
import warnings
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr
from xarray import conventions

from ..codecs.encoding import format_encoding
from ..codecs.layouts import layout_named
from ..errors import MissingStringsWarning, ZStringsError, user_stacklevel
from ..text.kernels import kernels
from ..text.vlen import Kind, VlenChunk, values_to_vlen
from .plan import _is_dask, _missing, string_fill, text_kind

__all__ = ["ArrayPlan", "LayoutOptions", "TextValues", "group_json", "plan_group", "text_meta"]

# encodings of non-string variables that mean the same in Zarr v3 (xarray's own keys)
_V3_KEEP = frozenset({"chunks", "shards", "compressors", "dtype", "_FillValue", "units",
                      "calendar", "scale_factor", "add_offset", "coordinates"})
# the encodings xarray's zarr backend passes on to zarr-python (``extract_zarr_variable_encoding``)
_ZARR_KEYS = ("shards", "compressors", "filters", "serializer", "chunk_key_encoding")


@dataclass(frozen=True)
class LayoutOptions:
    """``to_zarr_v3``'s string-layout arguments (``codecs.layouts``)."""

    layout: str
    index_data_type: str = "uint32"
    index_location: str = "end"
    index_codecs: Sequence[Mapping[str, Any]] | None = None
    data_codecs: Sequence[Mapping[str, Any]] | None = None
    compressors: Sequence[Mapping[str, Any]] | None = None

    def metadata(self, kind: Kind) -> tuple[Any, list[dict[str, Any]]]:
        """The ``data_type`` and ``codecs`` the layout writes: its array->bytes codec, then the compressors."""
        opts = {"index_data_type": self.index_data_type, "index_location": self.index_location,
                "index_codecs": self.index_codecs, "data_codecs": self.data_codecs}
        data_type, codecs = layout_named(self.layout).metadata(kind, opts)
        return data_type, [*codecs, *map(dict, self.compressors or ())]

    def keeps_default_compressors(self, kind: Kind) -> bool:
        """zarr-python's own layout without compressors asked: its default ones (what its vlen-utf8 arrays get)."""
        return layout_named(self.layout).zarr_python and self.compressors is None and kind == "str"


@dataclass
class TextValues:
    """A string/bytes variable's values: in memory (``values`` checked and ``packed`` before the
    target is touched) or dask-backed (``lazy``: written block by block, checked per block)."""

    kind: Kind
    values: np.ndarray | None = None
    packed: VlenChunk | None = None
    missing: tuple[str, Any] | None = None  # ("fill", the string fill) or ("optional", count)
    lazy: Any = None  # the dask array
    fill: Any = None  # dask: the string _FillValue missing values become (None: they are refused)


@dataclass
class ArrayPlan:
    """One array to write: its key (from the store's root, without a prefix), its ``zarr.json``
    and what its chunks hold: CF-encoded numbers (``data``: numpy or dask) or ``text``."""

    key: str
    name: Hashable
    meta: dict[str, Any]
    data: Any = None
    text: TextValues | None = None
    raw: bytes | None = field(default=None, repr=False)  # zarr-python's own bytes of ``meta`` (numbers)

    def meta_bytes(self) -> bytes:
        return self.raw if self.raw is not None else json.dumps(self.meta, indent=2).encode()


# ---------------------------------------------------------------------------------------------
# zarr.json as zarr-python writes it
# ---------------------------------------------------------------------------------------------


class _Metadata:
    """zarr-python writing metadata only, into a dict (``MemoryStore``): each node's ``zarr.json``."""

    def __init__(self) -> None:
        from zarr.storage import MemoryStore

        self.objects: dict[str, Any] = {}
        self.store = MemoryStore(self.objects)

    def array(self, key: str, **create: Any) -> bytes:
        import zarr

        zarr.create_array(self.store, name=key, zarr_format=3, overwrite=True, **create)
        return self._taken(f"{key}/zarr.json")

    def group(self, key: str, attrs: Mapping[str, Any]) -> bytes:
        import zarr

        zarr.create_group(self.store, path=key, zarr_format=3, overwrite=True, attributes=dict(attrs))
        return self._taken(f"{key}/zarr.json" if key else "zarr.json")

    def _taken(self, key: str) -> bytes:
        """``key``'s bytes, the store emptied: zarr-python's ``overwrite`` lists the whole store for
        each node, so nodes held here would make planning n variables cost n^2."""
        out = bytes(self.objects[key].to_bytes())
        self.objects.clear()
        return out


def _attr_value(value: Any) -> Any:
    """An attribute as xarray's zarr backend hands it to zarr-python (arrays as lists, numpy scalars as Python)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _fill_attr(value: Any, dtype: np.dtype, name: Hashable) -> Any:
    """A ``_FillValue`` attribute as xarray writes it into Zarr v3 (base64 of the little-endian
    double for floats, as its ``FillValueCoder``)."""
    if dtype.kind == "S":
        return base64.standard_b64encode(bytes(value)).decode()
    if dtype.kind == "b":
        return bool(value)
    if dtype.kind in "iu":
        return int(value)
    if dtype.kind == "f":
        return base64.standard_b64encode(struct.pack("<d", float(value))).decode()
    if dtype.kind == "c":
        return [base64.standard_b64encode(struct.pack("<d", float(x))).decode() for x in (value.real, value.imag)]
    if dtype.kind == "U":
        return str(value)
    raise ZStringsError(f"Cannot write variable {name!r}: a _FillValue of dtype {dtype} has no Zarr v3 form.")


def _zarr_chunks(enc_chunks: Any, var_chunks: Any, ndim: int, name: Hashable) -> Any:
    """The chunk shape xarray's zarr backend asks zarr-python for: ``encoding["chunks"]`` (an int
    for every dimension), else dask's first chunks (uniform but the last), else ``"auto"``."""
    if isinstance(enc_chunks, int | np.integer) and not isinstance(enc_chunks, bool):
        enc_chunks = (int(enc_chunks),) * ndim
    if enc_chunks is not None and len(tuple(enc_chunks)) == ndim and ndim:
        bad = [c for c in enc_chunks if not isinstance(c, int | np.integer)]
        if bad:
            raise ZStringsError(f"Invalid encoding['chunks']={tuple(enc_chunks)!r} for variable {name!r}: "
                                "expected an int or a tuple of ints.")
        return tuple(int(c) for c in enc_chunks)
    if var_chunks:
        if any(len(set(c[:-1])) > 1 or c[0] < c[-1] for c in var_chunks):
            raise ZStringsError(
                f"Variable {name!r} has dask chunks {var_chunks!r} that no Zarr chunk grid holds (uniform "
                "chunks, a smaller last one). Rechunk it (ds.chunk(...)) or set encoding['chunks'].")
        return tuple(c[0] for c in var_chunks)
    return "auto"


def _numeric(md: _Metadata, key: str, name: Hashable, var: xr.Variable) -> ArrayPlan:
    """A variable that is not text: CF-encoded as xarray's zarr backend encodes it, its zarr.json by zarr-python."""
    var = var.copy(deep=False)
    # keep the CF encodings; drop what another format recorded (a v2/NCZarr compressor, filters,
    # zarr_dtype, ...) that a v3 array cannot take (the store's own chain where the encoding is
    # still engine="zstrings"'s: its shards too)
    enc = format_encoding(var.encoding, 3, dtype=var.dtype, text=False, where=f"variable {name!r}")
    var.encoding = {k: v for k, v in enc.items() if k in _V3_KEEP}
    var = conventions.encode_cf_variable(var, name=name, coders=conventions.ZARR_CODERS)
    attrs = dict(var.attrs)
    if attrs.get("_FillValue") is not None:
        attrs["_FillValue"] = _fill_attr(attrs["_FillValue"], var.dtype, name)
    else:
        attrs.pop("_FillValue", None)
    create: dict[str, Any] = {k: var.encoding[k] for k in _ZARR_KEYS if k in var.encoding}
    if isinstance(create.get("shards"), int):
        create["shards"] = (create["shards"],) * var.ndim
    raw = md.array(key, shape=var.shape, dtype=var.dtype, fill_value=np.nan if var.dtype.kind == "f" else None,
                   chunks=_zarr_chunks(var.encoding.get("chunks"), var.chunks, var.ndim, name),
                   dimension_names=var.dims, attributes={k: _attr_value(v) for k, v in attrs.items()}, **create)
    data = var.data if _is_dask(var.data) else np.asarray(var.data)
    return ArrayPlan(key, name, json.loads(raw), data=data, raw=raw)


# ---------------------------------------------------------------------------------------------
# Text
# ---------------------------------------------------------------------------------------------


def _check_objects(values: np.ndarray, kind: Kind, name: Hashable) -> None:
    """Every element of an object array is a str (kind 'str') or bytes ('bytes'), or raise."""
    typ = str if kind == "str" else bytes
    if not all(isinstance(v, typ) for v in values.reshape(-1).tolist()):
        missing = pd.isnull(values)
        if missing.any():
            i = int(np.flatnonzero(np.asarray(missing).reshape(-1))[0])
            raise ZStringsError(
                f"Variable {name!r} holds {int(missing.sum())} missing value(s) (None/NaN), e.g. element "
                f"{i}: a variable-length string array has none. Fill them first (e.g. "
                f"ds[{name!r}].fillna('')), or write NCZarr with to_nczarr and a string _FillValue."
            )
        raise ZStringsError(
            f"Variable {name!r} holds objects that are neither all str nor all bytes; "
            "convert it (e.g. .astype(str)) before writing."
        )


def pack(values: np.ndarray, kind: Kind, name: Hashable) -> tuple[np.ndarray, VlenChunk]:
    """(values as O/T or object-of-bytes, every value packed): packing validates them (lone
    surrogates, str/bytes mix-ups, None raise ZStringsError) before anything is written."""
    values = np.asarray(values)
    if kind == "str" and values.dtype.kind not in "OT":
        try:
            values = values.astype(np.dtypes.StringDType())
        except (TypeError, UnicodeError, ValueError):  # lone surrogates: reported below
            values = values.astype(object)
    elif kind == "bytes":
        values = np.asarray(values, dtype=object)
    flat = np.ascontiguousarray(values).reshape(-1)
    K = kernels()
    if values.dtype.kind == "O" and kind == "str" and K is not None:
        status, _, offsets, data = K.utf8_pack(flat, True)  # takes str objects only
        if status == 0:
            return values, VlenChunk(offsets, np.frombuffer(data, np.uint8))
    if values.dtype.kind == "O":
        _check_objects(flat, kind, name)
    return values, values_to_vlen(flat, kind=kind, what=f"variable {name!r}")


def _string_fill(var: xr.Variable, kind: Kind) -> Any:
    """The string ``_FillValue`` (encoding or attribute) missing values are written as, or None."""
    fill = string_fill(var)
    if isinstance(fill, np.str_ | np.bytes_):
        fill = fill.item()
    if kind == "str" and isinstance(fill, bytes):
        fill = fill.decode("utf-8")
    return fill if isinstance(fill, str if kind == "str" else bytes) else None


def warn_optional(name: Hashable, n: int, example: str = "") -> None:
    warnings.warn(
        f"Variable {name!r} holds {n} missing value(s) (None/NaN/NA){example}: "
        "written in zarrs' nullable 'optional' data type: engine='zstrings', zarrs, and zarr-python and "
        "engine='zarr' through xr_zstrings' zarr plugin (on zarr-python 3.1.x after "
        "xr_zstrings.zarr_plugin.register()) read them back missing, but where xr_zstrings is not installed "
        f"zarr-python cannot open that array. Set ds[{name!r}].encoding['_FillValue'] to a string to write "
        "them as that string instead (every zarr-python reads the string, engine='zstrings' masks it).",
        MissingStringsWarning, stacklevel=user_stacklevel(),
    )


def _text_values(var: xr.Variable, kind: Kind, name: Hashable) -> TextValues:
    """An in-memory text variable checked and packed; its missing values (None, NaN, StringDType
    NA) written as its string ``_FillValue`` when it has one, else in zarrs' nullable ``optional``
    type (warned: zarr-python without our plugin cannot read that type)."""
    arr = np.asarray(var.values)
    if arr.dtype.kind == "O":  # (searched for missing values only when packing fails: a scan costs as much)
        try:
            return TextValues(kind, *pack(arr, kind, name))
        except ZStringsError:
            miss = _missing(arr)
            if miss is None or not miss.any():
                raise
    else:
        miss = _missing(arr) if arr.dtype.kind == "T" else None
        if miss is None or not miss.any():
            return TextValues(kind, *pack(arr, kind, name))
    fill = _string_fill(var, kind)
    if fill is not None:
        out = arr.copy() if arr.dtype.kind == "T" else arr.astype(object)
        out[miss] = fill
        return TextValues(kind, *pack(out, kind, name), missing=("fill", fill))
    out = arr.astype(object)
    out[miss] = None
    warn_optional(name, int(miss.sum()), f", e.g. element {int(np.flatnonzero(miss.reshape(-1))[0])}")
    # the present values checked (as packing does) before anything is written
    pack(np.where(miss, "" if kind == "str" else b"", out), kind, name)
    return TextValues(kind, out, None, ("optional", int(miss.sum())))


def _fill_attribute(meta: dict[str, Any], fv: Any) -> None:
    """The string ``_FillValue`` attribute missing values were written as, as xarray encodes a v3
    string ``_FillValue``: text, base64 for bytes."""
    attrs = meta.setdefault("attributes", {})
    attrs["_FillValue"] = fv if isinstance(fv, str) else base64.b64encode(fv).decode("ascii")


def text_meta(base: Mapping[str, Any], kind: Kind, opts: LayoutOptions,
              missing: tuple[str, Any] | None) -> dict[str, Any]:
    """A text array's zarr.json: zarr-python's (``base``: grid, dimension names, attributes) with
    the layout's data type and codecs; missing values as the string fill (its ``_FillValue``
    attribute) or in zarrs' nullable ``optional`` type around the layout."""
    meta = json.loads(json.dumps(base))
    data_type, codecs = opts.metadata(kind)
    if opts.keeps_default_compressors(kind):
        codecs = [codecs[0], *[c for c in base.get("codecs", []) if c.get("name") != "bytes"]]
    meta.update(data_type=data_type, codecs=codecs, fill_value="")
    if missing is not None and missing[0] == "optional":
        # the layout's serializer holds the present values, a packbits mask says which are
        # present; compressors stay outside (zarrs.optional codec)
        inner = data_type if isinstance(data_type, dict) else {"name": data_type, "configuration": {}}
        meta.update(data_type={"name": "zarrs.optional", "configuration": {
            "name": inner["name"], "configuration": dict(inner.get("configuration") or {})}},
            codecs=[{"name": "zarrs.optional", "configuration": {
                "mask_codecs": [{"name": "packbits", "configuration": {"padding_encoding": "none"}}],
                "data_codecs": [codecs[0]]}}, *codecs[1:]], fill_value=None)
    elif missing is not None:
        _fill_attribute(meta, missing[1])
    return meta


def _text(md: _Metadata, key: str, name: Hashable, var: xr.Variable, kind: Kind) -> ArrayPlan:
    """A string/bytes variable: checked and packed now (in memory), or left lazy (dask-backed)."""
    enc_chunks = var.encoding.get("chunks")
    if _is_dask(var.data) and var.ndim:
        text = TextValues(kind, lazy=var.data, fill=_string_fill(var, kind))
        if enc_chunks is None:  # as xarray does for dask arrays: the store's chunks are dask's
            enc_chunks = tuple(max(max(c), 1) for c in var.data.chunks)
    else:
        text = _text_values(var.compute() if _is_dask(var.data) else var, kind, name)
    attrs = {k: _attr_value(v) for k, v in var.attrs.items() if k != "_FillValue"}
    # zarr-python's grid for the variable's shape (as for a one-byte type: what its vlen-utf8 arrays get)
    chunks = _zarr_chunks(enc_chunks, None, var.ndim, name)
    base = json.loads(md.array(key, shape=var.shape, dtype="uint8", chunks=chunks, dimension_names=var.dims,
                               attributes=attrs))
    return ArrayPlan(key, name, base, text=text)


def group_json(md: _Metadata | None, key: str, attrs: Mapping[str, Any]) -> bytes:
    """A group's zarr.json as zarr-python writes it."""
    return (md or _Metadata()).group(key, {k: _attr_value(v) for k, v in attrs.items()})


def plan_group(key: str, ds: xr.Dataset, md: _Metadata | None = None) -> tuple[bytes, list[ArrayPlan]]:
    """A group's zarr.json and its arrays (``key``: the group's path from the store's root, "" for
    the root), every value checked and packed before anything is written.

    The variables are CF-encoded together (``encode_dataset_coordinates``: the ``coordinates``
    attributes), as xarray's writers do; one Dataset of them is built once (assigning them one by
    one re-merges the whole Dataset each time: quadratic in their number)."""
    md = md or _Metadata()
    variables, attrs = conventions.encode_dataset_coordinates(ds)
    arrays = []
    for name, var in variables.items():
        akey = f"{key}/{name}" if key else str(name)
        kind = text_kind(var)
        arrays.append(_numeric(md, akey, name, var) if kind is None else _text(md, akey, name, var, kind))
    return group_json(md, key, attrs), arrays
