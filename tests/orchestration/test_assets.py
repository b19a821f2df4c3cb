"""The maintenance assets against real databases in a local store: called directly, and through
``materialize()`` with their checks on an ephemeral instance."""

from __future__ import annotations

import time
from typing import Any

import dagster as dg
import pytest
from deltalake import DeltaTable

from devtools.sample_data import write_database
from orchestration.assets import (
    EXPORT_CHECKPOINT_NAME,
    checkpoint_refresh,
    compaction,
    delta_export,
    garbage_collection,
)
from orchestration.checks import (
    CHECKS,
    boundaries_behind_latest,
    l0_under_threshold,
    manifest_and_ssts_intact,
)
from orchestration.delta import export_uri
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from slatedb_core import DbReader, ObjectStore, admin
from slatedb_core.health import inspect_database
from slatedb_core.lifecycle.destroy import destroy
from tests.orchestration.conftest import add_partitions

Event = dg.MaterializeResult | dg.AssetObservation  # type: ignore[type-arg]


def _pass(
    asset: Any, db: str, store: ObjectStoreResource, managed: ManagedDatabasesResource
) -> Event:
    """Run one pass of ``asset`` directly; it yields exactly one event."""
    (event,) = list(
        asset(context=dg.build_asset_context(partition_key=db), store=store, managed=managed)
    )
    assert isinstance(event, dg.MaterializeResult | dg.AssetObservation)
    return event


def _value(result: Event, key: str) -> Any:
    assert result.metadata is not None
    v = result.metadata[key]
    return v.value if isinstance(v, dg.MetadataValue) else v


def _with(managed: ManagedDatabasesResource, **changes: Any) -> ManagedDatabasesResource:
    return ManagedDatabasesResource(**{**managed.model_dump(), **changes})


def _rows(store: ObjectStore, db: str) -> list[tuple[bytes, bytes]]:
    cp = admin.create_checkpoint(db, store)
    try:
        with DbReader.open(db, store, checkpoint=cp.id) as reader:
            return list(reader.scan())
    finally:
        admin.delete_checkpoint(db, store, cp.id)


def test_compaction_merges_l0_and_keeps_every_row(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    orders: str,
) -> None:
    before_rows = _rows(store, orders)
    result = _pass(compaction, orders, store_resource, managed)
    assert isinstance(result, dg.MaterializeResult)
    assert _value(result, "before_l0_ssts") == 6
    assert _value(result, "l0_ssts") == 0
    assert _value(result, "sorted_runs") >= 1
    assert _value(result, "compactions") >= 1
    assert _value(result, "input_bytes") > _value(result, "output_bytes") > 0
    # 6 flushes of 300 rows overlapping by half: the duplicates are dropped
    assert _value(result, "input_rows") == 1800
    # the checkpoint read holds the 10 rows write_database left in the WAL too (0da0744: a
    # checkpoint holds the durable WAL); compaction merges L0 only
    assert _value(result, "output_rows") == len(before_rows) - 10
    assert isinstance(_value(result, "duration_ms"), int)
    summary = _value(result, "summary")
    assert summary.startswith("compacted L0 6 -> 0, sorted runs 0 -> ") and " ms" in summary
    assert " KiB -> " in summary
    assert _rows(store, orders) == before_rows
    again = _pass(compaction, orders, store_resource, managed)
    assert isinstance(again, dg.AssetObservation)  # changed nothing (issue 40, item 10)
    assert _value(again, "compactions") == 0
    assert _value(again, "summary").startswith("nothing to compact: L0 0 (trigger 4)")


def test_materialize_compaction_then_gc_with_checks(
    store: ObjectStore,
    resources: dict[str, object],
    instance: dg.DagsterInstance,
    orders: str,
) -> None:
    add_partitions(instance, orders)
    result = dg.materialize(
        [
            compaction,
            garbage_collection,
            manifest_and_ssts_intact,
            l0_under_threshold,
            boundaries_behind_latest,
        ],
        partition_key=orders,
        resources=resources,
        instance=instance,
    )
    assert result.success
    gc = next(m for m in result.asset_materializations_for_node("garbage_collection")).metadata
    # the writer's checkpoint still pins the L0 SSTs compaction replaced; the manifests and WAL
    # SSTs before it are garbage
    kinds = {r.data["kind"]: r.data for r in gc["per_kind"].value.records}
    assert list(kinds) == ["manifest", "wal", "compacted", "compactions"]
    assert kinds["manifest"]["deleted"] >= 1
    assert kinds["wal"]["deleted"] >= 1
    assert gc["freed_bytes"].value == sum(k["freed_bytes"] for k in kinds.values()) > 0
    # an id with its unit, not a bare integer (issue 40, item 10)
    assert isinstance(gc["manifest_boundary"], dg.TextMetadataValue)
    assert int(gc["manifest_boundary"].value.removeprefix("manifest id ")) >= 1
    # the compacted boundary is a ULID time (ms in the file): shown as a time, in seconds
    assert isinstance(gc["compacted_boundary"], dg.TimestampMetadataValue)
    assert abs(gc["compacted_boundary"].value - time.time()) < 600
    assert gc["summary"].value.startswith("deleted manifest ")
    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert set(evaluations) == {
        "manifest_and_ssts_intact",
        "l0_under_threshold",
        "boundaries_behind_latest",
    }
    assert all(e.passed for e in evaluations.values()), evaluations
    assert evaluations["manifest_and_ssts_intact"].metadata["damaged"].value == 0


def test_l0_check_fails_over_threshold_and_sst_check_names_missing_ssts(
    store: ObjectStore,
    resources: dict[str, object],
    instance: dg.DagsterInstance,
    orders: str,
) -> None:
    add_partitions(instance, orders)
    stored, _ = inspect_database(store, orders)
    victim = f"{orders}/compacted/{stored.manifest.ssts[0].id}.sst"
    store.delete(victim)
    checks_only = dg.define_asset_job(
        "checks_only",
        selection=dg.AssetSelection.checks(manifest_and_ssts_intact, l0_under_threshold),
    )
    defs = dg.Definitions(
        assets=[compaction, garbage_collection],
        asset_checks=CHECKS,
        jobs=[checks_only],
        resources=resources,
    )
    # execute_in_process refuses partition_key= when only checks are selected (Dagster 1.13
    # finds no asset to take the partitions from); the partition tag is what the UI sets.
    result = defs.resolve_job_def("checks_only").execute_in_process(
        tags={"dagster/partition": orders}, instance=instance
    )
    assert result.success  # a failed check is a result, not a step failure
    assert result.get_asset_materialization_events() == []
    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert not evaluations["l0_under_threshold"].passed
    assert evaluations["l0_under_threshold"].metadata["value"].value == 6
    sst = evaluations["manifest_and_ssts_intact"]
    assert not sst.passed
    assert sst.metadata["damaged"].value == 1
    assert victim in sst.metadata["damaged_ssts"].value


def test_gc_deletes_soft_destroyed_database_past_grace(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
) -> None:
    write_database(store, "legacy", l0_ssts=1, rows_per_sst=100, wal_rows=0)
    destroy("legacy", store, soft=True)
    (destroyed_at,) = [inspect_database(store, "legacy")[1].destroyed_at_s]
    result = _pass(garbage_collection, "legacy", store_resource, managed)
    assert isinstance(result, dg.AssetObservation)  # a destroyed database is never "Materialized"
    assert _value(result, "database_deleted") is True
    assert _value(result, "database_objects_deleted") > 0
    assert result.metadata is not None
    assert result.metadata["destroyed_at"] == dg.MetadataValue.timestamp(float(destroyed_at))
    assert _value(result, "deletable_after") == destroyed_at  # grace 0s
    assert _value(result, "summary").startswith("skipped: database destroyed; deleted now (")
    # only the tombstone is left (docs/clones-and-destroy.md)
    assert sorted(m.path for m in store.list("legacy")) == [
        f"legacy/gc/{ns}.boundary" for ns in ("compacted", "compactions", "manifest", "wal")
    ]
    gone = _pass(garbage_collection, "legacy", store_resource, managed)
    assert isinstance(gone, dg.AssetObservation)
    assert _value(gone, "skipped") == "database destroyed (only its tombstone is left)"


def test_gc_keeps_soft_destroyed_database_within_grace(
    store: ObjectStore, store_resource: ObjectStoreResource, managed: ManagedDatabasesResource
) -> None:
    write_database(store, "legacy", l0_ssts=1, rows_per_sst=100, wal_rows=0)
    destroy("legacy", store, soft=True)
    patient = _with(managed, gc_db_delete_grace="1d")
    destroyed_at = inspect_database(store, "legacy")[1].destroyed_at_s
    assert destroyed_at is not None
    result = _pass(garbage_collection, "legacy", store_resource, patient)
    assert isinstance(result, dg.AssetObservation)
    assert _value(result, "database_deleted") is False
    assert _value(result, "deletable_after") == destroyed_at + 86400
    assert "to be deleted after " in _value(result, "skipped")
    assert any(store.list("legacy/compacted"))


def test_checkpoint_refresh_creates_policies_once(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    orders: str,
) -> None:
    reader_cp = admin.create_checkpoint(orders, store)  # not ours: must survive
    first = _pass(checkpoint_refresh, orders, store_resource, managed)
    assert (_value(first, "created"), _value(first, "deleted")) == (2, 0)
    assert _value(first, "summary").startswith("2 created; 2 managed checkpoints live, the oldest ")
    assert _value(first, "managed_manifest_lag") >= 1  # the daily one pins the manifest before
    names = sorted(c.name or "" for c in admin.list_checkpoints(orders, store) if c.name)
    assert names == ["daily", "retention"]
    second = _pass(checkpoint_refresh, orders, store_resource, managed)
    assert (_value(second, "created"), _value(second, "refreshed"), _value(second, "deleted")) == (
        0,
        0,
        0,
    )
    assert _value(second, "managed_checkpoints") == 2
    assert any(c.id == reader_cp.id for c in admin.list_checkpoints(orders, store))


def test_checkpoint_refresh_refreshes_before_expiry(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    orders: str,
) -> None:
    from orchestration.resources import CheckpointPolicy

    # refresh once less than 3599 s of the 1 h lifetime remain (expiry is rounded up to whole
    # seconds, so that is true 2 s after creation, never at creation)
    eager = _with(
        managed,
        checkpoints=[CheckpointPolicy(name="retention", lifetime="1h", refresh_before="3599s")],
    )
    _pass(checkpoint_refresh, orders, store_resource, eager)
    (cp,) = admin.list_checkpoints(orders, store, "retention")
    time.sleep(2.1)
    result = _pass(checkpoint_refresh, orders, store_resource, eager)
    assert _value(result, "refreshed") == 1
    (after,) = admin.list_checkpoints(orders, store, "retention")
    assert after.id == cp.id
    assert after.expire_time_s is not None and cp.expire_time_s is not None
    assert after.expire_time_s > cp.expire_time_s


def test_delta_export_writes_the_checkpoint_snapshot(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    orders: str,
) -> None:
    expected = _rows(store, orders)
    result = _pass(delta_export, orders, store_resource, managed)
    assert _value(result, "rows") == len(expected)
    assert _value(result, "snapshot") == "temporary"
    table = DeltaTable(export_uri(managed.export_root, orders))
    data = table.to_pyarrow_table().sort_by("key")
    assert (
        list(zip(data.column("key").to_pylist(), data.column("value").to_pylist(), strict=True))
        == expected
    )
    commit = table.history(1)[0]
    assert commit["slatedb.checkpoint_id"] == _value(result, "checkpoint_id")
    # the temporary checkpoint is gone again
    assert admin.list_checkpoints(orders, store, EXPORT_CHECKPOINT_NAME) == []
    # a second export overwrites: new Delta version, same rows
    again = _pass(delta_export, orders, store_resource, managed)
    assert _value(again, "delta_version") == _value(result, "delta_version") + 1
    assert DeltaTable(export_uri(managed.export_root, orders)).to_pyarrow_table().num_rows == len(
        expected
    )


def test_delta_export_uses_the_named_snapshot_when_configured(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    orders: str,
) -> None:
    _pass(checkpoint_refresh, orders, store_resource, managed)
    (daily,) = admin.list_checkpoints(orders, store, "daily")
    write_database(store, orders, prefix="late-", l0_ssts=1, rows_per_sst=50, wal_rows=0)
    latest = inspect_database(store, orders)[0].id
    named = _with(managed, export_checkpoint_name="daily")
    result = _pass(delta_export, orders, store_resource, named)
    assert _value(result, "snapshot") == "named"
    assert _value(result, "checkpoint_id") == str(daily.id)
    # how old the snapshot is, and how far the database moved on since
    assert _value(result, "snapshot_manifest_id") == daily.manifest_id
    assert _value(result, "latest_manifest_id") == latest > daily.manifest_id
    assert _value(result, "manifests_behind") == latest - daily.manifest_id
    assert result.metadata is not None
    assert result.metadata["snapshot_created"] == dg.MetadataValue.timestamp(
        float(daily.create_time_s)
    )
    assert 0 <= _value(result, "snapshot_age_s") < 60
    assert f"at manifest {daily.manifest_id} (database at {latest}" in _value(result, "summary")
    keys = DeltaTable(export_uri(managed.export_root, orders)).to_pyarrow_table().column("key")
    assert not any(k.startswith(b"late-") for k in keys.to_pylist())


def test_corrupt_manifest_fails_with_an_alert(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    orders: str,
) -> None:
    stored, _ = inspect_database(store, orders)
    store.put(f"{orders}/manifest/{stored.id:020d}.manifest", b"not a manifest")
    with pytest.raises(dg.Failure) as info:
        _pass(compaction, orders, store_resource, managed)
    assert "SLATEDB ALERT CorruptionError" in str(info.value.description)
    assert info.value.metadata["slatedb_error"].value == "CorruptionError"
