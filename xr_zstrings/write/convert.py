"""Whole-file conversion: a netCDF-4 file or a store <-> an NCZarr (or Zarr v2) store.

``convert(src, dst)`` picks the direction from the target: a ``.nc`` target is written with netCDF4
itself (NC_STRING strings, NC_CHAR kept as chars, groups and shadowed dimensions kept); any other
target is written with :func:`xr_zstrings.write.nczarr.to_nczarr`, from a netCDF file or from any store. netCDF4 is an optional dependency
(``pip install 'xr_zstrings[netcdf]'``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from ..codecs.encoding import v2_configs
from ..errors import TargetExistsError, ZStringsError
from ..io.atomic import NETCDF_MAGIC, local_commit
from ..io.redact import shown
from . import WriteMode
from .nczarr import to_nczarr
from .plan import _is_dask, check_names, text_kind

__all__ = ["RAW_DECODERS", "convert", "is_netcdf_file", "write_netcdf4", "write_netcdf4_file"]


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


def convert(
    source: str | os.PathLike[str],
    target: str | os.PathLike[str],
    *,
    mode: WriteMode = "w-",
    netcdf_c: str | None = None,
    **kwargs: Any,
) -> None:
    """Convert a whole file or store: netCDF-4 (``.nc``) or any store ``engine="zstrings"`` reads ->
    NCZarr store, or such a store -> ``.nc``.

    The direction follows the target: a ``.nc``/``.nc4`` target is written with netCDF4 (NC_STRING
    strings, NC_CHAR kept as chars, groups kept, shadowed dimensions allowed), to a temporary file
    beside it that replaces the target only when complete (a failed conversion leaves no file and
    the old one, with ``mode="w"``, untouched); anything else is written with ``to_nczarr``
    (``kwargs`` go there). The source is a netCDF file when its first bytes say so, else a store
    (as the ``zstrings convert`` command). Values are copied undecoded (``decode_cf=False``) so
    fill values, packing and times stay exactly as stored.
    ``netcdf_c`` is the oldest netcdf-c that must read an NCZarr target, as in ``to_nczarr``
    (e.g. ``"4.9.0"`` for Debian 12).
    """
    src = os.fspath(source)
    dst = os.fspath(target)
    if os.path.abspath(src) == os.path.abspath(dst):
        raise ZStringsError(f"Cannot convert {shown(src)} onto itself; choose another target.")
    if dst.lower().endswith((".nc", ".nc4", ".cdf")):
        if netcdf_c is not None:
            raise ZStringsError(f"netcdf_c={netcdf_c!r} chooses the NCZarr layout of a store target; {shown(dst)} is a "
                                "netCDF-4 file, which every netcdf-c reads. Drop netcdf_c.")
        if mode not in ("w-", "w"):
            raise ZStringsError(f"Invalid mode={mode!r} for a netCDF-4 target: expected 'w-' or 'w'.")
        if mode == "w-" and os.path.exists(dst):
            raise TargetExistsError(f"Cannot write to {shown(dst)}: it exists and mode='w-' never overwrites; pass mode='w'.")
        groups = _open_groups(src, "zstrings", **RAW_DECODERS, **kwargs)
        try:
            write_netcdf4_file(groups, dst, mode=mode)
        finally:
            for ds in groups.values():
                ds.close()
        return
    if is_netcdf_file(src):
        try:
            groups = _open_groups(src, "netcdf4", **RAW_DECODERS)
        except (ImportError, ValueError) as e:
            if "netcdf4" in str(e).lower() and "engine" in str(e).lower():
                raise ZStringsError(
                    f"Reading {shown(src)} needs the netCDF4 package: pip install 'xr_zstrings[netcdf]'."
                ) from None
            raise
    else:  # a store: a target that is it (spelled otherwise), holds it or lies inside it is refused
        from ..io.store import open_store
        from .migrate import overlaps

        so = kwargs.get("storage_options")
        if overlaps(open_store(src, mode="r"), dst, dict(so) if so else None):
            raise ZStringsError(f"Cannot convert {shown(src)} to {shown(dst)}: the target is the source, or holds it, "
                                "or lies inside it, and writing it would remove what is being read. Choose another "
                                "target.")
        groups = _open_groups(src, "zstrings", **RAW_DECODERS)
    try:
        to_nczarr(groups, dst, mode=mode, netcdf_c=netcdf_c, **kwargs)
    finally:
        for ds in groups.values():
            ds.close()


def write_netcdf4_file(groups: Mapping[str, xr.Dataset], dst: str, mode: str = "w") -> None:
    """``write_netcdf4`` after checking every name, to a file beside ``dst`` renamed over it only
    when complete: a failure (bad name, full disk, interrupt) leaves no partial file and ``dst``
    as it was."""
    check_names(groups, netcdf_c="nczarr", target=dst)
    with local_commit(Path(dst), mode=mode, display=shown(dst), kind="netcdf") as tmp:
        assert tmp is not None
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
            for k, v in ds.attrs.items():
                if isinstance(v, list) and all(isinstance(x, str) for x in v):
                    g.setncattr_string(k, v)
                else:
                    g.setncattr(k, v)
            for name, var in ds.variables.items():
                _netcdf4_variable(g, str(name), var)
    finally:
        nc.close()


def _netcdf4_variable(g: Any, name: str, var: xr.Variable) -> None:
    enc, attrs = var.encoding, dict(var.attrs)
    fill = attrs.pop("_FillValue", enc.get("_FillValue") if var.dtype.kind in "TUO" else None)
    kind = text_kind(var)
    dtype: Any = str if kind == "str" else "S1" if kind == "bytes" else var.dtype
    kw: dict[str, Any] = {}
    comp: Any
    filters: Any
    comp, filters = (enc.get("compressor"), enc.get("filters")) if "compressor" in enc else v2_configs(
        enc, where=f"variable {name!r}")
    comp = comp.get_config() if hasattr(comp, "get_config") else (comp or {})
    filters = [f.get_config() if hasattr(f, "get_config") else dict(f) for f in filters or []]
    if not filters and "filters" not in enc:
        filters = list(enc.get("zstrings_filters") or [])
    if isinstance(comp, Mapping) and comp.get("id") in ("zlib", "zstd", "bz2"):
        kw["compression"] = {"bz2": "bzip2"}.get(comp["id"], comp["id"])
        kw["complevel"] = int(comp.get("level", 4))
        kw["shuffle"] = any(f.get("id") == "shuffle" for f in filters)
    chunks = enc.get("chunks")
    if chunks and var.ndim and len(chunks) == var.ndim:
        # netCDF4 refuses a chunk longer than a fixed dimension (Zarr allows it): clamp
        kw["chunksizes"] = tuple(max(1, min(int(c), n)) if n else 1 for c, n in zip(chunks, var.shape, strict=True))
    v = g.createVariable(name, dtype, tuple(str(d) for d in var.dims), fill_value=fill, **kw)
    v.set_auto_maskandscale(False)
    if kind == "bytes":
        v.set_auto_chartostring(False)
    for k, x in attrs.items():
        if isinstance(x, list) and all(isinstance(y, str) for y in x):
            v.setncattr_string(k, x)
        else:
            v.setncattr(k, x)
    if not var.size:
        return
    if var.ndim == 0:
        values = _as_stored(var.values, kind)
        v[...] = str(values[()]) if kind == "str" else values
        return
    # block by block (the source's chunks when it is dask-backed): never the whole variable at once
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
