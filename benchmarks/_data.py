"""Shared benchmark data: 1e6 strings of 4-40 chars, ~20% with multibyte chars, stored as |S48."""
import numpy as np


def make_strings(n=1_000_000, seed=0, multibyte_frac=0.2):
    rng = np.random.default_rng(seed)
    lens = rng.integers(4, 41, n)
    alpha = np.array(list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"))
    mb = np.array(list("éüßçø€中文字😀"))
    # build via a big char pool then slice
    pool = alpha[rng.integers(0, len(alpha), lens.sum())]
    ismb = rng.random(n) < multibyte_frac
    out = []
    pos = 0
    mbpos = rng.integers(0, len(mb), n)
    for i in range(n):
        L = int(lens[i])
        s = "".join(pool[pos:pos + L]); pos += L
        if ismb[i]:
            s = s[:-2] + mb[mbpos[i]] + mb[(mbpos[i] + 3) % len(mb)]
        enc = s.encode()
        while len(enc) > 48:
            s = s[:-1]; enc = s.encode()
        out.append(s)
    return out

def make_raw(n=1_000_000, **kw):
    strs = make_strings(n, **kw)
    raw = np.array([s.encode() for s in strs], dtype="S48")
    return strs, raw
