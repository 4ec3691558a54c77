"""Every writer streams dask-backed variables: block by block, each block computed once (twice for
NCZarr strings whose width must be found first), never the whole array at once; read back by
netcdf-c, zarr-python and engine="zarr"."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from collections import Counter
from pathlib import Path

import dask
import dask.array as da
import netCDF4
import numpy as np
import pytest
import xarray as xr
import zarr
from peers import nc_url

from xr_zstrings.write.convert import convert
from xr_zstrings.write.nczarr import to_nczarr
from xr_zstrings.write.zarr3 import LAYOUTS, to_zarr_v3

N, BLOCK = 1000, 100
T = np.dtypes.StringDType()


def _value(i: int) -> str:
    return f"label {i} · {'é' * (i % 7)}"


EXPECTED = [_value(i) for i in range(N)]


class Blocks:
    """A dask array of strings whose blocks count their own materialisation (by block index)."""

    def __init__(self, n: int = N, block: int = BLOCK, dtype: object = T) -> None:
        self.counts: Counter[int] = Counter()
        self.lock = threading.Lock()
        self.block, self.dtype = block, dtype
        starts = da.arange(0, n, block, chunks=1)

        def make(start: np.ndarray) -> np.ndarray:
            s = int(start[0])
            with self.lock:
                self.counts[s // block] += 1
            return np.array([_value(i) for i in range(s, min(s + block, n))], dtype=dtype)

        sizes = tuple(min(block, n - s) for s in range(0, n, block))
        self.array = starts.map_blocks(make, dtype=dtype, chunks=(sizes,), meta=np.array([], dtype=dtype))
        self.nblocks = len(sizes)


def _dataset(blocks: Blocks) -> xr.Dataset:
    return xr.Dataset({"label": ("n", blocks.array), "value": ("n", da.arange(N, chunks=BLOCK) * 0.5)},
                      attrs={"title": "streamed"})


@pytest.mark.parametrize("layout", LAYOUTS)
def test_to_zarr_v3_computes_each_block_once(tmp_path: Path, layout: str) -> None:
    blocks = Blocks()
    with dask.config.set(scheduler="threads", num_workers=2):
        to_zarr_v3(_dataset(blocks), tmp_path / "s.zarr", layout=layout)
    assert blocks.counts == Counter({i: 1 for i in range(blocks.nblocks)})
    back = xr.open_dataset(tmp_path / "s.zarr", engine="zstrings")
    assert back["label"].values.tolist() == EXPECTED
    meta = json.loads((tmp_path / "s.zarr" / "label" / "zarr.json").read_text())
    assert meta["chunk_grid"]["configuration"]["chunk_shape"] == [BLOCK]  # dask's chunks, as xarray does
    if layout == "vlen-utf8":  # the peers read it too
        assert zarr.open_array(tmp_path / "s.zarr" / "label", mode="r")[:].tolist() == EXPECTED
        peer = xr.open_dataset(tmp_path / "s.zarr", engine="zarr")
        assert peer["label"].values.tolist() == EXPECTED
        np.testing.assert_array_equal(peer["value"].values, np.arange(N) * 0.5)


def test_to_nczarr_computes_each_block_once_with_a_width(tmp_path: Path) -> None:
    """A given width (as convert has from an NCZarr source): one pass; netcdf-c reads the result."""
    blocks = Blocks()
    with dask.config.set(scheduler="threads", num_workers=2):
        to_nczarr(_dataset(blocks), tmp_path / "s.zarr", maxstrlen=40)
    assert blocks.counts == Counter({i: 1 for i in range(blocks.nblocks)})
    with netCDF4.Dataset(nc_url(tmp_path / "s.zarr"), "r") as nc:
        assert nc["label"][:].tolist() == EXPECTED
        assert nc.title == "streamed"


def test_to_nczarr_without_a_width_reads_each_block_twice(tmp_path: Path) -> None:
    """The NC_STRING width is the longest value: one pass finds it, a second writes (documented)."""
    blocks = Blocks()
    with dask.config.set(scheduler="threads", num_workers=2):
        to_nczarr(_dataset(blocks), tmp_path / "s.zarr")
    assert blocks.counts == Counter({i: 2 for i in range(blocks.nblocks)})
    with netCDF4.Dataset(nc_url(tmp_path / "s.zarr"), "r") as nc:
        assert nc["label"][:].tolist() == EXPECTED


@pytest.mark.parametrize("writer", ["to_zarr_v3", "to_nczarr"])
def test_chunks_not_aligned_with_the_store_are_rechunked(tmp_path: Path, writer: str) -> None:
    """dask blocks of 70 into store chunks of 128 (and an irregular grid): each store chunk is
    written by one task after a rechunk, never by two blocks racing."""
    blocks = Blocks(block=70)
    ds = _dataset(blocks)
    ds["label"].encoding["chunks"] = (128,)
    ds = ds.drop_vars("value")
    if writer == "to_zarr_v3":
        to_zarr_v3(ds, tmp_path / "s.zarr")
        assert zarr.open_array(tmp_path / "s.zarr" / "label", mode="r")[:].tolist() == EXPECTED
        meta = json.loads((tmp_path / "s.zarr" / "label" / "zarr.json").read_text())
        assert meta["chunk_grid"]["configuration"]["chunk_shape"] == [128]
    else:
        to_nczarr(ds, tmp_path / "s.zarr", maxstrlen=40)
        with netCDF4.Dataset(nc_url(tmp_path / "s.zarr"), "r") as nc:
            assert nc["label"][:].tolist() == EXPECTED
            assert nc["label"].chunking() == [128]
    assert max(blocks.counts.values()) == 1
    irregular = xr.Dataset({"label": ("n", da.from_array(np.array(EXPECTED, dtype=T), chunks=((300, 10, 690),)))})
    to_zarr_v3(irregular, tmp_path / "irregular.zarr")
    assert zarr.open_array(tmp_path / "irregular.zarr" / "label", mode="r")[:].tolist() == EXPECTED


def test_to_zarr_v3_dask_missing_values(tmp_path: Path) -> None:
    """Missing values in dask blocks: as the string _FillValue (attribute written only when
    some were found), never loading the whole variable."""
    values = np.array(["a", None, "b", "c", None, "d"], dtype=object)
    ds = xr.Dataset({"s": ("x", da.from_array(values, chunks=2))})
    ds["s"].encoding["_FillValue"] = "N/A"
    to_zarr_v3(ds, tmp_path / "f.zarr")
    assert zarr.open_array(tmp_path / "f.zarr" / "s", mode="r")[:].tolist() == ["a", "N/A", "b", "c", "N/A", "d"]
    assert zarr.open_array(tmp_path / "f.zarr" / "s", mode="r").attrs["_FillValue"] == "N/A"
    back = xr.open_dataset(tmp_path / "f.zarr", engine="zstrings")["s"].values
    assert [None if v is None or v != v else v for v in back.astype(object)] == ["a", None, "b", "c", None, "d"]


def test_to_zarr_v3_dask_bad_value_names_the_variable(tmp_path: Path) -> None:
    """A lone surrogate in one block: the error names the variable; the target is not created."""
    from xr_zstrings.errors import ZStringsError

    values = np.array(["a", "b", "c", "\ud800"], dtype=object)
    ds = xr.Dataset({"s": ("x", da.from_array(values, chunks=2))})
    with pytest.raises(ZStringsError, match="'s'"):
        to_zarr_v3(ds, tmp_path / "bad.zarr")
    assert not (tmp_path / "bad.zarr").exists()


_MEMORY_SCRIPT = r"""
import sys, tracemalloc, dask, dask.array as da, numpy as np, xarray as xr
from xr_zstrings.write.nczarr import to_nczarr
from xr_zstrings.write.zarr3 import to_zarr_v3
from xr_zstrings.write.convert import convert

out = sys.argv[1]
NB, B = 100, 20000  # 2 million strings of ~40 characters in 100 blocks
T = np.dtypes.StringDType()

def make(start):
    s = int(start[0])
    return np.char.add(np.full(B, "a label of some forty characters, no ", dtype=T),
                       np.arange(s, s + B).astype(T))

def dataset():
    arr = da.arange(0, NB * B, B, chunks=1).map_blocks(make, dtype=T, chunks=((B,) * NB,),
                                                       meta=np.array([], dtype=T))
    return xr.Dataset({"label": ("n", arr)})

whole = make(np.array([0])).nbytes + sum(len(x) for x in make(np.array([0])).tolist())
whole *= NB  # what the variable takes in memory as StringDType
small = xr.Dataset({"label": ("n", da.from_array(np.array(["x", "y"], dtype=T), chunks=1))})
to_zarr_v3(small, out + "/warm3.zarr"), to_nczarr(small, out + "/warm2.zarr")  # imports, caches
with dask.config.set(scheduler="threads", num_workers=2):
    tracemalloc.start()
    for name, write in [("to_zarr_v3", lambda: to_zarr_v3(dataset(), out + "/v3.zarr")),
                        ("to_zarr_v3 arrow", lambda: to_zarr_v3(dataset(), out + "/arrow.zarr", layout="arrow")),
                        ("to_nczarr", lambda: to_nczarr(dataset(), out + "/nc.zarr", maxstrlen=48)),
                        ("convert", lambda: convert(out + "/nc.zarr", out + "/converted.zarr"))]:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        write()
        print(name, tracemalloc.get_traced_memory()[1] - base, whole, flush=True)
"""


def test_writers_never_hold_the_whole_array(tmp_path: Path) -> None:
    """In a fresh process (tracemalloc counts numpy's buffers too): writing a dask variable of
    ~115 MB (as StringDType) takes a small fraction of it at peak, for to_zarr_v3, to_nczarr and convert."""
    script = tmp_path / "mem.py"
    script.write_text(textwrap.dedent(_MEMORY_SCRIPT))
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.rsplit(" ", 2) for line in done.stdout.splitlines()]
    assert [r[0] for r in rows] == ["to_zarr_v3", "to_zarr_v3 arrow", "to_nczarr", "convert"]
    for name, peak, whole in rows:
        assert int(peak) < int(whole) / 6, (name, int(peak) / int(whole))
    expected = [f"a label of some forty characters, no {i}" for i in range(0, 2_000_000, 99_991)]
    for store in ("v3.zarr", "arrow.zarr", "nc.zarr", "converted.zarr"):
        got = xr.open_dataset(tmp_path / store, engine="zstrings")["label"]
        assert got.shape == (2_000_000,) and got[::99_991].values.tolist() == expected
    with netCDF4.Dataset(nc_url(tmp_path / "converted.zarr"), "r") as nc:
        assert nc["label"][99_991] == expected[1]


def test_to_nczarr_append_streams_dask_values(tmp_path: Path) -> None:
    """mode='a' with append_dim: the new values are computed a row of store chunks at a time, never
    whole; each block once when the blocks line up with the store's chunks, at most twice when a
    partial last chunk shifts them; netcdf-c reads the grown store."""
    first = xr.Dataset({"label": ("n", np.array(EXPECTED[:300], dtype=T))})
    first["label"].encoding["chunks"] = (BLOCK,)
    to_nczarr(first, tmp_path / "a.zarr", unlimited_dims=["n"])
    aligned = Blocks()
    to_nczarr(xr.Dataset({"label": ("n", aligned.array)}), tmp_path / "a.zarr", mode="a", append_dim="n")
    assert aligned.counts == Counter({i: 1 for i in range(aligned.nblocks)})
    to_nczarr(xr.Dataset({"label": ("n", np.array(["x"] * 50, dtype=T))}), tmp_path / "a.zarr", mode="a",
              append_dim="n")
    shifted = Blocks()  # 1350 stored: pieces [0, 50), [50, 150), ... each cut two blocks
    to_nczarr(xr.Dataset({"label": ("n", shifted.array)}), tmp_path / "a.zarr", mode="a", append_dim="n")
    assert set(shifted.counts) == set(range(shifted.nblocks)) and max(shifted.counts.values()) == 2
    expected = EXPECTED[:300] + EXPECTED + ["x"] * 50 + EXPECTED
    with netCDF4.Dataset(nc_url(tmp_path / "a.zarr"), "r") as nc:
        assert nc["label"][:].tolist() == expected
    assert xr.open_dataset(tmp_path / "a.zarr", engine="zstrings")["label"].values.tolist() == expected


def test_convert_keeps_same_named_variables_of_groups_apart(tmp_path: Path) -> None:
    """convert reads dask-backed groups; variables of one name in two groups stay two variables
    (xarray's open_groups(chunks=...) names both dask arrays alike), store -> .nc -> store."""
    root = xr.Dataset({"name": ("x", np.array([f"root {i}" for i in range(10)], dtype=object))})
    sub = xr.Dataset({"name": ("x", np.array([f"sub {i}" for i in range(10)], dtype=object))})
    to_nczarr({"/": root, "/g": sub}, tmp_path / "a.zarr")
    convert(tmp_path / "a.zarr", tmp_path / "b.zarr")
    convert(tmp_path / "a.zarr", tmp_path / "a.nc")
    convert(tmp_path / "a.nc", tmp_path / "c.zarr")
    with netCDF4.Dataset(tmp_path / "a.nc") as nc:
        assert nc["name"][:].tolist() == root["name"].values.tolist()
        assert nc["g"]["name"][:].tolist() == sub["name"].values.tolist()
    for store in ("b.zarr", "c.zarr"):
        with netCDF4.Dataset(nc_url(tmp_path / store), "r") as nc:
            assert nc["name"][:].tolist() == root["name"].values.tolist()
            assert nc["g"]["name"][:].tolist() == sub["name"].values.tolist()


def test_dask_blocks_into_a_store_that_keeps_their_bytes(tmp_path: Path) -> None:
    """A writer thread encodes each block into one reused buffer only where the store is done with
    the bytes once written (files, object storage): a store that keeps the buffer it is given (a
    zarr-python Store may; MemoryStore copies it) must get each chunk's own bytes."""
    from zarr.storage import MemoryStore

    class KeepingStore(MemoryStore):
        async def set(self, key: str, value: object, byte_range: object = None) -> None:
            self._check_writable()
            await self._ensure_open()
            self._store_dict[key] = value  # the caller's buffer itself

    for target in (KeepingStore(), tmp_path / "s.zarr"):
        with dask.config.set(scheduler="threads", num_workers=2):
            to_nczarr(_dataset(Blocks()), target, maxstrlen=40)
        assert xr.open_dataset(target, engine="zstrings")["label"].values.tolist() == EXPECTED
