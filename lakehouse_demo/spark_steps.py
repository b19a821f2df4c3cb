"""Steps 1 and 2 of the demo, on Spark: ingest the Parquet orders into a sharded table, then
compact every shard (``spark_jobs``)."""

import time
from pathlib import Path
from typing import Any

import dagster as dg
from dagster import AssetExecutionContext, Output

from lakehouse_demo import progress
from lakehouse_demo.dataset import KEY_COLUMN, describe, split_points
from lakehouse_demo.resource import GROUP, DemoResource, spark_session, step_output
from lakehouse_demo.shards import layout, totals
from slatedb_core import Table
from slatedb_core.options import CompactorOptions


@dg.asset(group_name=GROUP, kinds={"spark", "slatedb"})
def orders_table(context: AssetExecutionContext, demo: DemoResource) -> Output[dict[str, Any]]:
    """Spark ``local[2]`` ingests the Parquet orders into a sharded table: one shard per region
    (split points from the key distribution), values as JSON."""
    from spark_jobs.ingest import ingest

    step = "1 ingest (Spark)"
    info = describe(Path(demo.input_dir))
    progress.start(step, None, f"{info.rows:,} rows, starting Spark")
    store = demo.store()
    started = time.monotonic()
    points = split_points(info)
    table, created = Table.open_or_create(demo.table_path, store, split_points=points)
    with table:
        spark = spark_session(demo.spark_master)
        progress.advance(step, 0, f"{info.rows:,} rows, Spark job running")
        df = spark.read.parquet(str(Path(demo.input_dir).resolve()))
        stats = ingest(
            df, demo.store_url, demo.table_path, key_column=KEY_COLUMN, value_format="json"
        )
        shards = layout(table, store)
    ssts, nbytes = totals(shards)
    out = {
        "rows": stats.rows,
        "input_rows": info.rows,
        "input_bytes": info.bytes,
        "created": created,
        "split_points": [p.decode() for p in points],
        "shards": len(shards),
        "ssts": ssts,
        "bytes": nbytes,
        "layout": shards,
        "spark_job_s": stats.duration_s,
        "duration_s": time.monotonic() - started,
    }
    context.log.info(stats.summary())
    progress.finish(step, f"{stats.rows:,} rows into {len(shards)} shards, {ssts} SSTs")
    return step_output(out)


@dg.asset(group_name=GROUP, kinds={"spark", "slatedb"})
def compacted_shards(
    context: AssetExecutionContext, demo: DemoResource, orders_table: dict[str, Any]
) -> Output[dict[str, Any]]:
    """Every shard compacted on Spark (key-range subcompactions): L0 into one sorted run."""
    from spark_jobs.compact import compact

    step = "2 compaction (Spark)"
    store = demo.store()
    started = time.monotonic()
    spark = spark_session(demo.spark_master)
    options = CompactorOptions(l0_trigger=1, max_sst_size_bytes=64 * 1024 * 1024)
    compactions = input_ssts = output_ssts = bytes_in = bytes_out = 0
    with Table.open(demo.table_path, store) as table:
        before = layout(table, store)
        progress.start(step, len(before), "")
        for s in table.shards:
            stats = compact(spark, demo.store_url, s.db_path, options=options)
            if stats is not None:
                context.log.info(f"{s.db_path}: {stats.summary()}")
                compactions += stats.compactions
                input_ssts += stats.input_ssts
                output_ssts += stats.output_ssts
                bytes_in += stats.bytes_in
                bytes_out += stats.bytes_out
            progress.advance(step, 1, s.db_path)
        after = layout(table, store)
    ssts, nbytes = totals(after)
    out = {
        "compactions": compactions,
        "input_ssts": input_ssts,
        "output_ssts": output_ssts,
        "bytes_in": bytes_in,
        "bytes_out": bytes_out,
        "ssts_before": totals(before)[0],
        "ssts": ssts,
        "bytes": nbytes,
        "l0_ssts_before": sum(s["l0_ssts"] for s in before),
        "l0_ssts": sum(s["l0_ssts"] for s in after),
        "sorted_runs": sum(s["sorted_runs"] for s in after),
        "layout": after,
        "duration_s": time.monotonic() - started,
    }
    progress.finish(
        step,
        f"{compactions} compactions: L0 {out['l0_ssts_before']} -> {out['l0_ssts']} SSTs, "
        f"{out['sorted_runs']} sorted runs",
    )
    return step_output(out)
