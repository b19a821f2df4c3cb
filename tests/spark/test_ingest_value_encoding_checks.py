"""Adversarial review of commit 0044844 (``spark_jobs.ingest.ingest`` checks and records the
value encoding before planning, spark_jobs/value_columns.py). Each test states the guarantee it
checks; they held unless the docstring names a fix."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from slatedb_core import Table, open_store
from slatedb_core.table.ingest import SKIPPED
from spark_jobs.datasource import SlateDBDataSource
from spark_jobs.ingest import ingest

pytestmark = pytest.mark.spark

ROWS = [("k1", 10, "red"), ("k2", 20, None), ("k3", 30, "blue")]


@pytest.fixture(scope="module", autouse=True)
def registered(spark: SparkSession) -> None:
    spark.dataSource.register(SlateDBDataSource)


def test_an_exactly_once_rerun_after_an_overwrite_that_changed_the_values_is_a_no_op(
    spark: SparkSession, store_url: str
) -> None:
    """Batch 1 of app "a" (json-encoded columns) is applied; an overwrite then replaces the
    table with plain values, carrying the app's record into every new shard (docs/overwrite.md,
    "Exactly-once": a re-run of the batch after the overwrite is a no-op). The re-run raised
    InvalidArgument ("holds plain values") because 0044844 checks the value encoding before the
    exactly-once decision; an orchestrator retrying the batch failed for ever. Fix: the batch is
    decided first (every shard SKIPPED, nothing checked or recorded), then the encoding."""
    store = open_store(store_url)
    Table.create("t", store, [b"k2"]).close()
    df = spark.createDataFrame(ROWS, "id string, qty int, colour string")
    ingest(df, store_url, "t", key_column="id", value_format="json", app_id="a", batch_version=1)
    with Table.open("t", store) as t:
        t.overwrite([pa.record_batch({"key": pa.array([b"k7"]), "value": pa.array([b"plain"])})])
    again = ingest(
        df, store_url, "t", key_column="id", value_format="json", app_id="a", batch_version=1
    )
    assert {s.status for s in again.shards} == {SKIPPED}
    with Table.open("t", store) as t:
        assert dict(t.scan()) == {b"k7": b"plain"}
        assert t.value_encoding is None


def test_an_exactly_once_append_rerun_after_an_overwrite_that_changed_the_values_is_a_no_op(
    spark: SparkSession, store_url: str
) -> None:
    """The same through format("slatedb"): its append checked the encoding before deciding
    that the batch is applied in every shard (InvalidArgument: "holds plain values"). Fix: the
    decision first, as for ingest()."""
    store = open_store(store_url)
    df = spark.createDataFrame(ROWS, "id string, qty int, colour string")

    def append() -> None:
        (
            df.write.format("slatedb")
            .option("url", store_url)
            .option("path", "w")
            .option("key", "id")
            .option("app_id", "a")
            .option("batch_version", "1")
            .mode("append")
            .save()
        )

    append()
    with Table.open("w", store) as t:
        assert t.value_encoding is not None
        t.overwrite([pa.record_batch({"key": pa.array([b"k7"]), "value": pa.array([b"plain"])})])
    append()
    with Table.open("w", store) as t:
        assert dict(t.scan()) == {b"k7": b"plain"}
        assert t.value_encoding is None
