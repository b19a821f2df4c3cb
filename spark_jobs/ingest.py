"""Batch ingestion of a Spark DataFrame into a sharded table, one fenced writer per shard: the
Spark wiring of :mod:`slatedb_core.table.ingest`, which stages the SSTs and commits each shard
exactly once.

The job, in two Spark stages::

    driver    plan_ingest: read the shard map; T = min(shards, Spark's default parallelism)
              commit tasks, shard i committed by task i % T
    stage 1   Spark SQL: keys -> binary, JSON values; then mapInArrow(StageSsts), per input
              partition: values encoded (Arrow), tombstones as nulls; the partition's rows
              sorted by key ONCE (shards are key ranges, so this also groups them by shard),
              one row kept per key, cut at the split points and encoded as SSTs
              (slatedb_core.table.ingest.stage_ssts), put under the run's staging prefix
              <table>/_ingest/<job>/staged/<run>/<partition>-<attempt>-<nonce>/ (on a local
              disk each synced and dropped from the page cache once put); out: one small
              reference row per SST, keyed so that Spark's hash partitioner sends it to
              the shard's commit task
    shuffle   repartition(T, partition key): only the references move, never the rows
    stage 2   mapInArrow(CommitShards): slatedb_core.table.ingest.commit_shard for each shard
              of the task (concurrently, threads):
                open the fenced writer        Db.open fences every earlier attempt; then the
                                              latest map is re-read: a shard that was split,
                                              merged or sealed meanwhile is refused
                this job's commit checkpoint  in the manifest as of the fence, then the
                or done marker?               done marker: an earlier attempt committed: write
                                              no data (if it was this run's, report its commit)
                Db.ingest_ssts(references,    each staged SST copied into the database (a hard
                  checkpoint)                 link on a local disk, a server-side copy on S3:
                                              its bytes are not read), then ONE fenced manifest
                                              update adding them to L0, oldest partition first,
                                              with the job's checkpoint ingest:<job>:<run>:<shard>
                close, put the done marker,   yield a statistics row
                drop the checkpoint
    driver    aggregate the rows into IngestStats (a refused shard raises ShardMapConflict);
              delete the run's staging prefix

While the job runs, Spark hands rows to Python in Arrow batches of up to ARROW_BATCH_ROWS rows
(``spark.sql.execution.arrow.maxRecordsPerBatch``) and, unless the caller or the session sets a
byte bound, with no bound on their bytes (see ARROW_BATCH_ROWS); both for the job only. A stage-1
task sorts up to ``task_memory_bytes / 5`` of input at once (write_tasks.TASK_MEMORY_BYTES); a
larger partition is staged as several runs, so a worker's memory does not grow with its rows.

Why one shuffle of references and not of rows: moving every row through Spark's shuffle (Arrow to
JVM rows, shuffle files, back to Arrow) and sorting it twice cost more than half of the job's
time (``bench/spark_ingest_bench.py``). The price: a shard's L0 gets one SST (more for large
inputs) per input partition that had rows for it, overlapping each other, until the compactor
merges them; with many input partitions, run the Spark compaction after a large ingest.

Why retries and speculative copies are safe. Stage 1 attempts write only under their own staging
directory, and Spark hands stage 2 the references of exactly one successful attempt per input
partition; the others' objects are deleted with the run's prefix. Every attempt of a shard's
stage-2 task commits ALL of the shard's staged SSTs in one manifest update, so the shard's data
is visible entirely from one attempt or not at all. An attempt that is fenced (a later attempt
opened the writer) fails its commit with Fenced: its copies stay unreferenced and the database GC
collects them. An attempt that failed (or stalled) after its commit took effect is never redone:
the commit put the job's checkpoint into the shard's manifest with the SSTs, the next attempt
sees it after fencing and writes the marker instead of committing the same rows again over
whatever was written to the shard in between (slatedb_core.table.ingest tells why this closes
the gap between the commit and the marker). A commit task whose
other shards committed before one of its shards failed is retried as a whole: the retry finds
their done markers, written by this run, and reports those commits instead of redoing them. The
done marker closes the last gap: a zombie attempt (a speculative copy Spark failed to kill) that
opens the writer after the job has finished would otherwise re-commit this job's values over a
later job's; it finds the marker and writes nothing (and after the run ended, its copies fail:
the staged objects are gone). What zombies stage after the run's cleanup, the done markers and
the job's plan record stay under ``<table>/_ingest/`` until ``Table.collect_garbage`` deletes
them (``ingest_min_age``, 7 days by default; the rescaling asset and ``slatedb table gc`` call
it); a job whose plan record was collected commits nothing more (IngestJobExpired).

Sequence numbers: the staged entries carry seq 0 (they are written before any writer is open);
the commit reserves one sequence number of the database for the ingest. The engine orders
versions by their position in the LSM tree, never by seq, so this only shows in the raw entries.

Duplicate keys within one ingest: which of two rows with the same key wins is unspecified (the
sort is not stable, and Spark does not order input partitions). Deduplicate first when it
matters.

Value encodings (``value_format``):

* ``binary``: ``value_column`` is a binary (or string, stored as UTF-8) column, stored as is.
* ``json``: the row's other columns (all but key and tombstone flag) as one JSON object, written
  by Spark's ``to_json(struct(...))``: UTF-8, field names as in the DataFrame, null fields
  omitted, binary fields base64, timestamps ISO-8601. Decode: ``json.loads(value)``.
* ``arrow``: the row's other columns as a complete Arrow IPC *stream* holding the schema and one
  record batch of one row. Decode: ``pa.ipc.open_stream(value).read_all()`` (a one-row Table),
  or :func:`spark_jobs.write_tasks.decode_arrow_value`. Self-describing at ~300 bytes of schema
  per value; prefer ``binary`` with your own encoding for small values.

A row whose ``tombstone_column`` is true deletes its key (its value is ignored).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import functools
import logging
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    ByteType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
)

from slatedb_core import Table, open_store
from slatedb_core.errors import (
    DatabaseNotFound,
    InputColumnMissing,
    InvalidArgument,
    SlateDBError,
    TableNotFound,
)
from slatedb_core.health import inspect_database
from slatedb_core.options import CompactorOptions, DbOptions
from slatedb_core.printable import printable
from slatedb_core.store.url import local_directory, require_store_directory
from slatedb_core.table.ingest import (
    WRITTEN,
    IngestPlan,
    ShardIngestStats,
    check_txn,
    delete_staging,
    plan_ingest,
    raise_if_refused,
)
from slatedb_core.writer.ttl import check_ttl
from spark_jobs.compact import SparkCompactionStats, compact
from spark_jobs.parquet_input import (
    is_store_url,
    parquet_objects,
    read_input,
    read_schema,
    spark_schema,
)
from spark_jobs.routing import partition_keys
from spark_jobs.shared_store import refuse_process_store
from spark_jobs.value_columns import check_table_encoding, value_encoding_of
from spark_jobs.write_tasks import (
    KEY,
    PARTITION_KEY,
    STAGED_DDL,
    STATS_DDL,
    TASK_MEMORY_BYTES,
    TOMBSTONE,
    TTL,
    VALUE,
    CommitShards,
    StageSsts,
    StoreFactory,
    applied_everywhere,
    check_task_memory,
    record_empty_shards,
    run_bytes_of,
    with_txn,
)

log = logging.getLogger(__name__)

ValueFormat = Literal["binary", "arrow", "json"]
VALUE_FORMATS: tuple[str, ...] = ("binary", "arrow", "json")

ARROW_BATCH_ROWS = 10_000
"""``spark.sql.execution.arrow.maxRecordsPerBatch`` while the job runs, unless the session's is
larger (or unlimited): Spark hands rows to Python in batches of at most this many rows.

Spark's byte bound on a batch (``spark.sql.execution.arrow.maxBytesPerBatch``, 64 MiB by default)
is lifted for the job unless the caller passes ``arrow_batch_bytes`` or the session sets it:
Spark enforces it by measuring the batch's vectors after EVERY row, which took about a quarter of
the JVM's time handing rows to Python (JFR, 10M rows of 116 B: the hand-over alone 2.45 s with
the bound, 1.7-1.9 s without). Batches are then bounded by rows only, and without the per-row
check 10k, 25k and 100k rows per batch ingest equally fast (10M rows: medians 3.72, 3.67 and
3.65 s), so the bound is Spark's own default: a batch passes 64 MiB only when rows average over
6.7 KB, and Arrow's 2 GiB limit on a batch's values only over 214 KB; for such rows pass
``arrow_batch_bytes`` (or fewer ``arrow_batch_rows``)."""
NO_BYTE_BOUND = 2**31 - 1
"""``maxBytesPerBatch`` at exactly Int.MaxValue: Spark skips its per-row size check."""
_ROWS_CONF = "spark.sql.execution.arrow.maxRecordsPerBatch"
_BYTES_CONF = "spark.sql.execution.arrow.maxBytesPerBatch"


@dataclass
class IngestStats:
    job_id: str
    shard_map_id: int
    rows: int = 0
    shards_written: int = 0
    ssts: int = 0
    bytes: int = 0
    duration_s: float = 0.0
    shards: list[ShardIngestStats] = field(default_factory=list)
    compactions: dict[int, SparkCompactionStats] = field(default_factory=dict)
    """By shard index: the Spark compactions ``compact_l0_at`` ran after the ingest."""

    def summary(self) -> str:
        mb = self.bytes / 1e6
        rate = self.rows / self.duration_s if self.duration_s > 0 else 0.0
        lines = [
            f"ingest {self.job_id}: {self.rows} rows into {self.shards_written} shard(s) of map "
            f"{self.shard_map_id}, {self.ssts} SSTs, {mb:.1f} MB in {self.duration_s:.2f}s "
            f"({rate:,.0f} rows/s)"
        ]
        for s in sorted(self.shards, key=lambda s: s.shard_index):
            lines.append(
                f"  shard {s.shard_index} ({s.db_path}): {s.status}, {s.rows} rows, {s.ssts} "
                f"SSTs, {s.bytes / 1e6:.1f} MB, manifest {s.manifest_id}, epoch "
                f"{s.writer_epoch}, partition {s.partition} attempt {s.attempt}, "
                f"{s.duration_s:.2f}s"
            )
        for index, c in sorted(self.compactions.items()):
            lines.append(f"  shard {index}: {c.summary()}")
        return "\n".join(lines)


# ---- the job -------------------------------------------------------------------------------------


def _binary(df: DataFrame, name: str) -> Column:
    if name not in df.columns:
        raise InvalidArgument(f"no column {name!r} in {df.columns}")
    t = df.schema[name].dataType
    if isinstance(t, BinaryType):
        return F.col(name)
    if isinstance(t, StringType):
        return F.col(name).cast("binary")
    raise InvalidArgument(f"column {name!r} must be binary or string, got {t.simpleString()}")


@dataclass(frozen=True)
class _Prepared:
    frame: DataFrame
    """key, value | payload columns, tombstone flag?"""
    payload: tuple[str, ...]
    tombstones: bool
    encoded: str | None = None
    """``json`` or ``arrow`` when the values encode columns (None: plain values)."""
    encoded_columns: tuple[str, ...] = ()
    """The columns encoded into each value."""


def prepare_frame(
    df: DataFrame,
    key_column: str = "key",
    value_column: str | None = None,
    tombstone_column: str | None = None,
    value_format: ValueFormat | None = None,
    ttl_column: str | None = None,
) -> _Prepared:
    """``df`` as binary keys, binary values (or the payload columns, for Arrow), the
    tombstone flag and the TTL (a long), with Spark SQL expressions (JSON encoding included)."""
    fmt = value_format or ("binary" if value_column is not None else "arrow")
    if fmt not in VALUE_FORMATS:
        raise InvalidArgument(f"value_format must be one of {VALUE_FORMATS}, got {fmt!r}")
    if (fmt == "binary") != (value_column is not None):
        raise InvalidArgument("value_format 'binary' needs value_column; 'arrow'/'json' take none")
    key = _binary(df, key_column).alias(KEY)
    cols = [key]
    if tombstone_column is not None:
        if tombstone_column not in df.columns:
            raise InvalidArgument(f"no column {tombstone_column!r} in {df.columns}")
        cols.append(F.col(tombstone_column).cast("boolean").alias(TOMBSTONE))
    if ttl_column is not None:
        if ttl_column not in df.columns:
            raise InvalidArgument(f"no column {ttl_column!r} in {df.columns}")
        t = df.schema[ttl_column].dataType
        if not isinstance(t, LongType | IntegerType | ShortType | ByteType):
            raise InvalidArgument(
                f"ttl_column {ttl_column!r} must be an integer column (ms), got {t.simpleString()}"
            )
        if ttl_column in (key_column, tombstone_column, value_column):
            raise InvalidArgument(f"ttl_column {ttl_column!r} names another column of the job")
        cols.append(F.col(ttl_column).cast("long").alias(TTL))
    skip = {key_column, tombstone_column, ttl_column}
    payload = tuple(c for c in df.columns if c not in skip)
    if fmt != "binary" and not payload:
        raise InvalidArgument(f"value_format {fmt!r} needs columns besides the key")
    encoded = () if fmt == "binary" else payload
    if fmt == "binary":
        assert value_column is not None
        cols.append(_binary(df, value_column).alias(VALUE))
        payload = ()
    elif fmt == "json":
        cols.append(F.to_json(F.struct(*[F.col(c) for c in payload])).cast("binary").alias(VALUE))
        payload = ()
    else:
        if {KEY, TOMBSTONE, TTL} & set(payload):
            raise InvalidArgument(
                f"payload columns may not be named {KEY!r}, {TOMBSTONE!r} or {TTL!r}"
            )
        cols += [F.col(c).alias(c) for c in payload]
    return _Prepared(
        df.select(*cols),
        payload,
        tombstone_column is not None,
        None if fmt == "binary" else fmt,
        encoded,
    )


def _check_batch_bounds(rows: int | None, max_bytes: int | None) -> None:
    if rows is not None and rows < 1:
        raise InvalidArgument(f"arrow_batch_rows must be >= 1, got {rows}")
    if max_bytes is not None and not 1 <= max_bytes <= NO_BYTE_BOUND:
        raise InvalidArgument(f"arrow_batch_bytes must be in [1, {NO_BYTE_BOUND}], got {max_bytes}")


@contextlib.contextmanager
def arrow_batches(
    spark: SparkSession, rows: int | None = None, max_bytes: int | None = None
) -> Iterator[None]:
    """The job's Arrow batch bounds, set on the session meanwhile (see ARROW_BATCH_ROWS).

    ``rows``: at most this many rows per batch (None: ARROW_BATCH_ROWS, unless the session's
    bound is larger or off). ``max_bytes``: at most this many bytes (None: the session's bound if
    it sets one, else none)."""
    _check_batch_bounds(rows, max_bytes)
    wanted: dict[str, str] = {}
    session_rows = spark.conf.get(_ROWS_CONF, None)
    if rows is not None:
        wanted[_ROWS_CONF] = str(rows)
    elif session_rows is None or 0 < int(session_rows) < ARROW_BATCH_ROWS:
        wanted[_ROWS_CONF] = str(ARROW_BATCH_ROWS)
    if max_bytes is not None:
        wanted[_BYTES_CONF] = str(max_bytes)
    elif spark.conf.get(_BYTES_CONF, None) is None:
        wanted[_BYTES_CONF] = str(NO_BYTE_BOUND)
    previous = {key: spark.conf.get(key, None) for key in wanted}
    for key, value in wanted.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in previous.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


def ingest(
    df: DataFrame,
    table_url: str,
    table_path: str,
    key_column: str = "key",
    value_column: str | None = None,
    tombstone_column: str | None = None,
    value_format: ValueFormat | None = None,
    *,
    db_options: DbOptions | None = None,
    store_factory: StoreFactory | None = None,
    plan: IngestPlan | None = None,
    run_bytes: int | None = None,
    task_memory_bytes: int = TASK_MEMORY_BYTES,
    compact_l0_at: int | None = None,
    compactor_options: CompactorOptions | None = None,
    arrow_batch_rows: int | None = None,
    arrow_batch_bytes: int | None = None,
    app_id: str | None = None,
    batch_version: int | None = None,
    ttl_column: str | None = None,
    ttl: int | timedelta | None = None,
) -> IngestStats:
    """Upsert the rows of ``df`` into the table at ``table_path`` (see the module doc).

    ``value_format`` defaults to ``binary`` when ``value_column`` is given, else ``arrow``.
    ``store_factory`` (default: ``open_store(table_url)``) builds the store in each task.
    ``plan`` (default: planned now) fixes the shard map the rows are routed by.
    ``task_memory_bytes`` (default :data:`~spark_jobs.write_tasks.TASK_MEMORY_BYTES`) bounds
    what a stage-1 task's rows take in its Python worker, whatever the rows per task: the task
    sorts and stages its input partition in runs of ``task_memory_bytes / 5`` input bytes
    (``run_bytes``, when given, sets that run size itself: Arrow bytes of the input, of which a
    task holds about four times). Each run adds one SST per shard to the shard's L0.
    ``compact_l0_at``: afterwards, compact on Spark (:func:`spark_jobs.compact.compact`, with
    ``compactor_options``) every shard written whose L0 then holds at least this many SSTs (the
    ingest adds one per input partition with rows for the shard; writers stall at
    ``DbOptions.l0_max_ssts``). The compaction takes over as the shard's compactor, fencing a
    compactor running elsewhere, hence off by default.
    ``arrow_batch_rows`` / ``arrow_batch_bytes``: bounds on the Arrow batches Spark hands to the
    tasks (defaults: see ARROW_BATCH_ROWS; pass a byte bound, or fewer rows, when rows are wide).
    ``app_id`` / ``batch_version`` (both or neither): an exactly-once batch
    (:mod:`slatedb_core.table.ingest_txn`): shards at this version of the app or later are
    SKIPPED (all of them: no Spark job), the others record it with their commit, rows or none.
    ``ttl_column`` / ``ttl`` (SlateDB RFC 0003): an integer column of each row's TTL in ms, and
    the TTL (ms or a timedelta) of every row without one (null in the column); rows with neither
    take ``db_options.default_ttl``. A put stores ``expire_ts`` = the time its task staged it +
    its TTL (a delete none), and keeps it through the commit and later rewrites.

    Raises ShardMapConflict, after the other shards are written, when the shard map changed
    under the job so that some shard's rows could not be written; ingest again (every write is
    an idempotent upsert). Task failures surface as Spark's own exceptions.
    """
    started = time.monotonic()
    txn = check_txn(app_id, batch_version)  # before anything is written
    factory = store_factory or functools.partial(open_store, table_url)
    ttl_ms = check_ttl("ttl", ttl)
    prepared = prepare_frame(
        df, key_column, value_column, tombstone_column, value_format, ttl_column
    )
    if plan is None:
        plan = plan_ingest(table_path, factory(), txn=txn)
    plan = with_txn(plan, txn)
    if skipped := applied_everywhere(factory(), plan):
        return IngestStats(plan.job_id, plan.shard_map.id, shards=skipped)
    # After the exactly-once decision (a batch applied writes nothing, whatever the table holds
    # now) and after the plan: an overwrite committing later retires the plan's shards, so every
    # commit is REFUSED and no row lands beside values of another encoding.
    check_table_encoding(
        factory(),
        table_path,
        value_encoding_of(df.schema, prepared.encoded, prepared.encoded_columns),
        value_option="value_column",
    )
    run_id = uuid.uuid4().hex
    check_task_memory("task_memory_bytes", task_memory_bytes)
    if run_bytes is None:
        run_bytes = run_bytes_of(task_memory_bytes)
    elif run_bytes < 1:
        raise InvalidArgument(f"run_bytes must be >= 1, got {run_bytes}")
    if compact_l0_at is not None and compact_l0_at < 1:
        raise InvalidArgument(f"compact_l0_at must be >= 1, got {compact_l0_at}")
    _check_batch_bounds(arrow_batch_rows, arrow_batch_bytes)
    # stage 2: as many tasks as the cluster runs at once (at most one per shard); shard i goes
    # to task i % tasks
    n_shards = len(plan.shards)
    tasks = max(1, min(n_shards, df.sparkSession.sparkContext.defaultParallelism))
    keys = partition_keys(tasks)
    shard_keys = tuple(keys[i % tasks] for i in range(n_shards))
    stage = StageSsts(
        plan,
        run_id,
        prepared.payload,
        prepared.tombstones,
        factory,
        db_options,
        shard_keys,
        run_bytes,
        ttl_ms=ttl_ms,
        ttl_column=ttl_column is not None,
    )
    written = (
        prepared.frame.mapInArrow(stage, STAGED_DDL)
        .repartition(tasks, PARTITION_KEY)
        .mapInArrow(CommitShards(plan, run_id, factory, db_options), STATS_DDL)
    )
    try:
        with arrow_batches(df.sparkSession, arrow_batch_rows, arrow_batch_bytes):
            rows = [ShardIngestStats(**r.asDict()) for r in written.collect()]
        rows += record_empty_shards(
            factory(), plan, run_id, {r.shard_index for r in rows}, db_options
        )
    finally:
        try:
            delete_staging(factory(), table_path, plan.job_id, run_id)
        except SlateDBError:  # leftovers are garbage, never worth failing the job over
            log.warning("ingest %s: run %s left staged SSTs", plan.job_id, run_id, exc_info=True)
    out = IngestStats(job_id=plan.job_id, shard_map_id=plan.shard_map.id, shards=rows)
    for s in rows:
        out.rows += s.rows
        out.ssts += s.ssts
        out.bytes += s.bytes
        out.shards_written += s.status == WRITTEN
    out.duration_s = time.monotonic() - started
    log.info("%s", out.summary())
    if compact_l0_at is not None:
        out.compactions = _compact_crowded(
            df.sparkSession, table_url, rows, compact_l0_at, factory, compactor_options
        )
    l0_max = (db_options or DbOptions()).l0_max_ssts
    crowded = [
        s.shard_index
        for s in rows
        if s.status == WRITTEN and s.ssts >= l0_max and s.shard_index not in out.compactions
    ]
    if crowded:
        log.warning(
            "ingest %s: shard(s) %s got %d+ L0 SSTs (one per input partition with rows for the "
            "shard): their writers stall until a compaction (spark_jobs.compact) merges them; "
            "pass compact_l0_at, or ingest fewer, larger partitions",
            plan.job_id,
            crowded,
            l0_max,
        )
    raise_if_refused("ingest", plan, rows)
    return out


def _compact_crowded(
    spark: SparkSession,
    url: str,
    rows: Sequence[ShardIngestStats],
    l0_at: int,
    factory: StoreFactory,
    options: CompactorOptions | None,
) -> dict[int, SparkCompactionStats]:
    """Compact on Spark each written shard whose L0 holds ``l0_at`` SSTs or more."""
    store = factory()
    done: dict[int, SparkCompactionStats] = {}
    for s in sorted(rows, key=lambda r: r.shard_index):
        if s.status != WRITTEN:
            continue
        _, health = inspect_database(store, s.db_path)
        if health.l0_ssts < l0_at:
            continue
        # the scheduler must want to compact an L0 this size, whatever its own trigger
        opts = options or CompactorOptions()
        if opts.l0_trigger > l0_at:
            opts = dataclasses.replace(opts, l0_trigger=l0_at)
        stats = compact(spark, url, s.db_path, options=opts, store_factory=factory)
        if stats is not None:
            done[s.shard_index] = stats
    return done


# ---- spark-submit entry point ----------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m spark_jobs.ingest", description="Upsert a Parquet/CSV file into a table."
    )
    p.add_argument(
        "--input",
        required=True,
        help="Parquet: s3://bucket/prefix (read through the object store), a path, "
        "or s3a://; or a .csv path",
    )
    p.add_argument(
        "--url",
        required=True,
        help="object store URL (file://, s3://; not memory://: each Spark worker would see its own)",
    )
    p.add_argument("--path", required=True, help="table path inside the store")
    p.add_argument("--key-column", default="key")
    p.add_argument("--value-column", default=None)
    p.add_argument("--tombstone-column", default=None)
    p.add_argument("--value-format", choices=VALUE_FORMATS, default=None)
    p.add_argument("--master", default=None, help="default: spark-submit's, else local[2]")
    p.add_argument(
        "--compact-l0-at",
        type=int,
        default=None,
        metavar="N",
        help="afterwards, compact (on Spark) each shard whose L0 holds N+ SSTs",
    )
    p.add_argument(
        "--arrow-batch-rows",
        type=int,
        default=None,
        metavar="N",
        help=f"rows per Arrow batch handed to Python (default {ARROW_BATCH_ROWS:,})",
    )
    p.add_argument(
        "--arrow-batch-bytes",
        type=int,
        default=None,
        metavar="B",
        help="bytes per Arrow batch (default: no bound; see ARROW_BATCH_ROWS)",
    )
    p.add_argument(
        "--task-memory-bytes",
        type=int,
        default=TASK_MEMORY_BYTES,
        metavar="B",
        help="what a task's rows may take in its Python worker, whatever its rows "
        f"(default {TASK_MEMORY_BYTES:,}; each quarter of it is one more L0 SST per shard)",
    )
    p.add_argument(
        "--create",
        default=None,
        metavar="SPLITS",
        help="create the table first, split at these comma-separated UTF-8 keys",
    )
    p.add_argument("--app-id", default=None, help="exactly-once batches: the batch's app")
    p.add_argument(
        "--batch-version",
        type=int,
        default=None,
        metavar="N",
        help="the batch's version: a no-op on every shard that has N or later for the app",
    )
    p.add_argument(
        "--ttl-column", default=None, help="an integer column: each row's TTL in ms (null: --ttl)"
    )
    p.add_argument(
        "--ttl", type=int, default=None, metavar="MS", help="the TTL of rows without their own"
    )
    args = p.parse_args(argv)
    try:
        return _run(args)
    except SlateDBError as e:  # one line saying what to do, never a traceback (issue 40, item 6)
        print(printable(f"error: {type(e).__name__}: {e}"), file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    """The job of :func:`main`: everything it can check is checked before Spark starts."""
    check_txn(args.app_id, args.batch_version)  # before --create writes anything
    check_ttl("--ttl", args.ttl)
    check_task_memory("--task-memory-bytes", args.task_memory_bytes)
    refuse_process_store(args.url, "--url")
    columns = input_columns(args.input)
    if columns is not None:
        _check_columns(args, columns)
    if args.create is None:
        # only an existing table: a missing folder is a wrong --url, not an empty lake
        require_store_directory(args.url, "--url")
    store = open_store(args.url)
    if args.create is not None:
        splits = [s.encode() for s in args.create.split(",") if s]
        Table.create(args.path, store, split_points=splits).close()
    else:
        try:
            Table.open(args.path, store).close()
        except DatabaseNotFound as e:
            if type(e) is not DatabaseNotFound:
                raise  # a database, not a table; destroyed: the error says it
            raise TableNotFound(
                f"no table at {args.path!r} in {store.url}: pass --create SPLITS to create it "
                "(comma-separated split keys; --create '' for one shard), or fix --path/--url"
            ) from None
    from spark_jobs.session import SessionOptions, get_session

    spark = get_session(SessionOptions(master=args.master or "local[2]", app_name="slatedb-ingest"))
    stats = ingest(
        read_input(spark, args.input),
        args.url,
        args.path,
        key_column=args.key_column,
        value_column=args.value_column,
        tombstone_column=args.tombstone_column,
        value_format=args.value_format,
        compact_l0_at=args.compact_l0_at,
        arrow_batch_rows=args.arrow_batch_rows,
        arrow_batch_bytes=args.arrow_batch_bytes,
        task_memory_bytes=args.task_memory_bytes,
        app_id=args.app_id,
        batch_version=args.batch_version,
        ttl_column=args.ttl_column,
        ttl=args.ttl,
    )
    print(stats.summary())
    return 0


_COLUMN_OPTIONS = (
    ("--key-column", "key_column"),
    ("--value-column", "value_column"),
    ("--tombstone-column", "tombstone_column"),
    ("--ttl-column", "ttl_column"),
)


def _check_columns(args: argparse.Namespace, columns: Sequence[str]) -> None:
    for flag, attr in _COLUMN_OPTIONS:
        name = getattr(args, attr)
        if name is not None and name not in columns:
            raise InputColumnMissing(
                f"{flag} {name!r}: no such column in {args.input}; its columns are "
                f"{', '.join(columns)}: pass {flag} with one of them"
            )


def input_columns(path: str) -> list[str] | None:
    """The columns of the job's input as Spark will read them (:func:`read_input`), from the
    driver without Spark: a Parquet footer (local, or ``s3://`` through the object store) or a
    CSV header line. None where only Spark can tell (``s3a://``, other schemes, a listing
    that fails): the job's own checks then run on the DataFrame."""
    try:
        if is_store_url(path):
            parts = urlsplit(path)  # the bucket's store, as read_input opens it
            store = open_store(urlunsplit((parts.scheme, parts.netloc, "", parts.query, "")))
            prefix = parts.path.strip("/")
            objects = parquet_objects(store, prefix)
            return spark_schema(read_schema(store, *objects[0])).names if objects else None
        local = local_directory(path) if ("://" not in path or path.startswith("file:")) else None
        if local is None or not local.exists():
            return None
        if path.endswith(".csv"):
            with open(local, newline="", encoding="utf-8") as f:
                return next(csv.reader(f), None)
        if local.is_dir():
            return list(pads.dataset(local, format="parquet", partitioning="hive").schema.names)
        return list(pq.read_schema(local).names)
    except (OSError, ValueError, pa.ArrowException):
        return None


if __name__ == "__main__":
    sys.exit(main())
