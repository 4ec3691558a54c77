"""How a variable's stored values become what the reader returns: one :class:`Decode` member per
(stored layout, result) pair, chosen once per variable (``read.variables``) and asked by everything
that reads it (``LazyArray``, the chunk readers, the backend) instead of comparing mode strings.

A ``StrEnum``: a member equals its name ("fixed", "char", ...), so mode names given as strings
still compare and convert (``Decode("char")``).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..formats.array import ArrayMeta

__all__ = ["Decode"]


class Decode(enum.StrEnum):
    """The decode modes; the groups they fall into are the properties below (one table)."""

    NUMERIC = "numeric"  # numbers (and anything not text): the stored dtype, native byte order
    FIXED = "fixed"  # NC_STRING |Sn: UTF-8, a value ends at its first NUL (netcdf-c)
    TEXT_S = "text-S"  # |Sn with _Encoding: only trailing NULs end a value (numpy's, xarray's rule)
    CHAR = "char"  # NC_CHAR rows (..., nchar) joined along the last axis and decoded
    CHAR_SEP = "char-sep"  # NC_CHAR, each character a value of its own (decoded)
    CHAR_RAW = "char-raw"  # NC_CHAR as its S1 characters, not decoded
    UNICODE = "unicode"  # Zarr v2 <Un / >Un (UTF-32)
    VLEN = "vlen"  # Zarr v2 |O + vlen-utf8: chunks decode to objects
    TEXT = "text"  # Zarr v3 string: chunks decode straight to StringDType
    VLEN_BYTES = "vlen-bytes"  # variable-length bytes: an object array of bytes
    BYTES = "bytes"  # |Sn returned as stored
    BYTES_OBJ = "bytes-obj"  # |S1 NC_STRING as an object array of bytes (xarray must not join it)
    BYTES_CHAR = "bytes-char"  # NC_CHAR characters joined, not decoded
    BYTES_UNICODE = "bytes-unicode"  # UTF-32 code points as their UTF-8 bytes
    ZARR_PYTHON = "zarr-python"  # not decoded here: read through zarr-python

    @property
    def text(self) -> bool:
        """The result is str (``string_dtype`` applies)."""
        return self in _TEXT

    @property
    def as_bytes(self) -> bool:
        """The result is the stored bytes: xarray's own CF decoding masks a bytes fill in it."""
        return self in _BYTES

    @property
    def objects(self) -> bool:
        """The result is an object array (of bytes)."""
        return self in _OBJECTS

    @property
    def joins_chars(self) -> bool:
        """The stored last axis holds a value's characters: the result drops it."""
        return self in _JOINS_CHARS

    @property
    def keeps_chars(self) -> bool:
        """NC_CHAR read as one value per character: xarray must not join them again."""
        return self in _KEEPS_CHARS

    @property
    def fixed_width(self) -> bool:
        """Fixed-width bytes (``|Sn``) decoded as UTF-8 text."""
        return self in _FIXED_WIDTH

    @property
    def trailing_nuls_only(self) -> bool:
        """Only trailing NULs end a value (NC_CHAR, ``|Sn`` with ``_Encoding``); else the first NUL."""
        return self in _TRAILING_NULS_ONLY

    @property
    def variable_length(self) -> bool:
        """Variable-length text: chunks never written may be missing values (``fill_value: null``)."""
        return self in _VARIABLE_LENGTH

    def stored_width(self, meta: ArrayMeta, shape: tuple[int, ...]) -> int | None:
        """The most characters a value can have, from the stored width (None: only the data says:
        variable-length text); what a fixed-width ``U`` result is sized to."""
        if self.fixed_width:
            return int(meta.dtype.itemsize)
        if self is Decode.UNICODE:
            return int(meta.dtype.itemsize) // 4
        if self is Decode.CHAR_SEP:
            return 1
        if self is Decode.CHAR:
            return shape[-1] if shape else 1
        return None


_TEXT = frozenset({Decode.FIXED, Decode.TEXT_S, Decode.CHAR, Decode.CHAR_SEP, Decode.UNICODE, Decode.VLEN,
                   Decode.TEXT})
_BYTES = frozenset({Decode.BYTES, Decode.BYTES_OBJ, Decode.BYTES_CHAR, Decode.BYTES_UNICODE, Decode.CHAR_RAW,
                    Decode.VLEN_BYTES})
_OBJECTS = frozenset({Decode.VLEN_BYTES, Decode.BYTES_OBJ, Decode.BYTES_UNICODE})
_JOINS_CHARS = frozenset({Decode.CHAR, Decode.BYTES_CHAR})
_KEEPS_CHARS = frozenset({Decode.CHAR_RAW, Decode.CHAR_SEP})
_FIXED_WIDTH = frozenset({Decode.FIXED, Decode.TEXT_S})
_TRAILING_NULS_ONLY = frozenset({Decode.TEXT_S, Decode.CHAR})
_VARIABLE_LENGTH = frozenset({Decode.VLEN, Decode.TEXT})
