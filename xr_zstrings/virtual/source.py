"""Where a virtualized source is: its URL, the obstore registry its parser reads it through, and
the icechunk virtual chunk container (with credentials) its references resolve in."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ZStringsError
from ..io.s3 import parse_s3_url, s3_store
from ..io.targets import parse_nczarr_url

__all__ = ["VirtualSource"]


@dataclass(frozen=True)
class VirtualSource:
    """A source to virtualize: ``url`` (``file://`` or ``s3://``), ``prefix`` (the virtual chunk
    container's URL prefix: the source's folder, or its bucket), ``registry`` (obstore) and the
    icechunk container store config and credentials."""

    url: str
    prefix: str
    registry: Any
    container_store: Any
    credentials: Any

    @classmethod
    def of(cls, source: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None) -> VirtualSource:
        """Classify a path or URL (local, or S3 with ``storage_options`` as ``open_store``'s)."""
        text = os.fspath(source)
        parsed = parse_nczarr_url(text)  # netcdf-c's "#mode=nczarr,file" fragment is not part of the path
        scheme = parsed.scheme
        if scheme in ("s3", "http", "https"):
            return cls._s3(text, dict(storage_options or {}))
        if scheme not in ("", "file"):
            raise ZStringsError(f"Cannot virtualize {text!r}: the {scheme!r} storage is not supported; use a local "
                                "path, a file:// URL or an s3:// URL.")
        if storage_options:
            raise ZStringsError(f"Cannot virtualize {text!r} with storage_options: they configure object storage, "
                                "and this is a local path. Drop storage_options.")
        return cls._local(parsed.path)

    @classmethod
    def _local(cls, text: str) -> VirtualSource:
        import icechunk
        from icechunk.credentials import LocalFileSystemAccess
        from obspec_utils.registry import ObjectStoreRegistry
        from obstore.store import LocalStore

        path = Path(text.removeprefix("file://")).expanduser().resolve()
        if not path.exists():
            raise ZStringsError(f"Cannot virtualize {text!r}: no such file or folder ({str(path)!r}).")
        folder = path.parent
        return cls(url=path.as_uri(), prefix=folder.as_uri().rstrip("/") + "/",
                   registry=ObjectStoreRegistry({"file://": LocalStore()}),
                   container_store=icechunk.local_filesystem_store(str(folder)),
                   credentials=LocalFileSystemAccess)

    @classmethod
    def _s3(cls, text: str, so: dict[str, Any]) -> VirtualSource:
        import icechunk
        from obspec_utils.registry import ObjectStoreRegistry

        loc = parse_s3_url(text, so)
        store = s3_store(loc, so)
        config = dict(store.config)
        endpoint = config.get("endpoint") or os.environ.get("AWS_ENDPOINT_URL") or None
        allow_http = bool(dict(store.client_options or {}).get("allow_http")) or str(endpoint or "").startswith(
            "http://")
        container = icechunk.s3_store(region=config.get("region"), endpoint_url=endpoint, allow_http=allow_http,
                                      s3_compatible=endpoint is not None, force_path_style=endpoint is not None,
                                      anonymous=bool(config.get("skip_signature")))
        return cls(url=f"s3://{loc.bucket}/{loc.key}".rstrip("/"), prefix=f"s3://{loc.bucket}/",
                   registry=ObjectStoreRegistry({f"s3://{loc.bucket}": store}),
                   container_store=container, credentials=_s3_credentials(config))

    def access(self) -> dict[str, Any]:
        """``authorize_virtual_chunk_access`` for an icechunk repository reading these references."""
        from icechunk import containers_credentials

        return dict(containers_credentials({self.prefix: self.credentials}))

    def container(self) -> Any:
        """The icechunk ``VirtualChunkContainer`` for the source's location."""
        import icechunk

        return icechunk.VirtualChunkContainer(self.prefix, self.container_store)

    def writable_session(self, target: Any, *, branch: str = "main") -> Any:
        """A writable session whose repository has (and may read) this source's container: a
        ``Repository`` gets the container saved in its config; a ``Session``'s is checked."""
        import icechunk

        if isinstance(target, icechunk.Repository):
            config = target.config
            if not self._covered(config):
                config.set_virtual_chunk_container(self.container())
            repo = target.reopen(config=config, authorize_virtual_chunk_access=self.access())
            repo.save_config()
            return repo.writable_session(branch)
        if not isinstance(target, icechunk.Session):
            raise ZStringsError(f"Cannot virtualize {self.url} into {type(target).__name__}: expected an icechunk "
                                "Session (writable) or Repository.")
        if target.read_only:
            raise ZStringsError(f"Cannot virtualize {self.url} into a read-only icechunk session: open one with "
                                f"repo.writable_session({branch!r}).")
        if not self._covered(target.config):
            raise ZStringsError(
                f"Cannot virtualize {self.url} into this icechunk session: its repository has no virtual chunk "
                f"container for {self.prefix!r}, and a session's configuration cannot change. Pass the Repository "
                "instead (virtualize(source, repo) adds the container and returns a writable session), or create "
                "the repository with config.set_virtual_chunk_container(icechunk.VirtualChunkContainer("
                f"{self.prefix!r}, ...)) and authorize_virtual_chunk_access.")
        return target

    def _covered(self, config: Any) -> bool:
        containers = config.virtual_chunk_containers or {}
        return any(self.url.startswith(p) for p in containers)


def _s3_credentials(config: Mapping[str, Any]) -> Any:
    """icechunk credentials from an obstore S3 config: static keys, anonymous, or the environment's."""
    import icechunk

    key = config.get("access_key_id") or config.get("aws_access_key_id")
    secret = config.get("secret_access_key") or config.get("aws_secret_access_key")
    if config.get("skip_signature"):
        return icechunk.s3_anonymous_credentials()
    if key and secret:
        return icechunk.s3_static_credentials(access_key_id=key, secret_access_key=secret,
                                              session_token=config.get("session_token") or config.get("token"))
    return icechunk.s3_from_env_credentials()
