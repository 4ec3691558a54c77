"""Pure string layouts (numpy/pyarrow, no xarray or zarr): stored bytes <-> Python/numpy strings.

``fixed``: ``|Sn``, NC_CHAR, UTF-32, objects and the UTF-8 policies; ``vlen``: vlen-utf8,
``zarrs.vlen`` and Arrow offsets; ``kind``: is this text (``text_kind``, every writer's rule); ``_kernels``: the optional compiled kernels (``_kernels.c``).
"""
