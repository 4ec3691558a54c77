"""``zstrings check`` runs the open ``engine="zstrings"`` runs, for every group: whatever
``xr.open_dataset(target, engine="zstrings", group=...)`` raises, check reports (exit 1 or 2, the
error in its output). Before, check read each array's chunks but never built the Datasets, so a
store xarray's own ``to_zarr(mode="a")`` had changed printed "no problems" while every open raised
(issue 36, item 6)."""

from __future__ import annotations

import json
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from xr_zstrings import to_nczarr
from xr_zstrings.cli import main
from xr_zstrings.sample import sample_path


def _groups(store: Path) -> list[str]:
    """The store's groups, from its files (not from our reader): folders holding a .zgroup or a
    group's zarr.json."""
    out = ["/"]
    for p in sorted(store.rglob("*")):
        if p.parent == store or not p.is_file():
            continue
        if p.name == ".zgroup" or (p.name == "zarr.json" and json.loads(p.read_text()).get("node_type") == "group"):
            out.append("/" + p.parent.relative_to(store).as_posix())
    return out


def _open_errors(store: Path) -> list[str]:
    """What open_dataset raises for each group (xarray's own entry point, engine="zstrings")."""
    errors = []
    for g in _groups(store):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                xr.open_dataset(store, engine="zstrings", group=None if g == "/" else g)
        except Exception as e:  # each error is what check must report
            errors.append(" ".join(str(e).split()))
    return errors


def _check(store: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = main(["check", str(store)])
    out = capsys.readouterr()
    return code, out.out + out.err


def _xarray_appended(p: Path) -> None:
    """The issue's case: xarray's own to_zarr(mode="a", consolidated=False) adds a variable to the
    store and rewrites the root's attributes without the NCZarr dimension list."""
    n = xr.open_dataset(p, engine="zstrings").sizes["station"]
    xr.Dataset({"extra": ("station", np.arange(float(n)))}).to_zarr(p, mode="a", consolidated=False,
                                                                     zarr_format=2)


def _root_zattrs_removed(p: Path) -> None:
    (p / ".zattrs").unlink()


def _subgroup_dimension_dropped(p: Path) -> None:
    """The subgroup's variable references a dimension its store no longer declares."""
    za = json.loads((p / "metadata" / "country" / ".zattrs").read_text())
    za["_nczarr_array"] = {**za.get("_nczarr_array", {}), "dimension_references": ["/nowhere"]}
    (p / "metadata" / "country" / ".zattrs").write_text(json.dumps(za))


def _bad_time_units(p: Path) -> None:
    """A CF attribute xarray's decoding refuses (check reads the raw values; the open decodes)."""
    za = json.loads((p / "time" / ".zattrs").read_text())
    za["units"] = "days since the beginning"
    za["calendar"] = "no-such-calendar"
    (p / "time" / ".zattrs").write_text(json.dumps(za))


#: (xarray's to_zarr(mode="a") and a root .zattrs removed leave a root without the NCZarr superblock
#: of this store's layout: netcdf-c reads that as pure Zarr, and engine="zstrings" too since issue 37
#: item 9, so they no longer break the open: test_the_issues_case_opens_as_netcdf_c_reads_it)
DAMAGE: dict[str, Callable[[Path], None]] = {
    "subgroup dimension dropped": _subgroup_dimension_dropped,
    "time units garbled": _bad_time_units,
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_check_reports_what_open_dataset_raises(tmp_path: Path, damage: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    store = Path(shutil.copytree(sample_path(), tmp_path / "s.zarr"))
    DAMAGE[damage](store)
    errors = _open_errors(store)
    code, out = _check(store, capsys)
    assert errors, f"open_dataset opens every group after {damage!r}: the damage no longer breaks it"
    assert code in (1, 2), out
    for e in errors:
        assert e[:60] in out, (e, out)


def test_the_issues_case_opens_as_netcdf_c_reads_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """xarray's append rewrote the root's attributes without their NCZarr keys: netcdf-c reads such a
    store as pure Zarr, and so does engine="zstrings" now (issue 37 item 9: it raised DimensionError),
    and check with it (tests/write/test_foreign_changes.py: what check and repair say of a root that
    lost its keys, where .zmetadata or the arrays tell what they were)."""
    store = Path(shutil.copytree(sample_path(), tmp_path / "s.zarr"))
    for damage in (_xarray_appended, _root_zattrs_removed):
        damage(store)
        assert _open_errors(store) == []
        _, out = _check(store, capsys)
        assert "raises" not in out, out


def test_a_store_that_opens_still_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = xr.DataTree.from_dict({
        "/": xr.Dataset({"s": ("x", np.array(["a", "bé"], dtype=object))}),
        "/g": xr.Dataset({"t": ("x", np.array(["c", "d"], dtype=object))}),
    })
    store = tmp_path / "ok.zarr"
    to_nczarr(tree, store)
    assert _open_errors(store) == []
    code, out = _check(store, capsys)
    assert code == 0, out
    assert "raises" not in out
