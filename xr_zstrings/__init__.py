"""xr_zstrings: string data in NCZarr and Zarr stores that just works in xarray.

Open with ``xr.open_dataset(path, engine="zstrings")``. Importing this package stays light:
the pure core (``metadata``, ``strings``, ``vlen``) imports neither xarray nor zarr.
"""

from __future__ import annotations

from .errors import (
    ChunkError,
    DimensionError,
    MetadataError,
    StoreNotFoundError,
    StringDecodeError,
    StringOverflowError,
    StringTruncationWarning,
    UnsupportedError,
    ZStringsError,
)

__version__ = "0.1.0"

__all__ = [
    "ChunkError",
    "DimensionError",
    "MetadataError",
    "StoreNotFoundError",
    "StringDecodeError",
    "StringOverflowError",
    "StringTruncationWarning",
    "UnsupportedError",
    "ZStringsError",
    "__version__",
]
