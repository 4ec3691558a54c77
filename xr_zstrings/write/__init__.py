"""The writers: ``plan`` (what each variable becomes on disk) -> ``dimensions`` and ``chunks`` ->
``append`` -> ``nczarr`` (``to_nczarr``: NCZarr 2 / Zarr v2) and ``zarr3`` (``to_zarr_v3``) ->
``convert`` (whole netCDF-4 files).
"""
