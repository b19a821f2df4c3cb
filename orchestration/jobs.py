"""One asset job per maintenance kind, so schedules and sensors can request one kind of work for
one database partition (and the runs list reads "compaction_job [orders]"). Each job's partitions
are those of its asset: databases, or tables for rescaling.

Each run is one step, so the jobs use the in-process executor: the multiprocess default starts a
second Python process per step, which made a no-op run take seconds (bench/dagster_run_bench.py,
bench/results/dagster_runs.txt)."""

from __future__ import annotations

import dagster as dg

from orchestration.assets import (
    checkpoint_refresh,
    compaction,
    delta_export,
    garbage_collection,
    rescaling,
)
from orchestration.partitions import databases_partitions

_IN_PROCESS = dg.in_process_executor


def _only(asset: dg.AssetsDefinition) -> dg.AssetSelection:
    """The asset without its checks: a check run right after its pass measures what the pass
    just did (L0 right after compaction emptied it), and is marked "Execution failed" without a
    database named when the pass fails. fleet_sensor evaluates the checks of the current state
    every tick, and health_check_job runs them on demand (docs/operations.md)."""
    return dg.AssetSelection.assets(asset).without_checks()


compaction_job = dg.define_asset_job(
    "compaction_job", selection=_only(compaction), executor_def=_IN_PROCESS
)
gc_job = dg.define_asset_job(
    "gc_job", selection=_only(garbage_collection), executor_def=_IN_PROCESS
)
checkpoint_job = dg.define_asset_job(
    "checkpoint_job", selection=_only(checkpoint_refresh), executor_def=_IN_PROCESS
)
export_job = dg.define_asset_job(
    "export_job", selection=_only(delta_export), executor_def=_IN_PROCESS
)
rescaling_job = dg.define_asset_job(
    "rescaling_job", selection=_only(rescaling), executor_def=_IN_PROCESS
)

JOBS = [compaction_job, gc_job, checkpoint_job, export_job, rescaling_job]


PER_DATABASE = dg.PartitionedConfig(
    partitions_def=databases_partitions, run_config_for_partition_key_fn=lambda _key: {}
)
"""The ``config=`` of a job of asset checks only (health_check_job): one run per database
partition. Dagster 1.13 infers an asset job's partitions from its executable assets and drops
``partitions_def=`` when there are none, so such a job had no partition picker in the Launchpad
and refused ``partition_key=``; a PartitionedConfig keeps the partitions (issue 40, item 10)."""
