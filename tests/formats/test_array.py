"""formats/array.py: the one integer-list rule of both versions' metadata (shape, chunks, chunk_shape)."""

from __future__ import annotations

import pytest

from xr_zstrings.errors import MetadataError
from xr_zstrings.formats.array import int_tuple


def test_int_tuple_takes_lists_of_integers_at_or_over_the_minimum():
    assert int_tuple([3, 0], where="/a", what="shape", minimum=0) == (3, 0)
    assert int_tuple([], where="/a", what="shape", minimum=0) == ()
    assert int_tuple(["4", 2], where="/a", what="chunks", minimum=1, decimal_strings=True) == (4, 2)


@pytest.mark.parametrize("value", [[0], [True], [1.0], "4", None, [["1"]], ["x"]])
def test_int_tuple_refuses_anything_else_naming_where_and_what(value):
    with pytest.raises(MetadataError, match=r"Invalid chunks at /a/\.zarray: got .*expected a list of integers >= 1"):
        int_tuple(value, where="/a/.zarray", what="chunks", minimum=1, decimal_strings=True)


def test_int_tuple_decimal_strings_only_where_asked():
    """Zarr v3 asks for JSON integers; the v2/NCZarr reader takes "5" (as it takes every integer)."""
    with pytest.raises(MetadataError, match="Fix it"):
        int_tuple(["5"], where="/a/zarr.json", what="shape", minimum=0, fix="Fix it.")
