"""Batch ingest into a sharded table, exactly once per shard: staged SSTs, the per-shard commit,
its done markers and their cleanup. ``spark_jobs.ingest`` runs these from Spark tasks (its module
doc tells the whole job and why retries and speculative copies are safe); nothing here knows
Spark.

Everything an ingest keeps lives under ``<table>/_ingest/<job>/`` (names in
:mod:`slatedb_core.layout`)::

    staged/<run>/<partition>-<attempt>-<nonce>/<run>-<shard_id>-<part>.sst
                      the SSTs one task attempt staged (stage_ssts): sorted rows of one input
                      partition cut at the shard boundaries, each created if absent
                      (slatedb_core.sst.create), under the attempt's own directory so retries
                      and speculative copies never share an object
    {shard_id:010}.done
                      the done marker: the job committed that shard (commit_shard)

The commit of one shard (:func:`commit_shard`)::

    open the fenced writer     Db.open fences every earlier attempt; then the latest map is
                               read again: a shard split, merged or sealed meanwhile is refused
                               (slatedb_core.table.writers)
    done marker of this job?   a finished attempt exists: write nothing (if it is this run's,
                               report its commit)
    Db.ingest_ssts(staged)     each staged SST copied into the database, then ONE fenced
                               manifest update adding them all to L0, oldest first
    close, put the marker      create-if-absent: a concurrent attempt's marker is the same outcome

A run's staged SSTs are deleted when the run ends (:func:`delete_staging`); what a zombie attempt
stages after that, and the done markers, are deleted by :func:`collect_leftovers` (through
``Table.collect_garbage``) once older than the longest job.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta

import pyarrow as pa

from slatedb_core.errors import (
    DatabaseDestroyed,
    Fenced,
    InvalidArgument,
    ObjectAlreadyExists,
    ObjectNotFound,
    ShardMapConflict,
)
from slatedb_core.layout import (
    ingest_attempt_dir,
    ingest_dir,
    ingest_done_marker,
    ingest_staging_dir,
    join,
    staged_sst_name,
)
from slatedb_core.options import DbOptions
from slatedb_core.sst.create import create_sst
from slatedb_core.sst.scratch import thread_scratch
from slatedb_core.store.objectstore import ObjectStore, check_store
from slatedb_core.table.shardmap import Shard, ShardMap, ShardMapStore
from slatedb_core.table.staged import encode_ranges
from slatedb_core.table.writers import open_shard_writer

log = logging.getLogger(__name__)

__all__ = [
    "REFUSED",
    "SKIPPED",
    "WRITTEN",
    "IngestPlan",
    "ShardIngestStats",
    "StagedSst",
    "attempt_dir",
    "collect_leftovers",
    "commit_shard",
    "delete_staging",
    "plan_ingest",
    "stage_ssts",
]

WRITTEN, SKIPPED, REFUSED = "written", "skipped", "refused"
"""Statuses of a shard's commit: committed by this attempt; an earlier attempt of the same job
had already committed it; the shard map no longer routes to this shard."""

_MARKER_COUNTS = ("rows", "ssts", "bytes", "manifest_id")


@dataclass(frozen=True)
class IngestPlan:
    """What an ingest job's tasks need, fixed before any task runs. Picklable."""

    table_path: str
    job_id: str
    shard_map: ShardMap

    @property
    def shards(self) -> tuple[Shard, ...]:
        return self.shard_map.shards


def plan_ingest(table_path: str, store: ObjectStore, job_id: str | None = None) -> IngestPlan:
    """The plan of a job ingesting into ``table_path`` now: its latest shard map routes the rows
    (a fresh job id unless given)."""
    shard_map = ShardMapStore(check_store(store), table_path).read_latest()
    return IngestPlan(table_path, job_id or uuid.uuid4().hex, shard_map)


@dataclass(frozen=True)
class ShardIngestStats:
    """The outcome of one shard's commit (one row of the job's statistics)."""

    shard_index: int
    shard_id: int
    db_path: str
    status: str
    message: str
    rows: int
    ssts: int
    bytes: int
    manifest_id: int
    writer_epoch: int
    partition: int
    attempt: int
    duration_s: float


# ---- staging ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class StagedSst:
    shard: Shard
    run: int
    part: int
    path: str
    rows: int
    bytes: int


def attempt_dir(plan: IngestPlan, run_id: str, partition: int, attempt: int) -> str:
    """A fresh directory of one task attempt (retries and speculative copies never share one)."""
    staging = ingest_staging_dir(plan.table_path, plan.job_id, run_id)
    return ingest_attempt_dir(staging, partition, attempt, uuid.uuid4().hex[:8])


def stage_ssts(
    store: ObjectStore,
    plan: IngestPlan,
    directory: str,
    run: int,
    rows: Sequence[pa.RecordBatch],
    options: DbOptions | None = None,
) -> Iterator[StagedSst]:
    """Sort ``rows`` (``key`` binary, ``value`` binary, null = delete) once, cut them at the
    plan's shard boundaries and stage them as SSTs under ``directory`` (an :func:`attempt_dir`),
    as run ``run`` of the attempt (later runs are newer)."""
    for sst in encode_ranges(
        rows, plan.shard_map.split_points, options=options, scratch=thread_scratch()
    ):
        shard = plan.shards[sst.range_index]
        path = join(directory, staged_sst_name(run, shard.shard_id, sst.part))
        # sst.data is a memoryview of the encoder's scratch: create_sst hands it on uncopied
        create_sst(store, path, sst.data)
        # written once, never read here, linked into the database by the commit: out of the
        # page cache with it (on a local disk), so that the next SST reuses its pages
        store.flush_and_evict([path])
        yield StagedSst(shard, run, sst.part, path, sst.info.entry_count, sst.info.size_bytes)


# ---- the commit ------------------------------------------------------------------------------
def commit_shard(
    store: ObjectStore,
    plan: IngestPlan,
    run_id: str,
    shard: Shard,
    sources: list[str],
    *,
    partition: int = -1,
    attempt: int = 0,
    options: DbOptions | None = None,
) -> ShardIngestStats:
    """Commit the staged SSTs ``sources`` (oldest first) of ``shard`` through its fenced writer,
    exactly once per job (see the module doc). ``partition``/``attempt``: the task doing it, as
    reported in the statistics and the done marker. Raises Fenced if a later attempt fenced this
    one before its commit."""
    started = time.monotonic()

    def stats(status: str, message: str, **counts: int) -> ShardIngestStats:
        return ShardIngestStats(
            shard_index=shard.index,
            shard_id=shard.shard_id,
            db_path=shard.db_path,
            status=status,
            message=message,
            rows=counts.get("rows", 0),
            ssts=counts.get("ssts", 0),
            bytes=counts.get("bytes", 0),
            manifest_id=counts.get("manifest_id", 0),
            writer_epoch=counts.get("writer_epoch", 0),
            partition=partition,
            attempt=attempt,
            duration_s=time.monotonic() - started,
        )

    marker = ingest_done_marker(plan.table_path, plan.job_id, shard.shard_id)
    maps = ShardMapStore(store, plan.table_path)
    try:
        db, _ = open_shard_writer(maps, shard, options or DbOptions())  # fences; then re-checks
    except (ShardMapConflict, DatabaseDestroyed) as e:
        return stats(REFUSED, f"{type(e).__name__}: {e}")
    result = None
    try:
        epoch = db.writer_epoch
        done = _read_marker(store, marker)
        if done is not None:
            if done.get("run") == run_id:  # an earlier attempt of this very run
                return dataclasses.replace(
                    stats(WRITTEN, f"committed by attempt {done.get('attempt')} of this run",
                          **{k: _marker_int(done, k, 0) for k in _MARKER_COUNTS}),
                    writer_epoch=_marker_int(done, "epoch", 0),
                    attempt=_marker_int(done, "attempt", attempt),
                )
            return stats(SKIPPED, "an earlier attempt of this job committed the shard",
                         writer_epoch=epoch)
        result = db.ingest_ssts(sources)
    finally:
        try:
            db.close()
        except Fenced:
            # A writer fenced after our ingest committed: close reports it (RELIABILITY.md,
            # review finding 8), but this attempt buffered nothing, so the commit stands and the
            # marker must be written (a retry would ingest the shard again).
            if result is None:
                raise
    counts = {"rows": result.rows, "ssts": result.ssts, "bytes": result.bytes_written,
              "manifest_id": result.manifest_id}
    body = {**counts, "epoch": epoch, "run": run_id, "attempt": attempt}
    try:
        store.put_if_absent(marker, json.dumps(body).encode())
    except ObjectAlreadyExists:
        pass  # a concurrent attempt of the same job finished too: same rows, same outcome
    return stats(WRITTEN, "", writer_epoch=epoch, **counts)


def _marker_int(body: dict[str, object], key: str, default: int) -> int:
    """An integer field of a done marker; ``default`` when it is missing or not an integer."""
    v = body.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else default


def _read_marker(store: ObjectStore, path: str) -> dict[str, object] | None:
    """The done marker's body (``{}`` if unreadable), or None when there is none."""
    try:
        data = store.get(path).data
    except ObjectNotFound:
        return None
    try:
        body = json.loads(data)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


# ---- cleanup ---------------------------------------------------------------------------------
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
    were deleted and their bytes. Safe once ``min_age`` exceeds the longest ingest job: a done
    marker only matters while its job can still run (it keeps a late attempt of that job from
    committing again, and such an attempt fails anyway once its run's staged SSTs are gone). A
    shorter ``min_age`` fails a running job's commits, which loses nothing: nothing of the shard
    is committed and the job can be run again."""
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
