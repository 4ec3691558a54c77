"""Write xarray objects as NCZarr 2 (exactly as netcdf-c 4.10 lays it out) or pure Zarr v2.

``to_nczarr`` turns a ``Dataset``, a ``DataTree`` or a mapping of group paths to Datasets into a store
that netcdf-c (``netCDF4.Dataset(url, "r")``, ``ncdump``) and ``engine="zstrings"`` both read back:

* strings become NC_STRING ``|Sn`` (``n`` = ``_nczarr_maxstrlen``), or NC_CHAR ``>S1`` with a
  string-length dimension when ``encoding["nc_type"] == "NC_CHAR"`` (or ``encoding["dtype"]`` is
  ``S1``, as xarray spells it);
* nothing is cut unless asked: a value longer than the width raises (``on_overflow="error"``), is cut
  at a UTF-8 character boundary with a warning (``"truncate"``), or widens the width (``"widen"``);
* chunks are written first and the metadata last, committed by ``io.commit``'s protocol: a local
  target is written beside it and swapped in (appends change it in place, journaled); object storage
  is claimed, and consolidated ``.zmetadata`` (the form netcdf-c 4.10 reads) is the commit point, so
  an interrupted write is never half visible and ``repair`` completes or undoes it;
* dask-backed variables are written block by block in parallel, never loaded whole.

Everything string-specific reuses ``strings`` (encoders and truncation policies) and ``codecs``
(numcodecs plus netcdf-c's HDF5 shuffle); all I/O goes through ``store.ZStore``. This module is the
public layer (inputs, targets, the write order); the work is in ``write_plan`` (each variable's on-disk
form), ``dimensions``, ``chunk_io``, ``nczarr_json`` and ``append``.
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import xarray as xr

from ..errors import UnsupportedError, ZStringsError, user_stacklevel
from ..formats.nczarr import NC_FILL_VALUES
from ..formats.nczarr_json import dumps
from ..formats.netcdf_c import NETCDF_C, SCALAR_DIM, NetcdfC, netcdf_c_for
from ..io.redact import shown
from ..io.zstore import ZStore
from ..text import policy as strings
from . import WriteMode
from .append import _add_variables, _append
from .chunks import attach_pipelines, local_scheduler, write_arrays
from .deferred import deferred
from .dimensions import _ancestors, _resolve_dimensions
from .encoding import with_zarr_encoding
from .plan import (
    DEFAULT_NETCDF_C,
    NETCDF_C_CODECS,
    Format,
    _Array,
    _codecs_from_encoding,
    _group_objects,
    _is_dask,
    _Options,
    _plan_group,
    _string_array,
    check_names,
    text_kind,
)
from .region import Region, write_region
from .session import check_mode, write_session

__all__ = [
    "DEFAULT_NETCDF_C",
    "NC_FILL_VALUES",
    "NETCDF_C_CODECS",
    "prepare_for_zarr",
    "to_nczarr",
    "to_zarr_v2",
    "with_netcdf_c_strings",
]


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------


def _as_groups(obj: Any) -> dict[str, xr.Dataset]:
    """Dataset / DataTree / mapping of group paths -> {"/": ds, "/sub": ds, ...} with every parent."""
    groups = _groups_given(obj)
    for path in list(groups):
        for anc in _ancestors(path)[1:]:
            if anc not in groups:  # not setdefault: a Dataset built per ancestor made 1,000 levels O(n^2)
                groups[anc] = xr.Dataset()
    _refuse_group_names(groups)
    return dict(sorted(groups.items(), key=lambda kv: (kv[0].count("/") if kv[0] != "/" else 0, kv[0])))


def _groups_given(obj: Any) -> dict[str, xr.Dataset]:
    """The groups ``obj`` holds by path (the parents a mapping leaves out not added yet)."""
    if isinstance(obj, xr.Dataset):
        return {"/": obj}
    if isinstance(obj, xr.DataTree):
        groups = {node.path: node.to_dataset(inherit=False) for node in obj.subtree}
        groups["/"] = obj.to_dataset(inherit=False)
        return groups
    if isinstance(obj, xr.DataArray):
        return {"/": obj.to_dataset(name=obj.name if obj.name is not None else "__xarray_dataarray_variable__")}
    if isinstance(obj, Mapping):
        return _mapped_groups(obj)
    raise ZStringsError(
        f"Cannot write {type(obj).__name__}: expected an xarray Dataset, DataTree or a mapping of group "
        "paths to Datasets (as xr.open_groups returns)."
    )


def _mapped_groups(obj: Mapping[Any, Any]) -> dict[str, xr.Dataset]:
    """A mapping of group paths to Datasets with the paths spelled ``/a/b``; a value not a Dataset is refused."""
    groups: dict[str, xr.Dataset] = {}
    for k, v in obj.items():
        if not isinstance(v, xr.Dataset):
            raise ZStringsError(f"Group {k!r}: expected an xarray.Dataset, got {type(v).__name__}.")
        key = "/" + str(k).strip("/")
        groups["/" if key == "/" else key] = v
    return groups


def _refuse_group_names(groups: Mapping[str, xr.Dataset]) -> None:
    """A group named as a variable of its parent (one Zarr key cannot be both), then a path with
    ``.``, ``..`` or an empty name, refused."""
    for path in groups:
        parent, _, leaf = path.rpartition("/")
        if path != "/" and leaf in groups[parent or "/"].variables:
            raise ZStringsError(
                f"Cannot write group {path!r}: its parent {parent or '/'!r} has a variable of the same name, "
                "and a Zarr key cannot be both. Rename the group or the variable."
            )
    for path in list(groups):
        for part in path.strip("/").split("/"):
            if part in (".", "..") or (path != "/" and not part):
                raise ZStringsError(f"Invalid group path {path!r}: expected names without '.', '..' or '//'.")


# ---------------------------------------------------------------------------------------------
# The public API
# ---------------------------------------------------------------------------------------------


def to_nczarr(
    obj: xr.Dataset | xr.DataTree | Mapping[str, xr.Dataset],
    target: str | os.PathLike[str] | Any,
    *,
    mode: WriteMode = "w-",
    format: Format = "nczarr",
    maxstrlen: int | Mapping[str, int] | None = None,
    default_maxstrlen: int | None = None,
    on_overflow: strings.OnOverflow = "error",
    unlimited_dims: Iterable[str] | None = None,
    append_dim: str | None = None,
    compressor: Any = None,
    netcdf_c_codecs_only: bool = True,
    storage_options: Mapping[str, Any] | None = None,
    netcdf_c: str | None = None,
    region: Region | None = None,
    compute: bool = True,
) -> Any:
    """Write ``obj`` as an NCZarr 2 store that netcdf-c (``netcdf_c`` and later) and ``engine="zstrings"`` read.

    ``obj`` is a Dataset, a DataTree (groups become NCZarr groups; a variable references the nearest
    ancestor's dimension of the same name and size, with fully qualified names) or a mapping of group
    paths to Datasets (``xr.open_groups`` output), which can hold a subgroup dimension that shadows
    an ancestor's with another size. ``target`` is a directory path, a ``.zip`` path, a
    ``file:///abs/path#mode=nczarr,file`` URL or a zarr-python ``Store``.

    Strings: NC_STRING ``|Sn`` whose width ``n`` is, in order, ``maxstrlen`` (one int, or a mapping of
    variable name/path to int), ``encoding["maxstrlen"]``, ``default_maxstrlen`` (also written as the
    root's ``_nczarr_default_maxstrlen``), else the longest UTF-8 encoding in the data (at least 1).
    Values longer than a given width follow ``on_overflow``: ``"error"`` (default) raises
    ``StringOverflowError``, ``"truncate"`` cuts at a character boundary and warns
    (``StringTruncationWarning`` with the count), ``"widen"`` raises the width. NC_CHAR on request:
    ``encoding={"nc_type": "NC_CHAR"}`` (or xarray's ``{"dtype": "S1"}``), with
    ``encoding["char_dim_name"]``; NC_CHAR keeps NULs inside values (netcdf-c's rule). NC_STRING values
    containing NUL, values ending with NUL, and lone surrogates raise ``ZStringsError``.

    ``mode``: ``"w-"`` (default) refuses a non-empty target, ``"w"`` replaces it, ``"a"`` appends
    along ``append_dim``, which must be unlimited in the store (``unlimited_dims=[...]`` or
    ``ds.encoding["unlimited_dims"]`` when first written), or without ``append_dim`` adds the
    variables the store does not hold yet (identical ones, such as coordinates sent again, are
    left alone; different ones are refused) and updates group attributes. ``format="zarr2"`` writes pure Zarr v2
    (``_ARRAY_DIMENSIONS`` only, no ``_nczarr_*`` metadata) that netcdf-c reads with ``mode=zarr``;
    ``to_zarr_v2`` is its own name for that.
    ``compressor`` is the default for variables whose encoding names none (e.g. ``{"id": "zstd",
    "level": 3}``); codecs netcdf-c cannot read are refused unless ``netcdf_c_codecs_only=False``.
    ``storage_options`` go to the store layer for ``s3://`` / ``https://...#mode=nczarr,s3`` targets.

    ``netcdf_c`` is the oldest netcdf-c that must read the store (docs/netcdf-c-versions.md has the
    reader x target matrix the tests see). The default (None) writes the layout that every netcdf-c
    from 4.9.1 (Ubuntu 24.04 has 4.9.2) through 4.10 reads: NCZarr keys in ``.zgroup``/``.zarray``;
    unlimited dimensions are kept, and a store with one is read from netcdf-c 4.9.4 on. ``"4.9.1"``
    to ``"4.9.3"`` write the same layout with unlimited dimensions made fixed (4.9.1-4.9.3 fail on
    them), with a ``NetcdfCompatibilityWarning``. ``"4.9.4"`` (or ``"4.10"``) writes netcdf-c 4.10's
    own layout (metadata in ``.zattrs``), which netcdf-c 4.9.1-4.9.3 cannot read.
    ``"4.9.0"`` (Debian 12) writes its uppercase layout, and since 4.9.0 cannot read NC_STRING from
    NCZarr nor scalars, strings become NC_CHAR with a string-length dimension and scalars one-element
    arrays on a dimension ``scalar1``, each with a ``NetcdfCompatibilityWarning``; string-list
    attributes are refused. The target applies to ``format="nczarr"``.

    ``region`` (dimension -> slice, or "auto"; a Dataset) writes ``obj`` into that part of the arrays
    the store holds, chunks only, no lock, regions aligned with the chunks (``write.region``,
    docs/writing.md#region-writes). ``compute=False`` returns a dask ``Delayed`` that writes and
    commits when computed (``write.deferred``); the checks and the plan run now.

    Long because it is the public entry point: it checks every argument before anything is written,
    then runs plan, write and commit; the steps themselves live in plan/chunks/append.
    """
    if region is not None:
        if append_dim is not None:
            raise ZStringsError(f"append_dim={append_dim!r} and region cannot be given together: a region write "
                                "writes into the arrays as they are; append first, then write regions.")
        return write_region(obj, target, region, fmt="v2", mode=mode, on_overflow=on_overflow,
                            storage_options=storage_options, compute=compute)
    if format not in ("nczarr", "zarr2"):
        raise ZStringsError(f"Invalid format={format!r}: expected 'nczarr' (NCZarr 2, the default) or "
                            "'zarr2' (pure Zarr v2 that netcdf-c reads with mode=zarr).")
    strings.check_on_overflow(on_overflow)
    reader = netcdf_c_for(DEFAULT_NETCDF_C if netcdf_c is None else netcdf_c)
    groups = _as_groups(obj)
    check_names(groups, netcdf_c="zarr" if format == "zarr2" else "nczarr", target=shown(target))
    if format == "nczarr":
        groups = for_netcdf_c(groups, reader)
    if default_maxstrlen is None and groups["/"].encoding.get("default_maxstrlen") is not None:
        default_maxstrlen = int(groups["/"].encoding["default_maxstrlen"])
    opts = _Options(fmt=format, on_overflow=on_overflow, maxstrlen=maxstrlen,
                    default_maxstrlen=default_maxstrlen, compressor=compressor,
                    strict_codecs=netcdf_c_codecs_only, layout=reader.writes)
    check_mode(mode)
    if mode == "a" and not compute:  # (an append plans under its claim: all of it runs when computed)
        return deferred(functools.partial(
            to_nczarr, obj, target, mode=mode, format=format, maxstrlen=maxstrlen, default_maxstrlen=default_maxstrlen,
            on_overflow=on_overflow, append_dim=append_dim, compressor=compressor,
            netcdf_c_codecs_only=netcdf_c_codecs_only, storage_options=storage_options, netcdf_c=netcdf_c),
            "zstrings-nczarr")
    if mode == "a":
        _write_into(target, groups, append_dim, opts, storage_options)
        return None
    if append_dim is not None:
        raise ZStringsError(f"append_dim={append_dim!r} is only used with mode='a'.")
    plans, gattrs, declared = _plan_whole(groups, opts, set(unlimited_dims or ()), reader, netcdf_c)
    write = functools.partial(_write_whole, target, mode, storage_options, groups, plans, gattrs, declared, opts)
    return deferred(write, "zstrings-nczarr") if not compute else write()


def _write_into(target: Any, groups: Mapping[str, xr.Dataset], append_dim: str | None, opts: _Options,
                storage_options: Mapping[str, Any] | None) -> None:
    """``mode="a"``: append along ``append_dim`` (or, without it, add the variables the store does
    not hold) under the store's claim, planned against the store as read under that claim."""
    with write_session(target, "a", kind="add" if append_dim is None else "append",
                       storage_options=storage_options) as s:
        zstore, txn = s.zstore, s.txn
        assert txn is not None
        if append_dim is None:
            updates = _add_variables(zstore, groups, opts, txn)
        else:
            updates = _append(zstore, groups, append_dim, opts, txn)
        s.commit(updates)
        if zstore.read_v3_beside:  # a store migrated in place (as read under the claim): v3 readers see it too
            from .migrate import keep_v3_in_step

            keep_v3_in_step(zstore)


def _plan_whole(groups: Mapping[str, xr.Dataset], opts: _Options, extra_unlimited: set[str], reader: NetcdfC,
                netcdf_c: str | None) -> tuple[dict[str, list[_Array]], dict[str, dict[str, Any]], Any]:
    """A whole store's plan: each group's arrays and attributes, and (NCZarr) the dimensions each
    group declares; unlimited dimensions made fixed where ``netcdf_c`` cannot read them."""
    unl: dict[str, set[str]] = {}
    plans: dict[str, list[_Array]] = {}
    gattrs: dict[str, dict[str, Any]] = {}
    for path, ds in groups.items():
        unl[path] = set(ds.encoding.get("unlimited_dims") or ()) | extra_unlimited
        if netcdf_c is not None:
            unl[path] = _fixed_for_netcdf_c(path, ds, unl[path], reader, netcdf_c)
        plans[path], gattrs[path] = _plan_group(path, ds, opts, unl[path])
    declared = _resolve_dimensions(plans, unl) if opts.fmt == "nczarr" else {g: {} for g in plans}
    attach_pipelines(a for arrays in plans.values() for a in arrays)
    return plans, gattrs, declared


def _write_whole(target: Any, mode: WriteMode, storage_options: Mapping[str, Any] | None,
                 groups: Mapping[str, xr.Dataset], plans: Mapping[str, list[_Array]],
                 gattrs: Mapping[str, dict[str, Any]], declared: Mapping[str, Mapping[str, list[Any]]],
                 opts: _Options) -> None:
    """``to_nczarr`` after its plan: open the target, write every chunk, commit."""
    with write_session(target, mode, storage_options=storage_options) as s, local_scheduler(s.zstore):
        s.commit(_write_all(s.zstore, groups, plans, gattrs, declared, opts), full=True)


def to_zarr_v2(
    obj: xr.Dataset | xr.DataTree | Mapping[str, xr.Dataset],
    target: str | os.PathLike[str] | Any,
    *,
    mode: WriteMode = "w-",
    maxstrlen: int | Mapping[str, int] | None = None,
    default_maxstrlen: int | None = None,
    on_overflow: strings.OnOverflow = "error",
    unlimited_dims: Iterable[str] | None = None,
    append_dim: str | None = None,
    compressor: Any = None,
    netcdf_c_codecs_only: bool = True,
    storage_options: Mapping[str, Any] | None = None,
    netcdf_c: str | None = None,
    region: Region | None = None,
    compute: bool = True,
) -> Any:
    """Write ``obj`` as pure Zarr v2 (``_ARRAY_DIMENSIONS``, no ``_nczarr_*`` metadata) that
    zarr-python, ``engine="zarr"`` and netcdf-c (``mode=zarr``) read: ``to_nczarr(format="zarr2")``,
    with the same arguments, strings, modes, ``region`` and ``compute``, and commit."""
    return to_nczarr(obj, target, mode=mode, format="zarr2", maxstrlen=maxstrlen, default_maxstrlen=default_maxstrlen,
                     on_overflow=on_overflow, unlimited_dims=unlimited_dims, append_dim=append_dim,
                     compressor=compressor, netcdf_c_codecs_only=netcdf_c_codecs_only,
                     storage_options=storage_options, netcdf_c=netcdf_c, region=region, compute=compute)


def _write_all(
    zstore: ZStore,
    groups: Mapping[str, xr.Dataset],
    plans: Mapping[str, list[_Array]],
    gattrs: Mapping[str, dict[str, Any]],
    declared: Mapping[str, Mapping[str, list[Any]]],
    opts: _Options,
) -> dict[str, bytes]:
    """Write every chunk; return every metadata object (key -> JSON bytes), which the transaction
    commits after the chunks (the root ``.zgroup`` last: until then the store is not a dataset)."""
    layout = opts.layout if opts.fmt == "nczarr" else None
    items = dict(write_arrays(zstore, [a for arrays in plans.values() for a in arrays], layout))
    children = {p: [c.rsplit("/", 1)[1] for c in groups if c != "/" and (c.rsplit("/", 1)[0] or "/") == p]
                for p in groups}
    for path in groups:
        zg, za = _group_objects(path, gattrs[path], declared.get(path, {}), [a.name for a in plans[path]],
                                children[path], layout, default_maxstrlen=opts.default_maxstrlen)
        prefix = "" if path == "/" else path.strip("/") + "/"
        items[prefix + ".zattrs"] = dumps(za)
        items[prefix + ".zgroup"] = dumps(zg)
    return items


def _fixed_for_netcdf_c(path: str, ds: xr.Dataset, unlimited: set[str], reader: NetcdfC, netcdf_c: str) -> set[str]:
    """Unlimited dimensions, or none (with a warning) for a netcdf-c that cannot read them."""
    if reader.unlimited or not unlimited:
        return unlimited
    import warnings

    from ..errors import NetcdfCompatibilityWarning

    mine = sorted(d for d in unlimited if d in ds.dims)
    if mine:
        first = next(r for r in NETCDF_C if r.unlimited)
        warnings.warn(NetcdfCompatibilityWarning(
            f"group {path!r}: unlimited dimension(s) {mine} written as fixed-size for netcdf_c={netcdf_c!r} "
            f"(netcdf-c {NETCDF_C[0].first}-{_before(first)} fail on unlimited NCZarr dimensions); appending "
            f"along them is then impossible. Pass netcdf_c='{first.first}' to keep them unlimited (netcdf-c "
            f"{first.first}+ reads that)."),
            stacklevel=user_stacklevel())
    return set()


def _before(reader: NetcdfC) -> str:
    """The last netcdf-c release before ``reader``'s row (``"4.9.3"`` before 4.9.4)."""
    major, minor, patch = reader.version
    return f"{major}.{minor}.{patch - 1}" if patch else f"{major}.{minor - 1}"


def for_netcdf_c(groups: dict[str, xr.Dataset], reader: NetcdfC) -> dict[str, xr.Dataset]:
    """What ``reader`` can read (netcdf-c 4.9.0: strings as NC_CHAR, scalars as one-element arrays on
    ``SCALAR_DIM``, each warned; string-list attributes refused: it fails to open a store holding
    one). A netcdf-c that reads all of them gets ``groups`` unchanged."""
    if reader.nc_string and reader.scalar_marker is not None and reader.string_lists:
        return groups
    import warnings

    from ..errors import NetcdfCompatibilityWarning

    keeps = next(r for r in NETCDF_C if r.nc_string and r.scalar_marker is not None and r.string_lists).first
    target = f"netcdf_c={reader.first!r}"
    out: dict[str, xr.Dataset] = {}
    to_char: list[str] = []
    to_1d: list[str] = []
    for path, ds in groups.items():
        if not reader.string_lists:
            _refuse_string_lists(path, ds, reader, keeps)
        out[path] = _readable_group(path, ds, reader, to_char, to_1d)
    if to_char:
        warnings.warn(NetcdfCompatibilityWarning(
            f"{len(to_char)} string variable(s) written as NC_CHAR with a string-length dimension for "
            f"{target}, which cannot read NC_STRING from NCZarr: {to_char[:5]}. netCDF4 and "
            "xarray join them back into strings (_Encoding='utf-8'); ncdump shows character arrays. "
            f"Pass netcdf_c='{keeps}' to keep NC_STRING."), stacklevel=user_stacklevel())
    if to_1d:
        warnings.warn(NetcdfCompatibilityWarning(
            f"{len(to_1d)} scalar variable(s) written as one-element arrays on dimension "
            f"{SCALAR_DIM!r} for {target}, which aborts on NCZarr scalars: {to_1d[:5]}. "
            f"Pass netcdf_c='{keeps}' to keep them scalars."), stacklevel=user_stacklevel())
    return out


def _readable_group(path: str, ds: xr.Dataset, reader: NetcdfC, to_char: list[str], to_1d: list[str]) -> xr.Dataset:
    """``ds`` as ``reader`` reads it: text it cannot read as NC_STRING marked NC_CHAR, scalars made
    one-element arrays on ``SCALAR_DIM`` where it has no scalar marker; each changed variable's path
    added to ``to_char`` / ``to_1d`` for the warnings."""
    new: dict[str, xr.Variable] = {}
    for name, var in ds.variables.items():
        where = f"{path.rstrip('/')}/{name}"
        if _needs_nc_char(var, reader):
            var = var.copy(deep=False)
            var.encoding = {**var.encoding, "nc_type": "NC_CHAR"}
            to_char.append(where)
        elif reader.scalar_marker is None and var.ndim == 0:
            enc = dict(var.encoding)
            var = xr.Variable((SCALAR_DIM,), np.asarray(var.values).reshape(1), var.attrs, enc)
            to_1d.append(where)
        new[str(name)] = var
    coords = {n: new[str(n)] for n in ds.coords}
    nds = xr.Dataset({n: v for n, v in new.items() if n not in coords}, coords=coords, attrs=ds.attrs)
    nds.encoding = dict(ds.encoding)
    return nds


def _needs_nc_char(var: xr.Variable, reader: NetcdfC) -> bool:
    """Text ``reader`` cannot read as NC_STRING that is not NC_CHAR already (``nc_type``, or an
    ``S1`` dtype as xarray spells it)."""
    if reader.nc_string or text_kind(var) is None or var.encoding.get("nc_type") == "NC_CHAR":
        return False
    dtype = var.encoding.get("dtype")
    return not (dtype is not None and not isinstance(dtype, type) and np.dtype(dtype) == np.dtype("S1"))


def _refuse_string_lists(path: str, ds: xr.Dataset, reader: NetcdfC, keeps: str) -> None:
    """A string-list attribute (NC_STRING), which ``reader`` fails to open a store holding, refused."""
    import numpy as np

    for owner, attrs in [(f"group {path!r}", ds.attrs)] + [
            (f"variable {path.rstrip('/')}/{n}", v.attrs) for n, v in ds.variables.items()]:
        for k, v in attrs.items():
            if isinstance(v, list | tuple | np.ndarray) and np.asarray(v).dtype.kind in "OUST":
                raise UnsupportedError(
                    f"Cannot write attribute {k!r} of {owner} for netcdf_c={reader.first!r}: it is a list of "
                    f"strings (NC_STRING), and netcdf-c {reader.first} fails to open an NCZarr store holding one. "
                    f"Join it into one text (e.g. ', '.join(...)), drop it, or target netcdf_c={keeps!r}.")


# ---------------------------------------------------------------------------------------------
# Helpers for other workflows
# ---------------------------------------------------------------------------------------------


def with_netcdf_c_strings(
    ds: xr.Dataset,
    *,
    maxstrlen: int | Mapping[str, int] | None = None,
    on_overflow: strings.OnOverflow = "error",
    netcdf_c_codecs_only: bool = True,
) -> xr.Dataset:
    """A copy of ``ds`` whose string variables are NUL-padded UTF-8 ``|Sn`` bytes, for ``ds.to_zarr``.

    ``with_netcdf_c_strings(ds).to_zarr(path, zarr_format=2, consolidated=False)`` then writes strings as
    netcdf-c's NC_STRING layout (``|Sn`` plus ``_nczarr_maxstrlen``) instead of ``<U``/vlen-utf8, which
    netcdf-c cannot read; open the result with ``netCDF4.Dataset(".../x.zarr#mode=zarr,file")`` or
    ``xr.open_dataset(path, engine="zstrings")`` (strings come back as ``str``). The width and the
    overflow policy are as in ``to_nczarr``. Dask-backed variables stay lazy when a width is given.
    Codecs come out as Zarr v2 numcodecs objects; one netcdf-c cannot read (gzip, lz4, ...) raises
    ``UnsupportedError`` unless ``netcdf_c_codecs_only=False``, as in ``to_nczarr``.
    """
    opts = _Options(fmt="zarr2", on_overflow=on_overflow, maxstrlen=maxstrlen, default_maxstrlen=None,
                    compressor=None, strict_codecs=False)
    out = ds.copy()
    for name, var in ds.variables.items():
        if text_kind(var) != "str":
            continue
        enc = dict(var.encoding)
        enc.pop("nc_type", None)
        enc.pop("dtype", None)
        tmp = xr.Variable(var.dims, var.data, {}, enc)
        a = _string_array("/", str(name), tmp, "str", opts, set())
        data = a.data
        if _is_dask(data):
            enc_block = a.encode_block
            assert enc_block is not None
            # named: dask would otherwise tokenize the encoder by pickling its closure
            data = data.map_blocks(lambda b, f=enc_block: f(b)[0], dtype=a.dtype,
                                   name=f"zstrings-encode-{uuid.uuid4().hex}")
        attrs = {k: v for k, v in var.attrs.items() if k != "_FillValue"}
        attrs["_nczarr_maxstrlen"] = a.maxstrlen
        if "_FillValue" in a.attrs:  # missing values were written as the fill: the v2 fill_value says so
            attrs["_FillValue"] = np.bytes_(a.fill_storage)
        new = xr.Variable(var.dims, data, attrs)
        # compressors=None too: without the key zarr-python would pick its default compressor
        new.encoding = {k: var.encoding[k] for k in ("chunks", "compressors") if k in var.encoding}
        if new.encoding.get("chunks") is None:
            new.encoding.pop("chunks", None)
        if name in ds.indexes:
            out = out.assign_coords({name: new})
        else:
            out[name] = new
    # engine="zstrings" gives codecs for the default (v3) format; netcdf-c reads Zarr v2 only
    out = with_zarr_encoding(out, 2)
    if netcdf_c_codecs_only:
        for name, var in out.variables.items():
            _codecs_from_encoding(var.encoding, None, where=f"variable {name!r}", strict=True)  # raises
    return out


def prepare_for_zarr(
    ds: xr.Dataset,
    *,
    maxstrlen: int | Mapping[str, int] | None = None,
    on_overflow: strings.OnOverflow = "error",
    netcdf_c_codecs_only: bool = True,
) -> xr.Dataset:
    """Deprecated: the old name of ``with_netcdf_c_strings`` (same arguments, same result)."""
    import warnings

    warnings.warn("xr_zstrings.prepare_for_zarr is deprecated: use xr_zstrings.with_netcdf_c_strings (same "
                  "arguments, same result).", FutureWarning, stacklevel=user_stacklevel())
    return with_netcdf_c_strings(ds, maxstrlen=maxstrlen, on_overflow=on_overflow,
                                 netcdf_c_codecs_only=netcdf_c_codecs_only)

