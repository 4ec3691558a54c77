"""The UTF-8 and overflow policies, and the context errors and reports name values in.

* ``utf8_errors`` ("drop", "replace", "strict"): every value a policy changes during one public
  call (a whole read) is counted in one :class:`PolicyChanges` and warned about once at its end
  (:func:`policy_scope`, :func:`report_change`);
* ``on_overflow`` ("error", "truncate", "widen"): :func:`overflow_error` names the longest value
  and the fix, :func:`warn_truncated` reports the values cut;
* where a value is: :func:`position_label` (inside :func:`at_offset`: in the whole variable, not
  in the part being encoded), the chunk being decoded (:func:`in_chunk`), and why a width cannot
  change (:func:`stored_width`).

The context is held in :mod:`contextvars`: it follows a call into the tasks it starts only when
they run in a copy of its context.  Thread pools do not copy it: submit tasks wrapped by
:func:`in_this_context` (the readers' decode pool does), or set the context inside the task.
Pure: numpy and the standard library only.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any, Literal, ParamSpec, TypeVar

import numpy as np

from ..errors import StringDecodeWarning, StringOverflowError, StringTruncationWarning, ZStringsError, user_stacklevel

__all__ = [
    "OnOverflow",
    "PolicyChanges",
    "Utf8Errors",
    "active_changes",
    "at_offset",
    "check_on_overflow",
    "check_utf8_errors",
    "current_chunk",
    "in_chunk",
    "in_this_context",
    "overflow_error",
    "policy_scope",
    "position_label",
    "report_change",
    "stored_width",
    "warn_truncated",
    "what_prefix",
]

Utf8Errors = Literal["drop", "replace", "strict"]
OnOverflow = Literal["error", "truncate", "widen"]

_UTF8_ERRORS = ("drop", "replace", "strict")
_ON_OVERFLOW = ("error", "truncate", "widen")

_P = ParamSpec("_P")
_R = TypeVar("_R")

# the policy report of the current call (None: a change is warned about at once)
_CHANGES: contextvars.ContextVar[PolicyChanges | None] = contextvars.ContextVar("zstrings_changes", default=None)
# the chunk being decoded (set by the readers), for naming variable-length values
_CHUNK: contextvars.ContextVar[str] = contextvars.ContextVar("zstrings_chunk", default="")
# (start of the part being encoded in the values the user gave, what the part is called)
_OFFSET: contextvars.ContextVar[tuple[tuple[int, ...], str | None]] = contextvars.ContextVar(
    "zstrings_offset", default=((), None))
# why the width being encoded at cannot change (an append), or None
_STORED_WIDTH: contextvars.ContextVar[str | None] = contextvars.ContextVar("zstrings_stored_width", default=None)


def what_prefix(what: str) -> str:
    """``"what: "`` to start an error message with, or nothing when ``what`` is empty."""
    return f"{what}: " if what else ""


def check_utf8_errors(utf8_errors: str) -> str:
    """Validate a UTF-8 policy name, naming the choices when it is wrong."""
    if utf8_errors not in _UTF8_ERRORS:
        raise ZStringsError(
            f"Invalid utf8_errors={utf8_errors!r}: expected one of {_UTF8_ERRORS} ('drop' removes a "
            "character netcdf-c cut in half, 'replace' uses U+FFFD, 'strict' raises)."
        )
    return utf8_errors


def check_on_overflow(on_overflow: str) -> str:
    """Validate an overflow policy name, naming the choices when it is wrong."""
    if on_overflow not in _ON_OVERFLOW:
        raise ZStringsError(f"on_overflow={on_overflow!r}; expected one of {_ON_OVERFLOW}")
    return on_overflow


def in_this_context(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """``fn`` to run on other threads (a pool's tasks) in a copy of the calling context: the
    caller's policy report, offsets and chunk label, as if it ran in the caller.  Each call runs
    in a copy of its own (a context cannot be entered by two threads at once), so what a task
    sets stays in that task."""
    context = contextvars.copy_context()

    def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        return context.copy().run(fn, *args, **kwargs)

    return run


# --------------------------------------------------------------------------------------------
# where a value is
# --------------------------------------------------------------------------------------------


def position_label(i: int, shape: tuple[int, ...]) -> str:
    """Where flat value ``i`` of an array of ``shape`` is, in the whole variable: inside
    ``at_offset`` (a dask block being written) the block's start is added."""
    idx = [i] if len(shape) <= 1 else [int(x) for x in np.unravel_index(i, shape)]
    offset = _OFFSET.get()[0]
    idx = [a + b for a, b in zip(idx, offset, strict=False)] + idx[len(offset):]
    return f"[{idx[0]}]" if len(idx) == 1 else str(tuple(idx))


@contextlib.contextmanager
def at_offset(offset: tuple[int, ...], block: str | None = "the dask block") -> Iterator[None]:
    """Values encoded in this context are a part starting at ``offset`` of the values the user gave:
    errors name positions in the whole (``position_label``) and, if ``block`` names the part, where
    that part starts."""
    token = _OFFSET.set((tuple(int(x) for x in offset), block))
    try:
        yield
    finally:
        _OFFSET.reset(token)


@contextlib.contextmanager
def stored_width(why: str) -> Iterator[None]:
    """Widths in this context cannot change (``why``: e.g. an append keeps the stored width):
    overflow errors advise what can be done instead of ``on_overflow='widen'``."""
    token = _STORED_WIDTH.set(why)
    try:
        yield
    finally:
        _STORED_WIDTH.reset(token)


def current_chunk() -> str:
    """The chunk being decoded in this context (set by the reader), for naming variable-length values."""
    return _CHUNK.get()


@contextlib.contextmanager
def in_chunk(label: str) -> Iterator[None]:
    """Name the chunk being decoded (``current_chunk``) while the block runs."""
    token = _CHUNK.set(label)
    try:
        yield
    finally:
        _CHUNK.reset(token)


# --------------------------------------------------------------------------------------------
# on_overflow
# --------------------------------------------------------------------------------------------


def overflow_error(what: str, lengths: Any, width: int, unit: str, values: Any,
                   shape: tuple[int, ...]) -> StringOverflowError:
    """Values longer than ``width`` (``lengths``: encoded length of each flat value of ``values``,
    an array of ``shape``; ``unit`` their encoding): how many, the longest one (its position in the
    variable, its value and length), and the fix (see ``stored_width``)."""
    lengths = np.asarray(lengths)
    i = int(np.argmax(lengths))
    longest = int(lengths[i])
    value = np.asarray(values).reshape(-1)[i]
    value = repr(value.item() if isinstance(value, np.generic) else value)
    value = value if len(value) <= 60 else value[:50] + "..." + value[-7:]
    why = _STORED_WIDTH.get()
    fix = (f"Pass on_overflow='widen' to use width {longest}, or on_overflow='truncate' to cut them "
           "at a character boundary (with a StringTruncationWarning), or shorten the values"
           if why is None else
           f"{why}: pass on_overflow='truncate' to cut them at a character boundary (with a "
           f"StringTruncationWarning), shorten the values, or rewrite the whole variable with "
           f"maxstrlen={longest} or more")
    offset, part = _OFFSET.get()
    block = f" of {part} at {position_label(0, shape)}" if part and offset else ""
    return StringOverflowError(
        f"{what_prefix(what)}{int((lengths > width).sum())} value(s){block} do not fit: the longest, value "
        f"{position_label(i, shape)} = {value}, needs {longest} bytes{f' of {unit}' if unit else ''} but the "
        f"width is {width} bytes. {fix}"
    )


def warn_truncated(what: str, count: int, width: int, longest: int, unit: str = "UTF-8") -> None:
    """The one truncation warning every encoder gives (count, width, longest value)."""
    warnings.warn(
        StringTruncationWarning(
            f"{what_prefix(what)}{count} value(s) longer than {width} bytes of {unit} "
            f"(longest {longest}) were cut at a character boundary"
        ),
        stacklevel=user_stacklevel(),
    )


# --------------------------------------------------------------------------------------------
# utf8_errors reports: every value a policy changes is counted and warned about
# --------------------------------------------------------------------------------------------


class PolicyChanges:
    """What a ``utf8_errors`` policy changed during one read: per kind ("drop" / "replace") the
    number of values and the first one (by position).  Thread-safe: chunks decode on threads."""

    def __init__(self, what: str = "") -> None:
        self.what = what
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.first: dict[str, tuple[Any, str, bytes, str]] = {}

    def add(self, kind: str, count: int, where: str, before: bytes, after: str) -> None:
        """``count`` values changed by ``kind``; ``where``/``before``/``after`` describe one of them."""
        if count <= 0:
            return
        key = (tuple(int(x) for x in re.findall(r"\d+", where)), where)
        with self._lock:
            self.counts[kind] = self.counts.get(kind, 0) + int(count)
            old = self.first.get(kind)
            if old is None or key < old[0]:
                self.first[kind] = (key, where, before, after)

    def warn(self) -> None:
        """One StringDecodeWarning per kind of change (nothing when nothing changed)."""
        for kind in ("drop", "replace"):
            n = self.counts.get(kind, 0)
            if not n:
                continue
            _, where, before, after = self.first[kind]
            if kind == "drop":
                what_happened = (
                    f"utf8_errors='drop' removed an incomplete UTF-8 character from the end of {n} "
                    "value(s) (what netcdf-c's byte truncation leaves)"
                )
            else:
                what_happened = f"utf8_errors='replace' put U+FFFD for invalid UTF-8 into {n} value(s)"
            warnings.warn(
                StringDecodeWarning(
                    f"{what_prefix(self.what)}{what_happened}; the first is {where}: stored {before!r}, read "
                    f"as {after!r}. Pass utf8_errors='strict' to raise instead, or "
                    "string_dtype='bytes' to read the stored bytes."
                ),
                stacklevel=user_stacklevel(),
            )


def active_changes() -> PolicyChanges | None:
    """The PolicyChanges this context reports into (None: report by warning at once)."""
    return _CHANGES.get()


@contextlib.contextmanager
def policy_scope(what: str = "") -> Iterator[PolicyChanges]:
    """Collect the policy changes of one public call and warn once at its end; inside an outer
    scope (a whole read), report into that one instead."""
    outer = _CHANGES.get()
    if outer is not None:
        yield outer
        return
    changes = PolicyChanges(what)
    token = _CHANGES.set(changes)
    try:
        yield changes
    finally:
        _CHANGES.reset(token)
    changes.warn()


def report_change(kind: str, count: int, where: str, before: bytes, after: str) -> None:
    """Record that a policy changed ``count`` values (into the active scope, else warn now)."""
    changes = _CHANGES.get()
    if changes is None:
        changes = PolicyChanges()
        changes.add(kind, count, where, before, after)
        changes.warn()
    else:
        changes.add(kind, count, where, before, after)
