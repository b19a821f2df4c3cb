"""The cleanup of table ingests (:mod:`slatedb_core.table.ingest`): a run's staged SSTs when it
ends, and every ingest leftover once older than the longest job."""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from slatedb_core.errors import InvalidArgument, ObjectNotFound
from slatedb_core.layout import ingest_dir, ingest_staging_dir
from slatedb_core.store.objectstore import ObjectStore

log = logging.getLogger(__name__)

__all__ = ["collect_leftovers", "delete_staging"]


def delete_staging(store: ObjectStore, table_path: str, job_id: str, run_id: str) -> int:
    """Delete what run ``run_id`` of the job staged (every commit of the run has copied what it
    needed, or failed; an attempt that copies later fails on a missing object and commits
    nothing). Returns how many objects were deleted."""
    prefix = ingest_staging_dir(table_path, job_id, run_id)
    paths = [m.path for m in store.list(prefix + "/")]
    if paths:
        with ThreadPoolExecutor(max_workers=min(16, len(paths))) as pool:
            list(pool.map(store.delete, paths))
    return len(paths)


def collect_leftovers(
    store: ObjectStore, table_path: str, min_age: timedelta
) -> tuple[int, int]:
    """Delete every object under ``<table>/_ingest/`` older than ``min_age``; returns how many
    were deleted and their bytes.

    The caller must guarantee that ``min_age`` is longer than any ingest job's life (from its
    plan to the end of its last task attempt): a done marker is the only record of a shard's
    commit once its checkpoint is dropped, and it must outlive every attempt of its job. With a
    shorter ``min_age`` a marker may go while its job still runs, and an attempt that staged its
    SSTs afresh (Spark re-running a map stage) finds neither marker nor checkpoint and commits
    the shard again, over whatever was written to it since (a delete is undone). Nothing here
    can tell a finished job from a running one: the age is the whole guarantee."""
    if min_age < timedelta(0):
        raise InvalidArgument(f"ingest_min_age must be >= 0, got {min_age}")
    cutoff = time.time() - min_age.total_seconds()
    old = [
        m for m in store.list(ingest_dir(table_path) + "/")
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
