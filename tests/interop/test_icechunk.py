"""icechunk sessions as stores: read-only and writable sessions opened with engine="zstrings"
(open_dataset, open_datatree, open_groups), and to_zarr_v3 into a writable session, committed by the
caller, then read by engine="zstrings", engine="zarr" and zarr-python.

icechunk's ``session.store`` is a zarr-python Store that holds Zarr v3 keys only: asked for
NCZarr 1.0's ``.nczarr``/``.nczgroup``/``.nczattr`` objects (which every open asks for in its first
batch, before the format is known) it raises ``InvalidInputError`` instead of answering "missing";
the reader takes that refusal as "missing" for those keys only.

icechunk runs its requests on a Rust runtime of its own, as obstore does: a child forked after a
read through a session is refused at once (icechunk itself would wait forever there), and a script
ending right after a read exits cleanly (tests/processes.py, xr_zstrings/io/runtime.py).
"""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest
import xarray as xr
import zarr
from processes import EXIT_CASES, FORK, assert_exit, in_forked_child, run_ending_right_after

# icechunk publishes wheels for Python >= 3.12 only (the test extra installs it there): on 3.11 (CI's
# py311 and minimum jobs) these tests are a peer limit, said in the skip reason, not a gap
pytestmark = pytest.mark.skipif(
    sys.version_info < (3, 12),
    reason="peer limit: icechunk supports Python >= 3.12 only (no release for 3.11); CI's py312, py313 and "
           "fallback jobs run these tests",
)
if sys.version_info >= (3, 12):
    import icechunk

NAMES = np.array(["Zürich", "東京", "", "Oslo"], dtype=np.dtypes.StringDType())


def _dataset() -> xr.Dataset:
    return xr.Dataset(
        {"temp": (("time", "station"), np.arange(8.0).reshape(2, 4), {"units": "K"}),
         "label": ("station", np.array([s.upper() for s in NAMES.tolist()], dtype=np.dtypes.StringDType()))},
        coords={"station": NAMES, "time": [0, 1]},
        attrs={"title": "icechunk"},
    )


def _repo_with(ds: xr.Dataset, group_ds: xr.Dataset | None = None) -> icechunk.Repository:
    repo = icechunk.Repository.create(icechunk.in_memory_storage())
    session = repo.writable_session("main")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        ds.to_zarr(session.store, zarr_format=3, consolidated=False)
        if group_ds is not None:
            group_ds.to_zarr(session.store, group="sub", zarr_format=3, consolidated=False)
    session.commit("written by xarray")
    return repo


def test_readonly_session_opens_as_engine_zarr_reads_it():
    ds = _dataset()
    repo = _repo_with(ds)
    store = repo.readonly_session("main").store
    ours = xr.open_dataset(store, engine="zstrings").load()
    theirs = xr.open_dataset(store, engine="zarr", consolidated=False).load()
    xr.testing.assert_identical(ours, theirs)
    xr.testing.assert_identical(ours, ds)
    assert ours["station"].dtype == np.dtypes.StringDType()


def test_readonly_session_as_datatree_and_groups():
    sub = xr.Dataset({"code": ("k", np.array(["a", "bé"], dtype=np.dtypes.StringDType()))})
    repo = _repo_with(_dataset(), sub)
    store = repo.readonly_session("main").store
    tree = xr.open_datatree(store, engine="zstrings")
    assert sorted(n.path for n in tree.subtree) == ["/", "/sub"]
    assert tree["sub/code"].values.tolist() == ["a", "bé"]
    groups = xr.open_groups(store, engine="zstrings")
    assert sorted(groups) == ["/", "/sub"]
    xr.testing.assert_identical(groups["/sub"].load(), sub)
    xr.testing.assert_identical(tree.to_dataset().load(), _dataset())


def test_writable_session_opens_uncommitted_changes():
    repo = _repo_with(_dataset())
    session = repo.writable_session("main")
    extra = xr.Dataset({"note": ("n", np.array(["x", "ÿ"], dtype=np.dtypes.StringDType()))})
    extra.to_zarr(session.store, mode="a", zarr_format=3, consolidated=False)
    ours = xr.open_dataset(session.store, engine="zstrings")
    assert ours["note"].values.tolist() == ["x", "ÿ"]  # the session's own, not yet committed
    assert "note" not in xr.open_dataset(repo.readonly_session("main").store, engine="zstrings")


@pytest.mark.parametrize("layout", ["vlen-utf8", "zarrs.vlen", "arrow"])
def test_to_zarr_v3_into_a_writable_session(layout):
    """to_zarr_v3 writes into the session (no placeholder root: nothing is visible before the
    caller commits); committed, every reader reads it."""
    from xr_zstrings import to_zarr_v3

    ds = _dataset()
    repo = icechunk.Repository.create(icechunk.in_memory_storage())
    session = repo.writable_session("main")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        to_zarr_v3(ds, session.store, layout=layout)
    from xr_zstrings import ZStringsError

    with pytest.raises(ZStringsError):  # nothing committed yet: the branch has no store to open
        xr.open_dataset(repo.readonly_session("main").store, engine="zstrings")
    session.commit("to_zarr_v3")
    store = repo.readonly_session("main").store
    xr.testing.assert_identical(xr.open_dataset(store, engine="zstrings").load(), ds)
    if layout == "vlen-utf8":  # zarr-python's own layout: the peers read it too
        xr.testing.assert_identical(xr.open_dataset(store, engine="zarr", consolidated=False).load(), ds)
        assert zarr.open_group(store, mode="r")["label"][...].tolist() == ds["label"].values.tolist()


def test_to_zarr_v3_into_a_session_refuses_or_replaces_as_mode_says():
    from xr_zstrings import TargetExistsError, to_zarr_v3

    repo = _repo_with(_dataset())
    session = repo.writable_session("main")
    small = xr.Dataset({"s": ("x", np.array(["only"], dtype=np.dtypes.StringDType()))})
    with pytest.raises(TargetExistsError, match="mode='w-' never overwrites"):
        to_zarr_v3(small, session.store)
    to_zarr_v3(small, session.store, mode="w")
    session.commit("replaced")
    back = xr.open_dataset(repo.readonly_session("main").store, engine="zstrings")
    assert list(back.variables) == ["s"] and back["s"].values.tolist() == ["only"]


@EXIT_CASES
def test_a_script_ending_right_after_an_icechunk_read_exits_cleanly(without_hook: bool) -> None:
    # icechunk's requests complete from its Rust runtime's threads, as obstore's do (tests/processes.py)
    done = run_ending_right_after("""
        import warnings
        import icechunk, numpy as np, xarray as xr
        repo = icechunk.Repository.create(icechunk.in_memory_storage())
        session = repo.writable_session("main")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            xr.Dataset({"name": ("n", np.array(["Zürich", "東京"], dtype=np.dtypes.StringDType()))}).to_zarr(
                session.store, zarr_format=3, consolidated=False)
        session.commit("written by xarray")
        ds = xr.open_dataset(repo.readonly_session("main").store, engine="zstrings")
        print(ds["name"].values.tolist(), flush=True)
    """, without_hook=without_hook)
    assert done.stdout.splitlines() == [str(["Zürich", "東京"])], done.stderr
    assert_exit(done, without_hook=without_hook)


@FORK
def test_a_child_forked_after_icechunk_reads_is_refused_with_the_fix():
    # icechunk 2.3 in a forked child: every call (ours through a parent's session, or its own
    # Repository.open) waits forever; ours are refused at once instead
    repo = _repo_with(_dataset())
    ds = xr.open_dataset(repo.readonly_session("main").store, engine="zstrings")
    assert ds["label"][:1].values.tolist() == ["ZÜRICH"]  # the parent has made requests
    kind, message = in_forked_child(lambda: ds["label"].values.tolist())
    assert kind == "ForkedProcessError", (kind, message)
    assert "after that process used icechunk" in message and "'spawn'" in message
    assert "before icechunk is imported" in message
    assert ds["label"].values.tolist() == [s.upper() for s in NAMES.tolist()]  # the parent reads on
