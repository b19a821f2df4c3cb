"""The read side of ``spark.read.format("slatedb")`` (the data source itself, its options and its
writers are :mod:`spark_jobs.datasource`; docs/spark.md).

Options:

* ``url`` (required): the object store's URL (:func:`slatedb_core.open_store`).
* ``path`` (required): the table's path inside it.
* ``checkpoint``: the name of a named table snapshot (``Table.snapshot(name=...)``); the query
  reads it. Without it, the query reads a fresh :class:`~slatedb_core.TableSnapshot` taken when
  the query is planned (in :meth:`SlateDBReader.partitions`): one checkpoint per shard of one
  shard-map version, so every partition reads one repeatable view that writes, compactions,
  rescales and the GC after planning cannot change. Nothing releases that snapshot when the query
  ends (the data source API has no such hook): its checkpoints expire after
  ``snapshot_lifetime_s`` seconds (default 3600), and their expiry is what releases them (an
  expired checkpoint counts as gone and the garbage collector drops it: SlateDB RFC 0004,
  :mod:`slatedb_core.checkpoints`). Each query without ``checkpoint`` adds one checkpoint per
  shard until then: frequent queries may want a shorter lifetime.
  A query running longer than that may find its SSTs collected: raise the option for such reads.
* ``key_type``: ``binary`` (default) or ``string``: the key column as UTF-8 text (a key that is
  not UTF-8 fails the read). Spark 4.3 pushes ``startswith`` (and string comparisons) only on a
  string column: read string keys as strings to have prefixes answered by a narrowed scan.
* ``batch_size``: rows per Arrow batch handed to Spark (default 65536).
* ``max_partitions_per_shard``: the most Spark partitions one shard is cut into (default 256).
* ``partition_bytes``: partitions of a shard are merged until each reads about this many bytes
  of SSTs (default 128 MiB, Spark's own ``spark.sql.files.maxPartitionBytes``): a Spark task
  has a fixed cost, so a table of many small SSTs is not read by as many tasks.
* ``task_memory_bytes``: what a task's read may take in its Python worker, whatever the rows of
  its partition (default 512 MiB, at least 4 MiB; :data:`spark_jobs.write_tasks.TASK_MEMORY_BYTES`,
  as for writes). See "Memory" below.
* ``wal_url``: the shards' separate WAL store (SlateDB's ``with_wal_object_store``, RFC 0009),
  a store URL like ``url``; the query's snapshot names the WAL SSTs found there and the tasks
  replay them. Without it, a shard whose WAL is elsewhere fails the query with
  ``WalStoreMissing`` (never a read without its WAL tail). Never shown (it may carry
  credentials).
* ``merge_operator``: the merge operator the shards' writers use (SlateDB RFC 0006), by
  built-in name (``add_int64``, ``string_append``): reads fold merge operands with it. Without
  it, a key holding operands fails the query with ``MergeOperatorMissing`` naming the key.

Partitions (:func:`plan_reads`): each shard's range, narrowed by the pushed key filters
(:mod:`spark_jobs.read_filters`), cut at the starts of its SSTs (:func:`spark_jobs.read.sst_cuts`)
and merged up to ``partition_bytes``. Exact keys (``=``, ``IN``) are read with
:meth:`DbReader.get_many <slatedb_core.DbReader.get_many>` (SST index and bloom filters), in one
partition for up to :data:`POINTS_PER_PARTITION` keys, never by a scan; ranges and prefixes by
:meth:`DbReader.scan_arrow <slatedb_core.DbReader.scan_arrow>` of the narrowed range only.
Filters that contradict each other plan no partition (and take no snapshot).

Filters reach the reader only with ``spark.sql.python.filterPushdown.enabled=true`` (off by default
in PySpark 4; :func:`spark_jobs.session.get_session` turns it on). Without it PySpark refuses the
read (``DATA_SOURCE_PUSHDOWN_DISABLED``, naming the setting) since this reader takes filters.

Memory (issue 42, goal 3): a task streams its partition, one Arrow batch at a time, but a scan
merges every SST view overlapping the range (each L0 SST, one view per sorted run), and each
source fetches ahead of the merge with GETs doubling up to 8 MiB, every fetched group of blocks
held raw and decoded (about 4x larger) until the merge moves past it, and Arrow's pool (mimalloc)
keeps what was freed: a read of 5 overlapping L0 SSTs of 80k rows each grew its worker by 147
MiB, and an uncompacted shard of many L0 SSTs (an ingest adds one per input partition and run)
took hundreds of MiB whatever the batch size. The task's scan therefore holds about
``task_memory_bytes /`` :data:`READ_MEMORY_FACTOR` bytes of SSTs fetched at once, whatever its
range (:meth:`DbReader.scan_arrow <slatedb_core.DbReader.scan_arrow>`'s ``read_budget``): each
source's GETs are that over the number of sources, from the first GET on. (Until 2026-11-30 a
task scanned its range in steps of that many bytes of SSTs, each a scan of its own whose sources
started again with small GETs and its SSTs' readers again: 32 scans for the 16 partitions of a
10M-row uncompacted table instead of 16, ~15% more CPU, for about the same memory.)

Order: a partition's rows come in no particular order (Spark asks for none): the scan skips
the gather of a merge round's rows in key order wherever the round's keys are each in one source
(``ordered=False``, :func:`slatedb_core.lsm.iterators.merge_sorted`); a key in several sources
(newer versions, tombstones) is still resolved to its newest version.

Columns: ``key binary, value binary``; or, when the table records how its values hold columns
(:attr:`Table.value_encoding <slatedb_core.Table.value_encoding>`), ``key binary`` and those
columns, decoded per batch (:mod:`spark_jobs.read_values`). A read at a named snapshot decodes
with the encoding of the snapshot's own map version
(:func:`~slatedb_core.table.snapshot.snapshot_value_encoding`), not today's: an overwrite since
may have recorded other columns. A query whose columns are not those of the snapshot it reads
(an overwrite between its planning and its snapshot) fails and is run again.
"""

from __future__ import annotations

import dataclasses
import math
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from slatedb_core import (
    DbReader,
    DbReaderOptions,
    KeyRange,
    ObjectStore,
    ReaderMode,
    Table,
    TableSnapshot,
    open_store,
)
from slatedb_core.errors import DatabaseNotFound, InvalidArgument
from slatedb_core.lsm.merge_operator import BUILTIN_MERGE_OPERATORS
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions
from slatedb_core.table import TableOptions, ValueEncoding
from slatedb_core.table.snapshot import snapshot_value_encoding
from spark_jobs.datasource_options import check_option_names
from spark_jobs.read import shard_manifest, size_cuts
from spark_jobs.read_filters import KEY_COLUMN, KeySelection, select_keys
from spark_jobs.read_values import decode_values, value_schema
from spark_jobs.write_tasks import TASK_MEMORY_BYTES, check_task_memory

__all__ = [
    "POINTS_PER_PARTITION",
    "READ_OPTIONS",
    "ReadOptions",
    "ShardRead",
    "SlateDBPartition",
    "SlateDBReader",
    "check_read_options",
    "plan_reads",
    "read_partition",
    "read_schema",
]

KEY_TYPES = ("binary", "string")
"""How a read presents keys (option ``key_type``)."""
POINTS_PER_PARTITION = 100_000
"""Exact keys (``=``/``IN``) looked up by one task."""

READ_MEMORY_FACTOR = 16
"""``task_memory_bytes`` over the bytes of SSTs a task's scan holds fetched at once (its
``read_budget``; see "Memory" in the module doc): each GET is held raw and decoded, plus the
merge's buffered rows and output batches, the SSTs' indexes and filters, and what the allocators
keep (the 10M-row uncompacted table of bench/spark_read_bench.py, 16 sources per partition, at
the default 512 MiB: a worker ~180-220 MiB over its start; tests/spark/test_worker_memory.py:
147 MiB in one scan of 5 L0 SSTs with GETs up to 8 MiB, within 64 MiB with the budget)."""

READ_OPTIONS = frozenset(
    {"url", "path", "checkpoint", "key_type", "wal_url", "merge_operator"}
    | {"snapshot_lifetime_s", "batch_size", "max_partitions_per_shard", "partition_bytes"}
    | {"task_memory_bytes"}
)
"""Every option a read takes (lower case, as Spark hands them over); any other is refused."""
_DEFAULTS = {
    "snapshot_lifetime_s": 3600.0,
    "batch_size": 65536,
    "max_partitions_per_shard": 256,
    "partition_bytes": 128 * 1024 * 1024,
    "task_memory_bytes": TASK_MEMORY_BYTES,
}


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """The read options, checked (see the module doc)."""

    url: str
    path: str
    checkpoint: str | None
    key_type: str
    snapshot_lifetime: timedelta
    batch_size: int
    max_partitions_per_shard: int
    partition_bytes: int
    wal_url: str | None = field(default=None, repr=False)
    merge_operator: str | None = None
    task_memory_bytes: int = TASK_MEMORY_BYTES

    def __post_init__(self) -> None:
        check_task_memory("option 'task_memory_bytes'", self.task_memory_bytes)

    @property
    def read_budget(self) -> int:
        """Bytes of SSTs a task's scan holds fetched at once (see "Memory" in the module doc)."""
        return max(1, self.task_memory_bytes // READ_MEMORY_FACTOR)

    def reader_options(self, mode: ReaderMode | None = None) -> DbReaderOptions:
        """Options of a shard reader of this query: the WAL store and the merge operator."""
        return DbReaderOptions(mode=mode, wal_url=self.wal_url, merge_operator=self.merge_operator)

    def table_options(self) -> TableOptions:
        """Options of the table the driver opens (its snapshot finds the WAL in ``wal_url``)."""
        return TableOptions(writer=DbOptions(wal_url=self.wal_url), reader=self.reader_options())

    @staticmethod
    def parse(options: Mapping[str, str]) -> ReadOptions:
        """The options, or InvalidArgument naming the first bad one (nothing is opened)."""
        check_option_names(options, READ_OPTIONS, "a read")
        url, path = _text(options, "url"), _text(options, "path")
        if url is None:
            raise InvalidArgument("option 'url' is required: the object store's URL")
        if path is None:
            raise InvalidArgument("option 'path' is required: the table's path in the store")
        lifetime = _number(options, "snapshot_lifetime_s", float)
        if not math.isfinite(lifetime) or lifetime <= 0:
            raise InvalidArgument(
                f"option 'snapshot_lifetime_s' must be a positive number of seconds, "
                f"got {options.get('snapshot_lifetime_s')!r}"
            )
        key_type = (_text(options, "key_type") or "binary").lower()
        if key_type not in KEY_TYPES:
            raise InvalidArgument(
                f"option 'key_type' must be one of {KEY_TYPES}, got {options.get('key_type')!r}"
            )
        merge_operator = _text(options, "merge_operator")
        if merge_operator is not None and merge_operator not in BUILTIN_MERGE_OPERATORS:
            raise InvalidArgument(
                f"option 'merge_operator' must be one of {sorted(BUILTIN_MERGE_OPERATORS)}, "
                f"got {merge_operator!r}"
            )
        return ReadOptions(
            url,
            path,
            _text(options, "checkpoint"),
            key_type,
            timedelta(seconds=lifetime),
            int(_number(options, "batch_size", int)),
            int(_number(options, "max_partitions_per_shard", int)),
            int(_number(options, "partition_bytes", int)),
            _text(options, "wal_url"),
            merge_operator,
            int(_number(options, "task_memory_bytes", int)),
        )


def _text(options: Mapping[str, str], name: str) -> str | None:
    v = options.get(name)
    if v is None:
        return None
    if not isinstance(v, str) or not v.strip():
        raise InvalidArgument(f"option {name!r} must be a non-empty string, got {v!r}")
    return v


def _number(options: Mapping[str, str], name: str, kind: type[int] | type[float]) -> float:
    raw = options.get(name)
    if raw is None:
        return _DEFAULTS[name]
    try:
        v = kind(str(raw).strip())
    except ValueError:
        raise InvalidArgument(f"option {name!r} must be a number, got {raw!r}") from None
    if kind is int and v < 1:
        raise InvalidArgument(f"option {name!r} must be >= 1, got {raw!r}")
    return v


def _open_table(opts: ReadOptions) -> Table:
    try:
        store = open_store(opts.url)
    except InvalidArgument as e:
        raise InvalidArgument(f"option 'url': {e}") from None
    try:
        return Table.open(opts.path, store, opts.table_options())
    except (InvalidArgument, DatabaseNotFound) as e:
        raise InvalidArgument(f"option 'path': {e}") from None


def _named(table: Table, name: str) -> TableSnapshot:
    try:
        snap = table.named_snapshot(name)
    except InvalidArgument as e:
        raise InvalidArgument(f"option 'checkpoint': {e}") from None
    if snap is None:
        raise InvalidArgument(
            f"option 'checkpoint': no snapshot named {name!r} in table {table.path!r}"
        )
    return snap


def check_read_options(options: Mapping[str, str]) -> None:
    """Check the read options on the driver, before any task runs: InvalidArgument naming the
    option (missing ``url``/``path``, a ``checkpoint`` naming no snapshot, a bad number)."""
    opts = ReadOptions.parse(options)
    with _open_table(opts) as table:
        if opts.checkpoint is not None:
            _named(table, opts.checkpoint)


def _schema_of(encoding: ValueEncoding | None, key_type: str = "binary") -> StructType:
    key = StructField(KEY_COLUMN, StringType() if key_type == "string" else BinaryType(), True)
    if encoding is None:
        return StructType([key, StructField("value", BinaryType(), True)])
    return StructType([key, *value_schema(encoding).fields])


def read_schema(options: Mapping[str, str]) -> StructType:
    """``key binary, value binary``, or ``key binary`` and the value columns the table records
    (checks the options first, as :func:`check_read_options`)."""
    opts = ReadOptions.parse(options)
    with _open_table(opts) as table:
        if opts.checkpoint is None:
            return _schema_of(table.value_encoding, opts.key_type)
        snap = _named(table, opts.checkpoint)
        return _schema_of(_encoding_of(table, snap), opts.key_type)


def _encoding_of(table: Table, snap: TableSnapshot) -> ValueEncoding | None:
    """The value encoding of ``snap``'s own map version (an overwrite since may have recorded
    other columns): :func:`~slatedb_core.table.snapshot.snapshot_value_encoding`, its error
    naming the option."""
    try:
        return snapshot_value_encoding(table.maps, snap)
    except InvalidArgument as e:
        raise InvalidArgument(f"option 'checkpoint': {e}") from None


# ---- planning ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ShardRead:
    """What one partition reads of one shard: the keys in ``key_range``, or only ``points``."""

    db_path: str
    checkpoint: str
    key_range: KeyRange
    points: tuple[bytes, ...] | None = None


class SlateDBPartition(InputPartition):
    """One Spark task's reads and how the table's values hold columns (``encoding``: None for
    plain bytes). Picklable: the class is importable on the executors."""

    def __init__(self, reads: tuple[ShardRead, ...], encoding: str | None) -> None:
        super().__init__(reads)
        self.reads = reads
        self.encoding = encoding


def plan_reads(
    store: ObjectStore, snapshot: TableSnapshot, keys: KeySelection, opts: ReadOptions
) -> list[tuple[ShardRead, ...]]:
    """The partitions of a read of ``snapshot`` restricted to ``keys`` (see the module doc)."""
    if keys.is_empty:
        return []
    out: list[tuple[ShardRead, ...]] = []
    pending: list[ShardRead] = []
    pending_points = 0
    for shard, cid in zip(snapshot.shards, snapshot.checkpoints, strict=True):
        rng = shard.key_range.intersect(keys.range)
        if rng.is_empty():
            continue
        if keys.points is not None:
            mine = tuple(k for k in keys.points if rng.contains(k))
            for i in range(0, len(mine), POINTS_PER_PARTITION):
                chunk = mine[i : i + POINTS_PER_PARTITION]
                if pending_points + len(chunk) > POINTS_PER_PARTITION:
                    out.append(tuple(pending))
                    pending, pending_points = [], 0
                pending.append(ShardRead(shard.db_path, str(cid), rng, chunk))
                pending_points += len(chunk)
            continue
        manifest = shard_manifest(store, shard.db_path, cid)
        for r in size_cuts(manifest, rng, opts.partition_bytes, opts.max_partitions_per_shard):
            out.append((ShardRead(shard.db_path, str(cid), r),))
    if pending:
        out.append(tuple(pending))
    return out


# ---- the reader --------------------------------------------------------------------------------
class SlateDBReader(DataSourceReader):
    """Plans in the planning Python worker (:meth:`pushFilters`, :meth:`partitions`), reads in
    the tasks (:meth:`read`). Picklable: Spark ships it to the executors with the read
    function (as it was before :meth:`partitions` ran: the partitions carry all a task needs)."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.options = ReadOptions.parse(options)
        self.schema = schema
        self.keys = KeySelection()
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Fold the key filters into :attr:`keys`; return the others, which Spark applies."""
        self.keys, rest = select_keys(filters)
        return rest

    def partitions(self) -> list[InputPartition]:
        """Take the snapshot (or find the named one) and plan the partitions."""
        opts = self.options
        with _open_table(opts) as table:
            snap = None if opts.checkpoint is None else _named(table, opts.checkpoint)
            if self.keys.is_empty:
                return []
            if snap is None:
                snap = table.snapshot(lifetime=opts.snapshot_lifetime)
            else:
                _check_present(table.store, snap, opts.checkpoint)
            try:
                encoding = _decoding(table, snap, self.schema, opts.key_type)
            except InvalidArgument:
                if opts.checkpoint is None:
                    table.release_snapshot(snap)  # taken for this query only
                raise
            reads = plan_reads(table.store, snap, self.keys, opts)
        return [SlateDBPartition(r, encoding) for r in reads]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The rows of ``partition`` as Arrow batches of the query's schema."""
        if not isinstance(partition, SlateDBPartition):
            return  # Spark's stand-in when no partition was planned
        columns = StructType(self.schema.fields[1:])
        for batch in read_partition(
            open_store(self.options.url),
            partition,
            self.options.batch_size,
            self.options.reader_options(ReaderMode.CHECKPOINT),
            read_budget=self.options.read_budget,
        ):
            if self.options.key_type == "string":
                batch = _keys_as_text(batch)
            if partition.encoding is None:
                yield pa.RecordBatch.from_arrays(batch.columns, schema=self.arrow_schema)
            else:
                values = decode_values(batch.column(1), partition.encoding, columns)
                yield pa.RecordBatch.from_arrays(
                    [batch.column(0), *(c.combine_chunks() for c in values.columns)],
                    schema=self.arrow_schema,
                )


def _keys_as_text(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with its keys as UTF-8 text (option key_type=string); InvalidArgument naming
    the option for a key that is not UTF-8."""
    try:
        keys = batch.column(0).cast(pa.string())
    except pa.ArrowInvalid as e:
        raise InvalidArgument(
            f"option 'key_type': a key is not UTF-8 text ({e}); read with key_type=binary"
        ) from None
    return pa.RecordBatch.from_arrays([keys, *batch.columns[1:]], names=batch.schema.names)


def _check_present(store: ObjectStore, snap: TableSnapshot, name: str | None) -> None:
    """InvalidArgument naming the option if a checkpoint of the named snapshot is gone (expired
    or released): its reads would fail in the tasks."""
    for shard, cid in zip(snap.shards, snap.checkpoints, strict=True):
        cp = ManifestStore(store, shard.db_path).read_latest().manifest.checkpoint(cid)
        if cp is None or cp.is_expired(time.time()):
            raise InvalidArgument(
                f"option 'checkpoint': snapshot {name!r} has expired or was released "
                f"(checkpoint {cid} of {shard.db_path!r} is gone)"
            )


def _decoding(table: Table, snap: TableSnapshot, schema: StructType, key_type: str) -> str | None:
    """How to turn the values of ``snap`` into ``schema``'s columns: None (as they are: the
    query asks for ``key binary, value binary``, which needs no encoding) or the format of the
    snapshot's encoding."""
    raw = _schema_of(None, key_type)
    if schema.fieldNames() == raw.fieldNames() and schema == raw:
        return None
    encoding = _encoding_of(table, snap)
    if (
        encoding is None
        or not schema.fields
        or schema.fields[0].name != KEY_COLUMN
        or not (set(schema.fieldNames()[1:]) <= set(value_schema(encoding).fieldNames()))
    ):
        # e.g. an overwrite recorded other columns between the query's schema (read_schema) and
        # its snapshot (partitions): they would all read as nulls
        raise InvalidArgument(
            f"the query's columns {schema.simpleString()} are not the table's "
            f"{_schema_of(encoding, key_type).simpleString()} at the snapshot it reads (an "
            "overwrite since the query was planned may have changed them): run the query again"
        )
    return encoding.format


def read_partition(
    store: ObjectStore,
    partition: SlateDBPartition,
    batch_size: int,
    options: DbReaderOptions | None = None,
    read_budget: int | None = None,
) -> Iterator[pa.RecordBatch]:
    """The stored ``(key, value)`` rows of ``partition``, as non-empty Arrow batches, in no
    particular order: exact keys by point lookups, ranges by a scan of the range only, each shard
    at its checkpoint. ``options``: the shard readers' (WAL store, merge operator); the mode is
    CHECKPOINT. ``read_budget``: the bytes of SSTs a scan holds fetched at once (None: each
    source's GETs double up to 8 MiB); see "Memory" in the module doc."""
    options = dataclasses.replace(options or DbReaderOptions(), mode=ReaderMode.CHECKPOINT)
    for r in partition.reads:
        reader = DbReader.open(r.db_path, store, uuid.UUID(r.checkpoint), options)
        with reader:
            if r.points is not None:
                found = reader.get_many(list(r.points))
                keys = [k for k, v in zip(r.points, found, strict=True) if v is not None]
                if keys:
                    values = [v for v in found if v is not None]
                    yield pa.record_batch(
                        [pa.array(keys, pa.binary()), pa.array(values, pa.binary())],
                        ["key", "value"],
                    )
                continue
            rng = r.key_range
            for b in reader.scan_arrow(
                rng.start, rng.end, batch_size, read_budget=read_budget, ordered=False
            ):
                if b.num_rows:
                    yield b
