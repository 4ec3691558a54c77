"""Per-thread reusable byte buffers, for bytes a thread consumes before it needs the next ones.

Fresh memory costs a page fault per 4 KiB every time (dask's workers return freed memory to the
system at once, ``MALLOC_TRIM_THRESHOLD_``), so the chunk reader's two large buffers are reused per
thread: a local chunk's bytes (``io.zstore``) and a decompressed chunk (``codecs.bounded``), one
``ThreadScratch`` each (both are alive at once while a chunk decodes). A buffer over a scratch's
limit is taken fresh with :func:`fresh`, on huge pages where the system allows.
"""

from __future__ import annotations

import threading

import numpy as np

__all__ = ["ThreadScratch", "fresh"]


class ThreadScratch:
    """One uint8 buffer per thread, grown (doubling, up to ``limit`` bytes) and kept.

    ``get(n)`` is this thread's buffer of at least ``n`` bytes, or None when ``n`` is over the limit
    (the caller takes fresh memory): so a thread keeps at most ``limit`` bytes. What it returned is
    valid until the same thread's next ``get``; views of a buffer that was replaced keep it alive.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._tls = threading.local()

    def get(self, n: int) -> np.ndarray | None:
        if n > self.limit:
            return None
        buf = getattr(self._tls, "buf", None)
        if buf is None or buf.size < n:
            grown = max(n, min(2 * buf.size, self.limit)) if buf is not None else n
            buf = self._tls.buf = np.empty(grown, np.uint8)
        return buf

    def take(self, used: int, n: int) -> tuple[memoryview, int]:
        """``n`` bytes at offset ``used`` of this thread's buffer and the offset after them, for a
        caller handing out several regions of one buffer at once; over the limit, ``n`` bytes of
        fresh memory (:func:`fresh`) and ``used`` unchanged."""
        buf = self.get(used + n)
        if buf is None:
            return memoryview(fresh(n)), used
        return memoryview(buf)[used : used + n], used + n


def fresh(n: int) -> np.ndarray:
    """``n`` bytes of new memory for a buffer over a scratch's limit: ``np.empty``, for which numpy
    asks the kernel for transparent huge pages on large arrays (``madvise``), so filling it faults
    once per 2 MiB instead of once per 4 KiB; ``bytes``/``f.read()`` cannot (measured:
    docs/performance.md, "Measured notes behind the code")."""
    return np.empty(n, np.uint8)
