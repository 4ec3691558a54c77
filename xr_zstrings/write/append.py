"""Change an existing NCZarr 2 (or Zarr v2) store: append along an unlimited dimension, or add
variables.

Both run inside a write transaction (``io.commit.Transaction``): they read the store's metadata
after the claim (``_base_tree``), plan and check everything, record in the journal what their chunks
may leave, write the chunks, and return the metadata objects that change, which the caller commits
(``Transaction.commit``: journal, placeholder root, objects, ``.zmetadata`` as the commit point, root).
Appended values are planned like a fresh write but with the stored encoding, written chunk by chunk
(a partial last chunk is read, completed and rewritten: its old part unchanged). Added variables are
planned like a fresh write against the dimensions the store already declares.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import xarray as xr
from xarray import conventions

from ..codecs.v2 import build_pipeline
from ..errors import DimensionError, UnsupportedError, ZStringsError
from ..formats.nczarr_json import attrs_json
from ..formats.netcdf_c import DEFAULT_LAYOUT, NETCDF_C, NCZarrLayout, layout_named, layout_of_generation, reader_of
from ..io.zstore import ZStore
from ..text import policy as strings
from .chunks import _write_numpy, attach_pipelines, write_arrays
from .dimensions import _resolve_dimensions
from .plan import (
    Format,
    _Array,
    _is_dask,
    _numeric_array,
    _Options,
    _plan_group,
    _string_array,
    _typed,
    _what,
    held_otherwise,
    text_kind,
)
from .v2_text import OWN_LAYOUTS, encode_as_stored, fill_missing, missing_fill

if TYPE_CHECKING:
    from ..io.commit import Transaction


def _base_tree(zstore: ZStore, *, consolidated: bool = True, touched: Callable[[Any], Iterable[str]] | None = None,
               mended: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
    """The store's metadata as the write starts from it (read after the claim) and every metadata
    object read (key -> JSON), for ``Transaction.set_base``.

    Served from ``.zmetadata``, the objects of the nodes ``touched(tree)`` names (the ones the write
    rewrites) are read too: when another tool changed one without re-consolidating, the whole tree
    is read from the objects, so that the write neither reverts that change nor hides it. A
    ``.zgroup``/``.zarray`` that lost NCZarr keys our ``.zmetadata`` has (zarr-python rewrites them
    without) is read with them put back, and is put in ``mended`` (key -> object) for the write to
    commit (``io.drift``)."""
    from ..read.tree import open_tree

    recorded: dict[str, Any] = {}
    zstore.recorded = recorded
    try:
        tree = open_tree(zstore, consolidated=consolidated)
        served: dict[str, Any] | None = dict(recorded) if tree.consolidated else None
        if served is not None and (touched is None or not _changed_since(zstore, served, touched(tree))):
            return tree, recorded
        if served is not None:
            recorded.clear()
            tree = open_tree(zstore, consolidated=False)
        lost = _lost_keys(zstore, recorded, served)
        if lost:  # (the base stays what the store holds: a rollback restores it, the claim compares it)
            real = dict(recorded)
            tree = open_tree(zstore, serve={**real, **lost})
            recorded.clear()
            recorded.update(real)
            if mended is not None:
                mended.update(lost)
        return tree, recorded
    finally:
        zstore.recorded = None


def _lost_keys(zstore: ZStore, objects: Mapping[str, Any], served: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``.zgroup``/``.zarray`` objects that lost keys our ``.zmetadata`` (``served``, else read
    here) holds for them, with those keys put back (``io.drift``): none without our ``.zmetadata``."""
    from ..io.consolidated import ZMETADATA, consolidated_meta, version_of
    from ..io.drift import lost_keys

    if served is None:
        served = consolidated_meta(zstore.get_json_many([ZMETADATA])[0]) or {}
    if version_of(served.get(".zgroup")) is None:
        return {}
    out: dict[str, Any] = {}
    for k, obj in objects.items():
        lost = lost_keys(k, obj, served.get(k))
        if lost:
            out[k] = {**(obj or {}), **{n: served[k][n] for n in lost}}
    return out


def _changed_since(zstore: ZStore, served: Mapping[str, Any], nodes: Iterable[str]) -> bool:
    """Whether a metadata object of ``nodes`` (group and array paths) differs from the copy
    ``.zmetadata`` served (one batch of requests)."""
    from ..io.drift import changed_objects, metadata_keys_of

    return bool(changed_objects(zstore, metadata_keys_of(served, nodes), served)[1])


def _groups_and_above(tree: Any, gpaths: Iterable[str]) -> list[str]:
    """``gpaths`` and every group above them (the groups whose objects a write may rewrite)."""
    out: list[str] = ["/"]
    for g in gpaths:
        parts = [p for p in g.strip("/").split("/") if p]
        out += ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return [g for g in dict.fromkeys(out) if g in tree.groups]


def _start_writes(zstore: ZStore, txn: Transaction, tree: Any, base: dict[str, Any], *,
                  appends: Mapping[str, Mapping[str, int]] | None = None, new_arrays: Sequence[str] = ()) -> None:
    """Everything is planned and checked: refuse symbolic links on the store's folders (before
    anything is written: a write must never change files outside the store), give the transaction
    its base, and record in the journal what the chunks may leave."""
    from ..io.zstore import refuse_links_on

    if type(zstore.store).__name__ == "LocalStore":
        refuse_links_on(cast(Any, zstore.store).root, [p.strip("/") for p in [*tree.groups, *tree.arrays]], zstore.display)
    txn.set_base(base, consolidated_in_step=tree.consolidated)
    txn.record_writes(appends=appends, new_arrays=list(new_arrays))


@dataclass(frozen=True)
class _AppendJob:
    """One variable to append: the stored array, the new values encoded as the stored ones, where
    they start along the axis, and the group declaring the dimension (whose size grows)."""

    gpath: str
    name: str
    meta: Any
    var: xr.Variable
    axis: int
    offset: int
    decl: str
    opts: _Options
    #: a pure Zarr v2 text array (another writer's): what a missing value is written as
    #: (``v2_text.missing_fill``), in a 1-tuple; None for NCZarr and numbers
    v2_fill: tuple[Any] | None = None

    @property
    def path(self) -> str:
        return f"{self.gpath.rstrip('/')}/{self.name}"


def _append(zstore: ZStore, groups: Mapping[str, xr.Dataset], append_dim: str, opts: _Options,
            txn: Transaction) -> dict[str, Any]:
    """Append each variable that has ``append_dim`` to the existing arrays; returns the metadata
    objects that change (each array's ``.zarray`` shape, the declaring groups' dimension sizes).

    New chunks are written first; a partial last chunk is read, completed and rewritten (its old part
    unchanged, so readers of the old metadata still see the old values). Variables without
    ``append_dim`` are left as stored. Strings keep the stored width: ``on_overflow="widen"`` cannot
    apply.

    The order is the crash-safety contract, read top to bottom: plan and check every variable,
    record the ranges, write the chunks, then return the metadata.
    """
    def touched(tree: Any) -> list[str]:  # every group above those written, every array on append_dim
        on_dim = [p for p, m in tree.arrays.items()
                  if append_dim in [r.rpartition("/")[2] for r in (m.dimension_references or m.array_dimensions or ())]]
        return _groups_and_above(tree, groups) + on_dim

    mended: dict[str, Any] = {}  # objects another tool rewrote without their NCZarr keys, mended
    tree, base = _base_tree(zstore, touched=touched, mended=mended)
    _refuse_unwritable(zstore, tree, "append to")
    jobs = [_append_job(zstore, tree, gpath, str(name), var, append_dim, opts)
            for gpath, ds in _appended_groups(zstore, tree, groups)
            for name, var in conventions.encode_dataset_coordinates(ds)[0].items() if append_dim in var.dims]
    _start_writes(zstore, txn, tree, base, appends={
        j.path: {"axis": j.axis, "old": j.offset, "new": j.offset + j.var.shape[j.axis]} for j in jobs})
    updates: dict[str, Any] = {}
    dim_growth: dict[str, int] = {}  # declaring group -> new size of append_dim there
    for j in jobs:
        new_len = _write_appended(zstore, j, append_dim)
        zarray = dict(j.meta.raw_zarray)
        zarray["shape"] = [new_len if i == j.axis else n for i, n in enumerate(j.meta.shape)]
        updates[f"{j.path.strip('/')}/.zarray"] = zarray
        dim_growth[j.decl] = max(dim_growth.get(j.decl, 0), new_len)
    layout = _store_layout(tree)
    if layout is not None:
        updates.update(_grown_alongside(tree, dim_growth, append_dim, touched={k.rsplit("/", 1)[0] for k in updates}))
        updates.update(_grown_dimensions(layout, {**base, **mended}, updates, dim_growth, append_dim))
    return {**mended, **updates}


def _appended_groups(zstore: ZStore, tree: Any, groups: Mapping[str, xr.Dataset]) -> Iterator[tuple[str, xr.Dataset]]:
    for gpath, ds in groups.items():
        if gpath not in tree.groups:
            raise ZStringsError(f"Cannot append group {gpath!r}: {zstore.display} has no such group. Groups: "
                                f"{sorted(tree.groups)}.")
        yield gpath, ds


def _append_job(zstore: ZStore, tree: Any, gpath: str, name: str, var: xr.Variable, append_dim: str,
                opts: _Options) -> _AppendJob:
    """Where a variable's new values start (an NCZarr store: at its unlimited dimension's size) and
    the values encoded as the stored ones were (CF attributes, string width, char width)."""
    meta = _appended_array(zstore, tree, gpath, name)
    axis = list(var.dims).index(append_dim)
    v2_text = not tree.root.is_nczarr and meta.string_kind in ("string", *OWN_LAYOUTS)
    _refuse_other_values(zstore, _what(gpath, name), meta, var, v2_text)
    offset, decl = meta.shape[axis], gpath
    if tree.root.is_nczarr:
        offset, decl = _unlimited_end(zstore, tree, gpath, name, meta, axis, append_dim)
    policy = "error" if opts.on_overflow == "widen" else opts.on_overflow
    one = _Options(fmt=opts.fmt, on_overflow=policy, maxstrlen=None, default_maxstrlen=None,
                   compressor=None, strict_codecs=False)
    if not v2_text:
        return _AppendJob(gpath, name, meta, _as_stored(var, meta), axis, offset, decl, one)
    # the store's own fill is what missing values become: never a fill the new values bring
    stored = _as_stored(var, meta)
    stored.encoding.pop("_FillValue", None)
    stored.attrs.pop("_FillValue", None)
    return _AppendJob(gpath, name, meta, stored, axis, offset, decl, one,
                      v2_fill=(missing_fill(meta, netcdf_c=tree.netcdf_c),))


def _appended_array(zstore: ZStore, tree: Any, gpath: str, name: str) -> Any:
    """The stored array a variable's values are appended to; one the store lacks is refused."""
    meta = tree.arrays.get(f"{gpath.rstrip('/')}/{name}")
    if meta is None:
        raise ZStringsError(f"Cannot append {_what(gpath, name)}: it is not in {zstore.display}. Appending adds "
                            "values to existing variables only; write new variables with mode='w'.")
    return meta


def _refuse_other_values(zstore: ZStore, what: str, meta: Any, var: xr.Variable, v2_text: bool) -> None:
    """New values the stored array cannot take (checked before anything is written): text for an
    NCZarr text array not of fixed-width bytes, numbers for a pure Zarr v2 text array."""
    if meta.string_kind is not None and meta.dtype.kind != "S" and text_kind(var) is not None and not v2_text:
        # (NCZarr text is fixed-width bytes)
        raise ZStringsError(f"Cannot append {what}: the new values are stored as fixed-width bytes (|S) but the "
                            f"store has {meta.dtype_str}. Append to it with xarray's to_zarr(mode='a', "
                            "append_dim=...), which wrote it.")
    if v2_text and text_kind(var) is None:
        raise ZStringsError(f"Cannot append {what} to {zstore.display}: the store holds text ({meta.dtype_str}) "
                            f"but the new values are {var.dtype}. Convert them to str first.")


def _unlimited_end(zstore: ZStore, tree: Any, gpath: str, name: str, meta: Any, axis: int,
                   append_dim: str) -> tuple[int, str]:
    """An NCZarr array's append start (the end of its unlimited dimension) and the group declaring
    that dimension; a dimension that is not unlimited is refused."""
    apath = f"{gpath.rstrip('/')}/{name}"
    ref = (meta.dimension_references or ())[axis] if meta.dimension_references else None
    dim = tree.dimension(ref, where=zstore.where(apath)) if ref else None
    if dim is None or not dim.unlimited:
        raise ZStringsError(
            f"Cannot append {_what(gpath, name)} along {append_dim!r}: the dimension is not unlimited in "
            f"{zstore.display}. Write the store with unlimited_dims=[{append_dim!r}] first.")
    # after the rows of an array another tool appended to alone (its .zarray only): every array
    # on the dimension gets this batch at the same index
    offset = max([dim.size, *(m.shape[i] for m in tree.arrays.values()
                              for i, r in enumerate(m.dimension_references or ()) if r == ref)])
    return offset, (ref or "").rpartition("/")[0] or "/"


def _as_stored(var: xr.Variable, meta: Any) -> xr.Variable:
    """``var`` with the encoding of the stored array (CF attributes, string width, char width, dtype)."""
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
    return var


def _write_appended(zstore: ZStore, job: _AppendJob, append_dim: str) -> int:
    """Write a variable's new values piece by piece (dask: one row of chunks at a time); the new length."""
    var, axis, offset = job.var, job.axis, job.offset
    kind = text_kind(var)
    new_len = offset
    with strings.stored_width("An append keeps the stored width"):  # (widen acts as error)
        for piece in _pieces(var, axis, append_dim, offset, job.meta.chunks[axis]):
            # errors name a value's position in the values appended, not in the piece
            start = tuple(new_len - offset if i == axis else 0 for i in range(var.ndim))
            with strings.at_offset(start, block=None):
                new_len = _append_piece(zstore, job.meta, piece, kind, job.opts, job.gpath, job.name, append_dim,
                                        new_len, v2_fill=job.v2_fill)
    return new_len


def _grown_alongside(tree: Any, dim_growth: Mapping[str, int], append_dim: str, touched: set[str]) -> dict[str, Any]:
    """netcdf-c sizes every array on an unlimited dimension to the dimension (else it refuses the
    store): the ``.zarray`` of the arrays this append did not touch, grown too (their new part reads
    as fill)."""
    grown = {f"{decl.rstrip('/')}/{append_dim}": size for decl, size in dim_growth.items()}
    updates: dict[str, Any] = {}
    for apath, meta in tree.arrays.items():
        refs = meta.dimension_references or ()
        if apath.strip("/") in touched or not any(r in grown for r in refs):
            continue
        zarray = dict(meta.raw_zarray)
        zarray["shape"] = [max(n, grown.get(r, n)) for r, n in zip(refs, meta.shape, strict=True)]
        updates[f"{apath.strip('/')}/.zarray"] = zarray
    return updates


def _grown_dimensions(layout: NCZarrLayout, base: Mapping[str, Any], updates: Mapping[str, Any],
                      dim_growth: Mapping[str, int], append_dim: str) -> dict[str, Any]:
    """The declaring groups' listings (where the store's layout keeps them) with ``append_dim``'s new size."""
    out: dict[str, Any] = {}
    for gpath, size in dim_growth.items():
        key = layout.obj("group") if gpath == "/" else f"{gpath.strip('/')}/{layout.obj('group')}"
        za = copy.deepcopy(updates.get(key, base.get(key)) or {})
        info = za.setdefault(layout.key("group"), {})
        dims = info.setdefault(layout.dims_key, {})
        spec = dims.get(append_dim)
        if isinstance(spec, Mapping):
            spec = dict(spec)
            spec["size"] = max(int(spec.get("size", 0)), size)
        else:
            spec = {"size": max(int(spec or 0), size), "unlimited": 1}
        dims[append_dim] = spec
        out[key] = za
    return out


def _store_layout(tree: Any) -> NCZarrLayout | None:
    """The layout an existing NCZarr store is extended in (its own), None for pure Zarr v2."""
    if not tree.root.is_nczarr:
        return None
    found = layout_of_generation(tree.root.generation)
    return layout_named(found.writes_as) if found is not None and found.writes_as else found


def _refuse_unwritable(zstore: ZStore, tree: Any, action: str) -> None:
    """A Zarr v3 store (to_nczarr writes NCZarr / Zarr v2 objects, which would sit beside its own:
    it was left unreadable) and an NCZarr store in a layout no writer writes (NCZarr 1.0) are
    refused before anything is written, naming the fix."""
    if tree.root.zarr_format == 3:
        raise UnsupportedError(
            f"Cannot {action} {zstore.display} with to_nczarr: it is a Zarr v3 store, and to_nczarr writes "
            "NCZarr / Zarr v2 metadata, which would sit beside its own. Append or add variables with "
            "xr_zstrings.to_zarr_v3(ds, target, mode='a', append_dim=...) (without append_dim: add), write a new "
            "group with to_zarr_v3(ds, target, group=...), or write the whole dataset again with "
            "to_zarr_v3(..., mode='w').")
    layout = _store_layout(tree)
    if tree.root.is_nczarr and (layout is None or not layout.writable):
        raise ZStringsError(
            f"Cannot {action} {zstore.display}: it is {tree.root.generation}; only NCZarr 2 stores "
            f"(netcdf-c {NETCDF_C[0].first}+, as to_nczarr writes) can be extended. "
            "Convert it first: xr_zstrings.convert or zstrings convert."
        )


def _pieces(var: xr.Variable, axis: int, append_dim: str, offset: int, c: int) -> Any:
    """The new values in pieces that end on the store's chunk boundaries along ``append_dim`` (the
    first completes the partial last chunk): one piece for in-memory values; for dask-backed ones
    each piece is computed on its own, so memory holds one row of chunks, never the whole."""
    if not _is_dask(var.data):
        yield var
        return
    n = var.shape[axis]
    first = (-offset) % c or c
    bounds = [0, *range(min(first, n), n, c), n]
    for lo, hi in itertools.pairwise(bounds):
        if hi > lo:
            yield var.isel({append_dim: slice(lo, hi)}).compute()


def _append_piece(zstore: ZStore, meta: Any, var: xr.Variable, kind: str | None, one: _Options, gpath: str,
                  name: str, append_dim: str, offset: int, *, v2_fill: tuple[Any] | None = None) -> int:
    """Encode ``var`` as the stored array and write it at ``offset`` along ``append_dim``; the new length.

    ``v2_fill``: a pure Zarr v2 text array's missing-value fill (``_AppendJob.v2_fill``): its
    missing values become it (or are refused), and ``<U``/``|O`` take the layout's own encoder."""
    from ..read.chunked import open_chunked

    what = _what(gpath, name)
    axis = list(var.dims).index(append_dim)
    var = var.compute() if _is_dask(var.data) else var
    if v2_fill is not None:
        where = f"{zstore.display} key {meta.path.strip('/')}/.zarray"
        var = var.copy(deep=False, data=fill_missing(np.asarray(var.data), v2_fill[0], as_bytes=kind == "bytes",
                                                     what=what, where=where))
    if v2_fill is not None and meta.string_kind in OWN_LAYOUTS:
        storage = encode_as_stored(np.asarray(var.data), meta, one.on_overflow, what, where)
        a_kind: str | None = "string"
    else:
        a = (_string_array(gpath, name, var, kind, one, set()) if kind is not None
             else _numeric_array(gpath, name, var, one, set()))
        storage, a_kind = np.asarray(a.data), a.kind
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
        raw = open_chunked(zstore, meta, tuple(logical))
        region = tuple(slice(start, offset) if i == axis else slice(0, n)
                       for i, n in enumerate(meta.shape))
        storage = np.concatenate([raw.read(region), storage], axis=axis)
    target = _Array(
        group=gpath, name=name, dims=(), ref_hints=(), unlimited=frozenset(),
        shape=tuple(storage.shape), chunks=meta.chunks, dtype=meta.dtype, dtype_str=meta.dtype_str,
        fill_json=None, fill_storage=open_chunked(zstore, meta, meta.shape).stored_fill(),
        compressor=None, filters=None, attrs={}, kind=a_kind, data=storage,
        pipeline=build_pipeline(meta.compressor, meta.filters, dtype=meta.dtype,
                                string_kind=meta.string_kind, where=what),
        separator=meta.dimension_separator,  # (zarr-python writes "/" where asked: 0/1, not 0.1)
    )
    origin = tuple(start // c if i == axis else 0 for i in range(len(meta.shape)))
    _write_numpy(zstore, target, storage, origin)
    return offset + (storage.shape[axis] - (offset - start))


def _same_stored(zstore: ZStore, meta: Any, a: _Array) -> bool:
    """Whether a planned array holds exactly what the store holds (a coordinate sent again)."""
    from ..read.chunked import open_chunked

    shape = meta.shape or (1,)
    new = np.asarray(a.data.compute() if _is_dask(a.data) else a.data).reshape(tuple(a.shape) or (1,))
    if tuple(new.shape) != tuple(shape):
        return False
    stored = open_chunked(zstore, meta, shape).read(tuple(slice(0, n) for n in shape))
    if stored.dtype.kind == "S" and new.dtype.kind == "S":  # widths may differ: compare the values
        return bool(np.array_equal(stored.astype(object), new.astype(object)))
    if stored.dtype != new.dtype:
        return False
    return bool(np.array_equal(stored, new, equal_nan=stored.dtype.kind in "fc"))


def _add_variables(zstore: ZStore, groups: Mapping[str, xr.Dataset], opts: _Options,
                   txn: Transaction) -> dict[str, Any]:
    """``mode="a"`` without ``append_dim``: write the variables the store does not hold yet; returns
    the metadata objects that change (the new arrays', the groups' listings and attributes).

    As xarray's ``to_zarr(mode="a")``: new variables go into existing groups, on dimensions the
    groups (or their ancestors) declare (same size) or on new ones; group attributes are updated.
    A variable the store already holds is left alone when its values are the same (a coordinate
    sent again) and refused otherwise.

    Long because planning, the same-values check for variables the store already holds and the
    metadata update share one opened tree and must happen in this order.
    """
    mended: dict[str, Any] = {}  # objects another tool rewrote without their NCZarr keys, mended
    tree, base = _base_tree(zstore, touched=lambda tree: _groups_and_above(tree, groups), mended=mended)
    nczarr = tree.root.is_nczarr
    _refuse_unwritable(zstore, tree, "add variables to")
    layout = _store_layout(tree)
    if layout is not None:  # the store's readers are the netcdf-c it was written for: write what they read
        from .nczarr import for_netcdf_c

        groups = for_netcdf_c(dict(groups), reader_of(layout))
    fmt: Format = "nczarr" if nczarr else "zarr2"
    one = _Options(fmt=fmt, on_overflow=opts.on_overflow, maxstrlen=opts.maxstrlen,
                   default_maxstrlen=opts.default_maxstrlen, compressor=opts.compressor,
                   strict_codecs=opts.strict_codecs, layout=layout or DEFAULT_LAYOUT)
    plans: dict[str, list[_Array]] = {}
    group_attrs: dict[str, dict[str, object]] = {}
    unlimited: dict[str, set[str]] = {}
    for gpath, ds in groups.items():
        if gpath not in tree.groups:
            raise ZStringsError(
                f"Cannot add group {gpath!r} to {zstore.display}: mode='a' adds variables to the groups "
                f"it has ({sorted(tree.groups)}). Write new groups with mode='w'."
            )
        unlimited[gpath] = set(ds.encoding.get("unlimited_dims") or ())
        arrays, group_attrs[gpath] = _plan_group(gpath, ds, one, unlimited[gpath])
        plans[gpath] = _not_stored(zstore, tree, gpath, arrays)
    existing = {g: {d.name: [d.size, bool(d.unlimited)] for d in meta.dimensions.values()}
                for g, meta in tree.groups.items()}
    declared = _resolve_dimensions(plans, unlimited, existing) if nczarr else {}
    new_arrays = [a for arrays in plans.values() for a in arrays]
    attach_pipelines(new_arrays)
    _start_writes(zstore, txn, tree, base, new_arrays=[f"{a.group.rstrip('/')}/{a.name}" for a in new_arrays])
    updates: dict[str, Any] = dict(write_arrays(zstore, new_arrays, layout))
    # the groups: new arrays and dimensions in the NCZarr group listing, attributes updated
    stored = {**base, **mended}
    for gpath, planned in plans.items():
        updates.update(_group_objects_added(stored, gpath, planned, group_attrs[gpath], declared.get(gpath, {}),
                                            layout, nczarr))
    return {**mended, **updates}


def _not_stored(zstore: ZStore, tree: Any, gpath: str, arrays: Iterable[_Array]) -> list[_Array]:
    """The planned arrays the store does not hold yet; one it holds with other values or shape is refused."""
    out: list[_Array] = []
    for a in arrays:
        meta = tree.arrays.get(f"{gpath.rstrip('/')}/{a.name}")
        if meta is None:
            out.append(a)
        elif not _same_stored(zstore, meta, a):
            raise held_otherwise(_what(gpath, a.name), zstore.display, "append_dim=<unlimited dimension>")
    return out


def _group_objects_added(stored: Mapping[str, Any], gpath: str, planned: Sequence[_Array],
                         attrs: Mapping[str, object], declared: Mapping[str, list[Any]],
                         layout: NCZarrLayout | None, nczarr: bool) -> dict[str, Any]:
    """A group's metadata objects after variables are added (``stored``: key -> the object as read):
    its attributes updated and, where the layout keeps them, the new arrays and dimensions listed."""
    prefix = "" if gpath == "/" else f"{gpath.strip('/')}/"
    za = copy.deepcopy(stored.get(prefix + ".zattrs")) or {}
    values, types = attrs_json(attrs, where=f"group {gpath!r}", typed=nczarr)
    za.update(values)
    out: dict[str, Any] = {}
    if layout is not None:
        za.setdefault(layout.key("attr"), {}).setdefault("types", {}).update(_typed(types, layout))
        obj = layout.obj("group")
        holder = za if obj == ".zattrs" else copy.deepcopy(stored.get(prefix + obj)) or {}
        _list_added(holder.setdefault(layout.key("group"), {}), layout, planned, declared)
        if holder is not za:
            out[prefix + obj] = holder
    out[prefix + ".zattrs"] = za
    return out


def _list_added(info: dict[str, Any], layout: NCZarrLayout, planned: Sequence[_Array],
                declared: Mapping[str, list[Any]]) -> None:
    """A group's NCZarr listing (``info``) with the new dimensions it declares and the new arrays."""
    dims = info.setdefault(layout.dims_key, {})
    for name, (size, unl) in declared.items():
        if name not in dims:
            dims[name] = {"size": size, "unlimited": 1} if unl else size
    info[layout.arrays_key] = [*info.get(layout.arrays_key, []), *[a.name for a in planned]]
