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
    plan.json         the plan record, written by plan_ingest: a job without a txn commits
                      a shard only while it exists and holds its plan's token
                      (IngestPlan.record; a job id planned again after the GC collected its
                      record is a new job, and the collected plan's attempts stay expired)

Besides these objects, a commit leaves one checkpoint in the shard's manifest, named
``ingest:<job>:<run>:<shard_id>`` (:func:`~slatedb_core.layout.ingest_checkpoint_name`), from
its commit until its done marker is written.

The commit of one shard (:func:`commit_shard`)::

    open the fenced writer     Db.open fences every earlier attempt; then the latest map is
                               read again: a shard split, merged or sealed meanwhile is refused
                               (slatedb_core.table.writers), but its manifest is still read (as
                               of a fence: the rescale's, a destroy's or ours) for this job's
                               checkpoint, and with it or a marker the commit is settled below
    this job's checkpoint?     read in the manifest as of the fence, BEFORE the marker
    done marker of this job?   either one: an earlier attempt committed: write no data (if it
                               was this run's, report its commit); with a checkpoint and no
                               marker, write the marker and drop the checkpoint for it
    Db.ingest_ssts(staged,     each staged SST copied into the database, then ONE fenced
      checkpoint)              manifest update adding them all to L0, oldest first, AND the
                               job's checkpoint pinning that manifest (7 days' lifetime)
    close, put the marker      create-if-absent: a concurrent attempt's marker is the same outcome
    drop the checkpoint        it pins a manifest, so it must not linger

With a txn (``IngestPlan.txn``, an exactly-once batch: :mod:`.ingest_txn`), ``Db.ingest_ssts``
also records the batch's version in that same manifest update, or, when the shard already
records it or a later one (another job of the same batch committed it), commits nothing: the
shard is SKIPPED, with neither checkpoint nor marker (a later attempt decides the same again from
the manifest). The job's own checkpoint and marker are looked for first, so an earlier attempt
of this job that committed is still reported as this job's commit.

Why a checkpoint as well as the marker: an attempt may commit and then stop before its marker
(a lost executor, a stall). The marker alone cannot tell the next attempt that the SSTs are in:
it would commit them again, on top of whatever was written to the shard in between (a delete
would be undone). The checkpoint is committed in the same manifest update as the SSTs (both land
or neither, however the update's retries and ambiguous answers are settled), and an attempt that
has fenced the writer sees every commit of the attempts it fenced in the manifest it opened; it
reads that manifest before the marker, and the checkpoint is dropped only after the marker is
written, so no commit is missed. (SlateDB RFC 0004: a named checkpoint is what a manifest offers
for such a record; its lifetime is the safety net when every attempt stops in between.)

A run's staged SSTs are deleted when the run ends (:func:`delete_staging`); what a zombie attempt
stages after that, the done markers and the plan records are deleted by
:func:`collect_leftovers` (through ``Table.collect_garbage``) once older than its
``ingest_min_age``, which may be any age: collecting a marker can never let its job commit
again. The marker is the only record of a commit once its checkpoint is dropped, so an attempt
that finds neither (one that staged its rows afresh: Spark re-running a map stage) commits only
while the job's plan record exists, looked for after the marker; the GC deletes a job's plan
record before any of its markers, so the record found means no marker was collected (issue 37,
hole 4). A job whose record was collected fails with IngestJobExpired instead, having written
nothing. With a txn the shards' own records settle the job, and no plan record is needed.
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

from slatedb_core.checkpoints import drop_named_checkpoints
from slatedb_core.errors import (
    CorruptionError,
    DatabaseDestroyed,
    Fenced,
    IngestJobExpired,
    InvalidArgument,
    ObjectAlreadyExists,
    ObjectNotFound,
    ShardMapConflict,
)
from slatedb_core.layout import (
    ingest_attempt_dir,
    ingest_checkpoint_name,
    ingest_done_marker,
    ingest_job_dir,
    ingest_plan_record,
    ingest_staging_dir,
    join,
    parse_ingest_checkpoint_name,
    staged_sst_name,
)
from slatedb_core.manifest.model import Checkpoint, Manifest
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.meta.json_doc import load_stored_json
from slatedb_core.options import CheckpointOptions, DbOptions, check_optional
from slatedb_core.sst import SstReader
from slatedb_core.sst.create import create_sst
from slatedb_core.sst.scratch import thread_scratch
from slatedb_core.store.objectstore import ObjectStore, check_store
from slatedb_core.table.ingest_cleanup import collect_leftovers, delete_staging
from slatedb_core.table.ingest_seqs import SEQ_GAP, plan_seq_base, staged_seq, usable_seqs
from slatedb_core.table.ingest_txn import (
    AppVersion,
    applied_message,
    check_txn,
    table_app_versions,
)
from slatedb_core.table.options import TableOptions
from slatedb_core.table.shardmap import Shard, ShardMap, ShardMapStore
from slatedb_core.table.staged import encode_ranges
from slatedb_core.table.writers import act_as_writer, open_shard_writer
from slatedb_core.writer.db import Db
from slatedb_core.writer.ttl import Ttl

log = logging.getLogger(__name__)

__all__ = [
    "REFUSED",
    "SEQ_GAP",
    "SKIPPED",
    "WRITTEN",
    "AppVersion",
    "IngestPlan",
    "ShardIngestStats",
    "StagedSst",
    "attempt_dir",
    "check_job_id",
    "check_txn",
    "collect_leftovers",
    "commit_shard",
    "delete_staging",
    "plan_ingest",
    "put_once",
    "raise_if_refused",
    "stage_ssts",
    "table_app_versions",
]

WRITTEN, SKIPPED, REFUSED = "written", "skipped", "refused"
"""Statuses of a shard's commit: committed by this attempt; an earlier attempt of the same job
had already committed it, or the shard already records the plan's txn (its message names the
app and both versions); the shard map no longer routes to this shard."""

_MARKER_COUNTS = ("rows", "ssts", "bytes", "manifest_id")

INGEST_CHECKPOINT_LIFETIME = timedelta(days=7)
"""How long a commit's checkpoint may outlive its attempt: it is dropped once the done marker is
written, so it lingers only when every attempt stopped in between; the GC then expires it. (The
default ``ingest_min_age`` of ``Table.collect_garbage``: by then the job's plan record is
collected too, and no attempt of the job can commit.)"""


@dataclass(frozen=True)
class IngestPlan:
    """What an ingest job's tasks need, fixed before any task runs. Picklable.

    ``seq_base``: the seqs the job's staged rows carry start here (0: unknown, staged rows carry
    seq 0 and each commit re-encodes them with fresh seqs). SlateDB orders a key's versions by
    seq (docs/format.md, "Ingested SSTs"), so the rows must reach the database with seqs above
    everything written before the commit and ascending with the sources' order: staging them
    at ``seq_base + (partition << 12) + run`` does that without reading them again, unless a
    shard's writes passed ``seq_base`` meanwhile (then :meth:`Db.ingest_ssts
    <slatedb_core.writer.ingest.WriterIngest.ingest_ssts>` re-encodes).

    ``txn``: the job's exactly-once batch (:mod:`.ingest_txn`), or None.

    ``replaces``: set by :func:`~slatedb_core.table.overwrite.plan_overwrite` only: the id of
    the shard map whose shards the job replaces; ``shard_map`` then holds the target shards
    (fresh databases), which :func:`~slatedb_core.table.overwrite.commit_overwrite` commits
    (never :func:`commit_shard`).

    ``record``: the token of the job's plan record (``plan_ingest``): a job without a txn
    commits only while the record holding it exists, so that a plan whose record the GC
    collected stays expired when its job id is planned again (empty: any record of the job)."""

    table_path: str
    job_id: str
    shard_map: ShardMap
    seq_base: int = 0
    txn: AppVersion | None = None
    replaces: int | None = None
    record: str = ""

    def __post_init__(self) -> None:
        check_job_id(self.job_id)

    @property
    def shards(self) -> tuple[Shard, ...]:
        return self.shard_map.shards

    def staged_seq(self, partition: int, run: int) -> int:
        """The seq of every row that run ``run`` of input partition ``partition`` stages (0
        without a base: :func:`~slatedb_core.table.ingest_seqs.staged_seq`)."""
        return staged_seq(self.seq_base, partition, run)


MAX_JOB_ID_CHARS = 200
"""The longest ingest or overwrite job id (:func:`check_job_id`)."""


def check_job_id(job_id: object) -> str:
    """``job_id`` if it names one directory under ``<table>/_ingest/``: a non-empty str without
    ``/``, not ``.`` or ``..``. InvalidArgument otherwise: a job id with ``/`` nests one job's
    objects inside another's, and the table GC, which groups them by that directory, could
    collect a job's done markers while its plan record stays (issue 37, review of 104a7be).
    At most :data:`MAX_JOB_ID_CHARS` characters: an overwrite's id is kept in the shard map's
    bounded list of outcomes (docs/overwrite.md, "Retries"), which every map version carries."""
    if not isinstance(job_id, str) or not job_id or "/" in job_id or job_id in (".", ".."):
        raise InvalidArgument(
            f"ingest job id must be a non-empty str without '/' (not '.' or '..'), got {job_id!r}"
        )
    if len(job_id) > MAX_JOB_ID_CHARS:
        raise InvalidArgument(
            f"ingest job id must be at most {MAX_JOB_ID_CHARS} characters, got {len(job_id)}"
        )
    return job_id


def plan_ingest(
    table_path: str,
    store: ObjectStore,
    job_id: str | None = None,
    *,
    txn: AppVersion | None = None,
) -> IngestPlan:
    """The plan of a job ingesting into ``table_path`` now: its latest shard map routes the rows
    (a fresh job id unless given); the staged seqs start :data:`SEQ_GAP` above the highest
    ``last_l0_seq`` of the shards' latest manifests (:func:`plan_seq_base`). ``txn``: the
    job's exactly-once batch (:func:`check_txn` builds it from the options)."""
    store = check_store(store)
    check_optional("txn", txn, AppVersion)
    shard_map = ShardMapStore(store, table_path).read_latest()
    base = plan_seq_base(store, shard_map.shards)
    job = uuid.uuid4().hex if job_id is None else check_job_id(job_id)
    record = ingest_plan_record(table_path, job)
    if job_id is not None and _record_token(store, record) is None:
        _check_no_leftovers(store, table_path, job, shard_map)
    put_once(
        store,
        record,
        {
            "job": job,
            "shard_map": shard_map.id,
            "seq_base": base,
            "txn": None if txn is None else [txn.app_id, txn.version],
            "planned_at": time.time(),
            "token": uuid.uuid4().hex,
        },
    )
    # planned again while its record is there: the same job (its markers settle its shards)
    token = _record_token(store, record)
    if token is None:  # collected at once (ingest_min_age=0 racing the plan)
        raise IngestJobExpired(
            f"ingest job {job} into table {table_path!r}: its plan record "
            "was collected as it was planned; plan it again"
        )
    return IngestPlan(table_path, job, shard_map, base, txn, record=token)


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
    seq: int = 0  # of every row (IngestPlan.staged_seq)


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
    *,
    partition: int | None = None,
    ttl_ms: Ttl = None,
) -> Iterator[StagedSst]:
    """Sort ``rows`` (``key`` binary, ``value`` binary, null = delete) once, cut them at the
    plan's shard boundaries and stage them as SSTs under ``directory`` (an :func:`attempt_dir`),
    as run ``run`` of the attempt (later runs are newer). With the input ``partition``, the rows
    carry the plan's :meth:`~IngestPlan.staged_seq` (else seq 0: the commit re-encodes them).

    TTLs (SlateDB RFC 0003; :func:`~slatedb_core.table.staged.encode_ranges`): a ``ttl`` column
    of ``rows`` (ms, null: the default), else ``ttl_ms``, else ``options.default_ttl``; the
    staged rows store ``expire_ts`` = the staging time + TTL, which the commit carries."""
    seq = 0 if partition is None else plan.staged_seq(partition, run)
    for sst in encode_ranges(
        rows,
        plan.shard_map.split_points,
        seq=seq,
        options=options,
        scratch=thread_scratch(),
        ttl_ms=ttl_ms,
    ):
        shard = plan.shards[sst.range_index]
        path = join(directory, staged_sst_name(run, shard.shard_id, sst.part))
        # sst.data is a memoryview of the encoder's scratch: create_sst hands it on uncopied
        create_sst(store, path, sst.data)
        # written once, never read here, linked into the database by the commit: out of the
        # page cache with it (on a local disk), so that the next SST reuses its pages
        store.flush_and_evict([path])
        yield StagedSst(shard, run, sst.part, path, sst.info.entry_count, sst.info.size_bytes, seq)


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
    seqs: Sequence[int] | None = None,
    counts: Sequence[tuple[int, int]] | None = None,
) -> ShardIngestStats:
    """Commit the staged SSTs ``sources`` (oldest first) of ``shard`` through its fenced writer,
    exactly once per job (see the module doc). ``partition``/``attempt``: the task doing it, as
    reported in the statistics and the done marker. ``seqs``: the seq the rows of each source
    were staged with (:attr:`StagedSst.seq`), if known: the writer then links the sources as
    they are when it can (:meth:`Db.ingest_ssts
    <slatedb_core.writer.ingest.WriterIngest.ingest_ssts>`). ``counts``: the rows and bytes of
    each source as staged (:attr:`StagedSst.rows`, :attr:`StagedSst.bytes`), if known: what an
    attempt reports for an earlier attempt's commit of this run, which it otherwise reads from
    the sources' footers (gone when the table GC collected the running job: with the counts,
    that commit is still settled and reported). With the plan's txn, a shard that
    already records it is SKIPPED, and one with no ``sources`` still records it (the batch had
    no rows for it). Raises Fenced if a later attempt fenced this one before its commit."""
    started = time.monotonic()
    if counts is not None and len(counts) != len(sources):
        raise InvalidArgument(f"{len(counts)} counts for {len(sources)} sources")

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
    name = ingest_checkpoint_name(plan.job_id, run_id, shard.shard_id)
    maps = ShardMapStore(store, plan.table_path)
    opts = options or DbOptions()

    def settle(
        done: dict[str, object] | None, earlier: Checkpoint | None, epoch: int
    ) -> ShardIngestStats:
        """Report (and finish: marker, then drop) an earlier attempt's commit of this job."""
        if done is not None:
            if earlier is not None:  # its attempt stopped between the marker and the drop
                _drop_checkpoint(store, shard.db_path, earlier.name or "")
            if done.get("run") == run_id:  # an earlier attempt of this very run
                return dataclasses.replace(
                    stats(
                        WRITTEN,
                        f"committed by attempt {done.get('attempt')} of this run",
                        **{k: _marker_int(done, k, 0) for k in _MARKER_COUNTS},
                    ),
                    writer_epoch=_marker_int(done, "epoch", 0),
                    attempt=_marker_int(done, "attempt", attempt),
                )
            return stats(
                SKIPPED, "an earlier attempt of this job committed the shard", writer_epoch=epoch
            )
        # An earlier attempt committed the shard and stopped before its marker: settle it (the
        # marker, then the drop) and report that commit; this attempt writes no data.
        assert earlier is not None
        parsed = parse_ingest_checkpoint_name(earlier.name)
        earlier_run = parsed[1] if parsed is not None else ""
        if earlier_run == run_id:  # the same staged SSTs: the commit's counts are theirs
            staged = _source_counts(store, sources) if counts is None else _staged_counts(counts)
            done_counts = {**staged, "manifest_id": earlier.manifest_id}
            put_once(store, marker, {**done_counts, "run": run_id})
            _drop_checkpoint(store, shard.db_path, earlier.name or "")
            return stats(WRITTEN, "committed by an earlier attempt of this run", **done_counts)
        put_once(store, marker, {"manifest_id": earlier.manifest_id, "run": earlier_run})
        _drop_checkpoint(store, shard.db_path, earlier.name or "")
        return stats(
            SKIPPED, "an earlier attempt of this job committed the shard", writer_epoch=epoch
        )

    try:
        db, _ = open_shard_writer(maps, shard, opts)  # fences; then re-checks
    except (ShardMapConflict, DatabaseDestroyed) as e:
        # Refused, possibly after an earlier attempt committed (a split or merge between its
        # commit and its marker): look for that commit before reporting the shard not written.
        earlier = _refused_checkpoint(maps, shard, opts, plan.job_id)
        done = _read_marker(store, marker)
        if done is None and earlier is None:
            return stats(REFUSED, f"{type(e).__name__}: {e}")
        return settle(done, earlier, 0)
    result = None
    try:
        epoch = db.writer_epoch
        # The manifest first (as of our fence: no earlier attempt commits after it), the marker
        # second: a commit's checkpoint is dropped only once its marker exists, so one of the
        # two shows any commit of this job.
        earlier = _job_checkpoint(db.manifest.manifest, plan.job_id, shard.shard_id)
        done = _read_marker(store, marker)
        if done is None and earlier is None:
            if plan.txn is None:  # no record in the shards: the plan record must still be there
                _check_plan_record(store, plan)
            try:
                result = db.ingest_ssts(
                    sources,
                    checkpoint=CheckpointOptions(lifetime=INGEST_CHECKPOINT_LIFETIME, name=name),
                    seqs=usable_seqs(seqs),
                    txn=plan.txn,
                )
            except ObjectNotFound as e:
                if not e.path.startswith(ingest_job_dir(plan.table_path, plan.job_id) + "/"):
                    raise
                raise IngestJobExpired(
                    f"ingest job {plan.job_id} into table {plan.table_path!r}: its staged SST "
                    f"{e.path!r} is gone: the table GC collected the job's leftovers while it "
                    "ran (ingest_min_age shorter than the job). This shard wrote nothing; run "
                    "the batch again (with its app id and batch version, only the shards "
                    "missing it are written), and keep ingest_min_age above the longest job"
                ) from e
    finally:
        try:
            db.close()
        except Fenced:
            # A writer fenced after our ingest committed: close reports it (RELIABILITY.md,
            # review finding 8), but this attempt buffered nothing, so the commit stands and the
            # marker must be written (a retry would ingest the shard again).
            if result is None:
                raise
    if result is None:
        return settle(done, earlier, epoch)
    if result.already_applied:
        assert plan.txn is not None
        return stats(
            SKIPPED,
            applied_message(plan.txn, result.recorded_version),
            writer_epoch=epoch,
            manifest_id=result.manifest_id,
        )
    written = {
        "rows": result.rows,
        "ssts": result.ssts,
        "bytes": result.bytes_written,
        "manifest_id": result.manifest_id,
    }
    put_once(store, marker, {**written, "epoch": epoch, "run": run_id, "attempt": attempt})
    drop_named_checkpoints(shard.db_path, store, name)  # it pins a manifest: not a day longer
    return stats(WRITTEN, "", writer_epoch=epoch, **written)


def _refused_checkpoint(
    maps: ShardMapStore, shard: Shard, options: DbOptions, job_id: str
) -> Checkpoint | None:
    """This job's checkpoint in a refused shard's manifest, read once no earlier attempt can
    commit there any more; None if there is none or the database is gone (its checkpoints
    with it).

    A shard no longer in the latest map was fenced by the rescale that replaced it before that
    map was committed (step 2 of slatedb_core.table.rescale), and a destroyed one by its destroy:
    the latest manifest, read without a writer, holds every commit. A shard still in the map but
    sealed by a pending rescale may not be fenced yet: we fence it (opening its writer, which
    writes nothing; the rescale fences again, as it does for any writer that opened after its
    seal) and read the manifest as of that fence. The rescale's fencing writer may fence ours
    while it opens: the open is retried (``act_as_writer``); one retried after the rescale
    retired the shard meets it destroyed, and reads it as such."""
    ms = ManifestStore(maps.store, shard.db_path)
    try:
        current = maps.read_latest().by_id(shard.shard_id)
        if current is not None and current.db_path == shard.db_path:
            fenced = act_as_writer(
                maps.store,
                shard.db_path,
                dataclasses.replace(options, compactor=None),
                TableOptions().fence_attempts,
                f"ingest job {job_id}: reading its checkpoint in",
                _fenced_manifest,
            )
            assert fenced is not None
            manifest = fenced
        else:
            manifest = ms.read_latest().manifest
    except DatabaseDestroyed:  # soft-destroyed since, or gone: the destroy fenced every writer
        stored = ms.try_read_latest()
        if stored is None:
            return None
        manifest = stored.manifest
    return _job_checkpoint(manifest, job_id, shard.shard_id)


def _fenced_manifest(db: Db) -> Manifest:
    return db.manifest.manifest


def _drop_checkpoint(store: ObjectStore, db_path: str, name: str) -> None:
    """Drop a commit's checkpoint once its marker exists. Allowed in a retired (soft-destroyed)
    shard too, where it would otherwise hold back the GC's deletion of the database until it
    expires; in a database the GC already deleted, it went with the database."""
    try:
        drop_named_checkpoints(db_path, store, name)
    except DatabaseDestroyed:
        pass


def _job_checkpoint(m: Manifest, job_id: str, shard_id: int) -> Checkpoint | None:
    """The checkpoint a commit of job ``job_id`` left in shard ``shard_id``'s manifest, if any
    (of any run of the job: a job commits each shard once)."""
    for c in m.checkpoints:
        parsed = parse_ingest_checkpoint_name(c.name)
        if parsed is not None and parsed[0] == job_id and parsed[2] == shard_id:
            return c
    return None


def _source_counts(store: ObjectStore, sources: list[str]) -> dict[str, int]:
    """Rows, SSTs and bytes that ``Db.ingest_ssts`` reports for ``sources`` (empty SSTs are
    skipped there), read from their footers."""
    infos = [SstReader.open(store, p).info for p in sources]
    infos = [i for i in infos if i.entry_count > 0]
    return {
        "rows": sum(i.entry_count for i in infos),
        "ssts": len(infos),
        "bytes": sum(i.size_bytes for i in infos),
    }


def _staged_counts(counts: Sequence[tuple[int, int]]) -> dict[str, int]:
    """What :func:`_source_counts` reads, from the staged SSTs' own counts (rows, bytes)."""
    kept = [(rows, size) for rows, size in counts if rows > 0]
    return {"rows": sum(r for r, _ in kept), "ssts": len(kept), "bytes": sum(b for _, b in kept)}


def put_once(store: ObjectStore, path: str, body: dict[str, object]) -> None:
    """Write a marker or plan record unless one exists: a concurrent attempt of the same job
    that finished too committed the same rows (the same plan), the same outcome."""
    try:
        store.put_if_absent(path, json.dumps(body).encode())
    except ObjectAlreadyExists:
        pass


def _check_plan_record(store: ObjectStore, plan: IngestPlan) -> None:
    """IngestJobExpired unless the job's plan record exists. Called under the shard's fence,
    after this job's checkpoint and done marker were looked for and neither found: the GC
    deletes the plan record before any marker of its job (collect_leftovers), so a record there
    now means no marker of the job was gone when it was read, and this shard is uncommitted.
    Without it a marker may have been collected, and a commit could apply the job twice (issue
    37, hole 4)."""
    token = _record_token(store, ingest_plan_record(plan.table_path, plan.job_id))
    # Another token: the job's record was collected and its id planned again since (the new
    # plan's own, written after our markers were collected: issue 37, review of 104a7be).
    if token is None or (plan.record and token != plan.record):
        raise IngestJobExpired(
            f"ingest job {plan.job_id} into table {plan.table_path!r}: its plan record is gone "
            "(Table.collect_garbage collected the job's leftovers, its done markers with them), "
            "so its commits are refused: none may apply twice. This shard wrote nothing; other "
            "shards of the job may have committed, and planning the job again writes them "
            "again (check the table before re-running it). Give batches that must apply once "
            "an app id and batch version, and keep ingest_min_age above the longest job"
        )


def _check_no_leftovers(store: ObjectStore, table_path: str, job: str, shard_map: ShardMap) -> None:
    """IngestJobExpired if job id ``job``, which has no plan record, still has objects under its
    directory or a commit checkpoint in a shard's manifest: a job of that id whose record the
    table GC collected (it goes first) and whose markers it has not collected yet. A new job of
    the same id would take that job's done markers and checkpoints for its own commits and
    report its shards SKIPPED, its rows lost under a success."""
    left = next(iter(store.list(ingest_job_dir(table_path, job) + "/")), None)
    if left is None:

        def holds(shard: Shard) -> bool:
            try:
                stored = ManifestStore(store, shard.db_path).try_read_latest()
            except DatabaseDestroyed:
                return False
            return stored is not None and any(
                (parsed := parse_ingest_checkpoint_name(cp.name)) is not None and parsed[0] == job
                for cp in stored.manifest.checkpoints
            )

        with ThreadPoolExecutor(max_workers=min(16, max(1, len(shard_map.shards)))) as pool:
            if not any(pool.map(holds, shard_map.shards)):
                return
    raise IngestJobExpired(
        f"ingest job id {job!r} in table {table_path!r} was used by a job whose plan record the "
        "table GC collected while its done markers or commit checkpoints remain: a job of the "
        "same id would take them for its own commits and skip its rows. Plan with a new job id, "
        "or after the next Table.collect_garbage has collected the old job"
    )


def _record_token(store: ObjectStore, path: str) -> str | None:
    """The token of the plan record at ``path`` ("" for a record without one), or None when
    there is no record."""
    body = _read_marker(store, path)
    if body is None:
        return None
    token = body.get("token")
    return token if isinstance(token, str) else ""


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
        body = load_stored_json(data, path)  # bounded (meta.json_doc, SECURITY.md)
    except CorruptionError:
        return {}
    return body if isinstance(body, dict) else {}


def raise_if_refused(job: str, plan: IngestPlan, stats: Sequence[ShardIngestStats]) -> None:
    """ShardMapConflict naming the shards a job's commits refused (the shard map changed after
    planning), if any: the job's other shards are committed, so the caller writes again (with
    an app id and batch version, only the missing shards are written)."""
    refused = [s for s in stats if s.status == REFUSED]
    if refused:
        raise ShardMapConflict(
            f"{job} {plan.job_id}: the shard map changed after planning (map "
            f"{plan.shard_map.id}); {len(refused)} shard(s) not written: "
            + "; ".join(f"shard {s.shard_index}: {s.message}" for s in refused)
            + "; the others are committed: write again (with the same app_id/batch_version, "
            "only the missing shards are)"
        )
