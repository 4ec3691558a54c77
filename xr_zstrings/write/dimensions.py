"""netCDF dimension scoping: where each dimension is declared and every array's full references.

A variable's dimension is the nearest declaration of that name in its group or an ancestor when the
sizes agree; otherwise it is declared (shadowing) in the variable's own group.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import DimensionError
from .plan import _Array, _what


def _ancestors(path: str) -> list[str]:
    """``/a/b`` -> ``["/a/b", "/a", "/"]`` (nearest first)."""
    out = [path]
    while path != "/":
        path = path.rsplit("/", 1)[0] or "/"
        out.append(path)
    return out


def _ref(group: str, name: str) -> str:
    return f"{group.rstrip('/')}/{name}"


def _resolve_dimensions(
    groups: dict[str, list[_Array]], unlimited: Mapping[str, set[str]],
    existing: Mapping[str, Mapping[str, list[Any]]] | None = None,
) -> dict[str, dict[str, list[Any]]]:
    """Declare each dimension in the group where it belongs and give every array its references.

    A variable's dimension is the nearest declaration of that name in its group or an ancestor when the
    sizes agree (netCDF's scoping); otherwise it is declared in the variable's own group (shadowing).
    ``encoding["dimension_references"]`` from a store we read is honoured when it is consistent.
    ``existing``: the dimensions a store already declares per group (``[size, unlimited]``), when
    variables are added to it.
    """
    declared: dict[str, dict[str, list[Any]]] = {g: {k: list(v) for k, v in (existing or {}).get(g, {}).items()}
                                                 for g in {*groups, *(existing or {})}}
    for g in sorted(groups, key=lambda p: (p.count("/") if p != "/" else 0, p)):
        for a in groups[g]:
            refs = []
            shape = a.shape
            for axis, (d, n) in enumerate(zip(a.dims, shape, strict=True)):
                where: str | None = None
                hint = a.ref_hints[axis]
                if hint:
                    hg, _, hn = ("/" + hint.strip("/")).rpartition("/")
                    hg = hg or "/"
                    if hn == d and hg in declared and hg in _ancestors(g):
                        got = declared[hg].get(d)
                        if got is None or got[0] == n:
                            where = hg
                if where is None:
                    for anc in _ancestors(g):
                        got = declared[anc].get(d)
                        if got is not None:
                            where = anc if got[0] == n else g
                            break
                    else:
                        where = g
                got = declared[where].get(d)
                if got is None:
                    declared[where][d] = [n, d in unlimited.get(where, set()) or d in a.unlimited]
                elif got[0] != n:
                    raise DimensionError(
                        f"Cannot write {_what(g, a.name)}: its dimension {d!r} has size {n} but group "
                        f"{where!r} already declares {d!r} with size {got[0]}. For NC_CHAR string-length "
                        "dimensions set encoding['char_dim_name'] to a distinct name; otherwise make the "
                        "sizes agree."
                    )
                refs.append(_ref(where, d))
            a.dimrefs = tuple(refs)
    return declared
