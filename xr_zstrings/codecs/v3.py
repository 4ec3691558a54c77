"""The Zarr v3 chunk codec pipeline: one chunk's stored bytes <-> a numpy array, both ways.

:class:`V3Pipeline` is built once per array from the ``zarr.json`` ``codecs`` list
(:meth:`V3Pipeline.from_metadata`, which builds every codec eagerly so a bad chain fails at open
time) and then decodes/encodes whole chunks (C order, the full chunk shape: Zarr v3 stores edge
chunks at full size; the caller slices).

Codecs
------
:func:`~.registry.lookup` gives the class of each codec name (one class per codec family):

* array -> array (:mod:`.array_array`): ``transpose`` (numpy); any other array->array codec
  zarr-python registers (``numcodecs.delta``, ...) through zarr-python, for numeric data only.
* array -> bytes: ``bytes`` (endian; also for ``fixed_length_utf32``/``null_terminated_bytes``),
  ``vlen-utf8``/``vlen-bytes`` (numcodecs layout) and the Arrow layout (:mod:`.array_bytes`);
  ``zarrs.vlen`` / ``https://codec.zarrs.dev/array_to_bytes/vlen`` (its ``index_codecs`` and
  ``data_codecs`` are full codec chains, built recursively as :class:`V3Pipeline` objects: the index
  chain decodes to ``n+1`` ``index_data_type`` offsets, the data chain to ``uint8`` bytes;
  ``index_location`` absent means ``start``, configuration v0.0), ``zarrs.optional`` and
  ``packbits`` (:mod:`.zarrs`); ``sharding_indexed`` (:mod:`.sharding`: inner chain built
  recursively; shard index ``(chunks_per_shard..., 2)`` uint64 ``offset, nbytes`` through
  ``index_codecs``, ``2**64-1`` = empty inner chunk -> ``fill_value``; nested sharding works), and
  any other array->bytes codec zarr-python registers, for numeric data only.
* bytes -> bytes (:mod:`.bytes_bytes`): every codec zarr-python registers (``gzip``, ``zstd``,
  ``blosc``, ``crc32c``, ``numcodecs.*``): zarr-python's own implementations are called, one chunk
  at a time, through ``zarr_compat.run_codec`` (the private sync fast path where the codec has one,
  else the public ``Codec.decode``/``encode``), decompressors bounded (:mod:`.bounded`).  No
  compressor is written here.

The layout rule (strings and bytes)
-----------------------------------
zarr-python's ``string`` data type (always with ``vlen-utf8``) has the same name as the draft
Arrow-layout ZEP's ``{"name": "string"}``, so the layout is decided from the *codec chain*,
never from the data type name alone:

==========================================  =============================================
array -> bytes codec in the chain           chunk layout (after the bytes->bytes codecs)
==========================================  =============================================
``vlen-utf8`` or ``vlen-bytes``             numcodecs: ``u32 n``, then ``u32 len + bytes``
``zarrs.vlen`` (either name)                zarrs: u64 index length + index + data
none, or a plain ``bytes`` codec, with a    draft ZEP Arrow layout: ``n+1`` little-endian
variable-length data type (``string``,      int32 offsets, zero padding to 64 bytes, data;
``binary``, ``bytes``,                      int64 offsets (``"arrow-large"``) for
``variable_length_bytes``, ...)             ``large_string``/``large_binary``
``bytes`` with a fixed-width or numeric     plain little/big-endian array bytes
data type
==========================================  =============================================

The ZEP names the 64-bit variants ``LargeString``/``LargeBinary`` but gives no JSON spelling and
no offsets-width configuration key; we accept ``large_string``, ``large_binary``,
``largestring``, ``LargeString``, ``large_utf8`` ... (case and ``_`` ignored).  Whether the
values are text or bytes comes from the data type (``string``-like -> ``str``, ``binary``/
``bytes``-like -> ``bytes``), falling back to the codec name (``vlen-bytes`` -> bytes).

What decode returns
-------------------
An array of ``chunk_shape`` and exactly ``pipeline.dtype`` (the dtype the metadata layer passed):
``StringDType`` strings are decoded straight to ``StringDType`` (no Python ``str`` objects),
``object`` gives ``str`` (or ``bytes`` for binary data) objects, ``U`` fixed width.  For
zero-copy Arrow use :meth:`V3Pipeline.decode_arrow`.  Malformed input raises
:class:`~xr_zstrings.errors.ChunkError` (invalid UTF-8 :class:`StringDecodeError`), never a bare
IndexError/ValueError; unknown codecs raise :class:`UnsupportedError` at build time.

Sharding: ``chunk_shape`` is the *shard* shape (the chunk grid's); a shard is decoded whole.
:meth:`V3Pipeline.encode` leaves inner chunks holding only the fill value out of the shard
(index entry ``2**64-1``), as zarr-python does, unless ``write_empty_chunks=True``.

This module never imports the dataset layer; zarr-python is imported lazily, the first time a chain needs
one of its codecs (plain ``bytes``/``transpose``/vlen/Arrow chains do not import it at all).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ChunkError, MetadataError, UnsupportedError, ZStringsError
from ..text.vlen import Kind, VlenChunk, vlen_to_arrow
from . import registry
from .array_bytes import BytesCodec
from .bounded import MAX_CHUNK_BYTES_ENV, max_chunk_bytes
from .chunk import ChunkSpec, as_u8, classify_data_type, codec_name_cfg, default_fill, label, to_dtype
from .layouts import VARIABLE_LENGTH
from .zarrs import ZARRS_OPTIONAL_NAMES, ZARRS_VLEN_NAMES

__all__ = ["ZARRS_OPTIONAL_NAMES", "ZARRS_VLEN_NAMES", "V3Pipeline", "classify_data_type", "nullable_chain"]


def nullable_chain(entries: list[tuple[str, Any]], where: str) -> bool:
    """Whether a chain's array->bytes codec holds missing values (zarrs.optional, also inside
    sharding_indexed): then a null fill value stays None."""
    for name, cfg in entries:
        cls = registry.find(name, cfg)
        if cls is not None and cls.nullable(name, cfg, where):
            return True
    return False


class V3Pipeline:
    """A Zarr v3 codec chain for one array: ``decode(raw) -> ndarray``, ``encode(ndarray) -> bytes``.

    Attributes: ``layout`` ("numeric", "fixed", "vlen-utf8", "vlen-bytes", "zarrs.vlen", "arrow",
    "arrow-large"; for a sharded array the inner chunks' layout), ``sharded``, ``kind``
    ("str"/"bytes" for variable-length data, else None), ``dtype``, ``chunk_shape``, ``codec_names``.
    """

    def __init__(self, *, aa: list, ab: Any, bb: list, dtype: np.dtype, chunk_shape: tuple[int, ...],
                 where: str, kind: Kind | None, fill_value: Any, codec_names: list[str]):
        self.aa, self.ab, self.bb = aa, ab, bb
        self.dtype = dtype
        self.chunk_shape = chunk_shape
        self.where = where
        self.kind = kind
        self.fill_value = fill_value
        self.codec_names = codec_names
        self.sharded = ab.sharded  # sharding_indexed
        self.layout = ab.layout
        # whether encode() takes a VlenChunk (packed values) in place of a chunk array
        self.accepts_vlen = not aa and not self.sharded and self.layout in VARIABLE_LENGTH

    def __repr__(self) -> str:
        return (f"V3Pipeline(layout={self.layout!r}, sharded={self.sharded}, dtype={self.dtype}, "
                f"chunk_shape={self.chunk_shape}, codecs={self.codec_names})")

    # ---------------------------------------------------------------------------- building

    @classmethod
    def from_metadata(
        cls,
        codecs: Sequence[Mapping[str, Any]],
        *,
        data_type: str | dict,
        dtype: Any,
        chunk_shape: tuple[int, ...],
        where: str = "",
        fill_value: Any = None,
        utf8_errors: str = "strict",
        default_bytes: bool = False,
    ) -> V3Pipeline:
        """Build the chain for one array from its zarr.json ``codecs`` (see the module docstring).

        ``fill_value`` (already parsed to a Python/numpy scalar) fills empty inner chunks of a
        shard; None means the data type's default ("" / b"" / 0).  ``utf8_errors`` ("strict",
        "replace", "drop") applies to invalid UTF-8 in variable-length strings.  ``default_bytes``: a
        chain without an array->bytes codec gets ``bytes`` (the index and data chains nested in zarrs'
        codecs, whose spec says so).

        Each codec's class comes from the registry; this checks the order the spec requires
        (array->array, one array->bytes, bytes->bytes), the classes check their own configuration.
        """
        if codecs is None:
            codecs = []
        if not isinstance(codecs, (list, tuple)):
            raise MetadataError(f"{label(where)}: 'codecs' must be a list, got {codecs!r}")
        dtype = np.dtype(dtype)
        shape = tuple(int(s) for s in chunk_shape)
        if any(s < -1 for s in shape):
            raise MetadataError(f"{label(where)}: chunk_shape {list(shape)} has a negative extent")
        kind, large = classify_data_type(data_type, dtype)
        entries = [codec_name_cfg(c, where) for c in codecs]
        if fill_value is None and not nullable_chain(entries, where):
            # (zarrs' optional type: a null fill is missing, so inner chunks a shard leaves out are None)
            fill_value = default_fill(dtype, kind)
        names = [n for n, _ in entries]
        spec = ChunkSpec(data_type=data_type, dtype=dtype, shape=shape, kind=kind, large=large,
                         fill_value=fill_value, utf8_errors=utf8_errors, where=where,
                         default_bytes=default_bytes)
        aa: list = []
        ab: Any = None
        bb: list = []
        for name, cfg in entries:
            codec_cls = registry.lookup(name, cfg, where)
            if codec_cls.family == "array_array":
                if ab is not None:
                    raise MetadataError(
                        f"{label(where)}: array->array codec {name!r} after the array->bytes codec in {names}")
                step = codec_cls.from_json(name, cfg, spec)
                aa.append(step)
                spec = spec.evolve(shape=step.out_shape(spec.shape), dtype=step.out_dtype(spec.dtype))
            elif codec_cls.family == "array_bytes":
                if ab is not None:
                    raise MetadataError(
                        f"{label(where)}: codec chain {names} has more than one array->bytes codec "
                        f"({name!r} after {ab.layout!r}); a chain needs exactly one"
                    )
                ab = codec_cls.from_json(name, cfg, spec)
            else:
                if ab is None:
                    ab = cls._implicit_ab(spec, names)
                bb.append(codec_cls.from_json(name, cfg, spec))
        if ab is None:
            ab = cls._implicit_ab(spec, names)
        cls._bound(ab, bb, spec.shape)
        return cls(aa=aa, ab=ab, bb=bb, dtype=dtype, chunk_shape=shape, where=where, kind=kind,
                   fill_value=fill_value, codec_names=names)

    @staticmethod
    def _bound(ab: Any, bb: list, shape: tuple[int, ...]) -> None:
        """Set what each bytes->bytes step may decode to: exactly the size of the array->bytes
        output (fixed-size data) through the inner steps, else the global limit (vlen data,
        compressors)."""
        maxb = max_chunk_bytes()
        exact = ab.encoded_nbytes(shape) if isinstance(ab, BytesCodec) else None
        for step in bb:
            if exact is None:
                step.limit, step.expected = maxb, f"at most {maxb} bytes ({MAX_CHUNK_BYTES_ENV})"
            else:
                step.limit = min(exact, maxb)
                step.expected = f"{exact} bytes (the chunk's size before {step.name!r})"
                if exact > maxb:
                    step.expected += f", which is itself beyond the {maxb}-byte limit ({MAX_CHUNK_BYTES_ENV})"
                exact = step.encoded_size_or_none(exact)

    @staticmethod
    def _implicit_ab(spec: ChunkSpec, names: list[str]) -> Any:
        """The array->bytes step of a chain that names none: the Arrow layout for variable-length
        data (the draft ZEP), plain ``bytes`` for nested chains (``default_bytes``), else an error."""
        if spec.kind is not None or spec.default_bytes:
            return registry.lookup("bytes").from_json("bytes", {"endian": "little"}, spec)
        raise MetadataError(
            f"{label(spec.where)}: codec chain {names} has no array->bytes codec (such as 'bytes') for "
            f"{spec.dtype} data; Zarr v3 requires exactly one"
        )

    def _encoded_size(self, n_bytes: int) -> int:
        size = n_bytes
        for step in self.bb:
            size = step.encoded_size(size)
        return size

    # ---------------------------------------------------------------------------- decoding

    def context(self, key: Any) -> str:
        w = label(self.where)
        return f"{w} chunk {key}" if key not in (None, "") else w

    def _shapes(self, chunk_shape: tuple[int, ...]) -> list[tuple[int, ...]]:
        shapes = [chunk_shape]
        for step in self.aa:
            shapes.append(step.out_shape(shapes[-1]))
        return shapes

    def bytes_decode(self, raw: Any, ctx: str, *, scratch: bool = False) -> np.ndarray:
        """The bytes->bytes chain undone.  ``scratch``: the last decompressor may write into this
        thread's reused buffer (codecs.bounded_decode); the caller consumes the result first."""
        try:
            u8 = as_u8(raw)
        except TypeError:
            raise ChunkError(f"{ctx}: expected the chunk as bytes, got {type(raw).__name__}") from None
        for i, step in enumerate(reversed(self.bb)):
            if scratch and i == len(self.bb) - 1:
                u8 = step.decode(u8, ctx, scratch=True)
            else:
                u8 = step.decode(u8, ctx)
        return u8

    def decode(self, raw: Any, chunk_shape: tuple[int, ...] | None = None, *, key: Any = None,
               region: tuple[slice, ...] | None = None, context: str | None = None,
               writeable: bool = True) -> np.ndarray:
        """Stored chunk bytes -> the full chunk (C order, ``chunk_shape``, dtype ``self.dtype``).

        ``key`` (e.g. the store key "c/0/1") only enriches error messages.  ``region``: the part
        of the chunk that will be used; a shard then decodes only the inner chunks it touches.
        ``context``: what errors call the chunk, in place of the array and ``key`` (a nested chain:
        "... (zarrs.vlen index)").  ``writeable=False``: the result may be a read-only view of the
        chunk's bytes (a caller that only copies out of it), else read-only results are copied.
        """
        shape = self.chunk_shape if chunk_shape is None else tuple(int(s) for s in chunk_shape)
        ctx = context or self.context(key)
        with self.decode_errors(ctx):
            shapes = self._shapes(shape)
            u8 = self.bytes_decode(raw, ctx)
            if self.sharded and not self.aa and region is not None:
                arr = self.ab.decode(u8, shapes[-1], ctx, region=region)
            else:
                arr = self.ab.decode(u8, shapes[-1], ctx)
            for step, s in zip(reversed(self.aa), reversed(shapes[:-1]), strict=True):
                arr = step.decode(arr, s)
            if arr.dtype != self.dtype:
                arr = to_dtype(arr, self.dtype)
            if not arr.flags.c_contiguous:
                arr = np.ascontiguousarray(arr)
            if writeable and not arr.flags.writeable:
                arr = arr.copy()
            return arr

    @contextlib.contextmanager
    def decode_errors(self, ctx: str) -> Iterator[None]:
        """Turn any failure while decoding one chunk into a ChunkError naming ``ctx`` and the codecs
        (our own errors, MemoryError and RecursionError pass through)."""
        try:
            yield
        except (ZStringsError, MemoryError, RecursionError):
            raise
        except Exception as e:
            raise ChunkError(
                f"{ctx}: cannot decode the chunk with codecs {self.codec_names} "
                f"({type(e).__name__}: {e}); the chunk is corrupt or belongs to another array"
            ) from e

    def decode_arrow(self, raw: Any, chunk_shape: tuple[int, ...] | None = None, *, key: Any = None,
                     policy: str | None = None, context: str | None = None):
        """Variable-length chunk -> flat (C-order) ``pyarrow`` (large_)string/binary array.

        Zero-copy for the Arrow layout (and for zarrs.vlen when the data chain hands back its
        buffer); needs a layout without transpose or sharding. ``policy`` (utf8_errors): invalid
        UTF-8 handled as the numpy decode does, the result large_string/large_binary, zarrs.optional
        nulls included (text.arrow's builders); None: strict, the stored offsets' width kept.
        ``context``: what errors call the chunk, in place of the array and ``key``.
        """
        ctx = context or self.context(key)
        if self.kind is None or self.aa or self.sharded:
            raise UnsupportedError(
                f"{label(self.where)}: decode_arrow needs a variable-length string/bytes chain without "
                f"transpose or sharding; this one is {self.layout!r} ({self.codec_names}); use decode()"
            )
        shape = self.chunk_shape if chunk_shape is None else tuple(chunk_shape)
        if policy is not None:
            with self.decode_errors(ctx):
                return self.ab.to_arrow(self.bytes_decode(raw, ctx), shape, ctx, policy)
        try:
            u8 = self.bytes_decode(raw, ctx)
            chunk = self.ab.to_vlen(u8, math.prod(shape), ctx)
            large = self.ab.large or chunk.offsets.dtype.itemsize == 8
            return vlen_to_arrow(chunk, kind=self.kind, large=large, what=ctx)
        except ZStringsError:
            raise
        except Exception as e:
            raise ChunkError(f"{ctx}: cannot decode the chunk: {type(e).__name__}: {e}") from e

    # ---------------------------------------------------------------------------- encoding

    def encode(self, arr: Any, *, key: Any = None, write_empty_chunks: bool = False,
               check_shape: bool = True) -> bytes:
        """A full chunk (``chunk_shape``; pad edge chunks with the fill value) -> stored bytes.

        ``write_empty_chunks=False`` (zarr-python's default) leaves inner chunks of a shard that
        hold only the fill value out of the shard (index entry 2**64-1).  ``check_shape=False``: ``arr``
        may have any shape (the 1-D index and data of the chains nested in zarrs' codecs).
        """
        ctx = self.context(key)
        if isinstance(arr, VlenChunk):  # already packed values (the writer's fast path)
            n = arr.offsets.shape[0] - 1
            if not self.accepts_vlen or n != math.prod(self.chunk_shape):
                raise ZStringsError(
                    f"{ctx}: a packed chunk of {n} values needs a plain variable-length layout with "
                    f"{math.prod(self.chunk_shape)} values per chunk; pass the values as an array"
                )
            u8 = self.ab.encode(arr, ctx)
            for step in self.bb:
                u8 = step.encode(u8, ctx)
            return u8.tobytes()
        a = np.asarray(arr) if not isinstance(arr, np.ndarray) else arr
        if check_shape and a.shape != self.chunk_shape:
            if a.size == math.prod(self.chunk_shape) and a.ndim <= 1 and len(self.chunk_shape) <= 1:
                a = a.reshape(self.chunk_shape)
            else:
                raise ZStringsError(
                    f"{ctx}: chunk of shape {list(a.shape)} does not match the chunk shape "
                    f"{list(self.chunk_shape)}; Zarr v3 stores edge chunks at full size: pad with the "
                    "fill value first"
                )
        for step in self.aa:
            a = step.encode(a)
        if self.sharded:
            u8 = self.ab.encode(a, ctx, write_empty_chunks)
        else:
            u8 = self.ab.encode(a, ctx)
        for step in self.bb:
            u8 = step.encode(u8, ctx)
        return u8.tobytes()
