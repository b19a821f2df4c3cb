"""``spark.readStream.format("slatedb")`` streams a database's change feed into a Delta table
exactly once across query restarts, and ``spark.read.format("slatedb")`` with
``changes_since`` reads the changes after a cursor (issue 43, item 3).

The sink is Delta through ``deltalake`` from ``foreachBatch``: each micro-batch is one Delta
commit carrying the query's app id and the batch id as its transaction version (Delta's
idempotent writes), so a batch Spark runs again after a restart is skipped by the sink, and the
source must hand it the same rows: that is what makes the pipeline exactly once.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from slatedb_core import Table, open_store
from slatedb_core.errors import CursorInvalid, InvalidArgument
from slatedb_core.feed import ChangeFeed, ChangesOptions, Cursor
from slatedb_core.gc import GarbageCollector
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions, GarbageCollectorOptions
from slatedb_core.wal import WalLog
from slatedb_core.writer.db import Db
from spark_jobs.changes_source import ChangesBatchReader, ChangesStreamReader, read_between
from spark_jobs.datasource import SlateDBDataSource
from tests.spark.stream_log_steps import numbered, unlink_log_entry

pytestmark = [pytest.mark.spark]

DB = "ops-db"
QUIET = DbOptions(flush_interval=timedelta(hours=1))
APP = "changes-to-delta"


@pytest.fixture(scope="module")
def spark(spark: SparkSession) -> SparkSession:
    spark.dataSource.register(SlateDBDataSource)
    return spark


def write_round(url: str, r: int, *, wal_ssts: int = 3) -> None:
    """Puts, overwrites and deletes of round ``r`` over ``wal_ssts`` WAL SSTs."""
    with Db.open(DB, open_store(url), QUIET) as db:
        for w in range(wal_ssts):
            for j in range(4):
                k = b"k%02d" % ((r * 7 + w * 4 + j) % 9)
                if j == 2:
                    db.delete(k, await_durable=False)
                else:
                    db.put(k, b"r%d-w%d-%d" % (r, w, j), await_durable=False)
            db.flush()


def feed_rows(url: str, since: Cursor | str | None = None) -> list[tuple[Any, ...]]:
    feed = ChangeFeed(DB, open_store(url), ChangesOptions(bootstrap=False))
    out = []
    for b in feed.changes(since):
        out += [(r["key"], r["value"], r["op"], r["seq"]) for r in b.rows.to_pylist()]
    return out


def delta_sink(target: str) -> Callable[[DataFrame, int], None]:
    def apply(df: DataFrame, batch_id: int) -> None:
        try:
            done = DeltaTable(target).transaction_version(APP)
        except Exception:  # no table yet
            done = None
        if done is not None and batch_id <= done:
            return  # a batch Spark runs again after a restart: already in the table
        rows = df.toArrow()
        rows = rows.append_column("batch_id", pa.array([batch_id] * rows.num_rows, pa.int64()))
        write_deltalake(
            target,
            rows,
            mode="append",
            commit_properties=CommitProperties(app_transactions=[Transaction(APP, batch_id)]),
        )

    return apply


def run_query(spark: SparkSession, url: str, target: str, checkpoint: Path, **options: str) -> None:
    reader = spark.readStream.format("slatedb").option("url", url).option("path", DB)
    for k, v in options.items():
        reader = reader.option(k, v)
    q = (
        reader.load()
        .writeStream.foreachBatch(delta_sink(target))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    if q.exception() is not None:
        raise AssertionError(str(q.exception()))


def delta_rows(target: str) -> list[dict[str, Any]]:
    t = DeltaTable(target).to_pyarrow_table()
    return sorted(t.to_pylist(), key=lambda r: (r["seq"], r["key"]))


@pytest.mark.slow  # Spark streaming queries: 3-46 s each (issue 43, item 3)
def test_stream_into_delta_exactly_once_across_restarts(
    spark: SparkSession, store_url: str, tmp_path: Path
) -> None:
    target, checkpoint = str(tmp_path / "delta"), tmp_path / "checkpoint"
    write_round(store_url, 0)
    run_query(spark, store_url, target, checkpoint, consumer="delta", batch_rows="5")
    assert [(r["key"], r["value"], r["op"], r["seq"]) for r in delta_rows(target)] == feed_rows(
        store_url
    )

    # a restart with nothing new adds nothing; then new writes arrive after the last batch
    run_query(spark, store_url, target, checkpoint, consumer="delta", batch_rows="5")
    write_round(store_url, 1)
    run_query(spark, store_url, target, checkpoint, consumer="delta", batch_rows="5")

    # Spark lost its record of committing the last batch (a crash after the sink's commit):
    # the restarted query runs that batch again over the same offsets; the sink skips it
    commits = numbered(checkpoint / "commits")
    last = int(commits[-1].name)
    unlink_log_entry(commits[-1])
    write_round(store_url, 2, wal_ssts=2)
    run_query(spark, store_url, target, checkpoint, consumer="delta", batch_rows="5")

    rows = delta_rows(target)
    expected = feed_rows(store_url)
    got = [(r["key"], r["value"], r["op"], r["seq"]) for r in rows]
    assert got == expected  # every change once, none missing
    assert len({r["seq"] for r in rows}) == len(rows)  # our writer: one seq per row
    assert {r["op"] for r in rows} == {"put", "delete"}
    assert all(r["value"] is None for r in rows if r["op"] == "delete")
    # in order: each micro-batch's changes come after the previous batch's
    by_batch: dict[int, list[int]] = {}
    for r in rows:
        by_batch.setdefault(r["batch_id"], []).append(r["seq"])
    ids = sorted(by_batch)
    assert last in ids and max(ids) > last
    for a, b in itertools.pairwise(ids):
        assert max(by_batch[a]) < min(by_batch[b])
    # the committed offsets moved the consumer's checkpoint: it is registered
    feed = ChangeFeed(DB, open_store(store_url), ChangesOptions(consumer="delta"))
    assert [c.name for c in feed.consumers()] == ["delta"]


@pytest.mark.slow  # Spark streaming queries: 3-46 s each (issue 43, item 3)
def test_stream_starting_latest_and_at_a_cursor(
    spark: SparkSession, store_url: str, tmp_path: Path
) -> None:
    write_round(store_url, 0)
    before = feed_rows(store_url)
    cut = ChangeFeed(DB, open_store(store_url), ChangesOptions(batch_rows=5, bootstrap=False))
    cursor = next(iter(cut.changes())).cursor
    target = str(tmp_path / "at-cursor")
    run_query(spark, store_url, target, tmp_path / "cp1", starting=cursor.encode())
    assert [(r["key"], r["value"], r["op"], r["seq"]) for r in delta_rows(target)] == feed_rows(
        store_url, cursor
    )
    assert len(delta_rows(target)) == len(before) - 5

    latest = str(tmp_path / "latest")
    q = (
        spark.readStream.format("slatedb")
        .option("url", store_url)
        .option("path", DB)
        .option("starting", "latest")
        .load()
        .writeStream.foreachBatch(delta_sink(latest))
        .option("checkpointLocation", str(tmp_path / "cp2"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        q.processAllAvailable()  # the initial offset is taken: the tail now
        tail = ChangeFeed(DB, open_store(store_url)).tail()
        write_round(store_url, 1, wal_ssts=1)
        q.processAllAvailable()
    finally:
        q.stop()
    got = [(r["key"], r["value"], r["op"], r["seq"]) for r in delta_rows(latest)]
    assert got == feed_rows(store_url, tail)
    assert len(got) == 4


def read_changes(
    spark: SparkSession, url: str, since: str, until: str | None = None
) -> list[tuple[Any, ...]]:
    reader = (
        spark.read.format("slatedb")
        .option("url", url)
        .option("path", DB)
        .option("changes_since", since)
    )
    if until is not None:
        reader = reader.option("changes_until", until)
    df = reader.load()
    assert df.columns == [
        "key",
        "value",
        "op",
        "seq",
        "create_ts",
        "expire_ts",
        "wal_id",
        "snapshot",
    ]
    rows = sorted(df.collect(), key=lambda r: r["seq"])
    return [
        (bytes(r["key"]), None if r["value"] is None else bytes(r["value"]), r["op"], r["seq"])
        for r in rows
    ]


@pytest.mark.slow  # Spark streaming queries: 3-46 s each (issue 43, item 3)
def test_batch_read_of_changes_since_a_cursor(spark: SparkSession, store_url: str) -> None:
    write_round(store_url, 0)
    until = ChangeFeed(DB, open_store(store_url)).tail().encode()
    write_round(store_url, 1)
    # a read that ends at a cursor it was given, and the next read on from it: all, once
    upto = read_changes(spark, store_url, "earliest", until)
    assert upto == feed_rows(store_url)[:12]
    assert upto + read_changes(spark, store_url, until) == feed_rows(store_url)
    with pytest.raises(Exception, match="not a change-feed cursor") as e:
        read_changes(spark, store_url, "earliest", until + "x")
    assert "changes_until" in str(e.value)
    feed = ChangeFeed(DB, open_store(store_url), ChangesOptions(batch_rows=7, bootstrap=False))
    cursors = [b.cursor for b in feed.changes()]
    assert len(cursors) >= 3
    assert read_changes(spark, store_url, "earliest") == feed_rows(store_url)
    for c in (cursors[0], cursors[len(cursors) // 2], cursors[-1]):
        assert read_changes(spark, store_url, c.encode()) == feed_rows(store_url, c)
    assert read_changes(spark, store_url, cursors[-1].encode()) == []


@pytest.mark.slow  # Spark streaming queries: 3-46 s each (issue 43, item 3)
def test_a_damaged_cursor_or_offset_is_a_clear_error(
    spark: SparkSession, store_url: str, tmp_path: Path
) -> None:
    write_round(store_url, 0, wal_ssts=1)
    for bad in ("c1.2", "c2.1.0", "not a cursor"):
        with pytest.raises(Exception, match="not a change-feed cursor") as e:
            read_changes(spark, store_url, bad)
        assert "changes_since" in str(e.value)

    # a query whose checkpointed offset was damaged refuses to run, naming it
    target, checkpoint = str(tmp_path / "delta"), tmp_path / "checkpoint"
    run_query(spark, store_url, target, checkpoint)
    offsets = numbered(checkpoint / "offsets")
    lines = offsets[-1].read_text().splitlines()
    assert json.loads(lines[-1])["cursor"].startswith("c1.")
    lines[-1] = json.dumps({"cursor": "c1.x.7"})
    offsets[-1].write_text("\n".join(lines) + "\n")
    (offsets[-1].parent / f".{offsets[-1].name}.crc").unlink(missing_ok=True)
    unlink_log_entry(checkpoint / "commits" / offsets[-1].name)
    with pytest.raises(Exception, match="offset is damaged"):
        run_query(spark, store_url, target, checkpoint)


@pytest.mark.parametrize("batch_rows", [1, 5, 1000])
def test_a_micro_batch_reads_up_to_its_end_offset_only(store_url: str, batch_rows: int) -> None:
    """What a micro-batch (or a task retry of it) reads is fixed when it is planned: changes
    committed after its end offset (the tail then) belong to the next batch, whatever the
    feed's batch size; the two batches together are the whole feed."""
    write_round(store_url, 0)
    feed = ChangeFeed(DB, open_store(store_url), ChangesOptions(batch_rows, bootstrap=False))
    end = feed.tail()
    write_round(store_url, 1)

    def rows(start: Cursor, stop: Cursor) -> list[tuple[Any, ...]]:
        out: list[tuple[Any, ...]] = []
        for b in read_between(feed, start, stop):
            out += [(r["key"], r["value"], r["op"], r["seq"]) for r in b.to_pylist()]
        return out

    first = rows(Cursor(), end)
    assert first == feed_rows(store_url)[: len(first)] and len(first) == 12
    assert rows(Cursor(), end) == first  # read again: the same rows
    assert first + rows(end, feed.tail()) == feed_rows(store_url)
    mid = next(iter(feed.changes())).cursor
    assert rows(mid, end) == feed_rows(store_url, mid)[: len(first) - min(batch_rows, 12)]


class _DyingReader(ChangesStreamReader):
    """The stream reader, whose Python worker dies (``os._exit``) in the first attempt of each
    task, right after handing Spark its first batch of rows."""

    def __init__(self, options: dict[str, str]) -> None:
        self.deaths = Path(options.pop("deaths"))  # a folder: one file per death
        super().__init__(options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        for i, rows in enumerate(super().read(partition)):
            if i == 1 and ctx is not None and ctx.attemptNumber() == 0:
                (self.deaths / f"{ctx.stageId()}-{ctx.partitionId()}").touch()
                os._exit(17)
            yield rows


class _DyingSource(SlateDBDataSource):
    @classmethod
    def name(cls) -> str:
        return "slatedb_dying_worker"

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _DyingReader(dict(self.options))


@pytest.mark.slow  # Spark streaming queries: 3-46 s each (issue 43, item 3)
def test_a_worker_killed_mid_batch_is_retried_without_duplicates(
    spark: SparkSession, store_url: str, tmp_path: Path
) -> None:
    """A task's Python worker dies after delivering part of a micro-batch: Spark drops the
    attempt's rows and runs the task again, which reads the same changes (issue 43, item 3:
    exactly once across executor kills)."""
    spark.dataSource.register(_DyingSource)
    target, deaths = str(tmp_path / "delta"), tmp_path / "deaths"
    deaths.mkdir()
    write_round(store_url, 0)
    for r in (1, 2):
        q = (
            spark.readStream.format("slatedb_dying_worker")
            .option("url", store_url)
            .option("path", DB)
            .option("batch_rows", "2")
            .option("deaths", str(deaths))
            .load()
            .writeStream.foreachBatch(delta_sink(target))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(processingTime="100 milliseconds")
            .start()
        )
        try:
            q.processAllAvailable()
        finally:
            q.stop()
        assert q.exception() is None
        write_round(store_url, r, wal_ssts=1)
    got = [(r["key"], r["value"], r["op"], r["seq"]) for r in delta_rows(target)]
    expected = feed_rows(store_url)
    assert got == expected[: len(got)] and len(got) == len(expected) - 4
    assert len(list(deaths.iterdir())) >= 2  # a worker died in each query


def test_a_table_path_or_a_missing_one_is_refused_clearly(store_url: str) -> None:
    """A path holding nothing is refused before anything runs; a sharded table's path is read
    as its feed (tests/spark/test_table_changes_stream.py) but takes a table's cursor."""
    store = open_store(store_url)
    Table.create("events", store).close()
    for reader in (ChangesStreamReader, ChangesBatchReader):
        options = {"url": store_url, "path": "events", "changes_since": "earliest"}
        if reader is ChangesStreamReader:
            del options["changes_since"]
        reader(options)
        bad = "starting" if reader is ChangesStreamReader else "changes_since"
        with pytest.raises(CursorInvalid, match="'events' takes a sharded table's"):
            reader({**options, bad: "c1.1.0"})
        with pytest.raises(InvalidArgument, match="no database at 'nothing'"):
            reader({**options, "path": "nothing"})


@pytest.mark.slow  # Spark streaming queries: 3-46 s each (issue 43, item 3)
def test_a_consumer_keeps_its_changes_through_gc_between_queries(
    spark: SparkSession, store_url: str, tmp_path: Path
) -> None:
    """With option ``consumer``, each committed micro-batch moves the consumer's checkpoint:
    WAL SSTs the query has not read survive a GC pass while it is stopped, and are collectable
    once the restarted query committed them."""
    store = open_store(store_url)
    target, checkpoint = str(tmp_path / "delta"), tmp_path / "checkpoint"
    write_round(store_url, 0)
    run_query(spark, store_url, target, checkpoint, consumer="keep")
    before = WalLog(store, DB).list_ids()
    write_round(store_url, 1)
    with Db.open(DB, store, QUIET) as db:
        db.flush_memtable()  # the replay point moves past every WAL SST written so far
    gc_pass(store_url)
    unread = [i for i in WalLog(store, DB).list_ids() if i > before[-1]]
    assert len(unread) >= 3  # round 1's WAL SSTs: kept for the consumer
    run_query(spark, store_url, target, checkpoint, consumer="keep")
    got = [(r["key"], r["value"], r["op"], r["seq"]) for r in delta_rows(target)]
    assert [g[1:3] for g in got[-12:]] == [
        (b"r1-w%d-%d" % (w, j), "put") if j != 2 else (None, "delete")
        for w in range(3)
        for j in range(4)
    ]
    assert len(got) == 24
    gc_pass(store_url)  # the consumer moved on: what it read may go, up to the replay point
    replay = ManifestStore(store, DB).read_latest().manifest.replay_after_wal_id
    left = [i for i in WalLog(store, DB).list_ids() if i in unread]
    assert left == [i for i in unread if i >= replay] and len(left) < len(unread)


def gc_pass(url: str) -> None:
    GarbageCollector(DB, open_store(url), GarbageCollectorOptions(min_age=timedelta(0))).run_once()


def test_a_micro_batch_bounds_ingested_rows_by_its_end_offset(store_url: str) -> None:
    """Rows a bulk ingest put straight into L0 (no WAL SST, ``wal_id`` null) are changes of a
    registered consumer's feed: an ingest committed before a batch's end offset is in that
    batch, one after it in the next, each once."""
    store = open_store(store_url)
    feed = ChangeFeed(DB, store, ChangesOptions(batch_rows=1000, consumer="s", bootstrap=False))
    write_round(store_url, 0, wal_ssts=1)
    feed.advance(Cursor())  # registered before the ingests: they leave it markers
    with Db.open(DB, store, QUIET) as db:
        db.bulk_ingest(pa.table({"key": [b"i0", b"i1"], "value": [b"a", b"b"]}))
        db.put(b"after-first", b"x")
        db.flush()
    end = feed.tail()
    with Db.open(DB, store, QUIET) as db:
        db.bulk_ingest(pa.table({"key": [b"j0"], "value": [b"c"]}))
        db.put(b"after-second", b"y")
        db.flush()

    def keys(start: Cursor, stop: Cursor) -> list[bytes]:
        return [k for b in read_between(feed, start, stop) for k in b.column(0).to_pylist()]

    first = keys(Cursor(), end)
    assert first[-3:] == [b"i0", b"i1", b"after-first"] and len(first) == 7
    assert keys(end, feed.tail()) == [b"j0", b"after-second"]


@pytest.mark.slow  # Spark streaming queries: 3-46 s each (issue 43, item 3)
@pytest.mark.slatedb
def test_slatedb_writes_stream_into_delta_once_across_a_restart(
    spark: SparkSession, tmp_path: Path
) -> None:
    """SlateDB 0.17's own engine (the wheel) writes puts, deletes and write batches (one seq
    for all their rows) between two runs of a query: the Delta table gets each change once, in
    SlateDB's commit order, and a write batch whole in one micro-batch."""
    from tests.interop.oracle import Oracle, settings

    root = tmp_path / "root"
    root.mkdir()
    url = root.as_uri()
    target, checkpoint = str(tmp_path / "delta"), tmp_path / "checkpoint"
    oracle = Oracle(root)
    done: list[tuple[bytes, bytes | None, str]] = []
    try:
        for r in range(2):
            w = oracle.open_db(DB, settings(compactor=False))
            for i in range(3):
                w.put(b"k%d" % i, b"r%d-%d" % (r, i))
                done.append((b"k%d" % i, b"r%d-%d" % (r, i), "put"))
                w.write([(b"b%d" % i, b"x%d" % r), (b"k%d" % ((i + 1) % 3), None)])
                done += [(b"b%d" % i, b"x%d" % r, "put"), (b"k%d" % ((i + 1) % 3), None, "delete")]
                w.flush_wal()
            w.shutdown()
            reader = spark.readStream.format("slatedb").option("url", url).option("path", DB)
            q = (
                reader.option("batch_rows", "2")
                .load()
                .writeStream.foreachBatch(delta_sink(target))
                .option("checkpointLocation", str(checkpoint))
                .trigger(processingTime="100 milliseconds")
                .start()
            )
            try:
                q.processAllAvailable()
            finally:
                q.stop()
            assert q.exception() is None
    finally:
        oracle.close()
    rows = delta_rows(target)
    assert [(r["key"], r["value"], r["op"]) for r in rows] == done
    seqs = [r["seq"] for r in rows]
    assert seqs == sorted(seqs)
    by_seq: dict[int, set[int]] = {}
    for row in rows:
        by_seq.setdefault(row["seq"], set()).add(row["batch_id"])
    assert all(len(b) == 1 for b in by_seq.values())  # a write batch is never split
    assert any(len([row for row in rows if row["seq"] == s]) == 2 for s in by_seq)


@pytest.mark.slow  # Spark streaming queries: 3-46 s each (issue 43, item 3)
@pytest.mark.s3
def test_stream_and_batch_read_through_s3(spark: SparkSession, s3_url: str, tmp_path: Path) -> None:
    """The driver (offsets, consumer) and the tasks (reads) reach the same bucket (moto)."""
    target, checkpoint = str(tmp_path / "delta"), tmp_path / "checkpoint"
    write_round(s3_url, 0)
    run_query(spark, s3_url, target, checkpoint, consumer="s3")
    write_round(s3_url, 1, wal_ssts=1)
    run_query(spark, s3_url, target, checkpoint, consumer="s3")
    got = [(r["key"], r["value"], r["op"], r["seq"]) for r in delta_rows(target)]
    assert got == feed_rows(s3_url) and len(got) == 16
    assert read_changes(spark, s3_url, "earliest") == got


@pytest.mark.slow  # Spark streaming queries: 3-46 s each (issue 43, item 3)
def test_available_now_reads_to_the_tail_at_start_then_stops(
    spark: SparkSession, store_url: str, tmp_path: Path
) -> None:
    """``trigger(availableNow=True)``: the query reads what was committed when it started and
    ends by itself; run again, it reads on from there."""
    target, checkpoint = str(tmp_path / "delta"), tmp_path / "checkpoint"
    for r in range(2):
        write_round(store_url, r, wal_ssts=2)
        q = (
            spark.readStream.format("slatedb")
            .option("url", store_url)
            .option("path", DB)
            .option("batch_rows", "3")
            .load()
            .writeStream.foreachBatch(delta_sink(target))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        assert q.awaitTermination(120)
        assert q.exception() is None
    got = [(r["key"], r["value"], r["op"], r["seq"]) for r in delta_rows(target)]
    assert got == feed_rows(store_url) and len(got) == 16


@pytest.mark.slow  # Spark streaming queries: 3-46 s each (issue 43, item 3)
def test_a_stream_moves_its_consumer_once_per_batch_and_renews_it(store_url: str) -> None:
    """The driver's ``latestOffset`` (every trigger) moves the consumer to the last committed
    batch's end once, not at every trigger (a move may commit a manifest), and again once a
    quarter of ``consumer_lifetime_s`` passed, so an idle query's checkpoint does not lapse."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    store = open_store(store_url)
    write_round(store_url, 0)
    reader = ChangesStreamReader(
        {"url": store_url, "path": DB, "consumer": "idle", "consumer_lifetime_s": "4"}
    )
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end != start
    manifests = ManifestStore(store, DB)

    def hold() -> Any:
        (c,) = [c for c in ChangeFeed(DB, store).consumers() if c.name == "idle"]
        return c.checkpoint

    reader.latestOffset(end, ReadAllAvailable())  # the batch ending at ``end`` committed
    moved = hold()
    for i in range(3):
        # someone else commits a manifest between two triggers (here: another consumer)
        ChangeFeed(DB, store, ChangesOptions(consumer=f"other{i}")).advance(
            Cursor.decode(end["cursor"])
        )
        before = manifests.read_latest().id
        assert reader.latestOffset(end, ReadAllAvailable()) == end
        assert manifests.read_latest().id == before  # the trigger wrote no manifest
        assert hold() == moved
    time.sleep(3.1)  # past a quarter of the lifetime, and past half of it: renewed
    reader.latestOffset(end, ReadAllAvailable())
    renewed = hold()
    assert renewed.expire_time_s is not None and moved.expire_time_s is not None
    assert renewed.expire_time_s > moved.expire_time_s
