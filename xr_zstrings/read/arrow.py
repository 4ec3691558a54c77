"""``read_arrow``: a 1-D Zarr v3 string or bytes variable as a pyarrow ``ChunkedArray``, for users who
want Arrow, not numpy (Arrow-layout chunks are wrapped zero-copy)."""

from __future__ import annotations

import math
from typing import Any

from ..errors import UnsupportedError
from ..formats.zarr3 import ArrayMetaV3
from ..io.store import open_store
from .chunked_v3 import ChunkedArrayV3
from .paths import join_path
from .tree import open_tree

__all__ = ["read_arrow"]


def read_arrow(target: Any, variable: str, *, group: str = "/", storage_options: dict[str, Any] | None = None) -> Any:
    """A 1-D Zarr v3 string/bytes variable as a ``pyarrow.ChunkedArray``, one Arrow array per chunk.

    Arrow-layout chunks are wrapped zero-copy (zarrs.vlen and vlen-utf8 chunks are converted);
    missing chunks become runs of the fill value. For users who want Arrow, not numpy.
    """
    import pyarrow as pa

    tree = open_tree(open_store(target, storage_options=storage_options))
    tree.store.pin_version(tree.version)
    path = join_path("/" + group.strip("/") if group.strip("/") else "/", variable)
    meta = tree.arrays.get(path)
    if not isinstance(meta, ArrayMetaV3) or meta.string_kind not in ("vlen", "vlen-bytes"):
        raise UnsupportedError(
            f"read_arrow needs a Zarr v3 string or bytes array; {path!r} in {tree.store.display} is "
            f"{'missing' if meta is None else meta.generation + ' ' + str(meta.dtype)}. Use xr.open_dataset."
        )
    if len(meta.shape) != 1:
        raise UnsupportedError(f"read_arrow reads 1-D arrays; {path!r} has shape {list(meta.shape)}.")
    arr = ChunkedArrayV3(tree.store, meta, meta.shape)
    n, c = meta.shape[0], meta.chunks[0]
    keys = [arr.chunk_key((i,)) for i in range(math.ceil(n / c))]
    pieces = []
    for i, (key, raw) in enumerate(zip(keys, tree.store.get_many(keys), strict=True)):
        length = min(c, n - i * c)
        if raw is None:
            fill = meta.fill_value if meta.fill_value is not None else ""
            pieces.append(pa.array([fill] * length))
        else:
            pieces.append(arr.decode_arrow(raw, key).slice(0, length))
    types = {p.type for p in pieces}
    if len(types) > 1:
        pieces = [p.cast(pa.large_string() if meta.string_kind == "vlen" else pa.large_binary()) for p in pieces]
    tree.store.check_version()
    return pa.chunked_array(pieces)
