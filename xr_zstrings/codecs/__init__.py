"""Chunk pipelines: one chunk's stored bytes <-> a numpy array.

``bounded``: decompression that refuses oversized output (both pipelines); ``v2``: the numcodecs
pipeline and netcdf-c's shuffle; ``v3``: the Zarr v3 pipeline, built from ``registry`` (codec name
-> class: ``array_array``, ``array_bytes``, ``zarrs``, ``sharding``, ``bytes_bytes``, with
``zarr_python`` running zarr-python's codecs and ``chunk`` the spec they are built for);
``encoding``: a store's codecs as the encodings xarray's writers take.
"""
