"""Native stores' runtimes and this process: refused in forked children, let finish before exit.

obstore and icechunk run their requests on tokio runtimes, in threads of their own (the versions
this was checked with: docs/reliability.md, "Forked processes, and the exit after a read").

Forks: ``fork`` copies only the calling thread, so a child forked after such a runtime started
waits forever on every request through it, on any store (a new one too); obstore's maintainers:
"obstore is not fork safe" (developmentseed/obstore#441; tokio-rs/tokio#4301). obstore starts its
runtime at the first request, so a child forked before that works; icechunk's child hangs once
icechunk has been imported (its first call there, ``Repository.open`` too, never returns). So the
first request through this package on each runtime records the process, and any later one from a
process forked off it is refused, naming the fix. (Requests the user's own code made before
forking are not seen here; a child's own icechunk calls hang inside icechunk, before reaching us.)
Local stores are unaffected.

Exit: each request completes from a runtime thread that calls the event loop's
``call_soon_threadsafe``, whose wake-up write releases the GIL. The loop can finish the read
before that thread has the GIL back; if the script then ends, the interpreter starts finalizing,
and CPython up to 3.13 ends a thread that asks for the GIL then with ``pthread_exit``, which
crashes the process inside Rust frames (SIGABRT or SIGSEGV, after all the work succeeded; how
often: docs/reliability.md; CPython 3.14 parks such threads instead). No public API of obstore,
icechunk, pyo3 or asyncio joins those threads, so an ``atexit`` hook (run before finalization
starts) waits, at most ``_EXIT_WAIT`` seconds, until no thread unknown to ``threading`` is running
Python code. The first request through any store that is not one of zarr-python's own installs it
(``using_native_store``).
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time

from ..errors import ForkedProcessError

__all__ = ["fork_unsafe_runtime", "using_native_store", "using_runtime"]

#: the native runtimes a forked child cannot use (named by their top-level module): what they
#: are, and when workers may still be forked
_FORK_UNSAFE = {
    "obstore": ("obstore (the S3 client)", "before the first read from object storage"),
    "icechunk": ("icechunk", "before icechunk is imported"),
}
_used_by: dict[str, int] = {}  # runtime -> the process whose runtime made this package's requests
_EXIT_WAIT = 2.0  # seconds: the longest an exiting interpreter waits for native threads
_exit_hook_installed = False  # (a forked child inherits both this and the hook itself)


def fork_unsafe_runtime(store: object) -> str | None:
    """The runtime serving ``store`` that a forked child cannot use ("obstore": zarr's
    ``ObjectStore`` or an object read in a bucket; "icechunk": a session's store), or None."""
    for obj in (store, getattr(store, "store", None), getattr(store, "obj", None)):
        top = type(obj).__module__.partition(".")[0]
        if top in _FORK_UNSAFE:
            return top
    return None


def using_runtime(runtime: str, display: str) -> None:
    """Call before requests through a store that ``runtime`` (see ``fork_unsafe_runtime``)
    serves; ``display`` names the store in the error."""
    pid = os.getpid()
    first = _used_by.setdefault(runtime, pid)
    if first != pid:
        what, when = _FORK_UNSAFE[runtime]
        raise ForkedProcessError(
            f"Cannot reach {display} from process {pid}: it was forked from process {first} after "
            f"that process used {what}, which cannot run in such a child: its requests would never "
            "return. Start worker processes with the 'spawn' or 'forkserver' method "
            "(multiprocessing.get_context('spawn'); PyTorch: DataLoader(..., "
            "multiprocessing_context='spawn')); datasets opened in the parent can be passed to them, "
            f"pickled. Or fork the workers {when}."
        )
    using_native_store()


def using_native_store() -> None:
    """Call before requests to a store whose completions come from native threads (obstore,
    icechunk): installs the exit hook, once a process."""
    global _exit_hook_installed
    if not _exit_hook_installed:
        _exit_hook_installed = True
        atexit.register(_let_foreign_threads_finish)


def _foreign_threads_in_python() -> list[int]:
    """Idents of threads running Python code that ``threading`` did not start (obstore's
    completions, other native libraries' callbacks)."""
    known = {t.ident for t in threading.enumerate()}
    return [ident for ident in sys._current_frames() if ident not in known]


def _let_foreign_threads_finish() -> None:
    """Wait (GIL released), at most ``_EXIT_WAIT`` seconds, until no foreign thread runs Python
    code. Costs one look at the threads when none does, as after most exits."""
    deadline = time.monotonic() + _EXIT_WAIT
    while _foreign_threads_in_python() and time.monotonic() < deadline:
        time.sleep(0.001)
