"""Parquet input read through the object store (spark_jobs/parquet_input.py) on a real S3 server:
the rows Spark sees are exactly the files' rows, the schema comes from the footer, and bad input
fails on the driver with a typed error before any task runs."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from slatedb_core import Table, open_store
from slatedb_core.errors import InvalidArgument
from spark_jobs.ingest import main as ingest_main
from spark_jobs.parquet_input import is_store_url, parquet_objects, read_input, read_schema

pytestmark = [pytest.mark.spark, pytest.mark.s3]


def _parquet(table: pa.Table, **kw: object) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, **kw)  # type: ignore[arg-type]
    return buf.getvalue()


def _rows(start: int, n: int) -> pa.Table:
    return pa.table(
        {
            "key": [f"k{i:06d}" for i in range(start, start + n)],
            "payload": [f"v{i}".encode() * 3 for i in range(start, start + n)],
            "amount": pa.array([i * 0.5 for i in range(start, start + n)], pa.float64()),
        }
    )


def _with_prefix(url: str, prefix: str) -> str:
    base, _, query = url.partition("?")
    return f"{base.rstrip('/')}/{prefix}?{query}"


def test_every_row_of_every_object_once(spark: SparkSession, s3_url: str) -> None:
    store = open_store(s3_url)
    tables = [_rows(i * 1000, 1000) for i in range(3)]
    for i, t in enumerate(tables):
        # small row groups: one object gives several batches
        store.put(f"input/orders/part-{i}.parquet", _parquet(t, row_group_size=300))
    store.put("input/orders/_SUCCESS", b"")
    store.put("input/orders/notes.txt", b"not parquet")
    store.put("input/other/part-9.parquet", _parquet(_rows(90_000, 5)))
    url = _with_prefix(s3_url, "input/orders")
    assert is_store_url(url) and not is_store_url("s3a://b/x") and not is_store_url("/tmp/x")

    df = read_input(spark, url)
    assert df.rdd.getNumPartitions() == 3
    got = sorted((r.key, bytes(r.payload), r.amount) for r in df.collect())
    want = sorted(
        (k, v, a)
        for t in tables
        for k, v, a in zip(
            t["key"].to_pylist(), t["payload"].to_pylist(), t["amount"].to_pylist(), strict=True
        )
    )
    assert got == want
    assert [f.name for f in df.schema.fields] == ["key", "payload", "amount"]


def test_schema_from_a_footer_larger_than_the_first_fetch(s3_url: str) -> None:
    store = open_store(s3_url)
    wide = pa.table({f"c{i:04d}": [i] for i in range(3000)})  # a footer well over 64 KiB
    data = _parquet(wide)
    store.put("wide.parquet", data)
    ((path, size),) = parquet_objects(store, "wide.parquet")
    assert read_schema(store, path, size) == wide.schema


def test_bad_input_is_refused_on_the_driver(spark: SparkSession, s3_url: str) -> None:
    store = open_store(s3_url)
    store.put("bad/part-0.parquet", b"this is not parquet at all")
    store.put("tiny/part-0.parquet", b"PAR1")
    with pytest.raises(InvalidArgument, match=r"no \.parquet objects"):
        read_input(spark, _with_prefix(s3_url, "empty"))
    with pytest.raises(InvalidArgument, match="not a Parquet file"):
        read_input(spark, _with_prefix(s3_url, "bad"))
    with pytest.raises(InvalidArgument, match="not a Parquet file"):
        read_input(spark, _with_prefix(s3_url, "tiny"))
    with pytest.raises(InvalidArgument, match=r"expected a \.parquet or \.csv"):
        read_input(spark, "/tmp/somewhere.json")


@pytest.mark.slow  # a whole ingest job; the cluster test runs the same through spark-submit
def test_ingest_command_line_reads_s3_input(spark: SparkSession, s3_url: str) -> None:
    """``--input s3://...`` end to end through the job's own entry point."""
    store = open_store(s3_url)
    for i in range(2):
        store.put(f"in/part-{i}.parquet", _parquet(_rows(i * 500, 500)))
    rc = ingest_main(
        [
            "--input",
            _with_prefix(s3_url, "in"),
            "--url",
            s3_url,
            "--path",
            "orders",
            "--key-column",
            "key",
            "--value-column",
            "payload",
            "--create",
            "k000500",
        ]
    )
    assert rc == 0
    with Table.open("orders", open_store(s3_url)) as table:
        rows = dict(table.scan())
    assert len(rows) == 1000
    assert rows[b"k000007"] == b"v7" * 3


def test_millisecond_timestamps_reach_spark(spark: SparkSession, s3_url: str) -> None:
    """Parquet often stores timestamp[ms]; Spark's Arrow hand-over takes microseconds only."""
    store = open_store(s3_url)
    ts = pa.array([0, 1_700_000_000_123], pa.timestamp("ms", tz="UTC"))
    store.put("ts/part-0.parquet", _parquet(pa.table({"key": ["a", "b"], "ts": ts})))
    rows = read_input(spark, _with_prefix(s3_url, "ts")).orderBy("key").collect()
    assert [r.ts.timestamp() for r in rows] == [0.0, 1_700_000_000.123]
