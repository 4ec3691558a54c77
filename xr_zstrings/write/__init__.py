"""The writers, each opening its target through ``session`` (the one place that classifies a target,
checks ``mode``, locks, recovers and picks the commit): ``plan`` (what each variable becomes on
disk) -> ``dimensions``, ``chunks`` (encode and write blocks) and ``v2_text`` (appended text in a pure Zarr v2 store's own string layouts) ->
``append`` (append along a dimension, add variables) -> ``nczarr`` (``to_nczarr``: NCZarr 2 / Zarr
v2) and ``zarr3`` (``to_zarr_v3``; its plan ``plan_v3``, its appends and added variables
``append_v3``) -> ``convert`` (whole netCDF-4 files); ``migrate`` (Zarr v2 /
NCZarr as Zarr v3, chunks unchanged) and ``repair`` (completing or undoing what a killed writer left,
and the undo every writer's transaction runs first); ``encoding`` (``with_zarr_encoding``: a Dataset's
encodings in one Zarr format's codecs, for ``to_zarr``).
Beside them: ``region`` (``region=``: chunks into the arrays a store holds, no lock) and
``deferred`` (``compute=False``: a dask ``Delayed`` that writes and commits when computed).
"""

from typing import Literal

__all__ = ["NewMode", "WriteMode"]

#: the modes of the writers that only write a whole store (``migrate``): ``"w-"`` creates and
#: refuses a non-empty target, ``"w"`` replaces the target whole
NewMode = Literal["w-", "w"]
#: every other writer's ``mode`` (``to_nczarr``, ``to_zarr_v2``, ``to_zarr_v3``, ``convert``, the
#: accessor): ``NewMode``'s and ``"a"``, which writes into the store there (appends, adds variables)
WriteMode = Literal[NewMode, "a"]
