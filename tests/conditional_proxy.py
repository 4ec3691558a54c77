"""An HTTP proxy that drops the conditional headers of every request (``If-None-Match``,
``If-Match``): in front of the local S3 server (moto) it makes an S3 service that ignores
conditional writes, as older MinIO, Ceph and other S3-compatible servers did, so the tests see what
the writers do there (detect it once, warn, fall back to read-then-write).

HTTP/1.1 with one request at a time per connection (what obstore's client sends): each request's
head is read up to its blank line, the two headers are removed, and the head and its
``Content-Length`` bytes of body are forwarded; responses are copied back unchanged. moto does not
check request signatures unless asked, so the changed requests are accepted.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

_DROP = (b"if-none-match:", b"if-match:")


class ConditionalStripProxy:
    """Forward 127.0.0.1:<port> to ``upstream`` (host:port) without conditional request headers."""

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.rpartition(":")
        self.upstream = (host or "127.0.0.1", int(port))
        self.port = 0
        self.stripped = 0  # requests that carried a conditional header
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: Any = None
        self._ready = threading.Event()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ConditionalStripProxy:
        threading.Thread(target=self._run, name="conditional-strip-proxy", daemon=True).start()
        if not self._ready.wait(30):
            raise RuntimeError("proxy did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._server is not None:
            self._loop.call_soon_threadsafe(self._server.close)

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop

        async def main() -> None:
            self._server = await asyncio.start_server(self._client, "127.0.0.1", 0)
            self.port = self._server.sockets[0].getsockname()[1]
            self._ready.set()
            with contextlib.suppress(asyncio.CancelledError):
                await self._server.serve_forever()

        loop.run_until_complete(main())

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)

        async def back() -> None:
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                while data := await up_reader.read(65536):
                    writer.write(data)
                    await writer.drain()
            writer.close()

        task = asyncio.ensure_future(back())
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.split(b"\r\n")
                kept = [ln for ln in lines if not ln.lower().startswith(_DROP)]
                if len(kept) != len(lines):
                    self.stripped += 1
                length = next((int(ln.split(b":", 1)[1]) for ln in kept if ln.lower().startswith(b"content-length:")), 0)
                body = await reader.readexactly(length) if length else b""
                up_writer.write(b"\r\n".join(kept) + body)
                await up_writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            up_writer.close()
            task.cancel()
            with contextlib.suppress(Exception):
                await task
