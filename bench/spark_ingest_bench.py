"""Spark ingestion into a sharded table vs Spark's own ``df.write.parquet`` of the same DataFrame.

    .venv/bin/python bench/spark_ingest_bench.py                 # 10M rows (16 B keys, 100 B values)
    .venv/bin/python bench/spark_ingest_bench.py --rows 1000000 --shards 4
    .venv/bin/python bench/spark_ingest_bench.py --profile       # pyinstrument of one writing task
    .venv/bin/python bench/spark_ingest_bench.py --rows 1000000 --shards 4 --repeat 3 \
        --compare-with d5ea00b       # this checkout beside commit d5ea00b (bench/compare_trees.py)

The DataFrame is generated in Spark (keys and values from SHA-2 of the row number, so they are
incompressible and unique), cached and counted first, so both writers start from the same
in-memory rows and neither pays for generating them. Both write to the local filesystem.
The first writer of a session also pays the JIT warm-up and the ingest the Python workers' start;
``--repeat N`` runs N rounds of both and reports every round and the best of each.
Each round also writes the same DataFrame through ``df.write.format("slatedb")`` (the data source
of spark_jobs.datasource, which stages in tasks and commits on the driver) into a new table.
``--floors`` adds, per round, lower bounds on the same DataFrame: reading the cache (``noop``
write), handing every row to Python (``mapInArrow`` that only counts; no design that processes
rows in Python beats it), and the job's stage 1 alone (sorting, encoding and staging the SSTs,
with no shuffle and no commit).
``--profile`` runs both stages' task code (``StageSsts`` then ``CommitShards``) in this process
on one shard's worth of Arrow batches under pyinstrument: all of the ingestion path's Python
time.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from slatedb_core.store.url import open_store
from slatedb_core.table import ShardMap, Table
from slatedb_core.table.ingest import IngestPlan, plan_ingest
from spark_jobs.datasource import SlateDBDataSource
from spark_jobs.ingest import arrow_batches, ingest
from spark_jobs.routing import partition_keys
from spark_jobs.session import SessionOptions, get_session
from spark_jobs.write_tasks import STAGED_DDL, CommitShards, StageSsts

KEY_BYTES, VALUE_BYTES = 16, 100


def generate(spark: SparkSession, rows: int, partitions: int) -> DataFrame:
    h = F.sha2(F.col("id").cast("string"), 512)  # 128 hex digits = 64 bytes
    return spark.range(0, rows, numPartitions=partitions).select(
        F.unhex(F.substring(F.sha2(F.col("id").cast("string"), 256), 1, 2 * KEY_BYTES)).alias(
            "key"
        ),
        F.unhex(F.concat(h, F.substring(h, 1, 2 * (VALUE_BYTES - 64)))).alias("value"),
    )


def split_points(shards: int) -> list[bytes]:
    """Keys are uniform (SHA-256 prefixes): cut the byte space evenly."""
    return [int(i * 65536 / shards).to_bytes(2, "big") for i in range(1, shards)]


def _count_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    n = sum(b.num_rows for b in batches)
    yield pa.record_batch([pa.array([n], pa.int64())], ["n"])


def floors(df: DataFrame, url: str, shard_map: ShardMap, parquet_s: float) -> None:
    """Time the three floors of the module doc on ``df``; each printed with its ratio to
    ``parquet_s``."""
    started = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    noop_s = time.perf_counter() - started
    with arrow_batches(df.sparkSession):
        started = time.perf_counter()
        counted = sum(r.n for r in df.mapInArrow(_count_rows, "n bigint").collect())
        transfer_s = time.perf_counter() - started
        plan = IngestPlan("t", f"floor-{uuid.uuid4().hex}", shard_map)  # stage 1 only
        n = len(shard_map.shards)
        stage = StageSsts(
            plan, "floor", (), False, functools.partial(open_store, url), None, partition_keys(n)
        )
        started = time.perf_counter()
        written = sum(r.bytes for r in df.mapInArrow(stage, STAGED_DDL).collect())
        direct_s = time.perf_counter() - started
    assert counted == df.count()
    for name, took in (
        ("read the cache (noop write)", noop_s),
        ("hand every row to Python (mapInArrow, count)", transfer_s),
        (
            f"stage 1 alone: sort, encode and stage SSTs ({written / 1e6:.0f} MB), no commit",
            direct_s,
        ),
    ):
        print(f"floor: {name}: {took:.1f}s, {took / parquet_s:.2f}x parquet")


def profile_task(rows: int, shards: int) -> None:
    from pyinstrument import Profiler

    tmp = Path(tempfile.mkdtemp(prefix="spark-ingest-profile-"))
    try:
        url = tmp.as_uri()
        store = open_store(url)
        Table.create("t", store, split_points=split_points(shards)).close()
        plan = plan_ingest("t", store, job_id="profile")  # planned seqs: the commit links
        n = rows // shards
        rng = np.random.default_rng(1)
        keys = rng.integers(0, 256, size=(n, KEY_BYTES), dtype=np.uint8)
        keys[:, 0] = 0  # all in shard 0 (the first split point is at least 0x01..)
        karr = pa.array([k.tobytes() for k in keys], pa.binary())
        varr = pa.array(
            [v.tobytes() for v in rng.integers(0, 256, (n, VALUE_BYTES), dtype=np.uint8)],
            pa.binary(),
        )
        batches = [
            pa.record_batch([karr.slice(i, 10000), varr.slice(i, 10000)], ["key", "value"])
            for i in range(0, n, 10000)
        ]
        stage = StageSsts(
            plan, "profile", (), False, lambda: open_store(url), None, tuple(range(shards))
        )
        commit = CommitShards(plan, "profile", lambda: open_store(url), None)
        profiler = Profiler()
        started = time.perf_counter()
        with profiler:
            out = list(commit(stage(iter(batches))))
        took = time.perf_counter() - started
        print(f"one writing task: {n} rows in {took:.2f}s ({n / took:,.0f} rows/s); {out[0]}")
        print(profiler.output_text(unicode=False, color=False, show_all=False))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_format(df: DataFrame, where: Path, shards: int, rows: int) -> float:
    """Seconds to write ``df`` through ``format("slatedb")`` into a new table (checked)."""
    url = where.as_uri()
    store = open_store(url)
    Table.create("t", store, split_points=split_points(shards)).close()
    started = time.perf_counter()
    (
        df.write.format("slatedb")
        .option("url", url)
        .option("path", "t")
        .option("key", "key")
        .option("value", "value")
        .mode("append")
        .save()
    )
    took = time.perf_counter() - started
    with Table.open("t", store) as t:
        written = sum(b.num_rows for b in t.scan_arrow())
    assert written == rows, written
    shutil.rmtree(where, ignore_errors=True)
    return took


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--partitions", type=int, default=8, help="input partitions")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--driver-memory", default="6g")
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds of (parquet, ingest) on the same cached DataFrame; the first "
        "round also pays the JVM's JIT warm-up (mostly parquet, which runs first) and "
        "the Python workers' start (the ingest)",
    )
    p.add_argument(
        "--floors",
        action="store_true",
        help="also time the floors of the module doc in every round",
    )
    p.add_argument("--profile", action="store_true", help="profile one writing task instead")
    p.add_argument(
        "--compare-with",
        metavar="REF",
        help="run this bench of commit REF and of this checkout side by side, rounds "
        "alternating (bench/compare_trees.py --spark), e.g. the commit before a change",
    )
    p.add_argument("--out", help="--compare-with: also append the report to this file")
    args = p.parse_args()
    if args.compare_with:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from bench.compare_trees import main as compare

        out = ["--out", args.out] if args.out else []
        compare(
            [
                *("--base", args.compare_with, "--spark", "--rows", str(args.rows)),
                *("--shards", str(args.shards), "--rounds", str(args.repeat), *out),
            ]
        )
        return
    if args.profile:
        profile_task(args.rows, args.shards)
        return
    spark = get_session(
        SessionOptions(
            master=args.master,
            app_name="spark-ingest-bench",
            shuffle_partitions=args.shards,
            conf={"spark.driver.memory": args.driver_memory},
        )
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(SlateDBDataSource)
    tmp = Path(tempfile.mkdtemp(prefix="spark-ingest-bench-"))
    try:
        df = generate(spark, args.rows, args.partitions).persist(StorageLevel.MEMORY_AND_DISK)
        started = time.perf_counter()
        assert df.count() == args.rows
        print(
            f"generated and cached {args.rows:,} rows in {time.perf_counter() - started:.1f}s "
            f"({args.partitions} partitions, {KEY_BYTES} B keys, {VALUE_BYTES} B values)"
        )

        results: list[tuple[float, float, float]] = []
        for rep in range(args.repeat):
            if args.repeat > 1:
                print(f"-- round {rep + 1} of {args.repeat}")
            started = time.perf_counter()
            df.write.parquet(str(tmp / f"parquet{rep}"))
            parquet_s = time.perf_counter() - started
            files = (tmp / f"parquet{rep}").rglob("*.parquet")
            parquet_mb = sum(f.stat().st_size for f in files) / 1e6
            shutil.rmtree(tmp / f"parquet{rep}", ignore_errors=True)
            print(f"df.write.parquet: {parquet_s:.1f}s, {parquet_mb:.0f} MB")

            url = (tmp / f"store{rep}").as_uri()
            store = open_store(url)
            Table.create("t", store, split_points=split_points(args.shards)).close()
            started = time.perf_counter()
            plan = plan_ingest("t", store)
            plan_s = time.perf_counter() - started
            stats = ingest(df, url, "t", value_column="value", plan=plan)
            ingest_s = time.perf_counter() - started
            assert stats.rows == args.rows, stats.rows
            print(stats.summary())
            print(
                f"ingest: {ingest_s:.1f}s (planning {plan_s:.1f}s of it), "
                f"{stats.bytes / 1e6:.0f} MB in {stats.ssts} SSTs"
            )
            print(f"ratio ingest / parquet: {ingest_s / parquet_s:.2f}x (target <= 1.5x)")
            if args.floors:
                floors(df, url, plan.shard_map, parquet_s)
            shutil.rmtree(tmp / f"store{rep}", ignore_errors=True)
            format_s = write_format(df, tmp / f"format{rep}", args.shards, args.rows)
            print(
                f"format('slatedb'): {format_s:.1f}s, {format_s / parquet_s:.2f}x parquet, "
                f"{format_s / ingest_s:.2f}x the ingest (target: its ratio to parquet within "
                "1.2x of the ingest's)"
            )
            results.append((parquet_s, ingest_s, format_s))
        if args.repeat > 1:
            best_p, best_i = min(r[0] for r in results), min(r[1] for r in results)
            best_f = min(r[2] for r in results)
            print(
                "rounds (parquet s, ingest s, ratio, format s, ratio): "
                + ", ".join(
                    f"({p:.1f}, {i:.1f}, {i / p:.2f}x, {f:.1f}, {f / p:.2f}x)"
                    for p, i, f in results
                )
            )
            print(
                f"best of {args.repeat}: parquet {best_p:.1f}s, ingest {best_i:.1f}s, ratio "
                f"{best_i / best_p:.2f}x; format {best_f:.1f}s, ratio {best_f / best_p:.2f}x"
            )
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
