"""A stream started with ``split_points`` keeps writing after maintenance splits its table
(issue 37, known problem 7f: PySpark plans every micro-batch's write again, and the plan
refused the option once the table's split points were no longer the ones given, so every
micro-batch after a split failed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.types import StringType, StructField, StructType

from slatedb_core import Table, open_store
from slatedb_core.errors import InvalidArgument
from spark_jobs.datasource import SlateDBDataSource
from spark_jobs.datasource_options import WriteOptions
from spark_jobs.datasource_write import plan_write

pytestmark = pytest.mark.spark

TABLE = "events"


def put(directory: Path, n: int, rows: dict[str, str]) -> None:
    """One file of the stream's input, appearing whole (written aside, then renamed)."""
    tmp = directory / f".b{n}.tmp"
    tmp.write_text("".join(json.dumps({"k": k, "v": v}) + "\n" for k, v in rows.items()))
    tmp.rename(directory / f"b{n}.json")


def contents(url: str) -> dict[bytes, bytes]:
    with Table.open(TABLE, open_store(url)) as t:
        return dict(t.scan())


def test_a_stream_with_split_points_writes_after_a_split_between_micro_batches(
    spark: SparkSession, tmp_path: Path
) -> None:
    spark.dataSource.register(SlateDBDataSource)
    url = (tmp_path / "store").as_uri()
    src = tmp_path / "in"
    src.mkdir()
    df = (
        spark.readStream.schema("k string, v string").option("maxFilesPerTrigger", 1).json(str(src))
    )
    put(src, 0, {"a": "0", "x": "0"})
    q: StreamingQuery = (
        df.writeStream.format("slatedb")
        .option("url", url)
        .option("path", TABLE)
        .option("key", "k")
        .option("value", "v")
        .option("split_points", "m")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        q.processAllAvailable()
        assert contents(url) == {b"a": b"0", b"x": b"0"}
        with Table.open(TABLE, open_store(url)) as t:  # maintenance, between two batches
            assert t.shard_map.split_points == (b"m",)
            t.split(1, at=b"t")
        put(src, 1, {"b": "1", "y": "1", "z": "1"})
        q.processAllAvailable()
        assert q.exception() is None
    finally:
        q.stop()
    assert contents(url) == {b"a": b"0", b"x": b"0", b"b": b"1", b"y": b"1", b"z": b"1"}


def test_a_batch_write_into_a_table_of_other_split_points_is_still_refused(
    tmp_path: Path,
) -> None:
    """The rule for a batch write is unchanged (docs/spark.md): the option is refused on a
    table that exists with other split points."""
    url = (tmp_path / "store").as_uri()
    Table.create(TABLE, open_store(url), [b"m", b"t"]).close()
    schema = StructType([StructField("k", StringType()), StructField("v", StringType())])
    opts = {"url": url, "path": TABLE, "key": "k", "value": "v", "split_points": "m"}
    with pytest.raises(InvalidArgument, match="option 'split_points'"):
        plan_write(WriteOptions.parse(opts, schema, False))
    plan_write(WriteOptions.parse(opts, schema, False, stream=True))  # a stream: created it
