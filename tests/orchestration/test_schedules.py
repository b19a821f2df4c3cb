"""Schedules request runs for the databases that have that kind of work, tagged like the sensor's
runs: compaction for live databases only, GC also for retired shards and destroyed databases."""

from __future__ import annotations

import datetime as dt

import dagster as dg

from devtools.sample_data import create_table, write_database
from orchestration.alerts import DATABASE_TAG
from orchestration.partitions import DATABASES
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from orchestration.schedules import build_schedules
from orchestration.settings import ScheduleSettings
from slatedb_core import ObjectStore, Table
from slatedb_core.lifecycle.destroy import destroy


def _schedule(name: str) -> dg.ScheduleDefinition:
    return next(s for s in build_schedules(ScheduleSettings()) if s.name == name)


def test_schedules_request_live_databases_only_and_gc_also_retired_and_destroyed(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    persistent_instance: dg.DagsterInstance,
    orders: str,
) -> None:
    instance = persistent_instance
    write_database(store, "legacy", l0_ssts=1, rows_per_sst=50, wal_rows=0)
    destroy("legacy", store, soft=True)
    shards = create_table(store, "events")
    with Table.open("events", store) as table:
        table.merge(0, expected_map_id=table.shard_map.id)
        retired = sorted(table.shard_map.retired)
        live_shards = [s.db_path for s in table.shards]
    assert retired and set(retired) <= set(shards)
    with_table = ManagedDatabasesResource(**{**managed.model_dump(), "tables": ["events"]})
    instance.add_dynamic_partitions(
        DATABASES, sorted({orders, "legacy", "vanished", *shards, *live_shards})
    )
    resources = {"store": store_resource, "managed": with_table}
    when = dt.datetime(2026, 11, 24, 12, 0, tzinfo=dt.UTC)

    def requested(name: str) -> dict[str, dg.RunRequest]:
        # closed here: an open context's reopened instance outlived the test's and left Dagster's
        # current defs-state storage on a closed instance for the tests after it
        with dg.build_schedule_context(
            instance=instance, resources=resources, scheduled_execution_time=when
        ) as ctx:
            result = _schedule(name)(ctx)
        assert isinstance(result, list)
        return {r.partition_key or "": r for r in result}

    compaction = requested("compaction_schedule")
    # the table's live shards hold fewer L0 SSTs than compactor_l0_trigger: nothing to compact
    assert set(compaction) == {orders}
    for db, run in compaction.items():
        assert run.tags[DATABASE_TAG] == db
        assert run.run_key == f"{db}@{when.isoformat()}"
    gc = requested("gc_schedule")
    assert set(gc) == {orders, "legacy", *live_shards, *retired}
    assert "vanished" not in gc


def test_a_database_whose_run_is_still_in_flight_gets_no_other(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    persistent_instance: dg.DagsterInstance,
    orders: str,
) -> None:
    """A tick while the last tick's GC run of a database is still queued (the run queue holds one
    run per database, and a busy queue drains slower than a one-minute cron) requests none for
    it: before, every tick added one, and the queue grew without end (seen on make cluster)."""
    from dagster._core.storage.dagster_run import DagsterRun, DagsterRunStatus

    instance = persistent_instance
    write_database(store, "other", l0_ssts=1, rows_per_sst=10, wal_rows=0)
    instance.add_dynamic_partitions(DATABASES, [orders, "other"])
    resources = {"store": store_resource, "managed": managed}
    when = dt.datetime(2026, 11, 24, 12, 0, tzinfo=dt.UTC)
    instance.add_run(
        DagsterRun(
            job_name="gc_job",
            run_id="0" * 32 + "gc-q",
            status=DagsterRunStatus.STARTING,
            tags={DATABASE_TAG: orders},
        )
    )
    instance.add_run(
        DagsterRun(
            job_name="compaction_job",
            run_id="0" * 32 + "cp-s",
            status=DagsterRunStatus.STARTED,
            tags={DATABASE_TAG: "other"},
        )
    )
    with dg.build_schedule_context(
        instance=instance, resources=resources, scheduled_execution_time=when
    ) as ctx:
        gc = _schedule("gc_schedule")(ctx)
    assert isinstance(gc, list)
    # orders' GC is still starting; other's compaction does not hold back its GC
    assert {r.partition_key for r in gc} == {"other"}
