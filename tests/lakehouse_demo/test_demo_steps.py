"""The demo's steps after the Spark ones, called directly on a small table written without Spark:
the named snapshot, the read under writes, split + merge, the scratch clone's life and the Delta
export, each checked against the store and the Delta table. The whole demo, Spark included, runs
in the slow tests/lakehouse_demo/test_demo.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dagster")
pytest.importorskip("deltalake")

import dagster as dg
import pyarrow.compute as pc
from deltalake import DeltaTable

from lakehouse_demo.dataset import SCHEMA, DatasetOptions, generate
from lakehouse_demo.lifecycle_steps import rescaled_table, scratch_clone_gc
from lakehouse_demo.orders import decode_orders, encode_orders, new_orders
from lakehouse_demo.resource import DemoResource
from lakehouse_demo.snapshot_steps import (
    CHECKPOINT_NAME,
    checkpoint_read_under_writes,
    daily_checkpoint,
    orders_delta_export,
)
from slatedb_core import Table, TableSnapshot, admin, open_store

ROWS = 3_000


def _value(output: Any) -> dict[str, Any]:
    assert isinstance(output, dg.Output)
    value: dict[str, Any] = output.value
    return value


def test_orders_round_trip_through_their_key_value_form() -> None:
    orders = generate(DatasetOptions(rows=200, days=3))
    kv = encode_orders(orders)
    assert kv.column_names == ["key", "value"] and kv.num_rows == 200
    back = decode_orders(kv)
    assert back.schema == SCHEMA
    assert back.to_pylist() == orders.to_pylist()
    # New orders: only the last two days, keys above the first ingest's sequence numbers.
    batches = new_orders(1_000, 4, 28, 0)
    assert len(batches) == 4
    days = {k[7:15] for b in batches for k in b.column("key").to_pylist()}
    assert days == {b"20250327", b"20250328"}


def test_the_steps_after_spark_on_a_small_table(tmp_path: Path) -> None:
    demo = DemoResource(
        store_url=str(tmp_path / "store"),
        input_dir=str(tmp_path / "input"),
        delta_dir=str(tmp_path / "delta"),
        new_orders=400,
        write_batches=2,
        write_pause_s=0.0,
        gc_grace_s=1.0,
    )
    store = open_store(demo.store_url)
    points = [f"ord-{r}-".encode() for r in ("eu", "me", "sa", "us")]
    kv = encode_orders(generate(DatasetOptions(rows=ROWS)))
    with Table.create("orders", store, split_points=points) as table:
        idx = table.route(kv.column("key")).to_numpy()
        for shard in table.shards:
            with table.writer(shard) as db:
                db.put_arrow(kv.filter(pc.equal(idx, shard.index)))
                db.flush_memtable()
    with dg.build_asset_context() as ctx:
        cp = _value(daily_checkpoint(context=ctx, demo=demo, compacted_shards={}))
        assert cp["name"] == CHECKPOINT_NAME and cp["rows"] == ROWS
        assert len(cp["checkpoints"]) == 5
        snap = TableSnapshot.from_json(cp["snapshot"])
        assert snap.name == CHECKPOINT_NAME and cp["replaced_older"] == 0
        with Table.open("orders", store) as table:
            assert table.named_snapshot(CHECKPOINT_NAME) == snap

        rd = _value(checkpoint_read_under_writes(context=ctx, demo=demo, daily_checkpoint=cp))
        assert rd["checkpoint_unchanged"] is True and rd["new_orders"] > 0
        assert rd["latest_rows_last"] > rd["checkpoint_rows"] > 0

        rs = _value(rescaled_table(context=ctx, demo=demo, checkpoint_read_under_writes=rd))
        assert rs["shards_before"] == rs["shards"] == 5 and len(rs["retired"]) == 3
        assert " at ord-eu-" in rs["split"]

        gc = _value(scratch_clone_gc(context=ctx, demo=demo, rescaled_table=rs))
        assert gc["clone_objects"] > 0 and gc["clone_rows"] > 0
        assert gc["first_pass_deleted_db"] is False and gc["objects_after_first_pass"] > 0
        assert gc["second_pass_deleted_db"] is True and gc["objects_left"] == 0
        assert gc["tombstone_objects"] == 4

        dx = _value(
            orders_delta_export(context=ctx, demo=demo, daily_checkpoint=cp, scratch_clone_gc=gc)
        )
        assert dx["rows_written"] == dx["rows_read_back"] == ROWS and dx["matches_checkpoint"]
        exported = DeltaTable(dx["uri"]).to_pyarrow_table()
        assert exported.column_names == SCHEMA.names and exported.num_rows == ROWS

        # Taken again (a run with --reuse): the new snapshot replaces the name and the earlier
        # one's checkpoints are released.
        again = _value(daily_checkpoint(context=ctx, demo=demo, compacted_shards={}))
        assert again["replaced_older"] == 5 and again["rows"] >= ROWS
        second = TableSnapshot.from_json(again["snapshot"])
        with Table.open("orders", store) as table:
            assert table.named_snapshot(CHECKPOINT_NAME) == second
        for shard in second.shards:
            live = {c.id for c in admin.list_checkpoints(shard.db_path, store)}
            assert live.isdisjoint(snap.checkpoints) and live & set(second.checkpoints)

    with Table.open("orders", store) as table:
        assert sum(b.num_rows for b in table.scan_arrow()) == ROWS + rd["new_orders"]
