"""``xr_zstrings.migrate``: a Zarr v2 / NCZarr store (every generation) as Zarr v3, chunks unchanged.

plan -> commit, like every writer here:

* **plan** (:func:`plan_migration`): each array's ``zarr.json`` from its v2 metadata (the layout
  facts are ``formats.v2_to_v3``'s; the v2 filters and compressor become v3 codecs through
  ``codecs.encoding.v2_codec_as_v3``), its dimension names as engine="zstrings" resolves them
  (NCZarr references, ``_ARRAY_DIMENSIONS``, netcdf-c's anonymous names), and whether its chunk
  bytes can be reused unchanged. They cannot when no v3 codec chain decodes them byte for byte (a
  v2 filter without a v3 codec, netcdf-c's shuffle of NC_STRING by 8 bytes over chunks that are
  not a multiple of 8 bytes, which ``numcodecs.shuffle`` refuses): those arrays are rewritten,
  each with the reason, in :class:`MigrationReport`.
* **commit**: *in place* (``target=None``): the v3 metadata goes beside the v2 metadata, with the
  ``v2`` chunk key encoding, so one set of chunks answers to v2 readers (netcdf-c, engine="zstrings")
  and v3 readers (zarr-python prefers ``zarr.json``); a rewritten array's v3 chunks go under ``c/``
  beside its v2 chunks. *New location*: the chunks are hard-linked (copied across file systems;
  copied server side within one S3 bucket, never read) under v3's default keys. Either way the
  target is opened by the write session (``write.session``), which classifies it and picks the
  commit: a new local store is written beside its target and swapped in whole; on object storage
  the root ``zarr.json`` is written last (a new location gets the placeholder root first). Nothing
  of a reusable array's chunks is read.

In place, ``migrate`` is a writer like an append: its session claims the store (a local folder's
writer lock and the journal of kind "migrate", ``io.commit.Transaction``) before it reads it, so it
migrates the version it holds (an append running meanwhile is waited for locally, or makes it
refuse with ``ConcurrentWriteError``).
A killed migration leaves its journal: ``repair`` (or the next writer) removes the v3 metadata it was
writing (v3 readers then read the v2 metadata; v2 readers never noticed). Our appends and added
variables to a store migrated in place write its v3 metadata again after their commit
(``keep_v3_in_step``); another tool's v2 write is not seen by v3 readers until ``migrate`` or
``repair`` runs again, and ``zstrings check`` names the arrays whose v3 metadata disagree
(``v3_out_of_step``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import os
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ..codecs.encoding import v2_codec_as_v3
from ..codecs.v3 import V3Pipeline
from ..errors import ConcurrentWriteError, UnsupportedError, ZStringsError, user_stacklevel
from ..formats.nczarr import ArrayMetaV2
from ..formats.netcdf_c import is_nczarr
from ..formats.v2_to_v3 import data_type_json, fill_value_json, serializer_json, v3_attributes, xarray_fill_attr
from ..io.store import open_store
from ..io.store_errors import local_errors
from ..io.zstore import ZStore
from ..read.chunked import open_chunked
from ..read.paths import join_path, node_key
from ..read.tree import TreeMeta, open_tree
from ..read.variables import MISSING_MARKER, joined_char_arrays, resolve_dims
from . import NewMode, session
from .zarr3 import _consolidated_root

if TYPE_CHECKING:
    from ..io.commit import Transaction

__all__ = ["ArrayPlan", "MigrationReport", "keep_v3_in_step", "migrate", "overlaps", "plan_migration",
           "rewritten_chunks", "stored_chunks", "v3_out_of_step"]

#: a JSON object of metadata (a zarr.json, a codec)
JSONObject = dict[str, Any]

_OBJECT_CODECS = ("vlen-utf8", "vlen-bytes")
_TEXT_KINDS = ("string", "char", "unicode", "vlen", "vlen-bytes")
_V2_KEYS = "v2"
_DEFAULT_KEYS = {"name": "default", "configuration": {"separator": "/"}}
#: object-storage copies (and GET/PUT transfers) in flight at once
_TRANSFER_CONCURRENCY = 64
#: ``migrate(missing=...)``: what becomes of missing values the v3 metadata cannot keep missing
_MISSING_MODES = ("values", "optional")
#: string kinds whose missing values migrate keeps (NC_CHAR's fill: see _attributes)
_MASKED_KINDS = ("string", "unicode", "vlen", "vlen-bytes")
#: what engine="zarr" prints on every open of a store migrated in place (zarr-python's warning)
BOTH_METADATA_WARNING = "Both zarr.json (Zarr format 3) and .zgroup (Zarr format 2) metadata objects exist"


@dataclass
class ArrayPlan:
    """One array's migration: its v3 metadata and whether its v2 chunk bytes are reused unchanged."""

    path: str
    meta: ArrayMetaV2
    zarr_json: JSONObject
    reuse: bool
    why: str = ""  # why the chunks are rewritten
    notes: list[str] = field(default_factory=list)  # what the v3 metadata cannot say (dropped _FillValue)
    missing_lost: bool = False  # values missing in the source read as values after migration
    fill: Any = None  # the value the source reads as missing (rewritten into zarrs' optional type: null)
    joined: bool = False  # NC_CHAR whose characters xarray joins into strings (along the last dimension)


@dataclass
class MigrationReport:
    """What ``migrate`` did (or, with ``dry_run=True``, would do)."""

    source: str
    target: str
    in_place: bool
    reused: list[str]
    rewritten: dict[str, str]
    notes: dict[str, list[str]]
    chunks_transferred: int = 0
    transfer: str = ""  # "shared" (in place), "hard-linked", "copied server-side", "copied"
    dry_run: bool = False
    #: arrays whose values missing in the source read as values after migration (each has a note)
    missing_lost: list[str] = field(default_factory=list)
    #: arrays engine="zarr" cannot decode (text that is not valid UTF-8), with what was found;
    #: filled by ``check_utf8=True``
    not_utf8: dict[str, str] = field(default_factory=dict)
    #: text arrays given ``_Encoding`` whose values were not checked (``check_utf8=False``)
    utf8_unchecked: list[str] = field(default_factory=list)

    @property
    def metadata_only(self) -> bool:
        """Every array keeps its chunk bytes: only metadata is written (and, to a new location, the
        chunks linked or copied unchanged)."""
        return not self.rewritten

    def lines(self) -> list[str]:
        """The report as lines of text (what ``zstrings migrate`` prints)."""
        verb = "would migrate" if self.dry_run else "migrated"
        where = "in place (v3 metadata beside the v2 metadata)" if self.in_place else f"to {self.target}"
        out = [(f"{verb} {self.source} {where}: {len(self.reused)} array(s) reuse their chunks, "
                f"{len(self.rewritten)} rewritten")]
        if not self.dry_run and self.chunks_transferred:
            out.append(f"  {self.chunks_transferred} chunk object(s) {self.transfer}")
        for path, why in sorted(self.rewritten.items()):
            out.append(f"  rewritten {path}: {why}")
        for path, notes in sorted(self.notes.items()):
            out += [f"  note {path}: {n}" for n in notes]
        for path, why in sorted(self.not_utf8.items()):
            out.append(f"  note {path}: {why}")
        if self.utf8_unchecked:
            out.append(f"  note: {len(self.utf8_unchecked)} text array(s) get _Encoding utf-8, which xarray's "
                       "engine='zarr' decodes strictly: a value netcdf-c cut inside a UTF-8 character makes it "
                       "raise UnicodeDecodeError there (engine='zstrings' reads it); not checked: "
                       "check_utf8=True (zstrings migrate --check-utf8) reads them and names such arrays")
        if self.in_place:
            out.append(f"  note: zarr-python and xarray's engine='zarr' warn '{BOTH_METADATA_WARNING} ...' on "
                       "every open of a store migrated in place (they read zarr.json; netcdf-c and v2 readers "
                       "the v2 metadata kept beside it, which is why it stays); migrate SRC DST makes a pure "
                       "Zarr v3 store")
        return out


# ---------------------------------------------------------------------------------------------
# Plan
# ---------------------------------------------------------------------------------------------


def _codec_chain(meta: ArrayMetaV2) -> tuple[list[JSONObject], list[JSONObject], str]:
    """(array->array codecs, bytes->bytes codecs, why the chunks cannot be reused) for the v2 filters
    and compressor: a v2 filter array->array in v3 must come before every bytes-level one."""
    aa: list[JSONObject] = []
    bb: list[JSONObject] = []
    filters = [dict(f) for f in meta.filters]
    vlen = meta.string_kind in ("vlen", "vlen-bytes")
    why = ""
    if vlen:
        if not filters or filters[0].get("id") not in _OBJECT_CODECS:
            why = f"its object codec is not the first v2 filter ({[f.get('id') for f in filters]})"
        filters = filters[1:]
    steps = [(f, False) for f in filters] + ([(dict(meta.compressor), True)] if meta.compressor else [])
    for cfg, is_compressor in steps:
        try:
            role, js = v2_codec_as_v3(cfg, dtype=meta.dtype, string_kind=meta.string_kind)
        except UnsupportedError as e:
            why = why or str(e)
            continue
        if role == "filter":
            problem = f"filter {cfg.get('id')!r} works on the array after a bytes-level codec" if (
                bb or vlen or is_compressor) else ""
        else:
            problem = _shuffle_problem(meta, js, vlen)
        why = why or problem
        if not problem:
            (aa if role == "filter" else bb).append(js)
    return aa, bb, why


def _shuffle_problem(meta: ArrayMetaV2, js: JSONObject, vlen: bool) -> str:
    """Why the bytes-level v3 codec ``js`` cannot undo the v2 one, or "": a shuffle of variable-length
    chunks, or netcdf-c's shuffle of chunks that are not a multiple of its element size."""
    if js["name"] != "numcodecs.shuffle":
        return ""
    if vlen:
        return "a shuffle of variable-length chunks has no Zarr v3 codec"
    es = js["configuration"]["elementsize"]
    nbytes = math.prod(meta.chunks) * meta.dtype.itemsize
    if nbytes % es:
        return (f"netcdf-c shuffled its chunks by {es} bytes, leaving {nbytes % es} byte(s) unshuffled at the end "
                f"of each {nbytes}-byte chunk, which Zarr v3's numcodecs.shuffle cannot undo")
    return ""


def _rewrite_chain(meta: ArrayMetaV2, aa: list[JSONObject],
                   bb: list[JSONObject]) -> tuple[list[JSONObject], list[JSONObject]]:
    """The codecs a rewritten array gets: the mapped ones, netcdf-c's shuffle by the element size."""
    if any(f.get("id") == "shuffle" for f in meta.filters) and meta.string_kind not in ("vlen", "vlen-bytes"):
        es = max(1, meta.dtype.itemsize)
        shuffle = {"name": "numcodecs.shuffle", "configuration": {"elementsize": es}}
        if shuffle not in bb:
            bb = [shuffle, *[c for c in bb if c.get("name") != "numcodecs.shuffle"]]
    return aa, bb


def _source_missing(tree: TreeMeta, meta: ArrayMetaV2) -> tuple[Any, bool]:
    """What engine="zstrings" (default options) reads as missing in a string array of the source, as
    ``read.variables._fill_and_mask`` decides it: (the fill value it masks, or None; whether
    never-written chunks are missing, a v2 ``|O`` array's ``fill_value: null``)."""
    attrs = meta.attrs
    if meta.string_kind in ("string", "char") and "_Encoding" in attrs:
        return None, False  # text decoded with _Encoding never equals the bytes fill: nothing masked
    fill = attrs.get("_FillValue")
    if fill is None and not is_nczarr(meta.generation) and not tree.netcdf_c and not meta.null_fill:
        fill = meta.fill_value  # pure Zarr v2: the fill_value masks, as in engine="zarr"
    if isinstance(fill, np.ndarray | list | tuple):
        fill = np.asarray(fill).reshape(-1)[0] if np.size(fill) else None
    if isinstance(fill, np.generic):
        fill = fill.item()
    return fill, fill is None and meta.null_fill


def _keep_missing(tree: TreeMeta, meta: ArrayMetaV2, attrs: JSONObject, notes: list[str]) -> tuple[str, Any]:
    """How a string array's missing values stay missing in Zarr v3 (``attrs``: its v3 attributes, to
    which a CF ``missing_value`` is added): ("", None) none to keep; ("missing_value", fill);
    ("marker", None): never-written chunks read as U+FFFF, the ``missing_value``; ("lost", fill):
    a bytes result, which no v3 metadata marks missing for xarray (engine="zarr" masks a text
    ``missing_value`` only in text, and cannot open an array with a string ``_FillValue`` attribute)."""
    fill, null = _source_missing(tree, meta)
    if fill is None and not null:
        return "", None
    kind = meta.string_kind
    text = kind in ("unicode", "vlen") or (kind == "string" and "_Encoding" in attrs)
    if not text:
        return "lost", fill
    if null:
        value = MISSING_MARKER
        notes.append("its fill_value null (never-written chunks are missing) becomes fill_value U+FFFF with "
                     "missing_value U+FFFF, which xarray masks: zarr-python shows U+FFFF there (a Unicode "
                     "noncharacter, never text), where it showed ''")
    else:
        try:
            value = fill.decode("utf-8") if isinstance(fill, bytes) else str(fill)
        except UnicodeDecodeError:
            return "lost", fill
    old = attrs.get("missing_value")
    attrs["missing_value"] = value if old is None or old == value else [*np.atleast_1d(old).tolist(), value]
    return ("marker" if null else "missing_value"), fill


def _attributes(tree: TreeMeta, meta: ArrayMetaV2, joined: bool, notes: list[str]) -> tuple[JSONObject, str, Any]:
    """The v3 attributes: the typed v2 ones, ``_Encoding`` where engine="zstrings" decodes undeclared
    text, CF's ``_FillValue`` in xarray's v3 encoding (numbers only), a CF ``missing_value`` where
    text was missing in the source (``_keep_missing``); with how missing values are kept and the fill."""
    attrs = dict(meta.attrs)
    kind = meta.string_kind
    declared = (meta.declares_text or tree.netcdf_c) and kind == "string"
    if (declared or (kind == "char" and joined)) and "_Encoding" not in attrs:
        attrs["_Encoding"] = "utf-8"  # what engine="zstrings" decodes these with when the store says nothing
    how, fill = ("", None)
    if kind in _MASKED_KINDS:
        how, fill = _keep_missing(tree, meta, attrs, notes)
        if how:
            attrs.pop("_FillValue", None)  # (xarray cannot open a v3 string array with one)
    if "_FillValue" in attrs:
        if kind in _TEXT_KINDS or meta.dtype.kind not in "biuf":
            notes.append(f"its text _FillValue {attrs['_FillValue']!r} is not written: xarray cannot decode a "
                         "_FillValue attribute of a Zarr v3 string type (it fails to open the variable), so "
                         "values equal to it read as themselves, not as missing")
            attrs.pop("_FillValue")
        else:
            attrs["_FillValue"] = xarray_fill_attr(attrs["_FillValue"], meta.dtype)
    elif (kind is None and not is_nczarr(meta.generation) and not tree.netcdf_c
          and meta.fill_value is not None):
        # pure Zarr v2: the fill_value is the missing-value marker (xarray's and engine="zstrings"'
        # reading, read/variables.py); Zarr v3 readers mask the _FillValue attribute only
        attrs["_FillValue"] = xarray_fill_attr(meta.fill_value, meta.dtype)
    return v3_attributes(attrs, meta.attr_types), how, fill


def _logical_shape(tree: TreeMeta, meta: ArrayMetaV2) -> tuple[tuple[int, ...], list[str]]:
    """(the shape engine="zstrings" reads: () for scalars, unlimited dimensions at their size; names)."""
    if meta.scalar:
        return (), []
    dims = resolve_dims(tree, meta)
    shape = tuple(max(d.size, n) if d.unlimited else n for d, n in zip(dims, meta.shape, strict=True))
    return shape, [d.name for d in dims]


def _optional_codecs() -> tuple[JSONObject, JSONObject]:
    """(data_type, array->bytes codec) of zarrs' nullable ``optional`` type around variable-length
    bytes, as ``to_zarr_v3`` writes it: a packbits validity mask, the present values as vlen-bytes."""
    data_type = {"name": "zarrs.optional", "configuration": {"name": "variable_length_bytes", "configuration": {}}}
    codec = {"name": "zarrs.optional", "configuration": {
        "mask_codecs": [{"name": "packbits", "configuration": {"padding_encoding": "none"}}],
        "data_codecs": [{"name": "vlen-bytes", "configuration": {}}]}}
    return data_type, codec


def _lost_note(fill: Any, null: bool) -> str:
    what = "never-written chunks" if null else f"elements equal to the fill {fill!r}, never-written chunks"
    return (f"its missing values ({what}) read as values after migration, in engine='zarr' and engine='zstrings': "
            "no Zarr v3 metadata marks a bytes value missing for xarray (its CF masking compares a text "
            "missing_value with text only, and it cannot open a v3 array with a string _FillValue attribute); "
            "missing='optional' (zstrings migrate --missing optional) rewrites this array into zarrs' nullable "
            "optional type, which keeps them missing (engine='zstrings', zarrs; zarr-python and engine='zarr' "
            "through this package's plugin)")


def _plan_array(tree: TreeMeta, meta: ArrayMetaV2, joined: bool, in_place: bool,
                missing: str = "values") -> ArrayPlan:
    notes: list[str] = []
    shape, names = _logical_shape(tree, meta)
    aa, bb, why = _codec_chain(meta)
    if why:
        aa, bb = _rewrite_chain(meta, aa, bb)
    order = [] if meta.order == "C" or len(shape) < 2 else [
        {"name": "transpose", "configuration": {"order": list(range(len(shape) - 1, -1, -1))}}]
    attributes, how, fill = _attributes(tree, meta, joined, notes)
    data_type: Any = data_type_json(meta)
    serializer = serializer_json(meta)
    fill_value = MISSING_MARKER if how == "marker" else fill_value_json(meta)
    lost = False
    if how == "lost" and missing == "optional":
        data_type, serializer = _optional_codecs()
        aa, bb, fill_value = [], [c for c in bb if c.get("name") != "numcodecs.shuffle"], None
        why = ("its missing values are kept in zarrs' nullable optional type (missing='optional'): no Zarr v3 "
               "metadata marks a bytes value missing for xarray")
    elif how == "lost":
        notes.append(_lost_note(fill, fill is None))
        lost = True
    keys = {"name": _V2_KEYS, "configuration": {"separator": meta.dimension_separator}}
    zarr_json = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(shape),
        "data_type": data_type,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [] if meta.scalar else list(meta.chunks)}},
        "chunk_key_encoding": keys if (in_place and not why) else _DEFAULT_KEYS,
        "fill_value": fill_value,
        "codecs": [*order, *aa, serializer, *bb],
        "attributes": attributes,
        "dimension_names": names,
    }
    return ArrayPlan(path=meta.path, meta=meta, zarr_json=zarr_json, reuse=not why, why=why, notes=notes,
                     missing_lost=lost, fill=fill, joined=joined)


def plan_migration(tree: TreeMeta, *, in_place: bool,
                   missing: str = "values") -> tuple[dict[str, ArrayPlan], dict[str, JSONObject]]:
    """Every array's :class:`ArrayPlan` and every group's ``zarr.json``, by absolute path
    (``missing``: as :func:`migrate`'s)."""
    if tree.root.zarr_format == 3:
        raise ZStringsError(f"{tree.store.display} is a Zarr v3 store already: nothing to migrate.")
    if tree.unreadable:
        path, why = next(iter(tree.unreadable.items()))
        raise UnsupportedError(f"Cannot migrate {tree.store.display}: array {path!r} is not read by xr_zstrings "
                               f"({why}); rewrite it first or drop it from the store.")
    arrays: dict[str, ArrayPlan] = {}
    groups: dict[str, JSONObject] = {}
    for gpath, group in tree.groups.items():
        groups[gpath] = {"zarr_format": 3, "node_type": "group",
                         "attributes": v3_attributes(group.attrs, group.attr_types)}
        joined = joined_char_arrays(tree, gpath)
        for name in tree.children[gpath][0]:
            apath = join_path(gpath, name)
            meta = tree.arrays[apath]
            if not isinstance(meta, ArrayMetaV2):  # pragma: no cover - v3 trees are refused above
                raise ZStringsError(f"{apath}: not Zarr v2 metadata")
            arrays[apath] = _plan_array(tree, meta, name in joined, in_place, missing)
    return arrays, groups


# ---------------------------------------------------------------------------------------------
# Chunks
# ---------------------------------------------------------------------------------------------


def _grid(meta: ArrayMetaV2) -> Iterator[tuple[int, ...]]:
    """Every chunk index of the stored v2 array."""
    grid = tuple(-(-n // c) for n, c in zip(meta.shape, meta.chunks, strict=True))
    return iter(np.ndindex(*grid)) if grid else iter([()])


def _v3_key(plan: ArrayPlan, idx: tuple[int, ...]) -> str:
    """The v3 key of chunk ``idx`` under the plan's chunk key encoding (scalars: one chunk)."""
    if plan.meta.scalar:
        idx = ()
    enc = plan.zarr_json["chunk_key_encoding"]
    if enc["name"] == _V2_KEYS:
        return enc["configuration"]["separator"].join(map(str, idx)) or "0"
    return "c" + "".join("/" + str(i) for i in idx)


def _pairs(plan: ArrayPlan) -> list[tuple[str, str]]:
    """(source key, target key) of every chunk a reusable array may have, relative to the store."""
    base = plan.path.strip("/")
    rel = (lambda k: f"{base}/{k}") if base else (lambda k: k)
    return [(rel(plan.meta.chunk_key(i)), rel(_v3_key(plan, i))) for i in _grid(plan.meta)]


def _s3_bucket(zs: ZStore) -> tuple[str, str] | None:
    """(service endpoint, bucket) of an S3 store, whatever its credentials or the URL form that named
    it (an ``s3://`` URL takes its endpoint from the AWS environment)."""
    s3 = getattr(zs.store, "store", None)
    if s3 is None or type(s3).__name__ != "S3Store":
        return None
    c = dict(s3.config)
    endpoint = (c.get("endpoint") or c.get("aws_endpoint") or os.environ.get("AWS_ENDPOINT_URL")
                or os.environ.get("AWS_ENDPOINT") or "aws")
    return str(endpoint).rstrip("/"), str(c.get("bucket"))


def overlaps(src: ZStore, target: Any, tso: JSONObject | None = None) -> bool:
    """Whether the write target ``target`` (a ``write.session.Target``, else classified there, with
    ``tso``) is the source store, holds it or lies inside it (a local path or zip, an S3 prefix of
    the same bucket of the same service, a zarr-python Store over one of those)."""
    t = target if isinstance(target, session.Target) else session.classify(target, tso)
    dst: ZStore | None = None
    if t.path is not None:
        b: Path | None = Path(os.path.realpath(os.path.abspath(t.path)))
    else:
        dst = open_store(t.raw, mode="r", storage_options=dict(t.storage_options) if t.storage_options else None)
        b = session.local_place(dst)
    a = session.local_place(src)
    if a is not None or b is not None:
        return a is not None and b is not None and (a == b or a.is_relative_to(b) or b.is_relative_to(a))
    if dst is None or _s3_bucket(src) is None or _s3_bucket(src) != _s3_bucket(dst):
        return False
    pa, pb = src.prefix.strip("/"), dst.prefix.strip("/")
    return pa == pb or not pa or not pb or pa.startswith(pb + "/") or pb.startswith(pa + "/")


def _link_local(src: Path, dst: Path, pairs: list[tuple[str, str]]) -> tuple[int, str]:
    """Hard-link (or, across file systems, copy) each chunk file; never-written chunks are skipped.
    (Plain strings, not pathlib: 10,000 chunks cost the kernel's links, not Python's paths.)"""
    import shutil

    s_root, d_root = os.fspath(src), os.fspath(dst)
    made: set[str] = set()
    n, how = 0, "hard-linked"
    for s, d in pairs:
        target = os.path.join(d_root, d)
        parent = os.path.dirname(target)
        if parent not in made:
            os.makedirs(parent, exist_ok=True)
            made.add(parent)
        try:
            if how == "hard-linked":
                try:
                    os.link(os.path.join(s_root, s), target)
                except FileNotFoundError:
                    raise
                except OSError:
                    how = "copied"  # another file system (or links not allowed): copy from here on
            if how == "copied":
                shutil.copyfile(os.path.join(s_root, s), target)
        except FileNotFoundError:
            continue
        n += 1
    return n, how


def _same_bucket(a: ZStore, b: ZStore) -> bool:
    """Both stores in one S3 bucket (one obstore client can copy between them server side)."""
    sa, sb = getattr(a.store, "store", None), getattr(b.store, "store", None)
    if sa is None or sb is None or type(sa).__name__ != "S3Store" or type(sb).__name__ != "S3Store":
        return False
    ca, cb = dict(sa.config), dict(sb.config)
    keys = ("bucket", "endpoint", "aws_endpoint", "region", "access_key_id", "aws_access_key_id")
    return all(ca.get(k) == cb.get(k) for k in keys)


def _copy_server_side(src: ZStore, dst: ZStore, pairs: list[tuple[str, str]]) -> int:
    """S3 CopyObject for each chunk (nothing read by this process); missing chunks are skipped."""
    import obstore

    from ..zarr_compat import sync

    store = cast(Any, src.store).store  # (an ObjectStore: its obstore store)
    done = 0

    async def run(batch: list[tuple[str, str]]) -> None:
        sem = asyncio.Semaphore(_TRANSFER_CONCURRENCY)

        async def one(s: str, d: str) -> None:
            nonlocal done
            async with sem:
                try:
                    await obstore.copy_async(store, src.full_key(s), dst.full_key(d))
                except FileNotFoundError:
                    return
                done += 1

        await asyncio.gather(*(one(s, d) for s, d in batch))

    for i in range(0, len(pairs), 1024):  # batches, each after the write's claim is checked (set_many's fence)
        dst.check_fence()
        sync(run(pairs[i:i + 1024]))
    return done


def _copy_through(src: ZStore, dst: ZStore, pairs: list[tuple[str, str]]) -> int:
    """GET each chunk and PUT it under its new key (different stores: no server-side copy)."""
    done = 0
    for i in range(0, len(pairs), 256):
        batch = pairs[i:i + 256]
        got = src.get_many([s for s, _ in batch])
        items = [(d, bytes(raw)) for (_, d), raw in zip(batch, got, strict=True) if raw is not None]
        dst.set_many(items)
        done += len(items)
    return done


def stored_chunks(plan: ArrayPlan) -> list[tuple[tuple[int, ...], str]]:
    """(chunk index in the v3 array, the source key relative to the store) of every chunk the
    source may hold (a scalar's one chunk has the index ``()``); never-written ones are absent
    there and read as the fill value, in the source and in the v3 array alike."""
    base = plan.path.strip("/")
    rel = (lambda k: f"{base}/{k}") if base else (lambda k: k)
    return [(() if plan.meta.scalar else idx, rel(plan.meta.chunk_key(idx))) for idx in _grid(plan.meta)]


def _rewrite(src: ZStore, dst: ZStore, plan: ArrayPlan) -> int:
    """Write the rewritten chunks of a non-reusable array (:func:`rewritten_chunks`)."""
    done = 0
    for batch in rewritten_chunks(src, plan):
        dst.set_many([(_rel_v3_key(plan, idx), data) for idx, data in batch])
        done += len(batch)
    return done


def _rel_v3_key(plan: ArrayPlan, idx: tuple[int, ...]) -> str:
    base = plan.path.strip("/")
    return f"{base}/{_v3_key(plan, idx)}" if base else _v3_key(plan, idx)


def rewritten_chunks(src: ZStore, plan: ArrayPlan) -> Iterator[list[tuple[tuple[int, ...], bytes]]]:
    """Decode every written chunk of a non-reusable array (read once) and encode it with its v3
    codecs, in batches of (chunk index, v3 chunk bytes): v2 and v3 chunks are both stored at full
    size, so each maps to one v3 chunk. ``migrate`` writes them; the VirtualiZarr parser inlines them."""
    meta, js = plan.meta, plan.zarr_json
    arr = open_chunked(src, meta, meta.shape, threads=1)
    optional = isinstance(js["data_type"], dict) and js["data_type"]["name"] == "zarrs.optional"
    pipe = V3Pipeline.from_metadata(js["codecs"], data_type=js["data_type"]["configuration"]["name"] if optional
                                    else js["data_type"], dtype=np.dtype(object) if optional else meta.dtype,
                                    chunk_shape=tuple(js["chunk_grid"]["configuration"]["chunk_shape"]),
                                    where=f"{src.display} {plan.path}")
    base = plan.path.strip("/")
    rel = (lambda k: f"{base}/{k}") if base else (lambda k: k)
    grid = list(_grid(meta))
    for i in range(0, len(grid), 64):
        batch = grid[i:i + 64]
        keys = [meta.chunk_key(idx) for idx in batch]
        out = []
        for idx, key, raw in zip(batch, keys, src.get_many([rel(k) for k in keys]), strict=True):
            if raw is None:
                continue  # never written: reads as the fill value in v3 too
            chunk = arr.decode_chunk(bytes(raw), rel(key), meta.chunks)
            if optional:
                chunk = _nullable(chunk, plan.fill)
            out.append((() if meta.scalar else idx, pipe.encode(chunk.reshape(()) if meta.scalar else chunk)))
        yield out


def _decoded_text(plan: ArrayPlan) -> bool:
    """engine="zarr" decodes the array's bytes strictly with its ``_Encoding`` (NC_STRING, NC_CHAR)."""
    return plan.meta.string_kind in ("string", "char") and "_Encoding" in plan.zarr_json["attributes"]


def _utf8_problem(src: ZStore, plan: ArrayPlan) -> str:
    """Why engine="zarr" cannot decode the migrated array (values that are not valid UTF-8, as xarray
    decodes them: NC_STRING each value, joined NC_CHAR each row of characters), or "". Reads every
    chunk, a block of rows at a time."""
    meta = plan.meta
    shape = meta.shape or (1,)
    arr = open_chunked(src, meta, shape, threads=1)
    joined = meta.string_kind == "char" and plan.joined
    # (a 1-D NC_CHAR joined is one string: read whole; else whole rows, a chunk's worth at a time)
    step = shape[0] if joined and len(shape) == 1 else meta.chunks[0] if meta.chunks else 1
    bad, first = 0, ""
    encoding = str(plan.zarr_json["attributes"]["_Encoding"])
    for start in range(0, shape[0], step):
        region = (slice(start, min(shape[0], start + step)), *(slice(0, n) for n in shape[1:]))
        block = arr.read(region)
        if block.dtype.kind == "U":  # netcdf-c <= 4.9.0's <U1 NC_CHAR: one byte an element
            block = np.char.encode(block, "latin-1")
        if joined and block.ndim:
            block = np.ascontiguousarray(block).view(f"S{max(1, block.shape[-1])}").reshape(block.shape[:-1])
        try:
            np.char.decode(block, encoding)  # the common case, every value decodes: no Python loop
            continue
        except UnicodeDecodeError:
            pass
        for idx, v in np.ndenumerate(block):
            try:
                bytes(v).decode(encoding)
            except UnicodeDecodeError:
                bad += 1
                if not first:
                    first = f"element {(start + idx[0], *idx[1:]) if idx else ()} {bytes(v)!r}"
    if not bad:
        return ""
    return (f"engine='zarr' raises UnicodeDecodeError on it: {bad} value(s) are not valid {encoding} (e.g. "
            f"{first}: netcdf-c cut a string longer than its maximum length inside a character, or the text is "
            f"in another encoding), which xarray decodes strictly with _Encoding {encoding!r}; engine='zstrings' "
            "reads them (its utf8_errors='drop' by default drops what does not decode)")


def _nullable(chunk: np.ndarray, fill: Any) -> np.ndarray:
    """A bytes chunk as zarrs' optional type holds it: the elements equal to the source's masked
    fill are None (missing), the others ``bytes``."""
    if isinstance(fill, str):
        fill = fill.encode("utf-8")
    out = np.empty(chunk.shape, dtype=object)
    flat = out.reshape(-1)
    for i, v in enumerate(chunk.reshape(-1).tolist()):
        flat[i] = None if v is None or (fill is not None and v == fill) else bytes(v)
    return out


# ---------------------------------------------------------------------------------------------
# Commit
# ---------------------------------------------------------------------------------------------


def _metadata(arrays: Mapping[str, ArrayPlan], groups: Mapping[str, JSONObject],
              consolidated: bool, zs: ZStore) -> tuple[list[tuple[str, bytes]], tuple[str, bytes]]:
    """(every non-root zarr.json, the root zarr.json): written in that order, the root last."""
    nodes = {node_key(p, "zarr.json").strip("/"): g for p, g in groups.items() if p != "/"}
    nodes.update({node_key(p, "zarr.json").strip("/"): a.zarr_json for p, a in arrays.items()})
    root = dict(groups["/"])
    if consolidated:
        root = _consolidated_root(zs, root, nodes, False)

    def dump(obj: Any) -> bytes:
        return json.dumps(obj, indent=2, allow_nan=True, ensure_ascii=False).encode("utf-8")

    return [(k, dump(v)) for k, v in nodes.items()], ("zarr.json", dump(root))


def _stale_v3(root: Path) -> None:
    """In a clone of a store migrated before: remove its old v3 metadata and rewritten chunks."""
    import shutil

    for dirpath, dirnames, filenames in os.walk(root):
        if "zarr.json" in filenames:
            os.unlink(os.path.join(dirpath, "zarr.json"))
            if ".zarray" in filenames and "c" in dirnames:
                shutil.rmtree(os.path.join(dirpath, "c"))
                dirnames.remove("c")
        if ".zarray" in filenames:
            dirnames[:] = [d for d in dirnames if d.isdigit()]  # an array's "/"-separated chunk folders


def _write(src: ZStore, dst: ZStore, arrays: Mapping[str, ArrayPlan], groups: Mapping[str, JSONObject],
           consolidated: bool, in_place: bool, metadata_first: bool = False,
           put_root: Callable[[bytes], None] | None = None) -> tuple[int, str]:
    """Chunks (unless shared in place), rewritten arrays, then the metadata, the root zarr.json last
    (``metadata_first``: the arrays' metadata before their chunks, as icechunk requires;
    ``put_root``: how the root is written, default ``dst.set_many``)."""
    others, root = _metadata(arrays, groups, consolidated, dst)
    if metadata_first:
        dst.set_many(others)
    n, how = 0, "shared"
    if not in_place:
        pairs = [p for a in arrays.values() if a.reuse for p in _pairs(a)]
        src_root, dst_root = session.local_folder(src), session.local_folder(dst)
        if src_root is not None and dst_root is not None:
            n, how = _link_local(src_root, dst_root, pairs)
        elif _same_bucket(src, dst):
            n, how = _copy_server_side(src, dst, pairs), "copied server-side"
        else:
            n, how = _copy_through(src, dst, pairs), "copied"
    for plan in arrays.values():
        if not plan.reuse:
            _rewrite(src, dst, plan)
    if not metadata_first:
        dst.set_many(others)
    if put_root is None:
        dst.set_many([root])
    else:
        put_root(root[1])
    return n, how


def migrate(
    source: str | os.PathLike[str] | Any,
    target: str | os.PathLike[str] | Any | None = None,
    *,
    mode: NewMode = "w-",
    consolidated: bool = True,
    dry_run: bool = False,
    missing: str | None = None,
    check_utf8: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    target_storage_options: Mapping[str, Any] | None = None,
) -> MigrationReport:
    """Make a Zarr v2 or NCZarr store (any netcdf-c generation) a Zarr v3 store, reusing its chunks.

    ``target=None`` migrates in place: v3 ``zarr.json`` objects beside the v2 metadata, so netcdf-c
    and every v2 reader keep reading it while zarr-python, xarray's engine="zarr", dask and icechunk
    read it as Zarr v3. Otherwise ``target`` (a directory, ``s3://`` URL or zarr-python Store) gets a
    pure Zarr v3 store whose chunks are the source's, hard-linked or copied unchanged (``mode="w"``
    replaces an existing target, ``"w-"`` refuses one). An array whose chunk bytes no v3 codec chain
    decodes unchanged is rewritten; the report says which and why. ``consolidated`` writes the
    hierarchy into the root ``zarr.json`` (one request to open it). ``dry_run`` only plans.

    String values missing in the source stay missing for xarray where the v3 metadata can say so (a
    CF ``missing_value``); where they cannot (bytes), the report names the array (``missing_lost``)
    and, with the default ``missing=None``, nothing is written until the caller chooses:
    ``missing="optional"`` rewrites such arrays into zarrs' nullable ``optional`` type (kept
    missing), ``"values"`` keeps their chunks (the missing values then read as the fill). ``check_utf8`` reads the text arrays given
    ``_Encoding`` and names those engine="zarr" cannot decode (``not_utf8``).

    The read side needs the plugin for NC_CHAR (``xr_zstrings.nc_char``): zarr-python loads it from
    the entry points (3.4.1 and later) or after ``xr_zstrings.zarr_plugin.register()`` (3.1.x).
    """
    if mode not in ("w-", "w"):
        raise ZStringsError(f"Invalid mode={mode!r}: expected 'w-' (never overwrite) or 'w' (replace the target).")
    if missing is not None and missing not in _MISSING_MODES:
        raise ZStringsError(f"Invalid missing={missing!r}: expected 'values' (keep the chunks; missing bytes read as "
                            "the fill) or 'optional' (rewrite such arrays into zarrs' nullable optional type).")
    so = dict(storage_options) if storage_options else None
    if target is None and not dry_run:  # a writer: claimed before it reads what it migrates
        return _migrate_in_place(source, so, consolidated=consolidated, missing=missing, check_utf8=check_utf8)
    src = open_store(source, mode="r", storage_options=so)
    dst = None if target is None else _new_target(src, target, so, target_storage_options)
    arrays, groups, report = _planned(src, open_tree(src), target, missing=missing, check_utf8=check_utf8,
                                      dry_run=dry_run)
    if dst is None or dry_run:
        return report
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # zarr-python: numcodecs.* are not in the v3 spec
        report.chunks_transferred, report.transfer = _commit_new(src, dst, mode, arrays, groups, consolidated)
    return report


def _new_target(src: ZStore, target: Any, so: JSONObject | None,
                target_storage_options: Mapping[str, Any] | None) -> session.Target:
    """``target`` classified (``write.session``; in object storage, the source's ``storage_options``
    unless it has its own), refused when it overlaps the source (a dry run says so too)."""
    t = session.classify(target, dict(target_storage_options) if target_storage_options else None)
    if t.kind == "object" and not target_storage_options and so:
        t = dataclasses.replace(t, storage_options=so)
    if overlaps(src, t):
        raise ZStringsError(
            f"Cannot migrate {src.display} to {t.display}: the target is the source, or holds it, or lies "
            "inside it, and writing it would remove the chunks being migrated. Pass no target to migrate in "
            "place (zstrings migrate SRC), which keeps the source's v2 metadata, or choose another target.")
    return t


def _planned(src: ZStore, tree: TreeMeta, target: Any, *, missing: str | None, check_utf8: bool,
             dry_run: bool) -> tuple[dict[str, ArrayPlan], dict[str, JSONObject], MigrationReport]:
    """The migration of ``tree`` (read from ``src``) and its report; refuses (before anything is
    written) a store whose bytes arrays would lose their missing values while ``missing`` is None."""
    in_place = target is None
    arrays, groups = plan_migration(tree, in_place=in_place, missing=missing or "values")
    report = MigrationReport(
        source=src.display, in_place=in_place,
        target=src.display if in_place else os.fspath(target) if isinstance(target, str | os.PathLike)
        else f"<{type(target).__name__}>",
        reused=sorted(p for p, a in arrays.items() if a.reuse),
        rewritten={p: a.why for p, a in arrays.items() if not a.reuse},
        notes={p: a.notes for p, a in arrays.items() if a.notes}, dry_run=dry_run,
        missing_lost=sorted(p for p, a in arrays.items() if a.missing_lost))
    text = sorted(p for p, a in arrays.items() if _decoded_text(a))
    if check_utf8:
        report.not_utf8 = {p: why for p in text if (why := _utf8_problem(src, arrays[p]))}
    else:
        report.utf8_unchecked = text
    if not dry_run and missing is None and report.missing_lost:  # (said before anything changes, never after)
        raise ZStringsError(
            f"Cannot migrate {src.display} without a choice: the missing values of {len(report.missing_lost)} bytes "
            f"array(s) ({', '.join(report.missing_lost)}) would read as values after migration, because no Zarr v3 "
            "metadata marks a bytes value missing for xarray. Pass missing='optional' (zstrings migrate --missing "
            "optional) to rewrite just those arrays into zarrs' nullable optional type, which keeps them missing, "
            "or missing='values' (--missing values) to keep their chunks, the missing values then reading as the "
            "fill. Nothing was written.")
    return arrays, groups, report


def _migrate_in_place(source: Any, so: JSONObject | None, *, consolidated: bool, missing: str | None,
                      check_utf8: bool) -> MigrationReport:
    """v3 metadata beside the v2 metadata, as a writer like an append: the store is claimed by the
    write session (``write.session``: the writer lock of a local folder, and the journal of kind
    "migrate"; a zip refused) *before* it is read, so the v3 metadata describe the version the claim
    holds, never one an append committed meanwhile; on an exception what it wrote is undone."""
    with session.write_session(source, "a", kind="migrate", writer="migrate", storage_options=so) as s:
        zs = s.zstore
        arrays, groups, report = _planned(zs, open_tree(zs), None, missing=missing, check_utf8=check_utf8,
                                          dry_run=False)
        with warnings.catch_warnings(), local_errors(f"Could not write to {zs.display}"):  # (a full disk: named)
            warnings.simplefilter("ignore", UserWarning)  # zarr-python: numcodecs.* are not in the v3 spec
            report.chunks_transferred, report.transfer = _write_in_place(zs, s.txn, s.folder, arrays, groups,
                                                                         consolidated)
        s.finish()
    return report


def _write_in_place(zs: ZStore, txn: Transaction | None, root: Path | None, arrays: Mapping[str, ArrayPlan],
                    groups: Mapping[str, JSONObject], consolidated: bool) -> tuple[int, str]:
    """Nothing a v2 reader reads changes, so no clone is made: the journal says v3 metadata are being
    written (a recovery removes them: ``write.repair.undo``), an older migration's root zarr.json goes
    first (v3 readers fall back to the v2 metadata until the new root), the arrays' metadata are
    written, and the root last (in the local folder ``root``, by a rename)."""
    if txn is not None:  # (None: a store whose owner commits, which holds no Zarr v2 to migrate)
        txn.record_writes()
    if zs.get_bytes("zarr.json") is not None:
        if root is not None:
            zs.check_fence()  # (files changed directly: the claim checked as for every batch through zs)
            os.unlink(root / "zarr.json")
            _stale_v3(root)
        else:
            _delete(zs, "zarr.json")

    def put_root(data: bytes) -> None:
        assert root is not None
        zs.check_fence()  # (a writer taken over while it stalled must not put a stale root back)
        _replace(root / "zarr.json", data)

    return _write(zs, zs, arrays, groups, consolidated, True, put_root=None if root is None else put_root)


def keep_v3_in_step(zstore: ZStore) -> bool:
    """After a Zarr v2 write committed to a store migrated in place: its v3 metadata written again
    from the v2 metadata, under a claim of their own, so that v3 readers (engine="zarr") see the
    write too; False when there was nothing to do or another writer holds the store (that writer
    brings them in step when it ends: every writer of ours does). The choices of the migration are
    kept: consolidated or not, ``missing="optional"`` where its arrays have zarrs' optional type."""
    zs = ZStore(zstore.store, prefix=zstore.prefix, display=zstore.display, modes=zstore.modes,
                remote=zstore.remote)  # (nothing cached from before the write)
    raw = zs.get_bytes("zarr.json")
    if raw is None or zs.get_bytes(".zgroup") is None:
        return False
    try:
        with session.claimed(zs, "migrate") as txn:  # (under the writer's session: its lock, a claim of its own)
            tree = open_tree(zs)
            old = _v3_objects(zs, tree)
            consolidated = isinstance(old.get("/"), Mapping) and old["/"].get("consolidated_metadata") is not None
            missing = "optional" if "zarrs.optional" in json.dumps(old) else "values"
            arrays, groups = plan_migration(tree, in_place=True, missing=missing)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                _write_in_place(zs, txn, session.local_folder(zs), arrays, groups, consolidated)
            txn.finish()
    except ConcurrentWriteError:
        return False
    except (ZStringsError, OSError) as e:  # (the write itself is committed: said, not raised; a full disk too)
        warnings.warn(f"{zs.display}: the write is committed, but the Zarr v3 metadata this store was migrated in "
                      f"place with could not be written again ({e}), so v3 readers (engine='zarr') may not see it. "
                      f"`zstrings check {zs.display}` names what differs; `zstrings repair {zs.display}` writes them "
                      "again once the cause is fixed.", UserWarning, stacklevel=user_stacklevel())
        return False
    return True


def _v3_objects(zs: ZStore, tree: TreeMeta) -> dict[str, Any]:
    """The v3 metadata beside a v2 tree: node path -> its zarr.json (None: none), the root's included."""
    paths = ["/", *sorted(tree.arrays), *sorted(p for p in tree.groups if p != "/")]
    got = zs.get_json_many([node_key(p, "zarr.json") for p in paths])
    return dict(zip(paths, got, strict=True))


def v3_out_of_step(tree: TreeMeta) -> dict[str, str]:
    """Where the Zarr v3 metadata beside a v2 / NCZarr store (migrated in place) disagree with its v2
    metadata: array path -> what differs (shape, data type, a v3 array missing or left over), in its
    own zarr.json or in the root's consolidated metadata, which engine="zarr" reads. Empty for a
    store without v3 metadata, or in step."""
    zs = tree.store
    if tree.root.zarr_format == 3 or zs.get_bytes("zarr.json") is None:
        return {}
    try:
        plans, _ = plan_migration(tree, in_place=True, missing="values")
    except ZStringsError:
        return {}
    try:
        objs = _v3_objects(zs, tree)
    except ZStringsError as e:  # (a zarr.json that is not JSON: v3 readers fail on it)
        return {"/": f"its Zarr v3 metadata cannot be read ({e})"}
    root = objs.get("/")
    cons = root.get("consolidated_metadata") if isinstance(root, Mapping) else None
    cons_meta = cons.get("metadata") if isinstance(cons, Mapping) else None
    out: dict[str, str] = {}

    def differs(path: str, plan: ArrayPlan, got: Any, where: str) -> str:
        if not isinstance(got, Mapping) or got.get("node_type") != "array":
            return f"{where} has no Zarr v3 array for it (the v2 metadata have it, shape {plan.zarr_json['shape']})"
        if list(got.get("shape") or ()) != list(plan.zarr_json["shape"]):
            return (f"{where} says shape {list(got.get('shape') or ())}, the v2 metadata (.zarray) "
                    f"{list(plan.zarr_json['shape'])}")
        want, have = plan.zarr_json["data_type"], got.get("data_type")
        optional = isinstance(have, Mapping) and have.get("name") == "zarrs.optional"
        if have != want and not optional:
            return f"{where} says data type {have!r}, the v2 metadata {want!r}"
        return ""

    for path, plan in plans.items():
        why = differs(path, plan, objs.get(path), "its zarr.json")
        if not why and isinstance(cons_meta, Mapping):
            why = differs(path, plan, cons_meta.get(path.strip("/")), "the root zarr.json's consolidated metadata")
        if why:
            out[path] = why
    if isinstance(cons_meta, Mapping):
        for key, obj in cons_meta.items():
            path = "/" + str(key).strip("/")
            if isinstance(obj, Mapping) and obj.get("node_type") == "array" and path not in plans:
                out[path] = ("the root zarr.json's consolidated metadata has a Zarr v3 array the v2 metadata no "
                             "longer have")
    return out


def _replace(path: Path, data: bytes) -> None:
    """Write a file whole or not at all: a sibling written, flushed and renamed over it."""
    tmp = path.with_name(f".{path.name}.zstrings-tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _delete(zs: ZStore, key: str) -> None:
    from ..zarr_compat import sync

    sync(zs.store.delete(zs.full_key(key)))


def _commit_new(src: ZStore, target: session.Target, mode: str, arrays: Mapping[str, ArrayPlan],
                groups: Mapping[str, JSONObject], consolidated: bool) -> tuple[int, str]:
    """A new Zarr v3 store at ``target`` through the write session (``write.session``): a local folder
    or zip written beside and swapped in, object storage claimed by its journal (the placeholder root
    first), an icechunk session's store committed by its owner. A zarr-python Store gets its arrays'
    metadata before their chunks (icechunk refuses chunks of an array it does not know yet); the
    root zarr.json is written last, and ends the write."""
    with session.write_session(target, mode, fmt="v3") as s:
        done = _write(src, s.zstore, arrays, groups, consolidated, False,
                      metadata_first=s.target.kind in ("store", "icechunk"))
        s.finish()
    return done
