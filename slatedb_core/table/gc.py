"""A sharded table's own garbage, besides its shard databases (collected by the database GC,
docs/gc-and-boundaries.md): shard-map versions (:meth:`ShardMapStore.collect
<slatedb_core.table.shardmap.ShardMapStore.collect>`), old versions of named snapshots' records
(:func:`slatedb_core.table.named_snapshots.collect_snapshot_records`) and what batch ingest jobs
leave under the table's root (:func:`slatedb_core.table.ingest.collect_leftovers`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from slatedb_core.options import check_duration
from slatedb_core.table.ingest import collect_leftovers
from slatedb_core.table.named_snapshots import collect_snapshot_records, sweep_snapshot_leftovers
from slatedb_core.table.shardmap import ShardMapStore

__all__ = ["TableGcStats", "collect_table_garbage"]


@dataclass(frozen=True)
class TableGcStats:
    """What :meth:`Table.collect_garbage <slatedb_core.table.table.Table.collect_garbage>`
    deleted."""

    shard_maps: int = 0
    """Shard-map versions."""
    ingest_objects: int = 0
    """Leftovers of ingest jobs under ``<table>/_ingest/``."""
    ingest_bytes: int = 0
    snapshot_records: int = 0
    """Old versions of named snapshots' records."""
    snapshot_checkpoints: int = 0
    """Shard checkpoints that dead creators of named snapshots left (deleted from the shards'
    manifests, not objects: not counted in :attr:`deleted`)."""

    @property
    def deleted(self) -> int:
        return self.shard_maps + self.ingest_objects + self.snapshot_records


def collect_table_garbage(
    maps: ShardMapStore, min_age: timedelta, ingest_min_age: timedelta
) -> TableGcStats:
    """Shard-map versions and named snapshots' record versions older than ``min_age`` (never a
    latest one), behind their GC boundaries; ingest leftovers older than ``ingest_min_age`` (see
    ``collect_leftovers``); named snapshots' leftover checkpoints (``sweep_snapshot_leftovers``,
    by their own SWEEP_MIN_AGE)."""
    check_duration("min_age", min_age, allow_zero=True)
    check_duration("ingest_min_age", ingest_min_age, allow_zero=True)
    deleted, freed = collect_leftovers(maps.store, maps.table_path, ingest_min_age)
    collected = maps.collect(min_age)
    records = collect_snapshot_records(maps.store, maps.table_path, min_age)
    swept = sweep_snapshot_leftovers(maps)
    return TableGcStats(
        shard_maps=collected,
        ingest_objects=deleted,
        ingest_bytes=freed,
        snapshot_records=records,
        snapshot_checkpoints=swept,
    )
