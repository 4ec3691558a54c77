"""xr_zstrings: string data in NCZarr and Zarr stores that just works in xarray.

Open with ``xr.open_dataset(path, engine="zstrings")``. Importing this package stays light:
the pure core (``metadata``, ``strings``, ``vlen``) imports neither xarray nor zarr.
"""

from __future__ import annotations

from .errors import (
    ChunkError,
    CodecDroppedWarning,
    MissingStringsWarning,
    ConcurrentWriteError,
    DimensionError,
    IncompleteStoreError,
    MetadataError,
    NetcdfCompatibilityWarning,
    StoreNotFoundError,
    StoreReplacedError,
    StringDecodeError,
    StringDecodeWarning,
    StringOverflowError,
    StringTruncationWarning,
    TargetExistsError,
    UnknownCodecError,
    UnsupportedError,
    ZStringsError,
)

__version__ = "0.1.0"

# the writer imports xarray: load it on first use so the pure core stays light
_WRITER_NAMES = ("to_nczarr", "convert", "prepare_for_zarr", "for_zarr")


def __getattr__(name: str) -> object:
    if name == "show_versions":
        from .versions import show_versions

        return show_versions
    if name == "convert":
        from .conversion import convert

        return convert
    if name == "to_zarr_v3":
        from .writer_v3 import to_zarr_v3

        return to_zarr_v3
    if name in _WRITER_NAMES:
        from . import writer

        return getattr(writer, name)
    raise AttributeError(f"module 'xr_zstrings' has no attribute {name!r}")

__all__ = [
    "ChunkError",
    "CodecDroppedWarning",
    "MissingStringsWarning",
    "ConcurrentWriteError",
    "DimensionError",
    "IncompleteStoreError",
    "MetadataError",
    "NetcdfCompatibilityWarning",
    "StoreNotFoundError",
    "StoreReplacedError",
    "StringDecodeError",
    "StringDecodeWarning",
    "StringOverflowError",
    "StringTruncationWarning",
    "UnknownCodecError",
    "UnsupportedError",
    "ZStringsError",
    "__version__",
    "convert",
    "for_zarr",
    "prepare_for_zarr",
    "show_versions",
    "to_nczarr",
    "to_zarr_v3",
]
