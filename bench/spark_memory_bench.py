"""Peak RSS of a Spark Python worker per task size: the ingest job, ``format("slatedb")`` writes and
full reads, beside Spark's own Parquet write and read of the same rows (issue 42, goal 3).

    .venv/bin/python bench/spark_memory_bench.py                       # 250k and 1.25M rows/task
    .venv/bin/python bench/spark_memory_bench.py --per-task 250000,1250000 --task-memory 268435456

The rows are bench/spark_ingest_bench.py's (16 B keys, 100 B values from SHA-2 of the row number),
``2 x per_task`` of them in 2 input partitions, cached and counted first; the session is
``local[2]`` with ``spark.python.worker.reuse=false``, so the two tasks of each stage run at once,
each in a Python worker forked for it (no memory kept from an earlier task counts). Each table has 2
shards and is read with ``partition_bytes`` large enough that one task reads one whole shard
(``per_task`` rows). Per task size, every phase is timed and its Python workers' peak RSS taken
with :class:`spark_jobs.worker_rss.WorkerPeak` (the kernel's ``VmHWM`` of each worker, reset as
the phase starts; the largest worker's): the figure that must not grow with rows per task.
Parquet's phases run in the JVM only: their worker figure is what the idle workers hold.

``--task-memory B``: passed as ``task_memory_bytes`` to the ingest and the writer (option
``task_memory_bytes``) and to the reader (option ``task_memory_bytes``), where the checkout has
them (omit it for a checkout without the setting). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import inspect
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.spark_ingest_bench import generate, split_points
from slatedb_core.store.url import open_store
from slatedb_core.table import Table
from spark_jobs.datasource import SlateDBDataSource
from spark_jobs.ingest import ingest
from spark_jobs.session import SessionOptions, get_session
from spark_jobs.worker_rss import WorkerPeak

MiB = 1024 * 1024
SHARDS = 2


def measure(what: Callable[[], object]) -> tuple[float, int, int]:
    """(seconds, the largest worker peak RSS, the most a worker grew above its start) of
    ``what()``; bytes."""
    with WorkerPeak() as peak:
        started = time.perf_counter()
        what()
        took = time.perf_counter() - started
    return took, peak.max_bytes, peak.growth_bytes


def full_read(df: DataFrame, rows: int) -> None:
    r = df.agg(F.count(F.lit(1)).alias("n"), F.sum(F.length("value")).alias("b")).collect()
    assert int(r[0]["n"]) == rows, r


def run_size(
    spark: SparkSession, root: Path, per_task: int, task_memory: int | None
) -> dict[str, tuple[float, int, int]]:
    rows = 2 * per_task
    df = generate(spark, rows, 2).persist(StorageLevel.MEMORY_AND_DISK)
    assert df.count() == rows
    url = (root / "store").as_uri()
    store = open_store(url)
    out: dict[str, tuple[float, int, int]] = {}
    pq_path = str(root / "parquet")
    out["parquet write"] = measure(lambda: df.write.parquet(pq_path))
    Table.create("t", store, split_points=split_points(SHARDS)).close()
    extra: dict[str, object] = {}
    if task_memory is not None and "task_memory_bytes" in inspect.signature(ingest).parameters:
        extra["task_memory_bytes"] = task_memory
    stats = []
    out["ingest"] = measure(
        lambda: stats.append(ingest(df, url, "t", value_column="value", **extra))  # type: ignore[arg-type]
    )
    print(f"ingest of {rows:,} rows: {stats[0].ssts} staged SSTs (L0 SSTs added)")
    # the writer creates a one-shard table: its 2 tasks each stage per_task rows all the same
    options = {"url": url, "path": "w", "key": "key", "value": "value"}
    if task_memory is not None:
        options["task_memory_bytes"] = str(task_memory)
    out["write format(slatedb)"] = measure(
        lambda: df.write.format("slatedb").options(**options).mode("append").save()
    )
    out["read parquet"] = measure(lambda: full_read(spark.read.parquet(pq_path), rows))
    read_opts = {"url": url, "path": "t", "partition_bytes": str(1 << 40)}
    if task_memory is not None:
        read_opts["task_memory_bytes"] = str(task_memory)
    out["read format(slatedb)"] = measure(
        lambda: full_read(spark.read.format("slatedb").options(**read_opts).load(), rows)
    )
    df.unpersist()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--per-task", default="250000,1250000", help="rows per task, comma-separated")
    p.add_argument("--task-memory", type=int, default=None, metavar="B")
    p.add_argument("--driver-memory", default="4g")
    p.add_argument("--dir", default=None, help="scratch folder (default: a temporary one)")
    args = p.parse_args()
    sizes = [int(s) for s in args.per_task.split(",")]
    spark = get_session(
        SessionOptions(
            master="local[2]",
            app_name="spark-memory-bench",
            conf={"spark.driver.memory": args.driver_memory, "spark.python.worker.reuse": "false"},
        )
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(SlateDBDataSource)
    base = Path(args.dir or tempfile.mkdtemp(prefix="spark-memory-bench-"))
    results: dict[int, dict[str, tuple[float, int, int]]] = {}
    try:
        # warm-up: start the workers (their first task imports nothing more, see worker_daemon)
        full_read(generate(spark, 1000, 2), 1000)
        for n in sizes:
            root = base / str(n)
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(parents=True)
            results[n] = run_size(spark, root, n, args.task_memory)
            shutil.rmtree(root, ignore_errors=True)
            for phase, (took, peak, grew) in results[n].items():
                print(
                    f"{n:>10,} rows/task  {phase:<22} {took:7.2f}s  worker peak "
                    f"{peak / MiB:5.0f} MiB, {grew / MiB:5.0f} MiB above the idle worker"
                )
    finally:
        spark.stop()
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)
    phases = list(next(iter(results.values())))
    print(f"\ntask memory setting: {args.task_memory}")
    print("per task size: worker peak RSS / growth above the idle worker / rows per second")
    head = "phase".ljust(24) + "".join(f"{n:>24,} rows/task" for n in sizes)
    if len(sizes) >= 2:
        head += "   growth per row"
    print(head)
    for phase in phases:
        line = phase.ljust(24)
        for n in sizes:
            took, peak, grew = results[n][phase]
            line += f"   {peak / MiB:5.0f} / {grew / MiB:5.0f} MiB {2 * n / took / 1e3:6.0f}k r/s"
        if len(sizes) >= 2:
            lo, hi = sizes[0], sizes[-1]
            per_row = (results[hi][phase][2] - results[lo][phase][2]) / (hi - lo)
            line += f"   {per_row:8.1f} B"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
