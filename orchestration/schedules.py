"""Cron schedules (from the settings file): each tick requests one run per database (or table)
partition that has work of that kind, tagged with the database like the sensor's runs.

Which databases: compaction (only where L0 has reached ``compactor_l0_trigger``: an idle
database's run would do nothing, and 10,000 of them per tick would outrun the run queue),
checkpoint refresh (only where the checkpoint policies have something to do) and export run
for live databases only; GC also
for retired shards and soft-destroyed databases (it deletes them once unreferenced / past their
grace). Missing and damaged databases get none: their state comes from one fleet scan (shared
with ``fleet_sensor``, so a tick right after the sensor's re-reads only what changed), and a tick
that leaves databases out says which and why. A database whose run of the kind is still queued or
running gets no other: the run queue holds one run per database at a time, so a slow database
(or a busy queue) would otherwise collect one run per tick. A database whose last run of the
kind failed with an alert gets none while fleet_sensor's hold stands: the schedule asks
:func:`orchestration.holds.held_back`, the sensor's own rule, which databases are held.
"""

import time
from collections.abc import Callable, Collection

import dagster as dg
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

from orchestration.alerts import DATABASE_TAG
from orchestration.checkpoint_policy import plan_checkpoints
from orchestration.fleet_sensor import retired_shards, runs_in_flight, scan_fleet, scanner_for
from orchestration.fleet_state import GC_STATES, LIVE_STATES, l0_tag, state_of
from orchestration.holds import held_back
from orchestration.jobs import checkpoint_job, compaction_job, export_job, gc_job, rescaling_job
from orchestration.partitions import DATABASES, TABLES
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from orchestration.settings import ScheduleSettings
from slatedb_core import DatabaseStatus


def _tick(context: dg.ScheduleEvaluationContext) -> str:
    return context.scheduled_execution_time.isoformat() if context.scheduled_execution_time else ""


Idle = Callable[[DatabaseStatus, ManagedDatabasesResource], str | None]
"""Why a database in the right state has no work of the kind (None: it has)."""


def nothing_to_compact(status: DatabaseStatus, managed: ManagedDatabasesResource) -> str | None:
    """A compaction pass starts with L0 (slatedb_core.compactor.scheduler): below
    ``compactor_l0_trigger`` L0 SSTs it has nothing to do, and a run per idle database every
    tick would be 10,000 runs per tick at fleet scale, more than the run queue drains."""
    h = status.health
    if h is not None and h.l0_ssts < managed.compactor_l0_trigger:
        return f"L0 {h.l0_ssts} < compactor_l0_trigger {managed.compactor_l0_trigger}"
    return None


def checkpoints_up_to_date(status: DatabaseStatus, managed: ManagedDatabasesResource) -> str | None:
    """The plan checkpoint_refresh would carry out, from the scanned manifest's checkpoints: an
    empty one is a run that does nothing (one per database every 30 min at fleet scale)."""
    h = status.health
    if h is None:
        return None
    plan = plan_checkpoints(
        list(status.checkpoints),
        managed.checkpoints,
        time.time(),
        latest_manifest_id=h.manifest_id,
        manifest_lag_max=managed.manifest_lag_max,
    )
    if plan.create or plan.refresh or plan.delete or plan.retake:
        return None
    return "checkpoints up to date"


def _per_database(
    job: UnresolvedAssetJobDefinition,
    cron: str,
    settings: ScheduleSettings,
    states: Collection[str],
    idle: Idle | None = None,
) -> dg.ScheduleDefinition:
    status = (
        dg.DefaultScheduleStatus.RUNNING if settings.running else dg.DefaultScheduleStatus.STOPPED
    )
    kind = job.name.removesuffix("_job")

    @dg.schedule(
        name=f"{kind}_schedule",
        cron_schedule=cron,
        job=job,
        execution_timezone=settings.timezone,
        default_status=status,
        description=(
            f"{job.name} for every database partition that is {' / '.join(sorted(states))}"
            + (" and has work of that kind" if idle is not None else "")
            + f", on cron {cron!r}"
        ),
    )
    def _schedule(
        context: dg.ScheduleEvaluationContext,
        store: ObjectStoreResource,
        managed: ManagedDatabasesResource,
    ) -> list[dg.RunRequest] | dg.SkipReason:
        dbs = sorted(context.instance.get_dynamic_partitions(DATABASES))
        retired = retired_shards(store, managed, context.log)
        statuses = scan_fleet(scanner_for(store, managed.fleet_scan_concurrency), dbs)
        runs, left_out = [], []
        busy = runs_in_flight(context.instance, job.name)
        held = held_back(context.instance, kind, statuses)
        for db in dbs:
            state = state_of(statuses[db], retired)
            why = idle(statuses[db], managed) if idle is not None and state in states else None
            if state in states and db in busy:
                # the last tick's run has not finished: another would queue behind it (one run
                # per database), and a slow database would collect a run per tick
                left_out.append(f"{db} ({busy[db]})")
            elif state in states and db in held:
                # failed with an alert: the sensor holds it back, and so does every schedule
                left_out.append(f"held back: {held[db]}")
            elif why is not None:
                left_out.append(f"{db} ({why})")
            elif state in states:
                runs.append(
                    dg.RunRequest(
                        run_key=f"{db}@{_tick(context)}",
                        partition_key=db,
                        tags={
                            DATABASE_TAG: db,
                            "slatedb/reason": f"{kind}_schedule",
                            **(l0_tag(statuses[db].l0_sst_ids) if kind == "compaction" else {}),
                        },
                    )
                )
            else:
                left_out.append(f"{db} ({state})")
        if left_out:
            context.log.info(f"{kind}: left out {len(left_out)}: {', '.join(left_out[:20])}")
        if not runs:
            return dg.SkipReason(
                f"no database needs {kind}: "
                + (", ".join(left_out[:20]) if left_out else "no database partitions yet")
            )
        return runs

    return _schedule


per_database = _per_database
"""A schedule of an asset job per database partition, as the maintenance ones (public for
:mod:`orchestration.changes_schedules`)."""


def _per_table(cron: str, settings: ScheduleSettings) -> dg.ScheduleDefinition:
    status = (
        dg.DefaultScheduleStatus.RUNNING if settings.running else dg.DefaultScheduleStatus.STOPPED
    )

    @dg.schedule(
        name="rescaling_schedule",
        cron_schedule=cron,
        job=rescaling_job,
        execution_timezone=settings.timezone,
        default_status=status,
        description=f"rescaling_job for every table partition, on cron {cron!r}",
    )
    def _schedule(context: dg.ScheduleEvaluationContext) -> list[dg.RunRequest]:
        return [
            dg.RunRequest(
                run_key=f"{key}@{_tick(context)}",
                partition_key=key,
                tags={"slatedb/table": key, "slatedb/reason": "rescaling_schedule"},
            )
            for key in context.instance.get_dynamic_partitions(TABLES)
        ]

    return _schedule


def build_schedules(settings: ScheduleSettings) -> list[dg.ScheduleDefinition]:
    return [
        _per_database(
            compaction_job, settings.compaction, settings, LIVE_STATES, nothing_to_compact
        ),
        _per_database(gc_job, settings.garbage_collection, settings, GC_STATES),
        _per_database(
            checkpoint_job,
            settings.checkpoint_refresh,
            settings,
            LIVE_STATES,
            checkpoints_up_to_date,
        ),
        _per_database(export_job, settings.delta_export, settings, LIVE_STATES),
        _per_table(settings.rescaling, settings),
    ]
