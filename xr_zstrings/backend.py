"""The xarray entry point ``engine="zstrings"``: thin glue from ``read/`` to xarray.

CF decoding (masking, scaling, times) is xarray's own, through ``StoreBackendEntrypoint``;
this module only wraps ``LazyArray`` as a ``BackendArray`` and maps groups to Datasets/DataTrees.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import threading
from collections.abc import Hashable, Iterable, Iterator
from typing import Any

import numpy as np
import xarray as xr
from xarray.backends import BackendArray, BackendEntrypoint
from xarray.backends.common import AbstractDataStore
from xarray.backends.store import StoreBackendEntrypoint
from xarray.core import indexing
from xarray.core.utils import Frozen, FrozenDict

# imported for what they register: the accessor ds.zstrings / tree.zstrings, and the zarr-python
# plugin's data types (NC_CHAR ">S1", zarrs' optional) and codecs: xarray imports this module for
# every open (it loads all backends), so engine="zarr" reads them on zarr 3.1.x too, which never
# loads zarr.data_type entry points
from . import accessor, zarr_plugin  # noqa: F401 - registered on import (above)
from .errors import DimensionError
from .io.redact import shown
from .io.store import open_store
from .io.targets import looks_like_zstrings_target
from .io.zstore import ZStore
from .read.decode import Decode
from .read.lazy import LazyArray
from .read.options import ReadOptions
from .read.tree import TreeMeta, open_tree
from .read.variables import GroupContents, group_contents, group_not_found
from .xarray_arrow import warn_kept, with_arrow_strings

__all__ = ["ZStringsBackendArray", "ZStringsBackendEntrypoint", "ZStringsDataStore"]


class ZStringsBackendArray(BackendArray):
    """Lazily indexed variable data; xarray hands us outer selections (ints, slices, 1-D int arrays)."""

    def __init__(self, data: LazyArray) -> None:
        self.data = data
        self.shape = data.shape
        self.dtype = data.dtype

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        out: np.ndarray = indexing.explicit_indexing_adapter(
            key, self.shape, indexing.IndexingSupport.OUTER, self.data.__getitem__
        )
        return out

    def arrow(self, key: indexing.ExplicitIndexer | tuple[Any, ...]) -> Any:
        """The selection (xarray's BasicIndexer/OuterIndexer, or its ``.tuple``) flattened in C
        order as a ``pyarrow.ChunkedArray``, read from the chunk buffers (``LazyArray.arrow``)."""
        if isinstance(key, indexing.VectorizedIndexer):
            raise TypeError(
                "ZStringsBackendArray.arrow takes outer selections (BasicIndexer, OuterIndexer), not a "
                "VectorizedIndexer; select with .isel on each dimension separately first."
            )
        k = key.tuple if isinstance(key, indexing.ExplicitIndexer) else tuple(key)
        if isinstance(self.data, LazyArray):
            return self.data.arrow(k)
        from .read.arrow import values_to_arrow  # an array read through zarr-python

        return values_to_arrow(self.data[k + (slice(None),) * (len(self.shape) - len(k))], self.data.decode)

    async def async_getitem(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        """``ds.load_async()``: the same read in a worker thread (the store calls block; the chunk
        fetches inside one read are already concurrent), so the event loop keeps running."""

        async def read(k: tuple[Any, ...]) -> np.ndarray:
            return await asyncio.to_thread(self.data.__getitem__, k)

        out: np.ndarray = await indexing.async_explicit_indexing_adapter(
            key, self.shape, indexing.IndexingSupport.OUTER, read
        )
        return out


class ZStringsDataStore(AbstractDataStore):
    """One group's contents presented through xarray's data-store protocol."""

    def __init__(self, contents: GroupContents, zstore: ZStore) -> None:
        self.contents = contents
        self.zstore = zstore

    def get_variables(self) -> Frozen[Hashable, Any]:
        out = {}
        for name, spec in self.contents.variables.items():
            data = indexing.LazilyIndexedArray(ZStringsBackendArray(spec.data))
            # (fastpath: the data is xarray's own lazy array, which as_compatible_data keeps as is)
            out[name] = xr.Variable(spec.dims, data, spec.attrs, spec.encoding, fastpath=True)
        return FrozenDict(out)

    def get_attrs(self) -> Frozen[Hashable, Any]:
        return FrozenDict(self.contents.attrs)

    def get_dimensions(self) -> Frozen[Hashable, Any]:
        return FrozenDict({d.name: d.size for d in self.contents.dimensions.values()})

    def get_encoding(self) -> dict[str, Any]:
        return dict(self.contents.encoding)

    def close(self) -> None:
        close = getattr(self.zstore.store, "close", None)
        if close is not None and type(self.zstore.store).__name__ == "ZipStore":
            close()


def _options(string_dtype: Any, utf8_errors: str, concat_characters: bool | None,
             decode_threads: int | None = None, mask_and_scale: bool | None = True,
             use_zarr_fill_value_as_mask: bool | None = None) -> ReadOptions:
    return ReadOptions(
        string_dtype=string_dtype,
        utf8_errors=utf8_errors,  # type: ignore[arg-type]  # a str from the caller; ReadOptions checks it
        concat_characters=True if concat_characters is None else bool(concat_characters),
        decode_threads=decode_threads,
        mask_and_scale=True if mask_and_scale is None else bool(mask_and_scale),
        use_zarr_fill_value_as_mask=use_zarr_fill_value_as_mask,
    )


def _to_dataset(
    tree: TreeMeta,
    path: str,
    *,
    options: ReadOptions,
    drop_variables: str | Iterable[str] | None,
    decoders: dict[str, Any],
    kept: list[str] | None = None,
) -> xr.Dataset:
    """One group as xarray decodes it; ``string_dtype="arrow"``: then its 1-D text Arrow-backed (the
    string variables left StringDType are added to ``kept``, for one warning per open)."""
    drop = {drop_variables} if isinstance(drop_variables, str) else set(drop_variables or ())
    contents = group_contents(tree, path, options=options, drop_variables=drop)
    store = ZStringsDataStore(contents, tree.store)
    if decoders.get("concat_characters") is True:
        # the reader decided which NC_CHAR variables are joined (as engine="netcdf4" decides it
        # over all variables, dropped ones included); xarray must not join the rest again now
        # that drop_variables has removed some users of their character dimension
        keep = {n: False for n, v in contents.variables.items() if Decode(v.data.decode).keeps_chars}
        if keep:
            decoders = {**decoders, "concat_characters": keep}
    ds = StoreBackendEntrypoint().open_dataset(store, drop_variables=None, **decoders)
    for name, spec in contents.variables.items():
        if spec.decoded_encoding and name in ds.variables:
            ds.variables[name].encoding.update(spec.decoded_encoding)
    if options.arrow:
        ds, left = with_arrow_strings(ds, contents, ZStringsBackendArray, path)
        if kept is not None:
            kept.extend(left)
    ds.encoding["zstrings_requests"] = tree.store.requests  # what opening cost (object storage)
    return ds


def open_group(tree: TreeMeta, path: str = "/") -> xr.Dataset:
    """The Dataset ``xr.open_dataset(target, engine="zstrings", group=path)`` returns (default
    options), from a tree already read: ``zstrings check`` opens every group this way, so whatever
    the open raises, check reports."""
    return _to_dataset(tree, path, options=_options("T", "drop", None), drop_variables=None,
                       decoders=_decoders(**_DECODER_DEFAULTS))


_gc_lock = threading.Lock()
_gc_holders = 0  # opens in progress that paused the collector
_gc_was_enabled = False


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused while a store is opened.

    Opening builds a few hundred small objects per variable that all live as long as the dataset;
    each full collection during the open walks every one of them again, so a wide open grew faster
    than its variable count (numbers: docs/performance.md, "Measured notes behind the code").
    Opening makes almost no garbage to collect. Nested and concurrent opens share the pause; the
    collector is turned back on only if it was on before the first of them began.
    """
    global _gc_holders, _gc_was_enabled
    with _gc_lock:
        if _gc_holders == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_holders += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_holders -= 1
            if _gc_holders == 0 and _gc_was_enabled:
                gc.enable()


class ZStringsBackendEntrypoint(BackendEntrypoint):
    """Open NCZarr (every netcdf-c generation), Zarr v2 and Zarr v3 stores with real ``str`` variables.

    Extra keyword arguments: ``string_dtype`` ("T" numpy StringDType (default), "O" object, "U"
    fixed width, "bytes" the stored bytes of every string layout, "arrow" 1-D strings as pandas
    ``ArrowDtype(pa.large_string())`` arrays, lazily; others as "T", with a warning), ``utf8_errors`` ("drop" (default) drops a character that netcdf-c cut in half,
    "replace", "strict"), ``storage_options`` for the store layer, ``decode_threads`` (threads that
    decode chunks; default ``$XR_ZSTRINGS_DECODE_THREADS`` or min(8, CPUs); 1 decodes on the caller),
    ``use_zarr_fill_value_as_mask`` (a pure Zarr ``fill_value`` marks missing values, as in
    engine="zarr"; default: Zarr v2 yes, v3 no).
    """

    description = "NCZarr / Zarr v2 stores with strings decoded to str (xr_zstrings)"
    url = "https://github.com/xr-zstrings/xr_zstrings"
    open_dataset_parameters = (
        "filename_or_obj",
        "drop_variables",
        "mask_and_scale",
        "decode_times",
        "concat_characters",
        "decode_coords",
        "use_cftime",
        "decode_timedelta",
        "group",
        "string_dtype",
        "utf8_errors",
        "storage_options",
        "decode_threads",
        "use_zarr_fill_value_as_mask",
    )

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        return looks_like_zstrings_target(filename_or_obj)

    def open_dataset(
        self,
        filename_or_obj: str | os.PathLike[Any] | Any,
        *,
        drop_variables: str | Iterable[str] | None = None,
        mask_and_scale: bool = True,
        decode_times: bool = True,
        concat_characters: bool = True,
        decode_coords: bool = True,
        use_cftime: bool | None = None,
        decode_timedelta: bool | None = None,
        group: str | None = None,
        string_dtype: Any = "T",
        utf8_errors: str = "drop",
        storage_options: dict[str, Any] | None = None,
        decode_threads: int | None = None,
        use_zarr_fill_value_as_mask: bool | None = None,
    ) -> xr.Dataset:
        # checked first
        _check_group(group)
        options = _options(string_dtype, utf8_errors, concat_characters, decode_threads, mask_and_scale,
                           use_zarr_fill_value_as_mask)
        kept: list[str] = []
        with _gc_paused():
            tree = open_tree(open_store(filename_or_obj, storage_options=storage_options))
            tree.store.pin_version(tree.version)  # lazy reads refuse a version swapped in later
            ds = _to_dataset(
                tree,
                group or "/",
                options=options,
                drop_variables=drop_variables,
                decoders=_decoders(mask_and_scale, decode_times, concat_characters, decode_coords,
                                   use_cftime, decode_timedelta),
                kept=kept,
            )
        warn_kept(kept)
        return ds

    def open_groups_as_dict(
        self,
        filename_or_obj: str | os.PathLike[Any] | Any,
        *,
        drop_variables: str | Iterable[str] | None = None,
        group: str | None = None,
        string_dtype: Any = "T",
        utf8_errors: str = "drop",
        storage_options: dict[str, Any] | None = None,
        decode_threads: int | None = None,
        use_zarr_fill_value_as_mask: bool | None = None,
        **decoders: Any,
    ) -> dict[str, xr.Dataset]:
        """Every group below ``group`` as its own Dataset, keyed by path relative to it."""
        if decoders.pop("decode_cf", True) is False:
            decoders.update(mask_and_scale=False, decode_times=False, concat_characters=False,
                            decode_coords=False, decode_timedelta=False)
        _check_group(group)
        options = _options(string_dtype, utf8_errors, decoders.get("concat_characters", True), decode_threads,
                           decoders.get("mask_and_scale", True), use_zarr_fill_value_as_mask)
        root = "/" + (group or "").strip("/") if (group or "").strip("/") else "/"
        decoders = _decoders(**{k: decoders.get(k, v) for k, v in _DECODER_DEFAULTS.items()})
        out: dict[str, xr.Dataset] = {}
        kept: list[str] = []
        with _gc_paused():
            tree = open_tree(open_store(filename_or_obj, storage_options=storage_options))
            tree.store.pin_version(tree.version)  # lazy reads refuse a version swapped in later
            if root not in tree.groups:
                raise group_not_found(tree, root)
            for path in sorted(tree.groups, key=lambda p: (p.count("/"), p)):
                if not (path == root or root == "/" or path.startswith(root + "/")):
                    continue
                rel = "/" if path == root else path[len(root.rstrip("/")):]
                out[rel] = _to_dataset(tree, path, options=options, drop_variables=drop_variables,
                                       decoders=decoders, kept=kept)
        warn_kept(kept)
        return out

    def open_datatree(
        self,
        filename_or_obj: str | os.PathLike[Any] | Any,
        **kwargs: Any,
    ) -> xr.DataTree:
        groups = self.open_groups_as_dict(filename_or_obj, **kwargs)
        _check_tree_alignment(groups, source=shown(filename_or_obj))
        return xr.DataTree.from_dict(groups)


def _check_group(group: Any) -> None:
    if group is not None and not isinstance(group, str):
        raise ValueError(f"group must be a string (a group path such as 'obs' or '/obs/deep'), got {group!r}.")


_DECODER_DEFAULTS: dict[str, Any] = {"mask_and_scale": True, "decode_times": True, "concat_characters": True,
                                     "decode_coords": True, "use_cftime": None, "decode_timedelta": None}


def _decoders(mask_and_scale: bool, decode_times: bool, concat_characters: bool, decode_coords: bool,
              use_cftime: bool | None, decode_timedelta: bool | None) -> dict[str, Any]:
    return {"mask_and_scale": mask_and_scale, "decode_times": decode_times,
            "concat_characters": concat_characters, "decode_coords": decode_coords,
            "use_cftime": use_cftime, "decode_timedelta": decode_timedelta}


def _check_tree_alignment(groups: dict[str, xr.Dataset], *, source: str) -> None:
    """DataTree needs a child's dimensions to match its ancestors'; netCDF allows shadowing."""
    for path, ds in groups.items():
        parts = [p for p in path.split("/") if p]
        for depth in range(len(parts)):
            anc = "/" + "/".join(parts[:depth])
            if anc not in groups:
                continue
            for dim, size in ds.sizes.items():
                asize = groups[anc].sizes.get(dim)
                conflict = asize is not None and asize != size
                if not conflict and asize is not None and dim in ds.variables and dim in groups[anc].variables:
                    # dimension coordinates become indexes later (in xarray's api): compare values
                    conflict = not ds[dim].variable.equals(groups[anc][dim].variable)
                if conflict:
                    raise DimensionError(
                        f"Cannot open {source} as a DataTree: group {path!r} has dimension {dim!r} "
                        f"(size {size}) that does not align with {dim!r} of its ancestor group {anc!r} "
                        f"(size {asize}, or other coordinate values). netCDF allows a subgroup to shadow "
                        "a dimension; xarray's DataTree does not. "
                        "Use xr.open_groups(..., engine='zstrings') to get each group as its own Dataset."
                    )
