"""Pristine stores of every kind the fuzz suites damage, and the helpers that damage them.

``build_all(root)`` writes (or copies) one store per kind: NCZarr of every generation (A: NCZarr 1.0,
B: uppercase, C1, C2, D from the golden stores and a live netcdf-c), pure Zarr v2 written by xarray,
and Zarr v3 in every string layout (vlen-utf8, zarrs.vlen, Arrow, sharded) plus numeric arrays.
"""

from __future__ import annotations

import json
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

GOLDEN = Path(__file__).parent / "golden"

GOLDEN_STORES = {
    "nczarr-A": GOLDEN / "nczarr-1.0-doc" / "nczarr1.zarr",
    "nczarr-B": GOLDEN / "netcdf-c-4.9.0_netCDF4-1.6.2" / "groups.zarr",
    "nczarr-C1": GOLDEN / "netcdf-c-4.9.1_netCDF4-1.6.3" / "strings.zarr",
    "nczarr-C2": GOLDEN / "netcdf-c-4.9.3-development_netCDF4-1.7.1.post1" / "strings.zarr",
    "nczarr-D-4.9.4": GOLDEN / "netcdf-c-4.9.4-development_netCDF4-1.7.2" / "strings.zarr",
}
#: one array per store that the table damages: (group-relative path of an array, of a group)
TARGET_ARRAY = {
    "nczarr-A": "v",
    "nczarr-B": "sub/a",
    "nczarr-C1": "s",
    "nczarr-C2": "s",
    "nczarr-D-4.9.4": "s",
    "nczarr-D": "names",
    "zarr-v2": "codes",
}
V2_KINDS = tuple(TARGET_ARRAY)
V3_KINDS = ("zarr-v3-vlen", "zarr-v3-zarrs", "zarr-v3-arrow", "zarr-v3-sharded")

LABELS = np.array(["a", "bb", "héllo", "", "中文字", "😀x", "z" * 30, "ok"], dtype=object)


def _dataset() -> xr.Dataset:
    return xr.Dataset(
        {
            "names": ("x", LABELS.astype(str)),
            "vals": ("x", np.arange(8, dtype="f8")),
            "codes": ("x", np.array([b"ab", b"c", b"", b"dd", b"e", b"f", b"g", b"h"], dtype="S2")),
        },
        coords={"x": np.arange(8, dtype="i4")},
        attrs={"title": "fuzz"},
    )


def write_zarr_v2(path: Path) -> None:
    ds = _dataset()
    ds["names"] = ds["names"].astype(object)
    enc = {
        "names": {"chunks": (3,)},
        "vals": {"chunks": (3,), "compressors": None},
        "codes": {"chunks": (4,)},
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(path, zarr_format=2, consolidated=False, encoding=enc)


def write_zarr_v3(path: Path, layout: str) -> None:
    from xr_zstrings.write.zarr3 import to_zarr_v3

    ds = _dataset()
    kw: dict[str, Any] = {}
    if layout == "zarrs.vlen":
        kw = {"index_data_type": "uint32", "index_location": "end",
              "data_codecs": [{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 1}}]}
    elif layout == "arrow":
        kw = {"compressors": [{"name": "gzip", "configuration": {"level": 1}}]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        to_zarr_v3(ds.chunk({"x": 3}).compute(), path, layout=layout, consolidated=False, **kw)


def write_zarr_v3_sharded(path: Path) -> None:
    import zarr

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = zarr.open_group(path, mode="w", zarr_format=3)
        a = g.create_array("names", shape=(8,), chunks=(2,), shards=(4,), dtype=str,
                           dimension_names=["x"], fill_value="")
        a[:] = LABELS.astype(str)
        b = g.create_array("vals", shape=(8,), chunks=(2,), shards=(4,), dtype="f8",
                           dimension_names=["x"], compressors=[{"name": "zstd", "configuration": {"level": 1}}])
        b[:] = np.arange(8.0)


def build_all(root: Path) -> dict[str, Path]:
    from peers import write_netcdf_strings

    out: dict[str, Path] = {}
    for kind, src in GOLDEN_STORES.items():
        out[kind] = root / f"{kind}.zarr"
        shutil.copytree(src, out[kind])
    # NCZarr 1.0's sample shadows root dimension x in /sub (legal netCDF, not one xarray Dataset): drop /sub/b
    shutil.rmtree(out["nczarr-A"] / "sub" / "b")
    edit_json(out["nczarr-A"] / "sub" / ".nczgroup", lambda o: o["vars"].remove("b"))
    out["nczarr-D"] = root / "nczarr-D.zarr"
    write_netcdf_strings(out["nczarr-D"])
    out["zarr-v2"] = root / "zarr-v2.zarr"
    write_zarr_v2(out["zarr-v2"])
    for kind, layout in (("zarr-v3-vlen", "vlen-utf8"), ("zarr-v3-zarrs", "zarrs.vlen"), ("zarr-v3-arrow", "arrow")):
        out[kind] = root / f"{kind}.zarr"
        write_zarr_v3(out[kind], layout)
    out["zarr-v3-sharded"] = root / "zarr-v3-sharded.zarr"
    write_zarr_v3_sharded(out["zarr-v3-sharded"])
    return out


def open_all(path: Any, **kw: Any) -> dict[str, xr.Dataset]:
    """Open every group and read every variable (what a user reading the whole store does)."""
    groups = xr.open_groups(path, engine="zstrings", **kw)
    return {k: ds.load() for k, ds in groups.items()}


def assert_array_left_out_or_read_by_zarr_python(store: Path, array: str, refusal: Any = None,
                                                  texts: tuple[str, ...] = ()) -> None:
    """One array we cannot decode never blocks its group (issue 12): zarr-python reads it (and a
    read of damaged bytes is a ZStringsError naming it), or it is left out with a warning naming
    the store, the array, the reason and the fix; the rest reads. ``refusal``: the error class a
    codec configuration we refuse while decoding (not an unknown type or codec) still raises."""
    from xr_zstrings import ZStringsError

    name = array.rsplit("/", 1)[-1]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            groups = open_all(store)
        except ZStringsError as e:
            msg = str(e)
            if "zarr-python cannot read" in msg:  # read through zarr-python, whose read failed
                assert str(store) in msg and f"/{array}'" in msg, msg
                return
            assert refusal is not None and isinstance(e, refusal), f"{type(e).__name__}: {msg}"
            assert str(store) in msg and all(t in msg for t in texts), msg
            return
    notes = [str(w.message) for w in caught if "left out" in str(w.message) and f"/{array}'" in str(w.message)]
    read_by = [ds[name].encoding.get("read_by") for ds in groups.values() if name in ds.variables]
    assert notes or read_by == ["zarr-python"], (notes, read_by)
    for msg in notes:
        assert str(store) in msg and f"drop_variables=[{name!r}]" in msg and "engine='zarr'" in msg, msg
    assert sum(len(ds.variables) for ds in groups.values()) > 0


# ---------------------------------------------------------------------------------------
# damaging
# ---------------------------------------------------------------------------------------

METADATA_NAMES = (".zarray", ".zattrs", ".zgroup", ".nczarr", ".nczgroup", ".nczvar", ".nczarray",
                  ".nczattr", ".nczattrs", "zarr.json")


def metadata_files(store: Path) -> list[str]:
    return sorted(str(p.relative_to(store)) for p in store.rglob("*") if p.is_file() and p.name in METADATA_NAMES)


def chunk_files(store: Path) -> list[str]:
    return sorted(str(p.relative_to(store)) for p in store.rglob("*") if p.is_file() and p.name not in METADATA_NAMES)


def edit_json(path: Path, fn: Callable[[Any], Any]) -> None:
    obj = json.loads(path.read_text())
    new = fn(obj)
    path.write_text(json.dumps(obj if new is None else new, allow_nan=True))


def array_info(store: Path, array: str) -> tuple[Path, Callable[[Any], dict]]:
    """Where the NCZarr array info (dimension references, storage) of ``array`` lives."""
    node = store / array
    for obj, key in ((".zattrs", "_nczarr_array"), (".zarray", "_nczarr_array"), (".zarray", "_NCZARR_ARRAY"),
                     (".zattrs", "_NCZARR_ARRAY")):
        p = node / obj
        if p.exists() and key in json.loads(p.read_text()):
            return p, lambda o, key=key: o[key]
    for obj in (".nczvar", ".nczarray"):
        if (node / obj).exists():
            return node / obj, lambda o: o
    raise LookupError(array)


def group_info(store: Path) -> tuple[Path, Callable[[Any], dict]]:
    for obj, key in ((".zattrs", "_nczarr_group"), (".zgroup", "_nczarr_group"), (".zgroup", "_NCZARR_GROUP")):
        p = store / obj
        if p.exists() and key in json.loads(p.read_text()):
            return p, lambda o, key=key: o[key]
    return store / ".nczgroup", lambda o: o


def dims_key(info: dict) -> str:
    return "dimensions" if "dimensions" in info else "dims"


def refs_key(info: dict) -> str:
    return "dimension_references" if "dimension_references" in info else "dimrefs"


def arrays_key(info: dict) -> str:
    return "arrays" if "arrays" in info else "vars"


def json_paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (tuple of keys/indices) inside a JSON value, the root included."""
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += json_paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += json_paths(v, (*prefix, i))
    return out


def set_path(obj: Any, path: tuple, value: Any, *, delete: bool = False) -> Any:
    if not path:
        return value
    parent = obj
    for k in path[:-1]:
        parent = parent[k]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return obj
