"""A real S3-compatible server on 127.0.0.1 for the object-storage tests (moto in server mode).

The ``s3`` fixture of tests/conftest.py (and tests that need the server only for some parameters)
call ``start_server()``, which starts the server once per test process (the first test that asks)
and stops it at exit. Nothing leaves the machine: moto listens on 127.0.0.1 on a free port, and every client is pointed at it.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import moto.server  # noqa: F401 - the test extra installs moto[server]; a missing one fails the run
import obstore

KEY, SECRET, REGION = "testing", "testing", "us-east-1"


@dataclass
class S3Server:
    """The running moto server: its endpoint, storage_options that reach it, and upload helpers."""

    endpoint: str
    server: Any
    buckets: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def host(self) -> str:
        return self.endpoint.split("://", 1)[1]

    def options(self, **extra: Any) -> dict[str, Any]:
        """storage_options for our reader/writer (s3fs spellings, as a user would write them)."""
        return {"endpoint_url": self.endpoint, "key": KEY, "secret": SECRET, "region": REGION, **extra}

    def obstore(self, bucket: str) -> Any:
        from obstore.store import S3Store

        return S3Store(bucket, endpoint=self.endpoint, access_key_id=KEY, secret_access_key=SECRET,
                       region=REGION, client_options={"allow_http": True})

    def bucket(self, name: str) -> str:
        """Create the bucket once (idempotent)."""
        with self._lock:
            if name not in self.buckets:
                import boto3

                boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id=KEY,
                             aws_secret_access_key=SECRET).create_bucket(Bucket=name)
                self.buckets.add(name)
        return name

    def make_public(self, bucket: str) -> None:
        """Let anyone read ``bucket`` (a bucket policy, as public data sets have): unsigned requests
        (``storage_options={"anon": True}``) read it."""
        import json

        import boto3

        policy = {"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Principal": "*", "Action": ["s3:GetObject", "s3:ListBucket"],
            "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]}]}
        boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id=KEY,
                     aws_secret_access_key=SECRET).put_bucket_policy(Bucket=self.bucket(bucket),
                                                                     Policy=json.dumps(policy))

    def upload(self, local: str | os.PathLike[str], bucket: str, prefix: str) -> str:
        """Upload a directory (every file, dot-files included) or one file; returns the s3:// URL."""
        self.bucket(bucket)
        store = self.obstore(bucket)
        local = Path(local)
        if local.is_file():
            obstore.put(store, prefix, local.read_bytes())
            return f"s3://{bucket}/{prefix}"
        files = [p for p in local.rglob("*") if p.is_file()]

        def put(p: Path) -> None:
            obstore.put(store, f"{prefix}/{p.relative_to(local).as_posix()}", p.read_bytes())

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(put, files))
        return f"s3://{bucket}/{prefix}"

    def download(self, bucket: str, prefix: str, local: str | os.PathLike[str]) -> Path:
        """Copy every object below ``prefix`` into a local directory (for netcdf-c to read)."""
        store = self.obstore(bucket)
        local = Path(local)
        keys = [m["path"] for batch in obstore.list(store, prefix=prefix + "/") for m in batch]
        for k in keys:
            dst = local / k[len(prefix) + 1 :]
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(bytes(obstore.get(store, k).bytes()))
        return local

    @contextlib.contextmanager
    def enforce_auth(self) -> Iterator[dict[str, tuple[str, str]]]:
        """Make moto check credentials and IAM policies (it does not by default).

        Yields access keys: ``admin`` may do anything, ``stranger`` has no permission. Auth is
        switched off again on exit (moto's switch is process-wide, and the server runs in-process).
        """
        import json

        import boto3
        from moto import settings
        from moto.core.responses import ActionAuthenticatorMixin

        # made once per process (IAM allows two access keys per user; the users are process-wide)
        keys = _AUTH_KEYS
        if not keys:
            iam = boto3.client("iam", endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id=KEY,
                               aws_secret_access_key=SECRET)
            allow_all = {"Version": "2012-10-17",
                         "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
            for user in ("admin", "stranger"):
                with contextlib.suppress(iam.exceptions.EntityAlreadyExistsException):
                    iam.create_user(UserName=user)
                if user == "admin":
                    iam.put_user_policy(UserName=user, PolicyName="all", PolicyDocument=json.dumps(allow_all))
                k = iam.create_access_key(UserName=user)["AccessKey"]
                keys[user] = (k["AccessKeyId"], k["SecretAccessKey"])
        old = settings.INITIAL_NO_AUTH_ACTION_COUNT
        settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
        ActionAuthenticatorMixin.request_count = 0
        try:
            yield keys
        finally:
            settings.INITIAL_NO_AUTH_ACTION_COUNT = old


_SERVER: S3Server | None = None
_AUTH_KEYS: dict[str, tuple[str, str]] = {}


def start_server() -> S3Server:
    """The process's moto server, started on first use."""
    global _SERVER
    if _SERVER is None:
        import moto.backends
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
        # moto's dispatcher lists its own package folder (~200 stat calls) on every request, a third
        # of the server's CPU time: the list, taken once, serves every request (same names)
        modules = tuple(moto.backends.list_of_moto_modules())
        moto.backends.list_of_moto_modules = lambda: modules
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        _SERVER = S3Server(endpoint=f"http://{host}:{port}", server=server)
        atexit.register(server.stop)
    return _SERVER
