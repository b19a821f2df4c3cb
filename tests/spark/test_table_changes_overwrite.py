"""``spark.readStream.format("slatedb")`` on a sharded table overwritten between two
micro-batches (issue 43, items 2 and 3): the Delta sink ends with exactly the table's rows, each
key's changes once and in order (its old values, a delete, the overwrite's value, the writes
after it), also when Spark runs the batch across the overwrite again after a restart, once the
new shards flushed and compacted (the sink checks it reads the same rows). The table feed
bootstrapped an overwrite's new shard (a micro-batch never does): ChangesCollected.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from pyspark.sql import DataFrame, SparkSession

from slatedb_core import Table, open_store
from slatedb_core.compactor.compactor import Compactor
from slatedb_core.options import CompactorOptions
from spark_jobs.datasource import SlateDBDataSource
from tests.spark.stream_log_steps import numbered, unlink_log_entry
from tests.table.conftest import OPTS, fill

pytestmark = [pytest.mark.spark]

TABLE = "orders"
APP = "overwritten-table-to-delta"
COLUMNS = ("key", "value", "op", "seq")


@pytest.fixture(scope="module")
def spark(spark: SparkSession) -> SparkSession:
    spark.dataSource.register(SlateDBDataSource)
    return spark


def delta_sink(target: str, rerun: list[int]) -> Callable[[DataFrame, int], None]:
    """Each micro-batch appended once (Delta's idempotent app transaction), with its batch id
    and each row's position; a batch run again (its id goes to ``rerun``) must read the rows it
    read the first time."""

    def apply(df: DataFrame, batch_id: int) -> None:
        rows = df.toArrow()
        try:
            dt: DeltaTable | None = DeltaTable(target)
        except Exception:  # no table yet
            dt = None
        done = None if dt is None else dt.transaction_version(APP)
        if dt is not None and done is not None and batch_id <= done:
            held = dt.to_pyarrow_table()
            held = held.filter(pc.equal(held["batch_id"], batch_id)).sort_by("pos")
            again = [tuple(r[k] for k in COLUMNS) for r in rows.to_pylist()]
            before = [tuple(r[k] for k in COLUMNS) for r in held.to_pylist()]
            assert again == before, f"batch {batch_id} read again differs"
            rerun.append(batch_id)
            return
        n = rows.num_rows
        rows = rows.append_column("batch_id", pa.array([batch_id] * n, pa.int64()))
        rows = rows.append_column("pos", pa.array(range(n), pa.int64()))
        write_deltalake(
            target,
            rows,
            mode="append",
            commit_properties=CommitProperties(app_transactions=[Transaction(APP, batch_id)]),
        )

    return apply


def run(spark: SparkSession, url: str, target: str, checkpoint: Path, rerun: list[int]) -> None:
    """Run the query until it has read everything there is, then stop it."""
    q = (
        spark.readStream.format("slatedb")
        .option("url", url)
        .option("path", TABLE)
        .option("starting", "earliest")
        .option("batch_rows", "2")
        .load()
        .writeStream.foreachBatch(delta_sink(target, rerun))
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


@pytest.mark.slow  # three Spark streaming queries: 25-50 s
def test_a_table_stream_across_an_overwrite_into_delta(
    spark: SparkSession, store_url: str, tmp_path: Path
) -> None:
    target, checkpoint = str(tmp_path / "delta"), tmp_path / "checkpoint"
    store = open_store(store_url)
    rerun: list[int] = []
    with Table.create(TABLE, store, [b"m"], OPTS) as table:
        fill(table, {k: b"r0" for k in (b"a", b"g", b"n", b"t")})
        run(spark, store_url, target, checkpoint, rerun)
        # between two micro-batches: the table's contents replaced, then written to
        table.overwrite([pa.record_batch({"key": [b"g", b"z"], "value": [b"ow", b"ow"]})])
        fill(table, {b"a": b"r1", b"z": b"r1"})
        run(spark, store_url, target, checkpoint, rerun)
        # Spark lost its record of committing the last batch (the overwrite's); the new
        # shards flushed and compacted since: the restarted query runs it again
        last = numbered(checkpoint / "commits")[-1]
        unlink_log_entry(last)
        fill(table, {b"t": b"r2"}, flush=True)
        for s in table.shards:
            with Compactor(s.db_path, store, CompactorOptions(l0_trigger=1)) as c:
                c.run_once()
        run(spark, store_url, target, checkpoint, rerun)
        table.refresh()
        rows = dict(table.scan())

    got = (
        DeltaTable(target)
        .to_pyarrow_table()
        .sort_by([("batch_id", "ascending"), ("pos", "ascending")])
    )
    per_key: dict[bytes, list[bytes | None]] = {}
    state: dict[bytes, bytes] = {}
    for r in got.to_pylist():
        per_key.setdefault(r["key"], []).append(r["value"])
        if r["op"] == "delete":
            state.pop(r["key"], None)
        else:
            state[r["key"]] = r["value"]
    assert rerun == [int(last.name)]
    again = got.filter(pc.equal(got["batch_id"], int(last.name)))
    assert "delete" in again["op"].to_pylist()  # the batch across the overwrite
    assert state == rows == {b"a": b"r1", b"g": b"ow", b"t": b"r2", b"z": b"r1"}
    assert per_key == {
        b"a": [b"r0", None, b"r1"],
        b"g": [b"r0", None, b"ow"],
        b"n": [b"r0", None],
        b"t": [b"r0", None, b"r2"],
        b"z": [b"ow", b"r1"],
    }
