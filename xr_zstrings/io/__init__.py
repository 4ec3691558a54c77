"""Stores, the only modules that read or write bytes: ``store`` (``open_store``: a path, URL, zip,
S3 URL or zarr-python Store as one ``ZStore``) over ``targets`` (paths and URLs), ``zstore`` (the
``ZStore`` wrapper), ``zip``, ``s3`` and ``store_errors`` (store exceptions as ours); ``atomic``
(how every writer commits: nothing a reader can open until the data is complete); and ``redact``
(no URL secret in any message, and no credentials in URLs at all).
"""
