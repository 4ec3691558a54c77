"""``xr_zstrings.virtualize`` without the ``[virtual]`` extra (CI's Python 3.11 jobs, where VirtualiZarr
and icechunk have no wheels): the package imports, and the call names what to install."""

from __future__ import annotations

import sys

import pytest

import xr_zstrings
from xr_zstrings import UnsupportedError


def test_virtualize_is_public_and_importable_without_the_extra() -> None:
    assert "virtualize" in xr_zstrings.__all__ and callable(xr_zstrings.virtualize)


@pytest.mark.parametrize("missing", ["virtualizarr", "icechunk"])
def test_without_the_extra_virtualize_names_what_to_install(missing: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, missing, None)  # (import of it raises ImportError)
    named = missing if sys.version_info >= (3, 12) else f"(virtualizarr|{missing})"  # (3.11: neither installed)
    with pytest.raises(UnsupportedError, match=rf"{named} is not installed.*pip install \"xr_zstrings\[virtual\]\""):
        xr_zstrings.virtualize("stations.zarr", object())
