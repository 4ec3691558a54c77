"""xarray-free reading: ``tree`` (a store's groups, dimensions, variables, chunked and lazily
indexed arrays, ``read_arrow``).
"""
