"""A Spark ingest or read task's Python worker stays within ``task_memory_bytes`` whatever the rows
of its task (issue 42, goal 3). Before, a stage-1 task sorted its whole input partition at once (runs of
1 GiB of input), so its worker grew ~360 bytes per row: 583 MiB at 1.25M rows per task
(bench/spark_memory_bench.py); this test's 400k-row task grew ~180 MiB against a 64 MiB setting.

Real PySpark; the worker's peak RSS is read from /proc (:class:`spark_jobs.worker_rss.WorkerPeak`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, StructField, StructType

from slatedb_core import Table, open_store
from slatedb_core.errors import InvalidArgument
from spark_jobs.datasource import SlateDBDataSource
from spark_jobs.datasource_options import WriteOptions
from spark_jobs.datasource_read import ReadOptions
from spark_jobs.ingest import ingest
from spark_jobs.ingest import main as ingest_main
from spark_jobs.worker_rss import WorkerPeak
from spark_jobs.write_tasks import RUN_MEMORY_FACTOR

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
]

MiB = 1 << 20
ROWS = 400_000
BOUND = 64 * MiB


def rows(spark: SparkSession, n: int) -> DataFrame:
    """``n`` rows in ONE partition (one stage-1 task): 16-byte keys, 100-byte values."""
    h = F.sha2(F.col("id").cast("string"), 512)
    return spark.range(0, n, numPartitions=1).select(
        F.unhex(F.substring(F.sha2(F.col("id").cast("string"), 256), 1, 32)).alias("key"),
        F.unhex(F.concat(h, F.substring(h, 1, 72))).alias("value"),
    )


@pytest.mark.slow  # 400k rows through a Spark task: 7-46 s (issue 42, goal 3)
def test_an_ingest_task_stays_within_its_memory_setting(
    spark: SparkSession, store_url: str
) -> None:
    Table.create("t", open_store(store_url)).close()
    df = rows(spark, ROWS)
    with WorkerPeak() as peak:
        stats = ingest(df, store_url, "t", value_column="value", task_memory_bytes=BOUND)
    assert stats.rows == ROWS
    assert peak.peaks, "no Python worker was seen"
    grew = peak.growth_bytes
    assert grew <= BOUND, (
        f"a worker grew {grew / MiB:.0f} MiB, over the {BOUND / MiB:.0f} MiB bound"
    )
    assert stats.ssts > 1  # staged in several runs: that is how the bound holds


@pytest.mark.slow  # 400k rows through a Spark task: 7-46 s (issue 42, goal 3)
def test_a_read_task_stays_within_its_memory_setting(spark: SparkSession, store_url: str) -> None:
    """Before, a task scanned its partition in one go: each of the shard's L0 SSTs fetched
    ahead up to 8 MiB, held raw and decoded: this read of 5 L0 SSTs grew its worker 147 MiB.
    Now the scan's sources share a read budget of the setting / READ_MEMORY_FACTOR."""
    spark.dataSource.register(SlateDBDataSource)
    Table.create("t", open_store(store_url)).close()
    stats = ingest(rows(spark, ROWS), store_url, "t", value_column="value", run_bytes=10 * MiB)
    assert stats.ssts >= 4  # overlapping L0 SSTs, each over the whole key range
    reader = (
        spark.read.format("slatedb")
        .option("url", store_url)
        .option("path", "t")
        .option("partition_bytes", str(1 << 40))  # one task reads it all
        .option("batch_size", "8192")
        .option("task_memory_bytes", str(BOUND))
    )
    with WorkerPeak() as peak:
        got = reader.load().agg(F.count(F.lit(1)).alias("n")).collect()[0]["n"]
    assert got == ROWS
    grew = peak.growth_bytes
    assert grew <= BOUND, (
        f"a worker grew {grew / MiB:.0f} MiB, over the {BOUND / MiB:.0f} MiB bound"
    )


def test_the_setting_is_checked(spark: SparkSession, store_url: str) -> None:
    Table.create("t", open_store(store_url)).close()
    with pytest.raises(InvalidArgument, match="task_memory_bytes"):
        ingest(rows(spark, 1), store_url, "t", value_column="value", task_memory_bytes=1024)
    schema = StructType([StructField("k", BinaryType()), StructField("v", BinaryType())])
    base = {"url": store_url, "path": "t", "key": "k", "value": "v"}
    for bad in ("1024", "-1", "1.5"):
        with pytest.raises(InvalidArgument, match="task_memory_bytes"):
            WriteOptions.parse({**base, "task_memory_bytes": bad}, schema, False)
    opts = WriteOptions.parse({**base, "task_memory_bytes": str(BOUND)}, schema, False)
    assert opts.run_bytes == BOUND // RUN_MEMORY_FACTOR
    for bad in ("1024", "-1", "x"):
        with pytest.raises(InvalidArgument, match="task_memory_bytes"):
            ReadOptions.parse({"url": store_url, "path": "t", "task_memory_bytes": bad})
    assert ReadOptions.parse({"url": store_url, "path": "t"}).read_budget > 0


def test_the_cli_checks_the_setting_before_spark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = (tmp_path / "lake").as_uri()
    Table.create("t", open_store(url)).close()
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"key": ["a"], "v": ["1"]}), src)
    args = ["--input", str(src), "--url", url, "--path", "t", "--value-column", "v"]
    assert ingest_main([*args, "--task-memory-bytes", "1024"]) == 1
    assert "error: InvalidArgument: --task-memory-bytes must be" in capsys.readouterr().err
