"""Stores, the only modules that read or write bytes.

``store`` (``open_store``: a path, URL, zip, S3 URL or zarr-python Store as one ``ZStore``) over
``targets`` (where a path or URL points, before anything is opened), ``zstore`` (the ``ZStore``
wrapper every read and write goes through) over ``conditional`` (its create-only and compare-and-swap
writes, one class a kind of store), ``zip`` (zip archives, local and in object storage),
``s3`` (netcdf-c's S3 URLs, ``storage_options``, obstore clients) and ``store_errors`` (store
exceptions as ours); ``runtime`` (obstore's and icechunk's runtimes: refused in forked children, let
finish before exit); ``atomic`` (local writes: beside the target and swapped in, the writer lock,
what a killed writer left); ``commit`` (the commit protocol of writes in place: journal, conditional
writes, ``.zmetadata`` as the commit point, recovery) over ``journal`` (the write journal, who wrote
it, and what a store holds: ``inspect_store``) and ``consolidated`` (its read half: version
records, the placeholder root, what a reader is served); ``drift`` (what another tool changed without
keeping our metadata in step); and ``redact`` (no URL secret in any message, and no credentials in
URLs at all).
"""
