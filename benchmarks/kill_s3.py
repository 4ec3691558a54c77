"""The S3 kill harness on a real S3 server: every writer killed at every PUT or DELETE it makes, then
repaired and written again; and two writers appending to one store, round after round.

    python benchmarks/kill_s3.py [--server auto|seaweedfs|moto] [--rows 50] [--rounds 10]

The same harness as ``tests/write/test_kill.py::test_killed_at_every_put_on_s3`` (which runs it on
moto in the test suite), here on SeaweedFS by default (``weed mini`` from the ``bench`` extra, a
real S3 server in Go; moto when it is not installed). Each writer runs in a process forked by
``tests/write/kill_writer.py`` and is killed (SIGKILL) at its k-th S3 PUT or DELETE, for every k;
what it left is read with ``engine="zstrings"`` (the old data, the new data, or refused: only a new
store or a replacement may be refused), then ``xr_zstrings.repair`` runs (the writer is gone) and
the store is read again, then the same write runs once more and must give the right values.

Then two processes append to one store, released together each round (``--rounds``): every
append that returned must be in the store exactly once and whole; the others must have raised
``ConcurrentWriteError``. Prints Markdown tables.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests"), str(HERE.parent / "tests" / "write")]
from _s3 import KEY, REGION, SECRET, start_server, stop

BUCKET = "zstrings-kill"
WRITERS = ["nczarr_new", "nczarr_replace", "nczarr_append", "nczarr_addvars", "v3_new:vlen-utf8",
           "v3_replace:vlen-utf8"]


def _judged(tk: Any, target: str, so: dict[str, Any], allowed: dict[str, Any], whole: bool, where: str) -> str | None:
    """What engine="zstrings" reads ("old", "new", "refused"), or None (reported) when it is wrong."""
    try:
        return tk._judge("read", tk._ours(target, so), allowed, whole, where)
    except AssertionError as e:
        print(f"  WRONG {e}", file=sys.stderr)
        return None


def kill_every_put(endpoint: str, rows: int) -> None:
    import obstore
    import test_kill as tk
    import xarray as xr
    from obstore.store import S3Store

    from xr_zstrings import repair

    so = {"endpoint_url": endpoint, "key": KEY, "secret": SECRET, "region": REGION}
    store = S3Store(BUCKET, endpoint=endpoint, access_key_id=KEY, secret_access_key=SECRET, region=REGION,
                    client_options={"allow_http": True})
    forks = tk.ForkServer()
    print("| writer | PUT/DELETE per write | kills | read after the kill (old / new / refused) | after repair "
          "(old / new / empty or refused) | written again OK | wrong values |")
    print("|---|---:|---:|---|---|---:|---:|")
    totals = Counter()
    try:
        for writer in WRITERS:
            name = writer.split(":")[0]
            target = f"s3://{BUCKET}/kill-{writer.replace(':', '-')}-{uuid.uuid4().hex[:8]}.zarr"
            prefix = target.split(f"s3://{BUCKET}/", 1)[1]
            template = f"s3://{BUCKET}/template-{uuid.uuid4().hex[:8]}.zarr"
            tk._prepare_old(writer, template, so, rows, True)
            old_keys = [m["path"] for b in obstore.list(store, prefix=template.split("/", 3)[3] + "/") for m in b]

            def reset() -> None:
                keys = [m["path"] for b in obstore.list(store, prefix=prefix + "/") for m in b]
                if keys:
                    obstore.delete(store, keys)
                for key in old_keys:
                    obstore.copy(store, key, prefix + key[key.index("/"):])

            allowed = tk._allowed(writer, rows, True)
            whole = name in ("nczarr_new", "nczarr_replace", "v3_new", "v3_replace")
            again = {"old": tk._expected(writer, rows, True)[0], "new": tk._expected(writer, rows, True)[0]}
            if name == "nczarr_append":
                again["new"] = xr.concat([tk.appended(rows, True), tk.dataset(2, rows, True)], dim="obs")
            reset()
            full = forks.run(writer=writer, target=target, so=so, rows=rows, small=True)
            assert full["status"] == "ok", full
            total = int(full["events"])
            before, after, rerun, wrong = Counter(), Counter(), 0, 0
            for k in range(1, total + 1):
                reset()
                forks.run(writer=writer, target=target, so=so, kill_at=k, rows=rows, small=True)
                verdict = _judged(tk, target, so, allowed, whole, f"{writer} k={k}")
                if verdict is not None:
                    repair(target, storage_options=so)
                    done = _judged(tk, target, so, allowed, whole, f"{writer} k={k} repaired")
                if verdict is None or done is None:
                    wrong += 1
                    continue
                before[verdict] += 1
                after[done] += 1
                if name in ("nczarr_new", "v3_new") and done == "new":
                    rerun += 1  # complete already (mode="w-" would refuse it): nothing to write again
                    continue
                res = forks.run(writer=writer, target=target, so=so, rows=rows, small=True)
                got = tk._ours(target, so)
                want = tk._plain(tk._strings_as_objects(again["new" if done == "new" else "old"]))
                if res["status"] == "ok" and got[0] == "data" and tk._same(got[1], want):
                    rerun += 1
                else:
                    wrong += 1
                    print(f"  WRONG {writer} k={k}, written again: {res} {str(got)[:300]}", file=sys.stderr)
            totals.update(kills=total, wrong=wrong, rerun=rerun)
            print(f"| {writer} | {total} | {total} | {before['old']} / {before['new']} / {before['refused']} | "
                  f"{after['old']} / {after['new']} / {after['refused']} | {rerun} of {total} | {wrong} |", flush=True)
    finally:
        forks.close()
    print(f"\n{totals['kills']} kills: {totals['wrong']} wrong or stranded, {totals['rerun']} written again "
          "with the right values")


def two_writers(endpoint: str, rounds: int) -> None:
    import test_concurrency as tc
    import xarray as xr

    from xr_zstrings import to_nczarr

    so = {"endpoint_url": endpoint, "key": KEY, "secret": SECRET, "region": REGION}
    url = f"s3://{BUCKET}/two-{uuid.uuid4().hex[:8]}.zarr"
    to_nczarr(tc._s3_batch(0, 0), url, unlimited_dims=["t"], maxstrlen=8, storage_options=so)
    ctx = mp.get_context("spawn")
    go, step, results = ctx.Event(), ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=tc._s3_appender, args=(url, so, w, rounds, go, step, results)) for w in (1, 2)]
    for p in procs:
        p.start()
    go.set()
    for p in procs:
        p.join(600)
    got = [results.get(timeout=30) for _ in range(2 * rounds)]
    ok = sorted(f"w{w}-b{i}" for w, i, r in got if r == "ok")
    tags = xr.open_dataset(url, engine="zstrings", storage_options=so)["tag"].values.tolist()
    blocks = [tags[i : i + tc.BATCH] for i in range(0, len(tags), tc.BATCH)]
    torn = sum(len(set(b)) != 1 or len(b) != tc.BATCH for b in blocks)
    held = [b[0] for b in blocks][1:]
    lost = len(set(ok) - set(held))
    extra = len(set(held) - set(ok))
    refused = [r for r in got if r[2].startswith("ConcurrentWriteError")]
    other = [r for r in got if r[2] != "ok" and r not in refused]
    print("\n| rounds | appends returned OK | refused (ConcurrentWriteError) | other errors | in the store | "
          "lost | torn | not returned but stored |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {rounds} | {len(ok)} | {len(refused)} | {len(other)} | {len(held)} | "
          f"{lost} | {torn} | {extra} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", choices=("auto", "seaweedfs", "moto"), default="auto")
    ap.add_argument("--rows", type=int, default=50, help="rows of each dataset (chunks of 40)")
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="zs-kill-") as tmp:
        proc, endpoint, server = start_server(args.server, Path(tmp) / "s3", BUCKET)
        try:
            print(f"S3 server: {server} ({endpoint})\n")
            kill_every_put(endpoint, args.rows)
            two_writers(endpoint, args.rounds)
        finally:
            stop(proc)


if __name__ == "__main__":
    main()
