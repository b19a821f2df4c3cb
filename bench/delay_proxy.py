"""A TCP proxy on 127.0.0.1 that adds a fixed delay to every request: what a remote S3 endpoint's
round trip adds to a local server (bench/fleet_bench.py puts it in front of SeaweedFS).

It works on bytes, not HTTP: whatever the client sends is forwarded ``--delay-ms`` after it
arrived, in order (one queue per connection), and the server's answers come back at once. A
client waits for each answer before sending its next request on a connection, so every request
pays the delay once, and concurrent connections pay it in parallel, as they would over a WAN.
One asyncio loop (protocols and one timer per connection, no per-request task) in its own
process: forwarding costs the benchmarked process no CPU, and little CPU of its own.

    python bench/delay_proxy.py --upstream 127.0.0.1:8333 --delay-ms 20   # prints its port
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import sys


class _Upstream(asyncio.Protocol):
    """The server side of one connection: answers go back to the client at once."""

    def __init__(self, client: asyncio.Transport) -> None:
        self.client = client

    def data_received(self, data: bytes) -> None:
        self.client.write(data)

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

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.loop.create_task(self._connect(transport))

    async def _connect(self, transport: asyncio.Transport) -> None:
        try:
            server, _ = await self.loop.create_connection(
                lambda: _Upstream(transport), *self.upstream
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
