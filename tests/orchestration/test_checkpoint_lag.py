"""The manifest-lag warning agrees with the checkpoint policies (issue 40, item 10): the
project's own ``daily`` policy (a new checkpoint every day, lifetime 8d, retain 7d) pins a week-old
manifest on purpose, and that kept the lag check warning for 8 days. Checkpoints a scheduled
policy keeps within its lifetime are what the policy allows, so the warning judges only the
others (readers', clones', retention checkpoints the refresh re-takes)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import dagster as dg

from orchestration.assets import ASSETS
from orchestration.checkpoint_policy import judged_manifest_lag, scheduled_lifetimes
from orchestration.checks import CHECKS, health_check_job
from orchestration.fleet_sensor import limits_of
from orchestration.fleet_state import LAG, Memory, findings
from orchestration.resources import (
    CheckpointPolicy,
    ManagedDatabasesResource,
    ObjectStoreResource,
)
from slatedb_core import Checkpoint, CheckpointOptions, FleetScanner, ObjectStore, admin
from slatedb_core.health import inspect_database
from tests.orchestration.conftest import add_partitions

DAY = 86_400
T0 = 1_700_000_000.0
RETENTION = CheckpointPolicy(name="retention", lifetime="2d")
DAILY = CheckpointPolicy(name="daily", lifetime="8d", every="1d", retain="7d")


def cp(name: str | None, manifest_id: int, created: float, lifetime_s: float) -> Checkpoint:
    return Checkpoint(
        id=uuid.uuid4(),
        manifest_id=manifest_id,
        create_time_s=int(created),
        expire_time_s=int(created + lifetime_s),
        name=name,
    )


def test_a_daily_checkpoint_within_its_lifetime_is_not_lag() -> None:
    scheduled = scheduled_lifetimes([RETENTION, DAILY])
    week_old = cp("daily", 10, T0 - 7.5 * DAY, 8 * DAY)
    retention = cp("retention", 4990, T0 - 3600, 2 * DAY)
    lag, by = judged_manifest_lag([week_old, retention], 5000, T0, scheduled)
    assert (lag, by) == (10, retention)
    # nothing else pinned: no lag at all
    assert judged_manifest_lag([week_old], 5000, T0, scheduled) == (0, None)


def test_other_checkpoints_still_count() -> None:
    scheduled = scheduled_lifetimes([RETENTION, DAILY])
    reader = cp(None, 100, T0 - 60, 3600)
    assert judged_manifest_lag([reader], 5000, T0, scheduled) == (4900, reader)
    # named like the policy but with a longer life than it gives: not the policy's doing
    by_hand = cp("daily", 200, T0 - 60, 30 * DAY)
    assert judged_manifest_lag([by_hand], 5000, T0, scheduled) == (4800, by_hand)
    expired = cp(None, 1, T0 - 2 * DAY, DAY)
    assert judged_manifest_lag([expired], 5000, T0, scheduled) == (0, None)


def _advance_manifests(store: ObjectStore, db: str, n: int) -> None:
    """n more manifest versions: a throwaway checkpoint created and deleted each time."""
    for _ in range(n):
        made = admin.create_checkpoint(db, store, CheckpointOptions(lifetime=timedelta(hours=1)))
        admin.delete_checkpoint(db, store, made.id)


def _lag_results(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    instance: dg.DagsterInstance,
    db: str,
) -> tuple[bool, bool]:
    """(the deep check passed, the fleet sensor's finding passed) for the lag check of db."""
    resources = {"store": store_resource, "managed": managed}
    defs = dg.Definitions(
        assets=ASSETS, asset_checks=CHECKS, jobs=[health_check_job], resources=resources
    )
    result = defs.resolve_job_def("health_check_job").execute_in_process(
        partition_key=db, instance=instance
    )
    deep = next(e for e in result.get_asset_check_evaluations() if e.check_name == LAG)
    status = FleetScanner(store, concurrency=1).scan([db])[db]
    sensor = next(
        f for f in findings(status, "live", Memory(), limits_of(managed)) if f.check == LAG
    )
    return deep.passed, sensor.passed


def test_the_lag_check_passes_with_a_week_of_daily_checkpoints_and_warns_for_a_reader(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    instance: dg.DagsterInstance,
    orders: str,
) -> None:
    managed = ManagedDatabasesResource(
        discover_prefix="", manifest_lag_max=3, checkpoints=[RETENTION, DAILY]
    )
    add_partitions(instance, orders)
    admin.create_checkpoint(
        orders, store, CheckpointOptions(lifetime=DAILY.lifetime_td, name="daily")
    )
    _advance_manifests(store, orders, 5)
    _, health = inspect_database(store, orders)
    assert health.manifest_lag > managed.manifest_lag_max  # the raw figure is over
    assert _lag_results(store, store_resource, managed, instance, orders) == (True, True)

    admin.create_checkpoint(orders, store, CheckpointOptions(lifetime=timedelta(hours=1)))
    _advance_manifests(store, orders, 5)
    assert _lag_results(store, store_resource, managed, instance, orders) == (False, False)
