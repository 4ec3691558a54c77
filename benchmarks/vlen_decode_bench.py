"""Micro benchmark: M strings/s decoding one 1e6-string chunk per variable-length layout.

Compares xr_zstrings.text.vlen (numcodecs vlen-utf8 layout, zarrs.vlen, draft Arrow layout) with
numcodecs.VLenUTF8.decode (the peer zarr-python uses) on the same strings.  Run:
    PYTHONPATH=. python benchmarks/vlen_decode_bench.py [n]
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from xr_zstrings.codecs.v3 import V3Pipeline
from xr_zstrings.text import vlen as V

T = np.dtypes.StringDType()


def best_of(f, rep=5):
    best = float("inf")
    for _ in range(rep):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best


def datasets(n):
    from _data import make_strings  # shared: 4-40 chars, ~20% multibyte

    rng = np.random.default_rng(1)
    alpha = np.array(list("abcdefghijklmnopqrstuvwxyz0123456789"))
    lens = rng.integers(0, 16, n)
    pool = alpha[rng.integers(0, len(alpha), int(lens.sum()))].tolist()
    short, pos = [], 0
    for L in lens.tolist():
        short.append("".join(pool[pos : pos + L]))
        pos += L
    return {"mixed 4-40 chars, 20% multibyte": make_strings(n), "short ASCII 0-15 bytes": short}


def main(n=1_000_000):
    import numcodecs

    nc = numcodecs.VLenUTF8()
    for name, strs in datasets(n).items():
        obj = np.array(strs, dtype=object)
        ref = obj.astype(T)
        nc_chunk = bytes(nc.encode(obj))
        arrow = V.encode_arrow_chunk(obj)
        # zarrs.vlen through the codec pipeline the readers and writers use
        zarrs_pipe = V3Pipeline.from_metadata(
            [{"name": "zarrs.vlen", "configuration": {
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                "data_codecs": [{"name": "bytes"}], "index_data_type": "uint32", "index_location": "end"}}],
            data_type="string", dtype=T, chunk_shape=(n,))
        zarrs = zarrs_pipe.encode(ref)
        assert V.encode_vlen_utf8_chunk(obj) == nc_chunk

        def zarrs_T():
            return zarrs_pipe.decode(zarrs)

        cases = {
            "numcodecs.VLenUTF8.decode -> object": lambda: nc.decode(nc_chunk),
            "numcodecs.VLenUTF8.decode -> .astype(T)": lambda: nc.decode(nc_chunk).astype(T),
            "vlen-utf8 -> StringDType (decode_vlen_utf8_to_numpy)": lambda: V.decode_vlen_utf8_to_numpy(nc_chunk, n),
            "vlen-utf8 -> object": lambda: V.decode_vlen_utf8_to_numpy(nc_chunk, n, string_dtype="O"),
            "vlen-utf8 -> VlenChunk only": lambda: V.decode_vlen_utf8_chunk(nc_chunk, n),
            "Arrow layout -> StringDType": lambda: V.vlen_to_numpy(V.decode_arrow_chunk(arrow, n)),
            "Arrow layout -> object": lambda: V.vlen_to_numpy(V.decode_arrow_chunk(arrow, n), string_dtype="O"),
            "Arrow layout -> pa.StringArray (validated)": lambda: V.vlen_to_arrow(V.decode_arrow_chunk(arrow, n)),
            "zarrs.vlen (bytes codecs) -> StringDType": zarrs_T,
            "numcodecs.VLenUTF8.encode (object in)": lambda: nc.encode(obj),
            "encode_vlen_utf8_chunk (object in)": lambda: V.encode_vlen_utf8_chunk(obj),
            "encode_vlen_utf8_chunk (StringDType in)": lambda: V.encode_vlen_utf8_chunk(ref),
            "encode_arrow_chunk (StringDType in)": lambda: V.encode_arrow_chunk(ref),
        }
        assert (V.decode_vlen_utf8_to_numpy(nc_chunk, n) == ref).all()
        assert (V.vlen_to_numpy(V.decode_arrow_chunk(arrow, n)) == ref).all()
        assert (zarrs_T() == ref).all()
        print(f"\n== {n:,} strings: {name} ==")
        base = None
        for label, f in cases.items():
            t = best_of(f)
            rate = n / t / 1e6
            if label.startswith("numcodecs.VLenUTF8.decode -> object"):
                base = rate
            print(f"{label:55s} {rate:7.2f} M strings/s  ({t * 1e3:7.1f} ms)  x{rate / base:.2f} vs numcodecs decode")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)
