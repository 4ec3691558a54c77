"""Region writes: values into a slab of arrays an existing store already holds (xarray's
``to_zarr(region=...)``), for NCZarr / Zarr v2 (``to_nczarr``) and Zarr v3 (``to_zarr_v3``).

A pipeline initialises a store (a template, often written with ``compute=False`` or fill values),
then many workers each write their own slab, with no lock between them: a region write takes no
claim and writes chunks only (no metadata changes), so writers of disjoint slabs never meet. Each
region must cover whole chunks of every array it writes (or end at the array's end), else two
neighbours would rewrite the same chunk and one of them would lose. It refuses to start while a
whole-store or append writer holds a claim (``io.commit``'s journal, a local writer lock).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd
import xarray as xr
from xarray import conventions

from ..errors import RegionError, StringOverflowError, UnsupportedError, ZStringsError
from ..io.zstore import ZStore
from ..read.paths import node_key
from ..text import policy as strings
from ..threads import run_all
from .chunks import ChunkBatch, abandon_block_writes, block_write, block_writes
from .plan import _is_dask, _missing, _what

__all__ = ["Region", "write_region"]

#: ``region=``: dimension name -> slice of the store's index (or "auto": found from the coordinate's
#: values in the store), or "auto" for every dimension
Region = Mapping[str, slice | Literal["auto"]] | Literal["auto"]


# ---------------------------------------------------------------------------------------------
# The store and what it holds
# ---------------------------------------------------------------------------------------------


def _tree(zstore: ZStore, fmt: str, group: str) -> Any:
    from ..read.tree import open_tree

    tree = open_tree(zstore)
    zf = tree.root.zarr_format
    if fmt == "v3" and zf != 3:
        raise UnsupportedError(f"Cannot write a region of {zstore.display} with to_zarr_v3: it is a Zarr v{zf} "
                               "store; write the region with xr_zstrings.to_nczarr(..., region=...).")
    if fmt == "v2" and zf == 3:
        raise UnsupportedError(f"Cannot write a region of {zstore.display} with to_nczarr: it is a Zarr v3 store; "
                               "write the region with xr_zstrings.to_zarr_v3(..., region=...).")
    if group not in tree.groups:
        raise ZStringsError(f"Cannot write a region of group {group!r}: {zstore.display} has no such group. "
                            f"Groups: {sorted(tree.groups)}.")
    return tree


# ---------------------------------------------------------------------------------------------
# The region: xarray's rules
# ---------------------------------------------------------------------------------------------


def _stored_dims(meta: Any) -> tuple[str, ...]:
    names = meta.dimension_names or tuple(r.rpartition("/")[2] for r in (meta.dimension_references or ()))
    return tuple(str(n) for n in names)


def _auto(ds: xr.Dataset, region: Mapping[str, Any], zstore: ZStore, tree: Any, group: str) -> dict[str, slice]:
    """``"auto"`` entries found from the coordinate values in the store (xarray's rule: they must
    all be there, contiguous); a dimension without a coordinate is the whole dimension."""
    from ..read.chunked import open_chunked

    out: dict[str, slice] = {}
    for dim, val in region.items():
        if not (isinstance(val, str) and val == "auto"):
            out[dim] = val
            continue
        meta = tree.arrays.get(f"{group.rstrip('/')}/{dim}")
        if dim not in ds.variables or meta is None:
            out[dim] = slice(0, ds.sizes[dim])
            continue
        raw = open_chunked(zstore, meta, meta.shape).read(tuple(slice(0, n) for n in meta.shape))
        stored = conventions.decode_cf_variable(dim, xr.Variable((dim,), raw, meta.cf_attributes()))
        idxs = pd.Index(np.asarray(stored.values)).get_indexer(np.asarray(ds[dim].values))
        if (idxs == -1).any():
            raise RegionError(f"Not all values of coordinate {dim!r} in the new array were found in {zstore.display}. "
                              "Writing to a region requires that no dimensions or metadata are changed by the write: "
                              f"append the new {dim!r} values first (mode='a', append_dim={dim!r}), then write the region.")
        if (np.diff(idxs) != 1).any():
            raise RegionError(f"The auto-detected region of coordinate {dim!r} in {zstore.display} had "
                             "non-contiguous indices. Writing to a region requires that the new data be a "
                             "contiguous part of the store.")
        out[dim] = slice(int(idxs[0]), int(idxs[-1]) + 1)
    return out


def _region(ds: xr.Dataset, region: Region, zstore: ZStore, tree: Any, group: str) -> dict[str, slice]:
    """``region`` checked as xarray checks it, "auto" resolved, every slice with a start and stop."""
    asked: dict[str, Any] | None = (dict.fromkeys(map(str, ds.dims), "auto") if isinstance(region, str) and region == "auto"
                                    else dict(region) if isinstance(region, Mapping) else None)
    if asked is None:
        raise RegionError(f"``region`` must be a dict of dimension -> slice (or 'auto'), got {type(region).__name__}")
    for k, v in asked.items():
        if k not in ds.dims:
            raise RegionError(f"all keys in ``region`` are not in Dataset dimensions, got {list(asked)} and "
                             f"{list(ds.dims)}")
        if not isinstance(v, slice) and not (isinstance(v, str) and v == "auto"):
            raise RegionError(f"all values in ``region`` must be slice objects or 'auto', got region={asked}")
        if isinstance(v, slice) and v.step not in (1, None):
            raise RegionError(f"step on all slices in ``region`` must be 1 or None, got region={asked}")
    out = _auto(ds, asked, zstore, tree, group)
    for dim, s in out.items():
        start = s.start or 0
        stop = s.stop if s.stop is not None else start + ds.sizes[dim]
        if start < 0 or stop < 0:
            raise RegionError(f"region[{dim!r}] = {s}: negative bounds are not supported; give the positions.")
        if stop - start != ds.sizes[dim]:
            raise RegionError(f"region[{dim!r}] = {s} covers {stop - start} positions but the Dataset's {dim!r} has "
                             f"{ds.sizes[dim]}.")
        out[dim] = slice(start, stop)
    return out


def _to_write(ds: xr.Dataset, region: Mapping[str, slice]) -> xr.Dataset:
    """The variables a region writes: every one must share a dimension with the region (xarray's
    error and fix), and indexes are dropped (a region write never changes them)."""
    non_matching = [k for k, v in ds.variables.items() if not set(region).intersection(v.dims)]
    if region and non_matching:
        raise RegionError(
            "when setting `region` explicitly, all variables in the dataset to write must have at least one "
            f"dimension in common with the region's dimensions {list(region)}, but that is not the case for some "
            f"variables here. To drop these variables from this dataset before writing, write: "
            f".drop_vars({non_matching!r})")
    return ds.drop_vars(list(ds.indexes))


@dataclass
class _Slab:
    """One variable's part of the region: the stored array, the values (CF-encoded by the writer
    of its format), and where they start in the array (elements, per stored dimension)."""

    gpath: str
    name: str
    meta: Any
    var: xr.Variable
    start: tuple[int, ...]

    @property
    def what(self) -> str:
        return _what(self.gpath, self.name)


def _slab(zstore: ZStore, tree: Any, gpath: str, name: str, var: xr.Variable, region: Mapping[str, slice]) -> _Slab:
    """Check one variable against the array the store holds: same dimensions, inside its shape,
    and chunk-aligned (else the error names the variable, dimension, region and chunk boundaries)."""
    what = _what(gpath, name)
    meta = tree.arrays.get(f"{gpath.rstrip('/')}/{name}")
    if meta is None:
        raise ZStringsError(f"Cannot write a region of {what}: {zstore.display} does not hold it. A region write "
                            "writes into arrays the store already has; add variables with mode='a' first.")
    dims = _stored_dims(meta)
    logical = dims[: var.ndim] if meta.string_kind == "char" else dims
    if tuple(map(str, var.dims)) != logical:
        raise ZStringsError(f"Cannot write a region of {what}: its dimensions {tuple(var.dims)} are not the stored "
                            f"array's {logical} in {zstore.display}.")
    start: list[int] = []
    for axis, dim in enumerate(dims):
        n, c = meta.shape[axis], meta.chunks[axis]
        s = region.get(dim) if axis < var.ndim else None
        lo, hi = (s.start, s.stop) if s is not None else (0, n)
        if s is None and axis < var.ndim and var.shape[axis] != n:
            raise ZStringsError(f"Cannot write a region of {what}: it has {var.shape[axis]} positions along "
                                f"{dim!r}, which is not in the region, and the store has {n}.")
        if hi > n:
            raise ZStringsError(f"Cannot write a region of {what}: region[{dim!r}] = slice({lo}, {hi}) goes past the "
                                f"stored size {n} of {dim!r}; a region write never grows an array (append with "
                                "mode='a', append_dim=... instead).")
        if lo % c or (hi % c and hi != n):
            edges = sorted({*range(0, n, c), n})
            shown_edges = edges if len(edges) <= 12 else [*edges[:6], "...", *edges[-3:]]
            raise ZStringsError(
                f"Cannot write a region of {what}: region[{dim!r}] = slice({lo}, {hi}) does not align with its "
                f"chunks of {c} along {dim!r} in {zstore.display} (chunk boundaries at {shown_edges}). A region "
                "that covers part of a chunk would rewrite that chunk over a neighbouring region's write: choose "
                "regions that start and end on chunk boundaries (or at the end of the dimension).")
        start.append(lo)
    return _Slab(gpath, name, meta, var, tuple(start))


# ---------------------------------------------------------------------------------------------
# Encoding values as the stored array holds them, and writing its chunks
# ---------------------------------------------------------------------------------------------


class _Encoder:
    """Turns a block of a variable's values into its stored chunk's bytes, wherever dask runs it
    (picklable: codec chains are built again in each process)."""

    def __init__(self, zstore: ZStore, slab: _Slab, on_overflow: str, netcdf_c: bool) -> None:
        self.zstore, self.meta, self.on_overflow = zstore, slab.meta, on_overflow
        self.gpath, self.name = slab.gpath, slab.name
        self.dims, self.attrs = slab.var.dims, dict(slab.var.attrs)
        self.encoding = dict(slab.var.encoding)
        self.netcdf_c = netcdf_c
        self._pipe: Any = None
        self._fill: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_pipe": None}

    @property
    def where(self) -> str:
        return f"{self.zstore.display} key {self.meta.path.strip('/')}/" + (
            "zarr.json" if self.meta.zarr_format == 3 else ".zarray")

    def chunk(self, storage: np.ndarray) -> bytes:  # pragma: no cover - each format's
        raise NotImplementedError

    def storage(self, block: np.ndarray) -> np.ndarray:  # pragma: no cover - each format's
        raise NotImplementedError


class _V2Encoder(_Encoder):
    """NCZarr / Zarr v2: the values encoded as an append encodes them (``write.append``: the stored
    CF attributes, string width, char width, missing values), the chunk through the array's
    numcodecs chain."""

    def storage(self, block: np.ndarray) -> np.ndarray:
        from .append import _as_stored
        from .plan import _numeric_array, _Options, _string_array, text_kind
        from .v2_text import OWN_LAYOUTS, encode_as_stored, fill_missing, missing_fill

        meta, what = self.meta, _what(self.gpath, self.name)
        var = xr.Variable(self.dims, block, self.attrs, self.encoding)
        kind = text_kind(var)
        v2_text = not self.netcdf_c and meta.string_kind in ("string", *OWN_LAYOUTS)
        if meta.string_kind is not None and kind is None:
            raise ZStringsError(f"Cannot write a region of {what} in {self.where}: the store holds text "
                                f"({meta.dtype_str}) but the values are {var.dtype}. Convert them to str first.")
        stored = _as_stored(var, meta)
        if v2_text:
            stored.encoding.pop("_FillValue", None)
            stored.attrs.pop("_FillValue", None)
            values = fill_missing(np.asarray(stored.data), missing_fill(meta, netcdf_c=self.netcdf_c),
                                  as_bytes=kind == "bytes", what=what, where=self.where)
            if meta.string_kind in OWN_LAYOUTS:
                return encode_as_stored(values, meta, self.on_overflow, what, self.where)
            stored = stored.copy(deep=False, data=values)
        one = _Options(fmt="nczarr" if self.netcdf_c else "zarr2", on_overflow=self.on_overflow,  # type: ignore[arg-type]
                       maxstrlen=None, default_maxstrlen=None, compressor=None, strict_codecs=False)
        with strings.stored_width("A region write keeps the stored width"):
            a = (_string_array(self.gpath, self.name, stored, kind, one, set()) if kind is not None
                 else _numeric_array(self.gpath, self.name, stored, one, set()))
        out = np.asarray(a.data)
        if out.dtype != meta.dtype:
            if meta.string_kind is not None:
                raise ZStringsError(f"Cannot write a region of {what}: the values are stored as {out.dtype} but "
                                    f"{self.where} has {meta.dtype_str}.")
            out = out.astype(meta.dtype)
        return out

    def chunk(self, storage: np.ndarray) -> bytes:
        from ..read.chunked import open_chunked
        from .chunks import _encode_chunk
        from .plan import _Array

        if self._pipe is None:
            from ..codecs.v2 import build_pipeline

            meta = self.meta
            self._fill = open_chunked(self.zstore, meta, meta.shape).stored_fill()
            self._pipe = _Array(
                group=self.gpath, name=self.name, dims=(), ref_hints=(), unlimited=frozenset(), shape=meta.shape,
                chunks=meta.chunks, dtype=meta.dtype, dtype_str=meta.dtype_str, fill_json=None,
                fill_storage=self._fill, compressor=None, filters=None, attrs={}, kind=None, data=None,
                pipeline=build_pipeline(meta.compressor, meta.filters, dtype=meta.dtype,
                                        string_kind=meta.string_kind, where=_what(self.gpath, self.name)))
        return bytes(memoryview(_encode_chunk(self._pipe, storage, tuple(self.meta.chunks))))


class _SlabWriter:
    """Writes the chunks of one slab: a block of values (one chunk's, or the edge chunk's part) at
    chunk-grid location ``loc`` within the slab (each format's subclass encodes them)."""

    def __init__(self, zstore: ZStore, slab: _Slab) -> None:
        self.zstore, self.meta, self.what = zstore, slab.meta, slab.what
        self.origin = tuple(s // c for s, c in zip(slab.start, slab.meta.chunks, strict=True))

    def write(self, block: np.ndarray, loc: tuple[int, ...]) -> None:  # pragma: no cover - each format's
        raise NotImplementedError

    def in_memory(self, values: np.ndarray) -> list[tuple[str, bytes]]:  # pragma: no cover - each format's
        """Every chunk of an in-memory slab encoded (on threads), before any is written."""
        raise NotImplementedError

    def __call__(self, block: np.ndarray, block_info: Any = None) -> np.ndarray:
        if block_info is not None:  # (None: dask probing the function: write nothing)
            self.write(block, tuple(block_info[0]["chunk-location"]))
        return np.zeros((1,) * max(np.ndim(block), 1), np.int64)


class _V2SlabWriter(_SlabWriter):
    """NCZarr / Zarr v2: each chunk encoded by the slab's ``_V2Encoder``."""

    def __init__(self, zstore: ZStore, slab: _Slab, encoder: _Encoder) -> None:
        super().__init__(zstore, slab)
        self.encoder = encoder
        self.extra = len(slab.meta.shape) - slab.var.ndim

    def key(self, loc: tuple[int, ...]) -> str:
        idx = tuple(o + i for o, i in zip(self.origin, (*loc, *(0,) * self.extra), strict=True))
        return node_key(self.meta.path, self.meta.chunk_key(idx))

    def encoded(self, block: np.ndarray, loc: tuple[int, ...]) -> tuple[str, bytes]:
        """(chunk key, its bytes) of ``block`` at ``loc``; errors name positions in the array."""
        first = tuple((o + i) * c for o, i, c in zip(self.origin, loc, self.meta.chunks, strict=False))
        with strings.at_offset(first):
            return self.key(loc), self.encoder.chunk(self.encoder.storage(np.asarray(block)))

    def write(self, block: np.ndarray, loc: tuple[int, ...]) -> None:
        with block_write(self.zstore):
            self.zstore.set_many([self.encoded(block, loc)])

    def in_memory(self, values: np.ndarray) -> list[tuple[str, bytes]]:
        chunks = self.meta.chunks[: values.ndim]
        grid = [math.ceil(n / c) for n, c in zip(values.shape, chunks, strict=True)]

        def one(loc: tuple[int, ...]) -> tuple[str, bytes]:
            sel = tuple(slice(i * c, (i + 1) * c) for i, c in zip(loc, chunks, strict=True))
            return self.encoded(values[sel], loc)

        return run_all(one, list(np.ndindex(*grid)))


class _V3SlabWriter(_SlabWriter):
    """Zarr v3: one slab's blocks written by the array's ``zarr3.ArrayWriter`` (its codec chain)
    at the slab's place. Numbers come CF-encoded (``_v3_data``); text's missing values become the
    stored string ``_FillValue`` (None in zarrs' optional type), refused with neither before the
    block holding them is written."""

    def __init__(self, zstore: ZStore, slab: _Slab) -> None:
        from .append_v3 import _stored_kind, _text_fill
        from .zarr3 import ArrayWriter

        super().__init__(zstore, slab)
        meta = slab.meta
        self.where = f"{zstore.display} key {meta.path.strip('/')}/zarr.json"
        fill, optional = _text_fill(meta.raw, meta) if meta.string_kind is not None else (None, True)
        self.fill: Any = fill
        self.fills_missing = not optional  # (text not in the optional type: its missing values need the fill)
        self.writer = ArrayWriter(zstore, meta.path.strip("/"), meta.raw, _stored_kind(meta.raw), fill=self.fill,
                                  fresh=False, name=slab.name)

    def stored(self, values: np.ndarray) -> np.ndarray:
        """``values`` with missing text as the fill (refused without one); others as given."""
        miss = _missing(values) if self.fills_missing and values.dtype.kind in "OT" else None
        if miss is None or not miss.any():
            return values
        if self.fill is None:
            raise ZStringsError(
                f"Cannot write a region of {self.what}: {int(miss.sum())} missing value(s) (None/NaN), but "
                f"{self.where} has no string _FillValue, so a missing value cannot be stored there. Fill them "
                "first (e.g. ds[name].fillna('')), or write the store again with a string _FillValue.")
        values = values.astype(object)
        values[miss] = self.fill
        return values

    def fitted(self, values: np.ndarray) -> np.ndarray:
        """Text for a fixed-width array (zarr-python's ``fixed_length_utf32``, ``null_terminated_bytes``):
        a value longer than its width is refused, never cut silently by the cast to the stored type."""
        dt = np.dtype(self.meta.dtype)
        if dt.kind not in "US" or values.dtype.kind not in "OTUS":
            return values
        per = 4 if dt.kind == "U" else 1  # (UTF-32: four bytes a character)
        width = dt.itemsize // per
        flat = values.reshape(-1)
        lengths = np.fromiter((len(v) if isinstance(v, str | bytes) else 0 for v in flat), np.int64, flat.size)
        over = lengths > width
        if over.any():
            i = int(np.argmax(lengths))
            unit = "characters" if per == 4 else "bytes"
            raise StringOverflowError(
                f"{strings.what_prefix(self.what)}{int(over.sum())} value(s) do not fit {self.where}, which stores "
                f"{dt.str} ({width} {unit}): the longest, value {strings.position_label(i, values.shape)} = "
                f"{flat[i]!r}, has {int(lengths[i])} {unit}. A region write keeps the stored type: shorten the values, "
                "or write the variable again (to_zarr_v3(..., mode='w')) as variable-length text.")
        return values

    def write(self, block: np.ndarray, loc: tuple[int, ...]) -> None:
        at = tuple(o + i for o, i in zip(self.origin, loc, strict=True))
        with strings.at_offset(tuple(i * c for i, c in zip(at, self.meta.chunks, strict=True))):
            self.writer.write(self.fitted(self.stored(np.asarray(block))), at)

    def in_memory(self, values: np.ndarray) -> list[tuple[str, bytes]]:
        w = self.writer
        with strings.at_offset(tuple(i * c for i, c in zip(self.origin, self.meta.chunks, strict=True)), "the region"):
            stored = self.fitted(self.stored(values))
            data, packed = (stored, None) if w.kind is None else w.prepared(stored)[:2]
        assert data is not None  # (missing text without a fill was refused above)
        return [x for x in run_all(lambda job: job(), list(w.jobs(data, packed, self.origin))) if x is not None]


def _v3_data(slab: _Slab) -> Any:
    """A Zarr v3 slab's values as written: numbers CF-encoded with the stored attributes (lazily
    for dask, by xarray's public encoder), text as given."""
    meta, var = slab.meta, slab.var
    if meta.string_kind is not None:
        return var.data
    enc = {k: v for k, v in meta.cf_attributes().items()
           if k in ("units", "calendar", "scale_factor", "add_offset", "_FillValue", "missing_value")}
    plain = xr.Variable(var.dims, var.data, {k: v for k, v in var.attrs.items() if k not in enc},
                        {**enc, "dtype": meta.dtype})
    if "_FillValue" not in enc:
        plain.encoding["_FillValue"] = None
    return conventions.encode_cf_variable(plain, name=slab.name).data.astype(meta.dtype)


def _write_dask_block(block: np.ndarray, writer: _SlabWriter, block_info: Any = None) -> np.ndarray:
    return writer(block, block_info)


def _graph(writer: _SlabWriter, data: Any) -> Any:
    """The dask graph of block writes (blocks rechunked to the stored chunks: each chunk is
    written by exactly one task)."""
    return block_writes(_write_dask_block, data.rechunk(tuple(writer.meta.chunks[: data.ndim])), writer,
                        "zstrings-region")


# ---------------------------------------------------------------------------------------------
# The entry point
# ---------------------------------------------------------------------------------------------


def write_region(
    obj: object,
    target: Any,
    region: Region,
    *,
    fmt: Literal["v2", "v3"],
    mode: str = "a",
    group: str | None = None,
    on_overflow: strings.OnOverflow = "error",
    storage_options: Mapping[str, Any] | None = None,
    compute: bool = True,
) -> Any:
    """Write ``obj``'s variables into ``region`` of the arrays ``target`` already holds (chunks
    only; ``to_nczarr``/``to_zarr_v3`` with ``region=``). Checks everything before writing a chunk;
    ``compute=False`` returns a dask ``Delayed`` that writes when computed (the claim check then).
    ``mode``: "a" (or the writers' default "w-": a region always goes into the store there); "w",
    which replaces a store, is refused."""
    if mode == "w":
        raise ZStringsError("mode='w' replaces the whole store, which a region write never does: pass mode='a' "
                            "with region=..., or write the whole store without region.")
    if on_overflow == "widen":
        raise ZStringsError("on_overflow='widen' cannot apply to a region write: it would change the stored string "
                            "width (metadata), which a region write never does. Use on_overflow='error' or "
                            "'truncate', or write the store again with a wider maxstrlen.")
    strings.check_on_overflow(on_overflow)
    if not isinstance(obj, xr.Dataset):
        raise ZStringsError(f"A region write takes an xarray Dataset (one group: group=...), got {type(obj).__name__}.")
    gpath = "/" + (group or "").strip("/")
    with _session(target, fmt, storage_options) as zstore:
        tree = _tree(zstore, fmt, gpath)
        reg = _region(obj, region, zstore, tree, gpath)
        ds = _to_write(obj, reg)
        netcdf_c = bool(tree.root.is_nczarr) if fmt == "v2" else False
        writers: list[tuple[_SlabWriter, Any]] = []
        for name, var in ds.variables.items():
            slab = _slab(zstore, tree, gpath, str(name), var, reg)
            writers.append((_V2SlabWriter(zstore, slab, _V2Encoder(zstore, slab, on_overflow, netcdf_c)), var.data)
                           if fmt == "v2" else (_V3SlabWriter(zstore, slab), _v3_data(slab)))
        _refuse_links(zstore, [w.meta.path for w, _ in writers])
        if compute:
            _run(zstore, writers)
            return None
    import functools

    from .deferred import deferred

    return deferred(functools.partial(_checked_then_run, target, fmt, storage_options, writers), "zstrings-region")


@contextlib.contextmanager
def _session(target: Any, fmt: str, storage_options: Mapping[str, Any] | None) -> Iterator[ZStore]:
    """The store a region write goes into (``write.session``'s "region" kind: no lock, no claim;
    refused while another write holds it)."""
    from .session import write_session

    with write_session(target, "a", kind="region", fmt=fmt, storage_options=storage_options) as s:
        yield s.zstore


def _refuse_links(zstore: ZStore, paths: list[str]) -> None:
    from ..io.zstore import refuse_links_on

    if type(zstore.store).__name__ == "LocalStore":
        refuse_links_on(zstore.store.root, [p.strip("/") for p in paths], zstore.display)  # type: ignore[union-attr]


def _run(zstore: ZStore, writers: list[tuple[_SlabWriter, Any]]) -> None:
    """In-memory slabs encoded whole (a bad value is refused before any chunk is written), then
    written in batches; then every dask slab in one compute (each block checked as it is written)."""
    import warnings

    from ..errors import StringTruncationWarning

    graphs = [_graph(w, data) for w, data in writers if _is_dask(data)]
    items = [kv for w, data in writers if not _is_dask(data) for kv in w.in_memory(np.asarray(data))]
    try:
        batch = ChunkBatch(zstore)
        batch.add(items)
        batch.flush()
        if graphs:
            import dask

            with warnings.catch_warnings():
                warnings.simplefilter("default", StringTruncationWarning)
                dask.compute(*graphs)
    except BaseException:
        abandon_block_writes(zstore)
        raise


def _checked_then_run(target: Any, fmt: str, storage_options: Mapping[str, Any] | None,
                      writers: list[tuple[_SlabWriter, Any]]) -> None:
    """A deferred region write, when computed: refused if another write holds the store now."""
    with _session(target, fmt, storage_options):
        if writers:
            _run(writers[0][0].zstore, writers)


