"""Object storage in forked processes: a clear error instead of requests that never return.

obstore (0.12.1, checked) runs its requests on a tokio runtime that its first request starts.
``fork`` copies only the calling thread, so in a child forked after that every obstore request,
on any store (a new one too), waits forever; its maintainers: "obstore is not fork safe"
(developmentseed/obstore#441; tokio-rs/tokio#4301). A child forked before the first request
starts its own runtime and works. So the first object-storage request through this package
records the process, and any later one from a process forked off it is refused, naming the fix.
(Requests the user's own code made through obstore before forking are not seen here.) Local
stores are unaffected.
"""

from __future__ import annotations

import os

from ..errors import ForkedProcessError

__all__ = ["using_obstore"]

_used_by: int | None = None  # the process whose obstore runtime made this package's requests


def using_obstore(display: str) -> None:
    """Call before requests to an obstore-backed store (``display`` names it in the error)."""
    global _used_by
    pid = os.getpid()
    if _used_by is None:
        _used_by = pid
    elif _used_by != pid:
        raise ForkedProcessError(
            f"Cannot reach {display} from process {pid}: it was forked from process {_used_by} after "
            "that process used object storage, and obstore (the S3 client) cannot run in such a "
            "child: its requests would never return. Start worker processes with the 'spawn' or "
            "'forkserver' method (multiprocessing.get_context('spawn'); PyTorch: "
            "DataLoader(..., multiprocessing_context='spawn')); datasets opened in the parent can be "
            "passed to them, pickled. Or fork the workers before the first read from object storage."
        )
