"""One asset job per maintenance kind, so schedules and sensors can request one kind of work for
one database partition (and the runs list reads "compaction_job [orders]"). Each job's partitions
are those of its asset: databases, or tables for rescaling."""

from __future__ import annotations

import dagster as dg

from orchestration.assets import (
    checkpoint_refresh,
    compaction,
    delta_export,
    garbage_collection,
    rescaling,
)

compaction_job = dg.define_asset_job("compaction_job", selection=[compaction])
gc_job = dg.define_asset_job("gc_job", selection=[garbage_collection])
checkpoint_job = dg.define_asset_job("checkpoint_job", selection=[checkpoint_refresh])
export_job = dg.define_asset_job("export_job", selection=[delta_export])
rescaling_job = dg.define_asset_job("rescaling_job", selection=[rescaling])

JOBS = [compaction_job, gc_job, checkpoint_job, export_job, rescaling_job]
