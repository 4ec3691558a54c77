"""S3 object storage: netcdf-c's S3 URL forms, ``storage_options``, and opening a bucket prefix.

``parse_s3_url`` reads ``s3://bucket/key`` and netcdf-c's
``https://host/bucket/key#mode=nczarr,s3`` / ``https://bucket.host/key#mode=...`` URLs;
``s3_store`` turns ``storage_options`` (s3fs spellings accepted) into an obstore ``S3Store``;
``_open_s3`` opens the target as a ``ZStore`` (a zip archive in a bucket through ``zip``). Object
storage goes through obstore (Rust, ``zarr.storage.ObjectStore``); see docs/cloud.md for why
(measured against s3fs) and for the ``storage_options`` it understands.
"""

from __future__ import annotations

import os
import threading
import urllib.parse
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..errors import UnsupportedError, ZStringsError
from .redact import redact, shown
from .runtime import using_runtime
from .targets import ParsedTarget, parse_nczarr_url
from .zip import _open_remote_zip
from .zstore import ZStore

__all__ = ["S3Location", "parse_s3_url", "s3_store"]


@dataclass(frozen=True)
class S3Location:
    """Where an S3 URL points: bucket, key (the dataset's prefix), and what the URL says of the
    service (endpoint, region, virtual-host addressing); ``storage_options`` override the latter."""

    bucket: str
    key: str
    endpoint: str | None = None
    region: str | None = None
    virtual_hosted: bool = False


_AWS_HOST = ("amazonaws.com", "amazonaws.com.cn")


def _aws_region(labels: list[str]) -> str | None:
    """``s3.eu-west-1`` / ``s3-eu-west-1`` / ``s3`` (+ optional ``dualstack``) -> the region."""
    labels = [x for x in labels if x != "dualstack"]
    if not labels:
        return None
    head = labels[0]
    if head.startswith("s3-"):
        return head[3:]
    if head == "s3" and len(labels) > 1:
        return labels[1]
    return None


# netcdf-c's URL forms are parsed by hand: obstore's ``from_url`` refuses most of them (which:
# docs/cloud.md), and it would build a client (reading the ``AWS_*`` environment) only to split a URL.
def parse_s3_url(target: str, storage_options: dict[str, Any] | None = None) -> S3Location:
    """Bucket, key, endpoint and region of an S3 URL in any of netcdf-c's forms.

    * ``s3://bucket/key``: the endpoint comes from ``storage_options`` or the AWS environment.
    * ``https://s3.<region>.amazonaws.com/bucket/key`` (path style, AWS) and
      ``https://bucket.s3.<region>.amazonaws.com/key`` (virtual host, AWS).
    * ``https://<host>/bucket/key`` (path style, any S3-compatible service: MinIO, Ceph, ...).
    * ``https://bucket.<host>/key`` (virtual host, any service): recognised when
      ``storage_options["endpoint_url"]`` is ``https://<host>`` or ``virtual_hosted_style=True``.

    The fragment (``#mode=nczarr,s3``) is ignored here; ``aws.region=...`` in it sets the region.
    """
    opts = storage_options or {}
    parsed = parse_nczarr_url(target)
    base = target.partition("#")[0]
    u = urllib.parse.urlparse(base)
    scheme = u.scheme.lower()
    region = parsed.fragment.get("aws.region") or None
    path = urllib.parse.unquote(u.path).strip("/")
    if scheme == "s3":
        if not u.netloc:
            raise ZStringsError(f"Invalid S3 URL {shown(target)!r}: expected s3://bucket/key.")
        return S3Location(bucket=u.netloc, key=path, region=region)
    if scheme not in ("http", "https") or not u.hostname:
        raise ZStringsError(
            f"Invalid S3 URL {shown(target)!r}: expected s3://bucket/key, https://host/bucket/key#mode=nczarr,s3 "
            "or https://bucket.host/key#mode=nczarr,s3."
        )
    url = _HttpUrl(target, scheme, netloc=u.netloc.rsplit("@", 1)[-1], host=u.hostname.lower(), path=path,
                   region=region)
    aws = next((h for h in _AWS_HOST if url.host == h or url.host.endswith("." + h)), None)
    if aws is not None:
        return _aws_location(url, aws)
    return _service_location(url, opts)


class _HttpUrl(NamedTuple):
    """The parts of an http(s) S3 URL the address forms are told apart by."""

    target: str  # the URL as given (for messages)
    scheme: str
    netloc: str  # host[:port], without credentials
    host: str  # lower case
    path: str  # unquoted, without surrounding slashes
    region: str | None  # the fragment's aws.region


def _aws_location(url: _HttpUrl, aws: str) -> S3Location:
    """An AWS URL: path style (``s3.<region>.amazonaws.com/bucket/key``) or virtual host
    (``<bucket>.s3.<region>.amazonaws.com/key``; bucket names may contain dots)."""
    pre = url.host.split(".")[: -len(aws.split("."))]
    region = url.region
    endpoint: str | None
    if pre and (pre[0] == "s3" or pre[0].startswith("s3-")):  # path style
        bucket, _, key = url.path.partition("/")
        region = region or _aws_region(pre)
        endpoint = f"{url.scheme}://{url.netloc}"
    else:
        i = next((j for j, x in enumerate(pre) if x == "s3" or x.startswith("s3-")), None)
        if i is None or i == 0:
            raise ZStringsError(f"Invalid S3 URL {shown(url.target)!r}: cannot find the bucket in host {url.host!r}.")
        bucket, key = ".".join(pre[:i]), url.path
        region = region or _aws_region(pre[i:])
        endpoint = f"{url.scheme}://" + url.netloc.split(".", i)[-1] if region is None else f"{url.scheme}://s3.{region}.{aws}"
    if not bucket:
        raise ZStringsError(f"Invalid S3 URL {shown(url.target)!r}: no bucket name.")
    return S3Location(bucket=bucket, key=key, endpoint=endpoint, region=region)


def _service_location(url: _HttpUrl, opts: dict[str, Any]) -> S3Location:
    """A URL of another S3-compatible service: virtual host when ``opts`` names its endpoint (or
    ``virtual_hosted_style``), else path style."""
    scheme, netloc, path, region = url.scheme, url.netloc, url.path, url.region
    ep = _endpoint_option(opts)
    ep_netloc = urllib.parse.urlparse(ep).netloc.lower() if ep else ""
    if ep_netloc and netloc.lower().endswith("." + ep_netloc):
        bucket = netloc[: -len(ep_netloc) - 1]
        return S3Location(bucket=bucket, key=path, endpoint=ep, region=region)
    if opts.get("virtual_hosted_style"):
        bucket = url.host.split(".")[0]
        return S3Location(bucket=bucket, key=path, endpoint=f"{scheme}://{netloc}", region=region,
                          virtual_hosted=True)
    bucket, _, key = path.partition("/")
    if not bucket:
        raise ZStringsError(
            f"Invalid S3 URL {shown(url.target)!r}: no bucket. Expected https://host/bucket/key#mode=nczarr,s3 "
            "(path style) or, for https://bucket.host/key, storage_options={'endpoint_url': "
            "'https://host'} or {'virtual_hosted_style': True}."
        )
    return S3Location(bucket=bucket, key=key, endpoint=f"{scheme}://{netloc}", region=region)


_OPTION_ALIASES: dict[str, tuple[str, ...]] = {
    "access_key_id": ("key", "aws_access_key_id", "access_key_id"),
    "secret_access_key": ("secret", "aws_secret_access_key", "secret_access_key"),
    "token": ("token", "session_token", "aws_session_token"),
    "region": ("region", "region_name", "aws_region"),
}
_OUR_OPTIONS = {"endpoint_url", "endpoint", "anon", "anonymous", "timeout", "connect_timeout",
                "max_retries", "retry_timeout", "client_options", "retry_config", "client_kwargs",
                "virtual_hosted_style", "config_kwargs"}
#: the ``storage_options`` keys read by name; any other is passed to obstore's ``S3Config`` as is
_KNOWN_OPTIONS = {a for al in _OPTION_ALIASES.values() for a in al} | _OUR_OPTIONS


def _endpoint_option(opts: dict[str, Any]) -> str | None:
    ck = opts.get("client_kwargs") or {}
    ep = opts.get("endpoint_url") or opts.get("endpoint") or ck.get("endpoint_url")
    return str(ep).rstrip("/") if ep else None


def _s3_config(loc: S3Location, opts: dict[str, Any], endpoint: str | None) -> dict[str, Any]:
    """obstore ``S3Config`` keys from ``storage_options`` (s3fs spellings read too) and the URL:
    credentials, region, endpoint, addressing, unsigned requests, then any other key as is."""
    # (the last alias given wins)
    config = {name: opts[a] for name, aliases in _OPTION_ALIASES.items() for a in aliases if opts.get(a) is not None}
    if "region" not in config:
        region = (opts.get("client_kwargs") or {}).get("region_name") or loc.region
        if region:
            config["region"] = region
    config.update(_addressing(loc, opts, endpoint))
    config.update({k: v for k, v in opts.items() if k not in _KNOWN_OPTIONS})
    for k, v in (opts.get("config_kwargs") or {}).items():
        config.setdefault(k, v)
    return config


def _addressing(loc: S3Location, opts: dict[str, Any], endpoint: str | None) -> dict[str, Any]:
    """The ``S3Config`` keys of how requests are sent: virtual-host style, endpoint, unsigned."""
    config: dict[str, Any] = {}
    if loc.virtual_hosted or (opts.get("virtual_hosted_style") and endpoint):
        config["virtual_hosted_style_request"] = True
    if endpoint:
        config["endpoint"] = endpoint
    if opts.get("anon") or opts.get("anonymous"):
        config["skip_signature"] = True
    return config


def _s3_endpoint(loc: S3Location, opts: dict[str, Any]) -> str | None:
    """The service endpoint: ``storage_options``'s, else the URL's; the URL's own virtual host wins
    over a plain service endpoint."""
    endpoint = _endpoint_option(opts)
    if endpoint and loc.virtual_hosted and not urllib.parse.urlparse(endpoint).netloc.startswith(loc.bucket + "."):
        endpoint = None
    return endpoint or loc.endpoint


def _client_options(opts: dict[str, Any], endpoint: str | None) -> dict[str, Any]:
    """obstore's ``ClientConfig``: timeouts, plain http when the endpoint (or ``AWS_ENDPOINT_URL``)
    is http://, then ``client_options`` as given."""
    from datetime import timedelta

    client: dict[str, Any] = {
        "timeout": timedelta(seconds=float(opts.get("timeout", 30))),
        "connect_timeout": timedelta(seconds=float(opts.get("connect_timeout", 5))),
    }
    env_endpoint = os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT") or ""
    if (endpoint or env_endpoint).startswith("http://"):
        client["allow_http"] = True
    client.update(opts.get("client_options") or {})
    return client


def _retry_config(opts: dict[str, Any]) -> dict[str, Any]:
    """obstore's ``RetryConfig``: ``max_retries``, ``retry_timeout``, a short backoff, then ``retry_config`` as given."""
    from datetime import timedelta

    retry: dict[str, Any] = {
        "max_retries": int(opts.get("max_retries", 2)),
        "retry_timeout": timedelta(seconds=float(opts.get("retry_timeout", 10))),
        "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=2),
                    "base": 2},
    }
    retry.update(opts.get("retry_config") or {})
    return retry


def s3_store(loc: S3Location, storage_options: dict[str, Any] | None = None) -> Any:
    """An obstore ``S3Store`` for ``loc`` configured from ``storage_options``.

    Understood (s3fs spellings accepted too): ``endpoint_url`` (``endpoint``,
    ``client_kwargs={"endpoint_url": ...}``), ``key``/``secret``/``token`` (or ``aws_access_key_id``,
    ...), ``anon=True`` (unsigned requests, public buckets), ``region`` (``region_name``),
    ``timeout`` (seconds per request, default 30), ``connect_timeout`` (default 5),
    ``max_retries`` (default 2), ``retry_timeout`` (seconds, default 10), ``virtual_hosted_style``,
    ``client_options``/``retry_config`` (obstore's, merged last); any other key is an obstore
    ``S3Config`` key (e.g. ``request_payer``). Unset values come from the ``AWS_*`` environment.
    """
    try:
        from obstore.store import S3Store
    except ImportError as e:  # pragma: no cover - obstore is a dependency
        raise ZStringsError("Object storage needs the obstore package: pip install obstore") from e
    opts = dict(storage_options or {})
    endpoint = _s3_endpoint(loc, opts)
    config = _s3_config(loc, opts, endpoint)
    client = _client_options(opts, endpoint)
    retry = _retry_config(opts)
    key = _cache_key(loc.bucket, config, client, retry)
    cached = _cached_store(key)
    if cached is not None:
        return cached
    try:
        store = S3Store(loc.bucket, client_options=client, retry_config=retry,  # type: ignore[arg-type]  # user keys
                        **config)
    except Exception as e:  # noqa: BLE001 - obstore's errors for a bad option, turned into one naming the fix
        why = redact(str(e).splitlines()[0] if str(e) else "", secrets=opts.values())
        raise ZStringsError(  # (from None: obstore's own text may quote a value of storage_options)
            f"Invalid storage_options for {shown(f's3://{loc.bucket}/{loc.key}')}: {type(e).__name__}: "
            f"{why}. Expected endpoint_url, key, secret, token, anon, region, timeout, connect_timeout, "
            "max_retries or an obstore S3Config key."
        ) from None
    _keep_store(key, store)
    return store


# One S3Store per configuration, reused by every open and write in a process (as fsspec reuses a
# filesystem instance): building one costs noticeable CPU (obstore's HTTP client loads the system's
# root certificates; docs/performance.md), and a reused one keeps its
# connections. Keyed by everything the S3Store is built from, the environment it reads included
# (AWS_*, proxies, certificates: a changed variable gives a new store); emptied in a forked child,
# whose stores must not share the parent's connections. obstore's stores are thread-safe.
_STORE_CACHE_SIZE = 16
_store_cache: OrderedDict[Any, Any] = OrderedDict()
_store_cache_pid = os.getpid()
_store_cache_lock = threading.Lock()
_ENV_READ = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "SSL_CERT_FILE", "SSL_CERT_DIR")


def _frozen(value: Any) -> Any:
    """``value`` as a hashable key (dicts as sorted items, lists as tuples); TypeError if it cannot be."""
    if isinstance(value, dict):
        return tuple(sorted((str(k), _frozen(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    hash(value)
    return value


def _cache_key(bucket: str, *parts: dict[str, Any]) -> Any:
    """The cache key of an S3Store's configuration, or None when a value is not hashable (not cached)."""
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k.upper().startswith("AWS_") or k.upper() in _ENV_READ))
    try:
        return (bucket, env, *(_frozen(p) for p in parts))
    except TypeError:
        return None


def _cached_store(key: Any) -> Any:
    global _store_cache_pid
    if key is None:
        return None
    with _store_cache_lock:
        if _store_cache_pid != os.getpid():  # a forked child: build its own stores
            _store_cache.clear()
            _store_cache_pid = os.getpid()
        store = _store_cache.get(key)
        if store is not None:
            _store_cache.move_to_end(key)
        return store


def _keep_store(key: Any, store: Any) -> None:
    if key is None:
        return
    with _store_cache_lock:  # (after _cached_store, which emptied a forked child's copy)
        _store_cache[key] = store
        while len(_store_cache) > _STORE_CACHE_SIZE:
            _store_cache.popitem(last=False)


def _open_s3(target: str, parsed: ParsedTarget, *, mode: str,
             storage_options: dict[str, Any] | None) -> ZStore:
    from zarr.storage import ObjectStore

    if parsed.scheme in ("http", "https") and not parsed.modes & {"s3", "nczarr", "zarr"}:
        raise ZStringsError(
            f"Cannot open {shown(target)!r}: an http(s) URL is read as netcdf-c's S3 URL only with a mode "
            "fragment, e.g. https://host/bucket/key#mode=nczarr,s3 (or use s3://bucket/key)."
        )
    loc = parse_s3_url(target, storage_options)
    display = shown(target)
    using_runtime("obstore", display)  # (before any request: a forked child's would never return)
    obj = s3_store(loc, storage_options)
    key = loc.key.strip("/")
    if "zip" in parsed.modes or key.lower().endswith(".zip"):
        if mode != "r":
            raise UnsupportedError(
                f"Cannot write the zip archive {display}: zip files in object storage are read-only "
                "here. Write a local .zip (to_nczarr(ds, 'out.zip')) and upload it, or write a "
                "directory-style store to s3://bucket/key."
            )
        return _open_remote_zip(obj, key, display=display, modes=parsed.modes)
    # Object stores are always opened writable-capable: the writer's append path reopens a target
    # it first opened for reading; the reader never writes.
    return ZStore(ObjectStore(obj, read_only=False), prefix=key, display=display, modes=parsed.modes,
                  remote=True)
