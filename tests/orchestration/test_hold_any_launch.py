"""A compaction launched by hand that fails with an alert holds the schedules too (issue 40,
item 9, review finding: the hold keyed on the ``slatedb/l0`` run tag that only the sensor and
the schedules set, so a compaction launched from the Launchpad that failed with
CorruptionError left ``compaction_schedule`` relaunching it every tick).

Real Dagster: a persistent test instance, a real compaction run launched as the Launchpad
launches it (the partition and no tag of ours) failing on a corrupt L0 SST, real schedule and
sensor contexts.
"""

from __future__ import annotations

import datetime as dt

import dagster as dg

from devtools.sample_data import write_database
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from slatedb_core import ObjectStore
from tests.orchestration.conftest import add_partitions
from tests.orchestration.fleet_ticks import tick
from tests.orchestration.schedule_hold_steps import (
    T0,
    by_hand,
    corrupt_last_l0,
    requested,
    schedule_tick,
)


def test_a_failed_compaction_launched_by_hand_holds_the_schedule_and_the_sensor(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    resources: dict[str, object],
    persistent_instance: dg.DagsterInstance,
    orders: str,
) -> None:
    instance = persistent_instance
    add_partitions(instance, orders)
    path, original = corrupt_last_l0(store, orders)

    failed = by_hand(instance, resources, orders)
    assert not failed.success
    run = instance.get_run_by_id(failed.run_id)
    assert run is not None and "slatedb/l0" not in run.tags  # launched as the Launchpad does

    for minutes in (15, 30):
        held = schedule_tick(instance, resources, T0 + dt.timedelta(minutes=minutes))
        assert isinstance(held, dg.SkipReason), "the schedule relaunched a failed hand-run"
        why = held.skip_message or ""
        assert orders in why and "CorruptionError" in why and "by hand" in why
    assert orders not in {
        r.partition_key for r in tick(instance, store_resource, managed).run_requests
    }

    # repaired, and a compaction by hand that succeeds lifts the hold
    store.put(path, original)
    assert by_hand(instance, resources, orders).success
    write_database(store, orders, prefix="again-", l0_ssts=6, rows_per_sst=50, wal_rows=0)
    again = schedule_tick(instance, resources, T0 + dt.timedelta(minutes=45))
    assert requested(again) == {orders}
