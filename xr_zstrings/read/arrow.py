"""Variables as pyarrow arrays, built from the chunk buffers (no Python ``str``, no StringDType).

``read_arrow`` is the public way in: any variable this package reads (every Zarr version, string
layout and number of dimensions) as a ``pyarrow.ChunkedArray``, flattened in C order, missing
values as nulls. The chunk readers (``ChunkedArray.read_arrow``) and ``LazyArray.arrow`` use the
helpers here to cut a chunk's box out of its Arrow array and to put the boxes in order.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import UnsupportedError
from ..io.store import open_store
from .decode import Decode
from .lazy import LazyArray
from .options import ReadOptions
from .tree import open_tree

__all__ = ["arrow_type", "assemble", "box_of", "fill_run", "mask_equal", "read_arrow", "values_to_arrow"]


def arrow_type(decode: Decode) -> Any:
    """The Arrow type of a variable decoded by ``decode``: large_binary for bytes, else large_string."""
    import pyarrow as pa

    return pa.large_binary() if decode.as_bytes else pa.large_string()


def fill_run(n: int, fill: Any, typ: Any) -> Any:
    """``n`` elements of the fill value (None: nulls) as an Arrow array of ``typ``."""
    import pyarrow as pa

    if fill is None:
        return pa.nulls(n, typ)
    return pa.repeat(pa.scalar(fill, typ), n)


def box_of(arr: Any, src: tuple[slice, ...], chunk_shape: tuple[int, ...], order: str) -> Any:
    """The ``src`` box (C order) of a chunk's values ``arr`` (flat, in the chunk's storage
    ``order``): the array itself, a zero-copy slice when the box is one run covering at least half
    of the chunk, else a compact copy (``take``: a small box does not keep the whole chunk alive)."""
    from .chunked import ChunkedArray

    sel = ChunkedArray.sel(src, chunk_shape, order)
    if sel is None:
        return arr
    if sel.size and 2 * sel.size >= len(arr) and int(sel[-1]) - int(sel[0]) + 1 == sel.size \
            and bool((np.diff(sel) == 1).all()):
        return arr.slice(int(sel[0]), int(sel.size))
    return arr.take(sel)


def values_to_arrow(values: np.ndarray, decode: Decode) -> Any:
    """Values already read (``LazyArray[key]``) flattened in C order as a one-chunk
    ``pyarrow.ChunkedArray``: text as large_string, bytes as large_binary (missing values -> nulls),
    numbers as their own Arrow type. The fallback of the layouts with no Arrow path."""
    import pyarrow as pa

    flat = np.ravel(values)
    if not (decode.text or decode.as_bytes):
        return pa.chunked_array([pa.array(flat)])
    typ = arrow_type(decode)
    if flat.dtype.kind == "S":  # (pyarrow would end a numpy |S value at its first NUL; numpy keeps them)
        return pa.chunked_array([pa.array(flat.tolist(), typ)], type=typ)
    if flat.dtype.kind == "O":
        return pa.chunked_array([pa.array(flat, typ, from_pandas=True)], type=typ)
    return pa.chunked_array([pa.array(flat).cast(typ)], type=typ)


def mask_equal(out: Any, value: Any) -> Any:
    """``out`` (a ``pyarrow.ChunkedArray``) with the elements equal to ``value`` (str, or bytes:
    encoded to compare with text) null; the buffers are not copied."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from ..text.arrow import with_nulls

    if pa.types.is_large_binary(out.type) and isinstance(value, str):
        value = value.encode("utf-8")
    if pa.types.is_large_string(out.type) and isinstance(value, bytes):
        value = value.decode("utf-8", "surrogateescape")
    chunks = []
    for c in out.chunks:
        hit = pc.fill_null(pc.equal(c, pa.scalar(value, out.type)), False).to_numpy(zero_copy_only=False)
        chunks.append(with_nulls(c, hit) if hit.any() else c)
    return pa.chunked_array(chunks, type=out.type)


def _flat_span(dst: tuple[slice, ...], out_shape: tuple[int, ...]) -> tuple[int, int] | None:
    """(first flat position, length) of box ``dst`` in a C-order array of ``out_shape`` when the box
    is one contiguous run there (every axis after its first longer one is whole), else None."""
    longer = False
    for d, size in zip(dst, out_shape, strict=True):
        n = d.stop - d.start
        if longer and n != size:
            return None
        longer = longer or n > 1
    start = int(np.ravel_multi_index(tuple(d.start for d in dst), out_shape)) if out_shape else 0
    return start, math.prod(d.stop - d.start for d in dst)


def _flat_indices(box: tuple[Any, ...], out_shape: tuple[int, ...]) -> np.ndarray:
    """Flat C-order positions in ``out_shape`` of an outer box (per axis: a slice or an index array)."""
    idx = np.zeros((), np.int64)
    stride = 1
    strides = []
    for n in reversed(out_shape):
        strides.append(stride)
        stride *= n
    for b, st, n in zip(box, reversed(strides), out_shape, strict=True):
        ax = np.arange(n, dtype=np.int64)[b] if isinstance(b, slice) else np.asarray(b, np.int64)
        idx = np.add.outer(idx, ax * st)
    return idx.reshape(-1)


def assemble(pieces: list[tuple[tuple[Any, ...], Any]], out_shape: tuple[int, ...], fill: Any, typ: Any) -> Any:
    """Boxes of a C-order result of ``out_shape`` (per piece: its box, per axis a slice or an index
    array, and its values in C order, or None for the fill) as one ``pyarrow.ChunkedArray``;
    places no piece covers are the fill (None: nulls).

    When every box is one run of the result, the pieces stay Arrow chunks of their own, in order
    (nothing copied); else boxes of slices are put in place one band of rows at a time (the boxes
    sharing their first axis' slice: one ``take`` and one Arrow chunk each, so the copy made in
    between is one band's), and boxes with index arrays all at once.
    """
    slices = all(isinstance(s, slice) for b, _ in pieces for s in b)
    spans = [_flat_span(b, out_shape) if slices else None for b, _ in pieces]
    runs = [(s, arr) for s, (_, arr) in zip(spans, pieces, strict=True) if s is not None]
    if len(runs) == len(pieces):
        return _in_order(runs, math.prod(out_shape), fill, typ)
    if not slices or len(out_shape) < 2:
        return _taken(pieces, out_shape, fill, typ)
    bands: dict[tuple[int, int], list[tuple[tuple[Any, ...], Any]]] = {}
    for box, arr in pieces:  # (chunk-aligned along the first axis: equal or disjoint)
        bands.setdefault((box[0].start, box[0].stop), []).append((box, arr))
    rest = math.prod(out_shape[1:])
    band_runs = []
    for (a, b), members in bands.items():
        shape = (b - a, *out_shape[1:])
        moved = [((slice(0, b - a), *box[1:]), arr) for box, arr in members]
        band_runs.append(((a * rest, (b - a) * rest), _taken(moved, shape, fill, typ).chunk(0)))
    return _in_order(band_runs, math.prod(out_shape), fill, typ)


def _in_order(runs: list[tuple[tuple[int, int], Any]], total: int, fill: Any, typ: Any) -> Any:
    """Runs of the result ((first position, length), values or None) as its Arrow chunks, in order,
    the gaps between them the fill."""
    import pyarrow as pa

    chunks, pos = [], 0
    for (start, n), arr in sorted(runs, key=lambda t: t[0][0]):
        if start > pos:
            chunks.append(fill_run(start - pos, fill, typ))
        chunks.append(fill_run(n, fill, typ) if arr is None else arr)
        pos = start + n
    if pos < total:
        chunks.append(fill_run(total - pos, fill, typ))
    return pa.chunked_array(chunks, type=typ)


def _taken(pieces: list[tuple[tuple[Any, ...], Any]], out_shape: tuple[int, ...], fill: Any, typ: Any) -> Any:
    """Boxes of the result concatenated and put in C order with one ``take`` (the rest: the fill)."""
    import pyarrow as pa

    total = math.prod(out_shape)
    parts = [arr for _, arr in pieces if arr is not None]
    base = sum(len(a) for a in parts)
    perm = np.full(total, base, np.int64)  # the fill element, appended last
    pos = 0
    for box, arr in pieces:
        if arr is not None:
            perm[_flat_indices(box, out_shape)] = np.arange(pos, pos + len(arr), dtype=np.int64)
            pos += len(arr)
    flat = pa.concat_arrays([*(a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in parts),
                             fill_run(1, fill, typ)])
    return pa.chunked_array([flat.take(pa.array(perm))], type=typ)


def read_arrow(target: Any, variable: str, *, group: str = "/", storage_options: dict[str, Any] | None = None,
               **options: Any) -> Any:
    """A variable's values as a ``pyarrow.ChunkedArray``, flattened in C order, missing values as
    nulls: the values ``xr.open_dataset(target, engine="zstrings", group=group)[variable]`` holds.

    Every Zarr version, string layout and number of dimensions; text is ``large_string``, bytes
    ``large_binary``, built from the chunk buffers (Arrow-layout chunks wrapped zero-copy);
    ``options``: ``open_dataset``'s read keywords (``string_dtype``, ``utf8_errors``,
    ``concat_characters``, ``decode_threads``, ``mask_and_scale``, ``use_zarr_fill_value_as_mask``).
    """
    from .variables import group_contents

    opts = ReadOptions(**{"utf8_errors": "drop", **options})
    tree = open_tree(open_store(target, storage_options=storage_options))
    tree.store.pin_version(tree.version)
    path = "/" + group.strip("/") if group.strip("/") else "/"
    arrays = tree.children.get(path, ([], []))[0]
    if variable not in arrays:
        raise UnsupportedError(
            f"read_arrow: no array {variable!r} in group {path!r} of {tree.store.display} (it holds "
            f"{sorted(arrays)}); name one of them, and its group with group=."
        )
    contents = group_contents(tree, path, options=opts, drop_variables=set(arrays) - {variable})
    spec = contents.variables.get(variable)
    if spec is None:
        raise UnsupportedError(
            f"read_arrow cannot read {variable!r} in group {path!r} of {tree.store.display}: neither this "
            "package nor zarr-python decodes it (see the warning); read it with engine='zarr'."
        )
    data: Any = spec.data
    if isinstance(data, LazyArray):
        out = data.arrow(())
    else:  # read through zarr-python
        out = values_to_arrow(data[(slice(None),) * data.ndim], data.decode)
    fill = spec.attrs.get("_FillValue")
    if Decode(data.decode).as_bytes and opts.mask_and_scale and isinstance(fill, (str, bytes)):
        out = mask_equal(out, fill)  # (a bytes result's fill: what xarray's CF decoding masks)
    tree.store.check_version()
    return out
