"""``ds.zstrings`` / ``tree.zstrings``: this package's writers (in ``xr_zstrings.write``) and its
encodings for xarray's own ``to_zarr`` as an accessor, e.g. ``ds.zstrings.to_nczarr(...)``; and
``ds.zstrings`` / ``da.zstrings`` as Arrow and pandas (``to_arrow``, ``to_dataframe``, the Arrow C
stream; ``xr_zstrings.frames``).

Registered when the xarray backend is imported (opening anything with ``engine="zstrings"``) or a
public function is taken from the package (``xr_zstrings.to_nczarr``, ...) once xarray is loaded;
the writers never import it.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

import xarray as xr

from .write import WriteMode  # (typing only: importing it loads no writer)

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

__all__ = ["ZStringsAccessor", "ZStringsArrayAccessor"]


class ZStringsAccessor:
    """String-aware NCZarr output for a Dataset or DataTree (same arguments as ``to_nczarr``); a
    Dataset as Arrow and pandas (``to_arrow``, ``to_dataframe``, ``__arrow_c_stream__``)."""

    def __init__(self, obj: xr.Dataset | xr.DataTree) -> None:
        self._obj = obj

    def to_nczarr(self, target: str | os.PathLike[str] | Any, *, mode: WriteMode = "w-", **kwargs: Any) -> None:
        """Write this object as NCZarr 2 (or pure Zarr v2) that netcdf-c reads; see ``write.nczarr.to_nczarr``."""
        from .write.nczarr import to_nczarr

        to_nczarr(self._obj, target, mode=mode, **kwargs)

    def to_zarr_v2(self, target: str | os.PathLike[str] | Any, *, mode: WriteMode = "w-", **kwargs: Any) -> None:
        """Write this object as pure Zarr v2 that netcdf-c (``mode=zarr``) and zarr-python read; see
        ``write.nczarr.to_zarr_v2``."""
        from .write.nczarr import to_zarr_v2

        to_zarr_v2(self._obj, target, mode=mode, **kwargs)

    def with_netcdf_c_strings(self, **kwargs: Any) -> xr.Dataset:
        """A copy whose strings are netcdf-c's NC_STRING ``|Sn`` bytes, for ``.to_zarr(..., zarr_format=2)``;
        see ``write.nczarr.with_netcdf_c_strings``."""
        from .write.nczarr import with_netcdf_c_strings

        if not isinstance(self._obj, xr.Dataset):
            raise TypeError("with_netcdf_c_strings works on a Dataset; use tree.map_over_datasets for a DataTree.")
        return with_netcdf_c_strings(self._obj, **kwargs)

    def prepare_for_zarr(self, **kwargs: Any) -> xr.Dataset:
        """Deprecated: the old name of ``with_netcdf_c_strings``."""
        _deprecated("prepare_for_zarr", "with_netcdf_c_strings()")
        return self.with_netcdf_c_strings(**kwargs)

    def with_zarr_encoding(self, zarr_format: int) -> xr.Dataset | xr.DataTree:
        """A copy whose codecs are in ``zarr_format``'s vocabulary, for ``.to_zarr(..., zarr_format=...)``;
        see ``write.encoding.with_zarr_encoding``."""
        from .write.encoding import with_zarr_encoding

        return with_zarr_encoding(self._obj, zarr_format)

    def for_zarr(self, zarr_format: int) -> xr.Dataset | xr.DataTree:
        """Deprecated: the old name of ``with_zarr_encoding``."""
        _deprecated("for_zarr", "with_zarr_encoding(zarr_format)")
        return self.with_zarr_encoding(zarr_format)

    def to_zarr(self, store: Any = None, *, zarr_format: int | None = None, **kwargs: Any) -> Any:
        """``.to_zarr(store, zarr_format=..., **kwargs)`` with the store's exact codec chain for that
        format (netcdf-c's shuffle, v3 shards), which the format-neutral encoding engine="zstrings"
        gives cannot hold for both formats; see ``write.encoding.with_zarr_encoding``.

        The target is checked first, by the rule of this package's writers (``TargetExistsError``,
        nothing touched): a folder, S3 prefix or Store that is not empty and whose root is not a
        Zarr store is refused in every mode (xarray's ``mode="w"`` would delete it). Writing into a
        store (``mode="a"``, ``"r+"``, ``append_dim``) takes its Zarr format unless ``zarr_format``
        says another, which is refused, as is ``append_dim`` where no store is: xarray would first
        add metadata there, then fail."""
        from .codecs.encoding import default_zarr_format
        from .write.encoding import with_zarr_encoding

        fmt = _checked_format(store, zarr_format, kwargs)
        fmt = default_zarr_format() if fmt is None else fmt
        _refuse_format(store, fmt)
        return with_zarr_encoding(self._obj, fmt).to_zarr(store, zarr_format=fmt, **kwargs)


    def to_arrow(self, *, dim_order: Sequence[Hashable] | None = None) -> pa.Table:
        """The columns ``ds.to_dataframe().reset_index()`` has, as a ``pyarrow.Table`` whose text
        columns are read from the store straight into Arrow; see ``frames.to_arrow``."""
        from .frames import to_arrow

        return to_arrow(self._dataset("to_arrow"), dim_order=dim_order)

    def to_dataframe(self, *, dim_order: Sequence[Hashable] | None = None) -> pd.DataFrame:
        """``ds.to_dataframe()`` with pandas ``str`` (Arrow-backed) text columns, no Python ``str``
        in between; see ``frames.to_dataframe``."""
        from .frames import to_dataframe

        return to_dataframe(self._dataset("to_dataframe"), dim_order=dim_order)

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        """The Arrow C stream of ``to_arrow()``: ``pa.table(ds.zstrings)``, ``pl.DataFrame(ds.zstrings)``
        and DuckDB read it."""
        from .frames import arrow_stream

        return arrow_stream(self._dataset("__arrow_c_stream__"), requested_schema)

    def _dataset(self, what: str) -> xr.Dataset:
        if not isinstance(self._obj, xr.Dataset):
            raise TypeError(f"ds.zstrings.{what} works on a Dataset; for a DataTree use it on one group "
                            f"(tree['/path'].to_dataset().zstrings.{what}).")
        return self._obj


class ZStringsArrayAccessor:
    """``da.zstrings``: a DataArray as Arrow (``to_arrow``, the Arrow C stream) and as a pandas
    DataFrame with Arrow-backed text, as ``da.to_dataframe()`` lays it out."""

    def __init__(self, obj: xr.DataArray) -> None:
        self._obj = obj

    def to_arrow(self, *, dim_order: Sequence[Hashable] | None = None) -> pa.Table:
        """The columns ``da.to_dataframe().reset_index()`` has, as a ``pyarrow.Table``; see ``frames.to_arrow``."""
        from .frames import to_arrow

        return to_arrow(self._obj, dim_order=dim_order)

    def to_dataframe(self, *, dim_order: Sequence[Hashable] | None = None) -> pd.DataFrame:
        """``da.to_dataframe()`` with pandas ``str`` (Arrow-backed) text columns; see ``frames.to_dataframe``."""
        from .frames import to_dataframe

        return to_dataframe(self._obj, dim_order=dim_order)

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        """The Arrow C stream of ``to_arrow()`` (an unnamed DataArray's column is ``"values"``)."""
        from .frames import arrow_stream

        return arrow_stream(self._obj, requested_schema)


def _deprecated(old: str, new: str) -> None:
    """Warn that ``ds.zstrings.<old>`` is now ``ds.zstrings.<new>``, at the caller's line."""
    import warnings

    from .errors import user_stacklevel

    warnings.warn(f"ds.zstrings.{old} is deprecated: use ds.zstrings.{new} (same arguments, same result).",
                  FutureWarning, stacklevel=user_stacklevel())


def _refuse_format(store: Any, fmt: int) -> None:
    """Refuse Zarr v2 into an icechunk session's store before xarray runs: icechunk takes Zarr v3
    keys only, and xarray's ``mode="w"`` would first have deleted what the session held."""
    from .errors import UnsupportedError
    from .io.store import zarr_v3_only

    if fmt == 2 and zarr_v3_only(store):
        raise UnsupportedError("Cannot write Zarr v2 into an icechunk session's store: icechunk holds Zarr v3 only. "
                               "Pass zarr_format=3 (or leave it out).")


def _refuse_nczarr(store: Any, mode: str, storage_options: Any) -> None:
    """Refuse xarray's writes into an NCZarr store: zarr-python rewrites the root group's
    ``.zgroup``/``.zattrs`` without NCZarr's ``_nczarr_*`` keys, so the store's dimensions would be
    lost for netcdf-c and engine="zstrings" (this package's NCZarr writer keeps them)."""
    from .errors import UnsupportedError
    from .io.store import open_store
    from .read.tree import open_tree

    so = dict(storage_options) if storage_options else None
    zs = open_store(store, mode="r", storage_options=so)
    if open_tree(zs).root.is_nczarr:
        raise UnsupportedError(
            f"Cannot write into the NCZarr store {zs.display} through xarray's to_zarr (mode={mode!r}): zarr-python "
            "rewrites its root group's metadata without NCZarr's _nczarr_* keys, so netcdf-c and engine='zstrings' "
            "would lose its dimensions. Use ds.zstrings.to_nczarr(target, mode='a') (with append_dim=... to "
            "append), which keeps the store NCZarr. Nothing was written.")


def _checked_format(store: Any, zarr_format: int | None, kwargs: dict[str, Any]) -> int | None:
    """Refuse a target xarray's ``to_zarr`` may not touch (``write.session.target_refusal``: looked
    at, not opened for writing: xarray writes it); the Zarr format to write (None: the default)."""
    from .errors import StoreNotFoundError, TargetExistsError
    from .io.atomic import refused
    from .write.session import target_refusal

    append_dim = kwargs.get("append_dim")
    mode = kwargs.get("mode") or ("a" if append_dim is not None else "w-")
    root = target_refusal(store, storage_options=kwargs.get("storage_options"))
    if root is None:  # (a target not looked into: xarray's own rules)
        return zarr_format
    if root.refusal is not None:
        raise refused(root.display, root.refusal, mode)
    if mode not in ("a", "a-", "r+") and append_dim is None:
        return zarr_format
    have = ({3} if "zarr.json" in root.roots else set()) | ({2} if root.roots - {"zarr.json"} else set())
    if append_dim is not None and not have:
        raise StoreNotFoundError(
            f"Cannot append to {root.display} along {append_dim!r}: it holds no Zarr store (xarray would add "
            "a store's metadata there, then fail). Write it first without append_dim.")
    if zarr_format is not None and have and zarr_format not in have:
        (was,) = have
        raise TargetExistsError(
            f"Cannot write into {root.display} with zarr_format={zarr_format}: it is a Zarr v{was} store, and "
            f"xarray would add Zarr v{zarr_format} metadata beside its own. Pass zarr_format={was} (or leave it "
            "out), or mode='w' to replace the store.")
    if 2 in have:
        _refuse_nczarr(store, mode, kwargs.get("storage_options"))
    return zarr_format if zarr_format is not None or len(have) != 1 else have.pop()


def _register() -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # re-registering on reload is harmless
        xr.register_dataset_accessor("zstrings")(ZStringsAccessor)
        xr.register_datatree_accessor("zstrings")(ZStringsAccessor)
        xr.register_dataarray_accessor("zstrings")(ZStringsArrayAccessor)


_register()
