"""Tests in other processes: a function run in a forked child (``FORK``, ``in_forked_child``), and
a script that ends right after reading through a native store (obstore, icechunk;
xr_zstrings/io/runtime.py), with the race that can crash it at exit made certain.

Each request through those stores completes from a Rust runtime thread that wakes the event loop
and then needs the GIL back. The script holds that thread 0.3 s after its wake-up write (the
window CI once hit, widened) and keeps the finalization busy (a cyclic object's slow ``__del__``),
so the thread asks for the GIL while the interpreter finalizes: CPython up to 3.13 then ends it
with ``pthread_exit`` inside Rust frames (SIGABRT), or the thread goes on into the interpreter
without a thread state (SIGSEGV, or SIGABRT with "Fatal Python error: PyInterpreterState_Get").
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import subprocess
import sys
import textwrap

import pytest

FORK = pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="no fork on this platform")


def in_forked_child(fn: object) -> tuple[str, str]:
    """``fn()`` in a forked child: ("ok", repr of its result) or (error class name, message);
    a child still running after 60 s is killed and the test fails (instead of hanging)."""
    ctx = mp.get_context("fork")
    out: mp.Queue = ctx.Queue()

    def run() -> None:
        try:
            out.put(("ok", repr(fn())))  # type: ignore[operator]  # a callable
        except BaseException as e:  # (reported to the parent)
            out.put((type(e).__name__, str(e)))

    proc = ctx.Process(target=run)
    proc.start()
    try:
        return out.get(timeout=60)
    finally:
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()


WIDEN = textwrap.dedent("""
    import asyncio.selector_events as _se, threading as _th, time as _time
    _write = _se.BaseSelectorEventLoop._write_to_self
    def _slow_wake_up(self):
        _write(self)
        if _th.get_ident() not in {t.ident for t in _th.enumerate()}:  # (a native runtime's thread)
            _time.sleep(0.3)
    _se.BaseSelectorEventLoop._write_to_self = _slow_wake_up
""")

LINGER = textwrap.dedent("""
    import atexit as _atexit, time as _time
    if {without_hook!r}:
        from xr_zstrings.io import runtime as _runtime
        _atexit.unregister(_runtime._let_foreign_threads_finish)
    class _Linger:
        def __del__(self, sleep=_time.sleep):
            sleep(1.0)
    _linger = _Linger(); _linger.cycle = _linger; del _linger
""")

#: the exit tests' two cases: as shipped, and the control with the exit hook removed (which must
#: crash; CPython >= 3.14 parks such a thread instead, so there is no crash to show there)
EXIT_CASES = pytest.mark.parametrize("without_hook", [
    pytest.param(False, id="as shipped"),
    pytest.param(True, id="control: exit hook removed", marks=pytest.mark.skipif(
        sys.version_info >= (3, 14),
        reason="CPython 3.14 parks a thread asking for the GIL during finalization: no crash to show")),
])

#: how a thread caught by the finalization brings the process down (the return code): SIGABRT or
#: SIGSEGV with either store (icechunk's control: SIGSEGV mostly, SIGABRT in 2-3 of 32 runs)
CRASHED = {-signal.SIGABRT, -signal.SIGSEGV}


def run_ending_right_after(body: str, *, without_hook: bool = False) -> subprocess.CompletedProcess:
    """Run ``body`` (reads through a native store) between the widened window and the busy
    finalization; ``without_hook``: the package's exit hook removed (the control)."""
    script = WIDEN + textwrap.dedent(body) + LINGER.format(without_hook=without_hook)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)


def assert_exit(done: subprocess.CompletedProcess, *, without_hook: bool) -> None:
    """As shipped the script exits 0; the control (``without_hook``) must crash, which shows the
    script reproduces the crash the exit hook prevents."""
    if without_hook:
        assert done.returncode in CRASHED, (done.returncode, done.stderr)
    else:
        assert done.returncode == 0, done.stderr
