"""The write plan: what each variable becomes on disk (dtype, shape, chunks, codecs, fill, attributes).

``_plan_group`` turns one group's variables into ``_Array`` descriptions: strings as NC_STRING ``|Sn``
or NC_CHAR ``>S1`` (via ``strings``), everything else CF-encoded to numbers; ``_zarray``,
``_array_zattrs`` and ``_group_zattrs`` give the metadata objects netcdf-c writes for them.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import numpy as np
import pandas as pd
import xarray as xr
from xarray import conventions

from .. import __version__
from ..codecs import vocabulary
from ..codecs.encoding import netcdf4_codecs, netcdf_c_unreadable, v2_config, v2_terms
from ..codecs.v2 import ChunkPipeline
from ..errors import DimensionError, StringTruncationWarning, UnsupportedError, ZStringsError, user_stacklevel
from ..formats import netcdf_c as netcdf_c_table
from ..formats.nczarr import NC_FILL_VALUES, name_problem
from ..formats.nczarr_json import attrs_json, json_value
from ..formats.netcdf_c import CURRENT, DEFAULT_LAYOUT, NCZARR_VERSION, NCZarrLayout
from ..io.redact import shown
from ..text import fixed as strings
from ..text.kind import is_dask as _is_dask
from ..text.kind import text_kind
from ..text.nc_char import encode_char_array
from ..text.policy import OnOverflow, overflow_error, position_label, what_prefix

Format = Literal["nczarr", "zarr2"]

#: ``to_nczarr``'s default target (formats.netcdf_c: the layout every netcdf-c from 4.9.1 through 4.10 reads)
DEFAULT_NETCDF_C = netcdf_c_table.DEFAULT_NETCDF_C


#: Compressor ids that the current netcdf-c decodes in NCZarr (codecs/vocabulary.py's table)
NETCDF_C_CODECS = vocabulary.NETCDF_C_CODECS

_NCPROPERTIES = f"version=2,xr_zstrings={__version__},nczarr={NCZARR_VERSION}"
_CHUNK_TARGET_BYTES = 4 << 20  # default chunks aim at ~4 MiB (netcdf-c writes small arrays whole)
_WHOLE_BYTES = 16 << 20  # arrays up to this size are one chunk, as netcdf-c does


# ---------------------------------------------------------------------------------------------
# The plan: what each array looks like on disk
# ---------------------------------------------------------------------------------------------


@dataclass
class _Array:
    """One array to write: its on-disk description plus a way to produce storage blocks."""

    group: str
    name: str
    dims: tuple[str, ...]  # storage dimensions (NC_CHAR: with the string-length dimension)
    ref_hints: tuple[str | None, ...]
    unlimited: frozenset[str]
    shape: tuple[int, ...]  # storage shape; () for scalars (stored as [1])
    chunks: tuple[int, ...]
    dtype: np.dtype
    dtype_str: str
    fill_json: Any
    fill_storage: Any
    compressor: dict[str, Any] | None
    filters: list[dict[str, Any]] | None
    attrs: dict[str, Any]
    kind: str | None  # "numeric", "string", "char", "bytes"; None: stored values rewritten as they are
    data: Any  # numpy storage array, or a dask array of logical values
    encode_block: Callable[[np.ndarray], tuple[np.ndarray, int]] | None = None  # dask: logical -> storage
    maxstrlen: int | None = None
    dimrefs: tuple[str, ...] = ()
    pipeline: ChunkPipeline | None = field(default=None, repr=False)
    #: the chunk keys' separator: "." as netcdf-c writes them; an append takes the stored array's
    separator: str = "."

    @property
    def path(self) -> str:
        return f"{self.group.rstrip('/')}/{self.name}"

    @property
    def scalar(self) -> bool:
        return self.shape == ()

    @property
    def key(self) -> str:
        return self.path.strip("/")


def _what(group: str, name: Hashable) -> str:
    return f"variable {f'{group.rstrip(chr(47))}/{name}'!r}"


def held_otherwise(what: str, store: str, extend: str) -> ZStringsError:
    """The refusal of ``mode="a"`` adding ``what`` (a variable) that ``store`` already holds with
    other values or shape (both formats' writers); ``extend``: how to extend it instead."""
    return ZStringsError(f"Cannot add {what}: {store} already holds it with other values or shape. mode='a' adds new "
                         f"variables (and leaves identical ones alone); use {extend} to extend it, or mode='w' to "
                         "rewrite the store.")


def check_names(groups: Mapping[str, xr.Dataset], *, netcdf_c: str | None, target: Any) -> None:
    """Refuse, before anything is written, every group, variable or dimension name that our
    reader or netcdf-c (in mode ``netcdf_c``: "nczarr", "zarr"; None for Zarr v3) could not open,
    naming each and the rule it breaks."""
    bad: list[str] = []
    for path, ds in groups.items():
        gpath = "/" if path in ("/", "") else "/" + path.strip("/")
        if gpath != "/":
            for part in gpath.strip("/").split("/"):
                rule = name_problem(part, key=True, netcdf_c=netcdf_c)
                if rule is not None:
                    bad.append(f"group {gpath!r}: {rule}")
                    break
        for name in ds.variables:
            rule = name_problem(str(name), key=True, netcdf_c=netcdf_c)
            if rule is not None:
                bad.append(f"{_what(gpath, name)}: {rule}")
        dims = {str(d) for d in ds.dims}
        dims |= {str(v.encoding["char_dim_name"]) for v in ds.variables.values() if v.encoding.get("char_dim_name")}
        for d in sorted(dims):
            rule = name_problem(d, key=False, netcdf_c=netcdf_c)
            if rule is not None:
                bad.append(f"dimension {d!r} in group {gpath!r}: {rule}")
    if bad:
        listed = "; ".join(dict.fromkeys(bad[:10])) + (f"; and {len(bad) - 10} more" if len(bad) > 10 else "")
        raise ZStringsError(
            f"Cannot write to {shown(target)}: {listed}. Nothing was written. Rename them first, e.g. "
            "ds.rename({old: new}) (dimensions too), or DataTree nodes with tree.rename(...)."
        )


def string_fill(var: xr.Variable) -> Any:
    """A text variable's ``_FillValue`` (attribute, else encoding), or None. The marker
    engine="zstrings" puts in the encoding of strings whose missing values have no fill of their
    own (``zstrings_missing_marker``) is for xarray's writers: ours write those values their own
    way (zarrs' optional type, or a refusal naming the fix), so it is not a fill value here."""
    if "_FillValue" in var.attrs:
        return var.attrs["_FillValue"]
    if var.encoding.get("zstrings_missing_marker"):
        return None
    return var.encoding.get("_FillValue")


def _codecs_from_encoding(
    enc: Mapping[str, Any], default: Any, *, where: str, strict: bool
) -> tuple[dict[str, Any] | None, list[dict[str, Any]] | None]:
    """Compressor and filters from zarr-style (``compressor``/``filters``, or ``compressors`` in
    either vocabulary) or netCDF4-style (``zlib``/``compression``/``complevel``/``shuffle``)
    encodings, as netcdf-c writes them; refuse what netcdf-c cannot read when ``strict``."""
    if "compressors" in enc and "compressor" not in enc:
        # xarray with zarr-python 3 records a tuple of compressors (zarr v2 holds at most one)
        enc = v2_terms(enc, where=where)
        if isinstance(enc["compressor"], list):
            raise UnsupportedError(
                f"Cannot write {where} with {len(enc['compressor'])} compressors: Zarr v2 (and netcdf-c) hold one. "
                "Keep one in encoding['compressors'] (or set encoding['compressor'])."
            )
    comp, filters = _asked_codecs(enc, default, where=where)
    level = None if comp is None or "level" in comp else vocabulary.written_level(comp.get("id"))
    if comp is not None and level is not None:
        comp["level"] = level  # (netcdf-c crashes reading zstd or bz2 without one)
    for f in filters:
        if f.get("id") == "shuffle":
            f.clear()
            f.update({"id": "shuffle", "elementsize": 0})  # netcdf-c shuffles by the element size
    bad = netcdf_c_unreadable(comp, filters) if strict else []
    if bad:
        raise UnsupportedError(
            f"Cannot write {where} with codec {bad[0]!r}: netcdf-c {CURRENT.example} cannot read it (it reads the "
            f"compressors {sorted(NETCDF_C_CODECS)} and the 'shuffle' filter). Use e.g. "
            "encoding={'compressor': {'id': 'zstd', 'level': 3}}, or pass netcdf_c_codecs_only=False "
            "to write it anyway for other Zarr readers."
        )
    return comp, (filters or None)


def _asked_codecs(enc: Mapping[str, Any], default: Any, *, where: str) -> tuple[dict[str, Any] | None,
                                                                                list[dict[str, Any]]]:
    """The encoding's own codecs as v2 config dicts: its zarr keys, else its netCDF4 keys, else ``default``."""
    if "compressor" in enc or enc.get("filters"):
        return (v2_config(enc.get("compressor"), where=where) or None,
                [v2_config(f, where=where) for f in (enc.get("filters") or [])])
    netcdf4 = netcdf4_codecs(enc)
    if netcdf4 is not None:
        return netcdf4
    return (v2_config(default, where=where) or None) if default is not None else None, []


def _default_chunks(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """One chunk for small arrays (as netcdf-c writes them); ~4 MiB chunks otherwise."""
    shape = tuple(n if n > 0 else 1024 for n in shape)
    if math.prod(shape) * itemsize <= _WHOLE_BYTES:
        return tuple(max(1, n) for n in shape)
    chunks = list(shape)
    target = max(1, _CHUNK_TARGET_BYTES // max(itemsize, 1))
    while math.prod(chunks) > target:
        i = int(np.argmax(chunks))
        if chunks[i] <= 1:
            break
        chunks[i] = math.ceil(chunks[i] / 2)
    return tuple(chunks)


def _pick_chunks(
    var: xr.Variable, shape: tuple[int, ...], itemsize: int, extra: tuple[int, ...], unlimited: set[str]
) -> tuple[int, ...]:
    """Chunks from ``encoding["chunks"]`` / ``["chunksizes"]``, else dask's, else a default.

    ``shape`` is the storage shape; ``extra`` the string-length dimension of NC_CHAR (always one chunk).
    """
    logical = shape[: len(shape) - len(extra)]
    enc = var.encoding
    want = enc.get("chunks") or enc.get("chunksizes")
    if want is not None and not isinstance(want, tuple | list):
        want = None
    if want is not None and len(want) == len(shape):
        want = tuple(want)[: len(logical)]
    if want is not None and len(want) != len(logical):
        want = None
    if want is None and _is_dask(var.data):
        want = tuple(max(c) if c else 1 for c in var.data.chunks)
    if want is None:
        return _default_chunks(shape, itemsize)[: len(logical)] + extra
    out = []
    for c, n, d in zip(want, logical, var.dims, strict=True):
        c = max(1, int(c))
        if d not in unlimited and n > 0:
            c = min(c, n)
        out.append(c)
    return tuple(out) + extra


# ---------------------------------------------------------------------------------------------
# Strings
# ---------------------------------------------------------------------------------------------


def _str_lengths(block: np.ndarray, fill: str | None, what: str) -> np.ndarray:
    """UTF-8 lengths of a block of str, missing values counted as the fill value (or refused)."""
    return _filling_missing(strings.utf8_lengths, block, fill, what)


def _utf8_longest(block: np.ndarray, fill: str | None, what: str) -> np.ndarray:
    """The longest UTF-8 encoding in a block of str (for widths of dask-backed variables)."""
    lengths = _str_lengths(block, fill, what)
    n = int(lengths.max()) if lengths.size else 0
    return np.full((1,) * max(np.ndim(block), 1), n, np.int64)


def _over_count(block: np.ndarray, width: int, fill: str | None, what: str) -> int:
    return int((_str_lengths(block, fill, what) > width).sum())


@dataclass
class _Options:
    fmt: Format
    on_overflow: OnOverflow
    maxstrlen: Mapping[str, int] | int | None
    default_maxstrlen: int | None
    compressor: Any
    strict_codecs: bool
    #: the NCZarr layout (``fmt="nczarr"``; pure Zarr v2 ignores it)
    layout: NCZarrLayout = DEFAULT_LAYOUT


def _width_for(name: str, path: str, var: xr.Variable, opts: _Options) -> int | None:
    m = opts.maxstrlen
    if isinstance(m, Mapping):
        for key in (path, path.lstrip("/"), name):
            if key in m:
                return int(m[key])
    elif m is not None:
        return int(m)
    if var.encoding.get("maxstrlen") is not None:
        return int(var.encoding["maxstrlen"])
    return opts.default_maxstrlen


@dataclass
class _Text:
    """A string variable as asked to be written, before its width is known: NC_CHAR (``>S1`` and a
    string-length dimension) or NC_STRING (``|Sn``), its values, attributes and string fill value."""

    group: str
    name: str
    #: "str"; "bytes" (fixed bytes values); "rawchar" (one-byte chars whose dimensions are kept)
    kind: str
    char: bool
    data: Any
    dask: bool
    dims: tuple[str, ...]
    hints: list[str | None]
    attrs: dict[str, Any]  # without _Encoding and _FillValue, which the plan writes back
    had_encoding: bool
    text_encoding: str
    fill: str | None

    @property
    def what(self) -> str:
        return _what(self.group, self.name)

    @property
    def path(self) -> str:
        return f"{self.group.rstrip('/')}/{self.name}"

    @property
    def block_what(self) -> str:
        """The values an error counts in: the variable, or (dask) the block being written."""
        return f"{self.what} (a dask block of it)" if self.dask else self.what


def _string_array(
    group: str, name: str, var: xr.Variable, kind: str, opts: _Options, unlimited: set[str]
) -> _Array:
    """Plan an NC_STRING (``|Sn``) or NC_CHAR (``>S1`` + string-length dimension) array: what is
    asked, the values encoded at their width (which a fill value or NC_CHAR's minimum may widen),
    then the array of that type."""
    text = _text_asked(group, name, var, kind)
    if text.kind == "rawchar":
        return _raw_char_array(text, var, unlimited)
    stored, width, encode_block = _encode_text(text, var, opts)
    if text.char:
        return _char_array(text, var, stored, width, encode_block, unlimited)
    return _fixed_array(text, var, stored, width, encode_block, unlimited)


def _text_asked(group: str, name: str, var: xr.Variable, kind: str) -> _Text:
    """Which netCDF type a string variable asks for (its encoding, its values' type), and its fill."""
    enc = var.encoding
    attrs = dict(var.attrs)
    nc_type = enc.get("nc_type")
    enc_dtype = enc.get("dtype")
    want_char = nc_type == "NC_CHAR" or (
        nc_type is None and enc_dtype is not None and not isinstance(enc_dtype, type)
        and np.dtype(enc_dtype) == np.dtype("S1")
    )
    data = var.data
    dask = _is_dask(data)
    dims = tuple(str(d) for d in var.dims)
    if kind == "bytes":
        data, kind, want_char = _bytes_asked(data, dask, dims, want_char, enc, attrs)
    had_encoding = "_Encoding" in attrs or "_Encoding" in enc
    text_encoding = str(attrs.pop("_Encoding", enc.get("_Encoding", "utf-8")))
    attrs.pop("_FillValue", None)
    return _Text(group=group, name=name, kind=kind, char=want_char, data=data, dask=dask, dims=dims,
                 hints=list(enc.get("dimension_references") or []), attrs=attrs, had_encoding=had_encoding,
                 text_encoding=text_encoding, fill=_fill_text(var))


def _bytes_asked(data: Any, dask: bool, dims: tuple[str, ...], want_char: bool, enc: Mapping[str, Any],
                 attrs: Mapping[str, Any]) -> tuple[Any, str, bool]:
    """A bytes variable's (values, kind, as NC_CHAR): one-byte values keep their dimensions as raw
    NC_CHAR (read with concat_characters=False); others are NC_CHAR unless NC_STRING is asked."""
    nc_type = enc.get("nc_type")
    if not dask:
        data = np.asarray(data)
        if data.dtype.kind == "O":
            data = data.astype(bytes)
    if data.dtype.itemsize == 1 and dims and nc_type != "NC_STRING" and (
            want_char or "_Encoding" in attrs or "char_dim_name" not in enc):
        return data, "rawchar", True
    return data, "bytes", want_char or nc_type != "NC_STRING"


def _fill_text(var: xr.Variable) -> str | None:
    """A string variable's fill value as text (bytes decoded), None for none or a NaN mask marker."""
    fill = string_fill(var)
    if fill is not None and not isinstance(fill, str | bytes | np.str_ | np.bytes_):
        return None  # a NaN mask marker is not a string fill value
    if isinstance(fill, bytes | np.bytes_):
        return bytes(fill).decode("utf-8")
    return fill


def _raw_char_array(text: _Text, var: xr.Variable, unlimited: set[str]) -> _Array:
    """One-byte characters written as NC_CHAR with the dimensions they have (no string-length one added)."""
    arr = text.data if text.dask else np.asarray(text.data).astype("S1")
    shape = tuple(arr.shape)
    chunks = _pick_chunks(var, shape, 1, (), unlimited)
    out_attrs = dict(text.attrs)
    if text.had_encoding:
        out_attrs["_Encoding"] = text.text_encoding
    return _Array(
        group=text.group, name=text.name, dims=text.dims, ref_hints=_hints(text.hints, len(text.dims)),
        unlimited=frozenset(unlimited), shape=shape, chunks=chunks, dtype=np.dtype("S1"),
        dtype_str=">S1", fill_json="", fill_storage=b"", compressor=None, filters=None,
        attrs=out_attrs, kind="char", data=arr,
        encode_block=(lambda b: (np.asarray(b).astype("S1"), 0)) if text.dask else None,
    )


def _text_encoder(text: _Text) -> Callable[[np.ndarray, int | None, str], np.ndarray]:
    """values, width (None: the longest), overflow policy -> the stored array (missing values as the fill)."""
    what = text.what
    encoding = text.text_encoding
    if text.kind == "bytes":
        return _bytes_encoder(what, chars=text.char)
    if text.char:
        def encoder(values: np.ndarray, w: int | None, policy: str) -> np.ndarray:
            return encode_char_array(values, w, encoding=encoding, on_overflow=policy,  # type: ignore[arg-type]  # _Options checked it
                                             what=what)
    else:
        def encoder(values: np.ndarray, w: int | None, policy: str) -> np.ndarray:
            return strings.encode_fixed_utf8(values, w, on_overflow=policy, what=what)  # type: ignore[arg-type]  # checked
    return _with_missing(encoder, text.fill, text.block_what)  # missing values: as the fill value, or refused


def _encode_text(
    text: _Text, var: xr.Variable, opts: _Options
) -> tuple[Any, int, Callable[[np.ndarray], tuple[np.ndarray, int]] | None]:
    """The stored values (dask: the logical ones and a block encoder) and the width they are written at.

    The width asked (``maxstrlen``, NC_CHAR's ``char_dim_width``), else the longest value; NC_STRING's
    fill value widens it unless a width was asked (``widen``: always); NC_CHAR keeps at least one
    character, and at least the string-length chunk of the store it was read from.
    """
    asked = _width_for(text.name, text.path, var, opts)
    width = asked
    min_width = 0
    if text.char:
        enc = var.encoding
        cw = enc.get("char_dim_width") if width is None else width
        width = None if cw is None else int(cw)
        chunks_enc = enc.get("chunks") or enc.get("chunksizes")
        if width is None and isinstance(chunks_enc, tuple | list) and len(chunks_enc) == var.ndim + 1:
            # read from a store: the string-length dimension was one chunk; keep at least its size
            min_width = int(chunks_enc[-1])
        min_width = max(min_width, 1)  # netcdf-c cannot read a zero-length char dimension
    encoder = _text_encoder(text)
    fill_len = 0 if text.fill is None or text.char else len(str(text.fill).encode("utf-8"))
    on_overflow = opts.on_overflow
    if text.dask:
        return _encode_lazily(text, encoder, width, fill_len, on_overflow)
    stored = encoder(np.asarray(text.data), width, on_overflow)
    if text.char:
        width = stored.shape[-1]
        if width < min_width:
            stored = _pad_chars(stored, min_width)
            width = min_width
    else:
        width = stored.dtype.itemsize
        if fill_len > width and (asked is None or on_overflow == "widen"):
            stored = stored.astype(f"S{fill_len}")  # the fill value must fit the width too
            width = fill_len
    return stored, width, None


def _encode_lazily(
    text: _Text, encoder: Callable[[np.ndarray, int | None, str], np.ndarray], width: int | None,
    fill_len: int, on_overflow: str,
) -> tuple[Any, int, Callable[[np.ndarray], tuple[np.ndarray, int]]]:
    """A dask variable: its width (the longest value computed when none is asked) and a block encoder
    at that width, which counts the values a ``truncate`` policy cuts."""
    data = text.data
    kind = text.kind
    fill = None if text.fill is None else str(text.fill)
    block_what = text.block_what  # dask: counted per block
    if kind != "bytes" and (width is None or on_overflow == "widen"):
        longest = int(data.map_blocks(_utf8_longest, fill, block_what, dtype=np.int64,
                                      chunks=tuple((1,) * len(c) for c in data.chunks) or ((1,),)).max().compute()) \
            if data.size else 0
        width = max(longest, width or 0, fill_len, 1)
    elif kind == "bytes" and width is None:
        width = data.dtype.itemsize
    fixed_width = int(width or 0)
    policy = "truncate" if on_overflow == "truncate" else "error"

    def encode_block(block: np.ndarray) -> tuple[np.ndarray, int]:
        cut = _over_count(block, fixed_width, fill, block_what) if policy == "truncate" and kind != "bytes" else 0
        return encoder(np.asarray(block), fixed_width, policy), cut

    return data, fixed_width, encode_block


def _char_array(
    text: _Text, var: xr.Variable, stored: Any, width: int,
    encode_block: Callable[[np.ndarray], tuple[np.ndarray, int]] | None, unlimited: set[str],
) -> _Array:
    """NC_CHAR: ``>S1`` with a string-length dimension of ``width``; its fill value one ASCII byte."""
    what = text.what
    attrs = text.attrs
    fill_text = text.fill
    char_dim = str(var.encoding.get("char_dim_name") or f"string{width}")
    if char_dim in text.dims:
        raise DimensionError(
            f"Cannot write {what} as NC_CHAR: its string-length dimension name {char_dim!r} is "
            f"already one of its dimensions {text.dims}. Set encoding['char_dim_name'] to another name."
        )
    sdims = text.dims + (char_dim,)
    shape = tuple(var.shape) + (width,)
    chunks = _pick_chunks(var, shape, 1, (max(width, 1),), unlimited)
    if text.kind != "bytes" or text.had_encoding:
        attrs["_Encoding"] = text.text_encoding  # tells netCDF4-python (and xarray) how to join the chars
    fill_json: Any = ""
    if fill_text is not None and fill_text != "":
        if len(str(fill_text)) != 1 or ord(str(fill_text)) > 127:
            # one byte, and ASCII: netcdf-c keeps the fill as JSON text in .zarray
            raise ZStringsError(
                f"Cannot write {what} as NC_CHAR with _FillValue {fill_text!r}: an NC_CHAR fill value is "
                "one byte (ASCII here). Use a one-byte character (e.g. ' ') or drop the fill value."
            )
        fill_json = str(fill_text)
        attrs["_FillValue"] = fill_json  # netcdf-c writes it typed '>S1', as here
    return _Array(
        group=text.group, name=text.name, dims=sdims, ref_hints=_hints(text.hints, len(sdims)),
        unlimited=frozenset(unlimited), shape=shape, chunks=chunks, dtype=np.dtype("S1"),
        dtype_str=">S1", fill_json=fill_json, fill_storage=fill_json.encode("latin-1"),
        compressor=None, filters=None, attrs=attrs, kind="char", data=stored,
        encode_block=encode_block, maxstrlen=None,
    )


def _fixed_array(
    text: _Text, var: xr.Variable, stored: Any, width: int,
    encode_block: Callable[[np.ndarray], tuple[np.ndarray, int]] | None, unlimited: set[str],
) -> _Array:
    """NC_STRING: ``|Sn`` of ``width`` bytes, its fill value encoded at that width."""
    attrs = text.attrs
    fill_text = text.fill
    shape = tuple(var.shape)
    chunks = _pick_chunks(var, shape, width, (), unlimited) if shape else ()
    fill_bytes = b"" if fill_text is None else strings.encode_fixed_utf8(
        [fill_text], width, on_overflow="error", what=f"{text.what} _FillValue").tobytes().rstrip(b"\x00")
    if fill_text is not None:
        attrs["_FillValue"] = fill_text
    attrs["_nczarr_maxstrlen"] = np.int32(width)  # netcdf-c writes it in both nczarr and zarr mode
    return _Array(
        group=text.group, name=text.name, dims=text.dims, ref_hints=_hints(text.hints, len(text.dims)),
        unlimited=frozenset(unlimited), shape=shape, chunks=chunks, dtype=np.dtype(f"S{width}"),
        dtype_str=f"|S{width}", fill_json=fill_bytes.decode("utf-8"), fill_storage=fill_bytes,
        compressor=None, filters=None, attrs=attrs, kind="string", data=stored,
        encode_block=encode_block, maxstrlen=width,
    )


def _missing(values: np.ndarray) -> np.ndarray | None:
    """Where an object (or NA-aware StringDType) array of str holds a missing value (None, NaN,
    NA), or None when it cannot hold one."""
    if _na_aware(values):
        na: Any = cast(np.dtypes.StringDType, values.dtype).na_object
        if na is not None and pd.isna(na):  # NaN-like NA (np.nan, pd.NA): no object copy
            return np.asarray(np.isnan(values), dtype=bool)
        values = values.astype(object)
    if values.dtype.kind != "O":
        return None
    return np.asarray(pd.isnull(values), dtype=bool)


def _na_aware(values: np.ndarray) -> bool:
    """A StringDType array with an NA object (it may hold missing values; NA-free ones cannot)."""
    return values.dtype.kind == "T" and hasattr(values.dtype, "na_object")


def missing_filled(values: np.ndarray, fill: Any, no_fill: Callable[[int, int], ZStringsError], *,
                   as_object: bool = False, convert: Callable[[Any], Any] | None = None) -> np.ndarray:
    """``values`` with their missing ones (None, NaN, a ``StringDType`` NA) as ``fill`` (as
    ``convert(fill)`` when given), in a copy (the caller's data stay as they are; objects where
    ``as_object``); unchanged without any. With missing values and no fill, ``no_fill(count,
    first)`` is raised (``first``: a flat index), the writer's own words for the fix."""
    missing = _missing(values)
    if missing is None or not missing.any():
        return values
    if fill is None:
        raise no_fill(int(missing.sum()), int(np.flatnonzero(missing.reshape(-1))[0]))
    out = values.copy() if values.dtype.kind == "T" and not as_object else values.astype(object)
    out[missing] = fill if convert is None else convert(fill)
    return out


def _missing_as(values: Any, fill: str | None, what: str) -> np.ndarray:
    """Missing values replaced by the string fill value (the CF way), or, without one, a
    ZStringsError naming the count, the first one and the fix.  Arrays without any: unchanged."""
    arr = np.asarray(values)

    def no_fill(n: int, i: int) -> ZStringsError:
        return ZStringsError(
            f"{what}: {n} missing value(s) (None/NaN), e.g. element "
            f"{position_label(i, arr.shape)}. A netCDF string has no missing value but the fill "
            "value: set encoding['_FillValue'] to a string (e.g. '' or 'N/A') to write them as "
            "that string (engine='netcdf4' masks it back to NaN), or fill them first."
        )

    return missing_filled(arr, fill, no_fill)


def _filling_missing(fn: Callable[[np.ndarray], Any], values: Any, fill: str | None, what: str) -> Any:
    """``fn(values)``; when it fails and the values hold missing ones, ``fn`` of the values with
    them as the string fill value (or the error naming the fix).  Values are searched only after
    a failure: no cost for data without missing values."""
    arr = np.asarray(values)
    if _na_aware(arr):  # NA reaches no encoder: numpy's casts and our kernels refuse it
        return fn(_missing_as(arr, fill, what))
    try:
        return fn(arr)
    except ZStringsError:
        filled = _missing_as(arr, fill, what)
        if filled is arr:
            raise  # no missing value: fn's own error
        return fn(filled)


def _with_missing(
    encoder: Callable[[np.ndarray, int | None, str], np.ndarray], fill: str | None, what: str
) -> Callable[[np.ndarray, int | None, str], np.ndarray]:
    """An encoder that writes missing values as the string ``_FillValue`` (or names the fix)."""

    def encode(values: np.ndarray, w: int | None, policy: str) -> np.ndarray:
        return _filling_missing(lambda v: encoder(v, w, policy), values, fill, what)

    return encode


def _pad_chars(stored: np.ndarray, width: int) -> np.ndarray:
    """Widen an NC_CHAR ``(..., n)`` array with NUL padding (lossless)."""
    pad = [(0, 0)] * (stored.ndim - 1) + [(0, width - stored.shape[-1])]
    return np.pad(stored.view(np.uint8), pad).view("S1")


def _unify_char_widths(arrays: list[_Array]) -> None:
    """NC_CHAR variables sharing a string-length dimension get its largest width (NUL padded)."""
    by_dim: dict[str, list[_Array]] = {}
    for a in arrays:
        if a.kind == "char" and a.dims:
            by_dim.setdefault(a.dims[-1], []).append(a)
    for group in by_dim.values():
        width = max(a.shape[-1] for a in group)
        for a in group:
            if a.shape[-1] == width:
                continue
            if _is_dask(a.data):
                continue  # fixed before writing; a clash is reported by _resolve_dimensions
            a.data = _pad_chars(np.asarray(a.data), width)
            a.shape = a.shape[:-1] + (width,)
            a.chunks = a.chunks[:-1] + (width,)


def _bytes_encoder(what: str, *, chars: bool = True) -> Callable[[np.ndarray, int | None, str], np.ndarray]:
    """Fixed bytes values (``|Sn`` data) stored as they are: NC_CHAR by default, like xarray does,
    or NC_STRING ``|Sn`` when ``chars`` is false (encoding ``nc_type="NC_STRING"``)."""

    def enc(values: np.ndarray, w: int | None, policy: str) -> np.ndarray:
        arr = np.asarray(values)
        if arr.dtype.kind == "O":
            arr = arr.astype(bytes)
        n = max(arr.dtype.itemsize, 1)
        if w is not None and n > w:
            lengths: np.ndarray = np.strings.str_len(arr).reshape(-1) if arr.size else np.zeros(1, np.int64)
            longest = int(lengths.max())
            if longest > w and policy == "error":
                raise overflow_error(what, lengths, w, "", arr, arr.shape)
            if longest > w and policy == "truncate":  # (cut as asked, and said, as text is)
                warnings.warn(StringTruncationWarning(
                    f"{what_prefix(what)}{int((lengths > w).sum())} value(s) longer than {w} bytes (longest "
                    f"{longest}) were cut to {w} bytes"), stacklevel=user_stacklevel())
            n = w if policy == "truncate" else max(longest, w)
        elif w is not None:
            n = w
        fixed = arr.astype(f"S{n}")
        if not chars and fixed.size and n > 1 and strings.has_embedded_nul(fixed.view(np.uint8).reshape(-1, n)):
            # netcdf-c ends an NC_STRING at its first NUL: the rest would be lost without a word
            z = fixed.view(np.uint8).reshape(-1, n) == 0
            rows = np.flatnonzero((z[:, :-1] & ~z[:, 1:]).any(axis=1))
            raise ZStringsError(
                f"{what}: {rows.size} bytes value(s) hold a NUL before other bytes, e.g. value "
                f"{int(rows[0])} = {bytes(fixed.reshape(-1)[rows[0]])!r}; netcdf-c ends an NC_STRING value at its "
                "first NUL, so they cannot be written faithfully as NC_STRING -- write the variable as "
                "NC_CHAR (drop encoding['nc_type']='NC_STRING'), which keeps NULs inside a value")
        return fixed.view("S1").reshape(arr.shape + (n,)) if chars else fixed

    return enc


def _hints(hints: list[str | None], n: int) -> tuple[str | None, ...]:
    return tuple(hints) if len(hints) == n else (None,) * n


# ---------------------------------------------------------------------------------------------
# Numbers (everything xarray's CF encoder turns into numbers)
# ---------------------------------------------------------------------------------------------


def _numeric_array(group: str, name: str, var: xr.Variable, opts: _Options, unlimited: set[str]) -> _Array:
    what = _what(group, name)
    enc = dict(var.encoding)
    if "_FillValue" not in enc and "_FillValue" not in var.attrs and ("zarr_dtype" in enc or "original_shape" in enc):
        # read from a file that had no fill value: do not let xarray add its default NaN one
        var = var.copy(deep=False)
        var.encoding = {**enc, "_FillValue": None}
    var = conventions.encode_cf_variable(var, name=name)
    dtype = var.dtype
    if dtype.kind == "b":
        var = var.astype("i1")
        var.attrs["dtype"] = "bool"
        dtype = np.dtype("i1")
    if dtype.kind not in "iuf":
        raise UnsupportedError(
            f"Cannot write {what}: dtype {dtype} has no netCDF type netcdf-c reads from Zarr. Expected "
            "numbers, booleans, datetimes/timedeltas (CF-encoded) or strings; convert the variable."
        )
    dtype = dtype.newbyteorder("<") if dtype.itemsize > 1 else dtype
    attrs = dict(var.attrs)
    fill = attrs.pop("_FillValue", None)
    code = dtype.str[1:]
    if fill is None:  # no mask: netcdf-c's default fill in .zarray, no _FillValue attribute
        fill_storage = np.array(NC_FILL_VALUES[code]).astype(dtype)[()]
        fill_json: Any = 9.96921e36 if dtype.kind == "f" else NC_FILL_VALUES[code]  # netcdf-c's %g text
    else:
        fill_storage = np.array(fill).astype(dtype)[()]
        attrs["_FillValue"] = fill_storage
        fill_json = json_value(fill_storage)
    data = var.data
    if not _is_dask(data):
        data = np.ascontiguousarray(np.asarray(data), dtype=dtype)
    elif data.dtype != dtype:
        data = data.astype(dtype)
    shape = tuple(var.shape)
    chunks = _pick_chunks(var, shape, dtype.itemsize, (), unlimited) if shape else ()
    comp, filters = _codecs_from_encoding(enc, opts.compressor, where=what, strict=opts.strict_codecs)
    dtype_str = dtype.str if dtype.itemsize > 1 else "|" + code
    return _Array(
        group=group, name=name, dims=tuple(str(d) for d in var.dims),
        ref_hints=_hints(list(enc.get("dimension_references") or []), var.ndim),
        unlimited=frozenset(unlimited), shape=shape, chunks=chunks, dtype=dtype, dtype_str=dtype_str,
        fill_json=fill_json, fill_storage=fill_storage, compressor=comp, filters=filters, attrs=attrs,
        kind="numeric", data=data,
        encode_block=(lambda b: (np.asarray(b, dtype=dtype), 0)) if _is_dask(data) else None,
    )


def _plan_group(group: str, ds: xr.Dataset, opts: _Options, unlimited: set[str]) -> tuple[list[_Array], dict[str, Any]]:
    variables, gattrs = conventions.encode_dataset_coordinates(ds)
    arrays = []
    for name, var in variables.items():
        name = str(name)
        if "/" in name or not name or name in (".", ".."):
            raise ZStringsError(f"Cannot write variable {name!r} in group {group!r}: the name is not a valid "
                                "Zarr key (no '/', not empty, not '.' or '..'); rename it.")
        kind = text_kind(var)
        if kind is not None:
            a = _string_array(group, name, var, kind, opts, unlimited)
        else:
            a = _numeric_array(group, name, var, opts, unlimited)
        if a.kind != "numeric":
            comp, filters = _codecs_from_encoding(var.encoding, opts.compressor, where=_what(group, name),
                                                  strict=opts.strict_codecs)
            a.compressor, a.filters = comp, filters
        arrays.append(a)
    _unify_char_widths(arrays)
    return arrays, dict(gattrs)


# ---------------------------------------------------------------------------------------------
# Metadata objects
# ---------------------------------------------------------------------------------------------


def _zarray(a: _Array, layout: NCZarrLayout | None) -> dict[str, Any]:
    """An array's ``.zarray`` in ``layout`` (None: pure Zarr v2)."""
    out = {
        "zarr_format": 2,
        "shape": list(a.shape) or [1],
        "dtype": layout.char_dtype if a.kind == "char" and layout is not None else a.dtype_str,
        "chunks": list(a.chunks) or [1],
        "fill_value": a.fill_json,
        "order": "C",
        "compressor": a.compressor,
        "filters": a.filters,
    }
    if layout is not None and layout.obj("array") == ".zarray":
        out[layout.key("array")] = layout.array_info(list(a.dimrefs), a.scalar)
    return out


def _typed(types: dict[str, str], layout: NCZarrLayout) -> dict[str, str]:
    """Attribute types as ``layout`` spells them (NC_CHAR ``>S1``, or netcdf-c 4.9.0's ``<U1``)."""
    return {k: (layout.char_dtype if v == ">S1" else v) for k, v in types.items()}


def _array_zattrs(a: _Array, layout: NCZarrLayout | None) -> dict[str, Any]:
    """An array's ``.zattrs`` in ``layout`` (None: pure Zarr v2)."""
    where = _what(a.group, a.name)
    values, types = attrs_json(a.attrs, where=where, typed=layout is not None)
    if "_FillValue" in a.attrs and a.kind == "numeric":
        types["_FillValue"] = "<" + a.dtype.str[1:]
    if "_FillValue" in a.attrs and a.kind == "string":
        types["_FillValue"] = a.dtype_str
    if "_nczarr_maxstrlen" in a.attrs:
        types["_nczarr_maxstrlen"] = "<i4"
    out = dict(values)
    out["_ARRAY_DIMENSIONS"] = list(a.dims) if a.dims else ["_scalar_"]
    if layout is None:
        return out
    if layout.in_zattrs:  # netcdf-c 4.10 types its own JSON objects |J0
        out[layout.key("array")] = layout.array_info(list(a.dimrefs), a.scalar)
        types.update({layout.key("array"): "|J0", layout.key("attr"): "|J0"})
    out[layout.key("attr")] = {"types": _typed(types, layout)}
    return out


def _group_objects(
    path: str, attrs: Mapping[str, Any], dims: Mapping[str, list[Any]], arrays: list[str], groups: list[str],
    layout: NCZarrLayout | None, *, default_maxstrlen: int | None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A group's ``.zgroup`` and ``.zattrs`` in ``layout`` (None: pure Zarr v2): its attributes,
    and in NCZarr its listing (dimensions, arrays, groups), the root's superblock and the types."""
    attrs = dict(attrs)
    if path == "/" and default_maxstrlen is not None:
        attrs["_nczarr_default_maxstrlen"] = np.int32(default_maxstrlen)
    values, types = attrs_json(attrs, where=f"group {path!r}", typed=layout is not None)
    if "_nczarr_default_maxstrlen" in attrs:
        types["_nczarr_default_maxstrlen"] = "<i4"
    zgroup: dict[str, Any] = {"zarr_format": 2}
    zattrs = dict(values)
    if path == "/":
        zattrs["_NCProperties"] = _NCPROPERTIES
        types["_NCProperties"] = ">S1"
    if layout is None:
        return zgroup, zattrs
    objects = {".zgroup": zgroup, ".zattrs": zattrs}
    listing = {layout.dims_key: {n: ({"size": s, "unlimited": 1} if u else s) for n, (s, u) in dims.items()},
               layout.arrays_key: arrays, "groups": groups}
    superblock = {"version": NCZARR_VERSION} if path == "/" else None
    # (the order netcdf-c writes them in: in .zgroup the superblock first, in .zattrs the listing)
    if superblock is not None and not layout.in_zattrs:
        objects[layout.obj("superblock")][layout.key("superblock")] = superblock
    objects[layout.obj("group")][layout.key("group")] = listing
    if superblock is not None and layout.in_zattrs:
        objects[layout.obj("superblock")][layout.key("superblock")] = superblock
    if layout.in_zattrs:  # netcdf-c 4.10 types its own JSON objects |J0
        types.update({layout.key(w): "|J0" for w in ("superblock", "group", "attr")
                      if w != "superblock" or superblock is not None})
    zattrs[layout.key("attr")] = {"types": _typed(types, layout)}
    return zgroup, zattrs
