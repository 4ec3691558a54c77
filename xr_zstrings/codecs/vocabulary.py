"""One table of the codecs we translate, one row each, in every vocabulary that names them.

Per codec: its numcodecs id (a Zarr v2 ``compressor``/filter, NCZarr's ``.zarray``), its Zarr v3
name in zarr-python (``zstd`` and ``numcodecs.zlib`` alike), its name as netCDF4's
``compression``, and what netcdf-c decodes of it in NCZarr. The encodings (:mod:`.encoding`:
v2 <-> v3 configs, netCDF4's keys, the codecs a netcdf-c target may hold), ``to_nczarr``'s plan,
``convert`` and ``zstrings convert`` all ask this table; a codec with no row converts through
zarr-python's ``numcodecs.<id>`` wrapper and netcdf-c does not read it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numcodecs
import numpy as np

__all__ = [
    "CODECS",
    "NETCDF_C_CODECS",
    "NETCDF_C_FILTERS",
    "Codec",
    "netcdf4_compression",
    "quiet",
    "v2_equivalent",
    "v2_id_of_netcdf4",
    "v3_equivalent",
    "written_level",
]


def quiet(factory: Any, *args: Any, **kwargs: Any) -> Any:
    """``factory(*args, **kwargs)`` without warnings: zarr-python warns that numcodecs.* codecs are
    not in the v3 spec each time one is built; that belongs to writing (it repeats it then), not to
    opening a dataset."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return factory(*args, **kwargs)


def _zstd_v3(cfg: Mapping[str, Any], dtype: np.dtype) -> Any:
    from zarr.codecs import ZstdCodec

    return ZstdCodec(level=int(cfg.get("level", 0)), checksum=bool(cfg.get("checksum", False)))


def _zstd_v2(cfg: Mapping[str, Any]) -> Any:
    return numcodecs.Zstd(level=int(cfg.get("level", 0)), checksum=bool(cfg.get("checksum", False)))


def _gzip_v3(cfg: Mapping[str, Any], dtype: np.dtype) -> Any:
    from zarr.codecs import GzipCodec

    return GzipCodec(level=int(cfg.get("level", 5)))


def _gzip_v2(cfg: Mapping[str, Any]) -> Any:
    return numcodecs.GZip(level=int(cfg.get("level", 5)))


_BLOSC_SHUFFLES: dict[int, Literal["noshuffle", "shuffle", "bitshuffle"]] = {
    0: "noshuffle", 1: "shuffle", 2: "bitshuffle"}
_BLOSC_SHUFFLE_IDS: dict[str, int] = {name: i for i, name in _BLOSC_SHUFFLES.items()}


def _blosc_v3(cfg: Mapping[str, Any], dtype: np.dtype) -> Any:
    """zarr-python's blosc codec; None for numcodecs' AUTOSHUFFLE (-1), which goes through
    ``numcodecs.blosc``."""
    from zarr.codecs import BloscCodec

    shuffle = _BLOSC_SHUFFLES.get(int(cfg.get("shuffle", 1)))
    if shuffle is None:
        return None
    return BloscCodec(cname=cfg.get("cname", "lz4"), clevel=int(cfg.get("clevel", 5)), shuffle=shuffle,
                      typesize=max(1, dtype.itemsize), blocksize=int(cfg.get("blocksize", 0)))


def _blosc_v2(cfg: Mapping[str, Any]) -> Any:
    shuffle = _BLOSC_SHUFFLE_IDS.get(str(cfg.get("shuffle", "noshuffle")), 0)
    return numcodecs.Blosc(cname=cfg.get("cname", "zstd"), clevel=int(cfg.get("clevel", 5)), shuffle=shuffle,
                           blocksize=int(cfg.get("blocksize", 0)))


@dataclass(frozen=True)
class Codec:
    """One codec in each vocabulary."""

    #: numcodecs' id (Zarr v2, NCZarr)
    v2_id: str
    #: its Zarr v3 name in zarr-python
    v3_name: str
    #: netCDF4's ``compression`` name (``createVariable``), None when netCDF4 has none
    netcdf4: str | None = None
    #: what netcdf-c (4.10, as the netCDF4 wheel ships it) decodes in NCZarr: as the compressor, as
    #: a filter, or not at all (checked one by one against the library: gzip and lz4 fail with
    #: "undefined filter"; blosc reads, every cname and shuffle, though netcdf-c cannot write it)
    netcdf_c: Literal["compressor", "filter"] | None = None
    #: (v2 configuration without ``id``, the array's dtype) -> zarr-python's core codec, or None to
    #: use its ``numcodecs.<id>`` wrapper; None: always the wrapper
    to_v3: Callable[[Mapping[str, Any], np.dtype], Any] | None = None
    #: v3 ``configuration`` -> the numcodecs codec; None: numcodecs takes the configuration as it is
    to_v2: Callable[[Mapping[str, Any]], Any] | None = None
    #: the level an NCZarr/Zarr v2 writer gives a compressor that has none: netcdf-c 4.10 crashes
    #: reading a zstd or bz2 compressor without one (numcodecs' default is written; zlib: 4)
    level: int | None = None


CODECS: tuple[Codec, ...] = (
    Codec("zlib", "numcodecs.zlib", netcdf4="zlib", netcdf_c="compressor", level=4),
    Codec("zstd", "zstd", netcdf4="zstd", netcdf_c="compressor", to_v3=_zstd_v3, to_v2=_zstd_v2, level=0),
    Codec("bz2", "numcodecs.bz2", netcdf4="bzip2", netcdf_c="compressor", level=1),
    Codec("blosc", "blosc", netcdf_c="compressor", to_v3=_blosc_v3, to_v2=_blosc_v2),
    Codec("gzip", "gzip", to_v3=_gzip_v3, to_v2=_gzip_v2),
    Codec("lz4", "numcodecs.lz4"),
    Codec("shuffle", "numcodecs.shuffle", netcdf_c="filter"),
)
_BY_V2 = {c.v2_id: c for c in CODECS}
_BY_V3 = {c.v3_name: c for c in CODECS}

#: the compressor ids netcdf-c decodes in NCZarr
NETCDF_C_CODECS: frozenset[str] = frozenset(c.v2_id for c in CODECS if c.netcdf_c == "compressor")
#: the filter ids netcdf-c decodes in NCZarr
NETCDF_C_FILTERS: frozenset[str] = frozenset(c.v2_id for c in CODECS if c.netcdf_c == "filter")


def netcdf4_compression(v2_id: Any) -> str | None:
    """netCDF4's ``compression`` name of a numcodecs id (``bz2`` -> ``bzip2``), or None."""
    row = _BY_V2.get(str(v2_id))
    return None if row is None else row.netcdf4


def written_level(v2_id: Any) -> int | None:
    """The level an NCZarr/Zarr v2 writer gives a compressor of this id that has none, or None."""
    row = _BY_V2.get(str(v2_id))
    return None if row is None else row.level


def v2_id_of_netcdf4(name: str) -> str:
    """The numcodecs id of netCDF4's ``compression`` name (``bzip2`` -> ``bz2``); others unchanged."""
    return next((c.v2_id for c in CODECS if c.netcdf4 == name), name)


def _numcodecs_class(codec_id: str) -> Any:
    """zarr-python's v3 wrapper class for a numcodecs codec (``numcodecs.<id>``), or None."""
    from zarr.registry import get_codec_class

    try:
        return get_codec_class(f"numcodecs.{codec_id}")
    except Exception:  # noqa: BLE001 - KeyError (3.1), UnknownCodecError (3.4, not a KeyError)
        return None


def v3_equivalent(codec: Any, *, dtype: np.dtype) -> tuple[str, Any] | str:
    """One numcodecs object as ("filter" | "compressor", zarr-python v3 codec object), or why
    there is none."""
    from zarr.abc.codec import ArrayArrayCodec, BytesBytesCodec

    cfg = dict(codec.get_config())
    cid = cfg.pop("id")
    row = _BY_V2.get(cid)
    if row is not None and row.to_v3 is not None:
        core = row.to_v3(cfg, dtype)
        if core is not None:
            return "compressor", core
    cls = _numcodecs_class(cid)
    if cls is None:
        return f"codec {dict(codec.get_config())!r} has no Zarr v3 equivalent in zarr-python (no 'numcodecs.{cid}' codec)"
    v3 = quiet(cls, **cfg)
    if isinstance(v3, BytesBytesCodec):
        return "compressor", v3
    if isinstance(v3, ArrayArrayCodec):
        return "filter", v3
    return f"codec {cid!r} is an array->bytes codec in Zarr v3"


def v2_equivalent(v3json: Mapping[str, Any]) -> Any:
    """One v3 codec's JSON as a numcodecs object, or the JSON itself when numcodecs has no
    equivalent (the caller says so)."""
    name = str(v3json.get("name"))
    cfg = dict(v3json.get("configuration") or {})
    row = _BY_V3.get(name)
    if row is not None and row.to_v2 is not None:
        return row.to_v2(cfg)
    if name.startswith("numcodecs."):
        return numcodecs.get_codec({"id": name.split(".", 1)[1], **cfg})
    return v3json
