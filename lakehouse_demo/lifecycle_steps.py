"""Steps 5 and 6 of the demo: the table's shards change. The largest shard is split (two
projected clones) and two small neighbours merged (a union) through the shard map
(docs/projection-and-union.md); then a scratch clone lives and dies: cloned, soft-destroyed and
deleted by the GC once its grace has passed (docs/clones-and-destroy.md)."""

import json
import time
from datetime import timedelta
from typing import Any

import dagster as dg
from dagster import AssetExecutionContext, Output

from lakehouse_demo import progress
from lakehouse_demo.resource import GROUP, DemoResource, step_output
from lakehouse_demo.shards import layout, real_key_at, show_key, totals
from slatedb_core import Db, DbReader, ObjectStore, Table, admin
from slatedb_core.errors import InvalidArgument
from slatedb_core.health import inspect_database, split_key
from slatedb_core.layout import ends_in_boundary
from slatedb_core.options import GarbageCollectorOptions


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
    ssts, nbytes = totals(after)
    out = {
        "split": f"{big['db']} at {show_key(at)}",
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
    return step_output(out)


def count_objects(store: ObjectStore, db: str, *, tombstone: bool = False) -> int:
    """Objects under ``db``: the database's own, or (``tombstone``) only the GC boundary files a
    destroyed path keeps (docs/clones-and-destroy.md)."""
    return sum(1 for o in store.list(db) if ends_in_boundary(o.path) == tombstone)


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
    clone_objects = count_objects(store, clone)
    with DbReader.open(clone, store) as r:
        clone_rows = sum(b.num_rows for b in r.scan_arrow())
    progress.advance(step, 1, "soft destroy")
    Db.destroy(clone, store, soft=True)
    destroyed_at = time.time()
    grace = timedelta(seconds=demo.gc_grace_s)
    gc_options = GarbageCollectorOptions(min_age=timedelta(0), db_delete_grace=grace)
    progress.advance(step, 1, "GC inside the grace")
    first = admin.run_gc_once(clone, store, gc_options)
    kept = count_objects(store, clone)
    wait = max(0.0, destroyed_at + demo.gc_grace_s + 1.0 - time.time())
    time.sleep(wait)
    progress.advance(step, 1, "GC after the grace")
    second = admin.run_gc_once(clone, store, gc_options)
    left = count_objects(store, clone)
    tombstone = count_objects(store, clone, tombstone=True)
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
    return step_output(out)
