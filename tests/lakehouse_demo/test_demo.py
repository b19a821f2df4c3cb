"""The main job end to end on a small dataset: two runs through Dagster in one data directory
(the first fresh, the second with --reuse), checking the measured summary figures against
what the store, the Delta table and Dagster's instance hold."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from rich.console import Console

pytest.importorskip("dagster")
pytest.importorskip("pyspark")
pytest.importorskip("deltalake")

from deltalake import DeltaTable

from lakehouse_demo.cli import DemoOptions, DemoRun, run
from slatedb_core.store.url import open_store
from slatedb_core.table import Table

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]

ROWS = 20_000


def _run(tmp_path: Path, reset: bool) -> tuple[DemoRun, str]:
    console = Console(record=True, width=140, force_terminal=False)
    result = run(
        DemoOptions(data_dir=tmp_path / "demo", rows=ROWS, reset=reset, new_orders=2_000),
        console,
    )
    return result, console.export_text()


def _check_run(r: DemoRun, text: str) -> None:
    out = r.outputs
    assert r.success
    ing = out["orders_table"]
    assert ing["rows"] == ROWS == ing["input_rows"]
    assert ing["shards"] == 5  # one per region
    assert ing["ssts"] >= 4

    comp = out["compacted_shards"]
    assert comp["compactions"] >= 5 and comp["l0_ssts"] == 0

    cp = out["daily_checkpoint"]
    assert len(cp["checkpoints"]) == 5

    rd = out["checkpoint_read_under_writes"]
    assert rd["checkpoint_unchanged"] is True
    assert rd["observations"] >= 2
    assert rd["new_orders"] > 0
    # New orders of the queried days arrived: latest moved past the checkpoint's answer.
    assert rd["latest_rows_last"] > rd["checkpoint_rows"]
    assert all(o["checkpoint"]["rows"] == rd["checkpoint_rows"] for o in rd["trace"])

    rs = out["rescaled_table"]
    assert rs["shards_before"] == 5 and rs["shards"] == 5
    assert len(rs["retired"]) >= 3  # the split source and the two merged ones

    gc = out["scratch_clone_gc"]
    assert gc["clone_objects"] > 0
    assert gc["first_pass_deleted_db"] is False and gc["objects_after_first_pass"] > 0
    assert gc["second_pass_deleted_db"] is True and gc["objects_left"] == 0
    assert gc["tombstone_objects"] == 4  # the destroyed path remembers it was destroyed

    dx = out["orders_delta_export"]
    assert dx["rows_read_back"] == dx["rows_written"] == cp["rows"]
    assert DeltaTable(dx["uri"]).to_pyarrow_dataset().count_rows() == cp["rows"]

    # The summary shows the measured figures.
    assert "lakehouse demo: summary" in text
    assert f"{ing['rows']:,} rows ingested" in text
    assert f"{dx['rows_read_back']:,} rows read back with deltalake" in text
    assert "make ui" in text


def test_demo_twice(tmp_path: Path) -> None:
    first, text1 = _run(tmp_path, reset=True)
    _check_run(first, text1)
    assert first.facts.mode == "fresh"
    assert first.outputs["daily_checkpoint"]["rows"] == ROWS
    # One shard per region; the largest (eu) was split, the two small adjacent ones (me, sa)
    # merged.
    rs = first.outputs["rescaled_table"]
    assert [s["start"] for s in rs["layout_before"]] == [
        "-inf",
        "ord-eu-",
        "ord-me-",
        "ord-sa-",
        "ord-us-",
    ]
    assert " at ord-eu-" in rs["split"]
    starts = [s["start"] for s in rs["layout"]]
    assert "ord-me-" in starts and "ord-sa-" not in starts

    # The table holds what the run says: the live shards and every row of the checkpoint plus
    # the new orders.
    store = open_store(first.facts.store_url)
    with Table.open("orders", store) as t:
        assert len(t.shards) == first.outputs["rescaled_table"]["shards"]
        latest_rows = sum(b.num_rows for b in t.scan_arrow())
    new = first.outputs["checkpoint_read_under_writes"]["new_orders"]
    assert latest_rows == ROWS + new

    second, text2 = _run(tmp_path, reset=False)
    _check_run(second, text2)
    assert second.facts.mode == "reuse"
    assert "reuse: kept the data" in text2
    # The re-ingest upserted the same orders; the checkpoint now also holds run 1's new ones.
    assert second.outputs["daily_checkpoint"]["rows"] == latest_rows
    assert second.outputs["daily_checkpoint"]["replaced_older"] >= 1
    assert second.outputs["orders_delta_export"]["delta_version"] == 1

    from dagster import DagsterInstance

    instance = DagsterInstance.from_config(first.facts.dagster_home)
    try:
        runs = instance.get_runs()
        assert {r.run_id for r in runs} >= {first.facts.run_id, second.facts.run_id}
        assert all(r.job_name == "lakehouse_demo_job" for r in runs)
    finally:
        instance.dispose()

    third, text3 = _run(tmp_path, reset=True)
    assert third.facts.mode == "reset"
    assert "reset: wiped" in text3
    assert third.outputs["daily_checkpoint"]["rows"] == ROWS


@pytest.mark.s3
def test_demo_on_seaweedfs(tmp_path: Path) -> None:
    """``make demo-s3``: the same job against SeaweedFS started (and stopped) by the demo."""
    from lakehouse_demo.s3server import weed_binary
    from slatedb_core.errors import StoreError

    try:
        weed_binary()
    except StoreError as e:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI installs the s3server extra: {e}")
        pytest.skip(str(e))
    console = Console(record=True, width=140, force_terminal=False)
    r = run(DemoOptions(data_dir=tmp_path / "demo", rows=ROWS, s3=True, new_orders=2_000), console)
    text = console.export_text()
    _check_run(r, text)
    assert r.facts.store_url.startswith("s3://lakehouse/lake?endpoint=http://127.0.0.1:")
    assert "SeaweedFS at http://127.0.0.1:" in text
    assert (tmp_path / "demo" / "seaweedfs" / "weed.log").exists()
