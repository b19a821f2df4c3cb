"""A service's ready check answers False, never raises, while the service is still coming up.

Found by ``make cluster-test`` (issue 40, item 11 work): the Spark master's web UI answered its
``/json/`` with a 200 and an empty body once during start-up, and the master's ready check raised
``JSONDecodeError``, which ended ``cluster start`` with a traceback instead of polling again. A
real HTTP server on 127.0.0.1 gives that answer here."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from lakehouse_demo.cluster.services import services
from lakehouse_demo.cluster.settings import ClusterSettings, Ports


class _Empty(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def empty_200() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Empty)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def test_spark_ready_checks_poll_on_an_empty_answer(tmp_path: Path, empty_200: int) -> None:
    s = ClusterSettings(dir=tmp_path, ports=Ports(spark_master_ui=empty_200))
    checked = [svc for svc in services(s) if svc.name.startswith("spark-")]
    assert len(checked) == 3
    for svc in checked:
        assert svc.ready(s, {}) is False, svc.name
