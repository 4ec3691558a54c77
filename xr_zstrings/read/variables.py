"""One group as variables, without xarray: resolved dimensions, typed attributes, encodings and
the lazily decoded data of each array (``group_contents``).

Which decoder a variable gets follows from its string layout and the store's conventions
(NCZarr's NC_STRING/NC_CHAR, xarray's ``_Encoding``, pure Zarr's bytes), the same for both Zarr
versions; what only one version has (codecs, shards) comes from its chunk reader.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..codecs.encoding import netcdf4_keys
from ..errors import ChunkError, DimensionError, GroupNotFoundError, UnknownCodecError, ZStringsError, user_stacklevel
from ..formats.array import ArrayMeta
from ..formats.nczarr import Dimension
from ..formats.netcdf_c import is_nczarr
from ..text import dtypes as strings
from .chunked import open_chunked
from .decode import Decode
from .lazy import LazyArray
from .options import DEFAULT_OPTIONS, ReadOptions
from .paths import join_path as _join
from .tree import TreeMeta

__all__ = ["ANONYMOUS_DIM", "MISSING_MARKER", "MISSING_MARKER_BYTES", "GroupContents", "VariableSpec", "anonymous_dims",
           "group_contents", "group_not_found", "joined_char_arrays",
           "resolve_dims"]

#: netcdf-c names the dimensions it invents for arrays without any: ``_Anonymous_Dim_<len>``.
ANONYMOUS_DIM = "_Anonymous_Dim_{}"
_ANONYMOUS = re.compile(r"_Anonymous_Dim_\d+")

#: the ``_FillValue`` put in the encoding of a string variable whose missing values have no fill of
#: their own (a Zarr v2 ``fill_value: null``, zarrs' ``optional`` type), for xarray's writers:
#: U+FFFF, a Unicode noncharacter (permanently reserved for use inside programs, never a character
#: of interchanged text), so it cannot stand for a real value; ``encoding["zstrings_missing_marker"]``
#: says so (our own writers use the store's own missing-value forms instead)
MISSING_MARKER = "\uffff"
#: the same for bytes: U+FFFF's UTF-8 bytes (a value equal to it is warned about when read)
MISSING_MARKER_BYTES = MISSING_MARKER.encode("utf-8")


def anonymous_dims(shape: tuple[int, ...], names: tuple[str | None, ...] | None = None) -> list[str]:
    """netcdf-c's invented names for the unnamed axes of one array, made distinct within it.

    netcdf-c gives a 5x5 array ``(_Anonymous_Dim_5, _Anonymous_Dim_5)``: one dimension used
    twice, which xarray cannot index (``isel`` silently returns the wrong shape). The second and
    later uses get ``_Anonymous_Dim_5_1``, ``_Anonymous_Dim_5_2``, ... (never a netcdf-c name).
    """
    names = names or (None,) * len(shape)
    out: list[str] = []
    for n, size in zip(names, shape, strict=True):
        if n is not None:
            out.append(n)
            continue
        base = ANONYMOUS_DIM.format(size)
        k = sum(1 for o in out if o == base or o.startswith(base + "_"))
        out.append(base if k == 0 else f"{base}_{k}")
    return out


@dataclass
class VariableSpec:
    """Everything xarray needs for one variable, without xarray."""

    name: str
    dims: tuple[str, ...]
    data: LazyArray
    attrs: dict[str, Any]
    encoding: dict[str, Any]
    #: encoding keys for after xarray's CF decoding, which reads ``encoding`` differently (an NC_CHAR
    #: variable's ``dtype`` is "S1" for the writers, StringDType while xarray decodes it)
    decoded_encoding: dict[str, Any] = field(default_factory=dict)


@dataclass
class GroupContents:
    """One group, ready for xarray: variables, attributes, dimensions, dataset encoding."""

    path: str
    variables: dict[str, VariableSpec]
    attrs: dict[str, Any]
    dimensions: dict[str, Dimension]
    encoding: dict[str, Any]


def resolve_dims(tree: TreeMeta, meta: ArrayMeta) -> list[Dimension]:
    """The netCDF dimensions of an array: NCZarr references, else the names the array carries
    (``_ARRAY_DIMENSIONS``, v3 ``dimension_names``), else netcdf-c's anonymous ones. One rule for
    anonymous dimensions on every path: an array that uses one twice (``_Anonymous_Dim_20`` in a
    20x20 array, however the store names it) gets ``_Anonymous_Dim_20``, ``_Anonymous_Dim_20_1``."""
    where = tree.store.where(meta.path.strip("/"))
    if meta.scalar:
        return []
    if meta.dimension_references is not None:
        dims = [tree.dimension(r, where=where) for r in meta.dimension_references]
        for d, n in zip(dims, meta.shape, strict=True):
            if n != d.size and not (d.unlimited and n <= d.size):
                raise DimensionError(
                    f"Array {meta.path!r} in {tree.store.display} has shape {list(meta.shape)} but "
                    f"dimension {d.name!r} has size {d.size} (references "
                    f"{list(meta.dimension_references)}). Fix .zarray's shape or the dimension size."
                )
        names = anonymous_dims(meta.shape, tuple(_unless_anonymous(d.name) for d in dims))
        return [d if d.name == n else replace(d, name=n) for d, n in zip(dims, names, strict=True)]
    given = meta.dimension_names
    names = anonymous_dims(meta.shape, None if given is None else tuple(_unless_anonymous(n) for n in given))
    return [Dimension(n, s) for n, s in zip(names, meta.shape, strict=True)]


def _unless_anonymous(name: str | None) -> str | None:
    """None for a name netcdf-c invented (``_Anonymous_Dim_<len>``), so ``anonymous_dims`` names
    the axis as it names an unnamed one: distinct within the array."""
    return None if name is None or _ANONYMOUS.fullmatch(name) else name


def group_contents(
    tree: TreeMeta,
    path: str = "/",
    *,
    options: ReadOptions = DEFAULT_OPTIONS,
    drop_variables: set[str] | None = None,
) -> GroupContents:
    """Build one group's variables with resolved, consistent dimension names and sizes, reconciled
    across all of a group's variables at once (shadowing, unlimited sizes, NC_CHAR string
    dimensions, coordinates)."""
    path = "/" + path.strip("/") if path.strip("/") else "/"
    group = tree.groups.get(path)
    if group is None:
        raise group_not_found(tree, path)
    arrays, _ = tree.children[path]
    drop = drop_variables or set()
    variables: dict[str, VariableSpec] = {}
    sizes: dict[str, tuple[int, str]] = {}
    unlimited: set[str] = {d.name for d in group.dimensions.values() if d.unlimited}
    resolved = _resolve_group_dims(tree, path, arrays, drop)
    joinable = _char_dims_joinable(tree, path, arrays, resolved)
    for name in arrays:
        if name in drop:
            continue
        spec = _decoded_variable(tree, path, name, resolved[name], sizes, options, joinable)
        if spec is not None:
            variables[name] = spec
            _note_dims(resolved[name], name, sizes, unlimited)
    _add_zarr_python_variables(tree, path, drop, variables, sizes)
    encoding: dict[str, Any] = {
        "source": tree.store.display,
        "unlimited_dims": {u for u in unlimited if u in sizes or u in group.dimensions},
        "zstrings_format": group.generation,
    }
    if path == "/" and group.default_maxstrlen is not None:
        encoding["default_maxstrlen"] = group.default_maxstrlen
    return GroupContents(
        path=path, variables=variables, attrs=dict(group.attrs), dimensions=dict(group.dimensions), encoding=encoding
    )


def _resolve_group_dims(tree: TreeMeta, path: str, arrays: list[str], drop: set[str]) -> dict[str, list[Dimension]]:
    """The dimensions of each array of a group; a dropped variable's broken dimensions do not
    block the group (they resolve to none)."""
    resolved: dict[str, list[Dimension]] = {}
    for name in arrays:
        try:
            resolved[name] = resolve_dims(tree, tree.arrays[_join(path, name)])
        except ZStringsError:
            if name not in drop:
                raise
            resolved[name] = []
    return resolved


def _note_dims(dims: list[Dimension], name: str, sizes: dict[str, tuple[int, str]], unlimited: set[str]) -> None:
    """Records the sizes (first user wins) and unlimited dimensions of variable ``name``."""
    for d in dims:
        sizes.setdefault(d.name, (d.size, name))
        if d.unlimited:
            unlimited.add(d.name)


def _decoded_variable(tree: TreeMeta, path: str, name: str, dims: list[Dimension],
                      sizes: Mapping[str, tuple[int, str]], options: ReadOptions,
                      joinable: set[str]) -> VariableSpec | None:
    """One array of a group as a variable this package decodes; None when it is left out (a
    dimension used twice, warned) or its codecs are unknown (noted in ``tree.unreadable``)."""
    meta = tree.arrays[_join(path, name)]
    if len({d.name for d in dims}) < len(dims):  # netCDF allows v(x, x); xarray does not
        _leave_out(tree, meta.path, f"it uses one dimension twice ({[d.name for d in dims]}), "
                   "which an xarray Dataset cannot hold")
        return None
    for d in dims:
        prev = sizes.get(d.name)
        if prev is not None and prev[0] != d.size:
            raise DimensionError(
                f"Group {path!r} of {tree.store.display}: variable {name!r} uses dimension {d.name!r} "
                f"with size {d.size} but variable {prev[1]!r} uses it with size {prev[0]}. A netCDF "
                "group can reference an ancestor's dimension and a shadowing one of the same name; "
                "an xarray Dataset cannot hold both. Drop one of the variables (drop_variables=...)."
            )
    join = bool(dims) and dims[-1].name in joinable
    try:
        return _variable(tree, meta, dims, options, join_chars=join)
    except UnknownCodecError as e:  # (not a refusal to protect memory: those still raise)
        tree.unreadable[meta.path] = str(e)
        return None


def _add_zarr_python_variables(tree: TreeMeta, path: str, drop: set[str], variables: dict[str, VariableSpec],
                               sizes: dict[str, tuple[int, str]]) -> None:
    """Adds the group's arrays this package cannot decode, read through zarr-python, unless their
    dimension sizes clash with the variables already read (then left out, with a warning)."""
    for apath, why in tree.unreadable.items():
        parent, _, name = apath.rpartition("/")
        if (parent or "/") != path or name in drop or name in variables:
            continue
        spec = _through_zarr_python(tree, apath, why)
        if spec is None:
            continue
        for dname, size in zip(spec.dims, spec.data.shape, strict=True):
            prev = sizes.get(dname)
            if prev is not None and prev[0] != size:
                _leave_out(tree, apath, f"its dimension {dname!r} has size {size} but variable {prev[1]!r} "
                           f"uses it with size {prev[0]}")
                break
        else:
            for dname, size in zip(spec.dims, spec.data.shape, strict=True):
                sizes[dname] = (size, name)
            variables[name] = spec


def group_not_found(tree: TreeMeta, path: str) -> GroupNotFoundError:
    """The error for a ``group=`` the store does not hold (a ``FileNotFoundError``, as netCDF4's
    and zarr-python's), naming the groups it does hold."""
    return GroupNotFoundError(
        f"No group {path!r} in {tree.store.display}. Available groups: {sorted(tree.groups)}; pass one "
        "of them as group=..."
    )


def _leave_out(tree: TreeMeta, apath: str, why: str) -> None:
    name = apath.rsplit("/", 1)[-1]
    warnings.warn(
        f"Variable {apath!r} of {tree.store.display} is left out: {why}. Every other variable is "
        f"read. Pass drop_variables=[{name!r}] to silence this, or read it with engine='zarr'.",
        UserWarning, stacklevel=user_stacklevel(),
    )


class ZarrPythonArray:
    """An array this package does not decode, read lazily through zarr-python (outer indexing)."""

    def __init__(self, arr: Any, what: str) -> None:
        self.arr = arr
        self.what = what
        self.shape: tuple[int, ...] = tuple(arr.shape)
        self.dtype = np.dtype(arr.dtype)
        self.decode = Decode.ZARR_PYTHON

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, key: tuple[Any, ...]) -> np.ndarray:
        try:
            if not self.shape:
                return np.asarray(self.arr[...])
            return np.asarray(self.arr.oindex[key])
        except Exception as e:  # noqa: BLE001 - zarr-python's errors, named and explained
            raise ChunkError(
                f"zarr-python cannot read {self.what}: {type(e).__name__}: {e}. It was read through "
                "zarr-python because this package does not decode it; drop it (drop_variables=...)."
            ) from None


def _through_zarr_python(tree: TreeMeta, apath: str, why: str) -> VariableSpec | None:
    """An array this package cannot decode, read by zarr-python when it can; else None (with a
    warning naming the array, the reason and the fix)."""
    try:
        import zarr

        arr = zarr.open_array(tree.store.store, path=tree.store.full_key(apath.strip("/")), mode="r")
        np.dtype(arr.dtype)  # zarr-python's own extension types (no numpy dtype) are not read
    except Exception as e:  # noqa: BLE001 - zarr-python cannot either: say both reasons
        _leave_out(tree, apath, f"{why} (zarr-python cannot read it either: {type(e).__name__}: {e})")
        return None
    meta = arr.metadata
    if getattr(meta, "zarr_format", 2) == 3:
        dim_names = getattr(meta, "dimension_names", None)
        names: Any = tuple(dim_names) if dim_names else None
        attrs = dict(arr.attrs)
    else:
        attrs = dict(arr.attrs)
        names = attrs.pop("_ARRAY_DIMENSIONS", None)
        names = tuple(names) if isinstance(names, list) and len(names) == arr.ndim else None
    dims = tuple(anonymous_dims(tuple(arr.shape), None if names is None else tuple(map(_unless_anonymous, names))))
    encoding = {"chunks": tuple(arr.chunks), "preferred_chunks": dict(zip(dims, arr.chunks, strict=True)),
                "read_by": "zarr-python", "zstrings_unsupported": why}
    return VariableSpec(name=apath.rsplit("/", 1)[-1], dims=dims, data=ZarrPythonArray(arr, f"variable {apath!r} of {tree.store.display}"),  # type: ignore[arg-type]  # read like a LazyArray
                        attrs=attrs, encoding=encoding)


def joined_char_arrays(tree: TreeMeta, path: str) -> set[str]:
    """The NC_CHAR arrays of group ``path`` whose characters engine="zstrings" joins into text (its
    last dimension is joinable, or it is a scalar), as ``group_contents`` decides it."""
    arrays, _ = tree.children[path]
    resolved: dict[str, list[Dimension]] = {}
    for name in arrays:
        try:
            resolved[name] = resolve_dims(tree, tree.arrays[_join(path, name)])
        except ZStringsError:
            resolved[name] = []
    joinable = _char_dims_joinable(tree, path, arrays, resolved)
    out = set()
    for name in arrays:
        meta = tree.arrays[_join(path, name)]
        if meta.string_kind == "char" and (meta.scalar or (resolved[name] and resolved[name][-1].name in joinable)):
            out.add(name)
    return out


def _char_dims_joinable(tree: TreeMeta, path: str, arrays: list[str],
                        resolved: Mapping[str, list[Dimension]]) -> set[str]:
    """The dimensions an NC_CHAR variable's characters may be joined along, as xarray decides it
    (``xarray.conventions.decode_cf_variables``' ``stackable``): no variable is named after the
    dimension and every variable using it (dropped ones too) is NC_CHAR with it as last dimension.
    Elsewhere engine="netcdf4" returns the separate characters, and so do we."""
    users: dict[str, list[tuple[bool, bool]]] = {}
    for name in arrays:
        meta = tree.arrays[_join(path, name)]
        names = [d.name for d in resolved.get(name, [])]
        for i, d in enumerate(names):
            users.setdefault(d, []).append((meta.string_kind == "char", i == len(names) - 1))
    return {d for d, us in users.items() if d not in arrays and all(c and last for c, last in us)}


def _variable(tree: TreeMeta, meta: ArrayMeta, dims: list[Dimension], options: ReadOptions,
              join_chars: bool = True) -> VariableSpec:
    """One array as a variable: logical shape, fill and missing values, string layout and decoder,
    encoding and the lazy data (the decoder and the encoding by ``_decode_mode``, the missing
    values by ``_fill_and_mask`` and ``_missing_marker``)."""
    logical = tuple(max(d.size, n) if d.unlimited else n for d, n in zip(dims, meta.shape, strict=False))
    if meta.scalar:
        logical = (1,)
    # never-written chunks (and zarrs' null elements) are missing values, as zarr-python 2 reads a
    # |O array's fill_value null
    null_fill = meta.null_fill
    wants_bytes = strings.resolve_string_dtype(options.string_dtype).kind == "S"
    raw = open_chunked(tree.store, meta, logical, utf8_errors=options.utf8_errors, threads=options.decode_threads,
                       null_fill=null_fill, raw_bytes=wants_bytes)
    # (Zarr v3: xarray stores the CF _FillValue attribute encoded, base64 bytes of the value)
    attrs = meta.cf_attributes(store=tree.store.display)
    encoding = _stored_encoding(tree, meta, dims, raw)
    what = f"variable {meta.path!r} of {tree.store.display}"
    # text bytes with xarray's/netCDF's _Encoding: xarray decodes them before masking, so a bytes
    # fill never matches there (engine="netcdf4"/"zarr" mask nothing); neither do we
    encoded_text = meta.string_kind in ("char", "string") and "_Encoding" in attrs
    decode, text_encoding, dim_names = _decode_mode(tree, meta, dims, attrs, encoding, raw, options,
                                                    join_chars=join_chars, wants_bytes=wants_bytes)
    missing = _fill_and_mask(meta, attrs, encoding, decode, options, netcdf_c=tree.netcdf_c,
                             encoded_text=encoded_text)
    marker = _missing_marker(meta, attrs, encoding, decode, null_fill)
    data = LazyArray(raw, decode=decode, options=options, encoding=text_encoding, what=what,
                     missing=missing, null_chunks=null_fill and decode in (Decode.VLEN, Decode.TEXT), marker=marker)
    # xarray keeps StringDType only when encoding["dtype"] says so (else it casts to object), and
    # turns object arrays into fixed-width U when encoding["dtype"] is str: say what we return.
    if data.dtype.kind == "T":
        encoding["dtype"] = data.dtype
    elif data.dtype.kind == "U" and decode != Decode.CHAR:
        encoding["dtype"] = str
    # joined NC_CHAR: "S1" (and char_dim_name) make to_netcdf/to_nczarr write NC_CHAR again, as
    # after engine="netcdf4"
    after = {"dtype": np.dtype("S1")} if decode in (Decode.CHAR, Decode.BYTES_CHAR) else {}
    return VariableSpec(name=meta.name, dims=dim_names, data=data, attrs=attrs, encoding=encoding,
                        decoded_encoding=after)


def _stored_encoding(tree: TreeMeta, meta: ArrayMeta, dims: list[Dimension], raw: Any) -> dict[str, Any]:
    """What the store says of an array's chunks and codecs, as encoding keys."""
    encoding: dict[str, Any] = {
        "chunks": None if meta.scalar else meta.chunks,
        "preferred_chunks": {} if meta.scalar else dict(zip([d.name for d in dims], meta.chunks, strict=True)),
    }
    where = f"variable {meta.path!r} of {tree.store.display}"
    # compressors/filters as the codec objects xarray's to_zarr takes (zarr_encoding explains the
    # vocabulary); the store's own JSON stays under zstrings_* keys, which xarray's writers ignore
    encoding.update(raw.store_encoding(where))
    if meta.zarr_format == 2 and (is_nczarr(meta.generation) or tree.netcdf_c):
        # netcdf-c's store: what engine="netcdf4" gives (zlib, shuffle, chunksizes, ...), so
        # to_netcdf writes what netCDF-4 wrote
        encoding.update(netcdf4_keys(meta.compressor, meta.filters,  # type: ignore[attr-defined]  # Zarr v2's
                                     chunks=None if meta.scalar else meta.chunks,
                                     shape=meta.logical_shape, text=meta.string_kind is not None))
    return encoding


def _decode_mode(tree: TreeMeta, meta: ArrayMeta, dims: list[Dimension], attrs: dict[str, Any],
                 encoding: dict[str, Any], raw: Any, options: ReadOptions, *, join_chars: bool,
                 wants_bytes: bool) -> tuple[Decode, str, tuple[str, ...]]:
    """How an array's values are decoded, by its string layout: (decode mode, text encoding, the
    variable's dimensions: a joined NC_CHAR loses its string-length one). Sets the layout's
    encoding keys (and moves ``_Encoding`` between ``attrs`` and ``encoding``)."""
    dim_names: tuple[str, ...] = tuple(d.name for d in dims)
    kind = meta.string_kind
    decode = Decode.NUMERIC
    text_encoding = "utf-8"
    if kind == "string":
        decode, text_encoding = _fixed_bytes_decode(meta, attrs, encoding, netcdf_c=tree.netcdf_c,
                                                    wants_bytes=wants_bytes)
    elif kind == "char":
        return _char_decode(meta, dims, attrs, encoding, options, join_chars=join_chars, wants_bytes=wants_bytes)
    elif kind == "unicode":
        decode = Decode.BYTES_UNICODE if wants_bytes else Decode.UNICODE
    elif kind == "vlen" and wants_bytes:
        decode = Decode.VLEN_BYTES  # (the ChunkedArray reads the chunks as their bytes twins)
    elif kind == "vlen":
        decode = raw.vlen_decode  # Decode.VLEN (v2: objects) or Decode.TEXT (v3: straight to StringDType)
    elif kind == "vlen-bytes":
        decode = Decode.VLEN_BYTES
    return decode, text_encoding, dim_names


def _char_decode(meta: ArrayMeta, dims: list[Dimension], attrs: dict[str, Any], encoding: dict[str, Any],
                 options: ReadOptions, *, join_chars: bool, wants_bytes: bool) -> tuple[Decode, str,
                                                                                        tuple[str, ...]]:
    """``_decode_mode`` of an NC_CHAR array: its characters joined into strings (text, or the
    stored bytes with ``wants_bytes``) where they can be, else kept one per element."""
    char_keys = {"nc_type": "NC_CHAR", "dtype": np.dtype("S1"),
                 "char_dim_width": meta.shape[-1] if meta.shape and not meta.scalar else 1}
    if wants_bytes:  # the stored characters, joined where text would be
        return _char_bytes_decode(meta, dims, attrs, encoding, char_keys, options, join_chars=join_chars)
    dim_names: tuple[str, ...] = tuple(d.name for d in dims)
    stored_encoding = attrs.pop("_Encoding", None)  # decode as UTF-8 when the store says nothing
    text_encoding = str(stored_encoding or "utf-8")
    encoding.update(char_keys)
    if stored_encoding is not None:
        encoding["_Encoding"] = text_encoding
    if not options.concat_characters:
        return _char_kept(attrs, encoding, stored_encoding), text_encoding, dim_names
    if dims and join_chars:
        return Decode.CHAR, text_encoding, _join_char_dim(encoding, dims)
    if meta.scalar:
        return Decode.CHAR, text_encoding, dim_names
    if stored_encoding is not None:
        # characters not joined (see _char_dims_joinable): engine="netcdf4" decodes each
        # one with _Encoding; so do we, with the utf8_errors policy
        return Decode.CHAR_SEP, text_encoding, dim_names
    return _char_kept(attrs, encoding, stored_encoding), text_encoding, dim_names


def _char_bytes_decode(meta: ArrayMeta, dims: list[Dimension], attrs: dict[str, Any], encoding: dict[str, Any],
                       char_keys: dict[str, Any], options: ReadOptions, *,
                       join_chars: bool) -> tuple[Decode, str, tuple[str, ...]]:
    """``_char_decode`` with ``string_dtype="bytes"``: the stored characters, joined where text would be."""
    if "_Encoding" in attrs:  # kept as information; xarray must not decode the bytes with it
        encoding["_Encoding"] = attrs.pop("_Encoding")
    encoding.update(char_keys)
    dim_names: tuple[str, ...] = tuple(d.name for d in dims)
    if not (options.concat_characters and ((dims and join_chars) or meta.scalar)):
        return Decode.CHAR_RAW, "utf-8", dim_names
    if dims:
        dim_names = _join_char_dim(encoding, dims)
    return Decode.BYTES_CHAR, "utf-8", dim_names


def _join_char_dim(encoding: dict[str, Any], dims: list[Dimension]) -> tuple[str, ...]:
    """The dimensions of a joined NC_CHAR variable (its string-length one gone, named in
    ``encoding["char_dim_name"]``)."""
    encoding["char_dim_name"] = dims[-1].name
    _drop_char_dim(encoding, dims[-1].name)
    return tuple(d.name for d in dims[:-1])


def _char_kept(attrs: dict[str, Any], encoding: dict[str, Any], stored_encoding: Any) -> Decode:
    """An NC_CHAR array whose characters are kept one per element, as stored: its ``_Encoding``
    goes back to the attributes, where xarray's own CF decoding may use it."""
    if stored_encoding is not None:
        attrs["_Encoding"] = encoding.pop("_Encoding")
    return Decode.CHAR_RAW


def _missing_marker(meta: ArrayMeta, attrs: dict[str, Any], encoding: dict[str, Any], decode: str,
                    null_fill: bool) -> str | bytes | None:
    """Missing values with no fill value of their own (a v2 null fill, zarrs' optional type): a
    marker xarray's writers write them as (its CF encoder fills missing values with
    _FillValue), so they stay missing in what they write, never the text "nan"; else None."""
    if not (null_fill and meta.string_kind is not None and "_FillValue" not in encoding
            and "_FillValue" not in attrs):
        return None
    marker = MISSING_MARKER if decode not in _BYTES_DECODES else MISSING_MARKER_BYTES
    encoding["_FillValue"] = marker
    encoding["zstrings_missing_marker"] = True
    return marker


def _drop_char_dim(encoding: dict[str, Any], char_dim: str) -> None:
    """A joined NC_CHAR's chunks are those of its strings (the string-length dimension is one
    chunk, ``char_dim_width``), as the writers take them; ``chunksizes``/``original_shape`` (when
    the store is netcdf-c's) stay the stored ones, as engine="netcdf4" gives them."""
    encoding["preferred_chunks"].pop(char_dim, None)
    if encoding.get("chunks"):
        encoding["chunks"] = tuple(encoding["chunks"])[:-1]


#: decoders whose result is bytes (as stored): xarray's own CF decoding masks a bytes fill in them
_BYTES_DECODES = frozenset(d for d in Decode if d.as_bytes)


def _fill_and_mask(meta: ArrayMeta, attrs: dict[str, Any], encoding: dict[str, Any], decode: Decode | str,
                   options: ReadOptions, *, netcdf_c: bool, encoded_text: bool) -> str | None:
    """Where a variable's fill values go, and the string read as missing (or None).

    A CF ``_FillValue`` of a text result is masked here (into a ``StringDType`` with an NA object,
    which xarray's masking cannot build) and kept in ``encoding``, where xarray's writers find it to
    write missing values back; a bytes result keeps it as a bytes attribute, for xarray's own
    masking, as engine="netcdf4" and engine="zarr" return bytes. A pure Zarr ``fill_value`` marks
    missing values as engine="zarr" reads it (``use_zarr_fill_value_as_mask``: v2 yes, v3 no); a v3
    ``fill_value`` not used as a mask is kept in ``encoding["fill_value"]``, as engine="zarr" keeps it.
    """
    kind = meta.string_kind
    fill = _fill_of(meta, attrs, encoding, options, netcdf_c=netcdf_c)
    if fill is None:
        return None
    if kind is None:
        attrs["_FillValue"] = fill  # numbers: xarray's own CF masking
        return None
    if Decode(decode).as_bytes:
        raw = fill.encode("utf-8") if isinstance(fill, str) else fill
        # (an NC_CHAR fill stored as "" is the NUL character, as netCDF4 returns it)
        attrs["_FillValue"] = b"\x00" if kind == "char" and raw == b"" else raw
        return None
    fill = fill.decode("utf-8", "surrogateescape") if isinstance(fill, bytes) else str(fill)
    if not options.mask_and_scale:
        # nothing masked: the fill stays an attribute, as engine="netcdf4"/"zarr" leave it; in
        # encoding, xarray's writers would write every value its isnull() takes for missing as the
        # fill (a plain StringDType's "" among them: duck_array_ops.isnull)
        attrs["_FillValue"] = fill
        return None
    encoding["_FillValue"] = fill
    if encoded_text:
        # (bytes decoded with _Encoding: engine="netcdf4"/"zarr" compare the text with the bytes
        # fill and mask nothing, and xarray refuses to write a _FillValue on text as NC_CHAR)
        return None
    return fill


def _fill_of(meta: ArrayMeta, attrs: dict[str, Any], encoding: dict[str, Any], options: ReadOptions, *,
             netcdf_c: bool) -> Any:
    """A variable's fill value (or None): its CF ``_FillValue`` attribute (taken out of ``attrs``),
    else a pure Zarr ``fill_value`` used as a mask; a v3 ``fill_value`` not used as one goes to
    ``encoding["fill_value"]``."""
    pure = not is_nczarr(meta.generation) and not netcdf_c
    zarr_mask = options.use_zarr_fill_value_as_mask
    zarr_mask = (meta.zarr_format == 2) if zarr_mask is None else bool(zarr_mask)
    if pure and meta.zarr_format == 3 and not zarr_mask and not meta.null_fill:
        encoding["fill_value"] = meta.fill_value
    if "_FillValue" in attrs:
        return attrs.pop("_FillValue")
    if pure and zarr_mask and meta.fill_value is not None and not (meta.string_kind is not None and meta.null_fill):
        return meta.fill_value  # (numbers keep their numpy type, as before and as engine="zarr")
    return None


def _fixed_bytes_decode(meta: ArrayMeta, attrs: dict[str, Any], encoding: dict[str, Any], *, netcdf_c: bool,
                        wants_bytes: bool) -> tuple[Decode, str]:
    """(decode, text encoding) of a fixed-width bytes array (``|Sn``, v3 ``null_terminated_bytes``).

    It is text when the store says so: NCZarr's NC_STRING, anything netcdf-c wrote (its pure-Zarr
    mode too), a ``_nczarr_maxstrlen`` attribute (``with_netcdf_c_strings``), or xarray's ``_Encoding``
    attribute (decoded with it as xarray's CF decoding does, only trailing NULs ending a value).
    Otherwise it is bytes, returned as stored exactly as engine="zarr" and zarr-python return it:
    ``|Sn`` in a pure Zarr store is what xarray writes for a bytes variable (binary payloads too),
    and nothing says it is text. ``string_dtype="bytes"`` returns the stored bytes for every array.
    """
    declared = meta.declares_text or netcdf_c
    enc = attrs.get("_Encoding")
    if declared:
        encoding.update(nc_type="NC_STRING", maxstrlen=meta.dtype.itemsize)
    if wants_bytes or (not declared and enc is None):
        if enc is not None:  # kept as information; xarray must not decode the bytes with it
            encoding["_Encoding"] = attrs.pop("_Encoding")
        # one byte per value of NC_STRING: an object array, so xarray does not join it as characters
        return (Decode.BYTES_OBJ if declared and meta.dtype.itemsize == 1 else Decode.BYTES), "utf-8"
    if declared:
        return Decode.FIXED, "utf-8"
    if meta.dtype.itemsize == 1 and meta.shape and not meta.scalar:
        # |S1 + _Encoding is xarray's char array (encoding dtype "S1"): xarray's own CF decoding
        # joins the characters where it may and decodes them with _Encoding, as for engine="zarr"
        return Decode.BYTES, "utf-8"
    encoding["_Encoding"] = attrs.pop("_Encoding")
    return Decode.TEXT_S, str(enc)
