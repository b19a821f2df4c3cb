"""A fault-injecting HTTP/1.1 proxy for 127.0.0.1, put in front of moto's S3 server.

:class:`~slatedb_core.testing.FaultyStore` injects faults above obstore, so obstore's own
retries, timeouts, connection pool and status-code mapping are never exercised by it. This proxy
injects them on the wire instead, where a real network would:

* ``error_before``: answer 500/503 without forwarding (the server never saw the request);
* ``error_after``: forward, let the server apply the request, answer 500/503 instead of its answer;
* ``reset_request``: read part of the request (headers, half the body), then reset the connection;
* ``reset_response``: forward, send part of the real answer, then reset;
* ``drop_after_apply``: forward, read the server's whole answer, then reset without sending a
  byte. For a conditional PUT this is the hard case: the write landed, and the client's retry
  meets its own object (412) and must resolve the ambiguity by content;
* ``latency``: an independent delay before forwarding.

One seeded RNG draws the fault of each request in arrival order, so a single-threaded client
replays exactly; with several threads the draws are the same but which request gets which depends
on scheduling. ``force`` queues faults for the next requests, for tests that need one on demand.

Bounded everywhere: a connection cap, idle keep-alive and upstream timeouts, a cap on buffered
(chunked) request bodies, and :meth:`FaultProxy.close` resets every open client connection before
joining the handler threads.
"""

from __future__ import annotations

import http.client
import random
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

_CHUNK = 64 * 1024
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "expect",  # BaseHTTPRequestHandler already answered 100-continue to the client
    }
)
_S3_ERROR_CODES = {500: "InternalError", 503: "SlowDown"}


class Fault(Enum):
    ERROR_BEFORE = "error_before"
    ERROR_AFTER = "error_after"
    RESET_REQUEST = "reset_request"
    RESET_RESPONSE = "reset_response"
    DROP_AFTER_APPLY = "drop_after_apply"
    STALL = "stall"


@dataclass(frozen=True, slots=True)
class FaultRates:
    """Per-request probabilities. The five faults exclude each other (their sum must be <= 1);
    latency is drawn independently. ``methods`` limits faults to those HTTP methods (None = all)."""

    error_before: float = 0.0
    error_after: float = 0.0
    reset_request: float = 0.0
    reset_response: float = 0.0
    drop_after_apply: float = 0.0
    stall: float = 0.0
    """Read the request, then answer nothing for ``stall_s`` and reset: a hung server, which
    only the client's own timeout ends. Not part of :meth:`uniform` (each costs a timeout)."""
    stall_s: float = 120.0
    latency: float = 0.0
    latency_s: tuple[float, float] = (0.002, 0.02)
    status_codes: tuple[int, ...] = (500, 503)
    methods: frozenset[str] | None = None

    def __post_init__(self) -> None:
        rates = [getattr(self, f.value) for f in Fault] + [self.latency]
        if any(not 0.0 <= r <= 1.0 for r in rates):
            raise ValueError(f"fault rates are probabilities in [0, 1]: {self}")
        if sum(getattr(self, f.value) for f in Fault) > 1.0:
            raise ValueError(f"the five fault rates must sum to at most 1: {self}")
        if not 0 < self.stall_s <= 600:
            raise ValueError(f"stall_s must be in (0, 600] s: {self.stall_s}")
        lo, hi = self.latency_s
        if lo < 0 or hi < lo or hi > 10:
            raise ValueError(f"latency_s must be a (low, high) range within [0, 10] s: {lo, hi}")
        if not self.status_codes or any(not 500 <= c <= 599 for c in self.status_codes):
            raise ValueError(f"status_codes must be 5xx codes: {self.status_codes}")

    @staticmethod
    def uniform(rate: float, latency_s: tuple[float, float] = (0.002, 0.02)) -> FaultRates:
        """Every fault kind, and latency, at ``rate`` each."""
        return FaultRates(
            error_before=rate,
            error_after=rate,
            reset_request=rate,
            reset_response=rate,
            drop_after_apply=rate,
            latency=rate,
            latency_s=latency_s,
        )


@dataclass(frozen=True, slots=True)
class ProxyLimits:
    max_connections: int = 64
    idle_timeout_s: float = 10.0
    upstream_timeout_s: float = 30.0
    max_buffered_body: int = 64 * 1024 * 1024


class FaultCounters:
    """Thread-safe tallies: requests (and per method), forwarded, each fault, latency."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def incr(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] = self._counts.get(name, 0) + n

    def __getitem__(self, name: str) -> int:
        with self._lock:
            return self._counts.get(name, 0)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(sorted(self._counts.items()))

    def faults(self) -> int:
        with self._lock:
            return sum(self._counts.get(f.value, 0) for f in Fault)

    def summary(self) -> str:
        snap = self.snapshot()
        kinds = ", ".join(f"{f.value}={snap.get(f.value, 0)}" for f in Fault)
        return (
            f"requests={snap.get('requests', 0)} forwarded={snap.get('forwarded', 0)} "
            f"faults={self.faults()} ({kinds}, latency={snap.get('latency', 0)})"
        )


@dataclass(frozen=True, slots=True)
class _Forced:
    fault: Fault
    method: str | None
    path_contains: str | None

    def matches(self, method: str, path: str) -> bool:
        return (self.method is None or self.method == method) and (
            self.path_contains is None or self.path_contains in path
        )


@dataclass
class _Plan:
    fault: Fault | None
    delay_s: float
    status: int


@dataclass
class _State:
    rates: FaultRates
    rng: random.Random
    counters: FaultCounters = field(default_factory=FaultCounters)
    forced: list[_Forced] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def plan(self, method: str, path: str) -> _Plan:
        with self.lock:
            rates = self.rates
            # Draw the same number of values for every request so the sequence stays aligned.
            u_fault, u_latency, u_delay, u_status = (self.rng.random() for _ in range(4))
            status = rates.status_codes[int(u_status * len(rates.status_codes))]
            delay = 0.0
            if u_latency < rates.latency:
                lo, hi = rates.latency_s
                delay = lo + (hi - lo) * u_delay
            for i, forced in enumerate(self.forced):
                if forced.matches(method, path):
                    del self.forced[i]
                    return _Plan(forced.fault, delay, status)
            if rates.methods is not None and method not in rates.methods:
                return _Plan(None, delay, status)
            acc = 0.0
            for f in Fault:
                acc += getattr(rates, f.value)
                if u_fault < acc:
                    return _Plan(f, delay, status)
            return _Plan(None, delay, status)


class _Server(ThreadingHTTPServer):
    daemon_threads = False
    block_on_close = True

    def __init__(self, state: _State, upstream: tuple[str, int], limits: ProxyLimits) -> None:
        self.state = state
        self.upstream = upstream
        self.limits = limits
        self.slots = threading.BoundedSemaphore(limits.max_connections)
        self.open_sockets: set[socket.socket] = set()
        self.closing = threading.Event()
        self.sockets_lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(timeout=self.limits.idle_timeout_s):
            self.state.counters.incr("refused")
            self.shutdown_request(request)
            return
        with self.sockets_lock:
            self.open_sockets.add(request)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(request)

    def _release(self, request: socket.socket) -> None:
        with self.sockets_lock:
            self.open_sockets.discard(request)
        self.slots.release()

    def reset_all(self) -> None:
        with self.sockets_lock:
            socks = list(self.open_sockets)
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _reset(sock: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0), as a crashed peer or middlebox would."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class _ConnectionReset(Exception):
    """Raised inside a handler to end the connection with an RST."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        # Bounds the wait for the next request on an idle keep-alive connection.
        self.connection.settimeout(self.server.limits.idle_timeout_s)

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        return

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except _ConnectionReset:
            self.close_connection = True
            _reset(self.connection)
        except (OSError, ValueError, http.client.HTTPException):  # I/O, bad framing
            self.close_connection = True

    def do_GET(self) -> None:
        self._proxy()

    do_HEAD = do_PUT = do_POST = do_DELETE = do_PATCH = do_OPTIONS = do_GET

    # ---- the request -----------------------------------------------------------------------
    def _body_chunks(self, limit: int | None = None) -> Iterator[bytes]:
        """The request body as it arrives, at most ``limit`` bytes (None = all)."""
        te = self.headers.get("Transfer-Encoding", "").lower()
        if "chunked" in te:
            body = self._read_chunked()
            yield body if limit is None else body[:limit]
            return
        remaining = int(self.headers.get("Content-Length") or 0)
        if limit is not None:
            remaining = min(remaining, limit)
        while remaining > 0:
            chunk = self.rfile.read(min(_CHUNK, remaining))
            if not chunk:
                raise _ConnectionReset()
            remaining -= len(chunk)
            yield chunk

    def _read_chunked(self) -> bytes:
        out = bytearray()
        while True:
            size_line = self.rfile.readline(1024)
            size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline(1024).strip():  # trailers
                    pass
                return bytes(out)
            if len(out) + size > self.server.limits.max_buffered_body:
                raise _ConnectionReset()
            out += self.rfile.read(size)
            self.rfile.readline(1024)

    def _proxy(self) -> None:
        state = self.server.state
        counters = state.counters
        counters.incr("requests")
        counters.incr(f"requests_{self.command}")
        plan = state.plan(self.command, self.path)
        if plan.delay_s > 0:
            counters.incr("latency")
            time.sleep(plan.delay_s)
        if plan.fault is Fault.RESET_REQUEST:
            counters.incr(Fault.RESET_REQUEST.value)
            length = int(self.headers.get("Content-Length") or 0)
            for _ in self._body_chunks(limit=length // 2):
                pass
            raise _ConnectionReset()
        if plan.fault is Fault.STALL:
            for _ in self._body_chunks():
                pass
            counters.incr(Fault.STALL.value)
            self.server.closing.wait(state.rates.stall_s)
            raise _ConnectionReset()
        if plan.fault is Fault.ERROR_BEFORE:
            counters.incr(Fault.ERROR_BEFORE.value)
            for _ in self._body_chunks():  # consume it so the connection stays usable
                pass
            self._send_error(plan.status)
            return
        conn, upstream = self._forward()
        counters.incr("forwarded")
        try:
            self._answer(upstream, plan)
        finally:
            upstream.close()
            conn.close()

    def _forward(self) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        host, port = self.server.upstream
        conn = http.client.HTTPConnection(host, port, timeout=self.server.limits.upstream_timeout_s)
        conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
        chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
        body: bytes | None = self._read_chunked() if chunked else None
        for name, value in self.headers.items():
            if name.lower() in _HOP_BY_HOP or (chunked and name.lower() == "content-length"):
                continue
            conn.putheader(name, value)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.putheader("Connection", "close")
        conn.endheaders()
        if body is not None:
            conn.send(body)
        else:
            for chunk in self._body_chunks():
                conn.send(chunk)
        return conn, conn.getresponse()

    # ---- the answer ------------------------------------------------------------------------
    def _answer(self, upstream: http.client.HTTPResponse, plan: _Plan) -> None:
        counters = self.server.state.counters
        if plan.fault is Fault.DROP_AFTER_APPLY:
            upstream.read()  # the server has applied it and answered; the client never hears
            counters.incr(Fault.DROP_AFTER_APPLY.value)
            raise _ConnectionReset()
        if plan.fault is Fault.ERROR_AFTER:
            upstream.read()
            counters.incr(Fault.ERROR_AFTER.value)
            self._send_error(plan.status)
            return
        head = self._response_head(upstream)
        if plan.fault is Fault.RESET_RESPONSE:
            counters.incr(Fault.RESET_RESPONSE.value)
            length = upstream.length or 0
            if length == 0 or self.command == "HEAD":
                self.wfile.write(head[: len(head) // 2])
            else:
                self.wfile.write(head)
                sent = 0
                while sent < length // 2:
                    chunk = upstream.read(min(_CHUNK, length // 2 - sent))
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    sent += len(chunk)
            self.wfile.flush()
            raise _ConnectionReset()
        self.wfile.write(head)
        while True:
            chunk = upstream.read(_CHUNK)
            if not chunk:
                break
            self.wfile.write(chunk)
        self.wfile.flush()

    def _response_head(self, upstream: http.client.HTTPResponse) -> bytes:
        lines = [f"HTTP/1.1 {upstream.status} {upstream.reason}"]
        has_length = False
        for name, value in upstream.getheaders():
            low = name.lower()
            if low in _HOP_BY_HOP:
                continue
            has_length = has_length or low == "content-length"
            lines.append(f"{name}: {value}")
        bodyless = self.command == "HEAD" or upstream.status in (204, 304)
        if not has_length and not bodyless:
            # Upstream framed it some other way (chunked or close-delimited): delimit by close.
            self.close_connection = True
        if self.close_connection:
            lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _send_error(self, status: int) -> None:
        code = _S3_ERROR_CODES.get(status, "ServiceUnavailable")
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>injected by the fault proxy</Message>"
            "<RequestId>fault-proxy</RequestId></Error>"
        ).encode()
        self.send_response_only(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()


class FaultProxy:
    """Listens on 127.0.0.1 (a free port) and forwards to ``upstream`` with faults injected.

    Use as a context manager, or call :meth:`close`. ``rates`` may be swapped while running
    (:meth:`set_rates`), e.g. to set up a database fault-free and then turn the faults on.
    """

    def __init__(
        self,
        upstream: tuple[str, int],
        rates: FaultRates | None = None,
        *,
        seed: int = 0,
        limits: ProxyLimits | None = None,
    ) -> None:
        if upstream[0] not in ("127.0.0.1", "localhost"):
            raise ValueError(f"the fault proxy only forwards to loopback, not {upstream[0]!r}")
        self.seed = seed
        self._state = _State(rates or FaultRates(), random.Random(seed))
        self._server = _Server(self._state, upstream, limits or ProxyLimits())
        self.port: int = self._server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"fault-proxy-{self.port}",
            daemon=True,
        )
        self._thread.start()
        self._closed = False

    @property
    def counters(self) -> FaultCounters:
        return self._state.counters

    @property
    def rates(self) -> FaultRates:
        return self._state.rates

    def set_rates(self, rates: FaultRates) -> None:
        with self._state.lock:
            self._state.rates = rates

    def force(
        self,
        fault: Fault,
        times: int = 1,
        *,
        method: str | None = None,
        path_contains: str | None = None,
    ) -> None:
        """Inject ``fault`` into the next ``times`` requests that match ``method`` and contain
        ``path_contains`` in their request target (None = any), whatever the rates say."""
        with self._state.lock:
            self._state.forced.extend([_Forced(fault, method, path_contains)] * times)

    def pending_forced(self) -> int:
        """Forced faults not yet injected."""
        with self._state.lock:
            return len(self._state.forced)

    def close(self, timeout_s: float = 30.0) -> None:
        if self._closed:
            return
        self._closed = True
        self._server.closing.set()
        self._server.shutdown()
        self._server.reset_all()
        self._thread.join(timeout_s)
        self._server.server_close()  # joins the handler threads; their sockets are shut down

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
