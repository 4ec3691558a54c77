"""Sharded Zarr v3 arrays read by parts (issue 29): the shard index first (one ranged request per
shard), then only the inner chunks a selection touches, their byte ranges merged; a shard the
selection covers is fetched whole, as zarr-python fetches it.

Stores are written by zarr-python (the installed one: 3.4.x, 3.1.x in CI's py311 job) or, for the
layouts it cannot write (zarrs.vlen, the Arrow layout), by our own encoder; zarrs' golden store for
the optional type. ``CountingStore`` (a zarr-python store) records every read; on the local and S3
paths, which call the file system and obstore directly, ``ZStore``'s reads are recorded instead
(and on S3 the proxy counts what went over the wire). Values are compared with zarr-python's.
"""

from __future__ import annotations

import json
import math
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.abc.store import RangeByteRequest, SuffixByteRequest
from zarr.storage import LocalStore, WrapperStore

from xr_zstrings.codecs.sharding import coalesce
from xr_zstrings.codecs.v3 import V3Pipeline
from xr_zstrings.errors import ChunkError
from xr_zstrings.formats.zarr3 import parse_node_v3
from xr_zstrings.io.zstore import ZStore

N, SHARD, INNER = 20_000, 2_000, 50  # 10 shards of 40 inner chunks
SEL = slice(4_321, 4_521)  # 1% of the array, inner chunks 86..90 of shard 2 (not aligned)
LE = {"name": "bytes", "configuration": {"endian": "little"}}
INDEX_CODECS = [LE, {"name": "crc32c"}]


@pytest.fixture(params=["C", "python"])
def kernels(request, monkeypatch):
    """Both read paths: the kernels' (read_into) and the pure-Python fallback (read)."""
    if request.param == "python":
        monkeypatch.setenv("XR_ZSTRINGS_NO_EXT", "1")
    return request.param


class CountingStore(WrapperStore):
    """A zarr-python store recording each read: (key, byte range or None, bytes returned)."""

    def __init__(self, store: Any) -> None:
        super().__init__(store)
        self.reads: list[tuple[str, Any, int]] = []

    async def get(self, key: str, prototype: Any = None, byte_range: Any = None) -> Any:
        buf = await self._store.get(key, prototype, byte_range)
        self.reads.append((key, byte_range, 0 if buf is None else len(buf)))
        return buf

    def chunk_reads(self, array: str) -> list[tuple[str, Any, int]]:
        return [r for r in self.reads if r[0].startswith(f"{array}/c/")]


def _labels(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    words = np.array(["a", "é", "中文", "😀", "label", "x" * 30, ""], dtype=object)
    return np.array([f"{w}-{i}" for i, w in enumerate(words[rng.integers(0, len(words), n)])], dtype=object)


def _chunk_bytes(path: Path, array: str) -> int:
    return sum(f.stat().st_size for f in (path / array / "c").rglob("*") if f.is_file())


def _zarr_python_array(path: Path, case: str) -> np.ndarray:
    """Write array "v" of N values with zarr-python, sharded as ``case`` says; return the values."""
    from zarr.codecs import ShardingCodec, VLenUTF8Codec, ZstdCodec

    values: np.ndarray = _labels(N)
    kw: dict[str, Any] = {"shards": (SHARD,), "chunks": (INNER,)}
    if case == "vlen-utf8":
        kw.update(dtype=str, compressors=None)
    elif case == "vlen-utf8+zstd":
        kw.update(dtype=str)  # zarr-python's default compressor: zstd
    elif case == "fixed_length_utf32":
        values = values.astype("U40")
        kw.update(dtype=values.dtype, fill_value="")
    elif case == "int32":
        values = np.arange(N, dtype="int32") * 3
        kw.update(dtype="int32", fill_value=0)
    elif case == "index-start":
        kw = {"chunks": (SHARD,), "dtype": str, "compressors": None, "serializer": ShardingCodec(
            chunk_shape=(INNER,), codecs=[VLenUTF8Codec(), ZstdCodec()], index_location="start")}
    elif case == "nested":
        kw = {"chunks": (SHARD,), "dtype": str, "compressors": None, "serializer": ShardingCodec(
            chunk_shape=(INNER,), codecs=[ShardingCodec(chunk_shape=(10,), codecs=[VLenUTF8Codec()])])}
    g = zarr.open_group(path, mode="a", zarr_format=3)
    a = g.create_array("v", shape=(N,), dimension_names=["x"], **kw)
    a[:] = values
    return values


@pytest.mark.parametrize("case", ["vlen-utf8", "vlen-utf8+zstd", "fixed_length_utf32", "int32",
                                  "index-start", "nested"])
def test_one_percent_of_a_zarr_python_array_reads_under_two_percent(tmp_path, case, kernels):
    """1% of the values: the shard's index (one ranged request), then one merged range of the
    inner chunks touched, at most 2% of the array's bytes; the values zarr-python reads. Whole
    shards are fetched whole (one request each, no range)."""
    values = _zarr_python_array(tmp_path, case)
    total = _chunk_bytes(tmp_path, "v")
    want = zarr.open_array(tmp_path / "v", mode="r")[SEL]
    store = CountingStore(LocalStore(tmp_path, read_only=True))
    ds = xr.open_dataset(store, engine="zstrings")
    store.reads.clear()
    got = ds["v"][SEL].values
    assert got.tolist() == want.tolist() == values[SEL].tolist()
    reads = store.chunk_reads("v")
    assert {k for k, _, _ in reads} == {"v/c/2"}, reads
    index, data = reads
    assert isinstance(index[1], SuffixByteRequest if case != "index-start" else RangeByteRequest), reads
    assert isinstance(data[1], RangeByteRequest), reads
    assert data[2] <= 0.02 * total, (data[2], total)
    assert index[2] == 40 * 16 + 4  # (offset, nbytes) per inner chunk + crc32c

    store.reads.clear()
    assert ds["v"][2 * SHARD : 4 * SHARD].values.tolist() == values[2 * SHARD : 4 * SHARD].tolist()
    assert sorted((k, r) for k, r, _ in store.chunk_reads("v")) == [("v/c/2", None), ("v/c/3", None)]


def _write_ours(path: Path, values: np.ndarray, inner_codecs: list, *, data_type: str = "string",
                fill: Any = "", index_location: str = "end") -> None:
    """A sharded 1-D array "v" written with our own V3 encoder (zarr-python cannot write these
    layouts); inner chunks and shards holding only the fill value are left out, as zarr-python
    leaves them."""
    codecs = [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [INNER], "codecs": inner_codecs, "index_codecs": INDEX_CODECS,
        "index_location": index_location}}]
    (path / "v").mkdir(parents=True)
    (path / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}}))
    doc = {"zarr_format": 3, "node_type": "array", "shape": [len(values)], "data_type": data_type,
           "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [SHARD]}},
           "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
           "fill_value": fill, "codecs": codecs, "dimension_names": ["x"]}
    (path / "v" / "zarr.json").write_text(json.dumps(doc))
    meta = parse_node_v3(doc, path="/v")
    pipe = V3Pipeline.from_metadata(list(meta.codecs), data_type=meta.data_type, dtype=meta.dtype,
                                    chunk_shape=meta.chunks, fill_value=meta.fill_value)
    for i in range(math.ceil(len(values) / SHARD)):
        block = np.full(SHARD, fill, dtype=object)
        part = values[i * SHARD : (i + 1) * SHARD]
        block[: len(part)] = part
        if (block != fill).any():
            (path / "v" / "c").mkdir(exist_ok=True)
            (path / "v" / "c" / str(i)).write_bytes(pipe.encode(block))


ZARRS_VLEN = {"name": "zarrs.vlen", "configuration": {
    "index_data_type": "uint32", "index_location": "start", "index_codecs": [LE],
    "data_codecs": [{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 1}}]}}


@pytest.mark.parametrize("layout", ["arrow", "zarrs.vlen"])
def test_layouts_zarr_python_cannot_write_read_by_parts(tmp_path, layout, kernels):
    """The Arrow layout and zarrs.vlen inside shards: 1% reads under 2% of the bytes; inner chunks
    left out of a shard and a shard never written read as the fill value, and cost no data
    request (a missing shard: its index request only)."""
    values = _labels(N, seed=1)
    values[4_400:4_500] = ""  # inner chunks 88, 89 of shard 2 hold only the fill: left out
    values[6_000:8_000] = ""  # shard 3: never written
    inner = [{"name": "bytes"}] if layout == "arrow" else [ZARRS_VLEN]
    _write_ours(tmp_path, values, inner, index_location="start" if layout == "arrow" else "end")
    assert not (tmp_path / "v" / "c" / "3").exists()
    total = _chunk_bytes(tmp_path, "v")
    store = CountingStore(LocalStore(tmp_path, read_only=True))
    ds = xr.open_dataset(store, engine="zstrings")
    assert ds["v"].encoding["layout"] == layout
    store.reads.clear()
    assert ds["v"][SEL].values.tolist() == values[SEL].tolist()
    reads = store.chunk_reads("v")
    assert len(reads) == 2 and reads[1][2] <= 0.02 * total, reads
    store.reads.clear()
    assert ds["v"][4_400:4_500].values.tolist() == [""] * 100  # left out: the index alone
    assert [r[1] is not None for r in store.chunk_reads("v")] == [True]
    store.reads.clear()
    assert ds["v"][6_500:6_600].values.tolist() == [""] * 100  # no shard: its index request only
    assert store.chunk_reads("v") == [("v/c/3", store.chunk_reads("v")[0][1], 0)]
    assert ds["v"].values.tolist() == values.tolist()


def test_zarrs_optional_golden_store_by_parts(kernels):
    """zarrs' optional type in shards (golden store: shards of 6, inner chunks of 2): a selection
    of one inner chunk reads it alone; a left-out inner chunk and a missing shard are missing."""
    golden = Path(__file__).parent.parent / "golden_chunks" / "zarrs_optional" / "optional.zarr"
    expected = json.loads((golden.parent / "expected.json").read_text())["string_sharded_packbits_vlenutf8"]
    store = CountingStore(LocalStore(golden, read_only=True))
    ds = xr.open_dataset(store, engine="zstrings")

    def plain(values: np.ndarray) -> list:
        return [None if isinstance(v, float) else v for v in values.tolist()]

    assert plain(ds["string_sharded_packbits_vlenutf8"].values) == expected
    for sel in (slice(0, 2), slice(2, 4), slice(4, 5), slice(12, 14)):
        store.reads.clear()
        assert plain(ds["string_sharded_packbits_vlenutf8"][sel].values) == expected[sel]
        ranges = [r for _, r, _ in store.chunk_reads("string_sharded_packbits_vlenutf8")]
        assert all(r is not None for r in ranges) and len(ranges) <= 2, ranges


def test_two_dimensions_edge_shards_and_morton_order(tmp_path):
    """2-D shards (zarr-python writes inner chunks in Morton order): a box reads its shard's index
    and the inner chunks it touches; a box covering an edge shard's part of the array fetches that
    shard whole."""
    values = _labels(58 * 40, seed=2).reshape(58, 40)
    g = zarr.open_group(tmp_path, mode="w", zarr_format=3)
    a = g.create_array("v", shape=values.shape, chunks=(5, 5), shards=(20, 20), dtype=str,
                       compressors=None, dimension_names=["y", "x"])
    a[:] = values
    store = CountingStore(LocalStore(tmp_path, read_only=True))
    ds = xr.open_dataset(store, engine="zstrings")
    for box in [(slice(22, 27), slice(3, 9)), (slice(0, 58), slice(7, 8)), (slice(40, 58), slice(20, 40)),
                (slice(57, 58), slice(0, 40))]:
        store.reads.clear()
        assert ds["v"][box].values.tolist() == values[box].tolist(), box
        if box == (slice(40, 58), slice(20, 40)):  # the edge shard (2, 1): all of it in the array
            assert [(k, r) for k, r, _ in store.chunk_reads("v")] == [("v/c/2/1", None)]
        else:
            assert all(r is not None for _, r, _ in store.chunk_reads("v")), store.chunk_reads("v")


def test_zero_dimensional_sharded_arrays(tmp_path):
    """zarr-python shards a 0-d array too (one shard of one inner chunk): read whole, as before the
    partial reads (this read failed then: the scalar's region did not match the shard's shape)."""
    if tuple(int(x) for x in zarr.__version__.split(".")[:2]) < (3, 2):
        pytest.skip("zarr-python 3.1 cannot write a 0-d sharded array (IndexError in its shard index)")
    g = zarr.open_group(tmp_path, mode="w", zarr_format=3)
    g.create_array("s", shape=(), chunks=(), shards=(), dtype=str, fill_value="")[()] = "hello"
    g.create_array("i", shape=(), chunks=(), shards=(), dtype="int32", fill_value=0)[()] = 7
    ds = xr.open_dataset(tmp_path, engine="zstrings")
    assert ds["s"].values.tolist() == "hello" and ds["i"].values.tolist() == 7


def _spy_ranges(monkeypatch) -> list[tuple[str, int, int | None, int]]:
    """Record what ZStore.get_ranges is asked and what it returns (the local and S3 paths)."""
    seen: list[tuple[str, int, int | None, int]] = []
    real = ZStore.get_ranges

    def spy(self, ranges, **kw):
        try:
            out = real(self, ranges, **kw)
        except Exception:
            seen.extend((k, a, b, -2) for k, a, b in ranges)  # (-2: refused)
            raise
        seen.extend((k, a, b, -1 if r is None else len(memoryview(r.data))) for (k, a, b), r in zip(ranges, out))
        return out

    monkeypatch.setattr(ZStore, "get_ranges", spy)
    return seen


def test_local_reads_by_parts_keep_the_index_and_notice_a_replaced_shard(tmp_path, monkeypatch):
    """On a local directory (read with the file system directly) the index is read once per open;
    a shard zarr-python rewrites after that is noticed (the file is a new one) and read again: the
    new values, never the old index's ranges into the new bytes."""
    values = _zarr_python_array(tmp_path, "vlen-utf8+zstd")
    total = _chunk_bytes(tmp_path, "v")
    seen = _spy_ranges(monkeypatch)
    ds = xr.open_dataset(tmp_path, engine="zstrings")
    assert ds["v"][SEL].values.tolist() == values[SEL].tolist()
    (index, *data) = seen
    assert index[:3] == ("v/c/2", -(40 * 16 + 4), None) and len(data) == 1 and data[0][3] <= 0.02 * total
    seen.clear()
    assert ds["v"][4_900:4_950].values.tolist() == values[4_900:4_950].tolist()
    assert [s[0] for s in seen] == ["v/c/2"] and seen[0][1] >= 0  # the kept index: no index read
    new = values.copy()
    new[4_000:6_000] = np.array([f"{v}-new-and-longer" for v in values[4_000:6_000]], dtype=object)
    zarr.open_array(tmp_path / "v", mode="r+")[4_000:6_000] = new[4_000:6_000]
    seen.clear()
    assert ds["v"][4_900:4_950].values.tolist() == new[4_900:4_950].tolist()
    assert [(s[1] < 0, s[3] == -2) for s in seen] == [(False, True), (True, False), (False, False)]
    # a fresh open reads the index again
    seen.clear()
    assert xr.open_dataset(tmp_path, engine="zstrings")["v"][SEL].values.tolist() == new[SEL].tolist()
    assert [s[1] < 0 for s in seen] == [True, False]


def test_a_selection_never_mixes_two_versions_of_a_shard(tmp_path, monkeypatch):
    """A shard replaced while one selection reads its parts in several groups (after the first
    group's ranges, before the second's) is an error naming it, not a mix of two versions; the
    selection read again is the new version's."""
    from xr_zstrings.read.chunked_v3 import ChunkedArrayV3

    values = _zarr_python_array(tmp_path, "vlen-utf8")
    monkeypatch.setattr(ChunkedArrayV3, "_group_size", lambda self, shape=None: 2)  # 2 inner chunks a group
    ds = xr.open_dataset(tmp_path, engine="zstrings", decode_threads=1)
    shard = tmp_path / "v" / "c" / "2"
    real = ZStore.get_ranges
    data_reads = []

    def replace_after_the_first_group(self, ranges, **kw):
        out = real(self, ranges, **kw)
        if ranges[0][1] >= 0:  # (not an index read)
            data_reads.append(ranges)
            if len(data_reads) == 1:  # the same bytes in a new file: another version to the reader
                shard.with_name("new").write_bytes(shard.read_bytes())
                shard.with_name("new").replace(shard)
        return out

    monkeypatch.setattr(ZStore, "get_ranges", replace_after_the_first_group)
    with pytest.raises(ChunkError, match=r"v/c/2.*replaced by another writer while this selection read it"):
        ds["v"][4_010:4_190].values  # inner chunks 80..83 of shard 2: two groups
    assert ds["v"][4_010:4_190].values.tolist() == values[4_010:4_190].tolist()


def test_an_open_array_pickles_without_its_indexes(tmp_path):
    """A dask worker's copy of the array starts with no index (they stay in the process that read
    them) and reads the same values."""
    values = _zarr_python_array(tmp_path, "vlen-utf8")
    ds = xr.open_dataset(tmp_path, engine="zstrings")
    assert ds["v"][SEL].values.tolist() == values[SEL].tolist()
    raw = ds["v"].variable._data
    while not hasattr(raw, "data") or not hasattr(raw.data, "raw"):  # xarray's lazy wrappers
        raw = raw.array
    chunked = raw.data.raw
    assert chunked._indexes.get("v/c/2") is not None
    copy = pickle.loads(pickle.dumps(chunked))
    assert copy._indexes.get("v/c/2") is None
    got = copy.read((SEL,))
    assert got.tolist() == values[SEL].tolist()
    assert ds["v"].chunk({"x": 5_000}).values.tolist() == values.tolist()


def test_corrupt_index_entries_on_a_partial_read(tmp_path):
    """An index entry pointing beyond the shard is a ChunkError naming the shard, on the local
    path (the file's size is known) and through a zarr-python store (the range comes back short)."""
    _zarr_python_array(tmp_path, "vlen-utf8")
    shard = tmp_path / "v" / "c" / "2"
    raw = bytearray(shard.read_bytes())
    idx = np.frombuffer(bytes(raw[-(40 * 16 + 4) : -4]), "<u8").reshape(40, 2).copy()
    idx[7, 0] = len(raw) + 10  # inner chunk 7 (87 of the array): after the end of the shard
    index = V3Pipeline.from_metadata(INDEX_CODECS, data_type="uint64", dtype="<u8", chunk_shape=(40, 2))
    shard.write_bytes(bytes(raw[: -(40 * 16 + 4)]) + index.encode(idx))
    for target in (tmp_path, CountingStore(LocalStore(tmp_path, read_only=True))):
        ds = xr.open_dataset(target, engine="zstrings")
        with pytest.raises(ChunkError, match=r"v/c/2.*entry 7 .*beyond"):
            ds["v"][SEL].values


def test_an_inner_chunk_beyond_the_chunk_limit_is_never_fetched(tmp_path, monkeypatch):
    """Bounded reads by parts: an index entry larger than XR_ZSTRINGS_MAX_CHUNK_BYTES is refused
    before any of its bytes are asked for (the index read alone)."""
    from xr_zstrings.codecs.bounded import MAX_CHUNK_BYTES_ENV

    _zarr_python_array(tmp_path, "vlen-utf8")
    store = CountingStore(LocalStore(tmp_path, read_only=True))
    ds = xr.open_dataset(store, engine="zstrings")
    monkeypatch.setenv(MAX_CHUNK_BYTES_ENV, "700")  # an inner chunk holds 1,000-2,000 bytes
    store.reads.clear()
    with pytest.raises(ChunkError, match=r"v/c/2.*beyond the 700-byte chunk limit"):
        ds["v"][SEL].values
    assert [type(r).__name__ for _, r, _ in store.chunk_reads("v")] == ["SuffixByteRequest"]


def test_coalesce_merges_close_spans_within_the_cap():
    spans = [(100, 200), (0, 50), (230, 300), (5_000, 5_100), (5_100, 9_000)]
    assert coalesce(spans, max_gap=40, max_bytes=1_000) == [(0, 50, [1]), (100, 300, [0, 2]),
                                                             (5_000, 5_100, [3]), (5_100, 9_000, [4])]
    assert coalesce(spans, max_gap=10_000, max_bytes=10_000) == [(0, 9_000, [1, 0, 2, 3, 4])]
    assert coalesce([], 1, 1) == []


@pytest.fixture
def s3_sharded(s3, tmp_path):
    """A zarr-python sharded store (vlen-utf8, zstd) on the moto server; (URL, values, bytes)."""
    values = _zarr_python_array(tmp_path / "src", "vlen-utf8+zstd")
    url = s3.upload(tmp_path / "src", s3.bucket("shards"), tmp_path.name)
    return url, values, _chunk_bytes(tmp_path / "src", "v")


def test_s3_one_percent_through_the_wire(s3, s3_sharded, monkeypatch):
    """On S3 (moto, read through obstore): 1% is the index and one ranged GET, under 2% of the
    array's bytes on the wire (the proxy counts them, headers included); the index is kept for
    the open; a shard replaced after that is refused by the server (If-Match) and read again."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent.parent))
    from latency_proxy import LatencyProxy

    url, values, total = s3_sharded
    proxy = LatencyProxy(s3.host, delay=0).start()
    try:
        ds = xr.open_dataset(url, engine="zstrings", storage_options=s3.options(endpoint_url=proxy.endpoint))
        proxy.reset()
        assert ds["v"][SEL].values.tolist() == values[SEL].tolist()
        assert proxy.requests == 2 and proxy.max_depth == 2
        assert proxy.bytes_down <= 0.02 * total + 40 * 16 + 4 + 2 * 1024, (proxy.bytes_down, total)
        proxy.reset()
        assert ds["v"][4_900:4_950].values.tolist() == values[4_900:4_950].tolist()
        assert proxy.requests == 1  # the index kept
        # another writer replaces shard 2: the kept index's ranges are refused, read again
        import obstore

        bucket, key = url[len("s3://"):].split("/", 1)
        new = values.copy()
        new[4_000:6_000] = np.array(["x" * (i % 50) for i in range(2_000)], dtype=object)
        other = zarr.open_array(zarr.storage.ObjectStore(s3.obstore(bucket)), path=f"{key}/v", mode="r+")
        other[4_000:6_000] = new[4_000:6_000]
        assert obstore.head(s3.obstore(bucket), f"{key}/v/c/2")["size"] > 0
        proxy.reset()
        seen = _spy_ranges(monkeypatch)
        assert ds["v"][4_900:4_950].values.tolist() == new[4_900:4_950].tolist()
        assert [(s[1] < 0, s[3] == -2) for s in seen] == [(False, True), (True, False), (False, False)]
        assert proxy.requests == 3  # refused (412), the index again, the new part
    finally:
        proxy.stop()


def test_s3_missing_shard_and_whole_read(s3, s3_sharded):
    """A shard deleted from S3 reads as the fill value; a whole read fetches each shard whole."""
    import obstore

    url, values, _ = s3_sharded
    bucket, key = url[len("s3://"):].split("/", 1)
    obstore.delete(s3.obstore(bucket), f"{key}/v/c/5")
    ds = xr.open_dataset(url, engine="zstrings", storage_options=s3.options())
    want = values.copy()
    want[5 * SHARD : 6 * SHARD] = ""
    assert ds["v"][10_100:10_200].values.tolist() == [""] * 100
    assert ds["v"].values.tolist() == want.tolist()
