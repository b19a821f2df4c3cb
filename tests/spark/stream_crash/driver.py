"""A streaming query's driver for tests/spark/test_datasource_stream.py: JSON files from
``argv[1]`` (one per micro-batch) into the table ``argv[3]`` at store URL ``argv[2]`` through
``writeStream.format("slatedb")``, checkpointed at ``argv[4]``; processes what is there and stops."""

from __future__ import annotations

import sys

from spark_jobs.datasource import SlateDBDataSource
from spark_jobs.session import SessionOptions, get_session


def main() -> None:
    source, url, path, checkpoint = sys.argv[1:5]
    spark = get_session(SessionOptions(master="local[2]", app_name="slatedb-stream-test"))
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(SlateDBDataSource)
    stream = (
        spark.readStream.schema("id string, v string").option("maxFilesPerTrigger", 1).json(source)
    )
    query = (
        stream.writeStream.format("slatedb")
        .option("url", url)
        .option("path", path)
        .option("key", "id")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    print(f"query {query.id} done", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
