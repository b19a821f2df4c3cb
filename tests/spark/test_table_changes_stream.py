"""``spark.readStream.format("slatedb")`` on a sharded table: offsets are table cursors, the
latest offset the table's tail, a micro-batch the rows between two table cursors (issue 43,
items 2 and 3). A micro-batch run again after a split reads the same rows, and a stream into
Delta is exactly once across restarts with a split between micro-batches and inside one.

The sink (Delta through ``deltalake`` from ``foreachBatch``, Delta's idempotent app
transactions) checks a batch Spark runs again against the rows Delta holds for it, so a source
that read different rows the second time fails the query instead of being skipped silently.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from pyspark.sql import DataFrame, SparkSession

from slatedb_core import Table, open_store
from slatedb_core.errors import CursorInvalid, InvalidArgument
from slatedb_core.feed import ChangesOptions
from slatedb_core.table.changes import TableChangeFeed, TableCursor
from spark_jobs.changes_source import ChangesBatchReader, ChangesStreamReader
from spark_jobs.datasource import SlateDBDataSource
from tests.spark.stream_log_steps import numbered, unlink_log_entry
from tests.table.conftest import OPTS, fill

pytestmark = [pytest.mark.spark]

TABLE = "events"
APP = "table-changes-to-delta"
Row = tuple[bytes, bytes | None, str, int]


@pytest.fixture(scope="module")
def spark(spark: SparkSession) -> SparkSession:
    spark.dataSource.register(SlateDBDataSource)
    return spark


def write(url: str, r: int, keys: bytes = b"agnt") -> None:
    """A put of each of ``keys`` (one letter each) with round ``r``'s value."""
    with Table.open(TABLE, open_store(url), OPTS) as table:
        fill(table, {bytes([k]) + b"k": b"r%d" % r for k in keys})


def split(url: str, index: int, at: bytes) -> None:
    with Table.open(TABLE, open_store(url), OPTS) as table:
        table.split(index, at)


def all_changes(url: str) -> list[Row]:
    with Table.open(TABLE, open_store(url), OPTS) as table:
        return [
            (r["key"], r["value"], r["op"], r["seq"])
            for b in TableChangeFeed(
                TABLE, table.store, table.maps, ChangesOptions(bootstrap=False)
            ).changes(TableChangeFeed(TABLE, table.store, table.maps).earliest())
            for r in b.rows.to_pylist()
        ]


def reader_rows(reader: ChangesStreamReader, start: dict[str, Any], end: dict[str, Any]) -> Any:
    out: list[Row] = []
    for p in reader.partitions(start, end):
        for b in reader.read(p):
            out += [(r["key"], r["value"], r["op"], r["seq"]) for r in b.to_pylist()]
    return out


def test_a_table_micro_batch_reads_the_same_rows_after_a_split(store_url: str) -> None:
    """A micro-batch planned before a split reads the same rows when run again after it; the
    next one starts at its end offset and reads exactly the rest."""
    Table.create(TABLE, open_store(store_url), [b"m"], OPTS).close()
    write(store_url, 0)
    reader = ChangesStreamReader({"url": store_url, "path": TABLE, "starting": "earliest"})
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    assert end["cursor"].startswith("t1.") and end != start
    first = reader_rows(reader, start, end)
    assert sorted(r[:2] for r in first) == [(k + b"k", b"r0") for k in (b"a", b"g", b"n", b"t")]
    write(store_url, 1)
    split(store_url, 0, b"f")  # a split after the batch was planned
    write(store_url, 2)
    assert reader_rows(reader, start, end) == first
    assert reader.latestOffset(end, None) != end
    second_end = reader.latestOffset(end, None)
    assert (
        TableCursor.decode(second_end["cursor"]).map_id > TableCursor.decode(end["cursor"]).map_id
    )
    second = reader_rows(reader, end, second_end)
    assert sorted(first + second, key=repr) == sorted(all_changes(store_url), key=repr)
    assert reader.latestOffset(second_end, None) == second_end  # nothing new: no batch
    assert reader.partitions(second_end, second_end) == []


def test_a_table_path_takes_table_cursors(store_url: str) -> None:
    """A table's path is read (no longer refused); a database cursor for it is CursorInvalid,
    and a consumer name too long for a shard's hold (``table:`` and the name) is refused."""
    Table.create(TABLE, open_store(store_url), [b"m"], OPTS).close()
    base = {"url": store_url, "path": TABLE}
    ChangesStreamReader({**base, "starting": "latest"})
    batch = ChangesBatchReader({**base, "changes_since": "earliest"})
    assert [b for p in batch.partitions() for b in batch.read(p)] == []  # nothing written
    with pytest.raises(CursorInvalid, match="table"):
        ChangesStreamReader({**base, "starting": "c1.1.0"})
    ChangesStreamReader({**base, "consumer": "sink"})  # tests/spark/test_table_changes_consumer.py
    with pytest.raises(InvalidArgument, match="consumer"):
        ChangesStreamReader({**base, "consumer": "x" * 200}).initialOffset()


def test_a_table_stream_without_a_changes_option_says_which_to_give(store_url: str) -> None:
    """``readStream`` of a table's root with only ``url`` and ``path`` was given the table
    rows' schema: refused, naming option ``starting``, rather than rows of the wrong shape."""
    Table.create(TABLE, open_store(store_url), [b"m"], OPTS).close()
    source = SlateDBDataSource({"url": store_url, "path": TABLE})
    with pytest.raises(InvalidArgument, match="needs option 'starting'"):
        source.streamReader(source.schema())
    changes = SlateDBDataSource({"url": store_url, "path": TABLE, "starting": "earliest"})
    assert isinstance(changes.streamReader(changes.schema()), ChangesStreamReader)


def checking_delta_sink(target: str) -> Callable[[DataFrame, int], None]:
    def apply(df: DataFrame, batch_id: int) -> None:
        rows = df.toArrow()
        try:
            dt: DeltaTable | None = DeltaTable(target)
        except Exception:  # no table yet
            dt = None
        done = None if dt is None else dt.transaction_version(APP)
        if dt is not None and done is not None and batch_id <= done:
            # a batch Spark runs again: the source must hand it the rows it did the first time
            held = dt.to_pyarrow_table().filter(
                pa.compute.equal(dt.to_pyarrow_table()["batch_id"], batch_id)
            )
            key = ("key", "value", "op", "seq")
            again = sorted(tuple(r[k] for k in key) for r in rows.to_pylist())
            before = sorted(tuple(r[k] for k in key) for r in held.to_pylist())
            if again != before:
                raise AssertionError(f"batch {batch_id} read again differs: {again} != {before}")
            return
        rows = rows.append_column("batch_id", pa.array([batch_id] * rows.num_rows, pa.int64()))
        write_deltalake(
            target,
            rows,
            mode="append",
            commit_properties=CommitProperties(app_transactions=[Transaction(APP, batch_id)]),
        )

    return apply


def run_query(spark: SparkSession, url: str, target: str, checkpoint: Path) -> None:
    q = (
        spark.readStream.format("slatedb")
        .option("url", url)
        .option("path", TABLE)
        .option("starting", "earliest")
        .option("batch_rows", "2")
        .load()
        .writeStream.foreachBatch(checking_delta_sink(target))
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


@pytest.mark.slow  # Spark streaming queries
def test_a_sharded_table_streams_into_delta_exactly_once_across_a_restart(
    spark: SparkSession, store_url: str, tmp_path: Path
) -> None:
    target, checkpoint = str(tmp_path / "delta"), tmp_path / "checkpoint"
    Table.create(TABLE, open_store(store_url), [b"m"], OPTS).close()
    write(store_url, 0)
    run_query(spark, store_url, target, checkpoint)
    # a split between micro-batches, and one inside the next micro-batch
    split(store_url, 0, b"f")
    write(store_url, 1)
    split(store_url, 2, b"p")
    write(store_url, 2)
    run_query(spark, store_url, target, checkpoint)
    # Spark lost its record of committing the last batch; a split and writes come after it:
    # the restarted query runs that batch again over its offsets (the sink checks the rows)
    commits = numbered(checkpoint / "commits")
    unlink_log_entry(commits[-1])
    split(store_url, 1, b"i")
    write(store_url, 3)
    run_query(spark, store_url, target, checkpoint)

    got = DeltaTable(target).to_pyarrow_table().to_pylist()
    expected = all_changes(store_url)
    assert sorted(((r["key"], r["value"], r["op"], r["seq"]) for r in got), key=repr) == sorted(
        expected, key=repr
    )  # every change once, none missing
    per_key: dict[bytes, list[bytes]] = {}
    for r in sorted(got, key=lambda r: (r["batch_id"], r["seq"])):
        per_key.setdefault(r["key"], []).append(r["value"])
    assert per_key == {k + b"k": [b"r0", b"r1", b"r2", b"r3"] for k in (b"a", b"g", b"n", b"t")}
    assert len({r["batch_id"] for r in got}) >= 3


@pytest.mark.slow  # a Spark batch read: about 5 s
def test_a_batch_read_of_a_tables_changes_between_two_cursors(
    spark: SparkSession, store_url: str
) -> None:
    """``spark.read`` with ``changes_since``/``changes_until`` on a table: the rows between
    the two table cursors, the same after a split and more writes; the next read from
    ``changes_until`` reads the rest."""
    store = open_store(store_url)
    Table.create(TABLE, store, [b"m"], OPTS).close()
    write(store_url, 0)
    with Table.open(TABLE, store, OPTS) as table:
        a = table.changes_tail().encode()
    write(store_url, 1)
    split(store_url, 0, b"f")
    write(store_url, 2)
    with Table.open(TABLE, store, OPTS) as table:
        b = table.changes_tail().encode()

    def read(**options: str) -> list[tuple[bytes, bytes]]:
        reader = spark.read.format("slatedb").option("url", store_url).option("path", TABLE)
        for k, v in options.items():
            reader = reader.option(k, v)
        return sorted((bytes(r["key"]), bytes(r["value"])) for r in reader.load().collect())

    first = read(changes_since=a, changes_until=b)
    assert first == sorted((bytes([k]) + b"k", v) for k in b"agnt" for v in (b"r1", b"r2"))
    write(store_url, 3)
    split(store_url, 2, b"p")
    assert read(changes_since=a, changes_until=b) == first
    assert read(changes_since=b) == sorted((bytes([k]) + b"k", b"r3") for k in b"agnt")
