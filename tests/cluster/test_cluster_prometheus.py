"""``make cluster`` runs the fleet exporter and Debian's Prometheus server scraping it (issue 40,
item 11): started by the launcher like every other service (on 127.0.0.1, TSDB under the cluster
folder, ``LAKEHOUSE_CLUSTER_DIR`` in their environment), shown by ``status`` with their URLs,
stopped by ``stop``; the server's own HTTP API answers with a figure of a database created on the
cluster's S3 store and reports its target up. Without the ``prometheus`` binary the cluster starts
without it and says so in one line. Only SeaweedFS of the other services: the full cluster's
scrape is checked in test_cluster.py (``make cluster-test``)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import lakehouse_demo.cluster.prometheus as prom
from lakehouse_demo.cluster import __main__ as cluster_cli
from lakehouse_demo.cluster.processes import alive, marked
from lakehouse_demo.cluster.prometheus import find_prometheus, query, target_health
from lakehouse_demo.cluster.settings import REPO, ClusterSettings, load_state, read_env_file
from slatedb_core import Db, open_store

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

CLUSTER = [sys.executable, "-m", "lakehouse_demo.cluster"]
SERVICES = "s3,metrics-exporter,prometheus"


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLUSTER, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO
    )


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Iterator[Path]:
    dir = tmp_path / "cluster"
    try:
        yield dir
    finally:
        _cli("stop", "--dir", str(dir))


@pytest.mark.skipif(find_prometheus() is None, reason="no prometheus binary (apt-get install)")
def test_cluster_prometheus_scrapes_the_exporter(cluster_dir: Path) -> None:
    d = str(cluster_dir)
    first = _cli("start", "--dir", d, "--ports", "auto", "--only", "s3")
    assert first.returncode == 0, first.stdout + first.stderr
    env = read_env_file(cluster_dir / "cluster.env")
    store = open_store(
        env["SLATEDB_STORE_URL"],
        endpoint=env["AWS_ENDPOINT_URL"],
        region=env["AWS_REGION"],
        access_key_id=env["AWS_ACCESS_KEY_ID"],
        secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        allow_http="true",
    )
    with Db.open("promdb", store) as db:
        for i in range(3):
            db.put(b"k%d" % i, b"v")
            db.flush_memtable()

    res = _cli("start", "--dir", d, "--only", SERVICES)
    assert res.returncode == 0, res.stdout + res.stderr
    ports, state = load_state(cluster_dir)
    assert ports is not None
    s = ClusterSettings(dir=cluster_dir, ports=ports)
    base = f"http://127.0.0.1:{ports.prometheus}"
    assert s.prometheus_url == base
    for name in ("metrics-exporter", "prometheus"):
        assert alive(state[name]), name
    assert f"prometheus         up    {base}" in res.stdout, res.stdout
    assert f"http://127.0.0.1:{ports.metrics}/metrics" in res.stdout, res.stdout
    # the TSDB and its configuration are the cluster's, private like the rest of its folder
    assert (cluster_dir / "prometheus" / "data").is_dir()
    assert (cluster_dir / "prometheus").stat().st_mode & 0o077 == 0

    # a real scrape by that server: the target is up and the database's figure is there
    health = None
    for _ in range(120):
        health = target_health(base)
        if health == "up":
            break
        time.sleep(0.5)
    assert health == "up", health
    got = query(base, 'slatedb_database_l0_ssts{database="promdb"}', timeout_s=90)
    assert got and got[0]["value"][1] == "3", got  # type: ignore[index]
    assert got[0]["metric"]["job"] == "slatedb-fleet"  # type: ignore[index]

    # both listen on loopback only
    listeners = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
    for name in ("metrics-exporter", "prometheus"):
        lines = [ln for ln in listeners.splitlines() if f"pid={state[name]['pid']}," in ln]
        assert lines, (name, listeners)
        for line in lines:
            assert line.split()[3].startswith("127.0.0.1:"), line

    status = _cli("status", "--dir", d)
    assert f"{base}" in status.stdout and f":{ports.metrics}/metrics" in status.stdout

    stopped = _cli("stop", "--dir", d)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "prometheus         stopped" in stopped.stdout, stopped.stdout
    assert "metrics-exporter   stopped" in stopped.stdout, stopped.stdout
    assert not marked(cluster_dir.resolve()), "a process of the cluster outlived stop"


def test_cluster_starts_without_prometheus(
    cluster_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No ``prometheus`` binary (not on PATH, not at Debian's path): the cluster starts, says so
    in one line, and the exporter still runs."""
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    monkeypatch.setattr(prom, "DEBIAN_BINARY", REPO / "no-such-prometheus")
    assert find_prometheus() is None
    try:
        code = cluster_cli.main(
            ["start", "--dir", str(cluster_dir), "--ports", "auto", "--only", SERVICES]
        )
        out = capsys.readouterr().out
        assert code == 0, out
        skipped = [ln for ln in out.splitlines() if ln.startswith("  prometheus ")]
        assert len(skipped) == 1 and "not installed" in skipped[0], out
        _, state = load_state(cluster_dir.resolve())
        assert "prometheus" not in state and alive(state["metrics-exporter"]), state
        cluster_cli.main(["status", "--dir", str(cluster_dir)])
        status = capsys.readouterr().out
        assert "not installed" in status, status
    finally:
        cluster_cli.main(["stop", "--dir", str(cluster_dir)])
