"""Write the Zarr v3 golden chunks in this directory (deterministic; does not use xr_zstrings).

Offsets and data come from pyarrow's buffers (``pa.array(values, type).buffers()``), the
framing from the specs (zarrs.vlen: ../shared/specs/zarrs-vlen-codec.txt; Arrow layout:
zep-draft-string-binary-arrow-layout.txt; shard index: the Zarr v3 sharding_indexed codec),
and the crc32c checksums from ``google_crc32c`` (the library zarr-python's crc32c codec uses),
appended as 4 little-endian bytes as the Zarr v3 crc32c codec specifies.

Run: ``python tests/golden_chunks/v3/make_golden_v3.py``
"""

import json
import pathlib
import struct

import google_crc32c
import pyarrow as pa

HERE = pathlib.Path(__file__).parent
VALUES = json.loads((HERE.parent / "values.json").read_text(encoding="utf-8"))
STRS = VALUES["strs"]


def crc(b: bytes) -> bytes:
    return b + struct.pack("<I", google_crc32c.value(b))


def arrow_parts(values, typ, offset_fmt):
    arr = pa.array(values, typ)
    n = len(arr)
    bufs = arr.buffers()
    isz = struct.calcsize("<" + offset_fmt)
    off = bytes(bufs[1])[: (n + 1) * isz]
    last = struct.unpack_from("<" + offset_fmt, off, n * isz)[0]
    data = bytes(bufs[2])[:last] if bufs[2] is not None else b""
    return off, data


def arrow_chunk(values, typ=None, fmt="i"):
    typ = pa.string() if typ is None else typ
    off, data = arrow_parts(values, typ, fmt)
    pad = (-len(off)) % 64
    return off + b"\0" * pad + data


def main():
    files = {}
    # 1. zarrs.vlen, index uint32 [bytes little, crc32c], data [bytes, crc32c], index at the end
    off, data = arrow_parts(STRS, pa.string(), "i")
    off_u32 = b"".join(struct.pack("<I", v) for v in struct.unpack(f"<{len(STRS) + 1}i", off))
    index = crc(off_u32)
    files["zarrs_vlen_crc32c_uint32_end.bin"] = crc(data) + index + struct.pack("<Q", len(index))
    # 2. Arrow layout (data_type string, no array->bytes codec) followed by crc32c
    files["arrow_string_crc32c.bin"] = crc(arrow_chunk(STRS))
    # 3. a shard of shape (16,) with inner chunks (4,): inner codecs [{"name": "bytes"}] (the
    #    Arrow layout), index [bytes little, crc32c] at the end; the 3rd inner chunk is empty
    #    (2**64-1), so the shard holds 16 elements: strs[0:4], strs[4:8], fill, and ["z"]*4.
    inner = [arrow_chunk(STRS[0:4]), arrow_chunk(STRS[4:8]), None, arrow_chunk(["z"] * 4)]
    body, entries, pos = b"", [], 0
    for c in inner:
        if c is None:
            entries.append((2**64 - 1, 2**64 - 1))
        else:
            entries.append((pos, len(c)))
            body += c
            pos += len(c)
    idx = crc(b"".join(struct.pack("<QQ", o, n) for o, n in entries))
    files["sharded_arrow_string_end.bin"] = body + idx
    for name, b in files.items():
        (HERE / name).write_bytes(b)


if __name__ == "__main__":
    main()
