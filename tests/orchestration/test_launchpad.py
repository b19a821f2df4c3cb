"""health_check_job from the Launchpad (issue 40, item 10): the job is partitioned over the
databases' dynamic partitions, so the Launchpad shows a partition picker and a schedule or sensor
can launch it for one database; launched without a partition, it fails saying to pick one."""

from __future__ import annotations

import dagster as dg
from dagster._core.remote_representation.external_data import RepositorySnap

from orchestration.assets import ASSETS
from orchestration.checks import CHECKS, health_check_job
from orchestration.partitions import DATABASES, databases_partitions
from tests.orchestration.conftest import add_partitions


def _defs(resources: dict[str, object]) -> dg.Definitions:
    return dg.Definitions(
        assets=ASSETS, asset_checks=CHECKS, jobs=[health_check_job], resources=resources
    )


def test_the_resolved_job_has_the_databases_partitions_and_a_partition_set(
    resources: dict[str, object],
) -> None:
    """The Launchpad's picker is the job's partition set in the repository snapshot: a job of
    checks only lost its partitions_def when resolved (Dagster 1.13 infers it from executable
    assets, and there are none)."""
    defs = _defs(resources)
    job = defs.resolve_job_def("health_check_job")
    assert job.partitions_def == databases_partitions
    snap = RepositorySnap.from_def(defs.get_repository_def())
    sets = [p for p in snap.partition_sets if p.job_name == "health_check_job"]
    assert len(sets) == 1
    assert DATABASES in repr(sets[0].partitions)


def test_launched_for_one_database_every_check_is_evaluated_on_its_partition(
    resources: dict[str, object], instance: dg.DagsterInstance, orders: str
) -> None:
    add_partitions(instance, orders, "other")
    job = _defs(resources).resolve_job_def("health_check_job")
    result = job.execute_in_process(partition_key=orders, instance=instance, raise_on_error=False)
    assert result.success
    assert result.dagster_run.tags.get("dagster/partition") == orders
    evaluations = result.get_asset_check_evaluations()
    assert len(evaluations) == len(CHECKS)
    assert {e.partition for e in evaluations} == {orders}  # filed under the database
    assert result.get_asset_materialization_events() == []


def test_launched_without_a_partition_it_fails_naming_the_partition_picker(
    resources: dict[str, object], instance: dg.DagsterInstance, orders: str
) -> None:
    add_partitions(instance, orders)
    job = _defs(resources).resolve_job_def("health_check_job")
    result = job.execute_in_process(instance=instance, raise_on_error=False)
    assert not result.success
    failures = [e for e in result.all_events if e.is_step_failure]
    assert failures
    for event in failures:
        data = event.step_failure_data
        said = data.user_failure_data.description if data.user_failure_data else ""
        assert "partition picker" in (said or "") and "health_check_job" in (said or ""), said
    assert result.get_asset_check_evaluations() == []
