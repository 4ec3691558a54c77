"""The one place that uses zarr-python names outside its public API, each with a public fallback.

Everything else in xr_zstrings uses zarr-python's public API (``zarr.storage``, ``zarr.abc``,
``zarr.buffer``, ``zarr.dtype``, ``zarr.registry``, ``Codec.decode``/``encode``).  Three private
names are kept, for the reasons given below; ``PRIVATE_NAMES`` lists them so that
``tests/io/test_zarr_compat.py`` fails loudly when a zarr release moves one (the code would then
silently run on the slower public fallback), and ``show_versions()`` reports them.

* ``zarr.core.sync.sync``: runs a coroutine on zarr-python's own I/O event loop.  zarr has no
  public "run this coroutine" function, and stores zarr created (fsspec ones in particular) are
  bound to that loop.  Fallback: our own event loop on a daemon thread, which serves every
  loop-agnostic store (local, zip, memory, obstore).
* ``Codec._decode_sync`` / ``Codec._encode_sync``: one chunk through one codec without the event
  loop.  The public ``Codec.decode([(chunk, spec)])`` is a coroutine, whose event-loop round trip
  costs many times a small chunk's decoding and dominates sharded reads (numbers:
  docs/performance.md).  Fallback: the public batch method through :func:`sync`.
* ``zarr.core.array_spec.ArraySpec`` / ``ArrayConfig``: the chunk description every codec method
  takes.  zarr-python exports no constructor for it; there is no public path, so a zarr that
  moved it fails with a clear UnsupportedError when a codec chain needs it (and in the test).

Set ``XR_ZSTRINGS_ZARR_PUBLIC=1`` to force the public fallbacks (read on every call; the tests
run both paths and compare).
"""

from __future__ import annotations

import asyncio
import importlib
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from .errors import UnsupportedError

__all__ = ["PRIVATE_NAMES", "array_spec", "missing_private_names", "run_codec", "sync"]

PUBLIC_ENV = "XR_ZSTRINGS_ZARR_PUBLIC"

# (module, attribute path) of every private name used here; codec methods are looked up on gzip
PRIVATE_NAMES: tuple[tuple[str, str], ...] = (
    ("zarr.core.sync", "sync"),
    ("zarr.core.array_spec", "ArraySpec"),
    ("zarr.core.array_spec", "ArrayConfig"),
    ("zarr.codecs", "GzipCodec._decode_sync"),
    ("zarr.codecs", "GzipCodec._encode_sync"),
)

T = TypeVar("T")


def _public_only() -> bool:
    return os.environ.get(PUBLIC_ENV, "") not in ("", "0")


def _lookup(module: str, attrs: str) -> Any:
    """``module.attrs`` (a dotted attribute path), or None when the installed zarr lacks it."""
    try:
        obj: Any = importlib.import_module(module)
        for a in attrs.split("."):
            obj = getattr(obj, a)
        return obj
    except (ImportError, AttributeError):
        return None


def missing_private_names() -> list[str]:
    """The private zarr-python names this module uses that the installed zarr no longer has."""
    return [f"{m}.{a}" for m, a in PRIVATE_NAMES if _lookup(m, a) is None]


# --------------------------------------------------------------------------------------------
# running coroutines
# --------------------------------------------------------------------------------------------

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def _own_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _loop_lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="xr_zstrings-io", daemon=True).start()
            _loop = loop
        return _loop


def sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a zarr-python coroutine to completion from synchronous code (any thread)."""
    if not _public_only():
        zsync = _lookup("zarr.core.sync", "sync")
        if zsync is not None:
            return zsync(coro)
    return asyncio.run_coroutine_threadsafe(coro, _own_loop()).result()


# --------------------------------------------------------------------------------------------
# codecs
# --------------------------------------------------------------------------------------------


def array_spec(shape: tuple[int, ...], zdtype: Any, fill_value: Any, prototype: Any) -> Any:
    """zarr-python's ArraySpec for one chunk (C order, empty chunks written)."""
    spec_cls = _lookup("zarr.core.array_spec", "ArraySpec")
    config_cls = _lookup("zarr.core.array_spec", "ArrayConfig")
    if spec_cls is None or config_cls is None:
        import zarr

        raise UnsupportedError(
            f"zarr {zarr.__version__} no longer has zarr.core.array_spec.ArraySpec, which running "
            "zarr-python's codecs needs. Fix: install a zarr version xr_zstrings supports "
            "(see `zstrings --version`) or report it"
        )
    return spec_cls(
        shape=shape,
        dtype=zdtype,
        fill_value=fill_value,
        config=config_cls(order="C", write_empty_chunks=True),
        prototype=prototype,
    )


def run_codec(codec: Any, method: str, data: Any, spec: Any) -> Any:
    """``codec.decode``/``encode`` of one chunk (``method`` is "decode" or "encode")."""
    if not _public_only():
        fast = getattr(codec, f"_{method}_sync", None)
        if fast is not None:
            return fast(data, spec)
    return sync(getattr(codec, method)([(data, spec)]))[0]
