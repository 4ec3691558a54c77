"""The stores the tests hold, as one corpus: every netcdf-c generation (tests/golden), live netcdf-c
4.10.1 output (written here with the project's netCDF4), zarr-python v2/v3 stores and our v3 layouts.

Shared by the writer x reader matrix (tests/interop/test_writer_matrix.py) and the migration peers
(tests/interop/test_migrate_peers.py). ``source(sid, base)`` gives a store by its id; golden stores
are used where they lie, the others are written once under ``base``.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import netCDF4
import numpy as np
import xarray as xr
import zarr

from xr_zstrings.codecs.layouts import V3_LAYOUTS

__all__ = ["GOLDEN", "LIVE", "NAMES", "PEERS", "SOURCES", "golden_sources", "make_golden_module", "source", "url"]

GOLDEN = Path(__file__).resolve().parent / "golden"
_GEN_IDS = {
    "netcdf-c-4.9.0_netCDF4-1.6.2": "nc490",
    "netcdf-c-4.9.1_netCDF4-1.6.3": "nc491",
    "netcdf-c-4.9.3-development_netCDF4-1.6.5": "nc493dev-1.6.5",
    "netcdf-c-4.9.3-development_netCDF4-1.7.1.post1": "nc493dev-1.7.1",
    "netcdf-c-4.9.4-development_netCDF4-1.7.2": "nc494dev",
    "nczarr-1.0-doc": "nczarr1doc",
}


def golden_sources() -> dict[str, Path]:
    out = {}
    for gen, short in _GEN_IDS.items():
        for store in sorted((GOLDEN / gen).glob("*.zarr")):
            out[f"{short}-{store.stem}"] = store
    return out


def make_golden_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_golden", GOLDEN / "make_golden.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


LIVE = ("strings", "chars", "numeric", "attrs", "groups", "purezarr")
NAMES = np.array(["Zürich", "東京", "São Paulo", "", "Oslo"], dtype=np.dtypes.StringDType())


def peer_dataset() -> xr.Dataset:
    """What xarray/zarr-python users store: a string index, 2-D strings, numbers with CF attributes."""
    return xr.Dataset(
        {
            "label": (("station", "k"), np.array([[s, s.upper()] for s in NAMES.tolist()],
                                                 dtype=np.dtypes.StringDType())),
            "temp": (("time", "station"), np.arange(15, dtype="f4").reshape(3, 5) / 4,
                     {"units": "degC", "long_name": "température"}),
            "count": ("station", np.arange(5, dtype="i8"), {"flag_values": np.array([0, 1], "i8")}),
        },
        coords={"station": NAMES, "time": np.array([0, 1, 2], "i4")},
        attrs={"title": "peer store", "version": 3},
    )


def write_peer(kind: str, path: Path) -> None:
    import numcodecs
    from zarr.codecs import GzipCodec, ZstdCodec

    from xr_zstrings.write.zarr3 import to_zarr_v3

    ds = peer_dataset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        if kind == "zarr2-xarray":  # zarr-python's default v2 compressor, vlen-utf8 strings
            ds.to_zarr(path, zarr_format=2)
        elif kind == "zarr2-compressors":
            enc = {"temp": {"compressors": (numcodecs.Zlib(level=5),), "filters": (numcodecs.Shuffle(4),)},
                   "count": {"compressors": (numcodecs.Blosc(cname="lz4", clevel=3, shuffle=2),)},
                   "label": {"compressors": (numcodecs.Zstd(level=2),)}}
            ds.to_zarr(path, zarr_format=2, encoding=enc)
        elif kind == "zarr3-vlen-utf8":
            ds.to_zarr(path, zarr_format=3)
        elif kind == "zarr3-compressed":
            enc = {"temp": {"compressors": (GzipCodec(level=3),)},
                   "label": {"compressors": (ZstdCodec(level=5),)}}
            ds.to_zarr(path, zarr_format=3, encoding=enc)
        elif kind == "zarr3-sharded":
            enc = {v: {"chunks": (1,) * (ds[v].ndim - 1) + (2,), "shards": (1,) * (ds[v].ndim - 1) + (4,)}
                   for v in ("label", "temp", "count")}
            ds.to_zarr(path, zarr_format=3, encoding=enc)
        elif kind == "zarr3-fixed_length_utf32":
            g = zarr.open_group(path, mode="w", zarr_format=3)
            a = g.create_array("name", shape=(5,), dtype="<U9", chunks=(2,), dimension_names=["station"])
            a[:] = np.array(NAMES.tolist(), dtype="<U9")
            b = g.create_array("t", shape=(5,), dtype="f8", chunks=(5,), dimension_names=["station"])
            b[:] = np.arange(5.0)
        elif kind == "zarr3-null_terminated_bytes":
            g = zarr.open_group(path, mode="w", zarr_format=3)
            a = g.create_array("code", shape=(4,), dtype="S3", chunks=(3,), dimension_names=["x"])
            a[:] = np.array([b"ab", b"xyz", b"", b"q"])
        elif kind.startswith("zarr3-") and kind[6:] in OUR_V3_LAYOUTS:
            to_zarr_v3(ds, path, layout=kind[6:])
        else:
            raise AssertionError(kind)


#: the Zarr v3 string layouts only to_zarr_v3 writes (zarr-python writes the rest itself, above)
OUR_V3_LAYOUTS = tuple(r.name for r in V3_LAYOUTS if not r.zarr_python)
PEERS = ("zarr2-xarray", "zarr2-compressors", "zarr3-vlen-utf8", "zarr3-compressed", "zarr3-sharded",
         "zarr3-fixed_length_utf32", "zarr3-null_terminated_bytes", *(f"zarr3-{n}" for n in OUR_V3_LAYOUTS))
SOURCES = [*golden_sources(), *(f"nc4101-{n}" for n in LIVE), *PEERS]
#: sources with missing strings, each kind engine="zstrings" returns: a CF string _FillValue
#: (netcdf-c's NC_STRING; a Zarr v2 fill_value xarray wrote, masked as engine="zarr" masks it) and
#: none of their own (a v2 fill_value null; zarrs' optional type): the marker fill MISSING_MARKER.
#: Not in SOURCES: the writer matrix adds them (their cells end in documented refusals).
MISSING = {
    "missing-nc4101-fill": None,
    "missing-zarr2-fill": None,
    "missing-zarr2-null": Path(__file__).resolve().parent / "golden_missing" / "zarr-python-2.18" / "missing.zarr",
    "missing-zarrs-optional": Path(__file__).resolve().parent / "golden_chunks" / "zarrs_optional" / "optional.zarr",
}


def source(sid: str, base: Path) -> Path:
    """The store for a source id (golden as stored; live netcdf-c and peers written once)."""
    golden = golden_sources()
    if sid in golden:
        return golden[sid]
    if MISSING.get(sid) is not None:
        return MISSING[sid]
    path = base / f"{sid}.zarr"
    if path.exists():
        return path
    if sid == "missing-nc4101-fill":
        write_netcdf_missing(path)
    elif sid == "missing-zarr2-fill":
        na = np.dtypes.StringDType(na_object=np.nan)
        ds = xr.Dataset({"s": ("x", np.array(["a", np.nan, "", "é"], dtype=na))})
        ds["s"].encoding = {"_FillValue": "N/A", "dtype": na}
        ds.to_zarr(path, zarr_format=2)  # .zarray fill_value "N/A"; the NA written as it
    elif sid == "nc4101-tree":
        write_netcdf_tree(path)
    elif sid.startswith("nc4101-"):
        mg = make_golden_module()
        name = sid.split("-", 1)[1]
        writer, mode, features = mg.STORES[name]
        nc = netCDF4.Dataset(mg.url_for(str(path), mode), "w", format="NETCDF4")
        try:
            writer(nc, set(features))  # every optional feature: zlib+shuffle, unlimited, scalars, ...
        finally:
            nc.close()
    else:
        write_peer(sid, path)
    return path


def write_netcdf_missing(path: Path) -> None:
    """netcdf-c 4.10.1 NC_STRING with a string _FillValue: a value written as the fill and never-written
    elements are missing for every CF reader; one without a fill beside it."""
    nc = netCDF4.Dataset(url(path, "nczarr"), "w", format="NETCDF4")
    try:
        nc.createDimension("x", 6)
        s = nc.createVariable("s", str, ("x",), fill_value="N/A", chunksizes=(2,))
        s[0], s[1], s[2], s[3] = "a", "é", "N/A", ""
        t = nc.createVariable("t", str, ("x",))
        t[:] = np.array(["p", "", "q", "r", "s", "t"], dtype=object)
    finally:
        nc.close()


def write_netcdf_tree(path: Path) -> None:
    """netcdf-c 4.10.1 (netCDF4) NCZarr with nested groups a DataTree holds (no shadowed dimension):
    an unlimited dimension, zlib+shuffle, NC_STRING and NC_CHAR in subgroups, inherited dimensions."""
    nc = netCDF4.Dataset(url(path, "nczarr"), "w", format="NETCDF4")
    try:
        nc.title = "tree"
        nc.createDimension("time", None)
        nc.createDimension("station", 3)
        t = nc.createVariable("time", "f8", ("time",))
        t.units = "days since 2000-01-01"
        t[:] = [0.0, 1.0]
        st = nc.createVariable("station", str, ("station",))
        st[:] = np.array(["Zürich", "東京", "Oslo"], dtype=object)
        obs = nc.createGroup("obs")
        obs.note = "nested"
        temp = obs.createVariable("temp", "f4", ("time", "station"), zlib=True, complevel=2, shuffle=True,
                                  fill_value=np.float32(-1e30))
        temp.units = "K"
        temp[:] = np.arange(6, dtype="f4").reshape(2, 3)
        obs.createDimension("nchar", 4)
        code = obs.createVariable("code", "S1", ("station", "nchar"))
        code._Encoding = "utf-8"
        code[:] = np.array(["ab", "é", "wxyz"])  # netCDF4 encodes with _Encoding into the char dimension
        deep = obs.createGroup("deep")
        deep.createDimension("k", 2)
        name = deep.createVariable("name", str, ("k",))
        name[:] = np.array(["π", ""], dtype=object)
        cnt = deep.createVariable("count", "i4", ("k", "station"), zlib=True, complevel=1)
        cnt[:] = np.arange(6, dtype="i4").reshape(2, 3)
    finally:
        nc.close()


def url(path: Path, mode: str) -> str:
    return f"file://{path.resolve()}#mode={mode},file"
