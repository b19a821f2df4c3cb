"""A real scrape of ``slatedb fleet serve-metrics`` by Debian's Prometheus server (issue 40,
item 11): both on 127.0.0.1, the server configured as ``make cluster`` configures it
(lakehouse_demo/cluster/prometheus.py), its HTTP API queried for the figures. Skipped only when
the ``prometheus`` binary is absent (apt-get install -y prometheus)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from lakehouse_demo.cluster.prometheus import (
    exporter_command,
    find_prometheus,
    prometheus_command,
    query,
    target_health,
    write_config,
)
from slatedb_core.testing.ports import free_port
from tests.fleet.fleet_steps import REPO, make_fleet

BINARY = find_prometheus()


@pytest.mark.slow  # about 6.5 s: a Prometheus server starts and scrapes twice
@pytest.mark.skipif(BINARY is None, reason="no prometheus binary (apt-get install prometheus)")
def test_prometheus_scrapes_the_exporter(tmp_path: Path) -> None:
    assert BINARY is not None
    url = (tmp_path / "store").as_uri()
    make_fleet(url)
    exporter_port, prom_port = free_port(), free_port()
    env = {**os.environ, "SLATEDB_URL": url}
    procs: list[subprocess.Popen[bytes]] = []
    log = (tmp_path / "log").open("wb")
    try:
        procs.append(
            subprocess.Popen(
                exporter_command("127.0.0.1", exporter_port, min_interval_s=0.5),
                env=env,
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        config = write_config(
            tmp_path / "prometheus" / "prometheus.yml",
            f"127.0.0.1:{exporter_port}",
            interval_s=1,
        )
        procs.append(
            subprocess.Popen(
                prometheus_command(
                    BINARY, config, tmp_path / "prometheus" / "data", f"127.0.0.1:{prom_port}"
                ),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        base = f"http://127.0.0.1:{prom_port}"
        deadline = time.monotonic() + 60
        while target_health(base) != "up":
            assert time.monotonic() < deadline, (tmp_path / "log").read_text()[-3000:]
            assert all(p.poll() is None for p in procs), (tmp_path / "log").read_text()[-3000:]
            time.sleep(0.5)
        live = query(base, 'slatedb_database_state{database="orders",state="live"}')
        assert live and live[0]["value"][1] == "1"  # type: ignore[index]
        runs = query(base, 'slatedb_database_sorted_runs{database="orders"}')
        assert runs and runs[0]["value"][1] == "1"  # type: ignore[index]
        dbs = query(base, "slatedb_fleet_databases")
        assert dbs and dbs[0]["value"][1] == "2"  # type: ignore[index]
        requests = query(base, 'slatedb_store_requests_total{op="list"}')
        assert requests and float(requests[0]["value"][1]) > 0  # type: ignore[index]
        assert re.fullmatch(r"127\.0\.0\.1:\d+", str(live[0]["metric"]["instance"]))  # type: ignore[index]
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        log.close()
    assert procs[0].returncode == 0  # the exporter stops cleanly on SIGTERM
