"""A batch write's driver for tests/spark/test_ingest_failures.py: ``argv[4]`` rows per shard
(keys ``k<shard>-<i>``, values ``a<i>``) appended with ``df.write.format("slatedb")`` into the
table ``argv[2]`` at store URL ``argv[1]`` (created split at k1, k2) as batch ``argv[3]`` of app
``loader``. Run with tests/spark/stream_crash on PYTHONPATH and
``SLATEDB_TEST_KILL_AFTER_SHARD_COMMITS`` set, it is killed right after its first shard commit
(see stream_crash/sitecustomize.py)."""

from __future__ import annotations

import sys

from spark_jobs.datasource import SlateDBDataSource
from spark_jobs.session import SessionOptions, get_session


def main() -> None:
    url, path, version, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    spark = get_session(SessionOptions(master="local[2]", app_name="slatedb-batch-crash-test"))
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(SlateDBDataSource)
    rows = [(f"k{s}-{i}", f"a{i}") for s in range(3) for i in range(n)]
    (
        spark.createDataFrame(rows, "id string, v string")
        .repartition(2)
        .write.format("slatedb")
        .option("url", url)
        .option("path", path)
        .option("key", "id")
        .option("value", "v")
        .option("split_points", "k1,k2")
        .option("app_id", "loader")
        .option("batch_version", version)
        .mode("append")
        .save()
    )
    print("write done", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
