"""``to_nczarr(mode="a", append_dim=...)`` into a pure Zarr v2 store another writer made appends in
that store's own string layout (issue 37 item 11): ``|O`` vlen-utf8 (xarray: str objects),
``<Un`` (xarray: numpy str, StringDType), ``|Sn`` (xarray: bytes), ``|O`` vlen-bytes (zarr-python).

The reference is xarray's own ``to_zarr(mode="a", append_dim=...)`` of the same values into a copy
of the same store: engine="zarr", zarr-python and engine="zstrings" must read both alike (values and
missing values), the arrays' ``.zarray`` must be the same, and no NCZarr key may appear. A missing
value the layout cannot hold (no fill value), a value longer than the stored width, and values the
layout would change are refused with errors naming the store key, and leave the store's values.
"""

from __future__ import annotations

import json
import shutil
import uuid
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

from xr_zstrings import to_nczarr
from xr_zstrings.errors import StringOverflowError, StringTruncationWarning, ZStringsError

BUCKET = "zstrings-append-layouts"
NA = np.dtypes.StringDType(na_object=None)
OLD = ["a", "bb", "hello"]


def _stored(layout: str, values: list[str]) -> np.ndarray:
    """``values`` as the array each layout's writer is given (xarray decides the layout from it)."""
    if layout == "vlen-utf8":
        return np.array(values, dtype=object)
    if layout == "U":
        return np.array(values)
    return np.array([v.encode() for v in values])  # "S"


def _make(path: Path, layout: str, fill: Any) -> None:
    """The store as its writer makes it: xarray's to_zarr (zarr-python for vlen-bytes), chunks of 2
    (so the append completes a partial chunk), a float variable beside the text."""
    if layout == "vlen-bytes":
        g = zarr.open_group(path, mode="w", zarr_format=2)
        g.create_array("s", shape=(3,), chunks=(2,), dtype=zarr.dtype.VariableLengthBytes(),
                       attributes={"_ARRAY_DIMENSIONS": ["t"]})[:] = np.array([v.encode() for v in OLD], dtype=object)
        x = g.create_array("x", shape=(3,), chunks=(2,), dtype="f8", attributes={"_ARRAY_DIMENSIONS": ["t"]})
        x[:] = np.arange(3.0)
        zarr.consolidate_metadata(path)
        return
    ds = xr.Dataset({"s": ("t", _stored(layout, OLD)), "x": ("t", np.arange(3.0))})
    if fill is not None:
        ds["s"].encoding["_FillValue"] = fill.encode() if layout == "S" else fill
    ds["s"].encoding["chunks"] = (2,)
    ds["x"].encoding["chunks"] = (2,)
    ds.to_zarr(path, zarr_format=2, consolidated=True, mode="w")


def _xarray_append(path: Path, layout: str, new: list[str | None]) -> None:
    """xarray's own append of ``new`` (objects: the one input xarray appends to every layout, None missing)."""
    objs = np.array([v if v is None or layout in ("vlen-utf8", "U") else v.encode() for v in new], dtype=object)
    xr.Dataset({"s": ("t", objs), "x": ("t", np.arange(3.0, 3 + len(new)))}).to_zarr(path, mode="a", append_dim="t")


def _ours(new: list[str | None], *, chunks: int | None = None, dtype: Any = NA) -> xr.Dataset:
    ds = xr.Dataset({"s": ("t", np.array(new, dtype=dtype)), "x": ("t", np.arange(3.0, 3 + len(new)))})
    return ds.chunk({"t": chunks}) if chunks else ds


def _plain(v: Any) -> Any:
    """A read value in plain Python: missing (NaN, None, NA) as None."""
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return None
    return v.item() if isinstance(v, np.generic) else v


def _readings(path: Path) -> dict[str, list[Any]]:
    """What each reader reads of ``s`` and ``x``."""
    out: dict[str, list[Any]] = {}
    for engine in ("zarr", "zstrings"):
        with xr.open_dataset(path, engine=engine) as ds:
            out[engine] = [_plain(v) for v in ds["s"].values.tolist() + ds["x"].values.tolist()]
    out["zarr-python"] = [_plain(v) for v in zarr.open_array(path / "s", mode="r")[:].tolist()]
    return out


def _metadata(path: Path) -> dict[str, Any]:
    """Every metadata object of the store (key -> JSON)."""
    return {str(p.relative_to(path)): json.loads(p.read_text()) for p in sorted(path.rglob(".z*"))
            if p.name in (".zarray", ".zattrs", ".zgroup", ".zmetadata")}


def _nczarr_keys(obj: Any) -> list[str]:
    if isinstance(obj, dict):
        return [k for k in obj if str(k).startswith("_nczarr")] + [k for v in obj.values() for k in _nczarr_keys(v)]
    if isinstance(obj, list):
        return [k for v in obj for k in _nczarr_keys(v)]
    return []


def _without_our_record(meta: dict[str, Any]) -> dict[str, Any]:
    """The metadata without the commit record every append of ours keeps in the root's ``.zgroup``
    (and so in ``.zmetadata``): the one key the package adds to any pure Zarr v2 store it appends to."""
    meta = json.loads(json.dumps(meta))
    meta[".zgroup"].pop("xr_zstrings", None)
    meta[".zmetadata"]["metadata"][".zgroup"].pop("xr_zstrings", None)
    return meta


CASES = [
    # (layout, the store's fill, the values appended)
    pytest.param("vlen-utf8", "N/A", ["cc", None, "a much longer value é"], id="vlen-utf8-fill-missing"),
    pytest.param("vlen-utf8", "", ["cc", None, "dd"], id="vlen-utf8-empty-fill-missing"),
    pytest.param("vlen-utf8", None, ["cc", "", "a much longer value é"], id="vlen-utf8-null-fill"),
    pytest.param("U", "N/A", ["cc", None, "hé"], id="U-fill-missing"),
    pytest.param("U", None, ["cc", "dd", "hellé"], id="U-null-fill"),
    pytest.param("S", "N/A", ["cc", None, "zz"], id="S-fill-missing"),
    pytest.param("vlen-bytes", None, ["cc", None, "a much longer value"], id="vlen-bytes-missing"),
]


@pytest.mark.parametrize(("layout", "fill", "new"), CASES)
@pytest.mark.parametrize("chunked", [False, True], ids=["numpy", "dask"])
def test_append_reads_as_xarrays_own_append(tmp_path: Path, layout: str, fill: Any, new: list[str | None],
                                            chunked: bool) -> None:
    ours, theirs = tmp_path / "ours.zarr", tmp_path / "xarray.zarr"
    _make(ours, layout, fill)
    shutil.copytree(ours, theirs)
    _xarray_append(theirs, layout, new)
    to_nczarr(_ours(new, chunks=2 if chunked else None), ours, mode="a", append_dim="t")
    got, want = _readings(ours), _readings(theirs)
    assert got == want
    assert len(got["zstrings"]) == 2 * (len(OLD) + len(new))  # (s, then x)
    if None in new:  # a missing value stays missing where the reader has one (zarr-python shows the fill)
        i = len(OLD) + new.index(None)
        assert got["zarr"][i] is None and got["zstrings"][i] is None
    mine, xarrays = _metadata(ours), _metadata(theirs)
    assert not _nczarr_keys(mine)
    assert _without_our_record(mine) == xarrays


@pytest.mark.parametrize("layout", ["vlen-utf8", "U", "S"])
def test_a_missing_value_without_a_fill_is_refused(tmp_path: Path, layout: str) -> None:
    """No fill value (xarray's default): a written chunk cannot hold a missing value (zarr-python and
    engine="zarr" would read '' or 'nan'); refused, naming the key and the fix, the values kept."""
    path = tmp_path / "s.zarr"
    _make(path, layout, None)
    before = _readings(path)
    with pytest.raises(ZStringsError, match=r"s/\.zarray has no fill value.*fillna"):
        to_nczarr(_ours(["cc", None, "dd"]), path, mode="a", append_dim="t")
    assert _readings(path) == before


def test_U_keeps_its_width_by_the_overflow_policy(tmp_path: Path) -> None:
    """``<U5``: a longer value is refused by default (xarray's append cuts it silently), cut with a
    warning under on_overflow="truncate", where the readers then read what xarray's append gives."""
    ours, theirs = tmp_path / "ours.zarr", tmp_path / "xarray.zarr"
    _make(ours, "U", None)
    shutil.copytree(ours, theirs)
    new = ["cc", "dd", "hellé wörld"]
    before = _readings(ours)
    with pytest.raises(StringOverflowError, match=r"value \[2\] = 'hellé wörld', has 11 characters.*"
                                                  r"s/\.zarray stores <U5 \(5 characters\)"):
        to_nczarr(_ours(new), ours, mode="a", append_dim="t")
    assert _readings(ours) == before
    _xarray_append(theirs, "U", new)
    with pytest.warns(StringTruncationWarning, match="1 value.*longer than 5 characters"):
        to_nczarr(_ours(new), ours, mode="a", append_dim="t", on_overflow="truncate")
    assert _readings(ours) == _readings(theirs)
    assert _readings(ours)["zstrings"][5] == "hellé"


@pytest.mark.parametrize(("layout", "values", "match"), [
    ("vlen-utf8", np.array([b"x", b"\xff"]), r"value \[1\] = b'\\xff' cannot be stored as vlen-utf8"),
    ("U", np.array(["x", "nul\x00"], dtype=object), r"end with NUL.*stores <U5, which drops trailing NULs"),
])
def test_values_the_layout_would_change_are_refused(tmp_path: Path, layout: str, values: np.ndarray,
                                                   match: str) -> None:
    """Bytes that are not UTF-8 into vlen-utf8, a value ending in NUL into ``<U`` (numpy drops it)."""
    path = tmp_path / "s.zarr"
    _make(path, layout, None)
    before = _readings(path)
    with pytest.raises(ZStringsError, match=match):
        to_nczarr(xr.Dataset({"s": ("t", values), "x": ("t", [3.0, 4.0])}), path, mode="a", append_dim="t")
    assert _readings(path) == before


def test_xarray_appends_after_ours(tmp_path: Path) -> None:
    """The store stays xarray's: its own append after ours reads back whole in every reader."""
    path = tmp_path / "s.zarr"
    _make(path, "vlen-utf8", "N/A")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (no warning from our append either)
        to_nczarr(_ours(["cc", None]), path, mode="a", append_dim="t")
    _xarray_append(path, "vlen-utf8", ["dd", None])
    got = _readings(path)
    assert got["zstrings"][:7] == got["zarr"][:7] == ["a", "bb", "hello", "cc", None, "dd", None]
    assert got["zarr-python"] == ["a", "bb", "hello", "cc", "N/A", "dd", "N/A"]


def test_a_refusal_after_written_chunks_leaves_the_values(tmp_path: Path) -> None:
    """dask pieces: the first completes the stored partial chunk, the second holds a missing value
    the array cannot hold; the refusal names it and the rollback leaves what every reader read."""
    path = tmp_path / "s.zarr"
    _make(path, "vlen-utf8", None)
    before = _readings(path)
    with pytest.raises(ZStringsError, match=r"element \[2\], but .*s/\.zarray has no fill value"):
        to_nczarr(_ours(["cc", "dd", None], chunks=1), path, mode="a", append_dim="t")
    assert _readings(path) == before


def test_chunk_keys_keep_the_stores_separator(tmp_path: Path) -> None:
    """A 2-d array zarr-python wrote with ``dimension_separator: "/"`` (chunk keys ``1/0``): the
    appended chunks go where every reader looks (they were written as ``1.0``: read as fill)."""
    ours, theirs = tmp_path / "ours.zarr", tmp_path / "xarray.zarr"
    g = zarr.open_group(ours, mode="w", zarr_format=2)
    for name, dtype, fill, values in (("s", "<U4", "", [["a", "b"], ["c", "d"], ["e", "f"]]),
                                      ("n", "<i4", -1, [[1, 2], [3, 4], [5, 6]])):
        g.create_array(name, shape=(3, 2), chunks=(2, 2), dtype=dtype, fill_value=fill,
                       chunk_key_encoding={"name": "v2", "separator": "/"},
                       attributes={"_ARRAY_DIMENSIONS": ["t", "k"]})[:] = np.array(values, dtype=dtype)
    zarr.consolidate_metadata(ours)
    shutil.copytree(ours, theirs)
    new = {"s": [["g", "h"], [None, "j"]], "n": [[7, 8], [9, 10]]}
    xr.Dataset({"s": (("t", "k"), np.array(new["s"], dtype=object)),
                "n": (("t", "k"), np.array(new["n"], dtype="<i4"))}).to_zarr(theirs, mode="a", append_dim="t")
    to_nczarr(xr.Dataset({"s": (("t", "k"), np.array(new["s"], dtype=NA)),
                          "n": (("t", "k"), np.array(new["n"], dtype="<i4"))}), ours, mode="a", append_dim="t")
    for engine in ("zarr", "zstrings"):
        with xr.open_dataset(ours, engine=engine) as a, xr.open_dataset(theirs, engine=engine) as b:
            assert [[_plain(v) for v in row] for row in a["s"].values.tolist()] == \
                [[_plain(v) for v in row] for row in b["s"].values.tolist()]
            assert a["n"].values.tolist() == b["n"].values.tolist() == [[1, 2], [3, 4], [5, 6], [7, 8], [9, 10]]
    for name in ("s", "n"):
        assert zarr.open_array(ours / name, mode="r")[:].tolist() == zarr.open_array(theirs / name, mode="r")[:].tolist()
    assert sorted(p.name for p in (ours / "s").iterdir()) == sorted(p.name for p in (theirs / "s").iterdir())


@pytest.mark.parametrize(("layout", "fill", "new"), [CASES[0], CASES[4]])
def test_append_on_s3_reads_as_xarrays_own_append(s3: Any, tmp_path: Path, layout: str, fill: Any,
                                                  new: list[str | None]) -> None:
    """The same in object storage (moto): the store uploaded, appended there, read back locally."""
    made, theirs = tmp_path / "made.zarr", tmp_path / "xarray.zarr"
    _make(made, layout, fill)
    shutil.copytree(made, theirs)
    _xarray_append(theirs, layout, new)
    prefix = f"layouts-{uuid.uuid4().hex[:8]}/s.zarr"
    url = s3.upload(made, BUCKET, prefix)
    to_nczarr(_ours(new), url, mode="a", append_dim="t", storage_options=s3.options())
    ours = s3.download(BUCKET, prefix, tmp_path / "ours.zarr")
    assert _readings(ours) == _readings(theirs)
    assert _without_our_record(_metadata(ours)) == _metadata(theirs)


def test_a_refused_append_to_a_slash_separated_store_leaves_its_keys(tmp_path: Path) -> None:
    """The rollback of a refused append rewrites the partial chunk under the store's own key
    (``1/0``): no ``1.0`` object is left beside the chunks, and every reader reads what it read."""
    path = tmp_path / "s.zarr"
    g = zarr.open_group(path, mode="w", zarr_format=2)
    g.create_array("s", shape=(3, 2), chunks=(2, 2), dtype="<U4", fill_value="",
                   chunk_key_encoding={"name": "v2", "separator": "/"},
                   attributes={"_ARRAY_DIMENSIONS": ["t", "k"]})[:] = np.array([["a", "b"], ["c", "d"], ["e", "f"]])
    zarr.consolidate_metadata(path)
    keys = sorted(str(p.relative_to(path)) for p in (path / "s").rglob("*") if p.is_file())
    before = [zarr.open_array(path / "s", mode="r")[:].tolist()]
    new = np.array([["g", "h"], ["i", "j"], ["much too long", "k"]], dtype=NA)
    with pytest.raises(StringOverflowError, match=r"value \(2, 0\) = .much too long."):
        to_nczarr(xr.Dataset({"s": (("t", "k"), new)}).chunk({"t": 1}), path, mode="a", append_dim="t")
    assert sorted(str(p.relative_to(path)) for p in (path / "s").rglob("*") if p.is_file()) == keys
    assert [zarr.open_array(path / "s", mode="r")[:].tolist()] == before


def test_S_keeps_its_width_by_the_overflow_policy(tmp_path: Path) -> None:
    """``|S5`` (xarray's bytes): a longer bytes value is refused by default, cut under
    on_overflow="truncate" with the StringTruncationWarning the refusal promises (it was cut without
    a word), and the readers read what xarray's own append of the same objects gives."""
    ours, theirs = tmp_path / "ours.zarr", tmp_path / "xarray.zarr"
    _make(ours, "S", None)
    shutil.copytree(ours, theirs)
    new = [b"cc", b"toolongvalue"]
    xr.Dataset({"s": ("t", np.array(new, dtype=object)), "x": ("t", [3.0, 4.0])}).to_zarr(
        theirs, mode="a", append_dim="t")
    ds = xr.Dataset({"s": ("t", np.array(new)), "x": ("t", [3.0, 4.0])})
    with pytest.raises(StringOverflowError, match=r"value \[1\] = b'toolongvalue', needs 12 bytes.*width is 5"):
        to_nczarr(ds, ours, mode="a", append_dim="t")
    with pytest.warns(StringTruncationWarning, match="1 value.*longer than 5 bytes"):
        to_nczarr(ds, ours, mode="a", append_dim="t", on_overflow="truncate")
    assert _readings(ours) == _readings(theirs)


@pytest.mark.parametrize("na", [np.nan, pd.NA, None], ids=["nan", "pd.NA", "None"])
@pytest.mark.parametrize("layout", ["vlen-utf8", "U", "S"])
def test_every_na_object_is_missing(tmp_path: Path, layout: str, na: Any) -> None:
    """Whatever the StringDType's NA object, a missing value is written as the store's fill (read back
    missing), as xarray's own append of None writes it."""
    ours, theirs = tmp_path / "ours.zarr", tmp_path / "xarray.zarr"
    _make(ours, layout, "N/A")
    shutil.copytree(ours, theirs)
    _xarray_append(theirs, layout, ["cc", None])
    dtype = np.dtypes.StringDType(na_object=na)
    to_nczarr(_ours(["cc", na], dtype=dtype), ours, mode="a", append_dim="t")
    got = _readings(ours)
    assert got == _readings(theirs)
    assert got["zstrings"][4] is None and got["zarr"][4] is None
