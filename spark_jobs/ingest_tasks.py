"""The task code of :mod:`spark_jobs.ingest` (see its module doc): stage 1 (:class:`_StageSsts`)
sorts an input partition and stages its SSTs, stage 2 (:class:`_CommitShards`) commits a shard's
staged SSTs through its fenced writer; the schemas and statistics rows they exchange."""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from slatedb_core.errors import (
    DatabaseDestroyed,
    Fenced,
    InvalidArgument,
    ObjectAlreadyExists,
    ObjectNotFound,
    ShardMapConflict,
)
from slatedb_core.layout import ingest_dir as ingest_prefix
from slatedb_core.layout import join
from slatedb_core.options import DbOptions
from slatedb_core.sst.scratch import thread_scratch
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Shard, ShardMap, Table
from slatedb_core.table.staged import encode_ranges
from spark_jobs.routing import ENTRY_SCHEMA

StoreFactory = Callable[[], ObjectStore]

_KEY, _VALUE, _TOMB, _SHARD, _PKEY = "key", "value", "__tombstone", "__shard", "__pkey"
STAGED_SCHEMA = pa.schema(
    [
        (_PKEY, pa.int64()),
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
_STAGED_DDL = (
    f"{_PKEY} bigint, {_SHARD} int, partition int, run int, part int, path string, rows bigint, "
    "bytes bigint"
)
COMMIT_THREADS = 8
"""Shards a stage-2 task commits at once."""
RUN_BYTES = 1 << 30
"""Input bytes (as Arrow) a stage-1 task sorts at once: a larger partition is staged as several
runs, each sorted on its own (later runs newer), which bounds the task's memory."""
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


@dataclass(frozen=True)
class IngestPlan:
    """What the tasks need, fixed on the driver before any task runs. Picklable."""

    table_path: str
    job_id: str
    shard_map: ShardMap

    @property
    def shards(self) -> tuple[Shard, ...]:
        return self.shard_map.shards


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


# ---- the two stages ------------------------------------------------------------------------------


def marker_path(table_path: str, job_id: str, shard: Shard) -> str:
    return join(ingest_prefix(table_path), job_id, f"{shard.shard_id:010d}.done")


def staging_prefix(table_path: str, job_id: str, run_id: str) -> str:
    """Where one run of a job stages its SSTs (deleted when the run ends)."""
    return join(ingest_prefix(table_path), job_id, "staged", run_id)


def _task() -> tuple[int, int]:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return (ctx.partitionId(), ctx.attemptNumber()) if ctx is not None else (-1, 0)


@dataclass(frozen=True)
class _StageSsts:
    """Stage 1: an input partition's rows -> sorted SSTs per shard under the run's staging
    prefix, and one reference row per SST for stage 2 (keyed to reach the shard's partition)."""

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
        partition, attempt = _task()
        store = self.store_factory()
        # an attempt's own directory: retries and speculative copies never share an object
        prefix = join(
            staging_prefix(self.plan.table_path, self.plan.job_id, self.run_id),
            f"{partition:05d}-{attempt}-{uuid.uuid4().hex[:8]}",
        )
        pending: list[pa.RecordBatch] = []
        size = run = 0
        for b in batches:
            if b.num_rows:
                e = self.entries(b)
                pending.append(e)
                size += e.nbytes
            if size >= self.run_bytes:
                yield self._stage(store, prefix, pending, partition, run)
                pending, size, run = [], 0, run + 1
        if pending:
            yield self._stage(store, prefix, pending, partition, run)

    def _stage(
        self, store: ObjectStore, prefix: str, rows: list[pa.RecordBatch], partition: int, run: int
    ) -> pa.RecordBatch:
        out: dict[str, list[object]] = {c: [] for c in _STAGED_COLUMNS}
        for sst in encode_ranges(
            rows, self.plan.shard_map.split_points, options=self.db_options,
            scratch=thread_scratch(),
        ):
            shard = self.plan.shards[sst.range_index]
            path = join(prefix, f"{run:05d}-{shard.shard_id:010d}-{sst.part:05d}.sst")
            # sst.data is a memoryview of the encoder's scratch: every store passes it to obstore,
            # which takes any buffer (a bytes copy would cost fresh memory per SST)
            store.put_if_absent(path, sst.data)  # type: ignore[arg-type]
            # written once, never read here, linked into the database by stage 2: out of the
            # page cache with it (on a local disk), so that the next SST reuses its pages
            store.flush_and_evict([path])
            for col, v in zip(
                _STAGED_COLUMNS,
                (self.shard_keys[shard.index], shard.index, partition, run, sst.part, path,
                 sst.info.entry_count, sst.info.size_bytes),
                strict=True,
            ):
                out[col].append(v)
        return pa.RecordBatch.from_pydict(out, schema=STAGED_SCHEMA)


@dataclass(frozen=True)
class _CommitShards:
    """Stage 2: the staged SSTs of one partition's shards -> one fenced commit per shard, the
    shards of the partition committed concurrently (threads: the work is store round trips)."""

    plan: IngestPlan
    run_id: str
    store_factory: StoreFactory
    db_options: DbOptions | None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        partition, attempt = _task()
        by_shard: dict[int, list[tuple[int, int, int, str]]] = {}
        for b in batches:
            cols = b.to_pydict()
            for shard, part_, run, piece, path in zip(
                cols[_SHARD], cols["partition"], cols["run"], cols["part"], cols["path"],
                strict=True,
            ):
                by_shard.setdefault(int(shard), []).append((part_, run, piece, path))
        if not by_shard:
            return
        store = self.store_factory()
        # oldest first: input partitions in order, and a partition's runs in order
        work = [
            (self.plan.shards[index], [ref[3] for ref in sorted(refs)])
            for index, refs in sorted(by_shard.items())
        ]
        if len(work) == 1:
            results = [self._write(store, work[0][0], work[0][1], partition, attempt)]
        else:
            with ThreadPoolExecutor(max_workers=min(COMMIT_THREADS, len(work))) as pool:
                futures = [
                    pool.submit(self._write, store, shard, sources, partition, attempt)
                    for shard, sources in work
                ]
            # every shard's commit has ended before a failure fails the task: the retry finds
            # the others committed (their done markers) and reports those commits
            results = [f.result() for f in futures]
        for stats in results:
            yield pa.RecordBatch.from_pylist([stats.__dict__], schema=STATS_SCHEMA)

    def _write(
        self,
        store: ObjectStore,
        shard: Shard,
        sources: list[str],
        partition: int,
        attempt: int,
    ) -> ShardIngestStats:
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

        marker = marker_path(self.plan.table_path, self.plan.job_id, shard)
        try:
            with Table.open(self.plan.table_path, store) as table:
                db = table.writer(shard, self.db_options)  # fences; then re-checks the map
        except (ShardMapConflict, DatabaseDestroyed) as e:
            return stats(REFUSED, f"{type(e).__name__}: {e}")
        result = None
        try:
            epoch = db.writer_epoch
            done = _read_marker(store, marker)
            if done is not None:
                if done.get("run") == self.run_id:  # an earlier attempt of this very run
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
                # A writer fenced after our ingest committed: close reports it (issue 19 item
                # 8), but this task buffered nothing, so the commit stands and the marker must
                # be written (a retry would ingest the shard again).
                if result is None:
                    raise
        counts = {"rows": result.rows, "ssts": result.ssts, "bytes": result.bytes_written,
                  "manifest_id": result.manifest_id}
        body = {**counts, "epoch": epoch, "run": self.run_id, "attempt": attempt}
        try:
            store.put_if_absent(marker, json.dumps(body).encode())
        except ObjectAlreadyExists:
            pass  # a concurrent attempt of the same job finished too: same rows, same outcome
        return stats(WRITTEN, "", writer_epoch=epoch, **counts)


_MARKER_COUNTS = ("rows", "ssts", "bytes", "manifest_id")


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


def _delete_prefix(store: ObjectStore, prefix: str) -> int:
    paths = [m.path for m in store.list(prefix + "/")]
    if paths:
        with ThreadPoolExecutor(max_workers=min(16, len(paths))) as pool:
            list(pool.map(store.delete, paths))
    return len(paths)
