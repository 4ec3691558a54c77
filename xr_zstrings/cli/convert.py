"""``zstrings convert``: netCDF-4 file <-> NCZarr / Zarr v2 <-> Zarr v3, read a block at a time
with a progress bar; an existing target is refused in one wording, whatever the format.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, cast

from ..codecs.layouts import LAYOUT_NAMES
from ..formats.netcdf_c import CURRENT, DEFAULT_NETCDF_C, examples_text
from ..io.redact import redact
from ..write import NewMode
from .common import _NETCDF_SUFFIXES, _TARGET_HELP, OK, UsageError, _is_netcdf_file


def _convert_helpers() -> tuple[dict[str, Any], Callable[[Any, str], None]]:
    """The undecoded open options and the netCDF-4 writer behind ``conversion.convert`` (a
    temporary file that replaces the target when complete)."""
    from ..write.convert import RAW_DECODERS, write_netcdf4_file

    return dict(RAW_DECODERS), write_netcdf4_file


def _target_format(dst: str, requested: str | None) -> str:
    is_nc = dst.lower().endswith(_NETCDF_SUFFIXES)
    if requested is None:
        if is_nc:
            return "netcdf4"
        if "mode=zarr" in dst and "nczarr" not in dst.split("#", 1)[-1]:
            return "zarr2"
        return "nczarr"
    if is_nc and requested != "netcdf4":
        raise UsageError(f"DST {redact(dst)} ends in a netCDF suffix but --format {requested} writes a Zarr store: "
                         "name the target like out.zarr, or drop --format to write a netCDF-4 file.")
    return requested


class _Counted:
    """Backend array that counts the bytes read from a source variable on a progress bar."""

    BLOCK_BYTES = 8 << 20

    def __init__(self, var: Any, bar: Any) -> None:
        self.var = var
        self.shape = var.shape
        self.dtype = var.dtype
        self.bar = bar
        self.remaining = int(var.nbytes)

    def __getitem__(self, key: Any) -> Any:
        from xarray.core import indexing

        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.BASIC, self._get)

    def _get(self, key: tuple[Any, ...]) -> Any:
        import numpy as np

        key = tuple(key)
        first = key[0] if key else None
        if isinstance(first, slice) and (first.step or 1) == 1 and self.var.ndim:
            start, stop, _ = first.indices(self.shape[0])
            row_bytes = max(1, self.var.dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64)))
            rows = max(1, self.BLOCK_BYTES // row_bytes)
            if stop - start > rows:  # read in blocks so the bar moves during one large variable
                pieces = [self._read((slice(i, min(i + rows, stop)), *key[1:]))
                          for i in range(start, stop, rows)]
                return np.concatenate(pieces, axis=0)
        return self._read(key)

    def _read(self, key: tuple[Any, ...]) -> Any:
        import numpy as np

        out = np.asarray(self.var[key].values)
        n = min(self.remaining, out.size * out.dtype.itemsize)
        if n > 0:
            self.remaining -= n
            self.bar.update(n)
        return out


def _counted(groups: dict[str, Any], bar: Any) -> dict[str, Any]:
    """The same groups with every non-index variable read through ``_Counted`` (still lazy)."""
    import xarray as xr
    from xarray.backends import BackendArray
    from xarray.core import indexing

    class Counted(_Counted, BackendArray):
        pass

    out = {}
    for path, ds in groups.items():
        coords: dict[Hashable, Any] = {}
        data: dict[Hashable, Any] = {}
        for name, var in ds.variables.items():
            if name not in ds.indexes:
                var = xr.Variable(var.dims, indexing.LazilyIndexedArray(Counted(var, bar)), var.attrs,
                                  var.encoding)
            (coords if name in ds.coords else data)[name] = var
        new = xr.Dataset(data, coords=coords, attrs=ds.attrs)
        new.encoding = dict(ds.encoding)
        out[path] = new
    return out


def _progress(total: int, quiet: bool, dst: str) -> Any:
    """A tqdm bar on stderr, shown only when stdout is a terminal and the conversion takes a while."""
    disable = quiet or not sys.stdout.isatty()
    try:
        from tqdm import tqdm
    except ImportError:  # progress is a nicety, never a requirement
        disable = True
    if disable:
        return _NoBar()
    return tqdm(total=total, unit="B", unit_scale=True, desc=f"-> {Path(redact(dst)).name}", delay=0.3, mininterval=0.2,
                file=sys.stderr, leave=False)


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _cmd_convert(args: argparse.Namespace) -> int:
    import xarray as xr

    src, dst = args.src, args.dst
    fmt = _target_format(dst, args.format)
    if args.maxstrlen is not None and fmt not in ("nczarr", "zarr2"):
        raise UsageError(f"--maxstrlen applies to --format nczarr/zarr2 only ({fmt} strings are "
                         "variable-length); drop it.")
    if args.maxstrlen is not None and args.maxstrlen < 1:
        raise UsageError(f"--maxstrlen {args.maxstrlen}: expected a width of at least 1 byte.")
    if args.compressor is not None and fmt not in ("nczarr", "zarr2"):
        raise UsageError(f"--compressor applies to --format nczarr/zarr2 only (target is {fmt}); drop it.")
    if args.netcdf_c is not None and fmt != "nczarr":
        raise UsageError(f"--netcdf-c chooses the NCZarr layout; it applies to --format nczarr (target is {fmt}).")
    if args.layout is not None and fmt != "zarr3":
        raise UsageError(f"--layout chooses the Zarr v3 string layout; add --format zarr3 (target is {fmt}).")
    if os.path.abspath(src) == os.path.abspath(dst):
        raise UsageError(f"SRC and DST are the same ({redact(src)}); choose another target.")
    _check_target(dst, fmt, overwrite=args.overwrite)

    from ..write import nczarr as writer

    raw_options, write_netcdf4 = _convert_helpers()
    source_is_nc = _is_netcdf_file(src)
    if source_is_nc and not Path(src).expanduser().exists():
        raise UsageError(f"No such file: {src}; check the path.")
    if not source_is_nc and fmt != "netcdf4":  # the same store spelled otherwise, or one inside the other
        from ..io.store import open_store
        from ..write.migrate import overlaps

        if overlaps(open_store(src, mode="r"), dst, None):
            raise UsageError(f"DST {redact(dst)} is SRC, or holds it, or lies inside it: writing it would remove "
                             "what is being read; choose another target.")
    open_kw: dict[str, Any] = dict(raw_options)
    if fmt == "zarr3":
        open_kw["concat_characters"] = True  # NC_CHAR becomes text, not one-byte bytes values
    engine = "netcdf4" if source_is_nc else "zstrings"
    groups = xr.open_groups(src, engine=engine, **open_kw)
    from ..errors import StringOverflowError, TargetExistsError

    try:
        total = sum(int(v.nbytes) for ds in groups.values() for n, v in ds.variables.items()
                    if n not in ds.indexes)
        bar = _progress(total, args.quiet, dst)
        try:
            counted = _counted(dict(groups), bar)
            mode: NewMode = "w" if args.overwrite else "w-"
            if fmt == "netcdf4":
                _clamp_chunks(counted)
                write_netcdf4(counted, dst)  # never a half-written file; the old one until done
            elif fmt in ("nczarr", "zarr2"):
                _netcdf_c_codecs(counted, args.compressor, writer.NETCDF_C_CODECS, quiet=args.quiet)
                writer.to_nczarr(counted, dst, mode=mode, format=cast(Any, fmt), maxstrlen=args.maxstrlen,
                                 on_overflow=args.on_overflow, netcdf_c=args.netcdf_c)
            else:
                _write_zarr3(counted, dst, mode=mode, layout=args.layout or LAYOUT_NAMES[0])
        finally:
            bar.close()
    except TargetExistsError:  # object storage, or created meanwhile: the same words as above
        raise UsageError(_exists_text(dst)) from None
    except StringOverflowError as e:  # the library names its keyword arguments: name the flags
        raise UsageError(_overflow_in_flags(str(e))) from None
    finally:
        for ds in groups.values():
            ds.close()
    if not args.quiet:
        print(f"wrote {redact(dst)} ({fmt})", file=sys.stderr)
    return OK


def _exists_text(dst: str) -> str:
    """The one wording for a target that exists, whatever the format."""
    return f"DST {redact(dst)} exists; pass --overwrite to replace it, or choose another DST."


def _not_a_store(path: Path, fmt: str) -> str | None:
    """What a local target that ``--overwrite`` must not replace holds (the writers' own rule), or
    None when it is a store, a zip or netCDF file, or empty."""
    from ..io.atomic import not_replaceable

    kind = "netcdf" if fmt == "netcdf4" else ("zip" if path.is_file() else "zarr")  # (dirs: one rule)
    return not_replaceable(path, kind)


def _check_target(dst: str, fmt: str, *, overwrite: bool) -> None:
    """Refuse an existing local target without ``--overwrite`` (one wording for every format), and
    any target that is not something zstrings writes (a directory of other files) even with it."""
    from ..io.targets import local_target

    local = local_target(dst) if fmt != "netcdf4" else (Path(dst).expanduser(), False)
    if local is None:  # object storage: the writers refuse an existing store (TargetExistsError)
        return
    path = local[0]
    what = _not_a_store(path, fmt)
    if what is not None:
        raise UsageError(f"DST {redact(dst)} is {what}; zstrings does not replace it, even with --overwrite: "
                         "choose another DST.")
    exists = path.is_file() or (path.is_dir() and any(path.iterdir()))
    if exists and not overwrite:
        raise UsageError(_exists_text(dst))


def _overflow_in_flags(message: str) -> str:
    """A StringOverflowError's fix in the command's words (its flags, not the Python keywords)."""
    import re

    fixed = re.sub(r"Pass on_overflow='widen' to use width (\d+), or on_overflow='truncate' to cut them at a "
                   r"character boundary \(with a StringTruncationWarning\), or shorten the values",
                   r"Pass --on-overflow widen (width \1), --on-overflow truncate (cut at a character boundary, "
                   r"with a warning) or --maxstrlen \1.", message)
    return fixed


_COMPRESSORS = {"zlib": {"id": "zlib", "level": 4}, "zstd": {"id": "zstd", "level": 3},
                "bz2": {"id": "bz2", "level": 9}, "none": None}


def _netcdf_c_codecs(groups: dict[str, Any], choice: str | None, readable: frozenset[str], *,
                     quiet: bool) -> None:
    """Codecs for an NCZarr/Zarr v2 target: ``--compressor`` for every variable, else the source's
    own, with what netcdf-c cannot read (vlen filters, gzip, lz4, ...) replaced by zlib."""
    replaced: set[str] = set()
    for ds in groups.values():
        for vname, var in ds.variables.items():
            enc = var.encoding
            if "compressor" not in enc and "compressors" in enc:
                # either vocabulary (v2 numcodecs or v3 codec objects, see zarr_encoding) in v2 terms
                from ..codecs.encoding import v2_configs

                comp0, filters0 = v2_configs(enc, where=f"variable {vname!r}")
                enc["compressor"] = comp0[0] if isinstance(comp0, list) else comp0
                enc["filters"] = filters0 if "filters" in enc else enc.get("zstrings_filters")
            enc.pop("compressors", None)
            comp = enc.get("compressor")
            if isinstance(comp, str):
                comp = {"id": comp}
            elif comp is not None and not isinstance(comp, dict):
                comp = comp.get_config() if hasattr(comp, "get_config") else None
            filters = [f if isinstance(f, dict) else f.get_config() for f in enc.get("filters") or []
                       if isinstance(f, dict) or hasattr(f, "get_config")]
            filters = [f for f in filters if f.get("id") not in ("vlen-utf8", "vlen-bytes", "vlen-array")]
            bad = [f["id"] for f in filters if f.get("id") != "shuffle"]
            filters = [f for f in filters if f.get("id") == "shuffle"]
            if choice is not None:
                comp = _COMPRESSORS[choice]
            elif comp is not None and comp.get("id") not in readable:
                bad.append(str(comp.get("id")))
                comp = _COMPRESSORS["zlib"]
            replaced.update(bad)
            for k in ("zlib", "compression", "complevel", "shuffle"):
                enc.pop(k, None)
            enc["compressor"] = comp
            enc["filters"] = filters or None
    if replaced and not quiet:
        print(f"zstrings: note: codecs netcdf-c cannot read ({', '.join(sorted(replaced))}) were replaced "
              "by zlib; choose another with --compressor.", file=sys.stderr)


def _clamp_chunks(groups: dict[str, Any]) -> None:
    """netCDF4 refuses chunks longer than a fixed dimension (a store's chunk may be, e.g. 1024 for a
    dimension of 4 that was unlimited in the source): clamp them to the dimension size."""
    for ds in groups.values():
        unlimited = set(ds.encoding.get("unlimited_dims") or ())
        for var in ds.variables.values():
            chunks = var.encoding.get("chunks")
            if chunks and len(chunks) == var.ndim:
                var.encoding["chunks"] = tuple(
                    c if d in unlimited else max(1, min(int(c), n))
                    for c, d, n in zip(chunks, var.dims, var.shape, strict=True)
                )


def _write_zarr3(groups: dict[str, Any], dst: str, *, mode: NewMode, layout: str) -> None:
    from ..write.zarr3 import to_zarr_v3

    paths = list(groups)
    for i, path in enumerate(paths):
        ds = groups[path]
        for var in ds.variables.values():
            var.encoding = {k: v for k, v in var.encoding.items() if k in ("chunks", "dtype", "units",
                                                                           "calendar")}
        to_zarr_v3(ds, dst, layout=layout,
                   mode=mode if i == 0 else "w-",
                   group=None if path == "/" else path.strip("/"), consolidated=i == len(paths) - 1)


def add_parser(sub: Any) -> None:
    """Add the 'convert' subcommand to ``sub``, the ``zstrings`` parser's subparsers."""
    p = sub.add_parser("convert", help="netCDF-4 file <-> NCZarr / Zarr v2 <-> Zarr v3",
                       description="Copy a whole file or store, groups included. The source is a netCDF "
                                   "file (read with netCDF4) or any store engine='zstrings' reads; the "
                                   "target format follows --format, else the DST name (.nc -> netCDF-4, "
                                   "anything else -> NCZarr). A progress bar shows on long conversions "
                                   "when stdout is a terminal.")
    p.add_argument("src", metavar="SRC", help="a netCDF file or a store (" + _TARGET_HELP + ")")
    p.add_argument("dst", metavar="DST", help="a .nc file, a directory, a .zip or a file:// URL")
    p.add_argument("--format", choices=("nczarr", "zarr2", "zarr3", "netcdf4"), default=None,
                   help="target format (default: netcdf4 for .nc targets, else nczarr)")
    p.add_argument("--maxstrlen", type=int, default=None,
                   help="NC_STRING width in bytes for nczarr/zarr2 (default: each variable's stored "
                        "width, else its longest value)")
    p.add_argument("--on-overflow", choices=("error", "truncate", "widen"), default="error",
                   help="strings longer than the width: fail (default), cut at a character boundary, "
                        "or widen")
    p.add_argument("--layout", choices=LAYOUT_NAMES, default=None,
                   help=f"Zarr v3 string layout for --format zarr3 (default {LAYOUT_NAMES[0]}, which zarr-python "
                        "reads)")
    p.add_argument("--compressor", choices=tuple(_COMPRESSORS), default=None,
                   help="compressor for every variable of an nczarr/zarr2 target (default: the source's "
                        "own, codecs netcdf-c cannot read replaced by zlib)")
    p.add_argument("--netcdf-c", dest="netcdf_c", metavar="VERSION", default=None,
                   help=f"the oldest netcdf-c that must read DST (e.g. {examples_text()}); default: the layout "
                        f"every netcdf-c from {DEFAULT_NETCDF_C} to {CURRENT.example} reads")
    p.add_argument("--overwrite", action="store_true", help="replace DST if it exists")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar and no summary line")
    p.set_defaults(func=_cmd_convert)
