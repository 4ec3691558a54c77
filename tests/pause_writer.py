"""Writers paused at a commit step, for the tests of the commit protocol under stalls and races.

Run as a child process (``Writer.start``), it runs one write and stops itself with SIGSTOP when the
package reports ``pause`` through ``sys.audit("xr_zstrings.commit", step)`` (steps: claimed, writing,
window, commit, committed): every thread stops, the claim's renewal thread with it, as a writer
paused by the OS or starved past its lease. The test meanwhile runs other writers, then continues
it (``resume``) and reads its outcome (``result``): one JSON line, ``{"outcome": "ok"}`` or the
exception's class and message.

    python pause_writer.py '{"op": "append", "target": "local:s.zarr", "pause": "committed", ...}'

``op``: "append" (``to_nczarr(mode="a")``), "v3-replace" (``to_zarr_v3(mode="w")``), "v3-append"
(``to_zarr_v3(mode="a")``), "migrate"
(in place), "soak" (``soak``: many appends, stopped at random). ``target``: "local:PATH" (a zarr-python ``LocalStore`` object), a path or a URL.
``start``/``n``/``tag``: the rows written (``rows``); ``slow``: seconds each chunk write takes (a
slow writer), ``env``: environment variables (``XR_ZSTRINGS_LOCK_TIMEOUT``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

T = np.dtypes.StringDType()
CHUNK = 10


def rows(start: int, n: int, tag: str, chunk: int = CHUNK) -> xr.Dataset:
    """``n`` rows from ``start`` along ``t``: a string and a number whose values name the writer
    (``tag``), so a reader can tell whose rows it sees."""
    t = np.arange(start, start + n)
    ds = xr.Dataset({"name": ("t", np.array([f"{tag}-{i}-é" for i in t], dtype=T)),
                     "value": ("t", t + {"a": 0.1, "b": 0.2, "c": 0.3, "x": 0.4}.get(tag[:1], 0.5))})
    for v in ds.variables.values():
        v.encoding["chunks"] = (chunk,)
    ds["name"].encoding["maxstrlen"] = 24
    return ds


def _store(target: str) -> Any:
    if target.startswith("local:"):
        from zarr.storage import LocalStore

        return LocalStore(target[len("local:"):], read_only=False)
    return target


def _slow(seconds: float) -> None:
    """Every batch of chunk writes through the package's store takes ``seconds`` longer."""
    from xr_zstrings.io.zstore import ZStore
    from xr_zstrings.write import chunks, zarr3

    chunks._BATCH_BYTES = zarr3._BATCH_BYTES = 1  # one chunk a batch
    original = ZStore.set_many

    def set_many(self: ZStore, items: Any, **kw: Any) -> None:
        items = list(items)
        if items and all(not k.rsplit("/", 1)[-1].startswith(".") and not k.endswith("zarr.json") for k, _ in items):
            time.sleep(seconds)
        original(self, items, **kw)

    ZStore.set_many = set_many  # type: ignore[method-assign]


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """Run the write ``spec`` names (in this process); its outcome."""
    from xr_zstrings import migrate, to_nczarr, to_zarr_v3

    pause, count = spec.get("pause"), int(spec.get("pause_count", 1))
    seen = [0]
    if pause:
        def hook(event: str, args: tuple[Any, ...]) -> None:
            if event == "xr_zstrings.commit" and args and args[0] == pause:
                seen[0] += 1
                if seen[0] == count:
                    os.kill(os.getpid(), signal.SIGSTOP)  # the whole process stops here, until SIGCONT

        sys.addaudithook(hook)
    if spec.get("slow"):
        _slow(float(spec["slow"]))
    so = spec.get("so")
    ds = rows(int(spec.get("start", 0)), int(spec.get("n", 0)), spec.get("tag", "a"), int(spec.get("chunk", CHUNK)))
    op, target = spec["op"], spec["target"]
    if op == "soak":
        from xr_zstrings.io import conditional

        return {"outcome": "ok", "attempts": soak(spec), "conditional": sorted(set(conditional._CONDITIONS.values()))}
    try:
        if op == "append":
            to_nczarr(ds, _store(target), mode="a", append_dim="t", storage_options=so)
        elif op == "v3-replace":
            to_zarr_v3(ds, _store(target), mode="w", storage_options=so)
        elif op == "v3-append":
            to_zarr_v3(ds, _store(target), mode="a", append_dim="t", storage_options=so)
        elif op == "migrate":
            migrate(_store(target), storage_options=so, **spec.get("kw", {}))
        else:
            raise ValueError(f"unknown op {op!r}")
    except Exception as e:  # reported to the test
        return {"outcome": type(e).__name__, "message": str(e)}
    return {"outcome": "ok"}


def soak(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """``spec["appends"]`` appends of 1-12 rows each (``tag`` ``<writer>s<k>``), each retried until it
    returns OK, with the whole process stopped at a random commit step for ``stall`` seconds (past
    the lease) with probability ``p`` per step: every attempt's outcome, in order."""
    import random

    from xr_zstrings import to_nczarr

    rng = random.Random(spec.get("seed"))
    p, stall = float(spec.get("p", 0.05)), float(spec.get("stall", 3))

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "xr_zstrings.commit" and rng.random() < p:
            # stopped whole (the claim's renewal thread too), woken by a process of its own
            subprocess.Popen(["sh", "-c", f"sleep {stall}; kill -CONT {os.getpid()}"])
            os.kill(os.getpid(), signal.SIGSTOP)

    sys.addaudithook(hook)
    trace: list[Any] = []
    if spec.get("trace"):  # (debugging a failure: every step and claim, with times)
        from xr_zstrings.io import commit

        def log(event: str, args: tuple[Any, ...]) -> None:
            if event == "xr_zstrings.commit":
                trace.append((round(time.time(), 3), args[0]))

        sys.addaudithook(log)
        begin = commit.Transaction.begin.__func__  # type: ignore[attr-defined]

        def traced(cls: Any, *a: Any, **kw: Any) -> Any:
            txn = begin(cls, *a, **kw)
            trace.append((round(time.time(), 3), "begun", txn.journal.txn if txn.journal else None,
                          txn.record.commit))
            return txn

        commit.Transaction.begin = classmethod(traced)  # type: ignore[method-assign,assignment]
    so, done = spec.get("so"), []
    for k in range(int(spec["appends"])):
        tag, n = f"{spec['tag']}s{k}", rng.randint(1, 12)
        ds = rows(0, n, tag, int(spec.get("chunk", CHUNK)))
        for _ in range(200):
            try:
                to_nczarr(ds, _store(spec["target"]), mode="a", append_dim="t", storage_options=so)
            except Exception as e:  # every attempt's outcome is the test's evidence
                done.append({"tag": tag, "n": n, "outcome": type(e).__name__, "message": str(e), "trace": trace[:]})
                trace.clear()
                time.sleep(rng.uniform(0.05, 0.3))
                continue
            done.append({"tag": tag, "n": n, "outcome": "ok", **({"trace": trace[:]} if trace else {})})
            trace.clear()
            break
    return done


@dataclass
class Writer:
    """A write running in a child process (``start``), paused at its step until ``resume``."""

    spec: dict[str, Any]
    proc: subprocess.Popen[str] | None = None
    env: dict[str, str] = field(default_factory=dict)

    def start(self) -> Writer:
        env = {**os.environ, **{k: str(v) for k, v in self.spec.get("env", {}).items()}}
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__)), json.dumps(self.spec)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        return self

    def _state(self) -> str:
        assert self.proc is not None
        try:
            return Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return "gone"

    def paused(self, timeout: float = 60) -> Writer:
        """Wait until the writer stopped itself at its pause step (fails the test if it ended)."""
        assert self.proc is not None
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self._state() == "T":
                return self
            if self.proc.poll() is not None:
                out, err = self.proc.communicate()
                raise AssertionError(f"the writer ended before its pause {self.spec.get('pause')!r}: {out} {err}")
            time.sleep(0.02)
        self.proc.kill()
        raise AssertionError(f"the writer did not reach its pause {self.spec.get('pause')!r} in {timeout} s")

    def resume(self) -> Writer:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)
        return self

    def result(self, timeout: float = 120) -> dict[str, Any]:
        """The write's outcome (it runs to its end first)."""
        assert self.proc is not None
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"the writer {self.spec} did not end in {timeout} s") from None
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        assert lines, f"the writer printed no outcome (exit {self.proc.returncode}): {out} {err}"
        return json.loads(lines[-1])

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def run_now(spec: dict[str, Any]) -> dict[str, Any]:
    """Run ``spec`` to its end in a child process (no pause): its outcome."""
    return Writer({**spec, "pause": None}).start().result()


if __name__ == "__main__":
    print(json.dumps(run(json.loads(sys.argv[1]))), flush=True)
