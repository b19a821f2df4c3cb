"""Review of slatedb_core.fleet through what the schedules and fleet_sensor see: damage the
scanner found must not be forgotten because the writer wrote its next manifest."""

from __future__ import annotations

import datetime as dt

import dagster as dg

from devtools.sample_data import write_database
from orchestration.assets import ASSETS
from orchestration.fleet_report import REPORT_JOB, reported
from orchestration.fleet_sensor import evaluate_fleet
from orchestration.fleet_state import INTACT
from orchestration.jobs import JOBS
from orchestration.partitions import DATABASES
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from orchestration.schedules import build_schedules
from orchestration.settings import ScheduleSettings
from slatedb_core import FleetScanner, ObjectStore
from slatedb_core.health import inspect_database
from slatedb_core.lsm.dbstate import resolve_sst_path
from tests.orchestration.conftest import add_partitions


def evaluate(
    schedule: dg.ScheduleDefinition, instance: dg.DagsterInstance, resources: dict[str, object]
) -> object:
    """One tick of ``schedule``; its context (and the instance it reopens) is closed before the
    test's instance, or Dagster's current defs-state storage is left pointing at a closed one."""
    with dg.build_schedule_context(
        instance=instance,
        resources=resources,
        scheduled_execution_time=dt.datetime(2026, 11, 24, 12, 0, tzinfo=dt.UTC),
    ) as ctx:
        return schedule(ctx)


def delete_an_sst(store: ObjectStore, db: str) -> str:
    stored, _ = inspect_database(store, db)
    path = resolve_sst_path(db, stored.manifest, stored.manifest.ssts[0])
    store.delete(path)
    return path


def test_the_scanner_keeps_a_missing_sst_across_the_writers_next_manifest(
    store: ObjectStore,
) -> None:
    """The scanner re-verifies SSTs only for the paths it is asked to; a missing SST found once
    must not be forgotten because the writer wrote its next manifest, which still references it
    (the schedules scan without verifying, and used to request runs for such a database)."""
    write_database(store, "tidy", l0_ssts=2, rows_per_sst=50)
    gone = delete_an_sst(store, "tidy")
    scanner = FleetScanner(store, concurrency=2)
    assert scanner.scan(["tidy"], verify=["tidy"])["tidy"].state == "damaged"
    write_database(store, "tidy", prefix="more-", l0_ssts=1, rows_per_sst=50, wal_rows=0)
    later = scanner.scan(["tidy"])["tidy"]
    assert later.state == "damaged" and later.error_kind == "SstMissing"
    assert gone in (later.error or "")
    # repaired: the SST is referenced no more (the database is written again from scratch)
    for meta in list(store.list("tidy")):
        store.delete(meta.path)
    write_database(store, "tidy", l0_ssts=1, rows_per_sst=50)
    assert scanner.scan(["tidy"])["tidy"].state == "live"


def test_schedules_request_no_run_for_a_database_with_a_missing_sst_after_a_new_manifest(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    persistent_instance: dg.DagsterInstance,
) -> None:
    instance = persistent_instance
    # both with work for the compactor (L0 at compactor_l0_trigger)
    write_database(store, "alpha", l0_ssts=managed.compactor_l0_trigger, rows_per_sst=50)
    write_database(store, "tidy", l0_ssts=managed.compactor_l0_trigger, rows_per_sst=50)
    add_partitions(instance, "alpha", "tidy")
    delete_an_sst(store, "tidy")
    first = evaluate_fleet(  # verifies both: tidy is damaged
        dg.build_sensor_context(instance=instance), store_resource, managed
    )
    assert isinstance(first, dg.SensorResult)
    intact = [
        e
        for r in first.run_requests or []
        if r.job_name == REPORT_JOB
        for e in reported(r)
        if e.check_name == INTACT and e.partition == "tidy"
    ]
    assert [e.passed for e in intact] == [False]
    write_database(store, "tidy", prefix="more-", l0_ssts=1, rows_per_sst=50, wal_rows=0)
    schedule = next(
        s for s in build_schedules(ScheduleSettings()) if s.name == "compaction_schedule"
    )
    result = evaluate(schedule, instance, {"store": store_resource, "managed": managed})
    assert isinstance(result, list)
    assert sorted(str(r.partition_key) for r in result) == ["alpha"]


def test_the_compaction_schedule_requests_no_run_for_a_database_with_nothing_to_compact(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    persistent_instance: dg.DagsterInstance,
) -> None:
    instance = persistent_instance
    """Every 15 minutes a run per live database: at 10,000 databases that is 10,000 runs per
    tick (a run is a process; four at a time), most of them no-ops, a queue that never drains.
    A database whose L0 is under compactor_l0_trigger gives the compactor nothing to do."""
    write_database(store, "busy", l0_ssts=managed.compactor_l0_trigger, rows_per_sst=50)
    write_database(store, "idle", l0_ssts=1, rows_per_sst=50)
    add_partitions(instance, "busy", "idle")
    schedule = next(
        s for s in build_schedules(ScheduleSettings()) if s.name == "compaction_schedule"
    )
    result = evaluate(schedule, instance, {"store": store_resource, "managed": managed})
    assert isinstance(result, list)
    assert [str(r.partition_key) for r in result] == ["busy"]
    instance.delete_dynamic_partition(DATABASES, "busy")
    none = evaluate(schedule, instance, {"store": store_resource, "managed": managed})
    assert isinstance(none, dg.SkipReason)
    assert "idle (L0 1 < compactor_l0_trigger 4)" in (none.skip_message or "")


def test_the_checkpoint_schedule_requests_no_run_where_the_policies_have_nothing_to_do(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    persistent_instance: dg.DagsterInstance,
) -> None:
    """checkpoint_schedule ran checkpoint_job for every live database every 30 minutes: 20,000
    runs an hour at 10,000 databases, nearly all with nothing to create, refresh or delete."""
    instance = persistent_instance
    write_database(store, "done", l0_ssts=1, rows_per_sst=50)
    write_database(store, "todo", l0_ssts=1, rows_per_sst=50)
    add_partitions(instance, "done", "todo")
    resources: dict[str, object] = {"store": store_resource, "managed": managed}
    defs = dg.Definitions(assets=ASSETS, jobs=JOBS, resources=resources)
    assert (
        defs.resolve_job_def("checkpoint_job")
        .execute_in_process(instance=instance, partition_key="done")
        .success
    )
    schedule = next(
        s for s in build_schedules(ScheduleSettings()) if s.name == "checkpoint_schedule"
    )
    result = evaluate(schedule, instance, resources)
    assert isinstance(result, list)
    assert [str(r.partition_key) for r in result] == ["todo"]
