"""One fleet_sensor tick for tests: the SensorResult split into the maintenance runs it requested
and the check results its fleet_report_job run will log (merged into ``asset_events``, where a
test looks for them beside the observations and the fleet view)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from orchestration.fleet_report import REPORT_JOB, reported
from orchestration.fleet_sensor import evaluate_fleet
from orchestration.fleet_view import FLEET_KEY
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource


@dataclass
class Tick:
    run_requests: list[dg.RunRequest]
    """The maintenance runs (compaction, checkpoint refresh); not the report run."""
    asset_events: list[Any]
    skip_reason: dg.SkipReason | None
    cursor: str | None
    reports: list[dg.RunRequest] = field(default_factory=list)


def tick(
    instance: dg.DagsterInstance,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    cursor: str | None = None,
) -> Tick:
    result = evaluate_fleet(
        dg.build_sensor_context(instance=instance, cursor=cursor), store_resource, managed
    )
    assert isinstance(result, dg.SensorResult)
    runs = list(result.run_requests or [])
    reports = [r for r in runs if r.job_name == REPORT_JOB]
    assert len(reports) <= 1  # one report run per tick
    events = list(result.asset_events) + [e for r in reports for e in reported(r)]
    return Tick(
        run_requests=[r for r in runs if r.job_name != REPORT_JOB],
        asset_events=events,
        skip_reason=result.skip_reason,
        cursor=result.cursor,
        reports=reports,
    )


def fleet_view(events: Sequence[Any]) -> dg.AssetMaterialization:
    """The one materialization of slatedb_fleet among a tick's events."""
    (m,) = [
        e for e in events if isinstance(e, dg.AssetMaterialization) and e.asset_key == FLEET_KEY
    ]
    return m


def fleet_rows(m: dg.AssetMaterialization) -> dict[str, dict[str, object]]:
    """The fleet table's rows by database."""
    table = m.metadata["fleet"].value
    return {r.data["database"]: r.data for r in table.records}  # type: ignore[union-attr]
