"""Migrated stores, read by the peers: every store the tests hold (tests/corpus.py: each netcdf-c
generation, live netcdf-c 4.10.1 output, xarray's Zarr v2, our own NCZarr) migrated to Zarr v3 and
read by zarr-python (whichever version runs this: CI runs 3.1.x and 3.4.x), xarray's engine="zarr"
and engine="zstrings", each compared with engine="zstrings" on the source. In place, the same
store then also answers to every netcdf-c 4.9.0-4.10.1 exactly as before, and an icechunk
repository takes a migrated store.

The one difference a peer is allowed: a variable engine="zstrings" reads only under its default
``utf8_errors="drop"`` (a value cut inside a UTF-8 character, which netcdf-c's truncation leaves),
which xarray, having no such policy, refuses to decode (UnicodeDecodeError): checked, not skipped,
and named by the migration's report (``check_utf8=True``).
"""

from __future__ import annotations

import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

import netcdf_c_matrix as m
import pytest
import zarr
from corpus import LIVE, golden_sources, source
from peers import compare_views as _compare
from peers import engine_views, missing_peer
from peers import plain_values as _plain

import xr_zstrings
import xr_zstrings.zarr_plugin  # registers the plugin (zarr 3.1.x: see its docstring)
from xr_zstrings.io.store import open_store
from xr_zstrings.read.tree import open_tree

#: every Zarr v2 / NCZarr store of the corpus, plus our own writer's output for each netcdf-c target
SOURCES = [*golden_sources(), *(f"nc4101-{n}" for n in LIVE), "nc4101-tree", "zarr2-xarray", "zarr2-compressors",
           "ours-default", "ours-4.9.0"]
#: also migrated in place (every store is migrated into a new location; in place, a subset: CI time)
IN_PLACE = ["nc4101-strings", "nc4101-chars", "nc4101-numeric", "nc4101-tree", "nc490-chars", "nczarr1doc-nczarr1",
            "zarr2-xarray", "ours-default"]
RAW = {"string_dtype": "bytes", "concat_characters": False, "mask_and_scale": False, "decode_times": False}


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("migrate-peers")


def _source(sid: str, base: Path) -> Path:
    if not sid.startswith("ours-"):
        return source(sid, base)
    path = base / f"{sid}.zarr"
    if not path.exists():
        target = {"ours-default": None, "ours-4.9.0": "4.9.0"}[sid]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the 4.9.0 target warns what it changes
            xr_zstrings.to_nczarr(m.matrix_groups(), path, netcdf_c=target)
    return path


_migrated: dict[tuple[str, str], Path] = {}
_reports: dict[tuple[str, str], xr_zstrings.MigrationReport] = {}


def _migrated_store(sid: str, where: str, base: Path) -> tuple[Path, Path]:
    """(source, migrated) for ``where`` "new" or "in place" (a copy of the source, migrated)."""
    src = _source(sid, base)
    if (sid, where) not in _migrated:
        if where == "new":
            out = base / f"{sid}.v3.zarr"
            _reports[(sid, where)] = xr_zstrings.migrate(src, out, check_utf8=True)
        else:
            out = base / f"{sid}.inplace.zarr"
            shutil.copytree(src, out)
            _reports[(sid, where)] = xr_zstrings.migrate(out, check_utf8=True)
        _migrated[(sid, where)] = out
    return src, _migrated[(sid, where)]


def _names(store: Path) -> dict[str, list[str]]:
    tree = open_tree(open_store(store))
    return {g: list(tree.children[g][0]) for g in tree.groups}


def _views(store: Path, names: dict[str, list[str]], engine: str, **kw: Any) -> dict[tuple[str, str], Any]:
    return engine_views(store, names, engine, **kw)


@pytest.mark.parametrize(("sid", "where"), [*((s, "new") for s in SOURCES), *((s, "in place") for s in IN_PLACE)])
def test_peers_read_the_migrated_store_as_zstrings_reads_the_source(sid, where, base):
    src, out = _migrated_store(sid, where, base)
    names = _names(src)
    ref = _views(src, names, "zstrings")
    _compare(src, _views(out, names, "zstrings"), ref, "engine='zstrings'")
    by_zarr = _views(out, names, "zarr")
    _compare(src, by_zarr, ref, "engine='zarr'")
    undecodable = {f"{g.rstrip('/')}/{v}" for (g, v), o in by_zarr.items() if isinstance(o, UnicodeDecodeError)}
    assert undecodable == set(_reports[(sid, where)].not_utf8)  # each named by the report, no other
    raw = _views(src, names, "zstrings", **RAW)
    group = zarr.open_group(out, mode="r", zarr_format=3)
    for (g, v), r in raw.items():
        if isinstance(r, Exception):
            continue
        got = group[f"{g.strip('/')}/{v}".strip("/")][...]
        # (zarr-python decodes a variable-length string array; string_dtype="bytes" does not)
        want = [w.decode("utf-8") if isinstance(w, bytes) and isinstance(x, str) else w
                for w, x in zip(_plain(r.values), _plain(got), strict=True)]
        assert got.shape == r.shape and _plain(got) == want, ("zarr-python", g, v)


def test_the_corpus_migrates_metadata_only(base):
    """Every corpus store keeps its chunk bytes (no netcdf-c store in it shuffles NC_STRING chunks
    that are not a multiple of 8 bytes: tests/write/test_migrate.py has one)."""
    for sid in SOURCES:
        report = xr_zstrings.migrate(_source(sid, base), dry_run=True)
        assert report.metadata_only, (sid, report.rewritten)


# ---------------------------------------------------------------------------------------------
# netcdf-c 4.9.0-4.10.1 read a store migrated in place exactly as before
# ---------------------------------------------------------------------------------------------


@pytest.mark.peers
@pytest.mark.once
@pytest.mark.parametrize("target", ["4.9.0", "default", "netcdf-c", "purezarr"])
def test_netcdf_c_reads_the_store_migrated_in_place_as_before(target, base):
    if m.base_python() is None:
        missing_peer("the netCDF4 wheels of netcdf-c 4.9.0-4.9.4 (1.6.2-1.7.2, numpy<2) need a Python 3.11")
    from peer_venvs import ensure_all

    ensure_all()
    store = base / f"nc-{target}.zarr"
    mode = "nczarr"
    if target == "purezarr":  # what xarray writes, as netcdf-c's mode=zarr reads it
        mode = "zarr"
        xr_zstrings.with_netcdf_c_strings(m.matrix_groups()["/"]).to_zarr(store, zarr_format=2, consolidated=False)
    else:
        m.write_target(target, store)
    readers = [r for r in m.available_readers() if r != "ncdump"]
    before = {r: m.read_with(r, store, base, mode) for r in readers}
    assert any(b.ok for b in before.values())
    xr_zstrings.migrate(store)
    assert (store / "zarr.json").exists()
    for r in readers:
        after = m.read_with(r, store, base, mode)
        assert (after.ok, after.result if after.ok else after.error) == (
            before[r].ok, before[r].result if before[r].ok else before[r].error), r


# ---------------------------------------------------------------------------------------------
# icechunk takes a migrated store
# ---------------------------------------------------------------------------------------------


@pytest.mark.skipif(sys.version_info < (3, 12), reason="icechunk publishes no wheel for Python < 3.12")
@pytest.mark.parametrize("sid", ["nc4101-tree", "ours-default"])
def test_icechunk_repository_takes_a_migrated_store(sid, base, tmp_path):
    import icechunk

    src = _source(sid, base)
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    session = repo.writable_session("main")
    report = xr_zstrings.migrate(src, session.store)
    session.commit(f"migrated {sid}")
    assert report.metadata_only
    store = repo.readonly_session("main").store
    names = _names(src)
    ref = _views(src, names, "zstrings")
    _compare(src, _views(store, names, "zarr"), ref, "icechunk, engine='zarr'")
