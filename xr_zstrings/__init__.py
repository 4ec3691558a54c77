"""xr_zstrings: string data in NCZarr and Zarr stores that just works in xarray.

Open with ``xr.open_dataset(path, engine="zstrings")``. Every public name is importable from here.
Importing this package stays light: the pure core (``formats``, ``text``) imports neither xarray nor
zarr, and the writers and readers below load on first use.

The layout (one concept a folder, imports flow down): ``errors``; ``formats/`` (pure metadata);
``text/`` (pure string layouts and the C kernels); ``codecs/`` (chunk pipelines); ``io/`` (stores,
URLs, commits); ``read/`` (xarray-free reading); ``write/`` (the writers); ``backend`` (the xarray
entry point) and ``accessor`` (``ds.zstrings``: registered by the backend and by the first public name
used here once xarray is loaded; the writers never import it) with ``frames`` (``ds.zstrings.to_arrow()``,
``to_dataframe()``, the Arrow C stream); ``cli``.
"""

from __future__ import annotations

from . import errors
from .errors import *  # every error and warning class; errors.__all__ lists them

__version__ = "0.1.0"

# the public functions whose modules import xarray/zarr: loaded on first use so the pure core stays
# light (name -> module that defines it)
_LAZY = {
    "to_nczarr": "xr_zstrings.write.nczarr",
    "to_zarr_v2": "xr_zstrings.write.nczarr",
    "with_netcdf_c_strings": "xr_zstrings.write.nczarr",
    "to_zarr_v3": "xr_zstrings.write.zarr3",
    "convert": "xr_zstrings.write.convert",
    "repair": "xr_zstrings.write.repair",
    "migrate": "xr_zstrings.write.migrate",
    "with_zarr_encoding": "xr_zstrings.write.encoding",
    "read_arrow": "xr_zstrings.read.arrow",
    "arrow_to_stringdtype": "xr_zstrings.text.arrow",
    "numpy_strings": "xr_zstrings.xarray_arrow",
    "show_versions": "xr_zstrings.versions",
    "virtualize": "xr_zstrings.virtual",
}
#: the old names, still importable (calling one warns FutureWarning naming the new one); not in __all__
_DEPRECATED = {
    "prepare_for_zarr": "xr_zstrings.write.nczarr",  # -> with_netcdf_c_strings
    "for_zarr": "xr_zstrings.write.encoding",  # -> with_zarr_encoding
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name) or _DEPRECATED.get(name)
    if module is None:
        raise AttributeError(f"module 'xr_zstrings' has no attribute {name!r}")
    import importlib
    import sys

    value = getattr(importlib.import_module(module), name)
    if "xarray" in sys.modules:  # (a writer or reader loaded xarray: ``ds.zstrings`` comes with it)
        importlib.import_module("xr_zstrings.accessor")
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


#: every error and warning class, the public functions, the version
__all__ = [*errors.__all__, *_LAZY, "__version__"]  # noqa: PLE0604 - names (strings) from both lists
