"""Compaction on Spark: subcompactions as tasks, one commit under the driver's compactor epoch."""

from __future__ import annotations

import functools
from datetime import timedelta

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from slatedb_core.compactor import Compactor, read_latest_state
from slatedb_core.compactor.distributed import DistributedCompactor
from slatedb_core.errors import Fenced
from slatedb_core.gc import run_gc_once
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CompactorOptions, DbOptions, GarbageCollectorOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db
from spark_jobs.compact import compact, run_subcompactions

pytestmark = pytest.mark.spark

PATH = "db"
OPTIONS = CompactorOptions(l0_trigger=2, max_sst_size_bytes=16 * 1024, block_size=2048)


def fill(store: ObjectStore, batches: int = 4, rows: int = 2000) -> dict[bytes, bytes]:
    expected: dict[bytes, bytes | None] = {}
    with Db.open(PATH, store, DbOptions(l0_sst_size_bytes=16 * 1024)) as db:
        for b in range(batches):
            ks = [b"k%06d" % i for i in range(b * rows // 2, b * rows // 2 + rows)]
            vals = [None if i % 17 == 0 else b"v%d-%d" % (b, i) for i in range(len(ks))]
            db.bulk_ingest(pa.table({"key": pa.array(ks), "value": pa.array(vals, pa.binary())}))
            expected.update(zip(ks, vals, strict=True))
    return {k: v for k, v in expected.items() if v is not None}


def contents(store: ObjectStore) -> dict[bytes, bytes]:
    with Db.open(PATH, store) as db:
        return dict(db.scan())


def test_spark_compaction_merges_l0_into_one_sorted_run(
    spark: SparkSession, store_url: str
) -> None:
    store = open_store(store_url)
    expected = fill(store)
    stats = compact(spark, store_url, PATH, subcompactions=3, options=OPTIONS)
    assert stats is not None and stats.compactions == 1 and stats.subcompactions == 3
    m = ManifestStore(store, PATH).read_latest().manifest
    assert m.l0 == () and len(m.compacted) == 1
    assert len(m.compacted[0].views) == stats.output_ssts > 3
    assert stats.rows_out == len(expected)
    assert contents(store) == expected
    assert compact(spark, store_url, PATH, subcompactions=3, options=OPTIONS) is None


def test_a_stale_spark_compaction_is_fenced_and_collected(
    spark: SparkSession, store_url: str
) -> None:
    store = open_store(store_url)
    expected = fill(store)
    stale = DistributedCompactor(PATH, store, OPTIONS)
    plan = stale.plan(2)
    assert plan is not None
    results = run_subcompactions(spark, plan, functools.partial(open_store, store_url))
    written = {s.id for r in results for s in r.outputs}
    assert written
    Compactor(PATH, store, OPTIONS).close()  # another compactor takes over
    with pytest.raises(Fenced):
        stale.commit(plan, results)
    state = read_latest_state(store, PATH)
    assert state is not None
    record = state[1].get(plan.compaction_id)
    assert record is not None and record.status == "failed"
    run_gc_once(PATH, store, GarbageCollectorOptions(min_age=timedelta(0)))
    assert not any(store.exists(f"{PATH}/compacted/{i}.sst") for i in written)
    assert contents(store) == expected
    # the tasks of a compactor that was replaced before they ran stop at once
    with pytest.raises(Fenced):
        run_subcompactions(spark, plan, functools.partial(open_store, store_url))


def test_compact_table_compacts_every_shard(spark: SparkSession, store_url: str) -> None:
    from slatedb_core.table import Table
    from spark_jobs.compact import compact_table

    store = open_store(store_url)
    with Table.create("t", store, split_points=[b"m"]) as t:
        for i in range(2):
            for gen in range(3):
                with t.writer(i) as db:
                    base = b"a" if i == 0 else b"x"
                    db.bulk_ingest(
                        pa.table(
                            {
                                "key": [base + b"%03d" % k for k in range(50)],
                                "value": [b"g%d" % gen] * 50,
                            }
                        )
                    )
    by_shard = compact_table(spark, store_url, "t", subcompactions=2, options=OPTIONS)
    assert sorted(by_shard) == [0, 1]
    assert all(s is not None and s.rows_out == 50 for s in by_shard.values())
    with Table.open("t", store) as t:
        for shard in t.shards:
            assert ManifestStore(store, shard.db_path).read_latest().manifest.l0 == ()
        assert dict(t.scan()) == {
            base + b"%03d" % k: b"g2" for base in (b"a", b"x") for k in range(50)
        }
