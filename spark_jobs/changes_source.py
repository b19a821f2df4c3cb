"""A database's change feed as a Spark source: ``spark.readStream.format("slatedb")`` streams
every committed change of one database in commit order, and ``spark.read.format("slatedb")``
with option ``changes_since`` reads the changes after a cursor as one batch (issue 43, item 3;
docs/changes.md is the feed, :mod:`slatedb_core.feed` its public API).

::

    (spark.readStream.format("slatedb")
        .option("url", "file:///data/lake").option("path", "orders-db")
        .option("starting", "earliest")      # earliest | latest | a cursor (c1.<wal>.<seq>...)
        .option("consumer", "to-delta")      # optional: a retention checkpoint the commits move
        .load())
    spark.read.format("slatedb").option("url", ...).option("path", ...)
        .option("changes_since", cursor_or_earliest)
        .option("changes_until", ChangeFeed(...).tail().encode())   # optional, see below
        .load()

Offsets are encoded cursors (``{"cursor": "c1.<wal>.<seq>"}``, :meth:`Cursor.encode`): Spark
keeps them in the query's checkpointLocation, so a restarted query resumes from the last batch
it committed. A micro-batch reads the changes in ``(start, end]``: ``end`` is the feed's tail
(:meth:`ChangeFeed.tail`) when the batch is planned, so a batch read again (a task retry, an
executor lost, a query restarted before it committed) reads the same rows. A change ``(wal_id,
seq)`` is in a batch when the start cursor has not delivered it and ``end`` has (a cursor
``(w, s)`` has delivered every WAL SST below ``w`` and the rows of SST ``w`` at or below ``s``);
a micro-batch is one partition (the feed is read in order). With a sink that writes each batch
once per batch id (Delta's ``txnAppId``/``txnVersion``, a file sink, ``foreachBatch`` keyed by
the batch id), the pipeline is exactly once.

Options: ``url``, ``path`` (a database's path in the store, or a sharded table's root: then
offsets, ``starting``, ``changes_since`` and ``changes_until`` are table cursors, the latest
offset is the table's tail and a micro-batch reads between two table cursors,
:meth:`~slatedb_core.table.changes.TableChangeFeed.changes` with ``until``; ``earliest`` is
:meth:`~slatedb_core.table.changes.TableChangeFeed.earliest`; ``consumer`` holds every shard,
:meth:`~slatedb_core.table.changes.TableChangeFeed.advance`),
``wal_url`` and ``merge_operator`` as the batch read takes them
(:mod:`spark_jobs.datasource_read`), ``batch_rows`` (rows per Arrow batch, default 65536),
``changes_until`` (a batch read's end cursor, default the tail when the query is planned: pass
the one given here as the next read's ``changes_since`` to read on, once), ``starting`` (a
stream's first offset: ``earliest``, the default, is WAL SST 1; ``latest`` is
the tail now; or a cursor), ``consumer`` (a registered consumer, ``ChangesOptions.consumer``:
each committed micro-batch moves its checkpoint to keep only what the query still needs, so
the GC never collects changes the query has not read; moved at each trigger to the end of
the last batch in the query's commit log) and ``consumer_lifetime_s``. A cursor
that is not one (a damaged offset or ``changes_since``) raises
:class:`~slatedb_core.errors.CursorInvalid`; one the GC made unreachable
:class:`~slatedb_core.errors.ChangesCollected` (never a silent gap).

Columns: ``CHANGE_SCHEMA`` (:mod:`slatedb_core.feed`) with the unsigned ``seq`` and ``wal_id``
as Spark longs (seqs stay below 2**63).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from slatedb_core import Table, open_store
from slatedb_core.errors import (
    ChangesCollected,
    CursorInvalid,
    DatabaseNotFound,
    InvalidArgument,
    SlateDBError,
)
from slatedb_core.feed import ChangeFeed, ChangesOptions, Cursor
from slatedb_core.lsm.merge_operator import BUILTIN_MERGE_OPERATORS
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.table.changes import (
    TableChangeFeed,
    TableCursor,
    delivered_by,
    delivered_rows,
)
from slatedb_core.table.shardmap import ShardMapStore
from spark_jobs.datasource_options import check_option_names

__all__ = [
    "CHANGES_OPTIONS",
    "CHANGES_SINCE",
    "SPARK_CHANGE_SCHEMA",
    "ChangesBatchReader",
    "ChangesOptionsSpec",
    "ChangesStreamReader",
    "holds_database",
    "wants_changes",
]

CHANGES_SINCE = "changes_since"
"""The option that turns a batch read into a read of changes."""
CHANGES_UNTIL = "changes_until"
"""A batch read's end cursor (default: the feed's tail when the query is planned): pass the
same one as the next read's ``changes_since`` to read on without a gap or a repeat."""
EARLIEST = "earliest"
LATEST = "latest"
CHANGES_OPTIONS = frozenset(
    {
        "url",
        "path",
        "wal_url",
        "merge_operator",
        "batch_rows",
        "starting",
        "consumer",
        "consumer_lifetime_s",
        CHANGES_SINCE,
        CHANGES_UNTIL,
    }
)
"""Every option a read of changes takes (lower case, as Spark hands them over)."""

SPARK_CHANGE_SCHEMA = StructType(
    [
        StructField("key", BinaryType(), False),
        StructField("value", BinaryType(), True),
        StructField("op", StringType(), False),
        StructField("seq", LongType(), False),
        StructField("create_ts", LongType(), True),
        StructField("expire_ts", LongType(), True),
        StructField("wal_id", LongType(), True),
        StructField("snapshot", BooleanType(), False),
    ]
)
"""The change feed's columns in Spark's types (see the module doc)."""

_ARROW_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary(), nullable=False),
        pa.field("value", pa.binary()),
        pa.field("op", pa.string(), nullable=False),
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("create_ts", pa.int64()),
        pa.field("expire_ts", pa.int64()),
        pa.field("wal_id", pa.int64()),
        pa.field("snapshot", pa.bool_(), nullable=False),
    ]
)


_CHANGES_ONLY = frozenset(
    {CHANGES_SINCE, CHANGES_UNTIL, "starting", "consumer", "consumer_lifetime_s", "batch_rows"}
)


RENEW_S = 60.0
"""At most this long between two moves of a stream's consumer to the same cursor."""


def wants_changes(options: Mapping[str, str]) -> bool:
    """Whether the options ask for changes: one only a read of changes takes (``changes_since``,
    ``starting``, ``consumer``, ...; any case)."""
    return any(k.lower() in _CHANGES_ONLY for k in options)


def holds_database(options: Mapping[str, str]) -> bool:
    """Whether option ``path`` names a database (not a sharded table): what
    ``format("slatedb")`` reads changes of when no option says so (a stream with only ``url``
    and ``path``). False for anything it cannot tell (the caller raises its own error)."""
    url, path = options.get("url"), options.get("path")
    if not isinstance(url, str) or not isinstance(path, str):
        return False
    try:
        ManifestStore(open_store(url), path).read_latest()
    except SlateDBError:
        return False
    return True


def _get(options: Mapping[str, str], name: str) -> str | None:
    for k, v in options.items():
        if k.lower() == name:
            if not isinstance(v, str) or not v.strip():
                raise InvalidArgument(f"option {name!r} must be a non-empty string, got {v!r}")
            return v.strip()
    return None


AnyCursor = Cursor | TableCursor
"""A database's cursor or a sharded table's (``t1.``, :mod:`slatedb_core.table.changes`)."""


def _decode_any(text: str) -> AnyCursor:
    if text.startswith("t1."):
        return TableCursor.decode(text)
    return Cursor.decode(text)


def _cursor(text: str, option: str) -> AnyCursor:
    try:
        c = _decode_any(text)
    except CursorInvalid as e:
        raise CursorInvalid(
            f"option {option!r}: {e} (give {EARLIEST!r}, {LATEST!r} or a cursor a change "
            "feed handed out)"
        ) from None
    return c


@dataclass(frozen=True)
class ChangesOptionsSpec:
    """The checked options of a read of changes (see the module doc)."""

    url: str = field(repr=False)
    path: str
    wal_url: str | None = field(default=None, repr=False)
    merge_operator: str | None = None
    batch_rows: int = 65536
    starting: str = EARLIEST
    consumer: str | None = None
    consumer_lifetime: timedelta | None = None
    since: str | None = None
    """``changes_since`` of a batch read (None: a stream)."""
    until: str | None = None
    """``changes_until`` of a batch read (None: the tail when planned)."""

    @staticmethod
    def parse(options: Mapping[str, str], *, stream: bool) -> ChangesOptionsSpec:
        """The options, or InvalidArgument / CursorInvalid naming the first bad one."""
        what = "a stream of changes" if stream else "a read of changes"
        check_option_names(options, CHANGES_OPTIONS, what)
        url, path = _get(options, "url"), _get(options, "path")
        if url is None:
            raise InvalidArgument("option 'url' is required: the object store's URL")
        if path is None:
            raise InvalidArgument("option 'path' is required: the database's path in the store")
        merge = _get(options, "merge_operator")
        if merge is not None and merge not in BUILTIN_MERGE_OPERATORS:
            raise InvalidArgument(
                f"option 'merge_operator' must be one of {sorted(BUILTIN_MERGE_OPERATORS)}, "
                f"got {merge!r}"
            )
        rows_text = _get(options, "batch_rows") or "65536"
        if not rows_text.isascii() or not rows_text.isdigit() or int(rows_text) < 1:
            raise InvalidArgument(f"option 'batch_rows' must be an integer >= 1, got {rows_text!r}")
        life_text = _get(options, "consumer_lifetime_s")
        lifetime = None
        if life_text is not None:
            try:
                secs = float(life_text)
            except ValueError:
                secs = math.nan
            if not math.isfinite(secs) or secs <= 0:
                raise InvalidArgument(
                    "option 'consumer_lifetime_s' must be a positive number of seconds, "
                    f"got {life_text!r}"
                )
            lifetime = timedelta(seconds=secs)
        since = _get(options, CHANGES_SINCE)
        if not stream and since is None:
            raise InvalidArgument(
                f"{path!r} is a database: read its changes with option {CHANGES_SINCE!r} (a "
                f"cursor or {EARLIEST!r}), or stream them with spark.readStream"
            )
        until = _get(options, CHANGES_UNTIL)
        if stream and (since is not None or until is not None):
            raise InvalidArgument(
                f"options {CHANGES_SINCE!r} and {CHANGES_UNTIL!r} are for spark.read; a stream "
                "starts at option 'starting'"
            )
        if until is not None:
            _cursor(until, CHANGES_UNTIL)
        if not stream and _get(options, "starting") is not None:
            raise InvalidArgument(
                f"option 'starting' is for spark.readStream; a batch read takes {CHANGES_SINCE!r}"
            )
        starting = since if not stream else (_get(options, "starting") or EARLIEST)
        assert starting is not None
        if starting.lower() in (EARLIEST, LATEST):
            starting = starting.lower()
        else:
            _cursor(starting, CHANGES_SINCE if not stream else "starting")
        spec = ChangesOptionsSpec(
            url,
            path,
            _get(options, "wal_url"),
            merge,
            int(rows_text),
            starting,
            _get(options, "consumer"),
            lifetime,
            since,
            until,
        )
        spec.changes_options()  # checks the consumer's name
        return spec

    def changes_options(self, *, consumer: bool = False) -> ChangesOptions:
        """The feed's options; with ``consumer``, the registered consumer's. A feed here never
        bootstraps from a snapshot: a micro-batch must read the same rows each time it runs."""
        try:
            return ChangesOptions(
                batch_rows=self.batch_rows,
                consumer=self.consumer if consumer else None,
                consumer_lifetime=self.consumer_lifetime,
                bootstrap=False,
            )
        except InvalidArgument as e:
            raise InvalidArgument(f"option 'consumer': {e}") from None

    def feed(self, *, consumer: bool = False) -> ChangeFeed:
        """The change feed of the database (``consumer``: with the registered consumer)."""
        try:
            store = open_store(self.url)
        except InvalidArgument as e:
            raise InvalidArgument(f"option 'url': {e}") from None
        try:
            return ChangeFeed(
                self.path,
                store,
                self.changes_options(consumer=consumer),
                wal_url=self.wal_url,
                merge_operator=self.merge_operator,
            )
        except InvalidArgument as e:
            raise InvalidArgument(f"option 'path': {e}") from None

    def check_database(self) -> bool:
        """Whether ``path`` holds a sharded table (True) or a database (False); InvalidArgument
        when it holds neither, CursorInvalid for a cursor of the other kind."""
        store = open_store(self.url)
        try:
            ManifestStore(store, self.path).read_latest()
            table = False
        except DatabaseNotFound:
            try:
                Table.open(self.path, store).close()
            except DatabaseNotFound:
                raise InvalidArgument(f"option 'path': no database at {self.path!r}") from None
            table = True
        for name, text in (("starting", self.starting), (CHANGES_UNTIL, self.until)):
            if text is None or text in (EARLIEST, LATEST):
                continue
            if isinstance(_cursor(text, name), TableCursor) != table:
                what = "a sharded table's (t1.)" if table else "a database's (c1.)"
                raise CursorInvalid(f"option {name!r}: {self.path!r} takes {what} cursor")
        return table

    def first_cursor(self, feed: ChangeFeed) -> Cursor:
        """Where a stream starts, or after what a batch read reads."""
        if self.starting == EARLIEST:
            return Cursor()
        if self.starting == LATEST:
            return feed.tail()
        c = _cursor(self.starting, CHANGES_SINCE if self.since is not None else "starting")
        assert isinstance(c, Cursor)
        return c

    def table_feed(self, *, consumer: bool = False) -> TableChangeFeed:
        """The change feed of the sharded table at ``path`` (never bootstrapping; with
        ``consumer``, the registered consumer's, holding every shard)."""
        store = open_store(self.url)
        try:
            return TableChangeFeed(
                self.path,
                store,
                ShardMapStore(store, self.path),
                self.changes_options(consumer=consumer),
                wal_url=self.wal_url,
            )
        except InvalidArgument as e:
            raise InvalidArgument(f"option 'consumer': {e}") from None

    def first_table_cursor(self, feed: TableChangeFeed) -> TableCursor:
        """Where a table's stream starts, or after what a batch read of a table reads:
        ``earliest`` is the first shard map's shards from their start (WAL SST 1), followed
        through every rescale since (:meth:`TableChangeFeed.earliest`)."""
        if self.starting == EARLIEST:
            return feed.earliest()
        if self.starting == LATEST:
            return feed.tail()
        c = _cursor(self.starting, CHANGES_SINCE if self.since is not None else "starting")
        assert isinstance(c, TableCursor)
        return c


def _offset(cursor: AnyCursor) -> dict[str, str]:
    return {"cursor": cursor.encode()}


def _of_any_offset(offset: Mapping[str, Any]) -> AnyCursor:
    """The cursor of an offset Spark kept (a damaged one is CursorInvalid, saying so)."""
    text = offset.get("cursor") if isinstance(offset, Mapping) else None
    if not isinstance(text, str):
        raise CursorInvalid(f"not an offset of a slatedb change stream: {offset!r}")
    try:
        return _decode_any(text)
    except CursorInvalid as e:
        raise CursorInvalid(f"the stream's offset is damaged: {e}") from None


def _of_offset(offset: Mapping[str, Any]) -> Cursor:
    """A database stream's cursor of an offset Spark kept."""
    c = _of_any_offset(offset)
    if not isinstance(c, Cursor):
        raise CursorInvalid("the stream's offset is a table's cursor; the path is a database")
    return c


def _of_table_offset(offset: Mapping[str, Any]) -> TableCursor:
    """A table stream's cursor of an offset Spark kept."""
    c = _of_any_offset(offset)
    if not isinstance(c, TableCursor):
        raise CursorInvalid("the stream's offset is a database's cursor; the path is a table")
    return c


def _key(c: Cursor) -> tuple[int, int]:
    return (c.wal_id, c.seq)


class ChangesPartition(InputPartition):
    """The changes after ``start`` up to ``end`` (encoded cursors; picklable)."""

    def __init__(self, start: str, end: str) -> None:
        super().__init__(None)
        self.start = start
        self.end = end


_delivered_by = delivered_by
"""Which rows an end cursor has delivered: one rule for a database's micro-batch and a table
shard's (:func:`slatedb_core.table.changes.delivered_by`)."""


def read_table_between(
    feed: TableChangeFeed, start: TableCursor, end: TableCursor
) -> Iterator[pa.RecordBatch]:
    """A table's changes after ``start`` up to ``end`` (:meth:`TableChangeFeed.changes` with
    ``until``: the same rows each time, a split after ``end`` included), Spark-typed."""
    for batch in feed.changes(start, until=end):
        if batch.rows.num_rows:
            yield batch.rows.cast(_ARROW_SCHEMA)


def read_between(feed: ChangeFeed, start: Cursor, end: Cursor) -> Iterator[pa.RecordBatch]:
    """The changes after ``start`` that ``end`` has delivered, as Spark-typed Arrow batches.
    Stops at the first batch whose cursor reaches ``end`` (WAL phase); a feed that ends before
    every WAL SST below ``end`` was read is ChangesCollected, never a short batch; an ``end``
    another database handed out is CursorInvalid."""
    feed.check_own(end)
    last = start
    for batch in feed.changes(since=start, until=end):
        rows = batch.rows
        last = batch.cursor
        # every batch, not only the one crossing the end: an ingest in flight when ``end``
        # was taken commits after it, below a WAL row it covers (review43)
        rows = delivered_rows(rows, end)
        if rows.num_rows:
            yield rows.cast(_ARROW_SCHEMA)
        if last.snapshot is None and _key(last) >= _key(end):
            return
    if last.snapshot is not None or last.wal_id < end.wal_id:
        raise ChangesCollected(
            feed.path,
            f"the feed ended at {last.encode()} before {end.encode()}, the end of the batch",
        )


class ChangesStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("slatedb")`` (see the module doc). ``trigger(availableNow=
    True)`` reads up to the tail when the query starts, then stops."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.spec = ChangesOptionsSpec.parse(options, stream=True)
        self.target: str | None = None
        self.advanced: tuple[str, float] | None = None
        """The cursor the consumer was last moved to by this query run, and when."""
        """With ``availableNow``: the tail when the query started (the last end offset)."""
        self.table = self.spec.check_database()
        """A sharded table's stream: offsets are table cursors, a micro-batch the rows between
        two (:func:`read_table_between`), the latest offset the table's tail."""

    def initialOffset(self) -> dict[str, str]:
        if self.table:
            tfeed = self.spec.table_feed(consumer=self.spec.consumer is not None)
            tfirst = self.spec.first_table_cursor(tfeed)
            if self.spec.consumer is not None:
                tfeed.advance(tfirst)  # registers the consumer on every shard first
            return _offset(tfirst)
        feed = self.spec.feed(consumer=self.spec.consumer is not None)
        first = self.spec.first_cursor(feed)
        if self.spec.consumer is not None:
            feed.advance(first)  # registers the consumer before anything is read
        return _offset(first)

    def latestOffset(self, start: dict[str, Any], limit: object) -> dict[str, str]:
        if self.table:
            tbegin = _of_table_offset(start)
            if self.spec.consumer is not None and self._due(tbegin):
                # as a database's stream does (below): once per batch, and to renew
                self.spec.table_feed(consumer=True).advance(tbegin)
                self.advanced = (tbegin.encode(), time.monotonic())
            ttail = (
                self.spec.table_feed().tail()
                if self.target is None
                else TableCursor.decode(self.target)
            )
            # a table cursor has no order: the same cursor again is nothing new (a tail that
            # moved with no rows, e.g. over a writer's empty fencing WAL SST, is an empty batch)
            return _offset(tbegin if ttail == tbegin else ttail)
        begin = _of_offset(start)
        if self.spec.consumer is not None and self._due(begin):
            # Spark plans the next batch only once the previous one, ending at ``start``, is
            # in its commit log, and calls commit(start) only when that next batch has data:
            # move the consumer at the first trigger after a batch, not once more changes come
            # (once per batch, and as often as the checkpoint's lifetime needs renewing: a
            # move may commit a manifest)
            self.spec.feed(consumer=True).advance(begin)
            self.advanced = (begin.encode(), time.monotonic())
        tail = self.spec.feed().tail() if self.target is None else Cursor.decode(self.target)
        if begin.snapshot is None and _key(tail) <= _key(begin):
            return _offset(begin)  # nothing new: Spark runs no batch
        return _offset(tail)

    def _due(self, begin: AnyCursor) -> bool:
        """Whether to move the consumer to ``begin``: not yet done, or its checkpoint's
        lifetime (which a move renews) a quarter spent since."""
        if self.advanced is None or self.advanced[0] != begin.encode():
            return True
        life = self.spec.consumer_lifetime
        renew_s = RENEW_S if life is None else min(RENEW_S, life.total_seconds() / 4)
        return time.monotonic() - self.advanced[1] >= renew_s

    def prepareForTriggerAvailableNow(self) -> None:
        feed = self.spec.table_feed() if self.table else self.spec.feed()
        self.target = feed.tail().encode()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        if self.table:
            ta, tb = _of_table_offset(start), _of_table_offset(end)
            return [] if ta == tb else [ChangesPartition(ta.encode(), tb.encode())]
        a, b = _of_offset(start), _of_offset(end)
        if a == b:
            return []
        return [ChangesPartition(a.encode(), b.encode())]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, ChangesPartition):
            return  # no partition planned: Spark still runs one task, with none of ours
        # with the registered consumer: its ingest markers fill the ingests' seq gaps (an
        # unregistered feed cannot tell them from a failed ingest); moving its checkpoint to
        # ``start`` is safe, Spark runs a batch only once the one before it is committed
        registered = self.spec.consumer is not None
        if self.table:
            start, end = TableCursor.decode(partition.start), TableCursor.decode(partition.end)
            yield from read_table_between(self.spec.table_feed(consumer=registered), start, end)
            return
        feed = self.spec.feed(consumer=registered)
        yield from read_between(feed, Cursor.decode(partition.start), Cursor.decode(partition.end))

    def commit(self, end: dict[str, Any]) -> None:
        if self.spec.consumer is None:
            return
        if self.table:
            self.spec.table_feed(consumer=True).advance(_of_table_offset(end))
        else:
            self.spec.feed(consumer=True).advance(_of_offset(end))


class ChangesBatchReader(DataSourceReader):
    """``spark.read.format("slatedb").option("changes_since", ...)``: the changes after the
    cursor (``earliest``: all of them) up to the feed's tail when the query is planned."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.spec = ChangesOptionsSpec.parse(options, stream=False)
        self.table = self.spec.check_database()

    def partitions(self) -> list[InputPartition]:
        if self.table:
            tfeed = self.spec.table_feed()
            tstart = self.spec.first_table_cursor(tfeed)
            until = self.spec.until
            tend = tfeed.tail() if until is None else TableCursor.decode(until)
            return [] if tstart == tend else [ChangesPartition(tstart.encode(), tend.encode())]
        feed = self.spec.feed()
        start = feed.check_own(self.spec.first_cursor(feed))
        end = feed.check_own(
            feed.tail() if self.spec.until is None else Cursor.decode(self.spec.until)
        )  # another database's: CursorInvalid now, not an empty read
        if start.snapshot is None and _key(end) <= _key(start):
            return []
        return [ChangesPartition(start.encode(), end.encode())]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, ChangesPartition):
            return  # no partition planned: Spark still runs one task, with none of ours
        # with the registered consumer: its ingest markers fill the ingests' seq gaps (an
        # unregistered feed cannot tell them from a failed ingest); moving its checkpoint to
        # ``start`` is safe, Spark runs a batch only once the one before it is committed
        registered = self.spec.consumer is not None
        if self.table:
            start, end = TableCursor.decode(partition.start), TableCursor.decode(partition.end)
            yield from read_table_between(self.spec.table_feed(consumer=registered), start, end)
            return
        feed = self.spec.feed(consumer=registered)
        yield from read_between(feed, Cursor.decode(partition.start), Cursor.decode(partition.end))
