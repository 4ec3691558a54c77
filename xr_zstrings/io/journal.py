"""A store's write journal and commit state: the journal a write in place keeps
(``.zstrings-journal``, ``Journal``) and who wrote it; what a store holds (``StoreState``,
``inspect_store``), as ``zstrings check`` reports it, ``repair`` acts on it and a writer that finds
a journal reads it; and whether a journal belongs to the store it lies in (``journal_foreign``).
The protocol that writes and recovers them: ``commit``.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import JournalError, MetadataError
from ..formats.nczarr import parse_json
from .conditional import lock_timeout
from .consolidated import (
    ZMETADATA,
    VersionRecord,
    canonical,
    consolidated_meta,
    consolidated_view,
    is_placeholder,
    version_of,
)
from .zstore import ZStore

__all__ = ["JOURNAL", "JOURNAL_REFUSED", "Journal", "StoreState", "describe_writer", "inspect_store",
           "journal_foreign", "lagging", "new_id", "refuse_foreign", "this_writer", "writer_gone"]

#: the journal object of a write in progress (at the store's root)
JOURNAL = ".zstrings-journal"


def new_id() -> str:
    return uuid.uuid4().hex[:16]


# ---------------------------------------------------------------------------------------------
# Writers and the journal
# ---------------------------------------------------------------------------------------------


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _pid_start(pid: int) -> str:
    """When process ``pid`` started (Linux: clock ticks since boot), so a reused pid is not taken
    for the writer; "" where unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def this_writer() -> dict[str, Any]:
    now = time.time()
    return {"host": socket.gethostname(), "boot": _boot_id(), "pid": os.getpid(),
            "pid_start": _pid_start(os.getpid()), "started": now, "renewed": now}


def writer_gone(w: Mapping[str, Any]) -> bool:
    """Whether the process that wrote journal writer record ``w`` is known to have ended: it ran on
    this machine (host name and boot id) and no process with its pid and start time exists."""
    if w.get("host") != socket.gethostname() or w.get("boot", "") != _boot_id():
        return False
    pid = int(w.get("pid", 0) or 0)
    if pid <= 0:
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    start = str(w.get("pid_start", ""))
    return bool(start) and _pid_start(pid) not in ("", start)


def describe_writer(w: Mapping[str, Any]) -> str:
    return f"process {w.get('pid')} on {w.get('host')}"


#: what ``repair`` does about a journal no write of the store left (``errors.JournalError``), in words
#: (``StoreState.describe``, ``zstrings check``)
JOURNAL_REFUSED = (f"refuses: nothing acts on a journal no write of this store left; remove {JOURNAL} if you know no "
                   "writer is running")


@dataclass
class Journal:
    """The record of a write in progress (``.zstrings-journal``). ``appends``: array path ->
    ``{"axis", "old", "new"}`` (the lengths along the appended axis); ``new_arrays``: arrays the
    write adds; ``old_meta``: metadata key -> its value before the write (None: it did not exist),
    recorded before the first metadata object changes; ``phase``: claimed, writing, committing;
    a whole-store write: clearing (its old root recorded, about to be replaced by the placeholder)
    and cleared (removing the old objects)."""

    txn: str
    kind: str  # "append", "add", "new", "replace", "migrate" (Zarr v3 metadata beside the v2: write.migrate)
    fmt: str  # "v2", "v3"
    writer: dict[str, Any]
    lineage: str
    commit: str
    version: int
    base: str | None = None  # the commit the write builds on (append, add)
    phase: str = "claimed"
    appends: dict[str, dict[str, int]] = field(default_factory=dict)
    new_arrays: list[str] = field(default_factory=list)
    old_meta: dict[str, Any] | None = None
    #: the metadata objects (key -> JSON) the write puts, recorded with ``old_meta``: a recovery
    #: tells its own objects from another tool's of the same shape by their content
    new_meta: dict[str, Any] | None = None

    def to_bytes(self) -> bytes:
        return json.dumps({"xr_zstrings_journal": 1, **asdict(self)}, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, raw: bytes, *, where: str) -> Journal:
        """The journal in ``raw``; ``JournalError`` when it is not one a write of ours left (not JSON,
        not a journal, or fields of the wrong kind): nothing may act on it."""
        try:
            obj = parse_json(raw, where=where)
        except MetadataError as e:
            why = str(e).split(": ", 1)[-1].split(". Expected", 1)[0]  # ("malformed JSON (...)", "not UTF-8 (...)")
            raise JournalError.of(f"{where} is not an xr_zstrings write journal ({why})") from None
        if not isinstance(obj, Mapping) or obj.get("xr_zstrings_journal") != 1:
            raise JournalError.of(f"{where} is not an xr_zstrings write journal (a JSON object with "
                                  "'xr_zstrings_journal': 1 was expected)")
        fields = {k: obj[k] for k in cls.__dataclass_fields__ if k in obj}
        try:
            j = cls(**fields)
        except TypeError as e:  # a required field missing
            raise JournalError.of(f"{where} is not a complete xr_zstrings write journal ({e})") from None
        bad = j._bad_field()
        if bad:
            raise JournalError.of(f"{where} is not a valid xr_zstrings write journal ({bad})")
        return j

    def _bad_field(self) -> str | None:
        """What field of a parsed journal has a value no writer writes, or None."""
        if self.kind not in ("append", "add", "new", "replace", "migrate") or self.fmt not in ("v2", "v3"):
            return f"kind {self.kind!r}, format {self.fmt!r}"
        if not all(isinstance(v, str) for v in (self.txn, self.lineage, self.commit, self.phase)) or \
                not isinstance(self.version, int) or not isinstance(self.writer, dict) or \
                not (self.base is None or isinstance(self.base, str)):
            return "its txn, lineage, commit, version, phase, base or writer has the wrong type"
        if not isinstance(self.appends, dict) or not all(
                isinstance(r, dict) and all(isinstance(r.get(n), int) for n in ("axis", "old", "new"))
                for r in self.appends.values()):
            return "its appends are not {path: {axis, old, new}}"
        if not isinstance(self.new_arrays, list) or not all(isinstance(a, str) for a in self.new_arrays) or \
                not all(m is None or isinstance(m, dict) for m in (self.old_meta, self.new_meta)):
            return "its new_arrays, old_meta or new_meta have the wrong type"
        return None

    @property
    def whole_store(self) -> bool:
        return self.kind in ("new", "replace")


# ---------------------------------------------------------------------------------------------
# What a store holds: for check, repair and a writer that finds a journal
# ---------------------------------------------------------------------------------------------


@dataclass
class StoreState:
    """A store's commit state, as ``zstrings check`` reports it and ``repair`` acts on it."""

    fmt: str  # "v2", "v3" or "none"
    journal: Journal | None
    journal_etag: str | None
    journal_age: float | None  # seconds since the journal was written or renewed
    committed: VersionRecord | None  # the version in .zmetadata (v2) that readers are served
    root: VersionRecord | None  # the version the root object names (or its placeholder's)
    root_placeholder: bool
    zmetadata_etag: str | None
    consolidated: dict[str, Any] | None  # the metadata objects of .zmetadata
    root_obj: Any = None
    root_zattrs: Any = None
    #: the ETag of the root object of the store's format (``.zgroup`` or ``zarr.json``), None when absent
    root_etag: str | None = None
    #: why ``journal`` does not belong to this store (``journal_foreign``), None when it may
    foreign: str | None = None
    #: a Zarr v3 append or add whose root is as it was: one of the objects it changes holds its new
    #: value (its root, written after them over its placeholder, is then the new version's)
    v3_objects_new: bool = False

    @property
    def writer_gone(self) -> bool:
        return self.journal is not None and writer_gone(self.journal.writer)

    @property
    def lease_expired(self) -> bool:
        return self.journal_age is not None and self.journal_age > lock_timeout()

    @property
    def in_journal_commit(self) -> bool:
        """The journal's write reached its commit point (the new version is in ``.zmetadata``)."""
        j = self.journal
        if j is None:
            return False
        if j.fmt == "v3" and not j.whole_store:  # an append or add (write.append_v3): its root written last
            return j.phase == "committing" and self.root_obj is not None and not self.root_placeholder and (
                canonical(self.root_obj) != canonical((j.old_meta or {}).get("zarr.json")) or self.v3_objects_new)
        if j.fmt == "v3":
            return self.root_obj is not None and not self.root_placeholder
        return self.committed is not None and self.committed.commit == j.commit

    def describe(self) -> tuple[str, str]:
        """(what state the store is in, what ``repair`` does about it), in words."""
        j = self.journal
        if j is None:
            return self._describe_without_journal()
        if self.foreign is not None:
            return f"its journal {JOURNAL} does not belong to this store: {self.foreign}", JOURNAL_REFUSED
        who = describe_writer(j.writer)
        age = f"{self.journal_age:.0f} s" if self.journal_age is not None else "an unknown time"
        alive = ("its writer has ended" if self.writer_gone else
                 f"its claim has not been renewed for {age}, longer than the lease" if self.lease_expired else
                 f"its writer may still be running (last renewed {age} ago)")
        happened, action = self._journal_case(j)
        state = f"{_WRITE_KINDS.get(j.kind, j.kind)} by {who} {happened}; {alive}"
        if not (self.writer_gone or self.lease_expired):
            action += " (only with --force / force=True while its writer may be running)"
        return state, action

    def _journal_case(self, j: Journal) -> tuple[str, str]:
        """How far the journal's write got, and what ``repair`` does about it, in words."""
        if self.in_journal_commit:
            return (f"reached its commit point (version {j.version})",
                    "roll forward: finish the per-object metadata of the committed version")
        if j.whole_store and j.phase == "cleared":
            return ("was interrupted after the old version was removed",
                    "roll back to an empty target (nothing of either version is complete); then write it again")
        if j.whole_store:
            return ("is under way or was interrupted before removing anything",
                    "roll back: drop the claim (the old version is intact; its root object put back)")
        if j.kind == "migrate":  # (write.migrate: it changes no v2 object nor chunk)
            return ("is under way or was interrupted; v2 readers are unaffected",
                    "roll back: remove the Zarr v3 metadata it was writing (v3 readers then read the v2 metadata); "
                    "migrate again" if j.phase != "claimed" else "drop the claim (it wrote nothing)")
        base = f"version {self.committed.version}" if self.committed else "the old version"
        return (f"is under way or was interrupted before its commit point; readers see {base}",
                "roll back: remove the chunks it wrote and restore the metadata it changed")

    def _describe_without_journal(self) -> tuple[str, str]:
        """``describe`` of a store no write has a journal in: complete, or its metadata lag or went stale."""
        if lagging(self):
            assert self.committed is not None and self.root is not None
            shows = ("the root object is still the placeholder of that write" if self.root_placeholder
                     and self.root.commit == self.committed.commit else
                     f"the per-object metadata show version {self.root.version}")
            return (f"version {self.committed.version} is committed (.zmetadata) but {shows}",
                    "roll forward: write the per-object metadata from .zmetadata")
        if self.root_placeholder:
            return ("the root object is a placeholder of a write that left no journal",
                    "nothing it can complete: write the store again (mode='w')")
        if self.fmt == "v2" and self.consolidated is not None and self.committed is not None and \
                consolidated_view(self.root_obj, self.root_zattrs, {"zarr_consolidated_format": 1,
                                  "metadata": self.consolidated}, remote=True) == "objects":
            return ("consolidated metadata (.zmetadata) is stale: another tool changed the root objects since",
                    "re-consolidate .zmetadata from the objects")
        if self.fmt == "v2" and self.consolidated is not None and self.committed is None:
            return ("complete; its consolidated metadata (.zmetadata) was written by another tool", "nothing to do")
        ver = f" (version {self.committed.version})" if self.committed is not None else ""
        return f"complete{ver}", "nothing to do"


#: a journal's kind of write, in ``StoreState.describe``'s words
_WRITE_KINDS = {"append": "an append", "add": "added variables", "new": "a new store's first write",
                "replace": "a replacement (mode='w')", "migrate": "a migration in place (Zarr v3 metadata)"}


def inspect_store(zstore: ZStore) -> StoreState:
    """Read the journal, the root object and ``.zmetadata`` of ``zstore`` (no other object, but for
    a whole-store write's journal without its root: whether the store is empty). ``JournalError``
    when the journal is not one; ``StoreState.foreign`` says why one does not belong to ``zstore``."""
    (raw_j, etag_j), (raw_z, etag_z), (raw_g, etag_g), (raw_a, _), (raw_3, etag_3) = zstore.get_tagged_many(
        [JOURNAL, ZMETADATA, ".zgroup", ".zattrs", "zarr.json"])
    journal = Journal.from_bytes(raw_j, where=zstore.where(JOURNAL)) if raw_j is not None else None
    age = _journal_age(zstore, journal) if journal is not None else None
    zm = parse_json(raw_z, where=zstore.where(ZMETADATA)) if raw_z is not None else None
    meta = consolidated_meta(zm)
    fmt, root = _format_and_root(zstore, raw_g, raw_3, meta, journal)
    committed = version_of(meta.get(".zgroup")) if meta else None
    foreign = None
    if journal is not None:
        foreign = _foreign_here(zstore, journal, raw_3 if journal.fmt == "v3" else raw_g, committed, meta)
    raw_a = raw_a if fmt == "v2" else None
    v3_new = journal is not None and _v3_objects_new(zstore, journal, root if fmt == "v3" else None)
    return StoreState(
        fmt=fmt, journal=journal, journal_etag=etag_j, journal_age=age, committed=committed,
        root=version_of(root) if fmt == "v2" else None, root_placeholder=is_placeholder(root),
        zmetadata_etag=etag_z, consolidated=meta, root_obj=root,
        root_zattrs=parse_json(raw_a, where=zstore.where(".zattrs")) if raw_a is not None else None,
        foreign=foreign, root_etag=etag_3 if fmt == "v3" else etag_g, v3_objects_new=v3_new,
    )


def _v3_objects_new(zstore: ZStore, j: Journal, root: Any) -> bool:
    """A Zarr v3 append or add whose root holds no consolidated metadata (so it stays as it was):
    whether one object it changes holds its new value. Those are written only after the placeholder
    root, and the root only after them, so a root that is no placeholder is then the committed one
    (else the write never reached its window)."""
    if j.fmt != "v3" or j.whole_store or j.phase != "committing" or not j.new_meta or is_placeholder(root):
        return False
    old = j.old_meta or {}
    old_root = old.get("zarr.json")
    if canonical(root) != canonical(old_root) or (isinstance(old_root, Mapping)
                                                  and old_root.get("consolidated_metadata")):
        return False  # (the root tells: one holding the consolidated metadata is written without a placeholder)
    key = next((k for k, v in sorted(j.new_meta.items()) if canonical(v) != canonical(old.get(k))), None)
    if key is None:
        return False
    try:
        now = zstore.get_json_many([key])[0]
    except (MetadataError, OSError):
        return False
    return canonical(now) == canonical(j.new_meta[key])


def _journal_age(zstore: ZStore, journal: Journal) -> float:
    """Seconds since the journal was written or renewed: by the server's clock where it keeps one,
    else by the renewal time the journal records."""
    age = zstore.age(JOURNAL)
    if age is None:
        age = max(0.0, time.time() - float(journal.writer.get("renewed", 0) or 0))
    return age


def _format_and_root(zstore: ZStore, raw_g: bytes | None, raw_3: bytes | None, meta: dict[str, Any] | None,
                     journal: Journal | None) -> tuple[str, Any]:
    """The store's format ("v2", "v3", or "none": then the journal's) and its root object."""
    root = parse_json(raw_g, where=zstore.where(".zgroup")) if raw_g is not None else None
    fmt = "v2" if raw_g is not None or meta is not None else ("v3" if raw_3 is not None else "none")
    if journal is not None and fmt == "none":
        fmt = journal.fmt
    if fmt == "v3" and raw_3 is not None:
        root = parse_json(raw_3, where=zstore.where("zarr.json"))
    return fmt, root


def _foreign_here(zstore: ZStore, journal: Journal, raw_root: bytes | None, committed: VersionRecord | None,
                  meta: dict[str, Any] | None) -> str | None:
    """``journal_foreign`` against the root object of the journal's format (``raw_root``)."""
    try:
        own_root = parse_json(raw_root, where=zstore.where("root")) if raw_root is not None else None
    except MetadataError:
        own_root = "unreadable"
    return journal_foreign(journal, committed, meta, own_root, zstore.some_objects)


def refuse_foreign(state: StoreState, zstore: ZStore, doing: str) -> None:
    """Raise ``JournalError`` (``doing`` leads its message) when ``state``'s journal does not belong
    to ``zstore``: neither ``repair`` nor a writer's recovery acts on it."""
    if state.foreign is not None:
        raise JournalError.of(f"its journal {zstore.where(JOURNAL)} does not belong to this store: {state.foreign}",
                              doing)


def _length_in(consolidated: Mapping[str, Any], path: str, axis: int) -> int | None:
    """The length along ``axis`` of array ``path`` as consolidated metadata shows it, None if it does not."""
    z = consolidated.get(f"{path.strip('/')}/.zarray")
    shape = z.get("shape") if isinstance(z, Mapping) else None
    return shape[axis] if isinstance(shape, list) and 0 <= axis < len(shape) else None


def journal_foreign(j: Journal, committed: VersionRecord | None, consolidated: Mapping[str, Any] | None,
                    root: Any, others: Callable[[], list[str]]) -> str | None:
    """Why journal ``j`` cannot have been left by a write of the store it lies in, or None when it can.

    A write's journal and the store's version records agree in every state a writer can leave (see
    the module docstring): an append or added variables build on the committed version (``j.base``
    is the commit in ``.zmetadata``; ``j.commit`` once it committed); a whole-store write's root
    object (``root``: of the journal's format) is its placeholder, naming its lineage and commit,
    from before it removes anything (while it clears, the old root it recorded) until its commit
    point (``.zmetadata`` names ``j.commit``), or the target was empty (``others()`` lists the store's
    objects). A journal that records nothing yet (phase "claimed") changes nothing when dropped, nor
    does an append's whose every array another tool grew and consolidated since (xarray's
    ``to_zarr(mode="a")``: its recovery keeps them, ``foreign_appends``).
    Any other journal (a copy, a restore from backup, a file moved between stores) is refused."""
    if _harmless_to_drop(j, committed):
        return None
    c = committed
    ours = f"{_JOURNAL_KINDS[j.kind]} of lineage {j.lineage or '?'} (version {j.version}, commit {j.commit or '?'}" + \
        (f", from commit {j.base}" if j.base else "")
    has = (f"the store's committed version record (.zmetadata) is lineage {c.lineage}, version {c.version}, "
           f"commit {c.commit}") if c is not None else "the store has no committed version record (.zmetadata)"
    if j.whole_store:
        return _whole_store_foreign(j, root, others, ours, has)
    if j.fmt == "v3":  # a Zarr v3 append or add: no version record in its root zarr.json to hold it to
        return None
    if c is not None and j.base is not None and c.commit == j.base:
        return None  # built on the committed version
    if c is None and consolidated is not None:
        if _grown_by_another_tool(j, consolidated):
            return None  # another tool grew every array it records, then consolidated: a recovery keeps them all
        if j.base is None:
            return _beside_foreign_consolidated(j, consolidated, ours)
    return f"it records {ours}), but {has}"


#: a journal's kind of write, in ``journal_foreign``'s words
_JOURNAL_KINDS = {"append": "an append", "add": "added variables", "new": "a new store's write",
                  "replace": "a replacement (mode='w')", "migrate": "a migration in place"}


def _harmless_to_drop(j: Journal, c: VersionRecord | None) -> bool:
    """Whether ``j`` may be any store's whatever the store shows: it records nothing yet, its write
    committed (random ids: only this write commits it), or it migrates a store without our version
    record (a migration changes no v2 object)."""
    if j.phase == "claimed" and not (j.appends or j.new_arrays or j.old_meta):
        return True
    if c is not None and bool(j.commit) and c.commit == j.commit:
        return True
    return j.kind == "migrate" and c is None and j.base is None


def _whole_store_foreign(j: Journal, root: Any, others: Callable[[], list[str]], ours: str, has: str) -> str | None:
    """``journal_foreign`` of a new store's or a replacement's journal: by the store's root object."""
    rec = version_of(root) if is_placeholder(root) else None
    if rec is not None and (rec.lineage, rec.commit) == (j.lineage, j.commit):
        return None  # its placeholder: it removed (or was removing) the old version
    old = (j.old_meta or {}).get("zarr.json" if j.fmt == "v3" else ".zgroup")
    if j.phase == "clearing" and canonical(root) == canonical(old):
        return None  # nothing removed yet: the root it recorded is still there
    if j.phase == "cleared" and root is None and not others():
        return None  # a new store's target: empty before its placeholder
    if j.fmt == "v3" and j.phase == "cleared" and isinstance(root, Mapping) and not is_placeholder(root):
        return None  # a Zarr v3 write past its commit point (its zarr.json names no version)
    shows = ("a placeholder of lineage " + rec.lineage if rec is not None else
             "a placeholder of another write" if is_placeholder(root) else
             "no root object" if root is None else "a complete root object")
    return f"it records {ours}), but the store's root shows {shows}; {has}"


def _grown_by_another_tool(j: Journal, consolidated: Mapping[str, Any]) -> bool:
    """An append only, every array of which another tool's consolidated metadata shows at another length."""
    return bool(j.appends) and not (j.new_arrays or j.old_meta) and all(
        _length_in(consolidated, p, r["axis"]) not in (None, r["old"]) for p, r in j.appends.items())


def _beside_foreign_consolidated(j: Journal, consolidated: Mapping[str, Any], ours: str) -> str | None:
    """``journal_foreign`` beside another tool's consolidated metadata, which the write leaves as it
    was: in step when it shows the appended arrays at their old length and none of the added ones."""
    if all(_length_in(consolidated, p, r["axis"]) == r["old"] for p, r in j.appends.items()) and \
            not any(f"{p.strip('/')}/.zarray" in consolidated for p in j.new_arrays):
        return None
    return (f"it records {ours}) that the store's consolidated metadata (another tool's) does not show "
            "before it (an appended array at another length, or an added array already there)")


def lagging(state: StoreState) -> bool:
    """No journal, and the per-object metadata lag behind our committed ``.zmetadata`` (a writer
    fenced out after its commit point, or a root object left as a placeholder)."""
    c, r = state.committed, state.root
    if state.journal is not None or state.fmt != "v2" or c is None or state.consolidated is None or r is None:
        return False
    return r.lineage == c.lineage and (r.commit != c.commit or state.root_placeholder)
