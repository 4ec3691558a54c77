"""One error hierarchy for xr_zstrings.

Every message names the store, the key, what was found, what was expected and the fix;
``ZStringsError`` is a ``ValueError`` so callers that catch ``ValueError`` keep working.
"""

from __future__ import annotations

__all__ = [
    "ChunkError",
    "CodecDroppedWarning",
    "ConcurrentWriteError",
    "ConditionalWriteWarning",
    "DimensionError",
    "ForkedProcessError",
    "GroupNotFoundError",
    "IncompleteStoreError",
    "JournalError",
    "MetadataError",
    "MissingStringsWarning",
    "NetcdfCompatibilityWarning",
    "RegionError",
    "StoreConnectionError",
    "StoreNotFoundError",
    "StorePermissionError",
    "StoreReplacedError",
    "StringDecodeError",
    "StringDecodeWarning",
    "StringOverflowError",
    "StringTruncationWarning",
    "TargetExistsError",
    "UnknownCodecError",
    "UnsupportedError",
    "VirtualizationWarning",
    "ZStringsError",
]


class ZStringsError(ValueError):
    """Base class of every error xr_zstrings raises on bad input."""


class MetadataError(ZStringsError):
    """Metadata JSON that is missing, malformed or inconsistent."""


class IncompleteStoreError(MetadataError):
    """A store whose write did not finish (interrupted, killed, or still running elsewhere)."""


class JournalError(IncompleteStoreError):
    """A ``.zstrings-journal`` no write of this store left: unreadable, not a journal, or of another
    store (a copy, a restore from backup, files moved between stores). Nothing acts on it (neither
    ``repair`` nor a writer's recovery): it may name chunks and metadata that are not its write's.
    ``found``: what is wrong with it, in words (``zstrings check`` prints it as the store's state)."""

    found: str = ""

    @classmethod
    def of(cls, found: str, doing: str = "") -> JournalError:
        """The error for a journal of which ``found`` says what is wrong; ``doing`` leads the message
        ("Cannot repair X: ")."""
        e = cls(f"{doing}{found}. Nothing acts on a journal no write of this store left (it may name chunks "
                "and metadata that are not its write's), so nothing was changed. If you know no writer is "
                "running, remove that .zstrings-journal file (object), then run `zstrings check` again.")
        e.found = found
        return e


class ConcurrentWriteError(ZStringsError):
    """Another writer holds the target: the local writer lock for longer than the lock timeout, or
    an object store's write journal (the loser of two overlapping writers gets this, before it
    writes anything, or at its commit point when the other committed first)."""


class StoreReplacedError(ConcurrentWriteError):
    """A local store that another writer replaced (``mode="w"``, an append, added variables) after it
    was opened: its chunks no longer belong to the metadata read at open. Open it again."""


class DimensionError(MetadataError):
    """Dimension references that dangle, disagree with shapes, or cannot be aligned."""


class UnsupportedError(ZStringsError):
    """A dtype, codec or layout that xr_zstrings does not (yet) read or write."""


class UnknownCodecError(UnsupportedError):
    """A codec no library here can build: the array is left out of its group, the rest reads."""


class ChunkError(ZStringsError):
    """A chunk whose bytes cannot be decoded into the declared chunk shape and dtype."""


class StringDecodeError(ZStringsError):
    """String bytes that are not valid UTF-8 under the chosen policy."""


class StringOverflowError(ZStringsError):
    """Strings that do not fit the declared fixed width under ``on_overflow="error"``."""


class RegionError(ZStringsError, KeyError, TypeError):
    """A ``region=`` that does not fit the Dataset or the store. Also the ``KeyError`` and
    ``TypeError`` xarray's ``to_zarr(region=...)`` raises for the same mistakes, so code written for
    xarray catches it."""

    __str__ = BaseException.__str__  # (KeyError's would quote the message)


class StoreNotFoundError(ZStringsError, FileNotFoundError):
    """No store (or no Zarr group) at the given path or URL."""


class GroupNotFoundError(StoreNotFoundError):
    """The store opens but has no group at the requested path (``group=...``); an ``OSError``
    (``FileNotFoundError``) as netCDF4 and zarr-python raise it, and a ``ZStringsError``."""


class StorePermissionError(ZStringsError, PermissionError):
    """The object store refused the request (missing or wrong credentials, no permission)."""


class StoreConnectionError(ZStringsError, ConnectionError):
    """The object store could not be reached (endpoint down, DNS, timeout) within the retry budget."""


class ForkedProcessError(ZStringsError, RuntimeError):
    """A store served by obstore (object storage) or icechunk reached from a process forked after its
    parent used them (their requests would never return there); the message names the fix (the
    'spawn' start method)."""


class TargetExistsError(ZStringsError, FileExistsError):
    """The write target exists (not empty) and ``mode="w-"`` never overwrites; ``mode="w"`` replaces it."""


class StringTruncationWarning(UserWarning):
    """Strings were cut (at a character boundary) because the user chose to truncate."""


class CodecDroppedWarning(UserWarning):
    """A codec of the source has no equivalent in the Zarr format being written and was left out."""


class StringDecodeWarning(UserWarning):
    """A ``utf8_errors`` policy changed values while reading ("drop" shortened them, "replace" put
    U+FFFD in them); the message gives the count, the first value and how to read the bytes. Also:
    a text attribute that is not UTF-8 came back as its bytes."""


class MissingStringsWarning(UserWarning):
    """Missing string values were written in zarrs' nullable ``optional`` type (no string
    ``_FillValue`` was given): engine="zstrings", zarrs, and zarr-python / engine="zarr" through this
    package's zarr plugin read them missing; a reader without xr_zstrings installed cannot open the array."""


class ConditionalWriteWarning(UserWarning):
    """The object store ignores conditional writes (``If-None-Match``/``If-Match``): two writers
    starting at the same moment cannot be told apart (docs/reliability.md says what remains)."""


class NetcdfCompatibilityWarning(UserWarning):
    """The store was written for an older netcdf-c (``to_nczarr(..., netcdf_c=...)``) and something
    changed so that version can read it: strings as NC_CHAR, an unlimited dimension made fixed, ..."""


class VirtualizationWarning(UserWarning):
    """A virtual store (``xr_zstrings.virtual``) differs from its source: a variable left out, or read
    differently than engine="netcdf4" reads the file; the message names the variable and why."""


#: the packages (and standard modules) whose frames a warning passes on its way to the user's line
_LIBRARIES = ("xr_zstrings", "xarray", "zarr", "numcodecs", "dask", "numpy", "pandas", "contextlib",
              "functools", "threading", "concurrent", "virtualizarr")


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes ``warnings.warn``, called by the caller of this, point at the
    user's line (their ``open_dataset``, ``to_zarr_v3``, ...): the first frame outside xr_zstrings
    and the libraries it is called through. 1 (the caller's own line) where none is (a worker thread)."""
    import os
    import sys

    prefixes = []
    for name in _LIBRARIES:
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None)
        if file:
            prefixes.append(os.path.dirname(file) + os.sep if file.endswith("__init__.py") else file)
    frame = sys._getframe(1)  # the function that calls warnings.warn: stacklevel 1
    level = 1
    while frame is not None:
        if not frame.f_code.co_filename.startswith(tuple(prefixes)):
            return level
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return 1
