"""The writer side of the kill tests (tests/write/test_kill.py): datasets, writers, and a fork server.

Run as a script it imports everything once, then for each JSON command on stdin forks a child that
runs one writer and is killed with SIGKILL at its ``kill_at``-th write operation (counted by an
audit hook on file writes, renames, links and deletes, and by the S3 store's PUT/DELETE calls),
so a kill point is a number that replays the same interrupted write. Forking from this
single-threaded server takes milliseconds where starting Python takes seconds.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from typing import Any

import numpy as np
import xarray as xr

N = 230  # rows of each dataset; chunks of 40: the last chunk is partial (appends rewrite it)
CHUNK = 40
T = np.dtypes.StringDType()


def dataset(version: int, n: int = N, small: bool = False) -> xr.Dataset:
    """Four variables, two of them strings (``small``: one string and one number); ``version``
    changes every value."""
    i = np.arange(n)
    ds = xr.Dataset(
        {
            "name": ("obs", np.array([f"name-{version}-{k}-é{'x' * (k % 5)}" for k in i], dtype=T)),
            "code": ("obs", np.array([f"c{(k * 7 + version) % 13}" for k in i], dtype=T)),
            "value": ("obs", i * 1.5 + version),
            "count": ("obs", (i + version).astype("i4")),
        },
        attrs={"title": f"version {version}"},
    )
    if small:
        ds = ds[["name", "value"]]
    for v in ds.variables.values():
        v.encoding["chunks"] = (CHUNK,)
    return ds


def appended(n: int = N, small: bool = False) -> xr.Dataset:
    """What an append of ``dataset(2)`` to ``dataset(1)`` holds."""
    return xr.concat([dataset(1, n, small), dataset(2, n, small)], dim="obs")


def run(writer: str, target: str, so: dict[str, Any] | None, src: str | None, n: int = N,
        small: bool = False) -> None:
    """Run one writer to completion (the child process)."""
    from xr_zstrings import convert
    from xr_zstrings.write.nczarr import to_nczarr
    from xr_zstrings.write.zarr3 import to_zarr_v3

    kw: dict[str, Any] = {"storage_options": so} if so else {}
    name, _, layout = writer.partition(":")
    new = dataset(2, n, small)
    if name == "nczarr_new":
        to_nczarr(new, target, **kw)
    elif name == "nczarr_zlib_new":
        to_nczarr(new, target, compressor={"id": "zlib", "level": 1}, **kw)
    elif name == "nczarr_replace":
        to_nczarr(new, target, mode="w", **kw)
    elif name == "nczarr_append":
        to_nczarr(new, target, mode="a", append_dim="obs", **kw)
    elif name == "nczarr_addvars":
        to_nczarr(dataset(1, n, small)[["code", "count"] if not small else ["value"]], target, mode="a", **kw)
    elif name == "v3_new":
        to_zarr_v3(new, target, layout=layout, **kw)  # type: ignore[arg-type]  # a layout name from the command
    elif name == "v3_append":
        to_zarr_v3(new, target, layout=layout, mode="a", append_dim="obs", **kw)  # type: ignore[arg-type]  # a layout name from the command
    elif name == "v3_replace":
        to_zarr_v3(new, target, layout=layout, mode="w", **kw)  # type: ignore[arg-type]  # a layout name from the command
    elif name in ("convert_nc", "convert_store"):
        assert src is not None
        convert(src, target)
    else:
        raise ValueError(f"unknown writer {writer!r}")


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _counting(kill_at: int | None, kill_event: str | None = None) -> list[int]:
    """Count write operations (file opens for writing, renames, links, deletes, S3 PUT/DELETE);
    SIGKILL this process at the ``kill_at``-th, or at the first audit event named ``kill_event``
    (``xr_zstrings.commit:<step>`` names a step of the commit protocol, io/commit.py)."""
    count = [0]
    lock = threading.Lock()

    def hit(event: str = "") -> None:
        with lock:
            count[0] += 1
            if (kill_at is not None and count[0] >= kill_at) or (kill_event is not None and event == kill_event):
                os.kill(os.getpid(), signal.SIGKILL)

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            mode, flags = args[1], args[2]
            if (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                    mode is None and isinstance(flags, int) and flags & _WRITE_FLAGS):
                hit()
        elif event in ("os.rename", "os.remove", "os.rmdir", "os.link", "shutil.rmtree", "os.truncate",
                       "xr_zstrings.exchange"):
            hit(event)
        elif event == "xr_zstrings.commit" and kill_event is not None and kill_event == f"{event}:{args[0]}":
            os.kill(os.getpid(), signal.SIGKILL)

    sys.addaudithook(hook)
    import obstore

    # every S3 PUT and DELETE, whoever makes it (zarr's ObjectStore and the commit protocol call these)
    for name in ("put", "put_async", "delete", "delete_async"):
        real = getattr(obstore, name)

        def wrapped(*a: Any, _real: Any = real, **k: Any) -> Any:
            hit()
            return _real(*a, **k)

        setattr(obstore, name, wrapped)
    return count


def serve() -> None:
    """Fork server: one JSON command per stdin line, one JSON answer per stdout line."""
    sys.dont_write_bytecode = True  # a .pyc written by one child only would shift the kill points
    # what the writers import lazily, once here rather than in every child
    import dask.array  # noqa: F401 - imported before the first fork
    import netCDF4  # noqa: F401 - imported before the first fork
    import numcodecs  # noqa: F401 - imported before the first fork
    import obstore.store  # noqa: F401 - imported before the first fork
    import zarr.storage  # noqa: F401 - imported before the first fork

    import xr_zstrings.write.convert  # import everything before the first fork
    import xr_zstrings.write.nczarr
    import xr_zstrings.write.zarr3  # noqa: F401 - imported before the first fork

    appended()  # xarray imports its array backends on first use
    out = sys.stdout
    for line in sys.stdin:
        cmd = json.loads(line)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the writer
            os.close(r)
            os.dup2(2, 1)
            count = _counting(cmd.get("kill_at"), cmd.get("kill_event"))
            try:
                run(cmd["writer"], cmd["target"], cmd.get("so"), cmd.get("src"), cmd.get("rows", N),
                    cmd.get("small", False))
                msg = {"status": "ok", "events": count[0]}
            except BaseException as e:  # reported to the test, which fails on it
                msg = {"status": "error", "events": count[0], "error": f"{type(e).__name__}: {e}"}
            os.write(w, json.dumps(msg).encode())
            os._exit(0)
        os.close(w)
        _, status = os.waitpid(pid, 0)
        with os.fdopen(r, "rb") as f:
            body = f.read()
        if os.WIFSIGNALED(status):
            answer = {"status": "killed", "signal": os.WTERMSIG(status)}
        else:
            answer = json.loads(body or b'{"status": "error", "error": "no answer"}')
        out.write(json.dumps(answer) + "\n")
        out.flush()


if __name__ == "__main__":
    serve()
