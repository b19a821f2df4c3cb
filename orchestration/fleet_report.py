"""How fleet_sensor's check results reach Dagster: one ``fleet_report_job`` run per tick that has
results to report, carrying them in its run config and logging each as an asset check evaluation
on the database's partition.

Why a run and not the sensor's own ``asset_events``: Dagster 1.13 stores a check result reported
without a run under the run id ``""``, and its index of check executions is unique on (asset,
check, run id, partition). A second result for the same check of the same database, reported
without a run, then fails the insert (``report_runless_asset_event`` raises), the tick fails
before its cursor is saved, and every later tick fails the same way. Results logged by a run are
keyed by that run's id, so each tick's run adds a row of history per database and check, and
the UI links each result to the run that reported it.
"""

import hashlib
import json
from collections.abc import Sequence
from typing import Any, cast

import dagster as dg
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,
)
from pydantic import Field

from orchestration.assets import checkpoint_refresh, compaction, garbage_collection
from orchestration.fleet_state import BOUNDARIES, ERROR, INTACT, L0, LAG, LINGER, WAL, Finding
from orchestration.markdown import markdown_literal

CHECK_ASSET = {
    INTACT: garbage_collection.key,
    L0: compaction.key,
    WAL: compaction.key,
    LAG: checkpoint_refresh.key,
    BOUNDARIES: garbage_collection.key,
    LINGER: checkpoint_refresh.key,
}
REPORT_JOB = "fleet_report_job"
REPORT_OP = "report_check_results"


class CheckResult(dg.Config):
    """One check result of one database, as fleet_sensor judged it."""

    database: str
    check: str
    passed: bool
    severity: str = Field(description="WARN or ERROR")
    description: str
    value: int | None = None
    threshold: int | None = None


class FleetReport(dg.Config):
    results: list[CheckResult] = Field(default_factory=list)


def target_of(
    instance: dg.DagsterInstance, asset_key: dg.AssetKey, db: str
) -> AssetCheckEvaluationTargetMaterializationData | None:
    """The latest materialization of the asset's partition: the one a result judges. Without it
    Dagster counts a result as older than any materialization of the partition, and the check
    page shows the database grey ("not evaluated") from its first maintenance run on."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=[db]), limit=1
    ).records
    if not records:
        return None
    mat = records[0]
    return AssetCheckEvaluationTargetMaterializationData(
        storage_id=mat.storage_id, run_id=mat.run_id, timestamp=mat.timestamp
    )


def evaluation(
    r: CheckResult, target: AssetCheckEvaluationTargetMaterializationData | None = None
) -> dg.AssetCheckEvaluation:
    metadata: dict[str, Any] = {"database": dg.MetadataValue.text(r.database)}
    if r.value is not None:
        metadata["value"] = dg.MetadataValue.int(r.value)
    if r.threshold is not None:
        metadata["threshold"] = dg.MetadataValue.int(r.threshold)
    return dg.AssetCheckEvaluation(
        asset_key=CHECK_ASSET[r.check],
        check_name=r.check,
        passed=r.passed,
        severity=dg.AssetCheckSeverity.ERROR if r.severity == ERROR else dg.AssetCheckSeverity.WARN,
        description=markdown_literal(r.description),  # the UI renders it as Markdown
        partition=r.database,
        metadata=metadata,
        target_materialization_data=target,
    )


@dg.op(name=REPORT_OP, description="Logs fleet_sensor's check results, one per database and check.")
def report_check_results(context: dg.OpExecutionContext, config: FleetReport) -> None:
    targets: dict[tuple[dg.AssetKey, str], AssetCheckEvaluationTargetMaterializationData | None]
    targets = {}
    for r in config.results:
        key = (CHECK_ASSET[r.check], r.database)
        if key not in targets:
            targets[key] = target_of(context.instance, *key)
        # log_event records an AssetCheckEvaluation under this run (its type hints name only
        # materializations, observations and expectations)
        context.log_event(cast(Any, evaluation(r, targets[key])))
    context.log.info(
        f"{len(config.results)} check results, "
        f"{sum(1 for r in config.results if not r.passed)} failing"
    )


@dg.job(
    name=REPORT_JOB,
    executor_def=dg.in_process_executor,
    tags={"slatedb/kind": "fleet-report"},
    description=(
        "Requested by fleet_sensor: records the check results of the databases whose results "
        "changed in one tick (each run is one tick's report)."
    ),
)
def fleet_report_job() -> None:
    report_check_results()


def result_of(db: str, f: Finding) -> CheckResult:
    return CheckResult(
        database=db,
        check=f.check,
        passed=f.passed,
        severity=f.severity,
        description=f.description,
        value=f.figure,
        threshold=f.limit,
    )


REPORT_PRIORITY = "10"


def report_request(results: Sequence[CheckResult], basis: str = "") -> dg.RunRequest:
    """The run reporting ``results``; its key digests them with ``basis`` (the sensor's previous
    cursor), so a tick re-evaluated from the same cursor (a retried tick) does not report them
    twice, while the same results reported again later (a check failing again with the same
    figures after it had passed) get a new key: Dagster launches a sensor's run key once."""
    payload = [r.model_dump() for r in results]
    keyed = json.dumps([payload, basis], sort_keys=True).encode()
    digest = hashlib.sha1(keyed).hexdigest()[:16]
    failing = sum(1 for r in results if not r.passed)
    return dg.RunRequest(
        run_key=f"fleet-report:{digest}",
        job_name=REPORT_JOB,
        run_config={"ops": {REPORT_OP: {"config": {"results": payload}}}},
        # ahead of maintenance runs in the queue: the checks' news must not wait behind a backlog
        # of compactions and GC passes (the queued run coordinator takes higher priority first)
        tags={
            "slatedb/reason": f"{len(results)} check results changed, {failing} failing",
            "dagster/priority": REPORT_PRIORITY,
        },
    )


def reported_checks(run_config: Any) -> list[tuple[str, str]]:
    """(database, check) of each result a report run's config carries (none for another
    shape)."""
    try:
        results = run_config["ops"][REPORT_OP]["config"]["results"]
        return [(str(r["database"]), str(r["check"])) for r in results]
    except (KeyError, TypeError):
        return []


def reported(request: dg.RunRequest) -> list[dg.AssetCheckEvaluation]:
    """The evaluations a report run will log (for tests and the sample data's driver)."""
    config = request.run_config["ops"][REPORT_OP]["config"]
    return [evaluation(CheckResult(**r)) for r in config["results"]]
