"""Schedules and fleet_sensor share one hold: a database whose last compaction failed with an
alert (Fenced, CorruptionError, BoundaryMissing) gets no compaction from ``compaction_schedule``
either, until the L0 it failed on changes or a run launched by hand succeeds (issue 40, item 9:
the schedule launched a failing run every 15 minutes per damaged database while the sensor
held it back).

Real Dagster throughout: a persistent test instance, real schedule and sensor contexts, and a
real compaction run of a database with a corrupt L0 SST, failing and recorded in the instance.
"""

from __future__ import annotations

import datetime as dt

import dagster as dg

from devtools.sample_data import write_database
from orchestration.alerts import DATABASE_TAG
from orchestration.assets import ASSETS
from orchestration.jobs import JOBS
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from slatedb_core import ObjectStore
from slatedb_core.layout import boundary_path
from tests.orchestration.conftest import add_partitions
from tests.orchestration.fleet_ticks import tick
from tests.orchestration.schedule_hold_steps import (
    T0,
    by_hand,
    corrupt_last_l0,
    requested,
    schedule_tick,
)


def _execute(
    instance: dg.DagsterInstance, resources: dict[str, object], request: dg.RunRequest
) -> dg.ExecuteInProcessResult:
    """Run what a request asked for, with its tags, as the daemon would launch it."""
    defs = dg.Definitions(assets=ASSETS, jobs=JOBS, resources=resources)
    return defs.resolve_job_def(request.job_name or "compaction_job").execute_in_process(
        instance=instance,
        partition_key=request.partition_key,
        tags=dict(request.tags),
        raise_on_error=False,
    )


def test_the_schedule_skips_a_database_the_sensor_holds_after_an_alert(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    resources: dict[str, object],
    persistent_instance: dg.DagsterInstance,
    orders: str,
) -> None:
    instance = persistent_instance
    write_database(store, "healthy", l0_ssts=6, rows_per_sst=50, wal_rows=0)
    add_partitions(instance, orders, "healthy")
    corrupt_last_l0(store, orders)

    first = tick(instance, store_resource, managed)
    request = next(r for r in first.run_requests if r.partition_key == orders)
    assert not _execute(instance, resources, request).success

    # the sensor holds it back ...
    later = tick(instance, store_resource, managed, first.cursor)
    assert orders not in {r.partition_key for r in later.run_requests}
    # ... and so does the schedule, tick after tick
    for minutes in (15, 30):
        result = schedule_tick(instance, resources, T0 + dt.timedelta(minutes=minutes))
        assert requested(result) == {"healthy"}


def test_a_failure_of_the_schedules_own_run_holds_the_schedule_and_the_sensor(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    resources: dict[str, object],
    persistent_instance: dg.DagsterInstance,
    orders: str,
) -> None:
    """No sensor tick before: the hold is found in the run history the instance recorded."""
    instance = persistent_instance
    add_partitions(instance, orders)
    path, original = corrupt_last_l0(store, orders)

    first = schedule_tick(instance, resources, T0)
    assert isinstance(first, list) and requested(first) == {orders}
    failed = _execute(instance, resources, first[0])
    assert not failed.success

    held = schedule_tick(instance, resources, T0 + dt.timedelta(minutes=15))
    assert isinstance(held, dg.SkipReason), "the schedule requested the held database again"
    why = held.skip_message or ""
    assert orders in why and "CorruptionError" in why and "by hand" in why
    assert tick(instance, store_resource, managed).run_requests == []

    # More writes: the SST it failed on is still in L0, still held.
    write_database(store, orders, prefix="later-", l0_ssts=2, rows_per_sst=50, wal_rows=0)
    assert requested(schedule_tick(instance, resources, T0 + dt.timedelta(minutes=30))) == set()

    # Repaired and compacted by hand (the operator's acknowledgement): the hold is lifted.
    store.put(path, original)
    assert by_hand(instance, resources, orders).success
    write_database(store, orders, prefix="again-", l0_ssts=6, rows_per_sst=50, wal_rows=0)
    again = schedule_tick(instance, resources, T0 + dt.timedelta(minutes=45))
    assert requested(again) == {orders}


def test_gc_that_failed_with_an_alert_is_held_until_a_run_by_hand_succeeds(
    store: ObjectStore,
    resources: dict[str, object],
    persistent_instance: dg.DagsterInstance,
    orders: str,
) -> None:
    """The same hold for gc_schedule (hourly): a GC pass that failed with CorruptionError (a
    boundary file that did not decode while it ran) is not relaunched every tick; the operator
    acknowledges it by running GC by hand, and the schedule resumes."""
    instance = persistent_instance
    add_partitions(instance, orders)
    boundary = boundary_path(orders, "manifest")
    gc = dg.RunRequest(partition_key=orders, job_name="gc_job", tags={DATABASE_TAG: orders})
    assert _execute(instance, resources, gc).success
    good = store.get(boundary).data
    store.put(boundary, b"garbage")
    assert not _execute(instance, resources, gc).success
    store.put(boundary, good)  # repaired; the failure stands until acknowledged

    held = schedule_tick(instance, resources, T0, "gc_schedule")
    assert isinstance(held, dg.SkipReason), "gc_schedule relaunched a GC that failed with an alert"
    why = held.skip_message or ""
    assert orders in why and "CorruptionError" in why and "by hand" in why

    gc_by_hand = dg.RunRequest(partition_key=orders, job_name="gc_job")
    assert _execute(instance, resources, gc_by_hand).success
    assert requested(schedule_tick(instance, resources, T0, "gc_schedule")) == {orders}
