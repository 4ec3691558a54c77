"""Pure metadata (no I/O, no xarray or zarr): the JSON objects of a node -> frozen dataclasses.

``array``: the ``ArrayMeta`` interface both Zarr versions' array metadata implement; ``nczarr``:
Zarr v2 and every NCZarr generation (read side); ``nczarr_json``: the JSON and attribute typing
netcdf-c writes (write side); ``zarr3``: ``zarr.json``.
"""
