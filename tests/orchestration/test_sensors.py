"""The discovery sensor against real databases, and the run-failure sensor against a real failed
run (fleet_sensor has its own file: test_fleet_sensor.py)."""

from __future__ import annotations

import dagster as dg

from devtools.sample_data import write_database
from orchestration.alerts import ALERT_TAG, DATABASE_TAG
from orchestration.assets import compaction
from orchestration.partitions import DATABASES
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from orchestration.sensors import build_sensors, tag_alert
from slatedb_core import ObjectStore
from slatedb_core.health import inspect_database
from tests.orchestration.conftest import add_partitions


def _run_failure(instance: dg.DagsterInstance, run_id: str) -> dg.DagsterEvent:
    (entry,) = instance.all_logs(run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    assert entry.dagster_event is not None
    return entry.dagster_event


def _sensor(name: str) -> dg.SensorDefinition:
    return next(s for s in build_sensors(running=True) if s.name == name)


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
        [compaction],
        partition_key=orders,
        resources=resources,
        instance=instance,
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
        [compaction],
        partition_key=orders,
        resources={"store": store_resource, "managed": broken},
        instance=instance,
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
    assert tag_alert(ctx) is None
    assert ALERT_TAG not in instance.get_run_by_id(result.run_id).tags  # type: ignore[union-attr]
