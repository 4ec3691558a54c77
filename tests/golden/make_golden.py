#!/usr/bin/env python
"""Generate small golden NCZarr / Zarr stores with whatever netCDF4 is installed.

Usage (see README.md next to this file):

    python make_golden.py OUTDIR               # write stores + expected JSON into OUTDIR
    python make_golden.py --versioned ROOT     # same, into ROOT/netcdf-c-<libversion>_netCDF4-<version>/
    python make_golden.py --expected OUTDIR    # only (re)compute <name>.expected.json
    python make_golden.py --nczarr1 OUTDIR     # hand-built NCZarr 1.0 stores (no netcdf-c)
    python make_golden.py --read-store STORE MODE OUT.json   # dump what this netCDF4 reads

Every store is written (and read back) in its own subprocess because old
netcdf-c versions abort() (assertion failures) on some features, e.g. 4.9.0 on
NC_STRING.  Each store has a list of optional features; when writing aborts,
the optional features are dropped one by one (in the listed order) until the
write succeeds.  What was kept / dropped, with the error text, is recorded in
OUTDIR/MANIFEST.json.

Written with the netCDF4 python API only; works with netCDF4 1.6.x .. 1.7.x
(python >= 3.9, numpy < 2 for the old wheels).

Pitfalls honoured here:
* every variable gets ``set_var_chunk_cache(size=0, nelems=0)`` right after
  createVariable (old versions abort on string variables otherwise);
* stores are only ever re-opened with mode "r" (``"a"``/``"r+"`` on an NCZarr
  URL wipes the store).
"""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np

# --------------------------------------------------------------------------
# helpers


def url_for(path: str, mode: str = "nczarr") -> str:
    return "file://" + os.path.abspath(path) + f"#mode={mode},file"


def nocache(v):
    v.set_var_chunk_cache(size=0, nelems=0)
    return v


def mkvar(grp, name, dtype, dims=(), **kw):
    v = grp.createVariable(name, dtype, dims, **kw)
    nocache(v)
    return v


def chars(strings, nchar):
    """(n,) python strs -> (n, nchar) S1 array of their UTF-8 bytes, NUL padded.

    Equivalent to ``netCDF4.stringtochar`` on an ``S<nchar>`` array, done with a
    numpy view because stringtochar is broken for non-ASCII bytes in every
    version tried (1.6.x: 'ascii' codec errors; 1.7.x encoding="none": returns
    garbage such as b"99000011...").  ASCII-only input goes through
    stringtochar itself as a cross-check.
    """
    import netCDF4

    a = np.array([s.encode("utf-8") if isinstance(s, str) else s for s in strings], dtype=f"S{nchar}")
    b = np.ascontiguousarray(a).view("S1").reshape(a.shape + (nchar,))
    if all(max(x, default=0) < 128 for x in a.tolist()):
        sc = np.asarray(netCDF4.stringtochar(a), dtype="S1").reshape(b.shape)
        assert (sc == b).all(), (sc, b)
    return b


# --------------------------------------------------------------------------
# store writers.  Each gets (netCDF4.Dataset root, set_of_enabled_features).

MULTIBYTE = ["a", "héllo", "中文字", "😀x", ""]


def w_strings(ds, feat):
    """NC_STRING variables (+ _nczarr_maxstrlen / _nczarr_default_maxstrlen)."""
    if "default_maxstrlen" in feat:
        # root default max string length (bytes); must precede variable definitions
        ds.setncattr("_nczarr_default_maxstrlen", np.int32(6))
    ds.createDimension("x", 5)
    ds.createDimension("y", 3)
    ds.title = "NC_STRING golden store"
    v = mkvar(ds, "s", str, ("x",))
    v.long_name = "multibyte strings"
    v[:] = np.array(MULTIBYTE, dtype=object)
    if "maxstrlen" in feat:
        t = mkvar(ds, "t", str, ("x",))
        t.setncattr("_nczarr_maxstrlen", np.int32(4))
        # "aéé" -> b"a\xc3\xa9\xc3" (truncated inside a multibyte char)
        t[:] = np.array(["aéé", "abcdef", "x", "", "é"], dtype=object)
    # 2-D string variable, chunked, partially written (missing chunk -> fill "")
    u = mkvar(ds, "s2", str, ("y", "x"), chunksizes=(2, 3))
    u[0, :] = np.array(["r0c0", "r0c1", "r0c2", "r0c3", "r0c4"], dtype=object)
    u[1, 0] = "é1"
    if "scalar_string" in feat:
        ss = mkvar(ds, "ss", str, ())
        ss[0] = "scal"


def w_chars(ds, feat):
    """NC_CHAR variables: 2-D with/without _Encoding, 1-D, scalar, non-UTF-8 bytes."""
    ds.createDimension("x", 4)
    ds.createDimension("nchar", 6)
    ds.createDimension("n4", 4)
    vals = ["ab", "héllo", "中", ""]
    a = mkvar(ds, "c_plain", "S1", ("x", "nchar"))
    a.set_auto_chartostring(False)
    a[:] = chars(vals, 6)
    b = mkvar(ds, "c_utf8", "S1", ("x", "nchar"))
    b._Encoding = "utf-8"
    b.set_auto_chartostring(False)
    b[:] = chars(vals, 6)
    c = mkvar(ds, "c_latin1", "S1", ("n4",))
    c.set_auto_chartostring(False)
    c[:] = np.array([b"c", b"a", b"f", b"\xe9"], dtype="S1")  # not valid UTF-8
    # partially written char var (row 2,3 never written -> fill)
    d = mkvar(ds, "c_partial", "S1", ("x", "nchar"), chunksizes=(2, 6))
    d.set_auto_chartostring(False)
    d[0:2, :] = chars(["abc", "defghi"], 6)
    if "scalar_char" in feat:
        e = mkvar(ds, "c_scalar", "S1", ())
        e.set_auto_chartostring(False)
        e.assignValue(b"z")


def w_numeric(ds, feat):
    """Numeric vars: scalars, fill values, partial writes, edge chunks, zlib+shuffle, unlimited dim."""
    # NCZarr in netcdf-c 4.9.0..4.9.3 rejects unlimited dims ("Invalid dimension size")
    ds.createDimension("t", None if "unlimited" in feat else 2)
    ds.createDimension("y", 5)
    ds.createDimension("x", 7)
    comp = {"zlib": True, "complevel": 1, "shuffle": True} if "zlib" in feat else {}
    temp = mkvar(ds, "temp", "f4", ("t", "y", "x"), chunksizes=(1, 2, 3), fill_value=np.float32(-999.0), **comp)
    temp.units = "K"
    # t=0: only the top-left 2x3 block (1 chunk) + one edge value; t=1: full
    temp[0, 0:2, 0:3] = np.arange(6, dtype="f4").reshape(2, 3)
    temp[0, 4, 6] = 46.5
    temp[1, :, :] = (np.arange(35, dtype="f4").reshape(5, 7) + 100.0)
    cnt = mkvar(ds, "count", "i2", ("y", "x"), chunksizes=(2, 4))  # default fill
    cnt[0:2, 0:4] = np.arange(8, dtype="i2").reshape(2, 4)
    cnt[4, 4:7] = [-1, -2, -3]
    dbl = mkvar(ds, "dbl", "f8", ("x",), fill_value=np.nan)
    dbl[0:5] = [0.1, -2.5, np.inf, -np.inf, 1e300]  # x[5], x[6] -> fill (NaN)
    u1 = mkvar(ds, "u8", "u1", ("x",), fill_value=np.uint8(255))
    u1[0:3] = [0, 128, 254]
    i8 = mkvar(ds, "i64", "i8", ("y",), chunksizes=(2,), **comp)
    i8[:] = np.array([-(2**62), -1, 0, 1, 2**62], dtype="i8")
    time = mkvar(ds, "time", "f8", ("t",))
    time.units = "days since 2000-01-01"
    time[0:2] = [0.0, 1.0]
    if "unlimited" in feat:
        time[2] = 2.0  # grows t to 3; temp[2] is never written (all chunks missing)
    sc = mkvar(ds, "sc_f8", "f8", ())
    sc.assignValue(3.5)
    sc2 = mkvar(ds, "sc_i4_unwritten", "i4", ())  # never written -> default fill
    sc2.note = "never written"
    if "nofill" in feat:
        nf = mkvar(ds, "nofill_i4", "i4", ("y",), fill_value=False)
        nf[0:2] = [7, 8]


def w_attrs(ds, feat):
    """Global and variable attributes of many types."""
    ds.title = "attribute golden store"
    if "unicode_text" in feat:
        ds.unicode_text = "héllo 中文"  # 4.9.0: "NCZarr error" on close
    ds.i2_array = np.array([1, -2, 3], dtype="i2")
    ds.f4_scalar = np.float32(1.5)
    ds.f8_list = [1.0, 2.5, -3.25]
    ds.i4_scalar = np.int32(42)
    ds.i8_scalar = np.int64(2**40)
    ds.u1_array = np.array([0, 255], dtype="u1")
    ds.json_text = '{"a": 1}'
    ds.json_list_text = "[1, 2, 3]"
    ds.number_text = "17"
    if "string_attrs" in feat:
        ds.setncattr_string("string_list", ["a", "héllo", "中文字"])
        ds.setncattr_string("string_one", "solo")
    if "empty_text" in feat:
        ds.empty_text = ""
    ds.createDimension("x", 2)
    v = mkvar(ds, "v", "f4", ("x",), fill_value=np.float32(-1.0))
    v.units = "m s-1"
    v.valid_range = np.array([-10, 10], dtype="i2")
    v.scale_factor = np.float32(0.5)
    v.add_offset = 1.0
    v.json_text = '{"b": [1, 2], "c": {"d": "e"}}'
    v.f8_list = [0.5, np.nan]
    if "string_attrs" in feat:
        v.setncattr_string("flags", ["low", "high"])
    v[:] = np.array([2.0, 4.0], dtype="f4")  # packed: read back with scale/offset applied
    v2 = mkvar(ds, "noattrs", "i4", ("x",))
    v2[:] = [1, 2]


def w_groups(ds, feat):
    """Nested groups, dimension inheritance and shadowing."""
    ds.createDimension("x", 3)
    ds.createDimension("y", 2)
    ds.level = "root"
    rv = mkvar(ds, "rv", "i4", ("x",))
    rv[:] = [1, 2, 3]
    sub = ds.createGroup("sub")
    sub.level = "sub"
    sub.createDimension("z", 4)
    sub.createDimension("x", 5)  # shadows /x (size 3)
    a = mkvar(sub, "a", "f4", ("y",))  # root dim y
    a[:] = [0.5, 1.5]
    b = mkvar(sub, "b", "i2", ("x",))  # /sub/x (5)
    b[:] = [10, 11, 12, 13, 14]
    c = mkvar(sub, "c", "i4", ("z", "y"), chunksizes=(3, 1), fill_value=np.int32(-7))
    c[0:2, :] = [[1, 2], [3, 4]]
    if "sub_strings" in feat:
        nm = mkvar(sub, "names", str, ("z",))
        nm[:] = np.array(["w", "ïx", "y", "z"], dtype=object)
    deeper = sub.createGroup("deeper")
    deeper.level = "deeper"
    deeper.createDimension("w", 2)
    d = mkvar(deeper, "d", "f8", ("w", "x"))  # x -> nearest ancestor = /sub/x (5)
    d[:] = np.arange(10, dtype="f8").reshape(2, 5)
    e = mkvar(deeper, "e", "i4", ("z",))  # /sub/z
    e[:] = [4, 3, 2, 1]
    ds.createGroup("empty")


def w_purezarr(ds, feat):
    """mode=zarr (no NCZarr metadata): numeric, char, string, attrs, subgroup."""
    ds.createDimension("x", 4)
    ds.createDimension("y", 3)
    ds.createDimension("nchar", 3)
    ds.title = "pure zarr"
    ds.f8_list = [1.0, 2.0]
    v = mkvar(ds, "v", "f4", ("x", "y"), chunksizes=(3, 2), fill_value=np.float32(-9.0))
    v.units = "m"
    v[0:3, :] = np.arange(9, dtype="f4").reshape(3, 3)
    i = mkvar(ds, "i", "i4", ("x",))
    i[:] = [1, 2, 3, 4]
    c = mkvar(ds, "c", "S1", ("x", "nchar"))
    c.set_auto_chartostring(False)
    c[:] = chars(["ab", "é", "xyz", ""], 3)
    if "strings" in feat:
        s = mkvar(ds, "s", str, ("y",))
        s[:] = np.array(["a", "héllo", "中文字"], dtype=object)
    if "scalar" in feat:
        sc = mkvar(ds, "sc", "f8", ())
        sc.assignValue(2.5)
    if "group" in feat:
        g = ds.createGroup("g")
        g.createDimension("z", 2)
        gv = mkvar(g, "gv", "i2", ("z",))
        gv[:] = [5, 6]


# name -> (writer, mode, optional features in drop order)
STORES = {
    "strings": (w_strings, "nczarr", ["scalar_string", "default_maxstrlen", "maxstrlen"]),
    "chars": (w_chars, "nczarr", ["scalar_char"]),
    "numeric": (w_numeric, "nczarr", ["nofill", "zlib", "unlimited"]),
    "attrs": (w_attrs, "nczarr", ["empty_text", "string_attrs", "unicode_text"]),
    "groups": (w_groups, "nczarr", ["sub_strings"]),
    "purezarr": (w_purezarr, "zarr", ["strings", "scalar", "group"]),
}


# --------------------------------------------------------------------------
# reading back (expected values)


def jsafe(x):
    """Convert numpy / python values into JSON-safe values.

    floats: NaN -> null, +/-inf -> "Infinity"/"-Infinity";
    bytes -> {"__bytes__": <latin-1 decoded str>}; numpy scalars -> python.
    """
    if isinstance(x, np.ma.MaskedArray):
        if x.dtype.kind == "O":
            data = np.asarray(x.data, dtype=object)
        else:
            data = x.filled(0) if x.dtype.kind in "iufb" else np.asarray(x.data)
        mask = np.ma.getmaskarray(x)
        if data.ndim == 0:
            return None if bool(mask) else jsafe(data[()])
        out = np.empty(data.shape, dtype=object)
        for idx in np.ndindex(data.shape):
            out[idx] = None if mask[idx] else jsafe(data[idx])
        return out.tolist()
    if isinstance(x, np.ndarray):
        if x.ndim == 0:
            return jsafe(x[()])
        out = np.empty(x.shape, dtype=object)
        for idx in np.ndindex(x.shape):
            out[idx] = jsafe(x[idx])
        return out.tolist()
    if isinstance(x, (list, tuple)):
        return [jsafe(i) for i in x]
    if isinstance(x, dict):
        return {str(k): jsafe(val) for k, val in x.items()}
    if isinstance(x, (bytes, np.bytes_)):
        return {"__bytes__": bytes(x).decode("latin-1")}
    if isinstance(x, (str, np.str_)):
        return str(x)
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (np.integer, int)):
        return int(x)
    if isinstance(x, (np.floating, float)):
        f = float(x)
        if math.isnan(f):
            return None
        if math.isinf(f):
            return "Infinity" if f > 0 else "-Infinity"
        return f
    if x is None:
        return None
    return {"__repr__": repr(x)}


def dumps(obj, ind=0):
    """JSON text: dicts indented one key per line, lists on one line."""
    if isinstance(obj, dict) and obj:
        pad = " " * (ind + 1)
        items = [f"{pad}{json.dumps(k, ensure_ascii=False)}: {dumps(v, ind + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * ind + "}" + ("\n" if ind == 0 else "")
    return json.dumps(obj, ensure_ascii=False, allow_nan=False)


def _attr_entry(val):
    e = {"value": jsafe(val), "type": type(val).__name__}
    if isinstance(val, (np.ndarray, np.generic)):
        e["dtype"] = val.dtype.str
    return e


def _dtype_str(v):
    dt = v.dtype
    if dt is str:
        return "str"
    try:
        return np.dtype(dt).str
    except TypeError:
        return repr(dt)


def _read(v, raw):
    try:
        v.set_auto_maskandscale(not raw)
        v.set_auto_chartostring(not raw)
        return jsafe(v[...])
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}


def describe_group(g):
    out = {
        "dimensions": {n: [len(d), d.isunlimited()] for n, d in g.dimensions.items()},
        "attrs": {},
        "variables": {},
    }
    for a in g.ncattrs():
        try:
            out["attrs"][a] = _attr_entry(g.getncattr(a))
        except Exception as e:
            out["attrs"][a] = {"error": f"{type(e).__name__}: {e}"}
    for name, v in g.variables.items():
        ent = {"dims": list(v.dimensions), "shape": list(v.shape), "dtype": _dtype_str(v)}
        try:
            ck = v.chunking()
            ent["chunking"] = ck if isinstance(ck, str) else [int(c) for c in ck]
        except Exception as e:
            ent["chunking"] = {"error": str(e)}
        try:
            ent["filters"] = jsafe({k: val for k, val in (v.filters() or {}).items() if val})
        except Exception as e:
            ent["filters"] = {"error": str(e)}
        ent["attrs"] = {}
        for a in v.ncattrs():
            try:
                ent["attrs"][a] = _attr_entry(v.getncattr(a))
            except Exception as e:
                ent["attrs"][a] = {"error": f"{type(e).__name__}: {e}"}
        # raw: set_auto_maskandscale(False), set_auto_chartostring(False)
        ent["values"] = _read(v, raw=True)
        # decoded: netCDF4 defaults (masked -> null, scale/offset, chartostring for _Encoding)
        ent["values_decoded"] = _read(v, raw=False)
        out["variables"][name] = ent
    return out


def expected_for(store_path, mode):
    import netCDF4

    res = {
        "netcdf_c_version": netCDF4.__netcdf4libversion__,
        "netCDF4_version": netCDF4.__version__,
        "url_mode": mode,
        "store": os.path.basename(store_path),
        "notes": "values: raw (auto mask/scale/chartostring off); values_decoded: netCDF4 defaults "
                 "(masked->null). NaN->null, inf->'Infinity', bytes->{'__bytes__': latin-1 str}.",
        "groups": {},
    }
    ds = netCDF4.Dataset(url_for(store_path, mode), "r")
    try:
        stack = [("/", ds)]
        while stack:
            path, g = stack.pop(0)
            res["groups"][path] = describe_group(g)
            for n, sg in g.groups.items():
                stack.append(((path.rstrip("/") + "/" + n), sg))
    finally:
        ds.close()
    return res


# --------------------------------------------------------------------------
# subprocess entry points


def _write_one(name, outdir, feats):
    import netCDF4

    writer, mode, _ = STORES[name]
    path = os.path.join(outdir, name + ".zarr")
    shutil.rmtree(path, ignore_errors=True)
    ds = netCDF4.Dataset(url_for(path, mode), "w", format="NETCDF4")
    try:
        writer(ds, set(feats))
    finally:
        ds.close()


def _expect_one(name, outdir, mode):
    path = os.path.join(outdir, name + ".zarr")
    res = expected_for(path, mode)
    with open(os.path.join(outdir, name + ".expected.json"), "w", encoding="utf-8") as f:
        f.write(dumps(res))


def _run(args):
    p = subprocess.run([sys.executable, os.path.abspath(__file__)] + args, capture_output=True, text=True)
    tail = (p.stdout + p.stderr).strip().splitlines()[-6:]
    return p.returncode, "\n".join(tail)


def generate(outdir):
    import netCDF4

    os.makedirs(outdir, exist_ok=True)
    manifest = {
        "netcdf_c_version": netCDF4.__netcdf4libversion__,
        "netCDF4_version": netCDF4.__version__,
        "numpy_version": np.__version__,
        "python": sys.version.split()[0],
        "stores": {},
    }
    for name, (_, mode, optional) in STORES.items():
        feats = list(optional)
        attempts = []

        def attempt(fs):
            rc_, tail_ = _run(["--_write", name, outdir, ",".join(fs)])
            if rc_ != 0:
                attempts.append({"features": list(fs), "returncode": rc_, "error": tail_})
            return rc_

        # all features; else keep the features that work one at a time; else none
        rc = attempt(feats)
        if rc != 0 and feats:
            feats = [f for f in feats if attempt([f]) == 0]
            rc = attempt(feats)
            if rc != 0 and feats:
                feats = []
                rc = attempt(feats)
        entry = {"mode": mode, "features": feats if rc == 0 else None, "failed_attempts": attempts}
        if rc != 0:
            shutil.rmtree(os.path.join(outdir, name + ".zarr"), ignore_errors=True)
            entry["written"] = False
        else:
            entry["written"] = True
            rc2, tail2 = _run(["--_expect", name, outdir, mode])
            if rc2 != 0:
                entry["expected_error"] = tail2
                with open(os.path.join(outdir, name + ".expected.json"), "w") as f:
                    json.dump({"netcdf_c_version": netCDF4.__netcdf4libversion__,
                               "error": f"reader crashed (rc={rc2}): {tail2}"}, f, indent=1)
        manifest["stores"][name] = entry
        print(name, f"features={entry['features']}", f"failed-attempts={len(attempts)}")
    with open(os.path.join(outdir, "MANIFEST.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False)
        f.write("\n")


def expected_only(outdir):
    for name, (_, mode, _) in STORES.items():
        if os.path.isdir(os.path.join(outdir, name + ".zarr")):
            rc, tail = _run(["--_expect", name, outdir, mode])
            print(name, "ok" if rc == 0 else "FAILED: " + tail)


# --------------------------------------------------------------------------
# NCZarr 1.0 (hand-built)


def _wjson(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False)


def _wchunk(path, arr):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(np.ascontiguousarray(arr).tobytes())


def make_nczarr1(outdir):
    """Hand-build an NCZarr 1.0 store (netcdf-c 4.8.0 layout) WITHOUT netcdf-c.

    No installable netCDF4 wheel carries netcdf-c 4.8.x (cp39 1.5.x wheels
    carry 4.7.4, 1.6.0+ carry 4.9.0+), so this store is built from the NCZarr
    document (shared/specs/nczarr-netcdf-c.md, Appendix F: separate objects
    parallel to the Zarr ones, same content as the later keys) and from
    reading netcdf-c's 4.8.0-era libnczarr sources (zsync.c ncz_sync_grp /
    ncz_sync_var / ncz_sync_atts, zarr.c ncz_create_superblock, zcvt.c
    NCZ_stringconvert, zinternal.h):

    * ``/.nczarr`` (root only): ``{"zarr_format": 2, "nczarr_version": "1.0.0"}``
      (NOT ``{"version": ...}``; 4.8.1+ readers look up "nczarr_version")
    * ``.zgroup``: ``{"zarr_format": 2}`` (nothing else)
    * ``.nczgroup``: ``{"dims": {name: int size}, "vars": [names], "groups": [names]}``
    * ``.zarray``: plain zarr v2, compressor null, filters null
    * ``.nczvar`` (the document says ``.nczarray``; 4.8.0 wrote ``.nczvar``;
      later zinternal.h lists ".nczarray"/".nczattrs" as the V1 names and
      ".nczvar"/".nczattr" as deprecated -- a reader should accept both):
      ``{"dimrefs": ["/x", "/sub/z", ...], "storage": "chunked"|"contiguous"|"compact"}``
    * ``.nczattr``: ``{"types": {attr: "<nc_type code as decimal string>"}}``
      (NC_BYTE=1, NC_CHAR=2, NC_SHORT=3, NC_INT=4, NC_FLOAT=5, NC_DOUBLE=6,
      NC_UBYTE=7, NC_USHORT=8, NC_UINT=9, NC_INT64=10, NC_UINT64=11;
      NC_STRING attributes were rejected)
    * ``.zattrs`` and ``.nczattr`` are written ONLY when the group/variable
      has at least one attribute (ncz_sync_atts returns early otherwise)
    * attribute values (NCZ_stringconvert): NC_CHAR -> one JSON string; every
      other type -> a JSON LIST, even for a single value; numbers printed with
      C "%lg" (6 significant digits, so -999.0 appears as -999 and the
      default double fill as 9.96921e+36)
    * ``fill_value``: same conversion with count 1, i.e. a one-element list
      for numeric types (``[-999]``), a JSON string for NC_CHAR;
      absent/null when no_fill
    * NC_CHAR variables: zarr dtype ``"<U1"`` but ONE BYTE per element in the
      chunk data (not UCS4); no NC_STRING variables
    * no ``_ARRAY_DIMENSIONS`` (added in 4.8.2)
    * scalars: NOT included.  The 4.8.0-era writer has no scalar marker
      (storage is "chunked"/"contiguous"/"compact" only) and netcdf-c 4.9.0's
      V1 reader aborts on every scalar form we tried (shape [] or shape [1]
      with "storage": "scalar": assertion dimrefs length == rank), so no
      form can be confirmed.

    Two copies are written: ``nczarr1.zarr`` with the object names 4.8.0
    wrote (``.nczvar``/``.nczattr``) and ``nczarr1-docnames.zarr`` with the
    document's names (``.nczarray``/``.nczattrs``).  netcdf-c 4.9.0/4.9.1 can
    read only the latter (with the 4.8.0 names they fail with "Attempt to
    read empty NCZarr map key"); README.md has the cross-check.

    The result is NOT produced by any netcdf-c.  The matching
    nczarr1.expected.json is written by hand below (what a correct reader
    should return, in the same format as the generated expected files).
    """
    shutil.rmtree(outdir, ignore_errors=True)
    os.makedirs(outdir)

    def g(x):
        """C "%lg" rendering, as a JSON number."""
        t = f"{x:g}"
        v = float(t)
        return int(v) if v.is_integer() and "e" not in t else v

    def zarray(shape, chunks, dtype, fill):
        return {"zarr_format": 2, "shape": shape, "dtype": dtype, "chunks": chunks,
                "fill_value": fill, "order": "C", "compressor": None, "filters": None}

    # ---- store: nczarr1.zarr (numeric, char, scalar, attrs, group) ----
    s = os.path.join(outdir, "nczarr1.zarr")
    _wjson(s + "/.nczarr", {"zarr_format": 2, "nczarr_version": "1.0.0"})
    _wjson(s + "/.zgroup", {"zarr_format": 2})
    _wjson(s + "/.nczgroup", {"dims": {"x": 3, "nchar": 4, "t": 2},
                              "vars": ["v", "c", "time"], "groups": ["sub"]})
    _wjson(s + "/.zattrs", {"title": "nczarr 1.0 by hand", "f8_list": [1, 2.5],
                            "i2_array": [1, -2, 3], "f4_one": [g(0.1)]})
    _wjson(s + "/.nczattr", {"types": {"title": "2", "f8_list": "6", "i2_array": "3", "f4_one": "5"}})
    # v: f4 (x) chunks 2, fill -999, only first chunk written -> v[2] = fill
    _wjson(s + "/v/.zarray", zarray([3], [2], "<f4", [g(-999.0)]))
    _wjson(s + "/v/.nczvar", {"dimrefs": ["/x"], "storage": "chunked"})
    _wjson(s + "/v/.zattrs", {"_FillValue": [g(-999.0)], "units": "K", "scale": [g(0.5)]})
    _wjson(s + "/v/.nczattr", {"types": {"_FillValue": "5", "units": "2", "scale": "5"}})
    _wchunk(s + "/v/0", np.array([1.5, 2.5], dtype="<f4"))
    # c: NC_CHAR (x, nchar), dtype <U1 but 1 byte per element; no attributes
    _wjson(s + "/c/.zarray", zarray([3, 4], [3, 4], "<U1", ""))
    _wjson(s + "/c/.nczvar", {"dimrefs": ["/x", "/nchar"], "storage": "chunked"})
    cbytes = b"ab\x00\x00" + b"h\xc3\xa9l" + b"xyz\x00"
    _wchunk(s + "/c/0.0", np.frombuffer(cbytes, dtype="u1"))
    # time: f8 (t), default fill
    _wjson(s + "/time/.zarray", zarray([2], [2], "<f8", [g(9.969209968386869e36)]))
    _wjson(s + "/time/.nczvar", {"dimrefs": ["/t"], "storage": "chunked"})
    _wjson(s + "/time/.zattrs", {"units": "days since 2000-01-01"})
    _wjson(s + "/time/.nczattr", {"types": {"units": "2"}})
    _wchunk(s + "/time/0", np.array([0.0, 1.0], dtype="<f8"))
    # /sub: own dim z, shadowing x (5); a uses /sub/z and ROOT /x (3), b uses /sub/x (5)
    _wjson(s + "/sub/.zgroup", {"zarr_format": 2})
    _wjson(s + "/sub/.nczgroup", {"dims": {"z": 2, "x": 5}, "vars": ["a", "b"], "groups": []})
    _wjson(s + "/sub/.zattrs", {"level": "sub"})
    _wjson(s + "/sub/.nczattr", {"types": {"level": "2"}})
    _wjson(s + "/sub/a/.zarray", zarray([2, 3], [2, 3], "<i2", [-32767]))
    _wjson(s + "/sub/a/.nczvar", {"dimrefs": ["/sub/z", "/x"], "storage": "chunked"})
    _wchunk(s + "/sub/a/0.0", np.arange(6, dtype="<i2"))
    _wjson(s + "/sub/b/.zarray", zarray([5], [5], "<f8", [-1]))
    _wjson(s + "/sub/b/.nczvar", {"dimrefs": ["/sub/x"], "storage": "chunked"})
    _wjson(s + "/sub/b/.zattrs", {"_FillValue": [-1]})
    _wjson(s + "/sub/b/.nczattr", {"types": {"_FillValue": "6"}})
    # b never written -> all fill

    def var(dims, shape, dtype, values, attrs=None, decoded=None):
        return {"dims": dims, "shape": shape, "dtype": dtype, "attrs": attrs or {},
                "values": values, "values_decoded": values if decoded is None else decoded}

    def at(value, typ, dtype=None):
        e = {"value": value, "type": typ}
        if dtype:
            e["dtype"] = dtype
        return e

    b = lambda s_: {"__bytes__": s_}
    exp = {
        "netcdf_c_version": None,
        "source": "hand-written by make_nczarr1(); NOT produced by netcdf-c",
        "nczarr_version": "1.0.0",
        "url_mode": "nczarr",
        "store": "nczarr1.zarr",
        "notes": "same conventions as the netcdf-c generated expected files; "
                 "attrs types are what netCDF4-python would return",
        "groups": {
            "/": {
                "dimensions": {"x": [3, False], "nchar": [4, False], "t": [2, False]},
                "attrs": {"title": at("nczarr 1.0 by hand", "str"),
                          "f8_list": at([1.0, 2.5], "ndarray", "<f8"),
                          "i2_array": at([1, -2, 3], "ndarray", "<i2"),
                          "f4_one": at(0.10000000149011612, "float32", "<f4")},
                "variables": {
                    "v": var(["x"], [3], "<f4", [1.5, 2.5, -999.0],
                             {"_FillValue": at(-999.0, "float32", "<f4"), "units": at("K", "str"),
                              "scale": at(0.5, "float32", "<f4")}, [1.5, 2.5, None]),
                    "c": var(["x", "nchar"], [3, 4], "|S1",
                             [[b("a"), b("b"), b(""), b("")], [b("h"), b("\xc3"), b("\xa9"), b("l")],
                              [b("x"), b("y"), b("z"), b("")]],
                             decoded=[[b("a"), b("b"), None, None], [b("h"), b("\xc3"), b("\xa9"), b("l")],
                                      [b("x"), b("y"), b("z"), None]]),
                    "time": var(["t"], [2], "<f8", [0.0, 1.0],
                                {"units": at("days since 2000-01-01", "str")}),
                },
            },
            "/sub": {
                "dimensions": {"z": [2, False], "x": [5, False]},
                "attrs": {"level": at("sub", "str")},
                "variables": {
                    "a": var(["z", "x"], [2, 3], "<i2", [[0, 1, 2], [3, 4, 5]]),
                    "b": var(["x"], [5], "<f8", [-1.0] * 5, {"_FillValue": at(-1.0, "float64", "<f8")},
                             [None] * 5),
                },
            },
        },
    }
    with open(os.path.join(outdir, "nczarr1.expected.json"), "w", encoding="utf-8") as f:
        f.write(dumps(exp))
    # document-named copy (.nczarray / .nczattrs), same expected content
    d = os.path.join(outdir, "nczarr1-docnames.zarr")
    shutil.copytree(s, d)
    for root, _, files in os.walk(d):
        for fn, new in ((".nczvar", ".nczarray"), (".nczattr", ".nczattrs")):
            if fn in files:
                os.rename(os.path.join(root, fn), os.path.join(root, new))
    exp["store"] = "nczarr1-docnames.zarr"
    with open(os.path.join(outdir, "nczarr1-docnames.expected.json"), "w", encoding="utf-8") as f:
        f.write(dumps(exp))


# --------------------------------------------------------------------------


def main(argv):
    if len(argv) >= 2 and argv[0] == "--_write":
        _write_one(argv[1], argv[2], [f for f in (argv[3] if len(argv) > 3 else "").split(",") if f])
    elif len(argv) >= 2 and argv[0] == "--_expect":
        _expect_one(argv[1], argv[2], argv[3])
    elif len(argv) == 2 and argv[0] == "--expected":
        expected_only(os.path.abspath(argv[1]))
    elif len(argv) == 4 and argv[0] == "--read-store":
        # python make_golden.py --read-store STORE MODE OUT.json : what this netCDF4 reads
        res = expected_for(os.path.abspath(argv[1]), argv[2])
        with open(argv[3], "w", encoding="utf-8") as f:
            f.write(dumps(res))
    elif len(argv) == 2 and argv[0] == "--nczarr1":
        make_nczarr1(os.path.abspath(argv[1]))
    elif len(argv) == 2 and argv[0] == "--versioned":
        import netCDF4

        generate(os.path.join(os.path.abspath(argv[1]),
                              f"netcdf-c-{netCDF4.__netcdf4libversion__}_netCDF4-{netCDF4.__version__}"))
    elif len(argv) == 1 and not argv[0].startswith("-"):
        generate(os.path.abspath(argv[0]))
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
