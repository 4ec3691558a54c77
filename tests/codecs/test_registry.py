"""The Zarr v3 codec registry (xr_zstrings.codecs.registry): name -> class, and its errors."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from zarr.abc.codec import ArrayArrayCodec, ArrayBytesCodec, BytesBytesCodec
from zarr.registry import get_codec_class

from xr_zstrings.codecs import registry
from xr_zstrings.codecs.array_array import TransposeCodec, ZarrArrayArray
from xr_zstrings.codecs.array_bytes import BytesCodec, VlenCodec
from xr_zstrings.codecs.bytes_bytes import ZarrBytesBytes
from xr_zstrings.codecs.sharding import ShardingCodec
from xr_zstrings.codecs.v3 import V3Pipeline
from xr_zstrings.codecs.zarrs import PackbitsCodec, ZarrsOptionalCodec, ZarrsVlenCodec
from xr_zstrings.errors import UnknownCodecError

NOTES = Path(__file__).parents[2] / "docs" / "format-notes.md"

#: the codec names docs/format-notes.md says engine="zstrings" reads with codecs of its own
NAMES_IN_NOTES = {
    "bytes": BytesCodec,
    "vlen-utf8": VlenCodec,
    "vlen-bytes": VlenCodec,
    "zarrs.vlen": ZarrsVlenCodec,
    "zarrs.vlen_v2": VlenCodec,
    "https://codec.zarrs.dev/array_to_bytes/vlen_v2": VlenCodec,
    "zarrs.optional": ZarrsOptionalCodec,
    "packbits": PackbitsCodec,
    "sharding_indexed": ShardingCodec,
}


@pytest.mark.parametrize("name", sorted(NAMES_IN_NOTES))
def test_every_codec_name_of_the_format_notes_is_registered(name):
    assert f"`{name}`" in NOTES.read_text(encoding="utf-8"), f"{name} is no longer in the format notes"
    assert registry.lookup(name, {}) is NAMES_IN_NOTES[name]
    assert name in registry.registered()


def test_unknown_codec_names_itself_the_array_and_the_fix():
    with pytest.raises(UnknownCodecError) as err:
        registry.lookup("no-such-codec", {}, "/group/var")
    msg = str(err.value)
    assert msg.startswith("/group/var: unknown Zarr v3 codec 'no-such-codec'")
    assert "Fix: install the package that registers this codec with zarr-python" in msg
    # the codecs we read are listed from the registry itself
    listed = re.search(r"xr_zstrings reads (.*) and every codec zarr-python registers", msg).group(1)
    assert set(listed.split(", ")) == {n for n in registry.registered() if "://" not in n}
    # the same error when a chain names it, before any chunk is read
    with pytest.raises(UnknownCodecError, match=r"^/group/var: unknown Zarr v3 codec 'no-such-codec'"):
        V3Pipeline.from_metadata([{"name": "bytes", "configuration": {"endian": "little"}},
                                  {"name": "no-such-codec"}], data_type="int32", dtype="int32",
                                 chunk_shape=(4,), where="/group/var")


def test_zarrs_plain_optional_name_only_with_zarrs_configuration():
    """zarr-extensions drafts an unrelated codec also called "optional": ours only with mask_codecs."""
    assert registry.lookup("optional", {"mask_codecs": [], "data_codecs": []}) is ZarrsOptionalCodec
    assert registry.find("optional", {"codecs": []}) is None
    with pytest.raises(UnknownCodecError, match="'optional'"):
        registry.lookup("optional", {"codecs": []}, "/v")


@pytest.mark.parametrize("name", ["transpose", "bytes", "vlen-utf8", "vlen-bytes", "sharding_indexed"])
def test_our_family_is_zarr_pythons_for_the_names_it_knows(name):
    """A codec both implement is of the same kind in both (zarr-python's class hierarchy is the peer)."""
    family = {ArrayArrayCodec: "array_array", ArrayBytesCodec: "array_bytes", BytesBytesCodec: "bytes_bytes"}
    theirs = [f for base, f in family.items() if issubclass(get_codec_class(name), base)]
    assert [registry.lookup(name, {}).family] == theirs


@pytest.mark.parametrize(("name", "adapter"), [
    ("zstd", ZarrBytesBytes), ("crc32c", ZarrBytesBytes), ("numcodecs.zlib", ZarrBytesBytes),
    ("numcodecs.delta", ZarrArrayArray),
])
def test_names_only_zarr_python_knows_resolve_to_its_family_adapter(name, adapter):
    assert registry.find(name) is None
    assert registry.lookup(name, {}) is adapter


def test_transpose_resolves_to_its_class_and_builds():
    assert registry.lookup("transpose") is TransposeCodec
    p = V3Pipeline.from_metadata([{"name": "transpose", "configuration": {"order": [1, 0]}},
                                  {"name": "bytes", "configuration": {"endian": "little"}}],
                                 data_type="int32", dtype="int32", chunk_shape=(2, 3))
    assert isinstance(p.aa[0], TransposeCodec)
    a = np.arange(6, dtype="int32").reshape(2, 3)
    assert p.encode(a) == np.ascontiguousarray(a.T).tobytes()


def test_a_taken_name_cannot_be_registered_twice():
    class Other(registry.CodecStep):
        family = "array_bytes"

    with pytest.raises(ValueError, match="'bytes' is registered to BytesCodec already"):
        registry.register("zz-test-unused", "bytes")(Other)
    assert "zz-test-unused" not in registry.registered()  # nothing half-registered
    assert registry.lookup("bytes") is BytesCodec

    class NoFamily(registry.CodecStep):
        pass

    class NotACodec:
        family = "array_bytes"

    for cls in (NoFamily, NotACodec):
        with pytest.raises(TypeError, match="CodecStep with family"):
            registry.register("zz-test-unused")(cls)
