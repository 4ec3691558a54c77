"""xarray-free reading, one concept a module, imports flowing down this list:

``paths`` (node paths and keys), ``options`` (``ReadOptions``), ``decode`` (how a variable's stored
values become what the read returns, chosen once per variable); ``tree`` (``open_tree``: every group
and array's metadata) walking ``tree_v2`` (Zarr v2, every NCZarr generation) or ``tree_v3``;
``chunked`` (reading regions of one array) with ``chunked_v2`` / ``chunked_v3`` (each version's chunk
bytes); ``lazy`` (``LazyArray``: indexing, string decoding); ``variables`` (``group_contents``: one
group as variables); ``arrow`` (``read_arrow``, and the Arrow assembly ``chunked`` and ``lazy``
import when they read into Arrow). The decode pool is ``xr_zstrings.threads``.
"""
