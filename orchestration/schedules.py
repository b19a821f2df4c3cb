"""Cron schedules (from the settings file): each tick requests one run per known partition."""


import dagster as dg
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

from orchestration.jobs import checkpoint_job, compaction_job, export_job, gc_job, rescaling_job
from orchestration.partitions import DATABASES, TABLES
from orchestration.settings import ScheduleSettings


def _per_partition(
    job: UnresolvedAssetJobDefinition,
    partitions: str,
    cron: str,
    settings: ScheduleSettings,
) -> dg.ScheduleDefinition:
    status = dg.DefaultScheduleStatus.RUNNING if settings.running else dg.DefaultScheduleStatus.STOPPED

    @dg.schedule(
        name=f"{job.name.removesuffix('_job')}_schedule",
        cron_schedule=cron,
        job=job,
        execution_timezone=settings.timezone,
        default_status=status,
        description=f"{job.name} for every {partitions} partition, on cron {cron!r}",
    )
    def _schedule(context: dg.ScheduleEvaluationContext) -> list[dg.RunRequest]:
        tick = context.scheduled_execution_time.isoformat() if context.scheduled_execution_time else ""
        return [
            dg.RunRequest(run_key=f"{key}@{tick}", partition_key=key)
            for key in context.instance.get_dynamic_partitions(partitions)
        ]

    return _schedule


def build_schedules(settings: ScheduleSettings) -> list[dg.ScheduleDefinition]:
    return [
        _per_partition(compaction_job, DATABASES, settings.compaction, settings),
        _per_partition(gc_job, DATABASES, settings.garbage_collection, settings),
        _per_partition(checkpoint_job, DATABASES, settings.checkpoint_refresh, settings),
        _per_partition(export_job, DATABASES, settings.delta_export, settings),
        _per_partition(rescaling_job, TABLES, settings.rescaling, settings),
    ]
