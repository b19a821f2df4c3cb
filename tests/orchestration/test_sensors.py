"""Sensors driven with build_sensor_context(cursor=...) against real databases: run requests,
run keys, observations and cursors; the run-failure sensor against a real failed run."""

from __future__ import annotations

import json

import dagster as dg
import pytest

from devtools.sample_data import write_database
from orchestration.alerts import ALERT_TAG, DATABASE_TAG
from orchestration.assets import compaction, garbage_collection
from orchestration.partitions import DATABASES
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from orchestration.sensors import build_sensors, evaluate_boundaries, evaluate_lag, tag_alert
from slatedb_core import BoundaryMissing, CorruptionError, ObjectStore, run_gc_once
from slatedb_core.health import inspect_database
from slatedb_core.layout import boundary_path
from slatedb_core.lifecycle.destroy import destroy
from tests.orchestration.conftest import add_partitions


def _run_failure(instance: dg.DagsterInstance, run_id: str) -> dg.DagsterEvent:
    (entry,) = instance.all_logs(run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    assert entry.dagster_event is not None
    return entry.dagster_event


def _sensor(name: str) -> dg.SensorDefinition:
    return next(s for s in build_sensors(running=True) if s.name == name)


def test_manifest_lag_sensor_requests_compaction_once_per_manifest(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    instance: dg.DagsterInstance,
    orders: str,
) -> None:
    write_database(store, "tidy", l0_ssts=1, rows_per_sst=50)
    add_partitions(instance, orders, "tidy")
    stored, _ = inspect_database(store, orders)
    ctx = dg.build_sensor_context(instance=instance, cursor=None)
    result = evaluate_lag(ctx, store_resource, managed)
    assert isinstance(result, dg.SensorResult)
    assert [r.partition_key for r in result.run_requests or []] == [orders]
    (request,) = result.run_requests or []
    assert request.run_key == f"compaction:{orders}:manifest-{stored.id}"
    assert "l0_ssts 6 > 4" in request.tags["slatedb/reason"]
    cursor = json.loads(result.cursor or "")
    assert cursor[orders] == {
        "manifest_id": stored.id, "l0_ssts": 6, "wal_backlog": 0, "manifest_lag": 0,
    }
    assert cursor["tidy"]["l0_ssts"] == 1
    assert {e.partition for e in result.asset_events} == {orders, "tidy"}
    assert all(e.asset_key == compaction.key for e in result.asset_events)

    # Same state, previous cursor: the same run key (Dagster drops the duplicate), no new events.
    again = evaluate_lag(
        dg.build_sensor_context(instance=instance, cursor=result.cursor), store_resource, managed
    )
    assert isinstance(again, dg.SensorResult)
    assert [r.run_key for r in again.run_requests or []] == [request.run_key]
    assert again.asset_events == []

    # After a compaction there is nothing to request, and the cursor moves on.
    compaction(context=dg.build_asset_context(partition_key=orders), store=store_resource,
               managed=managed)
    after = evaluate_lag(
        dg.build_sensor_context(instance=instance, cursor=result.cursor), store_resource, managed
    )
    assert isinstance(after, dg.SensorResult)
    assert after.run_requests == []
    assert json.loads(after.cursor or "")[orders]["l0_ssts"] == 0


def test_manifest_lag_sensor_counts_pinned_manifests(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    instance: dg.DagsterInstance,
) -> None:
    from slatedb_core import admin

    write_database(store, "pinned", l0_ssts=1, rows_per_sst=50, wal_rows=0)
    cp = admin.create_checkpoint("pinned", store)
    write_database(store, "pinned", prefix="more-", l0_ssts=2, rows_per_sst=50, wal_rows=0)
    add_partitions(instance, "pinned")
    strict = ManagedDatabasesResource(**{**managed.model_dump(), "manifest_lag_max": 2})
    result = evaluate_lag(dg.build_sensor_context(instance=instance), store_resource, strict)
    assert isinstance(result, dg.SensorResult)
    stored, _ = inspect_database(store, "pinned")
    lag = stored.id - cp.manifest_id
    assert lag > 2
    assert json.loads(result.cursor or "")["pinned"]["manifest_lag"] == lag
    (request,) = result.run_requests or []
    assert f"manifest_lag {lag} > 2" in request.tags["slatedb/reason"]


def test_boundary_sensor_observes_advances_and_keeps_quiet_otherwise(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    instance: dg.DagsterInstance,
    orders: str,
) -> None:
    add_partitions(instance, orders)
    first = evaluate_boundaries(dg.build_sensor_context(instance=instance), store_resource)
    assert isinstance(first, dg.SensorResult)  # the cursor learns the database, no events
    assert first.asset_events == []
    quiet = evaluate_boundaries(
        dg.build_sensor_context(instance=instance, cursor=first.cursor), store_resource
    )
    assert isinstance(quiet, dg.SkipReason)

    stats = run_gc_once(orders, store, managed.gc_options())
    assert stats.manifest_boundary
    moved = evaluate_boundaries(
        dg.build_sensor_context(instance=instance, cursor=first.cursor), store_resource
    )
    assert isinstance(moved, dg.SensorResult)
    (event,) = moved.asset_events
    assert isinstance(event, dg.AssetObservation)
    assert event.asset_key == garbage_collection.key and event.partition == orders
    assert event.metadata["manifest_boundary"].value == stats.manifest_boundary
    assert "manifest" in event.metadata["advanced"].value
    assert json.loads(moved.cursor or "")[orders]["manifest"] == stats.manifest_boundary

    # a boundary written lower than the cursor remembers: a visible failure
    store.put(boundary_path(orders, "manifest"), b"1")
    with pytest.raises(CorruptionError, match="moved back"):
        evaluate_boundaries(
            dg.build_sensor_context(instance=instance, cursor=moved.cursor), store_resource
        )
    store.delete(boundary_path(orders, "manifest"))
    with pytest.raises(BoundaryMissing, match="disappeared"):
        evaluate_boundaries(
            dg.build_sensor_context(instance=instance, cursor=moved.cursor), store_resource
        )


def test_boundary_sensor_forgets_a_database_the_gc_deleted(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    instance: dg.DagsterInstance,
) -> None:
    write_database(store, "legacy", l0_ssts=2, rows_per_sst=50, wal_rows=0)
    run_gc_once("legacy", store, managed.gc_options())
    add_partitions(instance, "legacy")
    seen = evaluate_boundaries(dg.build_sensor_context(instance=instance), store_resource)
    assert isinstance(seen, dg.SensorResult)
    assert json.loads(seen.cursor or "")["legacy"]
    destroy("legacy", store, soft=True)
    assert run_gc_once("legacy", store, managed.gc_options()).database_deleted
    after = evaluate_boundaries(
        dg.build_sensor_context(instance=instance, cursor=seen.cursor), store_resource
    )
    assert isinstance(after, dg.SensorResult)
    assert json.loads(after.cursor or "") == {}


def test_discovery_sensor_adds_and_removes_database_partitions(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    instance: dg.DagsterInstance,
    orders: str,
) -> None:
    write_database(store, "team/a/users", l0_ssts=1, rows_per_sst=10)
    listed = ManagedDatabasesResource(
        **{**managed.model_dump(), "databases": ["planned"], "tables": []}
    )
    sensor = _sensor("database_discovery_sensor")
    ctx = dg.build_sensor_context(
        instance=instance, resources={"store": store_resource, "managed": listed}
    )
    result = sensor(ctx)
    assert isinstance(result, dg.SensorResult)
    (add,) = result.dynamic_partitions_requests or []
    assert isinstance(add, dg.AddDynamicPartitionsRequest)
    assert add.partitions_def_name == DATABASES
    assert sorted(add.partition_keys) == ["orders", "planned", "team/a/users"]

    instance.add_dynamic_partitions(DATABASES, [*add.partition_keys, "vanished"])
    ctx = dg.build_sensor_context(
        instance=instance, resources={"store": store_resource, "managed": listed}
    )
    result = sensor(ctx)
    assert isinstance(result, dg.SensorResult)
    (remove,) = result.dynamic_partitions_requests or []
    assert isinstance(remove, dg.DeleteDynamicPartitionsRequest)
    assert list(remove.partition_keys) == ["vanished"]


def test_run_failure_sensor_tags_corruption(
    store: ObjectStore,
    resources: dict[str, object],
    instance: dg.DagsterInstance,
    orders: str,
) -> None:
    add_partitions(instance, orders)
    stored, _ = inspect_database(store, orders)
    store.put(f"{orders}/manifest/{stored.id:020d}.manifest", b"garbage")
    result = dg.materialize(
        [compaction], partition_key=orders, resources=resources, instance=instance,
        raise_on_error=False,
    )
    assert not result.success
    run = instance.get_run_by_id(result.run_id)
    assert run is not None
    failure = _run_failure(instance, result.run_id)
    ctx = dg.build_run_status_sensor_context(
        sensor_name="slatedb_alert_sensor",
        dagster_instance=instance,
        dagster_run=run,
        dagster_event=failure,
    ).for_run_failure()
    assert tag_alert(ctx) == "CorruptionError"
    tags = instance.get_run_by_id(result.run_id).tags  # type: ignore[union-attr]
    assert tags[ALERT_TAG] == "CorruptionError"
    assert tags[DATABASE_TAG] == orders


def test_run_failure_sensor_ignores_ordinary_failures(
    store_resource: ObjectStoreResource,
    instance: dg.DagsterInstance,
    orders: str,
) -> None:
    add_partitions(instance, orders)
    broken = ManagedDatabasesResource(compactor_l0_trigger=0)  # InvalidArgument at run time
    result = dg.materialize(
        [compaction], partition_key=orders, resources={"store": store_resource,
                                                       "managed": broken},
        instance=instance, raise_on_error=False,
    )
    assert not result.success
    run = instance.get_run_by_id(result.run_id)
    assert run is not None
    failure = _run_failure(instance, result.run_id)
    ctx = dg.build_run_status_sensor_context(
        sensor_name="slatedb_alert_sensor", dagster_instance=instance, dagster_run=run,
        dagster_event=failure,
    ).for_run_failure()
    assert tag_alert(ctx) is None
    assert ALERT_TAG not in instance.get_run_by_id(result.run_id).tags  # type: ignore[union-attr]
