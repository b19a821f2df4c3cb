"""Free TCP ports on 127.0.0.1 for servers we start, picked where no outgoing connection lands.

A port found by binding port 0 comes from the kernel's ephemeral range, the same range the kernel
hands to outgoing connections. Between picking such a port and the server binding it (seconds,
for a JVM or Dagster's webserver), any connection on the machine may take it, and the server dies
with "address already in use". A port below the ephemeral range is only ever taken by an explicit
bind, so we pick there, at random (a system RNG, not the ``random`` module a test may seed, so
parallel test workers do not all try the same port first), and check each one binds.

Used by the local deployment (``make cluster``), the demo's S3 server, the test servers and the
developer tools (docs/contributing.md, "Tests").
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

HOST = "127.0.0.1"
LOWEST = 10_000
"""The bottom of the range we pick from: above the well-known and common service ports."""
_DEFAULT_EPHEMERAL = (32768, 60999)
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_rng = random.SystemRandom()


def ephemeral_range() -> tuple[int, int]:
    """The kernel's ephemeral port range (Linux's default where it cannot be read)."""
    try:
        low, high = (int(v) for v in _RANGE_FILE.read_text().split())
    except (OSError, ValueError):
        return _DEFAULT_EPHEMERAL
    return low, high


def _pool() -> range:
    low, high = ephemeral_range()
    if low - LOWEST >= 1000:
        return range(LOWEST, low)
    # an unusual kernel setting leaves no room below: use the ports above the range instead
    return range(high + 1, 65536)


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
        return True


def free_run(n: int, *, exclude: set[int] | frozenset[int] = frozenset()) -> int:
    """The first of ``n`` consecutive free ports, none of them in ``exclude``."""
    pool = _pool()
    for _ in range(1000):
        base = _rng.randrange(pool.start, pool.stop - n + 1)
        run = range(base, base + n)
        if exclude.isdisjoint(run) and all(_bindable(p) for p in run):
            return base
    raise OSError(f"no {n} consecutive free ports on {HOST} in {pool.start}..{pool.stop - 1}")


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports."""
    ports: list[int] = []
    while len(ports) < n:
        ports.append(free_run(1, exclude=set(ports)))
    return ports


def free_port() -> int:
    """One free port."""
    return free_run(1)
