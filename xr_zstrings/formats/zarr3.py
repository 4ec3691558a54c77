"""Pure Zarr v3 metadata parsing: one decoded ``zarr.json`` -> a frozen ``ArrayMetaV3``/``GroupMetaV3``.

No I/O and no xarray/zarr imports (zarr-python refuses the metadata we most need to read: the
``zarrs.vlen`` codec and the Arrow-layout data types). The caller hands in the decoded JSON object
of one node and its path; every error names the store, ``<path>/zarr.json``, what was found, what
was expected and how to fix it.

What is understood, and the JSON forms the writers use (zarr-python 3.1 in brackets):

- core data types ``bool``, ``int8`` .. ``uint64``, ``float16/32/64`` (fill: JSON number,
  ``"NaN"``/``"Infinity"``/``"-Infinity"``, or hex bits ``"0x7fc00000"``);
- ``string`` [zarr-python with ``vlen-utf8``; zarrs with ``zarrs.vlen``; the Arrow ZEP as
  ``{"name": "string"}``] and ``large_string`` (fill: a JSON string);
- ``variable_length_bytes`` [zarr-python], ``bytes`` [zarr-python 3.0, zarrs], ``binary`` [Arrow ZEP,
  zarrs alias] and ``large_binary`` (fill: base64 text, or a list of byte values as zarrs allows);
- ``fixed_length_utf32`` (``{"length_bytes": 4n}``, fill: a JSON string) and
  ``null_terminated_bytes`` (``{"length_bytes": n}``, fill: base64 text);
- ``xr_zstrings.nc_char``: netcdf-c's NC_CHAR (one byte, ``S1``), as ``xr_zstrings.migrate`` writes
  it (fill: at most one character, the byte's code point);
- zarrs' ``optional`` / ``zarrs.optional`` around ``string`` or ``bytes``.

NCZarr's attribute types (``_nczarr_attr``, which ``migrate`` keeps in ``attributes``) are applied
as in Zarr v2.

The data type *name* never decides the chunk layout: ``string`` is zarr-python's ``vlen-utf8``, zarrs'
``zarrs.vlen`` or the Arrow layout depending on the codec chain, which ``codecs_v3`` interprets.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import DimensionError, MetadataError, UnsupportedError
from .array import int_tuple
from .nczarr import check_name, check_sizes, decode_attributes

__all__ = [
    "BYTES_DATA_TYPES",
    "NC_CHAR_DATA_TYPE",
    "NUMERIC_DATA_TYPES",
    "OPTIONAL_DATA_TYPES",
    "STRING_DATA_TYPES",
    "ArrayMetaV3",
    "GroupMetaV3",
    "decode_xarray_fill_attr",
    "normalize_data_type",
    "parse_node_v3",
]

#: Core Zarr v3 numeric data types and their (native byte order) numpy dtypes.
NUMERIC_DATA_TYPES: Mapping[str, str] = {
    "bool": "bool",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "uint8": "uint8",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint64",
    "float16": "float16",
    "float32": "float32",
    "float64": "float64",
}
#: Variable-length text data types (normalized names); chunks decode to ``StringDType``.
STRING_DATA_TYPES = frozenset({"string", "large_string"})
#: Variable-length binary data types (normalized names); chunks decode to object arrays of ``bytes``.
BYTES_DATA_TYPES = frozenset({"bytes", "binary", "large_binary"})

#: netcdf-c's NC_CHAR as a Zarr v3 data type (one byte per element, ``S1``), as ``xr_zstrings.migrate``
#: writes it and the zarr-python plugin reads it (``xr_zstrings.zarr_plugin.NCChar``); its fill value is
#: a string of at most one character, the byte's code point (``"\u00e9"`` is 0xE9; ``""`` is NUL)
NC_CHAR_DATA_TYPE = "xr_zstrings.nc_char"

# spelling on disk -> normalized name
_ALIASES: Mapping[str, str] = {
    "string": "string",
    "large_string": "large_string",
    "LargeString": "large_string",  # the Arrow ZEP's prose spelling
    "variable_length_bytes": "bytes",  # zarr-python >= 3.1
    "bytes": "bytes",  # zarr-python 3.0, zarrs
    "binary": "binary",  # Arrow ZEP (zarrs reads it as an alias of "bytes")
    "large_binary": "large_binary",
    "LargeBinary": "large_binary",
    "fixed_length_utf32": "fixed_length_utf32",
    "null_terminated_bytes": "null_terminated_bytes",
    NC_CHAR_DATA_TYPE: NC_CHAR_DATA_TYPE,
}
# known to exist, deliberately not read (message says why)
_KNOWN_UNSUPPORTED: Mapping[str, str] = {
    "complex64": "complex numbers",
    "complex128": "complex numbers",
    "numpy.datetime64": "numpy datetime64 values",
    "numpy.timedelta64": "numpy timedelta64 values",
    "raw_bytes": "raw fixed-size bytes",
    "structured": "structured (record) data types",
}
_RAW_BITS = re.compile(r"r\d+")

_ARRAY_KEYS = frozenset(
    {
        "zarr_format",
        "node_type",
        "shape",
        "data_type",
        "chunk_grid",
        "chunk_key_encoding",
        "fill_value",
        "codecs",
        "attributes",
        "dimension_names",
        "storage_transformers",
    }
)
_GROUP_KEYS = frozenset({"zarr_format", "node_type", "attributes", "consolidated_metadata"})

_FIX = "Rewrite the array with a Zarr v3 writer or fix zarr.json by hand."


@dataclass(frozen=True)
class ArrayMetaV3:
    """One Zarr v3 array: shape, chunk grid, data type, decoded fill value, codecs, names, attrs.

    ``chunks`` is the regular grid's chunk shape, i.e. the *shard* shape when the array is sharded
    (the unit stored under one key); ``inner_chunks`` is the sharding codec's chunk shape.
    """

    path: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    data_type: str
    data_type_config: Mapping[str, Any]
    dtype: np.dtype
    fill_value: Any
    codecs: tuple[Mapping[str, Any], ...]
    chunk_key_encoding: str
    separator: str
    dimension_names: tuple[str | None, ...] | None
    attrs: Mapping[str, Any]
    string_kind: str | None
    scalar: bool
    storage_transformers: tuple[Mapping[str, Any], ...] = ()
    generation: str = "zarr-v3"
    #: zarrs' nullable ``optional`` data type wraps ``data_type`` (string or bytes): chunks decode to
    #: an object array with None for missing elements; ``fill_value`` None means null (missing)
    optional: bool = False
    extra_fields: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    # --- the ArrayMeta interface (formats/array.py) the v2 metadata implements too ------------
    @property
    def zarr_format(self) -> int:
        return 3

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    @property
    def logical_shape(self) -> tuple[int, ...]:
        return self.shape

    @property
    def order(self) -> str:
        return "C"  # Zarr v3 chunks are C order; a transpose codec says otherwise explicitly

    @property
    def dimension_references(self) -> None:
        return None  # NCZarr's shared dimensions: no netcdf-c writes Zarr v3

    @property
    def maxstrlen(self) -> int | None:
        if self.data_type == "null_terminated_bytes":
            return self.dtype.itemsize
        return None

    @property
    def null_fill(self) -> bool:
        return self.optional  # zarrs' nullable type: chunks hold None, the fill may be null

    @property
    def declares_text(self) -> bool:
        return False  # null_terminated_bytes is bytes unless xarray's _Encoding says text

    def cf_attributes(self, *, store: str = "") -> dict[str, Any]:
        """The attributes with xarray's encoded ``_FillValue`` attribute decoded (see
        ``decode_xarray_fill_attr``)."""
        attrs = dict(self.attrs)
        if "_FillValue" in attrs:
            attrs["_FillValue"] = decode_xarray_fill_attr(attrs["_FillValue"], self, store=store)
        return attrs

    # --- sharding and the chunk grid ------------------------------------------------------
    @property
    def sharded(self) -> bool:
        """True when the array->bytes codec is ``sharding_indexed``."""
        return _sharding_codec(self.codecs) is not None

    @property
    def shards(self) -> tuple[int, ...] | None:
        """The shard shape (zarr-python's ``Array.shards``), or None when not sharded."""
        return self.chunks if self.sharded else None

    @property
    def inner_chunks(self) -> tuple[int, ...]:
        """The read unit (zarr-python's ``Array.chunks``): the sharding chunk shape, else ``chunks``."""
        sh = _sharding_codec(self.codecs)
        if sh is None:
            return self.chunks
        return tuple(sh.get("configuration", {}).get("chunk_shape", self.chunks))

    @property
    def chunk_grid_shape(self) -> tuple[int, ...]:
        """Number of chunks (shards) along each dimension."""
        return tuple(-(-s // c) for s, c in zip(self.shape, self.chunks, strict=True))

    def chunk_key(self, idx: tuple[int, ...]) -> str:
        """The store key of chunk ``idx`` relative to the array (``c/0/1``, ``c``, ``0.1``, ``0``).

        ``default`` encoding: ``"c"`` then the indices each preceded by the separator; ``v2``
        encoding: the indices joined by the separator, ``"0"`` for a 0-d array. For a 0-d array
        ``()`` and ``(0,)`` (how the v2 reader addresses scalars) are both accepted.
        """
        idx = tuple(idx)
        if self.shape == () and idx in ((), (0,)):
            idx = ()
        grid = self.chunk_grid_shape
        if len(idx) != len(grid) or any(
            isinstance(i, bool) or not isinstance(i, int | np.integer) or not 0 <= i < n
            for i, n in zip(idx, grid, strict=False)
        ):
            raise ValueError(
                f"Invalid chunk index {idx!r} for array {self.path!r}: expected {len(grid)} integers "
                f"within the chunk grid {list(grid)}."
            )
        if self.chunk_key_encoding == "v2":
            return self.separator.join(str(int(i)) for i in idx) or "0"
        return "c" + "".join(self.separator + str(int(i)) for i in idx)


@dataclass(frozen=True)
class GroupMetaV3:
    """One Zarr v3 group: attributes and, when present, its inline consolidated metadata.

    ``consolidated`` maps child paths relative to this group (``"a"``, ``"sub/b"``) to their raw
    ``zarr.json`` objects (parse each with ``parse_node_v3``); None when the group has none.
    """

    path: str
    attrs: Mapping[str, Any]
    consolidated: Mapping[str, Mapping[str, Any]] | None = None
    generation: str = "zarr-v3"
    extra_fields: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]


# ---------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------


def parse_node_v3(obj: Any, *, path: str, store: str = "") -> ArrayMetaV3 | GroupMetaV3:
    """Parse a decoded ``zarr.json`` into ``ArrayMetaV3`` or ``GroupMetaV3``, validating every field.

    ``path`` is the node's path in the hierarchy (``"/"`` for the root, ``"/grp/arr"``); ``store``
    is a display name for messages. Raises ``MetadataError`` (malformed), ``DimensionError``
    (``dimension_names`` vs shape) or ``UnsupportedError`` (valid but not readable here).
    """
    path = "/" + str(path).strip("/")
    where = f"{store}{'' if path == '/' else path}/zarr.json"
    if not isinstance(obj, Mapping):
        raise MetadataError(
            f"Invalid zarr.json at {where}: got {_short(obj)}, expected a JSON object. "
            "The store is damaged or the key is not Zarr v3 metadata."
        )
    if "zarr_format" not in obj:
        raise MetadataError(
            f"Invalid zarr.json at {where}: required key 'zarr_format' is missing, expected 3. "
            "Zarr v3 metadata always names its format; fix the file."
        )
    fmt = obj["zarr_format"]
    if fmt != 3 or isinstance(fmt, bool):
        cls = UnsupportedError if isinstance(fmt, int) and not isinstance(fmt, bool) else MetadataError
        raise cls(
            f"Invalid zarr_format at {where}: got {fmt!r}, expected 3. zarr.json describes Zarr v3 "
            "nodes; Zarr v2 nodes use .zgroup/.zarray instead."
        )
    node_type = obj.get("node_type")
    if node_type == "array":
        return _parse_array(obj, path=path, where=where)
    if node_type == "group":
        return _parse_group(obj, path=path, where=where)
    raise MetadataError(
        f"Invalid node_type at {where}: got {node_type!r}, expected 'array' or 'group'. "
        "Fix the node_type key of zarr.json."
    )


# ---------------------------------------------------------------------------------------
# Groups
# ---------------------------------------------------------------------------------------


def _parse_group(obj: Mapping[str, Any], *, path: str, where: str) -> GroupMetaV3:
    extra = _extra_fields(obj, _GROUP_KEYS, where=where, what="group")
    attrs = _attributes(obj, where=where)
    consolidated = None
    cm = obj.get("consolidated_metadata")
    if cm is not None:  # zarr-python 3.0 betas wrote null
        consolidated = _consolidated(cm, where=where)
    return GroupMetaV3(path=path, attrs=attrs, consolidated=consolidated, extra_fields=extra)


def _consolidated(cm: Any, *, where: str) -> dict[str, Mapping[str, Any]] | None:
    w = f"{where} consolidated_metadata"
    if not isinstance(cm, Mapping):
        raise MetadataError(
            f"Invalid consolidated_metadata at {where}: got {_short(cm)}, expected an object "
            '{"kind": "inline", "must_understand": false, "metadata": {...}}. Re-consolidate the '
            "store (zarr.consolidate_metadata) or delete the key."
        )
    kind = cm.get("kind", "inline")
    if kind != "inline":
        if cm.get("must_understand", True) is False:
            return None  # an extension we may ignore: the caller walks the hierarchy instead
        raise UnsupportedError(
            f"Unsupported consolidated_metadata kind at {w}: got {kind!r}, expected 'inline'. "
            "Re-consolidate the store with zarr-python 3 (zarr.consolidate_metadata)."
        )
    meta = cm.get("metadata", {})
    if not isinstance(meta, Mapping):
        raise MetadataError(
            f"Invalid consolidated_metadata.metadata at {where}: got {_short(meta)}, expected an "
            "object mapping child paths to zarr.json objects. Re-consolidate the store."
        )
    out: dict[str, Mapping[str, Any]] = {}
    nested: list[tuple[str, Mapping[str, Any]]] = []
    for key, child in meta.items():
        _check_rel_path(key, where=f"{w}.metadata")
        if not isinstance(child, Mapping):
            raise MetadataError(
                f"Invalid consolidated entry {key!r} at {w}.metadata: got {_short(child)}, expected "
                "the child's zarr.json object. Re-consolidate the store (zarr.consolidate_metadata)."
            )
        out[key] = child
        sub = child.get("consolidated_metadata")
        if isinstance(sub, Mapping) and isinstance(sub.get("metadata"), Mapping) and sub["metadata"]:
            nested.append((key, sub))
    # zarr-python writes the flattened form (child groups carry an empty "metadata"); a nested
    # form, with paths relative to each child group, is folded in as well.
    for key, sub in nested:
        inner = _consolidated(sub, where=f"{where} consolidated_metadata.metadata[{key!r}]") or {}
        for k, v in inner.items():
            out.setdefault(f"{key}/{k}", v)
    return out


def _check_rel_path(key: Any, *, where: str) -> str:
    if not isinstance(key, str) or not key:
        raise MetadataError(
            f"Invalid child path {key!r} at {where}: expected a relative path such as 'a' or "
            "'sub/b'. Re-consolidate the store (zarr.consolidate_metadata)."
        )
    for part in key.split("/"):
        check_name(part, where=f"{where} (child path {key!r})")
    return key


# ---------------------------------------------------------------------------------------
# Arrays
# ---------------------------------------------------------------------------------------


def _parse_array(obj: Mapping[str, Any], *, path: str, where: str) -> ArrayMetaV3:
    for key in ("shape", "data_type", "chunk_grid", "chunk_key_encoding", "fill_value", "codecs"):
        if key not in obj:
            raise MetadataError(
                f"Invalid zarr.json at {where}: required array key {key!r} is missing. Expected "
                f"every key of the Zarr v3 array metadata. {_FIX}"
            )
    extra = _extra_fields(obj, _ARRAY_KEYS, where=where, what="array")
    shape = int_tuple(obj["shape"], where=where, what="shape", minimum=0, fix=_FIX)
    chunks = _regular_grid(obj["chunk_grid"], rank=len(shape), shape=shape, where=where)
    dt_json, optional = _unwrap_optional(obj["data_type"], where=where)
    data_type, config = normalize_data_type(dt_json, where=where)
    dtype, string_kind = _dtype_for(data_type, config, where=where)
    if optional:
        if string_kind not in ("vlen", "vlen-bytes"):
            raise UnsupportedError(
                f"Unsupported data_type at {where}: zarrs' optional {data_type!r} is read for string "
                "and bytes data only (missing values in a StringDType/object array). Open it with zarrs."
            )
        dtype = np.dtype(object)  # None marks a missing element
    check_sizes(shape, chunks, dtype.itemsize if dtype.kind not in "OT" else 16, where=where)
    encoding, separator = _chunk_key_encoding(obj["chunk_key_encoding"], where=where)
    codecs = _codecs(obj["codecs"], shape=shape, chunks=chunks, where=where)
    dims = _dimension_names(obj.get("dimension_names"), shape=shape, where=where)
    transformers = _storage_transformers(obj.get("storage_transformers"), where=where)
    fill = _optional_fill(obj["fill_value"], data_type, dtype, where=where) if optional else \
        _fill_value(obj["fill_value"], data_type, dtype, where=where)
    return ArrayMetaV3(
        path=path,
        shape=shape,
        chunks=chunks,
        data_type=data_type,
        data_type_config=config,
        dtype=dtype,
        fill_value=fill,
        codecs=codecs,
        chunk_key_encoding=encoding,
        separator=separator,
        dimension_names=dims,
        attrs=_attributes(obj, where=where),
        string_kind=string_kind,
        scalar=shape == (),
        storage_transformers=transformers,
        extra_fields=extra,
        raw=dict(obj),
        optional=optional,
    )


#: zarrs' nullable data type: the zarr-extensions draft "optional" and zarrs' "zarrs.optional"
OPTIONAL_DATA_TYPES = ("optional", "zarrs.optional")


def _unwrap_optional(value: Any, *, where: str) -> tuple[Any, bool]:
    """(the inner data type JSON, True) for ``{"name": "optional", "configuration": {"name": ...,
    "configuration": {...}}}``; (value, False) for every other data type."""
    if not (isinstance(value, Mapping) and value.get("name") in OPTIONAL_DATA_TYPES):
        return value, False
    _, cfg = _named(value, where=where, what="data_type")
    if not isinstance(cfg.get("name"), str):
        raise MetadataError(
            f"Invalid data_type {value.get('name')!r} at {where}: got {_short(value)}, expected the "
            'inner data type in its configuration, e.g. {"name": "optional", "configuration": '
            '{"name": "string", "configuration": {}}}. ' + _FIX
        )
    if cfg["name"] in OPTIONAL_DATA_TYPES:
        raise UnsupportedError(f"Unsupported data_type at {where}: nested optional types are not read. "
                               "Open the array with zarrs.")
    return {"name": cfg["name"], "configuration": dict(cfg.get("configuration") or {})}, True


def _optional_fill(value: Any, data_type: str, dtype: np.dtype, *, where: str) -> Any:
    """An optional type's fill value: ``null`` (missing, None) or ``[inner fill value]``."""
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != 1 or value[0] is None:
        raise MetadataError(
            f"Invalid fill_value at {where}: got {_short(value)}, expected null or a one-element list "
            f"holding a {data_type!r} fill value (zarr-extensions data-types/optional). {_FIX}"
        )
    inner = _fill_value(value[0], data_type, dtype, where=where)
    return "" if inner is None else inner


def _extra_fields(obj: Mapping[str, Any], known: frozenset[str], *, where: str, what: str) -> dict[str, Any]:
    """Unknown keys are allowed only as ``{"must_understand": false, ...}`` objects (ignored)."""
    extra: dict[str, Any] = {}
    for key, value in obj.items():
        if key in known:
            continue
        if isinstance(value, Mapping) and value.get("must_understand") is False:
            extra[key] = value
            continue
        raise UnsupportedError(
            f"Unsupported {what} metadata key {key!r} at {where}: got {_short(value)}, expected only "
            f"the Zarr v3 keys {sorted(known)} or extensions marked "
            '{"must_understand": false}. A writer added an extension this reader must understand '
            "but does not; open the node with the library that wrote it."
        )
    return extra


def _attributes(obj: Mapping[str, Any], *, where: str) -> dict[str, Any]:
    """The attributes; NCZarr's netCDF types (``_nczarr_attr``, which ``xr_zstrings.migrate`` keeps)
    applied as in Zarr v2 (``nczarr.decode_attributes``), the bookkeeping key dropped."""
    attrs = obj.get("attributes", {})
    if attrs is None:
        return {}
    if not isinstance(attrs, Mapping):
        raise MetadataError(
            f"Invalid attributes at {where}: got {_short(attrs)}, expected a JSON object. "
            "Fix the attributes key of zarr.json."
        )
    typed = attrs.get("_nczarr_attr")
    if isinstance(typed, Mapping) and isinstance(typed.get("types"), Mapping):
        types = {str(k): v for k, v in typed["types"].items() if isinstance(v, str)}
        return decode_attributes(attrs, types, where=f"{where} attributes")
    return dict(attrs)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _named(value: Any, *, where: str, what: str) -> tuple[str, Mapping[str, Any]]:
    """``"name"`` or ``{"name": ..., "configuration": {...}}`` -> (name, configuration)."""
    if isinstance(value, str) and value:
        return value, {}
    if isinstance(value, Mapping) and isinstance(value.get("name"), str) and value["name"]:
        cfg = value.get("configuration", {})
        if cfg is None:
            cfg = {}
        if not isinstance(cfg, Mapping):
            raise MetadataError(
                f"Invalid {what} configuration at {where}: got {_short(cfg)}, expected a JSON object. "
                f"{_FIX}"
            )
        return value["name"], cfg
    raise MetadataError(
        f"Invalid {what} at {where}: got {_short(value)}, expected a name or an object "
        f'{{"name": ..., "configuration": {{...}}}}. {_FIX}'
    )


def _regular_grid(value: Any, *, rank: int, shape: tuple[int, ...], where: str) -> tuple[int, ...]:
    name, cfg = _named(value, where=where, what="chunk_grid")
    if name != "regular":
        raise UnsupportedError(
            f"Unsupported chunk_grid {name!r} at {where}: expected 'regular' (the only grid of the "
            "Zarr v3 core spec). Rewrite the array with a regular chunk grid."
        )
    if "chunk_shape" not in cfg:
        raise MetadataError(
            f"Invalid chunk_grid at {where}: got {_short(value)}, expected configuration.chunk_shape. "
            f"{_FIX}"
        )
    chunks = int_tuple(cfg["chunk_shape"], where=where, what="chunk_grid chunk_shape", minimum=1, fix=_FIX)
    if len(chunks) != rank:
        raise MetadataError(
            f"Invalid chunk_grid at {where}: chunk_shape {list(chunks)} has {len(chunks)} dimensions "
            f"but shape {list(shape)} has {rank}. Expected one chunk length per dimension. {_FIX}"
        )
    return chunks


def _chunk_key_encoding(value: Any, *, where: str) -> tuple[str, str]:
    name, cfg = _named(value, where=where, what="chunk_key_encoding")
    if name not in ("default", "v2"):
        raise UnsupportedError(
            f"Unsupported chunk_key_encoding {name!r} at {where}: expected 'default' or 'v2'. "
            "Rewrite the array with a standard chunk key encoding."
        )
    sep = cfg.get("separator", "/" if name == "default" else ".")
    if sep not in ("/", "."):
        raise MetadataError(
            f"Invalid chunk_key_encoding separator at {where}: got {sep!r}, expected '/' or '.'. "
            f"{_FIX}"
        )
    return name, sep


def _codecs(value: Any, *, shape: tuple[int, ...], chunks: tuple[int, ...], where: str) -> tuple[dict, ...]:
    if not isinstance(value, list) or not value:
        raise MetadataError(
            f"Invalid codecs at {where}: got {_short(value)}, expected a non-empty list of codec "
            "objects (at least one array->bytes codec such as 'bytes' or 'vlen-utf8'). "
            f"{_FIX}"
        )
    out = []
    for c in value:
        name, cfg = _named(c, where=where, what="codec")
        codec = dict(c) if isinstance(c, Mapping) else {"name": name}
        out.append(codec)
        if name == "sharding_indexed":
            _check_sharding(cfg, shape=shape, chunks=chunks, where=where, first=len(out) == 1)
    return tuple(out)


def _sharding_codec(codecs: tuple[Mapping[str, Any], ...]) -> Mapping[str, Any] | None:
    for c in codecs:
        if c.get("name") == "sharding_indexed":
            return c
    return None


def _check_sharding(
    cfg: Mapping[str, Any], *, shape: tuple[int, ...], chunks: tuple[int, ...], where: str, first: bool
) -> None:
    if "chunk_shape" not in cfg:
        raise MetadataError(
            f"Invalid sharding_indexed codec at {where}: configuration.chunk_shape is missing, "
            f"expected the inner chunk shape. {_FIX}"
        )
    inner = int_tuple(cfg["chunk_shape"], where=where, what="sharding_indexed chunk_shape", minimum=1, fix=_FIX)
    if len(inner) != len(shape):
        raise MetadataError(
            f"Invalid sharding_indexed codec at {where}: chunk_shape {list(inner)} has {len(inner)} "
            f"dimensions but shape {list(shape)} has {len(shape)}; expected one inner chunk length "
            f"per dimension. {_FIX}"
        )
    if first and any(s % i for s, i in zip(chunks, inner, strict=True)):
        raise MetadataError(
            f"Invalid sharding_indexed codec at {where}: inner chunk_shape {list(inner)} does not "
            f"divide the shard shape {list(chunks)}, expected each shard dimension to be a multiple "
            f"of the inner chunk's. {_FIX}"
        )


def _dimension_names(value: Any, *, shape: tuple[int, ...], where: str) -> tuple[str | None, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(v is None or isinstance(v, str) for v in value):
        raise DimensionError(
            f"Invalid dimension_names at {where}: got {_short(value)}, expected a list of names "
            "(strings or null), one per dimension. Fix dimension_names in zarr.json."
        )
    if len(value) != len(shape):
        raise DimensionError(
            f"Invalid dimension_names at {where}: got {value!r} ({len(value)} names), expected "
            f"{len(shape)} names for shape {list(shape)}. Fix dimension_names in zarr.json."
        )
    return tuple(value)


def _storage_transformers(value: Any, *, where: str) -> tuple[Mapping[str, Any], ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise MetadataError(
            f"Invalid storage_transformers at {where}: got {_short(value)}, expected a list. {_FIX}"
        )
    out = []
    for t in value:
        name, _ = _named(t, where=where, what="storage transformer")
        if isinstance(t, Mapping) and t.get("must_understand") is False:
            out.append(dict(t))
            continue
        raise UnsupportedError(
            f"Unsupported storage transformer {name!r} at {where}: expected none (chunk keys and "
            "bytes would be wrong without it). Open the array with the library that wrote it."
        )
    return tuple(out)


# ---------------------------------------------------------------------------------------
# Data types
# ---------------------------------------------------------------------------------------


def normalize_data_type(value: Any, *, where: str = "zarr.json") -> tuple[str, Mapping[str, Any]]:
    """``data_type`` JSON -> (normalized name, configuration); unknown names raise ``UnsupportedError``.

    ``variable_length_bytes`` (zarr-python) becomes ``bytes``; ``LargeString``/``LargeBinary`` become
    ``large_string``/``large_binary``; numeric names stay as they are.
    """
    name, cfg = _named(value, where=where, what="data_type")
    if name in NUMERIC_DATA_TYPES:
        return name, dict(cfg)
    if name in _ALIASES:
        return _ALIASES[name], dict(cfg)
    if name in _KNOWN_UNSUPPORTED or _RAW_BITS.fullmatch(name):
        what = _KNOWN_UNSUPPORTED.get(name, "raw bits")
        raise UnsupportedError(
            f"Unsupported data_type {name!r} at {where}: {what} are not read by engine='zstrings'; "
            "expected bool, int8..uint64, float16/32/64, string, bytes, fixed_length_utf32 or "
            "null_terminated_bytes. Open this array with engine='zarr'."
        )
    raise UnsupportedError(
        f"Unsupported data_type {name!r} at {where}: got {_short(value)}, expected one of "
        f"{sorted(set(NUMERIC_DATA_TYPES) | set(_ALIASES))}. The array uses a data type extension this "
        "reader does not know; open it with the library that wrote it."
    )


def _length_bytes(name: str, cfg: Mapping[str, Any], *, where: str, multiple: int) -> int:
    n = cfg.get("length_bytes")
    if not isinstance(n, int) or isinstance(n, bool) or n < multiple or n % multiple:
        raise MetadataError(
            f"Invalid data_type {name!r} at {where}: configuration.length_bytes is {n!r}, expected "
            f"a positive multiple of {multiple}. {_FIX}"
        )
    return n


def _dtype_for(data_type: str, cfg: Mapping[str, Any], *, where: str) -> tuple[np.dtype, str | None]:
    """The numpy dtype chunks decode to, and the v2-reader string kind."""
    if data_type in NUMERIC_DATA_TYPES:
        return np.dtype(NUMERIC_DATA_TYPES[data_type]), None
    if data_type in STRING_DATA_TYPES:
        return np.dtypes.StringDType(), "vlen"
    if data_type in BYTES_DATA_TYPES:
        return np.dtype(object), "vlen-bytes"
    if data_type == "fixed_length_utf32":
        n = _length_bytes(data_type, cfg, where=where, multiple=4)
        return np.dtype(f"<U{n // 4}"), "unicode"
    if data_type == "null_terminated_bytes":
        n = _length_bytes(data_type, cfg, where=where, multiple=1)
        return np.dtype(f"S{n}"), "string"
    if data_type == NC_CHAR_DATA_TYPE:
        return np.dtype("S1"), "char"
    raise AssertionError(data_type)  # normalize_data_type returns only the names above


# ---------------------------------------------------------------------------------------
# Fill values
# ---------------------------------------------------------------------------------------

_SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_HEX_FLOAT = re.compile(r"0x[0-9a-fA-F]+")


def _fill_value(value: Any, data_type: str, dtype: np.dtype, *, where: str) -> Any:
    """The fill value decoded as zarr-python reads it; a value that does not fit raises."""

    def bad(expected: str) -> MetadataError:
        return MetadataError(
            f"Invalid fill_value at {where}: got {_short(value)}, expected {expected} for data_type "
            f"{data_type!r}. Fix fill_value in zarr.json."
        )

    by_type = _FILL_BY_TYPE.get(data_type) or _FILL_BY_KIND.get(dtype.kind)
    if by_type is None:
        raise AssertionError(data_type)
    return by_type(value, dtype, bad)


def _text_fill(value: Any, dtype: np.dtype, bad: Any) -> Any:
    if value is None:
        return None  # no fill stated (the Arrow ZEP defines none); readers use ""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise bad("a JSON string")
    text = value if isinstance(value, str) else str(value)  # zarr-python accepts numbers too
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise bad("text that UTF-8 can hold (no lone surrogates)") from None
    return text


def _vlen_bytes_fill(value: Any, dtype: np.dtype, bad: Any) -> Any:
    if value is None:
        return None
    raw = _bytes_fill(value)
    if raw is None:
        raise bad("base64 text (or a list of byte values 0..255)")
    return raw


def _utf32_fill(value: Any, dtype: np.dtype, bad: Any) -> Any:
    n = dtype.itemsize // 4
    if not isinstance(value, str) or len(value) > n:
        raise bad(f"a JSON string of at most {n} characters")
    return np.array(value, dtype=dtype)[()]


def _nc_char_fill(value: Any, dtype: np.dtype, bad: Any) -> Any:
    if not isinstance(value, str) or len(value) > 1 or (value and ord(value) > 0xFF):
        raise bad('a string of at most one character U+0000-U+00FF (the byte; "" is NUL)')
    return np.array(value.encode("latin-1"), dtype=dtype)[()]


def _fixed_bytes_fill(value: Any, dtype: np.dtype, bad: Any) -> Any:
    raw = _bytes_fill(value, allow_list=False) if isinstance(value, str) else None
    if raw is None or len(raw) > dtype.itemsize:
        raise bad(f"base64 text of at most {dtype.itemsize} bytes")
    return np.array(raw, dtype=dtype)[()]


def _bool_fill(value: Any, dtype: np.dtype, bad: Any) -> Any:
    if isinstance(value, bool):
        return np.bool_(value)
    if _is_int(value) and value in (0, 1):
        return np.bool_(value)
    raise bad("true or false")


def _int_fill(value: Any, dtype: np.dtype, bad: Any) -> Any:
    v: Any = value
    integral_float = isinstance(v, float) and v.is_integer()
    if integral_float or (isinstance(v, str) and re.fullmatch(r"[+-]?\d+", v.strip())):
        v = int(v)  # zarr-python accepts 7.0 and "7" for integers
    info = np.iinfo(dtype)
    if not _is_int(v) or not info.min <= v <= info.max:
        raise bad(f"an integer in [{info.min}, {info.max}]")
    return dtype.type(v)


def _float_fill(value: Any, dtype: np.dtype, bad: Any) -> Any:
    expected = 'a number, "NaN", "Infinity", "-Infinity" or hex bits such as "0x7fc00000"'
    if isinstance(value, str):
        if value in _SPECIAL_FLOATS:
            return dtype.type(_SPECIAL_FLOATS[value])
        if _HEX_FLOAT.fullmatch(value):
            digits = value[2:]
            codes = {4: ">f2", 8: ">f4", 16: ">f8"}
            if len(digits) not in codes:
                raise bad(f"hex bits of 4, 8 or 16 digits ({dtype.itemsize * 2} for this type)")
            bits = np.frombuffer(bytes.fromhex(digits), dtype=codes[len(digits)])[0]
            if bits.dtype.itemsize == dtype.itemsize:
                return bits.astype(dtype)[()]  # keeps a NaN's payload bits
            value = float(bits)  # zarr-python decodes by digit count, then casts
        else:
            try:
                value = float(value)  # zarr-python accepts "3.5"
            except ValueError:
                raise bad(expected) from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise bad(expected)
    try:
        as_float = float(value)
    except OverflowError:  # an integer beyond float64
        raise bad(f"a number within the range of {dtype.name}") from None
    with np.errstate(over="ignore"):
        out = np.array(as_float, dtype=np.float64).astype(dtype)[()]
    if math.isfinite(as_float) and not np.isfinite(out):
        raise bad(f"a number within the range of {dtype.name}")
    return out


#: how ``_fill_value`` decodes a fill value, by data type (else by numpy kind): (value, dtype, bad)
_FILL_BY_TYPE: dict[str, Callable[[Any, np.dtype, Any], Any]] = {
    **dict.fromkeys(BYTES_DATA_TYPES, _vlen_bytes_fill),
    **dict.fromkeys(STRING_DATA_TYPES, _text_fill),
    "fixed_length_utf32": _utf32_fill,
    NC_CHAR_DATA_TYPE: _nc_char_fill,
    "null_terminated_bytes": _fixed_bytes_fill,
    "bool": _bool_fill,
}
_FILL_BY_KIND: dict[str, Callable[[Any, np.dtype, Any], Any]] = {"i": _int_fill, "u": _int_fill, "f": _float_fill}


def decode_xarray_fill_attr(value: Any, meta: ArrayMetaV3, *, store: str = "") -> Any:
    """Decode the ``_FillValue`` *attribute* xarray writes next to a Zarr v3 array.

    xarray (2025+) keeps CF's ``_FillValue`` separate from Zarr's ``fill_value`` in v3 and encodes it
    (``FillValueCoder``): floats as base64 of a little-endian float64 (NaN is ``"AAAAAAAA+H8="``),
    ints and bools as JSON, ``|S`` as base64, ``<U`` as text. This mirrors xarray's decoding, and
    also decodes the ``S``/``U`` forms xarray 2026.9 writes but cannot read back.
    """
    where = f"{store}{'' if meta.path == '/' else meta.path}/zarr.json attribute '_FillValue'"
    try:
        if meta.data_type in STRING_DATA_TYPES or meta.data_type == "fixed_length_utf32":
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                raise TypeError
            return str(value)
        if meta.data_type in BYTES_DATA_TYPES or meta.data_type in ("null_terminated_bytes", NC_CHAR_DATA_TYPE):
            raw = _bytes_fill(value, allow_list=False)
            if raw is None:
                raise TypeError
            return raw
        kind = meta.dtype.kind
        if kind == "f":
            if not isinstance(value, str):
                raise TypeError
            raw = base64.b64decode(value, validate=True)
            if len(raw) != 8:
                raise TypeError
            return float(np.frombuffer(raw, "<f8")[0])
        if kind == "b":
            return bool(value)
        if kind in "iu":
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError
            return int(value)
    except (TypeError, ValueError, binascii.Error):
        pass
    raise MetadataError(
        f"Invalid _FillValue at {where}: got {_short(value)}, expected xarray's encoding for "
        f"data_type {meta.data_type!r} (base64 of a float64 for floats, a number for integers, "
        "text for strings, base64 for bytes). Fix or delete the attribute."
    )


def _bytes_fill(value: Any, *, allow_list: bool = True) -> bytes | None:
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return None
    if allow_list and isinstance(value, list) and all(_is_int(b) and 0 <= b <= 255 for b in value):
        return bytes(value)
    return None


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
