"""The main job as Dagster assets: one run materialises the whole lakehouse pipeline.

::

    orders_table ─> compacted_shards ─> daily_checkpoint ─> checkpoint_read_under_writes
                                                                          │
    orders_delta_export <─ scratch_clone_gc <─ rescaled_table <───────────┘

(``orders_delta_export`` also reads ``daily_checkpoint``'s snapshot.)

The steps live by what they do: Spark ingest and compaction in :mod:`lakehouse_demo.spark_steps`;
the named snapshot, the read under writes and the Delta export in
:mod:`lakehouse_demo.snapshot_steps`; split, merge, clone, destroy and GC in
:mod:`lakehouse_demo.lifecycle_steps`. Each calls the public APIs of ``slatedb_core`` (Table,
admin, health) and ``spark_jobs`` (ingest, compact) and returns what it measured, both as its
output (the next assets read the snapshot from it; the CLI's summary is built from it) and as
Dagster metadata (shown in the UI). Every figure is measured while the step runs.
"""

from __future__ import annotations

from typing import Any

import dagster as dg

from lakehouse_demo.lifecycle_steps import rescaled_table, scratch_clone_gc
from lakehouse_demo.snapshot_steps import (
    checkpoint_read_under_writes,
    daily_checkpoint,
    orders_delta_export,
)
from lakehouse_demo.spark_steps import compacted_shards, orders_table

ASSETS = [
    orders_table,
    compacted_shards,
    daily_checkpoint,
    checkpoint_read_under_writes,
    rescaled_table,
    scratch_clone_gc,
    orders_delta_export,
]
STEPS = [a.key.path[-1] for a in ASSETS]
demo_job = dg.define_asset_job("lakehouse_demo_job", selection=ASSETS)


def asset_outputs(result: dg.ExecuteInProcessResult) -> dict[str, dict[str, Any]]:
    """Each asset's output dict from a finished in-process run."""
    return {name: result.output_for_node(name) for name in STEPS}
