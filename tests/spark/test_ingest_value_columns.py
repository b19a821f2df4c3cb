"""``spark_jobs.ingest.ingest`` (and ``python -m spark_jobs.ingest --value-format``) records the
columns it encodes into values, as ``format("slatedb")`` does, so a reader of the table gets the
columns back whichever path wrote it; and it refuses to mix plain and encoded values in one
table (spark_jobs/value_columns.py). Before, it wrote encoded values into a table that recorded
nothing: ``spark.read.format("slatedb")`` then served them as opaque bytes."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import SparkSession

from slatedb_core import Table, open_store
from slatedb_core.errors import InvalidArgument
from spark_jobs.datasource import SlateDBDataSource
from spark_jobs.ingest import ingest

pytestmark = pytest.mark.spark

ROWS = [("k1", 10, "red"), ("k2", 20, None), ("k3", 30, "blue")]


@pytest.fixture(scope="module", autouse=True)
def registered(spark: SparkSession) -> None:
    spark.dataSource.register(SlateDBDataSource)


@pytest.mark.parametrize("fmt", ["json", "arrow"])
def test_ingest_of_encoded_columns_records_them_and_reads_back_as_columns(
    spark: SparkSession, store_url: str, fmt: str
) -> None:
    store = open_store(store_url)
    Table.create("t", store, [b"k2"]).close()
    df = spark.createDataFrame(ROWS, "id string, qty int, colour string")
    ingest(df, store_url, "t", key_column="id", value_format=fmt)  # type: ignore[arg-type]
    with Table.open("t", store) as t:
        enc = t.value_encoding
    assert enc is not None and enc.format == fmt
    assert [f["name"] for f in json.loads(enc.schema)["fields"]] == ["qty", "colour"]
    got = (
        spark.read.format("slatedb")
        .option("url", store_url)
        .option("path", "t")
        .load()
        .orderBy("key")
        .collect()
    )
    assert [(r["key"], r["qty"], r["colour"]) for r in got] == [
        (b"k1", 10, "red"),
        (b"k2", 20, None),
        (b"k3", 30, "blue"),
    ]


def test_ingest_refuses_to_mix_plain_and_encoded_values(
    spark: SparkSession, store_url: str
) -> None:
    store = open_store(store_url)
    Table.create("plain", store).close()
    plain = spark.createDataFrame([("k1", b"v1")], "id string, v binary")
    ingest(plain, store_url, "plain", key_column="id", value_column="v")
    cols = spark.createDataFrame(ROWS, "id string, qty int, colour string")
    with pytest.raises(InvalidArgument, match=r"value_column is missing.*plain values"):
        ingest(cols, store_url, "plain", key_column="id", value_format="json")
    with Table.open("plain", store) as t:
        assert dict(t.scan()) == {b"k1": b"v1"}
        assert t.value_encoding is None

    Table.create("cols", store).close()
    ingest(cols, store_url, "cols", key_column="id", value_format="json")
    with pytest.raises(InvalidArgument, match="json-encoded columns"):
        ingest(plain, store_url, "cols", key_column="id", value_column="v")
    other = spark.createDataFrame([("k9", 1.5)], "id string, price double")
    with pytest.raises(InvalidArgument, match="holds json values with columns"):
        ingest(other, store_url, "cols", key_column="id", value_format="json")
    with Table.open("cols", store) as t:
        assert len(list(t.scan())) == 3
