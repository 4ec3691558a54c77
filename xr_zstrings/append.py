"""Append along an unlimited dimension of an existing NCZarr 2 (or Zarr v2) store.

New values are planned like a fresh write but with the stored encoding, written chunk by chunk (a
partial last chunk is read, completed and rewritten), then the metadata grows: arrays first, the
root group last.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import xarray as xr
from xarray import conventions

from .chunk_io import _write_numpy
from .codecs import build_pipeline
from .errors import DimensionError, ZStringsError
from .nczarr_json import _dumps
from .store import ZStore
from .write_plan import _Array, _is_dask, _numeric_array, _Options, _string_array, _string_like, _what


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
