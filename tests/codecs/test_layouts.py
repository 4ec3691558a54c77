"""The one list of Zarr v3 string layouts (codecs/layouts.py) and that the writer, the pipeline and
the chunk reader ask it: each row written and read back through its own kernels."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from xr_zstrings.codecs import layouts, registry
from xr_zstrings.codecs.encoding import v3_codecs_encoding
from xr_zstrings.codecs.v3 import V3Pipeline
from xr_zstrings.errors import ZStringsError
from xr_zstrings.text.kernels import kernels
from xr_zstrings.write import zarr3

VALUES = np.array(["a", "", "héllo", "x" * 70], dtype=object)


def test_names_are_the_writers_and_unknown_ones_are_refused(tmp_path):
    assert zarr3.LAYOUTS == layouts.LAYOUT_NAMES == tuple(r.name for r in layouts.V3_LAYOUTS)
    assert layouts.V3_LAYOUTS[0].zarr_python  # the default is the layout zarr-python reads
    with pytest.raises(ZStringsError, match=r"Unknown layout 'nope': expected one of \('vlen-utf8'"):
        zarr3.to_zarr_v3(xr.Dataset({"s": ("x", VALUES)}), tmp_path / "s.zarr", layout="nope")
    assert not (tmp_path / "s.zarr").exists()


@pytest.mark.parametrize("row", layouts.V3_LAYOUTS, ids=lambda r: r.name)
@pytest.mark.parametrize("kind", ["str", "bytes"])
def test_each_row_builds_the_pipeline_of_its_codec_and_reads_with_its_kernel(row, kind):
    data_type, codecs = row.metadata(kind, {})
    p = V3Pipeline.from_metadata(codecs, data_type=data_type, dtype=object, chunk_shape=(4,))
    assert isinstance(p.ab, row.codec)
    assert p.layout == row.chunk_layouts[kind == "bytes"] and layouts.of_chunks(p.layout) is row
    assert p.accepts_vlen and p.layout in layouts.VARIABLE_LENGTH
    values = VALUES if kind == "str" else np.array([v.encode() for v in VALUES], dtype=object)
    raw = p.encode(values)
    assert list(p.decode(raw)) == list(values)
    if kind == "str":  # the read kernel: straight into a StringDType view (compiled kernels only;
        # without them it says so and the reader decodes through the pipeline, as asserted above)
        view = np.empty(4, dtype=np.dtypes.StringDType())
        u8 = np.frombuffer(raw, np.uint8)
        assert row.read_into(p.ab, u8, view, None, 4, "test chunk") is (kernels() is not None)
        if kernels() is not None:
            assert view.tolist() == list(values)


@pytest.mark.parametrize("name", layouts.LAYOUT_NAMES)
def test_to_zarr_v3_writes_each_rows_metadata(tmp_path, name):
    import xr_zstrings  # noqa: F401 - engine="zstrings"

    zarr3.to_zarr_v3(xr.Dataset({"s": ("x", VALUES)}), tmp_path / "s.zarr", layout=name, compressors=[])
    meta = json.loads((tmp_path / "s.zarr" / "s" / "zarr.json").read_text())
    data_type, codecs = layouts.layout_named(name).metadata("str", {})
    assert (meta["data_type"], meta["codecs"]) == (data_type, codecs)
    back = xr.open_dataset(tmp_path / "s.zarr", engine="zstrings")
    assert back["s"].values.tolist() == list(VALUES)


PACKAGE = Path(layouts.__file__).resolve().parents[1]


def _name_lists(source: str, names: frozenset[str]) -> list[tuple[int, list[str]]]:
    """(line, names) of each tuple/list/set literal or dict's keys holding two or more of ``names``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        items = node.keys if isinstance(node, ast.Dict) else node.elts if isinstance(
            node, ast.Tuple | ast.List | ast.Set) else []
        held = [i.value for i in items if isinstance(i, ast.Constant) and i.value in names]
        if len(held) >= 2:
            found.append((node.lineno, held))
    return found


def test_no_second_list_of_layout_names():
    """codecs/layouts.py is the one list of the layouts (issue 38): no other module of the package
    spells two of their names in one collection (as encoding.py's list of serializers did)."""
    names = frozenset(layouts.LAYOUT_NAMES)
    lists = {str(p.relative_to(PACKAGE)): found for p in sorted(PACKAGE.rglob("*.py"))
             if p != Path(layouts.__file__).resolve() and (found := _name_lists(p.read_text(encoding="utf-8"), names))}
    assert lists == {}, f"a second list of Zarr v3 layout names: {lists}; ask codecs/layouts.py instead"
    assert _name_lists('X = ("a", "vlen-utf8", "zarrs.vlen")\nY = {"arrow": 1, "b": 2}\n', names) == [
        (1, ["vlen-utf8", "zarrs.vlen"])]


@pytest.fixture
def new_serializer(monkeypatch):
    """A new layout's array->bytes codec, registered as its class would be (``@register``)."""

    class NewLayoutCodec(registry.CodecStep):
        family = "array_bytes"

    monkeypatch.setitem(registry._REGISTRY, "test.new-layout", NewLayoutCodec)
    return {"name": "test.new-layout", "configuration": {}}


def _split(codecs):
    """(filters, compressors) the store's chain gives in an engine="zstrings" encoding."""
    enc = v3_codecs_encoding(codecs, shards=None, text=False, where="test")
    return [f.v2["id"] for f in enc["filters"] or ()], [c.v2["id"] for c in enc["compressors"] or ()]


DELTA = {"name": "numcodecs.delta", "configuration": {"dtype": "<i4"}}
ZLIB = {"name": "numcodecs.zlib", "configuration": {"level": 1}}


def test_each_layouts_serializer_splits_the_chain():
    """Every layout's array->bytes codec is where the encoding splits a chain into filters and
    compressors, known from the codec registry alone."""
    for row in layouts.V3_LAYOUTS:
        for kind in ("str", "bytes"):
            _, codecs = row.metadata(kind, {})
            assert _split([DELTA, *codecs, ZLIB]) == (["delta"], ["zlib"]), (row.name, kind)


def test_a_registered_serializer_needs_no_other_list(new_serializer):
    """A new layout's codec, once registered, splits the chain: no list in codecs/encoding.py to extend."""
    assert _split([DELTA, new_serializer, ZLIB]) == (["delta"], ["zlib"])
