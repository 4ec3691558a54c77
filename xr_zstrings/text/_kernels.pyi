"""Type stub of the compiled string kernels (``_kernels.c``, built by setup.py; optional).

Every function takes positional arguments only (``METH_VARARGS``). ``policy`` is the UTF-8 error
policy code of :mod:`xr_zstrings.text.fixed`; ``out`` is a StringDType array written in place;
``sel`` selects output positions (None: all). Status codes: 0 ok, otherwise the kind of the first
problem at ``index``.
"""

import sys
from collections.abc import Sequence
from typing import Any

if sys.version_info >= (3, 12):
    from collections.abc import Buffer
else:
    from typing_extensions import Buffer

import numpy as np
import numpy.typing as npt

def pack_at(out: np.ndarray, positions: npt.ArrayLike | None, values: list[bytes], /) -> None: ...
def fixed_to_T(
    buf: Buffer, width: int, out: np.ndarray, sel: Any, policy: int, trailing: bool = ...,
    stats: np.ndarray | None = ..., /,
) -> npt.NDArray[np.intp]: ...
def offsets_to_T(
    data: Buffer, offsets: np.ndarray, out: np.ndarray, sel: Any, policy: int, stats: np.ndarray | None = ..., /,
) -> npt.NDArray[np.intp]: ...
def vlen_utf8_to_T(
    buf: Buffer, n_expected: int, allow_trailing: bool, out: np.ndarray, sel: Any, policy: int,
    stats: np.ndarray | None = ..., /,
) -> npt.NDArray[np.intp] | None: ...
def utf8_scan(values: np.ndarray | Sequence[str], allow_nul: bool = ..., /) -> tuple[int, int, npt.NDArray[np.int64]]: ...
def fill_fixed_bounded(
    values: np.ndarray | Sequence[str], width: int, out: Buffer, zeroed: bool = ..., /,
) -> tuple[int, int, int, int]: ...
def T_to_objects(values: np.ndarray, /) -> npt.NDArray[np.object_]: ...
def utf8_pack(
    values: np.ndarray | Sequence[str], allow_nul: bool = ..., /,
) -> tuple[int, int, npt.NDArray[np.int64] | None, bytes | bytearray | None]: ...
def vlen_utf8_from_offsets(data: Buffer, offsets: npt.NDArray[np.int64], /) -> bytes: ...
def vlen_to_offsets(
    buf: Buffer, n_expected: int, allow_trailing: bool, validate: bool, off_out: Any = ..., dat_out: Any = ..., /,
) -> tuple[Any, Any, bool] | None: ...
def fixed_to_offsets(
    buf: Buffer, width: int, trailing: bool, validate: bool, off_out: Any = ..., dat_out: Any = ..., /,
) -> tuple[Any, Any, bool]: ...
def offsets_check(data: Buffer, offsets: np.ndarray, validate: bool, /) -> int: ...
def utf32_to_offsets(
    buf: Buffer, nchar: int, swap: bool, off_out: Any = ..., dat_out: Any = ..., /,
) -> tuple[Any, Any, bool] | None: ...
