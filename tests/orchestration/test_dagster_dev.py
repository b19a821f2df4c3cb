"""End to end: ``dagster dev -w workspace.yaml`` on 127.0.0.1, a compaction run launched through
GraphQL against a real database, and every process the test started gone afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devtools.devserver import stop_dagster_dev, wait_for
from devtools.sample_data import write_database
from slatedb_core import open_store
from slatedb_core.health import inspect_database
from slatedb_core.testing.ports import free_port

REPO = Path(__file__).resolve().parents[2]
DAGSTER = Path(sys.executable).with_name("dagster")

pytestmark = pytest.mark.slow


@dataclass
class Server:
    url: str
    home: Path
    proc: subprocess.Popen[bytes]

    def graphql(self, query: str, variables: dict[str, Any] | None = None) -> Any:
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        request = urllib.request.Request(
            f"{self.url}/graphql", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            payload = json.loads(response.read())
        assert "errors" not in payload, payload
        return payload["data"]


def _wait(predicate: Any, what: str, timeout_s: float, proc: subprocess.Popen[bytes]) -> Any:
    return wait_for(predicate, what, timeout_s, proc)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    store_dir = tmp_path / "store"
    write_database(
        open_store(str(store_dir)), "orders", prefix="order-", l0_ssts=5, rows_per_sst=200
    )
    config = tmp_path / "slatedb.yaml"
    config.write_text(
        f"store: {{url: '{store_dir.as_uri()}'}}\n"
        "managed: {databases: [orders], l0_max_ssts: 4, gc_min_age: 0s}\n"
        "sensors_running: false\n"
    )
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    port = free_port()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "SLATEDB_ORCHESTRATION_CONFIG": str(config),
    }
    log = (tmp_path / "dagster_dev.log").open("wb")
    proc = subprocess.Popen(
        [str(DAGSTER), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: killpg reaches webserver and daemon
    )
    try:
        yield Server(f"http://127.0.0.1:{port}", home, proc)
    finally:
        # SIGTERM the group (dagster dev stops its webserver, daemon and code servers), SIGKILL
        # after 10s; then SIGKILL whatever still has our DAGSTER_HOME in its environment.
        left = stop_dagster_dev(proc, str(home), timeout_s=10)
        log.close()
        assert left == [], f"processes left running after dagster dev stopped: {left}"


LOCATIONS = """
{ repositoriesOrError { ... on RepositoryConnection { nodes { name location { name } } } } }
"""
ADD_PARTITION = """
mutation($selector: RepositorySelector!, $name: String!, $key: String!) {
  addDynamicPartition(repositorySelector: $selector, partitionsDefName: $name, partitionKey: $key)
  { __typename ... on PythonError { message } }
}
"""
LAUNCH = """
mutation($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on InvalidSubsetError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}
"""
STATUS = "query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }"


def test_dagster_dev_runs_compaction_through_graphql(server: Server, tmp_path: Path) -> None:
    started = time.monotonic()
    _wait(
        lambda: urllib.request.urlopen(f"{server.url}/server_info", timeout=5).status == 200,
        "/server_info",
        90,
        server.proc,
    )
    nodes = _wait(
        lambda: server.graphql(LOCATIONS)["repositoriesOrError"].get("nodes"),
        "the code location",
        90,
        server.proc,
    )
    (repo,) = nodes
    selector = {"repositoryLocationName": repo["location"]["name"], "repositoryName": repo["name"]}
    added = server.graphql(
        ADD_PARTITION, {"selector": selector, "name": "slatedb_databases", "key": "orders"}
    )
    assert added["addDynamicPartition"]["__typename"] == "AddDynamicPartitionSuccess", added
    launched = server.graphql(
        LAUNCH,
        {
            "params": {
                "selector": {**selector, "jobName": "compaction_job"},
                "executionMetadata": {"tags": [{"key": "dagster/partition", "value": "orders"}]},
            }
        },
    )["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["run"]["runId"]
    terminal = {"SUCCESS", "FAILURE", "CANCELED"}
    status = _wait(
        lambda: (
            (s := server.graphql(STATUS, {"id": run_id})["runOrError"].get("status")) in terminal
            and s
        ),
        "the run to finish",
        120,
        server.proc,
    )
    assert status == "SUCCESS", (tmp_path / "dagster_dev.log").read_text()[-3000:]
    _, health = inspect_database(open_store(str(tmp_path / "store")), "orders")
    assert health.l0_ssts == 0 and health.sorted_runs >= 1
    print(f"dagster dev: up, run launched and succeeded in {time.monotonic() - started:.1f}s")
