"""``python -m devtools.sample_data --register --materialize`` (what ``make ui`` and ``make
screenshot`` run): every live database partition, the shard the rescaling merged the table into
included, has a materialization; the fleet view has a history whose per-database trend moves; its
headline names the damaged database."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import dagster as dg
import pytest
import yaml  # type: ignore[import-untyped]

from devtools.devserver import REPO, write_dagster_home
from orchestration.partitions import DATABASES
from orchestration.settings import CONFIG_ENV, DEFAULT_CONFIG, STORE_URL_ENV

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dg.DagsterInstance, str]]:
    work = tmp_path_factory.mktemp("sample")
    raw: dict[str, Any] = yaml.safe_load(DEFAULT_CONFIG.read_text())
    raw["store"]["url"] = str(work / "store")
    raw["managed"]["export_root"] = str(work / "delta-exports")
    config = work / "slatedb.yaml"
    config.write_text(yaml.safe_dump(raw))
    home = work / "dagster_home"
    write_dagster_home(home)
    env = {k: v for k, v in os.environ.items() if k != STORE_URL_ENV}
    env.update({"DAGSTER_HOME": str(home), CONFIG_ENV: str(config)})
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "devtools.sample_data",
            "--dir",
            str(work / "store"),
            "--register",
            "--materialize",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        yield instance, done.stdout


def _fleet(instance: dg.DagsterInstance) -> list[dg.EventLogRecord]:
    records = instance.fetch_materializations(dg.AssetKey("slatedb_fleet"), limit=100).records
    return sorted(records, key=lambda r: r.storage_id)


def test_every_live_database_has_its_pass(sample: tuple[dg.DagsterInstance, str]) -> None:
    instance, _ = sample
    latest = _fleet(instance)[-1].asset_materialization
    assert latest is not None
    table = latest.metadata["fleet"]
    assert isinstance(table, dg.TableMetadataValue)
    rows = [r.data for r in table.records]
    live = {str(r["database"]) for r in rows if r["state"] == "live"}
    shards = {db for db in live if db.startswith("events/shards/")}
    assert len(shards) == 1, rows  # the rescaling merged the three shards into one
    assert live <= set(instance.get_dynamic_partitions(DATABASES))
    materialized = instance.get_materialized_partitions(dg.AssetKey("compaction"))
    # a pass that changed nothing is an observation (issue 40, item 10)
    observed = {
        r.partition_key
        for r in instance.fetch_observations(dg.AssetKey("compaction"), limit=1000).records
    }
    passed = materialized | observed
    assert live <= passed, f"live but never passed over: {sorted(live - passed)}"


def test_the_fleet_view_has_a_history(sample: tuple[dg.DagsterInstance, str]) -> None:
    instance, stdout = sample
    records = _fleet(instance)
    assert len(records) >= 4, stdout
    l0: list[int] = []
    for record in records:
        m = record.asset_materialization
        assert m is not None
        value = m.metadata.get("orders/l0_ssts")
        if isinstance(value, dg.IntMetadataValue) and value.value is not None:
            l0.append(value.value)
    assert len(set(l0)) >= 3, l0  # flushes, the compaction fleet_sensor requested, more flushes
    assert max(l0) > 8, l0  # over the threshold once (slatedb.yaml: l0_max_ssts 8)
    assert "compaction_job [orders]: SUCCESS" in stdout
    latest = records[-1].asset_materialization
    assert latest is not None
    headline = str(latest.metadata["headline"].value)
    assert "`damaged`" in headline and "SstMissing" in headline, headline
