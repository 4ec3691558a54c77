"""Zarr v3 strings through engine="zstrings": stores from zarr-python and xarray, and our writers."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pyarrow as pa
import pytest
import xarray as xr
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from xr_zstrings import ZStringsError
from xr_zstrings.read.arrow import read_arrow
from xr_zstrings.write.zarr3 import LAYOUTS, to_zarr_v3

warnings.filterwarnings("ignore", message=".*Consolidated metadata.*")

T_DTYPE = np.dtypes.StringDType()
TEXT = ["a", "héllo", "中文字", "😀x", "", "x\x00y", "zz"]


def _zarr_text(arr) -> list:
    values = np.asarray(arr[...])
    return [v.decode() if isinstance(v, bytes) else str(v) for v in values.ravel().tolist()]


@pytest.mark.parametrize(
    "kw",
    [
        {"dtype": str},
        {"dtype": str, "compressors": zarr.codecs.ZstdCodec(level=3)},
        {"dtype": str, "compressors": zarr.codecs.GzipCodec()},
        {"dtype": str, "compressors": zarr.codecs.BloscCodec(cname="lz4")},
        {"dtype": str, "shards": (4,)},
        {"dtype": "<U6"},
        {"dtype": ">U6"},
        {"dtype": "S12"},
    ],
    ids=["vlen-utf8", "vlen-utf8+zstd", "vlen-utf8+gzip", "vlen-utf8+blosc", "sharded", "utf32-le",
         "utf32-be", "null-terminated"],
)
def test_zarr_python_v3_string_arrays(tmp_path, kw):
    g = zarr.open_group(tmp_path, mode="w", zarr_format=3)
    data = np.array(TEXT * 2, dtype=object)
    if kw["dtype"] not in (str,):
        data = np.array([t.replace("\x00", "") for t in TEXT * 2])
        if kw["dtype"].startswith("S"):
            data = np.array([t.encode() for t in data], dtype=kw["dtype"])
    arr = g.create_array("s", shape=data.shape, chunks=(2,), dimension_names=["x"], **kw)
    arr[...] = data
    ds = xr.open_dataset(tmp_path, engine="zstrings")
    assert ds["s"].dims == ("x",)
    if kw["dtype"] != str and kw["dtype"].startswith("S"):
        # null_terminated_bytes without an _Encoding is bytes, as zarr-python and engine="zarr" read it
        assert ds["s"].values.tolist() == arr[...].tolist()
        assert ds["s"].values.tolist() == xr.open_dataset(tmp_path, engine="zarr")["s"].values.tolist()
        ds = xr.open_dataset(tmp_path, engine="zstrings", string_dtype="bytes")
        assert ds["s"].values.tolist() == arr[...].tolist()
        return
    assert ds["s"].dtype == np.dtypes.StringDType()
    assert ds["s"].values.tolist() == _zarr_text(arr)


def test_zarr_python_v3_bytes_fill_values_missing_chunks_and_scalars(tmp_path):
    g = zarr.open_group(tmp_path, mode="w", zarr_format=3)
    b = g.create_array("b", shape=(5,), chunks=(2,), dtype=zarr.dtype.VariableLengthBytes(),
                       dimension_names=["y"])
    b[:] = np.array([b"\x00\xff", b"", b"abc", b"d", b"e"], dtype=object)
    s = g.create_array("s", shape=(6,), chunks=(2,), dtype=str, fill_value="missing", dimension_names=["x"])
    s[:2] = np.array(["p", "q"], dtype=object)
    z = g.create_array("z", shape=(), dtype=str)
    z[()] = "scalar é"
    ds = xr.open_dataset(tmp_path, engine="zstrings")
    assert ds["b"].values.tolist() == list(b[:])
    assert ds["s"].values.tolist() == list(s[:]) == ["p", "q"] + ["missing"] * 4
    assert ds["z"].shape == () and ds["z"].values[()] == z[()] == "scalar é"


def test_xarray_to_zarr_v3_consolidated_reads_identically(tmp_path):
    src = xr.Dataset(
        {"temp": (("station", "time"), np.arange(6.0).reshape(3, 2), {"units": "K"}),
         "kind": ("station", np.array(["rural", "ürban", "中"], dtype=object))},
        coords={"station": np.array(["Zürich", "東京", "Oslo"], dtype=object), "time": [0, 1]},
        attrs={"title": "stations"},
    )
    src.to_zarr(tmp_path / "x.zarr", zarr_format=3, consolidated=True)
    assert "consolidated_metadata" in json.loads((tmp_path / "x.zarr" / "zarr.json").read_text())
    got = xr.open_dataset(tmp_path / "x.zarr", engine="zstrings")
    ref = xr.open_dataset(tmp_path / "x.zarr", engine="zarr")
    xr.testing.assert_identical(got, ref)
    assert got.sel(station="東京")["kind"].values[()] == "ürban"


def test_nested_groups_with_and_without_consolidation(tmp_path):
    for consolidated in (True, False):
        path = tmp_path / f"g{consolidated}.zarr"
        root = xr.Dataset({"a": ("x", np.array(["r1", "r2"], dtype=object))})
        sub = xr.Dataset({"b": ("y", np.array(["s1", "s2", "s3"], dtype=object))})
        xr.DataTree.from_dict({"/": root, "/sub": sub}).to_zarr(path, zarr_format=3, consolidated=consolidated)
        tree = xr.open_datatree(path, engine="zstrings")
        assert tree["sub/b"].values.tolist() == ["s1", "s2", "s3"]
        assert tree["a"].values.tolist() == ["r1", "r2"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_writer_layouts_round_trip(tmp_path, layout):
    values = np.array(TEXT + ["long" * 20000], dtype=object)  # includes a string > 64 KiB
    ds = xr.Dataset(
        {"s": ("x", values), "b": ("x", np.array([v.encode() for v in values], dtype=object)),
         "n": ("x", np.arange(len(values), dtype="f4"))},
        coords={"x": np.arange(len(values))}, attrs={"title": "layouts"},
    )
    ds["s"].encoding["chunks"] = (3,)
    path = tmp_path / "w.zarr"
    to_zarr_v3(ds, path, layout=layout, compressors=[{"name": "zstd", "configuration": {"level": 1}}],
               index_data_type="uint64", index_location="start")
    got = xr.open_dataset(path, engine="zstrings")
    assert got["s"].encoding["layout"] == layout
    assert got["s"].values.tolist() == values.tolist()
    assert got["b"].values.tolist() == [v.encode() for v in values]
    np.testing.assert_array_equal(got["n"].values, ds["n"].values)
    assert got.attrs["title"] == "layouts"
    if layout == "vlen-utf8":  # zarr-python's own layout: the peers read it too
        ref = xr.open_dataset(path, engine="zarr")
        assert ref["s"].values.tolist() == values.tolist()
        assert list(zarr.open_array(path / "s")[:]) == values.tolist()
    else:
        meta = json.loads((path / "s" / "zarr.json").read_text())
        assert meta["codecs"][0]["name"] == "zarrs.vlen" or meta["data_type"] in (
            {"name": "string"}, {"name": "large_string"})


_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=hnp.arrays(object, hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=5), elements=_text),
    layout=st.sampled_from(LAYOUTS),
    chunk=st.integers(1, 4),
)
def test_property_any_unicode_round_trips_through_every_layout(tmp_path_factory, data, layout, chunk):
    path = tmp_path_factory.mktemp("v3p") / "p.zarr"
    dims = [f"d{i}" for i in range(data.ndim)]
    ds = xr.Dataset({"s": (dims, data)})
    ds["s"].encoding["chunks"] = tuple(min(chunk, max(n, 1)) for n in data.shape)
    to_zarr_v3(ds, path, layout=layout)
    got = xr.open_dataset(path, engine="zstrings")["s"].values
    assert got.shape == data.shape
    assert got.tolist() == data.tolist()


def test_lone_surrogates_cannot_be_written(tmp_path):
    ds = xr.Dataset({"s": ("x", np.array(["ok", "bad\ud800"], dtype="U8"))})  # (pandas refuses objects)
    for layout in LAYOUTS:
        with pytest.raises(ZStringsError, match="surrogate"):
            to_zarr_v3(ds, tmp_path / f"{layout}.zarr", layout=layout)


@pytest.mark.parametrize("layout", ["arrow", "zarrs.vlen", "vlen-utf8"])
def test_arrow_result_for_users_who_want_it(tmp_path, layout):
    values = ["a", "héllo", "", "中文字", "z"]
    ds = xr.Dataset({"s": ("x", np.array(values, dtype=object))})
    ds["s"].encoding["chunks"] = (2,)
    to_zarr_v3(ds, tmp_path / "a.zarr", layout=layout)
    arrow = read_arrow(tmp_path / "a.zarr", "s")
    assert isinstance(arrow, pa.ChunkedArray) and arrow.num_chunks == 3
    assert pa.types.is_string(arrow.type) or pa.types.is_large_string(arrow.type)
    assert arrow.to_pylist() == values


@pytest.mark.parametrize("string_dtype", ["T", "O", "U"])
def test_string_dtype_choice_for_v3(tmp_path, string_dtype):
    ds = xr.Dataset({"s": ("x", np.array(TEXT, dtype=object))})
    to_zarr_v3(ds, tmp_path / "d.zarr", layout="arrow")
    got = xr.open_dataset(tmp_path / "d.zarr", engine="zstrings", string_dtype=string_dtype)["s"].values
    assert got.dtype.kind == string_dtype
    assert got.tolist() == TEXT


def test_unknown_v3_codec_leaves_the_array_out_with_a_clear_warning(tmp_path):
    ds = xr.Dataset({"s": ("x", np.array(TEXT, dtype=object)), "n": ("x", np.arange(len(TEXT)))})
    to_zarr_v3(ds, tmp_path / "u.zarr", layout="vlen-utf8", consolidated=False)
    meta_path = tmp_path / "u.zarr" / "s" / "zarr.json"
    meta = json.loads(meta_path.read_text())
    meta["codecs"].append({"name": "no-such-codec"})
    meta_path.write_text(json.dumps(meta))
    with pytest.warns(UserWarning, match=r"u\.zarr.*left out.*no-such-codec.*drop_variables=\['s'\]"):
        got = xr.open_dataset(tmp_path / "u.zarr", engine="zstrings")
    assert list(got.data_vars) == ["n"]  # the other variable still opens
    assert got["n"].values.tolist() == list(range(len(TEXT)))


def test_writer_compressor_defaults(tmp_path):
    """compressors=None: vlen-utf8 text gets zarr-python's default (as zarr-python itself writes
    it), the other layouts none; [] means no compressor for every layout."""
    ds = xr.Dataset({"s": ("x", np.array(TEXT, dtype=object))})
    xr_ref = tmp_path / "xr.zarr"
    ds.to_zarr(xr_ref, zarr_format=3, consolidated=False)
    zarr_codecs = json.loads((xr_ref / "s" / "zarr.json").read_text())["codecs"]
    for layout in LAYOUTS:
        for comp in (None, []):
            path = tmp_path / f"{layout}-{comp is None}.zarr"
            to_zarr_v3(ds, path, layout=layout, compressors=comp)
            codecs = json.loads((path / "s" / "zarr.json").read_text())["codecs"]
            if layout == "vlen-utf8" and comp is None:
                assert codecs == zarr_codecs  # the same zarr.json codecs as xarray + zarr-python
            else:
                assert len(codecs) == 1, codecs
            assert xr.open_dataset(path, engine="zstrings")["s"].values.tolist() == TEXT
            if layout == "vlen-utf8":
                assert list(zarr.open_array(path / "s")[:]) == TEXT


@pytest.mark.parametrize(("values", "message"), [
    # (missing values are written: tests/interop/test_missing_values.py, "to_zarr_v3")
    (["a", b"b", "c"], "neither all str nor all bytes"),
    ([b"a", "b"], "neither all str nor all bytes"),
    ([b"a", None, "c"], "neither all str nor all bytes"),
])
def test_mixed_objects_are_refused_before_anything_is_written(tmp_path, values, message):
    ds = xr.Dataset({"s": ("x", np.array(values, dtype=object)), "n": ("x", np.arange(len(values)))})
    path = tmp_path / "m.zarr"
    with pytest.raises(ZStringsError, match=message):
        to_zarr_v3(ds, path)
    assert not path.exists()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("container", ["O", "T", "U"])
def test_writer_matches_xarray_metadata_and_values_2d_and_edges(tmp_path, layout, container):
    """Every string container and shape (1-D with a partial edge chunk, 2-D, 0-d) written by
    to_zarr_v3: xarray's attributes/dimension names/chunk grid in zarr.json, values back."""
    one = np.array(["a", "héllo", "", "中文字", "z", "😀"], dtype=object)
    two = np.array([["p", "", "ü"], ["long" * 30, "x", "y"]], dtype=object)
    conv = {"O": lambda a: a, "T": lambda a: a.astype(T_DTYPE), "U": lambda a: a.astype(str)}[container]
    ds = xr.Dataset(
        {"s": ("x", conv(one), {"long_name": "labels"}), "t": (("y", "z"), conv(two)),
         "sc": ((), conv(np.array("zero-d", dtype=object)))},
        coords={"lab": ("x", conv(one))},
    )
    ds["s"].encoding["chunks"] = (4,)
    ds["t"].encoding["chunks"] = (1, 2)
    ref = tmp_path / "ref.zarr"
    with warnings.catch_warnings():  # zarr-python: "<U has no Zarr V3 specification"
        warnings.simplefilter("ignore")
        ds.to_zarr(ref, zarr_format=3, consolidated=False)
    path = tmp_path / "ours.zarr"
    to_zarr_v3(ds, path, layout=layout, consolidated=False)
    for name in ("s", "t", "sc", "lab"):
        theirs = json.loads((ref / name / "zarr.json").read_text())
        ours = json.loads((path / name / "zarr.json").read_text())
        for key in ("shape", "chunk_grid", "chunk_key_encoding", "attributes", "dimension_names"):
            assert ours.get(key) == theirs.get(key), (name, key)
    got = xr.open_dataset(path, engine="zstrings")
    for name in ("s", "t", "sc", "lab"):
        assert got[name].values.tolist() == ds[name].values.tolist()


@pytest.mark.parametrize("kind", ["directory", "store"])
def test_failed_v3_write_is_refused_never_a_stand_in(tmp_path, monkeypatch, kind):
    """A write that fails part-way (here: the 3rd string chunk) leaves nothing a reader opens: a
    directory target does not exist (the write went to a sibling that is removed), a zarr-python
    Store, written in place, is rolled back by the failed write (nothing left) -- never xarray's
    uint8 stand-in or strings with missing chunks."""
    import zarr

    from xr_zstrings.codecs import v3 as codecs_v3

    values = np.array([f"v{i}é" for i in range(10)], dtype=object)
    ds = xr.Dataset({"s": ("x", values), "n": ("x", np.arange(10))})
    ds["s"].encoding["chunks"] = (2,)
    real = codecs_v3.V3Pipeline.encode
    calls = []

    def failing(self, arr, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise OSError("disk full")
        return real(self, arr, **kw)

    monkeypatch.setattr(codecs_v3.V3Pipeline, "encode", failing)
    target = tmp_path / "i.zarr" if kind == "directory" else zarr.storage.LocalStore(tmp_path / "s.zarr")
    with pytest.raises(OSError, match="disk full"):
        to_zarr_v3(ds, target, layout="arrow", consolidated=False)
    monkeypatch.setattr(codecs_v3.V3Pipeline, "encode", real)
    if kind == "directory":
        assert list(tmp_path.iterdir()) == []
        with pytest.raises(FileNotFoundError):
            xr.open_dataset(tmp_path / "i.zarr", engine="zstrings")
        return
    assert sorted(p.name for p in (tmp_path / "s.zarr").rglob("*")) == []  # rolled back
    with pytest.raises(FileNotFoundError):
        xr.open_dataset(tmp_path / "s.zarr", engine="zstrings")
    with pytest.raises(Exception):  # noqa: B017 - zarr-python's own error: no group there
        zarr.open_group(tmp_path / "s.zarr", mode="r")
