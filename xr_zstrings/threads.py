"""The one thread pool of chunk work, reads and writes alike: how many threads, and one pool per
count and process.

Readers fetch and decode chunks on it, writers encode theirs (numcodecs and the kernels release
the GIL); ``decode_threads()`` sizes both (the ``decode_threads`` keyword of a read, else
``XR_ZSTRINGS_DECODE_THREADS``, else min(8, CPUs)). ``run_all`` is the one way work goes onto the
pool: a task already running on one of its threads that asks for more (a writer task that reads,
a read inside a read) runs that work itself instead of queueing behind the tasks that occupy every
thread, so nesting cannot deadlock. A pool's threads do not exist in a child made by fork
(multiprocessing's default on Linux, DataLoader workers, gunicorn), so the child starts afresh
(``os.register_at_fork``, and a pid check for forks that bypass Python's fork hooks).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from .errors import ZStringsError
from .text.policy import in_this_context

__all__ = ["DECODE_THREADS_ENV", "check_decode_threads", "decode_threads", "executor", "run_all"]

T = TypeVar("T")
R = TypeVar("R")

DECODE_THREADS_ENV = "XR_ZSTRINGS_DECODE_THREADS"
_DEFAULT_THREADS = max(1, min(8, os.cpu_count() or 1))
_pools: dict[int, ThreadPoolExecutor] = {}
_pools_pid = os.getpid()
_pools_lock = threading.Lock()
_worker = threading.local()  # .busy: this thread is one of the pools' threads


def _reset_pools_after_fork() -> None:
    global _pools, _pools_pid, _pools_lock
    _pools, _pools_pid, _pools_lock = {}, os.getpid(), threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_pools_after_fork)


def check_decode_threads(value: Any, *, source: str = "decode_threads") -> int | None:
    """``value`` as a thread count (an int >= 1) or None (the default); else a clear error."""
    if value is None:
        return None
    try:
        n = int(value)
        ok = n >= 1 and (not isinstance(value, float) or n == value) and not isinstance(value, bool)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ZStringsError(
            f"Invalid {source}. Got {value!r}, expected a whole number >= 1 (1 decodes on the calling "
            "thread, no pool)."
        )
    return n


def decode_threads(requested: int | None = None) -> int:
    """The number of threads chunk work uses: ``requested`` (a read's ``decode_threads`` keyword),
    else the ``XR_ZSTRINGS_DECODE_THREADS`` environment variable, else min(8, CPUs)."""
    if requested is not None:
        return requested
    env = os.environ.get(DECODE_THREADS_ENV, "").strip()
    if env:
        return check_decode_threads(env, source=f"environment variable {DECODE_THREADS_ENV}") or 1
    return _DEFAULT_THREADS


def executor(threads: int) -> ThreadPoolExecutor:
    """This process's pool of ``threads`` decode threads (made on first use, again after a fork)."""
    if os.getpid() != _pools_pid:  # forked without Python's hooks (os.register_at_fork)
        _reset_pools_after_fork()
    with _pools_lock:
        pool = _pools.get(threads)
        if pool is None:
            pool = _pools[threads] = ThreadPoolExecutor(threads, thread_name_prefix="zstrings-decode",
                                                        initializer=_mark_worker)
        return pool


def _mark_worker() -> None:
    _worker.busy = True


def run_all(fn: Callable[[T], R], items: Iterable[T], threads: int | None = None) -> list[R]:
    """``[fn(x) for x in items]``, on the pool of ``decode_threads(threads)`` threads when that is
    more than one and there is more than one item; on the calling thread when it is itself one of
    the pool's threads (nested work never waits for the threads its caller occupies). Each item
    runs in a copy of the caller's context (``contextvars``: the read's policy report, the offsets
    and chunk labels errors name), as it would on the calling thread."""
    items = list(items)
    n = decode_threads(threads)
    if n <= 1 or len(items) <= 1 or getattr(_worker, "busy", False):
        return [fn(x) for x in items]
    return list(executor(n).map(in_this_context(fn), items))
