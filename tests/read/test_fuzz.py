"""Bad input a user can trust (issue 7): a table of hand-made malformed stores and hypothesis fuzzing.

Every damaged store, of every kind (NCZarr generations A, B, C1, C2, D, pure Zarr v2; Zarr v3 in
``test_bad_input_v3.py``), must end in a ``ZStringsError`` subclass whose message names the store,
the key, what was found and what was expected: never a crash, a hang, a MemoryError, a bare
KeyError/IndexError/TypeError, or silently wrong data. Decompression bombs and huge declared shapes
run in a subprocess with an address-space limit and a timeout, so a regression fails the test
instead of taking the test run down.
"""

from __future__ import annotations

import bz2
import json
import lzma
import os
import shutil
import struct
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import xarray as xr
from fuzz_stores import (
    TARGET_ARRAY,
    V2_KINDS,
    V3_KINDS,
    array_info,
    arrays_key,
    assert_array_left_out_or_read_by_zarr_python,
    build_all,
    chunk_files,
    dims_key,
    edit_json,
    group_info,
    json_paths,
    metadata_files,
    open_all,
    refs_key,
    set_path,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xr_zstrings import (
    ChunkError,
    DimensionError,
    MetadataError,
    StringDecodeError,
    UnsupportedError,
    ZStringsError,
    errors,
)
from xr_zstrings.codecs.bounded import zstd_decoded_bound
from xr_zstrings.codecs.v2 import build_pipeline
from xr_zstrings.formats.nczarr import NodeObjects, parse_array, parse_group
from xr_zstrings.formats.zarr3 import parse_node_v3

FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="session")
def pristine(tmp_path_factory) -> dict[str, Path]:
    return build_all(tmp_path_factory.mktemp("pristine"))


def assert_trustworthy(exc: BaseException, store: Path, *texts: str) -> str:
    """A ZStringsError naming the store (and the given texts), never anything else."""
    assert isinstance(exc, ZStringsError), f"{type(exc).__name__}: {exc}"
    msg = str(exc)
    assert str(store) in msg, f"store not named: {msg}"
    for t in texts:
        assert t in msg, f"{t!r} not in: {msg}"
    return msg


def read_or_trusted_error(store: Path, **kw) -> str | None:
    try:
        open_all(store, **kw)
    except ZStringsError as e:
        return assert_trustworthy(e, store)
    return None


# =======================================================================================
# The table: hand-made malformed stores (NCZarr of every generation and pure Zarr v2)
# =======================================================================================

# (what, mutation of the .zarray object, error class); applied to one array of every v2 store
ZARRAY_FIELDS = [
    ("shape as string", lambda o: o.update(shape="5"), MetadataError),
    ("shape of strings", lambda o: o.update(shape=["x"]), MetadataError),
    ("shape negative", lambda o: o.update(shape=[-1] * len(o["shape"])), MetadataError),
    ("shape float", lambda o: o.update(shape=[2.5] * len(o["shape"])), MetadataError),
    ("shape null", lambda o: o.update(shape=None), MetadataError),
    ("shape bool", lambda o: o.update(shape=[True] * len(o["shape"])), MetadataError),
    ("shape beyond any array", lambda o: o.update(shape=[2**62] * len(o["shape"]), chunks=[1] * len(o["shape"])),
     MetadataError),
    ("shape missing", lambda o: o.pop("shape"), MetadataError),
    ("chunks zero", lambda o: o.update(chunks=[0] * len(o["chunks"])), MetadataError),
    ("chunks negative", lambda o: o.update(chunks=[-2] * len(o["chunks"])), MetadataError),
    ("chunks float", lambda o: o.update(chunks=[1.5] * len(o["chunks"])), MetadataError),
    ("chunks huge", lambda o: o.update(chunks=[10**30] * len(o["chunks"])), MetadataError),
    ("chunks as number", lambda o: o.update(chunks=4), MetadataError),
    ("chunks wrong length", lambda o: o.update(chunks=o["chunks"] + [1]), MetadataError),
    ("chunks missing", lambda o: o.pop("chunks"), MetadataError),
    ("dtype as number", lambda o: o.update(dtype=5), UnsupportedError),
    ("dtype null", lambda o: o.update(dtype=None), UnsupportedError),
    ("dtype unknown", lambda o: o.update(dtype="<q9"), UnsupportedError),
    ("dtype structured", lambda o: o.update(dtype=[["a", "<i4"]]), UnsupportedError),
    ("dtype void", lambda o: o.update(dtype="|V8"), UnsupportedError),
    ("dtype object without vlen filter", lambda o: o.update(dtype="|O", filters=None), UnsupportedError),
    ("fill_value object", lambda o: o.update(fill_value={"a": 1}), MetadataError),
    ("fill_value list", lambda o: o.update(fill_value=[1, 2]), MetadataError),
    ("order unknown", lambda o: o.update(order="X"), MetadataError),
    ("order as number", lambda o: o.update(order=1), MetadataError),
    ("compressor as string", lambda o: o.update(compressor="zlib"), MetadataError),
    ("compressor without id", lambda o: o.update(compressor={"level": 1}), MetadataError),
    ("compressor id a number", lambda o: o.update(compressor={"id": 5}), MetadataError),
    ("compressor unknown", lambda o: o.update(compressor={"id": "nosuchcodec"}), UnsupportedError),
    ("filters not a list", lambda o: o.update(filters="shuffle"), MetadataError),
    ("filter not an object", lambda o: o.update(filters=[5]), MetadataError),
    ("filter unknown", lambda o: o.update(filters=[{"id": "nosuchfilter"}]), UnsupportedError),
    ("shuffle elementsize text", lambda o: o.update(filters=[{"id": "shuffle", "elementsize": "x"}]), MetadataError),
    ("dimension_separator unknown", lambda o: o.update(dimension_separator="-"), MetadataError),
    ("zarr_format 3", lambda o: o.update(zarr_format=3), UnsupportedError),
    ("not an object", lambda o: [1, 2], MetadataError),
]

# (what, mutation of the array's NCZarr info, error class, text) for the NCZarr stores
ARRAY_INFO_FIELDS = [
    ("dimension references not a list", lambda i: i.update({refs_key(i): "/x"}), MetadataError, "/x"),
    ("dimension reference a number", lambda i: i.update({refs_key(i): [5] * len(i[refs_key(i)])}), DimensionError, "5"),
    ("dangling dimension reference", lambda i: i.update({refs_key(i): ["/nowhere"] * len(i[refs_key(i)])}),
     DimensionError, "/nowhere"),
    ("dimension reference with ..", lambda i: i.update({refs_key(i): ["/sub/../x"] * len(i[refs_key(i)])}),
     DimensionError, "/sub/../x"),
    ("dimension reference with NUL", lambda i: i.update({refs_key(i): ["/x\x00"] * len(i[refs_key(i)])}),
     DimensionError, "x\\x00"),
    ("dimension reference to a group", lambda i: i.update({refs_key(i): ["/"] * len(i[refs_key(i)])}),
     DimensionError, "'/'"),
    ("dimension reference through an array", lambda i: i.update({refs_key(i): ["/v/x"] * len(i[refs_key(i)])}),
     DimensionError, "/v/x"),
    ("too many dimension references", lambda i: i.update({refs_key(i): i[refs_key(i)] * 2 + ["/x"]}),
     DimensionError, "dimensions"),
    ("array info not an object", None, MetadataError, "_nczarr_array"),
]

# (what, mutation of the root group's NCZarr info, error class, text)
GROUP_INFO_FIELDS = [
    ("dimensions as a list", lambda g: g.update({dims_key(g): ["x"]}), MetadataError, "dimensions"),
    ("dimension size text", lambda g: g[dims_key(g)].update({k: "big" for k in g[dims_key(g)]}), MetadataError,
     "'big'"),
    ("dimension size negative", lambda g: g[dims_key(g)].update({k: -1 for k in g[dims_key(g)]}), MetadataError,
     "-1"),
    ("dimension size float", lambda g: g[dims_key(g)].update({k: 2.5 for k in g[dims_key(g)]}), MetadataError,
     "2.5"),
    ("dimension size object without size", lambda g: g[dims_key(g)].update({k: {"unlimited": 1} for k in g[dims_key(g)]}),
     MetadataError, "None"),
    ("dimension size disagrees with shapes", lambda g: g[dims_key(g)].update({k: 1 for k in g[dims_key(g)]}),
     DimensionError, "size 1"),
    ("dimension name with slash", lambda g: g[dims_key(g)].update({"a/b": 1}), MetadataError, "'a/b'"),
    ("dimension name empty", lambda g: g[dims_key(g)].update({"": 1}), MetadataError, "''"),
    ("array listing a string", lambda g: g.update({arrays_key(g): "v"}), MetadataError, "listing"),
    ("array name a number", lambda g: g[arrays_key(g)].append(7), MetadataError, "7"),
    ("array name ..", lambda g: g[arrays_key(g)].append(".."), MetadataError, "'..'"),
    ("array name .", lambda g: g[arrays_key(g)].append("."), MetadataError, "'.'"),
    ("array name absolute", lambda g: g[arrays_key(g)].append("/etc/passwd"), MetadataError, "/etc/passwd"),
    ("array name with NUL", lambda g: g[arrays_key(g)].append("a\x00b"), MetadataError, "a\\x00b"),
    ("array name with backslash", lambda g: g[arrays_key(g)].append("..\\x"), MetadataError, "..\\\\x"),
    ("listed array missing", lambda g: g[arrays_key(g)].append("ghost"), MetadataError, "ghost/.zarray"),
    ("group name ..", lambda g: g.setdefault("groups", []).append(".."), MetadataError, "'..'"),
    ("group name absolute", lambda g: g.setdefault("groups", []).append("/tmp"), MetadataError, "/tmp"),
    ("listed group missing", lambda g: g.setdefault("groups", []).append("ghost"), MetadataError, "ghost/.zgroup"),
    ("group info not an object", None, MetadataError, "_nczarr_group"),
]


def _zarray_rows():
    for kind in V2_KINDS:
        arr = TARGET_ARRAY[kind]
        for what, fn, err in ZARRAY_FIELDS:
            yield pytest.param(kind, ("zarray", arr, fn), err, [f"{arr}/.zarray"], id=f"{kind}-zarray-{what}")


def _info_rows():
    for kind in V2_KINDS:
        if kind == "zarr-v2":
            continue
        arr = TARGET_ARRAY[kind]
        for what, fn, err, text in ARRAY_INFO_FIELDS:
            yield pytest.param(kind, ("array_info", arr, fn), err, [text], id=f"{kind}-array-{what}")
        for what, fn, err, text in GROUP_INFO_FIELDS:
            yield pytest.param(kind, ("group_info", "", fn), err, [text], id=f"{kind}-group-{what}")


def _write(rel: str, data: bytes):
    return ("raw", rel, data)


# hand-made rows that do not follow a field pattern
MISC_ROWS = [
    # metadata bytes
    ("nczarr-D", _write(".zattrs", b'{"title": "x", '), MetadataError, [".zattrs", "malformed JSON"]),
    ("nczarr-D", _write("names/.zarray", b'{"zarr_format": 2, "shape": [5'), MetadataError, ["names/.zarray"]),
    ("nczarr-D", _write("names/.zarray", b""), MetadataError, ["names/.zarray"]),
    ("nczarr-D", _write("temp/.zarray", b'{"zarr_format": 2, "x": "\xff"}'), MetadataError, ["temp/.zarray", "UTF-8"]),
    # (attribute objects that are not UTF-8 read, values as bytes: tests/read/test_bad_input.py)
    ("nczarr-D", _write("temp/.zattrs", b'\xef\xbb\xbf{"units": "K"}'), MetadataError, ["temp/.zattrs"]),
    ("nczarr-D", _write("temp/.zattrs", b"[" * 100_000), MetadataError, ["temp/.zattrs", "nested"]),
    ("nczarr-D", _write("temp/.zattrs", b'{"n": ' + b"9" * 5000 + b"}"), MetadataError, ["temp/.zattrs"]),
    ("nczarr-D", _write("temp/.zattrs", b'{"n": NaN, "m": Infinity}'), None, []),  # netcdf-c's bare NaN: fine
    ("zarr-v2", _write(".zgroup", b"null"), MetadataError, [".zgroup"]),
    ("zarr-v2", _write(".zgroup", b'{"zarr_format": 3}'), UnsupportedError, [".zgroup", "3"]),
    ("zarr-v2", _write("names/.zattrs", b'{"_ARRAY_DIMENSIONS": "x"}'), DimensionError, ["names/.zattrs"]),
    ("zarr-v2", _write("names/.zattrs", b'{"_ARRAY_DIMENSIONS": [5]}'), DimensionError, ["names/.zattrs"]),
    ("zarr-v2", _write("names/.zattrs", b'{"_ARRAY_DIMENSIONS": ["x", "y"]}'), DimensionError, ["names/.zattrs"]),
    ("zarr-v2", ("zarray", "names", lambda o: o.update(shape=[5])), DimensionError, ["'x'", "size 5", "size 8"]),
    ("zarr-v2", ("zarray", "names", lambda o: o.update(fill_value={"a": 1})), MetadataError, ["fill_value"]),
    ("zarr-v2", ("zarray", "names", lambda o: o.update(fill_value=0)), None, []),  # zarr-python 2's default
    ("zarr-v2", _write("names/.zattrs", b"[]"), MetadataError, ["names/.zattrs"]),
    ("nczarr-D", _write("names/.zattrs", b'{"_nczarr_maxstrlen": "wide"}'), MetadataError,
     ["names/.zattrs", "_nczarr_maxstrlen"]),
    ("nczarr-D", _write("names/.zattrs", b'{"_nczarr_array": {"dimension_references": ["/x"]}, '
                        b'"_nczarr_attr": {"types": {"units": 5}}, "units": 1}'), MetadataError, ["'units'"]),
    ("nczarr-D", _write("names/.zattrs", b'{"_nczarr_array": {"dimension_references": ["/x"]}, '
                        b'"_nczarr_attr": {"types": "x"}}'), MetadataError, ["_nczarr_attr"]),
    ("nczarr-D", _write("names/.zattrs", b'{"_nczarr_array": {"dimension_references": ["/x"]}, '
                        b'"_nczarr_attr": {"types": {"units": "<i4"}}, "units": "abc"}'), MetadataError, ["'units'"]),
    ("nczarr-D", _write(".zattrs", b'{"_nczarr_group": {"dimensions": {"x": 5}, "arrays": [], "groups": []}, '
                        b'"_nczarr_default_maxstrlen": 0}'), MetadataError, ["_nczarr_default_maxstrlen"]),
    # fill values of the wrong type, per dtype
    ("nczarr-D", ("zarray", "counts", lambda o: o.update(fill_value="abc")), MetadataError, ["fill_value", "'abc'"]),
    ("nczarr-D", ("zarray", "counts", lambda o: o.update(fill_value=1.5)), MetadataError, ["fill_value", "1.5"]),
    ("nczarr-D", ("zarray", "counts", lambda o: o.update(fill_value=10**30)), MetadataError, ["fill_value"]),
    ("nczarr-D", ("zarray", "temp", lambda o: o.update(fill_value="warm")), MetadataError, ["fill_value", "'warm'"]),
    ("nczarr-D", ("zarray", "names", lambda o: o.update(fill_value=7)), MetadataError, ["fill_value", "7"]),
    ("zarr-v2", ("zarray", "codes", lambda o: o.update(fill_value="not base64!")), MetadataError, ["fill_value"]),
    ("zarr-v2", ("zarray", "vals", lambda o: o.update(fill_value=[1.0])), None, []),  # one-element list: NCZarr 1.0
    # shapes that disagree with dimensions or chunks; chunks of the wrong length
    ("nczarr-D", ("zarray", "counts", lambda o: o.update(shape=[7], chunks=[7])), DimensionError, ["'x' has size 5"]),
    ("nczarr-D", ("zarray", "temp", lambda o: o.update(shape=[3, 4])), DimensionError, ["temp", "'x' has size 5"]),
    ("nczarr-D", ("zarray", "scalar_int", lambda o: o.update(shape=[3], chunks=[3])), MetadataError, ["scalar"]),
    ("nczarr-D", _write("counts/0", b"\x00" * 12), ChunkError, ["counts/0", "12 bytes", "40"]),
    ("nczarr-D", _write("counts/0", b""), ChunkError, ["counts/0"]),
    ("nczarr-D", _write("counts/0", b"\x00" * 48), ChunkError, ["counts/0", "48 bytes"]),
    ("nczarr-D", _write("temp/0.0", b"not zlib at all"), ChunkError, ["temp/0.0"]),
    ("nczarr-D", _write("temp/0.0", zlib.compress(b"\x00" * 3)), ChunkError, ["temp/0.0"]),
    ("nczarr-D", _write("temp/0.0", zlib.compress(b"\x00" * 16)[:-3]), ChunkError, ["temp/0.0"]),
    ("zarr-v2", _write("vals/0", b"\x00" * 23), ChunkError, ["vals/0", "23 bytes", "24"]),
    ("zarr-v2", _write("names/0", numcodecs.Blosc().encode(numcodecs.VLenUTF8().encode(np.array(["a", "b"], dtype=object)))),
     ChunkError, ["names/0", "2 items", "expected 3"]),
    ("zarr-v2", _write("names/0", numcodecs.Blosc().encode(b"\xff\xff\xff\x7f")), ChunkError,
     ["names/0", "2147483647 items"]),
    ("zarr-v2", _write("names/0", numcodecs.Blosc().encode(b"\x03\x00\x00\x00\x01\x00\x00\x00a")), ChunkError,
     ["names/0"]),
    ("zarr-v2", _write("names/0", b"\x00" * 3), ChunkError, ["names/0"]),
    ("zarr-v2", _write("names/0", b"\x00" * 40), ChunkError, ["names/0"]),
    # invalid UTF-8 in the data
    ("nczarr-D", _write("names/0", b"\xffbc".ljust(128, b"\0") * 5), StringDecodeError, ["names"]),
    ("nczarr-C1", _write("s/0", b"\xc3(".ljust(6, b"\0") * 5), StringDecodeError, ["'/s'"]),
    ("nczarr-D", _write("chars/0.0", b"\xff" * 30), StringDecodeError, ["chars"]),
    ("zarr-v2", _write("names/0", numcodecs.Blosc().encode(
        numcodecs.VLenBytes().encode(np.array([b"\xff", b"a", b"b"], dtype=object)))), (ChunkError, StringDecodeError),
     ["names/0"]),
    # store layout: a key that is a directory, a chunk key that is a directory
    ("zarr-v2", ("mkdir", "vals/1", None), None, []),  # not a chunk: missing, reads as the fill value
    ("nczarr-D", ("mkdir", "counts/.zarray", None), ZStringsError, ["counts/.zarray"]),
]


def _misc_rows():
    for i, (kind, mutation, err, texts) in enumerate(MISC_ROWS):
        yield pytest.param(kind, mutation, err, texts, id=f"{kind}-misc{i:02d}")


ROWS = [*_zarray_rows(), *_info_rows(), *_misc_rows()]


def apply(store: Path, mutation) -> None:
    op, rel, arg = mutation
    if op == "raw":
        (store / rel).write_bytes(arg)
    elif op == "mkdir":
        p = store / rel
        if p.exists():
            p.unlink()
        (p / "x").mkdir(parents=True)
    elif op == "zarray":
        edit_json(store / rel / ".zarray", arg)
    elif op == "array_info":
        path, get = array_info(store, rel)
        if arg is None:
            edit_json(path, lambda o: _replace_info(o, get, "oops"))
        else:
            edit_json(path, lambda o: arg(get(o)))
    elif op == "group_info":
        path, get = group_info(store)
        if arg is None:
            edit_json(path, lambda o: _replace_info(o, get, ["oops"]))
        else:
            edit_json(path, lambda o: arg(get(o)))
    else:  # pragma: no cover
        raise AssertionError(op)


def _replace_info(obj, get, value):
    info = get(obj)
    if info is obj:  # NCZarr 1.0: the whole object is the info
        return value
    for k, v in obj.items():
        if v is info:
            obj[k] = value
    return obj


@pytest.mark.parametrize(("kind", "mutation", "err", "texts"), ROWS)
def test_malformed_store_table(pristine, tmp_path, kind, mutation, err, texts):
    store = tmp_path / "s.zarr"
    shutil.copytree(pristine[kind], store)
    apply(store, mutation)
    if err is None:  # a tolerated deviation: reads, with no error
        open_all(store)
        return
    if err is UnsupportedError and mutation[0] == "zarray":
        assert_array_left_out_or_read_by_zarr_python(store, mutation[1])
        return
    with pytest.raises(ZStringsError) as info:
        open_all(store)
    assert isinstance(info.value, err), f"{type(info.value).__name__}: {info.value}"
    assert_trustworthy(info.value, store, *texts)


# =======================================================================================
# Directory-store oddities
# =======================================================================================


def test_symlink_cycle_in_a_pure_zarr_store_ends(pristine, tmp_path):
    """A directory that links back to its parent: the walk must end (error or data), not recurse forever."""
    store = tmp_path / "s.zarr"
    shutil.copytree(pristine["zarr-v2"], store)
    os.symlink(".", store / "loop")
    code = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {str(Path(__file__).parents[1])!r})
        from fuzz_stores import open_all
        from xr_zstrings import ZStringsError
        try:
            open_all({str(store)!r}); print("OK")
        except ZStringsError as e:
            print("ZStringsError", e)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith(("OK", "ZStringsError")), proc.stdout


# =======================================================================================
# Hypothesis: any damage to metadata or chunks ends well
# =======================================================================================

JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 1, 2**31, 2**63, 10**15, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["", "..", "/", "/x", "/nowhere", "a\x00b", "<i4", "|S8", "|O", ">S1", "NaN", "zlib", "C",
                     "x" * 300]),
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=8,
)


@st.composite
def json_damage(draw, files: list[str], store: Path):
    rel = draw(st.sampled_from(files))
    obj = json.loads((store / rel).read_text())
    paths = json_paths(obj)
    path = draw(st.sampled_from(paths))
    action = draw(st.sampled_from(["replace", "replace", "delete", "truncate", "bytes"]))
    if action == "replace":
        return rel, ("replace", path, draw(JSON_VALUES))
    if action == "delete" and path:
        return rel, ("delete", path, None)
    raw = (store / rel).read_bytes()
    if action == "truncate" or not path:
        return rel, ("raw", None, raw[: draw(st.integers(0, max(len(raw) - 1, 0)))])
    pos = draw(st.integers(0, len(raw)))
    junk = draw(st.sampled_from([b"\xff", b"\xc3", b"\x00", b"}", b"{", b'"', b",", b"\xed\xa0\x80", b"]"]))
    return rel, ("raw", None, raw[:pos] + junk + raw[pos:])


def _damage_json(store: Path, rel: str, action) -> None:
    op, path, value = action
    p = store / rel
    if op == "raw":
        p.write_bytes(value)
        return
    obj = json.loads(p.read_text())
    obj = set_path(obj, path, value, delete=op == "delete")
    p.write_text(json.dumps(obj, allow_nan=True))


def _fuzz_metadata(data, pristine, tmp_path_factory, kinds):
    kind = data.draw(st.sampled_from(kinds), label="store")
    src = pristine[kind]
    rel, action = data.draw(json_damage(metadata_files(src), src), label="damage")
    store = tmp_path_factory.mktemp("fz") / "s.zarr"
    shutil.copytree(src, store)
    _damage_json(store, rel, action)
    read_or_trusted_error(store)
    shutil.rmtree(store.parent)


@settings(FUZZ, max_examples=150)
@given(data=st.data())
def test_property_damaged_v2_metadata(pristine, tmp_path_factory, data):
    """NCZarr A/B/C1/C2/D and pure Zarr v2: any field replaced by any JSON value, deleted, cut or spoiled."""
    _fuzz_metadata(data, pristine, tmp_path_factory, V2_KINDS)


@settings(FUZZ, max_examples=100)
@given(data=st.data())
def test_property_damaged_v3_metadata(pristine, tmp_path_factory, data):
    """Zarr v3 zarr.json (vlen-utf8, zarrs.vlen, Arrow, sharded): the same damage."""
    _fuzz_metadata(data, pristine, tmp_path_factory, V3_KINDS)


@st.composite
def chunk_damage(draw, raw: bytes):
    action = draw(st.sampled_from(["truncate", "flip", "append", "random", "empty", "splice"]))
    if action == "truncate":
        return raw[: draw(st.integers(0, max(len(raw) - 1, 0)))]
    if action == "flip" and raw:
        i = draw(st.integers(0, len(raw) - 1))
        return raw[:i] + bytes([raw[i] ^ draw(st.integers(1, 255))]) + raw[i + 1 :]
    if action == "append":
        return raw + draw(st.binary(min_size=1, max_size=64))
    if action == "splice" and raw:
        i = draw(st.integers(0, len(raw) - 1))
        return raw[:i] + draw(st.sampled_from([b"\xff\xff\xff\x7f", b"\xff" * 8, b"\x00" * 8, b"\xed\xa0\x80"])) + raw[i + 4 :]
    if action == "empty":
        return b""
    return draw(st.binary(max_size=256))


@settings(FUZZ, max_examples=200)
@given(data=st.data())
def test_property_damaged_chunks(pristine, tmp_path_factory, data):
    """Every store kind: one chunk cut, flipped, extended, spliced with lies, or replaced."""
    kind = data.draw(st.sampled_from(sorted(pristine)), label="store")
    src = pristine[kind]
    rel = data.draw(st.sampled_from(chunk_files(src)), label="chunk")
    new = data.draw(chunk_damage((src / rel).read_bytes()), label="bytes")
    store = tmp_path_factory.mktemp("fz") / "s.zarr"
    shutil.copytree(src, store)
    (store / rel).write_bytes(new)
    for policy in ("drop", "strict"):
        read_or_trusted_error(store, utf8_errors=policy)
    shutil.rmtree(store.parent)


# --- the pure parsers: arbitrary JSON in every position, no I/O ------------------------

ZARRAY_KEYS = ["zarr_format", "shape", "chunks", "dtype", "fill_value", "order", "compressor", "filters",
               "dimension_separator", "_nczarr_array", "_NCZARR_ARRAY"]
ATTR_KEYS = ["_ARRAY_DIMENSIONS", "_nczarr_array", "_nczarr_attr", "_nczarr_maxstrlen", "_nczarr_group",
             "_nczarr_superblock", "_nczarr_default_maxstrlen", "_NCProperties", "units"]


def _objects(keys):
    return st.dictionaries(st.sampled_from(keys), JSON_VALUES, max_size=len(keys))


@settings(FUZZ, max_examples=300)
@given(zarray=_objects(ZARRAY_KEYS), zattrs=_objects(ATTR_KEYS), zgroup=_objects(["zarr_format", "_nczarr_group",
       "_NCZARR_GROUP", "_nczarr_superblock"]), ncz=st.one_of(st.none(), JSON_VALUES))
def test_property_v2_parsers_raise_only_zstrings_errors(zarray, zattrs, zgroup, ncz):
    base = {"zarr_format": 2, "shape": [3], "chunks": [2], "dtype": "<i4", "fill_value": 0, "order": "C",
            "compressor": None, "filters": None}
    objs = {".zarray": {**base, **zarray}, ".zattrs": zattrs, ".nczvar": ncz, ".nczattr": ncz}
    for parse, obj in ((parse_array, objs), (parse_group, {".zgroup": zgroup, ".zattrs": zattrs, ".nczgroup": ncz})):
        try:
            parse(NodeObjects("/a", obj), store="STORE")
        except ZStringsError as e:
            assert "STORE/a" in str(e), str(e)


V3_KEYS = ["zarr_format", "node_type", "shape", "data_type", "chunk_grid", "chunk_key_encoding", "fill_value",
           "codecs", "attributes", "dimension_names", "storage_transformers", "consolidated_metadata", "extra"]


@settings(FUZZ, max_examples=300)
@given(fields=_objects(V3_KEYS), drop=st.lists(st.sampled_from(V3_KEYS), max_size=2))
def test_property_v3_parser_raises_only_zstrings_errors(fields, drop):
    base = {"zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "string",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
            "chunk_key_encoding": {"name": "default"}, "fill_value": "", "codecs": [{"name": "vlen-utf8"}],
            "dimension_names": ["x"]}
    obj = {**base, **fields}
    for k in drop:
        obj.pop(k, None)
    try:
        parse_node_v3(obj, path="/a", store="STORE")
    except ZStringsError as e:
        assert "STORE/a/zarr.json" in str(e), str(e)


# =======================================================================================
# Decompression: the bounded decoders
# =======================================================================================


def zstd_rle_frame(nblocks: int, *, fcs: int | None = None, block: int = 1 << 17) -> bytes:
    """A zstd frame of ``nblocks`` RLE blocks of zero bytes: 4 bytes per 128 KiB decoded."""
    fhd = 0 if fcs is None else 3 << 6
    head = struct.pack("<I", 0xFD2FB528) + bytes([fhd, (17 - 10) << 3])
    head += b"" if fcs is None else struct.pack("<Q", fcs)
    blocks = b"".join(struct.pack("<I", (i == nblocks - 1) | 2 | (block << 3))[:3] + b"\0" for i in range(nblocks))
    return head + blocks


def zlib_bomb(n_mib: int, *, gzip_header: bool = False) -> bytes:
    """A valid zlib (or gzip) stream of ``n_mib`` MiB of zeros, ~1 KB per MiB (repeated full-flush blocks)."""
    co = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = co.compress(b"\0" * (1 << 20)) + co.flush(zlib.Z_FULL_FLUSH)
    again = co.compress(b"\0" * (1 << 20)) + co.flush(zlib.Z_FULL_FLUSH)
    body = block + again * (n_mib - 1) + co.flush()
    n = n_mib << 20
    if gzip_header:  # the CRC is computed for small streams only (a bomb is refused long before it)
        crc = 0
        for _ in range(n_mib if n_mib <= 16 else 0):
            crc = zlib.crc32(b"\0" * (1 << 20), crc)
        return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + body + struct.pack("<II", crc, n & 0xFFFFFFFF)
    return b"\x78\xda" + body + struct.pack(">I", ((n % 65521) << 16) | 1)


def multistream(compress, n_mib: int) -> bytes:
    """bz2/xz: ``n_mib`` concatenated streams of 1 MiB of zeros each (every decoder reads them all)."""
    return compress(b"\0" * (1 << 20)) * n_mib


def test_bomb_builders_are_honest():
    assert len(zlib.decompress(zlib_bomb(3))) == 3 << 20
    assert len(numcodecs.GZip().decode(zlib_bomb(2, gzip_header=True))) == 2 << 20
    assert len(numcodecs.Zstd().decode(zstd_rle_frame(5))) == 5 << 17
    assert len(numcodecs.Zstd().decode(zstd_rle_frame(5, fcs=5 << 17))) == 5 << 17
    assert len(bz2.decompress(multistream(bz2.compress, 3))) == 3 << 20


def _blosc_lie() -> bytes:
    b = bytes(numcodecs.Blosc().encode(np.zeros(1000, "u1")))
    return b[:4] + struct.pack("<I", 2**31 - 1) + b[8:]


BOMBS = {
    "zlib": ({"id": "zlib"}, lambda: zlib_bomb(64)),
    "gzip": ({"id": "gzip"}, lambda: zlib_bomb(64, gzip_header=True)),
    "bz2": ({"id": "bz2"}, lambda: multistream(bz2.compress, 64)),
    "lzma": ({"id": "lzma"}, lambda: multistream(lzma.compress, 64)),
    "zstd content size": ({"id": "zstd"}, lambda: zstd_rle_frame(512, fcs=512 << 17)),
    "zstd streamed": ({"id": "zstd"}, lambda: zstd_rle_frame(512)),
    "zstd lying size": ({"id": "zstd"}, lambda: zstd_rle_frame(512, fcs=1 << 40)),
    "blosc lying size": ({"id": "blosc"}, lambda: _blosc_lie()),
    "lz4 lying size": ({"id": "lz4"}, lambda: struct.pack("<I", 2**31 - 1) + bytes(numcodecs.LZ4().encode(b"\0" * 64))[4:]),
}


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_bounded_pipeline_refuses_bombs_at_the_chunk_size(name):
    """With the chunk shape known, no decoder hands out more than the chunk's bytes (+ one step)."""
    cfg, make = BOMBS[name]
    pipe = build_pipeline(cfg, [], dtype=np.dtype("<f8"), where="STORE key 'v/.zarray'", chunk_shape=(100,))
    with pytest.raises(ChunkError, match=r"more than 800 bytes, expected 800 bytes \(\[100\] x <f8\)"):
        pipe.decode(make())


@pytest.mark.parametrize("name", ["zlib", "gzip", "bz2", "lzma", "zstd content size", "zstd streamed"])
def test_bounded_decoders_still_decode_honest_chunks(name):
    cfg, _ = BOMBS[name]
    data = np.random.default_rng(0).integers(0, 5, 5000).astype("<f8")
    codec = numcodecs.get_codec(cfg)
    pipe = build_pipeline(cfg, [{"id": "shuffle", "elementsize": 0}], dtype=np.dtype("<f8"), chunk_shape=(5000,))
    raw = codec.encode(pipe.filters[0].encode(data.tobytes()))
    out = np.frombuffer(bytes(memoryview(pipe.decode(raw)).cast("B")), "<f8")
    np.testing.assert_array_equal(out, data)


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_scratch_decoding_refuses_the_same_bombs(name):
    """The reused per-thread buffer path (scratch=True) keeps every size check."""
    cfg, make = BOMBS[name]
    pipe = build_pipeline(cfg, [], dtype=np.dtype("<f8"), where="STORE key 'v/.zarray'", chunk_shape=(100,))
    with pytest.raises(ChunkError, match=r"more than 800 bytes"):
        pipe.decode(make(), scratch=True)


@pytest.mark.parametrize("cfg", [{"id": "zstd"}, {"id": "blosc"}, {"id": "lz4"}, {"id": "zlib"}])
def test_scratch_decoding_same_bytes_and_reused(cfg):
    """scratch=True decodes the same bytes; the buffer is this thread's and is reused by its next
    scratch decode (the contract the reader's direct path relies on: consume before decoding)."""
    from xr_zstrings.codecs.bounded import bounded_decode

    codec = numcodecs.get_codec(cfg)
    a, b = (np.random.default_rng(i).integers(0, 5, 5000).astype("u1").tobytes() for i in (1, 2))
    first = bounded_decode(codec, codec.encode(a), limit=10**6, scratch=True)
    assert bytes(memoryview(first).cast("B")) == a
    second = bounded_decode(codec, codec.encode(b), limit=10**6, scratch=True)
    assert bytes(memoryview(second).cast("B")) == b
    if cfg["id"] != "zlib":  # streamed codecs never use the scratch buffer
        assert np.shares_memory(first, second)
    assert bytes(memoryview(bounded_decode(codec, codec.encode(a), limit=10**6)).cast("B")) == a


@pytest.mark.parametrize("scratch", [False, True])
def test_zstd_chunk_of_several_frames_decodes_whole_and_stays_bounded(scratch):
    """A zstd chunk may hold several frames (numcodecs decodes them all): every frame is decoded,
    the first frame's content size is no size for the output, and the bound counts every frame
    (a small first frame does not let a big second one past the limit). Both failed before:
    ValueError 'destination buffer too small', and a bound of the first frame only."""
    from xr_zstrings.codecs.bounded import bounded_decode

    z = numcodecs.Zstd()
    a, b = (np.random.default_rng(i).integers(0, 5, 50_000).astype("u1").tobytes() for i in (3, 4))
    two = bytes(z.encode(a)) + bytes(z.encode(b))
    assert zstd_decoded_bound(two) == len(a) + len(b)
    out = bounded_decode(z, two, limit=10**6, scratch=scratch)
    assert bytes(memoryview(out).cast("B")) == a + b
    with pytest.raises(ChunkError, match=r"header\(s\) say 100000 bytes; refused before decompressing"):
        bounded_decode(z, two, limit=len(a) + 10, scratch=scratch)


def test_zstd_chunk_of_several_frames_through_the_engine(tmp_path):
    """The same chunk in a pure Zarr v2 ``|S8`` array (``_Encoding``: decoded into text by the
    reader's direct path), read with engine="zstrings" and checked against zarr-python and
    engine="zarr" reading the store (failed before: ValueError from the reused buffer's size)."""
    import zarr

    values = np.array([f"v{i:06d}".encode() for i in range(3000)], dtype="S8")
    root = zarr.open_group(tmp_path / "s.zarr", mode="w", zarr_format=2)
    arr = root.create_array("s", shape=values.shape, chunks=values.shape, dtype="S8",
                            compressors=numcodecs.Zstd(), fill_value=b"", dimension_names=None)
    arr[:] = values
    arr.attrs.update({"_ARRAY_DIMENSIONS": ["x"], "_Encoding": "utf-8"})  # decoded by the text kernel
    raw = values.tobytes()
    z = numcodecs.Zstd()
    (tmp_path / "s.zarr" / "s" / "0").write_bytes(bytes(z.encode(raw[:8000])) + bytes(z.encode(raw[8000:])))
    np.testing.assert_array_equal(zarr.open_group(tmp_path / "s.zarr", mode="r")["s"][:], values)
    got = xr.open_dataset(tmp_path / "s.zarr", engine="zstrings")["s"].values
    assert got.tolist() == [v.decode() for v in values.tolist()]
    assert got.tolist() == xr.open_dataset(tmp_path / "s.zarr", engine="zarr", consolidated=False)["s"].values.tolist()


@settings(FUZZ, max_examples=60)
@given(data=st.binary(min_size=1, max_size=4000), level=st.integers(1, 5), rle=st.integers(0, 20), fcs=st.booleans())
def test_property_zstd_bound_is_an_upper_bound(data, level, rle, fcs):
    frames = [bytes(numcodecs.Zstd(level=level).encode(data))]
    if rle:
        frames.append(zstd_rle_frame(rle, fcs=(rle << 17) if fcs else None))
    for frame in [*frames, b"".join(frames)]:  # each frame, and a chunk of all of them
        bound = zstd_decoded_bound(frame)
        assert bound is not None and bound >= len(numcodecs.Zstd().decode(frame))


# =======================================================================================
# Bombs and huge shapes through the engine, in a memory-limited subprocess
# =======================================================================================

HEADROOM = 512 << 20  # address space allowed beyond what the interpreter has mapped after warming up
LIMIT = 64 << 20  # XR_ZSTRINGS_MAX_CHUNK_BYTES in the subprocess (the cap when the chunk size is unknown)

RUNNER = textwrap.dedent(r"""
    import json, os, resource, signal, sys, time
    sys.path.insert(0, sys.argv[1])
    from fuzz_stores import open_all
    import xarray as xr
    from xr_zstrings import ZStringsError
    cases = json.loads(sys.argv[2])
    open_all(sys.argv[3])  # warm up: imports, thread pools, event loop
    vm = int(next(l for l in open("/proc/self/status") if l.startswith("VmSize")).split()[1]) * 1024
    limit = vm + int(sys.argv[4])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    class Hang(Exception):
        pass

    def alarm(*_):
        raise Hang("no answer within 20 s")

    signal.signal(signal.SIGALRM, alarm)
    for name, store, how in cases:
        print(json.dumps({"start": name}), flush=True)
        t = time.time()
        signal.alarm(20)
        try:
            if how == "all":
                open_all(store)
            else:  # a slice of the first variable of the root group
                ds = xr.open_dataset(store, engine="zstrings")
                var = ds[how]
                var[(slice(0, 3),) * var.ndim].load()
                var[(slice(-3, None),) * var.ndim].load()
            res = {"cls": None, "msg": ""}
        except ZStringsError as e:
            res = {"cls": type(e).__name__, "msg": str(e), "zs": True}
        except BaseException as e:
            res = {"cls": type(e).__name__, "msg": str(e)[:500], "zs": False}
        signal.alarm(0)
        res.update(name=name, seconds=time.time() - t)
        print(json.dumps(res), flush=True)
    print(json.dumps({"maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "vm_mib": vm / 2**20}), flush=True)
""")


def run_limited(cases: list[tuple[str, str, str]], warmup: Path, headroom: int = HEADROOM,
                env_limit: int | None = LIMIT) -> dict[str, dict]:
    env = {**os.environ, "MALLOC_ARENA_MAX": "2"}
    if env_limit is not None:
        env["XR_ZSTRINGS_MAX_CHUNK_BYTES"] = str(env_limit)
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, str(Path(__file__).parents[1]), json.dumps(cases), str(warmup), str(headroom)],
        capture_output=True, text=True, timeout=240, env=env, check=False,
    )
    results: dict[str, dict] = {}
    started = None
    for line in proc.stdout.splitlines():
        rec = json.loads(line)
        if "start" in rec:
            started = rec["start"]
        elif "name" in rec:
            results[rec["name"]] = rec
            started = None
        else:
            results["_summary"] = rec
    assert started is None, f"case {started!r} killed the process: {proc.stderr[-3000:]}"
    assert proc.returncode == 0, proc.stderr[-3000:]
    return results


def _v2_array(path: Path, *, shape, chunks, dtype="<f8", compressor=None, filters=None, fill_value=0) -> None:
    path.mkdir(parents=True)
    (path / ".zarray").write_text(json.dumps({
        "zarr_format": 2, "shape": shape, "chunks": chunks, "dtype": dtype, "fill_value": fill_value,
        "order": "C", "compressor": compressor, "filters": filters, "dimension_separator": "."}))
    (path / ".zattrs").write_text(json.dumps({"_ARRAY_DIMENSIONS": [f"d{i}" for i in range(len(shape))]}))


def _v2_store(root: Path, name: str) -> Path:
    store = root / f"{name}.zarr"
    store.mkdir()
    (store / ".zgroup").write_text('{"zarr_format": 2}')
    return store


def _v3_array(path: Path, *, shape, chunks, data_type="float64", codecs=None, fill_value=0.0) -> None:
    path.mkdir(parents=True)
    (path / "zarr.json").write_text(json.dumps({
        "zarr_format": 3, "node_type": "array", "shape": shape, "data_type": data_type,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": fill_value, "codecs": codecs or [{"name": "bytes", "configuration": {"endian": "little"}}],
        "dimension_names": [f"d{i}" for i in range(len(shape))]}))


def _v3_store(root: Path, name: str) -> Path:
    store = root / f"{name}.zarr"
    store.mkdir()
    (store / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group", "attributes": {}}')
    return store


def _chunk(store: Path, key: str, data: bytes) -> None:
    p = store / key
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)


@pytest.fixture(scope="module")
def bomb_stores(tmp_path_factory, pristine):
    """One store per bomb (~2 GiB when decompressed, a few MB on disk) and per huge shape."""
    root = tmp_path_factory.mktemp("bombs")
    big = 2048  # MiB decompressed
    cases: list[tuple[str, str, str]] = []
    expect: dict[str, tuple[type, list[str]]] = {}

    def v2(name, compressor, chunk, *, dtype="<f8", filters=None, chunks=1000, how="all", err=ChunkError, texts=()):
        s = _v2_store(root, name)
        _v2_array(s / "v", shape=[chunks], chunks=[chunks], dtype=dtype, compressor=compressor, filters=filters,
                  fill_value=None if dtype == "|O" else 0)
        _chunk(s, "v/0", chunk)
        cases.append((name, str(s), how))
        expect[name] = (err, [str(s), "v/0", *texts])

    v2("v2 zlib", {"id": "zlib"}, zlib_bomb(big), texts=["more than 8000 bytes"])
    v2("v2 gzip", {"id": "gzip"}, zlib_bomb(big, gzip_header=True), texts=["more than 8000 bytes"])
    v2("v2 bz2", {"id": "bz2"}, multistream(bz2.compress, 512), texts=["more than 8000 bytes"])
    v2("v2 lzma", {"id": "lzma"}, multistream(lzma.compress, 512), texts=["more than 8000 bytes"])
    v2("v2 zstd content size", {"id": "zstd"}, zstd_rle_frame(big * 8, fcs=big << 20), texts=["more than 8000 bytes"])
    v2("v2 zstd streamed", {"id": "zstd"}, zstd_rle_frame(big * 8), texts=["more than 8000 bytes"])
    v2("v2 zstd lying size", {"id": "zstd"}, zstd_rle_frame(8, fcs=1 << 42), texts=["more than 8000 bytes"])
    v2("v2 blosc lying size", {"id": "blosc"}, BOMBS["blosc lying size"][1](), texts=["more than 8000 bytes"])
    v2("v2 lz4 lying size", {"id": "lz4"}, BOMBS["lz4 lying size"][1](), texts=["more than 8000 bytes"])
    v2("v2 zlib filter", None, zlib_bomb(big), filters=[{"id": "zlib"}], texts=["more than"])
    v2("v2 vlen-utf8 bomb", {"id": "zlib"}, zlib_bomb(big), dtype="|O", filters=[{"id": "vlen-utf8"}],
       texts=["more than"])
    v2("v2 vlen-utf8 count lie", None, b"\xff\xff\xff\x7f", dtype="|O", filters=[{"id": "vlen-utf8"}],
       texts=["2147483647 items"])

    def v3(name, codecs, key, chunk, *, data_type="float64", fill=0.0, shape=(1000,), chunks=(1000,), texts=()):
        s = _v3_store(root, name)
        _v3_array(s / "v", shape=list(shape), chunks=list(chunks), data_type=data_type, codecs=codecs, fill_value=fill)
        _chunk(s, f"v/{key}", chunk)
        cases.append((name, str(s), "all"))
        expect[name] = (ChunkError, [str(s), f"v/{key}", *texts])

    le = {"name": "bytes", "configuration": {"endian": "little"}}
    v3("v3 gzip", [le, {"name": "gzip", "configuration": {"level": 1}}], "c/0",
       zlib_bomb(big, gzip_header=True), texts=["more than 8000 bytes"])
    v3("v3 zstd", [le, {"name": "zstd", "configuration": {"level": 1}}], "c/0", zstd_rle_frame(big * 8),
       texts=["more than 8000 bytes"])
    v3("v3 numcodecs.zlib", [le, {"name": "numcodecs.zlib", "configuration": {"level": 1}}], "c/0", zlib_bomb(big),
       texts=["more than 8000 bytes"])
    v3("v3 blosc", [le, {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 1, "shuffle": "noshuffle",
                                                          "typesize": 8, "blocksize": 0}}], "c/0",
       BOMBS["blosc lying size"][1](), texts=["more than 8000 bytes"])
    v3("v3 vlen-utf8 zstd", [{"name": "vlen-utf8"}, {"name": "zstd", "configuration": {"level": 1}}], "c/0",
       zstd_rle_frame(big * 8, fcs=big << 20), data_type="string", fill="", texts=["more than"])
    v3("v3 arrow gzip", [{"name": "gzip", "configuration": {"level": 1}}], "c/0", zlib_bomb(big, gzip_header=True),
       data_type="string", fill="", texts=["more than"])
    zarrs = {"name": "zarrs.vlen", "configuration": {
        "index_data_type": "uint32", "index_location": "start",
        "index_codecs": [le], "data_codecs": [{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 1}}]}}
    index = np.zeros(1001, "<u4").tobytes()
    v3("v3 zarrs.vlen data bomb", [zarrs], "c/0",
       struct.pack("<Q", len(index)) + index + zstd_rle_frame(big * 8), data_type="string", fill="",
       texts=["more than"])
    inner = [le, {"name": "zstd", "configuration": {"level": 1}}]
    shard_cfg = {"name": "sharding_indexed", "configuration": {
        "chunk_shape": [100], "codecs": inner, "index_codecs": [le], "index_location": "end"}}
    bomb = zstd_rle_frame(big * 8)
    idx = np.full((10, 2), 2**64 - 1, "<u8")
    idx[0] = (0, len(bomb))
    v3("v3 sharded inner bomb", [shard_cfg], "c/0", bomb + idx.tobytes(), texts=["more than 800 bytes"])

    # huge declared shapes: opening and reading a slice must stay cheap
    for name, shape, chunks, keys in [
        ("huge v2 1-d, chunks 1000", [10**15], [1000], {"0": np.arange(1000, dtype="<f8").tobytes()}),
        ("huge v2 2-d", [10**8, 10**7], [100, 100], {}),
        ("huge v2 one chunk", [10**15], [10**15], {"0": b"\0" * 80}),
    ]:
        s = _v2_store(root, name.replace(" ", "_"))
        _v2_array(s / "v", shape=shape, chunks=chunks)
        for k, b in keys.items():
            _chunk(s, f"v/{k}", b)
        cases.append((name, str(s), "v"))
        expect[name] = (ChunkError, [str(s), "v/0"]) if "one chunk" in name else (None, [])
    for name, shape, chunks, codecs, keys in [
        ("huge v3 1-d", [10**15], [1000], None, {"c/0": np.arange(1000, dtype="<f8").tobytes()}),
        ("huge v3 one chunk", [10**15], [10**15], None, {"c/0": b"\0" * 80}),
        ("huge v3 string one chunk", [10**15], [10**15], [{"name": "vlen-utf8"}], {"c/0": b"\x01\0\0\0\x01\0\0\0a"}),
        ("huge v3 sharded", [10**15], [10**12],
         [{"name": "sharding_indexed", "configuration": {"chunk_shape": [10**6], "codecs": [le],
                                                         "index_codecs": [le]}}], {}),
        ("huge v3 sharded, 10**12 inner chunks", [10**15], [10**12],
         [{"name": "sharding_indexed", "configuration": {"chunk_shape": [1], "codecs": [le],
                                                         "index_codecs": [le]}}], {}),
        ("huge v3 sharded, one shard", [10**15], [10**12],
         [{"name": "sharding_indexed", "configuration": {"chunk_shape": [10**6], "codecs": [le],
                                                         "index_codecs": [le]}}],
         {"c/0": b"\0" * 16 + b"\xff" * 16 * (10**6 - 1)}),
    ]:
        s = _v3_store(root, name.replace(" ", "_"))
        _v3_array(s / "v", shape=shape, chunks=chunks, codecs=codecs,
                  data_type="string" if "string" in name else "float64", fill_value="" if "string" in name else 0.0)
        for k, b in keys.items():
            _chunk(s, f"v/{k}", b)
        cases.append((name, str(s), "v"))
        expect[name] = {
            "huge v3 1-d": (None, []),
            "huge v3 sharded": (None, []),  # no shard written: fill values, cheaply
            "huge v3 one chunk": (ChunkError, [str(s), "v/c/0"]),
            "huge v3 string one chunk": (ChunkError, [str(s), "v/c/0"]),
            "huge v3 sharded, 10**12 inner chunks": (UnsupportedError, [str(s), "v/zarr.json", "inner chunks"]),
            "huge v3 sharded, one shard": (ChunkError, [str(s), "v/c/0"]),
        }[name]
    return cases, expect, pristine["nczarr-D"]



def _check_limited(cases, expect, warmup) -> None:
    results = run_limited(cases, warmup)
    failures = []
    for name, _, _ in cases:
        res = results[name]
        err, texts = expect[name]
        if err is None:
            if res["cls"] is not None:
                failures.append(f"{name}: expected data, got {res['cls']}: {res['msg']}")
        elif not res.get("zs"):
            failures.append(f"{name}: expected {err.__name__}, got {res['cls']}: {res['msg']}")
        else:
            if not issubclass(getattr(errors, res["cls"]), err):
                failures.append(f"{name}: expected {err.__name__}, got {res['cls']}: {res['msg']}")
            missing = [t for t in texts if t not in res["msg"]]
            if missing:
                failures.append(f"{name}: message lacks {missing}: {res['msg']}")
        if res["seconds"] > 15:
            failures.append(f"{name}: took {res['seconds']:.1f} s")
    assert not failures, "\n".join(failures)
    # nothing close to a bomb was ever resident
    assert results["_summary"]["maxrss_mib"] < results["_summary"]["vm_mib"] + HEADROOM / 2**20


def test_bombs_and_huge_shapes_in_a_memory_limited_process(bomb_stores):
    cases, expect, warmup = bomb_stores
    _check_limited(cases, expect, warmup)


def test_v2_bomb_is_refused_at_the_chunk_size(tmp_path, monkeypatch):
    """With the default limit (1 GiB), a v2 bomb must stop at the chunk's own size (8000 bytes)."""
    monkeypatch.delenv("XR_ZSTRINGS_MAX_CHUNK_BYTES", raising=False)
    store = _v2_store(tmp_path, "b")
    _v2_array(store / "v", shape=[1000], chunks=[1000], compressor={"id": "zlib"})
    _chunk(store, "v/0", zlib_bomb(32))
    with pytest.raises(ChunkError, match="more than 8000 bytes"):
        open_all(store)
