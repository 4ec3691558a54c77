"""The one way into a write: every writer opens its target here, and only here.

``write_session`` classifies the target once (``classify``: a local folder, a local zip, object
storage, a zarr-python Store, an icechunk session's store), refuses what ``mode`` may not touch,
takes the writer lock, recovers what killed writers left, picks the commit (``RULES``: a local
swap, the journal transaction in place, or the store owner's commit) and hands the writer one
``WriteSession``. Why there is one place for this: docs/reliability.md ("Interrupted writes").

API (the writers in write/, the CLI and the accessor use nothing else to open a target)::

    with write_session(target, mode, kind=None, fmt="v2", group=None, writer=None,
                       storage_options=None) as s:
        s.target       # Target: .kind ("dir", "zip", "object", "store", "icechunk"), .display, .path
        s.zstore       # the ZStore to write into (a local swap's sibling, or the target itself)
        s.txn          # the io.commit.Transaction (append/add: set_base, record_writes), or None
        s.put({key: bytes}); s.delete([key])      # through the store, fenced while claimed
        s.commit(objects, root=".zgroup", full=True)  # Zarr v2 / NCZarr: metadata last, the commit
        s.finish()     # Zarr v3: after writing the root zarr.json yourself (a no-op where no claim)

* ``mode``: ``"w-"`` (create: a non-empty target refused), ``"w"`` (replace whole), ``"a"`` (into
  the store that is there). ``kind`` (``KINDS``) defaults from ``mode`` ("new", "replace", "add");
  the in-place kinds are "append", "add", "migrate", "repair" and "region".
* ``fmt="v3"`` whole-store writes (``to_zarr_v3``, a migration's new target): ``mode="w-"``/``"w"``;
  a local folder or zip is written beside and swapped in, object storage and Stores get the journal
  transaction (placeholder root first), icechunk the owner's commit (``"w-"`` refuses a non-empty
  session store, ``"w"`` clears it; no journal, no placeholder). ``s.finish()`` after the root.
* ``fmt="v3"``, ``mode="a"`` (kind "append" or "add"): the store changed in place, a local folder
  under its writer lock, object storage and Stores claimed by the journal (``s.txn``: ``set_base``,
  ``record_writes``; ``s.finish()`` after the root), icechunk by its owner (``s.txn`` None).
* ``target`` may be a ``Target`` ``classify`` returned: a caller that looks at the target first
  (``convert``'s overlap check) hands it on, so it is classified once.
* ``group="a/b"`` (``fmt="v3"``): a group written into the store that is there. A local folder:
  into a hard-link copy (``io.atomic.CloneStore``) swapped in, or in place (metadata last) where the
  file system cannot hard-link; a zip or a Zarr v2 / NCZarr store refused; ``mode="w-"`` refuses an
  existing group. Object storage and Stores: written into as they are (``s.txn`` None).
* ``kind="region"``: chunks written into an existing store, no metadata change; no lock (many
  workers write disjoint slabs at once), refused while another writer holds a live claim.
* ``netcdf_file(path, mode)``: a netCDF-4 file written beside ``path`` and renamed over it.
* ``target_refusal(target, storage_options=None)``: what another library's write (xarray's ``to_zarr``,
  through the accessor) may not touch there, without opening a session.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from zarr.abc.store import Store
from zarr.storage import LocalStore, ZipStore

from ..errors import ConcurrentWriteError, StoreNotFoundError, TargetExistsError, UnsupportedError, ZStringsError
from ..io.atomic import (
    CloneStore,
    TargetRoot,
    local_commit,
    lock_held,
    not_replaceable,
    recover_swaps,
    refuse_link_target,
    target_lock,
    target_root,
)
from ..io.commit import JOURNAL, Transaction, begun, describe_writer, inspect_store
from ..io.redact import shown
from ..io.store import open_store, zarr_v3_only
from ..io.targets import local_target, parse_nczarr_url
from ..io.zstore import ZStore
from ..zarr_compat import sync

__all__ = ["KINDS", "RULES", "Target", "TargetKind", "WriteSession", "claimed", "classify", "local_folder",
           "local_place", "netcdf_file", "target_refusal", "write_session"]

TargetKind = Literal["dir", "zip", "object", "store", "icechunk"]


@dataclass(frozen=True)
class Rules:
    """How a write commits on one kind of target: ``whole`` for ``mode="w-"``/``"w"``, ``inplace``
    for ``mode="a"`` (None: refused, with ``why``)."""

    whole: Literal["swap", "journal", "owner"]
    inplace: Literal["locked journal", "journal", "owner"] | None
    why: str = ""


#: what varies by target kind, in one place
RULES: dict[TargetKind, Rules] = {
    "dir": Rules(whole="swap", inplace="locked journal"),
    "zip": Rules(whole="swap", inplace=None, why="zip files cannot be changed in place; write a directory store, "
                 "write into it there, then zip it."),
    "object": Rules(whole="journal", inplace="journal"),
    "store": Rules(whole="journal", inplace="journal"),
    "icechunk": Rules(whole="owner", inplace="owner"),
}

#: each transaction kind and the modes it is written with
KINDS: dict[str, tuple[str, ...]] = {
    "new": ("w-",), "replace": ("w",), "append": ("a",), "add": ("a",), "migrate": ("a",), "repair": ("a",),
    "region": ("a",),
}
_DEFAULT_KIND = {"w-": "new", "w": "replace", "a": "add"}
#: a kind's own fix where its target cannot be changed in place (else the rule's ``why``)
_IN_PLACE_FIX = {"migrate": "zip files are not changed in place. Pass a target (a directory) to migrate into."}
#: root objects whose presence makes a local folder a store to write into
_STORE_ROOTS = (".zgroup", ".nczarr", ".zmetadata", "zarr.json", JOURNAL)


@dataclass(frozen=True, repr=False)
class Target:
    """A write's target, classified once: its ``kind``, the name messages use, and where it is.
    A writer handed one (``convert`` classifies its target once for both its checks and the write)
    opens it without classifying it again; ``io.redact.shown`` names it by its display."""

    kind: TargetKind
    display: str
    raw: Any
    path: Path | None = None  # local folders and zips
    modes: frozenset[str] = frozenset()  # netcdf-c's #mode= flags of a URL
    storage_options: Mapping[str, Any] | None = None

    def __repr__(self) -> str:
        return self.display

    @property
    def rules(self) -> Rules:
        return RULES[self.kind]

    @property
    def is_zip(self) -> bool:
        """A zip file: a local one, one in object storage, or a zarr-python ``ZipStore`` (never
        changed in place: ``repair`` only reads one)."""
        if self.kind == "zip" or isinstance(self.raw, ZipStore):
            return True
        if self.kind != "object" or not isinstance(self.raw, str | os.PathLike):
            return False
        parsed = parse_nczarr_url(os.fspath(self.raw))
        return "zip" in parsed.modes or parsed.path.rstrip("/").lower().endswith(".zip")


def classify(target: Any, storage_options: Mapping[str, Any] | None = None) -> Target:
    """The one classification of a write's target (every write passes here exactly once)."""
    so = dict(storage_options) if storage_options else None
    if isinstance(target, ZStore):
        return Target("icechunk" if zarr_v3_only(target.store) else "store", target.display, target)
    if isinstance(target, Store):
        display = " ".join(shown(target).split())  # (a repr over several lines, as icechunk's, on one line)
        return Target("icechunk" if zarr_v3_only(target) else "store", display, target)
    local = local_target(target)
    if local is None:  # object storage (or what open_store refuses, with its message)
        return Target("object", shown(target), target, storage_options=so)
    text = os.fspath(target)
    return Target("zip" if local[1] else "dir", shown(target), text, path=local[0],
                  modes=parse_nczarr_url(text).modes, storage_options=so)


def check_mode(mode: str, kind: str | None = None) -> str:
    """``mode`` checked (and ``kind`` with it); the transaction kind the write is."""
    if mode not in _DEFAULT_KIND:
        raise ZStringsError(f"Invalid mode={mode!r}: expected 'w-' (create, never overwrite), 'w' "
                            "(overwrite) or 'a' (append along append_dim, or add variables).")
    kind = kind or _DEFAULT_KIND[mode]
    if kind not in KINDS:
        raise ZStringsError(f"Invalid write kind {kind!r}: expected one of {sorted(KINDS)}.")
    if mode not in KINDS[kind]:
        raise ZStringsError(f"A write of kind {kind!r} takes mode {' or '.join(map(repr, KINDS[kind]))}, not {mode!r}.")
    return kind


class WriteSession:
    """One write's store and commit, as ``write_session`` opened them (see the module docstring)."""

    def __init__(self, target: Target, zstore: ZStore, mode: str, kind: str, txn: Transaction | None, *,
                 read_only: bool = False, locked: bool = False) -> None:
        self.target = target
        self.zstore = zstore
        self.mode = mode
        self.kind = kind
        self.txn = txn
        self.read_only = read_only  # only read (``repair`` of a zip)
        self.locked = locked  # under the target's writer lock: no writer of ours runs meanwhile
        self.removed: list[str] = []  # what killed writers left, that this session removed

    @property
    def folder(self) -> Path | None:
        """The local folder ``zstore`` writes into (None: not a local folder)."""
        return local_folder(self.zstore)

    def remove_temporaries(self) -> None:
        """Remove the temporary files killed writers (or repairs) left inside a local store
        (``io.atomic.leftover_temporaries``) under a claim of it (no writer of ours writes one
        then); their names are added to ``removed``."""
        from ..io.atomic import leftover_temporaries
        from .repair import undo

        root = self.folder
        if root is None or not leftover_temporaries(root):
            return
        with Transaction.begin(self.zstore, "add", undo=undo) as txn:  # (a claim: writes nothing else)
            found = leftover_temporaries(root)
            for q in found:
                with contextlib.suppress(FileNotFoundError):
                    q.unlink()
            txn.finish()
        self.removed += [q.relative_to(root).as_posix() for q in found]

    def put(self, items: Mapping[str, bytes] | Iterable[tuple[str, bytes]]) -> None:
        """Write objects (key -> bytes) through the store; a claimed write checks its claim first."""
        self.zstore.set_many(items.items() if isinstance(items, Mapping) else items)

    def delete(self, keys: Iterable[str]) -> None:
        """Delete objects (absent ones ignored) through the store, after the claim's check."""
        from ..io.store_errors import mapped_errors

        zs = self.zstore
        zs.check_fence()

        async def run() -> None:
            for k in keys:
                await zs.store.delete(zs.full_key(k))

        with mapped_errors(f"Could not write to {zs.display}", zs.probe):
            sync(run())

    def commit(self, objects: Mapping[str, Any], *, root: str = ".zgroup", consolidated: bool = True,
               full: bool = False) -> None:
        """Commit ``objects`` (metadata key -> JSON, bytes or None) by the transaction (Zarr v2, NCZarr)."""
        if self.txn is None:
            raise ZStringsError(f"A {self.kind!r} write of {self.target.display} has no transaction to commit by.")
        self.txn.commit(objects, root=root, consolidated=consolidated, full=full)

    def finish(self) -> None:
        """End a write whose root object the writer wrote itself (Zarr v3): its claim released."""
        if self.txn is not None and self.txn.inplace:
            self.txn.finish()


@contextlib.contextmanager
def write_session(target: Any, mode: str = "w-", *, kind: str | None = None, fmt: str = "v2",
                  group: str | None = None, writer: Literal["to_nczarr", "repair", "migrate"] | None = None,
                  storage_options: Mapping[str, Any] | None = None) -> Iterator[WriteSession]:
    """Open ``target`` for one write (see the module docstring): on success the caller commits
    (``s.commit``/``s.finish``) and the local swap happens on exit; on an exception the write is
    undone (the sibling removed, or the transaction's recovery). ``writer`` (default: "to_nczarr"
    for ``fmt="v2"``) names the public function to ``open_store``'s refusals (icechunk holds v3 only)."""
    kind = check_mode(mode, kind)
    writer = writer or ("to_nczarr" if fmt == "v2" else None)
    t = target if isinstance(target, Target) else classify(target, storage_options)  # (classified by the caller)
    if kind == "repair":
        with _repairing(t) as s:
            yield s
        return
    if kind == "region":
        yield _region(t)
        return
    if group is not None and fmt == "v3":
        with _group(t, group, mode) as s:
            yield s
        return
    rules = t.rules
    if mode == "a" and rules.inplace is None:
        raise UnsupportedError(f"Cannot write into the zip store {t.display} in place: "
                               f"{_IN_PLACE_FIX.get(kind, rules.why)}")
    how = rules.inplace if mode == "a" else rules.whole
    assert how is not None
    with _OPEN[how](t, mode, kind, fmt, writer) as s:
        yield s


@contextlib.contextmanager
def _swap(t: Target, mode: str, kind: str, fmt: str, writer: Any) -> Iterator[WriteSession]:
    """A local folder or zip, ``mode="w"``/``"w-"``: written beside it and swapped in whole."""
    _local_options(t)
    assert t.path is not None
    is_zip = t.kind == "zip"
    with local_commit(t.path, mode=mode, display=t.display, zip_file=is_zip) as tmp:
        assert tmp is not None
        zs = ZStore(_local_store(tmp, is_zip), display=t.display, modes=t.modes)
        try:
            yield WriteSession(t, zs, mode, kind, Transaction.begin(zs, kind, fmt=fmt, inplace=False))
        finally:
            if is_zip:
                zs.store.close()


@contextlib.contextmanager
def _locked_journal(t: Target, mode: str, kind: str, fmt: str, writer: Any) -> Iterator[WriteSession]:
    """A local folder written in place (appends, added variables, migrations): under its writer
    lock, a store a killed swap renamed aside put back first, then the journal transaction."""
    from .repair import undo

    _local_options(t)
    assert t.path is not None
    path = Path(os.path.abspath(t.path))
    refuse_link_target(path, t.display)  # (a link is never written through)
    recover_swaps(path, t.display)
    with target_lock(path, t.display):
        if not any((path / k).is_file() for k in _STORE_ROOTS):
            open_store(t.raw, mode="r")  # a clear "no store" error
        zs = ZStore(LocalStore(path, read_only=False), display=t.display, modes=t.modes)
        with begun(zs, kind, fmt=fmt, undo=undo) as txn:
            yield WriteSession(t, zs, mode, kind, txn, locked=True)


@contextlib.contextmanager
def _journal(t: Target, mode: str, kind: str, fmt: str, writer: Any) -> Iterator[WriteSession]:
    """Object storage or a zarr-python Store: the target itself, claimed by its journal (a
    whole-store write puts a placeholder root first); a dead writer's leftovers recovered first."""
    from .repair import undo

    zs = _opened(t, "a" if mode == "a" else "w", writer)
    with begun(zs, kind, fmt=fmt, undo=undo, mode=mode if mode != "a" else "w") as txn:
        yield WriteSession(t, zs, mode, kind, txn)


@contextlib.contextmanager
def _owner(t: Target, mode: str, kind: str, fmt: str, writer: Any) -> Iterator[WriteSession]:
    """An icechunk session's store: nobody sees a write until its owner commits it, so no journal
    and no placeholder (icechunk refuses both); ``"w-"`` refuses a non-empty store, ``"w"`` clears it."""
    zs = _opened(t, "a" if mode == "a" else "w", writer)
    if mode != "a":
        existing = zs.list_dir("")
        if existing and mode == "w-":
            raise TargetExistsError(f"Cannot write to {zs.display}: it is not empty (found {sorted(existing)[:5]}) "
                                    "and mode='w-' never overwrites. Pass mode='w' to replace it.")
        if mode == "w":
            clear(zs)
    yield WriteSession(t, zs, mode, kind, None)


_OPEN = {"swap": _swap, "locked journal": _locked_journal, "journal": _journal, "owner": _owner}


@contextlib.contextmanager
def _repairing(t: Target) -> Iterator[WriteSession]:
    """``repair``'s session: no transaction (the repair takes a dead writer's claim over itself).
    A zip is only read, and what killed writers left beside a local one is removed once the repair
    found the zip whole (a refusal changes nothing); a local folder is repaired under its writer
    lock, after what killed swaps left beside it is put back or removed; other targets are opened
    as they are (an icechunk session's store refused: nothing of ours is ever left half-done there)."""
    if t.is_zip:
        if t.path is not None and not t.path.is_file():
            raise StoreNotFoundError(f"No zip store at {t.display}: {str(t.path)!r} is not a file.")
        so = dict(t.storage_options) if t.storage_options else None
        zs = open_store(t.raw, mode="r", storage_options=so)  # (a file that is no zip, or no store in it: refused)
        s = WriteSession(t, zs, "a", "repair", None, read_only=True)
        try:
            yield s
        finally:
            if zs.store is not t.raw:  # (a Store the caller passed stays open)
                close = getattr(zs.store, "close", None)
                if callable(close):
                    close()
        if t.path is not None:
            s.removed = _recover_beside(Path(os.path.abspath(t.path)), t.display, always=False)
        return
    if t.kind != "dir":
        yield WriteSession(t, _opened(t, "a", "repair"), "a", "repair", None)
        return
    _local_options(t)
    assert t.path is not None
    path = Path(os.path.abspath(t.path))
    if not path.is_dir():
        raise StoreNotFoundError(f"No store at {t.display}: {str(path)!r} is not a directory.")
    removed = _recover_beside(path, t.display, always=True)
    with target_lock(path, t.display):
        s = WriteSession(t, open_store(t.raw, mode="a"), "a", "repair", None, locked=True)
        s.removed = removed
        yield s


@contextlib.contextmanager
def claimed(zs: ZStore, kind: str) -> Iterator[Transaction]:
    """A further write to a store a session opened, under a claim of its own (the journal
    transaction, undone on an exception): a repair's re-consolidation, the Zarr v3 metadata of a
    store migrated in place written again after an append or a repair (``migrate.keep_v3_in_step``)."""
    from .repair import undo

    check_mode("a", kind)
    with begun(zs, kind, undo=undo) as txn:
        yield txn


def _recover_beside(path: Path, display: str, *, always: bool) -> list[str]:
    """What killed writers left beside the local target ``path`` (``io.atomic.recover_swaps``: a
    store renamed aside put back, temporary trees and zips removed), by name; ``always``: recover
    even where nothing is seen (else only where a name of theirs, or a dead writer's lock, is)."""
    from ..io.atomic import leftovers_beside

    left = [q.name for q in leftovers_beside(path)]
    if always or left or path.with_name(f".{path.name}.zstrings-lock").exists():
        recover_swaps(path, display)  # (a killed writer's lock file goes too: the lock is taken, then removed)
    return left


def local_folder(zs: ZStore) -> Path | None:
    """The local folder a store is (a zarr-python ``LocalStore`` at its prefix), or None."""
    if isinstance(zs.store, LocalStore):
        return Path(zs.store.root) / zs.prefix if zs.prefix else Path(zs.store.root)
    return None


def local_place(zs: ZStore) -> Path | None:
    """The local folder or zip file a store is, links resolved (None: not local)."""
    path = local_folder(zs)
    where = getattr(zs.store, "path", None) if path is None else path
    return Path(os.path.realpath(where)) if where is not None else None


@contextlib.contextmanager
def _group(t: Target, group: str, mode: str) -> Iterator[WriteSession]:
    """A Zarr v3 group written into the store at ``t`` (a new store where there is none)."""
    if t.kind not in ("dir", "zip"):
        zs = _opened(t, "w", None)
        refuse_v2_root(zs, group)
        yield WriteSession(t, zs, mode, "new" if mode == "w-" else "replace", None)
        return
    assert t.path is not None
    into = t.path.exists()
    found = not_replaceable(t.path, t.kind) if into else None
    if found is not None:  # (else it would make a folder of other files a store's root)
        raise TargetExistsError(f"Cannot write group {group!r} into {t.display}: it is {found}. Write the "
                                "group into a store, or choose another target.")
    if into and t.kind == "zip":  # (a zip is only ever replaced whole: no writer changes one in place)
        raise TargetExistsError(
            f"Cannot write group {group!r} into the zip store {t.display}: a zip is written whole, never "
            "changed in place. Write the whole tree at once (a DataTree, or a dict of groups), or write the "
            "group into a folder store and zip that.")
    kind = "new" if mode == "w-" else "replace"
    with local_commit(t.path, mode="a" if into else mode, display=t.display, zip_file=t.kind == "zip") as tmp:
        if tmp is None:  # no hard links here: written into the target itself, metadata last
            zs = open_store(t.raw, mode="a")
        elif t.kind == "zip":
            zs = ZStore(_local_store(tmp, True), display=t.display)
        else:
            zs = ZStore(CloneStore(tmp, read_only=False), display=t.display)
        try:
            refuse_v2_root(zs, group)
            if mode == "w-" and zs.list_dir(group.strip("/")):
                raise ZStringsError(f"Cannot write group {group!r} to {t.display}: it exists and mode='w-' never "
                                    "overwrites. Pass mode='w' to replace it.")
            yield WriteSession(t, zs, mode, kind, None)
        finally:
            if t.kind == "zip" and tmp is not None:
                zs.store.close()


def _region(t: Target) -> WriteSession:
    """Chunks written into the store that is there, its metadata unchanged: no lock and no claim
    (many workers write disjoint slabs at once), refused while another writer holds a live claim
    or a local folder's writer lock."""
    if t.kind == "zip":
        raise UnsupportedError(f"Cannot write a region into the zip store {t.display}: {RULES['zip'].why}")
    zs = _opened(t, "a", "to_nczarr" if t.kind != "icechunk" else None)
    if t.kind != "icechunk":
        state = inspect_store(zs)
        j = state.journal
        if j is not None and not (state.writer_gone or state.lease_expired):
            raise ConcurrentWriteError(
                f"Cannot write a region of {zs.display}: another writer ({describe_writer(j.writer)}) is writing it "
                f"(its claim {JOURNAL!r}). Nothing was written. Wait for that write to end and write again.")
    if t.kind == "dir" and t.path is not None and lock_held(Path(os.path.abspath(t.path))):
        # a whole-store write or an append holding a local folder's lock would swap its store over
        # the chunks written meanwhile
        raise ConcurrentWriteError(
            f"Cannot write a region of {t.display}: another write (a whole-store write or an append) holds "
            "its writer lock. Nothing was written. Wait for that write to end and write again.")
    return WriteSession(t, zs, "a", "region", None)


def _opened(t: Target, mode: str, writer: Any) -> ZStore:
    """The target itself opened for writing (never a local swap)."""
    if t.kind in ("dir", "zip"):
        _local_options(t)
        assert t.path is not None
        if t.kind == "dir":
            return ZStore(LocalStore(t.path, read_only=False), display=t.display, modes=t.modes)
    so = dict(t.storage_options) if t.storage_options else None
    return open_store(t.raw, mode=mode, storage_options=so, writer=writer)


def _local_options(t: Target) -> None:
    """storage_options given for a local target: refused with ``open_store``'s message."""
    if t.storage_options:
        open_store(t.raw, mode="r", storage_options=dict(t.storage_options))


def _local_store(path: Path, is_zip: bool) -> Any:
    """A writable store at a local swap's sibling."""
    if is_zip:
        return sync(ZipStore.open(path, mode="w", read_only=False))
    return LocalStore(path, read_only=False)


def refuse_v2_root(zs: ZStore, group: str | None) -> None:
    """A Zarr v3 group written into a Zarr v2 / NCZarr store is refused before anything is written:
    every reader of that store (its root ``.zgroup``) would miss a Zarr v3 group inside it."""
    if group is None:
        return
    names = set(zs.list_dir(""))
    if "zarr.json" not in names and names & {".zgroup", ".zarray", ".nczarr"}:
        raise UnsupportedError(
            f"Cannot write Zarr v3 group {group!r} into {zs.display}: it is a Zarr v2 / NCZarr store, whose "
            "readers (engine='zstrings', netcdf-c, zarr-python) would not see a Zarr v3 group inside it. Migrate "
            "the store to Zarr v3 first (xr_zstrings.migrate(target): netcdf-c keeps reading it), or write "
            "the group to another store.")


def clear(zs: ZStore) -> None:
    """Delete every object of the store (an icechunk session's ``mode="w"``): root metadata first."""
    from ..io.store_errors import mapped_errors

    if not zs.store.supports_deletes:
        return
    lead = zs.full_key("").rstrip("/")

    async def run() -> None:
        keys = [k async for k in zs.store.list_prefix(lead) if not lead or k.startswith(lead + "/")]
        rel = [k[len(lead):].lstrip("/") if lead else k for k in keys]
        first = [k for k, r in zip(keys, rel, strict=True) if r in (".zgroup", ".zattrs", ".zmetadata", "zarr.json")]
        for k in sorted(first, key=lambda k: not k.endswith(".zattrs")):  # .zattrs before .zgroup
            await zs.store.delete(k)
        for k in keys:
            if k not in first:
                await zs.store.delete(k)

    with mapped_errors(f"Could not write to {zs.display}", zs.probe):
        sync(run())


@contextlib.contextmanager
def netcdf_file(path: str | os.PathLike[str] | Target, mode: str = "w-") -> Iterator[Path]:
    """A netCDF-4 file target: yields the sibling to write, renamed over ``path`` when complete (a
    failure leaves no file and the old one untouched); ``"w-"`` refuses an existing file, ``"w"``
    replaces only a netCDF file."""
    if mode not in ("w-", "w"):
        raise ZStringsError(f"Invalid mode={mode!r} for a netCDF-4 target: expected 'w-' or 'w'.")
    t = path if isinstance(path, Target) else classify(path)
    if t.kind not in ("dir", "zip") or t.path is None:
        raise UnsupportedError(f"Cannot write the netCDF-4 file {t.display}: netCDF-4 files are written locally only.")
    with local_commit(t.path, mode=mode, display=t.display, kind="netcdf") as tmp:
        assert tmp is not None
        yield tmp


def target_refusal(target: Any, *, storage_options: Mapping[str, Any] | None = None) -> TargetRoot | None:
    """What is at the target of another library's write (xarray's ``to_zarr``, through
    ``ds.zstrings.to_zarr``), by this package's writers' rule (``io.atomic.target_root``): looked
    at, never opened for writing. None for what cannot be looked into."""
    classify(target, storage_options)  # (the one classification; target_root looks at what it names)
    return target_root(target, storage_options=storage_options)
