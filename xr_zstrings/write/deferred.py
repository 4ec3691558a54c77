"""``compute=False``: a write checked and planned now, run when a dask ``Delayed`` is computed.

The Delayed is one task that does what the call would have done after planning: open the target
(taking the claim or lock in the process that computes it), write the chunks, commit. The chunks
are written under the claim, so the task computes the dask-backed variables' block writes itself:
on a distributed cluster through the worker's client (``distributed.worker_client``), so the
blocks still run on every worker. Nothing is visible until the task runs; a computation killed
midway is a killed writer (docs/reliability.md#deferred-writes-and-region-writes).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["deferred"]


class _Held:
    """The write out of dask's sight: dask would otherwise compute the dask arrays the write holds
    (in its arguments) before the task, loading each whole."""

    def __init__(self, write: Callable[[], Any]) -> None:
        self.write = write


def _on_cluster() -> contextlib.AbstractContextManager[Any]:
    """Inside a distributed worker's task: dask computes through the cluster (the task secedes from
    the worker's thread pool while it waits); elsewhere no change (dask's local schedulers nest)."""
    try:
        from distributed import get_worker

        get_worker()
    except (ImportError, ValueError):
        return contextlib.nullcontext()
    return _worker_scheduler()


@contextlib.contextmanager
def _worker_scheduler() -> Iterator[None]:
    import dask
    from distributed import worker_client

    with worker_client() as client, dask.config.set(scheduler=client):
        yield


def _run(held: _Held) -> None:
    with _on_cluster():
        held.write()


def deferred(write: Callable[[], Any], label: str) -> Any:
    """A ``dask.delayed`` object whose computation runs ``write()`` (which opens, writes and
    commits) and returns None."""
    import dask

    return dask.delayed(_run, name=f"{label}-{uuid.uuid4().hex}", pure=False)(_Held(write))
