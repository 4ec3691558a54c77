"""One obstore S3Store per configuration, reused across opens and writes (io/s3.py's cache): the
same options share it, anything it is built from (options, the AWS_* environment) gives a new one
(a forked child builds its own: tests/io/test_obstore_runtime.py)."""

from __future__ import annotations

import pytest
from s3_server import S3Server

from xr_zstrings.io import s3 as s3mod
from xr_zstrings.io.s3 import parse_s3_url, s3_store
from xr_zstrings.io.store import open_store

BUCKET = "zstrings-cache"


def _obstore_of(url: str, options: dict) -> object:
    zstore = open_store(url, storage_options=options)
    return zstore.store.store  # zarr-python's ObjectStore around the obstore S3Store


def test_same_options_share_one_store_and_others_do_not(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    s3.bucket(BUCKET)
    url = f"s3://{BUCKET}/a.zarr"
    first = _obstore_of(url, s3.options())
    assert _obstore_of(url, s3.options()) is first
    assert _obstore_of(f"s3://{BUCKET}/other/prefix.zarr", s3.options()) is first  # one store per bucket
    assert _obstore_of(url, s3.options(timeout=7)) is not first
    assert _obstore_of(url, {**s3.options(), "secret": "another"}) is not first
    monkeypatch.setenv("AWS_REQUEST_PAYER", "requester")  # read by obstore when it builds a store
    assert _obstore_of(url, s3.options()) is not first


def test_nested_options_are_cached_and_unhashable_ones_are_not(s3: S3Server) -> None:
    loc = parse_s3_url(f"s3://{BUCKET}/a.zarr")
    options = {**s3.options(), "client_options": {"allow_http": True, "default_headers": {"x-a": "1"}}}
    assert s3_store(loc, options) is s3_store(loc, options)  # dicts are frozen into the key
    assert s3_store(loc, options) is not s3_store(loc, {**options, "client_options": {"allow_http": True}})
    assert s3mod._cache_key(BUCKET, {"opaque": [set()]}) is None  # not hashable: built every time
    assert s3mod._cached_store(None) is None


def test_the_cache_keeps_a_bounded_number_of_stores(s3: S3Server) -> None:
    loc = parse_s3_url(f"s3://{BUCKET}/a.zarr")
    stores = [s3_store(loc, s3.options(timeout=100 + i)) for i in range(s3mod._STORE_CACHE_SIZE + 3)]
    assert len(s3mod._store_cache) == s3mod._STORE_CACHE_SIZE
    assert s3_store(loc, s3.options(timeout=100)) is not stores[0]  # the oldest was let go
    assert s3_store(loc, s3.options(timeout=100 + len(stores) - 1)) is stores[-1]
