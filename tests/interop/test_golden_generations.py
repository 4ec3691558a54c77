"""Older NCZarr generations -> zstrings, from golden stores the real old netcdf-c versions wrote.

``tests/golden/`` holds stores written by netCDF4 1.6.2-1.7.2 wheels (netcdf-c 4.9.0-4.9.4-dev) with
``make_golden.py``, each beside ``<name>.expected.json``: what that same netCDF4 read back. NCZarr 1.0
stores were built from the document (no wheel carries netcdf-c 4.8.0), see ``golden/README.md``.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

from xr_zstrings import DimensionError

GOLDEN = Path(__file__).parents[1] / "golden"
STORES = sorted(GOLDEN.glob("*/*.zarr"))
BOOKKEEPING = {"_nczarr_maxstrlen", "_nczarr_default_maxstrlen", "_Encoding"}


# netcdf-c bugs the expectations record, and what the data really hold
NETCDF_C_BUGS = {
    # a text attribute "17" is stored as the JSON number 17 (Appendix G); netcdf-c >= 4.9.1 reads '1'
    ("number_text", "1"): "17",
}


def _expected_for(store: Path) -> tuple[dict[str, Any], str, bool]:
    """The producing library's reading; if its reader crashed, the same script's store as read by
    another version (then only variables of the same shape are comparable: features differ)."""
    own = json.loads(store.with_name(store.name.replace(".zarr", ".expected.json")).read_text())
    if "groups" in own:
        return own, store.parent.name, False
    for other in sorted(GOLDEN.glob(f"*/{store.name.replace('.zarr', '.expected.json')}"), reverse=True):
        exp = json.loads(other.read_text())
        if "groups" in exp:
            return exp, f"{other.parent.name} (producing reader crashed: {own.get('error', '')[:60]})", True
    raise AssertionError(f"no readable expectation for {store}")


def _open_groups(store: Path) -> dict[str, dict[str, xr.DataArray]]:
    """Every variable of every group; a group whose variables reference both an ancestor's and a
    shadowing dimension of the same name (legal netCDF) is opened one variable at a time."""
    kw = {"engine": "zstrings", "concat_characters": False, "mask_and_scale": False, "decode_times": False}
    out: dict[str, dict[str, Any]] = {}
    from xr_zstrings.io.store import open_store
    from xr_zstrings.read.tree import open_tree

    tree = open_tree(open_store(store))
    for gpath in tree.groups:
        try:
            ds = xr.open_dataset(store, group=gpath, **kw)
            out[gpath] = {"attrs": ds.attrs, **ds.variables}
        except DimensionError:
            names = tree.children[gpath][0]
            out[gpath] = {"attrs": xr.open_dataset(store, group=gpath, drop_variables=names, **kw).attrs}
            for n in names:
                one = xr.open_dataset(store, group=gpath, drop_variables=[m for m in names if m != n], **kw)
                out[gpath][n] = one[n].variable
    return out


def _norm_expected(v: Any) -> Any:
    if isinstance(v, dict) and "__bytes__" in v:
        return v["__bytes__"].encode("latin-1")
    if isinstance(v, list):
        return [_norm_expected(x) for x in v]
    return v


def _norm_ours(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return _norm_ours(v.tolist()) if v.ndim else _norm_ours(v[()])
    if isinstance(v, list):
        return [_norm_ours(x) for x in v]
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float):
        if math.isnan(v):
            return None
        if math.isinf(v):
            return "Infinity" if v > 0 else "-Infinity"
    return v


def _check_attr(name: str, ours: Any, exp: dict[str, Any], where: str, *, typed: bool = True) -> None:
    value = NETCDF_C_BUGS.get((name, exp["value"]), exp["value"]) if isinstance(exp["value"], str) else exp["value"]
    assert _norm_ours(ours) == _norm_expected(value), (where, name, ours, exp)
    if not typed:
        return  # pure Zarr attributes are untyped JSON, kept as JSON (xarray's zarr engine does too)
    kind = exp["type"]
    if kind == "str":
        assert isinstance(ours, str), (where, name, type(ours))
    elif kind == "list":
        assert isinstance(ours, list), (where, name, type(ours))
    elif kind == "ndarray":
        assert isinstance(ours, np.ndarray) and ours.dtype == np.dtype(exp["dtype"]), (where, name, ours)
    else:  # a numpy scalar type such as float32
        assert type(ours).__name__ == kind, (where, name, type(ours))


@pytest.mark.parametrize("store", STORES, ids=lambda p: f"{p.parent.name}/{p.stem}->zstrings")
def test_golden_store_reads_as_the_producing_netcdf_c_did(store):
    expected, source, fallback = _expected_for(store)
    groups = _open_groups(store)
    typed = store.stem != "purezarr"
    assert set(expected["groups"]) <= set(groups), (sorted(groups), source)
    peer_failures = []
    compared = 0
    for gpath, g in expected["groups"].items():
        ds = groups[gpath]
        for name, exp in g["attrs"].items():
            if name not in BOOKKEEPING:
                _check_attr(name, ds["attrs"][name], exp, f"{store}:{gpath}", typed=typed)
        for vname, v in g["variables"].items():
            if vname not in ds:
                raise AssertionError(f"{vname} missing in {gpath} of {store} ({source})")
            var = ds[vname]
            if fallback and var.shape != tuple(v["shape"]):
                continue
            compared += 1
            exp_values = v["values"]
            if not typed and var.shape == () and v["shape"] == [1]:
                # deliberate: netcdf-c reads its pure-Zarr scalars as 1-element arrays on a
                # '_scalar_'/'_zdim_1' dimension; the '_scalar_' marker (or 4.9.0's []) makes them 0-d here
                exp_values = exp_values[0] if isinstance(exp_values, list) else exp_values
            else:
                # netcdf-c <= 4.9.x named invented dimensions '_zdim_<len>'; 4.10 (and we) '_Anonymous_Dim_<len>'
                exp_dims = tuple(re.sub(r"^_zdim_(\d+)$", r"_Anonymous_Dim_\1", d) for d in v["dims"])
                assert var.dims == exp_dims, (store, gpath, vname)
                assert var.shape == tuple(v["shape"]), (store, gpath, vname)
            for name, exp in v["attrs"].items():
                if name not in BOOKKEEPING:
                    _check_attr(name, var.attrs.get(name, var.encoding.get(name)), exp, f"{store}:{vname}",
                                typed=typed)
            values = exp_values
            if isinstance(values, dict) and "error" in values:
                # the peer could not read its own data (e.g. a UTF-8 character split by maxstrlen):
                # we must, under the default policy
                peer_failures.append((vname, values["error"]))
                assert var.values.size == math.prod(v["shape"])
                continue
            assert _norm_ours(var.values) == _norm_expected(values), (store, gpath, vname, source)
    assert compared >= 1, (store, source)
    if store.stem == "strings" and "4.9.0" not in store.parent.name:
        # maxstrlen=4 cut "aéé" to a\xc3\xa9\xc3: netcdf-c's own reader fails, we drop the half character
        assert any(name == "t" for name, _ in peer_failures)
        assert xr.open_dataset(store, engine="zstrings")["t"].values.tolist()[0] == "aé"


def _drop_partial(b: bytes, encoding: str) -> str:
    """Python's decode plus the documented "drop" policy: an incomplete final character goes."""
    try:
        return b.decode(encoding)
    except UnicodeDecodeError as e:
        assert e.reason == "unexpected end of data", e
        return b[: e.start].decode(encoding)


def test_joined_chars_from_every_generation():
    """NC_CHAR (>S1, or <U1 holding bytes in netcdf-c <= 4.9.0 and NCZarr 1.0) joins into str."""
    seen = 0
    for store in STORES:
        if store.stem not in ("chars", "nczarr1"):
            continue
        raw = _open_groups(store)
        for gpath, ds in raw.items():
            for name, var in ds.items():
                if name == "attrs":
                    continue
                if var.dtype == np.dtype("S1") and var.ndim:
                    enc = var.attrs.get("_Encoding", "utf-8")
                    expect = [_drop_partial(b"".join(row).split(b"\0")[0], enc)
                              for row in var.values.reshape(-1, var.shape[-1]).tolist()]
                    others = [n for n in ds if n not in ("attrs", name)]
                    got = xr.open_dataset(store, engine="zstrings", group=gpath, drop_variables=others)[name]
                    assert got.dims == var.dims[:-1]
                    assert got.values.ravel().tolist() == expect, (store, name)
                    seen += 1
    assert seen >= 4
