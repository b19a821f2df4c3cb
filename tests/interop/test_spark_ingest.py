"""A Spark ingest (:func:`spark_jobs.ingest.ingest`: SSTs encoded in Spark tasks, attached to each
shard's database with ``ingest_ssts``) read by SlateDB 0.17's ``Db`` and ``DbReader``, shard by
shard (docs/format.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import SparkSession

from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from spark_jobs.ingest import ingest
from spark_jobs.session import SessionOptions, get_session
from tests.interop.expect import Model, check_reads
from tests.interop.oracle import Oracle, settings

# slow: Spark's start and two jobs take 30-70 s on the shared 2 cores (`make test-slow`, CI)
pytestmark = [pytest.mark.slatedb, pytest.mark.spark, pytest.mark.slow]

TABLE = "t"
SPLITS = [b"k0300", b"k0600"]


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    """The same local session as tests/spark (getOrCreate: one per process)."""
    session = get_session(
        SessionOptions(master="local[2,4]", app_name="slatedb-tests", shuffle_partitions=4)
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session


def test_spark_ingest_read_by_slatedb(
    spark: SparkSession, oracle: Oracle, store: ObjectStore, root: Path
) -> None:
    Table.create(TABLE, store, split_points=SPLITS).close()
    data: dict[bytes, bytes] = {b"k%04d" % i: b"v%d" % i * (i % 7) for i in range(900)}
    df = spark.createDataFrame(list(data.items()), "key binary, value binary")
    stats = ingest(df, root.as_uri(), TABLE, value_column="value")
    assert stats.rows == 900 and stats.shards_written == 3
    # a writer of one shard between the jobs: its rows carry seqs of that database
    with Table.open(TABLE, store) as t, t.writer(0) as db:
        for i in range(0, 300, 4):
            db.put(b"k%04d" % i, b"writer%d" % i)
            data[b"k%04d" % i] = b"writer%d" % i
    # a second job over the same keys: upserts and deletes (its SSTs land on top of the first's
    # and the writer's)
    changes = [(b"k%04d" % i, b"new%d" % i, i % 3 == 0) for i in range(0, 1200, 2)]
    df = spark.createDataFrame(changes, "key binary, value binary, deleted boolean")
    ingest(df, root.as_uri(), TABLE, value_column="value", tombstone_column="deleted")
    for key, value, deleted in changes:
        if deleted:
            data.pop(key, None)
        else:
            data[key] = value
    with Table.open(TABLE, store) as t:
        shards = list(t.shards)
    for shard in shards:
        model = Model()
        model.rows = {k: v for k, v in data.items() if shard.contains(k)}
        model.rows.update({k: None for k, _, d in changes if d and shard.contains(k)})
        reader = oracle.open_reader(shard.db_path)
        check_reads(model, reader.get, reader.scan, who=f"SlateDB DbReader of {shard.db_path}")
        reader.shutdown()
        w = oracle.open_db(shard.db_path, settings(compactor=False))
        check_reads(model, w.get, w.scan, who=f"SlateDB Db of {shard.db_path}")
        w.shutdown()
