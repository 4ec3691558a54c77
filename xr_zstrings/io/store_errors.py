"""Store exceptions mapped to the package's error classes.

obstore (object storage) and the OS (local stores) raise their own exception types;
``mapped_errors`` re-raises them as ``StoreNotFoundError``, ``StorePermissionError``,
``StoreConnectionError`` or ``ZStringsError`` with a message that says what to do, so a caller
catches one hierarchy whatever the store. Its own module because the writers wrap their store calls
in it as well as ``ZStore`` does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ..errors import StoreConnectionError, StoreNotFoundError, StorePermissionError, ZStringsError
from .redact import redact

__all__ = ["local_errors", "local_os_error", "mapped_errors"]


@contextlib.contextmanager
def mapped_errors(what: str, probe: Any = None) -> Iterator[None]:
    """Re-raise a store library's exception as one of ours (``_store_error``); ours pass through."""
    try:
        yield
    except ZStringsError:
        raise
    except Exception as e:
        err = _store_error(e, what, probe)
        if err is None:
            raise
        raise err from e


#: what bounds a request to object storage (``storage_options`` keys, defaults in ``s3_store``)
_RETRY_HELP = ("each request gives up after storage_options 'timeout' (default 30 s; connecting: "
               "'connect_timeout', 5 s) and is retried up to 'max_retries' times (default 2) within "
               "'retry_timeout' (default 10 s); see docs/cloud.md")


def local_os_error(e: BaseException, what: str) -> ZStringsError | None:
    """A local file system's refusal (an ``OSError`` the OS raised, which carries an errno and the
    path; object storage's errors carry none) in words naming the path and the local cause: a
    permission problem, a read-only file system, or a full one (no space, or the user's quota). None
    for any other error."""
    import errno

    full = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
    if not isinstance(e, OSError) or e.errno not in (errno.EACCES, errno.EPERM, errno.EROFS, *full):
        return None
    path = redact(e.filename if e.filename is not None else "?")
    cause = f"[Errno {e.errno}] {e.strerror}"
    if e.errno in full:
        where = f"the file system holding {path!r} is full" if e.filename is not None else "the file system is full"
        return ZStringsError(
            f"{what}: {where} ({cause}): the disk is full. Free space there (or write to another location), "
            "then write again. An append or added variables that found no space left to undo itself leave the "
            "store as `zstrings check` names it (an interrupted write; readers see the version before it): "
            "then run `zstrings repair` on the store once space is freed, before writing again.")
    if e.errno == errno.EROFS:
        return ZStringsError(
            f"{what}: {path!r} is on a read-only file system ({cause}). Write to a location on a "
            "writable file system (another target, or a copy of the store), or remount it read-write.")
    return StorePermissionError(
        f"{what}: permission denied on the local path {path!r} ({cause}). This is a local file "
        "permission problem: the user running this may not read or write that path (or its folder); "
        "check the owner and mode of it and of its folders (ls -ld), or use a location this user owns.")


@contextlib.contextmanager
def local_errors(what: str) -> Iterator[None]:
    """A local file system's refusal raised inside (``local_os_error``: a full disk, a permission, a
    read-only file system) re-raised as our error naming ``what`` and the fix, not a bare OSError;
    any other error unchanged."""
    try:
        yield
    except OSError as e:
        err = local_os_error(e, what)
        if err is None:
            raise
        raise err from e


def _store_error(e: BaseException, what: str, probe: Any = None) -> Exception | None:
    """Map a store library's exception to our hierarchy by its type, with a message that says what
    to do. obstore types GET/PUT/HEAD failures (``FileNotFoundError``, ``PermissionDeniedError``,
    ``UnauthenticatedError``) but reports a failed LIST, and a server that does not answer, as
    ``GenericError``: then ``probe()`` (a typed HEAD request on the same store) tells which it was."""
    from obstore import exceptions as ox

    local = local_os_error(e, what)
    if local is not None:  # a local path: not a matter of credentials
        return local
    name = type(e).__name__
    text = redact(str(e).split("\n", 1)[0])[:400]  # (the library's text may quote a URL)
    listed = False  # a failed LIST whose bucket answers "not found": the bucket does not exist
    if isinstance(e, ox.GenericError) and probe is not None:
        found = probe()
        listed = isinstance(found, FileNotFoundError | ox.NotFoundError)
        if isinstance(found, PermissionError | ox.PermissionDeniedError | ox.UnauthenticatedError
                      | FileNotFoundError | ox.NotFoundError):
            e, name = found, type(found).__name__
            text = f"{text} (then, asked for one object: {redact(str(found).splitlines()[0])[:200]})"
    if isinstance(e, PermissionError | ox.PermissionDeniedError | ox.UnauthenticatedError):
        return StorePermissionError(
            f"{what}: permission denied ({name}: {text}). Check the credentials in storage_options "
            "(key/secret/token, or anon=True for a public bucket) or the AWS_* environment variables, "
            "and that they may read (and, for writing, write) this bucket and prefix."
        )
    if listed:
        return StoreNotFoundError(
            f"{what}: the bucket does not exist ({text}). Check the bucket name in the URL and the "
            "endpoint_url in storage_options."
        )
    if isinstance(e, FileNotFoundError | ox.NotFoundError):
        return StoreNotFoundError(
            f"{what}: not found ({name}: {text}). Check the bucket name in the URL (the bucket may not "
            "exist) and the endpoint_url in storage_options."
        )
    if isinstance(e, ConnectionError | TimeoutError | ox.GenericError):
        return StoreConnectionError(
            f"{what}: the object store did not answer or failed ({name}: {text}). Check endpoint_url in "
            f"storage_options (or AWS_ENDPOINT_URL) and the network; {_RETRY_HELP}."
        )
    if isinstance(e, OSError | ValueError | ox.BaseError):
        return ZStringsError(f"{what}: {name}: {text}")
    return None  # not a storage error: let it propagate unchanged
