"""Pure string layouts (numpy/pyarrow, no xarray or zarr): stored bytes <-> Python/numpy strings.

One module a job: ``kernels`` loads the optional compiled kernels (``_kernels.c``) or says why
not; ``dtypes`` the string kinds a read returns (``string_dtype``) and conversions between them
(UTF-32, objects); ``policy`` the ``utf8_errors``/``on_overflow`` policies and the context errors
name values in (context variables); ``fixed`` fixed-width UTF-8 (NC_STRING ``|Sn``); ``nc_char``
NC_CHAR characters and ``_Encoding``; ``vlen`` variable-length framing (vlen-utf8, ``zarrs.vlen``,
Arrow offsets); ``arrow`` stored layouts straight into Arrow arrays and Arrow into StringDType
(``arrow_to_stringdtype``); ``kind`` is this text (``text_kind``, every writer's rule).
"""
