"""Write xarray objects as NCZarr 2 (exactly as netcdf-c 4.10 lays it out) or pure Zarr v2.

``to_nczarr`` turns a ``Dataset``, a ``DataTree`` or a mapping of group paths to Datasets into a store
that netcdf-c (``netCDF4.Dataset(url, "r")``, ``ncdump``) and ``engine="zstrings"`` both read back:

* strings become NC_STRING ``|Sn`` (``n`` = ``_nczarr_maxstrlen``), or NC_CHAR ``>S1`` with a
  string-length dimension when ``encoding["nc_type"] == "NC_CHAR"`` (or ``encoding["dtype"]`` is
  ``S1``, as xarray spells it);
* nothing is cut unless asked: a value longer than the width raises (``on_overflow="error"``), is cut
  at a UTF-8 character boundary with a warning (``"truncate"``), or widens the width (``"widen"``);
* chunks are written first and the root group's metadata last, so an interrupted write leaves a store
  without a root ``.zgroup`` that neither netcdf-c nor ``engine="zstrings"`` opens as a dataset;
* dask-backed variables are written block by block in parallel, never loaded whole.

Everything string-specific reuses ``strings`` (encoders and truncation policies) and ``codecs``
(numcodecs plus netcdf-c's HDF5 shuffle); all I/O goes through ``store.ZStore``.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Callable, Hashable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import xarray as xr
from xarray import conventions

from . import __version__, strings
from .codecs import ChunkPipeline, build_pipeline
from .errors import (
    DimensionError,
    StringTruncationWarning,
    UnsupportedError,
    ZStringsError,
)
from .metadata import NC_DEFAULT_MAXSTRLEN, unparse_json
from .store import ZStore, open_store, parse_nczarr_url

__all__ = [
    "NC_FILL_VALUES",
    "NETCDF_C_CODECS",
    "prepare_for_zarr",
    "to_nczarr",
]

Format = Literal["nczarr", "zarr2"]
Mode = Literal["w-", "w", "a"]

#: Compressor/filter ids that netcdf-c 4.10 (as shipped in the netCDF4 wheel) decodes in NCZarr.
#: Checked one by one against the real library: ``gzip`` and ``lz4`` fail ("undefined filter"),
#: ``blosc`` (every cname, every shuffle mode) reads even though netcdf-c cannot *write* it there.
NETCDF_C_CODECS = frozenset({"zlib", "zstd", "bz2", "blosc"})
_NETCDF_C_FILTERS = frozenset({"shuffle"})

#: netcdf-c's default fill values, which it writes to ``.zarray`` when no ``_FillValue`` is set.
NC_FILL_VALUES: dict[str, int | float] = {
    "i1": -127, "u1": 255, "i2": -32767, "u2": 65535, "i4": -2147483647, "u4": 4294967295,
    "i8": -9223372036854775806, "u8": 18446744073709551614,
    "f4": 9.9692099683868690e36, "f8": 9.9692099683868690e36,
}

_NCZARR_VERSION = "2.0.0"
_NCPROPERTIES = f"version=2,xr_zstrings={__version__},nczarr={_NCZARR_VERSION}"
_CHUNK_TARGET_BYTES = 4 << 20  # default chunks aim at ~4 MiB (netcdf-c writes small arrays whole)
_WHOLE_BYTES = 16 << 20  # arrays up to this size are one chunk, as netcdf-c does
_THREADS = max(2, min(8, os.cpu_count() or 1))
_BATCH_BYTES = 64 << 20


# ---------------------------------------------------------------------------------------------
# JSON as netcdf-c writes it
# ---------------------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """A JSON-ready value: numpy scalars/arrays to Python, non-finite floats to netcdf-c's strings."""
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()] if value.ndim else _plain(value[()])
    if isinstance(value, np.floating):
        if value.dtype == np.float32 and np.isfinite(value):
            return float(str(value))  # the shortest text that reads back as the same float32
        value = float(value)
    elif isinstance(value, np.integer | np.bool_):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _dumps(obj: Any) -> bytes:
    """Serialise metadata like netcdf-c: ``{"a": 1, "b": [1,2]}``, UTF-8, no ASCII escaping."""
    return unparse_json(_plain(obj)).encode("utf-8")


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
        value = str(value)
        if value.startswith("{"):
            try:
                parsed = json.loads(value)
            except ValueError:
                parsed = None
            if isinstance(parsed, dict) and unparse_json(parsed) == value:
                return parsed, ">S1"
        return value, ">S1"
    if isinstance(value, Mapping):
        return _plain(value), ">S1"  # Appendix G: JSON-valued text; reads back as its text
    if isinstance(value, bool | np.bool_):
        return int(value), "<i1"
    if isinstance(value, int) and not isinstance(value, bool):
        if -(2**63) <= value < 2**63:
            return value, "<i8"
        if 0 <= value < 2**64:
            return value, "<u8"
        raise ZStringsError(
            f"Cannot write attribute {name!r} of {where}: {value} does not fit netCDF's 64-bit integers; "
            "store it as a float or as text."
        )
    if isinstance(value, float):
        return _plain(value), "<f8"
    if isinstance(value, np.generic) and value.dtype.kind in "iuf":
        return _plain(value), "<" + value.dtype.str[1:]
    if isinstance(value, list | tuple | np.ndarray):
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
            return _plain(arr.reshape(-1)), "<" + arr.dtype.str[1:]
    raise ZStringsError(
        f"Cannot write attribute {name!r} of {where}: got {value!r} of type {type(value).__name__}. "
        "netCDF attributes hold text, numbers, lists of numbers or lists of strings (or a dict, stored "
        "as JSON text); convert the value or drop the attribute."
    )


def _attrs_json(attrs: Mapping[str, Any], *, where: str, typed: bool) -> tuple[dict[str, Any], dict[str, str]]:
    out: dict[str, Any] = {}
    types: dict[str, str] = {}
    for k, v in attrs.items():
        key = str(k)
        value, dtype = _attr_entry(key, v, where=where)
        if not typed and isinstance(v, Mapping):
            value = _plain(v)
        out[key] = value
        types[key] = dtype
    return out, types


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
    kind: str  # "numeric", "string", "char", "bytes"
    data: Any  # numpy storage array, or a dask array of logical values
    encode_block: Callable[[np.ndarray], tuple[np.ndarray, int]] | None = None  # dask: logical -> storage
    maxstrlen: int | None = None
    dimrefs: tuple[str, ...] = ()
    pipeline: ChunkPipeline | None = field(default=None, repr=False)

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


def _is_dask(data: Any) -> bool:
    return type(data).__module__.startswith("dask.")


def _string_like(var: xr.Variable) -> str | None:
    """"str", "bytes" or None for a variable's values (object arrays are peeked at, cheaply)."""
    k = var.dtype.kind
    if k in "TU":
        return "str"
    if k == "S":
        return "bytes"
    if k == "O":
        if var.size == 0:
            return "str"
        first = var.data[(0,) * var.ndim]
        if _is_dask(first):
            first = first.compute()
        first = first.item() if isinstance(first, np.ndarray) else first
        if isinstance(first, str):
            return "str"
        if isinstance(first, bytes):
            return "bytes"
    return None


def _codec_config(codec: Any, *, where: str) -> dict[str, Any]:
    if codec is None:
        return {}
    if isinstance(codec, str):
        return {"id": codec}
    if isinstance(codec, Mapping):
        return dict(codec)
    get_config = getattr(codec, "get_config", None)
    if get_config is None:
        raise ZStringsError(
            f"Invalid compressor/filter {codec!r} for {where}: expected a numcodecs codec, a config dict "
            "such as {'id': 'zlib', 'level': 4} or a name ('zlib', 'zstd', 'bz2', 'blosc')."
        )
    return dict(get_config())


def _codecs_from_encoding(
    enc: Mapping[str, Any], default: Any, *, where: str, strict: bool
) -> tuple[dict[str, Any] | None, list[dict[str, Any]] | None]:
    """Compressor and filters from zarr-style (``compressor``/``filters``) or netCDF4-style
    (``zlib``/``compression``/``complevel``/``shuffle``) encodings; refuse what netcdf-c cannot read."""
    comp: dict[str, Any] | None = None
    filters: list[dict[str, Any]] = []
    if "compressors" in enc and "compressor" not in enc:
        # xarray with zarr-python 3 records a tuple of compressors (zarr v2 holds at most one)
        comps = enc.get("compressors") or ()
        comps = [comps] if not isinstance(comps, list | tuple) else list(comps)
        if len(comps) > 1:
            raise UnsupportedError(
                f"Cannot write {where} with {len(comps)} compressors: Zarr v2 (and netcdf-c) hold one. "
                "Keep one in encoding['compressors'] (or set encoding['compressor'])."
            )
        enc = {**enc, "compressor": comps[0] if comps else None}
    if "compressor" in enc or enc.get("filters"):
        comp = _codec_config(enc.get("compressor"), where=where) or None
        filters = [_codec_config(f, where=where) for f in (enc.get("filters") or [])]
    elif enc.get("zlib") or enc.get("compression"):
        name = enc.get("compression") or "zlib"
        name = {"zlib": "zlib", "zstd": "zstd", "bzip2": "bz2"}.get(name, name)
        level = enc.get("complevel")
        comp = {"id": name, "level": 4 if level is None else int(level)}
        if enc.get("shuffle"):
            filters = [{"id": "shuffle", "elementsize": 0}]
    elif default is not None:
        comp = _codec_config(default, where=where) or None
    if comp is not None and comp.get("id") == "zlib" and "level" not in comp:
        comp["level"] = 4
    for f in filters:
        if f.get("id") == "shuffle":
            f.clear()
            f.update({"id": "shuffle", "elementsize": 0})  # netcdf-c shuffles by the element size
    if strict:
        bad = [c["id"] for c in ([comp] if comp else []) if c.get("id") not in NETCDF_C_CODECS]
        bad += [f.get("id") for f in filters if f.get("id") not in _NETCDF_C_FILTERS]
        if bad:
            raise UnsupportedError(
                f"Cannot write {where} with codec {bad[0]!r}: netcdf-c 4.10 cannot read it (it reads the "
                f"compressors {sorted(NETCDF_C_CODECS)} and the 'shuffle' filter). Use e.g. "
                "encoding={'compressor': {'id': 'zstd', 'level': 3}}, or pass netcdf_c_codecs_only=False "
                "to write it anyway for other Zarr readers."
            )
    return comp, (filters or None)


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


def _utf8_longest(block: np.ndarray) -> np.ndarray:
    """The longest UTF-8 encoding in a block of str (for widths of dask-backed variables)."""
    t = strings.convert_string_dtype(np.asarray(block), "T")
    if t.size == 0:
        return np.zeros((1,) * max(t.ndim, 1), np.int64)
    n = int(np.strings.str_len(np.strings.encode(t, "utf-8")).max())
    return np.full((1,) * max(t.ndim, 1), n, np.int64)


def _over_count(block: np.ndarray, width: int) -> int:
    t = strings.convert_string_dtype(np.asarray(block), "T")
    if t.size == 0:
        return 0
    return int((np.strings.str_len(np.strings.encode(t, "utf-8")) > width).sum())


@dataclass
class _Options:
    fmt: Format
    on_overflow: strings.OnOverflow
    maxstrlen: Mapping[str, int] | int | None
    default_maxstrlen: int | None
    compressor: Any
    strict_codecs: bool


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


def _string_array(
    group: str, name: str, var: xr.Variable, kind: str, opts: _Options, unlimited: set[str]
) -> _Array:
    """Plan an NC_STRING (``|Sn``) or NC_CHAR (``>S1`` + string-length dimension) array."""
    enc = var.encoding
    what = _what(group, name)
    path = f"{group.rstrip('/')}/{name}"
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
    hints: list[str | None] = list(enc.get("dimension_references") or [])
    if kind == "bytes":
        if not dask:
            data = np.asarray(data)
            if data.dtype.kind == "O":
                data = data.astype(bytes)
        if data.dtype.itemsize == 1 and dims and nc_type != "NC_STRING" and (
                want_char or "_Encoding" in attrs or "char_dim_name" not in enc):
            want_char = True  # raw NC_CHAR (read with concat_characters=False): keep its dimensions
            kind = "rawchar"
        elif nc_type != "NC_STRING":
            want_char = True
    had_encoding = "_Encoding" in attrs or "_Encoding" in enc
    text_encoding = str(attrs.pop("_Encoding", enc.get("_Encoding", "utf-8")))
    fill_text = attrs.pop("_FillValue", enc.get("_FillValue"))
    if fill_text is not None and not isinstance(fill_text, str | bytes | np.str_ | np.bytes_):
        fill_text = None  # a NaN mask marker is not a string fill value
    if isinstance(fill_text, bytes | np.bytes_):
        fill_text = bytes(fill_text).decode("utf-8")

    if kind == "rawchar":
        arr = data if dask else np.asarray(data).astype("S1")
        shape = tuple(arr.shape)
        chunks = _pick_chunks(var, shape, 1, (), unlimited)
        out_attrs = dict(attrs)
        if had_encoding:
            out_attrs["_Encoding"] = text_encoding
        return _Array(
            group=group, name=name, dims=dims, ref_hints=_hints(hints, len(dims)),
            unlimited=frozenset(unlimited), shape=shape, chunks=chunks, dtype=np.dtype("S1"),
            dtype_str=">S1", fill_json="", fill_storage=b"", compressor=None, filters=None,
            attrs=out_attrs, kind="char", data=arr,
            encode_block=(lambda b: (np.asarray(b).astype("S1"), 0)) if dask else None,
        )

    width = _width_for(name, path, var, opts)
    min_width = 0
    if want_char:
        cw = enc.get("char_dim_width") if width is None else width
        width = None if cw is None else int(cw)
        chunks_enc = enc.get("chunks") or enc.get("chunksizes")
        if width is None and isinstance(chunks_enc, tuple | list) and len(chunks_enc) == var.ndim + 1:
            # read from a store: the string-length dimension was one chunk; keep at least its size
            min_width = int(chunks_enc[-1])
    on_overflow = opts.on_overflow
    if kind == "bytes":
        encoder = _bytes_encoder(what, chars=want_char)
    elif want_char:
        def encoder(values: np.ndarray, w: int | None, policy: str) -> np.ndarray:
            return strings.encode_char_array(values, w, encoding=text_encoding, on_overflow=policy,  # type: ignore[arg-type]
                                             what=what)
    else:
        def encoder(values: np.ndarray, w: int | None, policy: str) -> np.ndarray:
            return strings.encode_fixed_utf8(values, w, on_overflow=policy, what=what)  # type: ignore[arg-type]

    encode_block = None
    fill_len = 0 if fill_text is None or want_char else len(str(fill_text).encode("utf-8"))
    if want_char:
        min_width = max(min_width, 1)  # netcdf-c cannot read a zero-length char dimension
    if not dask:
        stored = encoder(np.asarray(data), width, on_overflow)
        if want_char:
            width = stored.shape[-1]
            if width < min_width:
                stored = _pad_chars(stored, min_width)
                width = min_width
        else:
            width = stored.dtype.itemsize
            if fill_len > width and (_width_for(name, path, var, opts) is None or on_overflow == "widen"):
                stored = stored.astype(f"S{fill_len}")  # the fill value must fit the width too
                width = fill_len
    else:
        if kind != "bytes" and (width is None or on_overflow == "widen"):
            longest = int(data.map_blocks(_utf8_longest, dtype=np.int64,
                                          chunks=tuple((1,) * len(c) for c in data.chunks) or ((1,),)).max().compute()) \
                if data.size else 0
            width = max(longest, width or 0, fill_len, 1)
        elif kind == "bytes" and width is None:
            width = data.dtype.itemsize
        fixed_width = int(width or 0)
        policy = "truncate" if on_overflow == "truncate" else "error"

        def encode_block(block: np.ndarray) -> tuple[np.ndarray, int]:
            cut = _over_count(block, fixed_width) if policy == "truncate" and kind != "bytes" else 0
            return encoder(np.asarray(block), fixed_width, policy), cut

        stored = data
    assert width is not None

    if want_char:
        char_dim = str(enc.get("char_dim_name") or f"string{width}")
        if char_dim in dims:
            raise DimensionError(
                f"Cannot write {what} as NC_CHAR: its string-length dimension name {char_dim!r} is "
                f"already one of its dimensions {dims}. Set encoding['char_dim_name'] to another name."
            )
        sdims = dims + (char_dim,)
        shape = tuple(var.shape) + (width,)
        chunks = _pick_chunks(var, shape, 1, (max(width, 1),), unlimited)
        if kind != "bytes" or had_encoding:
            attrs["_Encoding"] = text_encoding  # tells netCDF4-python (and xarray) how to join the chars
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
            group=group, name=name, dims=sdims, ref_hints=_hints(hints, len(sdims)),
            unlimited=frozenset(unlimited), shape=shape, chunks=chunks, dtype=np.dtype("S1"),
            dtype_str=">S1", fill_json=fill_json, fill_storage=fill_json.encode("latin-1"),
            compressor=None, filters=None, attrs=attrs, kind="char", data=stored,
            encode_block=encode_block, maxstrlen=None,
        )
    shape = tuple(var.shape)
    chunks = _pick_chunks(var, shape, width, (), unlimited) if shape else ()
    fill_bytes = b"" if fill_text is None else strings.encode_fixed_utf8(
        [fill_text], width, on_overflow="error", what=f"{what} _FillValue").tobytes().rstrip(b"\x00")
    if fill_text is not None:
        attrs["_FillValue"] = fill_text
    attrs["_nczarr_maxstrlen"] = np.int32(width)  # netcdf-c writes it in both nczarr and zarr mode
    return _Array(
        group=group, name=name, dims=dims, ref_hints=_hints(hints, len(dims)),
        unlimited=frozenset(unlimited), shape=shape, chunks=chunks, dtype=np.dtype(f"S{width}"),
        dtype_str=f"|S{width}", fill_json=fill_bytes.decode("utf-8"), fill_storage=fill_bytes,
        compressor=None, filters=None, attrs=attrs, kind="string", data=stored,
        encode_block=encode_block, maxstrlen=width,
    )


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
            longest = int(np.strings.str_len(arr).max()) if arr.size else 0
            if longest > w and policy == "error":
                raise strings.StringOverflowError(
                    f"{what}: bytes values of up to {longest} bytes do not fit width {w}; pass "
                    "on_overflow='widen' or 'truncate', or a larger maxstrlen."
                )
            n = w if policy == "truncate" else max(longest, w)
        elif w is not None:
            n = w
        fixed = arr.astype(f"S{n}")
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
        fill_json = _plain(fill_storage)
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
        kind = _string_like(var)
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
# Dimensions: where each is declared, fully qualified references
# ---------------------------------------------------------------------------------------------


def _ancestors(path: str) -> list[str]:
    """``/a/b`` -> ``["/a/b", "/a", "/"]`` (nearest first)."""
    out = [path]
    while path != "/":
        path = path.rsplit("/", 1)[0] or "/"
        out.append(path)
    return out


def _ref(group: str, name: str) -> str:
    return f"{group.rstrip('/')}/{name}"


def _resolve_dimensions(
    groups: dict[str, list[_Array]], unlimited: Mapping[str, set[str]]
) -> dict[str, dict[str, list[Any]]]:
    """Declare each dimension in the group where it belongs and give every array its references.

    A variable's dimension is the nearest declaration of that name in its group or an ancestor when the
    sizes agree (netCDF's scoping); otherwise it is declared in the variable's own group (shadowing).
    ``encoding["dimension_references"]`` from a store we read is honoured when it is consistent.
    """
    declared: dict[str, dict[str, list[Any]]] = {g: {} for g in groups}
    for g in sorted(groups, key=lambda p: (p.count("/") if p != "/" else 0, p)):
        for a in groups[g]:
            refs = []
            shape = a.shape
            for axis, (d, n) in enumerate(zip(a.dims, shape, strict=True)):
                where: str | None = None
                hint = a.ref_hints[axis]
                if hint:
                    hg, _, hn = ("/" + hint.strip("/")).rpartition("/")
                    hg = hg or "/"
                    if hn == d and hg in declared and hg in _ancestors(g):
                        got = declared[hg].get(d)
                        if got is None or got[0] == n:
                            where = hg
                if where is None:
                    for anc in _ancestors(g):
                        got = declared[anc].get(d)
                        if got is not None:
                            where = anc if got[0] == n else g
                            break
                    else:
                        where = g
                got = declared[where].get(d)
                if got is None:
                    declared[where][d] = [n, d in unlimited.get(where, set()) or d in a.unlimited]
                elif got[0] != n:
                    raise DimensionError(
                        f"Cannot write {_what(g, a.name)}: its dimension {d!r} has size {n} but group "
                        f"{where!r} already declares {d!r} with size {got[0]}. For NC_CHAR string-length "
                        "dimensions set encoding['char_dim_name'] to a distinct name; otherwise make the "
                        "sizes agree."
                    )
                refs.append(_ref(where, d))
            a.dimrefs = tuple(refs)
    return declared


# ---------------------------------------------------------------------------------------------
# Metadata objects
# ---------------------------------------------------------------------------------------------


def _zarray(a: _Array) -> dict[str, Any]:
    return {
        "zarr_format": 2,
        "shape": list(a.shape) or [1],
        "dtype": a.dtype_str,
        "chunks": list(a.chunks) or [1],
        "fill_value": a.fill_json,
        "order": "C",
        "compressor": a.compressor,
        "filters": a.filters,
    }


def _array_zattrs(a: _Array, fmt: Format) -> dict[str, Any]:
    where = _what(a.group, a.name)
    values, types = _attrs_json(a.attrs, where=where, typed=fmt == "nczarr")
    if "_FillValue" in a.attrs and a.kind == "numeric":
        types["_FillValue"] = "<" + a.dtype.str[1:]
    if "_FillValue" in a.attrs and a.kind == "string":
        types["_FillValue"] = a.dtype_str
    if "_nczarr_maxstrlen" in a.attrs:
        types["_nczarr_maxstrlen"] = "<i4"
    out = dict(values)
    out["_ARRAY_DIMENSIONS"] = list(a.dims) if a.dims else ["_scalar_"]
    if fmt == "nczarr":
        info: dict[str, Any] = {"dimension_references": list(a.dimrefs)}
        if a.scalar:
            info["scalar"] = 1
        info["storage"] = "chunked"
        out["_nczarr_array"] = info
        types.update({"_nczarr_array": "|J0", "_nczarr_attr": "|J0"})
        out["_nczarr_attr"] = {"types": types}
    return out


def _group_zattrs(
    path: str, attrs: Mapping[str, Any], dims: Mapping[str, list[Any]], arrays: list[str], groups: list[str],
    fmt: Format, *, default_maxstrlen: int | None,
) -> dict[str, Any]:
    attrs = dict(attrs)
    if path == "/" and default_maxstrlen is not None:
        attrs["_nczarr_default_maxstrlen"] = np.int32(default_maxstrlen)
    values, types = _attrs_json(attrs, where=f"group {path!r}", typed=fmt == "nczarr")
    if "_nczarr_default_maxstrlen" in attrs:
        types["_nczarr_default_maxstrlen"] = "<i4"
    out = dict(values)
    if path == "/":
        out["_NCProperties"] = _NCPROPERTIES
        types["_NCProperties"] = ">S1"
    if fmt == "nczarr":
        out["_nczarr_group"] = {
            "dimensions": {n: ({"size": s, "unlimited": 1} if u else s) for n, (s, u) in dims.items()},
            "arrays": arrays,
            "groups": groups,
        }
        if path == "/":
            out["_nczarr_superblock"] = {"version": _NCZARR_VERSION}
            types["_nczarr_superblock"] = "|J0"
        types["_nczarr_group"] = "|J0"
        types["_nczarr_attr"] = "|J0"
        out["_nczarr_attr"] = {"types": types}
    return out


# ---------------------------------------------------------------------------------------------
# Chunk writing
# ---------------------------------------------------------------------------------------------


def _chunk_key(a: _Array, idx: tuple[int, ...]) -> str:
    return f"{a.key}/{'.'.join(str(i) for i in idx) or '0'}"


def _encode_chunk(a: _Array, block: np.ndarray, chunk_shape: tuple[int, ...]) -> bytes:
    """Pad an edge block to the full chunk with the fill value and run the codec pipeline."""
    block = np.asarray(block, dtype=a.dtype)
    if block.shape != chunk_shape:
        full = np.full(chunk_shape, a.fill_storage, dtype=a.dtype)
        full[tuple(slice(0, s) for s in block.shape)] = block
        block = full
    assert a.pipeline is not None
    # the chunk's bytes as a flat uint8 view (no copy for a contiguous block); uncompressed chunks
    # go to the store as that view, compressors read it directly
    block = np.ascontiguousarray(block)
    raw = block.reshape(-1).view(np.uint8) if block.dtype.itemsize else np.frombuffer(block.tobytes(), np.uint8)
    if a.pipeline.compressor is None and not a.pipeline.filters:
        return raw  # type: ignore[return-value]
    return a.pipeline.encode(raw)


def _write_numpy(zstore: ZStore, a: _Array, storage: np.ndarray, origin: tuple[int, ...] | None = None) -> None:
    """Write a storage-dtype array chunk by chunk (threads compress; ``origin`` in chunk units)."""
    chunks = a.chunks or (1,)
    storage = storage.reshape(1) if a.scalar else storage
    if storage.size == 0:
        return
    grid = [range(math.ceil(n / c)) for n, c in zip(storage.shape, chunks, strict=True)]
    origin = origin or (0,) * len(chunks)

    def one(idx: tuple[int, ...]) -> tuple[str, bytes]:
        sel = tuple(slice(i * c, (i + 1) * c) for i, c in zip(idx, chunks, strict=True))
        key = _chunk_key(a, tuple(i + o for i, o in zip(idx, origin, strict=True)))
        return key, _encode_chunk(a, storage[sel], chunks)

    idxs = list(np.ndindex(*(len(r) for r in grid)))
    per_chunk = max(1, math.prod(chunks) * a.dtype.itemsize)
    batch = max(1, _BATCH_BYTES // per_chunk)
    with ThreadPoolExecutor(_THREADS) as pool:
        for start in range(0, len(idxs), batch):
            part = idxs[start : start + batch]
            items = list(pool.map(one, part)) if len(part) > 1 else [one(i) for i in part]
            zstore.set_many(items)


def _dask_writer(zstore: ZStore, a: _Array) -> Any:
    """A dask array of per-block truncation counts; computing it writes every chunk."""
    import dask.array as da

    data = a.data
    logical_chunks = a.chunks[: data.ndim] if not a.scalar else ()
    if data.ndim:
        data = data.rechunk(logical_chunks)
    extra = len(a.chunks) - data.ndim if not a.scalar else 0
    chunk_shape = a.chunks or (1,)
    encode_block = a.encode_block
    assert encode_block is not None

    def write(block: np.ndarray, block_info: Any = None) -> np.ndarray:
        if block_info is None:  # dask probing the function while building the graph: write nothing
            return np.zeros((1,) * max(block.ndim, 1), np.int64)
        loc = tuple(block_info[0]["chunk-location"]) if block_info.get(0) else ()
        stored, cut = encode_block(block)
        if a.scalar:
            stored = np.asarray(stored).reshape(1)
            loc = (0,)
        zstore.set_many([(_chunk_key(a, loc + (0,) * extra), _encode_chunk(a, stored, chunk_shape))])
        return np.full((1,) * max(block.ndim, 1), cut, np.int64)

    if data.ndim == 0:
        data = data.reshape(1)
        return da.map_blocks(lambda b, block_info=None: write(b.reshape(()), {0: {"chunk-location": ()}}),
                             data, dtype=np.int64, chunks=((1,),))
    return da.map_blocks(write, data, dtype=np.int64, chunks=tuple((1,) * len(c) for c in data.chunks))


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------


def _as_groups(obj: Any) -> dict[str, xr.Dataset]:
    """Dataset / DataTree / mapping of group paths -> {"/": ds, "/sub": ds, ...} with every parent."""
    if isinstance(obj, xr.Dataset):
        groups = {"/": obj}
    elif isinstance(obj, xr.DataTree):
        groups = {node.path: node.to_dataset(inherit=False) for node in obj.subtree}
        groups["/"] = obj.to_dataset(inherit=False)
    elif isinstance(obj, xr.DataArray):
        groups = {"/": obj.to_dataset(name=obj.name if obj.name is not None else "__xarray_dataarray_variable__")}
    elif isinstance(obj, Mapping):
        groups = {}
        for k, v in obj.items():
            if not isinstance(v, xr.Dataset):
                raise ZStringsError(f"Group {k!r}: expected an xarray.Dataset, got {type(v).__name__}.")
            key = "/" + str(k).strip("/")
            groups["/" if key == "/" else key] = v
    else:
        raise ZStringsError(
            f"Cannot write {type(obj).__name__}: expected an xarray Dataset, DataTree or a mapping of group "
            "paths to Datasets (as xr.open_groups returns)."
        )
    for path in list(groups):
        for anc in _ancestors(path)[1:]:
            groups.setdefault(anc, xr.Dataset())
    for path in groups:
        parent, _, leaf = path.rpartition("/")
        if path != "/" and leaf in groups.get(parent or "/", xr.Dataset()).variables:
            raise ZStringsError(
                f"Cannot write group {path!r}: its parent {parent or '/'!r} has a variable of the same name, "
                "and a Zarr key cannot be both. Rename the group or the variable."
            )
    for path in list(groups):
        for part in path.strip("/").split("/"):
            if part in (".", "..") or (path != "/" and not part):
                raise ZStringsError(f"Invalid group path {path!r}: expected names without '.', '..' or '//'.")
    return dict(sorted(groups.items(), key=lambda kv: (kv[0].count("/") if kv[0] != "/" else 0, kv[0])))


def _is_zip_target(target: Any) -> Path | None:
    if isinstance(target, os.PathLike):
        target = os.fspath(target)
    if not isinstance(target, str):
        return None
    parsed = parse_nczarr_url(target)
    if parsed.scheme not in ("", "file") or "s3" in parsed.modes:
        return None  # object storage: open_store decides (and refuses zip writes there)
    p = Path(parsed.path).expanduser()
    if "zip" in parsed.modes or (p.suffix.lower() == ".zip" and not p.is_dir()):
        return p
    return None


def _open_for_write(target: Any, mode: Mode, storage_options: Mapping[str, Any] | None = None) -> ZStore:
    """Open the target; enforce ``w-`` (refuse anything already there) and clear it for ``w``."""
    if mode not in ("w-", "w", "a"):
        raise ZStringsError(f"Invalid mode={mode!r}: expected 'w-' (create, never overwrite), 'w' "
                            "(overwrite) or 'a' (append along an unlimited dimension).")
    zip_path = _is_zip_target(target)
    if zip_path is not None:
        if mode == "a":
            raise UnsupportedError(f"Cannot append to zip store {target}: zip files cannot be changed in place; "
                                   "write a directory store, append there, then zip it.")
        if zip_path.exists():
            if mode == "w-":
                raise ZStringsError(f"Cannot write to {target}: the file exists and mode='w-' never overwrites. "
                                    "Pass mode='w' to replace it.")
            zip_path.unlink()
        zip_path.parent.mkdir(parents=True, exist_ok=True)
        return open_store(target, mode="w")
    so = dict(storage_options) if storage_options else None
    zstore = open_store(target, mode="r" if mode == "a" and so is None else ("a" if mode == "a" else "w"),
                        storage_options=so)
    if mode == "a":
        return zstore if not zstore.store.read_only else _reopen_rw(target)
    existing = zstore.list_dir("")
    if existing:
        if mode == "w-":
            raise ZStringsError(
                f"Cannot write to {zstore.display}: it is not empty (found {sorted(existing)[:5]}) and "
                "mode='w-' never overwrites. Pass mode='w' to replace it, or mode='a' with append_dim to append."
            )
        from zarr.core.sync import sync

        sync(zstore.store.delete_dir(zstore.prefix))
    return zstore


def _reopen_rw(target: Any) -> ZStore:
    from zarr.storage import LocalStore

    parsed = parse_nczarr_url(os.fspath(target) if isinstance(target, os.PathLike) else target)
    return ZStore(LocalStore(Path(parsed.path).expanduser(), read_only=False), display=str(target),
                  modes=parsed.modes)


# ---------------------------------------------------------------------------------------------
# The public API
# ---------------------------------------------------------------------------------------------


def to_nczarr(
    obj: xr.Dataset | xr.DataTree | Mapping[str, xr.Dataset],
    target: str | os.PathLike[str] | Any,
    *,
    mode: Mode = "w-",
    format: Format = "nczarr",
    maxstrlen: int | Mapping[str, int] | None = None,
    default_maxstrlen: int | None = None,
    on_overflow: strings.OnOverflow = "error",
    unlimited_dims: Iterable[str] | None = None,
    append_dim: str | None = None,
    compressor: Any = None,
    netcdf_c_codecs_only: bool = True,
    storage_options: Mapping[str, Any] | None = None,
) -> None:
    """Write ``obj`` as an NCZarr 2 store that netcdf-c 4.10 and ``engine="zstrings"`` read back.

    ``obj`` is a Dataset, a DataTree (groups become NCZarr groups; a variable references the nearest
    ancestor's dimension of the same name and size, with fully qualified names) or a mapping of group
    paths to Datasets (``xr.open_groups`` output), which can hold a subgroup dimension that shadows
    an ancestor's with another size. ``target`` is a directory path, a ``.zip`` path, a
    ``file:///abs/path#mode=nczarr,file`` URL or a zarr-python ``Store``.

    Strings: NC_STRING ``|Sn`` whose width ``n`` is, in order, ``maxstrlen`` (one int, or a mapping of
    variable name/path to int), ``encoding["maxstrlen"]``, ``default_maxstrlen`` (also written as the
    root's ``_nczarr_default_maxstrlen``), else the longest UTF-8 encoding in the data (at least 1).
    Values longer than a given width follow ``on_overflow``: ``"error"`` (default) raises
    ``StringOverflowError``, ``"truncate"`` cuts at a character boundary and warns
    (``StringTruncationWarning`` with the count), ``"widen"`` raises the width. NC_CHAR on request:
    ``encoding={"nc_type": "NC_CHAR"}`` (or xarray's ``{"dtype": "S1"}``), with
    ``encoding["char_dim_name"]``. Values containing NUL or lone surrogates raise ``ZStringsError``.

    ``mode``: ``"w-"`` (default) refuses a non-empty target, ``"w"`` replaces it, ``"a"`` appends
    along ``append_dim``, which must be unlimited in the store (``unlimited_dims=[...]`` or
    ``ds.encoding["unlimited_dims"]`` when first written). ``format="zarr2"`` writes pure Zarr v2
    (``_ARRAY_DIMENSIONS`` only, no ``_nczarr_*`` metadata) that netcdf-c reads with ``mode=zarr``.
    ``compressor`` is the default for variables whose encoding names none (e.g. ``{"id": "zstd",
    "level": 3}``); codecs netcdf-c cannot read are refused unless ``netcdf_c_codecs_only=False``.
    ``storage_options`` go to the store layer for ``s3://`` / ``https://...#mode=nczarr,s3`` targets.
    """
    if format not in ("nczarr", "zarr2"):
        raise ZStringsError(f"Invalid format={format!r}: expected 'nczarr' (NCZarr 2, the default) or "
                            "'zarr2' (pure Zarr v2 that netcdf-c reads with mode=zarr).")
    strings.check_on_overflow(on_overflow)
    groups = _as_groups(obj)
    root_ds = groups["/"]
    if default_maxstrlen is None and root_ds.encoding.get("default_maxstrlen") is not None:
        default_maxstrlen = int(root_ds.encoding["default_maxstrlen"])
    opts = _Options(fmt=format, on_overflow=on_overflow, maxstrlen=maxstrlen,
                    default_maxstrlen=default_maxstrlen, compressor=compressor,
                    strict_codecs=netcdf_c_codecs_only)
    if mode == "a":
        if append_dim is None:
            raise ZStringsError("mode='a' needs append_dim=<name of an unlimited dimension> to append along.")
        zstore = _open_for_write(target, "a", storage_options)
        _append(zstore, groups, append_dim, opts)
        return
    if append_dim is not None:
        raise ZStringsError(f"append_dim={append_dim!r} is only used with mode='a'.")
    unl: dict[str, set[str]] = {}
    extra_unlimited = set(unlimited_dims or ())
    plans: dict[str, list[_Array]] = {}
    gattrs: dict[str, dict[str, Any]] = {}
    for path, ds in groups.items():
        unl[path] = set(ds.encoding.get("unlimited_dims") or ()) | extra_unlimited
        plans[path], gattrs[path] = _plan_group(path, ds, opts, unl[path])
    declared = _resolve_dimensions(plans, unl) if format == "nczarr" else {g: {} for g in plans}
    for arrays in plans.values():
        for a in arrays:
            a.pipeline = build_pipeline(a.compressor, a.filters or (), dtype=a.dtype,
                                        string_kind={"string": "string", "char": "char"}.get(a.kind),
                                        where=_what(a.group, a.name))
    zstore = _open_for_write(target, mode, storage_options)
    try:
        _write_all(zstore, groups, plans, gattrs, declared, opts)
    finally:
        _close(zstore)


def _write_all(
    zstore: ZStore,
    groups: Mapping[str, xr.Dataset],
    plans: Mapping[str, list[_Array]],
    gattrs: Mapping[str, dict[str, Any]],
    declared: Mapping[str, Mapping[str, list[Any]]],
    opts: _Options,
) -> None:
    # 1. chunks (numpy arrays on threads, dask arrays in one parallel compute)
    lazy: list[tuple[_Array, Any]] = []
    for arrays in plans.values():
        for a in arrays:
            if _is_dask(a.data):
                lazy.append((a, _dask_writer(zstore, a)))
            else:
                _write_numpy(zstore, a, np.asarray(a.data))
    if lazy:
        import dask

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", StringTruncationWarning)
            counts = dask.compute(*[x.sum() for _, x in lazy])
        for (a, _), n in zip(lazy, counts, strict=True):
            if int(n):
                warnings.warn(StringTruncationWarning(
                    f"{_what(a.group, a.name)}: {int(n)} value(s) longer than {a.maxstrlen or a.shape[-1]} "
                    "bytes were cut at a character boundary (on_overflow='truncate')"), stacklevel=3)
    # 2. array and subgroup metadata, 3. the root group last: until then the store is not a dataset
    items: list[tuple[str, bytes]] = []
    for arrays in plans.values():
        for a in arrays:
            items.append((f"{a.key}/.zarray", _dumps(_zarray(a))))
            items.append((f"{a.key}/.zattrs", _dumps(_array_zattrs(a, opts.fmt))))
    children = {p: [c.rsplit("/", 1)[1] for c in groups if c != "/" and (c.rsplit("/", 1)[0] or "/") == p]
                for p in groups}
    root_items: list[tuple[str, bytes]] = []
    for path in groups:
        za = _group_zattrs(path, gattrs[path], declared.get(path, {}), [a.name for a in plans[path]],
                           children[path], opts.fmt, default_maxstrlen=opts.default_maxstrlen)
        prefix = "" if path == "/" else path.strip("/") + "/"
        if path == "/":
            root_items = [(".zattrs", _dumps(za)), (".zgroup", _dumps({"zarr_format": 2}))]
        else:
            items.append((prefix + ".zattrs", _dumps(za)))
            items.append((prefix + ".zgroup", _dumps({"zarr_format": 2})))
    zstore.set_many(items)
    zstore.set_many(root_items[:1])
    zstore.set_many(root_items[1:])


def _close(zstore: ZStore) -> None:
    if type(zstore.store).__name__ == "ZipStore":
        zstore.store.close()


# ---------------------------------------------------------------------------------------------
# Append along an unlimited dimension
# ---------------------------------------------------------------------------------------------


def _append(zstore: ZStore, groups: Mapping[str, xr.Dataset], append_dim: str, opts: _Options) -> None:
    """Append each variable that has ``append_dim`` to the existing arrays, then grow the metadata.

    New chunks are written first; a partial last chunk is read, completed and rewritten (its old part
    unchanged, so readers of the old metadata still see the old values). Then each ``.zarray`` shape,
    then the declaring group's ``_nczarr_group`` size (the root last). Variables without ``append_dim``
    are left as stored. Strings keep the stored width: ``on_overflow="widen"`` cannot apply.
    """
    from .metadata import parse_json
    from .reader import ChunkedArray, open_tree

    tree = open_tree(zstore)
    nczarr = tree.root.is_nczarr
    updates: list[tuple[str, bytes]] = []
    dim_growth: dict[str, int] = {}  # declaring group -> new size of append_dim there
    for gpath, ds in groups.items():
        if gpath not in tree.groups:
            raise ZStringsError(f"Cannot append group {gpath!r}: {zstore.display} has no such group. Groups: "
                                f"{sorted(tree.groups)}.")
        variables, _ = conventions.encode_dataset_coordinates(ds)
        for name, var in variables.items():
            name = str(name)
            if append_dim not in var.dims:
                continue
            apath = f"{gpath.rstrip('/')}/{name}"
            meta = tree.arrays.get(apath)
            what = _what(gpath, name)
            if meta is None:
                raise ZStringsError(f"Cannot append {what}: it is not in {zstore.display}. Appending adds values "
                                    "to existing variables only; write new variables with mode='w'.")
            axis = list(var.dims).index(append_dim)
            offset = meta.shape[axis]
            if nczarr:
                ref = (meta.dimension_references or ())[axis] if meta.dimension_references else None
                dim = tree.dimension(ref, where=zstore.where(apath)) if ref else None
                if dim is None or not dim.unlimited:
                    raise ZStringsError(
                        f"Cannot append {what} along {append_dim!r}: the dimension is not unlimited in "
                        f"{zstore.display}. Write the store with unlimited_dims=[{append_dim!r}] first.")
                offset = dim.size
                decl = (ref or "").rpartition("/")[0] or "/"
            else:
                decl = gpath
            # encode the new values as the stored ones were (CF attributes, string width, char width)
            var = var.copy(deep=False)
            enc = dict(var.encoding)
            for k in ("units", "calendar", "scale_factor", "add_offset", "_FillValue"):
                if k in meta.attrs:
                    enc[k] = meta.attrs[k]
            if meta.string_kind == "string":
                enc.update(maxstrlen=meta.dtype.itemsize, nc_type="NC_STRING")
            elif meta.string_kind == "char":
                enc.update(nc_type="NC_CHAR", char_dim_width=meta.shape[-1])
                enc.setdefault("_Encoding", meta.attrs.get("_Encoding", "utf-8"))
            else:
                enc["dtype"] = meta.dtype
            var.encoding = enc
            var.attrs = {k: v for k, v in var.attrs.items() if k not in enc}
            policy = "error" if opts.on_overflow == "widen" else opts.on_overflow
            one = _Options(fmt=opts.fmt, on_overflow=policy, maxstrlen=None, default_maxstrlen=None,
                           compressor=None, strict_codecs=False)
            kind = _string_like(var)
            var = var.compute() if _is_dask(var.data) else var
            a = (_string_array(gpath, name, var, kind, one, set()) if kind is not None
                 else _numeric_array(gpath, name, var, one, set()))
            storage = np.asarray(a.data)
            if storage.dtype != meta.dtype:
                if meta.string_kind is not None:
                    raise ZStringsError(f"Cannot append {what}: the new values are stored as {storage.dtype} "
                                        f"but the store has {meta.dtype_str}.")
                storage = storage.astype(meta.dtype)
            expect = list(meta.shape)
            expect[axis] = storage.shape[axis]
            if list(storage.shape) != expect:
                raise DimensionError(f"Cannot append {what}: new values have shape {list(storage.shape)}, "
                                     f"expected {expect} (only {append_dim!r} may differ).")
            # the partial chunk before the new values, read back so it can be rewritten whole
            c = meta.chunks[axis]
            start = (offset // c) * c
            if start < offset:
                logical = list(meta.shape)
                logical[axis] = offset
                raw = ChunkedArray(zstore, meta, tuple(logical))
                region = tuple(slice(start, offset) if i == axis else slice(0, n)
                               for i, n in enumerate(meta.shape))
                storage = np.concatenate([raw.read(region), storage], axis=axis)
            target = _Array(
                group=gpath, name=name, dims=(), ref_hints=(), unlimited=frozenset(),
                shape=tuple(storage.shape), chunks=meta.chunks, dtype=meta.dtype, dtype_str=meta.dtype_str,
                fill_json=None, fill_storage=ChunkedArray(zstore, meta, meta.shape)._fill(),
                compressor=None, filters=None, attrs={}, kind=a.kind, data=storage,
                pipeline=build_pipeline(meta.compressor, meta.filters, dtype=meta.dtype,
                                        string_kind=meta.string_kind, where=what),
            )
            origin = tuple(start // c if i == axis else 0 for i in range(len(meta.shape)))
            _write_numpy(zstore, target, storage, origin)
            new_len = offset + (storage.shape[axis] - (offset - start))
            zarray = dict(meta.raw_zarray)
            zarray["shape"] = [new_len if i == axis else n for i, n in enumerate(meta.shape)]
            updates.append((f"{apath.strip('/')}/.zarray", _dumps(zarray)))
            dim_growth[decl] = max(dim_growth.get(decl, 0), new_len)
    if nczarr:
        # netcdf-c sizes every array on an unlimited dimension to the dimension (else it refuses the
        # store): grow the arrays this append did not touch too; their new part reads as fill
        grown = {f"{decl.rstrip('/')}/{append_dim}": size for decl, size in dim_growth.items()}
        touched = {k.rsplit("/", 1)[0] for k, _ in updates}
        for apath, meta in tree.arrays.items():
            refs = meta.dimension_references or ()
            if apath.strip("/") in touched or not any(r in grown for r in refs):
                continue
            zarray = dict(meta.raw_zarray)
            zarray["shape"] = [max(n, grown.get(r, n)) for r, n in zip(refs, meta.shape, strict=True)]
            updates.append((f"{apath.strip('/')}/.zarray", _dumps(zarray)))
    zstore.set_many(updates)
    group_updates: list[tuple[str, bytes]] = []
    for gpath, size in dim_growth.items():
        if not nczarr:
            continue
        key = ".zattrs" if gpath == "/" else f"{gpath.strip('/')}/.zattrs"
        za = parse_json(zstore.get_bytes(key) or b"{}", where=zstore.where(key))
        info = za.get("_nczarr_group") or {}
        dims = info.get("dimensions") or info.get("dims") or {}
        spec = dims.get(append_dim)
        if isinstance(spec, Mapping):
            spec = dict(spec)
            spec["size"] = max(int(spec.get("size", 0)), size)
        else:
            spec = {"size": max(int(spec or 0), size), "unlimited": 1}
        dims[append_dim] = spec
        group_updates.append((key, _dumps(za)))
    group_updates.sort(key=lambda kv: kv[0] == ".zattrs")  # the root last
    for item in group_updates:
        zstore.set_many([item])


# ---------------------------------------------------------------------------------------------
# Helpers for other workflows
# ---------------------------------------------------------------------------------------------


def prepare_for_zarr(
    ds: xr.Dataset,
    *,
    maxstrlen: int | Mapping[str, int] | None = None,
    on_overflow: strings.OnOverflow = "error",
) -> xr.Dataset:
    """A copy of ``ds`` whose string variables are NUL-padded UTF-8 ``|Sn`` bytes, for ``ds.to_zarr``.

    ``prepare_for_zarr(ds).to_zarr(path, zarr_format=2, consolidated=False)`` then writes strings as
    netcdf-c's NC_STRING layout (``|Sn`` plus ``_nczarr_maxstrlen``) instead of ``<U``/vlen-utf8, which
    netcdf-c cannot read; open the result with ``netCDF4.Dataset(".../x.zarr#mode=zarr,file")`` or
    ``xr.open_dataset(path, engine="zstrings")`` (strings come back as ``str``). The width and the
    overflow policy are as in ``to_nczarr``. Dask-backed variables stay lazy when a width is given.
    """
    opts = _Options(fmt="zarr2", on_overflow=on_overflow, maxstrlen=maxstrlen, default_maxstrlen=None,
                    compressor=None, strict_codecs=False)
    out = ds.copy()
    for name, var in ds.variables.items():
        if _string_like(var) != "str":
            continue
        enc = dict(var.encoding)
        enc.pop("nc_type", None)
        enc.pop("dtype", None)
        tmp = xr.Variable(var.dims, var.data, {}, enc)
        a = _string_array("/", str(name), tmp, "str", opts, set())
        data = a.data
        if _is_dask(data):
            enc_block = a.encode_block
            assert enc_block is not None
            data = data.map_blocks(lambda b, f=enc_block: f(b)[0], dtype=a.dtype)
        attrs = dict(var.attrs)
        attrs["_nczarr_maxstrlen"] = a.maxstrlen
        new = xr.Variable(var.dims, data, attrs)
        new.encoding = {"chunks": var.encoding.get("chunks")} if var.encoding.get("chunks") else {}
        if name in ds.indexes:
            out = out.assign_coords({name: new})
        else:
            out[name] = new
    return out


from . import accessor as _accessor  # noqa: E402,F401  (registers the .zstrings accessor)
