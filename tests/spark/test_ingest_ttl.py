"""TTLs in Spark ingest (issue 38, item 1: "a TTL column in put_arrow and in Spark ingest
(``option("ttl_column", ...)`` or a fixed ``ttl``)"): ``spark_jobs.ingest.ingest(ttl_column=,
ttl=)`` and ``format("slatedb")`` with ``option("ttl_column")`` / ``option("ttl")`` store each
put's ``expire_ts`` (staging time + the row's TTL, else the fixed one); SlateDB 0.17 reads the
same expiry back with ``get_key_value``. Before, the options were unknown (the data source refused
them, ``ingest`` had no such arguments) and no ingested row could expire."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from slatedb_core import Table, open_store
from slatedb_core.errors import InvalidArgument
from slatedb_core.lsm.row_model import now_ms
from spark_jobs.datasource import SlateDBDataSource
from spark_jobs.ingest import ingest
from tests.interop.oracle import Oracle, settings

pytestmark = [pytest.mark.spark, pytest.mark.slatedb]

HOUR = 3_600_000
ROWS = [(f"k{i:03d}", f"v{i}", None if i % 3 == 0 else (i + 1) * HOUR) for i in range(30)]
"""(key, value, ttl ms): every third row without a TTL of its own (it takes the fixed one)."""


def _expected(i: int) -> int:
    ttl = ROWS[i][2]
    return 100 * HOUR if ttl is None else ttl


def _check(oracle: Oracle, db_paths: list[str], before: int, after: int) -> None:
    """SlateDB reads every row with the expiry its TTL gives."""
    found = 0
    for path in db_paths:
        w = oracle.open_db(path, settings(compactor=False))
        for i, (key, value, _) in enumerate(ROWS):
            kv = oracle.run(w.db.get_key_value(key.encode()))
            if kv is None:
                continue
            found += 1
            assert kv.value == value.encode()
            ttl = _expected(i)
            assert kv.expire_ts is not None and before + ttl <= kv.expire_ts <= after + ttl, key
        w.shutdown()
    assert found == len(ROWS)


def _shards(url: str, table: str) -> list[str]:
    with Table.open(table, open_store(url)) as t:
        return [s.db_path for s in t.shard_map.shards]


def test_ingest_ttl_column_and_fixed_ttl(spark: SparkSession, tmp_path: Path) -> None:
    root = tmp_path / "store"
    url = root.as_uri()
    Table.create("t", open_store(url), split_points=[b"k015"]).close()
    df = spark.createDataFrame(ROWS, "key string, value string, ttl_ms long").repartition(2)
    before = now_ms()
    stats = ingest(df, url, "t", value_column="value", ttl_column="ttl_ms", ttl=100 * HOUR)
    after = now_ms()
    assert stats.rows == len(ROWS)
    oracle = Oracle(root)
    try:
        _check(oracle, _shards(url, "t"), before, after)
    finally:
        oracle.close()


def test_datasource_ttl_options(spark: SparkSession, tmp_path: Path) -> None:
    spark.dataSource.register(SlateDBDataSource)
    root = tmp_path / "store"
    url = root.as_uri()
    df = spark.createDataFrame(ROWS, "key string, value string, ttl_ms long").repartition(2)
    before = now_ms()
    (
        df.write.format("slatedb")
        .option("url", url)
        .option("path", "t")
        .option("key", "key")
        .option("value", "value")
        .option("ttl_column", "ttl_ms")
        .option("ttl", str(100 * HOUR))
        .mode("append")
        .save()
    )
    after = now_ms()
    oracle = Oracle(root)
    try:
        _check(oracle, _shards(url, "t"), before, after)
    finally:
        oracle.close()


def test_bad_ttl_options_are_refused(spark: SparkSession, tmp_path: Path) -> None:
    url = (tmp_path / "store").as_uri()
    Table.create("t", open_store(url)).close()
    df = spark.createDataFrame(ROWS, "key string, value string, ttl_ms long")
    with pytest.raises(InvalidArgument, match="ttl"):
        ingest(df, url, "t", value_column="value", ttl=-1)
    with pytest.raises(InvalidArgument, match="ttl_column"):
        ingest(df, url, "t", value_column="value", ttl_column="value")
