"""``format("slatedb")`` refuses a ``memory://`` store on reads and writes, saying why (issue 40,
item 3: the README offered it for Spark; each Spark worker is another process with a store of its
own, so a write landed nowhere a later read could see, and a read found an empty store)."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from spark_jobs.datasource import SlateDBDataSource

pytestmark = pytest.mark.spark


def test_a_memory_store_is_refused_on_write(spark: SparkSession) -> None:
    spark.dataSource.register(SlateDBDataSource)
    df = spark.createDataFrame([("a", b"1")], "k string, v binary")
    writer = (
        df.write.format("slatedb")
        .option("url", "memory://spark-write")
        .option("path", "t")
        .option("key", "k")
        .option("value", "v")
        .mode("append")
    )
    with pytest.raises(Exception, match="memory:// store is private to one process"):
        writer.save()


def test_a_memory_store_is_refused_on_read(spark: SparkSession) -> None:
    spark.dataSource.register(SlateDBDataSource)
    reader = spark.read.format("slatedb").option("url", "memory://spark-read").option("path", "t")
    with pytest.raises(Exception, match="memory:// store is private to one process"):
        reader.load().collect()
