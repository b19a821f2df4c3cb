"""Steps 3, 4 and 7 of the demo: the named snapshot of the table and what reads it. A checkpoint
on every shard of one shard-map version (SlateDB RFC 0004; docs/checkpoints-and-readers.md), a
reader that queries it while a writer adds orders, and its Delta export."""

import json
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import pyarrow as pa
from dagster import AssetExecutionContext, Output

from lakehouse_demo import progress
from lakehouse_demo.dataset import FIRST_DAY, SCHEMA, DatasetOptions
from lakehouse_demo.orders import decode_orders, new_orders, query
from lakehouse_demo.resource import GROUP, DemoResource, step_output
from orchestration.delta import export_to_delta
from slatedb_core import Db, Table, TableSnapshot

CHECKPOINT_NAME = "demo-end-of-day"


@dg.asset(group_name=GROUP, kinds={"slatedb"})
def daily_checkpoint(
    context: AssetExecutionContext, demo: DemoResource, compacted_shards: dict[str, Any]
) -> Output[dict[str, Any]]:
    """A named snapshot of the table: a checkpoint on every shard of one shard-map version, the
    table as of now, readable (and exportable) whatever happens to the shards later. Taking it
    again under the same name (a run with --reuse) releases the one it replaces."""
    step = "3 named checkpoint"
    store = demo.store()
    started = time.monotonic()
    lifetime = timedelta(hours=demo.checkpoint_lifetime_h)
    progress.start(step, None, CHECKPOINT_NAME)
    with Table.open(demo.table_path, store) as table:
        earlier = table.named_snapshot(CHECKPOINT_NAME)
        snap = table.snapshot(lifetime, name=CHECKPOINT_NAME)
    replaced = 0 if earlier is None else len(earlier.checkpoints)
    with Table.open(demo.table_path, store, snapshot=snap) as at_cp:
        rows = sum(b.num_rows for b in at_cp.scan_arrow())
    out = {
        "name": CHECKPOINT_NAME,
        "shard_map_id": snap.shard_map_id,
        "checkpoints": [str(c) for c in snap.checkpoints],
        "rows": rows,
        "replaced_older": replaced,
        "snapshot": snap.to_json(),
        "duration_s": time.monotonic() - started,
    }
    shards = len(snap.checkpoints)
    context.log.info(f"snapshot {CHECKPOINT_NAME} on {shards} shards: {rows} rows")
    progress.finish(step, f"{shards} shards, {rows:,} rows pinned")
    return step_output(out)


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
    batches = new_orders(demo.new_orders * days // 2, demo.write_batches, days, run)
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
    return step_output(out)


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
    return step_output(out)
