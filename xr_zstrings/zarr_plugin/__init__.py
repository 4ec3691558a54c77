"""The zarr-python plugin: our string layouts readable by zarr-python, xarray's engine="zarr" and dask.

Installed with the package, through zarr-python's entry points (``pyproject.toml``):

* ``zarr.data_type``: :class:`NCChar` (netcdf-c's NC_CHAR, ``">S1"`` in Zarr v2,
  ``xr_zstrings.nc_char`` in Zarr v3) and :class:`ZarrsOptional` (zarrs' nullable ``optional``);
* ``zarr.codecs``: ``zarrs.vlen``, ``zarrs.vlen_v2`` and ``zarrs.optional`` (each also under zarrs'
  URL name), wrapping the package's own codec steps (``codecs/``), so their bytes are exactly what
  engine="zstrings" reads and ``to_zarr_v3`` writes.

zarr-python loads ``zarr.data_type`` entry points from 3.4.1 on; 3.1.x collects them and never
loads them. :func:`register` does what the entry points do, through zarr-python's public registries
(``zarr.dtype.data_type_registry``, ``zarr.registry.register_codec``), and runs whenever this module
is imported: when zarr-python loads any of our codec entry points, and when xarray loads our backend
(``xr.open_dataset(..., engine="zarr")`` loads every installed backend first). On zarr 3.1.x, before
``zarr.open_array`` / ``zarr.open_group`` / ``dask.array.from_zarr`` on an NCZarr store, call
``xr_zstrings.zarr_plugin.register()`` (or import this module) once per process.
"""

from __future__ import annotations

from .codecs import CODEC_NAMES, ZarrsOptionalCodec, ZarrsVlenCodec, ZarrsVlenV2Codec
from .dtypes import NCChar, ZarrsOptional

__all__ = ["CODEC_NAMES", "DATA_TYPES", "NCChar", "ZarrsOptional", "ZarrsOptionalCodec", "ZarrsVlenCodec",
           "ZarrsVlenV2Codec", "register"]

#: the data types the plugin adds to zarr-python's registry
DATA_TYPES = (NCChar, ZarrsOptional)


def register() -> None:
    """Register the plugin's data types and codecs with zarr-python (idempotent, any zarr >= 3.1.6).

    What zarr-python's entry points do from 3.4.1 on; needed on 3.1.x for the data types (NC_CHAR's
    ``">S1"``, zarrs' ``optional``), which 3.1.x never loads from entry points.
    """
    from zarr.dtype import data_type_registry
    from zarr.registry import register_codec

    for cls in DATA_TYPES:
        data_type_registry.register(cls._zarr_v3_name, cls)
    for name, codec in CODEC_NAMES.items():
        register_codec(name, codec)


register()
