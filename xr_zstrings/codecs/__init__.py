"""Chunk pipelines: one chunk's stored bytes <-> a numpy array.

``bounded``: decompression that refuses oversized output (both pipelines); ``v2``: the numcodecs
pipeline and netcdf-c's shuffle; ``v3``: the Zarr v3 pipeline, built from ``registry`` (codec name
-> class: ``array_array``, ``array_bytes``, ``zarrs``, ``sharding``, ``bytes_bytes``, with
``zarr_python`` running zarr-python's codecs and ``chunk`` the spec they are built for);
``vocabulary``: one table of each codec's names (numcodecs, Zarr v3, netCDF4, what netcdf-c
reads); ``encoding``: a store's codecs as the encodings ``to_zarr``/``to_netcdf`` take, and an
encoding's codecs in one format's vocabulary (plain mappings: nothing here imports the dataset layer).
"""
