"""The Spark compaction keeps SlateDB's data model (issue 38, items 1-3): before the fix,
``python -m spark_jobs.compact`` had no guard, and after it a live SlateDB ``DbSnapshot``
returned no rows and every TTL row had lost its ``expire_ts``. Now its tasks run the same
retention as our single-process compactor, with the policy the driver computed once."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from slatedb_core.lsm.merge_operator import string_append
from slatedb_core.lsm.retention import compaction_retention, retain_stream
from slatedb_core.lsm.versions_merge import merge_versions
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.store.url import open_store
from spark_jobs.compact import compact
from tests.interop.compaction_history_steps import COMPACT, KEYS, wait_for_tree, write_history
from tests.interop.oracle import DB, Oracle
from tests.interop.oracle_compaction import (
    batch_rows,
    open_merge_db,
    open_merge_reader,
    rows_batch,
    snapshot_get,
    sst_rows,
    tree_rows,
)

pytestmark = [pytest.mark.spark, pytest.mark.slatedb]


def test_spark_compaction_keeps_a_slatedb_snapshot_ttls_and_operands(
    spark: SparkSession, tmp_path: Path
) -> None:
    root = tmp_path / "store"
    root.mkdir()
    oracle = Oracle(root)
    try:
        store = open_store(root)
        w = open_merge_db(oracle)
        _, snap = write_history(w)
        read = snapshot_get(oracle, snap)
        seen = {k: read(k) for k in KEYS}
        planned = ManifestStore(store, DB).read_latest().manifest
        sources = [
            [rows_batch(sst_rows(store, f"{DB}/compacted/{v.sst_id}.sst"))] for v in planned.l0
        ]
        policy = compaction_retention(planned, drop_tombstones=True, merge_operator=string_append)
        want = [r for b in retain_stream(merge_versions(sources), policy) for r in batch_rows(b)]

        stats = compact(spark, root.as_uri(), DB, subcompactions=3, options=COMPACT)
        assert stats is not None and stats.compactions == 1
        tree = tree_rows(store)
        assert tree["l0"] == [] and tree["run 0"] == want
        assert any(r[0] == b"c" and r[4] is not None for r in want)  # the live TTL row kept it

        wait_for_tree(w)
        assert {k: read(k) for k in KEYS} == {**seen, b"b": None}
        latest = {b"a": None, b"b": None, b"c": b"c-long", b"d": b"d0", b"k": b"v1", b"m": b"xyz"}
        assert {k: w.get(k) for k in KEYS} == latest
        r = open_merge_reader(oracle)
        assert {k: r.get(k) for k in KEYS} == latest
    finally:
        oracle.close()
