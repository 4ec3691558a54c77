"""Zip members are bounded like every other chunk: a member declared larger than the decoded-chunk
limit is refused before it is decompressed, a member never decodes past its declared size, and its
CRC-32 is checked; locally (zarr-python's ZipStore) and in object storage (ranged GETs)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from s3_server import S3Server

from xr_zstrings.errors import ChunkError

BUCKET = "zstrings-zip-bounds"
ROWS = 1 << 20  # 1 MiB of sevens: deflates to ~1 KiB


def _zip_store(tmp_path: Path, compression: int = zipfile.ZIP_DEFLATED) -> Path:
    """A zarr-python v2 store of a 1 MiB uint8 array (one uncompressed chunk) and a string array,
    zipped with ``compression`` (what `zip -r` or shutil.make_archive make of a store folder)."""
    folder = tmp_path / "store"
    g = zarr.open_group(folder, mode="w", zarr_format=2)
    a = g.create_array("big", shape=(ROWS,), dtype="u1", chunks=(ROWS,), compressors=None,
                       dimension_names=None, attributes={"_ARRAY_DIMENSIONS": ["x"]})
    a[:] = 7
    s = g.create_array("name", shape=(3,), dtype=np.dtype("U4"), chunks=(3,),
                       attributes={"_ARRAY_DIMENSIONS": ["n"]})
    s[:] = np.array(["a", "bé", "cde"])
    zarr.consolidate_metadata(folder, zarr_format=2)
    out = tmp_path / f"store-{compression}.zip"
    with zipfile.ZipFile(out, "w", compression=compression) as zf:
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                zf.write(p, p.relative_to(folder).as_posix())
    return out


def _corrupt_stored_member(path: Path, name: str) -> None:
    """Flip one byte of a stored (uncompressed) member's data: its CRC-32 no longer matches."""
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(name)
    raw = bytearray(path.read_bytes())
    off = info.header_offset
    nlen, elen = int.from_bytes(raw[off + 26 : off + 28], "little"), int.from_bytes(raw[off + 28 : off + 30], "little")
    raw[off + 30 + nlen + elen + 10] ^= 0xFF
    path.write_bytes(bytes(raw))


def _open(target: str | Path, s3: S3Server | None) -> xr.Dataset:
    opts = {"storage_options": s3.options()} if s3 is not None else {}
    return xr.open_dataset(target, engine="zstrings", **opts)


@pytest.fixture(params=["local", "s3"])
def where(request: pytest.FixtureRequest) -> S3Server | None:
    if request.param == "local":
        return None
    from s3_server import start_server

    return start_server()


def _target(path: Path, s3: S3Server | None) -> str | Path:
    return path if s3 is None else s3.upload(path, BUCKET, f"{path.parent.name}/{path.name}")


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2,
                                         zipfile.ZIP_LZMA], ids=["stored", "deflate", "bzip2", "lzma"])
def test_every_zip_method_reads_the_same_locally_and_remotely(tmp_path: Path, where: S3Server | None,
                                                               compression: int) -> None:
    ds = _open(_target(_zip_store(tmp_path, compression), where), where)
    assert ds["name"].values.tolist() == ["a", "bé", "cde"]
    assert (ds["big"].values == 7).all() and ds["big"].size == ROWS


def test_member_over_the_chunk_limit_refused_before_decompressing(tmp_path: Path, where: S3Server | None,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    ds = _open(_target(_zip_store(tmp_path), where), where)  # metadata are small: the open works
    monkeypatch.setenv("XR_ZSTRINGS_MAX_CHUNK_BYTES", str(ROWS // 2))
    with pytest.raises(ChunkError, match=r"zip member 'big/0' declares 1048576 bytes.*XR_ZSTRINGS_MAX_CHUNK_BYTES"):
        ds["big"].values
    assert ds["name"].values.tolist() == ["a", "bé", "cde"]  # small members still read


def test_member_whose_bytes_changed_fails_its_crc(tmp_path: Path, where: S3Server | None) -> None:
    path = _zip_store(tmp_path, zipfile.ZIP_STORED)
    _corrupt_stored_member(path, "big/0")
    ds = _open(_target(path, where), where)
    with pytest.raises(ChunkError, match=r"zip member 'big/0' is corrupt.*CRC"):
        ds["big"].values


def test_member_that_inflates_past_its_declared_size_is_refused(tmp_path: Path, where: S3Server | None) -> None:
    """A lying header (declared size smaller than the stream): decoding stops at the declared size,
    and the CRC of what was declared does not match, instead of inflating the whole stream."""
    path = _zip_store(tmp_path)
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("big/0")
    raw = bytearray(path.read_bytes())
    small = (1000).to_bytes(4, "little")
    # the central directory's uncompressed size (zipfile and zarr-python read that one)
    cd = raw.rfind(b"PK\x01\x02")
    while cd != -1:
        name_len = int.from_bytes(raw[cd + 28 : cd + 30], "little")
        if raw[cd + 46 : cd + 46 + name_len] == b"big/0":
            raw[cd + 24 : cd + 28] = small
            break
        cd = raw.rfind(b"PK\x01\x02", 0, cd)
    assert cd != -1
    raw[info.header_offset + 22 : info.header_offset + 26] = small  # and the local header's
    path.write_bytes(bytes(raw))
    ds = _open(_target(path, where), where)
    with pytest.raises(ChunkError, match="zip member 'big/0'"):
        ds["big"].values
