"""Stores: ``store`` (paths, URLs, zip, S3: the only module that reads or writes bytes) and
``atomic`` (how every writer commits: nothing a reader can open until the data is complete).
"""
