"""The checkpoint policy plan at chosen clocks (pure), and the lingering-expired check."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import Any

import dagster as dg
import pytest

from orchestration.assets import checkpoint_refresh
from orchestration.checkpoint_policy import plan_checkpoints
from orchestration.checks import no_expired_checkpoint_lingering
from orchestration.resources import CheckpointPolicy
from slatedb_core import Checkpoint, CheckpointOptions, ObjectStore, admin
from slatedb_core.lifecycle.destroy import destroy
from tests.orchestration.conftest import add_partitions

DAY = 86_400
T0 = 1_700_000_000.0
RETENTION = CheckpointPolicy(name="retention", lifetime="2d")
DAILY = CheckpointPolicy(name="daily", lifetime="8d", every="1d", retain="7d")


def cp(name: str | None, created: float, lifetime_s: float | None) -> Checkpoint:
    return Checkpoint(
        id=uuid.uuid4(),
        manifest_id=1,
        create_time_s=int(created),
        expire_time_s=None if lifetime_s is None else int(created + lifetime_s),
        name=name,
    )


def test_missing_checkpoints_are_created() -> None:
    plan = plan_checkpoints([cp("reader", T0, 60)], [RETENTION, DAILY], T0)
    assert [p.name for p in plan.create] == ["retention", "daily"]
    assert plan.refresh == [] and plan.delete == []


def test_retention_checkpoint_is_refreshed_only_in_the_second_half_of_its_life() -> None:
    current = cp("retention", T0, 2 * DAY)
    assert plan_checkpoints([current], [RETENTION], T0 + DAY - 1).refresh == []
    plan = plan_checkpoints([current], [RETENTION], T0 + DAY + 1)
    assert plan.refresh == [(current, RETENTION)]
    assert plan.create == [] and plan.delete == []


def test_expired_retention_checkpoint_is_deleted_and_replaced() -> None:
    old = cp("retention", T0, 2 * DAY)
    plan = plan_checkpoints([old], [RETENTION], T0 + 3 * DAY)
    assert plan.delete == [(old, "expired")]
    assert plan.create == [RETENTION]


def test_duplicate_retention_checkpoints_keep_the_newest() -> None:
    older, newer = cp("retention", T0, 2 * DAY), cp("retention", T0 + 10, 2 * DAY)
    plan = plan_checkpoints([newer, older], [RETENTION], T0 + 20)
    assert plan.delete == [(older, "duplicate")]
    assert plan.refresh == [] and plan.create == []


def test_a_retention_checkpoint_lagging_past_the_threshold_is_retaken() -> None:
    pinned = cp("retention", T0, 2 * DAY)  # pins manifest 1
    kept = plan_checkpoints(
        [pinned], [RETENTION], T0 + 60, latest_manifest_id=51, manifest_lag_max=50
    )
    assert kept.retake == [] and kept.refresh == [] and kept.create == []
    plan = plan_checkpoints(
        [pinned], [RETENTION], T0 + 60, latest_manifest_id=52, manifest_lag_max=50
    )
    assert plan.retake == [(pinned, RETENTION)]
    # re-taking gives a full lifetime: no refresh besides; the old one is deleted by the asset
    # after the new one exists, not planned for deletion here
    assert plan.refresh == [] and plan.create == [] and plan.delete == []
    # without the latest id (or the threshold) lag is not considered; scheduled ones never
    assert plan_checkpoints([pinned], [RETENTION], T0 + 60).retake == []
    daily = cp("daily", T0, 8 * DAY)
    assert (
        plan_checkpoints(
            [daily], [DAILY], T0 + 60, latest_manifest_id=500, manifest_lag_max=50
        ).retake
        == []
    )


def test_scheduled_checkpoints_rotate_daily_and_expire_after_retention() -> None:
    week = [cp("daily", T0 + i * DAY, 8 * DAY) for i in range(8)]
    now = T0 + 7 * DAY + 60  # the newest is a minute old; the oldest a minute past retention
    plan = plan_checkpoints(week, [DAILY], now)
    assert plan.delete == [(week[0], "past retention")]
    assert plan.create == []
    later = plan_checkpoints(week[1:], [DAILY], T0 + 8 * DAY)
    assert later.create == [DAILY]  # the newest is exactly a day old
    assert later.delete == []  # week[1] is exactly 7 days old: not past retention yet


def test_other_checkpoints_are_never_touched() -> None:
    others = [cp(None, T0 - 10 * DAY, DAY), cp("clone-final", T0 - 10 * DAY, None)]
    plan = plan_checkpoints(others, [DAILY], T0)
    assert plan.delete == [] and plan.refresh == []


def test_lingering_expired_checkpoint_check(
    store: ObjectStore,
    resources: dict[str, object],
    instance: dg.DagsterInstance,
    orders: str,
) -> None:
    # created at T0 (years ago) with a 1 s lifetime, and no GC pass has removed it since
    admin.create_checkpoint(
        orders, store, CheckpointOptions(lifetime=timedelta(seconds=1)), now=lambda: T0
    )
    add_partitions(instance, orders)
    job = dg.define_asset_job(
        "check", selection=dg.AssetSelection.checks(no_expired_checkpoint_lingering)
    )
    defs = dg.Definitions(
        assets=[checkpoint_refresh],
        asset_checks=[no_expired_checkpoint_lingering],
        jobs=[job],
        resources=resources,
    )
    result = defs.resolve_job_def("check").execute_in_process(
        tags={"dagster/partition": orders}, instance=instance
    )
    (evaluation,) = result.get_asset_check_evaluations()
    assert not evaluation.passed
    assert evaluation.severity == dg.AssetCheckSeverity.WARN
    assert evaluation.metadata["lingering"].value == 1


def test_a_database_soft_destroyed_during_the_pass_is_skipped_not_a_failed_run(
    store: ObjectStore,
    resources: dict[str, object],
    instance: dg.DagsterInstance,
    orders: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 37, item 8's follow-up: refreshing a soft-destroyed database's checkpoint is an
    error (seed 003), and a destroy landing between the asset's inspection and its refresh made the
    run fail with DatabaseDestroyed. The pass now logs the destroy and ends as skipped."""
    # a retention checkpoint in the second half of its 1 h lifetime: the plan refreshes it
    admin.create_checkpoint(
        orders,
        store,
        CheckpointOptions(lifetime=timedelta(hours=1), name="retention"),
        now=lambda: time.time() - 45 * 60,
    )
    planned = plan_checkpoints

    def plan_then_destroy(*args: Any, **kwargs: Any) -> Any:
        plan = planned(*args, **kwargs)
        assert plan.refresh, "the test needs a refresh in the plan"
        destroy(orders, store, soft=True)  # a real soft destroy, between plan and refresh
        return plan

    monkeypatch.setattr("orchestration.assets.plan_checkpoints", plan_then_destroy)
    add_partitions(instance, orders)
    result = dg.materialize(
        [checkpoint_refresh], partition_key=orders, resources=resources, instance=instance
    )
    assert result.success
    assert result.asset_materializations_for_node("checkpoint_refresh") == []
    (seen,) = result.asset_observations_for_node("checkpoint_refresh")
    assert "soft-destroyed" in str(seen.metadata)
