"""Tests for xr_zstrings.text.policy: the context (policy report, offsets, stored width, chunk label)
held in context variables, and how it reaches pool threads (the read through the decode pool:
tests/read/test_decode_pool.py)."""

from __future__ import annotations

import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from xr_zstrings import StringDecodeWarning, StringOverflowError
from xr_zstrings.text import fixed as S
from xr_zstrings.text import policy as P


def _seen() -> tuple:
    """What a task sees of the context."""
    return (P.active_changes(), P.position_label(1, (10,)), P.current_chunk())


def test_pool_tasks_see_the_callers_context_only_when_carried():
    with ThreadPoolExecutor(2) as pool, P.policy_scope("v") as changes, P.at_offset((100,)), P.in_chunk("c/3"):
        assert _seen() == (changes, "[101]", "c/3")
        # a thread pool does not copy the context: a bare task sees the defaults ...
        assert pool.submit(_seen).result() == (None, "[1]", "")
        # ... in_this_context runs it in a copy of the caller's
        assert list(pool.map(P.in_this_context(lambda _: _seen()), range(4))) == [(changes, "[101]", "c/3")] * 4


def test_what_a_carried_task_sets_stays_in_the_task():
    def task(i: int) -> str:
        with P.in_chunk(f"c/{i}"):
            pass
        token_free = P.current_chunk()  # reset on leaving
        P._CHUNK.set(f"leaked {i}")  # set without a reset: only this task's copy changes
        return token_free

    with ThreadPoolExecutor(1) as pool, P.in_chunk("outer"):
        carried = P.in_this_context(task)
        assert list(pool.map(carried, range(3))) == ["outer"] * 3  # the same worker thread each time
        assert P.current_chunk() == "outer"
        assert pool.submit(P.current_chunk).result() == ""


def test_concurrent_scopes_do_not_mix():
    """Two threads reading at once report into their own scopes (one warning each, own count)."""
    raw = {1: np.array([b"a\xc3"] * 1, "S2"), 2: np.array([b"a\xc3"] * 2, "S2")}
    barrier = threading.Barrier(2)

    def read(n: int) -> None:
        with P.policy_scope(f"v{n}"):
            barrier.wait()
            S.decode_fixed_utf8(raw[n])
            barrier.wait()

    # catch_warnings swaps process-wide state and is not thread-safe (entered in two threads at
    # once, one thread's exit can drop the other's warning): record once, around both threads
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        threads = [threading.Thread(target=read, args=(n,)) for n in (1, 2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    got = sorted(str(w.message) for w in rec if issubclass(w.category, StringDecodeWarning))
    assert len(got) == 2, got  # one a scope
    assert any(m.startswith("v1: ") and "end of 1 value(s)" in m for m in got), got
    assert any(m.startswith("v2: ") and "end of 2 value(s)" in m for m in got), got


def test_overflow_error_names_the_offset_and_stored_width():
    expected = r"of the dask block at \[40\].*value \[41\] = 'abc'.*An append keeps the stored width: .*maxstrlen=3"
    with P.stored_width("An append keeps the stored width"), P.at_offset((40,)), \
            pytest.raises(StringOverflowError, match=expected):
        S.encode_fixed_utf8(np.array(["a", "abc"], dtype=object), 2)
    with pytest.raises(StringOverflowError, match=r"value\(s\) do not fit: the longest, value \[1\].*on_overflow='widen'"):
        S.encode_fixed_utf8(np.array(["a", "abc"], dtype=object), 2)
