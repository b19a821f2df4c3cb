"""The cleanup of table ingests (:mod:`slatedb_core.table.ingest`): a run's staged SSTs when it
ends, and every ingest leftover once older than the longest job."""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from slatedb_core.errors import InvalidArgument, ObjectNotFound
from slatedb_core.layout import INGEST_DIR, INGEST_PLAN_RECORD, ingest_dir, ingest_staging_dir
from slatedb_core.store.objectstore import ObjectMeta, ObjectStore

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


def collect_leftovers(store: ObjectStore, table_path: str, min_age: timedelta) -> tuple[int, int]:
    """Delete every object under ``<table>/_ingest/`` older than ``min_age``; returns how many
    were deleted and their bytes.

    Any ``min_age`` (0 included) is safe for the table's contents: a job without a txn commits a
    shard only while its plan record exists (``commit_shard`` looks for it after its checkpoint
    and done marker), and this deletes every old plan record BEFORE any other object, and none
    of a job whose record it could not delete (or that is younger than ``min_age``), so a
    marker is never gone while its plan record is there. A job with a txn is settled by its
    shards' records. What a short ``min_age`` costs is the running jobs it catches: their
    staged SSTs go, and their later commits are refused (IngestJobExpired) instead of applied;
    nothing of them is applied twice. Keep it above the longest job (the default 7 days) so
    that no job fails this way."""
    if min_age < timedelta(0):
        raise InvalidArgument(f"ingest_min_age must be >= 0, got {min_age}")
    cutoff = time.time() - min_age.total_seconds()
    listed = list(store.list(ingest_dir(table_path) + "/"))
    records = {_job_dir(m.path): m for m in listed if _is_plan_record(m.path)}
    old = [m for m in listed if m.last_modified.timestamp() <= cutoff]
    deleted = freed = 0

    def delete(m: ObjectMeta) -> None:
        nonlocal deleted, freed
        try:
            store.delete(m.path)
        except ObjectNotFound:
            return
        deleted += 1
        freed += m.size

    # 1. the plan records: from now on their jobs cannot commit (an error stops the pass here)
    gone = set()
    for job, m in records.items():
        if m.last_modified.timestamp() <= cutoff:
            delete(m)
            gone.add(job)
    # 2. the rest, but nothing of a job whose plan record stays
    for m in old:
        if _is_plan_record(m.path):
            continue
        job = _job_dir(m.path)
        if job in records and job not in gone:
            continue
        delete(m)
    if deleted:
        log.info("table %r: deleted %d ingest leftover(s), %d bytes", table_path, deleted, freed)
    return deleted, freed


def _is_plan_record(path: str) -> bool:
    return path.rsplit("/", 1)[-1] == INGEST_PLAN_RECORD


def _job_dir(path: str) -> str:
    """The ``<table>/_ingest/<job>`` an object under the table's ingest directory belongs to."""
    head, sep, rest = path.partition("/" + INGEST_DIR + "/")
    return head + sep + rest.split("/", 1)[0]
