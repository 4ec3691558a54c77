"""How a read returns strings (the ``open_dataset`` keywords, checked when the store is opened)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..text.dtypes import is_arrow_string_dtype, resolve_string_dtype
from ..text.policy import Utf8Errors, check_utf8_errors
from ..threads import check_decode_threads

__all__ = ["DEFAULT_OPTIONS", "ReadOptions"]


@dataclass(frozen=True)
class ReadOptions:
    """How strings come back: output dtype, UTF-8 policy, NC_CHAR joining, masking of a string
    ``_FillValue`` (xarray's ``mask_and_scale``)."""

    string_dtype: Any = "T"
    utf8_errors: Utf8Errors = "drop"
    concat_characters: bool = True
    decode_threads: int | None = None  # None: $XR_ZSTRINGS_DECODE_THREADS or min(8, CPUs); 1: no pool
    mask_and_scale: bool = True
    #: a pure Zarr array's ``fill_value`` marks missing values (xarray's ``use_zarr_fill_value_as_mask``;
    #: None: for Zarr v2 yes, for v3 no, as engine="zarr" decides it)
    use_zarr_fill_value_as_mask: bool | None = None
    #: string_dtype="arrow" (xarray only): decoded as "T", 1-D text handed to xarray as pandas
    #: Arrow-backed arrays after CF decoding (``string_dtype`` then reads "T"; xarray_arrow.py)
    arrow: bool = False

    def __post_init__(self) -> None:
        if is_arrow_string_dtype(self.string_dtype):
            object.__setattr__(self, "string_dtype", "T")
            object.__setattr__(self, "arrow", True)
        # reject bad options when the store is opened, not when data are first read
        resolve_string_dtype(self.string_dtype)
        check_utf8_errors(self.utf8_errors)
        object.__setattr__(self, "decode_threads", check_decode_threads(self.decode_threads))


#: the options of a read that passes none (frozen: shared)
DEFAULT_OPTIONS = ReadOptions()
