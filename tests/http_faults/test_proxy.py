"""The fault proxy itself, observed by a plain HTTP client in front of moto's S3 server.

moto accepts unsigned path-style requests, so ``http.client`` is enough to see each fault the way
obstore would: a status code, a reset, a truncated body, or a write that landed unanswered.
"""

from __future__ import annotations

import http.client
import os
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.conftest import MotoS3
from tests.http_faults.proxy import Fault, FaultProxy, FaultRates, ProxyLimits

pytestmark = pytest.mark.s3

_CONN_ERRORS = (ConnectionError, http.client.HTTPException, socket.timeout)
# moto answers anonymous GETs of private objects with 403 but does not verify signatures: any
# well-formed Authorization header makes a request "authenticated".
_AUTH = {
    "Authorization": "AWS4-HMAC-SHA256 Credential=testing/20250101/us-east-1/s3/aws4_request, "
    "SignedHeaders=host, Signature=0"
}


@pytest.fixture
def bucket(moto_s3: MotoS3) -> str:
    return moto_s3.new_bucket()


@pytest.fixture
def proxy(moto_s3: MotoS3) -> Iterator[FaultProxy]:
    with FaultProxy(("127.0.0.1", moto_s3.port), seed=7) as p:
        yield p


def _request(
    proxy: FaultProxy,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
    try:
        conn.request(method, path, body=body, headers={**_AUTH, **(headers or {})})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _exists(moto_s3: MotoS3, bucket: str, key: str) -> bool:
    try:
        moto_s3.client.head_object(Bucket=bucket, Key=key)
    except moto_s3.client.exceptions.ClientError:
        return False
    return True


def test_proxy_forwards_requests_unchanged_and_keeps_connections_alive(
    proxy: FaultProxy, bucket: str, moto_s3: MotoS3
) -> None:
    data = os.urandom(300_000)
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
    try:
        conn.request("PUT", f"/{bucket}/a", body=data, headers=_AUTH)
        put = conn.getresponse()
        assert put.status == 200
        put.read()
        local_port = conn.sock.getsockname()[1]
        conn.request("GET", f"/{bucket}/a", headers=_AUTH)
        got = conn.getresponse()
        assert got.status == 200 and got.read() == data
        assert conn.sock.getsockname()[1] == local_port  # the same connection served both
        conn.request("HEAD", f"/{bucket}/a", headers=_AUTH)
        head = conn.getresponse()
        assert head.status == 200 and int(head.headers["Content-Length"]) == len(data)
        head.read()
    finally:
        conn.close()
    assert moto_s3.client.get_object(Bucket=bucket, Key="a")["Body"].read() == data
    snap = proxy.counters.snapshot()
    assert snap["requests"] == snap["forwarded"] == 3
    assert proxy.counters.faults() == 0


def test_chunked_request_bodies_are_forwarded(proxy: FaultProxy, bucket: str) -> None:
    parts = [b"x" * 1000, b"y" * 5, b"z" * 70_000]
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
    try:
        conn.request("PUT", f"/{bucket}/c", body=iter(parts), headers=_AUTH, encode_chunked=True)
        assert conn.getresponse().status == 200
    finally:
        conn.close()
    assert _request(proxy, "GET", f"/{bucket}/c") == (200, b"".join(parts))


def test_error_before_answers_5xx_without_forwarding(
    proxy: FaultProxy, bucket: str, moto_s3: MotoS3
) -> None:
    proxy.force(Fault.ERROR_BEFORE)
    status, body = _request(proxy, "PUT", f"/{bucket}/k", body=b"v")
    assert status in (500, 503) and b"<Error>" in body
    assert not _exists(moto_s3, bucket, "k")
    assert proxy.counters[Fault.ERROR_BEFORE.value] == 1 and proxy.counters["forwarded"] == 0


def test_error_after_applies_the_request_and_answers_5xx(
    proxy: FaultProxy, bucket: str, moto_s3: MotoS3
) -> None:
    proxy.force(Fault.ERROR_AFTER)
    status, _ = _request(proxy, "PUT", f"/{bucket}/k", body=b"v")
    assert status in (500, 503)
    assert _exists(moto_s3, bucket, "k")
    assert proxy.counters[Fault.ERROR_AFTER.value] == 1 and proxy.counters["forwarded"] == 1


def test_reset_request_cuts_the_upload_and_nothing_is_written(
    proxy: FaultProxy, bucket: str, moto_s3: MotoS3
) -> None:
    proxy.force(Fault.RESET_REQUEST)
    with pytest.raises(_CONN_ERRORS):
        _request(proxy, "PUT", f"/{bucket}/k", body=os.urandom(200_000))
    assert not _exists(moto_s3, bucket, "k")
    assert proxy.counters[Fault.RESET_REQUEST.value] == 1 and proxy.counters["forwarded"] == 0


def test_reset_response_truncates_the_body(proxy: FaultProxy, bucket: str) -> None:
    data = os.urandom(500_000)
    assert _request(proxy, "PUT", f"/{bucket}/big", body=data)[0] == 200
    proxy.force(Fault.RESET_RESPONSE)
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
    try:
        conn.request("GET", f"/{bucket}/big", headers=_AUTH)
        resp = conn.getresponse()  # the head arrives whole
        assert resp.status == 200 and int(resp.headers["Content-Length"]) == len(data)
        with pytest.raises(_CONN_ERRORS):
            resp.read()
    finally:
        conn.close()
    assert proxy.counters[Fault.RESET_RESPONSE.value] == 1


def test_reset_response_of_a_bodyless_answer_cuts_its_head(
    proxy: FaultProxy, bucket: str, moto_s3: MotoS3
) -> None:
    proxy.force(Fault.RESET_RESPONSE)
    with pytest.raises(_CONN_ERRORS):
        _request(proxy, "PUT", f"/{bucket}/k", body=b"v")
    assert _exists(moto_s3, bucket, "k")  # forwarded first, so it was applied


def test_dropped_answer_to_a_conditional_put_leaves_the_write_applied(
    proxy: FaultProxy, bucket: str, moto_s3: MotoS3
) -> None:
    """The ambiguity our sequenced creates must resolve: the create landed, the client heard
    nothing, and its retry meets its own object as 412 Precondition Failed."""
    proxy.force(Fault.DROP_AFTER_APPLY)
    create = {"If-None-Match": "*"}
    with pytest.raises(_CONN_ERRORS):
        _request(proxy, "PUT", f"/{bucket}/m", body=b"mine", headers=create)
    assert moto_s3.client.get_object(Bucket=bucket, Key="m")["Body"].read() == b"mine"
    assert _request(proxy, "PUT", f"/{bucket}/m", body=b"mine", headers=create)[0] == 412
    assert proxy.counters[Fault.DROP_AFTER_APPLY.value] == 1 and proxy.counters["forwarded"] == 2


def test_latency_delays_requests(proxy: FaultProxy, bucket: str) -> None:
    proxy.set_rates(FaultRates(latency=1.0, latency_s=(0.2, 0.2)))
    started = time.monotonic()
    assert _request(proxy, "GET", f"/{bucket}/missing")[0] == 404
    assert time.monotonic() - started >= 0.2
    assert proxy.counters["latency"] == 1 and proxy.counters.faults() == 0


def test_stall_answers_nothing_until_its_time_is_up(proxy: FaultProxy, bucket: str) -> None:
    proxy.set_rates(FaultRates(stall_s=0.5))
    proxy.force(Fault.STALL)
    started = time.monotonic()
    with pytest.raises(_CONN_ERRORS):
        _request(proxy, "GET", f"/{bucket}/missing")
    assert time.monotonic() - started >= 0.5
    assert proxy.counters[Fault.STALL.value] == 1 and proxy.counters["forwarded"] == 0


def test_close_ends_a_stall_promptly(moto_s3: MotoS3, bucket: str) -> None:
    p = FaultProxy(("127.0.0.1", moto_s3.port), FaultRates(stall=1.0, stall_s=300))
    errors: list[BaseException] = []

    def client() -> None:
        try:
            _request(p, "GET", f"/{bucket}/missing")
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=client)
    t.start()
    deadline = time.monotonic() + 10
    while p.counters[Fault.STALL.value] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    p.close()
    t.join(10)
    assert time.monotonic() - started < 5 and not t.is_alive()
    assert errors and isinstance(errors[0], _CONN_ERRORS)


def test_methods_limit_which_requests_get_faults(proxy: FaultProxy, bucket: str) -> None:
    proxy.set_rates(FaultRates(error_before=1.0, methods=frozenset({"PUT"})))
    assert _request(proxy, "GET", f"/{bucket}/missing")[0] == 404
    assert _request(proxy, "PUT", f"/{bucket}/k", body=b"v")[0] in (500, 503)


def _statuses(moto_s3: MotoS3, bucket: str, seed: int, n: int) -> tuple[list[int], FaultProxy]:
    rates = FaultRates(error_before=0.2, error_after=0.1)
    with FaultProxy(("127.0.0.1", moto_s3.port), rates, seed=seed) as p:
        return [_request(p, "GET", f"/{bucket}/missing")[0] for _ in range(n)], p


def test_rates_are_seeded_and_counted(moto_s3: MotoS3, bucket: str) -> None:
    first, p1 = _statuses(moto_s3, bucket, seed=11, n=200)
    again, _ = _statuses(moto_s3, bucket, seed=11, n=200)
    other, _ = _statuses(moto_s3, bucket, seed=12, n=200)
    assert first == again and first != other
    injected = sum(s >= 500 for s in first)
    assert 30 <= injected <= 90  # ~60 expected at 30 %
    snap = p1.counters.snapshot()
    assert snap["error_before"] + snap["error_after"] == injected
    assert snap["requests"] == 200 and snap["forwarded"] == 200 - snap["error_before"]
    assert {s for s in first if s < 500} == {404}


def test_concurrent_clients_all_get_their_answers(proxy: FaultProxy, bucket: str) -> None:
    errors: list[BaseException] = []

    def client(i: int) -> None:
        try:
            for j in range(15):
                body = f"{i}-{j}".encode() * 100
                assert _request(proxy, "PUT", f"/{bucket}/t{i}/{j}", body=body)[0] == 200
                assert _request(proxy, "GET", f"/{bucket}/t{i}/{j}") == (200, body)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and not any(t.is_alive() for t in threads)
    assert proxy.counters["requests"] == 6 * 15 * 2


def test_close_ends_idle_keep_alive_connections_promptly(moto_s3: MotoS3, bucket: str) -> None:
    p = FaultProxy(("127.0.0.1", moto_s3.port), limits=ProxyLimits(idle_timeout_s=60))
    conn = http.client.HTTPConnection("127.0.0.1", p.port, timeout=10)
    conn.request("GET", f"/{bucket}/missing")
    conn.getresponse().read()  # the connection now idles in keep-alive
    started = time.monotonic()
    p.close()
    assert time.monotonic() - started < 5
    conn.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", p.port), timeout=2).close()


def test_rates_are_validated() -> None:
    with pytest.raises(ValueError):
        FaultRates(error_before=0.6, error_after=0.6)
    with pytest.raises(ValueError):
        FaultRates(latency=1.5)
    with pytest.raises(ValueError):
        FaultRates(status_codes=(404,))
    with pytest.raises(ValueError):
        FaultProxy(("10.0.0.1", 80))


def test_malformed_request_closes_only_its_connection(proxy: FaultProxy, bucket: str) -> None:
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as s:
        s.sendall(
            f"PUT /{bucket}/k HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n".encode()
        )
        assert s.recv(1024) == b""  # closed without an answer
    assert _request(proxy, "GET", f"/{bucket}/missing")[0] == 404
