"""Batch ingestion of a Spark DataFrame into a sharded table, one fenced writer per shard.

The job, in three steps::

    driver    plan_ingest: read the shard map; pick one Spark partition per shard
    stage 1   Spark SQL: keys -> binary, JSON values; then mapInArrow(_Bucket): Arrow values
              encoded, tombstones as null values, shard = ShardMap.route(keys) (vectorised), and
              every ~100k rows cut into one Arrow IPC blob per shard, keyed by a partition key
              that Spark's hash partitioner sends to partition == shard
    shuffle   repartition(n_shards, partition key): all blobs of a shard in ONE partition
    stage 2   mapInArrow(_WriteShards), per shard of the partition (normally exactly one):
                the shard's rows, sorted      blobs read in place, one sort and one copy; the
                                              first and last key must lie in the shard
                Table.writer(planned shard)   Db.open fences every earlier attempt; then the
                                              latest map is re-read: a shard that was split,
                                              merged or sealed meanwhile is refused
                done marker of this job?      a finished attempt exists: write nothing
                Db.bulk_ingest(all rows)      SSTs (the rows are sorted already: no re-sort),
                                              then ONE fenced manifest update
                close, put the done marker    yield a statistics row

While the job runs, Spark hands rows to Python in Arrow batches of up to ARROW_BATCH_ROWS
(``spark.sql.execution.arrow.maxRecordsPerBatch``, raised for the job only).
    driver    aggregate the rows into IngestStats; a refused shard raises ShardMapConflict

Why retries and speculative copies are safe. A shard's rows all reach one task, and each attempt
of that task writes ALL of them in one manifest update, so the shard's data is visible entirely
from one attempt or not at all; attempts write identical rows, so a second commit of the same job
changes no value. An attempt that is fenced (a later attempt opened the writer) fails its commit
with Fenced: its SSTs stay unreferenced and the database GC collects them. An attempt that
failed after its commit took effect is simply redone. The done marker closes the last gap: a
zombie attempt (a speculative copy Spark failed to kill) that opens the writer after the job has
finished would otherwise re-commit this job's values over a later job's; it finds the marker and
writes nothing. (A zombie that opened the writer before the marker existed is fenced by the next
job's writer, or commits before it, which is harmless.)

Duplicate keys within one ingest: the shuffle does not keep row order, so which of two rows with
the same key wins is unspecified. Deduplicate first when it matters.

Value encodings (``value_format``):

* ``binary``: ``value_column`` is a binary (or string, stored as UTF-8) column, stored as is.
* ``json``: the row's other columns (all but key and tombstone flag) as one JSON object, written
  by Spark's ``to_json(struct(...))``: UTF-8, field names as in the DataFrame, null fields
  omitted, binary fields base64, timestamps ISO-8601. Decode: ``json.loads(value)``.
* ``arrow``: the row's other columns as a complete Arrow IPC *stream* holding the schema and one
  record batch of one row. Decode: ``pa.ipc.open_stream(value).read_all()`` (a one-row Table),
  or :func:`decode_arrow_value`. Self-describing at ~300 bytes of schema per value; prefer
  ``binary`` with your own encoding for small values.

A row whose ``tombstone_column`` is true deletes its key (its value is ignored).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, StringType

from slatedb_core.entries import binary_buffers
from slatedb_core.errors import (
    DatabaseDestroyed,
    InvalidArgument,
    ObjectAlreadyExists,
    ShardMapConflict,
)
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore, join
from slatedb_core.store.url import open_store
from slatedb_core.table import Shard, ShardMap, Table
from spark_jobs.routing import (
    ENTRY_SCHEMA,
    partition_keys,
    route_keys,
    sorted_rows,
    take_rows,
)
from spark_jobs.routing import spark_hash_long as spark_hash_long  # re-exported

log = logging.getLogger(__name__)

ValueFormat = Literal["binary", "arrow", "json"]
VALUE_FORMATS: tuple[str, ...] = ("binary", "arrow", "json")
StoreFactory = Callable[[], ObjectStore]

_KEY, _VALUE, _TOMB, _SHARD, _PKEY, _DATA = (
    "key", "value", "__tombstone", "__shard", "__pkey", "__data"
)
_BUCKETS_DDL = f"{_PKEY} bigint, {_SHARD} int, {_DATA} binary"
BUCKET_ROWS = 100_000
BUCKET_BYTES = 64 << 20
"""Input rows (or bytes) a stage-1 task gathers before cutting them into per-shard blobs."""
ARROW_BATCH_ROWS = 100_000
"""``spark.sql.execution.arrow.maxRecordsPerBatch`` while the job runs, unless the session's is
larger (or unlimited): Spark hands rows to Python in batches of at most this many rows (and
``maxBytesPerBatch``, 64 MiB by default), and its per-batch costs dominate at small batches."""
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
_STATS_DDL = (
    "shard_index int, shard_id bigint, db_path string, status string, message string, "
    "rows bigint, ssts bigint, bytes bigint, manifest_id bigint, writer_epoch bigint, "
    "partition int, attempt int, duration_s double"
)
WRITTEN, SKIPPED, REFUSED = "written", "skipped", "refused"
"""Statuses of a shard's statistics row: committed by this attempt; an earlier attempt of the
same job had already committed it; the shard map no longer routes to this shard."""


@dataclass(frozen=True)
class ShardIngestStats:
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
        return "\n".join(lines)


@dataclass(frozen=True)
class IngestPlan:
    """What the tasks need, fixed on the driver before any task runs. Picklable."""

    table_path: str
    job_id: str
    shard_map: ShardMap
    partition_keys: tuple[int, ...]
    """``partition_keys[i]`` is a bigint that Spark's hash partitioning into
    ``len(shard_map.shards)`` partitions sends to partition i."""

    @property
    def shards(self) -> tuple[Shard, ...]:
        return self.shard_map.shards


# ---- planning ---------------------------------------------------------------------------------


def plan_ingest(table_path: str, store: ObjectStore, job_id: str | None = None) -> IngestPlan:
    with Table.open(table_path, store) as table:
        shard_map = table.shard_map
    return IngestPlan(
        table_path=table_path,
        job_id=job_id or uuid.uuid4().hex,
        shard_map=shard_map,
        partition_keys=partition_keys(len(shard_map.shards)),
    )


# ---- stage 1: route and encode ------------------------------------------------------------------


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


# ---- stage 2: one fenced bulk ingest per shard -----------------------------------------------------


def marker_path(table_path: str, job_id: str, shard: Shard) -> str:
    return join(table_path, "_ingest", job_id, f"{shard.shard_id:010d}.done")


@dataclass(frozen=True)
class _Bucket:
    """Stage 1: input rows -> one ``(partition key, shard, Arrow IPC blob)`` row per shard per
    ~BUCKET_ROWS input rows. Spark then shuffles a few large rows instead of every row: its
    per-row costs (row format, shuffle sort, Arrow conversions) were most of the job's time."""

    plan: IngestPlan
    payload: tuple[str, ...]
    """Columns to encode as Arrow IPC values (value_format "arrow"); empty: a value column."""
    tombstones: bool

    def entries(self, b: pa.RecordBatch) -> pa.RecordBatch:
        """``(key, value)``: values encoded, tombstones as nulls."""
        value = encode_arrow_rows(b.select(list(self.payload))) if self.payload else b[_VALUE]
        if self.tombstones:
            deleted = pc.fill_null(b[_TOMB], False)
            value = pc.if_else(deleted, pa.scalar(None, pa.binary()), value)
        key = b[_KEY]
        if key.type != pa.binary() or value.type != pa.binary():  # large_binary from Spark
            key, value = key.cast(pa.binary()), value.cast(pa.binary())
        return pa.RecordBatch.from_arrays([key, value], schema=ENTRY_SCHEMA)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        pending: list[pa.RecordBatch] = []
        count = size = 0
        for b in batches:
            if b.num_rows:
                e = self.entries(b)
                pending.append(e)
                count += e.num_rows
                size += e.nbytes
            if count >= BUCKET_ROWS or size >= BUCKET_BYTES:
                yield self._buckets(pending)
                pending, count, size = [], 0, 0
        if pending:
            yield self._buckets(pending)

    def _buckets(self, batches: list[pa.RecordBatch]) -> pa.RecordBatch:
        rows = batches[0] if len(batches) == 1 else pa.concat_batches(batches)
        n_shards = len(self.plan.shards)
        shard = route_keys(self.plan.shard_map, rows.column(0))
        counts = np.bincount(shard, minlength=n_shards)
        # a stable sort of small ints is a radix sort: rows grouped by shard, in input order
        order = np.argsort(shard.astype(np.uint8 if n_shards <= 256 else np.int32), kind="stable")
        grouped = take_rows(rows, order)
        # every shard's IPC stream into one buffer, sliced by offsets: no copy per blob
        sink = pa.BufferOutputStream()
        offsets, out_shard, out_pkey = [0], [], []
        lo = 0
        for i, c in enumerate(counts.tolist()):
            if c:
                with pa.ipc.new_stream(sink, ENTRY_SCHEMA) as w:
                    w.write_batch(grouped.slice(lo, c))
                offsets.append(sink.tell())
                out_shard.append(i)
                out_pkey.append(self.plan.partition_keys[i])
                lo += c
        if offsets[-1] >= 1 << 31:  # only if spark.sql.execution.arrow.maxBytesPerBatch >= 2 GiB
            raise InvalidArgument(f"an Arrow batch of {offsets[-1]} bytes: keep them under 2 GiB")
        blobs = pa.Array.from_buffers(
            pa.binary(),
            len(out_shard),
            [None, pa.py_buffer(np.array(offsets, np.int32)), sink.getvalue()],
        )
        return pa.RecordBatch.from_arrays(
            [pa.array(out_pkey, pa.int64()), pa.array(out_shard, pa.int32()), blobs],
            [_PKEY, _SHARD, _DATA],
        )


@dataclass(frozen=True)
class _WriteShards:
    """Stage 2: the blobs of one partition (one shard) -> one fenced bulk ingest per shard."""

    plan: IngestPlan
    store_factory: StoreFactory
    db_options: DbOptions | None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else -1
        attempt = ctx.attemptNumber() if ctx is not None else 0
        by_shard: dict[int, list[pa.RecordBatch]] = {}
        for b in batches:
            shards = b.column(_SHARD).to_numpy(zero_copy_only=False).tolist()
            blobs = b.column(_DATA)
            offs, _ = binary_buffers(blobs)
            buf = blobs.buffers()[2]
            for j, shard in enumerate(shards):
                # zero-copy: the IPC reader's batches point into Spark's batch
                blob = buf.slice(int(offs[j]), int(offs[j + 1] - offs[j]))
                by_shard.setdefault(int(shard), []).extend(pa.ipc.open_stream(blob))
        if not by_shard:
            return
        store = self.store_factory()
        for index in sorted(by_shard):
            rows = sorted_rows(by_shard.pop(index))
            shard = self.plan.shards[index]
            if len(rows) and not (
                shard.contains(rows.column(0)[0].as_py())
                and shard.contains(rows.column(0)[-1].as_py())
            ):
                raise InvalidArgument(f"rows of another shard reached shard {index}'s task (bug)")
            stats = self._write(store, shard, rows, partition, attempt)
            yield pa.RecordBatch.from_pylist([stats.__dict__], schema=STATS_SCHEMA)

    def _write(
        self,
        store: ObjectStore,
        shard: Shard,
        rows: pa.RecordBatch,
        partition: int,
        attempt: int,
    ) -> ShardIngestStats:
        started = time.monotonic()

        def stats(status: str, message: str = "", **counts: int) -> ShardIngestStats:
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

        marker = marker_path(self.plan.table_path, self.plan.job_id, shard)
        try:
            with Table.open(self.plan.table_path, store) as table:
                db = table.writer(shard, self.db_options)  # fences; then re-checks the map
        except (ShardMapConflict, DatabaseDestroyed) as e:
            return stats(REFUSED, f"{type(e).__name__}: {e}")
        try:
            epoch = db.writer_epoch
            if store.exists(marker):
                return stats(SKIPPED, "an earlier attempt of this job committed the shard",
                             writer_epoch=epoch)
            result = db.bulk_ingest(rows, _KEY, _VALUE)
        finally:
            db.close()
        body = json.dumps({"rows": result.rows, "manifest_id": result.manifest_id, "epoch": epoch})
        try:
            store.put_if_absent(marker, body.encode())
        except ObjectAlreadyExists:
            pass  # a concurrent attempt of the same job finished too: same rows, same outcome
        return stats(
            WRITTEN,
            rows=result.rows,
            ssts=result.ssts,
            bytes=result.bytes_written,
            manifest_id=result.manifest_id,
            writer_epoch=epoch,
        )


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


def prepare_frame(
    df: DataFrame,
    plan: IngestPlan,
    key_column: str = "key",
    value_column: str | None = None,
    tombstone_column: str | None = None,
    value_format: ValueFormat | None = None,
) -> _Prepared:
    """``df`` as binary keys, binary values (or the payload columns, for Arrow) and the
    tombstone flag, with Spark SQL expressions (JSON encoding included)."""
    fmt = value_format or ("binary" if value_column is not None else "arrow")
    if fmt not in VALUE_FORMATS:
        raise InvalidArgument(f"value_format must be one of {VALUE_FORMATS}, got {fmt!r}")
    if (fmt == "binary") != (value_column is not None):
        raise InvalidArgument("value_format 'binary' needs value_column; 'arrow'/'json' take none")
    key = _binary(df, key_column).alias(_KEY)
    cols = [key]
    if tombstone_column is not None:
        if tombstone_column not in df.columns:
            raise InvalidArgument(f"no column {tombstone_column!r} in {df.columns}")
        cols.append(F.col(tombstone_column).cast("boolean").alias(_TOMB))
    skip = {key_column, tombstone_column}
    payload = tuple(c for c in df.columns if c not in skip)
    if fmt != "binary" and not payload:
        raise InvalidArgument(f"value_format {fmt!r} needs columns besides the key")
    if fmt == "binary":
        assert value_column is not None
        cols.append(_binary(df, value_column).alias(_VALUE))
        payload = ()
    elif fmt == "json":
        cols.append(F.to_json(F.struct(*[F.col(c) for c in payload])).cast("binary").alias(_VALUE))
        payload = ()
    else:
        if {_KEY, _TOMB} & set(payload):
            raise InvalidArgument(f"payload columns may not be named {_KEY!r} or {_TOMB!r}")
        cols += [F.col(c).alias(c) for c in payload]
    return _Prepared(df.select(*cols), payload, tombstone_column is not None)


@contextlib.contextmanager
def _arrow_batches(spark: SparkSession, rows: int) -> Iterator[None]:
    """Raise the session's Arrow batch size (``maxRecordsPerBatch``) to ``rows`` meanwhile."""
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    old = spark.conf.get(key, None)
    if old is not None and (int(old) <= 0 or int(old) >= rows):
        yield
        return
    spark.conf.set(key, str(rows))
    try:
        yield
    finally:
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
) -> IngestStats:
    """Upsert the rows of ``df`` into the table at ``table_path`` (see the module doc).

    ``value_format`` defaults to ``binary`` when ``value_column`` is given, else ``arrow``.
    ``store_factory`` (default: ``open_store(table_url)``) builds the store in each task.
    ``plan`` (default: planned now) fixes the shard map the rows are routed by.

    Raises ShardMapConflict, after the other shards are written, when the shard map changed
    under the job so that some shard's rows could not be written; ingest again (every write is
    an idempotent upsert). Task failures surface as Spark's own exceptions.
    """
    started = time.monotonic()
    factory = store_factory or functools.partial(open_store, table_url)
    if plan is None:
        plan = plan_ingest(table_path, factory())
    prepared = prepare_frame(df, plan, key_column, value_column, tombstone_column, value_format)
    bucket = _Bucket(plan, prepared.payload, prepared.tombstones)
    written = (
        prepared.frame.mapInArrow(bucket, _BUCKETS_DDL)
        .repartition(len(plan.shards), _PKEY)
        .mapInArrow(_WriteShards(plan, factory, db_options), _STATS_DDL)
    )
    with _arrow_batches(df.sparkSession, ARROW_BATCH_ROWS):
        rows = [ShardIngestStats(**r.asDict()) for r in written.collect()]
    out = IngestStats(job_id=plan.job_id, shard_map_id=plan.shard_map.id, shards=rows)
    for s in rows:
        out.rows += s.rows
        out.ssts += s.ssts
        out.bytes += s.bytes
        out.shards_written += s.status == WRITTEN
    out.duration_s = time.monotonic() - started
    log.info("%s", out.summary())
    refused = [s for s in rows if s.status == REFUSED]
    if refused:
        raise ShardMapConflict(
            f"ingest {plan.job_id}: the shard map changed after planning (map {plan.shard_map.id});"
            f" {len(refused)} shard(s) not written: "
            + "; ".join(f"shard {s.shard_index}: {s.message}" for s in refused)
        )
    return out


# ---- spark-submit entry point ----------------------------------------------------------------------


def read_input(spark: SparkSession, path: str) -> DataFrame:
    if path.endswith(".csv"):
        return spark.read.option("header", True).option("inferSchema", True).csv(path)
    if path.endswith(".parquet") or path.endswith("/"):
        return spark.read.parquet(path)
    raise InvalidArgument(f"input {path!r}: expected a .parquet or .csv path")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m spark_jobs.ingest", description="Upsert a Parquet/CSV file into a table."
    )
    p.add_argument("--input", required=True, help="a .parquet (file or directory) or .csv path")
    p.add_argument("--url", required=True, help="object store URL (file://, s3://, memory://)")
    p.add_argument("--path", required=True, help="table path inside the store")
    p.add_argument("--key-column", default="key")
    p.add_argument("--value-column", default=None)
    p.add_argument("--tombstone-column", default=None)
    p.add_argument("--value-format", choices=VALUE_FORMATS, default=None)
    p.add_argument("--master", default=None, help="default: spark-submit's, else local[2]")
    p.add_argument("--create", default=None, metavar="SPLITS",
                   help="create the table first, split at these comma-separated UTF-8 keys")
    args = p.parse_args(argv)
    from spark_jobs.session import SessionOptions, get_session

    spark = get_session(SessionOptions(master=args.master or "local[2]", app_name="slatedb-ingest"))
    if args.create is not None:
        splits = [s.encode() for s in args.create.split(",") if s]
        Table.create(args.path, open_store(args.url), split_points=splits).close()
    stats = ingest(
        read_input(spark, args.input),
        args.url,
        args.path,
        key_column=args.key_column,
        value_column=args.value_column,
        tombstone_column=args.tombstone_column,
        value_format=args.value_format,
    )
    print(stats.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
