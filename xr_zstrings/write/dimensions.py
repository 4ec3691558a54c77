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
            a.dimrefs = tuple(_declare(declared, g, a, axis, d, n, unlimited)
                              for axis, (d, n) in enumerate(zip(a.dims, a.shape, strict=True)))
    return declared


def _declare(declared: dict[str, dict[str, list[Any]]], g: str, a: _Array, axis: int, d: str, n: int,
             unlimited: Mapping[str, set[str]]) -> str:
    """The reference of array ``a``'s dimension ``d`` (size ``n``) in group ``g``, declared where it
    belongs if no group declares it yet; a clash with the declared size is refused."""
    where = _hinted_group(declared, g, a.ref_hints[axis], d, n)
    if where is None:
        where = _scoped_group(declared, g, d, n)
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
    return _ref(where, d)


def _hinted_group(declared: Mapping[str, Mapping[str, list[Any]]], g: str, hint: str | None, d: str,
                  n: int) -> str | None:
    """The group a stored ``dimension_references`` entry names, when it is consistent (same name, an
    ancestor of ``g``, the size it declares or none yet); None otherwise."""
    if not hint:
        return None
    hg, _, hn = ("/" + hint.strip("/")).rpartition("/")
    hg = hg or "/"
    if hn != d or hg not in declared or hg not in _ancestors(g):
        return None
    got = declared[hg].get(d)
    return hg if got is None or got[0] == n else None


def _scoped_group(declared: Mapping[str, Mapping[str, list[Any]]], g: str, d: str, n: int) -> str:
    """netCDF's scoping: the nearest group declaring ``d`` when the sizes agree, else ``g`` itself
    (shadowing); ``g`` when no group declares it."""
    for anc in _ancestors(g):
        got = declared[anc].get(d)
        if got is not None:
            return anc if got[0] == n else g
    return g
