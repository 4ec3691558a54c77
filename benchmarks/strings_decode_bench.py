"""Benchmark decode_fixed_utf8 and its building blocks on 1e6 strings (4-40 chars) as |S48.

Run: PYTHONPATH=. python benchmarks/strings_decode_bench.py
"""
from __future__ import annotations

import gc
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _data import make_raw

from xr_zstrings.text import dtypes as D
from xr_zstrings.text import fixed as S

T = np.dtypes.StringDType()


def bench(name, f, n, rep=5):
    ts = []
    for _ in range(rep):
        gc.collect()
        t0 = time.perf_counter()
        r = f()
        ts.append(time.perf_counter() - t0)
    best = min(ts)
    print(f"{name:58s} {best * 1e3:8.1f} ms {n / best / 1e6:7.1f} M/s")
    return r


def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main():
    strs, raw = make_raw()
    N = raw.size
    u8 = raw.view(np.uint8).reshape(N, -1)
    print(f"N={N}, dtype={raw.dtype}, non-ASCII rows={int((u8.max(1) >= 0x80).sum())}")
    print("-- building blocks")
    bench("numpy raw.astype(StringDType) [no validation!]", lambda: raw.astype(T), N)
    bench("ASCII check u8.max()", lambda: u8.max(), N)
    bench("embedded-NUL check (flat NUL->non-NUL)", lambda: S.has_embedded_nul(u8), N)
    bench("np.strings.find(raw, b'\\0') (alternative)", lambda: np.strings.find(raw, b"\0"), N)
    bench("pyarrow zero-copy view + validate(full=True)", lambda: S._invalid_rows(raw, u8), N)
    rows = np.flatnonzero(u8.max(axis=1) >= 0x80)
    bench("python decode of non-ASCII rows only (no-arrow fallback)",
          lambda: S._python_invalid_rows(raw, rows), N, rep=2)
    bench("python loop [b.decode() for b in raw.tolist()]",
          lambda: [b.decode() for b in raw.tolist()], N, rep=2)
    bench("np.strings.decode(raw,'utf-8') -> U", lambda: np.strings.decode(raw, "utf-8"), N, rep=2)
    print("-- decode_fixed_utf8 end to end")
    for kind in "TOU":
        bench(f"decode_fixed_utf8 string_dtype={kind!r} (mixed, valid)",
              lambda: S.decode_fixed_utf8(raw, string_dtype=kind), N)
    asc = raw.copy()
    au = asc.view(np.uint8)
    au[au >= 0x80] = ord("x")
    bench("decode_fixed_utf8 'T' (all ASCII)", lambda: S.decode_fixed_utf8(asc), N)
    cut = raw.astype("S12")  # byte-truncated like netcdf-c: many split UTF-8 chars
    print(f"   S12 copy: {int((np.char.str_len(cut) < 12).sum())} short rows")
    bench("decode_fixed_utf8 'T' S12 byte-truncated (drop path)", lambda: S.decode_fixed_utf8(cut), N)
    bench("decode_fixed_utf8 'T' S12 byte-truncated (replace path)",
          lambda: S.decode_fixed_utf8(cut, utf8_errors="replace"), N, rep=2)
    emb = raw.copy()
    emb[::100] = np.array([b"abc\0junk"])
    bench("decode_fixed_utf8 'T' with 1% embedded-NUL rows", lambda: S.decode_fixed_utf8(emb), N)
    out = S.decode_fixed_utf8(raw)
    assert out.tolist() == strs
    print("-- conversions from T")
    bench("T -> object", lambda: out.astype(object), N, rep=3)
    bench("T -> U (width from str_len)", lambda: D.convert_string_dtype(out, "U"), N, rep=3)
    print("-- encode")
    bench("encode_fixed_utf8(T values, 48)", lambda: S.encode_fixed_utf8(out, 48), N, rep=3)
    print("-- memory of 1e6 decoded strings (RSS growth)")
    for kind in "TOU":
        gc.collect()
        before = rss_mb()
        keep = S.decode_fixed_utf8(raw, string_dtype=kind)
        gc.collect()
        print(f"   {kind}: {rss_mb() - before:7.1f} MB  (array nbytes {keep.nbytes / 2**20:.1f} MB,"
              f" dtype {keep.dtype})")
        del keep


if __name__ == "__main__":
    main()
