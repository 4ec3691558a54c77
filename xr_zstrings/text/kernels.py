"""Loading the optional compiled string kernels (``_kernels.c``), or saying why they are not in use.

One place decides whether the kernels run (built, importable, not switched off with
``XR_ZSTRINGS_NO_EXT=1``); every decoder and encoder asks :func:`kernels` and falls back to
numpy/pyarrow when it returns None.  Pure: the standard library only.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

__all__ = ["BUILD_ERROR_FILE", "NO_EXT_ENV", "POLICY_CODE", "kernels", "kernels_unavailable_reason"]

# the kernels' code for each utf8_errors policy (their ``policy`` argument)
POLICY_CODE = {"strict": 0, "drop": 1, "replace": 2}

_kernels_mod: Any = None
# why the compiled kernels are not in use (None while they are, or before the first kernels() call)
kernels_unavailable_reason: str | None = None
NO_EXT_ENV = "XR_ZSTRINGS_NO_EXT"
# written next to the package by setup.py when the kernels failed to build (the compiler's error)
BUILD_ERROR_FILE = "_kernels_build_error.txt"


def kernels() -> Any:
    """The compiled kernels module (``xr_zstrings.text._kernels``), or None.

    None when the extension was not built (no C compiler at install time) or when the
    environment variable ``XR_ZSTRINGS_NO_EXT=1`` forces the pure numpy/pyarrow fallback (read
    on every call, so tests can switch paths).  Both paths give identical results and errors.
    A missing extension warns once per process (RuntimeWarning) with the build's error.
    """
    global _kernels_mod, kernels_unavailable_reason
    if os.environ.get(NO_EXT_ENV, "") not in ("", "0"):
        kernels_unavailable_reason = f"{NO_EXT_ENV}=1 forces the pure-Python fallback"
        return None
    if _kernels_mod is None:
        mod: Any  # the module, or False: the build failed (warned once)
        try:
            from . import _kernels as mod

            kernels_unavailable_reason = None
        except ImportError as e:
            mod = False
            kernels_unavailable_reason = _build_failure() or f"xr_zstrings.text._kernels cannot be imported: {e}"
            warnings.warn(
                f"xr_zstrings: the compiled string kernels are not in use ({kernels_unavailable_reason}); "
                "running on the pure numpy/pyarrow fallback: same results, several times slower. "
                "Fix: install a C compiler (gcc or clang) and reinstall xr_zstrings (pip install -v "
                f"shows the build); set {NO_EXT_ENV}=1 to use the fallback without this warning",
                RuntimeWarning,
                stacklevel=2,
            )
        _kernels_mod = mod
    elif _kernels_mod:
        kernels_unavailable_reason = None
    return _kernels_mod or None


def _build_failure() -> str | None:
    """The build error setup.py recorded at install time, if the kernels failed to build."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), BUILD_ERROR_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read().strip()
    except OSError:
        return None
    return f"the build at install time failed: {text.splitlines()[0][:300]}" if text else None
