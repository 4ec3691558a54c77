"""Native stores' runtimes and this process: obstore refused in forked children, threads let
finish before exit.

obstore (0.12.1, checked) runs its requests on a tokio runtime that its first request starts.

Forks: ``fork`` copies only the calling thread, so in a child forked after that every obstore
request, on any store (a new one too), waits forever; its maintainers: "obstore is not fork safe"
(developmentseed/obstore#441; tokio-rs/tokio#4301). A child forked before the first request
starts its own runtime and works. So the first object-storage request through this package
records the process, and any later one from a process forked off it is refused, naming the fix.
(Requests the user's own code made through obstore before forking are not seen here.) Local
stores are unaffected.

Exit: each obstore coroutine completes from a runtime thread that calls the event loop's
``call_soon_threadsafe``, whose wake-up write releases the GIL. The loop can finish the read
before that thread has the GIL back; if the script then ends, the interpreter starts finalizing,
and CPython up to 3.13 ends a thread that asks for the GIL then with ``pthread_exit``, which
aborts the process inside Rust frames (SIGABRT, no message, after all the work succeeded; seen in
1-3% of short scripts reading from S3 on two loaded cores, engine="zarr" on obstore too; CPython
3.14 parks such threads instead). No public API of obstore, pyo3 or asyncio joins those threads,
so an ``atexit`` hook (run before finalization starts) waits, at most ``_EXIT_WAIT`` seconds,
until no thread unknown to ``threading`` is running Python code. icechunk's sessions (also Rust,
also tokio) complete the same way and crash the same way (SIGSEGV, checked with icechunk 1.x and
the window widened): the hook is installed by the first request through any store that is not
one of zarr-python's own (``using_native_store``).
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time

from ..errors import ForkedProcessError

__all__ = ["using_native_store", "using_obstore"]

_used_by: int | None = None  # the process whose obstore runtime made this package's requests
_EXIT_WAIT = 2.0  # seconds: the longest an exiting interpreter waits for native threads
_exit_hook_for: int | None = None  # the process the exit hook was installed in


def using_obstore(display: str) -> None:
    """Call before requests to an obstore-backed store (``display`` names it in the error)."""
    global _used_by
    pid = os.getpid()
    if _used_by is None:
        _used_by = pid
        using_native_store()
    elif _used_by != pid:
        raise ForkedProcessError(
            f"Cannot reach {display} from process {pid}: it was forked from process {_used_by} after "
            "that process used object storage, and obstore (the S3 client) cannot run in such a "
            "child: its requests would never return. Start worker processes with the 'spawn' or "
            "'forkserver' method (multiprocessing.get_context('spawn'); PyTorch: "
            "DataLoader(..., multiprocessing_context='spawn')); datasets opened in the parent can be "
            "passed to them, pickled. Or fork the workers before the first read from object storage."
        )


def using_native_store() -> None:
    """Call before requests to a store whose completions come from native threads (obstore,
    icechunk): installs the exit hook, once a process."""
    global _exit_hook_for
    if _exit_hook_for is None:  # (a forked child inherits both this and the hook itself)
        _exit_hook_for = os.getpid()
        atexit.register(_let_foreign_threads_finish)


def _foreign_threads_in_python() -> list[int]:
    """Idents of threads running Python code that ``threading`` did not start (obstore's
    completions, other native libraries' callbacks)."""
    known = {t.ident for t in threading.enumerate()}
    return [ident for ident in sys._current_frames() if ident not in known]


def _let_foreign_threads_finish(timeout: float | None = None) -> bool:
    """Wait (GIL released) until no foreign thread runs Python code; False when ``timeout``
    (default ``_EXIT_WAIT``) passed first. Costs nothing when none does, as after most exits."""
    deadline = time.monotonic() + (_EXIT_WAIT if timeout is None else timeout)
    while _foreign_threads_in_python():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.001)
    return True
