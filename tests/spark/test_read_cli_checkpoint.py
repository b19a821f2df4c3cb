"""``python -m spark_jobs read --checkpoint NAME`` reads a named table snapshot (issue 40, item 3:
the README offered ``spark_jobs read`` for "a table or checkpoint", but the job could only take a
fresh snapshot, never name one)."""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

import slatedb_core as sc
from slatedb_core.errors import CheckpointNotFound
from spark_jobs.read import main

pytestmark = pytest.mark.spark


def _put(table: sc.Table, keys: list[bytes]) -> None:
    for shard in table.shards:
        mine = [k for k in keys if shard.contains(k)]
        if mine:
            with table.writer(shard) as w:
                w.bulk_ingest(pa.table({"key": mine, "value": [b"v"] * len(mine)}))


def test_read_job_names_a_snapshot(
    spark: SparkSession, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store = sc.open_store(store_url)
    with sc.Table.create("t", store, split_points=[b"k-5"]) as table:
        _put(table, [f"k-{i}".encode() for i in range(10)])
        table.snapshot(timedelta(minutes=10), name="nightly")
        _put(table, [f"k-{i}x".encode() for i in range(10)])  # after the snapshot
    assert main(["--url", store_url, "--path", "t", "--checkpoint", "nightly"]) == 0
    assert capsys.readouterr().out.startswith("10 rows")
    assert main(["--url", store_url, "--path", "t"]) == 0
    assert capsys.readouterr().out.startswith("20 rows")


def test_read_job_refuses_an_unknown_snapshot_name(spark: SparkSession, store_url: str) -> None:
    store = sc.open_store(store_url)
    sc.Table.create("t", store).close()
    with pytest.raises(CheckpointNotFound, match="no-such"):
        main(["--url", store_url, "--path", "t", "--checkpoint", "no-such"])
