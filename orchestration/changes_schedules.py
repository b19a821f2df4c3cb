"""The change-feed schedules: ``changes_to_delta_schedule`` runs a ``changes_to_delta`` pass for
every live database, and ``changes_table_to_delta_schedule`` a ``changes_table_to_delta`` pass
for every table partition, on the cron ``schedules.changes_to_delta`` of the settings file
(default every 5 minutes; issue 43, item 4; docs/changes.md "Dagster").

Each pass applies what the feed has after the cursor the Delta table recorded, so a tick is an
incremental step and a tick with nothing new commits nothing. They are defined in every
deployment but start stopped unless ``schedules.changes_to_delta_running`` (and ``running``)
is true: a pass registers a consumer whose checkpoint pins WAL in every database it reads, which
a deployment chooses, unlike maintenance. The database schedule is the maintenance schedules'
(:func:`orchestration.schedules.per_database`): live databases only, none for a database whose
last pass is still in flight or held back after a failure with an alert.
"""

from __future__ import annotations

import dataclasses

import dagster as dg

from orchestration.changes_assets import changes_table_to_delta_job, changes_to_delta_job
from orchestration.fleet_sensor import runs_in_flight
from orchestration.fleet_state import LIVE_STATES
from orchestration.partitions import TABLES
from orchestration.schedules import per_database
from orchestration.settings import ScheduleSettings


def _table_schedule(cron: str, settings: ScheduleSettings) -> dg.ScheduleDefinition:
    status = (
        dg.DefaultScheduleStatus.RUNNING if settings.running else dg.DefaultScheduleStatus.STOPPED
    )
    job = changes_table_to_delta_job

    @dg.schedule(
        name="changes_table_to_delta_schedule",
        cron_schedule=cron,
        job=job,
        execution_timezone=settings.timezone,
        default_status=status,
        description=f"{job.name} for every table partition, on cron {cron!r}",
    )
    def _schedule(context: dg.ScheduleEvaluationContext) -> list[dg.RunRequest] | dg.SkipReason:
        tick = context.scheduled_execution_time
        keys = sorted(context.instance.get_dynamic_partitions(TABLES))
        busy = runs_in_flight(context.instance, job.name)
        runs = [
            dg.RunRequest(
                run_key=f"{key}@{tick.isoformat() if tick else ''}",
                partition_key=key,
                tags={"slatedb/table": key, "slatedb/reason": "changes_table_to_delta_schedule"},
            )
            for key in keys
            if key not in busy
        ]
        if not runs:
            return dg.SkipReason(
                "no table partitions yet"
                if not keys
                else "every table's last pass is still in flight: "
                + ", ".join(f"{k} ({v})" for k, v in sorted(busy.items())[:20])
            )
        return runs

    return _schedule


def build_changes_schedules(settings: ScheduleSettings) -> list[dg.ScheduleDefinition]:
    """The two change-feed schedules, stopped unless the settings turn them on."""
    on = dataclasses.replace(
        settings, running=settings.running and settings.changes_to_delta_running
    )
    cron = settings.changes_to_delta
    return [
        per_database(changes_to_delta_job, cron, on, LIVE_STATES),
        _table_schedule(cron, on),
    ]


__all__ = ["build_changes_schedules"]
