"""Chunk pipelines: one chunk's stored bytes <-> a numpy array.

``v2``: numcodecs compressors/filters, netcdf-c's shuffle and bounded decompression; ``v3``: the
Zarr v3 codec chain and sharding; ``encoding``: a store's codecs as the encodings xarray's writers take.
"""
