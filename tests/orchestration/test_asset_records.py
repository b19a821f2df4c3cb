"""What the maintenance assets record on a Dagster instance: skipped passes are observations, not
materializations; a lagging retention checkpoint is re-taken; no data dependency between passes;
owners, tags and freshness on every asset; the maintenance jobs run in process."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import dagster as dg
import pytest

from devtools.sample_data import write_database
from orchestration.assets import (
    ASSETS,
    checkpoint_refresh,
    compaction,
    delta_export,
    garbage_collection,
)
from orchestration.definitions import build_definitions
from orchestration.jobs import JOBS
from orchestration.metadata import DEFAULT_OWNERS, KIND_TAG, boundaries
from orchestration.resources import CheckpointPolicy, ManagedDatabasesResource, ObjectStoreResource
from orchestration.settings import load_settings
from slatedb_core import CheckpointOptions, ObjectStore, admin
from slatedb_core.errors import InvalidArgument
from slatedb_core.health import inspect_database
from slatedb_core.lifecycle.destroy import destroy
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import ManifestStore
from tests.orchestration.conftest import add_partitions


def _materializations(instance: dg.DagsterInstance, asset: dg.AssetsDefinition) -> list[str]:
    records = instance.fetch_materializations(asset.key, limit=100).records
    return [r.partition_key or "" for r in records]


def _observations(instance: dg.DagsterInstance, asset: dg.AssetsDefinition) -> dict[str, str]:
    records = instance.fetch_observations(asset.key, limit=100).records
    out = {}
    for r in records:
        obs = r.asset_observation
        assert obs is not None
        out[r.partition_key or ""] = str(obs.metadata["skipped"].value)
    return out


def test_passes_on_a_destroyed_or_missing_database_are_observed_not_materialized(
    store: ObjectStore,
    resources: dict[str, object],
    instance: dg.DagsterInstance,
    orders: str,
) -> None:
    write_database(store, "legacy", l0_ssts=1, rows_per_sst=50, wal_rows=0)
    destroy("legacy", store, soft=True)
    # a clone being created: its first manifest is not initialized yet (SlateDB RFC 0004)
    ManifestStore(store, "fresh").create_initial(Manifest(initialized=False))
    add_partitions(instance, orders, "legacy", "gone", "fresh")
    per_db = [compaction, checkpoint_refresh, delta_export]
    for db in (orders, "legacy", "gone", "fresh"):
        result = dg.materialize(per_db, partition_key=db, resources=resources, instance=instance)
        assert result.success
    for asset in per_db:
        assert _materializations(instance, asset) == [orders], asset.key
        assert _observations(instance, asset) == {
            "legacy": "database destroyed",
            "gone": "database not found",
            "fresh": "database not initialized",
        }, asset.key
    for db in ("gone", "fresh"):
        dg.materialize(
            [garbage_collection], partition_key=db, resources=resources, instance=instance
        )
    assert _materializations(instance, garbage_collection) == []
    assert _observations(instance, garbage_collection) == {
        "gone": "database not found",
        "fresh": "database not initialized",
    }
    status = instance.get_status_by_partition(
        compaction.key,
        ["legacy", "gone", "fresh", orders],
        compaction.partitions_def,  # type: ignore[arg-type]
    )
    assert status is not None
    assert status[orders] == dg.AssetPartitionStatus.MATERIALIZED
    assert {status[db] for db in ("legacy", "gone", "fresh")} == {None}  # not "Materialized"


def test_gc_of_a_destroyed_database_runs_and_observes_its_deletion_date(
    store: ObjectStore,
    resources: dict[str, object],
    managed: ManagedDatabasesResource,
    store_resource: ObjectStoreResource,
    instance: dg.DagsterInstance,
) -> None:
    write_database(store, "legacy", l0_ssts=1, rows_per_sst=50, wal_rows=0)
    destroy("legacy", store, soft=True)
    destroyed_at = inspect_database(store, "legacy")[1].destroyed_at_s
    assert destroyed_at is not None
    add_partitions(instance, "legacy")
    patient = ManagedDatabasesResource(**{**managed.model_dump(), "gc_db_delete_grace": "2d"})
    result = dg.materialize(
        [garbage_collection],
        partition_key="legacy",
        instance=instance,
        resources={"store": store_resource, "managed": patient},
    )
    assert result.success and result.get_asset_materialization_events() == []
    (event,) = result.get_asset_observation_events()
    obs = event.asset_observation_data.asset_observation
    assert obs.metadata["destroyed_at"] == dg.MetadataValue.timestamp(float(destroyed_at))
    assert obs.metadata["deletable_after"] == dg.MetadataValue.timestamp(
        float(destroyed_at + 2 * 86400)
    )
    assert obs.metadata["database_deleted"].value is False
    # past the grace (0 s in the fixture) the same pass deletes it, still without materializing
    result = dg.materialize(
        [garbage_collection], partition_key="legacy", instance=instance, resources=resources
    )
    assert result.get_asset_materialization_events() == []
    (event,) = result.get_asset_observation_events()
    assert event.asset_observation_data.asset_observation.metadata["database_deleted"].value
    assert _materializations(instance, garbage_collection) == []


def test_a_retention_checkpoint_lagging_past_the_threshold_is_retaken_at_the_latest(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    instance: dg.DagsterInstance,
    orders: str,
) -> None:
    strict = ManagedDatabasesResource(
        **{
            **managed.model_dump(),
            "manifest_lag_max": 3,
            "checkpoints": [CheckpointPolicy(name="retention", lifetime="1h")],
        }
    )
    old = admin.create_checkpoint(
        orders, store, CheckpointOptions(lifetime=timedelta(hours=1), name="retention")
    )
    resources = {"store": store_resource, "managed": strict}
    add_partitions(instance, orders)
    quiet = dg.materialize(
        [checkpoint_refresh], partition_key=orders, resources=resources, instance=instance
    )
    # within the threshold: kept, a pass that changed nothing (an observation, issue 40 item 10)
    assert quiet.asset_materializations_for_node("checkpoint_refresh") == []
    (o,) = quiet.asset_observations_for_node("checkpoint_refresh")
    assert o.metadata["retaken"].value == 0
    write_database(store, orders, prefix="more-", l0_ssts=3, rows_per_sst=50, wal_rows=0)
    latest = inspect_database(store, orders)[0].id
    assert latest - old.manifest_id > 3
    result = dg.materialize(
        [checkpoint_refresh], partition_key=orders, resources=resources, instance=instance
    )
    (m,) = result.asset_materializations_for_node("checkpoint_refresh")
    (new,) = admin.list_checkpoints(orders, store, "retention")
    assert new.id != old.id and new.manifest_id >= latest  # it pins the manifest it writes
    assert (m.metadata["retaken"].value, m.metadata["created"].value) == (1, 1)
    assert m.metadata["deleted"].value == 1
    assert m.metadata["managed_manifest_lag"].value <= 1
    summary = m.metadata["summary"].value
    assert (
        f"re-took retention at manifest {new.manifest_id} (it pinned {old.manifest_id}, " in summary
    )
    assert "> manifest_lag_max 3" in summary
    _, health = inspect_database(store, orders)
    assert health.manifest_lag <= 1


QUIET_WHEN_IDLE = {"compaction", "garbage_collection", "checkpoint_refresh"}
"""Passes that record an observation, not a materialization, when they had nothing to do: a
freshness policy (Dagster evaluates it on materializations only) would turn them stale on an
idle fleet; the checks on what they leave (L0, WAL backlog, lag, expired checkpoints) warn
instead (issue 40, item 10 review)."""


def test_no_data_dependency_between_passes_and_every_asset_is_owned_tagged_and_fresh(
    resources: dict[str, object],
) -> None:
    defs = dg.Definitions(assets=ASSETS, resources=resources)
    for spec in defs.resolve_all_asset_specs():
        assert list(spec.deps) == [], spec.key  # else GC shows "Unsynced" after each compaction
        assert list(spec.owners) == list(DEFAULT_OWNERS)
        assert spec.tags[KIND_TAG]
        if spec.key.path[-1] in QUIET_WHEN_IDLE:
            assert spec.freshness_policy is None, spec.key
        else:
            assert isinstance(spec.freshness_policy, dg.FreshnessPolicy), spec.key
    # the freshness policies load with the dynamic partitions
    dg.Definitions.validate_loadable(dg.Definitions(assets=ASSETS, jobs=JOBS, resources=resources))


def test_owners_come_from_the_settings_file(tmp_path: Path) -> None:
    config = tmp_path / "slatedb.yaml"
    config.write_text("store: {url: memory://owners}\nowners: [team:storage, oncall@example.com]\n")
    defs = build_definitions(load_settings(config))
    specs = defs.resolve_all_asset_specs()
    assert {s.key.to_user_string() for s in specs} >= {a.key.to_user_string() for a in ASSETS}
    assert {tuple(s.owners) for s in specs} == {("team:storage", "oncall@example.com")}
    dg.Definitions.validate_loadable(defs)
    default = tmp_path / "default.yaml"
    default.write_text("store: {url: memory://owners}\n")
    assert load_settings(default).owners == DEFAULT_OWNERS
    bad = tmp_path / "bad.yaml"
    bad.write_text("store: {url: memory://owners}\nowners: [storage]\n")
    with pytest.raises(InvalidArgument, match="owners must be"):
        load_settings(bad)


def test_a_boundary_that_is_not_set_says_why() -> None:
    shown = boundaries(
        {"manifest": 12, "wal": None, "compactions": None, "compacted": 1_795_000_000_123}
    )
    assert shown["manifest_boundary"] == dg.MetadataValue.text("manifest id 12")
    assert shown["wal_boundary"] == dg.MetadataValue.text(
        "not set yet: no GC pass has deleted a WAL SST"
    )
    assert shown["compacted_boundary"] == dg.MetadataValue.timestamp(1_795_000_000.123)


def test_the_maintenance_jobs_run_in_process(
    resources: dict[str, object], instance: dg.DagsterInstance, orders: str
) -> None:
    add_partitions(instance, orders)
    defs = dg.Definitions(assets=ASSETS, jobs=JOBS, resources=resources)
    for job in JOBS:
        assert defs.resolve_job_def(job.name).executor_def is dg.in_process_executor, job.name
    result = defs.resolve_job_def("compaction_job").execute_in_process(
        partition_key=orders, instance=instance
    )
    assert result.success
    (m,) = result.asset_materializations_for_node("compaction")
    assert m.metadata["l0_ssts"].value == 0
