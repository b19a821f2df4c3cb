"""A TCP proxy on 127.0.0.1 that adds a fixed delay to every request: what a remote S3 endpoint's
round trip adds to a local server (bench/fleet_bench.py puts it in front of SeaweedFS).

It works on bytes, not HTTP: whatever the client sends is forwarded ``--delay-ms`` after it
arrived, in order (one queue per connection), and the server's answers come back at once. A
client waits for each answer before sending its next request on a connection, so every request
pays the delay once, and concurrent connections pay it in parallel, as they would over a WAN.
One asyncio loop in its own process: forwarding costs the benchmarked process no CPU.

    python bench/delay_proxy.py --upstream 127.0.0.1:8333 --delay-ms 20   # prints its port
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys


async def _pipe_delayed(
    src: asyncio.StreamReader, dst: asyncio.StreamWriter, delay_s: float
) -> None:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def send() -> None:
        while True:
            due, data = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                with contextlib.suppress(OSError):
                    dst.write_eof()
                return
            dst.write(data)
            await dst.drain()

    sender = asyncio.create_task(send())
    try:
        while data := await src.read(65536):
            queue.put_nowait((loop.time() + delay_s, data))
    finally:
        queue.put_nowait((loop.time() + delay_s, b""))
        await sender


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    while data := await src.read(65536):
        dst.write(data)
        await dst.drain()
    with contextlib.suppress(OSError):
        dst.write_eof()


async def _serve(upstream: tuple[str, int], delay_s: float) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(*upstream)
        except OSError:
            client_w.close()
            return
        try:
            await asyncio.gather(_pipe_delayed(client_r, up_w, delay_s), _pipe(up_r, client_w))
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            for w in (client_w, up_w):
                w.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
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
