"""Repairing a store that a killed (or fenced-out) writer left mid-write: ``repair()`` and
``zstrings repair``; and the function that undoes an uncommitted write's chunks, which every writer
hands to its transaction (``io.commit``) for the recovery it runs before it starts.

What a write may have left is in its journal (``.zstrings-journal``): the writer's identity, the
ranges its appends write, the arrays it adds, and (once its metadata window opened) the old value of
every metadata object it changes. ``io.commit.recover`` decides between rolling forward (the write
reached its commit point) and back; rolling back, the chunks are undone here: an appended array
loses the chunks beyond its old length and gets its partial last chunk back with the fill value
after the old values (so a later append that only grows the array reads fill there, not the values
of the write that was undone); an added array loses every object below its folder.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ConcurrentWriteError, IncompleteStoreError
from ..io.commit import (
    JOURNAL,
    ZMETADATA,
    Journal,
    JournalError,
    StoreState,
    VersionRecord,
    foreign_appends,
    inspect_store,
    new_id,
    recover,
    refuse_foreign,
)
from ..io.drift import Drift, find_drift
from ..io.zstore import ZStore

__all__ = ["RepairReport", "repair", "undo", "undo_chunks"]


def undo_chunks(zstore: ZStore, journal: Journal, old_object: Callable[[str], Any]) -> None:
    """Remove what an uncommitted write of ``journal`` may have written to chunks (see the module
    docstring). ``old_object(key)`` gives a metadata object as it was before that write. An array
    another tool grew since (``io.commit.foreign_appends``) is left as it is."""
    from ..formats.nczarr import NC_DEFAULT_MAXSTRLEN, NodeObjects, parse_array
    from ..read.chunked import open_chunked

    theirs = foreign_appends(zstore, journal)  # grown by another tool since: not this write's to undo
    for path, rng in journal.appends.items():
        if path in theirs:
            continue
        key = path.strip("/")
        zarray = old_object(f"{key}/.zarray")
        if zarray is None:
            continue
        meta = parse_array(NodeObjects(path, {".zarray": zarray, ".zattrs": old_object(f"{key}/.zattrs") or {}}),
                           store=zstore.display, default_maxstrlen=NC_DEFAULT_MAXSTRLEN)
        axis, old, new = int(rng["axis"]), int(rng["old"]), int(rng["new"])
        arr = open_chunked(zstore, meta, meta.shape)
        c = meta.chunks[axis]
        grid = [range(math.ceil(n / k)) if i != axis else range(0) for i, (n, k) in
                enumerate(zip(meta.shape, meta.chunks, strict=True))]
        others = [r for i, r in enumerate(grid) if i != axis]
        beyond = range(math.ceil(old / c), math.ceil(new / c))
        drop = []
        for j in beyond:
            for rest in np.ndindex(*(len(r) for r in others)) if others else [()]:
                ix = list(rest)
                ix.insert(axis, j)
                drop.append(arr.chunk_key(tuple(ix)))
        zstore.delete_keys(drop)
        if old % c:
            _rewrite_tail(zstore, meta, axis, old)


def _rewrite_tail(zstore: ZStore, meta: Any, axis: int, n: int) -> None:
    """Rewrite the chunks holding elements ``[n - n % c, n)`` along ``axis`` with those values and
    the fill value after them (what an append that never happened leaves)."""
    from ..codecs.v2 import build_pipeline
    from ..read.chunked import open_chunked
    from .chunks import _write_numpy
    from .plan import _Array

    c = meta.chunks[axis]
    start = (n // c) * c
    logical = list(meta.shape)
    logical[axis] = n
    raw = open_chunked(zstore, meta, tuple(logical))
    region = tuple(slice(start, n) if i == axis else slice(0, s) for i, s in enumerate(meta.shape))
    storage = raw.read(region)
    where = zstore.where(meta.path)
    target = _Array(
        group=meta.path.rsplit("/", 1)[0] or "/", name=meta.path.rsplit("/", 1)[1], dims=(), ref_hints=(),
        unlimited=frozenset(), shape=tuple(storage.shape), chunks=meta.chunks, dtype=meta.dtype,
        dtype_str=meta.dtype_str, fill_json=None, fill_storage=raw.stored_fill(), compressor=None, filters=None,
        attrs={}, kind=None, data=storage,
        pipeline=build_pipeline(meta.compressor, meta.filters, dtype=meta.dtype, string_kind=meta.string_kind,
                                where=where),
        separator=meta.dimension_separator,  # (the chunk's own key: 1/0 where the array says "/")
    )
    _write_numpy(zstore, target, storage, tuple(start // c if i == axis else 0 for i in range(len(meta.shape))))


def undo_new_arrays(zstore: ZStore, journal: Journal) -> None:
    """Remove every object below the folders of the arrays ``journal``'s write added."""
    for path in journal.new_arrays:
        zstore.delete_keys(zstore.list_keys(path.strip("/")))


def undo(zstore: ZStore, journal: Journal, old_object: Callable[[str], Any]) -> None:
    """The ``io.commit.Undo`` of every NCZarr / Zarr v2 writer: appended ranges and added arrays; an
    in-place migration's v3 metadata (``remove_v3_metadata``)."""
    if journal.kind == "migrate":
        if journal.phase != "claimed":  # (claimed: it wrote nothing)
            remove_v3_metadata(zstore)
        return
    if journal.fmt == "v3":  # (to_zarr_v3(mode="a"))
        from .append_v3 import undo_appends

        undo_appends(zstore, journal, old_object)
    else:
        undo_chunks(zstore, journal, old_object)
    undo_new_arrays(zstore, journal)


def remove_v3_metadata(zstore: ZStore) -> None:
    """Remove the Zarr v3 metadata an in-place migration writes beside the v2 metadata (every
    ``zarr.json``, the root's first, so v3 readers fall back to the v2 metadata at once; a rewritten
    array's ``c/`` chunks; a root zarr.json's temporary file): what an interrupted one may have left.
    No v2 object nor v2 chunk is touched (a v2 chunk key never starts with ``c/``)."""
    keys = [k for k in zstore.list_keys("") if k != JOURNAL]
    arrays = {k.rsplit("/", 1)[0] if "/" in k else "" for k in keys if k.rsplit("/", 1)[-1] == ".zarray"}
    v3 = [k for k in keys if k.rsplit("/", 1)[-1] == "zarr.json" or k.startswith(".zarr.json.zstrings-tmp-")]
    chunks = [k for k in keys if any(k.startswith(f"{a}/c/" if a else "c/") for a in arrays)]
    zstore.delete_keys(sorted(v3, key=lambda k: (k.count("/"), k)))
    zstore.delete_keys(chunks)


@dataclass(frozen=True)
class RepairReport:
    """What ``repair`` found and did."""

    target: str
    state: str  # what the store was in, in words
    action: str  # what was done ("nothing to do", "rolled back ...", "rolled forward ...", ...)
    changed: bool

    def __str__(self) -> str:
        return f"{self.target}: {self.state}; {self.action}"


def repair(target: str | os.PathLike[str] | Any, *, storage_options: Mapping[str, Any] | None = None,
           force: bool = False) -> RepairReport:
    """Complete or undo a write that was killed part-way, so that every reader reads the store again.

    A write that reached its commit point is rolled forward (its metadata finished), any other is
    rolled back (its chunks and metadata changes undone: the version before it); a new store or a
    replacement (``mode="w"``) that was interrupted after it removed the old version leaves an empty
    target (write it again). A consolidated ``.zmetadata`` that another tool left stale (the objects
    changed since) is rewritten from the objects, with the NCZarr keys that tool's rewrite dropped
    put back and the arrays it added listed (``io.drift``). Nothing is done while the write may still be
    running (its writer is on another machine, or on this one and alive, and renewed its claim less
    than ``XR_ZSTRINGS_LOCK_TIMEOUT`` seconds ago) unless ``force=True``: then ``ConcurrentWriteError``
    says who holds the store. Local stores are repaired under their writer lock (a running writer is
    waited for). ``zstrings check`` tells what a store's state is and what ``repair`` would do.

    Nothing is changed, and an error says why, for a target that is not a store readers open (a
    folder of other files, an empty one, broken root metadata), for a journal that is not one or that
    another store's write left (``JournalError``), and for every zip file: a zip is only read (see
    ``_zip_state``). The target is opened by the write session (``write.session``, kind "repair"),
    which classifies it and removes what killed writers left beside and inside a local one.
    """
    from .session import write_session

    so = dict(storage_options) if storage_options else None
    with write_session(target, "a", kind="repair", writer="repair", storage_options=so) as s:
        display = s.target.display  # (no credentials of a URL in any message)
        if s.read_only:  # a zip
            report = _zip_state(s.zstore, display)
        else:  # (under the writer lock, no writer of ours runs: force)
            report = _v3_in_step(s.zstore, _repair(s.zstore, display, force=force or s.locked))
            s.remove_temporaries()
    return _removed(report, s.removed)


def _removed(report: RepairReport, gone: list[str]) -> RepairReport:
    """``report`` and the temporary files a killed writer or repair left (``gone``: beside a local
    target and inside a local store, as its session removed them)."""
    if not gone:
        return report
    names = ", ".join(gone[:5]) + (f", ... ({len(gone)} in all)" if len(gone) > 5 else "")
    removed = f"removed {len(gone)} temporary file(s) an interrupted write or repair left ({names})"
    if not report.changed:
        return RepairReport(report.target, report.state, removed, True)
    return RepairReport(report.target, report.state, f"{report.action}; {removed}", True)


def _inspect(zstore: ZStore, display: str) -> StoreState:
    """``inspect_store``, refusing (``JournalError``, nothing changed) a journal that is not one or
    that does not belong to the store."""
    doing = f"Cannot repair {display}: "
    try:
        state = inspect_store(zstore)
    except JournalError as e:
        raise JournalError.of(e.found, doing) from None
    refuse_foreign(state, zstore, doing)
    return state


def _zip_state(zstore: ZStore, display: str) -> RepairReport:
    """A zip file, only read (its session opened it read-only): no write is ever left inside one
    (every writer writes a new zip beside it and swaps it in whole: ``io.atomic.local_commit``), so
    there is nothing to complete or undo in it; a zip that is not a store readers open is an error."""
    from ..read.tree import open_tree

    state = _inspect(zstore, display)
    what, action = state.describe()
    if state.journal is not None or action != "nothing to do":
        raise IncompleteStoreError(
            f"Cannot repair {display}: {what}. Nothing was changed: a zip file is never changed in place (every "
            "writer writes a new zip beside it and swaps it in whole), so this one holds a copy of a store "
            f"another tool zipped in that state. Unzip it, run `zstrings repair` on the folder, and zip the "
            "folder again (or write the zip again from its source).")
    open_tree(zstore)  # what a reader raises (as `zstrings check`)
    what = f"{what}; a zip is written whole beside it and swapped in, so no write is ever left inside it"
    return RepairReport(display, what, "nothing to do", False)


def _repair(zstore: ZStore, display: str, *, force: bool) -> RepairReport:
    state = _inspect(zstore, display)
    what, action = state.describe()
    if state.journal is not None:
        if not (force or state.writer_gone or state.lease_expired):
            raise ConcurrentWriteError(
                f"Cannot repair {display}: {what}. Wait for it, or (only when you are sure that writer is not "
                f"running) repair with force=True / `zstrings repair {display} --force`.")
        taken, claim = _take(zstore, state)
        done = recover(zstore, taken, undo, claim=claim)
        return RepairReport(display, what, done, True)
    if "roll forward" in action:
        return RepairReport(display, what, recover(zstore, state, undo), True)
    drift = find_drift(zstore, state.consolidated, state.root_obj) if state.fmt == "v2" and (
        action == "nothing to do" or "re-consolidate" in action) else None
    if drift:
        what, _ = drift.describe()
        return RepairReport(display, what, _reconsolidate(zstore, drift, state), True)
    if "re-consolidate" in action:
        return RepairReport(display, what, _reconsolidate(zstore), True)
    if action == "nothing to do":
        from ..read.tree import open_tree

        open_tree(zstore)  # not a store readers open (no store here, broken metadata): that error, as check's
    return RepairReport(display, what, action, False)


def _v3_in_step(zstore: ZStore, report: RepairReport) -> RepairReport:
    """After the repair: a store migrated in place whose Zarr v3 metadata disagree with its v2
    metadata (a v2 write they missed: another tool's, or one whose writer was killed before it wrote
    them) gets them written again from the v2 metadata (``migrate.keep_v3_in_step``). The tree is
    read again only where a root ``zarr.json`` says the store has v3 metadata at all (one request)."""
    from ..errors import ZStringsError
    from ..read.tree import open_tree
    from .migrate import keep_v3_in_step, v3_out_of_step

    fresh = ZStore(zstore.store, prefix=zstore.prefix, display=zstore.display, modes=zstore.modes,
                   remote=zstore.remote)
    try:
        if fresh.get_bytes("zarr.json") is None:  # never migrated (nor Zarr v3)
            return report
        stale = v3_out_of_step(open_tree(fresh))
    except ZStringsError:
        return report
    if not stale or not keep_v3_in_step(fresh):
        return report
    state = (f"{report.state}; the Zarr v3 metadata (zarr.json) of {len(stale)} array(s) disagree with the v2 "
             f"metadata ({', '.join(sorted(stale))})")
    wrote = "wrote the Zarr v3 metadata again from the v2 metadata"
    return RepairReport(report.target, state, f"{report.action}; {wrote}" if report.changed else wrote, True)


def _take(zstore: ZStore, state: StoreState) -> tuple[StoreState, str | None]:
    """Take a dead writer's journal over (one taker wins: a compare-and-swap on its ETag), so that
    no second repair or writer acts on it at the same time; returns the state to recover and the
    ETag of the claim (released when the recovery is done)."""
    from ..io.conditional import CommitConflict

    assert state.journal is not None
    mine = Journal(**{**state.journal.__dict__, "writer": {**state.journal.writer, "repair": new_id()}})
    try:
        claim = zstore.put_if(JOURNAL, mine.to_bytes(), match=state.journal_etag)
    except CommitConflict:
        raise ConcurrentWriteError(f"Cannot repair {zstore.display}: another writer or repair took the store "
                                   "over at the same moment; look again with `zstrings check`.") from None
    state.journal = mine
    return state, claim


def _reconsolidate(zstore: ZStore, drift: Drift | None = None, state: StoreState | None = None) -> str:
    """Rewrite ``.zmetadata`` from the store's objects (another tool changed them): a write that
    changes nothing (but for the keys ``drift`` says objects lost, put back), committed as a new
    version (its root ``.zgroup`` names it, of the committed lineage), under a claim."""
    from .append import _base_tree
    from .session import claimed

    mended = dict(drift.mended) if drift else {}
    with claimed(zstore, "add") as txn:
        _, base = _base_tree(zstore, consolidated=False)
        c = state.committed if state is not None else None
        if c is not None and ".zgroup" in mended and txn.record.lineage != c.lineage:
            # the root lost our version record: the version made continues the committed lineage
            txn.record = VersionRecord(c.lineage, txn.record.commit, c.version + 1)
            if txn.journal is not None:
                txn.journal.lineage, txn.journal.version = c.lineage, c.version + 1
        txn.set_base(base, consolidated_in_step=True)  # (the stale one is replaced at the commit point)
        txn.commit(mended)
    done = f"rewrote {ZMETADATA} from the store's {len(base)} metadata objects (version {txn.record.version})"
    if drift is not None and drift.grown:
        done = f"grew {', '.join(f'{d} to {n}' for d, n in sorted(drift.grown.items()))}; {done}"
    if drift is not None and drift.adopted:
        done = f"listed {', '.join(drift.adopted)} in its group's NCZarr listing; {done}"
    if drift is not None and drift.lost:
        done = f"put back what {drift.lost_text()} (from {drift.source}); {done}"
    return done

