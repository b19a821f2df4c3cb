"""A Spark Structured Streaming query writing into a table, a few micro-batches, then stopped
and restarted from its checkpoint.

Run it with the project's interpreter (no need to activate the venv)::

    .venv/bin/python examples/spark_stream.py         # Spark local[2], a temporary directory

Events arrive as JSON files in an input folder. The query reads one file per micro-batch
(``maxFilesPerTrigger``) and upserts its rows by ``id`` into the table ``events``; each
micro-batch is committed exactly once (its batch id is the version, the query id the app).
The query runs until the input is drained (``trigger(availableNow=True)``), stops, and a second
run from the same ``checkpointLocation`` picks up only the file that arrived in between.
About 25 s on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from pyspark.sql import SparkSession

import slatedb_core as sc
from spark_jobs.datasource import SlateDBDataSource


def write_events(folder: Path, name: str, first: int, count: int) -> None:
    """One input file of ``count`` events (JSON lines), ids ``evt-<first>`` onwards."""
    lines = [
        json.dumps({"id": f"evt-{i:04d}", "kind": "click" if i % 2 else "view", "n": i})
        for i in range(first, first + count)
    ]
    (folder / name).write_text("\n".join(lines) + "\n")


def run_until_drained(spark: SparkSession, inbox: Path, url: str, checkpoints: Path) -> None:
    """Start the query, let it process every file there is, one per micro-batch, then stop."""
    events = (
        spark.readStream.schema("id STRING, kind STRING, n LONG")
        .option("maxFilesPerTrigger", 1)  # one micro-batch per file
        .json(str(inbox))
    )
    query = (
        events.writeStream.format("slatedb")
        .option("url", url)
        .option("path", "events")
        .option("key", "id")  # kind and n become the value (JSON)
        .option("split_points", "evt-0100")  # two shards, used when the table is created
        .option("checkpointLocation", str(checkpoints))  # where Spark keeps the query's progress
        .trigger(availableNow=True)  # process what is there, then stop by itself
        .start()
    )
    query.awaitTermination()
    batches = [p["batchId"] for p in query.recentProgress if p["numInputRows"] > 0]
    print(f"query {query.id}: micro-batches {batches} committed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", help="working directory (default: a temporary one, deleted after)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="slatedb-stream-") as tmp:
        root = Path(args.dir or tmp).resolve()
        inbox, lake, checkpoints = root / "inbox", root / "lake", root / "checkpoints"
        for folder in (inbox, lake):
            folder.mkdir(parents=True, exist_ok=True)
        url = lake.as_uri()  # a directory: Spark's workers are other processes (not memory://)
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("slatedb-example-stream")
            .config("spark.driver.bindAddress", "127.0.0.1")  # listen on loopback only
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        try:
            spark.dataSource.register(SlateDBDataSource)  # also sets the workers' interpreter
            for i in range(3):  # three files: three micro-batches
                write_events(inbox, f"part-{i}.json", first=i * 60, count=60)
            run_until_drained(spark, inbox, url, checkpoints)
            count_table(url)

            # More events arrive while the query is stopped; the restart reads only those.
            write_events(inbox, "part-3.json", first=150, count=60)  # ids 150..209: 30 new
            run_until_drained(spark, inbox, url, checkpoints)
            count_table(url)
        finally:
            spark.stop()
    print("spark_stream: done")


def count_table(url: str) -> None:
    """Read the table back with the engine API: its keys per shard."""
    with sc.Table.open("events", sc.open_store(url)) as table:
        per_shard = [n for _, n in table.count_by_shard()]
        print(f"table 'events': {sum(per_shard)} keys, per shard {per_shard}")
        print("  evt-0150 ->", table.get(b"evt-0150"))


if __name__ == "__main__":
    main()
