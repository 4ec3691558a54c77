"""What xarray's own backend test classes need to run here, and how their outcomes are judged.

xarray ships its tests in the wheel (``xarray.tests``) but not the root ``conftest.py`` of its
repository, which registers its marks and applies two of them (``skip_if_param``: skip one
parametrization; ``network``/``flaky``: skip unless asked). This conftest does the same for the
classes ``test_xarray_backends.py`` imports, runs their ``async`` tests (xarray uses
pytest-asyncio's mark; a plain ``asyncio.run`` does for these), and judges the classes that read
through engine="zstrings" against their peer engine (``peer_engine`` on the class):

* ours passes: passed;
* ours fails and the test is in ``DELIBERATE`` (the package differs on purpose; each listed in
  docs/format-notes.md): xfail with the reason; a listed test that passes fails ("stale");
* ours fails: the same test is run again with the peer engine reading (same fixtures, a fresh
  ``tmp_path``): the peer fails too -> xfail naming its error; the peer passes -> a regression,
  failed with our error.

At the end a summary line per class counts passed (and how many of those opened anything through
engine="zstrings"), regressions, deliberate differences, peer failures and skips
(tests/xarray_backends_summary.py: a plugin of the root conftest, since with pytest-xdist only the
controller, which never loads this conftest, sees every report).
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest
from _pytest.outcomes import Skipped, XFailed

# The two fixtures of xarray's tests/conftest.py the classes use, as it defines them. Not imported
# from there: importing xarray.tests uses its marks before this conftest has registered them (when
# the whole suite is collected, --strict-markers is already in force then).


@pytest.fixture(params=[pytest.param(False, id="numpy"), pytest.param(True, id="dask")])
def use_dask(request: pytest.FixtureRequest) -> bool:
    return request.param


@pytest.fixture(params=["s", "ms", "us", "ns"])
def time_unit(request: pytest.FixtureRequest) -> str:
    return request.param


_XARRAY_MARKS = ("network", "flaky", "asyncio", "skip_if_param", "skip_with_dask_array",
                 "xfail_with_dask_array", "slow", "slow_hypothesis")
_HERE = "xarray_backends"


def pytest_configure(config: pytest.Config) -> None:
    for mark in _XARRAY_MARKS:
        config.addinivalue_line("markers", f"{mark}: xarray's own mark (its backend tests run in {_HERE}/)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE not in str(item.path):
            continue
        params = getattr(getattr(item, "callspec", None), "params", {})
        for mark in item.iter_markers("skip_if_param"):  # xarray's conftest: skip one parametrization
            kw = dict(mark.kwargs)
            reason, condition = kw.pop("reason", ""), kw.pop("condition", True)
            if condition and all(params.get(k) == v for k, v in kw.items()):
                item.add_marker(pytest.mark.skip(reason=reason))
        if "network" in item.keywords:
            item.add_marker(pytest.mark.skip(reason="needs the internet (xarray's 'network' mark)"))
        if "flaky" in item.keywords:
            item.add_marker(pytest.mark.skip(reason="xarray marks it flaky (run only with --run-flaky there)"))
        deselected = getattr(item.cls, "deselected", {})
        why = deselected.get(item.name, deselected.get(item.originalname))
        if why:
            item.add_marker(pytest.mark.skip(reason=f"not run here: {why}"))


def _call(fn: Any, args: dict[str, Any]) -> Any:
    if inspect.iscoroutinefunction(fn):
        return asyncio.run(fn(**args))
    return fn(**args)


def _fresh(args: dict[str, Any], name: str) -> dict[str, Any]:
    """The same fixture values with a new ``tmp_path`` (a test may have left files in the first)."""
    if "tmp_path" not in args:
        return args
    p = args["tmp_path"] / name
    p.mkdir()
    return {**args, "tmp_path": p}


def _short(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]}"


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    cls = pyfuncitem.cls
    if cls is None or _HERE not in str(pyfuncitem.path):
        return None
    fn = pyfuncitem.obj
    args = {a: pyfuncitem.funcargs[a] for a in pyfuncitem._fixtureinfo.argnames}
    peer = getattr(cls, "peer_engine", None)
    if peer is None:  # an unmodified xarray class
        _call(fn, args)
        return True
    inst = pyfuncitem.instance
    deliberate = cls.deliberate.get(pyfuncitem.name, cls.deliberate.get(pyfuncitem.originalname))
    try:
        _call(fn, args)
    except (Skipped, XFailed):
        raise
    except BaseException as ours:  # judged against the peer below
        pyfuncitem.user_properties.append(("zstrings_opens", inst.zstrings_opens))
        if deliberate is not None:
            _judge_deliberate(inst, fn, args, deliberate, ours)
        inst.read_engine = peer
        try:
            _call(fn, _fresh(args, "peer"))
        except BaseException as theirs:
            pytest.xfail(f"peer fails too: engine={peer!r} {_short(theirs)} (ours: {_short(ours)})")
        raise AssertionError(
            f"regression: engine={peer!r} passes this xarray test, engine='zstrings' fails it: {_short(ours)}"
        ) from ours
    pyfuncitem.user_properties.append(("zstrings_opens", inst.zstrings_opens))
    if deliberate is not None:
        raise AssertionError(
            f"{pyfuncitem.originalname} passes now: take it out of DELIBERATE (and docs/format-notes.md); "
            f"it was listed because {deliberate[0]}"
        )
    return True


def _judge_deliberate(inst: Any, fn: Any, args: dict[str, Any], deliberate: tuple[str, Any],
                      ours: BaseException) -> None:
    """A listed difference: xfail with its reason; when the listing names open keywords under
    which the test passes (e.g. string_dtype="bytes"), the test must pass with them."""
    reason, alt = deliberate
    if alt:
        inst.extra_open_kwargs = dict(alt)
        try:
            _call(fn, _fresh(args, "alt"))
        except BaseException as e:
            raise AssertionError(
                f"listed as a deliberate difference ({reason}) that open_dataset(..., {alt}) undoes, but "
                f"with {alt} it fails too: {_short(e)}"
            ) from ours
        finally:
            inst.extra_open_kwargs = {}
    pytest.xfail(f"deliberate difference: {reason}" + (f" (passes with {alt})" if alt else ""))
