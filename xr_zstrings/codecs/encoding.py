"""The store's codecs as encodings xarray's own writers take (``to_zarr`` v2/v3, ``to_netcdf``).

zarr-python (3.1 to 3.4) takes a variable's ``compressors``/``filters`` in two vocabularies that
exclude each other: Zarr v2 arrays want numcodecs objects (one compressor; shuffle is a filter),
Zarr v3 arrays want v3 codec objects (shuffle and zlib are ``numcodecs.shuffle`` /
``numcodecs.zlib`` bytes->bytes codecs; ``filters`` are array->array codecs only). No object is
accepted by both (zarr-python has no unified v2/v3 codec API; zarr-python#3276 sketches one), so
one encoding cannot serve ``to_zarr(zarr_format=2)`` and ``to_zarr(zarr_format=3)``.

``engine="zstrings"`` therefore puts the codecs in the vocabulary of the format ``ds.to_zarr()``
writes by default (zarr-python's ``default_zarr_format``: 3 unless configured), and
:func:`for_zarr` (``ds.zstrings.for_zarr(2)``, also used by ``prepare_for_zarr``) converts them for
the other format. Conversions keep the meaning: the same compressor with the same settings (zlib
stays zlib, never gzip or zstd), netcdf-c's shuffle with the real element size; what has no
equivalent in the target format is dropped with a ``CodecDroppedWarning`` naming it.

Uncompressed variables get ``compressors=None`` (and numeric ones ``filters=None``), which both
formats read as "no codec". Text variables never get ``filters``: xarray and zarr-python pick the
object codec (``vlen-utf8``) themselves.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numcodecs
import numpy as np

from ..errors import CodecDroppedWarning
from .zarrs import ZARRS_OPTIONAL_NAMES, ZARRS_VLEN_NAMES

__all__ = ["CodecDroppedWarning", "default_zarr_format", "for_zarr", "store_codecs_encoding", "v2_codec_as_v3",
           "v2_configs"]

_TEXT_KINDS = ("string", "char", "unicode", "vlen", "vlen-bytes")
#: numcodecs' object codecs: the serializer of a |O layout, never a filter to carry over
OBJECT_CODECS = ("vlen-utf8", "vlen-bytes", "vlen-array", "json2", "pickle", "msgpack2")
_OBJECT_CODECS = OBJECT_CODECS


def default_zarr_format() -> int:
    """The Zarr format ``ds.to_zarr()`` writes without ``zarr_format`` (zarr-python's config)."""
    import zarr

    return int(zarr.config.get("default_zarr_format", 3))


def _v3_numcodecs_class(codec_id: str) -> Any:
    """zarr-python's v3 wrapper class for a numcodecs codec (``numcodecs.<id>``), or None."""
    from zarr.registry import get_codec_class

    try:
        return get_codec_class(f"numcodecs.{codec_id}")
    except Exception:  # noqa: BLE001 - KeyError (3.1), UnknownCodecError (3.4, not a KeyError)
        return None


def _quiet(factory: Any, *args: Any, **kwargs: Any) -> Any:
    # zarr-python warns that numcodecs.* codecs are not in the v3 spec each time one is built; the
    # warning belongs to writing (zarr-python repeats it then), not to opening a dataset
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return factory(*args, **kwargs)


def _shuffle_size(config: Mapping[str, Any], dtype: np.dtype) -> int:
    es = int(config.get("elementsize", 0) or 0)
    return es if es > 0 else max(1, dtype.itemsize)  # netcdf-c writes 0 and shuffles by the element size


def v2_objects(
    compressor: Mapping[str, Any] | None, filters: Sequence[Mapping[str, Any]], *, dtype: np.dtype, text: bool
) -> tuple[Any, list[Any]]:
    """numcodecs objects for a v2 store's ``compressor``/``filters`` (netcdf-c's shuffle at its real size).

    For text variables the filters are left out: xarray writes strings as vlen-utf8, where
    netcdf-c's shuffle of the fixed-width bytes means nothing (and a vlen filter is zarr's own).
    """
    comp = None if compressor is None else numcodecs.get_codec(dict(compressor))
    out: list[Any] = []
    if not text:
        for f in filters:
            cfg = dict(f)
            if cfg.get("id") == "shuffle":
                out.append(numcodecs.Shuffle(elementsize=_shuffle_size(cfg, dtype)))
            elif cfg.get("id") not in _OBJECT_CODECS:
                out.append(numcodecs.get_codec(cfg))
    return comp, out


def _v3_equivalent(codec: Any, *, dtype: np.dtype) -> tuple[str, Any] | str:
    """One numcodecs object as ("filter" | "compressor", v3 codec object), or why there is none."""
    from zarr.abc.codec import ArrayArrayCodec, BytesBytesCodec
    from zarr.codecs import BloscCodec, GzipCodec, ZstdCodec

    cfg = dict(codec.get_config())
    cid = cfg.pop("id")
    if cid == "zstd":
        return "compressor", ZstdCodec(level=int(cfg.get("level", 0)), checksum=bool(cfg.get("checksum", False)))
    if cid == "gzip":
        return "compressor", GzipCodec(level=int(cfg.get("level", 5)))
    if cid == "blosc":
        shuffle = {0: "noshuffle", 1: "shuffle", 2: "bitshuffle"}.get(int(cfg.get("shuffle", 1)))
        if shuffle is not None:  # -1 (numcodecs' AUTOSHUFFLE) goes through numcodecs.blosc below
            return "compressor", BloscCodec(cname=cfg.get("cname", "lz4"), clevel=int(cfg.get("clevel", 5)),
                                            shuffle=shuffle, typesize=max(1, dtype.itemsize),
                                            blocksize=int(cfg.get("blocksize", 0)))
    cls = _v3_numcodecs_class(cid)
    if cls is None:
        return f"codec {dict(codec.get_config())!r} has no Zarr v3 equivalent in zarr-python (no 'numcodecs.{cid}' codec)"
    v3 = _quiet(cls, **cfg)
    if isinstance(v3, BytesBytesCodec):
        return "compressor", v3
    if isinstance(v3, ArrayArrayCodec):
        return "filter", v3
    return f"codec {cid!r} is an array->bytes codec in Zarr v3"


def _v2_to_v3(codec: Any, *, dtype: np.dtype, where: str) -> tuple[str, Any] | None:
    """One numcodecs object as ("filter" | "compressor", v3 codec), or None (dropped, warned)."""
    if codec.get_config().get("id") in _OBJECT_CODECS:
        return None  # the serializer zarr-python picks for text
    got = _v3_equivalent(codec, dtype=dtype)
    if isinstance(got, str):
        warnings.warn(f"{where}: {got}; it is left out of encoding['compressors'/'filters'] for v3.",
                      CodecDroppedWarning, stacklevel=4)
        return None
    return got


def v2_codec_as_v3(config: Mapping[str, Any], *, dtype: np.dtype, string_kind: str | None) -> tuple[str, dict]:
    """One v2 codec (a ``.zarray`` compressor or filter) as the Zarr v3 codec that decodes its bytes
    unchanged: ``("compressor" | "filter", zarr.json entry)`` (``filter``: an array->array codec).

    netcdf-c's shuffle (``elementsize: 0``) becomes ``numcodecs.shuffle`` with the element size it
    really shuffled by (``v2.shuffle_elementsize``). Raises ``UnsupportedError`` with the reason when
    zarr-python has no such codec.
    """
    from ..errors import UnsupportedError
    from .v2 import shuffle_elementsize

    cfg = dict(config)
    if cfg.get("id") == "shuffle":
        es = shuffle_elementsize(cfg, dtype, string_kind)
        return "compressor", {"name": "numcodecs.shuffle", "configuration": {"elementsize": es}}
    try:
        codec = numcodecs.get_codec(cfg)
    except Exception as e:  # noqa: BLE001 - numcodecs raises anything for a bad config
        raise UnsupportedError(f"codec {cfg!r}: numcodecs cannot build it ({e})") from None
    got = _v3_equivalent(codec, dtype=dtype)
    if isinstance(got, str):
        raise UnsupportedError(got)
    role, obj = got
    return role, obj.to_dict()


def _v3_to_v2(codec: Any, *, where: str) -> Any:
    """One v3 codec object (or its JSON dict) as a numcodecs object, or None (dropped, warned)."""
    d = codec if isinstance(codec, Mapping) else codec.to_dict()
    name = str(d.get("name"))
    cfg = dict(d.get("configuration") or {})
    if name == "zstd":
        return numcodecs.Zstd(level=int(cfg.get("level", 0)), checksum=bool(cfg.get("checksum", False)))
    if name == "gzip":
        return numcodecs.GZip(level=int(cfg.get("level", 5)))
    if name == "blosc":
        shuffle = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}.get(str(cfg.get("shuffle", "noshuffle")), 0)
        return numcodecs.Blosc(cname=cfg.get("cname", "zstd"), clevel=int(cfg.get("clevel", 5)), shuffle=shuffle,
                               blocksize=int(cfg.get("blocksize", 0)))
    if name.startswith("numcodecs."):
        return numcodecs.get_codec({"id": name.split(".", 1)[1], **cfg})
    warnings.warn(
        f"{where}: Zarr v3 codec {d!r} has no Zarr v2 (numcodecs) equivalent; it is left out of "
        "encoding['compressors'/'filters'] for v2.",
        CodecDroppedWarning, stacklevel=4,
    )
    return None


def _is_v3(codec: Any) -> bool:
    return (isinstance(codec, Mapping) and "name" in codec) or hasattr(codec, "to_dict") and not hasattr(
        codec, "get_config")


def v2_configs(enc: Mapping[str, Any], *, where: str) -> tuple[Any, list[Any]]:
    """``(compressor, filters)`` of an encoding in Zarr v2 terms (numcodecs objects or v2 dicts),
    whichever vocabulary its ``compressors``/``filters`` hold; for our own v2/NCZarr writers."""
    comps = enc.get("compressors")
    comps = [] if comps is None else list(comps) if isinstance(comps, list | tuple) else [comps]
    filters = list(enc.get("filters") or [])
    if any(_is_v3(c) for c in (*comps, *filters)):
        conv = [c for c in (_v3_to_v2(x, where=where) for x in (*filters, *comps)) if c is not None]
        # v3 puts shuffle (and any other bytes->bytes codec) before the compressor; v2 filters come first
        if not conv:
            return None, []
        return conv[-1], conv[:-1]
    if len(comps) > 1:
        return comps, filters  # the caller refuses more than one v2 compressor with its own message
    return (comps[0] if comps else None), filters


def _to_format(enc: dict[str, Any], zarr_format: int, *, dtype: np.dtype, text: bool, where: str) -> dict[str, Any]:
    """``enc`` with its ``compressors``/``filters`` (and ``shards``) in ``zarr_format``'s vocabulary."""
    if "compressors" not in enc and "filters" not in enc:
        return enc
    out = dict(enc)
    if zarr_format == 2:
        comp, filters = v2_configs(enc, where=where)
        if isinstance(comp, list):
            raise ValueError(f"{where}: Zarr v2 holds one compressor; encoding['compressors'] has {len(comp)}.")
        out["compressors"] = None if comp is None else (
            numcodecs.get_codec(dict(comp)) if isinstance(comp, Mapping) else comp,)
        objs = [numcodecs.get_codec(dict(f)) if isinstance(f, Mapping) else f for f in filters]
        if text:
            out.pop("filters", None)
        else:
            out["filters"] = tuple(objs) or None
        if out.pop("shards", None) is not None:
            warnings.warn(f"{where}: Zarr v2 has no shards; the shards are left out (chunks stay as they are).",
                          CodecDroppedWarning, stacklevel=3)
        return out
    comps = enc.get("compressors")
    comps = [] if comps is None else list(comps) if isinstance(comps, list | tuple) else [comps]
    filters = list(enc.get("filters") or [])
    if any(_is_v3(c) for c in (*comps, *filters)):
        return out  # already v3
    v3_filters: list[Any] = []
    v3_comps: list[Any] = []
    for c in (*filters, *comps):
        obj = numcodecs.get_codec(dict(c)) if isinstance(c, Mapping) else c
        got = _v2_to_v3(obj, dtype=dtype, where=where)
        if got is not None:
            (v3_filters if got[0] == "filter" else v3_comps).append(got[1])
    out["compressors"] = tuple(v3_comps) or None
    if text:
        out.pop("filters", None)
    else:
        out["filters"] = tuple(v3_filters) or None
    return out


def store_codecs_encoding(
    compressor: Mapping[str, Any] | None, filters: Sequence[Mapping[str, Any]], *, dtype: np.dtype,
    string_kind: str | None, where: str, zarr_format: int | None = None,
) -> dict[str, Any]:
    """The encoding keys for a v2/NCZarr array's codecs: ``compressors``/``filters`` as objects in
    ``zarr_format``'s vocabulary (default: :func:`default_zarr_format`), plus netCDF4's
    ``zlib``/``complevel``/``shuffle`` for numeric zlib data so ``to_netcdf`` compresses the same."""
    text = string_kind in _TEXT_KINDS
    comp, objs = v2_objects(compressor, filters, dtype=dtype, text=text)
    enc: dict[str, Any] = {"compressors": None if comp is None else (comp,)}
    if not text:
        enc["filters"] = tuple(objs) or None
    cid = None if compressor is None else compressor.get("id")
    if not text and cid == "zlib" and all(dict(f).get("id") == "shuffle" for f in filters):
        # netCDF4/h5netcdf's own keys (xarray's zarr writer ignores them); other codecs have none there
        enc.update(zlib=True, complevel=int(compressor.get("level", 4)), shuffle=bool(filters))
    fmt = default_zarr_format() if zarr_format is None else zarr_format
    return _to_format(enc, fmt, dtype=dtype, text=text, where=where) if fmt == 3 else enc


def v3_codecs_encoding(codecs: Sequence[Mapping[str, Any]], *, shards: tuple[int, ...] | None, text: bool,
                       where: str, zarr_format: int | None = None) -> dict[str, Any]:
    """The encoding keys for a v3 array's codec chain: its bytes->bytes codecs as ``compressors``
    and array->array codecs as ``filters`` (objects zarr-python builds from the JSON), ``shards``."""
    from zarr.registry import get_codec_class

    chain = [dict(c) for c in codecs]
    enc: dict[str, Any] = {}
    if chain and chain[0].get("name") == "sharding_indexed" and shards is not None:
        enc["shards"] = tuple(shards)
        chain = [dict(c) for c in chain[0].get("configuration", {}).get("codecs", [])]
    names = [c.get("name") for c in chain]
    serializer_at = next((i for i, c in enumerate(chain) if _is_array_bytes(c)), None)
    before = chain[:serializer_at] if serializer_at is not None else []
    after = chain[serializer_at + 1:] if serializer_at is not None else chain
    comps: list[Any] = []
    for c in after:
        try:
            comps.append(_quiet(get_codec_class(str(c["name"])).from_dict, c))
        except Exception:  # noqa: BLE001 - an unknown codec: reading worked through our own decoder
            warnings.warn(f"{where}: Zarr v3 codec {c!r} is unknown to zarr-python; it is left out of "
                          "encoding['compressors'].", CodecDroppedWarning, stacklevel=3)
    flt: list[Any] = []
    for c in before:
        try:
            flt.append(_quiet(get_codec_class(str(c["name"])).from_dict, c))
        except Exception:  # noqa: BLE001
            warnings.warn(f"{where}: Zarr v3 codec {c!r} is unknown to zarr-python; it is left out of "
                          "encoding['filters'].", CodecDroppedWarning, stacklevel=3)
    del names
    enc["compressors"] = tuple(comps) or None
    if not text:
        enc["filters"] = tuple(flt) or None
    fmt = default_zarr_format() if zarr_format is None else zarr_format
    if fmt == 2:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CodecDroppedWarning)  # said again when converting for writing
            return _to_format(enc, 2, dtype=np.dtype("u1"), text=text, where=where)
    return enc


_ARRAY_BYTES = ("bytes", "vlen-utf8", "vlen-bytes", "zarrs.vlen", "fixed_length_utf32", "sharding_indexed",
                "vlen_utf8", "vlen_bytes")


def _is_array_bytes(codec: Mapping[str, Any]) -> bool:
    name = str(codec.get("name"))
    cfg = codec.get("configuration") or {}
    # zarrs' optional codec (also named "optional", told apart by its mask_codecs) is the serializer
    return name in _ARRAY_BYTES or name in ZARRS_OPTIONAL_NAMES or name in ZARRS_VLEN_NAMES or (
        name == "optional" and isinstance(cfg, Mapping) and "mask_codecs" in cfg)


def for_zarr(obj: Any, zarr_format: int) -> Any:
    """A copy of a Dataset or DataTree whose variables' codecs are in ``zarr_format``'s vocabulary,
    for ``.to_zarr(..., zarr_format=zarr_format)``; codecs without an equivalent are dropped with
    a ``CodecDroppedWarning``."""
    import xarray as xr

    if zarr_format not in (2, 3):
        raise ValueError(f"zarr_format must be 2 or 3, got {zarr_format!r}.")
    if isinstance(obj, xr.DataTree):
        return obj.map_over_datasets(lambda d: for_zarr(d, zarr_format))
    out = obj.copy()
    for name, var in obj.variables.items():
        text = var.dtype.kind in "OSTU"
        out[name].encoding = _to_format(dict(var.encoding), zarr_format, dtype=var.dtype, text=text,
                                        where=f"variable {name!r}")
    return out
