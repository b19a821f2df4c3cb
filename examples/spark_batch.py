"""Spark batch write and read of a table with the ``format("slatedb")`` data source.

Run it with the project's interpreter (no need to activate the venv)::

    .venv/bin/python examples/spark_batch.py          # Spark local[2], a temporary directory

It writes 1,000 orders into a new 3-shard table, upserts a few again (exactly once per
``batch_version``), reads the table back with a key filter pushed into the scan, and reads a
named snapshot taken before the upsert. About 20 s on 2 cores, most of it Spark starting.
Spark's Python workers are separate processes: the store must be a directory or S3, never
``memory://`` (each process would see its own empty memory store).
"""

from __future__ import annotations

import argparse
import tempfile
from datetime import timedelta
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import slatedb_core as sc
from spark_jobs.datasource import SlateDBDataSource


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", help="store directory (default: a temporary one, deleted after)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="slatedb-spark-") as tmp:
        url = Path(args.dir or tmp).resolve().as_uri()  # file:///...
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("slatedb-example-batch")
            .config("spark.driver.bindAddress", "127.0.0.1")  # listen on loopback only
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.ui.enabled", "false")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        try:
            run(spark, url)
        finally:
            spark.stop()
    print("spark_batch: done")


def run(spark: SparkSession, url: str) -> None:
    # Registering the data source also points Spark's Python workers at this interpreter
    # (the one that has the package), so the venv need not be activated.
    spark.dataSource.register(SlateDBDataSource)

    orders = spark.range(1000).select(
        F.format_string("order-%04d", "id").alias("order_id"),
        (F.col("id") * 10).alias("amount"),
        F.lit("new").alias("status"),
    )
    (
        orders.write.format("slatedb")
        .option("url", url)
        .option("path", "orders")
        .option("key", "order_id")  # the other columns become the value, JSON per row
        .option("split_points", "order-0300,order-0600")  # 3 shards; used when creating
        .option("app_id", "orders-loader")
        .option("batch_version", 1)  # a retry of batch 1 writes nothing twice
        .mode("append")  # upsert by key
        .save()
    )
    print(f"wrote {orders.count()} orders to 'orders' in {url}")

    # A named snapshot of every shard (the engine API), read below by name.
    with sc.Table.open("orders", sc.open_store(url)) as table:
        table.snapshot(timedelta(minutes=10), name="before-upsert")

    updates = orders.where("amount < 30").withColumn("status", F.lit("shipped"))
    (
        updates.write.format("slatedb")
        .option("url", url)
        .option("path", "orders")
        .option("key", "order_id")
        .option("app_id", "orders-loader")
        .option("batch_version", 2)
        .mode("append")
        .save()
    )
    print(f"upserted {updates.count()} orders (batch_version 2)")

    latest = (
        spark.read.format("slatedb")
        .option("url", url)
        .option("path", "orders")
        .option("key_type", "string")  # keys as text (binary by default)
        .load()  # a snapshot taken when the query is planned
    )
    print("rows in the table:", latest.count())
    print("the first three, latest state (key filter pushed into the scan):")
    latest.where("key < 'order-0003'").orderBy("key").show(truncate=False)

    before = (
        spark.read.format("slatedb")
        .option("url", url)
        .option("path", "orders")
        .option("checkpoint", "before-upsert")  # the named snapshot
        .option("key_type", "string")
        .load()
    )
    print("the same keys in snapshot 'before-upsert':")
    before.where("key < 'order-0003'").orderBy("key").show(truncate=False)


if __name__ == "__main__":
    main()
