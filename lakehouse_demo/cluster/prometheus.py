"""Prometheus for ``make cluster``: the fleet exporter (``slatedb fleet serve-metrics``) and a
Prometheus server of Debian's ``prometheus`` package scraping it, both on 127.0.0.1 (issue 40,
item 11; docs/operations.md "Prometheus and Grafana").

Debian's package installs a systemd service; it is not used: the binary runs directly with a
``prometheus.yml`` generated under the cluster folder (``<dir>/prometheus/``) and its TSDB there
too, like every other service of the cluster (its own session, ``LAKEHOUSE_CLUSTER_DIR`` in its
environment, stopped by ``make cluster-stop``).
"""

from __future__ import annotations

import json
import shutil
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "PROMETHEUS_MISSING",
    "exporter_command",
    "find_prometheus",
    "prometheus_command",
    "query",
    "target_health",
    "write_config",
]

PROMETHEUS_MISSING = (
    "the Prometheus server (/usr/bin/prometheus) is not installed; install Debian's prometheus "
    "package (apt-get install -y prometheus)"
)
JOB = "slatedb-fleet"
DEBIAN_BINARY = Path("/usr/bin/prometheus")


def find_prometheus() -> str | None:
    """The ``prometheus`` binary (PATH first, then Debian's /usr/bin/prometheus), or None."""
    found = shutil.which("prometheus")
    if found:
        return found
    return str(DEBIAN_BINARY) if DEBIAN_BINARY.is_file() else None


def write_config(path: Path, exporter: str, *, interval_s: int = 15) -> Path:
    """A ``prometheus.yml`` scraping the exporter at ``exporter`` (``host:port``) every
    ``interval_s`` seconds (JSON is YAML: no YAML writer needed)."""
    config = {
        "global": {"scrape_interval": f"{interval_s}s", "evaluation_interval": f"{interval_s}s"},
        "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": [exporter]}]}],
    }
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path


def prometheus_command(binary: str, config: Path, data: Path, listen: str) -> list[str]:
    """The server on ``listen`` (``127.0.0.1:port``), its TSDB in ``data``."""
    return [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={data}",
        f"--web.listen-address={listen}",
        "--storage.tsdb.retention.time=15d",
    ]


def exporter_command(
    host: str, port: int, *, min_interval_s: float = 15.0, discover_interval_s: float = 300.0
) -> list[str]:
    """``slatedb fleet serve-metrics`` of this interpreter; the store URL goes in its environment
    (SLATEDB_URL), never on a command line that ``ps`` shows."""
    return [
        sys.executable,
        "-m",
        "slatedb_core.cli.main",
        "fleet",
        "serve-metrics",
        "--host",
        host,
        "--port",
        str(port),
        "--min-interval",
        str(min_interval_s),
        "--discover-interval",
        str(discover_interval_s),
    ]


def _get(base: str, path: str, params: Mapping[str, str]) -> dict[str, object]:
    url = f"{base}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.load(r)
    assert isinstance(body, dict)
    return body


def target_health(base: str) -> str | None:
    """The exporter target's health (``up``, ``down``, ``unknown``) as the server at ``base``
    (``http://127.0.0.1:port``) reports it; None when it does not answer."""
    try:
        body = _get(base, "/api/v1/targets", {"state": "active"})
    except (OSError, ValueError):
        return None
    data = body.get("data")
    targets = data.get("activeTargets", []) if isinstance(data, dict) else []
    for t in targets:
        if isinstance(t, dict) and t.get("labels", {}).get("job") == JOB:
            health = t.get("health")
            return str(health) if health is not None else None
    return None


def query(base: str, expr: str, *, timeout_s: float = 60.0) -> list[dict[str, object]]:
    """The instant vector of ``expr`` from the server at ``base``, once it is not empty."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            body = _get(base, "/api/v1/query", {"query": expr})
            data = body.get("data")
            result = data.get("result") if isinstance(data, dict) else None
            if isinstance(result, list) and result:
                return result
        except (OSError, urllib.error.URLError, ValueError):
            pass
        if time.monotonic() > deadline:
            return []
        time.sleep(0.5)
