"""Whole-file conversion: a netCDF-4 file or a store <-> an NCZarr (or Zarr v2) store.

``convert(src, dst)`` picks the direction from the target: a ``.nc`` target is written with netCDF4
itself (NC_STRING strings, NC_CHAR kept as chars, groups and shadowed dimensions kept); any other
target is written with :func:`xr_zstrings.write.nczarr.to_nczarr`, from a netCDF file or from any store. netCDF4 is an optional dependency
(``pip install 'xr_zstrings[netcdf]'``).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Literal, Protocol, cast

import numpy as np
import xarray as xr

from ..codecs.encoding import netcdf_c_readable, v2_configs
from ..codecs.vocabulary import netcdf4_compression
from ..errors import CodecDroppedWarning, ZStringsError, user_stacklevel
from ..io.atomic import NETCDF_MAGIC
from ..io.redact import shown
from ..io.targets import NETCDF_SUFFIXES, parse_nczarr_url
from . import WriteMode, session
from .nczarr import to_nczarr
from .plan import _is_dask, check_names, text_kind
from .session import Target, netcdf_file

__all__ = ["COMPRESSORS", "FORMATS", "NETCDF_SUFFIXES", "RAW_DECODERS", "ConvertFormat", "CountedReads", "Progress", "convert",
           "is_netcdf_file", "target_format", "write_netcdf4", "write_netcdf4_file"]

ConvertFormat = Literal["nczarr", "zarr2", "zarr3", "netcdf4"]
#: the formats ``convert`` writes
FORMATS: tuple[ConvertFormat, ...] = ("nczarr", "zarr2", "zarr3", "netcdf4")
#: ``recompress`` choices: every variable's compressor (None: uncompressed)
COMPRESSORS: dict[str, dict[str, Any] | None] = {
    "zlib": {"id": "zlib", "level": 4}, "zstd": {"id": "zstd", "level": 3}, "bz2": {"id": "bz2", "level": 9},
    "none": None}


class Progress(Protocol):
    """A progress bar ``convert`` counts the bytes it reads on (tqdm's ``update``/``close``)."""

    def update(self, n: int) -> None: ...

    def close(self) -> None: ...


# values are copied undecoded, so fill values, packing and times stay exactly as stored
RAW_DECODERS: dict[str, Any] = {"mask_and_scale": False, "decode_times": False, "concat_characters": False,
                        "decode_coords": False, "decode_timedelta": False}


def _chunks() -> dict[str, Any] | None:
    """``chunks={}`` (the source's own chunks, as dask arrays: the conversion then reads and writes
    block by block, never a whole variable) when dask is installed, else None (whole variables)."""
    import importlib.util

    return {} if importlib.util.find_spec("dask") is not None else None


def _open_groups(src: str, engine: str, **kwargs: Any) -> dict[str, xr.Dataset]:
    """Every group of ``src``, dask-backed on the source's own chunks when dask is installed.

    Each group is opened on its own (``group=path``): ``xr.open_groups(chunks=...)`` gives
    variables of the same name in different groups the same dask name (the token leaves the group
    out; xarray 2026.9), so one dask graph would hand both the values of one of them."""
    groups = xr.open_groups(src, engine=engine, **kwargs)
    if _chunks() is None:
        return groups
    out = {}
    for path, ds in groups.items():
        ds.close()
        out[path] = xr.open_dataset(src, engine=engine, group=path, chunks={}, **kwargs)
    return out


def is_netcdf_file(path: str) -> bool:
    """A local netCDF-3 or netCDF-4 (HDF5) file, recognised by its magic bytes."""
    if "://" in path or not os.path.isfile(os.path.expanduser(path)):
        return False
    with open(os.path.expanduser(path), "rb") as f:
        head = f.read(8)
    return head.startswith(NETCDF_MAGIC)


def target_format(target: str | os.PathLike[str], requested: str | None = None) -> ConvertFormat:
    """The format a conversion to ``target`` writes: ``requested``, else from the name (a netCDF
    suffix: netCDF-4; a URL whose ``#mode=`` says ``zarr`` without ``nczarr``: Zarr v2; else NCZarr)."""
    if requested is not None:
        if requested not in FORMATS:
            raise ZStringsError(f"Invalid format={requested!r}: expected one of {list(FORMATS)}.")
        return requested
    dst = os.fspath(target)
    if dst.lower().endswith(NETCDF_SUFFIXES):
        return "netcdf4"
    modes = parse_nczarr_url(dst).modes  # (netcdf-c's #mode= flags, not any "mode=zarr" in the path)
    if "zarr" in modes and "nczarr" not in modes:
        return "zarr2"
    return "nczarr"


def convert(
    source: str | os.PathLike[str],
    target: str | os.PathLike[str],
    *,
    mode: WriteMode = "w-",
    format: ConvertFormat | None = None,
    netcdf_c: str | None = None,
    recompress: str | None = None,
    progress: Callable[[int], Progress] | None = None,
    **kwargs: Any,
) -> None:
    """Convert a whole file or store: a netCDF file or any store ``engine="zstrings"`` reads -> an
    NCZarr or Zarr v2 store, a Zarr v3 store or a netCDF-4 file (``zstrings convert`` is this).

    ``format`` (``"nczarr"``, ``"zarr2"``, ``"zarr3"``, ``"netcdf4"``) defaults from the target's
    name (``target_format``). A netCDF-4 target is written with netCDF4 (NC_STRING strings, NC_CHAR
    kept as chars, groups kept, shadowed dimensions allowed) to a file beside it that replaces it
    only when complete; a store target with ``to_nczarr`` / ``to_zarr_v3`` (``kwargs`` go there; for
    a netCDF-4 target they are the source's open options). The source is a netCDF file when its
    first bytes say so, else a store. Values are copied undecoded (``decode_cf=False``) so fill
    values, packing and times stay exactly as stored. ``netcdf_c`` is the oldest netcdf-c that must
    read an NCZarr target, as in ``to_nczarr``. ``recompress`` (NCZarr / Zarr v2 targets):
    ``"netcdf-c"`` keeps the source's codecs but replaces those netcdf-c cannot read by zlib (with a
    ``CodecDroppedWarning`` naming them), one of ``COMPRESSORS`` (``"zlib"``, ``"zstd"``, ``"bz2"``,
    ``"none"``) is every variable's compressor; None (the default) refuses codecs netcdf-c cannot
    read, as ``to_nczarr`` does. ``progress(total_bytes)`` returns a bar (``update(n)``, ``close()``)
    the reads are counted on; the source is then read variable by variable, not with dask.
    """
    src, dst = os.fspath(source), os.fspath(target)
    fmt = target_format(dst, format)
    if os.path.abspath(src) == os.path.abspath(dst):
        raise ZStringsError(f"Cannot convert {shown(src)} onto itself; choose another target.")
    _check_options(fmt, dst, netcdf_c, recompress)
    t = session.classify(dst, None if fmt == "netcdf4" else kwargs.get("storage_options"))  # (once: checks and write)
    from_netcdf = is_netcdf_file(src)
    if not from_netcdf and fmt != "netcdf4":  # a target that is the source (spelled otherwise), holds it or lies inside
        _refuse_overlap(src, t)
    open_kw: dict[str, Any] = {**RAW_DECODERS, **(kwargs if fmt == "netcdf4" else {})}
    if fmt == "zarr3":
        open_kw["concat_characters"] = True  # NC_CHAR becomes text, not one-byte bytes values
    groups = _open_source(src, from_netcdf, open_kw, chunked=progress is None)
    bar: Progress | None = None
    try:
        if progress is not None:
            bar = progress(sum(int(v.nbytes) for ds in groups.values() for n, v in ds.variables.items()
                               if n not in ds.indexes))
            groups = _counted(groups, bar)
        _WRITERS[fmt](groups, t, mode, netcdf_c, recompress, kwargs)
    finally:
        if bar is not None:
            bar.close()
        for ds in groups.values():
            ds.close()


#: what a target of each other format is, in ``_check_options``' refusal of ``netcdf_c``
_NOT_NCZARR = {"netcdf4": "a netCDF-4 file, which every netcdf-c reads",
               "zarr2": "written as plain Zarr v2, which has no NCZarr layout to choose",
               "zarr3": "written as Zarr v3, which has no NCZarr layout to choose"}


def _check_options(fmt: ConvertFormat, dst: str, netcdf_c: str | None, recompress: str | None) -> None:
    """Refuse options the target format does not take, before anything is read or written."""
    if netcdf_c is not None and fmt != "nczarr":
        raise ZStringsError(f"netcdf_c={netcdf_c!r} chooses the NCZarr layout of a store target; {shown(dst)} is "
                            f"{_NOT_NCZARR[fmt]}. Drop netcdf_c.")
    if recompress is not None and fmt not in ("nczarr", "zarr2"):
        raise ZStringsError(f"recompress={recompress!r} applies to NCZarr / Zarr v2 targets ({shown(dst)} is written "
                            f"as {fmt}); drop it.")
    if recompress is not None and recompress != "netcdf-c" and recompress not in COMPRESSORS:
        raise ZStringsError(f"Invalid recompress={recompress!r}: expected 'netcdf-c' or one of {list(COMPRESSORS)}.")


def _refuse_overlap(src: str, t: Target) -> None:
    """A store target that is the source, holds it or lies inside it (writing it would remove
    what is being read) is refused."""
    from ..io.store import open_store
    from .migrate import overlaps

    if overlaps(open_store(src, mode="r"), t):
        raise ZStringsError(f"Cannot convert {shown(src)} to {t.display}: the target is the source, or holds it, "
                            "or lies inside it, and writing it would remove what is being read. Choose another "
                            "target.")


def _open_source(src: str, from_netcdf: bool, open_kw: Mapping[str, Any], *, chunked: bool) -> dict[str, xr.Dataset]:
    """Every group of the source, undecoded (netCDF4 for a netCDF file, else engine="zstrings")."""
    engine = "netcdf4" if from_netcdf else "zstrings"
    try:
        if not chunked:
            return dict(xr.open_groups(src, engine=engine, **open_kw))
        return _open_groups(src, engine, **open_kw)
    except (ImportError, ValueError) as e:
        if from_netcdf and "netcdf4" in str(e).lower() and "engine" in str(e).lower():
            raise ZStringsError(
                f"Reading {shown(src)} needs the netCDF4 package: pip install 'xr_zstrings[netcdf]'."
            ) from None
        raise


def _to_netcdf4(groups: dict[str, xr.Dataset], dst: Target, mode: str, netcdf_c: str | None, recompress: str | None,
                kwargs: Mapping[str, Any]) -> None:
    write_netcdf4_file(groups, dst, mode=mode)


def _to_v2(fmt: str) -> Callable[..., None]:
    def write(groups: dict[str, xr.Dataset], dst: Target, mode: WriteMode, netcdf_c: str | None,
              recompress: str | None, kwargs: Mapping[str, Any]) -> None:
        if recompress is not None:
            _netcdf_c_codecs(groups, recompress)
        to_nczarr(groups, dst, mode=mode, format=cast(Any, fmt), netcdf_c=netcdf_c, **kwargs)

    return write


def _to_zarr3(groups: dict[str, xr.Dataset], dst: Target, mode: str, netcdf_c: str | None, recompress: str | None,
              kwargs: Mapping[str, Any]) -> None:
    """Every group with ``to_zarr_v3`` at once, each variable keeping only the encodings a v3 array takes."""
    from .zarr3 import to_zarr_v3

    for ds in groups.values():
        for var in ds.variables.values():
            var.encoding = {k: v for k, v in var.encoding.items() if k in ("chunks", "dtype", "units", "calendar")}
    # (dst, classified once: to_zarr_v3's write_session takes it as it is)
    to_zarr_v3(groups, dst, mode=cast(Any, mode), **kwargs)


#: the writer of each target format
_WRITERS: dict[str, Callable[..., None]] = {"netcdf4": _to_netcdf4, "nczarr": _to_v2("nczarr"), "zarr2": _to_v2("zarr2"),
                                            "zarr3": _to_zarr3}


def _netcdf_c_codecs(groups: Mapping[str, xr.Dataset], recompress: str) -> None:
    """Codecs for an NCZarr/Zarr v2 target (``codecs.encoding.netcdf_c_readable``):
    ``COMPRESSORS[recompress]`` for every variable, or (``"netcdf-c"``) the source's own with what
    netcdf-c cannot read replaced by zlib, named in a ``CodecDroppedWarning``."""
    replaced: set[str] = set()
    for ds in groups.values():
        for vname, var in ds.variables.items():
            replaced |= netcdf_c_readable(var.encoding, where=f"variable {vname!r}", replace=recompress != "netcdf-c",
                                          compressor=COMPRESSORS.get(recompress))
    if replaced:
        warnings.warn(CodecDroppedWarning(
            f"codecs netcdf-c cannot read ({', '.join(sorted(replaced))}) were replaced by zlib; choose another "
            "compressor with recompress=... (zstrings convert --compressor)."), stacklevel=user_stacklevel())


class CountedReads:
    """Backend array that counts the bytes read from a source variable on a progress bar."""

    BLOCK_BYTES = 8 << 20

    def __init__(self, var: Any, bar: Progress) -> None:
        self.var = var
        self.shape = var.shape
        self.dtype = var.dtype
        self.bar = bar
        self.remaining = int(var.nbytes)

    def __getitem__(self, key: Any) -> Any:
        from xarray.core import indexing

        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.BASIC, self._get)

    def _get(self, key: tuple[Any, ...]) -> Any:
        key = tuple(key)
        first = key[0] if key else None
        if isinstance(first, slice) and (first.step or 1) == 1 and self.var.ndim:
            start, stop, _ = first.indices(self.shape[0])
            row_bytes = max(1, self.var.dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64)))
            rows = max(1, self.BLOCK_BYTES // row_bytes)
            if stop - start > rows:  # read in blocks so the bar moves during one large variable
                pieces = [self._read((slice(i, min(i + rows, stop)), *key[1:]))
                          for i in range(start, stop, rows)]
                return np.concatenate(pieces, axis=0)
        return self._read(key)

    def _read(self, key: tuple[Any, ...]) -> Any:
        out = np.asarray(self.var[key].values)
        n = min(self.remaining, out.size * out.dtype.itemsize)
        if n > 0:
            self.remaining -= n
            self.bar.update(n)
        return out


def _counted(groups: Mapping[str, xr.Dataset], bar: Progress) -> dict[str, xr.Dataset]:
    """The same groups with every non-index variable read through ``CountedReads`` (still lazy)."""
    from xarray.backends import BackendArray
    from xarray.core import indexing

    class Counted(CountedReads, BackendArray):
        pass

    out = {}
    for path, ds in groups.items():
        coords: dict[Hashable, Any] = {}
        data: dict[Hashable, Any] = {}
        for name, var in ds.variables.items():
            if name not in ds.indexes:
                var = xr.Variable(var.dims, indexing.LazilyIndexedArray(Counted(var, bar)), var.attrs,
                                  var.encoding)
            (coords if name in ds.coords else data)[name] = var
        new = xr.Dataset(data, coords=coords, attrs=ds.attrs)
        new.encoding = dict(ds.encoding)
        out[path] = new
    return out


def write_netcdf4_file(groups: Mapping[str, xr.Dataset], dst: str | os.PathLike[str] | Target, mode: str = "w") -> None:
    """``write_netcdf4`` after checking every name, to a file beside ``dst`` renamed over it only
    when complete: a failure (bad name, full disk, interrupt) leaves no partial file and ``dst``
    as it was."""
    check_names(groups, netcdf_c="nczarr", target=shown(dst))
    with netcdf_file(dst, mode) as tmp:
        write_netcdf4(groups, os.fspath(tmp))


def write_netcdf4(groups: Mapping[str, xr.Dataset], dst: str) -> None:
    """Write undecoded groups with netCDF4 itself: NC_STRING vlen strings, NC_CHAR as stored, each
    dimension declared in the nearest group that has it with that size (shadowing allowed)."""
    try:
        import netCDF4
    except ImportError:
        raise ZStringsError(
            "Writing a netCDF-4 file needs the netCDF4 package: pip install 'xr_zstrings[netcdf]'."
        ) from None

    nc = netCDF4.Dataset(dst, "w", format="NETCDF4")
    try:
        for path, ds in groups.items():
            g = nc if path == "/" else nc.createGroup(path)
            unlimited = set(ds.encoding.get("unlimited_dims") or ())
            for d, n in ds.sizes.items():
                found, anc = None, g  # type: Any, Any
                while anc is not None and found is None:
                    found = anc.dimensions.get(str(d))
                    anc = anc.parent
                if found is None or (len(found) != n and not found.isunlimited()):
                    g.createDimension(str(d), None if d in unlimited else n)
            _set_attributes(g, ds.attrs)
            for name, var in ds.variables.items():
                _netcdf4_variable(g, str(name), var)
    finally:
        nc.close()


def _netcdf4_variable(g: Any, name: str, var: xr.Variable) -> None:
    """One variable in netCDF4 group ``g``: created with its storage, attributes, then its values."""
    attrs = dict(var.attrs)
    fill = attrs.pop("_FillValue", var.encoding.get("_FillValue") if var.dtype.kind in "TUO" else None)
    kind = text_kind(var)
    dtype: Any = str if kind == "str" else "S1" if kind == "bytes" else var.dtype
    v = g.createVariable(name, dtype, tuple(str(d) for d in var.dims), fill_value=fill, **_netcdf4_storage(name, var))
    v.set_auto_maskandscale(False)
    if kind == "bytes":
        v.set_auto_chartostring(False)
    _set_attributes(v, attrs)
    _netcdf4_values(v, var, kind)


def _netcdf4_storage(name: str, var: xr.Variable) -> dict[str, Any]:
    """``createVariable``'s compression and chunk sizes from the variable's encoding (either codec vocabulary)."""
    enc = var.encoding
    kw: dict[str, Any] = {}
    comp: Any
    filters: Any
    comp, filters = (enc.get("compressor"), enc.get("filters")) if "compressor" in enc else v2_configs(
        enc, where=f"variable {name!r}")
    comp = comp.get_config() if hasattr(comp, "get_config") else (comp or {})
    filters = [f.get_config() if hasattr(f, "get_config") else dict(f) for f in filters or []]
    if not filters and "filters" not in enc:
        filters = list(enc.get("zstrings_filters") or [])
    compression = netcdf4_compression(comp.get("id")) if isinstance(comp, Mapping) else None
    if compression is not None:  # zlib, zstd, bzip2 (codecs/vocabulary.py)
        kw["compression"] = compression
        kw["complevel"] = int(comp.get("level", 4))
        kw["shuffle"] = any(f.get("id") == "shuffle" for f in filters)
    chunks = enc.get("chunks")
    if chunks and var.ndim and len(chunks) == var.ndim:
        # netCDF4 refuses a chunk longer than a fixed dimension (Zarr allows it): clamp
        kw["chunksizes"] = tuple(max(1, min(int(c), n)) if n else 1 for c, n in zip(chunks, var.shape, strict=True))
    return kw


def _set_attributes(obj: Any, attrs: Mapping[Hashable, Any]) -> None:
    """Attributes on a netCDF4 group or variable, lists of strings as NC_STRING."""
    for k, x in attrs.items():
        if isinstance(x, list) and all(isinstance(y, str) for y in x):
            obj.setncattr_string(k, x)
        else:
            obj.setncattr(k, x)


def _netcdf4_values(v: Any, var: xr.Variable, kind: str | None) -> None:
    """The values, block by block (the source's chunks when it is dask-backed): never the whole variable at once."""
    if not var.size:
        return
    if var.ndim == 0:
        values = _as_stored(var.values, kind)
        v[...] = str(values[()]) if kind == "str" else values
        return
    data = var.data
    chunks = data.chunks if _is_dask(data) else tuple((n,) for n in var.shape)
    for idx in np.ndindex(*(len(c) for c in chunks)):
        sel = tuple(slice(sum(c[:i]), sum(c[: i + 1])) for i, c in zip(idx, chunks, strict=True))
        v[sel] = _as_stored(np.asarray(data[sel]), kind)


def _as_stored(values: Any, kind: str | None) -> np.ndarray:
    """Values as netCDF4 takes them: object str for NC_STRING, S1 for NC_CHAR."""
    if kind == "str":
        return np.asarray(values).astype(object)
    if kind == "bytes":
        return np.asarray(values).astype("S1")
    return np.asarray(values)
