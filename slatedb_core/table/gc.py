"""A sharded table's own garbage, besides its shard databases (collected by the database GC):
what batch ingest jobs leave under the table's root. Shard-map versions are collected by
:meth:`slatedb_core.table.shardmap.ShardMapStore.collect`; :meth:`Table.collect_garbage
<slatedb_core.table.table.Table.collect_garbage>` does both."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import timedelta

from slatedb_core.errors import InvalidArgument, ObjectNotFound
from slatedb_core.layout import join
from slatedb_core.store.objectstore import ObjectStore

log = logging.getLogger(__name__)

INGEST_DIR = "_ingest"
"""Under a table's root: what batch ingest jobs keep while they run (``spark_jobs.ingest``: SSTs
staged by a run, one done marker per committed shard of a job)."""


def ingest_prefix(table_path: str) -> str:
    return join(table_path, INGEST_DIR)


@dataclass(frozen=True)
class TableGcStats:
    """What :meth:`Table.collect_garbage` deleted."""

    shard_maps: int = 0
    """Shard-map versions."""
    ingest_objects: int = 0
    """Leftovers of ingest jobs under ``<table>/_ingest/``."""
    ingest_bytes: int = 0

    @property
    def deleted(self) -> int:
        return self.shard_maps + self.ingest_objects


def collect_ingest_leftovers(
    store: ObjectStore, table_path: str, min_age: timedelta
) -> tuple[int, int]:
    """Delete every object under ``<table>/_ingest/`` older than ``min_age``; returns how many
    were deleted and their bytes (see :meth:`Table.collect_garbage
    <slatedb_core.table.table.Table.collect_garbage>` for why that is safe)."""
    if min_age < timedelta(0):
        raise InvalidArgument(f"ingest_min_age must be >= 0, got {min_age}")
    cutoff = time.time() - min_age.total_seconds()
    old = [
        m for m in store.list(ingest_prefix(table_path) + "/")
        if m.last_modified.timestamp() <= cutoff
    ]
    deleted = freed = 0
    for m in old:
        try:
            store.delete(m.path)
        except ObjectNotFound:
            continue
        deleted += 1
        freed += m.size
    if deleted:
        log.info("table %r: deleted %d ingest leftover(s), %d bytes", table_path, deleted, freed)
    return deleted, freed
