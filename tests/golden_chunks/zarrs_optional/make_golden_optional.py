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
    "string_packbits_vlenutf8": dict(
        data_type={"name": "zarrs.optional", "configuration": {"name": "string", "configuration": {}}},
        codecs=[{"name": "zarrs.optional", "configuration": {
            "mask_codecs": [{"name": "packbits", "configuration": {}}],
            "data_codecs": [{"name": "vlen-utf8", "configuration": {}}]}}],
        fill_value=None, shape=[12], chunks=[3],
        values=["a", None, "é€", None, None, None, "", "x", None, None, None, None],
        unwritten=[(3,)], encode=enc_packbits_vlenutf8),
    # 2-D strings (C-order mask), a bytes (one byte per element) mask with gzip, zarrs.vlen data with
    # gzip, an outer gzip too; the draft's name "optional" for the data type and the codec;
    # fill ["N/A"] (a present value) for the never-written chunk (1, 1)
    "string2d_bytesmask_zarrsvlen_gzip": dict(
        data_type={"name": "optional", "configuration": {"name": "string"}},
        codecs=[{"name": "optional", "configuration": {
            "mask_codecs": [{"name": "bytes"}, {"name": "gzip", "configuration": {"level": 5}}],
            "data_codecs": [{"name": "zarrs.vlen", "configuration": {
                "index_data_type": "uint32", "index_location": "start",
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                "data_codecs": [{"name": "bytes"}]}},
                {"name": "gzip", "configuration": {"level": 5}}]}},
            {"name": "gzip", "configuration": {"level": 1}}],
        fill_value=["N/A"], shape=[4, 4], chunks=[2, 2],
        values=[["a", None, "b", "c"],
                [None, "dé", None, None],
                [None, None, "N/A", "N/A"],
                [None, None, "N/A", "N/A"]],
        unwritten=[(1, 1)], encode=enc_bytesmask_zarrsvlen_gzip, outer_gzip=True),
    # bytes, packbits with a first_byte padding count, vlen-bytes data; chunk 1 all missing
    # (no data bytes at all), fill null
    "bytes_packbits_vlenbytes": dict(
        data_type={"name": "zarrs.optional", "configuration": {"name": "bytes", "configuration": {}}},
        codecs=[{"name": "zarrs.optional", "configuration": {
            "mask_codecs": [{"name": "packbits", "configuration": {"padding_encoding": "first_byte"}}],
            "data_codecs": [{"name": "vlen-bytes", "configuration": {}}]}}],
        fill_value=None, shape=[10], chunks=[5],
        values=[b"\x00\xff", None, b"", b"abc", None, None, None, None, None, None],
        unwritten=[], encode=enc_packbits_first_vlenbytes),
}


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
        meta = {"zarr_format": 3, "node_type": "array", "shape": st["shape"], "data_type": st["data_type"],
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": st["chunks"]}},
                "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
                "fill_value": st["fill_value"], "codecs": st["codecs"], "attributes": {},
                "dimension_names": [f"{name}_{d}" for d in "yx"[-len(st["shape"]):]]}
        with open(os.path.join(path, "zarr.json"), "w") as f:
            json.dump(meta, f, indent=2)
        grid = [-(-n // c) for n, c in zip(st["shape"], st["chunks"])]
        for idx in np.ndindex(*grid):
            if idx in st["unwritten"]:
                continue
            key = os.path.join(path, "c", *map(str, idx))
            os.makedirs(os.path.dirname(key), exist_ok=True)
            with open(key, "wb") as f:
                f.write(chunk(st, idx))
        expected[name] = [v if not isinstance(v, bytes) else {"bytes": v.decode("latin-1")}
                          for v in _flat(st["values"])]
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, ensure_ascii=False)
        f.write("\n")


def _flat(values):
    return [v for row in values for v in row] if values and isinstance(values[0], list) else list(values)


if __name__ == "__main__":
    main()
