"""``zstrings check``: read every variable (a sample of the chunks of huge ones) and report what
netcdf-c would fail on or truncate, which netcdf-c versions read the store, and the fix.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..formats.netcdf_c import (
    CURRENT,
    DEFAULT_LAYOUT,
    NETCDF_C,
    NCZarrLayout,
    NetcdfC,
    examples_text,
    layout_named,
    layout_of_generation,
    netcdf_c_for,
    scalar_marker_text,
)
from .common import (
    _NC_DEFAULT_MAXSTRLEN,
    _TARGET_HELP,
    OK,
    PROBLEMS,
    UsageError,
    _describe_layout,
    _one_line,
    _open_tree,
    _store_name,
)

#: the rows in words ("4.9.0, 4.9.1-4.9.3 and >= 4.9.4")
_ROW_NAMES = ", ".join(r.label for r in NETCDF_C[:-1]) + f" and {CURRENT.label}"


@dataclass
class Finding:
    """One thing netcdf-c would fail on or truncate, and how to fix it."""

    where: str
    problem: str
    fix: str


def _suggest_dst(target: str) -> str:
    return f"{_store_name(target)}-nczarr.zarr"


def _row_blocks(meta: Any, budget: int = 32 << 20) -> Iterator[tuple[slice, ...]]:
    """Regions covering the stored array, whole chunks along the first dimension, ~``budget`` bytes."""
    shape = meta.shape
    if not shape:
        yield ()
        return
    row_bytes = max(1, meta.dtype.itemsize if meta.dtype.kind != "O" else 16)
    for n in shape[1:]:
        row_bytes *= max(1, n)
    step = max(meta.chunks[0], (budget // row_bytes) // meta.chunks[0] * meta.chunks[0])
    for start in range(0, shape[0], step):
        yield (slice(start, min(start + step, shape[0])), *(slice(0, n) for n in shape[1:]))


def _utf8_faults(values: Any) -> tuple[int, int, list[str]]:
    """(values ending in a split UTF-8 character, otherwise invalid values, up to 3 examples)."""
    import numpy as np

    split = bad = 0
    examples: list[str] = []
    for raw in np.unique(np.asarray(values).ravel()):
        b = bytes(raw).split(b"\0", 1)[0]
        try:
            b.decode("utf-8")
        except UnicodeDecodeError as e:
            if e.reason == "unexpected end of data" and e.end == len(b):
                split += int(np.count_nonzero(np.asarray(values) == raw))
            else:
                bad += int(np.count_nonzero(np.asarray(values) == raw))
            if len(examples) < 3:
                examples.append(repr(b))
    return split, bad, examples


def _longest_utf8(values: Any) -> tuple[int, int]:
    """(longest UTF-8 length in bytes, number of values longer than netcdf-c's default width)."""
    import numpy as np

    flat = np.asarray(values).ravel()
    if flat.size == 0:
        return 0, 0
    lengths: np.ndarray
    if flat.dtype.kind == "O":
        lengths = np.fromiter(
            (len(v.encode("utf-8", "surrogatepass")) if isinstance(v, str) else len(bytes(v)) for v in flat),
            dtype=np.int64, count=flat.size,
        )
    else:
        enc = np.strings.encode(flat.astype(np.dtypes.StringDType()), "utf-8", "surrogatepass")
        lengths = np.strings.str_len(enc)
    return int(lengths.max()), int(np.count_nonzero(lengths > _NC_DEFAULT_MAXSTRLEN))


#: ``check`` reads arrays up to this size whole; larger ones chunk by chunk
CHECK_WHOLE_BYTES = 32 << 20


#: ``check`` reads at most this many chunks of one array (evenly spread, first and last included)
#: unless ``--full``: a grid of 1e9 chunks is answered in seconds, and says it was sampled
CHECK_SAMPLE_CHUNKS = 2_000


#: a chunk larger than this (decoded) is reported, not read: netcdf-c reads a chunk whole, too
CHECK_MAX_CHUNK_BYTES = 256 << 20


def _check_regions(arr: Any, meta: Any, full: bool, sampled: list[str]) -> Iterator[tuple[slice, ...]]:
    """Regions of ``meta`` for check to read, bounded in memory (one chunk, or ~32 MiB) and, unless
    ``full``, in number (``CHECK_SAMPLE_CHUNKS`` chunks); chunks never written are skipped (they
    read as the fill value). A sample is noted in ``sampled``."""
    shape, chunks = tuple(meta.shape), tuple(arr.chunk_shape)
    itemsize = meta.dtype.itemsize if meta.dtype.kind not in "OT" else 16
    if not shape or math.prod(shape) * itemsize <= CHECK_WHOLE_BYTES:
        yield from _row_blocks(meta)
        return
    grid = tuple(-(-n // c) for n, c in zip(shape, chunks, strict=True))
    total = math.prod(grid)  # Python ints throughout: a grid of 1e9 x 1e9 chunks overflows int64/float64
    if full or total <= CHECK_SAMPLE_CHUNKS:
        flat: Any = range(total)
    else:
        last, n = total - 1, CHECK_SAMPLE_CHUNKS - 1
        flat = sorted({i * last // n for i in range(CHECK_SAMPLE_CHUNKS)})  # evenly spread, first and last
        sampled.append(f"{len(flat):,} of {total:,} chunks")
    batch: list[tuple[int, ...]] = []

    def regions(ixs: list[tuple[int, ...]]) -> Iterator[tuple[slice, ...]]:
        present = arr.store.get_many([arr.chunk_key(ix) for ix in ixs])
        for ix, raw in zip(ixs, present, strict=True):
            if raw is not None:
                yield tuple(slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(ix, chunks, shape, strict=True))

    for f in flat:
        ix = []
        for g in reversed(grid):  # (np.unravel_index: indices up to the int64 range only)
            f, i = divmod(f, g)
            ix.append(i)
        batch.append(tuple(reversed(ix)))
        if len(batch) == 256:
            yield from regions(batch)
            batch = []
    if batch:
        yield from regions(batch)


def _v2_type_finding(meta: Any, where: str, convert: str) -> Finding | None:
    """The Zarr v2 string and bool types for which netcdf-c refuses the whole store."""
    kind = meta.string_kind
    if kind == "unicode":
        return Finding(where, f"{meta.dtype_str} fixed-width UTF-32 strings (as xarray/zarr-python "
                       "write str): netcdf-c refuses to open the whole store ('NetCDF: NCZarr error')",
                       f"{convert}  (NC_STRING |Sn), or write with "
                       "xr_zstrings.with_netcdf_c_strings(ds).to_zarr(...)")
    if kind in ("vlen", "vlen-bytes"):
        return Finding(where, f"|O {kind.replace('vlen', 'vlen-utf8') if kind == 'vlen' else kind} "
                       "variable-length strings (xarray/zarr-python): netcdf-c refuses to open the "
                       "whole store ('NetCDF: NCZarr error')",
                       f"{convert}, or write with xr_zstrings.to_nczarr(ds, ...)")
    if meta.dtype.kind == "b":
        return Finding(where, "bool |b1 has no netCDF type: netcdf-c refuses to open the whole store",
                       "store it as int8/uint8 (ds[name].astype('u1')) and rewrite")
    return None


def _codec_finding(meta: Any, where: str, convert: str, netcdf_c_codecs: frozenset[str]) -> Finding | None:
    """The Zarr v2 codecs netcdf-c cannot decode."""
    codec_ids = ([meta.compressor.get("id")] if meta.compressor else []) + [
        f.get("id") for f in meta.filters if f.get("id") not in ("vlen-utf8", "vlen-bytes")]
    unreadable = [str(c) for c in codec_ids if c not in netcdf_c_codecs and c != "shuffle"]
    if not unreadable:
        return None
    return Finding(where, f"codec {', '.join(unreadable)}: netcdf-c (netCDF4 wheel) cannot decode "
                   "it ('NetCDF: Filter error: undefined filter encountered')",
                   f"{convert} --compressor zstd  (netcdf-c reads zlib, zstd, bz2 or blosc)")


def _chunk_size_finding(arr: Any, meta: Any, where: str, convert: str) -> Finding | None:
    """Chunks too large to read for the check (netcdf-c reads a chunk whole, too)."""
    itemsize = meta.dtype.itemsize if meta.dtype.kind not in "OT" else 16
    chunk_bytes = math.prod(arr.chunk_shape) * max(itemsize, 1)
    if not meta.shape or chunk_bytes <= CHECK_MAX_CHUNK_BYTES:
        return None
    return Finding(where, f"chunks of {chunk_bytes:,} bytes each ({list(arr.chunk_shape)} x "
                   f"{meta.dtype.str}): too large to check, and netcdf-c reads a chunk whole",
                   f"{convert}  (it writes chunks of ~4 MiB)")


@dataclass
class _ValueScan:
    """What reading one array's values found: the counts check's value findings quote."""

    split: int = 0  # values ending in a split UTF-8 character
    bad: int = 0  # otherwise invalid UTF-8 values
    full: int = 0  # |Sn values filling all n bytes
    longest: int = 0  # longest value, UTF-8 bytes
    over: int = 0  # values longer than netcdf-c's default maxstrlen
    examples: list[str] = field(default_factory=list)

    def add_stored_bytes(self, raw: Any, kind: str, itemsize: int) -> None:
        """NC_STRING (``|Sn``) or NC_CHAR values (``|S1``, a string along the last axis)."""
        import numpy as np

        if kind == "char":
            raw = np.ascontiguousarray(raw).view(f"S{raw.shape[-1] or 1}")[..., 0] if raw.ndim else raw
        s, b, ex = _utf8_faults(raw)
        self.split, self.bad = self.split + s, self.bad + b
        self.examples += ex[: 3 - len(self.examples)]
        if kind == "string":
            self.full += int(np.count_nonzero(np.strings.str_len(raw) == itemsize))

    def add_text(self, raw: Any) -> None:
        """Text values (variable-length or fixed-width UTF-32): their UTF-8 lengths."""
        lg, ov = _longest_utf8(raw)
        self.longest, self.over = max(self.longest, lg), self.over + ov


def _scan_values(arr: Any, meta: Any, full_read: bool, sampled: list[str]) -> _ValueScan:
    """Read the regions ``_check_regions`` picks and count what the value findings need."""
    v3 = meta.zarr_format == 3
    kind = meta.string_kind
    scan = _ValueScan()
    for region in _check_regions(arr, meta, full_read, sampled):
        raw = arr.read(region) if region else arr.read(tuple(slice(0, n) for n in meta.shape))
        if not v3 and kind in ("string", "char"):
            scan.add_stored_bytes(raw, kind, meta.dtype.itemsize)
        elif kind in ("vlen", "unicode") or (v3 and kind == "vlen-bytes"):
            scan.add_text(raw)
    return scan


def _written_by_netcdf_c(tree: Any) -> bool:
    """Whether the root's ``_NCProperties`` names a writer other than this package."""
    props = tree.root.nc_properties
    return props is not None and "xr_zstrings" not in props


def _value_findings(scan: _ValueScan, tree: Any, meta: Any, where: str) -> list[Finding]:
    """The findings of what ``_scan_values`` counted, in order: split UTF-8, invalid UTF-8, values
    filling netcdf-c's default width, values longer than it."""
    out: list[Finding] = []
    if scan.split:
        out.append(Finding(where, f"{scan.split} value(s) end in a split UTF-8 character (cut at a byte, as "
                           f"netcdf-c truncates NC_STRING; e.g. {', '.join(scan.examples)}): netCDF4-python "
                           "raises UnicodeDecodeError reading this variable",
                           "rewrite from the original data with a wider maxstrlen (zstrings convert "
                           "--maxstrlen N, or to_nczarr(..., on_overflow='widen')); engine='zstrings' reads "
                           "it as is (utf8_errors='drop')"))
    if scan.bad:
        out.append(Finding(where, f"{scan.bad} value(s) are not valid UTF-8: netCDF4-python cannot decode them",
                           "rewrite the values as UTF-8 (engine='zstrings', utf8_errors='replace' shows them)"))
    if (meta.string_kind == "string" and meta.zarr_format != 3 and scan.full
            and meta.dtype.itemsize == _NC_DEFAULT_MAXSTRLEN and _written_by_netcdf_c(tree)):
        out.append(Finding(where, f"{scan.full} value(s) fill netcdf-c's default width of {_NC_DEFAULT_MAXSTRLEN} "
                           "bytes exactly: netcdf-c probably cut them when it wrote the store",
                           "rewrite from the original data with a wider maxstrlen "
                           "(_nczarr_maxstrlen, or zstrings convert --maxstrlen N)"))
    if scan.over:
        out.append(Finding(where, f"{scan.over} value(s) are longer than netcdf-c's default maxstrlen "
                           f"{_NC_DEFAULT_MAXSTRLEN} (longest {scan.longest} bytes): a copy made by netcdf-c "
                           "(nccopy) would cut them at a byte",
                           f"convert with zstrings (the width is the longest value) or pass --maxstrlen "
                           f"{max(scan.longest, _NC_DEFAULT_MAXSTRLEN)}"))
    return out


def _check_array(tree: Any, meta: Any, target: str, netcdf_c_codecs: frozenset[str], *, full_read: bool = False,
                 sampled: list[str] | None = None) -> list[Finding]:
    """Read one array (or, when it is huge, a sample of its chunks: noted in ``sampled``) and
    return what netcdf-c would fail on or truncate: its type and codecs (Zarr v2), then its chunk
    size, then its values."""
    from ..read.chunked import open_chunked

    where = meta.path
    convert = f"zstrings convert {target} {_suggest_dst(target)}"
    out: list[Finding] = []
    if meta.zarr_format != 3:
        out += [f for f in (_v2_type_finding(meta, where, convert),
                            _codec_finding(meta, where, convert, netcdf_c_codecs)) if f is not None]
    arr = open_chunked(tree.store, meta, meta.shape)
    too_large = _chunk_size_finding(arr, meta, where, convert)
    if too_large is not None:
        return [*out, too_large]
    scan = _scan_values(arr, meta, full_read, sampled if sampled is not None else [])
    return out + _value_findings(scan, tree, meta, where)


def _depth_findings(tree: Any) -> list[Finding]:
    """Groups nested deeper than a netcdf-c release opens (NCZarr stores; the table's ``max_depth``:
    the only release measured to fail)."""
    if not tree.root.is_nczarr:
        return []
    deepest = max(tree.groups, key=lambda p: p.count("/") if p != "/" else 0)
    depth = deepest.count("/") if deepest != "/" else 0
    out = []
    for release, max_depth, others in (r.max_depth for r in NETCDF_C if r.max_depth is not None):
        if depth <= max_depth:
            continue
        shown = deepest if len(deepest) <= 80 else deepest[:60] + "..." + deepest[-16:]
        out.append(Finding(shown, f"groups nested {depth} deep: netcdf-c {release} aborts the process opening the "
                           f"store (it opens at most {max_depth} levels; netcdf-c {others} read it)",
                           f"move the deepest groups up to at most {max_depth} levels and rewrite, "
                           f"or read it with netcdf-c {others}"))
    return out


def _open_findings(tree: Any) -> list[Finding]:
    """What ``xr.open_dataset(target, engine="zstrings", group=...)`` raises for each group (the
    backend's own open, on the tree check read): nothing the open refuses passes check."""
    from ..backend import open_group

    out = []
    for path in sorted(tree.groups, key=lambda p: (p.count("/") if p != "/" else 0, p)):
        try:
            open_group(tree, path)
        except Exception as e:  # noqa: BLE001 - whatever the open raises is the finding
            group = "" if path == "/" else f", group={path!r}"
            out.append(Finding(path, f"xr.open_dataset(..., engine='zstrings'{group}) raises "
                               f"{type(e).__name__}: {_one_line(e)}",
                               "repair what the error names (the store's metadata), or rewrite the store "
                               "from its source"))
    return out


def _names_of(tree: Any) -> list[tuple[str, str, str]]:
    """Every group, dimension and variable name of the tree as (parent group, what, name)."""
    names: list[tuple[str, str, str]] = []
    for path, group in tree.groups.items():
        if path != "/":
            names.append((path.rsplit("/", 1)[0] or "/", "group", path.rsplit("/", 1)[1]))
        names += [(path, "dimension", d) for d in group.dimensions]
    for path, meta in tree.arrays.items():
        parent = path.rsplit("/", 1)[0] or "/"
        names.append((parent, "variable", meta.name))
        if meta.zarr_format == 2:  # (netcdf-c reads no Zarr v3)
            names += [(parent, "dimension", str(d)) for d in meta.dimension_names or ()]
    return names


def _escaped_metadata(tree: Any, names: list[tuple[str, str, str]]) -> bytes:
    """The metadata objects' raw bytes (NUL-joined) when a name needs a \\u escape in JSON, else b"".

    netcdf-c's JSON parser keeps \\uXXXX escapes as text: a non-ASCII name that a writer escaped
    (zarr-python and xarray do) comes out as 'u00e9' (or crashes netcdf-c when long)."""
    import json

    if not any("\\u" in json.dumps(n) for _, _, n in names):
        return b""
    keys = [f"{p.strip('/')}/{o}".lstrip("/") for p in [*tree.groups, *tree.arrays]
            for o in (".zattrs", ".zgroup", ".zarray")]
    return b"\0".join(b for b in tree.store.get_many(keys) if b)


def _name_rule(name: str, what: str, mode: str, raw: bytes) -> str | None:
    """Why netcdf-c cannot open ``name`` (a ``what``: group, dimension, variable), or None."""
    import json

    from ..formats.nczarr import netcdf_c_name_problem

    rule = netcdf_c_name_problem(name, mode=mode, role=what)
    escaped = json.dumps(name)[1:-1]
    if rule is None and "\\u" in escaped and escaped.encode() in raw:
        rule = (r"the metadata spells it with \u escapes, which netcdf-c reads as text "
                f"({escaped!r}: the name is not found, a long one crashes it)")
    return rule


def _name_findings(tree: Any) -> list[Finding]:
    """Group, variable and dimension names netcdf-c cannot open (the rules the writers apply)."""
    mode = "nczarr" if tree.root.is_nczarr else "zarr"
    out: list[Finding] = []
    seen: set[tuple[str, str, str]] = set()
    names = _names_of(tree)
    raw = _escaped_metadata(tree, names)
    for where, what, name in names:
        rule = _name_rule(name, what, mode, raw)
        if rule is not None and (what, where, name) not in seen:
            seen.add((what, where, name))
            out.append(Finding(where, f"{what} name {name!r}: {rule}",
                               "rename it (xr.open_dataset(..., engine='zstrings').rename({old: new})) and "
                               "rewrite with to_nczarr"))
    return out


def netcdf_c_verdicts(tree: Any, target: str, whole_store: str = "") -> list[tuple[str, bool, str, str]]:
    """Per row of netcdf-c releases (``formats.netcdf_c.NETCDF_C``: 4.9.0, 4.9.1-4.9.3, >= 4.9.4):
    whether it reads the store, what it cannot read or what the fix loses, and the command that
    fixes it.

    The rules are the table's (which layouts each reads, what it cannot hold, the scalar marker it
    needs), which tests/interop/test_netcdf_c_versions.py measures with each netcdf-c (and checks
    this function against). ``whole_store`` names a problem that makes every netcdf-c refuse the
    store (check's findings).
    """
    root = tree.root
    arrays = list(tree.arrays.values())
    unlimited = sorted({d.name for g in tree.groups.values() for d in g.dimensions.values() if d.unlimited})
    store = _Store(arrays=arrays, unlimited=unlimited, scalars=[a for a in arrays if a.scalar],
                   nc_string=any(a.string_kind == "string" for a in arrays),
                   text=any(a.string_kind in ("string", "unicode", "vlen") for a in arrays))
    fixes = {r.label: _fix(r, target, store) for r in NETCDF_C}
    if root.zarr_format == 3 or whole_store:
        why = "Zarr v3: 'NetCDF: Unknown file format'" if root.zarr_format == 3 else whole_store
        return [(r.label, False, why, fixes[r.label]) for r in NETCDF_C]
    if not root.is_nczarr:
        pure = "with #mode=zarr (no NCZarr groups or shared dimensions)"
        return [(r.label, False, f"NC_STRING in pure Zarr v2: {r.crashes}", fixes[r.label])
                if store.nc_string and not r.nc_string else (r.label, True, pure, "") for r in NETCDF_C]
    layout = layout_of_generation(root.generation)
    assert layout is not None, root.generation
    return [_verdict(r, layout, store, fixes[r.label], _fix(CURRENT, target, store)) for r in NETCDF_C]


@dataclass
class _Store:
    """What of a store decides whether a netcdf-c reads it."""

    arrays: list[Any]
    unlimited: list[str]
    scalars: list[Any]
    nc_string: bool
    text: bool


def _fix(reader: NetcdfC, target: str, store: _Store) -> str:
    """The command that makes ``target`` a store ``reader`` reads, and what it loses: the default
    target where that serves ``reader``, else ``--netcdf-c`` its first release."""
    dst = _suggest_dst(target)
    if reader.reads_layout(DEFAULT_LAYOUT) and reader.unlimited:
        return f"zstrings convert {target} {dst}"
    losses = []
    if store.text and not reader.nc_string:
        losses.append("strings become NC_CHAR")
    if store.scalars and reader.scalar_marker is None:
        losses.append("scalars become 1-element arrays")
    if store.unlimited and not reader.unlimited:
        losses.append(f"unlimited {store.unlimited} become fixed")
    return f"zstrings convert {target} {dst} --netcdf-c {reader.first}" + (
        f"  (then: {', '.join(losses)})" if losses else "")


def _verdict(reader: NetcdfC, layout: NCZarrLayout, store: _Store, fix: str,
             fix_default: str) -> tuple[str, bool, str, str]:
    """One row of ``netcdf_c_verdicts`` for an NCZarr store in ``layout``."""
    if not reader.reads_layout(layout):
        return reader.label, False, f"{layout.title}: {reader.refuses}", fix
    if not layout.writes_as:  # a layout no writer writes (NCZarr 1.0): read as its netcdf-c wrote it
        return reader.label, True, "", ""
    if ((store.scalars and reader.scalar_marker is None) or (store.unlimited and not reader.unlimited)
            or (store.nc_string and not reader.nc_string)):
        return reader.label, False, reader.cannot_hold.format(unlimited=store.unlimited), fix
    own = layout_named(layout.writes_as)
    if reader.scalar_marker is not None and own.obj("array") == ".zarray":
        key, value = reader.scalar_marker

        def marked(a: Any) -> bool:
            info = a.raw_zarray.get(own.key("array")) if isinstance(a.raw_zarray, Mapping) else None
            got = info.get(key) if isinstance(info, Mapping) else None
            return bool(got) if isinstance(value, int) else got == value

        if not all(marked(a) for a in store.scalars):  # the default target writes every marker
            return (reader.label, False, f"scalars without {scalar_marker_text(reader)}: {reader.crashes}",
                    fix_default)
    return reader.label, True, "", ""


def _unread_finding(tree: Any, path: str, why: str) -> Finding:
    """An array the reader leaves out of its Dataset (a data type or codec xr_zstrings does not
    decode): why, and whether engine='zstrings' still reads it through zarr-python."""
    try:
        import numpy as np
        import zarr

        arr = zarr.open_array(tree.store.store, path=tree.store.full_key(path.strip("/")), mode="r")
        np.dtype(arr.dtype)  # zarr-python's own extension types have no numpy dtype: not read
        how = "engine='zstrings' reads it through zarr-python"
    except Exception as e:  # noqa: BLE001 - zarr-python cannot either: say so
        how = f"zarr-python cannot read it either ({type(e).__name__}), so engine='zstrings' leaves it out"
    return Finding(path, f"{_one_line(why).rstrip('.')}. So {how}. Not checked for netcdf-c",
                   "rewrite it with a netCDF data type and a codec netcdf-c reads (zlib, zstd, bz2, blosc)")


def _commit_state(target: str) -> tuple[str, str] | None:
    """(the store's commit state, what ``zstrings repair`` would do), in words; None for what is not
    a store written in place (a netCDF file: the caller's error says so)."""
    from ..io.commit import JOURNAL_REFUSED, JournalError, inspect_store
    from ..io.store import open_store
    from .common import _is_netcdf_file

    if _is_netcdf_file(target):
        return None
    try:
        zstore = open_store(target)
        state = inspect_store(zstore)
    except JournalError as e:  # not a journal: repair and every writer refuse the store
        return _JournalState((e.found, JOURNAL_REFUSED))
    except Exception:  # noqa: BLE001 - the open that follows reports what is wrong with the target
        return None
    if state.foreign is not None:
        return _JournalState(state.describe())
    return _drift_state(zstore, state) or state.describe()


def _drift_state(zstore: Any, state: Any) -> tuple[str, str] | None:
    """A complete Zarr v2 store whose objects another tool changed without keeping ``.zmetadata``
    or the root's NCZarr keys in step (``io.drift``): every object compared; one of them that is not
    metadata (``_UnreadableState``)."""
    from ..errors import MetadataError
    from ..io.drift import find_drift

    action = state.describe()[1]
    if state.journal is not None or state.fmt != "v2" or not (action == "nothing to do" or "re-consolidate" in action):
        return None
    try:
        drift = find_drift(zstore, state.consolidated, state.root_obj)
    except MetadataError as e:  # (the open that follows reads .zmetadata: it would not say so)
        what = (f"{state.describe()[0]}, but {_one_line(e).rstrip('.')}: readers of the objects (zarr-python without "
                "consolidated metadata, netcdf-c) fail on it")
        return _UnreadableState((what, f"refuses it: {_UNREADABLE_FIX}"))
    except Exception:  # noqa: BLE001 - the open that follows reports what is wrong with the objects
        return None
    return _DriftState.of(drift.describe(), drift) if drift else None


#: what to do about a metadata object that is not one (``_UnreadableState``): ``repair`` fails on it too
_UNREADABLE_FIX = ("put that object back from a copy of the store (or remove it when it is a .zattrs), then "
                   "`zstrings repair` re-consolidates")


class _UnreadableState(tuple[str, str]):
    """A commit state of a complete store one of whose metadata objects cannot be read: a problem."""


class _JournalState(tuple[str, str]):
    """A commit state that is a journal nothing acts on (``io.commit.JournalError``): a problem."""


class _DriftState(tuple[str, str]):
    """A commit state of objects another tool changed out of step (``io.drift.Drift``): a problem."""

    drift: Any

    @classmethod
    def of(cls, described: tuple[str, str], drift: Any) -> _DriftState:
        out = cls(described)
        out.drift = drift
        return out


def _drift_findings(state: tuple[str, str] | None, target: str) -> list[Finding]:
    """The problems of a ``_DriftState``: the root's lost keys, the stale consolidated metadata."""
    from ..io.drift import HIDDEN

    if not isinstance(state, _DriftState):
        return []
    d, out = state.drift, []
    for key, lost in sorted(d.lost.items()):
        effect = ("netcdf-c and engine='zstrings' read the store as pure Zarr, without its NCZarr dimensions"
                  if key == ".zgroup" else "netcdf-c refuses the store ('NCZarr error')"
                  if key.endswith(".zarray") else "")
        out.append(Finding("/" + key if key.startswith(".") else key,
                           f"lost {', '.join(lost)} (another tool rewrote it){': ' + effect if effect else ''}",
                           f"zstrings repair {target} (puts them back from {d.source})"))
    for dim, n in sorted(d.grown.items()):
        out.append(Finding(dim, f"an array on this unlimited dimension has {n} elements, more than its size (another "
                           "tool appended to that array alone): readers refuse the store once .zmetadata shows it",
                           f"zstrings repair {target} (grows the dimension, and the other arrays on it with fill)"))
    for path in d.hidden:
        out.append(Finding(path, HIDDEN,
                           f"zstrings repair {target} (lists it, its dimensions from _ARRAY_DIMENSIONS)"
                           if path in d.adopted else "give it _ARRAY_DIMENSIONS naming every axis, then "
                           f"zstrings repair {target}"))
    if d.differ:
        out.append(Finding(".zmetadata", d.stale_text(), f"zstrings repair {target} (re-consolidates)"))
    return out


def _open_with_state(target: str, shown: str) -> tuple[Any, tuple[str, str] | None]:
    """(the store's tree, its commit state); (None, state) when no reader can open the store and
    its state says why (an interrupted write, printed with what ``repair`` does)."""
    from ..errors import ZStringsError

    state = _commit_state(target)
    try:
        return _open_tree(target), state
    except ZStringsError as e:
        if state is None or state[0].startswith("complete"):
            raise
        _print_state(f"check {shown}: no version readers can open ({_one_line(e)})", state)
        return None, state


def _print_state(head: str, state: tuple[str, str] | None) -> None:
    print(head)
    if state is not None:
        print(f"state: {state[0]}")
        print(f"    repair: {state[1]}")


def _print_migration(tree: Any) -> None:
    """Whether ``zstrings migrate`` makes the store Zarr v3 writing metadata only (and why not)."""
    from ..errors import ZStringsError
    from ..write.migrate import plan_migration

    if tree.root.zarr_format == 3:
        return
    if tree.unreadable:
        print(f"Zarr v3 migration: not possible while {', '.join(sorted(tree.unreadable))} cannot be read (above)")
        return
    try:
        arrays, _ = plan_migration(tree, in_place=True)
    except ZStringsError as e:
        print(f"Zarr v3 migration: not possible: {_one_line(e)}")
        return
    rewrite = {p: a.why for p, a in arrays.items() if not a.reuse}
    lost = sorted(p for p, a in arrays.items() if a.missing_lost)
    if lost:  # (write/migrate.py: no Zarr v3 metadata marks a bytes value missing for xarray)
        print(f"Zarr v3 migration: the missing values of {len(lost)} bytes array(s) would read as values "
              f"({', '.join(lost)}): zstrings migrate --missing optional keeps them missing")
    if not rewrite:
        print(f"Zarr v3 migration: metadata only (zstrings migrate {tree.store.display}): every array keeps its "
              "chunks")
        return
    print(f"Zarr v3 migration: {len(rewrite)} of {len(arrays)} array(s) must be rewritten (zstrings migrate "
          "rewrites them, the rest keep their chunks):")
    for path, why in sorted(rewrite.items()):
        print(f"  {path}: {why}")


def _store_findings(tree: Any, target: str, state: tuple[str, str] | None) -> list[Finding]:
    """What is wrong with the store as a whole: a layout netcdf-c does not open, names and depths it
    refuses, what ``open_dataset`` raises, a journal nothing acts on."""
    findings: list[Finding] = []
    if isinstance(state, _JournalState):  # (its state line says what is wrong with it)
        findings.append(Finding(".zstrings-journal", "a journal that repair and every writer refuse to act on",
                                "remove it if you know no writer is running"))
    if isinstance(state, _UnreadableState):  # (its state line names the object)
        findings.append(Finding("metadata", "an object that is not readable metadata", _UNREADABLE_FIX))
    findings += _drift_findings(state, target)
    findings += _leftover_findings(target)
    if tree.root.zarr_format == 3:
        findings.append(Finding("/", f"Zarr v3 store: netcdf-c {CURRENT.example} does not open it ('NetCDF: "
                                "Unknown file format')", f"zstrings convert {target} {_suggest_dst(target)}"))
    else:
        findings += _name_findings(tree) + _depth_findings(tree) + _v3_findings(tree, target)
    return findings + _open_findings(tree)  # (the variables' values are read by _array_findings)


def _leftover_findings(target: str) -> list[Finding]:
    """The temporary files a killed writer or ``repair`` left in a local store or beside it (what
    ``zstrings repair`` removes: ``io.atomic.leftover_temporaries``, ``leftovers_beside``)."""
    from pathlib import Path

    from ..io.atomic import leftover_temporaries, leftovers_beside, lock_held
    from ..io.targets import local_target

    local = local_target(target)
    if local is None or local[1] or not local[0].is_dir():
        return []
    path = Path(os.path.abspath(local[0]))
    if lock_held(path):  # a write under way: what is there is its own
        return []
    inside = [q.relative_to(path).as_posix() for q in leftover_temporaries(path)]
    beside = [f"../{q.name}" for q in leftovers_beside(path)]
    return [Finding(name, "a temporary file an interrupted write or repair left (no version readers see holds it)",
                    f"zstrings repair {target} removes it") for name in inside + beside]


def _v3_findings(tree: Any, target: str) -> list[Finding]:
    """A store migrated in place whose Zarr v3 metadata (what engine="zarr" reads) disagree with its
    v2 metadata: v3 readers see another version than v2 readers (``migrate.v3_out_of_step``)."""
    from ..write.migrate import v3_out_of_step

    return [Finding(path, f"its Zarr v3 metadata disagree with the v2 metadata: {why}, so engine='zarr' and "
                    "zarr-python read another version than engine='zstrings' and netcdf-c",
                    f"zstrings repair {target} (writes the v3 metadata again from the v2 metadata)")
            for path, why in sorted(v3_out_of_step(tree).items())]


def _print_finding(f: Finding, *, under_its_line: bool = False) -> None:
    """A problem and its fix: on a ``PROBLEM where: ...`` line of its own, or indented under the
    line its array already printed."""
    print(f"    {f.problem}" if under_its_line else f"PROBLEM {f.where}: {f.problem}")
    print(f"    fix: {f.fix}")


def _array_findings(tree: Any, target: str, full: bool) -> tuple[list[Finding], int]:
    """Each array's values checked (a line each, printed as it is read) and the arrays the reader
    leaves out; returns the problems and how many arrays were checked on a sample of their chunks."""
    from ..errors import ZStringsError
    from ..write.nczarr import NETCDF_C_CODECS

    findings: list[Finding] = []
    n_sampled = 0
    for path in sorted(tree.arrays):
        meta = tree.arrays[path]
        sampled: list[str] = []
        try:
            found = _check_array(tree, meta, target, NETCDF_C_CODECS, full_read=full, sampled=sampled)
        except ZStringsError as e:
            found = [Finding(path, f"cannot be read: {_one_line(e)}", "rewrite the variable from its source")]
        findings += found
        n_sampled += bool(sampled)
        note = f"  (sampled: read {sampled[0]}; --full reads all)" if sampled else ""
        print(f"{'PROBLEM' if found else 'ok':8}{path}{note}")
        for f in found:
            _print_finding(f, under_its_line=True)
    for path in sorted(tree.unreadable):  # left out of the Dataset (or read through zarr-python)
        f = _unread_finding(tree, path, tree.unreadable[path])
        findings.append(f)
        print(f"{'PROBLEM':8}{path}  (not read: xr_zstrings does not decode it)")
        _print_finding(f, under_its_line=True)
    return findings, n_sampled


def _print_versions(tree: Any, target: str, findings: list[Finding], required: set[str]) -> list[str]:
    """The netcdf-c versions' verdicts; returns those that must read the store (--netcdf-c) and do not."""
    print("netcdf-c versions (what the wheels' netcdf-c measured; compressed variables also need the "
          "netcdf-c build's filter plugins):")
    whole = next((f"{f.where} {f.problem.split(': ', 1)[0]}: netcdf-c refuses the whole store" for f in findings
                  if "whole store" in f.problem), "")
    failing = []
    for version, reads, note, fix in netcdf_c_verdicts(tree, target, whole):
        print(f"  {version:12}{'reads' if reads else 'FAILS'}{': ' + note if note else ''}")
        if not reads:
            print(f"  {'':12}fix: {fix}")
            if version in required:
                failing.append(version)
    return failing


def _cmd_check(args: argparse.Namespace) -> int:
    from ..io.redact import redact

    required = _required_rows(args.netcdf_c)  # (a bad --netcdf-c is refused before the store is read)
    target = redact(args.target)  # as the fixes name it
    tree, state = _open_with_state(args.target, target)
    if tree is None:
        return PROBLEMS
    findings = _store_findings(tree, target, state)
    _print_state(f"check {tree.store.display}: {_describe_layout(tree)}", state)
    for f in findings:
        _print_finding(f)
    found, n_sampled = _array_findings(tree, target, args.full)
    findings += found
    failing = _print_versions(tree, target, findings, required)
    _print_migration(tree)
    n = len(tree.arrays)
    sample_note = (f" ({n_sampled} variable(s) checked on a sample of their chunks; --full reads every chunk)"
                   if n_sampled else "")
    if tree.unreadable:
        print(f"{n} variable(s) read, {len(tree.unreadable)} not read (xr_zstrings does not decode them), "
              f"{len(findings)} problem(s) (above).")
        return PROBLEMS
    if findings:
        print(f"{n} variable(s) read, {len(findings)} problem(s) (above).{sample_note}")
        return PROBLEMS
    if failing == [CURRENT.label]:  # e.g. netcdf-c 4.9.0's layout or NCZarr 1.0: only older versions read it
        print(f"{n} variable(s) read, no problems in the data, but netcdf-c {CURRENT.example} does not read this store's "
              f"layout (which versions do, and the fix: above).{sample_note}")
        return PROBLEMS
    if failing:  # an older netcdf-c that --netcdf-c says must read it
        print(f"{n} variable(s) read, no problems in the data, but netcdf-c {', '.join(failing)} does not read "
              f"this store, and --netcdf-c {args.netcdf_c} says it must (why, and the fix: above).{sample_note}")
        return PROBLEMS
    if n_sampled:
        print(f"{n} variable(s) read, no problems in what was read: netcdf-c reads this store as far as "
              f"checked.{sample_note}")
        return OK
    print(f"{n} variable(s) read, no problems: netcdf-c {CURRENT.example} reads this store as it is (older "
          "versions: above).")
    return OK


def _required_rows(netcdf_c: str | None) -> set[str]:
    """The verdict rows that must read the store for exit code 0: netcdf-c ``netcdf_c`` and every
    newer one (default: the current netcdf-c only, the last row)."""
    if netcdf_c is None:
        return {CURRENT.label}
    try:
        oldest = netcdf_c_for(netcdf_c)
    except ValueError:  # (ZStringsError) before 4.9.0, or not a version
        raise UsageError(f"--netcdf-c {netcdf_c}: expected a netcdf-c version from {NETCDF_C[0].first} on "
                         f"(check knows the layouts those read), such as {examples_text()}.") from None
    return {r.label for r in NETCDF_C[NETCDF_C.index(oldest):]}


def add_parser(sub: Any) -> None:
    """Add the 'check' subcommand to ``sub``, the ``zstrings`` parser's subparsers."""
    p = sub.add_parser("check", help="report what netcdf-c would fail on or truncate",
                       description="Read every variable and report what netcdf-c would fail on or "
                                   "truncate (xarray-written <U/vlen strings, Zarr v3, codecs it lacks, "
                                   "split UTF-8, strings longer than maxstrlen) and how to fix it, then "
                                   f"whether netcdf-c {_ROW_NAMES} read the store and the "
                                   "command that fixes it for each. Exit code 1 when problems are found: "
                                   "in the data, or a netcdf-c that must read the store (the current one, or "
                                   "--netcdf-c VERSION and newer) does not.")
    p.add_argument("target", metavar="PATH_OR_URL", help=_TARGET_HELP)
    p.add_argument("--full", action="store_true",
                   help=f"read every chunk (default: at most {CHECK_SAMPLE_CHUNKS:,} chunks of a variable, "
                        "evenly spread, and say so)")
    p.add_argument("--netcdf-c", dest="netcdf_c", metavar="VERSION", default=None,
                   help=f"the oldest netcdf-c that must read the store, for the exit code (e.g. {examples_text()}); "
                        f"default: the current netcdf-c ({CURRENT.label}) only. Every "
                        "version's verdict is printed either way")
    p.set_defaults(func=_cmd_check)
