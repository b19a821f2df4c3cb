"""Reading a sharded table into Spark: one partition per SST range, latest or at a snapshot."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from slatedb_core.keys import KeyRange
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions
from slatedb_core.store.url import open_store
from slatedb_core.table import Table
from spark_jobs.read import read_table, size_cuts, sst_cuts, sst_sizes

pytestmark = pytest.mark.spark

TABLE = "t"


def fill(store_url: str, n: int, tag: bytes) -> dict[bytes, bytes]:
    """``n`` rows per shard written by bulk ingest in small SSTs (many partitions to read)."""
    store = open_store(store_url)
    rows = {b"k%04d" % i: tag + b"%d" % i for i in range(n)}
    with Table.open(TABLE, store) as t:
        for i in range(len(t.shards)):
            mine = {k: v for k, v in rows.items() if t.shards[i].contains(k)}
            with t.writer(i, DbOptions(l0_sst_size_bytes=1024)) as db:
                db.bulk_ingest(pa.table({"key": list(mine), "value": list(mine.values())}))
    return rows


def collect(df: object) -> dict[bytes, bytes]:
    rows = df.collect()  # type: ignore[attr-defined]
    out = {bytes(r["key"]): bytes(r["value"]) for r in rows}
    assert len(out) == len(rows), "a key came from two partitions"
    return out


def test_the_table_reads_back_with_one_partition_per_sst(
    spark: SparkSession, store_url: str
) -> None:
    store = open_store(store_url)
    Table.create(TABLE, store, split_points=[b"k0200"]).close()
    rows = fill(store_url, 400, b"v")
    with Table.open(TABLE, store) as t:
        t.writer(0).close()
        with t.writer(1) as db:
            db.delete(b"k0300")
            db.flush_memtable()
    del rows[b"k0300"]
    df = read_table(spark, store_url, TABLE)
    ssts = 0
    with Table.open(TABLE, store) as t:
        for s in t.shards:
            m = ManifestStore(store, s.db_path).read_latest().manifest
            ssts += len(sst_cuts(m, s.key_range, 1000)) + 1
    assert ssts > 4
    assert df.rdd.getNumPartitions() == ssts
    assert collect(df) == rows
    assert [bytes(r["key"]) for r in df.collect()] == sorted(rows)


def test_a_snapshot_read_ignores_later_writes_and_rescales(
    spark: SparkSession, store_url: str
) -> None:
    store = open_store(store_url)
    Table.create(TABLE, store, split_points=[b"k0200"]).close()
    before = fill(store_url, 400, b"old")
    df = read_table(spark, store_url, TABLE, checkpoint="create")
    fill(store_url, 400, b"new")
    with Table.open(TABLE, store) as t:
        t.split(1, at=b"k0300")
    assert collect(df) == before
    assert collect(read_table(spark, store_url, TABLE)) == {
        k: b"new" + v[3:] for k, v in before.items()
    }


def test_sst_cuts_stay_inside_the_range_and_thin_out() -> None:
    from ulid import ULID

    from slatedb_core.manifest.model import CompactedSst, Manifest, SstInfo, SstView

    ssts = [
        CompactedSst(ULID(), SstInfo(first_key=b"k%03d" % i, last_key=b"k%03d~" % i))
        for i in range(100)
    ]
    m = Manifest(ssts=tuple(ssts), l0=tuple(SstView(s.id, s.id) for s in ssts))
    cuts = sst_cuts(m, KeyRange(b"k010", b"k050"), 1000)
    assert cuts == [b"k%03d" % i for i in range(11, 50)]
    thin = sst_cuts(m, KeyRange(), 10)
    assert len(thin) == 9 and thin == sorted(thin)


@pytest.mark.s3
def test_ingest_and_read_back_through_s3(spark: SparkSession, s3_url: str) -> None:
    """The executors reach the same bucket (moto on 127.0.0.1) as the driver."""
    from spark_jobs.ingest import ingest

    store = open_store(s3_url)
    Table.create(TABLE, store, split_points=[b"k0100"]).close()
    rows = {b"k%04d" % i: b"v%d" % i for i in range(200)}
    df = spark.createDataFrame(list(rows.items()), "key binary, value binary")
    stats = ingest(df, s3_url, TABLE, value_column="value")
    assert stats.rows == 200 and stats.shards_written == 2
    assert collect(read_table(spark, s3_url, TABLE, checkpoint="create")) == rows


def test_size_cuts_split_overlapping_l0_ssts_evenly(store_url: str) -> None:
    """Eight L0 SSTs that each span the whole shard (one per input partition of an ingest) are
    cut by estimated bytes into even ranges; SST starts alone would give one partition holding
    nearly everything."""
    store = open_store(store_url)
    Table.create(TABLE, store).close()
    keys = [b"k%05d" % i for i in range(8000)]
    with Table.open(TABLE, store) as t, t.writer(0) as db:
        for j in range(8):
            mine = keys[j::8]
            db.bulk_ingest(pa.table({"key": mine, "value": [b"x" * 50] * len(mine)}))
        path = t.shards[0].db_path
    m = ManifestStore(store, path).read_latest().manifest
    assert len(m.l0) == 8
    total = sum(n for _, n in sst_sizes(m))
    ranges = size_cuts(m, KeyRange(), total // 4, 100)
    assert len(ranges) == 4
    assert ranges[0].start is None and ranges[-1].end is None
    assert all(a.end == b.start for a, b in itertools.pairwise(ranges))
    counts = [sum(1 for k in keys if r.contains(k)) for r in ranges]
    assert all(1500 <= c <= 2500 for c in counts), counts
    assert size_cuts(m, KeyRange(), total // 4, 2) == size_cuts(m, KeyRange(), total // 2, 100)
    narrow = KeyRange(b"k01000", b"k01010")
    assert size_cuts(m, narrow, total // 4, 100) == [narrow]
    assert size_cuts(m, KeyRange(b"k1", b"k1"), 1, 100) == []
    middle = size_cuts(m, KeyRange(b"k02000", b"k06000"), total // 4, 100)
    # about half the bytes (decimal keys are not uniform as numbers: an estimate)
    assert len(middle) in (2, 3) and middle[0].start == b"k02000" and middle[-1].end == b"k06000"
