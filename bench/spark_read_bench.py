"""Spark reads of a sharded table: ``format("slatedb")``, the older ``read_table`` and Spark's own
``spark.read.parquet`` of the same rows, side by side.

    .venv/bin/python bench/spark_read_bench.py                   # 5M rows (16 B keys, 100 B values)
    .venv/bin/python bench/spark_read_bench.py --rows 20000 --rounds 1
    .venv/bin/python bench/spark_read_bench.py --dir /tmp/rb     # keep (or reuse) the data there

The rows are those of bench/spark_ingest_bench.py (keys and values from SHA-2 of the row number,
incompressible and unique), ingested into a table of ``--shards`` shards with
:func:`spark_jobs.ingest.ingest` and written with ``df.write.parquet``, both on the local
filesystem. Queries, each one Spark job timed from the call to its last row on the driver:

* ``full``: ``count(*)`` and ``sum(length(value))`` over every row;
* ``eq``: ``where(key == x)`` for one key in the table;
* ``in``: ``where(key.isin(10 keys))``;
* ``range``: ``where(key >= p and key < p')`` for a 2-byte prefix ``p`` (about rows / 65536 rows).

First, a warm-up: ``eq`` then ``full`` on each reader, each printed: a session's first Python data
source query starts its Python workers (each imports pyarrow and slatedb_core), Parquet's first
pays the JIT. ``floor`` is a Python data source that reads nothing and yields ready-made batches
of the same shape (``full`` only): what any Python data source pays to hand the rows to Spark.
``compacted`` (optional, ``--readers ...,compacted``): ``format("slatedb")`` of a second table
``tc``, the same rows ingested the same way and then compacted on Spark, so each shard is one
sorted run (what the compactor leaves) instead of the eight overlapping L0 SSTs the ingest
writes. Every round runs each query on each reader (slatedb, read_table, parquet) and prints the times
and the ratio to Parquet's; ``--rounds`` rounds, then the best of each. ``read_table`` pushes no
filter (its filters are applied by Spark after a full scan).

``--cpu`` (issue 42, goal 4): also the CPU seconds each query took in this process's children,
read from ``/proc`` before and after it (utime + stime, and the reaped children's): the JVM
(``jvm``) and the Python workers (``py``), each query's own; on a loaded machine CPU time moves
far less than the wall time does.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.spark_ingest_bench import (  # the same rows as the ingest benchmark
    KEY_BYTES,
    VALUE_BYTES,
    generate,
    split_points,
)
from slatedb_core.store.url import open_store
from slatedb_core.table import Table
from spark_jobs.compact import compact_table
from spark_jobs.datasource import SlateDBDataSource
from spark_jobs.ingest import ingest
from spark_jobs.read import read_table
from spark_jobs.read_filters import prefix_end
from spark_jobs.session import SessionOptions, get_session

QUERIES = ("full", "eq", "in", "range")
READERS = ("slatedb", "read_table", "parquet", "floor")
OPTIONAL_READERS = ("compacted",)


class FloorReader(DataSourceReader):
    """Yields ready-made batches of the table's shape (16 B keys, 100 B values, 65536 rows):
    what any Python data source pays to hand ``rows`` rows to Spark, with no reading at all."""

    def __init__(self, rows: int, parts: int) -> None:
        self.rows, self.parts = rows, parts

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(i) for i in range(self.parts)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        n, size = self.rows // self.parts + (partition.value < self.rows % self.parts), 65536
        data = pa.py_buffer(os.urandom((KEY_BYTES + VALUE_BYTES) * size))
        cols = [
            pa.BinaryArray.from_buffers(
                pa.binary(),
                size,
                [
                    None,
                    pa.array(np.arange(0, w * size + 1, w, dtype=np.int32)).buffers()[1],
                    data.slice(off, w * size),
                ],
            )
            for off, w in ((0, KEY_BYTES), (KEY_BYTES * size, VALUE_BYTES))
        ]
        batch = pa.record_batch(cols, ["key", "value"])
        for start in range(0, n, size):
            yield batch.slice(0, min(size, n - start))


class FloorSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "python_floor"

    def schema(self) -> str:
        return "key binary, value binary"

    def reader(self, schema: StructType) -> DataSourceReader:
        return FloorReader(int(self.options["rows"]), int(self.options["partitions"]))


def key_of(i: int) -> bytes:
    """The key generate() gives row ``i``."""
    return hashlib.sha256(str(i).encode()).digest()[:KEY_BYTES]


def build(spark: SparkSession, root: Path, rows: int, shards: int, partitions: int) -> None:
    """The table (``root/store``, table ``t``) and the Parquet copy (``root/parquet``)."""
    if (root / "done").exists():
        print(f"reusing the data in {root}")
        return
    shutil.rmtree(root / "store", ignore_errors=True)
    shutil.rmtree(root / "parquet", ignore_errors=True)
    df = generate(spark, rows, partitions).persist(StorageLevel.MEMORY_AND_DISK)
    assert df.count() == rows
    started = time.perf_counter()
    df.write.parquet(str(root / "parquet"))
    print(f"parquet written in {time.perf_counter() - started:.1f}s")
    url = (root / "store").as_uri()
    Table.create("t", open_store(url), split_points=split_points(shards)).close()
    started = time.perf_counter()
    stats = ingest(df, url, "t", value_column="value")
    assert stats.rows == rows, stats.rows
    print(f"ingested in {time.perf_counter() - started:.1f}s: {stats.summary()}")
    df.unpersist()
    (root / "done").write_text(f"{rows} {shards}\n")


def build_compacted(
    spark: SparkSession, root: Path, rows: int, shards: int, partitions: int
) -> None:
    """Table ``tc`` beside ``t``: the same ingest, then every shard compacted on Spark
    (:func:`spark_jobs.compact.compact_table`), as the table stands once the compactor (or the
    Dagster compaction schedule) has run: a sorted run per shard instead of eight L0 SSTs."""
    if (root / "compacted-done").exists():
        return
    url = (root / "store").as_uri()
    shutil.rmtree(root / "store" / "tc", ignore_errors=True)  # an interrupted earlier build
    Table.create("tc", open_store(url), split_points=split_points(shards)).close()
    df = generate(spark, rows, partitions)
    started = time.perf_counter()
    stats = ingest(df, url, "tc", value_column="value")
    assert stats.rows == rows, stats.rows
    compact_table(spark, url, "tc")
    print(f"ingested and compacted in {time.perf_counter() - started:.1f}s")
    (root / "compacted-done").write_text(f"{rows} {shards}\n")


def frames(
    spark: SparkSession, root: Path, rows: int, shards: int
) -> dict[str, Callable[[], DataFrame]]:
    url = (root / "store").as_uri()
    return {
        "floor": lambda: (
            spark.read.format("python_floor")
            .option("rows", rows)
            .option("partitions", shards)
            .load()
        ),
        "slatedb": lambda: (
            spark.read.format("slatedb").option("url", url).option("path", "t").load()
        ),
        "compacted": lambda: (
            spark.read.format("slatedb").option("url", url).option("path", "tc").load()
        ),
        "read_table": lambda: read_table(spark, url, "t"),
        "parquet": lambda: spark.read.parquet(str(root / "parquet")),
    }


def run_query(df: DataFrame, query: str, rows: int) -> int:
    """Run ``query`` on ``df``; the number of rows it found (checked by the caller)."""
    key = F.col("key")
    if query == "full":
        r = df.agg(F.count(F.lit(1)).alias("n"), F.sum(F.length("value")).alias("b")).collect()
        return int(r[0]["n"])
    if query == "eq":
        return len(df.where(key == F.lit(key_of(rows // 2))).collect())
    if query == "in":
        return len(df.where(key.isin([key_of(i * (rows // 10)) for i in range(10)])).collect())
    p = key_of(0)[:2]
    end = prefix_end(p)
    assert end is not None
    return len(df.where((key >= F.lit(p)) & (key < F.lit(end))).collect())


def _tree_cpu() -> tuple[float, float]:
    """CPU seconds so far of this process's descendants: (the JVM's, the Python workers')."""
    parent: dict[int, int] = {}
    stats: dict[int, tuple[str, float]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            raw = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        comm, rest = raw[raw.index("(") + 1 : raw.rindex(")")], raw[raw.rindex(")") + 2 :].split()
        parent[int(d)] = int(rest[1])
        stats[int(d)] = (comm, sum(int(x) for x in rest[11:15]) / tick)
    me, jvm, py = os.getpid(), 0.0, 0.0
    for pid, (comm, cpu) in stats.items():
        p = parent.get(pid, 0)
        while p not in (0, 1, me):
            p = parent.get(p, 0)
        if p == me:
            if comm == "java":
                jvm += cpu
            elif comm.startswith("python"):
                py += cpu
    return jvm, py


def _line(query: str, took: dict[str, float], readers: list[str]) -> str:
    line = f"{query:<8}" + "".join(
        f"{'-':>14}" if math.isnan(took[r]) else f"{took[r]:>13.2f}s" for r in readers
    )
    if "parquet" in took:
        line += "".join(
            f"{'-':>16}" if math.isnan(took[r]) else f"{took[r] / took['parquet']:>15.2f}x"
            for r in readers
            if r != "parquet"
        )
    return line


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=5_000_000)
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--partitions", type=int, default=8, help="partitions of the generated rows")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--driver-memory", default="6g")
    p.add_argument("--dir", default=None, help="keep the data here (reused when complete)")
    p.add_argument("--queries", default=",".join(QUERIES))
    p.add_argument("--cpu", action="store_true", help="print each query's JVM and Python CPU")
    p.add_argument(
        "--readers", default=",".join(READERS), help=f"of {', '.join(READERS + OPTIONAL_READERS)}"
    )
    args = p.parse_args()
    spark = get_session(
        SessionOptions(
            master=args.master,
            app_name="spark-read-bench",
            shuffle_partitions=args.shards,
            conf={
                "spark.driver.memory": args.driver_memory,
                "spark.sql.python.filterPushdown.enabled": "true",
            },
        )
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(SlateDBDataSource)
    spark.dataSource.register(FloorSource)
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="spark-read-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    queries = args.queries.split(",")
    readers = args.readers.split(",")
    try:
        build(spark, root, args.rows, args.shards, args.partitions)
        if "compacted" in readers:
            build_compacted(spark, root, args.rows, args.shards, args.partitions)
        make = frames(spark, root, args.rows, args.shards)
        for r in (r for r in readers if r != "floor"):  # first queries start workers, JIT
            for q in ("eq", "full"):
                started = time.perf_counter()
                run_query(make[r](), q, args.rows)
                print(f"warm-up ({r}, {q}): {time.perf_counter() - started:.2f}s")
        expected: dict[str, int] = {}
        best: dict[tuple[str, str], float] = {}
        for rnd in range(args.rounds):
            print(f"-- round {rnd + 1} of {args.rounds}")
            print(
                f"{'query':<8}"
                + "".join(f"{r:>14}" for r in readers)
                + "".join(f"{r + '/pq':>16}" for r in readers if r != "parquet")
            )
            for q in queries:
                took: dict[str, float] = {}
                cpu_line: list[str] = []
                for r in readers:
                    if r == "floor" and q != "full":
                        took[r] = best[q, r] = math.nan
                        continue
                    cpu0 = _tree_cpu() if args.cpu else (0.0, 0.0)
                    started = time.perf_counter()
                    n = run_query(make[r](), q, args.rows)
                    took[r] = time.perf_counter() - started
                    if args.cpu:
                        jvm, py = (b - a for a, b in zip(cpu0, _tree_cpu(), strict=True))
                        cpu_line.append(f"{r} py {py:.2f}s jvm {jvm:.2f}s")
                    if r != "floor" and expected.setdefault(q, n) != n:
                        raise AssertionError(f"{r} found {n} rows for {q}, not {expected[q]}")
                    best[q, r] = min(best.get((q, r), took[r]), took[r])
                print(_line(q, took, readers))
                if cpu_line:
                    print(
                        f"  cpu {q}: " + ", ".join(cpu_line) + f" (load {os.getloadavg()[0]:.1f})"
                    )
        print(f"best of {args.rounds} (rows found: {expected})")
        for q in queries:
            print(_line(q, {r: best[q, r] for r in readers}, readers))
    finally:
        spark.stop()
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
