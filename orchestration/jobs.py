"""One asset job per maintenance kind, so schedules and sensors can request one kind of work for
one database partition (and the runs list reads "compaction_job [orders]")."""

from __future__ import annotations

import dagster as dg

from orchestration.assets import (
    checkpoint_refresh,
    compaction,
    delta_export,
    garbage_collection,
    rescaling,
)
from orchestration.partitions import databases_partitions, tables_partitions

compaction_job = dg.define_asset_job(
    "compaction_job", selection=[compaction], partitions_def=databases_partitions
)
gc_job = dg.define_asset_job(
    "gc_job", selection=[garbage_collection], partitions_def=databases_partitions
)
checkpoint_job = dg.define_asset_job(
    "checkpoint_job", selection=[checkpoint_refresh], partitions_def=databases_partitions
)
export_job = dg.define_asset_job(
    "export_job", selection=[delta_export], partitions_def=databases_partitions
)
rescaling_job = dg.define_asset_job(
    "rescaling_job", selection=[rescaling], partitions_def=tables_partitions
)

JOBS = [compaction_job, gc_job, checkpoint_job, export_job, rescaling_job]
