"""The commit protocol of writes that change a store in place: object storage, zarr-python
``Store`` objects, and appends or added variables on local directories.

A write there cannot swap a whole new version in (no rename of a tree), so it is made of steps
that readers must never see half done, and that a killed writer must never leave stranded:

1. **Claim.** The writer creates the store's *journal* (``.zstrings-journal``) with a create-only
   write (S3 ``If-None-Match: *``): of two writers exactly one gets it, the other raises
   ``ConcurrentWriteError`` before it writes anything. A journal left by a writer that is gone (the
   same machine and its process has ended, or its claim was not renewed for
   ``XR_ZSTRINGS_LOCK_TIMEOUT`` seconds) is taken over: the taker recovers the store first (below).
   A thread renews the claim every quarter lease, and every batch of writes through the store
   checks it first (``Transaction._fence``): a writer stalled past its lease and taken over stops
   before its next batch, so of its writes only the batch in flight when it stalled can land after
   the taker's. On a local folder a conditional write checks and replaces under an ``flock`` of the
   folder (``conditional._LocalConditional._exclusive``). Local directory paths are also serialised by the writer lock
   (``atomic.target_lock``), so there a journal always belongs to a writer that is gone; a
   zarr-python ``LocalStore`` object has no such lock and relies on the claim.
2. **Chunks.** Before writing any chunk the journal records what the write may leave (the ranges
   an append writes, the arrays a write adds). An append's new chunks lie outside the old shape,
   and its rewritten partial last chunk keeps the old values, so readers of the old metadata never
   see them. Other tools take no claim (xarray's ``to_zarr(mode="a")``): after recording, before
   the metadata window and once it opened, the write re-reads the objects it changes and
   ``.zmetadata``'s ETag, and fails on a change since it began (``Transaction._check_unchanged``),
   keeping that change.
3. **Metadata window.** The journal records the old value of every metadata object the write
   changes; the root ``.zgroup`` becomes a *placeholder* (refused by every per-object reader:
   netcdf-c says "NCZarr error", zarr-python and xarray refuse it); the metadata objects change.
4. **Commit point.** The consolidated ``.zmetadata`` (the Zarr v2 form netcdf-c 4.10 reads in its
   ``consolidated`` mode) is replaced with a conditional write (``If-Match`` the version the write
   started from): this single object switches every consolidated reader from the old version to the
   new one. Then the real root ``.zgroup`` (which names the new version), and the journal removed:
   each only while it is the writer's (``_put_root``: over its own placeholder; ``release``: after
   proving the claim). Before the window, its objects and the commit point the writer proves its
   claim again (``_fence``), so a writer resumed after a takeover changes nothing of the taker's.

Readers (``consolidated_view``) are served whole versions: ``engine="zstrings"`` and netcdf-c 4.10
with ``#mode=...,consolidated`` read ``.zmetadata``, which is the old version until the commit point
and the new one after it, also while the per-object metadata are in the window or were left there
by a killed writer. Per-object readers see the old version, then a refusal during the metadata
window, then the new version.

**Recovery** (the next writer, ``repair``): a journal whose commit id is the one in ``.zmetadata`` is
*rolled forward* (the per-object metadata are written from ``.zmetadata``); any other is *rolled
back* (the chunks it may have written are undone by the caller's ``undo`` function, the metadata
objects get their recorded old values back), but for an appended array another tool grew since
(``foreign_appends``): its chunks and metadata are left as they are. A whole-store write (new store, ``mode="w"``) that
had not committed cannot be completed without its writer: it is rolled back to an empty target
once the old version was removed, else to the old version.

The root ``.zgroup`` carries the store's version record (``"xr_zstrings": {"lineage", "commit",
"version"}``): the lineage changes only when a store is replaced, so a lazy reader can tell an
append (its version's chunks unchanged: keep reading) from a replacement (``StoreReplacedError``).

Kept free of the read and write layers: the caller hands in metadata objects and, for recovery,
the function that undoes chunk writes (``write.repair.undo``). The journal and what a store holds
(``inspect_store``) are ``journal``'s; the conditional writes are ``ZStore``'s (``conditional``).
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from types import TracebackType
from typing import Any, NoReturn, Self, cast

from ..errors import (
    ConcurrentWriteError,
    JournalError,
    MetadataError,
    TargetExistsError,
)
from ..formats.nczarr import parse_json
from ..formats.nczarr_json import dumps
from .atomic import incomplete_v2_group, incomplete_v3_root, refused, store_root
from .conditional import CommitConflict, at_once, lock_timeout
from .consolidated import (
    METADATA_NAMES,
    VERSION_KEY,
    ZMETADATA,
    VersionRecord,
    canonical,
    consolidated_bytes,
    consolidated_view,
    version_of,
    with_version,
)
from .journal import (
    JOURNAL,
    JOURNAL_REFUSED,
    Journal,
    StoreState,
    describe_writer,
    inspect_store,
    journal_foreign,
    lagging,
    new_id,
    refuse_foreign,
    this_writer,
)
from .zstore import ZStore

# (the journal's and the read half's names too: their importers know them from here)
__all__ = [
    "JOURNAL",
    "JOURNAL_REFUSED",
    "VERSION_KEY",
    "ZMETADATA",
    "CommitConflict",
    "Journal",
    "JournalError",
    "StoreState",
    "Transaction",
    "Undo",
    "VersionRecord",
    "begun",
    "consolidated_view",
    "describe_writer",
    "foreign_appends",
    "inspect_store",
    "journal_foreign",
    "new_id",
    "recover",
    "refuse_foreign",
    "release",
    "this_writer",
    "version_of",
]

# ---------------------------------------------------------------------------------------------
# Ending a claim
# ---------------------------------------------------------------------------------------------


def release(zstore: ZStore, journal: Journal, etag: str | None, *, proven: bool = False) -> bool:
    """End the claim ``journal`` whose object has ETag ``etag``, only while it is ours: a conditional
    write renews it (proving it is ours and restarting its lease; ``proven``: the caller renewed it
    less than half a lease ago), then it is deleted at once.
    Neither S3 nor a file system deletes conditionally on a version, so the delete leans on the
    lease as every fenced batch of writes does (``Transaction._fence``): nobody may take a claim over
    until it has gone unrenewed for a whole lease. False (nothing changed) when another writer or
    repair took it over since: it is theirs."""
    if etag is None:
        return False
    if not proven:
        journal.writer["renewed"] = time.time()
        try:
            zstore.put_if(JOURNAL, journal.to_bytes(), match=etag)
        except CommitConflict:
            return False
    zstore.delete_keys([JOURNAL])
    return True



# ---------------------------------------------------------------------------------------------
# Recovery
# ---------------------------------------------------------------------------------------------

#: undo(zstore, journal, old_object) removes the chunks an uncommitted write may have written:
#: ``old_object(key)`` gives a metadata object as it was before the write
Undo = Callable[[ZStore, Journal, Callable[[str], Any]], None]


def _old_object(zstore: ZStore, journal: Journal) -> Callable[[str], Any]:
    def get(key: str) -> Any:
        if journal.old_meta is not None and key in journal.old_meta:
            return journal.old_meta[key]
        raw, _ = zstore.get_tagged(key)
        return None if raw is None else parse_json(raw, where=zstore.where(key))
    return get


def foreign_appends(zstore: ZStore, journal: Journal) -> dict[str, int | None]:
    """The arrays ``journal``'s append records that another writer or tool grew or changed since:
    path -> their length along the appended axis now (None: no readable ``.zarray``), one batch of
    reads. An array's per-object ``.zarray`` shows the journal's ``old`` length until the write's
    metadata window, and its ``new`` one after (phase "committing": then only with the content the
    journal recorded the write puts, ``new_meta``); any other length or content is a change this
    write cannot prove its own (xarray's ``to_zarr(mode="a")`` takes no claim), so a rollback
    neither removes nor rewrites that array's chunks or metadata."""
    if journal.fmt != "v2" or not journal.appends:
        return {}
    paths = list(journal.appends)
    found: dict[str, int | None] = {}
    for path, (raw, _) in zip(paths, zstore.get_tagged_many([f"{p.strip('/')}/.zarray" for p in paths]), strict=True):
        r = journal.appends[path]
        try:
            now = json.loads(raw) if raw is not None else None
            n: int | None = int(now["shape"][int(r["axis"])]) if now is not None else None
        except (ValueError, TypeError, KeyError, IndexError):
            now, n = None, None
        written = (journal.new_meta or {}).get(f"{path.strip('/')}/.zarray")
        ours = journal.phase == "committing" and n == r["new"] and \
            (journal.new_meta is None or canonical(now) == canonical(written))
        if n != r["old"] and not ours:
            found[path] = n
    return found


def _kept_words(journal: Journal, foreign: Mapping[str, int | None]) -> str:
    """What a recovery left alone (``foreign_appends``), in words for its report."""
    if not foreign:
        return ""
    each = ", ".join(f"{p.strip('/')} ({'no readable .zarray' if n is None else f'length {n}'}; this write "
                     f"recorded {journal.appends[p]['old']} -> {journal.appends[p]['new']})" for p, n in foreign.items())
    return (f"; kept as another writer or tool left them, untouched (not this write's to undo): {each}")


def _write_objects(zs: ZStore, objects: Mapping[str, Any], root: str) -> None:
    """Write metadata objects (None: delete), the root one last, after the store's fence check (a
    write's claim; as every batch of chunk writes): on every kind of store, a writer taken over
    while stalled changes no metadata."""
    zs.check_fence()
    rest = [(k, v) for k, v in objects.items() if k != root]
    puts = [(k, bytes(v) if isinstance(v, bytes | bytearray) else dumps(v)) for k, v in rest if v is not None]
    if puts:
        zs.put_whole(puts)
    zs.delete_keys([k for k, v in rest if v is None])
    if root in objects:
        v = objects[root]
        if v is None:
            zs.delete_keys([root])
        else:
            zs.put_if(root, bytes(v) if isinstance(v, bytes | bytearray) else dumps(v))


def recover(zstore: ZStore, state: StoreState, undo: Undo | None, *, claim: str | None = None) -> str:
    """Complete or undo the write ``state.journal`` records; returns what was done, in words. The
    caller holds the claim (its journal object has ETag ``claim``, released here when given; a
    taker that goes on writing passes None) and knows that write's writer is gone (or was told to
    go ahead)."""
    j = state.journal
    if j is None:
        return _finish_lagging(zstore, state) if lagging(state) else "nothing to do"
    root = "zarr.json" if j.fmt == "v3" else ".zgroup"
    if j.whole_store and not state.in_journal_commit:
        done = _roll_back_whole(zstore, state, j, root)
    else:
        foreign = {} if j.whole_store else foreign_appends(zstore, j)  # (never undone nor overwritten)
        theirs = {f"{p.strip('/')}/{n}" for p in foreign for n in METADATA_NAMES}
        if state.in_journal_commit:
            done = _roll_forward(zstore, state, j, root, theirs) + _kept_words(j, foreign)
        else:
            done = _roll_back_in_place(zstore, state, j, root, undo, foreign, theirs)
    if claim is not None and not release(zstore, j, claim):
        raise ConcurrentWriteError(f"{zstore.display}: another writer or repair took the store over while this "
                                   f"one {done}; look again with `zstrings check`.")
    return done


def _roll_forward(zstore: ZStore, state: StoreState, j: Journal, root: str, theirs: set[str]) -> str:
    """A write past its commit point: its per-object metadata written from ``.zmetadata`` (Zarr v2;
    a Zarr v3 write's root is its commit point: nothing left to write), ``theirs`` left alone."""
    if j.fmt == "v2" and state.consolidated is not None:
        keys = [root] if j.whole_store else list(j.old_meta or state.consolidated)
        _write_objects(zstore, {k: state.consolidated.get(k) for k in {*keys, root} if k not in theirs}, root)
    return f"rolled forward to version {j.version}"


def _roll_back_whole(zstore: ZStore, state: StoreState, j: Journal, root: str) -> str:
    """A new store's or a replacement's write that had not committed, by how far it got."""
    if j.phase == "clearing":  # nothing of the old version removed but its root
        if j.old_meta and j.old_meta.get(root) is not None and state.root_placeholder:
            zstore.put_if(root, dumps(j.old_meta[root]))
        return "dropped the claim of a replacement that had not removed the old version (it is intact)"
    if j.phase == "cleared":  # (one that only claimed the target wrote nothing yet)
        keys = [k for k in zstore.list_keys("") if k != JOURNAL]
        _remove_metadata_first(zstore, keys, (*METADATA_NAMES, ZMETADATA, "zarr.json"))
        return ("removed the interrupted replacement (the old version had already been removed): the target "
                "is empty; write it again" if j.kind == "replace" else
                "removed the interrupted new store's objects: the target is empty; write it again")
    return "dropped the claim of a write that had not changed anything"  # (a replacement, "claimed")


def _remove_metadata_first(zstore: ZStore, keys: Sequence[str], names: Sequence[str]) -> None:
    """Delete ``keys``: the metadata objects (last path part in ``names``) first, the root's first of
    them (refused by readers from there on), then the rest."""
    metadata = [k for k in keys if k.rsplit("/", 1)[-1] in names]
    zstore.delete_keys(sorted(metadata, key=lambda k: (k.count("/"), k)))
    zstore.delete_keys([k for k in keys if k not in set(metadata)])


def _roll_back_in_place(zstore: ZStore, state: StoreState, j: Journal, root: str, undo: Undo | None,
                        foreign: Mapping[str, int | None], theirs: set[str]) -> str:
    """An append's or added variables' write that had not committed: its chunks undone (``undo``),
    its metadata changes reverted, the arrays another tool changed since (``foreign``) left alone."""
    if undo is not None:
        mine = replace(j, appends={p: r for p, r in j.appends.items() if p not in foreign})
        undo(zstore, mine, _old_object(zstore, j))
    if j.old_meta:
        # a root another tool wrote over this write's placeholder is theirs too
        if foreign and not state.root_placeholder and canonical(state.root_obj) != canonical(j.old_meta.get(root)):
            theirs = {*theirs, root}
        _write_objects(zstore, {k: v for k, v in j.old_meta.items() if k not in theirs}, root)
    elif state.root_placeholder and state.consolidated is not None and root in state.consolidated:
        zstore.put_if(root, dumps(state.consolidated[root]))  # the placeholder landed, the old values not
    return "rolled back the interrupted write (its chunks removed, its metadata changes undone)" + \
        _kept_words(j, foreign)


def _finish_lagging(zstore: ZStore, state: StoreState) -> str:
    """Write every metadata object from ``.zmetadata`` (which lag is not recorded), the root last."""
    assert state.consolidated is not None and state.committed is not None
    _write_objects(zstore, dict(state.consolidated), ".zgroup")
    return f"rolled forward to version {state.committed.version}"


# ---------------------------------------------------------------------------------------------
# A write
# ---------------------------------------------------------------------------------------------


def _v3_root_in_step(objects: Mapping[str, Any], root: str) -> bool:
    """A Zarr v3 append's root holding the consolidated metadata: written without a placeholder
    (readers are served the old version from it until it is replaced)."""
    new = objects.get(root)
    return root == "zarr.json" and isinstance(new, Mapping) and bool(new.get("consolidated_metadata"))


class Transaction:
    """One write of a store, committed by the protocol in this module's docstring.

    The API every writer uses (``to_nczarr``, appends, ``to_zarr_v3``; ``migrate`` the same way)::

        with Transaction.begin(zstore, kind, fmt="v2", undo=write.repair.undo, mode="w") as txn:
            # kind: "new" (mode="w-"), "replace" (mode="w"), "append", "add"
            txn.set_base(objects, consolidated_in_step=tree.consolidated)  # append/add: what it read
            txn.record_writes(appends={path: {"axis", "old", "new"}}, new_arrays=[...])  # append/add
            ... write the chunks through zstore ...
            txn.commit(changed_objects)          # append/add; a whole store: commit(all, full=True)

    ``begin`` claims the store (its journal), recovers what a dead writer left, and for the
    whole-store kinds prepares the target (a placeholder root first; replacing, the old objects
    removed). ``inplace=False`` is a target written beside the store and swapped in (local
    directories, zip files): no claim, ``commit`` just writes the objects and ``.zmetadata``.
    ``commit`` takes metadata objects (key -> JSON object, bytes, or None to delete) and writes
    them with the version record, ``.zmetadata`` (Zarr v2) and the root last. A Zarr v3 writer,
    whose root ``zarr.json`` is its own commit point, writes everything itself and calls
    ``finish()``. On an exception (``with``) ``abort()`` undoes the write. While the write lasts a
    thread renews the claim, and the store's every batch of writes checks it (``ZStore.fence``);
    ``txn.record`` is the version the write makes.
    """

    def __init__(self, zstore: ZStore, kind: str, fmt: str, *, inplace: bool, undo: Undo | None) -> None:
        self.zstore = zstore
        self.kind = kind
        self.fmt = fmt
        self.inplace = inplace
        self.undo = undo
        self.journal: Journal | None = None
        self.etag: str | None = None
        self.base_meta: dict[str, Any] | None = None
        self.base_etag: str | None = None
        self.record = VersionRecord(new_id(), new_id(), 1)
        self.state: StoreState | None = None  # what the store held when the write began (after its claim)
        self._lost = threading.Event()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._lock = threading.Lock()
        self._done = False
        #: when (time.monotonic, before the request) the claim was last written: claimed or renewed
        self._renewed_at = -float("inf")
        self._fence_after = lock_timeout() / 2
        self._confirm_lock = threading.Lock()
        #: the ETag of the placeholder root this write put: the root it may replace at its end
        self._root_etag: str | None = None

    # --- claim -------------------------------------------------------------------------------
    @classmethod
    def begin(cls, zstore: ZStore, kind: str, *, fmt: str = "v2", inplace: bool = True, undo: Undo | None = None,
              mode: str = "w") -> Transaction:
        """Claim ``zstore`` for a write of ``kind`` (see the class docstring). ``mode`` ("w-" or "w")
        for the whole-store kinds: "w-" refuses a target that is not empty."""
        txn = cls(zstore, kind, fmt, inplace=inplace, undo=undo)
        if not inplace:
            return txn
        txn._claim(mode)
        try:
            if kind in ("new", "replace"):
                txn._prepare_whole(mode)
        except BaseException:
            txn._release()
            raise
        txn._start_renewal()
        zstore.fence = txn._fence  # every later batch of writes through zstore checks the claim first
        return txn

    def _claim(self, mode: str) -> None:
        """Create our journal (create-only), then look at the store (nobody else changes it while we
        hold it). A journal already there: a dead writer's is taken over and its write completed
        or undone first; a live writer's makes this write refuse."""
        zs = self.zstore
        journal = Journal(new_id(), self.kind, self.fmt, this_writer(), "", "", 0)
        state: StoreState | None = None
        for _ in range(5):
            sent = time.monotonic()
            try:
                self.etag = zs.put_if(JOURNAL, journal.to_bytes(), create=True)
            except CommitConflict:
                try:
                    other = inspect_store(zs)
                except JournalError as e:  # nothing was written: our create-only write lost to it
                    raise JournalError.of(e.found, f"Cannot write to {zs.display}: ") from None
                if other.journal is None:
                    continue  # it ended between our write and our look: try again
                self._refuse_unless_gone(other, mode)  # (a live writer's: wait, whatever it records)
                refuse_foreign(other, zs, f"Cannot write to {zs.display}: ")
                sent = time.monotonic()
                try:
                    self.etag = zs.put_if(JOURNAL, journal.to_bytes(), match=other.journal_etag)  # one taker wins
                except CommitConflict:
                    continue
                self.journal = journal
                recover(zs, other, self.undo)  # (keeps the journal: now ours, no claim to release)
            self.journal = journal
            self._renewed_at = sent
            sys.audit("xr_zstrings.commit", "claimed")  # (tests stop a writer at each step)
            state = inspect_store(zs)
            if state.journal_etag != self.etag:  # taken over while it stalled right after its claim
                self._lose("its claim was taken over while it was stalled")
            break
        if state is None:
            raise ConcurrentWriteError(f"Cannot write to {zs.display}: other writers keep claiming it; try again.")
        if lagging(state):
            _finish_lagging(zs, state)
            state = inspect_store(zs)
        self.state = state
        self._set_record(state)
        journal.lineage, journal.commit, journal.version = self.record.lineage, self.record.commit, self.record.version
        journal.base = state.committed.commit if state.committed else None

    def _set_record(self, state: StoreState) -> None:
        """The version this write makes: the next of the committed lineage (append, add), else a new
        lineage (a new store, a replacement, or the first change of a store without our version)."""
        c = state.committed
        if self.kind in ("append", "add") and c is not None and state.root is not None \
                and state.root.lineage == c.lineage:
            self.record = VersionRecord(c.lineage, new_id(), c.version + 1)
        else:
            self.record = VersionRecord(new_id(), new_id(), 1)

    def _refuse_unless_gone(self, state: StoreState, mode: str) -> None:
        """Another write's journal is there: refuse unless its writer is gone (ended, or its claim
        not renewed for the lease)."""
        other = state.journal
        assert other is not None
        if state.writer_gone or state.lease_expired:
            return
        zs = self.zstore
        age = f"{state.journal_age:.0f} s" if state.journal_age is not None else "some time"
        left = max(0.0, lock_timeout() - (state.journal_age or 0.0))
        cls = TargetExistsError if mode == "w-" and self.kind == "new" else ConcurrentWriteError
        extra = " and mode='w-' never overwrites" if cls is TargetExistsError else ""
        raise cls(
            f"Cannot write to {zs.display}: another writer ({describe_writer(other.writer)}, last seen {age} ago) "
            f"is writing it (its claim {JOURNAL!r}){extra}. Nothing was written. Wait for that write to end and "
            f"write again. If that writer was killed, the next write after {left:.0f} s recovers the store by "
            f"itself; `zstrings repair {zs.display} --force` recovers it now (only when you are sure that writer "
            "is not running).")

    def _prepare_whole(self, mode: str) -> None:
        """A new store or a replacement: refuse a non-empty target for "w-"; then (journal phase
        "cleared" first: from here on nothing of an older version is kept) the placeholder root,
        which every reader refuses, and the old objects removed, metadata first."""
        zs = self.zstore
        assert self.journal is not None
        root = "zarr.json" if self.fmt == "v3" else ".zgroup"
        existing = zs.some_objects()
        if existing and mode == "w-":
            raise TargetExistsError(
                f"Cannot write to {zs.display}: it is not empty (found {sorted(existing)[:5]}) and mode='w-' never "
                "overwrites. Pass mode='w' to replace it, or mode='a' with append_dim to append.")
        found = store_root(zs).refusal if existing else None
        if found is not None:  # a prefix of other objects: replacing is for a store's older version
            raise refused(zs.display, found, mode)
        rec = VersionRecord(self.record.lineage, self.record.commit, self.record.version, self.kind)
        placeholder = incomplete_v3_root(rec.as_json()) if self.fmt == "v3" else incomplete_v2_group(rec.as_json())
        if existing:  # the old root recorded: until the old objects go, a rollback puts it back
            raw, _ = zs.get_tagged(root)
            self.journal.old_meta = {root: None if raw is None else parse_json(raw, where=zs.where(root))}
            self.journal.phase = "clearing"
            self._put_journal()
            zs.delete_keys([ZMETADATA])  # consolidated readers: no old version to serve any more
        else:  # an empty target: whatever is there later is this write's
            self.journal.phase = "cleared"
            self._put_journal()
        self._root_etag = zs.put_if(root, placeholder)
        if existing:
            self.journal.phase = "cleared"
            self._put_journal()
            keys = [k for k in zs.list_keys("") if k not in (JOURNAL, root)]
            _remove_metadata_first(zs, keys, (*METADATA_NAMES, "zarr.json"))

    # --- the write ---------------------------------------------------------------------------
    def set_base(self, objects: Mapping[str, Any], *, consolidated_in_step: bool) -> None:
        """The metadata objects (key -> JSON) the write starts from (append, add), as read after the
        claim. When they did not come from our own in-step ``.zmetadata``, that is written first
        (this version, consolidated: the *base*), so that consolidated readers are served the old
        version through the write's metadata window and a rollback restores what readers saw."""
        names = METADATA_NAMES if self.fmt == "v2" else ("zarr.json",)
        self.base_meta = {k: v for k, v in objects.items() if k.rsplit("/", 1)[-1] in names}
        if not self.inplace or self.fmt != "v2":
            return
        assert self.journal is not None and self.state is not None
        exists, etag = self.state.consolidated is not None or self.state.zmetadata_etag is not None, \
            self.state.zmetadata_etag
        self.base_etag = etag
        if consolidated_in_step and exists:
            return
        base = VersionRecord(self.record.lineage, new_id(), self.record.version)
        self.record = VersionRecord(base.lineage, self.record.commit, base.version + 1)
        meta = dict(self.base_meta)
        if ".zgroup" in meta:
            meta[".zgroup"] = with_version(meta[".zgroup"], base)
        try:
            self.base_etag = self.zstore.put_if(ZMETADATA, consolidated_bytes(meta), create=not exists, match=etag)
        except CommitConflict:
            self._lose(f"{ZMETADATA!r} changed under it")
        j = self.journal
        j.base, j.lineage, j.commit, j.version = base.commit, self.record.lineage, self.record.commit, \
            self.record.version
        self._put_journal()

    def record_writes(self, *, appends: Mapping[str, Mapping[str, int]] | None = None,
                      new_arrays: Sequence[str] = ()) -> None:
        """Before the first chunk write: what an uncommitted write may have left (for a rollback):
        ``appends`` maps an array's path to ``{"axis", "old", "new"}``, ``new_arrays`` lists the
        arrays the write adds."""
        if self.journal is None:
            return
        self.journal.appends.update({k: {n: int(x) for n, x in v.items()} for k, v in (appends or {}).items()})
        self.journal.new_arrays.extend(new_arrays)
        self.journal.phase = "writing"
        self._put_journal()
        sys.audit("xr_zstrings.commit", "writing")
        self._check_unchanged("writing")

    def _check_unchanged(self, step: str, objects: Mapping[str, Any] | None = None) -> None:
        """Refuse to go on (``ConcurrentWriteError``) when another tool (xarray's or zarr-python's
        writer, which take no claim) changed a metadata object this append or add changes (an
        appended array's ``.zarray``, an added one's, every ``.zarray`` in ``objects``: an array
        grown alongside; the root ``.zgroup``/``.zattrs``) or
        ``.zmetadata`` since ``set_base``: one batch of reads. At ``step`` "writing" no chunk of this
        write is written yet, so its journal is emptied first and the rollback deletes nothing; at
        "commit" (before the window) and "window" (once the placeholder root, whose conditional write
        checked the root, is ours: a change during the window) the arrays the other tool changed
        leave the journal, so the rollback never touches them."""
        j = self.journal
        if j is None or not self.inplace or self.fmt != "v2" or self.base_meta is None or \
                self.kind not in ("append", "add"):
            return
        paths = {f"{p.strip('/')}/.zarray": p for p in [*j.appends, *j.new_arrays]}
        paths.update({k: k.rsplit("/", 1)[0] for k in objects or {} if k.endswith("/.zarray") and k not in paths})
        changed = self._changed_since_base(step, paths)
        if not changed:
            return
        self._leave_theirs(j, step, {paths[k] for k in changed if k in paths})
        self._put_journal()
        kept = "" if step == "writing" else (
            "; this write's chunks are removed from the arrays only it changed, and the arrays the other tool "
            "changed are left as that tool wrote them (some of their chunks may hold this write's values)")
        self._stop.set()
        raise ConcurrentWriteError(
            f"Cannot write to {self.zstore.display}: another writer or tool (one that takes no claim, such as "
            f"xarray's to_zarr or zarr-python) changed {', '.join(changed.values())} while this write was under way. "
            f"Nothing of this write was committed and the other tool's change was kept{kept}. Write again: the store "
            "is no longer the version this write started from.")

    def _changed_since_base(self, step: str, paths: Mapping[str, str]) -> dict[str, str]:
        """The metadata objects (``paths``: ``.zarray`` key -> array path; the root's) and
        ``.zmetadata`` changed since ``set_base``, each key -> how, in words: one batch of reads."""
        base = self.base_meta or {}
        keys = [*paths, ".zattrs", *([".zgroup"] if step != "window" else [])]
        *got, (_, zm_etag) = self.zstore.get_tagged_many([*keys, ZMETADATA])
        changed: dict[str, str] = {}
        for key, (raw, _) in zip(keys, got, strict=True):
            try:
                now = None if raw is None else parse_json(raw, where=self.zstore.where(key))
            except MetadataError:
                now = "unreadable"
            was = base.get(key)
            if canonical(now) == canonical(was):
                continue
            if key in paths and isinstance(now, Mapping) and isinstance(was, Mapping):
                changed[key] = f"{key} (shape {now.get('shape')}; this write started from {was.get('shape')})"
            else:
                changed[key] = f"{key} ({'removed' if now is None else 'written' if was is None else 'rewritten'})"
        if zm_etag != self.base_etag:
            changed[ZMETADATA] = f"{ZMETADATA} ({'removed' if zm_etag is None else 'rewritten'})"
        return changed

    @staticmethod
    def _leave_theirs(j: Journal, step: str, theirs: set[str]) -> None:
        """Take the arrays another tool changed (``theirs``) out of journal ``j``, so a rollback never
        touches them; at "writing" nothing of this write is written yet: the journal records nothing."""
        if step == "writing":  # nothing of this write's chunks is written yet: nothing to undo
            j.appends, j.new_arrays, j.phase = {}, [], "claimed"
            return
        j.appends = {p: r for p, r in j.appends.items() if p not in theirs}
        j.new_arrays = [p for p in j.new_arrays if p not in theirs]
        gone = {p.strip("/") for p in theirs}
        j.old_meta = {k: v for k, v in (j.old_meta or {}).items() if k.rsplit("/", 1)[0] not in gone}
        if step == "window":  # only the placeholder root is written: a rollback restores only it
            j.old_meta = {k: v for k, v in j.old_meta.items() if k == ".zgroup"}
            j.new_meta, j.phase = None, "writing"

    def commit(self, objects: Mapping[str, Any], *, root: str = ".zgroup", consolidated: bool = True,
               full: bool = False) -> None:
        """Make ``objects`` (metadata key -> JSON object, bytes, or None to delete) the store's new
        version, in the order of the module docstring. ``full``: ``objects`` are every metadata
        object of the store (a new store, a replacement), else changes to ``set_base``'s.
        ``consolidated``: write ``.zmetadata`` (Zarr v2: the commit point). The root object gets the
        new version record (Zarr v2) and is written last."""
        zs = self.zstore
        objects = {k: (parse_json(bytes(v), where=zs.where(k)) if isinstance(v, bytes | bytearray) else v)
                   for k, v in objects.items()}
        meta = self._metadata_after(objects, full)
        if root == ".zgroup" and ".zgroup" in meta:
            objects[root] = meta[root] = with_version(meta[root], self.record)
        if not self.inplace:  # written beside the target: nobody reads it before the swap
            self._write_beside(objects, meta, root, consolidated)
            return
        assert self.journal is not None
        whole = self.kind in ("new", "replace")
        if whole:  # (in place, the journal's conditional write below proves the claim is still ours)
            self._check_owner()
        self._check_unchanged("commit", objects)  # (before the window: another tool's change since set_base)
        if not whole:  # the old values (for a rollback) and the window: readers of objects refuse
            self._open_window(objects, root)
        _write_objects(zs, {k: v for k, v in objects.items() if k != root}, root)
        if consolidated and self.fmt == "v2":
            self._commit_point(meta, whole)
        sys.audit("xr_zstrings.commit", "committed")
        # at once: the root naming the new version, and the claim released (a root left behind is
        # finished by the next writer or repair: .zmetadata says which version is committed). Each
        # only while it is ours (conditional writes): a writer resumed after a takeover leaves the
        # taker's claim and root alone (the taker rolled this committed write forward)
        self._stop_renewal()
        if self.fmt == "v3" and objects.get(root) is not None:
            # Zarr v3 (write.append_v3): the root zarr.json is the commit point, so it lands before
            # the claim goes (a claim released first would leave the arrays grown, the root not),
            # only while the claim is ours and over the root this write started from (or its
            # placeholder): else another writer or a takeover came first, and this write lost
            self._fence()
            data = dumps(objects[root])
            if _v3_root_in_step(objects, root):  # (else noted before its placeholder: _open_window)
                zs.keep_lineage(data)  # (a local store: lazy readers of the old version keep reading)
            try:
                zs.put_if(root, data, match=self._root_etag) if self._root_etag else zs.put_if(root, data)
            except CommitConflict:
                self._lose(f"its root object {root!r} changed under it (another writer or a takeover)")
            self._release_claim()
            self._done = True
            return
        done: list[Callable[[], object]] = [self._release_claim]
        if objects.get(root) is not None:
            done.append(lambda: self._put_root(root, dumps(objects[root])))
        at_once(*done)
        self._done = True

    def _metadata_after(self, objects: Mapping[str, Any], full: bool) -> dict[str, Any]:
        """Every metadata object of the new version: ``set_base``'s changed by ``objects`` (``full``:
        ``objects`` alone)."""
        meta: dict[str, Any] = {} if full or self.base_meta is None else dict(self.base_meta)
        for k, v in objects.items():
            if k.rsplit("/", 1)[-1] in METADATA_NAMES:
                if v is None:
                    meta.pop(k, None)
                else:
                    meta[k] = v
        return meta

    def _write_beside(self, objects: Mapping[str, Any], meta: Mapping[str, Any], root: str,
                      consolidated: bool) -> None:
        """``commit`` of a target written beside the store (swapped in whole later): objects,
        ``.zmetadata``, the root last; nobody reads it before the swap."""
        zs = self.zstore
        zs.set_many([(k, dumps(v)) for k, v in objects.items() if k != root and v is not None])
        if consolidated:
            zs.set_many([(ZMETADATA, consolidated_bytes(meta))])
        if objects.get(root) is not None:
            zs.set_many([(root, dumps(objects[root]))])
        self._done = True

    def _commit_point(self, meta: Mapping[str, Any], whole: bool) -> None:
        """Replace ``.zmetadata`` (Zarr v2) only if nobody committed since this write began: the one
        write that switches every consolidated reader to the new version."""
        sys.audit("xr_zstrings.commit", "commit")
        # the claim is still ours (renewed first when the writer stalled): the conditional write
        # below proves only that nobody committed since, and a writer taken over after its
        # objects were written would commit a version whose chunks the taker removed
        self._fence()
        zs = self.zstore
        try:  # the commit point
            if whole or self.base_etag is None:
                zs.put_if(ZMETADATA, consolidated_bytes(meta), create=True)
            else:
                zs.put_if(ZMETADATA, consolidated_bytes(meta), match=self.base_etag)
        except CommitConflict:
            self._lose(f"{ZMETADATA!r} changed under it: another writer committed first")

    def _open_window(self, objects: Mapping[str, Any], root: str) -> None:
        """The metadata window of an append or add: the journal records the old values of
        ``objects`` (for a rollback), then the root becomes the placeholder every per-object reader
        refuses."""
        zs = self.zstore
        assert self.journal is not None
        old = self.base_meta or {}
        self.journal.old_meta = {k: old.get(k) for k in objects}
        self.journal.new_meta = {k: v for k, v in objects.items() if k != root and isinstance(v, Mapping)}
        self.journal.phase = "committing"
        rec = VersionRecord(self.record.lineage, self.record.commit, self.record.version, self.kind)
        placeholder = incomplete_v2_group(rec.as_json()) if root == ".zgroup" else incomplete_v3_root(rec.as_json())
        # the journal first (a conditional write: the claim is still ours, and its lease starts
        # again), then the placeholder; only over the root this write started from: a root
        # changed since (a writer that took the store over while this one stalled, another
        # tool) is not ours to replace
        self._put_journal()
        was = self.state.root_etag if self.state is not None else None
        if _v3_root_in_step(objects, root):
            # a Zarr v3 root holding the consolidated metadata (write.append_v3): every reader of it
            # is served the old version until it is replaced, the commit point; no placeholder
            self._root_etag = was
            sys.audit("xr_zstrings.commit", "window")
            return
        if root == "zarr.json" and isinstance(objects.get(root), Mapping):
            # (the lineage noted over the root this write started from, not over its placeholder)
            zs.keep_lineage(dumps(objects[root]))
        lost = object()
        try:
            put: object = zs.put_if(root, placeholder, match=was) if was else zs.put_if(root, placeholder, create=True)
        except CommitConflict:
            put = lost
        if put is lost:  # nothing of the metadata changed: a rollback must not restore any of it
            self.journal.old_meta, self.journal.phase = None, "writing"
            self._put_journal()
            self._lose(f"its root object {root!r} changed under it (another writer or tool wrote it)")
        self._root_etag = cast("str | None", put)
        sys.audit("xr_zstrings.commit", "window")
        self._check_unchanged("window", objects)  # (another tool's change since set_base, the window included)

    def _put_root(self, root: str, data: bytes) -> None:
        """The root object naming the committed version, only over this write's placeholder."""
        zs = self.zstore
        with contextlib.suppress(CommitConflict):  # replaced since: a taker finished this version
            zs.put_if(root, data, match=self._root_etag) if self._root_etag else zs.put_if(root, data)

    def _stop_renewal(self) -> None:
        """Stop the claim's renewal thread and wait for it: a renewal in flight must not race the
        release (a renewal after it would put the claim back)."""
        self._stop.set()
        if self._renewer is not None and self._renewer is not threading.current_thread():
            self._renewer.join()

    def _release_claim(self) -> bool:
        """Release this write's claim while it is still ours (``release``); False when it was taken
        over (then it is the taker's and stays)."""
        self._stop_renewal()
        if not self.inplace or self.journal is None:
            return False
        with self._lock:
            proven = not self._lost.is_set() and time.monotonic() - self._renewed_at < self._fence_after
            ok = release(self.zstore, self.journal, self.etag, proven=proven)
            if ok:
                self.etag = None
            else:
                self._lost.set()
            return ok

    def _lose(self, why: str) -> NoReturn:
        self._stop.set()
        raise ConcurrentWriteError(
            f"Cannot commit the write to {self.zstore.display}: {why}. This write was not committed: readers "
            "keep the version another writer made. Write again (the data you passed was not stored).")

    def _check_owner(self) -> None:
        """Refuse to go on when the claim was taken over (a stalled writer: see ``_start_renewal``)."""
        if self._lost.is_set():
            self._lose("its claim was taken over while it was stalled")
        with self._lock:
            _, etag = self.zstore.get_tagged(JOURNAL)
            if etag != self.etag:
                self._lost.set()
        if self._lost.is_set():
            self._lose("its claim was taken over while it was stalled")

    def _fence(self) -> None:
        """Before every batch of writes through the store (``ZStore.fence``): refuse to go on when
        the claim was taken over (the renewal thread found it), and renew the claim first when it
        was last written more than half the lease ago (the writer stalled, or its renewal thread
        did). A taker needs the claim unrenewed for the whole lease, so a batch that starts here
        has at least half the lease before anyone may take the store over. The renewal thread
        writes the claim every quarter lease, so a write that does not stall pays no request here.

        A renewal rather than a read of the journal: it confirms the claim (``If-Match`` its ETag)
        at the same cost and also extends the lease, where a read would leave a writer whose
        renewal thread is starved on a lease that keeps running out."""
        if self._lost.is_set():
            self._lose("its claim was taken over while it was stalled")
        if time.monotonic() - self._renewed_at > self._fence_after:
            self._confirm()

    def _confirm(self) -> None:
        """Renew the claim now (one conditional write), unless another thread just did."""
        with self._confirm_lock:
            if time.monotonic() - self._renewed_at > self._fence_after:
                self._put_journal()
        if self._lost.is_set():
            self._lose("its claim was taken over while it was stalled")

    def _put_journal(self) -> None:
        assert self.journal is not None
        with self._lock:
            self.journal.writer["renewed"] = time.time()
            sent = time.monotonic()
            try:
                self.etag = self.zstore.put_if(JOURNAL, self.journal.to_bytes(), match=self.etag)
            except CommitConflict:
                self._lost.set()
            else:
                self._renewed_at = sent
        if self._lost.is_set():
            self._lose("its claim was taken over while it was stalled")

    def _start_renewal(self) -> None:
        period = max(1.0, min(lock_timeout() / 4, 60.0))

        def run() -> None:
            while not self._stop.wait(period):
                try:
                    self._put_journal()
                except ConcurrentWriteError:
                    return
                except Exception:  # noqa: BLE001,S112 - a failed renewal is retried; the commit checks ownership
                    continue

        self._renewer = threading.Thread(target=run, name="zstrings-claim", daemon=True)
        self._renewer.start()

    def _unfence(self) -> None:
        if self.zstore.fence == self._fence:
            self.zstore.fence = None

    def finish(self) -> None:
        """End the write: the claim is released while it is ours (the v3 writer, whose root
        zarr.json is its commit point, calls it after writing that)."""
        sys.audit("xr_zstrings.commit", "committed")
        self._unfence()
        self._release_claim()
        self._done = True

    def _release(self) -> None:
        self._unfence()
        with contextlib.suppress(Exception):
            self._release_claim()

    def abort(self) -> None:
        """Undo a write that failed (an exception, not a kill): as a recovery would."""
        self._stop.set()
        if self._done or not self.inplace or self.journal is None or self._lost.is_set():
            return
        self._stop_renewal()
        state = inspect_store(self.zstore)
        if state.journal is None or state.journal.txn != self.journal.txn or state.journal_etag != self.etag:
            return  # not ours any more: the taker undoes or completes it
        recover(self.zstore, state, self.undo, claim=self.etag)
        self.etag = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        if et is not None:
            with contextlib.suppress(Exception):
                self.abort()
        self._stop.set()
        self._unfence()


@contextlib.contextmanager
def begun(zstore: ZStore, kind: str, **kw: Any) -> Iterator[Transaction]:
    """``Transaction.begin`` as a context: on an exception the write is undone."""
    txn = Transaction.begin(zstore, kind, **kw)
    with txn:
        yield txn
