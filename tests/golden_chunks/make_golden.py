"""Regenerate the golden chunk files in this directory (see README.md).

Independent of xr_zstrings: offsets and data come from pyarrow's own buffers, numcodecs chunks
from numcodecs itself, and the framing is written with struct exactly as the specs describe.
"""
import json
import os
import struct

import numcodecs
import numpy as np
import pyarrow as pa

HERE = os.path.dirname(os.path.abspath(__file__))

STRS = ["a", "bb", "", "dddd", "é€😀", "x\x00y", "tail\x00", "中文字"]
BINS = [b"a", b"", b"\x00\xff\xfe", b"\xc3", b"bytes"]
ZARRS_DOC = ["a", "bb", "", "dddd"]  # the elements of zarrs' own codec_vlen_offsets_width test


def arrow_parts(values, typ):
    arr = pa.array(values, type=typ)
    _, ob, db = arr.buffers()
    isz = 8 if typ in (pa.large_string(), pa.large_binary()) else 4
    n = len(values)
    off = ob.to_pybytes()[: (n + 1) * isz]
    last = int(np.frombuffer(off, "<i8" if isz == 8 else "<i4")[-1])
    data = db.to_pybytes()[:last] if db is not None else b""
    return off, data


def arrow_layout(off, data):
    start = -(-len(off) // 64) * 64  # round up to a 64-byte boundary
    return off + b"\x00" * (start - len(off)) + data


def zarrs(off_i32_or_i64, data, isz_src, index_dtype, location):
    offs = np.frombuffer(off_i32_or_i64, "<i8" if isz_src == 8 else "<i4").astype(index_dtype)
    index = offs.tobytes()
    length = struct.pack("<Q", len(index))
    return length + index + data if location == "start" else data + index + length


def main():
    files = {}
    for name, typ, vals in [
        ("arrow_string", pa.string(), STRS),
        ("arrow_large_string", pa.large_string(), STRS),
        ("arrow_binary", pa.binary(), BINS),
        ("arrow_large_binary", pa.large_binary(), BINS),
        ("arrow_string_empty", pa.string(), []),
    ]:
        off, data = arrow_parts(vals, typ)
        files[f"{name}.bin"] = arrow_layout(off, data)
    for tag, vals in [("strs", STRS), ("zarrs_doc", ZARRS_DOC)]:
        off, data = arrow_parts(vals, pa.string())
        for index_dtype, name in [("<u4", "uint32"), ("<u8", "uint64")]:
            for loc in ("start", "end"):
                files[f"zarrs_vlen_{tag}_{name}_{loc}.bin"] = zarrs(off, data, 4, index_dtype, loc)
    files["numcodecs_vlen_utf8.bin"] = bytes(numcodecs.VLenUTF8().encode(np.array(STRS, dtype=object)))
    files["numcodecs_vlen_bytes.bin"] = bytes(numcodecs.VLenBytes().encode(np.array(BINS, dtype=object)))
    files["numcodecs_vlen_utf8_empty.bin"] = bytes(numcodecs.VLenUTF8().encode(np.array([], dtype=object)))
    for fname, blob in files.items():
        with open(os.path.join(HERE, fname), "wb") as f:
            f.write(blob)
    meta = {
        "strs": STRS,
        "bins_latin1": [b.decode("latin-1") for b in BINS],
        "zarrs_doc": ZARRS_DOC,
        "versions": {"pyarrow": pa.__version__, "numcodecs": numcodecs.__version__, "numpy": np.__version__},
    }
    with open(os.path.join(HERE, "values.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, ensure_ascii=True, indent=1)


if __name__ == "__main__":
    main()
