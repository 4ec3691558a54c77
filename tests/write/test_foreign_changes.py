"""Another tool's change to a store we wrote, made without re-consolidating (issue 37, items 8-9):
zarr-python's ``attrs[...] = ...`` on a group opened with ``use_consolidated=False``.

On an array it rewrites the array's ``.zattrs`` and ``.zarray`` (without ``_nczarr_array``: netcdf-c
then refuses the store) and leaves ``.zmetadata`` stale: ``check`` said "complete", ``repair``
"nothing to do", and engine="zstrings" never showed the attribute, even after one of our appends.
On the root it rewrites ``.zgroup`` as ``{"zarr_format": 2}``: netcdf-c reads the store as pure Zarr,
engine="zstrings" refused it ("dangling '/t'"), ``check`` marked every variable "ok".

Every value and attribute is compared with what the peers read: netCDF4 (netcdf-c), xarray's
engine="zarr" and zarr-python.
"""

from __future__ import annotations

import json
import uuid
import warnings
from pathlib import Path
from typing import Any

import netCDF4
import numpy as np
import pytest
import xarray as xr
import zarr
from peers import nc_url
from s3_server import S3Server

from xr_zstrings import to_nczarr
from xr_zstrings.cli.main import main
from xr_zstrings.write.repair import repair

BUCKET = "zstrings-foreign-changes"


def _data(start: int, n: int) -> xr.Dataset:
    ds = xr.Dataset({"obs": ("t", np.arange(start, start + n, dtype="f8")),
                     "name": ("t", np.array([f"n{i}" for i in range(start, start + n)], dtype=object))},
                    attrs={"title": "foreign"})
    ds.encoding["unlimited_dims"] = {"t"}
    return ds


class Store:
    """A store we wrote, locally or in moto S3: its URL, a zarr-python group on it (opened as the
    issue's foreign tool opens it), and a local folder netCDF4 reads (S3: a download)."""

    def __init__(self, where: str, tmp_path: Path, s3: S3Server | None) -> None:
        self.tmp_path, self.s3 = tmp_path, s3
        if where == "s3":
            assert s3 is not None
            self.prefix = f"f-{uuid.uuid4().hex[:8]}/s.zarr"
            s3.bucket(BUCKET)
            self.url, self.so = f"s3://{BUCKET}/{self.prefix}", s3.options()
        else:
            self.prefix, self.url, self.so = "", str(tmp_path / "s.zarr"), None
        to_nczarr(_data(0, 5), self.url, storage_options=self.so)

    def group(self) -> zarr.Group:
        """What the issue's foreign tool opens: the objects, not the consolidated metadata."""
        if self.s3 is None:
            return zarr.open_group(self.url, mode="r+", zarr_format=2, use_consolidated=False)
        return zarr.open_group(self.objects(), mode="r+", zarr_format=2, use_consolidated=False)

    def objects(self, read_only: bool = False) -> zarr.storage.ObjectStore:
        from obstore.store import S3Store
        from s3_server import KEY, REGION, SECRET

        assert self.s3 is not None
        return zarr.storage.ObjectStore(S3Store(BUCKET, prefix=self.prefix, endpoint=self.s3.endpoint,
                                                access_key_id=KEY, secret_access_key=SECRET, region=REGION,
                                                client_options={"allow_http": True}), read_only=read_only)

    def zarr(self) -> xr.Dataset:
        """xarray's engine="zarr" (through zarr-python's ObjectStore on S3)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if self.s3 is None:
                return xr.open_dataset(self.url, engine="zarr").load()
            return xr.open_dataset(self.objects(read_only=True), engine="zarr").load()

    def local(self) -> Path:
        if self.s3 is None:
            return Path(self.url)
        return self.s3.download(BUCKET, self.prefix, self.tmp_path / f"copy-{uuid.uuid4().hex[:6]}.zarr")

    def zstrings(self) -> xr.Dataset:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return xr.open_dataset(self.url, engine="zstrings", storage_options=self.so).load()

    def check(self, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
        capsys.readouterr()
        code = main(["check", self.url])  # (S3: the AWS_* environment, s3_env)
        return code, capsys.readouterr().out


@pytest.fixture
def s3_env(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """The CLI reaches moto through the environment (as a user's shell would)."""
    from s3_server import KEY, REGION, SECRET

    for k, v in {"AWS_ENDPOINT_URL": s3.endpoint, "AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET,
                 "AWS_REGION": REGION, "AWS_ALLOW_HTTP": "true"}.items():
        monkeypatch.setenv(k, v)
    return s3


def _netcdf4(path: Path) -> dict[str, Any]:
    """netcdf-c's view (netCDF4, NCZarr mode): dimensions, values and attributes."""
    with netCDF4.Dataset(nc_url(path)) as d:
        return {"dims": {n: (len(x), x.isunlimited()) for n, x in d.dimensions.items()},
                "vars": {n: (v.dimensions, [str(x) for x in np.asarray(v[:]).tolist()],
                             {a: str(v.getncattr(a)) for a in v.ncattrs() if a != "_FillValue" and not
                              a.startswith("_nczarr")}) for n, v in d.variables.items()},
                "attrs": {a: str(d.getncattr(a)) for a in d.ncattrs()}}


def _view(ds: xr.Dataset) -> dict[str, Any]:
    """The same view of an xarray Dataset (engine="zstrings" or "zarr")."""
    def text(x: Any) -> str:
        return x.decode() if isinstance(x, bytes) else str(x)

    return {"dims": dict(ds.sizes),
            "vars": {n: (v.dims, [text(x) for x in np.asarray(v.values).tolist()],
                         {a: str(x) for a, x in v.attrs.items() if a != "_FillValue"})
                     for n, v in ds.data_vars.items()},
            "attrs": {a: str(x) for a, x in ds.attrs.items() if a != "_NCProperties"}}


def _agree(st: Store, *, unlimited: bool = True) -> dict[str, Any]:
    """engine="zstrings", engine="zarr" and netCDF4 read the same dimensions, values and attributes."""
    ours = _view(st.zstrings())
    theirs = _view(st.zarr())
    nc = _netcdf4(st.local())
    assert ours == theirs
    assert {"dims": {n: size for n, (size, _) in nc["dims"].items()}, "vars": nc["vars"],
            "attrs": {a: v for a, v in nc["attrs"].items() if a != "_NCProperties"}} == ours
    if unlimited:
        assert nc["dims"]["t"][1], "netcdf-c no longer sees 't' unlimited"
    return ours


WHERE = ["local", "s3"]


@pytest.fixture(params=WHERE)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    s3 = request.getfixturevalue("s3_env") if request.param == "s3" else None
    return Store(request.param, tmp_path, s3)


# --- item 8: an array's attributes --------------------------------------------------------------


def test_check_names_a_foreign_change_to_an_array_and_repair_shows_it(store: Store,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    store.group()["obs"].attrs["x"] = "y"
    code, out = store.check(capsys)
    assert code == 1, out
    assert "consolidated metadata is stale for obs/.zarray, obs/.zattrs" in out
    assert "PROBLEM obs/.zarray: lost _nczarr_array" in out
    assert "PROBLEM .zmetadata: consolidated metadata is stale" in out
    report = repair(store.url, storage_options=store.so)
    assert report.changed and "rewrote .zmetadata" in report.action and "_nczarr_array" in report.action
    assert _agree(store)["vars"]["obs"][2] == {"x": "y"}
    code, out = store.check(capsys)
    assert code == 0, out
    assert "complete" in out


def test_check_names_a_metadata_object_that_is_not_json(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    """An array's .zattrs cut short (not JSON): zarr-python reading the objects fails on it, and
    check says so, naming the key (exit 1; before: "complete", no problem, exit 0, as the store opens
    from .zmetadata)."""
    if store.s3 is None:
        (Path(store.url) / "obs" / ".zattrs").write_bytes(b'{"units": ')
    else:
        import obstore

        assert store.s3 is not None
        obstore.put(store.s3.obstore(BUCKET), f"{store.prefix}/obs/.zattrs", b'{"units": ')
    with pytest.raises(ValueError):  # (json's error)
        zarr.open_group(store.objects(read_only=True) if store.s3 else store.url, mode="r", zarr_format=2,
                        use_consolidated=False)["obs"].attrs.asdict()
    code, out = store.check(capsys)
    assert code == 1, out
    assert "key 'obs/.zattrs': malformed JSON" in out and "PROBLEM metadata" in out, out


def test_an_append_keeps_and_shows_a_foreign_change_to_an_array(store: Store,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    store.group()["obs"].attrs["x"] = "y"
    to_nczarr(_data(5, 3), store.url, mode="a", append_dim="t", storage_options=store.so)
    seen = _agree(store)
    assert seen["vars"]["obs"][2] == {"x": "y"}
    assert seen["vars"]["obs"][1] == [str(float(i)) for i in range(8)]
    code, out = store.check(capsys)
    assert code == 0, out


def test_adding_variables_after_zarr_python_rewrote_the_root(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    st = Store("local", tmp_path, None)
    st.group().attrs["x"] = "y"
    to_nczarr(xr.Dataset({"more": ("t", np.arange(5.0))}), st.url, mode="a")
    seen = _agree(st)
    assert seen["attrs"]["x"] == "y" and "more" in seen["vars"]
    code, out = st.check(capsys)
    assert code == 0, out


# --- item 9: the root .zgroup ----------------------------------------------------------------------


def test_a_root_zarr_python_rewrote_is_read_as_netcdf_c_reads_it(store: Store,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    store.group().attrs["x"] = "y"
    assert json.loads((store.local() / ".zgroup").read_text()) == {"zarr_format": 2}  # (the premise)
    seen = _agree(store, unlimited=False)  # (pure Zarr to netcdf-c: no unlimited dimension)
    assert seen["attrs"]["x"] == "y" and seen["dims"] == {"t": 5}
    code, out = store.check(capsys)
    assert code == 1, out
    assert "PROBLEM /.zgroup: lost _nczarr_superblock, _nczarr_group, xr_zstrings" in out


def test_repair_puts_back_what_the_root_lost(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    store.group().attrs["x"] = "y"
    report = repair(store.url, storage_options=store.so)
    assert report.changed and "from .zmetadata" in report.action
    root = json.loads((store.local() / ".zgroup").read_text())
    assert {"_nczarr_superblock", "_nczarr_group", "xr_zstrings"} <= set(root)
    seen = _agree(store)
    assert seen["attrs"]["x"] == "y"
    code, out = store.check(capsys)
    assert code == 0, out


def test_repair_rebuilds_the_root_from_the_arrays_without_zmetadata(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    tree = xr.DataTree.from_dict({"/": _data(0, 5),
                                  "/g": xr.Dataset({"v": (("t", "y"), np.arange(10.0).reshape(5, 2))})})
    path = tmp_path / "s.zarr"
    to_nczarr(tree, path)
    before = _netcdf4(path)
    (path / ".zmetadata").unlink()
    zarr.open_group(path, mode="r+", zarr_format=2, use_consolidated=False).attrs["x"] = "y"
    code, out = main(["check", str(path)]), capsys.readouterr().out
    assert code == 1 and "PROBLEM /.zgroup: lost _nczarr_superblock, _nczarr_group" in out, out
    report = repair(path)
    assert report.changed and "from the arrays" in report.action
    with netCDF4.Dataset(nc_url(path)) as d:
        assert sorted(d.groups) == ["g"] and d.groups["g"].variables["v"].dimensions == ("t", "y")
        assert np.array_equal(d.groups["g"].variables["v"][:], np.arange(10.0).reshape(5, 2))
    after = _netcdf4(path)
    assert after["vars"] == before["vars"] and after["attrs"] == {**before["attrs"], "x": "y"}
    assert {n: s for n, (s, _) in after["dims"].items()} == {n: s for n, (s, _) in before["dims"].items()}
    g = xr.open_dataset(path, engine="zstrings", group="g").load()
    assert g["v"].dims == ("t", "y") and np.array_equal(g["v"].values, np.arange(10.0).reshape(5, 2))
    assert main(["check", str(path)]) == 0, capsys.readouterr().out


def test_an_append_after_zarr_python_rewrote_the_root(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    store.group().attrs["x"] = "y"
    to_nczarr(_data(5, 3), store.url, mode="a", append_dim="t", storage_options=store.so)
    seen = _agree(store)
    assert seen["attrs"]["x"] == "y" and seen["dims"] == {"t": 8}
    code, out = store.check(capsys)
    assert code == 0, out


def test_writes_into_a_subgroup_keep_foreign_changes_there(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """zarr-python rewrote a subgroup's .zgroup (without its _nczarr_group) and .zattrs, and an array's
    .zattrs/.zarray there: adding a variable to that subgroup and appending keep both changes, and
    netcdf-c reads the subgroup's NCZarr dimensions again (the write put its lost keys back)."""
    root = _data(0, 5)
    path = tmp_path / "s.zarr"
    to_nczarr(xr.DataTree.from_dict({"/": root, "/g": xr.Dataset({"v": ("t", np.arange(5.0) * 2)}, attrs={"a": "b"})}),
              path)
    g = zarr.open_group(path, mode="r+", zarr_format=2, use_consolidated=False)
    g["g"].attrs["gx"] = "gy"
    g["g/v"].attrs["vx"] = "vy"
    assert "_nczarr_group" not in json.loads((path / "g" / ".zgroup").read_text())  # (the premise)
    to_nczarr({"/g": xr.Dataset({"w": ("t", np.arange(5.0))})}, path, mode="a")
    to_nczarr({"/": _data(5, 2), "/g": xr.Dataset({"v": ("t", np.arange(2.0))})}, path, mode="a", append_dim="t")
    with netCDF4.Dataset(nc_url(path)) as d:
        nc = d.groups["g"]
        assert (nc.getncattr("a"), nc.getncattr("gx"), nc.variables["v"].getncattr("vx")) == ("b", "gy", "vy")
        assert sorted(nc.variables) == ["v", "w"]
        v, w = nc.variables["v"][:].filled(np.nan), nc.variables["w"][:].filled(np.nan)
    ours = xr.open_dataset(path, engine="zstrings", group="g").load()
    theirs = xr.open_dataset(path, engine="zarr", group="g").load()
    for ds in (ours, theirs):
        assert (ds.attrs["a"], ds.attrs["gx"], ds["v"].attrs["vx"]) == ("b", "gy", "vy")
        np.testing.assert_array_equal(ds["v"].values, v)
        np.testing.assert_array_equal(ds["w"].values, w)
    np.testing.assert_array_equal(v, [0.0, 2.0, 4.0, 6.0, 8.0, 0.0, 1.0])
    code, out = main(["check", str(path)]), capsys.readouterr().out
    assert code == 0, out


def test_repair_lists_a_variable_xarray_added_without_re_consolidating(store: Store,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """xarray's to_zarr(mode="a", consolidated=False) adds a variable (not in the NCZarr listing) and
    rewrites the root without its NCZarr keys: check names both, and after repair every reader sees
    the variable on the store's dimension."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        target = store.url if store.s3 is None else store.objects()
        xr.Dataset({"extra": ("t", np.arange(5.0) + 10)}).to_zarr(target, mode="a", consolidated=False, zarr_format=2)
    code, out = store.check(capsys)
    assert code == 1 and "PROBLEM /extra: not in its group's NCZarr listing" in out, out
    report = repair(store.url, storage_options=store.so)
    assert "listed /extra" in report.action, report
    seen = _agree(store)
    assert seen["vars"]["extra"][:2] == (("t",), [str(float(i)) for i in range(10, 15)])
    code, out = store.check(capsys)
    assert code == 0, out


@pytest.mark.parametrize("damage", ["xarray to_zarr(mode='a')", "root .zattrs removed"])
def test_repair_rebuilds_a_netcdf_c_root_in_its_zattrs_layout(tmp_path: Path, damage: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A store netcdf-c 4.10.1 wrote (NCZarr keys in .zattrs, no .zmetadata) whose root .zattrs another
    tool rewrote: xarray's append replaces the root's attributes (and adds a variable it does not
    list), or the object is gone. netcdf-c reads it as pure Zarr; check names what was lost, and after
    repair netcdf-c reads every variable with its NCZarr dimensions (and xarray's), as before."""
    import shutil

    from xr_zstrings.sample import sample_path

    path = Path(shutil.copytree(sample_path(), tmp_path / "s.zarr"))
    assert not (path / ".zmetadata").exists()
    before = _netcdf4(path)
    if damage == "root .zattrs removed":
        (path / ".zattrs").unlink()
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            xr.Dataset({"extra": ("station", np.arange(5.0))}).to_zarr(path, mode="a", consolidated=False,
                                                                       zarr_format=2)
    code, out = main(["check", str(path)]), capsys.readouterr().out
    assert code == 1 and "PROBLEM /.zattrs: lost _nczarr_superblock, _nczarr_group" in out, out
    report = repair(path)
    assert report.changed and "from the arrays" in report.action, report
    after = _netcdf4(path)
    extra = {"extra": (("station",), [str(float(i)) for i in range(5)], {})} if damage.startswith("xarray") else {}
    assert after["vars"] == {**before["vars"], **extra}
    assert {n: s for n, (s, _) in after["dims"].items()} == {n: s for n, (s, _) in before["dims"].items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = xr.open_dataset(path, engine="zstrings").load()
    assert sorted(ours.data_vars) == sorted(n for n in after["vars"] if n not in ours.coords)
    assert main(["check", str(path)]) == 0, capsys.readouterr().out


@pytest.mark.parametrize("then", ["repair", "append"])
def test_rows_zarr_python_appended_to_one_array_are_kept(tmp_path: Path, then: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """zarr-python's ``append`` on one array grows its .zarray only (the NCZarr dimension and the other
    arrays stay at 5). repair grows the dimension and the other arrays (fill); our append puts its
    rows after the other tool's, at the same index in every array (it wrote over them: the
    dimension's size was its offset). engine="zstrings", engine="zarr" and netCDF4 agree."""
    path = tmp_path / "s.zarr"
    ds = xr.Dataset({"obs": ("t", np.arange(5.0)), "o2": ("t", np.arange(5.0))})
    to_nczarr(ds, path, unlimited_dims=["t"])
    zarr.open_array(path, path="obs", mode="r+", zarr_format=2).append(np.array([100.0, 101.0]))
    code, out = main(["check", str(path)]), capsys.readouterr().out
    assert code == 1 and "PROBLEM /t: an array on this unlimited dimension has 7 elements" in out, out
    nan = np.nan
    if then == "repair":
        assert "grew /t to 7" in repair(path).action
        want = {"obs": [0, 1, 2, 3, 4, 100, 101], "o2": [0, 1, 2, 3, 4, nan, nan]}
    else:
        to_nczarr(xr.Dataset({"obs": ("t", [5.0, 6.0]), "o2": ("t", [5.0, 6.0])}), path, mode="a", append_dim="t")
        want = {"obs": [0, 1, 2, 3, 4, 100, 101, 5, 6], "o2": [0, 1, 2, 3, 4, nan, nan, 5, 6]}
    with netCDF4.Dataset(nc_url(path)) as d:
        nc = {n: d.variables[n][:].filled(nan) for n in want}
    for engine in ("zstrings", "zarr"):
        got = xr.open_dataset(path, engine=engine).load()
        for n, values in want.items():
            np.testing.assert_array_equal(got[n].values, values, err_msg=f"{engine} {n}")
    for n, values in want.items():
        np.testing.assert_array_equal(nc[n], values, err_msg=f"netCDF4 {n}")
    assert main(["check", str(path)]) == 0, capsys.readouterr().out
