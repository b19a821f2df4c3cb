"""The main job as Dagster assets: one run materialises the whole lakehouse pipeline.

::

    orders_table ─> compacted_shards ─> daily_checkpoint ─> checkpoint_read_under_writes
                                                                          │
    orders_delta_export <─ scratch_clone_gc <─ rescaled_table <───────────┘

(``orders_delta_export`` also reads ``daily_checkpoint``'s snapshot.)

Each asset calls the public APIs of ``slatedb_core`` (Table, admin, GC, destroy) and
``spark_jobs`` (ingest, compact) and returns what it measured, both as its output (the next
assets read the snapshot from it; the CLI's summary is built from it) and as Dagster metadata
(shown in the UI). Every figure is measured while the step runs.
"""


import json
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson
from dagster import AssetExecutionContext, Output

from lakehouse_demo import progress
from lakehouse_demo.dataset import (
    FIRST_DAY,
    KEY_COLUMN,
    SCHEMA,
    DatasetOptions,
    describe,
    generate,
    split_points,
)
from orchestration.delta import export_to_delta
from slatedb_core import admin
from slatedb_core.errors import DatabaseNotFound, InvalidArgument, ShardMapConflict
from slatedb_core.health import inspect_database, split_key
from slatedb_core.lifecycle.destroy import destroy
from slatedb_core.options import CheckpointOptions, CompactorOptions, GarbageCollectorOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.table import Table, TableSnapshot
from slatedb_core.writer.db import Db

GROUP = "lakehouse_demo"
CHECKPOINT_NAME = "demo-end-of-day"
NEW_ORDERS_SEQ_START = 5_000_000
"""Sequence numbers of the orders written while the checkpoint is read: above any the first
ingest makes, so they are new keys."""


class DemoResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """Where the demo's data lives and the knobs of its steps."""

    store_url: str
    """The object store holding the table (a directory, file:// or s3://bucket/prefix)."""
    table_path: str = "orders"
    input_dir: str
    """The generated Parquet dataset."""
    delta_dir: str
    """Where the Delta export goes (a local directory)."""
    spark_master: str = "local[2]"
    new_orders: int = 20_000
    """Orders written directly while the checkpoint is read (step 4)."""
    write_batches: int = 8
    write_pause_s: float = 0.25
    """Pause between two batches of new orders, so the reader sees latest move step by step."""
    gc_grace_s: float = 2.0
    """``db_delete_grace`` of the GC pass that removes the scratch clone (short for the demo; the
    default is a day)."""
    checkpoint_lifetime_h: float = 24.0

    def store(self) -> ObjectStore:
        return open_store(self.store_url)


# ---- helpers --------------------------------------------------------------------------------


def _md(values: dict[str, Any]) -> dict[str, dg.MetadataValue]:
    out: dict[str, dg.MetadataValue] = {}
    for k, v in values.items():
        if isinstance(v, bool):
            out[k] = dg.MetadataValue.bool(v)
        elif isinstance(v, int):
            out[k] = dg.MetadataValue.int(v)
        elif isinstance(v, float):
            out[k] = dg.MetadataValue.float(round(v, 3))
        elif isinstance(v, dict | list):
            out[k] = dg.MetadataValue.json(v)
        else:
            out[k] = dg.MetadataValue.text(str(v))
    return out


def _result(step: dict[str, Any]) -> Output[dict[str, Any]]:
    return Output(step, metadata=_md({k: v for k, v in step.items() if k != "snapshot"}))


def _spark(master: str) -> Any:
    from spark_jobs.session import SessionOptions, get_session

    spark = get_session(
        SessionOptions(master=master, app_name="lakehouse-demo", shuffle_partitions=4)
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _show(key: bytes | None) -> str:
    return "-inf" if key is None else key.decode("utf-8", "backslashreplace")


def layout(table: Table, store: ObjectStore) -> list[dict[str, Any]]:
    """Per shard of the table's latest map: range, SSTs and bytes (read from the manifests)."""
    table.refresh()
    out = []
    for s in table.shards:
        _, h = inspect_database(store, s.db_path)
        out.append(
            {
                "index": s.index,
                "db": s.db_path,
                "start": _show(s.key_range.start),
                "end": "+inf" if s.key_range.end is None else _show(s.key_range.end),
                "ssts": h.ssts,
                "l0_ssts": h.l0_ssts,
                "sorted_runs": h.sorted_runs,
                "bytes": h.data_bytes,
            }
        )
    return out


def real_key_at(table: Table, shard_index: int, at: bytes) -> bytes:
    """The first key stored at or after ``at`` (an interpolated median) in the shard: a real
    order id, so the new boundary reads well. ``at`` itself when there is none after it."""
    rng = table.shards[shard_index].key_range
    for key, _ in table.scan(at, rng.end):
        if key != rng.start:
            return key
    return at


def _totals(shards: list[dict[str, Any]]) -> tuple[int, int]:
    return sum(s["ssts"] for s in shards), sum(s["bytes"] for s in shards)


def decode_orders(kv: pa.RecordBatch | pa.Table) -> pa.Table:
    """(key, JSON value) rows back into the orders schema."""
    values = kv.column(1)
    if len(values) == 0:
        return SCHEMA.empty_table()
    body = b"\n".join(v.as_py() for v in values)
    parsed = pajson.read_json(
        pa.BufferReader(body),
        parse_options=pajson.ParseOptions(
            explicit_schema=pa.schema([f for f in SCHEMA if f.name != KEY_COLUMN]),
            unexpected_field_behavior="ignore",
        ),
    )
    keys = pc.cast(kv.column(0), pa.string())
    return pa.Table.from_arrays([keys, *parsed.columns], schema=SCHEMA)


def query(table: Table, start: bytes, end: bytes) -> dict[str, Any]:
    """Orders in [start, end): count and total amount."""
    rows = 0
    amount = 0.0
    for batch in table.scan_arrow(start, end):
        orders = decode_orders(batch)
        rows += orders.num_rows
        amount += float(pc.sum(orders.column("amount")).as_py() or 0.0)
    return {"rows": rows, "amount": round(amount, 2)}


# ---- the assets -----------------------------------------------------------------------------


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
    try:
        table = Table.open(demo.table_path, store)
        created = False
    except DatabaseNotFound:
        table = Table.create(demo.table_path, store, split_points=points)
        created = True
    with table:
        spark = _spark(demo.spark_master)
        progress.advance(step, 0, f"{info.rows:,} rows, Spark job running")
        df = spark.read.parquet(str(Path(demo.input_dir).resolve()))
        stats = ingest(df, demo.store_url, demo.table_path, key_column=KEY_COLUMN,
                       value_format="json")
        shards = layout(table, store)
    ssts, nbytes = _totals(shards)
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
    return _result(out)


@dg.asset(group_name=GROUP, kinds={"spark", "slatedb"})
def compacted_shards(
    context: AssetExecutionContext, demo: DemoResource, orders_table: dict[str, Any]
) -> Output[dict[str, Any]]:
    """Every shard compacted on Spark (key-range subcompactions): L0 into one sorted run."""
    from spark_jobs.compact import compact

    step = "2 compaction (Spark)"
    store = demo.store()
    started = time.monotonic()
    spark = _spark(demo.spark_master)
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
    ssts, nbytes = _totals(after)
    out = {
        "compactions": compactions,
        "input_ssts": input_ssts,
        "output_ssts": output_ssts,
        "bytes_in": bytes_in,
        "bytes_out": bytes_out,
        "ssts_before": _totals(before)[0],
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
    return _result(out)


@dg.asset(group_name=GROUP, kinds={"slatedb"})
def daily_checkpoint(
    context: AssetExecutionContext, demo: DemoResource, compacted_shards: dict[str, Any]
) -> Output[dict[str, Any]]:
    """A named checkpoint on every shard of one shard-map version: the table as of now,
    readable (and exportable) whatever happens to the shards later."""
    step = "3 named checkpoint"
    store = demo.store()
    started = time.monotonic()
    lifetime = timedelta(hours=demo.checkpoint_lifetime_h)
    with Table.open(demo.table_path, store) as table:
        for _ in range(5):
            m = table.maps.read_latest()
            progress.start(step, len(m.shards), CHECKPOINT_NAME)
            ids = []
            for s in m.shards:
                cp = admin.create_checkpoint(
                    s.db_path, store, CheckpointOptions(lifetime=lifetime, name=CHECKPOINT_NAME)
                )
                ids.append(cp.id)
                progress.advance(step)
            if table.maps.seq.latest_id() == m.id:
                break
            for s, cid in zip(m.shards, ids, strict=True):  # a rescale meanwhile: again
                admin.delete_checkpoint(s.db_path, store, cid)
        else:
            raise ShardMapConflict("the shard map kept changing while checkpointing")
        replaced = 0
        for s, cid in zip(m.shards, ids, strict=True):  # an earlier run's (with --reuse)
            for old in admin.list_checkpoints(s.db_path, store, CHECKPOINT_NAME):
                if old.id != cid:
                    admin.delete_checkpoint(s.db_path, store, old.id)
                    replaced += 1
    snap = TableSnapshot(demo.table_path, m.id, m.shards, tuple(ids))
    with Table.open(demo.table_path, store, snapshot=snap) as at_cp:
        rows = sum(b.num_rows for b in at_cp.scan_arrow())
    out = {
        "name": CHECKPOINT_NAME,
        "shard_map_id": m.id,
        "checkpoints": [str(c) for c in ids],
        "rows": rows,
        "replaced_older": replaced,
        "snapshot": snap.to_json(),
        "duration_s": time.monotonic() - started,
    }
    context.log.info(f"checkpoint {CHECKPOINT_NAME} on {len(ids)} shards: {rows} rows")
    progress.finish(step, f"{len(ids)} shards, {rows:,} rows pinned")
    return _result(out)


def _new_orders(n: int, batches: int, days: int, run: int) -> list[pa.Table]:
    """New orders arriving: the last two days of every region, above the first ingest's
    sequence numbers (and above those of earlier demo runs: ``run``), as (key, JSON value)
    batches."""
    opts = DatasetOptions(rows=n, days=days, seed=99 + run)
    orders = generate(opts, seq_start=NEW_ORDERS_SEQ_START + (run % 40) * 100_000)
    day = pc.cast(pc.utf8_slice_codeunits(orders.column(KEY_COLUMN), 7, 15), pa.int64())
    last_days = int((FIRST_DAY + timedelta(days=days - 2)).strftime("%Y%m%d"))
    orders = orders.filter(pc.greater_equal(day, last_days))
    rows = orders.to_pylist()
    values = [
        json.dumps(
            {
                "customer_id": r["customer_id"],
                "amount": r["amount"],
                "currency": r["currency"],
                "status": r["status"],
                "ts": r["ts"].isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            },
            separators=(",", ":"),
        ).encode()
        for r in rows
    ]
    kv = pa.table(
        {
            "key": pc.cast(orders.column(KEY_COLUMN), pa.binary()),
            "value": pa.array(values, pa.binary()),
        }
    )
    batch = max(1, -(-kv.num_rows // batches))
    return [kv.slice(i, batch) for i in range(0, kv.num_rows, batch)]


@dg.asset(group_name=GROUP, kinds={"slatedb"})
def checkpoint_read_under_writes(
    context: AssetExecutionContext, demo: DemoResource, daily_checkpoint: dict[str, Any]
) -> Output[dict[str, Any]]:
    """A reader queries the checkpoint while a writer adds new orders to every shard: the
    checkpoint's answer never changes, the latest one grows."""
    step = "4 read at checkpoint"
    store = demo.store()
    started = time.monotonic()
    snap = TableSnapshot.from_json(daily_checkpoint["snapshot"])
    days = DatasetOptions().days
    run = daily_checkpoint["shard_map_id"] // 4  # each earlier run's rescale made 4 versions
    batches = _new_orders(demo.new_orders * days // 2, demo.write_batches, days, run)
    # The query: the European orders of the last two days.
    since = (FIRST_DAY + timedelta(days=days - 2)).strftime("%Y%m%d")
    lo, hi = f"ord-eu-{since}-".encode(), b"ord-eu-\xff"
    progress.start(step, len(batches), "writer starting")
    written = {"rows": 0, "flushes": 0}
    error: list[BaseException] = []
    done = threading.Event()

    def writer() -> None:
        writers: dict[int, Db] = {}
        try:
            with Table.open(demo.table_path, store) as t:
                for kv in batches:
                    idx = t.route(kv.column("key")).to_numpy()
                    for i in np.unique(idx):
                        if int(i) not in writers:
                            writers[int(i)] = t.writer(int(i))
                        part = kv.filter(pa.array(idx == i))
                        writers[int(i)].put_arrow(part)
                    written["rows"] += kv.num_rows
                    written["flushes"] += 1
                    progress.advance(step, 1, f"{written['rows']:,} new orders written")
                    time.sleep(demo.write_pause_s)
        except BaseException as e:
            error.append(e)
        finally:
            for db in writers.values():
                db.close()
            done.set()

    observations: list[dict[str, Any]] = []
    with (
        Table.open(demo.table_path, store, snapshot=snap) as at_cp,
        Table.open(demo.table_path, store) as latest,
    ):
        t0 = time.monotonic()
        thread = threading.Thread(target=writer, name="demo-writer", daemon=True)
        thread.start()
        while True:
            finished = done.is_set()
            latest.refresh()
            observations.append(
                {
                    "t_s": round(time.monotonic() - t0, 2),
                    "written": written["rows"],
                    "checkpoint": query(at_cp, lo, hi),
                    "latest": query(latest, lo, hi),
                }
            )
            if finished:
                break
            done.wait(0.2)
        thread.join(timeout=60)
    if error:
        raise error[0]
    cp_answers = {json.dumps(o["checkpoint"], sort_keys=True) for o in observations}
    first, last = observations[0], observations[-1]
    out = {
        "query": f"eu orders since {since}",
        "new_orders": written["rows"],
        "observations": len(observations),
        "checkpoint_rows": first["checkpoint"]["rows"],
        "checkpoint_amount": first["checkpoint"]["amount"],
        "checkpoint_unchanged": len(cp_answers) == 1,
        "latest_rows_first": first["latest"]["rows"],
        "latest_rows_last": last["latest"]["rows"],
        "latest_amount_last": last["latest"]["amount"],
        "trace": observations,
        "duration_s": time.monotonic() - started,
    }
    context.log.info(json.dumps(observations))
    progress.finish(
        step,
        f"checkpoint {out['checkpoint_rows']:,} rows x{len(observations)} (unchanged: "
        f"{out['checkpoint_unchanged']}), latest {out['latest_rows_first']:,} -> "
        f"{out['latest_rows_last']:,}",
    )
    return _result(out)


@dg.asset(group_name=GROUP, kinds={"slatedb"})
def rescaled_table(
    context: AssetExecutionContext,
    demo: DemoResource,
    checkpoint_read_under_writes: dict[str, Any],
) -> Output[dict[str, Any]]:
    """Split the largest shard at its median key; merge the two smallest adjacent shards."""
    step = "5 rescale"
    store = demo.store()
    started = time.monotonic()
    progress.start(step, 2, "split")
    with Table.open(demo.table_path, store) as table:
        before = layout(table, store)
        big = max(before, key=lambda s: s["bytes"])
        stored, _ = inspect_database(store, big["db"])
        median = split_key(stored.manifest)
        if median is None:
            raise InvalidArgument(f"shard {big['db']} has no key to split at")
        at = real_key_at(table, big["index"], median)
        t = time.monotonic()
        table.split(big["index"], at)
        split_s = time.monotonic() - t
        progress.advance(step, 1, "merge")
        mid = layout(table, store)
        pairs = [(mid[i]["bytes"] + mid[i + 1]["bytes"], i) for i in range(len(mid) - 1)]
        _, small = min(pairs)
        t = time.monotonic()
        m = table.merge(small, expected_map_id=table.shard_map.id)
        merge_s = time.monotonic() - t
        progress.advance(step, 1)
        after = layout(table, store)
    ssts, nbytes = _totals(after)
    out = {
        "split": f"{big['db']} at {_show(at)}",
        "split_s": split_s,
        "merged": f"{mid[small]['db']} + {mid[small + 1]['db']}",
        "merge_s": merge_s,
        "shards_before": len(before),
        "shards": len(after),
        "shard_map_id": m.id,
        "retired": list(m.retired),
        "ssts": ssts,
        "bytes": nbytes,
        "layout_before": before,
        "layout": after,
        "duration_s": time.monotonic() - started,
    }
    context.log.info(json.dumps(after))
    progress.finish(step, f"{len(before)} -> {len(mid)} -> {len(after)} shards")
    return _result(out)


def _objects(store: ObjectStore, prefix: str, *, tombstone: bool = False) -> int:
    """Objects under ``prefix``: the database's own, or (``tombstone``) only the boundary files
    a destroyed path keeps (docs/clones-and-destroy.md)."""
    return sum(1 for o in store.list(prefix) if _is_boundary(o.path) == tombstone)


def _is_boundary(path: str) -> bool:
    return "/gc/" in path and path.endswith(".boundary")


@dg.asset(group_name=GROUP, kinds={"slatedb"})
def scratch_clone_gc(
    context: AssetExecutionContext, demo: DemoResource, rescaled_table: dict[str, Any]
) -> Output[dict[str, Any]]:
    """A scratch clone of the largest shard, soft-destroyed; a GC pass inside the grace keeps
    it, one after the grace deletes it (``db_delete_grace`` = ``gc_grace_s``, short for the
    demo). Retired shards get a GC pass too (kept while the checkpoint pins them)."""
    step = "6 clone, destroy, GC"
    store = demo.store()
    started = time.monotonic()
    progress.start(step, 4, "clone")
    big = max(rescaled_table["layout"], key=lambda s: s["bytes"])
    clone = f"scratch/{demo.table_path}-clone-{int(time.time() * 1000)}"
    admin.create_clone(clone, big["db"], store)
    clone_objects = _objects(store, clone)
    with DbReader.open(clone, store) as r:
        clone_rows = sum(b.num_rows for b in r.scan_arrow())
    progress.advance(step, 1, "soft destroy")
    destroy(clone, store, soft=True)
    destroyed_at = time.time()
    grace = timedelta(seconds=demo.gc_grace_s)
    gc_options = GarbageCollectorOptions(min_age=timedelta(0), db_delete_grace=grace)
    progress.advance(step, 1, "GC inside the grace")
    first = admin.run_gc_once(clone, store, gc_options)
    kept = _objects(store, clone)
    wait = max(0.0, destroyed_at + demo.gc_grace_s + 1.0 - time.time())
    time.sleep(wait)
    progress.advance(step, 1, "GC after the grace")
    second = admin.run_gc_once(clone, store, gc_options)
    left = _objects(store, clone)
    tombstone = _objects(store, clone, tombstone=True)
    retired = []
    for db in rescaled_table["retired"]:
        st = admin.run_gc_once(db, store, gc_options)
        retired.append({"db": db, "deleted": st.database_deleted, "destroyed": st.destroyed})
    progress.advance(step, 1)
    out = {
        "clone": clone,
        "clone_of": big["db"],
        "clone_rows": clone_rows,
        "clone_objects": clone_objects,
        "gc_grace_s": demo.gc_grace_s,
        "first_pass_deleted_db": first.database_deleted,
        "objects_after_first_pass": kept,
        "second_pass_deleted_db": second.database_deleted,
        "objects_deleted": second.database_objects.deleted,
        "bytes_freed": second.database_objects.bytes_freed,
        "objects_left": left,
        "tombstone_objects": tombstone,
        "parent_checkpoints_released": second.external_checkpoints_released,
        "retired": retired,
        "retired_deleted": sum(1 for r in retired if r["deleted"]),
        "duration_s": time.monotonic() - started,
    }
    context.log.info(json.dumps(out))
    progress.finish(
        step,
        f"clone of {clone_rows:,} rows: kept inside grace ({kept} objects), "
        f"deleted after ({second.database_objects.deleted} objects, {left} left)",
    )
    return _result(out)


@dg.asset(group_name=GROUP, kinds={"slatedb", "deltalake"})
def orders_delta_export(
    context: AssetExecutionContext,
    demo: DemoResource,
    daily_checkpoint: dict[str, Any],
    scratch_clone_gc: dict[str, Any],
) -> Output[dict[str, Any]]:
    """The checkpoint (taken before the new orders and the rescale) as a Delta table of orders,
    written with deltalake and read back with deltalake to count its rows."""
    step = "7 Delta export"
    started = time.monotonic()
    snap = TableSnapshot.from_json(daily_checkpoint["snapshot"])
    progress.start(step, daily_checkpoint["rows"], "")
    export = export_to_delta(
        demo.store(),
        snap,
        str(Path(demo.delta_dir).resolve()),
        decode=decode_orders,
        schema=SCHEMA,
        on_rows=lambda n: progress.advance(step, n),
    )
    out = {
        "uri": export.uri,
        "rows_written": export.rows,
        "rows_read_back": export.rows_read_back,
        "checkpoint_rows": daily_checkpoint["rows"],
        "matches_checkpoint": export.rows_read_back == daily_checkpoint["rows"],
        "delta_version": export.version,
        "files": export.files,
        "duration_s": time.monotonic() - started,
    }
    context.log.info(json.dumps(out))
    progress.finish(
        step, f"{export.rows_read_back:,} rows read back with deltalake (version {export.version})"
    )
    return _result(out)


ASSETS = [
    orders_table,
    compacted_shards,
    daily_checkpoint,
    checkpoint_read_under_writes,
    rescaled_table,
    scratch_clone_gc,
    orders_delta_export,
]
STEPS = [a.key.path[-1] for a in ASSETS]
demo_job = dg.define_asset_job("lakehouse_demo_job", selection=ASSETS)


def asset_outputs(result: dg.ExecuteInProcessResult) -> dict[str, dict[str, Any]]:
    """Each asset's output dict from a finished in-process run."""
    return {name: result.output_for_node(name) for name in STEPS}


__all__ = [
    "ASSETS",
    "STEPS",
    "DemoResource",
    "asset_outputs",
    "demo_job",
]
