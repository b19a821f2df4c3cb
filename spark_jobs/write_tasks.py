"""The Spark tasks of a batch write into a table, shared by both write paths: the ingest job
(:mod:`spark_jobs.ingest`, see its module doc) and ``format("slatedb")`` writes
(:mod:`spark_jobs.datasource_write`); Spark's side of :mod:`slatedb_core.table.ingest`.
Stage 1 (:class:`StageSsts`) encodes an input partition's values and stages its SSTs, stage 2
(:class:`CommitShards`) commits the staged SSTs of its shards; the schemas and statistics rows
they exchange."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from slatedb_core import ObjectStore, Shard
from slatedb_core.errors import InvalidArgument
from slatedb_core.options import DbOptions
from slatedb_core.table.ingest import (
    SKIPPED,
    WRITTEN,
    IngestPlan,
    ShardIngestStats,
    attempt_dir,
    commit_shard,
    stage_ssts,
)
from slatedb_core.table.ingest_txn import AppVersion, applied_message, shard_app_versions
from slatedb_core.table.staged import TTL_COLUMN
from slatedb_core.writer.ttl import NoExpiry
from spark_jobs.routing import ENTRY_SCHEMA

StoreFactory = Callable[[], ObjectStore]

KEY, VALUE, TOMBSTONE, PARTITION_KEY = "key", "value", "__tombstone", "__pkey"
"""Column names of the rows stage 1 takes (key, value, tombstone flag) and of its output's
partition key."""
TTL = "__ttl"
"""The column of each row's TTL in ms (null: the fixed or the database's default), when the job
has a TTL column (issue 38: SlateDB RFC 0003 TTLs in Spark ingest)."""
_SHARD = "__shard"
STAGED_SCHEMA = pa.schema(
    [
        (PARTITION_KEY, pa.int64()),
        (_SHARD, pa.int32()),
        ("partition", pa.int32()),
        ("run", pa.int32()),
        ("part", pa.int32()),
        ("path", pa.string()),
        ("rows", pa.int64()),
        ("bytes", pa.int64()),
    ]
)
"""Stage 1's output: one row per staged SST."""
_STAGED_COLUMNS = tuple(STAGED_SCHEMA.names)
STAGED_DDL = (
    f"{PARTITION_KEY} bigint, {_SHARD} int, partition int, run int, part int, path string, "
    "rows bigint, bytes bigint"
)
COMMIT_THREADS = 8
"""Shards a stage-2 task commits at once."""
MiB = 1 << 20
TASK_MEMORY_BYTES = 512 * MiB
"""The memory a stage-1 task's rows may take in its Python worker (its peak RSS above what the
idle worker holds), by default: the task stages its input partition in runs of
``task_memory_bytes / RUN_MEMORY_FACTOR`` input bytes, each sorted on its own (later runs
newer), so that its memory is bounded by this setting and not by the rows of its partition
(issue 42, goal 3). The price: each run adds its own SST per shard to the shard's L0 (a
1.25M-row partition of 116-byte rows, 155 MB as Arrow, is 2 runs at this default). Why 512 MiB
and not less: at 256 MiB a 5M-row ingest in 8 partitions (625k rows each) staged 2 runs per
partition, 16 L0 SSTs per shard, DbOptions.l0_max_ssts, where writers stall until a compaction;
at 512 MiB partitions up to ~850k such rows stay one run (8 L0 SSTs per shard, as before)."""
RUN_MEMORY_FACTOR = 5
"""``task_memory_bytes`` over a run's input bytes: while a run is sorted and staged the worker
holds the rows as Spark handed them, the keys and values taken in sorted order and the SST being
encoded (measured with bench/spark_memory_bench.py: 3.7 bytes per input byte, 16-byte keys,
100-byte values), plus the batches in flight and what the allocators keep (a 16 MiB run grew a
worker by 68 MiB: tests/spark/test_worker_memory.py)."""
MIN_TASK_MEMORY_BYTES = 4 * MiB
"""The least ``task_memory_bytes`` taken: a run of at least 1 MiB of input."""
RUN_BYTES = TASK_MEMORY_BYTES // RUN_MEMORY_FACTOR
"""Input bytes (as Arrow) a stage-1 task sorts at once by default: a larger partition is staged
as several runs (see TASK_MEMORY_BYTES)."""


def check_task_memory(name: str, value: object) -> int:
    """``value`` as a task memory budget in bytes, or InvalidArgument naming ``name``: an int of
    at least :data:`MIN_TASK_MEMORY_BYTES`. The one check of every path that takes the setting
    (the ingest job's ``task_memory_bytes``, the write and read options of ``format("slatedb")``)."""
    if type(value) is not int or value < MIN_TASK_MEMORY_BYTES:
        raise InvalidArgument(
            f"{name} must be an integer of at least {MIN_TASK_MEMORY_BYTES} bytes "
            f"(4 MiB), got {value!r}"
        )
    return value


def run_bytes_of(task_memory_bytes: int) -> int:
    """The input bytes a stage-1 task sorts at once to stay within ``task_memory_bytes``."""
    return max(1, task_memory_bytes // RUN_MEMORY_FACTOR)


def release_unused_memory() -> None:
    """Hand the memory Arrow's pool keeps for reuse back to the system (mimalloc and jemalloc
    keep freed pages resident): a reused Python worker otherwise stays at its largest task's
    peak while idle, and a later task of another job finds it there (issue 42, goal 3)."""
    pa.default_memory_pool().release_unused()


STATS_SCHEMA = pa.schema(
    [
        ("shard_index", pa.int32()),
        ("shard_id", pa.int64()),
        ("db_path", pa.string()),
        ("status", pa.string()),
        ("message", pa.string()),
        ("rows", pa.int64()),
        ("ssts", pa.int64()),
        ("bytes", pa.int64()),
        ("manifest_id", pa.int64()),
        ("writer_epoch", pa.int64()),
        ("partition", pa.int32()),
        ("attempt", pa.int32()),
        ("duration_s", pa.float64()),
    ]
)
STATS_DDL = (
    "shard_index int, shard_id bigint, db_path string, status string, message string, "
    "rows bigint, ssts bigint, bytes bigint, manifest_id bigint, writer_epoch bigint, "
    "partition int, attempt int, duration_s double"
)
"""Stage 2's output: one row per shard (the fields of ShardIngestStats)."""


# ---- value encodings ----------------------------------------------------------------------------


def encode_arrow_rows(batch: pa.RecordBatch) -> pa.Array:
    """Each row as a self-contained Arrow IPC stream (schema, one one-row batch, end marker)."""
    head = batch.schema.serialize().to_pybytes()
    eos = b"\xff\xff\xff\xff\x00\x00\x00\x00"
    return pa.array(
        [head + batch.slice(i, 1).serialize().to_pybytes() + eos for i in range(batch.num_rows)],
        pa.binary(),
    )


def decode_arrow_value(value: bytes) -> dict[str, object]:
    """The row a value of ``value_format="arrow"`` holds, as a dict."""
    rows: list[dict[str, object]] = pa.ipc.open_stream(value).read_all().to_pylist()
    if len(rows) != 1:
        raise InvalidArgument(f"an arrow-encoded value holds one row, this one {len(rows)}")
    return rows[0]


def with_ttl(key: pa.Array, value: pa.Array, ttl: pa.Array) -> pa.RecordBatch:
    """The ``(key, value, ttl)`` entries of a job with a TTL column (``ttl`` as int64 ms;
    :func:`~slatedb_core.table.ingest.stage_ssts` checks the values)."""
    if not pa.types.is_integer(ttl.type) and not pa.types.is_null(ttl.type):
        raise InvalidArgument(f"the TTL column must hold integer milliseconds, got {ttl.type}")
    return pa.RecordBatch.from_arrays(
        [key, value, ttl.cast(pa.int64())], names=[KEY, VALUE, TTL_COLUMN]
    )


# ---- the two stages ------------------------------------------------------------------------------


def _task() -> tuple[int, int]:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return (ctx.partitionId(), ctx.attemptNumber()) if ctx is not None else (-1, 0)


@dataclass(frozen=True)
class StageSsts:
    """Stage 1: an input partition's rows -> sorted SSTs per shard staged by
    :func:`~slatedb_core.table.ingest.stage_ssts` in the attempt's own directory, and one
    reference row per SST for stage 2 (keyed to reach the shard's partition)."""

    plan: IngestPlan
    run_id: str
    payload: tuple[str, ...]
    """Columns to encode as Arrow IPC values (value_format "arrow"); empty: a value column."""
    tombstones: bool
    store_factory: StoreFactory
    db_options: DbOptions | None
    shard_keys: tuple[int, ...]
    """``shard_keys[i]``: the partition key whose hash sends shard i's references to the stage-2
    partition that commits shard i."""
    run_bytes: int = RUN_BYTES
    ttl_ms: int | NoExpiry | None = None
    """The TTL in ms of every row without one of its own (None: the database's default)."""
    ttl_column: bool = False
    """The rows carry :data:`TTL` (each row's TTL in ms, null: ``ttl_ms`` or the default)."""

    def entries(self, b: pa.RecordBatch) -> pa.RecordBatch:
        """``(key, value)``, and ``ttl`` with a TTL column: values encoded, tombstones as
        nulls."""
        value = encode_arrow_rows(b.select(list(self.payload))) if self.payload else b[VALUE]
        if self.tombstones:
            deleted = pc.fill_null(b[TOMBSTONE], False)
            value = pc.if_else(deleted, pa.scalar(None, pa.binary()), value)
        key = b[KEY]
        if key.type != pa.binary() or value.type != pa.binary():  # large_binary from Spark
            key, value = key.cast(pa.binary()), value.cast(pa.binary())
        if self.ttl_column:
            return with_ttl(key, value, b[TTL])
        return pa.RecordBatch.from_arrays([key, value], schema=ENTRY_SCHEMA)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        partition, attempt = _task()
        store = self.store_factory()
        directory = attempt_dir(self.plan, self.run_id, partition, attempt)
        pending: list[pa.RecordBatch] = []
        size = run = 0
        for b in batches:
            if b.num_rows:
                e = self.entries(b)
                pending.append(e)
                size += e.nbytes
            if size >= self.run_bytes:
                staged = self._stage(store, directory, pending, partition, run)
                pending, size, run = [], 0, run + 1
                release_unused_memory()  # the run's sorted copies and SSTs are garbage now
                yield staged
        if pending:
            yield self._stage(store, directory, pending, partition, run)
            pending = []
        release_unused_memory()

    def _stage(
        self,
        store: ObjectStore,
        directory: str,
        rows: list[pa.RecordBatch],
        partition: int,
        run: int,
    ) -> pa.RecordBatch:
        out: dict[str, list[object]] = {c: [] for c in _STAGED_COLUMNS}
        for sst in stage_ssts(
            store,
            self.plan,
            directory,
            run,
            rows,
            self.db_options,
            partition=partition,
            ttl_ms=self.ttl_ms,
        ):
            shard = sst.shard
            for col, v in zip(
                _STAGED_COLUMNS,
                (
                    self.shard_keys[shard.index],
                    shard.index,
                    partition,
                    run,
                    sst.part,
                    sst.path,
                    sst.rows,
                    sst.bytes,
                ),
                strict=True,
            ):
                out[col].append(v)
        return pa.RecordBatch.from_pydict(out, schema=STAGED_SCHEMA)


@dataclass(frozen=True)
class CommitShards:
    """Stage 2: the staged SSTs of one partition's shards -> one
    :func:`~slatedb_core.table.ingest.commit_shard` per shard, the shards of the partition
    committed concurrently (threads: the work is store round trips)."""

    plan: IngestPlan
    run_id: str
    store_factory: StoreFactory
    db_options: DbOptions | None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        partition, attempt = _task()
        by_shard: dict[int, list[tuple[int, int, int, str, int, int]]] = {}
        for b in batches:
            cols = b.to_pydict()
            for shard, part_, run, piece, path, rows, size in zip(
                cols[_SHARD],
                cols["partition"],
                cols["run"],
                cols["part"],
                cols["path"],
                cols["rows"],
                cols["bytes"],
                strict=True,
            ):
                by_shard.setdefault(int(shard), []).append((part_, run, piece, path, rows, size))
        if not by_shard:
            return
        store = self.store_factory()
        # oldest first: input partitions in order, and a partition's runs in order
        work = [(self.plan.shards[index], sorted(refs)) for index, refs in sorted(by_shard.items())]

        def commit(
            shard_refs: tuple[Shard, list[tuple[int, int, int, str, int, int]]],
        ) -> ShardIngestStats:
            shard, refs = shard_refs
            return commit_shard(
                store,
                self.plan,
                self.run_id,
                shard,
                [ref[3] for ref in refs],
                partition=partition,
                attempt=attempt,
                options=self.db_options,
                # the seqs the stage gave the rows (IngestPlan.staged_seq)
                seqs=[self.plan.staged_seq(ref[0], ref[1]) for ref in refs],
                # an earlier attempt's commit is reported with them even after the table GC
                # collected the staged SSTs (ingest_min_age shorter than the job)
                counts=[(ref[4], ref[5]) for ref in refs],
            )

        if len(work) == 1:
            results = [commit(work[0])]
        else:
            with ThreadPoolExecutor(max_workers=min(COMMIT_THREADS, len(work))) as pool:
                futures = [pool.submit(commit, w) for w in work]
            # every shard's commit has ended before a failure fails the task: the retry finds
            # the others committed (their done markers) and reports those commits
            results = [f.result() for f in futures]
        for stats in results:
            yield pa.RecordBatch.from_pylist([dataclasses.asdict(stats)], schema=STATS_SCHEMA)


def record_empty_shards(
    store: ObjectStore,
    plan: IngestPlan,
    run_id: str,
    done: set[int],
    db_options: DbOptions | None,
) -> list[ShardIngestStats]:
    """With the plan's txn, after stage 2: commit the shards the batch had no rows for (their
    indexes not in ``done``) with no sources, so that every shard records the batch
    (:func:`~slatedb_core.table.ingest.commit_shard`): a re-run of the batch with other rows
    then writes none of them either. Concurrent, from the driver (one manifest update each)."""
    if plan.txn is None:
        return []
    empty = [s for s in plan.shards if s.index not in done]
    if not empty:
        return []

    def commit(shard: Shard) -> ShardIngestStats:
        stats = commit_shard(store, plan, run_id, shard, [], options=db_options)
        if stats.status == WRITTEN and not stats.message:
            stats = dataclasses.replace(
                stats, message="no rows in this batch: its version recorded"
            )
        return stats

    with ThreadPoolExecutor(max_workers=min(COMMIT_THREADS, len(empty))) as pool:
        return list(pool.map(commit, empty))


def applied_everywhere(store: ObjectStore, plan: IngestPlan) -> list[ShardIngestStats]:
    """With the plan's txn: when every shard of the plan already records that version of the
    app or a later one, the SKIPPED statistics of every shard (the job has nothing to do, and
    no Spark stage needs to run); else none. Only a shortcut: each commit decides again."""
    txn = plan.txn
    if txn is None:
        return []
    versions = shard_app_versions(store, plan.shards, txn.app_id)
    if any(v is None or v < txn.version for v in versions.values()):
        return []
    return [
        ShardIngestStats(
            s.index,
            s.shard_id,
            s.db_path,
            SKIPPED,
            applied_message(txn, versions[s.index]),
            0,
            0,
            0,
            0,
            0,
            -1,
            0,
            0.0,
        )
        for s in plan.shards
    ]


def with_txn(plan: IngestPlan, txn: AppVersion | None) -> IngestPlan:
    """``plan`` with the exactly-once batch of the call's options (None: the plan's own, if
    any); InvalidArgument when the plan was made with another."""
    if txn is None or plan.txn == txn:
        return plan
    if plan.txn is not None:
        raise InvalidArgument(f"app_id/batch_version {txn} differ from the plan's {plan.txn}")
    return dataclasses.replace(plan, txn=txn)
