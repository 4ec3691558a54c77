"""Helpers that drive the real peers (netcdf-c through netCDF4, zarr-python) for the tests.

``netcdf4_view`` and ``zstrings_view`` reduce a store to the same plain structure
(group -> dimensions, variables with dims/values/attrs) so a test can compare what the producing
library reads back with what ``engine="zstrings"`` returns.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, NoReturn

import netCDF4
import numpy as np
import pytest
import xarray as xr


def missing_peer(reason: str) -> NoReturn:
    """A peer this test needs is not on this machine: skipped here, but a failure on CI (``CI`` set),
    whose .ci/run installs every peer, so that a broken install step cannot pass as a skip."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (on CI .ci/run installs it: its install step failed)")
    pytest.skip(reason)


def peer_tool(name: str, package: str = "netcdf-bin") -> str:
    """The path of one of netcdf-c's command-line tools (Debian's ``netcdf-bin``: ``ncgen``,
    ``ncdump``), else ``missing_peer``."""
    exe = shutil.which(name)
    if exe is None:
        missing_peer(f"{name} is not installed (apt-get install {package})")
    return exe


def nc_url(path: str | os.PathLike[str], mode: str = "nczarr") -> str:
    """netcdf-c's URL for a directory store: ``file:///abs#mode=<mode>,file``."""
    return f"file://{Path(path).absolute()}#mode={mode},file"


def _plain(value: Any) -> Any:
    """A comparable plain-Python form of a value or array (strings as str, NaN kept as 'nan')."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "OTU":
            return [_plain(v) for v in value.tolist()] if value.ndim else _plain(value[()])
        if value.dtype.kind == "f":
            return np.where(np.isnan(value), np.inf, value).tolist() if value.size else value.tolist()
        return value.tolist()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


# netcdf-c shows these as attributes; xr_zstrings moves them into ``encoding`` (maxstrlen)
NC_BOOKKEEPING = {"_nczarr_maxstrlen", "_nczarr_default_maxstrlen", "_Encoding"}


def xarray_netcdf4_dims(url: str) -> dict[str, dict[str, tuple[str, ...]]]:
    """Per group, each variable's dims as xarray's engine="netcdf4" returns them (it decides
    which NC_CHAR variables get their characters joined)."""
    groups = xr.open_groups(url, engine="netcdf4", decode_cf=True, mask_and_scale=False, decode_times=False)
    try:
        return {p: {str(k): tuple(map(str, v.dims)) for k, v in g.variables.items()} for p, g in groups.items()}
    finally:
        for g in groups.values():
            g.close()


def netcdf4_view(url: str, *, chartostring: bool = True) -> dict[str, Any]:
    """What netcdf-c (via netCDF4, read-only) sees: per group, dims and variables; NC_CHAR
    variables joined into strings where xarray's engine="netcdf4" joins them."""
    out: dict[str, Any] = {}
    joined = xarray_netcdf4_dims(url) if chartostring else {}
    ds = netCDF4.Dataset(url, "r")
    try:

        def walk(g: Any, path: str) -> None:
            g.set_auto_mask(False)
            gv: dict[str, Any] = {
                "dims": {d.name: (d.size, d.isunlimited()) for d in g.dimensions.values()},
                "attrs": {k: _plain(g.getncattr(k)) for k in g.ncattrs() if k not in NC_BOOKKEEPING},
                "vars": {},
            }
            for v in g.variables.values():
                dims = v.dimensions
                xdims = joined.get(path, {}).get(v.name, dims)
                join = v.dtype == np.dtype("S1") and chartostring and dims and len(xdims) < len(dims)
                if v.dtype == np.dtype("S1") and not join:
                    v.set_auto_chartostring(False)  # netCDF4 joins by itself with _Encoding
                data = v[...]
                if join:
                    if np.asarray(data).dtype.kind == "S":
                        data = netCDF4.chartostring(np.asarray(data), encoding="utf-8")
                    dims = dims[:-1]
                elif v.dtype == np.dtype("S1") and chartostring and "_Encoding" in v.ncattrs():
                    # separate characters: xarray decodes each with _Encoding
                    data = np.char.decode(np.asarray(data), v.getncattr("_Encoding"))
                gv["vars"][v.name] = {
                    "dims": tuple(dims),
                    "values": _plain(np.asarray(data)),
                    "attrs": {k: _plain(v.getncattr(k)) for k in v.ncattrs() if k not in NC_BOOKKEEPING},
                }
            out[path] = gv
            for name, sub in g.groups.items():
                walk(sub, f"{path.rstrip('/')}/{name}")

        walk(ds, "/")
    finally:
        ds.close()
    return out


def zstrings_view(target: Any, **kwargs: Any) -> dict[str, Any]:
    """The same structure from ``xr.open_groups(engine="zstrings")`` (no CF masking)."""
    groups = xr.open_groups(target, engine="zstrings", mask_and_scale=False, decode_times=False, **kwargs)
    out: dict[str, Any] = {}
    for path, ds in groups.items():
        out[path] = {
            "attrs": {k: _plain(v) for k, v in ds.attrs.items()},
            "vars": {
                name: {
                    "dims": tuple(var.dims),
                    "values": _plain(var.values),
                    "attrs": {k: _plain(v) for k, v in var.attrs.items()},
                }
                for name, var in ds.variables.items()
            },
            "unlimited": set(ds.encoding.get("unlimited_dims", ())),
        }
    return out


def assert_same_as_netcdf4(store: str | os.PathLike[str], mode: str = "nczarr") -> dict[str, Any]:
    """Compare every group, variable, value and attribute with what netcdf-c reads."""
    ref = netcdf4_view(nc_url(store, mode))
    got = zstrings_view(store)
    assert set(got) == set(ref), (sorted(got), sorted(ref))
    for path, r in ref.items():
        g = got[path]
        assert g["attrs"] == r["attrs"], path
        assert set(g["vars"]) == set(r["vars"]), path
        for name, rv in r["vars"].items():
            gv = g["vars"][name]
            assert gv["dims"] == rv["dims"], (path, name)
            assert gv["values"] == rv["values"], (path, name)
            assert gv["attrs"] == rv["attrs"], (path, name)
        unlimited = {n for n, (_, u) in r["dims"].items() if u}
        assert unlimited <= g["unlimited"], (path, unlimited, g["unlimited"])
    return got


def _chars(values: list[str], encoding: str, nchar: int) -> np.ndarray:
    """An (n, nchar) S1 array, as netCDF4.stringtochar makes for ASCII, for any encoding."""
    return np.array([v.encode(encoding) for v in values], dtype=f"S{nchar}").view("S1").reshape(-1, nchar)


def write_netcdf_strings(path: str | os.PathLike[str], mode: str = "nczarr") -> None:
    """A netcdf-c store exercising strings, chars, scalars, groups, fills and typed attributes."""
    ds = netCDF4.Dataset(nc_url(path, mode), "w")
    try:
        ds.createDimension("x", 5)
        ds.createDimension("t", None)
        ds.createDimension("nchar", 6)
        ds.title = "stations"
        ds.ints = np.array([1, 2, 3], dtype="i2")
        ds.fl = np.float32(1.5)
        ds.dbl = np.array([0.25, 4.0])
        ds.setncattr_string("tags", ["a", "héllo"])
        ds.jsonish = '{"a": 1, "b": [1, 2]}'
        names = ds.createVariable("names", str, ("x",))
        names.long_name = "station name"
        names[:] = np.array(["a", "héllo", "中文字", "😀x", ""], dtype=object)
        chars = ds.createVariable("chars", "S1", ("x", "nchar"))
        chars[:] = _chars(["ab", "cde", "fghij", "", "é"], "utf-8", 6)
        chars_l1 = ds.createVariable("chars_latin1", "S1", ("x", "nchar"))
        chars_l1._Encoding = "latin-1"
        chars_l1[:] = _chars(["é", "b", "ü", "", "x"], "latin-1", 6)
        f = ds.createVariable("temp", "f4", ("t", "x"), fill_value=-999.0, zlib=True, shuffle=True,
                              chunksizes=(2, 2))
        f.units = "K"
        f.valid_range = np.array([0, 400], dtype="f4")
        f[0:3, :] = np.arange(15, dtype="f4").reshape(3, 5)
        f[4, 1] = 7.0  # leaves chunks never written: they read as the fill value
        i = ds.createVariable("counts", "i8", ("x",))
        i[:] = np.arange(5) * 10**10
        sc = ds.createVariable("scalar_int", "i4", ())
        sc[...] = 42
        ss = ds.createVariable("scalar_str", str, ())
        ss[0] = "only one"
        sub = ds.createGroup("sub")
        sub.createDimension("y", 2)
        sub.note = "in a subgroup"
        a = sub.createVariable("uses_root_x", "i2", ("x",))
        a[:] = np.arange(5)
        b = sub.createVariable("labels", str, ("y",))
        b[:] = np.array(["ß", "ok"], dtype=object)
        deeper = sub.createGroup("deeper")
        deeper.createDimension("z", 3)
        c = deeper.createVariable("mixed", "f8", ("x", "y", "z"))
        c[:] = np.arange(30, dtype="f8").reshape(5, 2, 3)
    finally:
        ds.close()


def write_netcdf_shadowed(path: str | os.PathLike[str]) -> None:
    """A subgroup that shadows a root dimension with another size (legal netCDF, not DataTree)."""
    ds = netCDF4.Dataset(nc_url(path), "w")
    try:
        ds.createDimension("x", 3)
        v = ds.createVariable("rootvar", "i4", ("x",))
        v[:] = [1, 2, 3]
        g = ds.createGroup("g")
        g.createDimension("x", 4)
        w = g.createVariable("subvar", "i4", ("x",))
        w[:] = [4, 5, 6, 7]
        s = g.createVariable("names", str, ("x",))
        s[:] = np.array(["p", "q", "r", "s"], dtype=object)
    finally:
        ds.close()


def engine_views(store: Any, names: dict[str, list[str]], engine: str, *, consolidated: bool | None = None,
                 **kw: Any) -> dict[tuple[str, str], Any]:
    """Every variable (``names``: group -> variables) as ``engine`` reads it (its values loaded), or
    the exception it raised; ``engine="open_zarr"`` is ``xr.open_zarr`` (icechunk's xarray path). A
    group that one Dataset cannot hold (a dimension shadowed with another size) is read a variable at
    a time. ``consolidated`` goes to engine="zarr" / open_zarr."""
    import warnings

    out: dict[tuple[str, str], Any] = {}
    opener = xr.open_zarr if engine == "open_zarr" else xr.open_dataset
    extra: dict[str, Any] = {"consolidated": consolidated} if engine in ("zarr", "open_zarr") else {}
    if engine != "open_zarr":
        extra["engine"] = engine
    for g, vs in names.items():
        group = None if g == "/" else g
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ds = opener(store, group=group, **extra, **kw)
        except Exception:  # read one variable at a time below
            ds = None
        for v in vs:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    one = ds if ds is not None else opener(
                        store, group=group, drop_variables=[o for o in vs if o != v], **extra, **kw)
                    out[(g, v)] = one[v].variable.load()
            except Exception as e:  # compared by compare_views
                out[(g, v)] = e
    return out


def plain_values(values: Any) -> list:
    """Values as a flat list, NaN and None both None (a missing value, whichever way it reads)."""
    a = np.asarray(values)
    if a.dtype.kind == "f":
        return [None if x != x else x for x in a.reshape(-1).tolist()]
    return [None if x is None or (isinstance(x, float) and x != x) else x
            for x in a.astype(object).reshape(-1).tolist()]


def only_drop_reads(store: Any, group: str, name: str) -> bool:
    """engine="zstrings" reads the variable only with utf8_errors="drop" (strict: StringDecodeError)."""
    from xr_zstrings import StringDecodeError

    try:
        xr.open_dataset(store, group=None if group == "/" else group, engine="zstrings",
                        utf8_errors="strict")[name].load()
    except StringDecodeError:
        return True
    except Exception:  # another reason: not this exception
        return False
    return False


def compare_views(src: Any, got: dict, ref: dict, what: str) -> None:
    """``got`` (a peer's :func:`engine_views` of a store made from ``src``) reads as ``ref`` (engine=
    "zstrings" on ``src``): same variables, errors where the source errs, dims and values equal. The
    one difference allowed: UnicodeDecodeError where engine="zstrings" reads only by dropping bad
    UTF-8 (netcdf-c cut a value inside a character)."""
    assert set(got) == set(ref), what
    for key, r in ref.items():
        o = got[key]
        if isinstance(r, Exception):  # the source itself cannot be read so: neither may the result
            assert isinstance(o, Exception), (what, key, "reads what the source cannot")
            continue
        if isinstance(o, UnicodeDecodeError) and only_drop_reads(src, *key):
            continue  # the allowed difference
        assert not isinstance(o, Exception), (what, key, o)
        assert o.dims == r.dims, (what, key, o.dims, r.dims)
        assert plain_values(o.values) == plain_values(r.values), (what, key)


def plain(values: Any) -> list[Any]:
    """A flat comparable list of any array's values, every missing value (None, NaN, ``pd.NA``,
    StringDType's NA) as None: what each reader returns for missing differs, the values must not."""
    import pandas as pd

    return [None if v is None or v is pd.NA or (isinstance(v, float) and v != v) else v
            for v in np.asarray(values, dtype=object).reshape(-1).tolist()]

