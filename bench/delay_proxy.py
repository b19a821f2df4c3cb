"""A TCP proxy on 127.0.0.1 that adds a fixed delay to every request: what a remote S3 endpoint's
round trip adds to a local server (bench/fleet_bench.py puts it in front of SeaweedFS).

It works on bytes, not HTTP: whatever the client sends is forwarded ``--delay-ms`` after it
arrived, in order (one queue per connection), and the server's answers come back at once. A
client waits for each answer before sending its next request on a connection, so every request
pays the delay once, and concurrent connections pay it in parallel, as they would over a WAN.
One asyncio loop (protocols and one timer per connection, no per-request task) in its own
process: forwarding costs the benchmarked process no CPU, and little CPU of its own.

    python bench/delay_proxy.py --upstream 127.0.0.1:8333 --delay-ms 20   # prints its port

It also counts S3 requests (HTTP/1.1 framing is followed on both directions: Content-Length and
chunked bodies, no body for HEAD, 204 and 304 answers): per operation (GET, PUT, LIST, HEAD,
DELETE, POST) and object "directory" (the key without its last segment; a LIST's ``prefix``),
the count, request body bytes and answer body bytes. ``GET /__proxy__/stats`` on the proxy's
port answers them as JSON (``/__proxy__/reset`` also zeroes them); such a connection is never
forwarded. Counting works for any client, so one proxy serves two engines side by side
(bench/s3_requests_bench.py).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import sys
import urllib.parse

# (op, directory) -> [requests, request body bytes, answer body bytes]
STATS: dict[tuple[str, str], list[int]] = collections.defaultdict(lambda: [0, 0, 0])
CONTROL = b"GET /__proxy__/"


def classify(method: str, target: str) -> tuple[str, str]:
    """(op, directory) of one S3 request: a LIST is a GET with a ``list-type`` or ``prefix``
    query; POST ``?delete`` is a multi-object DELETE."""
    path, _, query = target.partition("?")
    params = urllib.parse.parse_qs(query, keep_blank_values=True)
    parts = urllib.parse.unquote(path).strip("/").split("/", 1)
    key = parts[1] if len(parts) > 1 else ""
    if method == "GET" and ("list-type" in params or "prefix" in params or not key):
        return "LIST", params.get("prefix", [""])[0].rstrip("/")
    if method == "POST" and "delete" in params:
        return "DELETE", key
    return method, key.rpartition("/")[0]


class _Framer:
    """Follows HTTP/1.1 messages in one direction of a connection and reports each one's head
    and body size to ``done`` (``head_done`` decides if a body follows)."""

    def __init__(
        self,
        requests: bool,
        methods: collections.deque[str],
        pending: collections.deque[tuple[str, str]],
    ) -> None:
        self.requests = requests
        self.methods = methods  # methods of requests still unanswered, oldest first
        self.pending = pending  # (op, directory) of requests still unanswered
        self.buf = bytearray()
        self.left = 0  # body bytes still to skip
        self.chunked = False
        self.body = 0
        self.key: tuple[str, str] | None = None
        self.state = "head"

    def feed(self, data: bytes) -> None:
        view = memoryview(data)
        while len(view):
            if self.state == "body":
                n = min(self.left, len(view))
                self.left -= n
                self.body += n
                view = view[n:]
                if self.left == 0:
                    self.state = "crlf" if self.chunked else "head"
                    if not self.chunked:
                        self._done()
                continue
            self.buf += view
            view = memoryview(b"")
            self._parse_buffered()

    def _parse_buffered(self) -> None:
        while True:
            if self.state == "head":
                end = self.buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = bytes(self.buf[:end]).decode("latin-1")
                del self.buf[: end + 4]
                self._head(head)
            elif self.state in ("size", "crlf", "trailer"):
                end = self.buf.find(b"\r\n")
                if end < 0:
                    return
                line = bytes(self.buf[:end])
                del self.buf[: end + 2]
                if self.state == "crlf":
                    self.state = "size"
                elif self.state == "trailer":
                    if not line:
                        self.state = "head"
                        self._done()
                else:
                    size = int(line.split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        self.state = "trailer"
                    else:
                        self.left, self.state = size, "body"
            else:  # body, with bytes buffered behind it
                n = min(self.left, len(self.buf))
                self.left -= n
                self.body += n
                del self.buf[:n]
                if self.left:
                    return
                self.state = "crlf" if self.chunked else "head"
                if not self.chunked:
                    self._done()
            if not self.buf:
                return

    def _head(self, head: str) -> None:
        lines = head.split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        first = lines[0].split(" ")
        self.body = 0
        self.chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = int(headers.get("content-length", "0") or 0)
        if self.requests:
            self.key = classify(first[0], first[1] if len(first) > 1 else "/")
            self.methods.append(first[0])
        else:
            method = self.methods.popleft() if self.methods else "GET"
            status = int(first[1]) if len(first) > 1 and first[1].isdigit() else 200
            if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
                self.chunked, length = False, 0
        if self.chunked:
            self.state = "size"
        elif length:
            self.left, self.state = length, "body"
        else:
            self._done()

    def _done(self) -> None:
        if self.requests:
            assert self.key is not None
            row = STATS[self.key]
            row[0] += 1
            row[1] += self.body
            self.pending.append(self.key)
        elif self.pending:
            STATS[self.pending.popleft()][2] += self.body
        self.body = 0


def _stats_answer(reset: bool) -> bytes:
    rows = [[op, d, *v] for (op, d), v in sorted(STATS.items())]
    if reset:
        STATS.clear()
    body = json.dumps(rows).encode()
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


class _Upstream(asyncio.Protocol):
    """The server side of one connection: answers go back to the client at once."""

    def __init__(self, client: asyncio.Transport, framer: _Framer) -> None:
        self.client = client
        self.framer = framer

    def data_received(self, data: bytes) -> None:
        self.client.write(data)
        self.framer.feed(data)

    def eof_received(self) -> bool:
        if self.client.can_write_eof():
            self.client.write_eof()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.close()


class _Client(asyncio.Protocol):
    """The client side of one connection: what it sends is queued and forwarded in order once
    ``delay_s`` has passed since it arrived (one timer per connection at a time)."""

    def __init__(self, upstream: tuple[str, int], delay_s: float) -> None:
        self.upstream = upstream
        self.delay_s = delay_s
        self.loop = asyncio.get_running_loop()
        self.queue: collections.deque[tuple[float, bytes | None]] = collections.deque()
        self.timer: asyncio.TimerHandle | None = None
        self.server: asyncio.Transport | None = None
        self.transport: asyncio.Transport | None = None
        methods: collections.deque[str] = collections.deque()
        keys: collections.deque[tuple[str, str]] = collections.deque()
        self.requests = _Framer(True, methods, keys)
        self.answers = _Framer(False, methods, keys)
        self.first = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.loop.create_task(self._connect(transport))

    async def _connect(self, transport: asyncio.Transport) -> None:
        try:
            server, _ = await self.loop.create_connection(
                lambda: _Upstream(transport, self.answers), *self.upstream
            )
        except OSError:
            transport.close()
            return
        assert isinstance(server, asyncio.Transport)
        self.server = server
        self._flush()

    def _enqueue(self, data: bytes | None) -> None:
        self.queue.append((self.loop.time() + self.delay_s, data))
        if self.timer is None:
            self.timer = self.loop.call_at(self.queue[0][0], self._flush)

    def data_received(self, data: bytes) -> None:
        if self.first:
            self.first = False
            if data.startswith(CONTROL):
                assert self.transport is not None
                self.transport.write(_stats_answer(data.startswith(CONTROL + b"reset")))
                self.transport.close()
                self.queue.clear()
                return
        self.requests.feed(data)
        self._enqueue(data)

    def eof_received(self) -> bool:
        self._enqueue(None)
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self._enqueue(None)

    def _flush(self) -> None:
        self.timer = None
        if self.server is None:
            return  # still connecting: _connect flushes
        now = self.loop.time()
        while self.queue and self.queue[0][0] <= now:
            _, data = self.queue.popleft()
            if data is None:
                self.server.close()
                self.queue.clear()
                return
            self.server.write(data)
        if self.queue:
            self.timer = self.loop.call_at(self.queue[0][0], self._flush)


async def _serve(upstream: tuple[str, int], delay_s: float) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: _Client(upstream, delay_s), "127.0.0.1", 0, backlog=1024
    )
    port = server.sockets[0].getsockname()[1]
    print(port, flush=True)
    async with server:
        await server.serve_forever()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True, help="host:port of the server (loopback)")
    parser.add_argument("--delay-ms", type=float, default=20.0)
    args = parser.parse_args()
    host, _, port = args.upstream.rpartition(":")
    if host not in ("127.0.0.1", "localhost"):
        parser.error(f"--upstream must be on loopback, got {host!r}")
    if not 0 <= args.delay_ms <= 10_000:
        parser.error(f"--delay-ms must be within [0, 10000], got {args.delay_ms}")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve((host, int(port)), args.delay_ms / 1000))
    return 0


if __name__ == "__main__":
    sys.exit(main())
