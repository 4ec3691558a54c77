"""VirtualiZarr's own parser tests (its ``tests/test_parsers/test_zarr.py``, shipped in its wheel),
run against ``NCZarrParser``: every test there that drives a parser through its public interface
(``parser(url, registry)``, ``open_virtual_dataset(..., parser=...)``) on a Zarr v2 store, with the
module's ``ZarrParser`` replaced by ours, as tests/interop runs xarray's backend test classes through
engine="zstrings".

One runs and is expected to fail, with xarray on our side: ``test_v2_slash_dimension_separator``
wants the raw values of a Zarr v2 float array whose ``fill_value`` is 0.0, where xarray's
engine="zarr" (and engine="zstrings") read the source with that value masked (NaN); ``NCZarrParser``
keeps the source's reading (``migrate``'s ``_FillValue`` for pure Zarr v2), ZarrParser does not.

Not run: the ``zarr_format=3`` cases (a Zarr v3 store is not ours to translate: ``NCZarrParser``
refuses it, naming it) and the tests of ZarrParser's private helpers (``build_chunk_manifest``,
``metadata_as_v3``, ``join_url``). The ``zarr_store`` and ``local_registry`` fixtures are
VirtualiZarr's root conftest's (not in its wheel), with xarray's tutorial "air_temperature" subset
made here (same names, dims and attributes; no download).
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

import numpy as np
import pytest
import xarray as xr

pytestmark = pytest.mark.skipif(
    sys.version_info < (3, 12),
    reason="peer limit: virtualizarr supports Python >= 3.12 only (no release for 3.11); CI's py312, py313 and "
           "fallback jobs run these tests",
)
if sys.version_info >= (3, 12):
    import virtualizarr.tests.test_parsers.test_zarr as upstream
    from obspec_utils.registry import ObjectStoreRegistry
    from obstore.store import LocalStore

    from xr_zstrings.virtual.nczarr import NCZarrParser

    class _AsZarrParser(NCZarrParser):
        """``NCZarrParser`` with ZarrParser's signature (``group``, ``skip_variables``)."""

        def __init__(self, group: str | None = None, skip_variables: Any = None) -> None:
            super().__init__(group=group, skip_variables=skip_variables, missing="values")

#: VirtualiZarr's tests that apply to a parser of Zarr v2 stores
FUNCTIONS = [
    "test_parser_roundtrip_matches_xarray",
    "test_parser_recurses_into_subgroups",
    "test_parser_scalar_roundtrip_matches_xarray",
    "test_parser_with_registry_rooted_at_filesystem_root",
    "test_zarr_parser_works_inside_running_event_loop",
    "test_parser_with_nested_store_path",
]
METHODS = ["test_loadable_variables", "test_skip_variables", "test_manifest_indexing",
           "test_virtual_dataset_zarr_attrs"]


@pytest.fixture(autouse=True)
def _ours(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upstream, "ZarrParser", _AsZarrParser)


def _air() -> xr.Dataset:
    """xarray's tutorial "air_temperature" (NCEP reanalysis) subset VirtualiZarr's conftest uses:
    ``air`` (time, lat, lon) with CF attributes, the same coordinates; synthetic values."""
    time = np.array("2013-01-01T00", dtype="datetime64[ns]") + np.arange(10) * np.timedelta64(6, "h")
    lat = np.linspace(75.0, 15.0, 25, dtype="float32")
    lon = np.linspace(200.0, 330.0, 53, dtype="float32")
    air = (np.arange(10 * 25 * 53, dtype="int16").reshape(10, 25, 53) % 3000)
    ds = xr.Dataset({"air": (("time", "lat", "lon"), air,
                             {"long_name": "4xDaily Air temperature at sigma level 995", "units": "degK",
                              "scale_factor": 0.01, "dtype": "float32"})},
                    coords={"time": time, "lat": ("lat", lat, {"units": "degrees_north"}),
                            "lon": ("lon", lon, {"units": "degrees_east"})},
                    attrs={"Conventions": "COARDS", "title": "4x daily NMC reanalysis (1948)"})
    ds["air"].encoding = {"scale_factor": 0.01, "dtype": "int16"}
    ds["air"].attrs.pop("scale_factor")
    ds["air"].attrs.pop("dtype")
    return ds


def test_the_module_runs_our_parser() -> None:
    """The substitution the tests below rely on (a name VirtualiZarr renamed would run its own)."""
    assert upstream.ZarrParser is _AsZarrParser
    assert all(callable(getattr(upstream, name)) for name in FUNCTIONS)
    assert all(callable(getattr(upstream.TestOpenVirtualDatasetZarr, name)) for name in METHODS)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_virtualizarr_parser_test(name: str, tmpdir: Any, tmp_path: Any) -> None:
    func = getattr(upstream, name)
    available = {"tmpdir": tmpdir, "tmp_path": tmp_path, "zarr_format": 2,
                 "local_registry": ObjectStoreRegistry({"file://": LocalStore()})}
    func(**{p: available[p] for p in inspect.signature(func).parameters})


@pytest.mark.parametrize("name", METHODS)
def test_virtualizarr_open_virtual_dataset_zarr_test(name: str, tmpdir: Any) -> None:
    filepath = f"{tmpdir}/air.zarr"
    _air().to_zarr(filepath, zarr_format=2)
    getattr(upstream.TestOpenVirtualDatasetZarr(), name)(zarr_store=filepath)


def test_a_v2_fill_value_masks_as_xarray_reads_the_source(tmp_path: Any) -> None:
    """VirtualiZarr's test_v2_slash_dimension_separator fails on the one value equal to the v2
    fill_value (0.0), which it expects raw; xarray's engine="zarr" masks it in the source, as we do."""
    registry = ObjectStoreRegistry({"file://": LocalStore()})
    with pytest.raises(AssertionError, match=r"nan location mismatch"):
        upstream.test_v2_slash_dimension_separator(tmp_path=tmp_path, local_registry=registry)
    source = tmp_path / "slash_sep.zarr"
    by_xarray = xr.open_dataset(source, engine="zarr", consolidated=False)["data"].values
    assert np.isnan(by_xarray[0, 0]) and np.isnan(by_xarray).sum() == 1
    from virtualizarr import open_virtual_dataset

    with open_virtual_dataset(url=str(source), registry=registry, parser=_AsZarrParser(),
                              loadable_variables=["data"]) as vds:
        np.testing.assert_array_equal(vds["data"].values, by_xarray)
