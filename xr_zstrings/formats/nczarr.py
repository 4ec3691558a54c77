"""Pure metadata parsing: Zarr v2 objects and every NCZarr generation -> frozen dataclasses.

No I/O and no xarray/zarr imports: callers hand in the decoded JSON objects of one node
(``.zgroup``/``.zarray``/``.zattrs`` and, for NCZarr 1.0, ``.nczarr``/``.nczgroup``/``.nczvar``/
``.nczarray``/``.nczattr``) and get a ``GroupMeta`` or ``ArrayMetaV2`` (an ``array.ArrayMeta``)
back. The generations differ only in *where* the NCZarr keys live and what they are called;
``_lookup`` hides that, and ``docs/format-notes.md`` records which netcdf-c release wrote what.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import numpy as np

from ..errors import DimensionError, MetadataError, UnsupportedError, user_stacklevel
from .array import int_tuple
from .netcdf_c import LAYOUTS, ZARR_V2, NCZarrLayout, is_nczarr, layout_at, places

__all__ = [
    "ATTRIBUTE_OBJECTS",
    "INTERNAL_ATTRS",
    "METADATA_KEY_NAMES",
    "NC_DEFAULT_MAXSTRLEN",
    "NC_FILL_VALUES",
    "NC_TYPE_CODES",
    "ArrayMetaV2",
    "Dimension",
    "GroupMeta",
    "NodeObjects",
    "check_name",
    "check_sizes",
    "decode_attributes",
    "name_problem",
    "nc_char_v2_fill",
    "netcdf_c_name_problem",
    "parse_array",
    "parse_group",
    "parse_json",
]

#: netcdf-c's default ``_nczarr_default_maxstrlen`` (Appendix H of the NCZarr document).
NC_DEFAULT_MAXSTRLEN = 128

#: Attributes that carry format bookkeeping, never user data.
INTERNAL_ATTRS = frozenset(
    {"_ARRAY_DIMENSIONS", "_nczarr_maxstrlen", "_nczarr_default_maxstrlen", "_NCProperties"}
    | {key for what in ("superblock", "group", "array", "attr") for _, key in places(what) if key is not None}
)

#: NCZarr 1.0 wrote attribute types as netCDF ``nc_type`` codes; map them to numpy dtypes.
NC_TYPE_CODES: dict[str, str] = {
    "1": "i1",
    "2": "char",
    "3": "<i2",
    "4": "<i4",
    "5": "<f4",
    "6": "<f8",
    "7": "u1",
    "8": "<u2",
    "9": "<u4",
    "10": "<i8",
    "11": "<u8",
    "12": "string",
}

#: netcdf-c's default fill values, which it writes to ``.zarray`` when no ``_FillValue`` is set.
NC_FILL_VALUES: dict[str, int | float] = {
    "i1": -127, "u1": 255, "i2": -32767, "u2": 65535, "i4": -2147483647, "u4": 4294967295,
    "i8": -9223372036854775806, "u8": 18446744073709551614,
    "f4": 9.9692099683868690e36, "f8": 9.9692099683868690e36,
}

# JSON writers round the float fills (``9.96921e+36``), so a fill value within float32
# precision of these is snapped back to the exact one.
_NC_FILL_FLOAT = float(np.float32(NC_FILL_VALUES["f4"]))
_NC_FILL_DOUBLE = NC_FILL_VALUES["f8"]

_NAME_BAD = re.compile(r"[\x00/\\]")


@dataclass(frozen=True)
class Dimension:
    """A netCDF shared dimension: name, size, and whether it is unlimited."""

    name: str
    size: int
    unlimited: bool = False


@dataclass(frozen=True)
class NodeObjects:
    """The JSON objects stored for one group or array, by object name (``.zarray`` ...)."""

    path: str
    objects: Mapping[str, Any]

    def get(self, name: str) -> Any:
        return self.objects.get(name)


@dataclass(frozen=True)
class GroupMeta:
    """One group: its declared dimensions, children, typed attributes and NCZarr generation."""

    path: str
    zarr_format: int
    generation: str
    dimensions: Mapping[str, Dimension]
    arrays: tuple[str, ...] | None
    groups: tuple[str, ...] | None
    attrs: Mapping[str, Any]
    attr_types: Mapping[str, str]
    default_maxstrlen: int | None = None
    nczarr_version: str | None = None
    nc_properties: str | None = None  # "_NCProperties": set when netcdf-c wrote the store

    @property
    def is_nczarr(self) -> bool:
        return is_nczarr(self.generation)


@dataclass(frozen=True)
class ArrayMetaV2:
    """One Zarr v2 array with everything netCDF adds: dimension references, scalar flag, types.

    Implements ``array.ArrayMeta``; ``compressor``/``filters``/``dimension_separator`` are v2's own.
    """

    path: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: np.dtype
    dtype_str: str
    fill_value: Any
    order: Literal["C", "F"]
    compressor: Mapping[str, Any] | None
    filters: tuple[Mapping[str, Any], ...]
    dimension_separator: str
    dimension_references: tuple[str, ...] | None
    array_dimensions: tuple[str, ...] | None
    scalar: bool
    attrs: Mapping[str, Any]
    attr_types: Mapping[str, str]
    string_kind: str | None  # "string" (NC_STRING / |Sn), "char" (NC_CHAR), "unicode", "vlen", None
    maxstrlen: int | None
    storage: str | None = None
    generation: str = ZARR_V2
    raw_zarray: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    #: a ``_nczarr_maxstrlen`` attribute declares a pure-Zarr ``|Sn`` array NC_STRING text
    #: (``with_netcdf_c_strings`` and netcdf-c write it); without it ``|Sn`` is bytes, as in engine="zarr"
    maxstrlen_attr: bool = False

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    @property
    def logical_shape(self) -> tuple[int, ...]:
        """The netCDF shape: ``()`` for scalars, which Zarr stores with shape ``[1]``."""
        return () if self.scalar else self.shape

    @property
    def zarr_format(self) -> int:
        return 2

    @property
    def dimension_names(self) -> tuple[str, ...] | None:
        return self.array_dimensions

    @property
    def null_fill(self) -> bool:
        # zarr-python 2 reads a never-written chunk of a |O array with fill_value null as None
        return not is_nczarr(self.generation) and self.dtype.kind == "O" and self.fill_value is None

    @property
    def declares_text(self) -> bool:
        return is_nczarr(self.generation) or self.maxstrlen_attr

    def chunk_key(self, idx: tuple[int, ...]) -> str:
        """The key of chunk ``idx`` relative to the array (``0.1``, ``0/1``; a scalar's is ``0``)."""
        return self.dimension_separator.join(str(int(i)) for i in idx) or "0"

    def cf_attributes(self, *, store: str = "") -> dict[str, Any]:
        return dict(self.attrs)


#: the metadata objects that hold user attributes (all of zarr.json: its "attributes")
ATTRIBUTE_OBJECTS = (".zattrs", ".nczattr", ".nczattrs", "zarr.json")


def parse_json(raw: bytes | str, *, where: str, attributes: bool = False) -> Any:
    """Decode a metadata object, naming the store key on failure.

    ``attributes``: the object holds user attributes (``ATTRIBUTE_OBJECTS``). netcdf-c stores a
    text attribute's bytes as they are, so one that is not UTF-8 makes the object invalid UTF-8;
    netCDF4 still reads it. Such values come back as ``bytes`` (with a ``StringDecodeWarning``
    naming them) instead of making the whole store unreadable; elsewhere invalid UTF-8 is damage.
    Control characters inside strings are accepted (netcdf-c writes them unescaped).
    """
    lenient = False
    try:
        if isinstance(raw, bytes | bytearray | memoryview):
            data = bytes(raw)
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                if not attributes:
                    raise
                text, lenient = data.decode("utf-8", "surrogateescape"), True
        else:
            text = raw
        obj = json.loads(text, parse_constant=_json_constant, strict=False)
    except UnicodeDecodeError as e:
        raise MetadataError(
            f"Invalid metadata at {where}: not UTF-8 ({e}). Expected a UTF-8 JSON object; "
            "the store is damaged or the key is not Zarr metadata."
        ) from None
    except json.JSONDecodeError as e:
        raise MetadataError(
            # json's own message may end in "at" ("Unterminated string starting at"): not doubled
            f"Invalid metadata at {where}: malformed JSON ({e.msg.removesuffix(' at')} at line "
            f"{e.lineno} column {e.colno}). Expected a complete JSON object; the store may be truncated or half-written."
        ) from None
    except RecursionError:
        raise MetadataError(
            f"Invalid metadata at {where}: JSON nested too deeply to parse. Expected a Zarr metadata "
            "object (a few levels deep); the key is damaged or not Zarr metadata."
        ) from None
    except ValueError as e:  # e.g. an integer of more than 4300 digits
        raise MetadataError(
            f"Invalid metadata at {where}: unparseable JSON value ({e}). Expected a Zarr metadata "
            "object with ordinary numbers; the key is damaged."
        ) from None
    return _undecodable_as_bytes(obj, where=where) if lenient else obj


def _undecodable_as_bytes(obj: Any, *, where: str) -> Any:
    """An attribute object read with ``surrogateescape``: the attribute values holding bytes that
    are not UTF-8 become those bytes, with one warning naming them; anything else is damage."""
    from ..errors import StringDecodeWarning

    def has_escapes(v: Any) -> bool:
        if isinstance(v, str):
            return any("\udc80" <= c <= "\udcff" for c in v)
        if isinstance(v, list):
            return any(has_escapes(x) for x in v)
        if isinstance(v, dict):
            return any(has_escapes(k) or has_escapes(x) for k, x in v.items())
        return False

    def as_bytes(v: Any) -> Any:
        if isinstance(v, str) and has_escapes(v):
            return v.encode("utf-8", "surrogateescape")
        if isinstance(v, list):
            return [as_bytes(x) for x in v]
        return v

    if not isinstance(obj, dict):
        raise MetadataError(f"Invalid metadata at {where}: not UTF-8. Expected a UTF-8 JSON object.")
    v3 = isinstance(obj.get("attributes"), dict) and "zarr_format" in obj
    attrs = obj["attributes"] if v3 else obj
    rest = {k: v for k, v in obj.items() if k != "attributes"} if v3 else {}
    bad = [str(k) for k, v in attrs.items() if has_escapes(v) and not isinstance(v, dict)]
    if has_escapes(rest) or any(has_escapes(k) for k in attrs) or len(bad) < sum(map(has_escapes, attrs.values())):
        raise MetadataError(
            f"Invalid metadata at {where}: not UTF-8 outside attribute values. Expected UTF-8 JSON; "
            "the store is damaged."
        )
    fixed = {k: as_bytes(v) for k, v in attrs.items()}
    warnings.warn(
        f"Attribute(s) {bad} at {where} are not UTF-8 text: returned as bytes, as stored. Decode them "
        "yourself (e.g. value.decode('latin-1')) if you know their encoding.",
        StringDecodeWarning, stacklevel=user_stacklevel(),
    )
    return {**rest, "attributes": fixed} if v3 else fixed


def _json_constant(name: str) -> float:
    return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[name]


def check_name(name: Any, *, where: str) -> str:
    """Reject names that would escape the store or break key paths (``..``, ``/``, NUL)."""
    if not isinstance(name, str) or not name or name in (".", "..") or _NAME_BAD.search(name):
        raise MetadataError(
            f"Invalid name {name!r} at {where}: expected a non-empty name without '/', '\\', NUL, "
            "'.' or '..'. The metadata lists a child that cannot be a store key; fix the listing."
        )
    return name


# Names a writer refuses (issue 15): what our reader or netcdf-c cannot open, found by writing
# every odd name and reading it back with both (tests/write/test_names.py holds the table).
#: object names the formats give a meaning to: a variable or group of that name is read as metadata
METADATA_KEY_NAMES = frozenset({".zarray", ".zattrs", ".zgroup", ".zmetadata", "zarr.json", ".nczarr",
                                ".nczgroup", ".nczvar", ".nczarray", ".nczattr", ".nczattrs"})
#: netcdf-c's NC_MAX_NAME (bytes of UTF-8); longer names: 'Name contains illegal characters'
NC_MAX_NAME = 256
#: a variable or group name is a directory name: most file systems stop at 255 bytes
_KEY_MAX_BYTES = 255
_NC_FIRST_ASCII = re.compile(r"[A-Za-z0-9_]")
_NC_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def name_problem(name: Any, *, key: bool = True, netcdf_c: str | None = "nczarr") -> str | None:
    """Why a writer must refuse ``name``, or None when it is fine.

    ``key``: the name becomes part of store keys (a variable or a group; a dimension does not).
    ``netcdf_c``: the netcdf-c mode the store is meant for ("nczarr", "zarr": the NCZarr rules
    for both) or None (Zarr v3, which netcdf-c 4.10 does not read); see ``netcdf_c_name_problem``.
    """
    if not isinstance(name, str) or not name:
        return "a name must be a non-empty string"
    if name.strip(".") == "":
        return "a name of only periods is a relative path ('.', '..'), not a store key"
    if "/" in name or "\\" in name:
        return "a name cannot hold a path separator ('/', or '\\' on Windows)"
    if "\x00" in name:
        return "a name cannot hold NUL"
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return "a name must be valid Unicode (it holds a lone surrogate, which UTF-8 cannot encode)"
    if key and name in METADATA_KEY_NAMES:
        return f"{name!r} is the name of a Zarr/NCZarr metadata object"
    if key and ":" in name:
        return "a name cannot hold ':' (a drive or stream separator on Windows: the key would not be a file there)"
    if key and size > _KEY_MAX_BYTES:
        return f"a name is a directory name, at most {_KEY_MAX_BYTES} bytes of UTF-8 (this one has {size})"
    # writers apply netcdf-c's NCZarr rules to pure Zarr v2 too: stricter than mode=zarr needs for
    # variables and dimensions, and a store netcdf-c reads in both modes (or converts to .nc)
    return None if netcdf_c is None else netcdf_c_name_problem(name, mode="nczarr", role="any")


def netcdf_c_name_problem(name: str, *, mode: str, role: str) -> str | None:
    """What netcdf-c 4.10.1 (the netCDF4 wheel) does wrong with a store holding ``name``, or None.

    mode="nczarr": its ``NC_check_name`` (libdispatch/dstring.c) refuses the whole store ('NetCDF:
    Name contains illegal characters'), and it normalizes names to NFC (a name that is not NFC is
    not found, or crashes it). mode="zarr" (pure Zarr v2): group names are checked the same way;
    variable and dimension names are not, but variables whose name starts with '.' are skipped.
    ``role``: "variable", "group" or "dimension". Found by writing each name of the table in
    tests/write/test_names.py and opening the store with netCDF4.
    """
    if "/" in name:
        return "netcdf-c reads '/' in a name as a group path"
    if mode == "zarr" and role != "group":
        if role == "variable" and name.startswith("."):
            return "netcdf-c (mode=zarr) skips a variable whose name starts with '.': it would be missing"
        return None
    import unicodedata

    if not (_NC_FIRST_ASCII.match(name) or ord(name[0]) > 0x7F):
        return (f"netcdf-c refuses a name that starts with {name[0]!r} (a name starts with a letter, a digit, "
                "'_' or a non-ASCII character)")
    if _NC_CONTROL.search(name):
        return "netcdf-c refuses a name with a control character (U+0000-U+001F, U+007F)"
    if name[-1] in " \t\n\v\f\r":
        return "netcdf-c refuses a name that ends in white space"
    size = len(name.encode("utf-8", "surrogatepass"))
    if size > NC_MAX_NAME:
        return f"netcdf-c refuses a name longer than {NC_MAX_NAME} bytes of UTF-8 (this one has {size})"
    if unicodedata.normalize("NFC", name) != name:
        return ("netcdf-c normalizes names to Unicode NFC, so it would not find this one (or crash): "
                f"use unicodedata.normalize('NFC', name) = {unicodedata.normalize('NFC', name)!r}")
    return None


# ---------------------------------------------------------------------------------------
# Locating NCZarr keys across generations
# ---------------------------------------------------------------------------------------

# where each generation keeps its keys: one table (formats.netcdf_c.LAYOUTS), newest first
_SUPERBLOCK_PLACES = tuple((o, k, layout) for layout in LAYOUTS for o, k in layout.superblock)
# NCZarr 1.0 superblock keys: the document says "version"; netcdf-c 4.8.0 wrote "nczarr_version"
_VERSION_KEYS = ("version", "nczarr_version")
_GROUP_PLACES = places("group")
_ARRAY_PLACES = places("array")
_ATTR_PLACES = places("attr")
#: the group listing's and array information's keys, every layout's spelling
_DIMS_KEYS = tuple(dict.fromkeys(layout.dims_key for layout in LAYOUTS))
_ARRAYS_KEYS = tuple(dict.fromkeys(layout.arrays_key for layout in LAYOUTS))
_DIMREFS_KEYS = tuple(dict.fromkeys(layout.dimrefs_key for layout in LAYOUTS))


def _lookup(node: NodeObjects, candidates: tuple[tuple[str, str | None], ...]) -> tuple[Any, str] | None:
    for obj_name, key in candidates:
        obj = node.get(obj_name)
        if obj is None:
            continue
        if key is None:
            return obj, obj_name
        if isinstance(obj, Mapping) and key in obj:
            return obj[key], f"{obj_name}:{key}"
    return None


def _expect_mapping(value: Any, *, where: str, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise MetadataError(
            f"Invalid {what} at {where}: got {value!r}, expected a JSON object. "
            "The metadata is damaged; rewrite the store or fix this key by hand."
        )
    return value


def _first(mapping: Mapping[str, Any], *names: str, default: Any = None) -> Any:
    for n in names:
        if n in mapping:
            return mapping[n]
    return default


def _as_int(value: Any, *, where: str, what: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise MetadataError(f"Invalid {what} at {where}: got {value!r}, expected an integer >= {minimum}.")
    try:
        out = int(value)
    except ValueError:
        raise MetadataError(f"Invalid {what} at {where}: got {value!r}, expected an integer >= {minimum}.") from None
    if out < minimum:
        raise MetadataError(f"Invalid {what} at {where}: got {value!r}, expected an integer >= {minimum}.")
    return out


# ---------------------------------------------------------------------------------------
# Groups
# ---------------------------------------------------------------------------------------


def parse_group(node: NodeObjects, *, store: str = "") -> GroupMeta:
    """Parse one group's objects into a ``GroupMeta`` (any NCZarr generation or pure Zarr v2)."""
    where = f"{store}{node.path}"
    _check_zgroup(node, where=where)
    layout, nczarr_version = _superblock(node)
    raw_attrs = node.get(".zattrs")
    raw_attrs = {} if raw_attrs is None else raw_attrs
    raw_attrs = _expect_mapping(raw_attrs, where=f"{where}/.zattrs", what=".zattrs")
    attr_types = _attr_types(node, where=where)

    group_info = _lookup(node, _GROUP_PLACES)
    dims: dict[str, Dimension] = {}
    arrays = groups = None
    if group_info is not None:
        info, place = group_info
        layout = layout or layout_at(place)
        dims, arrays, groups = _group_listing(info, where=f"{where}/{place}")

    default_maxstrlen = None
    if "_nczarr_default_maxstrlen" in raw_attrs:
        default_maxstrlen = _as_int(
            _scalar(raw_attrs["_nczarr_default_maxstrlen"]),
            where=f"{where}/.zattrs",
            what="_nczarr_default_maxstrlen",
            minimum=1,
        )
    attrs = decode_attributes(raw_attrs, attr_types, where=f"{where}/.zattrs", typed=layout is not None or bool(attr_types))
    return GroupMeta(
        path=node.path,
        zarr_format=2,
        generation=layout.generation if layout else ZARR_V2,
        dimensions=dims,
        arrays=arrays,
        groups=groups,
        attrs=attrs,
        attr_types=attr_types,
        default_maxstrlen=default_maxstrlen,
        nczarr_version=nczarr_version,
        nc_properties=raw_attrs.get("_NCProperties") if isinstance(raw_attrs.get("_NCProperties"), str) else None,
    )


def _check_zgroup(node: NodeObjects, *, where: str) -> None:
    """A group's ``.zgroup`` (or NCZarr 1.0's ``.nczgroup``) is there and says Zarr v2."""
    zgroup = node.get(".zgroup")
    if zgroup is None and node.get(".nczgroup") is None:
        raise MetadataError(f"No group at {where}: .zgroup is missing. Expected a Zarr v2 group.")
    if zgroup is not None:
        zgroup = _expect_mapping(zgroup, where=f"{where}/.zgroup", what=".zgroup")
        fmt = zgroup.get("zarr_format", 2)
        if fmt != 2:
            raise UnsupportedError(
                f"Unsupported zarr_format {fmt!r} at {where}/.zgroup: expected 2 here "
                "(Zarr v3 groups are described by zarr.json)."
            )


def _superblock(node: NodeObjects) -> tuple[NCZarrLayout | None, Any]:
    """(NCZarr layout, NCZarr version) by the group's superblock; (None, None) without one (pure
    Zarr v2, or a group below the root)."""
    layout: NCZarrLayout | None = None
    found = _lookup(node, tuple((o, k) for o, k, _ in _SUPERBLOCK_PLACES))
    if found is None:
        return None, None
    sb, place = found
    for o, k, of in _SUPERBLOCK_PLACES:
        if place == (o if k is None else f"{o}:{k}"):
            layout = of
    return layout, (_first(sb, *_VERSION_KEYS) if isinstance(sb, Mapping) else None)


def _group_listing(info: Any, *, where: str) -> tuple[dict[str, Dimension], tuple[str, ...], tuple[str, ...]]:
    """An NCZarr group's own information (at ``where``): its dimensions, arrays and subgroups."""
    info = _expect_mapping(info, where=where, what="_nczarr_group")
    raw_dims = _first(info, *_DIMS_KEYS, default={}) or {}
    raw_dims = _expect_mapping(raw_dims, where=where, what="dimensions")
    dims: dict[str, Dimension] = {}
    for name, spec in raw_dims.items():
        check_name(name, where=f"{where} dimensions")
        if isinstance(spec, Mapping):
            size = _as_int(spec.get("size"), where=where, what=f"size of dimension {name!r}")
            unlimited = bool(spec.get("unlimited", 0))
        else:
            size = _as_int(spec, where=where, what=f"size of dimension {name!r}")
            unlimited = False
        dims[name] = Dimension(name, size, unlimited)
    arrays = tuple(
        check_name(n, where=f"{where} arrays")
        for n in _as_list(_first(info, *_ARRAYS_KEYS, default=[]), where=where)
    )
    groups = tuple(
        check_name(n, where=f"{where} groups")
        for n in _as_list(_first(info, "groups", default=[]), where=where)
    )
    return dims, arrays, groups


def _as_list(value: Any, *, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise MetadataError(f"Invalid listing at {where}: got {value!r}, expected a JSON list of names.")
    return value


def _scalar(value: Any) -> Any:
    """NCZarr 1.0 wrote scalar attributes and fill values as one-element lists."""
    if isinstance(value, list) and len(value) == 1:
        return value[0]
    return value


# ---------------------------------------------------------------------------------------
# Attributes (Appendix G of the NCZarr document)
# ---------------------------------------------------------------------------------------


def _attr_types(node: NodeObjects, *, where: str) -> dict[str, str]:
    found = _lookup(node, _ATTR_PLACES)
    if found is None:
        return {}
    info, place = found
    info = _expect_mapping(info, where=f"{where}/{place}", what="_nczarr_attr")
    types = info.get("types", {})
    types = _expect_mapping(types, where=f"{where}/{place}", what="_nczarr_attr.types")
    out: dict[str, str] = {}
    for name, t in types.items():
        if not isinstance(t, str):
            raise MetadataError(
                f"Invalid attribute type for {name!r} at {where}/{place}: got {t!r}, expected a dtype string."
            )
        out[name] = NC_TYPE_CODES.get(t, t)
    return out


def decode_attributes(
    raw: Mapping[str, Any], types: Mapping[str, str], *, where: str, typed: bool = True
) -> dict[str, Any]:
    """User attributes with their netCDF types; internal ``_nczarr_*`` keys are dropped.

    Typed (NCZarr) attributes come back as netCDF4-python returns them: text as ``str``,
    one numeric value as a numpy scalar, several as a numpy array, string lists as ``list[str]``.
    Untyped (pure Zarr) attributes stay as JSON values, as xarray's zarr engine gives them.
    """
    out: dict[str, Any] = {}
    for name, value in raw.items():
        if name in INTERNAL_ATTRS:
            continue
        t = types.get(name)
        if t is None or not typed:
            out[name] = value
            continue
        out[name] = _typed_attr(name, value, t, where=where)
    return out


def _typed_attr(name: str, value: Any, t: str, *, where: str) -> Any:
    if isinstance(value, bytes) or (isinstance(value, list) and any(isinstance(v, bytes) for v in value)):
        return value  # text that is not UTF-8 (parse_json): its bytes, as stored
    if t in _CHAR_ATTR_TYPES:
        return _char_attr(value)
    if t == "|J0":
        return value
    if t == "string" or re.fullmatch(r"[|<>]?S\d+", t):
        return _string_attr(value)
    return _numeric_attr(name, value, t, where=where)


#: the NCZarr attribute types of NC_CHAR (text)
_CHAR_ATTR_TYPES = frozenset({"char", ">S1", "|S1", "<S1", "|U1", "<U1", ">U1"})


def _char_attr(value: Any) -> str:
    """An NC_CHAR attribute: text; a JSON-valued text attribute was stored as parsed JSON (Appendix G)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "".join(value)
    return unparse_json(value)


def _string_attr(value: Any) -> Any:
    """An NC_STRING attribute: one string, or a list of them (JSON text when not strings)."""
    vals = value if isinstance(value, list) else [value]
    if not all(isinstance(v, str) for v in vals):
        return unparse_json(value)
    return vals[0] if len(vals) == 1 else list(vals)


def _numeric_attr(name: str, value: Any, t: str, *, where: str) -> Any:
    """An attribute of numpy type ``t``: one numeric value as a numpy scalar, several as an array
    (other types, and JSON objects, as stored)."""
    try:
        dtype = np.dtype(t)
    except TypeError:
        raise MetadataError(
            f"Invalid attribute type {t!r} for {name!r} at {where}: expected a numpy dtype string."
        ) from None
    if dtype.kind not in "biuf":
        return value
    if isinstance(value, Mapping) or (
        isinstance(value, list) and any(isinstance(v, list | dict) for v in value)
    ):
        return unparse_json(value)
    try:
        arr = np.array(
            [_json_number(v) for v in (value if isinstance(value, list) else [value])], dtype=dtype
        )
    except (TypeError, ValueError, OverflowError):
        raise MetadataError(
            f"Invalid value for attribute {name!r} at {where}: got {value!r}, expected {t} numbers."
        ) from None
    return arr[0] if arr.size == 1 else arr


def unparse_json(value: Any) -> str:
    """JSON text formatted as netcdf-c un-parses a JSON-valued attribute (``{"a": 1, "b": [1,2]}``)."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {unparse_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(unparse_json(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def _json_number(v: Any) -> Any:
    if isinstance(v, str):
        return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}.get(v, v)
    return v


# ---------------------------------------------------------------------------------------
# Arrays
# ---------------------------------------------------------------------------------------

_SUPPORTED_KINDS = "biufSUO"


def parse_array(
    node: NodeObjects, *, store: str = "", default_maxstrlen: int | None = None, netcdf_c: bool = False
) -> ArrayMetaV2:
    """Parse one array's objects into an ``ArrayMetaV2``; every check names the store key.

    ``netcdf_c`` says the root carries netcdf-c's ``_NCProperties``: then a ``<U1`` array is NC_CHAR
    even in pure-Zarr mode, as netcdf-c <= 4.9.0 wrote it (one byte per element).

    Four steps, each raising its own MetadataError naming the key: the .zarray's storage fields,
    the NCZarr layout's array information, the dimensions (and the scalar marks), the text.
    """
    where = f"{store}{node.path}"
    zarray = node.get(".zarray")
    if zarray is None:
        raise MetadataError(f"No array at {where}: .zarray is missing. Expected a Zarr v2 array.")
    zw = f"{where}/.zarray"
    z = _parse_zarray(_expect_mapping(zarray, where=zw, what=".zarray"), where=zw)
    raw_attrs = node.get(".zattrs")
    raw_attrs = {} if raw_attrs is None else raw_attrs
    raw_attrs = _expect_mapping(raw_attrs, where=f"{where}/.zattrs", what=".zattrs")
    attr_types = _attr_types(node, where=where)
    layout, dimrefs, storage, scalar = _array_info(node, where=where)
    array_dims, scalar = _dimensions(raw_attrs, z.shape, dimrefs, scalar, where=where)
    dtype, string_kind, maxstrlen = _text(z, layout, raw_attrs, where=where, netcdf_c=netcdf_c,
                                          default_maxstrlen=default_maxstrlen)
    fill_value = _parse_fill(
        _scalar(zarray.get("fill_value")), dtype, string_kind, where=zw,
        plain_text=netcdf_c or layout is not None,
    )
    typed = layout is not None or bool(attr_types)
    return ArrayMetaV2(
        path=node.path,
        shape=z.shape,
        chunks=z.chunks,
        dtype=dtype,
        dtype_str=z.dtype_str,
        fill_value=fill_value,
        order=z.order,
        compressor=z.compressor,
        filters=z.filters,
        dimension_separator=z.separator,
        dimension_references=dimrefs,
        array_dimensions=array_dims,
        scalar=scalar,
        attrs=decode_attributes(raw_attrs, attr_types, where=f"{where}/.zattrs", typed=typed),
        attr_types=attr_types,
        string_kind=string_kind,
        maxstrlen=maxstrlen,
        storage=storage,
        generation=layout.generation if layout else ZARR_V2,
        raw_zarray=dict(zarray),
        maxstrlen_attr="_nczarr_maxstrlen" in raw_attrs,
    )


class _ZArray(NamedTuple):
    """A .zarray's storage fields, checked."""

    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype_str: str
    dtype: np.dtype
    order: Literal["C", "F"]
    separator: str
    compressor: Mapping[str, Any] | None
    filters: tuple[Mapping[str, Any], ...]


def _parse_zarray(zarray: Mapping[str, Any], *, where: str) -> _ZArray:
    """The .zarray's fields in their order (shape, chunks, dtype, order, separator, codecs)."""
    zw = where
    if zarray.get("zarr_format", 2) != 2:
        raise UnsupportedError(f"Unsupported zarr_format {zarray.get('zarr_format')!r} at {zw}: expected 2.")
    for key in ("shape", "chunks", "dtype"):
        if key not in zarray:
            raise MetadataError(f"Invalid .zarray at {zw}: required key {key!r} is missing.")
    shape = int_tuple(zarray["shape"], where=zw, what="shape", minimum=0, decimal_strings=True)
    chunks = int_tuple(zarray["chunks"], where=zw, what="chunks", minimum=1, decimal_strings=True)
    if len(chunks) != len(shape):
        raise MetadataError(
            f"Invalid .zarray at {zw}: chunks {list(chunks)} has {len(chunks)} dimensions but shape "
            f"{list(shape)} has {len(shape)}. Expected one chunk length per dimension."
        )
    dtype_str = zarray["dtype"]
    dtype = _parse_dtype(dtype_str, where=zw)
    check_sizes(shape, chunks, dtype.itemsize, where=zw)
    order = zarray.get("order", "C")
    if order not in ("C", "F"):
        raise MetadataError(f"Invalid order {order!r} at {zw}: expected 'C' or 'F'.")
    sep = zarray.get("dimension_separator", ".") or "."
    if sep not in (".", "/"):
        raise MetadataError(f"Invalid dimension_separator {sep!r} at {zw}: expected '.' or '/'.")
    compressor = zarray.get("compressor")
    if compressor is not None:
        compressor = _expect_mapping(compressor, where=zw, what="compressor")
        if "id" not in compressor:
            raise MetadataError(f"Invalid compressor {compressor!r} at {zw}: expected an object with an 'id'.")
    filters_raw = zarray.get("filters") or []
    if not isinstance(filters_raw, list):
        raise MetadataError(f"Invalid filters {filters_raw!r} at {zw}: expected a list or null.")
    filters = tuple(_expect_mapping(f, where=zw, what="filter") for f in filters_raw)
    for f in filters:
        if "id" not in f:
            raise MetadataError(f"Invalid filter {f!r} at {zw}: expected an object with an 'id'.")
    return _ZArray(shape, chunks, dtype_str, dtype, order, sep, compressor, filters)


def _array_info(
    node: NodeObjects, *, where: str
) -> tuple[NCZarrLayout | None, tuple[str, ...] | None, str | None, bool]:
    """The NCZarr array information, wherever the node's layout keeps it: (the layout, None for pure
    Zarr v2; the dimension references; the storage; whether it marks a scalar)."""
    found = _lookup(node, _ARRAY_PLACES)
    if found is None:
        return None, None, None, False
    info, place = found
    info = _expect_mapping(info, where=f"{where}/{place}", what="_nczarr_array")
    dimrefs = None
    refs = _first(info, *_DIMREFS_KEYS, default=None)
    if refs is not None:
        refs = _as_list(refs, where=f"{where}/{place}")
        for r in refs:
            if not isinstance(r, str) or not r:
                raise DimensionError(
                    f"Invalid dimension reference {r!r} at {where}/{place}: expected a fully "
                    "qualified name such as '/x' or '/group/y'."
                )
        dimrefs = tuple(refs)
    storage = info.get("storage")
    return layout_at(place), dimrefs, storage, bool(info.get("scalar", 0)) or storage == "scalar"


def _dimensions(
    raw_attrs: Mapping[str, Any], shape: tuple[int, ...], dimrefs: tuple[str, ...] | None, scalar: bool,
    *, where: str,
) -> tuple[tuple[str, ...] | None, bool]:
    """``_ARRAY_DIMENSIONS`` and whether the array is a scalar, checked against the shape."""
    array_dims = raw_attrs.get("_ARRAY_DIMENSIONS")
    if array_dims is not None:
        if not isinstance(array_dims, list) or not all(isinstance(d, str) and d for d in array_dims):
            raise DimensionError(
                f"Invalid _ARRAY_DIMENSIONS {array_dims!r} at {where}/.zattrs: expected a list of "
                "dimension names, one per array dimension."
            )
        array_dims = tuple(array_dims)
        if array_dims in (("_scalar_",), ()) and shape == (1,):
            scalar = True  # netcdf-c marks scalars "_scalar_" (4.9.0: an empty list)
    scalar = scalar or shape == ()
    if scalar and shape not in ((1,), ()):
        raise MetadataError(
            f"Invalid scalar at {where}/.zarray: marked scalar but shape is {list(shape)}; expected [1]."
        )
    if not scalar:
        if dimrefs is not None and len(dimrefs) != len(shape):
            raise DimensionError(
                f"Dimension references {list(dimrefs)} at {where} name {len(dimrefs)} dimensions "
                f"but the shape {list(shape)} has {len(shape)}. Fix _nczarr_array or .zarray."
            )
        if array_dims is not None and len(array_dims) != len(shape):
            raise DimensionError(
                f"_ARRAY_DIMENSIONS {list(array_dims)} at {where}/.zattrs names {len(array_dims)} "
                f"dimensions but the shape {list(shape)} has {len(shape)}."
            )
    return array_dims, scalar


def _text(
    z: _ZArray, layout: NCZarrLayout | None, raw_attrs: Mapping[str, Any], *, where: str, netcdf_c: bool,
    default_maxstrlen: int | None,
) -> tuple[np.dtype, str | None, int | None]:
    """What text the array holds: (the storage dtype, the string kind, the width in bytes or characters)."""
    dtype = z.dtype
    string_kind, maxstrlen = _string_kind(dtype, z.dtype_str, z.filters, layout, where=f"{where}/.zarray")
    if netcdf_c and z.dtype_str in ("<U1", ">U1", "|U1"):
        string_kind, maxstrlen = "char", None
    if string_kind == "char" and dtype.kind == "U":
        dtype = np.dtype("S1")  # "<U1" in name only: the chunks hold one byte per element
    if "_nczarr_maxstrlen" in raw_attrs:
        maxstrlen = _as_int(
            _scalar(raw_attrs["_nczarr_maxstrlen"]),
            where=f"{where}/.zattrs",
            what="_nczarr_maxstrlen",
            minimum=1,
        )
        if string_kind == "string" and maxstrlen != dtype.itemsize:
            # the dtype is what is stored; the attribute only documents the width.
            maxstrlen = dtype.itemsize
    elif string_kind == "string" and layout is not None and default_maxstrlen is not None:
        maxstrlen = dtype.itemsize
    return dtype, string_kind, maxstrlen


#: numpy's limit: an array (or chunk) may hold at most this many bytes and elements.
MAX_ARRAY_BYTES = np.iinfo(np.intp).max


def check_sizes(shape: tuple[int, ...], chunks: tuple[int, ...], itemsize: int, *, where: str) -> None:
    """Refuse shapes and chunks no array can have (more than ``2**63-1`` bytes); nothing is allocated.

    Huge but representable shapes (``10**15`` elements) are fine: reading is lazy and chunked.
    """
    for what, dims in (("shape", shape), ("chunks", chunks)):
        total = math.prod(dims) * max(itemsize, 1)
        if total > MAX_ARRAY_BYTES:
            raise MetadataError(
                f"Invalid {what} {list(dims)} at {where}: {math.prod(dims)} elements of {itemsize} bytes "
                f"exceed the {MAX_ARRAY_BYTES}-byte maximum of any array. Expected sizes an array can "
                "have; the metadata is damaged."
            )


def _parse_dtype(dtype_str: Any, *, where: str) -> np.dtype:
    if not isinstance(dtype_str, str):
        raise UnsupportedError(
            f"Unsupported dtype {dtype_str!r} at {where}: structured dtypes are not read; "
            "expected a simple numpy dtype string such as '<f4' or '|S8'."
        )
    try:
        dtype = np.dtype(dtype_str)
    except TypeError:
        raise UnsupportedError(
            f"Unsupported dtype {dtype_str!r} at {where}: not a numpy dtype string. "
            "Expected e.g. '<i4', '<f8', '|S8', '<U4', '|O'."
        ) from None
    if dtype.kind not in _SUPPORTED_KINDS or dtype.fields is not None:
        raise UnsupportedError(
            f"Unsupported dtype {dtype_str!r} at {where}: xr_zstrings reads integer, float, bool, "
            "and string dtypes (|Sn, <Un, >Un, |O with vlen-utf8); open this array with zarr-python."
        )
    return dtype


def _string_kind(
    dtype: np.dtype, dtype_str: str, filters: tuple[Mapping[str, Any], ...], layout: NCZarrLayout | None,
    where: str = "",
) -> tuple[str | None, int | None]:
    if dtype.kind == "S":
        if dtype_str == ">S1":
            # netcdf-c's NC_CHAR signature, in nczarr and pure-zarr mode alike (zarr-python writes |S1)
            return "char", None
        return "string", dtype.itemsize
    if dtype.kind == "U":
        if layout is not None and dtype.itemsize == 4 and layout.char_dtype == "<U1":
            # NCZarr 1.0 and netcdf-c <= 4.9.0 wrote NC_CHAR as "<U1" holding one byte per element.
            return "char", None
        return "unicode", dtype.itemsize // 4
    if dtype.kind == "O":
        ids = [f.get("id") for f in filters]
        if "vlen-utf8" in ids:
            return "vlen", None
        if "vlen-bytes" in ids:
            return "vlen-bytes", None
        raise UnsupportedError(
            f"Unsupported object array with filters {ids!r} at {where}: expected a 'vlen-utf8' or 'vlen-bytes' "
            "filter (other object codecs such as pickle or json are not read, for safety)."
        )
    return None, None


def _parse_fill(
    value: Any, dtype: np.dtype, string_kind: str | None, *, where: str, plain_text: bool = False
) -> Any:
    """The fill value as a numpy scalar of the storage dtype (bytes for |S, str for U/vlen)."""
    if value is None:
        return None
    parse = _FILL_BY_KIND.get(dtype.kind, _number_fill)
    try:
        return parse(value, dtype, string_kind, plain_text)
    except (TypeError, ValueError, OverflowError, binascii.Error):
        raise MetadataError(
            f"Invalid fill_value {value!r} at {where}: it does not fit dtype {dtype.str}. Expected a "
            "JSON number (or 'NaN'/'Infinity'), base64 text for |S dtypes, or null."
        ) from None


def nc_char_v2_fill(value: Any) -> bytes:
    """The byte of a Zarr v2 ``>S1`` (NC_CHAR) fill value, as each writer writes it.

    netcdf-c: the character as plain text (its first UTF-8 byte; ``""`` is NUL); the Zarr v2 spec
    (zarr-python, other writers): base64, four characters for one byte (``"eA=="`` is ``b"x"``),
    which one character of netcdf-c's can never be; ``0`` (zarr-python 2's default): NUL.
    """
    if value == 0 and not isinstance(value, bool | str):
        return b""
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    if len(value) == 4:
        try:
            raw = base64.b64decode(value, validate=True)
        except binascii.Error:
            raw = b"--"
        if len(raw) == 1:
            return raw
    return value.encode("utf-8")[:1]


def _bytes_fill(value: Any, dtype: np.dtype, string_kind: str | None, plain_text: bool) -> Any:
    if string_kind == "char" and dtype.itemsize == 1:
        return np.array(nc_char_v2_fill(value), dtype=dtype)[()]
    if not isinstance(value, str):
        raise TypeError
    if plain_text or string_kind == "char" or value == "":
        # netcdf-c writes string and char fill values as plain text; zarr-python as base64
        raw = value.encode("utf-8")[: dtype.itemsize]
    else:
        raw = base64.b64decode(value, validate=True)
    return np.array(raw, dtype=dtype)[()]


def _unicode_fill(value: Any, dtype: np.dtype, string_kind: str | None, plain_text: bool) -> Any:
    if not isinstance(value, str):
        raise TypeError
    return np.array(value, dtype=dtype)[()]


def _object_fill(value: Any, dtype: np.dtype, string_kind: str | None, plain_text: bool) -> Any:
    if isinstance(value, Mapping | list):
        raise TypeError  # zarr-python 2 wrote 0 for object arrays (ignored); never an object
    return value if isinstance(value, str | bytes) else None


def _bool_fill(value: Any, dtype: np.dtype, string_kind: str | None, plain_text: bool) -> Any:
    return np.bool_(bool(value))


def _number_fill(value: Any, dtype: np.dtype, string_kind: str | None, plain_text: bool) -> Any:
    v = _json_number(value)
    if isinstance(v, str):
        raise TypeError
    if dtype.kind == "f" and math.isfinite(v) and v != 0:
        for exact in (_NC_FILL_DOUBLE, _NC_FILL_FLOAT):
            if abs(v - exact) <= 1e-5 * exact:
                v = exact
    if dtype.kind in "iu":
        v = _integer_in_range(v, dtype)
    return np.array(v, dtype=dtype)[()]


def _integer_in_range(v: Any, dtype: np.dtype) -> Any:
    """An integer fill (an integral float taken as one) within ``dtype``'s range (else TypeError /
    OverflowError)."""
    if isinstance(v, float):
        if not v.is_integer():
            raise TypeError
        v = int(v)
    info = np.iinfo(dtype)
    if not info.min <= v <= info.max:
        raise OverflowError
    return v


#: how ``_parse_fill`` reads a fill value, by the storage dtype's kind (numbers: ``_number_fill``)
_FILL_BY_KIND: dict[str, Callable[[Any, np.dtype, str | None, bool], Any]] = {
    "S": _bytes_fill, "U": _unicode_fill, "O": _object_fill, "b": _bool_fill,
}
