"""The store's codecs as the encodings ``to_zarr`` (v2 and v3) and ``to_netcdf`` take, and back.

zarr-python (3.1 to 3.4) takes a variable's ``compressors``/``filters`` in two vocabularies that
exclude each other: Zarr v2 arrays want numcodecs objects or ``{"id": ...}`` JSON (one compressor;
shuffle is a filter), Zarr v3 arrays want v3 codec objects or ``{"name": ...}`` JSON (shuffle and
zlib are ``numcodecs.shuffle``/``numcodecs.zlib`` bytes->bytes codecs; ``filters`` are array->array
codecs; ``shards`` only in v3). zarr-python has no codec object both take (zarr-python#3276 only
sketches one), and ``to_zarr`` hands ``encoding`` to it unchanged, so ``ds.to_zarr(zarr_format=2)`` and
``zarr_format=3`` need an encoding that means the same in both.

``engine="zstrings"`` therefore gives each variable a **format-neutral** encoding
(``neutral_codecs``): its compressor and array->array filters as :class:`BothFormatsCodec` specs,
one JSON object that reads as the v2 form to numcodecs (``dict(spec)``, as
``numcodecs.get_codec`` copies it) and answers the v3 keys (``spec["name"]``,
``spec["configuration"]``) zarr-python's v3 parser asks for; ``shards`` are left out and ``chunks``
are the shard shape. What one encoding cannot hold for both formats (netcdf-c's shuffle, a v2
filter and a v3 bytes->bytes codec; several compressors; shards) stays in the store's own chain,
recorded under ``zstrings_*`` keys (``zstrings_compressor``/``zstrings_filters`` for v2 and NCZarr,
``codecs``/``zstrings_shards`` for v3), which ``to_zarr``/``to_netcdf`` ignore and :func:`format_encoding`
(``ds.zstrings.to_zarr(zarr_format=N)``, write/encoding.py's ``with_zarr_encoding``, ``to_nczarr``,
``to_zarr_v3``) turns into
the exact chain for one format. Conversions keep the meaning: the same compressor with the same
settings (zlib stays zlib, never gzip or zstd), netcdf-c's shuffle with the real element size; what
has no equivalent in the target format is dropped with a ``CodecDroppedWarning`` naming it.

That both zarr-python parsers take a :class:`BothFormatsCodec` is checked once per process on an
in-memory array of each format (``_both_formats_work``); should a zarr-python release stop taking
it, the codecs are left out of ``compressors``/``filters`` (zarr-python's defaults, with a warning
naming the accessor that keeps them) instead of making either write fail.

Uncompressed variables get ``compressors=None`` (and numeric ones ``filters=None``), which both
formats read as "no codec". Text variables never get ``filters``: ``to_zarr`` and zarr-python pick
the object codec (``vlen-utf8``) themselves.

Each codec's name and settings in every vocabulary come from the table in :mod:`.vocabulary`.
This module takes and returns plain mappings (no Dataset): the writers' per-variable use is
write/encoding.py's.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numcodecs
import numpy as np

from ..errors import CodecDroppedWarning, ZStringsError, user_stacklevel
from .registry import lookup
from .v2 import shuffle_elementsize
from .vocabulary import (
    NETCDF_C_CODECS,
    NETCDF_C_FILTERS,
    netcdf4_compression,
    quiet,
    v2_equivalent,
    v2_id_of_netcdf4,
    v3_equivalent,
)

__all__ = [
    "BothFormatsCodec",
    "CodecDroppedWarning",
    "default_zarr_format",
    "format_encoding",
    "netcdf4_codecs",
    "netcdf4_keys",
    "netcdf_c_readable",
    "netcdf_c_unreadable",
    "neutral_codecs",
    "store_codecs_encoding",
    "v2_codec_as_v3",
    "v2_config",
    "v2_configs",
    "v2_terms",
    "v3_codecs_encoding",
]

_TEXT_KINDS = ("string", "char", "unicode", "vlen", "vlen-bytes")
#: numcodecs' object codecs: the serializer of a |O layout, never a filter to carry over
OBJECT_CODECS = ("vlen-utf8", "vlen-bytes", "vlen-array", "json2", "pickle", "msgpack2")
_OBJECT_CODECS = OBJECT_CODECS
#: bytes->bytes codecs a format-neutral encoding leaves out: shuffle (a v2 filter, a v3 compressor)
#: and checksums (one compressor only in v2: the compressor proper is kept)
_NOT_NEUTRAL = ("shuffle", "crc32", "crc32c", "adler32", "fletcher32", "jenkins_lookup3")


def default_zarr_format() -> int:
    """The Zarr format ``ds.to_zarr()`` writes without ``zarr_format`` (zarr-python's config)."""
    import zarr

    return int(zarr.config.get("default_zarr_format", 3))


class BothFormatsCodec(dict):  # type: ignore[type-arg]  # the v2 codec's JSON object (str -> JSON value)
    """One codec that zarr-python takes for a Zarr v2 and for a Zarr v3 array.

    For v3 it is the codec's JSON (``{"name": "numcodecs.zlib", "configuration": {...}}``, the
    mapping's content), which zarr-python's v3 parser builds the codec from; for v2 it is a
    numcodecs codec (zarr-python's ``Numcodec`` protocol: ``codec_id``, ``get_config``,
    ``encode``/``decode`` delegating to ``numcodecs.get_codec(v2)``), which a v2 array stores and
    runs as it is. ``.v2``/``.v3`` hold the two JSON forms. Written by hand because no library has
    one codec object for both formats (see the module docstring).
    """

    codec_id: str  # set on the per-codec subclass zarr-python's protocol check looks at

    def __new__(cls, v2: Mapping[str, Any], v3: Mapping[str, Any]) -> BothFormatsCodec:  # noqa: PYI034 - an instance of the codec's own subclass
        return dict.__new__(_both_class(str(dict(v2)["id"])))

    def __init__(self, v2: Mapping[str, Any], v3: Mapping[str, Any]) -> None:
        super().__init__(v3)
        self.v2 = dict(v2)
        self.v3 = dict(v3)
        self._numcodec: Any = None

    # --- the numcodecs Codec protocol (a Zarr v2 array's compressor or filter) ---------------
    def get_config(self) -> dict[str, Any]:
        return dict(self.v2)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Any:
        return numcodecs.get_codec(dict(config))

    def _codec(self) -> Any:
        if self._numcodec is None:
            self._numcodec = numcodecs.get_codec(dict(self.v2))
        return self._numcodec

    def encode(self, buf: Any) -> Any:
        return self._codec().encode(buf)

    def decode(self, buf: Any, out: Any = None) -> Any:
        return self._codec().decode(buf, out)

    # --- a value in an encoding --------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        """Equal to another spec of the same codec, and to the codec it stands for in either format
        (a numcodecs codec with the v2 configuration, a v3 codec with the v3 JSON; blosc's
        ``typesize``, which zarr-python sets from the array, left out)."""
        if isinstance(other, BothFormatsCodec):
            return self.v2 == other.v2 and self.v3 == other.v3
        if isinstance(other, Mapping):
            return NotImplemented
        if hasattr(other, "get_config"):
            return bool(numcodecs.get_codec(dict(self.v2)) == other)
        if hasattr(other, "to_dict"):
            return _without_typesize(other.to_dict()) == _without_typesize(self.v3)
        return NotImplemented

    __hash__ = None  # unhashable, as the dict it is

    def __reduce__(self) -> tuple[Any, ...]:
        return (BothFormatsCodec, (self.v2, self.v3))

    def __copy__(self) -> BothFormatsCodec:
        return BothFormatsCodec(self.v2, self.v3)

    def __deepcopy__(self, memo: Any) -> BothFormatsCodec:
        import copy

        return BothFormatsCodec(copy.deepcopy(self.v2, memo), copy.deepcopy(self.v3, memo))

    def __repr__(self) -> str:
        return f"BothFormatsCodec(v2={self.v2!r}, v3={self.v3!r})"


@functools.cache
def _both_class(codec_id: str) -> type[BothFormatsCodec]:
    """The subclass for one numcodecs id: zarr-python checks ``codec_id`` on the class."""
    return type(f"BothFormatsCodec[{codec_id}]", (BothFormatsCodec,), {"codec_id": codec_id,
                                                                        "__module__": __name__})


@functools.lru_cache(maxsize=1)
def _both_formats_work() -> bool:
    """Whether this zarr-python writes a :class:`BothFormatsCodec` as the right JSON in both formats
    (a zlib compressor and a delta filter, on an in-memory array of each)."""
    import zarr

    spec = BothFormatsCodec({"id": "zlib", "level": 1}, {"name": "numcodecs.zlib", "configuration": {"level": 1}})
    flt = BothFormatsCodec({"id": "delta", "dtype": "<i4"},
                           {"name": "numcodecs.delta", "configuration": {"dtype": "<i4"}})
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numcodecs.* in v3: "not in the v3 specification"
            for fmt in (2, 3):
                a = zarr.create_array(zarr.storage.MemoryStore(), shape=(4,), chunks=(4,), dtype="<i4",
                                      compressors=(spec,), filters=(flt,), zarr_format=fmt)
                a[:] = np.arange(4, dtype="<i4")
                meta: dict[str, Any] = dict(a.metadata.to_dict())
                if fmt == 2:
                    ok = meta.get("compressor") == spec.v2 and [dict(f) for f in meta.get("filters") or []] == [
                        flt.v2]
                else:
                    names = [dict(c).get("name") for c in meta.get("codecs", [])]
                    ok = names == ["numcodecs.delta", "bytes", "numcodecs.zlib"]
                if not ok or np.asarray(a[:]).tolist() != [0, 1, 2, 3]:
                    return False
    except Exception:  # noqa: BLE001 - any refusal means: do not hand these to zarr-python
        return False
    return True


def v2_objects(
    compressor: Mapping[str, Any] | None, filters: Sequence[Mapping[str, Any]], *, dtype: np.dtype, text: bool
) -> tuple[Any, list[Any]]:
    """numcodecs objects for a v2 store's ``compressor``/``filters`` (netcdf-c's shuffle at the size
    it really shuffled by: the reader's rule, ``v2.shuffle_elementsize``).

    For text variables the filters are left out: ``to_zarr`` writes strings as vlen-utf8, where
    netcdf-c's shuffle of the fixed-width bytes means nothing (and a vlen filter is zarr's own).
    """
    comp = None if compressor is None else numcodecs.get_codec(dict(compressor))
    out: list[Any] = []
    if not text:
        for f in filters:
            cfg = dict(f)
            if cfg.get("id") == "shuffle":
                out.append(numcodecs.Shuffle(elementsize=shuffle_elementsize(cfg, dtype, None)))
            elif cfg.get("id") not in _OBJECT_CODECS:
                out.append(numcodecs.get_codec(cfg))
    return comp, out


def _v2_to_v3(codec: Any, *, dtype: np.dtype, where: str) -> tuple[str, Any] | None:
    """One numcodecs object as ("filter" | "compressor", v3 codec), or None (dropped, warned)."""
    if codec.get_config().get("id") in _OBJECT_CODECS:
        return None  # the serializer zarr-python picks for text
    got = v3_equivalent(codec, dtype=dtype)
    if isinstance(got, str):
        warnings.warn(f"{where}: {got}; it is left out of encoding['compressors'/'filters'] for v3.",
                      CodecDroppedWarning, stacklevel=user_stacklevel())
        return None
    return got


def v2_codec_as_v3(config: Mapping[str, Any], *, dtype: np.dtype,
                   string_kind: str | None) -> tuple[str, dict[str, Any]]:
    """One v2 codec (a ``.zarray`` compressor or filter) as the Zarr v3 codec that decodes its bytes
    unchanged: ``("compressor" | "filter", zarr.json entry)`` (``filter``: an array->array codec).

    netcdf-c's shuffle (``elementsize: 0``) becomes ``numcodecs.shuffle`` with the element size it
    really shuffled by (``v2.shuffle_elementsize``). Raises ``UnsupportedError`` with the reason when
    zarr-python has no such codec.
    """
    from ..errors import UnsupportedError

    cfg = dict(config)
    if cfg.get("id") == "shuffle":
        es = shuffle_elementsize(cfg, dtype, string_kind)
        return "compressor", {"name": "numcodecs.shuffle", "configuration": {"elementsize": es}}
    try:
        codec = numcodecs.get_codec(cfg)
    except Exception as e:  # noqa: BLE001 - numcodecs raises anything for a bad config
        raise UnsupportedError(f"codec {cfg!r}: numcodecs cannot build it ({e})") from None
    got = v3_equivalent(codec, dtype=dtype)
    if isinstance(got, str):
        raise UnsupportedError(got)
    role, obj = got
    return role, obj.to_dict()


def _v2_equivalent(codec: Any) -> Any:
    """One v3 codec object (or its JSON dict) as a numcodecs object, or its JSON when numcodecs has
    no equivalent (the caller says so)."""
    return v2_equivalent(codec.v3 if isinstance(codec, BothFormatsCodec) else codec if isinstance(codec, Mapping)
                         else codec.to_dict())


def _v3_to_v2(codec: Any, *, where: str) -> Any:
    """One v3 codec object (or its JSON dict) as a numcodecs object, or None (dropped, warned)."""
    got = _v2_equivalent(codec)
    if isinstance(got, Mapping):
        warnings.warn(
            f"{where}: Zarr v3 codec {got!r} has no Zarr v2 (numcodecs) equivalent; it is left out of "
            "encoding['compressors'/'filters'] for v2.",
            CodecDroppedWarning, stacklevel=user_stacklevel(),
        )
        return None
    return got


def _is_v3(codec: Any) -> bool:
    if isinstance(codec, BothFormatsCodec):
        return False
    return (isinstance(codec, Mapping) and "name" in codec) or hasattr(codec, "to_dict") and not hasattr(
        codec, "get_config")


def _as_v2(codec: Any) -> Any:
    """A v2-vocabulary codec (numcodecs object or ``{"id": ...}`` dict) as itself; a
    :class:`BothFormatsCodec` as its v2 numcodecs object."""
    return numcodecs.get_codec(dict(codec.v2)) if isinstance(codec, BothFormatsCodec) else codec


def _as_v3(codec: Any) -> Any:
    if isinstance(codec, BothFormatsCodec):
        from zarr.registry import get_codec_class

        return quiet(get_codec_class(str(codec.v3["name"])).from_dict, dict(codec.v3))
    return codec


# ------------------------------------------------------------------------------------------
# What a store's chain becomes: the format-neutral encoding engine="zstrings" gives
# ------------------------------------------------------------------------------------------


def _without_typesize(v3json: Mapping[str, Any]) -> dict[str, Any]:
    """A v3 codec's JSON without blosc's ``typesize``, which zarr-python sets from the array's item
    size when it is not given (a dataset's encoding may be written to arrays of other types)."""
    v3json = dict(v3json)
    if v3json.get("name") == "blosc":
        v3json["configuration"] = {k: v for k, v in (v3json.get("configuration") or {}).items() if k != "typesize"}
    return v3json


def _both(v2: Any, v3: Any) -> BothFormatsCodec:
    v2json = dict(v2.get_config()) if hasattr(v2, "get_config") else dict(v2)
    v3json = v3.to_dict() if hasattr(v3, "to_dict") else dict(v3)
    return BothFormatsCodec(v2json, _without_typesize(v3json))


def _neutral_from_v2_chain(compressor: Mapping[str, Any] | None, filters: Sequence[Mapping[str, Any]], *,
                           dtype: np.dtype, text: bool) -> tuple[list[BothFormatsCodec], list[BothFormatsCodec]]:
    """(compressors, filters) both formats take, from a v2 chain (filters then compressor)."""
    comps: list[BothFormatsCodec] = []
    flts: list[BothFormatsCodec] = []
    chain = [dict(f) for f in filters] + ([dict(compressor)] if compressor is not None else [])
    for cfg in chain:
        cid = cfg.get("id")
        if cid in _OBJECT_CODECS or cid in _NOT_NEUTRAL:
            continue
        try:
            v2 = numcodecs.get_codec(cfg)
            got = v3_equivalent(v2, dtype=dtype)
        except Exception:  # noqa: BLE001,S112 - no equivalent: the exact chain keeps it (zstrings_* keys)
            continue
        if isinstance(got, str):  # no equivalent: the exact chain keeps it
            continue
        role, v3 = got
        if role == "compressor":
            comps.append(_both(v2, v3))
        elif not text:
            flts.append(_both(v2, v3))
    return comps[-1:], flts


def _split_v3_chain(codecs: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(array->array codecs, bytes->bytes codecs) of a v3 chain, inside a shard's chain if sharded."""
    chain = [dict(c) for c in codecs]
    if chain and chain[0].get("name") == "sharding_indexed":
        chain = [dict(c) for c in (chain[0].get("configuration") or {}).get("codecs", [])]
    at = next((i for i, c in enumerate(chain) if _is_array_bytes(c)), None)
    return (chain[:at] if at is not None else []), (chain[at + 1:] if at is not None else chain)


def _neutral_from_v3_chain(codecs: Sequence[Mapping[str, Any]], *, text: bool
                           ) -> tuple[list[BothFormatsCodec], list[BothFormatsCodec]]:
    before, after = _split_v3_chain(codecs)
    comps: list[BothFormatsCodec] = []
    flts: list[BothFormatsCodec] = []
    for group, out in ((after, comps), ([] if text else before, flts)):
        for c in group:
            name = str(c.get("name"))
            if name.split(".", 1)[-1] in _NOT_NEUTRAL:
                continue
            try:
                v2 = _v2_equivalent(c)
                if isinstance(v2, Mapping):  # no equivalent: the exact chain keeps it
                    continue
                from zarr.registry import get_codec_class

                v3 = quiet(get_codec_class(name).from_dict, dict(c))
            except Exception:  # noqa: BLE001,S112 - no equivalent: the exact chain keeps it (codecs)
                continue
            out.append(_both(v2, v3))
    return comps[-1:], flts


def neutral_codecs(enc: Mapping[str, Any], *, dtype: np.dtype, text: bool) -> dict[str, Any] | None:
    """The ``compressors``/``filters`` (no filters for text) both Zarr formats take, computed from
    the store's chain an encoding records (``zstrings_compressor``/``zstrings_filters`` or
    ``codecs``), or None when it records none."""
    # (no warning for a codec left out: the exact chain keeps it)
    if "zstrings_compressor" in enc or "zstrings_filters" in enc:
        comps, flts = _neutral_from_v2_chain(enc.get("zstrings_compressor"), enc.get("zstrings_filters") or (),
                                             dtype=dtype, text=text)
    elif isinstance(enc.get("codecs"), list | tuple):
        comps, flts = _neutral_from_v3_chain(enc["codecs"], text=text)
    else:
        return None
    out: dict[str, Any] = {"compressors": tuple(comps) or None}
    if not text:
        out["filters"] = tuple(flts) or None
    return out


def _codec_keys(neutral: dict[str, Any], *, where: str) -> dict[str, Any]:
    """The neutral ``compressors``/``filters`` when this zarr-python takes them for both formats;
    otherwise none (zarr-python's defaults), with a warning naming the route that keeps them."""
    if _both_formats_work():
        return neutral
    if any(neutral.values()):
        _warn_no_both_formats()
    return {}


@functools.lru_cache(maxsize=1)
def _warn_no_both_formats() -> None:
    import zarr

    warnings.warn(
        f"zarr-python {zarr.__version__} does not take one codec object for Zarr v2 and v3 arrays, so "
        "the stores' codecs are left out of encoding['compressors'/'filters'] (ds.to_zarr writes "
        "zarr-python's defaults). ds.zstrings.to_zarr(path, zarr_format=2 or 3) writes them.",
        CodecDroppedWarning, stacklevel=user_stacklevel(),
    )


def store_codecs_encoding(
    compressor: Mapping[str, Any] | None, filters: Sequence[Mapping[str, Any]], *, dtype: np.dtype,
    string_kind: str | None, where: str,
) -> dict[str, Any]:
    """The encoding keys for a v2/NCZarr array's codecs: the format-neutral ``compressors``/
    ``filters`` (see the module docstring), plus netCDF4's ``zlib``/``complevel``/``shuffle`` for
    numeric zlib data so ``to_netcdf`` compresses the same (``netcdf4_keys`` gives netcdf-c's
    stores all of engine="netcdf4"'s keys). The chain itself is under ``zstrings_*`` (the caller)."""
    text = string_kind in _TEXT_KINDS
    enc: dict[str, Any] = {"zstrings_compressor": None if compressor is None else dict(compressor),
                           "zstrings_filters": [dict(f) for f in filters] or None}
    neutral = neutral_codecs(enc, dtype=dtype, text=text) or {}
    out = _codec_keys(neutral, where=where)
    cid = None if compressor is None else compressor.get("id")
    if not text and cid == "zlib" and all(dict(f).get("id") == "shuffle" for f in filters):
        # netCDF4/h5netcdf's own keys (to_zarr ignores them); other codecs have none there
        out.update(zlib=True, complevel=int(compressor.get("level", 4)), shuffle=bool(filters))  # type: ignore[union-attr]  # cid: not None
    return out


def netcdf4_keys(compressor: Mapping[str, Any] | None, filters: Sequence[Mapping[str, Any]], *,
                 chunks: tuple[int, ...] | None, shape: tuple[int, ...], text: bool) -> dict[str, Any]:
    """The encoding engine="netcdf4" gives a variable of an NCZarr store netcdf-c wrote (its
    ``Variable.filters()`` keys, ``chunksizes``, ``contiguous``, ``original_shape``), from the
    ``.zarray`` chain, so that ``to_netcdf``/``to_nczarr`` write what netCDF-4 wrote. Text gets no
    compression keys: HDF5 compresses only the heap references of variable-length strings."""
    chain = [dict(f) for f in filters] + ([dict(compressor)] if compressor is not None else [])
    ids = [c.get("id") for c in chain]
    out: dict[str, Any] = {"zlib": False, "szip": False, "zstd": False, "bzip2": False, "blosc": False,
                           "shuffle": False, "complevel": 0, "fletcher32": "fletcher32" in ids}
    if not text:
        for c in chain:
            cid = c.get("id")
            name = netcdf4_compression(cid)
            if name in ("zlib", "zstd", "bzip2"):  # (netCDF4's flags; blosc's below)
                out[name] = True
                out["complevel"] = int(c.get("level", 4 if cid == "zlib" else 0))
            elif cid == "shuffle":
                out["shuffle"] = True
            elif cid == "szip":
                out["szip"] = {"coding": "ec" if int(c.get("mask", 32)) & 4 else "nn",
                               "pixels_per_block": int(c.get("pixels-per-block", c.get("pixels_per_block", 8)))}
            elif cid == "blosc":  # netCDF4's names: blosc_lz (cname blosclz), blosc_lz4, blosc_zstd, ...
                cname = str(c.get("cname", "lz4"))
                out["blosc"] = {"compressor": "blosc_lz" if cname == "blosclz" else f"blosc_{cname}",
                                "shuffle": int(c.get("shuffle", 1))}
    out.update(contiguous=False, original_shape=tuple(shape))
    if chunks is not None:
        out["chunksizes"] = tuple(chunks)
    return out


def v3_codecs_encoding(codecs: Sequence[Mapping[str, Any]], *, shards: tuple[int, ...] | None, text: bool,
                       where: str) -> dict[str, Any]:
    """The encoding keys for a v3 array's codec chain: the format-neutral ``compressors``/
    ``filters`` (see the module docstring); a sharded array's shard shape under ``zstrings_shards``
    (its chain under ``codecs``, the caller's), since Zarr v2 has no shards."""
    enc: dict[str, Any] = {"codecs": [dict(c) for c in codecs]}
    neutral = neutral_codecs(enc, dtype=np.dtype("u1"), text=text) or {}
    out = _codec_keys(neutral, where=where)
    if shards is not None:
        out["zstrings_shards"] = tuple(shards)
    return out


def _is_array_bytes(codec: Mapping[str, Any]) -> bool:
    """Whether a v3 codec is the chain's array->bytes step: the codec registry's family (ours, each
    layout's codec among them, or zarr-python's), so a new layout's codec needs no list here."""
    cfg = codec.get("configuration") or {}
    try:
        step = lookup(str(codec.get("name")), cfg if isinstance(cfg, Mapping) else {})
    except ZStringsError:  # a codec nobody knows: not the serializer
        return False
    return step.family == "array_bytes"


# ------------------------------------------------------------------------------------------
# One format's exact vocabulary: ds.zstrings.to_zarr, with_zarr_encoding and our own writers
# ------------------------------------------------------------------------------------------


def _unchanged(enc: Mapping[str, Any], *, dtype: np.dtype, text: bool) -> bool:
    """Whether ``compressors``/``filters`` are still what engine="zstrings" put there (then the
    store's recorded chain is what to write), rather than the user's own choice."""
    neutral = neutral_codecs(enc, dtype=dtype, text=text)
    if neutral is None:
        return False
    if not _both_formats_work():
        return "compressors" not in enc and "filters" not in enc
    return all(enc.get(k) == v for k, v in neutral.items()) and (not text or "filters" not in enc)


def _recorded_v2(enc: Mapping[str, Any]) -> bool:
    """Whether an encoding records a v2/NCZarr store's chain (else a v3 chain under ``codecs``)."""
    return "zstrings_compressor" in enc or "zstrings_filters" in enc


def _listed(codecs: Any) -> list[Any]:
    """``compressors`` as a list: None, one codec, or a list/tuple of them."""
    return [] if codecs is None else list(codecs) if isinstance(codecs, list | tuple) else [codecs]


def _numcodec(codec: Any) -> Any:
    """A v2 codec (numcodecs object or ``{"id": ...}`` dict) as a numcodecs object."""
    return numcodecs.get_codec(dict(codec)) if isinstance(codec, Mapping) else codec


def _keys(compressors: Sequence[Any], filters: Sequence[Any], *, text: bool) -> dict[str, Any]:
    """``compressors`` (None for none) and, but for text, ``filters``."""
    out: dict[str, Any] = {"compressors": tuple(compressors) or None}
    if not text:
        out["filters"] = tuple(filters) or None
    return out


def _warn_no_shards(where: str, chunks: str) -> None:
    warnings.warn(f"{where}: Zarr v2 has no shards; the shards are left out (chunks {chunks}).",
                  CodecDroppedWarning, stacklevel=user_stacklevel())


def _v2_chain_of(v3codecs: Iterable[Any], *, where: str) -> tuple[Any, list[Any]]:
    """v3 codecs (in chain order) as a v2 (compressor, filters); what has no equivalent dropped, warned."""
    conv = [c for c in (_v3_to_v2(x, where=where) for x in v3codecs) if c is not None]
    if not conv:
        return None, []
    # v3 puts shuffle (and any other bytes->bytes codec) before the compressor; v2 filters come first
    return conv[-1], conv[:-1]


def _v3_chain_of(v2codecs: Iterable[Any], *, dtype: np.dtype, where: str) -> tuple[list[Any], list[Any]]:
    """v2 codec objects (filters, then the compressor) as v3 (compressors, filters); dropped ones warned."""
    v3f: list[Any] = []
    v3c: list[Any] = []
    for c in v2codecs:
        got = _v2_to_v3(c, dtype=dtype, where=where)
        if got is not None:
            (v3f if got[0] == "filter" else v3c).append(got[1])
    return v3c, v3f


def _store_v2(enc: Mapping[str, Any], *, dtype: np.dtype, text: bool, where: str) -> tuple[Any, list[Any]]:
    """The store's recorded chain as (v2 compressor, v2 filters), numcodecs objects."""
    if _recorded_v2(enc):
        return v2_objects(enc.get("zstrings_compressor"), enc.get("zstrings_filters") or (), dtype=dtype, text=text)
    before, after = _split_v3_chain(enc["codecs"])
    comp, flts = _v2_chain_of((*([] if text else before), *after), where=where)
    return comp, ([] if text else flts)


def _store_v2_keys(enc: Mapping[str, Any], *, dtype: np.dtype, text: bool, where: str) -> dict[str, Any]:
    """The store's recorded chain as v2 ``compressors``/``filters`` (its shards left out, warned)."""
    comp, flts = _store_v2(enc, dtype=dtype, text=text, where=where)
    out = _keys([] if comp is None else [comp], flts, text=text)
    if enc.get("zstrings_shards") is not None:
        _warn_no_shards(where, "are the shard shape")
    return out


def _built_v3(codecs: Sequence[Mapping[str, Any]], key: str, *, where: str) -> list[Any]:
    """zarr-python's codec objects for v3 codec JSON; one only our reader knows is dropped, warned."""
    from zarr.registry import get_codec_class

    built: list[Any] = []
    for c in codecs:
        try:
            built.append(quiet(get_codec_class(str(c["name"])).from_dict, dict(c)))
        except Exception:  # noqa: BLE001 - a codec only our reader knows
            warnings.warn(f"{where}: Zarr v3 codec {c!r} is unknown to zarr-python; it is left out of "
                          f"encoding[{key!r}].", CodecDroppedWarning, stacklevel=user_stacklevel())
    return built


def _shard_keys(enc: Mapping[str, Any]) -> dict[str, Any]:
    """``shards``/``chunks`` of a sharded v3 chain whose encoding's chunks are still the shard shape."""
    shards = enc.get("zstrings_shards")
    chain = list(enc["codecs"])
    if shards is not None and chain and chain[0].get("name") == "sharding_indexed" and \
            tuple(enc.get("chunks") or ()) == tuple(shards):
        return {"shards": tuple(shards), "chunks": tuple(chain[0]["configuration"]["chunk_shape"])}
    return {}


def _store_v3(enc: Mapping[str, Any], *, dtype: np.dtype, text: bool, where: str) -> dict[str, Any]:
    """The store's recorded chain as v3 ``compressors``/``filters`` (and ``shards``/``chunks``)."""
    if _recorded_v2(enc):
        comp, flts = v2_objects(enc.get("zstrings_compressor"), enc.get("zstrings_filters") or (), dtype=dtype,
                                text=text)
        v3c, v3f = _v3_chain_of((*flts, *([comp] if comp is not None else [])), dtype=dtype, where=where)
        return _keys(v3c, v3f, text=text)
    before, after = _split_v3_chain(enc["codecs"])
    comps = _built_v3(after, "compressors", where=where)
    out = _keys(comps, _built_v3([] if text else before, "filters", where=where), text=text)
    out.update(_shard_keys(enc))
    return out


def format_encoding(enc: Mapping[str, Any], zarr_format: int, *, dtype: np.dtype, text: bool,
                    where: str) -> dict[str, Any]:
    """``enc`` with ``compressors``/``filters`` (and ``shards``) in ``zarr_format``'s own vocabulary:
    the store's exact chain while they are still what engine="zstrings" read (shuffle, several
    compressors and shards included where the format holds them), else the user's codecs converted."""
    out = {k: v for k, v in enc.items() if k != "shards"} if zarr_format == 2 else dict(enc)
    recorded = _recorded_v2(enc) or isinstance(enc.get("codecs"), list)
    if recorded and _unchanged(enc, dtype=dtype, text=text):
        store_keys = _store_v2_keys if zarr_format == 2 else _store_v3
        out.update(store_keys(enc, dtype=dtype, text=text, where=where))
        return out
    return _to_format(out, zarr_format, dtype=dtype, text=text, where=where, shards=enc.get("shards"))


def _to_format(enc: dict[str, Any], zarr_format: int, *, dtype: np.dtype, text: bool, where: str,
               shards: Any = None) -> dict[str, Any]:
    """``enc``'s own ``compressors``/``filters`` converted to ``zarr_format``'s vocabulary."""
    if "compressors" not in enc and "filters" not in enc:
        out = enc
    elif zarr_format == 2:
        out = _v2_keys(enc, text=text, where=where)
    else:
        return _v3_keys(enc, dtype=dtype, text=text, where=where)
    if zarr_format == 2 and shards is not None:
        _warn_no_shards(where, "stay as they are")
    return out


def _v2_keys(enc: dict[str, Any], *, text: bool, where: str) -> dict[str, Any]:
    """``enc`` with its own codecs (either vocabulary) as v2 ``compressors``/``filters``."""
    out = dict(enc)
    comp, filters = v2_configs({k: v for k, v in enc.items() if not k.startswith("zstrings_")
                                and k != "codecs"}, where=where)
    if isinstance(comp, list):
        raise ValueError(  # noqa: TRY004 - a value the encoding holds (a ValueError, as before)
            f"{where}: Zarr v2 holds one compressor; encoding['compressors'] has {len(comp)}.")
    out["compressors"] = None if comp is None else (_numcodec(comp),)
    objs = [_numcodec(f) for f in filters]
    if text:
        out.pop("filters", None)
    else:
        out["filters"] = tuple(objs) or None
    return out


def _v3_keys(enc: dict[str, Any], *, dtype: np.dtype, text: bool, where: str) -> dict[str, Any]:
    """``enc`` with its own codecs (either vocabulary) as v3 ``compressors``/``filters``."""
    out = dict(enc)
    comps = _listed(enc.get("compressors"))
    filters = list(enc.get("filters") or [])
    if all(_is_v3(c) or isinstance(c, BothFormatsCodec) for c in (*comps, *filters)):
        out.update(_keys([_as_v3(c) for c in comps], [] if text else [_as_v3(c) for c in filters], text=text))
        return out
    v3c, v3f = _v3_chain_of((_numcodec(_as_v2(c)) for c in (*filters, *comps)), dtype=dtype, where=where)
    out.update(_keys(v3c, v3f, text=text))
    if text:
        out.pop("filters", None)
    return out


def v2_configs(enc: Mapping[str, Any], *, where: str) -> tuple[Any, list[Any]]:
    """``(compressor, filters)`` of an encoding in Zarr v2 terms (numcodecs objects or v2 dicts), for
    our own v2/NCZarr writers: the store's recorded chain while engine="zstrings"'s
    ``compressors``/``filters`` are unchanged, else whichever vocabulary they hold, converted."""
    recorded = _recorded_v2(enc) or isinstance(enc.get("codecs"), list)
    text = "filters" not in enc and "compressors" in enc
    if recorded and _unchanged(enc, dtype=np.dtype("u1"), text=text):
        if _recorded_v2(enc):  # as recorded (netcdf-c's shuffle: 0)
            comp = enc.get("zstrings_compressor")
            return (None if comp is None else dict(comp)), [
                dict(f) for f in enc.get("zstrings_filters") or () if dict(f).get("id") not in _OBJECT_CODECS]
        return _store_v2(enc, dtype=np.dtype("u1"), text=False, where=where)
    comps = [_as_v2(c) for c in _listed(enc.get("compressors"))]
    filters = [_as_v2(c) for c in enc.get("filters") or []]
    if any(_is_v3(c) for c in (*comps, *filters)):
        return _v2_chain_of((*filters, *comps), where=where)
    if len(comps) > 1:
        return comps, filters  # the caller refuses more than one v2 compressor with its own message
    return (comps[0] if comps else None), filters


# ------------------------------------------------------------------------------------------
# An encoding's codecs as the .zarray chain a netcdf-c target holds (to_nczarr, zstrings convert)
# ------------------------------------------------------------------------------------------


def v2_config(codec: Any, *, where: str) -> dict[str, Any]:
    """One compressor/filter as a v2 config dict (``{}`` for None): a name, a config dict or a
    numcodecs codec; anything else is refused naming ``where``."""
    if codec is None:
        return {}
    if isinstance(codec, str):
        return {"id": codec}
    if isinstance(codec, Mapping):
        return dict(codec)
    get_config = getattr(codec, "get_config", None)
    if get_config is None:
        raise ZStringsError(
            f"Invalid compressor/filter {codec!r} for {where}: expected a numcodecs codec, a config dict "
            "such as {'id': 'zlib', 'level': 4} or a name ('zlib', 'zstd', 'bz2', 'blosc')."
        )
    return dict(get_config())


def v2_terms(enc: Mapping[str, Any], *, where: str) -> dict[str, Any]:
    """``enc`` with its ``compressors`` (either vocabulary) as a v2 ``compressor`` (a list when there
    are several: the caller decides) and ``filters``; text read by engine="zstrings" has no
    ``filters``, so the store's own (netcdf-c's shuffle) are kept, its object codec left out."""
    comp, filters = v2_configs(enc, where=where)
    stored = [f for f in enc.get("zstrings_filters") or () if dict(f).get("id") not in _OBJECT_CODECS]
    return {**enc, "compressor": comp, "filters": filters if "filters" in enc else (stored or None)}


def netcdf4_codecs(enc: Mapping[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """The v2 chain of netCDF4's ``zlib``/``compression``/``complevel``/``shuffle`` keys, or None
    when they ask for no compression."""
    if not (enc.get("zlib") or enc.get("compression")):
        return None
    level = enc.get("complevel")
    comp = {"id": v2_id_of_netcdf4(enc.get("compression") or "zlib"), "level": 4 if level is None else int(level)}
    return comp, ([{"id": "shuffle", "elementsize": 0}] if enc.get("shuffle") else [])


def netcdf_c_unreadable(compressor: Mapping[str, Any] | None, filters: Sequence[Mapping[str, Any]]) -> list[Any]:
    """The ids of a v2 chain that netcdf-c cannot decode in NCZarr (the compressor's first)."""
    bad = [compressor.get("id")] if compressor and compressor.get("id") not in NETCDF_C_CODECS else []
    return bad + [f.get("id") for f in filters if f.get("id") not in NETCDF_C_FILTERS]


def _loose_config(codec: Any) -> dict[str, Any] | None:
    """A name, dict or numcodecs codec as a v2 config dict; None for anything else."""
    if isinstance(codec, str):
        return {"id": codec}
    if codec is None or isinstance(codec, dict):
        return codec
    return dict(codec.get_config()) if hasattr(codec, "get_config") else None


def _loose_filters(filters: Any) -> list[dict[str, Any]]:
    """Filters as v2 config dicts, without what is not a codec or is a layout's object codec."""
    return [f for f in (_loose_config(x) for x in filters or []) if f is not None
            and f.get("id") not in _OBJECT_CODECS]


def netcdf_c_readable(enc: dict[str, Any], *, where: str, compressor: Mapping[str, Any] | None = None,
                      replace: bool = False, readable: frozenset[str] = NETCDF_C_CODECS) -> set[str]:
    """Rewrites ``enc`` (in place) with a ``compressor``/``filters`` that netcdf-c reads, for a
    copy to NCZarr or Zarr v2: ``compressor`` for every variable when ``replace``, else the
    encoding's own (either vocabulary) with an unreadable compressor replaced by zlib; filters
    other than shuffle are left out. Returns the ids replaced or left out, for the caller to say."""
    if "compressor" not in enc and "compressors" in enc:
        comp0, filters0 = v2_configs(enc, where=where)
        enc["compressor"] = comp0[0] if isinstance(comp0, list) else comp0  # netcdf-c holds one
        enc["filters"] = filters0 if "filters" in enc else enc.get("zstrings_filters")
    enc.pop("compressors", None)
    comp = _loose_config(enc.get("compressor"))
    filters = _loose_filters(enc.get("filters"))
    bad = {f["id"] for f in filters if f.get("id") not in NETCDF_C_FILTERS}
    if replace:
        comp = None if compressor is None else dict(compressor)
    elif comp is not None and comp.get("id") not in readable:
        bad.add(str(comp.get("id")))
        comp = {"id": "zlib", "level": 4}
    for k in ("zlib", "compression", "complevel", "shuffle"):
        enc.pop(k, None)
    enc["compressor"] = comp
    enc["filters"] = [f for f in filters if f.get("id") in NETCDF_C_FILTERS] or None
    return bad
