"""health_check_job: every check of one database, deeply, launched for one partition (what the UI
does from the job's launchpad or a check's "Execute"); without a partition it fails saying so."""

from __future__ import annotations

import dagster as dg

from orchestration.assets import ASSETS
from orchestration.checks import CHECKS, health_check_job
from orchestration.fleet_state import INTACT, L0
from slatedb_core import ObjectStore
from slatedb_core.health import inspect_database
from slatedb_core.lsm.dbstate import resolve_sst_path
from tests.orchestration.conftest import add_partitions


def _job(resources: dict[str, object]) -> dg.JobDefinition:
    defs = dg.Definitions(
        assets=ASSETS, asset_checks=CHECKS, jobs=[health_check_job], resources=resources
    )
    return defs.resolve_job_def("health_check_job")


def test_the_deep_check_finds_a_corrupt_l0_sst_that_a_listing_cannot(
    store: ObjectStore,
    resources: dict[str, object],
    instance: dg.DagsterInstance,
    orders: str,
) -> None:
    add_partitions(instance, orders)
    stored, _ = inspect_database(store, orders)
    m = stored.manifest
    sst = next(s for s in m.ssts if s.id == m.l0[0].sst_id)
    path = resolve_sst_path(orders, m, sst)
    data = bytearray(store.get(path).data)
    data[100] ^= 0xFF  # inside the first data block: only reading it finds this
    store.put(path, bytes(data))

    # The partition travels as the run's tag, as when the UI launches the job for a partition
    # (execute_in_process's partition_key= refuses a job of checks only in Dagster 1.13).
    result = _job(resources).execute_in_process(
        tags={"dagster/partition": orders}, instance=instance, raise_on_error=False
    )
    assert result.success  # failed checks are results, not step failures
    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert len(evaluations) == len(CHECKS)
    intact = evaluations[INTACT]
    assert not intact.passed and intact.severity == dg.AssetCheckSeverity.ERROR
    assert intact.description is not None and orders in intact.description
    assert path in intact.description and "CorruptionError" in intact.description
    l0 = evaluations[L0]
    assert not l0.passed and l0.severity == dg.AssetCheckSeverity.WARN
    assert result.get_asset_materialization_events() == []  # checks only: nothing rewritten


def test_without_a_partition_the_checks_fail_saying_what_to_do(
    resources: dict[str, object], instance: dg.DagsterInstance, orders: str
) -> None:
    job = dg.define_asset_job("unpartitioned_checks", selection=dg.AssetSelection.checks(*CHECKS))
    defs = dg.Definitions(assets=ASSETS, asset_checks=CHECKS, jobs=[job], resources=resources)
    result = defs.resolve_job_def("unpartitioned_checks").execute_in_process(
        instance=instance, raise_on_error=False
    )
    assert not result.success
    failures = [e for e in result.all_events if e.is_step_failure]
    assert failures
    for event in failures:
        data = event.step_failure_data
        said = data.user_failure_data.description if data.user_failure_data else None
        assert "launch them for one database partition" in (said or "")


def test_maintenance_runs_do_not_run_the_checks(
    resources: dict[str, object], instance: dg.DagsterInstance, orders: str
) -> None:
    """A check right after compaction measured the L0 the pass had just emptied (always passing),
    and showed "Execution failed" without a database when the pass failed."""
    from orchestration.jobs import JOBS

    add_partitions(instance, orders)
    defs = dg.Definitions(assets=ASSETS, asset_checks=CHECKS, jobs=JOBS, resources=resources)
    result = defs.resolve_job_def("compaction_job").execute_in_process(
        partition_key=orders, instance=instance
    )
    assert result.success
    assert result.get_asset_check_evaluations() == []
    assert len(result.get_asset_materialization_events()) == 1
