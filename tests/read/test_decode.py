"""read.decode.Decode: the one table of decode modes the readers ask."""

from __future__ import annotations

import pytest

from xr_zstrings.read.decode import Decode


def test_every_mode_is_text_bytes_or_neither_once():
    """A result is str or bytes (or numbers / zarr-python's), never both; the groups the readers
    ask are inside those."""
    for d in Decode:
        assert not (d.text and d.as_bytes), d
        assert (d.text or d.as_bytes) == (d not in (Decode.NUMERIC, Decode.ZARR_PYTHON)), d
        if d.objects:
            assert d.as_bytes, d
        if d.fixed_width or d.variable_length:
            assert d.text, d
        assert not (d.joins_chars and d.keeps_chars), d


def test_modes_are_their_names():
    """Mode names given as strings (as read.variables chooses them) convert and compare."""
    assert Decode("char") is Decode.CHAR and Decode.CHAR == "char"
    assert "text-S" in {Decode.TEXT_S} and Decode.VLEN_BYTES in ("bytes", "vlen-bytes")
    assert [d for d in Decode if d.keeps_chars] == [Decode.CHAR_SEP, Decode.CHAR_RAW]
    with pytest.raises(ValueError, match="'chars'"):
        Decode("chars")
