"""A TCP proxy that adds a network delay and counts how many round trips a client's requests needed.

Used by the object-storage tests and ``benchmarks/s3_open.py`` in front of the local S3 server
(moto on 127.0.0.1). ``tc netem`` would be the usual tool, but it needs a kernel module and
privileges this project's CI does not have, so the delay is added here: every byte is forwarded
``delay`` seconds after it arrived, in each direction (so one request/response exchange costs
``2 * delay``, the round-trip time), and a new connection's first request waits one more round trip
(the TCP handshake a real network charges).

The proxy also measures the client's *round-trip depth*: each HTTP request (a burst of client
bytes after a response on the same connection) gets depth ``1 + the deepest response delivered to
the client before it arrived``. Requests a client sends concurrently share a depth; a request that
waited for an answer is one deeper. ``max_depth`` is then the number of sequential round trips an
operation took, independent of how fast the machine is (given a delay well above the client's own
time between requests).

    python tests/latency_proxy.py --upstream 127.0.0.1:PORT --delay 0.01   # prints its port

It also counts the bytes the server sent back (``bytes_down``: responses, headers included).

Run that way it reads commands on stdin: ``reset`` (start counting afresh) and ``stats`` (prints
``requests max_depth max_in_flight bytes_down`` on one line).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import threading
import time
from typing import Any


class LatencyProxy:
    """Forward 127.0.0.1:<port> to ``upstream`` with ``delay`` seconds each way; see the module doc."""

    def __init__(self, upstream: str, delay: float) -> None:
        host, _, port = upstream.rpartition(":")
        self.upstream = (host.strip("[]") or "127.0.0.1", int(port))
        self.delay = delay
        self.port = 0
        self.requests = 0
        self.max_depth = 0  # deepest request since reset()
        self.max_in_flight = 0
        self.request_lines: list[str] = []  # each request's first line ("GET /bucket/key HTTP/1.1")
        self.bytes_down = 0  # bytes of responses forwarded to clients since reset(), headers included
        self._in_flight = 0
        self._delivered_depth = 0  # deepest response delivered to a client so far
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: Any = None
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._writers: set[asyncio.StreamWriter] = set()  # open connections' writers, for stop()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def reset(self) -> None:
        """Start counting afresh (requests, depth, concurrency) for the next operation."""
        with self._lock:
            self.requests = self.max_depth = self.max_in_flight = self._delivered_depth = self.bytes_down = 0
            self.request_lines = []

    # --- running ---------------------------------------------------------------------------
    def start(self) -> LatencyProxy:
        """Serve on a background thread (its own event loop); returns once it listens."""
        self._thread = threading.Thread(target=self._run, name="latency-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("latency proxy did not start")
        return self

    def stop(self) -> None:
        """Close the listener and every open connection (their tasks then end), then the thread."""
        loop = self._loop
        if loop is not None and self._server is not None:
            async def shutdown() -> None:
                self._server.close()
                for w in list(self._writers):
                    w.close()
                tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                await asyncio.wait(tasks, timeout=5) if tasks else None

            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(shutdown(), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", 0, backlog=4096))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        with contextlib.suppress(Exception):
            self._loop.run_forever()

    async def serve_forever(self) -> None:
        """Serve on the running loop (the ``__main__`` entry point)."""
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, backlog=4096)
        self.port = self._server.sockets[0].getsockname()[1]
        print(self.port, flush=True)
        await self._server.serve_forever()

    # --- one connection --------------------------------------------------------------------
    async def _handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        # the client's bytes are read (and their requests counted) at once; the connection to the
        # upstream server is made meanwhile (a server slow to accept must not look like a client
        # that sent its request late)
        upstream = asyncio.ensure_future(asyncio.open_connection(*self.upstream))
        upstream.add_done_callback(lambda f: f.cancelled() or f.exception() or self._writers.add(f.result()[1]))
        self._writers.add(cwriter)
        state = {"depth": 0, "answered": True, "first": True}

        def on_request(data: bytes) -> None:
            with self._lock:
                depth = self._delivered_depth + 1
                self.requests += 1
                self.request_lines.append(data.split(b"\r\n", 1)[0].decode("latin-1"))
                self.max_depth = max(self.max_depth, depth)
                self._in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self._in_flight)
            state["depth"], state["answered"] = depth, False

        def on_response() -> None:
            with self._lock:
                self._delivered_depth = max(self._delivered_depth, state["depth"])
                self._in_flight -= 1
            state["answered"] = True

        async def pump(reader: Any, writer: Any, to_upstream: bool) -> None:
            """Forward reader -> writer (either may be a future of the upstream connection)."""
            queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

            async def send() -> None:
                w = (await writer)[1] if isinstance(writer, asyncio.Future) else writer
                try:
                    while True:
                        due, data = await queue.get()
                        wait = due - time.monotonic()
                        if wait > 0:
                            await asyncio.sleep(wait)
                        if not data:
                            with contextlib.suppress(Exception):
                                w.write_eof() if w.can_write_eof() else w.close()
                            return
                        if not to_upstream:
                            if not state["answered"]:
                                on_response()
                            self.bytes_down += len(data)  # (one event loop thread: no lock)
                        w.write(data)
                        await w.drain()
                finally:
                    with contextlib.suppress(Exception):
                        w.close()

            sender = asyncio.ensure_future(send())
            try:
                r = (await reader)[0] if isinstance(reader, asyncio.Future) else reader
                while True:
                    data = await r.read(1 << 16)
                    due = time.monotonic() + self.delay
                    if to_upstream and data:
                        if state["first"]:  # the TCP handshake's round trip
                            due += 2 * self.delay
                            state["first"] = False
                        if state["answered"]:
                            on_request(data)
                    queue.put_nowait((due, data))
                    if not data:
                        break
                await sender
            except (ConnectionError, OSError):
                sender.cancel()

        try:
            await asyncio.gather(pump(creader, upstream, True), pump(upstream, cwriter, False))
        except (ConnectionError, OSError):
            cwriter.close()
        finally:
            self._writers.discard(cwriter)
            if upstream.done() and not upstream.cancelled() and upstream.exception() is None:
                self._writers.discard(upstream.result()[1])
            if not state["answered"]:
                with self._lock:
                    self._in_flight -= 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream", required=True, help="host:port to forward to")
    ap.add_argument("--delay", type=float, default=0.01, help="seconds added in each direction")
    args = ap.parse_args()
    proxy = LatencyProxy(args.upstream, args.delay)

    def commands() -> None:
        for line in sys.stdin:
            if line.strip() == "reset":
                proxy.reset()
                print("ok", flush=True)
            elif line.strip() == "stats":
                print(proxy.requests, proxy.max_depth, proxy.max_in_flight, proxy.bytes_down, flush=True)

    threading.Thread(target=commands, daemon=True).start()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(proxy.serve_forever())


if __name__ == "__main__":
    sys.exit(main())
