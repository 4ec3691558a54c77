"""Write the zarrs.optional golden stores in this directory (see README.md).

Independent of xr_zstrings: every chunk is framed with struct/numpy exactly as zarrs' documented
encoding says (no Python library writes zarrs.optional). numcodecs' own VLenUTF8/VLenBytes encode
the vlen-utf8/vlen-bytes data parts; gzip is Python's gzip module (zarr v3's gzip codec).
"""
import gzip
import json
import os
import shutil
import struct

import numcodecs
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def packbits(mask, padding="none"):
    """zarr-extensions packbits for bool: element i is bit i%8 (least significant first) of byte i//8."""
    bits = np.packbits(np.asarray(mask, dtype=bool).reshape(-1), bitorder="little").tobytes()
    pad = bytes([(-np.asarray(mask).size) % 8])
    return pad + bits if padding == "first_byte" else bits + pad if padding == "last_byte" else bits


def zarrs_vlen_start(values):
    """zarrs.vlen with index_location "start", uint32 index and plain bytes index/data codecs."""
    data = b"".join(v.encode() for v in values)
    offs = np.cumsum([0] + [len(v.encode()) for v in values]).astype("<u4").tobytes()
    return struct.pack("<Q", len(offs)) + offs + data


# per store: data type, codec list, fill value, chunk shape, shape, values (None = missing),
# the chunk indices never written, and how to encode (mask, data) of one chunk
def enc_packbits_vlenutf8(mask, present):
    return packbits(mask), numcodecs.VLenUTF8().encode(np.array(present, dtype=object))


def enc_bytesmask_zarrsvlen_gzip(mask, present):
    return (gzip.compress(np.asarray(mask, dtype=np.uint8).tobytes(), mtime=0),
            gzip.compress(zarrs_vlen_start(present), mtime=0))


def enc_packbits_first_vlenbytes(mask, present):
    return packbits(mask, "first_byte"), numcodecs.VLenBytes().encode(np.array(present, dtype=object))


STORES = {
    # 1-D strings, packbits mask, vlen-utf8 data, fill null; chunk 3 never written
    "string_packbits_vlenutf8": {
        "data_type": {"name": "zarrs.optional", "configuration": {"name": "string", "configuration": {}}},
        "codecs": [{"name": "zarrs.optional", "configuration": {
            "mask_codecs": [{"name": "packbits", "configuration": {}}],
            "data_codecs": [{"name": "vlen-utf8", "configuration": {}}]}}],
        "fill_value": None, "shape": [12], "chunks": [3],
        "values": ["a", None, "é€", None, None, None, "", "x", None, None, None, None],
        "unwritten": [(3,)], "encode": enc_packbits_vlenutf8},
    # 2-D strings (C-order mask), a bytes (one byte per element) mask with gzip, zarrs.vlen data with
    # gzip, an outer gzip too; the draft's name "optional" for the data type and the codec;
    # fill ["N/A"] (a present value) for the never-written chunk (1, 1)
    "string2d_bytesmask_zarrsvlen_gzip": {
        "data_type": {"name": "optional", "configuration": {"name": "string"}},
        "codecs": [{"name": "optional", "configuration": {
            "mask_codecs": [{"name": "bytes"}, {"name": "gzip", "configuration": {"level": 5}}],
            "data_codecs": [{"name": "zarrs.vlen", "configuration": {
                "index_data_type": "uint32", "index_location": "start",
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                "data_codecs": [{"name": "bytes"}]}},
                {"name": "gzip", "configuration": {"level": 5}}]}},
            {"name": "gzip", "configuration": {"level": 1}}],
        "fill_value": ["N/A"], "shape": [4, 4], "chunks": [2, 2],
        "values": [["a", None, "b", "c"],
                [None, "dé", None, None],
                [None, None, "N/A", "N/A"],
                [None, None, "N/A", "N/A"]],
        "unwritten": [(1, 1)], "encode": enc_bytesmask_zarrsvlen_gzip, "outer_gzip": True},
    # bytes, packbits with a first_byte padding count, vlen-bytes data; chunk 1 all missing
    # (no data bytes at all), fill null
    "bytes_packbits_vlenbytes": {
        "data_type": {"name": "zarrs.optional", "configuration": {"name": "bytes", "configuration": {}}},
        "codecs": [{"name": "zarrs.optional", "configuration": {
            "mask_codecs": [{"name": "packbits", "configuration": {"padding_encoding": "first_byte"}}],
            "data_codecs": [{"name": "vlen-bytes", "configuration": {}}]}}],
        "fill_value": None, "shape": [10], "chunks": [5],
        "values": [b"\x00\xff", None, b"", b"abc", None, None, None, None, None, None],
        "unwritten": [], "encode": enc_packbits_first_vlenbytes},
    # sharded (zarrs' sharding_indexed around zarrs.optional, index bytes + crc32c at the end as
    # zarrs writes it): shards of 6, inner chunks of 2; inner chunk 1 is left out of shard 0 (index
    # entry 2**64-1: never written), inner chunk 2 is all missing (written, no data part), shard 2
    # never written; fill null, so the left-out inner chunk and the missing shard are missing
    "string_sharded_packbits_vlenutf8": {
        "data_type": {"name": "zarrs.optional", "configuration": {"name": "string", "configuration": {}}},
        "codecs": [{"name": "zarrs.optional", "configuration": {
            "mask_codecs": [{"name": "packbits", "configuration": {}}],
            "data_codecs": [{"name": "vlen-utf8", "configuration": {}}]}}],
        "fill_value": None, "shape": [18], "chunks": [2], "shard": [6],
        "values": ["a", None, None, None, None, None, "é", "", "x", None, "q", "r",
                None, None, None, None, None, None],
        "unwritten": [(1,), (6,), (7,), (8,)], "encode": enc_packbits_vlenutf8},
    # the same with a present fill value: the left-out inner chunk 4 reads as "N/A" (zarrs' fill)
    "string_sharded_fill": {
        "data_type": {"name": "zarrs.optional", "configuration": {"name": "string", "configuration": {}}},
        "codecs": [{"name": "zarrs.optional", "configuration": {
            "mask_codecs": [{"name": "packbits", "configuration": {}}],
            "data_codecs": [{"name": "vlen-utf8", "configuration": {}}]}}],
        "fill_value": ["N/A"], "shape": [12], "chunks": [2], "shard": [6],
        "values": ["a", None, "b", "c", None, "d", "e", "f", "N/A", "N/A", None, "g"],
        "unwritten": [(4,)], "encode": enc_packbits_vlenutf8},
}

_U64_MAX = 2**64 - 1


def shard_bytes(store, sidx):
    """One shard: its written inner chunks in C order, then the index (offset, nbytes) per inner
    chunk through bytes (little endian) + crc32c; a left-out inner chunk is (2**64-1, 2**64-1)."""
    per = [s // c for s, c in zip(store["shard"], store["chunks"])]
    body, index = b"", []
    for inner in np.ndindex(*per):
        idx = tuple(si * p + i for si, p, i in zip(sidx, per, inner))
        if idx in store["unwritten"]:
            index += [_U64_MAX, _U64_MAX]
            continue
        raw = chunk(store, idx)
        index += [len(body), len(raw)]
        body += raw
    if all(v == _U64_MAX for v in index):
        return None  # zarrs writes no shard whose inner chunks are all left out
    idx_bytes = np.array(index, "<u8").tobytes()
    return body + idx_bytes + np.asarray(numcodecs.CRC32C().encode(idx_bytes)).tobytes()[len(idx_bytes):]


def chunk(store, idx):
    vals = np.empty(store["shape"], dtype=object)
    vals[...] = _nested(store["values"], store["shape"])
    box = tuple(slice(i * c, (i + 1) * c) for i, c in zip(idx, store["chunks"]))
    block = vals[box]
    mask = np.array([v is not None for v in block.reshape(-1)]).reshape(block.shape)
    present = [v for v in block.reshape(-1) if v is not None]
    mb, db = store["encode"](mask, present)
    if not present:
        db = b""  # zarrs encodes no data when nothing is present
    raw = struct.pack("<QQ", len(mb), len(db)) + mb + db
    return gzip.compress(raw, mtime=0) if store.get("outer_gzip") else raw


def _nested(values, shape):
    out = np.empty(len(values) if len(shape) == 1 else shape, dtype=object)
    if len(shape) == 1:
        for i, v in enumerate(values):
            out[i] = v
    else:
        for i, row in enumerate(values):
            for j, v in enumerate(row):
                out[i, j] = v
    return out


def main():
    expected = {}
    root = os.path.join(HERE, "optional.zarr")  # one group holding every array
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    with open(os.path.join(root, "zarr.json"), "w") as f:
        json.dump({"zarr_format": 3, "node_type": "group", "attributes": {}}, f, indent=2)
    for name, st in STORES.items():
        path = os.path.join(root, name)
        os.makedirs(path)
        codecs, grid_chunks = st["codecs"], st["chunks"]
        if "shard" in st:
            codecs, grid_chunks = [{"name": "sharding_indexed", "configuration": {
                "chunk_shape": st["chunks"], "codecs": st["codecs"],
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                                 {"name": "crc32c"}],
                "index_location": "end"}}], st["shard"]
        meta = {"zarr_format": 3, "node_type": "array", "shape": st["shape"], "data_type": st["data_type"],
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": grid_chunks}},
                "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
                "fill_value": st["fill_value"], "codecs": codecs, "attributes": {},
                "dimension_names": [f"{name}_{d}" for d in "yx"[-len(st["shape"]):]]}
        with open(os.path.join(path, "zarr.json"), "w") as f:
            json.dump(meta, f, indent=2)
        grid = [-(-n // c) for n, c in zip(st["shape"], grid_chunks)]
        for idx in np.ndindex(*grid):
            data = shard_bytes(st, idx) if "shard" in st else None if idx in st["unwritten"] else chunk(st, idx)
            if data is None:
                continue
            key = os.path.join(path, "c", *map(str, idx))
            os.makedirs(os.path.dirname(key), exist_ok=True)
            with open(key, "wb") as f:
                f.write(data)
        expected[name] = [v if not isinstance(v, bytes) else {"bytes": v.decode("latin-1")}
                          for v in _flat(st["values"])]
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, ensure_ascii=False)
        f.write("\n")


def _flat(values):
    return [v for row in values for v in row] if values and isinstance(values[0], list) else list(values)


if __name__ == "__main__":
    main()
