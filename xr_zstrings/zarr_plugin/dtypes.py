"""zarr-python data types for the string layouts zarr-python has no type for.

* :class:`NCChar`: netcdf-c's NC_CHAR, ``">S1"`` in a Zarr v2 ``.zarray`` (one byte per element; the
  spelling ``">S1"``, not zarr-python's ``"|S1"``, is what tells netcdf-c it is NC_CHAR, not a
  one-byte NC_STRING), and ``xr_zstrings.nc_char`` in the Zarr v3 stores ``xr_zstrings.migrate``
  writes. Elements are ``np.bytes_`` of ``S1``, as netcdf-c and engine="zstrings"
  (``string_dtype="bytes"``, ``concat_characters=False``) give them.
* :class:`ZarrsOptional`: zarrs' nullable ``optional`` data type (also ``zarrs.optional``) over
  ``string`` or ``bytes``: an object array with NaN for a missing element, the missing value of
  engine="zstrings"' text result (:data:`MISSING`: zarr-python refuses a fill value of None, and a
  never-written chunk of a ``fill_value: null`` array must read as missing too); its codec is
  :class:`~.codecs.ZarrsOptionalCodec`.

Neither type is ever inferred from a numpy dtype (``from_native_dtype`` declines every dtype):
``S1`` stays zarr-python's ``NullTerminatedBytes`` and ``object`` stays ambiguous, so installing
the plugin changes nothing for data zarr-python already reads or writes. Use them explicitly
(``zarr.create_array(..., dtype=NCChar())``) to write them.

The JSON forms are those ``formats.zarr3`` and ``formats.nczarr`` parse; fill values follow the
same rules as our readers (NC_CHAR in v2: netcdf-c's plain text or the v2 spec's base64; one character, the
byte's code point, in v3; ``optional``: ``null`` or a one-element list).
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import numpy as np
import zarr.errors
from zarr.core.dtype.common import HasObjectCodec
from zarr.dtype import ZDType

from ..formats.nczarr import nc_char_v2_fill
from ..formats.zarr3 import NC_CHAR_DATA_TYPE, OPTIONAL_DATA_TYPES

__all__ = ["MISSING", "DataTypeValidationError", "NCChar", "ZarrsOptional", "is_missing"]

# public in both supported lines: zarr.dtype (3.1) and zarr.errors (3.2 and later)
DataTypeValidationError: type[Exception] = cast(
    "type[Exception]", getattr(zarr.errors, "DataTypeValidationError", None) or zarr.dtype.DataTypeValidationError)

_NC_CHAR_V2 = ">S1"

#: a missing element of zarrs' optional type in zarr-python (pandas and xarray read NaN as missing)
MISSING = np.nan


def is_missing(v: Any) -> bool:
    """None or NaN: a missing element of zarrs' optional type."""
    return v is None or (isinstance(v, float) and math.isnan(v))


def _v2_name(data: Any) -> Any:
    return data.get("name") if isinstance(data, dict) and data.get("object_codec_id") is None else None


def _v3_name(data: Any) -> tuple[Any, dict]:
    """(name, configuration) of a v3 data type JSON (a bare name or an object)."""
    if isinstance(data, str):
        return data, {}
    if isinstance(data, dict) and set(data) <= {"name", "configuration"}:
        cfg = data.get("configuration") or {}
        return data.get("name"), cfg if isinstance(cfg, dict) else {"invalid": cfg}
    return None, {}


def _cast_error(data: object, zdtype: ZDType, expected: str) -> str:
    """zarr-python's wording for a scalar a data type cannot hold (its BaseTestZDType matches it)."""
    return (f"Cannot convert object {data!r} with type {type(data)} to a scalar compatible with the "
            f"data type {zdtype}. Expected {expected}.")


@dataclass(frozen=True, kw_only=True)
class NCChar(ZDType[np.dtypes.BytesDType, np.bytes_]):
    """netcdf-c's NC_CHAR: ``">S1"`` (Zarr v2), ``xr_zstrings.nc_char`` (Zarr v3); ``S1`` elements."""

    dtype_cls = np.dtypes.BytesDType
    _zarr_v3_name: ClassVar[str] = NC_CHAR_DATA_TYPE

    @classmethod
    def from_native_dtype(cls, dtype: Any) -> NCChar:
        """Never inferred: numpy's ``S1`` is zarr-python's NullTerminatedBytes (``"|S1"``)."""
        raise DataTypeValidationError(
            f"{cls.__name__} is never inferred from a numpy dtype (got {dtype}); pass dtype=NCChar() "
            "explicitly to write netcdf-c's NC_CHAR")

    def to_native_dtype(self) -> np.dtypes.BytesDType:
        return np.dtype("S1")  # type: ignore[return-value]  # a BytesDType; numpy's stubs say dtype[bytes_]

    @classmethod
    def _from_json_v2(cls, data: Any) -> NCChar:
        if _v2_name(data) == _NC_CHAR_V2:
            return cls()
        raise DataTypeValidationError(f"Invalid JSON representation of {cls.__name__}. Got {data!r}, "
                                      f"expected {{'name': '>S1', 'object_codec_id': None}}")

    @classmethod
    def _from_json_v3(cls, data: Any) -> NCChar:
        name, cfg = _v3_name(data)
        if name == cls._zarr_v3_name and not cfg:
            return cls()
        raise DataTypeValidationError(f"Invalid JSON representation of {cls.__name__}. Got {data!r}, "
                                      f"expected {cls._zarr_v3_name!r}")

    def to_json(self, zarr_format: int) -> Any:
        if zarr_format == 2:
            return {"name": _NC_CHAR_V2, "object_codec_id": None}
        return self._zarr_v3_name

    def _check_scalar(self, data: object) -> bool:
        return isinstance(data, bytes | str | np.bytes_ | np.str_) and len(self._as_bytes(data)) <= 1

    @staticmethod
    def _as_bytes(data: Any) -> bytes:
        return data.encode("utf-8") if isinstance(data, str) else bytes(data)

    def cast_scalar(self, data: object) -> np.bytes_:
        if not self._check_scalar(data):
            raise TypeError(_cast_error(data, self, "one byte (or b'' for NUL)"))
        return np.bytes_(self._as_bytes(data))

    def default_scalar(self) -> np.bytes_:
        return np.bytes_(b"")

    def from_json_scalar(self, data: Any, *, zarr_format: int) -> np.bytes_:
        """Zarr v2: netcdf-c's plain text or the v2 spec's base64 (``formats.nczarr.nc_char_v2_fill``, as
        engine="zstrings" reads it); Zarr v3: at most one character, the byte's code point (``formats.zarr3``)."""
        if zarr_format == 2:
            try:
                return np.bytes_(nc_char_v2_fill(data))
            except TypeError:
                raise TypeError(f"Invalid NC_CHAR fill value {data!r}: expected one character (netcdf-c), "
                                "base64 of one byte (the Zarr v2 spec) or 0") from None
        if isinstance(data, str) and len(data) <= 1 and (not data or ord(data) <= 0xFF):
            return np.bytes_(data.encode("latin-1"))
        raise TypeError(f"Invalid NC_CHAR fill value {data!r}: expected a string of one character")

    def to_json_scalar(self, data: object, *, zarr_format: int) -> Any:
        raw = bytes(self.cast_scalar(data)).rstrip(b"\0")
        if zarr_format == 2 and raw and raw[0] >= 0x80:
            raise ValueError(f"NC_CHAR fill value {raw!r}: a byte above 0x7f has no plain-text form that "
                             "netcdf-c and engine='zstrings' read back as that byte; use an ASCII fill value")
        return raw.decode("latin-1")


#: the inner data types read (the Arrow layout's large_* too: the codec decodes every layout)
_INNER = {"string": "str", "large_string": "str", "bytes": "bytes", "variable_length_bytes": "bytes",
          "binary": "bytes", "large_binary": "bytes"}


@dataclass(frozen=True, kw_only=True)
class ZarrsOptional(ZDType[np.dtypes.ObjectDType, Any], HasObjectCodec):
    """zarrs' nullable ``optional`` type over ``string``/``bytes``: objects, ``None`` when missing.

    ``name`` is the spelling read (``optional`` or ``zarrs.optional``), written back unchanged;
    ``inner`` the inner data type's name. An object codec (zarr-python's ``HasObjectCodec``) so that
    ``create_array`` without ``serializer=ZarrsOptionalCodec...`` refuses before writing metadata
    (zarr-python's default ``bytes`` codec cannot encode objects).
    """

    dtype_cls = np.dtypes.ObjectDType
    object_codec_id: ClassVar[str] = OPTIONAL_DATA_TYPES[1]
    _zarr_v3_name: ClassVar[str] = OPTIONAL_DATA_TYPES[1]
    name: str = OPTIONAL_DATA_TYPES[1]
    inner: str = "string"

    def __post_init__(self) -> None:
        if self.inner not in _INNER or self.name not in OPTIONAL_DATA_TYPES:
            raise ValueError(f"ZarrsOptional(name={self.name!r}, inner={self.inner!r}): expected a name in "
                             f"{OPTIONAL_DATA_TYPES} over one of {sorted(_INNER)}")

    @property
    def kind(self) -> str:
        """``"str"`` or ``"bytes"``."""
        return _INNER[self.inner]

    @classmethod
    def from_native_dtype(cls, dtype: Any) -> ZarrsOptional:
        """Never inferred: an object dtype names no Zarr data type."""
        raise DataTypeValidationError(f"{cls.__name__} is never inferred from a numpy dtype (got {dtype})")

    def to_native_dtype(self) -> np.dtypes.ObjectDType:
        return np.dtype(object)  # type: ignore[return-value]  # an ObjectDType; numpy's stubs say dtype[object_]

    @classmethod
    def _from_json_v2(cls, data: Any) -> ZarrsOptional:
        raise DataTypeValidationError(f"{cls.__name__} is a Zarr v3 data type; got Zarr v2 JSON {data!r}")

    @classmethod
    def _from_json_v3(cls, data: Any) -> ZarrsOptional:
        name, cfg = _v3_name(data)
        if name in OPTIONAL_DATA_TYPES:
            inner, inner_cfg = _v3_name(cfg)
            if inner in _INNER and not inner_cfg:
                return cls(name=name, inner=inner)
            # not ours: zarr-python's registry tries the next data type only after this error
            raise DataTypeValidationError(
                f"Invalid JSON representation of {cls.__name__}. Got {data!r}: xr_zstrings reads zarrs' "
                f"optional over {sorted(_INNER)} without configuration; open other inner types with zarrs")
        raise DataTypeValidationError(f"Invalid JSON representation of {cls.__name__}. Got {data!r}, "
                                      f"expected one of {OPTIONAL_DATA_TYPES}")

    def to_json(self, zarr_format: int) -> Any:
        if zarr_format == 2:
            raise DataTypeValidationError(
                f"{self} has no Zarr v2 form: zarrs' optional data type exists in Zarr v3 only; "
                "create the array with zarr_format=3")
        return {"name": self.name, "configuration": {"name": self.inner, "configuration": {}}}

    def _check_scalar(self, data: object) -> bool:
        return is_missing(data) or isinstance(data, str if self.kind == "str" else bytes)

    def cast_scalar(self, data: object) -> Any:
        if isinstance(data, np.generic):
            data = data.item()
        if not self._check_scalar(data):
            raise TypeError(_cast_error(data, self, f"None, NaN or a {self.kind}"))
        return MISSING if is_missing(data) else data

    def default_scalar(self) -> Any:
        return MISSING

    def from_json_scalar(self, data: Any, *, zarr_format: int) -> Any:
        """``null`` (missing: :data:`MISSING`) or ``[value]`` (zarr-extensions data-types/optional)."""
        if data is None:
            return MISSING
        if isinstance(data, list) and len(data) == 1:
            v = data[0]
            if self.kind == "str" and isinstance(v, str):
                return v
            if self.kind == "bytes" and isinstance(v, str):
                return base64.b64decode(v)
            if self.kind == "bytes" and isinstance(v, list) and all(isinstance(b, int) for b in v):
                return bytes(v)
        raise TypeError(f"Invalid {self.name} fill value {data!r}: expected null or a one-element list")

    def to_json_scalar(self, data: object, *, zarr_format: int) -> Any:
        v = self.cast_scalar(data)
        if is_missing(v):
            return None
        return [v if isinstance(v, str) else base64.b64encode(v).decode("ascii")]
