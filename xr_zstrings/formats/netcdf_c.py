"""What netcdf-c writes and reads: the NCZarr layouts, one row each, and the netcdf-c releases.

Two tables that every part asks instead of spelling versions itself:

* ``LAYOUTS``: each way netcdf-c has laid out NCZarr metadata (a *generation*): where its keys live
  (superblock, group listing, array information, attribute types), what they are called, how NC_CHAR's
  dtype and a scalar are marked, and the label the reader reports. The reader finds keys with it
  (``formats.nczarr``), the writers write it (``write.plan``), appends extend a store in its own layout.
* ``NETCDF_C``: the netcdf-c releases that read NCZarr alike (one row of ``zstrings check`` each):
  the layout ``to_nczarr(netcdf_c=...)`` writes for them, the layouts they read, what they cannot hold
  (unlimited dimensions, NC_STRING, scalars), what they do with what they cannot read, and the peers
  the tests read with (the netCDF4 wheel bundling each release, tests/peer_venvs.py).

A new netcdf-c target is one row here (plus its tests): the writers, the reader, ``zstrings check``
and the tests' version matrix follow. The facts are measured (tests/interop/test_netcdf_c_versions.py
reads every target with every release; docs/netcdf-c-versions.md shows the matrix).

Standard library only, and nothing of the package but ``errors`` (also standard library only):
tests/peer_venvs.py imports it with the system Python, before any environment exists.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import UnsupportedError, ZStringsError

__all__ = [
    "CURRENT",
    "DEFAULT_LAYOUT",
    "DEFAULT_NETCDF_C",
    "LAYOUTS",
    "NCZARR_VERSION",
    "NETCDF_C",
    "SCALAR_DIM",
    "ZARR_V2",
    "ZARR_V3",
    "NCZarrLayout",
    "NetcdfC",
    "Place",
    "examples_text",
    "is_nczarr",
    "layout_named",
    "layout_of_generation",
    "netcdf_c_for",
    "peer_wheels",
    "places",
    "reader_of",
]

#: (object name, key inside it; None: the whole object is the information)
Place = tuple[str, "str | None"]

#: the NCZarr version the 2.x layouts write in their superblock
NCZARR_VERSION = "2.0.0"
#: the generation labels of stores with no NCZarr metadata (``GroupMeta.generation``); the NCZarr
#: layouts' labels are their rows' ``generation``
ZARR_V2 = "zarr-v2"
ZARR_V3 = "zarr-v3"
#: the dimension a scalar is put on (a one-element array) for a netcdf-c that cannot read scalars
SCALAR_DIM = "scalar1"


@dataclass(frozen=True)
class NCZarrLayout:
    """One NCZarr metadata layout (a *generation*): where netcdf-c keeps each piece of metadata.

    ``name`` is the ``to_nczarr(netcdf_c=...)`` value that writes it (the oldest netcdf-c that reads
    it), or a label for layouts only read. ``generation`` is what the reader reports
    (``GroupMeta.generation``, ``encoding["zstrings_format"]``); ``title`` names it in words.
    """

    name: str
    generation: str
    title: str
    superblock: tuple[Place, ...]
    group: tuple[Place, ...]
    array: tuple[Place, ...]
    attr: tuple[Place, ...]
    #: the group listing's keys (dimensions, arrays) and the array information's dimension key
    dims_key: str = "dims"
    arrays_key: str = "vars"
    dimrefs_key: str = "dimrefs"
    #: NC_CHAR's dtype (array and attribute): ``"<U1"`` holds one byte per element despite the name
    char_dtype: str = ">S1"
    #: what marks a scalar in the array information (beside the dimension references); None: no writer
    scalar: Mapping[str, Any] | None = None
    #: the layout a writer extending such a store writes (None: such a store cannot be extended)
    writes_as: str | None = None

    @property
    def writable(self) -> bool:
        """``to_nczarr`` writes this layout (a ``netcdf_c`` target)."""
        return self.writes_as == self.name

    @property
    def in_zattrs(self) -> bool:
        """The NCZarr objects live in ``.zattrs`` (typed ``|J0`` there, as netcdf-c 4.10 writes)."""
        return self.group[0][0] == ".zattrs"

    def key(self, what: str) -> str:
        """The key of ``what`` ("superblock", "group", "array", "attr") in this layout's objects."""
        key = getattr(self, what)[0][1]
        if key is None:
            raise ValueError(f"NCZarr layout {self.name}: {what} is a whole object, not a key")
        return str(key)

    def obj(self, what: str) -> str:
        """The object holding ``what`` ("superblock", "group", "array", "attr")."""
        return str(getattr(self, what)[0][0])

    def array_info(self, dimrefs: list[str], scalar: bool) -> dict[str, Any]:
        """The array information this layout writes (``_nczarr_array``) for an array with these
        dimension references, or a scalar."""
        assert self.scalar is not None, self.name
        return {self.dimrefs_key: dimrefs, **(self.scalar if scalar else {"storage": "chunked"})}


#: netcdf-c 4.9.4's and 4.10's own layout: every NCZarr key in .zattrs
ZATTRS = NCZarrLayout(
    "4.9.4", "nczarr-2 (.zattrs, netcdf-c >= 4.9.3)", "netcdf-c 4.10's layout (metadata in .zattrs)",
    superblock=((".zattrs", "_nczarr_superblock"),), group=((".zattrs", "_nczarr_group"),),
    array=((".zattrs", "_nczarr_array"),), attr=((".zattrs", "_nczarr_attr"),),
    dims_key="dimensions", arrays_key="arrays", dimrefs_key="dimension_references",
    scalar={"scalar": 1, "storage": "chunked"}, writes_as="4.9.4",
)
#: netcdf-c 4.9.1's: ``_nczarr_*`` keys inside .zgroup/.zarray. The scalar marker carries both
#: forms: netcdf-c 4.9.1-4.9.3 need "storage": "scalar", 4.9.3's last snapshots and later "scalar": 1
#: (each segfaults on the other's form alone)
ZGROUP = NCZarrLayout(
    "4.9.1", "nczarr-2 (.zgroup, netcdf-c 4.9.1-4.9.2)", "netcdf-c 4.9.1's layout (keys in .zgroup/.zarray)",
    superblock=((".zgroup", "_nczarr_superblock"),), group=((".zgroup", "_nczarr_group"),),
    array=((".zarray", "_nczarr_array"),), attr=((".zattrs", "_nczarr_attr"),),
    scalar={"scalar": 1, "storage": "scalar"}, writes_as="4.9.1",
)
#: netcdf-c 4.8.1-4.9.0's: ``_NCZARR_*`` keys, NC_CHAR typed ``<U1`` (one byte per element)
UPPER = NCZarrLayout(
    "4.9.0", "nczarr-2 (uppercase, netcdf-c 4.8.1-4.9.0)", "netcdf-c 4.9.0's layout (_NCZARR_* keys)",
    superblock=((".zgroup", "_NCZARR_SUPERBLOCK"),),
    group=((".zgroup", "_NCZARR_GROUP"), (".zattrs", "_NCZARR_GROUP")),
    array=((".zarray", "_NCZARR_ARRAY"), (".zattrs", "_NCZARR_ARRAY")), attr=((".zattrs", "_NCZARR_ATTR"),),
    char_dtype="<U1", scalar={"storage": "scalar"}, writes_as="4.9.0",
)
#: uppercase keys with the superblock in .zattrs: read (and extended) as netcdf-c 4.9.0's layout
UPPER_ZATTRS = NCZarrLayout(
    "4.9.0 (.zattrs)", "nczarr-2 (uppercase in .zattrs)", "netcdf-c 4.9.0's layout (_NCZARR_* keys)",
    superblock=((".zattrs", "_NCZARR_SUPERBLOCK"),), group=(), array=(), attr=(),
    char_dtype="<U1", writes_as="4.9.0",
)
#: NCZarr 1.0 (netcdf-c 4.8.0): separate .ncz* objects; read, never written or extended
V1 = NCZarrLayout(
    "1.0", "nczarr-1.0 (.nczarr objects, netcdf-c 4.8.0)", "NCZarr 1.0",
    superblock=((".nczarr", None),), group=((".nczgroup", None),),
    array=((".nczarray", None), (".nczvar", None)),
    attr=((".nczattr", None), (".nczattrs", None)),  # .nczattrs: the document's spelling
    char_dtype="<U1",
)

#: every layout, in the order the reader looks for their keys (newest first)
LAYOUTS: tuple[NCZarrLayout, ...] = (ZATTRS, ZGROUP, UPPER, UPPER_ZATTRS, V1)


def places(what: str) -> tuple[Place, ...]:
    """Where the reader looks for ``what`` ("superblock", "group", "array", "attr"), in order."""
    return tuple(dict.fromkeys(p for layout in LAYOUTS for p in getattr(layout, what)))


def layout_named(name: str) -> NCZarrLayout:
    """The layout ``name`` ("4.9.0", "4.9.1", "4.9.4", ...)."""
    for layout in LAYOUTS:
        if layout.name == name:
            return layout
    raise KeyError(name)


def layout_of_generation(generation: str) -> NCZarrLayout | None:
    """The layout of a parsed store (``GroupMeta.generation``), None for pure Zarr."""
    for layout in LAYOUTS:
        if layout.generation == generation:
            return layout
    return None


def is_nczarr(generation: str) -> bool:
    """Whether a parsed store's generation is one of the NCZarr layouts (not pure Zarr v2 or v3)."""
    return layout_of_generation(generation) is not None


def layout_at(place: str) -> NCZarrLayout:
    """The layout whose group or array information is at ``place`` (``".zarray:_nczarr_array"``,
    ``".nczgroup"``): a node's generation when the store has no superblock there."""
    for layout in LAYOUTS:
        for obj, key in layout.group + layout.array:
            if place == (obj if key is None else f"{obj}:{key}"):
                return layout
    raise KeyError(place)


# ---------------------------------------------------------------------------------------------
# netcdf-c releases
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NetcdfC:
    """netcdf-c releases that read NCZarr alike: one row of ``zstrings check``, one target of
    ``to_nczarr(netcdf_c=...)``.

    ``cannot_hold``: what such a netcdf-c does with a store holding what it cannot read (unlimited
    dimensions, NC_STRING or scalars; ``{unlimited}`` names the store's unlimited dimensions).
    ``scalar_marker``: the (key, value) of the array information it needs on a scalar.
    ``peers``: the readers the tests use for the row: (a netCDF4 wheel version read in a side venv,
    ``"current"`` for the project's own netCDF4 or ``"ncdump"`` for Debian's netcdf-bin, the
    netcdf-c version it holds).
    """

    label: str
    first: str
    writes: NCZarrLayout
    reads: tuple[NCZarrLayout, ...]
    unlimited: bool
    nc_string: bool
    scalar_marker: tuple[str, Any] | None
    #: string-list attributes (NC_STRING): this netcdf-c opens a store holding one
    string_lists: bool
    #: what it does with a layout it does not read; with what it cannot hold
    refuses: str
    crashes: str
    cannot_hold: str = ""
    #: a version of the row users have (Debian 12's, Ubuntu 24.04's, the wheel's): the tests' target
    example: str = ""
    #: who ships ``example`` (help texts: "4.9.0 for Debian 12")
    shipped_by: str = ""
    #: (a release of the row, the deepest group nesting it opens, the releases that read deeper):
    #: measured in tests/interop/test_netcdf_c_versions.py
    max_depth: tuple[str, int, str] | None = None
    peers: tuple[tuple[str, str], ...] = field(default=())

    @property
    def version(self) -> tuple[int, int, int]:
        return _parse(self.first) or (0, 0, 0)

    def reads_layout(self, layout: NCZarrLayout) -> bool:
        """Whether it opens a store in ``layout`` (an extendable layout counts as the one it is written as)."""
        own = layout_named(layout.writes_as) if layout.writes_as else layout
        return own in self.reads


NETCDF_C: tuple[NetcdfC, ...] = (
    NetcdfC("4.9.0", "4.9.0", writes=UPPER, reads=(UPPER, V1), unlimited=False, nc_string=False,
            scalar_marker=None, string_lists=False, refuses="the process aborts", crashes="the process aborts",
            cannot_hold="scalars, unlimited dimensions or NC_STRING: the process aborts",
            example="4.9.0", shipped_by="Debian 12", peers=(("1.6.2", "4.9.0"), ("ncdump", "4.9.0"))),
    NetcdfC("4.9.1-4.9.3", "4.9.1", writes=ZGROUP, reads=(ZGROUP,), unlimited=False, nc_string=True,
            scalar_marker=("storage", "scalar"), string_lists=True, refuses="'NetCDF: NCZarr error'",
            crashes="segmentation fault",
            cannot_hold="unlimited dimensions {unlimited}: segmentation fault (4.9.3's last development "
                        "snapshots read them)",
            example="4.9.2", shipped_by="Ubuntu 24.04",
            peers=(("1.6.3", "4.9.1"), ("1.6.5", "4.9.3-development"),
                   ("1.7.1.post1", "4.9.3-development (later snapshot)"))),
    NetcdfC(">= 4.9.4", "4.9.4", writes=ZATTRS, reads=(ZGROUP, ZATTRS), unlimited=True, nc_string=True,
            scalar_marker=("scalar", 1), string_lists=True, refuses="'NetCDF: NCZarr error'",
            crashes="segmentation fault", example="4.10", shipped_by="the netCDF4 wheel",
            # from 31 levels on 4.10.1 aborts the process (malloc(): corrupted top size)
            max_depth=("4.10.1", 30, "4.9.1-4.9.4"),
            peers=(("1.7.2", "4.9.4-development"), ("current", "4.10.1"))),
)

#: the current netcdf-c (the netCDF4 wheel's): the row messages name when they say "netcdf-c reads"
CURRENT = NETCDF_C[-1]

#: ``to_nczarr``'s default target: the layout every netcdf-c from 4.9.1 through 4.10 reads
DEFAULT_NETCDF_C = "4.9.1"


def _parse(version: str) -> tuple[int, int, int] | None:
    m = re.fullmatch(r"\s*(\d+)\.(\d+)(?:\.(\d+))?(?:[-.+]?\w*)?\s*", str(version))
    return (int(m[1]), int(m[2]), int(m[3] or 0)) if m else None


def netcdf_c_for(version: str) -> NetcdfC:
    """The row of a reader's netcdf-c version (``"4.9.2"``, ``"4.10"``, ``"4.9.3-development"``)."""
    v = _parse(version)
    if v is None:
        raise ZStringsError(f"Invalid netcdf_c={version!r}: expected the reader's netcdf-c version, such as "
                            "'4.9.0', '4.9.2' (Ubuntu 24.04) or '4.10'.")
    if v < NETCDF_C[0].version:
        raise UnsupportedError(
            f"Cannot write for netcdf-c {version}: netcdf-c before {NETCDF_C[0].first} reads NCZarr 1.0 (separate "
            ".ncz* objects), which to_nczarr does not write. Upgrade the reader, or write format='zarr2'.")
    return [r for r in NETCDF_C if r.version <= v][-1]


#: the layout ``to_nczarr`` writes by default
DEFAULT_LAYOUT = netcdf_c_for(DEFAULT_NETCDF_C).writes


def reader_of(layout: NCZarrLayout) -> NetcdfC:
    """The netcdf-c row whose own layout ``layout`` is written as (whose limits its writes keep)."""
    name = layout.writes_as or layout.name
    return next(r for r in NETCDF_C if r.writes.name == name)


def peer_wheels() -> dict[str, str]:
    """netCDF4 wheel -> the netcdf-c it bundles, for every row's side-venv peer."""
    return {peer: version for r in NETCDF_C for peer, version in r.peers if peer not in ("current", "ncdump")}


def scalar_marker_text(reader: NetcdfC) -> str:
    """``"scalar": 1`` as the message spells a reader's scalar marker."""
    assert reader.scalar_marker is not None
    key, value = reader.scalar_marker
    return f"{json.dumps(key)}: {json.dumps(value)}"


def examples_text(last: str = " or ") -> str:
    """The rows' examples as help texts give them: "4.9.0 (Debian 12), 4.9.2 (Ubuntu 24.04) or 4.10"."""
    named = [f"{r.example} ({r.shipped_by})" if r is not CURRENT else r.example for r in NETCDF_C]
    return ", ".join(named[:-1]) + last + named[-1]
