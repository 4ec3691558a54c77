"""``ds.zstrings.to_nczarr(...)`` / ``tree.zstrings.to_nczarr(...)``: the writer as an accessor.

Registered when ``xr_zstrings.write.nczarr`` or the xarray backend is imported (``import xr_zstrings.write.nczarr``;
opening anything with ``engine="zstrings"`` also does).
"""

from __future__ import annotations

import os
from typing import Any

import xarray as xr

__all__ = ["ZStringsAccessor"]


class ZStringsAccessor:
    """String-aware NCZarr output for a Dataset or DataTree (same arguments as ``to_nczarr``)."""

    def __init__(self, obj: xr.Dataset | xr.DataTree) -> None:
        self._obj = obj

    def to_nczarr(self, target: str | os.PathLike[str] | Any, **kwargs: Any) -> None:
        """Write this object as NCZarr 2 (or pure Zarr v2) that netcdf-c reads; see ``writer.to_nczarr``."""
        from .write.nczarr import to_nczarr

        to_nczarr(self._obj, target, **kwargs)

    def prepare_for_zarr(self, **kwargs: Any) -> xr.Dataset:
        """Strings as ``|Sn`` bytes for ``.to_zarr(...)``; see ``writer.prepare_for_zarr``."""
        from .write.nczarr import prepare_for_zarr

        if not isinstance(self._obj, xr.Dataset):
            raise TypeError("prepare_for_zarr works on a Dataset; use tree.map_over_datasets for a DataTree.")
        return prepare_for_zarr(self._obj, **kwargs)


    def for_zarr(self, zarr_format: int) -> xr.Dataset | xr.DataTree:
        """A copy whose codecs are in ``zarr_format``'s vocabulary; see ``codecs.encoding.for_zarr``."""
        from .codecs.encoding import for_zarr

        return for_zarr(self._obj, zarr_format)

    def to_zarr(self, store: Any = None, *, zarr_format: int | None = None, **kwargs: Any) -> Any:
        """``.to_zarr(store, zarr_format=..., **kwargs)`` with the store's exact codec chain for that
        format (netcdf-c's shuffle, v3 shards), which the format-neutral encoding engine="zstrings"
        gives cannot hold for both formats; see ``codecs.encoding.for_zarr``."""
        from .codecs.encoding import default_zarr_format, for_zarr

        fmt = default_zarr_format() if zarr_format is None else zarr_format
        return for_zarr(self._obj, fmt).to_zarr(store, zarr_format=fmt, **kwargs)


def _register() -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # re-registering on reload is harmless
        xr.register_dataset_accessor("zstrings")(ZStringsAccessor)
        xr.register_datatree_accessor("zstrings")(ZStringsAccessor)


_register()
