"""The writers of ``format("slatedb")`` (:mod:`spark_jobs.datasource`): batch and stream.

Planning (driver, :func:`plan_write`): the table is created if missing (``split_points``; a
batch write into an existing table with other split points is refused, a stream's are ignored
then, since its micro-batches keep planning after maintenance rescaled the table), the
save mode applied, the value columns recorded (:class:`~slatedb_core.ValueEncoding`), and the
ingest planned (:func:`~slatedb_core.table.ingest.plan_ingest`; for ``overwrite``
:func:`~slatedb_core.table.overwrite.plan_overwrite`, whose shards are new databases).

Tasks (``write``): the partition's rows become ``(key, value | null)`` entries (keys as bytes,
values as given or encoded per row) and are staged as sorted SSTs per shard by
:class:`spark_jobs.write_tasks.StageSsts`, exactly as in :mod:`spark_jobs.ingest`; the task
returns the references (:class:`StagedRefs`), never the rows.

Commit (driver, ``commit``): Spark hands over the references of exactly one successful attempt
per partition. Each shard is committed once through its fenced writer
(:func:`~slatedb_core.table.ingest.commit_shard`: its job checkpoint and done marker make a
retried commit, or a zombie attempt, write nothing twice); with ``app_id`` / ``batch_version``
a shard that already holds that batch (or a later one) is skipped, decided in the same manifest
update (docs/spark.md, "Exactly-once batches"). An overwrite commits its new databases and swaps
them in with one shard-map commit (docs/overwrite.md). The run's staging prefix is deleted
whatever happens; ``abort`` deletes it too, and the new databases of an overwrite (a stream's
abort only when a task message names the run: :meth:`SlateDBStreamWriter.abort`).

Streams: each micro-batch is one such job, named after the batch (``<job>b<batch id>``), its
app id the ``app_id`` option or else the query's id (which Spark keeps across restarts in the
query's checkpoint) and its version the batch id. A query killed between the commits of two
shards re-runs the batch when restarted: the shards that committed it skip it, the others
commit it.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import functools
import json
import logging
import uuid
from base64 import b64encode
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from slatedb_core import Table, open_store
from slatedb_core.errors import InvalidArgument, ShardMapConflict, SlateDBError
from slatedb_core.manifest.model import AppVersion
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table.ingest import (
    SKIPPED,
    IngestPlan,
    ShardIngestStats,
    commit_shard,
    delete_staging,
    plan_ingest,
    raise_if_refused,
)
from slatedb_core.table.ingest_txn import (
    applied_message,
    check_txn,
    shard_app_versions,
    table_app_versions,
)
from slatedb_core.table.overwrite import abort_overwrite, commit_overwrite, plan_overwrite
from spark_jobs.datasource_options import WriteOptions
from spark_jobs.value_columns import check_value_encoding
from spark_jobs.write_tasks import (
    COMMIT_THREADS,
    KEY,
    TOMBSTONE,
    TTL,
    VALUE,
    StageSsts,
    encode_arrow_rows,
    record_empty_shards,
)

log = logging.getLogger(__name__)

__all__ = [
    "SlateDBBatchWriter",
    "SlateDBStreamWriter",
    "StagedRef",
    "StagedRefs",
    "WritePlan",
    "plan_write",
]


@dataclass(frozen=True, slots=True)
class StagedRef:
    """One SST a task staged: its shard (index in the plan), input partition, run and part."""

    shard: int
    partition: int
    run: int
    part: int
    path: str
    rows: int
    bytes: int


@dataclass
class StagedRefs(WriterCommitMessage):
    """What a task hands to the driver's commit: references, never rows."""

    refs: tuple[StagedRef, ...]
    query_id: str | None = None
    """A stream task's query id (Spark's local property ``sql.streaming.queryId``)."""
    plan: WritePlan | None = None
    """A stream task's plan: the commit must use it (see SlateDBStreamWriter.commit)."""


@dataclass(frozen=True)
class WritePlan:
    """A planned write; picklable (sent to every task)."""

    options: WriteOptions
    plan: IngestPlan | None
    """None: nothing to write (mode ``ignore`` on an existing table)."""
    run_id: str

    @property
    def overwrite(self) -> bool:
        return self.options.mode == "overwrite"


# ---- planning (driver) -------------------------------------------------------------------------
def _open_or_create(opts: WriteOptions, store: ObjectStore) -> tuple[Table | None, bool]:
    """The table (None: mode ``ignore`` and it exists), and whether this write created it."""
    table, created = Table.open_or_create(opts.path, store, opts.split_points or ())
    if created:
        return table, True
    if opts.mode == "error":
        table.close()
        raise InvalidArgument(
            f"option 'mode' is error and table {opts.path!r} exists in {store.url}"
        )
    if opts.mode == "ignore":
        table.close()
        return None, False
    if (
        opts.split_points is not None
        and not opts.stream
        and opts.split_points != table.shard_map.split_points
    ):
        # A stream's split_points only create the table: PySpark plans every micro-batch (and
        # every restart) again, against a table that maintenance may have split or merged
        # since, so the stream never checks them against an existing table (docs/spark.md).
        table.close()
        splits = [p.decode(errors="replace") for p in table.shard_map.split_points]
        raise InvalidArgument(
            f"option 'split_points' applies only when the write creates the table; "
            f"{opts.path!r} exists, split at {splits}"
        )
    return table, False


def _check_encoding(opts: WriteOptions, table: Table, created: bool) -> None:
    if opts.mode != "overwrite":  # the overwrite records its own (docs/overwrite.md)
        check_value_encoding(table, opts.encoding, created=created, value_option="option 'value'")


def plan_write(opts: WriteOptions) -> WritePlan:
    """Create the table if missing, apply the save mode, record the value columns and plan the
    ingest, before any task runs."""
    store = open_store(opts.url)
    table, created = _open_or_create(opts, store)
    run_id = uuid.uuid4().hex
    if table is None:
        return WritePlan(opts, None, run_id)
    with table:
        # a stream's batches carry their own versions (batch_plan)
        txn = None if opts.stream else check_txn(opts.app_id, opts.batch_version)
        if txn is not None and opts.mode != "overwrite":
            recorded = table_app_versions(store, opts.path, txn.app_id)
            if all(v is not None and v >= txn.version for v in recorded.values()):
                log.info(
                    "write into %r: app %r batch %d is in every shard already: nothing to do",
                    opts.path,
                    txn.app_id,
                    txn.version,
                )
                return WritePlan(opts, None, run_id)  # whatever the table's values are now
        _check_encoding(opts, table, created)
    if opts.mode == "overwrite":
        plan = plan_overwrite(opts.path, store, txn=txn)
    else:
        plan = plan_ingest(opts.path, store, txn=txn)
        if plan.shard_map.value_encoding != opts.encoding:
            # an overwrite changed the table's values between the check and the plan: the
            # rows would land in shards that hold another kind of value
            raise ShardMapConflict(
                f"table {opts.path!r}: its value encoding changed while this write was planned "
                f"(an overwrite committed: now {plan.shard_map.value_encoding}); write again"
            )
    return WritePlan(opts, plan, run_id)


def batch_plan(wp: WritePlan, batch_id: int, app_id: str | None) -> IngestPlan:
    """The ingest plan of micro-batch ``batch_id`` of a stream planned by :func:`plan_write`
    (for that batch: PySpark plans each one): the shard map and seq base then, a job of its
    own."""
    assert wp.plan is not None
    if batch_id < 0:
        raise InvalidArgument(f"batch id must be >= 0, got {batch_id}")
    # The plan's own base: PySpark plans every micro-batch's write again (plan_write), above
    # the seqs of every batch before. (An offset per batch id on top of it made the seqs grow
    # with the square of the batch count, past MAX_STATED_SEQ after some 10^4 batches, from
    # when on every batch was re-encoded.) A plan used for several batches still orders them:
    # the commit re-encodes rows staged below the shard's seqs (ingest_seqs).
    seq_base = wp.plan.seq_base
    txn = None if app_id is None else AppVersion(app_id, batch_id)
    return dataclasses.replace(
        wp.plan, job_id=f"{wp.plan.job_id}b{batch_id}", seq_base=seq_base, txn=txn
    )


# ---- tasks -------------------------------------------------------------------------------------
def _json_default(v: object) -> object:
    if isinstance(v, bytes | bytearray):
        return b64encode(v).decode()
    if isinstance(v, datetime.datetime | datetime.date | datetime.time):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v)
    raise TypeError(f"cannot encode {type(v).__name__} as JSON")


def json_values(batch: pa.RecordBatch) -> pa.Array:
    """Each row as one JSON object (null fields left out, binary as base64, times ISO 8601), as
    Spark's ``to_json`` writes them."""
    dumps = functools.partial(
        json.dumps, default=_json_default, separators=(",", ":"), ensure_ascii=False
    )
    return pa.array(
        [
            dumps({k: v for k, v in row.items() if v is not None}).encode()
            for row in batch.to_pylist()
        ],
        pa.binary(),
    )


def _as_binary(a: pa.Array) -> pa.Array:
    if pa.types.is_large_string(a.type):
        return a.cast(pa.large_binary())
    if pa.types.is_string(a.type):
        return a.cast(pa.binary())
    return a


def entries(opts: WriteOptions, b: pa.RecordBatch) -> pa.RecordBatch:
    """A batch of the input as StageSsts takes it: ``key``, ``value``, the tombstone flag and the
    TTL (with options ``tombstone`` / ``ttl_column``)."""
    key = _as_binary(b.column(opts.key))
    if opts.value is not None:
        value = _as_binary(b.column(opts.value))
    elif opts.value_format == "arrow":
        value = encode_arrow_rows(b.select(list(opts.payload)))
    else:
        value = json_values(b.select(list(opts.payload)))
    arrays, names = [key, value], [KEY, VALUE]
    if opts.tombstone is not None:
        arrays.append(b.column(opts.tombstone))
        names.append(TOMBSTONE)
    if opts.ttl_column is not None:
        arrays.append(b.column(opts.ttl_column))
        names.append(TTL)
    return pa.RecordBatch.from_arrays(arrays, names=names)


def stage_partition(
    wp: WritePlan, plan: IngestPlan, batches: Iterator[pa.RecordBatch]
) -> tuple[StagedRef, ...]:
    """Stage this task's rows (see StageSsts) and return the references."""
    opts = wp.options
    stage = StageSsts(
        plan,
        wp.run_id,
        (),
        opts.tombstone is not None,
        functools.partial(open_store, opts.url),
        None,
        (0,) * len(plan.shards),
        opts.run_bytes,
        ttl_ms=opts.ttl_ms,
        ttl_column=opts.ttl_column is not None,
    )
    refs: list[StagedRef] = []
    for out in stage(entries(opts, b) for b in batches if b.num_rows):
        cols = out.to_pydict()
        for i in range(out.num_rows):
            refs.append(
                StagedRef(
                    shard=cols["__shard"][i],
                    partition=cols["partition"][i],
                    run=cols["run"][i],
                    part=cols["part"][i],
                    path=cols["path"][i],
                    rows=cols["rows"][i],
                    bytes=cols["bytes"][i],
                )
            )
    return tuple(refs)


# ---- commit (driver) ---------------------------------------------------------------------------
def _refs(messages: Sequence[WriterCommitMessage | None]) -> list[StagedRef]:
    out: list[StagedRef] = []
    for m in messages:
        if isinstance(m, StagedRefs):
            out.extend(m.refs)
    return out


def _already_applied(
    store: ObjectStore, plan: IngestPlan, indexes: Sequence[int]
) -> list[ShardIngestStats]:
    """SKIPPED stats of the shards whose latest manifest already records the plan's batch (or
    a later one), read without opening a writer: records only grow, so this settles them, and a
    re-run of a committed batch fences no live writer. The others are decided by commit_shard,
    under the fence."""
    txn = plan.txn
    assert txn is not None
    shards = [plan.shards[i] for i in indexes]
    recorded = shard_app_versions(store, shards, txn.app_id)  # concurrent manifest reads
    return [
        ShardIngestStats(
            shard_index=s.index,
            shard_id=s.shard_id,
            db_path=s.db_path,
            status=SKIPPED,
            message=applied_message(txn, recorded[s.index]),
            rows=0,
            ssts=0,
            bytes=0,
            manifest_id=0,
            writer_epoch=0,
            partition=-1,
            attempt=0,
            duration_s=0.0,
        )
        for s in shards
        if (v := recorded[s.index]) is not None and v >= txn.version
    ]


def commit_refs(
    store: ObjectStore,
    plan: IngestPlan,
    run_id: str,
    refs: Sequence[StagedRef],
    db_options: DbOptions | None = None,
) -> list[ShardIngestStats]:
    """Commit every shard that has staged SSTs, each once (concurrently: store round trips);
    every commit ends before a failure is raised. ShardMapConflict if a shard was refused."""
    by_shard: dict[int, list[StagedRef]] = {}
    for r in refs:
        by_shard.setdefault(r.shard, []).append(r)
    skipped = [] if plan.txn is None else _already_applied(store, plan, sorted(by_shard))
    for done in skipped:
        del by_shard[done.shard_index]

    def commit(index: int) -> ShardIngestStats:
        mine = sorted(by_shard[index], key=lambda r: (r.partition, r.run, r.part))
        return commit_shard(
            store,
            plan,
            run_id,
            plan.shards[index],
            [r.path for r in mine],
            seqs=[plan.staged_seq(r.partition, r.run) for r in mine],
            counts=[(r.rows, r.bytes) for r in mine],
            options=db_options,
        )

    with ThreadPoolExecutor(max_workers=max(1, min(COMMIT_THREADS, len(by_shard)))) as pool:
        futures = [pool.submit(commit, i) for i in sorted(by_shard)]
    stats = [*skipped, *(f.result() for f in futures)]
    # every shard records the batch, rows or none: a re-run with other rows writes none either
    stats += record_empty_shards(store, plan, run_id, {s.shard_index for s in stats}, db_options)
    raise_if_refused("write", plan, stats)
    return stats


def _commit(wp: WritePlan, plan: IngestPlan, refs: Sequence[StagedRef]) -> None:
    store = open_store(wp.options.url)
    try:
        if wp.overwrite:
            staged: dict[int, list[tuple[str, int]]] = {}
            for r in sorted(refs, key=lambda r: (r.partition, r.run, r.part)):
                staged.setdefault(r.shard, []).append((r.path, plan.staged_seq(r.partition, r.run)))
            stats = commit_overwrite(
                store, plan, wp.run_id, staged, value_encoding=wp.options.encoding
            )
        else:
            stats = commit_refs(store, plan, wp.run_id, refs, wp.options.db_options)
    finally:
        _cleanup(store, wp, plan)
    rows = sum(s.rows for s in stats)
    log.info(
        "slatedb write %s into %r: %d rows, %d shard(s): %s",
        plan.job_id,
        wp.options.path,
        rows,
        len(stats),
        ", ".join(f"{s.shard_index}={s.status}" for s in stats),
    )


def _cleanup(store: ObjectStore, wp: WritePlan, plan: IngestPlan) -> None:
    try:
        delete_staging(store, wp.options.path, plan.job_id, wp.run_id)
    except SlateDBError:  # leftovers are garbage (Table.collect_garbage), not a failed write
        log.warning("write %s: run %s left staged SSTs", plan.job_id, wp.run_id, exc_info=True)


def _abort(wp: WritePlan, plan: IngestPlan) -> None:
    store = open_store(wp.options.url)
    _cleanup(store, wp, plan)
    if wp.overwrite:
        abort_overwrite(store, plan)


def _task_property(name: str) -> str | None:
    ctx = TaskContext.get()
    return None if ctx is None else ctx.getLocalProperty(name)


class SlateDBBatchWriter(DataSourceArrowWriter):
    """``df.write.format("slatedb")``: stage in tasks, commit on the driver."""

    def __init__(self, plan: WritePlan) -> None:
        self.wp = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedRefs:
        if self.wp.plan is None:  # mode ignore, the table exists
            return StagedRefs(())
        return StagedRefs(stage_partition(self.wp, self.wp.plan, iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.wp.plan is not None:
            _commit(self.wp, self.wp.plan, _refs(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.wp.plan is not None:
            _abort(self.wp, self.wp.plan)


class SlateDBStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("slatedb")``: each micro-batch is a job of its own, exactly once
    per shard under (app id, batch id)."""

    def __init__(self, plan: WritePlan) -> None:
        if plan.plan is None:
            raise InvalidArgument("a stream appends: option 'mode' must be append")
        self.wp = plan

    def _batch_id(self) -> int:
        text = _task_property("streaming.sql.batchId")
        if text is None:
            raise InvalidArgument("a stream writer's task runs outside a micro-batch")
        return int(text)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedRefs:
        plan = batch_plan(self.wp, self._batch_id(), None)
        return StagedRefs(
            stage_partition(self.wp, plan, iterator),
            _task_property("sql.streaming.queryId"),
            self.wp,
        )

    def _staged_plan(self, messages: Sequence[WriterCommitMessage | None]) -> WritePlan:
        """The plan the batch's tasks staged with. PySpark creates a new stream writer for each
        commit (pyspark/sql/worker/python_streaming_sink_runner.py), so ``self.wp`` was planned
        afresh at commit time: another seq base, shard map and job than the staged SSTs'."""
        wp = self._tasks_plan(messages)
        return self.wp if wp is None else wp

    @staticmethod
    def _tasks_plan(messages: Sequence[WriterCommitMessage | None]) -> WritePlan | None:
        """The plan the messages' tasks staged with (None: no message names one)."""
        plans = {
            m.plan.run_id: m.plan
            for m in messages
            if isinstance(m, StagedRefs) and m.plan is not None
        }
        if len(plans) > 1:
            raise InvalidArgument(f"tasks of one micro-batch staged under runs {sorted(plans)}")
        return plans.popitem()[1] if plans else None

    def _app_id(self, messages: Sequence[WriterCommitMessage | None]) -> str:
        if self.wp.options.app_id is not None:
            return self.wp.options.app_id
        ids = {m.query_id for m in messages if isinstance(m, StagedRefs) and m.query_id}
        if len(ids) != 1:
            raise InvalidArgument(f"tasks of one micro-batch reported query ids {sorted(ids)}")
        return f"stream:{ids.pop()}"

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        refs = _refs(messages)
        if not refs:
            return  # no rows in this micro-batch: nothing to commit
        wp = self._staged_plan(messages)
        _commit(wp, batch_plan(wp, batchId, self._app_id(messages)), refs)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Delete what the batch's tasks staged, under the run their messages name. Without a
        message that names it (every task failed) nothing is deleted: this writer's own plan
        is not the one the tasks staged with (PySpark creates a new writer for the abort), so
        it names no run of this batch, and a guess could be another run's staging, a run
        still writing. What the failed attempts staged goes with the table's garbage
        (``Table.collect_garbage``, ``ingest_min_age``)."""
        wp = self._tasks_plan(messages)
        if wp is None:
            log.warning(
                "write into %r: micro-batch %d aborted with no task message: its "
                "staged SSTs, if any, are left to Table.collect_garbage",
                self.wp.options.path,
                batchId,
            )
            return
        _abort(wp, batch_plan(wp, batchId, None))
