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
        gives cannot hold for both formats; see ``codecs.encoding.for_zarr``.

        The target is checked first, by the rule of this package's writers (``TargetExistsError``,
        nothing touched): a folder, S3 prefix or Store that is not empty and whose root is not a
        Zarr store is refused in every mode (xarray's ``mode="w"`` would delete it). Writing into a
        store (``mode="a"``, ``"r+"``, ``append_dim``) takes its Zarr format unless ``zarr_format``
        says another, which is refused, as is ``append_dim`` where no store is: xarray would first
        add metadata there, then fail."""
        from .codecs.encoding import default_zarr_format, for_zarr

        fmt = _checked_format(store, zarr_format, kwargs)
        fmt = default_zarr_format() if fmt is None else fmt
        _refuse_format(store, fmt)
        return for_zarr(self._obj, fmt).to_zarr(store, zarr_format=fmt, **kwargs)


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
    """Refuse a target xarray's ``to_zarr`` may not touch (``io.atomic.target_root``); the Zarr
    format to write (None: the default)."""
    from .errors import StoreNotFoundError, TargetExistsError
    from .io.atomic import refused, target_root

    append_dim = kwargs.get("append_dim")
    mode = kwargs.get("mode") or ("a" if append_dim is not None else "w-")
    root = target_root(store, storage_options=kwargs.get("storage_options"))
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


_register()
